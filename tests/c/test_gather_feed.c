/* Open gather streams fed incrementally (hostfirst_gather_stream_open, hostfirst_gather_stream_push,
 * hostfirst_gather_stream_end_input): batches in order and byte for byte across many pushes, from a view and from
 * a host buffer; the worker stays at most `depth` batches ahead and waits for input instead of ending (batch 257
 * of an endless feed arrives without the stream draining); NOT_READY when every pushed batch was handed out; a
 * bad batch refused whole at its push while the stream goes on; argument errors with exact statuses; a read
 * failing in the worker at its batch (POSIX: the file truncated; Windows refuses that while the file is mapped, and
 * the batches arrive whole); freeing mid-way (worker waiting for input, or filling) cancels; handle
 * counts back to the baseline. argv[1]: a scratch directory; argv[2] (optional): "cuda" for cuda:0 (the stand-in
 * driver). */
#define _POSIX_C_SOURCE 200809L
#define HOSTFIRST_EXPERIMENTAL /* uses the experimental tier */
#include <stdint.h>
#include <time.h>
#include "check.h"
#include "platform.h"

#define N 40000 /* u16 elements of "tok" */
#define B 4
#define W 64
static uint16_t tok[N];
static char path[1200];
static long data_start;

static void write_file(const char *dir) {
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i * 31 + 3);
    snprintf(path, sizeof path, "%s/feed.safetensors", dir);
    data_start = write_u16_tensor(path, "tok", tok, N);
}

