//! A placement plan: the dry run of a set of rules over a file. It allocates nothing and moves no byte.

use super::rules::{RuleTarget, Rules};
use crate::device::fit;
use crate::device::Device;
use crate::error::Result;
use crate::file::TensorFile;

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
    /// The tensor name.
    pub name: String,
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

/// A plan: per tensor its placement (file order), per device its totals (order of first use).
#[derive(Clone, Debug)]
pub struct Plan {
    /// The tensors, in file order.
    pub entries: Vec<PlanEntry>,
    /// The devices receiving at least one tensor.
    pub devices: Vec<DeviceSummary>,
}

impl Plan {
    /// Applies `rules` to every tensor of `file`. `default` targets resolve through the calling thread's
    /// default stack (strict mode: `IMPLICIT_PLACEMENT` naming the tensor and the rule); device specs must
    /// name a present device. Memory figures are taken now, once per device.
    pub fn make(file: &TensorFile, rules: &Rules) -> Result<Plan> {
        let mut entries = Vec::with_capacity(file.len());
        let mut devices: Vec<DeviceSummary> = Vec::new();
        let mut resolved: std::collections::HashMap<usize, Device> = std::collections::HashMap::new();
        for (index, name) in file.names().enumerate() {
            let nbytes = file.view_at(index)?.nbytes();
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
                let pos = match devices.iter().position(|s| s.device == d) {
                    Some(p) => p,
                    None => {
                        let (usable, total) = fit::usable(d)?;
                        devices.push(DeviceSummary {
                            device: d,
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
            }
            entries.push(PlanEntry { name: name.to_string(), index, nbytes, placement, rule: found.map(|(i, _)| i) });
        }
        for s in &mut devices {
            s.fits = s.bytes <= s.usable;
        }
        Ok(Plan { entries, devices })
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
        self.entries.iter().find(|e| e.name == name)
    }
}
