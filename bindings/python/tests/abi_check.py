"""hostfirst._abi (the hand-written ctypes mirrors) against include/hostfirst.h, by parsing the header.

Checked: every function the header declares has an entry in _abi.SIGNATURES and every entry is a header
function, with the ctypes return and argument types the C types call for; every struct of the header has a
mirror whose fields have the header's names, in its order, with the ctypes types its C types call for; every
constant of _abi.CONSTANTS has the header's value, and an enum the package mirrors any value of is mirrored
whole. (Sizes and offsets are checked by compiling a probe, tests/test_layout.py.)

ctypes cannot tell apart C types of the same size and signedness on one platform (size_t and uint64_t are both
c_ulong on 64-bit Linux); those pairs are checked by the probe's sizes, not here.

Run: python3 bindings/python/tests/abi_check.py [include/hostfirst.h]   (exit status 1 and one line per
mismatch). tests/it/python_abi.rs runs it in the cargo test suite; tests/test_layout.py in the Python suite.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
P = ctypes.POINTER

PRIMITIVES = {
    "uint8_t": ctypes.c_uint8, "uint16_t": ctypes.c_uint16, "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64, "int8_t": ctypes.c_int8, "int16_t": ctypes.c_int16,
    "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "size_t": ctypes.c_size_t, "int": ctypes.c_int,
    "unsigned": ctypes.c_uint, "double": ctypes.c_double, "float": ctypes.c_float, "bool": ctypes.c_bool,
    "char": ctypes.c_char,
}


def load_abi():
    """hostfirst/_abi.py, loaded on its own (the package's __init__ would load the library)."""
    path = ROOT / "bindings/python/hostfirst/_abi.py"
    spec = importlib.util.spec_from_file_location("hostfirst_abi_under_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def enum_value(text: str) -> int:
    """An enumerator's value as cbindgen writes it: `5`, `0x10`, `-1` or a flag `(1 << 3)`."""
    m = re.fullmatch(r"\(?\s*(-?(?:0x[0-9a-fA-F]+|\d+))\s*(?:<<\s*(\d+))?\s*\)?", text.strip())
    if not m:
        raise ValueError(f"enumerator value {text!r} is not a number or a shifted bit")
    return int(m.group(1), 0) << int(m.group(2) or 0)


class Header:
    """The declarations of a cbindgen-generated header: functions, structs, opaque types, enums, constants."""

    def __init__(self, text: str):
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        code = re.sub(r"//[^\n]*", "", code)
        self.constants: dict[str, int] = {}
        kept = []
        for line in code.splitlines():
            s = line.strip()
            # `#define NAME 1`, `(1)`, `(hostfirst_placement)1`, `1u`
            m = re.match(r"#\s*define\s+(\w+)\s+\(?\s*(?:\(\w+\)\s*)?(-?(?:0x[0-9a-fA-F]+|\d+))[uUlL]*\s*\)?\s*$", s)
            if m:
                self.constants[m.group(1)] = int(m.group(2), 0)
            if not s.startswith("#"):
                kept.append(line)
        code = "\n".join(kept).replace('extern "C" {', "")
        self.enums: dict[str, dict[str, int]] = {}
        for m in re.finditer(r"\benum\s+(\w+)\s*(?::\s*\w+\s*)?\{(.*?)\}\s*;", code, flags=re.S):
            values, nxt = {}, 0
            for item in filter(None, (v.strip() for v in m.group(2).split(","))):
                name, _, value = (x.strip() for x in item.partition("="))
                nxt = enum_value(value) if value else nxt
                values[name] = nxt
                nxt += 1
            self.enums[m.group(1)] = values
        code = re.sub(r"\benum\s+\w+\s*(?::\s*\w+\s*)?\{.*?\}\s*;", "", code, flags=re.S)
        self.structs: dict[str, list[tuple[str, str]]] = {}
        for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*\w+\s*;", code, flags=re.S):
            self.structs[m.group(1)] = [split_declaration(f) for f in m.group(2).split(";") if f.strip()]
        code = re.sub(r"typedef\s+struct\s+\w+\s*\{.*?\}\s*\w+\s*;", "", code, flags=re.S)
        self.opaque = set(re.findall(r"typedef\s+struct\s+(\w+)\s+\1\s*;", code))
        self.callbacks = set(re.findall(r"typedef\s+[^;]*?\(\*\s*(\w+)\)\s*\([^;]*\)\s*;", code))
        # `typedef uint32_t hostfirst_dtype;` (the C17 branch of an enum's typedef): the enum's integer type.
        self.aliases = {n: t for t, n in re.findall(r"typedef\s+(\w+)\s+(\w+)\s*;", code) if t in PRIMITIVES}
        code = re.sub(r"typedef[^;]*;", "", code)
        self.functions: dict[str, tuple[str, list[str]]] = {}
        for stmt in code.split("}"):
            for decl in stmt.split(";"):
                # `[attributes or MACRO(...)] R hostfirst_name(args) [attributes]`: every C name has the prefix.
                decl = " ".join(decl.split())
                m = re.search(r"(?<!\w)(hostfirst_\w+)\s*\(", decl)
                if not m:
                    continue
                depth, end = 0, None
                for i in range(m.end() - 1, len(decl)):
                    depth += {"(": 1, ")": -1}.get(decl[i], 0)
                    if depth == 0:
                        end = i
                        break
                params = decl[m.end(): end]
                ret = re.sub(r"\[\[.*?\]\]", "", decl[: m.start()])
                ret = ret[ret.rfind(")") + 1:].strip()  # after any attribute or macro call before the type
                args = [] if params.strip() in ("", "void") else params.split(",")
                self.functions[m.group(1)] = (ret, [split_declaration(a)[1] for a in args])


def split_declaration(decl: str) -> tuple[str, str]:
    """`const struct x *name` -> ("name", "const struct x *"); `void (*f)(T *)` -> ("f", "fnptr")."""
    decl = " ".join(decl.split())
    m = re.match(r".*\(\*\s*(\w+)\)\s*\(.*\)$", decl)
    if m:
        return m.group(1), "fnptr"
    m = re.match(r"(.*?)(\w+)(\s*\[\s*(\w+)\s*\])?$", decl)
    array = f"[{m.group(4)}]" if m.group(3) else ""
    return m.group(2), m.group(1).strip() + array


class Checker:
    def __init__(self, header: Header, abi):
        self.h, self.abi = header, abi
        self.mirrors = {m._c_name_: m for m in abi.MIRRORS}
        self.problems: list[str] = []

    def expected(self, ctype: str, where: str):
        """The ctypes types a C type may be mirrored by (a tuple), or None after reporting it unknown."""
        array = re.search(r"\[(\w+)\]$", ctype)
        if array:
            inner = self.expected(ctype[: array.start()], where)
            n = int(array.group(1), 0) if array.group(1).isdigit() else self.h.constants.get(array.group(1))
            return tuple(t * n for t in inner) if inner and n else None
        if ctype == "fnptr":
            return (ctypes.c_void_p, "CFUNCTYPE")
        stars = ctype.count("*")
        words = [w for w in re.findall(r"\w+", ctype) if w not in ("const", "struct", "enum")]
        if len(words) != 1:
            self.problems.append(f"{where}: cannot read the C type `{ctype}`")
            return None
        base = words[0]
        if base in self.h.callbacks:
            return (ctypes.c_void_p, "CFUNCTYPE") if stars == 0 else (ctypes.c_void_p,)
        if base in self.h.opaque:
            if stars == 0:
                self.problems.append(f"{where}: opaque `{base}` by value")
                return None
            return (ctypes.c_void_p,) if stars == 1 else (P(ctypes.c_void_p),)
        if base == "void":
            return (None,) if stars == 0 else ((ctypes.c_void_p,) if stars == 1 else (P(ctypes.c_void_p),))
        if base == "char" and stars >= 1:
            inner = (ctypes.c_char_p,)
            stars -= 1
        elif base in PRIMITIVES or base in self.h.aliases:
            inner = (PRIMITIVES[self.h.aliases.get(base, base)],)
        elif base in self.h.structs:
            if base not in self.mirrors:
                self.problems.append(f"{where}: struct `{base}` has no mirror in _abi.py")
                return None
            inner = (self.mirrors[base],)
        else:
            self.problems.append(f"{where}: unknown C type `{ctype}`")
            return None
        for _ in range(stars):
            inner = tuple(P(t) for t in inner)
        return inner

    def same(self, actual, expected: tuple, where: str, ctype: str):
        if expected is None:
            return
        if "CFUNCTYPE" in expected and isinstance(actual, type) and issubclass(actual, ctypes._CFuncPtr):
            return
        if not any(actual is e for e in expected if e != "CFUNCTYPE"):
            want = " or ".join(name(e) for e in expected)
            self.problems.append(f"{where}: C `{ctype}` wants {want}, _abi.py has {name(actual)}")

    def functions(self):
        sigs = self.abi.SIGNATURES
        header = {n: f for n, f in self.h.functions.items() if not n.startswith("hostfirst__")}
        for n in sorted(set(header) - set(sigs)):
            self.problems.append(f"{n}: in the header, no signature in _abi.SIGNATURES")
        for n in sorted(set(sigs) - set(header)):
            self.problems.append(f"{n}: in _abi.SIGNATURES, not a function of the header")
        for n in sorted(set(sigs) & set(header)):
            (ret, args), (res, argtypes) = header[n], sigs[n]
            self.same(res, self.expected(ret, f"{n} return"), f"{n} return", ret)
            if len(args) != len(argtypes):
                self.problems.append(f"{n}: {len(args)} arguments in the header, {len(argtypes)} in _abi.py")
                continue
            for i, (c, t) in enumerate(zip(args, argtypes)):
                self.same(t, self.expected(c, f"{n} argument {i + 1}"), f"{n} argument {i + 1}", c)

    def structs(self):
        for s in sorted(set(self.h.structs) - set(self.mirrors)):
            self.problems.append(f"struct {s}: in the header, no mirror in _abi.py")
        for s in sorted(set(self.mirrors) - set(self.h.structs)):
            self.problems.append(f"{self.mirrors[s].__name__}: mirrors `{s}`, not a struct of the header")
        for s in sorted(set(self.h.structs) & set(self.mirrors)):
            fields, mirror = self.h.structs[s], self.mirrors[s]._fields_
            names, mnames = [f for f, _ in fields], [f for f, _ in mirror]
            if names != mnames:
                self.problems.append(f"struct {s}: fields {names} in the header, {mnames} in _abi.py")
                continue
            for (f, c), (_, t) in zip(fields, mirror):
                self.same(t, self.expected(c, f"{s}.{f}"), f"{s}.{f}", c)

    def constants(self):
        enum_of = {v: (e, vals) for e, vals in self.h.enums.items() for v in vals}
        mirrored_enums = set()
        for n, value in self.abi.CONSTANTS.items():
            if n in enum_of:
                mirrored_enums.add(enum_of[n][0])
                want = enum_of[n][1][n]
            elif n in self.h.constants:
                want = self.h.constants[n]
            else:
                self.problems.append(f"{n}: in _abi.CONSTANTS, not a constant or enum value of the header")
                continue
            if value != want:
                self.problems.append(f"{n}: {want} in the header, {value} in _abi.py")
        for e in sorted(mirrored_enums):
            missing = sorted(set(self.h.enums[e]) - set(self.abi.CONSTANTS))
            if missing:
                self.problems.append(f"enum {e}: _abi.py mirrors some of its values but not {missing}")

    def run(self) -> list[str]:
        if len(self.h.functions) < 90 or len(self.h.structs) < 15 or len(self.h.enums) < 4:
            return [f"the header parse found too little ({len(self.h.functions)} functions, "
                    f"{len(self.h.structs)} structs, {len(self.h.enums)} enums): fix abi_check.py"]
        self.functions()
        self.structs()
        self.constants()
        return self.problems


def name(t) -> str:
    if t is None:
        return "None (void)"
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return f"POINTER({name(t._type_)})"
    return getattr(t, "__name__", repr(t))


def check(header_path: Path = ROOT / "include/hostfirst.h", abi=None) -> list[str]:
    return Checker(Header(header_path.read_text()), abi or load_abi()).run()


if __name__ == "__main__":
    problems = check(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "include/hostfirst.h")
    for p in problems:
        print(p)
    if problems:
        print(f"abi_check: {len(problems)} mismatches between bindings/python/hostfirst/_abi.py and the header")
        sys.exit(1)
    print("abi_check: bindings/python/hostfirst/_abi.py agrees with the header")
