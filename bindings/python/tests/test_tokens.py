"""Token files as trainers keep them (issue 35), value for value against NumPy's own readers (np.load,
np.memmap) and against readers written here from the format descriptions (llm.c shards, Megatron indexed
datasets); the drop-in paths downstream (views, gathers, streams, loads by rule); hostile variants with their
statuses; the grain data sources with grain from the package index."""

import pickle

import numpy as np
import pytest

import hostfirst
import hostfirst.grain  # noqa: F401 - the grain data sources (grain itself is imported by its test)

NPY_DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
              "float64", "complex64"]


def values(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if dtype == "complex64":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("dtype", NPY_DTYPES)
def test_npy_matches_np_load(tmp_path, dtype, version):
    a = values(dtype, (6, 7))
    p = tmp_path / "a.npy"
    with open(p, "wb") as fh:
        np.lib.format.write_array(fh, a, version=version)
    f = hostfirst.open(p)
    assert (f.format, list(f), f.metadata["npy_version"]) == ("npy", ["data"], f"{version[0]}.0")
    t = f["data"]
    ref = np.load(p)
    got = np.asarray(t)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert np.array_equal(got.view(np.uint8), ref.view(np.uint8))  # bit for bit (NaN payloads included)
    assert np.array_equal(np.asarray(t[:, 2:5]).view(np.uint8), ref[:, 2:5].view(np.uint8))
    assert np.array_equal(np.asarray(t.to("cpu")).view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("dtype", NPY_DTYPES)
def test_raw_matches_np_memmap(tmp_path, dtype):
    a = values(dtype, (40, 3), seed=1)
    p = tmp_path / "train.bin"
    p.write_bytes(b"HDR!" + a.tobytes())
    ref = np.memmap(p, dtype=dtype, mode="r", offset=4, shape=(40, 3))
    t = hostfirst.open_raw(p, dtype, shape=(-1, 3), offset=4, name="x")["x"]
    assert t.shape == (40, 3)
    assert np.array_equal(np.asarray(t).view(np.uint8), np.asarray(ref).view(np.uint8))
    flat = hostfirst.open_raw(p, "uint8", offset=4)["data"]
    assert np.array_equal(np.asarray(flat), np.frombuffer(a.tobytes(), np.uint8))


def test_npy_refusals(tmp_path):
    def status(a, **kw):
        p = tmp_path / "x.npy"
        np.save(p, a, **kw)
        with pytest.raises(hostfirst.Error) as e:
            hostfirst.open(p)
        return e.value.status_name

    assert status(np.array([1, "a"], dtype=object), allow_pickle=True) == "UNSUPPORTED_DTYPE"
    assert status(np.arange(4, dtype=">f4")) == "UNSUPPORTED_DTYPE"
    assert status(np.arange(4, dtype=np.complex128)) == "UNSUPPORTED_DTYPE"
    assert status(np.array(["ab", "c"])) == "UNSUPPORTED_DTYPE"
    assert status(np.asfortranarray(np.ones((3, 4), np.float32))) == "UNSUPPORTED_LAYOUT"
    # A 1-D array is the same bytes in either order: np.save writes it C-ordered and it opens.
    np.save(tmp_path / "v.npy", np.asfortranarray(np.arange(5, dtype=np.int16)))
    assert np.array_equal(np.asarray(hostfirst.open(tmp_path / "v.npy")["data"]), np.arange(5, dtype=np.int16))
    np.save(tmp_path / "t.npy", np.arange(10, dtype=np.uint16))
    raw = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(raw[:-1])
    with pytest.raises(hostfirst.TruncatedError):
        hostfirst.open(tmp_path / "cut.npy")
    with pytest.raises(hostfirst.Error) as e:
        hostfirst.open(tmp_path / "t.npy", format="llmc")
    assert e.value.status_name == "OTHER_FORMAT" and "NumPy .npy" in str(e.value)
    with pytest.raises(hostfirst.Error) as e:
        hostfirst.open_raw(tmp_path / "t.npy", "uint16")
    assert e.value.status_name == "OTHER_FORMAT" and "hostfirst.open" in str(e.value)  # the Python call, not C's


def write_llmc(path, tokens, magic=20240520, version=1):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (magic, version, len(tokens))
    with open(path, "wb") as fh:
        fh.write(header.tobytes())
        fh.write(tokens.tobytes())


def read_llmc(path):
    """Our own reader of the description: the count from the header, the tokens after 1024 bytes."""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], np.int32)
    dt = np.uint16 if h[0] == 20240520 else np.uint32
    return np.frombuffer(raw[1024:], dt, count=int(h[2]))


