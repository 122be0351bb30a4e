//! A placement plan: the dry run of a set of rules over a file. It allocates nothing and moves no byte.

use super::rules::{glob_match, RuleTarget, Rules};
use crate::device::fit;
use crate::device::Device;
use crate::error::{Error, Result, Status};
use crate::file::{CName, TensorFile};

/// Where one tensor goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Stays a zero-copy host view of the mapping.
    Host,
    /// Copied into a new buffer on this device.
    Device(Device),
}

/// One tensor of a plan.
#[derive(Clone, Debug)]
pub struct PlanEntry {
    /// The tensor name (shared with the file: a NUL-terminated C string too, see [`CName::as_ptr`]).
    pub name: CName,
    /// Its index in the file.
    pub index: usize,
    /// Its size in bytes.
    pub nbytes: u64,
    /// Where it goes.
    pub placement: Placement,
    /// The rule that matched (index into the rules), None when no rule did (host).
    pub rule: Option<usize>,
}

/// One device of a plan.
#[derive(Clone, Debug)]
pub struct DeviceSummary {
    /// The device.
    pub device: Device,
    /// Bytes the plan puts on it.
    pub bytes: u64,
    /// Tensors the plan puts on it.
    pub tensors: usize,
    /// Bytes usable on it now (free less the fit check's margin, see [`fit::usable`]).
    pub usable: u64,
    /// Its total memory.
    pub total: u64,
    /// Whether `bytes ≤ usable` now.
    pub fits: bool,
    /// The largest tensor it receives (name, bytes).
    pub largest: (String, u64),
}

impl DeviceSummary {
    /// Counts a tensor of `nbytes` called `name` on `device` in `devices`, adding the device (with its memory
    /// figures taken now) on first use. `fits` is left to the caller, once every tensor is counted.
    pub fn add(devices: &mut Vec<DeviceSummary>, device: Device, name: &str, nbytes: u64) -> Result<()> {
        let pos = match devices.iter().position(|s| s.device == device) {
            Some(p) => p,
            None => {
                let (usable, total) = fit::usable(device)?;
                devices.push(DeviceSummary {
                    device,
                    bytes: 0,
                    tensors: 0,
                    usable,
                    total,
                    fits: true,
                    largest: (String::new(), 0),
                });
                devices.len() - 1
            }
        };
        let s = &mut devices[pos];
        s.bytes = s.bytes.saturating_add(nbytes);
        s.tensors += 1;
        if s.tensors == 1 || nbytes > s.largest.1 {
            s.largest = (name.to_string(), nbytes);
        }
        Ok(())
    }
}

/// A rule that decides the placement of no tensor of the file: a typo (`token=host` for `tokens`) or a rule
/// behind a broader one (`*=cpu` before `tokens=host`). Such a rule is almost always a mistake, and a costly
/// one: the tensor it meant goes where the other rules (or host-first) send it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnmatchedRule {
    /// Its index in the rules.
    pub rule: usize,
    /// Its pattern.
    pub pattern: String,
    /// Its target, as written (`host`, `default`, a device spec).
    pub target: String,
    /// When its pattern does match tensors, every one of them is taken by an earlier rule: the first such
    /// tensor and the rule that took it. `None`: its pattern matches no tensor name at all.
    pub shadowed: Option<(String, usize)>,
    /// For a pattern that matches nothing: a tensor whose name contains the pattern's text (patterns match
    /// whole names, so `token` does not match `tokens`; `token*` would).
    pub near: Option<String>,
}

impl std::fmt::Display for UnmatchedRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rule {} '{}={}' ", self.rule, self.pattern, self.target)?;
        match (&self.shadowed, &self.near) {
            (Some((tensor, by)), _) => write!(
                f,
                "places no tensor: every tensor it matches (first '{tensor}') is taken by rule {by} before it \
                 (the first matching rule wins); move it before rule {by}"
            ),
            (None, Some(near)) => write!(
                f,
                "matches no tensor; patterns match whole names: tensor '{near}' would need '{}*' or '*{}*'",
                self.pattern, self.pattern
            ),
            (None, None) => write!(f, "matches no tensor of the file; check it against the file's tensor names"),
        }
    }
}

/// A plan: per tensor its placement (file order), per device its totals (order of first use), and the rules
/// that place nothing.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The tensors, in file order.
    pub entries: Vec<PlanEntry>,
    /// The devices receiving at least one tensor.
    pub devices: Vec<DeviceSummary>,
    /// The rules that decide no tensor's placement, in rule order (in strict mode the plan is refused instead).
    pub unmatched: Vec<UnmatchedRule>,
}

