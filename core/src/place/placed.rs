//! Loading a whole file by a plan: every device fit-checked up front, then the puts, one progress callback.

use super::arena::{cancelled, load_cuda, load_host, Reporter};
use super::buffer::{Buffer, Memory};
use super::host::HostAlloc;
use super::plan::{DeviceSummary, Placement, Plan};
use super::put::{fill, PutOptions};
use crate::device::cuda::DeviceMemory;
use crate::device::fit;
use crate::device::DeviceKind;
use crate::error::{human_bytes, Error, FitFailure, Result, Status};
use crate::file::{TensorFile, TensorRef, View};
use once_cell::race::OnceBox;
use std::sync::{Arc, Mutex};

/// One loaded tensor.
#[derive(Clone)]
pub enum Placed {
    /// A zero-copy host view of the mapping.
    View(View),
    /// A buffer on a device (shared: the C API hands out new references to it).
    Buffer(Arc<Mutex<Buffer>>),
}

/// The result of a load: every tensor of the file by name (names and lookups come from the file itself).
///
/// The tensors of a device job are parts of that job's one allocation (its arena). Each becomes a
/// [`Buffer`] the first time it is asked for ([`Loaded::get`], [`Loaded::at`]); until then the load holds
/// the arena, and [`Loaded::describe`] reports where the tensor is without making a buffer (a binding
/// describing a 20,000-tensor load in bulk makes no 20,000 buffers it may never need).
pub struct Loaded {
    file: TensorFile,
    entries: Vec<Entry>,
    arenas: Vec<Arena>,
    /// File requests the device jobs issued.
    requests: u64,
}

/// One tensor of a load: placed, or placed when first asked for (a host view of the file, or a part of a
/// job's arena made into a buffer).
struct Entry {
    /// Boxed: an entry stays small however large a view is, and most are made only when asked for. A
    /// `OnceBox` never blocks: threads placing the same tensor at once each make one and all get the first
    /// stored (the others are dropped; making one has no side effect), so a process forked while a thread was
    /// placing a tensor places it again instead of waiting for a thread it does not have.
    placed: OnceBox<Placed>,
    /// For a tensor of a device job: (its job's arena in `Loaded::arenas`, its offset in that arena); `None`
    /// for a host view.
    part: Option<(u32, usize)>,
}

impl Entry {
    fn placed(p: Placed) -> Entry {
        Entry { placed: OnceBox::with_value(Box::new(p)), part: None }
    }
    /// Placed when first asked for: a host view, or (once `part` is set) a part of a job's arena.
    fn later() -> Entry {
        Entry { placed: OnceBox::new(), part: None }
    }
}

/// A device job's one allocation; the buffers made from it hold it too, and it is freed when the load and
/// the last of them are gone.
enum Arena {
    Host(Arc<HostAlloc>),
    Cuda(Arc<DeviceMemory>),
}

impl Arena {
    fn part(&self, offset: usize, len: u64) -> Memory {
        let len = len as usize; // the job laid it out in this address space
        let made = match self {
            Arena::Host(a) => HostAlloc::sub(a, offset, len).map(Memory::Host),
            Arena::Cuda(a) => DeviceMemory::sub(a, offset, len).map(Memory::Cuda),
        };
        made.expect("a job's tensor lies inside its arena")
    }
}

/// Where a loaded tensor is, as [`Loaded::describe`] reports it.
pub struct Described<'a> {
    /// Whether it is a buffer (else a view of the file's mapping).
    pub is_buffer: bool,
    /// The element type.
    pub dtype: crate::dtype::DType,
    /// The device holding the bytes (cpu for a view).
    pub device: crate::device::Device,
    /// The shape, owned by the load's file (valid while the load lives; a buffer's shape is the same one).
    pub shape: &'a [u64],
    /// Size in bytes.
    pub nbytes: u64,
    /// The address a buffer made from it reports ([`Buffer::address`]); a view's bytes in the mapping.
    pub address: u64,
}

