//! The one place every remote setting is read from: what the process configured
//! (`hostfirst_remote_configure`, [`configure`]), else the environment variable, else the default. Remote code
//! never reads these environment variables itself.
//!
//! | setting            | configured field      | environment variable                 | default             |
//! |--------------------|-----------------------|--------------------------------------|---------------------|
//! | retries / request  | `max_retries`         | `HOSTFIRST_REMOTE_RETRIES`           | 10                  |
//! | request timeout    | `request_timeout`     | `HOSTFIRST_REMOTE_TIMEOUT` (seconds) | 30 s                |
//! | connect timeout    | `connect_timeout`     | (the request timeout, at most 10 s)  | 10 s                |
//! | concurrency        | `max_concurrency`     | `HOSTFIRST_REMOTE_CONCURRENCY`       | reads and loads [`DEFAULT_CONCURRENCY`], uploads the uploader's own |
//! | upload part size   | `part_size`           | `HOSTFIRST_REMOTE_PART_SIZE`         | the uploader's own  |
//! | cache folder       | `cache_dir`           | `HOSTFIRST_REMOTE_CACHE`             | none (no cache)     |
//! | cache bound        | `cache_max_bytes`     | `HOSTFIRST_REMOTE_CACHE_MAX_BYTES`   | [`DEFAULT_CACHE_MAX_BYTES`] |
//!
//! An open takes a snapshot ([`Effective`]) when it starts: a later [`configure`] applies to later opens only.

use crate::error::{Error, Result, Status};
use crate::forksafe::GlobalMutex;
use std::path::PathBuf;
use std::time::Duration;

/// Retries of one request (`HOSTFIRST_REMOTE_RETRIES`).
pub const RETRIES_ENV: &str = "HOSTFIRST_REMOTE_RETRIES";
/// Seconds one request may take (`HOSTFIRST_REMOTE_TIMEOUT`).
pub const TIMEOUT_ENV: &str = "HOSTFIRST_REMOTE_TIMEOUT";
/// Concurrent requests of one read (and of one upload).
pub const CONCURRENCY_ENV: &str = "HOSTFIRST_REMOTE_CONCURRENCY";
/// Bytes per part of a multipart upload.
pub const PART_SIZE_ENV: &str = "HOSTFIRST_REMOTE_PART_SIZE";
/// The local cache folder (unset or empty: no cache).
pub const CACHE_ENV: &str = "HOSTFIRST_REMOTE_CACHE";
/// The bound on the cache folder's bytes.
pub const CACHE_MAX_ENV: &str = "HOSTFIRST_REMOTE_CACHE_MAX_BYTES";

/// Retries when neither the configuration nor the environment says.
pub const DEFAULT_RETRIES: u32 = 10;
/// Most retries accepted.
pub const MAX_RETRIES: u32 = 100;
/// Request timeout when neither says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Concurrent requests of one read or load when neither says (a load of a 256 MiB object kept 16 in flight to
/// match boto3's 16-thread download: BENCHMARKS.md section 17). Uploads have their own default
/// (`upload::DEFAULT_CONCURRENCY`: each part in flight is memory held).
pub const DEFAULT_CONCURRENCY: usize = 16;
/// Most concurrent requests accepted.
pub const MAX_CONCURRENCY: u32 = 1024;
/// The cache folder's bound when neither says: 10 GiB.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 10 << 30;

/// What a process configured; `None` (or a zero field of the C struct) defers to the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub max_concurrency: Option<u32>,
    pub part_size: Option<u64>,
    pub request_timeout: Option<Duration>,
    pub connect_timeout: Option<Duration>,
    /// `Some(0)`: no retries.
    pub max_retries: Option<u32>,
    /// An absolute folder (a relative one is made absolute by [`configure`], against the current folder at that
    /// call, so a later `chdir` does not move it).
    pub cache_dir: Option<PathBuf>,
    pub cache_max_bytes: Option<u64>,
}

pub(crate) static CONFIGURED: GlobalMutex<Option<Settings>> = GlobalMutex::new(None);

