// C++ RAII wrapper test: compiled with -std=c++17 -Wall -Wextra -Werror and run by tests/cpp.rs.
#include <cassert>
#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#undef NDEBUG
#define HOSTFIRST_EXPERIMENTAL /* every wrapper, the experimental ones too */
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
        /* A fixture on the local disk: mapped, and the report says so (hostfirst_file_read_engine). */
        REQUIRE(f.read_engine().find(": mapped (") != std::string::npos);
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


/* Runs `f`, which must throw hostfirst::error with `want`; returns false (and says what happened) otherwise. */
template <class F>
static bool throws(hostfirst_status want, F &&f, const char *what_contains = nullptr) {
    try {
        f();
    } catch (const hostfirst::error &e) {
        if (e.status() != want || (what_contains && std::string(e.what()).find(what_contains) == std::string::npos)) {
            std::fprintf(stderr, "threw %s, wanted %s: %s\n", e.status_name(), hostfirst_status_name(want), e.what());
            return false;
        }
        return true;
    }
    std::fprintf(stderr, "did not throw %s\n", hostfirst_status_name(want));
    return false;
}

/* tokens.safetensors: U16 [4096]; its first ten values. */
static const uint16_t TOKENS0[10] = {46058, 12944, 40309, 6247, 10475, 29944, 7466, 21755, 7255, 49912};

static int views_buffers_puts(const std::string &fixtures) {
    size_t base = hostfirst::handle_count();
    {
        auto f = hostfirst::file::open(fixtures + "/basic.safetensors");
        REQUIRE(f.path() && *f.path() == fixtures + "/basic.safetensors");
        REQUIRE(f.metadata("format") == std::optional<std::string>("pt") && !f.metadata("nope"));
        hostfirst::view v = f.view("i32"); /* [[-3, -2, -1], [0, 1, 2]] */
        std::vector<uint8_t> mid = v.bytes(4, 8);
        REQUIRE(mid == std::vector<uint8_t>({0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
        int32_t last = 0;
        v.read(20, &last, sizeof last);
        REQUIRE(last == 2);
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { (void)v.bytes(20, 8); }));
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { (void)v.narrow(1, 2, 2); }));
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { (void)v.narrow(2, 0, 1); }));
        REQUIRE(hostfirst::handle_count() == base + 2); /* nothing leaked by the failures */

        hostfirst::buffer b = v.put(hostfirst::device::cpu());
        auto bi = b.info();
        REQUIRE(b.name() == "i32" && b.dtype() == HOSTFIRST_DTYPE_I32 && b.nbytes() == 24);
        REQUIRE(b.shape() == std::vector<uint64_t>({2, 3}) && b.device() == hostfirst::device::cpu());
        REQUIRE(b.to_vector<int32_t>() == std::vector<int32_t>({-3, -2, -1, 0, 1, 2}));
        REQUIRE(!b.is_file_backed());
        b.sync_stream(-1); /* host buffers: nothing to wait for */
        b.record_stream(1);
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { b.sync_stream(0); }));
        REQUIRE(throws(HOSTFIRST_STATUS_BUFFER_TOO_SMALL, [&] {
            int32_t small[2];
            b.copy_to(small, sizeof small);
        }));
        hostfirst::buffer b2 = b.to(hostfirst::device("cpu"));
        REQUIRE(b2.info().address != bi.address && b2.bytes() == b.bytes());

        hostfirst::put_options cow;
        cow.copy_on_write = 1;
        hostfirst_put_stats st{};
        hostfirst::buffer r = v.put(hostfirst::device::cpu(), cow, &st);
        REQUIRE(r.is_file_backed() && st.struct_size == sizeof(hostfirst_put_stats) && st.staged_instead == 0);
        REQUIRE(r.to_vector<int32_t>() == b.to_vector<int32_t>());
        const hostfirst::device no_kind(hostfirst_device{static_cast<hostfirst_device_kind>(7), 0});
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { (void)v.put(no_kind); }));

        hostfirst::put_op op = v.put_start(hostfirst::device::cpu());
        while (!op.poll()) std::this_thread::yield();
        hostfirst::buffer async = op.wait();
        REQUIRE(async.to_vector<int32_t>() == b.to_vector<int32_t>());
        REQUIRE(throws(HOSTFIRST_STATUS_ALREADY_USED, [&] { (void)op.wait(); }));
        REQUIRE(throws(HOSTFIRST_STATUS_ALREADY_USED, [&] { (void)op.poll(); }));

        /* DLPack: the legacy form of a buffer shares its memory; a copy on request (the options). */
        hostfirst::dlpack_legacy_tensor bl = b.to_dlpack_legacy();
        REQUIRE(reinterpret_cast<uintptr_t>(bl->dl_tensor.data) == bi.address && !bl.read_only());
        hostfirst::dlpack_options always;
        REQUIRE(always.max_version.major == 0 && always.legacy == 0); /* the defaults: zero, a DLPack 1.1 consumer */
        always.copy = HOSTFIRST_DLPACK_COPY_ALWAYS;
        hostfirst::dlpack_tensor bx = b.to_dlpack(always);
        REQUIRE(bx && bx.is_copied());
        REQUIRE(reinterpret_cast<uintptr_t>(bx->dl_tensor.data) != bi.address);
        REQUIRE(std::memcmp(bx->dl_tensor.data, b.bytes().data(), 24) == 0);
        hostfirst::dlpack_legacy_tensor vl = v.to_dlpack_legacy(); /* a copy-on-write mapping: writable */
        REQUIRE(std::memcmp(vl->dl_tensor.data, v.bytes().data(), 24) == 0 && vl->dl_tensor.ndim == 2);
        hostfirst::dlpack_options v0; /* asks the legacy form: to_dlpack refuses it (the output it has is NULL) */
        v0.legacy = 1;
        REQUIRE(throws(HOSTFIRST_STATUS_NULL_ARGUMENT, [&] { (void)v.to_dlpack(v0); }));
        hostfirst::dlpack_tensor vv = v.to_dlpack();
        REQUIRE(vv && vv.read_only() && vv->dl_tensor.data == v.data());
        /* release() hands the tensor on: the receiver calls the deleter */
        hostfirst_dlpack_managed_tensor *raw = vl.release();
        REQUIRE(!vl && raw);
        raw->deleter(raw);
    }
    REQUIRE(hostfirst::handle_count() == base);

    /* a memory view has no file to map: the legacy form must copy, which COPY_NEVER refuses */
    std::vector<uint8_t> image;
    {
        auto f = hostfirst::file::open(fixtures + "/basic.safetensors");
        FILE *fp = std::fopen((fixtures + "/basic.safetensors").c_str(), "rb");
        REQUIRE(fp);
        image.resize(4096);
        image.resize(std::fread(image.data(), 1, image.size(), fp));
        std::fclose(fp);
        auto m = hostfirst::file::open_memory(image.data(), image.size());
        REQUIRE(!m.path() && m.size() == f.size());
        hostfirst::dlpack_options never;
        never.copy = HOSTFIRST_DLPACK_COPY_NEVER;
        REQUIRE(throws(HOSTFIRST_STATUS_UNSUPPORTED, [&] { (void)m.view("i32").to_dlpack_legacy(never); }));
    }
    REQUIRE(hostfirst::handle_count() == base);

    /* sharded set through its index */
    {
        auto s = hostfirst::file::open(fixtures + "/sharded/model.safetensors.index.json");
        REQUIRE(s.size() == 4 && s.metadata("total_size") == std::optional<std::string>("164"));
        REQUIRE(s.contains("layers.1.w") && s.path()->find("model.safetensors.index.json") != std::string::npos);
    }
    hostfirst::release_cached_memory();
    REQUIRE(hostfirst::handle_count() == base);
    return 0;
}

