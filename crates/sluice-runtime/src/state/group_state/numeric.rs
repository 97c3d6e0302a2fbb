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
//! Floating-point sums add the rows one by one in arrival order, as Flink does; a `SUM` of
//! FLOAT adds in FLOAT (Flink's `FloatSumAggFunction`), an `AVG` of FLOAT in DOUBLE.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float32Array, Float64Array,
    Int64Array, PrimitiveArray,
};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{
    ArrowPrimitiveType, DataType, Decimal128Type, Float32Type, Float64Type, Int64Type,
};
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
    let Some(spec) = NumericSpec::of(aggregate, arg_types) else {
        return Ok(None);
    };
    Ok(Some(match spec.function {
        Function::Count => Box::new(Count { counts: Vec::new() }),
        Function::Sum | Function::Avg => Box::new(SumCount::new(spec)),
    }))
}

/// Which of `COUNT`, `SUM`, `AVG` an aggregate is, how its sum is kept and its result
/// type: what this module computes, for the column-wise group state and for a caller that
/// keeps its own running values ([`Running`]: the OVER aggregate's frames).
#[derive(Clone, Debug)]
pub struct NumericSpec {
    function: Function,
    kind: Kind,
    result: DataType,
}

/// One value as a sum keeps it (see [`Kind`]): a BIGINT, a DOUBLE, or a DECIMAL's unscaled
/// value at the argument's scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sum {
    /// An integer sum (wrapping as Java's `long`).
    Integer(i64),
    /// A floating-point sum.
    Float(f64),
    /// A `SUM` of FLOAT, in FLOAT.
    Float32(f32),
    /// A DECIMAL sum, unscaled.
    Decimal(i128),
}

/// One group's running sum (of the non-NULL values) and count.
#[derive(Clone, Copy, Debug)]
pub struct Running {
    sum: Sum,
    count: i64,
}

/// An aggregate's arguments over one batch, prepared for [`NumericSpec::value_at`].
pub enum NumericValues {
    /// `COUNT`: which rows have every argument non-NULL (`None`: all do).
    Count(Option<datafusion_common::arrow::buffer::NullBuffer>),
    /// The argument cast to BIGINT.
    Integer(Int64Array),
    /// The argument cast to DOUBLE.
    Float(Float64Array),
    /// The FLOAT argument of a FLOAT `SUM`.
    Float32(Float32Array),
    /// The DECIMAL argument.
    Decimal(Decimal128Array),
}

impl NumericSpec {
    /// The spec of `aggregate` over arguments of `arg_types`, or `None` when this module
    /// does not compute it (DISTINCT, ordered, DECIMAL `SUM`, other functions and types).
    pub fn of(aggregate: &AggregateFunctionExpr, arg_types: &[DataType]) -> Option<Self> {
        if aggregate.is_distinct() || !aggregate.order_bys().is_empty() {
            return None;
        }
        let result = super::result_type(aggregate);
        let (function, kind) = match (aggregate.fun().name(), arg_types) {
            ("count", _) => (Function::Count, Kind::Integer),
            ("sum", [t]) if t.is_integer() && result.is_integer() => (Function::Sum, Kind::Integer),
            // Flink's FloatSumAggFunction adds in FLOAT (AVG of FLOAT adds in DOUBLE).
            ("sum", [DataType::Float32]) if result == DataType::Float32 => {
                (Function::Sum, Kind::Float32)
            }
            ("sum", [t]) if t.is_floating() && result.is_floating() => (Function::Sum, Kind::Float),
            ("avg", [t]) if t.is_integer() && result.is_integer() => (Function::Avg, Kind::Integer),
            ("avg", [t]) if t.is_floating() && result.is_floating() => (Function::Avg, Kind::Float),
            ("avg", [DataType::Decimal128(_, scale)]) if matches!(result, DataType::Decimal128(_, s) if s >= *scale) => {
                (Function::Avg, Kind::Decimal { scale: *scale })
            }
            _ => return None,
        };
        Some(NumericSpec {
            function,
            kind,
            result,
        })
    }

    /// A group without values.
    pub fn start(&self) -> Running {
        let sum = match self.kind {
            Kind::Integer => Sum::Integer(0),
            Kind::Float => Sum::Float(self.float_zero()),
            Kind::Float32 => Sum::Float32(self.float_zero() as f32),
            Kind::Decimal { .. } => Sum::Decimal(0),
        };
        Running { sum, count: 0 }
    }

