//! `CROSS JOIN UNNEST(array, ...) [WITH ORDINALITY] AS t(c, ...)` and `LEFT JOIN
//! UNNEST(...) ON TRUE` (Flink SQL "Joins > Array Expansion").
//!
//! DataFusion plans `UNNEST(o.tags)` in `FROM` as a lateral subquery over one empty row
//! whose expressions read the outer row (`outer_ref(o.tags)`), joined with the outer
//! relation. [`decorrelate`] turns that join into an `Unnest` over the outer relation
//! itself: the subquery's projections carry the outer columns through, its outer
//! references become plain columns, and its `Unnest` node expands each outer row (the
//! [`OperatorSpec::Unnest`](sluice_common::plan::OperatorSpec) operator). `WITH
//! ORDINALITY`, which DataFusion's planner does not take, is rewritten first into one more
//! array, `$ordinals(...)` (`[1, ..., n]`), zipped with the others ([`ordinality`]).
//! `UNNEST(x) AS t(c1, ..., ck)` of one ARRAY of ROW or MAP is rewritten first into the `k`
//! arrays of its columns, `$unnest_part(x, i, k)` (the rows' fields; a map's keys and
//! values), zipped the same way; the function checks that `x` has `k` columns.

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::NullHandling;
use datafusion_common::{Column, JoinType, Result, ScalarValue};
use datafusion_expr::logical_plan::{Filter, Join, Subquery};
use datafusion_expr::{Expr, LogicalPlan, LogicalPlanBuilder};
use datafusion_sql::sqlparser::ast::{self, TableFactor, VisitMut, VisitorMut};
use sluice_common::plan::{OperatorSpec, PlanNode, UnnestNulls};
use sluice_common::{not_supported, plan_err};

use super::{Planned, Planner};

/// Rewrites `UNNEST(x) [WITH ORDINALITY] AS t(c1, ..., ck)` of one expression into
/// `UNNEST($unnest_part(x, 1, k), ..., $unnest_part(x, k, k))` (see the module docs), then
/// `UNNEST(a, ...) WITH ORDINALITY` into `UNNEST(a, ..., $ordinals(a, ...))`: the ordinal
/// column (`INT`, from 1) comes last, as Flink's.
pub(super) fn ordinality(query: &mut ast::Query) {
    struct Ordinality;
    impl VisitorMut for Ordinality {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::UNNEST {
                array_exprs,
                with_ordinality,
                alias,
                ..
            } = factor
            {
                let names = alias.as_ref().map_or(0, |a| a.columns.len());
                let k = names.saturating_sub(usize::from(*with_ordinality));
                if array_exprs.len() == 1 && k >= 1 {
                    let x = array_exprs.remove(0);
                    let number =
                        |n: usize| ast::Expr::value(ast::Value::Number(n.to_string(), false));
                    for i in 1..=k {
                        array_exprs.push(crate::functions::syntax::internal_call(
                            "$unnest_part",
                            vec![x.clone(), number(i), number(k)],
                        ));
                    }
                }
                if *with_ordinality {
                    *with_ordinality = false;
                    let ordinals =
                        crate::functions::syntax::internal_call("$ordinals", array_exprs.clone());
                    array_exprs.push(ordinals);
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = query.visit(&mut Ordinality);
}

/// Every join of a relation with a lateral `UNNEST(...)` subquery, as an `Unnest` over the
/// relation (see the module docs). Other lateral subqueries are left for the planner to
/// refuse.
pub(super) fn decorrelate(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| match node {
        LogicalPlan::Join(join) => match unnest_join(&join)? {
            Some(p) => Ok(Transformed::yes(p)),
            None => Ok(Transformed::no(LogicalPlan::Join(join))),
        },
        other => Ok(Transformed::no(other)),
    })
    .map(|t| t.data)
}

/// The lateral subquery of a join's right side, if that is one (under an alias).
fn lateral_subquery(plan: &LogicalPlan) -> Option<&Subquery> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => lateral_subquery(&a.input),
        LogicalPlan::Subquery(s) if !s.outer_ref_columns.is_empty() => Some(s),
        _ => None,
    }
}

fn contains_unnest(plan: &LogicalPlan) -> bool {
    plan.exists(|p| Ok(matches!(p, LogicalPlan::Unnest(_))))
        .unwrap_or(false)
}

fn unnest_join(join: &Join) -> Result<Option<LogicalPlan>> {
    let Some(sub) = lateral_subquery(&join.right) else {
        return Ok(None);
    };
    if !contains_unnest(&sub.subquery) {
        return Ok(None);
    }
    let always = |e: &Option<Expr>| {
        matches!(
            e,
            None | Some(Expr::Literal(ScalarValue::Boolean(Some(true)), _))
        )
    };
    let nulls = match join.join_type {
        JoinType::Inner if join.on.is_empty() && always(&join.filter) => NullHandling::Drop,
        JoinType::Left if join.on.is_empty() && always(&join.filter) => {
            NullHandling::PreserveAndExpandEmpty
        }
        _ => {
            return datafusion_common::not_impl_err!(
                "Not yet supported: UNNEST joined other than by CROSS JOIN or LEFT JOIN ... ON TRUE"
            )
        }
    };
    let left = join.left.as_ref();
    let expanded = over_outer(&sub.subquery, left, nulls)?;
    // The join's columns: the outer relation's, then the subquery's under its alias.
    let left_len = left.schema().fields().len();
    let exprs = join
        .schema
        .iter()
        .enumerate()
        .map(|(i, (qualifier, field))| {
            if i < left_len {
                Expr::Column(Column::new(qualifier.cloned(), field.name()))
            } else {
                Expr::Column(Column::from(expanded.schema().qualified_field(i)))
                    .alias_qualified(qualifier.cloned(), field.name())
            }
        })
        .collect::<Vec<_>>();
    Ok(Some(
        LogicalPlanBuilder::from(expanded).project(exprs)?.build()?,
    ))
}

