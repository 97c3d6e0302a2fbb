//! Flink 2.3's `BITMAP` type and its functions (FLIP-556; Flink docs, "System (Built-in)
//! Functions > Bitmap Functions"): a set of 32-bit unsigned integers, a RoaringBitmap.
//!
//! In Arrow a BITMAP is a `LargeBinary` value holding the RoaringBitmap portable
//! serialization (the bytes `BITMAP_TO_BYTES` returns, which Java's RoaringBitmap and
//! CRoaring read); [`sluice_common::types::flink_type_name`] names the type `BITMAP`.
//! An `INT` goes in as its unsigned bits: `-1` is `4294967295`, ordered after every
//! non-negative value (`BITMAP_TO_STRING` shows the unsigned value, `BITMAP_TO_ARRAY`
//! gives back the `INT`).
//!
//! The aggregates (`BITMAP_BUILD_AGG`, `BITMAP_AND_AGG`, `BITMAP_OR_AGG`, `BITMAP_XOR_AGG`
//! and their `_CARDINALITY_AGG` forms) retract: each keeps, per value, how many of its
//! inputs hold it. A group whose inputs are all NULL gives NULL (Flink 2.3).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Int32Array, Int64Array, LargeBinaryArray, ListArray,
    StringArray,
};
use datafusion_common::arrow::buffer::OffsetBuffer;
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion_common::{exec_err, plan_err, Result, ScalarValue};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};
use roaring::RoaringBitmap;

use super::udf::{Arg, Call, Def};
use crate::returns;

/// The Arrow type of a BITMAP.
pub const BITMAP: DataType = DataType::LargeBinary;

pub(crate) const FUNCTIONS: &[Def] = &[
    Def::new("bitmap_build", &[&[Arg::Array]], ret_build, build),
    Def::new(
        "bitmap_from_bytes",
        &[&[Arg::Bytes]],
        returns!(BITMAP),
        from_bytes,
    ),
    Def::new(
        "bitmap_to_bytes",
        &[&[Arg::Bitmap]],
        returns!(DataType::Binary),
        to_bytes,
    ),
    Def::new("bitmap_to_array", &[&[Arg::Bitmap]], ret_to_array, to_array),
    Def::new(
        "bitmap_to_string",
        &[&[Arg::Bitmap]],
        returns!(DataType::Utf8),
        to_string,
    ),
    Def::new(
        "bitmap_cardinality",
        &[&[Arg::Bitmap]],
        returns!(DataType::Int64),
        cardinality,
    ),
    Def::new(
        "bitmap_and",
        &[&[Arg::Bitmap, Arg::Bitmap]],
        returns!(BITMAP),
        and,
    ),
    Def::new(
        "bitmap_andnot",
        &[&[Arg::Bitmap, Arg::Bitmap]],
        returns!(BITMAP),
        andnot,
    ),
    Def::new(
        "bitmap_or",
        &[&[Arg::Bitmap, Arg::Bitmap]],
        returns!(BITMAP),
        or,
    ),
    Def::new(
        "bitmap_xor",
        &[&[Arg::Bitmap, Arg::Bitmap]],
        returns!(BITMAP),
        xor,
    ),
];

/// The aggregates, by name.
pub(crate) fn aggregates() -> Vec<Arc<AggregateUDF>> {
    let mut out = Vec::new();
    for (op, name, cardinality_name) in [
        (
            SetOp::Build,
            "bitmap_build_agg",
            "bitmap_build_cardinality_agg",
        ),
        (SetOp::And, "bitmap_and_agg", "bitmap_and_cardinality_agg"),
        (SetOp::Or, "bitmap_or_agg", "bitmap_or_cardinality_agg"),
        (SetOp::Xor, "bitmap_xor_agg", "bitmap_xor_cardinality_agg"),
    ] {
        for (name, cardinality) in [(name, false), (cardinality_name, true)] {
            out.push(Arc::new(AggregateUDF::new_from_impl(BitmapAggregate {
                name,
                op,
                cardinality,
                signature: Signature::user_defined(Volatility::Immutable),
            })));
        }
    }
    out
}

/// A BITMAP value from its serialized bytes.
fn decode(bytes: &[u8]) -> Result<RoaringBitmap> {
    RoaringBitmap::deserialize_from(bytes).map_err(|e| {
        datafusion_common::DataFusionError::Execution(format!(
            "the bytes are not a serialized RoaringBitmap (the BITMAP format): {e}"
        ))
    })
}

fn encode(b: &RoaringBitmap) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.serialized_size());
    b.serialize_into(&mut out)
        .expect("writing to a Vec cannot fail");
    out
}

