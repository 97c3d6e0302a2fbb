//! The `filesystem` connector: CSV options, source paths, and the directory sink. The CSV
//! reader itself is in [`crate::connectors::csv_source`].

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::csv::WriterBuilder;
use regex::Regex;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::commit::PendingCommit;
use crate::connectors::{BatchSink, Committable};

/// Options of the `csv` format (Flink's names).
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// `'csv.header'`: the first record of each file is a header to skip (`true`) or data
    /// (`false`). Not set: data, unless it is exactly the column names and a column is
    /// not a string (then it could not be data; Flink would fail on it).
    pub header: Option<bool>,
    /// `'csv.field-delimiter'` (default `,`).
    pub delimiter: u8,
    /// `'csv.quote-character'` (default `"`).
    pub quote: u8,
    /// `'csv.null-literal'`: another spelling of NULL besides the empty field.
    pub null_literal: Option<String>,
    /// `'csv.ignore-parse-errors'`: skip and count bad rows instead of failing.
    pub ignore_parse_errors: bool,
    /// `'csv.array-element-delimiter'` (default `;`): separates the elements of an
    /// `ARRAY` and the fields of a `ROW` in one field, as Flink's CSV format.
    pub array_delimiter: String,
}

impl CsvOptions {
    /// Reads the `csv.*` options.
    ///
    /// # Errors
    /// A delimiter or quote that is not one character, or a boolean that is not
    /// `true`/`false`.
    pub fn from_options(options: &ConnectorOptions) -> Result<Self> {
        let one_char = |key: &str, default: u8| -> Result<u8> {
            match options.get(key) {
                None => Ok(default),
                Some(v) if v == "\\t" => Ok(b'\t'),
                Some(v) if v.len() == 1 => Ok(v.as_bytes()[0]),
                Some(v) => Err(SluiceError::Config(format!(
                    "'{key}' must be a single character, found '{v}'"
                ))),
            }
        };
        Ok(CsvOptions {
            header: match options.get("csv.header") {
                None => None,
                Some(_) => Some(bool_option(options, "csv.header", false)?),
            },
            delimiter: one_char("csv.field-delimiter", b',')?,
            quote: one_char("csv.quote-character", b'"')?,
            null_literal: options.get("csv.null-literal").cloned(),
            ignore_parse_errors: bool_option(options, "csv.ignore-parse-errors", false)?,
            array_delimiter: match options.get("csv.array-element-delimiter") {
                Some(d) if d.is_empty() => {
                    return Err(SluiceError::Config(
                        "'csv.array-element-delimiter' must not be empty".to_string(),
                    ))
                }
                Some(d) => d.clone(),
                None => ";".to_string(),
            },
        })
    }

    /// The NULL spellings besides the empty field, as arrow-csv's null regex (`None`:
    /// only the empty field, which arrow-csv checks without a regex).
    pub(crate) fn null_regex(&self) -> Result<Option<Regex>> {
        match &self.null_literal {
            Some(lit) if !lit.is_empty() => {
                let pattern = format!("^(|{})$", regex::escape(lit));
                Regex::new(&pattern)
                    .map(Some)
                    .map_err(|e| SluiceError::Config(e.to_string()))
            }
            _ => Ok(None),
        }
    }
}

/// Reads a boolean option (`true`/`false`, any case).
pub fn bool_option(options: &ConnectorOptions, key: &str, default: bool) -> Result<bool> {
    match options.get(key).map(|v| v.to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v == "true" => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(v) => Err(SluiceError::Config(format!(
            "'{key}' must be 'true' or 'false', found '{v}'"
        ))),
    }
}

