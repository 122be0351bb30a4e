//! The committed include/hostfirst.h must equal what cbindgen generates from the sources.
//! Regenerate it with: HOSTFIRST_UPDATE_HEADER=1 cargo test --features test-hooks --test it header::

use std::path::Path;

/// The one command that regenerates the header; cbindgen.toml (its comment and the header's banner) and the
/// README give it in these words (checked below).
const REGENERATE: &str = "HOSTFIRST_UPDATE_HEADER=1 cargo test --features test-hooks --test it header::";

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
    assert!(committed == fresh, "include/hostfirst.h is stale; regenerate it with: {REGENERATE}");
}

#[test]
fn one_regeneration_command_everywhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["cbindgen.toml", "include/hostfirst.h", "README.md"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("HOSTFIRST_UPDATE_HEADER=")).collect();
        assert!(!lines.is_empty(), "{file} does not say how to regenerate the header ({REGENERATE})");
        for l in lines {
            assert!(l.contains(REGENERATE), "{file} gives another regeneration command than `{REGENERATE}`: {l}");
        }
    }
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

/// The header without its comments.
pub(crate) fn header_code() -> String {
    let header = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/hostfirst.h")).unwrap();
    let block = strip_spans(&header, "/*", "*/");
    block.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n")
}

/// Removes every `open ... close` span.
fn strip_spans(s: &str, open: &str, close: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(open) {
        out.push_str(&rest[..i]);
        rest = rest[i..].find(close).map_or("", |j| &rest[i + j + close.len()..]);
    }
    out.push_str(rest);
    out
}

/// Every name the header declares: macros, struct / enum / typedef names, enum values and functions.
pub(crate) fn declared_names(code: &str) -> Vec<(&'static str, String)> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let last_word = |s: &str| s.trim_end().rsplit(|c: char| !is_word(c)).next().unwrap_or("").to_string();
    let mut names = Vec::new();
    // Preprocessor lines: only `#define NAME` declares anything.
    let mut c_code = String::new();
    for line in code.lines() {
        match line.trim_start().strip_prefix('#') {
            Some(p) => {
                if let Some(d) = p.trim_start().strip_prefix("define") {
                    names.push(("macro", d.split_whitespace().next().unwrap_or("").to_string()));
                }
            }
            None => c_code.push_str(line),
        }
        c_code.push('\n');
    }
    // `struct NAME` / `enum NAME`; the bodies of enums hold values, the bodies of structs only fields.
    let mut flat = String::new();
    let mut rest = c_code.as_str();
    while let Some(open) = rest.find('{') {
        if rest[..open].trim_end().ends_with("extern \"C\"") {
            // The C++ linkage block holds the functions: keep its contents.
            flat.push_str(&rest[..open]);
            rest = &rest[open + 1..];
            continue;
        }
        let close = open + rest[open..].find('}').expect("balanced braces");
        let head = &rest[..open];
        let decl = head.rsplit([';', '}']).next().unwrap_or("");
        if decl.split(|c: char| !is_word(c)).any(|w| w == "enum") {
            for v in rest[open + 1..close].split(',') {
                let v = v.split('=').next().unwrap().trim();
                if !v.is_empty() {
                    names.push(("enum value", v.to_string()));
                }
            }
        }
        flat.push_str(head);
        rest = &rest[close + 1..];
    }
    flat.push_str(rest);
    let words: Vec<&str> = flat.split(|c: char| !is_word(c)).filter(|w| !w.is_empty()).collect();
    for w in words.windows(2) {
        if w[0] == "struct" || w[0] == "enum" {
            names.push(("tag", w[1].to_string()));
        }
    }
    for stmt in flat.split(';').map(str::trim) {
        if let Some(t) = stmt.strip_prefix("typedef") {
            // `typedef T name` or `typedef R (*name)(args)`.
            let name = match t.find("(*") {
                Some(i) => t[i + 2..].split(')').next().unwrap_or("").trim().to_string(),
                None => last_word(t),
            };
            names.push(("typedef", name));
        } else if stmt.ends_with(')') {
            // A function declaration: `R name(args)`.
            if let Some(i) = stmt.find('(') {
                names.push(("function", last_word(&stmt[..i])));
            }
        }
    }
    names
}

#[test]
fn header_declares_only_prefixed_names() {
    let code = header_code();
    let names = declared_names(&code);
    let count = |kind: &str| names.iter().filter(|(k, _)| *k == kind).count();
    // The parse must see the API, or the check below would pass vacuously.
    assert!(count("function") > 90, "{} functions found", count("function"));
    assert!(count("enum value") > 60, "{} enum values found", count("enum value"));
    assert!(count("macro") > 10 && count("typedef") > 20 && count("tag") > 20);
    let bad: Vec<String> = names
        .iter()
        .filter(|(k, n)| {
            let guard = *k == "macro" && n == "HOSTFIRST_H";
            !(guard || n.starts_with("hostfirst_") || n.starts_with("HOSTFIRST_"))
        })
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    assert!(
        bad.is_empty(),
        "include/hostfirst.h declares names without the hostfirst_/HOSTFIRST_ prefix: {bad:?}. The header holds the C \
         API only: mark the core item or module that leaked `/// cbindgen:ignore`, or give the C item its prefix."
    );
}

#[test]
fn header_enum_values_are_the_core_enums() {
    use hostfirst::device::{BackendStatus, DeviceKind};
    use hostfirst::scope::DefaultSource;
    use hostfirst::{DType, Status};
    use strum::VariantArray;
    let code = header_code();
    let has = |name: String, value: i64| {
        assert!(code.contains(&format!("{name} = {value},")), "include/hostfirst.h lacks `{name} = {value}`");
    };
    for s in Status::VARIANTS {
        has(format!("HOSTFIRST_STATUS_{}", s.name()), *s as i64);
    }
    for d in DType::VARIANTS {
        has(format!("HOSTFIRST_DTYPE_{}", d.name()), *d as i64);
    }
    for k in DeviceKind::VARIANTS {
        has(format!("HOSTFIRST_DEVICE_{}", k.name().to_uppercase()), *k as i64);
    }
    for b in BackendStatus::VARIANTS {
        has(format!("HOSTFIRST_BACKEND_STATUS_{}", b.name().to_uppercase()), *b as i64);
    }
    for s in DefaultSource::VARIANTS {
        has(format!("HOSTFIRST_DEFAULT_SOURCE_{}", s.name().to_uppercase().replace('-', "_")), *s as i64);
    }
}