/// Each row's bitmap (NULL stays NULL).
fn bitmaps(a: &ArrayRef) -> Result<Vec<Option<RoaringBitmap>>> {
    let a = cast(a, &BITMAP)?;
    a.as_binary::<i64>()
        .iter()
        .map(|v| v.map(decode).transpose())
        .collect()
}

fn bitmap_array(values: impl IntoIterator<Item = Option<RoaringBitmap>>) -> ArrayRef {
    let encoded: Vec<Option<Vec<u8>>> = values.into_iter().map(|b| b.map(|b| encode(&b))).collect();
    Arc::new(LargeBinaryArray::from_iter(encoded))
}

/// The text of a bitmap: `{1,2,4294967295}` (Flink's `BITMAP_TO_STRING` and `CAST(... AS
/// STRING)`).
pub(crate) fn bitmap_text(bytes: &[u8]) -> Result<String> {
    let b = decode(bytes)?;
    let items: Vec<String> = b.iter().map(|v| v.to_string()).collect();
    Ok(format!("{{{}}}", items.join(",")))
}

fn ret_build(t: &[DataType], _: &[Option<&ScalarValue>]) -> Result<DataType> {
    match &t[0] {
        // Integer literals are BIGINT until planning ends (literals.rs makes them INT), so
        // every integer element type is taken; a value out of INT's range is an error.
        DataType::List(f) if f.data_type().is_integer() || f.data_type() == &DataType::Null => {
            Ok(BITMAP)
        }
        other => plan_err!(
            "BITMAP_BUILD takes an ARRAY<INT>, found {}",
            sluice_common::types::flink_type_name(other)
        ),
    }
}

fn build(c: &Call) -> Result<ArrayRef> {
    let lists = c.args[0].as_list::<i32>();
    let mut out = Vec::with_capacity(c.rows);
    for i in 0..c.rows {
        if lists.is_null(i) {
            out.push(None);
            continue;
        }
        let items = cast(&lists.value(i), &DataType::Int64)?;
        let mut b = RoaringBitmap::new();
        for v in items.as_primitive::<Int64Type>().iter().flatten() {
            let Ok(v) = i32::try_from(v) else {
                return exec_err!("BITMAP_BUILD: {v} is not an INT (a BITMAP holds INT values)");
            };
            b.insert(v as u32);
        }
        out.push(Some(b));
    }
    Ok(bitmap_array(out))
}

fn from_bytes(c: &Call) -> Result<ArrayRef> {
    let bytes = cast(&c.args[0], &DataType::Binary)?;
    let out = bytes
        .as_binary::<i32>()
        .iter()
        .map(|v| v.map(decode).transpose())
        .collect::<Result<Vec<_>>>()?;
    Ok(bitmap_array(out))
}

fn to_bytes(c: &Call) -> Result<ArrayRef> {
    let out: BinaryArray = bitmaps(&c.args[0])?
        .into_iter()
        .map(|b| b.map(|b| encode(&b)))
        .collect();
    Ok(Arc::new(out))
}

fn ret_to_array(_: &[DataType], _: &[Option<&ScalarValue>]) -> Result<DataType> {
    Ok(sluice_common::types::array_type(DataType::Int32, false))
}

fn to_array(c: &Call) -> Result<ArrayRef> {
    let all = bitmaps(&c.args[0])?;
    let mut offsets = Vec::with_capacity(c.rows + 1);
    offsets.push(0i32);
    let mut values = Vec::new();
    for b in &all {
        if let Some(b) = b {
            // Unsigned order, each value back as the INT it came from.
            values.extend(b.iter().map(|v| v as i32));
        }
        offsets.push(values.len() as i32);
    }
    let nulls: datafusion_common::arrow::buffer::NullBuffer =
        all.iter().map(Option::is_some).collect();
    let DataType::List(item) = ret_to_array(&[], &[])? else {
        unreachable!("an array type")
    };
    Ok(Arc::new(ListArray::try_new(
        item,
        OffsetBuffer::new(offsets.into()),
        Arc::new(Int32Array::from(values)),
        Some(nulls),
    )?))
}

fn to_string(c: &Call) -> Result<ArrayRef> {
    let a = cast(&c.args[0], &BITMAP)?;
    let out = a
        .as_binary::<i64>()
        .iter()
        .map(|v| v.map(bitmap_text).transpose())
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(StringArray::from(out)))
}

fn cardinality(c: &Call) -> Result<ArrayRef> {
    let out: Int64Array = bitmaps(&c.args[0])?
        .into_iter()
        .map(|b| b.map(|b| b.len() as i64))
        .collect();
    Ok(Arc::new(out))
}

