//! Declared read plans: the slices a caller will read (whole tensors, or per-dimension ranges of them), turned
//! into the file requests that fetch them, as an object to inspect before any byte moves.
//!
//! A [`ReadPlan`] is made from a [`TensorFile`] and a list of [`Slice`]s (or, inside the library, from views
//! already narrowed: shard-on-read makes one per tensor for the host parts it reads). It holds, per file of the
//! set, the [`ScatterPlan`] of its slices: their byte runs sorted by file offset, neighbouring runs merged into
//! one request while the merged request's pages stay within the [`ReadPolicy`]'s over-read cap (default 1.25
//! pages read per page needed), long runs cut at the policy's `max_read`. Its numbers say what running it
//! costs: [`ReadPlan::needed`] (the slices' bytes), [`ReadPlan::read_bytes`] (what the requests take from the
//! files, gaps included), [`ReadPlan::requests`] (after coalescing) and [`ReadPlan::peak_memory`] (the
//! destinations plus the scratch the merged requests go through). [`ReadPlan::execute`] issues exactly those
//! requests, through the engine's parallel readers ([`super::read_scatter`]).

use super::{read_scatter_with, FailureKind, Progress, ReadFailure, ScatterDst, ScatterPiece, ScatterPlan, Tuning};
use crate::error::{Error, Result, Status};
use crate::file::{ReadPolicy, TensorFile, View};

/// One declared slice: a tensor and, per dimension, the `(start, len)` range read; no ranges: the whole tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// The tensor's name.
    pub name: String,
    /// One `(start, len)` per dimension of the tensor, or empty for the whole tensor.
    pub ranges: Vec<(u64, u64)>,
}

impl Slice {
    /// The whole tensor `name`.
    pub fn whole(name: impl Into<String>) -> Slice {
        Slice { name: name.into(), ranges: Vec::new() }
    }
}

/// One request of a plan: `length` bytes at `offset` of file `file` (an index into [`ReadPlan::files`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The file of the set it reads (index into [`ReadPlan::files`]).
    pub file: usize,
    /// Byte offset in that file.
    pub offset: u64,
    /// Bytes read.
    pub length: u64,
    /// Declared slices it serves bytes to.
    pub slices: u32,
}

/// The requests of the slices that come from one file.
#[derive(Clone, Debug)]
struct FileGroup {
    /// The file, as its views name it.
    display: String,
    /// The slices read from it (indices into the plan's views), in the plan's destination order.
    members: Vec<usize>,
    scatter: ScatterPlan,
}

/// A declared read plan (see the module documentation).
#[derive(Clone, Debug)]
pub struct ReadPlan {
    views: Vec<View>,
    groups: Vec<FileGroup>,
    /// Slices of a memory buffer (no file): copied, not read.
    copied: Vec<usize>,
    policy: ReadPolicy,
    tuning: Tuning,
}

/// The pieces of `views` (each the destination of its index), sorted by file offset: `(file offset,
/// destination, offset in the destination, length)`. Views of a memory buffer have none.
pub(crate) fn scatter_pieces(views: &[&View]) -> Vec<ScatterPiece> {
    let mut pieces: Vec<ScatterPiece> = Vec::new();
    for (j, v) in views.iter().enumerate() {
        let (Some(runs), Some((_, first))) = (v.runs(), v.file_and_offset()) else { continue };
        let data_start = first - runs.start;
        pieces.extend(runs.pieces(0, runs.nbytes()).map(|(src, d, n)| (data_start + src, j, d, n)));
    }
    pieces.sort_unstable_by_key(|p| p.0);
    pieces
}

/// The requests of one file of a whole-file load (a job's tensors of that file, each a destination): the
/// pieces `(file offset, tensor, 0, bytes)`, sorted by file offset, planned by the same rule as every
/// [`ReadPlan`] ([`ScatterPlan::new`]: neighbours merged while the over-read cap holds, long runs cut) with
/// `read_size` as the largest request (the load's group: 1 to 8 MiB for host memory, one staging slab for
/// CUDA). A [`ReadPlan`] of the same tensors under `ReadPolicy { max_read: read_size, .. }` and
/// `Tuning { chunk: read_size, .. }` has exactly these requests.
pub(crate) fn load_requests(
    pieces: &[ScatterPiece],
    tensors: usize,
    read_size: usize,
    policy: &ReadPolicy,
) -> Result<ScatterPlan> {
    let policy = ReadPolicy { max_read: read_size as u64, ..*policy };
    ScatterPlan::new(pieces, tensors, &policy, &Tuning { chunk: read_size, ..Tuning::default() })
}