    /// A DOUBLE sum before any value: `SUM` starts from NULL in Flink (the first value is
    /// the sum: `SUM` of -0.0 is -0.0), which -0.0 is the same as (-0.0 + x = x for every
    /// x); `AVG` starts from 0 (Flink's `AvgAggFunction`).
    fn float_zero(&self) -> f64 {
        match self.function {
            Function::Sum => -0.0,
            Function::Count | Function::Avg => 0.0,
        }
    }

    /// The aggregate's arguments `args` (one batch) prepared for [`Self::value_at`].
    ///
    /// # Errors
    /// An argument that does not cast to the sum's type.
    pub fn values(&self, args: &[ArrayRef]) -> Result<NumericValues> {
        Ok(match (self.function, self.kind) {
            (Function::Count, _) => NumericValues::Count(all_valid(args)),
            (_, Kind::Integer) => {
                NumericValues::Integer(cast(&args[0], &DataType::Int64)?.as_primitive().clone())
            }
            (_, Kind::Float) => {
                NumericValues::Float(cast(&args[0], &DataType::Float64)?.as_primitive().clone())
            }
            (_, Kind::Float32) => {
                NumericValues::Float32(cast(&args[0], &DataType::Float32)?.as_primitive().clone())
            }
            (_, Kind::Decimal { .. }) => {
                NumericValues::Decimal(args[0].as_primitive::<Decimal128Type>().clone())
            }
        })
    }

    /// Row `i` of `values` as the aggregate takes it in: `None` when it is not counted
    /// (a NULL argument); `COUNT`'s counted rows are 1.
    #[inline]
    pub fn value_at(values: &NumericValues, i: usize) -> Option<Sum> {
        match values {
            NumericValues::Count(valid) => valid
                .as_ref()
                .is_none_or(|v| v.is_valid(i))
                .then_some(Sum::Integer(1)),
            NumericValues::Integer(a) => a.is_valid(i).then(|| Sum::Integer(a.value(i))),
            NumericValues::Float(a) => a.is_valid(i).then(|| Sum::Float(a.value(i))),
            NumericValues::Float32(a) => a.is_valid(i).then(|| Sum::Float32(a.value(i))),
            NumericValues::Decimal(a) => a.is_valid(i).then(|| Sum::Decimal(a.value(i))),
        }
    }

    /// Adds `v` into `r` (or takes it back out: `retract`), in the sum's arithmetic.
    #[inline]
    pub fn add(r: &mut Running, v: Sum, retract: bool) {
        let sign = if retract { -1 } else { 1 };
        r.count += sign;
        r.sum = match (r.sum, v) {
            (Sum::Integer(s), Sum::Integer(x)) => Sum::Integer(s.step(x, retract)),
            (Sum::Float(s), Sum::Float(x)) => Sum::Float(s.step(x, retract)),
            (Sum::Float32(s), Sum::Float32(x)) => Sum::Float32(s.step(x, retract)),
            (Sum::Decimal(s), Sum::Decimal(x)) => Sum::Decimal(s.step(x, retract)),
            (s, _) => s,
        };
    }

    /// The aggregate's value for a sum and count, before [`Self::array`] narrows it to the
    /// result type: `COUNT` the count; `SUM` and `AVG` NULL without values.
    #[inline]
    pub fn finish(&self, sum: Sum, count: i64) -> Option<Sum> {
        if self.function == Function::Count {
            return Some(Sum::Integer(count));
        }
        if count == 0 {
            return None;
        }
        Some(match (self.function, sum, self.kind, &self.result) {
            (Function::Sum, Sum::Integer(s), _, t) => Sum::Integer(wrap_to(s, t)),
            (Function::Avg, Sum::Integer(s), _, t) => Sum::Integer(avg_integer(s, count, t)),
            (Function::Avg, Sum::Float(s), _, _) => Sum::Float(s / count as f64),
            (
                Function::Avg,
                Sum::Decimal(s),
                Kind::Decimal { scale },
                DataType::Decimal128(_, to),
            ) => Sum::Decimal(avg_decimal(s, count, scale, *to)),
            (_, s, _, _) => s,
        })
    }

    /// The value of a running group (see [`Self::finish`]).
    #[inline]
    pub fn value(&self, r: &Running) -> Option<Sum> {
        self.finish(r.sum, r.count)
    }

