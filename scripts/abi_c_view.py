#!/usr/bin/env python3
"""The C view of hostfirst's ABI: what include/hostfirst.h promises, in C names and C types, for humans and for
the ABI check (scripts/abi-check.sh, which also runs libabigail on the library's debug info).

  report HEADER [--cc CC] [--soname NAME]   writes the view of HEADER to stdout
  compare OLD NEW                           compares two views: exit 0 compatible (additions listed),
                                            1 incompatible (every break listed, in C terms), 2 usage error
  against-library VIEW EXPORTS ABIXML       compares a view with the library it is installed with, no baseline
                                            involved: every function the header declares is exported (EXPORTS:
                                            the library's dynamic symbols, one name per line), and every enum
                                            constant has the value the library itself gives it (ABIXML: `abidw
                                            --load-all-types` of the library's debug info, where the Rust enums
                                            the header was generated from carry their values). Exit 0 agreed,
                                            1 disagreed (each difference listed), 2 usage error

The view is made by the C compiler, never by reading the header's text for numbers: `cc -E` gives the
declarations (functions, structs, enums, typedefs) as a C program sees them without HOSTFIRST_EXPERIMENTAL,
`cc -dM -E` the macros, and a small C program built from the header prints every struct's size, alignment and
field offsets and the value of every enum constant and integer macro. So a renumbered enum constant or #define,
a field inserted in the middle, a retyped parameter, a removed function all show, whatever the Rust side looks
like. The experimental tier (HOSTFIRST_EXPERIMENTAL) is listed separately and never compared: it may change in
any minor.

What `compare` accepts (the policy of docs/PACKAGING.md): additions of functions, structs, types, constants and
macros; fields appended at the end of an extensible struct (one that begins with `size_t struct_size`), past
its old size, with every old field unchanged. Anything else that differs is a break. The release numbers
(HOSTFIRST_VERSION_MINOR, _PATCH, _NUMBER) are listed but not compared.

Python 3 standard library only.
"""
import os
import re
import subprocess
import sys
import tempfile

NOT_COMPARED = {"HOSTFIRST_VERSION_MINOR", "HOSTFIRST_VERSION_PATCH", "HOSTFIRST_VERSION_NUMBER", "HOSTFIRST_H"}


def die(msg, code=2):
    print(f"abi_c_view.py: {msg}", file=sys.stderr)
    sys.exit(code)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        die(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return p.stdout


def norm(text):
    """One spelling of a C type or declaration: single spaces, `*` attached to the type, no `struct` tag
    keyword before hostfirst_ names (the tag and the typedef are the same type)."""
    t = re.sub(r"\s+", " ", text).strip()
    t = re.sub(r"\bstruct (hostfirst_\w+)", r"\1", t)
    t = re.sub(r"\s*\*\s*", " *", t)
    t = re.sub(r"\( ", "(", t)
    t = re.sub(r" \)", ")", t)
    t = t.replace("( *", "(*")
    while "* *" in t:
        t = t.replace("* *", "**")
    return t.strip()


def split_top(text, sep):
    """Splits at `sep` outside parentheses and braces."""
    out, depth, cur = [], 0, []
    for c in text:
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        if c == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur))
    return out


def strip_name(decl):
    """(type, name) of a declaration `T name`, `T *name`, `R (*name)(args)`; (type, '') for a lone `void`."""
    d = " ".join(decl.split())
    m = re.match(r"^(.*)\(\s*\*\s*(\w+)\s*\)\s*(\(.*\))$", d)
    if m:
        return norm(f"{m.group(1)}(*){m.group(3)}"), m.group(2)
    m = re.match(r"^(.*[\s*])(\w+)$", d)
    if m and m.group(1).strip():
        return norm(m.group(1)), m.group(2)
    return norm(d), ""


def declarations(code):
    """Structs, opaque types, enums, typedefs and functions of the preprocessed header (hostfirst_ names only)."""
    structs, opaque, enums, typedefs, functions = {}, set(), {}, {}, {}
    for stmt in split_top(code, ";"):
        s = " ".join(stmt.split())
        if "hostfirst_" not in s:
            continue
        m = re.match(r"^typedef struct (\w+) \{(.*)\} (\w+)$", s)
        if m:
            fields = []
            for f in split_top(m.group(2), ";"):
                if f.strip():
                    fields.append(strip_name(f))
            structs[m.group(3)] = fields
            continue
        m = re.match(r"^typedef struct (\w+) (\w+)$", s)
        if m:
            opaque.add(m.group(2))
            continue
        m = re.match(r"^(?:typedef )?enum (\w+)(?: : \w+)? \{(.*)\}(?: \w+)?$", s)
        if m:
            names = [v.split("=")[0].strip() for v in split_top(m.group(2), ",") if v.strip()]
            enums[m.group(1)] = names
            continue
        m = re.match(r"^typedef (.*)$", s)
        if m:
            ty, name = strip_name(m.group(1))
            typedefs[name] = ty
            continue
        m = re.match(r"^(.*?)\b(hostfirst_\w+)\s*\((.*)\)$", s)
        if m:
            params = [strip_name(p)[0] for p in split_top(m.group(3), ",") if p.strip()]
            if params == ["void"]:
                params = []
            functions[m.group(2)] = f"{norm(m.group(1))} {m.group(2)}({', '.join(params)})"
    return structs, opaque, enums, typedefs, functions


