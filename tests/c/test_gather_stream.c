/* C ABI of the prefetching gather stream (hostfirst_gather_stream_*): batches in order and byte for byte from a
 * view and from a host buffer, the end (OK with NULL), argument errors with exact statuses, a read failing in the
 * worker surfacing at its batch and after (POSIX: the file truncated under the stream; Windows refuses that while
 * the file is mapped, and every batch then arrives whole), freeing mid-way (cancel), stale handles; handle counts back to the
 * baseline. argv[1]: a scratch directory. argv[2] (optional): "cuda" to run the gathers on cuda:0 (the stand-in
 * driver). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include "check.h"
#include "platform.h"

#define N 40000 /* u16 elements of "tok" */
#define B 4
#define W 64
static uint16_t tok[N];
static char path[1200];
static long data_start;

static void write_file(const char *dir) {
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i * 29 + 7);
    snprintf(path, sizeof path, "%s/stream.safetensors", dir);
    data_start = write_u16_tensor(path, "tok", tok, N);
}

/* Checks batch `b` holds the windows at `offs` (B of them). */
static void check_batch(hostfirst_buffer *b, const uint64_t *offs) {
    uint16_t got[B * W];
    CHECK_OK(hostfirst_buffer_copy_to_host(b, got, sizeof got));
    for (int i = 0; i < B; i++) CHECK(memcmp(got + W * i, tok + offs[i], W * sizeof(uint16_t)) == 0);
}

/* Reads every batch of `s` (started on `offs`, n batches), holding the previous one while taking the next. */
static void drain(hostfirst_gather_stream *s, const uint64_t *offs, size_t n) {
    hostfirst_buffer *prev = NULL;
    for (size_t k = 0; k < n; k++) {
        hostfirst_buffer *b = NULL;
        CHECK_OK(hostfirst_gather_stream_next(s, &b));
        CHECK(b != NULL);
        check_batch(b, offs + k * B);
        if (prev) {
            check_batch(prev, offs + (k - 1) * B); /* unchanged while held */
            CHECK_OK(hostfirst_buffer_free(prev));
        }
        prev = b;
    }
    hostfirst_buffer *end = (hostfirst_buffer *)1;
    CHECK_OK(hostfirst_gather_stream_next(s, &end));
    CHECK(end == NULL);
    CHECK_OK(hostfirst_gather_stream_next(s, &end)); /* and again */
    CHECK(end == NULL);
    CHECK_OK(hostfirst_buffer_free(prev));
}

