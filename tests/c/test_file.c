/* C ABI of host-first loading: open (file, memory, index set), accessors, views, slices, copies, NULLs,
 * too-small buffers, stale handles, closing the file before its views, truncation after open (POSIX: pread gives
 * TRUNCATED, the mapped pointer SIGBUS, shown in a forked child; Windows: the truncation is refused while the view
 * maps the file, and allowed once it is freed), concurrent views. argv[1]: a scratch directory. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#ifndef _WIN32
#include <sys/wait.h>
#endif
#include "check.h"
#include "platform.h"

static char dir[1024];

static const char *path_in(const char *name) {
    static char buf[4][1200];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Writes len (u64 LE) | header | data. */
static void write_st(const char *path, const char *header, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    uint64_t len = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));
    CHECK(fwrite(le, 1, 8, f) == 8);
    CHECK(fwrite(header, 1, len, f) == len);
    if (n) CHECK(fwrite(data, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

static const char *HDR =
    "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[4,28]},"
    "\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]},"
    "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[28,28]}}";

static void test_dtypes(void) {
    CHECK(strcmp(hostfirst_dtype_name(HOSTFIRST_DTYPE_BF16), "BF16") == 0);
    CHECK(strcmp(hostfirst_dtype_name(HOSTFIRST_DTYPE_F8_E4M3), "F8_E4M3") == 0);
    CHECK(hostfirst_dtype_bits(HOSTFIRST_DTYPE_F4) == 4);
    CHECK(hostfirst_dtype_bits(HOSTFIRST_DTYPE_F6_E2M3) == 6);
    CHECK(hostfirst_dtype_bits(HOSTFIRST_DTYPE_C64) == 64);
    CHECK(strcmp(hostfirst_dtype_name(0), "UNKNOWN") == 0 && hostfirst_dtype_bits(0) == 0);
    CHECK(strcmp(hostfirst_dtype_name(999), "UNKNOWN") == 0 && hostfirst_dtype_bits(0xffffffffu) == 0);
    uint32_t d = 0;
    CHECK_OK(hostfirst_dtype_from_name("F8_E5M2FNUZ", &d));
    CHECK(d == HOSTFIRST_DTYPE_F8_E5M2FNUZ);
    CHECK_STATUS(hostfirst_dtype_from_name("f32", &d), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_dtype_from_name(NULL, &d), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_dtype_from_name("F32", NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
}

static void test_file_api(void) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    unsigned char data[28];
    int32_t s = -7;
    memcpy(data, &s, 4);
    memcpy(data + 4, w, 24);
    const char *p = path_in("basic.safetensors");
    write_st(p, HDR, data, sizeof data);

    size_t base = live_handles();
    hostfirst_file *f = NULL;
    CHECK_STATUS(hostfirst_file_open(NULL, &f), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_file_open("", &f), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(strcmp(hostfirst_last_error_message(),
                 "the path is empty: give the path of a .safetensors file or of a *.safetensors.index.json") == 0);
    CHECK(f == NULL);
    CHECK_STATUS(hostfirst_file_open(p, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_file_open(path_in("missing.safetensors"), &f), HOSTFIRST_STATUS_IO);
    CHECK_MSG("missing.safetensors");
    CHECK(f == NULL);
    CHECK_OK(hostfirst_file_open(p, &f));
    CHECK(f != NULL && live_handles() == base + 1);

    size_t n = 0, idx = 0;
    CHECK_OK(hostfirst_file_tensor_count(f, &n));
    CHECK(n == 3);
    CHECK_STATUS(hostfirst_file_tensor_count(NULL, &n), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_file_tensor_count(f, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    const char *name = NULL;
    CHECK_OK(hostfirst_file_tensor_name(f, 0, &name));
    CHECK(strcmp(name, "s") == 0); /* file order: by offset */
    CHECK_OK(hostfirst_file_tensor_name(f, 2, &name));
    CHECK(strcmp(name, "e") == 0);
    CHECK_STATUS(hostfirst_file_tensor_name(f, 3, &name), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK(strcmp(name, "e") == 0); /* untouched on failure */
    CHECK_OK(hostfirst_file_find(f, "w", &idx));
    CHECK(idx == 1);
    CHECK_STATUS(hostfirst_file_find(f, "nope", &idx), HOSTFIRST_STATUS_NOT_FOUND);
    CHECK_MSG("nope");

    /* How the file is read (hostfirst_file_read_engine): a file on a local disk is mapped; the buffer rules. */
    size_t elen = 0;
    char engine[1024];
    CHECK_OK(hostfirst_file_read_engine(f, NULL, 0, &elen));
    CHECK(elen > 0 && elen < sizeof engine);
    CHECK_STATUS(hostfirst_file_read_engine(f, engine, 4, &elen), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
    CHECK_OK(hostfirst_file_read_engine(f, engine, sizeof engine, &elen));
    CHECK(elen == strlen(engine) && strstr(engine, ": mapped (") != NULL && strstr(engine, "O_DIRECT: ") != NULL);
    CHECK_STATUS(hostfirst_file_read_engine(NULL, engine, sizeof engine, &elen), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_file_read_engine(f, NULL, 8, &elen), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_file_find(f, NULL, &idx), HOSTFIRST_STATUS_NULL_ARGUMENT);

    size_t nm = 0;
    CHECK_OK(hostfirst_file_metadata_count(f, &nm));
    CHECK(nm == 2);
    const char *k = NULL, *v = NULL;
    CHECK_OK(hostfirst_file_metadata_get(f, 1, &k, &v));
    CHECK(strcmp(k, "k") == 0 && strcmp(v, "v") == 0);
    CHECK_OK(hostfirst_file_metadata_get(f, 0, NULL, &v));
    CHECK(strcmp(v, "pt") == 0);
    CHECK_STATUS(hostfirst_file_metadata_get(f, 2, &k, &v), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_OK(hostfirst_file_metadata_find(f, "format", &v));
    CHECK(strcmp(v, "pt") == 0);
    CHECK_STATUS(hostfirst_file_metadata_find(f, "x", &v), HOSTFIRST_STATUS_NOT_FOUND);
    uint64_t total = 0;
    CHECK_OK(hostfirst_file_data_bytes(f, &total));
    CHECK(total == 28);
    const char *fp = NULL;
    CHECK_OK(hostfirst_file_path(f, &fp));
    CHECK(strcmp(fp, p) == 0);

    /* Views. */
    hostfirst_view *vw = NULL, *vs = NULL, *rows = NULL;
    CHECK_STATUS(hostfirst_file_view(f, "nope", &vw), HOSTFIRST_STATUS_NOT_FOUND);
    CHECK(vw == NULL);
    CHECK_STATUS(hostfirst_file_view(f, "w", NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_file_view_at(f, 9, &vw), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_OK(hostfirst_file_view(f, "w", &vw));
    CHECK_OK(hostfirst_file_view_at(f, 0, &vs));

    hostfirst_view_info info;
    memset(&info, 0, sizeof info);
    CHECK_STATUS(hostfirst_view_describe(vw, &info), HOSTFIRST_STATUS_INVALID_ARGUMENT); /* struct_size 0 */
    CHECK(info.name == NULL);
    info.struct_size = sizeof info;
    CHECK_STATUS(hostfirst_view_describe(vw, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_view_describe(vw, &info));
    CHECK(info.struct_size == sizeof info);
    CHECK(strcmp(info.name, "w") == 0 && info.dtype == HOSTFIRST_DTYPE_F32 && info.rank == 2);
    CHECK(info.shape[0] == 3 && info.shape[1] == 2 && info.nbytes == 24 && info.data_offset == 4);
    CHECK(info.file_offset == 8 + strlen(HDR) + 4);
    CHECK(memcmp(info.data, w, 24) == 0);
    CHECK(info.alignment >= 1 && info.alignment <= 4096 && (info.alignment & (info.alignment - 1)) == 0);
    CHECK((uintptr_t)info.data % info.alignment == 0);
    CHECK(info.alignment == 4096 || ((uintptr_t)info.data / info.alignment) % 2 == 1);

    /* The rule of extensible structs for an output (issue 37): struct_size must hold the whole 1.0 layout
     * (every field today; 0.1's shorter struct is refused now); a newer, larger struct gets today's fields,
     * zeros past them up to its struct_size and nothing past it, and struct_size says how many bytes are the
     * library's; a struct_size ending inside the last field is refused, nothing written (never part of a
     * field). */
    {
        const size_t end = offsetof(hostfirst_view_info, strides) + sizeof info.strides;
        union {
            hostfirst_view_info info;
            unsigned char bytes[sizeof(hostfirst_view_info) + 16];
        } u;
        memset(&u, 0xAA, sizeof u);
        u.info.struct_size = sizeof(hostfirst_view_info) + 8;
        CHECK_OK(hostfirst_view_describe(vw, &u.info));
        CHECK(u.info.struct_size == sizeof(hostfirst_view_info) && u.info.nbytes == 24);
        for (size_t i = sizeof(hostfirst_view_info); i < sizeof(hostfirst_view_info) + 8; i++) CHECK(u.bytes[i] == 0);
        for (size_t i = sizeof(hostfirst_view_info) + 8; i < sizeof u.bytes; i++) CHECK(u.bytes[i] == 0xAA);
        const size_t refused[] = {end - 1, offsetof(hostfirst_view_info, alignment) + sizeof info.alignment, 4097};
        for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
            memset(&u, 0xAA, sizeof u);
            u.info.struct_size = refused[k];
            CHECK_STATUS(hostfirst_view_describe(vw, &u.info), HOSTFIRST_STATUS_INVALID_ARGUMENT);
            CHECK_MSG("hostfirst_view_info");
            for (size_t i = sizeof(size_t); i < sizeof u.bytes; i++) CHECK(u.bytes[i] == 0xAA);
        }
    }

    hostfirst_view_info si;
    memset(&si, 0, sizeof si);
    si.struct_size = sizeof si;
    CHECK_OK(hostfirst_view_describe(vs, &si));
    CHECK(si.rank == 0 && si.shape == NULL && si.nbytes == 4);

    /* Copies: too small, queries, NULLs, exact. */
    float out[6] = {0};
    uint64_t need = 0;
    CHECK_STATUS(hostfirst_view_copy(vw, out, 23, &need), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
    CHECK(need == 24 && out[0] == 0);
    CHECK_MSG("needs 24 bytes");
    need = 0;
    CHECK_OK(hostfirst_view_copy(vw, NULL, 0, &need));
    CHECK(need == 24);
    CHECK_STATUS(hostfirst_view_copy(vw, NULL, 24, &need), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_view_copy(NULL, out, 24, &need), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_view_copy(vw, out, sizeof out, NULL));
    CHECK(memcmp(out, w, 24) == 0);
    float two[2];
    CHECK_OK(hostfirst_view_read(vw, 16, two, 8));
    CHECK(two[0] == 5 && two[1] == 6);
    CHECK_STATUS(hostfirst_view_read(vw, 20, two, 8), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_view_read(vw, UINT64_MAX, two, 8), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_view_read(vw, 0, NULL, 8), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_view_read(vw, 24, NULL, 0));

    /* Prefault: maps the view's pages (Linux 5.14+ on CI); the flag is written only on success. */
    int32_t populated = 0;
    CHECK_OK(hostfirst_view_prefault(vw, &populated));
    CHECK(populated == 1);
    CHECK_OK(hostfirst_view_prefault(vs, NULL));
    CHECK_STATUS(hostfirst_view_prefault(NULL, &populated), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_view_prefault((const hostfirst_view *)f, &populated), HOSTFIRST_STATUS_INVALID_HANDLE);

    /* Empty tensor: copy 0 bytes, NULL dst allowed. */
    hostfirst_view *ve = NULL;
    CHECK_OK(hostfirst_file_view(f, "e", &ve));
    CHECK_OK(hostfirst_view_copy(ve, NULL, 0, &need));
    CHECK(need == 0);
    CHECK_OK(hostfirst_view_free(ve));

    /* Row slices. */
    CHECK_STATUS(hostfirst_view_slice_rows(vw, 2, 1, &rows), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_view_slice_rows(vw, 0, 4, &rows), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_view_slice_rows(vs, 0, 0, &rows), HOSTFIRST_STATUS_UNSUPPORTED);
    CHECK(rows == NULL);
    CHECK_OK(hostfirst_view_slice_rows(vw, 1, 3, &rows));
    hostfirst_view_info ri;
    memset(&ri, 0, sizeof ri);
    ri.struct_size = sizeof ri;
    CHECK_OK(hostfirst_view_describe(rows, &ri));
    CHECK(ri.shape[0] == 2 && ri.shape[1] == 2 && ri.nbytes == 16 && ri.data_offset == 12);
    CHECK(memcmp(ri.data, w + 2, 16) == 0);

    /* Close the file first: views keep working. */
    CHECK_OK(hostfirst_file_free(f));
    CHECK_STATUS(hostfirst_file_free(f), HOSTFIRST_STATUS_INVALID_HANDLE); /* double free */
    CHECK_STATUS(hostfirst_file_tensor_count(f, &n), HOSTFIRST_STATUS_INVALID_HANDLE); /* use after free */
    CHECK_STATUS(hostfirst_file_view(f, "w", &vw), HOSTFIRST_STATUS_INVALID_HANDLE);
    memset(out, 0, sizeof out);
    CHECK_OK(hostfirst_view_copy(vw, out, sizeof out, NULL));
    CHECK(memcmp(out, w, 24) == 0);
    CHECK_OK(hostfirst_view_describe(vw, &info));
    CHECK(strcmp(info.name, "w") == 0 && memcmp(info.data, w, 24) == 0);

    /* Wrong-type handles. */
    CHECK_STATUS(hostfirst_file_tensor_count((const hostfirst_file *)vw, &n), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_file_free((hostfirst_file *)vw), HOSTFIRST_STATUS_INVALID_HANDLE);

    CHECK_OK(hostfirst_view_free(rows));
    CHECK_OK(hostfirst_view_free(vs));
    CHECK_OK(hostfirst_view_free(vw));
    CHECK_STATUS(hostfirst_view_free(vw), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_view_prefault(vw, NULL), HOSTFIRST_STATUS_INVALID_HANDLE); /* use after free */
    CHECK_STATUS(hostfirst_view_copy(vw, out, sizeof out, NULL), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_view_free(NULL));
    CHECK_OK(hostfirst_file_free(NULL));
    CHECK(live_handles() == base);
}

static void test_memory_and_errors(void) {
    size_t base = live_handles();
    unsigned char buf[256];
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    uint64_t len = strlen(h);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len >> (8 * i));
    memcpy(buf + 8, h, len);
    buf[8 + len] = 42;
    buf[9 + len] = 43;
    hostfirst_file *f = NULL;
    CHECK_STATUS(hostfirst_file_open_memory(NULL, 10, &f), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_file_open_memory(NULL, 0, &f), HOSTFIRST_STATUS_HEADER_TOO_SMALL);
    CHECK_STATUS(hostfirst_file_open_memory(buf, 10 + len + 1, &f), HOSTFIRST_STATUS_INCOMPLETE_BUFFER);
    CHECK_STATUS(hostfirst_file_open_memory(buf, 9 + len, &f), HOSTFIRST_STATUS_INCOMPLETE_BUFFER);
    CHECK(f == NULL);
    CHECK_OK(hostfirst_file_open_memory(buf, 10 + len, &f));
    const char *p = NULL;
    CHECK_STATUS(hostfirst_file_path(f, &p), HOSTFIRST_STATUS_NOT_FOUND);
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_view(f, "a", &v));
    hostfirst_view_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(hostfirst_view_describe(v, &info));
    CHECK(info.data == (const void *)(buf + 8 + len)); /* zero-copy into the caller's memory */
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(f));

    /* A duplicate name and a reversed offset, with the message naming file and tensor. */
    const char *dup = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    const char *path = path_in("dup.safetensors");
    write_st(path, dup, "x", 1);
    CHECK_STATUS(hostfirst_file_open(path, &f), HOSTFIRST_STATUS_DUPLICATE_TENSOR);
    CHECK_MSG("dup.safetensors");
    CHECK_MSG("'a'");
    CHECK(hostfirst_status_is_format_error(hostfirst_last_error_status()) == 1);
    CHECK(live_handles() == base);
}

static void test_index_set(void) {
    write_st(path_in("s-1.safetensors"), "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "A", 1);
    write_st(path_in("s-2.safetensors"), "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", "BB", 2);
    const char *ip = path_in("set.index.json");
    FILE *fi = fopen(ip, "w");
    CHECK(fi != NULL);
    fputs("{\"metadata\":{\"total_size\":3},\"weight_map\":{\"b\":\"s-2.safetensors\",\"a\":\"s-1.safetensors\"}}", fi);
    fclose(fi);
    hostfirst_file *f = NULL;
    CHECK_OK(hostfirst_file_open(ip, &f)); /* detected by name */
    size_t n = 0;
    CHECK_OK(hostfirst_file_tensor_count(f, &n));
    CHECK(n == 2);
    const char *name = NULL, *v = NULL;
    CHECK_OK(hostfirst_file_tensor_name(f, 1, &name));
    CHECK(strcmp(name, "b") == 0);
    CHECK_OK(hostfirst_file_metadata_find(f, "total_size", &v));
    CHECK(strcmp(v, "3") == 0);
    hostfirst_view *vb = NULL;
    CHECK_OK(hostfirst_file_view(f, "b", &vb));
    char bb[2];
    CHECK_OK(hostfirst_view_copy(vb, bb, 2, NULL));
    CHECK(bb[0] == 'B' && bb[1] == 'B');
    CHECK_OK(hostfirst_view_free(vb));
    CHECK_OK(hostfirst_file_free(f));
    /* Detected by content whatever it is called; an index naming a missing shard is INVALID_INDEX. */
    const char *renamed = path_in("set-index.txt");
    remove(renamed); /* a previous run's: rename does not replace a file on Windows */
    CHECK(rename(ip, renamed) == 0);
    hostfirst_file *g = NULL;
    CHECK_OK(hostfirst_file_open(renamed, &g));
    CHECK_OK(hostfirst_file_tensor_count(g, &n));
    CHECK(n == 2);
    CHECK_OK(hostfirst_file_free(g));
    CHECK(remove(path_in("s-2.safetensors")) == 0);
    g = NULL;
    CHECK_STATUS(hostfirst_file_open(renamed, &g), HOSTFIRST_STATUS_INVALID_INDEX);
    CHECK_MSG("s-2.safetensors");
    CHECK(g == NULL);
}

static void test_truncated_after_open(void) {
    size_t n = 1 << 20;
    unsigned char *data = malloc(n);
    CHECK(data != NULL);
    for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i % 251);
    char h[128];
    snprintf(h, sizeof h, "{\"t\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", n, n);
    const char *p = path_in("shrinks.safetensors");
    write_st(p, h, data, n);
    hostfirst_file *f = NULL;
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_open(p, &f));
    CHECK_OK(hostfirst_file_view(f, "t", &v));
    CHECK_OK(hostfirst_file_free(f));
    hostfirst_view_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(hostfirst_view_describe(v, &info));
    unsigned char *out = malloc(n);
    CHECK(out != NULL);
#ifdef _WIN32
    /* Windows: the writer is refused while the view maps the file; the view keeps every byte, through a copy and
     * through the mapping. Once the view is freed (no mapping left), the file can shrink. */
    CHECK(shrink_file(p, 4096) == SHRINK_REFUSED_WHILE_MAPPED);
    CHECK_OK(hostfirst_view_copy(v, out, n, NULL));
    CHECK(memcmp(out, data, n) == 0);
    CHECK(memcmp(info.data, data, n) == 0);
    CHECK_OK(hostfirst_view_free(v));
    CHECK(shrink_file(p, 4096) == 0);
    CHECK_STATUS(hostfirst_file_open(p, &f), HOSTFIRST_STATUS_TRUNCATED); /* the header promises 1 MiB of data */
    free(out);
    free(data);
#else
    CHECK(shrink_file(p, 4096) == 0);
    CHECK_STATUS(hostfirst_view_copy(v, out, n, NULL), HOSTFIRST_STATUS_TRUNCATED);
    CHECK_MSG("shrinks.safetensors");
    CHECK_MSG("'t'");
    /* The mapped pointer is the documented hazard: touching a page past the new end raises SIGBUS. */
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        volatile const unsigned char *d = (const unsigned char *)info.data;
        unsigned char x = d[n - 1];
        _exit(x == 0xEE ? 3 : 4); /* not reached: SIGBUS first */
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS);
    CHECK_OK(hostfirst_view_free(v));
    free(out);
    free(data);
#endif
}

static hostfirst_file *shared_file;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        hostfirst_view *v = NULL;
        if (hostfirst_file_view(shared_file, (i % 2) ? "w" : "s", &v) != HOSTFIRST_STATUS_OK) return (void *)1;
        unsigned char buf[24];
        uint64_t need = 0;
        if (hostfirst_view_copy(v, buf, sizeof buf, &need) != HOSTFIRST_STATUS_OK) return (void *)1;
        if (hostfirst_view_free(v) != HOSTFIRST_STATUS_OK) return (void *)1;
    }
    return NULL;
}

static void test_threads(void) {
    size_t base = live_handles();
    CHECK_OK(hostfirst_file_open(path_in("basic.safetensors"), &shared_file));
    pthread_t t[4];
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, worker, NULL) == 0);
    for (int i = 0; i < 4; i++) {
        void *r = (void *)1;
        CHECK(pthread_join(t[i], &r) == 0);
        CHECK(r == NULL);
    }
    CHECK_OK(hostfirst_file_free(shared_file));
    CHECK(live_handles() == base);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    snprintf(dir, sizeof dir, "%s", argv[1]);
    size_t base = live_handles();
    test_dtypes();
    test_file_api();
    test_memory_and_errors();
    test_index_set();
    test_truncated_after_open();
    test_threads();
    CHECK(live_handles() == base);
    return 0;
}
