/* hostfirst load FILE --rule PATTERN=TARGET ... [--page-cache POLICY] [--json]: places the whole file as the plan says (see plan.c,
 * whose argument parsing and report it shares), and reports per-tensor placement and time.
 *
 * Output is written only when everything succeeded; a failure prints one line on stderr and exits 1 (usage
 * errors exit 2). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <time.h>
#include "cli.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Per-tensor times from the one progress callback: device tensors are placed in file order, so tensor k is
 * done when the bytes done reach the sum of the device tensors' sizes up to k. */
typedef struct {
    double start, last;
    size_t n, next;
    const uint64_t *ends; /* cumulative device bytes after tensor i (UINT64_MAX for host tensors) */
    double *secs;
} load_progress;

static int32_t on_progress(uint64_t done, uint64_t total, void *user) {
    load_progress *p = user;
    (void)total;
    double t = now_s();
    while (p->next < p->n && (p->ends[p->next] == UINT64_MAX || done >= p->ends[p->next])) {
        if (p->ends[p->next] != UINT64_MAX) {
            p->secs[p->next] = t - p->last;
            p->last = t;
        }
        p->next++;
    }
    return 0;
}

int cmd_load(int argc, char **argv) {
    plan_args a;
    int rc = plan_setup("load", argc, argv, &a);
    if (rc != 0) {
        plan_teardown(&a);
        return rc;
    }
    size_t nt = 0;
    hostfirst_plan_tensor_count(a.plan, &nt);
    double *secs = calloc(nt ? nt : 1, sizeof *secs);
    uint64_t *ends = calloc(nt ? nt : 1, sizeof *ends);
    if (!secs || !ends) {
        free(secs);
        free(ends);
        plan_teardown(&a);
        fprintf(stderr, "hostfirst load: out of memory\n");
        return 1;
    }
    uint64_t cum = 0;
    for (size_t i = 0; i < nt; i++) {
        hostfirst_plan_tensor_info t = {.struct_size = sizeof t};
        hostfirst_plan_tensor(a.plan, i, &t);
        if (t.placement == HOSTFIRST_PLACEMENT_DEVICE) {
            cum += t.nbytes;
            ends[i] = cum;
        } else {
            ends[i] = UINT64_MAX;
        }
    }
    load_progress prog = {now_s(), 0, nt, 0, ends, secs};
    prog.last = prog.start;
    hostfirst_load *load = NULL;
    hostfirst_load_options lo;
    hostfirst_load_options_init(&lo, sizeof lo);
    lo.progress = on_progress;
    lo.user = &prog;
    lo.page_cache = a.page_cache;
    hostfirst_status st = hostfirst_load_run(a.file, a.plan, &lo, &load);
    double total_s = now_s() - prog.start;
    if (st != HOSTFIRST_STATUS_OK) rc = cli_fail(a.path, st);
    /* Every tensor is found by name, as a buffer or a view. */
    uint64_t moved = 0;
    for (size_t i = 0; rc == 0 && i < nt; i++) {
        hostfirst_plan_tensor_info t = {.struct_size = sizeof t};
        hostfirst_plan_tensor(a.plan, i, &t);
        hostfirst_loaded kind = 0;
        hostfirst_buffer *buf = NULL;
        hostfirst_view *view = NULL;
        st = hostfirst_load_get(load, t.name, &kind, &buf, &view);
        if (st != HOSTFIRST_STATUS_OK) rc = cli_fail(t.name, st);
        else if (kind == HOSTFIRST_LOADED_BUFFER) moved += t.nbytes;
        hostfirst_buffer_free(buf);
        hostfirst_view_free(view);
    }
    if (rc == 0) {
        if (a.json) {
            printf("{\"file\":");
            cli_json_string(stdout, a.path);
            printf(",\"seconds\":%.6f,\"bytes_moved\":%llu,", total_s, (unsigned long long)moved);
        }
        rc = plan_print(&a, secs);
        if (a.json) printf("}\n");
        else {
            char b[32];
            printf("\nloaded: %s moved to devices in %.3f s\n", cli_bytes(moved, b, sizeof b), total_s);
        }
    }
    free(secs);
    free(ends);
    hostfirst_load_free(load);
    plan_teardown(&a);
    return rc;
}
