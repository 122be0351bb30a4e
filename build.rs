//! Build script: gives `libhostfirst.so` a versioned SONAME on ELF targets.
//!
//! SONAME policy (docs/PACKAGING.md): the SONAME names the ABI, not the release.
//!   * `MAJOR >= 1`         -> `libhostfirst.so.MAJOR`          (any 1.x is ABI-compatible with 1.0)
//!   * `0.MINOR.PATCH`, MINOR >= 1 -> `libhostfirst.so.0.MINOR` (every 0.x minor may break the ABI)
//!   * `0.0.PATCH`          -> `libhostfirst.so.0.0.PATCH`      (every 0.0.x release may break it)
//!
//! This is also cargo-c's default rule, so `cargo cinstall` and `scripts/install.sh` agree.
//!
//! Under cargo-c (which enables the `capi` feature) the script adds nothing: cargo-c passes its own
//! `-soname`, computed from `[package.metadata.capi.library]`, and two `-soname` flags must not race.
//!
//! It also puts the SONAME link `libhostfirst.so.<soversion> -> libhostfirst.so` beside the build output
//! (`target/<profile>/`), as an installed tree has it: a program linked with `-Ltarget/release -lhostfirst`
//! records the SONAME, so without the link the loader finds nothing there, even with an rpath (the README's
//! checkout build line; `tests/it/readme_example.rs` runs it).
//!
//! Symbol versions: the cdylib is linked with the version script `abi/hostfirst.map` (a node per minor since
//! 1.0, the open one named after the crate's MAJOR.MINOR, and the experimental node; everything else local),
//! under cargo-c too. This script reads the map with `abi/nodes.rs` (which also checks its rules against the
//! crate version), finds every exported function in the sources (`hostfirst_boundary!("NAME"`), and writes
//! `$OUT_DIR/symbol_nodes.rs`: the macro `symbol_node!("NAME")` giving each one's node, with which
//! `hostfirst_boundary!` binds the export by a `.symver` directive (cfg `hostfirst_symver`), which rustc's own
//! version script cannot override. The open node's name is also passed to the crate as
//! `HOSTFIRST_SYMBOL_VERSION`. GNU ld refuses two version scripts (rustc's is anonymous), so the link uses lld
//! (`-fuse-ld=lld`): rustc's bundled rust-lld on x86_64 Linux (the default linker there since Rust 1.90), a system
//! `ld.lld` elsewhere.

use std::env;
use std::path::{Path, PathBuf};

/// The map's rules and the node of each function (shared with tests/it/abi.rs).
#[path = "abi/nodes.rs"]
mod nodes;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={VERSION_SCRIPT}");
    println!("cargo:rerun-if-changed=abi/nodes.rs");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rustc-check-cfg=cfg(hostfirst_symver)");

    let major: u64 = version_part("CARGO_PKG_VERSION_MAJOR");
    let minor: u64 = version_part("CARGO_PKG_VERSION_MINOR");
    let patch: u64 = version_part("CARGO_PKG_VERSION_PATCH");
    let soversion = soversion(major, minor, patch);

    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let script = manifest_dir.join(VERSION_SCRIPT);
    let map = read_map(&script, major, minor);
    write_symbol_nodes(&manifest_dir, &map);
    write_experimental_marker(major, minor);

    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let family = env::var("CARGO_CFG_TARGET_FAMILY").unwrap_or_default();
    windows_version_resource(&manifest_dir, &os, (major, minor, patch));
    // ELF systems whose loaders use versioned SONAMEs. Android loads libraries by plain file name (apps ship
    // them in the APK), macOS uses install names and Windows has no SONAME: nothing is added there.
    let elf_versioned = family.split(',').any(|f| f == "unix")
        && matches!(
            os.as_str(),
            "linux" | "freebsd" | "dragonfly" | "netbsd" | "openbsd" | "illumos" | "solaris" | "hurd"
        );
    if !elf_versioned {
        return;
    }

    let node = &map.stable.last().expect("checked: a stable node").name;
    println!("cargo:rustc-env=HOSTFIRST_SYMBOL_VERSION={node}");
    println!("cargo:rustc-cfg=hostfirst_symver");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", script.display());
    println!("cargo:rustc-cdylib-link-arg=-fuse-ld=lld");

    let soname = format!("libhostfirst.so.{soversion}");
    // Made visible to the crate's own targets (the integration tests use it to find and check the SONAME).
    println!("cargo:rustc-env=HOSTFIRST_SONAME={soname}");
    if env::var_os("CARGO_FEATURE_CAPI").is_some() {
        return;
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    if let Some(dir) = profile_dir() {
        if let Err(e) = soname_link(&dir, &soname) {
            println!("cargo:warning=could not create {}/{soname}: {e}", dir.display());
        }
    }
}

