//! Column-wise, retractable aggregate state for many groups: the state of the updating
//! aggregate (`GROUP BY` without windows, issue 19).
//!
//! DataFusion's `GroupsAccumulator` keeps an aggregate's state column-wise for every group
//! (one `Vec` slot per group id), but it can neither retract a value nor be read without
//! being consumed (`evaluate(EmitTo)` hands the state over). A changelog aggregate needs
//! both: a `-U`/`-D` input row takes its value back out of its group, and every batch reads
//! the changed groups' current values and keeps them. [`GroupsState`] is that contract:
//!
//! - [`GroupsState::update`] adds and retracts a whole batch at once: row `i` goes to group
//!   `groups[i]` (the dense ids of [`super::keyed::KeyRegistry`]), retracted where
//!   `retract[i]`, skipped where the `FILTER` mask is not true. Rows are applied in
//!   arrival order, so an order-sensitive aggregate (`LAST_VALUE`, `LISTAGG`) sees a
//!   retraction after the rows that came before it.
//! - [`GroupsState::evaluate`] reads the current values of some groups as one array,
//!   leaving the state as it was.
//! - [`GroupsState::state`] / [`GroupsState::merge`] write and read a snapshot: one row per
//!   group, the aggregate's own state columns (named `agg_<a>_<i>` in the common snapshot
//!   layout, [`super::snapshot`]).
//! - [`GroupsState::reset`] empties a group whose key was forgotten (state TTL); its id is
//!   reused by the next new key.
//!
//! Implementations ([`for_aggregate`] picks one): [`numeric`] keeps `COUNT`, `SUM` (of
//! integers and floating-point numbers) and `AVG` in plain vectors updated by one loop
//! over the batch; [`minmax`] keeps `MIN`/`MAX` and [`distinct`] `COUNT(DISTINCT)` of
//! integers, floating-point numbers and timestamps (values as [`value_keys`]: the best
//! value, or every value with its count); [`minmax_text`] `MIN`/`MAX` of `VARCHAR` over an
//! append-only input; everything else (`MIN`/`MAX` and
//! `COUNT(DISTINCT)` of other types, over a changelog as a [`multiset::Multiset`],
//! `FIRST_VALUE`, `LISTAGG`, `STDDEV`, DECIMAL `SUM`, ...) goes through
//! [`rowwise::RowwiseGroups`], one DataFusion `Accumulator` per group.
//! [`aggregate_states::AggregateStates`] holds one operator's aggregates: one state each,
//! except `COUNT(DISTINCT x)` calls differing only in `FILTER`, which share one
//! [`shared_distinct::SharedDistinct`] value map.

pub mod aggregate_states;
pub mod distinct;
pub mod minmax;
pub mod minmax_text;
pub mod multiset;
pub mod numeric;
pub mod rowwise;
pub mod shared_distinct;
pub mod value_counts;
pub mod value_keys;

use std::sync::Arc;

use datafusion_common::arrow::array::{ArrayRef, BooleanArray};
use datafusion_common::arrow::datatypes::DataType;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use sluice_common::Result;

/// The rows of one input batch as an aggregate sees them.
#[derive(Clone, Copy)]
pub struct BatchRows<'a> {
    /// The group id of each row of the batch.
    pub groups: &'a [usize],
    /// Per row, whether it is a retraction (`-U`, `-D`); `None`: every row is an insert.
    pub retract: Option<&'a [bool]>,
    /// Groups that exist (every id in `groups` is below it).
    pub total_groups: usize,
}

impl BatchRows<'_> {
    /// Whether row `i` is a retraction.
    #[inline]
    pub fn is_retraction(&self, i: usize) -> bool {
        self.retract.is_some_and(|r| r[i])
    }
}

