//! The states of all of one operator's aggregates, indexed by aggregate: each aggregate
//! has its own [`GroupsState`], except that `COUNT(DISTINCT x)` calls over the same
//! argument expression that differ only in their `FILTER` (Nexmark q16 has four per
//! column) share one [`SharedDistinct`] value map, so a row costs one hash lookup per
//! column instead of one per aggregate. Results and snapshot columns are per aggregate
//! either way.

use datafusion_common::arrow::array::{ArrayRef, BooleanArray};
use datafusion_common::arrow::datatypes::DataType;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::Result;
use std::sync::Arc;

use super::shared_distinct::{SharedDistinct, WIDTH};
use super::{for_aggregate, value_keys, BatchRows, GroupsState};

/// Where one aggregate's state lives.
enum Slot {
    Own(Box<dyn GroupsState>),
    /// Member `j` of shared unit `unit`.
    Shared {
        unit: usize,
        j: usize,
    },
}

/// A shared distinct count and the aggregates it serves (their indices, in member order).
struct Unit {
    state: SharedDistinct<WIDTH>,
    members: Vec<usize>,
}

/// See the module docs.
pub struct AggregateStates {
    slots: Vec<Slot>,
    units: Vec<Unit>,
}

/// One aggregate as [`AggregateStates::new`] takes it: the aggregate, its argument
/// expressions and their types.
pub struct AggregateInput<'a> {
    /// The aggregate.
    pub aggregate: &'a Arc<AggregateFunctionExpr>,
    /// Its argument expressions over the operator's input.
    pub args: &'a [Arc<dyn PhysicalExpr>],
    /// Their types.
    pub arg_types: Vec<DataType>,
}

