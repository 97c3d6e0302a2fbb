//! Plans of the ordered operators (Flink SQL "Over Aggregation", "Top-N",
//! "Deduplication"): rows of a partition put in order and numbered or aggregated over
//! the rows before them.

use datafusion_expr::{Expr, SortExpr};

/// `agg(...) OVER (PARTITION BY ... ORDER BY rowtime <frame>)` (Flink SQL "Over
/// Aggregation"). Output: every input column, then one column per call, in order. Each
/// row leaves once the watermark reaches its event time, in event-time order, with the
/// calls evaluated over its frame; the output keeps the input's event-time attribute and
/// is append-only.
///
/// Lateness (Flink's `RowTime*PrecedingFunction`): a row whose time is not after the last
/// time its partition already emitted cannot be placed any more; it is dropped and counted
/// (`late_rows_dropped`).
#[derive(Debug, Clone)]
pub struct OverSpec {
    /// `PARTITION BY` expressions over the input (none: one partition).
    pub partition_by: Vec<Expr>,
    /// The input's time attribute the partition is ordered by (ascending).
    pub time_column: usize,
    /// `time_column` is a processing-time attribute (`PROCTIME()`): rows are taken in
    /// arrival order and leave at once, none is late (Flink's `ProcTime*` OVER functions).
    pub processing_time: bool,
    /// Which earlier rows each row's aggregates cover.
    pub frame: OverFrame,
    /// The calls, one output column each.
    pub calls: Vec<OverCall>,
}

/// The frame of an OVER window: from some rows (or some time) before the current row up
/// to the current row (Flink allows only `CURRENT ROW` as the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OverFrame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW` (`None`: `UNBOUNDED PRECEDING`): the
    /// current row and the `n` rows before it in (time, arrival) order.
    Rows {
        /// Rows before the current one.
        preceding: Option<u64>,
    },
    /// `RANGE BETWEEN INTERVAL ... PRECEDING AND CURRENT ROW` (`None`: `UNBOUNDED
    /// PRECEDING`, the default frame): every row of the partition with time in
    /// `[t - preceding_ms, t]`, both ends inclusive, peers with the same time included
    /// (so peers get the same values).
    Range {
        /// The interval (ms).
        preceding_ms: Option<i64>,
    },
}

/// One call of an OVER window.
#[derive(Debug, Clone)]
pub enum OverCall {
    /// An aggregate function over the frame: an `Expr::AggregateFunction` over the input.
    Aggregate(Expr),
    /// `LAG(value [, offset [, default]])`: `value` of the row `offset` rows before the
    /// current one in the partition (in (time, arrival) order, whatever the frame), or
    /// `default` (NULL when absent) when there is no such row.
    Lag {
        /// The value, over the input.
        value: Expr,
        /// Rows back (>= 1).
        offset: u64,
        /// The value when there is no such row, over the input, of `value`'s type.
        default: Option<Expr>,
    },
}

/// The numbering function of a Top-N (Flink SQL "Top-N").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RankFunction {
    /// `ROW_NUMBER()`: 1, 2, 3, ... (rows with equal sort keys in arrival order).
    RowNumber,
    /// `RANK()`: peers share a number; a gap follows them.
    Rank,
    /// `DENSE_RANK()`: peers share a number; no gap.
    DenseRank,
}

impl RankFunction {
    /// The SQL name.
    pub fn sql(self) -> &'static str {
        match self {
            RankFunction::RowNumber => "ROW_NUMBER",
            RankFunction::Rank => "RANK",
            RankFunction::DenseRank => "DENSE_RANK",
        }
    }
}

/// Top-N (Flink SQL "Top-N", "Deduplication"): `ROW_NUMBER() | RANK() | DENSE_RANK() OVER
/// (PARTITION BY ... ORDER BY ...)` filtered to the ranks `lower..=upper`. Output: every
/// input column, then the rank (`BIGINT`) when `rank_column`. The output is updating: the
/// rows in the range as the input changes. Over an append-only input a partition keeps
/// only the rows that can still rank within `upper`; over an updating input every live
/// row (a deleted row leaves the ranking wherever it is and the next one moves up).
///
/// Rows with equal sort keys (peers) are ordered by arrival, the earlier first (Flink's
/// rule; `../shared/cases/README.md` rule 9). `ROW_NUMBER() ... = 1` ordered by the
/// event-time attribute alone is deduplication (EXPLAIN calls it `Deduplicate`).
#[derive(Debug, Clone)]
pub struct RankSpec {
    /// The numbering function.
    pub function: RankFunction,
    /// `PARTITION BY` expressions over the input (none: one partition).
    pub partition_by: Vec<Expr>,
    /// `ORDER BY` over the input.
    pub order_by: Vec<SortExpr>,
    /// The smallest rank kept (>= 1).
    pub lower: u64,
    /// The largest rank kept.
    pub upper: u64,
    /// The rank is an output column (the last one).
    pub rank_column: bool,
    /// `ORDER BY` is one processing-time attribute (`PROCTIME()`): rows rank by arrival,
    /// the earlier first when ascending (the first rows stay: append-only output), the
    /// later first when descending. The input is append-only.
    pub by_arrival: bool,
    /// A window Top-N (Flink SQL "Window Top-N", "Window Deduplication"): `PARTITION BY`
    /// holds both bounds of the input's windows; each window's ranking is emitted once,
    /// when it fires, append-only, and its rows are dropped then. `None`: a Top-N over
    /// the whole stream.
    pub window: Option<RankWindow>,
}

