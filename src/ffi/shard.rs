//! Shard-on-read: meshes, sharding rules, shard plans and their runs (`hostfirst_shard_*`).

use super::args::write_out_struct;
use super::args::{
    c_page_cache, c_str, init_options, opt_out, options_struct, out_ptr, out_struct, out_struct_size, page_cache_arg,
    read_options,
};
use super::buffer::hostfirst_buffer;
use super::device::hostfirst_device;
use super::file::hostfirst_file;
use super::handle::{self, Handle};
use super::put::hostfirst_progress_fn;
use crate::engine::Tuning;
use crate::error::{Error, Result, Status};
use crate::file::ReadPolicy;
use crate::shard::{self, Mesh, Owned, PlanTable, ShardLoad, ShardOptions, ShardPlan, ShardRules};
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

/// A device mesh: named axes with sizes (like JAX's `Mesh`). Created by `hostfirst_shard_mesh_new`, released by
/// `hostfirst_shard_mesh_free`; immutable, so every function taking it is thread-safe. Rules made over it keep
/// what they need: it may be freed right after.
pub struct hostfirst_shard_mesh {
    _private: [u8; 0],
}

/// Sharding rules over one mesh: glob patterns on tensor names → partition specs. Created by
/// `hostfirst_shard_rules_new`, released by `hostfirst_shard_rules_free`. Adding rules while another thread
/// makes a plan from the same handle is safe (the plan sees the rules before or after the addition).
pub struct hostfirst_shard_rules {
    _private: [u8; 0],
}

/// A shard plan: for the positions a process owns, every tensor's part, its byte runs and the reads they
/// take. Created by `hostfirst_shard_plan_make`, released by `hostfirst_shard_plan_free`; immutable.
pub struct hostfirst_shard_plan {
    _private: [u8; 0],
}

/// The buffers of a run of a shard plan (`hostfirst_shard_run`), released by `hostfirst_shard_result_free`.
pub struct hostfirst_shard_result {
    _private: [u8; 0],
}

impl Handle for hostfirst_shard_mesh {
    type Target = Arc<Mesh>;
    const NAME: &'static str = "hostfirst_shard_mesh";
}
impl Handle for hostfirst_shard_rules {
    type Target = Mutex<ShardRules>;
    const NAME: &'static str = "hostfirst_shard_rules";
}
impl Handle for hostfirst_shard_plan {
    type Target = PlanTable;
    const NAME: &'static str = "hostfirst_shard_plan";
}
impl Handle for hostfirst_shard_result {
    type Target = ShardLoad;
    const NAME: &'static str = "hostfirst_shard_result";
}

/// Options of a shard plan (`hostfirst_shard_plan_make`): how its reads merge and how its runs read (kept
/// by the plan for every run). Fill it with `hostfirst_shard_options_init` (or zero-initialise and set
/// `struct_size = sizeof(hostfirst_shard_options)`), then what you need; zero fields mean the defaults. The
/// way to make one: `hostfirst_shard_options opts; hostfirst_shard_options_init(&opts, sizeof opts);
/// opts.threads = 4;`. A smaller `struct_size` from an older header (at least its 1.0 layout) is
/// accepted: fields past it take their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_shard_options {
    /// `sizeof(hostfirst_shard_options)`.
    pub struct_size: usize,
    /// Largest ratio of file pages one merged read may take to the pages its runs need (0: 1.25; otherwise
    /// at least 1.0). Neighbouring runs of a strided shard are read with one `pread` while the merged read
    /// stays within it: 1.0 merges only gaps that cost no extra page (shorter than a page).
    pub max_over_read: f64,
    /// Largest merged read in bytes (0: 1 MiB).
    pub max_read_bytes: u64,
    /// Reader threads (0: the CPUs available to the process, at most 16).
    pub threads: u32,
    /// Bytes per parallel read task for host devices and per staging slab for CUDA (0: 8 MiB / 16 MiB).
    pub chunk_bytes: u64,
    /// Total page-locked staging for CUDA devices (0: 256 MiB).
    pub staging_bytes: u64,
}

options_struct!(
    hostfirst_shard_options,
    first_version_ends_with = staging_bytes,
    fields = [struct_size, max_over_read, max_read_bytes, threads, chunk_bytes, staging_bytes]
);