/// The `.rc` both Windows binaries get their version resource from (scripts/package-windows.sh compiles it for
/// hostfirst.exe).
const VERSION_RC: &str = "packaging/windows/version.rc";

/// On Windows GNU targets (mingw-w64), gives hostfirst.dll its version resource: packaging/windows/version.rc,
/// compiled by mingw-w64's `windres` (`HOSTFIRST_WINDRES`, default `<arch>-w64-mingw32-windres`, part of the
/// binutils that link the DLL) with the crate's version, and linked into the cdylib only. Without windres the
/// build fails, saying so: a DLL without its version would ship unnoticed. Other targets: nothing.
fn windows_version_resource(manifest_dir: &Path, os: &str, (major, minor, patch): (u64, u64, u64)) {
    println!("cargo:rerun-if-changed={VERSION_RC}");
    println!("cargo:rerun-if-env-changed=HOSTFIRST_WINDRES");
    if os != "windows" || env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default() != "gnu" {
        return;
    }
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let windres = env::var("HOSTFIRST_WINDRES").unwrap_or_else(|_| format!("{arch}-w64-mingw32-windres"));
    let version = env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("hostfirst-version.o");
    // windres hands the -D values to its preprocessor through a shell, hence the escaped quotes (a crate version
    // has no character the shell would take).
    let status = std::process::Command::new(&windres)
        .args([format!("-DHF_MAJOR={major}"), format!("-DHF_MINOR={minor}"), format!("-DHF_PATCH={patch}")])
        .arg(format!("-DHF_VERSION=\\\"{version}\\\""))
        .arg("-DHF_EXE=0")
        .args(["-O", "coff", "-i"])
        .arg(manifest_dir.join(VERSION_RC))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run {windres} ({e}): the Windows DLL's version resource needs mingw-w64's windres")
        });
    assert!(status.success(), "{windres} failed ({status}) on {VERSION_RC}");
    println!("cargo:rustc-cdylib-link-arg={}", out.display());
}

/// `target/<profile>` (where cargo puts the cdylib) from `OUT_DIR` = `target/<profile>/build/<pkg>-<hash>/out`;
/// `None` when the layout is not that one.
fn profile_dir() -> Option<PathBuf> {
    let out = PathBuf::from(env::var_os("OUT_DIR")?);
    let pkg = out.parent()?;
    let build = pkg.parent()?;
    let ok = out.file_name()? == "out"
        && pkg.file_name()?.to_str()?.starts_with("hostfirst-")
        && build.file_name()? == "build";
    ok.then(|| build.parent().map(Path::to_path_buf)).flatten()
}

/// Creates `dir/soname -> libhostfirst.so` (relative; dangling until cargo links the library, which it does
/// right after this script). A link already there is replaced atomically; a regular file is left alone.
#[cfg(unix)]
fn soname_link(dir: &Path, soname: &str) -> std::io::Result<()> {
    let link = dir.join(soname);
    match std::fs::symlink_metadata(&link) {
        Ok(m) if !m.file_type().is_symlink() => return Ok(()),
        Ok(_) if std::fs::read_link(&link)? == Path::new("libhostfirst.so") => return Ok(()),
        _ => {}
    }
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{soname}.tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink("libhostfirst.so", &tmp)?;
    std::fs::rename(&tmp, &link)
}

