//! The operators: one module per kind.

pub mod group_aggregate;
pub mod interval_join;
pub mod join;
pub mod lookup_join;
pub mod match_recognize;
pub mod normalize;
pub mod over_aggregate;
pub mod rank;
pub mod session_aggregate;
pub mod sort;
pub mod stateless;
pub mod temporal_join;
pub mod window_aggregate;
pub mod window_assign;
pub mod window_join;

/// Builders shared by the operators' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;

    use datafusion_common::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use datafusion_expr::AggregateUDF;
    use datafusion_physical_expr::aggregate::{AggregateExprBuilder, AggregateFunctionExpr};
    use datafusion_physical_expr::expressions::col;

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

    /// The output `(k INT, n BIGINT)` of `SELECT k, COUNT(..) AS n ... GROUP BY k`.
    pub fn k_n_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("n", DataType::Int64, true),
        ]))
    }
}
