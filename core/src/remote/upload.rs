//! Saving to object storage (issue 46, part 4): the writer's `finish` streams each file of a save — header,
//! then data in layout order, the same bytes a local save writes — into a multipart upload, cut into parts of
//! [`UploadConfig::part_size`] bytes with at most [`UploadConfig::concurrency`] parts in flight: the bytes a
//! save holds at once are bounded by part size × (concurrency + 1), never the whole file.
//!
//! - **The object appears only when the save completes**: the upload is completed (S3's
//!   CompleteMultipartUpload) after every byte of every file of the save is uploaded; a split set completes its
//!   part files, then puts the index, so a reader never finds an index that names a missing part.
//! - **A failure aborts**: a source that fails, a cancel, a server error: every part still in flight is waited
//!   for, then every upload of the save is aborted (no object, no pending multipart upload); a part file of a
//!   set already completed when a later one fails is deleted again, and no index is written.
//! - **Configuration** is read in one place, [`config`]: `HOSTFIRST_REMOTE_PART_SIZE` (bytes, default 16 MiB,
//!   at least 5 MiB, S3's smallest part but the last) and `HOSTFIRST_REMOTE_CONCURRENCY` (parts in flight,
//!   default 8). The part size grows by itself so that no file needs more than [`MAX_PARTS`] parts.

use super::{runtime, scrub, status_of, Url};
use crate::error::{Error, Result, Status};
use object_store::path::Path as ObjectPath;
use object_store::{MultipartUpload, ObjectStore, PutPayload};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// The default part size: 16 MiB.
pub const DEFAULT_PART_SIZE: u64 = 16 << 20;
/// The smallest part size: 5 MiB (S3 refuses a smaller part unless it is the last).
pub const MIN_PART_SIZE: u64 = 5 << 20;
/// The largest part S3 takes: 5 GiB.
pub const MAX_PART_SIZE: u64 = 5 << 30;
/// The default parts in flight.
pub const DEFAULT_CONCURRENCY: usize = 8;
/// The most parts of one multipart upload (S3's limit).
pub const MAX_PARTS: u64 = 10_000;

/// How a save uploads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UploadConfig {
    /// Bytes per part (before [`part_size_for`] grows it for a large file).
    pub part_size: u64,
    /// Parts in flight at once.
    pub concurrency: usize,
}

/// The upload settings, from [`super::settings`] (the one place remote settings are read: configured by
/// `hostfirst_remote_configure`, else `HOSTFIRST_REMOTE_PART_SIZE` / `HOSTFIRST_REMOTE_CONCURRENCY`, else
/// [`DEFAULT_PART_SIZE`] / [`DEFAULT_CONCURRENCY`]). `INVALID_ARGUMENT` naming the setting for a part size under
/// 5 MiB (or over 5 GiB), or a concurrency over 256.
pub fn config() -> Result<UploadConfig> {
    use super::settings::{CONCURRENCY_ENV, PART_SIZE_ENV};
    let part_size = super::settings::part_size()?.unwrap_or(DEFAULT_PART_SIZE);
    if !(MIN_PART_SIZE..=MAX_PART_SIZE).contains(&part_size) {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "upload part size {part_size} (part_size or {PART_SIZE_ENV}): give a whole number of bytes from \
                 {MIN_PART_SIZE} to {MAX_PART_SIZE}"
            ),
        ));
    }
    let concurrency = super::settings::upload_concurrency()?.unwrap_or(DEFAULT_CONCURRENCY);
    if !(1..=256).contains(&concurrency) {
        return Err(Error::new(
            Status::InvalidArgument,
            format!(
                "upload concurrency {concurrency} (max_concurrency or {CONCURRENCY_ENV}): give a whole number of \
                 parts from 1 to 256"
            ),
        ));
    }
    Ok(UploadConfig { part_size, concurrency })
}

/// The part size a file of `file_len` bytes is uploaded with: `configured`, grown (to a whole MiB) where the
/// file would otherwise need more than [`MAX_PARTS`] parts.
pub fn part_size_for(configured: u64, file_len: u64) -> u64 {
    let need = file_len.div_ceil(MAX_PARTS);
    if need <= configured {
        configured
    } else {
        need.div_ceil(1 << 20) << 20
    }
}

/// Where a save goes: an object-store URL (s3, gs, az). http(s) is `UNSUPPORTED` (a web server takes no
/// multipart upload); a URL that does not parse is `INVALID_ARGUMENT`.
#[derive(Clone, Debug)]
pub(crate) struct Dest {
    url: Url,
}

