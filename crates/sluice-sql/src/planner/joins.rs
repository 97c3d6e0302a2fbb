//! Joins and the subqueries that become joins.
//!
//! DataFusion's optimizer rules do the rewriting (Flink's planner does the same with
//! Calcite's): `IN` / `EXISTS` subqueries become semi and anti joins
//! (`DecorrelatePredicateSubquery`; `NOT IN` a null-aware anti join), scalar subqueries
//! left joins with their (grouped) aggregate (`ScalarSubqueryToJoin`), comma joins with
//! `WHERE` equalities inner joins (`EliminateCrossJoin`), and each join's condition is
//! split into key pairs and a residual (`ExtractEquijoinPredicate`); conditions on one
//! input move below the join (`PushDownFilter`), so join state holds fewer rows. [`join_spec`] turns
//! the result into the plan IR's [`JoinSpec`].

use std::sync::Arc;

use datafusion_common::{JoinType, NullEquality};
use datafusion_expr::logical_plan::{Join, LogicalPlan};
use datafusion_expr::utils::{conjunction, split_conjunction};
use datafusion_expr::{Expr, ExprSchemable};
use datafusion_optimizer::decorrelate_predicate_subquery::DecorrelatePredicateSubquery;
use datafusion_optimizer::eliminate_cross_join::EliminateCrossJoin;
use datafusion_optimizer::extract_equijoin_predicate::ExtractEquijoinPredicate;
use datafusion_optimizer::optimizer::{Optimizer, OptimizerContext, OptimizerRule};
use datafusion_optimizer::push_down_filter::PushDownFilter;
use datafusion_optimizer::scalar_subquery_to_join::ScalarSubqueryToJoin;
use sluice_common::plan::{IntervalBounds, JoinKind, JoinSpec, WindowJoinColumns, WindowSpec};
use sluice_common::types::flink_type_name;
use sluice_common::{not_supported, plan_err, Result};

/// Rewrites subqueries into joins and splits join conditions (see the module docs). A
/// plan without joins or subqueries is returned as it is.
///
/// # Errors
/// What a rule fails with.
/// `push_down_filters`: conditions on one input move below the join (not while a query
/// has a temporal join, whose conditions hold for one version).
pub(super) fn rewrite_subqueries_and_joins(
    plan: LogicalPlan,
    push_down_filters: bool,
) -> datafusion_common::Result<LogicalPlan> {
    if !has_join_or_subquery(&plan) {
        return Ok(plan);
    }
    let mut rules: Vec<Arc<dyn OptimizerRule + Send + Sync>> = vec![
        Arc::new(DecorrelatePredicateSubquery::new()),
        Arc::new(ScalarSubqueryToJoin::new()),
        Arc::new(EliminateCrossJoin::new()),
    ];
    if push_down_filters {
        // Conditions on one input are applied before the join, so its state holds only
        // rows that can be in the result.
        rules.push(Arc::new(PushDownFilter::new()));
    }
    // Last: the rules above may move equalities back into a join's filter (and a pass
    // that ends with the plan it started with is the optimizer's last).
    rules.push(Arc::new(ExtractEquijoinPredicate::new()));
    // Uncorrelated scalar subqueries become joins too (DataFusion can leave them to its
    // physical planner, which a stream does not have).
    let mut options = datafusion_common::config::ConfigOptions::default();
    options
        .optimizer
        .enable_physical_uncorrelated_scalar_subquery = false;
    let context = OptimizerContext::new_with_config_options(Arc::new(options));
    Optimizer::with_rules(rules).optimize(plan, &context, |_, _| {})
}

fn has_join_or_subquery(plan: &LogicalPlan) -> bool {
    use datafusion_common::tree_node::TreeNode;
    let here = matches!(plan, LogicalPlan::Join(_) | LogicalPlan::Subquery(_))
        || plan.expressions().iter().any(|e| {
            e.exists(|e| {
                Ok(matches!(
                    e,
                    Expr::InSubquery(_) | Expr::Exists(_) | Expr::ScalarSubquery(_)
                ))
            })
            .unwrap_or(false)
        });
    here || plan.inputs().into_iter().any(has_join_or_subquery)
}

