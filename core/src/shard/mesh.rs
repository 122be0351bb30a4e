//! A device mesh (named axes and their sizes, like JAX's `Mesh`) and partition specs (which mesh axes split
//! which tensor dimension, like JAX's `PartitionSpec`).

use crate::error::{Error, Result, Status};

/// Most positions a mesh may have: 1,048,576.
pub const MAX_POSITIONS: u64 = 1 << 20;
/// Most axes a mesh may have.
pub const MAX_AXES: usize = 16;

/// Named axes with sizes. Positions are numbered row-major over the axes (the last axis varies fastest),
/// as `numpy.reshape` numbers the devices of a JAX mesh: on a `(x: 2, y: 4)` mesh, position 5 is
/// `(x=1, y=1)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mesh {
    axes: Vec<(String, u64)>,
}

fn bad(msg: String) -> Error {
    Error::new(Status::InvalidArgument, msg)
}

impl Mesh {
    /// A mesh of the given (name, size) axes, outermost first. `INVALID_ARGUMENT` for no axis, an empty,
    /// repeated or reserved name (`None`, `_`) or one containing `,` `+` `=` `(` `)` or white space, a size
    /// of 0; `LIMIT_EXCEEDED` for more than [`MAX_AXES`] axes or [`MAX_POSITIONS`] positions.
    pub fn new<S: AsRef<str>>(axes: &[(S, u64)]) -> Result<Mesh> {
        if axes.is_empty() {
            return Err(bad("a mesh needs at least one axis".into()));
        }
        if axes.len() > MAX_AXES {
            return Err(Error::new(
                Status::LimitExceeded,
                format!("a mesh of {} axes; the hostfirst cap is {MAX_AXES}", axes.len()),
            ));
        }
        let mut out: Vec<(String, u64)> = Vec::with_capacity(axes.len());
        let mut positions = 1u64;
        for (name, size) in axes {
            let name = name.as_ref();
            let reserved = name == "None" || name == "_";
            if name.is_empty() || reserved || name.chars().any(|c| c.is_whitespace() || ",+=()'\"".contains(c)) {
                return Err(bad(format!(
                    "mesh axis name '{name}' is not allowed (empty, reserved, or containing , + = ( ) quotes or space)"
                )));
            }
            if out.iter().any(|(n, _)| n == name) {
                return Err(bad(format!("mesh axis '{name}' is named twice")));
            }
            if *size == 0 {
                return Err(bad(format!("mesh axis '{name}' has size 0")));
            }
            positions = positions.saturating_mul(*size);
            if positions > MAX_POSITIONS {
                return Err(Error::new(
                    Status::LimitExceeded,
                    format!("the mesh has more than {MAX_POSITIONS} positions (the hostfirst cap)"),
                ));
            }
            out.push((name.to_string(), *size));
        }
        Ok(Mesh { axes: out })
    }

    /// The axes (name, size), outermost first.
    pub fn axes(&self) -> &[(String, u64)] {
        &self.axes
    }

    /// The index of the axis called `name`.
    pub fn axis(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|(n, _)| n == name)
    }

    /// Number of positions (the product of the sizes).
    pub fn positions(&self) -> u64 {
        self.axes.iter().map(|a| a.1).product()
    }

    /// The coordinates of `position`; `OUT_OF_RANGE` when it is not below [`Mesh::positions`].
    pub fn coords(&self, position: u64) -> Result<Vec<u64>> {
        let n = self.positions();
        if position >= n {
            return Err(Error::new(
                Status::OutOfRange,
                format!("mesh position {position}, but the mesh {self} has {n} positions (0..{})", n - 1),
            ));
        }
        let mut c = vec![0u64; self.axes.len()];
        let mut p = position;
        for (k, (_, size)) in self.axes.iter().enumerate().rev() {
            c[k] = p % size;
            p /= size;
        }
        Ok(c)
    }

    /// The position at `coords` (one per axis); `INVALID_ARGUMENT` for the wrong count, `OUT_OF_RANGE` for a
    /// coordinate not below its axis size.
    pub fn position(&self, coords: &[u64]) -> Result<u64> {
        if coords.len() != self.axes.len() {
            return Err(bad(format!(
                "{} coordinates for the mesh {self}, which has {} axes",
                coords.len(),
                self.axes.len()
            )));
        }
        let mut p = 0u64;
        for (&c, (name, size)) in coords.iter().zip(&self.axes) {
            if c >= *size {
                return Err(Error::new(
                    Status::OutOfRange,
                    format!("coordinate {c} on mesh axis '{name}' of size {size}"),
                ));
            }
            p = p * size + c;
        }
        Ok(p)
    }
}

