//! Sharding rules: an ordered list of (glob pattern on tensor names, partition spec) over one mesh, the way
//! placement rules ([`crate::place::Rules`]) map names to devices. The first matching rule wins; a tensor no
//! rule matches is replicated (every position holds all of it). A skip rule leaves the tensors it matches out
//! of a plan (a process loading only some tensors this way, e.g. one plan per mesh).

use super::mesh::{Mesh, Spec};
use crate::error::{Error, Result, Status};
use crate::place::rules::glob_match;
use std::sync::Arc;

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRule {
    /// Glob pattern on tensor names (the syntax of [`crate::place::rules`]).
    pub pattern: String,
    /// The spec of the tensors it matches; `None` for a skip rule (they are not loaded).
    pub spec: Option<Spec>,
}

/// Rules over one mesh.
#[derive(Clone, Debug)]
pub struct ShardRules {
    mesh: Arc<Mesh>,
    rules: Vec<ShardRule>,
}

impl ShardRules {
    /// No rules over `mesh`: every tensor replicated.
    pub fn new(mesh: Arc<Mesh>) -> ShardRules {
        ShardRules { mesh, rules: Vec::new() }
    }

    /// The mesh.
    pub fn mesh(&self) -> &Arc<Mesh> {
        &self.mesh
    }

    /// Appends a rule (lower priority than every rule before it); `spec` in the text form of
    /// [`Spec::parse`]. `INVALID_ARGUMENT` for an empty pattern or a spec the mesh cannot satisfy.
    pub fn add(&mut self, pattern: &str, spec: &str) -> Result<()> {
        let spec = Spec::parse(spec, &self.mesh).map_err(|e| e.context(format!("rule '{pattern}'")))?;
        self.add_spec(pattern, spec)
    }

    /// Appends a rule with a spec already made for this mesh.
    pub fn add_spec(&mut self, pattern: &str, spec: Spec) -> Result<()> {
        self.push(pattern, Some(spec))
    }

    /// Appends a skip rule: the tensors it matches (unless an earlier rule matched them) are left out of plans.
    pub fn skip(&mut self, pattern: &str) -> Result<()> {
        self.push(pattern, None)
    }

    fn push(&mut self, pattern: &str, spec: Option<Spec>) -> Result<()> {
        if pattern.is_empty() {
            return Err(Error::new(Status::InvalidArgument, "empty sharding rule pattern"));
        }
        // The placement rules' pattern checks (unclosed classes, a trailing backslash).
        crate::place::Rules::new().add(pattern, "host")?;
        self.rules.push(ShardRule { pattern: pattern.to_string(), spec });
        Ok(())
    }

    /// The rules in order.
    pub fn rules(&self) -> &[ShardRule] {
        &self.rules
    }

    /// The first rule matching `name`, with its index.
    pub fn find(&self, name: &str) -> Option<(usize, &ShardRule)> {
        self.rules.iter().enumerate().find(|(_, r)| glob_match(&r.pattern, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_match_wins_and_bad_rules_fail() {
        let mesh = Arc::new(Mesh::new(&[("x", 2), ("y", 4)]).unwrap());
        let mut r = ShardRules::new(mesh);
        r.add("*.bias", "").unwrap();
        r.add("layer.*", "x,y").unwrap();
        assert_eq!(r.find("layer.0.bias").unwrap().0, 0);
        assert_eq!(r.find("layer.0.w").unwrap().1.spec.as_ref().unwrap().dims(), &[vec![0], vec![1]]);
        r.skip("emb*").unwrap();
        assert_eq!(r.find("embed").map(|(i, r)| (i, r.spec.is_none())), Some((2, true)));
        assert_eq!(r.skip("").unwrap_err().status(), Status::InvalidArgument);
        assert_eq!(r.add("", "x").unwrap_err().status(), Status::InvalidArgument);
        assert_eq!(r.add("[a", "x").unwrap_err().status(), Status::InvalidArgument);
        let e = r.add("w", "z").unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(e.message().contains("rule 'w'"), "{}", e.message());
        assert_eq!(r.rules().len(), 3);
    }
}
