//! OVER windows, Top-N and deduplication (Flink SQL "Over Aggregation", "Top-N",
//! "Deduplication").
//!
//! DataFusion plans every `f(...) OVER (...)` as a `Window` node that appends one column
//! per call to its input. An aggregate or `LAG` there becomes an `OverAggregate`. A
//! ranking function (`ROW_NUMBER`, `RANK`, `DENSE_RANK`) can only run as a Top-N: a
//! `WHERE` over it in an outer query must bound its result (`rn <= N`, `rn < N`, `rn =
//! N`, `BETWEEN`); the `Window` then becomes a `Rank` carrying the bounds, and the
//! projections and filters between the two are planned over it.

use std::sync::Arc;

use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use datafusion_expr::expr::{AggregateFunction, WindowFunction, WindowFunctionParams};
use datafusion_expr::logical_plan::{Filter, Limit, LogicalPlan, Sort, Window};
use datafusion_expr::utils::{conjunction, split_conjunction};
use datafusion_expr::{
    BinaryExpr, Expr, ExprSchemable, Operator, WindowFrameBound, WindowFrameUnits,
    WindowFunctionDefinition,
};
use datafusion_sql::sqlparser::ast;
use sluice_common::plan::{
    OperatorSpec, OverCall, OverFrame, OverSpec, PlanNode, RankFunction, RankSpec, RankWindow,
    SortSpec,
};
use sluice_common::types::flink_type_name;
use sluice_common::{not_supported, plan_err, Result};

use super::{unalias, Planned, Planner};

/// The ranking functions and how they number peers.
fn rank_function(wf: &WindowFunction) -> Option<RankFunction> {
    match &wf.fun {
        WindowFunctionDefinition::WindowUDF(f) => match f.name() {
            "row_number" => Some(RankFunction::RowNumber),
            "rank" => Some(RankFunction::Rank),
            "dense_rank" => Some(RankFunction::DenseRank),
            _ => None,
        },
        WindowFunctionDefinition::AggregateUDF(_) => None,
    }
}

fn window_function(e: &Expr) -> Result<&WindowFunction> {
    match unalias(e) {
        Expr::WindowFunction(wf) => Ok(wf),
        other => plan_err!("expected a window function, found {other}"),
    }
}

/// The `Sort` a `LIMIT` applies to, through aliases and projections.
fn sort_below(plan: &LogicalPlan) -> Option<*const LogicalPlan> {
    match plan {
        LogicalPlan::Sort(_) => Some(plan as *const LogicalPlan),
        LogicalPlan::SubqueryAlias(a) => sort_below(&a.input),
        LogicalPlan::Projection(p) => sort_below(&p.input),
        _ => None,
    }
}

/// The rank bounds a filter puts on a ranking column: `lower..=upper`, and the conjuncts
/// that do not bound it.
struct RankBounds {
    lower: u64,
    upper: u64,
    rest: Vec<Expr>,
}

