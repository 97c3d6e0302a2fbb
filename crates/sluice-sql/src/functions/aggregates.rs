//! Flink's aggregate functions where DataFusion's differ: `AVG` returns the argument's
//! type (Flink docs, "Aggregate Functions": AVG over an INT is an INT, the sum divided by
//! the count in whole numbers, truncated toward zero; over a DECIMAL(p, s) a
//! DECIMAL(38, max(s, 6)); over FLOAT and DOUBLE the same type). DataFusion's `avg` returns
//! DOUBLE for integers and DECIMAL(p + 4, s + 4) for decimals.

use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, AsArray};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{
    DataType, Decimal128Type, Field, FieldRef, Float64Type, Int64Type,
};
use datafusion_common::{not_impl_err, plan_err, Result, ScalarValue};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};

/// Flink's `AVG`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct FlinkAvg {
    signature: Signature,
}

impl FlinkAvg {
    pub(crate) fn udaf() -> Arc<AggregateUDF> {
        Arc::new(AggregateUDF::new_from_impl(FlinkAvg {
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    }
}

/// How the sum is kept: whole numbers, doubles, or a decimal's unscaled integer.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Integer,
    Float,
    Decimal { scale: i8 },
}

fn kind(t: &DataType) -> Result<Kind> {
    Ok(match t {
        t if t.is_integer() => Kind::Integer,
        DataType::Float32 | DataType::Float64 => Kind::Float,
        DataType::Decimal128(_, s) => Kind::Decimal { scale: *s },
        other => return plan_err!("AVG cannot take {other}"),
    })
}

impl AggregateUDFImpl for FlinkAvg {
    fn name(&self) -> &str {
        "avg"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [DataType::Null] => Ok(vec![DataType::Int32]),
            [t] if t.is_numeric() => Ok(vec![t.clone()]),
            [t] => plan_err!("AVG takes a number, found {t}"),
            _ => plan_err!("AVG takes one argument"),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(match &arg_types[0] {
            DataType::Decimal128(_, s) => DataType::Decimal128(38, (*s).max(6)),
            other => other.clone(),
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let sum = match kind(args.input_fields[0].data_type())? {
            Kind::Integer => DataType::Int64,
            Kind::Float => DataType::Float64,
            Kind::Decimal { scale } => DataType::Decimal128(38, scale),
        };
        Ok(vec![
            Arc::new(Field::new(format!("{}[sum]", args.name), sum, true)),
            Arc::new(Field::new(
                format!("{}[count]", args.name),
                DataType::Int64,
                true,
            )),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct {
            return not_impl_err!("AVG(DISTINCT ...) is not supported yet");
        }
        Ok(Box::new(AvgAccumulator {
            kind: kind(args.expr_fields[0].data_type())?,
            result: args.return_type().clone(),
            int_sum: 0,
            float_sum: 0.0,
            count: 0,
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.accumulator(args)
    }
}

/// Sum and count; retractable.
#[derive(Debug)]
struct AvgAccumulator {
    kind: Kind,
    result: DataType,
    /// Integer sum, kept in the result type and wrapping as Java does (Flink sums an INT
    /// column's AVG in INT: AVG(42, 0, 2147483647) is -715827869), or a decimal's unscaled sum.
    int_sum: i128,
    float_sum: f64,
    count: i64,
}

impl AvgAccumulator {
    fn add(&mut self, values: &ArrayRef, sign: i64) -> Result<()> {
        match self.kind {
            Kind::Integer => {
                let v = cast(values, &DataType::Int64)?;
                for x in v.as_primitive::<Int64Type>().iter().flatten() {
                    let sum = (self.int_sum as i64).wrapping_add(sign.wrapping_mul(x));
                    self.int_sum = super::cast::wrap_to(sum, &self.result) as i128;
                    self.count += sign;
                }
            }
            Kind::Float => {
                let v = cast(values, &DataType::Float64)?;
                for x in v.as_primitive::<Float64Type>().iter().flatten() {
                    self.float_sum += sign as f64 * x;
                    self.count += sign;
                }
            }
            Kind::Decimal { .. } => {
                for x in values.as_primitive::<Decimal128Type>().iter().flatten() {
                    self.int_sum += sign as i128 * x;
                    self.count += sign;
                }
            }
        }
        Ok(())
    }
}

impl Accumulator for AvgAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.count == 0 {
            return ScalarValue::try_from(&self.result);
        }
        match (self.kind, &self.result) {
            (Kind::Integer, t) => {
                let avg = sluice_common::numeric::avg_integer(self.int_sum as i64, self.count, t);
                ScalarValue::Int64(Some(avg)).cast_to(t)
            }
            (Kind::Float, t) => {
                ScalarValue::Float64(Some(self.float_sum / self.count as f64)).cast_to(t)
            }
            (Kind::Decimal { scale }, DataType::Decimal128(p, s)) => {
                let q = sluice_common::numeric::avg_decimal(self.int_sum, self.count, scale, *s);
                Ok(ScalarValue::Decimal128(Some(q), *p, *s))
            }
            (_, t) => plan_err!("AVG: unexpected result type {t}"),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let sum = match self.kind {
            Kind::Integer => ScalarValue::Int64(Some(self.int_sum as i64)),
            Kind::Float => ScalarValue::Float64(Some(self.float_sum)),
            Kind::Decimal { scale } => ScalarValue::Decimal128(Some(self.int_sum), 38, scale),
        };
        Ok(vec![sum, ScalarValue::Int64(Some(self.count))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let counts = states[1].as_primitive::<Int64Type>();
        for i in 0..states[0].len() {
            if states[0].is_null(i) || counts.is_null(i) {
                continue;
            }
            match self.kind {
                Kind::Integer => {
                    let s = states[0].as_primitive::<Int64Type>().value(i);
                    let sum = (self.int_sum as i64).wrapping_add(s);
                    self.int_sum = super::cast::wrap_to(sum, &self.result) as i128;
                }
                Kind::Float => self.float_sum += states[0].as_primitive::<Float64Type>().value(i),
                Kind::Decimal { .. } => {
                    self.int_sum += states[0].as_primitive::<Decimal128Type>().value(i)
                }
            }
            self.count += counts.value(i);
        }
        Ok(())
    }
}

/// A DataFusion aggregate with Flink's argument handling and result type: arguments are
/// cast to what DataFusion's function takes (`input`), its result to Flink's type
/// (`result`, from the argument's type; an integer result truncated toward zero, wrapping
/// as Java's integers do). `SUM(INT)` is an INT and `SUM(DECIMAL(p, s))` a DECIMAL(38, s)
/// (Flink), where DataFusion has BIGINT and DECIMAL(p + 10, s); `STDDEV` and `VAR` of an
/// integer are that integer type (Flink), where DataFusion has DOUBLE.
pub(crate) struct FlinkTyped {
    name: &'static str,
    inner: Arc<AggregateUDF>,
    input: fn(&DataType) -> DataType,
    result: fn(&DataType) -> DataType,
    signature: Signature,
}

/// The name only: plan fingerprints are built from `Debug` text.
impl std::fmt::Debug for FlinkTyped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlinkTyped({})", self.name)
    }
}

impl PartialEq for FlinkTyped {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for FlinkTyped {}
impl std::hash::Hash for FlinkTyped {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state)
    }
}

impl FlinkTyped {
    pub(crate) fn udaf(
        name: &'static str,
        inner: Arc<AggregateUDF>,
        input: fn(&DataType) -> DataType,
        result: fn(&DataType) -> DataType,
    ) -> Arc<AggregateUDF> {
        Arc::new(AggregateUDF::new_from_impl(FlinkTyped {
            name,
            inner,
            input,
            result,
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    }

    /// `SUM` of a FLOAT: added in FLOAT ([`FloatSum`]), not by DataFusion's DOUBLE sum.
    fn float_sum(&self, fields: &[FieldRef]) -> bool {
        self.name == "sum" && matches!(fields, [f] if f.data_type() == &DataType::Float32)
    }

    fn inner_fields(&self, fields: &[FieldRef]) -> Vec<FieldRef> {
        fields
            .iter()
            .map(|f| {
                Arc::new(
                    f.as_ref()
                        .clone()
                        .with_data_type((self.input)(f.data_type())),
                )
            })
            .collect()
    }

    /// Runs `f` with `args` as DataFusion's function sees them.
    fn with_inner_args<T>(
        &self,
        args: &AccumulatorArgs,
        f: impl FnOnce(AccumulatorArgs) -> Result<T>,
    ) -> Result<T> {
        let fields = self.inner_fields(args.expr_fields);
        let types: Vec<DataType> = fields.iter().map(|f| f.data_type().clone()).collect();
        let ret = self.inner.return_type(&types)?;
        let inner = AccumulatorArgs {
            return_field: Arc::new(Field::new(self.name, ret, true)),
            expr_fields: &fields,
            ..args.clone()
        };
        f(inner)
    }
}

/// An integer or decimal result of DataFusion's function in Flink's type: a DOUBLE to an
/// integer saturates (Java's `(int)`), integers wrap.
fn to_flink_type(v: ArrayRef, t: &DataType) -> Result<ArrayRef> {
    if v.data_type() == t {
        return Ok(v);
    }
    if t.is_integer() && (v.data_type().is_integer() || v.data_type().is_floating()) {
        return super::cast::java_integer(&v, t);
    }
    Ok(cast(&v, t)?)
}

impl AggregateUDFImpl for FlinkTyped {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [DataType::Null] => Ok(vec![DataType::Int32]),
            [DataType::Decimal128(_, _)] if (self.input)(&DataType::Int32) == DataType::Float64 => {
                plan_err!(
                    "{} of a DECIMAL is not supported yet",
                    self.name.to_uppercase()
                )
            }
            [t] if t.is_numeric() => Ok(vec![t.clone()]),
            [t] => plan_err!("{} takes a number, found {t}", self.name.to_uppercase()),
            _ => plan_err!("{} takes one argument", self.name.to_uppercase()),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok((self.result)(&arg_types[0]))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        if self.float_sum(args.input_fields) {
            return Ok(FloatSum::state_fields());
        }
        let fields = self.inner_fields(args.input_fields);
        let types: Vec<DataType> = fields.iter().map(|f| f.data_type().clone()).collect();
        let ret = self.inner.return_type(&types)?;
        self.inner.state_fields(StateFieldsArgs {
            input_fields: &fields,
            return_field: Arc::new(Field::new(self.name, ret, true)),
            ..args
        })
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if self.float_sum(args.expr_fields) {
            return Ok(Box::<FloatSum>::default());
        }
        let inner = self.with_inner_args(&args, |a| self.inner.accumulator(a))?;
        Ok(Box::new(TypedAccumulator {
            inner,
            input: (self.input)(args.expr_fields[0].data_type()),
            result: args.return_type().clone(),
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if self.float_sum(args.expr_fields) {
            return Ok(Box::<FloatSum>::default());
        }
        let inner = self.with_inner_args(&args, |a| self.inner.create_sliding_accumulator(a))?;
        Ok(Box::new(TypedAccumulator {
            inner,
            input: (self.input)(args.expr_fields[0].data_type()),
            result: args.return_type().clone(),
        }))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        if self.float_sum(args.expr_fields) {
            return false;
        }
        self.with_inner_args(&args, |a| Ok(self.inner.groups_accumulator_supported(a)))
            .unwrap_or(false)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn datafusion_expr::GroupsAccumulator>> {
        let inner = self.with_inner_args(&args, |a| self.inner.create_groups_accumulator(a))?;
        Ok(Box::new(TypedGroups {
            inner,
            input: (self.input)(args.expr_fields[0].data_type()),
            result: args.return_type().clone(),
        }))
    }
}

/// Flink's `SUM` of FLOAT (`FloatSumAggFunction`, `FloatSumWithRetractAggFunction`): the
/// values added (and retracted) one by one in FLOAT arithmetic, so 2^24 + 1 + 1 is 2^24
/// (a DOUBLE sum cast back would give 2^24 + 2); NULL while no non-NULL value is held.
/// State: `sum` (FLOAT), `count` (BIGINT, the non-NULL values held).
#[derive(Debug)]
struct FloatSum {
    sum: f32,
    count: i64,
}

impl Default for FloatSum {
    /// Flink's sum starts from NULL: the first value is the sum (-0.0 + x = x for every x).
    fn default() -> Self {
        FloatSum {
            sum: -0.0,
            count: 0,
        }
    }
}

impl FloatSum {
    fn state_fields() -> Vec<FieldRef> {
        vec![
            Arc::new(Field::new("sum[sum]", DataType::Float32, true)),
            Arc::new(Field::new("sum[count]", DataType::Int64, true)),
        ]
    }

    fn add(&mut self, values: &ArrayRef, sign: i64) -> Result<()> {
        let v = cast(values, &DataType::Float32)?;
        let v = v.as_primitive::<datafusion_common::arrow::datatypes::Float32Type>();
        for x in v.iter().flatten() {
            if sign > 0 {
                self.sum += x;
            } else {
                self.sum -= x;
            }
            self.count += sign;
        }
        Ok(())
    }
}

impl Accumulator for FloatSum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add(&values[0], -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float32((self.count != 0).then_some(self.sum)))
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Float32(Some(self.sum)),
            ScalarValue::Int64(Some(self.count)),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let sums = cast(&states[0], &DataType::Float32)?;
        let sums = sums.as_primitive::<datafusion_common::arrow::datatypes::Float32Type>();
        let counts = cast(&states[1], &DataType::Int64)?;
        let counts = counts.as_primitive::<datafusion_common::arrow::datatypes::Int64Type>();
        for i in 0..sums.len() {
            if counts.is_valid(i) && counts.value(i) != 0 {
                self.sum += sums.value(i);
                self.count += counts.value(i);
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
struct TypedAccumulator {
    inner: Box<dyn Accumulator>,
    input: DataType,
    result: DataType,
}

impl Accumulator for TypedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(&[cast(&values[0], &self.input)?])
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(&[cast(&values[0], &self.input)?])
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let v = self.inner.evaluate()?.to_array()?;
        ScalarValue::try_from_array(&to_flink_type(v, &self.result)?, 0)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }
}

struct TypedGroups {
    inner: Box<dyn datafusion_expr::GroupsAccumulator>,
    input: DataType,
    result: DataType,
}

impl datafusion_expr::GroupsAccumulator for TypedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&datafusion_common::arrow::array::BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let v = cast(&values[0], &self.input)?;
        self.inner
            .update_batch(&[v], group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: datafusion_expr::EmitTo) -> Result<ArrayRef> {
        to_flink_type(self.inner.evaluate(emit_to)?, &self.result)
    }

    fn state(&mut self, emit_to: datafusion_expr::EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&datafusion_common::arrow::array::BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.inner
            .convert_to_state(&[cast(&values[0], &self.input)?], opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}

/// Flink's `SUM`: the argument's type; DECIMAL(p, s) → DECIMAL(38, s).
pub(crate) fn sum(inner: Arc<AggregateUDF>) -> Arc<AggregateUDF> {
    let input = |t: &DataType| match t {
        t if t.is_integer() => DataType::Int64,
        DataType::Float32 => DataType::Float64,
        other => other.clone(),
    };
    FlinkTyped::udaf("sum", inner, input, |t| match t {
        DataType::Decimal128(_, s) => DataType::Decimal128(38, *s),
        other => other.clone(),
    })
}

/// Flink's `STDDEV_*` / `VAR_*` (`name`): computed in DOUBLE, returned in the argument's
/// type (an integer truncated toward zero).
pub(crate) fn deviation(name: &'static str, inner: Arc<AggregateUDF>) -> Arc<AggregateUDF> {
    FlinkTyped::udaf(name, inner, |_| DataType::Float64, |t| t.clone())
}

/// Which value of a group `FIRST_VALUE`, `LAST_VALUE` and `LISTAGG` give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Pick {
    /// The first non-NULL value to arrive (`FIRST_VALUE`).
    First,
    /// The last non-NULL value to arrive (`LAST_VALUE`).
    Last,
    /// Every non-NULL value in arrival order, joined by the separator (`LISTAGG`, default
    /// `,`).
    Join,
    /// Every value in arrival order, NULLs included, as an `ARRAY` (`ARRAY_AGG`; with
    /// `DISTINCT`, each value's first arrival).
    Array,
}

/// Flink's `FIRST_VALUE`, `LAST_VALUE`, `LISTAGG` and `ARRAY_AGG` (Flink docs, "Aggregate
/// Functions"): NULL values are skipped (kept by `ARRAY_AGG`, which respects NULLs by
/// default); over an updating input a retracted value leaves the group (the next one
/// becomes first), as Flink's retracting versions. An empty group gives NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ArrivalOrder {
    name: &'static str,
    pick: Pick,
    signature: Signature,
}

impl ArrivalOrder {
    pub(crate) fn udaf(name: &'static str, pick: Pick) -> Arc<AggregateUDF> {
        Arc::new(AggregateUDF::new_from_impl(ArrivalOrder {
            name,
            pick,
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    }

    /// The type of the values kept (the argument's; `LISTAGG` keeps strings).
    fn item_type(&self, input: &DataType) -> DataType {
        match self.pick {
            Pick::Join => DataType::Utf8,
            _ => input.clone(),
        }
    }

    fn value_type(&self, input: &DataType) -> DataType {
        match self.pick {
            Pick::Array => sluice_common::types::array_type(input.clone(), true),
            _ => self.item_type(input),
        }
    }

    /// The accumulator; `keep_all`: it keeps every value (it can retract).
    fn pick_accumulator(
        &self,
        args: AccumulatorArgs,
        keep_all: bool,
    ) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct && self.pick != Pick::Array {
            return not_impl_err!(
                "{}(DISTINCT ...) is not supported yet",
                self.name.to_uppercase()
            );
        }
        Ok(Box::new(PickAccumulator {
            pick: self.pick,
            item: self.item_type(args.expr_fields[0].data_type()),
            values: Vec::new(),
            separator: None,
            keep_all,
            distinct: args.is_distinct,
        }))
    }
}

impl AggregateUDFImpl for ArrivalOrder {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let string = |t: &DataType| {
            matches!(
                t,
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null
            )
        };
        match (self.pick, arg_types) {
            (Pick::Join, [t]) if string(t) => Ok(vec![DataType::Utf8]),
            (Pick::Join, [t, s]) if string(t) && string(s) => {
                Ok(vec![DataType::Utf8, DataType::Utf8])
            }
            (Pick::Join, _) => plan_err!("LISTAGG takes a STRING and an optional STRING separator"),
            (_, [DataType::Null]) => Ok(vec![DataType::Int32]),
            (_, [t]) => Ok(vec![t.clone()]),
            _ => plan_err!("{} takes one argument", self.name.to_uppercase()),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.value_type(&arg_types[0]))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let item = self.item_type(args.input_fields[0].data_type());
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[values]", args.name),
                sluice_common::types::array_type(item, true),
                true,
            )),
            Arc::new(Field::new(
                format!("{}[separator]", args.name),
                DataType::Utf8,
                true,
            )),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.pick_accumulator(args, matches!(self.pick, Pick::Join | Pick::Array))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.pick_accumulator(args, true)
    }
}

/// The group's non-NULL values in arrival order (only the one needed when nothing can be
/// retracted: `keep_all` false).
#[derive(Debug)]
struct PickAccumulator {
    pick: Pick,
    item: DataType,
    values: Vec<ScalarValue>,
    separator: Option<String>,
    keep_all: bool,
    /// `ARRAY_AGG(DISTINCT ...)`: every value is kept (a retraction removes one copy) and
    /// the result shows each value once.
    distinct: bool,
}

impl PickAccumulator {
    fn push(&mut self, v: ScalarValue) {
        if self.keep_all {
            self.values.push(v);
        } else if self.pick == Pick::Last {
            self.values = vec![v];
        } else if self.values.is_empty() {
            self.values.push(v);
        }
    }
}

impl Accumulator for PickAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if self.separator.is_none() {
            if let Some(sep) = values.get(1).filter(|s| s.len() > 0 && !s.is_null(0)) {
                self.separator = Some(sep.as_string::<i32>().value(0).to_string());
            }
        }
        for i in 0..values[0].len() {
            if !values[0].is_null(i) || self.pick == Pick::Array {
                self.push(ScalarValue::try_from_array(&values[0], i)?);
            }
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for i in 0..values[0].len() {
            if values[0].is_null(i) && self.pick != Pick::Array {
                continue;
            }
            let v = ScalarValue::try_from_array(&values[0], i)?;
            let found = match self.pick {
                Pick::Last => self.values.iter().rposition(|x| *x == v),
                _ => self.values.iter().position(|x| *x == v),
            };
            if let Some(p) = found {
                self.values.remove(p);
            }
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        self.keep_all
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(match self.pick {
            Pick::First => self.values.first().cloned(),
            Pick::Last => self.values.last().cloned(),
            Pick::Join => (!self.values.is_empty()).then(|| {
                let parts: Vec<String> = self.values.iter().map(|v| v.to_string()).collect();
                ScalarValue::Utf8(Some(parts.join(self.separator.as_deref().unwrap_or(","))))
            }),
            Pick::Array => {
                if self.values.is_empty() {
                    return ScalarValue::try_from(&sluice_common::types::array_type(
                        self.item.clone(),
                        true,
                    ));
                }
                let mut shown: Vec<ScalarValue> = Vec::with_capacity(self.values.len());
                for v in &self.values {
                    if !self.distinct || !shown.contains(v) {
                        shown.push(v.clone());
                    }
                }
                let list = ScalarValue::new_list_nullable(&shown, &self.item);
                Some(ScalarValue::List(list))
            }
        }
        .map_or_else(|| ScalarValue::try_from(&self.item), Ok)?)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.iter().map(|v| v.size()).sum::<usize>()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let list = ScalarValue::new_list_nullable(&self.values, &self.item);
        Ok(vec![
            ScalarValue::List(list),
            ScalarValue::Utf8(self.separator.clone()),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = states[0].as_list::<i32>();
        for i in 0..lists.len() {
            if lists.is_null(i) {
                continue;
            }
            let items = lists.value(i);
            for k in 0..items.len() {
                self.push(ScalarValue::try_from_array(&items, k)?);
            }
            if self.separator.is_none() && !states[1].is_null(i) {
                self.separator = Some(states[1].as_string::<i32>().value(i).to_string());
            }
        }
        Ok(())
    }
}