/// Options of one run of a shard plan (`hostfirst_shard_run`): what belongs to the caller of that run, not
/// to the plan, which may be run several times, from several threads at once. Fill it with
/// `hostfirst_shard_run_options_init` (or zero-initialise and set `struct_size = sizeof
/// (hostfirst_shard_run_options)`), then what you need: `hostfirst_shard_run_options ro;
/// hostfirst_shard_run_options_init(&ro, sizeof ro); ro.progress = my_progress; ro.user = &my_state;`. A
/// NULL pointer means the defaults (no callback). A smaller `struct_size` from an older header (at least its
/// 1.0 layout) is accepted: fields past it take their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_shard_run_options {
    /// `sizeof(hostfirst_shard_run_options)`.
    pub struct_size: usize,
    /// Progress callback (see `hostfirst_shard_run`), or NULL.
    pub progress: hostfirst_progress_fn,
    /// Passed to `progress` unchanged.
    pub user: *mut c_void,
    /// (1.1) What the run leaves in the page cache: `HOSTFIRST_PAGE_CACHE_KEEP` (0, the default),
    /// `HOSTFIRST_PAGE_CACHE_DROP` (the pages of the plan's files that the run brought in are dropped when it
    /// ends, failed or not; pages cached before stay) or `HOSTFIRST_PAGE_CACHE_BYPASS` (host parts, and CUDA
    /// parts contiguous in the file, read with direct I/O, `O_DIRECT` into aligned staging, where the file
    /// system allows it; elsewhere, and for a strided CUDA part, read as DROP). Another value is `INVALID_ARGUMENT` naming
    /// `opts->page_cache`.
    pub page_cache: c_page_cache,
}

impl Default for hostfirst_shard_run_options {
    fn default() -> Self {
        hostfirst_shard_run_options {
            struct_size: std::mem::size_of::<hostfirst_shard_run_options>(),
            progress: None,
            user: std::ptr::null_mut(),
            page_cache: 0,
        }
    }
}

options_struct!(
    hostfirst_shard_run_options,
    first_version_ends_with = user,
    fields = [struct_size, progress, user],
    appended = [page_cache]
);

impl Default for hostfirst_shard_options {
    fn default() -> Self {
        hostfirst_shard_options {
            struct_size: std::mem::size_of::<hostfirst_shard_options>(),
            max_over_read: 0.0,
            max_read_bytes: 0,
            threads: 0,
            chunk_bytes: 0,
            staging_bytes: 0,
        }
    }
}

/// One shard of a plan, filled by `hostfirst_shard_plan_describe`. Set `struct_size =
/// sizeof(hostfirst_shard_info)` before the call; fields may be appended in later minor versions. Pointers
/// are owned by the plan and valid until it is freed.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_shard_info {
    /// In: the caller's `sizeof(hostfirst_shard_info)`. Out: the number of bytes written.
    pub struct_size: usize,
    /// The tensor name (NUL-terminated UTF-8).
    pub name: *const c_char,
    /// The tensor's index in the file (file order, as `hostfirst_file_view_at`).
    pub tensor: usize,
    /// The owned mesh position holding this shard.
    pub position: u64,
    /// The device it goes to.
    pub device: hostfirst_device,
    /// The index of the rule that matched, or -1 when none did (the tensor is replicated).
    pub rule: i32,
    /// The tensor's rank (0 for a scalar).
    pub rank: u32,
    /// `rank` dimensions of the whole tensor (NULL when rank is 0).
    pub shape: *const u64,
    /// `rank` dimensions of the shard.
    pub shard_shape: *const u64,
    /// `rank` offsets: the shard is `[start[d], start[d] + shard_shape[d])` along each dimension `d`.
    pub start: *const u64,
    /// Bytes of the shard (packed, C order).
    pub nbytes: u64,
    /// Contiguous byte runs the shard consists of in its file (1 for a whole tensor or a dimension-0 split,
    /// the number of rows for an inner-dimension split; 0 for an empty shard).
    pub runs: u64,
    /// File bytes the shard's merged reads take (0 when `copy_of` is not -1).
    pub read_bytes: u64,
    /// -1, or the index of an earlier shard of this plan holding the same part of the same tensor (another
    /// owned position along a replicated axis): this one is copied from that one's buffer, not read again.
    pub copy_of: i64,
    /// The file the tensor is in (for a multi-file set, the part file's path; `<memory>` for a buffer).
    pub file: *const c_char,
}

