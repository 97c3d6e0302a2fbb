//! Flink's `COLLECT(x)` (Flink docs, "Aggregate Functions"): the `MULTISET` of a group's
//! non-NULL values ([`sluice_common::types::multiset_type`]: each distinct value with the
//! number of times it occurs). A group of only NULLs gives the empty multiset, as Flink's;
//! over an updating input a retracted value leaves it (its count goes down, and at zero
//! the value goes). The values come out in ascending order (Flink's come in its hash
//! map's order, which is that for small integers and one-letter strings).

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, Int32Array, MapArray, StructArray,
};
use datafusion_common::arrow::buffer::OffsetBuffer;
use datafusion_common::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{plan_err, Result, ScalarValue};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility};
use sluice_common::types::{array_type, multiset_type};

/// `COLLECT`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Collect {
    signature: Signature,
}

impl Collect {
    pub(crate) fn udaf() -> Arc<AggregateUDF> {
        Arc::new(AggregateUDF::new_from_impl(Collect {
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    }
}

impl AggregateUDFImpl for Collect {
    fn name(&self) -> &str {
        "collect"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [DataType::Null] => Ok(vec![DataType::Int32]),
            [t] => Ok(vec![t.clone()]),
            _ => plan_err!("COLLECT takes one argument"),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(multiset_type(arg_types[0].clone()))
    }

    /// Never NULL: an empty group gives the empty multiset (Flink: `NOT NULL`).
    fn is_nullable(&self) -> bool {
        false
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let element = args.input_fields[0].data_type().clone();
        Ok(vec![
            Arc::new(Field::new(
                format!("{}[elements]", args.name),
                array_type(element, true),
                true,
            )),
            Arc::new(Field::new(
                format!("{}[counts]", args.name),
                array_type(DataType::Int32, true),
                true,
            )),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        if args.is_distinct {
            return datafusion_common::not_impl_err!("COLLECT(DISTINCT ...) is not supported");
        }
        Ok(Box::new(CollectAccumulator {
            element: args.expr_fields[0].data_type().clone(),
            counts: std::collections::HashMap::new(),
        }))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.accumulator(args)
    }
}

/// Each distinct non-NULL value and its count.
#[derive(Debug)]
struct CollectAccumulator {
    element: DataType,
    counts: std::collections::HashMap<ScalarValue, i32>,
}

impl CollectAccumulator {
    fn add(&mut self, v: ScalarValue, n: i32) {
        let c = self.counts.entry(v).or_insert(0);
        *c += n;
        if *c <= 0 {
            self.counts.retain(|_, c| *c > 0);
        }
    }

    /// The values and their counts, in ascending order of value.
    fn sorted(&self) -> Vec<(ScalarValue, i32)> {
        let mut all: Vec<(ScalarValue, i32)> =
            self.counts.iter().map(|(v, c)| (v.clone(), *c)).collect();
        all.sort_by(|(a, _), (b, _)| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        all
    }

    fn add_all(&mut self, values: &ArrayRef, n: i32) -> Result<()> {
        for i in 0..values.len() {
            if !values.is_null(i) {
                self.add(ScalarValue::try_from_array(values, i)?, n);
            }
        }
        Ok(())
    }
}

impl Accumulator for CollectAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add_all(&values[0], 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.add_all(&values[0], -1)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let DataType::Map(entries, _) = multiset_type(self.element.clone()) else {
            unreachable!("a multiset is a map")
        };
        let DataType::Struct(fields) = entries.data_type() else {
            unreachable!("map entries are a struct")
        };
        let sorted = self.sorted();
        let elements = if sorted.is_empty() {
            datafusion_common::arrow::array::new_empty_array(&self.element)
        } else {
            ScalarValue::iter_to_array(sorted.iter().map(|(v, _)| v.clone()))?
        };
        let counts = Int32Array::from_iter_values(sorted.iter().map(|(_, c)| *c));
        let pairs = StructArray::try_new(fields.clone(), vec![elements, Arc::new(counts)], None)?;
        let offsets = OffsetBuffer::from_lengths([sorted.len()]);
        let map = MapArray::try_new(entries, offsets, pairs, None, false)?;
        Ok(ScalarValue::Map(Arc::new(map)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.counts.iter().map(|(v, _)| v.size() + 4).sum::<usize>()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let sorted = self.sorted();
        let elements: Vec<ScalarValue> = sorted.iter().map(|(v, _)| v.clone()).collect();
        let counts: Vec<ScalarValue> = sorted
            .iter()
            .map(|(_, c)| ScalarValue::Int32(Some(*c)))
            .collect();
        Ok(vec![
            ScalarValue::List(ScalarValue::new_list_nullable(&elements, &self.element)),
            ScalarValue::List(ScalarValue::new_list_nullable(&counts, &DataType::Int32)),
        ])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let (elements, counts) = (states[0].as_list::<i32>(), states[1].as_list::<i32>());
        for i in 0..elements.len() {
            if elements.is_null(i) {
                continue;
            }
            let (values, ns) = (elements.value(i), counts.value(i));
            let ns = ns.as_primitive::<datafusion_common::arrow::datatypes::Int32Type>();
            for k in 0..values.len() {
                self.add(ScalarValue::try_from_array(&values, k)?, ns.value(k));
            }
        }
        Ok(())
    }
}
