//! The `filesystem` connector: CSV options, source paths, and the directory sink. The CSV
//! reader itself is in [`crate::connectors::csv_source`].

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::csv::WriterBuilder;
use regex::Regex;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::BatchSink;

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

/// Writes part files into a directory (`'path'` of a `filesystem` sink): one file
/// `part-<job id>-0.csv` (or `.json`) per job. CSV: no header row (as Flink's CSV format),
/// NULL as an empty field. JSON: one object per line, NULL as `null`. Timestamps as
/// `YYYY-MM-DD HH:MM:SS[.fff]`.
pub struct DirectorySink {
    dir: PathBuf,
    file_name: String,
    json: bool,
    writer: Option<std::io::BufWriter<File>>,
}

impl DirectorySink {
    /// A sink writing into `dir` (created if missing), CSV or JSON lines.
    pub fn new(dir: &Path, file_name: String, json: bool) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| {
            SluiceError::io(format!("creating sink directory '{}'", dir.display()), e)
        })?;
        Ok(DirectorySink {
            dir: dir.to_path_buf(),
            file_name,
            json,
            writer: None,
        })
    }
}

/// JSON-lines bytes of a batch, in Sluice's output conventions.
pub fn json_bytes(batch: &RecordBatch) -> Result<Vec<u8>> {
    use datafusion_common::arrow::json::writer::{
        LineDelimited, WriterBuilder as JsonWriterBuilder,
    };
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
    Ok(strip_zero_millis(out))
}

/// CSV bytes of a batch, in Sluice's output conventions.
pub fn csv_bytes(batch: &RecordBatch, header: bool) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut w = WriterBuilder::new()
            .with_header(header)
            .with_timestamp_format("%Y-%m-%d %H:%M:%S%.3f".to_string())
            .with_timestamp_tz_format("%Y-%m-%d %H:%M:%S%.3f".to_string())
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

impl BatchSink for DirectorySink {
    fn write(&mut self, batch: &crate::message::StreamBatch) -> Result<()> {
        let batch = &batch.data;
        if self.writer.is_none() {
            let path = self.dir.join(&self.file_name);
            let f = File::create(&path)
                .map_err(|e| SluiceError::io(format!("creating '{}'", path.display()), e))?;
            self.writer = Some(std::io::BufWriter::new(f));
        }
        let bytes = if self.json {
            json_bytes(batch)?
        } else {
            csv_bytes(batch, false)?
        };
        let w = self.writer.as_mut().expect("writer exists");
        w.write_all(&bytes)
            .map_err(|e| SluiceError::io(format!("writing into '{}'", self.dir.display()), e))
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(w) = self.writer.as_mut() {
            w.flush().map_err(|e| {
                SluiceError::io(format!("writing into '{}'", self.dir.display()), e)
            })?;
        }
        Ok(())
    }
}