/// The files of a source path: the file itself, or the visible files of a directory in
/// name order (names starting with `.` or `_` are hidden, as in Flink).
pub fn list_files(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path)
        .map_err(|e| SluiceError::io(format!("opening source path '{}'", path.display()), e))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let entries = std::fs::read_dir(path)
        .map_err(|e| SluiceError::io(format!("listing '{}'", path.display()), e))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| SluiceError::io(format!("listing '{}'", path.display()), e))?;
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        if entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Writes part files into a directory (`'path'` of a `filesystem` sink). CSV: no header
/// row (as Flink's CSV format), NULL as an empty field. JSON: one object per line, NULL as
/// `null`. Timestamps as `YYYY-MM-DD HH:MM:SS[.fff]`.
///
/// Two ways of writing, after Flink's `FileSink`:
/// - **two-phase commit** (`'sink.delivery-guarantee' = 'exactly-once'`, the default when
///   the job checkpoints exactly-once): rows go to a hidden in-progress file
///   `.<prefix>-<n>.<ext>.inprogress`; at a checkpoint barrier it is flushed, synced and
///   renamed to `.<prefix>-c<n>.<ext>.pending` (pre-commit), where `n` is the checkpoint id
///   (`-end` for the last file, closed at the end of the input); the job renames it to
///   `<prefix>-c<n>.<ext>` (commit) only once that checkpoint is complete. Names starting
///   with `.` are hidden from readers (and from Sluice's own sources).
/// - **direct** (at-least-once, at-most-once, no checkpoints): one visible file
///   `<prefix>-a<attempt>.<ext>` per run of the job (a restarted job writes a new file, so
///   nothing written before a failure is lost).
pub struct DirectorySink {
    dir: PathBuf,
    /// `part-<job id>-<subtask>`.
    prefix: String,
    extension: &'static str,
    format: LineFormat,
    two_phase: bool,
    attempt: u32,
    /// The open file: writer, the name it has while written, the name it gets.
    open: Option<(std::io::BufWriter<File>, PathBuf, PathBuf)>,
}

impl DirectorySink {
    /// A sink writing into `dir` (created if missing), CSV or JSON lines; files are named
    /// `prefix...` as described on the type.
    ///
    /// # Errors
    /// The directory cannot be created.
    pub fn new(
        dir: &Path,
        prefix: String,
        format: LineFormat,
        two_phase: bool,
        attempt: u32,
    ) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| {
            SluiceError::io(format!("creating sink directory '{}'", dir.display()), e)
        })?;
        Ok(DirectorySink {
            dir: dir.to_path_buf(),
            prefix,
            extension: format.extension(),
            format,
            two_phase,
            attempt,
            open: None,
        })
    }

    fn io_error(&self, e: std::io::Error) -> SluiceError {
        SluiceError::io(format!("writing into '{}'", self.dir.display()), e)
    }

    /// Flushes, syncs and closes the open file, renaming it to `.<name>.pending`; returns
    /// what commits it.
    fn close(&mut self, transaction: &str) -> Result<Committable> {
        let Some((mut w, path, _)) = self.open.take() else {
            return Ok(Committable::Nothing);
        };
        w.flush().map_err(|e| self.io_error(e))?;
        let file = w.into_inner().map_err(|e| self.io_error(e.into_error()))?;
        file.sync_all().map_err(|e| self.io_error(e))?;
        if !self.two_phase {
            return Ok(Committable::Nothing);
        }
        let name = format!("{}-{transaction}.{}", self.prefix, self.extension);
        let pending = self.dir.join(format!(".{name}.pending"));
        std::fs::rename(&path, &pending).map_err(|e| self.io_error(e))?;
        Ok(Committable::Pending(vec![PendingCommit::File(
            PendingFile {
                pending,
                target: self.dir.join(name),
            },
        )]))
    }
}

/// A pre-committed file of a two-phase-commit sink: committing renames `pending` to
/// `target`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingFile {
    /// The hidden pending file (`.name.pending`).
    pub pending: PathBuf,
    /// Its final, visible name.
    pub target: PathBuf,
}

impl PendingFile {
    /// Commits the file: renames it to its final name. Idempotent: a file already
    /// committed (pending gone, target present) is left alone.
    ///
    /// # Errors
    /// Neither the pending file nor the target exists (the pre-committed data is lost), or
    /// the rename fails.
    pub fn commit(&self) -> Result<()> {
        if self.pending.exists() {
            return std::fs::rename(&self.pending, &self.target).map_err(|e| {
                SluiceError::io(format!("committing '{}'", self.target.display()), e)
            });
        }
        if self.target.exists() {
            return Ok(());
        }
        Err(SluiceError::Execution(format!(
            "cannot commit '{}': its pre-committed file '{}' is missing",
            self.target.display(),
            self.pending.display()
        )))
    }
}