impl Dest {
    /// Checks `text` as a save's target (no request is made).
    pub(crate) fn parse(text: &str) -> Result<Dest> {
        let url = Url::parse(text)?;
        if url.scheme == "http" || url.scheme == "https" {
            return Err(Error::new(
                Status::Unsupported,
                format!(
                    "{}: saving to an {} URL is not supported: a web server takes no multipart upload; save to \
                     s3://, gs:// or az://",
                    url.display, url.scheme
                ),
            ));
        }
        // The store is built here too, so that a configuration error shows at create, not at finish.
        url.store(&super::settings::effective()?)?;
        Ok(Dest { url })
    }

    /// The URL as messages show it.
    pub(crate) fn display(&self) -> &str {
        &self.url.display
    }

    /// The object's file name (the key's last segment).
    pub(crate) fn file_name(&self) -> &str {
        self.url.key.rsplit('/').next().unwrap_or(&self.url.key)
    }

    /// The object `name` beside this one (a part file or the index of a set).
    pub(crate) fn sibling(&self, name: &str) -> Dest {
        let key = match self.url.key.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{name}"),
            None => name.to_string(),
        };
        let mut url = self.url.clone();
        url.display = format!("{}://{}/{key}", url.scheme, url.authority);
        url.key = key;
        Dest { url }
    }

    fn store(&self) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
        self.url.store(&super::settings::effective()?)
    }

    /// Puts `bytes` as the whole object in one request (an index).
    pub(crate) fn put(&self, bytes: Vec<u8>, what: &str) -> Result<()> {
        let (store, path) = self.store()?;
        let got = runtime::run(async move { store.put(&path, PutPayload::from(bytes)).await.map(|_| ()) })
            .map_err(|e| Error::new(Status::Internal, format!("{}: {e}", self.display())))?;
        got.map_err(|e| status_of(self.display(), what, &e))
    }

    /// Deletes the object (best effort: a part file of a set whose save failed after it was completed).
    pub(crate) fn delete(&self) {
        if let Ok((store, path)) = self.store() {
            let _ = runtime::run(async move { store.delete(&path).await });
        }
    }
}

/// The outcome of one part, sent by its task: its bytes and the request's result.
type PartDone = (u64, std::result::Result<(), object_store::Error>);

/// One multipart upload in progress: bytes are appended with [`Upload::write`], cut into parts and sent with at
/// most `concurrency` in flight; [`Upload::finish_parts`] sends the last part and waits for all, then
/// [`Upload::complete`] makes the object appear. Dropped (or [`Upload::abort`]ed) before completion, the
/// upload is aborted: no object, no pending upload.
pub(crate) struct Upload {
    display: String,
    inner: Option<Box<dyn MultipartUpload>>,
    part_size: usize,
    concurrency: usize,
    buf: Vec<u8>,
    in_flight: usize,
    tx: Sender<PartDone>,
    rx: Receiver<PartDone>,
    /// Bytes this upload holds now: the part being filled and the parts in flight.
    held: Arc<AtomicU64>,
    /// The most it ever held.
    peak: Arc<AtomicU64>,
    /// Parts sent.
    pub(crate) parts: u64,
    completed: bool,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload").field("object", &self.display).field("parts", &self.parts).finish()
    }
}

impl Upload {
    /// Starts the multipart upload of `dest`, a file of `file_len` bytes, with `cfg`.
    pub(crate) fn start(dest: &Dest, file_len: u64, cfg: &UploadConfig) -> Result<Upload> {
        let (store, path) = dest.store()?;
        let got = runtime::run(async move { store.put_multipart(&path).await })
            .map_err(|e| Error::new(Status::Internal, format!("{}: {e}", dest.display())))?;
        let inner = got.map_err(|e| status_of(dest.display(), "starting the multipart upload", &e))?;
        let part = part_size_for(cfg.part_size, file_len);
        Ok(Upload::with(inner, dest.display().to_string(), part as usize, cfg.concurrency))
    }

    /// An upload over `inner` (the tests give their own).
    pub(crate) fn with(
        inner: Box<dyn MultipartUpload>,
        display: String,
        part_size: usize,
        concurrency: usize,
    ) -> Upload {
        let (tx, rx) = channel();
        Upload {
            display,
            inner: Some(inner),
            part_size: part_size.max(1),
            concurrency: concurrency.max(1),
            buf: Vec::new(),
            in_flight: 0,
            tx,
            rx,
            held: Arc::new(AtomicU64::new(0)),
            peak: Arc::new(AtomicU64::new(0)),
            parts: 0,
            completed: false,
        }
    }