impl std::fmt::Display for Mesh {
    /// `(x: 2, y: 4)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(")?;
        for (i, (n, s)) in self.axes.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n}: {s}")?;
        }
        f.write_str(")")
    }
}

/// Which mesh axes split which tensor dimension: one entry per leading tensor dimension, each the mesh axes
/// (major first) whose positions split it. Dimensions past the entries, and empty entries, are not split;
/// mesh axes no entry names replicate (every position along them holds the same shard).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    dims: Vec<Vec<usize>>,
}

impl Spec {
    /// Parses the text form against `mesh`: comma-separated entries, one per tensor dimension from
    /// dimension 0; an entry is an axis name, several joined with `+` (the dimension is split over their
    /// product, the first axis major), or `_`, `None` or nothing for a dimension that is not split. `""`
    /// replicates the whole tensor. JAX's `P('x', 'y')` is `"x,y"`; `P(None, 'y')` is `"_,y"`; `P(('x',
    /// 'y'))` is `"x+y"`. `INVALID_ARGUMENT` for an axis the mesh does not have or an axis named twice.
    pub fn parse(text: &str, mesh: &Mesh) -> Result<Spec> {
        let text = text.trim();
        let mut dims = Vec::new();
        let mut used = vec![false; mesh.axes().len()];
        if !text.is_empty() {
            for entry in text.split(',') {
                let entry = entry.trim();
                let mut axes = Vec::new();
                if !(entry.is_empty() || entry == "_" || entry == "None") {
                    for name in entry.split('+') {
                        let name = name.trim();
                        let a = mesh.axis(name).ok_or_else(|| {
                            bad(format!("partition spec '{text}': the mesh {mesh} has no axis '{name}'"))
                        })?;
                        if std::mem::replace(&mut used[a], true) {
                            return Err(bad(format!("partition spec '{text}': mesh axis '{name}' is used twice")));
                        }
                        axes.push(a);
                    }
                }
                dims.push(axes);
            }
        }
        Ok(Spec { dims })
    }

    /// A spec from axis indices per dimension (checked against `mesh` as [`Spec::parse`] does).
    pub fn from_axes(dims: Vec<Vec<usize>>, mesh: &Mesh) -> Result<Spec> {
        let mut used = vec![false; mesh.axes().len()];
        for &a in dims.iter().flatten() {
            if a >= used.len() {
                return Err(bad(format!("mesh axis index {a}; the mesh {mesh} has {} axes", used.len())));
            }
            if std::mem::replace(&mut used[a], true) {
                return Err(bad(format!("mesh axis '{}' is used twice in one partition spec", mesh.axes()[a].0)));
            }
        }
        Ok(Spec { dims })
    }

    /// The entries: per tensor dimension, the splitting mesh axes (indices into the mesh).
    pub fn dims(&self) -> &[Vec<usize>] {
        &self.dims
    }

    /// True when no dimension is split (the tensor is replicated).
    pub fn is_replicated(&self) -> bool {
        self.dims.iter().all(|d| d.is_empty())
    }

