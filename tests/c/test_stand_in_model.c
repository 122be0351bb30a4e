/* The stand-in driver's model of the real one, tested through the driver API alone (no hostfirst): ordering of
 * queued work (legacy default stream vs blocking and non-blocking streams, events, cuStreamWaitEvent), the
 * documented host synchronisation of copies, errors of queued work at the next synchronisation, sticky errors,
 * context checks, page protection in cuMemHostRegister, fork. If the stand-in stops being this strict, the
 * tests of hostfirst's CUDA code stop proving anything: this program is what fails then.
 *
 * The stricter behaviours of issue 23 (poisoned fresh memory, per-thread default streams, unvalidated stream
 * handles, device-wide frees and allocation barriers, refused registration, a foreign framework, latencies) are
 * checked on and, where a knob turns them off, off.
 *
 * Usage: test_stand_in_model SECTION   (order, errors, sticky, register, context, fork, strict, kind, refused,
 * foreign, latency, peer). Run by
 * tests/it/cuda_stub.rs with the stand-in on LD_LIBRARY_PATH; `order` runs in both modes and checks what each
 * mode must show (STAND_IN_DEFERRED decides). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#define EXPECT(cond) CHECK(cond)

#define EXPECT_CU(call, code)                                                                       \
    do {                                                                                            \
        int r_ = (call);                                                                            \
        if (r_ != (code)) {                                                                         \
            fprintf(stderr, "%s:%d: %s returned %d, expected %d\n", __FILE__, __LINE__, #call, r_, (int)(code)); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)
#define OK(call) EXPECT_CU(call, 0)

typedef unsigned long long dptr;
typedef void *handle;
static void *lib;

static void *sym(const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "the stand-in lacks %s\n", name);
        exit(1);
    }
    return f;
}

#define FN(ret, name, args) static ret(*name) args;
FN(int, cuInit, (unsigned))
FN(int, cuDevicePrimaryCtxRetain, (handle *, int))
FN(int, cuCtxSetCurrent, (handle))
FN(int, cuCtxSynchronize, (void))
FN(int, cuMemAlloc_v2, (dptr *, size_t))
FN(int, cuMemFree_v2, (dptr))
FN(int, cuMemHostAlloc, (void **, size_t, unsigned))
FN(int, cuMemFreeHost, (void *))
FN(int, cuMemHostRegister_v2, (void *, size_t, unsigned))
FN(int, cuMemHostUnregister, (void *))
FN(int, cuMemcpyHtoD_v2, (dptr, const void *, size_t))
FN(int, cuMemcpyDtoH_v2, (void *, dptr, size_t))
FN(int, cuMemcpyDtoD_v2, (dptr, dptr, size_t))
FN(int, cuMemcpyHtoDAsync_v2, (dptr, const void *, size_t, handle))
FN(int, cuMemcpyDtoHAsync_v2, (void *, dptr, size_t, handle))
FN(int, cuStreamCreate, (handle *, unsigned))
FN(int, cuStreamDestroy_v2, (handle))
FN(int, cuStreamSynchronize, (handle))
FN(int, cuStreamWaitEvent, (handle, handle, unsigned))
FN(int, cuEventCreate, (handle *, unsigned))
FN(int, cuEventRecord, (handle, handle))
FN(int, cuEventQuery, (handle))
FN(int, cuEventSynchronize, (handle))
FN(int, cuEventDestroy_v2, (handle))
FN(int, cuDeviceGetAttribute, (int *, int, int))
FN(int, cuMemcpyPeerAsync, (dptr, handle, dptr, handle, size_t, handle))

static unsigned long long counter(const char *name) {
    unsigned long long (*f)(void);
    *(void **)&f = sym(name);
    return f();
}

#define LOAD(name) *(void **)&name = sym(#name)
static handle ctx;

static void setup(void) {
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    EXPECT(lib != NULL);
    LOAD(cuInit); LOAD(cuDevicePrimaryCtxRetain); LOAD(cuCtxSetCurrent); LOAD(cuCtxSynchronize);
    LOAD(cuMemAlloc_v2); LOAD(cuMemFree_v2); LOAD(cuMemHostAlloc); LOAD(cuMemFreeHost);
    LOAD(cuMemHostRegister_v2); LOAD(cuMemHostUnregister); LOAD(cuMemcpyHtoD_v2); LOAD(cuMemcpyDtoH_v2);
    LOAD(cuMemcpyDtoD_v2); LOAD(cuMemcpyHtoDAsync_v2); LOAD(cuMemcpyDtoHAsync_v2); LOAD(cuStreamCreate);
    LOAD(cuStreamDestroy_v2); LOAD(cuStreamSynchronize); LOAD(cuStreamWaitEvent); LOAD(cuEventCreate);
    LOAD(cuEventRecord); LOAD(cuEventQuery); LOAD(cuEventSynchronize); LOAD(cuEventDestroy_v2);
    LOAD(cuDeviceGetAttribute); LOAD(cuMemcpyPeerAsync);
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
}

enum { N = 4096 };

static int all(const unsigned char *p, unsigned char v) {
    for (size_t i = 0; i < N; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* Reads N bytes of device memory into page-locked `out` on stream s and waits for that stream. */
