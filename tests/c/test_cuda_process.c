/* How hostfirst touches the CUDA driver over a process's life, through the C ABI. FILE is a safetensors file
 * with one u16 tensor "tokens" of 4096 elements, element i = i * 5 + 1 (written by the Rust test).
 *   test_cuda_process cpu-only FILE  opens the file, puts a tensor to cpu, gathers on cpu, parses "cpu": the
 *                                    driver library is never loaded (the Rust test runs this with LD_DEBUG=libs
 *                                    and the stand-in on LD_LIBRARY_PATH, and checks no libcuda was opened);
 *                                    with a second argument "census" it then takes the census, which does load
 *                                    it (the control showing the check can fail).
 *   test_cuda_process fork FILE      takes the census (CUDA initialised), forks: the child reports CUDA as
 *                                    unusable with a reason naming fork(), cpu work goes on, a put to cuda:0 is
 *                                    UNAVAILABLE, a CUDA buffer made before the fork can be neither copied back
 *                                    nor exported (DLPack), nor can a cuda_host buffer or a cuda_host gather's
 *                                    batches (page-locked by the driver: the stand-in leaves those pages out of
 *                                    the child, so touching them would crash it), each with UNAVAILABLE naming
 *                                    fork(), and the driver is never called; the parent still uses CUDA.
 *   test_cuda_process capture FILE   while another framework captures a CUDA graph (the stand-in's
 *                                    stand_in_begin_capture, modes from STAND_IN_CAPTURE_*), a garbage collector's
 *                                    finalizer calls hostfirst_buffer_record_stream then hostfirst_buffer_free, on
 *                                    the capturing thread and on another: the capture stays valid, and the memory
 *                                    is freed by the next hostfirst call after it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

/* A consumer that passed no max_version (Python's max_version=None): the legacy form. */
static const hostfirst_dlpack_options LEGACY = {.struct_size = sizeof(hostfirst_dlpack_options), .legacy = 1};

static const char *path;
#define N 4096 /* u16 elements */
static uint16_t data[N];

/* The file's tensor as views: *file and *view must be freed by the caller. */
static void open_tokens(hostfirst_file **file, hostfirst_view **view) {
    CHECK_OK(hostfirst_file_open(path, file));
    CHECK_OK(hostfirst_file_view(*file, "tokens", view));
}

/* Open, put to cpu, gather on cpu; checks the bytes. */
static void cpu_work(void) {
    hostfirst_file *file = NULL;
    hostfirst_view *view = NULL;
    hostfirst_buffer *buf = NULL;
    hostfirst_gather *g = NULL;
    open_tokens(&file, &view);
    hostfirst_device cpu;
    CHECK_OK(hostfirst_device_parse("cpu", &cpu));
    CHECK(cpu.kind == HOSTFIRST_DEVICE_CPU);
    CHECK_OK(hostfirst_put(view, &cpu, NULL, &buf, NULL));
    uint16_t back[N];
    CHECK_OK(hostfirst_buffer_copy_to_host(buf, back, sizeof back));
    CHECK(memcmp(back, data, sizeof data) == 0);
    CHECK_OK(hostfirst_gather_new(cpu, HOSTFIRST_DTYPE_U16, 2, 16, &g));
    uint64_t offsets[2] = {3, 100};
    CHECK_OK(hostfirst_gather_run(g, view, offsets, 2, NULL));
    uint16_t batch[32];
    CHECK_OK(hostfirst_gather_copy_to_host(g, batch, sizeof batch));
    CHECK(memcmp(batch, data + 3, 32) == 0 && memcmp(batch + 16, data + 100, 32) == 0);
    CHECK_OK(hostfirst_gather_free(g));
    CHECK_OK(hostfirst_buffer_free(buf));
    CHECK_OK(hostfirst_view_free(view));
    CHECK_OK(hostfirst_file_free(file));
}

static unsigned long long stand_in_counter(const char *name) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    unsigned long long (*f)(void);
    *(void **)&f = dlsym(lib, name);
    CHECK(f != NULL);
    unsigned long long v = f();
    dlclose(lib);
    return v;
}