fn binary(c: &Call, op: fn(RoaringBitmap, RoaringBitmap) -> RoaringBitmap) -> Result<ArrayRef> {
    let left = bitmaps(&c.args[0])?;
    let right = bitmaps(&c.args[1])?;
    Ok(bitmap_array(left.into_iter().zip(right).map(
        |(l, r)| match (l, r) {
            (Some(l), Some(r)) => Some(op(l, r)),
            _ => None,
        },
    )))
}

fn and(c: &Call) -> Result<ArrayRef> {
    binary(c, |l, r| l & r)
}

fn andnot(c: &Call) -> Result<ArrayRef> {
    binary(c, |l, r| l - r)
}

fn or(c: &Call) -> Result<ArrayRef> {
    binary(c, |l, r| l | r)
}

fn xor(c: &Call) -> Result<ArrayRef> {
    binary(c, |l, r| l ^ r)
}

/// How an aggregate combines its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum SetOp {
    /// `BITMAP_BUILD_AGG(int)`: the set of the values.
    Build,
    /// `BITMAP_AND_AGG(bitmap)`: the values every input holds.
    And,
    /// `BITMAP_OR_AGG(bitmap)`: the values some input holds.
    Or,
    /// `BITMAP_XOR_AGG(bitmap)`: the values an odd number of inputs hold.
    Xor,
}

/// A bitmap aggregate; with `cardinality`, its result's cardinality (`BIGINT`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct BitmapAggregate {
    name: &'static str,
    op: SetOp,
    cardinality: bool,
    signature: Signature,
}