/// Replaces the process's configuration (`None`: back to the environment and the defaults) after checking it.
/// Applies to opens that start after the call.
pub fn configure(s: Option<Settings>) -> Result<()> {
    let s = match s {
        None => None,
        Some(mut s) => {
            if let Some(r) = s.max_retries.filter(|&r| r > MAX_RETRIES) {
                return Err(Error::new(Status::InvalidArgument, format!("max_retries is {r}; at most {MAX_RETRIES}")));
            }
            if let Some(c) = s.max_concurrency.filter(|&c| c == 0 || c > MAX_CONCURRENCY) {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("max_concurrency is {c}; from 1 to {MAX_CONCURRENCY}"),
                ));
            }
            if let Some(d) = s.cache_dir.take() {
                if d.as_os_str().is_empty() {
                    s.cache_dir = None;
                } else {
                    let abs = std::path::absolute(&d).map_err(|e| {
                        Error::new(Status::InvalidArgument, format!("cache_dir '{}': {e}", d.display()))
                    })?;
                    s.cache_dir = Some(abs);
                }
            }
            Some(s)
        }
    };
    *CONFIGURED.lock() = s;
    Ok(())
}

/// What the process configured (defaults where it did not).
pub fn configured() -> Settings {
    CONFIGURED.lock().clone().unwrap_or_default()
}

/// The settings an open uses, resolved once when it starts: configured > environment > default.
#[derive(Clone, Debug)]
pub struct Effective {
    pub retries: usize,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub concurrency: usize,
    pub cache: Option<CacheSettings>,
}

/// Where and how large the local cache is.
#[derive(Clone, Debug)]
pub struct CacheSettings {
    pub dir: PathBuf,
    pub max_bytes: u64,
}

fn env_number(name: &str, max: u64) -> Result<Option<u64>> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => v.trim().parse::<u64>().ok().filter(|&n| n <= max).map(Some).ok_or_else(|| {
            Error::new(Status::InvalidArgument, format!("{name}='{v}' is not a whole number from 0 to {max}"))
        }),
    }
}

/// Resolves every setting of an open now.
pub fn effective() -> Result<Effective> {
    let c = configured();
    let retries = match c.max_retries {
        Some(r) => r as usize,
        None => env_number(RETRIES_ENV, MAX_RETRIES as u64)?.unwrap_or(DEFAULT_RETRIES as u64) as usize,
    };
    let request_timeout = match c.request_timeout {
        Some(t) => t,
        None => env_number(TIMEOUT_ENV, 86_400)?.map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(s.max(1))),
    };
    let connect_timeout = c.connect_timeout.unwrap_or_else(|| request_timeout.min(Duration::from_secs(10)));
    let concurrency = match c.max_concurrency {
        Some(n) => n as usize,
        None => env_number(CONCURRENCY_ENV, MAX_CONCURRENCY as u64)?.map_or(DEFAULT_CONCURRENCY, |n| n.max(1) as usize),
    };
    let dir = match c.cache_dir {
        Some(d) => Some(d),
        None => match std::env::var_os(CACHE_ENV) {
            Some(v) if !v.is_empty() => {
                let p = PathBuf::from(&v);
                if !p.is_absolute() {
                    // Never a cache in whatever folder the process happens to run in.
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("{CACHE_ENV}='{}' is not an absolute path", p.display()),
                    ));
                }
                Some(p)
            }
            _ => None,
        },
    };
    let max_bytes = match c.cache_max_bytes {
        Some(n) => n,
        None => env_number(CACHE_MAX_ENV, u64::MAX)?.filter(|&n| n > 0).unwrap_or(DEFAULT_CACHE_MAX_BYTES),
    };
    Ok(Effective {
        retries,
        request_timeout,
        connect_timeout,
        concurrency,
        cache: dir.map(|dir| CacheSettings { dir, max_bytes }),
    })
}

/// Concurrent requests of one upload as configured or set in the environment (`None`: the uploader's default).
pub fn upload_concurrency() -> Result<Option<usize>> {
    match configured().max_concurrency {
        Some(n) => Ok(Some(n as usize)),
        None => Ok(env_number(CONCURRENCY_ENV, MAX_CONCURRENCY as u64)?.filter(|&n| n > 0).map(|n| n as usize)),
    }
}

/// Bytes per part of a multipart upload as configured or set in the environment (`None`: the uploader's
/// default).
pub fn part_size() -> Result<Option<u64>> {
    match configured().part_size {
        Some(n) => Ok(Some(n)),
        None => Ok(env_number(PART_SIZE_ENV, u64::MAX)?.filter(|&n| n > 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_values_win_over_defaults_and_are_checked() {
        // (Environment precedence is tested through the C API in its own process: tests/it/remote.rs.)
        let bad = Settings { max_retries: Some(MAX_RETRIES + 1), ..Default::default() };
        assert_eq!(configure(Some(bad)).unwrap_err().status(), Status::InvalidArgument);
        let bad = Settings { max_concurrency: Some(0), ..Default::default() };
        assert_eq!(configure(Some(bad)).unwrap_err().status(), Status::InvalidArgument);
    }
}