static void run(hostfirst_device dev) {
    size_t base = live_handles();
    hostfirst_file *file = NULL;
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_open(path, &file));
    CHECK_OK(hostfirst_file_view(file, "tok", &v));
    hostfirst_gather *g = NULL;
    CHECK_OK(hostfirst_gather_new(dev, HOSTFIRST_DTYPE_U16, B, W, &g));

    enum { NB = 25 };
    static uint64_t offs[NB * B];
    uint64_t state = 77;
    CHECK_OK(hostfirst_random_offsets(&state, N, W, offs, NB * B));
    hostfirst_gather_stream *s = NULL;
    CHECK_OK(hostfirst_gather_stream_start(g, v, offs, NB, 3, &s));
    size_t bound = 0;
    CHECK_OK(hostfirst_gather_ring(g, &bound, NULL, NULL));
    CHECK(bound == 6); /* raised to depth + 3 */
    drain(s, offs, NB);
    CHECK_OK(hostfirst_gather_stream_free(s));

    /* from a host buffer; the view's and buffer's handles may go first: the stream keeps them */
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_buffer *host = NULL;
    CHECK_OK(hostfirst_put(v, &cpu, NULL, &host, NULL));
    CHECK_OK(hostfirst_gather_stream_start_from_buffer(g, host, offs, NB, 1, &s));
    CHECK_OK(hostfirst_buffer_free(host));
    drain(s, offs, NB);
    CHECK_OK(hostfirst_gather_stream_free(s));

    /* argument errors: exact statuses, nothing written */
    hostfirst_gather_stream *none = NULL;
    CHECK_STATUS(hostfirst_gather_stream_start(NULL, v, offs, 1, 1, &none), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_stream_start(g, NULL, offs, 1, 1, &none), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_stream_start(g, v, NULL, 1, 1, &none), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_stream_start(g, v, offs, 1, 1, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_stream_start(g, v, offs, 1, 0, &none), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_stream_start(g, v, offs, 1, HOSTFIRST_GATHER_STREAM_MAX_DEPTH + 1, &none),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_stream_start(g, v, offs, SIZE_MAX / 2, 1, &none), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    uint64_t bad[3 * B] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, N - W + 1, 11};
    CHECK_STATUS(hostfirst_gather_stream_start(g, v, bad, 3, 2, &none), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_MSG("batch 2");
    CHECK(none == NULL);
    CHECK_STATUS(hostfirst_gather_stream_next(NULL, &host), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* an empty stream ends at once */
    CHECK_OK(hostfirst_gather_stream_start(g, v, NULL, 0, 2, &s));
    hostfirst_buffer *b = (hostfirst_buffer *)1;
    CHECK_OK(hostfirst_gather_stream_next(s, &b));
    CHECK(b == NULL);
    CHECK_OK(hostfirst_gather_stream_free(s));

    /* freed mid-way: cancelled, joined; the batch the consumer kept stays valid */
    static uint64_t many[2000 * B];
    CHECK_OK(hostfirst_random_offsets(&state, N, W, many, 2000 * B));
    CHECK_OK(hostfirst_gather_stream_start(g, v, many, 2000, 4, &s));
    hostfirst_buffer *kept = NULL;
    CHECK_OK(hostfirst_gather_stream_next(s, &kept));
    CHECK_OK(hostfirst_gather_stream_free(s));
    size_t held = 9;
    CHECK_OK(hostfirst_gather_ring(g, NULL, NULL, &held));
    CHECK(held == 1);
    check_batch(kept, many);
    CHECK_OK(hostfirst_buffer_free(kept));

    /* stale handles; NULL frees */
    CHECK_STATUS(hostfirst_gather_stream_next(s, &b), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_gather_stream_free(s), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_gather_stream_free(NULL));

    /* a read failing in the worker: the file cut after batch 1's windows; batches 0-1 first, then TRUNCATED at
     * batch 2 and at every later call; the gather's current batch is batch 1's */
    uint64_t cut[4 * B] = {0, 10, 20, 30, 40, 50, 60, 70, 80, N - W, 90, 100, 1, 2, 3, 4};
    CHECK_OK(hostfirst_gather_stream_start(g, v, cut, 4, 2, &s));
    CHECK_OK(hostfirst_gather_stream_free(s)); /* (a stream freed before its first next) */
#if MAPPED_FILES_SHRINK
    CHECK(shrink_file(path, (uint64_t)(data_start + 2 * (N / 2))) == 0);
    CHECK_OK(hostfirst_gather_stream_start(g, v, cut, 4, 2, &s));
    for (int k = 0; k < 2; k++) {
        CHECK_OK(hostfirst_gather_stream_next(s, &b));
        check_batch(b, cut + k * B);
        CHECK_OK(hostfirst_buffer_free(b));
    }
    for (int i = 0; i < 2; i++) {
        b = NULL;
        CHECK_STATUS(hostfirst_gather_stream_next(s, &b), HOSTFIRST_STATUS_TRUNCATED);
        CHECK_MSG("batch 2");
        CHECK_MSG("'tok'");
        CHECK(b == NULL);
    }
    CHECK_OK(hostfirst_gather_stream_free(s));
    uint16_t cur[B * W];
    CHECK_OK(hostfirst_gather_copy_to_host(g, cur, sizeof cur));
    CHECK(memcmp(cur, tok + cut[B], W * sizeof(uint16_t)) == 0);
#else
    CHECK(shrink_file(path, (uint64_t)(data_start + 2 * (N / 2))) == SHRINK_REFUSED_WHILE_MAPPED);
    CHECK_OK(hostfirst_gather_stream_start(g, v, cut, 4, 2, &s));
    for (int k = 0; k < 4; k++) {
        CHECK_OK(hostfirst_gather_stream_next(s, &b));
        check_batch(b, cut + k * B);
        CHECK_OK(hostfirst_buffer_free(b));
    }
    CHECK_OK(hostfirst_gather_stream_next(s, &b));
    CHECK(b == NULL);
    CHECK_OK(hostfirst_gather_stream_free(s));
#endif

    CHECK_OK(hostfirst_gather_free(g));
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(file));
    CHECK(live_handles() == base);
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    write_file(argv[1]);
    hostfirst_device dev = {HOSTFIRST_DEVICE_CPU, 0};
    if (argc >= 3 && strcmp(argv[2], "cuda") == 0) dev = (hostfirst_device){HOSTFIRST_DEVICE_CUDA, 0};
    run(dev);
    printf("ok\n");
    return 0;
}
