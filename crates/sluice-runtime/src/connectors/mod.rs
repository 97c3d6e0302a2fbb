//! Connectors: where rows come from (sources) and where they go (sinks).
//!
//! | `'connector'` | source | sink |
//! |---|---|---|
//! | `filesystem` (`'format' = 'csv'` or `'json'`) | bounded: a file or a directory of files, `.gz` decompressed | a directory of CSV or JSON-lines part files |
//! | `datagen` | generated rows (random or sequences; see [`datagen`]) | |
//! | `print` | | each row to stdout as `+I[v1, v2]` (the row's kind: `+I`, `-U`, `+U`, `-D`) |
//! | `blackhole` | | discards rows |

pub mod csv_source;
pub mod datagen;
pub mod filesystem;
mod json_format;
mod text_columns;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::util::display::{ArrayFormatter, FormatOptions};
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::message::StreamBatch;
use crate::metrics::JobMetrics;

/// A source of rows: returns batches of its physical columns until the input ends.
pub trait Source: Send {
    /// The next batch, or `None` at the end of a bounded input.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>>;
    /// A short description for logs.
    fn describe(&self) -> String;
}

/// A sink of rows.
pub trait BatchSink: Send {
    /// Writes a batch (the sink table's physical columns; `ops` set on a changelog).
    fn write(&mut self, batch: &StreamBatch) -> Result<()>;
    /// The input has ended: flush and close.
    fn finish(&mut self) -> Result<()>;
}

/// Where relative paths resolve and how big batches are.
#[derive(Debug, Clone)]
pub struct ConnectorContext {
    /// Base directory for relative `'path'` options (the current directory by default).
    pub working_dir: PathBuf,
    /// Rows per source batch.
    pub batch_size: usize,
    /// Test hook: when set, each source batch has a pseudo-random size in
    /// `1..=batch_size` drawn from this seed (results must not depend on batching).
    pub batch_size_seed: Option<u64>,
    /// A name unique to the job, used in part-file names.
    pub job_id: String,
    /// The session time zone (IANA name or offset): `TIMESTAMP_LTZ` values are read from
    /// and written as wall-clock times in it.
    pub time_zone: String,
}

fn option<'a>(options: &'a ConnectorOptions, key: &str, table: &str) -> Result<&'a String> {
    options
        .get(key)
        .ok_or_else(|| SluiceError::Config(format!("table '{table}' needs the option '{key}'")))
}

fn resolve(ctx: &ConnectorContext, path: &str) -> PathBuf {
    let path = path.strip_prefix("file://").unwrap_or(path);
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        ctx.working_dir.join(p)
    }
}

/// The file format of a filesystem table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileFormat {
    Csv,
    Json,
}

fn file_format(options: &ConnectorOptions, table: &str) -> Result<FileFormat> {
    match option(options, "format", table)?.as_str() {
        "csv" => Ok(FileFormat::Csv),
        "json" => Ok(FileFormat::Json),
        other => Err(SluiceError::NotSupported(format!(
            "'format' = '{other}' of table '{table}' (supported: 'csv', 'json')"
        ))),
    }
}

/// Creates the source of a table from its `WITH` options.
///
/// # Errors
/// A missing `'connector'`, `'path'` or `'format'`, an unknown connector or format, a
/// path that does not exist.
pub fn create_source(
    table: &str,
    options: &ConnectorOptions,
    physical_schema: datafusion_common::arrow::datatypes::SchemaRef,
    ctx: &ConnectorContext,
    metrics: Arc<JobMetrics>,
) -> Result<Box<dyn Source>> {
    let connector = option(options, "connector", table)?;
    match connector.as_str() {
        "filesystem" => {
            let format = file_format(options, table)?;
            let path = resolve(ctx, option(options, "path", table)?);
            let tz =
                sluice_common::time::parse_time_zone(&ctx.time_zone).map_err(SluiceError::Config)?;
            let mut source = match format {
                FileFormat::Csv => {
                    let csv = filesystem::CsvOptions::from_options(options)?;
                    csv_source::CsvSource::new(&path, physical_schema, csv, tz, ctx.batch_size, metrics)?
                }
                FileFormat::Json => {
                    let ignore = filesystem::bool_option(options, "json.ignore-parse-errors", false)?;
                    let format = Arc::new(json_format::JsonFormat::new(physical_schema, tz, ignore));
                    csv_source::CsvSource::with_format(&path, format, None, false, ctx.batch_size, metrics)?
                }
            };
            if let Some(seed) = ctx.batch_size_seed {
                source.randomize_batch_sizes(seed);
            }
            Ok(Box::new(source))
        }
        "datagen" => Ok(Box::new(datagen::DatagenSource::new(
            table,
            physical_schema,
            options,
            ctx.batch_size,
            metrics,
        )?)),
        "print" | "blackhole" => Err(SluiceError::Plan(format!(
            "table '{table}' uses the '{connector}' connector, which can only be written to"
        ))),
        other => Err(SluiceError::NotSupported(format!(
            "'connector' = '{other}' of table '{table}' (supported: filesystem, datagen, print, blackhole)"
        ))),
    }
}

/// Creates the sink of a table from its `WITH` options.
pub fn create_sink(
    table: &str,
    options: &ConnectorOptions,
    ctx: &ConnectorContext,
) -> Result<Box<dyn BatchSink>> {
    let connector = option(options, "connector", table)?;
    match connector.as_str() {
        "filesystem" => {
            let format = file_format(options, table)?;
            let path = resolve(ctx, option(options, "path", table)?);
            let extension = match format {
                FileFormat::Csv => "csv",
                FileFormat::Json => "json",
            };
            Ok(Box::new(filesystem::DirectorySink::new(
                &path,
                format!("part-{}-0.{extension}", ctx.job_id),
                format == FileFormat::Json,
            )?))
        }
        "print" => Ok(Box::new(PrintSink {
            prefix: options
                .get("print-identifier")
                .map(|p| format!("{p}> "))
                .unwrap_or_default(),
        })),
        "blackhole" => Ok(Box::new(BlackholeSink)),
        other => Err(SluiceError::NotSupported(format!(
            "'connector' = '{other}' of table '{table}' (supported: filesystem, print, blackhole)"
        ))),
    }
}

/// Prints each row to stdout as `+I[v1, v2, ...]` (Flink's print connector).
pub struct PrintSink {
    prefix: String,
}

impl BatchSink for PrintSink {
    fn write(&mut self, stream_batch: &StreamBatch) -> Result<()> {
        let batch = &stream_batch.data;
        let options = FormatOptions::default()
            .with_null("NULL")
            .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.3f"))
            .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.3f"));
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        for row in 0..batch.num_rows() {
            let values: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            let op = stream_batch.row_kind(row).short();
            writeln!(out, "{}{op}[{}]", self.prefix, values.join(", "))
                .map_err(|e| SluiceError::io("printing rows", e))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        std::io::stdout()
            .flush()
            .map_err(|e| SluiceError::io("printing rows", e))
    }
}

/// Discards every row (Flink's blackhole connector), for benchmarks.
pub struct BlackholeSink;

impl BatchSink for BlackholeSink {
    fn write(&mut self, _batch: &StreamBatch) -> Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}
