//! The Go binding (bindings/go, cgo) tested as a Go user would build it: against the header and library that
//! scripts/install.sh installed (the tree of tests/it/install.rs), found with pkg-config. `go test` runs offline:
//! the package uses the standard library only, GOPROXY=off, and GOPATH/GOCACHE live under target/.
//!
//! go (Debian's golang-go) is installed by scripts/test.sh; where it is missing the test fails under CI
//! (`CI=true`) and otherwise skips with a message.
#![cfg(all(unix, not(any(target_os = "macos", target_os = "ios", target_os = "android"))))]

use crate::install::{have_tool, prefix, work_dir};
use std::process::Command;

#[test]
fn go_binding_tests_pass_against_the_installed_library() {
    if !have_tool("go", "version")
        || !have_tool("pkg-config", "--version")
        || !have_tool(&crate::common::cc(), "--version")
    {
        return;
    }
    let root = crate::common::root();
    let lib = prefix().join("lib");
    let go = work_dir().join("go");
    // The race detector where Go has it (cgo on Linux x86-64 and AArch64): the handles, finalizers and
    // KeepAlives of the binding are shared between goroutines.
    let race = cfg!(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")));
    let mut args = vec!["test", "-count=1", "-v"];
    if race {
        args.push("-race");
    }
    args.push("./...");
    // TestRemoteURL opens http:// URLs of the fault-injecting server (tests/remote/fault_server.py, loopback).
    let remote = crate::remote::server();
    let out = Command::new("go")
        .args(&args)
        .current_dir(root.join("bindings/go"))
        .env("CGO_ENABLED", "1")
        .env("CC", crate::common::cc())
        // The binding's C preamble is held to the C programs' standard.
        .env("CGO_CFLAGS", "-O2 -g -Wall -Wextra -Werror")
        .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
        .env("LD_LIBRARY_PATH", &lib)
        .env("HOSTFIRST_FIXTURES", root.join("tests/fixtures"))
        .env("HOSTFIRST_REMOTE_BASE", format!("http://127.0.0.1:{}/go/", remote.port))
        .env("HOSTFIRST_REMOTE_DIR", &remote.dir)
        // Offline and self-contained: no module downloads, no toolchain switch, caches under target/.
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env("GO111MODULE", "on")
        .env("GOPATH", go.join("path"))
        .env("GOCACHE", go.join("cache"))
        .env("GOENV", "off")
        // Collect often, so finalizers and KeepAlive mistakes show.
        .env("GOGC", "1")
        .output()
        .expect("run go test");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "go test failed ({}):\n{text}", out.status);
    for name in [
        "TestCensus",
        "TestOpenViewRead",
        "TestPutToCPU",
        "TestErrorsCarryStatusAndMessage",
        "TestVersionRule",
        "TestWriterRoundTrip",
        "TestTokenFiles",
        "TestGather",
        "TestFileDetails",
        "TestWriterPieces",
        "TestRulesPlanLoad",
        "TestViewsMore",
        "TestPutsDevicesStreams",
        "TestDefaultsAndScopes",
        "TestDLPackStreamsFit",
        "TestStatusesMatchTheHeader",
        "TestErrorsIsStatus",
        "TestFitOnEveryRefusal",
        "TestReadAtIsReaderAt",
        "TestRemoteURL",
        "TestRemoteConfigure",
    ] {
        assert!(text.contains(&format!("--- PASS: {name}")), "{name} did not run:\n{text}");
    }
    // The test binary used the installed library (pkg-config's flags name the prefix).
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "hostfirst"])
        .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
        .output()
        .unwrap();
    let flags = String::from_utf8_lossy(&flags.stdout).to_string();
    assert!(flags.contains(prefix().to_str().unwrap()), "pkg-config does not point at the install: {flags}");
}

/// The Go module can be fetched with `go get`: its path is the repository's (Cargo.toml `repository`, without
/// the scheme) plus the directory, and its one package lives in the directory `hostfirst`, so that the import
/// path ends in the package's name (no alias needed). The README that tells users so says the same.
#[test]
fn go_module_path_is_the_repository_path() {
    let root = crate::common::root();
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let repo = cargo
        .lines()
        .find_map(|l| l.strip_prefix("repository = \""))
        .and_then(|r| r.strip_suffix('"'))
        .expect("Cargo.toml names its repository");
    let module = format!("{}/bindings/go", repo.trim_start_matches("https://"));
    let go_mod = std::fs::read_to_string(root.join("bindings/go/go.mod")).unwrap();
    assert_eq!(go_mod.lines().next(), Some(format!("module {module}").as_str()));
    assert!(module.contains('.') && module.split('/').count() >= 3, "{module} is not a path `go get` can fetch");
    let import = format!("{module}/hostfirst");
    // Every Go file of the module is in the package directory and declares `package hostfirst`: the last
    // element of the import path.
    let mut files = 0;
    for e in std::fs::read_dir(root.join("bindings/go")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with(".go"), "bindings/go/{name}: Go files belong in bindings/go/hostfirst");
    }
    for e in std::fs::read_dir(root.join("bindings/go/hostfirst")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "go") {
            let text = std::fs::read_to_string(&p).unwrap();
            let package = text.lines().find(|l| l.starts_with("package ")).unwrap_or("");
            assert_eq!(package, "package hostfirst", "{}", p.display());
            files += 1;
        }
    }
    assert!(files > 5, "{files} Go files in bindings/go/hostfirst");
    let readme = std::fs::read_to_string(root.join("bindings/go/README.md")).unwrap();
    for shown in [format!("go get {import}"), format!("import \"{import}\""), "bindings/go/vX.Y.Z".to_string()] {
        assert!(readme.contains(&shown), "bindings/go/README.md does not show `{shown}`");
    }
    let top = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(top.contains(&format!("go get {import}")), "README.md does not show `go get {import}`");
    assert!(!top.contains("import hostfirst \""), "README.md still aliases the import");
}

