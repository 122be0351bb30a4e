/*
 * stand_in_cuda.c - a stand-in for the CUDA driver library (libcuda.so.1) and the few NVML entry points
 * hostfirst uses (libnvidia-ml.so.1), for hostfirst's tests only. Never installed or shipped. It proves
 * hostfirst's logic (census, error paths, bookkeeping, ordering of asynchronous work), not real-driver
 * behaviour or speed.
 *
 * The test harness (tests/it/common.rs, stand_in_dir()) builds it with
 *     cc -shared -fPIC -Wall -Wextra -Werror -Wl,-soname,libcuda.so.1 -o <dir>/libcuda.so.1 stand_in_cuda.c -lpthread
 * and adds the symlinks <dir>/libcuda.so and <dir>/libnvidia-ml.so.1 -> libcuda.so.1. Programs see it when <dir>
 * is prepended to LD_LIBRARY_PATH. Both names resolve to one loaded object (the dynamic loader matches the file),
 * so NVML's memory readings see the same allocations as the driver.
 *
 * On Windows (tests/it/windows.rs, under Wine) it is built with mingw-w64 as nvcuda.dll, copied as nvml.dll, both
 * beside the test program. There the two names are two loaded copies: NVML's readings see no allocation (the
 * census's free memory is then the device's total less the context reserve).
 *
 * It implements exactly the entry points hostfirst resolves (core/src/device/cuda/driver.rs, SYMBOLS, and
 * core/src/device/cuda/nvml.rs) plus a few neighbours (cuDeviceGetUuid, cuDevicePrimaryCtxRelease_v2, and the
 * synchronous copies tests use as a consumer would); built with
 * -DSTAND_IN_WITHOUT_UUID_V2 it lacks cuDeviceGetUuid_v2, to test a driver missing an entry point. Device memory
 * is simulated in host memory: a device pointer is a host address with bit 60 set, so copies are real memcpy,
 * and dereferencing a device pointer on the host faults. Every pointer, handle and range is validated
 * (CUDA_ERROR_INVALID_VALUE / _INVALID_HANDLE / _INVALID_CONTEXT on misuse).
 *
 * What it enforces, like the real driver:
 * - Everything except cuInit, cuDriverGetVersion and cuGetError* needs cuInit first, in this process: after
 *   fork() a child's calls fail with CUDA_ERROR_NOT_INITIALIZED (and are counted: stand_in_calls_after_fork).
 * - Memory, copy, stream, event and synchronisation calls need a current context; handles of one device's
 *   context used with another's current give CUDA_ERROR_INVALID_HANDLE / _INVALID_CONTEXT.
 * - Sticky errors: a copy failing with a sticky code (CUDA_ERROR_ILLEGAL_ADDRESS, _MISALIGNED_ADDRESS,
 *   _LAUNCH_FAILED, ...) poisons its context: every later call that uses that context returns the same error,
 *   queued work of the context is dropped, and frees/destroys in it return the error too (the resources die
 *   with the context, so they are no longer counted as live).
 * - cuMemHostRegister checks the protection of every page in the range (/proc/self/maps): a page without write
 *   permission needs CU_MEMHOSTREGISTER_READ_ONLY (else CUDA_ERROR_INVALID_VALUE, as the driver answers for a
 *   read-only mapping), that flag needs device support (else CUDA_ERROR_NOT_SUPPORTED), an unmapped page is
 *   CUDA_ERROR_INVALID_VALUE. Registration locks whole pages: ranges sharing a page conflict.
 * - Peer copies count as direct only when peer access was enabled between the two contexts.
 * - Where the real driver is harsher than a simple model (issue 23), the stand-in is too, each with a knob to
 *   turn it off: fresh device memory holds a non-zero pattern (0xA5), not zeroes; CU_STREAM_PER_THREAD is the
 *   calling thread's own per-thread default stream (a blocking stream), distinct per thread; a stream handle
 *   that names no live stream (destroyed, or never one) is not validated but poisons the context, the worst case
 *   of the undefined behaviour it is on hardware; frees, unregistrations and allocations wait for all queued
 *   work of the device, not only work that uses the range; cuMemcpyPeerAsync waits only for its own stream.
 *   Opt-in: registration refused (STAND_IN_REGISTER_ERROR, STAND_IN_HOST_REGISTER=0), a foreign framework
 *   sharing the primary context (STAND_IN_FOREIGN), and latencies (wake-ups, context creation, registration).
 * - Page-locked allocations (cuMemHostAlloc) are whole pages of their own, left out of a forked child
 *   (MADV_DONTFORK): reading one there faults, the worst case of what CUDA leaves undefined after fork(). (On
 *   Windows, which has no fork, they come from VirtualAlloc.)
 * - Stream capture by another framework (stand_in_begin_capture / stand_in_end_capture, modes by knob): calls CUDA
 *   forbids during a capture are refused with CUDA_ERROR_STREAM_CAPTURE_* and invalidate it (see "stream capture"
 *   below); cuThreadExchangeStreamCaptureMode and cuStreamIsCapturing behave as documented.
 *
 * Execution of asynchronous work has two modes:
 * - immediate (default): every copy runs when it is enqueued, and its error is returned by the enqueuing call.
 * - deferred (STAND_IN_DEFERRED=1): each stream is a FIFO queue that runs only at synchronisation points -
 *   cuStreamSynchronize, cuEventSynchronize, a cuEventQuery that reports completion, cuCtxSynchronize,
 *   synchronous copies, cuStreamWaitEvent dependencies of those, and the implicit synchronisation of
 *   cuMemFree / cuMemFreeHost / cuMemHostUnregister with work that uses the range - and only as far as that
 *   point needs: work another stream does not depend on stays queued. The legacy default stream (NULL) is
 *   ordered after prior work of every blocking stream of its context and before their later work; streams
 *   created with CU_STREAM_NON_BLOCKING have no implicit ordering with it. Synchronous copies follow the
 *   driver's documented host synchronisation: device-to-host returns complete; host-to-device from
 *   page-locked memory returns complete, from pageable memory returns once the bytes are staged (the copy
 *   itself stays queued on the legacy stream); device-to-device and peer copies return at once (queued on
 *   the legacy stream). Asynchronous copies from pageable memory stage the source at the call; to pageable
 *   memory they complete before returning. Errors of queued work are reported by the next synchronisation
 *   call of the context. With STAND_IN_SEED=N, the order in which runnable streams execute is shuffled
 *   (xorshift seeded with N), and how many times a query of a pending event says CUDA_ERROR_NOT_READY
 *   before completing it (0-2) is drawn too.
 *
 * Knobs (environment, read once on first use):
 *   STAND_IN_DEVICES=N                  physical devices (default 1, at most 16). 0: cuInit succeeds and
 *                                       cuDeviceGetCount reports 0.
 *   STAND_IN_TOTAL_MEMORY=B[,B...]      total device memory per physical device in bytes, suffixes K/M/G/T
 *                                       (binary); one value applies to all (default 16G).
 *   STAND_IN_CONTEXT_RESERVE=B          memory a retained primary context takes from its device (default 256M).
 *   STAND_IN_NAMES=a,b                  device names (default "Stand-in GPU <physical index>"). A name containing
 *                                       " MIG " makes that device a MIG instance (NVML knows it as MIG-<uuid>,
 *                                       CUDA_VISIBLE_DEVICES selects it with MIG-<uuid prefix>).
 *   STAND_IN_UUIDS=GPU-...,GPU-...      UUIDs (default for physical index i: byte k = 0xa0 + 16*i + k, e.g.
 *                                       GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf for device 0).
 *                                       PCI bus ids are 0000:<0x17 + 0x20*i>:00.0.
 *   STAND_IN_COMPUTE_CAPABILITY=9.0[,8.6]  per device (default 9.0).    STAND_IN_SM_COUNT=N (default 132).
 *   STAND_IN_DRIVER_VERSION=12080       what cuDriverGetVersion reports (default 12080 = 12.8).
 *   STAND_IN_INIT_ERROR=code|NAME       cuInit fails with this code (e.g. 304 or CUDA_ERROR_OPERATING_SYSTEM).
 *   STAND_IN_UNAVAILABLE=i[,j]          visible ordinals whose primary context cannot be retained
 *                                       (CUDA_ERROR_DEVICE_UNAVAILABLE: an exclusive-process GPU another process
 *                                       holds).
 *   STAND_IN_FAIL_ALLOC=N               the Nth cuMemAlloc_v2 (1-based) fails with CUDA_ERROR_OUT_OF_MEMORY.
 *                                       Independently, any allocation larger than the simulated free memory
 *                                       (total - live allocations - context reserve) fails the same way.
 *   STAND_IN_FAIL_COPY_AFTER=B          copies succeed until B bytes in total have been copied; the copy that
 *                                       would cross B copies the bytes up to B and fails.
 *   STAND_IN_COPY_ERROR=code|NAME       the error of such a failed copy (default CUDA_ERROR_ILLEGAL_ADDRESS,
 *                                       sticky: later copies fail because the context is poisoned; a
 *                                       non-sticky code fails every later copy on its own).
 *   STAND_IN_EARLY_ERROR=0|1            deferred mode, non-sticky copy errors: 1 reports the error before the
 *                                       failed copy has ended, as a driver may report an error while the DMA is
 *                                       still running. The copy stops at the failure, the synchronisation that
 *                                       ran it returns the error at once, and the rest of that copy (it still
 *                                       reads its source and writes its destination) and of the work the
 *                                       synchronisation waited for stays queued until the next one (default 0).
 *   STAND_IN_READ_ONLY_REGISTER=0|1     CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED (default 1).
 *   STAND_IN_GDR=0|1                    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED (default 1): what the gds
 *                                       census entry asks each device (tests/cufile_stub/stand_in_cufile.c).
 *   STAND_IN_PEER_ACCESS=0|1            what cuDeviceCanAccessPeer says for two different devices (default 1);
 *                                       with 0, cuCtxEnablePeerAccess is CUDA_ERROR_PEER_ACCESS_UNSUPPORTED.
 *   STAND_IN_NVML=0|1                   with 0, nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED (default 1).
 *   STAND_IN_EVENT_NOT_READY=N          after each cuEventRecord, the next N cuEventQuery calls report
 *                                       CUDA_ERROR_NOT_READY (default 0; in deferred mode default 1, or drawn
 *                                       from the seed); cuEventSynchronize completes it.
 *   STAND_IN_DEFERRED=0|1               the execution mode (above).   STAND_IN_SEED=N  the shuffle (above).
 *   STAND_IN_REGISTER_ERROR=code|NAME   cuMemHostRegister_v2 fails with this code (e.g. CUDA_ERROR_NOT_PERMITTED).
 *   STAND_IN_HOST_REGISTER=0|1          CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED (default 1); with 0,
 *                                       registration is CUDA_ERROR_NOT_SUPPORTED.
 *   STAND_IN_POISON_FRESH=0|1           fresh device memory filled with 0xA5 (default 1).
 *   STAND_IN_PER_THREAD_STREAMS=0|1     CU_STREAM_PER_THREAD distinct per thread (default 1); 0: the legacy stream.
 *   STAND_IN_VALIDATE_STREAMS=0|1       1: an unknown stream handle is CUDA_ERROR_INVALID_HANDLE; default 0: it
 *                                       poisons the context (CUDA_ERROR_ILLEGAL_ADDRESS).
 *   STAND_IN_DEVICE_WIDE_SYNC=0|1       frees and allocations wait for the whole device (default 1; deferred mode).
 *   STAND_IN_PEER_LEGACY_WAIT=0|1       cuMemcpyPeerAsync waits for the source's legacy stream (default 0).
 *   STAND_IN_FOREIGN=0|1                a foreign framework shares each primary context (default 0; see below).
 *   STAND_IN_FOREIGN_BYTES=B            the size of each piece of its work (default 1M).
 *   STAND_IN_FOREIGN_ERROR=code|NAME    its work fails with this code when it runs (sticky codes poison).
 *   STAND_IN_WAKEUP_US=N                each blocking wait (cu*Synchronize) costs N us (default 0).
 *   STAND_IN_CONTEXT_CREATE_MS=N        the first primary-context retain of a device costs N ms (default 0).
 *   STAND_IN_REGISTER_MS_PER_GIB=N      cuMemHostRegister costs N ms per GiB (default 0).
 *   STAND_IN_PINNED_DONTFORK=0|1        page-locked allocations absent in a forked child (default 1).
 *   STAND_IN_CAPTURE_MODE=global|thread_local|relaxed  the mode of a capture stand_in_begin_capture starts
 *                                       (default global, as torch.cuda.graph).
 *   STAND_IN_CAPTURE_BLOCKING=0|1       that capture's stream is a blocking stream (default 0: non-blocking, as
 *                                       torch's capture stream).
 *   STAND_IN_LEAK_REPORT=1              at process exit, print live allocations/registrations/streams/events,
 *                                       queued operations and retained contexts to stderr.
 *   CUDA_VISIBLE_DEVICES                honoured like the real driver: a comma list of physical ordinals or
 *                                       GPU-<uuid prefix>es (MIG-<uuid prefix> for MIG instances), read up to
 *                                       the first invalid entry; when it selects no device of a non-empty
 *                                       machine, cuInit fails with CUDA_ERROR_NO_DEVICE.
 *
 * Query functions for tests (dlopen("libcuda.so.1", RTLD_NOW) then dlsym; all return unsigned long long):
 *   stand_in_live_allocations   stand_in_live_device_bytes   stand_in_total_allocations
 *   stand_in_live_pinned        stand_in_live_registrations  stand_in_last_register_flags
 *   stand_in_live_streams       stand_in_live_events         stand_in_context_retains (cuDevicePrimaryCtxRetain
 *   calls so far)               stand_in_live_contexts (devices whose primary context is retained)
 *   stand_in_bytes_copied       stand_in_pageable_async_copies (async copies whose host side was neither
 *   pinned nor registered)      stand_in_peer_copies (peer copies that copied)
 *   stand_in_peer_copies_direct (of those, between contexts with peer access enabled)
 *   stand_in_stream_wait_events (cuStreamWaitEvent calls)   stand_in_spinning_waits (cuStreamSynchronize,
 *   cuCtxSynchronize, and cuEventSynchronize on events created without CU_EVENT_BLOCKING_SYNC: waits that spin a
 *   core in the real driver's default scheduling)   stand_in_queued_ops (operations waiting in queues now)
 *   stand_in_deferred_ops (operations that were queued and executed later)   stand_in_sync_points
 *   stand_in_implicit_syncs (frees and unregistrations that had to wait for queued work)
 *   stand_in_nvml_memory_queries   stand_in_calls_after_fork   stand_in_register_calls
 *   stand_in_memsets (cuMemsetD8Async calls that set bytes)
 *   stand_in_poisoned_by_streams (contexts poisoned by an unknown stream handle)   stand_in_per_thread_streams
 *   stand_in_foreign_submissions   stand_in_foreign_ops_run   stand_in_poison_byte (0xA5, or 0 when off)
 *   stand_in_records_on_legacy / stand_in_records_on_per_thread (cuEventRecord calls on those default streams)
 *   stand_in_capture_refusals (calls refused because of a capture, each invalidating it)
 *   stand_in_capture_mode_exchanges (cuThreadExchangeStreamCaptureMode calls)
 *   stand_in_capture_status_queries (cuStreamIsCapturing calls)
 * Controls: void stand_in_fail_next_records(unsigned n, int code) (the next n cuEventRecord calls fail with
 * code); unsigned long long stand_in_foreign_submit(int device) (the foreign framework queues more work);
 * unsigned long long stand_in_begin_capture(int device) / stand_in_end_capture(void) (another framework's graph
 * capture, from the calling thread; the end returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when it was). The
 * driver's cuStreamBeginCapture_v2 / cuStreamEndCapture / cuGraphDestroy do the same on a stream of the caller's
 * (a capture of nothing: an empty graph).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <malloc.h>
#define EXPORT __declspec(dllexport)
/* Memory handed out aligned: _aligned_malloc / _aligned_free on Windows. */
static int aligned_alloc_into(void **p, size_t align, size_t size) {
    *p = _aligned_malloc(size, align);
    return *p ? 0 : 1;
}
#define aligned_free _aligned_free
#else
#include <sys/mman.h>
#define EXPORT __attribute__((visibility("default")))
static int aligned_alloc_into(void **p, size_t align, size_t size) { return posix_memalign(p, align, size); }
#define aligned_free free
#endif

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct { char bytes[16]; } CUuuid;
typedef struct stand_in_ctx *CUcontext;
typedef struct stand_in_stream *CUstream;
typedef struct stand_in_event *CUevent;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    CUDA_ERROR_UNKNOWN = 999,
};

