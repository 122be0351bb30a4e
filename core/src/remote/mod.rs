//! Remote sources: safetensors files (and the other formats, and multi-file sets) read from object storage and
//! web servers by URL — `s3://bucket/key`, `gs://bucket/key`, `az://container/key`, `http(s)://host/path` —
//! with ranged GETs through the `object_store` crate. A remote object is one more source of a file beside a
//! local file and a memory buffer (`file::part::Source::Remote`): views, loads, plans, shard-on-read and
//! gathers read it through the same `read_at` as a file read with owned reads (it has no mapping).
//!
//! - **Configuration** is the environment, as the AWS CLI and `object_store` read it: `AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP=true` for a
//!   plain-http endpoint; `GOOGLE_SERVICE_ACCOUNT` (and the other `GOOGLE_*` keys) for gs://;
//!   `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY` (and the other `AZURE_*` keys) for az://.
//!   The library's own settings (retries, timeouts, concurrency, upload part size, the local cache) are read in
//!   one place, [`settings`]: what `hostfirst_remote_configure` set, else `HOSTFIRST_REMOTE_RETRIES`,
//!   `HOSTFIRST_REMOTE_TIMEOUT`, `HOSTFIRST_REMOTE_CONCURRENCY`, `HOSTFIRST_REMOTE_PART_SIZE`,
//!   `HOSTFIRST_REMOTE_CACHE`, `HOSTFIRST_REMOTE_CACHE_MAX_BYTES`, else the defaults. An open resolves them
//!   once, when it starts.
//! - **Concurrency**: a read of at least twice [`PIECE`] bytes is cut into pieces of at least [`PIECE`] bytes
//!   fetched by up to `max_concurrency` concurrent ranged GETs (the engine's threads add their own).
//! - **The local cache** ([`cache`], when a cache folder is set): data ranges are kept on disk in aligned
//!   chunks keyed by (URL without credentials, ETag, length), so a second open of an unchanged object reads its
//!   data from disk; the open's first GET still goes to the server and gives the current ETag, so a replaced
//!   object is never served from the cache, and an object without an ETag is not cached.
//! - **Opening** reads the header in at most 2 requests: a ranged GET of the first [`FIRST_READ`] bytes, which
//!   gives the object's length and ETag and usually the whole header, then one more for the rest of a larger
//!   header.
//! - **Loads** (place::arena) cut a remote object's bytes into ranged GETs of [`part_bytes`] (neighbouring
//!   tensors merged within the read policy's over-read bound) and keep [`CONCURRENCY`] of them in flight, one
//!   reader thread each; `RemoteObject::read_scatter` hands each body to its reader as it arrives, so every
//!   byte is copied once, from the client's buffer to its place.
//! - **The ETag of that first response is pinned**: every later ranged GET sends `If-Match` with it and the
//!   answer's ETag is compared too, so an object replaced while it is read gives `IO` ("changed since it was
//!   opened"), never bytes of two versions.
//! - **Errors**: 404 is `NOT_FOUND`; 403 and 401 are `PERMISSION_DENIED`; 503, 429, connection resets and cut
//!   bodies are retried with exponential backoff (object_store's retry), then `IO` naming the object; a server
//!   that answers a range request with the whole object (200 instead of 206) gives `UNSUPPORTED` naming it.
//!   Messages name the object by its URL without user info or query (no credentials), and any credential the
//!   environment holds is scrubbed from the text of the client's errors.
//! - **The runtime** (tokio) lives inside the core, built on first use; the C API stays synchronous. A child
//!   after `fork()` never touches the parent's runtime or connections: each is tagged with the process id that
//!   built it, and a child builds its own (the parent's are leaked in the child, never dropped there).

use crate::error::{Error, Result, Status};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) mod cache;
pub(crate) mod runtime;
pub mod settings;
pub mod upload;

use settings::Effective;

