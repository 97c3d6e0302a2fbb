//! A `filesystem` table `PARTITIONED BY (a, b)`: [`PartitionedSource`] reads the files
//! under its `<column>=<value>` directories, [`PartitionedSink`] writes them.
//!
//! The sink (Flink SQL "FileSystem >
//! Partition Files", "Partition Commit"): each row goes under `<path>/a=<value>/b=<value>/`
//! into that partition's part files, without the partition columns (the path holds them);
//! a NULL or empty value is `'partition.default-name'`. Values are escaped as Flink's
//! `PartitionPathUtils.escapePathName` does (`23:59` is `23%3A59`).
//!
//! With `'sink.partition-commit.policy.kind' = 'success-file'`, a partition is committed
//! (an empty `'sink.partition-commit.success-file.name'`, `_SUCCESS`, written into it)
//! when its trigger says it is complete: `process-time` (default) once the processing time
//! passed its first row's + `'sink.partition-commit.delay'`; `partition-time` once the
//! watermark passed the time its values give (`'partition.time-extractor.timestamp-pattern'`,
//! e.g. `$dt $hm:00`, or the first value) + the delay. The check runs at each checkpoint
//! (the success file commits with the checkpoint's part files) and every partition is
//! committed when the input ends.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion_common::arrow::array::{Array, AsArray, UInt32Array};
use datafusion_common::arrow::compute::{cast, take};
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::arrow::record_batch::RecordBatch;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::commit::PendingCommit;
use crate::connectors::filesystem::{DirectorySink, PendingFile};
use crate::connectors::{BatchSink, Committable};
use crate::message::StreamBatch;

/// When a partition is complete.
#[derive(Debug, Clone)]
enum Trigger {
    ProcessTime,
    PartitionTime { pattern: Option<String> },
}

/// A partition being written.
struct Partition {
    sink: DirectorySink,
    /// Processing time (ms) of its first row.
    created_ms: i64,
    /// Its success file is written (or pre-committed).
    committed: bool,
}

/// See the module docs.
pub struct PartitionedSink {
    dir: PathBuf,
    prefix: String,
    format: super::filesystem::LineFormat,
    two_phase: bool,
    attempt: u32,
    keys: Vec<(usize, String)>,
    default_name: String,
    success_file: Option<String>,
    trigger: Trigger,
    delay_ms: i64,
    watermark_ms: i64,
    partitions: BTreeMap<String, Partition>,
}

