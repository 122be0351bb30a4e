//! The shard-on-read plan: for the mesh positions a process owns, the part of every tensor each position
//! holds, as a narrowed view, with the byte runs it needs from its file and what the coalesced reads cost.
//! Making a plan reads no tensor data and allocates nothing on a device.

use super::mesh::Mesh;
use super::rules::ShardRules;
use crate::device::{Device, DeviceKind};
use crate::engine::{ReadPlan, Tuning};
use crate::error::{Error, Result, Status};
use crate::file::layout::coalesce;
use crate::file::{ReadPolicy, TensorFile, View};
use crate::place::plan::DeviceSummary;
use std::collections::HashMap;
use std::sync::Arc;

/// A mesh position this process owns and the device its shards go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owned {
    /// The position (row-major over the mesh axes, see [`Mesh`]).
    pub position: u64,
    /// Where its shards are placed (`cpu`, `cuda_host`, `cuda:N`).
    pub device: Device,
}

/// One shard: the part of one tensor that one owned position holds.
#[derive(Clone, Debug)]
pub struct ShardEntry {
    /// The tensor's index in the file (file order).
    pub tensor: usize,
    /// The owned position.
    pub position: u64,
    /// Its device.
    pub device: Device,
    /// The rule that matched (index), `None` when none did (replicated).
    pub rule: Option<usize>,
    /// Per tensor dimension, `(start, len)` of the part held.
    pub ranges: Vec<(u64, u64)>,
    /// The part, as a (possibly strided) view of the file.
    pub view: View,
    /// Contiguous byte runs the part consists of in its file.
    pub runs: u64,
    /// File bytes the coalesced reads of those runs take (0 when `copy_of` is set).
    pub planned_read: u64,
    /// An earlier entry holding the same part of the same tensor (another owned position along a replicated
    /// axis): this one is copied from that entry's buffer instead of being read again.
    pub copy_of: Option<usize>,
}

impl ShardEntry {
    /// The tensor name.
    pub fn name(&self) -> &str {
        self.view.name()
    }
    /// Bytes of the shard (packed).
    pub fn nbytes(&self) -> u64 {
        self.view.nbytes()
    }
    /// The shard's shape.
    pub fn shape(&self) -> &[u64] {
        self.view.shape()
    }
}

/// What the plan takes from one file of the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSummary {
    /// The file (its path as opened, `<memory>` for a buffer).
    pub file: String,
    /// Bytes of the shards read from it (without copies of replicated parts).
    pub needed: u64,
    /// Bytes the coalesced reads take from it.
    pub planned_read: u64,
    /// Reads issued on it (merged runs; with the default [`Tuning`], which cuts runs longer than the
    /// policy's `max_read`).
    pub reads: u64,
}

/// A shard-on-read plan.
#[derive(Clone, Debug)]
pub struct ShardPlan {
    /// The file (or set) it was made for.
    pub file: TensorFile,
    /// The mesh of its rules.
    pub mesh: Arc<Mesh>,
    /// The shards: tensors in file order, for each the owned positions in the order given.
    pub entries: Vec<ShardEntry>,
    /// Per device, the bytes it receives and whether they fit now (order of first use).
    pub devices: Vec<DeviceSummary>,
    /// Per file, the bytes needed and the bytes the reads take (order of first use).
    pub files: Vec<FileSummary>,
    /// How runs are merged into reads.
    pub policy: ReadPolicy,
}

/// The runs of `view`, the file bytes its coalesced reads take under `policy` (the packed bytes for a memory
/// buffer, which is copied piece by piece), and how many reads (or copies) that is.
pub fn read_cost(view: &View, policy: &ReadPolicy) -> (u64, u64, u64) {
    let Some(runs) = view.runs() else { return (0, 0, 0) };
    if view.path().is_none() || runs.outer.is_empty() {
        return (runs.count(), runs.nbytes(), runs.count());
    }
    let (mut bytes, mut reads) = (0u64, 0u64);
    coalesce(runs.pieces(0, runs.nbytes()), policy, |lo, hi, _| {
        bytes += hi - lo;
        reads += 1;
        Ok(())
    })
    .expect("counting cannot fail");
    (runs.count(), bytes, reads)
}

/// The entries (indices into `entries`, all parts of one tensor) read together through
/// [`crate::engine::read_scatter`]: those read from a file (not copies of another part) into host memory (`cpu`,
/// `cuda_host`). A part on a CUDA device goes through the staging ring alone; a memory buffer is copied.
pub(crate) fn scatter_group(entries: &[ShardEntry]) -> Vec<usize> {
    (0..entries.len())
        .filter(|&k| {
            let e = &entries[k];
            e.copy_of.is_none()
                && e.device.kind != DeviceKind::CUDA
                && e.nbytes() > 0
                && e.view.file_and_offset().is_some()
        })
        .collect()
}

/// The read plan of the host parts `group` of one tensor (indices into `entries`, see [`scatter_group`]): their
/// runs merged across neighbouring shards under `policy`, one file group whose destinations are the parts in
/// `group` order. Shard-on-read plans with it ([`ShardPlan::make`]'s costs) and reads with it
/// ([`super::run`]).
pub(crate) fn group_plan(
    entries: &[ShardEntry],
    group: &[usize],
    policy: &ReadPolicy,
    tuning: &Tuning,
) -> Result<ReadPlan> {
    let views: Vec<View> = group.iter().map(|&k| entries[k].view.clone()).collect();
    let rp = ReadPlan::of_views(views, *policy, *tuning)?;
    debug_assert!(rp.group_count() == 1 && rp.group_members(0).iter().copied().eq(0..group.len()));
    Ok(rp)
}

