//! The process-wide settings of remote sources: `hostfirst_remote_*` (the skin over
//! `hostfirst_core::remote::settings`).

use super::args::{c_str, init_options, options_struct, read_options};
use crate::error::{Error, Result, Status};
use hostfirst_core::remote::settings::{self, Settings, MAX_CONCURRENCY, MAX_RETRIES};
use std::ffi::c_char;
use std::time::Duration;

/// Settings of remote sources (s3://, gs://, az://, http(s)://) for `hostfirst_remote_configure`. Fill it with
/// `hostfirst_remote_options_init(&opts, sizeof opts)`, then set what you need. A zero field (NULL for
/// `cache_dir`) means "not configured": the environment variable named beside it decides, else the default.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hostfirst_remote_options {
    /// `sizeof(hostfirst_remote_options)`.
    pub struct_size: usize,
    /// Concurrent ranged GETs of one read (a read of 16 MiB or more is cut into pieces of at least 8 MiB),
    /// and of one multipart upload (0: `HOSTFIRST_REMOTE_CONCURRENCY`, else 8; at most 1024).
    pub max_concurrency: u32,
    /// Retries of one request after a throttling answer (503, 429), a reset or a cut body, with exponential
    /// backoff (0: `HOSTFIRST_REMOTE_RETRIES`, else 10; -1: no retries; at most 100).
    pub max_retries: i32,
    /// Bytes per part of a multipart upload (0: `HOSTFIRST_REMOTE_PART_SIZE`, else the uploader's default).
    pub part_size: u64,
    /// Milliseconds one request may take (0: `HOSTFIRST_REMOTE_TIMEOUT` seconds, else 30 s).
    pub request_timeout_ms: u32,
    /// Milliseconds to connect (0: the request timeout, at most 10 s).
    pub connect_timeout_ms: u32,
    /// The local cache folder (UTF-8; made if missing; a relative path is taken against the current folder at
    /// this call). NULL or "": `HOSTFIRST_REMOTE_CACHE` (an absolute path), else no cache. The library copies
    /// the string.
    pub cache_dir: *const c_char,
    /// The bound on the bytes of the cache folder's chunks; the least recently used are removed past it (0:
    /// `HOSTFIRST_REMOTE_CACHE_MAX_BYTES`, else 10 GiB).
    pub cache_max_bytes: u64,
}

options_struct!(
    hostfirst_remote_options,
    first_version_ends_with = cache_max_bytes,
    fields = [
        struct_size,
        max_concurrency,
        max_retries,
        part_size,
        request_timeout_ms,
        connect_timeout_ms,
        cache_dir,
        cache_max_bytes
    ]
);

impl Default for hostfirst_remote_options {
    fn default() -> Self {
        hostfirst_remote_options {
            struct_size: std::mem::size_of::<hostfirst_remote_options>(),
            max_concurrency: 0,
            max_retries: 0,
            part_size: 0,
            request_timeout_ms: 0,
            connect_timeout_ms: 0,
            cache_dir: std::ptr::null(),
            cache_max_bytes: 0,
        }
    }
}

/// The core's settings from the C options, checked (`INVALID_ARGUMENT` naming the field and its value).
fn settings_of(p: *const hostfirst_remote_options) -> Result<Settings> {
    let o = read_options(p, hostfirst_remote_options::default(), "opts")?;
    let bad = |what: &str, v: &dyn std::fmt::Display, want: &str| {
        Error::new(Status::InvalidArgument, format!("opts->{what} is {v}; {want}"))
    };
    if o.max_concurrency > MAX_CONCURRENCY {
        return Err(bad("max_concurrency", &o.max_concurrency, &format!("0 (the default) or 1 to {MAX_CONCURRENCY}")));
    }
    let max_retries = match o.max_retries {
        0 => None,
        -1 => Some(0),
        r if r > 0 && r as u32 <= MAX_RETRIES => Some(r as u32),
        r => return Err(bad("max_retries", &r, &format!("0 (the default), -1 (none) or 1 to {MAX_RETRIES}"))),
    };
    let ms = |v: u32| (v != 0).then(|| Duration::from_millis(v as u64));
    let cache_dir = if o.cache_dir.is_null() {
        None
    } else {
        Some(c_str(o.cache_dir, "opts->cache_dir")?).filter(|s| !s.is_empty()).map(std::path::PathBuf::from)
    };
    if let Some(d) = &cache_dir {
        std::fs::create_dir_all(d).map_err(|e| {
            Error::new(Status::Io, format!("opts->cache_dir '{}': cannot make the cache folder: {e}", d.display()))
        })?;
    }
    Ok(Settings {
        max_concurrency: (o.max_concurrency != 0).then_some(o.max_concurrency),
        part_size: (o.part_size != 0).then_some(o.part_size),
        request_timeout: ms(o.request_timeout_ms),
        connect_timeout: ms(o.connect_timeout_ms),
        max_retries,
        cache_dir,
        cache_max_bytes: (o.cache_max_bytes != 0).then_some(o.cache_max_bytes),
    })
}

/// Fills `*out` with the default remote options (everything zero/NULL: nothing configured) and sets
/// `out->struct_size = struct_size`. Pass `sizeof *out`: `hostfirst_remote_options_init(&opts, sizeof opts)`.
/// Only the fields that lie wholly within the caller's `struct_size` bytes are written. Errors:
/// `NULL_ARGUMENT`; `INVALID_ARGUMENT` for a `struct_size` smaller than the struct's first layout or larger
/// than 4096 (the message names the sizes). Thread-safe.
#[no_mangle]
pub extern "C" fn hostfirst_remote_options_init(out: *mut hostfirst_remote_options, struct_size: usize) -> Status {
    hostfirst_boundary!("hostfirst_remote_options_init", {
        init_options(out, struct_size, hostfirst_remote_options::default())
    })
}

/// Sets the settings of remote sources for the whole process, replacing any earlier configuration; `opts`
/// NULL returns to the environment and the defaults. Each setting is taken from the configured field when it
/// is non-zero, else from its environment variable (read when an open starts), else the default: **configured
/// value > environment variable > default** (see `hostfirst_remote_options`). The settings apply to opens
/// that start after this call returns; files already open keep the settings they were opened with. With a
/// cache folder, the data ranges of objects that have an ETag are kept there in aligned 4 MiB chunks under a
/// key of (URL without credentials, ETag, length), and read from there by later opens of the unchanged object;
/// an open's first request always goes to the server, so an object replaced since (a new ETag) is never served
/// from the cache. Nothing is read from the current folder unless `cache_dir` names it. Errors:
/// `INVALID_ARGUMENT` for a bad `struct_size`, a field out of range (named with its value) or a non-zero byte
/// past this library's struct or a `cache_dir` that is not UTF-8; `IO` for a cache folder
/// that cannot be made (named). On failure the earlier configuration stays. Thread-safe (an open running at
/// the same time sees the old or the new settings, never a mix).
#[no_mangle]
pub extern "C" fn hostfirst_remote_configure(opts: *const hostfirst_remote_options) -> Status {
    hostfirst_boundary!("hostfirst_remote_configure", {
        let s = if opts.is_null() { None } else { Some(settings_of(opts)?) };
        settings::configure(s)
    })
}
