//! Placement rules (tensor-name pattern → target): `hostfirst_rules_*`.

use super::args::{c_str, out_ptr};
use super::handle::{self, Handle};
use crate::error::Status;
use crate::place::Rules;
use std::ffi::c_char;
use std::sync::Mutex;

/// An ordered list of placement rules (glob pattern on tensor names → target). Created by
/// `hostfirst_rules_new`, released by `hostfirst_rules_free`. Calls on one handle are serialised internally
/// and may come from any thread.
pub struct hostfirst_rules {
    _private: [u8; 0],
}

impl Handle for hostfirst_rules {
    type Target = Mutex<Rules>;
    const NAME: &'static str = "hostfirst_rules";
}

/// Creates an empty rule list and writes its handle to `*out`. With no rules every tensor stays on the host.
/// Free it with `hostfirst_rules_free`. Errors: `NULL_ARGUMENT`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_rules_new(out: *mut *mut hostfirst_rules) -> Status {
    hostfirst_boundary!("hostfirst_rules_new", {
        let out = out_ptr(out, "out")?;
        *out = handle::insert_new::<hostfirst_rules>(Mutex::new(Rules::new()));
        Ok(())
    })
}

/// Appends the rule `pattern` → `target` (lower priority than every rule already added: the first match
/// wins). `pattern` is a glob on tensor names: `*` any run of characters, `?` one character, `[a-z]`,
/// `[!a-z]` a character class, `\x` a literal `x`. `target` is a device spec (`cpu`, `cuda:0`, `cuda_host`,
/// ...), `default` (the default device, resolved through the calling thread's default stack when a plan is
/// made; strict mode refuses it) or `host` (stay a zero-copy view). Device presence is checked when a plan is
/// made, not here. Both strings are copied. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT`
/// (empty or malformed pattern, unknown target). On error the list is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_rules_add(
    rules: *mut hostfirst_rules,
    pattern: *const c_char,
    target: *const c_char,
) -> Status {
    hostfirst_boundary!("hostfirst_rules_add", {
        let r = handle::get::<hostfirst_rules>(rules, "rules")?;
        let (p, t) = (c_str(pattern, "pattern")?, c_str(target, "target")?);
        let mut g = r.lock().unwrap_or_else(|e| e.into_inner());
        g.add(p, t)
    })
}

/// Appends a rule written as text, `pattern=target` (the CLI's `--rule` form; the last `=` separates the two),
/// with the rules of `hostfirst_rules_add`: the parse of the text form, as `hostfirst_device_parse` is for
/// devices, for callers that hold rules as strings (command lines, config files). Errors: as for
/// `hostfirst_rules_add`, and `INVALID_ARGUMENT` for text without `=`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_rules_add_spec(rules: *mut hostfirst_rules, spec: *const c_char) -> Status {
    hostfirst_boundary!("hostfirst_rules_add_spec", {
        let r = handle::get::<hostfirst_rules>(rules, "rules")?;
        let s = c_str(spec, "spec")?;
        let mut g = r.lock().unwrap_or_else(|e| e.into_inner());
        g.add_spec(s)
    })
}

/// Frees a rule list. NULL is a no-op. Plans made from it are independent of it. Errors: `INVALID_HANDLE` (a freed or foreign handle; nothing is freed).
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_rules_free(rules: *mut hostfirst_rules) -> Status {
    hostfirst_boundary!("hostfirst_rules_free", { handle::remove(rules, "rules").map(|_| ()) })
}
