/* Token files through the C API (issue 35): an .npy file, an llm.c shard, a Megatron dataset and a raw file,
 * each written here from its format description into the directory given as argv[1], opened with
 * hostfirst_file_open / _open_format / _open_raw, read back value for value, sliced, put to cpu and gathered
 * (windows and whole padded sequences); then hostile variants of each with their exact statuses, outputs
 * untouched, and no handle left behind (the valgrind pass runs this program under memcheck). */
#include "check.h"

static char dir[4096];

static const char *path_of(const char *name) {
    static char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void write_file(const char *name, const void *a, size_t na, const void *b, size_t nb) {
    FILE *f = fopen(path_of(name), "wb");
    CHECK(f != NULL);
    CHECK(fwrite(a, 1, na, f) == na);
    if (nb) CHECK(fwrite(b, 1, nb, f) == nb);
    CHECK(fclose(f) == 0);
}

static uint16_t tok(uint64_t i) { return (uint16_t)(i * 7 + 3); }

/* An .npy version 1.0 file of `n` u16 tokens; `dict` NULL for the proper header. */
static void write_npy(const char *name, const char *dict, uint64_t n, uint64_t stored) {
    char h[128];
    char d[100];
    if (dict == NULL) {
        snprintf(d, sizeof d, "{'descr': '<u2', 'fortran_order': False, 'shape': (%llu,), }", (unsigned long long)n);
        dict = d;
    }
    size_t len = strlen(dict);
    memset(h, ' ', sizeof h);
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    uint16_t hl = (uint16_t)(64 - 10);
    if (len + 1 > hl) hl = (uint16_t)(128 - 10);
    h[8] = (char)(hl & 0xff);
    h[9] = (char)(hl >> 8);
    memcpy(h + 10, dict, len);
    h[10 + hl - 1] = '\n';
    uint16_t *t = malloc(stored * 2 + 2);
    CHECK(t != NULL);
    for (uint64_t i = 0; i < stored; i++) t[i] = tok(i);
    write_file(name, h, 10 + (size_t)hl, t, stored * 2);
    free(t);
}

static void write_llmc(const char *name, int32_t magic, int32_t version, int32_t ntok, uint64_t stored) {
    int32_t h[256] = {0};
    h[0] = magic;
    h[1] = version;
    h[2] = ntok;
    uint16_t *t = malloc(stored * 2 + 2);
    CHECK(t != NULL);
    for (uint64_t i = 0; i < stored; i++) t[i] = tok(i);
    write_file(name, h, sizeof h, t, stored * 2);
    free(t);
}

/* A Megatron index of u16 sequences (pointers the running sum) and its .bin of `bin_tokens` tokens. */
static void write_megatron(const char *prefix, const int32_t *lens, uint64_t n, const int64_t *docs, uint64_t d,
                           uint64_t bin_tokens) {
    unsigned char buf[1024];
    size_t at = 0;
    memcpy(buf, "MMIDIDX\0\0", 9);
    at = 9;
    uint64_t version = 1;
    memcpy(buf + at, &version, 8);
    at += 8;
    buf[at++] = 8; /* u16 */
    memcpy(buf + at, &n, 8);
    at += 8;
    memcpy(buf + at, &d, 8);
    at += 8;
    memcpy(buf + at, lens, 4 * n);
    at += 4 * n;
    int64_t p = 0;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(buf + at, &p, 8);
        at += 8;
        p += 2 * (int64_t)lens[i];
    }
    memcpy(buf + at, docs, 8 * d);
    at += 8 * d;
    char name[300];
    snprintf(name, sizeof name, "%s.idx", prefix);
    write_file(name, buf, at, NULL, 0);
    uint16_t *t = malloc(bin_tokens * 2 + 2);
    CHECK(t != NULL);
    for (uint64_t i = 0; i < bin_tokens; i++) t[i] = tok(i);
    snprintf(name, sizeof name, "%s.bin", prefix);
    write_file(name, t, bin_tokens * 2, NULL, 0);
    free(t);
}

