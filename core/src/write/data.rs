//! The data phase of a save: every piece's bytes to its places in the files, through the transfer engine.
//!
//! Pieces are written in file order. Bytes already in host memory (owned bytes, caller memory, cpu and
//! cuda_host buffers) are written from where they lie, in waves of positioned writes
//! ([`engine::write::write_many`]: up to the queue depth in flight, io_uring where available); view sources
//! are read through the engine into bounce buffers (at most the staging size, several read at once by
//! `threads` threads) and written the same way; CUDA buffers are drained slab by slab through the pinned
//! staging ring ([`engine::drain`]), each slab written while the next ones copy. A piece that is a box of its
//! tensor (ranks, several pieces) is scattered to its runs in the file ([`crate::file::layout::Runs`]).
//!
//! When the save is durable the kernel is asked to write each wave to storage as soon as it is in the page
//! cache ([`engine::write::start_writeback`]), and the writer waits for old waves once more than a window is
//! outstanding ([`engine::write::wait_writeback`]): the disk works while later bytes are produced, the dirty
//! pages of a large save stay bounded, and the final `fsync` finds little left.

use super::layout::{Layout, PartLayout};
use super::staged::{lock_set, remove_stale, split, sync_dir, Staged};
use super::{Decl, Piece, Source, Summary, WriteOptions, DEFAULT_WRITE_CHUNK, DEFAULT_WRITE_STAGING};
use crate::engine::write::{start_writeback, wait_writeback, write_exact, write_many, Write, WriteFailure};
use crate::engine::{Progress, Tuning};
use crate::error::{Error, Result, Status};
use crate::file::layout::Runs;
use crate::place::{Buffer, Memory};
use crate::remote::upload::{self, Dest, Upload};
use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

/// A file being written: the open file, where the save starts in it, and its name for messages.
pub(super) struct Out<'a> {
    pub file: &'a File,
    pub base: u64,
    pub display: String,
}

/// The tuning a save uses: the writer's defaults where the caller left zeros.
pub(super) fn tuning(opts: &WriteOptions) -> Tuning {
    let t = opts.tuning;
    Tuning {
        threads: t.threads,
        chunk: if t.chunk == 0 { DEFAULT_WRITE_CHUNK } else { t.chunk.max(4096) },
        staging: if t.staging == 0 { DEFAULT_WRITE_STAGING } else { t.staging.max(4096) },
        queue_depth: t.queue_depth,
    }
    .resolved()
}

/// Where a piece's bytes are, resolved for the data phase (buffers locked).
enum Bytes<'a> {
    Host(&'a [u8]),
    View(&'a crate::file::View),
    Cuda(&'a crate::device::cuda::DeviceMemory),
}

/// One piece to write: its file, where its tensor starts in it, its runs (None: one run, the whole tensor)
/// and its bytes.
struct Job<'a> {
    out: usize,
    /// Absolute offset of the tensor's first byte in the file.
    base: u64,
    runs: Option<Runs>,
    nbytes: u64,
    bytes: Bytes<'a>,
    what: String,
}

impl Job<'_> {
    /// The writes placing packed bytes `[off, off + src.len())` of this piece.
    fn scatter<'s>(&self, off: u64, src: &'s [u8], into: &mut Vec<Write<'s>>) {
        match &self.runs {
            None => into.push(Write { offset: self.base + off, src }),
            Some(r) => {
                for (toff, poff, n) in r.pieces(off, src.len() as u64) {
                    into.push(Write { offset: self.base + toff, src: &src[poff as usize..(poff + n) as usize] });
                }
            }
        }
    }

    /// The first file offset the piece touches (for the write order).
    fn first(&self) -> u64 {
        self.base + self.runs.as_ref().map_or(0, |r| r.start)
    }
}

