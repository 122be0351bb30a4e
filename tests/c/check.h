/* Minimal assertion helpers for the C tests: print what failed with the library's last error, exit 1. */
#ifndef HOSTFIRST_TEST_CHECK_H
#define HOSTFIRST_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hostfirst.h"

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: %s\n", __FILE__,    \
                    __LINE__, #cond, hostfirst_last_error());                            \
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
                    hostfirst_status_name(expected), hostfirst_last_error());            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, HOSTFIRST_STATUS_OK)

/* Asserts the last error message contains a substring. */
#define CHECK_MSG(needle)                                                                \
    do {                                                                                 \
        if (strstr(hostfirst_last_error(), (needle)) == NULL) {                          \
            fprintf(stderr, "%s:%d: last error '%s' lacks '%s'\n", __FILE__, __LINE__,   \
                    hostfirst_last_error(), (needle));                                   \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static inline size_t live_handles(void) {
    size_t n = 0;
    if (hostfirst_handle_count(&n) != HOSTFIRST_STATUS_OK) {
        fprintf(stderr, "hostfirst_handle_count failed\n");
        exit(1);
    }
    return n;
}

#endif
