//! The licence: hostfirst is `MIT OR Apache-2.0`. Both texts are at the repository's root (LICENSE-MIT with the
//! copyright line, LICENSE-APACHE the Apache License 2.0 as published), every place that states the licence
//! states the same expression, and each part that is published on its own carries the texts: the core crate
//! (links, which `cargo package` follows) and the Go module (copies: a module zip holds no links and nothing from
//! outside its directory; pkg.go.dev shows no module whose licence it cannot find). The installed tree, the zip
//! and the wheels are checked where they are made (tests/it/install.rs, tests/it/windows.rs, scripts/wheel.sh).

use crate::common::root;

const EXPRESSION: &str = "MIT OR Apache-2.0";

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn both_texts_are_at_the_root() {
    let mit = read("LICENSE-MIT");
    assert!(mit.starts_with("MIT License\n\nCopyright (c) "), "{mit}");
    assert!(mit.contains("The hostfirst developers"), "{mit}");
    assert!(mit.contains("THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND"), "{mit}");
    let apache = read("LICENSE-APACHE");
    for needle in [
        "Apache License\n                           Version 2.0, January 2004",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "9. Accepting Warranty or Additional Liability.",
        "END OF TERMS AND CONDITIONS",
    ] {
        assert!(apache.contains(needle), "LICENSE-APACHE lacks {needle:?}");
    }
    assert!(apache.lines().count() > 190, "LICENSE-APACHE is not the whole text");
}

#[test]
fn every_statement_of_the_licence_agrees() {
    for manifest in ["Cargo.toml", "core/Cargo.toml"] {
        assert!(read(manifest).lines().any(|l| l == format!("license = \"{EXPRESSION}\"")), "{manifest}");
    }
    let pyproject = read("bindings/python/pyproject.toml");
    assert!(pyproject.lines().any(|l| l == format!("license = \"{EXPRESSION}\"")), "pyproject.toml");
    assert!(pyproject.contains("license-files = [\"LICENSE-MIT\", \"LICENSE-APACHE\"]"), "pyproject.toml");
    assert!(read("include/hostfirst.h").contains(EXPRESSION), "hostfirst.h");
    assert!(read("packaging/windows/version.rc").contains(&format!("{EXPRESSION}.")), "version.rc");
}

#[test]
fn the_core_crate_and_the_go_module_carry_the_texts() {
    for f in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let original = std::fs::read(root().join(f)).unwrap();
        let link = root().join("core").join(f);
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "core/{f} is a link");
        assert!(std::fs::read(&link).unwrap() == original, "core/{f}");
        let copy = root().join("bindings/go").join(f);
        assert!(std::fs::symlink_metadata(&copy).unwrap().file_type().is_file(), "bindings/go/{f} is a file");
        assert!(std::fs::read(&copy).unwrap() == original, "bindings/go/{f} differs from the root's {f}");
    }
}
