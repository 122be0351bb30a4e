/* C ABI of placement: puts (sync and async), options, progress and cancellation, buffers (describe, copy back,
 * to another device), NULLs, invalid device kinds, stale handles, strict mode, the cached-memory release.
 * argv[1]: a scratch directory. argv[2] (optional): "cuda" when a (stand-in) CUDA driver with 2 devices is
 * present, "small" when its device is too small for the tensor, "copy-error" when its copies fail (a copy error
 * that is not sticky). */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdint.h>
#include "check.h"

static char path[1200];
#define N 100000 /* u16 elements */
static uint16_t data[N];

static void write_file(const char *dir) {
    snprintf(path, sizeof path, "%s/place.safetensors", dir);
    char header[512];
    snprintf(header, sizeof header,
             "{\"tokens\":{\"dtype\":\"U16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
             "\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[%d,%d]}}",
             N, 2 * N, 2 * N, 2 * N);
    for (int i = 0; i < N; i++) data[i] = (uint16_t)(i * 7 + 3);
    const void *parts[] = {data};
    const size_t sizes[] = {sizeof data};
    write_safetensors(path, header, 1, parts, sizes);
}

typedef struct {
    uint64_t last, total;
    int calls, monotonic, cancel;
} progress_state;

static int32_t on_progress(uint64_t done, uint64_t total, void *user) {
    progress_state *p = user;
    if (done < p->last) p->monotonic = 0;
    p->last = done;
    p->total = total;
    p->calls++;
    return p->cancel;
}

/* Holds an async put open (the final progress call always comes) until the main thread opens the gate. */
static atomic_int gate_open;
static int32_t gated_progress(uint64_t done, uint64_t total, void *user) {
    (void)done;
    (void)total;
    (void)user;
    while (!atomic_load(&gate_open)) {
    }
    return 0;
}

