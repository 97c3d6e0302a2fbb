//! Legacy group windows (Flink SQL "Group Window Aggregation", deprecated since Flink
//! 1.13 but in much existing SQL): `GROUP BY TUMBLE(ts, size)`, `HOP(ts, slide, size)` and
//! `SESSION(ts, gap)`, with the auxiliary functions `TUMBLE_START`, `TUMBLE_END`,
//! `TUMBLE_ROWTIME`, `TUMBLE_PROCTIME` and their `HOP_` and `SESSION_` forms.
//!
//! Each is rewritten, in the query's AST before DataFusion plans it, onto the window table
//! function it is equivalent to, so it runs on the same operators:
//!
//! ```sql
//! SELECT k, TUMBLE_END(ts, INTERVAL '1' HOUR), COUNT(*) FROM t WHERE x > 0
//! GROUP BY TUMBLE(ts, INTERVAL '1' HOUR), k
//! -- becomes
//! SELECT k, window_end, COUNT(*) FROM TABLE(TUMBLE(TABLE <t where x > 0>, DESCRIPTOR(ts),
//!   INTERVAL '1' HOUR)) AS t GROUP BY window_start, window_end, k
//! ```
//!
//! The `FROM` clause (one relation) and `WHERE` become the input of the window table
//! function: the relation itself, or an inline view of `SELECT * FROM <from> WHERE ...`
//! held in [`Catalog::inline_views`](crate::catalog::Catalog). A legacy session window
//! is per group key (Flink's group windows are keyed by the other `GROUP BY` columns):
//! those columns become the `SESSION` call's `PARTITION BY`. `*_ROWTIME` and
//! `*_PROCTIME` are `window_time`, grouped on too; each is checked against the kind of
//! time attribute, as Flink does.

use std::ops::ControlFlow;

use datafusion_sql::sqlparser::ast::{
    self, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Ident, ObjectName,
    SelectItem, SetExpr, TableAlias, TableFactor, VisitMut, VisitorMut,
};
use datafusion_sql::sqlparser::tokenizer::Location;
use sluice_common::{not_supported, plan_err, Result, SluiceError};

use super::Planner;
use crate::catalog::{ViewDef, LEGACY_WINDOW_COLUMNS};
use crate::parser::{interval_ms, next_placeholder, QueryStatement, TvfKind, WindowTvfCall};

/// Rewrites every legacy group window in `query` (subqueries first).
pub(super) fn rewrite(planner: &mut Planner, query: &mut ast::Query) -> Result<()> {
    match query.visit(&mut Rewriter { planner }) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Rewriter<'a> {
    planner: &'a mut Planner,
}

