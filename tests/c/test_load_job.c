/* A whole-file load as one job per device (issue 22): every byte of 2,000 tensors of odd sizes, buffers that
 * outlive the load, a load cancelled by its progress callback and a load of a file truncated after opening
 * (Windows: the truncation is refused while the file is open, and the load reads every byte),
 * each freeing everything it took (run under valgrind by the valgrind pass; on the stand-in driver its exit
 * report must show nothing live).
 *
 *   test_load_job DIR TARGET     TARGET: cpu or cuda:0 (the latter needs the stand-in driver) */
#define _DEFAULT_SOURCE /* truncate */
#include "check.h"
#include "platform.h"

#define N 2000

static size_t elems(size_t i) { return 1 + (i * 37) % 300; }

static unsigned char byte_at(size_t k) { return (unsigned char)((k * 2654435761u) >> 11 ^ (k >> 12)); }

static int32_t cancel_at_first(uint64_t done, uint64_t total, void *user) {
    (void)done;
    (void)total;
    ++*(int *)user;
    return 1;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    char path[4096];
    snprintf(path, sizeof path, "%s/load_job_%s.safetensors", argv[1], argv[2][0] == 'c' && argv[2][1] == 'p' ? "cpu" : "cuda");

    /* The file: tensors t0..t1999 (F32), data in header order. */
    size_t cap = 128 * N, len = 1;
    char *header = malloc(cap);
    CHECK(header != NULL);
    header[0] = '{';
    size_t at = 0;
    for (size_t i = 0; i < N; i++) {
        size_t n = elems(i) * 4;
        len += (size_t)snprintf(header + len, cap - len, "%s\"t%zu\":{\"dtype\":\"F32\",\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                                i ? "," : "", i, elems(i), at, at + n);
        CHECK(len < cap - 2);
        at += n;
    }
    header[len++] = '}';
    header[len] = '\0';
    unsigned char *data = malloc(at);
    CHECK(data != NULL);
    for (size_t k = 0; k < at; k++) data[k] = byte_at(k);
    const void *parts[1] = {data};
    size_t sizes[1] = {at};
    write_safetensors(path, header, 1, parts, sizes);
    free(header);

    size_t handles = live_handles();
    hostfirst_file *file;
    CHECK_OK(hostfirst_file_open(path, &file));
    hostfirst_plan *plan;
    plan_all_to(file, argv[2], &plan);

    /* Every byte, through buffers that outlive the load. */
    hostfirst_load *load;
    CHECK_OK(hostfirst_load_run(file, plan, NULL, &load));
    hostfirst_buffer **bufs = calloc(N, sizeof *bufs);
    CHECK(bufs != NULL);
    for (size_t i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%zu", i);
        hostfirst_loaded kind = 0;
        CHECK_OK(hostfirst_load_get(load, name, &kind, &bufs[i], NULL));
        CHECK(kind == HOSTFIRST_LOADED_BUFFER);
    }
    CHECK_OK(hostfirst_load_free(load));
    unsigned char *back = malloc(elems(0) * 4 + 300 * 4);
    CHECK(back != NULL);
    at = 0;
    for (size_t i = 0; i < N; i++) {
        size_t n = elems(i) * 4;
        CHECK_OK(hostfirst_buffer_copy_to_host(bufs[i], back, n));
        CHECK(memcmp(back, data + at, n) == 0);
        at += n;
        CHECK_OK(hostfirst_buffer_free(bufs[i]));
    }
    free(back);
    free(bufs);

    /* Cancelled by the progress callback: CANCELLED, no further call, nothing kept. */
    int calls = 0;
    load = NULL;
    CHECK_STATUS(hostfirst_load_run(file, plan, progress_options(cancel_at_first, &calls), &load), HOSTFIRST_STATUS_CANCELLED);
    CHECK(calls == 1 && load == NULL);

    /* The file truncated after opening: TRUNCATED, nothing kept. Windows refuses the truncation (the open file is
     * mapped) and the load reads every byte. */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long size = ftell(f);
    fclose(f);
#if MAPPED_FILES_SHRINK
    CHECK(shrink_file(path, (uint64_t)size / 2) == 0);
    CHECK_STATUS(hostfirst_load_run(file, plan, NULL, &load), HOSTFIRST_STATUS_TRUNCATED);
    CHECK_MSG("ends before byte");
    CHECK(load == NULL);
#else
    CHECK(shrink_file(path, (uint64_t)size / 2) == SHRINK_REFUSED_WHILE_MAPPED);
    CHECK_OK(hostfirst_load_run(file, plan, NULL, &load));
    hostfirst_buffer *last = NULL;
    hostfirst_loaded last_kind = 0;
    char last_name[16];
    snprintf(last_name, sizeof last_name, "t%d", N - 1);
    CHECK_OK(hostfirst_load_get(load, last_name, &last_kind, &last, NULL));
    size_t last_bytes = 4 * elems(N - 1); /* the file's last bytes: data[at - last_bytes, at) */
    unsigned char *got = malloc(last_bytes);
    CHECK(got != NULL);
    CHECK_OK(hostfirst_buffer_copy_to_host(last, got, last_bytes));
    CHECK(memcmp(got, data + at - last_bytes, last_bytes) == 0);
    free(got);
    CHECK_OK(hostfirst_buffer_free(last));
    CHECK_OK(hostfirst_load_free(load));
    load = NULL;
#endif

    CHECK_OK(hostfirst_plan_free(plan));
    CHECK_OK(hostfirst_file_free(file));
    CHECK(live_handles() == handles);
    CHECK_OK(hostfirst_release_cached_memory());
    free(data);
    remove(path);
    printf("ok\n");
    return 0;
}
