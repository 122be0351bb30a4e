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
    let out = Command::new("go")
        .args(["test", "-count=1", "-v", "./..."])
        .current_dir(root.join("bindings/go"))
        .env("CGO_ENABLED", "1")
        .env("CC", crate::common::cc())
        .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
        .env("LD_LIBRARY_PATH", &lib)
        .env("HOSTFIRST_FIXTURES", root.join("tests/fixtures"))
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
    for name in
        ["TestCensus", "TestOpenViewRead", "TestPutToCPU", "TestErrorsCarryStatusAndMessage", "TestWriterRoundTrip"]
    {
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