#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_EVENT_BLOCKING_SYNC 0x1u
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08u

static const struct {
    int code;
    const char *name;
    const char *text;
} ERRORS[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "CUDA driver version is insufficient for CUDA runtime version"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution"},
    {226, "CUDA_ERROR_CONTAINED", "an error was contained by the GPU's error containment"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
    {718, "CUDA_ERROR_INVALID_PC", "invalid program counter"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {721, "CUDA_ERROR_TENSOR_MEMORY_LEAK", "tensor memory not completely freed"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {911, "CUDA_ERROR_EXTERNAL_DEVICE", "external device error"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
#define N_ERRORS (sizeof ERRORS / sizeof ERRORS[0])

/* Errors after which the context cannot be used any more (the real driver's "sticky" errors). */
static int is_sticky(CUresult r) {
    switch (r) {
    case 214: case 220: case 226: case 700: case 702: case 710: case 714: case 715: case 716: case 717: case 718:
    case 719: case 721: case 911: return 1;
    default: return 0;
    }
}

#define MAX_DEVICES 16
#define POISON_BYTE 0xA5
#define DPTR_TAG (1ULL << 60)

/* ---- configuration ------------------------------------------------------------------------------------ */

static struct {
    int n_phys;
    unsigned long long total[MAX_DEVICES];
    char names[MAX_DEVICES][160];
    unsigned char uuid[MAX_DEVICES][16];
    int mig[MAX_DEVICES];
    int cc_major[MAX_DEVICES], cc_minor[MAX_DEVICES];
    int sm_count;
    int driver_version;
    int init_error;
    unsigned long long fail_alloc_nth;
    long long fail_copy_after; /* -1: never */
    int copy_error;
    int early_error; /* STAND_IN_EARLY_ERROR */
    unsigned long long ctx_reserve;
    int read_only_register;
    int gdr;
    int peer_access;
    int nvml;
    int event_not_ready; /* -1: the mode's default */
    int leak_report;
    int deferred;
    /* Strictness (issue 23); each on by default where the real driver behaves so. */
    int register_error;          /* STAND_IN_REGISTER_ERROR: cuMemHostRegister refused with this code */
    int host_register;           /* STAND_IN_HOST_REGISTER: CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED */
    int poison_fresh;            /* STAND_IN_POISON_FRESH: fresh device memory filled with POISON_BYTE */
    int per_thread_streams;      /* STAND_IN_PER_THREAD_STREAMS: CU_STREAM_PER_THREAD distinct per thread */
    int validate_streams;        /* STAND_IN_VALIDATE_STREAMS: unknown stream handles are INVALID_HANDLE */
    int device_wide_sync;        /* STAND_IN_DEVICE_WIDE_SYNC: frees/allocations wait for the whole device */
    int peer_legacy_wait;        /* STAND_IN_PEER_LEGACY_WAIT: async peer copies wait for the source's legacy */
    int foreign;                 /* STAND_IN_FOREIGN: another user of the primary context */
    unsigned long long foreign_bytes; /* STAND_IN_FOREIGN_BYTES: its work per submission */
    int foreign_error;           /* STAND_IN_FOREIGN_ERROR: its work fails with this code */
    unsigned long long wakeup_us;     /* STAND_IN_WAKEUP_US: each blocking wait costs this */
    unsigned long long context_ms;    /* STAND_IN_CONTEXT_CREATE_MS: the first retain of a device costs this */
    unsigned long long register_ms_per_gib; /* STAND_IN_REGISTER_MS_PER_GIB */
    int pinned_dontfork;         /* STAND_IN_PINNED_DONTFORK: page-locked allocations absent in a forked child */
    int capture_mode;            /* STAND_IN_CAPTURE_MODE: the foreign capture's mode (0 global, 1 thread-local,
                                    2 relaxed) */
    int capture_blocking;        /* STAND_IN_CAPTURE_BLOCKING: the foreign capture's stream is a blocking one */
    unsigned long long seed;
    int unavailable[MAX_DEVICES]; /* by visible ordinal */
    int n_visible;
    int visible[MAX_DEVICES]; /* visible ordinal -> physical index */
    size_t page;
} cfg;

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

static unsigned long long parse_bytes(const char *s, unsigned long long dflt) {
    if (!s || !*s) return dflt;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return dflt;
    switch (toupper((unsigned char)*end)) {
    case 'T': v <<= 40; break;
    case 'G': v <<= 30; break;
    case 'M': v <<= 20; break;
    case 'K': v <<= 10; break;
    default: break;
    }
    return v;
}

static int parse_error(const char *s, int dflt) {
    if (!s || !*s) return dflt;
    if (isdigit((unsigned char)*s)) return atoi(s);
    for (size_t i = 0; i < N_ERRORS; i++)
        if (!strcmp(ERRORS[i].name, s)) return ERRORS[i].code;
    return CUDA_ERROR_UNKNOWN;
}

static int env_flag(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) != 0 : dflt;
}

/* The i-th comma-separated field of s (trimmed) into out; returns 0 when there is none. */
static int field(const char *s, int i, char *out, size_t cap) {
    if (!s) return 0;
    for (int k = 0; k < i; k++) {
        s = strchr(s, ',');
        if (!s) return 0;
        s++;
    }
    while (*s == ' ') s++;
    size_t n = strcspn(s, ",");
    while (n > 0 && s[n - 1] == ' ') n--;
    if (n == 0 || n >= cap) return 0;
    memcpy(out, s, n);
    out[n] = 0;
    return 1;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Parses "GPU-xxxxxxxx-..." or "MIG-..." (32 hex digits, dashes ignored) into 16 bytes; 0 if malformed. */
static int parse_uuid(const char *s, unsigned char out[16]) {
    if (strncmp(s, "GPU-", 4) == 0 || strncmp(s, "MIG-", 4) == 0) s += 4;
    int nib = 0;
    for (; *s && nib < 32; s++) {
        if (*s == '-') continue;
        int h = hexval((unsigned char)*s);
        if (h < 0) return 0;
        if (nib % 2 == 0) out[nib / 2] = (unsigned char)(h << 4);
        else out[nib / 2] |= (unsigned char)h;
        nib++;
    }
    return nib == 32 && *s == 0;
}

/* Does the "GPU-<prefix>" / "MIG-<prefix>" entry match physical device p (the kind must match too)? With
 * whole != 0 the entry must name all 32 digits. */
static int uuid_matches(const char *entry, int p, int whole) {
    int mig = strncmp(entry, "MIG-", 4) == 0;
    if (!mig && strncmp(entry, "GPU-", 4) != 0) return 0;
    if (mig != cfg.mig[p]) return 0;
    const char *s = entry + 4;
    int nib = 0;
    for (; *s; s++) {
        if (*s == '-') continue;
        int h = hexval((unsigned char)*s);
        if (h < 0 || nib >= 32) return 0;
        int have = nib % 2 == 0 ? cfg.uuid[p][nib / 2] >> 4 : cfg.uuid[p][nib / 2] & 15;
        if (h != have) return 0;
        nib++;
    }
    return whole ? nib == 32 : nib > 0;
}

static void load_config(void) {
    const char *e = getenv("STAND_IN_DEVICES");
    cfg.n_phys = e && *e ? atoi(e) : 1;
    if (cfg.n_phys < 0) cfg.n_phys = 0;
    if (cfg.n_phys > MAX_DEVICES) cfg.n_phys = MAX_DEVICES;
    const char *mem = getenv("STAND_IN_TOTAL_MEMORY");
    const char *names = getenv("STAND_IN_NAMES");
    const char *uuids = getenv("STAND_IN_UUIDS");
    const char *ccs = getenv("STAND_IN_COMPUTE_CAPABILITY");
    char buf[160];
    unsigned long long mem_default = 16ULL << 30;
    if (field(mem, 0, buf, sizeof buf)) mem_default = parse_bytes(buf, mem_default);
    for (int i = 0; i < cfg.n_phys; i++) {
        cfg.total[i] = field(mem, i, buf, sizeof buf) ? parse_bytes(buf, mem_default) : mem_default;
        if (field(names, i, buf, sizeof buf)) snprintf(cfg.names[i], sizeof cfg.names[i], "%s", buf);
        else snprintf(cfg.names[i], sizeof cfg.names[i], "Stand-in GPU %d", i);
        cfg.mig[i] = strstr(cfg.names[i], " MIG ") != NULL;
        if (!(field(uuids, i, buf, sizeof buf) && parse_uuid(buf, cfg.uuid[i])))
            for (int k = 0; k < 16; k++) cfg.uuid[i][k] = (unsigned char)(0xa0 + 16 * i + k);
        cfg.cc_major[i] = 9;
        cfg.cc_minor[i] = 0;
        if (field(ccs, i, buf, sizeof buf) || field(ccs, 0, buf, sizeof buf))
            sscanf(buf, "%d.%d", &cfg.cc_major[i], &cfg.cc_minor[i]);
    }
    e = getenv("STAND_IN_SM_COUNT");
    cfg.sm_count = e && *e ? atoi(e) : 132;
    e = getenv("STAND_IN_DRIVER_VERSION");
    cfg.driver_version = e && *e ? atoi(e) : 12080;
    cfg.init_error = parse_error(getenv("STAND_IN_INIT_ERROR"), CUDA_SUCCESS);
    cfg.fail_alloc_nth = parse_bytes(getenv("STAND_IN_FAIL_ALLOC"), 0);
    e = getenv("STAND_IN_FAIL_COPY_AFTER");
    cfg.fail_copy_after = e && *e ? (long long)parse_bytes(e, 0) : -1;
    cfg.copy_error = parse_error(getenv("STAND_IN_COPY_ERROR"), CUDA_ERROR_ILLEGAL_ADDRESS);
    cfg.early_error = env_flag("STAND_IN_EARLY_ERROR", 0);
    cfg.ctx_reserve = parse_bytes(getenv("STAND_IN_CONTEXT_RESERVE"), 256ULL << 20);
    cfg.read_only_register = env_flag("STAND_IN_READ_ONLY_REGISTER", 1);
    cfg.gdr = env_flag("STAND_IN_GDR", 1);
    cfg.peer_access = env_flag("STAND_IN_PEER_ACCESS", 1);
    cfg.nvml = env_flag("STAND_IN_NVML", 1);
    e = getenv("STAND_IN_EVENT_NOT_READY");
    cfg.event_not_ready = e && *e ? atoi(e) : -1;
    cfg.leak_report = env_flag("STAND_IN_LEAK_REPORT", 0);
    cfg.deferred = env_flag("STAND_IN_DEFERRED", 0);
    cfg.seed = parse_bytes(getenv("STAND_IN_SEED"), 0);
    cfg.register_error = parse_error(getenv("STAND_IN_REGISTER_ERROR"), CUDA_SUCCESS);
    cfg.host_register = env_flag("STAND_IN_HOST_REGISTER", 1);
    cfg.poison_fresh = env_flag("STAND_IN_POISON_FRESH", 1);
    cfg.per_thread_streams = env_flag("STAND_IN_PER_THREAD_STREAMS", 1);
    cfg.validate_streams = env_flag("STAND_IN_VALIDATE_STREAMS", 0);
    cfg.device_wide_sync = env_flag("STAND_IN_DEVICE_WIDE_SYNC", 1);
    cfg.peer_legacy_wait = env_flag("STAND_IN_PEER_LEGACY_WAIT", 0);
    cfg.foreign = env_flag("STAND_IN_FOREIGN", 0);
    cfg.foreign_bytes = parse_bytes(getenv("STAND_IN_FOREIGN_BYTES"), 1ULL << 20);
    cfg.foreign_error = parse_error(getenv("STAND_IN_FOREIGN_ERROR"), CUDA_SUCCESS);
    cfg.wakeup_us = parse_bytes(getenv("STAND_IN_WAKEUP_US"), 0);
    cfg.context_ms = parse_bytes(getenv("STAND_IN_CONTEXT_CREATE_MS"), 0);
    cfg.register_ms_per_gib = parse_bytes(getenv("STAND_IN_REGISTER_MS_PER_GIB"), 0);
    cfg.pinned_dontfork = env_flag("STAND_IN_PINNED_DONTFORK", 1);
    e = getenv("STAND_IN_CAPTURE_MODE");
    cfg.capture_mode = !e || !*e || !strcmp(e, "global")  ? 0
                       : !strcmp(e, "thread_local")       ? 1
                       : !strcmp(e, "relaxed")            ? 2
                                                          : atoi(e);
    if (cfg.capture_mode < 0 || cfg.capture_mode > 2) cfg.capture_mode = 0;
    cfg.capture_blocking = env_flag("STAND_IN_CAPTURE_BLOCKING", 0);
#ifdef _WIN32
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    long pg = (long)si.dwPageSize;
#else
    long pg = sysconf(_SC_PAGESIZE);
#endif
    cfg.page = pg > 0 ? (size_t)pg : 4096;

    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis) {
        cfg.n_visible = cfg.n_phys;
        for (int i = 0; i < cfg.n_phys; i++) cfg.visible[i] = i;
    } else {
        cfg.n_visible = 0;
        for (int k = 0; field(vis, k, buf, sizeof buf) && cfg.n_visible < MAX_DEVICES; k++) {
            int p = -1;
            if (strncmp(buf, "GPU-", 4) == 0 || strncmp(buf, "MIG-", 4) == 0) {
                for (int i = 0; i < cfg.n_phys; i++)
                    if (uuid_matches(buf, i, 0)) p = i;
            } else {
                char *end = NULL;
                long v = strtol(buf, &end, 10);
                if (end != buf && *end == 0 && v >= 0 && v < cfg.n_phys) p = (int)v;
            }
            if (p < 0) break; /* the real driver stops at the first invalid entry */
            int dup = 0;
            for (int j = 0; j < cfg.n_visible; j++) dup |= cfg.visible[j] == p;
            if (dup) break;
            cfg.visible[cfg.n_visible++] = p;
        }
    }
    const char *un = getenv("STAND_IN_UNAVAILABLE");
    for (int k = 0; field(un, k, buf, sizeof buf); k++) {
        int v = atoi(buf);
        if (v >= 0 && v < MAX_DEVICES) cfg.unavailable[v] = 1;
    }
}

static void config(void) { pthread_once(&cfg_once, load_config); }

/* Page-locked memory: whole pages of its own. Linux: an anonymous mapping, left out of a forked child
 * (MADV_DONTFORK) unless STAND_IN_PINNED_DONTFORK=0. Windows (no fork): VirtualAlloc. NULL when out of memory. */
static size_t pinned_len(size_t size) { return (size + cfg.page - 1) / cfg.page * cfg.page; }
static void *pinned_map(size_t size) {
#ifdef _WIN32
    return VirtualAlloc(NULL, pinned_len(size), MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
#else
    void *p = mmap(NULL, pinned_len(size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (cfg.pinned_dontfork && madvise(p, pinned_len(size), MADV_DONTFORK) != 0) abort();
    return p;
#endif
}
static void pinned_unmap(void *p, size_t size) {
#ifdef _WIN32
    (void)size;
    VirtualFree(p, 0, MEM_RELEASE);
#else
    munmap(p, pinned_len(size));
#endif
}

/* ---- state -------------------------------------------------------------------------------------------- */

enum op_kind { OP_COPY, OP_RECORD, OP_WAIT, OP_SET };

/* One queued operation (deferred mode). Sequence numbers are global and given when an operation is appended to
 * its queue, so they increase along every queue. */
struct op {
    int kind;
    unsigned long long seq;
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
    unsigned char *owned;          /* staged copy of a pageable source, freed after execution */
    int foreign;                   /* the foreign framework's own work (STAND_IN_FOREIGN) */
    CUresult fail;                 /* ... failing with this code when it runs (STAND_IN_FOREIGN_ERROR) */
    CUcontext peer_src;            /* peer copies: the source context */
    struct stand_in_stream *wait;  /* OP_WAIT: this stream must have executed everything up to wait_seq */
    unsigned long long wait_seq;
    unsigned char value;           /* OP_SET: the byte written to [dst, dst + n) */
    int rest;                      /* the rest of a copy that failed early (STAND_IN_EARLY_ERROR): runs whole */
    struct op *next;
};

struct stand_in_stream {
    CUcontext ctx;
    unsigned flags;
    int legacy;
    int foreign; /* the foreign framework's stream (STAND_IN_FOREIGN) */
    int per_thread; /* a thread's per-thread default stream */
    struct op *head, *tail;
    unsigned long long need; /* during a drain: run this stream's ops up to this sequence number */
};

struct stand_in_ctx {
    int device; /* visible ordinal */
    int refcount;
    CUresult sticky;      /* a sticky error: the context is poisoned */
    CUresult async_error; /* a non-sticky error of queued work, reported by the next synchronisation */
    struct stand_in_stream legacy;
    unsigned char peer[MAX_DEVICES]; /* peer access to device d's memory enabled from this context */
    int ever_retained;
    struct stand_in_stream *foreign_stream; /* STAND_IN_FOREIGN: the other user's stream and memory */
    unsigned char *foreign_mem;
};

struct stand_in_event {
    CUcontext ctx;
    unsigned flags;
    int pending_queries;
    struct stand_in_stream *stream; /* the stream of the last record (deferred mode), NULL once known done */
    unsigned long long seq;         /* the record's sequence number */
};

struct region {
    unsigned char *base;
    size_t size;
    int device; /* device allocations: visible ordinal; host regions: flags */
    CUcontext ctx;
};

struct list {
    struct region *items;
    size_t len, cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static pid_t init_pid;
static struct stand_in_ctx contexts[MAX_DEVICES];
static struct list allocations, pinned, registrations;
static void **streams, **events, **orphans; /* orphans: destroyed streams whose queued work has not run yet */
static size_t n_streams, cap_streams, n_events, cap_events, n_orphans, cap_orphans;
static unsigned long long total_allocs, retains, bytes_copied, pageable_async, last_register_flags, peer_copies,
    peer_direct, stream_wait_events, spinning_waits, seq_counter, deferred_ops, sync_points, implicit_syncs,
    nvml_queries, calls_after_fork, register_calls, memsets;
static unsigned long long rng_state;
/* Counted in all (not live): streams and events ever created, cuMemGetInfo calls. */
static unsigned long long streams_created, events_created, mem_get_info_calls;
static __thread CUcontext current;
/* Per-thread default streams (CU_STREAM_PER_THREAD), one per thread and context, created on first use and kept
 * (never counted as live streams); pts lists every one so that waits and drains see them. */
static __thread struct stand_in_stream *per_thread[MAX_DEVICES];
static void **pts;
static size_t n_pts, cap_pts;
/* Latency owed by the calling thread, slept after the lock is released (latency knobs). */
static __thread unsigned long long owed_us;
static unsigned fail_records;
static CUresult fail_record_code;
static unsigned long long poisoned_by_streams, foreign_submissions, foreign_ops_run, records_legacy,
    records_per_thread;

static int list_push(struct list *l, struct region r) {
    if (l->len == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct region *p = realloc(l->items, cap * sizeof *p);
        if (!p) return 0;
        l->items = p;
        l->cap = cap;
    }
    l->items[l->len++] = r;
    return 1;
}

static void list_remove(struct list *l, size_t i) { l->items[i] = l->items[--l->len]; }

static int handles_push(void ***v, size_t *n, size_t *cap, void *h) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        void **p = realloc(*v, c * sizeof *p);
        if (!p) return 0;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = h;
    return 1;
}

static long handles_find(void **v, size_t n, const void *h) {
    for (size_t i = 0; i < n; i++)
        if (v[i] == h) return (long)i;
    return -1;
}

static unsigned long long next_random(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static unsigned long long used_on(int device) {
    unsigned long long u = 0;
    for (size_t i = 0; i < allocations.len; i++)
        if (allocations.items[i].device == device) u += allocations.items[i].size;
    return u;
}

static unsigned long long free_on(int device) {
    unsigned long long total = cfg.total[cfg.visible[device]];
    unsigned long long taken = used_on(device) + (contexts[device].refcount > 0 ? cfg.ctx_reserve : 0) +
                               (contexts[device].foreign_mem ? 2 * cfg.foreign_bytes : 0);
    return taken >= total ? 0 : total - taken;
}

static int is_live_ctx(CUcontext c) {
    return c && c >= &contexts[0] && c < &contexts[cfg.n_visible] && c->refcount > 0;
}

/* With the lock held: cuInit was called, in this process. */
static CUresult need_init(void) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (getpid() != init_pid) {
        calls_after_fork++;
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return CUDA_SUCCESS;
}

/* With the lock held: the current context, usable, or an error. */
static CUresult need_ctx(void) {
    CUresult r = need_init();
    if (r) return r;
    if (!is_live_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    return current->sticky;
}

/* With the lock held: the host pointer behind [dptr, dptr + n) if it lies inside one live allocation. */
static unsigned char *device_range(CUdeviceptr dptr, size_t n) {
    if (!(dptr & DPTR_TAG)) return NULL;
    uintptr_t p = (uintptr_t)(dptr & ~DPTR_TAG);
    for (size_t i = 0; i < allocations.len; i++) {
        uintptr_t b = (uintptr_t)allocations.items[i].base;
        if (p >= b && p - b <= allocations.items[i].size && n <= allocations.items[i].size - (p - b))
            return (unsigned char *)p;
    }
    return NULL;
}

/* With the lock held: the visible device owning [dptr, dptr + n), or -1. */
static int device_of(CUdeviceptr dptr, size_t n) {
    unsigned char *p = device_range(dptr, n);
    if (!p) return -1;
    for (size_t i = 0; i < allocations.len; i++) {
        unsigned char *b = allocations.items[i].base;
        if (p >= b && (size_t)(p - b) <= allocations.items[i].size) return allocations.items[i].device;
    }
    return -1;
}

/* With the lock held: is [p, p + n) inside pinned or registered host memory? */
static int host_is_locked(const void *p, size_t n) {
    const struct list *ls[2] = {&pinned, &registrations};
    uintptr_t a = (uintptr_t)p;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < ls[k]->len; i++) {
            uintptr_t b = (uintptr_t)ls[k]->items[i].base;
            if (a >= b && a - b <= ls[k]->items[i].size && n <= ls[k]->items[i].size - (a - b)) return 1;
        }
    return 0;
}

static void poison(CUcontext c, CUresult r);

/* With the lock held: the calling thread's per-thread default stream of the current context, made on first use:
 * a blocking stream (ordered with the legacy stream like any blocking stream), distinct per thread. */
static struct stand_in_stream *per_thread_stream(void) {
    struct stand_in_stream *p = per_thread[current->device];
    if (p && p->ctx == current) return p;
    p = calloc(1, sizeof *p);
    if (!p || !handles_push(&pts, &n_pts, &cap_pts, p)) abort();
    p->ctx = current;
    p->per_thread = 1;
    per_thread[current->device] = p;
    return p;
}

/* With the lock held: the stream a handle names for the current context (NULL and CU_STREAM_LEGACY: the
 * legacy default stream; CU_STREAM_PER_THREAD: the calling thread's own per-thread default stream, or with
 * STAND_IN_PER_THREAD_STREAMS=0 the legacy stream), or NULL with *r set.
 *
 * The real driver does not validate a stream handle: it uses the object behind it. A destroyed stream or a
 * value that was never a stream is undefined behaviour there (a crash, work recorded on an unrelated stream,
 * or a fault); the stand-in models the worst case it can survive: the context is poisoned
 * (CUDA_ERROR_ILLEGAL_ADDRESS, sticky). STAND_IN_VALIDATE_STREAMS=1 gives the old, kinder
 * CUDA_ERROR_INVALID_HANDLE. A live stream of another context is CUDA_ERROR_INVALID_HANDLE. */
static struct stand_in_stream *resolve_stream(CUstream s, CUresult *r) {
    *r = CUDA_SUCCESS;
    if (!s || s == CU_STREAM_LEGACY) return &current->legacy;
    if (s == CU_STREAM_PER_THREAD) return cfg.per_thread_streams ? per_thread_stream() : &current->legacy;
    if (handles_find(streams, n_streams, s) < 0) {
        if (cfg.validate_streams) {
            *r = CUDA_ERROR_INVALID_HANDLE;
            return NULL;
        }
        poisoned_by_streams++;
        poison(current, CUDA_ERROR_ILLEGAL_ADDRESS);
        *r = CUDA_ERROR_ILLEGAL_ADDRESS;
        return NULL;
    }
    if (s->ctx != current) {
        *r = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    return s;
}

/* With the lock held: the copy-failure knob. Copies what may be copied and says whether to fail. */
/* Copies n bytes, or up to the STAND_IN_FAIL_COPY_AFTER budget and fails; *done (when non-NULL) gets the bytes
 * copied. */
static CUresult do_copy_part(void *dst, const void *src, size_t n, size_t *done) {
    if (cfg.fail_copy_after >= 0 && bytes_copied + n > (unsigned long long)cfg.fail_copy_after) {
        size_t part = bytes_copied < (unsigned long long)cfg.fail_copy_after
                          ? (size_t)((unsigned long long)cfg.fail_copy_after - bytes_copied)
                          : 0;
        if (part) memcpy(dst, src, part);
        bytes_copied += part;
        if (done) *done = part;
        return cfg.copy_error;
    }
    if (n) memcpy(dst, src, n);
    bytes_copied += n;
    if (done) *done = n;
    return CUDA_SUCCESS;
}

static CUresult do_copy(void *dst, const void *src, size_t n) { return do_copy_part(dst, src, n, NULL); }

/* Set by run_head when a copy failed early (STAND_IN_EARLY_ERROR): a drain for a synchronisation point
 * (early_ok, set by the calls that report errors) stops there; barriers (frees, allocations, staging) run on. */
static int early_stop, early_ok;

/* drain() for a synchronisation point that reports errors: it may return early (STAND_IN_EARLY_ERROR). */
static void drain(struct stand_in_stream *target, unsigned long long upto);
static struct op *new_op(int kind);
static void drain_sync(struct stand_in_stream *target, unsigned long long upto) {
    early_ok = 1;
    drain(target, upto);
    early_ok = 0;
}

/* Sleeps what the call owes (latency knobs), outside the lock like a real wake-up or driver-side work. */
static void settle(void) {
    if (owed_us) {
        usleep((useconds_t)(owed_us > 60000000ULL ? 60000000ULL : owed_us));
        owed_us = 0;
    }
}

#define LOCKED(expr)                   \
    do {                               \
        pthread_mutex_lock(&lock);     \
        CUresult r_ = (expr);          \
        pthread_mutex_unlock(&lock);   \
        settle();                      \
        return r_;                     \
    } while (0)

/* ---- stream capture: another framework capturing a CUDA graph ----------------------------------------------
 * stand_in_begin_capture(device) starts a capture by "another framework" (torch.cuda.graph, say) on a stream of
 * its own in that device's primary context, from the calling thread: by default a non-blocking stream in global
 * mode, as torch does (STAND_IN_CAPTURE_MODE=thread_local|relaxed and STAND_IN_CAPTURE_BLOCKING=1 choose
 * otherwise). stand_in_end_capture() ends it and returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when a call made
 * meanwhile invalidated it, as cuStreamEndCapture would. The capture queues no work of its own. While it runs:
 * - a "potentially unsafe" call from a thread whose interaction mode (cuThreadExchangeStreamCaptureMode) is not
 *   relaxed is refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture when the capture
 *   is global and the thread's mode is global (any thread), or when the thread is the capturing one and the
 *   capture is not relaxed. The stand-in counts every call that allocates, frees, registers, copies, sets,
 *   synchronises, queries, records, waits, asks for memory information, or creates or destroys a stream or an
 *   event as potentially unsafe, harsher than the driver (whose documentation names an allocation as the
 *   example); only cuInit, versions, error strings, device queries, primary-context retain and release,
 *   cuCtxGetCurrent / cuCtxSetCurrent, cuStreamIsCapturing and cuThreadExchangeStreamCaptureMode are safe.
 * - whatever the modes, in the capture's context: any use of the legacy default stream while a blocking stream
 *   captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), and cuCtxSynchronize (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
 *   it would wait for work that is being captured, not run); both invalidate the capture.
 * cuStreamIsCapturing on the legacy stream while a blocking stream captures returns
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates nothing, as documented; a non-blocking capture is invisible
 * to it (as on the driver: only the capturing stream's own handle reports it). */

enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };

static struct {
    int active, invalidated, blocking, mode;
    CUcontext ctx;
    pthread_t owner;
    struct stand_in_stream *stream; /* the capturing stream: own_stream, or one given to cuStreamBeginCapture_v2 */
    struct stand_in_stream own_stream; /* stand_in_begin_capture's (never holds work) */
} cap;
/* The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode). */
static __thread int thread_capture_mode = MODE_GLOBAL;
static unsigned long long capture_refusals, capture_mode_exchanges, capture_status_queries;

/* With the lock held, at the start of a call that is potentially unsafe during a capture: `legacy_use` when it
 * uses the legacy default stream, `device_sync` when it synchronises the whole context. Refuses it (and
 * invalidates the capture) where the rules above say so. */
static CUresult capture_gate(int legacy_use, int device_sync) {
    if (!cap.active) return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    int same = current == cap.ctx;
    if (same && legacy_use && cap.blocking) {
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else if (same && device_sync) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (cap.mode != MODE_RELAXED && thread_capture_mode != MODE_RELAXED) {
        int own = pthread_equal(cap.owner, pthread_self());
        if (own || (cap.mode == MODE_GLOBAL && thread_capture_mode == MODE_GLOBAL))
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (r) {
        cap.invalidated = 1;
        capture_refusals++;
    }
    return r;
}

EXPORT CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    config();
    if (!mode || *mode < MODE_GLOBAL || *mode > MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    CUresult r = need_init();
    if (!r) {
        int old = thread_capture_mode;
        thread_capture_mode = *mode;
        *mode = old;
        capture_mode_exchanges++;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* cuStreamIsCapturing: 0 (CU_STREAM_CAPTURE_STATUS_NONE), 1 (_ACTIVE), 2 (_INVALIDATED). */
static CUresult stream_is_capturing(CUstream hs, int *status) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    capture_status_queries++;
    *status = 0;
    int legacy = !hs || hs == CU_STREAM_LEGACY || (hs == CU_STREAM_PER_THREAD && !cfg.per_thread_streams);
    if (cap.active && current == cap.ctx) {
        if (legacy && cap.blocking) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        if (hs == cap.stream) {
            *status = cap.invalidated ? 2 : 1;
            return CUDA_SUCCESS;
        }
    }
    if (!legacy && hs != CU_STREAM_PER_THREAD && !resolve_stream(hs, &r)) return r;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, int *status) { LOCKED(stream_is_capturing(s, status)); }

/* Test controls: begin a foreign capture on `device` from the calling thread (0, or 1 when CUDA is not
 * initialised, the device's context is not retained or a capture runs already); end it (0, or
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, or 1 when none runs). */
EXPORT unsigned long long stand_in_begin_capture(int device) {
    config();
    pthread_mutex_lock(&lock);
    int ok = initialized && device >= 0 && device < cfg.n_visible && contexts[device].refcount > 0 && !cap.active;
    if (ok) {
        cap.active = 1;
        cap.invalidated = 0;
        cap.ctx = &contexts[device];
        cap.owner = pthread_self();
        cap.mode = cfg.capture_mode;
        cap.blocking = cfg.capture_blocking;
        memset(&cap.own_stream, 0, sizeof cap.own_stream);
        cap.own_stream.ctx = cap.ctx;
        cap.own_stream.flags = cap.blocking ? 0 : CU_STREAM_NON_BLOCKING;
        cap.stream = &cap.own_stream;
    }
    pthread_mutex_unlock(&lock);
    return !ok;
}

/* The driver's own capture calls, for programs that capture as a framework would (benches/gpu_check.rs): one
 * capture at a time, on a created stream of the current context, in the given mode; the capture records no work
 * (nothing may be queued on the stream meanwhile: CUDA_ERROR_NOT_SUPPORTED here). cuStreamEndCapture gives an
 * empty graph, or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (and no graph) when a refused call invalidated it. */
static CUresult begin_capture(CUstream hs, int mode) {
    CUresult r = need_ctx();
    if (r) return r;
    if (mode < MODE_GLOBAL || mode > MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    if (!hs || hs == CU_STREAM_LEGACY || hs == CU_STREAM_PER_THREAD) return CUDA_ERROR_NOT_SUPPORTED;
    struct stand_in_stream *s = resolve_stream(hs, &r);
    if (!s) return r;
    if (cap.active || s->head) return CUDA_ERROR_NOT_SUPPORTED;
    cap.active = 1;
    cap.invalidated = 0;
    cap.ctx = current;
    cap.owner = pthread_self();
    cap.mode = mode;
    cap.blocking = !(s->flags & CU_STREAM_NON_BLOCKING);
    cap.stream = s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, int mode) { LOCKED(begin_capture(s, mode)); }

static CUresult end_capture(CUstream hs, void **graph) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    *graph = NULL;
    if (!cap.active || hs != cap.stream) return CUDA_ERROR_INVALID_VALUE; /* not capturing */
    cap.active = 0;
    if (cap.invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    *graph = malloc(1);
    return *graph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuStreamEndCapture(CUstream s, void **graph) { LOCKED(end_capture(s, graph)); }

EXPORT CUresult cuGraphDestroy(void *graph) {
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    free(graph);
    return CUDA_SUCCESS;
}

EXPORT unsigned long long stand_in_end_capture(void) {
    pthread_mutex_lock(&lock);
    unsigned long long r = !cap.active ? 1 : cap.invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : 0;
    cap.active = 0;
    pthread_mutex_unlock(&lock);
    return r;
}

/* ---- queues (deferred mode) --------------------------------------------------------------------------- */

static int pending(const struct stand_in_stream *s, unsigned long long upto) {
    return s && s->head && s->head->seq <= upto;
}

static void free_op(struct op *op) {
    free(op->owned);
    free(op);
}

static size_t all_streams(struct stand_in_stream ***out);

/* Frees a destroyed stream once nothing refers to it: waits on it and events recorded on it count as done. */
static void free_stream(struct stand_in_stream *s) {
    struct stand_in_stream **v;
    size_t n = all_streams(&v);
    for (size_t k = 0; k < n; k++)
        for (struct op *op = v[k]->head; op; op = op->next)
            if (op->kind == OP_WAIT && op->wait == s) op->wait = NULL;
    free(v);
    for (size_t k = 0; k < n_events; k++)
        if (((CUevent)events[k])->stream == s) ((CUevent)events[k])->stream = NULL;
    free(s);
}

/* Frees the destroyed streams whose queued work has all run. Only at the end of an API call: never while a
 * drain holds stream pointers. */
static void sweep_orphans(void) {
    for (size_t i = 0; i < n_orphans;) {
        struct stand_in_stream *o = orphans[i];
        if (o->head) {
            i++;
            continue;
        }
        orphans[i] = orphans[--n_orphans];
        free_stream(o);
    }
}

/* Every stream that may hold work: the legacy stream of each context, the created streams, and destroyed
 * streams whose work is still queued. */
static size_t all_streams(struct stand_in_stream ***out) {
    size_t n = 0;
    struct stand_in_stream **v = malloc((2 * MAX_DEVICES + n_streams + n_orphans + n_pts + 1) * sizeof *v);
    if (!v) abort();
    for (int d = 0; d < MAX_DEVICES; d++) v[n++] = &contexts[d].legacy;
    for (int d = 0; d < MAX_DEVICES; d++)
        if (contexts[d].foreign_stream) v[n++] = contexts[d].foreign_stream;
    for (size_t i = 0; i < n_streams; i++) v[n++] = streams[i];
    for (size_t i = 0; i < n_orphans; i++) v[n++] = orphans[i];
    for (size_t i = 0; i < n_pts; i++) v[n++] = pts[i];
    *out = v;
    return n;
}

static void drop_queue(struct stand_in_stream *s) {
    while (s->head) {
        struct op *op = s->head;
        s->head = op->next;
        free_op(op);
    }
    s->tail = NULL;
}

/* A sticky error: the context's queued work is dropped and every later call in it fails. */
static void poison(CUcontext c, CUresult r) {
    if (c->sticky) return;
    c->sticky = r;
    struct stand_in_stream **v;
    size_t n = all_streams(&v);
    for (size_t i = 0; i < n; i++)
        if (v[i]->ctx == c) drop_queue(v[i]);
    free(v);
}

static void fail_with(CUcontext c, CUresult r) {
    if (is_sticky(r)) poison(c, r);
    else if (!c->async_error) c->async_error = r;
}

static CUresult execute_copy(CUcontext c, struct op *op) {
    if (op->foreign) {
        /* The foreign framework's own work: not counted as hostfirst's copies. */
        foreign_ops_run++;
        if (op->n) memmove(op->dst, op->src, op->n);
        return op->fail;
    }
    CUresult r = do_copy(op->dst, op->src, op->n);
    if (op->peer_src && r == CUDA_SUCCESS) {
        peer_copies++;
        if (c->peer[op->peer_src->device] || op->peer_src->peer[c->device]) peer_direct++;
    }
    return r;
}

/* Runs the head of s. */
static void run_head(struct stand_in_stream *s) {
    struct op *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    deferred_ops++;
    if (op->kind == OP_COPY && op->rest) {
        /* The rest of a copy whose error was reported early: the DMA finishing, whole. */
        if (op->n) memmove(op->dst, op->src, op->n);
    } else if (op->kind == OP_COPY && cfg.early_error && !op->foreign && !op->peer_src) {
        size_t done = 0;
        CUresult r = do_copy_part(op->dst, op->src, op->n, &done);
        if (r && !is_sticky(r)) {
            /* Reported now, while the copy goes on: its rest stays at the head of the stream, with its seq. */
            struct op *rest = new_op(OP_COPY);
            rest->seq = op->seq;
            rest->dst = op->dst + done;
            rest->src = op->src + done;
            rest->n = op->n - done;
            rest->owned = op->owned; /* a staged source moves with the rest */
            op->owned = NULL;
            rest->rest = 1;
            rest->next = s->head;
            s->head = rest;
            if (!s->tail) s->tail = rest;
            deferred_ops--; /* counted when the rest runs */
            early_stop = 1;
        }
        if (r) fail_with(s->ctx, r);
    } else if (op->kind == OP_COPY) {
        CUresult r = execute_copy(s->ctx, op);
        if (r) fail_with(s->ctx, r);
    } else if (op->kind == OP_SET) {
        memset(op->dst, op->value, op->n);
    }
    free_op(op);
}

/* Runs, in queue order per stream and (with a seed) shuffled across streams, everything `target` holds up to
 * sequence number `upto`, and everything that depends on through waits - and nothing else. */
static void drain(struct stand_in_stream *target, unsigned long long upto) {
    if (!pending(target, upto)) return;
    struct stand_in_stream **v;
    size_t n = all_streams(&v);
    struct stand_in_stream **runnable = malloc(n * sizeof *runnable);
    if (!runnable) abort();
    for (size_t i = 0; i < n; i++) v[i]->need = 0;
    target->need = upto;
    for (;;) {
        size_t candidates = 0, r = 0;
        int raised = 0;
        for (size_t i = 0; i < n; i++) {
            struct stand_in_stream *s = v[i];
            if (!pending(s, s->need)) continue;
            candidates++;
            struct op *op = s->head;
            if (op->kind == OP_WAIT && pending(op->wait, op->wait_seq)) {
                if (op->wait->need < op->wait_seq) {
                    op->wait->need = op->wait_seq;
                    raised = 1;
                }
                continue;
            }
            runnable[r++] = s;
        }
        if (candidates == 0) break;
        if (r == 0) {
            if (raised) continue;
            fprintf(stderr, "stand-in cuda: deadlock among queued waits\n");
            abort();
        }
        run_head(runnable[cfg.seed ? next_random() % r : 0]);
        if (early_stop) {
            early_stop = 0;
            if (early_ok) break; /* an error reported before its copy ended: the synchronisation returns now */
        }
    }
    free(runnable);
    free(v);
}

/* Runs everything queued in the streams of context c (destroyed ones included); says whether there was any. */
static int drain_context(CUcontext c) {
    struct stand_in_stream **v;
    size_t n = all_streams(&v);
    int ran = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i]->ctx == c && v[i]->tail) {
            drain(v[i], v[i]->tail->seq);
            ran = 1;
        }
    free(v);
    return ran;
}

/* Runs every queued copy that touches [lo, hi) (host or device addresses), and what it depends on. Used by the
 * calls that free or unregister memory: the driver lets queued work that uses the range finish first. */
static void drain_touching(const unsigned char *lo, const unsigned char *hi) {
    struct stand_in_stream **v;
    size_t n = all_streams(&v);
    int waited = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned long long last = 0;
        for (struct op *op = v[i]->head; op; op = op->next) {
            if (op->kind != OP_COPY && op->kind != OP_SET) continue;
            int d = op->dst < hi && lo < op->dst + op->n;
            int s = op->src && op->src < hi && lo < op->src + op->n;
            if (d || s) last = op->seq;
        }
        if (last) {
            drain(v[i], last);
            waited = 1;
        }
    }
    free(v);
    if (waited) implicit_syncs++;
}

static struct op *new_op(int kind) {
    struct op *op = calloc(1, sizeof *op);
    if (!op) abort();
    op->kind = kind;
    return op;
}

/* Appends op to s, numbering it: sequence numbers grow along every queue. */
static void append(struct stand_in_stream *s, struct op *op) {
    op->seq = ++seq_counter;
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
}

static void append_wait(struct stand_in_stream *s, struct stand_in_stream *on, unsigned long long seq) {
    struct op *w = new_op(OP_WAIT);
    w->wait = on;
    w->wait_seq = seq;
    append(s, w);
}

/* Queues op on s after the implicit ordering of the legacy default stream: legacy work waits for the queued
 * work of every blocking stream of its context; blocking streams' work waits for queued legacy work. */
static void enqueue(struct stand_in_stream *s, struct op *op) {
    CUcontext c = s->ctx;
    if (s->legacy) {
        /* Every blocking stream: created ones, destroyed ones with queued work, every thread's per-thread
         * default stream, and the foreign framework's. */
        struct stand_in_stream **v;
        size_t n = all_streams(&v);
        for (size_t i = 0; i < n; i++) {
            struct stand_in_stream *b = v[i];
            if (b != s && !b->legacy && b->ctx == c && !(b->flags & CU_STREAM_NON_BLOCKING) && b->tail)
                append_wait(s, b, b->tail->seq);
        }
        free(v);
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING) && c->legacy.tail) {
        append_wait(s, &c->legacy, c->legacy.tail->seq);
    }
    append(s, op);
}

/* The result of a synchronisation point in context c: a sticky error, else the first error of queued work
 * since the last synchronisation (reported once). */
static CUresult sync_result(CUcontext c) {
    sync_points++;
    sweep_orphans();
    if (c->sticky) return c->sticky;
    CUresult r = c->async_error;
    c->async_error = CUDA_SUCCESS;
    return r;
}

/* A copy on stream s. In immediate mode it runs now and its error is returned; in deferred mode it is queued
 * (a pageable source staged first) and `complete` says whether the call returns only once it has run. */
static CUresult submit_copy(struct stand_in_stream *s, unsigned char *dst, const unsigned char *src, size_t n,
                            CUcontext peer_src, int stage_source, int complete) {
    CUcontext c = s->ctx;
    struct op *op = new_op(OP_COPY);
    op->dst = dst;
    op->src = src;
    op->n = n;
    op->peer_src = peer_src;
    if (!cfg.deferred) {
        CUresult r = execute_copy(c, op);
        free_op(op);
        if (r && is_sticky(r)) poison(c, r);
        return r;
    }
    if (stage_source) {
        /* The driver stages pageable memory: the stream's earlier work runs first, then the bytes are copied
         * aside, and the DMA itself stays queued. */
        if (s->tail) drain(s, s->tail->seq);
        op->owned = malloc(n);
        if (!op->owned) abort();
        memcpy(op->owned, src, n);
        op->src = op->owned;
    }
    enqueue(s, op);
    if (!complete) return c->sticky;
    drain(s, op->seq);
    return sync_result(c);
}

/* ---- the foreign framework (STAND_IN_FOREIGN=1) ----------------------------------------------------------
 * Another user of the device's primary context (torch, JAX): it retained the context first, keeps memory of its
 * own, and queues its own work on a blocking stream of that context. Its work runs when a synchronisation needs
 * it: the legacy default stream waits for it, and so do frees and allocations (device-wide). With
 * STAND_IN_FOREIGN_ERROR=code its work fails with that code when it runs: a sticky code poisons the shared
 * context, as a framework's faulting kernel does. Its memory counts against the device's free memory; its
 * queued work is not counted among hostfirst's queued operations. */

/* With the lock held: queues one piece of the foreign framework's work in context c. */
static void foreign_submit(CUcontext c) {
    foreign_submissions++;
    struct op *op = new_op(OP_COPY);
    op->foreign = 1;
    op->fail = cfg.foreign_error;
    op->dst = c->foreign_mem + cfg.foreign_bytes;
    op->src = c->foreign_mem;
    op->n = cfg.foreign_bytes;
    if (!cfg.deferred) {
        CUresult r = execute_copy(c, op);
        free_op(op);
        if (r) fail_with(c, r);
        return;
    }
    enqueue(c->foreign_stream, op);
}

static void foreign_start(CUcontext c) {
    c->foreign_stream = calloc(1, sizeof *c->foreign_stream);
    c->foreign_mem = malloc(2 * cfg.foreign_bytes + 1);
    if (!c->foreign_stream || !c->foreign_mem) abort();
    memset(c->foreign_mem, 0x5a, 2 * cfg.foreign_bytes + 1);
    c->foreign_stream->ctx = c;
    c->foreign_stream->foreign = 1;
    c->refcount++; /* its own retain, never released */
    foreign_submit(c);
}

/* ---- initialisation, versions, errors ----------------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags) {
    config();
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (cfg.init_error != CUDA_SUCCESS) return cfg.init_error;
    if (cfg.n_phys > 0 && cfg.n_visible == 0) return CUDA_ERROR_NO_DEVICE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (!initialized) {
        for (int i = 0; i < MAX_DEVICES; i++) {
            contexts[i].device = i;
            contexts[i].legacy.ctx = &contexts[i];
            contexts[i].legacy.legacy = 1;
        }
        rng_state = cfg.seed ? cfg.seed * 0x9E3779B97F4A7C15ULL : 1;
        init_pid = getpid();
        initialized = 1;
    } else if (getpid() != init_pid) {
        calls_after_fork++;
        r = CUDA_ERROR_NOT_INITIALIZED;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuDriverGetVersion(int *version) {
    config();
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = cfg.driver_version;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **str) {
    if (!str) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < N_ERRORS; i++)
        if (ERRORS[i].code == error) {
            *str = ERRORS[i].name;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **str) {
    if (!str) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < N_ERRORS; i++)
        if (ERRORS[i].code == error) {
            *str = ERRORS[i].text;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- devices (no context needed) ---------------------------------------------------------------------- */

static CUresult check_device(CUdevice d) {
    config();
    CUresult r = need_init();
    if (r) return r;
    return d >= 0 && d < cfg.n_visible ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult device_get_count(int *count) {
    config();
    CUresult r = need_init();
    if (r) return r;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = cfg.n_visible;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetCount(int *count) { LOCKED(device_get_count(count)); }

static CUresult device_get(CUdevice *device, int ordinal) {
    CUresult r = check_device(ordinal);
    if (r) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) { LOCKED(device_get(device, ordinal)); }

static CUresult device_get_name(char *name, int len, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", cfg.names[cfg.visible[dev]]);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) { LOCKED(device_get_name(name, len, dev)); }

static CUresult get_uuid(CUuuid *uuid, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, cfg.uuid[cfg.visible[dev]], 16);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { LOCKED(get_uuid(uuid, dev)); }

/* Built with -DSTAND_IN_WITHOUT_UUID_V2, the library lacks this entry point, like a pre-11.4 driver. */
#ifndef STAND_IN_WITHOUT_UUID_V2
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { LOCKED(get_uuid(uuid, dev)); }
#endif

static CUresult device_get_pci_bus_id(char *buf, int len, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!buf || len < 13) return CUDA_ERROR_INVALID_VALUE;
    snprintf(buf, (size_t)len, "0000:%02x:00.0", (0x17 + 0x20 * cfg.visible[dev]) & 0xff);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice dev) { LOCKED(device_get_pci_bus_id(buf, len, dev)); }

static CUresult device_get_attribute(int *value, int attrib, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    int p = cfg.visible[dev];
    switch (attrib) {
    case 16: *value = cfg.sm_count; break;                  /* MULTIPROCESSOR_COUNT */
    case 33: *value = (0x17 + 0x20 * p) & 0xff; break;      /* PCI_BUS_ID */
    case 41: *value = 1; break;                             /* UNIFIED_ADDRESSING */
    case 75: *value = cfg.cc_major[p]; break;               /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = cfg.cc_minor[p]; break;               /* COMPUTE_CAPABILITY_MINOR */
    case 99: *value = cfg.host_register; break;             /* HOST_REGISTER_SUPPORTED */
    case 113: *value = cfg.read_only_register; break;       /* READ_ONLY_HOST_REGISTER_SUPPORTED */
    case 116: *value = cfg.gdr; break;                      /* GPU_DIRECT_RDMA_SUPPORTED */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
    LOCKED(device_get_attribute(value, attrib, dev));
}

static CUresult device_total_mem(size_t *bytes, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)cfg.total[cfg.visible[dev]];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) { LOCKED(device_total_mem(bytes, dev)); }

static CUresult can_access_peer(int *can, CUdevice dev, CUdevice peer) {
    CUresult r = check_device(dev);
    if (r || (r = check_device(peer))) return r;
    if (!can) return CUDA_ERROR_INVALID_VALUE;
    *can = cfg.peer_access && dev != peer;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) { LOCKED(can_access_peer(can, dev, peer)); }

/* ---- contexts ----------------------------------------------------------------------------------------- */

static CUresult primary_retain(CUcontext *pctx, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (cfg.unavailable[dev]) return CUDA_ERROR_DEVICE_UNAVAILABLE;
    if (!contexts[dev].ever_retained) {
        contexts[dev].ever_retained = 1;
        owed_us += cfg.context_ms * 1000ULL; /* creating a context takes time on the real driver */
        if (cfg.foreign) foreign_start(&contexts[dev]);
    }
    contexts[dev].refcount++;
    retains++;
    *pctx = &contexts[dev];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) { LOCKED(primary_retain(pctx, dev)); }

static CUresult primary_release(CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (contexts[dev].refcount <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    contexts[dev].refcount--;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { LOCKED(primary_release(dev)); }

static CUresult set_current(CUcontext ctx) {
    CUresult r = need_init();
    if (r) return r;
    if (ctx && (ctx < &contexts[0] || ctx >= &contexts[cfg.n_visible] || ctx->refcount <= 0))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) { LOCKED(set_current(ctx)); }

static CUresult get_current(CUcontext *pctx) {
    CUresult r = need_init();
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = current;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) { LOCKED(get_current(pctx)); }

static CUresult ctx_synchronize(void) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = capture_gate(1, 1))) return r;
    spinning_waits++;
    owed_us += cfg.wakeup_us;
    early_ok = 1;
    if (cfg.deferred) drain_context(current);
    early_ok = 0;
    return sync_result(current);
}
EXPORT CUresult cuCtxSynchronize(void) { LOCKED(ctx_synchronize()); }

static CUresult enable_peer_access(CUcontext peer, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!is_live_ctx(peer)) return CUDA_ERROR_INVALID_CONTEXT;
    if (peer == current) return CUDA_ERROR_INVALID_DEVICE;
    if (!cfg.peer_access) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    if (current->peer[peer->device]) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    current->peer[peer->device] = 1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) { LOCKED(enable_peer_access(peer, flags)); }

/* ---- memory ------------------------------------------------------------------------------------------- */

static CUresult mem_get_info(size_t *free_b, size_t *total_b) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    if (!free_b || !total_b) return CUDA_ERROR_INVALID_VALUE;
    mem_get_info_calls++;
    *free_b = (size_t)free_on(current->device);
    *total_b = (size_t)cfg.total[cfg.visible[current->device]];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) { LOCKED(mem_get_info(free_b, total_b)); }

static CUresult mem_alloc(CUdeviceptr *dptr, size_t size) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    total_allocs++;
    if (cfg.fail_alloc_nth && total_allocs == cfg.fail_alloc_nth) return CUDA_ERROR_OUT_OF_MEMORY;
    if (size > free_on(current->device)) return CUDA_ERROR_OUT_OF_MEMORY;
    /* Allocation is a barrier on the real driver: it may wait for the device's queued work. */
    if (cfg.deferred && cfg.device_wide_sync && drain_context(current)) implicit_syncs++;
    if (current->sticky) return current->sticky;
    /* Like the driver's, allocations are at least 256-byte aligned (CUDA guarantees 256; 512 is observed). */
    unsigned char *p = NULL;
    if (aligned_alloc_into((void **)&p, 512, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    /* Fresh device memory is whatever the device held before, never zeroes by promise: a non-zero pattern makes
     * a read of memory nobody wrote visible (STAND_IN_POISON_FRESH=0: malloc's contents). */
    if (cfg.poison_fresh) memset(p, POISON_BYTE, size);
    if (!list_push(&allocations, (struct region){p, size, current->device, current})) {
        aligned_free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p | DPTR_TAG;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) { LOCKED(mem_alloc(dptr, size)); }

/* Frees a region of `l` after the queued work touching it has run (in a poisoned context: at once, returning
 * the sticky error; the resource died with the context). */
static CUresult release_region(struct list *l, size_t i, int device_memory) {
    struct region g = l->items[i];
    CUresult sticky = current->sticky;
    /* The real cuMemFree / cuMemFreeHost / cuMemHostUnregister wait for all work of the device, not only the
     * work that uses the range (STAND_IN_DEVICE_WIDE_SYNC=0: only that work). */
    if (cfg.deferred && !sticky && cfg.device_wide_sync && drain_context(current)) implicit_syncs++;
    if (cfg.deferred && !current->sticky) drain_touching(g.base, g.base + g.size);
    sweep_orphans();
    list_remove(l, i);
    if (device_memory) aligned_free(g.base);
    if (l == &pinned) pinned_unmap(g.base, g.size);
    return sticky ? sticky : current->sticky;
}

static CUresult mem_free(CUdeviceptr dptr) {
    CUresult r = need_init();
    if (r) return r;
    if (!is_live_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    if ((r = capture_gate(0, 0))) return r;
    for (size_t i = 0; i < allocations.len; i++)
        if (((CUdeviceptr)(uintptr_t)allocations.items[i].base | DPTR_TAG) == dptr) {
            if (allocations.items[i].device != current->device) return CUDA_ERROR_INVALID_CONTEXT;
            return release_region(&allocations, i, 1);
        }
    return current->sticky ? current->sticky : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { LOCKED(mem_free(dptr)); }

static CUresult host_alloc(void **pp, size_t size, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    if (!pp || size == 0 || (flags & ~0x7u)) return CUDA_ERROR_INVALID_VALUE;
    /* Whole pages of their own, like the driver's; absent in a forked child (STAND_IN_PINNED_DONTFORK): reading
     * them there faults, the worst case of what CUDA leaves undefined for memory it allocated. */
    void *p = pinned_map(size);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!list_push(&pinned, (struct region){p, size, (int)flags, current})) {
        pinned_unmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags) { LOCKED(host_alloc(pp, size, flags)); }

static CUresult free_host(void *p) {
    CUresult r = need_init();
    if (r) return r;
    if (!is_live_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    if ((r = capture_gate(0, 0))) return r;
    for (size_t i = 0; i < pinned.len; i++)
        if (pinned.items[i].base == p) return release_region(&pinned, i, 0);
    return current->sticky ? current->sticky : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemFreeHost(void *p) { LOCKED(free_host(p)); }

/* Checks the protection of every page of [lo, hi) in /proc/self/maps (VirtualQuery on Windows): 0 when all are
 * mapped readable and (unless read_only) writable, else the driver's error. */
#ifdef _WIN32
static CUresult check_protection(uintptr_t lo, uintptr_t hi, int read_only) {
    for (uintptr_t at = lo; at < hi;) {
        MEMORY_BASIC_INFORMATION m;
        if (VirtualQuery((const void *)at, &m, sizeof m) == 0 || m.State != MEM_COMMIT) return CUDA_ERROR_INVALID_VALUE;
        DWORD p = m.Protect & 0xff;
        int readable = p != PAGE_NOACCESS && p != PAGE_EXECUTE;
        int writable = p == PAGE_READWRITE || p == PAGE_WRITECOPY || p == PAGE_EXECUTE_READWRITE ||
                       p == PAGE_EXECUTE_WRITECOPY;
        if (!readable || (!read_only && !writable) || (m.Protect & PAGE_GUARD)) return CUDA_ERROR_INVALID_VALUE;
        at = (uintptr_t)m.BaseAddress + m.RegionSize;
    }
    return CUDA_SUCCESS;
}
#else
static CUresult check_protection(uintptr_t lo, uintptr_t hi, int read_only) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return CUDA_SUCCESS; /* cannot tell: accept */
    char line[512];
    uintptr_t covered = lo;
    CUresult r = CUDA_SUCCESS;
    while (covered < hi && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char perms[8] = {0};
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3) continue;
        if (b <= covered || a >= hi) continue;
        if (a > covered) break; /* a hole */
        if (perms[0] != 'r' || (!read_only && perms[1] != 'w')) r = CUDA_ERROR_INVALID_VALUE;
        covered = b;
    }
    fclose(f);
    if (covered < hi) r = CUDA_ERROR_INVALID_VALUE;
    return r;
}
#endif

static CUresult host_register(void *p, size_t size, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    register_calls++;
    if (!p || size == 0 || (flags & ~0xfu)) return CUDA_ERROR_INVALID_VALUE;
    /* Pinning costs time per byte on the real driver (faulting and mapping every page). */
    owed_us += cfg.register_ms_per_gib * 1000ULL * (unsigned long long)size / (1ULL << 30);
    /* Some systems refuse registration (filesystems, kernels, sandboxes, large ranges, no support). */
    if (!cfg.host_register) return CUDA_ERROR_NOT_SUPPORTED;
    if (cfg.register_error) return cfg.register_error;
    int read_only = (flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0;
    if (read_only && !cfg.read_only_register) return CUDA_ERROR_NOT_SUPPORTED;
    /* Like the real driver, registration locks whole pages: ranges that share a page conflict. */
    uintptr_t pg = cfg.page;
    uintptr_t lo = (uintptr_t)p & ~(pg - 1), hi = ((uintptr_t)p + size + pg - 1) & ~(pg - 1);
    for (size_t i = 0; i < registrations.len; i++) {
        uintptr_t b = (uintptr_t)registrations.items[i].base & ~(pg - 1);
        uintptr_t e = ((uintptr_t)registrations.items[i].base + registrations.items[i].size + pg - 1) & ~(pg - 1);
        if (lo < e && b < hi) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if ((r = check_protection(lo, hi, read_only))) return r;
    if (!list_push(&registrations, (struct region){p, size, (int)flags, current})) return CUDA_ERROR_OUT_OF_MEMORY;
    last_register_flags = flags;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags) { LOCKED(host_register(p, size, flags)); }

static CUresult host_unregister(void *p) {
    CUresult r = need_init();
    if (r) return r;
    if (!is_live_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    if ((r = capture_gate(0, 0))) return r;
    for (size_t i = 0; i < registrations.len; i++)
        if (registrations.items[i].base == p) return release_region(&registrations, i, 0);
    return current->sticky ? current->sticky : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}
EXPORT CUresult cuMemHostUnregister(void *p) { LOCKED(host_unregister(p)); }

/* ---- copies ------------------------------------------------------------------------------------------- */

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream hs, int async) {
    CUresult r = need_ctx();
    if (r) return r;
    struct stand_in_stream *s = resolve_stream(async ? hs : NULL, &r);
    if (!s) return r;
    if ((r = capture_gate(s->legacy, 0))) return r;
    if (n == 0) return CUDA_SUCCESS;
    unsigned char *d = device_range(dst, n);
    if (!d || !src) return CUDA_ERROR_INVALID_VALUE;
    int locked = host_is_locked(src, n);
    if (async && !locked) pageable_async++;
    /* Synchronous from page-locked memory: complete on return. From pageable memory (either form): staged,
     * the DMA queued. Asynchronous from page-locked memory: queued. */
    return submit_copy(s, d, src, n, NULL, !locked, !async && locked);
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { LOCKED(htod(dst, src, n, NULL, 0)); }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    LOCKED(htod(dst, src, n, s, 1));
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream hs, int async) {
    CUresult r = need_ctx();
    if (r) return r;
    struct stand_in_stream *s = resolve_stream(async ? hs : NULL, &r);
    if (!s) return r;
    if ((r = capture_gate(s->legacy, 0))) return r;
    if (n == 0) return CUDA_SUCCESS;
    unsigned char *p = device_range(src, n);
    if (!p || !dst) return CUDA_ERROR_INVALID_VALUE;
    int locked = host_is_locked(dst, n);
    if (async && !locked) pageable_async++;
    /* Complete on return unless asynchronous into page-locked memory. */
    return submit_copy(s, dst, p, n, NULL, 0, !(async && locked));
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { LOCKED(dtoh(dst, src, n, NULL, 0)); }
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    LOCKED(dtoh(dst, src, n, s, 1));
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hs, int async) {
    CUresult r = need_ctx();
    if (r) return r;
    struct stand_in_stream *s = resolve_stream(async ? hs : NULL, &r);
    if (!s) return r;
    if ((r = capture_gate(s->legacy, 0))) return r;
    if (n == 0) return CUDA_SUCCESS;
    unsigned char *d = device_range(dst, n), *p = device_range(src, n);
    if (!d || !p) return CUDA_ERROR_INVALID_VALUE;
    if (d < p + n && p < d + n) return CUDA_ERROR_INVALID_VALUE;
    /* Device to device: no host synchronisation in either form. */
    return submit_copy(s, d, p, n, NULL, 0, 0);
}
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { LOCKED(dtod(dst, src, n, NULL, 0)); }
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    LOCKED(dtod(dst, src, n, s, 1));
}

/* cuMemsetD8Async: n bytes of value at dst, ordered on the stream like a copy (queued in deferred mode). */
static CUresult memset_d8(CUdeviceptr dst, unsigned char value, size_t n, CUstream hs) {
    CUresult r = need_ctx();
    if (r) return r;
    struct stand_in_stream *s = resolve_stream(hs, &r);
    if (!s) return r;
    if ((r = capture_gate(s->legacy, 0))) return r;
    if (n == 0) return CUDA_SUCCESS;
    unsigned char *d = device_range(dst, n);
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    memsets++;
    if (!cfg.deferred) {
        memset(d, value, n);
        return CUDA_SUCCESS;
    }
    struct op *op = new_op(OP_SET);
    op->dst = d;
    op->n = n;
    op->value = value;
    enqueue(s, op);
    return current->sticky;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
    LOCKED(memset_d8(dst, value, n, s));
}

/* Each pointer must belong to its context's device; the contexts must be live primary contexts. The copy is
 * queued on the destination context's legacy stream (or `hs`, which must belong to the current context),
 * after the source context's queued legacy work. */
static CUresult peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream hs,
                     int async) {
    CUresult r = need_init();
    if (r) return r;
    if (!is_live_ctx(dctx) || !is_live_ctx(sctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (dctx->sticky) return dctx->sticky;
    if (sctx->sticky) return sctx->sticky;
    struct stand_in_stream *s = &dctx->legacy;
    if (async) {
        if ((r = need_ctx())) return r;
        if (!(s = resolve_stream(hs, &r))) return r;
    }
    if ((r = capture_gate(s->legacy, 0))) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (device_of(dst, n) != dctx->device || device_of(src, n) != sctx->device) return CUDA_ERROR_INVALID_VALUE;
    unsigned char *d = device_range(dst, n), *p = device_range(src, n);
    if (d < p + n && p < d + n) return CUDA_ERROR_INVALID_VALUE;
    /* The synchronous form is ordered after the source context's legacy work; cuMemcpyPeerAsync is ordered only
     * by its stream (STAND_IN_PEER_LEGACY_WAIT=1: the async form waits too, the old kinder model). */
    if (cfg.deferred && (!async || cfg.peer_legacy_wait) && sctx->legacy.tail)
        append_wait(s, &sctx->legacy, sctx->legacy.tail->seq);
    return submit_copy(s, d, p, n, sctx, 0, 0);
}
EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
    LOCKED(peer(dst, dctx, src, sctx, n, NULL, 0));
}
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                  CUstream s) {
    LOCKED(peer(dst, dctx, src, sctx, n, s, 1));
}

/* ---- streams and events ------------------------------------------------------------------------------- */

static CUresult stream_create(CUstream *ps, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    if (!ps || (flags & ~CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    CUstream s = calloc(1, sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = current;
    s->flags = flags;
    if (!handles_push((void ***)&streams, &n_streams, &cap_streams, s)) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    streams_created++;
    *ps = s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamCreate(CUstream *ps, unsigned int flags) { LOCKED(stream_create(ps, flags)); }

static CUresult stream_destroy(CUstream s) {
    CUresult r = need_init();
    if (r) return r;
    long i = s ? handles_find(streams, n_streams, s) : -1;
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (!is_live_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    if (s->ctx != current) return CUDA_ERROR_INVALID_CONTEXT;
    if ((r = capture_gate(0, 0))) return r;
    streams[i] = streams[--n_streams];
    /* Like the driver, destroying a stream returns at once: work already queued still runs (when a
     * synchronisation needs it, or when memory it uses is freed), after which the stream is gone. */
    if (s->head) {
        if (!handles_push(&orphans, &n_orphans, &cap_orphans, s)) abort();
    } else {
        free_stream(s);
    }
    sweep_orphans();
    return current->sticky;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { LOCKED(stream_destroy(s)); }

static CUresult stream_sync(CUstream hs) {
    CUresult r = need_ctx();
    if (r) return r;
    struct stand_in_stream *s = resolve_stream(hs, &r);
    if (!s) return r;
    if ((r = capture_gate(s->legacy, 0))) return r;
    spinning_waits++;
    owed_us += cfg.wakeup_us;
    if (cfg.deferred && s->legacy) {
        /* The legacy stream's synchronisation covers what an operation queued on it now would wait for: the
         * work of every blocking stream (a marker queued like any legacy operation). */
        struct op *marker = new_op(OP_RECORD);
        enqueue(s, marker);
        drain_sync(s, marker->seq);
    } else if (cfg.deferred && s->tail) {
        drain_sync(s, s->tail->seq);
    }
    return sync_result(current);
}
EXPORT CUresult cuStreamSynchronize(CUstream s) { LOCKED(stream_sync(s)); }

static CUresult event_create(CUevent *pe, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    if (!pe || (flags & ~0xfu)) return CUDA_ERROR_INVALID_VALUE;
    CUevent e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = current;
    e->flags = flags;
    if (!handles_push((void ***)&events, &n_events, &cap_events, e)) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    events_created++;
    *pe = e;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventCreate(CUevent *pe, unsigned int flags) { LOCKED(event_create(pe, flags)); }

/* With the lock held: a live event of a usable context, with a current context. */
static CUresult event_check(CUevent e) {
    CUresult r = need_init();
    if (r) return r;
    if (!is_live_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!e || handles_find(events, n_events, e) < 0) return CUDA_ERROR_INVALID_HANDLE;
    return e->ctx->sticky;
}

static int event_pending(CUevent e) { return cfg.deferred && pending(e->stream, e->seq); }

static CUresult event_record(CUevent e, CUstream hs) {
    CUresult r = event_check(e);
    if (r) return r;
    if ((r = current->sticky)) return r;
    struct stand_in_stream *s = resolve_stream(hs, &r);
    if (!s) return r;
    if ((r = capture_gate(s->legacy, 0))) return r;
    if (e->ctx != current) return CUDA_ERROR_INVALID_HANDLE;
    if (fail_records) {
        fail_records--;
        return fail_record_code;
    }
    if (s->legacy) records_legacy++;
    if (s->per_thread) records_per_thread++;
    if (cfg.event_not_ready >= 0) e->pending_queries = cfg.event_not_ready;
    else if (!cfg.deferred) e->pending_queries = 0;
    else e->pending_queries = cfg.seed ? (int)(next_random() % 3) : 1;
    if (cfg.deferred) {
        struct op *op = new_op(OP_RECORD);
        enqueue(s, op);
        e->stream = s;
        e->seq = op->seq;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { LOCKED(event_record(e, s)); }

static CUresult event_query(CUevent e) {
    CUresult r = event_check(e);
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    if (cfg.deferred && !event_pending(e)) return sync_result(e->ctx);
    if (e->pending_queries > 0) {
        e->pending_queries--;
        return CUDA_ERROR_NOT_READY;
    }
    if (cfg.deferred) drain_sync(e->stream, e->seq);
    return sync_result(e->ctx);
}
EXPORT CUresult cuEventQuery(CUevent e) { LOCKED(event_query(e)); }

static CUresult event_sync(CUevent e) {
    CUresult r = event_check(e);
    if (r) return r;
    if ((r = capture_gate(0, 0))) return r;
    if (!(e->flags & CU_EVENT_BLOCKING_SYNC)) spinning_waits++;
    if (event_pending(e) || !cfg.deferred) owed_us += cfg.wakeup_us; /* a blocked thread's wake-up */
    e->pending_queries = 0;
    if (cfg.deferred && event_pending(e)) drain_sync(e->stream, e->seq);
    return sync_result(e->ctx);
}
EXPORT CUresult cuEventSynchronize(CUevent e) { LOCKED(event_sync(e)); }

static CUresult stream_wait_event(CUstream hs, CUevent e, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    struct stand_in_stream *s = resolve_stream(hs, &r);
    if (!s) return r;
    if ((r = capture_gate(s->legacy, 0))) return r;
    if (!e || handles_find(events, n_events, e) < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    stream_wait_events++;
    if (e->ctx->sticky) return e->ctx->sticky;
    if (event_pending(e)) {
        struct op *op = new_op(OP_WAIT);
        op->wait = e->stream;
        op->wait_seq = e->seq;
        enqueue(s, op);
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) { LOCKED(stream_wait_event(s, e, flags)); }

static CUresult event_destroy(CUevent e) {
    CUresult r = need_init();
    if (r) return r;
    if (!is_live_ctx(current)) return CUDA_ERROR_INVALID_CONTEXT;
    if ((r = capture_gate(0, 0))) return r;
    long i = e ? handles_find(events, n_events, e) : -1;
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    r = e->ctx->sticky;
    events[i] = events[--n_events];
    free(e);
    return r;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) { LOCKED(event_destroy(e)); }

/* ---- NVML (libnvidia-ml.so.1): initialisation, device by UUID, memory ---------------------------------- */

typedef int nvmlReturn_t;
typedef struct nvml_device *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

static int nvml_refs;

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    config();
    if (!cfg.nvml) return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
    pthread_mutex_lock(&lock);
    nvml_refs++;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t r = nvml_refs > 0 ? 0 : 1; /* NVML_ERROR_UNINITIALIZED */
    if (nvml_refs > 0) nvml_refs--;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t nvml_by_uuid(const char *uuid, nvmlDevice_t *dev) {
    if (nvml_refs <= 0) return 1;
    if (!uuid || !dev) return 2;
    for (int p = 0; p < cfg.n_phys; p++)
        if (uuid_matches(uuid, p, 1)) {
            *dev = (nvmlDevice_t)(uintptr_t)(p + 1);
            return 0;
        }
    return 6; /* NVML_ERROR_NOT_FOUND */
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) { LOCKED(nvml_by_uuid(uuid, dev)); }

/* Device-wide like the real NVML: this process's allocations and context reserve on that device. */
static nvmlReturn_t nvml_memory(nvmlDevice_t dev, nvmlMemory_t *m) {
    if (nvml_refs <= 0) return 1;
    int p = (int)(uintptr_t)dev - 1;
    if (p < 0 || p >= cfg.n_phys || !m) return 2;
    nvml_queries++;
    unsigned long long total = cfg.total[p], used = 0;
    for (int v = 0; v < cfg.n_visible; v++)
        if (cfg.visible[v] == p) used = total - free_on(v);
    m->total = total;
    m->used = used;
    m->free = total - used;
    return 0;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) { LOCKED(nvml_memory(dev, m)); }

/* ---- queries for tests -------------------------------------------------------------------------------- */

#define QUERY(name, expr)                      \
    EXPORT unsigned long long name(void) {     \
        pthread_mutex_lock(&lock);             \
        unsigned long long v_ = (expr);        \
        pthread_mutex_unlock(&lock);           \
        return v_;                             \
    }

static unsigned long long live_device_bytes(void) {
    unsigned long long u = 0;
    for (size_t i = 0; i < allocations.len; i++) u += allocations.items[i].size;
    return u;
}

static unsigned long long live_contexts(void) {
    unsigned long long n = 0;
    for (int i = 0; i < MAX_DEVICES; i++) n += contexts[i].refcount > 0;
    return n;
}

static unsigned long long queued_ops(void) {
    unsigned long long n = 0;
    struct stand_in_stream **v;
    size_t k = all_streams(&v);
    for (size_t i = 0; i < k; i++)
        for (struct op *op = v[i]->head; op; op = op->next) n += !op->foreign;
    free(v);
    return n;
}

/* In all since the start: streams and events created, cuMemGetInfo calls (with stand_in_nvml_memory_queries,
 * every memory query), for tests that bound per-load costs. */
QUERY(stand_in_streams_created, streams_created)
QUERY(stand_in_events_created, events_created)
QUERY(stand_in_mem_get_info_calls, mem_get_info_calls)
QUERY(stand_in_live_allocations, allocations.len)
QUERY(stand_in_live_device_bytes, live_device_bytes())
QUERY(stand_in_total_allocations, total_allocs)
QUERY(stand_in_live_pinned, pinned.len)
QUERY(stand_in_live_registrations, registrations.len)
QUERY(stand_in_last_register_flags, last_register_flags)
QUERY(stand_in_register_calls, register_calls)
QUERY(stand_in_live_streams, n_streams)
QUERY(stand_in_live_events, n_events)
QUERY(stand_in_context_retains, retains)
QUERY(stand_in_live_contexts, live_contexts())
QUERY(stand_in_bytes_copied, bytes_copied)
QUERY(stand_in_pageable_async_copies, pageable_async)
QUERY(stand_in_peer_copies, peer_copies)
QUERY(stand_in_peer_copies_direct, peer_direct)
QUERY(stand_in_stream_wait_events, stream_wait_events)
QUERY(stand_in_spinning_waits, spinning_waits)
QUERY(stand_in_queued_ops, queued_ops())
QUERY(stand_in_deferred_ops, deferred_ops)
QUERY(stand_in_sync_points, sync_points)
QUERY(stand_in_implicit_syncs, implicit_syncs)
QUERY(stand_in_nvml_memory_queries, nvml_queries)
QUERY(stand_in_calls_after_fork, calls_after_fork)
QUERY(stand_in_memsets, memsets)
QUERY(stand_in_poisoned_by_streams, poisoned_by_streams)
QUERY(stand_in_per_thread_streams, n_pts)
QUERY(stand_in_foreign_submissions, foreign_submissions)
QUERY(stand_in_foreign_ops_run, foreign_ops_run)
QUERY(stand_in_poison_byte, cfg.poison_fresh ? POISON_BYTE : 0)
QUERY(stand_in_records_on_legacy, records_legacy)
QUERY(stand_in_records_on_per_thread, records_per_thread)
QUERY(stand_in_capture_refusals, capture_refusals)
QUERY(stand_in_capture_mode_exchanges, capture_mode_exchanges)
QUERY(stand_in_capture_status_queries, capture_status_queries)

/* Test controls (dlsym): the next n cuEventRecord calls fail with `code` (a non-sticky failure to record, e.g. on
 * a consumer's stream); the foreign framework (STAND_IN_FOREIGN=1) queues one more piece of its work on device
 * `device` (returns 0, or 1 when there is no foreign framework there yet). */
EXPORT void stand_in_fail_next_records(unsigned n, int code) {
    pthread_mutex_lock(&lock);
    fail_records = n;
    fail_record_code = code;
    pthread_mutex_unlock(&lock);
}

EXPORT unsigned long long stand_in_foreign_submit(int device) {
    pthread_mutex_lock(&lock);
    int ok = device >= 0 && device < MAX_DEVICES && contexts[device].foreign_stream;
    if (ok) foreign_submit(&contexts[device]);
    pthread_mutex_unlock(&lock);
    return !ok;
}

__attribute__((destructor)) static void leak_report(void) {
    config();
    if (!cfg.leak_report) return;
    fprintf(stderr,
            "stand-in cuda: at exit: %llu device allocations (%llu bytes), %llu pinned, %llu registrations, "
            "%llu streams, %llu events live; %llu queued operations; %llu primary contexts retained (%s mode)\n",
            stand_in_live_allocations(), stand_in_live_device_bytes(), stand_in_live_pinned(),
            stand_in_live_registrations(), stand_in_live_streams(), stand_in_live_events(), stand_in_queued_ops(),
            stand_in_live_contexts(), cfg.deferred ? "deferred" : "immediate");
}
