//! The ABI promise, checked on the library scripts/install.sh installs (the tree of tests/it/install.rs):
//! every export is a `hostfirst_*` function of the header carrying the version node abi/hostfirst.map gives it
//! (abi/nodes.rs: per-minor nodes, the open one taking new functions, released ones frozen, the experimental
//! node); the library is stripped (<= 5 MiB) with its debug info beside it; and scripts/abi-check.sh finds it
//! compatible with the committed baselines abi/<SONAME>.txt (the C view) and abi/<SONAME>.abi (libabigail;
//! scripts/abi-baseline.sh regenerates both). The check's own verdicts are tested both ways on copies: a header
//! with a field appended to an extensible struct, a field inserted mid-struct, a renumbered enum constant, a
//! renumbered #define, a retyped parameter, a removed function, an added function; the binary baseline with the
//! same kinds of edits; a new function in a released node; a new function in the open node once its minor
//! is released (CHANGELOG.md: from 1.0.0 on, new functions land in the next minor's node, HOSTFIRST_1.1); and a
//! header that disagrees with its own library (a function it does not export, an enum constant it numbers
//! otherwise) whatever the baselines say.
//!
//! readelf and abidiff are installed by scripts/test.sh; where one is missing the test fails under CI (`CI=true`)
//! and otherwise skips with a message.
#![cfg(all(unix, not(any(target_os = "macos", target_os = "ios", target_os = "android"))))]

