/*
 * stand_in_cuda.c - a stand-in for the CUDA driver library (libcuda.so.1), for hostfirst's tests only.
 * Never installed or shipped. It proves hostfirst's logic (census, error paths, bookkeeping), not real-driver
 * behaviour or speed.
 *
 * The test harness (tests/it/common.rs, stand_in_dir()) builds it with
 *     cc -shared -fPIC -Wall -Wextra -Werror -Wl,-soname,libcuda.so.1 -o <dir>/libcuda.so.1 stand_in_cuda.c -lpthread
 * and adds the symlink <dir>/libcuda.so -> libcuda.so.1 (cudarc tries "libcuda.so" first). Programs see it when
 * <dir> is prepended to LD_LIBRARY_PATH.
 *
 * It implements exactly the entry points hostfirst resolves (src/device/cuda/driver.rs, SYMBOLS) plus a few
 * neighbours (cuDeviceGetUuid, cuDevicePrimaryCtxRelease_v2); built with -DSTAND_IN_WITHOUT_UUID_V2 it lacks
 * cuDeviceGetUuid_v2, to test a driver missing an entry point. Device memory is simulated in host memory: a
 * device pointer is a host address with bit 60 set, so copies are real memcpy, and dereferencing a device
 * pointer on the host faults. Every pointer, handle and range is validated (CUDA_ERROR_INVALID_VALUE /
 * _INVALID_HANDLE / _INVALID_CONTEXT on misuse). Everything except cuInit, cuDriverGetVersion and
 * cuGetError* needs cuInit first; memory, stream and event calls need a current context, and handles of one
 * device's context used with another's current give CUDA_ERROR_INVALID_HANDLE / _INVALID_CONTEXT. All work
 * runs synchronously at enqueue time.
 *
 * Knobs (environment, read once on first use):
 *   STAND_IN_DEVICES=N                  physical devices (default 1, at most 16). 0: cuInit succeeds and
 *                                       cuDeviceGetCount reports 0.
 *   STAND_IN_TOTAL_MEMORY=B[,B...]      total device memory per physical device in bytes, suffixes K/M/G/T
 *                                       (binary); one value applies to all (default 16G).
 *   STAND_IN_CONTEXT_RESERVE=B          memory a retained primary context takes from its device (default 256M).
 *   STAND_IN_NAMES=a,b                  device names (default "Stand-in GPU <physical index>").
 *   STAND_IN_UUIDS=GPU-...,GPU-...      UUIDs (default for physical index i: byte k = 0xa0 + 16*i + k, e.g.
 *                                       GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf for device 0).
 *                                       PCI bus ids are 0000:<0x17 + 0x20*i>:00.0.
 *   STAND_IN_COMPUTE_CAPABILITY=9.0[,8.6]  per device (default 9.0).    STAND_IN_SM_COUNT=N (default 132).
 *   STAND_IN_DRIVER_VERSION=12080       what cuDriverGetVersion reports (default 12080 = 12.8).
 *   STAND_IN_INIT_ERROR=code|NAME       cuInit fails with this code (e.g. 304 or CUDA_ERROR_OPERATING_SYSTEM).
 *   STAND_IN_FAIL_ALLOC=N               the Nth cuMemAlloc_v2 (1-based) fails with CUDA_ERROR_OUT_OF_MEMORY.
 *                                       Independently, any allocation larger than the simulated free memory
 *                                       (total - live allocations - context reserve) fails the same way.
 *   STAND_IN_FAIL_COPY_AFTER=B          copies succeed until B bytes in total have been copied; the copy that
 *                                       would cross B copies the bytes up to B and fails, and so does every
 *                                       later copy (a sticky error).
 *   STAND_IN_COPY_ERROR=code|NAME       the error of such a failed copy (default CUDA_ERROR_ILLEGAL_ADDRESS).
 *   STAND_IN_READ_ONLY_REGISTER=0|1     CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED (default 1); with
 *                                       0, registering with CU_MEMHOSTREGISTER_READ_ONLY is CUDA_ERROR_NOT_SUPPORTED.
 *   STAND_IN_EVENT_NOT_READY=N          after each cuEventRecord, the next N cuEventQuery calls report
 *                                       CUDA_ERROR_NOT_READY (default 0); cuEventSynchronize completes it.
 *   STAND_IN_LEAK_REPORT=1              at process exit, print live allocations/registrations/streams/events
 *                                       and retained contexts to stderr.
 *   CUDA_VISIBLE_DEVICES                honoured like the real driver: a comma list of physical ordinals or
 *                                       GPU-<uuid prefix>es, read up to the first invalid entry; when it
 *                                       selects no device of a non-empty machine, cuInit fails with
 *                                       CUDA_ERROR_NO_DEVICE.
 *
 * Query functions for tests (dlopen("libcuda.so.1", RTLD_NOW) then dlsym; all return unsigned long long):
 *   stand_in_live_allocations   stand_in_live_device_bytes   stand_in_total_allocations
 *   stand_in_live_pinned        stand_in_live_registrations  stand_in_last_register_flags
 *   stand_in_live_streams       stand_in_live_events         stand_in_context_retains (cuDevicePrimaryCtxRetain
 *   calls so far)               stand_in_live_contexts (devices whose primary context is retained)
 *   stand_in_bytes_copied       stand_in_pageable_async_copies (async copies whose host side was neither
 *   pinned nor registered)      stand_in_peer_copies (cuMemcpyPeer calls that copied)
 *   stand_in_stream_wait_events (successful cuStreamWaitEvent calls)
 *
 * Stream handles: NULL, CU_STREAM_LEGACY ((CUstream)0x1) and CU_STREAM_PER_THREAD ((CUstream)0x2) name the
 * current context's default streams; any other value must be a live stream of the current context.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

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
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

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
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "CUDA driver version is insufficient for CUDA runtime version"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
#define N_ERRORS (sizeof ERRORS / sizeof ERRORS[0])

#define MAX_DEVICES 16
#define DPTR_TAG (1ULL << 60)

/* ---- configuration ------------------------------------------------------------------------------------ */

