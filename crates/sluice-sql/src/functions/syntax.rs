//! Rewrites of Flink's function syntax that DataFusion's SQL planner cannot plan, done on
//! the parsed statement before planning: `FLOOR(t TO unit)` / `CEIL(t TO unit)` become
//! `$floor_to(t, 'UNIT')` / `$ceil_to(t, 'UNIT')`, and the time-unit keyword that
//! `TIMESTAMPADD` / `TIMESTAMPDIFF` take first becomes a string literal. Names starting
//! with `$` cannot be written in SQL, so these stay internal.

use std::ops::ControlFlow;

use datafusion_sql::sqlparser::ast::{
    self, CeilFloorKind, DateTimeField, FunctionArg, FunctionArgExpr, FunctionArguments, Ident,
    ObjectName, Value, VisitMut, VisitorMut,
};

struct FlinkSyntax;

fn string(s: &str) -> ast::Expr {
    ast::Expr::Value(Value::SingleQuotedString(s.to_string()).into())
}

fn internal_call(name: &str, args: Vec<ast::Expr>) -> ast::Expr {
    ast::Expr::Function(ast::Function {
        name: ObjectName::from(vec![Ident::with_quote('"', name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn unit_name(field: &DateTimeField) -> String {
    field.to_string().to_ascii_uppercase()
}

impl VisitorMut for FlinkSyntax {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
        match expr {
            ast::Expr::Floor {
                expr: inner,
                field: CeilFloorKind::DateTimeField(f),
            }
            | ast::Expr::Ceil {
                expr: inner,
                field: CeilFloorKind::DateTimeField(f),
            } if *f != DateTimeField::NoDateTime => {
                let args = vec![(**inner).clone(), string(&unit_name(f))];
                let name = if matches!(expr, ast::Expr::Floor { .. }) {
                    "$floor_to"
                } else {
                    "$ceil_to"
                };
                *expr = internal_call(name, args);
            }
            ast::Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_lowercase();
                if name == "timestampadd" || name == "timestampdiff" {
                    if let FunctionArguments::List(list) = &mut f.args {
                        if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(
                            ast::Expr::Identifier(unit),
                        ))) = list.args.first_mut()
                        {
                            let unit = unit.value.to_ascii_uppercase();
                            list.args[0] =
                                FunctionArg::Unnamed(FunctionArgExpr::Expr(string(&unit)));
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// Rewrites Flink's function syntax in a query.
pub(crate) fn rewrite_query(query: &mut ast::Query) {
    let _ = query.visit(&mut FlinkSyntax);
}

/// Rewrites Flink's function syntax in one expression.
pub(crate) fn rewrite_expr(expr: &mut ast::Expr) {
    let _ = expr.visit(&mut FlinkSyntax);
}
