//! Packaging: `scripts/install.sh` into a temporary prefix (once per test binary), then the installed tree is
//! checked (SONAME, symlinks, headers, the CLI in bin/) and used the way a C project would: examples-c/version.c
//! built via pkg-config (shared and static) and via the CMake package (`find_package(hostfirst)`), then run.
//!
//! readelf, pkg-config and cmake are installed by scripts/test.sh. Where one is missing the test fails under CI
//! (`CI=true`) and otherwise skips with a message. ELF systems only (install.sh installs ELF shared libraries).
#![cfg(all(unix, not(any(target_os = "macos", target_os = "ios", target_os = "android"))))]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The SONAME policy of build.rs, restated independently: 0.0.z -> 0.0.z, 0.y.z -> 0.y, x.y.z -> x.
fn policy_soversion(version: &str) -> String {
    let base = version.split(['-', '+']).next().unwrap();
    let parts: Vec<u64> = base.split('.').map(|p| p.parse().expect("numeric version")).collect();
    let (major, minor, patch) = (parts[0], parts[1], parts[2]);
    if major >= 1 {
        format!("{major}")
    } else if minor >= 1 {
        format!("0.{minor}")
    } else {
        format!("0.0.{patch}")
    }
}

#[test]
fn soname_policy_examples() {
    assert_eq!(policy_soversion("0.1.0"), "0.1");
    assert_eq!(policy_soversion("0.1.7"), "0.1");
    assert_eq!(policy_soversion("0.2.0"), "0.2");
    assert_eq!(policy_soversion("0.12.3-rc.1"), "0.12");
    assert_eq!(policy_soversion("0.0.4"), "0.0.4");
    assert_eq!(policy_soversion("1.0.0"), "1");
    assert_eq!(policy_soversion("2.5.1+build.3"), "2");
}

#[test]
fn build_script_and_cargo_c_metadata_follow_the_policy() {
    let version = env!("CARGO_PKG_VERSION");
    let soversion = policy_soversion(version);
    if cfg!(target_os = "linux") {
        assert_eq!(option_env!("HOSTFIRST_SONAME"), Some(format!("libhostfirst.so.{soversion}").as_str()));
    }
    // cargo-c computes its SONAME from version_suffix_components; it must give the same name.
    let manifest = std::fs::read_to_string(crate::common::root().join("Cargo.toml")).unwrap();
    let components: usize = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("version_suffix_components"))
        .and_then(|rest| rest.trim().strip_prefix('='))
        .map(|v| v.trim().parse().expect("version_suffix_components is a number"))
        .expect("Cargo.toml sets [package.metadata.capi.library] version_suffix_components");
    assert_eq!(
        components,
        soversion.split('.').count(),
        "version {version} has SONAME suffix {soversion}: set version_suffix_components accordingly"
    );
    assert!(manifest.contains("generation = false"), "cargo-c must install the committed header, not generate one");
    // The panic boundary needs unwinding: neither a profile nor cargo-c's rustflags may switch to abort.
    let code: String = manifest.lines().map(|l| l.split('#').next().unwrap()).collect::<Vec<_>>().join("\n");
    assert!(!code.contains("abort"), "keep panic = \"unwind\" (no panic=abort anywhere in Cargo.toml)");
    assert!(code.matches("panic = \"unwind\"").count() >= 2, "release and dev profiles set panic = \"unwind\"");
}

/// Whether `tool` runs here. Missing under CI is a failure; elsewhere the caller skips.
pub(crate) fn have_tool(tool: &str, version_arg: &str) -> bool {
    let ok = Command::new(tool).arg(version_arg).output().map(|o| o.status.success()).unwrap_or(false);
    if !ok {
        let ci = std::env::var("CI").map(|v| v == "true" || v == "1").unwrap_or(false);
        let package = match tool {
            "abidiff" | "abidw" => "abigail-tools",
            "go" => "golang-go",
            "readelf" => "binutils",
            other => other,
        };
        assert!(!ci, "{tool} is missing (CI=true): install it (scripts/test.sh does: apt-get install {package})");
        // Written to the real stderr, past the test harness's capture of eprintln!, so the skip is seen.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED ({}): {tool} is not installed (scripts/test.sh installs it; under CI=true this fails)",
            std::thread::current().name().unwrap_or("install test")
        );
    }
    ok
}

fn check(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: Output) -> String {
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// target/<profile>/hostfirst-tests/install: the work area of this test binary.
pub(crate) fn work_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().join("hostfirst-tests").join("install")
}

