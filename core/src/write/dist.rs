//! A save written by the ranks of a job together (MPI, `jax.distributed`): the reverse of shard-on-read.
//!
//! Every rank declares the same tensors with their global shapes and the same metadata (so every rank computes
//! the same layout, and the same digest of it), and adds the pieces it holds — each box of each tensor once
//! in the whole job (JAX: the shards whose `replica_id` is 0; MPI: the positions that are first along the
//! axes a tensor is replicated over). `finish` is then collective, in four steps, each closed by the
//! caller's agreement callback ([`super::Agree`]: every rank says whether it succeeded and learns whether all
//! did):
//!
//! 1. local checks (the layout, every piece inside its tensor, no piece overlapping another of this rank);
//! 2. rank 0 removes stale staged files, stages every file of the save under a name derived from the layout's
//!    digest (`.<file>.d<digest>.hostfirst-tmp`, in the target's directory, which every rank must see: one
//!    machine, or a shared file system) and writes the headers;
//! 3. every rank opens the staged files, writes the bytes of its own pieces with positioned writes (nothing
//!    is written twice), syncs what it wrote when the save is durable, and records its pieces in a receipt
//!    (`.<file>.d<digest>.r<rank>.hostfirst-tmp`);
//! 4. rank 0 reads every receipt, checks that each names the same layout and that the pieces of all ranks
//!    cover every tensor exactly once (a byte written by two ranks, or by none, is refused: `INVALID_ARGUMENT`
//!    naming the tensor and the boxes), then commits as a one-process save does (parts, index, directory
//!    sync) and removes the receipts.
//!
//! A rank that fails says so at the next agreement: every rank then stops, rank 0 removes the staged files
//! and receipts, the failing rank returns its own error and the others `CANCELLED` ("another rank failed");
//! every target is as it was. The ranks return the same outcome after the last step.

use super::data::{commit, stage, stage_index, summary, write_pieces, Out};
use super::layout::Layout;
use super::staged::{split, temp_name, Staged};
use super::{Agree, Summary, Target, Writer};
use crate::engine::write::write_exact;
use crate::engine::Progress;
use crate::error::{Error, Result, Status};
use std::path::{Path, PathBuf};

/// One agreement: this rank's outcome so far in, everyone's out. `Ok(())` when every rank succeeded; this
/// rank's own error when it failed; `CANCELLED` when another did.
fn agree_on(agree: &mut dyn FnMut(bool) -> Result<bool>, own: Option<Error>, step: &str, rank: u32) -> Result<()> {
    let all = agree(own.is_none()).map_err(|e| e.context(format!("rank {rank}: the agreement after {step}")))?;
    match own {
        Some(e) => Err(e),
        None if all => Ok(()),
        None => Err(Error::new(
            Status::Cancelled,
            format!(
                "rank {rank}: another rank failed at {step} (its error is in its own process); nothing was replaced"
            ),
        )),
    }
}

/// The receipt of `rank` for the save whose files are in `dir` and whose first file (index, or single file) is
/// `name`.
fn receipt_path(dir: &Path, name: &str, tag: &str, rank: u32) -> PathBuf {
    dir.join(temp_name(name, &format!("{tag}.r{rank}")))
}