impl Planner {
    /// `Window` not under a Top-N filter: an OVER aggregation.
    pub(super) fn lower_over(&self, w: &Window) -> Result<Planned> {
        let input = self.lower(&w.input)?;
        let in_schema = Arc::clone(&input.node.schema);
        let first = window_function(&w.window_expr[0])?;
        let params = &first.params;
        let mut calls = Vec::new();
        for e in &w.window_expr {
            let wf = window_function(e)?;
            if let Some(f) = rank_function(wf) {
                return not_supported!(
                    "{}() without an upper bound on its result: a ranking of an unbounded stream runs \
                     only as a Top-N, filtered in an outer query (SELECT * FROM (SELECT ..., {}() \
                     OVER (...) AS rn FROM t) WHERE rn <= N)",
                    f.sql(),
                    f.sql()
                );
            }
            let p = &wf.params;
            if p.partition_by != params.partition_by
                || p.order_by != params.order_by
                || p.window_frame != params.window_frame
            {
                return not_supported!(
                    "OVER windows with different PARTITION BY, ORDER BY or frames in one SELECT \
                     (Flink allows one); compute them in separate queries and join them"
                );
            }
            if p.filter.is_some() {
                return not_supported!("FILTER (WHERE ...) on an OVER aggregate");
            }
            calls.push(match &wf.fun {
                WindowFunctionDefinition::AggregateUDF(f) => aggregate_call(f, p),
                WindowFunctionDefinition::WindowUDF(f) if f.name() == "lag" => {
                    lag_call(&p.args, &in_schema)?
                }
                // The aggregates of the same names, over the frame.
                WindowFunctionDefinition::WindowUDF(f)
                    if matches!(f.name(), "first_value" | "last_value") =>
                {
                    let Some(aggregate) = self.functions.aggregates.get(f.name()) else {
                        return plan_err!("no aggregate {}", f.name());
                    };
                    aggregate_call(aggregate, p)
                }
                WindowFunctionDefinition::WindowUDF(f) => {
                    return not_supported!("{} in an OVER window", f.name().to_uppercase())
                }
            });
        }
        if input.node.is_updating() {
            // Flink refuses it too (FLINK-19059: its OverAggregate consumes no retractions).
            return not_supported!(
                "an OVER window over an updating input (a Top-N, an aggregate or a join whose \
                 rows are later retracted or updated): streaming OVER windows take append-only \
                 input, each row once, in time order (Flink: FLINK-19059)"
            );
        }
        let (time_column, processing_time) = over_order(params, &input.node)?;
        let frame = over_frame(params)?;
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::OverAggregate(Box::new(OverSpec {
                    partition_by: params.partition_by.clone(),
                    time_column,
                    processing_time,
                    frame,
                    calls,
                })),
                schema: Arc::clone(&w.schema),
                rowtime: input.node.rowtime,
                inputs: vec![input.node],
            },
            window: None,
        })
    }

    /// A filter that bounds a ranking function's result computed below it (through
    /// projections, aliases and other filters): a Top-N. `None`: not one.
    pub(super) fn lower_top_n(&self, f: &Filter) -> Result<Option<Planned>> {
        let conjuncts: Vec<Expr> = split_conjunction(&f.predicate)
            .into_iter()
            .cloned()
            .collect();
        let mut bounds = RankBounds {
            lower: 1,
            upper: u64::MAX,
            rest: Vec::new(),
        };
        let mut window = None;
        for c in conjuncts {
            match rank_bound(&c, f, &mut bounds) {
                Some(w) => window = Some(w),
                None => bounds.rest.push(c),
            }
        }
        let Some(window) = window else {
            return Ok(None);
        };
        if bounds.upper == u64::MAX {
            // Not a Top-N here (a lower bound over an inner Top-N's filter is a plain
            // filter on its rank; without any upper bound the ranking is refused below).
            return Ok(None);
        }
        let ranked = self.lower_through(&f.input, window, &|plan| match plan {
            LogicalPlan::Window(w) => self.lower_rank(w, &bounds),
            _ => plan_err!("a Top-N without its window"),
        })?;
        let Some(rest) = conjunction(bounds.rest) else {
            return Ok(Some(ranked));
        };
        Ok(Some(super::filter(rest, ranked)))
    }

    /// Plans the chain of aliases, projections and filters from `plan` down to the node
    /// `target`, which `bottom` plans.
    fn lower_through(
        &self,
        plan: &LogicalPlan,
        target: *const LogicalPlan,
        bottom: &dyn Fn(&LogicalPlan) -> Result<Planned>,
    ) -> Result<Planned> {
        if std::ptr::eq(plan, target) {
            return bottom(plan);
        }
        match plan {
            LogicalPlan::SubqueryAlias(a) => Ok(super::reschema(
                self.lower_through(&a.input, target, bottom)?,
                Arc::clone(&a.schema),
            )),
            LogicalPlan::Projection(p) => {
                let input = self.lower_through(&p.input, target, bottom)?;
                Ok(self.project(p, input))
            }
            LogicalPlan::Filter(f) => {
                let input = self.lower_through(&f.input, target, bottom)?;
                Ok(super::filter(f.predicate.clone(), input))
            }
            other => plan_err!("unexpected {} under a Top-N", other.display()),
        }
    }

    /// `ORDER BY` without `LIMIT`: a streaming sort when it starts with the event-time
    /// attribute ascending.
    pub(super) fn lower_sort(&self, sort: &Sort) -> Result<Planned> {
        if let Some(fetch) = sort.fetch {
            return self.lower_top_n_sort(sort, 0, fetch as u64);
        }
        let input = self.lower(&sort.input)?;
        let first = &sort.expr[0];
        let column = match unalias(&first.expr) {
            Expr::Column(c) => input.node.schema.index_of_column(c).ok(),
            _ => None,
        };
        match input.node.rowtime {
            Some(t) if column == Some(t) && first.asc => {
                if input.node.is_updating() {
                    return not_supported!("ORDER BY over an updating input");
                }
                Ok(Planned {
                    node: PlanNode {
                        spec: OperatorSpec::Sort(Box::new(SortSpec {
                            time_column: t,
                            order_by: sort.expr.clone(),
                        })),
                        schema: Arc::clone(&input.node.schema),
                        rowtime: Some(t),
                        inputs: vec![input.node],
                    },
                    window: None,
                })
            }
            rowtime => not_supported!(
                "ORDER BY {} on a continuous query: a streaming ORDER BY must start with the \
                 event-time attribute ascending{}, or be bounded by LIMIT (a Top-N over the whole \
                 stream)",
                first,
                rowtime
                    .map(|t| format!(" (ORDER BY {} ...)", input.node.schema.field(t).name()))
                    .unwrap_or_default()
            ),
        }
    }

    /// `LIMIT` (and `OFFSET`): over an `ORDER BY`, a Top-N over the whole stream; else the
    /// first rows.
    pub(super) fn lower_limit(&self, limit: &Limit) -> Result<Planned> {
        // (Not `get_fetch_type`: integer literals here are INT, it reads BIGINT ones.)
        let skip = match &limit.skip {
            None => 0,
            Some(e) => match literal_u64(e) {
                Some(n) => n,
                None => return not_supported!("OFFSET {e}: a constant row count is needed"),
            },
        };
        let fetch = match &limit.fetch {
            None => return not_supported!("OFFSET without LIMIT on a continuous query"),
            Some(e) => match literal_u64(e) {
                Some(n) => n,
                None => return not_supported!("LIMIT {e}: a constant row count is needed"),
            },
        };
        if let Some(sort) = sort_below(&limit.input) {
            return self.lower_through(&limit.input, sort, &|plan| match plan {
                LogicalPlan::Sort(s) => self.lower_top_n_sort(s, skip, fetch),
                _ => plan_err!("a LIMIT without its ORDER BY"),
            });
        }
        let input = self.lower(&limit.input)?;
        if input.node.is_updating() {
            return not_supported!(
                "LIMIT over an updating input (its first rows may be retracted later); order it \
                 (ORDER BY ... LIMIT n is a Top-N)"
            );
        }
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Limit {
                    offset: skip,
                    fetch,
                },
                schema: Arc::clone(&input.node.schema),
                rowtime: input.node.rowtime,
                inputs: vec![input.node],
            },
            window: input.window,
        })
    }

    /// `ORDER BY ... LIMIT fetch OFFSET skip`: a Top-N over the whole stream without the
    /// rank column.
    fn lower_top_n_sort(&self, sort: &Sort, skip: u64, fetch: u64) -> Result<Planned> {
        let input = self.lower(&sort.input)?;
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Rank(Box::new(RankSpec {
                    function: RankFunction::RowNumber,
                    partition_by: Vec::new(),
                    order_by: sort.expr.clone(),
                    lower: skip + 1,
                    upper: skip.saturating_add(fetch),
                    rank_column: false,
                    by_arrival: false,
                    window: None,
                })),
                schema: Arc::clone(&input.node.schema),
                rowtime: None,
                inputs: vec![input.node],
            },
            window: None,
        })
    }

    fn lower_rank(&self, w: &Window, bounds: &RankBounds) -> Result<Planned> {
        let wf = window_function(&w.window_expr[0])?;
        let function = rank_function(wf).expect("the Top-N matcher found a ranking function");
        let input = self.lower(&w.input)?;
        let p = &wf.params;
        if p.order_by.is_empty() {
            return not_supported!(
                "{}() OVER without ORDER BY (a Top-N needs an order)",
                function.sql()
            );
        }
        // Both bounds of the input's windows in PARTITION BY: a window Top-N.
        let partitioned_by = |c: usize| {
            p.partition_by.iter().any(|e| {
                matches!(unalias(e), Expr::Column(col)
                    if input.node.schema.index_of_column(col).ok() == Some(c))
            })
        };
        let window = input
            .window
            .as_ref()
            .filter(|w| partitioned_by(w.start) && partitioned_by(w.end))
            .map(|w| RankWindow {
                spec: w.spec,
                end_column: w.end,
            });
        let windowed = window.is_some();
        // Ordered by a processing-time attribute: by arrival.
        let by_arrival = matches!(p.order_by.as_slice(), [s] if matches!(unalias(&s.expr),
            Expr::Column(c) if input.node.schema.index_of_column(c).is_ok_and(|i|
                sluice_common::types::is_proctime(input.node.schema.field(i)))));
        if by_arrival && input.node.is_updating() {
            return not_supported!(
                "a Top-N or deduplication ordered by processing time over an updating input"
            );
        }
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Rank(Box::new(RankSpec {
                    function,
                    partition_by: p.partition_by.clone(),
                    order_by: p.order_by.clone(),
                    lower: bounds.lower,
                    upper: bounds.upper,
                    rank_column: true,
                    by_arrival,
                    window,
                })),
                schema: Arc::clone(&w.schema),
                // A window Top-N keeps the input's time attribute and window columns.
                rowtime: if windowed { input.node.rowtime } else { None },
                inputs: vec![input.node],
            },
            window: if windowed { input.window } else { None },
        })
    }
}

