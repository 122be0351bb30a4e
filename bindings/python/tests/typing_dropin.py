"""Code written against safetensors.flax, as a user has it before swapping in hostfirst.jax: tests/test_typing.py
runs `mypy --strict` over it as written (it type-checks against safetensors) and with the import line below
swapped for hostfirst.jax, which must type-check the same (the documented drop-in, issue 43 point 15)."""

from __future__ import annotations

from typing import Dict

import jax
import jax.numpy as jnp

from safetensors.flax import load, load_file, save, save_file  # the line the test swaps


def scale_all(path: str, out: str) -> int:
    params: Dict[str, jax.Array] = load_file(path)
    first = next(iter(params.values()))
    devices = first.devices()  # a jax.Array's method: numpy arrays and hostfirst Views have none
    scaled = {name: a * 2 for name, a in params.items()}
    save_file(scaled, out)
    blob: bytes = save(scaled)
    again = load(blob)
    total = jnp.sum(jnp.stack([jnp.sum(a.astype(jnp.float32)) for a in again.values()]))
    return len(devices) + len(scaled) + int(total > 0)
