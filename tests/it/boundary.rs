//! Every exported function goes through the one panic boundary, and every exported symbol is prefixed.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// (file, function name, first statement of its body) for every `#[no_mangle]` extern "C" function.
fn exported_functions() -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    rust_files(&crate::common::root().join("src"), &mut files);
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            if !(t == "#[no_mangle]" || t == "#[unsafe(no_mangle)]") {
                continue;
            }
            // Find the signature's opening brace, then the first non-blank line after it.
            let mut j = i + 1;
            let mut sig = String::new();
            while j < lines.len() && !lines[j].trim_end().ends_with('{') {
                sig.push_str(lines[j]);
                j += 1;
            }
            sig.push_str(lines.get(j).copied().unwrap_or(""));
            assert!(
                sig.contains("extern \"C\" fn"),
                "{}:{}: #[no_mangle] on a non-function: {sig}",
                f.display(),
                i + 1
            );
            let name = sig.split("fn ").nth(1).unwrap().split('(').next().unwrap().trim().to_string();
            let body =
                lines[j + 1..].iter().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string()).unwrap_or_default();
            found.push((format!("{}:{}", f.display(), i + 1), name, body));
        }
    }
    found
}

#[test]
fn every_export_starts_with_the_boundary() {
    let fns = exported_functions();
    assert!(fns.len() > 30, "found only {} exported functions", fns.len());
    let mut bad = Vec::new();
    for (loc, name, body) in &fns {
        let expected = format!("hostfirst_boundary!(\"{name}\"");
        if !body.starts_with(&expected) {
            bad.push(format!("{loc}: {name} starts with `{body}`, not `{expected}, ...`"));
        }
        if !name.starts_with("hostfirst_") {
            bad.push(format!("{loc}: exported function {name} lacks the hostfirst_ prefix"));
        }
    }
    assert!(bad.is_empty(), "exports without the panic boundary:\n{}", bad.join("\n"));
}

#[test]
fn shared_library_exports_only_prefixed_symbols() {
    let lib = crate::common::lib_dir().join("libhostfirst.so");
    let out = std::process::Command::new("nm").args(["-D", "--defined-only"]).arg(&lib).output();
    let Ok(out) = out else {
        panic!("nm not available to inspect {}", lib.display());
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut exported = 0;
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(_addr), Some(kind), Some(sym)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if kind == "T" {
            exported += 1;
            assert!(sym.starts_with("hostfirst_"), "unprefixed exported function {sym}");
        }
    }
    let fns = exported_functions();
    let expected =
        fns.iter().filter(|(_, n, _)| cfg!(feature = "test-hooks") || !n.starts_with("hostfirst__test")).count();
    assert_eq!(exported, expected, "exported functions in the .so vs #[no_mangle] functions in src");
}

/// The core crate (core/) is safe Rust with no C boundary: no `extern "C"` (or other foreign-ABI) function
/// definition, no `#[no_mangle]`, no `export_name`, no load-time `link_section` hook. Foreign-ABI function
/// *pointer types* (`extern "C" fn(` for symbols looked up with dlopen, the deleter fields of DLPack structs)
/// are allowed. One exception: `#[cfg(test)]` modules, whose code is compiled into the core's own unit-test
/// binary only, never into the library, so it exports nothing (the DLPack tests need two deleters with C's
/// calling convention, as the managed structs hold, to stand in for the C API's).
#[test]
fn core_crate_has_no_c_boundary() {
    let root = crate::common::root();
    let mut files = Vec::new();
    rust_files(&root.join("core/src"), &mut files);
    assert!(files.len() > 30, "found only {} files under core/src", files.len());
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in outside_test_modules(&text) {
            let code = line.split("//").next().unwrap_or("");
            let mut hits: Vec<&str> =
                ["no_mangle", "export_name", "link_section"].into_iter().filter(|p| code.contains(p)).collect();
            if foreign_fn_definition(code) {
                hits.push("a foreign-ABI fn definition");
            }
            for h in hits {
                bad.push(format!("{}:{}: {h}: {}", f.strip_prefix(&root).unwrap().display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the core crate must not define C entry points (they belong in src/ffi):\n{}",
        bad.join("\n")
    );
}

/// (line index, line) of every line outside `#[cfg(test)] mod ... { ... }` blocks (braces counted).
fn outside_test_modules(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
        if lines[i].trim() == "#[cfg(test)]" && (next.starts_with("mod ") || next.starts_with("pub mod ")) {
            if next.ends_with(';') {
                i += 2; // `mod tests;`: a file of its own, which is scanned (no exception there)
                continue;
            }
            let mut depth = 0i64;
            let mut j = i + 1;
            loop {
                depth += lines[j].matches('{').count() as i64 - lines[j].matches('}').count() as i64;
                j += 1;
                if depth <= 0 && lines[j - 1].contains('}') || j >= lines.len() {
                    break;
                }
            }
            i = j;
            continue;
        }
        out.push((i, lines[i]));
        i += 1;
    }
    out
}

/// `extern "ABI" fn name` (a definition), as opposed to `extern "ABI" fn(` (a pointer type).
fn foreign_fn_definition(code: &str) -> bool {
    let mut rest = code;
    while let Some(at) = rest.find("extern \"") {
        let after = &rest[at + 8..];
        let Some(close) = after.find('"') else { return false };
        let tail = after[close + 1..].trim_start();
        if let Some(f) = tail.strip_prefix("fn") {
            if f.starts_with(char::is_whitespace) && f.trim_start().starts_with(|c: char| c.is_alphabetic() || c == '_')
            {
                return true;
            }
        }
        rest = &after[close + 1..];
    }
    false
}

#[test]
fn test_modules_are_skipped_and_nothing_else() {
    let text =
        "fn a() {}\n#[cfg(test)]\nmod tests {\n    extern \"C\" fn d() {}\n    fn e() { {} }\n}\nfn after() {}\n";
    let kept: Vec<&str> = outside_test_modules(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(kept, ["fn a() {}", "fn after() {}"]);
}

#[test]
fn foreign_fn_definitions_are_told_from_pointer_types() {
    assert!(foreign_fn_definition(r#"pub extern "C" fn hostfirst_x() -> Status {"#));
    assert!(foreign_fn_definition(r#"extern "C" fn prepare() {"#));
    assert!(foreign_fn_definition(r#"unsafe extern "C-unwind" fn cb(p: *mut u8) {"#));
    assert!(!foreign_fn_definition(r#"memory: unsafe extern "C" fn(NvmlDevice) -> NvmlReturn,"#));
    assert!(!foreign_fn_definition(r#"type F = unsafe extern "C" fn(*mut c_int) -> CuResult;"#));
}

/// The core and the C API are released together: one version, and the C API pins the core to it.
#[test]
fn core_and_c_api_have_one_version() {
    let root = crate::common::root();
    let core = std::fs::read_to_string(root.join("core/Cargo.toml")).unwrap();
    let version = core.lines().find_map(|l| l.strip_prefix("version = ")).map(|v| v.trim_matches('"'));
    assert_eq!(version, Some(env!("CARGO_PKG_VERSION")), "core/Cargo.toml's version");
    let api = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let pin = format!("version = \"={}\"", env!("CARGO_PKG_VERSION"));
    assert!(
        api.lines().any(|l| l.starts_with("hostfirst-core = ") && l.contains(&pin)),
        "Cargo.toml must depend on hostfirst-core with {pin}"
    );
}