static struct {
    int n_phys;
    unsigned long long total[MAX_DEVICES];
    char names[MAX_DEVICES][160];
    unsigned char uuid[MAX_DEVICES][16];
    int cc_major[MAX_DEVICES], cc_minor[MAX_DEVICES];
    int sm_count;
    int driver_version;
    int init_error;
    unsigned long long fail_alloc_nth;
    long long fail_copy_after; /* -1: never */
    int copy_error;
    unsigned long long ctx_reserve;
    int read_only_register;
    int event_not_ready;
    int leak_report;
    int n_visible;
    int visible[MAX_DEVICES]; /* visible ordinal -> physical index */
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

/* Parses "GPU-xxxxxxxx-..." (32 hex digits, dashes ignored) into 16 bytes; returns 0 if malformed. */
static int parse_uuid(const char *s, unsigned char out[16]) {
    if (strncmp(s, "GPU-", 4) == 0) s += 4;
    int nib = 0;
    for (; *s && nib < 32; s++) {
        if (*s == '-') continue;
        int h = hexval((unsigned char)*s);
        if (h < 0) return 0;
        if (nib % 2 == 0) out[nib / 2] = (unsigned char)(h << 4);
        else out[nib / 2] |= (unsigned char)h;
        nib++;
    }
    return nib == 32;
}

/* Does the CUDA_VISIBLE_DEVICES entry "GPU-<prefix>" match physical device p's UUID? */
static int uuid_prefix_matches(const char *entry, int p) {
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
    return nib > 0;
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
    cfg.ctx_reserve = parse_bytes(getenv("STAND_IN_CONTEXT_RESERVE"), 256ULL << 20);
    e = getenv("STAND_IN_READ_ONLY_REGISTER");
    cfg.read_only_register = e && *e ? atoi(e) != 0 : 1;
    e = getenv("STAND_IN_EVENT_NOT_READY");
    cfg.event_not_ready = e && *e ? atoi(e) : 0;
    e = getenv("STAND_IN_LEAK_REPORT");
    cfg.leak_report = e && *e && strcmp(e, "0") != 0;

    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis) {
        cfg.n_visible = cfg.n_phys;
        for (int i = 0; i < cfg.n_phys; i++) cfg.visible[i] = i;
        return;
    }
    cfg.n_visible = 0;
    for (int k = 0; field(vis, k, buf, sizeof buf) && cfg.n_visible < MAX_DEVICES; k++) {
        int p = -1;
        if (strncmp(buf, "GPU-", 4) == 0) {
            for (int i = 0; i < cfg.n_phys; i++)
                if (uuid_prefix_matches(buf, i)) p = i;
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

static void config(void) { pthread_once(&cfg_once, load_config); }

/* ---- state -------------------------------------------------------------------------------------------- */

struct stand_in_ctx {
    int device; /* visible ordinal */
    int refcount;
};

struct stand_in_stream {
    CUcontext ctx;
};

struct stand_in_event {
    CUcontext ctx;
    int pending_queries;
};

struct region {
    unsigned char *base;
    size_t size;
    int device; /* device allocations: visible ordinal; host regions: flags */
};

struct list {
    struct region *items;
    size_t len, cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static struct stand_in_ctx contexts[MAX_DEVICES];
static struct list allocations, pinned, registrations;
static void **streams, **events;
static size_t n_streams, cap_streams, n_events, cap_events;
static unsigned long long total_allocs, retains, bytes_copied, pageable_async, last_register_flags, peer_copies;
static unsigned long long stream_wait_events;
static __thread CUcontext current;

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

static unsigned long long used_on(int device) {
    unsigned long long u = 0;
    for (size_t i = 0; i < allocations.len; i++)
        if (allocations.items[i].device == device) u += allocations.items[i].size;
    return u;
}

static unsigned long long free_on(int device) {
    unsigned long long total = cfg.total[cfg.visible[device]];
    unsigned long long taken = used_on(device) + (contexts[device].refcount > 0 ? cfg.ctx_reserve : 0);
    return taken >= total ? 0 : total - taken;
}

/* With the lock held: the current context, or an error. */
static CUresult need_ctx(void) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!current || current->refcount <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
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

/* With the lock held: validates a stream against the current context (NULL, CU_STREAM_LEGACY = 0x1 and
 * CU_STREAM_PER_THREAD = 0x2: the current context's default streams). */
static CUresult check_stream(CUstream s) {
    if ((uintptr_t)s <= 2) return CUDA_SUCCESS;
    if (handles_find(streams, n_streams, s) < 0) return CUDA_ERROR_INVALID_HANDLE;
    return s->ctx == current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* With the lock held: the copy-failure knob. Copies what may be copied and says whether to fail. */
static CUresult do_copy(void *dst, const void *src, size_t n) {
    if (cfg.fail_copy_after >= 0 && bytes_copied + n > (unsigned long long)cfg.fail_copy_after) {
        size_t part = bytes_copied < (unsigned long long)cfg.fail_copy_after
                          ? (size_t)((unsigned long long)cfg.fail_copy_after - bytes_copied)
                          : 0;
        if (part) memcpy(dst, src, part);
        bytes_copied += part;
        return cfg.copy_error;
    }
    if (n) memcpy(dst, src, n);
    bytes_copied += n;
    return CUDA_SUCCESS;
}

#define LOCKED(expr)                   \
    do {                               \
        pthread_mutex_lock(&lock);     \
        CUresult r_ = (expr);          \
        pthread_mutex_unlock(&lock);   \
        return r_;                     \
    } while (0)

/* ---- initialisation, versions, errors ----------------------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags) {
    config();
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (cfg.init_error != CUDA_SUCCESS) return cfg.init_error;
    if (cfg.n_phys > 0 && cfg.n_visible == 0) return CUDA_ERROR_NO_DEVICE;
    pthread_mutex_lock(&lock);
    if (!initialized) {
        for (int i = 0; i < MAX_DEVICES; i++) contexts[i].device = i;
        initialized = 1;
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
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
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return d >= 0 && d < cfg.n_visible ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    config();
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = cfg.n_visible;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    CUresult r = check_device(ordinal);
    if (r) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", cfg.names[cfg.visible[dev]]);
    return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, cfg.uuid[cfg.visible[dev]], 16);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

/* Built with -DSTAND_IN_WITHOUT_UUID_V2, the library lacks this entry point, like a pre-11.4 driver. */
#ifndef STAND_IN_WITHOUT_UUID_V2
EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }
#endif

EXPORT CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!buf || len < 13) return CUDA_ERROR_INVALID_VALUE;
    snprintf(buf, (size_t)len, "0000:%02x:00.0", (0x17 + 0x20 * cfg.visible[dev]) & 0xff);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
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
    case 113: *value = cfg.read_only_register; break;       /* READ_ONLY_HOST_REGISTER_SUPPORTED */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)cfg.total[cfg.visible[dev]];
    return CUDA_SUCCESS;
}

/* ---- contexts ----------------------------------------------------------------------------------------- */

static CUresult primary_retain(CUcontext *pctx, CUdevice dev) {
    CUresult r = check_device(dev);
    if (r) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
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
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && (ctx < &contexts[0] || ctx >= &contexts[cfg.n_visible] || ctx->refcount <= 0))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) { LOCKED(set_current(ctx)); }

