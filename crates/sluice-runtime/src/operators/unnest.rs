//! `CROSS JOIN UNNEST(array, ...)` (Flink SQL "Joins > Array Expansion"): each row once
//! per element of its arrays.

use datafusion_common::arrow::array::{Array, ArrayRef, AsArray, Int8Array, UInt32Array};
use datafusion_common::arrow::compute::take;
use datafusion_common::arrow::datatypes::{Int64Type, SchemaRef};
use sluice_common::plan::UnnestNulls;
use sluice_common::Result;

use crate::message::StreamBatch;
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;

/// Expands each row into one row per element of its `ARRAY` columns at `lists` (input
/// indices). Several arrays are zipped: a row gives as many rows as its longest array,
/// the shorter ones padded with NULL. Output: the input columns in order, each unnested
/// column replaced by its elements, every other column repeated. A row whose arrays are
/// all NULL or empty gives no row, or one row of NULL elements, as `nulls` says. Each
/// output row keeps its input row's watermark and change kind (an unnested `-D` row
/// retracts every row its `+I` gave). Stateless.
pub struct UnnestOperator {
    lists: Vec<usize>,
    nulls: UnnestNulls,
    schema: SchemaRef,
}

impl UnnestOperator {
    /// Unnests the columns at `lists`, producing `schema`.
    pub fn new(lists: Vec<usize>, nulls: UnnestNulls, schema: SchemaRef) -> Self {
        UnnestOperator {
            lists,
            nulls,
            schema,
        }
    }
}

impl Operator for UnnestOperator {
    fn name(&self) -> &'static str {
        "Unnest"
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let n = batch.num_rows();
        let lists: Vec<_> = self
            .lists
            .iter()
            .map(|&c| batch.data.column(c).as_list::<i32>())
            .collect();
        // Input row of each output row; per array, the element (an index into its
        // values) or NULL (padding).
        let mut rows: Vec<u32> = Vec::with_capacity(n);
        let mut elements: Vec<Vec<Option<u32>>> = vec![Vec::with_capacity(n); lists.len()];
        for i in 0..n {
            let len = |l: &&datafusion_common::arrow::array::ListArray| {
                if l.is_null(i) {
                    0
                } else {
                    l.value_length(i) as usize
                }
            };
            let longest = lists.iter().map(len).max().unwrap_or(0);
            let expanded = match self.nulls {
                _ if longest > 0 => longest,
                UnnestNulls::Drop => 0,
                UnnestNulls::Preserve if lists.iter().all(|l| l.is_null(i)) => 1,
                UnnestNulls::Preserve => 0,
                UnnestNulls::PreserveEmpty => 1,
            };
            for j in 0..expanded {
                rows.push(i as u32);
                for (k, l) in lists.iter().enumerate() {
                    let start = l.value_offsets()[i] as usize;
                    elements[k].push((j < len(l)).then_some((start + j) as u32));
                }
            }
        }
        let rows = UInt32Array::from(rows);
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.data.num_columns());
        for (c, column) in batch.data.columns().iter().enumerate() {
            columns.push(match self.lists.iter().position(|&l| l == c) {
                Some(k) => take(
                    lists[k].values().as_ref(),
                    &UInt32Array::from(std::mem::take(&mut elements[k])),
                    None,
                )?,
                None => take(column.as_ref(), &rows, None)?,
            });
        }
        let row_watermarks = match &batch.row_watermarks {
            Some(w) => Some(take(w, &rows, None)?.as_primitive::<Int64Type>().clone()),
            None => None,
        };
        let ops = match &batch.ops {
            Some(o) => Some(
                take(o, &rows, None)?
                    .as_any()
                    .downcast_ref::<Int8Array>()
                    .cloned()
                    .expect("Int8 change kinds"),
            ),
            None => None,
        };
        let data = batch_with_schema(&self.schema, columns, rows.len())?;
        out.emit(StreamBatch {
            data,
            row_watermarks,
            ops,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{ListArray, StringArray};
    use datafusion_common::arrow::datatypes::{DataType, Field, Int32Type, Schema};
    use datafusion_common::arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    fn run(nulls: UnnestNulls, lists: Vec<ArrayRef>) -> Vec<String> {
        let ids: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c", "d"]));
        let mut fields = vec![Field::new("id", DataType::Utf8, true)];
        let mut out_fields = fields.clone();
        let mut columns = vec![ids];
        for (k, l) in lists.iter().enumerate() {
            fields.push(Field::new(format!("l{k}"), l.data_type().clone(), true));
            out_fields.push(Field::new(format!("e{k}"), DataType::Int32, true));
            columns.push(Arc::clone(l));
        }
        let data = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let mut op = UnnestOperator::new(
            (1..=lists.len()).collect(),
            nulls,
            Arc::new(Schema::new(out_fields)),
        );
        let mut out = Collector::default();
        op.process_batch(StreamBatch::new(data), &mut out).unwrap();
        let mut lines = Vec::new();
        for m in out.take() {
            let crate::message::Message::Data(b) = m else {
                continue;
            };
            let b = &b.data;
            for r in 0..b.num_rows() {
                let mut line = b.column(0).as_string::<i32>().value(r).to_string();
                for c in 1..b.num_columns() {
                    let v = b.column(c).as_primitive::<Int32Type>();
                    line.push_str(&if v.is_null(r) {
                        " NULL".to_string()
                    } else {
                        format!(" {}", v.value(r))
                    });
                }
                lines.push(line);
            }
        }
        lines
    }

    fn list(rows: Vec<Option<Vec<Option<i32>>>>) -> ArrayRef {
        Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(rows))
    }

    #[test]
    fn rows_per_element_and_null_handling() {
        // a: [1, 2], b: NULL, c: [], d: [NULL]
        let l = || {
            list(vec![
                Some(vec![Some(1), Some(2)]),
                None,
                Some(vec![]),
                Some(vec![None]),
            ])
        };
        assert_eq!(run(UnnestNulls::Drop, vec![l()]), ["a 1", "a 2", "d NULL"]);
        assert_eq!(
            run(UnnestNulls::Preserve, vec![l()]),
            ["a 1", "a 2", "b NULL", "d NULL"]
        );
        assert_eq!(
            run(UnnestNulls::PreserveEmpty, vec![l()]),
            ["a 1", "a 2", "b NULL", "c NULL", "d NULL"]
        );
    }

    #[test]
    fn several_arrays_are_zipped_to_the_longest() {
        let l0 = list(vec![
            Some(vec![Some(1), Some(2), Some(3)]),
            None,
            Some(vec![]),
            None,
        ]);
        let l1 = list(vec![
            Some(vec![Some(10)]),
            Some(vec![Some(20), Some(21)]),
            None,
            None,
        ]);
        assert_eq!(
            run(UnnestNulls::Drop, vec![l0, l1]),
            ["a 1 10", "a 2 NULL", "a 3 NULL", "b NULL 20", "b NULL 21"]
        );
    }
}
