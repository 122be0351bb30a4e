//! The shape of the C API, read from include/hostfirst.h (issue 24, "one way per operation"): no `_ex` twins,
//! an `_init` function for every options struct, `struct_size` first in every struct the library writes, enums
//! (not bare `#define`s) for every set of named values, enum typedefs (not bare integers) for parameters and
//! fields that carry one, one progress callback type, one last-error family, and one spelling for every
//! `*_name` function. Each check first asserts that the parse found what it looks at, so none passes vacuously.

use crate::header::header_code;
use std::collections::BTreeMap;
use std::ffi::CStr;

/// Structs the library writes that are plain values of a fixed layout, not extensible records: a device (its
/// layout is DLPack's `DLDevice`), a captured scope (copied into a worker's arguments), and the DLPack structs
/// (their layouts are DLPack's).
fn plain_value(name: &str) -> bool {
    name == "hostfirst_device" || name == "hostfirst_carried_scope" || name.starts_with("hostfirst_dlpack_")
}

/// `type name` of one field or parameter, from its declaration text.
fn split_decl(decl: &str) -> (String, String) {
    let decl = decl.trim();
    if let Some(i) = decl.find("(*") {
        // A function pointer: `R (*name)(args)`.
        let name = decl[i + 2..].split(')').next().unwrap_or("").trim().to_string();
        return (decl.to_string(), name);
    }
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let name_start = decl.rfind(|c: char| !is_word(c)).map_or(0, |i| i + 1);
    (decl[..name_start].trim().to_string(), decl[name_start..].to_string())
}

