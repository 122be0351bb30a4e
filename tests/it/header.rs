//! The committed include/hostfirst.h must equal what cbindgen generates from the sources, regrouped into the
//! sections of [`SECTIONS`] (one object or area each, opened by its life cycle, then its constants, enums, types
//! and functions). Regenerate it with: HOSTFIRST_UPDATE_HEADER=1 cargo test --features test-hooks --test it header::
//!
//! cbindgen writes one file in fixed phases (all constants, all types, all functions), so [`regroup`] splits its
//! output into items (each with its doc comment), assigns every item to a section by the name rules of
//! [`SECTIONS`], and writes the sections in order. An item that no rule matches fails the header test by name:
//! give it a rule (a prefix, not a list of items) in [`SECTIONS`].

use std::path::Path;

/// The one command that regenerates the header; cbindgen.toml (its comment and the header's banner) and the
/// README give it in these words (checked below).
const REGENERATE: &str = "HOSTFIRST_UPDATE_HEADER=1 cargo test --features test-hooks --test it header::";

/// One section of the header: its title, the life cycle of its objects, and the rules that claim items for it.
struct Section {
    title: &'static str,
    /// The paragraph that opens the section: what you create, with what, what you do with it, who frees it, and
    /// what stays valid when.
    life_cycle: &'static str,
    /// Rules over an item's name, lowercased and without its `hostfirst_` prefix (`HOSTFIRST_MAX_RANK` is
    /// `max_rank`): `"word"` claims names that start with it; `"*word*"` claims names that contain it and wins
    /// over every prefix. Among prefixes the longest wins (`shard_plan` over `plan`).
    rules: &'static [&'static str],
}