static int rules_plans_loads(const std::string &fixtures) {
    size_t base = hostfirst::handle_count();
    {
        auto f = hostfirst::file::open(fixtures + "/basic.safetensors");
        hostfirst::rules r;
        r.add("i32", "cpu").add("f*=host").add("i3?", "cpu").add("token=host");
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { r.add("x", "tpu:0"); }, "tpu"));
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { r.add("x", "nowhere"); }));
        auto p = hostfirst::plan::make(f, r);
        REQUIRE(p.tensor_count() == 16);
        auto t8 = p.tensor(8); /* i32 */
        REQUIRE(std::string(t8.name) == "i32" && t8.placement == HOSTFIRST_PLACEMENT_DEVICE && t8.rule == 0);
        REQUIRE(t8.nbytes == 24 && hostfirst::device(t8.device) == hostfirst::device::cpu());
        auto t0 = p.tensor(0); /* u64: no rule */
        REQUIRE(t0.placement == HOSTFIRST_PLACEMENT_HOST && t0.rule == -1);
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { (void)p.tensor(16); }));
        REQUIRE(p.device_count() == 1);
        auto d0 = p.device(0);
        REQUIRE(d0.bytes == 24 && d0.tensors == 1 && d0.fits == 1 && std::string(d0.largest_name) == "i32");
        /* rule 2 is shadowed by rule 0; rule 3 matches nothing (a typo of no tensor) */
        auto un = p.unmatched_rules();
        REQUIRE(p.unmatched_rule_count() == 2 && un.size() == 2);
        REQUIRE(un[0].rule == 2 && un[0].shadowed_by == 0 && std::string(un[0].pattern) == "i3?");
        REQUIRE(un[1].rule == 3 && un[1].shadowed_by == -1 && std::string(un[1].target) == "host");
        REQUIRE(un[1].message && std::string(un[1].message).find("token") != std::string::npos);
        {
            hostfirst::strict_guard strict;
            REQUIRE(throws(HOSTFIRST_STATUS_UNMATCHED_RULE, [&] { (void)hostfirst::plan::make(f, r); }, "token"));
        }
        auto l = hostfirst::load::run(f, p);
        REQUIRE(l.size() == 16 && l.kind("i32") == HOSTFIRST_LOADED_BUFFER && l.kind("u8") == HOSTFIRST_LOADED_VIEW);
        hostfirst::loaded i32 = l.get("i32");
        REQUIRE(i32.kind == HOSTFIRST_LOADED_BUFFER && i32.view.c() == nullptr);
        REQUIRE(i32.buffer.to_vector<int32_t>() == std::vector<int32_t>({-3, -2, -1, 0, 1, 2}));
        hostfirst::loaded u8 = l.get("u8");
        REQUIRE(u8.kind == HOSTFIRST_LOADED_VIEW && u8.buffer.c() == nullptr);
        REQUIRE(u8.view.bytes() == std::vector<uint8_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
        REQUIRE(throws(HOSTFIRST_STATUS_NOT_FOUND, [&] { (void)l.get("nope"); }));
        auto entries = l.entries();
        auto names = l.names();
        REQUIRE(entries.size() == 16 && names.size() == 16);
        size_t seen = 0;
        for (size_t i = 0; i < entries.size(); i++) {
            REQUIRE(names[i] == entries[i].name && entries[i].struct_size == sizeof(hostfirst_load_entry));
            if (names[i] == "i32") {
                seen++;
                auto bi = i32.buffer.info();
                REQUIRE(entries[i].kind == HOSTFIRST_LOADED_BUFFER && entries[i].nbytes == 24);
                REQUIRE(entries[i].address == bi.address && entries[i].rank == bi.rank && entries[i].shape == bi.shape);
            } else if (names[i] == "u8") {
                seen++;
                REQUIRE(entries[i].kind == HOSTFIRST_LOADED_VIEW && entries[i].nbytes == 10);
                REQUIRE(std::memcmp(reinterpret_cast<const void *>(static_cast<uintptr_t>(entries[i].address)),
                                    u8.view.bytes().data(), 10) == 0);
            }
        }
        REQUIRE(seen == 2);

        hostfirst::load_options cow;
        cow.copy_on_write = 1;
        auto lc = hostfirst::load::run(f, p, cow);
        REQUIRE(lc.get("i32").buffer.is_file_backed());
        cow.copy_on_write = 7;
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { (void)hostfirst::load::run(f, p, cow); }));
        auto other = hostfirst::file::open(fixtures + "/tokens.safetensors");
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { (void)hostfirst::load::run(other, p); }));
    }
    REQUIRE(hostfirst::handle_count() == base);
    return 0;
}

