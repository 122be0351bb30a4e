/* C ABI of narrowed views and shard-on-read, on cpu: a strided narrow (describe, copy, DLPack with strides,
 * composition), a 2x4 mesh with P('x','y'), P(None,'y'), P('x') and a replicated tensor, every shard checked
 * against element-wise slicing of the whole tensor, then bad input with exact statuses (dimension out of
 * range, uneven split, position >= mesh size, NULLs, stale handles) and the handle count back to its
 * baseline. argv[1]: a scratch directory. */
#define _POSIX_C_SOURCE 200809L
#define HOSTFIRST_EXPERIMENTAL /* uses the experimental tier */
#include <stddef.h>
#include <stdint.h>
#include "check.h"

#define R 8
#define C 12

static char path[1200];
static float w[R * C];   /* w: F32 [8, 12], sharded x,y */
static uint16_t col[4 * C]; /* col: U16 [4, 12], sharded _,y */
static int32_t row[R * 3]; /* row: I32 [8, 3], sharded x */
static float bias[C];    /* bias: F32 [12], no rule: replicated */

static void write_model(void) {
    for (int i = 0; i < R * C; i++) w[i] = (float)i + 0.25f;
    for (int i = 0; i < 4 * C; i++) col[i] = (uint16_t)(1000 + i);
    for (int i = 0; i < R * 3; i++) row[i] = -i;
    for (int i = 0; i < C; i++) bias[i] = (float)i * 2.0f;
    size_t ow = 0, oc = ow + sizeof w, orow = oc + sizeof col, ob = orow + sizeof row, end = ob + sizeof bias;
    char hdr[640];
    snprintf(hdr, sizeof hdr,
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"col\":{\"dtype\":\"U16\",\"shape\":[4,%d],\"data_offsets\":[%zu,%zu]},"
             "\"row\":{\"dtype\":\"I32\",\"shape\":[%d,3],\"data_offsets\":[%zu,%zu]},"
             "\"bias\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}}",
             R, C, ow, oc, C, oc, orow, R, orow, ob, C, ob, end);
    const void *parts[] = {w, col, row, bias};
    const size_t sizes[] = {sizeof w, sizeof col, sizeof row, sizeof bias};
    write_safetensors(path, hdr, 4, parts, sizes);
}

/* A shard run's progress calls: their count, the last (done, total), and 1 in `monotonic` if done went down. */
struct progress_log {
    int calls, monotonic;
    uint64_t last_done, last_total;
};

static int32_t log_progress(uint64_t done, uint64_t total, void *user) {
    struct progress_log *l = user;
    if (l->calls > 0 && done < l->last_done) l->monotonic = 1;
    l->calls++;
    l->last_done = done;
    l->last_total = total;
    return 0;
}

/* The packed bytes of the 2-D block [r0, r0 + nr) x [c0, c0 + nc) of a row-major array of `cols` columns
 * with `elem`-byte elements. */
static void block(const void *base, size_t elem, uint64_t cols, uint64_t r0, uint64_t nr, uint64_t c0, uint64_t nc,
                  unsigned char *out) {
    const unsigned char *b = base;
    for (uint64_t r = 0; r < nr; r++)
        memcpy(out + r * nc * elem, b + ((r0 + r) * cols + c0) * elem, nc * elem);
}

static void check_buffer(hostfirst_buffer *buf, const unsigned char *want, uint64_t n) {
    hostfirst_buffer_info bi = {.struct_size = sizeof bi};
    CHECK_OK(hostfirst_buffer_describe(buf, &bi));
    CHECK(bi.nbytes == n && bi.device.kind == HOSTFIRST_DEVICE_CPU);
    unsigned char got[sizeof w];
    CHECK(n <= sizeof got);
    CHECK_OK(hostfirst_buffer_copy_to_host(buf, got, sizeof got));
    CHECK(memcmp(got, want, n) == 0);
}

