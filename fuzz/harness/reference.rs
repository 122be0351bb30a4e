//! Small reference implementations, written from the documentation (the header and the core's module
//! docs), that the fuzz targets compare the library with: device specs, rule patterns and targets, the glob
//! matcher, mesh axis names and partition specs.

/// A device spec as the reference reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    Cpu(u32),
    CudaOrdinal(u32),
    /// Lower-case, without the `gpu-`/`mig-` prefix, dashes kept.
    CudaUuid(String),
    CudaHost,
}

/// The longest spec (after trimming) the library reads, in bytes.
pub const MAX_SPEC_LEN: usize = 128;

/// A device ordinal: ASCII digits, at most `i32::MAX` (what `hostfirst_device.ordinal` holds).
fn ordinal(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v = 0u64;
    for b in s.bytes() {
        v = v * 10 + u64::from(b - b'0');
        if v > i32::MAX as u64 {
            return None;
        }
    }
    Some(v as u32)
}

/// Device spec syntax (hostfirst_device_parse's forms): case-insensitive, white space around the spec and
/// around its `:` ignored; `cpu[:N]`, `cuda[:N]`, `gpu[:N]`, `cuda:GPU-<32 hex digits, dashes anywhere>`,
/// `cuda:MIG-<...>`, `cuda_host[:0]`. None when the text is not a spec.
pub fn device_spec(text: &str) -> Option<Spec> {
    let t = text.trim();
    if t.is_empty() || t.len() > MAX_SPEC_LEN {
        return None;
    }
    let lower = t.to_ascii_lowercase();
    let (kind, arg) = match lower.find(':') {
        Some(i) => (lower[..i].trim(), Some(lower[i + 1..].trim())),
        None => (lower.as_str(), None),
    };
    match (kind, arg) {
        ("cpu", None) => Some(Spec::Cpu(0)),
        ("cpu", Some(a)) => ordinal(a).map(Spec::Cpu),
        ("cuda" | "gpu", None) => Some(Spec::CudaOrdinal(0)),
        ("cuda" | "gpu", Some(a)) => match a.strip_prefix("gpu-").or_else(|| a.strip_prefix("mig-")) {
            Some(uuid) => {
                let digits: Vec<char> = uuid.chars().filter(|&c| c != '-').collect();
                (digits.len() == 32 && digits.iter().all(|c| c.is_ascii_hexdigit()))
                    .then(|| Spec::CudaUuid(uuid.to_string()))
            }
            None => ordinal(a).map(Spec::CudaOrdinal),
        },
        ("cuda_host", None) => Some(Spec::CudaHost),
        ("cuda_host", Some(a)) => (ordinal(a) == Some(0)).then_some(Spec::CudaHost),
        _ => None,
    }
}

/// The library's parse in the reference's terms.
pub fn from_library(s: &hostfirst::device::DeviceSpec) -> Spec {
    use hostfirst::device::{CudaSelector, DeviceSpec};
    match s {
        DeviceSpec::Cpu(n) => Spec::Cpu(*n),
        DeviceSpec::Cuda(CudaSelector::Ordinal(n)) => Spec::CudaOrdinal(*n),
        DeviceSpec::Cuda(CudaSelector::Uuid(u)) => Spec::CudaUuid(u.clone()),
        DeviceSpec::CudaHost => Spec::CudaHost,
    }
}

/// What a placement rule's target is: `host`, `default` (any case, white space around it ignored) or a
/// device spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Host,
    Default,
    Device(Spec),
}

pub fn rule_target(text: &str) -> Option<Target> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("host") {
        Some(Target::Host)
    } else if t.eq_ignore_ascii_case("default") {
        Some(Target::Default)
    } else {
        device_spec(t).map(Target::Device)
    }
}

/// One element of a glob pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// `*`: any run of characters, the empty one included.
    Star,
    /// `?`: one character.
    One,
    /// A character matched literally (also after `\`).
    Lit(char),
    /// `[...]`: one character in (or, negated, not in) the inclusive ranges (a single character is a range
    /// of one).
    Class { negated: bool, ranges: Vec<(char, char)> },
}

