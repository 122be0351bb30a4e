/* fork() while other threads of the process are inside the library: every child must be able to do cpu work.
 *
 * Worker threads loop over cpu puts (each takes the handle registry, the default-device lookup and the host
 * memory reading's lock), process default-device sets and gets, and census strings, while the main thread
 * forks FORKS children one after another. Each child does a cpu put of the same view, checks the bytes and
 * ends itself with SIGTERM (its way of saying success); it must get there within DEADLINE seconds (an alarm kills a child that hangs on a lock some parent
 * thread held at the moment of the fork). argv[1]: a scratch directory; argv[2] (optional): number of forks
 * (default 300). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

#define N 4096 /* u16 elements */
#define THREADS 3
#define DEADLINE 10 /* seconds for one child's put (generous: the child may run under valgrind) */
#define MAX_HUNG 3  /* stop forking after this many hung children */

static uint16_t data[N];
static hostfirst_view *view;
static atomic_int stop;

static void put_once(void) {
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    hostfirst_buffer *b = NULL;
    CHECK_OK(hostfirst_put(view, &cpu, NULL, &b, NULL));
    uint16_t back[N];
    CHECK_OK(hostfirst_buffer_copy_to_host(b, back, sizeof back));
    CHECK(memcmp(back, data, sizeof data) == 0);
    CHECK_OK(hostfirst_buffer_free(b));
}

static void *worker(void *arg) {
    long id = (long)(intptr_t)arg;
    hostfirst_device cpu = {HOSTFIRST_DEVICE_CPU, 0};
    while (!atomic_load(&stop)) {
        put_once();
        if (id == 0) {
            CHECK_OK(hostfirst_default_device_set(cpu));
            hostfirst_device d;
            uint32_t source = 0;
            CHECK_OK(hostfirst_default_device(&d, &source, NULL));
            CHECK(d.kind == HOSTFIRST_DEVICE_CPU);
        } else if (id == 1) {
            hostfirst_backend_info info = {.struct_size = sizeof info};
            CHECK_OK(hostfirst_backend_describe(0, &info));
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    int forks = argc > 2 ? atoi(argv[2]) : 300;
    CHECK(forks > 0);
    char path[1200];
    snprintf(path, sizeof path, "%s/fork_threads.safetensors", argv[1]);
    char header[128];
    snprintf(header, sizeof header, "{\"tokens\":{\"dtype\":\"U16\",\"shape\":[%d],\"data_offsets\":[0,%d]}}", N,
             2 * N);
    for (int i = 0; i < N; i++) data[i] = (uint16_t)(i * 3 + 1);
    const void *parts[] = {data};
    const size_t sizes[] = {sizeof data};
    write_safetensors(path, header, 1, parts, sizes);

    hostfirst_file *file = NULL;
    CHECK_OK(hostfirst_file_open(path, &file));
    CHECK_OK(hostfirst_file_view(file, "tokens", &view));
    put_once();

    pthread_t threads[THREADS];
    for (long i = 0; i < THREADS; i++) CHECK(pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i) == 0);
    int hung = 0, failed = 0;
    int done = 0;
    for (int i = 0; i < forks && hung < MAX_HUNG; i++, done++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            alarm(DEADLINE);
            put_once();
            hostfirst_device d;
            uint32_t source = 0;
            CHECK_OK(hostfirst_default_device(&d, &source, NULL));
            hostfirst_backend_info info = {.struct_size = sizeof info};
            CHECK_OK(hostfirst_backend_describe(0, &info));
            /* Success is SIGTERM, not exit(0): what the other threads held at the fork (a buffer half made)
             * belongs to threads the child does not have, so its leak report means nothing, and the valgrind
             * pass counts leaks only of processes ended by a signal. */
            raise(SIGTERM);
            _exit(2);
        }
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
            hung++;
        else if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGTERM)
            failed++;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
    if (hung || failed) {
        fprintf(stderr, "%d of %d children hung in a cpu put (killed after %d s), %d failed otherwise\n", hung,
                done, DEADLINE, failed);
        return 1;
    }
    CHECK_OK(hostfirst_view_free(view));
    CHECK_OK(hostfirst_file_free(file));
    CHECK(live_handles() == 0);
    return 0;
}