static int gathers_and_shards(const std::string &fixtures) {
    size_t base = hostfirst::handle_count();
    {
        auto f = hostfirst::file::open(fixtures + "/tokens.safetensors");
        hostfirst::view tokens = f.view("tokens");
        hostfirst::gather g(hostfirst::device::cpu(), HOSTFIRST_DTYPE_U16, 2, 4);
        REQUIRE(g.nbytes() == 16);
        g.run(tokens, {0, 6});
        REQUIRE(g.to_vector<uint16_t>() == std::vector<uint16_t>({TOKENS0[0], TOKENS0[1], TOKENS0[2], TOKENS0[3],
                                                                  TOKENS0[6], TOKENS0[7], TOKENS0[8], TOKENS0[9]}));
        REQUIRE(g.batch().to_vector<uint16_t>() == g.to_vector<uint16_t>());
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { g.run(tokens, {0, 4093}); }));
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { g.run(tokens, {0}); }));
        {
            hostfirst::buffer held = g.run(tokens, {1, 2});
            REQUIRE(held.shape() == std::vector<uint64_t>({2, 4}) && held.to_vector<uint16_t>()[0] == TOKENS0[1]);
            REQUIRE(g.ring().held == 1 && g.ring().bound == HOSTFIRST_GATHER_DEFAULT_RING_BOUND);
            g.set_ring_bound(1);
            REQUIRE(throws(HOSTFIRST_STATUS_BUSY, [&] { g.run(tokens, {0, 0}); }));
            REQUIRE(held.to_vector<uint16_t>()[4] == TOKENS0[2]); /* unchanged under its holder */
            REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { g.set_ring_bound(0); }));
        }
        /* the page-cache policy of later runs (1.1): bytes unchanged under drop, an unknown value refused */
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { g.set_page_cache(static_cast<hostfirst_page_cache>(3)); }));
        g.set_page_cache(HOSTFIRST_PAGE_CACHE_DROP);
        REQUIRE(g.run(tokens, {1, 2}).to_vector<uint16_t>()[0] == TOKENS0[1]);
        g.set_page_cache(HOSTFIRST_PAGE_CACHE_KEEP);
        REQUIRE(g.ring().held == 0);
        hostfirst::buffer host = tokens.put(hostfirst::device::cpu());
        hostfirst::buffer fb = g.run_from_buffer(host, {5, 0});
        REQUIRE(fb.to_vector<uint16_t>() == std::vector<uint16_t>({TOKENS0[5], TOKENS0[6], TOKENS0[7], TOKENS0[8],
                                                                   TOKENS0[0], TOKENS0[1], TOKENS0[2], TOKENS0[3]}));
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT,
                       [&] { hostfirst::gather bad(hostfirst::device::cpu(), HOSTFIRST_DTYPE_U16, 0, 4); }));
        {
            /* prefetched batches, in order, from the view and from the host buffer; then the end */
            hostfirst::gather_stream st(g, tokens, {0, 6, 3, 1, 5, 2}, 3, 2);
            for (uint64_t first : {0, 3, 5}) {
                std::optional<hostfirst::buffer> b = st.next();
                REQUIRE(b && b->to_vector<uint16_t>()[0] == TOKENS0[first]);
            }
            REQUIRE(!st.next());
            hostfirst::gather_stream sb(g, host, {5, 0}, 1, 1);
            REQUIRE(sb.next()->to_vector<uint16_t>()[4] == TOKENS0[0] && !sb.next());
            /* an open stream: batches pushed as the consumer goes, NOT_READY when all were handed out */
            hostfirst::gather_stream open(g, tokens, 2);
            open.push({3, 1, 5, 2}, 2);
            REQUIRE(open.next()->to_vector<uint16_t>()[0] == TOKENS0[3]);
            REQUIRE(open.next()->to_vector<uint16_t>()[0] == TOKENS0[5]);
            REQUIRE(throws(HOSTFIRST_STATUS_NOT_READY, [&] { (void)open.next(); }));
            REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { open.push({0, 4093}, 1); }));
            open.push({6, 0}, 1);
            open.end_input();
            REQUIRE(open.next()->to_vector<uint16_t>()[0] == TOKENS0[6] && !open.next());
            REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { open.push({0, 1}, 1); }));
            hostfirst::gather_stream open_host(g, host, 1);
            open_host.push({1, 0}, 1);
            open_host.end_input();
            REQUIRE(open_host.next()->to_vector<uint16_t>()[0] == TOKENS0[1] && !open_host.next());
            REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { hostfirst::gather_stream bad(g, tokens, {0, 4093}, 1, 2); }));
            REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { hostfirst::gather_stream bad(g, tokens, {0, 1}, 1, 0); }));
        }

        uint64_t s1 = 42, s2 = 42;
        auto o1 = hostfirst::random_offsets(s1, 4096, 8, 16);
        auto o2 = hostfirst::random_offsets(s2, 4096, 8, 16);
        REQUIRE(o1 == o2 && s1 == s2 && s1 != 42);
        for (auto o : o1) REQUIRE(o < 4096 - 8);
        REQUIRE(hostfirst::random_offsets(s1, 4096, 8, 16) != o1);
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { (void)hostfirst::random_offsets(s1, 8, 8, 1); }));

        /* shard-on-read: split tokens over a mesh of 2; this process owns both positions, on cpu */
        std::vector<uint16_t> all = tokens.to_vector<uint16_t>();
        hostfirst::shard_mesh mesh({"x", "y"}, {2, 1});
        REQUIRE(mesh.positions() == 2 && mesh.position({1, 0}) == 1);
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { (void)mesh.position({2, 0}); }));
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { hostfirst::shard_mesh m({"x", "x"}, {2, 2}); }));
        hostfirst::shard_rules sr(mesh);
        sr.add("tokens", "x").skip("nothing*");
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { sr.add("w", "z"); }));
        hostfirst::shard_options opts;
        const auto cpu = hostfirst::device::cpu();
        auto sp = hostfirst::shard_plan::make(f, sr, {1, 0}, {cpu, cpu}, opts);
        REQUIRE(sp.size() == 2);
        auto s0 = sp.describe(0);
        REQUIRE(std::string(s0.name) == "tokens" && s0.position == 1);
        REQUIRE(s0.start[0] == 2048 && s0.shard_shape[0] == 2048);
        REQUIRE(s0.nbytes == 4096 && s0.runs == 1 && s0.copy_of == -1);
        auto tot = sp.totals();
        REQUIRE(tot.shard_bytes == 8192 && tot.read_bytes == 8192 && tot.fits);
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] {
            (void)hostfirst::shard_plan::make(f, sr, {2}, {hostfirst::device::cpu()});
        }));
        auto res = sp.run();
        REQUIRE(res.size() == 2 && res.bytes_read() == 8192);
        {
            /* run options: the progress callback of this run only; cancelling frees what the run took */
            size_t before = hostfirst::handle_count();
            hostfirst::shard_run_options ro;
            REQUIRE(ro.struct_size == sizeof(hostfirst_shard_run_options) && ro.progress == nullptr);
            int calls = 0;
            ro.progress = [](uint64_t, uint64_t, void *user) -> int32_t { return ++*static_cast<int *>(user) > 0; };
            ro.user = &calls;
            REQUIRE(throws(HOSTFIRST_STATUS_CANCELLED, [&] { (void)sp.run(ro); }));
            REQUIRE(calls == 1 && hostfirst::handle_count() == before);
            /* the page-cache policy of the run (1.1): zero is keep; drop reads the same bytes; another value
             * throws INVALID_ARGUMENT */
            hostfirst::shard_run_options pc;
            REQUIRE(pc.page_cache == HOSTFIRST_PAGE_CACHE_KEEP);
            pc.page_cache = HOSTFIRST_PAGE_CACHE_DROP;
            REQUIRE(sp.run(pc).get(0).buffer.to_vector<uint16_t>() == res.get(0).buffer.to_vector<uint16_t>());
            pc.page_cache = static_cast<hostfirst_page_cache>(7);
            REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { (void)sp.run(pc); }));
        }
        hostfirst::shard_buffer sb = res.get(0);
        REQUIRE(sb.bytes_read == 4096 && sb.buffer.shape() == std::vector<uint64_t>({2048}));
        REQUIRE(sb.buffer.to_vector<uint16_t>() == std::vector<uint16_t>(all.begin() + 2048, all.end()));
        REQUIRE(res.get(1).buffer.to_vector<uint16_t>()[0] == TOKENS0[0]);
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { (void)res.get(2); }));

        /* read plans: tokens [100, 164) and [1000, 1032), planned, inspected, run into vectors */
        hostfirst::read_plan_options ro;
        REQUIRE(ro.struct_size == sizeof(hostfirst_read_plan_options) && ro.max_over_read == 0.0);
        auto rp = hostfirst::read_plan::make(f, {{"tokens", {100}, {64}}, {"tokens", {1000}, {32}}}, ro);
        auto st = rp.describe();
        REQUIRE(st.slices == 2 && st.needed_bytes == 192 && st.read_bytes >= 192 && st.files == 1);
        uint64_t listed = 0;
        for (uint64_t i = 0; i < st.requests; i++) listed += rp.request(i).length;
        REQUIRE(listed == st.read_bytes);
        REQUIRE(throws(HOSTFIRST_STATUS_OUT_OF_RANGE, [&] { (void)rp.request(st.requests); }));
        std::vector<uint16_t> a(64), b(32);
        REQUIRE(rp.execute({a.data(), b.data()}, {128, 64}) == st.read_bytes);
        REQUIRE(a == std::vector<uint16_t>(all.begin() + 100, all.begin() + 164));
        REQUIRE(b == std::vector<uint16_t>(all.begin() + 1000, all.begin() + 1032));
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { (void)rp.execute({a.data()}, {128}); }));
        ro.max_over_read = 0.5;
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { (void)hostfirst::read_plan::make(f, {{"tokens", {}, {}}}, ro); }));
        REQUIRE(throws(HOSTFIRST_STATUS_NOT_FOUND, [&] { (void)hostfirst::read_plan::make(f, {{"nope", {}, {}}}); }));
    }
    REQUIRE(hostfirst::handle_count() == base);
    return 0;
}

