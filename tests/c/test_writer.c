/* The safetensors writer through the C API (tests/it/writer.rs runs every mode):
 *
 *   test_writer api DIR            every declaration kind, metadata, part files, descriptors, bad input with
 *                                  exact statuses, finish twice, use after free; DIR/api.safetensors is compared
 *                                  byte for byte with the safetensors crate's serializer by the Rust test
 *   test_writer gen PATH G MIB [SPLIT_BYTES] [NO_SYNC]
 *                                  saves generation G (a 4-tensor model of about MIB MiB whose bytes and
 *                                  metadata name G) to PATH: the crash test's writer
 *   test_writer cuda DIR           CUDA buffers (whole and as pieces) as sources, on the stand-in driver; with
 *                                  EXPECT=DEVICE_ERROR (and STAND_IN_FAIL_COPY_AFTER past the puts' bytes) a
 *                                  device-to-host copy fails mid-way and the target must be unchanged
 *   test_writer refused PATH STATUS  a save to PATH fails with STATUS (NO_SPACE, PERMISSION_DENIED) and leaves
 *                                  PATH (if it exists) unchanged and no temporary file beside it
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "platform.h"

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    CHECK(p != NULL);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Whether the writer's path `got` names `want`: the same text, except that on Windows the writer joins the
 * directory and the file name with '\\' (the caller's path may use '/'). */
static int same_path(const char *got, const char *want) {
#ifdef _WIN32
    for (; *got && *want; got++, want++) {
        int sep = (*got == '/' || *got == '\\') && (*want == '/' || *want == '\\');
        if (!sep && *got != *want) return 0;
    }
    return *got == *want;
#else
    return !strcmp(got, want);
#endif
}

static void fill(unsigned char *p, size_t n, unsigned k) {
    for (size_t j = 0; j < n; j++) p[j] = (unsigned char)((j * 31 + k) & 0xff);
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    CHECK(n >= 0);
    rewind(f);
    unsigned char *b = malloc((size_t)n + 1);
    CHECK(b != NULL && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Files in `dir` whose name starts with "." and ends with ".hostfirst-tmp" (staged files). */
static int staged_files(const char *dir) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' && l > 14 && !strcmp(e->d_name + l - 14, ".hostfirst-tmp")) n++;
    }
    closedir(d);
    return n;
}

/* The bytes of tensor `name` of the file at `path` equal `want`. */
static void check_tensor(const char *path, const char *name, const unsigned char *want, size_t n) {
    hostfirst_file *f = NULL;
    CHECK_OK(hostfirst_file_open(path, &f));
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_view(f, name, &v));
    unsigned char *got = malloc(n ? n : 1);
    uint64_t need = 0;
    CHECK_OK(hostfirst_view_copy(v, got, n, &need));
    CHECK(need == n && memcmp(got, want, n) == 0);
    free(got);
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(f));
}

/* ---- api ---------------------------------------------------------------------------------------------- */

/* Tensor k of the api file: dtype, shape (rank 2), k's byte pattern. Sub-byte dtypes get whole bytes. */
static void api_shape(hostfirst_dtype d, uint64_t shape[2]) {
    shape[0] = 4;
    shape[1] = hostfirst_dtype_bits(d) % 8 ? 8 : 3;
}

static size_t api_bytes(hostfirst_dtype d) {
    uint64_t s[2];
    api_shape(d, s);
    return (size_t)(s[0] * s[1] * hostfirst_dtype_bits(d) / 8);
}

