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
    // A `#define` may carry a limit, a default, a version or a size; a value from a set of choices is an enum
    // value.
    let allowed = |n: &str| ["MAX", "MIN", "DEFAULT", "VERSION", "SIZE"].iter().any(|w| n.split('_').any(|p| p == *w));
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

/// Which tier of the header a declaration sits in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tier {
    Stable,
    /// Behind `#if defined(HOSTFIRST_EXPERIMENTAL)`.
    Experimental,
    /// Behind `#if defined(HOSTFIRST_TEST_HOOKS)`.
    TestHook,
}

/// One function of the header with its doc comment (the text of its `/** ... */` block, ` * ` removed).
struct FnDoc {
    name: String,
    returns_status: bool,
    tier: Tier,
    doc: String,
}

/// The text of every `/** ... */` block of `text` (doc comments of functions, types, fields and constants;
/// the banner and CONVENTIONS are plain `/*` comments), and the functions with the doc block just above them.
fn doc_blocks(text: &str) -> (Vec<String>, Vec<FnDoc>) {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let (mut blocks, mut functions) = (Vec::new(), Vec::new());
    let mut tier = Tier::Stable;
    let mut doc: Option<String> = None; // the block that ended on the line before
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with("/**") {
            let mut body = String::new();
            let mut l = t;
            loop {
                let inner = l.trim().trim_start_matches("/**").trim_end_matches("*/");
                let inner = inner.trim_start().strip_prefix('*').unwrap_or(inner.trim_start());
                body.push_str(inner.trim());
                body.push('\n');
                if l.trim_end().ends_with("*/") {
                    break;
                }
                l = lines.next().expect("a closed doc comment");
            }
            blocks.push(body.clone());
            doc = Some(body);
            continue;
        }
        if t == "#if defined(HOSTFIRST_EXPERIMENTAL)" {
            tier = Tier::Experimental;
        } else if t == "#endif /* HOSTFIRST_EXPERIMENTAL */" {
            tier = Tier::Stable;
        } else if t == "#if defined(HOSTFIRST_TEST_HOOKS)" {
            tier = Tier::TestHook;
        } else if tier == Tier::TestHook && t.starts_with("#endif") {
            tier = Tier::Stable;
        }
        // A function declaration starts at column 0 with its return type: `R hostfirst_name(`.
        let starts_decl = !line.starts_with([' ', '#', '/', '*', '}', '{']) && !line.starts_with("typedef");
        let name = line.find('(').and_then(|i| {
            let before = line[..i].trim_end();
            let w = &before[before.rfind(|c: char| !is_word(c)).map_or(0, |j| j + 1)..];
            w.starts_with("hostfirst_").then(|| w.to_string())
        });
        match (starts_decl, name) {
            (true, Some(name)) => functions.push(FnDoc {
                returns_status: line.starts_with("hostfirst_status "),
                name,
                tier,
                doc: doc.take().unwrap_or_default(),
            }),
            _ => doc = None,
        }
    }
    (blocks, functions)
}

/// The statuses of the header: `HOSTFIRST_STATUS_X` values, without the prefix.
fn status_names() -> Vec<String> {
    use hostfirst::Status;
    use strum::VariantArray;
    Status::VARIANTS.iter().map(|s| s.name().to_string()).collect()
}

