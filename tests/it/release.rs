//! The release line (issue 43, "cut 1.0.0"): one version, the crate's, everywhere a user reads or links one.
//! The SONAME, the version nodes and the ABI baselines are those of the crate's major; the Python package (and
//! so its wheel's name), the ctypes mirror of the header's version, the Go package's `WrittenFor`, the README and
//! the packaging notes say the crate's version; the CHANGELOG's section of this release opens with its promise.
//! Nothing here builds anything: the files are read as committed (the install, the ABI check and the version
//! C test prove the built artefacts: tests/it/install.rs, tests/it/abi.rs, tests/c/test_core.c).

use std::path::PathBuf;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn root() -> PathBuf {
    crate::common::root()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn part(name: &str) -> u64 {
    let v = match name {
        "major" => env!("CARGO_PKG_VERSION_MAJOR"),
        "minor" => env!("CARGO_PKG_VERSION_MINOR"),
        _ => env!("CARGO_PKG_VERSION_PATCH"),
    };
    v.parse().unwrap()
}

/// The value of `key = "..."` on the first line that sets it in a TOML text.
fn toml_string(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.trim_start().strip_prefix('=')?.trim();
        Some(rest.trim_matches('"').to_string())
    })
}

/// SONAME `libhostfirst.so.MAJOR`, the stable nodes from `HOSTFIRST_MAJOR.0`, the experimental node of this
/// minor, and the baselines of this SONAME only, recording every function with a node of the map.
#[test]
fn soname_nodes_and_baselines_are_the_major_line() {
    let (major, minor) = (part("major"), part("minor"));
    assert!(major >= 1, "hostfirst {VERSION} is not a stable (1.x or later) release");
    let soname = format!("libhostfirst.so.{major}");
    if cfg!(target_os = "linux") {
        assert_eq!(option_env!("HOSTFIRST_SONAME"), Some(soname.as_str()), "build.rs's SONAME");
    }

    let map = crate::nodes::parse(&read("abi/hostfirst.map")).unwrap();
    crate::nodes::check(&map, major, minor).unwrap();
    let stable: Vec<&str> = map.stable.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(stable[0], format!("HOSTFIRST_{major}.0"), "the line's first node");
    assert_eq!(stable.len() as u64, minor + 1, "one stable node per minor since {major}.0: {stable:?}");
    let experimental = map.experimental.as_ref().expect("an experimental node").name.clone();
    assert_eq!(experimental, format!("HOSTFIRST_EXPERIMENTAL_{major}.{minor}"));

    // Exactly this SONAME's baselines: the 0.y ones are gone.
    let mut baselines: Vec<String> = std::fs::read_dir(root().join("abi"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".abi") || (n.starts_with("libhostfirst.so.") && n.ends_with(".txt")))
        .collect();
    baselines.sort();
    assert_eq!(baselines, [format!("{soname}.abi"), format!("{soname}.txt")]);

    let abi = read(&format!("abi/{soname}.abi"));
    assert!(abi.contains(&format!(" soname='{soname}'")), "abi/{soname}.abi was not made from {soname}");
    let mut count = 0;
    for line in abi.lines().filter(|l| l.trim_start().starts_with("<elf-symbol name='hostfirst_")) {
        let field = |k: &str| {
            let i = line.find(&format!(" {k}='")).unwrap_or_else(|| panic!("no {k} in {line}")) + k.len() + 3;
            line[i..i + line[i..].find('\'').unwrap()].to_string()
        };
        let (name, version) = (field("name"), field("version"));
        assert_eq!(
            crate::nodes::node_of(&map, &name).as_deref(),
            Ok(version.as_str()),
            "abi/{soname}.abi records {name}@{version}, the map gives another node"
        );
        count += 1;
    }
    assert!(count > 90, "only {count} functions in abi/{soname}.abi");
    assert!(
        read(&format!("abi/{soname}.txt")).starts_with(&format!("# The C ABI of {soname}:")),
        "abi/{soname}.txt was not made from {soname}"
    );
}