/// The plan IR's join of a DataFusion `Join` whose condition has been split into key pairs
/// (`on`) and a residual `filter`. Keys of different types are cast to their common type,
/// so equal values route to the same subtask. A null-aware anti join (`NOT IN`) keeps its
/// first pair (the `IN` comparison) as its key and checks the others (correlation
/// equalities) with the residual.
///
/// # Errors
/// Join kinds Sluice does not run (an `EXISTS` / `IN` subquery inside `OR`, which
/// DataFusion plans as a mark join), keys without a common type, a `NOT IN` without a
/// comparison key. `time_attributes`: the event-time attributes of the left and right
/// inputs (both append-only), when both have one: a condition bounding one by the other
/// makes an interval join. `mark_allowed`: a mark join's mark is read only positively (see
/// [`marks_read_positively`]).
pub(super) fn join_spec(
    j: &Join,
    time_attributes: Option<(usize, usize)>,
    mark_allowed: bool,
) -> Result<JoinSpec> {
    let kind = match j.join_type {
        JoinType::Inner => JoinKind::Inner,
        JoinType::Left => JoinKind::Left,
        JoinType::Right => JoinKind::Right,
        JoinType::Full => JoinKind::Full,
        JoinType::LeftSemi => JoinKind::LeftSemi,
        JoinType::LeftAnti => JoinKind::LeftAnti,
        JoinType::LeftMark if mark_allowed => JoinKind::LeftMark,
        JoinType::LeftMark | JoinType::RightMark => {
            return not_supported!(
                "an IN / EXISTS subquery under NOT inside OR, or inside another expression \
                 than AND / OR; use it as a whole WHERE condition (ANDed with the others), or \
                 write the OR as a UNION"
            )
        }
        other => return not_supported!("the join type {other}"),
    };
    let (left_schema, right_schema) = (j.left.schema(), j.right.schema());
    let mut on = j.on.clone();
    let mut residual: Vec<Expr> = j
        .filter
        .as_ref()
        .map(|f| split_conjunction(f).into_iter().cloned().collect())
        .unwrap_or_default();
    // DataFusion writes an unconditional join's filter as `true`.
    residual.retain(|e| {
        !matches!(
            e,
            Expr::Literal(datafusion_common::ScalarValue::Boolean(Some(true)), _)
        )
    });
    if j.null_aware {
        if on.is_empty() {
            return not_supported!(
                "this NOT IN subquery: its value must be compared by plain equality"
            );
        }
        // Correlation equalities are ordinary conditions of the candidates.
        for (l, r) in on.drain(1..) {
            residual.push(l.eq(r));
        }
    }
    let mut left_keys = Vec::new();
    let mut right_keys = Vec::new();
    for (l, r) in on {
        // DataFusion's type coercion may already have cast a string key to a number.
        for (e, schema) in [(&l, left_schema), (&r, right_schema)] {
            if let Some((from, to)) = cast_types(e, schema)? {
                if is_text(&from) != is_text(&to) {
                    return plan_err!(
                        "join keys of types {} and {} cannot be compared (in {}); CAST one \
                         of them",
                        flink_type_name(&from),
                        flink_type_name(&to),
                        uncast(&l).clone().eq(uncast(&r).clone())
                    );
                }
            }
        }
        let lt = l.get_type(left_schema)?;
        let rt = r.get_type(right_schema)?;
        if lt == rt {
            left_keys.push(l);
            right_keys.push(r);
            continue;
        }
        // Flink compares a string with a string only (no implicit cast to a number).
        let common = datafusion_expr::type_coercion::binary::comparison_coercion(&lt, &rt)
            .filter(|_| is_text(&lt) == is_text(&rt));
        let Some(common) = common else {
            return plan_err!(
                "join keys {l} ({}) and {r} ({}) cannot be compared; CAST one of them",
                flink_type_name(&lt),
                flink_type_name(&rt)
            );
        };
        left_keys.push(l.cast_to(&common, left_schema)?);
        right_keys.push(r.cast_to(&common, right_schema)?);
    }
    let pair_schema = Arc::new(left_schema.join(right_schema)?);
    let interval = match time_attributes {
        Some((left_time, right_time)) => {
            let left_width = left_schema.fields().len();
            let (bounds, rest) =
                interval_bounds(residual, &pair_schema, left_time, left_width + right_time)?;
            residual = rest;
            bounds.map(|(lower_ms, upper_ms)| IntervalBounds {
                left_time,
                right_time,
                lower_ms,
                upper_ms,
            })
        }
        None => None,
    };
    if interval.is_some()
        && !matches!(
            kind,
            JoinKind::Inner | JoinKind::Left | JoinKind::Right | JoinKind::Full
        )
    {
        return not_supported!("an interval join as a {} join", kind.sql());
    }
    Ok(JoinSpec {
        kind,
        left_keys,
        right_keys,
        null_equal: j.null_equality == NullEquality::NullEqualsNull,
        null_aware: j.null_aware,
        residual: conjunction(residual),
        pair_schema,
        interval,
        window: None,
        temporal: None,
    })
}

