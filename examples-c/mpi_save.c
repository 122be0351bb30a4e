/* The reverse of shard-on-read under MPI: every rank of `mpirun -np W mpi_save INDEX OUT` loads only its shards
 * of a sharded set (as mpi_shard.c does: one mesh axis "tp" of size W, weights split along one dimension,
 * the rest replicated), then all ranks save them together into OUT (Hugging Face part files of at most 16 KiB
 * and an index): each rank writes only the bytes of its own shards, a replicated tensor is written by rank 0
 * alone, and rank 0 writes the headers and the index. Nothing is written twice: the ranks' bytes add up to the
 * files' bytes exactly (MPI_Reduce). Rank 0 then reads OUT back and compares every tensor with INDEX.
 *
 * hostfirst does the reading and writing; MPI does the communication: the writer's agreement callback is an
 * MPI_Allreduce of a flag (the library never links MPI). OUT's directory must be one every rank sees.
 *
 *   mpicc -Wall -Wextra -Werror -Iinclude examples-c/mpi_save.c -Ltarget/release -lhostfirst -o mpi_save
 *   mpirun -np 4 ./mpi_save /tmp/demo/model.safetensors.index.json /tmp/demo/saved.safetensors
 *
 * With a third argument `twice`, every rank also gives the replicated tensors (a bug such a job can have): the
 * writer refuses the save on every rank (rank 0: INVALID_ARGUMENT naming the tensor written twice; the others:
 * CANCELLED) and OUT stays as it was; the program then exits 0 (`once` as the third argument: the normal save).
 *
 * With a report folder (the fourth argument), each rank also writes its result lines to report-<rank>.txt there:
 * a test reads those, not mpirun's output, which MPI itself writes to as well. */
#define _POSIX_C_SOURCE 200809L
#define HOSTFIRST_EXPERIMENTAL /* shard-on-read (the shard_* functions) is in the experimental tier */
#include <inttypes.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hostfirst.h"

/* The dimension each weight pattern splits across the ranks (as in mpi_shard.c). */
static const struct {
    const char *pattern;
    unsigned dim;
} RULES[] = {{"*.attn.weight", 1}, {"*.mlp.weight", 0}, {"embed.*", 0}, {"tokens", 0}};
#define NRULES (sizeof RULES / sizeof RULES[0])

static int rank_ = 0;
static const char *report_dir;

