/* A stand-in for NVIDIA's libcufile (GPUDirect Storage), as tests/cuda_stub/stand_in_cuda.c stands in for the CUDA
 * driver: the entry points the gds census entry calls (core/src/device/gds.rs), with behaviour chosen per test by
 * the environment. Built by the tests (cc -shared -fPIC -Wall -Wextra -Werror, SONAME libcufile.so.0); reads no
 * file and moves no byte.
 *
 * Knobs (environment):
 *   STAND_IN_CUFILE_VERSION=N        what cuFileGetVersion reports (default 1130 = 1.13).
 *   STAND_IN_CUFILE_OPEN_ERROR=N     cuFileDriverOpen fails with this CUfileOpError (e.g. 5009,
 *                                    CU_FILE_DEVICE_NOT_SUPPORTED); default 0 (success).
 *   STAND_IN_CUFILE_CUDA_ERROR=N     the CUresult it reports beside that error (default 0).
 *   STAND_IN_CUFILE_LOG=PATH         appends one line per event: "loaded" (the library's constructor ran),
 *                                    "open", "open failed", "close" (so a test sees whether and when it was
 *                                    loaded, and that every successful open was closed). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

/* cufile.h's CUfileError_t: cuFile's error and the CUDA driver's. */
typedef struct {
    int err;
    int cu_err;
} CUfileError_t;

static void note(const char *what) {
    const char *log = getenv("STAND_IN_CUFILE_LOG");
    if (!log || !*log) return;
    FILE *f = fopen(log, "a");
    if (!f) return;
    fprintf(f, "%s\n", what);
    fclose(f);
}

__attribute__((constructor)) static void on_load(void) { note("loaded"); }

static int knob(const char *name, int fallback) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    return (int)strtol(v, NULL, 10);
}

EXPORT CUfileError_t cuFileGetVersion(int *version) {
    CUfileError_t r = {0, 0};
    if (!version) {
        r.err = 5030; /* an invalid argument: any non-zero error */
        return r;
    }
    *version = knob("STAND_IN_CUFILE_VERSION", 1130);
    return r;
}

EXPORT CUfileError_t cuFileDriverOpen(void) {
    CUfileError_t r = {knob("STAND_IN_CUFILE_OPEN_ERROR", 0), knob("STAND_IN_CUFILE_CUDA_ERROR", 0)};
    note(r.err ? "open failed" : "open");
    return r;
}

EXPORT CUfileError_t cuFileDriverClose_v2(void) {
    CUfileError_t r = {0, 0};
    note("close");
    return r;
}

EXPORT CUfileError_t cuFileDriverClose(void) { return cuFileDriverClose_v2(); }
