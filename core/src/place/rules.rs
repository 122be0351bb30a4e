//! Placement rules for a whole file: an ordered list of (glob pattern on tensor names, target).
//!
//! A target is a device spec (`cpu`, `cuda:0`, `cuda_host`, ...), `default` (the default device, resolved
//! through the default stack when the rules are applied; strict mode refuses it with `IMPLICIT_PLACEMENT`)
//! or `host` (the tensor stays a zero-copy host view). The first matching rule wins; a tensor no rule matches
//! stays on the host (host-first).
//!
//! Patterns: `*` any run of characters (also `.` and `/`), `?` one character, `[abc]`, `[a-z]`, `[!a-z]`
//! (or `[^a-z]`) one character of (not of) a class; `\x` matches `x` literally. Everything else is literal.
//! The matcher is ours (a dozen lines) rather than a dependency.

use crate::device::DeviceSpec;
use crate::error::{Error, Result, Status};
use crate::scope::target_syntax_error;

/// What a rule does with the tensors it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleTarget {
    /// Stay on the host as a zero-copy view.
    Host,
    /// The default device, resolved through the default stack at plan time.
    Default,
    /// A device spec, resolved against the census at plan time.
    Spec(String),
}

impl std::fmt::Display for RuleTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleTarget::Host => f.write_str("host"),
            RuleTarget::Default => f.write_str("default"),
            RuleTarget::Spec(s) => f.write_str(s),
        }
    }
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The glob pattern on tensor names.
    pub pattern: String,
    /// Its target.
    pub target: RuleTarget,
}

/// An ordered list of rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    rules: Vec<Rule>,
}

fn parse_target(target: &str) -> Result<RuleTarget> {
    let t = target.trim();
    if t.eq_ignore_ascii_case("host") {
        Ok(RuleTarget::Host)
    } else if t.eq_ignore_ascii_case("default") {
        Ok(RuleTarget::Default)
    } else {
        // Syntax only here: presence is checked when a plan is made (the census may differ by then).
        DeviceSpec::parse(t).map_err(|e| {
            let others = "host (stay a zero-copy host view), default (the default device)";
            target_syntax_error(e, &format!("rule target '{target}'"), others)
        })?;
        Ok(RuleTarget::Spec(t.to_string()))
    }
}

fn check_pattern(pattern: &str) -> Result<()> {
    if pattern.is_empty() {
        return Err(Error::new(Status::InvalidArgument, "empty rule pattern"));
    }
    let b = pattern.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if i + 1 >= b.len() => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("rule pattern '{pattern}' ends with a lone '\\'"),
                ))
            }
            b'\\' => i += 2,
            b'[' => match class_end(b, i) {
                Some(e) => i = e + 1,
                None => {
                    return Err(Error::new(
                        Status::InvalidArgument,
                        format!("rule pattern '{pattern}': unclosed '[' at byte {i}"),
                    ))
                }
            },
            _ => i += 1,
        }
    }
    Ok(())
}