    /// The most bytes this upload held at once (the part being filled and the parts in flight).
    #[cfg(test)]
    pub(crate) fn peak_held(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    fn hold(&self, n: u64) {
        let now = self.held.fetch_add(n, Ordering::Relaxed) + n;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Appends `bytes` to the object, sending every part that fills.
    pub(crate) fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            if self.buf.capacity() == 0 {
                self.buf.reserve_exact(self.part_size);
            }
            let n = (self.part_size - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..n]);
            self.hold(n as u64);
            bytes = &bytes[n..];
            if self.buf.len() == self.part_size {
                self.send()?;
            }
        }
        Ok(())
    }

    /// Waits for one part in flight; its error is the upload's.
    fn wait_one(&mut self) -> Result<()> {
        let (n, r) = self.rx.recv().map_err(|_| {
            Error::new(Status::Internal, format!("{}: a part's task ended without an answer", self.display))
        })?;
        self.in_flight -= 1;
        self.held.fetch_sub(n, Ordering::Relaxed);
        r.map_err(|e| status_of(&self.display, "uploading a part", &e))
    }

    /// Sends the part being filled, once fewer than `concurrency` parts are in flight.
    fn send(&mut self) -> Result<()> {
        while self.in_flight >= self.concurrency {
            self.wait_one()?;
        }
        let data = std::mem::take(&mut self.buf);
        let n = data.len() as u64;
        let inner = self.inner.as_mut().expect("an upload not yet ended");
        let fut = inner.put_part(PutPayload::from(data));
        let tx = self.tx.clone();
        runtime::spawn(async move {
            let _ = tx.send((n, fut.await));
        })
        .map_err(|e| Error::new(Status::Internal, format!("{}: {e}", self.display)))?;
        self.in_flight += 1;
        self.parts += 1;
        Ok(())
    }

    /// Sends the last part (an empty object gets one empty part) and waits for every part in flight.
    pub(crate) fn finish_parts(&mut self) -> Result<()> {
        if !self.buf.is_empty() || self.parts == 0 {
            self.send()?;
        }
        while self.in_flight > 0 {
            self.wait_one()?;
        }
        Ok(())
    }

    /// Completes the upload: the object appears.
    pub(crate) fn complete(&mut self) -> Result<()> {
        let mut inner = self.inner.take().expect("an upload not yet ended");
        let got = runtime::run(async move {
            let r = inner.complete().await;
            (inner, r)
        })
        .map_err(|e| Error::new(Status::Internal, format!("{}: {e}", self.display)))?;
        self.inner = Some(got.0);
        got.1.map_err(|e| status_of(&self.display, "completing the multipart upload", &e))?;
        self.completed = true;
        Ok(())
    }

    /// Whether [`Upload::complete`] succeeded.
    pub(crate) fn is_completed(&self) -> bool {
        self.completed
    }

    /// Aborts the upload (best effort): the parts in flight are waited for first, so none lands after the abort.
    pub(crate) fn abort(&mut self) {
        if self.completed {
            return;
        }
        while self.in_flight > 0 {
            let _ = self.wait_one();
        }
        self.buf = Vec::new();
        if let Some(mut inner) = self.inner.take() {
            let _ = runtime::run(async move { inner.abort().await });
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.abort();
    }
}