impl AggregateStates {
    /// The states of `aggregates` (in output order); `retracting`: the input is a
    /// changelog.
    ///
    /// # Errors
    /// As [`for_aggregate`].
    pub fn new(aggregates: &[AggregateInput<'_>], retracting: bool) -> Result<Self> {
        // Distinct counts of one argument expression, in aggregate order.
        let mut families: Vec<(usize, Vec<usize>)> = Vec::new();
        for (a, input) in aggregates.iter().enumerate() {
            if !shareable(input) {
                continue;
            }
            match families
                .iter_mut()
                .find(|(first, _)| aggregates[*first].args[0].eq(&input.args[0]))
            {
                Some((_, members)) => members.push(a),
                None => families.push((a, vec![a])),
            }
        }
        let mut shared: Vec<Option<(usize, usize)>> = vec![None; aggregates.len()];
        let mut units = Vec::new();
        for (_, members) in families.into_iter().filter(|(_, m)| m.len() > 1) {
            for chunk in members.chunks(WIDTH) {
                let t = aggregates[chunk[0]].arg_types[0].clone();
                for (j, &a) in chunk.iter().enumerate() {
                    shared[a] = Some((units.len(), j));
                }
                units.push(Unit {
                    state: SharedDistinct::new(t),
                    members: chunk.to_vec(),
                });
            }
        }
        let slots = aggregates
            .iter()
            .zip(shared)
            .map(|(input, shared)| match shared {
                Some((unit, j)) => Ok(Slot::Shared { unit, j }),
                None => Ok(Slot::Own(for_aggregate(
                    input.aggregate,
                    &input.arg_types,
                    retracting,
                )?)),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(AggregateStates { slots, units })
    }

    /// Adds (or retracts) a batch: `args` and `filters` per aggregate, as
    /// [`GroupsState::update`] takes them.
    ///
    /// # Errors
    /// As [`GroupsState::update`].
    pub fn update(
        &mut self,
        args: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        rows: BatchRows<'_>,
    ) -> Result<()> {
        for (a, slot) in self.slots.iter_mut().enumerate() {
            if let Slot::Own(state) = slot {
                state.update(&args[a], rows, filters[a].as_ref())?;
            }
        }
        for unit in &mut self.units {
            let unit_filters: Vec<Option<&BooleanArray>> =
                unit.members.iter().map(|&a| filters[a].as_ref()).collect();
            unit.state
                .update(&args[unit.members[0]][0], &unit_filters, rows)?;
        }
        Ok(())
    }

    /// The current values of `groups`, one array per aggregate.
    ///
    /// # Errors
    /// As [`GroupsState::evaluate`].
    pub fn evaluate(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        let units = &self.units;
        self.slots
            .iter_mut()
            .map(|slot| match slot {
                Slot::Own(state) => state.evaluate(groups),
                Slot::Shared { unit, j } => Ok(units[*unit].state.evaluate(*j, groups)),
            })
            .collect()
    }

    /// The state columns of `groups`, per aggregate ([`GroupsState::state`]).
    ///
    /// # Errors
    /// As [`GroupsState::state`].
    pub fn state(&mut self, groups: &[u32]) -> Result<Vec<Vec<ArrayRef>>> {
        let units = &self.units;
        self.slots
            .iter_mut()
            .map(|slot| match slot {
                Slot::Own(state) => state.state(groups),
                Slot::Shared { unit, j } => Ok(vec![units[*unit].state.state(*j, groups)?]),
            })
            .collect()
    }

    /// Adds aggregate `a`'s state columns ([`GroupsState::merge`]).
    ///
    /// # Errors
    /// As [`GroupsState::merge`].
    pub fn merge(
        &mut self,
        a: usize,
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        match &mut self.slots[a] {
            Slot::Own(state) => state.merge(states, groups, total),
            Slot::Shared { unit, j } => {
                self.units[*unit]
                    .state
                    .merge(*j, states.first(), groups, total)
            }
        }
    }

    /// Empties `group` in every aggregate.
    pub fn reset(&mut self, group: usize) {
        for slot in &mut self.slots {
            if let Slot::Own(state) = slot {
                state.reset(group);
            }
        }
        for unit in &mut self.units {
            unit.state.reset(group);
        }
    }

    /// How many aggregates there are.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are none (`SELECT DISTINCT`).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// Whether `input` is a `COUNT(DISTINCT x)` of one argument with value keys.
fn shareable(input: &AggregateInput<'_>) -> bool {
    input.aggregate.fun().name() == "count"
        && input.aggregate.is_distinct()
        && input.args.len() == 1
        && input.arg_types.len() == 1
        && value_keys::supports(&input.arg_types[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{AsArray, Int64Array};
    use datafusion_common::arrow::datatypes::{Field, Int64Type, Schema};
    use datafusion_physical_expr::aggregate::AggregateExprBuilder;
    use datafusion_physical_expr::expressions::col;

    /// Five `COUNT(DISTINCT)` of `x` and one of `y`: the five of `x` take two shared maps
    /// (four and one), the one of `y` its own state; each result is the aggregate's own
    /// (counts by hand).
    #[test]
    fn distinct_counts_of_one_column_share_maps_of_up_to_four() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int64, true),
            Field::new("y", DataType::Int64, true),
        ]));
        let distinct = |c: &str| {
            Arc::new(
                AggregateExprBuilder::new(
                    datafusion_functions_aggregate::count::count_udaf(),
                    vec![col(c, &schema).unwrap()],
                )
                .schema(Arc::clone(&schema))
                .alias(format!("cd_{c}"))
                .distinct()
                .build()
                .unwrap(),
            )
        };
        let (x, y) = (distinct("x"), distinct("y"));
        let x_args = [col("x", &schema).unwrap()];
        let y_args = [col("y", &schema).unwrap()];
        let input = |aggregate, args| AggregateInput {
            aggregate,
            args,
            arg_types: vec![DataType::Int64],
        };
        let inputs = vec![
            input(&x, &x_args[..]),
            input(&y, &y_args[..]),
            input(&x, &x_args[..]),
            input(&x, &x_args[..]),
            input(&x, &x_args[..]),
            input(&x, &x_args[..]),
        ];
        let mut states = AggregateStates::new(&inputs, false).unwrap();
        assert_eq!(states.units.len(), 2);
        assert_eq!(states.units[0].members, [0, 2, 3, 4]);
        assert_eq!(states.units[1].members, [5]);
        assert!(matches!(states.slots[1], Slot::Own(_)));

        let xs: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 2, 3]));
        let ys: ArrayRef = Arc::new(Int64Array::from(vec![9, 9, 9, 9]));
        // Aggregate a counts rows where row >= a - 2 (0 and 1: every row).
        let filters: Vec<Option<BooleanArray>> = (0..6)
            .map(|a: usize| {
                (a >= 2).then(|| BooleanArray::from_iter((0..4).map(|r| Some(r + 2 >= a))))
            })
            .collect();
        let args: Vec<Vec<ArrayRef>> = (0..6)
            .map(|a| {
                vec![if a == 1 {
                    Arc::clone(&ys)
                } else {
                    Arc::clone(&xs)
                }]
            })
            .collect();
        let rows = BatchRows {
            groups: &[0, 0, 0, 0],
            retract: None,
            total_groups: 1,
        };
        states.update(&args, &filters, rows).unwrap();
        let out: Vec<i64> = states
            .evaluate(&[0])
            .unwrap()
            .iter()
            .map(|a| a.as_primitive::<Int64Type>().value(0))
            .collect();
        // x rows 1,2,2,3: all {1,2,3}; from row 1 {2,3}; from row 2 {2,3}; row 3 {3}.
        assert_eq!(out, [3, 1, 3, 2, 2, 1]);
    }
}
