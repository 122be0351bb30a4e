/* Core C ABI: versions, statuses, last error, panic boundary, devices and specs (no CUDA), default stack. */
#define HOSTFIRST_EXPERIMENTAL /* uses the experimental tier */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "check.h"

/* The one version rule is usable in #if: a header compatible with itself. */
#if !HOSTFIRST_VERSION_COMPATIBLE(HOSTFIRST_VERSION_NUMBER, HOSTFIRST_VERSION_NUMBER)
#error "HOSTFIRST_VERSION_COMPATIBLE refuses the header's own version"
#endif

/* HOSTFIRST_VERSION_COMPATIBLE(header, library): the same ABI line (major; and minor while the major is 0),
 * and the library at least as new as the header. */
static void test_version_rule(void) {
    static const struct {
        unsigned header, library;
        int ok;
    } cases[] = {
        {2000, 2000, 1},       {2000, 2001, 1},          {2001, 2000, 0},    /* 0.2.x: patches, never older */
        {2000, 3000, 0},       {3000, 2000, 0},          {2005, 2999, 1},    /* 0.y: every minor is its own line */
        {1000000, 1000000, 1}, {1000000, 1003002, 1},    {1003000, 1002009, 0}, /* 1.x: later minors serve */
        {1000000, 2000000, 0}, {2000000, 1999999, 0},    {1000000, 999999, 0},  /* a new major never does */
        {0, 0, 1},             {0, 1, 0},                {0, 1000, 0},          /* 0.0.z: each release */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(HOSTFIRST_VERSION_COMPATIBLE(cases[i].header, cases[i].library) == cases[i].ok);
    CHECK(HOSTFIRST_VERSION_COMPATIBLE(HOSTFIRST_VERSION_NUMBER, hostfirst_version_number()));
    /* The 1.x promise: a program built against the line's first release (MAJOR.0.0) runs with this library. */
    CHECK(HOSTFIRST_VERSION_MAJOR >= 1);
    CHECK(HOSTFIRST_VERSION_COMPATIBLE(HOSTFIRST_VERSION_MAJOR * 1000000u, hostfirst_version_number()));
}

static void test_version(void) {
    test_version_rule();
    CHECK(hostfirst_version_number() == HOSTFIRST_VERSION_NUMBER);
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", HOSTFIRST_VERSION_MAJOR, HOSTFIRST_VERSION_MINOR,
             HOSTFIRST_VERSION_PATCH);
    CHECK(strcmp(hostfirst_version(), expect) == 0);
}

static void test_status_names(void) {
    CHECK(strcmp(hostfirst_status_name(HOSTFIRST_STATUS_OK), "OK") == 0);
    CHECK(strcmp(hostfirst_status_name(HOSTFIRST_STATUS_OUT_OF_MEMORY), "OUT_OF_MEMORY") == 0);
    CHECK(strcmp(hostfirst_status_name(HOSTFIRST_STATUS_SCOPE_MISMATCH), "SCOPE_MISMATCH") == 0);
    CHECK(strcmp(hostfirst_status_name(9999), "UNKNOWN") == 0);
    CHECK(strcmp(hostfirst_status_name(0xffffffffu), "UNKNOWN") == 0);
    CHECK(hostfirst_status_is_format_error(HOSTFIRST_STATUS_INVALID_HEADER_JSON) == 1);
    CHECK(hostfirst_status_is_format_error(HOSTFIRST_STATUS_IO) == 0);
    CHECK(hostfirst_status_count() > 20);
    /* One spelling for every *_name function: the constant without its prefix; "UNKNOWN" otherwise. */
    CHECK(strcmp(hostfirst_backend_status_name(HOSTFIRST_BACKEND_STATUS_LIBRARY_NOT_FOUND), "LIBRARY_NOT_FOUND") == 0);
    CHECK(strcmp(hostfirst_backend_status_name(77), "UNKNOWN") == 0);
    CHECK(strcmp(hostfirst_default_source_name(HOSTFIRST_DEFAULT_SOURCE_BUILT_IN), "BUILT_IN") == 0);
    CHECK(strcmp(hostfirst_default_source_name(12), "UNKNOWN") == 0);
    CHECK(strcmp(hostfirst_dtype_name(HOSTFIRST_DTYPE_F8_E4M3FNUZ), "F8_E4M3FNUZ") == 0);
    CHECK(strcmp(hostfirst_dtype_name(0), "UNKNOWN") == 0);
}