    /// Values from [`Self::finish`] as one array of the result type.
    ///
    /// # Errors
    /// A result type the values do not cast to.
    pub fn array(&self, values: impl Iterator<Item = Option<Sum>>) -> Result<ArrayRef> {
        let array: ArrayRef = match (self.function, self.kind) {
            (Function::Count, _) | (_, Kind::Integer) => {
                Arc::new(Int64Array::from_iter(values.map(|v| match v {
                    Some(Sum::Integer(x)) => Some(x),
                    _ => None,
                })))
            }
            (_, Kind::Float) => Arc::new(Float64Array::from_iter(values.map(|v| match v {
                Some(Sum::Float(x)) => Some(x),
                _ => None,
            }))),
            (_, Kind::Float32) => Arc::new(Float32Array::from_iter(values.map(|v| match v {
                Some(Sum::Float32(x)) => Some(x),
                _ => None,
            }))),
            (_, Kind::Decimal { .. }) => Arc::new(
                Decimal128Array::from_iter(values.map(|v| match v {
                    Some(Sum::Decimal(x)) => Some(x),
                    _ => None,
                }))
                .with_data_type(self.result.clone()),
            ),
        };
        if array.data_type() == &self.result {
            return Ok(array);
        }
        // The result type: a narrower integer (the value already fits) or FLOAT.
        Ok(cast(&array, &self.result)?)
    }

    /// The running state as two columns, `sum` ([`Self::sum_type`]) and `count` (BIGINT).
    ///
    /// # Errors
    /// None in practice (the arrays are built from values of their type).
    pub fn state_columns(&self, rows: &[Running]) -> Result<Vec<ArrayRef>> {
        let sums = self.sum_array(rows.iter().map(|r| r.sum));
        let counts = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.count)));
        Ok(vec![sums, counts])
    }

    /// Row `i` of columns written by [`Self::state_columns`].
    ///
    /// # Errors
    /// Columns of another shape.
    pub fn running_at(&self, states: &[ArrayRef], i: usize) -> Result<Running> {
        self.check_state(states)?;
        let count = int64(states, 1)?.value(i);
        let sum = match self.start().sum {
            Sum::Integer(_) => Sum::Integer(states[0].as_primitive::<Int64Type>().value(i)),
            Sum::Float(_) => Sum::Float(states[0].as_primitive::<Float64Type>().value(i)),
            Sum::Float32(_) => Sum::Float32(states[0].as_primitive::<Float32Type>().value(i)),
            Sum::Decimal(_) => Sum::Decimal(states[0].as_primitive::<Decimal128Type>().value(i)),
        };
        Ok(Running { sum, count })
    }

    /// Values (frame rows: one value each, NULL where not counted) as one array of
    /// [`Self::sum_type`], for a snapshot.
    pub fn value_array(&self, values: impl Iterator<Item = Option<Sum>>) -> ArrayRef {
        match self.sum_type() {
            DataType::Int64 => Arc::new(Int64Array::from_iter(values.map(|v| match v {
                Some(Sum::Integer(x)) => Some(x),
                _ => None,
            }))),
            DataType::Float64 => Arc::new(Float64Array::from_iter(values.map(|v| match v {
                Some(Sum::Float(x)) => Some(x),
                _ => None,
            }))),
            DataType::Float32 => Arc::new(Float32Array::from_iter(values.map(|v| match v {
                Some(Sum::Float32(x)) => Some(x),
                _ => None,
            }))),
            t => Arc::new(
                Decimal128Array::from_iter(values.map(|v| match v {
                    Some(Sum::Decimal(x)) => Some(x),
                    _ => None,
                }))
                .with_data_type(t),
            ),
        }
    }

    /// Row `i` of an array written by [`Self::value_array`].
    ///
    /// # Errors
    /// An array of another type.
    pub fn value_from(&self, array: &ArrayRef, i: usize) -> Result<Option<Sum>> {
        if array.data_type() != &self.sum_type() {
            return Err(SluiceError::Internal(format!(
                "aggregate frame state: expected {}, found {}",
                self.sum_type(),
                array.data_type()
            )));
        }
        if array.is_null(i) {
            return Ok(None);
        }
        Ok(Some(match self.sum_type() {
            DataType::Int64 => Sum::Integer(array.as_primitive::<Int64Type>().value(i)),
            DataType::Float64 => Sum::Float(array.as_primitive::<Float64Type>().value(i)),
            DataType::Float32 => Sum::Float32(array.as_primitive::<Float32Type>().value(i)),
            _ => Sum::Decimal(array.as_primitive::<Decimal128Type>().value(i)),
        }))
    }

    /// The sum column of a state: BIGINT, DOUBLE or DECIMAL(38, argument scale).
    fn sum_type(&self) -> DataType {
        match self.kind {
            Kind::Integer => DataType::Int64,
            Kind::Float => DataType::Float64,
            Kind::Float32 => DataType::Float32,
            Kind::Decimal { scale } => DataType::Decimal128(38, scale),
        }
    }

    fn sum_array(&self, sums: impl Iterator<Item = Sum>) -> ArrayRef {
        self.value_array(sums.map(Some))
    }

    fn check_state(&self, states: &[ArrayRef]) -> Result<()> {
        if states.len() != 2 || states[0].data_type() != &self.sum_type() {
            return Err(SluiceError::Internal(format!(
                "aggregate state: expected a sum of {} and a count",
                self.sum_type()
            )));
        }
        Ok(())
    }
}

