/*
 * version.c - the smallest program against an installed hostfirst: checks that the library serves a program
 * built against this header (HOSTFIRST_VERSION_COMPATIBLE: the same ABI line, the library at least as new),
 * then prints the library version and the backend census.
 *
 *   cc version.c $(pkg-config --cflags --libs hostfirst) -o version      (see docs/PACKAGING.md)
 *
 * Exits 0 on success, 1 on an incompatible library or a failed call.
 */
#include <stdio.h>

#include "hostfirst.h"

int main(void) {
    if (!HOSTFIRST_VERSION_COMPATIBLE(HOSTFIRST_VERSION_NUMBER, hostfirst_version_number())) {
        fprintf(stderr, "version.c: built against hostfirst.h %u, which libhostfirst %s (%u) does not serve\n",
                (unsigned)HOSTFIRST_VERSION_NUMBER, hostfirst_version(), (unsigned)hostfirst_version_number());
        return 1;
    }
    printf("hostfirst %s (header %d.%d.%d)\n", hostfirst_version(), HOSTFIRST_VERSION_MAJOR,
           HOSTFIRST_VERSION_MINOR, HOSTFIRST_VERSION_PATCH);

    size_t count = hostfirst_backend_count();
    for (size_t i = 0; i < count; i++) {
        hostfirst_backend_info info = {.struct_size = sizeof info};
        hostfirst_status st = hostfirst_backend_describe(i, &info);
        if (st != HOSTFIRST_STATUS_OK) {
            fprintf(stderr, "version.c: hostfirst_backend_describe(%zu): %s: %s\n", i, hostfirst_status_name(st),
                    hostfirst_last_error_message());
            return 1;
        }
        printf("backend %s: %s, %u device(s)", info.name, hostfirst_backend_status_name(info.status),
               (unsigned)info.device_count);
        if (info.driver_version[0] != '\0') {
            printf(", driver %s", info.driver_version);
        }
        if (info.reason[0] != '\0') {
            printf(" (%s)", info.reason);
        }
        printf("\n");
    }
    return 0;
}
