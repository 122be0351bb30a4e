//! The default device: built-in rule, `HOSTFIRST_DEFAULT_DEVICE`, a process setting, per-thread scopes, strict mode.
//!
//! Resolution order (first that applies wins): the innermost scope of the calling thread, the process setting,
//! the environment variable (read once, on first use), the built-in rule (the first CUDA device if CUDA is
//! available, else `cpu:0`, as JAX does).

use crate::device::{census, Device, DeviceSpec, ACCEPTED_SPECS};
use crate::error::{Error, Result, Status};
use crate::forksafe::{GlobalMutex, InitOnce};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use strum::{FromRepr, IntoStaticStr, VariantArray};

// The one definition: cbindgen exports it as `hostfirst_default_source` (`HOSTFIRST_DEFAULT_SOURCE_*`); the
// names and the mapping from C integers are derived from it (strum).
/// Where the effective default device came from (`hostfirst_default_device`'s `out_source`). Stable, never
/// renumbered.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, FromRepr, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum DefaultSource {
    /// A scope pushed on the calling thread.
    Scope = 0,
    /// The process setting (`hostfirst_default_device_set`).
    Process = 1,
    /// The `HOSTFIRST_DEFAULT_DEVICE` environment variable.
    Env = 2,
    /// The built-in rule (the first CUDA device if available, else cpu:0).
    BuiltIn = 3,
}

impl DefaultSource {
    /// `scope`, `process`, `env`, `built-in`.
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// The effective default and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefaultDevice {
    /// The device.
    pub device: Device,
    /// Its source.
    pub source: DefaultSource,
    /// Number of scopes on the calling thread's stack (0 unless `source` is `Scope`).
    pub depth: u32,
}

/// A token identifying one pushed scope; pops must present the innermost one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScopeToken(pub u64);

/// A thread's effective default and strictness, captured to be entered on another thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CarriedScope {
    /// The device to make default on the worker.
    pub device: Device,
    /// Whether the capturing thread was in strict mode (per-thread flag).
    pub strict: bool,
}

struct Entry {
    token: u64,
    device: Device,
    /// For entries made by `enter`: the thread's strict flag to restore on leave.
    restore_strict: Option<bool>,
}

thread_local! {
    static STACK: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    static THREAD_STRICT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);
pub(crate) static PROCESS_DEFAULT: GlobalMutex<Option<Device>> = GlobalMutex::new(None);
static PROCESS_STRICT: AtomicBool = AtomicBool::new(false);

/// The most scopes one thread may hold (a guard against unbalanced pushes in a loop).
pub const MAX_DEPTH: usize = 1 << 16;

fn thread_gone() -> Error {
    Error::new(Status::Internal, "the calling thread is shutting down (thread-local storage destroyed)")
}

/// `HOSTFIRST_DEFAULT_DEVICE`, parsed once: None when unset or blank, Some(Err) when invalid.
pub fn env_default() -> Option<Result<Device>> {
    static ENV: InitOnce<Option<Result<Device>>> = InitOnce::new();
    ENV.get_or_init(|| parse_env_default(std::env::var_os("HOSTFIRST_DEFAULT_DEVICE").as_deref())).clone()
}

/// Parses a value of `HOSTFIRST_DEFAULT_DEVICE` (None: unset) as [`env_default`] does: None when unset or
/// blank; `INVALID_ARGUMENT` when not UTF-8 or not a device spec; otherwise the spec resolved against the
/// census (`UNAVAILABLE`, `NO_SUCH_DEVICE` for an absent device). Errors name the variable and its value.
pub fn parse_env_default(raw: Option<&std::ffi::OsStr>) -> Option<Result<Device>> {
    let raw = raw?;
    let Some(text) = raw.to_str() else {
        return Some(Err(Error::new(
            Status::InvalidArgument,
            "HOSTFIRST_DEFAULT_DEVICE is not valid UTF-8".to_string(),
        )));
    };
    if text.trim().is_empty() {
        return None;
    }
    Some(Device::parse(text).map_err(|e| e.context(format!("HOSTFIRST_DEFAULT_DEVICE='{}'", text.trim()))))
}

