//! Connectors: where rows come from (sources) and where they go (sinks).
//!
//! | `'connector'` | source | sink |
//! |---|---|---|
//! | `filesystem` (`'format' = 'csv'` or `'json'`) | bounded: a file or a directory of files, `.gz` decompressed | a directory of CSV or JSON-lines part files |
//! | `datagen` | generated rows (random or sequences; see [`datagen`]) | |
//! | `nexmark` | the Nexmark benchmark's events (see [`nexmark`]) | |
//! | `kafka` | the messages of topics, bounded or not (see [`kafka`]) | a topic, one message per row |
//! | `upsert-kafka` | a topic's upserts and tombstones by primary key, as a changelog | a changelog as upserts and tombstones |
//! | `channel` | batches an embedding application pushes ([`channel`]) | |
//! | `print` | | each row to stdout as `+I[v1, v2]` (the row's kind: `+I`, `-U`, `+U`, `-D`) |
//! | `blackhole` | | discards rows |

pub mod changelog_json;
pub mod channel;
pub mod commit;
pub mod csv_source;
pub mod datagen;
pub mod filesystem;
mod json_format;
pub mod kafka;
pub mod lookup;
pub mod nexmark;
pub mod partitioned;
mod text_columns;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion_common::arrow::array::{Array, BooleanArray, RecordBatch};
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
    /// The source offset after the last batch returned: where [`Source::seek`] resumes
    /// reading (connector-specific JSON, stored in checkpoint manifests; `null`: the
    /// beginning).
    fn position(&self) -> serde_json::Value;
    /// Resumes reading at a position from [`Source::position`] (called before the first
    /// `next_batch`).
    ///
    /// # Errors
    /// A position this source cannot resume from (the input changed).
    fn seek(&mut self, position: &serde_json::Value) -> Result<()>;
    /// The source offset after the first `rows` rows of the last batch, when the source
    /// can say it exactly (a barrier or failure cut inside a batch). `None`: the position
    /// before the batch plus `rows` rows to skip, which is exact for sources whose rows
    /// after a position are always the same ones in the same order (files, generators);
    /// a Kafka source interleaves partitions differently on each read, so it says.
    fn position_after(&self, rows: usize) -> Option<serde_json::Value> {
        let _ = rows;
        None
    }
    /// The split (a Kafka partition, `topic/partition`) all rows of the last batch came
    /// from, for a source that reads several splits whose rows interleave: watermarks are
    /// then generated per split, and the source subtask's watermark is the minimum over its
    /// [`Source::live_splits`], leaving out splits idle for
    /// `'table.exec.source.idle-timeout'` (Flink docs, "Generating Watermarks",
    /// "Watermark Strategies and the Kafka Connector"). `None`: one watermark for the
    /// subtask.
    fn last_split(&self) -> Option<String> {
        None
    }
    /// The splits this source subtask reads now and that have not ended (see
    /// [`Source::last_split`]; an ended split no longer holds the watermark back).
    fn live_splits(&self) -> Vec<String> {
        Vec::new()
    }
    /// A watermark (ms) the source itself declares for the rows returned so far, taken
    /// once after each [`Source::next_batch`]; the job's watermark is the maximum of it
    /// and the table's `WATERMARK` expression. Only application-fed sources have one.
    fn take_watermark(&mut self) -> Option<i64> {
        None
    }
    /// A checkpoint that holds `position` (this source's offset at the checkpoint's
    /// barrier) has completed: a source that tells its input system what was read (Kafka
    /// commits the consumer group's offsets) does it now (Flink:
    /// `SourceReader#notifyCheckpointComplete`). Called on the source's thread between
    /// batches, for the newest completed checkpoint only.
    ///
    /// # Errors
    /// A failure that should fail the job (a source that only informs logs it instead).
    fn checkpoint_complete(&mut self, position: &serde_json::Value) -> Result<()> {
        let _ = position;
        Ok(())
    }
}

/// A sink of rows. A transactional sink takes part in checkpoints with two-phase
/// commit: `pre_commit` at each barrier returns what it wrote since the last one as a
/// [`Committable`], which the job commits once the checkpoint is complete.
pub trait BatchSink: Send {
    /// Writes a batch (the sink table's physical columns; `ops` set on a changelog).
    fn write(&mut self, batch: &StreamBatch) -> Result<()>;
    /// A checkpoint barrier arrived: make what was written since the last pre-commit
    /// durable and return what commits it (`Nothing` for sinks that write directly).
    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Committable> {
        let _ = checkpoint_id;
        Ok(Committable::Nothing)
    }
    /// The input has ended: flush, close, and return what commits the last rows.
    fn finish(&mut self) -> Result<Committable>;
    /// The watermark (ms) reached the sink (a partitioned sink commits partitions by it).
    fn on_watermark(&mut self, watermark_ms: i64) {
        let _ = watermark_ms;
    }
}

