"""Placement targets with a JAX memory kind ("cpu:pinned_host", "pinned_host"): parsed without importing JAX, so
that `safe_open(..., framework="jax", device=...)` checks its device at open, as safetensors does, also where JAX
is not installed (hostfirst.jax re-exports both names)."""

from __future__ import annotations

from typing import Optional, Tuple, Union

from ._core import Device
from ._errors import error_named

#: The JAX memory kinds a target may name (CPU JAX has all three; a GPU's default is "device").
MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")


def parse_target(target: Union[str, Device]) -> Tuple[str, Optional[str]]:
    """A target as (hostfirst target, JAX memory kind or None): "cpu:pinned_host" -> ("cpu", "pinned_host"),
    "pinned_host" -> ("default", "pinned_host"), "cuda:0" -> ("cuda:0", None). InvalidArgumentError for a
    memory kind after "host" (host targets are numpy arrays, which have no memory kind)."""
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
        return head.strip(), tail.lower()
    return spec, None
