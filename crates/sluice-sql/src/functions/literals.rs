//! Literal types as Flink gives them: an integer literal that fits in INT is an `INT`
//! (Calcite); DataFusion's SQL planner makes every integer literal a `BIGINT`, so `i * 2`
//! over an INT column would be BIGINT where Flink has INT. Run on the plan from
//! DataFusion's SQL planner, before type coercion.

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::{Result, ScalarValue};
use datafusion_expr::{Expr, LogicalPlan};

/// Aggregate calls are left alone: `COUNT(*)` is DataFusion's `count(Int64(1))`.
fn narrow(e: Expr) -> Result<Transformed<Expr>> {
    e.transform_down(|e| match e {
        Expr::Literal(ScalarValue::Int64(Some(v)), meta) if i32::try_from(v).is_ok() => Ok(
            Transformed::yes(Expr::Literal(ScalarValue::Int32(Some(v as i32)), meta)),
        ),
        e @ Expr::AggregateFunction(_) => Ok(Transformed::new(e, false, TreeNodeRecursion::Jump)),
        other => Ok(Transformed::no(other)),
    })
}

/// One expression with its integer literals narrowed.
pub(crate) fn int_literals_in_expr(e: Expr) -> Result<Expr> {
    narrow(e).map(|t| t.data)
}

/// A plan with its integer literals narrowed. Output columns keep their names (a
/// changed unnamed expression is aliased to its old name, since nodes above refer to
/// it by name); `GROUP BY` expressions are left as they are for the same reason.
pub(crate) fn int_literals(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let named = matches!(node, LogicalPlan::Projection(_) | LogicalPlan::Aggregate(_));
        let group_len = match &node {
            LogicalPlan::Aggregate(a) => a.group_expr.len(),
            _ => 0,
        };
        let mut position = 0;
        let changed = node.map_expressions(|e| {
            let i = position;
            position += 1;
            if i < group_len {
                return Ok(Transformed::no(e));
            }
            let old_name = e.schema_name().to_string();
            let t = narrow(e)?;
            if named && t.transformed && !matches!(t.data, Expr::Alias(_)) {
                return Ok(Transformed::yes(t.data.alias(old_name)));
            }
            Ok(t)
        })?;
        if changed.transformed {
            changed.data.recompute_schema().map(Transformed::yes)
        } else {
            Ok(changed)
        }
    })
    .map(|t| t.data)
}