/// One aggregate's state for every group (see the module docs).
pub trait GroupsState: Send {
    /// Adds (or, where `rows` says so, retracts) each row of `values` (the argument
    /// arrays, one entry per batch row) into its group; rows where `filter` is not true
    /// are skipped (`FILTER (WHERE ...)`).
    ///
    /// # Errors
    /// Arguments of a type the aggregate does not take; what a row-wise accumulator
    /// fails with.
    fn update(
        &mut self,
        values: &[ArrayRef],
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()>;

    /// The current value of each of `groups`, in that order (the aggregate's result type);
    /// the state is not changed.
    ///
    /// # Errors
    /// What a row-wise accumulator fails with.
    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef>;

    /// The state columns of `groups` (one row per group, in that order), for a snapshot.
    ///
    /// # Errors
    /// As [`Self::evaluate`].
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>>;

    /// Adds state columns written by [`Self::state`] (row `i` into group `groups[i]`, which
    /// is empty): how a snapshot is restored.
    ///
    /// # Errors
    /// Columns of another shape than [`Self::state`] writes.
    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total_groups: usize) -> Result<()>;

    /// Empties `group` (its key was forgotten; the id will be reused).
    fn reset(&mut self, group: usize);
}

/// The state for `aggregate` over arguments of `arg_types`; `retracting`: the input is a
/// changelog, so rows may be retracted (a `MIN`/`MAX`/`COUNT(DISTINCT)` then keeps every
/// value with its count).
///
/// # Errors
/// An aggregate whose accumulator DataFusion cannot create.
pub fn for_aggregate(
    aggregate: &Arc<AggregateFunctionExpr>,
    arg_types: &[DataType],
    retracting: bool,
) -> Result<Box<dyn GroupsState>> {
    if let Some(state) = numeric::for_aggregate(aggregate, arg_types)? {
        return Ok(state);
    }
    let result = result_type(aggregate);
    match (aggregate.fun().name(), arg_types) {
        ("min" | "max", [t]) if value_keys::supports(t) && *t == result => {
            let max = aggregate.fun().name() == "max";
            return Ok(Box::new(minmax::MinMax::new(max, result, retracting)));
        }
        ("min" | "max", [t]) if !retracting && minmax_text::supports(t) && *t == result => {
            let max = aggregate.fun().name() == "max";
            return Ok(Box::new(minmax_text::MinMaxText::new(max, result)));
        }
        ("count", [t]) if aggregate.is_distinct() && value_keys::supports(t) => {
            return Ok(Box::new(distinct::DistinctCount::new(t.clone())));
        }
        _ => {}
    }
    Ok(Box::new(rowwise::RowwiseGroups::new(
        Arc::clone(aggregate),
        retracting,
    )))
}

