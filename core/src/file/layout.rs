//! Strided layouts: where the bytes of a narrowed view lie in its file, as runs of contiguous bytes, and the
//! coalesced positioned reads that gather them into packed C order.
//!
//! A view narrowed on an inner dimension (`[start, start + len)` of dim `d > 0` of a C-order tensor) is not
//! contiguous: its bytes are `count` runs of `run` bytes, the runs `stride` bytes apart (one pair per outer
//! dimension). [`Runs`] describes that; [`Runs::pieces`] walks the runs overlapping a range of the packed
//! (C-order copy-out) bytes; [`read_packed`] reads such a range with `pread`, merging neighbouring runs into
//! one read when that costs few extra pages (see [`ReadPolicy`]).

use super::part::{Part, Source};
use crate::error::{Error, Result, Status};

/// The size of the unit in which reads are accounted: the kernel moves whole pages into the page cache.
pub const PAGE: u64 = 4096;

/// How runs are merged into reads.
///
/// Two neighbouring runs are read with one `pread` (the gap between them read and discarded) when the
/// merged read spans at most `max_over_read` times the pages its runs touch, and at most `max_read` bytes.
/// Counting in pages is what makes the rule honest about what the read costs: the kernel reads whole 4 KiB
/// pages, so a gap shorter than a page never adds a page (orbax's "4 KiB gap floor" falls out of it), while
/// a gap of many pages is refused unless the runs around it are long enough to absorb it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadPolicy {
    /// Largest ratio of pages read to pages needed in one merged read (≥ 1.0; 1.0 merges only gaps that
    /// cost no extra page). Default [`DEFAULT_MAX_OVER_READ`].
    pub max_over_read: f64,
    /// Largest merged read in bytes (a single run longer than this is still read in one piece).
    /// Default [`DEFAULT_MAX_READ`].
    pub max_read: u64,
}

/// Default over-read bound: 1.25 pages read per page needed.
///
/// Why 1.25 and not orbax's 2.0: hostfirst's targets are stated as bytes taken from the file (page-cache
/// residency), and a run that is not page aligned already costs up to two partial pages; on a warm cache a
/// `pread` costs about as much as copying one or two pages, so merging pays only for gaps of about a page
/// per few pages of data, which 1.25 allows (a gap of one page between 16 KiB runs merges; the 48 KiB gaps
/// of a 4-way dim-1 split of 64 KiB rows do not).
pub const DEFAULT_MAX_OVER_READ: f64 = 1.25;

/// Default largest merged read: 1 MiB (larger reads gain nothing per syscall and would need a larger
/// scratch buffer).
pub const DEFAULT_MAX_READ: u64 = 1 << 20;

impl Default for ReadPolicy {
    fn default() -> ReadPolicy {
        ReadPolicy { max_over_read: DEFAULT_MAX_OVER_READ, max_read: DEFAULT_MAX_READ }
    }
}

impl ReadPolicy {
    /// Checks the policy: `INVALID_ARGUMENT` for a ratio below 1 or not finite, or a zero `max_read`.
    pub fn validate(&self) -> Result<()> {
        if !(self.max_over_read.is_finite() && self.max_over_read >= 1.0) || self.max_read == 0 {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "read policy: max_over_read must be a number >= 1 (got {}) and max_read positive (got {})",
                    self.max_over_read, self.max_read
                ),
            ));
        }
        Ok(())
    }
}

/// The byte layout of a (possibly strided) view: `count()` runs of `run` bytes; run `i` starts at `start` plus
/// the mixed-radix decomposition of `i` over `outer` (outermost first) times the strides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runs {
    /// Offset of the first byte in the data section.
    pub start: u64,
    /// Bytes per run (the contiguous inner block).
    pub run: u64,
    /// (count, byte stride) of each outer dimension, outermost first; empty for a contiguous view.
    pub outer: Vec<(u64, u64)>,
}