static void check_batch(hostfirst_buffer *b, const uint64_t *offs) {
    uint16_t got[B * W];
    CHECK_OK(hostfirst_buffer_copy_to_host(b, got, sizeof got));
    for (int i = 0; i < B; i++) CHECK(memcmp(got + W * i, tok + offs[i], W * sizeof(uint16_t)) == 0);
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Batches of the gather held besides the ring: the consumer's and those the stream has filled ahead. Waits up
 * to 2 minutes for the count to reach `want` (the worker is asynchronous; this is no speed test, the bound only
 * ends a test that would otherwise hang), then returns what it is. */
static size_t held_when(hostfirst_gather *g, size_t want) {
    size_t held = 0;
    for (int i = 0; i < 120000; i++) {
        CHECK_OK(hostfirst_gather_ring(g, NULL, NULL, &held));
        if (held >= want) break;
        sleep_ms(1);
    }
    return held;
}

/* offsets of batch k of the endless feed: deterministic, in range */
static void feed_batch(uint64_t k, uint64_t *out) {
    for (int i = 0; i < B; i++) out[i] = (k * 7919 + (uint64_t)i * 104729) % (N - W + 1);
}

static void run(hostfirst_device dev) {
    size_t base = live_handles();
    hostfirst_file *file = NULL;
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_open(path, &file));
    CHECK_OK(hostfirst_file_view(file, "tok", &v));
    hostfirst_gather *g = NULL;
    CHECK_OK(hostfirst_gather_new(dev, HOSTFIRST_DTYPE_U16, B, W, &g));
    hostfirst_gather_stream *s = NULL;
    hostfirst_buffer *b = NULL;
    enum { DEPTH = 2 };

    /* An endless feed kept DEPTH + 1 batches ahead of the consumer: after 300 batches the worker still keeps
     * exactly DEPTH filled ahead (checked at batches 0, 255, 256 and 299, the consumer holding its batch), and
     * never more (checked at each batch). With the stream fed in chunks of 256 it would drain at batch 256. */
    CHECK_OK(hostfirst_gather_stream_open(g, v, DEPTH, &s));
    size_t bound = 0;
    CHECK_OK(hostfirst_gather_ring(g, &bound, NULL, NULL));
    CHECK(bound == DEPTH + 3);
    uint64_t pushed = 0, offs[B];
    for (uint64_t k = 0; k < 300; k++) {
        while (pushed < k + DEPTH + 1) {
            feed_batch(pushed++, offs);
            CHECK_OK(hostfirst_gather_stream_push(s, offs, 1));
        }
        CHECK_OK(hostfirst_gather_stream_next(s, &b));
        CHECK(b != NULL);
        feed_batch(k, offs);
        check_batch(b, offs);
        size_t held = 0;
        CHECK_OK(hostfirst_gather_ring(g, NULL, NULL, &held));
        CHECK(held <= 1 + DEPTH); /* never more than DEPTH ahead */
        if (k == 0 || k == 255 || k == 256 || k == 299) CHECK(held_when(g, 1 + DEPTH) == 1 + DEPTH);
        CHECK_OK(hostfirst_buffer_free(b));
    }
    /* every pushed batch handed out but for the DEPTH filled ahead; take them, then NOT_READY (no wait) */
    for (int i = 0; i < DEPTH; i++) {
        CHECK_OK(hostfirst_gather_stream_next(s, &b));
        feed_batch(300 + (uint64_t)i, offs);
        check_batch(b, offs);
        CHECK_OK(hostfirst_buffer_free(b));
    }
    b = (hostfirst_buffer *)1;
    CHECK_STATUS(hostfirst_gather_stream_next(s, &b), HOSTFIRST_STATUS_NOT_READY);
    CHECK_MSG("302 batches pushed");
    CHECK(b == (hostfirst_buffer *)1);
    /* the worker waited for input: a push (several batches at once) goes on in order */
    uint64_t three[3 * B];
    for (int j = 0; j < 3; j++) feed_batch(302 + (uint64_t)j, three + j * B);
    CHECK_OK(hostfirst_gather_stream_push(s, three, 3));
    /* a bad batch is refused whole (nothing of the call taken), naming its number in the stream */
    uint64_t bad[2 * B] = {0, 1, 2, 3, 4, 5, N - W + 1, 7};
    CHECK_STATUS(hostfirst_gather_stream_push(s, bad, 2), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_MSG("batch 306");
    CHECK_STATUS(hostfirst_gather_stream_push(s, NULL, 1), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_stream_push(s, three, SIZE_MAX / 2), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_stream_push(NULL, three, 1), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_gather_stream_push(s, NULL, 0));
    CHECK_OK(hostfirst_gather_stream_end_input(s));
    CHECK_OK(hostfirst_gather_stream_end_input(s)); /* again: nothing changes */
    CHECK_STATUS(hostfirst_gather_stream_push(s, three, 1), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("ended after 305 batches");
    for (int j = 0; j < 3; j++) {
        CHECK_OK(hostfirst_gather_stream_next(s, &b));
        CHECK(b != NULL);
        check_batch(b, three + j * B);
        CHECK_OK(hostfirst_buffer_free(b));
    }
    b = (hostfirst_buffer *)1;
    CHECK_OK(hostfirst_gather_stream_next(s, &b));
    CHECK(b == NULL);
    CHECK_OK(hostfirst_gather_stream_free(s));

    /* from a host buffer (whose handle goes first), pushed in one call of 5 batches, ended before any next */
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_buffer *host = NULL;
    CHECK_OK(hostfirst_put(v, &cpu, NULL, &host, NULL));
    hostfirst_gather_stream *refused = NULL; /* the stable start makes no open stream (SIZE_MAX batches) */
    CHECK_STATUS(hostfirst_gather_stream_start_from_buffer(g, host, NULL, SIZE_MAX, 1, &refused),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("hostfirst_gather_stream_open");
    CHECK(refused == NULL);
    CHECK_OK(hostfirst_gather_stream_open_from_buffer(g, host, 1, &s));
    CHECK_OK(hostfirst_buffer_free(host));
    uint64_t five[5 * B];
    for (int j = 0; j < 5; j++) feed_batch(1000 + (uint64_t)j, five + j * B);
    CHECK_OK(hostfirst_gather_stream_push(s, five, 5));
    CHECK_OK(hostfirst_gather_stream_end_input(s));
    for (int j = 0; j < 5; j++) {
        CHECK_OK(hostfirst_gather_stream_next(s, &b));
        check_batch(b, five + j * B);
        CHECK_OK(hostfirst_buffer_free(b));
    }
    CHECK_OK(hostfirst_gather_stream_next(s, &b));
    CHECK(b == NULL);
    CHECK_OK(hostfirst_gather_stream_free(s));

    /* argument errors of the start; push to a stream started with all its offsets */
    hostfirst_gather_stream *none = NULL;
    /* the stable starts make no open stream: SIZE_MAX batches (0.2's experimental open value) is refused */
    CHECK_STATUS(hostfirst_gather_stream_start(g, v, NULL, SIZE_MAX, 1, &none), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("hostfirst_gather_stream_open");
    CHECK_STATUS(hostfirst_gather_stream_open(g, v, 0, &none), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(none == NULL);
    hostfirst_gather *wide = NULL; /* an open stream checks its source at the start: windows longer than it */
    CHECK_OK(hostfirst_gather_new(dev, HOSTFIRST_DTYPE_U16, B, N + 1, &wide));
    CHECK_STATUS(hostfirst_gather_stream_open(wide, v, 1, &none),
                 HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_MSG("longer than tensor 'tok'");
    CHECK(none == NULL);
    CHECK_OK(hostfirst_gather_free(wide));
    CHECK_OK(hostfirst_gather_stream_start(g, v, five, 5, 2, &s));
    CHECK_STATUS(hostfirst_gather_stream_push(s, five, 1), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("open stream");
    CHECK_OK(hostfirst_gather_stream_end_input(s)); /* changes nothing: the 5 batches still come */
    for (int j = 0; j < 5; j++) {
        CHECK_OK(hostfirst_gather_stream_next(s, &b));
        check_batch(b, five + j * B);
        CHECK_OK(hostfirst_buffer_free(b));
    }
    CHECK_OK(hostfirst_gather_stream_free(s));

    /* freed while its worker waits for input, and while it fills: cancelled, joined; a kept batch stays valid */
    CHECK_OK(hostfirst_gather_stream_open(g, v, 2, &s));
    CHECK_OK(hostfirst_gather_stream_free(s));
    CHECK_OK(hostfirst_gather_stream_open(g, v, 4, &s));
    static uint64_t many[500 * B];
    for (int j = 0; j < 500; j++) feed_batch(2000 + (uint64_t)j, many + j * B);
    CHECK_OK(hostfirst_gather_stream_push(s, many, 500));
    hostfirst_buffer *kept = NULL;
    CHECK_OK(hostfirst_gather_stream_next(s, &kept));
    CHECK_OK(hostfirst_gather_stream_free(s));
    size_t held = 9;
    CHECK_OK(hostfirst_gather_ring(g, NULL, NULL, &held));
    CHECK(held == 1);
    check_batch(kept, many);
    CHECK_OK(hostfirst_buffer_free(kept));
    CHECK_STATUS(hostfirst_gather_stream_push(s, many, 1), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_gather_stream_end_input(s), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_gather_stream_end_input(NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* a read failing in the worker: the file cut in half; a window in the second half fails at its batch */
#if MAPPED_FILES_SHRINK
    CHECK(shrink_file(path, (uint64_t)(data_start + 2 * (N / 2))) == 0);
#else
    CHECK(shrink_file(path, (uint64_t)(data_start + 2 * (N / 2))) == SHRINK_REFUSED_WHILE_MAPPED);
#endif
    CHECK_OK(hostfirst_gather_stream_open(g, v, 2, &s));
    uint64_t cut[2 * B] = {0, 10, 20, 30, 40, N - W, 60, 70};
    CHECK_OK(hostfirst_gather_stream_push(s, cut, 2));
    CHECK_OK(hostfirst_gather_stream_next(s, &b));
    check_batch(b, cut);
    CHECK_OK(hostfirst_buffer_free(b));
#if MAPPED_FILES_SHRINK
    for (int i = 0; i < 2; i++) {
        b = NULL;
        CHECK_STATUS(hostfirst_gather_stream_next(s, &b), HOSTFIRST_STATUS_TRUNCATED);
        CHECK_MSG("batch 1");
        CHECK(b == NULL);
    }
    CHECK_OK(hostfirst_gather_stream_push(s, cut, 1)); /* accepted, never filled */
    CHECK_STATUS(hostfirst_gather_stream_next(s, &b), HOSTFIRST_STATUS_TRUNCATED);
#else
    CHECK_OK(hostfirst_gather_stream_next(s, &b));
    check_batch(b, cut + B);
    CHECK_OK(hostfirst_buffer_free(b));
#endif
    CHECK_OK(hostfirst_gather_stream_free(s));

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