/// Every function of the header outside the experimental tier is called by the Go package, or listed in
/// bindings/go/not-yet-covered.txt; the list holds nothing the package calls or the header lacks, so it only
/// shrinks. (Experimental functions: declared only with HOSTFIRST_EXPERIMENTAL, which the package does not define.)
#[test]
fn go_covers_every_stable_function_but_the_listed_ones() {
    let root = crate::common::root();
    let header = crate::header::header_code();
    let mut stable = std::collections::BTreeSet::new();
    let mut rest = header.as_str();
    // The header without its experimental blocks.
    let mut outside = String::new();
    while let Some(i) = rest.find("#if defined(HOSTFIRST_EXPERIMENTAL)") {
        outside.push_str(&rest[..i]);
        let end = rest[i..].find("#endif").expect("an experimental block ends");
        rest = &rest[i + end..];
    }
    outside.push_str(rest);
    for (kind, name) in crate::header::declared_names(&outside) {
        if kind == "function" && !name.starts_with("hostfirst__test_") {
            stable.insert(name);
        }
    }
    assert!(stable.len() > 90, "{} stable functions parsed", stable.len());
    // Every source file of the package (tests excluded: a call from a test covers nothing).
    let mut go = String::new();
    for e in std::fs::read_dir(root.join("bindings/go/hostfirst")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        // The C the package's preambles include (hf_go_error.h) is the package's code too.
        if (name.ends_with(".go") && !name.ends_with("_test.go")) || name.ends_with(".h") {
            go.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
    let called = |f: &str| go.contains(&format!("{f}("));
    let listed: Vec<String> = std::fs::read_to_string(root.join("bindings/go/not-yet-covered.txt"))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    let uncovered: Vec<&String> = stable.iter().filter(|f| !called(f) && !listed.contains(f)).collect();
    assert!(
        uncovered.is_empty(),
        "stable functions the Go package neither calls nor lists as not yet covered: {uncovered:?}"
    );
    let stale: Vec<&String> = listed.iter().filter(|f| called(f) || !stable.contains(*f)).collect();
    assert!(
        stale.is_empty(),
        "bindings/go/not-yet-covered.txt lists functions the package calls or the header lacks: {stale:?}"
    );
    eprintln!("Go covers {} of {} stable functions", stable.len() - listed.len(), stable.len());
}

/// The Go name of a status: `HOSTFIRST_STATUS_INVALID_HEADER_UTF8` is `StatusInvalidHeaderUTF8` (Go's initialisms
/// kept whole: IO, OK, UTF8, JSON, and DType as the package spells it elsewhere).
fn go_status_name(c: &str) -> String {
    let words = c.strip_prefix("HOSTFIRST_STATUS_").expect("a status constant").split('_');
    let camel: String = words
        .map(|w| match w {
            "IO" | "OK" | "UTF8" | "JSON" => w.to_string(),
            "DTYPE" => "DType".to_string(),
            _ => w[..1].to_string() + &w[1..].to_lowercase(),
        })
        .collect();
    format!("Status{camel}")
}

/// Every status of hostfirst.h's `enum hostfirst_status` is an exported constant of the Go package with the
/// header's value, the package declares no status the header lacks, and the table its Go test compares with
/// the C constants through cgo (TestStatusesMatchTheHeader) lists each one: the statuses cannot drift.
#[test]
fn go_has_every_status_of_the_header() {
    let root = crate::common::root();
    let header = crate::header::header_code();
    let start = header.find("enum hostfirst_status").expect("the status enum");
    let body = &header[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
    let mut want = std::collections::BTreeMap::new();
    for item in body.split(',') {
        if let Some((name, value)) = item.split_once('=') {
            want.insert(go_status_name(name.trim()), (name.trim().to_string(), value.trim().parse::<u32>().unwrap()));
        }
    }
    assert!(want.len() >= 45, "{} statuses parsed from hostfirst.h", want.len());
    let go = std::fs::read_to_string(root.join("bindings/go/hostfirst/status.go")).unwrap();
    let mut have = std::collections::BTreeMap::new();
    for line in go.lines().map(str::trim) {
        if let Some((name, value)) = line.split_once(" Status = ") {
            if name.starts_with("Status") && !name.contains(' ') {
                have.insert(name.to_string(), value.trim().parse::<u32>().expect("a status value"));
            }
        }
    }
    let mut wrong = Vec::new();
    for (go_name, (c_name, value)) in &want {
        match have.get(go_name) {
            None => wrong.push(format!("missing: {go_name} Status = {value} ({c_name})")),
            Some(v) if v != value => wrong.push(format!("{go_name} is {v}, {c_name} is {value}")),
            Some(_) => {}
        }
        let row = format!("{{{go_name}, C.{c_name}, \"{}\"}},", &c_name["HOSTFIRST_STATUS_".len()..]);
        if !go.contains(&row) {
            wrong.push(format!("statusesC lacks the row {row}"));
        }
    }
    for name in have.keys().filter(|n| !want.contains_key(*n)) {
        wrong.push(format!("{name}: hostfirst.h has no such status"));
    }
    assert!(wrong.is_empty(), "bindings/go/hostfirst/status.go and hostfirst.h differ:\n{}", wrong.join("\n"));
    // Nowhere else in the package: one list.
    for e in std::fs::read_dir(root.join("bindings/go/hostfirst")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".go") && name != "status.go" {
            let text = std::fs::read_to_string(&p).unwrap();
            assert!(!text.contains(" Status = "), "{name} declares a status: they all belong in status.go");
        }
    }
}