impl AggregateUDFImpl for BitmapAggregate {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let upper = self.name.to_uppercase();
        match (self.op, arg_types) {
            // Any integer: literals are BIGINT until planning ends (literals.rs); a value
            // out of INT's range is an error when it arrives.
            (SetOp::Build, [DataType::Null]) => Ok(vec![DataType::Int32]),
            (SetOp::Build, [t]) if t.is_integer() => Ok(vec![t.clone()]),
            (SetOp::Build, [t]) => plan_err!(
                "{upper} takes an INT, found {}",
                sluice_common::types::flink_type_name(t)
            ),
            (_, [DataType::LargeBinary | DataType::Null]) => Ok(vec![BITMAP]),
            (_, [t]) => plan_err!(
                "{upper} takes a BITMAP, found {}",
                sluice_common::types::flink_type_name(t)
            ),
            _ => plan_err!("{upper} takes one argument"),
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(if self.cardinality {
            DataType::Int64
        } else {
            BITMAP
        })
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let list = sluice_common::types::array_type(DataType::Int64, false);
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[values]", args.name),
                list.clone(),
                true,
            )),
            Arc::new(Field::new(format!("{}[counts]", args.name), list, true)),
            Arc::new(Field::new(
                format!("{}[inputs]", args.name),
                DataType::Int64,
                true,
            )),
        ])
    }

    fn accumulator(&self, _: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(BitmapAccumulator {
            op: self.op,
            cardinality: self.cardinality,
            counts: BTreeMap::new(),
            inputs: 0,
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.accumulator(args)
    }
}

/// Per value, how many of the group's (non-NULL) inputs hold it; and how many inputs
/// there are.
#[derive(Debug)]
struct BitmapAccumulator {
    op: SetOp,
    cardinality: bool,
    counts: BTreeMap<u32, i64>,
    inputs: i64,
}

impl BitmapAccumulator {
    fn add(&mut self, values: &ArrayRef, sign: i64) -> Result<()> {
        if self.op == SetOp::Build {
            let ints = cast(values, &DataType::Int64)?;
            for v in ints.as_primitive::<Int64Type>().iter().flatten() {
                let Ok(v) = i32::try_from(v) else {
                    return exec_err!(
                        "BITMAP_BUILD_AGG: {v} is not an INT (a BITMAP holds INT values)"
                    );
                };
                self.inputs += sign;
                self.count(v as u32, sign);
            }
            return Ok(());
        }
        for b in bitmaps(values)?.into_iter().flatten() {
            self.inputs += sign;
            for v in b.iter() {
                self.count(v, sign);
            }
        }
        Ok(())
    }

    fn count(&mut self, v: u32, sign: i64) {
        let n = self.counts.entry(v).or_insert(0);
        *n += sign;
        if *n == 0 {
            self.counts.remove(&v);
        }
    }

    fn result(&self) -> RoaringBitmap {
        let inputs = self.inputs;
        let keep = |n: i64| match self.op {
            SetOp::Build | SetOp::Or => n > 0,
            SetOp::And => n == inputs,
            SetOp::Xor => n % 2 != 0,
        };
        self.counts
            .iter()
            .filter(|(_, n)| keep(**n))
            .map(|(v, _)| *v)
            .collect()
    }
}

impl Accumulator for BitmapAccumulator {
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
        if self.inputs <= 0 {
            return Ok(if self.cardinality {
                ScalarValue::Int64(None)
            } else {
                ScalarValue::LargeBinary(None)
            });
        }
        let b = self.result();
        Ok(if self.cardinality {
            ScalarValue::Int64(Some(b.len() as i64))
        } else {
            ScalarValue::LargeBinary(Some(encode(&b)))
        })
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.counts.len() * 3 * std::mem::size_of::<i64>()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self
            .counts
            .keys()
            .map(|v| ScalarValue::Int64(Some(*v as i64)))
            .collect();
        let counts: Vec<ScalarValue> = self
            .counts
            .values()
            .map(|n| ScalarValue::Int64(Some(*n)))
            .collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&values, &DataType::Int64)),
            ScalarValue::List(ScalarValue::new_list_nullable(&counts, &DataType::Int64)),
            ScalarValue::Int64(Some(self.inputs)),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let values = states[0].as_list::<i32>();
        let counts = states[1].as_list::<i32>();
        let inputs = states[2].as_primitive::<Int64Type>();
        for i in 0..values.len() {
            if values.is_null(i) {
                continue;
            }
            let v = values.value(i);
            let n = counts.value(i);
            let (v, n) = (v.as_primitive::<Int64Type>(), n.as_primitive::<Int64Type>());
            if v.len() != n.len() {
                return exec_err!(
                    "a BITMAP aggregate's state has {} values and {} counts",
                    v.len(),
                    n.len()
                );
            }
            for k in 0..v.len() {
                self.count(v.value(k) as u32, n.value(k));
            }
            self.inputs += inputs.value(i);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[Option<i32>]) -> ArrayRef {
        Arc::new(Int32Array::from(v.to_vec()))
    }

    fn accumulator(op: SetOp) -> BitmapAccumulator {
        BitmapAccumulator {
            op,
            cardinality: false,
            counts: BTreeMap::new(),
            inputs: 0,
        }
    }

    fn text(v: ScalarValue) -> Option<String> {
        match v {
            ScalarValue::LargeBinary(b) => b.map(|b| bitmap_text(&b).unwrap()),
            other => panic!("not a BITMAP: {other}"),
        }
    }

    /// A checkpoint holds `state()`; a restore merges it into a fresh accumulator, which
    /// then retracts as the original would have.
    #[test]
    fn state_round_trips_and_retracts_after_restore() {
        let mut a = accumulator(SetOp::Build);
        a.update_batch(&[ints(&[Some(1), Some(2), Some(2), None, Some(-1)])])
            .unwrap();
        let state: Vec<ArrayRef> = a
            .state()
            .unwrap()
            .into_iter()
            .map(|s| s.to_array().unwrap())
            .collect();
        let mut b = accumulator(SetOp::Build);
        b.merge_batch(&state).unwrap();
        assert_eq!(text(b.evaluate().unwrap()).unwrap(), "{1,2,4294967295}");
        // One of the two 2s leaves: 2 stays; the 1 leaves.
        b.retract_batch(&[ints(&[Some(2), Some(1)])]).unwrap();
        assert_eq!(text(b.evaluate().unwrap()).unwrap(), "{2,4294967295}");
        b.retract_batch(&[ints(&[Some(2), Some(-1)])]).unwrap();
        assert_eq!(text(b.evaluate().unwrap()), None);
    }

    #[test]
    fn and_keeps_what_every_input_holds() {
        let build =
            |v: &[i32]| -> Option<Vec<u8>> { Some(encode(&v.iter().map(|x| *x as u32).collect())) };
        let inputs: ArrayRef = Arc::new(LargeBinaryArray::from_iter(vec![
            build(&[1, 2, 3]),
            None,
            build(&[2, 3]),
        ]));
        let mut a = accumulator(SetOp::And);
        a.update_batch(&[Arc::clone(&inputs)]).unwrap();
        assert_eq!(text(a.evaluate().unwrap()).unwrap(), "{2,3}");
        let one: ArrayRef = Arc::new(LargeBinaryArray::from_iter(vec![build(&[2, 3])]));
        a.retract_batch(&[one]).unwrap();
        assert_eq!(text(a.evaluate().unwrap()).unwrap(), "{1,2,3}");
    }
}
