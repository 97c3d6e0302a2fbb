//! One DataFusion `Accumulator` per group, for the aggregates [`super::numeric`] does not
//! keep column-wise (`FIRST_VALUE`, `LAST_VALUE`, `LISTAGG`, `STDDEV_*`, `VAR_*`, DECIMAL
//! `SUM`, and `MIN`, `MAX`, `COUNT(DISTINCT)`: over a changelog as a [`Multiset`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use datafusion_common::arrow::compute::take;
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use sluice_common::Result;

use super::multiset::{Multiset, MultisetKind};
use super::{BatchRows, GroupsState};

/// See the module docs. A group's accumulator is created when its first row arrives.
pub struct RowwiseGroups {
    aggregate: Arc<AggregateFunctionExpr>,
    retracting: bool,
    accumulators: Vec<Option<Box<dyn Accumulator>>>,
}

impl RowwiseGroups {
    /// Accumulators of `aggregate`; `retracting`: ones that can retract any value.
    pub fn new(aggregate: Arc<AggregateFunctionExpr>, retracting: bool) -> Self {
        RowwiseGroups {
            aggregate,
            retracting,
            accumulators: Vec::new(),
        }
    }

    fn create(&self) -> Result<Box<dyn Accumulator>> {
        new_accumulator(&self.aggregate, self.retracting)
    }

    /// Group `g`'s accumulator, created if it has none.
    fn accumulator(&mut self, g: usize) -> Result<&mut Box<dyn Accumulator>> {
        if self.accumulators.len() <= g {
            self.accumulators.resize_with(g + 1, || None);
        }
        if self.accumulators[g].is_none() {
            self.accumulators[g] = Some(self.create()?);
        }
        Ok(self.accumulators[g].as_mut().expect("created above"))
    }
}

impl GroupsState for RowwiseGroups {
    fn update(
        &mut self,
        values: &[ArrayRef],
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        // Rows of each group in arrival order, as runs of added or retracted rows: an
        // order-sensitive aggregate (LAST_VALUE, LISTAGG) must see a retraction after the
        // rows that arrived before it and before those after it.
        let mut per_group: BTreeMap<usize, Vec<(bool, Vec<u32>)>> = BTreeMap::new();
        for (row, &g) in rows.groups.iter().enumerate() {
            if filter.is_some_and(|f| !(f.is_valid(row) && f.value(row))) {
                continue;
            }
            let retract = rows.is_retraction(row);
            let runs = per_group.entry(g).or_default();
            match runs.last_mut() {
                Some((r, rows)) if *r == retract => rows.push(row as u32),
                _ => runs.push((retract, vec![row as u32])),
            }
        }
        for (g, runs) in per_group {
            for (retract, selected) in runs {
                let idx = UInt32Array::from(selected);
                let args = values
                    .iter()
                    .map(|c| take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let accumulator = self.accumulator(g)?;
                if retract {
                    accumulator.retract_batch(&args)?;
                } else {
                    accumulator.update_batch(&args)?;
                }
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef> {
        let mut values = Vec::with_capacity(groups.len());
        for &g in groups {
            values.push(self.accumulator(g as usize)?.evaluate()?);
        }
        if values.is_empty() {
            return Ok(datafusion_common::arrow::array::new_empty_array(
                &super::result_type(&self.aggregate),
            ));
        }
        Ok(ScalarValue::iter_to_array(values)?)
    }

    /// DataFusion's `Accumulator::state` columns (a sliding accumulator's state may have
    /// more columns than the aggregate's `state_fields`). `state()` may consume an
    /// accumulator, so each is rebuilt from the state it gave.
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        let mut columns: Vec<Vec<ScalarValue>> = Vec::new();
        for &g in groups {
            let mut fresh = self.create()?;
            let accumulator = self.accumulator(g as usize)?;
            let state = accumulator.state()?;
            let arrays = state
                .iter()
                .map(|v| v.to_array())
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            fresh.merge_batch(&arrays)?;
            *accumulator = fresh;
            if columns.is_empty() {
                columns = vec![Vec::with_capacity(groups.len()); state.len()];
            }
            for (column, value) in columns.iter_mut().zip(state) {
                column.push(value);
            }
        }
        columns
            .into_iter()
            .map(|values| Ok(ScalarValue::iter_to_array(values)?))
            .collect()
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], _total_groups: usize) -> Result<()> {
        for (row, &g) in groups.iter().enumerate() {
            let slices = states.iter().map(|c| c.slice(row, 1)).collect::<Vec<_>>();
            self.accumulator(g)?.merge_batch(&slices)?;
        }
        Ok(())
    }

    fn reset(&mut self, group: usize) {
        if let Some(slot) = self.accumulators.get_mut(group) {
            *slot = None;
        }
    }
}

/// A new accumulator for `aggregate`; for a changelog input (`retracting`), one that can
/// retract any value.
fn new_accumulator(
    aggregate: &AggregateFunctionExpr,
    retracting: bool,
) -> Result<Box<dyn Accumulator>> {
    if !retracting {
        return Ok(aggregate.create_accumulator()?);
    }
    match aggregate.fun().name() {
        // DataFusion's sliding MIN/MAX retract in arrival order only (window frames); a
        // changelog retracts any value, so keep them all.
        "min" | "max" => Ok(Box::new(Multiset::new(
            if aggregate.fun().name() == "min" {
                MultisetKind::Min
            } else {
                MultisetKind::Max
            },
            aggregate.field().data_type().clone(),
        ))),
        // DataFusion's sliding COUNT(DISTINCT) keeps counts, but its state (what a
        // checkpoint holds) only the values: a restored one would lose multiplicities.
        // Ours keeps both in its state.
        "count" if aggregate.is_distinct() => {
            let values_type = match aggregate.state_fields()?[0].data_type() {
                DataType::List(item) => item.data_type().clone(),
                other => other.clone(),
            };
            Ok(Box::new(Multiset::new(
                MultisetKind::CountDistinct,
                values_type,
            )))
        }
        _ => Ok(aggregate.create_sliding_accumulator()?),
    }
}
