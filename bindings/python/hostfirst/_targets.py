"""Placement targets with a JAX memory kind ("cpu:pinned_host", "pinned_host"): parsed without importing JAX, so
that `safe_open(..., framework="jax", device=...)` checks its device at open, as safetensors does, also where JAX
is not installed (hostfirst.jax re-exports both names)."""

from __future__ import annotations

import ctypes
import difflib
from typing import Optional, Tuple, Union

from ._core import Device, c_string, check, last_error
from ._errors import STATUS, error_named
from ._lib import lib

#: The JAX memory kinds a target may name (CPU JAX has all three; a GPU's default is "device").
MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")


def parse_target(target: Union[str, Device]) -> Tuple[str, Optional[str]]:
    """A target as (hostfirst target, JAX memory kind or None): "cpu:pinned_host" -> ("cpu", "pinned_host"),
    "pinned_host" -> ("default", "pinned_host"), "cuda:0" -> ("cuda:0", None). InvalidArgumentError for a
    memory kind after "host" (host targets are numpy arrays, which have no memory kind), and for a target whose
    device part is malformed (the message lists the memory kinds too, and the nearest one to a misspelling)."""
    if isinstance(target, Device):
        return str(target), None
    spec = str(target).strip()
    if spec.lower() in MEMORY_KINDS:
        return "default", spec.lower()
    head, sep, tail = spec.rpartition(":")
    if sep and tail.lower() in MEMORY_KINDS:
        if head.strip().lower() == "host":
            raise error_named("INVALID_ARGUMENT", f"target {spec!r}: a memory kind names JAX memory, and 'host' "
                              "gives numpy arrays; for a jax.Array in host memory write "
                              f"'cpu:{tail.lower()}' (or '{tail.lower()}' on a GPU's default device)")
        _check_syntax(head.strip(), spec)
        return head.strip(), tail.lower()
    _check_syntax(spec, spec)
    return spec, None


def _check_syntax(device: str, target: str) -> None:
    """The library's syntax check of a rule target (nothing is resolved: a GPU need not be present), its
    refusal re-worded for targets that may carry a memory kind."""
    h = ctypes.c_void_p()
    check(lib.hostfirst_rules_new(ctypes.byref(h)))
    try:
        status = lib.hostfirst_rules_add(h.value, b"*", c_string(device, "placement target"))
        why = last_error()
    finally:
        lib.hostfirst_rules_free(h.value)
    if status == STATUS["OK"]:
        return
    last = target.rpartition(":")[2].strip().lower()
    near = difflib.get_close_matches(last, MEMORY_KINDS, n=1, cutoff=0.6)
    hint = ""
    if near:
        fixed = target[: len(target) - len(target.rpartition(":")[2])] + near[0]
        hint = f" Did you mean {fixed!r}?"
    raise error_named("INVALID_ARGUMENT", f"{why}; or a JAX memory kind ({', '.join(MEMORY_KINDS)}) alone or "
                      f"after one of those ('cpu:pinned_host', 'cuda:0:device').{hint}")