/// Splits off the conjuncts of `residual` that bound `tr - tl` (the pair schema's columns
/// `left_time` and `right_time`, each plus or minus a constant day-time interval):
/// `r.ts BETWEEN l.ts - INTERVAL '1' HOUR AND l.ts + INTERVAL '4' HOUR`, or comparisons
/// with `>=`, `>`, `<=`, `<`, `=` either way round. Returns the inclusive bounds (ms) when
/// both a lower and an upper one were found (Flink's rule for an interval join), and the
/// conjuncts left; otherwise no bounds and `residual` unchanged.
///
/// # Errors
/// None today (bounds that are not constant intervals leave the condition a residual).
fn interval_bounds(
    residual: Vec<Expr>,
    pair_schema: &datafusion_common::DFSchema,
    left_time: usize,
    right_time: usize,
) -> Result<(Option<(i64, i64)>, Vec<Expr>)> {
    use datafusion_expr::{Between, BinaryExpr, Operator};
    // A time term: which input's time (false: left, true: right) plus a constant (ms).
    let term = |e: &Expr| -> Option<(bool, i64)> {
        let column_side = |e: &Expr| match e {
            Expr::Column(c) => match pair_schema.index_of_column(c).ok()? {
                i if i == left_time => Some(false),
                i if i == right_time => Some(true),
                _ => None,
            },
            _ => None,
        };
        match e {
            Expr::Alias(a) => None.or_else(|| column_side(&a.expr).map(|s| (s, 0))),
            Expr::Column(_) => column_side(e).map(|s| (s, 0)),
            Expr::BinaryExpr(BinaryExpr { left, op, right })
                if matches!(op, Operator::Plus | Operator::Minus) =>
            {
                let side = column_side(left)?;
                let ms = fixed_interval_ms(right)?;
                Some((side, if *op == Operator::Plus { ms } else { -ms }))
            }
            _ => None,
        }
    };
    // `a op b` as bounds on d = tr - tl: (lower, upper).
    let compare = |a: &Expr, op: Operator, b: &Expr| -> Option<(Option<i64>, Option<i64>)> {
        let ((sa, ca), (sb, cb)) = (term(a)?, term(b)?);
        if sa == sb {
            return None;
        }
        // tA + ca op tB + cb; with A the right input: d op cb - ca; else d (flipped op) ca - cb.
        let (op, c) = if sa {
            (op, cb - ca)
        } else {
            let flipped = match op {
                Operator::Lt => Operator::Gt,
                Operator::LtEq => Operator::GtEq,
                Operator::Gt => Operator::Lt,
                Operator::GtEq => Operator::LtEq,
                other => other,
            };
            (flipped, ca - cb)
        };
        Some(match op {
            Operator::GtEq => (Some(c), None),
            Operator::Gt => (Some(c + 1), None),
            Operator::LtEq => (None, Some(c)),
            Operator::Lt => (None, Some(c - 1)),
            Operator::Eq => (Some(c), Some(c)),
            _ => return None,
        })
    };
    let mut lower: Option<i64> = None;
    let mut upper: Option<i64> = None;
    let mut rest = Vec::new();
    let mut used = Vec::new();
    for e in residual {
        let found = match &e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => compare(left, *op, right),
            Expr::Between(Between {
                expr,
                negated: false,
                low,
                high,
            }) => match (
                compare(expr, Operator::GtEq, low),
                compare(expr, Operator::LtEq, high),
            ) {
                // With the left input's time as the subject, the first comparison bounds
                // `tr - tl` from above and the second from below.
                (Some((l1, u1)), Some((l2, u2))) => Some((l1.or(l2), u1.or(u2))),
                _ => None,
            },
            _ => None,
        };
        match found {
            Some((l, u)) => {
                if let Some(l) = l {
                    lower = Some(lower.map_or(l, |x| x.max(l)));
                }
                if let Some(u) = u {
                    upper = Some(upper.map_or(u, |x| x.min(u)));
                }
                used.push(e);
            }
            None => rest.push(e),
        }
    }
    match (lower, upper) {
        (Some(l), Some(u)) => Ok((Some((l, u)), rest)),
        _ => {
            rest.extend(used);
            Ok((None, rest))
        }
    }
}