impl VisitorMut for Rewriter<'_> {
    type Break = SluiceError;

    fn post_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<SluiceError> {
        let result = match query.body.as_mut() {
            SetExpr::Select(_) => rewrite_query_select(self.planner, query),
            body => each_select(body, &mut |select| {
                rewrite_select(self.planner, select, None, None)
            }),
        };
        match result {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

/// The selects of a set operation (`UNION` ...), each rewritten on its own.
fn each_select(
    body: &mut SetExpr,
    f: &mut dyn FnMut(&mut ast::Select) -> Result<()>,
) -> Result<()> {
    match body {
        SetExpr::Select(s) => f(s),
        SetExpr::SetOperation { left, right, .. } => {
            each_select(left, f)?;
            each_select(right, f)
        }
        _ => Ok(()),
    }
}

/// A query whose body is one select: its `ORDER BY` may name auxiliary functions too.
fn rewrite_query_select(planner: &mut Planner, query: &mut ast::Query) -> Result<()> {
    let context = query.clone();
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Ok(());
    };
    rewrite_select(planner, select, query.order_by.as_mut(), Some(&context))
}

/// One legacy group window call: `TUMBLE(ts, size)`, `HOP(ts, slide, size)`,
/// `SESSION(ts, gap)`.
#[derive(Debug, Clone, PartialEq)]
struct GroupWindow {
    kind: TvfKind,
    time_column: String,
    /// Interval arguments (ms) in order.
    intervals: Vec<i64>,
}

/// The name of a call whose name is one plain identifier.
fn call_name(f: &ast::Function) -> Option<String> {
    match f.name.0.as_slice() {
        [part] => part.as_ident().map(|i| i.value.to_ascii_uppercase()),
        _ => None,
    }
}

fn call_location(f: &ast::Function) -> Location {
    f.name
        .0
        .first()
        .and_then(|p| p.as_ident())
        .map(|i| i.span.start)
        .unwrap_or(Location { line: 0, column: 0 })
}

fn legacy_kind(name: &str) -> Option<TvfKind> {
    match name {
        "TUMBLE" => Some(TvfKind::Tumble),
        "HOP" => Some(TvfKind::Hop),
        "SESSION" => Some(TvfKind::Session),
        _ => None,
    }
}

/// Parses a group window call's arguments.
fn group_window(kind: TvfKind, f: &ast::Function) -> Result<GroupWindow> {
    let at = call_location(f);
    let args: Vec<&ast::Expr> = match &f.args {
        FunctionArguments::List(list) => list
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
                other => plan_err!("{}{at}: unexpected argument {other}", kind.name()),
            })
            .collect::<Result<_>>()?,
        _ => return plan_err!("{}{at}: expected arguments", kind.name()),
    };
    let (wanted, form) = match kind {
        TvfKind::Tumble => (1, "TUMBLE(time_attr, size)"),
        TvfKind::Hop => (2, "HOP(time_attr, slide, size)"),
        _ => (1, "SESSION(time_attr, gap)"),
    };
    if args.len() != wanted + 1 {
        if kind == TvfKind::Tumble && args.len() == 3 {
            return not_supported!(
                "TUMBLE{at} with an alignment time (third argument); use the TUMBLE window \
                 table function's OFFSET"
            );
        }
        return plan_err!(
            "{}{at}: expected {form}, found {} arguments",
            kind.name(),
            args.len()
        );
    }
    let time_column = match args[0] {
        ast::Expr::Identifier(i) => i.value.clone(),
        ast::Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.clone()).unwrap(),
        other => {
            return plan_err!(
                "{}{at}: the first argument must be a time attribute column, found {other}",
                kind.name()
            )
        }
    };
    let mut intervals = Vec::new();
    for e in &args[1..] {
        let ms =
            interval_ms(e).map_err(|m| SluiceError::Plan(format!("{}{at}: {m}", kind.name())))?;
        if ms <= 0 {
            return plan_err!(
                "{}{at}: a window interval must be positive, found {e}",
                kind.name()
            );
        }
        intervals.push(ms);
    }
    Ok(GroupWindow {
        kind,
        time_column,
        intervals,
    })
}

/// The auxiliary function a call is (`TUMBLE_START` → (Tumble, window_start)).
fn auxiliary(name: &str) -> Option<(TvfKind, &'static str)> {
    let (kind, property) = name.split_once('_')?;
    let kind = legacy_kind(kind)?;
    let column = match property {
        "START" => LEGACY_WINDOW_COLUMNS[0],
        "END" => LEGACY_WINDOW_COLUMNS[1],
        "ROWTIME" | "PROCTIME" => LEGACY_WINDOW_COLUMNS[2],
        _ => return None,
    };
    Some((kind, column))
}