/// How many leading bytes the first request of an open asks for: the length prefix and, for all but the
/// largest headers, the whole header.
pub const FIRST_READ: u64 = 256 << 10;

/// The largest ranged GET of a load (boto3's default part size).
pub const MAX_PART: u64 = 8 << 20;
/// The smallest part a load's remote bytes are cut into so that [`settings::DEFAULT_CONCURRENCY`] (or the configured number of) requests stay in flight.
pub const MIN_PART: u64 = 1 << 20;

/// How many ranged GETs a load keeps in flight (one reader thread each): the `max_concurrency` setting when the
/// load starts ([`settings::effective`]; default [`settings::DEFAULT_CONCURRENCY`]).
pub fn load_concurrency() -> usize {
    settings::effective().map_or(settings::DEFAULT_CONCURRENCY, |e| e.concurrency).max(1)
}

/// The size of a load's ranged GETs for `total` remote bytes: enough parts to keep `concurrency` requests in
/// flight, each from [`MIN_PART`] to [`MAX_PART`] (neighbouring tensors are merged up to it: a load of many
/// small tensors takes few requests).
pub fn part_bytes(total: u64, concurrency: usize) -> usize {
    (total / concurrency.max(1) as u64).clamp(MIN_PART, MAX_PART) as usize
}

pub use settings::{RETRIES_ENV, TIMEOUT_ENV};

/// The smallest piece a read is cut into for concurrent requests: reads up to twice this are one request.
pub const PIECE: u64 = 8 << 20;

/// The URL schemes a path may start with to name a remote object.
const SCHEMES: &[&str] = &["s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "http", "https"];

/// Whether `path` names a remote object (`scheme://...` with a scheme of [`SCHEMES`], any case).
pub fn is_url(path: &str) -> bool {
    match path.split_once("://") {
        Some((scheme, rest)) => !rest.is_empty() && SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)),
        None => false,
    }
}

/// A remote URL taken apart.
#[derive(Clone, Debug)]
struct Url {
    scheme: String,
    /// The bucket or container (object stores), or `host[:port]` (http).
    authority: String,
    /// The key (object stores) or the path after the authority (http), without the leading `/`.
    key: String,
    /// `scheme://authority/key` without user info, query or fragment: what messages show.
    display: String,
    /// The query of an http URL (a pre-signed URL's signature lives there): sent, never shown.
    query: Option<String>,
}