/// A constant day-time interval literal in ms (`None` for months, or anything else).
pub(super) fn fixed_interval_ms(e: &Expr) -> Option<i64> {
    use datafusion_common::ScalarValue;
    match e {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            (v.nanoseconds % 1_000_000 == 0)
                .then(|| v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
            Some(v.days as i64 * 86_400_000 + v.milliseconds as i64)
        }
        Expr::Cast(c) => fixed_interval_ms(&c.expr),
        _ => None,
    }
}

/// The window join columns when both inputs carry windows of the same window table
/// function (`left` and `right`: each input's window spec and its `window_start` and
/// `window_end` columns) and `on` equates both bounds (Flink's rule for a window join).
pub(super) fn window_join(
    j: &Join,
    left: Option<(WindowSpec, usize, usize)>,
    right: Option<(WindowSpec, usize, usize)>,
) -> Option<WindowJoinColumns> {
    let ((lw, ls, le), (rw, rs, re)) = (left?, right?);
    // Both windows come from one session, so a time zone is the session's on both or neither.
    let same = lw.kind == rw.kind
        && lw.offset_ms == rw.offset_ms
        && lw.time_zone.is_some() == rw.time_zone.is_some();
    let column = |e: &Expr, schema: &datafusion_common::DFSchema| match e {
        Expr::Column(c) => schema.index_of_column(c).ok(),
        _ => None,
    };
    let equated = |l: usize, r: usize| {
        j.on.iter().any(|(a, b)| {
            column(a, j.left.schema()) == Some(l) && column(b, j.right.schema()) == Some(r)
        })
    };
    (same && equated(ls, rs) && equated(le, re)).then_some(WindowJoinColumns {
        window: lw,
        left_start: ls,
        left_end: le,
        right_start: rs,
        right_end: re,
    })
}