/// The sections in header order. Statuses come first because every function below returns one.
const SECTIONS: &[Section] = &[
    Section {
        title: "ERRORS AND VERSIONS",
        life_cycle: "\
Every fallible call returns a hostfirst_status; HOSTFIRST_STATUS_OK (0) is success. After a failure the same
thread can read what went wrong: hostfirst_last_error_status() gives the status, hostfirst_last_error_message() a
message naming the thing and the numbers (owned by the library, valid until the next failing call on that
thread) and hostfirst_last_error_fit() the needed and free bytes of a failed fit. Nothing here allocates anything you
free. HOSTFIRST_VERSION_COMPATIBLE(HOSTFIRST_VERSION_NUMBER, hostfirst_version_number()) says whether this library
serves a program built against this header (the same ABI line, the library at least as new);
hostfirst_build_info() and hostfirst_read_engine() say how the library was built and how it reads files;
hostfirst_handle_count() counts the live handles of every kind, which is how tests prove nothing leaked.",
        rules: &[
            "status",
            "last_error",
            "error",
            "version",
            "build_info",
            "read_engine",
            "handle_count",
            "experimental_marker",
        ],
    },
    Section {
        title: "CENSUS AND DEVICES",
        life_cycle: "\
A hostfirst_device is a plain value (a kind and an ordinal, laid out as DLPack's DLDevice): copy it, compare it
with hostfirst_device_equal(), print it with hostfirst_device_format(), parse it from \"cpu\" / \"cuda:1\" with
hostfirst_device_parse(). Nothing in this section hands out a handle. The census runs once per process, at the
first call that needs it: hostfirst_backend_count() / hostfirst_backend_describe() say which backends were found
and why one is missing (no driver, hidden by HOSTFIRST_PLATFORMS, ...), hostfirst_devices() lists the devices,
hostfirst_device_describe() and hostfirst_device_memory() give their details and free memory. Strings in the
info structs live for the process. When a placement does not fit, hostfirst_last_error_fit() tells the needed, free
and total bytes of the device that refused it.",
        rules: &["backend", "census", "device", "devices", "target", "fit", "last_error_fit"],
    },
    Section {
        title: "DEFAULT DEVICE",
        life_cycle: "\
The default device is where calls that take no explicit device put things. It is resolved per call, in order:
the innermost scope of this thread (hostfirst_scope_push() ... hostfirst_scope_pop(token), strictly nested), then
the process default (hostfirst_default_device_set() / _clear()), then the environment (HOSTFIRST_DEFAULT_DEVICE),
then cpu; hostfirst_default_device() says which source won. Scopes belong to their thread: to carry one into a
worker, hostfirst_scope_capture() it into a hostfirst_carried_scope (a plain value) and hostfirst_scope_enter() /
hostfirst_scope_leave() it there. Strict mode (per thread or per process) makes an implicit fallback an error.
No handles; nothing to free.",
        rules: &["default", "scope", "carried_scope", "strict"],
    },
    Section {
        title: "FILES AND VIEWS",
        life_cycle: "\
Open a safetensors file, a multi-file set (*.safetensors.index.json), a NumPy .npy file, an llm.c token shard or
a Megatron indexed dataset with hostfirst_file_open() (recognised by content; _open_format() insists on one
hostfirst_format), a headerless raw file with _open_raw() (dtype, shape, offset), or bytes in memory with
_open_memory(); release it with hostfirst_file_free(). A file is immutable once open: its
tensor names, metadata and path (strings owned by the file, valid until it is freed) may be read from many
threads at once. hostfirst_file_view() / hostfirst_file_view_at() give a hostfirst_view: a read-only, zero-copy
window on one tensor in the file's mapping; slice or narrow it into further views, describe it, copy or read its
bytes into memory you own. Free every view with hostfirst_view_free(); a view keeps its file's mapping alive, so
freeing the file first is safe, and a view never changes under you, even when the file is rewritten on disk.
Element types are hostfirst_dtype values (names and sizes from hostfirst_dtype_name() / _bits()).",
        rules: &["file", "view", "dtype", "max", "format"],
    },
    Section {
        title: "BUFFERS AND PUTS",
        life_cycle: "\
A hostfirst_buffer is memory owned on one device (cpu, cuda:N or page-locked cuda_host) holding one tensor.
A put makes one from a view: hostfirst_put() (options from hostfirst_put_options_init(), progress through a
callback, statistics in hostfirst_put_stats), or hostfirst_put_start() for an asynchronous put that you poll or
wait on and release with hostfirst_put_op_free(). Loads and gathers make buffers too. Free every buffer with
hostfirst_buffer_free(); a buffer outlives the file and view it came from, and its contents never change while
you hold it. Copy it back with hostfirst_buffer_copy_to_host(), move it with hostfirst_buffer_to(), order it
against your CUDA streams with hostfirst_buffer_sync_stream() / _record_stream().
hostfirst_release_cached_memory() gives back the pinned staging and registrations the library keeps for reuse.
What a put or a load leaves in the operating system's page cache is a hostfirst_page_cache in its options
(keep, drop, bypass).",
        rules: &["buffer", "put", "progress", "release_cached_memory", "page_cache"],
    },
    Section {
        title: "RULES, PLANS AND LOADS",
        life_cycle: "\
Placement rules say where each tensor of a file goes: make a hostfirst_rules with hostfirst_rules_new(), add
glob patterns with their targets (\"host\", a device spec, or \"default\"), free it with hostfirst_rules_free().
hostfirst_plan_make() runs them over a file without moving a byte: the hostfirst_plan lists each tensor's target,
the bytes per device and the rules that matched nothing; free it with hostfirst_plan_free(). A load
(hostfirst_load_run()) carries it out: every tensor placed by the rules, each as a host view or a buffer
(HOSTFIRST_LOADED_*), kept in a hostfirst_load until hostfirst_load_free(). hostfirst_load_get() hands out a new
view or buffer handle that you free; its memory stays valid until the load and every handle to it are freed,
in any order.",
        rules: &["rules", "plan", "load", "placement", "loaded"],
    },
    Section {
        title: "GATHER",
        life_cycle: "\
A hostfirst_gather assembles batches of rows of one tensor (for example random token windows) on one device:
create it with hostfirst_gather_new() for a batch size, window and dtype, run it with offsets (from your sampler
or hostfirst_random_offsets()), free it with hostfirst_gather_free(). Batches come from a bounded ring: a batch
you hold (a buffer from hostfirst_gather_run() with out_batch, or hostfirst_gather_batch(), or a DLPack export of one) is
never rewritten until you free it. A hostfirst_gather_stream (hostfirst_gather_stream_start()) fills batches
ahead of you on a worker thread; take them with hostfirst_gather_stream_next() and free the stream with
hostfirst_gather_stream_free() (it keeps its gather and source alive until then; batches you took stay valid).",
        rules: &["gather", "random_offsets"],
    },
    Section {
        title: "DLPACK",
        life_cycle: "\
A view or a buffer can leave as a DLPack managed tensor (the versioned form of DLPack 1.x, or the legacy
DLManagedTensor for older consumers), layout-identical to dlpack.h's structs, so NumPy, JAX, PyTorch and CuPy
can take it without a copy. The export owns what it needs: the consumer calls its deleter exactly once when
done, and until then the memory stays valid whatever happens to the handle it came from (free the view or
buffer right after exporting if you like). Options (copy policy, target device, the consumer's stream) go in a
hostfirst_dlpack_options. hostfirst_dlpack_capsule_destructor() is the destructor for a Python capsule that holds one.",
        rules: &["*dlpack*"],
    },
    Section {
        title: "READ PLANS",
        life_cycle: "\
A hostfirst_read_plan is the set of slices a caller will read from an open file (whole tensors, or a range of
each dimension: hostfirst_read_plan_slice), turned into file requests before any byte moves. Make it with
hostfirst_read_plan_make() (the over-read cap and the reader threads in hostfirst_read_plan_options, from
hostfirst_read_plan_options_init()), inspect it with hostfirst_read_plan_describe() and
hostfirst_read_plan_request(), run it into your buffers with hostfirst_read_plan_execute() as often as you
like, and free it with hostfirst_read_plan_free(). A plan keeps the file's data alive, not the file handle.",
        rules: &["read_plan"],
    },
    Section {
        title: "SHARD-ON-READ",
        life_cycle: "\
Shard-on-read gives each process only its part of every tensor, read straight from the file. Describe the
devices as a hostfirst_shard_mesh (named axes with sizes; hostfirst_shard_mesh_new()), the partitioning as
hostfirst_shard_rules over that mesh (glob patterns to partition specs), then make a hostfirst_shard_plan for the
positions this process owns (hostfirst_shard_plan_make(), options from hostfirst_shard_options_init()).
hostfirst_shard_run() reads the plan into a hostfirst_shard_result (this run's progress callback in
hostfirst_shard_run_options, from hostfirst_shard_run_options_init()), whose buffers you take with
hostfirst_shard_result_get() and free yourself. Each object has its own _free; rules keep what they need of
the mesh (free it right after), and buffers taken from a result stay valid after the result is freed.",
        rules: &["shard"],
    },
    Section {
        title: "WRITING SAFETENSORS FILES",
        life_cycle: "\
A hostfirst_writer writes one safetensors file (or a Hugging Face set of part files and an index): open it on a
path with hostfirst_writer_open() (options from hostfirst_writer_options_init()) or on a descriptor with
hostfirst_writer_open_fd(), declare every tensor with where its bytes are (a view, a buffer on any device, or
host memory you keep alive until finish), set the metadata, then hostfirst_writer_finish() once; free it with
hostfirst_writer_free(). Nothing is written before finish, and finish never leaves a half-written file: it
writes a temporary file beside the target and renames it over the target when complete. The writer keeps the
views and buffers it was given alive until finish returns; strings it hands out (part paths, the index path in
hostfirst_writer_info) stay valid until it is freed. With several ranks (world > 1) finish is collective and
calls your hostfirst_agree_fn between its steps.",
        rules: &["writer", "agree"],
    },
    Section {
        title: "OBJECT STORAGE",
        life_cycle: "\
hostfirst_file_open() and the other opens accept s3://, gs://, az:// and http(s):// URLs (see the README,
Object storage). hostfirst_remote_configure() sets the process-wide remote settings (concurrency, part size,
timeouts, retries, the local cache folder and its bound) from a hostfirst_remote_options filled by
hostfirst_remote_options_init(); they apply to opens that start after the call, and NULL returns to the
environment variables and the defaults.",
        rules: &["remote"],
    },
    Section {
        title: "TEST HOOKS",
        life_cycle: "\
Present only in builds with the test-hooks feature (HOSTFIRST_TEST_HOOKS): functions that panic inside the
boundary, so the test suite can prove that no panic crosses it.",
        rules: &["_test"],
    },
];