static void check_round_trip(hostfirst_buffer *b, const void *expect, size_t n) {
    static unsigned char back[2 * N];
    CHECK(n <= sizeof back);
    memset(back, 0xee, sizeof back);
    if (n > 0) {
        CHECK_STATUS(hostfirst_buffer_copy_to_host(b, back, n - 1), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
        CHECK(back[0] == 0xee); /* nothing written */
    }
    CHECK_OK(hostfirst_buffer_copy_to_host(b, back, sizeof back));
    CHECK(memcmp(back, expect, n) == 0);
}

static void test_cpu(hostfirst_view *tokens, hostfirst_view *empty) {
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_put(tokens, &cpu, NULL, &b, NULL));
    hostfirst_buffer_info info = {.struct_size = sizeof info};
    CHECK_OK(hostfirst_buffer_describe(b, &info));
    CHECK(info.device.kind == HOSTFIRST_DEVICE_CPU && info.dtype == HOSTFIRST_DTYPE_U16);
    CHECK(info.rank == 1 && info.shape[0] == N && info.nbytes == sizeof data);
    CHECK(strcmp(info.name, "tokens") == 0);
    CHECK(memcmp((const void *)(uintptr_t)info.address, data, sizeof data) == 0);
    check_round_trip(b, data, sizeof data);
    hostfirst_buffer_info small = {.struct_size = 8};
    CHECK_STATUS(hostfirst_buffer_describe(b, &small), HOSTFIRST_STATUS_INVALID_ARGUMENT);

    /* buffer_to cpu and copy of a slice */
    hostfirst_buffer *c = NULL;
    CHECK_OK(hostfirst_buffer_to(b, &cpu, &c));
    check_round_trip(c, data, sizeof data);
    CHECK_OK(hostfirst_buffer_free(c));
    hostfirst_view *rows = NULL;
    CHECK_OK(hostfirst_view_slice_rows(tokens, 10, 1010, &rows));
    CHECK_OK(hostfirst_put(rows, &cpu, NULL, &c, NULL));
    check_round_trip(c, data + 10, 2000);
    CHECK_OK(hostfirst_buffer_free(c));
    CHECK_OK(hostfirst_view_free(rows));

    /* empty tensor */
    CHECK_OK(hostfirst_put(empty, &cpu, NULL, &c, NULL));
    CHECK_OK(hostfirst_buffer_describe(c, &info));
    CHECK(info.nbytes == 0 && info.rank == 2 && info.shape[0] == 0 && info.shape[1] == 4);
    CHECK_OK(hostfirst_buffer_copy_to_host(c, NULL, 0));
    CHECK_OK(hostfirst_buffer_free(c));

    /* options and progress */
    hostfirst_put_options o;
    CHECK_OK(hostfirst_put_options_init(&o, sizeof o));
    CHECK(o.struct_size == sizeof o && o.threads == 0 && o.progress == NULL);
    progress_state ps = {0, 0, 0, 1, 0};
    o.threads = 3;
    o.chunk_bytes = 4096;
    o.progress = on_progress;
    o.user = &ps;
    CHECK_OK(hostfirst_put(tokens, &cpu, &o, &c, NULL));
    CHECK(ps.calls >= 1 && ps.monotonic && ps.last == sizeof data && ps.total == sizeof data);
    check_round_trip(c, data, sizeof data);
    CHECK_OK(hostfirst_buffer_free(c));
    ps.cancel = 1;
    c = NULL;
    CHECK_STATUS(hostfirst_put(tokens, &cpu, &o, &c, NULL), HOSTFIRST_STATUS_CANCELLED);
    CHECK(c == NULL);
    /* put_ex writes its stats only on success: a cancelled put, a bad target and strict mode leave the
     * caller's struct exactly as it was */
    hostfirst_put_stats stats, before;
    memset(&stats, 0x5a, sizeof stats);
    stats.struct_size = sizeof stats;
    before = stats;
    CHECK_STATUS(hostfirst_put(tokens, &cpu, &o, &c, &stats), HOSTFIRST_STATUS_CANCELLED);
    hostfirst_device nowhere = {HOSTFIRST_DEVICE_CPU, 7};
    CHECK_STATUS(hostfirst_put(tokens, &nowhere, NULL, &c, &stats), HOSTFIRST_STATUS_NO_SUCH_DEVICE);
    CHECK_OK(hostfirst_strict_thread_set(1));
    CHECK_STATUS(hostfirst_put(tokens, NULL, NULL, &c, &stats), HOSTFIRST_STATUS_IMPLICIT_PLACEMENT);
    CHECK_OK(hostfirst_strict_thread_set(0));
    CHECK(c == NULL && memcmp(&stats, &before, sizeof stats) == 0);
    CHECK_OK(hostfirst_put(tokens, &cpu, NULL, &c, &stats));
    CHECK(stats.register_seconds == 0.0 && stats.reused_registration == 0);
    CHECK_OK(hostfirst_buffer_free(c));

    /* misuse */
    hostfirst_device bad = {99, 0}, neg = {HOSTFIRST_DEVICE_CPU, -1};
    c = NULL;
    CHECK_STATUS(hostfirst_put(NULL, &cpu, NULL, &c, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_put(tokens, &cpu, NULL, NULL, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_put(tokens, &bad, NULL, &c, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("unknown device kind 99");
    CHECK_STATUS(hostfirst_put(tokens, &neg, NULL, &c, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_buffer_to(b, &bad, &c), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    hostfirst_put_options zero = {0};
    CHECK_STATUS(hostfirst_put(tokens, &cpu, &zero, &c, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    hostfirst_put_options res = o;
    res.resident = 2;
    CHECK_STATUS(hostfirst_put(tokens, &cpu, &res, &c, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(c == NULL);
    CHECK_STATUS(hostfirst_buffer_describe(NULL, &info), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_buffer_describe(b, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_buffer_copy_to_host(b, NULL, sizeof data), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_buffer_describe((hostfirst_buffer *)tokens, &info), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_buffer_free((hostfirst_buffer *)tokens), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_buffer_free(NULL));
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_STATUS(hostfirst_buffer_free(b), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_buffer_describe(b, &info), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_buffer_copy_to_host(b, NULL, 0), HOSTFIRST_STATUS_INVALID_HANDLE);

    /* the default device and strict mode */
    CHECK_OK(hostfirst_put(tokens, NULL, NULL, &c, NULL));
    CHECK_OK(hostfirst_buffer_free(c));
    CHECK_OK(hostfirst_strict_thread_set(1));
    CHECK_STATUS(hostfirst_put(tokens, NULL, NULL, &c, NULL), HOSTFIRST_STATUS_IMPLICIT_PLACEMENT);
    CHECK_STATUS(hostfirst_put_start(tokens, NULL, NULL, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    hostfirst_put_op *op = NULL;
    CHECK_STATUS(hostfirst_put_start(tokens, NULL, NULL, &op), HOSTFIRST_STATUS_IMPLICIT_PLACEMENT);
    CHECK(op == NULL);
    CHECK_OK(hostfirst_strict_thread_set(0));
}

static void test_async(hostfirst_view *tokens, hostfirst_device target) {
    hostfirst_put_op *op = NULL;
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_put_start(tokens, &target, NULL, &op));
    hostfirst_status st;
    while ((st = hostfirst_put_poll(op)) == HOSTFIRST_STATUS_NOT_READY) {
    }
    CHECK_OK(st);
    CHECK_OK(hostfirst_put_wait(op, &b));
    CHECK_STATUS(hostfirst_put_wait(op, &b), HOSTFIRST_STATUS_ALREADY_USED);
    CHECK_STATUS(hostfirst_put_poll(op), HOSTFIRST_STATUS_ALREADY_USED);
    CHECK_STATUS(hostfirst_put_wait(op, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_put_op_free(op));
    CHECK_STATUS(hostfirst_put_poll(op), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_put_op_free(op), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_put_poll((hostfirst_put_op *)b), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_put_poll(NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_put_op_free(NULL));
    check_round_trip(b, data, sizeof data);
    CHECK_OK(hostfirst_buffer_free(b));

    /* NOT_READY, deterministically: the callback holds the put open until the gate opens */
    hostfirst_put_options og;
    CHECK_OK(hostfirst_put_options_init(&og, sizeof og));
    og.progress = gated_progress;
    atomic_store(&gate_open, 0);
    CHECK_OK(hostfirst_put_start(tokens, &target, &og, &op));
    /* NOT_READY is an answer, not a failure: the thread's last error (here an earlier OUT_OF_RANGE) stays */
    hostfirst_view *none = NULL;
    CHECK_STATUS(hostfirst_view_slice_rows(tokens, 5, 3, &none), HOSTFIRST_STATUS_OUT_OF_RANGE);
    char earlier[512];
    snprintf(earlier, sizeof earlier, "%s", hostfirst_last_error_message());
    CHECK(earlier[0] != '\0');
    CHECK_STATUS(hostfirst_put_poll(op), HOSTFIRST_STATUS_NOT_READY);
    CHECK_STATUS(hostfirst_put_poll(op), HOSTFIRST_STATUS_NOT_READY);
    CHECK(hostfirst_last_error_status() == HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK(strcmp(hostfirst_last_error_message(), earlier) == 0);
    atomic_store(&gate_open, 1);
    while ((st = hostfirst_put_poll(op)) == HOSTFIRST_STATUS_NOT_READY) {
    }
    CHECK_OK(st);
    CHECK(hostfirst_last_error_status() == HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK(strcmp(hostfirst_last_error_message(), earlier) == 0);
    b = NULL;
    CHECK_OK(hostfirst_put_wait(op, &b));
    check_round_trip(b, data, sizeof data);
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_OK(hostfirst_put_op_free(op));

    /* cancelled from the callback (on the worker thread) */
    progress_state ps = {0, 0, 0, 1, 1};
    hostfirst_put_options o;
    CHECK_OK(hostfirst_put_options_init(&o, sizeof o));
    o.progress = on_progress;
    o.user = &ps;
    CHECK_OK(hostfirst_put_start(tokens, &target, &o, &op));
    b = NULL;
    CHECK_STATUS(hostfirst_put_wait(op, &b), HOSTFIRST_STATUS_CANCELLED);
    CHECK(b == NULL && ps.calls >= 1);
    CHECK_OK(hostfirst_put_op_free(op));

    /* freed without waiting */
    CHECK_OK(hostfirst_put_start(tokens, &target, NULL, &op));
    CHECK_OK(hostfirst_put_op_free(op));
}

static void test_cuda(hostfirst_view *tokens) {
    hostfirst_device d0 = {HOSTFIRST_DEVICE_CUDA, 0}, d1 = {HOSTFIRST_DEVICE_CUDA, 1}, pinned = {HOSTFIRST_DEVICE_CUDA_HOST, 0},
                     cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_buffer *b = NULL, *c = NULL, *d = NULL, *e = NULL;
    hostfirst_put_options o;
    CHECK_OK(hostfirst_put_options_init(&o, sizeof o));
    o.staging_bytes = 256 << 10;
    o.chunk_bytes = 64 << 10;
    CHECK_OK(hostfirst_put(tokens, &d0, &o, &b, NULL));
    hostfirst_buffer_info info = {.struct_size = sizeof info};
    CHECK_OK(hostfirst_buffer_describe(b, &info));
    CHECK(info.device.kind == HOSTFIRST_DEVICE_CUDA && info.device.ordinal == 0 && info.address != 0);
    check_round_trip(b, data, sizeof data);
    CHECK_OK(hostfirst_buffer_to(b, &d1, &c));
    CHECK_OK(hostfirst_buffer_to(c, &pinned, &d));
    CHECK_OK(hostfirst_buffer_describe(d, &info));
    CHECK(info.device.kind == HOSTFIRST_DEVICE_CUDA_HOST);
    CHECK(memcmp((const void *)(uintptr_t)info.address, data, sizeof data) == 0);
    CHECK_OK(hostfirst_buffer_to(d, &cpu, &e));
    check_round_trip(c, data, sizeof data);
    check_round_trip(e, data, sizeof data);
    hostfirst_put_stats stats = {.struct_size = sizeof stats};
    hostfirst_buffer *r1 = NULL, *r2 = NULL;
    o.resident = 1;
    CHECK_OK(hostfirst_put(tokens, &d1, &o, &r1, &stats));
    CHECK(stats.reused_registration == 0 && stats.register_seconds > 0.0);
    CHECK_OK(hostfirst_put(tokens, &d1, &o, &r2, &stats));
    CHECK(stats.reused_registration == 1 && stats.staged_instead == 0);
    check_round_trip(r2, data, sizeof data);
    /* A row slice inside the registered tensor reuses the registration at an offset. */
    hostfirst_view *inner = NULL;
    hostfirst_buffer *r3 = NULL;
    CHECK_OK(hostfirst_view_slice_rows(tokens, 10, 1010, &inner));
    CHECK_OK(hostfirst_put(inner, &d1, &o, &r3, &stats));
    CHECK(stats.reused_registration == 1 && stats.staged_instead == 0);
    check_round_trip(r3, data + 10, 1000 * sizeof data[0]);
    CHECK_OK(hostfirst_buffer_free(r3));
    CHECK_OK(hostfirst_view_free(inner));
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_OK(hostfirst_buffer_free(c));
    CHECK_OK(hostfirst_buffer_free(d));
    CHECK_OK(hostfirst_buffer_free(e));
    CHECK_OK(hostfirst_buffer_free(r1));
    CHECK_OK(hostfirst_buffer_free(r2));
    test_async(tokens, d0);
    hostfirst_device d7 = {HOSTFIRST_DEVICE_CUDA, 7};
    CHECK_STATUS(hostfirst_put(tokens, &d7, NULL, &b, NULL), HOSTFIRST_STATUS_NO_SUCH_DEVICE);
    CHECK_OK(hostfirst_release_cached_memory());
}

static void test_small(hostfirst_view *tokens) {
    hostfirst_device d0 = {HOSTFIRST_DEVICE_CUDA, 0};
    hostfirst_buffer *b = NULL;
    CHECK_STATUS(hostfirst_put(tokens, &d0, NULL, &b, NULL), HOSTFIRST_STATUS_OUT_OF_MEMORY);
    CHECK_MSG("tensor 'tokens' (195.31 KiB) does not fit on cuda:0: ");
    CHECK(b == NULL);
    hostfirst_fit_info fit = {.struct_size = sizeof fit};
    CHECK_OK(hostfirst_last_error_fit(&fit));
    CHECK(fit.needed == sizeof data && fit.device.kind == HOSTFIRST_DEVICE_CUDA && fit.device.ordinal == 0);
}

/* Run with STAND_IN_FAIL_COPY_AFTER and a copy error that is not sticky: puts through the staging ring and from a
 * resident registration fail with DEVICE_ERROR naming the driver's error, and the runner checks that, after
 * hostfirst_release_cached_memory, the stand-in's exit report shows nothing page-locked or registered. */
static void test_copy_error(hostfirst_view *tokens) {
    hostfirst_device d0 = {HOSTFIRST_DEVICE_CUDA, 0};
    hostfirst_put_options o;
    CHECK_OK(hostfirst_put_options_init(&o, sizeof o));
    o.staging_bytes = 64 << 10;
    o.chunk_bytes = 16 << 10;
    for (int resident = 0; resident <= 1; resident++) {
        o.resident = (uint32_t)resident;
        hostfirst_buffer *b = NULL;
        CHECK_STATUS(hostfirst_put(tokens, &d0, &o, &b, NULL), HOSTFIRST_STATUS_DEVICE_ERROR);
        CHECK_MSG("CUDA_ERROR_INVALID_VALUE");
        CHECK(b == NULL);
    }
    CHECK(live_handles() == 2); /* the two views */
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    write_file(argv[1]);
    const char *mode = argc >= 3 ? argv[2] : "cpu";
    hostfirst_file *f = NULL;
    hostfirst_view *tokens = NULL, *empty = NULL;
    CHECK_OK(hostfirst_file_open(path, &f));
    CHECK_OK(hostfirst_file_view(f, "tokens", &tokens));
    CHECK_OK(hostfirst_file_view(f, "e", &empty));
    CHECK_OK(hostfirst_file_free(f)); /* views and buffers outlive the file handle */
    if (strcmp(mode, "small") == 0) {
        test_small(tokens);
    } else if (strcmp(mode, "copy-error") == 0) {
        test_copy_error(tokens);
    } else {
        test_cpu(tokens, empty);
        hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
        test_async(tokens, cpu);
        if (strcmp(mode, "cuda") == 0) {
            test_cuda(tokens);
        } else {
            hostfirst_device d0 = {HOSTFIRST_DEVICE_CUDA, 0};
            hostfirst_buffer *b = NULL;
            hostfirst_status st = hostfirst_put(tokens, &d0, NULL, &b, NULL);
            CHECK(st == HOSTFIRST_STATUS_UNAVAILABLE || st == HOSTFIRST_STATUS_NO_SUCH_DEVICE);
            CHECK(b == NULL);
        }
    }
    CHECK_OK(hostfirst_release_cached_memory());
    CHECK_OK(hostfirst_view_free(tokens));
    CHECK_OK(hostfirst_view_free(empty));
    printf("ok\n");
    return 0;
}