/// The runs of a piece in its tensor (None for a whole tensor).
fn piece_runs(d: &Decl, p: &Piece, what: &str) -> Result<Option<Runs>> {
    let whole = p.start.iter().all(|&s| s == 0) && p.len == d.shape;
    if whole {
        return Ok(None);
    }
    let strides = c_strides(&d.shape);
    let bits = d.dtype.bits() as u64;
    let start_elems: u64 = p.start.iter().zip(&strides).map(|(s, st)| s * st).sum();
    Runs::new(&p.len, &strides, bits, start_elems * bits, &|| what.to_string()).map(Some)
}

/// C-order element strides of `shape` (the tensor is not empty, so they fit).
fn c_strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Locks each distinct buffer source once (a buffer given for two tensors is locked once).
fn lock_buffers(decls: &[Decl]) -> Vec<(*const std::sync::Mutex<Buffer>, MutexGuard<'_, Buffer>)> {
    let mut guards: Vec<(*const std::sync::Mutex<Buffer>, MutexGuard<'_, Buffer>)> = Vec::new();
    for d in decls {
        for p in &d.pieces {
            if let Source::Buffer(b) = &p.source {
                let key = std::sync::Arc::as_ptr(b);
                if !guards.iter().any(|(k, _)| *k == key) {
                    guards.push((key, b.lock().unwrap_or_else(|e| e.into_inner())));
                }
            }
        }
    }
    guards
}

/// The jobs of every piece with bytes, in file order.
fn jobs<'a>(
    decls: &'a [Decl],
    layout: &Layout,
    outs: &[Out<'_>],
    guards: &'a [(*const std::sync::Mutex<Buffer>, MutexGuard<'a, Buffer>)],
) -> Result<Vec<Job<'a>>> {
    let mut jobs = Vec::new();
    for (i, d) in decls.iter().enumerate() {
        let (part, off) = layout.placement[i];
        let base = outs[part].base + layout.parts[part].data_start() + off;
        for p in &d.pieces {
            let what = format!("tensor '{}' (piece at {:?})", d.name.escape_debug(), p.start);
            let nbytes = super::piece_bytes(d, p);
            if nbytes == 0 {
                continue;
            }
            let bytes = match &p.source {
                Source::View(v) => Bytes::View(v),
                Source::Bytes(b) => Bytes::Host((**b).as_ref()),
                Source::Raw(r) => Bytes::Host(r.as_slice()),
                Source::Buffer(b) => {
                    let key = std::sync::Arc::as_ptr(b);
                    let g = &guards.iter().find(|(k, _)| *k == key).expect("locked above").1;
                    match g.memory() {
                        Memory::Cuda(m) => Bytes::Cuda(m),
                        _ => Bytes::Host(g.host_bytes().expect("host memory")),
                    }
                }
            };
            jobs.push(Job { out: part, base, runs: piece_runs(d, p, &what)?, nbytes, bytes, what });
        }
    }
    jobs.sort_by_key(|j| (j.out, j.first()));
    Ok(jobs)
}

/// Starts the writeback of each wave and waits for old ones beyond a window (durable saves only).
struct Pacer {
    on: bool,
    window: u64,
    outstanding: u64,
    started: VecDeque<(usize, u64, u64)>,
}

impl Pacer {
    fn new(on: bool, window: u64) -> Pacer {
        Pacer { on, window, outstanding: 0, started: VecDeque::new() }
    }

