//! The stream a consumer uses data on, as DLPack's `stream` argument names it (a leaf: the buffer's stream
//! handshake and the exports both use it).

use crate::error::{Error, Result, Status};

/// `CU_STREAM_LEGACY`: the legacy default stream of the current context.
pub const CU_STREAM_LEGACY: usize = 1;
/// `CU_STREAM_PER_THREAD`: the per-thread default stream of the current context.
pub const CU_STREAM_PER_THREAD: usize = 2;

/// The stream a consumer will use the data on, as the DLPack `stream` argument names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumerStream {
    /// The legacy default stream (`stream` absent / `None`, or 1).
    Legacy,
    /// The per-thread default stream (2).
    PerThread,
    /// A `CUstream` handle of the consumer (any value > 2).
    Raw(usize),
    /// The consumer synchronises itself (-1): no wait is enqueued and no release event recorded.
    NoSync,
}

impl ConsumerStream {
    /// From the DLPack `stream` argument (`None` when absent). 0 and values below -1 are `INVALID_ARGUMENT`
    /// (DLPack reserves 0; -1 is the only negative value it defines).
    pub fn from_dlpack(stream: Option<i64>) -> Result<ConsumerStream> {
        match stream {
            None | Some(1) => Ok(ConsumerStream::Legacy),
            Some(2) => Ok(ConsumerStream::PerThread),
            Some(-1) => Ok(ConsumerStream::NoSync),
            Some(v) if v > 2 => Ok(ConsumerStream::Raw(v as usize)),
            Some(v) => Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "stream {v} is not a DLPack stream value (absent or 1: legacy default stream, 2: per-thread \
                     default stream, > 2: a CUstream, -1: no synchronisation; 0 is not allowed)"
                ),
            )),
        }
    }

    /// The raw `CUstream` value to hand the driver, or `None` for [`ConsumerStream::NoSync`].
    pub fn raw(self) -> Option<usize> {
        match self {
            ConsumerStream::Legacy => Some(CU_STREAM_LEGACY),
            ConsumerStream::PerThread => Some(CU_STREAM_PER_THREAD),
            ConsumerStream::Raw(v) => Some(v),
            ConsumerStream::NoSync => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlpack_stream_values() {
        assert_eq!(ConsumerStream::from_dlpack(None).unwrap(), ConsumerStream::Legacy);
        assert_eq!(ConsumerStream::from_dlpack(Some(1)).unwrap(), ConsumerStream::Legacy);
        assert_eq!(ConsumerStream::from_dlpack(Some(2)).unwrap(), ConsumerStream::PerThread);
        assert_eq!(ConsumerStream::from_dlpack(Some(-1)).unwrap(), ConsumerStream::NoSync);
        assert_eq!(ConsumerStream::from_dlpack(Some(0x7f00)).unwrap(), ConsumerStream::Raw(0x7f00));
        for bad in [0, -2, i64::MIN] {
            assert_eq!(ConsumerStream::from_dlpack(Some(bad)).unwrap_err().status(), Status::InvalidArgument);
        }
        assert_eq!(ConsumerStream::Legacy.raw(), Some(1));
        assert_eq!(ConsumerStream::PerThread.raw(), Some(2));
        assert_eq!(ConsumerStream::NoSync.raw(), None);
    }
}
