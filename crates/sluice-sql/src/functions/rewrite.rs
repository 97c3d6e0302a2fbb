//! Rewriting every expression of a planned query while the plan stays valid: output columns
//! keep their names (a changed unnamed expression, a `GROUP BY` key too, is aliased to its
//! old name, since nodes above refer to it by name; a grouping set is left as it is), and
//! each node's schema is recomputed. Used by the rewrites that give Flink's
//! types and values (`literals`, `cast`, `decimal`).

use datafusion_common::tree_node::Transformed;
use datafusion_common::{DFSchema, Result};
use datafusion_expr::{Expr, LogicalPlan, LogicalPlanBuilder};

/// `plan` with `f(expression, schema of the node's inputs)` applied to the expressions of
/// every node (subqueries included).
pub(crate) fn rewrite_plan(
    plan: LogicalPlan,
    f: &dyn Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let mut schema = DFSchema::empty();
        for input in node.inputs() {
            schema.merge(input.schema());
        }
        let named = matches!(
            node,
            LogicalPlan::Projection(_) | LogicalPlan::Aggregate(_) | LogicalPlan::Window(_)
        );
        let group_len = match &node {
            LogicalPlan::Aggregate(a) => a.group_expr.len(),
            _ => 0,
        };
        let mut position = 0;
        let changed = node.map_expressions(|e| {
            let i = position;
            position += 1;
            // A grouping set's members cannot be renamed one by one: left as they are.
            if i < group_len && matches!(e, Expr::GroupingSet(_)) {
                return Ok(Transformed::no(e));
            }
            let old_name = e.schema_name().to_string();
            let t = f(e, &schema)?;
            if named && t.transformed && !matches!(t.data, Expr::Alias(_)) {
                return Ok(Transformed::yes(t.data.alias(old_name)));
            }
            Ok(t)
        })?;
        match changed.data {
            // DataFusion's schema of VALUES is inferred once, when the node is built (so a
            // narrowed literal would keep its old type): build it again.
            LogicalPlan::Values(v) if changed.transformed => LogicalPlanBuilder::values(v.values)?
                .build()
                .map(Transformed::yes),
            plan if changed.transformed => plan.recompute_schema().map(Transformed::yes),
            plan => Ok(Transformed::new(plan, false, changed.tnr)),
        }
    })
    .map(|t| t.data)
}