/// A sink's check of its NOT NULL columns (Flink's `SinkNotNullEnforcer`, set by
/// `'table.exec.sink.not-null-enforcer'`): a row with a NULL in one of `columns` (index in
/// the written rows, name) fails the job with Flink's message, or is dropped (`drop`).
pub(crate) struct NotNullEnforcer {
    pub inner: Box<dyn BatchSink>,
    pub columns: Vec<(usize, String)>,
    pub drop: bool,
    pub table: String,
}

impl BatchSink for NotNullEnforcer {
    fn write(&mut self, batch: &StreamBatch) -> Result<()> {
        let mut keep: Option<BooleanArray> = None;
        for (i, name) in &self.columns {
            let column = batch.data.column(*i);
            let Some(nulls) = column.logical_nulls().filter(|n| n.null_count() > 0) else {
                continue;
            };
            if !self.drop {
                return Err(SluiceError::Execution(format!(
                    "Column '{name}' of sink '{}' is NOT NULL, however, a null value is being \
                     written into it. You can set job configuration \
                     'table.exec.sink.not-null-enforcer'='DROP' to suppress this exception and \
                     drop such records silently.",
                    self.table
                )));
            }
            let valid = BooleanArray::new(nulls.inner().clone(), None);
            keep = Some(match keep {
                None => valid,
                Some(k) => datafusion_common::arrow::compute::and(&k, &valid)?,
            });
        }
        match keep {
            None => self.inner.write(batch),
            Some(mask) => self.inner.write(&batch.filter(&mask)?),
        }
    }
    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Committable> {
        self.inner.pre_commit(checkpoint_id)
    }
    fn finish(&mut self) -> Result<Committable> {
        self.inner.finish()
    }
    fn on_watermark(&mut self, watermark_ms: i64) {
        self.inner.on_watermark(watermark_ms)
    }
}

/// What a sink pre-committed and the job commits when the checkpoint completes.
#[derive(Debug, Clone)]
pub enum Committable {
    /// Nothing to commit (direct sinks, or nothing written).
    Nothing,
    /// Output to commit when the checkpoint completes (two-phase-commit sinks: see
    /// [`commit`]).
    Pending(Vec<commit::PendingCommit>),
    /// Result rows of a query, released to the reader on commit (the job's collect sink).
    Rows(Vec<RecordBatch>),
}