/// The section that claims `name` (an item's C name), if any.
fn section_of(name: &str) -> Option<usize> {
    let lower = name.to_ascii_lowercase();
    let key = lower.strip_prefix("hostfirst_").unwrap_or(&lower);
    let mut best: Option<(usize, usize)> = None; // (prefix length, section)
    for (i, s) in SECTIONS.iter().enumerate() {
        for rule in s.rules {
            if let Some(infix) = rule.strip_prefix('*').and_then(|r| r.strip_suffix('*')) {
                if key.contains(infix) {
                    return Some(i);
                }
            } else if key.starts_with(rule) && best.map_or(true, |(len, _)| rule.len() > len) {
                best = Some((rule.len(), i));
            }
        }
    }
    best.map(|(_, i)| i)
}

/// What an item of cbindgen's output declares; items are written in this order within a section.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Constant,
    Enum,
    Type,
    Function,
}

/// The kind and C name of the declaration in `item` (its doc comments and `#if` lines skipped).
fn declaration(item: &str) -> Option<(Kind, String)> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let code = strip_spans(item, "/*", "*/");
    let lines: Vec<&str> = code.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let start = lines.iter().position(|l| !l.starts_with('#') || l.starts_with("#define "))?;
    let first = lines[start];
    let word_after = |s: &str| s.trim_start().split(|c: char| !is_word(c)).next().unwrap_or("").to_string();
    if let Some(rest) = first.strip_prefix("#define ") {
        return Some((Kind::Constant, word_after(rest)));
    }
    if let Some(rest) = first.strip_prefix("enum ") {
        return Some((Kind::Enum, word_after(rest)));
    }
    if let Some(rest) = first.strip_prefix("typedef ") {
        // `typedef struct NAME ...`, `typedef R (*NAME)(...)`, `typedef T NAME;`
        let name = if let Some(i) = rest.find("(*") {
            word_after(&rest[i + 2..])
        } else if let Some(r) = rest.strip_prefix("struct ").or_else(|| rest.strip_prefix("union ")) {
            word_after(r)
        } else {
            rest.trim_end_matches(';').rsplit(|c: char| !is_word(c)).next().unwrap_or("").to_string()
        };
        return Some((Kind::Type, name));
    }
    // A function: `R name(args);`, possibly over several lines, perhaps with attributes or macros (cbindgen's
    // `[fn] prefix`, `must_use`, deprecation notes) before or after: its name is the first `hostfirst_*`
    // word followed by `(` (every C name has the prefix, checked below), else the word before the first `(`.
    let decl = lines[start..].join(" ");
    let prefixed = decl.match_indices("hostfirst_").find_map(|(i, _)| {
        let before_ok = decl[..i].chars().next_back().map_or(true, |c| !is_word(c));
        let word: String = decl[i..].chars().take_while(|&c| is_word(c)).collect();
        let after = decl[i + word.len()..].trim_start();
        (before_ok && after.starts_with('(')).then_some(word)
    });
    let name = match prefixed {
        Some(word) => word,
        None => {
            let i = decl.find('(')?;
            decl[..i].trim_end().rsplit(|c: char| !is_word(c)).next()?.to_string()
        }
    };
    (!name.is_empty()).then_some((Kind::Function, name))
}

