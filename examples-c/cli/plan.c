/* hostfirst plan FILE --rule PATTERN=TARGET ... [--json]: where every tensor would go (a dry run).
 * hostfirst load FILE --rule PATTERN=TARGET ... [--json]: does it, and reports per-tensor placement and time.
 *
 * Rules are tried in order, the first match wins, unmatched tensors stay on the host. Output is written only
 * when everything succeeded; a failure prints one line on stderr and exits 1 (usage errors exit 2). */
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

typedef struct {
    int json, strict;
    const char *path;
    hostfirst_file *file;
    hostfirst_rules *rules;
    hostfirst_plan *plan;
} plan_args;

typedef struct {
    plan_args *a;
    const char *cmd;
} parse_ctx;

static int on_option(void *ctx, int id, const char *value) {
    parse_ctx *p = ctx;
    if (id == CLI_OPT_JSON) p->a->json = 1;
    else if (id == CLI_OPT_STRICT) p->a->strict = 1;
    else if (id == CLI_OPT_RULE) {
        hostfirst_status st = hostfirst_rules_add_spec(p->a->rules, value);
        if (st != HOSTFIRST_STATUS_OK) return cli_fail(value, st) + 1;
    }
    return 0;
}

static int on_operand(void *ctx, const char *arg) {
    parse_ctx *p = ctx;
    if (p->a->path) return cli_usage_error(p->cmd, "more than one FILE ('%s')", arg);
    p->a->path = arg;
    return 0;
}

/* Parses the arguments, opens the file, adds the rules and makes the plan. Returns 0 or an exit status. */
static int setup(const char *cmd, int argc, char **argv, plan_args *a) {
    memset(a, 0, sizeof *a);
    hostfirst_status st = hostfirst_rules_new(&a->rules);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail("rules", st);
    parse_ctx p = {a, cmd};
    int rc = cli_parse(cmd, argc, argv, &p, on_option, on_operand);
    if (rc) return rc;
    if (!a->path) return cli_usage_error(cmd, "FILE is missing");
    if (a->strict && (st = hostfirst_strict_thread_set(1)) != HOSTFIRST_STATUS_OK) return cli_fail("strict", st);
    st = hostfirst_file_open(a->path, &a->file);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail(a->path, st);
    st = hostfirst_plan_make(a->file, a->rules, &a->plan);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail(a->path, st);
    return 0;
}

static void teardown(plan_args *a) {
    hostfirst_plan_free(a->plan);
    hostfirst_rules_free(a->rules);
    hostfirst_file_free(a->file);
}

static const char *target_of(const hostfirst_plan_tensor_info *t, char *buf, size_t cap) {
    if (t->placement == HOSTFIRST_PLACEMENT_HOST) {
        snprintf(buf, cap, "host");
        return buf;
    }
    return cli_device_spec(t->device, buf, cap);
}

