//! The `filesystem` connector: CSV files (optionally `.gz`) as a bounded source, and a
//! directory of CSV part files as a sink.
//!
//! Parsing is arrow-csv's. arrow-csv fails a whole batch on one bad value and reports
//! neither the file nor the line, so the reader cuts the input into records itself
//! (tracking line numbers and quotes), parses a chunk of records with arrow-csv, and on
//! failure re-parses that chunk record by record to name the bad row as
//! `file:line:column` and, under `'csv.ignore-parse-errors' = 'true'`, skip and count it.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::compute::concat_batches;
use datafusion_common::arrow::csv::{ReaderBuilder, WriterBuilder};
use datafusion_common::arrow::datatypes::SchemaRef;
use regex::Regex;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::{BatchSink, Source};
use crate::metrics::JobMetrics;

/// Options of the `csv` format (Flink's names).
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// `'csv.header'`: skip the first record of each file (default false, as in Flink).
    pub header: bool,
    /// `'csv.field-delimiter'` (default `,`).
    pub delimiter: u8,
    /// `'csv.quote-character'` (default `"`).
    pub quote: u8,
    /// `'csv.null-literal'`: another spelling of NULL besides the empty field.
    pub null_literal: Option<String>,
    /// `'csv.ignore-parse-errors'`: skip and count bad rows instead of failing.
    pub ignore_parse_errors: bool,
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
            header: bool_option(options, "csv.header", false)?,
            delimiter: one_char("csv.field-delimiter", b',')?,
            quote: one_char("csv.quote-character", b'"')?,
            null_literal: options.get("csv.null-literal").cloned(),
            ignore_parse_errors: bool_option(options, "csv.ignore-parse-errors", false)?,
        })
    }

    fn null_regex(&self) -> Result<Regex> {
        let pattern = match &self.null_literal {
            Some(lit) if !lit.is_empty() => format!("^(|{})$", regex::escape(lit)),
            _ => "^$".to_string(),
        };
        Regex::new(&pattern).map_err(|e| SluiceError::Config(e.to_string()))
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
        let entry = entry.map_err(|e| SluiceError::io(format!("listing '{}'", path.display()), e))?;
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

/// A bounded CSV source over one file or a directory of files, read in order.
///
/// Output: batches of the table's physical columns (`schema`), up to `batch_size` rows.
pub struct CsvSource {
    files: Vec<PathBuf>,
    next_file: usize,
    current: Option<OpenFile>,
    schema: SchemaRef,
    options: CsvOptions,
    null_regex: Regex,
    batch_size: usize,
    metrics: Arc<JobMetrics>,
}

struct OpenFile {
    path: PathBuf,
    display: String,
    reader: Box<dyn BufRead + Send>,
    /// 1-based line number of the next unread line.
    line: u64,
    header_pending: bool,
    eof: bool,
}

/// One record's place in a chunk: byte range and first line.
struct RecordSpan {
    start: usize,
    end: usize,
    line: u64,
}

impl CsvSource {
    /// A source reading `path` (file or directory) as CSV rows of `schema`.
    ///
    /// # Errors
    /// The path does not exist or cannot be listed; bad `csv.*` options.
    pub fn new(
        path: &Path,
        schema: SchemaRef,
        options: CsvOptions,
        batch_size: usize,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let files = list_files(path)?;
        let null_regex = options.null_regex()?;
        Ok(CsvSource {
            files,
            next_file: 0,
            current: None,
            schema,
            options,
            null_regex,
            batch_size,
            metrics,
        })
    }

    fn open_next(&mut self) -> Result<bool> {
        let Some(path) = self.files.get(self.next_file).cloned() else {
            return Ok(false);
        };
        self.next_file += 1;
        let file = File::open(&path)
            .map_err(|e| SluiceError::io(format!("opening '{}'", path.display()), e))?;
        let reader: Box<dyn BufRead + Send> = if path.extension().is_some_and(|e| e == "gz") {
            Box::new(BufReader::with_capacity(
                1 << 20,
                flate2::read::MultiGzDecoder::new(BufReader::new(file)),
            ))
        } else {
            Box::new(BufReader::with_capacity(1 << 20, file))
        };
        self.current = Some(OpenFile {
            display: path.display().to_string(),
            path,
            reader,
            line: 1,
            header_pending: self.options.header,
            eof: false,
        });
        Ok(true)
    }

    /// Reads up to `batch_size` complete records into `buf`, returning their spans.
    fn read_records(&mut self, buf: &mut Vec<u8>) -> Result<Vec<RecordSpan>> {
        let quote = self.options.quote;
        let batch_size = self.batch_size;
        let file = self.current.as_mut().expect("a file is open");
        let mut spans = Vec::new();
        let mut line_buf = Vec::new();
        while spans.len() < batch_size {
            // One record: lines until quotes balance.
            let start = buf.len();
            let first_line = file.line;
            let mut in_quotes = false;
            loop {
                line_buf.clear();
                let n = file
                    .reader
                    .read_until(b'\n', &mut line_buf)
                    .map_err(|e| SluiceError::io(format!("reading '{}'", file.display), e))?;
                if n == 0 {
                    file.eof = true;
                    break;
                }
                JobMetrics::add(&self.metrics.bytes_in, n as u64);
                file.line += 1;
                for &b in &line_buf {
                    if b == quote {
                        in_quotes = !in_quotes;
                    }
                }
                buf.extend_from_slice(&line_buf);
                if !in_quotes {
                    break;
                }
            }
            if buf.len() == start {
                break; // end of file
            }
            // Blank lines are not records.
            let is_blank = buf[start..].iter().all(|b| *b == b'\n' || *b == b'\r');
            if is_blank {
                buf.truncate(start);
                if file.eof {
                    break;
                }
                continue;
            }
            if !buf.ends_with(b"\n") {
                buf.push(b'\n');
            }
            if file.header_pending {
                file.header_pending = false;
                buf.truncate(start);
                continue;
            }
            spans.push(RecordSpan {
                start,
                end: buf.len(),
                line: first_line,
            });
            if file.eof {
                break;
            }
        }
        Ok(spans)
    }

    fn decode(&self, bytes: &[u8], records: usize) -> std::result::Result<Option<RecordBatch>, String> {
        let mut decoder = ReaderBuilder::new(Arc::clone(&self.schema))
            .with_header(false)
            .with_delimiter(self.options.delimiter)
            .with_quote(self.options.quote)
            .with_null_regex(self.null_regex.clone())
            .with_batch_size(records.max(1))
            .build_decoder();
        let mut offset = 0;
        while offset < bytes.len() {
            let n = decoder.decode(&bytes[offset..]).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            offset += n;
        }
        decoder.decode(&[]).map_err(|e| e.to_string())?;
        decoder.flush().map_err(|e| e.to_string())
    }

    /// Turns an arrow-csv message about one record into "file:line:column: what".
    fn describe_error(&self, file: &str, line: u64, message: &str) -> String {
        let message = message
            .trim_start_matches("Parser error: ")
            .trim_start_matches("Csv error: ");
        // "Error while parsing value 'x' as type 'Int32' for column 2 at line 0. Row data: ..."
        if let Some(rest) = message.strip_prefix("Error while parsing value '") {
            let value = rest.split("' as type").next().unwrap_or("");
            let column = rest
                .split("for column ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse::<usize>().ok());
            if let Some(c) = column {
                let field = self.schema.field(c);
                let mut msg = format!(
                    "{file}:{line}:{}: cannot parse '{value}' as {} for column '{}'",
                    c + 1,
                    flink_type(field.data_type()),
                    field.name()
                );
                let looks_like_header = self.schema.fields().iter().any(|f| f.name() == value);
                if looks_like_header && !self.options.header {
                    msg.push_str(
                        "; this looks like a header row: add 'csv.header' = 'true' to the \
                         table's WITH options to skip it",
                    );
                }
                return msg;
            }
        }
        if message.contains("incorrect number of fields") {
            let got = message.rsplit("got ").next().unwrap_or("?");
            return format!(
                "{file}:{line}:1: expected {} fields, found {}",
                self.schema.fields().len(),
                got.trim()
            );
        }
        format!("{file}:{line}:1: {message}")
    }

    /// Parses a chunk record by record, skipping (and counting) or failing on bad ones.
    fn decode_carefully(&self, file: &str, buf: &[u8], spans: &[RecordSpan]) -> Result<Option<RecordBatch>> {
        let mut good = Vec::new();
        let mut skipped = 0u64;
        for span in spans {
            match self.decode(&buf[span.start..span.end], 1) {
                Ok(Some(b)) => good.push(b),
                Ok(None) => {}
                Err(e) => {
                    let msg = self.describe_error(file, span.line, &e);
                    if self.options.ignore_parse_errors {
                        skipped += 1;
                    } else {
                        return Err(SluiceError::Data(format!(
                            "{msg} (set 'csv.ignore-parse-errors' = 'true' to skip bad rows)"
                        )));
                    }
                }
            }
        }
        JobMetrics::add(&self.metrics.parse_errors_skipped, skipped);
        if good.is_empty() {
            return Ok(None);
        }
        Ok(Some(concat_batches(&self.schema, &good)?))
    }
}

/// The Flink name of an Arrow type, for data error messages.
fn flink_type(dt: &datafusion_common::arrow::datatypes::DataType) -> String {
    use datafusion_common::arrow::datatypes::DataType as D;
    match dt {
        D::Int8 => "TINYINT".into(),
        D::Int16 => "SMALLINT".into(),
        D::Int32 => "INT".into(),
        D::Int64 => "BIGINT".into(),
        D::Float32 => "FLOAT".into(),
        D::Float64 => "DOUBLE".into(),
        D::Boolean => "BOOLEAN".into(),
        D::Utf8 => "STRING".into(),
        D::Date32 => "DATE".into(),
        D::Timestamp(_, None) => "TIMESTAMP".into(),
        D::Timestamp(_, Some(_)) => "TIMESTAMP_LTZ".into(),
        D::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        other => other.to_string(),
    }
}

impl Source for CsvSource {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if self.current.as_ref().is_none_or(|f| f.eof) && !self.open_next()? {
                return Ok(None);
            }
            let mut buf = Vec::new();
            let spans = self.read_records(&mut buf)?;
            if spans.is_empty() {
                continue;
            }
            let file = self
                .current
                .as_ref()
                .map(|f| f.display.clone())
                .unwrap_or_default();
            let batch = match self.decode(&buf, spans.len()) {
                Ok(b) => b,
                Err(_) => self.decode_carefully(&file, &buf, &spans)?,
            };
            if let Some(b) = batch {
                JobMetrics::add(&self.metrics.rows_in, b.num_rows() as u64);
                return Ok(Some(b));
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "filesystem csv {}",
            self.current
                .as_ref()
                .map(|f| f.path.display().to_string())
                .unwrap_or_default()
        )
    }
}

/// Writes CSV part files into a directory (`'path'` of a `filesystem` sink): one file
/// `part-<job>-0.csv` per job, no header row (as Flink's CSV format), timestamps as
/// `YYYY-MM-DD HH:MM:SS[.fff]`, NULL as an empty field.
pub struct CsvDirectorySink {
    dir: PathBuf,
    file_name: String,
    writer: Option<std::io::BufWriter<File>>,
}

impl CsvDirectorySink {
    /// A sink writing into `dir` (created if missing).
    pub fn new(dir: &Path, file_name: String) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| SluiceError::io(format!("creating sink directory '{}'", dir.display()), e))?;
        Ok(CsvDirectorySink {
            dir: dir.to_path_buf(),
            file_name,
            writer: None,
        })
    }
}

/// CSV bytes of a batch, in Sluice's output conventions.
pub fn csv_bytes(batch: &RecordBatch, header: bool) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut w = WriterBuilder::new()
            .with_header(header)
            .with_timestamp_format("%Y-%m-%d %H:%M:%S%.3f".to_string())
            .with_null(String::new())
            .build(&mut out);
        w.write(batch)?;
    }
    Ok(strip_zero_millis(out))
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

impl BatchSink for CsvDirectorySink {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if self.writer.is_none() {
            let path = self.dir.join(&self.file_name);
            let f = File::create(&path)
                .map_err(|e| SluiceError::io(format!("creating '{}'", path.display()), e))?;
            self.writer = Some(std::io::BufWriter::new(f));
        }
        let bytes = csv_bytes(batch, false)?;
        let w = self.writer.as_mut().expect("writer exists");
        w.write_all(&bytes)
            .map_err(|e| SluiceError::io(format!("writing into '{}'", self.dir.display()), e))
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(w) = self.writer.as_mut() {
            w.flush()
                .map_err(|e| SluiceError::io(format!("writing into '{}'", self.dir.display()), e))?;
        }
        Ok(())
    }
}