/// An aggregate over the frame, called as the window function was.
fn aggregate_call(f: &Arc<datafusion_expr::AggregateUDF>, p: &WindowFunctionParams) -> OverCall {
    OverCall::Aggregate(Expr::AggregateFunction(AggregateFunction::new_udf(
        Arc::clone(f),
        p.args.clone(),
        p.distinct,
        None,
        vec![],
        p.null_treatment,
    )))
}

/// `LAG(value [, offset [, default]])` with a constant offset.
fn lag_call(args: &[Expr], schema: &datafusion_common::DFSchema) -> Result<OverCall> {
    let value = args[0].clone();
    let offset = match args.get(1) {
        None => 1,
        Some(e) => match literal_u64(e) {
            Some(n) => n,
            _ => return plan_err!("LAG's offset must be a constant integer >= 0, found {e}"),
        },
    };
    let value_type = value.get_type(schema)?;
    let default = match args.get(2) {
        None => None,
        Some(d) => {
            let t = d.get_type(schema)?;
            let fits = t == value_type
                || t.is_null()
                || (t.is_numeric() && value_type.is_numeric())
                || (matches!(t, DataType::Utf8 | DataType::LargeUtf8)
                    && matches!(value_type, DataType::Utf8 | DataType::LargeUtf8));
            if !fits {
                return plan_err!(
                    "LAG's default ({}) must have the type of its value ({})",
                    flink_type_name(&t),
                    flink_type_name(&value_type)
                );
            }
            Some(d.clone().cast_to(&value_type, schema)?)
        }
    };
    Ok(OverCall::Lag {
        value,
        offset,
        default,
    })
}

