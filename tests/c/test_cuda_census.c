/* The CUDA census through the C ABI, against the stand-in driver with STAND_IN_DEVICES=2 and default knobs
 * (16 GiB per device, 256 MiB per retained context, driver 12.8, deterministic UUIDs and PCI ids).
 * Run by tests/cuda_stub.rs; the stand-in's counters are read through dlsym. On Windows (tests/it/windows.rs, under
 * Wine) the stand-in is nvcuda.dll, with nvml.dll forwarding to it, and the counters are read with GetProcAddress. */
#include <stdint.h>
#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#else
#include <dlfcn.h>
#endif
#include "check.h"

#ifdef _WIN32
static HMODULE stand_in;
#else
static void *stand_in;
#endif

static unsigned long long counter(const char *name) {
    unsigned long long (*f)(void);
#ifdef _WIN32
    *(FARPROC *)&f = GetProcAddress(stand_in, name);
#else
    *(void **)&f = dlsym(stand_in, name);
#endif
    CHECK(f != NULL);
    return f();
}

#define GIB (1024ull * 1024ull * 1024ull)
#define RESERVE (256ull * 1024ull * 1024ull)
static const char *UUID0 = "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf";
static const char *UUID1 = "GPU-b0b1b2b3-b4b5-b6b7-b8b9-babbbcbdbebf";

static void test_backend(void) {
    hostfirst_backend_info b = {.struct_size = sizeof b};
    CHECK_OK(hostfirst_backend_describe(1, &b));
    CHECK(strcmp(b.name, "cuda") == 0);
    CHECK(b.status == HOSTFIRST_BACKEND_STATUS_AVAILABLE);
    CHECK(b.device_count == 2);
    CHECK(strcmp(b.driver_version, "12.8") == 0);
    CHECK(strcmp(b.reason, "") == 0);
}

static void test_devices(void) {
    hostfirst_device devs[8];
    size_t n = 0;
    CHECK_OK(hostfirst_devices(devs, 8, &n));
    CHECK(n == 3);
    CHECK(devs[0].kind == HOSTFIRST_DEVICE_CPU);
    for (int i = 1; i <= 2; i++) CHECK(devs[i].kind == HOSTFIRST_DEVICE_CUDA && devs[i].ordinal == i - 1);
    CHECK_STATUS(hostfirst_devices(devs, 2, &n), HOSTFIRST_STATUS_BUFFER_TOO_SMALL);
    CHECK(n == 3);

    hostfirst_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(hostfirst_device_describe(devs[1], &info));
    CHECK(strcmp(info.name, "Stand-in GPU 0") == 0);
    CHECK(strcmp(info.uuid, UUID0) == 0);
    CHECK(strcmp(info.pci_bus_id, "0000:17:00.0") == 0);
    CHECK(info.compute_capability_major == 9 && info.compute_capability_minor == 0);
    CHECK(info.multiprocessor_count == 132);
    CHECK(info.total_memory == 16 * GIB);
    CHECK_OK(hostfirst_device_describe(devs[2], &info));
    CHECK(strcmp(info.uuid, UUID1) == 0);
    CHECK(strcmp(info.pci_bus_id, "0000:37:00.0") == 0);
    hostfirst_device c2 = {HOSTFIRST_DEVICE_CUDA, 2};
    CHECK_STATUS(hostfirst_device_describe(c2, &info), HOSTFIRST_STATUS_NO_SUCH_DEVICE);
    hostfirst_device host = {HOSTFIRST_DEVICE_CUDA_HOST, 0};
    CHECK_OK(hostfirst_device_describe(host, &info));
    CHECK(strcmp(info.uuid, "") == 0);
}

