/* Where a warm gather's time goes (issue 22): per batch of 64 random [1025] u16 windows of a token file whose
 * pages are all in the page cache, the p50 of 300 batches of
 *   - hostfirst_gather_run (one io_uring submission; cached pages are copied inline by the submitting thread),
 *   - a serial pread loop in C (the kernel's page-cache read path with no interpreter around it),
 *   - process_vm_readv of the windows from a mapping of the file (one system call, truncation-safe: EFAULT),
 *   - mincore of each window's pages (what a residency check before a mapping copy would cost),
 *   - memcpy from a mapping of the file (no kernel at all; a file truncated meanwhile raises SIGBUS).
 * A benchmark, not a test. Build and run (after benches/cold_gather.py made the file):
 *   cargo build --release --lib
 *   cc -O2 -Wall -Wextra -Werror -Iinclude benches/warm_floor.c -Ltarget/release -lhostfirst \
 *      -Wl,-rpath,$PWD/target/release -o target/warm_floor
 *   target/warm_floor bench-out/data/single-2048MiB.safetensors
 */
#define _GNU_SOURCE
#include "hostfirst.h"
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define B 64
#define T 1025
#define N 300
#define ROUNDS 7

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double p50(double *v) {
    qsort(v, N, sizeof *v, cmp);
    return v[N / 2] * 1e6;
}

static uint64_t offs[N][B];
static char buf[B * T * 2];

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s TOKENS.safetensors (one 1-D u16 tensor named 'tokens')\n", argv[0]);
        return 2;
    }
    struct hostfirst_file *f;
    struct hostfirst_view *v;
    struct hostfirst_gather *g;
    struct hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    if (hostfirst_file_open(argv[1], &f) || hostfirst_file_view(f, "tokens", &v) ||
        hostfirst_gather_new(cpu, HOSTFIRST_DTYPE_U16, B, T, &g)) {
        fprintf(stderr, "hostfirst: %s\n", hostfirst_last_error_message());
        return 1;
    }
    int fd = open(argv[1], O_RDONLY);
    uint64_t header;
    if (fd < 0 || pread(fd, &header, 8, 0) != 8) return 1;
    off_t size = lseek(fd, 0, SEEK_END);
    uint64_t base = 8 + header, n = ((uint64_t)size - base) / 2;
    char *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return 1;
    madvise(m, (size_t)size, MADV_RANDOM);
    uint64_t s = 22;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < B; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            offs[i][j] = (s >> 11) % (n - T);
        }
    for (int i = 0; i < N; i++) /* brings every window into the page cache */
        hostfirst_gather_run(g, v, offs[i], B, NULL);
    static double lg[N], lp[N], lv[N], lc[N], lm[N];
    struct iovec l[B], r[B];
    unsigned char vec[2];
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) {
            double t = now();
            if (hostfirst_gather_run(g, v, offs[i], B, NULL)) return 1;
            lg[i] = now() - t;
        }
        for (int i = 0; i < N; i++) {
            double t = now();
            for (int j = 0; j < B; j++)
                if (pread(fd, buf + j * T * 2, T * 2, (off_t)(base + 2 * offs[i][j])) != T * 2) return 1;
            lp[i] = now() - t;
        }
        for (int i = 0; i < N; i++) {
            double t = now();
            for (int j = 0; j < B; j++) {
                l[j] = (struct iovec){buf + j * T * 2, T * 2};
                r[j] = (struct iovec){m + base + 2 * offs[i][j], T * 2};
            }
            if (process_vm_readv(getpid(), l, B, r, B, 0) != B * T * 2) {
                perror("process_vm_readv");
                return 1;
            }
            lv[i] = now() - t;
        }
        for (int i = 0; i < N; i++) {
            double t = now();
            for (int j = 0; j < B; j++) {
                uintptr_t a = (uintptr_t)(m + base + 2 * offs[i][j]), pa = a & ~(uintptr_t)4095;
                mincore((void *)pa, (a + T * 2 - pa + 4095) / 4096 * 4096, vec);
            }
            lc[i] = now() - t;
        }
        for (int i = 0; i < N; i++) {
            double t = now();
            for (int j = 0; j < B; j++) memcpy(buf + j * T * 2, m + base + 2 * offs[i][j], T * 2);
            lm[i] = now() - t;
        }
        printf("round %d, p50 per batch: gather_run %.1f us | C pread loop %.1f us | process_vm_readv %.1f us | "
               "mincore x64 %.1f us | memcpy from mapping %.1f us\n",
               round + 1, p50(lg), p50(lp), p50(lv), p50(lc), p50(lm));
    }
    hostfirst_gather_free(g);
    hostfirst_view_free(v);
    hostfirst_file_free(f);
    return 0;
}