/* A result line: to stdout, and to this rank's report file when there is a report folder. */
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (!report_dir || !*report_dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/report-%d.txt", report_dir, rank_);
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "rank %d: cannot write %s\n", rank_, path);
        return;
    }
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static void die(const char *what, hostfirst_status st) {
    fprintf(stderr, "rank %d: %s: %s: %s\n", rank_, what, hostfirst_status_name(st), hostfirst_last_error_message());
    say("error: %s: %s: %s\n", what, hostfirst_status_name(st), hostfirst_last_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
#define TRY(call)                                        \
    do {                                                 \
        hostfirst_status st_ = (call);                   \
        if (st_ != HOSTFIRST_STATUS_OK) die(#call, st_); \
    } while (0)

/* The writer's agreement step: every rank's flag in, their logical AND out (also a barrier). */
static int32_t mpi_agree(int32_t ok, void *user) {
    (void)user;
    int in = ok != 0, all = 0;
    if (MPI_Allreduce(&in, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
    return all ? 1 : 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 3) {
        if (rank_ == 0)
            fprintf(stderr, "usage: mpirun -np W %s INDEX.json OUT.safetensors [once|twice [REPORT_DIR]]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *index = argv[1], *out = argv[2];
    int twice = argc > 3 && !strcmp(argv[3], "twice");
    report_dir = argc > 4 ? argv[4] : NULL;

    /* This rank's shards: shard-on-read with one mesh axis of W positions, position = rank. */
    hostfirst_file *file = NULL;
    TRY(hostfirst_file_open(index, &file));
    const char *axis = "tp";
    uint64_t size = (uint64_t)world, position = (uint64_t)rank_;
    hostfirst_shard_mesh *mesh = NULL;
    hostfirst_shard_rules *rules = NULL;
    TRY(hostfirst_shard_mesh_new(&axis, &size, 1, &mesh));
    TRY(hostfirst_shard_rules_new(mesh, &rules));
    for (size_t i = 0; i < NRULES; i++) {
        char s[64] = "";
        for (unsigned d = 0; d < RULES[i].dim; d++) strcat(s, "_,");
        strcat(s, "tp");
        TRY(hostfirst_shard_rules_add(rules, RULES[i].pattern, s));
    }
    hostfirst_device cpu;
    TRY(hostfirst_device_parse("cpu", &cpu));
    hostfirst_shard_plan *plan = NULL;
    TRY(hostfirst_shard_plan_make(file, rules, &position, &cpu, 1, NULL, &plan));
    hostfirst_shard_result *res = NULL;
    TRY(hostfirst_shard_run(plan, NULL, &res));

    /* The save, by all ranks together. */
    hostfirst_writer_options o;
    TRY(hostfirst_writer_options_init(&o, sizeof o));
    o.rank = (uint32_t)rank_;
    o.world = (uint32_t)world;
    o.agree = mpi_agree;
    o.max_part_bytes = 16 << 10;
    hostfirst_writer *w = NULL;
    TRY(hostfirst_writer_open(out, &o, &w));
    size_t n = 0;
    TRY(hostfirst_shard_plan_count(plan, &n));
    for (size_t i = 0; i < n; i++) {
        hostfirst_shard_info si = {.struct_size = sizeof si};
        TRY(hostfirst_shard_plan_describe(plan, i, &si));
        hostfirst_view *v = NULL;
        TRY(hostfirst_file_view_at(file, si.tensor, &v));
        hostfirst_view_info vi = {.struct_size = sizeof vi};
        TRY(hostfirst_view_describe(v, &vi));
        /* Every rank declares every tensor with its global shape, in the same order. */
        TRY(hostfirst_writer_declare(w, si.name, vi.dtype, si.shape, si.rank));
        /* Its own part of a split tensor; a replicated one (no rule) from rank 0 only: each byte once. */
        if (si.rule >= 0 || rank_ == 0 || twice) {
            hostfirst_buffer *b = NULL;
            uint64_t read = 0;
            TRY(hostfirst_shard_result_get(res, i, &b, &read));
            TRY(hostfirst_writer_add_piece_buffer(w, si.name, si.start, si.rank, b));
            TRY(hostfirst_buffer_free(b)); /* the writer keeps it until finish */
        }
        TRY(hostfirst_view_free(v));
    }
    hostfirst_writer_info info = {.struct_size = sizeof info};
    if (twice) {
        hostfirst_status st = hostfirst_writer_finish(w, &info); /* collective: refused on every rank */
        hostfirst_status want = rank_ == 0 ? HOSTFIRST_STATUS_INVALID_ARGUMENT : HOSTFIRST_STATUS_CANCELLED;
        say("rank %d: refused: %s: %s\n", rank_, hostfirst_status_name(st), hostfirst_last_error_message());
        int bad = st != want, any = 0;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        TRY(hostfirst_writer_free(w));
        TRY(hostfirst_shard_result_free(res));
        TRY(hostfirst_shard_plan_free(plan));
        TRY(hostfirst_shard_rules_free(rules));
        TRY(hostfirst_shard_mesh_free(mesh));
        TRY(hostfirst_file_free(file));
        MPI_Finalize();
        return any;
    }
    TRY(hostfirst_writer_finish(w, &info)); /* collective */
    uint64_t mine = info.written, all = 0;
    MPI_Reduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    say("rank %d: wrote %" PRIu64 " bytes of the save\n", rank_, mine);

    int failures = 0;
    if (rank_ == 0) {
        /* Read OUT back (its index) and compare every tensor with the original. */
        hostfirst_file *saved = NULL;
        TRY(hostfirst_file_open(info.index ? info.index : out, &saved));
        size_t count = 0;
        TRY(hostfirst_file_tensor_count(file, &count));
        for (size_t t = 0; t < count; t++) {
            hostfirst_view *a = NULL, *b = NULL;
            TRY(hostfirst_file_view_at(file, t, &a));
            hostfirst_view_info ai = {.struct_size = sizeof ai};
            TRY(hostfirst_view_describe(a, &ai));
            TRY(hostfirst_file_view(saved, ai.name, &b));
            unsigned char *x = malloc(ai.nbytes + 1), *y = malloc(ai.nbytes + 1);
            TRY(hostfirst_view_copy(a, x, ai.nbytes, NULL));
            TRY(hostfirst_view_copy(b, y, ai.nbytes, NULL));
            if (memcmp(x, y, ai.nbytes)) {
                fprintf(stderr, "rank 0: MISMATCH: tensor '%s'\n", ai.name);
                failures++;
            }
            free(x);
            free(y);
            TRY(hostfirst_view_free(a));
            TRY(hostfirst_view_free(b));
        }
        say("rank 0: saved %" PRIu64 " tensors in %" PRIu64 " part files by %d ranks: %" PRIu64
               " bytes written for %" PRIu64 " bytes of files (%s); read back: %s\n",
               info.tensors, info.parts, world, all, info.file_bytes,
               all == info.file_bytes ? "nothing twice" : "MISMATCH", failures ? "MISMATCH" : "every tensor matches");
        failures += all != info.file_bytes;
        TRY(hostfirst_file_free(saved));
    }
    TRY(hostfirst_writer_free(w));
    TRY(hostfirst_shard_result_free(res));
    TRY(hostfirst_shard_plan_free(plan));
    TRY(hostfirst_shard_rules_free(rules));
    TRY(hostfirst_shard_mesh_free(mesh));
    TRY(hostfirst_file_free(file));
    MPI_Bcast(&failures, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failures ? 1 : 0;
}
