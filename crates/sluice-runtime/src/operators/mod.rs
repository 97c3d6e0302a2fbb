//! The operators: one module per kind.

pub mod deduplicate;
pub mod group_aggregate;
pub mod interval_join;
pub mod join;
pub mod lookup_join;
pub mod match_recognize;
pub mod normalize;
pub mod over_aggregate;
pub mod rank;
pub mod ranked_snapshot;
pub mod session_aggregate;
pub mod sort;
pub mod stateless;
pub mod temporal_join;
pub mod unnest;
pub mod window_aggregate;
pub mod window_assign;
pub mod window_join;

/// Builders shared by the operators' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;

    use datafusion_common::arrow::array::{Int32Array, Int8Array, RecordBatch};
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use datafusion_expr::AggregateUDF;
    use datafusion_physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
    use datafusion_physical_expr::expressions::col;

    use crate::message::{Message, RowKind, StreamBatch};
    use crate::operator::{Collector, Operator};

    /// The aggregate `udf(column)` over `input`, named `alias`.
    pub fn aggregate(
        udf: Arc<AggregateUDF>,
        column: &str,
        input: &SchemaRef,
        alias: &str,
    ) -> Arc<AggregateFunctionExpr> {
        Arc::new(
            AggregateExprBuilder::new(udf, vec![col(column, input).unwrap()])
                .schema(Arc::clone(input))
                .alias(alias)
                .build()
                .unwrap(),
        )
    }

    /// `COUNT(column)` over `input`, named `n`.
    pub fn count(column: &str, input: &SchemaRef) -> Arc<AggregateFunctionExpr> {
        aggregate(
            datafusion_functions_aggregate::count::count_udaf(),
            column,
            input,
            "n",
        )
    }

    /// Pushes one batch of `(k, v, kind)` rows of `schema` (two INT columns) into `op`;
    /// the changes it emits as `"+I k v ..."` strings, in order.
    pub fn push_pairs(
        op: &mut dyn Operator,
        schema: &SchemaRef,
        rows: &[(i32, i32, RowKind)],
    ) -> Vec<String> {
        let data = RecordBatch::try_new(
            Arc::clone(schema),
            vec![
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        let batch = StreamBatch {
            data,
            row_watermarks: None,
            ops: Some(Int8Array::from_iter_values(rows.iter().map(|r| r.2 as i8))),
        };
        let mut out = Collector::default();
        op.process_batch(batch, &mut out).unwrap();
        let mut changes = Vec::new();
        for m in out.take() {
            let Message::Data(b) = m else {
                continue;
            };
            for i in 0..b.num_rows() {
                let mut s = b.row_kind(i).short().to_string();
                for c in b.data.columns() {
                    let v = datafusion_common::ScalarValue::try_from_array(c, i).unwrap();
                    s.push_str(&format!(" {v}"));
                }
                changes.push(s);
            }
        }
        changes
    }

    /// The output `(k INT, n BIGINT)` of `SELECT k, COUNT(..) AS n ... GROUP BY k`.
    pub fn k_n_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("n", DataType::Int64, true),
        ]))
    }
}