/// Which rows of `args` have every argument non-NULL (`None`: all of them).
fn all_valid(args: &[ArrayRef]) -> Option<datafusion_common::arrow::buffer::NullBuffer> {
    args.iter()
        .filter_map(|v| v.logical_nulls())
        .reduce(|a, b| {
            datafusion_common::arrow::buffer::NullBuffer::union(Some(&a), Some(&b))
                .expect("two null buffers union to one")
        })
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
        let valid = all_valid(values);
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

/// Which aggregate a [`NumericSpec`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Function {
    Count,
    Sum,
    Avg,
}

/// How the sum is kept: a BIGINT (integers, wrapping), a DOUBLE, or a DECIMAL's unscaled
/// value at the argument's scale.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Integer,
    Float,
    /// `SUM` of FLOAT, added in FLOAT as Flink's `FloatSumAggFunction` does.
    Float32,
    Decimal {
        scale: i8,
    },
}

/// The sums of every group, in the kind's number type.
enum Sums {
    Integer(Vec<i64>),
    Float(Vec<f64>),
    Float32(Vec<f32>),
    Decimal(Vec<i128>),
}

/// `SUM` or `AVG`: per group the sum of the non-NULL values and their count.
struct SumCount {
    spec: NumericSpec,
    sums: Sums,
    counts: Vec<i64>,
}

impl SumCount {
    fn new(spec: NumericSpec) -> Self {
        let sums = match spec.kind {
            Kind::Integer => Sums::Integer(Vec::new()),
            Kind::Float => Sums::Float(Vec::new()),
            Kind::Float32 => Sums::Float32(Vec::new()),
            Kind::Decimal { .. } => Sums::Decimal(Vec::new()),
        };
        SumCount {
            spec,
            sums,
            counts: Vec::new(),
        }
    }

    fn grow(&mut self, total: usize) {
        let n = total.max(self.counts.len());
        self.counts.resize(n, 0);
        let zero = self.spec.float_zero();
        match &mut self.sums {
            Sums::Integer(s) => s.resize(n, 0),
            Sums::Float(s) => s.resize(n, zero),
            Sums::Float32(s) => s.resize(n, zero as f32),
            Sums::Decimal(s) => s.resize(n, 0),
        }
    }

    /// The running sum of group `g` (a group without rows: the start).
    fn running(&self, g: usize) -> Running {
        let Some(&count) = self.counts.get(g) else {
            return self.spec.start();
        };
        let sum = match &self.sums {
            Sums::Integer(s) => Sum::Integer(s[g]),
            Sums::Float(s) => Sum::Float(s[g]),
            Sums::Float32(s) => Sum::Float32(s[g]),
            Sums::Decimal(s) => Sum::Decimal(s[g]),
        };
        Running { sum, count }
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
                add_rows(sums, counts, v.as_primitive::<Int64Type>(), rows, filter);
            }
            Sums::Float(sums) => {
                let v = cast(&values[0], &DataType::Float64)?;
                add_rows(sums, counts, v.as_primitive::<Float64Type>(), rows, filter);
            }
            Sums::Float32(sums) => {
                let v = cast(&values[0], &DataType::Float32)?;
                add_rows(sums, counts, v.as_primitive::<Float32Type>(), rows, filter);
            }
            Sums::Decimal(sums) => {
                let v = values[0].as_primitive::<Decimal128Type>();
                add_rows(sums, counts, v, rows, filter);
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, groups: &[u32]) -> Result<ArrayRef> {
        self.spec.array(
            groups
                .iter()
                .map(|&g| self.spec.value(&self.running(g as usize))),
        )
    }

