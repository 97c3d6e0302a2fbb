//! The physical operator graph: what the planner emits, what EXPLAIN prints, and what the
//! runtime builds live operators from (one `match` over [`OperatorSpec`]).
//!
//! A plan is plain data. Expressions are DataFusion logical [`Expr`]s typed and coerced
//! against the input's [`DFSchema`]; the runtime lowers them to physical expressions.
//! Batches on every edge match the producing node's `schema` by position.

use std::collections::BTreeMap;
use std::fmt;

use datafusion_common::DFSchemaRef;
use datafusion_expr::Expr;

mod ordered;
pub use ordered::{OverCall, OverFrame, OverSpec, RankFunction, RankSpec, RankWindow, SortSpec};

/// One node of the physical operator graph: an operator and the nodes feeding it.
#[derive(Debug, Clone)]
pub struct PlanNode {
    /// What this operator does.
    pub spec: OperatorSpec,
    /// The operators feeding this one, in input-index order.
    pub inputs: Vec<PlanNode>,
    /// Output schema. Every batch this node emits has exactly these columns, in order.
    pub schema: DFSchemaRef,
    /// Index of the event-time attribute (a column with watermarks) in `schema`, if any.
    pub rowtime: Option<usize>,
}

impl PlanNode {
    /// The single input of a unary operator.
    pub fn input(&self) -> &PlanNode {
        &self.inputs[0]
    }

    /// Whether this node's output is a changelog (rows may be updated or deleted later:
    /// `+I`, `-U`, `+U`, `-D`) rather than append-only.
    pub fn is_updating(&self) -> bool {
        match &self.spec {
            OperatorSpec::GroupAggregate { .. } | OperatorSpec::ChangelogNormalize { .. } => true,
            // A window Top-N emits each window's ranking once, when the window fires.
            OperatorSpec::Rank(spec) => spec.window.is_none() && !spec.keeps_first_arrivals(),
            // An interval or window join emits a padded row once, when its partners can no
            // longer come (its bounds or its window passed).
            // A temporal join emits each probe row once, when the watermark passes it.
            OperatorSpec::Join(spec) if spec.temporal.is_some() => self.input().is_updating(),
            OperatorSpec::Join(spec) if spec.interval.is_some() || spec.window.is_some() => {
                self.inputs.iter().any(|i| i.is_updating())
            }
            OperatorSpec::Join(spec) => match spec.kind {
                // A padded row is retracted when its first partner arrives; an anti join's
                // row when its first match arrives.
                JoinKind::Left
                | JoinKind::Right
                | JoinKind::Full
                | JoinKind::LeftAnti
                | JoinKind::LeftMark => true,
                JoinKind::Inner | JoinKind::LeftSemi => self.inputs.iter().any(|i| i.is_updating()),
            },
            OperatorSpec::Source(spec) => spec.is_changelog(),
            OperatorSpec::WindowAssign { .. }
            | OperatorSpec::WindowAggregate(_)
            | OperatorSpec::OverAggregate(_)
            | OperatorSpec::Sort(_)
            | OperatorSpec::MatchRecognize(_) => false,
            OperatorSpec::Filter { .. }
            | OperatorSpec::Project { .. }
            | OperatorSpec::Unnest { .. }
            | OperatorSpec::Expand { .. }
            | OperatorSpec::LookupJoin(_)
            | OperatorSpec::Union
            | OperatorSpec::Limit { .. }
            | OperatorSpec::Sink(_) => self.inputs.iter().any(|i| i.is_updating()),
        }
    }
}

