/* hostfirst put FILE TENSOR [--device SPEC] [--rows A:B] [--resident] [--copy-on-write] [--repeat N]
 *                           [--threads N] [--staging-mib M] [--page-cache POLICY] [--json]
 * Puts a tensor (or a row range) on a device (the default device without --device), copies it back into host
 * memory, checks the copy equals the source (read with hostfirst_view_copy / hostfirst_view_read), and prints
 * bytes, seconds, GB/s and the FNV-1a 64 of the copied-back bytes (the same hash as `inspect --checksum`).
 * --resident uses the registered-mapping mode (the first put pays the registration, reported apart);
 * --repeat N puts N times (each new buffer freed before the next) and reports every time and the best rate,
 * which is how ring and resident compare; --threads and --staging-mib set the reader threads and the staging
 * ring's size. --copy-on-write maps the tensor's pages privately instead of copying when the target is cpu
 * (hostfirst_put_options.copy_on_write; the output says which the buffer got). A progress bar goes to stderr
 * when it is a terminal. Errors: one line
 * "hostfirst: <what>: <STATUS>: <message>" on stderr, exit status 1. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

#define CHUNK ((size_t)64 << 20)

#define MAX_REPEAT 1000

static int parse_count(const char *s, unsigned long long max, unsigned long long *out) {
    char *end = NULL;
    if (!s || *s < '0' || *s > '9') return 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v > max) return 0;
    *out = v;
    return 1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int32_t bar(uint64_t done, uint64_t total, void *user) {
    (void)user;
    int width = 40, fill = total ? (int)((double)done / (double)total * width) : width;
    char b[64];
    for (int i = 0; i < width; i++) b[i] = i < fill ? '#' : ' ';
    b[width] = '\0';
    fprintf(stderr, "\r[%s] %3d%%", b, total ? (int)(100.0 * (double)done / (double)total) : 100);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
    return 0;
}

static int fail_msg(const char *what, const char *msg) {
    fprintf(stderr, "hostfirst: %s: %s\n", what, msg);
    return 1;
}

typedef struct {
    const char *operands[2]; /* FILE TENSOR */
    const char *spec, *rows;
    int json, resident, cow;
    unsigned long long repeat, threads, staging_mib, a, b;
    cli_raw raw;
    hostfirst_page_cache page_cache;
} put_args;

/* "A:B" with decimal A and B. */
static int parse_rows(const char *s, unsigned long long *a, unsigned long long *b) {
    char *end = NULL;
    if (*s < '0' || *s > '9') return 0;
    *a = strtoull(s, &end, 10);
    if (*end != ':' || end[1] < '0' || end[1] > '9') return 0;
    *b = strtoull(end + 1, &end, 10);
    return *end == '\0';
}

static int on_option(void *ctx, int id, const char *v) {
    put_args *p = ctx;
    switch (id) {
        case CLI_OPT_JSON: p->json = 1; break;
        case CLI_OPT_RESIDENT: p->resident = 1; break;
        case CLI_OPT_COPY_ON_WRITE: p->cow = 1; break;
        case CLI_OPT_DEVICE: p->spec = v; break;
        case CLI_OPT_RAW: return cli_parse_raw("put", v, &p->raw);
        case CLI_OPT_PAGE_CACHE: return cli_parse_page_cache("put", v, &p->page_cache);
        case CLI_OPT_ROWS:
            if (!parse_rows(v, &p->a, &p->b)) return cli_usage_error("put", "--rows wants A:B, got '%s'", v);
            p->rows = v;
            break;
        case CLI_OPT_REPEAT:
            if (!parse_count(v, MAX_REPEAT, &p->repeat) || p->repeat == 0)
                return cli_usage_error("put", "--repeat wants 1..%d, got '%s'", MAX_REPEAT, v);
            break;
        case CLI_OPT_THREADS:
            if (!parse_count(v, 1024, &p->threads)) return cli_usage_error("put", "--threads wants 0..1024, got '%s'", v);
            break;
        case CLI_OPT_STAGING_MIB:
            if (!parse_count(v, 1ULL << 20, &p->staging_mib))
                return cli_usage_error("put", "--staging-mib wants a size in MiB, got '%s'", v);
            break;
    }
    return 0;
}

