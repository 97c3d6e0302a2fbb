//! Printing results: `table` (Flink's tableau), `csv` and `json` lines, and EXPLAIN text.
//!
//! Conventions: timestamps print as `YYYY-MM-DD HH:MM:SS`, plus `.fff` when the
//! milliseconds are not zero; NULL prints as an empty field (`null` in JSON).

use std::io::Write;

use datafusion_common::arrow::array::{Array, AsArray, RecordBatch};
use datafusion_common::arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::arrow::util::display::{ArrayFormatter, FormatOptions};
use sluice_common::plan::{GroupOutput, OperatorSpec, PlanNode};
use sluice_common::{Result, SluiceError};

/// Output formats of `sluice run --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// A static table with borders (Flink's "tableau"), printed as rows arrive.
    Table,
    /// CSV with a header row.
    Csv,
    /// One JSON object per line.
    Json,
}

fn format_options() -> FormatOptions<'static> {
    FormatOptions::default()
        .with_null("")
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.3f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.3f"))
}

/// The text of each value of row `row`, in Sluice's conventions.
pub fn row_values(batch: &RecordBatch, row: usize) -> Result<Vec<String>> {
    let options = format_options();
    batch
        .columns()
        .iter()
        .map(|c| value_text(c.as_ref(), row, &options))
        .collect()
}

fn value_text(array: &dyn Array, row: usize, options: &FormatOptions) -> Result<String> {
    let f = ArrayFormatter::try_new(array, options)?;
    let s = f.value(row).to_string();
    Ok(match array.data_type() {
        DataType::Timestamp(_, _) => strip_zero_fraction(s),
        _ => s,
    })
}

fn strip_zero_fraction(s: String) -> String {
    match s.strip_suffix(".000") {
        Some(t) => t.to_string(),
        None => s,
    }
}

/// Prints the blocks of one result (a `SELECT`) as its batches arrive.
pub struct ResultPrinter<W: Write> {
    out: W,
    format: OutputFormat,
    schema: SchemaRef,
    widths: Vec<usize>,
    /// Per column: numbers align right in the table format (headers too).
    numeric: Vec<bool>,
    rows: u64,
    started: bool,
}

impl<W: Write> ResultPrinter<W> {
    /// A printer of rows of `schema` in `format`. In the table format, column widths come
    /// from the types (rows are printed as they arrive; longer values are cut with `...`).
    pub fn new(out: W, format: OutputFormat, schema: SchemaRef) -> Self {
        let widths = schema
            .fields()
            .iter()
            .map(|f| {
                // The changelog's `op` column holds two characters (`+I`, `-U`, ...).
                let width = if f.name() == "op" && f.data_type() == &DataType::Utf8 {
                    2
                } else {
                    type_width(f.data_type())
                };
                f.name().chars().count().max(width)
            })
            .collect();
        let numeric = schema
            .fields()
            .iter()
            .map(|f| f.data_type().is_numeric())
            .collect();
        ResultPrinter {
            numeric,
            out,
            format,
            schema,
            widths,
            rows: 0,
            started: false,
        }
    }

    /// The schema of the rows this printer prints.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// A printer for a complete, small result (SHOW, DESCRIBE, SET): table columns as wide
    /// as their longest value.
    pub fn for_batch(out: W, format: OutputFormat, batch: &RecordBatch) -> Result<Self> {
        let mut p = Self::new(out, format, batch.schema());
        for (i, f) in batch.schema().fields().iter().enumerate() {
            let mut w = f.name().chars().count();
            for row in 0..batch.num_rows() {
                let v = value_text(batch.column(i).as_ref(), row, &format_options())?;
                w = w.max(escape_for_table(&v).chars().count());
            }
            p.widths[i] = w;
        }
        Ok(p)
    }

    fn io(e: std::io::Error) -> SluiceError {
        SluiceError::io("writing results", e)
    }