/// Runs scripts/install.sh into a fresh prefix, once for the whole binary; returns the prefix.
pub(crate) fn prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = work_dir().join("prefix");
        let _ = std::fs::remove_dir_all(&prefix);
        let out = Command::new("bash")
            .arg(crate::common::root().join("scripts/install.sh"))
            .arg("--prefix")
            .arg(&prefix)
            .args(["--libdir", "lib"])
            .output()
            .expect("run scripts/install.sh");
        check(out, "scripts/install.sh");
        prefix
    })
}

pub(crate) fn soname() -> String {
    format!("libhostfirst.so.{}", policy_soversion(env!("CARGO_PKG_VERSION")))
}

pub(crate) fn real_name() -> String {
    let v = env!("CARGO_PKG_VERSION");
    format!("libhostfirst.so.{}", v.split(['-', '+']).next().unwrap())
}

/// The `(SONAME)` and `(NEEDED)` entries of an ELF file, from `readelf -d`.
fn dynamic_entries(file: &Path, tag: &str) -> Vec<String> {
    let text = stdout(check(Command::new("readelf").arg("-d").arg(file).output().unwrap(), "readelf -d"));
    text.lines()
        .filter(|l| l.contains(&format!("({tag})")))
        .filter_map(|l| Some(l[l.find('[')? + 1..l.rfind(']')?].to_string()))
        .collect()
}

fn pkg_config(args: &[&str]) -> String {
    let pc_dir = prefix().join("lib/pkgconfig");
    let out = Command::new("pkg-config").env("PKG_CONFIG_PATH", &pc_dir).args(args).output().unwrap();
    stdout(check(out, &format!("pkg-config {}", args.join(" ")))).trim().to_string()
}

/// Compiles examples-c/version.c with the given flags (split like a shell would for these simple values).
fn compile_version(out_name: &str, flags: &str) -> PathBuf {
    let out = work_dir().join(out_name);
    let mut cmd = Command::new(crate::common::cc());
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg(crate::common::root().join("examples-c/version.c"))
        .arg("-o")
        .arg(&out)
        .args(flags.split_whitespace());
    check(cmd.output().expect("run the C compiler"), &format!("compiling {out_name} with {flags}"));
    out
}

/// Runs the version example and checks its report.
fn run_version(bin: &Path, lib_path: Option<&Path>) -> String {
    let lib_path = lib_path.map(|p| p.to_str().unwrap().to_string());
    let text = crate::common::run_ok(bin, &[], &[("LD_LIBRARY_PATH", lib_path.as_deref())]);
    let first = format!("hostfirst {} (header ", env!("CARGO_PKG_VERSION"));
    assert!(text.starts_with(&first), "unexpected output of {}:\n{text}", bin.display());
    assert!(text.contains("backend cpu: AVAILABLE, 1 device(s)"), "no cpu backend in:\n{text}");
    assert!(text.contains("backend cuda: "), "no cuda line in:\n{text}");
    text
}

#[test]
fn installed_tree_has_soname_symlinks_and_headers() {
    if !have_tool("readelf", "--version") {
        return;
    }
    let lib = prefix().join("lib");
    let real = lib.join(real_name());
    let meta = std::fs::symlink_metadata(&real).unwrap();
    assert!(meta.file_type().is_file(), "{} must be the real file", real.display());
    for link in [soname(), "libhostfirst.so".to_string()] {
        let target = std::fs::read_link(lib.join(&link)).unwrap_or_else(|e| panic!("{link} is not a symlink: {e}"));
        assert_eq!(target, Path::new(&real_name()), "{link} must point at {}", real_name());
    }
    assert_eq!(dynamic_entries(&real, "SONAME"), vec![soname()]);
    assert!(lib.join("libhostfirst.a").is_file());

    // The installed header is the committed one, byte for byte (and so is every other public header).
    for entry in std::fs::read_dir(crate::common::root().join("include")).unwrap() {
        let src = entry.unwrap().path();
        if src.extension().is_some_and(|e| e == "h" || e == "hpp") {
            let installed = prefix().join("include").join(src.file_name().unwrap());
            assert_eq!(std::fs::read(&src).unwrap(), std::fs::read(&installed).unwrap(), "{}", installed.display());
        }
    }

    // The CMake package is relocatable: no absolute path of the prefix inside it.
    for f in ["hostfirstConfig.cmake", "hostfirstConfigVersion.cmake"] {
        let text = std::fs::read_to_string(lib.join("cmake/hostfirst").join(f)).unwrap();
        assert!(!text.contains(prefix().to_str().unwrap()), "{f} names the install prefix:\n{text}");
        assert!(!text.contains('@'), "{f} has an unreplaced placeholder:\n{text}");
    }
}

