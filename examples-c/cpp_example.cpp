// hostfirst from C++17, the host-first story: the census, a default-device scope, a token file opened
// host-first (zero-copy row slices, a DLPack export), rules that keep the big tensor on the host and send
// everything else to the default device, the plan with its warnings about rules that place nothing, the
// load, and a training batch gathered from the token tensor onto the default device.
// Build: c++ -std=c++17 -Iinclude cpp_example.cpp -lhostfirst
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

        // The big tensor stays a zero-copy host view; everything else goes to the default device.
        hostfirst::rules rules;
        rules.add(name, "host").add("*", "default");
        auto plan = hostfirst::plan::make(file, rules);  // a dry run: nothing allocated yet
        for (size_t i = 0; i < plan.tensor_count(); i++) {
            auto t = plan.tensor(i);
            std::string where = t.placement == HOSTFIRST_PLACEMENT_HOST ? "host" : hostfirst::device(t.device).spec();
            std::printf("plan: %s -> %s\n", t.name, where.c_str());
        }
        for (size_t i = 0; i < plan.device_count(); i++) {
            auto dev = plan.device(i);
            std::printf("plan: %s gets %llu bytes, fits %s\n", hostfirst::device(dev.device).spec().c_str(),
                        static_cast<unsigned long long>(dev.bytes), dev.fits ? "yes" : "NO");
        }
        for (const auto &u : plan.unmatched_rules()) std::printf("warning: %s\n", u.message);  // typos show here
        auto loaded = hostfirst::load::run(file, plan);
        std::printf("loaded %zu tensors; %s is a %s\n", loaded.size(), name.c_str(),
                    loaded.kind(name) == HOSTFIRST_LOADED_VIEW ? "host view" : "device buffer");

        // A training batch: 4 windows of 8 tokens at random offsets, gathered onto the default device.
        auto shape = tensor.shape();
        if (shape.size() == 1 && shape[0] > 8 && hostfirst::dtype::bits(tensor.dtype()) % 8 == 0) {
            hostfirst::device target = hostfirst::resolve_default_device();
            hostfirst::gather gather(target, tensor.dtype(), 4, 8);
            uint64_t seed = 1234;
            std::vector<uint64_t> offsets = hostfirst::random_offsets(seed, shape[0], 8, 4);
            hostfirst::buffer batch = gather.run(tensor, offsets);        // not rewritten while `batch` lives
            std::printf("batch [4, 8] on %s; row 0 from offset %llu:", batch.device().spec().c_str(),
                        static_cast<unsigned long long>(offsets[0]));
            if (tensor.dtype() == HOSTFIRST_DTYPE_U16) {
                std::vector<uint16_t> rows = batch.to_vector<uint16_t>();  // a host copy, from any device
                for (size_t i = 0; i < 8; i++) std::printf(" %u", rows[i]);
            }
            std::printf("\n");
        }
    } catch (const hostfirst::error &e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    return 0;
}