impl Url {
    fn parse(text: &str) -> Result<Url> {
        let bad = |why: &str| Error::new(Status::InvalidArgument, format!("{}: {why}", redact(text)));
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("not a URL"))?;
        let scheme = scheme.to_ascii_lowercase();
        let fragment_less = rest.split('#').next().unwrap_or("");
        let (before_query, query) = match fragment_less.split_once('?') {
            Some((a, q)) => (a, Some(q.to_string())),
            None => (fragment_less, None),
        };
        let (authority, key) = before_query.split_once('/').unwrap_or((before_query, ""));
        // User info (`user:password@host`) is dropped from what is shown, and refused: object_store takes
        // credentials from the environment only.
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not supported: set them in the environment"));
        }
        if authority.is_empty() {
            return Err(bad("no bucket, container or host"));
        }
        if key.is_empty() || key.ends_with('/') {
            return Err(bad("no object key (the URL names a bucket or a folder)"));
        }
        let is_http = scheme == "http" || scheme == "https";
        if !is_http && query.is_some() {
            return Err(bad("an object-store URL takes no query"));
        }
        Ok(Url {
            display: format!("{scheme}://{authority}/{key}"),
            scheme,
            authority: authority.to_string(),
            key: key.to_string(),
            query,
        })
    }

    /// The store and the object's path in it, configured from the environment.
    fn store(&self, eff: &Effective) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
        let retry = retry_config(eff);
        let (timeout, connect) =
            (format!("{}ms", eff.request_timeout.as_millis()), format!("{}ms", eff.connect_timeout.as_millis()));
        use object_store::ClientConfigKey::{ConnectTimeout, Timeout};
        let fail = |e: object_store::Error| {
            Error::new(Status::InvalidArgument, format!("{}: cannot configure the client: {}", self.display, scrub(&e)))
        };
        let path = |key: &str| ObjectPath::from_url_path(key).unwrap_or_else(|_| ObjectPath::from(key));
        match self.scheme.as_str() {
            "s3" | "s3a" => {
                use object_store::aws::AmazonS3ConfigKey as Key;
                let s = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(&self.authority)
                    .with_retry(retry)
                    .with_config(Key::Client(Timeout), &timeout)
                    .with_config(Key::Client(ConnectTimeout), &connect)
                    .build()
                    .map_err(fail)?;
                Ok((Arc::new(s), path(&self.key)))
            }
            "gs" | "gcs" => {
                use object_store::gcp::GoogleConfigKey as Key;
                let s = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(&self.authority)
                    .with_retry(retry)
                    .with_config(Key::Client(Timeout), &timeout)
                    .with_config(Key::Client(ConnectTimeout), &connect)
                    .build()
                    .map_err(fail)?;
                Ok((Arc::new(s), path(&self.key)))
            }
            "az" | "azure" | "abfs" | "abfss" => {
                use object_store::azure::AzureConfigKey as Key;
                // abfs[s]://container@account.dfs.core.windows.net/key has user info; az://container/key does not.
                let s = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(&self.authority)
                    .with_retry(retry)
                    .with_config(Key::Client(Timeout), &timeout)
                    .with_config(Key::Client(ConnectTimeout), &connect)
                    .build()
                    .map_err(fail)?;
                Ok((Arc::new(s), path(&self.key)))
            }
            _ => {
                // The store is the server's root; the object is the URL's path (and its query, kept verbatim).
                let base = format!("{}://{}", self.scheme, self.authority);
                let s = object_store::http::HttpBuilder::new()
                    .with_url(base)
                    .with_retry(retry)
                    .with_client_options(
                        object_store::ClientOptions::new()
                            .with_config(Timeout, &timeout)
                            .with_config(ConnectTimeout, &connect)
                            .with_allow_http(self.scheme == "http"),
                    )
                    .build()
                    .map_err(fail)?;
                let key = match &self.query {
                    Some(q) => format!("{}?{q}", self.key),
                    None => self.key.clone(),
                };
                Ok((Arc::new(s), ObjectPath::from_url_path(&key).unwrap_or_else(|_| ObjectPath::from(key.as_str()))))
            }
        }
    }
}

fn retry_config(eff: &Effective) -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(15),
            base: 2.0,
        },
        max_retries: eff.retries,
        retry_timeout: Duration::from_secs(180),
    }
}

/// `text` with the user info and query of a URL cut out (for a message about a URL that did not parse).
fn redact(text: &str) -> String {
    let no_query = text.split(['?', '#']).next().unwrap_or("");
    match no_query.split_once("://") {
        Some((s, rest)) => {
            let (auth, key) = rest.split_once('/').unwrap_or((rest, ""));
            let auth = auth.rsplit('@').next().unwrap_or("");
            format!("{s}://{auth}/{key}")
        }
        None => no_query.to_string(),
    }
}

/// The environment variables whose values are secrets: never shown, even where a client error quotes them.
const SECRET_ENV: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_MASTER_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
];

/// The text of a client error with every secret of the environment, every query string (pre-signed URLs'
/// signatures) and every URL's user info replaced by `***`.
fn scrub(e: &dyn std::fmt::Display) -> String {
    scrub_text(e.to_string())
}

/// The text of an error and of every error beneath it (`source()`), joined by ": ", scrubbed as [`scrub`].
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut at = e.source();
    while let Some(s) = at {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        at = s.source();
    }
    scrub_text(text)
}