def macros(cc, header, defines):
    out = run(cc + ["-dM", "-E", "-x", "c", header] + defines)
    objects, functions = {}, {}
    for line in out.splitlines():
        m = re.match(r"^#define (HOSTFIRST_\w+)(\([^)]*\))? ?(.*)$", line)
        if not m or m.group(1) in ("HOSTFIRST_H", "HOSTFIRST_EXPERIMENTAL"):
            continue
        if m.group(2):
            functions[m.group(1)] = norm(m.group(2) + " " + m.group(3))
        else:
            objects[m.group(1)] = m.group(3).strip()
    return objects, functions


def view(header, cc, defines):
    code = run(cc + ["-E", "-P", "-x", "c", header] + defines)
    structs, opaque, enums, typedefs, functions = declarations(code)
    objects, fmacros = macros(cc, header, defines)
    # The numbers, from the compiler.
    lines = ["#include <stdio.h>", "#include <stddef.h>"]
    lines += [f"#define {d[2:]} 1" for d in defines]
    lines += [f'#include "{os.path.abspath(header)}"', "int main(void) {"]
    for name, fields in structs.items():
        lines.append(f'printf("S {name} %zu %zu\\n", sizeof({name}), _Alignof({name}));')
        for _, f in fields:
            lines.append(f'printf("F {name} {f} %zu %zu\\n", offsetof({name}, {f}), sizeof((({name} *)0)->{f}));')
    integer = {}
    for name, value in objects.items():
        if value and not value.startswith("{") and name not in ("HOSTFIRST_H",):
            integer[name] = value
    constants = [c for names in enums.values() for c in names] + list(integer)
    for c in constants:
        lines.append(f'printf("C {c} %llu\\n", (unsigned long long)({c}));')
    lines += ["return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "view.c"), os.path.join(tmp, "view")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        run(cc + ["-std=c11", "-w", src, "-o", exe])
        numbers = run([exe])
    sizes, offsets, values = {}, {}, {}
    for line in numbers.splitlines():
        p = line.split()
        if p[0] == "S":
            sizes[p[1]] = (int(p[2]), int(p[3]))
        elif p[0] == "F":
            offsets[(p[1], p[2])] = (int(p[3]), int(p[4]))
        else:
            values[p[1]] = int(p[2])
    items = {}
    for name, sig in functions.items():
        items[f"function {name}"] = sig
    for name, fields in structs.items():
        size, align = sizes[name]
        ext = " extensible" if fields and fields[0] == ("size_t", "struct_size") else ""
        body = [f"size {size} align {align}{ext}"]
        for ty, f in fields:
            off, sz = offsets[(name, f)]
            body.append(f"  {off:>5} {sz:>5}  {ty} {f}")
        items[f"struct {name}"] = "\n".join(body)
    for name in opaque:
        items[f"opaque {name}"] = "(a handle: a pointer to it is all C sees)"
    for name, ty in typedefs.items():
        items[f"typedef {name}"] = ty
    for ename, names in enums.items():
        for c in names:
            items[f"constant {c}"] = f"{values[c]} ({ename})"
    for name, value in integer.items():
        if name not in values:
            continue
        items[f"macro {name}"] = f"{values[name]}" + (" (not compared: a release number)" if name in NOT_COMPARED else "")
    for name, value in objects.items():
        if value.startswith("{"):
            items[f"macro {name}"] = norm(value)
    for name, text in fmacros.items():
        items[f"macro {name}"] = text
    return items


def report(header, cc, soname):
    stable = view(header, cc, [])
    full = view(header, cc, ["-DHOSTFIRST_EXPERIMENTAL"])
    out = [
        f"# The C ABI of {soname}: what include/hostfirst.h declares, in C names and C types, with the sizes,",
        "# offsets and values the C compiler gives them. Written by scripts/abi-baseline.sh (scripts/abi_c_view.py);",
        "# do not edit. scripts/abi-check.sh compares every build with it: additions and fields appended to an",
        "# extensible struct (struct_size first) pass, anything else that differs fails. The experimental tier",
        "# (HOSTFIRST_EXPERIMENTAL) is listed last and never compared. Struct fields: offset, size, type, name.",
        "",
    ]
    for key in sorted(stable, key=sort_key):
        out.append(f"{key}: {stable[key]}")
    extra = sorted((k for k in full if k not in stable), key=sort_key)
    if extra:
        out.append("")
        out.append("# Experimental (HOSTFIRST_EXPERIMENTAL): may change in any minor; not compared.")
        for key in extra:
            out.append(f"experimental {key}: {full[key]}")
    return "\n".join(out) + "\n"


ORDER = ["function", "struct", "opaque", "typedef", "constant", "macro"]


def sort_key(key):
    kind, name = key.split(" ", 1)
    return (ORDER.index(kind), name)


def parse(path):
    items, key = {}, None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line.startswith("  "):
                items[key] += "\n" + line
                continue
            key, _, value = line.partition(": ")
            items[key] = value
    return items


def struct_fields(value):
    head, *fields = value.split("\n")
    m = re.match(r"size (\d+) align (\d+)( extensible)?", head)
    parsed = []
    for f in fields:
        p = f.split(None, 2)
        parsed.append((int(p[0]), int(p[1]), p[2]))
    return int(m.group(1)), int(m.group(2)), bool(m.group(3)), parsed


def compare(old_path, new_path):
    old, new = parse(old_path), parse(new_path)
    breaks, additions, notes = [], [], []
    for key in sorted(set(old) | set(new), key=lambda k: (k.startswith("experimental"), k)):
        if key.startswith("experimental "):
            continue
        kind, name = key.split(" ", 1)
        if key not in new:
            breaks.append(f"{kind} {name} was removed (was: {old[key].splitlines()[0]})")
            continue
        if key not in old:
            additions.append(f"{kind} {name}: {new[key].splitlines()[0]}")
            continue
        a, b = old[key], new[key]
        if a == b:
            continue
        if kind == "macro" and name in NOT_COMPARED:
            notes.append(f"{name}: {a.split()[0]} -> {b.split()[0]}")
            continue
        if kind == "struct":
            osize, oalign, oext, ofields = struct_fields(a)
            nsize, nalign, next_, nfields = struct_fields(b)
            prefix = nfields[: len(ofields)] == ofields
            appended = nfields[len(ofields):]
            if oext and next_ and prefix and oalign == nalign and nsize >= osize and \
                    all(off >= osize for off, _, _ in appended):
                for off, size, decl in appended:
                    additions.append(f"struct {name}: field `{decl}` appended at offset {off} (size {osize} -> {nsize})")
                continue
            why = []
            if (osize, oalign) != (nsize, nalign):
                why.append(f"size/alignment {osize}/{oalign} -> {nsize}/{nalign}")
            for i, f in enumerate(ofields):
                if i >= len(nfields) or nfields[i] != f:
                    got = f"{nfields[i][2]} at {nfields[i][0]}" if i < len(nfields) else "nothing"
                    why.append(f"field {i} `{f[2]}` at offset {f[0]} is now {got}")
                    break
            if prefix and appended and not oext:
                why.append("fields appended to a struct that does not begin with struct_size (callers allocate it)")
            elif prefix and appended:
                why.append("appended fields start inside the old size")
            breaks.append(f"struct {name}: " + "; ".join(why or ["layout changed"]))
            continue
        breaks.append(f"{kind} {name}: {a.splitlines()[0]}  ->  {b.splitlines()[0]}")
    for line in additions:
        print(f"  added: {line}")
    for line in notes:
        print(f"  release number: {line}")
    for line in breaks:
        print(f"  INCOMPATIBLE: {line}")
    return 1 if breaks else 0


def norm_name(name):
    """An enum constant's or enumerator's name for matching C against Rust: `NULL_ARGUMENT` and `NullArgument`
    are both `nullargument`."""
    return name.replace("_", "").lower()


def library_enums(abixml):
    """{enum name: {enumerator: value}} of every enum in libabigail's XML of the library."""
    import xml.etree.ElementTree as ET

    enums = []
    for _, el in ET.iterparse(abixml, events=("end",)):
        if el.tag == "enum-decl":
            values = {e.get("name"): int(e.get("value")) for e in el.findall("enumerator")}
            if values:
                enums.append((el.get("name") or "", values))
            el.clear()
    return enums


def against_library(view_path, exports_path, abixml):
    """The header of VIEW against the library: functions declared but not exported, enum constants whose value
    differs from the library's (a Rust enum renumbered and the header not regenerated)."""
    view = parse(view_path)
    with open(exports_path) as f:
        exported = {line.split()[0] for line in f if line.strip()}
    problems, notes = [], []
    # Stable and experimental alike: an experimental function must be exported too.
    items = [(k.removeprefix("experimental ").split(" ", 1), v) for k, v in view.items()]
    declared = sorted(name for (kind, name), _ in items if kind == "function")
    if not declared:
        die(f"{view_path} declares no function: not a C view")
    for name in declared:
        if name not in exported:
            problems.append(f"{name} is declared by the header but not exported by the library (a program that "
                            "calls it does not link or load): the header is not this library's")
    # Enum constants, grouped by their enum type: `constant NAME: VALUE (TYPE)`.
    groups = {}
    for (kind, name), value in items:
        m = re.match(r"(-?\d+) \((\w+)\)$", value)
        if kind == "constant" and m:
            groups.setdefault(m.group(2), {})[name] = int(m.group(1))
    enums = library_enums(abixml)
    # cbindgen.toml's [export.rename]: `"RustName" = "hostfirst_c_name"` (the header's enums keep their Rust
    # names in the debug info).
    renames = {}
    toml = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cbindgen.toml")
    if os.path.exists(toml):
        with open(toml) as f:
            renames = dict(re.findall(r'^"(\w+)" = "(hostfirst_\w+)"$', f.read(), re.M))
    checked = 0
    for ctype, constants in sorted(groups.items()):
        names = sorted(constants)
        prefix = os.path.commonprefix(names)
        prefix = prefix[: prefix.rfind("_") + 1] if len(names) > 1 else f"{ctype.upper()}_"
        wanted = {norm_name(n[len(prefix):]): n for n in names}
        # The library's enum for it: one holding all of its constants, named as the C type (without
        # hostfirst_) or as the Rust item cbindgen.toml renames to it; else the only one holding them all.
        # Other crates' enums may hold the same names (safetensors' `Dtype`), so the exact Rust name wins.
        rust_names = {r for r, c in renames.items() if c == ctype} | {ctype}
        covering = [(e, v) for e, v in enums if set(wanted) <= {norm_name(k) for k in v}]
        exact = [(e, v) for e, v in covering if e.split("::")[-1] in rust_names]
        loose = [(e, v) for e, v in covering
                 if norm_name(e.split("::")[-1].replace("hostfirst_", "", 1)) == norm_name(ctype[len("hostfirst_"):])]
        candidates = next((c for c in (exact, loose, covering) if c), [])
        if len({tuple(sorted(v.items())) for _, v in candidates}) != 1:
            why = "several disagreeing enums hold" if candidates else "no enum of the library's debug info holds"
            notes.append(f"{ctype}: {why} all of its constants; not checked")
            continue
        checked += 1
        for ename, values in candidates:
            lib = {norm_name(k): v for k, v in values.items()}
            for n, cname in sorted(wanted.items(), key=lambda kv: kv[1]):
                if lib[n] != constants[cname]:
                    problems.append(f"{cname} is {constants[cname]} in the header but {lib[n]} in the library "
                                    f"({ename}): the header was not regenerated after the enum changed")
    if checked == 0 and groups:
        problems.append("no enum of the header was found in the library's debug info: cannot check their values")
    for n in notes:
        print(f"  note: {n}")
    for p in sorted(set(problems)):
        print(f"  INCOMPATIBLE: {p}")
    print(f"  {len(declared)} functions and the constants of {checked} of {len(groups)} enums checked against "
          "the library")
    return 1 if problems else 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "report":
        args = argv[2:]
        cc, soname, header = None, "libhostfirst", None
        while args:
            a = args.pop(0)
            if a == "--cc":
                cc = args.pop(0)
            elif a == "--soname":
                soname = args.pop(0)
            elif header is None:
                header = a
            else:
                die(f"unknown argument {a}")
        if not header:
            die("usage: abi_c_view.py report HEADER [--cc CC] [--soname NAME]")
        cc = (cc or os.environ.get("CC") or "cc").split()
        sys.stdout.write(report(header, cc, soname))
        return 0
    if len(argv) == 4 and argv[1] == "compare":
        return compare(argv[2], argv[3])
    if len(argv) == 5 and argv[1] == "against-library":
        return against_library(argv[2], argv[3], argv[4])
    die(__doc__.strip().split("\n\n")[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