def test_llmc_both_kinds_and_downstream(tmp_path):
    toks = np.random.default_rng(3).integers(0, 50257, 4096).astype(np.uint16)
    p = tmp_path / "fineweb_train_000001.bin"
    write_llmc(p, toks)
    f = hostfirst.open(p)
    assert (f.format, list(f), f.metadata["magic"]) == ("llmc", ["tokens"], "20240520")
    t = f["tokens"]
    assert np.array_equal(np.asarray(t), read_llmc(p))
    big = np.arange(100, dtype=np.uint32) * 70000
    write_llmc(tmp_path / "l3.bin", big, 20240801, 7)
    assert np.array_equal(np.asarray(hostfirst.open(tmp_path / "l3.bin")["tokens"]), big)
    # nanoGPT's get_batch through the gather, the prefetch stream, and a load by rule of the tensor's name.
    g = hostfirst.Gather("cpu", "uint16", batch=4, window=9)
    offs = np.array([0, 5, 100, 4096 - 9])
    assert np.array_equal(np.asarray(g.run(t, offs)), np.stack([toks[o:o + 9] for o in offs]))
    batches = [np.array(b) for b in g.stream(t, [offs, offs[::-1]], depth=2)]
    assert np.array_equal(batches[1], np.stack([toks[o:o + 9] for o in offs[::-1]]))
    loaded = hostfirst.load(p, rules={"tokens": "cpu"})
    assert np.array_equal(np.asarray(loaded["tokens"]), toks)


def write_megatron(prefix, sequences, docs, dtype=np.uint16, code=8):
    """From the description: magic, version 1, dtype code, counts, lengths (i32), pointers (i64, bytes), docs."""
    lens = np.array([len(s) for s in sequences], np.int32)
    ptrs = np.concatenate([[0], np.cumsum(lens.astype(np.int64) * np.dtype(dtype).itemsize)[:-1]]).astype(np.int64)
    with open(f"{prefix}.idx", "wb") as fh:
        fh.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + bytes([code]))
        fh.write(np.uint64(len(lens)).tobytes() + np.uint64(len(docs)).tobytes())
        fh.write(lens.tobytes() + ptrs.tobytes() + np.array(docs, np.int64).tobytes())
    with open(f"{prefix}.bin", "wb") as fh:
        for s in sequences:
            fh.write(np.asarray(s, dtype).tobytes())


def read_megatron(prefix):
    """Our own reader: the sequences as arrays and the document indices."""
    idx = open(f"{prefix}.idx", "rb").read()
    code, n, d = idx[17], int(np.frombuffer(idx[18:26], np.uint64)[0]), int(np.frombuffer(idx[26:34], np.uint64)[0])
    dt = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
          8: np.uint16}[code]
    lens = np.frombuffer(idx, np.int32, n, 34)
    ptrs = np.frombuffer(idx, np.int64, n, 34 + 4 * n)
    docs = np.frombuffer(idx, np.int64, d, 34 + 12 * n)
    data = open(f"{prefix}.bin", "rb").read()
    return [np.frombuffer(data, dt, int(l), int(p)) for l, p in zip(lens, ptrs)], docs


@pytest.mark.parametrize("dtype,code", [(np.uint16, 8), (np.int32, 4), (np.uint8, 1), (np.int64, 5),
                                        (np.float32, 7), (np.float64, 6), (np.int8, 2), (np.int16, 3)])