/// What is wrong with one function's "Errors:" clause, if anything. The fixed form: the doc holds one
/// `Errors:` (the clause runs to the end of its paragraph), naming each status the function can return as
/// `` `NAME` `` (the constant without `HOSTFIRST_STATUS_`), each with when where that is not plain; a
/// function that has no failure of its own names `PANIC` (a bug inside the library).
fn errors_clause_problem(doc: &str, statuses: &[String]) -> Option<String> {
    let n = doc.matches("Errors:").count();
    if n != 1 {
        return Some(format!("{n} `Errors:` clauses (want exactly one)"));
    }
    let rest = &doc[doc.find("Errors:").unwrap()..];
    let clause = rest.split("\n\n").next().unwrap_or(rest).replace('\n', " ");
    let named: Vec<&str> = clause.split('`').skip(1).step_by(2).collect();
    let listed: Vec<&&str> = named.iter().filter(|w| statuses.iter().any(|s| s == **w)).collect();
    if listed.is_empty() {
        return Some("its `Errors:` clause names no status".to_string());
    }
    // Backticked upper-case words in the clause are statuses (a misspelt or retired one fails), the header's
    // own constants (HOSTFIRST_*, checked by `docs_name_only_declared_items_and_no_past_release`) or C's limits.
    let unknown: Vec<&&str> = named
        .iter()
        .filter(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .filter(|w| !w.starts_with("HOSTFIRST_"))
        .filter(|w| !statuses.iter().any(|s| s == **w) && !["SIZE_MAX", "UINT64_MAX", "INT64_MAX"].contains(*w))
        .collect();
    (!unknown.is_empty()).then(|| format!("its `Errors:` clause names {unknown:?}, which are not statuses"))
}

/// Every stable function that returns a status lists its error statuses in one fixed form (issue 43):
/// one `Errors:` clause naming statuses of the header.
#[test]
fn every_stable_function_lists_its_error_statuses() {
    let text = std::fs::read_to_string(crate::common::root().join("include/hostfirst.h")).unwrap();
    let (_, functions) = doc_blocks(&text);
    let statuses = status_names();
    let stable: Vec<&FnDoc> = functions.iter().filter(|f| f.tier == Tier::Stable && f.returns_status).collect();
    // The parse must see the API: as many status-returning functions as the code view, every one documented.
    let api = api();
    let all = api.functions.values().filter(|(ret, _)| ret == "hostfirst_status").count();
    assert_eq!(functions.iter().filter(|f| f.returns_status).count(), all, "status-returning functions parsed");
    assert!(stable.len() >= 110, "{} stable status-returning functions", stable.len());
    assert!(
        functions.iter().any(|f| f.tier == Tier::Experimental) && functions.iter().any(|f| f.tier == Tier::TestHook)
    );
    let undocumented: Vec<&String> = functions.iter().filter(|f| f.doc.trim().is_empty()).map(|f| &f.name).collect();
    assert!(undocumented.is_empty(), "functions without a doc comment: {undocumented:?}");
    let bad: Vec<String> = stable
        .iter()
        .filter_map(|f| errors_clause_problem(&f.doc, &statuses).map(|p| format!("{}: {p}", f.name)))
        .collect();
    assert!(
        bad.is_empty(),
        "{} stable functions do not list their error statuses in the one form (`Errors: `NULL_ARGUMENT`, \
         `INVALID_ARGUMENT` (when), ...`, from reading the function's code path):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn errors_clause_form_is_checked() {
    let s = status_names();
    assert_eq!(errors_clause_problem("Does it. Errors: `NULL_ARGUMENT`, `OUT_OF_RANGE` (past the end).", &s), None);
    assert_eq!(errors_clause_problem("Errors: `PANIC` only (a bug inside the library).", &s), None);
    // The clause ends with its paragraph: C's and the OS's names in a later paragraph are not statuses.
    assert_eq!(errors_clause_problem("Errors: `IO`.\n\nMaps it `MAP_PRIVATE`.", &s), None);
    assert!(errors_clause_problem("Errors: `IO`, `MAP_PRIVATE`.", &s).unwrap().contains("MAP_PRIVATE"));
    assert!(errors_clause_problem("Does it. Thread-safe.", &s).unwrap().contains("0 `Errors:`"));
    assert!(errors_clause_problem("Errors: as for `hostfirst_put`.", &s).unwrap().contains("names no status"));
    assert!(errors_clause_problem("Errors: `NULL_ARGUMENT`, `NO_SUCH_THING`.", &s).unwrap().contains("NO_SUCH_THING"));
    assert!(errors_clause_problem("Errors: `IO`. Errors: `IO`.", &s).unwrap().contains("2 `Errors:`"));
}

/// Function docs describe this release only (issue 43): no "0.1 had ..." notes and no names the header does
/// not declare (a removed function or type is the CHANGELOG's business). Every `hostfirst_*` word of a doc
/// comment names something the header declares.
#[test]
fn docs_name_only_declared_items_and_no_past_release() {
    let text = std::fs::read_to_string(crate::common::root().join("include/hostfirst.h")).unwrap();
    let (blocks, _) = doc_blocks(&text);
    assert!(blocks.len() > 300, "{} doc comments parsed", blocks.len());
    let declared: std::collections::HashSet<String> =
        crate::header::declared_names(&header_code()).into_iter().map(|(_, n)| n).collect();
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let (mut past, mut undeclared) = (Vec::new(), Vec::new());
    for b in &blocks {
        let flat = b.replace('\n', " ");
        // "0.1" as a release (not a number such as "0.1 s/GB" or "0.15").
        for (i, _) in flat.match_indices("0.1") {
            let before = flat[..i].chars().next_back();
            let after = flat[i + 3..].chars().next();
            let number = before.is_some_and(|c| c.is_ascii_digit() || c == '.')
                || after.is_some_and(|c| c.is_ascii_digit())
                || flat[i + 3..].starts_with(" s");
            if !number {
                past.push(flat.chars().take(100).collect::<String>());
            }
        }
        for w in flat.split(|c: char| !is_word(c)) {
            // Lower case only: upper-case HOSTFIRST_ words may be environment variables (HOSTFIRST_IO) or the
            // opt-in macros (HOSTFIRST_EXPERIMENTAL).
            let prefixed = w.starts_with("hostfirst_");
            // `hostfirst_*_options` and such families split into a prefix ending with `_`.
            if prefixed && !w.ends_with('_') && !declared.contains(w) {
                undeclared.push(w.to_string());
            }
        }
    }
    undeclared.sort();
    undeclared.dedup();
    assert!(past.is_empty(), "doc comments about an earlier release (move them to CHANGELOG.md): {past:#?}");
    assert!(undeclared.is_empty(), "doc comments name what the header does not declare: {undeclared:?}");
}

/// `hostfirst_build_info` writes into a buffer it is given, by its own rule (issue 43: it used to refer to
/// `hostfirst_last_error_message`'s buffer rules, which that function no longer has).
#[test]
fn build_info_doc_states_its_own_rule() {
    let text = std::fs::read_to_string(crate::common::root().join("include/hostfirst.h")).unwrap();
    let (_, functions) = doc_blocks(&text);
    let f = functions.iter().find(|f| f.name == "hostfirst_build_info").expect("hostfirst_build_info");
    assert!(!f.doc.contains("last_error_message"), "{}", f.doc);
    assert!(f.doc.contains("capacity"), "{}", f.doc);
}

/// Every extensible struct (`size_t struct_size` first) has `HOSTFIRST_<STRUCT>_SIZE_1_0` (issue 43), for
/// bindings that cannot run `sizeof`, and it is the struct's `sizeof` as the C compiler sees the header: a
/// program of `_Static_assert`s, generated from the parsed header and compiled with `-Werror`, must build and
/// run. (The library's side: src/ffi/struct_sizes.rs checks each against the Rust layout at compile time.)
#[test]
fn every_extensible_struct_has_its_1_0_size() {
    use crate::common::*;
    let api = api();
    let extensible: Vec<&String> =
        api.structs.iter().filter(|(_, f)| f.first().is_some_and(|f| f.1 == "struct_size")).map(|(n, _)| n).collect();
    assert!(extensible.len() >= 15, "extensible structs found: {extensible:?}");
    let mut c = String::from("#define HOSTFIRST_EXPERIMENTAL\n#include <stddef.h>\n#include \"hostfirst.h\"\n");
    let mut missing = Vec::new();
    for s in &extensible {
        let constant = format!("HOSTFIRST_{}_SIZE_1_0", s.trim_start_matches("hostfirst_").to_uppercase());
        match api.macros.iter().find(|(n, _)| *n == constant) {
            Some((_, v)) if v.parse::<usize>().is_ok() => {}
            _ => missing.push(constant.clone()),
        }
        // The 1.0 size: within the struct, a multiple of its alignment, and at a field boundary (every field
        // ends at or before it, or starts at or after it: fields appended since 1.0 start there). Where nothing
        // was appended since 1.0 it is the struct's sizeof.
        c.push_str(&format!("_Static_assert({constant} <= sizeof({s}), \"{constant} is past sizeof({s})\");\n"));
        c.push_str(&format!(
            "_Static_assert({constant} % _Alignof({s}) == 0, \"{constant} is not a multiple of {s}'s alignment\");\n"
        ));
        for (_, f) in &api.structs[s.as_str()] {
            c.push_str(&format!(
                "_Static_assert(offsetof({s}, {f}) + sizeof((({s} *)0)->{f}) <= {constant} || offsetof({s}, {f}) >= {constant}, \"{s}.{f} straddles {constant}\");\n"
            ));
        }
    }
    assert!(missing.is_empty(), "extensible structs without their 1.0 size as an integer constant: {missing:?}");
    c.push_str("int main(void) { return 0; }\n");
    assert!(have_cc(), "no C compiler");
    let src = scratch("struct_sizes").join("struct_sizes_1_0.c");
    std::fs::write(&src, c).unwrap();
    run_ok(&compile_c(&[&src], "struct_sizes_1_0", &[]), &[], &[]);
}
