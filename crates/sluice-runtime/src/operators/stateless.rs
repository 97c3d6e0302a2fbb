//! Stateless operators: filter and projection.

use std::sync::Arc;

use datafusion_common::arrow::array::Array;
use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::Result;

use crate::expr::{evaluate_all, evaluate_predicate};
use crate::message::StreamBatch;
use crate::operator::{Collector, Operator};

/// `WHERE predicate`: keeps the rows where the predicate is true (NULL is false).
/// Output schema = input schema; per-row watermarks are kept with their rows.
pub struct FilterOperator {
    predicate: Arc<dyn PhysicalExpr>,
}

impl FilterOperator {
    /// A filter over a boolean physical expression.
    pub fn new(predicate: Arc<dyn PhysicalExpr>) -> Self {
        FilterOperator { predicate }
    }
}

impl Operator for FilterOperator {
    fn name(&self) -> &'static str {
        "Filter"
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let mask = evaluate_predicate(&self.predicate, &batch.data, "filter predicate")?;
        if mask.true_count() == batch.num_rows() {
            out.emit(batch);
            return Ok(());
        }
        out.emit(batch.filter(&mask)?);
        Ok(())
    }
}

/// `SELECT expr, ...`: one output column per expression.
pub struct ProjectOperator {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl ProjectOperator {
    /// A projection producing `schema` (one field per expression).
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Self {
        ProjectOperator { exprs, schema }
    }
}

/// Builds a batch of `schema` from `columns`, tolerating nullability differences
/// between the declared schema and what expressions produced.
pub(crate) fn batch_with_schema(
    schema: &SchemaRef,
    columns: Vec<Arc<dyn Array>>,
    num_rows: usize,
) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(num_rows));
    match RecordBatch::try_new_with_options(Arc::clone(schema), columns.clone(), &options) {
        Ok(b) => Ok(b),
        Err(_) => {
            // Declared non-nullable but an expression produced NULLs, or metadata
            // differences: relax the schema to what the columns are.
            let fields: Vec<_> = schema
                .fields()
                .iter()
                .zip(&columns)
                .map(|(f, c)| {
                    f.as_ref()
                        .clone()
                        .with_nullable(true)
                        .with_data_type(c.data_type().clone())
                })
                .collect();
            let relaxed = Arc::new(datafusion_common::arrow::datatypes::Schema::new(fields));
            Ok(RecordBatch::try_new_with_options(
                relaxed, columns, &options,
            )?)
        }
    }
}

impl Operator for ProjectOperator {
    fn name(&self) -> &'static str {
        "Project"
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let columns = evaluate_all(&self.exprs, &batch.data)?;
        let data = batch_with_schema(&self.schema, columns, batch.num_rows())?;
        out.emit(StreamBatch {
            data,
            row_watermarks: batch.row_watermarks,
            ops: batch.ops,
        });
        Ok(())
    }
}

/// Each row once per projection (Flink's `Expand`, for `GROUPING SETS`, `ROLLUP`, `CUBE`):
/// projection `k` gives every input row evaluated by its expressions, with the row's
/// watermark and change kind. Stateless.
pub struct ExpandOperator {
    projections: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    schema: SchemaRef,
}

impl ExpandOperator {
    /// Projections producing `schema` (one expression per field each).
    pub fn new(projections: Vec<Vec<Arc<dyn PhysicalExpr>>>, schema: SchemaRef) -> Self {
        ExpandOperator {
            projections,
            schema,
        }
    }
}

impl Operator for ExpandOperator {
    fn name(&self) -> &'static str {
        "Expand"
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        for exprs in &self.projections {
            let columns = evaluate_all(exprs, &batch.data)?;
            let data = batch_with_schema(&self.schema, columns, batch.num_rows())?;
            out.emit(StreamBatch {
                data,
                row_watermarks: batch.row_watermarks.clone(),
                ops: batch.ops.clone(),
            });
        }
        Ok(())
    }
}

/// `UNION ALL`: every row of every input, as it arrives, re-labelled with the output
/// schema (the first input's column names). Row kinds and per-row watermarks go with
/// their rows; the task's input gate combines the inputs' watermarks (the minimum).
pub struct UnionOperator {
    schema: SchemaRef,
}

impl UnionOperator {
    /// A union producing `schema` (the inputs have its column types, in order).
    pub fn new(schema: SchemaRef) -> Self {
        UnionOperator { schema }
    }
}

impl Operator for UnionOperator {
    fn name(&self) -> &'static str {
        "Union"
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let n = batch.num_rows();
        let data = batch_with_schema(&self.schema, batch.data.columns().to_vec(), n)?;
        out.emit(StreamBatch {
            data,
            row_watermarks: batch.row_watermarks,
            ops: batch.ops,
        });
        Ok(())
    }
}
