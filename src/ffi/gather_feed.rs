//! Open gather streams, fed incrementally: `hostfirst_gather_stream_push`, `hostfirst_gather_stream_end_input`
//! and `HOSTFIRST_GATHER_STREAM_OPEN` (the `n_batches` of `hostfirst_gather_stream_start` that opens one).

use super::gather::{hostfirst_gather_stream, offsets_arg};
use super::handle;
use crate::error::{Error, Status};

/// The `n_batches` of `hostfirst_gather_stream_start` (and `_start_from_buffer`, `offsets` NULL) that starts
/// an open stream: its batches come from `hostfirst_gather_stream_push` until
/// `hostfirst_gather_stream_end_input`. (`SIZE_MAX`: no count of batches of offsets can be that large.)
pub const HOSTFIRST_GATHER_STREAM_OPEN: usize = -1isize as usize;

/// Gives an open stream (started with `n_batches = HOSTFIRST_GATHER_STREAM_OPEN`) `n_batches` more batches:
/// `offsets` holds `n_batches * batch` values (copied: the array may be freed on return; NULL is allowed
/// with `n_batches` 0), batch `j` of the call becoming the stream's batch `pushed_so_far + j`.
///
/// Each batch is checked as `hostfirst_gather_stream_start` checks its batches, before any is taken: the
/// first window past the end gives `OUT_OF_RANGE` naming the batch by its number in the stream and the offset
/// index, and nothing of this call is taken (the stream goes on with what it had). The stream's thread fills
/// pushed batches in order, up to `depth` ahead of the consumer, and waits for more input when it has filled
/// every batch pushed (it does not end). To keep it from ever pausing, keep at least `depth` batches pushed
/// beyond the ones `hostfirst_gather_stream_next` has handed out; `next` on an open stream whose pushed
/// batches have all been handed out returns `NOT_READY` at once (it cannot wait for a push that only its own
/// caller could make). A read failing in the thread ends the stream as for any stream: its error comes at the
/// `next` that would have returned that batch, and pushes after it are accepted and never filled.
///
/// The check needs neither the gather's lock nor the source's (the source was checked at the start, and its
/// length is kept), so a push never waits for the batch the thread is filling. Errors: `NULL_ARGUMENT` (stream; offsets with n_batches > 0),
/// `INVALID_HANDLE`, `INVALID_ARGUMENT` (a stream started with all its offsets, a stream whose input was
/// ended, size overflow), `OUT_OF_RANGE`, `UNAVAILABLE` (a forked child: the thread is the parent's).
/// Thread-safe; calls on one stream are serialised (a push waits for a `next` in progress on another thread).
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_push(
    stream: *mut hostfirst_gather_stream,
    offsets: *const u64,
    n_batches: usize,
) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_push", {
        let s = handle::get::<hostfirst_gather_stream>(stream, "stream")?;
        let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
        let batch = s.batch();
        let total = n_batches.checked_mul(batch).ok_or_else(|| {
            Error::new(
                Status::InvalidArgument,
                format!("gather stream: {n_batches} batches of {batch} offsets overflow"),
            )
        })?;
        let offs = offsets_arg(offsets, total)?;
        s.push(offs)
    })
}

/// Says that no more batches come to an open stream: it ends after the batches pushed so far (`next` returns
/// OK with NULL after the last). Calling it again, or on a stream started with all its offsets, changes
/// nothing. Errors: `NULL_ARGUMENT`, `INVALID_HANDLE`. Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_gather_stream_end_input(stream: *mut hostfirst_gather_stream) -> Status {
    hostfirst_boundary!("hostfirst_gather_stream_end_input", {
        let s = handle::get::<hostfirst_gather_stream>(stream, "stream")?;
        s.lock().unwrap_or_else(|e| e.into_inner()).end_input();
        Ok(())
    })
}