impl Runs {
    /// Builds the runs of a view of `shape` with element `strides`, `bits` per element, first element at bit
    /// `start_bits` of the data section. The caller guarantees the view is not empty. `MISALIGNED_SLICE` when
    /// a run of a sub-byte dtype would start or end inside a byte.
    pub fn new(shape: &[u64], strides: &[u64], bits: u64, start_bits: u64, what: &dyn Fn() -> String) -> Result<Runs> {
        // Dimensions of size 1 move nothing; drop them.
        let dims: Vec<(u64, u64)> = shape.iter().zip(strides).filter(|(&n, _)| n != 1).map(|(&n, &s)| (n, s)).collect();
        // Merge the contiguous inner block into one run (in elements).
        let mut run_elems = 1u64;
        let mut k = dims.len();
        while k > 0 && dims[k - 1].1 == run_elems {
            run_elems *= dims[k - 1].0;
            k -= 1;
        }
        // Merge outer dimensions that are contiguous with each other: (a, sa), (b, sb) with sa == b * sb.
        let mut outer: Vec<(u64, u64)> = Vec::with_capacity(k);
        for &(n, s) in &dims[..k] {
            outer.push((n, s));
        }
        let mut i = outer.len();
        while i >= 2 {
            let (b, sb) = outer[i - 1];
            let (a, sa) = outer[i - 2];
            if sa == b * sb {
                outer[i - 2] = (a * b, sb);
                outer.remove(i - 1);
            }
            i -= 1;
        }
        let misaligned = || {
            Error::new(
                Status::MisalignedSlice,
                format!("{}: its rows do not start and end on byte boundaries ({bits}-bit elements)", what()),
            )
        };
        let run_bits = run_elems * bits;
        if start_bits % 8 != 0 || run_bits % 8 != 0 || outer.iter().any(|&(_, s)| (s * bits) % 8 != 0) {
            return Err(misaligned());
        }
        Ok(Runs {
            start: start_bits / 8,
            run: run_bits / 8,
            outer: outer.into_iter().map(|(n, s)| (n, s * bits / 8)).collect(),
        })
    }

    /// Number of runs.
    pub fn count(&self) -> u64 {
        self.outer.iter().map(|&(n, _)| n).product()
    }

    /// Total bytes (packed).
    pub fn nbytes(&self) -> u64 {
        self.count() * self.run
    }

    /// Data-section offset of run `i`.
    pub fn run_offset(&self, mut i: u64) -> u64 {
        let mut off = self.start;
        for &(n, s) in self.outer.iter().rev() {
            off += (i % n) * s;
            i /= n;
        }
        off
    }

    /// The (data-section offset, offset in the packed range, length) pieces covering packed bytes
    /// `[off, off + len)`, in packed order.
    pub fn pieces(&self, off: u64, len: u64) -> Pieces<'_> {
        let run = self.run.max(1);
        let first = off / run;
        let mut idx = vec![0u64; self.outer.len()];
        let mut r = first;
        for (k, &(n, _)) in self.outer.iter().enumerate().rev() {
            idx[k] = r % n;
            r /= n;
        }
        Pieces { runs: self, idx, at: self.run_offset(first), within: off - first * run, left: len, done: 0 }
    }

    /// The absolute file range `[lo, hi)` covered by the view (first byte to last byte), for a file whose
    /// data section starts at `data_start`.
    pub fn span(&self, data_start: u64) -> (u64, u64) {
        let last: u64 = self.outer.iter().map(|&(n, s)| (n - 1) * s).sum();
        (data_start + self.start, data_start + self.start + last + self.run)
    }
}

/// Iterator of [`Runs::pieces`].
pub struct Pieces<'a> {
    runs: &'a Runs,
    idx: Vec<u64>,
    /// Data offset of the current run.
    at: u64,
    /// Bytes of the current run already passed.
    within: u64,
    left: u64,
    done: u64,
}

impl Iterator for Pieces<'_> {
    type Item = (u64, u64, u64);
    fn next(&mut self) -> Option<(u64, u64, u64)> {
        if self.left == 0 {
            return None;
        }
        let n = (self.runs.run - self.within).min(self.left);
        let item = (self.at + self.within, self.done, n);
        self.left -= n;
        self.done += n;
        self.within += n;
        if self.within == self.runs.run {
            self.within = 0;
            // Odometer step over the outer dimensions, innermost first.
            for k in (0..self.idx.len()).rev() {
                let (count, stride) = self.runs.outer[k];
                self.idx[k] += 1;
                self.at += stride;
                if self.idx[k] < count {
                    break;
                }
                self.at -= stride * count;
                self.idx[k] = 0;
            }
        }
        Some(item)
    }
}

fn first_page(off: u64) -> u64 {
    off / PAGE
}

fn last_page(off: u64, len: u64) -> u64 {
    (off + len - 1) / PAGE
}

/// A merged read being built: absolute file range and the pages its pieces touch.
struct Group {
    lo: u64,
    hi: u64,
    pages: u64,
    /// (absolute file offset, offset in dst, length).
    pieces: Vec<(u64, u64, u64)>,
}