/// The built-in default: `cuda:0` when CUDA is available, else `cpu:0`.
pub fn builtin_default() -> Device {
    if census().cuda_available() {
        Device::cuda(0)
    } else {
        Device::CPU
    }
}

/// The effective default device of the calling thread and its source.
///
/// Errors: an invalid `HOSTFIRST_DEFAULT_DEVICE` (when no scope or process setting overrides it) is reported,
/// never ignored.
pub fn current() -> Result<DefaultDevice> {
    let top = STACK
        .try_with(|s| {
            let s = s.borrow();
            s.last().map(|e| (e.device, s.len() as u32))
        })
        .map_err(|_| thread_gone())?;
    if let Some((device, depth)) = top {
        return Ok(DefaultDevice { device, source: DefaultSource::Scope, depth });
    }
    if let Some(device) = *PROCESS_DEFAULT.lock() {
        return Ok(DefaultDevice { device, source: DefaultSource::Process, depth: 0 });
    }
    match env_default() {
        Some(Ok(device)) => Ok(DefaultDevice { device, source: DefaultSource::Env, depth: 0 }),
        Some(Err(e)) => Err(e),
        None => Ok(DefaultDevice { device: builtin_default(), source: DefaultSource::BuiltIn, depth: 0 }),
    }
}

/// Sets (Some) or clears (None) the process-wide default. The device must be present.
pub fn set_process_default(device: Option<Device>) -> Result<()> {
    let checked = match device {
        Some(d) => Some(d.validate()?),
        None => None,
    };
    *PROCESS_DEFAULT.lock() = checked;
    Ok(())
}

/// The process-wide default, if set.
pub fn process_default() -> Option<Device> {
    *PROCESS_DEFAULT.lock()
}

fn push_entry(device: Device, restore_strict: Option<bool>) -> Result<ScopeToken> {
    let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    STACK
        .try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() >= MAX_DEPTH {
                return Err(Error::new(
                    Status::LimitExceeded,
                    format!("default-device scope stack is {MAX_DEPTH} deep on this thread; pops are missing"),
                ));
            }
            s.push(Entry { token, device, restore_strict });
            Ok(ScopeToken(token))
        })
        .map_err(|_| thread_gone())?
}

/// Pushes a scope making `device` the calling thread's default; returns the token that pops it.
pub fn push(device: Device) -> Result<ScopeToken> {
    let device = device.validate()?;
    push_entry(device, None)
}

/// Parses a spec and pushes it.
pub fn push_spec(spec: &str) -> Result<ScopeToken> {
    push(Device::parse(spec)?)
}

/// Pops the innermost scope, which must be `token`. On mismatch or an empty stack nothing changes and the
/// status is `ScopeMismatch`.
pub fn pop(token: ScopeToken) -> Result<Device> {
    let entry = STACK
        .try_with(|s| {
            let mut s = s.borrow_mut();
            match s.last() {
                None => Err(Error::new(
                    Status::ScopeMismatch,
                    format!("scope token {} popped but this thread has no default-device scope", token.0),
                )),
                Some(top) if top.token != token.0 => {
                    let inner = s.iter().rposition(|e| e.token == token.0);
                    Err(Error::new(
                        Status::ScopeMismatch,
                        match inner {
                            Some(i) => format!(
                                "scope token {} is at depth {} of {}, not the innermost (token {} for {}); pop inner scopes first",
                                token.0,
                                i + 1,
                                s.len(),
                                top.token,
                                top.device
                            ),
                            None => format!(
                                "scope token {} is not on this thread's stack (innermost is token {} for {}); tokens are per thread",
                                token.0, top.token, top.device
                            ),
                        },
                    ))
                }
                Some(_) => Ok(s.pop().expect("checked non-empty")),
            }
        })
        .map_err(|_| thread_gone())??;
    if let Some(prev) = entry.restore_strict {
        let _ = THREAD_STRICT.try_with(|c| c.set(prev));
    }
    Ok(entry.device)
}

