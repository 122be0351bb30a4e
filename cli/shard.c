/* hostfirst shard FILE --world W --rank R --rule PATTERN=DIM [--rule ...] [--device SPEC] [--page-cache POLICY]
 * [--json]: loads rank
 * R's shard (an even split along DIM into W parts) of every tensor a rule matches, and every other tensor
 * whole, reading only those bytes (shard-on-read); prints per tensor its global shape, the shard's shape and
 * start along DIM, its size, the FNV-1a 64 of its C-order bytes (the hash of `inspect --checksum`) and the
 * file bytes read for it, then the totals. A rule that splits no tensor gets a warning line on stderr (and is
 * listed in the JSON); --strict refuses it (UNMATCHED_RULE) before anything is read. A pattern longer than
 * MAX_PATTERN bytes is a usage error (never cut short).
 *
 * The rules become a one-axis mesh ("rank", W) and partition specs splitting DIM over it; the first rule
 * matching a name wins. Options are declared in main.c's table (parsed by cli_parse, shown by --help). Output
 * is written only when everything succeeded; a failure prints one line on stderr ("hostfirst: <what>:
 * <STATUS>: <message>"), exit status 1; bad usage exits 2. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define MAX_RULES 64
#define MAX_PATTERN 1023 /* bytes of one rule's pattern */

typedef struct {
    const char *operands[1]; /* FILE */
    const char *device;
    const char *rules[MAX_RULES];
    uint64_t dims[MAX_RULES];
    size_t nrules;
    uint64_t world, rank;
    int json, strict, have_world, have_rank;
    hostfirst_page_cache page_cache; /* --page-cache */
    cli_raw raw;
} shard_args;

static int on_option(void *ctx, int id, const char *v) {
    shard_args *a = ctx;
    if (id == CLI_OPT_JSON) a->json = 1;
    else if (id == CLI_OPT_STRICT) a->strict = 1;
    else if (id == CLI_OPT_DEVICE) a->device = v;
    else if (id == CLI_OPT_RAW) return cli_parse_raw("shard", v, &a->raw);
    else if (id == CLI_OPT_PAGE_CACHE) return cli_parse_page_cache("shard", v, &a->page_cache);
    else if (id == CLI_OPT_WORLD || id == CLI_OPT_RANK) {
        if (!cli_parse_u64(v, id == CLI_OPT_WORLD ? &a->world : &a->rank))
            return cli_usage_error("shard", "'%s' is not a non-negative integer", v);
        if (id == CLI_OPT_WORLD) a->have_world = 1;
        else a->have_rank = 1;
    } else if (id == CLI_OPT_RULE) {
        const char *eq = strrchr(v, '=');
        uint64_t dim = 0;
        if (!eq || eq == v || !cli_parse_u64(eq + 1, &dim) || dim > 31)
            return cli_usage_error("shard", "rule '%s' is not PATTERN=DIM with DIM a dimension (0-31)", v);
        if (a->nrules == MAX_RULES) return cli_usage_error("shard", "more than %d rules", MAX_RULES);
        if ((size_t)(eq - v) > MAX_PATTERN)
            return cli_usage_error("shard",
                                   "the pattern of rule %zu is %zu bytes long; patterns longer than %d bytes are not "
                                   "accepted",
                                   a->nrules, (size_t)(eq - v), MAX_PATTERN);
        a->rules[a->nrules] = v;
        a->dims[a->nrules++] = dim;
    }
    return 0;
}

