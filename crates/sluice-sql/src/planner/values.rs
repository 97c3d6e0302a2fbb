//! Bounded inputs written in the query: `VALUES (...), (...)` and a query without `FROM`
//! (`SELECT 1`, `INSERT INTO t SELECT ...` of constants). Both read a generated row number:
//! a `datagen` source of `n` rows whose one column `$row` (BIGINT) counts 0, 1, ..., n - 1,
//! so the input is checkpointed and replayed like any generated table; `VALUES` picks each
//! column's value by that number (`CASE $row WHEN 0 THEN ... END`, each value cast to the
//! column's type). Flink SQL "VALUES" / "SELECT without FROM" (bounded, insert-only).

use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
use datafusion_common::{Column, DFSchema, ScalarValue};
use datafusion_expr::logical_plan::Values;
use datafusion_expr::{Case, Expr, ExprSchemable};
use sluice_common::plan::{ConnectorOptions, OperatorSpec, PlanNode, SourceSpec};
use sluice_common::Result;

use super::{Planned, Planner};

/// The row-number column of a generated constant input.
const ROW: &str = "$row";

impl Planner {
    /// A bounded source of `rows` rows of one column, `$row` = 0, 1, ..., `rows` - 1.
    pub(super) fn row_numbers(&self, rows: usize) -> Result<Planned> {
        let schema = Arc::new(DFSchema::try_from(Schema::new(vec![Field::new(
            ROW,
            DataType::Int64,
            false,
        )]))?);
        let options: ConnectorOptions = [
            ("connector", "datagen".to_string()),
            ("number-of-rows", rows.to_string()),
            // Constants: no pacing.
            ("rows-per-second", i64::MAX.to_string()),
            ("fields.$row.kind", "sequence".to_string()),
            ("fields.$row.start", "0".to_string()),
            ("fields.$row.end", rows.saturating_sub(1).to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Source(SourceSpec {
                    table: "VALUES".to_string(),
                    options,
                    physical_schema: Arc::clone(&schema),
                    columns: vec![Expr::Column(Column::new_unqualified(ROW))],
                    watermark: None,
                    partition_keys: Vec::new(),
                    read_schema: None,
                }),
                inputs: vec![],
                schema,
                rowtime: None,
            },
            window: None,
        })
    }

    /// `VALUES (v00, v01, ...), (v10, ...)`: the rows, in order, with the columns and
    /// types DataFusion's planner gave them (`column1`, ...).
    pub(super) fn lower_values(&self, values: &Values) -> Result<Planned> {
        let source = self.row_numbers(values.values.len())?;
        let row = Expr::Column(Column::new_unqualified(ROW));
        let mut exprs = Vec::with_capacity(values.schema.fields().len());
        for (c, field) in values.schema.fields().iter().enumerate() {
            let mut arms = Vec::with_capacity(values.values.len());
            for (r, value) in values.values.iter().enumerate() {
                let value = value[c]
                    .clone()
                    .cast_to(field.data_type(), &source.node.schema)?;
                arms.push((
                    Box::new(Expr::Literal(ScalarValue::Int64(Some(r as i64)), None)),
                    Box::new(value),
                ));
            }
            let expr = match arms.len() {
                1 => *arms.remove(0).1,
                _ => Expr::Case(Case::new(Some(Box::new(row.clone())), arms, None)),
            };
            exprs.push(expr.alias(field.name()));
        }
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Project { exprs },
                schema: Arc::clone(&values.schema),
                rowtime: None,
                inputs: vec![source.node],
            },
            window: None,
        })
    }
}