#[cfg(not(unix))]
fn soname_link(_dir: &Path, _soname: &str) -> std::io::Result<()> {
    Ok(())
}

/// The linker version script, relative to the package root.
const VERSION_SCRIPT: &str = "abi/hostfirst.map";

/// Reads and checks the version script (abi/nodes.rs); a map that breaks its rules fails the build, saying why.
fn read_map(script: &Path, major: u64, minor: u64) -> nodes::Nodes {
    let text = std::fs::read_to_string(script).unwrap_or_else(|e| panic!("cannot read {}: {e}", script.display()));
    let map = nodes::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    if let Err(e) = nodes::check(&map, major, minor) {
        panic!("{}: {e}", script.display());
    }
    map
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Writes `$OUT_DIR/symbol_nodes.rs`: `symbol_node!("NAME")` is the version node of each exported function of
/// src/ (a name it does not know fails the build by name).
fn write_symbol_nodes(manifest_dir: &Path, map: &nodes::Nodes) {
    let mut files = Vec::new();
    rust_files(&manifest_dir.join("src"), &mut files);
    files.sort();
    let mut names = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        names.extend(nodes::exported_names(&text));
    }
    names.sort();
    names.dedup();
    let mut out = String::from(
        "// Generated by build.rs from abi/hostfirst.map and the sources: the version node of each export.\n\
         // (Unused where exports get no version: unit tests, targets without ELF symbol versions.)\n\
         #[allow(unused_macros)]\n\
         macro_rules! symbol_node {\n",
    );
    for name in &names {
        let node = nodes::node_of(map, name).unwrap_or_else(|e| panic!("{VERSION_SCRIPT}: {e}"));
        out.push_str(&format!("    (\"{name}\") => {{ \"{node}\" }};\n"));
    }
    out.push_str(
        "    ($other:tt) => { compile_error!(concat!(\"build.rs found no hostfirst_boundary!(\", $other, \" in src/\")) };\n}\n",
    );
    let dest = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("symbol_nodes.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}

/// Writes `$OUT_DIR/experimental_marker.rs`: the experimental tier's guard on Windows, a function exported as
/// `hostfirst_experimental_MAJOR_MINOR` (named after this crate's minor, as the Linux node
/// HOSTFIRST_EXPERIMENTAL_MAJOR.MINOR is), which every program built with HOSTFIRST_EXPERIMENTAL imports through
/// the header (cbindgen.toml's trailer), so that Windows' loader refuses to start it with another minor's DLL.
/// Included by src/ffi/version.rs on Windows only (a DLL's exports carry no symbol version; Linux has the node).
fn write_experimental_marker(major: u64, minor: u64) {
    let name = format!("hostfirst_experimental_{major}_{minor}");
    let out = format!(
        "// Generated by build.rs: the experimental tier's marker for this minor ({major}.{minor}).\n\
         /// The experimental tier's marker of this minor on Windows: programs built with HOSTFIRST_EXPERIMENTAL\n\
         /// import it (include/hostfirst.h), so another minor's DLL, which lacks it, is refused by the loader.\n\
         /// Does nothing (the header's guard calls it among the C runtime's initialisers, as a `void (*)(void)`).\n\
         #[export_name = \"{name}\"]\n\
         pub extern \"C\" fn hostfirst_experimental_marker() {{\n\
         \x20   hostfirst_boundary!(local \"{name}\", default = (), {{}})\n\
         }}\n"
    );
    let dest = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("experimental_marker.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}

fn version_part(var: &str) -> u64 {
    let text = env::var(var).unwrap_or_else(|_| panic!("{var} is not set (cargo sets it for build scripts)"));
    text.parse().unwrap_or_else(|_| panic!("{var}={text:?} is not a number"))
}

/// The ABI part of the version that goes after `libhostfirst.so.`.
fn soversion(major: u64, minor: u64, patch: u64) -> String {
    if major >= 1 {
        format!("{major}")
    } else if minor >= 1 {
        format!("0.{minor}")
    } else {
        format!("0.0.{patch}")
    }
}
