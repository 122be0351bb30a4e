"""Remote sources (issue 46): hostfirst.numpy.load_file, hostfirst.open and safe_open with s3:// and http:// URLs,
against local servers on loopback only: moto's S3 server (pip "moto[server]", started here on a free port and
stopped after) and the fault-injecting server of tests/remote/fault_server.py (the standard library's)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hostfirst
import hostfirst.numpy

ROOT = Path(__file__).resolve().parents[3]


def model(path):
    arrays = {"a": np.arange(24, dtype=np.float32).reshape(4, 6), "b": np.arange(1000, dtype=np.int64),
              "c": np.full((3, 3), 7, dtype=np.uint8)}
    hostfirst.numpy.save_file(arrays, str(path))
    return arrays


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("remote")
    arrays = model(d / "m.safetensors")
    p = subprocess.Popen([sys.executable, str(ROOT / "tests" / "remote" / "fault_server.py"), str(d)],
                         stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    yield f"http://127.0.0.1:{port}", arrays
    p.kill()
    p.wait()


def test_load_file_over_http_is_byte_exact(fault_server):
    base, arrays = fault_server
    got = hostfirst.numpy.load_file(f"{base}/ok/m.safetensors")
    assert sorted(got) == sorted(arrays)
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and np.array_equal(got[k], v), k
    with hostfirst.open(f"{base}/ok/m.safetensors") as f:
        assert f["b"].data_ptr == 0, "a remote view has no mapping"
        assert "remote: " in f.read_engine and "/ok/m.safetensors" in f.read_engine


def test_statuses_are_python_exceptions(fault_server, monkeypatch):
    base, _ = fault_server
    with pytest.raises(FileNotFoundError) as e:
        hostfirst.numpy.load_file(f"{base}/ok/none.safetensors")
    assert isinstance(e.value, hostfirst.Error) and e.value.status_name == "NOT_FOUND"
    with pytest.raises(PermissionError):
        hostfirst.numpy.load_file(f"{base}/forbidden/m.safetensors")
    monkeypatch.setenv("HOSTFIRST_REMOTE_RETRIES", "1")
    with pytest.raises(hostfirst.IoError) as e:
        hostfirst.numpy.load_file(f"{base}/down/m.safetensors")
    assert not isinstance(e.value, FileNotFoundError), "a server that is down is not a missing file"
    assert f"{base}/down/m.safetensors" in str(e.value)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moto():
    if os.environ.get("HOSTFIRST_TEST_INSTALLED") == "1":
        import moto.server  # noqa: F401  (scripts/test-python.sh installs moto[server] in the test venv)
    else:
        pytest.importorskip("moto.server", reason="a developer's venv without moto[server]")
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield url
    p.kill()
    p.wait()


def test_load_file_from_s3(moto, tmp_path, monkeypatch):
    import boto3  # moto's own dependency

    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "s3cr3t-never-shown", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": moto, "AWS_ALLOW_HTTP": "true"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    arrays = model(tmp_path / "m.safetensors")
    s3 = boto3.client("s3", endpoint_url=moto, region_name="us-east-1")
    s3.create_bucket(Bucket="models")
    s3.upload_file(str(tmp_path / "m.safetensors"), "models", "dir/m.safetensors")
    got = hostfirst.numpy.load_file("s3://models/dir/m.safetensors")
    for k, v in arrays.items():
        assert np.array_equal(got[k], v), k
    with pytest.raises(FileNotFoundError):
        hostfirst.numpy.load_file("s3://models/dir/none.safetensors")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-s3cr3t-never-shown")
    # moto checks no signature by default: a wrong key still reads; what matters here is that no message
    # shows it. A missing object's message with that key set:
    with pytest.raises(FileNotFoundError) as e:
        hostfirst.numpy.load_file("s3://models/dir/none.safetensors")
    assert "s3cr3t" not in str(e.value)


@pytest.fixture
def s3(moto, monkeypatch):
    import boto3  # moto's own dependency

    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "s3cr3t-never-shown", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": moto, "AWS_ALLOW_HTTP": "true", "HOSTFIRST_REMOTE_PART_SIZE": str(5 << 20)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    client = boto3.client("s3", endpoint_url=moto, region_name="us-east-1")
    if "saves" not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket="saves")
    return client


def big_arrays():
    rng = np.random.default_rng(46)
    return {"w": rng.integers(0, 255, size=(11 << 20,), dtype=np.uint8),
            "b": np.arange(1000, dtype=np.float32), "e": np.zeros((0, 3), dtype=np.int16)}


def object_bytes(s3, key):
    return s3.get_object(Bucket="saves", Key=key)["Body"].read()


def test_save_file_to_s3_writes_the_local_bytes_in_parts(s3, tmp_path):
    arrays = big_arrays()
    hostfirst.numpy.save_file(arrays, str(tmp_path / "m.safetensors"), metadata={"format": "np"})
    hostfirst.numpy.save_file(arrays, "s3://saves/np/m.safetensors", metadata={"format": "np"})
    want = (tmp_path / "m.safetensors").read_bytes()
    assert object_bytes(s3, "np/m.safetensors") == want
    parts = -(-len(want) // (5 << 20))
    assert s3.head_object(Bucket="saves", Key="np/m.safetensors")["ETag"].endswith(f'-{parts}"'), "multipart"
    got = hostfirst.numpy.load_file("s3://saves/np/m.safetensors")
    for k, v in arrays.items():
        assert np.array_equal(got[k], v), k
    # The Writer, a split set: every part file, then the index, read back through the index URL.
    with hostfirst.Writer("s3://saves/set/m.safetensors", max_part_bytes=6 << 20) as w:
        for k, v in arrays.items():
            w.add(k, v)
    info = w.info
    assert info["index"] == "s3://saves/set/m.safetensors.index.json", info
    got = hostfirst.numpy.load_file(info["index"])
    for k, v in arrays.items():
        assert np.array_equal(got[k], v), k


def test_a_failed_save_to_s3_leaves_no_object_and_no_pending_upload(s3, tmp_path):
    src = tmp_path / "src.safetensors"
    tail = np.arange(3 << 18, dtype=np.float32)  # 3 MiB
    hostfirst.numpy.save_file({"z": tail}, str(src))
    f = hostfirst.open(str(src))
    view = f["z"]
    os.truncate(src, os.path.getsize(src) - tail.nbytes + 1000)
    with pytest.raises(hostfirst.Error) as e:
        with hostfirst.Writer("s3://saves/failed/m.safetensors") as w:
            w.add("a", big_arrays()["w"])
            w.add("z", view)
    assert e.value.status_name == "TRUNCATED", e.value
    assert "s3://saves/failed/m.safetensors" in str(e.value) and "s3cr3t" not in str(e.value)
    f.close()
    with pytest.raises(FileNotFoundError):
        hostfirst.numpy.load_file("s3://saves/failed/m.safetensors")
    assert s3.list_multipart_uploads(Bucket="saves", Prefix="failed/").get("Uploads", []) == []
    assert s3.list_objects_v2(Bucket="saves", Prefix="failed/").get("KeyCount", 0) == 0
    with pytest.raises(hostfirst.Error) as e:
        hostfirst.numpy.save_file({"a": tail}, "https://127.0.0.1:9/m.safetensors")
    assert e.value.status_name == "UNSUPPORTED", e.value


JAX_SAVE = """
import sys
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import hostfirst.jax
mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
w = jax.device_put(np.arange(4096, dtype=np.float32).reshape(64, 64), NamedSharding(mesh, P("x")))
assert len(w.sharding.device_set) == 2
t = {"w": w, "b": jax.numpy.ones((7,))}
hostfirst.jax.save_file(t, sys.argv[1], metadata={"format": "flax"})
hostfirst.jax.save_file(t, sys.argv[2], metadata={"format": "flax"})
"""


def test_jax_save_file_of_a_sharded_array_to_s3(s3, tmp_path):
    pytest.importorskip("jax")
    # A fresh process: XLA_FLAGS (two CPU devices) must be set before JAX starts.
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run([sys.executable, "-c", JAX_SAVE, str(tmp_path / "m.safetensors"), "s3://saves/jax/m.safetensors"],
                   check=True, env=env, cwd=str(Path(__file__).resolve().parent))
    assert object_bytes(s3, "jax/m.safetensors") == (tmp_path / "m.safetensors").read_bytes()


def stats(base, mode):
    import urllib.request

    with urllib.request.urlopen(f"{base}/_stats/{mode}") as r:
        return tuple(int(x) for x in r.read().split())


def test_configure_sets_a_cache_folder_and_reset_forgets_it(fault_server, tmp_path):
    base, arrays = fault_server
    cache = tmp_path / "cache"
    try:
        with pytest.raises(hostfirst.InvalidArgumentError, match="max_retries is 101"):
            hostfirst.remote.configure(max_retries=101)
        with pytest.raises(hostfirst.InvalidArgumentError, match="max_concurrency is 5000"):
            hostfirst.remote.configure(max_concurrency=5000)
        with pytest.raises(ValueError):
            hostfirst.remote.configure(max_concurrency=0)
        hostfirst.remote.configure(cache_dir=cache, max_concurrency=4, request_timeout=30, max_retries=3)
        assert cache.is_dir()
        hostfirst.numpy.load_file(f"{base}/pycache/m.safetensors")
        assert list(cache.rglob("*.chunk")), "nothing was kept in the cache"
        before = stats(base, "pycache")
        again = hostfirst.numpy.load_file(f"{base}/pycache/m.safetensors")
        for k, v in arrays.items():
            assert np.array_equal(again[k], v), k
        after = stats(base, "pycache")
        # The open's first request (it gives the current ETag) and nothing else: the data came from the cache.
        assert after[0] - before[0] == 1, (before, after)
        hostfirst.remote.reset()
        hostfirst.numpy.load_file(f"{base}/pycache2/m.safetensors")
        before = stats(base, "pycache2")
        hostfirst.numpy.load_file(f"{base}/pycache2/m.safetensors")
        after = stats(base, "pycache2")
        assert after[0] - before[0] > 1, "without the cache the load fetches its data again"
    finally:
        hostfirst.remote.reset()