static int process_state_and_errors() {
    /* the process default device, and strict mode for the whole process */
    hostfirst::set_default_device(hostfirst::device::cpu());
    auto d = hostfirst::default_device();
    REQUIRE(d.source == "PROCESS" && d.device == hostfirst::device::cpu());
    REQUIRE(hostfirst::resolve_default_device() == hostfirst::device::cpu());
    hostfirst::clear_default_device();
    REQUIRE(hostfirst::default_device().source != "PROCESS");
    REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT,
                   [] { hostfirst::set_default_device(hostfirst::device(hostfirst_device{static_cast<hostfirst_device_kind>(7), 0})); }));
    REQUIRE(throws(HOSTFIRST_STATUS_NO_SUCH_DEVICE, [] { hostfirst::device("cpu:3"); }));
    hostfirst::set_strict_process(true);
    REQUIRE(hostfirst::strict().process && !hostfirst::strict().thread);
    bool refused = throws(HOSTFIRST_STATUS_IMPLICIT_PLACEMENT, [] { (void)hostfirst::resolve_default_device(); });
    hostfirst::set_strict_process(false);
    REQUIRE(refused && !hostfirst::strict().process);

    /* dtypes */
    REQUIRE(hostfirst::dtype::from_name("BF16") == HOSTFIRST_DTYPE_BF16);
    REQUIRE(hostfirst::dtype::name(HOSTFIRST_DTYPE_F4) == "F4");
    REQUIRE(hostfirst::dtype::bits(HOSTFIRST_DTYPE_F4) == 4 && hostfirst::dtype::bits(HOSTFIRST_DTYPE_F64) == 64);
    REQUIRE(hostfirst::dtype::bits(static_cast<hostfirst_dtype>(999)) == 0);
    REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [] { (void)hostfirst::dtype::from_name("bf17"); }, "bf17"));
    REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [] { (void)hostfirst::dtype::name(static_cast<hostfirst_dtype>(999)); }));
    auto bf = hostfirst::dtype::to_dlpack(HOSTFIRST_DTYPE_BF16);
    REQUIRE(bf.code == 4 && bf.bits == 16 && bf.lanes == 1);
    REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [] { (void)hostfirst::dtype::to_dlpack(static_cast<hostfirst_dtype>(0)); }));

    /* errors, census, build */
    try {
        hostfirst::device bad("tpu:0");
        REQUIRE(false);
    } catch (const hostfirst::error &e) {
        REQUIRE(hostfirst::last_error_status() == HOSTFIRST_STATUS_INVALID_ARGUMENT);
        REQUIRE(std::string(e.what()) == std::string("INVALID_ARGUMENT: ") + hostfirst::last_error_message());
    }
    REQUIRE(hostfirst::status_count() >= 30 && hostfirst::is_format_error(HOSTFIRST_STATUS_INVALID_HEADER_JSON));
    REQUIRE(!hostfirst::is_format_error(HOSTFIRST_STATUS_IO));
    REQUIRE(hostfirst::census_warnings().empty());
    REQUIRE(hostfirst::build_info().find(hostfirst_version()) != std::string::npos);
    return 0;
}

