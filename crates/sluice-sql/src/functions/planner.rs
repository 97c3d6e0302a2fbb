//! SQL syntax with its own grammar that names a function: `SUBSTRING(s FROM p FOR l)`,
//! `POSITION(a IN b)`, `OVERLAY(s PLACING r FROM p FOR l)`, `EXTRACT(unit FROM t)`. DataFusion's planners would
//! plan them onto DataFusion's functions; this one, asked first, plans them onto Flink's.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::Result;
use datafusion_expr::expr::{ScalarFunction, WindowFunction, WindowFunctionParams};
use datafusion_expr::planner::{ExprPlanner, PlannerResult, RawWindowExpr};
use datafusion_expr::{Expr, ScalarUDF};

/// Plans Flink's special-syntax functions onto the registry's functions.
#[derive(Debug)]
pub(crate) struct FlinkSyntax {
    substring: Arc<ScalarUDF>,
    position: Arc<ScalarUDF>,
    overlay: Arc<ScalarUDF>,
    extract: Arc<ScalarUDF>,
}

impl FlinkSyntax {
    pub(crate) fn new(scalars: &HashMap<String, Arc<ScalarUDF>>) -> Self {
        let get = |n: &str| Arc::clone(&scalars[n]);
        FlinkSyntax {
            substring: get("substring"),
            position: get("position"),
            overlay: get("overlay"),
            extract: get("$extract"),
        }
    }
}

fn call(f: &Arc<ScalarUDF>, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
    Ok(PlannerResult::Planned(Expr::ScalarFunction(
        ScalarFunction::new_udf(Arc::clone(f), args),
    )))
}

impl ExprPlanner for FlinkSyntax {
    /// `COUNT(*) OVER (...)` counts rows: `COUNT(1)`, keeping the name `count(*)` (as
    /// DataFusion's aggregate planner does for `COUNT(*)` without OVER).
    fn plan_window(&self, raw: RawWindowExpr) -> Result<PlannerResult<RawWindowExpr>> {
        #[allow(deprecated)]
        let star = raw.func_def.name() == "count"
            && (raw.args.is_empty() || matches!(raw.args.as_slice(), [Expr::Wildcard { .. }]));
        if !star {
            return Ok(PlannerResult::Original(raw));
        }
        let window = |args: Vec<Expr>| {
            Expr::from(WindowFunction {
                fun: raw.func_def.clone(),
                params: WindowFunctionParams {
                    args,
                    partition_by: raw.partition_by.clone(),
                    order_by: raw.order_by.clone(),
                    window_frame: raw.window_frame.clone(),
                    filter: raw.filter.clone(),
                    null_treatment: raw.null_treatment,
                    distinct: raw.distinct,
                },
            })
        };
        let name = window(raw.args.clone()).schema_name().to_string();
        // An INT literal: the literal typing pass (`literals.rs`) would rename a BIGINT one.
        let counted = window(vec![Expr::Literal(
            datafusion_common::ScalarValue::Int32(Some(1)),
            None,
        )]);
        Ok(PlannerResult::Planned(counted.alias(name)))
    }

    fn plan_substring(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        call(&self.substring, args)
    }

    /// `POSITION(needle IN hay)` arrives as `[hay, needle]`.
    fn plan_position(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        let mut args = args;
        args.reverse();
        call(&self.position, args)
    }

    /// `EXTRACT(unit FROM t)` arrives as `['UNIT', t]`.
    fn plan_extract(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        call(&self.extract, args)
    }

    fn plan_overlay(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        call(&self.overlay, args)
    }
}