/// The licence texts are installed with the library, as the repository has them.
#[test]
fn licence_texts_installed_into_share_licenses() {
    for f in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let installed = prefix().join("share/licenses/hostfirst").join(f);
        let got = std::fs::read(&installed).unwrap_or_else(|e| panic!("{}: {e}", installed.display()));
        assert!(got == std::fs::read(crate::common::root().join(f)).unwrap(), "{} differs", installed.display());
    }
}

/// The CLI is installed into <prefix>/bin and runs from there without LD_LIBRARY_PATH (a relative rpath, so it
/// keeps working when the tree moves, like the CMake package).
#[test]
fn cli_installed_into_prefix_bin() {
    if !have_tool("readelf", "--version") {
        return;
    }
    let cli = prefix().join("bin/hostfirst");
    assert!(cli.is_file(), "{} was not installed", cli.display());
    assert_eq!(dynamic_entries(&cli, "RUNPATH"), vec!["$ORIGIN/../lib".to_string()]);
    let version = crate::common::run_ok(&cli, &["--version"], &[("LD_LIBRARY_PATH", None)]);
    assert_eq!(version.trim(), format!("hostfirst {}", env!("CARGO_PKG_VERSION")));
    let tokens = crate::common::root().join("tests/fixtures/tokens.safetensors");
    let table = crate::common::run_ok(&cli, &["inspect", tokens.to_str().unwrap()], &[("LD_LIBRARY_PATH", None)]);
    assert!(table.contains("tokens") && table.contains("U16"), "{table}");
}

#[test]
fn c_program_via_pkg_config_shared() {
    if !have_tool(&crate::common::cc(), "--version")
        || !have_tool("pkg-config", "--version")
        || !have_tool("readelf", "--version")
    {
        return;
    }
    assert_eq!(pkg_config(&["--modversion", "hostfirst"]), env!("CARGO_PKG_VERSION"));
    let flags = pkg_config(&["--cflags", "--libs", "hostfirst"]);
    assert!(flags.contains("-lhostfirst"), "{flags}");
    let bin = compile_version("version_pkg_shared", &flags);
    // The program asks the loader for the SONAME, which only the symlink provides.
    assert_eq!(
        dynamic_entries(&bin, "NEEDED").iter().filter(|n| n.starts_with("libhostfirst")).collect::<Vec<_>>(),
        vec![&soname()]
    );
    run_version(&bin, Some(&prefix().join("lib")));
}

#[test]
fn c_program_via_pkg_config_static() {
    if !have_tool(&crate::common::cc(), "--version")
        || !have_tool("pkg-config", "--version")
        || !have_tool("readelf", "--version")
    {
        return;
    }
    let libs = pkg_config(&["--static", "--libs", "hostfirst"]);
    let libdir = pkg_config(&["--variable=libdir", "hostfirst"]);
    assert!(libs.contains("-lpthread") && libs.contains("-ldl"), "Libs.private missing from: {libs}");
    // -lhostfirst would pick libhostfirst.so; ask the linker for the archive by file name instead.
    let libs: Vec<String> = libs
        .split_whitespace()
        .map(|t| if t == "-lhostfirst" { "-l:libhostfirst.a".to_string() } else { t.to_string() })
        .collect();
    let flags = format!("{} {}", pkg_config(&["--cflags", "hostfirst"]), libs.join(" "));
    let bin = compile_version("version_pkg_static", &flags);
    let needed = dynamic_entries(&bin, "NEEDED");
    assert!(!needed.iter().any(|n| n.contains("hostfirst")), "statically linked, yet NEEDED {needed:?}");
    assert!(Path::new(&libdir).join("libhostfirst.a").is_file());
    run_version(&bin, None);
}

