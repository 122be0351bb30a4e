/* Round trip of waking a sleeping thread and being woken back (futex), with both threads on one CPU and on
 * two: what handing half of a gather's batch to a helper thread would cost before the helper reads a byte.
 * A benchmark, not a test (benches/notes.md, "Warm gather").
 *
 *   cc -O2 -Wall -Wextra -Werror -o target/wake_rtt benches/wake_rtt.c -lpthread && target/wake_rtt
 *
 * Each of 2000 rounds: the main thread sleeps 200 us (as a training step would leave the helper asleep), then
 * wakes the helper, which wakes it back; prints p10/p50/p90 of the round trip in microseconds per placement. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { ROUNDS = 2000 };

static atomic_int turn;
static int helper_cpu;

static void wait_while(atomic_int *a, int v) {
    while (atomic_load(a) == v) syscall(SYS_futex, a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void wake(atomic_int *a) { syscall(SYS_futex, a, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *helper(void *arg) {
    (void)arg;
    pin(helper_cpu);
    for (int i = 0; i < ROUNDS; i++) {
        wait_while(&turn, 2 * i);
        atomic_store(&turn, 2 * i + 2);
        wake(&turn);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run(int main_cpu, int other_cpu) {
    static double rtt[ROUNDS];
    pthread_t t;
    atomic_store(&turn, 0);
    helper_cpu = other_cpu;
    pin(main_cpu);
    if (pthread_create(&t, NULL, helper, NULL) != 0) {
        perror("pthread_create");
        exit(1);
    }
    for (int i = 0; i < ROUNDS; i++) {
        usleep(200);
        double t0 = now_us();
        atomic_store(&turn, 2 * i + 1);
        wake(&turn);
        wait_while(&turn, 2 * i + 1);
        rtt[i] = now_us() - t0;
    }
    pthread_join(t, NULL);
    qsort(rtt, ROUNDS, sizeof rtt[0], cmp);
    printf("threads on cpu %d and cpu %d: round trip p10 %.1f us, p50 %.1f us, p90 %.1f us\n", main_cpu, other_cpu,
           rtt[ROUNDS / 10], rtt[ROUNDS / 2], rtt[ROUNDS * 9 / 10]);
}

int main(void) {
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        printf("one CPU: nothing to compare\n");
        return 0;
    }
    run(0, 0);
    run(0, 1);
    return 0;
}
