/* host_first FILE [TENSOR]: open a safetensors file host-first and show that opening costs nothing.
 *
 * Prints the process RSS before opening, after opening, after taking a view, and after reading through the
 * zero-copy pointer; then copies the first rows with the pread-based copy (safe against truncation).
 * Build: cc -std=c11 -Iinclude examples-c/host_first.c -Ltarget/release -lhostfirst */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#define PSAPI_VERSION 2 /* GetProcessMemoryInfo from kernel32 */
#include <windows.h>
#include <psapi.h>
#else
#include <unistd.h>
#endif
#include "hostfirst.h"

/* The process's resident set (Windows: its working set). */
static double rss_mib(void) {
#ifdef _WIN32
    PROCESS_MEMORY_COUNTERS c;
    if (!GetProcessMemoryInfo(GetCurrentProcess(), &c, sizeof c)) return -1;
    return (double)c.WorkingSetSize / (1024.0 * 1024.0);
#else
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
#endif
}

static int fail(const char *what, hostfirst_status st) {
    fprintf(stderr, "host_first: %s: %s: %s\n", what, hostfirst_status_name(st), hostfirst_last_error_message());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: host_first FILE [TENSOR]\n");
        return 2;
    }
    printf("RSS before open:        %8.1f MiB\n", rss_mib());

    hostfirst_file *file = NULL;
    hostfirst_status st = hostfirst_file_open(argv[1], &file); /* reads the header only */
    if (st != HOSTFIRST_STATUS_OK) return fail(argv[1], st);
    uint64_t total = 0;
    hostfirst_file_data_bytes(file, &total);
    printf("RSS after open:         %8.1f MiB   (%.2f GiB of tensor data, not read)\n", rss_mib(),
           (double)total / (1u << 30));

    hostfirst_view *view = NULL;
    st = argc == 3 ? hostfirst_file_view(file, argv[2], &view) : hostfirst_file_view_at(file, 0, &view);
    if (st != HOSTFIRST_STATUS_OK) return fail(argc == 3 ? argv[2] : "tensor 0", st);
    hostfirst_file_free(file); /* the view keeps the mapping alive */

    hostfirst_view_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    hostfirst_view_describe(view, &info);
    printf("tensor '%s': %s [", info.name, hostfirst_dtype_name(info.dtype));
    for (uint32_t d = 0; d < info.rank; d++) printf("%s%" PRIu64, d ? ", " : "", info.shape[d]);
    printf("], %" PRIu64 " bytes at file offset %" PRIu64 ", data aligned to %" PRIu64 " bytes\n", info.nbytes,
           info.file_offset, info.alignment);
    printf("RSS after view:         %8.1f MiB\n", rss_mib());

    /* Zero-copy: the pointer goes straight into the read-only mapping; only touched pages are read.
     * (If the file were truncated now, touching it would raise SIGBUS: see hostfirst_view_info.data.) */
    const unsigned char *bytes = info.data;
    unsigned sum = 0;
    for (uint64_t i = 0; i < info.nbytes && i < 4096; i++) sum += bytes[i];
    printf("RSS after 4 KiB read:   %8.1f MiB   (byte sum %u)\n", rss_mib(), sum);

    /* The safe path: copy rows with pread into a buffer we own (TRUNCATED instead of SIGBUS). */
    if (info.rank > 0 && info.shape[0] > 0) {
        hostfirst_view *rows = NULL;
        uint64_t stop = info.shape[0] < 1024 ? info.shape[0] : 1024;
        st = hostfirst_view_slice_rows(view, 0, stop, &rows);
        if (st == HOSTFIRST_STATUS_OK) {
            uint64_t need = 0;
            hostfirst_view_copy(rows, NULL, 0, &need);
            void *buf = malloc(need ? need : 1);
            st = hostfirst_view_copy(rows, buf, need, NULL);
            if (st != HOSTFIRST_STATUS_OK) return fail("copy", st);
            printf("copied rows 0..%" PRIu64 " (%" PRIu64 " bytes) with pread\n", stop, need);
            free(buf);
            hostfirst_view_free(rows);
        }
    }
    hostfirst_view_free(view);
    printf("RSS at exit:            %8.1f MiB\n", rss_mib());
    return 0;
}
