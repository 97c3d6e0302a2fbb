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
//!
//! A user-defined table function (Flink SQL "Table Functions": `LATERAL TABLE(f(x)) AS
//! T(a, b)`, `TABLE(f(1))`) is a scalar function whose value is the ARRAY of the rows it
//! emits ([`UserFunction::Table`](crate::functions::user::UserFunction)):
//! [`table_functions`] rewrites the call into `UNNEST("$table:f"(x)) AS T(a, b)`, naming
//! the columns after the result's fields when the alias does not. A `$unnest_part`
//! argument that is not a column is computed once below the expansion, so the function
//! runs once per row whatever the number of its columns.

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

/// Rewrites every call of a bound table function in `FROM` (`LATERAL TABLE(f(...))`,
/// `TABLE(f(...))`) into `UNNEST` of its rows (see the module docs). Other `TABLE(...)`
/// calls (window TVFs) are left alone.
///
/// # Errors
/// `LATERAL TABLE(f(...))` or `TABLE(f(...))` of an `f` that is no bound table function
/// (nor, for `TABLE`, a window TVF); a table function without column names in its alias
/// whose result fields cannot be known before planning (its signature is not fixed), or
/// whose result is not an ARRAY.
pub(super) fn table_functions(
    query: &mut ast::Query,
    user: &crate::functions::user::UserFunctions,
) -> sluice_common::Result<()> {
    struct Tables<'a> {
        user: &'a crate::functions::user::UserFunctions,
    }
    impl VisitorMut for Tables<'_> {
        type Break = sluice_common::SluiceError;
        fn pre_visit_table_factor(
            &mut self,
            factor: &mut TableFactor,
        ) -> ControlFlow<sluice_common::SluiceError> {
            let (call, alias, ordinality) = match factor {
                TableFactor::Function {
                    lateral: true,
                    name,
                    args,
                    with_ordinality,
                    alias,
                } if name.to_string().eq_ignore_ascii_case("TABLE") && args.len() == 1 => {
                    match &args[0] {
                        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(
                            ast::Expr::Function(f),
                        )) => (f.clone(), alias.take(), *with_ordinality),
                        _ => return ControlFlow::Continue(()),
                    }
                }
                TableFactor::TableFunction {
                    expr: ast::Expr::Function(f),
                    alias,
                } => (f.clone(), alias.take(), false),
                _ => return ControlFlow::Continue(()),
            };
            let restore = |factor: &mut TableFactor, alias: Option<ast::TableAlias>| match factor {
                TableFactor::Function { alias: a, .. }
                | TableFactor::TableFunction { alias: a, .. } => *a = alias,
                _ => {}
            };
            let name = call.name.to_string();
            // Looked up by the unquoted name (`"SplitFunction"` is `SplitFunction`).
            let bare = match call.name.0.as_slice() {
                [ast::ObjectNamePart::Identifier(i)] => i.value.clone(),
                _ => name.clone(),
            };
            let lateral = matches!(factor, TableFactor::Function { .. });
            let window_tvf = ["TUMBLE", "HOP", "CUMULATE", "SESSION"]
                .iter()
                .any(|w| bare.eq_ignore_ascii_case(w));
            let Some(udtf) = self.user.table(&bare) else {
                if lateral || !window_tvf {
                    return ControlFlow::Break(sluice_common::SluiceError::Plan(format!(
                        "'{name}' is not a table function: TABLE(...) calls a \
                         function bound with CREATE FUNCTION to one an application \
                         registered with Engine::register_udtf"
                    )));
                }
                restore(factor, alias);
                return ControlFlow::Continue(());
            };
            let mut alias = alias.unwrap_or_else(|| ast::TableAlias {
                explicit: true,
                name: ast::Ident::new(bare.clone()),
                columns: vec![],
                at: None,
            });
            if alias.columns.is_empty() {
                match table_function_columns(&bare, &udtf) {
                    Ok(columns) => {
                        alias.columns = columns
                            .into_iter()
                            .map(ast::TableAliasColumnDef::from_name)
                            .collect()
                    }
                    Err(e) => return ControlFlow::Break(e),
                }
                if ordinality {
                    alias
                        .columns
                        .push(ast::TableAliasColumnDef::from_name("ordinality"));
                }
            }
            let mut call = call;
            call.name = ast::ObjectName::from(vec![ast::Ident::with_quote(
                '"',
                format!("{}{bare}", crate::functions::user::TABLE_FUNCTION_PREFIX),
            )]);
            *factor = TableFactor::UNNEST {
                alias: Some(alias),
                array_exprs: vec![ast::Expr::Function(call)],
                with_offset: false,
                with_offset_alias: None,
                with_ordinality: ordinality,
            };
            ControlFlow::Continue(())
        }
    }
    match query.visit(&mut Tables { user }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// The column names of table function `udtf`'s rows: the fields of its `ARRAY<ROW<...>>`
/// result, or `f0` for an `ARRAY<T>` (Flink's name for an atomic result).
fn table_function_columns(
    name: &str,
    udtf: &datafusion_expr::ScalarUDF,
) -> sluice_common::Result<Vec<String>> {
    use datafusion_common::arrow::datatypes::DataType;
    // Only a fixed signature says the argument types (another signature's function may
    // expect some and must not be asked without them).
    let arg_types = match &udtf.signature().type_signature {
        datafusion_expr::TypeSignature::Exact(types) => Some(types.clone()),
        datafusion_expr::TypeSignature::Nullary => Some(vec![]),
        _ => None,
    };
    let returned = match arg_types {
        Some(types) => udtf.return_type(&types),
        None => datafusion_common::plan_err!("no fixed signature"),
    };
    match returned {
        Ok(DataType::List(item) | DataType::LargeList(item)) => Ok(match item.data_type() {
            DataType::Struct(fields) => fields.iter().map(|f| f.name().clone()).collect(),
            _ => vec!["f0".to_string()],
        }),
        Ok(other) => plan_err!(
            "table function '{name}' returns {}, not the ARRAY of the rows it emits",
            sluice_common::types::flink_type_name(&other)
        ),
        Err(_) => plan_err!(
            "table function '{name}': its result columns are known only from its arguments; \
             name them in the alias: LATERAL TABLE({name}(...)) AS T(a, b, ...)"
        ),
    }
}

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
    let plan = plan
        .transform_up_with_subqueries(|node| match node {
            LogicalPlan::Join(join) => match unnest_join(&join)? {
                Some(p) => Ok(Transformed::yes(p)),
                None => Ok(Transformed::no(LogicalPlan::Join(join))),
            },
            other => Ok(Transformed::no(other)),
        })?
        .data;
    // Then every expansion (lateral or not) computes its `$unnest_part` sources once.
    plan.transform_up_with_subqueries(|node| match node {
        LogicalPlan::Unnest(u) => {
            let LogicalPlan::Projection(p) = u.input.as_ref() else {
                return Ok(Transformed::no(LogicalPlan::Unnest(u)));
            };
            let (input, exprs) = unnest_sources_once((*p.input).clone(), p.expr.clone())?;
            if exprs == p.expr {
                return Ok(Transformed::no(LogicalPlan::Unnest(u)));
            }
            let projection = LogicalPlanBuilder::from(input).project(exprs)?.build()?;
            Ok(Transformed::yes(
                LogicalPlanBuilder::from(projection)
                    .unnest_columns_with_options(u.exec_columns.clone(), u.options.clone())?
                    .build()?,
            ))
        }
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

/// `exprs` over `input` with each distinct `$unnest_part` source that is not a column
/// computed once, as a column of a projection added to `input` (a table function's call
/// or a MAP constructor then runs once per row, not once per column it gives).
fn unnest_sources_once(input: LogicalPlan, exprs: Vec<Expr>) -> Result<(LogicalPlan, Vec<Expr>)> {
    let mut sources: Vec<Expr> = Vec::new();
    let exprs = exprs
        .into_iter()
        .map(|e| {
            e.transform_up(|e| match e {
                Expr::ScalarFunction(mut f)
                    if f.func.name() == "$unnest_part" && !matches!(f.args[0], Expr::Column(_)) =>
                {
                    let i = match sources.iter().position(|s| *s == f.args[0]) {
                        Some(i) => i,
                        None => {
                            sources.push(f.args[0].clone());
                            sources.len() - 1
                        }
                    };
                    f.args[0] = Expr::Column(Column::from_name(format!("$unnest_source{i}")));
                    Ok(Transformed::yes(Expr::ScalarFunction(f)))
                }
                other => Ok(Transformed::no(other)),
            })
            .map(|t| t.data)
        })
        .collect::<Result<Vec<_>>>()?;
    if sources.is_empty() {
        return Ok((input, exprs));
    }
    let mut below: Vec<Expr> = input
        .schema()
        .iter()
        .map(|(q, f)| Expr::Column(Column::new(q.cloned(), f.name())))
        .collect();
    for (i, e) in sources.into_iter().enumerate() {
        below.push(e.alias(format!("$unnest_source{i}")));
    }
    let input = LogicalPlanBuilder::from(input).project(below)?.build()?;
    Ok((input, exprs))
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
