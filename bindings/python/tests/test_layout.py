"""The ctypes mirrors (hostfirst._abi) against the C header: a C probe compiled against include/hostfirst.h
prints sizeof, alignof and every field's offsetof and size for each mirrored struct, and the value of every
header constant the package uses; the mirrors must agree exactly."""

import ctypes
import subprocess
from pathlib import Path

import pytest
from conftest import compile_c

from hostfirst import _abi

ROOT = Path(__file__).resolve().parents[3]


def _probe_source():
    # The binding mirrors the experimental tier too (shard-on-read, gather streams): its declarations are behind
    # HOSTFIRST_EXPERIMENTAL in the header.
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <stdalign.h>", "#define HOSTFIRST_EXPERIMENTAL",
             '#include "hostfirst.h"',
             "#define FIELD(T, F) printf(\"%s.%s %zu %zu\\n\", #T, #F, offsetof(T, F), sizeof(((T *)0)->F))",
             "int main(void) {"]
    for m in _abi.MIRRORS:
        t = m._c_name_
        lines.append(f'    printf("{t} %zu %zu\\n", sizeof({t}), alignof({t}));')
        for name, _ in m._fields_:
            lines.append(f"    FIELD({t}, {name});")
    for name in _abi.CONSTANTS:
        lines.append(f'    printf("{name} %lld\\n", (long long)({name}));')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    d = tmp_path_factory.mktemp("layout")
    (d / "probe.c").write_text(_probe_source())
    compile_c([f"-I{ROOT / 'include'}", d / "probe.c", "-o", d / "probe"])
    out = subprocess.run([str(d / "probe")], check=True, capture_output=True, text=True).stdout
    return {k: tuple(int(x) for x in v) for k, *v in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("mirror", _abi.MIRRORS, ids=lambda m: m._c_name_)
def test_struct_layout_matches_the_header(probe, mirror):
    t = mirror._c_name_
    assert (ctypes.sizeof(mirror), ctypes.alignment(mirror)) == probe[t], f"sizeof/alignof {t}"
    for name, ctype in mirror._fields_:
        assert (getattr(mirror, name).offset, ctypes.sizeof(ctype)) == probe[f"{t}.{name}"], f"{t}.{name}"


def test_constants_match_the_header(probe):
    for name, value in _abi.CONSTANTS.items():
        assert probe[name] == (value,), name


def test_every_mirror_is_probed():
    names = {m._c_name_ for m in _abi.MIRRORS}
    assert len(names) == len(_abi.MIRRORS) >= 14


def test_mirrors_and_signatures_match_the_header_by_parse():
    """Every header function has a signature of the right types, every struct a mirror with the header's
    fields, every mirrored constant and enum the header's values (tests/abi_check.py)."""
    import abi_check

    problems = abi_check.check(ROOT / "include/hostfirst.h", _abi)
    assert not problems, "\n".join(problems)