/// The kinds of operator Sluice runs. One variant per operator; the runtime's
/// `build_operator` is the one `match` over it.
#[derive(Debug, Clone)]
pub enum OperatorSpec {
    /// Reads a table through a connector, evaluates computed columns, assigns watermarks.
    Source(SourceSpec),
    /// Keeps the rows for which `predicate` is true (NULL counts as false).
    Filter {
        /// Boolean expression over the input schema.
        predicate: Expr,
    },
    /// Evaluates one expression per output column over the input schema.
    Project {
        /// One expression per output column, over the input schema.
        exprs: Vec<Expr>,
    },
    /// Each input row once per projection (Flink's `Expand`): `GROUPING SETS`, `ROLLUP`
    /// and `CUBE` give one row per grouping set, the keys outside the set NULL, and the
    /// set's grouping id.
    Expand {
        /// Per grouping set, one expression per output column, over the input schema.
        projections: Vec<Vec<Expr>>,
    },
    /// `CROSS JOIN UNNEST(array, ...)` (Flink SQL "Joins > Array Expansion"): each input
    /// row once per element of its arrays (zipped: as many rows as the longest, the shorter
    /// padded with NULL). Output: the input columns in order, each unnested array column
    /// replaced by its element column; the other columns repeated.
    Unnest {
        /// Indices (input schema) of the `ARRAY` columns unnested.
        lists: Vec<usize>,
        /// What a NULL or empty array gives.
        nulls: UnnestNulls,
    },
    /// Window table function without aggregation: appends `window_start`, `window_end`
    /// and `window_time` (all `TIMESTAMP(3)`) to every row, once per window the row
    /// belongs to; drops a (row, window) pair whose window has fired (late).
    WindowAssign {
        /// The window kind and sizes.
        window: WindowSpec,
        /// Index of the time attribute (`DESCRIPTOR(col)`) in the input schema.
        time_column: usize,
    },
    /// Keyed aggregation per window (window TVF followed by `GROUP BY window_start,
    /// window_end, ...`). Emits one row per (window, key) when the window fires.
    WindowAggregate(WindowAggregateSpec),
    /// Updating aggregation (`GROUP BY` without windows, global aggregates, `DISTINCT`):
    /// output schema = keys then aggregates; the output is a changelog.
    GroupAggregate {
        /// `GROUP BY` expressions over the input (none: a global aggregate).
        keys: Vec<Expr>,
        /// The aggregate function calls.
        aggregates: Vec<Expr>,
    },
    /// `agg(...) OVER (...)`: per row, aggregates over the rows before it in its
    /// partition (see [`OverSpec`]). Output: the input's columns, then one per call.
    OverAggregate(Box<OverSpec>),
    /// Top-N and deduplication: the rows ranked within a range in their partition (see
    /// [`RankSpec`]). Output: the input's columns (then the rank); a changelog.
    Rank(Box<RankSpec>),
    /// A streaming sort on event time (see [`SortSpec`]). Output: the input's columns.
    Sort(Box<SortSpec>),
    /// `LIMIT fetch OFFSET offset` without `ORDER BY`: the rows `offset + 1 ..= offset +
    /// fetch` in arrival order, then nothing (one subtask; append-only input).
    Limit {
        /// Rows skipped first.
        offset: u64,
        /// Rows passed on after them.
        fetch: u64,
    },
    /// `UNION ALL` of its inputs (two or more, with the same column types): every row of
    /// every input, in arrival order; the output schema's names are the first input's.
    /// The watermark is the minimum over the inputs (the runtime's input gate); an
    /// updating input makes the union updating.
    Union,
    /// A regular join of two inputs (input 0 the left, 1 the right): every pair of rows
    /// whose keys are equal and for which the residual condition is true, kept up to date
    /// as either input changes (Flink SQL "Joins > Regular Joins"). Output: the left
    /// columns then the right ones (semi and anti joins: the left ones only).
    Join(Box<JoinSpec>),
    /// Flink's ChangelogNormalize: the last row per primary key (`key`: column indexes),
    /// so that a changelog whose events may repeat (`'table.exec.source.cdc-events-duplicate'`)
    /// changes each key once per change. Output: the input's columns, a changelog: `+I` for
    /// a key's first row, `-U`/`+U` for a changed row, nothing for a repeated one; a `-U` or
    /// `-D` emits `-D` of the row held (nothing when none is held).
    ChangelogNormalize {
        /// The primary key's columns (indexes in the input schema).
        key: Vec<usize>,
    },
    /// A lookup join (see [`LookupJoinSpec`]): one input, the probe; the table looked up
    /// is read by the operator. Output: the probe's columns then the table's.
    LookupJoin(Box<LookupJoinSpec>),
    /// Writes its input to a sink table (`INSERT INTO`).
    Sink(SinkSpec),
    /// `MATCH_RECOGNIZE`: row pattern recognition per partition key, in event-time
    /// order. Append-only output: one row per match (`ONE ROW PER MATCH`: partition
    /// columns then measures) or per matched row (`ALL ROWS PER MATCH`: partition
    /// columns, measures, then the input's other columns).
    MatchRecognize(Box<MatchRecognizeSpec>),
}