/// The time attribute an OVER window is ordered by (Flink: a time attribute, ascending)
/// and whether it is a processing-time one.
fn over_order(params: &WindowFunctionParams, input: &PlanNode) -> Result<(usize, bool)> {
    let rowtime_name = input.rowtime.map(|r| input.schema.field(r).name().clone());
    let hint = match &rowtime_name {
        Some(n) => {
            format!("ORDER BY {n} (its event-time attribute) or a processing-time attribute")
        }
        None => "a time attribute: an event-time one (WATERMARK FOR ...) or a processing-time \
                 one (pt AS PROCTIME())"
            .to_string(),
    };
    let [order] = params.order_by.as_slice() else {
        return not_supported!(
            "an OVER window ordered by {} expressions: a streaming OVER window needs {hint}",
            params.order_by.len()
        );
    };
    let column = match unalias(&order.expr) {
        Expr::Column(c) => input.schema.index_of_column(c).ok(),
        _ => None,
    };
    let proctime = column.filter(|c| sluice_common::types::is_proctime(input.schema.field(*c)));
    match (column, input.rowtime, proctime) {
        (Some(c), _, Some(_)) if order.asc => Ok((c, true)),
        (Some(c), Some(r), None) if c == r && order.asc => Ok((c, false)),
        (Some(c), Some(r), _) if c == r => not_supported!(
            "an OVER window ordered by its time attribute descending: a streaming OVER window \
             orders ascending"
        ),
        (Some(_), _, Some(_)) => not_supported!(
            "an OVER window ordered by its time attribute descending: a streaming OVER window \
             orders ascending"
        ),
        _ => not_supported!(
            "an OVER window ordered by {}: a streaming OVER window needs {hint}",
            order.expr
        ),
    }
}