/* Run with the stand-in CUDA driver (tests/it/cpp.rs): the wrappers' CUDA paths. No real GPU here. */
static int cuda_wrappers(const std::string &fixtures) {
    size_t base = hostfirst::handle_count();
    {
        auto devs = hostfirst::devices();
        const hostfirst::device cuda("cuda:0");
        REQUIRE(devs.size() >= 2 && devs[1] == cuda && cuda.kind() == HOSTFIRST_DEVICE_CUDA);
        REQUIRE(hostfirst::resolve_default_device() == cuda); /* the built-in rule */
        REQUIRE(cuda.memory().second > 0);
        auto f = hostfirst::file::open(fixtures + "/tokens.safetensors");
        hostfirst::view tokens = f.view("tokens");
        std::vector<uint16_t> all = tokens.to_vector<uint16_t>();

        hostfirst::buffer b = tokens.put(cuda);
        auto bi = b.info();
        REQUIRE(b.device() == cuda && bi.nbytes == 8192 && !b.is_file_backed());
        REQUIRE(b.to_vector<uint16_t>() == all); /* copy_to_host from the device */
        b.sync_stream(1);
        b.record_stream(2);
        b.sync_stream(-1);
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { b.record_stream(0); }));
        hostfirst::buffer back = b.to(hostfirst::device::cpu());
        REQUIRE(back.device() == hostfirst::device::cpu() && back.to_vector<uint16_t>() == all);
        hostfirst::buffer def = back.to_default();
        REQUIRE(def.device() == cuda && def.to_vector<uint16_t>() == all);

        hostfirst::dlpack_options opts;
        opts.has_stream = 1;
        opts.stream = 1;
        hostfirst::dlpack_tensor x = b.to_dlpack(opts);
        REQUIRE(x && !x.read_only() && !x.is_copied());
        REQUIRE(x->dl_tensor.device.device_type == HOSTFIRST_DLPACK_DEVICE_CUDA);
        REQUIRE(reinterpret_cast<uintptr_t>(x->dl_tensor.data) == bi.address);
        hostfirst::dlpack_legacy_tensor xl = b.to_dlpack_legacy();
        REQUIRE(xl->dl_tensor.device.device_type == HOSTFIRST_DLPACK_DEVICE_CUDA);

        /* resident puts: the registration is cached until release_cached_memory() */
        hostfirst::put_options resident;
        resident.resident = 1;
        hostfirst_put_stats s1{}, s2{}, s3{};
        hostfirst::buffer r1 = tokens.put(cuda, resident, &s1);
        hostfirst::buffer r2 = tokens.put(cuda, resident, &s2);
        REQUIRE(s2.reused_registration == 1 && r2.to_vector<uint16_t>() == all);
        hostfirst::release_cached_memory();
        hostfirst::buffer r3 = tokens.put(cuda, resident, &s3);
        REQUIRE(s3.reused_registration == 0 && r3.to_vector<uint16_t>() == all);
        (void)r1;

        /* a gather onto the device; a device buffer is no gather source */
        hostfirst::gather g(cuda, HOSTFIRST_DTYPE_U16, 2, 4);
        hostfirst::buffer batch = g.run(tokens, {0, 6});
        REQUIRE(batch.device() == cuda);
        REQUIRE(batch.to_vector<uint16_t>() == std::vector<uint16_t>({TOKENS0[0], TOKENS0[1], TOKENS0[2], TOKENS0[3],
                                                                     TOKENS0[6], TOKENS0[7], TOKENS0[8], TOKENS0[9]}));
        REQUIRE(g.to_vector<uint16_t>() == batch.to_vector<uint16_t>());
        REQUIRE(throws(HOSTFIRST_STATUS_UNSUPPORTED, [&] { (void)g.run_from_buffer(b, {0, 6}); }));
        hostfirst::buffer from_host = g.run_from_buffer(back, {1, 2});
        REQUIRE(from_host.device() == cuda && from_host.to_vector<uint16_t>()[0] == TOKENS0[1]);
        {
            hostfirst::gather_stream st(g, tokens, {0, 6, 9, 3}, 2, 2); /* H2D in the worker */
            std::optional<hostfirst::buffer> b0 = st.next(), b1 = st.next();
            REQUIRE(b0 && b1 && b1->device() == cuda && b0->to_vector<uint16_t>()[4] == TOKENS0[6] &&
                    b1->to_vector<uint16_t>()[0] == TOKENS0[9] && !st.next());
            hostfirst::gather_stream open(g, tokens, 2); /* an open stream on the device */
            open.push({9, 3}, 1);
            open.end_input();
            std::optional<hostfirst::buffer> b2 = open.next();
            REQUIRE(b2 && b2->device() == cuda && b2->to_vector<uint16_t>()[0] == TOKENS0[9] && !open.next());
        }

        /* a plan and a load onto the device */
        hostfirst::rules r;
        r.add("*", "default");
        auto p = hostfirst::plan::make(f, r);
        REQUIRE(p.device_count() == 1 && hostfirst::device(p.device(0).device) == cuda && p.device(0).bytes == 8192);
        auto l = hostfirst::load::run(f, p);
        hostfirst::loaded t = l.get("tokens");
        REQUIRE(t.kind == HOSTFIRST_LOADED_BUFFER && t.buffer.device() == cuda);
        REQUIRE(t.buffer.to_vector<uint16_t>() == all);
    }
    hostfirst::release_cached_memory();
    REQUIRE(hostfirst::handle_count() == base);
    return 0;
}