/// The kinds of regular join (semi and anti joins come from `IN` / `EXISTS` subqueries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JoinKind {
    /// Pairs that match.
    Inner,
    /// Pairs that match, and each left row without a partner padded with NULLs.
    Left,
    /// Pairs that match, and each right row without a partner padded with NULLs.
    Right,
    /// Both of the above.
    Full,
    /// Each left row that has at least one partner, once (`IN`, `EXISTS`).
    LeftSemi,
    /// Each left row that has no partner (`NOT IN`, `NOT EXISTS`).
    LeftAnti,
    /// Each left row, with a last BOOLEAN column `mark`: whether it has a partner (never
    /// NULL). `IN` / `EXISTS` inside `OR`; the planner lets a mark be read only where
    /// FALSE and NULL would filter alike.
    LeftMark,
}

impl JoinKind {
    /// Left rows without a partner are emitted padded with NULLs.
    pub fn left_outer(self) -> bool {
        matches!(self, JoinKind::Left | JoinKind::Full)
    }

    /// Right rows without a partner are emitted padded with NULLs.
    pub fn right_outer(self) -> bool {
        matches!(self, JoinKind::Right | JoinKind::Full)
    }

    /// A semi or anti join: the output is left rows only.
    pub fn left_only(self) -> bool {
        matches!(self, JoinKind::LeftSemi | JoinKind::LeftAnti)
    }

    /// The SQL name.
    pub fn sql(self) -> &'static str {
        match self {
            JoinKind::Inner => "INNER",
            JoinKind::Left => "LEFT OUTER",
            JoinKind::Right => "RIGHT OUTER",
            JoinKind::Full => "FULL OUTER",
            JoinKind::LeftSemi => "LEFT SEMI",
            JoinKind::LeftAnti => "LEFT ANTI",
            JoinKind::LeftMark => "LEFT MARK",
        }
    }
}

/// A planned regular join (see `OperatorSpec::Join`).
///
/// Two rows are partners when their keys are equal (a NULL key part never equals anything
/// unless `null_equal`) and `residual` is true for the pair. Under `null_aware` (a `NOT IN`
/// subquery, SQL's three-valued `<>` ALL) the one key is compared so that a NULL on either
/// side is a partner of every row: `x NOT IN (subquery)` is true only when no subquery value
/// equals `x` or is NULL, and never true for a NULL `x` unless the subquery is empty.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    /// Inner, outer, semi or anti.
    pub kind: JoinKind,
    /// Key expressions over the left input's schema.
    pub left_keys: Vec<Expr>,
    /// Key expressions over the right input's schema, of the same types pairwise.
    pub right_keys: Vec<Expr>,
    /// NULL key parts equal each other (`IS NOT DISTINCT FROM` keys).
    pub null_equal: bool,
    /// `NOT IN` semantics (see the type docs); then there is exactly one key.
    pub null_aware: bool,
    /// The non-equality part of the condition, over `pair_schema`.
    pub residual: Option<Expr>,
    /// The left input's columns then the right input's: what `residual` reads.
    pub pair_schema: DFSchemaRef,
    /// An interval join (Flink SQL "Joins > Interval Joins"): the condition bounds the
    /// right input's event time by the left's. `None`: a regular join.
    pub interval: Option<IntervalBounds>,
    /// A window join (Flink SQL "Window Join"): both inputs carry the windows of the same
    /// window table function and the condition equates their bounds. `None`: not one.
    pub window: Option<WindowJoinColumns>,
    /// An event-time temporal join (`JOIN versioned FOR SYSTEM_TIME AS OF left.t`, Flink
    /// SQL "Joins > Temporal Joins"): each left row joins the right input's version valid
    /// at its time. Then `kind` is inner or left, the keys are the right input's primary
    /// key (other equalities are in the residual) and the left input is append-only.
    pub temporal: Option<TemporalJoinTimes>,
}

