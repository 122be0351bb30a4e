/* hostfirst convert INPUT OUTPUT [--max-part-mib M] [--no-sync] [--json]: writes every tensor and the metadata
 * of whatever hostfirst's reader opens (hostfirst_file_open: a safetensors file, a sharded set's index, and any
 * format the reader learns) as safetensors, through the writer (hostfirst_writer_*): each tensor is a view of
 * the input, read by the transfer engine while the output is written; the output is a temporary file renamed
 * into place, so OUTPUT is never half-written (the input may even be OUTPUT itself: the views keep reading
 * the old file; not on Windows, which refuses to replace a mapped file: PERMISSION_DENIED, the input unchanged). Written generically over the reader's file and view objects only.
 *
 * Output: one line (or one JSON object) once the save is complete; a failure prints nothing on stdout and one
 * line on stderr ("hostfirst: <path>: <STATUS>: <message>"), exit status 1. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"

typedef struct {
    int json, no_sync;
    uint64_t part_mib;
    const char *operands[2];
} convert_args;

static int on_option(void *ctx, int id, const char *value) {
    convert_args *a = ctx;
    if (id == CLI_OPT_JSON) a->json = 1;
    else if (id == CLI_OPT_NO_SYNC) a->no_sync = 1;
    else if (id == CLI_OPT_MAX_PART_MIB) {
        if (!cli_parse_u64(value, &a->part_mib) || a->part_mib > ((uint64_t)1 << 40))
            return cli_usage_error("convert", "--max-part-mib takes a whole number of MiB (0: one file)");
    }
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int cmd_convert(int argc, char **argv) {
    convert_args a = {0, 0, 0, {NULL, NULL}};
    int rc = cli_parse("convert", argc, argv, &a, on_option, a.operands);
    if (rc) return rc;
    const char *in = a.operands[0], *out = a.operands[1];
    double t0 = now();

    hostfirst_file *f = NULL;
    hostfirst_status st = hostfirst_file_open(in, &f);
    if (st != HOSTFIRST_STATUS_OK) return cli_fail(in, st);
    hostfirst_writer_options o;
    hostfirst_writer_options_init(&o, sizeof o);
    o.max_part_bytes = a.part_mib << 20;
    o.no_sync = a.no_sync;
    hostfirst_writer *w = NULL;
    st = hostfirst_writer_open(out, &o, &w);
    if (st != HOSTFIRST_STATUS_OK) {
        hostfirst_file_free(f);
        return cli_fail(out, st);
    }
    size_t n = 0, nmeta = 0;
    st = hostfirst_file_tensor_count(f, &n);
    for (size_t i = 0; st == HOSTFIRST_STATUS_OK && i < n; i++) {
        hostfirst_view *v = NULL;
        st = hostfirst_file_view_at(f, i, &v);
        if (st == HOSTFIRST_STATUS_OK) st = hostfirst_writer_add_view(w, NULL, v); /* the writer keeps the file */
        hostfirst_view_free(v);
    }
    if (st == HOSTFIRST_STATUS_OK) st = hostfirst_file_metadata_count(f, &nmeta);
    const char **keys = calloc(nmeta ? nmeta : 1, sizeof *keys), **values = calloc(nmeta ? nmeta : 1, sizeof *values);
    if (!keys || !values) st = HOSTFIRST_STATUS_OUT_OF_MEMORY;
    for (size_t i = 0; st == HOSTFIRST_STATUS_OK && i < nmeta; i++) st = hostfirst_file_metadata_get(f, i, &keys[i], &values[i]);
    /* The input's metadata (an index's `total_size` is the writer's to write again for a split output). */
    size_t kept = 0;
    for (size_t i = 0; st == HOSTFIRST_STATUS_OK && i < nmeta; i++) {
        if (!strcmp(keys[i], "total_size") || !strcmp(keys[i], "total_parameters")) continue;
        keys[kept] = keys[i];
        values[kept++] = values[i];
    }
    if (st == HOSTFIRST_STATUS_OK && nmeta) st = hostfirst_writer_set_metadata(w, keys, values, kept);
    hostfirst_writer_info info = {.struct_size = sizeof info};
    if (st == HOSTFIRST_STATUS_OK) st = hostfirst_writer_finish(w, &info);
    const char *failed = st == HOSTFIRST_STATUS_OK ? NULL : out;
    if (failed) {
        rc = cli_fail(failed, st);
    } else {
        double secs = now() - t0;
        char b[32];
        if (a.json) {
            printf("{\"input\":");
            cli_json_string(stdout, in);
            printf(",\"output\":");
            cli_json_string(stdout, info.index ? info.index : out);
            printf(",\"tensors\":%llu,\"metadata\":%zu,\"parts\":%llu,\"file_bytes\":%llu,\"seconds\":%.6f}\n",
                   (unsigned long long)info.tensors, kept, (unsigned long long)info.parts,
                   (unsigned long long)info.file_bytes, secs);
        } else {
            printf("%s -> %s: %llu tensors, %llu file%s, %s in %.3f s\n", in, info.index ? info.index : out,
                   (unsigned long long)info.tensors, (unsigned long long)info.parts, info.parts == 1 ? "" : "s",
                   cli_bytes(info.file_bytes, b, sizeof b), secs);
        }
    }
    free(keys);
    free(values);
    hostfirst_writer_free(w);
    hostfirst_file_free(f);
    return rc;
}