static void read_on(unsigned char *out, dptr src, handle s) {
    OK(cuMemcpyDtoHAsync_v2(out, src, N, s));
    OK(cuStreamSynchronize(s));
}

/* Queued work runs only at synchronisation points, in the order streams impose, and only as far as needed. */
static void order(void) {
    const char *mode = getenv("STAND_IN_DEFERRED");
    int deferred = mode && strcmp(mode, "0") != 0;
    dptr a, b;
    unsigned char *host, *out;
    OK(cuMemAlloc_v2(&a, N));
    OK(cuMemAlloc_v2(&b, N));
    OK(cuMemHostAlloc((void **)&host, N, 1));
    OK(cuMemHostAlloc((void **)&out, N, 1));
    handle nb, blocking, x, ev, spin;
    OK(cuStreamCreate(&nb, 1)); /* CU_STREAM_NON_BLOCKING */
    OK(cuStreamCreate(&blocking, 0));
    OK(cuStreamCreate(&x, 1));
    OK(cuEventCreate(&ev, 0x1 | 0x2)); /* blocking sync, disable timing */
    OK(cuEventCreate(&spin, 0x2));

    /* Device memory starts uninitialised, as on a real GPU: give b known (zero) bytes first, so "stale" below
     * means zeros and not whatever malloc returned (valgrind flags reading those). */
    memset(host, 0, N);
    OK(cuMemcpyHtoD_v2(b, host, N));
    /* Synchronous host-to-device from page-locked memory: complete on return. */
    memset(host, 1, N);
    OK(cuMemcpyHtoD_v2(a, host, N));
    /* Device to device: returns at once, the copy queued on the legacy default stream. */
    OK(cuMemcpyDtoD_v2(b, a, N));
    /* A non-blocking stream does not wait for the legacy stream: stale bytes when deferred. */
    memset(out, 0, N);
    read_on(out, b, nb);
    EXPECT(deferred ? all(out, 0) : all(out, 1));
    /* A blocking stream does. */
    read_on(out, b, blocking);
    EXPECT(all(out, 1));

    /* Work on x is not seen by another stream without an event wait... */
    memset(host, 3, N);
    OK(cuMemcpyHtoDAsync_v2(a, host, N, x));
    OK(cuEventRecord(ev, x));
    read_on(out, a, blocking);
    EXPECT(deferred ? all(out, 1) : all(out, 3));
    /* ...and is with one (counted for the DLPack stream handshake). */
    unsigned long long waits = counter("stand_in_stream_wait_events");
    OK(cuStreamWaitEvent(nb, ev, 0));
    EXPECT(counter("stand_in_stream_wait_events") == waits + 1);
    read_on(out, a, nb);
    EXPECT(all(out, 3));

    /* Page-locked sources are read when the copy runs, so the host must not touch them before. */
    memset(host, 4, N);
    OK(cuMemcpyHtoDAsync_v2(a, host, N, x));
    OK(cuEventRecord(ev, x));
    memset(host, 5, N); /* a bug: the copy has not been waited for */
    OK(cuEventSynchronize(ev));
    OK(cuMemcpyDtoH_v2(out, a, N));
    EXPECT(deferred ? all(out, 5) : all(out, 4));
    /* Pageable sources are staged at the call: later writes do not matter. */
    static unsigned char pageable[N];
    memset(pageable, 6, N);
    OK(cuMemcpyHtoDAsync_v2(a, pageable, N, x));
    memset(pageable, 7, N);
    OK(cuStreamSynchronize(x));
    OK(cuMemcpyDtoH_v2(out, a, N));
    EXPECT(all(out, 6));
    /* An event query completes the work only when it says so. */
    OK(cuMemcpyHtoDAsync_v2(b, host, N, x));
    OK(cuEventRecord(ev, x));
    int q, polls = 0;
    while ((q = cuEventQuery(ev)) == 600) polls++;
    OK(q);
    EXPECT(deferred ? polls >= 1 || getenv("STAND_IN_SEED") : polls == 0);
    /* Waits: a blocking-sync event does not spin, a default event and stream synchronisation do. */
    unsigned long long spins = counter("stand_in_spinning_waits");
    OK(cuEventSynchronize(ev));
    EXPECT(counter("stand_in_spinning_waits") == spins);
    OK(cuEventRecord(spin, x));
    OK(cuEventSynchronize(spin));
    OK(cuStreamSynchronize(x));
    EXPECT(counter("stand_in_spinning_waits") == spins + 2);
    /* Freeing page-locked memory waits for queued work that reads it. */
    memset(host, 8, N);
    OK(cuMemcpyHtoDAsync_v2(b, host, N, x));
    unsigned long long implicit = counter("stand_in_implicit_syncs");
    OK(cuMemFreeHost(host));
    EXPECT(counter("stand_in_implicit_syncs") == implicit + (deferred ? 1 : 0));
    OK(cuMemcpyDtoH_v2(out, b, N));
    EXPECT(all(out, 8));
    if (deferred) EXPECT(counter("stand_in_deferred_ops") > 0);
    OK(cuCtxSynchronize());
    EXPECT(counter("stand_in_queued_ops") == 0);
    OK(cuEventDestroy_v2(ev));
    OK(cuEventDestroy_v2(spin));
    OK(cuStreamDestroy_v2(nb));
    OK(cuStreamDestroy_v2(blocking));
    OK(cuStreamDestroy_v2(x));
    OK(cuMemFreeHost(out));
    OK(cuMemFree_v2(a));
    OK(cuMemFree_v2(b));
}

