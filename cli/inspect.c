/* hostfirst inspect FILE [--json] [--checksum]: the tensors and metadata of a safetensors file or a sharded
 * set (*.safetensors.index.json), read host-first through the public C API.
 *
 * Output is assembled in memory and written only when everything succeeded, so a failure prints nothing on
 * stdout and exactly one line on stderr: "hostfirst: <path>: <STATUS>: <message>", exit status 1. */
#include <stdlib.h>
#include <string.h>
#include "cli.h"

#define CHUNK ((size_t)64 << 20)

/* FNV-1a 64 of the view's bytes, read with hostfirst_view_copy (or hostfirst_view_read in 64 MiB chunks for
 * large tensors). */
static hostfirst_status checksum(const hostfirst_view *v, uint64_t nbytes, uint64_t *out) {
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t cap = nbytes < CHUNK ? (size_t)nbytes : CHUNK;
    unsigned char *buf = malloc(cap ? cap : 1);
    if (!buf) return HOSTFIRST_STATUS_OUT_OF_MEMORY;
    hostfirst_status st = HOSTFIRST_STATUS_OK;
    if (nbytes <= CHUNK) {
        uint64_t need = 0;
        st = hostfirst_view_copy(v, buf, cap, &need);
        for (size_t i = 0; st == HOSTFIRST_STATUS_OK && i < need; i++) h = (h ^ buf[i]) * 0x100000001b3ULL;
    } else {
        for (uint64_t off = 0; st == HOSTFIRST_STATUS_OK && off < nbytes; off += cap) {
            size_t n = nbytes - off < cap ? (size_t)(nbytes - off) : cap;
            st = hostfirst_view_read(v, off, buf, n);
            for (size_t i = 0; st == HOSTFIRST_STATUS_OK && i < n; i++) h = (h ^ buf[i]) * 0x100000001b3ULL;
        }
    }
    free(buf);
    if (st == HOSTFIRST_STATUS_OK) *out = h;
    return st;
}

static void print_shape(cli_out *o, const hostfirst_view_info *info, int json) {
    cli_out_putc(o, '[');
    for (uint32_t d = 0; d < info->rank; d++)
        cli_out_printf(o, "%s%llu", d ? (json ? "," : ", ") : "", (unsigned long long)info->shape[d]);
    cli_out_putc(o, ']');
}

typedef struct {
    int json, sums;
    const char *path;
    cli_raw raw;
} inspect_args;