/// Refuses join forms whose DataFusion planning differs from Flink's, before they are
/// planned: `USING` / `NATURAL` in a `RIGHT` or `FULL` join (DataFusion takes the shared
/// column from the left input, NULL for a right-only row; Flink coalesces both), and
/// `SELECT *` over a `USING` / `NATURAL` join (Flink lists the shared columns first,
/// DataFusion where the left input has them, so the columns would come in another order).
///
/// # Errors
/// One of those forms, named.
pub(super) fn check_join_syntax(query: &datafusion_sql::sqlparser::ast::Query) -> Result<()> {
    use datafusion_sql::sqlparser::ast::{
        JoinConstraint, JoinOperator, Query, SelectItem, SetExpr, Visit, Visitor,
    };
    use std::ops::ControlFlow;
    struct Check(Option<String>);
    impl Visitor for Check {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            let SetExpr::Select(select) = query.body.as_ref() else {
                return ControlFlow::Continue(());
            };
            let wildcard = select.projection.iter().any(|p| {
                matches!(
                    p,
                    SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(_, _)
                )
            });
            for join in select.from.iter().flat_map(|t| &t.joins) {
                let (constraint, outer) = match &join.join_operator {
                    JoinOperator::Right(c)
                    | JoinOperator::RightOuter(c)
                    | JoinOperator::FullOuter(c) => (c, true),
                    JoinOperator::Join(c)
                    | JoinOperator::Inner(c)
                    | JoinOperator::Left(c)
                    | JoinOperator::LeftOuter(c) => (c, false),
                    _ => continue,
                };
                if !matches!(
                    constraint,
                    JoinConstraint::Using(_) | JoinConstraint::Natural
                ) {
                    continue;
                }
                if outer {
                    self.0 = Some(
                        "a RIGHT or FULL join with USING or NATURAL: write ON a.k = b.k and \
                         select COALESCE(a.k, b.k) for the shared column"
                            .into(),
                    );
                    return ControlFlow::Break(());
                }
                if wildcard {
                    self.0 = Some(
                        "SELECT * over a join with USING or NATURAL: list the columns (Flink \
                         puts the shared columns first)"
                            .into(),
                    );
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut check = Check(None);
    let _ = query.visit(&mut check);
    match check.0 {
        Some(what) => not_supported!("{what}"),
        None => Ok(()),
    }
}

/// Refuses scalar subqueries that may return more than one row: Flink fails such a query
/// when a second row comes; a join would silently multiply the outer rows. A scalar
/// subquery is accepted when it is an aggregate without `GROUP BY` (one row), under any
/// projections, filters and aliases.
///
/// # Errors
/// Another scalar subquery.
pub(super) fn check_scalar_subqueries(plan: &LogicalPlan) -> Result<()> {
    use datafusion_common::tree_node::TreeNode;
    fn one_row(plan: &LogicalPlan) -> bool {
        match plan {
            LogicalPlan::Aggregate(a) => a.group_expr.is_empty(),
            LogicalPlan::Projection(p) => one_row(&p.input),
            LogicalPlan::Filter(f) => one_row(&f.input),
            LogicalPlan::SubqueryAlias(a) => one_row(&a.input),
            _ => false,
        }
    }
    let mut bad = false;
    let _ = plan.apply_with_subqueries(|p| {
        for e in p.expressions() {
            let _ = e.apply(|e| {
                if let Expr::ScalarSubquery(sq) = e {
                    if !one_row(&sq.subquery) {
                        bad = true;
                    }
                }
                Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
            });
        }
        Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
    });
    if bad {
        return not_supported!(
            "a scalar subquery that may return more than one row: aggregate it (e.g. \
             SELECT MAX(x) ...) so it returns one"
        );
    }
    Ok(())
}

fn is_text(t: &datafusion_common::arrow::datatypes::DataType) -> bool {
    use datafusion_common::arrow::datatypes::DataType;
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// `(from, to)` types when `e` is a cast (`CAST` / `TRY_CAST`).
fn cast_types(
    e: &Expr,
    schema: &datafusion_common::DFSchema,
) -> Result<
    Option<(
        datafusion_common::arrow::datatypes::DataType,
        datafusion_common::arrow::datatypes::DataType,
    )>,
> {
    Ok(match e {
        Expr::Cast(c) => Some((c.expr.get_type(schema)?, c.field.data_type().clone())),
        Expr::TryCast(c) => Some((c.expr.get_type(schema)?, c.field.data_type().clone())),
        _ => None,
    })
}

/// The expression under a cast.
fn uncast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => &c.expr,
        Expr::TryCast(c) => &c.expr,
        other => other,
    }
}

/// Whether `predicate` reads the `marks` columns (of mark joins below it) only where a
/// FALSE mark and a NULL one filter alike: as bare conditions under AND / OR. A mark join's
/// mark is never NULL where SQL's `x IN (subquery)` can be (x or a subquery value NULL),
/// so `NOT mark`, `mark IS FALSE` or a comparison with it would give other rows.
pub(super) fn marks_read_positively(predicate: &Expr, marks: &[datafusion_common::Column]) -> bool {
    use datafusion_expr::{BinaryExpr, Operator};
    match predicate {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And | Operator::Or,
            right,
        }) => marks_read_positively(left, marks) && marks_read_positively(right, marks),
        Expr::Column(_) => true,
        other => !other
            .column_refs()
            .iter()
            .any(|c| marks.iter().any(|m| m == *c)),
    }
}
