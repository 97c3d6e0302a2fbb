//! `MIN` and `MAX` of integer, floating-point and TIMESTAMP columns kept per group without
//! scalars, each value as its [`super::value_keys`] key: over an append-only input the
//! best value so far;
//! over a changelog every value with its count (a retraction takes one copy out, so the
//! next best is known), as [`super::multiset::Multiset`] keeps them for other types.
//! Values and result type are the argument's (Flink docs, "Aggregate Functions"); NULL
//! while a group holds no value.

use datafusion_common::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array};
use datafusion_common::arrow::datatypes::DataType;
use sluice_common::{Result, SluiceError};
use std::collections::BTreeMap;

use super::numeric::for_each_row;
use super::value_keys::{counted_lists, keys, read_counted_lists, values};
use super::{BatchRows, GroupsState};

/// Per group: the best value, or every value with its count.
enum Values {
    Best { best: Vec<i64>, has: Vec<bool> },
    Counted(Vec<BTreeMap<i64, u64>>),
}

/// See the module docs.
pub struct MinMax {
    max: bool,
    /// The argument's (and result's) type.
    data_type: DataType,
    values: Values,
}

impl MinMax {
    /// `MAX` (else `MIN`) of values of `data_type` ([`supports`] it); `retracting`: the
    /// input is a changelog.
    pub fn new(max: bool, data_type: DataType, retracting: bool) -> Self {
        let values = if retracting {
            Values::Counted(Vec::new())
        } else {
            Values::Best {
                best: Vec::new(),
                has: Vec::new(),
            }
        };
        MinMax {
            max,
            data_type,
            values,
        }
    }

    fn grow(&mut self, total: usize) {
        match &mut self.values {
            Values::Best { best, has } => {
                if best.len() < total {
                    best.resize(total, 0);
                    has.resize(total, false);
                }
            }
            Values::Counted(v) => {
                if v.len() < total {
                    v.resize_with(total, BTreeMap::new);
                }
            }
        }
    }

    /// The current value of group `g`.
    fn value(&self, g: usize) -> Option<i64> {
        match &self.values {
            Values::Best { best, has } => has.get(g).copied().unwrap_or(false).then(|| best[g]),
            Values::Counted(v) => {
                let set = v.get(g)?;
                if self.max {
                    set.keys().next_back().copied()
                } else {
                    set.keys().next().copied()
                }
            }
        }
    }

    /// `values` (keys) in the argument's type.
    fn typed(&self, keys: Int64Array) -> Result<ArrayRef> {
        values(keys, &self.data_type)
    }

    /// Adds `x` to group `g` (or takes one copy out).
    fn add(&mut self, g: usize, x: i64, retract: bool) -> Result<()> {
        let max = self.max;
        match &mut self.values {
            Values::Best { best, has } => {
                if retract {
                    return Err(SluiceError::Internal(
                        "MIN/MAX of an append-only input got a retraction".into(),
                    ));
                }
                if !has[g] || (max && x > best[g]) || (!max && x < best[g]) {
                    best[g] = x;
                    has[g] = true;
                }
            }
            Values::Counted(v) => {
                let set = &mut v[g];
                if retract {
                    if let Some(c) = set.get_mut(&x) {
                        *c -= 1;
                        if *c == 0 {
                            set.remove(&x);
                        }
                    }
                } else {
                    *set.entry(x).or_default() += 1;
                }
            }
        }
        Ok(())
    }
}

impl GroupsState for MinMax {
    fn update(
        &mut self,
        values: &[ArrayRef],
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.grow(rows.total_groups);
        let v = keys(&values[0])?;
        let x = v.values();
        let mut failed = None;
        for_each_row(rows, v.nulls(), filter, |row, g, retract| {
            if let Err(e) = self.add(g, x[row], retract) {
                failed = Some(e);
            }
        });
        failed.map_or(Ok(()), Err)
    }

    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef> {
        self.typed(Int64Array::from_iter(
            groups.iter().map(|&g| self.value(g as usize)),
        ))
    }

    /// Append-only: one column, the value (NULL without one), as DataFusion's MIN/MAX
    /// state. Over a changelog: one list per group of every value repeated by its count,
    /// as [`super::multiset::Multiset`]'s state.
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        let Values::Counted(sets) = &self.values else {
            return Ok(vec![self.evaluate(groups)?]);
        };
        let sets = groups
            .iter()
            .map(|&g| sets.get(g as usize).into_iter().flatten());
        Ok(vec![counted_lists(sets, &self.data_type)?])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.grow(total);
        let column = states
            .first()
            .ok_or_else(|| SluiceError::Internal("MIN/MAX state: no column".into()))?;
        if matches!(self.values, Values::Counted(_)) {
            read_counted_lists(column, "MIN/MAX of a changelog", |row, x| {
                self.add(groups[row], x, false)
            })?;
        } else {
            let v = keys(column)?;
            for (row, &g) in groups.iter().enumerate() {
                if v.is_valid(row) {
                    self.add(g, v.value(row), false)?;
                }
            }
        }
        Ok(())
    }

    fn reset(&mut self, group: usize) {
        match &mut self.values {
            Values::Best { has, .. } => {
                if let Some(h) = has.get_mut(group) {
                    *h = false;
                }
            }
            Values::Counted(v) => {
                if let Some(set) = v.get_mut(group) {
                    set.clear();
                }
            }
        }
    }
}
