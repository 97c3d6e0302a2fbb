//! Literal types as Flink gives them: an integer literal that fits in INT is an `INT`
//! (Calcite); DataFusion's SQL planner makes every integer literal a `BIGINT`, so `i * 2`
//! over an INT column would be BIGINT where Flink has INT; a decimal literal below 1 counts
//! its leading zero in the precision. Run on the plan from
//! DataFusion's SQL planner, before type coercion.

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::{Result, ScalarValue};
use datafusion_expr::{Expr, LogicalPlan};

/// Inside aggregate calls the arguments (`MAX(i * 2)` is INT, as `i * 2` is; `SUM(1)` is
/// INT), the FILTER and the WITHIN GROUP order are narrowed, except `COUNT`'s literal
/// arguments (`COUNT(*)` is DataFusion's `count(Int64(1))`; the count is BIGINT anyway).
fn narrow(e: Expr) -> Result<Transformed<Expr>> {
    e.transform_down(|e| match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), meta) if i32::try_from(v).is_ok() => Ok(
            Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(v as i32)), meta)),
        ),
        // `0.1` is DECIMAL(2, 1) in Calcite (the zero before the point counts), DECIMAL(1, 1)
        // in DataFusion.
        Expr::Literal(ScalarValue::Decimal128(v, p, s), meta) if p as i16 == s as i16 && p < 38 => {
            Ok(Transformed::yes(Expr::Literal(
                ScalarValue::Decimal128(v, p + 1, s),
                meta,
            )))
        }
        Expr::AggregateFunction(mut call) => {
            let mut changed = false;
            let mut narrowed = |e: Expr| -> Result<Expr> {
                let t = narrow(e)?;
                changed |= t.transformed;
                Ok(t.data)
            };
            let count = call.func.name() == "count";
            let params = &mut call.params;
            for arg in params.args.iter_mut() {
                if !(count && matches!(arg, Expr::Literal(..))) {
                    *arg = narrowed(std::mem::replace(
                        arg,
                        Expr::Literal(ScalarValue::Null, None),
                    ))?;
                }
            }
            if let Some(filter) = params.filter.take() {
                params.filter = Some(Box::new(narrowed(*filter)?));
            }
            for sort in params.order_by.iter_mut() {
                let e = std::mem::replace(&mut sort.expr, Expr::Literal(ScalarValue::Null, None));
                sort.expr = narrowed(e)?;
            }
            Ok(Transformed::new(
                Expr::AggregateFunction(call),
                changed,
                TreeNodeRecursion::Jump,
            ))
        }
        other => Ok(Transformed::no(other)),
    })
}

/// One expression with its integer literals narrowed.
pub(crate) fn int_literals_in_expr(e: Expr) -> Result<Expr> {
    narrow(e).map(|t| t.data)
}

/// A plan with its integer literals narrowed (output names kept: [`super::rewrite`]).
/// A `VALUES` node is built again with its narrowed types, and then every node above it
/// gets its schema again (a column of `VALUES (1)` is INT, not BIGINT). Run first, on the
/// plan straight from the SQL planner, whose column names do not depend on literal types.
pub(crate) fn int_literals(plan: LogicalPlan) -> Result<LogicalPlan> {
    let plan = super::rewrite::rewrite_plan(plan, &|e, _| narrow(e))?;
    let mut has_values = false;
    plan.apply_with_subqueries(|p| {
        has_values |= matches!(p, LogicalPlan::Values(_));
        Ok(TreeNodeRecursion::Continue)
    })?;
    if !has_values {
        return Ok(plan);
    }
    plan.transform_up_with_subqueries(|p| p.recompute_schema().map(Transformed::yes))
        .map(|t| t.data)
}