fn scrub_text(mut text: String) -> String {
    for name in SECRET_ENV {
        if let Ok(v) = std::env::var(name) {
            if v.len() >= 4 {
                text = text.replace(&v, "***");
            }
        }
    }
    // Queries: from '?' to the next white space or quote.
    let mut out = String::with_capacity(text.len());
    let mut in_query = false;
    for c in text.chars() {
        if in_query && (c.is_whitespace() || c == '"' || c == '\'' || c == ')' || c == ',') {
            in_query = false;
        }
        if !in_query {
            if c == '?' && !out.ends_with(' ') && !out.is_empty() {
                in_query = true;
                out.push_str("?***");
                continue;
            }
            out.push(c);
        }
    }
    out
}

/// The store of a remote object in the process that built it (connections are never shared with a child).
struct StoreIn {
    pid: u32,
    store: Arc<dyn ObjectStore>,
}

/// One remote object, open: its URL, length and pinned ETag.
pub(crate) struct RemoteObject {
    url: Url,
    path: ObjectPath,
    store: Mutex<StoreIn>,
    /// The object's length in bytes when it was opened.
    pub len: u64,
    /// The ETag of the first response; every later read must see the same.
    etag: Option<String>,
    /// The settings resolved when it was opened (boxed, as the cache: a file's sources stay small).
    eff: Box<Effective>,
    /// Its chunks in the local cache (a cache folder is set and the server sent an ETag).
    cache: Option<Box<cache::ObjectCache>>,
}

/// One ranged GET of `range`, `If-Match` `etag` when given. object_store retries the request itself (503,
/// 429, resets before an answer); a body cut or reset after the answer began is retried here, up to `retries`
/// times with the same exponential backoff, asking for the same range with `If-Match` the ETag of the answer
/// that was cut, so the bytes of one answer are never joined with another version's.
async fn fetch(
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    range: std::ops::Range<u64>,
    mut etag: Option<String>,
    retries: usize,
) -> std::result::Result<(object_store::ObjectMeta, Vec<u8>), object_store::Error> {
    let mut attempt = 0usize;
    loop {
        let opts =
            GetOptions { range: Some(GetRange::Bounded(range.clone())), if_match: etag.clone(), ..Default::default() };
        let r = store.get_opts(&path, opts).await?;
        let meta = r.meta.clone();
        match r.bytes().await {
            Ok(b) => return Ok((meta, b.to_vec())),
            Err(e) if attempt >= retries => return Err(e),
            Err(_) => {
                etag = etag.or(meta.e_tag);
                tokio::time::sleep(Duration::from_millis(100u64 << attempt.min(7))).await;
                attempt += 1;
            }
        }
    }
}

/// What the task of one ranged GET ([`stream`]) sends to the thread that waits for it.
enum Piece {
    /// An answer began, with this ETag (one per try: a cut body asked for again sends another).
    Answer(Option<String>),
    /// Bytes of the body at this position in the range.
    Bytes(u64, bytes::Bytes),
    /// The request ended: the body's length, or the error.
    End(std::result::Result<u64, object_store::Error>),
}

/// One ranged GET of `range` (If-Match `etag` when given), its body sent in pieces as it arrives. Retries as
/// [`fetch`]: a body cut after the answer began is asked for again (If-Match that answer's ETag) and sent again
/// from position 0. Ends when the receiver is gone.
async fn stream(
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    range: std::ops::Range<u64>,
    mut etag: Option<String>,
    retries: usize,
    tx: std::sync::mpsc::Sender<Piece>,
) {
    use futures::StreamExt;
    let mut attempt = 0usize;
    loop {
        let opts =
            GetOptions { range: Some(GetRange::Bounded(range.clone())), if_match: etag.clone(), ..Default::default() };
        let r = match store.get_opts(&path, opts).await {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Piece::End(Err(e)));
                return;
            }
        };
        let answer_etag = r.meta.e_tag.clone();
        if tx.send(Piece::Answer(answer_etag.clone())).is_err() {
            return;
        }
        let mut body = r.into_stream();
        let mut pos = 0u64;
        let mut cut = None;
        while let Some(item) = body.next().await {
            match item {
                Ok(b) => {
                    let n = b.len() as u64;
                    if tx.send(Piece::Bytes(pos, b)).is_err() {
                        return;
                    }
                    pos += n;
                }
                Err(e) => {
                    cut = Some(e);
                    break;
                }
            }
        }
        match cut {
            None => {
                let _ = tx.send(Piece::End(Ok(pos)));
                return;
            }
            Some(e) if attempt >= retries => {
                let _ = tx.send(Piece::End(Err(e)));
                return;
            }
            Some(_) => {
                etag = etag.or(answer_etag);
                tokio::time::sleep(Duration::from_millis(100u64 << attempt.min(7))).await;
                attempt += 1;
            }
        }
    }
}