static CUresult get_current(CUcontext *pctx) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = current;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx) { LOCKED(get_current(pctx)); }

/* ---- memory ------------------------------------------------------------------------------------------- */

static CUresult mem_get_info(size_t *free_b, size_t *total_b) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!free_b || !total_b) return CUDA_ERROR_INVALID_VALUE;
    *free_b = (size_t)free_on(current->device);
    *total_b = (size_t)cfg.total[cfg.visible[current->device]];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b) { LOCKED(mem_get_info(free_b, total_b)); }

static CUresult mem_alloc(CUdeviceptr *dptr, size_t size) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    total_allocs++;
    if (cfg.fail_alloc_nth && total_allocs == cfg.fail_alloc_nth) return CUDA_ERROR_OUT_OF_MEMORY;
    if (size > free_on(current->device)) return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned char *p = malloc(size);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!list_push(&allocations, (struct region){p, size, current->device})) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p | DPTR_TAG;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) { LOCKED(mem_alloc(dptr, size)); }

static CUresult mem_free(CUdeviceptr dptr) {
    CUresult r = need_ctx();
    if (r) return r;
    for (size_t i = 0; i < allocations.len; i++)
        if (((CUdeviceptr)(uintptr_t)allocations.items[i].base | DPTR_TAG) == dptr) {
            if (allocations.items[i].device != current->device) return CUDA_ERROR_INVALID_CONTEXT;
            free(allocations.items[i].base);
            list_remove(&allocations, i);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { LOCKED(mem_free(dptr)); }

static CUresult host_alloc(void **pp, size_t size, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!pp || size == 0 || (flags & ~0x7u)) return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (posix_memalign(&p, 4096, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!list_push(&pinned, (struct region){p, size, (int)flags})) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags) { LOCKED(host_alloc(pp, size, flags)); }

static CUresult free_host(void *p) {
    CUresult r = need_ctx();
    if (r) return r;
    for (size_t i = 0; i < pinned.len; i++)
        if (pinned.items[i].base == p) {
            free(p);
            list_remove(&pinned, i);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemFreeHost(void *p) { LOCKED(free_host(p)); }

static CUresult host_register(void *p, size_t size, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!p || size == 0 || (flags & ~0xfu)) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & 0x08u) && !cfg.read_only_register) return CUDA_ERROR_NOT_SUPPORTED;
    /* Like the real driver, registration locks whole pages: ranges that share a page conflict. */
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095, hi = ((uintptr_t)p + size + 4095) & ~(uintptr_t)4095;
    for (size_t i = 0; i < registrations.len; i++) {
        uintptr_t b = (uintptr_t)registrations.items[i].base & ~(uintptr_t)4095;
        uintptr_t e = ((uintptr_t)registrations.items[i].base + registrations.items[i].size + 4095) & ~(uintptr_t)4095;
        if (lo < e && b < hi) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if (!list_push(&registrations, (struct region){p, size, (int)flags})) return CUDA_ERROR_OUT_OF_MEMORY;
    last_register_flags = flags;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags) { LOCKED(host_register(p, size, flags)); }

static CUresult host_unregister(void *p) {
    CUresult r = need_ctx();
    if (r) return r;
    for (size_t i = 0; i < registrations.len; i++)
        if (registrations.items[i].base == p) {
            list_remove(&registrations, i);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}
EXPORT CUresult cuMemHostUnregister(void *p) { LOCKED(host_unregister(p)); }

/* ---- copies ------------------------------------------------------------------------------------------- */

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s, int async) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = check_stream(s))) return r;
    if (n == 0) return CUDA_SUCCESS;
    unsigned char *d = device_range(dst, n);
    if (!d || !src) return CUDA_ERROR_INVALID_VALUE;
    if (async && !host_is_locked(src, n)) pageable_async++;
    return do_copy(d, src, n);
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { LOCKED(htod(dst, src, n, NULL, 0)); }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    LOCKED(htod(dst, src, n, s, 1));
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s, int async) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = check_stream(s))) return r;
    if (n == 0) return CUDA_SUCCESS;
    unsigned char *p = device_range(src, n);
    if (!p || !dst) return CUDA_ERROR_INVALID_VALUE;
    if (async && !host_is_locked(dst, n)) pageable_async++;
    return do_copy(dst, p, n);
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { LOCKED(dtoh(dst, src, n, NULL, 0)); }
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    LOCKED(dtoh(dst, src, n, s, 1));
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    CUresult r = need_ctx();
    if (r) return r;
    if (n == 0) return CUDA_SUCCESS;
    unsigned char *d = device_range(dst, n), *s = device_range(src, n);
    if (!d || !s) return CUDA_ERROR_INVALID_VALUE;
    if (d < s + n && s < d + n) return CUDA_ERROR_INVALID_VALUE;
    return do_copy(d, s, n);
}
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { LOCKED(dtod(dst, src, n)); }

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