impl ReadPlan {
    /// Plans `slices` of `file` under `policy` (the over-read cap and the largest request) and `tuning` (the
    /// threads and piece size the run will use: they decide how the requests are grouped and so the scratch).
    ///
    /// Errors: `INVALID_ARGUMENT` for an invalid policy (the message names `max_over_read`), a slice whose
    /// ranges are neither empty nor one per dimension, or two slices that share bytes of the file (the message
    /// names both); `NOT_FOUND` for an unknown tensor; `OUT_OF_RANGE` for a range past its dimension;
    /// `MISALIGNED_SLICE` for a range of a sub-byte tensor that starts inside a byte.
    pub fn new(file: &TensorFile, slices: &[Slice], policy: ReadPolicy, tuning: Tuning) -> Result<ReadPlan> {
        policy.validate()?;
        let mut views = Vec::with_capacity(slices.len());
        for (i, s) in slices.iter().enumerate() {
            let whole = file.view(&s.name).map_err(|e| e.context(format!("read plan slice {i}")))?;
            if !s.ranges.is_empty() && s.ranges.len() != whole.shape().len() {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "read plan slice {i}: tensor '{}' has {} dimensions but the slice gives {} ranges (give one \
                         per dimension, or none for the whole tensor)",
                        s.name,
                        whole.shape().len(),
                        s.ranges.len()
                    ),
                ));
            }
            let mut view = whole.clone();
            for (d, &(start, len)) in s.ranges.iter().enumerate() {
                if (start, len) != (0, whole.shape()[d]) {
                    view = view.narrow(d, start, len).map_err(|e| e.context(format!("read plan slice {i}")))?;
                }
            }
            views.push(view);
        }
        ReadPlan::of_views(views, policy, tuning)
    }

    /// Plans the reads of `views` (views of one file or of several files of a set; narrowed or whole), each
    /// its own destination. Errors as [`ReadPlan::new`] for the policy and for overlapping views.
    pub fn of_views(views: Vec<View>, policy: ReadPolicy, tuning: Tuning) -> Result<ReadPlan> {
        policy.validate()?;
        let mut by_file: Vec<(String, Vec<usize>)> = Vec::new();
        let mut copied = Vec::new();
        for (i, v) in views.iter().enumerate() {
            if v.nbytes() == 0 {
                continue;
            }
            if v.file_and_offset().is_none() {
                copied.push(i);
                continue;
            }
            match by_file.iter_mut().find(|(f, _)| f == v.file_display()) {
                Some((_, members)) => members.push(i),
                None => by_file.push((v.file_display().to_string(), vec![i])),
            }
        }
        let mut groups = Vec::with_capacity(by_file.len());
        for (display, members) in by_file {
            let member_views: Vec<&View> = members.iter().map(|&i| &views[i]).collect();
            let pieces = scatter_pieces(&member_views);
            if let Some(w) = pieces.windows(2).find(|w| w[1].0 < w[0].0 + w[0].3) {
                let (a, b) = (members[w[0].1].min(members[w[1].1]), members[w[0].1].max(members[w[1].1]));
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "{display}: read plan slices {a} ('{}') and {b} ('{}') share bytes of the file at offset {}; \
                         declare each byte once",
                        views[a].name(),
                        views[b].name(),
                        w[1].0
                    ),
                ));
            }
            let scatter = ScatterPlan::new(&pieces, members.len(), &policy, &tuning)?;
            groups.push(FileGroup { display, members, scatter });
        }
        Ok(ReadPlan { views, groups, copied, policy, tuning })
    }

    /// The declared slices as views (narrowed where ranges were given), in declaration order.
    pub fn views(&self) -> &[View] {
        &self.views
    }

    /// The files the requests read, as their views name them (order of first use).
    pub fn files(&self) -> impl Iterator<Item = &str> + '_ {
        self.groups.iter().map(|g| g.display.as_str())
    }

    /// The policy it was made under.
    pub fn policy(&self) -> &ReadPolicy {
        &self.policy
    }

    /// Bytes the slices hold (what the caller needs).
    pub fn needed(&self) -> u64 {
        self.views.iter().map(|v| v.nbytes()).sum()
    }

    /// Bytes the requests read from the files (gaps merged into requests included), plus the bytes copied
    /// from a memory buffer.
    pub fn read_bytes(&self) -> u64 {
        self.groups.iter().map(|g| g.scatter.bytes()).sum::<u64>()
            + self.copied.iter().map(|&i| self.views[i].nbytes()).sum::<u64>()
    }

    /// File bytes read for each slice (its own bytes and the gaps counted for it; a memory buffer's slice:
    /// its bytes), in declaration order; they sum to [`ReadPlan::read_bytes`].
    pub fn per_slice(&self) -> Vec<u64> {
        let mut out = vec![0u64; self.views.len()];
        for g in &self.groups {
            for (&i, &b) in g.members.iter().zip(g.scatter.per_dst()) {
                out[i] = b;
            }
        }
        for &i in &self.copied {
            out[i] = self.views[i].nbytes();
        }
        out
    }

    /// The file requests after coalescing, file by file in file-offset order.
    pub fn requests(&self) -> Vec<Request> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(f, g)| {
                g.scatter.requests().map(move |(offset, hi, slices)| Request {
                    file: f,
                    offset,
                    length: hi - offset,
                    slices,
                })
            })
            .collect()
    }

    /// Number of file requests.
    pub fn request_count(&self) -> u64 {
        self.groups.iter().map(|g| g.scatter.reads() as u64).sum()
    }

    /// Largest memory a run of the plan holds at once: the destinations ([`ReadPlan::needed`]) plus the
    /// scratch of the reader threads (a merged request is read into scratch and its pieces copied out; each
    /// thread keeps scratch as large as the merged requests of its largest task). Files are read one after
    /// another, so the largest file's scratch counts.
    pub fn peak_memory(&self) -> u64 {
        let threads = self.tuning.resolved().threads.max(1) as u64;
        let scratch = self.groups.iter().map(|g| g.scatter.max_task_scratch() * threads.min(g.scatter.tasks() as u64));
        self.needed() + scratch.max().unwrap_or(0)
    }

    /// Reads every slice into `dsts` (one per slice, in declaration order, each exactly its slice's bytes,
    /// packed row-major): the plan's requests, issued through the engine's parallel readers, and nothing else.
    /// Returns the bytes read ([`ReadPlan::read_bytes`]).
    ///
    /// Errors: `INVALID_ARGUMENT` when the destinations do not match the slices (count or size; nothing is
    /// read); `TRUNCATED` when a file ends before a request (it was truncated after opening); `IO`;
    /// `CANCELLED` from `progress`.
    pub fn execute(&self, dsts: &mut [&mut [u8]], progress: &mut Progress<'_>) -> Result<u64> {
        if dsts.len() != self.views.len() {
            return Err(Error::new(
                Status::InvalidArgument,
                format!("read plan: {} destinations for {} slices", dsts.len(), self.views.len()),
            ));
        }
        for (i, (d, v)) in dsts.iter().zip(&self.views).enumerate() {
            if d.len() as u64 != v.nbytes() {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "read plan: destination {i} holds {} bytes; slice {i} ('{}') is {} bytes",
                        d.len(),
                        v.name(),
                        v.nbytes()
                    ),
                ));
            }
        }
        let mut read = 0u64;
        for g in 0..self.groups.len() {
            let members = self.groups[g].members.clone();
            let mut targets: Vec<ScatterDst<'_>> = Vec::with_capacity(members.len());
            let mut rest: Vec<Option<&mut [u8]>> = dsts.iter_mut().map(|d| Some(&mut **d)).collect();
            for &i in &members {
                let bytes = rest[i].take().expect("a slice is in one group");
                targets.push(ScatterDst { bytes, prepare: None, copies: Vec::new() });
            }
            read += self.execute_group(g, &mut targets, progress)?;
        }
        for &i in &self.copied {
            let v = &self.views[i];
            read += v.read_at_with(0, dsts[i], &self.policy)?;
        }
        Ok(read)
    }

    /// The number of file groups ([`ReadPlan::files`]); inside the library, a plan of one file's views has one.
    pub(crate) fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// The slices (indices into [`ReadPlan::views`]) read in file group `g`, in the order of its destinations.
    pub(crate) fn group_members(&self, g: usize) -> &[usize] {
        &self.groups[g].members
    }

    /// Executes file group `g` into `dsts` (one per member of the group, in [`ReadPlan::group_members`] order;
    /// with their copies and prepare callbacks, as shard-on-read fills replicas and fresh pages); returns the
    /// file bytes read. Failures name the file and the slice's tensor: `TRUNCATED` at the end of the file,
    /// `IO` otherwise.
    pub(crate) fn execute_group(
        &self,
        g: usize,
        dsts: &mut [ScatterDst<'_>],
        progress: &mut Progress<'_>,
    ) -> Result<u64> {
        self.execute_group_with(g, dsts, progress, None)
    }

    /// [`ReadPlan::execute_group`] under a page-cache policy's direct files (`bypass`: `direct` is
    /// [`crate::cache::DirectFiles::for_policy`]'s set): the group's requests are read with direct I/O where
    /// the file has an `O_DIRECT` twin, through the page cache otherwise (the set says why).
    pub(crate) fn execute_group_with(
        &self,
        g: usize,
        dsts: &mut [ScatterDst<'_>],
        progress: &mut Progress<'_>,
        direct: Option<&crate::cache::DirectFiles>,
    ) -> Result<u64> {
        let group = &self.groups[g];
        let first = &self.views[group.members[0]];
        let (file, _) = first.file_and_offset().expect("a file group reads from a file");
        let failed = |f: ReadFailure, j: usize| read_failure(&self.views[group.members[j]], file, f);
        let twin = direct.and_then(|d| d.get(file));
        let fd = crate::os::raw_file(file);
        read_scatter_with(fd, twin.as_deref(), &group.scatter, dsts, &self.tuning, progress, &failed)?;
        Ok(group.scatter.bytes())
    }

    /// File bytes read for each member of file group `g`, in [`ReadPlan::group_members`] order.
    pub(crate) fn group_per_slice(&self, g: usize) -> &[u64] {
        self.groups[g].scatter.per_dst()
    }
}

/// A failed read of a slice as the error a `pread` of it gives: `TRUNCATED` at the end of the file, `IO`
/// otherwise.
pub(crate) fn read_failure(view: &View, file: &std::fs::File, f: ReadFailure) -> Error {
    match f.kind {
        FailureKind::Eof { at } => Error::new(
            Status::Truncated,
            format!(
                "{}: tensor '{}': the file ends before byte {at} (it is now {} bytes; was it truncated after opening?)",
                view.file_display(),
                view.name(),
                file.metadata().map(|m| m.len().to_string()).unwrap_or_else(|_| "?".into())
            ),
        ),
        FailureKind::Os(e) => Error::new(Status::Io, format!("{}: tensor '{}': {e}", view.file_display(), view.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::layout::DEFAULT_MAX_OVER_READ;

    /// A safetensors file on disk: `a` U8 [64, 8192] (512 KiB, rows of 8 KiB), `b` U8 [4096] right after it,
    /// `c` U8 [8192] after `b`; byte i of the data section is `i * 7 % 251`.
    fn model(name: &str) -> (std::path::PathBuf, TensorFile, Vec<u8>) {
        let dir = std::env::temp_dir().join(format!("hostfirst-read-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        let (a, b, c) = (64 * 8192u64, 4096u64, 8192u64);
        let h = format!(
            r#"{{"a":{{"dtype":"U8","shape":[64,8192],"data_offsets":[0,{a}]}},"b":{{"dtype":"U8","shape":[4096],"data_offsets":[{a},{}]}},"c":{{"dtype":"U8","shape":[8192],"data_offsets":[{},{}]}}}}"#,
            a + b,
            a + b,
            a + b + c
        );
        let h = format!("{h:<width$}", width = h.len().div_ceil(8) * 8);
        let data: Vec<u8> = (0..a + b + c).map(|i| (i * 7 % 251) as u8).collect();
        let mut img = (h.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(h.as_bytes());
        img.extend_from_slice(&data);
        std::fs::write(&p, img).unwrap();
        let f = TensorFile::open(&p).unwrap();
        (p, f, data)
    }

    fn cap(max_over_read: f64) -> ReadPolicy {
        ReadPolicy { max_over_read, ..ReadPolicy::default() }
    }

    /// Runs `plan` into fresh buffers; returns them and the bytes read.
    fn run(plan: &ReadPlan) -> (Vec<Vec<u8>>, u64) {
        let mut bufs: Vec<Vec<u8>> = plan.views().iter().map(|v| vec![0u8; v.nbytes() as usize]).collect();
        let mut dsts: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        let read = plan.execute(&mut dsts, &mut Progress::new(None, plan.needed())).unwrap();
        (bufs, read)
    }

    #[test]
    fn numbers_follow_the_over_read_cap() {
        let (_p, f, data) = model("cap");
        // Columns [0, 512) of every row of `a`: 64 runs of 512 bytes, 7.5 KiB apart (gaps of whole pages).
        let cols = vec![Slice { name: "a".into(), ranges: vec![(0, 64), (0, 512)] }];
        let tight = ReadPlan::new(&f, &cols, cap(1.0), Tuning::default()).unwrap();
        assert_eq!(tight.needed(), 32 * 1024);
        // Under the 1.0 cap no gap of a whole page merges: one request per run, nothing over-read.
        assert_eq!((tight.request_count(), tight.read_bytes()), (64, 32 * 1024));
        // Under 4.0 the whole span merges (about 2 pages read per page needed).
        let loose = ReadPlan::new(&f, &cols, cap(4.0), Tuning::default()).unwrap();
        assert_eq!(loose.request_count(), 1, "{:?}", loose.requests());
        assert_eq!(loose.read_bytes(), 63 * 8192 + 512, "one request from the first run to the last");
        assert_eq!(loose.requests()[0].slices, 1);
        // Numbers agree with the requests, and executing returns exactly those bytes, correct.
        for plan in [&tight, &loose] {
            let reqs = plan.requests();
            assert_eq!(reqs.len() as u64, plan.request_count());
            assert_eq!(reqs.iter().map(|r| r.length).sum::<u64>(), plan.read_bytes());
            assert!(reqs.windows(2).all(|w| w[0].offset + w[0].length <= w[1].offset));
            let (bufs, read) = run(plan);
            assert_eq!(read, plan.read_bytes());
            let want: Vec<u8> = (0..64).flat_map(|r| data[r * 8192..r * 8192 + 512].to_vec()).collect();
            assert_eq!(bufs[0], want);
            assert_eq!(plan.per_slice(), vec![plan.read_bytes()]);
            assert!(plan.peak_memory() >= plan.needed());
        }
        // The loose plan's one merged request goes through scratch: peak = destinations + that scratch.
        assert_eq!(loose.peak_memory(), loose.needed() + loose.read_bytes());
    }

    #[test]
    fn neighbouring_tensors_merge_into_one_request() {
        let (_p, f, data) = model("whole");
        let slices = [Slice::whole("c"), Slice::whole("b")];
        let plan = ReadPlan::new(&f, &slices, ReadPolicy::default(), Tuning::default()).unwrap();
        assert_eq!((plan.needed(), plan.read_bytes()), (4096 + 8192, 4096 + 8192));
        // b and c are adjacent: one request serving both slices.
        assert_eq!(
            plan.requests(),
            vec![Request { file: 0, offset: plan.requests()[0].offset, length: 12288, slices: 2 }]
        );
        let (bufs, read) = run(&plan);
        assert_eq!(read, 12288);
        assert_eq!(bufs[0], &data[528384..536576]);
        assert_eq!(bufs[1], &data[524288..528384]);
        assert_eq!(plan.files().collect::<Vec<_>>().len(), 1);
    }

    #[test]
    fn interleaved_slices_of_one_tensor_share_requests_and_land_in_place() {
        let (_p, f, data) = model("interleaved");
        // Columns [0, 4096) and [4096, 8192) of rows 4..12: the two slices alternate, row by row, with no gap.
        let slices = [
            Slice { name: "a".into(), ranges: vec![(4, 8), (0, 4096)] },
            Slice { name: "a".into(), ranges: vec![(4, 8), (4096, 4096)] },
        ];
        let plan = ReadPlan::new(&f, &slices, ReadPolicy::default(), Tuning::default()).unwrap();
        assert_eq!((plan.needed(), plan.read_bytes()), (8 * 8192, 8 * 8192));
        let reqs = plan.requests();
        assert_eq!(reqs.len(), 1, "one request for the 16 runs: {reqs:?}");
        assert_eq!((reqs[0].length, reqs[0].slices), (8 * 8192, 2));
        let (bufs, read) = run(&plan);
        assert_eq!(read, plan.read_bytes());
        for (k, buf) in bufs.iter().enumerate() {
            let want: Vec<u8> =
                (4..12).flat_map(|r| data[r * 8192 + k * 4096..r * 8192 + (k + 1) * 4096].to_vec()).collect();
            assert_eq!(buf, &want, "slice {k}");
        }
        assert_eq!(plan.per_slice().iter().sum::<u64>(), plan.read_bytes());
    }

    /// A sharded set: slices of two part files plan one request group per file, requests named by file index.
    #[test]
    fn a_sharded_set_plans_each_file_apart() {
        let (p1, _, d1) = model("part-1.safetensors");
        let dir = p1.parent().unwrap().to_path_buf();
        let h = r#"{"z":{"dtype":"U8","shape":[100],"data_offsets":[0,100]}}"#;
        let mut img = (h.len() as u64).to_le_bytes().to_vec();
        img.extend_from_slice(h.as_bytes());
        img.extend((0..100u8).map(|i| i ^ 0x5a));
        std::fs::write(dir.join("part-2.safetensors"), img).unwrap();
        let index = r#"{"weight_map": {"a": "part-1.safetensors", "b": "part-1.safetensors", "c": "part-1.safetensors", "z": "part-2.safetensors"}}"#;
        let ip = dir.join("set.safetensors.index.json");
        std::fs::write(&ip, index).unwrap();
        let f = TensorFile::open(&ip).unwrap();
        let slices = [Slice::whole("z"), Slice::whole("b")];
        let plan = ReadPlan::new(&f, &slices, ReadPolicy::default(), Tuning::default()).unwrap();
        assert_eq!(plan.files().count(), 2);
        let reqs = plan.requests();
        assert_eq!(reqs.iter().map(|r| (r.file, r.length)).collect::<Vec<_>>(), [(0, 100), (1, 4096)]);
        let (bufs, read) = run(&plan);
        assert_eq!(read, 4196);
        assert_eq!(bufs[0], (0..100u8).map(|i| i ^ 0x5a).collect::<Vec<_>>());
        assert_eq!(bufs[1], &d1[524288..528384]);
    }

    #[test]
    fn bad_declarations_are_refused_with_their_status() {
        let (_p, f, _) = model("bad");
        let st = |slices: &[Slice], policy: ReadPolicy| {
            ReadPlan::new(&f, slices, policy, Tuning::default()).map(|_| ()).unwrap_err()
        };
        let e = st(&[Slice::whole("a")], cap(0.9));
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.to_string().contains("max_over_read"), "{e}");
        assert_eq!(st(&[Slice::whole("zz")], ReadPolicy::default()).status(), Status::NotFound);
        let e = st(&[Slice { name: "a".into(), ranges: vec![(0, 1)] }], ReadPolicy::default());
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.to_string().contains("2 dimensions"), "{e}");
        let e = st(&[Slice { name: "a".into(), ranges: vec![(60, 5), (0, 8192)] }], ReadPolicy::default());
        assert_eq!(e.status(), Status::OutOfRange);
        let overlap = [Slice { name: "a".into(), ranges: vec![(0, 4), (0, 8192)] }, Slice::whole("a")];
        let e = st(&overlap, ReadPolicy::default());
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.to_string().contains("slices 0 ('a') and 1 ('a') share bytes"), "{e}");
        assert_eq!(DEFAULT_MAX_OVER_READ, ReadPolicy::default().max_over_read);
        // Destinations that do not match: nothing read.
        let plan = ReadPlan::new(&f, &[Slice::whole("b")], ReadPolicy::default(), Tuning::default()).unwrap();
        let mut small = vec![0u8; 10];
        let e = plan.execute(&mut [small.as_mut_slice()], &mut Progress::new(None, 0)).unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.to_string().contains("destination 0 holds 10 bytes"), "{e}");
    }

    #[test]
    fn a_truncated_file_gives_truncated() {
        let (p, f, _) = model("trunc");
        let plan = ReadPlan::new(&f, &[Slice::whole("c")], ReadPolicy::default(), Tuning::default()).unwrap();
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(1000).unwrap();
        let mut buf = vec![0u8; 8192];
        let e = plan.execute(&mut [buf.as_mut_slice()], &mut Progress::new(None, 8192)).unwrap_err();
        assert_eq!(e.status(), Status::Truncated, "{e}");
        assert!(e.to_string().contains("tensor 'c'"), "{e}");
    }
}