/// `sub` (a lateral subquery over one empty row) evaluated over every row of `outer`
/// instead, the outer columns first in each of its nodes.
fn over_outer(sub: &LogicalPlan, outer: &LogicalPlan, nulls: NullHandling) -> Result<LogicalPlan> {
    let outer_columns = || {
        outer
            .schema()
            .iter()
            .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())))
            .collect::<Vec<_>>()
    };
    let strip = |e: &Expr| {
        e.clone()
            .transform(|e| match e {
                Expr::OuterReferenceColumn(_, c) => Ok(Transformed::yes(Expr::Column(c))),
                other => Ok(Transformed::no(other)),
            })
            .map(|t| t.data)
    };
    match sub {
        LogicalPlan::EmptyRelation(e) if e.produce_one_row => Ok(outer.clone()),
        LogicalPlan::Projection(p) => {
            let input = over_outer(&p.input, outer, nulls)?;
            let mut exprs = outer_columns();
            for e in &p.expr {
                exprs.push(strip(e)?);
            }
            LogicalPlanBuilder::from(input).project(exprs)?.build()
        }
        LogicalPlan::Unnest(u) => {
            let input = over_outer(&u.input, outer, nulls)?;
            let mut options = u.options.clone();
            options.null_handling = nulls;
            LogicalPlanBuilder::from(input)
                .unnest_columns_with_options(u.exec_columns.clone(), options)?
                .build()
        }
        LogicalPlan::Filter(f) => {
            let input = over_outer(&f.input, outer, nulls)?;
            Ok(LogicalPlan::Filter(Filter::try_new(
                strip(&f.predicate)?,
                Arc::new(input),
            )?))
        }
        LogicalPlan::SubqueryAlias(a) => over_outer(&a.input, outer, nulls),
        LogicalPlan::Subquery(s) => over_outer(&s.subquery, outer, nulls),
        other => {
            datafusion_common::not_impl_err!("Not yet supported: {} inside UNNEST", other.display())
        }
    }
}

/// Whether column `i` of `input` is a `$unnest_part(...)` (a field of rows that are
/// themselves ROWs: kept as ROW values).
fn is_unnest_part(input: &LogicalPlan, i: usize) -> bool {
    let LogicalPlan::Projection(p) = input else {
        return false;
    };
    matches!(p.expr.get(i).map(|e| e.clone().unalias_nested().data),
        Some(Expr::ScalarFunction(f)) if f.func.name() == "$unnest_part")
}

impl Planner {
    /// An `Unnest` node: its input, each of its `ARRAY` columns expanded (one level).
    pub(super) fn lower_unnest(
        &self,
        u: &datafusion_expr::logical_plan::Unnest,
    ) -> sluice_common::Result<Planned> {
        if !u.struct_type_columns.is_empty() {
            return not_supported!("UNNEST of a ROW (or an ARRAY of ROW)");
        }
        let input = self.lower(&u.input)?;
        let in_schema = u.input.schema();
        let mut lists = Vec::new();
        for (i, how) in &u.list_type_columns {
            if how.depth != 1 {
                return not_supported!("UNNEST of nested arrays at depth {}", how.depth);
            }
            let data_type = in_schema.field(*i).data_type();
            if let datafusion_common::arrow::datatypes::DataType::List(item) = data_type {
                if matches!(
                    item.data_type(),
                    datafusion_common::arrow::datatypes::DataType::Struct(_)
                ) && !is_unnest_part(&u.input, *i)
                {
                    return not_supported!(
                        "UNNEST of an ARRAY of ROW without a name for each field (Sluice \
                         expands one array of rows into its fields: UNNEST(x) AS t(a, b, ...))"
                    );
                }
            }
            if !matches!(
                data_type,
                datafusion_common::arrow::datatypes::DataType::List(_)
            ) {
                return not_supported!(
                    "UNNEST of {}: only an ARRAY is expanded",
                    sluice_common::types::flink_type_name(in_schema.field(*i).data_type())
                );
            }
            lists.push(*i);
        }
        if lists.is_empty() {
            return plan_err!("UNNEST without an ARRAY to expand");
        }
        let nulls = match u.options.null_handling {
            NullHandling::Drop => UnnestNulls::Drop,
            NullHandling::Preserve => UnnestNulls::Preserve,
            NullHandling::PreserveAndExpandEmpty => UnnestNulls::PreserveEmpty,
        };
        // Columns keep their positions: the event-time attribute stays one.
        let rowtime = input.node.rowtime.filter(|r| !lists.contains(r));
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Unnest { lists, nulls },
                schema: Arc::clone(&u.schema),
                rowtime,
                inputs: vec![input.node],
            },
            window: None,
        })
    }
}