/// Flink's `PartitionPathUtils.escapePathName`: these characters and the control
/// characters become `%XX`.
fn escape_path_name(value: &str) -> String {
    const SPECIAL: &[char] = &[
        '"', '#', '%', '\'', '*', '/', ':', '=', '?', '\\', '\u{7f}', '{', '}', '[', ']', '^',
    ];
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if SPECIAL.contains(&c) || (c as u32) < 0x20 {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

impl PartitionedSink {
    /// A sink writing the rows of a table partitioned by `keys` (index in the rows,
    /// name) under `dir`, part files named `prefix...` as [`DirectorySink`]'s.
    ///
    /// # Errors
    /// An option of the wrong form, or a commit policy other than `success-file`.
    pub fn new(
        dir: &Path,
        prefix: String,
        format: super::filesystem::LineFormat,
        two_phase: bool,
        attempt: u32,
        keys: Vec<(usize, String)>,
        options: &ConnectorOptions,
    ) -> Result<Self> {
        let get = |k: &str| options.get(k).map(|v| v.trim().to_string());
        let success_file = match get("sink.partition-commit.policy.kind") {
            None => None,
            Some(kinds) => {
                let mut success = None;
                for kind in kinds.split(',').map(|k| k.trim().to_ascii_lowercase()) {
                    match kind.as_str() {
                        "success-file" => {
                            success = Some(
                                get("sink.partition-commit.success-file.name")
                                    .unwrap_or_else(|| "_SUCCESS".into()),
                            )
                        }
                        other => {
                            return Err(SluiceError::NotSupported(format!(
                                "'sink.partition-commit.policy.kind' = '{other}' (Sluice commits \
                                 partitions with 'success-file')"
                            )))
                        }
                    }
                }
                success
            }
        };
        let trigger = match get("sink.partition-commit.trigger").as_deref() {
            None | Some("process-time") => Trigger::ProcessTime,
            Some("partition-time") => Trigger::PartitionTime {
                pattern: get("partition.time-extractor.timestamp-pattern"),
            },
            Some(other) => {
                return Err(SluiceError::Config(format!(
                    "'sink.partition-commit.trigger' must be 'process-time' or 'partition-time', \
                     found '{other}'"
                )))
            }
        };
        if let Some(f) = get("partition.time-extractor.timestamp-formatter") {
            if f != "yyyy-MM-dd HH:mm:ss" {
                return Err(SluiceError::NotSupported(format!(
                    "'partition.time-extractor.timestamp-formatter' = '{f}' (Sluice reads \
                     partition times as 'yyyy-MM-dd HH:mm:ss' or 'yyyy-MM-dd')"
                )));
            }
        }
        let delay_ms =
            crate::connectors::datagen::parse_duration_ms(options, "sink.partition-commit.delay")?
                .unwrap_or(0);
        std::fs::create_dir_all(dir).map_err(|e| {
            SluiceError::io(format!("creating sink directory '{}'", dir.display()), e)
        })?;
        Ok(PartitionedSink {
            dir: dir.to_path_buf(),
            prefix,
            format,
            two_phase,
            attempt,
            keys,
            default_name: get("partition.default-name")
                .unwrap_or_else(|| "__DEFAULT_PARTITION__".into()),
            success_file,
            trigger,
            delay_ms,
            watermark_ms: i64::MIN,
            partitions: BTreeMap::new(),
        })
    }

    /// The partition's time (ms, as UTC wall clock) from its values, for the
    /// `partition-time` trigger.
    fn partition_time_ms(&self, values: &[(String, String)]) -> Option<i64> {
        let Trigger::PartitionTime { pattern } = &self.trigger else {
            return None;
        };
        let text = match pattern {
            Some(p) => {
                let mut t = p.clone();
                // Longer names first, so `$dt` does not eat into `$dtx`.
                let mut sorted: Vec<&(String, String)> = values.iter().collect();
                sorted.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
                for (k, v) in sorted {
                    t = t.replace(&format!("${k}"), v);
                }
                t
            }
            None => values.first()?.1.clone(),
        };
        let t = text.trim();
        chrono::NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S")
            .ok()
            .or_else(|| {
                chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
                    .ok()
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
            })
            .map(|dt| dt.and_utc().timestamp_millis())
    }

    fn now_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    /// The partition `path` (relative) is complete by its trigger.
    fn due(&self, path: &str, p: &Partition) -> bool {
        match &self.trigger {
            Trigger::ProcessTime => Self::now_ms() >= p.created_ms + self.delay_ms,
            Trigger::PartitionTime { .. } => {
                let values: Vec<(String, String)> = path
                    .split('/')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), unescape(v)))
                    .collect();
                self.partition_time_ms(&values)
                    .is_some_and(|t| self.watermark_ms >= t.saturating_add(self.delay_ms))
            }
        }
    }

    /// Success files of the partitions complete now (`all`: every partition), as pending
    /// files committed with the checkpoint (or written at once without two-phase commit).
    fn success_files(&mut self, transaction: &str, all: bool) -> Result<Vec<PendingFile>> {
        let Some(name) = self.success_file.clone() else {
            return Ok(Vec::new());
        };
        let due: Vec<String> = self
            .partitions
            .iter()
            .filter(|(path, p)| !p.committed && (all || self.due(path, p)))
            .map(|(path, _)| path.clone())
            .collect();
        let mut out = Vec::new();
        for path in due {
            let dir = self.dir.join(&path);
            let target = dir.join(&name);
            if self.two_phase {
                let pending = dir.join(format!(".{}-{transaction}.{name}.pending", self.prefix));
                std::fs::write(&pending, b"")
                    .map_err(|e| SluiceError::io(format!("writing '{}'", pending.display()), e))?;
                out.push(PendingFile { pending, target });
            } else {
                std::fs::write(&target, b"")
                    .map_err(|e| SluiceError::io(format!("writing '{}'", target.display()), e))?;
            }
            if let Some(p) = self.partitions.get_mut(&path) {
                p.committed = true;
            }
        }
        Ok(out)
    }

    /// Each partition's files, then the success files: committed in that order.
    fn close_all(&mut self, transaction: &str, end: bool) -> Result<Committable> {
        let mut committable = Committable::Nothing;
        for p in self.partitions.values_mut() {
            committable.append(if end {
                p.sink.finish()?
            } else {
                p.sink.pre_commit_named(transaction)?
            });
        }
        let markers = self.success_files(transaction, end)?;
        if !markers.is_empty() {
            committable.append(Committable::Pending(
                markers.into_iter().map(PendingCommit::File).collect(),
            ));
        }
        Ok(committable)
    }
}

