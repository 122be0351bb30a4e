/* C ABI of placement rules, plans, whole-file loads and the batch gather, on cpu: the happy paths checked
 * against direct reads, then NULLs, bad arguments, stale handles and handle accounting. argv[1]: a scratch
 * directory. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include "check.h"

static char path[1200];

#define NTOK 5000
#define NW 24

/* tokens: U16[NTOK]; w: F32[4, 6]; b: U8[8]. */
static void write_model(void) {
    static uint16_t tok[NTOK];
    static float w[NW];
    unsigned char b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (int i = 0; i < NTOK; i++) tok[i] = (uint16_t)(i * 7919u);
    for (int i = 0; i < NW; i++) w[i] = (float)i * 0.5f;
    char hdr[512];
    snprintf(hdr, sizeof hdr,
             "{\"tokens\":{\"dtype\":\"U16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[4,6],\"data_offsets\":[%d,%d]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[%d,%d]}}",
             NTOK, 2 * NTOK, 2 * NTOK, 2 * NTOK + 4 * NW, 2 * NTOK + 4 * NW, 2 * NTOK + 4 * NW + 8);
    const void *parts[] = {tok, w, b};
    const size_t sizes[] = {sizeof tok, sizeof w, sizeof b};
    write_safetensors(path, hdr, 3, parts, sizes);
}

static int calls;
static uint64_t last_done, last_total;
static int32_t count_progress(uint64_t done, uint64_t total, void *user) {
    CHECK(user == &calls);
    CHECK(done >= last_done && done <= total);
    calls++;
    last_done = done;
    last_total = total;
    return 0;
}
static int32_t cancel_progress(uint64_t done, uint64_t total, void *user) {
    (void)done, (void)total, (void)user;
    return 1;
}

