/* C ABI of declared read plans: a plan of three slices (a block of rows and columns of `w`, the whole of `b` and
 * `c`) with its numbers, its requests and an execution checked byte for byte against the data written; the
 * over-read cap deciding how the column ranges merge; with argv[2] = "count" (HOSTFIRST_IO=pool, not under
 * valgrind), the process's read syscalls and bytes during an execution, from /proc/self/io, equal the plan's
 * requests and read bytes; bad input with exact statuses; a file truncated under a plan gives TRUNCATED; the
 * handle count back to its baseline. argv[1]: a scratch directory. */
#define _POSIX_C_SOURCE 200809L
#define HOSTFIRST_EXPERIMENTAL /* uses the experimental tier */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include "check.h"

#define ROWS 64
#define COLS 2048

static char path[1200];
static float w[ROWS * COLS]; /* w: F32 [64, 2048]: rows of 8 KiB */
static uint8_t b[4096];      /* b: U8 [4096], right after w */
static uint8_t c[8192];      /* c: U8 [8192], right after b */

static void write_model(const char *file) {
    for (int i = 0; i < ROWS * COLS; i++) w[i] = (float)i + 0.5f;
    for (int i = 0; i < 4096; i++) b[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 8192; i++) c[i] = (uint8_t)(i * 13 + 1);
    size_t ow = 0, ob = sizeof w, oc = ob + sizeof b, end = oc + sizeof c;
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr,
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[4096],\"data_offsets\":[%zu,%zu]},"
                     "\"c\":{\"dtype\":\"U8\",\"shape\":[8192],\"data_offsets\":[%zu,%zu]}}",
                     ROWS, COLS, ow, ob, ob, oc, oc, end);
    while (n % 8 != 0) hdr[n++] = ' '; /* data 8-byte aligned */
    hdr[n] = 0;
    const void *parts[] = {w, b, c};
    const size_t sizes[] = {sizeof w, sizeof b, sizeof c};
    write_safetensors(file, hdr, 3, parts, sizes);
}

/* rchar and syscr of /proc/self/io, read with one read(2) whose own bytes are returned in *self_bytes. */
static void proc_io(uint64_t *rchar, uint64_t *syscr, uint64_t *self_bytes) {
    char text[4096];
    int fd = open("/proc/self/io", O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, text, sizeof text - 1);
    CHECK(n > 0);
    close(fd);
    text[n] = 0;
    const char *r = strstr(text, "rchar: "), *s = strstr(text, "syscr: ");
    CHECK(r != NULL && s != NULL);
    *rchar = strtoull(r + 7, NULL, 10);
    *syscr = strtoull(s + 7, NULL, 10);
    *self_bytes = (uint64_t)n;
}

/* Rows [8, 24) and columns [0, 128) of w, all of b, all of c. */
static const uint64_t w_starts[2] = {8, 0}, w_lens[2] = {16, 128};

static void make_three(hostfirst_file *file, const hostfirst_read_plan_options *opts, hostfirst_read_plan **plan) {
    hostfirst_read_plan_slice s[3] = {
        {.name = "w", .rank = 2, .starts = w_starts, .lens = w_lens},
        {.name = "b", .rank = 0, .starts = NULL, .lens = NULL},
        {.name = "c", .rank = 0, .starts = NULL, .lens = NULL},
    };
    CHECK_OK(hostfirst_read_plan_make(file, s, 3, opts, plan));
}

static void stats_of(const hostfirst_read_plan *plan, hostfirst_read_plan_stats *st) {
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    CHECK_OK(hostfirst_read_plan_describe(plan, st));
    CHECK(st->struct_size == sizeof *st);
}

static float got_w[16 * 128];
static uint8_t got_b[4096], got_c[8192];