static int on_option(void *ctx, int id, const char *value) {
    inspect_args *a = ctx;
    if (id == CLI_OPT_JSON) a->json = 1;
    else if (id == CLI_OPT_CHECKSUM) a->sums = 1;
    else if (id == CLI_OPT_RAW) return cli_parse_raw("inspect", value, &a->raw);
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    inspect_args a;
    memset(&a, 0, sizeof a);
    int rc = cli_parse("inspect", argc, argv, &a, on_option, &a.path);
    if (rc) return rc;
    int json = a.json, sums = a.sums;
    const char *path = a.path;

    hostfirst_file *f = NULL;
    rc = cli_open(path, &a.raw, &f);
    if (rc) return rc;
    hostfirst_status st = HOSTFIRST_STATUS_OK;

    cli_out out = {0};
    cli_out *o = &out;
    size_t n = 0, nmeta = 0, name_width = 40;
    uint64_t total = 0;
    hostfirst_file_tensor_count(f, &n);
    hostfirst_file_metadata_count(f, &nmeta);
    hostfirst_file_data_bytes(f, &total);
    hostfirst_format format = HOSTFIRST_FORMAT_AUTO;
    hostfirst_file_format(f, &format);
    const char *format_name = hostfirst_format_name(format);
    /* How the file is read: its file system, mapped or owned reads and why, O_DIRECT (hostfirst_file_read_engine). */
    size_t engine_len = 0;
    char *engine = NULL;
    if (hostfirst_file_read_engine(f, NULL, 0, &engine_len) == HOSTFIRST_STATUS_OK) engine = malloc(engine_len + 1);
    if (engine && hostfirst_file_read_engine(f, engine, engine_len + 1, &engine_len) != HOSTFIRST_STATUS_OK) {
        free(engine);
        engine = NULL;
    }

    if (json) {
        cli_out_puts(o, "{\"file\":");
        cli_out_json_string(o, path);
        cli_out_printf(o, ",\"format\":\"%s\",\"metadata\":{", format_name);
        for (size_t i = 0; i < nmeta; i++) {
            const char *k = NULL, *v = NULL;
            hostfirst_file_metadata_get(f, i, &k, &v);
            if (i) cli_out_putc(o, ',');
            cli_out_json_string(o, k);
            cli_out_putc(o, ':');
            cli_out_json_string(o, v);
        }
        cli_out_puts(o, "},\"tensors\":[");
    } else {
        char b[32];
        /* The NAME column is as wide as the longest name (at least 40), so long names keep the table aligned. */
        for (size_t i = 0; i < n; i++) {
            const char *name = NULL;
            if (hostfirst_file_tensor_name(f, i, &name) == HOSTFIRST_STATUS_OK && name && strlen(name) > name_width)
                name_width = strlen(name);
        }
        cli_out_printf(o, "file: %s\nformat: %s\ntensors: %zu, data: %s (%llu bytes)\nread engine: %s\n\n", path,
                format_name, n, cli_bytes(total, b, sizeof b), (unsigned long long)total, engine ? engine : "?");
        cli_out_printf(o, "%-*s %-11s %-24s %12s %14s%s\n", (int)name_width, "NAME", "DTYPE", "SHAPE", "SIZE", "OFFSET",
                sums ? "  FNV1A64" : "");
    }

    for (size_t i = 0; i < n && st == HOSTFIRST_STATUS_OK; i++) {
        hostfirst_view *v = NULL;
        st = hostfirst_file_view_at(f, i, &v);
        if (st != HOSTFIRST_STATUS_OK) break;
        hostfirst_view_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        st = hostfirst_view_describe(v, &info);
        uint64_t sum = 0;
        if (st == HOSTFIRST_STATUS_OK && sums) st = checksum(v, info.nbytes, &sum);
        if (st == HOSTFIRST_STATUS_OK) {
            const char *dt = hostfirst_dtype_name(info.dtype);
            if (json) {
                cli_out_printf(o, "%s{\"name\":", i ? "," : "");
                cli_out_json_string(o, info.name);
                cli_out_printf(o, ",\"dtype\":\"%s\",\"shape\":", dt);
                print_shape(o, &info, 1);
                cli_out_printf(o, ",\"offset\":%llu,\"nbytes\":%llu", (unsigned long long)info.data_offset,
                        (unsigned long long)info.nbytes);
                if (sums) cli_out_printf(o, ",\"fnv1a64\":\"%016llx\"", (unsigned long long)sum);
                cli_out_putc(o, '}');
            } else {
                char shape[256], b[32];
                cli_dims_text(info.shape, info.rank, shape, sizeof shape);
                cli_out_printf(o, "%-*s %-11s %-24s %12s %14llu", (int)name_width, info.name, dt, shape,
                        cli_bytes(info.nbytes, b, sizeof b), (unsigned long long)info.data_offset);
                if (sums) cli_out_printf(o, "  %016llx", (unsigned long long)sum);
                cli_out_putc(o, '\n');
            }
        }
        hostfirst_view_free(v);
    }
    if (json) {
        cli_out_puts(o, "],\"read_engine\":");
        cli_out_json_string(o, engine ? engine : "");
        cli_out_puts(o, "}\n");
    } else if (st == HOSTFIRST_STATUS_OK) {
        cli_out_printf(o, "\nmetadata: %zu entr%s\n", nmeta, nmeta == 1 ? "y" : "ies");
        for (size_t i = 0; i < nmeta; i++) {
            const char *k = NULL, *v = NULL;
            hostfirst_file_metadata_get(f, i, &k, &v);
            cli_out_printf(o, "  %s: %s\n", k, v);
        }
    }
    free(engine);
    hostfirst_file_free(f);
    if (st != HOSTFIRST_STATUS_OK) {
        cli_out_free(&out);
        return cli_fail(path, st);
    }
    return cli_out_emit(&out, path);
}