/* A C++ progress callback that throws (issue 37, finding 7): the wrappers cancel the operation and rethrow the
 * exception to the caller once the C call has returned; without the guard the exception would meet the library,
 * which cannot unwind it, and the process would abort. Synchronous and asynchronous puts, loads; nothing leaks;
 * a callback that returns nonzero still gives CANCELLED and one that returns 0 lets the operation finish. */
struct stop_here : std::runtime_error {
    using std::runtime_error::runtime_error;
};

static int32_t throw_stop(uint64_t, uint64_t, void *user) {
    ++*static_cast<int *>(user);
    throw stop_here("stop from the callback");
}

template <class F>
static bool throws_stop(F &&f) {
    try {
        f();
    } catch (const stop_here &e) {
        return std::string(e.what()) == "stop from the callback";
    }
    return false;
}

static int throwing_callbacks(const std::string &fixtures) {
    size_t base = hostfirst::handle_count();
    {
        auto f = hostfirst::file::open(fixtures + "/basic.safetensors");
        hostfirst::view v = f.view("i32");
        int calls = 0;
        hostfirst::put_options po;
        po.progress = throw_stop;
        po.user = &calls;
        REQUIRE(throws_stop([&] { (void)v.put(hostfirst::device::cpu(), po); }) && calls == 1);
        REQUIRE(po.progress == throw_stop && po.user == &calls); /* the caller's options are untouched */
        calls = 0;
        hostfirst::put_op op = v.put_start(hostfirst::device::cpu(), po);
        REQUIRE(throws_stop([&] { (void)op.wait(); }) && calls == 1);
        REQUIRE(hostfirst::handle_count() == base + 3); /* file, view, operation */

        hostfirst::rules r;
        r.add("*", "cpu");
        auto p = hostfirst::plan::make(f, r);
        hostfirst::load_options lo;
        lo.progress = throw_stop;
        lo.user = &calls;
        calls = 0;
        REQUIRE(throws_stop([&] { (void)hostfirst::load::run(f, p, lo); }) && calls == 1);

        lo.progress = [](uint64_t, uint64_t, void *user) -> int32_t { return ++*static_cast<int *>(user) > 0; };
        calls = 0;
        REQUIRE(throws(HOSTFIRST_STATUS_CANCELLED, [&] { (void)hostfirst::load::run(f, p, lo); }) && calls == 1);
        lo.progress = [](uint64_t done, uint64_t total, void *user) -> int32_t {
            *static_cast<int *>(user) = done == total;
            return 0;
        };
        calls = 0;
        hostfirst::load l = hostfirst::load::run(f, p, lo);
        REQUIRE(calls == 1 && l.size() == 16);

        /* The writer keeps its options' callbacks until finish(): a throwing progress callback cancels the save
         * (no file is left) and finish() rethrows its exception; the writer is used up, as after any failure. */
        std::string out = "/tmp/hostfirst-hpp-throw-" + std::to_string(getpid()) + ".safetensors";
        hostfirst::writer_options wo;
        wo.progress = throw_stop;
        wo.user = &calls;
        calls = 0;
        auto w = hostfirst::writer::open(out, wo);
        w.add(v);
        hostfirst::writer moved = std::move(w); /* the guard travels with the writer */
        REQUIRE(throws_stop([&] { (void)moved.finish(); }) && calls == 1);
        REQUIRE(::access(out.c_str(), F_OK) != 0);
        REQUIRE(wo.progress == throw_stop && wo.user == &calls);
        REQUIRE(throws(HOSTFIRST_STATUS_ALREADY_USED, [&] { (void)moved.finish(); }));
    }
    REQUIRE(hostfirst::handle_count() == base);
    return 0;
}