out_struct!(hostfirst_shard_info, file);

fn shard_options(p: *const hostfirst_shard_options) -> Result<(ReadPolicy, Tuning)> {
    let o = read_options(p, hostfirst_shard_options::default(), "opts")?;
    let mut policy = ReadPolicy::default();
    if o.max_over_read != 0.0 {
        policy.max_over_read = o.max_over_read;
    }
    if o.max_read_bytes != 0 {
        policy.max_read = o.max_read_bytes;
    }
    policy.validate()?;
    let size = |v: u64, what: &str| {
        usize::try_from(v).map_err(|_| Error::new(Status::InvalidArgument, format!("opts->{what} {v} is too large")))
    };
    if o.threads > 1024 {
        return Err(Error::new(Status::InvalidArgument, format!("opts->threads is {}; at most 1024", o.threads)));
    }
    let run = Tuning {
        threads: o.threads as usize,
        chunk: size(o.chunk_bytes, "chunk_bytes")?,
        staging: size(o.staging_bytes, "staging_bytes")?,
        queue_depth: 0,
    };
    Ok((policy, run))
}

/// A C array `(p, count)` of `T`; `(NULL, 0)` is empty, `(NULL, n > 0)` is `NULL_ARGUMENT`.
fn in_array<'a, T>(p: *const T, count: usize, name: &str) -> Result<&'a [T]> {
    if count == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::new(Status::NullArgument, format!("array '{name}' is NULL with {count} elements")));
    }
    // SAFETY: non-NULL with the caller's promise of `count` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, count) })
}

// ---- meshes ----------------------------------------------------------------------------------------------

/// Fills `*out` with the default plan options (everything zero) and sets `out->struct_size = struct_size`.
/// Pass `sizeof *out`: `hostfirst_shard_options_init(&opts, sizeof opts)`. Only the fields that lie wholly
/// within the caller's `struct_size` bytes are written. Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a
/// `struct_size` smaller than the struct's 1.0 layout (the message names both sizes). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_options_init(out: *mut hostfirst_shard_options, struct_size: usize) -> Status {
    hostfirst_boundary!("hostfirst_shard_options_init", {
        init_options(out, struct_size, hostfirst_shard_options::default())
    })
}

/// Fills `*out` with the default run options (no progress callback) and sets `out->struct_size =
/// struct_size`. Pass `sizeof *out`: `hostfirst_shard_run_options_init(&ro, sizeof ro)`. Only the fields that
/// lie wholly within the caller's `struct_size` bytes are written. Errors: `NULL_ARGUMENT`;
/// `INVALID_ARGUMENT` for a `struct_size` smaller than the struct's 1.0 layout (the message names both
/// sizes). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_run_options_init(
    out: *mut hostfirst_shard_run_options,
    struct_size: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_run_options_init", {
        init_options(out, struct_size, hostfirst_shard_run_options::default())
    })
}

/// Creates a mesh of `count` axes, outermost first: axis `i` is called `names[i]` and has `sizes[i]`
/// positions. Writes a new handle to `*out` (free it with `hostfirst_shard_mesh_free`).
///
/// Positions are numbered row-major over the axes (the last axis varies fastest), as `numpy.reshape` orders
/// the devices of a JAX mesh: on a mesh `{"x", "y"}` of sizes `{2, 4}`, position 5 is `x = 1, y = 1`. An MPI
/// job typically uses one axis of size `world` and owns position `rank`.
///
/// Errors: `NULL_ARGUMENT` (`names`, `sizes` or a name NULL with `count > 0`, `out`); `INVALID_ARGUMENT` for
/// no axis, an empty or repeated name, a reserved name (`_`, `None`), a name containing `,` `+` `=` `(` `)`,
/// a quote or white space, a size of 0; `LIMIT_EXCEEDED` for more than 16 axes or more than 1,048,576
/// positions. On failure `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_mesh_new(
    names: *const *const c_char,
    sizes: *const u64,
    count: usize,
    out: *mut *mut hostfirst_shard_mesh,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_mesh_new", {
        let names = in_array(names, count, "names")?;
        let sizes = in_array(sizes, count, "sizes")?;
        let out = out_ptr(out, "out")?;
        let mut axes = Vec::with_capacity(count);
        for (i, (&n, &s)) in names.iter().zip(sizes).enumerate() {
            axes.push((c_str(n, &format!("names[{i}]"))?, s));
        }
        let mesh = Mesh::new(&axes)?;
        *out = handle::insert_new::<hostfirst_shard_mesh>(Arc::new(mesh));
        Ok(())
    })
}