/// The collective finish (see the module documentation).
pub(super) fn finish(
    w: &mut Writer,
    progress: Option<&mut dyn FnMut(u64, u64) -> bool>,
    agree: Agree<'_>,
) -> Result<Summary> {
    let (rank, world) = (w.opts.rank, w.opts.world);
    let leader = rank == 0;
    let Target::Path(path) = &w.target else {
        return Err(Error::new(Status::InvalidArgument, "a save by several ranks needs a path"));
    };
    let path = path.clone();
    let what = |step: &str| format!("{}: rank {rank} of {world}: {step}", w.display);

    // 1. Local checks.
    let layout = w.layout();
    agree_on(&mut *agree, layout.as_ref().err().cloned(), "the local checks", rank)?;
    let layout = layout.expect("agreed");
    let (dir, _) = split(&path)?;
    let tag = format!("d{:016x}", layout.digest);
    let first_name = layout.index.as_ref().map_or_else(|| layout.parts[0].file_name.clone(), |(n, _)| n.clone());
    let receipts: Vec<PathBuf> = (0..world).map(|r| receipt_path(&dir, &first_name, &tag, r)).collect();
    let cleanup = |rs: &[PathBuf]| {
        for r in rs {
            let _ = std::fs::remove_file(r);
        }
    };

    // 2. Rank 0 takes the lock of a set (held until its commit is done: saves of one set take turns), stages the
    //    files and writes the headers.
    let mut staged: Vec<Staged> = Vec::new();
    let mut set_lock = None;
    let mut written = 0u64;
    let own = if leader {
        let locked = match &layout.index {
            Some((name, _)) => super::staged::lock_set(&dir, name).map(|l| set_lock = Some(l)),
            None => Ok(()),
        };
        match locked.and_then(|()| stage(&dir, &layout, Some(&tag))).and_then(|s| {
            for (f, p) in s.iter().zip(&layout.parts) {
                write_exact(f.file(), 0, &p.header)
                    .map_err(|e| crate::os::io_error(format!("{}: writing the header", f.target.display()), &e))?;
            }
            Ok(s)
        }) {
            Ok(s) => {
                staged = s;
                written += layout.parts.iter().map(|p| p.header.len() as u64).sum::<u64>();
                None
            }
            Err(e) => Some(e.context(what("staging the files"))),
        }
    } else {
        None
    };
    agree_on(&mut *agree, own, "staging the files", rank)?;

    // 3. Every rank writes its pieces and its receipt.
    let own = (|| -> Result<u64> {
        let opened: Vec<Staged> = if leader {
            Vec::new()
        } else {
            layout
                .parts
                .iter()
                .map(|p| Staged::open_existing(&dir.join(&p.file_name), &tag))
                .collect::<Result<Vec<_>>>()?
        };
        let files: &[Staged] = if leader { &staged } else { &opened };
        let outs: Vec<Out<'_>> =
            files.iter().map(|s| Out { file: s.file(), base: 0, display: s.target.display().to_string() }).collect();
        let total: u64 = w.decls.iter().flat_map(|d| d.pieces.iter().map(move |p| super::piece_bytes(d, p))).sum();
        let mut progress = Progress::new(progress, total);
        let n = write_pieces(&w.decls, &layout, &outs, &w.opts, &mut progress)?;
        progress.finish()?;
        if w.opts.durable {
            for s in files {
                s.sync()?;
            }
        }
        drop(outs);
        for s in opened {
            s.close();
        }
        std::fs::write(&receipts[rank as usize], receipt(w, &layout))
            .map_err(|e| crate::os::io_error(format!("writing {}", receipts[rank as usize].display()), &e))?;
        Ok(n)
    })();
    let own = match own {
        Ok(n) => {
            written += n;
            None
        }
        Err(e) => Some(e.context(what("writing its pieces"))),
    };
    if let Err(e) = agree_on(&mut *agree, own, "writing the pieces", rank) {
        if leader {
            cleanup(&receipts);
        }
        return Err(e);
    }

    // 4. Rank 0 checks the receipts and commits.
    let own = if leader {
        let r = check_receipts(w, &layout, &receipts).and_then(|()| {
            let index = stage_index(&dir, &layout, Some(&tag))?;
            written += layout.index.as_ref().map_or(0, |(_, b)| b.len() as u64);
            commit(&dir, &mut staged, index, &layout, w.opts.durable)
        });
        cleanup(&receipts);
        drop(staged);
        drop(set_lock.take());
        r.err().map(|e| e.context(what("committing")))
    } else {
        None
    };
    agree_on(&mut *agree, own, "the commit", rank)?;
    Ok(summary(&dir, &layout, written, w.decls.len()))
}