    fn wrote(&mut self, outs: &[Out<'_>], out: usize, lo: u64, hi: u64) -> Result<()> {
        if !self.on || hi <= lo {
            return Ok(());
        }
        start_writeback(outs[out].file, lo, hi - lo);
        self.started.push_back((out, lo, hi));
        self.outstanding += hi - lo;
        while self.outstanding > self.window {
            let (o, lo, hi) = self.started.pop_front().expect("outstanding bytes");
            self.outstanding -= hi - lo;
            wait_writeback(outs[o].file, lo, hi - lo)
                .map_err(|e| crate::os::io_error(format!("{}: writing back bytes {lo}..{hi}", outs[o].display), &e))?;
        }
        Ok(())
    }
}

/// The writes of a wave, and the range they cover.
fn flush(outs: &[Out<'_>], out: usize, writes: &mut Vec<Write<'_>>, t: &Tuning, pacer: &mut Pacer) -> Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    let lo = writes.iter().map(|w| w.offset).min().unwrap_or(0);
    let hi = writes.iter().map(|w| w.offset + w.src.len() as u64).max().unwrap_or(0);
    super::kill_point();
    write_many(outs[out].file, writes, t).map_err(|f: WriteFailure| {
        let w = &writes[f.index];
        crate::os::io_error(
            format!("{}: writing {} bytes at offset {}", outs[out].display, w.src.len(), w.offset),
            &f.error,
        )
    })?;
    writes.clear();
    pacer.wrote(outs, out, lo, hi)
}

/// Writes every piece of `decls` into `outs` (one per part of `layout`), reporting to `progress`; returns the
/// bytes written.
pub(super) fn write_pieces(
    decls: &[Decl],
    layout: &Layout,
    outs: &[Out<'_>],
    opts: &WriteOptions,
    progress: &mut Progress<'_>,
) -> Result<u64> {
    let t = tuning(opts);
    let guards = lock_buffers(decls);
    let jobs = jobs(decls, layout, outs, &guards)?;
    // Host waves of two chunks: the kernel starts writing the first one back after a few milliseconds, and
    // the disk is kept busy from then on; at most a window of 8 waves (at least 64 MiB) waits for writeback.
    let wave_limit = (t.chunk as u64).saturating_mul(2);
    let mut pacer = Pacer::new(opts.durable, wave_limit.saturating_mul(8).max(64 << 20));
    let mut done = 0u64;
    let mut i = 0usize;
    while i < jobs.len() {
        match jobs[i].bytes {
            Bytes::Host(_) => {
                // A wave of host pieces of one file, up to the limit in bytes.
                let out = jobs[i].out;
                let mut writes: Vec<Write<'_>> = Vec::new();
                let mut bytes = 0u64;
                while i < jobs.len() && jobs[i].out == out {
                    let Bytes::Host(src) = jobs[i].bytes else { break };
                    let j = &jobs[i];
                    for (k, c) in src.chunks(t.chunk).enumerate() {
                        j.scatter((k * t.chunk) as u64, c, &mut writes);
                        bytes += c.len() as u64;
                        if bytes >= wave_limit {
                            flush(outs, out, &mut writes, &t, &mut pacer)?;
                            done += bytes;
                            bytes = 0;
                            progress.at(done)?;
                        }
                    }
                    i += 1;
                }
                flush(outs, out, &mut writes, &t, &mut pacer)?;
                done += bytes;
                progress.at(done)?;
            }
            Bytes::View(_) => {
                let end = (i..jobs.len()).find(|&k| !matches!(jobs[k].bytes, Bytes::View(_))).unwrap_or(jobs.len());
                done = views(&jobs[i..end], outs, &t, &mut pacer, progress, done)?;
                i = end;
            }
            Bytes::Cuda(m) => {
                let j = &jobs[i];
                let dev_tuning = Tuning { chunk: opts.tuning.chunk, staging: t.staging, ..t };
                let mut consume = |off: u64, bytes: &[u8]| -> Result<()> {
                    let mut w: Vec<Write<'_>> = Vec::new();
                    j.scatter(off, bytes, &mut w);
                    flush(outs, j.out, &mut w, &t, &mut pacer)?;
                    done += bytes.len() as u64;
                    progress.at(done)
                };
                crate::engine::drain::device_to_host_slabs(m, 0, j.nbytes as usize, &dev_tuning, &mut consume)
                    .map_err(|e| e.context(format!("{}: {}", outs[j.out].display, j.what)))?;
                i += 1;
            }
        }
    }
    Ok(done)
}

/// The view pieces `jobs`: read in chunks into bounce buffers (the staging size in all), several chunks at
/// once on `threads` threads when they are large, then written.
fn views(
    jobs: &[Job<'_>],
    outs: &[Out<'_>],
    t: &Tuning,
    pacer: &mut Pacer,
    progress: &mut Progress<'_>,
    mut done: u64,
) -> Result<u64> {
    let chunk = t.chunk as u64;
    let slots = (t.staging / t.chunk).max(1);
    // Every (job, packed offset, length) chunk, in order.
    let mut chunks: Vec<(usize, u64, u64)> = Vec::new();
    for (k, j) in jobs.iter().enumerate() {
        let mut off = 0u64;
        while off < j.nbytes {
            let n = (j.nbytes - off).min(chunk);
            chunks.push((k, off, n));
            off += n;
        }
    }
    let mut bufs: Vec<Vec<u8>> = (0..slots.min(chunks.len())).map(|_| Vec::new()).collect();
    let mut at = 0usize;
    while at < chunks.len() {
        // A wave: up to `slots` chunks of one file.
        let out = jobs[chunks[at].0].out;
        let mut n = 0usize;
        while at + n < chunks.len() && n < slots && jobs[chunks[at + n].0].out == out {
            n += 1;
        }
        let wave = &chunks[at..at + n];
        for (b, &(_, _, len)) in bufs.iter_mut().zip(wave) {
            b.resize(len as usize, 0);
        }
        let bytes: u64 = wave.iter().map(|c| c.2).sum();
        let read = |(b, &(k, off, _)): (&mut Vec<u8>, &(usize, u64, u64))| -> Result<()> {
            let Bytes::View(v) = jobs[k].bytes else { unreachable!("a view job") };
            v.read_at(off, b).map_err(|e| e.context(format!("reading the source of {}", jobs[k].what)))
        };
        let threads = t.threads.min(n);
        if threads <= 1 || bytes < (4 << 20) {
            for pair in bufs.iter_mut().zip(wave) {
                read(pair)?;
            }
        } else {
            let queue = std::sync::Mutex::new(bufs.iter_mut().zip(wave));
            let first: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);
            let work = || loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some(pair) = next else { return };
                if let Err(e) = read(pair) {
                    first.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                    return;
                }
            };
            std::thread::scope(|s| {
                for _ in 1..threads {
                    s.spawn(work);
                }
                work();
            });
            if let Some(e) = first.into_inner().unwrap_or_else(|p| p.into_inner()) {
                return Err(e);
            }
        }
        let mut writes: Vec<Write<'_>> = Vec::new();
        for (b, &(k, off, _)) in bufs.iter().zip(wave) {
            jobs[k].scatter(off, b, &mut writes);
        }
        flush(outs, out, &mut writes, t, pacer)?;
        done += bytes;
        progress.at(done)?;
        at += n;
    }
    Ok(done)
}

/// A save to a path (one process): stage every file, write the headers, then the data, then the index;
/// commit the parts, then the index; sync the directory. The old set's parts that the new set does not
/// name are removed after the commit.
pub(super) fn finish_path(
    path: &Path,
    display: &str,
    decls: &[Decl],
    layout: &Layout,
    opts: &WriteOptions,
    progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
) -> Result<Summary> {
    let (dir, _) = split(path)?;
    // A set commits as a whole: saves of one set take turns (the lock is held until the old set's files are gone).
    let _set = layout.index.as_ref().map(|(name, _)| lock_set(&dir, name)).transpose()?;
    let mut staged = stage(&dir, layout, None)?;
    super::kill_point();
    let mut written = 0u64;
    for (s, p) in staged.iter().zip(&layout.parts) {
        write_exact(s.file(), 0, &p.header)
            .map_err(|e| crate::os::io_error(format!("{}: writing the header", s.target.display()), &e))?;
        written += p.header.len() as u64;
        super::kill_point();
    }
    let total: u64 = decls.iter().flat_map(|d| d.pieces.iter().map(move |p| super::piece_bytes(d, p))).sum();
    let mut progress = Progress::new(progress, total);
    let outs: Vec<Out<'_>> =
        staged.iter().map(|s| Out { file: s.file(), base: 0, display: s.target.display().to_string() }).collect();
    written += write_pieces(decls, layout, &outs, opts, &mut progress)?;
    drop(outs);
    progress.finish()?;
    let index = stage_index(&dir, layout, None)?;
    super::kill_point();
    written += layout.index.as_ref().map_or(0, |(_, b)| b.len() as u64);
    commit(&dir, &mut staged, index, layout, opts.durable)
        .map_err(|e| e.context(format!("{display}: committing the save")))?;
    Ok(summary(&dir, layout, written, decls.len()))
}

/// Makes the staged file of every part (removing stale ones first).
pub(super) fn stage(dir: &Path, layout: &Layout, tag: Option<&str>) -> Result<Vec<Staged>> {
    // Staged files the current index names (a set committed through its staged names) are its data: kept.
    let keep = layout.index.as_ref().map(|(n, _)| set_files(&dir.join(n))).unwrap_or_default();
    let mut staged = Vec::with_capacity(layout.parts.len());
    for p in &layout.parts {
        remove_stale(dir, &p.file_name, &keep);
        staged.push(Staged::create(&dir.join(&p.file_name), p.file_len(), tag)?);
    }
    if let Some((name, _)) = &layout.index {
        remove_stale(dir, name, &keep);
    }
    Ok(staged)
}

/// The staged index, written (None for a single file).
pub(super) fn stage_index(dir: &Path, layout: &Layout, tag: Option<&str>) -> Result<Option<Staged>> {
    let Some((name, bytes)) = &layout.index else { return Ok(None) };
    let s = Staged::create(&dir.join(name), bytes.len() as u64, tag)?;
    write_exact(s.file(), 0, bytes)
        .map_err(|e| crate::os::io_error(format!("{}: writing the index", s.target.display()), &e))?;
    Ok(Some(s))
}

/// Commits a save: every file synced first (when durable), then renamed over its target, the index last; the
/// old set's files that the new one does not name are removed afterwards.
///
/// A set whose part names are those of the set it replaces (the same number of parts) cannot be replaced by
/// renaming parts then the index: a process killed between the two would leave new parts under the old
/// index. So the new set is committed through its staged names first: each staged part gets a second name
/// (a hard link), an index naming the staged files is renamed over the index (from then on readers get the
/// complete new set), each second name is renamed over its part, the final index over that one, and the
/// staged names are removed. Killed at any point, the index names either the complete old set or the complete
/// new one; the next save keeps staged files the current index names and removes them once it has replaced
/// that index. Where the file system has no hard links, the parts and then the index are renamed (the window
/// between them is then open: documented in the README).
pub(super) fn commit(
    dir: &Path,
    parts: &mut [Staged],
    index: Option<Staged>,
    layout: &Layout,
    durable: bool,
) -> Result<()> {
    // Every file's bytes on storage before any rename, so no rename can expose bytes that are not.
    if durable {
        for s in parts.iter() {
            s.sync()?;
        }
        if let Some(i) = &index {
            i.sync()?;
        }
    }
    super::kill_point();
    let old_files = index.as_ref().map(|i| set_files(&i.target)).unwrap_or_default();
    let collide = parts.iter().any(|s| old_files.iter().any(|o| s.target.file_name().is_some_and(|n| n == o.as_str())));
    let mut index = index;
    if collide {
        if let Some(links) = link_all(parts) {
            let mut idx = index.take().expect("a set has an index");
            switch_through_staged_names(dir, parts, &mut idx, links, layout, durable)?;
            remove_old(dir, &old_files, layout, parts);
            return Ok(());
        }
    }
    for s in parts.iter_mut() {
        s.commit(false)?;
        super::kill_point();
    }
    if let Some(mut i) = index {
        // The parts' renames are durable before the index names them.
        if durable {
            sync_dir(dir)?;
        }
        i.commit(false)?;
        super::kill_point();
    }
    if durable {
        sync_dir(dir)?;
    }
    super::kill_point();
    remove_old(dir, &old_files, layout, parts);
    Ok(())
}

/// A second name for every staged part; `None` (and no second name left) where the file system refuses.
fn link_all(parts: &[Staged]) -> Option<Vec<PathBuf>> {
    let mut links = Vec::with_capacity(parts.len());
    for s in parts {
        match s.link_aside() {
            Ok(l) => links.push(l),
            Err(_) => {
                for l in links {
                    let _ = std::fs::remove_file(l);
                }
                return None;
            }
        }
    }
    Some(links)
}

/// The set commit through staged names (see [`commit`]).
fn switch_through_staged_names(
    dir: &Path,
    parts: &mut [Staged],
    index: &mut Staged,
    links: Vec<PathBuf>,
    layout: &Layout,
    durable: bool,
) -> Result<()> {
    let (name, bytes) = layout.index.as_ref().expect("a set has an index");
    // The index that names the staged files.
    let mut doc: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Error::new(Status::Internal, format!("the index: {e}")))?;
    if let Some(map) = doc.get_mut("weight_map").and_then(|m| m.as_object_mut()) {
        for v in map.values_mut() {
            if let Some(s) = parts
                .iter()
                .find(|s| s.target.file_name().is_some_and(|n| Some(n) == v.as_str().map(std::ffi::OsStr::new)))
            {
                *v = serde_json::Value::String(s.temp_file_name());
            }
        }
    }
    let mut mid_bytes = serde_json::to_vec_pretty(&doc).expect("serialising JSON values");
    mid_bytes.push(b'\n');
    let mut mid = Staged::create(&dir.join(name), mid_bytes.len() as u64, None)?;
    write_exact(mid.file(), 0, &mid_bytes)
        .map_err(|e| crate::os::io_error(format!("{}: writing the index", mid.target.display()), &e))?;
    mid.commit(durable)?;
    if durable {
        sync_dir(dir)?;
    }
    super::kill_point();
    // Readers now get the new set through its staged names; the parts take their own names.
    for (s, link) in parts.iter_mut().zip(links) {
        s.close_for_rename();
        super::staged::rename_over(&link, &s.target)?;
        super::kill_point();
    }
    if durable {
        sync_dir(dir)?;
    }
    index.commit(false)?;
    if durable {
        sync_dir(dir)?;
    }
    super::kill_point();
    for s in parts.iter_mut() {
        s.placed();
        let _ = std::fs::remove_file(&s.temp);
    }
    Ok(())
}

/// Removes the files the old index named that the new set does not (old parts, and staged names of a set
/// committed through them).
fn remove_old(dir: &Path, old_files: &[String], layout: &Layout, parts: &[Staged]) {
    let new: Vec<&str> = layout.parts.iter().map(|p| p.file_name.as_str()).collect();
    for old in old_files {
        if !new.contains(&old.as_str()) && !parts.iter().any(|s| s.temp_file_name() == *old) {
            let _ = std::fs::remove_file(dir.join(old));
        }
    }
}

/// The files an existing index at `path` names (plain file names of parts or of staged files only).
fn set_files(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
    let mut names: Vec<String> = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .map(|m| m.values().filter_map(|f| f.as_str()).map(str::to_string).collect())
        .unwrap_or_default();
    names.sort();
    names.dedup();
    names.retain(|n| {
        !n.contains('/') && !n.contains('\\') && (n.ends_with(".safetensors") || n.ends_with(super::staged::SUFFIX))
    });
    names
}

pub(super) fn summary(dir: &Path, layout: &Layout, written: u64, tensors: usize) -> Summary {
    let parts: Vec<PathBuf> = layout.parts.iter().map(|p| dir.join(&p.file_name)).collect();
    let index = layout.index.as_ref().map(|(n, _)| dir.join(n));
    let file_bytes = layout.parts.iter().map(PartLayout::file_len).sum::<u64>()
        + layout.index.as_ref().map_or(0, |(_, b)| b.len() as u64);
    Summary { parts, index, file_bytes, written, tensors }
}

/// A save into a descriptor (see [`super::Writer::to_file`]).
pub(super) fn finish_fd(
    file: &File,
    decls: &[Decl],
    layout: &Layout,
    opts: &WriteOptions,
    progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
) -> Result<Summary> {
    use std::io::Seek;
    let part = &layout.parts[0];
    let total: u64 = decls.iter().map(|d| d.nbytes).sum();
    let mut progress = Progress::new(progress, total);
    let mut f = file;
    let written = match f.stream_position() {
        Ok(base) => {
            write_exact(file, base, &part.header)
                .map_err(|e| crate::os::io_error("<descriptor>: writing the header".to_string(), &e))?;
            let outs = [Out { file, base, display: "<descriptor>".to_string() }];
            let n = part.header.len() as u64 + write_pieces(decls, layout, &outs, opts, &mut progress)?;
            f.seek(std::io::SeekFrom::Start(base + part.file_len()))
                .map_err(|e| crate::os::io_error("<descriptor>: seeking past the save", &e))?;
            n
        }
        Err(_) => sequential(file, decls, layout, opts, &mut progress)?,
    };
    progress.finish()?;
    if opts.durable {
        if let Err(e) = file.sync_all() {
            // Pipes, sockets and character devices cannot be synced: nothing to make durable there.
            if e.kind() != std::io::ErrorKind::InvalidInput {
                return Err(crate::os::io_error("<descriptor>: fsync", &e));
            }
        }
    }
    Ok(Summary { parts: Vec::new(), index: None, file_bytes: part.file_len(), written, tensors: decls.len() })
}

/// A save written in order, for a descriptor that cannot seek (a pipe): whole tensors only.
fn sequential(
    file: &File,
    decls: &[Decl],
    layout: &Layout,
    opts: &WriteOptions,
    progress: &mut Progress<'_>,
) -> Result<u64> {
    use std::io::Write as _;
    let part = &layout.parts[0];
    check_whole(decls, part, "<descriptor>", "a descriptor that cannot seek (a pipe)")?;
    let mut out = file;
    let mut put = |b: &[u8]| out.write_all(b).map_err(|e| crate::os::io_error("<descriptor>: writing", &e));
    let mut done = 0u64;
    stream_part(decls, part, opts, progress, &mut done, &mut put)?;
    Ok(part.file_len())
}

/// `UNSUPPORTED` naming `display` and `who` when a tensor of `part` is given in pieces (a stream in file order
/// takes whole tensors: given whole, or one piece covering it).
fn check_whole(decls: &[Decl], part: &PartLayout, display: &str, who: &str) -> Result<()> {
    for &(i, _) in &part.tensors {
        let d = &decls[i];
        if d.nbytes > 0 && (d.pieces.len() != 1 || d.pieces[0].start.iter().any(|&s| s != 0)) {
            return Err(Error::new(
                Status::Unsupported,
                format!(
                    "{display}: tensor '{}' is given in {} pieces; {who} takes whole tensors only",
                    d.name.escape_debug(),
                    d.pieces.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Streams the file of `part` in order into `put`: its header, then each tensor's bytes (whole tensors,
/// checked by [`check_whole`]): host memory as it lies, views read in chunks of the tuning's size, CUDA buffers
/// drained through the pinned ring. `done` counts the tensor bytes given to `progress`.
fn stream_part(
    decls: &[Decl],
    part: &PartLayout,
    opts: &WriteOptions,
    progress: &mut Progress<'_>,
    done: &mut u64,
    put: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let t = tuning(opts);
    put(&part.header)?;
    let mut buf: Vec<u8> = Vec::new();
    let guards = lock_buffers(decls);
    for &(i, _) in &part.tensors {
        let d = &decls[i];
        let Some(p) = d.pieces.first() else { continue };
        match &p.source {
            Source::Bytes(b) => put((**b).as_ref())?,
            Source::Raw(r) => put(r.as_slice())?,
            Source::View(v) => {
                let mut off = 0u64;
                while off < d.nbytes {
                    let n = (d.nbytes - off).min(t.chunk as u64) as usize;
                    buf.resize(n, 0);
                    v.read_at(off, &mut buf)
                        .map_err(|e| e.context(format!("reading the source of tensor '{}'", d.name.escape_debug())))?;
                    put(&buf)?;
                    off += n as u64;
                }
            }
            Source::Buffer(b) => {
                let key = std::sync::Arc::as_ptr(b);
                let g = &guards.iter().find(|(k, _)| *k == key).expect("locked above").1;
                match g.memory() {
                    Memory::Cuda(m) => crate::engine::drain::device_to_host_slabs(
                        m,
                        0,
                        d.nbytes as usize,
                        &Tuning { chunk: opts.tuning.chunk, ..t },
                        &mut |_, b| put(b),
                    )?,
                    _ => put(g.host_bytes().expect("host memory"))?,
                }
            }
        }
        *done += d.nbytes;
        progress.at(*done)?;
    }
    Ok(())
}

/// A save to object storage ([`crate::remote::upload`]): each file streamed in order into its own multipart
/// upload (the same bytes a local save writes), every upload completed only once all are uploaded, then the
/// index put; on any failure every upload is aborted (a part file already completed is deleted again) and no
/// index is written. The error names the URL.
pub(super) fn finish_remote(
    dest: &Dest,
    decls: &[Decl],
    layout: &Layout,
    opts: &WriteOptions,
    progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
) -> Result<Summary> {
    let display = dest.display().to_string();
    let cfg = upload::config().map_err(|e| e.context(&display))?;
    for p in &layout.parts {
        check_whole(decls, p, &display, "an upload to object storage (a stream in file order)")?;
    }
    let total: u64 = decls.iter().map(|d| d.nbytes).sum();
    let mut progress = Progress::new(progress, total);
    let dests: Vec<Dest> = layout.parts.iter().map(|p| dest.sibling(&p.file_name)).collect();
    let index = layout.index.as_ref().map(|(name, bytes)| (dest.sibling(name), bytes));
    let mut uploads: Vec<Upload> = Vec::with_capacity(dests.len());
    let mut run = || -> Result<u64> {
        let mut done = 0u64;
        let mut written = 0u64;
        for (p, d) in layout.parts.iter().zip(&dests) {
            uploads.push(Upload::start(d, p.file_len(), &cfg)?);
            let up = uploads.last_mut().expect("just pushed");
            stream_part(decls, p, opts, &mut progress, &mut done, &mut |b| up.write(b))
                .and_then(|()| up.finish_parts())
                .map_err(|e| upload::naming(e, d.display()))?;
            written += p.file_len();
        }
        progress.finish()?;
        // Every file is uploaded: the objects appear, the parts first, then the index that names them.
        for up in uploads.iter_mut() {
            up.complete()?;
        }
        if let Some((d, bytes)) = &index {
            d.put(bytes.to_vec(), "putting the index")?;
            written += bytes.len() as u64;
        }
        Ok(written)
    };
    match run() {
        Ok(written) => Ok(Summary {
            parts: dests.iter().map(|d| PathBuf::from(d.display())).collect(),
            index: index.as_ref().map(|(d, _)| PathBuf::from(d.display())),
            file_bytes: layout.parts.iter().map(PartLayout::file_len).sum::<u64>()
                + layout.index.as_ref().map_or(0, |(_, b)| b.len() as u64),
            written,
            tensors: decls.len(),
        }),
        Err(e) => {
            for (up, d) in uploads.iter_mut().zip(&dests) {
                if up.is_completed() {
                    d.delete();
                } else {
                    up.abort();
                }
            }
            Err(upload::naming(e, &display))
        }
    }
}