use crate::install::{have_tool, prefix, real_name, soname, work_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const REGENERATE: &str = "bash scripts/abi-baseline.sh";
/// The stripped library's cap: 2.6 MiB at 1.0.0, plus the at most 8 MiB issue 46 allows the object-store client
/// (it added 6.2 MiB: 8.77 MiB in all); an unstripped library is over 100 MiB.
const MAX_LIBRARY_BYTES: u64 = 11 << 20;

fn root() -> PathBuf {
    crate::common::root()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// abi/hostfirst.map, parsed by abi/nodes.rs (as build.rs reads it).
fn map() -> crate::nodes::Nodes {
    let text = std::fs::read_to_string(root().join("abi/hostfirst.map")).unwrap();
    crate::nodes::parse(&text).unwrap()
}

#[test]
fn version_nodes_follow_the_map_rules() {
    let (major, minor) = (env!("CARGO_PKG_VERSION_MAJOR"), env!("CARGO_PKG_VERSION_MINOR"));
    let map = map();
    crate::nodes::check(&map, major.parse().unwrap(), minor.parse().unwrap()).unwrap();
    let open = &map.stable.last().unwrap().name;
    assert_eq!(open, &format!("HOSTFIRST_{major}.{minor}"));
    assert_eq!(map.experimental.as_ref().unwrap().name, format!("HOSTFIRST_EXPERIMENTAL_{major}.{minor}"));
    if cfg!(target_os = "linux") {
        assert_eq!(option_env!("HOSTFIRST_SYMBOL_VERSION"), Some(open.as_str()), "build.rs reads the map");
    }
}

/// The rules of abi/nodes.rs on maps of a later life: 1.0 released, 1.1 open, an experimental node.
#[test]
fn per_minor_nodes_take_new_functions_in_the_open_node_only() {
    use crate::nodes::{check, node_of, parse};
    let text = "/* 1.0 */ HOSTFIRST_1.0 { global: hostfirst_a; hostfirst_b; local: *; };\n\
                HOSTFIRST_1.1 { global: hostfirst_*; } HOSTFIRST_1.0;\n\
                HOSTFIRST_EXPERIMENTAL_1.1 { global: hostfirst_x_*; };";
    let map = parse(text).unwrap();
    check(&map, 1, 1).unwrap();
    assert_eq!(node_of(&map, "hostfirst_a"), Ok("HOSTFIRST_1.0"));
    assert_eq!(node_of(&map, "hostfirst_new"), Ok("HOSTFIRST_1.1"), "a new function lands in the open node");
    assert_eq!(node_of(&map, "hostfirst_x_thing"), Ok("HOSTFIRST_EXPERIMENTAL_1.1"));
    assert!(crate::nodes::is_experimental(&map, "HOSTFIRST_X_CONSTANT"), "constants by the same patterns");
    // A released node cannot take functions by pattern: the new one would land in it.
    let open_old = text.replace("hostfirst_a; hostfirst_b;", "hostfirst_*;");
    assert!(check(&parse(&open_old).unwrap(), 1, 1).unwrap_err().contains("HOSTFIRST_1.0 is released"));
    // The crate moved on to 1.2 but the map did not: the build says what to do.
    let e = check(&map, 1, 2).unwrap_err();
    assert!(e.contains("freeze HOSTFIRST_1.1") && e.contains("HOSTFIRST_1.2 { global: hostfirst_*; } HOSTFIRST_1.1;"));
    // Nodes chain; the experimental node is renamed each minor.
    assert!(check(&parse(&text.replace("} HOSTFIRST_1.0;", "};")).unwrap(), 1, 1).is_err());
    assert!(check(&parse(&text.replace("EXPERIMENTAL_1.1", "EXPERIMENTAL_1.0")).unwrap(), 1, 1).is_err());
    // A name both listed in a released node and matched by an experimental pattern is refused.
    let both = parse(&text.replace("hostfirst_b;", "hostfirst_x_b;")).unwrap();
    assert!(node_of(&both, "hostfirst_x_b").unwrap_err().contains("released node HOSTFIRST_1.0"));
}

/// The next minor opened as abi/hostfirst.map's comment says (from 1.0.0: HOSTFIRST_1.1), done mechanically on
/// the committed map and baseline: the open node's `hostfirst_*` replaced by the stable functions of the
/// baseline's C view, the next node appended, the experimental node renamed. The map then passes the rules for
/// the next version, every function of the baseline keeps its node, and a new function lands in the next node.
#[test]
fn the_next_minor_opens_as_the_map_says() {
    use crate::nodes::{check, node_of, parse};
    let (major, minor): (u64, u64) =
        (env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap(), env!("CARGO_PKG_VERSION_MINOR").parse().unwrap());
    let (open, next) = (format!("HOSTFIRST_{major}.{minor}"), format!("HOSTFIRST_{major}.{}", minor + 1));
    let text = std::fs::read_to_string(root().join("abi/hostfirst.map")).unwrap();
    let view = std::fs::read_to_string(root().join("abi").join(format!("{}.txt", soname()))).unwrap();
    // The map comment's `sed -n 's/^function \(hostfirst_[a-z0-9_]*\):.*$/        \1;/p'`.
    let all: Vec<&str> = view.lines().filter_map(|l| l.strip_prefix("function ")?.split(':').next()).collect();
    assert!(all.len() > 90, "only {} stable functions in the baseline", all.len());
    // Those of the open node: the functions of earlier minors are listed in their own nodes already.
    let current = parse(&text).unwrap();
    let stable: Vec<&str> =
        all.iter().copied().filter(|n| node_of(&current, n).as_deref() == Ok(open.as_str())).collect();
    assert!(!stable.is_empty(), "no function of the baseline is in the open node {open}");
    let open_start = text.find(&format!("\n{open} {{")).expect("the open node in the map");
    let pattern = open_start + text[open_start..].find("hostfirst_*;").unwrap();
    let names: String = stable.iter().map(|n| format!("{n};\n        ")).collect();
    let frozen = format!("{}{}{}", &text[..pattern], names.trim_end(), &text[pattern + "hostfirst_*;".len()..]);
    let opened = format!("{frozen}\n{next} {{ global: hostfirst_*; }} {open};\n").replace(
        &format!("HOSTFIRST_EXPERIMENTAL_{major}.{minor} {{"),
        &format!("HOSTFIRST_EXPERIMENTAL_{major}.{} {{", minor + 1),
    );
    let map = parse(&opened).unwrap();
    check(&map, major, minor + 1).unwrap();
    for name in &stable {
        assert_eq!(node_of(&map, name), Ok(open.as_str()), "{name} must keep {open}");
    }
    assert_eq!(node_of(&map, "hostfirst_added_in_the_next_minor"), Ok(next.as_str()));
    let experimental = format!("HOSTFIRST_EXPERIMENTAL_{major}.{}", minor + 1);
    assert_eq!(node_of(&map, "hostfirst_shard_run"), Ok(experimental.as_str()));
    // Without the steps the build refuses the next version, saying what to do.
    let e = check(&parse(&text).unwrap(), major, minor + 1).unwrap_err();
    assert!(e.contains(&format!("{next} {{ global: hostfirst_*; }} {open};")), "{e}");
}

/// (name, version) of every symbol the library defines in its dynamic symbol table, from `readelf --dyn-syms -W`.
fn defined_dynamic_symbols(lib: &Path) -> Vec<(String, String)> {
    let out = run(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib));
    assert!(out.status.success(), "readelf: {}", text(&out));
    let mut syms = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // Num: Value Size Type Bind Vis Ndx Name
        let f: Vec<&str> = line.split_whitespace().collect();
        let numbered = f.first().and_then(|n| n.strip_suffix(':')).is_some_and(|n| n.parse::<u32>().is_ok());
        if !numbered || f.len() < 8 || f[6] == "UND" || f[3] == "SECTION" || f[3] == "FILE" {
            continue;
        }
        let (name, version) = match f[7].split_once('@') {
            Some((n, v)) => (n.to_string(), v.trim_start_matches('@').to_string()),
            None => (f[7].to_string(), String::new()),
        };
        // The version definition itself appears as an absolute symbol named after the node.
        if f[6] == "ABS" && name == version {
            continue;
        }
        syms.push((name, version));
    }
    syms
}

