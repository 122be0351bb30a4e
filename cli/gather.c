/* hostfirst gather FILE TENSOR --batch B --window T [--device SPEC] [--iters N] [--seed S] [--prefault]
 *                  [--from-host] [--depth D] [--page-cache POLICY] [--json]
 *
 * The data-loader loop: B random windows of T elements of a 1-D tensor (nanoGPT's get_batch, offsets from a
 * seeded splitmix64 stream) assembled as a [B, T] batch on the device, N times, into one reused destination.
 * Prints p50/p99 per batch. The first batch is checked against a direct computation (each window read with
 * hostfirst_view_copy); a mismatch exits 1. The device defaults to the default device. --prefault maps the
 * tensor's pages first (hostfirst_view_prefault) and reports how long that took. --from-host puts the tensor to
 * cpu first (an eager copy, timed apart) and gathers from that buffer (hostfirst_gather_run_from_buffer): memcpy
 * speed, and a file truncated meanwhile cannot fault the loop (SIGBUS is the hazard of --prefault). A window
 * longer than the tensor is refused before anything is allocated. --depth D prefetches: every offset set is drawn
 * first, a gather stream (hostfirst_gather_stream_start) fills up to D batches ahead on a background thread, and
 * the times are the waits for each batch (hostfirst_gather_stream_next); the total wall time is printed for
 * both ways. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Checks a batch (`batch`, else the gather's current one) against windows read directly with hostfirst_view_copy
 * (under a --page-cache policy other than keep: a put of each window to cpu under it, so that the check leaves
 * the cache as the gather does). */
static int check_first(hostfirst_gather *g, hostfirst_buffer *batch, const hostfirst_view *v, const uint64_t *offs,
                       uint64_t b, uint64_t t, size_t elem, hostfirst_page_cache page_cache, int *ok) {
    uint64_t nbytes = 0;
    hostfirst_gather_nbytes(g, &nbytes);
    unsigned char *got = malloc((size_t)nbytes), *want = malloc((size_t)(t * elem));
    int rc = 0;
    *ok = 1;
    hostfirst_status st = !got || !want ? HOSTFIRST_STATUS_OUT_OF_MEMORY
                          : batch       ? hostfirst_buffer_copy_to_host(batch, got, (size_t)nbytes)
                                        : hostfirst_gather_copy_to_host(g, got, (size_t)nbytes);
    if (st != HOSTFIRST_STATUS_OK) rc = cli_fail("copy the batch back", st);
    for (uint64_t i = 0; rc == 0 && i < b; i++) {
        hostfirst_view *row = NULL;
        st = hostfirst_view_slice_rows(v, offs[i], offs[i] + t, &row);
        if (st == HOSTFIRST_STATUS_OK && page_cache == HOSTFIRST_PAGE_CACHE_KEEP) {
            st = hostfirst_view_copy(row, want, (size_t)(t * elem), NULL);
        } else if (st == HOSTFIRST_STATUS_OK) {
            hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
            hostfirst_put_options po;
            hostfirst_buffer *copy = NULL;
            st = hostfirst_put_options_init(&po, sizeof po);
            po.page_cache = page_cache;
            if (st == HOSTFIRST_STATUS_OK) st = hostfirst_put(row, &cpu, &po, &copy, NULL);
            if (st == HOSTFIRST_STATUS_OK) st = hostfirst_buffer_copy_to_host(copy, want, (size_t)(t * elem));
            hostfirst_buffer_free(copy);
        }
        hostfirst_view_free(row);
        if (st != HOSTFIRST_STATUS_OK) rc = cli_fail("direct read", st);
        else if (memcmp(got + i * t * elem, want, (size_t)(t * elem)) != 0) *ok = 0;
    }
    free(got);
    free(want);
    return rc;
}

typedef struct {
    const char *operands[2]; /* FILE TENSOR */
    const char *spec;
    uint64_t batch, window, iters, seed, depth;
    int json, prefault, from_host;
    hostfirst_page_cache page_cache; /* --page-cache */
    cli_raw raw;
} gather_args;