static uint64_t fnv1a64(const unsigned char *p, uint64_t n, uint64_t h) {
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* FNV-1a 64 of a buffer's bytes: straight from host memory, else copied back in one piece. */
static hostfirst_status buffer_checksum(const hostfirst_buffer *b, uint64_t *out) {
    hostfirst_buffer_info bi;
    memset(&bi, 0, sizeof bi);
    bi.struct_size = sizeof bi;
    hostfirst_status st = hostfirst_buffer_describe(b, &bi);
    if (st != HOSTFIRST_STATUS_OK) return st;
    uint64_t h = 0xcbf29ce484222325ULL;
    if (bi.device.kind != HOSTFIRST_DEVICE_CUDA) {
        *out = fnv1a64((const unsigned char *)(uintptr_t)bi.address, bi.nbytes, h);
        return HOSTFIRST_STATUS_OK;
    }
    unsigned char *tmp = malloc(bi.nbytes ? (size_t)bi.nbytes : 1);
    if (!tmp) return HOSTFIRST_STATUS_OUT_OF_MEMORY;
    st = hostfirst_buffer_copy_to_host(b, tmp, (size_t)bi.nbytes);
    if (st == HOSTFIRST_STATUS_OK) *out = fnv1a64(tmp, bi.nbytes, h);
    free(tmp);
    return st;
}

static void print_dims(cli_out *o, const uint64_t *d, uint32_t rank, int json) {
    cli_out_putc(o, '[');
    for (uint32_t i = 0; i < rank; i++) cli_out_printf(o, "%s%llu", i ? (json ? "," : ", ") : "", (unsigned long long)d[i]);
    cli_out_putc(o, ']');
}

/* The dims as text into buf (for the table). */
static const char *dims_text(const uint64_t *d, uint32_t rank, char *buf, size_t cap) {
    return cli_dims_text(d, rank, buf, cap);
}

/* One line on stderr for rule `i` (text `rule`, PATTERN=DIM), which splits no tensor of `f`: a warning, or under
 * --strict the refusal ("hostfirst: FILE: UNMATCHED_RULE: strict mode: ..."), as plan and load report theirs. */
static void report_unmatched(const hostfirst_file *f, const char *path, size_t i, const char *rule, int strict) {
    size_t plen = (size_t)(strrchr(rule, '=') - rule);
    char pattern[MAX_PATTERN + 1];
    memcpy(pattern, rule, plen);
    pattern[plen] = '\0';
    /* A tensor whose name contains the pattern's text: the usual mistake is a pattern meant as a prefix. */
    const char *near = NULL;
    size_t n = 0;
    hostfirst_file_tensor_count(f, &n);
    for (size_t t = 0; t < n && !near; t++) {
        const char *name = NULL;
        if (hostfirst_file_tensor_name(f, t, &name) == HOSTFIRST_STATUS_OK && name && strstr(name, pattern))
            near = name;
    }
    if (strict)
        fprintf(stderr, "hostfirst: %s: %s: strict mode: ", path, hostfirst_status_name(HOSTFIRST_STATUS_UNMATCHED_RULE));
    else
        fprintf(stderr, "hostfirst: warning: %s: ", path);
    fprintf(stderr,
            "rule %zu '%s' splits no tensor: its pattern matches no tensor name, or only tensors an earlier rule "
            "takes (the first matching rule wins), so the tensors it meant load whole",
            i, rule);
    if (near)
        fprintf(stderr, "; patterns match whole names: tensor '%s' would need '%s*' or '*%s*'\n", near, pattern,
                pattern);
    else
        fputs("; check it against the file's tensor names\n", stderr);
}

int cmd_shard(int argc, char **argv) {
    shard_args args;
    memset(&args, 0, sizeof args);
    args.device = "cpu";
    int prc = cli_parse("shard", argc, argv, &args, on_option, args.operands);
    if (prc) return prc;
    if (!args.have_world || !args.have_rank || args.nrules == 0)
        return cli_usage_error("shard", "--world, --rank and at least one --rule are required");
    const char *path = args.operands[0], *device = args.device;
    const char **rules_text = args.rules;
    const uint64_t *rule_dim = args.dims;
    size_t nrules = args.nrules;
    uint64_t world = args.world, rank = args.rank;
    int json = args.json;

    hostfirst_device dev;
    hostfirst_status st = hostfirst_device_parse(device, &dev);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail(device, st);
    hostfirst_file *f = NULL;
    if ((prc = cli_open(path, &args.raw, &f)) != 0) return prc;

    /* One axis, "rank", of size W; each rule splits its DIM over it. */
    const char *axis = "rank";
    hostfirst_shard_mesh *mesh = NULL;
    hostfirst_shard_rules *rules = NULL;
    hostfirst_shard_plan *plan = NULL;
    hostfirst_shard_result *res = NULL;
    const char *what = path;
    st = hostfirst_shard_mesh_new(&axis, &world, 1, &mesh);
    if (st == HOSTFIRST_STATUS_OK) st = hostfirst_shard_rules_new(mesh, &rules);
    for (size_t i = 0; i < nrules && st == HOSTFIRST_STATUS_OK; i++) {
        char pattern[MAX_PATTERN + 1], spec[128] = "";
        size_t plen = (size_t)(strrchr(rules_text[i], '=') - rules_text[i]); /* at most MAX_PATTERN (checked) */
        memcpy(pattern, rules_text[i], plen);
        pattern[plen] = '\0';
        for (uint64_t d = 0; d < rule_dim[i]; d++) strcat(spec, "_,");
        strcat(spec, "rank");
        what = rules_text[i];
        st = hostfirst_shard_rules_add(rules, pattern, spec);
    }
    if (st == HOSTFIRST_STATUS_OK) what = path, st = hostfirst_shard_plan_make(f, rules, &rank, &dev, 1, NULL, &plan);
    /* Rules that split no tensor: warned about (or refused under --strict) before anything is read. */
    int used[MAX_RULES] = {0};
    int refused = 0;
    if (st == HOSTFIRST_STATUS_OK) {
        size_t count = 0;
        hostfirst_shard_plan_count(plan, &count);
        for (size_t i = 0; i < count && st == HOSTFIRST_STATUS_OK; i++) {
            hostfirst_shard_info si;
            memset(&si, 0, sizeof si);
            si.struct_size = sizeof si;
            st = hostfirst_shard_plan_describe(plan, i, &si);
            if (st == HOSTFIRST_STATUS_OK && si.rule >= 0 && (size_t)si.rule < nrules) used[si.rule] = 1;
        }
    }
    for (size_t i = 0; i < nrules && st == HOSTFIRST_STATUS_OK && !refused; i++) {
        if (used[i]) continue;
        refused = args.strict;
        report_unmatched(f, path, i, rules_text[i], args.strict);
    }
    hostfirst_shard_run_options ro;
    if (st == HOSTFIRST_STATUS_OK && !refused) st = hostfirst_shard_run_options_init(&ro, sizeof ro);
    if (st == HOSTFIRST_STATUS_OK && !refused) {
        ro.page_cache = args.page_cache;
        st = hostfirst_shard_run(plan, &ro, &res);
    }

    cli_out out = {0};
    cli_out *o = st == HOSTFIRST_STATUS_OK && !refused ? &out : NULL;
    size_t n = 0;
    uint64_t file_bytes = 0, tot_bytes = 0, tot_read = 0;
    char spec[64];
    if (o) {
        hostfirst_shard_plan_count(plan, &n);
        hostfirst_file_data_bytes(f, &file_bytes);
        cli_device_spec(dev, spec, sizeof spec);
        if (json) {
            cli_out_puts(o, "{\"file\":");
            cli_out_json_string(o, path);
            cli_out_printf(o, ",\"world\":%llu,\"rank\":%llu,\"device\":\"%s\",\"tensors\":[", (unsigned long long)world,
                    (unsigned long long)rank, spec);
        } else {
            cli_out_printf(o, "file: %s\nrank %llu of %llu on %s\n\n", path, (unsigned long long)rank,
                    (unsigned long long)world, spec);
            cli_out_printf(o, "%-40s %4s %-20s %-20s %10s %12s %12s  %s\n", "NAME", "DIM", "SHAPE", "SHARD", "START", "NBYTES",
                    "READ", "FNV1A64");
        }
    }
    for (size_t i = 0; i < n && st == HOSTFIRST_STATUS_OK; i++) {
        hostfirst_shard_info si;
        memset(&si, 0, sizeof si);
        si.struct_size = sizeof si;
        hostfirst_buffer *b = NULL;
        uint64_t read = 0, sum = 0;
        st = hostfirst_shard_plan_describe(plan, i, &si);
        if (st == HOSTFIRST_STATUS_OK) st = hostfirst_shard_result_get(res, i, &b, &read);
        if (st == HOSTFIRST_STATUS_OK) st = buffer_checksum(b, &sum);
        hostfirst_buffer_free(b);
        if (st != HOSTFIRST_STATUS_OK) break;
        int dim = si.rule >= 0 ? (int)rule_dim[si.rule] : -1;
        uint64_t start = dim >= 0 ? si.start[dim] : 0;
        tot_bytes += si.nbytes;
        tot_read += read;
        if (json) {
            cli_out_printf(o, "%s{\"name\":", i ? "," : "");
            cli_out_json_string(o, si.name);
            if (dim >= 0) cli_out_printf(o, ",\"dim\":%d", dim);
            else cli_out_puts(o, ",\"dim\":null");
            cli_out_puts(o, ",\"shape\":");
            print_dims(o, si.shape, si.rank, 1);
            cli_out_puts(o, ",\"shard_shape\":");
            print_dims(o, si.shard_shape, si.rank, 1);
            cli_out_printf(o, ",\"start\":%llu,\"nbytes\":%llu,\"fnv1a64\":\"%016llx\",\"bytes_read\":%llu}",
                    (unsigned long long)start, (unsigned long long)si.nbytes, (unsigned long long)sum,
                    (unsigned long long)read);
        } else {
            char a[128], c[128], d[16];
            if (dim >= 0) snprintf(d, sizeof d, "%d", dim);
            else snprintf(d, sizeof d, "-");
            cli_out_printf(o, "%-40s %4s %-20s %-20s %10llu %12llu %12llu  %016llx\n", si.name, d,
                    dims_text(si.shape, si.rank, a, sizeof a), dims_text(si.shard_shape, si.rank, c, sizeof c),
                    (unsigned long long)start, (unsigned long long)si.nbytes, (unsigned long long)read,
                    (unsigned long long)sum);
        }
    }
    if (o) {
        if (json) {
            cli_out_puts(o, "],\"unmatched_rules\":[");
            for (size_t i = 0, k = 0; i < nrules; i++) {
                if (used[i]) continue;
                char pattern[MAX_PATTERN + 1];
                size_t plen = (size_t)(strrchr(rules_text[i], '=') - rules_text[i]);
                memcpy(pattern, rules_text[i], plen);
                pattern[plen] = '\0';
                cli_out_printf(o, "%s{\"rule\":%zu,\"pattern\":", k++ ? "," : "", i);
                cli_out_json_string(o, pattern);
                cli_out_printf(o, ",\"dim\":%llu}", (unsigned long long)rule_dim[i]);
            }
            cli_out_printf(o, "],\"totals\":{\"tensors\":%zu,\"nbytes\":%llu,\"bytes_read\":%llu,\"file_bytes\":%llu}}\n", n,
                    (unsigned long long)tot_bytes, (unsigned long long)tot_read, (unsigned long long)file_bytes);
        } else {
            char a[32], b[32], c[32];
            cli_out_printf(o, "\ntotal: %zu tensors, %s of shards (%llu bytes), %s read (%llu bytes) of the files' %s\n", n,
                    cli_bytes(tot_bytes, a, sizeof a), (unsigned long long)tot_bytes, cli_bytes(tot_read, b, sizeof b),
                    (unsigned long long)tot_read, cli_bytes(file_bytes, c, sizeof c));
        }
    }
    hostfirst_shard_result_free(res);
    hostfirst_shard_plan_free(plan);
    hostfirst_shard_rules_free(rules);
    hostfirst_shard_mesh_free(mesh);
    hostfirst_file_free(f);
    if (refused) return 1;
    if (st != HOSTFIRST_STATUS_OK) {
        cli_out_free(&out);
        return cli_fail(what, st);
    }
    return cli_out_emit(&out, what);
}