impl RemoteObject {
    /// Opens the object at `url` with one ranged GET of its first [`FIRST_READ`] bytes; returns it and those
    /// bytes (all of a smaller object).
    pub(crate) fn open(url: &str) -> Result<(RemoteObject, Vec<u8>)> {
        let url = Url::parse(url)?;
        let eff = settings::effective()?;
        let (store, path) = url.store(&eff)?;
        let retries = eff.retries;
        let (s2, p2) = (Arc::clone(&store), path.clone());
        let got = runtime::run(fetch(s2, p2, 0..FIRST_READ, None, retries))
            .map_err(|e| Error::new(Status::Internal, format!("{}: {e}", url.display)))?;
        let (meta, bytes) = match got {
            Ok(x) => x,
            Err(e) => return Err(status_of(&url.display, "opening", &e)),
        };
        let cache = match (&eff.cache, &meta.e_tag) {
            (Some(c), Some(etag)) => Some(Box::new(cache::ObjectCache::new(c, &url.display, etag, meta.size))),
            _ => None,
        };
        let obj = RemoteObject {
            path,
            store: Mutex::new(StoreIn { pid: std::process::id(), store }),
            len: meta.size,
            etag: meta.e_tag,
            url,
            eff: Box::new(eff),
            cache,
        };
        let want = FIRST_READ.min(obj.len) as usize;
        if bytes.len() != want {
            return Err(Error::new(
                Status::Io,
                format!(
                    "{}: opening: the server sent {} bytes for the first {want} of a {}-byte object",
                    obj.url.display,
                    bytes.len(),
                    obj.len
                ),
            ));
        }
        Ok((obj, bytes.to_vec()))
    }

    /// The object's URL as messages show it (no user info, no query).
    pub(crate) fn display(&self) -> &str {
        &self.url.display
    }

