/* The independent ceiling of the GPU harness (issue 23): pinned host <-> device bandwidth measured with the CUDA
 * driver alone, no hostfirst code on the path, so a bug shared by hostfirst's own "ceiling" and its puts cannot
 * cancel out. Built on the GPU machine by benches/gpu/run.py (cc -O2 ceiling.c -ldl; no CUDA headers needed: the
 * driver is opened with dlopen, as hostfirst does). Not a test.
 *
 *   ceiling [BYTES [REPS]]     default 1 GiB, 5 timed copies after one warm-up, each direction
 *
 * Prints one JSON line: bytes, best and median GB/s (1e9 B/s) host-to-device and device-to-host, each copy's
 * seconds. cuMemHostAlloc'd (page-locked) host memory, cuMemAlloc'd device memory, synchronous cuMemcpyHtoD_v2 /
 * cuMemcpyDtoH_v2 (complete on return for page-locked memory), the primary context of device 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef unsigned long long dptr;
static void *lib;

static void *sym(const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        printf("{\"op\":\"ceiling\",\"failed\":\"the driver lacks %s\"}\n", name);
        exit(1);
    }
    return f;
}

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        int r_ = (call);                                                                            \
        if (r_ != 0) {                                                                              \
            printf("{\"op\":\"ceiling\",\"failed\":\"%s returned CUDA error %d\"}\n", #call, r_);     \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 30;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1 || reps > 100 || n == 0) return 2;
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        printf("{\"op\":\"ceiling\",\"failed\":\"libcuda.so.1: %s\"}\n", dlerror());
        return 1;
    }
    int (*cuInit)(unsigned);
    int (*cuDeviceGet)(int *, int);
    int (*cuDevicePrimaryCtxRetain)(void **, int);
    int (*cuCtxSetCurrent)(void *);
    int (*cuMemHostAlloc)(void **, size_t, unsigned);
    int (*cuMemFreeHost)(void *);
    int (*cuMemAlloc_v2)(dptr *, size_t);
    int (*cuMemFree_v2)(dptr);
    int (*cuMemcpyHtoD_v2)(dptr, const void *, size_t);
    int (*cuMemcpyDtoH_v2)(void *, dptr, size_t);
    *(void **)&cuInit = sym("cuInit");
    *(void **)&cuDeviceGet = sym("cuDeviceGet");
    *(void **)&cuDevicePrimaryCtxRetain = sym("cuDevicePrimaryCtxRetain");
    *(void **)&cuCtxSetCurrent = sym("cuCtxSetCurrent");
    *(void **)&cuMemHostAlloc = sym("cuMemHostAlloc");
    *(void **)&cuMemFreeHost = sym("cuMemFreeHost");
    *(void **)&cuMemAlloc_v2 = sym("cuMemAlloc_v2");
    *(void **)&cuMemFree_v2 = sym("cuMemFree_v2");
    *(void **)&cuMemcpyHtoD_v2 = sym("cuMemcpyHtoD_v2");
    *(void **)&cuMemcpyDtoH_v2 = sym("cuMemcpyDtoH_v2");
    int dev = 0;
    void *ctx = NULL, *host = NULL;
    dptr d = 0;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemHostAlloc(&host, n, 0));
    memset(host, 0x5a, n); /* fault every page in before timing */
    CHECK(cuMemAlloc_v2(&d, n));
    double h2d[100], d2h[100];
    CHECK(cuMemcpyHtoD_v2(d, host, n));
    for (int i = 0; i < reps; i++) {
        double t = now();
        CHECK(cuMemcpyHtoD_v2(d, host, n));
        h2d[i] = now() - t;
    }
    CHECK(cuMemcpyDtoH_v2(host, d, n));
    for (int i = 0; i < reps; i++) {
        double t = now();
        CHECK(cuMemcpyDtoH_v2(host, d, n));
        d2h[i] = now() - t;
    }
    int ok = ((unsigned char *)host)[n - 1] == 0x5a;
    printf("{\"op\":\"ceiling\",\"impl\":\"c-cuMemcpy-pinned\",\"bytes\":%zu,\"reps\":%d,\"round_trip_ok\":%s,\"h2d_s\":[",
           n, reps, ok ? "true" : "false");
    for (int i = 0; i < reps; i++) printf("%s%.9f", i ? "," : "", h2d[i]);
    printf("],\"d2h_s\":[");
    for (int i = 0; i < reps; i++) printf("%s%.9f", i ? "," : "", d2h[i]);
    qsort(h2d, (size_t)reps, sizeof h2d[0], cmp);
    qsort(d2h, (size_t)reps, sizeof d2h[0], cmp);
    printf("],\"h2d_gbps_best\":%.3f,\"h2d_gbps_median\":%.3f,\"d2h_gbps_best\":%.3f,\"d2h_gbps_median\":%.3f}\n",
           (double)n / h2d[0] / 1e9, (double)n / h2d[reps / 2] / 1e9, (double)n / d2h[0] / 1e9,
           (double)n / d2h[reps / 2] / 1e9);
    CHECK(cuMemFree_v2(d));
    CHECK(cuMemFreeHost(host));
    return ok ? 0 : 1;
}