/// Merges pieces (absolute file offset, dst offset, length; in increasing file order) into reads under
/// `policy`, calling `read(lo, hi, pieces)` for each merged read.
pub fn coalesce(
    pieces: impl Iterator<Item = (u64, u64, u64)>,
    policy: &ReadPolicy,
    mut read: impl FnMut(u64, u64, &[(u64, u64, u64)]) -> Result<()>,
) -> Result<()> {
    let mut g: Option<Group> = None;
    for (src, dst, n) in pieces {
        if n == 0 {
            continue;
        }
        if let Some(cur) = g.as_mut() {
            if src >= cur.hi {
                let new_pages =
                    last_page(src, n) - first_page(src) + 1 - u64::from(first_page(src) == last_page(cur.hi - 1, 1));
                let pages = cur.pages + new_pages;
                let span_pages = last_page(src, n) - first_page(cur.lo) + 1;
                let span = src + n - cur.lo;
                if span <= policy.max_read && span_pages as f64 <= policy.max_over_read * pages as f64 {
                    cur.hi = src + n;
                    cur.pages = pages;
                    cur.pieces.push((src, dst, n));
                    continue;
                }
            }
            let done = g.take().expect("current group");
            read(done.lo, done.hi, &done.pieces)?;
        }
        g = Some(Group {
            lo: src,
            hi: src + n,
            pages: last_page(src, n) - first_page(src) + 1,
            pieces: vec![(src, dst, n)],
        });
    }
    if let Some(done) = g {
        read(done.lo, done.hi, &done.pieces)?;
    }
    Ok(())
}

