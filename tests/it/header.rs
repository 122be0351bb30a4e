//! The committed include/hostfirst.h must equal what cbindgen generates from the sources.
//! Regenerate it with: HOSTFIRST_UPDATE_HEADER=1 cargo test --test it header::

use std::path::Path;

fn generate() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(Path::new(dir).join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    String::from_utf8(out).expect("header is UTF-8")
}

#[test]
fn committed_header_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/hostfirst.h");
    let fresh = generate();
    if std::env::var_os("HOSTFIRST_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/hostfirst.h is stale; regenerate it with: HOSTFIRST_UPDATE_HEADER=1 cargo test --test it header::"
    );
}

#[test]
fn header_version_matches_cargo() {
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/hostfirst.h")).unwrap();
    let get = |name: &str| -> u32 {
        let line = header
            .lines()
            .find(|l| l.starts_with(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("{name} missing"));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let major: u32 = env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap();
    let minor: u32 = env!("CARGO_PKG_VERSION_MINOR").parse().unwrap();
    let patch: u32 = env!("CARGO_PKG_VERSION_PATCH").parse().unwrap();
    assert_eq!(get("HOSTFIRST_VERSION_MAJOR"), major);
    assert_eq!(get("HOSTFIRST_VERSION_MINOR"), minor);
    assert_eq!(get("HOSTFIRST_VERSION_PATCH"), patch);
    assert_eq!(get("HOSTFIRST_VERSION_NUMBER"), major * 1_000_000 + minor * 1000 + patch);
}
