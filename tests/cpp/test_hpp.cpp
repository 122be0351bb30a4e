// C++ RAII wrapper test: compiled with -std=c++17 -Wall -Wextra -Werror and run by tests/cpp.rs.
#include <cassert>
#include <cstdio>
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

int main() {
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