fn over_frame(params: &WindowFunctionParams) -> Result<OverFrame> {
    let frame = &params.window_frame;
    if !matches!(frame.end_bound, WindowFrameBound::CurrentRow) {
        return not_supported!(
            "an OVER window frame ending at {} (Flink's streaming OVER windows end at CURRENT ROW)",
            frame.end_bound
        );
    }
    let preceding = match &frame.start_bound {
        WindowFrameBound::Preceding(v) if v.is_null() => None,
        WindowFrameBound::Preceding(v) => Some(v.clone()),
        WindowFrameBound::CurrentRow => Some(ScalarValue::UInt64(Some(0))),
        WindowFrameBound::Following(_) => {
            return not_supported!("an OVER window frame starting after the current row")
        }
    };
    match frame.units {
        WindowFrameUnits::Rows => Ok(OverFrame::Rows {
            preceding: match preceding {
                None => None,
                Some(v) => Some(literal_u64(&Expr::Literal(v.clone(), None)).ok_or_else(|| {
                    sluice_common::SluiceError::Plan(format!(
                        "ROWS BETWEEN n PRECEDING needs a constant row count, found {v}"
                    ))
                })?),
            },
        }),
        WindowFrameUnits::Range => Ok(OverFrame::Range {
            preceding_ms: match preceding {
                None => None,
                Some(ScalarValue::UInt64(Some(0))) => Some(0),
                Some(v) => Some(
                    super::joins::fixed_interval_ms(&Expr::Literal(v.clone(), None)).ok_or_else(
                        || {
                            // (A bare number arrives coerced to an interval of months.)
                            let written = match &v {
                                ScalarValue::IntervalMonthDayNano(Some(i))
                                    if i.days == 0 && i.nanoseconds == 0 =>
                                {
                                    i.months.to_string()
                                }
                                other => other.to_string(),
                            };
                            sluice_common::SluiceError::NotSupported(format!(
                                "RANGE BETWEEN {written} PRECEDING: a RANGE frame over a time \
                                 attribute needs a day-time interval (RANGE BETWEEN INTERVAL \
                                 '10' SECOND PRECEDING AND CURRENT ROW)"
                            ))
                        },
                    )?,
                ),
            },
        }),
        WindowFrameUnits::Groups => not_supported!("GROUPS frames in OVER windows"),
    }
}

