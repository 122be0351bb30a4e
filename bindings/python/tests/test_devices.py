import threading

import pytest

import hostfirst


def test_backends_and_devices():
    bs = hostfirst.backends()
    assert [b.name for b in bs] == ["cpu", "cuda", "gds"]
    assert bs[0].status == "available"
    if bs[1].status != "available":
        assert bs[1].reason
    devs = hostfirst.devices()
    assert devs[0] == "cpu:0" and devs[0].kind == "cpu"
    info = devs[0].info()
    assert info.total_memory > 0 and info.multiprocessor_count >= 1
    free, total = devs[0].memory()
    assert 0 < free <= total


def test_device_specs_and_errors():
    assert str(hostfirst.Device(" CPU ")) == "cpu:0"
    with pytest.raises(hostfirst.InvalidArgumentError) as e:
        hostfirst.Device("tpu")
    assert "accepted forms" in str(e.value) and e.value.status_name == "INVALID_ARGUMENT"
    assert isinstance(e.value, ValueError)
    with pytest.raises(hostfirst.NoSuchDeviceError):
        hostfirst.Device("cpu:3")


def test_default_and_scopes():
    d = hostfirst.default_device()
    assert d.source in ("built_in", "env", "process") and d.depth == 0
    with hostfirst.default_device("cpu") as dev:
        assert dev == "cpu:0"
        inner = hostfirst.default_device()
        assert inner.source == "scope" and inner.depth == 1
        seen = {}
        t = threading.Thread(target=lambda: seen.update(d=hostfirst.default_device()))
        t.start()
        t.join()
        assert seen["d"].depth == 0  # scopes are per thread
    assert hostfirst.default_device().depth == 0


def test_carried_scope_and_strict():
    with hostfirst.default_device("cpu"):
        carried = hostfirst.capture_scope()
    out = {}

    def worker():
        with carried:
            out["d"] = hostfirst.default_device()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out["d"].source == "scope" and out["d"].device == "cpu"
    with hostfirst.strict():
        with pytest.raises(hostfirst.ImplicitPlacementError):
            hostfirst.resolve_target("default")
        assert hostfirst.resolve_target("cpu") == "cpu:0"
    assert hostfirst.resolve_target("default") in hostfirst.devices()


def test_process_default():
    hostfirst.set_default_device("cpu")
    try:
        assert hostfirst.default_device().source == "process"
    finally:
        hostfirst.set_default_device(None)
    assert hostfirst.default_device().source != "process"