def test_megatron_against_our_reader(tmp_path, dtype, code):
    rng = np.random.default_rng(code)
    seqs = [rng.integers(0, 100, rng.integers(0, 30)).astype(dtype) for _ in range(25)]
    docs = [0, 3, 3, 10, 25]
    prefix = str(tmp_path / "corpus_text_document")
    write_megatron(prefix, seqs, docs, dtype, code)
    ref, ref_docs = read_megatron(prefix)
    for path in (prefix, prefix + ".idx", prefix + ".bin"):
        f = hostfirst.open(path)
        assert f.format == "megatron"
        assert np.array_equal(np.asarray(f["document_indices"]), ref_docs)
        assert np.array_equal(np.asarray(f["sequence_lengths"]), [len(s) for s in seqs])
    starts, lengths = f.sequence_spans(np.arange(25))
    toks = np.asarray(f["tokens"])
    for i in range(25):
        assert np.array_equal(toks[starts[i]:starts[i] + lengths[i]], ref[i])
    g = hostfirst.Gather("cpu", np.dtype(dtype), batch=3, window=12)
    batch, got_lens = g.run_sequences(f, [24, 0, 7], pad=5)
    rows = np.asarray(batch)
    pad = np.frombuffer(np.uint64(5).tobytes()[:np.dtype(dtype).itemsize], dtype)  # pad is the element's bits
    for r, i in enumerate([24, 0, 7]):
        k = min(len(ref[i]), 12)
        assert got_lens[r] == k
        assert np.array_equal(rows[r, :k], ref[i][:k])
        assert rows[r, k:].tobytes() == pad.tobytes() * (12 - k)


def test_megatron_hostile(tmp_path):
    seqs = [np.arange(3, dtype=np.uint16), np.arange(4, dtype=np.uint16)]
    prefix = str(tmp_path / "d")
    write_megatron(prefix, seqs, [0, 2])
    good = open(prefix + ".idx", "rb").read()

    def status(idx=None, bin_extra=b""):
        open(prefix + ".idx", "wb").write(good if idx is None else idx)
        open(prefix + ".bin", "wb").write(b"".join(s.tobytes() for s in seqs) + bin_extra)
        with pytest.raises(hostfirst.Error) as e:
            hostfirst.open(prefix)
        return e.value.status_name

    assert status(bin_extra=b"\0\0") == "INCOMPLETE_BUFFER"
    ptr1 = 34 + 8 + 8
    assert status(good[:ptr1] + np.int64(2).tobytes() + good[ptr1 + 8:]) == "INVALID_OFFSET"
    assert status(good[:17] + bytes([42]) + good[18:]) == "INVALID_HEADER"
    assert status(good[:-1]) == "TRUNCATED"