/// The Python package (its wheel is `hostfirst-<version>-...whl`), its mirror of the header's version, the Go
/// package's `WrittenFor`, the README and the packaging notes say this version and this SONAME.
#[test]
fn packages_bindings_and_docs_say_the_version() {
    let (major, minor, patch) = (part("major"), part("minor"), part("patch"));
    let number = major * 1_000_000 + minor * 1000 + patch;
    let soname = format!("libhostfirst.so.{major}");

    let pyproject = read("bindings/python/pyproject.toml");
    assert_eq!(toml_string(&pyproject, "name").as_deref(), Some("hostfirst"));
    assert_eq!(toml_string(&pyproject, "version").as_deref(), Some(VERSION), "bindings/python/pyproject.toml");
    let abi_py = read("bindings/python/hostfirst/_abi.py");
    for (name, want) in [("MAJOR", major), ("MINOR", minor), ("PATCH", patch)] {
        let line = format!("HOSTFIRST_VERSION_{name} = {want}");
        assert!(abi_py.lines().any(|l| l == line), "bindings/python/hostfirst/_abi.py lacks `{line}`");
    }

    // Go: written for a release of this line, no newer than this one; its texts name that release.
    let go = read("bindings/go/hostfirst/hostfirst.go");
    let written_for: u64 = go
        .lines()
        .find_map(|l| l.strip_prefix("#define HF_GO_WRITTEN_FOR "))
        .expect("HF_GO_WRITTEN_FOR in bindings/go/hostfirst/hostfirst.go")
        .trim()
        .parse()
        .unwrap();
    assert!(
        written_for / 1_000_000 == major && written_for <= number,
        "the Go package is written for {written_for}, not a release of {major}.x up to {VERSION}"
    );
    let written = format!("{}.{}.{}", written_for / 1_000_000, written_for / 1000 % 1000, written_for % 1000);
    assert!(go.contains(&format!("(written for hostfirst {written})")), "the Go #error names another version");
    let go_readme = read("bindings/go/README.md");
    assert!(go_readme.contains(&format!("(`WrittenFor`, {written})")), "bindings/go/README.md: WrittenFor");
    assert!(go_readme.contains(&format!("`bindings/go/v{major}.")), "bindings/go/README.md: the tag of this line");

    // The README: the SONAME link of the build tree, the Windows files, the CMake request, no 0.y name left.
    let readme = read("README.md");
    for want in [
        format!("`{soname} -> libhostfirst.so`"),
        format!("hostfirst-{VERSION}-windows-x86_64.zip"),
        format!("hostfirst-{VERSION}-cp39-abi3-win_amd64.whl"),
        format!("find_package(hostfirst {major}"),
        format!("HOSTFIRST_{major}.0"),
    ] {
        assert!(readme.contains(&want), "README.md does not say {want}");
    }
    for stale in ["libhostfirst.so.0.", "HOSTFIRST_0.", "HOSTFIRST_EXPERIMENTAL_0.", "hostfirst-0."] {
        assert!(!readme.contains(stale), "README.md still names {stale}...");
    }
    let packaging = read("docs/PACKAGING.md");
    assert!(packaging.contains(&format!("Today ({VERSION}) the files are")), "docs/PACKAGING.md: today's files");
    assert!(packaging.contains(&format!("<prefix>/lib/libhostfirst.so.{VERSION} ")), "docs/PACKAGING.md: layout");
}

/// The CHANGELOG's first section is this release, and the section of the line's first release (MAJOR.0.0)
/// opens with the promise: what binds every release of the line, per platform, how it is checked, and where new
/// functions go.
#[test]
fn changelog_opens_with_the_promise() {
    let (major, minor) = (part("major"), part("minor"));
    let soname = format!("libhostfirst.so.{major}");
    let changelog = read("CHANGELOG.md");
    let first = changelog.lines().find(|l| l.starts_with("## ")).unwrap();
    assert!(
        first == format!("## {VERSION}") || first == format!("## {VERSION} (unreleased)"),
        "the CHANGELOG's first section is `{first}`, not {VERSION}"
    );
    assert!(!changelog.contains("(planned)"), "a planned section is left");
    // The promise opens the section of the line's first release, `## MAJOR.0.0`; later minors' sections (the
    // first one while a minor is on its way) list what they add under it.
    let line_first = format!("{major}.0.0");
    let section = changelog
        .split("\n## ")
        .find(|s| s.lines().next().is_some_and(|h| h == line_first || h == format!("{line_first} (unreleased)")))
        .unwrap_or_else(|| panic!("no `## {line_first}` section"));
    let first_sub = section.lines().find(|l| l.starts_with("### ")).unwrap();
    assert_eq!(first_sub, format!("### The promise: what binds every {major}.x release"));
    let promise = section.split("\n### ").nth(1).unwrap();
    for want in [
        format!("`{soname}`"),
        format!("`HOSTFIRST_{major}.0`"),
        format!("`HOSTFIRST_{major}.{}`", minor + 1),
        format!("`abi/{soname}.txt`"),
        format!("`abi/{soname}.abi`"),
        "HOSTFIRST_VERSION_COMPATIBLE".to_string(),
        "**Windows**".to_string(),
        "scripts/abi-check.sh".to_string(),
        "experimental tier".to_string(),
    ] {
        assert!(promise.contains(&want), "the promise does not mention {want}");
    }
    assert!(section.contains("### Breaking changes since 0.1"), "the breaks since 0.1 are kept below the promise");
}