    /// This process's store for the object: the one opened, or (in a child after `fork()`) a new one.
    fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        let mut s = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let pid = std::process::id();
        if s.pid != pid {
            let (store, _) = self.url.store(&self.eff)?;
            // The parent's client (its pooled connections are the parent's sockets) is never used or dropped here.
            std::mem::forget(std::mem::replace(&mut s.store, store));
            s.pid = pid;
        }
        Ok(Arc::clone(&s.store))
    }

    /// Fetches `dst.len()` bytes at `offset` (If-Match the pinned ETag): through the local cache where one is
    /// set; else a read of two [`PIECE`]s or more is cut into pieces of at least [`PIECE`] fetched by up to
    /// `max_concurrency` GETs at once, and a smaller one is one GET whose body streams into `dst`. Past the end is
    /// `TRUNCATED`, a changed object `IO`, the other failures as the module documentation says.
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8], what: &dyn Fn() -> String) -> Result<()> {
        let len = dst.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let end = self.check_range(offset, len, what)?;
        if let Some(c) = &self.cache {
            return self.read_cached(c, offset, dst, what);
        }
        let pieces = (len / PIECE).clamp(1, self.eff.concurrency.max(1) as u64);
        if pieces == 1 {
            return self.stream(
                offset,
                len,
                &mut |pos, b| dst[pos as usize..pos as usize + b.len()].copy_from_slice(b),
                what,
            );
        }
        let step = len.div_ceil(pieces);
        let ranges: Vec<_> = (0..pieces)
            .map(|i| offset + i * step..(offset + (i + 1) * step).min(end))
            .filter(|r| r.start < r.end)
            .collect();
        let mut at = 0usize;
        for (r, b) in ranges.iter().zip(self.fetch_ranges(&ranges, what)?) {
            let n = (r.end - r.start) as usize;
            dst[at..at + n].copy_from_slice(&b);
            at += n;
        }
        Ok(())
    }

    /// Fetches bytes `offset..offset + len` with one ranged GET (If-Match the pinned ETag) and hands them to
    /// `sink` as the body arrives, `(position in the range, bytes)`, in order: each byte is copied once, from the
    /// client's buffer to where `sink` puts it (no whole-range buffer). A body cut and asked for again is handed
    /// over again from its start (the same positions: the caller's bytes end up right). With a local cache the
    /// bytes go through it ([`Self::read`], then one `sink` call). Errors as [`Self::read`]; after an error, what
    /// `sink` was given is not to be used.
    pub(crate) fn read_scatter(
        &self,
        offset: u64,
        len: u64,
        sink: &mut dyn FnMut(u64, &[u8]),
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check_range(offset, len, what)?;
        if self.cache.is_some() {
            let mut buf = vec![0u8; len as usize];
            self.read(offset, &mut buf, what)?;
            sink(0, &buf);
            return Ok(());
        }
        self.stream(offset, len, sink, what)
    }

    /// The end of `offset..offset + len`, or `TRUNCATED` where it lies past the object's end.
    fn check_range(&self, offset: u64, len: u64, what: &dyn Fn() -> String) -> Result<u64> {
        offset.checked_add(len).filter(|&e| e <= self.len).ok_or_else(|| {
            Error::new(
                Status::Truncated,
                format!(
                    "{}: {}: bytes {offset}..{} lie past the end of the {}-byte object",
                    self.url.display,
                    what(),
                    offset.saturating_add(len),
                    self.len
                ),
            )
        })
    }

    /// One ranged GET of `offset..offset + len` (within the object), its body handed to `sink` as it arrives
    /// (see [`Self::read_scatter`]).
    fn stream(&self, offset: u64, len: u64, sink: &mut dyn FnMut(u64, &[u8]), what: &dyn Fn() -> String) -> Result<()> {
        let end = offset + len;
        let store = self.store()?;
        let retries = self.eff.retries;
        let ctx = || format!("{} (bytes {offset}..{end})", what());
        let (tx, rx) = std::sync::mpsc::channel();
        runtime::spawn(stream(store, self.path.clone(), offset..end, self.etag.clone(), retries, tx))
            .map_err(|e| Error::new(Status::Internal, format!("{}: {e}", self.url.display)))?;
        // Dropping `rx` on an early return makes the task's next send fail, which ends it.
        loop {
            match rx.recv() {
                Err(_) => {
                    return Err(Error::new(
                        Status::Internal,
                        format!("{}: {}: the remote read's task ended without an answer", self.url.display, ctx()),
                    ))
                }
                Ok(Piece::Answer(etag)) => {
                    if self.etag.is_some() && etag != self.etag {
                        return Err(changed(&self.url.display, &ctx(), self.etag.as_deref(), etag.as_deref()));
                    }
                }
                Ok(Piece::Bytes(pos, b)) => {
                    if pos + b.len() as u64 > len {
                        return Err(Error::new(
                            Status::Io,
                            format!(
                                "{}: {}: the server sent more than the {len} bytes asked for",
                                self.url.display,
                                ctx()
                            ),
                        ));
                    }
                    sink(pos, &b);
                }
                Ok(Piece::End(Err(e))) => return Err(status_of(&self.url.display, &ctx(), &e)),
                Ok(Piece::End(Ok(got))) if got != len => {
                    return Err(Error::new(
                        Status::Io,
                        format!("{}: {}: the server sent {got} bytes for {len}", self.url.display, ctx()),
                    ))
                }
                Ok(Piece::End(Ok(_))) => return Ok(()),
            }
        }
    }

    /// A read through the local cache: the chunks it covers from disk where they are whole there, the others
    /// fetched (concurrently) and kept.
    fn read_cached(
        &self,
        c: &cache::ObjectCache,
        offset: u64,
        dst: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        let end = offset + dst.len() as u64;
        let chunks = offset / cache::CHUNK..end.div_ceil(cache::CHUNK);
        let mut have: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut missing = Vec::new();
        for i in chunks {
            match c.get(i) {
                Some(b) => have.push((i, b)),
                None => missing.push(i),
            }
        }
        let ranges: Vec<_> = missing.iter().map(|&i| c.range(i)).collect();
        for (&i, b) in missing.iter().zip(self.fetch_ranges(&ranges, what)?) {
            c.put(i, &b);
            have.push((i, b));
        }
        for (i, b) in have {
            let r = c.range(i);
            let (lo, hi) = (r.start.max(offset), r.end.min(end));
            dst[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&b[(lo - r.start) as usize..(hi - r.start) as usize]);
        }
        Ok(())
    }

    /// Fetches `ranges` (each within the object) with up to `concurrency` ranged GETs at once (If-Match the
    /// pinned ETag); each answer is checked for the ETag and its length.
    fn fetch_ranges(&self, ranges: &[std::ops::Range<u64>], what: &dyn Fn() -> String) -> Result<Vec<Vec<u8>>> {
        let store = self.store()?;
        let retries = self.eff.retries;
        let mut out = Vec::with_capacity(ranges.len());
        for batch in ranges.chunks(self.eff.concurrency.max(1)) {
            let jobs: Vec<_> =
                batch.iter().map(|r| (Arc::clone(&store), self.path.clone(), r.clone(), self.etag.clone())).collect();
            let got = runtime::run(async move {
                let tasks: Vec<_> =
                    jobs.into_iter().map(|(s, p, r, e)| tokio::spawn(fetch(s, p, r, e, retries))).collect();
                let mut all = Vec::with_capacity(tasks.len());
                for t in tasks {
                    all.push(t.await);
                }
                all
            })
            .map_err(|e| Error::new(Status::Internal, format!("{}: {e}", self.url.display)))?;
            for (r, g) in batch.iter().zip(got) {
                let ctx = || format!("{} (bytes {}..{})", what(), r.start, r.end);
                let g = g.map_err(|e| {
                    Error::new(
                        Status::Internal,
                        format!("{}: {}: the request's task failed: {e}", self.url.display, ctx()),
                    )
                })?;
                match g {
                    Err(e) => return Err(status_of(&self.url.display, &ctx(), &e)),
                    Ok((meta, b)) => {
                        if self.etag.is_some() && meta.e_tag != self.etag {
                            return Err(changed(
                                &self.url.display,
                                &ctx(),
                                self.etag.as_deref(),
                                meta.e_tag.as_deref(),
                            ));
                        }
                        let want = (r.end - r.start) as usize;
                        if b.len() != want {
                            return Err(Error::new(
                                Status::Io,
                                format!(
                                    "{}: {}: the server sent {} bytes for {want}",
                                    self.url.display,
                                    ctx(),
                                    b.len()
                                ),
                            ));
                        }
                        out.push(b);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The whole object (at most `cap` bytes: `LIMIT_EXCEEDED` past it), for an index's JSON.
    pub(crate) fn read_all(&self, first: Vec<u8>, cap: u64, what: &str) -> Result<Vec<u8>> {
        if self.len > cap {
            return Err(Error::new(
                Status::LimitExceeded,
                format!("{}: {what} is {} bytes; the hostfirst cap is {cap}", self.url.display, self.len),
            ));
        }
        let mut all = first;
        let have = all.len() as u64;
        if have < self.len {
            all.resize(self.len as usize, 0);
            self.read(have, &mut all[have as usize..], &|| what.to_string())?;
        }
        Ok(all)
    }

    /// What the read engine reports for the object.
    pub(crate) fn report(&self) -> String {
        format!(
            "remote: {} ({} bytes, ETag {}), read with ranged GETs (object_store) into memory hostfirst owns; no \
             mapping: views' data pointers are NULL, read them with hostfirst_view_copy; up to {} requests at once; {}",
            self.url.display,
            self.len,
            self.etag.as_deref().unwrap_or("none: the server sent none, so a replaced object cannot be detected"),
            self.eff.concurrency,
            match (&self.eff.cache, &self.cache) {
                (Some(c), Some(_)) => format!("cached under {}", c.dir.display()),
                (Some(_), None) => "not cached (no ETag)".to_string(),
                _ => "no local cache".to_string(),
            }
        )
    }
}

fn changed(display: &str, what: &str, was: Option<&str>, now: Option<&str>) -> Error {
    Error::new(
        Status::Io,
        format!(
            "{display}: {what}: the object changed since it was opened (ETag {} then, {} now): nothing was read from \
             the new object; open it again",
            was.unwrap_or("none"),
            now.unwrap_or("not sent")
        ),
    )
}

/// The status of a failed request, its message naming the object (never credentials).
fn status_of(display: &str, what: &str, e: &object_store::Error) -> Error {
    use object_store::Error as E;
    let detail = chain(e);
    match e {
        E::NotFound { .. } => Error::new(Status::NotFound, format!("{display}: {what}: no such object (HTTP 404)")),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => Error::new(
            Status::PermissionDenied,
            format!("{display}: {what}: the server refused access (HTTP 403/401; check the credentials the environment gives): {detail}"),
        ),
        E::Precondition { .. } => changed(display, what, None, None),
        _ if matches!(e, E::NotSupported { .. }) || detail.contains("non-partial response when range requested") => Error::new(
            Status::Unsupported,
            format!(
                "{display}: {what}: the server answered a range request with the whole object (HTTP 200, not 206): \
                 hostfirst reads objects with ranged GETs and needs a server that supports Range"
            ),
        ),
        _ => Error::new(Status::Io, format!("{display}: {what}: {detail}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised_and_taken_apart() {
        assert!(is_url("s3://b/k.safetensors") && is_url("HTTPS://h/x") && is_url("gs://b/k") && is_url("az://c/k"));
        assert!(!is_url("model.safetensors") && !is_url("file:///x") && !is_url("s3://") && !is_url("/tmp/s3://x"));
        let u = Url::parse("https://host:8080/a/b.safetensors?X-Amz-Signature=secret#frag").unwrap();
        assert_eq!((u.authority.as_str(), u.key.as_str()), ("host:8080", "a/b.safetensors"));
        assert_eq!(u.display, "https://host:8080/a/b.safetensors");
        assert_eq!(u.query.as_deref(), Some("X-Amz-Signature=secret"));
        for bad in ["s3://bucket", "s3://bucket/", "s3://bucket/dir/", "https://user:pw@h/x", "s3:///k", "s3://b/k?x=1"]
        {
            let e = Url::parse(bad).unwrap_err();
            assert_eq!(e.status(), Status::InvalidArgument, "{bad}");
            assert!(!e.message().contains("pw@"), "{}", e.message());
        }
    }

    #[test]
    fn scrubbing_hides_queries_and_environment_secrets() {
        let s = scrub(&"GET http://h/k?X-Amz-Signature=abc failed: x");
        assert_eq!(s, "GET http://h/k?*** failed: x");
    }
}
