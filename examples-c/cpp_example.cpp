// hostfirst from C++17: the census, a default-device scope, and host-first loading of a token file with
// zero-copy row slices and a DLPack export. Build: c++ -std=c++17 -Iinclude cpp_example.cpp -lhostfirst
//     ./cpp_example tokens.safetensors [tensor-name]
#include <cstdio>
#include <string>

#include "hostfirst.hpp"

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s FILE.safetensors [TENSOR]\n", argv[0]);
        return 2;
    }
    try {
        hostfirst::check_version();
        for (const auto &b : hostfirst::backends())
            std::printf("backend %s: %s %s\n", b.name.c_str(), b.status.c_str(), b.reason.c_str());
        hostfirst::scope on_cpu("cpu");  // this thread's default, popped at the end of main
        auto d = hostfirst::default_device();
        std::printf("default: %s (%s)\n", d.device.spec().c_str(), d.source.c_str());

        auto file = hostfirst::file::open(argv[1]);  // header only: the data stays mapped, untouched
        std::string name = argc > 2 ? argv[2] : file.names().at(0);
        hostfirst::view tensor = file.view(name);
        std::printf("%s: %s [", name.c_str(), tensor.dtype_name().c_str());
        for (auto dim : tensor.shape()) std::printf(" %llu", static_cast<unsigned long long>(dim));
        std::printf(" ], %llu bytes\n", static_cast<unsigned long long>(tensor.nbytes()));

        if (!tensor.shape().empty() && tensor.shape()[0] > 0) {
            hostfirst::view head = tensor.slice_rows(0, tensor.shape()[0] < 4 ? tensor.shape()[0] : 4);
            std::vector<uint8_t> bytes = head.bytes();  // pread: TRUNCATED instead of SIGBUS
            std::printf("first rows: %zu bytes, first byte %u\n", bytes.size(), bytes.empty() ? 0u : bytes[0]);
        }
        hostfirst::dlpack_tensor dl = tensor.to_dlpack();  // hand dl.release() to any DLPack consumer
        std::printf("dlpack %u.%u: device %d, code %u bits %u, read-only %s\n", dl->version.major,
                    dl->version.minor, dl->dl_tensor.device.device_type, dl->dl_tensor.dtype.code,
                    dl->dl_tensor.dtype.bits, dl.read_only() ? "yes" : "no");
    } catch (const hostfirst::error &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    return 0;
}