/// Deletes the hidden in-progress and pending files of job `job` (any run of it: part
/// files are named `part-<job>-<run>-...`) in `dir`: on recovery (after the restored
/// checkpoint's pending files were committed), what was written after it is discarded.
///
/// # Errors
/// The directory cannot be listed or a file cannot be deleted.
pub fn discard_uncommitted(dir: &Path, job: &str) -> Result<usize> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(0); // nothing written yet
    };
    let prefix = format!(".part-{job}-");
    let mut removed = 0;
    for entry in entries.flatten() {
        // A partitioned sink writes into `<column>=<value>` directories.
        if entry.path().is_dir() {
            removed += discard_uncommitted(&entry.path(), job)?;
            continue;
        }
        let name = entry.file_name().to_string_lossy().to_string();
        let hidden_part = name.starts_with(&prefix)
            && (name.ends_with(".inprogress") || name.ends_with(".pending"));
        if hidden_part {
            std::fs::remove_file(entry.path()).map_err(|e| {
                SluiceError::io(format!("discarding '{}'", entry.path().display()), e)
            })?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Deletes the committed part files of job `job` in `dir` that a checkpoint after
/// `checkpoint_id` committed (`part-<job>-...-c<id>.<ext>` with a larger id, or `-end`
/// unless `final_checkpoint`: checkpoint `checkpoint_id` is the final one, which committed
/// them): restoring an older checkpoint rewinds the sink to it, so the replay does not
/// write those rows twice. Returns the names deleted.
///
/// # Errors
/// A file cannot be deleted.
pub fn discard_committed_after(
    dir: &Path,
    job: &str,
    checkpoint_id: u64,
    final_checkpoint: bool,
) -> Result<Vec<String>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let prefix = format!("part-{job}-");
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        if entry.path().is_dir() {
            let sub = entry.file_name().to_string_lossy().to_string();
            for name in
                discard_committed_after(&entry.path(), job, checkpoint_id, final_checkpoint)?
            {
                removed.push(format!("{sub}/{name}"));
            }
            continue;
        }
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let stem = rest.rsplit_once('.').map(|(s, _)| s).unwrap_or(rest);
        let transaction = stem.rsplit('-').next().unwrap_or("");
        let newer = match transaction {
            // The last output: committed with a final checkpoint, else after any.
            "end" => !final_checkpoint,
            t => t
                .strip_prefix('c')
                .and_then(|id| id.parse::<u64>().ok())
                .is_some_and(|id| id > checkpoint_id),
        };
        if newer {
            std::fs::remove_file(entry.path()).map_err(|e| {
                SluiceError::io(format!("discarding '{}'", entry.path().display()), e)
            })?;
            removed.push(name);
        }
    }
    removed.sort();
    Ok(removed)
}

/// How a file sink writes rows: one line (record) per row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineFormat {
    /// JSON lines ([`json_bytes`]).
    Json,
    /// CSV ([`csv_bytes`]) with `'csv.array-element-delimiter'`.
    Csv {
        /// Joins the elements of an ARRAY and the fields of a ROW.
        array_delimiter: String,
    },
}

impl LineFormat {
    /// `'format' = 'json'` (`json`) or CSV with the table's `csv.*` options.
    ///
    /// # Errors
    /// A bad `csv.*` option.
    pub fn of(json: bool, options: &ConnectorOptions) -> Result<Self> {
        Ok(if json {
            LineFormat::Json
        } else {
            LineFormat::Csv {
                array_delimiter: CsvOptions::from_options(options)?.array_delimiter,
            }
        })
    }

    /// The file name extension.
    pub fn extension(&self) -> &'static str {
        match self {
            LineFormat::Json => "json",
            LineFormat::Csv { .. } => "csv",
        }
    }

    /// The lines of `batch`, each ending with a line end.
    ///
    /// # Errors
    /// Arrow cannot write a column's type.
    pub fn bytes(&self, batch: &RecordBatch) -> Result<Vec<u8>> {
        match self {
            LineFormat::Json => json_bytes(batch),
            LineFormat::Csv { array_delimiter } => csv_bytes(batch, false, array_delimiter),
        }
    }
}

/// JSON-lines bytes of a batch, in Sluice's output conventions.
pub fn json_bytes(batch: &RecordBatch) -> Result<Vec<u8>> {
    use datafusion_common::arrow::json::writer::{
        LineDelimited, WriterBuilder as JsonWriterBuilder,
    };
    let (batch, timestamps_left) = timestamps_as_text(batch)?;
    let batch = &batch;
    let mut out = Vec::new();
    {
        let mut w = JsonWriterBuilder::new()
            .with_explicit_nulls(true)
            .with_timestamp_format("%Y-%m-%d %H:%M:%S%.3f".to_string())
            .with_timestamp_tz_format("%Y-%m-%d %H:%M:%S%.3f".to_string())
            .build::<_, LineDelimited>(&mut out);
        w.write(batch)?;
        w.finish()?;
    }
    Ok(if timestamps_left {
        strip_zero_millis(out)
    } else {
        out
    })
}