/// Depth of the calling thread's scope stack.
pub fn depth() -> usize {
    STACK.try_with(|s| s.borrow().len()).unwrap_or(0)
}

/// Captures the calling thread's effective default and strict flag for [`enter`] on another thread.
pub fn capture() -> Result<CarriedScope> {
    let cur = current()?;
    Ok(CarriedScope { device: cur.device, strict: thread_strict() })
}

/// Enters a carried scope on the calling thread: pushes its device and adopts its strict flag. Leave with
/// [`leave`] (checked like [`pop`]); leaving restores the thread's previous strict flag.
pub fn enter(carried: CarriedScope) -> Result<ScopeToken> {
    let device = carried.device.validate()?;
    let prev = thread_strict();
    let token = push_entry(device, Some(prev))?;
    let _ = THREAD_STRICT.try_with(|c| c.set(carried.strict));
    Ok(token)
}

/// Leaves a scope made by [`enter`] (the same as [`pop`]).
pub fn leave(token: ScopeToken) -> Result<Device> {
    pop(token)
}

/// Sets strict mode for the calling thread.
pub fn set_thread_strict(on: bool) {
    let _ = THREAD_STRICT.try_with(|c| c.set(on));
}

/// Strict mode of the calling thread (its own flag only).
pub fn thread_strict() -> bool {
    THREAD_STRICT.try_with(|c| c.get()).unwrap_or(false)
}

/// Sets strict mode for the whole process.
pub fn set_process_strict(on: bool) {
    PROCESS_STRICT.store(on, Ordering::SeqCst);
}

/// Strict mode of the process.
pub fn process_strict() -> bool {
    PROCESS_STRICT.load(Ordering::SeqCst)
}

/// True when the calling thread or the process is strict.
pub fn strict() -> bool {
    thread_strict() || process_strict()
}

/// Resolves "the default device" for an operation on `what` (a tensor name, a rule, ...). In strict mode this
/// fails with `ImplicitPlacement` instead.
pub fn resolve_default(what: &str) -> Result<Device> {
    if strict() {
        let by = if thread_strict() { "this thread" } else { "the process" };
        return Err(Error::new(
            Status::ImplicitPlacement,
            format!("{what}: placement on the implicit default device is forbidden (strict mode is on for {by}); name a device"),
        ));
    }
    Ok(current()?.device)
}

/// Parses a target that may be `default` (resolved through [`resolve_default`]) or a device spec. A malformed
/// spec lists `default` among the accepted forms.
pub fn resolve_target(spec: &str, what: &str) -> Result<Device> {
    if spec.trim().eq_ignore_ascii_case("default") {
        resolve_default(what)
    } else {
        let parsed =
            DeviceSpec::parse(spec).map_err(|e| target_syntax_error(e, what, "default (the default device)"))?;
        crate::device::resolve(&parsed, spec)
    }
}

