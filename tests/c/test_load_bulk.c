/* A load described in bulk (hostfirst_load_entries, hostfirst_load_names): every tensor's name, kind, device,
 * dtype, shape, size and address in one call, checked against hostfirst_load_get + hostfirst_buffer_describe and
 * against the bytes; a mixed load (views and buffers); the count query, BUFFER_TOO_SMALL with the count and
 * nothing written, an older (smaller) entry size, bad arguments with exact statuses; handle counts back to the
 * baseline; on cpu, a forked child taking tensors of the load that nobody had asked for (not on Windows, which has
 * no fork).
 *
 *   test_load_bulk DIR TARGET     TARGET: cpu or cuda:0 (the latter needs the stand-in driver) */
#ifndef _WIN32
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "check.h"

#define N 300

static size_t elems(size_t i) { return 1 + (i * 13) % 50; }

int main(int argc, char **argv) {
    CHECK(argc == 3);
    int cuda = strcmp(argv[2], "cpu") != 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/load_bulk_%s.safetensors", argv[1], cuda ? "cuda" : "cpu");

    /* tensors w0..w299: 2-D F32 [elems, 1] in header order; w7 a scalar */
    size_t cap = 128 * N, len = 1, at = 0;
    char *header = malloc(cap);
    CHECK(header != NULL);
    header[0] = '{';
    for (size_t i = 0; i < N; i++) {
        size_t n = i == 7 ? 1 : elems(i);
        if (i == 7)
            len += (size_t)snprintf(header + len, cap - len, ",\"w7\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[%zu,%zu]}", at,
                                    at + 4);
        else
            len += (size_t)snprintf(header + len, cap - len,
                                    "%s\"w%zu\":{\"dtype\":\"F32\",\"shape\":[%zu,1],\"data_offsets\":[%zu,%zu]}", i ? "," : "",
                                    i, n, at, at + 4 * n);
        at += 4 * n;
    }
    header[len++] = '}';
    header[len] = '\0';
    float *data = malloc(at);
    CHECK(data != NULL);
    for (size_t k = 0; k < at / 4; k++) data[k] = (float)k;
    const void *parts[1] = {data};
    size_t sizes[1] = {at};
    write_safetensors(path, header, 1, parts, sizes);
    free(header);

    size_t handles = live_handles();
    hostfirst_file *file;
    CHECK_OK(hostfirst_file_open(path, &file));
    hostfirst_plan *plan;
    plan_all_to(file, cuda ? "cuda:0" : "cpu", &plan);
    hostfirst_load *load;
    CHECK_OK(hostfirst_load_run(file, plan, NULL, &load));

    /* count query, then the table */
    size_t count = 0;
    CHECK_OK(hostfirst_load_entries(load, NULL, 0, sizeof(hostfirst_load_entry), &count));
    CHECK(count == N);
    hostfirst_load_entry *e = calloc(N, sizeof *e);
    CHECK(e != NULL);
    count = 0;
    CHECK_STATUS(hostfirst_load_entries(load, e, N - 1, sizeof *e, &count), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
    CHECK(count == N);
    CHECK_MSG("300 tensors");
    CHECK(e[0].struct_size == 0 && e[0].name == NULL); /* nothing written */
    CHECK_STATUS(hostfirst_load_entries(load, e, N, offsetof(hostfirst_load_entry, address), &count),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_load_entries(load, NULL, N, sizeof *e, &count), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_load_entries(load, e, N, sizeof *e, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_load_entries(NULL, e, N, sizeof *e, &count), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK(e[0].struct_size == 0);
    /* capacity x entry_size must describe an array that can exist: no version of the entry is larger than
     * HOSTFIRST_MAX_ENTRY_SIZE, and the array may not run past the end of the address space (these wrapped or
     * wrote far past the array before) */
    const size_t huge_entries[] = {(size_t)1 << 40, SIZE_MAX / 2, SIZE_MAX, HOSTFIRST_MAX_ENTRY_SIZE + 1};
    for (size_t k = 0; k < sizeof huge_entries / sizeof huge_entries[0]; k++) {
        CHECK_STATUS(hostfirst_load_entries(load, e, N, huge_entries[k], &count), HOSTFIRST_STATUS_INVALID_ARGUMENT);
        CHECK_MSG("entry_size");
    }
    CHECK_STATUS(hostfirst_load_entries(load, e, SIZE_MAX / 8, sizeof *e, &count), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("capacity");
    CHECK_STATUS(hostfirst_load_entries(load, (hostfirst_load_entry *)(uintptr_t)(UINTPTR_MAX - 64), N, sizeof *e, &count),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(e[0].struct_size == 0);
    CHECK_OK(hostfirst_load_entries(load, e, N, sizeof *e, &count));

    /* every entry against the buffer handle hostfirst_load_get gives, and the bytes */
    hostfirst_device want = cuda ? (hostfirst_device){HOSTFIRST_DEVICE_CUDA, 0} : (hostfirst_device){HOSTFIRST_DEVICE_CPU, 0};
    float *back = malloc(4 * 64);
    CHECK(back != NULL);
    at = 0;
    for (size_t i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%zu", i);
        CHECK(e[i].struct_size == sizeof(hostfirst_load_entry));
        CHECK(strcmp(e[i].name, name) == 0);
        CHECK(e[i].kind == HOSTFIRST_LOADED_BUFFER);
        CHECK(e[i].dtype == HOSTFIRST_DTYPE_F32);
        CHECK(e[i].device.kind == want.kind && e[i].device.ordinal == want.ordinal);
        size_t n = i == 7 ? 1 : elems(i);
        if (i == 7) {
            CHECK(e[i].rank == 0 && e[i].shape == NULL);
        } else {
            CHECK(e[i].rank == 2 && e[i].shape[0] == n && e[i].shape[1] == 1);
        }
        CHECK(e[i].nbytes == 4 * n);
        CHECK(e[i].address != 0);
        uint32_t kind = 0;
        hostfirst_buffer *b = NULL;
        CHECK_OK(hostfirst_load_get(load, name, &kind, &b, NULL));
        hostfirst_buffer_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        CHECK_OK(hostfirst_buffer_describe(b, &info));
        CHECK(info.address == e[i].address && info.nbytes == e[i].nbytes && info.shape == e[i].shape);
        if (!cuda) CHECK(memcmp((const void *)(uintptr_t)e[i].address, data + at / 4, 4 * n) == 0);
        CHECK_OK(hostfirst_buffer_copy_to_host(b, back, 4 * n));
        CHECK(memcmp(back, data + at / 4, 4 * n) == 0);
        CHECK_OK(hostfirst_buffer_free(b));
        at += 4 * n;
    }
    free(back);

    /* a newer header's larger entry: a stride of 72 bytes, the 64 this library knows written and the 8 past them
     * zeroed (fields it does not know: zero, by the rule of extensible structs) */
    enum { OLD = sizeof(hostfirst_load_entry) + 8 };
    unsigned char *wide = malloc(OLD * N);
    CHECK(wide != NULL);
    memset(wide, 0xAB, OLD * N);
    CHECK_OK(hostfirst_load_entries(load, (hostfirst_load_entry *)(void *)wide, N, OLD, &count));
    for (size_t i = 0; i < N; i++) {
        hostfirst_load_entry got;
        memcpy(&got, wide + i * OLD, sizeof got);
        CHECK(got.struct_size == sizeof(hostfirst_load_entry) && got.address == e[i].address);
        for (size_t k = sizeof(hostfirst_load_entry); k < OLD; k++) CHECK(wide[i * OLD + k] == 0);
    }
    free(wide);

    /* the names, packed */
    size_t need = 0;
    CHECK_OK(hostfirst_load_names(load, NULL, 0, &need));
    size_t sum = 0;
    for (size_t i = 0; i < N; i++) sum += strlen(e[i].name) + 1;
    CHECK(need == sum);
    char *names = malloc(need);
    CHECK(names != NULL);
    memset(names, 'x', need);
    size_t got_len = 0;
    CHECK_STATUS(hostfirst_load_names(load, names, need - 1, &got_len), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
    CHECK(got_len == need && names[0] == 'x');
    CHECK_STATUS(hostfirst_load_names(load, NULL, need, &got_len), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_load_names(load, names, need, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_load_names(load, names, need, &got_len));
    const char *p = names;
    for (size_t i = 0; i < N; i++) {
        CHECK(strcmp(p, e[i].name) == 0);
        p += strlen(p) + 1;
    }
    CHECK(p == names + need);
    free(names);

    /* the entries' memory outlives every handle taken from the load, until the load is freed */
    CHECK_OK(hostfirst_load_free(load));
    CHECK_STATUS(hostfirst_load_entries(load, e, N, sizeof *e, &count), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_load_names(load, NULL, 0, &need), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_plan_free(plan));

    /* a mixed load: w1 stays a host view (its address in the mapping), the rest are buffers */
    hostfirst_rules *rules;
    CHECK_OK(hostfirst_rules_new(&rules));
    CHECK_OK(hostfirst_rules_add(rules, "w1", "host"));
    CHECK_OK(hostfirst_rules_add(rules, "*", cuda ? "cuda:0" : "cpu"));
    CHECK_OK(hostfirst_plan_make(file, rules, &plan));
    CHECK_OK(hostfirst_rules_free(rules));
    CHECK_OK(hostfirst_load_run(file, plan, NULL, &load));
    CHECK_OK(hostfirst_load_entries(load, e, N, sizeof *e, &count));
    CHECK(e[1].kind == HOSTFIRST_LOADED_VIEW && e[1].device.kind == HOSTFIRST_DEVICE_CPU);
    CHECK(e[0].kind == HOSTFIRST_LOADED_BUFFER && e[2].kind == HOSTFIRST_LOADED_BUFFER);
    hostfirst_view *v = NULL;
    uint32_t kind = 0;
    CHECK_OK(hostfirst_load_get(load, "w1", &kind, NULL, &v));
    hostfirst_view_info vi;
    memset(&vi, 0, sizeof vi);
    vi.struct_size = sizeof vi;
    CHECK_OK(hostfirst_view_describe(v, &vi));
    CHECK((uint64_t)(uintptr_t)vi.data == e[1].address && vi.nbytes == e[1].nbytes);
    CHECK(memcmp((const void *)(uintptr_t)e[1].address, data + elems(0), e[1].nbytes) == 0);
    CHECK_OK(hostfirst_view_free(v));
#ifndef _WIN32
    if (!cuda) {
        /* A forked child takes tensors nobody has asked for yet (made from the load's arena on first use) and
         * sees their bytes; the parent's writes after the fork do not reach it, nor the child's the parent. */
        hostfirst_buffer *b5 = NULL;
        CHECK_OK(hostfirst_load_get(load, "w5", &kind, &b5, NULL));
        float *p5 = (float *)(uintptr_t)e[5].address;
        size_t at5 = 0;
        for (size_t i = 0; i < 5; i++) at5 += i == 7 ? 1 : elems(i);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            hostfirst_buffer *b4 = NULL, *c5 = NULL;
            int ok = hostfirst_load_get(load, "w4", &kind, &b4, NULL) == HOSTFIRST_STATUS_OK &&
                     hostfirst_load_get(load, "w5", &kind, &c5, NULL) == HOSTFIRST_STATUS_OK;
            hostfirst_buffer_info i4;
            memset(&i4, 0, sizeof i4);
            i4.struct_size = sizeof i4;
            ok = ok && hostfirst_buffer_describe(b4, &i4) == HOSTFIRST_STATUS_OK && i4.address == e[4].address;
            ok = ok && memcmp((const void *)(uintptr_t)i4.address, data + (at5 - elems(4)), 4 * elems(4)) == 0;
            ok = ok && p5[0] == (float)at5; /* the parent's write below happens after the fork */
            p5[1] = -2.0f;                  /* the child's own copy */
            _exit(ok && hostfirst_buffer_free(b4) == HOSTFIRST_STATUS_OK &&
                          hostfirst_buffer_free(c5) == HOSTFIRST_STATUS_OK
                      ? 0
                      : 1);
        }
        p5[0] = -1.0f;
        int st = 0;
        CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        CHECK(p5[0] == -1.0f && p5[1] == (float)(at5 + 1));
        CHECK_OK(hostfirst_buffer_free(b5));
    }
#endif
    CHECK_OK(hostfirst_load_free(load));
    CHECK_OK(hostfirst_plan_free(plan));

    free(e);
    CHECK_OK(hostfirst_file_free(file));
    CHECK(live_handles() == handles);
    CHECK_OK(hostfirst_release_cached_memory());
    free(data);
    remove(path);
    printf("ok\n");
    return 0;
}