/* A device buffer, a page-locked host buffer and a non-blocking stream, N bytes each. */
static void copy_setup(dptr *a, unsigned char **host, handle *s) {
    OK(cuMemAlloc_v2(a, N));
    OK(cuMemHostAlloc((void **)host, N, 1));
    OK(cuStreamCreate(s, 1));
}

/* A failing queued copy (non-sticky code): the enqueue succeeds, the next synchronisation reports it once. Run
 * deferred with STAND_IN_FAIL_COPY_AFTER=0 STAND_IN_COPY_ERROR=CUDA_ERROR_INVALID_VALUE. */
static void errors(void) {
    dptr a;
    unsigned char *host;
    handle s;
    copy_setup(&a, &host, &s);
    OK(cuMemcpyHtoDAsync_v2(a, host, N, s));
    EXPECT_CU(cuStreamSynchronize(s), 1);
    OK(cuStreamSynchronize(s)); /* reported once: the context is usable */
    handle s2;
    OK(cuStreamCreate(&s2, 1));
    OK(cuStreamDestroy_v2(s2));
    OK(cuStreamDestroy_v2(s));
    OK(cuMemFreeHost(host));
    OK(cuMemFree_v2(a));
}

/* A sticky error poisons the context: every later call fails with it, frees too (the resources die with the
 * context). Run with STAND_IN_FAIL_COPY_AFTER=0 (CUDA_ERROR_ILLEGAL_ADDRESS), in either mode. */