    /// Two columns: `sum` (BIGINT, DOUBLE or DECIMAL(38, argument scale)) and `count`
    /// (BIGINT).
    fn state(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        let rows: Vec<Running> = groups.iter().map(|&g| self.running(g as usize)).collect();
        self.spec.state_columns(&rows)
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.grow(total);
        self.spec.check_state(states)?;
        let counts = int64(states, 1)?;
        for (row, &g) in groups.iter().enumerate() {
            self.counts[g] += counts.value(row);
        }
        let row_groups = groups.iter().copied().enumerate();
        match &mut self.sums {
            Sums::Integer(s) => merge_sums(s, states[0].as_primitive::<Int64Type>(), row_groups),
            Sums::Float(s) => merge_sums(s, states[0].as_primitive::<Float64Type>(), row_groups),
            Sums::Float32(s) => merge_sums(s, states[0].as_primitive::<Float32Type>(), row_groups),
            Sums::Decimal(s) => {
                merge_sums(s, states[0].as_primitive::<Decimal128Type>(), row_groups)
            }
        }
        Ok(())
    }

    fn reset(&mut self, group: usize) {
        if group >= self.counts.len() {
            return;
        }
        self.counts[group] = 0;
        let zero = self.spec.float_zero();
        match &mut self.sums {
            Sums::Integer(s) => s[group] = 0,
            Sums::Float(s) => s[group] = zero,
            Sums::Float32(s) => s[group] = zero as f32,
            Sums::Decimal(s) => s[group] = 0,
        }
    }
}

/// A sum's number type and its arithmetic: integers and DECIMALs wrap (Java's `long`,
/// Flink's unchecked DECIMAL sum), floating-point numbers round in their own width.
trait Summand: Copy {
    /// `self + x`, or `self - x` when `retract`.
    fn step(self, x: Self, retract: bool) -> Self;
}

/// [`Summand`] for integer types (wrapping) and floating-point types.
macro_rules! summand {
    (wrapping: $($t:ty),*; rounding: $($f:ty),*) => {
        $(impl Summand for $t {
            #[inline]
            fn step(self, x: Self, retract: bool) -> Self {
                if retract { self.wrapping_sub(x) } else { self.wrapping_add(x) }
            }
        })*
        $(impl Summand for $f {
            #[inline]
            fn step(self, x: Self, retract: bool) -> Self {
                if retract { self - x } else { self + x }
            }
        })*
    };
}
summand!(wrapping: i64, i128; rounding: f64, f32);

/// Adds (or retracts) each row of `values` into its group's sum and count (see
/// [`for_each_row`]).
fn add_rows<T>(
    sums: &mut [T::Native],
    counts: &mut [i64],
    values: &PrimitiveArray<T>,
    rows: BatchRows<'_>,
    filter: Option<&BooleanArray>,
) where
    T: ArrowPrimitiveType,
    T::Native: Summand,
{
    let x = values.values();
    for_each_row(rows, values.nulls(), filter, |row, g, retract| {
        sums[g] = sums[g].step(x[row], retract);
        counts[g] += if retract { -1 } else { 1 };
    });
}

/// Adds snapshot sums `values` (row `i` into group `g` for each `(i, g)`).
fn merge_sums<T>(
    sums: &mut [T::Native],
    values: &PrimitiveArray<T>,
    row_groups: impl Iterator<Item = (usize, usize)>,
) where
    T: ArrowPrimitiveType,
    T::Native: Summand,
{
    for (row, g) in row_groups {
        sums[g] = sums[g].step(values.value(row), false);
    }
}

/// State column `i` as BIGINT.
fn int64(states: &[ArrayRef], i: usize) -> Result<&Int64Array> {
    states
        .get(i)
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .ok_or_else(|| SluiceError::Internal(format!("aggregate state column {i}: not a BIGINT")))
}
