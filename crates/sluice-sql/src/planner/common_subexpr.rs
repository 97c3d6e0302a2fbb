//! Common subexpressions computed once per row: a projection that repeats a function
//! call, or repeats one its filter computes, reads it from a column a projection below
//! computes (Flink's code generation reuses such expressions; DataFusion's
//! `CommonSubexprEliminate` does it within one node, not from a filter to the projection
//! above it).
//!
//! For a projection `P` over a filter `F` over `I`:
//! - a call `F`'s predicate evaluates on every row (see [`unconditional`]) that `P` or the
//!   predicate uses again is computed by a projection between `I` and `F`: on the same
//!   rows the predicate evaluated it on, so no row evaluates it that did not before;
//! - a call `P` evaluates on every row and uses again is computed by a projection right
//!   below `P` (above `F`), on the rows `P` sees.
//!
//! A projection without a filter below gets the second rewrite alone. Only deterministic
//! calls that read a column are shared (not `get_field`, a field access, which column
//! pruning reads as such, nor Sluice's internal `$` functions). The projection keeps its
//! output schema (names and qualifiers); the new columns are `__common_expr_<n>`.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::Result;
use datafusion_expr::logical_plan::{Filter, LogicalPlan, Projection};
use datafusion_expr::{Expr, Operator};