/// Releases a mesh. NULL is a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Rules and plans made
/// from it stay valid. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_mesh_free(mesh: *mut hostfirst_shard_mesh) -> Status {
    hostfirst_boundary!("hostfirst_shard_mesh_free", { handle::remove(mesh, "mesh").map(|_| ()) })
}

/// Writes the number of positions of the mesh (the product of its sizes) to `*out_count`. Errors:
/// `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_mesh_positions(mesh: *const hostfirst_shard_mesh, out_count: *mut u64) -> Status {
    hostfirst_boundary!("hostfirst_shard_mesh_positions", {
        let m = handle::get::<hostfirst_shard_mesh>(mesh, "mesh")?;
        *out_ptr(out_count, "out_count")? = m.positions();
        Ok(())
    })
}

/// Writes the position at coordinates `coords[0..count]` (one per axis, outermost first) to
/// `*out_position`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` when `count` is not the
/// number of axes, `OUT_OF_RANGE` for a coordinate not below its axis size. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_mesh_position(
    mesh: *const hostfirst_shard_mesh,
    coords: *const u64,
    count: usize,
    out_position: *mut u64,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_mesh_position", {
        let m = handle::get::<hostfirst_shard_mesh>(mesh, "mesh")?;
        let coords = in_array(coords, count, "coords")?;
        let out = out_ptr(out_position, "out_position")?;
        *out = m.position(coords)?;
        Ok(())
    })
}

// ---- rules -----------------------------------------------------------------------------------------------

/// Creates an empty rule list over `mesh` and writes its handle to `*out` (free it with
/// `hostfirst_shard_rules_free`). With no rules every tensor is replicated: each owned position gets all of
/// it. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_rules_new(
    mesh: *const hostfirst_shard_mesh,
    out: *mut *mut hostfirst_shard_rules,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_rules_new", {
        let m = handle::get::<hostfirst_shard_mesh>(mesh, "mesh")?;
        let out = out_ptr(out, "out")?;
        *out = handle::insert_new::<hostfirst_shard_rules>(Mutex::new(ShardRules::new(Arc::clone(&m))));
        Ok(())
    })
}

/// Appends a rule: tensors whose name matches the glob `pattern` (the syntax of `hostfirst_rules_add`: `*`,
/// `?`, `[a-z]`, `[!a-z]`, `\x`) are split by `spec`, unless an earlier rule matched them.
///
/// `spec` is a partition spec in text: comma-separated entries, one per tensor dimension from dimension 0;
/// an entry is a mesh axis name, several joined with `+` (the dimension is split over their product, the
/// first major), or `_` / `None` / nothing for a dimension that is not split. `""` replicates. JAX's
/// `P('x', 'y')` is `"x,y"`, `P(None, 'y')` is `"_,y"`, `P(('x', 'y'))` is `"x+y"`; mesh axes a spec does not
/// name replicate. Splits must be even: a tensor dimension that the axes do not divide makes
/// `hostfirst_shard_plan_make` fail naming the tensor, the dimension, its size and the axes.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (empty or malformed pattern, an axis the
/// mesh does not have, an axis named twice, text not UTF-8); the rule list is unchanged on error.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_rules_add(
    rules: *mut hostfirst_shard_rules,
    pattern: *const c_char,
    spec: *const c_char,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_rules_add", {
        let r = handle::get::<hostfirst_shard_rules>(rules, "rules")?;
        let pattern = c_str(pattern, "pattern")?;
        let spec = c_str(spec, "spec")?;
        let mut g = r.lock().unwrap_or_else(|p| p.into_inner());
        g.add(pattern, spec)
    })
}