/// Zone names whose wall-clock time is UTC's (a TIMESTAMP_LTZ column carries the session
/// time zone's name).
const UTC_NAMES: &[&str] = &[
    "UTC",
    "Etc/UTC",
    "+00:00",
    "+0000",
    "Z",
    "GMT",
    "Etc/GMT",
    "UCT",
    "Etc/UCT",
    "Zulu",
    "Etc/Zulu",
    "Universal",
    "Etc/Universal",
];

/// `batch` with its millisecond timestamp columns (without a zone, or in UTC, as
/// TIMESTAMP_LTZ columns are held) as text in Sluice's spelling, `YYYY-MM-DD HH:MM:SS` and
/// `.fff` only when the milliseconds are not zero (`format_timestamp_ms`: a few integer
/// operations, where arrow's writers run chrono's strftime and the `.000` must be stripped
/// from the whole output after); and whether a timestamp is left to the writer (of another
/// unit or zone, or inside an ARRAY or ROW).
fn timestamps_as_text(batch: &RecordBatch) -> Result<(RecordBatch, bool)> {
    use datafusion_common::arrow::array::{Array, AsArray, StringBuilder};
    use datafusion_common::arrow::datatypes::{
        DataType, Field, Schema, TimeUnit, TimestampMillisecondType,
    };
    fn has_timestamp(t: &DataType) -> bool {
        match t {
            DataType::Timestamp(_, _) => true,
            DataType::List(f) | DataType::LargeList(f) | DataType::Map(f, _) => {
                has_timestamp(f.data_type())
            }
            DataType::Struct(fields) => fields.iter().any(|f| has_timestamp(f.data_type())),
            _ => false,
        }
    }
    let schema = batch.schema();
    let ours = |t: &DataType| {
        matches!(t, DataType::Timestamp(TimeUnit::Millisecond, tz)
            if tz.as_deref().is_none_or(|z| UTC_NAMES.contains(&z)))
    };
    if !schema.fields().iter().any(|f| ours(f.data_type())) {
        let left = schema.fields().iter().any(|f| has_timestamp(f.data_type()));
        return Ok((batch.clone(), left));
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    let mut left = false;
    for (f, column) in schema.fields().iter().zip(batch.columns()) {
        if !ours(f.data_type()) {
            left |= has_timestamp(f.data_type());
            fields.push(f.as_ref().clone());
            columns.push(Arc::clone(column));
            continue;
        }
        let ts = column.as_primitive::<TimestampMillisecondType>();
        let mut text = StringBuilder::with_capacity(ts.len(), ts.len() * 23);
        let mut one = String::with_capacity(24);
        for i in 0..ts.len() {
            if ts.is_null(i) {
                text.append_null();
            } else {
                one.clear();
                sluice_common::time::push_timestamp_ms(&mut one, ts.value(i));
                text.append_value(&one);
            }
        }
        fields.push(Field::new(f.name(), DataType::Utf8, f.is_nullable()));
        columns.push(Arc::new(text.finish()) as _);
    }
    let options = datafusion_common::arrow::record_batch::RecordBatchOptions::new()
        .with_row_count(Some(batch.num_rows()));
    let batch =
        RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)?;
    Ok((batch, left))
}

/// The timestamp spelling of Sluice's text outputs (`.000` is then stripped).
const TIMESTAMP_TEXT: &str = "%Y-%m-%d %H:%M:%S%.3f";

/// CSV bytes of a batch, in Sluice's output conventions; `ARRAY` and `ROW` columns as
/// Flink's CSV format writes them: elements and fields joined by `array_delimiter`
/// (`'csv.array-element-delimiter'`), a NULL element or field empty.
pub fn csv_bytes(batch: &RecordBatch, header: bool, array_delimiter: &str) -> Result<Vec<u8>> {
    let (batch, timestamps_left) = timestamps_as_text(batch)?;
    let batch = &batch;
    let nested_text;
    let batch = if batch
        .schema()
        .fields()
        .iter()
        .any(|f| f.data_type().is_nested())
    {
        nested_text = nested_as_text(batch, array_delimiter)?;
        &nested_text
    } else {
        batch
    };
    let mut out = Vec::new();
    {
        let mut w = WriterBuilder::new()
            .with_header(header)
            .with_timestamp_format(TIMESTAMP_TEXT.to_string())
            .with_timestamp_tz_format(TIMESTAMP_TEXT.to_string())
            .with_null(String::new())
            .build(&mut out);
        w.write(batch)?;
    }
    Ok(if timestamps_left {
        strip_zero_millis(out)
    } else {
        out
    })
}