impl Loaded {
    /// The file requests the load's `cpu` and `cuda` jobs issued: the requests of their read plans (one
    /// [`crate::engine::ReadPlan`] rule for loads and shard-on-read: neighbouring tensors merged while the
    /// over-read cap holds, at most one group's bytes per request: 1 MiB for a job under 16 MiB per reader
    /// thread, up to 8 MiB; one staging slab for CUDA). Tensors placed one by one (copy-on-write, `cuda_host`)
    /// and host views are not counted.
    pub fn read_requests(&self) -> u64 {
        self.requests
    }
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
        self.file.find(name).and_then(|i| self.placed(i))
    }
    /// The `i`-th tensor (file order) with its name.
    pub fn at(&self, i: usize) -> Option<(&str, &Placed)> {
        Some((self.file.name(i)?, self.placed(i)?))
    }
    /// The `i`-th tensor's name as a NUL-terminated C string, valid while this load lives (the C API's
    /// `hostfirst_load_entries`).
    pub fn name_ptr(&self, i: usize) -> Option<*const std::ffi::c_char> {
        self.file.name_ptr(i)
    }

    /// The `i`-th tensor, made into a buffer now if it is a part of an arena nobody has asked for yet.
    fn placed(&self, i: usize) -> Option<&Placed> {
        let e = self.entries.get(i)?;
        Some(e.placed.get_or_init(|| {
            #[cfg(test)]
            tests::pause_point();
            let view = self.file.view_at(i).expect("the load's file has this tensor");
            Box::new(match e.part {
                None => Placed::View(view),
                Some((k, offset)) => {
                    let mem = self.arenas[k as usize].part(offset, view.nbytes());
                    Placed::Buffer(Arc::new(Mutex::new(Buffer::from_view_memory(&view, mem))))
                }
            })
        }))
    }

    /// Describes the `i`-th tensor without making a buffer or view of it.
    pub fn describe(&self, i: usize) -> Option<Described<'_>> {
        let e = self.entries.get(i)?;
        let (dtype, shape, nbytes) = (self.file.dtype_at(i)?, self.file.shape_at(i)?, self.file.nbytes_at(i)?);
        let (is_buffer, device, address) = match e.part {
            None => match e.placed.get() {
                None | Some(Placed::View(_)) => {
                    (false, crate::device::Device::CPU, self.file.tensor_ref(i)?.mapped_address())
                }
                Some(Placed::Buffer(b)) => {
                    let b = b.lock().unwrap_or_else(|p| p.into_inner());
                    (true, b.device(), b.address())
                }
            },
            Some((k, offset)) => {
                let mem = self.arenas[k as usize].part(offset, nbytes);
                (true, mem.device(), mem.address())
            }
        };
        Some(Described { is_buffer, dtype, device, shape, nbytes, address })
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

/// The device totals a load fit-checks: the plan's, and under `bypass` the direct-read staging of its reader
/// threads (`staging` bytes of host memory, held while device tensors are read) added to `cpu` (an entry of
/// its own when the plan puts nothing on `cpu` but moves tensors to another device). Host views read nothing.
pub fn with_staging(devices: &[DeviceSummary], staging: u64) -> Vec<DeviceSummary> {
    let mut out = devices.to_vec();
    if staging == 0 || !out.iter().any(|d| d.bytes > 0) {
        return out;
    }
    match out.iter_mut().find(|d| d.device.kind == DeviceKind::CPU) {
        Some(cpu) => cpu.bytes += staging,
        None => out.push(DeviceSummary {
            device: crate::device::Device::CPU,
            bytes: staging,
            tensors: 0,
            usable: 0,
            total: 0,
            fits: false,
            largest: ("direct-I/O staging (page_cache bypass)".to_string(), staging),
        }),
    }
    out
}

/// Options of a whole-file load.
#[derive(Default)]
pub struct LoadOptions<'a> {
    /// Tensors placed on `cpu` become copy-on-write mappings of their pages instead of copies (see
    /// [`super::put::put`]); tensors of a memory buffer, and other devices, are copied as usual.
    pub copy_on_write: bool,
    /// `progress(done, total)`: see [`load`].
    pub progress: Option<&'a mut dyn FnMut(u64, u64) -> bool>,
    /// What the load leaves in the page cache ([`crate::cache`]): under `drop` and `bypass`, the pages of the
    /// file it brought in are given back when it ends; `bypass` reads the tensors copied to `cpu` and `cuda`
    /// arenas with direct I/O where the file system allows it.
    pub page_cache: crate::cache::PageCache,
}

