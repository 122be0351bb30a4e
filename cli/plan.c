/* hostfirst plan FILE --rule PATTERN=TARGET ... [--strict] [--json]: where every tensor would go (a dry run).
 * The argument parsing, set-up and report here are shared with `hostfirst load` (load.c).
 *
 * Rules are tried in order, the first match wins, unmatched tensors stay on the host. A rule that places no
 * tensor gets a warning line on stderr (and is listed in the JSON); --strict refuses it (UNMATCHED_RULE). Output is written only
 * when everything succeeded; a failure prints one line on stderr and exits 1 (usage errors exit 2). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static int on_option(void *ctx, int id, const char *value) {
    plan_args *a = ctx;
    if (id == CLI_OPT_JSON) a->json = 1;
    else if (id == CLI_OPT_STRICT) a->strict = 1;
    else if (id == CLI_OPT_RAW) return cli_parse_raw(a->cmd, value, &a->raw);
    else if (id == CLI_OPT_PAGE_CACHE) return cli_parse_page_cache(a->cmd, value, &a->page_cache);
    else if (id == CLI_OPT_RULE) {
        hostfirst_status st = hostfirst_rules_add_spec(a->rules, value);
        if (st != HOSTFIRST_STATUS_OK) return cli_fail(value, st) + 1;
    }
    return 0;
}

int plan_setup(const char *cmd, int argc, char **argv, plan_args *a) {
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    hostfirst_status st = hostfirst_rules_new(&a->rules);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail("rules", st);
    int rc = cli_parse(cmd, argc, argv, a, on_option, &a->path);
    if (rc) return rc;
    if (a->strict && (st = hostfirst_strict_thread_set(1)) != HOSTFIRST_STATUS_OK) return cli_fail("strict", st);
    if ((rc = cli_open(a->path, &a->raw, &a->file)) != 0) return rc;
    st = hostfirst_plan_make(a->file, a->rules, &a->plan);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail(a->path, st);
    /* A rule that places nothing is almost always a typo (token=host for tokens): one warning line each.
     * Under --strict the plan was refused above instead (UNMATCHED_RULE). */
    size_t nu = 0;
    hostfirst_plan_unmatched_rule_count(a->plan, &nu);
    for (size_t i = 0; i < nu; i++) {
        hostfirst_plan_unmatched_rule_info u = {.struct_size = sizeof u};
        if (hostfirst_plan_unmatched_rule(a->plan, i, &u) == HOSTFIRST_STATUS_OK)
            fprintf(stderr, "hostfirst: warning: %s: %s\n", a->path, u.message);
    }
    return 0;
}

void plan_teardown(plan_args *a) {
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

int plan_print(const plan_args *a, const double *seconds) {
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
    if (a->json) {
        /* The rules that place no tensor (also warned about on stderr). */
        size_t nu = 0;
        hostfirst_plan_unmatched_rule_count(a->plan, &nu);
        printf("],\"unmatched_rules\":[");
        for (size_t i = 0; i < nu; i++) {
            hostfirst_plan_unmatched_rule_info u = {.struct_size = sizeof u};
            hostfirst_status st = hostfirst_plan_unmatched_rule(a->plan, i, &u);
            if (st != HOSTFIRST_STATUS_OK) return cli_fail("plan", st);
            printf("%s{\"rule\":%u,\"pattern\":", i ? "," : "", u.rule);
            cli_json_string(stdout, u.pattern);
            printf(",\"target\":");
            cli_json_string(stdout, u.target);
            printf(",\"shadowed_by\":%d,\"tensor\":", u.shadowed_by);
            if (u.tensor) cli_json_string(stdout, u.tensor);
            else printf("null");
            printf(",\"message\":");
            cli_json_string(stdout, u.message);
            printf("}");
        }
        printf("]");
    }
    return 0;
}

int cmd_plan(int argc, char **argv) {
    plan_args a;
    int rc = plan_setup("plan", argc, argv, &a);
    if (rc == 0) {
        if (a.json) {
            printf("{\"file\":");
            cli_json_string(stdout, a.path);
            printf(",");
        }
        rc = plan_print(&a, NULL);
        if (a.json) printf("}\n");
    }
    plan_teardown(&a);
    return rc;
}
