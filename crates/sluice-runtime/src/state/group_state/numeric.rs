//! `COUNT`, `SUM` and `AVG` kept column-wise: per group a count and (for `SUM`/`AVG`) a
//! sum, in vectors indexed by group id, updated by one loop over the batch; a retraction
//! subtracts. Values and result types are Flink's (Flink docs, "Aggregate Functions"):
//!
//! - `COUNT(*)` / `COUNT(x, ...)`: BIGINT, the rows whose arguments are all non-NULL; never
//!   NULL.
//! - `SUM(x)` of an integer or floating-point type: the argument's type, the integer sum
//!   wrapping as Java's does; NULL while the group holds no non-NULL value (Flink's
//!   `SumWithRetractAggFunction` keeps the same count for it).
//! - `AVG(x)`: the argument's type (an integer average truncated toward zero, a
//!   DECIMAL(p, s) one DECIMAL(38, max(s, 6)) rounded half up); NULL without values.
//!
//! Floating-point sums add the rows one by one in arrival order, as Flink does.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array, Int64Array,
};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type};
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use sluice_common::numeric::{avg_decimal, avg_integer, wrap_to};
use sluice_common::{Result, SluiceError};

use super::{BatchRows, GroupsState};

/// The column-wise state for `aggregate` over arguments of `arg_types`, or `None` when it
/// is not one of the aggregates this module keeps (see the module docs).
///
/// # Errors
/// None today; kept for aggregates whose state needs checking.
pub fn for_aggregate(
    aggregate: &Arc<AggregateFunctionExpr>,
    arg_types: &[DataType],
) -> Result<Option<Box<dyn GroupsState>>> {
    if aggregate.is_distinct() || !aggregate.order_bys().is_empty() {
        return Ok(None);
    }
    let result = super::result_type(aggregate);
    let state: Box<dyn GroupsState> = match (aggregate.fun().name(), arg_types) {
        ("count", _) => Box::new(Count { counts: Vec::new() }),
        ("sum", [t]) if t.is_integer() && result.is_integer() => {
            Box::new(SumCount::new(Function::Sum, Kind::Integer, result))
        }
        ("sum", [t]) if t.is_floating() && result.is_floating() => {
            Box::new(SumCount::new(Function::Sum, Kind::Float, result))
        }
        ("avg", [t]) if t.is_integer() && result.is_integer() => {
            Box::new(SumCount::new(Function::Avg, Kind::Integer, result))
        }
        ("avg", [t]) if t.is_floating() && result.is_floating() => {
            Box::new(SumCount::new(Function::Avg, Kind::Float, result))
        }
        ("avg", [DataType::Decimal128(_, scale)]) if matches!(result, DataType::Decimal128(_, s) if s >= *scale) => {
            Box::new(SumCount::new(
                Function::Avg,
                Kind::Decimal { scale: *scale },
                result,
            ))
        }
        _ => return Ok(None),
    };
    Ok(Some(state))
}

/// Calls `f(row, group, retract)` for every row of the batch that is not filtered out
/// and whose `valid` bit is set (`None`: every row is valid).
#[inline]
pub(super) fn for_each_row(
    rows: BatchRows<'_>,
    valid: Option<&datafusion_common::arrow::buffer::NullBuffer>,
    filter: Option<&BooleanArray>,
    mut f: impl FnMut(usize, usize, bool),
) {
    match (rows.retract, valid, filter) {
        // The common case: an insert-only batch without NULLs or FILTER.
        (None, None, None) => {
            for (row, &g) in rows.groups.iter().enumerate() {
                f(row, g, false);
            }
        }
        _ => {
            for (row, &g) in rows.groups.iter().enumerate() {
                if valid.is_some_and(|v| v.is_null(row))
                    || filter.is_some_and(|m| !(m.is_valid(row) && m.value(row)))
                {
                    continue;
                }
                f(row, g, rows.is_retraction(row));
            }
        }
    }
}

/// Per group, the number of rows whose arguments are all non-NULL.
struct Count {
    counts: Vec<i64>,
}

impl GroupsState for Count {
    fn update(
        &mut self,
        values: &[ArrayRef],
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.counts
            .resize(rows.total_groups.max(self.counts.len()), 0);
        // Rows with a NULL argument are not counted: the arguments' NULLs combined.
        let valid = values
            .iter()
            .filter_map(|v| v.logical_nulls())
            .reduce(|a, b| {
                datafusion_common::arrow::buffer::NullBuffer::union(Some(&a), Some(&b))
                    .expect("two null buffers union to one")
            });
        let counts = &mut self.counts;
        for_each_row(rows, valid.as_ref(), filter, |_, g, retract| {
            counts[g] += if retract { -1 } else { 1 };
        });
        Ok(())
    }

    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter_values(
            groups.iter().map(|&g| self.count(g as usize)),
        )))
    }

    /// One column: `count` (BIGINT).
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.counts.resize(total.max(self.counts.len()), 0);
        let counts = int64(states, 0)?;
        for (row, &g) in groups.iter().enumerate() {
            self.counts[g] += counts.value(row);
        }
        Ok(())
    }

    fn reset(&mut self, group: usize) {
        if let Some(c) = self.counts.get_mut(group) {
            *c = 0;
        }
    }
}

