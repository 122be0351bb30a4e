//! The ABI promise, checked on the library scripts/install.sh installs (the tree of tests/it/install.rs):
//! every export is a `hostfirst_*` function of the header carrying the version node of abi/hostfirst.map; the
//! library is stripped (<= 5 MiB) with its debug info beside it; and libabigail's abidiff finds it compatible
//! with the committed baseline abi/<SONAME>.abi (scripts/abi-check.sh; scripts/abi-baseline.sh regenerates it).
//! The check's own verdicts (an addition passes and is reported, a removal or a layout change fails and names
//! the regeneration command) are tested on edited copies of the baseline.
//!
//! readelf and abidiff are installed by scripts/test.sh; where one is missing the test fails under CI (`CI=true`)
//! and otherwise skips with a message.
#![cfg(all(unix, not(any(target_os = "macos", target_os = "ios", target_os = "android"))))]

use crate::install::{have_tool, prefix, real_name, soname, work_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const REGENERATE: &str = "bash scripts/abi-baseline.sh";
const MAX_LIBRARY_BYTES: u64 = 5 << 20;

fn root() -> PathBuf {
    crate::common::root()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// The one version node of abi/hostfirst.map.
fn map_node() -> String {
    let map = std::fs::read_to_string(root().join("abi/hostfirst.map")).unwrap();
    let nodes: Vec<String> = map
        .lines()
        .filter_map(|l| l.trim_end().strip_suffix('{'))
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with("HOSTFIRST_"))
        .collect();
    assert_eq!(nodes.len(), 1, "abi/hostfirst.map must define one HOSTFIRST_* node: {nodes:?}");
    nodes[0].clone()
}

#[test]
fn version_node_names_the_abi_line() {
    let (major, minor) = (env!("CARGO_PKG_VERSION_MAJOR"), env!("CARGO_PKG_VERSION_MINOR"));
    // 0.y: every minor is its own ABI line (its own SONAME), so its own node. From 1.0 the node of 1.0 stays and
    // minors add nodes (see abi/hostfirst.map); this test will need that rule then.
    assert_eq!(major, "0", "1.0: give later minors their own nodes and extend this test");
    assert_eq!(map_node(), format!("HOSTFIRST_{major}.{minor}"));
    if cfg!(target_os = "linux") {
        assert_eq!(option_env!("HOSTFIRST_SYMBOL_VERSION"), Some(map_node().as_str()), "build.rs reads the map");
    }
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
    let node = map_node();
    let bad: Vec<String> = syms
        .iter()
        .filter(|(n, v)| !n.starts_with("hostfirst_") || *v != node)
        .map(|(n, v)| format!("{n}@{v}"))
        .collect();
    assert!(bad.is_empty(), "exports that are not hostfirst_* functions versioned {node}: {bad:?}");

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
    assert!(size <= MAX_LIBRARY_BYTES, "{} is {size} bytes, more than 5 MiB: is it stripped?", lib.display());

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

/// Runs scripts/abi-check.sh on the installed tree (optionally against another baseline).
fn abi_check(baseline: Option<&Path>) -> (i32, String) {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/abi-check.sh")).arg("--prefix").arg(prefix());
    if let Some(b) = baseline {
        cmd.arg("--baseline").arg(b);
    }
    let out = run(&mut cmd);
    (out.status.code().unwrap_or(-1), text(&out))
}

#[test]
fn library_is_compatible_with_the_committed_baseline() {
    if !have_tool("abidiff", "--version") || !have_tool("readelf", "--version") {
        return;
    }
    let baseline = root().join("abi").join(format!("{}.abi", soname()));
    assert!(
        baseline.is_file(),
        "no ABI baseline {} for this SONAME: make it on purpose with: {REGENERATE}",
        baseline.display()
    );
    let (code, report) = abi_check(None);
    eprintln!("{report}");
    assert_eq!(code, 0, "the ABI check failed:\n{report}");
}

/// The committed baseline with `edit` applied, written under the tests' work directory.
fn edited_baseline(name: &str, edit: impl FnOnce(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(root().join("abi").join(format!("{}.abi", soname()))).unwrap();
    let edited = edit(text.clone());
    assert_ne!(edited, text, "the edit for {name} changed nothing");
    let dir = work_dir().join("abi");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.abi"));
    std::fs::write(&path, edited).unwrap();
    path
}

/// Removes the element that starts with `start` (through `end`) once.
fn cut(text: &str, start: &str, end: &str) -> String {
    let i = text.find(start).unwrap_or_else(|| panic!("{start} not in the baseline"));
    let j = i + text[i..].find(end).unwrap() + end.len();
    format!("{}{}", &text[..i], &text[j..])
}

#[test]
fn abi_check_reports_additions_and_fails_on_removals_and_layout_changes() {
    if !have_tool("abidiff", "--version") || !have_tool("readelf", "--version") {
        return;
    }
    // A baseline without hostfirst_view_narrow: the library adds a function. Reported, not a failure.
    let added = edited_baseline("added", |t| {
        let t = cut(&t, "<elf-symbol name='hostfirst_view_narrow'", "/>");
        cut(&t, "<function-decl name='hostfirst_view_narrow'", "</function-decl>")
    });
    let (code, report) = abi_check(Some(&added));
    assert_eq!(code, 0, "an added function must pass:\n{report}");
    assert!(report.contains("1 Added function") && report.contains("hostfirst_view_narrow"), "{report}");
    assert!(report.contains(REGENERATE), "the report must say how to record the addition:\n{report}");

    // A baseline with a function the library lacks: a removal fails.
    let removed = edited_baseline("removed", |t| {
        t.replace("'hostfirst_view_narrow'", "'hostfirst_view_narrow_old'")
            .replace("'hostfirst_view_narrow@@", "'hostfirst_view_narrow_old@@")
    });
    let (code, report) = abi_check(Some(&removed));
    assert_eq!(code, 1, "a removed function must fail:\n{report}");
    assert!(report.contains("1 Removed function") && report.contains("hostfirst_view_narrow_old"), "{report}");
    assert!(report.contains(REGENERATE), "the failure must name the regeneration command:\n{report}");

    // A baseline where a field of hostfirst_view_info sits elsewhere: a layout change fails.
    let moved = edited_baseline("layout", |t| {
        let s = t.find("<class-decl name='hostfirst_view_info'").expect("hostfirst_view_info in the baseline");
        let field = s + t[s..].find("name='nbytes'").unwrap();
        let off = t[..field].rfind("layout-offset-in-bits='").unwrap() + "layout-offset-in-bits='".len();
        let end = off + t[off..].find('\'').unwrap();
        let bits: u64 = t[off..end].parse().unwrap();
        format!("{}{}{}", &t[..off], bits + 64, &t[end..])
    });
    let (code, report) = abi_check(Some(&moved));
    assert_eq!(code, 1, "a moved struct field must fail:\n{report}");
    assert!(report.contains("hostfirst_view_info") && report.contains("nbytes"), "{report}");
    assert!(report.contains(REGENERATE), "{report}");
}