fn rewrite_select(
    planner: &mut Planner,
    select: &mut ast::Select,
    order_by: Option<&mut ast::OrderBy>,
    query: Option<&ast::Query>,
) -> Result<()> {
    let GroupByExpr::Expressions(keys, _) = &select.group_by else {
        return Ok(());
    };
    let mut windows = keys.iter().enumerate().filter_map(|(i, e)| match e {
        ast::Expr::Function(f) => call_name(f)
            .and_then(|n| legacy_kind(&n))
            .map(|k| (i, k, f)),
        _ => None,
    });
    let Some((at_key, kind, call)) = windows.next() else {
        return refuse_stray_auxiliaries(select, order_by);
    };
    let location = call_location(call);
    if windows.next().is_some() {
        return not_supported!("more than one group window in one GROUP BY{location}");
    }
    let window = group_window(kind, call)?;
    let other_keys: Vec<ast::Expr> = keys
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at_key)
        .map(|(_, e)| e.clone())
        .collect();
    // SESSION: one session per group key (the other GROUP BY columns).
    let partition_by = if kind == TvfKind::Session {
        other_keys
            .iter()
            .map(|k| match k {
                ast::Expr::Identifier(i) => Ok(i.value.clone()),
                ast::Expr::CompoundIdentifier(p) => Ok(p.last().unwrap().value.clone()),
                other => not_supported!(
                    "SESSION{location} grouped by the expression {other}: group a session \
                     window by columns (compute the key in a view)"
                ),
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };

    let (input, alias) = window_input(planner, select, query, location)?;
    let input_schema = planner
        .catalog
        .relation_schema(&input)
        .ok_or_else(|| SluiceError::Plan(planner.catalog.unknown_relation(&input)))?;
    let processing_time = input_schema
        .field_with_name(&window.time_column)
        .is_ok_and(sluice_common::types::is_proctime);
    let names = match kind {
        TvfKind::Tumble => vec!["SIZE"],
        TvfKind::Hop => vec!["SLIDE", "SIZE"],
        _ => vec!["GAP"],
    };
    let call = WindowTvfCall {
        legacy: true,
        placeholder: next_placeholder("tvf"),
        kind,
        input,
        partition_by,
        time_column: window.time_column.clone(),
        intervals: names
            .into_iter()
            .zip(window.intervals.iter().copied())
            .collect(),
        location,
    };

    // The auxiliary functions become window columns.
    let mut aux = Auxiliaries {
        window: &window,
        processing_time,
        reads_window_time: false,
    };
    if let ControlFlow::Break(e) = select.projection.visit(&mut aux) {
        return Err(e);
    }
    if let ControlFlow::Break(e) = select.having.visit(&mut aux) {
        return Err(e);
    }
    if let Some(order_by) = order_by {
        if let ControlFlow::Break(e) = order_by.visit(&mut aux) {
            return Err(e);
        }
    }
    let [start, end, time] = LEGACY_WINDOW_COLUMNS;
    let mut group = vec![column(start), column(end)];
    if aux.reads_window_time {
        group.push(column(time));
    }
    group.extend(other_keys);
    if let GroupByExpr::Expressions(keys, _) = &mut select.group_by {
        *keys = group;
    }
    select.from[0].relation = table(&call.placeholder, alias);
    planner
        .catalog
        .window_tvfs
        .insert(call.placeholder.clone(), call);
    Ok(())
}

fn column(name: &str) -> ast::Expr {
    ast::Expr::Identifier(Ident::new(name))
}

fn table(name: &str, alias: Option<Ident>) -> TableFactor {
    TableFactor::Table {
        name: ObjectName::from(vec![Ident::new(name)]),
        alias: alias.map(|name| TableAlias {
            explicit: true,
            name,
            columns: vec![],
            at: None,
        }),
        args: None,
        with_hints: vec![],
        version: None,
        with_ordinality: false,
        partitions: vec![],
        json_path: None,
        sample: None,
        index_hints: vec![],
    }
}

/// The relation the window table function reads, and the alias the select refers to it
/// by: the table or view named in `FROM` when there is no `WHERE`, else an inline view of
/// `SELECT * FROM <from> WHERE <where>` (planned now).
fn window_input(
    planner: &mut Planner,
    select: &mut ast::Select,
    query: Option<&ast::Query>,
    location: Location,
) -> Result<(String, Option<Ident>)> {
    let [from] = select.from.as_slice() else {
        return not_supported!(
            "a group window{location} over several relations; join them in a view and \
             window the view"
        );
    };
    if !from.joins.is_empty() {
        return not_supported!(
            "a group window{location} over a join; window the join's result in a view, or \
             use a window table function"
        );
    }
    let alias = match &from.relation {
        TableFactor::Table { name, alias, .. } => alias
            .as_ref()
            .map(|a| a.name.clone())
            .or_else(|| name.0.last().and_then(|p| p.as_ident()).cloned()),
        TableFactor::Derived { alias, .. } => alias.as_ref().map(|a| a.name.clone()),
        other => {
            return not_supported!("a group window{location} over {other}");
        }
    };
    if select.selection.is_none() {
        if let TableFactor::Table {
            name, args: None, ..
        } = &from.relation
        {
            let name = name.to_string();
            if planner.catalog.contains(&name) {
                return Ok((name, alias));
            }
        }
    }
    let mut inner = select.clone();
    inner.projection = vec![SelectItem::Wildcard(Default::default())];
    inner.group_by = GroupByExpr::Expressions(vec![], vec![]);
    inner.having = None;
    inner.distinct = None;
    inner.named_window = vec![];
    inner.qualify = None;
    let mut inner_query = match query {
        Some(q) => q.clone(),
        None => {
            return not_supported!(
                "a group window{location} with a WHERE clause inside a set operation; filter \
                 in a view"
            )
        }
    };
    inner_query.body = Box::new(SetExpr::Select(Box::new(inner)));
    inner_query.order_by = None;
    inner_query.limit_clause = None;
    inner_query.fetch = None;
    let statement = QueryStatement {
        query: Box::new(inner_query),
        window_tvfs: vec![],
        match_recognize: vec![],
        temporal: vec![],
    };
    let plan = crate::names::with_final_names(planner.logical_plan(&statement)?)?;
    let name = next_placeholder("group_window_input");
    planner.catalog.inline_views.insert(
        name.clone(),
        ViewDef {
            name: name.clone(),
            plan,
            text: String::new(),
        },
    );
    select.selection = None;
    Ok((name, alias))
}

/// Replaces auxiliary function calls by the window column each stands for.
struct Auxiliaries<'a> {
    window: &'a GroupWindow,
    processing_time: bool,
    reads_window_time: bool,
}