/// Applies `plan` (made from `file`): fit-checks every device before the first byte moves (once per
/// device), then places each device's tensors as one job ([`load_with`]); host tensors become views.
/// `progress(done, total)` covers the bytes moved to devices, is called at a bounded rate (and after each
/// device's job), monotonic, at least once, and last with `done == total`; returning true cancels
/// (`CANCELLED`, everything already placed is freed). Any failure frees everything the load had taken.
pub fn load(file: &TensorFile, plan: &Plan, progress: Option<&mut dyn FnMut(u64, u64) -> bool>) -> Result<Loaded> {
    load_with(file, plan, LoadOptions { copy_on_write: false, progress, page_cache: Default::default() })
}

/// [`load`] with options (copy-on-write cpu tensors).
///
/// The plan runs as one job per device (see [`super::arena`]): one fit check per device (the plan's, above),
/// then `cpu` tensors become parts of one host allocation and each `cuda:N`'s tensors parts of one device
/// allocation, read with neighbouring tensors coalesced; CUDA copies go through the staging ring on one
/// stream. Copy-on-write `cpu` tensors and `cuda_host` tensors are placed one by one (each its own mapping
/// or page-locked allocation).
pub fn load_with(file: &TensorFile, plan: &Plan, opts: LoadOptions<'_>) -> Result<Loaded> {
    crate::device::cuda::capture::safe_point();
    let LoadOptions { copy_on_write, progress, page_cache } = opts;
    if plan.entries.len() != file.len() || plan.entries.iter().any(|e| file.name(e.index) != Some(e.name.as_str())) {
        return Err(Error::new(Status::InvalidArgument, format!("the plan was not made for {}", file.display_name())));
    }
    match page_cache {
        crate::cache::PageCache::Bypass => {
            // The staging ring of the direct readers (held while the tensors are read) counts as host memory.
            let staging = crate::cache::staging_bytes(crate::cache::direct_threads());
            check_devices(&with_staging(&plan.devices, staging), "load").map_err(|e| {
                e.context(format!("page_cache bypass: counting {} of direct-I/O staging on cpu", human_bytes(staging)))
            })?
        }
        _ => check_plan(plan)?,
    }
    let total = plan.device_bytes();
    // Sampled before the first read, restored when the load ends, failed or not (the scope's Drop).
    let _cache = crate::cache::CacheScope::begin(
        page_cache,
        plan.entries.iter().filter_map(|e| file.tensor_ref(e.index)).filter_map(|t| t.file_and_offset().map(|f| f.0)),
    );
    let direct = crate::cache::DirectFiles::for_policy(page_cache);
    let mut rep = Reporter::new(progress, total);
    let mut entries: Vec<Entry> = Vec::with_capacity(plan.entries.len());
    // Jobs: per device, the entry indices and tensors it receives.
    let mut jobs: Vec<(crate::device::Device, Vec<usize>, Vec<TensorRef<'_>>)> = Vec::new();
    for (i, e) in plan.entries.iter().enumerate() {
        let t = file.tensor_ref(e.index).ok_or_else(|| {
            Error::new(Status::InvalidArgument, format!("the plan was not made for {}", file.display_name()))
        })?;
        let d = match e.placement {
            // A file read with owned reads hands out no mapping: its host tensors are cpu copies.
            Placement::Host if !t.maps() => crate::device::Device::CPU,
            Placement::Host => {
                entries.push(Entry::later()); // a view, made when first asked for
                continue;
            }
            Placement::Device(d) => d,
        };
        let cow = copy_on_write && d.kind == DeviceKind::CPU && t.file_and_offset().is_some() && t.maps();
        if !cow && matches!(d.kind, DeviceKind::CPU | DeviceKind::CUDA) {
            match jobs.iter_mut().find(|j| j.0 == d) {
                Some(j) => {
                    j.1.push(i);
                    j.2.push(t);
                }
                None => {
                    // Sized for every tensor the plan puts on the device (no regrowth of 20,000-entry lists).
                    let n = plan.devices.iter().find(|s| s.device == d).map_or(1, |s| s.tensors.max(1));
                    let (mut idx, mut ts) = (Vec::with_capacity(n), Vec::with_capacity(n));
                    idx.push(i);
                    ts.push(t);
                    jobs.push((d, idx, ts));
                }
            }
            entries.push(Entry::later()); // its part comes with its job
            continue;
        }
        // One by one: copy-on-write mappings and cuda_host buffers (the load was fit-checked up front; a
        // per-tensor check would read /proc/meminfo or ask the driver once per tensor).
        let view = t.view();
        let base = rep.base;
        let made = if cow {
            Buffer::map_private(&view, true)
        } else {
            let active = rep.active();
            let mut sink = |done: u64, _t: u64| match rep.sink() {
                Some(p) => p(base + done, total),
                None => false,
            };
            let opts = PutOptions { progress: if active { Some(&mut sink) } else { None }, ..PutOptions::default() };
            Buffer::alloc_for(&view, d).and_then(|mut b| fill(&view, &mut b, opts).map(|_| b))
        };
        let buf = made.map_err(|err| if err.status() == Status::Cancelled { cancelled() } else { err })?;
        rep.base += e.nbytes;
        if rep.active() && (rep.base == total || rep.due()) {
            rep.call(rep.base)?;
        }
        entries.push(Entry::placed(Placed::Buffer(Arc::new(Mutex::new(buf)))));
    }
    let mut arenas = Vec::with_capacity(jobs.len());
    for (d, idx, tensors) in jobs {
        let bytes: u64 = tensors.iter().map(|v| v.nbytes()).sum();
        let (arena, offsets) = match d.kind {
            DeviceKind::CPU => load_host(&tensors, &mut rep, direct.as_ref()).map(|(a, o)| (Arena::Host(a), o))?,
            _ => load_cuda(d.ordinal, &tensors, &mut rep, direct.as_ref()).map(|(a, o)| (Arena::Cuda(a), o))?,
        };
        rep.base += bytes;
        // After each device's job (not rate-limited: one call per device); the last comes below.
        if rep.active() && rep.base < total {
            rep.call(rep.base)?;
        }
        // Each tensor becomes a buffer when first asked for (Loaded::placed); the arena is the load's now.
        let k = arenas.len() as u32;
        arenas.push(arena);
        for (i, offset) in idx.into_iter().zip(offsets) {
            entries[i].part = Some((k, offset));
        }
    }
    // The final call: done == total (also for a load that moves nothing).
    if rep.active() {
        rep.call(total)?;
    }
    Ok(Loaded { file: file.clone(), entries, arenas, requests: rep.requests })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Device;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Under bypass the fit check counts the direct-read staging: added to `cpu`, or an entry of its own
    /// when only another device receives tensors; nothing for a plan that moves nothing.
    #[test]
    fn the_fit_check_counts_bypass_staging() {
        let summary = |device: Device, bytes: u64| DeviceSummary {
            device,
            bytes,
            tensors: 1,
            usable: 0,
            total: 0,
            fits: true,
            largest: ("t".to_string(), bytes),
        };
        let staging = crate::cache::staging_bytes(2);
        assert_eq!(staging, 2 * ((8 << 20) + 4096));
        let cpu = with_staging(&[summary(Device::CPU, 100)], staging);
        assert_eq!((cpu.len(), cpu[0].bytes), (1, 100 + staging));
        let cuda = with_staging(&[summary(Device::cuda(0), 100)], staging);
        assert_eq!(cuda.len(), 2);
        assert_eq!((cuda[0].bytes, cuda[1].device, cuda[1].bytes), (100, Device::CPU, staging));
        assert!(cuda[1].largest.0.contains("staging"), "{:?}", cuda[1].largest);
        assert_eq!(with_staging(&[summary(Device::CPU, 0)], staging)[0].bytes, 0, "nothing read, no staging");
        assert!(with_staging(&[], staging).is_empty());
    }

    /// A scratch safetensors file of U8 tensors of `sizes` bytes (contents irrelevant), dropped from the page
    /// cache, in a directory of its own (the caller removes it: the path's parent); its path.
    fn scratch_file(name: &str, sizes: &[usize]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("hostfirst-placed-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (mut header, mut at) = (String::from("{"), 0);
        for (k, n) in sizes.iter().enumerate() {
            let sep = if k > 0 { "," } else { "" };
            header.push_str(&format!(
                "{sep}\"t{k}\":{{\"dtype\":\"U8\",\"shape\":[{n}],\"data_offsets\":[{at},{}]}}",
                at + n
            ));
            at += n;
        }
        header.push('}');
        while header.len() % 8 != 0 {
            header.push(' ');
        }
        let p = dir.join(name);
        let mut img = (header.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(header.as_bytes());
        img.extend((0..at).map(|j| (j % 253) as u8));
        std::fs::write(&p, img).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        f.sync_all().unwrap();
        #[cfg(target_os = "linux")]
        // SAFETY: advice on an open descriptor.
        unsafe {
            libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, libc::POSIX_FADV_DONTNEED)
        };
        p
    }

    fn load_cpu(f: &TensorFile, page_cache: crate::cache::PageCache) -> Result<Loaded> {
        let plan = Plan::make(f, &crate::place::Rules::parse(["*=cpu"]).unwrap()).unwrap();
        load_with(f, &plan, LoadOptions { copy_on_write: false, progress: None, page_cache })
    }

    /// A load whose tensors fit in the host memory free now, but not together with the staging ring of the
    /// direct readers, runs under keep and drop and is refused under bypass before anything is read
    /// (`OUT_OF_MEMORY` saying the staging was counted); with room for the ring too it runs.
    #[test]
    fn a_bypass_load_that_fits_only_without_its_staging_is_refused() {
        use crate::cache::PageCache;
        let p = scratch_file("fit.safetensors", &[3 << 20, 1 << 20]);
        let f = TensorFile::open(&p).unwrap();
        let bytes = 4u64 << 20; // both tensors, each 64-byte aligned in the arena: no padding between them
        let total = 16u64 << 30;
        let ring = crate::cache::staging_bytes(crate::cache::direct_threads());
        let margin = fit::host_margin(total);
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                fit::fake_host_memory_here(None);
            }
        }
        let _reset = Reset;
        fit::fake_host_memory_here(Some((margin + bytes + ring / 2, total)));
        for policy in [PageCache::Keep, PageCache::Drop] {
            load_cpu(&f, policy).unwrap_or_else(|e| panic!("{policy:?}: {e}"));
        }
        let e = load_cpu(&f, PageCache::Bypass).map(|_| ()).unwrap_err();
        assert_eq!(e.status(), Status::OutOfMemory, "{e}");
        assert!(e.message().contains("direct-I/O staging"), "{e}");
        assert!(e.message().contains(&human_bytes(bytes + ring)), "the need counted with the ring: {e}");
        fit::fake_host_memory_here(Some((margin + bytes + ring, total)));
        load_cpu(&f, PageCache::Bypass).unwrap();
        drop(f);
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    /// The peak RSS growth of a whole-file load to cpu is at most its destination (the arena) plus, under
    /// bypass, the direct readers' staging ring, with a margin of 8 MiB for everything else (thread stacks,
    /// the plan, the residency map of drop), and at least 90 % of the destination (it is faulted in, so the
    /// measure sees it). Measured in a child process running only this test (the peak of this process
    /// counts every test's memory): /proc/self/clear_refs resets the peak before the load, VmHWM after it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_loads_peak_rss_growth_is_its_destination_and_staging_ring_at_most() {
        use crate::cache::PageCache;
        const CHILD: &str = "HOSTFIRST_RSS_CHILD";
        let name = "a_loads_peak_rss_growth_is_its_destination_and_staging_ring_at_most";
        if let Ok(policy) = std::env::var(CHILD) {
            let policy = PageCache::parse(&policy, CHILD).unwrap();
            let sizes = [(40 << 20) + 5, 3, (56 << 20) + 4093];
            let p = scratch_file(&format!("rss-{}.safetensors", policy.name()), &sizes);
            let f = TensorFile::open(&p).unwrap();
            let dest: usize = sizes.iter().map(|n| n.next_multiple_of(64)).sum();
            let ring = if policy == PageCache::Bypass {
                crate::cache::staging_bytes(crate::cache::direct_threads()) as usize
            } else {
                0
            };
            let kib = |field: &str| -> usize {
                let s = std::fs::read_to_string("/proc/self/status").unwrap();
                let line = s.lines().find(|l| l.starts_with(field)).unwrap();
                line[field.len()..].trim().trim_end_matches("kB").trim().parse::<usize>().unwrap() * 1024
            };
            std::fs::write("/proc/self/clear_refs", "5").unwrap(); // the peak is the RSS now
            let before = kib("VmRSS:");
            let loaded = load_cpu(&f, policy).unwrap();
            let growth = kib("VmHWM:").saturating_sub(before);
            drop(loaded);
            drop(f);
            std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
            let bound = dest + ring + (8 << 20);
            assert!(
                growth <= bound,
                "{policy:?}: peak RSS grew {growth} bytes > destination {dest} + ring {ring} + 8 MiB"
            );
            assert!(
                growth >= dest / 10 * 9,
                "{policy:?}: peak RSS grew {growth} bytes, under 90 % of the destination {dest}"
            );
            std::fs::write(std::env::var("HOSTFIRST_RSS_DONE").unwrap(), "ok").unwrap();
            return;
        }
        let test = format!("{}::{name}", module_path!().split_once("::").map_or("", |m| m.1));
        for policy in PageCache::all() {
            let done = std::env::temp_dir().join(format!("hostfirst-rss-{}-{}", std::process::id(), policy.name()));
            let _ = std::fs::remove_file(&done);
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", &test, "--test-threads=1", "--nocapture"])
                .env(CHILD, policy.name())
                .env("HOSTFIRST_RSS_DONE", &done)
                .output()
                .unwrap();
            let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{policy:?}: the child failed: {said}");
            assert_eq!(
                std::fs::read_to_string(&done).ok().as_deref(),
                Some("ok"),
                "{policy:?}: the child ran no test: {said}"
            );
            std::fs::remove_file(&done).unwrap();
        }
    }

    thread_local! {
        /// Set by a test on the thread that is to stop inside a placement (see `pause_point`).
        static PAUSE_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    static PAUSED: AtomicBool = AtomicBool::new(false);
    static RELEASE: AtomicBool = AtomicBool::new(false);

    /// Called inside every placement: a thread marked with `PAUSE_HERE` stops there until `RELEASE`.
    pub(super) fn pause_point() {
        if PAUSE_HERE.with(|p| p.get()) {
            PAUSED.store(true, Ordering::SeqCst);
            while !RELEASE.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// A process forked while another thread is in the middle of placing a tensor can still take that tensor:
    /// the child has no such thread, so anything that waits for it would wait forever.
    #[test]
    fn a_fork_while_a_thread_places_a_tensor_does_not_wait_for_it() {
        let header = br#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}"#;
        let mut img = (header.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(header);
        img.extend((0u8..24).collect::<Vec<u8>>());
        let f = TensorFile::from_bytes(img).unwrap();
        let plan = Plan::make(&f, &super::super::rules::Rules::parse(["*=cpu"]).unwrap()).unwrap();
        let loaded = load(&f, &plan, None).unwrap();
        std::thread::scope(|s| {
            let l = &loaded;
            let placing = s.spawn(move || {
                PAUSE_HERE.with(|p| p.set(true));
                l.get("a").is_some()
            });
            while !PAUSED.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            // SAFETY: the child only places the tensor, compares its bytes and leaves with _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let ok = match loaded.get("a") {
                    Some(Placed::Buffer(b)) => {
                        let mut back = [0u8; 16];
                        b.lock().unwrap().copy_to_host(&mut back).is_ok() && back == core::array::from_fn(|k| k as u8)
                    }
                    _ => false,
                };
                // SAFETY: ends the child without running the parent's destructors or test harness.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            assert!(pid > 0, "fork failed");
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut status = 0;
            let waited = loop {
                // SAFETY: waits for our own child.
                let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if r == pid || Instant::now() > deadline {
                    break r == pid;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            if !waited {
                // SAFETY: our own child, stuck.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                unsafe { libc::waitpid(pid, &mut status, 0) };
            }
            RELEASE.store(true, Ordering::SeqCst);
            assert!(placing.join().unwrap());
            assert!(waited, "the forked child waited for the parent's placing thread");
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status}");
        });
        // Both placements in the parent ended on one buffer.
        let (Some(Placed::Buffer(x)), Some(Placed::Buffer(y))) = (loaded.get("a"), loaded.get("a")) else { panic!() };
        assert!(Arc::ptr_eq(x, y));
    }

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