/// Reads packed bytes `[off, off + dst.len())` of the layout `runs` from `part` into `dst`; returns the file
/// bytes read (for a file; the bytes copied for a memory buffer). Merged reads go through one scratch buffer
/// of at most `policy.max_read` bytes.
pub(crate) fn read_packed(
    part: &Part,
    runs: &Runs,
    off: u64,
    dst: &mut [u8],
    policy: &ReadPolicy,
    what: &dyn Fn() -> String,
) -> Result<u64> {
    let base = part.header.data_start();
    let pieces = runs.pieces(off, dst.len() as u64).map(|(src, d, n)| (base + src, d, n));
    if let Source::Memory(_) = part.source {
        for (src, d, n) in pieces {
            part.read_at(src, &mut dst[d as usize..(d + n) as usize], what)?;
        }
        return Ok(dst.len() as u64);
    }
    let mut scratch: Vec<u8> = Vec::new();
    let mut read = 0u64;
    coalesce(pieces, policy, |lo, hi, group| {
        read += hi - lo;
        if let [(src, d, n)] = group {
            return part.read_at(*src, &mut dst[*d as usize..(*d + *n) as usize], what);
        }
        let len = (hi - lo) as usize;
        if scratch.len() < len {
            scratch.resize(len, 0);
        }
        part.read_at(lo, &mut scratch[..len], what)?;
        for &(src, d, n) in group {
            let s = (src - lo) as usize;
            dst[d as usize..(d + n) as usize].copy_from_slice(&scratch[s..s + n as usize]);
        }
        Ok(())
    })?;
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::view::c_strides;

    type Piece = (u64, u64, u64);

    #[test]
    fn contiguous_is_one_run() {
        let r = Runs::new(&[4, 6], &c_strides(&[4, 6]), 32, 0, &|| "t".into()).unwrap();
        assert_eq!(r, Runs { start: 0, run: 96, outer: vec![] });
        assert_eq!(r.count(), 1);
    }

    #[test]
    fn inner_narrow_runs_and_pieces() {
        // [4, 6] f32, columns 2..5: 4 runs of 12 bytes, 24 apart, starting at byte 8.
        let r = Runs::new(&[4, 3], &[6, 1], 32, 2 * 32, &|| "t".into()).unwrap();
        assert_eq!(r, Runs { start: 8, run: 12, outer: vec![(4, 24)] });
        let p: Vec<_> = r.pieces(0, 48).collect();
        assert_eq!(p, vec![(8, 0, 12), (32, 12, 12), (56, 24, 12), (80, 36, 12)]);
        // A packed range starting and ending inside runs.
        let p: Vec<_> = r.pieces(5, 20).collect();
        assert_eq!(p, vec![(13, 0, 7), (32, 7, 12), (56, 19, 1)]);
        assert_eq!(r.span(100), (108, 100 + 80 + 12));
    }

    #[test]
    fn outer_dims_merge_and_odometer_carries() {
        // [2, 3, 4] narrowed to [2, 3, 2] (cols 1..3): dims 0 and 1 merge into 6 runs of 2 elements.
        let r = Runs::new(&[2, 3, 2], &[12, 4, 1], 8, 8, &|| "t".into()).unwrap();
        assert_eq!(r.outer, vec![(6, 4)]);
        // [2, 3, 4] narrowed on dim 1 (rows 1..3) and dim 2 (1..3): two outer dims that do not merge.
        let r = Runs::new(&[2, 2, 2], &[12, 4, 1], 8, 8 * (4 + 1), &|| "t".into()).unwrap();
        assert_eq!(r.outer, vec![(2, 12), (2, 4)]);
        let offs: Vec<u64> = r.pieces(0, 8).map(|p| p.0).collect();
        assert_eq!(offs, vec![5, 9, 17, 21]);
        assert_eq!((0..4).map(|i| r.run_offset(i)).collect::<Vec<_>>(), offs);
    }

    #[test]
    fn sub_byte_runs_must_be_whole_bytes() {
        // F4 [4, 4]: columns 0..2 are 1-byte runs 2 bytes apart; columns 1..2 start inside a byte.
        assert!(Runs::new(&[4, 2], &[4, 1], 4, 0, &|| "t".into()).is_ok());
        let e = Runs::new(&[4, 1], &[4, 1], 4, 4, &|| "t".into()).unwrap_err();
        assert_eq!(e.status(), Status::MisalignedSlice);
    }

    fn groups(pieces: &[(u64, u64, u64)], policy: &ReadPolicy) -> Vec<(u64, u64, usize)> {
        let mut out = Vec::new();
        coalesce(pieces.iter().copied(), policy, |lo, hi, g| {
            out.push((lo, hi, g.len()));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn coalescing_merges_sub_page_gaps_and_respects_the_bound() {
        let p = ReadPolicy::default();
        // 16-byte runs 64 bytes apart: every gap is under a page, one read.
        let small: Vec<_> = (0..100).map(|i| (i * 64, i * 16, 16)).collect();
        assert_eq!(groups(&small, &p), vec![(0, 99 * 64 + 16, 100)]);
        // 16 KiB runs 64 KiB apart (a 4-way dim-1 split of 64 KiB rows): never merged.
        let big: Vec<_> = (0..8).map(|i| (i * 65536, i * 16384, 16384)).collect();
        assert_eq!(groups(&big, &p).len(), 8);
        // 2.0 merges 32 KiB runs 64 KiB apart (span 96 KiB for 64 KiB needed = 1.5).
        let half: Vec<_> = (0..2).map(|i| (i * 65536, i * 32768, 32768)).collect();
        assert_eq!(groups(&half, &ReadPolicy { max_over_read: 2.0, ..p }).len(), 1);
        assert_eq!(groups(&half, &p).len(), 2);
        // max_read caps a merged read.
        let capped = groups(&small, &ReadPolicy { max_read: 640, ..p });
        assert!(capped.iter().all(|&(lo, hi, _)| hi - lo <= 640), "{capped:?}");
        assert_eq!(capped.iter().map(|g| g.2).sum::<usize>(), 100);
    }

    proptest::proptest! {
        #[test]
        fn merged_reads_stay_within_the_page_bound(
            runs in proptest::collection::vec((0u64..20_000, 1u64..20_000), 1..40),
            ratio in 1.0f64..3.0,
        ) {
            // Increasing, non-overlapping pieces from (gap, len) pairs.
            let mut at = 0u64;
            let mut dst = 0u64;
            let mut pieces = Vec::new();
            for (gap, len) in runs {
                at += gap;
                pieces.push((at, dst, len));
                at += len;
                dst += len;
            }
            let policy = ReadPolicy { max_over_read: ratio, max_read: 1 << 20 };
            let mut got: Vec<(u64, u64, Vec<Piece>)> = Vec::new();
            coalesce(pieces.iter().copied(), &policy, |lo, hi, g| {
                got.push((lo, hi, g.to_vec()));
                Ok(())
            }).unwrap();
            let mut covered = 0u64;
            for (lo, hi, g) in got {
                covered += g.iter().map(|p| p.2).sum::<u64>();
                let need: std::collections::BTreeSet<u64> =
                    g.iter().flat_map(|&(s, _, n)| first_page(s)..=last_page(s, n)).collect();
                let span = last_page(lo, hi - lo) - first_page(lo) + 1;
                if g.len() > 1 {
                    proptest::prop_assert!(span as f64 <= ratio * need.len() as f64 + 1e-9);
                    proptest::prop_assert!(hi - lo <= policy.max_read);
                }
                proptest::prop_assert!(g.iter().all(|&(s, _, n)| lo <= s && s + n <= hi));
            }
            proptest::prop_assert_eq!(covered, dst);
        }
    }
}