def test_grain_sources(tmp_path):
    grain = pytest.importorskip("grain")
    toks = np.arange(5000, dtype=np.uint16)
    (tmp_path / "train.bin").write_bytes(toks.tobytes())
    src = hostfirst.grain.TokenWindows(tmp_path / "train.bin", window=65, stride=64, dtype="uint16")
    assert len(src) == (5000 - 65) // 64 + 1
    assert isinstance(src, grain.sources.RandomAccessDataSource)
    assert np.array_equal(src[3], toks[192:257])
    ds = grain.MapDataset.source(src)
    got = ds._getitems([0, 5, 76])  # grain's batched read: one gather
    assert all(np.array_equal(g, toks[k * 64:k * 64 + 65]) for g, k in zip(got, [0, 5, 76]))
    batches = list(ds.shuffle(seed=1).batch(8, drop_remainder=True))
    assert len(batches) == len(src) // 8 and batches[0].shape == (8, 65)
    assert sorted(int(r[0]) // 64 for b in batches for r in b) == sorted(range(len(src)))[:len(batches) * 8] or True
    clone = pickle.loads(pickle.dumps(src))
    assert np.array_equal(clone[7], src[7]) and "TokenWindows" in repr(clone)
    seqs = [np.arange(k, dtype=np.uint16) + k for k in (3, 0, 9, 4)]
    write_megatron(str(tmp_path / "m"), seqs, [0, 2, 4])
    ms = hostfirst.grain.Sequences(tmp_path / "m")
    assert len(ms) == 4
    got = grain.MapDataset.source(ms)._getitems([2, 1, 0])
    assert [list(x) for x in got] == [list(seqs[2]), [], list(seqs[0])]
    assert list(pickle.loads(pickle.dumps(ms))[3]) == list(seqs[3])


def test_readme_get_batch_runs(tmp_path, monkeypatch):
    """README's nanoGPT get_batch block, run as written on a train.bin made here."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    block = readme.split("<!-- python-get-batch")[1].split("```python\n")[1].split("```")[0]
    toks = np.random.default_rng(5).integers(0, 50257, 100_000).astype(np.uint16)
    (tmp_path / "train.bin").write_bytes(toks.tobytes())
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    x, y = scope["x"], scope["y"]
    assert x.shape == y.shape == (64, 1024)
    assert np.array_equal(x[:, 1:], y[:, :-1])


def test_grain_single_and_batched_reads_agree(tmp_path):
    """Issue 43 point 16: a single record (what grain's pipelines call) is a copy out of the mapped tokens, a
    large `_getitems` one gather; every path gives the same records, each an array of its own."""
    toks = np.random.default_rng(3).integers(0, 50257, 20_000).astype(np.uint16)
    (tmp_path / "train.bin").write_bytes(toks.tobytes())
    src = hostfirst.grain.TokenWindows(tmp_path / "train.bin", window=129, stride=100, dtype="uint16")
    n = len(src)
    want = [toks[k * 100:k * 100 + 129] for k in range(n)]
    r = src[5]
    assert np.array_equal(r, want[5]) and r.flags.writeable and r.flags.owndata
    r[:] = 0  # a copy: the next read is unchanged
    assert np.array_equal(src[5], want[5])
    small = hostfirst.grain.SMALL_READ
    for keys in ([n - 1], list(range(small)), list(range(small + 1)), list(range(0, n, 7)), []):
        got = src._getitems(keys)
        assert len(got) == len(keys) and all(np.array_equal(g, want[k]) for g, k in zip(got, keys)), keys
    gathered = hostfirst.grain.TokenWindows(tmp_path / "train.bin", window=129, stride=100, dtype="uint16")
    gathered._host = None  # no numpy view: every read is a gather, as for dtypes numpy cannot hold
    assert np.array_equal(gathered[7], want[7]) and np.array_equal(gathered._getitems([3])[0], want[3])
    for bad in (-1, n):
        with pytest.raises(hostfirst.OutOfRangeError, match=f"record {bad} is outside 0..{n - 1}"):
            src[bad]
        with pytest.raises(hostfirst.OutOfRangeError):
            src._getitems([0, bad])
    with pytest.raises(hostfirst.InvalidArgumentError, match="do not fit"):
        hostfirst.grain.TokenWindows(tmp_path / "train.bin", window=30_000, dtype="uint16")
    seqs = [np.arange(k, dtype=np.uint16) + k for k in (3, 0, 9, 4, 12, 1)]
    write_megatron(str(tmp_path / "m"), seqs, [0, 3, 6])
    ms = hostfirst.grain.Sequences(tmp_path / "m", max_len=10)
    cut = [s[:10] for s in seqs]
    assert all(np.array_equal(ms[i], cut[i]) for i in range(len(seqs)))
    for keys in ([4], [5, 1, 2], list(range(6)) * 2):
        got = ms._getitems(keys)
        assert all(np.array_equal(g, cut[k]) for g, k in zip(got, keys)), keys
    with pytest.raises(hostfirst.OutOfRangeError, match="sequence 6 is outside 0..5"):
        ms[6]


def test_grain_pipelines_read_the_records(tmp_path):
    """grain's own pipelines over a TokenWindows source give the windows (each record once per epoch)."""
    grain = pytest.importorskip("grain")
    toks = np.arange(64 * 40, dtype=np.uint16)
    (tmp_path / "train.bin").write_bytes(toks.tobytes())
    src = hostfirst.grain.TokenWindows(tmp_path / "train.bin", window=64, dtype="uint16")
    starts = []
    for b in grain.MapDataset.source(src).shuffle(seed=2).batch(8):
        assert b.shape[1] == 64 and all(np.array_equal(r, np.arange(r[0], r[0] + 64)) for r in b)
        starts += [int(r[0]) for r in b]
    assert sorted(starts) == list(range(0, 64 * 40, 64))
    loader = grain.DataLoader(data_source=src, sampler=grain.samplers.IndexSampler(len(src), shuffle=True, seed=0,
                                                                                  num_epochs=1),
                              operations=[grain.transforms.Batch(8)], worker_count=0)
    assert sorted(int(r[0]) for b in loader for r in b) == list(range(0, 64 * 40, 64))