/* Each pointer must belong to its context's device; the contexts must be live primary contexts. */
static CUresult peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext both[2] = {dctx, sctx};
    for (int k = 0; k < 2; k++)
        if (!both[k] || both[k] < &contexts[0] || both[k] >= &contexts[cfg.n_visible] || both[k]->refcount <= 0)
            return CUDA_ERROR_INVALID_CONTEXT;
    if (n == 0) return CUDA_SUCCESS;
    if (device_of(dst, n) != dctx->device || device_of(src, n) != sctx->device) return CUDA_ERROR_INVALID_VALUE;
    unsigned char *d = device_range(dst, n), *s = device_range(src, n);
    if (d < s + n && s < d + n) return CUDA_ERROR_INVALID_VALUE;
    peer_copies++;
    return do_copy(d, s, n);
}
EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
    LOCKED(peer(dst, dctx, src, sctx, n));
}

/* ---- streams and events ------------------------------------------------------------------------------- */

static CUresult stream_create(CUstream *ps, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!ps || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
    CUstream s = calloc(1, sizeof *s);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = current;
    if (!handles_push((void ***)&streams, &n_streams, &cap_streams, s)) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ps = s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamCreate(CUstream *ps, unsigned int flags) { LOCKED(stream_create(ps, flags)); }

static CUresult stream_destroy(CUstream s) {
    CUresult r = need_ctx();
    if (r) return r;
    long i = s ? handles_find(streams, n_streams, s) : -1;
    if (i < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (s->ctx != current) return CUDA_ERROR_INVALID_CONTEXT;
    streams[i] = streams[--n_streams];
    free(s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { LOCKED(stream_destroy(s)); }

static CUresult stream_sync(CUstream s) {
    CUresult r = need_ctx();
    if (r) return r;
    return check_stream(s);
}
EXPORT CUresult cuStreamSynchronize(CUstream s) { LOCKED(stream_sync(s)); }

/* The event may belong to another context than the stream (as with the real driver); work runs at enqueue
 * time here, so there is nothing to wait for beyond validating and counting. */
static CUresult stream_wait_event(CUstream s, CUevent e, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if ((r = check_stream(s))) return r;
    if (!e || handles_find(events, n_events, e) < 0) return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    stream_wait_events++;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) { LOCKED(stream_wait_event(s, e, flags)); }

static CUresult event_create(CUevent *pe, unsigned int flags) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!pe || (flags & ~0xfu)) return CUDA_ERROR_INVALID_VALUE;
    CUevent e = calloc(1, sizeof *e);
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = current;
    if (!handles_push((void ***)&events, &n_events, &cap_events, e)) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pe = e;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventCreate(CUevent *pe, unsigned int flags) { LOCKED(event_create(pe, flags)); }

static CUresult event_check(CUevent e) {
    CUresult r = need_ctx();
    if (r) return r;
    if (!e || handles_find(events, n_events, e) < 0) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent e, CUstream s) {
    CUresult r = event_check(e);
    if (r) return r;
    if ((r = check_stream(s))) return r;
    if (e->ctx != current) return CUDA_ERROR_INVALID_HANDLE;
    e->pending_queries = cfg.event_not_ready;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { LOCKED(event_record(e, s)); }

static CUresult event_query(CUevent e) {
    CUresult r = event_check(e);
    if (r) return r;
    if (e->pending_queries > 0) {
        e->pending_queries--;
        return CUDA_ERROR_NOT_READY;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventQuery(CUevent e) { LOCKED(event_query(e)); }

static CUresult event_sync(CUevent e) {
    CUresult r = event_check(e);
    if (r) return r;
    e->pending_queries = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventSynchronize(CUevent e) { LOCKED(event_sync(e)); }

static CUresult event_destroy(CUevent e) {
    CUresult r = event_check(e);
    if (r) return r;
    long i = handles_find(events, n_events, e);
    events[i] = events[--n_events];
    free(e);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) { LOCKED(event_destroy(e)); }

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

QUERY(stand_in_live_allocations, allocations.len)
QUERY(stand_in_live_device_bytes, live_device_bytes())
QUERY(stand_in_total_allocations, total_allocs)
QUERY(stand_in_live_pinned, pinned.len)
QUERY(stand_in_live_registrations, registrations.len)
QUERY(stand_in_last_register_flags, last_register_flags)
QUERY(stand_in_live_streams, n_streams)
QUERY(stand_in_live_events, n_events)
QUERY(stand_in_context_retains, retains)
QUERY(stand_in_live_contexts, live_contexts())
QUERY(stand_in_bytes_copied, bytes_copied)
QUERY(stand_in_pageable_async_copies, pageable_async)
QUERY(stand_in_peer_copies, peer_copies)
QUERY(stand_in_stream_wait_events, stream_wait_events)

__attribute__((destructor)) static void leak_report(void) {
    if (!cfg.leak_report) return;
    fprintf(stderr,
            "stand-in cuda: at exit: %llu device allocations (%llu bytes), %llu pinned, %llu registrations, "
            "%llu streams, %llu events live; %llu primary contexts retained\n",
            stand_in_live_allocations(), stand_in_live_device_bytes(), stand_in_live_pinned(),
            stand_in_live_registrations(), stand_in_live_streams(), stand_in_live_events(), stand_in_live_contexts());
}
