//! Placement rule specs (`pattern=target`) and the glob matcher. The input is split at NUL bytes into up to
//! sixteen fields: a field starting with byte 0x01 is a tensor name (the rest of it), any other a rule spec.
//! Checks:
//! - `hostfirst_rules_add_spec` accepts a spec exactly when the reference does ([`super::reference::rule_spec`]:
//!   the last `=` splits it, the pattern is well-formed, the target is `host`, `default` or a device spec),
//!   with `INVALID_ARGUMENT` otherwise; `hostfirst_rules_add` on the two halves agrees; the core's rule holds
//!   that pattern and target;
//! - for every well-formed pattern and every name, the library's `glob_match` equals the reference matcher
//!   ([`super::reference::glob_matches`], a table over positions written from the documented syntax), and
//!   `Rules::find` picks the first rule the reference matches;
//! - through the C API: a plan over a file whose tensors have those names (every rule sent to `host`, so no
//!   device is needed) gives each tensor the first matching rule, and lists as unmatched exactly the rules
//!   that win no tensor, each with the earlier rule that shadows it (or -1).
//!
//! Returns the status of the first rule spec (OK or INVALID_ARGUMENT; OK when there is none).

use super::image::{safetensors, Tensor};
use super::reference::{self, Tok};
use super::{check_failure, cstring, handles, last_error};
use hostfirst::ffi::*;
use hostfirst::place::rules::{glob_match, RuleTarget};
use hostfirst::place::Rules;
use hostfirst::Status;

/// Longest rule spec or name, in bytes (the reference's table is pattern × name characters, for every rule
/// and name).
const MAX_FIELD: usize = 64;

pub fn run(data: &[u8]) -> Status {
    let hs = handles();
    let mut specs: Vec<&[u8]> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for field in data.split(|&b| b == 0).take(16) {
        let field = &field[..field.len().min(MAX_FIELD)];
        match field.split_first() {
            Some((1, name)) => {
                if let Ok(n) = std::str::from_utf8(name) {
                    if !names.iter().any(|m| m == n) {
                        names.push(n.to_string());
                    }
                }
            }
            _ => specs.push(field),
        }
    }

    let mut h: *mut hostfirst_rules = std::ptr::null_mut();
    assert_eq!(hostfirst_rules_new(&mut h), Status::Ok);
    let mut core = Rules::new();
    // The rules accepted, in order: pattern text and its elements.
    let mut valid: Vec<(String, Vec<Tok>)> = Vec::new();
    let mut first = None;
    for spec in &specs {
        let c = cstring(spec);
        let st = hostfirst_rules_add_spec(h, c.as_ptr());
        check_failure(st, "hostfirst_rules_add_spec");
        first.get_or_insert(st);
        let Ok(text) = std::str::from_utf8(spec) else {
            assert_eq!(st, Status::InvalidArgument, "a spec that is not UTF-8");
            continue;
        };
        let want = reference::rule_spec(text);
        assert_eq!(st == Status::Ok, want.is_some(), "rule spec {text:?}: {} ({})", st.name(), last_error());
        if st != Status::Ok {
            assert_eq!(st, Status::InvalidArgument, "{text:?}");
        }
        let core_st = core.add_spec(text);
        assert_eq!(core_st.is_ok(), want.is_some(), "Rules::add_spec({text:?})");
        if let Some(eq) = text.rfind('=') {
            let (p, t) = (cstring(&text.as_bytes()[..eq]), cstring(&text.as_bytes()[eq + 1..]));
            let mut h2: *mut hostfirst_rules = std::ptr::null_mut();
            assert_eq!(hostfirst_rules_new(&mut h2), Status::Ok);
            assert_eq!(hostfirst_rules_add(h2, p.as_ptr(), t.as_ptr()), st, "rules_add vs rules_add_spec on {text:?}");
            assert_eq!(hostfirst_rules_free(h2), Status::Ok);
            // The pattern half alone, against every name, whatever the target.
            if let Some(toks) = reference::glob_tokens(&text[..eq]) {
                for n in &names {
                    assert_eq!(
                        glob_match(&text[..eq], n),
                        reference::glob_matches(&toks, n),
                        "glob_match({:?}, {n:?})",
                        &text[..eq]
                    );
                }
            } else {
                for n in &names {
                    let _ = glob_match(&text[..eq], n); // not a pattern the library accepts: only no panic
                }
            }
        }
        if let Some((toks, target)) = want {
            let eq = text.rfind('=').expect("a valid spec has '='");
            let rule = core.rules().last().expect("just added");
            assert_eq!(rule.pattern, &text[..eq]);
            let same = match (&rule.target, &target) {
                (RuleTarget::Host, reference::Target::Host) | (RuleTarget::Default, reference::Target::Default) => true,
                (RuleTarget::Spec(s), reference::Target::Device(d)) => {
                    reference::device_spec(s).as_ref() == Some(d) && s == text[eq + 1..].trim()
                }
                _ => false,
            };
            assert!(same, "rule {text:?} has target {:?}, the reference {target:?}", rule.target);
            valid.push((text[..eq].to_string(), toks));
        }
    }
    assert_eq!(core.rules().len(), valid.len());

    // First match per name, by the reference and by the library.
    let winners: Vec<Option<usize>> =
        names.iter().map(|n| valid.iter().position(|(_, t)| reference::glob_matches(t, n))).collect();
    for (n, w) in names.iter().zip(&winners) {
        assert_eq!(core.find(n).map(|r| r.0), *w, "Rules::find({n:?})");
    }
    plan_check(&valid, &names, &winners);
    assert_eq!(hostfirst_rules_free(h), Status::Ok);
    assert_eq!(handles(), hs);
    first.unwrap_or(Status::Ok)
}