static void sticky(void) {
    dptr a;
    unsigned char *host;
    handle s, ev;
    copy_setup(&a, &host, &s);
    OK(cuEventCreate(&ev, 0x3));
    int r = cuMemcpyHtoDAsync_v2(a, host, N, s);
    const char *mode = getenv("STAND_IN_DEFERRED");
    if (mode && strcmp(mode, "0") != 0) {
        OK(r); /* queued: the error comes with the next synchronisation */
        EXPECT_CU(cuEventRecord(ev, s), 0);
        EXPECT_CU(cuEventSynchronize(ev), 700);
    } else {
        EXPECT_CU(r, 700);
    }
    dptr b;
    handle s2;
    EXPECT_CU(cuMemAlloc_v2(&b, 16), 700);
    EXPECT_CU(cuStreamCreate(&s2, 0), 700);
    EXPECT_CU(cuMemcpyDtoH_v2(host, a, 16), 700);
    EXPECT_CU(cuCtxSynchronize(), 700);
    EXPECT_CU(cuEventQuery(ev), 700);
    EXPECT_CU(cuEventDestroy_v2(ev), 700);
    EXPECT_CU(cuStreamDestroy_v2(s), 700);
    EXPECT_CU(cuMemFreeHost(host), 700);
    EXPECT_CU(cuMemFree_v2(a), 700);
    EXPECT(counter("stand_in_live_allocations") == 0 && counter("stand_in_live_pinned") == 0);
    EXPECT(counter("stand_in_live_streams") == 0 && counter("stand_in_live_events") == 0);
}

/* cuMemHostRegister checks each page's protection against the flags. With STAND_IN_READ_ONLY_REGISTER=0 the
 * read-only flag itself is refused. */