impl ShardPlan {
    /// Plans the shards of every tensor of `file` (but those a skip rule matches) for the `owned` positions of
    /// `rules`' mesh.
    ///
    /// Errors: `OUT_OF_RANGE` for a position not on the mesh; `INVALID_ARGUMENT` for a position owned twice,
    /// an invalid policy, a rule whose spec has more entries than a tensor it matches has dimensions, or a
    /// split dimension that does not divide evenly (the message names the tensor, the dimension, its size
    /// and the axes); `MISALIGNED_SLICE` when a shard of a sub-byte tensor starts inside a byte;
    /// `NO_SUCH_DEVICE` / `UNAVAILABLE` for an absent device.
    pub fn make(file: &TensorFile, rules: &ShardRules, owned: &[Owned], policy: ReadPolicy) -> Result<ShardPlan> {
        policy.validate()?;
        let mesh = Arc::clone(rules.mesh());
        let mut coords = Vec::with_capacity(owned.len());
        for (i, o) in owned.iter().enumerate() {
            if owned[..i].iter().any(|p| p.position == o.position) {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("mesh position {} is owned twice", o.position),
                ));
            }
            coords.push(mesh.coords(o.position)?);
            o.device.validate()?;
        }
        let mut entries: Vec<ShardEntry> = Vec::with_capacity(file.len() * owned.len());
        let mut devices: Vec<DeviceSummary> = Vec::new();
        let mut files: Vec<FileSummary> = Vec::new();
        for tensor in 0..file.len() {
            let whole = file.view_at(tensor)?;
            let found = rules.find(whole.name());
            if found.is_some_and(|(_, r)| r.spec.is_none()) {
                continue; // a skip rule: not in this plan
            }
            let what = format!("{}: tensor '{}'", whole.file_display(), whole.name());
            let mut first: HashMap<Vec<(u64, u64)>, usize> = HashMap::new();
            let from = entries.len();
            let mut own_reads: Vec<u64> = Vec::new(); // per entry, its reads if it is read alone
            for (o, c) in owned.iter().zip(&coords) {
                let ranges = match found {
                    Some((ri, r)) => r
                        .spec
                        .as_ref()
                        .expect("skip rules are left out above")
                        .ranges(whole.shape(), &mesh, c, &what)
                        .map_err(|e| e.context(format!("rule {ri} '{}'", r.pattern)))?,
                    None => whole.shape().iter().map(|&d| (0, d)).collect(),
                };
                let mut view = whole.clone();
                for (d, &(start, len)) in ranges.iter().enumerate() {
                    if (start, len) != (0, whole.shape()[d]) {
                        view = view.narrow(d, start, len)?;
                    }
                }
                let copy_of = first.get(&ranges).copied();
                let (runs, planned_read, reads) = match copy_of {
                    Some(_) => (view.runs().map_or(0, |r| r.count()), 0, 0),
                    None => read_cost(&view, &policy),
                };
                own_reads.push(reads);
                if copy_of.is_none() {
                    first.insert(ranges.clone(), entries.len());
                    let f = match files.iter().position(|f| f.file == view.file_display()) {
                        Some(i) => &mut files[i],
                        None => {
                            files.push(FileSummary {
                                file: view.file_display().to_string(),
                                needed: 0,
                                planned_read: 0,
                                reads: 0,
                            });
                            files.last_mut().expect("just pushed")
                        }
                    };
                    f.needed += view.nbytes();
                }
                DeviceSummary::add(&mut devices, o.device, view.name(), view.nbytes())?;
                entries.push(ShardEntry {
                    tensor,
                    position: o.position,
                    device: o.device,
                    rule: found.map(|(i, _)| i),
                    ranges,
                    view,
                    runs,
                    planned_read,
                    copy_of,
                });
            }
            // The host parts of this tensor read from its file are read together: their runs merged across
            // neighbouring shards (see `scatter_group`); what each costs is its share of those reads.
            let group = scatter_group(&entries[from..]);
            let mut reads: u64 =
                own_reads.iter().enumerate().filter(|(k, _)| !group.contains(k)).map(|(_, &r)| r).sum();
            if !group.is_empty() {
                let rp = group_plan(&entries[from..], &group, &policy, &Tuning::default())?;
                for (&k, &bytes) in group.iter().zip(rp.group_per_slice(0)) {
                    entries[from + k].planned_read = bytes;
                }
                reads += rp.request_count();
            }
            if let Some(f) = files.iter_mut().find(|f| f.file == whole.file_display()) {
                f.planned_read += entries[from..].iter().map(|e| e.planned_read).sum::<u64>();
                f.reads += reads;
            }
        }
        for d in &mut devices {
            d.fits = d.bytes <= d.usable;
        }
        Ok(ShardPlan { file: file.clone(), mesh, entries, devices, files, policy })
    }

    /// Bytes of every shard (copies of replicated parts included).
    pub fn shard_bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.nbytes()).sum()
    }

    /// File bytes the plan's reads take, over all files.
    pub fn planned_read(&self) -> u64 {
        self.files.iter().map(|f| f.planned_read).sum()
    }

    /// Whether every device fits now.
    pub fn fits(&self) -> bool {
        self.devices.iter().all(|d| d.fits)
    }
}