/// The same rules, all sent to `host`, planned over a file whose tensors have `names`.
fn plan_check(valid: &[(String, Vec<Tok>)], names: &[String], winners: &[Option<usize>]) {
    let tensors: Vec<Tensor> =
        names.iter().map(|n| Tensor { name: n.clone(), dtype: "U8", shape: vec![1], data: vec![7] }).collect();
    let image = safetensors(&tensors, &[]);
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    if hostfirst_file_open_memory(image.as_ptr().cast(), image.len(), &mut f) != Status::Ok {
        // A name the format refuses (empty, `__metadata__`, too long): the core comparison above stands.
        return;
    }
    let mut h: *mut hostfirst_rules = std::ptr::null_mut();
    assert_eq!(hostfirst_rules_new(&mut h), Status::Ok);
    let host = c"host";
    for (p, _) in valid {
        let c = cstring(p.as_bytes());
        assert_eq!(hostfirst_rules_add(h, c.as_ptr(), host.as_ptr()), Status::Ok, "{p:?}: {}", last_error());
    }
    let mut plan: *mut hostfirst_plan = std::ptr::null_mut();
    assert_eq!(hostfirst_plan_make(f, h, &mut plan), Status::Ok, "{}", last_error());
    let mut count = 0usize;
    assert_eq!(hostfirst_plan_tensor_count(plan, &mut count), Status::Ok);
    assert_eq!(count, names.len());
    for (i, w) in winners.iter().enumerate() {
        // Zeroed is not a valid value of this struct (it holds an enum): the library fills it.
        let mut info = std::mem::MaybeUninit::<hostfirst_plan_tensor_info>::zeroed();
        // SAFETY: writing the size field of our own allocation.
        unsafe { (*info.as_mut_ptr()).struct_size = std::mem::size_of::<hostfirst_plan_tensor_info>() };
        assert_eq!(hostfirst_plan_tensor(plan, i, info.as_mut_ptr()), Status::Ok);
        // SAFETY: on OK the library wrote the whole struct (its size is the full size).
        let info = unsafe { info.assume_init() };
        assert_eq!(info.rule, w.map_or(-1, |r| r as i32), "plan: tensor {:?}", names[i]);
    }
    let unmatched: Vec<usize> = (0..valid.len()).filter(|r| !winners.contains(&Some(*r))).collect();
    let mut uc = 0usize;
    assert_eq!(hostfirst_plan_unmatched_rule_count(plan, &mut uc), Status::Ok);
    assert_eq!(uc, unmatched.len(), "unmatched rules");
    for (k, &r) in unmatched.iter().enumerate() {
        let mut info: hostfirst_plan_unmatched_rule_info = unsafe { std::mem::zeroed() };
        info.struct_size = std::mem::size_of::<hostfirst_plan_unmatched_rule_info>();
        assert_eq!(hostfirst_plan_unmatched_rule(plan, k, &mut info), Status::Ok);
        assert_eq!(info.rule as usize, r);
        // Shadowed: the first tensor (file order) this pattern matches is taken by an earlier rule.
        let shadow = names
            .iter()
            .zip(winners)
            .find(|(n, _)| reference::glob_matches(&valid[r].1, n))
            .map(|(_, w)| w.expect("a matching rule exists") as i32);
        assert_eq!(info.shadowed_by, shadow.unwrap_or(-1), "rule {r} {:?}", valid[r].0);
    }
    assert_eq!(hostfirst_plan_free(plan), Status::Ok);
    assert_eq!(hostfirst_rules_free(h), Status::Ok);
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}