#[test]
fn c_program_via_cmake_package_from_a_moved_prefix() {
    if !have_tool(&crate::common::cc(), "--version") || !have_tool("cmake", "--version") {
        return;
    }
    // Copy the installed tree elsewhere: the package must find everything relative to itself.
    let moved = work_dir().join("moved prefix");
    let _ = std::fs::remove_dir_all(&moved);
    check(Command::new("cp").arg("-a").arg(prefix()).arg(&moved).output().unwrap(), "cp -a prefix");
    let build = work_dir().join("cmake-build");
    let _ = std::fs::remove_dir_all(&build);
    let out = Command::new("cmake")
        .arg("-S")
        .arg(crate::common::root().join("examples-c/cmake"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", moved.display()))
        .arg(format!("-DCMAKE_C_COMPILER={}", crate::common::cc()))
        .arg("-DCMAKE_BUILD_TYPE=Release")
        .output()
        .unwrap();
    let configure = stdout(check(out, "cmake configure"));
    assert!(
        configure.contains(&format!("hostfirst {} (SONAME {})", env!("CARGO_PKG_VERSION"), soname())),
        "{configure}"
    );
    assert!(configure.contains("moved prefix"), "the package was not found in the moved prefix:\n{configure}");
    check(Command::new("cmake").arg("--build").arg(&build).output().unwrap(), "cmake --build");

    run_version(&build.join("version_shared"), Some(&moved.join("lib")));
    run_version(&build.join("version_static"), None);
}

#[test]
fn cmake_version_file_follows_the_abi_line() {
    if !have_tool("cmake", "--version") {
        return;
    }
    let version_file = prefix().join("lib/cmake/hostfirst/hostfirstConfigVersion.cmake");
    let (major, minor, patch): (u64, u64, u64) = (
        env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap(),
        env!("CARGO_PKG_VERSION_MINOR").parse().unwrap(),
        env!("CARGO_PKG_VERSION_PATCH").parse().unwrap(),
    );
    // (requested version, compatible?): the same ABI line (the MAJOR from 1.0 on, 0.MINOR before) and not newer
    // than what is installed.
    let cases = if major >= 1 {
        let mut cases = vec![
            (String::new(), true),
            (format!("{major}"), true),
            (format!("{major}.0"), true),
            (format!("{major}.0.0"), true),
            (format!("{major}.{minor}"), true),
            (format!("{major}.{minor}.{patch}"), true),
            (format!("{major}.{minor}.{}", patch + 1), false),
            (format!("{major}.{}", minor + 1), false),
            (format!("{}.0", major + 1), false),
            (format!("{}", major - 1), false),
        ];
        if major == 1 {
            // The 0.y lines before 1.0 had their own SONAMEs: none is served by 1.x.
            cases.extend([("0.2".to_string(), false), ("0.1.0".to_string(), false)]);
        } else {
            cases.push((format!("{}.0", major - 1), false));
        }
        cases
    } else {
        assert!(minor >= 1, "the verdicts below are for a 0.y.z (y >= 1) version; extend them for 0.0.z");
        vec![
            (String::new(), true),
            (format!("0.{minor}"), true),
            (format!("0.{minor}.{patch}"), true),
            (format!("0.{minor}.{}", patch + 1), false),
            (format!("0.{}", minor - 1), false),
            (format!("0.{}", minor + 1), false),
            ("0.0.9".to_string(), false),
            ("1.0".to_string(), false),
            ("0".to_string(), false),
        ]
    };
    let requests: Vec<String> = cases.iter().map(|(r, _)| format!("\"{r}\"")).collect();
    let script = work_dir().join("check-version.cmake");
    // Calls the version file the way find_package does, for each requested version, and prints the verdicts.
    std::fs::write(
        &script,
        format!(
            r#"foreach(req {})
  unset(PACKAGE_VERSION_COMPATIBLE)
  unset(PACKAGE_VERSION_EXACT)
  set(PACKAGE_FIND_VERSION "${{req}}")
  string(REPLACE "." ";" _parts "${{req}}.0.0.0")
  list(GET _parts 0 PACKAGE_FIND_VERSION_MAJOR)
  list(GET _parts 1 PACKAGE_FIND_VERSION_MINOR)
  set(CMAKE_SIZEOF_VOID_P {})
  include("{}")
  message("[${{req}}] compatible=${{PACKAGE_VERSION_COMPATIBLE}} exact=${{PACKAGE_VERSION_EXACT}}")
endforeach()
"#,
            requests.join(" "),
            std::mem::size_of::<usize>(),
            version_file.display()
        ),
    )
    .unwrap();
    let out = check(Command::new("cmake").arg("-P").arg(&script).output().unwrap(), "cmake -P");
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    for (req, compatible) in &cases {
        let want = format!("[{req}] compatible={}", if *compatible { "TRUE" } else { "FALSE" });
        assert!(text.contains(&want), "expected {want:?} in:\n{text}");
    }
    assert!(text.contains(&format!("[{major}.{minor}.{patch}] compatible=TRUE exact=TRUE")), "{text}");
}