/// Rewrites a device-spec syntax error for a placement target that also takes other words: the message is
/// put in the context `what` and lists `others` (e.g. "default (the default device)") before every device
/// spec form, so a typo in a target is answered with the complete list of what the target accepts.
pub(crate) fn target_syntax_error(e: Error, what: &str, others: &str) -> Error {
    let why = e.message().split("; accepted forms: ").next().unwrap_or_default();
    Error::new(e.status(), format!("{what}: {why}; accepted: {others}, {ACCEPTED_SPECS}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_nesting_and_mismatch() {
        std::thread::spawn(|| {
            assert_eq!(pop(ScopeToken(999_999_999)).unwrap_err().status(), Status::ScopeMismatch);
            let base = current().unwrap();
            assert_ne!(base.source, DefaultSource::Scope);
            let a = push(Device::CPU).unwrap();
            let b = push_spec("cpu:0").unwrap();
            let cur = current().unwrap();
            assert_eq!(cur.source, DefaultSource::Scope);
            assert_eq!(cur.depth, 2);
            let e = pop(a).unwrap_err();
            assert_eq!(e.status(), Status::ScopeMismatch);
            assert!(e.message().contains("depth 1 of 2"), "{}", e.message());
            assert_eq!(depth(), 2, "a failed pop changes nothing");
            pop(b).unwrap();
            pop(a).unwrap();
            assert_eq!(pop(a).unwrap_err().status(), Status::ScopeMismatch);
            assert_eq!(current().unwrap(), base);
        })
        .join()
        .unwrap();
    }

    /// What the header promises about a thread that exits with scopes pushed: they go with it.
    #[test]
    fn scopes_left_on_an_exiting_thread_go_with_it() {
        std::thread::spawn(|| {
            let base = current().unwrap();
            let depth_before = depth();
            let (a, b) = std::thread::spawn(|| {
                let a = push(Device::CPU).unwrap();
                let b = push(Device::CPU).unwrap();
                set_thread_strict(true);
                (a, b) // exits without popping
            })
            .join()
            .unwrap();
            // This thread is untouched, and the dead thread's tokens pop nowhere.
            assert_eq!(depth(), depth_before);
            assert!(!thread_strict());
            assert_eq!(current().unwrap().source, base.source);
            assert_eq!(pop(b).unwrap_err().status(), Status::ScopeMismatch);
            assert_eq!(pop(a).unwrap_err().status(), Status::ScopeMismatch);
            // A new thread starts clean.
            std::thread::spawn(move || {
                assert_eq!(depth(), 0);
                assert!(!thread_strict());
                assert_eq!(pop(a).unwrap_err().status(), Status::ScopeMismatch);
            })
            .join()
            .unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn scopes_are_per_thread() {
        std::thread::spawn(|| {
            let t = push(Device::CPU).unwrap();
            let other = std::thread::spawn(move || {
                assert_eq!(depth(), 0);
                pop(t).unwrap_err().status()
            })
            .join()
            .unwrap();
            assert_eq!(other, Status::ScopeMismatch);
            pop(t).unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn carry_into_worker_and_strict() {
        std::thread::spawn(|| {
            set_thread_strict(true);
            let t = push(Device::CPU).unwrap();
            let carried = capture().unwrap();
            assert!(carried.strict);
            let worker = std::thread::spawn(move || {
                assert!(!thread_strict());
                let tok = enter(carried).unwrap();
                assert!(thread_strict());
                assert_eq!(current().unwrap().device, Device::CPU);
                assert_eq!(resolve_default("tensor 'x'").unwrap_err().status(), Status::ImplicitPlacement);
                leave(tok).unwrap();
                assert!(!thread_strict(), "leave restores the worker's strict flag");
                assert!(resolve_target("cpu", "x").is_ok());
            });
            worker.join().unwrap();
            let e = resolve_default("tensor 'w'").unwrap_err();
            assert_eq!(e.status(), Status::ImplicitPlacement);
            assert!(e.message().contains("tensor 'w'"));
            assert_eq!(resolve_target("cpu:0", "w").unwrap(), Device::CPU, "explicit targets work in strict mode");
            set_thread_strict(false);
            assert_eq!(resolve_target("default", "w").unwrap(), Device::CPU);
            pop(t).unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn concurrent_threads() {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..2000 {
                        let a = push(Device::CPU).unwrap();
                        let b = push(Device::CPU).unwrap();
                        assert_eq!(current().unwrap().depth, 2);
                        assert_eq!(pop(a).unwrap_err().status(), Status::ScopeMismatch);
                        pop(b).unwrap();
                        pop(a).unwrap();
                    }
                    depth()
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 0);
        }
    }
}