/// The C++ linkage lines cbindgen writes around the functions; the sectioned header writes them once around
/// everything after the conventions.
const CPP_OPEN: &str = "#ifdef __cplusplus\nextern \"C\" {\n#endif // __cplusplus\n";
const CPP_CLOSE: &str = "#ifdef __cplusplus\n}  // extern \"C\"\n#endif  // __cplusplus\n";
const GUARD_END: &str = "#endif  /* HOSTFIRST_H */\n";

/// The experimental tier in the header (abi/hostfirst.map's experimental node): the block that opens and closes
/// it in each section, and what the title of a section with nothing else says.
const EXPERIMENTAL_OPEN: &str =
    "/* ---- Experimental: may change in any minor; #define HOSTFIRST_EXPERIMENTAL to use (see \
                                 CONVENTIONS) ---- */\n#if defined(HOSTFIRST_EXPERIMENTAL)\n";
const EXPERIMENTAL_CLOSE: &str = "#endif /* HOSTFIRST_EXPERIMENTAL */\n";
const EXPERIMENTAL_TITLE: &str = "EXPERIMENTAL: HOSTFIRST_EXPERIMENTAL";

/// Regroups cbindgen's output into the sections of [`SECTIONS`]. `preamble_end` is the text that ends the part
/// kept as is (banner, include guard, includes and the conventions: cbindgen.toml's `after_includes`). Fails
/// with the names of the items no section claims.
fn regroup(generated: &str, preamble_end: &str) -> Result<String, Vec<String>> {
    let cut = generated.find(preamble_end).expect("the generated header holds cbindgen.toml's after_includes")
        + preamble_end.len();
    let (preamble, body) = generated.split_at(cut);
    // cbindgen writes cbindgen.toml's `trailer` after the include guard's end: its items join the others.
    let (body, trailer) = body.rsplit_once(GUARD_END).expect("the generated header ends with its include guard");
    let body = format!("{body}\n{trailer}").replacen(CPP_OPEN, "\n", 1).replacen(CPP_CLOSE, "\n", 1);
    assert!(!body.contains("extern \"C\""), "cbindgen's C++ linkage lines changed; update CPP_OPEN/CPP_CLOSE");

    // Items are separated by blank lines; a comment standing alone belongs to the item after it.
    let mut items: Vec<Vec<(Kind, String, String)>> = SECTIONS.iter().map(|_| Vec::new()).collect();
    let mut unclaimed = Vec::new();
    let mut pending = String::new();
    for chunk in body.split("\n\n").map(|c| c.trim_matches('\n')).filter(|c| !c.is_empty()) {
        let text = if pending.is_empty() { chunk.to_string() } else { format!("{pending}\n\n{chunk}") };
        match declaration(&text) {
            None => pending = text,
            Some((kind, name)) => {
                pending.clear();
                match section_of(&name) {
                    Some(s) => items[s].push((kind, name, text)),
                    None => unclaimed.push(name),
                }
            }
        }
    }
    assert!(pending.trim().is_empty(), "text after the last item of the generated header: {pending}");
    if !unclaimed.is_empty() {
        return Err(unclaimed);
    }

    // The experimental tier: items abi/hostfirst.map's experimental node matches go last in their section,
    // behind HOSTFIRST_EXPERIMENTAL; a section holding nothing else says so in its title.
    let map = crate::nodes::parse(&std::fs::read_to_string(crate::common::root().join("abi/hostfirst.map")).unwrap())
        .expect("abi/hostfirst.map parses");
    let experimental = |name: &str| crate::nodes::is_experimental(&map, name);
    let all_experimental = |section: &Vec<(Kind, String, String)>| {
        !section.is_empty() && section.iter().all(|(_, name, _)| experimental(name))
    };
    let title = |s: &Section, section: &Vec<(Kind, String, String)>| {
        if all_experimental(section) {
            format!("{} ({EXPERIMENTAL_TITLE})", s.title)
        } else {
            s.title.to_string()
        }
    };
    let rule = "=".repeat(110);
    let mut out = preamble.trim_end().to_string();
    out.push_str("\n\n/*\n * CONTENTS\n *\n");
    for (i, (s, section)) in SECTIONS.iter().zip(&items).enumerate() {
        out.push_str(&format!(" *   {:>2}. {}\n", i + 1, title(s, section)));
    }
    out.push_str(" */\n\n");
    out.push_str(CPP_OPEN);
    for (i, (s, mut section)) in SECTIONS.iter().zip(items).enumerate() {
        if section.is_empty() {
            continue;
        }
        out.push_str(&format!("\n/* {rule}\n * {}. {}\n *\n", i + 1, title(s, &section)));
        for line in s.life_cycle.lines() {
            out.push_str(&format!(" * {line}\n"));
        }
        out.push_str(&format!(" * {rule} */\n"));
        // Stable items first, then the experimental ones; within each, by kind (stable: cbindgen's order).
        section.sort_by_key(|(kind, name, _)| (experimental(name), *kind));
        let mut gated = false;
        for (_, name, text) in section {
            if experimental(&name) && !gated {
                gated = true;
                out.push_str(&format!("\n{EXPERIMENTAL_OPEN}"));
            }
            out.push('\n');
            out.push_str(&text);
            out.push('\n');
        }
        if gated {
            out.push_str(&format!("\n{EXPERIMENTAL_CLOSE}"));
        }
    }
    out.push('\n');
    out.push_str(CPP_CLOSE);
    out.push('\n');
    out.push_str(GUARD_END);
    Ok(out)
}