impl VisitorMut for Auxiliaries<'_> {
    type Break = SluiceError;

    fn pre_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<SluiceError> {
        let ast::Expr::Function(f) = expr else {
            return ControlFlow::Continue(());
        };
        let Some(name) = call_name(f) else {
            return ControlFlow::Continue(());
        };
        let Some((kind, column_name)) = auxiliary(&name) else {
            return ControlFlow::Continue(());
        };
        match self.check(&name, kind, f) {
            Ok(()) => {
                if column_name == LEGACY_WINDOW_COLUMNS[2] {
                    self.reads_window_time = true;
                }
                *expr = column(column_name);
                ControlFlow::Continue(())
            }
            Err(e) => ControlFlow::Break(e),
        }
    }
}

impl Auxiliaries<'_> {
    fn check(&self, name: &str, kind: TvfKind, f: &ast::Function) -> Result<()> {
        let at = call_location(f);
        let window = &self.window;
        let same = group_window(kind, f).is_ok_and(|w| &w == *window);
        if !same {
            return plan_err!(
                "{name}{at} must name the GROUP BY's window: {}({}, {})",
                window.kind.name(),
                window.time_column,
                window
                    .intervals
                    .iter()
                    .map(|ms| format!("{ms} ms"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if name.ends_with("_ROWTIME") && self.processing_time {
            return plan_err!(
                "{name}{at}: '{}' is a processing-time attribute; use {}_PROCTIME",
                window.time_column,
                window.kind.name()
            );
        }
        if name.ends_with("_PROCTIME") && !self.processing_time {
            return plan_err!(
                "{name}{at}: '{}' is an event-time attribute; use {}_ROWTIME",
                window.time_column,
                window.kind.name()
            );
        }
        Ok(())
    }
}

/// An auxiliary function in a select without a group window is an error that says so.
fn refuse_stray_auxiliaries(
    select: &mut ast::Select,
    order_by: Option<&mut ast::OrderBy>,
) -> Result<()> {
    struct Find(Option<(String, Location)>);
    impl VisitorMut for Find {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
            if let ast::Expr::Function(f) = expr {
                if let Some(name) = call_name(f).filter(|n| auxiliary(n).is_some()) {
                    self.0 = Some((name, call_location(f)));
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut find = Find(None);
    let _ = select.projection.visit(&mut find);
    if find.0.is_none() {
        let _ = select.having.visit(&mut find);
    }
    if find.0.is_none() {
        if let Some(o) = order_by {
            let _ = o.visit(&mut find);
        }
    }
    match find.0 {
        Some((name, at)) => {
            let (kind, _) = auxiliary(&name).expect("an auxiliary function");
            plan_err!(
                "{name}{at} needs a GROUP BY {}(...) group window in its query",
                kind.name()
            )
        }
        None => Ok(()),
    }
}