/// `e` with the object's URL in front, unless its message names it already; credentials scrubbed.
pub(crate) fn naming(e: Error, display: &str) -> Error {
    if e.message().contains(display) {
        return e;
    }
    let msg = scrub(&format!("{display}: {}", e.message()));
    Error::new(e.status(), msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The parts a stand-in upload received: (number, bytes).
    type Received = Arc<Mutex<Vec<(usize, Vec<u8>)>>>;

    /// A multipart upload that keeps its parts and answers each after a pause (so parts pile up when the
    /// uploader does not bound them), counting those in flight.
    #[derive(Debug, Default)]
    struct Slow {
        parts: Received,
        live: Arc<AtomicU64>,
        most_live: Arc<AtomicU64>,
        next: usize,
        completed: Arc<AtomicU64>,
        aborted: Arc<AtomicU64>,
    }

    #[async_trait::async_trait]
    impl MultipartUpload for Slow {
        fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
            let (parts, live, most) = (Arc::clone(&self.parts), Arc::clone(&self.live), Arc::clone(&self.most_live));
            let idx = self.next;
            self.next += 1;
            Box::pin(async move {
                let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(3)).await;
                parts.lock().unwrap().push((idx, data.iter().flat_map(|b| b.iter().copied()).collect()));
                live.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            })
        }
        async fn complete(&mut self) -> object_store::Result<object_store::PutResult> {
            self.completed.fetch_add(1, Ordering::SeqCst);
            Ok(object_store::PutResult { e_tag: None, version: None })
        }
        async fn abort(&mut self) -> object_store::Result<()> {
            self.aborted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// The bytes an upload holds at once never pass part size × (concurrency + 1), whatever the writes' sizes,
    /// and at most `concurrency` parts are in flight; the parts, in order, are the bytes written.
    #[test]
    fn an_upload_holds_at_most_part_size_times_concurrency_plus_one() {
        let slow = Slow::default();
        let (parts, most, completed) =
            (Arc::clone(&slow.parts), Arc::clone(&slow.most_live), Arc::clone(&slow.completed));
        let (part, conc) = (64 << 10, 3usize);
        let mut up = Upload::with(Box::new(slow), "s3://b/k".into(), part, conc);
        let data: Vec<u8> = (0..(5 << 20) + 12_345u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let mut at = 0usize;
        for (k, step) in [1usize, 100_000, 7, 300_000, 65_536].iter().cycle().enumerate() {
            if at == data.len() {
                break;
            }
            let n = (*step).min(data.len() - at);
            up.write(&data[at..at + n]).unwrap();
            at += n;
            assert!(k < 1_000_000);
        }
        up.finish_parts().unwrap();
        up.complete().unwrap();
        let bound = (part * (conc + 1)) as u64;
        assert!(up.peak_held() <= bound, "held {} bytes at once; the bound is {bound}", up.peak_held());
        assert!(up.peak_held() >= part as u64, "{}", up.peak_held());
        assert!(data.len() as u64 > 10 * bound, "the file is far larger than what is held");
        assert!(most.load(Ordering::SeqCst) <= conc as u64, "{} parts in flight", most.load(Ordering::SeqCst));
        assert_eq!(completed.load(Ordering::SeqCst), 1);
        let mut got = parts.lock().unwrap().clone();
        got.sort_by_key(|p| p.0);
        assert_eq!(got.len() as u64, up.parts);
        assert_eq!(got.len(), data.len().div_ceil(part));
        assert!(got[..got.len() - 1].iter().all(|p| p.1.len() == part), "every part but the last is whole");
        assert_eq!(got.into_iter().flat_map(|p| p.1).collect::<Vec<u8>>(), data);
    }

    /// An upload dropped before completion is aborted once, after its parts in flight.
    #[test]
    fn an_upload_dropped_unfinished_is_aborted() {
        let slow = Slow::default();
        let (aborted, completed, live) =
            (Arc::clone(&slow.aborted), Arc::clone(&slow.completed), Arc::clone(&slow.live));
        let mut up = Upload::with(Box::new(slow), "s3://b/k".into(), 1024, 2);
        up.write(&[7u8; 10_000]).unwrap();
        drop(up);
        assert_eq!((aborted.load(Ordering::SeqCst), completed.load(Ordering::SeqCst)), (1, 0));
        assert_eq!(live.load(Ordering::SeqCst), 0, "no part was left in flight");
    }

    #[test]
    fn the_part_size_grows_for_a_large_file_and_the_environment_is_checked() {
        use crate::remote::settings::{CONCURRENCY_ENV, PART_SIZE_ENV};
        assert_eq!(part_size_for(DEFAULT_PART_SIZE, 1 << 30), DEFAULT_PART_SIZE);
        let big = 1u64 << 40; // 1 TiB: 10,000 parts of 16 MiB are not enough
        let p = part_size_for(DEFAULT_PART_SIZE, big);
        assert!(p > DEFAULT_PART_SIZE && big.div_ceil(p) <= MAX_PARTS && p % (1 << 20) == 0, "{p}");
        // The environment: one test only touches these variables.
        std::env::set_var(PART_SIZE_ENV, (4u64 << 20).to_string());
        let e = config().unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().contains(PART_SIZE_ENV), "{}", e.message());
        std::env::set_var(PART_SIZE_ENV, (5u64 << 20).to_string());
        std::env::set_var(CONCURRENCY_ENV, "300");
        let e = config().unwrap_err();
        assert!(e.status() == Status::InvalidArgument && e.message().contains(CONCURRENCY_ENV), "{}", e.message());
        std::env::set_var(CONCURRENCY_ENV, "3");
        assert_eq!(config().unwrap(), UploadConfig { part_size: 5 << 20, concurrency: 3 });
        std::env::remove_var(PART_SIZE_ENV);
        std::env::remove_var(CONCURRENCY_ENV);
        assert_eq!(config().unwrap(), UploadConfig { part_size: DEFAULT_PART_SIZE, concurrency: DEFAULT_CONCURRENCY });
    }

    #[test]
    fn http_is_refused_as_a_target_and_siblings_sit_beside() {
        let e = Dest::parse("https://host/m.safetensors").unwrap_err();
        assert_eq!(e.status(), Status::Unsupported);
        assert!(e.message().contains("https://host/m.safetensors") && e.message().contains("https"), "{}", e.message());
        let d = Dest { url: Url::parse("s3://b/dir/m.safetensors.index.json").unwrap() };
        assert_eq!(d.file_name(), "m.safetensors.index.json");
        assert_eq!(d.sibling("m-00001-of-00002.safetensors").display(), "s3://b/dir/m-00001-of-00002.safetensors");
        let top = Dest { url: Url::parse("s3://b/m.safetensors").unwrap() };
        assert_eq!(top.sibling("x.safetensors").display(), "s3://b/x.safetensors");
    }
}