static void test_specs(void) {
    hostfirst_device d = {0, 0};
    CHECK_OK(hostfirst_device_parse("cuda:1", &d));
    CHECK(d.kind == HOSTFIRST_DEVICE_CUDA && d.ordinal == 1);
    CHECK_OK(hostfirst_device_parse(" GPU ", &d));
    CHECK(d.kind == HOSTFIRST_DEVICE_CUDA && d.ordinal == 0);
    CHECK_OK(hostfirst_device_parse("cuda_host", &d));
    CHECK(d.kind == HOSTFIRST_DEVICE_CUDA_HOST && d.ordinal == 0);
    char spec[64];
    snprintf(spec, sizeof spec, "cuda:%s", UUID1);
    CHECK_OK(hostfirst_device_parse(spec, &d));
    CHECK(d.kind == HOSTFIRST_DEVICE_CUDA && d.ordinal == 1);
    snprintf(spec, sizeof spec, "CUDA:%s", UUID0);
    CHECK_OK(hostfirst_device_parse(spec, &d));
    CHECK(d.ordinal == 0);
    d.kind = 0;
    CHECK_STATUS(hostfirst_device_parse("cuda:2", &d), HOSTFIRST_STATUS_NO_SUCH_DEVICE);
    CHECK(d.kind == 0);
    CHECK_MSG("devices present");
    CHECK_MSG("cuda:1");
    CHECK_STATUS(hostfirst_device_parse("cuda:GPU-00000000-0000-0000-0000-000000000000", &d),
                 HOSTFIRST_STATUS_NO_SUCH_DEVICE);

    hostfirst_device def;
    uint32_t source = 99;
    CHECK_OK(hostfirst_default_device(&def, &source, NULL));
    CHECK(def.kind == HOSTFIRST_DEVICE_CUDA && def.ordinal == 0);
    CHECK(source == HOSTFIRST_DEFAULT_SOURCE_BUILT_IN);
}

/* Free memory: through NVML without creating a context (the stand-in answers NVML too), or, with NVML
 * unavailable (STAND_IN_NVML=0), through cuMemGetInfo, which retains each device's primary context once. */
static void test_memory_without_contexts(void) {
    /* Nothing so far (census, describe, parse) created a context or allocated anything. */
    CHECK(counter("stand_in_context_retains") == 0);
    CHECK(counter("stand_in_live_allocations") == 0);
    const char *nvml_knob = getenv("STAND_IN_NVML");
    int nvml = !(nvml_knob && strcmp(nvml_knob, "0") == 0);

    hostfirst_device host = {HOSTFIRST_DEVICE_CUDA_HOST, 0};
    uint64_t free_b = 0, total_b = 0;
    CHECK_OK(hostfirst_device_memory(host, &free_b, &total_b));
    CHECK(counter("stand_in_context_retains") == 0); /* cuda_host reports host memory */

    hostfirst_device c0 = {HOSTFIRST_DEVICE_CUDA, 0}, c1 = {HOSTFIRST_DEVICE_CUDA, 1};
    CHECK_OK(hostfirst_device_memory(c0, &free_b, &total_b));
    CHECK(total_b == 16 * GIB);
    CHECK(free_b == (nvml ? 16 * GIB : 16 * GIB - RESERVE)); /* no context, no context reserve */
    CHECK(counter("stand_in_context_retains") == (nvml ? 0 : 1));
    CHECK_OK(hostfirst_device_memory(c0, &free_b, NULL));
    CHECK_OK(hostfirst_device_memory(c1, NULL, &total_b));
    CHECK(counter("stand_in_context_retains") == (nvml ? 0 : 2)); /* retained once per device */
    CHECK(counter("stand_in_live_contexts") == (nvml ? 0 : 2));
    CHECK(counter("stand_in_nvml_memory_queries") == (nvml ? 3 : 0));
    hostfirst_device c5 = {HOSTFIRST_DEVICE_CUDA, 5};
    CHECK_STATUS(hostfirst_device_memory(c5, &free_b, &total_b), HOSTFIRST_STATUS_NO_SUCH_DEVICE);
    CHECK(counter("stand_in_live_allocations") == 0);
}

int main(void) {
#ifdef _WIN32
    /* The census loads nvcuda.dll (from beside this program): take it first, then find the loaded module. */
    test_backend();
    stand_in = GetModuleHandleA("nvcuda.dll");
    CHECK(stand_in != NULL);
#else
    /* Loads nothing new: the same libcuda.so.1 hostfirst finds on LD_LIBRARY_PATH. */
    stand_in = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(stand_in != NULL);
    test_backend();
#endif
    test_devices();
    test_specs();
    test_memory_without_contexts();
#ifndef _WIN32
    dlclose(stand_in);
#endif
    return 0;
}