impl Count {
    fn count(&self, g: usize) -> i64 {
        self.counts.get(g).copied().unwrap_or(0)
    }
}

/// Which result a [`SumCount`] gives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Function {
    Sum,
    Avg,
}

/// How the sum is kept: a BIGINT (integers, wrapping), a DOUBLE, or a DECIMAL's unscaled
/// value at the argument's scale.
#[derive(Clone, Copy)]
enum Kind {
    Integer,
    Float,
    Decimal { scale: i8 },
}

/// The sums of every group, in the kind's number type.
enum Sums {
    Integer(Vec<i64>),
    Float(Vec<f64>),
    Decimal(Vec<i128>),
}

/// `SUM` or `AVG`: per group the sum of the non-NULL values and their count.
struct SumCount {
    function: Function,
    kind: Kind,
    result: DataType,
    sums: Sums,
    counts: Vec<i64>,
}

impl SumCount {
    fn new(function: Function, kind: Kind, result: DataType) -> Self {
        let sums = match kind {
            Kind::Integer => Sums::Integer(Vec::new()),
            Kind::Float => Sums::Float(Vec::new()),
            Kind::Decimal { .. } => Sums::Decimal(Vec::new()),
        };
        SumCount {
            function,
            kind,
            result,
            sums,
            counts: Vec::new(),
        }
    }

    /// A DOUBLE sum before any value: `SUM` starts from NULL in Flink (the first value is
    /// the sum: `SUM` of -0.0 is -0.0), which -0.0 is the same as (-0.0 + x = x for every
    /// x); `AVG` starts from 0 (Flink's `AvgAggFunction`).
    fn float_zero(&self) -> f64 {
        match self.function {
            Function::Sum => -0.0,
            Function::Avg => 0.0,
        }
    }

    fn grow(&mut self, total: usize) {
        let n = total.max(self.counts.len());
        self.counts.resize(n, 0);
        let zero = self.float_zero();
        match &mut self.sums {
            Sums::Integer(s) => s.resize(n, 0),
            Sums::Float(s) => s.resize(n, zero),
            Sums::Decimal(s) => s.resize(n, 0),
        }
    }

    fn count(&self, g: usize) -> i64 {
        self.counts.get(g).copied().unwrap_or(0)
    }

    /// The sum column of a state: BIGINT, DOUBLE or DECIMAL(38, argument scale).
    fn sum_type(&self) -> DataType {
        match self.kind {
            Kind::Integer => DataType::Int64,
            Kind::Float => DataType::Float64,
            Kind::Decimal { scale } => DataType::Decimal128(38, scale),
        }
    }

    /// The sum of each of `groups` (0 for a group without rows), as [`Self::sum_type`].
    fn sum_column(&self, groups: &[u32]) -> Result<ArrayRef> {
        Ok(match &self.sums {
            Sums::Integer(s) => Arc::new(Int64Array::from_iter_values(
                groups
                    .iter()
                    .map(|&g| s.get(g as usize).copied().unwrap_or(0)),
            )),
            Sums::Float(s) => {
                Arc::new(Float64Array::from_iter_values(groups.iter().map(|&g| {
                    s.get(g as usize).copied().unwrap_or(self.float_zero())
                })))
            }
            Sums::Decimal(s) => Arc::new(
                Decimal128Array::from_iter_values(
                    groups
                        .iter()
                        .map(|&g| s.get(g as usize).copied().unwrap_or(0)),
                )
                .with_data_type(self.sum_type()),
            ),
        })
    }
}