/* Prints the plan: a table, or the "tensors" and "devices" members of a JSON object (no braces). */
static int print_plan(const plan_args *a, const double *seconds) {
    size_t nt = 0, nd = 0;
    hostfirst_plan_tensor_count(a->plan, &nt);
    hostfirst_plan_device_count(a->plan, &nd);
    char dev[64], b1[32], b2[32], b3[32];
    if (a->json) printf("\"tensors\":[");
    else printf("%-40s %-10s %5s %12s%s\n", "tensor", "target", "rule", "bytes", seconds ? "   seconds" : "");
    for (size_t i = 0; i < nt; i++) {
        hostfirst_plan_tensor_info t = {.struct_size = sizeof t};
        hostfirst_status st = hostfirst_plan_tensor(a->plan, i, &t);
        if (st != HOSTFIRST_STATUS_OK) return cli_fail("plan", st);
        target_of(&t, dev, sizeof dev);
        if (a->json) {
            printf("%s{\"name\":", i ? "," : "");
            cli_json_string(stdout, t.name);
            printf(",\"target\":\"%s\",\"rule\":%d,\"nbytes\":%llu", dev, t.rule, (unsigned long long)t.nbytes);
            if (seconds) printf(",\"seconds\":%.6f", seconds[i]);
            printf("}");
        } else {
            printf("%-40s %-10s %5d %12llu", t.name, dev, t.rule, (unsigned long long)t.nbytes);
            if (seconds) printf(" %9.6f", seconds[i]);
            printf("\n");
        }
    }
    if (a->json) printf("],\"devices\":[");
    else if (nd) printf("\n%-10s %8s %12s %12s %12s %5s  %s\n", "device", "tensors", "bytes", "usable", "total", "fits", "largest");
    for (size_t i = 0; i < nd; i++) {
        hostfirst_plan_device_info d = {.struct_size = sizeof d};
        hostfirst_status st = hostfirst_plan_device(a->plan, i, &d);
        if (st != HOSTFIRST_STATUS_OK) return cli_fail("plan", st);
        cli_device_spec(d.device, dev, sizeof dev);
        if (a->json) {
            printf("%s{\"device\":\"%s\",\"tensors\":%llu,\"bytes\":%llu,\"usable\":%llu,\"total\":%llu,\"fits\":%s,"
                   "\"largest\":",
                   i ? "," : "", dev, (unsigned long long)d.tensors, (unsigned long long)d.bytes,
                   (unsigned long long)d.usable, (unsigned long long)d.total, d.fits ? "true" : "false");
            cli_json_string(stdout, d.largest_name);
            printf(",\"largest_bytes\":%llu}", (unsigned long long)d.largest_bytes);
        } else {
            printf("%-10s %8llu %12s %12s %12s %5s  %s (%s)\n", dev, (unsigned long long)d.tensors,
                   cli_bytes(d.bytes, b1, sizeof b1), cli_bytes(d.usable, b2, sizeof b2), cli_bytes(d.total, b3, sizeof b3),
                   d.fits ? "yes" : "NO", d.largest_name, cli_bytes(d.largest_bytes, b1, sizeof b1));
        }
    }
    if (a->json) printf("]");
    return 0;
}

int cmd_plan(int argc, char **argv) {
    plan_args a;
    int rc = setup("plan", argc, argv, &a);
    if (rc == 0) {
        if (a.json) {
            printf("{\"file\":");
            cli_json_string(stdout, a.path);
            printf(",");
        }
        rc = print_plan(&a, NULL);
        if (a.json) printf("}\n");
    }
    teardown(&a);
    return rc;
}

/* Per-tensor times from the one progress callback: device tensors are placed in file order, so tensor k is
 * done when the bytes done reach the sum of the device tensors' sizes up to k. */
typedef struct {
    double start, last;
    size_t n, next;
    const uint64_t *ends; /* cumulative device bytes after tensor i (UINT64_MAX for host tensors) */
    double *secs;
} load_progress;

static int on_progress(uint64_t done, uint64_t total, void *user) {
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
    int rc = setup("load", argc, argv, &a);
    if (rc != 0) {
        teardown(&a);
        return rc;
    }
    size_t nt = 0;
    hostfirst_plan_tensor_count(a.plan, &nt);
    double *secs = calloc(nt ? nt : 1, sizeof *secs);
    uint64_t *ends = calloc(nt ? nt : 1, sizeof *ends);
    if (!secs || !ends) {
        free(secs);
        free(ends);
        teardown(&a);
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
    hostfirst_status st = hostfirst_load_run(a.file, a.plan, on_progress, &prog, &load);
    double total_s = now_s() - prog.start;
    if (st != HOSTFIRST_STATUS_OK) rc = cli_fail(a.path, st);
    /* Every tensor is found by name, as a buffer or a view. */
    uint64_t moved = 0;
    for (size_t i = 0; rc == 0 && i < nt; i++) {
        hostfirst_plan_tensor_info t = {.struct_size = sizeof t};
        hostfirst_plan_tensor(a.plan, i, &t);
        uint32_t kind = 0;
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
        rc = print_plan(&a, secs);
        if (a.json) printf("}\n");
        else {
            char b[32];
            printf("\nloaded: %s moved to devices in %.3f s\n", cli_bytes(moved, b, sizeof b), total_s);
        }
    }
    free(secs);
    free(ends);
    hostfirst_load_free(load);
    teardown(&a);
    return rc;
}