static void mode_api(const char *dir) {
    size_t before = live_handles();
    char *path = join(dir, "api.safetensors");
    unlink(path);
    hostfirst_writer_options o;
    CHECK_OK(hostfirst_writer_options_init(&o, sizeof o));
    CHECK(o.struct_size == sizeof o && o.world == 0 && o.no_sync == 0 && o.agree == NULL);
    hostfirst_writer *w = NULL;
    CHECK_OK(hostfirst_writer_open(path, &o, &w));

    /* Every dtype from host memory, kept alive until finish. */
    unsigned char *data[23] = {0};
    for (uint32_t d = HOSTFIRST_DTYPE_BOOL; d <= HOSTFIRST_DTYPE_F8_E5M2FNUZ; d++) {
        uint64_t shape[2];
        api_shape((hostfirst_dtype)d, shape);
        size_t n = api_bytes((hostfirst_dtype)d);
        data[d] = malloc(n);
        fill(data[d], n, d);
        char name[32];
        snprintf(name, sizeof name, "t%02u.%s", d, hostfirst_dtype_name((hostfirst_dtype)d));
        CHECK_OK(hostfirst_writer_add_host(w, name, (hostfirst_dtype)d, shape, 2, data[d], n));
    }
    /* A scalar and an empty tensor. */
    double scalar = 2.5;
    CHECK_OK(hostfirst_writer_add_host(w, "scalar", HOSTFIRST_DTYPE_F64, NULL, 0, &scalar, sizeof scalar));
    uint64_t empty_shape[2] = {0, 5};
    CHECK_OK(hostfirst_writer_add_host(w, "empty", HOSTFIRST_DTYPE_I32, empty_shape, 2, NULL, 0));
    /* A tensor in two row pieces. */
    uint64_t pshape[2] = {4, 6}, start0[2] = {0, 0}, start1[2] = {2, 0}, plen[2] = {2, 6};
    unsigned char whole[96];
    fill(whole, sizeof whole, 99);
    CHECK_OK(hostfirst_writer_declare(w, "pieces", HOSTFIRST_DTYPE_F32, pshape, 2));
    CHECK_OK(hostfirst_writer_declare(w, "pieces", HOSTFIRST_DTYPE_F32, pshape, 2)); /* the same again: no-op */
    CHECK_OK(hostfirst_writer_add_piece_host(w, "pieces", start1, plen, 2, whole + 48, 48));
    CHECK_OK(hostfirst_writer_add_piece_host(w, "pieces", start0, plen, 2, whole, 48));

    /* Bad input: exact statuses, nothing declared. */
    uint64_t shape3[1] = {3};
    unsigned char x[16] = {0};
    CHECK_STATUS(hostfirst_writer_add_host(w, "t01.BOOL", HOSTFIRST_DTYPE_BOOL, shape3, 1, x, 3),
                 HOSTFIRST_STATUS_DUPLICATE_TENSOR);
    CHECK_MSG("declared twice");
    CHECK_STATUS(hostfirst_writer_add_host(w, "short", HOSTFIRST_DTYPE_F32, shape3, 1, x, 8),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("12 bytes");
    CHECK_STATUS(hostfirst_writer_add_host(w, "bad dtype", 99, shape3, 1, x, 3), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_writer_add_host(w, "__metadata__", HOSTFIRST_DTYPE_U8, shape3, 1, x, 3),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_writer_add_host(w, NULL, HOSTFIRST_DTYPE_U8, shape3, 1, x, 3), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_writer_add_host(w, "nodata", HOSTFIRST_DTYPE_U8, shape3, 1, NULL, 3),
                 HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_writer_add_host(w, "noshape", HOSTFIRST_DTYPE_U8, NULL, 1, x, 3), HOSTFIRST_STATUS_NULL_ARGUMENT);
    char *long_name = malloc(5000);
    memset(long_name, 'n', 4999);
    long_name[4999] = 0;
    CHECK_STATUS(hostfirst_writer_add_host(w, long_name, HOSTFIRST_DTYPE_U8, shape3, 1, x, 3),
                 HOSTFIRST_STATUS_LIMIT_EXCEEDED);
    free(long_name);
    const char bad_utf8[] = {'a', (char)0xff, 0};
    CHECK_STATUS(hostfirst_writer_add_host(w, bad_utf8, HOSTFIRST_DTYPE_U8, shape3, 1, x, 3),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    uint64_t ostart[2] = {1, 2}, olen[2] = {2, 2};
    CHECK_STATUS(hostfirst_writer_add_piece_host(w, "pieces", ostart, olen, 2, x, 16), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("overlaps");
    uint64_t fstart[2] = {3, 0}, flen[2] = {2, 6};
    CHECK_STATUS(hostfirst_writer_add_piece_host(w, "pieces", fstart, flen, 2, whole, 48), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_writer_add_piece_host(w, "nope", start0, plen, 2, whole, 48), HOSTFIRST_STATUS_NOT_FOUND);
    uint64_t other[1] = {7};
    CHECK_STATUS(hostfirst_writer_declare(w, "pieces", HOSTFIRST_DTYPE_F32, other, 1), HOSTFIRST_STATUS_DUPLICATE_TENSOR);
    const char *dup_keys[] = {"k", "k"}, *dup_values[] = {"1", "2"};
    CHECK_STATUS(hostfirst_writer_set_metadata(w, dup_keys, dup_values, 2), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_writer_set_metadata(w, NULL, dup_values, 1), HOSTFIRST_STATUS_NULL_ARGUMENT);
    const char *keys[] = {"format"}, *values[] = {"pt"};
    CHECK_OK(hostfirst_writer_set_metadata(w, keys, values, 1));

    hostfirst_writer_info info = {.struct_size = sizeof info};
    CHECK(access(path, F_OK) != 0); /* nothing written before finish */
    CHECK_OK(hostfirst_writer_finish(w, &info));
    CHECK(info.parts == 1 && info.index == NULL && info.tensors == 25 && info.written == info.file_bytes);
    const char *part = NULL;
    CHECK_OK(hostfirst_writer_part_path(w, 0, &part));
    CHECK(same_path(part, path));
    CHECK_STATUS(hostfirst_writer_part_path(w, 1, &part), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_writer_finish(w, NULL), HOSTFIRST_STATUS_ALREADY_USED);
    CHECK_STATUS(hostfirst_writer_add_host(w, "late", HOSTFIRST_DTYPE_U8, shape3, 1, x, 3), HOSTFIRST_STATUS_ALREADY_USED);
    CHECK_OK(hostfirst_writer_free(w));
    CHECK_STATUS(hostfirst_writer_finish(w, NULL), HOSTFIRST_STATUS_INVALID_HANDLE); /* use after free */
    CHECK_STATUS(hostfirst_writer_free(w), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_writer_free(NULL));
    CHECK(staged_files(dir) == 0);

    /* Round trip through the reader. */
    for (uint32_t d = HOSTFIRST_DTYPE_BOOL; d <= HOSTFIRST_DTYPE_F8_E5M2FNUZ; d++) {
        char name[32];
        snprintf(name, sizeof name, "t%02u.%s", d, hostfirst_dtype_name((hostfirst_dtype)d));
        check_tensor(path, name, data[d], api_bytes((hostfirst_dtype)d));
        free(data[d]);
    }
    check_tensor(path, "pieces", whole, sizeof whole);

    /* Views and cpu buffers as sources (api.safetensors stays as written: the Rust test compares it). */
    char *vpath = join(dir, "views.safetensors");
    hostfirst_file *f = NULL;
    CHECK_OK(hostfirst_file_open(path, &f));
    hostfirst_view *v = NULL, *rows = NULL;
    CHECK_OK(hostfirst_file_view(f, "pieces", &v));
    CHECK_OK(hostfirst_view_slice_rows(v, 1, 3, &rows));
    hostfirst_device cpu;
    CHECK_OK(hostfirst_device_parse("cpu", &cpu));
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_put(v, &cpu, NULL, &b, NULL));
    CHECK_OK(hostfirst_writer_open(vpath, NULL, &w));
    CHECK_OK(hostfirst_writer_add_view(w, NULL, v));
    CHECK_OK(hostfirst_writer_add_view(w, "rows", rows));
    CHECK_OK(hostfirst_writer_add_buffer(w, "buffer", b));
    CHECK_STATUS(hostfirst_writer_add_view(w, NULL, v), HOSTFIRST_STATUS_DUPLICATE_TENSOR);
    CHECK_OK(hostfirst_buffer_free(b)); /* the writer keeps it */
    CHECK_OK(hostfirst_view_free(rows));
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(f)); /* the writer keeps the views' file */
    CHECK_OK(hostfirst_writer_finish(w, NULL));
    CHECK_OK(hostfirst_writer_free(w));
    check_tensor(vpath, "pieces", whole, sizeof whole);
    check_tensor(vpath, "rows", whole + 24, 48);
    check_tensor(vpath, "buffer", whole, sizeof whole);

    /* A new save over the file a view reads: the rename keeps the view on the old file's bytes (POSIX). Windows
     * refuses to replace a mapped file (platform.h): PERMISSION_DENIED saying so, the target and the view keep
     * their bytes, no staged file is left. */
    CHECK_OK(hostfirst_file_open(vpath, &f));
    CHECK_OK(hostfirst_file_view(f, "rows", &v));
    CHECK_OK(hostfirst_writer_open(vpath, NULL, &w));
    CHECK_OK(hostfirst_writer_add_view(w, "again", v));
    CHECK_OK(hostfirst_writer_add_host(w, "other", HOSTFIRST_DTYPE_U8, shape3, 1, x, 3));
#if MAPPED_FILES_REPLACEABLE
    CHECK_OK(hostfirst_writer_finish(w, NULL));
#else
    CHECK_STATUS(hostfirst_writer_finish(w, NULL), HOSTFIRST_STATUS_PERMISSION_DENIED);
    CHECK_MSG("open or mapped by a reader");
    CHECK_MSG("the target is unchanged");
    CHECK(staged_files(dir) == 0);
#endif
    CHECK_OK(hostfirst_writer_free(w));
    unsigned char got[48];
    CHECK_OK(hostfirst_view_copy(v, got, sizeof got, NULL));
    CHECK(!memcmp(got, whole + 24, sizeof got));
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(f));
#if MAPPED_FILES_REPLACEABLE
    check_tensor(vpath, "again", whole + 24, 48);
#else
    check_tensor(vpath, "rows", whole + 24, 48);
#endif
    free(vpath);

    /* Part files: three tensors of 1 KiB, at most 2 KiB per part. */
    char *set = join(dir, "set.safetensors");
    CHECK_OK(hostfirst_writer_options_init(&o, sizeof o));
    o.max_part_bytes = 2048;
    CHECK_OK(hostfirst_writer_open(set, &o, &w));
    unsigned char blocks[3][1024];
    uint64_t s256[1] = {256};
    for (int k = 0; k < 3; k++) {
        fill(blocks[k], 1024, (unsigned)k);
        char name[16];
        snprintf(name, sizeof name, "block.%d", k);
        CHECK_OK(hostfirst_writer_add_host(w, name, HOSTFIRST_DTYPE_F32, s256, 1, blocks[k], 1024));
    }
    CHECK_OK(hostfirst_writer_finish(w, &info));
    CHECK(info.parts == 2 && info.index != NULL && strstr(info.index, "set.safetensors.index.json"));
    CHECK_OK(hostfirst_writer_part_path(w, 1, &part));
    CHECK(strstr(part, "set-00002-of-00002.safetensors") != NULL);
    check_tensor(info.index, "block.2", blocks[2], 1024);
    CHECK_OK(hostfirst_writer_free(w));
    free(set);

    /* A descriptor: from its position, left after the save. */
    char *fdpath = join(dir, "fd.bin");
    int fd = open(fdpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, "HEAD", 4) == 4);