/// Splits at top-level commas (outside parentheses).
fn split_args(args: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in args.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

struct Api {
    /// struct name -> fields (type, name), in order.
    structs: BTreeMap<String, Vec<(String, String)>>,
    /// function name -> (return type, parameters (type, name)).
    functions: BTreeMap<String, (String, Vec<(String, String)>)>,
    /// `#define NAME VALUE` lines.
    macros: Vec<(String, String)>,
    /// function-pointer typedefs.
    fn_typedefs: Vec<String>,
}

fn api() -> Api {
    let code = header_code();
    let mut macros = Vec::new();
    let mut c = String::new();
    for line in code.lines() {
        let t = line.trim_start();
        if let Some(d) = t.strip_prefix("#define") {
            let mut w = d.split_whitespace();
            if let Some(name) = w.next() {
                macros.push((name.to_string(), w.collect::<Vec<_>>().join(" ")));
            }
        } else if !t.starts_with('#') {
            c.push_str(line);
            c.push('\n');
        }
    }
    let mut structs = BTreeMap::new();
    let mut rest = c.as_str();
    while let Some(i) = rest.find("typedef struct ") {
        rest = &rest[i + "typedef struct ".len()..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let after = rest[name.len()..].trim_start();
        if !after.starts_with('{') {
            continue; // an opaque handle: `typedef struct name name;`
        }
        let body_end = after.find('}').expect("closed struct");
        let fields = after[1..body_end].split(';').filter(|f| !f.trim().is_empty()).map(split_decl).collect();
        structs.insert(name, fields);
    }
    let mut functions = BTreeMap::new();
    let mut fn_typedefs = Vec::new();
    let body = c.split("extern \"C\" {").nth(1).expect("the extern \"C\" block");
    for stmt in c.split(';').map(|s| s.trim()) {
        if let Some(t) = stmt.strip_prefix("typedef") {
            if let Some(i) = t.find("(*") {
                fn_typedefs.push(t[i + 2..].split(')').next().unwrap_or("").trim().to_string());
            }
        }
    }
    for stmt in body.split(';').map(|s| s.trim().trim_start_matches('}').trim()) {
        let Some(open) = stmt.find('(') else { continue };
        if !stmt.ends_with(')') || stmt.starts_with("typedef") {
            continue;
        }
        let (ret, name) = split_decl(&stmt[..open]);
        let params = split_args(&stmt[open + 1..stmt.len() - 1])
            .iter()
            .filter(|a| a.trim() != "void")
            .map(|a| split_decl(a))
            .collect();
        functions.insert(name, (ret, params));
    }
    assert!(functions.len() > 100, "{} functions parsed", functions.len());
    assert!(structs.len() > 15, "{} structs parsed", structs.len());
    assert!(functions.contains_key("hostfirst_put") && structs.contains_key("hostfirst_put_options"));
    Api { structs, functions, macros, fn_typedefs }
}

/// The struct a parameter type points to, and whether it is `const`: `const struct hostfirst_x *` -> (x, true).
fn pointee(ty: &str) -> Option<(String, bool)> {
    let t = ty.trim();
    if !t.ends_with('*') || t.ends_with("**") {
        return None;
    }
    let is_const = t.starts_with("const ");
    let base = t.trim_start_matches("const ").trim_end_matches('*').trim().trim_start_matches("struct ").trim();
    Some((base.to_string(), is_const))
}

#[test]
fn no_ex_twins() {
    let api = api();
    let bad: Vec<&String> = api.functions.keys().filter(|n| n.ends_with("_ex") || n.contains("_ex_")).collect();
    assert!(
        bad.is_empty(),
        "functions with an `_ex` twin: {bad:?}. One function per operation: fold the options into the one function \
         (an options struct with struct_size and an _init, NULL = defaults)"
    );
}

#[test]
fn every_options_struct_has_an_init() {
    let api = api();
    // Options structs: extensible (struct_size first) and passed to some function by const pointer.
    let mut options = Vec::new();
    for (_, params) in api.functions.values() {
        for (ty, _) in params {
            if let Some((s, true)) = pointee(ty) {
                let extensible = api.structs.get(&s).is_some_and(|f| f.first().is_some_and(|f| f.1 == "struct_size"));
                if extensible && !options.contains(&s) {
                    options.push(s);
                }
            }
        }
    }
    assert!(options.len() >= 5, "options structs found: {options:?}");
    for s in options.iter() {
        let init = format!("{s}_init");
        let f = api.functions.get(&init).unwrap_or_else(|| {
            panic!(
                "options struct {s} has no {init}(): every options struct gets one (sets struct_size and the defaults)"
            )
        });
        assert_eq!(f.0, "hostfirst_status", "{init} returns a status");
        // (T *out, size_t struct_size): the caller says how big its struct is, so a program built against an
        // older, smaller struct never gets a newer, bigger one written past its own.
        assert_eq!(f.1.len(), 2, "{init} takes (T *out, size_t struct_size): {:?}", f.1);
        assert_eq!(pointee(&f.1[0].0), Some((s.clone(), false)), "{init} takes a {s}* first");
        assert_eq!(f.1[1], ("size_t".to_string(), "struct_size".to_string()), "{init}'s second parameter");
    }
    // Every `*_options_init` has that shape, also one for a struct no function takes yet.
    let inits: Vec<&String> = api.functions.keys().filter(|n| n.ends_with("_options_init")).collect();
    assert!(inits.len() >= options.len(), "inits {inits:?}, options {options:?}");
    for init in inits {
        let params = &api.functions[init].1;
        let s = init.trim_end_matches("_init");
        assert!(
            params.len() == 2 && pointee(&params[0].0) == Some((s.to_string(), false)) && params[1].0 == "size_t",
            "{init} takes ({s} *out, size_t struct_size): {params:?}"
        );
    }
}

#[test]
fn every_struct_the_library_writes_starts_with_struct_size() {
    let api = api();
    let mut written = Vec::new();
    for (_, params) in api.functions.values() {
        for (ty, _) in params {
            if let Some((s, false)) = pointee(ty) {
                if api.structs.contains_key(&s) && !written.contains(&s) {
                    written.push(s);
                }
            }
        }
    }
    for s in ["hostfirst_backend_info", "hostfirst_fit_info", "hostfirst_view_info", "hostfirst_put_stats"] {
        assert!(written.contains(&s.to_string()), "{s} is not seen as an output struct: {written:?}");
    }
    let bad: Vec<&String> = written
        .iter()
        .filter(|s| !plain_value(s))
        .filter(|s| api.structs[*s].first().map(|f| f.1.as_str()) != Some("struct_size"))
        .collect();
    assert!(bad.is_empty(), "output structs without `size_t struct_size` as their first field: {bad:?}");
    for s in written.iter().filter(|s| !plain_value(s)) {
        assert_eq!(api.structs[s][0].0, "size_t", "{s}.struct_size is a size_t");
    }
}

#[test]
fn named_values_are_enums_not_defines() {
    let api = api();
    // A `#define` may carry a limit, a default or a version; a value from a set of choices is an enum value.
    let allowed = |n: &str| ["MAX", "MIN", "DEFAULT", "VERSION"].iter().any(|w| n.split('_').any(|p| p == *w));
    let ints: Vec<&(String, String)> = api.macros.iter().filter(|(_, v)| v.parse::<i64>().is_ok()).collect();
    assert!(ints.len() >= 8, "integer macros found: {ints:?}");
    let bad: Vec<&String> = ints.iter().map(|(n, _)| n).filter(|n| !allowed(n)).collect();
    assert!(
        bad.is_empty(),
        "bare #define constants that name a choice: {bad:?}. Make the family a #[repr(u32)] enum (a typedef in C) \
         and take it as that type"
    );
}

#[test]
fn enum_parameters_and_fields_use_the_enum_typedefs() {
    let api = api();
    // A parameter or field named for an enum carries that enum's typedef, never a bare integer.
    let enum_of = |name: &str| -> Option<&'static [&'static str]> {
        Some(match name.trim_start_matches("out_") {
            "dtype" => &["hostfirst_dtype"],
            "status" => &["hostfirst_status", "hostfirst_backend_status"],
            "kind" => &["hostfirst_device_kind", "hostfirst_loaded"],
            "source" => &["hostfirst_default_source"],
            "placement" => &["hostfirst_placement"],
            _ => return None,
        })
    };
    let integers =
        ["int", "unsigned", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "int8_t", "int16_t", "int32_t", "int64_t"];
    let mut seen = 0;
    let mut bad = Vec::new();
    let mut check = |owner: &str, ty: &str, name: &str| {
        let Some(want) = enum_of(name) else { return };
        let base = ty.trim_start_matches("const ").trim_end_matches('*').trim();
        if want.contains(&base) {
            seen += 1;
        } else if integers.contains(&base) {
            bad.push(format!("{owner}: {ty} {name} (want {})", want.join(" or ")));
        } // else another type (a handle named `source`, a struct): no enum carrier
    };
    for (f, (_, params)) in &api.functions {
        for (ty, name) in params {
            {
                check(f, ty, name);
            }
        }
    }
    for (s, fields) in &api.structs {
        for (ty, name) in fields {
            if !s.starts_with("hostfirst_dlpack") {
                check(s, ty, name);
            }
        }
    }
    assert!(bad.is_empty(), "enum values passed as bare integers: {bad:#?}");
    assert!(seen >= 15, "only {seen} enum-typed parameters and fields found");
}

#[test]
fn one_progress_callback_type() {
    let api = api();
    let progress: Vec<&String> = api.fn_typedefs.iter().filter(|t| t.contains("progress")).collect();
    assert_eq!(progress, ["hostfirst_progress_fn"], "one progress callback type");
    let mut uses = 0;
    for (owner, decls) in api.functions.iter().map(|(n, (_, p))| (n, p)).chain(api.structs.iter()) {
        for (ty, name) in decls {
            if name == "progress" {
                uses += 1;
                assert_eq!(ty, "hostfirst_progress_fn", "{owner}.{name}");
            }
        }
    }
    assert!(uses >= 3, "progress callbacks found: {uses}");
}

#[test]
fn one_last_error_family() {
    let api = api();
    let last: Vec<&String> = api.functions.keys().filter(|n| n.starts_with("hostfirst_last")).collect();
    assert_eq!(
        last,
        ["hostfirst_last_error_fit", "hostfirst_last_error_message", "hostfirst_last_error_status"],
        "the last-error family is hostfirst_last_error_{{status,message,fit}}"
    );
}

/// Every `*_name` function spells a value as its constant without the `HOSTFIRST_<TYPE>_` prefix, and gives
/// "UNKNOWN" (never NULL) for a value it does not know.
#[test]
fn every_name_function_spells_the_constant_suffix() {
    use hostfirst::device::BackendStatus;
    use hostfirst::ffi::*;
    use hostfirst::scope::DefaultSource;
    use hostfirst::{DType, Status};
    use strum::VariantArray;
    let api = api();
    let code = header_code();
    let name = |p: *const std::ffi::c_char| {
        assert!(!p.is_null());
        // SAFETY: the library's static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()
    };
    let is_constant = |prefix: &str, n: &str, v: u32| code.contains(&format!("{prefix}{n} = {v},"));
    let mut checked = 0;
    for s in Status::VARIANTS {
        let n = name(hostfirst_status_name(*s as u32));
        assert!(is_constant("HOSTFIRST_STATUS_", &n, *s as u32), "status {} named {n}", *s as u32);
        checked += 1;
    }
    for d in DType::VARIANTS {
        let n = name(hostfirst_dtype_name(*d as u32));
        assert!(is_constant("HOSTFIRST_DTYPE_", &n, *d as u32), "dtype {} named {n}", *d as u32);
        checked += 1;
    }
    for b in BackendStatus::VARIANTS {
        let n = name(hostfirst_backend_status_name(*b as u32));
        assert!(is_constant("HOSTFIRST_BACKEND_STATUS_", &n, *b as u32), "backend status {} named {n}", *b as u32);
        checked += 1;
    }
    for s in DefaultSource::VARIANTS {
        let n = name(hostfirst_default_source_name(*s as u32));
        assert!(is_constant("HOSTFIRST_DEFAULT_SOURCE_", &n, *s as u32), "default source {} named {n}", *s as u32);
        checked += 1;
    }
    assert_eq!(name(hostfirst_status_name(9999)), "UNKNOWN");
    assert_eq!(name(hostfirst_dtype_name(9999)), "UNKNOWN");
    assert_eq!(name(hostfirst_backend_status_name(9999)), "UNKNOWN");
    for f in hostfirst::file::Format::VARIANTS {
        let n = name(hostfirst_format_name(*f as u32));
        assert!(is_constant("HOSTFIRST_FORMAT_", &n, *f as u32), "format {} named {n}", *f as u32);
        checked += 1;
    }
    assert_eq!(name(hostfirst_default_source_name(9999)), "UNKNOWN");
    assert_eq!(name(hostfirst_format_name(9999)), "UNKNOWN");
    assert!(checked > 40);
    // Every *_name function of the header returning a string is one of the five checked here.
    let names: Vec<&String> = api
        .functions
        .iter()
        .filter(|(n, (ret, p))| n.ends_with("_name") && ret == "const char *" && p.len() == 1)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "hostfirst_backend_status_name",
            "hostfirst_default_source_name",
            "hostfirst_dtype_name",
            "hostfirst_format_name",
            "hostfirst_status_name"
        ],
        "a new *_name function: spell it as the others and check it here"
    );
}

/// JSON nested in a tensor entry's unknown field: hostfirst refuses it exactly when the reference crate does
/// (serde_json's recursion limit: "recursion limit exceeded"), at every depth around the limit and far past
/// it (50,000 levels, which hostfirst used to accept), as `INVALID_HEADER_JSON` naming the limit.
#[test]
fn nesting_in_an_unknown_field_is_refused_where_the_reference_refuses_it() {
    for depth in (120..=132).chain([1, 50_000]) {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let header = format!(r#"{{"t":{{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":{nested}}}}}"#);
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.push(7);
        let reference = safetensors::SafeTensors::read_metadata(&bytes).map(|_| ()).map_err(|e| e.to_string());
        let ours = hostfirst::TensorFile::from_bytes(bytes.clone());
        assert_eq!(
            ours.is_ok(),
            reference.is_ok(),
            "depth {depth}: reference {reference:?}, hostfirst {:?}",
            ours.as_ref().err()
        );
        if let Err(e) = ours {
            assert_eq!(e.status(), hostfirst::Status::InvalidHeaderJson, "depth {depth}: {}", e.message());
            assert!(e.message().contains("nested"), "depth {depth}: {}", e.message());
        }
    }
}