int main(int argc, char **argv) {
    CHECK(argc > 1);
    snprintf(path, sizeof path, "%s/rules.safetensors", argv[1]);
    write_model();
    size_t base = live_handles();

    hostfirst_file *file = NULL;
    CHECK_OK(hostfirst_file_open(path, &file));

    /* Rules. */
    hostfirst_rules *rules = NULL;
    CHECK_OK(hostfirst_rules_new(&rules));
    CHECK_OK(hostfirst_rules_add(rules, "tokens", "host"));
    CHECK_OK(hostfirst_rules_add_spec(rules, "w=cpu"));
    CHECK_OK(hostfirst_rules_add(rules, "[wx]*", "cuda:0")); /* never reached for w: first match wins */
    CHECK_STATUS(hostfirst_rules_add(rules, "x", "tpu"), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("tpu");
    CHECK_STATUS(hostfirst_rules_add(rules, "", "cpu"), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_rules_add(rules, "[ab", "cpu"), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_rules_add_spec(rules, "no-equals"), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_rules_add(rules, NULL, "cpu"), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_rules_add(NULL, "a", "cpu"), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_rules_new(NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* Plan: tokens host (rule 0), w cpu (rule 1), b host (no rule). */
    hostfirst_plan *plan = NULL;
    CHECK_OK(hostfirst_plan_make(file, rules, &plan));
    size_t nt = 0, nd = 0;
    CHECK_OK(hostfirst_plan_tensor_count(plan, &nt));
    CHECK(nt == 3);
    hostfirst_plan_tensor_info t = {.struct_size = sizeof t};
    CHECK_OK(hostfirst_plan_tensor(plan, 0, &t));
    CHECK(!strcmp(t.name, "tokens") && t.placement == HOSTFIRST_PLACEMENT_HOST && t.rule == 0 && t.nbytes == 2 * NTOK);
    CHECK_OK(hostfirst_plan_tensor(plan, 1, &t));
    CHECK(!strcmp(t.name, "w") && t.placement == HOSTFIRST_PLACEMENT_DEVICE && t.rule == 1);
    CHECK(t.device.kind == HOSTFIRST_DEVICE_CPU && t.nbytes == 4 * NW);
    CHECK_OK(hostfirst_plan_tensor(plan, 2, &t));
    CHECK(!strcmp(t.name, "b") && t.placement == HOSTFIRST_PLACEMENT_HOST && t.rule == -1);
    CHECK_STATUS(hostfirst_plan_tensor(plan, 3, &t), HOSTFIRST_STATUS_OUT_OF_RANGE);
    hostfirst_plan_tensor_info small = {.struct_size = 4};
    CHECK_STATUS(hostfirst_plan_tensor(plan, 0, &small), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_OK(hostfirst_plan_device_count(plan, &nd));
    CHECK(nd == 1);
    hostfirst_plan_device_info d = {.struct_size = sizeof d};
    CHECK_OK(hostfirst_plan_device(plan, 0, &d));
    CHECK(d.device.kind == HOSTFIRST_DEVICE_CPU && d.bytes == 4 * NW && d.tensors == 1 && d.fits == 1);
    CHECK(!strcmp(d.largest_name, "w") && d.largest_bytes == 4 * NW && d.usable > 0 && d.total >= d.usable);
    CHECK_STATUS(hostfirst_plan_device(plan, 1, &d), HOSTFIRST_STATUS_OUT_OF_RANGE);
    /* Rule 2 '[wx]*' places nothing: the only tensor it matches, w, is taken by rule 1 first. */
    size_t nu = 0;
    CHECK_OK(hostfirst_plan_unmatched_rule_count(plan, &nu));
    CHECK(nu == 1);
    hostfirst_plan_unmatched_rule_info u = {.struct_size = sizeof u};
    CHECK_OK(hostfirst_plan_unmatched_rule(plan, 0, &u));
    CHECK(u.struct_size == sizeof u && u.rule == 2 && u.shadowed_by == 1);
    CHECK(!strcmp(u.pattern, "[wx]*") && !strcmp(u.target, "cuda:0") && !strcmp(u.tensor, "w"));
    CHECK(strstr(u.message, "taken by rule 1") != NULL);
    CHECK_STATUS(hostfirst_plan_unmatched_rule(plan, 1, &u), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_plan_unmatched_rule(plan, 0, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_plan_unmatched_rule_count(plan, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_plan_unmatched_rule_count((hostfirst_plan *)file, &nu), HOSTFIRST_STATUS_INVALID_HANDLE);
    /* The typo of the issue: 'token' is not 'tokens'. Listed with the tensor it probably meant; in strict
     * mode the plan is refused with UNMATCHED_RULE. */
    hostfirst_rules *typo = NULL;
    hostfirst_plan *tp = NULL;
    CHECK_OK(hostfirst_rules_new(&typo));
    CHECK_OK(hostfirst_rules_add_spec(typo, "token=host"));
    CHECK_OK(hostfirst_rules_add_spec(typo, "*=cpu"));
    CHECK_OK(hostfirst_plan_make(file, typo, &tp));
    CHECK_OK(hostfirst_plan_unmatched_rule_count(tp, &nu));
    CHECK(nu == 1);
    CHECK_OK(hostfirst_plan_unmatched_rule(tp, 0, &u));
    CHECK(u.rule == 0 && u.shadowed_by == -1 && !strcmp(u.tensor, "tokens") && !strcmp(u.pattern, "token"));
    CHECK(strstr(u.message, "rule 0 'token=host' matches no tensor") != NULL);
    CHECK_OK(hostfirst_plan_free(tp));
    CHECK_OK(hostfirst_strict_thread_set(1));
    tp = NULL;
    CHECK_STATUS(hostfirst_plan_make(file, typo, &tp), HOSTFIRST_STATUS_UNMATCHED_RULE);
    CHECK(tp == NULL);
    CHECK_MSG("rule 0 'token=host' matches no tensor");
    CHECK_OK(hostfirst_strict_thread_set(0));
    CHECK_OK(hostfirst_rules_free(typo));

    CHECK_STATUS(hostfirst_plan_make(file, rules, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_plan_make(NULL, rules, &plan), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_plan_make(file, (hostfirst_rules *)file, &plan), HOSTFIRST_STATUS_INVALID_HANDLE);

    /* Strict mode refuses a "default" rule. */
    hostfirst_rules *dflt = NULL;
    CHECK_OK(hostfirst_rules_new(&dflt));
    CHECK_OK(hostfirst_rules_add(dflt, "*", "default"));
    CHECK_OK(hostfirst_strict_thread_set(1));
    hostfirst_plan *refused = NULL;
    CHECK_STATUS(hostfirst_plan_make(file, dflt, &refused), HOSTFIRST_STATUS_IMPLICIT_PLACEMENT);
    CHECK(refused == NULL);
    CHECK_OK(hostfirst_strict_thread_set(0));
    CHECK_OK(hostfirst_rules_free(dflt));

    /* Load: every tensor by name; buffers and views are new references. */
    hostfirst_load *load = NULL;
    CHECK_OK(hostfirst_load_run(file, plan, progress_options(count_progress, &calls), &load));
    CHECK(calls >= 1 && last_done == 4 * NW && last_total == 4 * NW);
    size_t n = 0;
    CHECK_OK(hostfirst_load_count(load, &n));
    CHECK(n == 3);
    hostfirst_loaded kind = 0;
    hostfirst_buffer *buf = NULL;
    hostfirst_view *view = NULL;
    CHECK_OK(hostfirst_load_get(load, "w", &kind, &buf, &view));
    CHECK(kind == HOSTFIRST_LOADED_BUFFER && buf != NULL && view == NULL);
    CHECK_OK(hostfirst_load_get(load, "tokens", &kind, NULL, &view));
    CHECK(kind == HOSTFIRST_LOADED_VIEW && view != NULL);
    hostfirst_view_info vi = {.struct_size = sizeof vi};
    CHECK_OK(hostfirst_view_describe(view, &vi));
    CHECK(vi.nbytes == 2 * NTOK);
    CHECK_OK(hostfirst_load_get(load, "b", &kind, NULL, NULL));
    CHECK(kind == HOSTFIRST_LOADED_VIEW);
    CHECK_STATUS(hostfirst_load_get(load, "nope", &kind, &buf, &view), HOSTFIRST_STATUS_NOT_FOUND);
    CHECK_STATUS(hostfirst_load_get(load, "w", NULL, NULL, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_load_run(file, plan, progress_options(cancel_progress, NULL), &load), HOSTFIRST_STATUS_CANCELLED);
    CHECK_OK(hostfirst_load_free(load));
    CHECK_STATUS(hostfirst_load_free(load), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_load_count(load, &n), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_buffer_free(buf)); /* the buffer outlived the load */

    /* Gather: [4, 16] u16 windows, checked against direct reads, reused. */
    hostfirst_device cpu;
    CHECK_OK(hostfirst_device_parse("cpu", &cpu));
    hostfirst_gather *g = NULL;
    CHECK_OK(hostfirst_gather_new(cpu, HOSTFIRST_DTYPE_U16, 4, 16, &g));
    uint64_t nbytes = 0;
    CHECK_OK(hostfirst_gather_nbytes(g, &nbytes));
    CHECK(nbytes == 4 * 16 * 2);
    hostfirst_buffer *gb = NULL, *gb2 = NULL;
    CHECK_OK(hostfirst_gather_batch(g, &gb));
    CHECK_OK(hostfirst_gather_batch(g, &gb2));
    CHECK(gb != gb2); /* two new references to the first batch */
    hostfirst_buffer_info i1 = {.struct_size = sizeof i1}, i2 = {.struct_size = sizeof i2};
    CHECK_OK(hostfirst_buffer_describe(gb, &i1));
    CHECK_OK(hostfirst_buffer_describe(gb2, &i2));
    CHECK(i1.address == i2.address && i1.nbytes == 4 * 16 * 2 && i1.rank == 2);
    CHECK_OK(hostfirst_buffer_free(gb2));
    uint64_t state = 42, offs[4];
    for (int step = 0; step < 5; step++) {
        CHECK_OK(hostfirst_random_offsets(&state, NTOK, 16, offs, 4));
        if (step == 0) offs[0] = NTOK - 16;
        CHECK_OK(hostfirst_gather_run(g, view, offs, 4, NULL));
        uint16_t got[64], want[16];
        CHECK_OK(hostfirst_gather_copy_to_host(g, got, sizeof got));
        for (int i = 0; i < 4; i++) {
            hostfirst_view *row = NULL;
            CHECK_OK(hostfirst_view_slice_rows(view, offs[i], offs[i] + 16, &row));
            CHECK_OK(hostfirst_view_copy(row, want, sizeof want, NULL));
            CHECK_OK(hostfirst_view_free(row));
            CHECK(memcmp(got + 16 * i, want, sizeof want) == 0);
        }
    }
    uint16_t tiny[4];
    CHECK_STATUS(hostfirst_gather_copy_to_host(g, tiny, sizeof tiny), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
    uint64_t bad[4] = {0, 1, NTOK - 15, 99999};
    CHECK_STATUS(hostfirst_gather_run(g, view, bad, 4, NULL), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_MSG("offset 2 (4985)");
    CHECK_STATUS(hostfirst_gather_run(g, view, offs, 3, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_run(g, view, NULL, 4, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_run(g, NULL, offs, 4, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    hostfirst_view *wv = NULL;
    CHECK_OK(hostfirst_file_view(file, "w", &wv));
    CHECK_STATUS(hostfirst_gather_run(g, wv, offs, 4, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT); /* 2-D */
    CHECK_STATUS(hostfirst_random_offsets(&state, 16, 16, offs, 4), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_random_offsets(NULL, 100, 16, offs, 4), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_new(cpu, HOSTFIRST_DTYPE_F4, 4, 16, &g), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_new(cpu, 999, 4, 16, &g), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_gather_new(cpu, HOSTFIRST_DTYPE_U16, 0, 16, &g), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_OK(hostfirst_gather_free(g));
    CHECK_OK(hostfirst_buffer_describe(gb, &i1)); /* a reference of its own: valid after the gather is freed */
    CHECK_OK(hostfirst_buffer_free(gb));
    CHECK_STATUS(hostfirst_gather_run(g, view, offs, 4, NULL), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_gather_free(g), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_gather_free(NULL));

    CHECK_OK(hostfirst_view_free(wv));
    CHECK_OK(hostfirst_view_free(view));
    CHECK_OK(hostfirst_plan_free(plan));
    CHECK_STATUS(hostfirst_plan_free(plan), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_STATUS(hostfirst_plan_tensor_count(plan, &n), HOSTFIRST_STATUS_INVALID_HANDLE);
    /* A plan's tensor names stay valid after its file is freed (they are the plan's until hostfirst_plan_free;
     * the plan shares them with the file, and under memcheck a name freed with the file would be caught). */
    hostfirst_file *other = NULL;
    hostfirst_plan *kept = NULL;
    CHECK_OK(hostfirst_file_open(path, &other));
    CHECK_OK(hostfirst_plan_make(other, rules, &kept));
    CHECK_OK(hostfirst_file_free(other));
    CHECK_OK(hostfirst_plan_tensor(kept, 1, &t));
    CHECK(!strcmp(t.name, "w") && t.rule == 1);
    CHECK_OK(hostfirst_plan_free(kept));

    CHECK_OK(hostfirst_rules_free(rules));
    CHECK_STATUS(hostfirst_rules_add(rules, "a", "cpu"), HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK_OK(hostfirst_rules_free(NULL));
    CHECK_OK(hostfirst_plan_free(NULL));
    CHECK_OK(hostfirst_load_free(NULL));
    CHECK_OK(hostfirst_file_free(file));
    CHECK(live_handles() == base);
    printf("test_rules: ok\n");
    return 0;
}