/// A lookup join (Flink SQL "Joins > Lookup Join"): `probe JOIN t FOR SYSTEM_TIME AS OF
/// probe.proc_time ON ...` with `proc_time` a processing-time attribute. Each probe row
/// (append-only input) is joined when it arrives with the rows of table `t` that have its
/// key and satisfy `residual` at that processing time (as `t`'s `'lookup.cache'` options
/// say); `LEFT` pads a row without any. `t` is read by the operator, not streamed.
#[derive(Debug, Clone)]
pub struct LookupJoinSpec {
    /// Inner or left.
    pub kind: JoinKind,
    /// Key expressions over the probe's schema.
    pub left_keys: Vec<Expr>,
    /// Key expressions over `table_schema`, of the same types pairwise.
    pub right_keys: Vec<Expr>,
    /// The other conditions, over `pair_schema`.
    pub residual: Option<Expr>,
    /// The probe's columns then the table's.
    pub pair_schema: DFSchemaRef,
    /// The table looked up, as a source would read it (options, physical and computed
    /// columns; its watermark is not used).
    pub table: SourceSpec,
    /// The table's columns as the join sees them (qualified by its alias).
    pub table_schema: DFSchemaRef,
}

/// The event-time attributes of a temporal join's inputs (indexes in each input's
/// schema): the left (probe) row's time picks the right (versioned) input's version, the
/// row of the key with the largest time at or before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemporalJoinTimes {
    /// The probe input's event-time attribute (`FOR SYSTEM_TIME AS OF` it).
    pub left_time: usize,
    /// The versioned input's event-time attribute (when each version starts).
    pub right_time: usize,
}

/// The window bound columns of a window join's inputs (indexes in each input's schema,
/// `TIMESTAMP(3)` values) and their windows. The bound equalities are among the join's
/// keys too.
#[derive(Debug, Clone, Copy)]
pub struct WindowJoinColumns {
    /// The window table function both inputs come from (firing rule, time zone).
    pub window: WindowSpec,
    /// `window_start` of the left input.
    pub left_start: usize,
    /// `window_end` of the left input.
    pub left_end: usize,
    /// `window_start` of the right input.
    pub right_start: usize,
    /// `window_end` of the right input.
    pub right_end: usize,
}

/// The time bounds of an interval join: a left row at `tl` and a right row at `tr` (their
/// event-time attributes, ms) are partners only when `lower_ms <= tr - tl <= upper_ms`
/// (strict bounds of the SQL already turned into inclusive ones: `<` is `<=` minus 1 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalBounds {
    /// The left input's event-time column (index in its schema).
    pub left_time: usize,
    /// The right input's event-time column (index in its schema).
    pub right_time: usize,
    /// Smallest `tr - tl` (ms), inclusive.
    pub lower_ms: i64,
    /// Largest `tr - tl` (ms), inclusive.
    pub upper_ms: i64,
}