/// A non-negative integer constant.
fn literal_u64(e: &Expr) -> Option<u64> {
    match unalias(e) {
        Expr::Literal(v, _) => match v {
            ScalarValue::Int8(Some(n)) => u64::try_from(*n).ok(),
            ScalarValue::Int16(Some(n)) => u64::try_from(*n).ok(),
            ScalarValue::Int32(Some(n)) => u64::try_from(*n).ok(),
            ScalarValue::Int64(Some(n)) => u64::try_from(*n).ok(),
            ScalarValue::UInt8(Some(n)) => Some(*n as u64),
            ScalarValue::UInt16(Some(n)) => Some(*n as u64),
            ScalarValue::UInt32(Some(n)) => Some(*n as u64),
            ScalarValue::UInt64(Some(n)) => Some(*n),
            _ => None,
        },
        Expr::Cast(c) => literal_u64(&c.expr),
        Expr::TryCast(c) => literal_u64(&c.expr),
        // Constant arithmetic (`rn <= 2 + 1`).
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (l, r) = (literal_u64(left)?, literal_u64(right)?);
            match op {
                Operator::Plus => l.checked_add(r),
                Operator::Minus => l.checked_sub(r),
                Operator::Multiply => l.checked_mul(r),
                _ => None,
            }
        }
        _ => None,
    }
}

/// If `c` bounds the result of a ranking function below `f` (`rank <= N`, `rank < N`,
/// `rank = N`, `rank >= M`, `rank > M`, either way round, or `rank BETWEEN M AND N`),
/// narrows `bounds` and returns the `Window` computing the rank.
fn rank_bound(c: &Expr, f: &Filter, bounds: &mut RankBounds) -> Option<*const LogicalPlan> {
    let (column, lo, hi) = match unalias(c) {
        Expr::Between(b) if !b.negated => (&*b.expr, literal_u64(&b.low)?, literal_u64(&b.high)?),
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (column, op, n) = match (literal_u64(left), literal_u64(right)) {
                (None, Some(n)) => (&**left, *op, n),
                (Some(n), None) => (&**right, op.swap()?, n),
                _ => return None,
            };
            match op {
                Operator::LtEq => (column, 1, n),
                Operator::Lt => (column, 1, n.checked_sub(1)?),
                Operator::Eq => (column, n, n),
                Operator::GtEq => (column, n, u64::MAX),
                Operator::Gt => (column, n + 1, u64::MAX),
                _ => return None,
            }
        }
        _ => return None,
    };
    let Expr::Column(col) = unalias(column) else {
        return None;
    };
    let index = f.input.schema().index_of_column(col).ok()?;
    let window = ranking_window(&f.input, index)?;
    bounds.lower = bounds.lower.max(lo.max(1));
    bounds.upper = bounds.upper.min(hi);
    Some(window)
}

/// The `Window` whose ranking function column `index` of `plan` is, through aliases,
/// projections (a plain column) and filters.
fn ranking_window(plan: &LogicalPlan, index: usize) -> Option<*const LogicalPlan> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => ranking_window(&a.input, index),
        LogicalPlan::Filter(f) => ranking_window(&f.input, index),
        LogicalPlan::Projection(p) => match unalias(&p.expr[index]) {
            Expr::Column(c) => ranking_window(&p.input, p.input.schema().index_of_column(c).ok()?),
            _ => None,
        },
        LogicalPlan::Window(w) => {
            let n = w.input.schema().fields().len();
            let [e] = w.window_expr.as_slice() else {
                return None;
            };
            let wf = match unalias(e) {
                Expr::WindowFunction(wf) => wf,
                _ => return None,
            };
            (index == n && rank_function(wf).is_some()).then_some(plan as *const LogicalPlan)
        }
        _ => None,
    }
}

/// Inlines `WINDOW w AS (...)` definitions into every `OVER w` / `OVER (w ...)` of the same
/// `SELECT` (SQL:2016 §7.11: the referencing window takes the named window's `PARTITION BY`,
/// its `ORDER BY` and frame when it has none of its own; DataFusion drops the named
/// window's `PARTITION BY` when the reference adds an `ORDER BY`).
pub(super) fn inline_named_windows(query: &mut ast::Query) {
    use std::ops::ControlFlow;
    struct Inline;
    impl ast::VisitorMut for Inline {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
            if let ast::SetExpr::Select(select) = query.body.as_mut() {
                inline_in_select(select);
            }
            ControlFlow::Continue(())
        }
    }
    let _ = ast::VisitMut::visit(query, &mut Inline);
}