impl Committable {
    /// Adds `other` to this one (pending commits of checkpoints that failed are committed
    /// with the next one that completes).
    pub fn append(&mut self, other: Committable) {
        match (&mut *self, other) {
            (_, Committable::Nothing) => {}
            (Committable::Nothing, o) => *self = o,
            (Committable::Pending(a), Committable::Pending(b)) => a.extend(b),
            (Committable::Rows(a), Committable::Rows(b)) => a.extend(b),
            (a, b) => {
                // One sink kind per job: never mixed.
                debug_assert!(false, "mixed committables {a:?} and {b:?}");
            }
        }
    }
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
    /// Which parallel subtask the connector serves (part-file names).
    pub subtask: usize,
    /// Which source subtask a source serves, of how many (`'scan.parallelism'`): a
    /// filesystem source reads files `source_subtask`, `+ source_parallelism`, ... of its
    /// sorted list.
    pub source_subtask: usize,
    /// Source subtasks of the table.
    pub source_parallelism: usize,
    /// Channels the embedding application opened for `channel` tables.
    pub channels: channel::ChannelRegistry,
    /// Callbacks the embedding application registered for `channel` sink tables.
    pub sink_callbacks: channel::SinkRegistry,
    /// How many times the job has been restarted (direct sinks write a new file per run).
    pub attempt: u32,
    /// The job checkpoints exactly-once: sinks that can, commit in two phases (unless
    /// their `'sink.delivery-guarantee'` says otherwise).
    pub two_phase_sinks: bool,
    /// The id of the attempt's first checkpoint (a transactional sink names its first
    /// transaction by it). Set per attempt by the job.
    pub first_checkpoint_id: u64,
    /// The job's checkpoint interval (`None`: no periodic checkpoints). Set by the job.
    pub checkpoint_interval: Option<std::time::Duration>,
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
pub(crate) enum FileFormat {
    Csv,
    Json,
    /// A change-data-capture format: a changelog (`changelog_json`).
    Changelog(changelog_json::Envelope),
}

fn file_format(options: &ConnectorOptions, table: &str) -> Result<FileFormat> {
    match option(options, "format", table)?.as_str() {
        "csv" => Ok(FileFormat::Csv),
        "json" => {
            // Flink's JSON options that Sluice declares but has only the default of.
            let refuse = |key: &str, value: &str| {
                options
                    .get(key)
                    .filter(|v| v.eq_ignore_ascii_case(value))
                    .map(|_| {
                        SluiceError::NotSupported(format!(
                        "'{key}' = '{value}' of table '{table}' (only Flink's default is built)"
                    ))
                    })
            };
            if let Some(e) = refuse("json.fail-on-missing-field", "true")
                .or_else(|| refuse("json.timestamp-format.standard", "ISO-8601"))
            {
                return Err(e);
            }
            Ok(FileFormat::Json)
        }
        "debezium-json" => Ok(FileFormat::Changelog(changelog_json::Envelope::Debezium)),
        "canal-json" => Ok(FileFormat::Changelog(changelog_json::Envelope::Canal)),
        other => Err(SluiceError::NotSupported(format!(
            "'format' = '{other}' of table '{table}' (supported: 'csv', 'json', \
             'debezium-json', 'canal-json')"
        ))),
    }
}

/// Whether `format` can hold the columns of `schema` (table `table`): Flink's CSV format
/// holds `ARRAY` and `ROW` of scalar types (elements and fields separated by
/// `'csv.array-element-delimiter'`), not MAP, MULTISET or deeper nesting; its JSON format
/// writes a MAP or MULTISET only with STRING keys (`writing`). A clear error for the others
/// rather than arrow's at the first row.
pub(crate) fn check_format_types(
    format: FileFormat,
    schema: &datafusion_common::arrow::datatypes::Schema,
    table: &str,
    writing: bool,
) -> Result<()> {
    use datafusion_common::arrow::datatypes::DataType;
    fn non_string_key(t: &DataType) -> bool {
        match t {
            DataType::Map(entries, _) => match entries.data_type() {
                DataType::Struct(kv) => {
                    !matches!(kv[0].data_type(), DataType::Utf8 | DataType::LargeUtf8)
                        || kv.iter().any(|f| non_string_key(f.data_type()))
                }
                _ => false,
            },
            DataType::List(f) | DataType::LargeList(f) => non_string_key(f.data_type()),
            DataType::Struct(fields) => fields.iter().any(|f| non_string_key(f.data_type())),
            _ => false,
        }
    }
    for f in schema.fields() {
        let type_name = || sluice_common::types::flink_type_name(f.data_type());
        match format {
            FileFormat::Csv => {
                if let Some(what) = text_columns::TextColumns::csv_cannot_hold(f.data_type()) {
                    return Err(SluiceError::NotSupported(format!(
                        "column '{}' of table '{table}' is {}: the 'csv' format holds ARRAY and \
                         ROW of scalar types, not {what} (as Flink's); use 'format' = 'json'",
                        f.name(),
                        type_name()
                    )));
                }
            }
            FileFormat::Json if writing && non_string_key(f.data_type()) => {
                return Err(SluiceError::NotSupported(format!(
                    "column '{}' of table '{table}' is {}: the 'json' format writes a MAP or \
                     MULTISET with STRING keys only, as Flink's (\"JSON format doesn't support \
                     non-string as key type of map\")",
                    f.name(),
                    type_name()
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Creates the source of a table from its `WITH` options. `physical_schema`: the
/// columns its batches have; `read_schema`: the columns and `ROW` fields the plan reads
/// (`SourceSpec::read_schema`), which a JSON or CSV file source decodes alone (the others NULL).
///
/// # Errors
/// A missing `'connector'`, `'path'` or `'format'`, an unknown connector or format, a
/// path that does not exist.
pub fn create_source(
    table: &str,
    options: &ConnectorOptions,
    partition_keys: &[String],
    physical_schema: datafusion_common::arrow::datatypes::SchemaRef,
    read_schema: Option<datafusion_common::arrow::datatypes::SchemaRef>,
    ctx: &ConnectorContext,
    metrics: Arc<JobMetrics>,
) -> Result<Box<dyn Source>> {
    let connector = option(options, "connector", table)?;
    if connector != "filesystem" {
        // Generated and application-fed rows have no size known in advance.
        metrics
            .bytes_total_known
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
    match connector.as_str() {
        "filesystem" if !partition_keys.is_empty() => {
            let path = resolve(ctx, option(options, "path", table)?);
            partitioned::PartitionedSource::open(
                table,
                &path,
                file_format(options, table)?,
                options,
                partition_keys,
                physical_schema,
                ctx,
                metrics,
            )
            .map(|s| Box::new(s) as Box<dyn Source>)
        }
        "filesystem" => {
            let format = file_format(options, table)?;
            let path = resolve(ctx, option(options, "path", table)?);
            let tz =
                sluice_common::time::parse_time_zone(&ctx.time_zone).map_err(SluiceError::Config)?;
            let mut source = match format {
                FileFormat::Csv => {
                    check_format_types(format, &physical_schema, table, false)?;
                    let csv = filesystem::CsvOptions::from_options(options)?;
                    csv_source::CsvSource::new(&path, physical_schema, read_schema, csv, tz, ctx.batch_size, metrics)?
                        .split(ctx.source_subtask, ctx.source_parallelism)
                }
                FileFormat::Json => {
                    let ignore = filesystem::bool_option(options, "json.ignore-parse-errors", false)?;
                    let format = Arc::new(json_format::JsonFormat::new(physical_schema, read_schema, tz, ignore));
                    csv_source::CsvSource::with_format(&path, format, None, csv_source::HeaderRow::Data, ctx.batch_size, metrics)?
                        .split(ctx.source_subtask, ctx.source_parallelism)
                }
                FileFormat::Changelog(envelope) => {
                    let format = Arc::new(changelog_json::ChangelogJsonFormat::new(
                        envelope,
                        physical_schema,
                        tz,
                        options,
                    )?);
                    csv_source::CsvSource::with_format(&path, format, None, csv_source::HeaderRow::Data, ctx.batch_size, metrics)?
                        .split(ctx.source_subtask, ctx.source_parallelism)
                }
            };
            if let Some(seed) = ctx.batch_size_seed {
                source.randomize_batch_sizes(seed);
            }
            if ctx.attempt == 0 {
                source.count_total_bytes();
            }
            Ok(Box::new(source))
        }
        "channel" => Ok(Box::new(channel::ChannelSource::take(
            &ctx.channels,
            table,
            physical_schema,
            metrics,
            ctx.attempt,
        )?)),
        "datagen" => Ok(Box::new(datagen::DatagenSource::new(
            table,
            physical_schema,
            options,
            ctx.batch_size,
            metrics,
        )?)),
        "kafka" | "upsert-kafka" => Ok(Box::new(kafka::source::KafkaSource::new(
            table,
            options,
            physical_schema,
            ctx.source_subtask,
            ctx.source_parallelism,
            &ctx.time_zone,
            ctx.batch_size,
            metrics,
        )?)),
        "nexmark" => Ok(Box::new(nexmark::NexmarkSource::new(
            table,
            physical_schema,
            options,
            ctx.source_subtask,
            ctx.source_parallelism,
            ctx.batch_size,
            metrics,
        )?)),
        "print" | "blackhole" => Err(SluiceError::Plan(format!(
            "table '{table}' uses the '{connector}' connector, which can only be written to"
        ))),
        other => Err(SluiceError::NotSupported(format!(
            "'connector' = '{other}' of table '{table}' (supported: filesystem, kafka, upsert-kafka, datagen, nexmark, channel, print, blackhole)"
        ))),
    }
}

/// A source group's checkpointed offsets (one per old source subtask) re-split over
/// `parallelism` new subtasks, when the connector can: a Kafka table's offsets are per
/// partition, so every new subtask gets all of them and reads the partitions it owns now.
/// `None` for other connectors, or when an old subtask was cut inside a batch (`skip_rows`
/// > 0: a position that only that subtask's order can resume).
pub fn resplit_offsets(
    options: &ConnectorOptions,
    offsets: &[crate::checkpoint::SourceOffset],
    parallelism: usize,
) -> Option<Vec<crate::checkpoint::SourceOffset>> {
    match options.get("connector").map(String::as_str) {
        Some("kafka" | "upsert-kafka") => kafka::source::merge_offsets(offsets, parallelism),
        _ => None,
    }
}

/// The `'sink.delivery-guarantee'` of a `filesystem` sink: `exactly-once` (default:
/// two-phase commit when the job checkpoints exactly-once) or `at-least-once` (direct).
fn sink_exactly_once(options: &ConnectorOptions, table: &str) -> Result<bool> {
    match options
        .get("sink.delivery-guarantee")
        .map(|s| s.to_ascii_lowercase())
    {
        None => Ok(true),
        Some(v) if v == "exactly-once" => Ok(true),
        Some(v) if v == "at-least-once" || v == "none" => Ok(false),
        Some(v) => Err(SluiceError::Config(format!(
            "'sink.delivery-guarantee' of table '{table}' must be 'exactly-once', \
             'at-least-once' or 'none', found '{v}'"
        ))),
    }
}

/// The directory a `filesystem` sink writes into (`None` for other connectors).
pub fn resolve_sink_directory(
    options: &ConnectorOptions,
    ctx: &ConnectorContext,
) -> Option<PathBuf> {
    match options.get("connector").map(|s| s.as_str()) {
        Some("filesystem") => options.get("path").map(|p| resolve(ctx, p)),
        _ => None,
    }
}

/// Creates the sink of a table from its `WITH` options.
///
/// `updating`: the rows written are a changelog (sinks that can take one receive the row
/// kinds).
pub fn create_sink(
    table: &str,
    options: &ConnectorOptions,
    partition_keys: &[(usize, String)],
    schema: datafusion_common::arrow::datatypes::SchemaRef,
    ctx: &ConnectorContext,
    updating: bool,
) -> Result<Box<dyn BatchSink>> {
    let connector = option(options, "connector", table)?;
    match connector.as_str() {
        "filesystem" => {
            let format = file_format(options, table)?;
            if let FileFormat::Changelog(envelope) = format {
                // The planner refuses such an INSERT first.
                return Err(SluiceError::NotSupported(format!(
                    "writing table '{table}' in '{}'",
                    envelope.name()
                )));
            }
            check_format_types(format, &schema, table, true)?;
            let path = resolve(ctx, option(options, "path", table)?);
            if !partition_keys.is_empty() {
                return Ok(Box::new(partitioned::PartitionedSink::new(
                    &path,
                    format!("part-{}-{}", ctx.job_id, ctx.subtask),
                    filesystem::LineFormat::of(format == FileFormat::Json, options)?,
                    ctx.two_phase_sinks && sink_exactly_once(options, table)?,
                    ctx.attempt,
                    partition_keys.to_vec(),
                    options,
                )?));
            }
            Ok(Box::new(filesystem::DirectorySink::new(
                &path,
                format!("part-{}-{}", ctx.job_id, ctx.subtask),
                filesystem::LineFormat::of(format == FileFormat::Json, options)?,
                ctx.two_phase_sinks && sink_exactly_once(options, table)?,
                ctx.attempt,
            )?))
        }
        "print" => Ok(Box::new(PrintSink {
            prefix: options
                .get("print-identifier")
                .map(|p| format!("{p}> "))
                .unwrap_or_default(),
        })),
        "blackhole" => Ok(Box::new(BlackholeSink)),
        "kafka" | "upsert-kafka" => Ok(Box::new(kafka::sink::KafkaSink::new(
            table,
            options,
            schema,
            ctx,
        )?)),
        "channel" => Ok(Box::new(channel::CallbackSink::take(
            &ctx.sink_callbacks,
            table,
            updating,
        )?)),
        other => Err(SluiceError::NotSupported(format!(
            "'connector' = '{other}' of table '{table}' (supported: filesystem, kafka, upsert-kafka, print, blackhole, channel)"
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

    fn finish(&mut self) -> Result<Committable> {
        std::io::stdout()
            .flush()
            .map_err(|e| SluiceError::io("printing rows", e))?;
        Ok(Committable::Nothing)
    }
}

/// Discards every row (Flink's blackhole connector), for benchmarks.
pub struct BlackholeSink;

impl BatchSink for BlackholeSink {
    fn write(&mut self, _batch: &StreamBatch) -> Result<()> {
        Ok(())
    }
    fn finish(&mut self) -> Result<Committable> {
        Ok(Committable::Nothing)
    }
}
