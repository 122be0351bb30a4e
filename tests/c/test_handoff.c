/* C ABI of the handoff: copy-on-write puts and loads (bytes equal the file, a write never reaches it), DLPack
 * exports in both forms and with a consumer's request (hostfirst_*_to_dlpack with hostfirst_dlpack_options; a consumer's write
 * to a legacy export of a view never reaches the file), the gather's batch ring (a held batch is never
 * rewritten, BUSY at the bound, run_batch / batch / ring / set_ring_bound), gathers from a host buffer after
 * the file was truncated (Windows: the truncation is refused while the file is mapped, and the gather from the
 * file goes on), the stream calls on host buffers; handle counts back to the baseline.
 * argv[1]: a scratch directory. argv[2] (optional): "cuda" with the stand-in driver: the stream handshake,
 * counted with the stand-in's stand_in_stream_wait_events. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#ifndef _WIN32
#include <dlfcn.h>
#endif
#include "check.h"
#include "platform.h"

static char path[1200];
#define N 50000 /* u16 elements of "tok" */
static uint16_t tok[N];
static long data_start;

static void write_file(const char *dir) {
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i * 13 + 5);
    static const float w[6] = {1, 2, 3, 4, 5, 6};
    char header[512]; /* two trailing spaces: the data starts off a page boundary */
    int len = snprintf(header, sizeof header, "{\"tok\":{\"dtype\":\"U16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[%d,%d]}}  ", N, 2 * N, 2 * N, 2 * N + 24);
    data_start = 8 + len;
    snprintf(path, sizeof path, "%s/handoff.safetensors", dir);
    const void *parts[] = {tok, w};
    const size_t sizes[] = {sizeof tok, sizeof w};
    write_safetensors(path, header, 2, parts, sizes);
}

/* The file's tok bytes now, read with stdio. */
static int file_tok_unchanged(void) {
    static uint16_t now[N];
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK(fseek(f, data_start, SEEK_SET) == 0);
    size_t got = fread(now, 1, sizeof now, f);
    fclose(f);
    return got == sizeof now && memcmp(now, tok, sizeof tok) == 0;
}

