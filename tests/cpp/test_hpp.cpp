// C++ RAII wrapper test: compiled with -std=c++17 -Wall -Wextra -Werror and run by tests/cpp.rs.
#include <cassert>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#undef NDEBUG
#include "hostfirst.hpp"

#define REQUIRE(c)                                                              \
    do {                                                                        \
        if (!(c)) {                                                             \
            std::fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #c); \
            return 1;                                                           \
        }                                                                       \
    } while (0)

static int files_views_dlpack(const std::string &fixtures) {
    size_t base = hostfirst::handle_count();
    hostfirst_view_info info{};
    std::vector<int32_t> want;
    hostfirst::dlpack_tensor exported(nullptr);
    {
        auto f = hostfirst::file::open(fixtures + "/basic.safetensors");
        REQUIRE(f.size() == 16 && f.names()[0] == "u64" && f.contains("i32") && !f.contains("nope"));
        REQUIRE(f.metadata().at("format") == "pt");
        hostfirst::view v = f.view("i32");
        REQUIRE(v.name() == "i32" && v.dtype() == HOSTFIRST_DTYPE_I32 && v.dtype_name() == "I32");
        REQUIRE(v.shape() == std::vector<uint64_t>({2, 3}) && v.nbytes() == 24);
        want = v.to_vector<int32_t>();
        REQUIRE(want.size() == 6);
        REQUIRE(v.prefault()); /* a file view: its pages are mapped */
        hostfirst::view rows = v.slice_rows(1, 2);
        REQUIRE(rows.shape() == std::vector<uint64_t>({1, 3}));
        REQUIRE(static_cast<const char *>(rows.data()) == static_cast<const char *>(v.data()) + 12);
        REQUIRE(rows.to_vector<int32_t>() == std::vector<int32_t>(want.begin() + 3, want.end()));
        hostfirst::view col = v.narrow(1, 1, 2); /* columns 1..3: strided, packed on copy */
        REQUIRE(col.shape() == std::vector<uint64_t>({2, 2}) && col.nbytes() == 16 && col.info().strides != nullptr);
        REQUIRE(col.to_vector<int32_t>() == std::vector<int32_t>({want[1], want[2], want[4], want[5]}));
        hostfirst::view moved = std::move(rows);
        REQUIRE(moved.nbytes() == 12);
        info = v.info();
        exported = v.to_dlpack();
        REQUIRE(exported.read_only() && exported->version.major == 1 && exported->version.minor == 1);
        REQUIRE(exported->dl_tensor.device.device_type == HOSTFIRST_DLPACK_DEVICE_CPU);
        REQUIRE(exported->dl_tensor.dtype.code == 0 && exported->dl_tensor.dtype.bits == 32);
        REQUIRE(exported->dl_tensor.ndim == 2 && exported->dl_tensor.shape[1] == 3);
        bool threw = false;
        try {
            (void)f.view("nope");
        } catch (const hostfirst::error &e) {
            threw = e.status() == HOSTFIRST_STATUS_NOT_FOUND && std::string(e.what()).find("nope") != std::string::npos;
        }
        REQUIRE(threw);
        threw = false;
        try {
            (void)v.slice_rows(2, 1);
        } catch (const hostfirst::error &e) {
            threw = e.status() == HOSTFIRST_STATUS_OUT_OF_RANGE;
        }
        REQUIRE(threw);
    }
    /* file and views gone: the export keeps the mapping */
    REQUIRE(hostfirst::handle_count() == base + 1);
    REQUIRE(exported->dl_tensor.data == info.data);
    REQUIRE(std::memcmp(exported->dl_tensor.data, want.data(), 24) == 0);
    exported.reset();
    REQUIRE(hostfirst::handle_count() == base);

    bool threw = false;
    try {
        hostfirst::buffer none(nullptr);
        (void)none.to_dlpack();
    } catch (const hostfirst::error &e) {
        threw = e.status() == HOSTFIRST_STATUS_NULL_ARGUMENT;
    }
    REQUIRE(threw);
    threw = false;
    try {
        (void)hostfirst::file::open(fixtures + "/missing.safetensors");
    } catch (const hostfirst::error &e) {
        threw = e.status() == HOSTFIRST_STATUS_IO;
    }
    REQUIRE(threw);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: test_hpp FIXTURES_DIR\n");
        return 2;
    }
    if (files_views_dlpack(argv[1]) != 0) return 1;
    hostfirst::check_version();
    auto bs = hostfirst::backends();
    REQUIRE(bs.size() == 2 && bs[0].name == "cpu" && bs[0].status == "available");
    auto devs = hostfirst::devices();
    REQUIRE(!devs.empty() && devs[0].spec() == "cpu:0");
    REQUIRE(devs[0].info().total_memory > 0);

    bool threw = false;
    try {
        hostfirst::device bad("tpu:0");
    } catch (const hostfirst::error &e) {
        threw = e.status() == HOSTFIRST_STATUS_INVALID_ARGUMENT && std::string(e.what()).find("tpu") != std::string::npos;
    }
    REQUIRE(threw);

    {
        hostfirst::scope s("cpu");
        auto d = hostfirst::default_device();
        REQUIRE(d.source == "scope" && d.depth == 1 && d.device == hostfirst::device::cpu());
        hostfirst::carried_scope carried;
        std::thread worker([&] {
            auto g = carried.enter();
            auto w = hostfirst::default_device();
            if (w.source != "scope" || w.depth != 1) std::abort();
        });
        worker.join();
        {
            hostfirst::scope inner("cpu:0");
            threw = false;
            try {
                s.pop();  // not innermost
            } catch (const hostfirst::error &e) {
                threw = e.status() == HOSTFIRST_STATUS_SCOPE_MISMATCH;
            }
            REQUIRE(threw);
        }
        REQUIRE(hostfirst::default_device().depth == 1);
    }
    REQUIRE(hostfirst::default_device().depth == 0);
    {
        hostfirst::strict_guard strict;
        threw = false;
        try {
            (void)hostfirst::device::target("default");
        } catch (const hostfirst::error &e) {
            threw = e.status() == HOSTFIRST_STATUS_IMPLICIT_PLACEMENT;
        }
        REQUIRE(threw);
    }
    REQUIRE(hostfirst::device::target("default").kind() != 0);
    return 0;
}