    fn border(&mut self) -> Result<()> {
        let line: String = self
            .widths
            .iter()
            .map(|w| format!("+{}", "-".repeat(w + 2)))
            .collect::<String>()
            + "+";
        writeln!(self.out, "{line}").map_err(Self::io)
    }

    fn table_row(&mut self, values: &[String]) -> Result<()> {
        let mut line = String::new();
        for (i, v) in values.iter().enumerate() {
            let w = self.widths[i];
            let v = truncate(&escape_for_table(v), w);
            if self.numeric[i] {
                line.push_str(&format!("| {v:>w$} "));
            } else {
                line.push_str(&format!("| {v:<w$} "));
            }
        }
        line.push('|');
        writeln!(self.out, "{line}").map_err(Self::io)
    }

    /// Prints the header (once), before the first rows or at the end of an empty result.
    fn start(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let names: Vec<String> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        match self.format {
            OutputFormat::Table => {
                self.border()?;
                // Headers align like their values (numbers to the right).
                self.table_row(&names)?;
                self.border()?;
            }
            OutputFormat::Csv => {
                let header = names
                    .iter()
                    .map(|n| csv_field(n))
                    .collect::<Vec<_>>()
                    .join(",");
                writeln!(self.out, "{header}").map_err(Self::io)?;
            }
            OutputFormat::Json => {}
        }
        Ok(())
    }

    /// Prints the rows of a batch.
    pub fn batch(&mut self, batch: &RecordBatch) -> Result<()> {
        self.start()?;
        for row in 0..batch.num_rows() {
            let values = row_values(batch, row)?;
            match self.format {
                OutputFormat::Table => self.table_row(&values)?,
                OutputFormat::Csv => {
                    let line = values
                        .iter()
                        .map(|v| csv_field(v))
                        .collect::<Vec<_>>()
                        .join(",");
                    writeln!(self.out, "{line}").map_err(Self::io)?;
                }
                OutputFormat::Json => {
                    let mut obj = serde_json::Map::new();
                    for (i, f) in self.schema.fields().iter().enumerate() {
                        let col = batch.column(i);
                        let v = if col.is_null(row) {
                            serde_json::Value::Null
                        } else if f.data_type().is_integer() {
                            values[i]
                                .parse::<i64>()
                                .map(serde_json::Value::from)
                                .unwrap_or(serde_json::Value::String(values[i].clone()))
                        } else if f.data_type().is_floating() {
                            values[i]
                                .parse::<f64>()
                                .ok()
                                .and_then(serde_json::Number::from_f64)
                                .map(serde_json::Value::Number)
                                .unwrap_or(serde_json::Value::String(values[i].clone()))
                        } else if matches!(f.data_type(), DataType::Boolean) {
                            serde_json::Value::Bool(values[i] == "true")
                        } else {
                            serde_json::Value::String(values[i].clone())
                        };
                        obj.insert(f.name().clone(), v);
                    }
                    let line = serde_json::Value::Object(obj).to_string();
                    writeln!(self.out, "{line}").map_err(Self::io)?;
                }
            }
            self.rows += 1;
        }
        self.out.flush().map_err(Self::io)
    }

    /// Ends the block; returns the number of rows printed.
    pub fn finish(mut self) -> Result<u64> {
        self.start()?;
        if self.format == OutputFormat::Table {
            if self.rows == 0 {
                writeln!(self.out, "Empty set").map_err(Self::io)?;
            } else {
                self.border()?;
            }
        }
        self.out.flush().map_err(Self::io)?;
        Ok(self.rows)
    }
}

/// Column width of a type in the table format (streaming: chosen before any row).
fn type_width(dt: &DataType) -> usize {
    match dt {
        DataType::Boolean => 5,
        DataType::Int8 => 4,
        DataType::Int16 => 6,
        DataType::Int32 => 11,
        DataType::Int64 => 20,
        DataType::Float32 | DataType::Float64 => 20,
        DataType::Decimal128(p, _) => *p as usize + 2,
        DataType::Date32 => 10,
        DataType::Timestamp(_, _) => 23,
        _ => 20,
    }
}