/// Which row of a (partial) match a navigation picks (`MATCH_RECOGNIZE` DEFINE and
/// MEASURES, SQL:2016 §4.16 row pattern navigation). While a `DEFINE` condition is
/// evaluated, the row being tested counts as the last row of the match, mapped to the
/// variable being defined (running semantics); `MEASURES` of `ONE ROW PER MATCH` see the
/// whole match (final semantics), of `ALL ROWS PER MATCH` the rows up to the current one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NavRow {
    /// The `n`-th last row (0: the last) mapped to one of `vars` (pattern variable
    /// indexes; `None`: any row of the match). `A.x` is `Last { vars: [A], n: 0 }`, a bare
    /// column `x` is `Last { vars: None, n: 0 }`, `LAST(A.x, n)`.
    Last {
        /// Variables (indexes into `MatchRecognizeSpec::variables`); `None`: all rows.
        vars: Option<Vec<usize>>,
        /// Rows back from the last one.
        n: u64,
    },
    /// The `n`-th row (0: the first) mapped to one of `vars`: `FIRST(A.x, n)`.
    First {
        /// Variables; `None`: all rows.
        vars: Option<Vec<usize>>,
        /// Rows on from the first one.
        n: u64,
    },
    /// The row `n` rows before `base` in the partition, matched or not (`PREV(x, n)`;
    /// NULL before the partition's first row).
    Prev {
        /// The row counted back from.
        base: Box<NavRow>,
        /// Rows back (>= 1).
        n: u64,
    },
}

impl NavRow {
    /// How many rows before the row it counts from a `PREV` chain reaches (0 for `FIRST`
    /// and `LAST`).
    pub fn prev_depth(&self) -> u64 {
        match self {
            NavRow::Prev { base, n } => n + base.prev_depth(),
            _ => 0,
        }
    }
}

/// Aggregates over the rows mapped to pattern variables (`AVG(A.price)`, `COUNT(A.*)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NavAggregate {
    /// `COUNT(x)` (non-NULL values) or `COUNT(*)` / `COUNT(A.*)` (rows).
    Count,
    /// `SUM(x)`.
    Sum,
    /// `AVG(x)`: always DOUBLE.
    Avg,
    /// `MIN(x)`.
    Min,
    /// `MAX(x)`.
    Max,
}

/// One value a `MATCH_RECOGNIZE` expression reads from the match: a column of the nav
/// schema (`MatchRecognizeSpec::nav_schema`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MatchNav {
    /// Input column `column` of the row `row` picks (NULL when there is no such row).
    Value {
        /// Which row.
        row: NavRow,
        /// Input column index.
        column: usize,
    },
    /// An aggregate over the rows mapped to `vars` (all rows when `None`) of input column
    /// `column` (`None`: count rows).
    Aggregate {
        /// The function.
        func: NavAggregate,
        /// Variables; `None`: all rows.
        vars: Option<Vec<usize>>,
        /// Input column; `None` for `COUNT(*)` / `COUNT(A.*)`.
        column: Option<usize>,
    },
    /// `MATCH_ROWTIME()`: the event time of the last row (of the match so far).
    MatchRowtime,
    /// `CLASSIFIER()`: the variable the last row (so far) is mapped to.
    Classifier,
    /// `MATCH_NUMBER()`: 1 for the first match of the partition, then 2, ...
    MatchNumber,
}

/// Where the search goes on after a match (`AFTER MATCH SKIP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchSkip {
    /// `PAST LAST ROW`.
    PastLastRow,
    /// `TO NEXT ROW`.
    ToNextRow,
    /// `TO FIRST v` (variable index).
    ToFirst(usize),
    /// `TO LAST v` (variable index).
    ToLast(usize),
}

/// A planned `MATCH_RECOGNIZE` (see `OperatorSpec::MatchRecognize`).
#[derive(Debug, Clone)]
pub struct MatchRecognizeSpec {
    /// `PARTITION BY` columns (input column indexes; empty: one partition).
    pub partition_by: Vec<usize>,
    /// The input's event-time attribute (`ORDER BY`).
    pub rowtime: usize,
    /// The pattern.
    pub pattern: crate::row_pattern::RowPattern,
    /// The pattern variables, in `RowPattern::variables` order (their indexes are the
    /// automaton's variable ids).
    pub variables: Vec<String>,
    /// The values expressions read, one column each of `nav_schema` (`__nav_<i>`).
    pub navs: Vec<MatchNav>,
    /// Columns `__nav_0`, `__nav_1`, ... typed as the values they hold.
    pub nav_schema: DFSchemaRef,
    /// Per variable, its `DEFINE` condition over `nav_schema` (`None`: any row).
    pub define: Vec<Option<Expr>>,
    /// Every `DEFINE` reads only the row being tested and rows before it in the
    /// partition (no other variable's rows, no aggregates): conditions are evaluated once
    /// per row, vectorized, and the automaton may merge equivalent partial matches.
    pub history_free: bool,
    /// `MEASURES` over `nav_schema`, in output order.
    pub measures: Vec<Expr>,
    /// `ALL ROWS PER MATCH`.
    pub all_rows: bool,
    /// `AFTER MATCH SKIP`.
    pub skip: MatchSkip,
    /// `WITHIN`: a match spans less than this (ms, last row's time minus first row's).
    pub within_ms: Option<i64>,
    /// The most rows `PREV` reaches back (rows kept per partition beyond live matches).
    pub max_prev: u64,
}