/// The inverse of [`escape_path_name`].
fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            let hex: String = chars.by_ref().take(2).collect();
            match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                Some(d) => out.push(d),
                None => {
                    out.push('%');
                    out.push_str(&hex);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl BatchSink for PartitionedSink {
    fn write(&mut self, batch: &StreamBatch) -> Result<()> {
        let data = &batch.data;
        let n = data.num_rows();
        if n == 0 {
            return Ok(());
        }
        let texts = self
            .keys
            .iter()
            .map(|(i, _)| cast(data.column(*i), &DataType::Utf8))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let texts: Vec<_> = texts.iter().map(|t| t.as_string::<i32>()).collect();
        // A row's partition values (NULL or empty: the default partition name).
        let values = |r: usize| {
            texts
                .iter()
                .map(move |t| (!t.is_null(r) && !t.value(r).is_empty()).then(|| t.value(r)))
        };
        // The rows of each partition, in order; a run of rows with the same values (the
        // common case: rows in time order) takes one lookup.
        let mut index: HashMap<Vec<Option<&str>>, usize> = HashMap::new();
        let mut groups: Vec<(Vec<Option<&str>>, Vec<u32>)> = Vec::new();
        let mut current = 0;
        for r in 0..n {
            if r == 0 || !values(r).eq(values(r - 1)) {
                let key: Vec<Option<&str>> = values(r).collect();
                current = *index.entry(key.clone()).or_insert_with(|| {
                    groups.push((key, Vec::new()));
                    groups.len() - 1
                });
            }
            groups[current].1.push(r as u32);
        }
        let keep: Vec<usize> = (0..data.num_columns())
            .filter(|c| !self.keys.iter().any(|(k, _)| k == c))
            .collect();
        let schema = std::sync::Arc::new(data.schema().project(&keep)?);
        for (key, indices) in groups {
            let path = self
                .keys
                .iter()
                .zip(&key)
                .map(|((_, name), v)| {
                    let v = v.map_or_else(|| self.default_name.clone(), escape_path_name);
                    format!("{}={v}", escape_path_name(name))
                })
                .collect::<Vec<_>>()
                .join("/");
            let columns = if indices.len() == n {
                keep.iter().map(|&c| Arc::clone(data.column(c))).collect()
            } else {
                let idx = UInt32Array::from(indices);
                keep.iter()
                    .map(|&c| take(data.column(c).as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?
            };
            let part = RecordBatch::try_new(std::sync::Arc::clone(&schema), columns)?;
            if !self.partitions.contains_key(&path) {
                let sink = DirectorySink::new(
                    &self.dir.join(&path),
                    self.prefix.clone(),
                    self.format.clone(),
                    self.two_phase,
                    self.attempt,
                )?;
                self.partitions.insert(
                    path.clone(),
                    Partition {
                        sink,
                        created_ms: Self::now_ms(),
                        committed: false,
                    },
                );
            }
            let p = self.partitions.get_mut(&path).expect("inserted above");
            p.sink.write(&StreamBatch::new(part))?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark_ms: i64) {
        self.watermark_ms = self.watermark_ms.max(watermark_ms);
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Committable> {
        self.close_all(&format!("c{checkpoint_id}"), false)
    }

    fn finish(&mut self) -> Result<Committable> {
        self.close_all("end", true)
    }
}

/// Reads a partitioned table: the visible files under `<path>/<column>=<value>/...`
/// (Flink's partition discovery), each row's partition columns filled from its file's
/// directories (unescaped; `'partition.default-name'` is NULL), the other columns from the
/// file. Offsets are the file reader's (a checkpoint names the file).
pub struct PartitionedSource {
    inner: crate::connectors::csv_source::CsvSource,
    root: PathBuf,
    /// (index in the physical columns, name, type).
    keys: Vec<(usize, String, DataType)>,
    schema: datafusion_common::arrow::datatypes::SchemaRef,
    default_name: String,
}

/// The visible files under `dir`, into `<column>=<value>` directories, in path order.
fn partition_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| SluiceError::io(format!("listing '{}'", dir.display()), e))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            if name.contains('=') {
                partition_files(&path, out)?;
            }
        } else {
            out.push(path);
        }
    }
    Ok(())
}

impl PartitionedSource {
    /// Opens the table at `path` (CSV or JSON) with physical columns `physical`, of
    /// which `partition_keys` come from the directories.
    ///
    /// # Errors
    /// A missing path, bad format options, a change-data-capture format.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        table: &str,
        path: &Path,
        format: super::FileFormat,
        options: &ConnectorOptions,
        partition_keys: &[String],
        physical: datafusion_common::arrow::datatypes::SchemaRef,
        ctx: &super::ConnectorContext,
        metrics: std::sync::Arc<crate::metrics::JobMetrics>,
    ) -> Result<Self> {
        use datafusion_common::arrow::datatypes::Schema;
        use std::sync::Arc;
        let keys = partition_keys
            .iter()
            .map(|k| {
                let i = physical.index_of(k)?;
                Ok((i, k.clone(), physical.field(i).data_type().clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let data = Arc::new(Schema::new(
            physical
                .fields()
                .iter()
                .enumerate()
                .filter(|(i, _)| !keys.iter().any(|(k, ..)| k == i))
                .map(|(_, f)| f.as_ref().clone())
                .collect::<Vec<_>>(),
        ));
        let tz =
            sluice_common::time::parse_time_zone(&ctx.time_zone).map_err(SluiceError::Config)?;
        let source = match format {
            super::FileFormat::Csv => {
                super::check_format_types(format, &data, table, false)?;
                let csv = super::filesystem::CsvOptions::from_options(options)?;
                super::csv_source::CsvSource::new(
                    path,
                    data,
                    None,
                    csv,
                    tz,
                    ctx.batch_size,
                    metrics,
                )?
            }
            super::FileFormat::Json => {
                let ignore =
                    super::filesystem::bool_option(options, "json.ignore-parse-errors", false)?;
                let format = Arc::new(super::json_format::JsonFormat::new(data, None, tz, ignore));
                super::csv_source::CsvSource::with_format(
                    path,
                    format,
                    None,
                    super::csv_source::HeaderRow::Data,
                    ctx.batch_size,
                    metrics,
                )?
            }
            super::FileFormat::Changelog(envelope) => {
                return Err(SluiceError::NotSupported(format!(
                    "a PARTITIONED BY table in '{}' ('{table}')",
                    envelope.name()
                )))
            }
        };
        let mut files = Vec::new();
        if path.is_dir() {
            partition_files(path, &mut files)?;
        }
        files.sort();
        let mut inner = source
            .with_files(files)
            .split(ctx.source_subtask, ctx.source_parallelism);
        if let Some(seed) = ctx.batch_size_seed {
            inner.randomize_batch_sizes(seed);
        }
        if ctx.attempt == 0 {
            inner.count_total_bytes();
        }
        Ok(PartitionedSource {
            inner,
            root: path.to_path_buf(),
            keys,
            schema: physical,
            default_name: options
                .get("partition.default-name")
                .cloned()
                .unwrap_or_else(|| "__DEFAULT_PARTITION__".into()),
        })
    }
}

impl super::Source for PartitionedSource {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        use datafusion_common::arrow::array::{ArrayRef, StringArray};
        let Some(batch) = self.inner.next_batch()? else {
            return Ok(None);
        };
        let file = self
            .inner
            .position()
            .get("path")
            .and_then(|p| p.as_str())
            .map(PathBuf::from)
            .unwrap_or_default();
        let relative = file.strip_prefix(&self.root).unwrap_or(&file).to_path_buf();
        let values: BTreeMap<String, String> = relative
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .filter_map(|c| c.split_once('='))
            .map(|(k, v)| (unescape(k), unescape(v)))
            .collect();
        let rows = batch.num_rows();
        let mut data = batch.columns().iter();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for i in 0..self.schema.fields().len() {
            match self.keys.iter().find(|(k, ..)| *k == i) {
                Some((_, name, t)) => {
                    let value = values
                        .get(name)
                        .filter(|v| **v != self.default_name)
                        .cloned();
                    let text: ArrayRef =
                        std::sync::Arc::new(StringArray::from(vec![value.clone(); rows]));
                    let typed = cast(&text, t)?;
                    if value.is_some() && typed.null_count() > 0 {
                        return Err(SluiceError::Execution(format!(
                            "{}: the partition value '{}' of '{name}' is not a {}",
                            file.display(),
                            value.unwrap_or_default(),
                            sluice_common::types::flink_type_name(t)
                        )));
                    }
                    columns.push(typed);
                }
                None => columns.push(std::sync::Arc::clone(
                    data.next().expect("a data column per non-partition column"),
                )),
            }
        }
        Ok(Some(RecordBatch::try_new(
            std::sync::Arc::clone(&self.schema),
            columns,
        )?))
    }

    fn describe(&self) -> String {
        format!("{}, partitioned", self.inner.describe())
    }

    fn position(&self) -> serde_json::Value {
        self.inner.position()
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        self.inner.seek(position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_names_are_escaped_as_flink_does() {
        assert_eq!(escape_path_name("23:59"), "23%3A59");
        assert_eq!(escape_path_name("a/b=c"), "a%2Fb%3Dc");
        assert_eq!(unescape("23%3A59"), "23:59");
    }
}