/// Control characters would break a table row: show them escaped.
fn escape_for_table(v: &str) -> String {
    if v.contains(['\n', '\r', '\t']) {
        v.replace('\n', "\\n")
            .replace('\r', "\\r")
            .replace('\t', "\\t")
    } else {
        v.to_string()
    }
}

fn truncate(v: &str, width: usize) -> String {
    if v.chars().count() <= width {
        v.to_string()
    } else {
        let keep: String = v.chars().take(width.saturating_sub(3)).collect();
        format!("{keep}...")
    }
}

fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

/// Folds a changelog (batches whose first column is `op`: `+I`, `-U`, `+U`, `-D`) into
/// its final table: `+I`/`+U` add a row, `-U`/`-D` remove one equal row. The result has
/// the columns after `op`, rows in the order they were first added.
///
/// # Errors
/// A batch without a leading `op` column.
pub fn fold_changelog(batches: &[RecordBatch]) -> Result<Option<RecordBatch>> {
    use datafusion_common::arrow::compute::interleave;
    use datafusion_common::arrow::row::{RowConverter, SortField};
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let schema = first.schema();
    if schema.fields().first().map(|f| f.name().as_str()) != Some("op") {
        return Err(SluiceError::Internal(
            "fold_changelog needs an 'op' column".into(),
        ));
    }
    let value_fields: Vec<_> = schema.fields().iter().skip(1).cloned().collect();
    let value_schema = std::sync::Arc::new(datafusion_common::arrow::datatypes::Schema::new(
        value_fields,
    ));
    let converter = RowConverter::new(
        value_schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?;
    // Row bytes -> (live count, first (batch, row)); insertion order kept in `order`.
    let mut live: std::collections::HashMap<Vec<u8>, (i64, (usize, usize))> = Default::default();
    let mut order: Vec<Vec<u8>> = Vec::new();
    for (bi, b) in batches.iter().enumerate() {
        let rows = converter.convert_columns(&b.columns()[1..])?;
        let ops = b.column(0).as_string::<i32>();
        for r in 0..b.num_rows() {
            let key = rows.row(r).as_ref().to_vec();
            let delta = if matches!(ops.value(r), "-U" | "-D") {
                -1
            } else {
                1
            };
            let entry = live.entry(key.clone()).or_insert_with(|| {
                order.push(key);
                (0, (bi, r))
            });
            entry.0 += delta;
        }
    }
    let mut picks = Vec::new();
    for key in &order {
        let (count, at) = live[key];
        for _ in 0..count.max(0) {
            picks.push(at);
        }
    }
    let columns = (1..schema.fields().len())
        .map(|c| {
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            interleave(&arrays, &picks)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Some(RecordBatch::try_new_with_options(
        value_schema,
        columns,
        &datafusion_common::arrow::record_batch::RecordBatchOptions::new()
            .with_row_count(Some(picks.len())),
    )?))
}

/// How a plan would run, for EXPLAIN: the session's parallelism and key groups.
#[derive(Debug, Clone)]
pub struct ExplainContext {
    /// `'parallelism.default'`.
    pub parallelism: usize,
    /// `'pipeline.max-parallelism'` (key groups).
    pub max_parallelism: u32,
    /// `'table.exec.state.ttl'` as written, if set.
    pub state_ttl: Option<String>,
}

/// One operator of the physical graph as EXPLAIN shows it.
struct ExplainedNode {
    /// What it does (operator name and arguments).
    label: String,
    /// Subtasks.
    parallelism: usize,
    /// How its input is distributed: `forward`, `hash[keys]`, `single`, `merge`.
    input: Option<String>,
    /// Its state: kind and key.
    state: Option<String>,
}

/// The operators from the source up to the root, with parallelism, input partitioning
/// and state, computed as `sluice_runtime::job` runs them: each keyed operator starts a
/// stage of `parallelism` subtasks (one without keys) fed by a hash exchange; at
/// parallelism 1 everything is one chain.
fn explained_nodes(plan: &PlanNode, ctx: &ExplainContext) -> Vec<ExplainedNode> {
    let mut chain = Vec::new();
    let mut cur = plan;
    loop {
        chain.push(cur);
        match cur.inputs.first() {
            Some(i) => cur = i,
            None => break,
        }
    }
    chain.reverse();
    let keys_of = |n: &PlanNode| -> Option<Vec<String>> {
        match &n.spec {
            OperatorSpec::WindowAggregate(a) => {
                Some(a.keys.iter().map(|k| clean(&k.to_string())).collect())
            }
            OperatorSpec::GroupAggregate { keys, .. } => {
                Some(keys.iter().map(|k| clean(&k.to_string())).collect())
            }
            OperatorSpec::MatchRecognize(m) => Some(
                m.partition_by
                    .iter()
                    .map(|&c| n.input().schema.field(c).name().clone())
                    .collect(),
            ),
            _ => None,
        }
    };
    let staged = ctx.parallelism > 1 && chain.iter().any(|n| keys_of(n).is_some());
    let mut sources = 1;
    let mut current = 1;
    let mut out = Vec::new();
    for (i, node) in chain.iter().enumerate() {
        let keys = keys_of(node);
        let (parallelism, input) = match (&node.spec, &keys) {
            (OperatorSpec::Source(s), _) => {
                sources = s
                    .options
                    .get("scan.parallelism")
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(1);
                current = sources;
                (sources, None)
            }
            (_, Some(keys)) if staged => {
                current = if keys.is_empty() { 1 } else { ctx.parallelism };
                let input = if keys.is_empty() {
                    "single".to_string()
                } else {
                    format!("hash[{}]", keys.join(", "))
                };
                (current, Some(input))
            }
            _ if !staged && i == 1 && sources > 1 => {
                current = 1;
                (1, Some("merge".to_string()))
            }
            _ => (current, Some("forward".to_string())),
        };
        let key_text = |keys: &Option<Vec<String>>| match keys {
            Some(k) if !k.is_empty() => format!("keyed by [{}]", k.join(", ")),
            _ => "one global key".to_string(),
        };
        let ttl = ctx
            .state_ttl
            .as_ref()
            .map(|t| format!(", ttl {t}"))
            .unwrap_or_default();
        let state = match &node.spec {
            OperatorSpec::WindowAggregate(a)
                if matches!(
                    a.window.kind,
                    sluice_common::plan::WindowKind::Session { .. }
                ) =>
            {
                Some(format!("session rows and timers, {}", key_text(&keys)))
            }
            OperatorSpec::WindowAggregate(_) => {
                Some(format!("window accumulators, {}", key_text(&keys)))
            }
            OperatorSpec::GroupAggregate { .. } => {
                Some(format!("accumulators, {}{ttl}", key_text(&keys)))
            }
            OperatorSpec::MatchRecognize(_) => Some(format!(
                "buffered rows and partial matches, {}",
                key_text(&keys)
            )),
            _ => None,
        };
        let state = state.map(|s| format!("{s}, {} key groups", ctx.max_parallelism));
        out.push(ExplainedNode {
            label: label(node),
            parallelism,
            input,
            state,
        });
    }
    out
}

/// The operator's name and arguments.
fn label(node: &PlanNode) -> String {
    let line = match &node.spec {
        OperatorSpec::Source(s) => {
            let wm = s
                .watermark
                .as_ref()
                .map(|w| format!(", watermark=[{}]", w.text))
                .unwrap_or_else(|| ", no watermark".to_string());
            format!(
                "Source: table={}, connector={}{wm}",
                s.table,
                s.options
                    .get("connector")
                    .map(|s| s.as_str())
                    .unwrap_or("?")
            )
        }
        OperatorSpec::Filter { predicate } => format!("Filter: {predicate}"),
        OperatorSpec::Project { exprs } => format!(
            "Project: {}",
            exprs
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        OperatorSpec::WindowAssign { window, .. } => format!("WindowAssign: {window}"),
        OperatorSpec::WindowAggregate(a) => {
            let groups: Vec<String> = a
                .group_outputs
                .iter()
                .map(|g| match g {
                    GroupOutput::WindowStart => "window_start".to_string(),
                    GroupOutput::WindowEnd => "window_end".to_string(),
                    GroupOutput::Key(k) => a.keys[*k].to_string(),
                })
                .collect();
            let assign = match a.windows {
                sluice_common::plan::WindowInput::Assign { .. } => " (windows assigned here)",
                sluice_common::plan::WindowInput::Columns { .. } => "",
            };
            format!(
                "WindowAggregate: {}{assign}, groupBy=[{}], aggregates=[{}]",
                a.window,
                groups.join(", "),
                a.aggregates
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        OperatorSpec::GroupAggregate { keys, aggregates } => format!(
            "GroupAggregate: groupBy=[{}], aggregates=[{}], changelog output",
            keys.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            aggregates
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        OperatorSpec::MatchRecognize(m) => format!(
            "MatchRecognize: pattern=({}){}, skip={:?}, {}, measures=[{}]",
            m.pattern,
            m.within_ms
                .map(|w| format!(" within {w} ms"))
                .unwrap_or_default(),
            m.skip,
            if m.all_rows {
                "all rows per match"
            } else {
                "one row per match"
            },
            m.measures
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        OperatorSpec::Sink(s) => format!(
            "Sink: table={}, connector={}",
            s.table,
            s.options
                .get("connector")
                .map(|s| s.as_str())
                .unwrap_or("?")
        ),
    };
    clean(&line)
}

/// Drops the placeholder qualifiers of lifted window calls (internal names).
fn clean(text: &str) -> String {
    let mut line = text.to_string();
    while let Some(p) = line.find("__sluice_tvf_") {
        let end = line[p..].find('.').map(|d| p + d + 1).unwrap_or(line.len());
        line.replace_range(p..end, "");
    }
    line
}

/// The physical operator graph as indented text, root first (as Flink prints plans):
/// each operator with its parallelism, how its input is partitioned (`forward`,
/// `hash[keys]` into key groups, `single`, `merge` of source subtasks), and its state.
pub fn explain(plan: &PlanNode, ctx: &ExplainContext) -> String {
    let nodes = explained_nodes(plan, ctx);
    let mut out = String::new();
    for (depth, n) in nodes.iter().rev().enumerate() {
        out.push_str(&"  ".repeat(depth));
        out.push_str(&n.label);
        out.push_str(&format!(" [parallelism={}", n.parallelism));
        if let Some(i) = &n.input {
            out.push_str(&format!(", input={i}"));
        }
        if let Some(s) = &n.state {
            out.push_str(&format!(", state={s}"));
        }
        out.push_str("]\n");
    }
    out
}

/// The physical operator graph as a Graphviz digraph (`dot -Tpng`): one box per
/// operator (label, parallelism, state), edges from source to root labelled with the
/// input partitioning.
pub fn explain_dot(plan: &PlanNode, ctx: &ExplainContext) -> String {
    let nodes = explained_nodes(plan, ctx);
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = String::from(
        "digraph plan {\n  rankdir=BT;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for (i, n) in nodes.iter().enumerate() {
        let mut label = format!("{}\\nparallelism={}", escape(&n.label), n.parallelism);
        if let Some(s) = &n.state {
            label.push_str(&format!("\\nstate: {}", escape(s)));
        }
        out.push_str(&format!("  n{i} [label=\"{label}\"];\n"));
    }
    for (i, n) in nodes.iter().enumerate().skip(1) {
        let input = n.input.as_deref().unwrap_or("forward");
        out.push_str(&format!(
            "  n{} -> n{i} [label=\"{}\"];\n",
            i - 1,
            escape(input)
        ));
    }
    out.push_str("}\n");
    out
}