/// A connector's `WITH (...)` options, keys as written (`'connector'`, `'path'`, ...).
pub type ConnectorOptions = BTreeMap<String, String>;

/// How a table is read.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// Table name as declared.
    pub table: String,
    /// The `WITH` options.
    pub options: ConnectorOptions,
    /// The physical columns, as stored in the input (the columns the connector parses).
    pub physical_schema: DFSchemaRef,
    /// One expression per output column over `physical_schema`: a column reference for a
    /// physical column, the expression of a computed column.
    pub columns: Vec<Expr>,
    /// Watermark strategy, if the table declares one.
    pub watermark: Option<WatermarkSpec>,
    /// `PARTITIONED BY` columns (physical columns whose values are the `<column>=<value>`
    /// directories a filesystem table's files are under).
    pub partition_keys: Vec<String>,
    /// The physical columns and `ROW` fields the plan reads (projection pushdown with
    /// nested fields, as Flink's `SupportsProjectionPushDown`): `physical_schema` with
    /// the unread columns and fields left out, in the same order. A connector that reads
    /// by name (JSON) decodes only these and fills the rest with NULL; others read every
    /// column. `None`: every column is read. Scans of one table in one job read the union
    /// of their `read_schema`s.
    pub read_schema: Option<DFSchemaRef>,
}

impl SourceSpec {
    /// Whether the table is read as a changelog: a filesystem or Kafka table in a
    /// change-data-capture format (`'format'` or Kafka's `'value.format'` =
    /// `'debezium-json'` or `'canal-json'`), or an `upsert-kafka` table.
    pub fn is_changelog(&self) -> bool {
        let cdc = |key: &str| {
            matches!(
                self.options.get(key).map(String::as_str),
                Some("debezium-json" | "canal-json")
            )
        };
        match self.options.get("connector").map(String::as_str) {
            Some("filesystem") => cdc("format"),
            Some("kafka") => cdc("format") || cdc("value.format"),
            // Upserts and tombstones by key (Flink docs, "Upsert Kafka SQL Connector").
            Some("upsert-kafka") => true,
            _ => false,
        }
    }
}

/// `WATERMARK FOR rowtime AS expr`.
#[derive(Debug, Clone)]
pub struct WatermarkSpec {
    /// Index of the rowtime column in the source's output schema.
    pub rowtime: usize,
    /// The watermark expression over the source's output schema (a timestamp).
    pub expr: Expr,
    /// The expression as written, for EXPLAIN and DESCRIBE.
    pub text: String,
    /// When `expr` is `rowtime - <day-time interval>` (the usual bounded-disorder
    /// strategy), that interval in ms: the runtime then subtracts an integer instead of
    /// evaluating interval arithmetic per row. `None` for any other expression
    /// (calendar intervals such as `INTERVAL '1' MONTH` included).
    pub delay_ms: Option<i64>,
}

/// Where an `INSERT INTO` writes.
#[derive(Debug, Clone)]
pub struct SinkSpec {
    /// Table name as declared.
    pub table: String,
    /// The `WITH` options.
    pub options: ConnectorOptions,
    /// `PARTITIONED BY` columns: (index in the written rows, name), in declared order.
    pub partition_keys: Vec<(usize, String)>,
    /// The NOT NULL columns of the table (declared so, or in its primary key): (index in
    /// the written rows, name). A NULL written into one fails the job, or with
    /// [`SinkSpec::drop_null_rows`] drops its row (Flink's
    /// `'table.exec.sink.not-null-enforcer'`, `ERROR` or `DROP`).
    pub not_null: Vec<(usize, String)>,
    /// `'table.exec.sink.not-null-enforcer' = 'DROP'`.
    pub drop_null_rows: bool,
}