/// `batch` with each `ARRAY` and `ROW` column as `STRING` text (see [`csv_bytes`]).
fn nested_as_text(batch: &RecordBatch, delimiter: &str) -> Result<RecordBatch> {
    use datafusion_common::arrow::array::{Array, ArrayRef, AsArray, StringArray};
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
    use datafusion_common::arrow::util::display::{ArrayFormatter, FormatOptions};
    let options = FormatOptions::new()
        .with_null("")
        .with_timestamp_format(Some(TIMESTAMP_TEXT))
        .with_timestamp_tz_format(Some(TIMESTAMP_TEXT));
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (f, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let parts: Option<Vec<(ArrayFormatter, Vec<std::ops::Range<usize>>)>> = match column
            .data_type()
        {
            DataType::List(_) => {
                let list = column.as_list::<i32>();
                let ranges = (0..list.len())
                    .map(|r| list.value_offsets()[r] as usize..list.value_offsets()[r + 1] as usize)
                    .collect();
                Some(vec![(
                    ArrayFormatter::try_new(list.values().as_ref(), &options)?,
                    ranges,
                )])
            }
            DataType::Struct(_) => Some(
                column
                    .as_struct()
                    .columns()
                    .iter()
                    .map(|c| {
                        let ranges = (0..c.len()).map(|r| r..r + 1).collect();
                        Ok((ArrayFormatter::try_new(c.as_ref(), &options)?, ranges))
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
            _ => None,
        };
        let Some(parts) = parts else {
            fields.push(f.as_ref().clone());
            columns.push(Arc::clone(column));
            continue;
        };
        let text: StringArray = (0..column.len())
            .map(|r| {
                column.is_valid(r).then(|| {
                    parts
                        .iter()
                        .flat_map(|(format, ranges)| {
                            ranges[r].clone().map(move |i| format.value(i).to_string())
                        })
                        .collect::<Vec<_>>()
                        .join(delimiter)
                })
            })
            .collect();
        fields.push(Field::new(f.name(), DataType::Utf8, true));
        columns.push(Arc::new(text));
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// Drops `.000` from timestamps: they print as `HH:MM:SS` unless the milliseconds are
/// not zero.
fn strip_zero_millis(bytes: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8_lossy(&bytes);
    if !text.contains(".000") {
        return bytes;
    }
    let re = Regex::new(r"(\d{2}:\d{2}:\d{2})\.000\b").expect("valid regex");
    re.replace_all(&text, "$1").into_owned().into_bytes()
}

impl BatchSink for DirectorySink {
    fn write(&mut self, batch: &crate::message::StreamBatch) -> Result<()> {
        let batch = &batch.data;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.open.is_none() {
            let (path, target) = if self.two_phase {
                // Unique until pre-commit names it after its checkpoint.
                let n = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or_default();
                let name = format!(".{}-{n:x}.{}.inprogress", self.prefix, self.extension);
                (self.dir.join(name), PathBuf::new())
            } else {
                let name = format!("{}-a{}.{}", self.prefix, self.attempt, self.extension);
                (self.dir.join(&name), self.dir.join(&name))
            };
            let f = File::create(&path)
                .map_err(|e| SluiceError::io(format!("creating '{}'", path.display()), e))?;
            self.open = Some((std::io::BufWriter::new(f), path, target));
        }
        let bytes = self.format.bytes(batch)?;
        let (w, _, _) = self.open.as_mut().expect("a file is open");
        w.write_all(&bytes)
            .map_err(|e| SluiceError::io(format!("writing into '{}'", self.dir.display()), e))
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Committable> {
        self.pre_commit_named(&format!("c{checkpoint_id}"))
    }

    fn finish(&mut self) -> Result<Committable> {
        self.close("end")
    }
}

impl DirectorySink {
    /// [`BatchSink::pre_commit`] for the transaction named `transaction` (`c<id>`).
    pub(crate) fn pre_commit_named(&mut self, transaction: &str) -> Result<Committable> {
        if !self.two_phase {
            // Direct files stay open across checkpoints; make what is written durable.
            if let Some((w, _, _)) = self.open.as_mut() {
                w.flush().map_err(|e| {
                    SluiceError::io(format!("writing into '{}'", self.dir.display()), e)
                })?;
            }
            return Ok(Committable::Nothing);
        }
        self.close(transaction)
    }
}