fn config() -> cbindgen::Config {
    let dir = env!("CARGO_MANIFEST_DIR");
    cbindgen::Config::from_file(Path::new(dir).join("cbindgen.toml")).expect("cbindgen.toml parses")
}

/// cbindgen's output, before [`regroup`].
fn cbindgen_output() -> String {
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(env!("CARGO_MANIFEST_DIR"))
        .with_config(config())
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    String::from_utf8(out).expect("header is UTF-8")
}

/// The header as committed: cbindgen's output in sections.
fn generate() -> String {
    let conventions = config().after_includes.expect("cbindgen.toml has after_includes (the conventions)");
    regroup(&cbindgen_output(), conventions.trim_end()).unwrap_or_else(|names| {
        panic!(
            "no section of include/hostfirst.h claims {names:?}: add a name rule (a prefix) for them to SECTIONS in \
             tests/it/header.rs"
        )
    })
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
fn regroup_keeps_every_item_once_and_fails_on_an_unclaimed_one() {
    let conventions = config().after_includes.unwrap();
    let raw = cbindgen_output();
    let sectioned = regroup(&raw, conventions.trim_end()).expect("every item has a section");
    // Every declaration of cbindgen's output is in the sectioned header exactly once, and nothing else.
    let mut before = declared_names(&strip_comments(&raw));
    let mut after = declared_names(&strip_comments(&sectioned));
    before.sort();
    after.sort();
    assert!(before.len() > 200, "{} names parsed", before.len());
    assert_eq!(before, after);
    // Every section is present, in order, each with its life-cycle paragraph.
    let mut at = 0;
    for (i, s) in SECTIONS.iter().enumerate() {
        let title = format!(" * {}. {}", i + 1, s.title);
        let found =
            sectioned[at..].find(&title).unwrap_or_else(|| panic!("section {} missing or out of order", s.title));
        at += found + title.len();
    }
    // An item no rule claims fails by name, beside one that a rule claims.
    let extra = "\n/**\n * Frobnicates.\n */\nhostfirst_status hostfirst_frobnicate(void);\n\n\
                 /**\n * A new load call.\n */\nhostfirst_status hostfirst_load_entries(void);\n";
    let with_extra = raw.replacen(CPP_CLOSE, &format!("{extra}\n{CPP_CLOSE}"), 1);
    assert_eq!(regroup(&with_extra, conventions.trim_end()), Err(vec!["hostfirst_frobnicate".to_string()]));
}

/// Forms other helpers are adding land in their object's section: a transparent enum type with its constants
/// (cbindgen writes the typedef and the `#define`s as one item), an `_INIT` macro from cbindgen.toml's
/// `trailer` (after the functions), and a function with attributes before and after it.
#[test]
fn regroup_places_typed_constants_and_trailer_macros() {
    let conventions = config().after_includes.unwrap();
    let raw = cbindgen_output();
    let typed = "/**\n * Where a tensor goes.\n */\ntypedef uint32_t hostfirst_placement;\n/**\n * Host.\n */\n\
                 #define HOSTFIRST_PLACEMENT_HOST_X 1\n";
    let init = "/**\n * Initialiser.\n */\n#define HOSTFIRST_PUT_OPTIONS_INIT_X { sizeof(hostfirst_put_options) }\n\n\
                /**\n * Old.\n */\n__attribute__((deprecated(\"use hostfirst_gather_run\"))) hostfirst_status \
                hostfirst_gather_old_x(struct hostfirst_gather *g) __attribute__((nonnull(1)));\n";
    let edited = raw.replacen(CPP_OPEN, &format!("{typed}\n{CPP_OPEN}"), 1).replacen(
        GUARD_END,
        &format!("{init}\n{GUARD_END}"),
        1,
    );
    let out = regroup(&edited, conventions.trim_end()).expect("claimed");
    let section = |title: &str| {
        let start = out.rfind(&format!(". {title}\n")).unwrap(); // the section, not its CONTENTS line
        let end = out[start..].find("/* ====").map_or(out.len(), |e| start + e);
        out[start..end].to_string()
    };
    let loads = section("RULES, PLANS AND LOADS");
    assert!(loads
        .contains("typedef uint32_t hostfirst_placement;\n/**\n * Host.\n */\n#define HOSTFIRST_PLACEMENT_HOST_X 1"));
    assert!(section("BUFFERS AND PUTS").contains("#define HOSTFIRST_PUT_OPTIONS_INIT_X"));
    assert!(section("GATHER").contains("hostfirst_gather_old_x(struct hostfirst_gather *g)"));
    assert!(out.ends_with(&format!("{CPP_CLOSE}\n{GUARD_END}")));
}

/// The life-cycle paragraphs name only functions and types the header declares (so a rename that
/// leaves a paragraph behind fails here).
#[test]
fn section_paragraphs_name_declared_items() {
    let code = header_code();
    let declared: std::collections::HashSet<String> = declared_names(&code).into_iter().map(|(_, n)| n).collect();
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut stale = Vec::new();
    for s in SECTIONS {
        for word in s.life_cycle.split(|c: char| !is_word(c)) {
            // Lower case only: upper-case HOSTFIRST_ words may be environment variables.
            if word.starts_with("hostfirst_") && !word.ends_with('_') && !declared.contains(word) {
                stale.push(format!("{}: {word}", s.title));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "life-cycle paragraphs in SECTIONS (tests/it/header.rs) name undeclared items: {stale:?}"
    );
}

#[test]
fn section_rules_claim_by_name() {
    let title = |name: &str| section_of(name).map(|i| SECTIONS[i].title);
    assert_eq!(title("hostfirst_view_to_dlpack"), Some("DLPACK"));
    assert_eq!(title("HOSTFIRST_DLPACK_FLAG_READ_ONLY"), Some("DLPACK"));
    assert_eq!(title("hostfirst_shard_plan_make"), Some("SHARD-ON-READ"));
    assert_eq!(title("hostfirst_plan_make"), Some("RULES, PLANS AND LOADS"));
    assert_eq!(title("hostfirst_read_plan_make"), Some("READ PLANS"));
    assert_eq!(title("HOSTFIRST_READ_PLAN_STATS_SIZE_1_0"), Some("READ PLANS"));
    assert_eq!(title("hostfirst_default_device_set"), Some("DEFAULT DEVICE"));
    assert_eq!(title("hostfirst_device_describe"), Some("CENSUS AND DEVICES"));
    assert_eq!(title("hostfirst_gather_stream_push"), Some("GATHER"));
    assert_eq!(title("HOSTFIRST_MAX_RANK"), Some("FILES AND VIEWS"));
    assert_eq!(title("hostfirst_status"), Some("ERRORS AND VERSIONS"));
    assert_eq!(title("hostfirst_frobnicate"), None);
}

#[test]
fn one_regeneration_command_everywhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // These must give the command; every other text that mentions it (docs, CHANGELOG, Cargo.toml, the
    // bindings' READMEs) must give it whole.
    let required = ["cbindgen.toml", "include/hostfirst.h", "README.md"];
    let mut files: Vec<String> = required.iter().map(|f| f.to_string()).collect();
    files
        .extend(["CHANGELOG.md", "Cargo.toml", "bindings/python/README.md", "bindings/go/README.md"].map(String::from));
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        files.push(format!("docs/{}", entry.unwrap().file_name().to_string_lossy()));
    }
    for file in &files {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else { continue };
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("HOSTFIRST_UPDATE_HEADER=")).collect();
        assert!(
            !lines.is_empty() || !required.contains(&file.as_str()),
            "{file} does not say how to regenerate the header ({REGENERATE})"
        );
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
    strip_comments(&std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/hostfirst.h")).unwrap())
}

/// C text without its comments.
fn strip_comments(text: &str) -> String {
    let block = strip_spans(text, "/*", "*/");
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
    // Preprocessor lines (continuations joined): only `#define NAME` declares anything.
    let code = code.replace("\\\n", " ");
    let mut c_code = String::new();
    for line in code.lines() {
        match line.trim_start().strip_prefix('#') {
            Some(p) => {
                if let Some(d) = p.trim_start().strip_prefix("define") {
                    let name = d.split_whitespace().next().unwrap_or("").split('(').next().unwrap_or("");
                    names.push(("macro", name.to_string()));
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
    for f in hostfirst::file::Format::VARIANTS {
        has(format!("HOSTFIRST_FORMAT_{}", f.name()), *f as i64);
    }
}
