//! `HOSTFIRST_PLATFORMS`: which backends the process may use (`cpu`, `cuda`, `gpu` = `cuda`), read once.
//!
//! A leaf of the device layer: the census reports it and the CUDA backend honours it before loading any
//! driver library, without either importing the other.

use std::ffi::OsStr;

/// Backends hostfirst knows, in census order.
pub const BACKEND_NAMES: &[&str] = &["cpu", "cuda", "gds"];

/// A parsed `HOSTFIRST_PLATFORMS` value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Platforms {
    /// The value as given (lossily decoded when it is not UTF-8); None when unset.
    pub value: Option<String>,
    /// The backends named (lower-case), or None when the variable is unset or names nothing (all shown).
    pub allowed: Option<Vec<String>>,
    /// Problems with the value: unknown names, bytes that are not UTF-8.
    pub warnings: Vec<String>,
}

impl Platforms {
    /// Parses a value of `HOSTFIRST_PLATFORMS` (None: unset). A value that is not UTF-8 is decoded lossily
    /// (its invalid bytes become U+FFFD, so names containing them are unknown) and a warning says so: the
    /// names that are readable still apply, nothing is ignored silently.
    pub fn parse(raw: Option<&OsStr>) -> Platforms {
        let Some(raw) = raw else { return Platforms::default() };
        let mut warnings = Vec::new();
        let text = match raw.to_str() {
            Some(s) => s.to_string(),
            None => {
                let lossy = raw.to_string_lossy().into_owned();
                warnings.push(format!(
                    "HOSTFIRST_PLATFORMS is not valid UTF-8 (read as '{lossy}'); only the names that can be read apply"
                ));
                lossy
            }
        };
        let names: Vec<String> =
            text.split(',').map(|s| s.trim().to_ascii_lowercase()).filter(|s| !s.is_empty()).collect();
        for n in &names {
            if !BACKEND_NAMES.contains(&n.as_str()) && n != "gpu" {
                warnings.push(format!(
                    "HOSTFIRST_PLATFORMS names unknown backend '{n}' (known: {})",
                    BACKEND_NAMES.join(", ")
                ));
            }
        }
        let allowed = if names.is_empty() { None } else { Some(names) };
        Platforms { value: Some(text), allowed, warnings }
    }

    /// True when `backend` (`cpu`, `cuda` or `gds`) is shown. `gpu` names cuda; `gds` (GPUDirect Storage, a
    /// path of cuda's) is shown with cuda too.
    pub fn shows(&self, backend: &str) -> bool {
        match &self.allowed {
            None => true,
            Some(list) => list.iter().any(|n| {
                n == backend || (backend == "cuda" && n == "gpu") || (backend == "gds" && (n == "cuda" || n == "gpu"))
            }),
        }
    }

    /// Why `backend` is hidden, or None when it is shown.
    pub fn hidden_reason(&self, backend: &str) -> Option<String> {
        if self.shows(backend) {
            return None;
        }
        Some(format!("hidden by HOSTFIRST_PLATFORMS={}", self.value.as_deref().unwrap_or("")))
    }
}

/// The process's `HOSTFIRST_PLATFORMS`, read on first use.
pub fn platforms() -> &'static Platforms {
    static P: crate::forksafe::InitOnce<Platforms> = crate::forksafe::InitOnce::new();
    P.get_or_init(|| Platforms::parse(std::env::var_os("HOSTFIRST_PLATFORMS").as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_warnings() {
        let p = Platforms::parse(Some(OsStr::new("cpu, tpu")));
        assert!(p.shows("cpu") && !p.shows("cuda"));
        assert_eq!(p.warnings.len(), 1);
        assert!(p.warnings[0].contains("'tpu'"));
        assert_eq!(p.hidden_reason("cuda").unwrap(), "hidden by HOSTFIRST_PLATFORMS=cpu, tpu");
        assert!(Platforms::parse(Some(OsStr::new("GPU"))).shows("cuda"));
        for shown_all in [None, Some(OsStr::new("")), Some(OsStr::new(" , "))] {
            let p = Platforms::parse(shown_all);
            assert!(p.shows("cuda") && p.shows("cpu") && p.warnings.is_empty());
        }
    }

    #[cfg(unix)]
    #[test]
    fn not_utf8_is_reported_not_ignored() {
        use std::os::unix::ffi::OsStrExt;
        let p = Platforms::parse(Some(OsStr::from_bytes(b"cpu,cu\xffda")));
        assert!(p.shows("cpu") && !p.shows("cuda"), "the readable name applies: {p:?}");
        assert!(p.warnings.iter().any(|w| w.contains("not valid UTF-8")), "{:?}", p.warnings);
        assert!(p.warnings.iter().any(|w| w.contains("unknown backend 'cu\u{fffd}da'")), "{:?}", p.warnings);
    }
}
