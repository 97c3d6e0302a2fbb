//! Several `COUNT(DISTINCT x)` of one column that differ only in their `FILTER`, kept in
//! one value table per group (up to [`WIDTH`] aggregates per table): each value with one
//! row count per aggregate, so a row costs one lookup however many of the filters it
//! passes. Flink's code generator shares a distinct value's state between the
//! aggregates of one column the same way (`DistinctAggCodeGen`: one map view per distinct
//! argument, a bit per filter). Answers, types and snapshot columns are exactly those of
//! a [`super::distinct::DistinctCount`] per aggregate (itself a `SharedDistinct<1>`):
//! only where the values live differs.
//!
//! A batch is applied row by row in arrival order; [`PREFETCH_AHEAD`] rows ahead, the
//! row's group and then its value's slot are prefetched
//! ([`super::value_counts`]), so the cache misses of several rows overlap.

use datafusion_common::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array};
use datafusion_common::arrow::datatypes::DataType;
use std::sync::Arc;

use sluice_common::{Result, SluiceError};

use super::value_counts::ValueCounts;
use super::value_keys::{counted_lists, keys, read_counted_lists};
use super::BatchRows;
use crate::state::probe_table::prefetch;

/// The most aggregates one table serves in an operator's shared units.
pub const WIDTH: usize = 4;

/// How many rows ahead a row's value slot is prefetched (its group twice as far ahead).
const PREFETCH_AHEAD: usize = 8;

/// One group's values and, per aggregate, how many have a count above 0 (its result).
/// One cache line for the common widths.
#[repr(align(64))]
struct Group<const W: usize> {
    values: ValueCounts<W>,
    distinct: [i64; W],
}

impl<const W: usize> Default for Group<W> {
    fn default() -> Self {
        Group {
            values: ValueCounts::default(),
            distinct: [0; W],
        }
    }
}

/// See the module docs.
pub struct SharedDistinct<const W: usize> {
    /// The argument's type.
    data_type: DataType,
    /// Per group id.
    groups: Vec<Group<W>>,
}

impl<const W: usize> SharedDistinct<W> {
    /// `W` distinct counts (`W` from 1) over values of `data_type`
    /// ([`super::value_keys::supports`] it).
    pub fn new(data_type: DataType) -> Self {
        SharedDistinct {
            data_type,
            groups: Vec::new(),
        }
    }

    fn grow(&mut self, total: usize) {
        if self.groups.len() < total {
            self.groups.resize_with(total, Group::default);
        }
    }

    /// Adds one row of value `x` to group `g` for the aggregates whose bit is set in
    /// `mask` (or takes one copy out).
    fn add(&mut self, g: usize, x: i64, mask: u8, retract: bool) {
        let Group { values, distinct } = &mut self.groups[g];
        if retract {
            values.change(x, |counts| {
                for (j, c) in counts.iter_mut().enumerate() {
                    if mask & (1 << j) != 0 && *c > 0 {
                        *c -= 1;
                        if *c == 0 {
                            distinct[j] -= 1;
                        }
                    }
                }
            });
        } else {
            let counts = values.get_or_insert(x);
            for (j, c) in counts.iter_mut().enumerate() {
                if mask & (1 << j) != 0 {
                    if *c == 0 {
                        distinct[j] += 1;
                    }
                    *c += 1;
                }
            }
        }
    }

    /// Adds (or retracts) a batch: `values` is the shared argument, `filters` one per
    /// aggregate (`None`: no `FILTER`); a row counts for the aggregates whose filter is
    /// true, and for none where the value is NULL.
    ///
    /// # Errors
    /// An argument of a type without value keys.
    pub fn update(
        &mut self,
        values: &ArrayRef,
        filters: &[Option<&BooleanArray>],
        rows: BatchRows<'_>,
    ) -> Result<()> {
        self.grow(rows.total_groups);
        let v = keys(values)?;
        let x = v.values();
        let groups = rows.groups;
        for (row, &g) in groups.iter().enumerate() {
            if let Some(&ahead) = groups.get(row + 2 * PREFETCH_AHEAD) {
                prefetch(&self.groups[ahead]);
            }
            if let Some(&ahead) = groups.get(row + PREFETCH_AHEAD) {
                self.groups[ahead].values.prefetch(x[row + PREFETCH_AHEAD]);
            }
            if v.is_null(row) {
                continue;
            }
            let mut mask = 0u8;
            for (j, f) in filters.iter().enumerate() {
                if f.is_none_or(|m| m.is_valid(row) && m.value(row)) {
                    mask |= 1 << j;
                }
            }
            if mask != 0 {
                self.add(g, x[row], mask, rows.is_retraction(row));
            }
        }
        Ok(())
    }