/* Opens `name`, checks its one 1-D u16 tensor `tensor` of `n` tokens value for value and slices it. */
static void check_tokens(hostfirst_file *f, const char *tensor, uint64_t n) {
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_view(f, tensor, &v));
    hostfirst_view_info info = {.struct_size = sizeof info};
    CHECK_OK(hostfirst_view_describe(v, &info));
    CHECK(info.dtype == HOSTFIRST_DTYPE_U16 && info.rank == 1 && info.shape[0] == n);
    uint16_t *buf = malloc(n * 2 + 2);
    CHECK(buf != NULL);
    CHECK_OK(hostfirst_view_copy(v, buf, n * 2, NULL));
    for (uint64_t i = 0; i < n; i++) CHECK(buf[i] == tok(i));
    hostfirst_view *s = NULL;
    CHECK_OK(hostfirst_view_slice_rows(v, 2, 5, &s));
    uint16_t three[3];
    CHECK_OK(hostfirst_view_copy(s, three, sizeof three, NULL));
    CHECK(three[0] == tok(2) && three[2] == tok(4));
    /* A put to cpu (fit-checked), then a gather from the file. */
    hostfirst_device cpu;
    CHECK_OK(hostfirst_device_parse("cpu", &cpu));
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_put(v, &cpu, NULL, &b, NULL));
    CHECK_OK(hostfirst_buffer_copy_to_host(b, buf, n * 2));
    CHECK(buf[n - 1] == tok(n - 1));
    hostfirst_gather *g = NULL;
    CHECK_OK(hostfirst_gather_new(cpu, HOSTFIRST_DTYPE_U16, 2, 4, &g));
    uint64_t offsets[2] = {1, n - 4};
    hostfirst_buffer *batch = NULL;
    CHECK_OK(hostfirst_gather_run(g, v, offsets, 2, &batch));
    uint16_t rows[8];
    CHECK_OK(hostfirst_buffer_copy_to_host(batch, rows, sizeof rows));
    CHECK(rows[0] == tok(1) && rows[4] == tok(n - 4) && rows[7] == tok(n - 1));
    CHECK_OK(hostfirst_buffer_free(batch));
    CHECK_OK(hostfirst_gather_free(g));
    CHECK_OK(hostfirst_buffer_free(b));
    CHECK_OK(hostfirst_view_free(s));
    CHECK_OK(hostfirst_view_free(v));
    free(buf);
}