/// A window of a window table function, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct WindowSpec {
    /// Kind and sizes.
    pub kind: WindowKind,
    /// Alignment offset (ms): windows start at `offset + k * size` (`k` any integer).
    pub offset_ms: i64,
    /// For a `TIMESTAMP_LTZ` time attribute: the session time zone. Windows are then
    /// aligned to its wall clock (local midnight, local hours, across DST changes), their
    /// bounds are wall-clock `TIMESTAMP(3)`s, and a window fires when the watermark (an
    /// instant) reaches the instant of its end - 1 ms (Flink's `TimeWindowUtil`).
    pub time_zone: Option<crate::time::Tz>,
    /// Windows on a processing-time attribute (`PROCTIME()`, Flink SQL "Windowing TVF"
    /// on processing time): a row is in the windows of the time it was read, and a window
    /// fires when the processing-time clock (not a watermark) reaches its end - 1 ms.
    pub processing_time: bool,
}

/// The window table functions of Flink SQL (`TUMBLE`, `HOP`, `CUMULATE`, `SESSION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowKind {
    /// Fixed, non-overlapping windows of `size_ms`.
    Tumble {
        /// Window length (ms).
        size_ms: i64,
    },
    /// Windows of `size_ms` starting every `slide_ms`; a row is in `ceil(size / slide)`
    /// windows (the size need not be a multiple of the slide).
    Hop {
        /// Distance between window starts (ms).
        slide_ms: i64,
        /// Window length (ms).
        size_ms: i64,
    },
    /// Windows that grow by `step_ms` from a common start up to `max_size_ms`.
    Cumulate {
        /// Growth step (ms).
        step_ms: i64,
        /// Largest window (ms), a multiple of the step.
        max_size_ms: i64,
    },
    /// Per-key sessions closed by `gap_ms` of inactivity.
    Session {
        /// Inactivity gap (ms).
        gap_ms: i64,
    },
}

impl WindowSpec {
    /// The windows `[start, end)` (ms) that hold the event time `ts_ms`, in ascending end
    /// order. Not for sessions (they depend on other rows).
    pub fn assign(&self, ts_ms: i64, out: &mut Vec<(i64, i64)>) {
        use crate::time::window_start_ms;
        out.clear();
        let ts_ms = self.local_ms(ts_ms);
        match self.kind {
            WindowKind::Tumble { size_ms } => {
                let start = window_start_ms(ts_ms, self.offset_ms, size_ms);
                out.push((start, start + size_ms));
            }
            WindowKind::Hop { slide_ms, size_ms } => {
                // Windows start at offset + k * slide; those holding ts start in
                // (ts - size, ts]. Walk from the first such start up to the last.
                let last_start = window_start_ms(ts_ms, self.offset_ms, slide_ms);
                let mut start = last_start;
                while start - slide_ms > ts_ms - size_ms {
                    start -= slide_ms;
                }
                while start <= last_start {
                    out.push((start, start + size_ms));
                    start += slide_ms;
                }
            }
            WindowKind::Cumulate {
                step_ms,
                max_size_ms,
            } => {
                let start = window_start_ms(ts_ms, self.offset_ms, max_size_ms);
                let first_end = window_start_ms(ts_ms, self.offset_ms, step_ms) + step_ms;
                let mut end = first_end;
                while end <= start + max_size_ms {
                    out.push((start, end));
                    end += step_ms;
                }
            }
            WindowKind::Session { .. } => {}
        }
    }
}

impl WindowSpec {
    /// The wall-clock time windows are computed on: the event time itself, or its local
    /// time in the session time zone for a `TIMESTAMP_LTZ` attribute.
    #[inline]
    pub fn local_ms(&self, ts_ms: i64) -> i64 {
        match &self.time_zone {
            Some(tz) => crate::time::utc_to_local_ms(tz, ts_ms),
            None => ts_ms,
        }
    }