    /// The text form (see [`Spec::parse`]), `""` for a replicated spec.
    pub fn to_text(&self, mesh: &Mesh) -> String {
        let mut n = self.dims.len();
        while n > 0 && self.dims[n - 1].is_empty() {
            n -= 1;
        }
        self.dims[..n]
            .iter()
            .map(|axes| {
                if axes.is_empty() {
                    "_".to_string()
                } else {
                    axes.iter().map(|&a| mesh.axes()[a].0.as_str()).collect::<Vec<_>>().join("+")
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The part of a tensor of `shape` that the position at `coords` holds: per dimension `(start, len)`.
    /// `what` names the tensor in errors: `INVALID_ARGUMENT` when the spec has more entries than the tensor
    /// has dimensions, or when a split dimension does not divide evenly (naming the tensor, the dimension,
    /// its size and the axes).
    pub fn ranges(&self, shape: &[u64], mesh: &Mesh, coords: &[u64], what: &str) -> Result<Vec<(u64, u64)>> {
        if self.dims.len() > shape.len() {
            return Err(bad(format!(
                "{what} has {} dimension(s) {shape:?}, but its partition spec '{}' has {} entries",
                shape.len(),
                self.to_text(mesh),
                self.dims.len()
            )));
        }
        let mut out: Vec<(u64, u64)> = shape.iter().map(|&d| (0, d)).collect();
        for (d, axes) in self.dims.iter().enumerate() {
            if axes.is_empty() {
                continue;
            }
            let (mut parts, mut index) = (1u64, 0u64);
            for &a in axes {
                let size = mesh.axes()[a].1;
                parts *= size;
                index = index * size + coords[a];
            }
            let size = shape[d];
            if size % parts != 0 {
                let names: Vec<&str> = axes.iter().map(|&a| mesh.axes()[a].0.as_str()).collect();
                return Err(bad(format!(
                    "{what}: dimension {d} has size {size}, which mesh axis '{}' ({parts} parts) does not split evenly",
                    names.join("+")
                )));
            }
            let len = size / parts;
            out[d] = (index * len, len);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh() -> Mesh {
        Mesh::new(&[("x", 2), ("y", 4)]).unwrap()
    }

    #[test]
    fn positions_are_row_major() {
        let m = mesh();
        assert_eq!(m.positions(), 8);
        assert_eq!(m.coords(5).unwrap(), vec![1, 1]);
        assert_eq!(m.position(&[1, 1]).unwrap(), 5);
        for p in 0..8 {
            assert_eq!(m.position(&m.coords(p).unwrap()).unwrap(), p);
        }
        assert_eq!(m.coords(8).unwrap_err().status(), Status::OutOfRange);
        assert_eq!(m.position(&[2, 0]).unwrap_err().status(), Status::OutOfRange);
        assert_eq!(m.position(&[0]).unwrap_err().status(), Status::InvalidArgument);
        assert_eq!(m.to_string(), "(x: 2, y: 4)");
    }

    #[test]
    fn bad_meshes() {
        for axes in [vec![], vec![("", 2)], vec![("a", 0)], vec![("a", 1), ("a", 2)], vec![("a,b", 2)], vec![("_", 2)]]
        {
            assert_eq!(Mesh::new(&axes).unwrap_err().status(), Status::InvalidArgument, "{axes:?}");
        }
        assert_eq!(Mesh::new(&[("a", 1 << 11), ("b", 1 << 11)]).unwrap_err().status(), Status::LimitExceeded);
    }

    #[test]
    fn specs_parse_and_split() {
        let m = mesh();
        let xy = Spec::parse("x,y", &m).unwrap();
        assert_eq!(xy.dims(), &[vec![0], vec![1]]);
        assert_eq!(xy.to_text(&m), "x,y");
        // [4, 8] on position (1, 2): rows 2..4, columns 4..6.
        assert_eq!(xy.ranges(&[4, 8], &m, &[1, 2], "t").unwrap(), vec![(2, 2), (4, 2)]);
        let y = Spec::parse("None, y", &m).unwrap();
        assert_eq!(y.to_text(&m), "_,y");
        assert_eq!(y.ranges(&[3, 8, 5], &m, &[1, 3], "t").unwrap(), vec![(0, 3), (6, 2), (0, 5)]);
        let both = Spec::parse("x+y", &m).unwrap();
        assert_eq!(both.ranges(&[16], &m, &[1, 2], "t").unwrap(), vec![(12, 2)]);
        let r = Spec::parse("", &m).unwrap();
        assert!(r.is_replicated());
        assert_eq!(r.ranges(&[3], &m, &[1, 1], "t").unwrap(), vec![(0, 3)]);
        assert!(Spec::parse("_,_", &m).unwrap().is_replicated());
        assert_eq!(Spec::parse("z", &m).unwrap_err().status(), Status::InvalidArgument);
        assert_eq!(Spec::parse("x,x", &m).unwrap_err().status(), Status::InvalidArgument);
        assert_eq!(Spec::parse("x+x", &m).unwrap_err().status(), Status::InvalidArgument);
    }

    #[test]
    fn uneven_and_rank_errors_name_the_numbers() {
        let m = mesh();
        let e = Spec::parse("_,y", &m).unwrap().ranges(&[4, 10], &m, &[0, 0], "tensor 'w'").unwrap_err();
        assert_eq!(e.status(), Status::InvalidArgument);
        assert!(
            e.message().contains("tensor 'w'")
                && e.message().contains("dimension 1 has size 10")
                && e.message().contains("'y' (4 parts)"),
            "{}",
            e.message()
        );
        let e = Spec::parse("x,y", &m).unwrap().ranges(&[4], &m, &[0, 0], "tensor 'b'").unwrap_err();
        assert!(e.message().contains("1 dimension(s)") && e.message().contains("2 entries"), "{}", e.message());
    }
}