static void fork_test(void) {
    hostfirst_backend_info cuda = {.struct_size = sizeof cuda};
    CHECK_OK(hostfirst_backend_describe(1, &cuda));
    CHECK(cuda.status == HOSTFIRST_BACKEND_STATUS_AVAILABLE);
    /* A CUDA buffer made before the fork: in the child every way to its memory refuses alike. */
    hostfirst_file *pfile = NULL;
    hostfirst_view *pview = NULL;
    hostfirst_buffer *pbuf = NULL;
    open_tokens(&pfile, &pview);
    hostfirst_device gpu0 = {HOSTFIRST_DEVICE_CUDA, 0};
    CHECK_OK(hostfirst_put(pview, &gpu0, NULL, &pbuf, NULL));
    /* cuda_host memory made before the fork: a buffer, and a gather whose batches live there. */
    hostfirst_device host = {HOSTFIRST_DEVICE_CUDA_HOST, 0};
    hostfirst_buffer *hbuf = NULL;
    CHECK_OK(hostfirst_put(pview, &host, NULL, &hbuf, NULL));
    hostfirst_gather *hg = NULL;
    CHECK_OK(hostfirst_gather_new(host, HOSTFIRST_DTYPE_U16, 2, 16, &hg));
    uint64_t hoffsets[2] = {5, 50};
    CHECK_OK(hostfirst_gather_run(hg, pview, hoffsets, 2, NULL));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_OK(hostfirst_backend_describe(1, &cuda));
        CHECK(cuda.status == HOSTFIRST_BACKEND_STATUS_INIT_FAILED);
        CHECK(strstr(cuda.reason, "fork()") != NULL);
        CHECK(cuda.device_count == 0);
        cpu_work();
        hostfirst_file *file = NULL;
        hostfirst_view *view = NULL;
        hostfirst_buffer *buf = NULL;
        open_tokens(&file, &view);
        hostfirst_device gpu = {HOSTFIRST_DEVICE_CUDA, 0};
        CHECK_STATUS(hostfirst_put(view, &gpu, NULL, &buf, NULL), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        hostfirst_device def;
        uint32_t source = 0;
        CHECK_OK(hostfirst_default_device(&def, &source, NULL));
        CHECK(def.kind == HOSTFIRST_DEVICE_CPU); /* the built-in default follows the census */
        uint16_t one[N];
        CHECK_STATUS(hostfirst_buffer_copy_to_host(pbuf, one, sizeof one), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        hostfirst_dlpack_managed_tensor_versioned *dl = NULL;
        CHECK_STATUS(hostfirst_buffer_to_dlpack(pbuf, NULL, &dl, NULL), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        CHECK_MSG("buffer 'tokens'");
        CHECK(dl == NULL);
        hostfirst_dlpack_managed_tensor *legacy = NULL;
        CHECK_STATUS(hostfirst_buffer_to_dlpack(pbuf, &LEGACY, NULL, &legacy), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK(legacy == NULL);
        /* cuda_host: every way to its pages refuses, naming fork() and the buffer. */
        CHECK_STATUS(hostfirst_buffer_copy_to_host(hbuf, one, sizeof one), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        CHECK_MSG("buffer 'tokens' on cuda_host");
        CHECK_STATUS(hostfirst_buffer_to_dlpack(hbuf, NULL, &dl, NULL), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        CHECK(dl == NULL);
        hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
        hostfirst_buffer *moved = NULL;
        CHECK_STATUS(hostfirst_buffer_to(hbuf, &cpu, &moved), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        CHECK(moved == NULL);
        hostfirst_gather *cg = NULL;
        CHECK_OK(hostfirst_gather_new(cpu, HOSTFIRST_DTYPE_U16, 2, 16, &cg));
        CHECK_STATUS(hostfirst_gather_run_from_buffer(cg, hbuf, hoffsets, 2, NULL), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        CHECK_OK(hostfirst_gather_free(cg));
        uint16_t hbatch[32];
        CHECK_STATUS(hostfirst_gather_copy_to_host(hg, hbatch, sizeof hbatch), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        CHECK_STATUS(hostfirst_gather_run(hg, pview, hoffsets, 2, NULL), HOSTFIRST_STATUS_UNAVAILABLE);
        CHECK_MSG("fork()");
        CHECK(stand_in_counter("stand_in_calls_after_fork") == 0);
        CHECK_OK(hostfirst_view_free(view));
        CHECK_OK(hostfirst_file_free(file));
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The parent's cuda_host memory is intact. */
    uint16_t hback[N];
    CHECK_OK(hostfirst_buffer_copy_to_host(hbuf, hback, sizeof hback));
    CHECK(memcmp(hback, data, sizeof data) == 0);
    uint16_t hbatch[32];
    CHECK_OK(hostfirst_gather_copy_to_host(hg, hbatch, sizeof hbatch));
    CHECK(memcmp(hbatch, data + 5, 32) == 0 && memcmp(hbatch + 16, data + 50, 32) == 0);
    CHECK_OK(hostfirst_gather_free(hg));
    CHECK_OK(hostfirst_buffer_free(hbuf));
    CHECK_OK(hostfirst_buffer_free(pbuf));
    CHECK_OK(hostfirst_view_free(pview));
    CHECK_OK(hostfirst_file_free(pfile));
    /* The parent goes on using CUDA. */
    hostfirst_file *file = NULL;
    hostfirst_view *view = NULL;
    hostfirst_buffer *buf = NULL;
    open_tokens(&file, &view);
    hostfirst_device gpu = {HOSTFIRST_DEVICE_CUDA, 0};
    CHECK_OK(hostfirst_put(view, &gpu, NULL, &buf, NULL));
    uint16_t back[N];
    CHECK_OK(hostfirst_buffer_copy_to_host(buf, back, sizeof back));
    CHECK(memcmp(back, data, sizeof data) == 0);
    CHECK_OK(hostfirst_buffer_free(buf));
    CHECK_OK(hostfirst_view_free(view));
    CHECK_OK(hostfirst_file_free(file));
    CHECK_OK(hostfirst_release_cached_memory());
}

typedef unsigned long long (*control_fn)(void);

static unsigned long long stand_in_control(const char *name, int arg, int with_arg) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib != NULL);
    void *f = dlsym(lib, name);
    CHECK(f != NULL);
    unsigned long long v;
    if (with_arg) {
        unsigned long long (*g)(int);
        *(void **)&g = f;
        v = g(arg);
    } else {
        control_fn g;
        *(void **)&g = f;
        v = g();
    }
    dlclose(lib);
    return v;
}

/* What a garbage collector's finalizer does with a buffer a consumer used by address (Python's
 * __cuda_array_interface__): record the consumer's stream, then free the handle. */
static void *finalize(void *buf) {
    CHECK_OK(hostfirst_buffer_record_stream((hostfirst_buffer *)buf, 1));
    CHECK_OK(hostfirst_buffer_free((hostfirst_buffer *)buf));
    return NULL;
}

static void capture_test(void) {
    hostfirst_file *file = NULL;
    hostfirst_view *view = NULL;
    hostfirst_buffer *a = NULL, *b = NULL;
    open_tokens(&file, &view);
    hostfirst_device gpu = {HOSTFIRST_DEVICE_CUDA, 0};
    CHECK_OK(hostfirst_put(view, &gpu, NULL, &a, NULL));
    CHECK_OK(hostfirst_put(view, &gpu, NULL, &b, NULL));
    CHECK_OK(hostfirst_release_cached_memory());
    CHECK(stand_in_counter("stand_in_live_allocations") == 2);
    CHECK(stand_in_control("stand_in_begin_capture", 0, 1) == 0);
    finalize(a); /* on the capturing thread */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, finalize, b) == 0); /* and on another */
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(stand_in_counter("stand_in_capture_refusals") == 0);
    CHECK(stand_in_control("stand_in_end_capture", 0, 0) == 0); /* the capture is still valid */
    CHECK_OK(hostfirst_release_cached_memory()); /* a safe point: frees kept during the capture are done */
    CHECK(stand_in_counter("stand_in_live_allocations") == 0);
    CHECK_OK(hostfirst_view_free(view));
    CHECK_OK(hostfirst_file_free(file));
}

int main(int argc, char **argv) {
    CHECK(argc >= 3);
    path = argv[2];
    for (int i = 0; i < N; i++) data[i] = (uint16_t)(i * 5 + 1);
    if (!strcmp(argv[1], "cpu-only")) {
        cpu_work();
        if (argc > 3 && !strcmp(argv[3], "census")) CHECK(hostfirst_backend_count() == 3);
    } else if (!strcmp(argv[1], "fork")) {
        fork_test();
    } else if (!strcmp(argv[1], "capture")) {
        capture_test();
    } else {
        CHECK(!"unknown mode");
    }
    puts("ok");
    return 0;
}