impl GroupsState for SumCount {
    fn update(
        &mut self,
        values: &[ArrayRef],
        rows: BatchRows<'_>,
        filter: Option<&BooleanArray>,
    ) -> Result<()> {
        self.grow(rows.total_groups);
        let counts = &mut self.counts;
        match &mut self.sums {
            Sums::Integer(sums) => {
                let v = cast(&values[0], &DataType::Int64)?;
                let v = v.as_primitive::<Int64Type>();
                let x = v.values();
                for_each_row(rows, v.nulls(), filter, |row, g, retract| {
                    if retract {
                        sums[g] = sums[g].wrapping_sub(x[row]);
                        counts[g] -= 1;
                    } else {
                        sums[g] = sums[g].wrapping_add(x[row]);
                        counts[g] += 1;
                    }
                });
            }
            Sums::Float(sums) => {
                let v = cast(&values[0], &DataType::Float64)?;
                let v = v.as_primitive::<Float64Type>();
                let x = v.values();
                for_each_row(rows, v.nulls(), filter, |row, g, retract| {
                    if retract {
                        sums[g] -= x[row];
                        counts[g] -= 1;
                    } else {
                        sums[g] += x[row];
                        counts[g] += 1;
                    }
                });
            }
            Sums::Decimal(sums) => {
                let v = values[0].as_primitive::<Decimal128Type>();
                let x = v.values();
                for_each_row(rows, v.nulls(), filter, |row, g, retract| {
                    if retract {
                        sums[g] = sums[g].wrapping_sub(x[row]);
                        counts[g] -= 1;
                    } else {
                        sums[g] = sums[g].wrapping_add(x[row]);
                        counts[g] += 1;
                    }
                });
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef> {
        let has = |g: u32| self.count(g as usize) != 0;
        let values: ArrayRef = match (&self.sums, self.function) {
            (Sums::Integer(s), Function::Sum) => Arc::new(Int64Array::from_iter(
                groups
                    .iter()
                    .map(|&g| has(g).then(|| wrap_to(s[g as usize], &self.result))),
            )),
            (Sums::Integer(s), Function::Avg) => {
                Arc::new(Int64Array::from_iter(groups.iter().map(|&g| {
                    has(g)
                        .then(|| avg_integer(s[g as usize], self.counts[g as usize], &self.result))
                })))
            }
            (Sums::Float(s), Function::Sum) => Arc::new(Float64Array::from_iter(
                groups.iter().map(|&g| has(g).then(|| s[g as usize])),
            )),
            (Sums::Float(s), Function::Avg) => {
                Arc::new(Float64Array::from_iter(groups.iter().map(|&g| {
                    has(g).then(|| s[g as usize] / self.counts[g as usize] as f64)
                })))
            }
            (Sums::Decimal(s), Function::Avg) => {
                let (Kind::Decimal { scale }, DataType::Decimal128(_, to)) =
                    (self.kind, &self.result)
                else {
                    return Err(SluiceError::Internal("AVG: not a DECIMAL result".into()));
                };
                Arc::new(
                    Decimal128Array::from_iter(groups.iter().map(|&g| {
                        has(g).then(|| {
                            avg_decimal(s[g as usize], self.counts[g as usize], scale, *to)
                        })
                    }))
                    .with_data_type(self.result.clone()),
                )
            }
            (Sums::Decimal(_), Function::Sum) => {
                return Err(SluiceError::Internal("DECIMAL SUM is kept row-wise".into()))
            }
        };
        if values.data_type() == &self.result {
            return Ok(values);
        }
        // The result type: a narrower integer (the value already fits) or FLOAT.
        Ok(cast(&values, &self.result)?)
    }

    /// Two columns: `sum` ([`Self::sum_type`]) and `count` (BIGINT).
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        let counts = Arc::new(Int64Array::from_iter_values(
            groups.iter().map(|&g| self.count(g as usize)),
        ));
        Ok(vec![self.sum_column(groups)?, counts])
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.grow(total);
        if states.len() != 2 || states[0].data_type() != &self.sum_type() {
            return Err(SluiceError::Internal(format!(
                "aggregate state: expected a sum of {} and a count",
                self.sum_type()
            )));
        }
        let counts = int64(states, 1)?;
        for (row, &g) in groups.iter().enumerate() {
            self.counts[g] += counts.value(row);
        }
        match &mut self.sums {
            Sums::Integer(s) => {
                let v = states[0].as_primitive::<Int64Type>();
                for (row, &g) in groups.iter().enumerate() {
                    s[g] = s[g].wrapping_add(v.value(row));
                }
            }
            Sums::Float(s) => {
                let v = states[0].as_primitive::<Float64Type>();
                for (row, &g) in groups.iter().enumerate() {
                    s[g] += v.value(row);
                }
            }
            Sums::Decimal(s) => {
                let v = states[0].as_primitive::<Decimal128Type>();
                for (row, &g) in groups.iter().enumerate() {
                    s[g] = s[g].wrapping_add(v.value(row));
                }
            }
        }
        Ok(())
    }

    fn reset(&mut self, group: usize) {
        if group >= self.counts.len() {
            return;
        }
        self.counts[group] = 0;
        let zero = self.float_zero();
        match &mut self.sums {
            Sums::Integer(s) => s[group] = 0,
            Sums::Float(s) => s[group] = zero,
            Sums::Decimal(s) => s[group] = 0,
        }
    }
}

/// State column `i` as BIGINT.
fn int64(states: &[ArrayRef], i: usize) -> Result<&Int64Array> {
    states
        .get(i)
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .ok_or_else(|| SluiceError::Internal(format!("aggregate state column {i}: not a BIGINT")))
}