/// `[OFFSET m ROWS] FETCH FIRST|NEXT n ROWS ONLY` (the SQL standard's spelling, which Flink
/// accepts) as `LIMIT n [OFFSET m]`, in every query of the statement. `WITH TIES` and
/// `PERCENT` are left for the planner to refuse.
pub(super) fn fetch_as_limit(query: &mut ast::Query) {
    use std::ops::ControlFlow;
    struct Fetch;
    impl ast::VisitorMut for Fetch {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
            let plain = query
                .fetch
                .as_ref()
                .is_some_and(|f| !f.with_ties && !f.percent && f.quantity.is_some());
            let offset_only = match &query.limit_clause {
                None => Some(None),
                Some(ast::LimitClause::LimitOffset {
                    limit: None,
                    offset,
                    limit_by,
                }) if limit_by.is_empty() => Some(offset.clone()),
                _ => None,
            };
            if let (true, Some(offset)) = (plain, offset_only) {
                let fetch = query.fetch.take().expect("checked");
                query.limit_clause = Some(ast::LimitClause::LimitOffset {
                    limit: fetch.quantity,
                    offset,
                    limit_by: Vec::new(),
                });
            }
            ControlFlow::Continue(())
        }
    }
    let _ = ast::VisitMut::visit(query, &mut Fetch);
}

fn inline_in_select(select: &mut ast::Select) {
    use std::ops::ControlFlow;
    if select.named_window.is_empty() {
        return;
    }
    let defined: Vec<(String, ast::NamedWindowExpr)> = select
        .named_window
        .iter()
        .map(|d| (d.0.value.clone(), d.1.clone()))
        .collect();
    // A named window's full spec, its own references resolved (a cycle stops after as many
    // steps as there are definitions).
    fn resolve(
        name: &str,
        defined: &[(String, ast::NamedWindowExpr)],
        depth: usize,
    ) -> Option<ast::WindowSpec> {
        if depth > defined.len() {
            return None;
        }
        let (_, expr) = defined.iter().find(|(n, _)| n == name)?;
        match expr {
            ast::NamedWindowExpr::NamedWindow(other) => resolve(&other.value, defined, depth + 1),
            ast::NamedWindowExpr::WindowSpec(spec) => merge(spec, defined, depth + 1),
        }
    }
    fn merge(
        spec: &ast::WindowSpec,
        defined: &[(String, ast::NamedWindowExpr)],
        depth: usize,
    ) -> Option<ast::WindowSpec> {
        let Some(base_name) = &spec.window_name else {
            return Some(spec.clone());
        };
        let base = resolve(&base_name.value, defined, depth)?;
        Some(ast::WindowSpec {
            window_name: None,
            partition_by: if spec.partition_by.is_empty() {
                base.partition_by
            } else {
                spec.partition_by.clone()
            },
            order_by: if spec.order_by.is_empty() {
                base.order_by
            } else {
                spec.order_by.clone()
            },
            window_frame: spec.window_frame.clone().or(base.window_frame),
        })
    }
    struct Calls<'a> {
        defined: &'a [(String, ast::NamedWindowExpr)],
    }
    impl ast::VisitorMut for Calls<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &mut ast::Expr) -> ControlFlow<()> {
            if let ast::Expr::Function(f) = expr {
                let resolved = match &f.over {
                    Some(ast::WindowType::NamedWindow(name)) => {
                        resolve(&name.value, self.defined, 0)
                    }
                    Some(ast::WindowType::WindowSpec(spec)) if spec.window_name.is_some() => {
                        merge(spec, self.defined, 0)
                    }
                    _ => None,
                };
                if let Some(spec) = resolved {
                    f.over = Some(ast::WindowType::WindowSpec(spec));
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut calls = Calls { defined: &defined };
    for item in &mut select.projection {
        let _ = ast::VisitMut::visit(item, &mut calls);
    }
    if let Some(q) = &mut select.qualify {
        let _ = ast::VisitMut::visit(q, &mut calls);
    }
    select.named_window.clear();
}