static void expect_open(const char *name, hostfirst_status want) {
    hostfirst_file *f = (hostfirst_file *)0x1;
    CHECK_STATUS(hostfirst_file_open(path_of(name), &f), want);
    CHECK(f == (hostfirst_file *)0x1); /* outputs are written only on success */
    CHECK(strlen(hostfirst_last_error_message()) > 0);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    snprintf(dir, sizeof dir, "%s", argv[1]);
    size_t before = live_handles();
    hostfirst_file *f = NULL;
    hostfirst_format fmt = HOSTFIRST_FORMAT_AUTO;

    /* .npy */
    write_npy("c.npy", NULL, 64, 64);
    CHECK_OK(hostfirst_file_open(path_of("c.npy"), &f));
    CHECK_OK(hostfirst_file_format(f, &fmt));
    CHECK(fmt == HOSTFIRST_FORMAT_NPY && strcmp(hostfirst_format_name(fmt), "NPY") == 0);
    check_tokens(f, "data", 64);
    CHECK_OK(hostfirst_file_free(f));

    /* llm.c */
    write_llmc("c_shard.bin", 20240520, 1, 64, 64);
    CHECK_OK(hostfirst_file_open_format(path_of("c_shard.bin"), HOSTFIRST_FORMAT_LLMC, &f));
    check_tokens(f, "tokens", 64);
    CHECK_OK(hostfirst_file_free(f));
    CHECK_STATUS(hostfirst_file_open_format(path_of("c_shard.bin"), HOSTFIRST_FORMAT_NPY, &f),
                 HOSTFIRST_STATUS_OTHER_FORMAT);
    CHECK_MSG("llm.c token shard");
    CHECK_STATUS(hostfirst_file_open_format(path_of("c_shard.bin"), 99, &f), HOSTFIRST_STATUS_INVALID_ARGUMENT);

    /* raw: the tokens past the llm.c header, and a headerless file */
    uint64_t infer = HOSTFIRST_FILE_RAW_INFER;
    CHECK_OK(hostfirst_file_open_raw(path_of("c_shard.bin"), HOSTFIRST_DTYPE_U16, &infer, 1, 1024, "tokens", &f));
    check_tokens(f, "tokens", 64);
    CHECK_OK(hostfirst_file_free(f));
    CHECK_STATUS(hostfirst_file_open_raw(path_of("c_shard.bin"), HOSTFIRST_DTYPE_U16, &infer, 1, 0, NULL, &f),
                 HOSTFIRST_STATUS_OTHER_FORMAT);
    write_llmc("c_raw.bin", 0, 0, 0, 64); /* a zero header: headerless data as far as anyone can tell */
    CHECK_OK(hostfirst_file_open_raw(path_of("c_raw.bin"), HOSTFIRST_DTYPE_U16, &infer, 1, 1024, NULL, &f));
    check_tokens(f, "data", 64);
    CHECK_OK(hostfirst_file_free(f));
    uint64_t shape2[2] = {3, 7};
    CHECK_STATUS(hostfirst_file_open_raw(path_of("c_raw.bin"), HOSTFIRST_DTYPE_U16, shape2, 2, 0, NULL, &f),
                 HOSTFIRST_STATUS_INCOMPLETE_BUFFER);
    CHECK_STATUS(hostfirst_file_open_raw(path_of("c_raw.bin"), HOSTFIRST_DTYPE_U16, NULL, 2, 0, NULL, &f),
                 HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_file_open_raw(path_of("c_raw.bin"), 999, &infer, 1, 0, NULL, &f),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);

    /* Megatron: sequences of 3, 0, 5 and 1 tokens in 2 documents */
    int32_t lens[4] = {3, 0, 5, 1};
    int64_t docs[3] = {0, 2, 4};
    write_megatron("c_mega", lens, 4, docs, 3, 9);
    CHECK_OK(hostfirst_file_open(path_of("c_mega"), &f));
    CHECK_OK(hostfirst_file_format(f, &fmt));
    CHECK(fmt == HOSTFIRST_FORMAT_MEGATRON);
    size_t count = 0;
    CHECK_OK(hostfirst_file_tensor_count(f, &count));
    CHECK(count == 4);
    uint64_t idx[3] = {2, 0, 1}, starts[3] = {0}, lengths[3] = {0};
    CHECK_OK(hostfirst_file_sequence_spans(f, idx, 3, starts, lengths));
    CHECK(starts[0] == 3 && lengths[0] == 5 && starts[1] == 0 && lengths[1] == 3 && lengths[2] == 0);
    hostfirst_device cpu;
    CHECK_OK(hostfirst_device_parse("cpu", &cpu));
    hostfirst_gather *g = NULL;
    CHECK_OK(hostfirst_gather_new(cpu, HOSTFIRST_DTYPE_U16, 3, 4, &g));
    hostfirst_buffer *batch = NULL;
    uint64_t held[3] = {0};
    CHECK_OK(hostfirst_gather_run_sequences(g, f, idx, 3, 0xFFFF, held, &batch));
    CHECK(held[0] == 4 && held[1] == 3 && held[2] == 0);
    uint16_t rows[12];
    CHECK_OK(hostfirst_buffer_copy_to_host(batch, rows, sizeof rows));
    CHECK(rows[0] == tok(3) && rows[3] == tok(6) && rows[4] == tok(0) && rows[7] == 0xFFFF && rows[8] == 0xFFFF);
    uint64_t bad[3] = {4, 0, 0};
    CHECK_STATUS(hostfirst_gather_run_sequences(g, f, bad, 3, 0, held, &batch), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK(held[0] == 4); /* untouched */
    CHECK_OK(hostfirst_buffer_free(batch));
    CHECK_OK(hostfirst_gather_free(g));
    CHECK_OK(hostfirst_file_free(f));

    /* hostile variants */
    write_npy("h_lie.npy", NULL, 65, 64);
    expect_open("h_lie.npy", HOSTFIRST_STATUS_TRUNCATED);
    write_npy("h_obj.npy", "{'descr': '|O', 'fortran_order': False, 'shape': (8,), }", 8, 32);
    expect_open("h_obj.npy", HOSTFIRST_STATUS_UNSUPPORTED_DTYPE);
    write_npy("h_fortran.npy", "{'descr': '<u2', 'fortran_order': True, 'shape': (8, 8), }", 64, 64);
    expect_open("h_fortran.npy", HOSTFIRST_STATUS_UNSUPPORTED_LAYOUT);
    write_npy("h_neg.npy", "{'descr': '<u2', 'fortran_order': False, 'shape': (-1,), }", 1, 1);
    expect_open("h_neg.npy", HOSTFIRST_STATUS_INVALID_HEADER);
    write_file("h_cut.npy", "\x93NUMPY\x01", 7, NULL, 0);
    expect_open("h_cut.npy", HOSTFIRST_STATUS_HEADER_TOO_SMALL);
    write_llmc("h_count.bin", 20240520, 1, 1000, 64);
    expect_open("h_count.bin", HOSTFIRST_STATUS_TRUNCATED);
    write_llmc("h_version.bin", 20240520, 3, 64, 64);
    expect_open("h_version.bin", HOSTFIRST_STATUS_UNSUPPORTED_VERSION);
    write_megatron("h_mega_short", lens, 4, docs, 3, 8);
    expect_open("h_mega_short.idx", HOSTFIRST_STATUS_TRUNCATED);
    int64_t bad_docs[3] = {0, 3, 2};
    write_megatron("h_mega_docs", lens, 4, bad_docs, 3, 9);
    expect_open("h_mega_docs.bin", HOSTFIRST_STATUS_INVALID_INDEX);

    CHECK(live_handles() == before);
    printf("test_tokens: ok\n");
    return 0;
}