/// Appends a skip rule: tensors whose name matches the glob `pattern` (unless an earlier rule matched them) are
/// left out of the plans made from these rules: no shard, nothing read. With a last skip rule `"*"`, a plan
/// holds only the tensors the other rules name (instead of replicating the rest); with skip rules for the
/// patterns another mesh handles, one process can make one plan per mesh and load every tensor once. Errors:
/// `NULL_ARGUMENT`, `INVALID_HANDLE`, `INVALID_ARGUMENT` (empty or malformed pattern, not UTF-8); the rule list
/// is unchanged on error. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_rules_skip(rules: *mut hostfirst_shard_rules, pattern: *const c_char) -> Status {
    hostfirst_boundary!("hostfirst_shard_rules_skip", {
        let r = handle::get::<hostfirst_shard_rules>(rules, "rules")?;
        let pattern = c_str(pattern, "pattern")?;
        let mut g = r.lock().unwrap_or_else(|p| p.into_inner());
        g.skip(pattern)
    })
}

/// Releases a rule list. NULL is a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Plans made from
/// it stay valid. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_rules_free(rules: *mut hostfirst_shard_rules) -> Status {
    hostfirst_boundary!("hostfirst_shard_rules_free", { handle::remove(rules, "rules").map(|_| ()) })
}

// ---- plans -----------------------------------------------------------------------------------------------

/// Plans the shards this process loads from `file` (a safetensors file, a buffer, or a multi-file set): it
/// owns the mesh positions `positions[0..count]`, whose shards go to `devices[0..count]`
/// (`HOSTFIRST_DEVICE_CPU`, `_CUDA_HOST` or `_CUDA` with an ordinal). Writes a new handle to `*out` (free it
/// with `hostfirst_shard_plan_free`).
///
/// For every tensor (file order; but those a skip rule matches) and every owned position (in the order
/// given), the plan holds the part of the tensor that position holds under `rules` (unmatched tensors: all
/// of it), as the contiguous byte runs
/// it needs from its file, and the reads those take once neighbouring runs are merged under
/// `opts->max_over_read` (default 1.25 pages read per page needed). A part several owned positions hold
/// (along a replicated mesh axis) is read once and copied (`hostfirst_shard_info.copy_of`). Making a plan
/// reads no tensor data and allocates nothing on a device; it records each device's free memory now
/// (`hostfirst_shard_plan_totals`). No communication with other processes: each process makes its own
/// plan from the same rules.
///
/// `opts` may be NULL (defaults). Errors: `NULL_ARGUMENT` (`file`, `rules`, `out`; `positions` or
/// `devices` NULL with `count > 0`), `INVALID_HANDLE`; `OUT_OF_RANGE` for a position not below
/// `hostfirst_shard_mesh_positions` (e.g. an MPI rank ≥ the mesh size); `INVALID_ARGUMENT` for a position
/// listed twice, an unknown device kind, bad options, a spec with more entries than a tensor it matches has
/// dimensions, or a split dimension that is not even (the message names the tensor, the dimension, its
/// size and the axes); `MISALIGNED_SLICE` when a shard of a sub-byte (F4, F6) tensor would start inside a
/// byte; `NO_SUCH_DEVICE`, `UNAVAILABLE` for an absent device. On failure `*out` is unchanged.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_plan_make(
    file: *const hostfirst_file,
    rules: *const hostfirst_shard_rules,
    positions: *const u64,
    devices: *const hostfirst_device,
    count: usize,
    opts: *const hostfirst_shard_options,
    out: *mut *mut hostfirst_shard_plan,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_plan_make", {
        let f = handle::get::<hostfirst_file>(file, "file")?;
        let r = handle::get::<hostfirst_shard_rules>(rules, "rules")?;
        let positions = in_array(positions, count, "positions")?;
        let devices = in_array(devices, count, "devices")?;
        let out = out_ptr(out, "out")?;
        let (policy, tuning) = shard_options(opts)?;
        let mut owned = Vec::with_capacity(count);
        for (i, (&position, d)) in positions.iter().zip(devices).enumerate() {
            owned.push(Owned { position, device: d.to_device(&format!("devices[{i}]"))? });
        }
        let rules = r.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let plan = ShardPlan::make(&f, &rules, &owned, policy)?;
        *out = handle::insert_new::<hostfirst_shard_plan>(PlanTable::new(plan, tuning)?);
        Ok(())
    })
}