#[test]
fn every_export_is_a_header_function_with_the_version_node() {
    if !have_tool("readelf", "--version") {
        return;
    }
    let lib = prefix().join("lib").join(real_name());
    let syms = defined_dynamic_symbols(&lib);
    let map = map();
    let bad: Vec<String> = syms
        .iter()
        .filter(|(n, v)| !n.starts_with("hostfirst_") || crate::nodes::node_of(&map, n).ok() != Some(v.as_str()))
        .map(|(n, v)| format!("{n}@{v} (the map says {:?})", crate::nodes::node_of(&map, n)))
        .collect();
    assert!(bad.is_empty(), "exports that are not hostfirst_* functions with their node of abi/hostfirst.map: {bad:?}");
    // The header's experimental block and the experimental node hold the same functions.
    let experimental_node = map.experimental.as_ref().unwrap().name.clone();
    let mut in_node: Vec<&str> =
        syms.iter().filter(|(_, v)| *v == experimental_node).map(|(n, _)| n.as_str()).collect();
    in_node.sort();
    let header = crate::header::header_code();
    let mut gated = Vec::new();
    for block in header.split("#if defined(HOSTFIRST_EXPERIMENTAL)").skip(1) {
        let block = block.split("#endif").next().unwrap();
        gated
            .extend(crate::header::declared_names(block).into_iter().filter(|(k, _)| *k == "function").map(|(_, n)| n));
    }
    gated.sort();
    assert!(in_node.len() >= 10, "only {} experimental exports", in_node.len());
    assert_eq!(in_node, gated, "the header's experimental functions and the node {experimental_node} differ");

    // Exactly the header's functions (the installed build has no test hooks).
    let mut exported: Vec<String> = syms.into_iter().map(|(n, _)| n).collect();
    exported.sort();
    let mut declared: Vec<String> = crate::header::declared_names(&crate::header::header_code())
        .into_iter()
        .filter(|(k, n)| *k == "function" && !n.starts_with("hostfirst__test_"))
        .map(|(_, n)| n)
        .collect();
    declared.sort();
    declared.dedup();
    assert!(declared.len() > 90, "only {} functions parsed from the header", declared.len());
    assert_eq!(exported, declared, "the library's exports and the header's functions differ");
}