/// A glob pattern's elements, or None when the library refuses the pattern (empty, a `\` with nothing
/// after it, a `[` never closed). Classes: `[` then an optional `!` or `^` (negation), then a `]` right
/// there is a member, not the end; members up to the next `]`; `a-z` is a range when a character follows
/// the `-` inside the class, otherwise `-` is a member; `\` inside a class is a member.
pub fn glob_tokens(pattern: &str) -> Option<Vec<Tok>> {
    let c: Vec<char> = pattern.chars().collect();
    if c.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '*' => {
                out.push(Tok::Star);
                i += 1;
            }
            '?' => {
                out.push(Tok::One);
                i += 1;
            }
            '\\' => {
                out.push(Tok::Lit(*c.get(i + 1)?));
                i += 2;
            }
            '[' => {
                let mut j = i + 1;
                let negated = j < c.len() && (c[j] == '!' || c[j] == '^');
                if negated {
                    j += 1;
                }
                let body_start = j;
                if j < c.len() && c[j] == ']' {
                    j += 1;
                }
                while j < c.len() && c[j] != ']' {
                    j += 1;
                }
                if j == c.len() {
                    return None;
                }
                let body = &c[body_start..j];
                let mut ranges = Vec::new();
                let mut k = 0;
                while k < body.len() {
                    if k + 2 < body.len() && body[k + 1] == '-' {
                        ranges.push((body[k], body[k + 2]));
                        k += 3;
                    } else {
                        ranges.push((body[k], body[k]));
                        k += 1;
                    }
                }
                out.push(Tok::Class { negated, ranges });
                i = j + 1;
            }
            other => {
                out.push(Tok::Lit(other));
                i += 1;
            }
        }
    }
    Some(out)
}

/// Whether `name` matches the whole pattern `toks`: a table over (pattern position, name position), filled
/// from the ends (no backtracking, so no pattern can make it slow).
pub fn glob_matches(toks: &[Tok], name: &str) -> bool {
    let n: Vec<char> = name.chars().collect();
    let width = n.len() + 1;
    // m[i * width + j]: toks[i..] matches n[j..].
    let mut m = vec![false; (toks.len() + 1) * width];
    m[toks.len() * width + n.len()] = true;
    for i in (0..toks.len()).rev() {
        for j in (0..=n.len()).rev() {
            let here = match &toks[i] {
                Tok::Star => m[(i + 1) * width + j] || (j < n.len() && m[i * width + j + 1]),
                t => j < n.len() && one_char(t, n[j]) && m[(i + 1) * width + j + 1],
            };
            m[i * width + j] = here;
        }
    }
    m[0]
}

fn one_char(t: &Tok, c: char) -> bool {
    match t {
        Tok::Star => unreachable!("handled by the caller"),
        Tok::One => true,
        Tok::Lit(l) => *l == c,
        Tok::Class { negated, ranges } => ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated,
    }
}

/// A rule written `pattern=target` (the last `=` separates them): its pattern's elements and its target,
/// or None when the library must refuse it.
pub fn rule_spec(spec: &str) -> Option<(Vec<Tok>, Target)> {
    let eq = spec.rfind('=')?;
    Some((glob_tokens(&spec[..eq])?, rule_target(&spec[eq + 1..])?))
}

/// Most axes of a mesh and most positions.
pub const MAX_AXES: usize = 16;
pub const MAX_POSITIONS: u64 = 1 << 20;

/// Whether a mesh axis may have this name: not empty, not `None` or `_`, no white space, no `,` `+` `=` `(`
/// `)` or quote.
pub fn axis_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name != "None"
        && name != "_"
        && !name.chars().any(|c| c.is_whitespace() || matches!(c, ',' | '+' | '=' | '(' | ')' | '\'' | '"'))
}

/// The status hostfirst_shard_mesh_new must give for these axes (names already valid UTF-8).
pub fn mesh_status(axes: &[(String, u64)]) -> hostfirst::Status {
    use hostfirst::Status;
    if axes.is_empty() {
        return Status::InvalidArgument;
    }
    if axes.len() > MAX_AXES {
        return Status::LimitExceeded;
    }
    let mut positions = 1u64;
    for (i, (name, size)) in axes.iter().enumerate() {
        if !axis_name_ok(name) || axes[..i].iter().any(|(n, _)| n == name) || *size == 0 {
            return Status::InvalidArgument;
        }
        positions = positions.saturating_mul(*size);
        if positions > MAX_POSITIONS {
            return Status::LimitExceeded;
        }
    }
    Status::Ok
}

/// A partition spec in text over the mesh axis `names`: per tensor dimension, the splitting axes (indices),
/// or None when the library must refuse it. Comma-separated entries (white space around them ignored), each
/// `_`, `None`, empty, or axis names joined by `+`; no axis twice; `""` (after trimming) has no entry.
pub fn partition_spec(text: &str, names: &[String]) -> Option<Vec<Vec<usize>>> {
    let text = text.trim();
    if text.is_empty() {
        return Some(Vec::new());
    }
    let mut used = vec![false; names.len()];
    let mut dims = Vec::new();
    for entry in text.split(',') {
        let entry = entry.trim();
        let mut axes = Vec::new();
        if !matches!(entry, "" | "_" | "None") {
            for name in entry.split('+') {
                let a = names.iter().position(|n| n == name.trim())?;
                if used[a] {
                    return None;
                }
                used[a] = true;
                axes.push(a);
            }
        }
        dims.push(axes);
    }
    Some(dims)
}