static void test_last_error(void) {
    hostfirst_device d = {0, 0};
    CHECK_STATUS(hostfirst_device_parse("tpu", &d), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(d.kind == 0); /* outputs untouched on failure */
    CHECK(hostfirst_last_error_status() == HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("tpu");
    CHECK_MSG("cuda:GPU-<uuid>");
    size_t len = 0;
    /* Asking about the last failure never replaces it: not a fit check (NOT_FOUND), a NULL or too-small struct. */
    hostfirst_fit_info fit = {.struct_size = sizeof fit, .needed = 7};
    CHECK_STATUS(hostfirst_last_error_fit(&fit), HOSTFIRST_STATUS_NOT_FOUND);
    CHECK(fit.needed == 7); /* written only on OK */
    CHECK_STATUS(hostfirst_last_error_fit(NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    hostfirst_fit_info tiny = {.struct_size = sizeof(size_t)};
    CHECK_STATUS(hostfirst_last_error_fit(&tiny), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(hostfirst_last_error_status() == HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("tpu");
    char info[512];
    CHECK_OK(hostfirst_build_info(info, sizeof info, &len));
    CHECK(strstr(info, "hostfirst") != NULL);
    char reads[256];
    size_t rlen = 0;
    CHECK_OK(hostfirst_read_engine(reads, sizeof reads, &rlen));
    CHECK(rlen == strlen(reads) && (strncmp(reads, "io_uring", 8) == 0 || strncmp(reads, "pread pool", 10) == 0));
    CHECK(strstr(info, reads) != NULL); /* the build info names it too */
    CHECK_STATUS(hostfirst_read_engine(reads, 3, &rlen), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
    CHECK(rlen == strlen(reads));
}

static void test_panic_boundary(void) {
#ifdef HOSTFIRST_TEST_HOOKS
    CHECK_STATUS(hostfirst__test_panic(), HOSTFIRST_STATUS_PANIC);
    CHECK_MSG("internal panic");
    CHECK(hostfirst__test_panic_value() == -1);
    /* The library keeps working after a caught panic. */
    hostfirst_device d;
    CHECK_OK(hostfirst_device_parse("cpu", &d));
    CHECK(d.kind == HOSTFIRST_DEVICE_CPU);
    CHECK_STATUS(hostfirst__test_panic(), HOSTFIRST_STATUS_PANIC);
#endif
}

static void test_census_without_cuda(void) {
    size_t n = hostfirst_backend_count();
    CHECK(n == 3);
    hostfirst_backend_info b = {.struct_size = sizeof b};
    CHECK_OK(hostfirst_backend_describe(0, &b));
    CHECK(strcmp(b.name, "cpu") == 0 && b.status == HOSTFIRST_BACKEND_STATUS_AVAILABLE && b.device_count == 1);
    CHECK_OK(hostfirst_backend_describe(1, &b));
    CHECK(strcmp(b.name, "cuda") == 0);
    const char *expect = getenv("EXPECT_CUDA_STATUS");
    if (expect) CHECK(strcmp(hostfirst_backend_status_name(b.status), expect) == 0);
    if (b.status != HOSTFIRST_BACKEND_STATUS_AVAILABLE) {
        CHECK(b.device_count == 0);
        CHECK(strlen(b.reason) > 0);
    }
    /* gds (GPUDirect Storage): when it is not available, it says why and has no devices. */
    CHECK_OK(hostfirst_backend_describe(2, &b));
    CHECK(strcmp(b.name, "gds") == 0);
    if (b.status != HOSTFIRST_BACKEND_STATUS_AVAILABLE) CHECK(strlen(b.reason) > 0 && b.device_count == 0);
    CHECK_STATUS(hostfirst_backend_describe(3, &b), HOSTFIRST_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(hostfirst_backend_describe(0, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    hostfirst_backend_info small = {.struct_size = sizeof(size_t), .device_count = 99};
    CHECK_STATUS(hostfirst_backend_describe(0, &small), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("struct_size");
    CHECK(small.device_count == 99 && small.name == NULL); /* nothing written */

    size_t count = 0;
    CHECK_OK(hostfirst_devices(NULL, 0, &count));
    CHECK(count >= 1);
    hostfirst_device devs[16];
    size_t got = 99;
    if (count > 1) {
        CHECK_STATUS(hostfirst_devices(devs, 1, &got), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
        CHECK(got == count);
    }
    CHECK_STATUS(hostfirst_devices(devs, 16, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_devices(NULL, 5, &got), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_OK(hostfirst_devices(devs, 16, &got));
    CHECK(got == count);
    CHECK(devs[0].kind == HOSTFIRST_DEVICE_CPU && devs[0].ordinal == 0);

    hostfirst_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(hostfirst_device_describe(devs[0], &info));
    CHECK(info.total_memory > 0 && strlen(info.name) > 0 && info.multiprocessor_count >= 1);
    CHECK(strcmp(info.uuid, "") == 0);
    info.struct_size = 8;
    CHECK_STATUS(hostfirst_device_describe(devs[0], &info), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    /* The oldest size (0.1.0: through multiprocessor_count, without trailing padding) is accepted, and the
     * bytes past it are left alone. */
    {
        const size_t v1 = offsetof(hostfirst_device_info, multiprocessor_count) + sizeof info.multiprocessor_count;
        unsigned char *raw = (unsigned char *)&info;
        memset(&info, 0xAA, sizeof info);
        info.struct_size = v1;
        CHECK_OK(hostfirst_device_describe(devs[0], &info));
        CHECK(info.struct_size == v1 && info.multiprocessor_count >= 1);
        for (size_t i = v1; i < sizeof info; i++) CHECK(raw[i] == 0xAA);
        info.struct_size = v1 - 1;
        CHECK_STATUS(hostfirst_device_describe(devs[0], &info), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    }
    info.struct_size = sizeof info;
    hostfirst_device bad_kind = {7, 0};
    CHECK_STATUS(hostfirst_device_describe(bad_kind, &info), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("unknown device kind 7");
    hostfirst_device neg = {HOSTFIRST_DEVICE_CPU, -1};
    CHECK_STATUS(hostfirst_device_describe(neg, &info), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    hostfirst_device cpu1 = {HOSTFIRST_DEVICE_CPU, 1};
    CHECK_STATUS(hostfirst_device_describe(cpu1, &info), HOSTFIRST_STATUS_NO_SUCH_DEVICE);

    uint64_t free_b = 0, total_b = 0;
    CHECK_OK(hostfirst_device_memory(devs[0], &free_b, &total_b));
    CHECK(total_b > 0 && free_b <= total_b);
    CHECK_OK(hostfirst_device_memory(devs[0], NULL, NULL));

    /* a function returning a string never returns NULL (CONVENTIONS): past the last warning, "" */
    size_t nwarn = hostfirst_census_warning_count();
    const char *past = hostfirst_census_warning(nwarn);
    CHECK(past != NULL && past[0] == '\0');
    CHECK(hostfirst_census_warning(SIZE_MAX) != NULL);
}

static void test_specs(void) {
    hostfirst_device d = {0, 0};
    CHECK_OK(hostfirst_device_parse("  CPU:0 ", &d));
    CHECK(d.kind == HOSTFIRST_DEVICE_CPU && d.ordinal == 0);
    const char *invalid[] = {"tpu", "", "   ", "cuda:-1", "cuda:abc", "gpu:1:2", "cuda_host:3", "cuda:GPU-xyz"};
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
        CHECK_STATUS(hostfirst_device_parse(invalid[i], &d), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    }
    CHECK_MSG("accepted forms");
    char junk[1025];
    memset(junk, 'j', 1024);
    junk[1024] = 0;
    CHECK_STATUS(hostfirst_device_parse(junk, &d), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    const char non_utf8[] = {'c', 'u', (char)0xff, (char)0xfe, 0};
    CHECK_STATUS(hostfirst_device_parse(non_utf8, &d), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("UTF-8");
    CHECK_STATUS(hostfirst_device_parse(NULL, &d), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_device_parse("cpu", NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_device_parse("cpu:1", &d), HOSTFIRST_STATUS_NO_SUCH_DEVICE);

    hostfirst_backend_info cuda = {.struct_size = sizeof cuda};
    CHECK_OK(hostfirst_backend_describe(1, &cuda));
    if (cuda.status != HOSTFIRST_BACKEND_STATUS_AVAILABLE) {
        CHECK_STATUS(hostfirst_device_parse("cuda:0", &d), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("cpu:0"); /* lists the devices present */
        CHECK_STATUS(hostfirst_device_parse("cuda_host", &d), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_STATUS(hostfirst_device_parse("gpu", &d), HOSTFIRST_STATUS_UNAVAILABLE);
    } else {
        CHECK_STATUS(hostfirst_device_parse("cuda:99", &d), HOSTFIRST_STATUS_NO_SUCH_DEVICE);
        CHECK_MSG("devices present");
    }

    char buf[32];
    size_t len = 0;
    hostfirst_device c3 = {HOSTFIRST_DEVICE_CUDA, 3};
    CHECK_OK(hostfirst_device_format(c3, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "cuda:3") == 0 && len == 6);
    CHECK_STATUS(hostfirst_device_format(c3, buf, 6, &len), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
    CHECK(len == 6);
    CHECK_OK(hostfirst_device_format(c3, NULL, 0, &len));
    hostfirst_device host = {HOSTFIRST_DEVICE_CUDA_HOST, 0};
    CHECK_OK(hostfirst_device_format(host, buf, sizeof buf, NULL));
    CHECK(strcmp(buf, "cuda_host") == 0);
    hostfirst_device bad = {42, 0};
    CHECK_STATUS(hostfirst_device_format(bad, buf, sizeof buf, &len), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(hostfirst_device_equal(&c3, &c3) == 1 && hostfirst_device_equal(&c3, &host) == 0);
    CHECK(hostfirst_device_equal(NULL, &c3) == 0);
}

static void test_scopes(void) {
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0}, d;
    uint32_t source = 99, depth = 99;
    CHECK_OK(hostfirst_default_device(&d, &source, &depth));
    CHECK(depth == 0 && source != HOSTFIRST_DEFAULT_SOURCE_SCOPE);
    CHECK_STATUS(hostfirst_default_device(NULL, &source, &depth), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* pop on empty, wrong token, out of order */
    CHECK_STATUS(hostfirst_scope_pop(12345), HOSTFIRST_STATUS_SCOPE_MISMATCH);
    CHECK_MSG("no default-device scope");
    uint64_t a = 0, b = 0;
    CHECK_OK(hostfirst_scope_push(cpu, &a));
    CHECK_OK(hostfirst_scope_push(cpu, &b));
    CHECK(a != b);
    CHECK_OK(hostfirst_default_device(&d, &source, &depth));
    CHECK(source == HOSTFIRST_DEFAULT_SOURCE_SCOPE && depth == 2);
    CHECK_STATUS(hostfirst_scope_pop(a), HOSTFIRST_STATUS_SCOPE_MISMATCH);
    CHECK_STATUS(hostfirst_scope_pop(b + 1000), HOSTFIRST_STATUS_SCOPE_MISMATCH);
    CHECK_OK(hostfirst_default_device(&d, &source, &depth));
    CHECK(depth == 2); /* failed pops changed nothing */
    CHECK_OK(hostfirst_scope_pop(b));
    CHECK_OK(hostfirst_scope_pop(a));
    CHECK_STATUS(hostfirst_scope_pop(a), HOSTFIRST_STATUS_SCOPE_MISMATCH);
    CHECK_STATUS(hostfirst_scope_push(cpu, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    hostfirst_device bad = {9, 0};
    CHECK_STATUS(hostfirst_scope_push(bad, &a), HOSTFIRST_STATUS_INVALID_ARGUMENT);

    /* process default */
    CHECK_OK(hostfirst_default_device_set(cpu));
    CHECK_OK(hostfirst_default_device(&d, &source, NULL));
    CHECK(source == HOSTFIRST_DEFAULT_SOURCE_PROCESS && d.kind == HOSTFIRST_DEVICE_CPU);
    hostfirst_device cuda9 = {HOSTFIRST_DEVICE_CUDA, 9};
    CHECK(hostfirst_default_device_set(cuda9) != HOSTFIRST_STATUS_OK);
    CHECK_OK(hostfirst_default_device(&d, &source, NULL));
    CHECK(source == HOSTFIRST_DEFAULT_SOURCE_PROCESS && d.kind == HOSTFIRST_DEVICE_CPU); /* unchanged */
    CHECK_OK(hostfirst_default_device_clear());
    CHECK_OK(hostfirst_default_device(&d, &source, NULL));
    CHECK(source != HOSTFIRST_DEFAULT_SOURCE_PROCESS);

    /* strict mode */
    int t = -1, p = -1;
    CHECK_OK(hostfirst_strict_get(&t, &p));
    CHECK(t == 0 && p == 0);
    CHECK_OK(hostfirst_default_resolve(&d));
    CHECK_OK(hostfirst_strict_thread_set(1));
    CHECK_STATUS(hostfirst_default_resolve(&d), HOSTFIRST_STATUS_IMPLICIT_PLACEMENT);
    CHECK_STATUS(hostfirst_target_parse("default", &d), HOSTFIRST_STATUS_IMPLICIT_PLACEMENT);
    CHECK_OK(hostfirst_target_parse("cpu", &d)); /* explicit targets still work */
    CHECK_OK(hostfirst_default_device(&d, NULL, NULL)); /* the query is not a placement */
    CHECK_OK(hostfirst_strict_thread_set(0));
    CHECK_OK(hostfirst_strict_process_set(1));
    CHECK_STATUS(hostfirst_default_resolve(&d), HOSTFIRST_STATUS_IMPLICIT_PLACEMENT);
    CHECK_MSG("the process");
    CHECK_OK(hostfirst_strict_process_set(0));
    CHECK_OK(hostfirst_target_parse("default", &d));
    /* booleans are int32_t 0 or 1 (CONVENTIONS): another value is refused and changes nothing */
    CHECK_STATUS(hostfirst_strict_thread_set(2), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("on is 2; expected 0 or 1");
    CHECK_STATUS(hostfirst_strict_process_set(-1), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_OK(hostfirst_strict_get(&t, &p));
    CHECK(t == 0 && p == 0);
}

/* Worker: enters a carried scope, checks it, leaves it; hammers push/pop. */
static void *worker(void *arg) {
    hostfirst_carried_scope *carried = arg;
    uint64_t tok = 0;
    hostfirst_device d;
    uint32_t source = 0, depth = 0;
    if (hostfirst_scope_enter(carried, &tok) != HOSTFIRST_STATUS_OK) return (void *)1;
    if (hostfirst_default_device(&d, &source, &depth) != HOSTFIRST_STATUS_OK) return (void *)2;
    if (source != HOSTFIRST_DEFAULT_SOURCE_SCOPE || depth != 1 || d.kind != carried->device.kind) return (void *)3;
    if (hostfirst_default_resolve(&d) != HOSTFIRST_STATUS_IMPLICIT_PLACEMENT) return (void *)4;
    for (int i = 0; i < 2000; i++) {
        uint64_t a, b;
        if (hostfirst_scope_push(d, &a) || hostfirst_scope_push(d, &b)) return (void *)5;
        if (hostfirst_scope_pop(a) != HOSTFIRST_STATUS_SCOPE_MISMATCH) return (void *)6;
        if (hostfirst_scope_pop(b) || hostfirst_scope_pop(a)) return (void *)7;
    }
    if (hostfirst_scope_leave(tok) != HOSTFIRST_STATUS_OK) return (void *)8;
    int t = 1;
    hostfirst_strict_get(&t, NULL);
    if (t != 0) return (void *)9; /* leave restored the worker's own strict flag */
    return NULL;
}

static void test_threads(void) {
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    uint64_t tok;
    CHECK_OK(hostfirst_scope_push(cpu, &tok));
    CHECK_OK(hostfirst_strict_thread_set(1));
    hostfirst_carried_scope carried;
    CHECK_OK(hostfirst_scope_capture(&carried));
    CHECK(carried.strict == 1 && carried.device.kind == HOSTFIRST_DEVICE_CPU);
    CHECK_OK(hostfirst_strict_thread_set(0));
    pthread_t th[8];
    for (int i = 0; i < 8; i++) CHECK(pthread_create(&th[i], NULL, worker, &carried) == 0);
    for (int i = 0; i < 8; i++) {
        void *r = (void *)1;
        CHECK(pthread_join(th[i], &r) == 0);
        if (r != NULL) fprintf(stderr, "worker %d failed at step %ld\n", i, (long)(intptr_t)r);
        CHECK(r == NULL);
    }
    uint32_t depth = 0;
    hostfirst_device d;
    CHECK_OK(hostfirst_default_device(&d, NULL, &depth));
    CHECK(depth == 1); /* workers never touched this thread's stack */
    CHECK_OK(hostfirst_scope_pop(tok));
    carried.strict = 5;
    CHECK_STATUS(hostfirst_scope_enter(&carried, &tok), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(hostfirst_scope_enter(NULL, &tok), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_scope_capture(NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
}

int main(void) {
    size_t handles0 = live_handles();
    test_version();
    test_status_names();
    test_last_error();
    test_panic_boundary();
    test_census_without_cuda();
    test_specs();
    test_scopes();
    test_threads();
    CHECK(live_handles() == handles0);
    CHECK_STATUS(hostfirst_handle_count(NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    return 0;
}
