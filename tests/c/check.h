/* Minimal assertion helpers for the C tests: print what failed with the library's last error, exit 1. */
#ifndef HOSTFIRST_TEST_CHECK_H
#define HOSTFIRST_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hostfirst.h"

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: %s\n", __FILE__,    \
                    __LINE__, #cond, hostfirst_last_error_message());                            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* Asserts a call returns exactly the expected status. */
#define CHECK_STATUS(call, expected)                                                     \
    do {                                                                                 \
        hostfirst_status st_ = (call);                                                   \
        if (st_ != (expected)) {                                                         \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s\n  last error: %s\n",    \
                    __FILE__, __LINE__, #call, hostfirst_status_name(st_),               \
                    hostfirst_status_name(expected), hostfirst_last_error_message());            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, HOSTFIRST_STATUS_OK)

/* Asserts the last error message contains a substring. */
#define CHECK_MSG(needle)                                                                \
    do {                                                                                 \
        if (strstr(hostfirst_last_error_message(), (needle)) == NULL) {                          \
            fprintf(stderr, "%s:%d: last error '%s' lacks '%s'\n", __FILE__, __LINE__,   \
                    hostfirst_last_error_message(), (needle));                                   \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* Load options carrying only a progress callback (NULL callback: the defaults). One static struct: use the
 * result before the next call, on one thread. */
static inline const hostfirst_load_options *progress_options(hostfirst_progress_fn fn, void *user) {
    static hostfirst_load_options o;
    if (hostfirst_load_options_init(&o, sizeof o) != HOSTFIRST_STATUS_OK) abort();
    o.progress = fn;
    o.user = user;
    return &o;
}

static inline size_t live_handles(void) {
    size_t n = 0;
    if (hostfirst_handle_count(&n) != HOSTFIRST_STATUS_OK) {
        fprintf(stderr, "hostfirst_handle_count failed\n");
        exit(1);
    }
    return n;
}

/* Writes a safetensors image to `path`: the header's length (8 bytes, little-endian), `header`, then `count`
 * data parts (`parts[i]`, `sizes[i]` bytes) in order. */
static inline void write_safetensors(const char *path, const char *header, size_t count, const void *const parts[],
                                     const size_t sizes[]) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    uint64_t len = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));
    CHECK(fwrite(le, 1, 8, f) == 8 && fwrite(header, 1, len, f) == len);
    for (size_t i = 0; i < count; i++) CHECK(sizes[i] == 0 || fwrite(parts[i], 1, sizes[i], f) == sizes[i]);
    CHECK(fclose(f) == 0);
}

/* Writes a file holding one 1-D U16 tensor `name` of `n` elements (`data`) to `path`, its header padded to 8
 * bytes; returns where the data starts in the file (8 + the header). */
static inline long write_u16_tensor(const char *path, const char *name, const uint16_t *data, size_t n) {
    char header[256];
    int len = snprintf(header, sizeof header, "{\"%s\":{\"dtype\":\"U16\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}",
                       name, n, 2 * n);
    CHECK(len > 0 && (size_t)len + 8 < sizeof header);
    while ((8 + len) % 8) header[len++] = ' ';
    header[len] = 0;
    const void *parts[] = {data};
    const size_t sizes[] = {2 * n};
    write_safetensors(path, header, 1, parts, sizes);
    return 8 + len;
}

/* A plan that puts every tensor of `file` on `target` ("cpu", "cuda:0", ...). */
static inline void plan_all_to(hostfirst_file *file, const char *target, hostfirst_plan **plan) {
    hostfirst_rules *rules;
    CHECK_OK(hostfirst_rules_new(&rules));
    CHECK_OK(hostfirst_rules_add(rules, "*", target));
    CHECK_OK(hostfirst_plan_make(file, rules, plan));
    CHECK_OK(hostfirst_rules_free(rules));
}

#endif