/* hostfirst::error keeps a fit check's numbers from the moment it is thrown: after another failed call on the
 * same thread, on another thread (an exception_ptr rethrown there), and never borrows them for an error the
 * program makes itself. A 1 TiB sparse file: no host has that much free memory, so its put to cpu is refused
 * by the fit check before anything is allocated. */
static int fit_captured_at_throw() {
    char path[] = "/tmp/hostfirst_hpp_fit_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    const uint64_t huge = uint64_t(1) << 40;
    bool sparse = ftruncate(fd, off_t(huge)) == 0;
    close(fd);
    if (!sparse) {
        unlink(path);
        std::fprintf(stderr, "fit_captured_at_throw: no sparse 1 TiB file here, skipped\n");
        return 0;
    }
    std::exception_ptr thrown;
    hostfirst_fit_info now{};
    try {
        auto f = hostfirst::file::open_raw(path, HOSTFIRST_DTYPE_U8, {HOSTFIRST_FILE_RAW_INFER});
        auto v = f.view("data");
        try {
            (void)v.put(hostfirst::device::cpu());
        } catch (const hostfirst::error &) {
            thrown = std::current_exception();
        }
    } catch (const hostfirst::error &e) {
        /* a process whose address space cannot hold a 1 TiB mapping (valgrind's cannot) */
        unlink(path);
        REQUIRE(e.status() == HOSTFIRST_STATUS_IO);
        std::fprintf(stderr, "fit_captured_at_throw: %s; skipped\n", e.what());
        return 0;
    }
    unlink(path);
    REQUIRE(thrown);
    try {
        std::rethrow_exception(thrown);
    } catch (const hostfirst::error &e) {
        REQUIRE(e.status() == HOSTFIRST_STATUS_OUT_OF_MEMORY && e.fit(now));
        REQUIRE(now.needed == huge && now.free < huge && now.total > 0 && now.device.kind == HOSTFIRST_DEVICE_CPU);
    }
    /* an error the program makes itself has no numbers, even while the thread's last failure is a fit check */
    hostfirst_fit_info none{};
    REQUIRE(hostfirst::last_error_status() == HOSTFIRST_STATUS_OUT_OF_MEMORY);
    REQUIRE(!hostfirst::error(HOSTFIRST_STATUS_OUT_OF_MEMORY, "made by the program").fit(none));
    /* another failure on this thread replaces the thread's last error, not the exception's numbers */
    REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [] { hostfirst::device bad("tpu:0"); }));
    try {
        std::rethrow_exception(thrown);
    } catch (const hostfirst::error &e) {
        hostfirst_fit_info later{};
        REQUIRE(e.fit(later));
        REQUIRE(later.needed == now.needed && later.free == now.free && later.total == now.total);
    }
    /* rethrown on a thread that never failed a call */
    bool other_thread = false;
    std::thread worker([&] {
        try {
            std::rethrow_exception(thrown);
        } catch (const hostfirst::error &e) {
            hostfirst_fit_info there{};
            other_thread = e.status() == HOSTFIRST_STATUS_OUT_OF_MEMORY && e.fit(there) && there.needed == now.needed &&
                           there.free == now.free && std::string(e.what()).find("OUT_OF_MEMORY") == 0;
        }
    });
    worker.join();
    REQUIRE(other_thread);
    /* no numbers for a failure that is no fit check */
    try {
        hostfirst::device bad("tpu:0");
    } catch (const hostfirst::error &e) {
        hostfirst_fit_info none{};
        REQUIRE(!e.fit(none));
    }
    return 0;
}

