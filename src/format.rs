//! Printing results: `table` (Flink's tableau), `csv` and `json` lines.
//!
//! Conventions: timestamps print as `YYYY-MM-DD HH:MM:SS`, plus `.fff` when the
//! milliseconds are not zero; NULL prints as an empty field (`null` in JSON); an ARRAY,
//! MAP or ROW prints as Flink casts it to STRING (`[1, 2]`, `{a=1}`, `(1, one)`).

use std::io::Write;

use datafusion_common::arrow::array::{Array, AsArray, RecordBatch};
use datafusion_common::arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::arrow::util::display::{ArrayFormatter, FormatOptions};
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
    if matches!(
        array.data_type(),
        DataType::List(_) | DataType::Map(_, _) | DataType::Struct(_) | DataType::LargeBinary
    ) {
        // Flink's `CAST(... AS STRING)` text: `[1, 2]`, `{a=1}`, `(1, one)`, a BITMAP's
        // `{1,2}`.
        let one = array.slice(row, 1);
        let utc: sluice_common::time::Tz = "UTC".parse()?;
        let text = sluice_sql::functions::nested_texts(&one, &utc)?;
        return Ok(text.into_iter().next().flatten().unwrap_or_default());
    }
    let f = ArrayFormatter::try_new(array, options)?;
    let s = f.value(row).to_string();
    Ok(match array.data_type() {
        DataType::Timestamp(_, _) => strip_zero_fraction(s),
        _ => s,
    })
}

/// A value as JSON: numbers and booleans as themselves, an ARRAY as an array, a MAP and a
/// ROW as objects (keys as text, fields by name), anything else as its text.
fn json_value(array: &dyn Array, row: usize) -> Result<serde_json::Value> {
    use serde_json::Value;
    if array.is_null(row) {
        return Ok(Value::Null);
    }
    Ok(match array.data_type() {
        DataType::List(_) => {
            let items = array.as_list::<i32>().value(row);
            Value::Array(
                (0..items.len())
                    .map(|j| json_value(items.as_ref(), j))
                    .collect::<Result<_>>()?,
            )
        }
        DataType::Map(_, _) => {
            let m = array.as_map();
            let o = m.value_offsets();
            let mut obj = serde_json::Map::new();
            for e in o[row] as usize..o[row + 1] as usize {
                let key = value_text(m.keys().as_ref(), e, &format_options())?;
                obj.insert(key, json_value(m.values().as_ref(), e)?);
            }
            Value::Object(obj)
        }
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let mut obj = serde_json::Map::new();
            for (f, c) in fields.iter().zip(s.columns()) {
                obj.insert(f.name().clone(), json_value(c.as_ref(), row)?);
            }
            Value::Object(obj)
        }
        t => {
            let text = value_text(array, row, &format_options())?;
            if t.is_integer() {
                text.parse::<i64>()
                    .map(Value::from)
                    .unwrap_or(Value::String(text))
            } else if t.is_floating() {
                text.parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number)
                    .unwrap_or(Value::String(text))
            } else if matches!(t, DataType::Boolean) {
                Value::Bool(text == "true")
            } else {
                Value::String(text)
            }
        }
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
                        obj.insert(f.name().clone(), json_value(batch.column(i).as_ref(), row)?);
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