/// This rank's receipt: the layout's digest, its rank, and its pieces as (tensor index, start, len).
fn receipt(w: &Writer, layout: &Layout) -> Vec<u8> {
    let pieces: Vec<serde_json::Value> = w
        .decls
        .iter()
        .enumerate()
        .flat_map(|(i, d)| {
            d.pieces
                .iter()
                .filter(move |p| super::piece_bytes(d, p) > 0)
                .map(move |p| serde_json::json!([i, p.start, p.len]))
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "digest": format!("{:016x}", layout.digest),
        "rank": w.opts.rank,
        "pieces": pieces,
    }))
    .expect("serialising JSON values")
}

/// Reads every rank's receipt and checks that all name this layout and that their pieces cover every tensor
/// exactly once.
fn check_receipts(w: &Writer, layout: &Layout, receipts: &[PathBuf]) -> Result<()> {
    let digest = format!("{:016x}", layout.digest);
    // Per tensor: (rank, start, len) of every piece.
    type Boxes = Vec<(usize, Vec<u64>, Vec<u64>)>;
    let mut boxes: Vec<Boxes> = vec![Vec::new(); w.decls.len()];
    for (r, p) in receipts.iter().enumerate() {
        let text = std::fs::read(p)
            .map_err(|e| crate::os::io_error(format!("reading rank {r}'s receipt {}", p.display()), &e))?;
        let bad = |why: &str| Error::new(Status::Internal, format!("rank {r}'s receipt {}: {why}", p.display()));
        let v: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(&e.to_string()))?;
        if v.get("digest").and_then(|d| d.as_str()) != Some(digest.as_str()) {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "rank {r} declared another save (layout digest {} instead of {digest}): every rank must declare \
                     the same tensors, shapes, dtypes and metadata, in the same order",
                    v.get("digest").and_then(|d| d.as_str()).unwrap_or("?")
                ),
            ));
        }
        let nums = |x: &serde_json::Value| -> Option<Vec<u64>> { x.as_array()?.iter().map(|n| n.as_u64()).collect() };
        for piece in v.get("pieces").and_then(|p| p.as_array()).ok_or_else(|| bad("no pieces"))? {
            let (Some(i), Some(start), Some(len)) =
                (piece.get(0).and_then(|i| i.as_u64()), piece.get(1).and_then(nums), piece.get(2).and_then(nums))
            else {
                return Err(bad("a malformed piece"));
            };
            let i = i as usize;
            if i >= boxes.len() {
                return Err(bad("a piece of an unknown tensor"));
            }
            boxes[i].push((r, start, len));
        }
    }
    for (d, pieces) in w.decls.iter().zip(&boxes) {
        let mut covered = 0u64;
        for (k, (ra, sa, la)) in pieces.iter().enumerate() {
            if sa.len() != d.shape.len() || la.len() != d.shape.len() {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("rank {ra}: a piece of '{}' of another rank", d.name),
                ));
            }
            for (rb, sb, lb) in &pieces[..k] {
                if super::overlaps(sa, la, sb, lb) {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!(
                            "tensor '{}': rank {ra}'s piece at {sa:?} of {la:?} overlaps rank {rb}'s piece at {sb:?} of \
                             {lb:?}: a byte would be written twice (write each replica once)",
                            d.name.escape_debug()
                        ),
                    ));
                }
            }
            covered += super::tensor_bytes(d.dtype, la, "")?;
        }
        if covered != d.nbytes {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "tensor '{}' {} {:?}: the ranks' pieces cover {covered} of its {} bytes; every byte needs exactly \
                     one rank's piece",
                    d.name.escape_debug(),
                    d.dtype,
                    d.shape,
                    d.nbytes
                ),
            ));
        }
    }
    Ok(())
}
