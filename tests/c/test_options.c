/* Options structs and their inits: the one rule of extensible structs (issues 24 and 37). Every
 * hostfirst_*_options_init(out, struct_size) is called as a program built against the struct's 1.0 layout would
 * call it (its struct, then a canary): nothing is written past struct_size, the fields within it are the
 * defaults (all zero), struct_size is the caller's; a newer, larger struct gets zeros past this version's
 * fields (fields it does not know: their zero is their default) and nothing past its struct_size; a
 * struct_size below the 1.0 layout or above 4096 is INVALID_ARGUMENT naming the struct and the sizes, nothing
 * written. Every function reading options is given them at the end of readable memory (an inaccessible page
 * right after) with struct_size = the 1.0 layout's size: it runs and reads nothing past the struct; too small a
 * struct_size is INVALID_ARGUMENT there too. A newer caller's struct with a non-zero byte past what the library
 * knows is INVALID_ARGUMENT naming the struct and the offset (the Linux copy_struct_from_user rule); with those
 * bytes zero it is accepted, and a zero-filled struct with struct_size set means the defaults everywhere
 * (DLPack included: the versioned form). Handle count back to its baseline. argv[1]: tests/fixtures. */
#define _DEFAULT_SOURCE
#define HOSTFIRST_EXPERIMENTAL /* uses the experimental tier */
#include <stddef.h>
#include <stdint.h>
#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#else
#include <sys/mman.h>
#include <unistd.h>
#endif
#include "check.h"

#define CANARY 0xA5
/* The end of field f of T: the size of the struct's first version when f is its last field. */
#define END_OF(T, f) (offsetof(T, f) + sizeof(((T *)0)->f))
#define ROUND8(n) (((n) + 7u) & ~(size_t)7u)

static void check_msg_sizes(const char *param, const char *type, size_t given, size_t v1) {
    char want[200];
    snprintf(want, sizeof want, "%s: struct_size %zu is smaller than %s (%zu bytes at least", param, given, type,
             v1);
    CHECK_MSG(want);
}

