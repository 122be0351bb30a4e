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
//! Symbol versions: the cdylib is linked with the version script `abi/hostfirst.map` (one node, e.g.
//! `HOSTFIRST_0.2`, for every `hostfirst_*` export; everything else local), under cargo-c too. The node name is
//! passed to the crate as `HOSTFIRST_SYMBOL_VERSION`, and `hostfirst_boundary!` binds each export to it with a
//! `.symver` directive (cfg `hostfirst_symver`), which rustc's own version script cannot override. GNU ld refuses
//! two version scripts (rustc's is anonymous), so the link uses lld (`-fuse-ld=lld`): rustc's bundled rust-lld on
//! x86_64 Linux (the default linker there since Rust 1.90), a system `ld.lld` elsewhere.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={VERSION_SCRIPT}");
    println!("cargo:rustc-check-cfg=cfg(hostfirst_symver)");

    let major: u64 = version_part("CARGO_PKG_VERSION_MAJOR");
    let minor: u64 = version_part("CARGO_PKG_VERSION_MINOR");
    let patch: u64 = version_part("CARGO_PKG_VERSION_PATCH");
    let soversion = soversion(major, minor, patch);

    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let family = env::var("CARGO_CFG_TARGET_FAMILY").unwrap_or_default();
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

    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let script = manifest_dir.join(VERSION_SCRIPT);
    let node = version_node(&script);
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

/// The name of the one version node the script defines (`NAME {` at the start of a line).
fn version_node(script: &Path) -> String {
    let text = std::fs::read_to_string(script).unwrap_or_else(|e| panic!("cannot read {}: {e}", script.display()));
    let nodes: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_end().strip_suffix('{'))
        .map(str::trim)
        .filter(|n| n.starts_with("HOSTFIRST_"))
        .collect();
    match nodes.as_slice() {
        [one] => one.to_string(),
        _ => panic!("{} must define exactly one HOSTFIRST_* version node, found {nodes:?}", script.display()),
    }
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