    /// Aggregate `j`'s count for each of `groups` (BIGINT, never NULL).
    pub fn evaluate(&self, j: usize, groups: &[u32]) -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(groups.iter().map(|&g| {
            self.groups.get(g as usize).map_or(0, |d| d.distinct[j])
        })))
    }

    /// Aggregate `j`'s snapshot column: per group a list of its values, each repeated by
    /// its count (as [`super::distinct::DistinctCount`] writes it).
    ///
    /// # Errors
    /// A type without value keys.
    pub fn state(&self, j: usize, groups: &[u32]) -> Result<ArrayRef> {
        let sets = groups.iter().map(|&g| {
            self.groups
                .get(g as usize)
                .into_iter()
                .flat_map(|group| group.values.iter())
                .filter(move |(_, c)| c[j] > 0)
                .map(move |(x, c)| (x, &c[j]))
        });
        counted_lists(sets, &self.data_type)
    }

    /// Adds aggregate `j`'s snapshot column (row `i` into group `groups[i]`).
    ///
    /// # Errors
    /// A column of another shape than [`Self::state`] writes.
    pub fn merge(
        &mut self,
        j: usize,
        column: Option<&ArrayRef>,
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        self.grow(total);
        let column = column
            .ok_or_else(|| SluiceError::Internal("COUNT(DISTINCT) state: no column".into()))?;
        read_counted_lists(column, "COUNT(DISTINCT)", |row, x| {
            self.add(groups[row], x, 1 << j, false);
            Ok(())
        })
    }

    /// Empties `group`.
    pub fn reset(&mut self, group: usize) {
        if let Some(g) = self.groups.get_mut(group) {
            *g = Group::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::distinct::DistinctCount;
    use super::super::GroupsState;
    use super::*;
    use datafusion_common::arrow::array::AsArray;
    use datafusion_common::arrow::datatypes::Int64Type;

    fn counts<const W: usize>(s: &SharedDistinct<W>, j: usize, groups: &[u32]) -> Vec<i64> {
        s.evaluate(j, groups)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec()
    }

    /// Three counts of one column: no filter, `v < 10`, `v >= 10`, over two groups, with
    /// a NULL, a repeated value and retractions (counts derived by hand).
    #[test]
    fn filtered_counts_share_one_map() {
        let mut s = SharedDistinct::<3>::new(DataType::Int64);
        let values: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(1),
            Some(1),
            Some(20),
            None,
            Some(5),
            Some(30),
        ]));
        let below: Vec<bool> = [1, 1, 20, 0, 5, 30].iter().map(|&v| v < 10).collect();
        let low = BooleanArray::from(below.clone());
        let high = BooleanArray::from(below.iter().map(|b| !b).collect::<Vec<_>>());
        let rows = BatchRows {
            groups: &[0, 0, 0, 0, 1, 1],
            retract: None,
            total_groups: 2,
        };
        s.update(&values, &[None, Some(&low), Some(&high)], rows)
            .unwrap();
        // Group 0: {1, 20}; below 10 {1}; from 10 {20}. Group 1: {5, 30}; {5}; {30}.
        assert_eq!(counts(&s, 0, &[0, 1]), [2, 2]);
        assert_eq!(counts(&s, 1, &[0, 1]), [1, 1]);
        assert_eq!(counts(&s, 2, &[0, 1]), [1, 1]);

        // Retract one of the two 1s and the 20 of group 0: 1 stays, 20 goes.
        let values: ArrayRef = Arc::new(Int64Array::from(vec![1, 20]));
        let low = BooleanArray::from(vec![true, false]);
        let high = BooleanArray::from(vec![false, true]);
        let rows = BatchRows {
            groups: &[0, 0],
            retract: Some(&[true, true]),
            total_groups: 2,
        };
        s.update(&values, &[None, Some(&low), Some(&high)], rows)
            .unwrap();
        assert_eq!(counts(&s, 0, &[0, 1]), [1, 2]);
        assert_eq!(counts(&s, 1, &[0, 1]), [1, 1]);
        assert_eq!(counts(&s, 2, &[0, 1]), [0, 1]);
        s.reset(1);
        assert_eq!(counts(&s, 0, &[0, 1]), [1, 0]);
    }

    /// Each aggregate's snapshot column is a `DistinctCount`'s: it restores into one (and
    /// back into a shared map) with the same counts, the value counts included (a later
    /// retraction of one of two copies keeps the value).
    #[test]
    fn snapshot_columns_are_those_of_a_distinct_count() {
        let mut s = SharedDistinct::<2>::new(DataType::Int64);
        let values: ArrayRef = Arc::new(Int64Array::from(vec![7, 7, 8]));
        let only_first = BooleanArray::from(vec![true, false, false]);
        let rows = BatchRows {
            groups: &[0, 0, 0],
            retract: None,
            total_groups: 1,
        };
        s.update(&values, &[None, Some(&only_first)], rows).unwrap();
        let all = s.state(0, &[0]).unwrap();
        let first = s.state(1, &[0]).unwrap();

        let mut own = DistinctCount::new(DataType::Int64);
        own.merge(std::slice::from_ref(&all), &[0], 1).unwrap();
        let own_counts = own.evaluate(&[0]).unwrap();
        assert_eq!(own_counts.as_primitive::<Int64Type>().values(), &[2]);

        let mut restored = SharedDistinct::<2>::new(DataType::Int64);
        restored.merge(0, Some(&all), &[0], 1).unwrap();
        restored.merge(1, Some(&first), &[0], 1).unwrap();
        assert_eq!(counts(&restored, 0, &[0]), [2]);
        assert_eq!(counts(&restored, 1, &[0]), [1]);
        let one_seven: ArrayRef = Arc::new(Int64Array::from(vec![7]));
        let rows = BatchRows {
            groups: &[0],
            retract: Some(&[true]),
            total_groups: 1,
        };
        restored.update(&one_seven, &[None, None], rows).unwrap();
        // All: 7 had two copies, one left; the first aggregate's only 7 is gone.
        assert_eq!(counts(&restored, 0, &[0]), [2]);
        assert_eq!(counts(&restored, 1, &[0]), [0]);
    }
}
