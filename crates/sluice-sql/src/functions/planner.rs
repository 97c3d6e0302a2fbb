//! SQL syntax with its own grammar that names a function: `SUBSTRING(s FROM p FOR l)`,
//! `POSITION(a IN b)`, `OVERLAY(s PLACING r FROM p FOR l)`, `EXTRACT(unit FROM t)`,
//! `ARRAY[a, b]`, `array[i]` / `map[key]`. DataFusion's planners would plan them onto
//! DataFusion's functions; this one, asked first, plans them onto Flink's. (`row.field`
//! is DataFusion's `get_field`, which has Flink's meaning.)

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::DFSchema;
use datafusion_common::Result;
use datafusion_expr::expr::{ScalarFunction, WindowFunction, WindowFunctionParams};
use datafusion_expr::planner::{ExprPlanner, PlannerResult, RawFieldAccessExpr, RawWindowExpr};
use datafusion_expr::{Expr, ExprSchemable, GetFieldAccess, ScalarUDF};

/// Plans Flink's special-syntax functions onto the registry's functions.
#[derive(Debug)]
pub(crate) struct FlinkSyntax {
    substring: Arc<ScalarUDF>,
    position: Arc<ScalarUDF>,
    overlay: Arc<ScalarUDF>,
    extract: Arc<ScalarUDF>,
    array: Arc<ScalarUDF>,
    at: Arc<ScalarUDF>,
}

impl FlinkSyntax {
    pub(crate) fn new(scalars: &HashMap<String, Arc<ScalarUDF>>) -> Self {
        let get = |n: &str| Arc::clone(&scalars[n]);
        FlinkSyntax {
            substring: get("substring"),
            position: get("position"),
            overlay: get("overlay"),
            extract: get("$extract"),
            array: get("$array"),
            at: get("$at"),
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

    /// `ARRAY[a, b, ...]`: Flink's array constructor (elements of a common type).
    fn plan_array_literal(
        &self,
        exprs: Vec<Expr>,
        _schema: &DFSchema,
    ) -> Result<PlannerResult<Vec<Expr>>> {
        if exprs.is_empty() {
            return datafusion_common::plan_err!(
                "ARRAY[] needs at least one element (Flink cannot type an empty array literal)"
            );
        }
        call(&self.array, exprs)
    }

    /// `array[i]` (from 1) and `map[key]`; `row['field']` is DataFusion's `get_field`.
    fn plan_field_access(
        &self,
        raw: RawFieldAccessExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawFieldAccessExpr>> {
        let key = match &raw.field_access {
            GetFieldAccess::ListIndex { key } => Expr::clone(key),
            GetFieldAccess::NamedStructField { name } => match raw.expr.get_type(schema)? {
                datafusion_common::arrow::datatypes::DataType::Struct(_) => {
                    return Ok(PlannerResult::Planned(
                        datafusion_functions::core::get_field()
                            .call(vec![raw.expr, Expr::Literal(name.clone(), None)]),
                    ))
                }
                _ => Expr::Literal(name.clone(), None),
            },
            GetFieldAccess::ListRange { .. } => {
                return datafusion_common::plan_err!(
                    "array slices a[i:j] are not Flink SQL; use ARRAY_SLICE(a, i, j)"
                )
            }
        };
        Ok(PlannerResult::Planned(Expr::ScalarFunction(
            ScalarFunction::new_udf(Arc::clone(&self.at), vec![raw.expr, key]),
        )))
    }

    fn plan_overlay(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        call(&self.overlay, args)
    }
}
