//! Lowering DataFusion logical expressions of the plan IR to physical expressions.

use std::sync::Arc;

use datafusion_common::arrow::array::ArrayRef;
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_common::DFSchema;
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::Expr;
use datafusion_physical_expr::{create_physical_expr, PhysicalExpr};
use sluice_common::Result;

mod fields;
pub use fields::{HoistedFields, RowField};

/// Lowers `expr`, typed against `schema`, to a physical expression over batches of
/// that schema. A `ROW` field of a NULL row is NULL ([`RowField`]); a `CASE` reading
/// `ROW` fields runs over a narrow batch of what it reads ([`HoistedFields`]).
pub fn physical(expr: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
    let lowered = create_physical_expr(
        expr,
        schema,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )?;
    let lowered = fields::row_fields(lowered, schema.as_arrow())?;
    Ok(fields::hoist_case_fields(lowered)?)
}

/// Lowers several expressions; see [`physical`].
pub fn physical_all(exprs: &[Expr], schema: &DFSchema) -> Result<Vec<Arc<dyn PhysicalExpr>>> {
    exprs.iter().map(|e| physical(e, schema)).collect()
}

/// Evaluates `expr` over `batch` into an array of `batch.num_rows()` rows.
pub fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    Ok(expr.evaluate(batch)?.into_array(batch.num_rows())?)
}

/// Evaluates a condition over `batch` as a selection mask: NULL counts as false (SQL's
/// `WHERE` and join conditions). `what` names the condition in the error.
///
/// # Errors
/// What evaluation fails with, or a result that is not BOOLEAN.
pub fn evaluate_predicate(
    expr: &Arc<dyn PhysicalExpr>,
    batch: &RecordBatch,
    what: &str,
) -> Result<datafusion_common::arrow::array::BooleanArray> {
    use datafusion_common::arrow::array::{Array, AsArray};
    let mask = evaluate(expr, batch)?;
    let Some(mask) = mask.as_boolean_opt() else {
        return Err(sluice_common::SluiceError::Execution(format!(
            "{what} is not boolean: {}",
            mask.data_type()
        )));
    };
    Ok(if mask.null_count() > 0 {
        datafusion_common::arrow::compute::prep_null_mask_filter(mask)
    } else {
        mask.clone()
    })
}

/// Evaluates each expression over `batch`; see [`evaluate`].
pub fn evaluate_all(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs.iter().map(|e| evaluate(e, batch)).collect()
}