static void narrow_views(hostfirst_file *file) {
    hostfirst_view *v = NULL, *cols = NULL, *both = NULL, *one = NULL;
    CHECK_OK(hostfirst_file_view(file, "w", &v));
    /* Columns 3..7 of w: strided. */
    CHECK_OK(hostfirst_view_narrow(v, 1, 3, 4, &cols));
    hostfirst_view_info vi = {.struct_size = sizeof vi};
    CHECK_OK(hostfirst_view_describe(cols, &vi));
    CHECK(vi.rank == 2 && vi.shape[0] == R && vi.shape[1] == 4 && vi.nbytes == R * 4 * sizeof(float));
    CHECK(vi.strides != NULL && vi.strides[0] == C && vi.strides[1] == 1);
    CHECK(((const float *)vi.data)[0] == w[3] && ((const float *)vi.data)[2 * C + 1] == w[2 * C + 4]);
    /* The 1.0 layout includes `strides`: a struct_size without it (the header before strides) is refused now,
     * nothing written (the rule of extensible structs: the minimum is the 1.0 layout, never part of a field). */
    hostfirst_view_info old;
    memset(&old, 0, sizeof old);
    old.struct_size = offsetof(hostfirst_view_info, strides);
    old.strides = (const uint64_t *)&old;
    CHECK_STATUS(hostfirst_view_describe(cols, &old), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(old.nbytes == 0 && old.strides == (const uint64_t *)&old);
    float got[R * 4];
    unsigned char want[sizeof w];
    CHECK_OK(hostfirst_view_copy(cols, got, sizeof got, NULL));
    block(w, sizeof(float), C, 0, R, 3, 4, want);
    CHECK(memcmp(got, want, sizeof got) == 0);
    /* A ranged read starting inside a run. */
    float part[5];
    CHECK_OK(hostfirst_view_read(cols, 2 * sizeof(float), part, sizeof part));
    CHECK(memcmp(part, want + 2 * sizeof(float), sizeof part) == 0);
    /* Narrow the narrow: rows 2..5 of the columns; then one row is contiguous again. */
    CHECK_OK(hostfirst_view_narrow(cols, 0, 2, 3, &both));
    float got2[3 * 4];
    CHECK_OK(hostfirst_view_copy(both, got2, sizeof got2, NULL));
    block(w, sizeof(float), C, 2, 3, 3, 4, want);
    CHECK(memcmp(got2, want, sizeof got2) == 0);
    CHECK_OK(hostfirst_view_narrow(both, 0, 1, 1, &one));
    CHECK_OK(hostfirst_view_describe(one, &vi));
    CHECK(vi.strides == NULL && ((const float *)vi.data)[0] == w[3 * C + 3]);
    /* A put of a strided view packs its runs. */
    hostfirst_device cpu;
    CHECK_OK(hostfirst_device_parse("cpu", &cpu));
    hostfirst_buffer *pb = NULL;
    CHECK_OK(hostfirst_put(both, &cpu, NULL, &pb, NULL));
    check_buffer(pb, want, sizeof got2);
    CHECK_OK(hostfirst_buffer_free(pb));
    /* DLPack: zero-copy with element strides. */
    hostfirst_dlpack_managed_tensor_versioned *t = NULL;
    CHECK_OK(hostfirst_view_to_dlpack(both, NULL, &t, NULL));
    CHECK(t->dl_tensor.strides != NULL && t->dl_tensor.strides[0] == C && t->dl_tensor.strides[1] == 1);
    CHECK(t->dl_tensor.shape[0] == 3 && t->dl_tensor.shape[1] == 4);
    CHECK(((const float *)t->dl_tensor.data)[C + 2] == w[3 * C + 5]);
    t->deleter(t);
    /* Bad narrows. */
    hostfirst_view *bad = NULL;
    CHECK_STATUS(hostfirst_view_narrow(v, 2, 0, 1, &bad), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_MSG("no dimension 2");
    CHECK_STATUS(hostfirst_view_narrow(v, 1, 10, 3, &bad), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_view_narrow(v, 1, UINT64_MAX, 2, &bad), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_view_narrow(NULL, 0, 0, 1, &bad), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_view_narrow(v, 0, 0, 1, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK(bad == NULL);
    CHECK_OK(hostfirst_view_free(one));
    CHECK_OK(hostfirst_view_free(both));
    CHECK_OK(hostfirst_view_free(cols));
    CHECK_STATUS(hostfirst_view_narrow(cols, 0, 0, 1, &bad), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_view_free(v));
}

int main(int argc, char **argv) {
    CHECK(argc > 1);
    snprintf(path, sizeof path, "%s/shard.safetensors", argv[1]);
    write_model();
    size_t base = live_handles();
    hostfirst_file *file = NULL;
    CHECK_OK(hostfirst_file_open(path, &file));
    narrow_views(file);

    /* Mesh (x: 2, y: 4). */
    const char *names[] = {"x", "y"};
    uint64_t sizes[] = {2, 4};
    hostfirst_shard_mesh *mesh = NULL;
    CHECK_OK(hostfirst_shard_mesh_new(names, sizes, 2, &mesh));
    uint64_t positions = 0, pos = 0, coords[2] = {1, 2};
    CHECK_OK(hostfirst_shard_mesh_positions(mesh, &positions));
    CHECK(positions == 8);
    CHECK_OK(hostfirst_shard_mesh_position(mesh, coords, 2, &pos));
    CHECK(pos == 6);
    coords[1] = 4;
    CHECK_STATUS(hostfirst_shard_mesh_position(mesh, coords, 2, &pos), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_shard_mesh_position(mesh, coords, 1, &pos), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    const char *dup[] = {"x", "x"};
    hostfirst_shard_mesh *bad_mesh = NULL;
    CHECK_STATUS(hostfirst_shard_mesh_new(dup, sizes, 2, &bad_mesh), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    uint64_t zero[] = {2, 0};
    CHECK_STATUS(hostfirst_shard_mesh_new(names, zero, 2, &bad_mesh), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_shard_mesh_new(NULL, sizes, 2, &bad_mesh), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_shard_mesh_new(names, sizes, 0, &bad_mesh), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(bad_mesh == NULL);

    /* Rules. */
    hostfirst_shard_rules *rules = NULL;
    CHECK_OK(hostfirst_shard_rules_new(mesh, &rules));
    CHECK_OK(hostfirst_shard_mesh_free(mesh)); /* the rules keep the mesh */
    CHECK_OK(hostfirst_shard_rules_add(rules, "w", "x,y"));
    CHECK_OK(hostfirst_shard_rules_add(rules, "col", "None,y"));
    CHECK_OK(hostfirst_shard_rules_add(rules, "row", "x"));
    CHECK_STATUS(hostfirst_shard_rules_add(rules, "z", "x,q"), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("no axis 'q'");
    CHECK_STATUS(hostfirst_shard_rules_add(rules, "z", "y,y"), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_shard_rules_add(rules, "", "x"), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_shard_rules_add(rules, "z", NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* Plan: this "process" owns every position, all on cpu. */
    hostfirst_device cpu;
    CHECK_OK(hostfirst_device_parse("cpu", &cpu));
    uint64_t owned[8];
    hostfirst_device devs[8];
    for (int i = 0; i < 8; i++) owned[i] = (uint64_t)(7 - i), devs[i] = cpu;
    hostfirst_shard_options opts;
    CHECK_OK(hostfirst_shard_options_init(&opts, sizeof opts));
    CHECK(opts.struct_size == sizeof opts && opts.max_over_read == 0.0);
    opts.threads = 2;
    hostfirst_shard_plan *plan = NULL;
    CHECK_OK(hostfirst_shard_plan_make(file, rules, owned, devs, 8, &opts, &plan));
    size_t n = 0;
    CHECK_OK(hostfirst_shard_plan_count(plan, &n));
    CHECK(n == 4 * 8);
    uint64_t shard_bytes = 0, read_bytes = 0;
    int fits = 0;
    CHECK_OK(hostfirst_shard_plan_totals(plan, &shard_bytes, &read_bytes, &fits));
    CHECK(fits == 1 && shard_bytes == sizeof w + 2 * sizeof col + 4 * sizeof row + 8 * sizeof bias);
    CHECK(read_bytes >= sizeof w + sizeof col + sizeof row + sizeof bias);

    hostfirst_shard_result *res = NULL;
    /* This run's progress through its run options: bytes placed, never decreasing, last done == total. */
    struct progress_log pl = {0, 0, 0, 0};
    hostfirst_shard_run_options ro;
    CHECK_OK(hostfirst_shard_run_options_init(&ro, sizeof ro));
    CHECK(ro.struct_size == sizeof ro && ro.progress == NULL && ro.user == NULL);
    ro.progress = log_progress;
    ro.user = &pl;
    CHECK_OK(hostfirst_shard_run(plan, &ro, &res));
    CHECK(pl.calls >= 1 && pl.monotonic == 0 && pl.last_done == shard_bytes && pl.last_total == shard_bytes);
    CHECK_OK(hostfirst_shard_result_free(res));
    res = NULL;
    CHECK_OK(hostfirst_shard_run(plan, NULL, &res));
    size_t rn = 0;
    CHECK_OK(hostfirst_shard_result_count(res, &rn));
    CHECK(rn == n);
    for (size_t i = 0; i < n; i++) {
        hostfirst_shard_info si = {.struct_size = sizeof si};
        CHECK_OK(hostfirst_shard_plan_describe(plan, i, &si));
        CHECK(si.position == owned[i % 8] && si.device.kind == HOSTFIRST_DEVICE_CPU && si.file != NULL);
        uint64_t x = si.position / 4, y = si.position % 4;
        unsigned char want[sizeof w];
        uint64_t nbytes = 0;
        if (!strcmp(si.name, "w")) { /* P('x','y'): rows by x, columns by y */
            CHECK(si.rule == 0 && si.rank == 2 && si.shape[1] == C && si.shard_shape[0] == R / 2);
            CHECK(si.start[0] == x * (R / 2) && si.start[1] == y * (C / 4) && si.runs == R / 2);
            block(w, sizeof(float), C, x * (R / 2), R / 2, y * (C / 4), C / 4, want);
            nbytes = (R / 2) * (C / 4) * sizeof(float);
        } else if (!strcmp(si.name, "col")) { /* P(None,'y') */
            block(col, sizeof(uint16_t), C, 0, 4, y * (C / 4), C / 4, want);
            nbytes = 4 * (C / 4) * sizeof(uint16_t);
        } else if (!strcmp(si.name, "row")) { /* P('x'): one part per x, read once per part */
            block(row, sizeof(int32_t), 3, x * (R / 2), R / 2, 0, 3, want);
            nbytes = (R / 2) * 3 * sizeof(int32_t);
            CHECK(si.runs == 1);
        } else { /* replicated */
            CHECK(!strcmp(si.name, "bias") && si.rule == -1 && si.shard_shape[0] == C);
            memcpy(want, bias, sizeof bias);
            nbytes = sizeof bias;
        }
        CHECK(si.nbytes == nbytes);
        hostfirst_buffer *buf = NULL;
        uint64_t got_read = 0;
        CHECK_OK(hostfirst_shard_result_get(res, i, &buf, &got_read));
        CHECK(si.copy_of == -1 ? got_read >= nbytes : got_read == 0);
        check_buffer(buf, want, nbytes);
        CHECK_OK(hostfirst_buffer_free(buf));
    }
    uint64_t total_read = 0;
    CHECK_OK(hostfirst_shard_result_bytes_read(res, &total_read));
    CHECK(total_read >= sizeof w + sizeof col + sizeof row + sizeof bias);
    CHECK_STATUS(hostfirst_shard_result_get(res, n, NULL, NULL), HOSTFIRST_STATUS_OUT_OF_RANGE);
    hostfirst_shard_info small = {.struct_size = 8};
    CHECK_STATUS(hostfirst_shard_plan_describe(plan, 0, &small), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    hostfirst_shard_info si = {.struct_size = sizeof si};
    CHECK_STATUS(hostfirst_shard_plan_describe(plan, n, &si), HOSTFIRST_STATUS_OUT_OF_RANGE);
    /* A buffer outlives its result. */
    hostfirst_buffer *kept = NULL;
    CHECK_OK(hostfirst_shard_result_get(res, 0, &kept, NULL));
    CHECK_OK(hostfirst_shard_result_free(res));
    CHECK_STATUS(hostfirst_shard_result_free(res), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_buffer_free(kept));

    /* Skip rules: only w and row are planned (row skipped by an earlier rule would not be). */
    hostfirst_shard_rules *some = NULL;
    hostfirst_shard_mesh *m2 = NULL;
    CHECK_OK(hostfirst_shard_mesh_new(names, sizes, 2, &m2));
    CHECK_OK(hostfirst_shard_rules_new(m2, &some));
    CHECK_OK(hostfirst_shard_rules_skip(some, "col"));
    CHECK_OK(hostfirst_shard_rules_add(some, "w", "x,y"));
    CHECK_OK(hostfirst_shard_rules_add(some, "row", "x"));
    CHECK_OK(hostfirst_shard_rules_skip(some, "*"));
    CHECK_STATUS(hostfirst_shard_rules_skip(some, ""), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_shard_rules_skip(some, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    hostfirst_shard_plan *sp = NULL;
    uint64_t six = 6;
    CHECK_OK(hostfirst_shard_plan_make(file, some, &six, &cpu, 1, NULL, &sp));
    size_t sn = 0;
    CHECK_OK(hostfirst_shard_plan_count(sp, &sn));
    CHECK(sn == 2);
    hostfirst_shard_info s0 = {.struct_size = sizeof s0}, s1 = {.struct_size = sizeof s1};
    CHECK_OK(hostfirst_shard_plan_describe(sp, 0, &s0));
    CHECK_OK(hostfirst_shard_plan_describe(sp, 1, &s1));
    CHECK(!strcmp(s0.name, "w") && s0.rule == 1 && !strcmp(s1.name, "row") && s1.rule == 2);
    CHECK_OK(hostfirst_shard_plan_free(sp));
    CHECK_OK(hostfirst_shard_rules_free(some));
    CHECK_OK(hostfirst_shard_mesh_free(m2));

    /* Bad plans: position >= mesh size (an MPI rank >= world), owned twice, uneven split, bad options. */
    hostfirst_shard_plan *bad = NULL;
    uint64_t eight = 8, twice[2] = {3, 3};
    hostfirst_device two[2] = {cpu, cpu};
    CHECK_STATUS(hostfirst_shard_plan_make(file, rules, &eight, &cpu, 1, NULL, &bad), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_MSG("mesh position 8");
    CHECK_STATUS(hostfirst_shard_plan_make(file, rules, twice, two, 2, NULL, &bad), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    hostfirst_shard_rules *uneven = NULL;
    hostfirst_shard_mesh *m3 = NULL;
    const char *r3[] = {"r"};
    uint64_t s3[] = {5};
    CHECK_OK(hostfirst_shard_mesh_new(r3, s3, 1, &m3));
    CHECK_OK(hostfirst_shard_rules_new(m3, &uneven));
    CHECK_OK(hostfirst_shard_rules_add(uneven, "w", "_,r"));
    uint64_t zero_pos = 0;
    CHECK_STATUS(hostfirst_shard_plan_make(file, uneven, &zero_pos, &cpu, 1, NULL, &bad),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("tensor 'w': dimension 1 has size 12, which mesh axis 'r' (5 parts) does not split evenly");
    hostfirst_device martian = {.kind = 42, .ordinal = 0};
    CHECK_STATUS(hostfirst_shard_plan_make(file, rules, &zero_pos, &martian, 1, NULL, &bad),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    opts.max_over_read = 0.5;
    CHECK_STATUS(hostfirst_shard_plan_make(file, rules, &zero_pos, &cpu, 1, &opts, &bad),
                 HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_shard_plan_make(file, rules, NULL, NULL, 1, NULL, &bad), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_shard_plan_make(file, rules, &zero_pos, &cpu, 1, NULL, NULL),
                 HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_shard_plan_make(file, (hostfirst_shard_rules *)file, &zero_pos, &cpu, 1, NULL, &bad),
                 HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK(bad == NULL);
    CHECK_OK(hostfirst_shard_rules_free(uneven));
    CHECK_OK(hostfirst_shard_mesh_free(m3));

    CHECK_OK(hostfirst_shard_plan_free(plan));
    CHECK_STATUS(hostfirst_shard_plan_free(plan), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_shard_run(plan, NULL, &res), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_shard_rules_free(rules));
    CHECK_STATUS(hostfirst_shard_rules_add(rules, "a", "x"), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_shard_mesh_free(mesh), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_shard_rules_free(NULL));
    CHECK_OK(hostfirst_shard_mesh_free(NULL));
    CHECK_OK(hostfirst_shard_plan_free(NULL));
    CHECK_OK(hostfirst_shard_result_free(NULL));
    CHECK_OK(hostfirst_file_free(file));
    CHECK(live_handles() == base);
    printf("test_shard: ok\n");
    return 0;
}