/// Writes the number of shards of the plan (tensors × owned positions) to `*out_count`. Errors:
/// `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_plan_count(plan: *const hostfirst_shard_plan, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_shard_plan_count", {
        let p = handle::get::<hostfirst_shard_plan>(plan, "plan")?;
        *out_ptr(out_count, "out_count")? = p.len();
        Ok(())
    })
}

/// Describes shard `index` of the plan into `*out` (set `out->struct_size = sizeof(hostfirst_shard_info)`
/// first). Shards are ordered by tensor (file order), then by owned position in the order given to
/// `hostfirst_shard_plan_make`. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`, `OUT_OF_RANGE`,
/// `INVALID_ARGUMENT` (`struct_size` too small). On failure `*out` is unchanged. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_plan_describe(
    plan: *const hostfirst_shard_plan,
    index: usize,
    out: *mut hostfirst_shard_info,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_plan_describe", {
        let p = handle::get::<hostfirst_shard_plan>(plan, "plan")?;
        let size = out_struct_size(out, "out")?;
        let row = p.row(index)?;
        let e = row.entry;
        let ptr = |s: &[u64]| if s.is_empty() { std::ptr::null() } else { s.as_ptr() };
        write_out_struct(
            out,
            size,
            hostfirst_shard_info {
                struct_size: 0,
                name: e.view.name_ptr(),
                tensor: e.tensor,
                position: e.position,
                device: e.device.into(),
                rule: e.rule.map_or(-1, |r| r as i32),
                rank: row.shape.len() as u32,
                shape: ptr(row.shape),
                shard_shape: ptr(e.shape()),
                start: ptr(row.start),
                nbytes: e.nbytes(),
                runs: e.runs,
                read_bytes: e.planned_read,
                copy_of: e.copy_of.map_or(-1, |c| c as i64),
                file: row.file.as_ptr(),
            },
        );
        Ok(())
    })
}

/// Writes the plan's totals: `*out_shard_bytes` the bytes of every shard (copies included), `*out_read_bytes`
/// the file bytes its merged reads take, `*out_fits` 1 when every device had room for its shards when the plan
/// was made (free memory less the fit check's margin), else 0. Any output may be NULL. Errors:
/// `NULL_ARGUMENT` (plan), `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_plan_totals(
    plan: *const hostfirst_shard_plan,
    out_shard_bytes: *mut u64,
    out_read_bytes: *mut u64,
    out_fits: *mut i32,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_plan_totals", {
        let p = handle::get::<hostfirst_shard_plan>(plan, "plan")?;
        if let Some(o) = opt_out(out_shard_bytes) {
            *o = p.plan.shard_bytes();
        }
        if let Some(o) = opt_out(out_read_bytes) {
            *o = p.plan.planned_read();
        }
        if let Some(o) = opt_out(out_fits) {
            *o = p.plan.fits() as i32;
        }
        Ok(())
    })
}

/// Releases a plan. NULL is a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Results of its runs
/// stay valid; pointers from `hostfirst_shard_plan_describe` become invalid. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_plan_free(plan: *mut hostfirst_shard_plan) -> Status {
    hostfirst_boundary!("hostfirst_shard_plan_free", { handle::remove(plan, "plan").map(|_| ()) })
}

// ---- runs ------------------------------------------------------------------------------------------------