int cmd_put(int argc, char **argv) {
    put_args p;
    memset(&p, 0, sizeof p);
    p.repeat = 1;
    int prc = cli_parse("put", argc, argv, &p, on_option, p.operands);
    if (prc) return prc;
    const char *path = p.operands[0], *tensor = p.operands[1], *spec = p.spec, *rows = p.rows;
    int json = p.json, resident = p.resident, cow = p.cow;
    unsigned long long repeat = p.repeat, threads = p.threads, staging_mib = p.staging_mib, a = p.a, b = p.b;
    hostfirst_device dev, *target = NULL;
    hostfirst_status st;
    if (spec) {
        if ((st = hostfirst_device_parse(spec, &dev)) != HOSTFIRST_STATUS_OK) return cli_fail(spec, st);
        target = &dev;
    }
    hostfirst_file *file = NULL;
    if ((prc = cli_open(path, &p.raw, &file)) != 0) return prc;
    hostfirst_view *view = NULL;
    st = hostfirst_file_view(file, tensor, &view);
    hostfirst_file_free(file);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail(path, st);
    if (rows) {
        hostfirst_view *s = NULL;
        st = hostfirst_view_slice_rows(view, a, b, &s);
        hostfirst_view_free(view);
        if (st != HOSTFIRST_STATUS_OK) return cli_fail(rows, st);
        view = s;
    }
    hostfirst_view_info vi = {.struct_size = sizeof vi};
    hostfirst_view_describe(view, &vi);
    uint64_t nbytes = vi.nbytes;

    hostfirst_put_options opts;
    hostfirst_put_options_init(&opts, sizeof opts);
    if (isatty(2)) opts.progress = bar;
    opts.resident = resident;
    opts.copy_on_write = cow;
    opts.page_cache = p.page_cache;
    opts.threads = (uint32_t)threads;
    opts.staging_bytes = staging_mib << 20;
    hostfirst_buffer *buf = NULL;
    hostfirst_put_stats first = {.struct_size = sizeof first}, stats = {.struct_size = sizeof stats};
    double times[MAX_REPEAT], secs = 0, best = 0;
    for (unsigned long long r = 0; r < repeat; r++) {
        hostfirst_buffer *next = NULL;
        double t0 = now();
        st = hostfirst_put(view, target, &opts, &next, r == 0 ? &first : &stats);
        times[r] = now() - t0;
        if (st != HOSTFIRST_STATUS_OK) {
            int rc = cli_fail("put", st);
            hostfirst_buffer_free(buf);
            hostfirst_view_free(view);
            return rc;
        }
        if (r == 0) {
            buf = next; /* the first buffer is the one verified */
            secs = times[0];
        } else {
            hostfirst_buffer_free(next);
        }
        if (r == 0 || times[r] < best) best = times[r];
    }
    hostfirst_buffer_info bi = {.struct_size = sizeof bi};
    hostfirst_buffer_describe(buf, &bi);
    int32_t file_backed = 0;
    hostfirst_buffer_is_file_backed(buf, &file_backed);
    char devbuf[64];
    cli_device_spec(bi.device, devbuf, sizeof devbuf);

    /* Copy back, compare with the source, hash. */
    int rc = 0;
    hostfirst_buffer *again = NULL; /* --page-cache drop/bypass: the source read again under the same policy */
    size_t cap = nbytes < CHUNK ? (size_t)nbytes : CHUNK;
    unsigned char *back = malloc(nbytes ? (size_t)nbytes : 1), *src = malloc(cap ? cap : 1);
    uint64_t h = 0xcbf29ce484222325ULL;
    if (!back || !src || (uint64_t)(size_t)nbytes != nbytes) {
        rc = fail_msg("put", "cannot allocate host memory to copy the buffer back");
        goto out;
    }
    if ((st = hostfirst_buffer_copy_to_host(buf, back, (size_t)nbytes)) != HOSTFIRST_STATUS_OK) {
        rc = cli_fail("copy back", st);
        goto out;
    }
    if (p.page_cache != HOSTFIRST_PAGE_CACHE_KEEP && nbytes > 0) {
        hostfirst_device cpu;
        hostfirst_put_options vo;
        hostfirst_put_options_init(&vo, sizeof vo);
        vo.page_cache = p.page_cache;
        if ((st = hostfirst_device_parse("cpu", &cpu)) != HOSTFIRST_STATUS_OK ||
            (st = hostfirst_put(view, &cpu, &vo, &again, NULL)) != HOSTFIRST_STATUS_OK) {
            rc = cli_fail(path, st);
            goto out;
        }
    }
    for (uint64_t off = 0; off < nbytes; off += cap) {
        size_t n = nbytes - off < cap ? (size_t)(nbytes - off) : cap;
        if (again) {
            hostfirst_buffer_info ai = {.struct_size = sizeof ai};
            if ((st = hostfirst_buffer_describe(again, &ai)) == HOSTFIRST_STATUS_OK)
                memcpy(src, (const unsigned char *)(uintptr_t)ai.address + off, n); /* a cpu buffer */
        } else
            st = nbytes <= CHUNK ? hostfirst_view_copy(view, src, cap, NULL) : hostfirst_view_read(view, off, src, n);
        if (st != HOSTFIRST_STATUS_OK) {
            rc = cli_fail(path, st);
            goto out;
        }
        if (memcmp(src, back + off, n) != 0) {
            rc = fail_msg("put", "the copy read back differs from the source");
            goto out;
        }
    }
    for (uint64_t i = 0; i < nbytes; i++) h = (h ^ back[i]) * 0x100000001b3ULL;
    double gbps = secs > 0 ? (double)nbytes / secs / 1e9 : 0.0;
    if (json) {
        printf("{\"file\":");
        cli_json_string(stdout, path);
        printf(",\"tensor\":");
        cli_json_string(stdout, tensor);
        printf(",\"device\":");
        cli_json_string(stdout, devbuf);
        printf(",\"bytes\":%" PRIu64 ",\"seconds\":%.6f,\"gb_per_s\":%.3f,\"fnv1a64\":\"%016" PRIx64 "\",\"verified\":true",
               nbytes, secs, gbps, h);
        printf(",\"resident\":%s,\"register_seconds\":%.6f,\"staged_instead\":%s,\"times\":[", resident ? "true" : "false",
               first.register_seconds, first.staged_instead ? "true" : "false");
        for (unsigned long long r = 0; r < repeat; r++) printf("%s%.6f", r ? "," : "", times[r]);
        printf("],\"best_gb_per_s\":%.3f,\"copy_on_write\":%s}\n", best > 0 ? (double)nbytes / best / 1e9 : 0.0,
               file_backed ? "true" : "false");
    } else {
        char hb[32];
        printf("%s -> %s: %" PRIu64 " bytes (%s) in %.6f s, %.3f GB/s, fnv1a64 %016" PRIx64 ", copy verified\n", tensor,
               devbuf, nbytes, cli_bytes(nbytes, hb, sizeof hb), secs, gbps, h);
        if (resident)
            printf("resident: registration %.6f s (in the first put)%s\n", first.register_seconds,
                   first.staged_instead ? "; shares pages with another registration, went through the staging ring" : "");
        if (file_backed) printf("copy-on-write: the buffer maps the file's pages privately (nothing copied until written)\n");
        else if (cow) printf("copy-on-write asked, but the target is not cpu: copied\n");
        if (repeat > 1)
            printf("%llu puts: best %.6f s, %.3f GB/s\n", repeat, best, best > 0 ? (double)nbytes / best / 1e9 : 0.0);
    }
out:
    free(back);
    free(src);
    hostfirst_buffer_free(again);
    hostfirst_buffer_free(buf);
    hostfirst_view_free(view);
    return rc;
}