static int host_wrappers(const std::string &fixtures);

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: test_hpp FIXTURES_DIR [cuda]\n");
        return 2;
    }
    try {
        if (argc > 2 && std::string(argv[2]) == "cuda") return cuda_wrappers(argv[1]);
        return host_wrappers(argv[1]);
    } catch (const hostfirst::error &e) { /* a wrapper threw where no test expected it */
        std::fprintf(stderr, "unexpected %s\n", e.what());
        return 1;
    }
}

/* The writer: host memory, a view, a cpu buffer, pieces and metadata; read back; finish twice throws. */
static int writer_wrappers(const std::string &fixtures) {
    size_t base = hostfirst::handle_count();
    {
        std::string out = "/tmp/hostfirst-hpp-writer-" + std::to_string(getpid()) + ".safetensors";
        auto f = hostfirst::file::open(fixtures + "/tokens.safetensors");
        hostfirst::view tokens = f.view("tokens");
        std::vector<float> w(12);
        for (size_t i = 0; i < w.size(); i++) w[i] = static_cast<float>(i) / 2;
        auto wr = hostfirst::writer::open(out);
        wr.add("w", HOSTFIRST_DTYPE_F32, {3, 4}, w.data(), w.size() * sizeof(float)).add(tokens);
        wr.add("copy", tokens.put(hostfirst::device::cpu()));
        wr.declare("halves", HOSTFIRST_DTYPE_F32, {3, 4});
        const std::vector<float> left{0, 0.5f, 2, 2.5f, 4, 4.5f}, right{1, 1.5f, 3, 3.5f, 5, 5.5f}; /* alive until finish */
        wr.add_piece("halves", {0, 0}, {3, 2}, left.data(), 24);
        wr.add_piece("halves", {0, 2}, {3, 2}, right.data(), 24);
        wr.metadata({{"format", "pt"}, {"by", "c++"}});
        REQUIRE(throws(HOSTFIRST_STATUS_DUPLICATE_TENSOR, [&] { wr.add(tokens); }));
        hostfirst_writer_info info = wr.finish();
        REQUIRE(info.tensors == 4 && info.parts == 1 && wr.part_paths() == std::vector<std::string>{out});
        REQUIRE(throws(HOSTFIRST_STATUS_ALREADY_USED, [&] { wr.finish(); }));
        auto g = hostfirst::file::open(out);
        REQUIRE(g.view("w").to_vector<float>() == w);
        REQUIRE(g.view("halves").to_vector<float>() == w);
        REQUIRE(g.view("tokens").to_vector<uint16_t>() == tokens.to_vector<uint16_t>());
        REQUIRE(g.view("copy").to_vector<uint16_t>() == tokens.to_vector<uint16_t>());
        std::remove(out.c_str());
        /* A descriptor: here, /dev/null (a character device: written in order). */
        int fd = ::open("/dev/null", O_WRONLY);
        REQUIRE(fd >= 0);
        auto nul = hostfirst::writer::open_fd(fd);
        nul.add(tokens).finish();
        ::close(fd);
        hostfirst::writer_options o;
        o.max_part_bytes = 1;
        REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { hostfirst::writer::open_fd(1, o); }));
    }
    REQUIRE(hostfirst::handle_count() == base);
    return 0;
}

/* Remote settings: checked fields, a cache folder made by the call, configured retries used by an open. */
static int remote_settings() {
    hostfirst::remote_options o;
    REQUIRE(o.struct_size == sizeof(hostfirst_remote_options) && o.cache_dir == nullptr && o.max_retries == 0);
    o.max_retries = -2;
    REQUIRE(throws(HOSTFIRST_STATUS_INVALID_ARGUMENT, [&] { hostfirst::remote_configure(o); }, "max_retries"));
    std::string dir = "/tmp/hostfirst-hpp-remote-cache-" + std::to_string(getpid());
    o.max_retries = -1;
    o.cache_dir = dir.c_str();
    hostfirst::remote_configure(o);
    REQUIRE(::access(dir.c_str(), F_OK) == 0);
    /* Nothing listens on port 1: refused at once, and with no retries the open gives up after one try. */
    REQUIRE(throws(HOSTFIRST_STATUS_IO, [&] { (void)hostfirst::file::open("http://127.0.0.1:1/x.safetensors"); }));
    hostfirst::remote_reset();
    ::rmdir(dir.c_str());
    return 0;
}

static int host_wrappers(const std::string &fixtures) {
    if (writer_wrappers(fixtures) != 0) return 1;
    if (remote_settings() != 0) return 1;
    if (files_views_dlpack(fixtures) != 0) return 1;
    if (views_buffers_puts(fixtures) != 0) return 1;
    if (throwing_callbacks(fixtures) != 0) return 1;
    if (rules_plans_loads(fixtures) != 0) return 1;
    if (gathers_and_shards(fixtures) != 0) return 1;
    if (process_state_and_errors() != 0) return 1;
    if (fit_captured_at_throw() != 0) return 1;
    hostfirst::check_version();
    auto bs = hostfirst::backends();
    REQUIRE(bs.size() == 3 && bs[0].name == "cpu" && bs[0].status == "AVAILABLE" && bs[2].name == "gds");
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
        REQUIRE(d.source == "SCOPE" && d.depth == 1 && d.device == hostfirst::device::cpu());
        hostfirst::carried_scope carried;
        std::thread worker([&] {
            auto g = carried.enter();
            auto w = hostfirst::default_device();
            if (w.source != "SCOPE" || w.depth != 1) std::abort();
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
