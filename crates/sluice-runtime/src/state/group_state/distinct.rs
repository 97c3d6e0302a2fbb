//! `COUNT(DISTINCT x)` of integer, floating-point and TIMESTAMP columns: per group every
//! non-NULL value (its [`super::value_keys`] key) with how many rows hold it, so over a
//! changelog a retraction takes one copy out and the value leaves when none is left
//! (DataFusion's sliding distinct count keeps counts too, but writes only the values into
//! its state: a restored one would lose them). BIGINT, never NULL.

use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array};
use datafusion_common::arrow::datatypes::DataType;
use hashbrown::HashMap;
use sluice_common::{Result, SluiceError};

use super::numeric::for_each_row;
use super::value_keys::{counted_lists, keys, read_counted_lists};
use super::{BatchRows, GroupsState};

/// See the module docs.
pub struct DistinctCount {
    /// The argument's type.
    data_type: DataType,
    /// Per group id: value key → rows holding it (never 0).
    groups: Vec<HashMap<i64, u32>>,
}

impl DistinctCount {
    /// Distinct values of `data_type` ([`super::value_keys::supports`] it).
    pub fn new(data_type: DataType) -> Self {
        DistinctCount {
            data_type,
            groups: Vec::new(),
        }
    }

    fn add(&mut self, g: usize, x: i64, retract: bool) {
        let set = &mut self.groups[g];
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

    fn grow(&mut self, total: usize) {
        if self.groups.len() < total {
            self.groups.resize_with(total, HashMap::new);
        }
    }
}

impl GroupsState for DistinctCount {
    fn update(
        &mut self,
        values: &[ArrayRef],
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.grow(rows.total_groups);
        let v = keys(&values[0])?;
        let x = v.values();
        for_each_row(rows, v.nulls(), filter, |row, g, retract| {
            self.add(g, x[row], retract)
        });
        Ok(())
    }

    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter_values(groups.iter().map(
            |&g| self.groups.get(g as usize).map_or(0, |s| s.len() as i64),
        ))))
    }

    /// One column: per group a list of its values, each repeated by its count (the
    /// layout of [`super::multiset::Multiset`]'s state).
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        let sets = groups
            .iter()
            .map(|&g| self.groups.get(g as usize).into_iter().flatten());
        Ok(vec![counted_lists(sets, &self.data_type)?])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.grow(total);
        let column = states
            .first()
            .ok_or_else(|| SluiceError::Internal("COUNT(DISTINCT) state: no column".into()))?;
        read_counted_lists(column, "COUNT(DISTINCT)", |row, x| {
            self.add(groups[row], x, false);
            Ok(())
        })
    }

    fn reset(&mut self, group: usize) {
        if let Some(set) = self.groups.get_mut(group) {
            *set = HashMap::new();
        }
    }
}