/* The init of T whose 1.0 layout ends with field `last`. */
#define CHECK_INIT(T, last)                                                                                \
    do {                                                                                                   \
        const size_t v1 = END_OF(T, last);                                                                 \
        union {                                                                                            \
            T t;                                                                                           \
            unsigned char b[sizeof(T) + 64];                                                               \
        } full, old, big, small;                                                                           \
        memset(&full, CANARY, sizeof full);                                                                \
        CHECK_OK(T##_init(&full.t, sizeof full.t));                                                        \
        CHECK(full.t.struct_size == sizeof(T));                                                            \
        for (size_t i = sizeof(T); i < sizeof full; i++) CHECK(full.b[i] == CANARY);                       \
        /* An older program: its struct is the first version's fields, then memory it does not own. */    \
        memset(&old, CANARY, sizeof old);                                                                  \
        CHECK_OK(T##_init(&old.t, v1));                                                                    \
        CHECK(old.t.struct_size == v1);                                                                    \
        CHECK(memcmp(old.b + sizeof(size_t), full.b + sizeof(size_t), v1 - sizeof(size_t)) == 0);          \
        for (size_t i = v1; i < sizeof old; i++) CHECK(old.b[i] == CANARY);                                \
        /* A newer program: a larger struct; this version's fields, zeros past them, nothing past it. */   \
        memset(&big, CANARY, sizeof big);                                                                  \
        CHECK_OK(T##_init(&big.t, sizeof(T) + 32));                                                        \
        CHECK(big.t.struct_size == sizeof(T) + 32);                                                        \
        CHECK(memcmp(big.b + sizeof(size_t), full.b + sizeof(size_t), sizeof(T) - sizeof(size_t)) == 0);  \
        for (size_t i = sizeof(T); i < sizeof(T) + 32; i++) CHECK(big.b[i] == 0);                          \
        for (size_t i = sizeof(T) + 32; i < sizeof big; i++) CHECK(big.b[i] == CANARY);                    \
        /* Smaller than any version: refused, nothing written. */                                          \
        memset(&small, CANARY, sizeof small);                                                              \
        CHECK_STATUS(T##_init(&small.t, v1 - 1), HOSTFIRST_STATUS_INVALID_ARGUMENT);                       \
        check_msg_sizes("out", #T, v1 - 1, v1);                                                            \
        CHECK_STATUS(T##_init(&small.t, 0), HOSTFIRST_STATUS_INVALID_ARGUMENT);                            \
        CHECK_STATUS(T##_init(&small.t, 4097), HOSTFIRST_STATUS_INVALID_ARGUMENT);                         \
        CHECK_MSG("struct_size 4097 is larger than any " #T);                                              \
        CHECK_STATUS(T##_init(&small.t, SIZE_MAX), HOSTFIRST_STATUS_INVALID_ARGUMENT);                     \
        for (size_t i = 0; i < sizeof small; i++) CHECK(small.b[i] == CANARY);                             \
        CHECK_STATUS(T##_init(NULL, sizeof(T)), HOSTFIRST_STATUS_NULL_ARGUMENT);                           \
    } while (0)

/* The literal case: a program's struct with a canary right after it (the first version is this one). */
struct old_put {
    hostfirst_put_options opts;
    uint64_t canary;
};

static unsigned char *guarded; /* two pages, the second inaccessible */
static size_t page;

/* Two pages, the second inaccessible: mmap + mprotect, VirtualAlloc + VirtualProtect on Windows. */
static unsigned char *guarded_pages(size_t *pg) {
#ifdef _WIN32
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    *pg = si.dwPageSize;
    unsigned char *p = VirtualAlloc(NULL, 2 * *pg, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    DWORD old = 0;
    if (p == NULL || !VirtualProtect(p + *pg, *pg, PAGE_NOACCESS, &old)) return NULL;
#else
    *pg = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p = mmap(NULL, 2 * *pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p + *pg, *pg, PROT_NONE) != 0) return NULL;
#endif
    return p;
}

static int free_guarded(unsigned char *p, size_t pg) {
#ifdef _WIN32
    (void)pg;
    return VirtualFree(p, 0, MEM_RELEASE) ? 0 : -1;
#else
    return munmap(p, 2 * pg);
#endif
}

/* An options struct of T with struct_size = its first version's size, ending at the inaccessible page (at
 * the first 8-byte boundary at or past the end of its last field), filled by its init. */
static void *at_guard(size_t v1) { return guarded + page - ROUND8(v1); }
#define AT_GUARD(T, last, p)                 \
    T *p = at_guard(END_OF(T, last));        \
    CHECK_OK(T##_init(p, END_OF(T, last)))

/* A program built against a newer header: its struct is larger than the library's. Zero bytes past what the
 * library knows are accepted (fields it does not know, at their default); a non-zero byte there is refused
 * with INVALID_ARGUMENT naming the struct and the byte's offset, and nothing is done. */
#define NEWER(T, var)                                                                                      \
    union {                                                                                                \
        T t;                                                                                               \
        unsigned char b[sizeof(T) + 16];                                                                   \
    } var;                                                                                                 \
    memset(&var, 0, sizeof var);                                                                           \
    var.t.struct_size = sizeof var

static void check_unknown_byte(const char *param, const char *type, size_t offset, size_t known) {
    char want[200];
    snprintf(want, sizeof want, "%s: byte %zu of %s is 0xef, past the %zu bytes", param, offset, type, known);
    CHECK_MSG(want);
}

static void newer_callers(hostfirst_view *v, hostfirst_file *f, hostfirst_plan *plan, hostfirst_shard_plan *sp) {
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_buffer *b = NULL;
    {
        NEWER(hostfirst_put_options, po);
        CHECK_OK(hostfirst_put(v, &cpu, &po.t, &b, NULL)); /* zero-filled: the defaults */
        CHECK_OK(hostfirst_buffer_free(b));
        b = NULL;
        po.b[sizeof(hostfirst_put_options) + 8] = 0xef; /* the 0xDEADBEEF, one byte of it */
        CHECK_STATUS(hostfirst_put(v, &cpu, &po.t, &b, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
        check_unknown_byte("opts", "hostfirst_put_options", sizeof(hostfirst_put_options) + 8, sizeof(hostfirst_put_options));
        hostfirst_put_op *op = NULL;
        CHECK_STATUS(hostfirst_put_start(v, &cpu, &po.t, &op), HOSTFIRST_STATUS_INVALID_ARGUMENT);
        CHECK(b == NULL && op == NULL);
        po.t.struct_size = SIZE_MAX;
        CHECK_STATUS(hostfirst_put(v, &cpu, &po.t, &b, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
        CHECK_MSG("is larger than any hostfirst_put_options (4096 bytes at most");
    }
    {
        NEWER(hostfirst_load_options, lo);
        hostfirst_load *load = NULL;
        CHECK_OK(hostfirst_load_run(f, plan, &lo.t, &load));
        CHECK_OK(hostfirst_load_free(load));
        load = NULL;
        lo.b[sizeof(hostfirst_load_options) + 15] = 0xef;
        CHECK_STATUS(hostfirst_load_run(f, plan, &lo.t, &load), HOSTFIRST_STATUS_INVALID_ARGUMENT);
        check_unknown_byte("opts", "hostfirst_load_options", sizeof(hostfirst_load_options) + 15, sizeof(hostfirst_load_options));
        CHECK(load == NULL);
    }
    {
        /* Zero-filled DLPack options are the defaults too: the versioned form (before 1.0 they meant the
         * legacy form and failed with NULL_ARGUMENT naming out_legacy). */
        NEWER(hostfirst_dlpack_options, d);
        hostfirst_dlpack_managed_tensor_versioned *t = NULL;
        CHECK_OK(hostfirst_view_to_dlpack(v, &d.t, &t, NULL));
        CHECK(t != NULL && t->version.major == HOSTFIRST_DLPACK_MAJOR_VERSION);
        t->deleter(t);
        t = NULL;
        d.b[sizeof(hostfirst_dlpack_options)] = 0xef;
        CHECK_STATUS(hostfirst_view_to_dlpack(v, &d.t, &t, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
        check_unknown_byte("opts", "hostfirst_dlpack_options", sizeof(hostfirst_dlpack_options), sizeof(hostfirst_dlpack_options));
        CHECK(t == NULL);
        hostfirst_dlpack_options zero = {.struct_size = sizeof zero};
        CHECK_OK(hostfirst_view_to_dlpack(v, &zero, &t, NULL));
        t->deleter(t);
    }
    {
        NEWER(hostfirst_shard_run_options, ro);
        hostfirst_shard_result *res = NULL;
        CHECK_OK(hostfirst_shard_run(sp, &ro.t, &res));
        CHECK_OK(hostfirst_shard_result_free(res));
        res = NULL;
        ro.b[sizeof(hostfirst_shard_run_options) + 1] = 0xef;
        CHECK_STATUS(hostfirst_shard_run(sp, &ro.t, &res), HOSTFIRST_STATUS_INVALID_ARGUMENT);
        check_unknown_byte("opts", "hostfirst_shard_run_options", sizeof(hostfirst_shard_run_options) + 1, sizeof(hostfirst_shard_run_options));
        CHECK(res == NULL);
    }
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    size_t base = live_handles();

    CHECK_INIT(hostfirst_put_options, copy_on_write);
    CHECK_INIT(hostfirst_load_options, user);
    CHECK_INIT(hostfirst_dlpack_options, legacy);
    CHECK_INIT(hostfirst_shard_options, staging_bytes);
    CHECK_INIT(hostfirst_shard_run_options, user);

    struct old_put op;
    op.canary = 0x0123456789abcdefULL;
    CHECK_OK(hostfirst_put_options_init(&op.opts, sizeof op.opts));
    CHECK(op.canary == 0x0123456789abcdefULL && op.opts.struct_size == sizeof op.opts && op.opts.threads == 0);

    /* The readers: options at the end of readable memory. */
    guarded = guarded_pages(&page);
    CHECK(guarded != NULL);

    char path[1100];
    snprintf(path, sizeof path, "%s/tokens.safetensors", argv[1]);
    hostfirst_file *f = NULL;
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_open(path, &f));
    CHECK_OK(hostfirst_file_view(f, "tokens", &v));
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};

    /* put */
    AT_GUARD(hostfirst_put_options, copy_on_write, po);
    po->threads = 2;
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_put(v, &cpu, po, &b, NULL));
    CHECK_OK(hostfirst_buffer_free(b));
    b = NULL;
    po->struct_size = END_OF(hostfirst_put_options, copy_on_write) - 1;
    CHECK_STATUS(hostfirst_put(v, &cpu, po, &b, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    check_msg_sizes("opts", "hostfirst_put_options", po->struct_size, END_OF(hostfirst_put_options, copy_on_write));
    po->struct_size = sizeof(size_t); /* sizeof a pointer, a classic slip: refused, not read as "all defaults" */
    CHECK_STATUS(hostfirst_put(v, &cpu, po, &b, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    hostfirst_put_op *pop = NULL;
    CHECK_STATUS(hostfirst_put_start(v, &cpu, po, &pop), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(b == NULL && pop == NULL);

    /* load */
    hostfirst_rules *rules = NULL;
    hostfirst_plan *plan = NULL;
    hostfirst_load *load = NULL;
    CHECK_OK(hostfirst_rules_new(&rules));
    CHECK_OK(hostfirst_rules_add_spec(rules, "*=cpu"));
    CHECK_OK(hostfirst_plan_make(f, rules, &plan));
    AT_GUARD(hostfirst_load_options, user, lo);
    CHECK_OK(hostfirst_load_run(f, plan, lo, &load));
    CHECK_OK(hostfirst_load_free(load));
    load = NULL;
    lo->struct_size = END_OF(hostfirst_load_options, user) - 1;
    CHECK_STATUS(hostfirst_load_run(f, plan, lo, &load), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    check_msg_sizes("opts", "hostfirst_load_options", lo->struct_size, END_OF(hostfirst_load_options, user));
    CHECK(load == NULL);

    /* DLPack */
    AT_GUARD(hostfirst_dlpack_options, legacy, d);
    hostfirst_dlpack_managed_tensor_versioned *t = NULL;
    CHECK_OK(hostfirst_view_to_dlpack(v, d, &t, NULL));
    CHECK(t != NULL && t->version.major == HOSTFIRST_DLPACK_MAJOR_VERSION);
    t->deleter(t);
    t = NULL;
    d->struct_size = END_OF(hostfirst_dlpack_options, legacy) - 1;
    CHECK_STATUS(hostfirst_view_to_dlpack(v, d, &t, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    check_msg_sizes("opts", "hostfirst_dlpack_options", d->struct_size, END_OF(hostfirst_dlpack_options, legacy));
    CHECK(t == NULL);

    /* shard plan and run */
    const char *axes[] = {"x"};
    uint64_t sizes[] = {2}, positions[] = {1};
    hostfirst_shard_mesh *mesh = NULL;
    hostfirst_shard_rules *sr = NULL;
    hostfirst_shard_plan *sp = NULL;
    hostfirst_shard_result *res = NULL;
    CHECK_OK(hostfirst_shard_mesh_new(axes, sizes, 1, &mesh));
    CHECK_OK(hostfirst_shard_rules_new(mesh, &sr));
    CHECK_OK(hostfirst_shard_rules_add(sr, "tokens", "x"));
    AT_GUARD(hostfirst_shard_options, staging_bytes, so);
    CHECK_OK(hostfirst_shard_plan_make(f, sr, positions, &cpu, 1, so, &sp));
    so->struct_size = END_OF(hostfirst_shard_options, staging_bytes) - 1;
    hostfirst_shard_plan *sp2 = NULL;
    CHECK_STATUS(hostfirst_shard_plan_make(f, sr, positions, &cpu, 1, so, &sp2), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    check_msg_sizes("opts", "hostfirst_shard_options", so->struct_size,
                    END_OF(hostfirst_shard_options, staging_bytes));
    CHECK(sp2 == NULL);
    AT_GUARD(hostfirst_shard_run_options, user, ro);
    CHECK_OK(hostfirst_shard_run(sp, ro, &res));
    uint64_t read = 0;
    CHECK_OK(hostfirst_shard_result_bytes_read(res, &read));
    CHECK(read == 4096);
    CHECK_OK(hostfirst_shard_result_free(res));
    res = NULL;
    ro->struct_size = END_OF(hostfirst_shard_run_options, user) - 1;
    CHECK_STATUS(hostfirst_shard_run(sp, ro, &res), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    check_msg_sizes("opts", "hostfirst_shard_run_options", ro->struct_size, END_OF(hostfirst_shard_run_options, user));
    CHECK(res == NULL);
    CHECK_OK(hostfirst_shard_run(sp, NULL, &res)); /* NULL: the defaults */
    CHECK_OK(hostfirst_shard_result_free(res));

    newer_callers(v, f, plan, sp);

    CHECK_OK(hostfirst_shard_plan_free(sp));
    CHECK_OK(hostfirst_shard_rules_free(sr));
    CHECK_OK(hostfirst_shard_mesh_free(mesh));
    CHECK_OK(hostfirst_plan_free(plan));
    CHECK_OK(hostfirst_rules_free(rules));
    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(f));
    CHECK(free_guarded(guarded, page) == 0);
    CHECK(live_handles() == base);
    printf("options ok\n");
    return 0;
}