#ifdef _WIN32
    /* Windows: a C runtime descriptor is the caller's runtime's; refused, saying so, nothing written. */
    w = NULL;
    CHECK_STATUS(hostfirst_writer_open_fd(fd, NULL, &w), HOSTFIRST_STATUS_UNSUPPORTED);
    CHECK(w == NULL);
    CHECK_MSG("open the writer on a path");
    CHECK(lseek(fd, 0, SEEK_CUR) == 4);
    CHECK(close(fd) == 0);
    CHECK_STATUS(hostfirst_writer_open_fd(-1, NULL, &w), HOSTFIRST_STATUS_UNSUPPORTED);
#else
    CHECK_OK(hostfirst_writer_open_fd(fd, NULL, &w));
    CHECK_OK(hostfirst_writer_add_host(w, "block", HOSTFIRST_DTYPE_F32, s256, 1, blocks[0], 1024));
    CHECK_OK(hostfirst_writer_finish(w, &info));
    CHECK_OK(hostfirst_writer_free(w));
    CHECK(lseek(fd, 0, SEEK_CUR) == (off_t)(4 + info.file_bytes));
    CHECK(close(fd) == 0); /* the writer's duplicate is closed, ours still open until here */
    CHECK_STATUS(hostfirst_writer_open_fd(-1, NULL, &w), HOSTFIRST_STATUS_IO);
    CHECK_OK(hostfirst_writer_options_init(&o, sizeof o));
    o.max_part_bytes = 10;
    CHECK_STATUS(hostfirst_writer_open_fd(1, &o, &w), HOSTFIRST_STATUS_INVALID_ARGUMENT);