static void test_copy_on_write(hostfirst_view *v, hostfirst_file *file) {
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_put_options o;
    CHECK_OK(hostfirst_put_options_init(&o, sizeof o));
    CHECK(o.copy_on_write == 0); /* eager copies are the default */
    o.copy_on_write = 1;
    hostfirst_buffer *b = NULL, *e = NULL;
    CHECK_OK(hostfirst_put(v, &cpu, &o, &b, NULL));
    int32_t fb = -1;
    CHECK_OK(hostfirst_buffer_is_file_backed(b, &fb));
    CHECK(fb == 1);
    hostfirst_buffer_info info = {.struct_size = sizeof info};
    CHECK_OK(hostfirst_buffer_describe(b, &info));
    CHECK(info.nbytes == sizeof tok && info.address % 4096 == (uint64_t)data_start % 4096);
    uint16_t *p = (uint16_t *)(uintptr_t)info.address;
    CHECK(memcmp(p, tok, sizeof tok) == 0);
    p[0] = 0xdead & 0xffff; /* writable; the write stays in this process */
    p[N - 1] = 1;
    CHECK(file_tok_unchanged());
    CHECK_OK(hostfirst_put(v, &cpu, NULL, &e, NULL));
    CHECK_OK(hostfirst_buffer_is_file_backed(e, &fb));
    CHECK(fb == 0);
    CHECK_OK(hostfirst_buffer_free(e));
    o.copy_on_write = 2;
    CHECK_STATUS(hostfirst_put(v, &cpu, &o, &e, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("copy_on_write");
    CHECK_STATUS(hostfirst_buffer_is_file_backed(b, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    /* the stream calls have nothing to do for host memory; 0 is never a stream */
    CHECK_OK(hostfirst_buffer_sync_stream(b, 1));
    CHECK_OK(hostfirst_buffer_record_stream(b, -1));
    CHECK_STATUS(hostfirst_buffer_sync_stream(b, 0), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_buffer_record_stream(b, -7), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_OK(hostfirst_buffer_free(b));

    /* a whole-file load: copy-on-write for the cpu tensors */
    hostfirst_rules *rules = NULL;
    hostfirst_plan *plan = NULL;
    hostfirst_load *load = NULL;
    CHECK_OK(hostfirst_rules_new(&rules));
    CHECK_OK(hostfirst_rules_add_spec(rules, "*=cpu"));
    CHECK_OK(hostfirst_plan_make(file, rules, &plan));
    hostfirst_load_options lo = {.struct_size = sizeof lo, .copy_on_write = 1};
    CHECK_OK(hostfirst_load_run(file, plan, &lo, &load));
    hostfirst_loaded kind = 0;
    CHECK_OK(hostfirst_load_get(load, "w", &kind, &b, NULL));
    CHECK_OK(hostfirst_buffer_is_file_backed(b, &fb));
    CHECK(kind == HOSTFIRST_LOADED_BUFFER && fb == 1);
    float w[6];
    CHECK_OK(hostfirst_buffer_copy_to_host(b, w, sizeof w));
    CHECK(w[0] == 1 && w[5] == 6);
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_OK(hostfirst_load_free(load));
    CHECK_OK(hostfirst_load_run(file, plan, NULL, &load)); /* NULL: the defaults, copies */
    CHECK_OK(hostfirst_load_get(load, "w", &kind, &b, NULL));
    CHECK_OK(hostfirst_buffer_is_file_backed(b, &fb));
    CHECK(fb == 0);
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_OK(hostfirst_load_free(load));
    lo.copy_on_write = 5;
    CHECK_STATUS(hostfirst_load_run(file, plan, &lo, &load), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_OK(hostfirst_plan_free(plan));
    CHECK_OK(hostfirst_rules_free(rules));
}

/* A consumer that passed no max_version (Python's max_version=None): the legacy form. */
static const hostfirst_dlpack_options LEGACY = {.struct_size = sizeof(hostfirst_dlpack_options), .legacy = 1};

static void test_dlpack(hostfirst_view *v) {
    hostfirst_view_info vi = {.struct_size = sizeof vi};
    CHECK_OK(hostfirst_view_describe(v, &vi));
    /* legacy: a private copy-on-write mapping, writable; the consumer's write never reaches the file */
    hostfirst_dlpack_managed_tensor *l = NULL;
    CHECK_OK(hostfirst_view_to_dlpack(v, &LEGACY, NULL, &l));
    CHECK(l->deleter != NULL && l->manager_ctx != NULL);
    CHECK(l->dl_tensor.data != vi.data); /* never the read-only mapping */
    CHECK(l->dl_tensor.device.device_type == HOSTFIRST_DLPACK_DEVICE_CPU && l->dl_tensor.ndim == 1);
    CHECK(l->dl_tensor.shape[0] == N && l->dl_tensor.dtype.code == 1 && l->dl_tensor.dtype.bits == 16);
    CHECK(l->dl_tensor.strides == NULL && l->dl_tensor.byte_offset == 0);
    CHECK(memcmp(l->dl_tensor.data, tok, sizeof tok) == 0);
    memset(l->dl_tensor.data, 0x5a, sizeof tok); /* the consumer writes, e.g. buffer donation */
    CHECK(file_tok_unchanged());
    CHECK(memcmp(vi.data, tok, sizeof tok) == 0); /* and the view still reads the file */
    l->deleter(l);

    /* the consumer's request */
    hostfirst_dlpack_options o = {.struct_size = sizeof o};
    hostfirst_dlpack_managed_tensor_versioned *ver = NULL;
    hostfirst_dlpack_managed_tensor *leg = NULL;
    o.legacy = 1; /* no max_version given (Python's max_version=None): a legacy consumer */
    CHECK_OK(hostfirst_view_to_dlpack(v, &o, &ver, &leg));
    CHECK(ver == NULL && leg != NULL && leg->dl_tensor.data != vi.data);
    leg->deleter(leg);
    o.legacy = 0;
    o.max_version.major = 1;
    o.max_version.minor = 0;
    CHECK_OK(hostfirst_view_to_dlpack(v, &o, &ver, &leg));
    CHECK(leg == NULL && ver != NULL && ver->flags == HOSTFIRST_DLPACK_FLAG_READ_ONLY && ver->dl_tensor.data == vi.data);
    ver->deleter(ver);
    o.copy = HOSTFIRST_DLPACK_COPY_ALWAYS;
    CHECK_OK(hostfirst_view_to_dlpack(v, &o, &ver, &leg));
    CHECK(ver->flags == HOSTFIRST_DLPACK_FLAG_IS_COPIED && ver->dl_tensor.data != vi.data);
    CHECK(memcmp(ver->dl_tensor.data, tok, sizeof tok) == 0);
    ver->deleter(ver);
    o.copy = HOSTFIRST_DLPACK_COPY_NEVER;
    o.has_dl_device = 1;
    o.dl_device.device_type = HOSTFIRST_DLPACK_DEVICE_CUDA_HOST;
    ver = NULL;
    CHECK_STATUS(hostfirst_view_to_dlpack(v, &o, &ver, &leg), HOSTFIRST_STATUS_UNSUPPORTED);
    CHECK(ver == NULL);
    o.has_dl_device = 0;
    o.has_stream = 1;
    o.stream = 0;
    CHECK_STATUS(hostfirst_view_to_dlpack(v, &o, &ver, &leg), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("0 is not allowed");
    o.stream = -1;
    o.copy = 9;
    CHECK_STATUS(hostfirst_view_to_dlpack(v, &o, &ver, &leg), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    o.copy = 0;
    o.struct_size = 0;
    CHECK_STATUS(hostfirst_view_to_dlpack(v, &o, &ver, &leg), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    o.struct_size = sizeof o;
    CHECK_STATUS(hostfirst_view_to_dlpack(v, &o, NULL, &leg), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_view_to_dlpack(NULL, &LEGACY, NULL, &leg), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_view_to_dlpack(v, &LEGACY, NULL, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* buffers: both forms share the buffer's memory */
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_put(v, &cpu, NULL, &b, NULL));
    hostfirst_buffer_info bi = {.struct_size = sizeof bi};
    CHECK_OK(hostfirst_buffer_describe(b, &bi));
    CHECK_OK(hostfirst_buffer_to_dlpack(b, &LEGACY, NULL, &leg));
    CHECK(leg->dl_tensor.data == (void *)(uintptr_t)bi.address);
    CHECK_OK(hostfirst_buffer_free(b)); /* the export keeps the memory */
    CHECK(memcmp(leg->dl_tensor.data, tok, sizeof tok) == 0);
    void (*deleter)(hostfirst_dlpack_managed_tensor *) = leg->deleter; /* leg is freed by the first call */
    deleter(leg);
    deleter(NULL);
    CHECK_STATUS(hostfirst_buffer_to_dlpack(b, &LEGACY, NULL, &leg), HOSTFIRST_STATUS_INVALID_HANDLE);
}

/* Gathers [4, 64] windows; checks batch `b` holds the windows at `offs`. */
static void check_batch(hostfirst_buffer *b, const uint64_t *offs) {
    uint16_t got[4 * 64];
    CHECK_OK(hostfirst_buffer_copy_to_host(b, got, sizeof got));
    for (int i = 0; i < 4; i++) CHECK(memcmp(got + 64 * i, tok + offs[i], 64 * sizeof(uint16_t)) == 0);
}

static void test_ring(hostfirst_view *v, hostfirst_device dev) {
    hostfirst_gather *g = NULL;
    /* Enum integers from C are checked: an unknown dtype or device kind is INVALID_ARGUMENT naming it. */
    CHECK_STATUS(hostfirst_gather_new(dev, (hostfirst_dtype)99, 4, 64, &g), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("dtype 99 is not a hostfirst_dtype value");
    hostfirst_device bad_kind = {(hostfirst_device_kind)9, 0};
    CHECK_STATUS(hostfirst_gather_new(bad_kind, HOSTFIRST_DTYPE_U16, 4, 64, &g), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("unknown device kind 9");
    CHECK(g == NULL);
    CHECK_OK(hostfirst_gather_new(dev, HOSTFIRST_DTYPE_U16, 4, 64, &g));
    size_t bound = 0, allocated = 0, held = 9;
    CHECK_OK(hostfirst_gather_ring(g, &bound, &allocated, &held));
    CHECK(bound == HOSTFIRST_GATHER_DEFAULT_RING_BOUND && bound == 4 && allocated == 1 && held == 0);
    uint64_t state = 5, first[4], offs[4];
    CHECK_OK(hostfirst_random_offsets(&state, N, 64, first, 4));
    hostfirst_buffer *held_batch = NULL, *b = NULL;
    CHECK_OK(hostfirst_gather_run(g, v, first, 4, &held_batch));
    for (int step = 0; step < 3; step++) { /* each released right away: the current one and a spare, reused */
        CHECK_OK(hostfirst_random_offsets(&state, N, 64, offs, 4));
        CHECK_OK(hostfirst_gather_run(g, v, offs, 4, &b));
        check_batch(b, offs);
        CHECK_OK(hostfirst_buffer_free(b));
    }
    CHECK_OK(hostfirst_gather_run(g, v, offs, 4, NULL)); /* no handle wanted */
    check_batch(held_batch, first); /* never rewritten while held */
    CHECK_OK(hostfirst_gather_ring(g, NULL, &allocated, &held));
    CHECK(allocated == 3 && held == 1);
    uint16_t cur[4 * 64];
    CHECK_OK(hostfirst_gather_copy_to_host(g, cur, sizeof cur)); /* the current batch: the last run's */
    CHECK(memcmp(cur, tok + offs[0], 64 * sizeof(uint16_t)) == 0);
    hostfirst_buffer *current = NULL;
    CHECK_OK(hostfirst_gather_batch(g, &current));
    check_batch(current, offs);

    /* a DLPack export holds its batch too */
    hostfirst_dlpack_managed_tensor_versioned *t = NULL;
    CHECK_OK(hostfirst_buffer_to_dlpack(current, NULL, &t, NULL));
    CHECK_OK(hostfirst_buffer_free(current));
    hostfirst_buffer *more[2] = {NULL, NULL};
    uint64_t more_offs[2][4];
    for (int k = 0; k < 2; k++) {
        CHECK_OK(hostfirst_random_offsets(&state, N, 64, more_offs[k], 4));
        CHECK_OK(hostfirst_gather_run(g, v, more_offs[k], 4, &more[k]));
    }
    CHECK_OK(hostfirst_gather_ring(g, NULL, &allocated, &held));
    CHECK(allocated == 4 && held == 4);
    CHECK_STATUS(hostfirst_gather_run(g, v, offs, 4, NULL), HOSTFIRST_STATUS_BUSY);
    CHECK_MSG("still held");
    check_batch(held_batch, first);
    check_batch(more[1], more_offs[1]);
    t->deleter(t); /* the consumer is done: that batch is free again */
    CHECK_OK(hostfirst_gather_run(g, v, first, 4, &b));
    check_batch(b, first);
    CHECK_OK(hostfirst_buffer_free(b));

    CHECK_STATUS(hostfirst_gather_set_ring_bound(g, 0), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_set_ring_bound(g, HOSTFIRST_GATHER_MAX_RING_BOUND + 1),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_OK(hostfirst_gather_set_ring_bound(g, 2));
    CHECK_OK(hostfirst_gather_ring(g, &bound, &allocated, &held));
    CHECK(bound == 2 && allocated == 2);
    check_batch(more[0], more_offs[0]); /* dropped from the ring or not: valid while held */
    CHECK_OK(hostfirst_buffer_free(more[0]));
    CHECK_OK(hostfirst_buffer_free(more[1]));
    CHECK_STATUS(hostfirst_gather_ring(NULL, &bound, NULL, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_batch(g, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* the truncation-proof fast path: gather from a cpu buffer, even after the file is cut */
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_buffer *host = NULL;
    CHECK_OK(hostfirst_put(v, &cpu, NULL, &host, NULL));
    CHECK_OK(hostfirst_gather_free(g));
    check_batch(held_batch, first); /* batches outlive their gather */
    CHECK_OK(hostfirst_buffer_free(held_batch));
    CHECK_OK(hostfirst_gather_new(dev, HOSTFIRST_DTYPE_U16, 4, 64, &g));
#if MAPPED_FILES_SHRINK
    CHECK(shrink_file(path, (uint64_t)data_start) == 0);
    CHECK_STATUS(hostfirst_gather_run(g, v, offs, 4, NULL), HOSTFIRST_STATUS_TRUNCATED); /* pread of the cut file */
#else
    CHECK(shrink_file(path, (uint64_t)data_start) == SHRINK_REFUSED_WHILE_MAPPED);
    CHECK_OK(hostfirst_gather_run(g, v, offs, 4, NULL)); /* the file kept its bytes */
#endif
    offs[3] = N - 64;
    CHECK_OK(hostfirst_gather_run_from_buffer(g, host, offs, 4, &b));
    check_batch(b, offs);
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_OK(hostfirst_gather_run_from_buffer(g, host, offs, 4, NULL));
    offs[3] = N - 63;
    CHECK_STATUS(hostfirst_gather_run_from_buffer(g, host, offs, 4, &b), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_gather_run_from_buffer(g, NULL, offs, 4, &b), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_buffer_free(host));
    CHECK_OK(hostfirst_gather_free(g));
}

typedef unsigned long long (*counter_fn)(void);

static unsigned long long stand_in(const char *name) {
    counter_fn f;
#ifdef _WIN32
    HMODULE h = GetModuleHandleA("nvcuda.dll");
    CHECK(h != NULL);
    *(FARPROC *)&f = GetProcAddress(h, name);
    CHECK(f != NULL);
    return f();
#else
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h != NULL);
    *(void **)&f = dlsym(h, name);
    CHECK(f != NULL);
    unsigned long long v = f();
    dlclose(h);
    return v;
#endif
}

/* The stream handshake through the C API: an export for a consumer stream makes it wait on the batch's event;
 * the release records an event there, and the rewrite waits for it. */
static void test_cuda_handshake(hostfirst_view *v) {
    hostfirst_device d0 = {HOSTFIRST_DEVICE_CUDA, 0};
    hostfirst_gather *g = NULL;
    CHECK_OK(hostfirst_gather_new(d0, HOSTFIRST_DTYPE_U16, 4, 64, &g));
    CHECK_OK(hostfirst_gather_set_ring_bound(g, 1));
    uint64_t offs[4] = {0, 1, 2, 3};
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_gather_run(g, v, offs, 4, &b));
    unsigned long long w0 = stand_in("stand_in_stream_wait_events");
    hostfirst_dlpack_options o = {.struct_size = sizeof o, .has_stream = 1, .stream = 2};
    o.max_version.major = 1;
    hostfirst_dlpack_managed_tensor_versioned *t = NULL;
    hostfirst_dlpack_managed_tensor *l = NULL;
    CHECK_OK(hostfirst_buffer_to_dlpack(b, &o, &t, &l));
    CHECK(t != NULL && l == NULL && t->flags == 0 && t->dl_tensor.device.device_type == HOSTFIRST_DLPACK_DEVICE_CUDA);
    CHECK(stand_in("stand_in_stream_wait_events") == w0 + 1); /* the per-thread stream waits on the copy */
    CHECK_OK(hostfirst_buffer_sync_stream(b, 1));
    CHECK(stand_in("stand_in_stream_wait_events") == w0 + 2);
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_STATUS(hostfirst_gather_run(g, v, offs, 4, NULL), HOSTFIRST_STATUS_BUSY); /* bound 1, exported */
    t->deleter(t); /* records the release on stream 2 */
    CHECK_OK(hostfirst_gather_run(g, v, offs, 4, NULL));
    CHECK(stand_in("stand_in_stream_wait_events") == w0 + 3); /* the copy waited for the release */
    CHECK_OK(hostfirst_gather_batch(g, &b));
    check_batch(b, offs);
    /* (A value that is not a live stream is undefined behaviour on the real driver, so it is not passed here; the
     * stand-in poisons the context for it, see tests/it/handoff.rs.) */
    CHECK_OK(hostfirst_buffer_record_stream(b, 2));
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_OK(hostfirst_gather_run(g, v, offs, 4, NULL));
    CHECK(stand_in("stand_in_stream_wait_events") == w0 + 4); /* record_stream counts like a release */
    CHECK_OK(hostfirst_gather_free(g));
    printf("cuda ok\n");
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    write_file(argv[1]);
    size_t base = live_handles();
    hostfirst_file *file = NULL;
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_open(path, &file));
    CHECK_OK(hostfirst_file_view(file, "tok", &v));
    test_copy_on_write(v, file);
    test_dlpack(v);
    CHECK(live_handles() == base + 2);
    if (argc >= 3 && strcmp(argv[2], "cuda") == 0) {
        test_cuda_handshake(v);
        hostfirst_device d0 = {HOSTFIRST_DEVICE_CUDA, 0};
        CHECK(live_handles() == base + 2);
        test_ring(v, d0);
    } else {
        hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
        test_ring(v, cpu);
    }
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(file));
    CHECK(live_handles() == base);
    printf("ok\n");
    return 0;
}