static int on_option(void *ctx, int id, const char *v) {
    gather_args *g = ctx;
    uint64_t *n = id == CLI_OPT_BATCH ? &g->batch
                  : id == CLI_OPT_WINDOW ? &g->window
                  : id == CLI_OPT_ITERS  ? &g->iters
                  : id == CLI_OPT_SEED   ? &g->seed
                  : id == CLI_OPT_DEPTH  ? &g->depth
                                         : NULL;
    if (n && !cli_parse_u64(v, n)) return cli_usage_error("gather", "'%s' is not a non-negative integer", v);
    if (id == CLI_OPT_JSON) g->json = 1;
    else if (id == CLI_OPT_PREFAULT) g->prefault = 1;
    else if (id == CLI_OPT_FROM_HOST) g->from_host = 1;
    else if (id == CLI_OPT_DEVICE) g->spec = v;
    else if (id == CLI_OPT_RAW) return cli_parse_raw("gather", v, &g->raw);
    else if (id == CLI_OPT_PAGE_CACHE) return cli_parse_page_cache("gather", v, &g->page_cache);
    return 0;
}

int cmd_gather(int argc, char **argv) {
    gather_args g0;
    memset(&g0, 0, sizeof g0);
    g0.spec = "default";
    g0.iters = 100;
    g0.seed = 1337;
    int prc = cli_parse("gather", argc, argv, &g0, on_option, g0.operands);
    if (prc) return prc;
    if (g0.batch == 0 || g0.window == 0 || g0.iters == 0)
        return cli_usage_error("gather", "--batch, --window and --iters must be at least 1");
    const char *path = g0.operands[0], *tensor = g0.operands[1], *spec = g0.spec;
    uint64_t batch = g0.batch, window = g0.window, iters = g0.iters, seed = g0.seed, depth = g0.depth;
    int json = g0.json, prefault = g0.prefault, from_host = g0.from_host;

    hostfirst_device dev;
    hostfirst_status st = hostfirst_target_parse(spec, &dev);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail(spec, st);
    hostfirst_file *file = NULL;
    hostfirst_view *view = NULL;
    hostfirst_gather *g = NULL;
    hostfirst_buffer *host = NULL, *b = NULL;
    hostfirst_gather_stream *stream = NULL;
    uint64_t *offs = NULL;
    double *times = NULL;
    int rc = 0;
    if ((rc = cli_open(path, &g0.raw, &file)) != 0) goto done;
    st = hostfirst_file_view(file, tensor, &view);
    if (st != HOSTFIRST_STATUS_OK) {
        rc = cli_fail(path, st);
        goto done;
    }
    hostfirst_view_info info = {.struct_size = sizeof info};
    hostfirst_view_describe(view, &info);
    if (info.rank != 1) {
        fprintf(stderr, "hostfirst gather: tensor '%s' has rank %u; gather needs a 1-D tensor\n", tensor, info.rank);
        rc = 1;
        goto done;
    }
    if (window >= info.shape[0]) {
        fprintf(stderr, "hostfirst gather: the window (%llu) must be shorter than tensor '%s' (%llu elements)\n",
                (unsigned long long)window, tensor, (unsigned long long)info.shape[0]);
        rc = 1;
        goto done;
    }
    size_t elem = hostfirst_dtype_bits(info.dtype) / 8;
    double prefault_s = -1, host_s = -1;
    if (from_host) {
        hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
        double t0 = now_s();
        hostfirst_put_options po;
        st = hostfirst_put_options_init(&po, sizeof po);
        po.page_cache = g0.page_cache;
        if (st == HOSTFIRST_STATUS_OK) st = hostfirst_put(view, &cpu, &po, &host, NULL);
        host_s = now_s() - t0;
        if (st != HOSTFIRST_STATUS_OK) {
            rc = cli_fail("put to cpu", st);
            goto done;
        }
    }
    int32_t populated = 0;
    if (prefault) {
        double t0 = now_s();
        st = hostfirst_view_prefault(view, &populated);
        prefault_s = now_s() - t0;
        if (st != HOSTFIRST_STATUS_OK) {
            rc = cli_fail("prefault", st);
            goto done;
        }
    }
    st = hostfirst_gather_new(dev, info.dtype, batch, window, &g);
    if (st == HOSTFIRST_STATUS_OK) st = hostfirst_gather_set_page_cache(g, g0.page_cache);
    if (st != HOSTFIRST_STATUS_OK) {
        rc = cli_fail("gather", st);
        goto done;
    }
    /* with --depth every offset set is drawn up front (the stream takes them all); else one set at a time */
    size_t sets = depth ? (size_t)iters : 1;
    offs = (size_t)batch <= SIZE_MAX / sizeof *offs / sets ? malloc(sets * (size_t)batch * sizeof *offs) : NULL;
    times = malloc((size_t)iters * sizeof *times);
    if (!offs || !times) {
        fprintf(stderr, "hostfirst gather: out of memory\n");
        rc = 1;
        goto done;
    }
    uint64_t state = seed;
    int ok = 1;
    for (size_t k = 0; k < sets; k++) {
        st = hostfirst_random_offsets(&state, info.shape[0], window, offs + k * batch, (size_t)batch);
        if (st != HOSTFIRST_STATUS_OK) {
            rc = cli_fail("offsets", st);
            goto done;
        }
    }
    double start = now_s();
    if (depth) {
        st = host ? hostfirst_gather_stream_start_from_buffer(g, host, offs, (size_t)iters, (size_t)depth, &stream)
                  : hostfirst_gather_stream_start(g, view, offs, (size_t)iters, (size_t)depth, &stream);
        if (st != HOSTFIRST_STATUS_OK) {
            rc = cli_fail("gather stream", st);
            goto done;
        }
    }
    for (uint64_t it = 0; it < iters; it++) {
        if (!depth && it > 0) {
            st = hostfirst_random_offsets(&state, info.shape[0], window, offs, (size_t)batch);
            if (st != HOSTFIRST_STATUS_OK) {
                rc = cli_fail("offsets", st);
                goto done;
            }
        }
        double t0 = now_s();
        if (depth) st = hostfirst_gather_stream_next(stream, &b);
        else
            st = host ? hostfirst_gather_run_from_buffer(g, host, offs, (size_t)batch, NULL)
                      : hostfirst_gather_run(g, view, offs, (size_t)batch, NULL);
        times[it] = now_s() - t0;
        if (st != HOSTFIRST_STATUS_OK) {
            rc = cli_fail("gather", st);
            goto done;
        }
        if (it == 0 && (rc = check_first(g, b, view, offs, batch, window, elem, g0.page_cache, &ok)) != 0) goto done;
        hostfirst_buffer_free(b);
        b = NULL;
    }
    double total_s = now_s() - start;
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    double p50 = times[(iters - 1) / 2], p99 = times[(size_t)((double)(iters - 1) * 0.99)];
    double bytes = (double)batch * (double)window * (double)elem;
    char dspec[64];
    cli_device_spec(dev, dspec, sizeof dspec);
    if (json) {
        printf("{\"file\":");
        cli_json_string(stdout, path);
        printf(",\"tensor\":");
        cli_json_string(stdout, tensor);
        printf(",\"device\":\"%s\",\"dtype\":\"%s\",\"batch\":%llu,\"window\":%llu,\"iters\":%llu,\"seed\":%llu,"
               "\"batch_bytes\":%.0f,\"p50_us\":%.3f,\"p99_us\":%.3f,\"gb_per_s_p50\":%.3f,\"check\":%s",
               dspec, hostfirst_dtype_name(info.dtype), (unsigned long long)batch, (unsigned long long)window,
               (unsigned long long)iters, (unsigned long long)seed, bytes, p50 * 1e6, p99 * 1e6,
               p50 > 0 ? bytes / p50 / 1e9 : 0.0, ok ? "\"ok\"" : "\"MISMATCH\"");
        if (prefault) printf(",\"prefault_s\":%.6f,\"prefault_populated\":%s", prefault_s, populated ? "true" : "false");
        if (host) printf(",\"from_host\":true,\"put_s\":%.6f", host_s);
        printf(",\"depth\":%llu,\"total_s\":%.6f}\n", (unsigned long long)depth, total_s);
    } else {
        if (prefault)
            printf("prefault %s: %.1f ms (%s)\n", tensor, prefault_s * 1e3,
                   populated ? "pages mapped" : "read-ahead advice only");
        if (host) printf("put %s to cpu: %.1f ms; gathering from that buffer\n", tensor, host_s * 1e3);
        printf("gather %s [%llu, %llu] %s -> %s: %llu iterations, p50 %.1f us, p99 %.1f us per batch; first batch %s\n",
               tensor, (unsigned long long)batch, (unsigned long long)window, hostfirst_dtype_name(info.dtype), dspec,
               (unsigned long long)iters, p50 * 1e6, p99 * 1e6, ok ? "matches a direct read" : "DOES NOT MATCH");
        if (depth)
            printf("prefetched %llu ahead: the times are waits for a ready batch; %.1f ms in all\n",
                   (unsigned long long)depth, total_s * 1e3);
        else
            printf("%.1f ms in all\n", total_s * 1e3);
    }
    if (!ok) rc = 1;
done:
    hostfirst_buffer_free(b);
    hostfirst_gather_stream_free(stream);
    free(offs);
    free(times);
    hostfirst_gather_free(g);
    hostfirst_buffer_free(host);
    hostfirst_view_free(view);
    hostfirst_file_free(file);
    return rc;
}
