/* Shard-on-read under MPI: every rank of `mpirun -np W mpi_shard FILE [DEVICE [REPORT_DIR [RAW]]]` loads only its
 * shards of every tensor of FILE, and rank 0 verifies every shard of every rank against a whole-file reference
 * through MPI_Gather of FNV-1a checksums. FILE is anything hostfirst_file_open opens (a sharded safetensors set's
 * index, a .safetensors file, a NumPy .npy file, an llm.c token shard, a Megatron dataset) or, with RAW
 * (DTYPE[@OFFSET], e.g. U16 or U16@1024), a headerless token file (nanoGPT's train.bin: one 1-D tensor named
 * "tokens", as many elements as the file holds after OFFSET).
 *
 * hostfirst does the reading; MPI does the communication (the library never links MPI). The mesh has one
 * axis, "tp", of size W; rank r owns position r. Rules split each weight along one dimension (column- and
 * row-parallel layers, the embedding by rows); tensors no rule matches are replicated on every rank.
 *
 * Token files split their tokens ("tokens"; a .npy file's "data") by rows; a Megatron index's other tensors
 * (sequence lengths, pointers, document indices) are replicated.
 *
 * If FILE does not exist, rank 0 first writes a small demo set there (two shard files and the index).
 * DEVICE: a device spec for every rank's shards (default cpu); `cuda` means cuda:(rank % CUDA devices).
 *
 *   mpicc -Wall -Wextra -Werror -Iinclude examples-c/mpi_shard.c -Ltarget/release -lhostfirst -o mpi_shard
 *   mpirun -np 4 ./mpi_shard /tmp/demo/model.safetensors.index.json
 *   mpirun -np 4 ./mpi_shard train.bin cpu "" U16 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <mpi.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "hostfirst.h"

/* Weight-name patterns and the dimension each splits across the ranks. */
static const struct {
    const char *pattern;
    unsigned dim;
} RULES[] = {{"*.attn.weight", 1}, {"*.mlp.weight", 0}, {"embed.*", 0}, {"tokens", 0}, {"data", 0}};
#define NRULES (sizeof RULES / sizeof RULES[0])

static int rank_ = 0;

/* With a report folder (the third argument, "" for none), each rank also writes its result lines there, one file
 * per rank (report-<rank>.txt), errors included: a test reads them without parsing mpirun's output, which MPI
 * itself writes to as well. */