static void execute_and_check(const hostfirst_read_plan *plan, uint64_t *bytes_read) {
    memset(got_w, 0, sizeof got_w);
    memset(got_b, 0, sizeof got_b);
    memset(got_c, 0, sizeof got_c);
    void *dsts[3] = {got_w, got_b, got_c};
    const uint64_t caps[3] = {sizeof got_w, sizeof got_b, sizeof got_c};
    CHECK_OK(hostfirst_read_plan_execute(plan, dsts, caps, 3, bytes_read));
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 128; k++) CHECK(got_w[r * 128 + k] == w[(8 + r) * COLS + k]);
    CHECK(memcmp(got_b, b, sizeof b) == 0 && memcmp(got_c, c, sizeof c) == 0);
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    int count_syscalls = argc >= 3 && strcmp(argv[2], "count") == 0;
    snprintf(path, sizeof path, "%s/read_plan.safetensors", argv[1]);
    write_model(path);
    size_t base = live_handles();
    hostfirst_file *file = NULL;
    CHECK_OK(hostfirst_file_open(path, &file));

    /* Default options: the numbers, the requests, an execution. */
    hostfirst_read_plan *plan = NULL;
    make_three(file, NULL, &plan);
    hostfirst_read_plan_stats st;
    stats_of(plan, &st);
    const uint64_t needed = 16 * 128 * 4 + 4096 + 8192;
    CHECK(st.slices == 3 && st.needed_bytes == needed && st.files == 1);
    CHECK(st.read_bytes >= needed && st.requests >= 2 && st.peak_memory_bytes >= needed);
    uint64_t sum = 0, last_end = 0;
    for (uint64_t i = 0; i < st.requests; i++) {
        hostfirst_read_plan_request_info r = {.struct_size = sizeof r};
        CHECK_OK(hostfirst_read_plan_request(plan, i, &r));
        CHECK(r.file == 0 && r.length > 0 && r.offset >= last_end && r.slices >= 1);
        last_end = r.offset + r.length;
        sum += r.length;
    }
    CHECK(sum == st.read_bytes);
    uint64_t bytes_read = 0;
    execute_and_check(plan, &bytes_read);
    CHECK(bytes_read == st.read_bytes);
    CHECK_OK(hostfirst_read_plan_execute(plan, (void *const[]){got_w, got_b, got_c},
                                         (const uint64_t[]){sizeof got_w, sizeof got_b, sizeof got_c}, 3, NULL));
    if (count_syscalls) {
        /* The second execution, measured: its reads are the plan's requests and nothing else. */
        uint64_t r0, s0, self0, r1, s1, self1;
        proc_io(&r0, &s0, &self0);
        execute_and_check(plan, &bytes_read);
        proc_io(&r1, &s1, &self1);
        uint64_t reads = s1 - s0 - 1, bytes = r1 - r0 - self0;
        if (reads != st.requests || bytes != st.read_bytes) {
            fprintf(stderr, "read syscalls %llu (plan: %llu requests), bytes %llu (plan: %llu)\n",
                    (unsigned long long)reads, (unsigned long long)st.requests, (unsigned long long)bytes,
                    (unsigned long long)st.read_bytes);
            return 1;
        }
    }
    /* The request past the end, and a struct_size too small. */
    hostfirst_read_plan_request_info ri = {.struct_size = sizeof ri};
    CHECK_STATUS(hostfirst_read_plan_request(plan, st.requests, &ri), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_MSG("requests");
    hostfirst_read_plan_stats tiny = {.struct_size = 4};
    CHECK_STATUS(hostfirst_read_plan_describe(plan, &tiny), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    /* Destinations that do not match the slices: nothing read. */
    void *dsts[3] = {got_w, got_b, got_c};
    uint64_t caps[3] = {sizeof got_w, sizeof got_b - 1, sizeof got_c};
    CHECK_STATUS(hostfirst_read_plan_execute(plan, dsts, caps, 3, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("capacities[1] is 4095 bytes; slice 1 ('b') is 4096 bytes");
    caps[1] = sizeof got_b;
    CHECK_STATUS(hostfirst_read_plan_execute(plan, dsts, caps, 2, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("3 slices");
    dsts[2] = NULL;
    CHECK_STATUS(hostfirst_read_plan_execute(plan, dsts, caps, 3, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_read_plan_execute(plan, NULL, caps, 3, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_read_plan_free(plan));
    CHECK_STATUS(hostfirst_read_plan_free(plan), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_read_plan_free(NULL));

    /* The over-read cap: the 512-byte column ranges of w, 7.5 KiB apart, merge into one request under a cap
     * of 4 (about 2 pages read per page needed) and stay apart under 1.0 (a gap of whole pages). */
    hostfirst_read_plan_options o;
    CHECK_OK(hostfirst_read_plan_options_init(&o, sizeof o));
    CHECK(o.struct_size == sizeof o && o.max_over_read == 0.0);
    const uint64_t all_rows[2] = {0, 0}, half[2] = {ROWS, 128};
    hostfirst_read_plan_slice cols = {.name = "w", .rank = 2, .starts = all_rows, .lens = half};
    o.max_over_read = 4.0;
    CHECK_OK(hostfirst_read_plan_make(file, &cols, 1, &o, &plan));
    stats_of(plan, &st);
    CHECK(st.requests == 1 && st.needed_bytes == ROWS * 512 && st.read_bytes == (ROWS - 1) * 8192 + 512);
    CHECK(st.peak_memory_bytes == st.needed_bytes + st.read_bytes); /* the merged request's scratch */
    CHECK_OK(hostfirst_read_plan_free(plan));
    o.max_over_read = 1.0;
    CHECK_OK(hostfirst_read_plan_make(file, &cols, 1, &o, &plan));
    stats_of(plan, &st);
    CHECK(st.requests == ROWS && st.read_bytes == ROWS * 512);
    CHECK_OK(hostfirst_read_plan_free(plan));

    /* Bad declarations. */
    o.max_over_read = 0.5;
    CHECK_STATUS(hostfirst_read_plan_make(file, &cols, 1, &o, &plan), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("max_over_read");
    CHECK_STATUS(hostfirst_read_plan_make(NULL, &cols, 1, NULL, &plan), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_read_plan_make(file, &cols, 1, NULL, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_read_plan_make(file, NULL, 1, NULL, &plan), HOSTFIRST_STATUS_NULL_ARGUMENT);
    hostfirst_read_plan_slice bad = {.name = "nope"};
    CHECK_STATUS(hostfirst_read_plan_make(file, &bad, 1, NULL, &plan), HOSTFIRST_STATUS_NOT_FOUND);
    CHECK_MSG("nope");
    bad.name = NULL;
    CHECK_STATUS(hostfirst_read_plan_make(file, &bad, 1, NULL, &plan), HOSTFIRST_STATUS_NULL_ARGUMENT);
    const uint64_t one[1] = {0}, past[2] = {60, 0}, five[2] = {5, COLS};
    hostfirst_read_plan_slice rank1 = {.name = "w", .rank = 1, .starts = one, .lens = one};
    CHECK_STATUS(hostfirst_read_plan_make(file, &rank1, 1, NULL, &plan), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("2 dimensions");
    hostfirst_read_plan_slice out_of_range = {.name = "w", .rank = 2, .starts = past, .lens = five};
    CHECK_STATUS(hostfirst_read_plan_make(file, &out_of_range, 1, NULL, &plan), HOSTFIRST_STATUS_OUT_OF_RANGE);
    hostfirst_read_plan_slice no_lens = {.name = "w", .rank = 2, .starts = past, .lens = NULL};
    CHECK_STATUS(hostfirst_read_plan_make(file, &no_lens, 1, NULL, &plan), HOSTFIRST_STATUS_NULL_ARGUMENT);
    hostfirst_read_plan_slice twice[2] = {{.name = "c"}, {.name = "c"}};
    CHECK_STATUS(hostfirst_read_plan_make(file, twice, 2, NULL, &plan), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("share bytes");
    CHECK_STATUS(hostfirst_read_plan_options_init(&o, 4), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_read_plan_options_init(NULL, sizeof o), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* A file truncated under a plan: TRUNCATED naming the tensor, never a crash. */
    make_three(file, NULL, &plan);
    CHECK(truncate(path, 4096) == 0);
    caps[1] = sizeof got_b;
    dsts[2] = got_c;
    CHECK_STATUS(hostfirst_read_plan_execute(plan, dsts, caps, 3, NULL), HOSTFIRST_STATUS_TRUNCATED);
    CHECK_OK(hostfirst_read_plan_free(plan));

    CHECK_OK(hostfirst_file_free(file));
    CHECK(live_handles() == base);
    printf("read plans: ok\n");
    return 0;
}