/// Rewrites every projection of `plan` as the module docs say.
pub(super) fn eliminate(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut next = 0usize;
    plan.transform_up(|plan| match plan {
        LogicalPlan::Projection(p) => rewrite_projection(p, &mut next),
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

/// Whether `e` is a call worth computing once: deterministic, reading a column, not a
/// field access nor an internal function.
fn shareable(e: &Expr) -> bool {
    let Expr::ScalarFunction(f) = e else {
        return false;
    };
    let name = f.func.name();
    name != "get_field"
        && !name.starts_with('$')
        && !e.is_volatile()
        && e.exists(|x| Ok(matches!(x, Expr::Column(_))))
            .unwrap_or(false)
        && !e
            .exists(|x| {
                Ok(matches!(
                    x,
                    Expr::ScalarSubquery(_)
                        | Expr::Exists(_)
                        | Expr::InSubquery(_)
                        | Expr::OuterReferenceColumn(..)
                        | Expr::Placeholder(_)
                        | Expr::AggregateFunction(_)
                        | Expr::WindowFunction(_)
                ))
            })
            .unwrap_or(true)
}

/// Pushes onto `out` the shareable calls in `e` that are evaluated on every row `e` is
/// evaluated on, outermost first: not inside a `CASE` after its first condition, on the
/// right of `AND` / `OR`, or among a short-circuiting function's later arguments (all of
/// which DataFusion may skip for some rows).
fn unconditional(e: &Expr, out: &mut Vec<Expr>) {
    if shareable(e) {
        out.push(e.clone());
    }
    match e {
        Expr::Alias(a) => unconditional(&a.expr, out),
        Expr::BinaryExpr(b) if matches!(b.op, Operator::And | Operator::Or) => {
            unconditional(&b.left, out)
        }
        Expr::BinaryExpr(b) => {
            unconditional(&b.left, out);
            unconditional(&b.right, out);
        }
        Expr::Case(c) => match (&c.expr, c.when_then_expr.first()) {
            (Some(operand), _) => unconditional(operand, out),
            (None, Some((when, _))) => unconditional(when, out),
            (None, None) => {}
        },
        Expr::ScalarFunction(f) if f.func.short_circuits() => {
            if let Some(first) = f.args.first() {
                unconditional(first, out);
            }
        }
        Expr::ScalarFunction(f) => f.args.iter().for_each(|a| unconditional(a, out)),
        Expr::Not(x)
        | Expr::IsNull(x)
        | Expr::IsNotNull(x)
        | Expr::IsTrue(x)
        | Expr::IsFalse(x)
        | Expr::IsNotTrue(x)
        | Expr::IsNotFalse(x)
        | Expr::IsUnknown(x)
        | Expr::IsNotUnknown(x)
        | Expr::Negative(x) => unconditional(x, out),
        Expr::Cast(c) => unconditional(&c.expr, out),
        Expr::TryCast(c) => unconditional(&c.expr, out),
        Expr::InList(l) => unconditional(&l.expr, out),
        Expr::Like(l) | Expr::SimilarTo(l) => {
            unconditional(&l.expr, out);
            unconditional(&l.pattern, out);
        }
        Expr::Between(b) => {
            unconditional(&b.expr, out);
            unconditional(&b.low, out);
            unconditional(&b.high, out);
        }
        _ => {}
    }
}

/// How many times each shareable call occurs anywhere in `exprs` (a call inside another
/// counted too).
fn occurrences<'a>(exprs: impl IntoIterator<Item = &'a Expr>) -> HashMap<Expr, usize> {
    let mut counts = HashMap::new();
    for e in exprs {
        let _ = e.apply(|x| {
            if shareable(x) {
                *counts.entry(x.clone()).or_insert(0) += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    counts
}

/// The calls of `candidates` (outermost first) used at least twice by `counts`, leaving
/// out those inside one already chosen (in `chosen` too).
fn choose(candidates: Vec<Expr>, counts: &HashMap<Expr, usize>, chosen: &[Expr]) -> Vec<Expr> {
    let mut picked: Vec<Expr> = Vec::new();
    for c in candidates {
        let inside = chosen
            .iter()
            .chain(&picked)
            .any(|p| p == &c || p.exists(|x| Ok(x == &c)).unwrap_or(false));
        if !inside && counts.get(&c).copied().unwrap_or(0) >= 2 {
            picked.push(c);
        }
    }
    picked
}

/// `e` with every occurrence of a call of `shared` replaced by its column.
fn replace(e: Expr, shared: &[(Expr, String)]) -> Result<Expr> {
    e.transform_down(|x| match shared.iter().find(|(s, _)| s == &x) {
        Some((_, name)) => Ok(Transformed::new(
            Expr::Column(name.as_str().into()),
            true,
            TreeNodeRecursion::Jump,
        )),
        None => Ok(Transformed::no(x)),
    })
    .map(|t| t.data)
}

/// A projection of `input`'s columns and of each call of `shared` as its column.
fn with_columns(input: Arc<LogicalPlan>, shared: &[(Expr, String)]) -> Result<LogicalPlan> {
    let mut exprs: Vec<Expr> = input
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    exprs.extend(shared.iter().map(|(s, name)| s.clone().alias(name)));
    Projection::try_new(exprs, input).map(LogicalPlan::Projection)
}

/// Names the calls of `calls` `__common_expr_<n>`, counting on from `next`.
fn named(calls: Vec<Expr>, next: &mut usize) -> Vec<(Expr, String)> {
    calls
        .into_iter()
        .map(|c| {
            *next += 1;
            (c, format!("__common_expr_{next}"))
        })
        .collect()
}

fn rewrite_projection(p: Projection, next: &mut usize) -> Result<Transformed<LogicalPlan>> {
    let filter = match p.input.as_ref() {
        LogicalPlan::Filter(f) => Some(f),
        _ => None,
    };
    // Below the filter: calls its predicate evaluates on every row, used again.
    let below = match filter {
        Some(f) => {
            let mut candidates = Vec::new();
            unconditional(&f.predicate, &mut candidates);
            let counts = occurrences(p.expr.iter().chain([&f.predicate]));
            choose(candidates, &counts, &[])
        }
        None => Vec::new(),
    };
    // Above it: calls the projection evaluates on every row, used again.
    let mut candidates = Vec::new();
    p.expr
        .iter()
        .for_each(|e| unconditional(e, &mut candidates));
    let above = choose(candidates, &occurrences(&p.expr), &below);
    if below.is_empty() && above.is_empty() {
        return Ok(Transformed::no(LogicalPlan::Projection(p)));
    }
    let below = named(below, next);
    let above = named(above, next);
    let mut input = Arc::clone(&p.input);
    if let (Some(f), false) = (filter, below.is_empty()) {
        let computed = with_columns(Arc::clone(&f.input), &below)?;
        let predicate = replace(f.predicate.clone(), &below)?;
        input = Arc::new(LogicalPlan::Filter(Filter::try_new(
            predicate,
            Arc::new(computed),
        )?));
    }
    if !above.is_empty() {
        input = Arc::new(with_columns(input, &above)?);
    }
    let shared: Vec<(Expr, String)> = below.into_iter().chain(above).collect();
    let exprs = p
        .expr
        .into_iter()
        .zip(p.schema.fields())
        .map(|(e, field)| {
            let changed = replace(e.clone(), &shared)?;
            Ok(match changed == e {
                true => e,
                false => match changed {
                    Expr::Alias(_) => changed,
                    other => other.alias(field.name()),
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Projection::try_new_with_schema(exprs, input, p.schema)
        .map(|p| Transformed::yes(LogicalPlan::Projection(p)))
}

#[cfg(test)]
mod tests {
    use crate::parser::{parse_script, Statement};
    use crate::planner::Planner;

    /// The logical plan of `select` over `t (a INT, b STRING, u STRING)`, as text.
    fn plan(select: &str) -> String {
        let mut planner = Planner::new();
        let sql = format!(
            "CREATE TABLE t (a INT, b STRING, u STRING) WITH ('connector' = 'filesystem', \
             'path' = 'x', 'format' = 'csv');\n{select}"
        );
        let statements = parse_script(&sql).unwrap();
        let Statement::CreateTable(ct) = &statements[0].statement else {
            panic!()
        };
        planner.create_table(ct).unwrap();
        let Statement::Query(q) = &statements[1].statement else {
            panic!()
        };
        planner
            .logical_plan(q)
            .unwrap()
            .display_indent()
            .to_string()
    }

    fn calls(plan: &str, name: &str) -> usize {
        plan.matches(&format!("{name}(")).count()
    }

    /// Nexmark q21's shape: the filter's unconditional REGEXP_EXTRACT is computed once,
    /// below the filter, for the filter and the CASE's ELSE above it; LOWER, repeated by
    /// the projection (its first condition evaluates it on every row), once above the
    /// filter, which keeps its own (on the right of OR, not evaluated on every row).
    #[test]
    fn a_call_the_filter_and_the_projection_share_is_computed_once() {
        let p = plan(
            "SELECT CASE WHEN lower(b) = 'x' THEN '0' WHEN lower(b) = 'y' THEN '1' \
             ELSE regexp_extract(u, 'id=([^&]*)', 1) END AS c FROM t \
             WHERE regexp_extract(u, 'id=([^&]*)', 1) IS NOT NULL OR lower(b) IN ('x', 'y')",
        );
        assert_eq!(calls(&p, "regexp_extract"), 1, "{p}");
        assert_eq!(calls(&p, "lower"), 2, "{p}");
        assert!(p.contains("AS c"), "{p}");
    }

    /// Calls evaluated only for some rows are not computed for all: one on the right of
    /// OR in the filter, and one only in CASE branches, stay where they are.
    #[test]
    fn a_call_not_evaluated_on_every_row_is_left_alone() {
        let p = plan("SELECT upper(b) AS x FROM t WHERE a > 1 OR upper(b) = 'X'");
        assert!(!p.contains("__common_expr"), "{p}");
        let p =
            plan("SELECT CASE WHEN a > 0 THEN upper(b) ELSE concat(upper(b), 'z') END AS x FROM t");
        assert!(!p.contains("__common_expr"), "{p}");
        // A call used once is not worth a column.
        let p = plan("SELECT upper(b) AS x FROM t WHERE lower(b) = 'x'");
        assert!(!p.contains("__common_expr"), "{p}");
    }

    /// A repeated call in a projection without a filter is computed once; a field
    /// access and a volatile call are not shared.
    #[test]
    fn repeated_calls_in_a_projection_are_shared_unless_volatile() {
        let p = plan("SELECT upper(b) AS x, concat(upper(b), '!') AS y FROM t");
        assert_eq!(calls(&p, "upper"), 1, "{p}");
        let p = plan("SELECT rand() + a AS x, rand() + a AS y FROM t");
        assert!(!p.contains("__common_expr"), "{p}");
    }
}