static void reg(void) {
    long page = sysconf(_SC_PAGESIZE);
    const char *ro_knob = getenv("STAND_IN_READ_ONLY_REGISTER");
    int ro_supported = !(ro_knob && strcmp(ro_knob, "0") == 0);
    unsigned char *ro = mmap(NULL, (size_t)page * 2, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *rw = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(ro != MAP_FAILED && rw != MAP_FAILED);
    EXPECT_CU(cuMemHostRegister_v2(ro, (size_t)page, 0x1), 1); /* read-only pages, not registered read-only */
    EXPECT_CU(cuMemHostRegister_v2(ro, (size_t)page, 0x1 | 0x8), ro_supported ? 0 : 801);
    if (ro_supported) OK(cuMemHostUnregister(ro));
    OK(cuMemHostRegister_v2(rw, (size_t)page, 0x1));
    EXPECT_CU(cuMemHostRegister_v2(rw + 10, 10, 0x1), 712); /* shares a page */
    OK(cuMemHostUnregister(rw));
    munmap(rw + page, (size_t)page);
    EXPECT_CU(cuMemHostRegister_v2(rw, (size_t)page * 2, 0x1), 1); /* the second page is gone */
    EXPECT(counter("stand_in_live_registrations") == 0);
    munmap(ro, (size_t)page * 2);
    munmap(rw, (size_t)page);
}

/* Calls that need a current context fail without one. */
static void context(void) {
    OK(cuCtxSetCurrent(NULL));
    dptr a = 0;
    handle s = NULL, e = NULL;
    unsigned char buf[16];
    EXPECT_CU(cuMemAlloc_v2(&a, 16), 201);
    EXPECT_CU(cuStreamCreate(&s, 0), 201);
    EXPECT_CU(cuEventCreate(&e, 0), 201);
    EXPECT_CU(cuMemcpyHtoD_v2(a, buf, 16), 201);
    EXPECT_CU(cuCtxSynchronize(), 201);
    EXPECT_CU(cuStreamSynchronize(NULL), 201);
    EXPECT_CU(cuMemHostRegister_v2(buf, 16, 0), 201);
    OK(cuCtxSetCurrent(ctx));
    OK(cuMemAlloc_v2(&a, 16));
    OK(cuMemFree_v2(a));
}

/* After fork(), the child cannot use the driver the parent initialised. */
static void forked(void) {
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        dptr a;
        int r = cuMemAlloc_v2(&a, 16);
        _exit(r == 3 && counter("stand_in_calls_after_fork") == 1 ? 0 : 1);
    }
    int status = 0;
    EXPECT(waitpid(pid, &status, 0) == pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(counter("stand_in_calls_after_fork") == 0);
    dptr a;
    OK(cuMemAlloc_v2(&a, 16));
    OK(cuMemFree_v2(a));
}

static int knob(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Thread body: with the context current, queue an async copy on this thread's per-thread default stream. */
struct pt_arg {
    dptr dst;
    unsigned char *src;
};
static void *queue_on_per_thread(void *p) {
    struct pt_arg *a = p;
    OK(cuCtxSetCurrent(ctx));
    OK(cuMemcpyHtoDAsync_v2(a->dst, a->src, N, (handle)2));
    return NULL;
}

/* The strict defaults (run in both modes), or with `kind` (STAND_IN_POISON_FRESH=0 STAND_IN_PER_THREAD_STREAMS=0
 * STAND_IN_VALIDATE_STREAMS=1 STAND_IN_DEVICE_WIDE_SYNC=0) the old, kinder model. */
static void strict(void) {
    int deferred = knob("STAND_IN_DEFERRED", 0);
    int poison = knob("STAND_IN_POISON_FRESH", 1), distinct = knob("STAND_IN_PER_THREAD_STREAMS", 1);
    int validate = knob("STAND_IN_VALIDATE_STREAMS", 0), wide = knob("STAND_IN_DEVICE_WIDE_SYNC", 1);
    dptr a, b, c;
    unsigned char *host, *out;
    OK(cuMemAlloc_v2(&a, N));
    OK(cuMemAlloc_v2(&b, N));
    OK(cuMemHostAlloc((void **)&host, N, 1));
    OK(cuMemHostAlloc((void **)&out, N, 1));
    /* Fresh device memory is a non-zero pattern. */
    OK(cuMemcpyDtoH_v2(out, a, N));
    EXPECT(poison ? all(out, 0xA5) : 1);
    EXPECT(counter("stand_in_poison_byte") == (poison ? 0xA5u : 0u));
    /* Per-thread default streams: two threads' queued work is on two streams; each thread's synchronisation of
     * stream 2 waits for its own only. */
    memset(host, 7, N);
    struct pt_arg x = {a, host}, y = {b, host};
    pthread_t t1, t2;
    EXPECT(pthread_create(&t1, NULL, queue_on_per_thread, &x) == 0 && pthread_join(t1, NULL) == 0);
    EXPECT(pthread_create(&t2, NULL, queue_on_per_thread, &y) == 0 && pthread_join(t2, NULL) == 0);
    EXPECT(counter("stand_in_per_thread_streams") == (distinct ? 2u : 0u));
    if (deferred) {
        EXPECT(counter("stand_in_queued_ops") >= 2);
        OK(cuStreamSynchronize((handle)2)); /* this thread's own stream: empty (or, kinder, the legacy one) */
        EXPECT(counter("stand_in_queued_ops") == (distinct ? 2u : 0u));
        /* The legacy stream is ordered after every blocking stream, per-thread ones included. */
        OK(cuStreamSynchronize(NULL));
        EXPECT(counter("stand_in_queued_ops") == 0);
    }
    OK(cuMemcpyDtoH_v2(out, b, N));
    EXPECT(all(out, 7));
    /* Frees wait for the whole device, allocations too: queued work on an unrelated buffer runs. */
    handle nb;
    OK(cuStreamCreate(&nb, 1));
    memset(host, 9, N);
    OK(cuMemcpyHtoDAsync_v2(a, host, N, nb));
    OK(cuMemFree_v2(b));
    EXPECT(counter("stand_in_queued_ops") == (deferred && !wide ? 1u : 0u));
    OK(cuMemcpyHtoDAsync_v2(a, host, N, nb));
    OK(cuMemAlloc_v2(&c, N));
    EXPECT(counter("stand_in_queued_ops") == (deferred && !wide ? 2u : 0u));
    OK(cuStreamSynchronize(nb));
    /* A handle that names no live stream: poisons the context (undefined behaviour on hardware), or, kinder,
     * CUDA_ERROR_INVALID_HANDLE. A destroyed stream is the same. */
    OK(cuStreamDestroy_v2(nb));
    EXPECT_CU(cuMemcpyHtoDAsync_v2(a, host, N, nb), validate ? 400 : 700);
    if (validate) {
        OK(cuMemFree_v2(c));
        OK(cuMemFree_v2(a));
        OK(cuMemFreeHost(host));
        OK(cuMemFreeHost(out));
    } else {
        EXPECT(counter("stand_in_poisoned_by_streams") == 1);
        EXPECT_CU(cuMemAlloc_v2(&b, 16), 700);
        EXPECT_CU(cuMemFree_v2(c), 700);
        EXPECT_CU(cuMemFree_v2(a), 700);
        EXPECT_CU(cuMemFreeHost(host), 700);
        EXPECT_CU(cuMemFreeHost(out), 700);
    }
}

/* Registration refused: STAND_IN_REGISTER_ERROR=800 (CUDA_ERROR_NOT_PERMITTED), or STAND_IN_HOST_REGISTER=0
 * (the attribute says 0 and registration is CUDA_ERROR_NOT_SUPPORTED). */
static void refused(void) {
    int supported = knob("STAND_IN_HOST_REGISTER", 1), v = -1;
    OK(cuDeviceGetAttribute(&v, 99, 0)); /* CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED */
    EXPECT(v == supported);
    static unsigned char buf[1 << 16];
    EXPECT_CU(cuMemHostRegister_v2(buf, sizeof buf, 0x1), supported ? knob("STAND_IN_REGISTER_ERROR", 0) : 801);
    EXPECT(counter("stand_in_live_registrations") == 0);
}

/* STAND_IN_FOREIGN=1: another user of the primary context queued its own work at the retain. Deferred, it runs
 * when the legacy stream or an allocation needs it; with STAND_IN_FOREIGN_ERROR=700 it poisons the context. */
static void foreign(void) {
    int deferred = knob("STAND_IN_DEFERRED", 0), error = knob("STAND_IN_FOREIGN_ERROR", 0);
    EXPECT(counter("stand_in_foreign_submissions") == 1);
    EXPECT(counter("stand_in_foreign_ops_run") == (deferred ? 0u : 1u));
    EXPECT(counter("stand_in_queued_ops") == 0); /* not hostfirst's */
    dptr a;
    if (error) {
        EXPECT_CU(cuMemAlloc_v2(&a, N), error);
        EXPECT_CU(cuStreamSynchronize(NULL), error);
        return;
    }
    OK(cuMemAlloc_v2(&a, N)); /* a barrier: the foreign work ran */
    EXPECT(counter("stand_in_foreign_ops_run") == 1);
    unsigned long long (*submit)(int);
    *(void **)&submit = sym("stand_in_foreign_submit");
    EXPECT(submit(0) == 0);
    handle nb;
    unsigned char *host;
    OK(cuMemHostAlloc((void **)&host, N, 1));
    OK(cuStreamCreate(&nb, 1));
    OK(cuMemcpyHtoDAsync_v2(a, host, N, nb));
    OK(cuStreamSynchronize(nb)); /* a non-blocking stream never waits for the framework */
    EXPECT(counter("stand_in_foreign_ops_run") == (deferred ? 1u : 2u));
    OK(cuStreamSynchronize(NULL)); /* the legacy stream does */
    EXPECT(counter("stand_in_foreign_ops_run") == 2);
    OK(cuStreamDestroy_v2(nb));
    OK(cuMemFreeHost(host));
    OK(cuMemFree_v2(a));
}

/* Latency knobs: STAND_IN_WAKEUP_US=30000, STAND_IN_REGISTER_MS_PER_GIB=2000 (64 MiB: >= 125 ms); the context
 * creation (STAND_IN_CONTEXT_CREATE_MS=40) is timed around setup() in main. */
static void latency(double setup_s) {
    EXPECT(setup_s >= knob("STAND_IN_CONTEXT_CREATE_MS", 0) / 1000.0);
    double t = now();
    OK(cuStreamSynchronize(NULL));
    EXPECT(now() - t >= knob("STAND_IN_WAKEUP_US", 0) / 1e6);
    size_t n = 64u << 20;
    unsigned char *p = malloc(n);
    EXPECT(p != NULL);
    t = now();
    OK(cuMemHostRegister_v2(p, n, 0x1));
    EXPECT(now() - t >= knob("STAND_IN_REGISTER_MS_PER_GIB", 0) / 1000.0 / 16.0 * 0.99);
    OK(cuMemHostUnregister(p));
    free(p);
}

/* Deferred, two devices: cuMemcpyPeerAsync is ordered by its own stream only, not after the source context's
 * legacy work (STAND_IN_PEER_LEGACY_WAIT=1: the old model, where it waited). */
static void peer(void) {
    int waits = knob("STAND_IN_PEER_LEGACY_WAIT", 0);
    handle ctx1, nb1;
    dptr src, dst;
    unsigned char *host, *out;
    OK(cuMemAlloc_v2(&src, N));
    OK(cuMemHostAlloc((void **)&host, N, 1));
    OK(cuMemHostAlloc((void **)&out, N, 1));
    memset(host, 3, N);
    OK(cuMemcpyHtoDAsync_v2(src, host, N, NULL)); /* queued on device 0's legacy stream */
    OK(cuDevicePrimaryCtxRetain(&ctx1, 1));
    OK(cuCtxSetCurrent(ctx1));
    OK(cuMemAlloc_v2(&dst, N));
    OK(cuStreamCreate(&nb1, 1));
    OK(cuMemcpyPeerAsync(dst, ctx1, src, ctx, N, nb1));
    OK(cuStreamSynchronize(nb1));
    OK(cuMemcpyDtoH_v2(out, dst, N));
    EXPECT(waits ? all(out, 3) : all(out, 0xA5)); /* the source's pending write had not run */
    OK(cuStreamDestroy_v2(nb1));
    OK(cuMemFree_v2(dst));
    OK(cuCtxSetCurrent(ctx));
    OK(cuMemFree_v2(src));
    OK(cuMemFreeHost(host));
    OK(cuMemFreeHost(out));
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    double t0 = now();
    setup();
    double setup_s = now() - t0;
    if (!strcmp(argv[1], "order")) order();
    else if (!strcmp(argv[1], "errors")) errors();
    else if (!strcmp(argv[1], "sticky")) sticky();
    else if (!strcmp(argv[1], "register")) reg();
    else if (!strcmp(argv[1], "context")) context();
    else if (!strcmp(argv[1], "fork")) forked();
    else if (!strcmp(argv[1], "strict") || !strcmp(argv[1], "kind")) strict();
    else if (!strcmp(argv[1], "refused")) refused();
    else if (!strcmp(argv[1], "peer")) peer();
    else if (!strcmp(argv[1], "foreign")) foreign();
    else if (!strcmp(argv[1], "latency")) latency(setup_s);
    else EXPECT(!"unknown section");
    puts("ok");
    return 0;
}