impl Plan {
    /// Applies `rules` to every tensor of `file`. `default` targets resolve through the calling thread's
    /// default stack (strict mode: `IMPLICIT_PLACEMENT` naming the tensor and the rule); device specs must
    /// name a present device. Memory figures are taken now, once per device. Rules that place no tensor are
    /// listed in [`Plan::unmatched`]; in strict mode they are an error (`UNMATCHED_RULE`, naming each).
    pub fn make(file: &TensorFile, rules: &Rules) -> Result<Plan> {
        let mut entries = Vec::with_capacity(file.len());
        let mut devices: Vec<DeviceSummary> = Vec::new();
        let mut resolved: std::collections::HashMap<usize, Device> = std::collections::HashMap::new();
        for index in 0..file.len() {
            let cname = file.cname(index).expect("an index below the tensor count");
            let nbytes = file.nbytes_at(index).expect("an index below the tensor count");
            let name = cname.as_str();
            let found = rules.find(name);
            let placement = match found.map(|(_, r)| &r.target) {
                None | Some(RuleTarget::Host) => Placement::Host,
                Some(t) => {
                    let (ri, rule) = found.expect("matched");
                    // Each rule's target resolves once per plan (the first tensor it matches names it in errors).
                    let dev = match resolved.get(&ri) {
                        Some(&d) => d,
                        None => {
                            let what = format!("tensor '{name}' (rule {ri}: '{}={}')", rule.pattern, rule.target);
                            let d = match t {
                                RuleTarget::Default => crate::scope::resolve_default(&what)?,
                                RuleTarget::Spec(s) => {
                                    crate::scope::resolve_target(s, &what).map_err(|e| e.context(&what))?
                                }
                                RuleTarget::Host => unreachable!(),
                            };
                            resolved.insert(ri, d);
                            d
                        }
                    };
                    Placement::Device(dev)
                }
            };
            if let Placement::Device(d) = placement {
                DeviceSummary::add(&mut devices, d, name, nbytes)?;
            }
            let rule = found.map(|(i, _)| i);
            entries.push(PlanEntry { name: cname, index, nbytes, placement, rule });
        }
        for s in &mut devices {
            s.fits = s.bytes <= s.usable;
        }
        let unmatched = unmatched_rules(file, rules, &entries);
        if !unmatched.is_empty() && crate::scope::strict() {
            let by = if crate::scope::thread_strict() { "this thread" } else { "the process" };
            let list: Vec<String> = unmatched.iter().map(|u| u.to_string()).collect();
            return Err(Error::new(
                Status::UnmatchedRule,
                format!("strict mode is on for {by} and {}", list.join("; and ")),
            ));
        }
        Ok(Plan { entries, devices, unmatched })
    }

    /// Whether every device fits now.
    pub fn fits(&self) -> bool {
        self.devices.iter().all(|d| d.fits)
    }

    /// Total bytes moved to devices.
    pub fn device_bytes(&self) -> u64 {
        self.devices.iter().map(|d| d.bytes).sum()
    }

    /// The entry for a tensor name.
    pub fn find(&self, name: &str) -> Option<&PlanEntry> {
        self.entries.iter().find(|e| e.name.as_str() == name)
    }
}

/// The rules that won no tensor in `entries`, with why (see [`UnmatchedRule`]).
fn unmatched_rules(file: &TensorFile, rules: &Rules, entries: &[PlanEntry]) -> Vec<UnmatchedRule> {
    let mut used = vec![false; rules.rules().len()];
    for r in entries.iter().filter_map(|e| e.rule) {
        used[r] = true;
    }
    let mut out = Vec::new();
    for (ri, rule) in rules.rules().iter().enumerate().filter(|(i, _)| !used[*i]) {
        // Which earlier rule took the first tensor this pattern matches, if any does.
        let shadowed = entries
            .iter()
            .find(|e| glob_match(&rule.pattern, e.name.as_str()))
            .map(|e| (e.name.to_string(), e.rule.expect("a matching rule exists")));
        let near = match shadowed {
            Some(_) => None,
            None => file.names().find(|n| n.contains(rule.pattern.as_str())).map(str::to_string),
        };
        out.push(UnmatchedRule {
            rule: ri,
            pattern: rule.pattern.clone(),
            target: rule.target.to_string(),
            shadowed,
            near,
        });
    }
    out
}
