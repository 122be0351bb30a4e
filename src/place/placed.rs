//! Loading a whole file by a plan: every device fit-checked up front, then the puts, one progress callback.

use super::buffer::Buffer;
use super::plan::{DeviceSummary, Placement, Plan};
use super::put::{fill, PutOptions};
use crate::device::fit;
use crate::error::{human_bytes, Error, FitFailure, Result, Status};
use crate::file::{TensorFile, TensorView};
use std::sync::{Arc, Mutex};

/// One loaded tensor.
#[derive(Clone)]
pub enum Placed {
    /// A zero-copy host view of the mapping.
    View(TensorView),
    /// A buffer on a device (shared: the C API hands out new references to it).
    Buffer(Arc<Mutex<Buffer>>),
}

/// The result of a load: every tensor of the file by name (names and lookups come from the file itself).
pub struct Loaded {
    file: TensorFile,
    entries: Vec<Placed>,
}

impl Loaded {
    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True for a file without tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&Placed> {
        self.file.find(name).and_then(|i| self.entries.get(i))
    }
    /// The `i`-th tensor (file order) with its name.
    pub fn at(&self, i: usize) -> Option<(&str, &Placed)> {
        Some((self.file.name(i)?, self.entries.get(i)?))
    }
}

/// Checks every device of `plan` against its memory free now; the first that does not fit gives
/// `OUT_OF_MEMORY` with the numbers and the structured fit failure.
pub fn check_plan(plan: &Plan) -> Result<()> {
    check_devices(&plan.devices, "load")
}

/// [`check_plan`] for any list of device totals; `what` starts the message (`load`, `shard load`).
pub fn check_devices(devices: &[DeviceSummary], what: &str) -> Result<()> {
    for d in devices {
        let (usable, total) = fit::usable(d.device)?;
        if d.bytes > usable {
            let msg = format!(
                "{what}: {} tensor(s), {} in all (largest '{}', {}), do not fit on {}: {} free of {}{}",
                d.tensors,
                human_bytes(d.bytes),
                d.largest.0,
                human_bytes(d.largest.1),
                d.device,
                human_bytes(usable),
                human_bytes(total),
                fit::margin_note(d.device, total)
            );
            return Err(Error::out_of_memory(
                msg,
                FitFailure { needed: d.bytes, free: usable, total, device: d.device.to_string() },
            ));
        }
    }
    Ok(())
}

/// Options of a whole-file load.
#[derive(Default)]
pub struct LoadOptions<'a> {
    /// Tensors placed on `cpu` become copy-on-write mappings of their pages instead of copies (see
    /// [`super::put::put`]); tensors of a memory buffer, and other devices, are copied as usual.
    pub copy_on_write: bool,
    /// `progress(done, total)`: see [`load`].
    pub progress: Option<&'a mut dyn FnMut(u64, u64) -> bool>,
}

/// Applies `plan` (made from `file`): fit-checks every device before the first byte moves, then puts each
/// device tensor; host tensors become views. `progress(done, total)` covers the bytes moved to devices,
/// is called at a bounded rate, at least once, and last with `done == total`; returning true cancels
/// (`CANCELLED`, everything already placed is freed). Any failure frees everything the load had taken.
pub fn load(file: &TensorFile, plan: &Plan, progress: Option<&mut dyn FnMut(u64, u64) -> bool>) -> Result<Loaded> {
    load_with(file, plan, LoadOptions { copy_on_write: false, progress })
}

/// [`load`] with options (copy-on-write cpu tensors).
pub fn load_with(file: &TensorFile, plan: &Plan, opts: LoadOptions<'_>) -> Result<Loaded> {
    let LoadOptions { copy_on_write, mut progress } = opts;
    if plan.entries.len() != file.len() || plan.entries.iter().any(|e| file.name(e.index) != Some(e.name.as_str())) {
        return Err(Error::new(Status::InvalidArgument, format!("the plan was not made for {}", file.display_name())));
    }
    check_plan(plan)?;
    let total = plan.device_bytes();
    let cancelled = || Error::new(Status::Cancelled, "load cancelled by the progress callback; nothing kept");
    let mut entries = Vec::with_capacity(plan.entries.len());
    let mut base = 0u64;
    let mut last_call = std::time::Instant::now();
    for e in &plan.entries {
        let view = file.view_at(e.index)?;
        let placed = match e.placement {
            Placement::Host => Placed::View(view),
            Placement::Device(d) => {
                let has_progress = progress.is_some();
                let mut sink = |done: u64, _t: u64| match progress.as_mut() {
                    Some(p) => p(base + done, total),
                    None => false,
                };
                let opts =
                    PutOptions { progress: if has_progress { Some(&mut sink) } else { None }, ..PutOptions::default() };
                // The whole load was fit-checked up front; a per-tensor check would read /proc/meminfo (or ask
                // the driver) once per tensor, which dominated many-tensor loads.
                let cow = copy_on_write && d.kind == crate::device::DeviceKind::CPU && view.file_and_offset().is_some();
                let made = if cow {
                    Buffer::map_private(&view, true)
                } else {
                    Buffer::alloc(view.name(), view.dtype(), view.shape(), view.nbytes(), d)
                        .and_then(|mut b| fill(&view, &mut b, opts).map(|_| b))
                };
                let buf = made.map_err(|err| {
                    if err.status() == Status::Cancelled {
                        cancelled()
                    } else {
                        err // already names the file and the tensor
                    }
                })?;
                base += e.nbytes;
                // Between tensors: at most every 20 ms (many small tensors), and always at the end.
                let due = base == total || last_call.elapsed() >= std::time::Duration::from_millis(20);
                if let (true, Some(p)) = (due, progress.as_mut()) {
                    last_call = std::time::Instant::now();
                    if p(base, total) {
                        return Err(cancelled());
                    }
                }
                Placed::Buffer(Arc::new(Mutex::new(buf)))
            }
        };
        entries.push(placed);
    }
    if total == 0 {
        if let Some(p) = progress.as_mut() {
            if p(0, 0) {
                return Err(cancelled());
            }
        }
    }
    Ok(Loaded { file: file.clone(), entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;

    /// Load and shard load name the safety margin behind their "free" figure, as put does.
    #[test]
    fn out_of_memory_names_the_margin() {
        let (_, total) = fit::usable(Device::CPU).unwrap();
        for what in ["load", "shard load"] {
            let d = DeviceSummary {
                device: Device::CPU,
                bytes: 1 << 40,
                tensors: 1,
                usable: 0,
                total,
                fits: false,
                largest: ("t".to_string(), 1 << 40),
            };
            let e = check_devices(&[d], what).unwrap_err();
            assert_eq!(e.status(), Status::OutOfMemory);
            let m = e.message();
            let start =
                format!("{what}: 1 tensor(s), 1024.00 GiB in all (largest 't', 1024.00 GiB), do not fit on cpu:0: ");
            assert!(m.starts_with(&start), "{m}");
            let end = format!(
                " free of {} (available host memory less a {} safety margin)",
                human_bytes(total),
                human_bytes(fit::host_margin(total))
            );
            assert!(m.ends_with(&end), "{m}");
        }
        assert_eq!(fit::margin_note(Device::cuda(0), 1 << 30), " (free device memory less a 32.00 MiB safety margin)");
    }
}