/// The result type of `aggregate`.
pub(crate) fn result_type(aggregate: &AggregateFunctionExpr) -> DataType {
    aggregate.field().data_type().clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{Float64Array, Int64Array};
    use datafusion_common::arrow::datatypes::{Field, Schema, SchemaRef};
    use datafusion_common::ScalarValue;

    fn input() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
        ]))
    }

    /// DataFusion's COUNT, SUM and AVG over `i` (BIGINT) and `f` (DOUBLE).
    fn aggregates() -> Vec<(Arc<AggregateFunctionExpr>, DataType)> {
        use crate::operators::test_support::aggregate;
        use datafusion_functions_aggregate::{average::avg_udaf, count::count_udaf, sum::sum_udaf};
        let s = input();
        use datafusion_functions_aggregate::min_max::{max_udaf, min_udaf};
        vec![
            (aggregate(count_udaf(), "i", &s, "c"), DataType::Int64),
            (aggregate(sum_udaf(), "i", &s, "si"), DataType::Int64),
            (aggregate(sum_udaf(), "f", &s, "sf"), DataType::Float64),
            (aggregate(avg_udaf(), "f", &s, "af"), DataType::Float64),
            (aggregate(min_udaf(), "i", &s, "mi"), DataType::Int64),
            (aggregate(max_udaf(), "i", &s, "ma"), DataType::Int64),
            (aggregate(min_udaf(), "f", &s, "mf"), DataType::Float64),
            (aggregate(max_udaf(), "f", &s, "xf"), DataType::Float64),
            (count_distinct("i", &s), DataType::Int64),
            (count_distinct("f", &s), DataType::Float64),
        ]
    }

    /// `COUNT(DISTINCT column)`.
    fn count_distinct(column: &str, input: &SchemaRef) -> Arc<AggregateFunctionExpr> {
        use datafusion_physical_expr::aggregate::AggregateExprBuilder;
        let arg = datafusion_physical_expr::expressions::col(column, input).unwrap();
        Arc::new(
            AggregateExprBuilder::new(
                datafusion_functions_aggregate::count::count_udaf(),
                vec![arg],
            )
            .schema(Arc::clone(input))
            .alias(format!("cd_{column}"))
            .distinct()
            .build()
            .unwrap(),
        )
    }

    /// The column-wise state of `aggregate` (never the row-wise one: that is the
    /// reference).
    fn column_wise(
        aggregate: &Arc<AggregateFunctionExpr>,
        t: &DataType,
        retracting: bool,
    ) -> Box<dyn GroupsState> {
        match aggregate.fun().name() {
            "count" if aggregate.is_distinct() => Box::new(distinct::DistinctCount::new(t.clone())),
            "min" | "max" => Box::new(minmax::MinMax::new(
                aggregate.fun().name() == "max",
                t.clone(),
                retracting,
            )),
            _ => numeric::for_aggregate(aggregate, &[t.clone()])
                .unwrap()
                .expect("kept column-wise"),
        }
    }

    /// The column-wise states give the values of the row-wise ones (DataFusion's own
    /// accumulators, one per group: sliding ones over a changelog, and for MIN/MAX there
    /// the `Multiset`), on random changelogs (inserts, retractions of values still in the
    /// group, NULLs, FILTER masks) and on append-only input, and a snapshot restored into
    /// fresh states gives the same values again.
    #[test]
    fn column_wise_states_equal_datafusion_accumulators_on_random_changelogs() {
        let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1D);
        for ((aggregate, arg_type), retracting) in aggregates()
            .into_iter()
            .flat_map(|a| [(a.clone(), true), (a, false)])
        {
            let column = if arg_type == DataType::Int64 { 0 } else { 1 };
            let mut fast = column_wise(&aggregate, &arg_type, retracting);
            let mut reference = rowwise::RowwiseGroups::new(Arc::clone(&aggregate), retracting);
            let groups = 7usize;
            // Values still in each group (so retractions take back something inserted).
            let mut held: Vec<Vec<Option<i64>>> = vec![Vec::new(); groups];
            for _ in 0..40 {
                let n = (next() % 30) as usize;
                let (mut ids, mut values, mut retract, mut mask) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for _ in 0..n {
                    let g = (next() % groups as u64) as usize;
                    let take_back = retracting && !held[g].is_empty() && next() % 3 == 0;
                    let v = if take_back {
                        let i = (next() as usize) % held[g].len();
                        held[g].swap_remove(i)
                    } else {
                        let v = (next() % 5 != 0).then(|| (next() % 2000) as i64 - 1000);
                        held[g].push(v);
                        v
                    };
                    ids.push(g);
                    values.push(v);
                    retract.push(take_back);
                    // A filtered-out row is neither added nor retracted: keep it held.
                    let keep = next() % 8 != 0;
                    if !keep {
                        if take_back {
                            held[g].push(v);
                        } else {
                            held[g].pop();
                        }
                    }
                    mask.push(Some(keep));
                }
                let array: ArrayRef = if column == 0 {
                    Arc::new(Int64Array::from(values.clone()))
                } else {
                    Arc::new(Float64Array::from(
                        values
                            .iter()
                            .map(|v| v.map(|x| x as f64 / 8.0))
                            .collect::<Vec<_>>(),
                    ))
                };
                let mask = BooleanArray::from(mask);
                let rows = BatchRows {
                    groups: &ids,
                    retract: retracting.then_some(&retract[..]),
                    total_groups: groups,
                };
                fast.update(&[Arc::clone(&array)], rows, Some(&mask))
                    .unwrap();
                reference.update(&[array], rows, Some(&mask)).unwrap();
                let all: Vec<u32> = (0..groups as u32).collect();
                let got = fast.evaluate(&all).unwrap();
                let want = reference.evaluate(&all).unwrap();
                for g in 0..groups {
                    assert_eq!(
                        ScalarValue::try_from_array(&got, g).unwrap(),
                        ScalarValue::try_from_array(&want, g).unwrap(),
                        "{} of group {g} (retracting: {retracting})",
                        aggregate.name()
                    );
                }
            }
            // Snapshot and restore into fresh state, groups in another order.
            let order: Vec<u32> = (0..groups as u32).rev().collect();
            let state = fast.state(&order).unwrap();
            let mut restored = column_wise(&aggregate, &arg_type, retracting);
            let targets: Vec<usize> = order.iter().map(|&g| g as usize).collect();
            restored.merge(&state, &targets, groups).unwrap();
            let all: Vec<u32> = (0..groups as u32).collect();
            assert_eq!(
                restored.evaluate(&all).unwrap().to_data(),
                fast.evaluate(&all).unwrap().to_data()
            );
            // A reset group is empty again.
            restored.reset(3);
            let v = restored.evaluate(&[3]).unwrap();
            let empty = match aggregate.fun().name() {
                "count" => 0,
                _ => 1,
            };
            assert_eq!(v.null_count(), empty, "{}", aggregate.name());
        }
    }

    /// A row-wise state's snapshot holds every column its accumulators' `state()` gives
    /// (a sliding SUM keeps a count beside the sum, which the aggregate's `state_fields`
    /// do not list), so a restored group retracts down to NULL as the original would.
    #[test]
    fn row_wise_snapshots_keep_sliding_accumulator_state() {
        use crate::operators::test_support::aggregate;
        use datafusion_common::arrow::array::Decimal128Array;
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
            "d",
            DataType::Decimal128(10, 2),
            true,
        )]));
        let sum = aggregate(
            datafusion_functions_aggregate::sum::sum_udaf(),
            "d",
            &schema,
            "s",
        );
        let decimals = |v: Vec<i128>| -> ArrayRef {
            Arc::new(Decimal128Array::from(v).with_data_type(DataType::Decimal128(10, 2)))
        };
        let mut state = for_aggregate(&sum, &[DataType::Decimal128(10, 2)], true).unwrap();
        let rows = BatchRows {
            groups: &[0, 1, 0],
            retract: None,
            total_groups: 2,
        };
        state
            .update(&[decimals(vec![150, 200, 250])], rows, None)
            .unwrap();
        let snapshot = state.state(&[0, 1]).unwrap();
        assert_eq!(snapshot.len(), 2, "sum and count");
        let mut restored = for_aggregate(&sum, &[DataType::Decimal128(10, 2)], true).unwrap();
        restored.merge(&snapshot, &[0, 1], 2).unwrap();
        let value = |s: &mut Box<dyn GroupsState>, g: u32| {
            ScalarValue::try_from_array(&s.evaluate(&[g]).unwrap(), 0).unwrap()
        };
        assert_eq!(
            value(&mut restored, 0),
            ScalarValue::Decimal128(Some(400), 20, 2)
        );
        // Take group 1's only value back: no value left, so NULL.
        let back = BatchRows {
            groups: &[1],
            retract: Some(&[true]),
            total_groups: 2,
        };
        restored.update(&[decimals(vec![200])], back, None).unwrap();
        assert!(value(&mut restored, 1).is_null());
        assert_eq!(
            value(&mut state, 0),
            value(&mut restored, 0),
            "the original is unchanged"
        );
    }
}