/// The windows of a window Top-N.
#[derive(Debug, Clone, Copy)]
pub struct RankWindow {
    /// The window table function the input's windows come from (firing rule, time zone).
    pub spec: super::WindowSpec,
    /// The input's `window_end` column.
    pub end_column: usize,
}

impl RankSpec {
    /// Ranked by arrival, earliest first: the rows in the range never change (Flink's
    /// processing-time keep-first deduplication is append-only).
    pub fn keeps_first_arrivals(&self) -> bool {
        self.by_arrival && self.order_by.first().is_some_and(|s| s.asc)
    }

    /// `ROW_NUMBER() ... = 1` ordered by `input`'s event-time attribute alone: Flink's
    /// deduplication (keep the first row of each partition when ascending, the last when
    /// descending).
    pub fn is_deduplication(&self, input: &super::PlanNode) -> bool {
        // (A window table function's output has two time attributes: the table's and
        // `window_time`.)
        let time_attribute = |i: usize| {
            input.rowtime == Some(i)
                || crate::types::is_proctime(input.schema.field(i))
                || (self.window.is_some()
                    && matches!(
                        input.schema.field(i).data_type(),
                        datafusion_common::arrow::datatypes::DataType::Timestamp(..)
                    ))
        };
        let by_time = matches!(self.order_by.as_slice(), [s] if matches!(&s.expr,
            Expr::Column(c) if input.schema.index_of_column(c).is_ok_and(time_attribute)));
        by_time && self.function == RankFunction::RowNumber && self.lower == 1 && self.upper == 1
    }

    /// The columns of `input` that identify a row, when every update of a row only moves
    /// it up in this ranking (Flink's `UpdateFastStrategy` and `UpdatableTopNFunction`);
    /// else `None`.
    ///
    /// That holds when `input` is a `GROUP BY` over append-only input (through projections
    /// that keep its key columns), the partition is some of its key columns, and the first
    /// `ORDER BY` key is its `COUNT(*)` descending (no `DISTINCT`, no `FILTER`): every
    /// update of a group follows at least one new input row, so the count grows with each
    /// one, and no group is ever deleted. A Top-N over such input keeps only the rows
    /// ranked within the range: a row pushed out comes back only by an update of its own,
    /// which carries its whole new value, and the `-U` before each `+U` changes nothing
    /// that the `+U` does not. That needs `ROW_NUMBER` or `RANK` (a row's number counts the
    /// rows ahead of it, which only grow); not `DENSE_RANK`, which counts distinct keys
    /// ahead: when two counts meet, the rows below move up without an update of their own.
    /// The key columns returned are the group's, as `input` numbers them. (A state TTL on the aggregate breaks the rule: a forgotten group's
    /// count starts again from 1; the runtime does not take this path then.)
    pub fn update_fast_key(&self, input: &super::PlanNode) -> Option<Vec<usize>> {
        if self.window.is_some()
            || self.by_arrival
            || !matches!(self.function, RankFunction::RowNumber | RankFunction::Rank)
        {
            return None;
        }
        let first = self.order_by.first().filter(|s| !s.asc)?;
        let column_of = |node: &super::PlanNode, e: &Expr| match unaliased(e) {
            Expr::Column(c) => node.schema.index_of_column(c).ok(),
            _ => None,
        };
        // Follow projections down to the aggregate; `map[i]`: where column `i` of `input`
        // is in the node reached (None: computed).
        let mut node = input;
        let mut map: Vec<Option<usize>> = (0..input.schema.fields().len()).map(Some).collect();
        let (keys, aggregates) = loop {
            match &node.spec {
                super::OperatorSpec::Project { exprs } => {
                    let below = node.input();
                    map = map
                        .iter()
                        .map(|m| m.and_then(|i| column_of(below, &exprs[i])))
                        .collect();
                    node = below;
                }
                super::OperatorSpec::GroupAggregate { keys, aggregates }
                    if !node.input().is_updating() && !keys.is_empty() =>
                {
                    break (keys.len(), aggregates);
                }
                _ => return None,
            }
        };
        let at_aggregate = |e: &Expr| column_of(input, e).and_then(|i| map[i]);
        let count_star = at_aggregate(&first.expr)
            .and_then(|i| i.checked_sub(keys))
            .is_some_and(|a| match unaliased(&aggregates[a]) {
                Expr::AggregateFunction(f) => {
                    f.func.name() == "count"
                        && !f.params.distinct
                        && f.params.filter.is_none()
                        && f.params
                            .args
                            .iter()
                            .all(|a| matches!(unaliased(a), Expr::Literal(v, _) if !v.is_null()))
                }
                _ => false,
            });
        let partition_in_keys = self
            .partition_by
            .iter()
            .all(|e| at_aggregate(e).is_some_and(|i| i < keys));
        if !count_star || !partition_in_keys {
            return None;
        }
        // Every key column of the aggregate must be a column of `input`.
        (0..keys)
            .map(|k| map.iter().position(|m| *m == Some(k)))
            .collect()
    }
}

/// `ORDER BY` starting with the event-time attribute ascending (Flink SQL "ORDER BY
/// clause": a streaming sort must start with a time attribute ascending): rows wait until
/// the watermark reaches their time, then leave in the order of `order_by` (time first,
/// then the other keys, then arrival). Append-only; keeps the event-time attribute. A row
/// at or before the last time already released cannot be placed any more: it is dropped
/// and counted as late.
#[derive(Debug, Clone)]
pub struct SortSpec {
    /// The input's event-time attribute (the first sort key).
    pub time_column: usize,
    /// The whole `ORDER BY`, over the input.
    pub order_by: Vec<SortExpr>,
}

/// `e` without its aliases.
fn unaliased(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unaliased(&a.expr),
        e => e,
    }
}