    /// The watermark (ms) at which a window ending at `end_ms` (its wall-clock bound) fires:
    /// `end - 1`, with `end` as an instant for time-zone windows.
    #[inline]
    pub fn fire_at_ms(&self, end_ms: i64) -> i64 {
        let end = match &self.time_zone {
            Some(tz) => crate::time::local_to_utc_ms(tz, end_ms),
            None => end_ms,
        };
        end.saturating_sub(1)
    }

    /// Whether the window ending at `end_ms` has fired under `watermark_ms`.
    #[inline]
    pub fn fired(&self, end_ms: i64, watermark_ms: i64) -> bool {
        watermark_ms >= self.fire_at_ms(end_ms)
    }
}

impl fmt::Display for WindowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            WindowKind::Tumble { size_ms } => write!(f, "TUMBLE(size={size_ms}ms")?,
            WindowKind::Hop { slide_ms, size_ms } => {
                write!(f, "HOP(slide={slide_ms}ms, size={size_ms}ms")?
            }
            WindowKind::Cumulate {
                step_ms,
                max_size_ms,
            } => write!(f, "CUMULATE(step={step_ms}ms, max_size={max_size_ms}ms")?,
            WindowKind::Session { gap_ms } => write!(f, "SESSION(gap={gap_ms}ms")?,
        }
        if self.offset_ms != 0 {
            write!(f, ", offset={}ms", self.offset_ms)?;
        }
        if self.processing_time {
            write!(f, ", processing time")?;
        }
        write!(f, ")")
    }
}

/// Keyed window aggregation.
///
/// Output schema: the `GROUP BY` expressions in their written order (window bounds
/// included), then one column per aggregate.
#[derive(Debug, Clone)]
pub struct WindowAggregateSpec {
    /// The window.
    pub window: WindowSpec,
    /// Where each row's windows come from.
    pub windows: WindowInput,
    /// The schema `keys` and `aggregates` are typed against: the window table function's
    /// output. With [`WindowInput::Assign`] the input is the function's input, whose
    /// columns are the first columns of this schema.
    pub expr_schema: DFSchemaRef,
    /// The `GROUP BY` expressions that are not window bounds (the key).
    pub keys: Vec<Expr>,
    /// Where each `GROUP BY` output column comes from, in output order.
    pub group_outputs: Vec<GroupOutput>,
    /// The aggregate function calls (`Expr::AggregateFunction`, possibly aliased).
    pub aggregates: Vec<Expr>,
}

/// Where a window aggregate finds each row's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowInput {
    /// In the input's `window_start` and `window_end` columns (a `WindowAssign` upstream).
    Columns {
        /// Index of `window_start` in the input.
        start: usize,
        /// Index of `window_end` in the input.
        end: usize,
    },
    /// Assigned by the aggregate from the time attribute (the window table function fused
    /// into the aggregate, so rows are not copied once per window).
    Assign {
        /// Index of the time attribute in the input.
        time_column: usize,
    },
}

/// What [`OperatorSpec::Unnest`] makes of a row whose arrays are all NULL or empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnnestNulls {
    /// No row (`CROSS JOIN UNNEST`).
    Drop,
    /// A NULL array gives one row with NULL elements; an empty one none.
    Preserve,
    /// Both give one row with NULL elements (`LEFT JOIN UNNEST(...) ON TRUE`).
    PreserveEmpty,
}

/// The source of one `GROUP BY` output column of a window aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupOutput {
    /// The window's start.
    WindowStart,
    /// The window's end.
    WindowEnd,
    /// The window's time attribute `window_time`: the instant of its end - 1 ms (Flink
    /// SQL "Windowing TVF": `window_time`; the legacy `*_ROWTIME` and `*_PROCTIME`).
    WindowTime,
    /// Key expression number `n` of [`WindowAggregateSpec::keys`].
    Key(usize),
}
