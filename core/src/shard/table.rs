//! A shard plan with what its descriptions point to, made once when the plan is made: per shard the
//! index of its file, where it starts in every dimension and the whole tensor's shape; per file its name as a
//! C string. Descriptions borrow from the table, so they stay valid while it lives (the C API hands out
//! pointers into it from `hostfirst_shard_plan_describe` until `hostfirst_shard_plan_free`).

use super::{ShardEntry, ShardPlan};
use crate::engine::Tuning;
use crate::error::{Error, Result, Status};
use std::ffi::{CStr, CString};
use std::sync::Arc;

/// A plan, the tuning its runs use, and its descriptions (see the module documentation).
pub struct PlanTable {
    /// The plan.
    pub plan: ShardPlan,
    /// How its runs read (threads, queue depth, read sizes).
    pub tuning: Tuning,
    files: Vec<CString>,
    rows: Vec<Row>,
}

/// What a shard's description needs besides its entry.
struct Row {
    /// Index into `files`.
    file: usize,
    /// Where the shard starts in every dimension of the whole tensor.
    start: Box<[u64]>,
    /// The whole tensor's shape (shared by the shards of one tensor).
    shape: Arc<[u64]>,
}

/// One shard as described: its plan entry and the arrays and name the description points to.
pub struct ShardRow<'a> {
    /// The plan entry.
    pub entry: &'a ShardEntry,
    /// The file the shard is read from, as opened (`<memory>` for a buffer).
    pub file: &'a CStr,
    /// Where the shard starts in every dimension (empty for a scalar).
    pub start: &'a [u64],
    /// The whole tensor's shape (empty for a scalar).
    pub shape: &'a [u64],
}

impl PlanTable {
    /// Makes the descriptions of every shard of `plan`.
    pub fn new(plan: ShardPlan, tuning: Tuning) -> Result<PlanTable> {
        // A file name with a NUL (which no path has) is shown with `\0` instead.
        let files: Vec<CString> =
            plan.files.iter().map(|s| CString::new(s.file.replace('\0', "\\0")).unwrap_or_default()).collect();
        let mut rows = Vec::with_capacity(plan.entries.len());
        let mut shape: Option<(usize, Arc<[u64]>)> = None;
        for e in &plan.entries {
            let file = plan.files.iter().position(|s| s.file == e.view.file_display()).unwrap_or(0);
            let start: Box<[u64]> = e.ranges.iter().map(|r| r.0).collect();
            let whole = match &shape {
                Some((t, s)) if *t == e.tensor => Arc::clone(s),
                _ => {
                    let s: Arc<[u64]> = plan.file.view_at(e.tensor)?.shape().into();
                    shape = Some((e.tensor, Arc::clone(&s)));
                    s
                }
            };
            rows.push(Row { file, start, shape: whole });
        }
        Ok(PlanTable { plan, tuning, files, rows })
    }

    /// The number of shards.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the plan has no shard.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Shard `index` (plan order); `OUT_OF_RANGE` naming the count past the end.
    pub fn row(&self, index: usize) -> Result<ShardRow<'_>> {
        let n = self.rows.len();
        let (Some(entry), Some(row)) = (self.plan.entries.get(index), self.rows.get(index)) else {
            return Err(Error::new(Status::OutOfRange, format!("shard index {index}, but the plan has {n} shards")));
        };
        Ok(ShardRow {
            entry,
            file: self.files.get(row.file).map_or(c"", CString::as_c_str),
            start: &row.start,
            shape: &row.shape,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Mesh, Owned, ShardRules};
    use super::*;
    use crate::device::Device;
    use crate::file::{ReadPolicy, TensorFile};

    fn file() -> TensorFile {
        // a [4, 6] u8 tensor and a scalar
        let header = concat!(
            r#"{"a":{"dtype":"U8","shape":[4,6],"data_offsets":[0,24]},"#,
            r#""s":{"dtype":"U8","shape":[],"data_offsets":[24,25]}}"#
        )
        .as_bytes();
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header);
        v.extend(0u8..25);
        TensorFile::from_bytes(v).unwrap()
    }

    #[test]
    fn rows_describe_each_shard() {
        let f = file();
        let mesh = Arc::new(Mesh::new(&[("x", 2)]).unwrap());
        let mut rules = ShardRules::new(Arc::clone(&mesh));
        rules.add("a", "x,None").unwrap();
        let owned = [Owned { position: 1, device: Device::CPU }, Owned { position: 0, device: Device::CPU }];
        let plan = ShardPlan::make(&f, &rules, &owned, ReadPolicy::default()).unwrap();
        let t = PlanTable::new(plan, Tuning::default()).unwrap();
        assert_eq!(t.len(), 4, "two tensors, two owned positions");
        let r = t.row(0).unwrap();
        assert_eq!((r.start, r.shape), (&[2u64, 0][..], &[4u64, 6][..]), "position 1 holds rows 2..4");
        assert_eq!(r.file.to_str().unwrap(), "<memory>");
        let r = t.row(1).unwrap();
        assert_eq!((r.start, r.shape), (&[0u64, 0][..], &[4u64, 6][..]));
        let r = t.row(3).unwrap();
        assert!(r.start.is_empty() && r.shape.is_empty(), "a scalar");
        let e = t.row(4).map(|_| ()).unwrap_err();
        assert_eq!(e.status(), Status::OutOfRange);
        assert!(e.to_string().contains("shard index 4, but the plan has 4 shards"), "{e}");
    }
}