#[test]
fn installed_library_is_stripped_with_debug_info_beside_it() {
    if !have_tool("readelf", "--version") {
        return;
    }
    let lib = prefix().join("lib").join(real_name());
    let size = std::fs::metadata(&lib).unwrap().len();
    eprintln!("installed {}: {size} bytes", lib.display());
    assert!(size <= MAX_LIBRARY_BYTES, "{} is {size} bytes, more than 11 MiB: is it stripped?", lib.display());

    let sections = |f: &Path| {
        let out = run(Command::new("readelf").args(["-S", "-W"]).arg(f));
        assert!(out.status.success(), "readelf -S {}: {}", f.display(), text(&out));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let lib_sections = sections(&lib);
    assert!(!lib_sections.contains(".debug_info"), "{} still has debug info", lib.display());
    assert!(lib_sections.contains(".gnu_debuglink"), "{} names no debug file", lib.display());

    let debug = prefix().join("lib").join(format!("{}.debug", real_name()));
    assert!(sections(&debug).contains(".debug_info"), "{} holds no debug info", debug.display());
    let link = run(Command::new("readelf").args(["--string-dump=.gnu_debuglink"]).arg(&lib));
    assert!(
        String::from_utf8_lossy(&link.stdout).contains(&format!("{}.debug", real_name())),
        "the debuglink does not name {}.debug: {}",
        real_name(),
        text(&link)
    );
    // The same build: the build ids agree (debuggers match them).
    let build_id = |f: &Path| {
        let out = run(Command::new("readelf").arg("-n").arg(f));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID:").map(|s| s.trim().to_string()))
            .unwrap_or_else(|| panic!("no build id in {}", f.display()))
    };
    assert_eq!(build_id(&lib), build_id(&debug));
    // The static library is installed without debug info too.
    let archive = prefix().join("lib/libhostfirst.a");
    assert!(!sections(&archive).contains(".debug_info"), "{} has debug info", archive.display());
}

/// Runs scripts/abi-check.sh on the installed tree with extra arguments (`--baseline`, `--header`, ...).
fn abi_check(args: &[(&str, &Path)]) -> (i32, String) {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/abi-check.sh")).arg("--prefix").arg(prefix());
    for (flag, path) in args {
        cmd.arg(flag).arg(path);
    }
    let out = run(&mut cmd);
    (out.status.code().unwrap_or(-1), text(&out))
}

fn have_abi_tools() -> bool {
    have_tool("abidiff", "--version") && have_tool("readelf", "--version") && have_tool("python3", "--version")
}

#[test]
fn library_is_compatible_with_the_committed_baselines() {
    if !have_abi_tools() {
        return;
    }
    for ext in ["abi", "txt"] {
        let baseline = root().join("abi").join(format!("{}.{ext}", soname()));
        assert!(
            baseline.is_file(),
            "no ABI baseline {} for this SONAME: make it on purpose with: {REGENERATE}",
            baseline.display()
        );
    }
    let (code, report) = abi_check(&[]);
    eprintln!("{report}");
    assert_eq!(code, 0, "the ABI check failed:\n{report}");
}

/// A copy of `src` with `edit` applied, under the tests' work directory.
fn edited(name: &str, src: &Path, edit: impl FnOnce(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(src).unwrap();
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit for {name} changed nothing");
    let dir = work_dir().join("abi");
    std::fs::create_dir_all(&dir).unwrap();
    let ext = src.extension().unwrap().to_str().unwrap();
    let path = dir.join(format!("{name}.{ext}"));
    std::fs::write(&path, edited).unwrap();
    path
}

fn committed_xml() -> PathBuf {
    root().join("abi").join(format!("{}.abi", soname()))
}

/// Removes the element that starts with `start` (through `end`) once.
fn cut(text: &str, start: &str, end: &str) -> String {
    let i = text.find(start).unwrap_or_else(|| panic!("{start} not in the text"));
    let j = i + text[i..].find(end).unwrap() + end.len();
    format!("{}{}", &text[..i], &text[j..])
}

/// Replaces the first `from` after `anchor` with `to`.
fn replace_after(text: &str, anchor: &str, from: &str, to: &str) -> String {
    let a = text.find(anchor).unwrap_or_else(|| panic!("{anchor} not in the text"));
    let i = a + text[a..].find(from).unwrap_or_else(|| panic!("{from} not after {anchor}"));
    format!("{}{to}{}", &text[..i], &text[i + from.len()..])
}

fn assert_verdict(what: &str, (code, report): (i32, String), want: i32, says: &[&str]) {
    assert_eq!(code, want, "{what}: exit {code}, expected {want}:\n{report}");
    for s in says {
        assert!(report.contains(s), "{what}: the report does not say `{s}`:\n{report}");
    }
    if want == 1 {
        assert!(report.contains(REGENERATE), "{what}: the failure must name the regeneration command:\n{report}");
    }
}

/// Each kind of change, made to a copy of the installed header, judged by the C view: the two the policy
/// allows pass, the others fail and name the thing in C terms (finding 2 of issue 37: renumbered constants
/// and #defines passed before, as they never reached the binary baseline).
#[test]
fn abi_check_verdicts_on_changed_headers() {
    if !have_abi_tools() {
        return;
    }
    let header = prefix().join("include/hostfirst.h");
    let check = |name: &str, edit: &dyn Fn(String) -> String| {
        let h = edited(name, &header, edit);
        abi_check(&[("--header", &h)])
    };
    // Append a field at the end of an extensible struct: compatible, reported as an addition.
    let r = check("append", &|t| {
        t.replacen(
            "  const uint64_t *strides;\n} hostfirst_view_info;",
            "  const uint64_t *strides;\n  uint64_t appended;\n} hostfirst_view_info;",
            1,
        )
    });
    assert_verdict("append at the end", r, 0, &["field `uint64_t appended` appended at offset 80 (size 80 -> 88)"]);
    // Insert a field in the middle: incompatible.
    let r = check("insert", &|t| {
        replace_after(
            &t,
            "typedef struct hostfirst_view_info {",
            "  uint64_t nbytes;",
            "  uint64_t inserted;\n  uint64_t nbytes;",
        )
    });
    assert_verdict(
        "insert mid-struct",
        r,
        1,
        &["INCOMPATIBLE: struct hostfirst_view_info", "`uint64_t nbytes` at offset 32 is now uint64_t inserted at 32"],
    );
    // Append to a struct that does not begin with struct_size (callers allocate it): incompatible.
    let r = check("append_fixed", &|t| {
        t.replacen(
            "  int32_t ordinal;\n} hostfirst_device;",
            "  int32_t ordinal;\n  int32_t more;\n} hostfirst_device;",
            1,
        )
    });
    assert_verdict("append to a fixed struct", r, 1, &["INCOMPATIBLE: struct hostfirst_device"]);
    // Renumber an enum constant (the example): incompatible.
    let r = check("renumber_enum", &|t| {
        t.replacen(
            "HOSTFIRST_BACKEND_STATUS_LIBRARY_NOT_FOUND = 2,",
            "HOSTFIRST_BACKEND_STATUS_LIBRARY_NOT_FOUND = 9,",
            1,
        )
    });
    assert_verdict(
        "renumber an enum constant",
        r,
        1,
        &["INCOMPATIBLE: constant HOSTFIRST_BACKEND_STATUS_LIBRARY_NOT_FOUND: 2 (hostfirst_backend_status)  ->  9"],
    );
    // Renumber a #define: incompatible.
    let r =
        check("renumber_define", &|t| t.replacen("#define HOSTFIRST_MAX_RANK 32", "#define HOSTFIRST_MAX_RANK 33", 1));
    assert_verdict("renumber a #define", r, 1, &["INCOMPATIBLE: macro HOSTFIRST_MAX_RANK: 32  ->  33"]);
    // Change a parameter's type: incompatible.
    let r =
        check("param_type", &|t| replace_after(&t, "hostfirst_view_slice_rows(", "uint64_t start", "uint32_t start"));
    assert_verdict(
        "change a parameter type",
        r,
        1,
        &["INCOMPATIBLE: function hostfirst_view_slice_rows", "uint32_t, uint64_t"],
    );
    // Remove an exported function: incompatible.
    let r = check("remove", &|t| {
        let i = t.find("hostfirst_status hostfirst_view_narrow(").unwrap();
        let j = i + t[i..].find(");").unwrap() + 2;
        format!("{}{}", &t[..i], &t[j..])
    });
    assert_verdict("remove a function", r, 1, &["INCOMPATIBLE: function hostfirst_view_narrow was removed"]);
    // Declare a function the library does not export: incompatible (the header is not this library's).
    let r = check("add", &|t| {
        t.replacen(
            "#ifdef __cplusplus\n}  // extern \"C\"",
            "hostfirst_status hostfirst_frobnicate(void);\n\n#ifdef __cplusplus\n}  // extern \"C\"",
            1,
        )
    });
    assert_verdict(
        "declare a function the library lacks",
        r,
        1,
        &["INCOMPATIBLE: hostfirst_frobnicate is declared by the header but not exported by the library"],
    );
    // A function the C baseline lacks (the header and library have it): compatible, reported as an addition.
    let view = root().join("abi").join(format!("{}.txt", soname()));
    let older = edited("c_added", &view, |t| {
        t.lines().filter(|l| !l.starts_with("function hostfirst_view_narrow:")).map(|l| format!("{l}\n")).collect()
    });
    assert_verdict(
        "add a function",
        abi_check(&[("--c-baseline", &older)]),
        0,
        &["added: function hostfirst_view_narrow: hostfirst_status hostfirst_view_narrow(", REGENERATE],
    );
    // The experimental tier is not compared: changing one of its functions passes.
    let r = check("experimental", &|t| {
        replace_after(&t, "hostfirst_shard_rules_skip(", "const char *pattern", "const char *pattern, int32_t x")
    });
    assert_verdict("change an experimental function", r, 0, &[]);
}

/// The header against the library it is installed with, whatever the baselines say (issue 43): a packager
/// who regenerated the baselines from a header that is not the library's (a stale one) still gets a failure.
/// Each doctored header comes with a C baseline made from it, so only this comparison can see the problem:
/// (a) a function the header declares and the library does not export, (b) an enum constant whose value
/// differs from the library's own enum (what a Rust enum renumbered without regenerating the header gives).
#[test]
fn abi_check_compares_the_header_with_its_own_library() {
    if !have_abi_tools() {
        return;
    }
    let header = prefix().join("include/hostfirst.h");
    let check = |name: &str, edit: &dyn Fn(String) -> String| {
        let h = edited(name, &header, edit);
        let view = work_dir().join("abi").join(format!("{name}.view.txt"));
        let out = run(Command::new("python3")
            .arg(root().join("scripts/abi_c_view.py"))
            .arg("report")
            .arg(&h)
            .args(["--soname", &soname()]));
        assert!(out.status.success(), "the C view of {name}: {}", text(&out));
        std::fs::write(&view, &out.stdout).unwrap();
        abi_check(&[("--header", &h), ("--c-baseline", &view)])
    };
    let r = check("lib_lacks", &|t| {
        t.replacen(
            "#ifdef __cplusplus\n}  // extern \"C\"",
            "hostfirst_status hostfirst_frobnicate(void);\n\n#ifdef __cplusplus\n}  // extern \"C\"",
            1,
        )
    });
    assert_verdict(
        "a function the library does not export",
        r,
        1,
        &["INCOMPATIBLE: hostfirst_frobnicate is declared by the header but not exported by the library"],
    );
    let r = check("lib_renumbered", &|t| {
        t.replacen("HOSTFIRST_STATUS_TRUNCATED = 51,", "HOSTFIRST_STATUS_TRUNCATED = 59,", 1)
    });
    assert_verdict(
        "an enum constant the library numbers otherwise",
        r,
        1,
        &["INCOMPATIBLE: HOSTFIRST_STATUS_TRUNCATED is 59 in the header but 51 in the library"],
    );
    // The installed header itself agrees with its library; the library's own enums are found for the enums C
    // passes in (only DLPack's bit flags, never a Rust enum the code uses, may be absent from the debug info).
    let (code, report) = abi_check(&[]);
    assert_eq!(code, 0, "{report}");
    for e in
        ["hostfirst_status", "hostfirst_dtype", "hostfirst_device_kind", "hostfirst_backend_status", "hostfirst_format"]
    {
        assert!(!report.contains(&format!("note: {e}:")), "{e} was not checked:\n{report}");
    }
}

/// The same kinds of change seen by libabigail in the compiled library (edits to a copy of the binary
/// baseline: the library then looks changed against it): an append at the end of an extensible struct passes
/// (finding 1 of issue 37: it failed before), a mid-struct insertion, a retyped parameter, a moved field and a
/// removed function fail, an added function passes; a new function in a released node fails.
#[test]
fn abi_check_verdicts_on_edited_binary_baselines() {
    if !have_abi_tools() {
        return;
    }
    let xml = committed_xml();
    let class = |t: &str| {
        let s = t.find("<class-decl name='hostfirst_view_info'").expect("hostfirst_view_info in the baseline");
        (s, s + t[s..].find("</class-decl>").unwrap())
    };
    // The library appended `strides` to hostfirst_view_info (the baseline lacks it).
    let appended = edited("bin_append", &xml, |t| {
        let (s, e) = class(&t);
        let c = &t[s..e];
        let i = c.rfind("<data-member").unwrap();
        let j = i + c[i..].find("</data-member>").unwrap() + "</data-member>".len();
        let c = format!("{}{}", &c[..i], &c[j..]).replacen("size-in-bits='640'", "size-in-bits='576'", 1);
        format!("{}{c}{}", &t[..s], &t[e..])
    });
    assert_verdict("append at the end (binary)", abi_check(&[("--baseline", &appended)]), 0, &[]);
    // The library inserted `nbytes` in the middle (the baseline lacks it; later fields sit 64 bits lower).
    let inserted = edited("bin_insert", &xml, |t| {
        let (s, e) = class(&t);
        let c = &t[s..e];
        let k = c.find("<var-decl name='nbytes'").unwrap();
        let i = c[..k].rfind("<data-member").unwrap();
        let j = k + c[k..].find("</data-member>").unwrap() + "</data-member>".len();
        let mut c = format!("{}{}", &c[..i], &c[j..]).replacen("size-in-bits='640'", "size-in-bits='576'", 1);
        for bits in [320, 384, 448, 512, 576] {
            c = c.replacen(
                &format!("layout-offset-in-bits='{bits}'"),
                &format!("layout-offset-in-bits='{}'", bits - 64),
                1,
            );
        }
        format!("{}{c}{}", &t[..s], &t[e..])
    });
    assert_verdict(
        "insert mid-struct (binary)",
        abi_check(&[("--baseline", &inserted)]),
        1,
        &["hostfirst_view_info", "nbytes", "INCOMPATIBLE: abidiff exit 4"],
    );
    // A parameter of another type: slice_rows' `start` was the type of `view`.
    let retyped = edited("bin_param", &xml, |t| {
        let a = t.find("<function-decl name='hostfirst_view_slice_rows'").unwrap();
        let view_type = {
            let p = a + t[a..].find("<parameter type-id='").unwrap() + "<parameter type-id='".len();
            t[p..p + t[p..].find('\'').unwrap()].to_string()
        };
        replace_after(
            &t,
            "<function-decl name='hostfirst_view_slice_rows'",
            "<parameter type-id='79fae712' name='start'/>",
            &format!("<parameter type-id='{view_type}' name='start'/>"),
        )
    });
    assert_verdict(
        "change a parameter type (binary)",
        abi_check(&[("--baseline", &retyped)]),
        1,
        &["hostfirst_view_slice_rows", "INCOMPATIBLE"],
    );
    // A baseline with a function the library lacks: a removal fails.
    let removed = edited("bin_removed", &xml, |t| {
        t.replace("'hostfirst_view_narrow'", "'hostfirst_view_narrow_old'")
            .replace("'hostfirst_view_narrow@@", "'hostfirst_view_narrow_old@@")
    });
    assert_verdict(
        "remove a function (binary)",
        abi_check(&[("--baseline", &removed)]),
        1,
        &["1 Removed function", "hostfirst_view_narrow_old", "symbols removed"],
    );
    // A baseline without a function of the open node (at x.0 any stable function; later, one the minor adds):
    // the library adds a function in the open node. Passes, reported, while the open node's minor is unreleased
    // (a changelog whose heading for this version says so).
    let (major, minor): (u64, u64) =
        (env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap(), env!("CARGO_PKG_VERSION_MINOR").parse().unwrap());
    let open = format!("HOSTFIRST_{major}.{minor}");
    let next = format!("HOSTFIRST_{major}.{}", minor + 1);
    let name = open_node_function(&open);
    let name = name.as_str();
    let added = edited("bin_added", &xml, |t| {
        let t = cut(&t, &format!("<elf-symbol name='{name}'"), "/>");
        cut(&t, &format!("<function-decl name='{name}'"), "</function-decl>")
    });
    // Two changelogs: this version unreleased, and released (`## 1.0.0`, as CHANGELOG.md has it once cut).
    let version = env!("CARGO_PKG_VERSION");
    let changelog = |name: &str, heading: String| {
        let path = work_dir().join("abi").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("# Changelog\n\n{heading}\n\n- something\n\n## 0.1.0\n")).unwrap();
        path
    };
    let unreleased = changelog("unreleased.md", format!("## {version} (unreleased)"));
    let released = changelog("released.md", format!("## {version}"));
    assert_verdict(
        "add a function (binary), the minor unreleased",
        abi_check(&[("--baseline", &added), ("--changelog", &unreleased)]),
        0,
        &["1 Added function", name, REGENERATE],
    );
    // The same addition once the open node's minor is released: refused, the new function must go into the next
    // minor's node (issue 43: from 1.0.0 on, new functions land in HOSTFIRST_1.1).
    assert_verdict(
        "a new function in the released open node",
        abi_check(&[("--baseline", &added), ("--changelog", &released)]),
        1,
        &[&format!(
            "INCOMPATIBLE: {name} is new but carries {open}, released in {version} (released.md): \
             new functions go into {next}: bump the version in Cargo.toml to {major}.{}.0",
            minor + 1
        )],
    );
    // The same addition with the open node frozen and a later minor's node open: the new function carries
    // the released node, which the check refuses.
    let later = edited("later_minor", &root().join("abi/hostfirst.map"), |t| {
        format!("{t}\n{next} {{ global: hostfirst_*; }} {open};\n")
    });
    assert_verdict(
        "a new function in a released node",
        abi_check(&[("--baseline", &added), ("--map", &later)]),
        1,
        &[&format!("INCOMPATIBLE: {name} is new but carries {open}, a released node: new functions go into {next}")],
    );
}

/// The first stable function of the committed C view that abi/hostfirst.map puts in the open node `open`.
fn open_node_function(open: &str) -> String {
    let map = crate::nodes::parse(&std::fs::read_to_string(root().join("abi/hostfirst.map")).unwrap()).unwrap();
    let view = std::fs::read_to_string(root().join("abi").join(format!("{}.txt", soname()))).unwrap();
    view.lines()
        .filter_map(|l| l.strip_prefix("function ")?.split(':').next())
        .find(|n| crate::nodes::node_of(&map, n).as_deref() == Ok(open))
        .unwrap_or_else(|| panic!("no function of the baseline is in the open node {open}"))
        .to_string()
}