/// Index of the `]` closing the class opened at `open`.
fn class_end<T: Copy + PartialEq + From<u8>>(p: &[T], open: usize) -> Option<usize> {
    let (bang, caret, close) = (T::from(b'!'), T::from(b'^'), T::from(b']'));
    let mut i = open + 1;
    if i < p.len() && (p[i] == bang || p[i] == caret) {
        i += 1;
    }
    if i < p.len() && p[i] == close {
        i += 1; // a leading ']' is literal
    }
    while i < p.len() {
        if p[i] == close {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn class_matches(class: &[char], c: char) -> bool {
    let (neg, body) = match class.first() {
        Some('!') | Some('^') => (true, &class[1..]),
        _ => (false, class),
    };
    let mut hit = false;
    let mut i = 0;
    while i < body.len() {
        if i + 2 < body.len() && body[i + 1] == '-' {
            hit |= body[i] <= c && c <= body[i + 2];
            i += 3;
        } else {
            hit |= body[i] == c;
            i += 1;
        }
    }
    hit != neg
}

/// Glob match of a whole `name` against `pattern` (see the module documentation).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    // Without allocating: `*` (any run of stars) matches every name, a pattern without special characters
    // matches itself only. A plan asks once per tensor and rule.
    if !pattern.is_empty() && pattern.bytes().all(|b| b == b'*') {
        return true;
    }
    if !pattern.bytes().any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\')) {
        return pattern == name;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None; // (pattern index after '*', name index it matched up to)
    while ni < n.len() {
        let step = if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi + 1, ni));
                    pi += 1;
                    continue;
                }
                '?' => Some(pi + 1),
                '[' => match class_end(&p, pi) {
                    Some(e) if class_matches(&p[pi + 1..e], n[ni]) => Some(e + 1),
                    Some(_) => None,
                    None => (p[pi] == n[ni]).then_some(pi + 1),
                },
                '\\' if pi + 1 < p.len() => (p[pi + 1] == n[ni]).then_some(pi + 2),
                c => (c == n[ni]).then_some(pi + 1),
            }
        } else {
            None
        };
        match step {
            Some(next) => {
                pi = next;
                ni += 1;
            }
            None => match star {
                Some((sp, sn)) => {
                    pi = sp;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

impl Rules {
    /// No rules: everything stays on the host.
    pub fn new() -> Rules {
        Rules::default()
    }

    /// Appends a rule (lower priority than every rule before it). Errors: `INVALID_ARGUMENT` for an empty or
    /// malformed pattern or a target that is neither `host`, `default` nor a device spec.
    pub fn add(&mut self, pattern: &str, target: &str) -> Result<()> {
        check_pattern(pattern)?;
        let target = parse_target(target)?;
        self.rules.push(Rule { pattern: pattern.to_string(), target });
        Ok(())
    }

    /// Appends a rule written `pattern=target` (the CLI form; the last `=` separates them).
    pub fn add_spec(&mut self, spec: &str) -> Result<()> {
        let (p, t) = spec.rsplit_once('=').ok_or_else(|| {
            Error::new(Status::InvalidArgument, format!("rule '{spec}' is not of the form pattern=target"))
        })?;
        self.add(p, t)
    }

    /// Parses a list of `pattern=target` strings.
    pub fn parse<'a>(specs: impl IntoIterator<Item = &'a str>) -> Result<Rules> {
        let mut r = Rules::new();
        for s in specs {
            r.add_spec(s)?;
        }
        Ok(r)
    }

    /// The rules in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The first rule matching `name`, with its index.
    pub fn find(&self, name: &str) -> Option<(usize, &Rule)> {
        self.rules.iter().enumerate().find(|(_, r)| glob_match(&r.pattern, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "a.b/c"));
        assert!(glob_match("tokens", "tokens"));
        assert!(!glob_match("tokens", "tokens2"));
        assert!(glob_match("layer.*.weight", "layer.10.weight"));
        assert!(!glob_match("layer.*.weight", "layer.10.bias"));
        assert!(glob_match("l?yer", "layer"));
        assert!(!glob_match("l?yer", "lyer"));
        assert!(glob_match("h[0-9]", "h7"));
        assert!(!glob_match("h[!0-9]", "h7"));
        assert!(glob_match("h[^0-9]", "hx"));
        assert!(glob_match("*a*b*c", "xxaxxbxxc"));
        assert!(!glob_match("*a*b*c", "xxaxxbxx"));
        assert!(glob_match("a\\*", "a*"));
        assert!(!glob_match("a\\*", "ab"));
        assert!(glob_match("é*", "été"));
    }

    #[test]
    fn first_match_wins() {
        let r = Rules::parse(["tokens=host", "tok*=cpu", "*=default"]).unwrap();
        assert_eq!(r.find("tokens").unwrap().0, 0);
        assert_eq!(r.find("tok2").unwrap().1.target, RuleTarget::Spec("cpu".into()));
        assert_eq!(r.find("w").unwrap().1.target, RuleTarget::Default);
        assert!(Rules::parse(["a=cpu"]).unwrap().find("b").is_none());
    }

    #[test]
    fn bad_rules() {
        for bad in ["nocolon", "=cpu", "a=gpu7", "[ab=cpu", "a=cuda:x"] {
            assert_eq!(Rules::parse([bad]).unwrap_err().status(), Status::InvalidArgument, "{bad}");
        }
        assert!(Rules::parse(["a=b=cuda:1"]).unwrap().find("a=b").is_some());
    }

    #[test]
    fn a_typo_in_a_target_lists_every_accepted_target() {
        for bad in ["a=hots", "a=cdua:0", "a=defualt", "a=cuda:x", "a=gpu:GPU-12"] {
            let e = Rules::parse([bad]).unwrap_err();
            let m = e.message();
            assert!(m.starts_with(&format!("rule target '{}'", &bad[2..])), "{m}");
            for form in ["host", "default", "cpu", "cuda:N", "cuda:GPU-<uuid>", "cuda_host"] {
                assert!(m.contains(form), "{bad}: '{form}' missing from: {m}");
            }
            assert_eq!(m.matches("accepted").count(), 1, "one list: {m}");
        }
    }
}