static const char *report_dir;
static void report(const char *fmt, ...) {
    if (!report_dir || !*report_dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/report-%d.txt", report_dir, rank_);
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "rank %d: cannot write %s\n", rank_, path);
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static void die(const char *what, hostfirst_status st) {
    fprintf(stderr, "rank %d: %s: %s: %s\n", rank_, what, hostfirst_status_name(st), hostfirst_last_error_message());
    report("error: %s: %s: %s\n", what, hostfirst_status_name(st), hostfirst_last_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
#define TRY(call)                                  \
    do {                                           \
        hostfirst_status st_ = (call);             \
        if (st_ != HOSTFIRST_STATUS_OK) die(#call, st_); \
    } while (0)

static uint64_t fnv1a64(const unsigned char *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* ---- the demo set (rank 0, only when INDEX does not exist) ---- */

struct demo_tensor {
    const char *name, *dtype;
    unsigned esize, rank;
    uint64_t shape[2];
};
static const struct demo_tensor DEMO1[] = {
    {"embed.weight", "F32", 4, 2, {512, 96}},
    {"layer.0.attn.weight", "BF16", 2, 2, {96, 384}},
    {"layer.0.attn.bias", "F32", 4, 1, {384, 0}},
};
static const struct demo_tensor DEMO2[] = {
    {"layer.0.mlp.weight", "F16", 2, 2, {384, 96}},
    {"layer.0.norm", "F32", 4, 1, {96, 0}},
    {"tokens", "U16", 2, 1, {4096, 0}},
};

static int write_shard(const char *path, const struct demo_tensor *t, size_t n, unsigned salt) {
    char hdr[2048];
    size_t at = 0, off = 0;
    at += (size_t)snprintf(hdr + at, sizeof hdr - at, "{");
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = t[i].esize * t[i].shape[0] * (t[i].rank == 2 ? t[i].shape[1] : 1);
        if (t[i].rank == 2)
            at += (size_t)snprintf(hdr + at, sizeof hdr - at,
                                   "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRIu64 ",%" PRIu64
                                   "],\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", t[i].name, t[i].dtype, t[i].shape[0], t[i].shape[1], off,
                                   off + (size_t)bytes);
        else
            at += (size_t)snprintf(hdr + at, sizeof hdr - at,
                                   "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRIu64 "],\"data_offsets\":[%zu,%zu]}",
                                   i ? "," : "", t[i].name, t[i].dtype, t[i].shape[0], off, off + (size_t)bytes);
        off += (size_t)bytes;
    }
    at += (size_t)snprintf(hdr + at, sizeof hdr - at, "}");
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)at >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, at, f);
    for (size_t i = 0; i < off; i++) fputc((int)((i * 2654435761u + salt) >> 11) & 0xff, f);
    return fclose(f);
}

static void write_demo(const char *index) {
    char dir[1024], p1[1200], p2[1200];
    snprintf(dir, sizeof dir, "%s", index);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
    mkdir(dir, 0755);
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    FILE *f = NULL;
    if (write_shard(p1, DEMO1, 3, 1) || write_shard(p2, DEMO2, 3, 2) || !(f = fopen(index, "w"))) {
        fprintf(stderr, "rank 0: cannot write the demo set next to %s\n", index);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fprintf(f, "{\"metadata\":{},\"weight_map\":{");
    for (size_t i = 0; i < 3; i++) fprintf(f, "\"%s\":\"model-00001-of-00002.safetensors\",", DEMO1[i].name);
    for (size_t i = 0; i < 3; i++) fprintf(f, "%s\"%s\":\"model-00002-of-00002.safetensors\"", i ? "," : "", DEMO2[i].name);
    fprintf(f, "}}\n");
    fclose(f);
    printf("rank 0: wrote a demo set at %s\n", index);
    report("wrote a demo set\n");
}

/* ---- the reference: a block of a whole C-order tensor, element by element ---- */

static void copy_block(const unsigned char *src, const uint64_t *shape, const uint64_t *start, const uint64_t *len,
                       unsigned rank, uint64_t esize, unsigned char **out) {
    if (rank == 0) {
        memcpy(*out, src, esize);
        *out += esize;
        return;
    }
    uint64_t inner = esize;
    for (unsigned d = 1; d < rank; d++) inner *= shape[d];
    for (uint64_t i = start[0]; i < start[0] + len[0]; i++)
        copy_block(src + i * inner, shape + 1, start + 1, len + 1, rank - 1, esize, out);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 2) {
        if (rank_ == 0) fprintf(stderr, "usage: mpirun -np W %s FILE [DEVICE [REPORT_DIR [DTYPE[@OFFSET]]]]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *index = argv[1], *raw = argc > 4 ? argv[4] : NULL;
    report_dir = argc > 3 ? argv[3] : NULL;
    struct stat sb;
    if (rank_ == 0 && !raw && stat(index, &sb) != 0) write_demo(index);
    MPI_Barrier(MPI_COMM_WORLD);

    /* This rank's device. */
    hostfirst_device dev;
    const char *spec = argc > 2 ? argv[2] : "cpu";
    if (!strcmp(spec, "cuda")) {
        size_t n = 0;
        TRY(hostfirst_devices(NULL, 0, &n)); /* counts every device, cpu included */
        hostfirst_device *all = calloc(n ? n : 1, sizeof *all);
        TRY(hostfirst_devices(all, n, &n));
        int cudas = 0;
        for (size_t i = 0; i < n; i++) cudas += all[i].kind == HOSTFIRST_DEVICE_CUDA;
        free(all);
        char s[32];
        snprintf(s, sizeof s, "cuda:%d", cudas ? rank_ % cudas : 0);
        TRY(hostfirst_device_parse(s, &dev));
    } else {
        TRY(hostfirst_device_parse(spec, &dev));
    }

    /* The mesh (tp: world), the rules, and this rank's plan: position = rank. */
    hostfirst_file *file = NULL;
    if (raw) {
        /* DTYPE[@OFFSET]: one 1-D tensor "tokens", its length inferred from the file's size. */
        char dtype_name[32];
        unsigned long long offset = 0;
        const char *at = strchr(raw, '@');
        size_t len = at ? (size_t)(at - raw) : strlen(raw);
        if (len >= sizeof dtype_name || (at && sscanf(at + 1, "%llu", &offset) != 1)) {
            if (rank_ == 0) fprintf(stderr, "rank 0: '%s' is not DTYPE[@OFFSET]\n", raw);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        memcpy(dtype_name, raw, len);
        dtype_name[len] = '\0';
        hostfirst_dtype dtype;
        TRY(hostfirst_dtype_from_name(dtype_name, &dtype));
        uint64_t shape = HOSTFIRST_FILE_RAW_INFER;
        TRY(hostfirst_file_open_raw(index, dtype, &shape, 1, (uint64_t)offset, "tokens", &file));
    } else {
        TRY(hostfirst_file_open(index, &file));
    }
    hostfirst_format format;
    TRY(hostfirst_file_format(file, &format));
    if (rank_ == 0) report("format %s\n", hostfirst_format_name(format));
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
    hostfirst_shard_plan *plan = NULL;
    TRY(hostfirst_shard_plan_make(file, rules, &position, &dev, 1, NULL, &plan));
    hostfirst_shard_result *res = NULL;
    TRY(hostfirst_shard_run(plan, NULL, &res));

    /* Checksum of every shard (one per tensor: this rank owns one position). */
    size_t n = 0;
    TRY(hostfirst_shard_plan_count(plan, &n));
    uint64_t *sums = calloc(n ? n : 1, sizeof *sums);
    uint64_t mine[2] = {0, 0}; /* shard bytes, file bytes read */
    for (size_t i = 0; i < n; i++) {
        hostfirst_shard_info si = {.struct_size = sizeof si};
        TRY(hostfirst_shard_plan_describe(plan, i, &si));
        hostfirst_buffer *buf = NULL;
        uint64_t read = 0;
        TRY(hostfirst_shard_result_get(res, i, &buf, &read));
        unsigned char *bytes = malloc(si.nbytes ? si.nbytes : 1);
        TRY(hostfirst_buffer_copy_to_host(buf, bytes, si.nbytes));
        sums[i] = fnv1a64(bytes, si.nbytes);
        free(bytes);
        TRY(hostfirst_buffer_free(buf));
        mine[0] += si.nbytes;
        mine[1] += read;
        /* Where its part starts in the whole tensor (the split dimension's start; 0 when replicated). */
        uint64_t start = si.rule >= 0 ? si.start[RULES[si.rule].dim] : 0;
        report("shard %s: start %" PRIu64 ", %" PRIu64 " bytes, %" PRIu64 " bytes read\n", si.name, start, si.nbytes,
               read);
    }
    printf("rank %d on %s: %zu shards, %" PRIu64 " bytes, %" PRIu64 " bytes read from the files\n", rank_, spec, n,
           mine[0], mine[1]);
    report("rank %d on %s: %zu shards, %" PRIu64 " bytes, %" PRIu64 " bytes read\n", rank_, spec, n, mine[0], mine[1]);
    fflush(stdout);

    uint64_t *all = rank_ == 0 ? calloc(n * (size_t)world + 1, sizeof *all) : NULL;
    MPI_Gather(sums, (int)n, MPI_UINT64_T, all, (int)n, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    uint64_t totals[2] = {0, 0};
    MPI_Reduce(mine, totals, 2, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);

    int failures = 0;
    if (rank_ == 0) {
        /* The reference: each whole tensor read once, each rank's block sliced out element by element. */
        uint64_t data_bytes = 0;
        TRY(hostfirst_file_data_bytes(file, &data_bytes));
        for (size_t t = 0; t < n; t++) {
            hostfirst_view *v = NULL;
            TRY(hostfirst_file_view_at(file, t, &v));
            hostfirst_view_info vi = {.struct_size = sizeof vi};
            TRY(hostfirst_view_describe(v, &vi));
            unsigned char *whole = malloc(vi.nbytes ? vi.nbytes : 1), *part = malloc(vi.nbytes ? vi.nbytes : 1);
            TRY(hostfirst_view_copy(v, whole, vi.nbytes, NULL));
            uint64_t esize = hostfirst_dtype_bits(vi.dtype) / 8;
            for (int p = 0; p < world; p++) {
                /* Which dimension this tensor splits: the first rule whose pattern matches (the plan's rule). */
                hostfirst_shard_info si = {.struct_size = sizeof si};
                TRY(hostfirst_shard_plan_describe(plan, t, &si));
                uint64_t start[32] = {0}, len[32];
                for (unsigned d = 0; d < vi.rank; d++) len[d] = vi.shape[d];
                if (si.rule >= 0) {
                    unsigned d = RULES[si.rule].dim;
                    len[d] = vi.shape[d] / (uint64_t)world;
                    start[d] = (uint64_t)p * len[d];
                }
                unsigned char *out = part;
                int empty = 0;
                for (unsigned d = 0; d < vi.rank; d++) empty |= len[d] == 0;
                if (!empty) copy_block(whole, vi.shape, start, len, vi.rank, esize, &out);
                uint64_t want = fnv1a64(part, (uint64_t)(out - part));
                if (all[(size_t)p * n + t] != want) {
                    fprintf(stderr, "rank 0: MISMATCH: tensor '%s' on rank %d: %016" PRIx64 " != %016" PRIx64 "\n",
                            vi.name, p, all[(size_t)p * n + t], want);
                    failures++;
                }
            }
            free(whole);
            free(part);
            TRY(hostfirst_view_free(v));
        }
        printf("rank 0: %zu tensors x %d ranks verified against the whole file: %s; "
               "all ranks read %" PRIu64 " bytes for %" PRIu64 " bytes of shards (the files hold %" PRIu64 ")\n",
               n, world, failures ? "MISMATCH" : "every checksum matches", totals[1], totals[0], data_bytes);
        report("%zu tensors x %d ranks verified: %s\n", n, world, failures ? "MISMATCH" : "every checksum matches");
        free(all);
    }
    free(sums);
    TRY(hostfirst_shard_result_free(res));
    TRY(hostfirst_shard_plan_free(plan));
    TRY(hostfirst_shard_rules_free(rules));
    TRY(hostfirst_shard_mesh_free(mesh));
    TRY(hostfirst_file_free(file));
    MPI_Bcast(&failures, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failures ? 1 : 0;
}