#endif
    free(fdpath);

    /* Options and paths refused at open. */
    CHECK_OK(hostfirst_writer_options_init(&o, sizeof o));
    o.world = 2;
    CHECK_STATUS(hostfirst_writer_open(path, &o, &w), HOSTFIRST_STATUS_INVALID_ARGUMENT); /* no agree */
    CHECK_STATUS(hostfirst_writer_open(dir, NULL, &w), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_writer_open("", NULL, &w), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_writer_open(NULL, NULL, &w), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_writer_options_init(&o, 4), HOSTFIRST_STATUS_INVALID_ARGUMENT);

    /* A writer freed before finish writes nothing. */
    char *never = join(dir, "never.safetensors");
    CHECK_OK(hostfirst_writer_open(never, NULL, &w));
    CHECK_OK(hostfirst_writer_add_host(w, "x", HOSTFIRST_DTYPE_U8, shape3, 1, x, 3));
    CHECK_OK(hostfirst_writer_free(w));
    CHECK(access(never, F_OK) != 0);
    free(never);
    CHECK(staged_files(dir) == 0);
    CHECK(live_handles() == before);
    free(path);
}

/* ---- gen: one generation of the crash test ------------------------------------------------------------- */

static void mode_gen(int argc, char **argv) {
    CHECK(argc >= 5);
    const char *path = argv[2];
    unsigned gen = (unsigned)strtoul(argv[3], NULL, 10);
    size_t mib = (size_t)strtoul(argv[4], NULL, 10);
    hostfirst_writer_options o;
    CHECK_OK(hostfirst_writer_options_init(&o, sizeof o));
    o.max_part_bytes = argc > 5 ? strtoull(argv[5], NULL, 10) : 0;
    o.no_sync = argc > 6 ? atoi(argv[6]) : 0;
    o.chunk_bytes = 64 << 10;
    o.staging_bytes = 256 << 10; /* many waves: many points to be killed at */
    hostfirst_writer *w = NULL;
    CHECK_OK(hostfirst_writer_open(path, &o, &w));
    size_t n = mib << 18; /* bytes per tensor: a quarter of MIB MiB */
    unsigned char *bufs[4];
    for (unsigned k = 0; k < 4; k++) {
        bufs[k] = malloc(n);
        CHECK(bufs[k] != NULL);
        fill(bufs[k], n, k * 13 + gen * 101);
        char name[16];
        snprintf(name, sizeof name, "w%u", k);
        uint64_t shape[1] = {n};
        CHECK_OK(hostfirst_writer_add_host(w, name, HOSTFIRST_DTYPE_U8, shape, 1, bufs[k], n));
    }
    char g[16];
    snprintf(g, sizeof g, "%u", gen);
    const char *keys[] = {"generation"}, *values[] = {g};
    CHECK_OK(hostfirst_writer_set_metadata(w, keys, values, 1));
    CHECK_OK(hostfirst_writer_finish(w, NULL));
    CHECK_OK(hostfirst_writer_free(w));
    for (unsigned k = 0; k < 4; k++) free(bufs[k]);
}