/// Runs a plan: loads every shard into its own new buffer (one contiguous C-order buffer per shard) on its
/// device and writes a new result handle to `*out` (free it with `hostfirst_shard_result_free`).
///
/// Before the first byte moves, every device is fit-checked against its memory free *now*; the first that
/// does not fit gives `OUT_OF_MEMORY` naming the device with the numbers (`hostfirst_last_error_fit`), and nothing
/// is allocated. Then each part file is read from its runs only, with parallel `pread`s straight into host
/// buffers (`cpu`, `cuda_host`) or through the bounded page-locked staging ring for `cuda:N` (runs packed
/// into the slabs); a part held by several owned positions is read once and copied. Files are never read
/// through the mapping: a file truncated since it was opened gives `TRUNCATED`, not SIGBUS.
///
/// `opts` NULL means the defaults (no callback). `opts->progress` (may be NULL) is called on the calling
/// thread at a bounded rate with the shard bytes placed so far and in all, at least once, last with `done ==
/// total`; returning nonzero cancels: `CANCELLED`, and everything the run had allocated is freed. Any other
/// failure (`IO`, `TRUNCATED`, `DEVICE_ERROR`) also frees everything. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (`opts->struct_size` too small, `opts->page_cache` not a
/// `hostfirst_page_cache`). On failure `*out` is unchanged. `opts->page_cache` (1.1) says what the run leaves
/// in the page cache (see `hostfirst_shard_run_options`).
/// Thread-safe; `opts->user` is passed through untouched. The same plan may be run more than once, also from
/// several threads at once. (Earlier in 0.2 this took `progress, user` instead of `opts`.)
#[no_mangle]
pub extern "C" fn hostfirst_shard_run(
    plan: *const hostfirst_shard_plan,
    opts: *const hostfirst_shard_run_options,
    out: *mut *mut hostfirst_shard_result,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_run", {
        let p = handle::get::<hostfirst_shard_plan>(plan, "plan")?;
        let o = read_options(opts, hostfirst_shard_run_options::default(), "opts")?;
        let out = out_ptr(out, "out")?;
        let (progress, user) = (o.progress, o.user);
        let mut cb = |done: u64, total: u64| match progress {
            // SAFETY: the caller's callback with the caller's user pointer, as documented.
            Some(f) => unsafe { f(done, total, user) != 0 },
            None => false,
        };
        let page_cache = page_cache_arg(o.page_cache, "opts->page_cache")?;
        let progress = if progress.is_some() { Some(&mut cb as &mut dyn FnMut(u64, u64) -> bool) } else { None };
        let opts = ShardOptions { tuning: p.tuning, progress, page_cache };
        let load = shard::run(&p.plan, opts)?;
        *out = handle::insert_new::<hostfirst_shard_result>(load);
        Ok(())
    })
}

/// Writes the number of shards of a result (that of its plan) to `*out_count`. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_result_count(result: *const hostfirst_shard_result, out_count: *mut usize) -> Status {
    hostfirst_boundary!("hostfirst_shard_result_count", {
        let r = handle::get::<hostfirst_shard_result>(result, "result")?;
        *out_ptr(out_count, "out_count")? = r.shards.len();
        Ok(())
    })
}

/// Gets shard `index` (the plan's order) of a result: a **new** `hostfirst_buffer` handle to `*out_buffer`
/// (when non-NULL; the caller frees it with `hostfirst_buffer_free`; its memory is released when the result
/// and every handle to it are freed, in any order) and the file bytes read for it to `*out_bytes_read` (when
/// non-NULL; 0 for a copy). The buffer's name is the tensor's, its shape the shard's. Errors:
/// `NULL_ARGUMENT` (result), `INVALID_HANDLE`, `OUT_OF_RANGE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_result_get(
    result: *const hostfirst_shard_result,
    index: usize,
    out_buffer: *mut *mut hostfirst_buffer,
    out_bytes_read: *mut u64,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_result_get", {
        let r = handle::get::<hostfirst_shard_result>(result, "result")?;
        let n = r.shards.len();
        let s = r.shards.get(index).ok_or_else(|| {
            Error::new(Status::OutOfRange, format!("shard index {index}, but the result has {n} shards"))
        })?;
        if let Some(o) = opt_out(out_bytes_read) {
            *o = s.bytes_read;
        }
        if let Some(o) = opt_out(out_buffer) {
            *o = handle::insert::<hostfirst_buffer>(Arc::clone(&s.buffer));
        }
        Ok(())
    })
}

/// Writes the file bytes the run read, over all shards, to `*out_bytes`. Errors: `NULL_ARGUMENT`,
/// `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_result_bytes_read(
    result: *const hostfirst_shard_result,
    out_bytes: *mut u64,
) -> Status {
    hostfirst_boundary!("hostfirst_shard_result_bytes_read", {
        let r = handle::get::<hostfirst_shard_result>(result, "result")?;
        *out_ptr(out_bytes, "out_bytes")? = r.bytes_read();
        Ok(())
    })
}

/// Releases a result. NULL is a no-op; a freed or foreign handle gives `INVALID_HANDLE`. Buffers obtained with
/// `hostfirst_shard_result_get` stay valid. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_shard_result_free(result: *mut hostfirst_shard_result) -> Status {
    hostfirst_boundary!("hostfirst_shard_result_free", { handle::remove(result, "result").map(|_| ()) })
}