/* ---- cuda ------------------------------------------------------------------------------------------------ */

static void mode_cuda(const char *dir) {
    const char *expect = getenv("EXPECT");
    int device_error = expect && !strcmp(expect, "DEVICE_ERROR");
    char *src = join(dir, "cuda-src.safetensors"), *path = join(dir, "cuda.safetensors");
    /* A source file: 3 MiB of U8 rows, and a 1 KiB tensor. */
    size_t n = 3u << 20;
    unsigned char *big = malloc(n), small[1024];
    fill(big, n, 5);
    fill(small, sizeof small, 6);
    hostfirst_writer *w = NULL;
    uint64_t bshape[2] = {3072, 1024}, sshape[1] = {256};
    CHECK_OK(hostfirst_writer_open(src, NULL, &w));
    CHECK_OK(hostfirst_writer_add_host(w, "big", HOSTFIRST_DTYPE_U8, bshape, 2, big, n));
    CHECK_OK(hostfirst_writer_add_host(w, "small", HOSTFIRST_DTYPE_F32, sshape, 1, small, sizeof small));
    CHECK_OK(hostfirst_writer_finish(w, NULL));
    CHECK_OK(hostfirst_writer_free(w));
    /* The old target. */
    FILE *old = fopen(path, "wb");
    CHECK(old && fputs("old target", old) >= 0 && fclose(old) == 0);

    hostfirst_file *f = NULL;
    hostfirst_view *vb = NULL, *vs = NULL, *top = NULL, *bottom = NULL;
    CHECK_OK(hostfirst_file_open(src, &f));
    CHECK_OK(hostfirst_file_view(f, "big", &vb));
    CHECK_OK(hostfirst_file_view(f, "small", &vs));
    CHECK_OK(hostfirst_view_slice_rows(vb, 0, 1024, &top));
    CHECK_OK(hostfirst_view_slice_rows(vb, 1024, 3072, &bottom));
    hostfirst_device gpu;
    CHECK_OK(hostfirst_device_parse("cuda:0", &gpu));
    hostfirst_buffer *bb = NULL, *bs = NULL, *btop = NULL, *bbottom = NULL;
    CHECK_OK(hostfirst_put(vb, &gpu, NULL, &bb, NULL));
    CHECK_OK(hostfirst_put(vs, &gpu, NULL, &bs, NULL));
    CHECK_OK(hostfirst_put(top, &gpu, NULL, &btop, NULL));
    CHECK_OK(hostfirst_put(bottom, &gpu, NULL, &bbottom, NULL));

    hostfirst_writer_options o;
    CHECK_OK(hostfirst_writer_options_init(&o, sizeof o));
    o.staging_bytes = 1 << 20; /* a ring of 4 slabs of 256 KiB: several rounds for 3 MiB */
    o.chunk_bytes = 256 << 10;
    CHECK_OK(hostfirst_writer_open(path, &o, &w));
    CHECK_OK(hostfirst_writer_add_buffer(w, NULL, bb));
    CHECK_OK(hostfirst_writer_add_buffer(w, NULL, bs));
    CHECK_OK(hostfirst_writer_declare(w, "halves", HOSTFIRST_DTYPE_U8, bshape, 2));
    uint64_t s0[2] = {0, 0}, s1[2] = {1024, 0};
    CHECK_OK(hostfirst_writer_add_piece_buffer(w, "halves", s1, 2, bbottom));
    CHECK_OK(hostfirst_writer_add_piece_buffer(w, "halves", s0, 2, btop));
    CHECK_STATUS(hostfirst_writer_add_piece_buffer(w, "halves", s0, 2, bs), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_OK(hostfirst_buffer_free(bb));
    CHECK_OK(hostfirst_buffer_free(bs));
    CHECK_OK(hostfirst_buffer_free(btop));
    CHECK_OK(hostfirst_buffer_free(bbottom));
    hostfirst_status st = hostfirst_writer_finish(w, NULL);
    if (device_error) {
        CHECK_STATUS(st, HOSTFIRST_STATUS_DEVICE_ERROR);
        CHECK_MSG("CUDA_ERROR_ILLEGAL_ADDRESS"); /* from the copy, or from the wait (deferred mode) */
        CHECK_MSG("tensor 'big'");
        size_t len = 0;
        unsigned char *b = read_all(path, &len);
        CHECK(len == 10 && !memcmp(b, "old target", 10));
        free(b);
    } else {
        CHECK_OK(st);
        check_tensor(path, "big", big, n);
        check_tensor(path, "small", small, sizeof small);
        check_tensor(path, "halves", big, n);
    }
    CHECK(staged_files(dir) == 0);
    CHECK_OK(hostfirst_writer_free(w));
    CHECK_OK(hostfirst_view_free(vb));
    CHECK_OK(hostfirst_view_free(vs));
    CHECK_OK(hostfirst_view_free(top));
    CHECK_OK(hostfirst_view_free(bottom));
    CHECK_OK(hostfirst_file_free(f));
    free(big);
    free(src);
    free(path);
}

/* ---- refused ---------------------------------------------------------------------------------------------- */

static void mode_refused(const char *path, const char *status) {
    hostfirst_status want = HOSTFIRST_STATUS_IO;
    if (!strcmp(status, "NO_SPACE")) want = HOSTFIRST_STATUS_NO_SPACE;
    if (!strcmp(status, "PERMISSION_DENIED")) want = HOSTFIRST_STATUS_PERMISSION_DENIED;
    size_t before_len = 0;
    unsigned char *before = access(path, F_OK) == 0 ? read_all(path, &before_len) : NULL;
    size_t n = 4u << 20;
    unsigned char *big = malloc(n);
    fill(big, n, 1);
    uint64_t shape[1] = {n};
    hostfirst_writer *w = NULL;
    CHECK_OK(hostfirst_writer_open(path, NULL, &w));
    CHECK_OK(hostfirst_writer_add_host(w, "big", HOSTFIRST_DTYPE_U8, shape, 1, big, n));
    CHECK_STATUS(hostfirst_writer_finish(w, NULL), want);
    fprintf(stdout, "%s\n", hostfirst_last_error_message());
    CHECK_OK(hostfirst_writer_free(w));
    if (before) {
        size_t len = 0;
        unsigned char *after = read_all(path, &len);
        CHECK(len == before_len && !memcmp(after, before, len));
        free(after);
        free(before);
    } else {
        CHECK(access(path, F_OK) != 0);
    }
    char *dir = strdup(path);
    char *slash = strrchr(dir, '/');
#ifdef _WIN32
    char *back = strrchr(dir, '\\'); /* Windows paths may use either separator */
    if (back && (!slash || back > slash)) slash = back;
#endif
    if (slash) *slash = 0;
    CHECK(staged_files(slash ? dir : ".") == 0);
    free(dir);
    free(big);
}

int main(int argc, char **argv) {
    CHECK(argc >= 3);
    if (!strcmp(argv[1], "api")) mode_api(argv[2]);
    else if (!strcmp(argv[1], "gen")) mode_gen(argc, argv);
    else if (!strcmp(argv[1], "cuda")) mode_cuda(argv[2]);
    else if (!strcmp(argv[1], "refused") && argc >= 4) mode_refused(argv[2], argv[3]);
    else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    return 0;
}
