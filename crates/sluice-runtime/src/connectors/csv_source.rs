//! The CSV reader of the `filesystem` source.
//!
//! The source thread cuts the input into chunks of whole records (tracking line numbers
//! and quotes, so every record knows its first line); a [`ChunkDecoder`] turns a chunk
//! into a batch: cut at its delimiters by [`ChunkDecoder::cut_fields`] when no record needs
//! CSV's state machine (no quotes: most files), else with arrow-csv. A helper thread
//! decodes chunks (up to [`HELPER_QUEUE`] queued) while the source thread cuts the next
//! ones and decodes those the helper has no room for; batches leave in input order.
//! Decoding is most of a CSV source's work, and the two cores of a small machine share it.
//!
//! arrow-csv fails a whole batch on one bad value and names neither file nor line: when a
//! chunk fails, it is decoded again record by record, so that the bad record is reported as
//! `file:line:column` or, under `'csv.ignore-parse-errors' = 'true'`, skipped and counted.
//! `TIMESTAMP(0..3)` columns are read as text by arrow-csv and converted by
//! [`parse_timestamp_ms`] (the common `YYYY-MM-DD HH:MM:SS[.fff]` spelling), falling back
//! to arrow's general parser for other spellings.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::compute::concat_batches;
use datafusion_common::arrow::csv::ReaderBuilder;
use datafusion_common::arrow::datatypes::SchemaRef;
use regex::Regex;
use sluice_common::{Result, SluiceError};

use crate::connectors::filesystem::{list_files, CsvOptions};
use crate::connectors::text_columns::TextColumns;
use crate::connectors::Source;
use crate::metrics::JobMetrics;
use sluice_common::types::flink_type_name;

/// Whole records cut from one file, with where each starts.
pub(crate) struct Chunk {
    pub(crate) file: Arc<str>,
    pub(crate) bytes: Vec<u8>,
    pub(crate) records: Vec<RecordSpan>,
    /// Where reading resumes after this chunk.
    pub(crate) end: FilePosition,
}

/// A place in the input of a line-oriented source: the source offset a checkpoint
/// records. Reading resumes at byte `byte` (of the decompressed stream) of file number
/// `file` (in the sorted file list), which is line `line` (1-based).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FilePosition {
    /// Index of the file in the source's sorted file list.
    pub file: usize,
    /// The file's path (checked on restore: the file list must not have changed).
    pub path: String,
    /// Bytes of the file (decompressed) before the position.
    pub byte: u64,
    /// 1-based line number at the position.
    pub line: u64,
    /// The header row is still to be skipped (`'csv.header'`, nothing read yet).
    pub header_pending: bool,
}

/// One record's place in a chunk: byte range and first line (1-based).
pub(crate) struct RecordSpan {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) line: u64,
}

/// Turns a chunk of whole records into a batch of the table's physical columns, and
/// reports or skips records that do not parse. Returns the batch (if any row is left) and
/// the number of rows skipped.
pub(crate) trait ChunkFormat: Send + Sync {
    fn decode(&self, chunk: &Chunk) -> Result<(Option<RecordBatch>, u64)>;
}

/// Turns chunks of CSV records into batches of the table's physical columns.
pub struct ChunkDecoder {
    /// The table's physical columns.
    schema: SchemaRef,
    /// Timestamp and decimal columns: read as text, converted by us.
    text: TextColumns,
    options: CsvOptions,
    null_regex: Option<Regex>,
    /// Whether `text` builds batches from fields cut here ([`Self::cut_fields`]).
    reads_fields: bool,
    /// Which columns' fields it reads.
    fields_read: Vec<bool>,
}

/// A value that does not parse: its column index and text.
struct BadValue {
    column: usize,
    value: String,
}

impl ChunkDecoder {
    /// A decoder of rows of `schema`; `read`: the columns and `ROW` fields the plan reads
    /// (`SourceSpec::read_schema`), whose others are NULL, not converted.
    pub(crate) fn new(
        schema: SchemaRef,
        read: Option<SchemaRef>,
        options: CsvOptions,
        time_zone: sluice_common::time::Tz,
    ) -> Result<Self> {
        let null_regex = options.null_regex()?;
        let nested = super::text_columns::NestedText {
            delimiter: options.array_delimiter.clone(),
            null_array_is_empty: options.null_literal.as_deref().is_none_or(str::is_empty),
        };
        let text = TextColumns::with_nested(Arc::clone(&schema), time_zone, Some(nested), read);
        Ok(ChunkDecoder {
            reads_fields: text.reads_fields(),
            fields_read: text.fields_read(),
            text,
            schema,
            options,
            null_regex,
        })
    }

    /// The chunk's records cut into fields (`fields[c][row]`, none for a column not
    /// read) when no record needs csv_core's state machine: each record one line that is
    /// not empty (a Kafka message's record may hold a newline or nothing: csv_core reads
    /// two records or none there), no quote character, no carriage return but one ending
    /// a line, no byte-order mark, valid UTF-8, one field per column. A field is then the
    /// text between delimiters, as csv_core reads it; NULL when empty or the null literal
    /// (arrow-csv's rule). `None` otherwise: arrow-csv reads the chunk, and reports what
    /// is wrong.
    fn cut_fields<'a>(&self, chunk: &'a Chunk) -> Option<Vec<Vec<Option<&'a str>>>> {
        let bytes = chunk.bytes.as_slice();
        if !self.reads_fields
            || chunk.records.is_empty()
            || bytes.starts_with(b"\xEF\xBB\xBF")
            || memchr::memchr(self.options.quote, bytes).is_some()
        {
            return None;
        }
        // Every record ends with its only newline.
        if memchr::memchr_iter(b'\n', bytes).count() != chunk.records.len() {
            return None;
        }
        let text = std::str::from_utf8(bytes).ok()?;
        let carriage_returns = memchr::memchr(b'\r', bytes).is_some();
        let rows = chunk.records.len();
        let mut fields: Vec<Vec<Option<&str>>> = (self.fields_read.iter())
            .map(|&read| Vec::with_capacity(if read { rows } else { 0 }))
            .collect();
        for span in &chunk.records {
            let mut record = text.get(span.start..span.end)?;
            record = record.strip_suffix('\n')?;
            if carriage_returns {
                record = record.strip_suffix('\r').unwrap_or(record);
                if record.contains('\r') {
                    return None;
                }
            }
            if record.is_empty() {
                return None;
            }
            let ends = memchr::memchr_iter(self.options.delimiter, record.as_bytes())
                .chain(std::iter::once(record.len()));
            let mut start = 0;
            let mut column = 0;
            for end in ends {
                if *self.fields_read.get(column)? {
                    let field = record.get(start..end)?;
                    fields[column].push((!self.is_null(field)).then_some(field));
                }
                start = end + 1;
                column += 1;
            }
            if column != self.fields_read.len() {
                return None;
            }
        }
        Some(fields)
    }

    /// Whether a field is NULL: empty, or the null literal when one is set.
    fn is_null(&self, field: &str) -> bool {
        match &self.null_regex {
            Some(re) => re.is_match(field),
            None => field.is_empty(),
        }
    }

    /// arrow-csv over `bytes` holding `records` whole records. A fresh decoder each time:
    /// csv_core strips a byte-order mark only on a reader's first read, and the end of
    /// input (signalled below) is what closes a quote left open on the last line.
    fn parse(
        &self,
        bytes: &[u8],
        records: usize,
    ) -> std::result::Result<Option<RecordBatch>, String> {
        let mut builder = ReaderBuilder::new(Arc::clone(self.text.parse_schema()))
            .with_header(false)
            .with_delimiter(self.options.delimiter)
            .with_quote(self.options.quote)
            .with_batch_size(records.max(1));
        if let Some(re) = &self.null_regex {
            builder = builder.with_null_regex(re.clone());
        }
        let mut decoder = builder.build_decoder();
        feed_all(bytes, MORE_THAN_ONE_RECORD, |b| decoder.decode(b))?;
        decoder.decode(&[]).map_err(|e| e.to_string())?;
        decoder.flush().map_err(|e| e.to_string())
    }

    /// Converts the text columns; the first bad value fails.
    fn convert(&self, batch: RecordBatch) -> std::result::Result<RecordBatch, (usize, BadValue)> {
        self.text.convert(batch).map_err(|bad| {
            (
                bad.row,
                BadValue {
                    column: bad.column,
                    value: bad.value,
                },
            )
        })
    }

    /// Decodes a chunk: fast on good input; record by record to report or skip bad rows.
    /// Returns the batch (if any row is left) and the number of rows skipped.
    fn decode_chunk(&self, chunk: &Chunk) -> Result<(Option<RecordBatch>, u64)> {
        let cut = self.cut_fields(chunk);
        if let Some(batch) =
            cut.and_then(|f| self.text.convert_fields(&f, chunk.records.len()).ok())
        {
            return Ok((Some(batch), 0));
        }
        let parse_and_convert = |bytes: &[u8], records: usize, line: u64| {
            self.parse(bytes, records)
                .map_err(|e| self.describe_parse_error(&chunk.file, line, &e))
                .and_then(|b| match b {
                    Some(b) => self
                        .convert(b)
                        .map(Some)
                        .map_err(|(_, bad)| self.describe_bad_value(&chunk.file, line, &bad)),
                    None => Ok(None),
                })
        };
        decode_records(
            chunk,
            &self.schema,
            self.options.ignore_parse_errors,
            "csv.ignore-parse-errors",
            parse_and_convert,
        )
    }

    fn describe_bad_value(&self, file: &str, line: u64, bad: &BadValue) -> String {
        let field = self.schema.field(bad.column);
        let mut msg = format!(
            "{file}:{line}:{}: cannot parse '{}' as {} for column '{}'",
            bad.column + 1,
            bad.value,
            flink_type_name(field.data_type()),
            field.name()
        );
        let looks_like_header = self.schema.fields().iter().any(|f| f.name() == &bad.value);
        if looks_like_header && self.options.header != Some(true) {
            msg.push_str(
                "; this looks like a header row: add 'csv.header' = 'true' to the table's WITH \
                 options to skip it",
            );
        }
        msg
    }

    /// Turns an arrow-csv message about one record into "file:line:column: what".
    fn describe_parse_error(&self, file: &str, line: u64, message: &str) -> String {
        let message = message
            .trim_start_matches("Parser error: ")
            .trim_start_matches("Csv error: ");
        // "Error while parsing value 'x' as type 'Int32' for column 2 at line 0. Row data: ..."
        if let Some(rest) = message.strip_prefix("Error while parsing value '") {
            let value = rest.split("' as type").next().unwrap_or("").to_string();
            let column = rest
                .split("for column ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .and_then(|s| s.parse::<usize>().ok());
            if let Some(column) = column.filter(|c| *c < self.schema.fields().len()) {
                return self.describe_bad_value(file, line, &BadValue { column, value });
            }
        }
        if let Some(column) = not_null_violation(&self.schema, message) {
            return format!(
                "{file}:{line}:{}: no value for column '{}', which is NOT NULL (declared so, \
                 or a PRIMARY KEY column)",
                column + 1,
                self.schema.field(column).name()
            );
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
}

impl ChunkFormat for ChunkDecoder {
    fn decode(&self, chunk: &Chunk) -> Result<(Option<RecordBatch>, u64)> {
        self.decode_chunk(chunk)
    }
}

struct OpenFile {
    display: Arc<str>,
    reader: Box<dyn BufRead + Send>,
    /// Index in the file list.
    index: usize,
    /// Bytes consumed from `reader` (plus those skipped when it was opened at a position).
    offset: u64,
    /// 1-based line number of the next unread line.
    line: u64,
    header_pending: bool,
    eof: bool,
}

/// The column a NULL went into although it is NOT NULL, if `message` is Arrow's error for
/// it: "Column 'x' is declared as non-nullable but contains null values" (building a
/// batch; the CSV reader) or "Encountered unmasked nulls in non-nullable StructArray
/// child: Field { "x": ... }" (the JSON reader).
pub(crate) fn not_null_violation(schema: &SchemaRef, message: &str) -> Option<usize> {
    let name = if let Some(rest) = message.split("Column '").nth(1) {
        let (name, tail) = rest.split_once('\'')?;
        tail.starts_with(" is declared as non-nullable")
            .then_some(name)?
    } else {
        let rest = message
            .split("non-nullable StructArray child: Field { \"")
            .nth(1)?;
        rest.split_once('"')?.0
    };
    schema.index_of(name).ok()
}

/// "no value for field 'x', which is NOT NULL ..." when `message` is Arrow's error for a
/// NULL in NOT NULL column `x` of `schema` (a JSON field: formats without columns).
pub(crate) fn describe_missing_field(schema: &SchemaRef, message: &str) -> Option<String> {
    not_null_violation(schema, message).map(|c| {
        format!(
            "no value for field '{}', which is NOT NULL (declared so, or a PRIMARY KEY column)",
            schema.field(c).name()
        )
    })
}

/// [`feed_all`]'s error for CSV.
const MORE_THAN_ONE_RECORD: &str =
    "a line holds more than one record (a lone carriage return ends a CSV record too)";

/// Feeds all of `bytes` to a push decoder (arrow-csv's or arrow-json's `decode`) whose
/// batch size is at least the number of records the chunker counted in them.
///
/// # Errors
/// What the decoder fails with; `more` when the decoder stops (its batch is full) before
/// the end of `bytes` with more than blanks left: a line held more records than the
/// chunker counted (two JSON values; a CSV line with a lone `\r`, which ends a record
/// for csv_core), whose rest would otherwise be lost.
pub(crate) fn feed_all(
    bytes: &[u8],
    more: &str,
    mut decode: impl FnMut(
        &[u8],
    )
        -> std::result::Result<usize, datafusion_common::arrow::error::ArrowError>,
) -> std::result::Result<(), String> {
    let mut offset = 0;
    while offset < bytes.len() {
        let n = decode(&bytes[offset..]).map_err(|e| e.to_string())?;
        if n == 0 {
            let rest = &bytes[offset..];
            if rest.iter().any(|b| !b.is_ascii_whitespace()) {
                return Err(more.to_string());
            }
            break;
        }
        offset += n;
    }
    Ok(())
}

/// Decodes a chunk with `parse(bytes, records, first line)`: whole first; when that fails,
/// record by record, so a bad record is reported (the message `parse` gives, plus a hint
/// naming the `ignore_option`) or, when `ignore`, skipped and counted. Returns the batch
/// (if any row is left) and the number of rows skipped.
pub(crate) fn decode_records(
    chunk: &Chunk,
    schema: &SchemaRef,
    ignore: bool,
    ignore_option: &str,
    parse: impl Fn(&[u8], usize, u64) -> std::result::Result<Option<RecordBatch>, String>,
) -> Result<(Option<RecordBatch>, u64)> {
    let first_line = chunk.records.first().map(|r| r.line).unwrap_or(1);
    if let Ok(batch) = parse(&chunk.bytes, chunk.records.len(), first_line) {
        return Ok((batch, 0));
    }
    let mut good = Vec::new();
    let mut skipped = 0u64;
    for span in &chunk.records {
        match parse(&chunk.bytes[span.start..span.end], 1, span.line) {
            Ok(Some(b)) => good.push(b),
            Ok(None) => {}
            Err(_) if ignore => skipped += 1,
            Err(msg) => {
                return Err(SluiceError::Data(format!(
                    "{msg} (set '{ignore_option}' = 'true' to skip bad rows)"
                )))
            }
        }
    }
    if good.is_empty() {
        return Ok((None, skipped));
    }
    Ok((Some(concat_batches(schema, &good)?), skipped))
}

/// How a CSV file quotes fields, for cutting it into records.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Quoting {
    /// Opens a quoted field when it is a field's first byte (as csv_core and Flink's
    /// Jackson read it; elsewhere in an unquoted field it is text: `5'11"`); closes it;
    /// doubled inside one, it is a quote.
    pub(crate) quote: u8,
    /// Separates fields.
    pub(crate) delimiter: u8,
}

/// What a file's first record may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderRow {
    /// Data (`'csv.header' = 'false'`, JSON).
    Data,
    /// A header, skipped (`'csv.header' = 'true'`).
    Skip,
    /// A header when it is exactly these bytes (the column names joined by the
    /// delimiter): `'csv.header'` not set, and a column that is not a string, so such a
    /// row could not be read as data anyway. Otherwise data.
    SkipIfNames(Vec<u8>),
}

/// Ends the record `bytes[start..]` (which ends with a newline): keeps it as a record,
/// or drops it when it is a blank line or the header row still to be skipped.
fn end_record(
    bytes: &mut Vec<u8>,
    records: &mut Vec<RecordSpan>,
    start: usize,
    line: u64,
    header_pending: &mut bool,
    header: &HeaderRow,
) {
    let blank = bytes[start..].iter().all(|b| *b == b'\n' || *b == b'\r');
    let is_header = *header_pending
        && match header {
            HeaderRow::Data => false,
            HeaderRow::Skip => true,
            HeaderRow::SkipIfNames(names) => {
                let mut record = &bytes[start..];
                while let [rest @ .., b'\n' | b'\r'] = record {
                    record = rest;
                }
                record == names.as_slice()
            }
        };
    if !blank {
        *header_pending = false;
    }
    if blank || is_header {
        bytes.truncate(start);
    } else {
        records.push(RecordSpan {
            start,
            end: bytes.len(),
            line,
        });
    }
}

/// Decodes chunks on a helper thread, in the order they were sent.
struct DecodeHelper {
    to_helper: Sender<Chunk>,
    from_helper: Receiver<Result<(Option<RecordBatch>, u64)>>,
}

impl DecodeHelper {
    fn spawn(decoder: Arc<dyn ChunkFormat>) -> Result<Self> {
        let (to_helper, chunks) = channel::<Chunk>();
        let (results, from_helper) = channel();
        std::thread::Builder::new()
            .name("sluice-csv-decode".into())
            .spawn(move || {
                for chunk in chunks {
                    if results.send(decoder.decode(&chunk)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| SluiceError::io("starting the CSV decode thread", e))?;
        Ok(DecodeHelper {
            to_helper,
            from_helper,
        })
    }
}

/// The decompressed size a gzip file declares in its trailer (ISIZE, the last 4 bytes,
/// little-endian), when it is plausible (not below the compressed size, as it would be
/// if the data wrapped past 4 GiB).
fn gzip_isize(path: &Path) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    if len < 18 {
        return None; // smaller than a gzip header and trailer
    }
    file.seek(SeekFrom::End(-4)).ok()?;
    let mut trailer = [0u8; 4];
    file.read_exact(&mut trailer).ok()?;
    let size = u32::from_le_bytes(trailer) as u64;
    (size >= len / 2).then_some(size)
}

/// A bounded source over one file or a directory of files, read in order, in a
/// line-oriented format (CSV, JSON lines).
///
/// Output: batches of the table's physical columns, up to `batch_size` rows each.
pub struct CsvSource {
    files: Vec<PathBuf>,
    next_file: usize,
    current: Option<OpenFile>,
    decoder: Arc<dyn ChunkFormat>,
    helper: Option<DecodeHelper>,
    /// Chunks cut but not yet emitted, in input order.
    order: VecDeque<(Pending, FilePosition)>,
    /// Where reading resumes after the last batch returned (the source offset).
    position: Option<FilePosition>,
    /// Results received from the helper, not yet emitted.
    helper_done: VecDeque<Result<(Option<RecordBatch>, u64)>>,
    /// Chunks sent to the helper whose results have not been received.
    helper_pending: usize,
    input_done: bool,
    /// How quoted fields are spelled (records end only at newlines outside quotes);
    /// `None` for formats without multi-line records (JSON lines).
    quoting: Option<Quoting>,
    /// Whether the first record of each file is a header.
    header: HeaderRow,
    ready: VecDeque<(Option<RecordBatch>, FilePosition)>,
    batch_size: usize,
    /// xorshift state when batch sizes are randomized (a test hook).
    batch_size_rng: Option<u64>,
    /// Bytes of the last chunk cut: the next chunk's buffer starts that large, so it is
    /// not grown (and copied) while it fills.
    last_chunk_bytes: usize,
    metrics: Arc<JobMetrics>,
}

impl CsvSource {
    /// Reads `files` (in this order) instead of the path's listing.
    pub(crate) fn with_files(mut self, files: Vec<PathBuf>) -> Self {
        self.files = files;
        self
    }

    /// Keeps files `subtask`, `subtask + parallelism`, ... of the sorted list: this
    /// source subtask's share.
    pub fn split(mut self, subtask: usize, parallelism: usize) -> Self {
        if parallelism > 1 {
            self.files = std::mem::take(&mut self.files)
                .into_iter()
                .enumerate()
                .filter(|(i, _)| i % parallelism == subtask)
                .map(|(_, f)| f)
                .collect();
        }
        self
    }

    /// Adds the sizes of this source's files to [`JobMetrics::bytes_total`], as
    /// `bytes_in` counts them: decompressed. A `.gz` file's decompressed size is its
    /// gzip trailer's ISIZE (RFC 1952: the size modulo 2^32, exact for a single-member
    /// file under 4 GiB); a file whose size cannot be known makes the total unknown.
    pub fn count_total_bytes(&self) {
        use std::sync::atomic::Ordering;
        for f in &self.files {
            let size = if f.extension().is_some_and(|e| e == "gz") {
                gzip_isize(f)
            } else {
                std::fs::metadata(f).ok().map(|m| m.len())
            };
            match size {
                Some(n) => JobMetrics::add(&self.metrics.bytes_total, n),
                None => self
                    .metrics
                    .bytes_total_known
                    .store(false, Ordering::Relaxed),
            }
        }
    }

    /// Makes every batch a pseudo-random size in `1..=batch_size`, from `seed` (tests use
    /// it to show that results do not depend on how the input is cut into batches).
    pub fn randomize_batch_sizes(&mut self, seed: u64) {
        self.batch_size_rng = Some(seed | 1);
    }

    fn chunk_size(&mut self) -> usize {
        match &mut self.batch_size_rng {
            None => self.batch_size,
            Some(x) => {
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                1 + (*x % self.batch_size as u64) as usize
            }
        }
    }

    /// A source reading `path` (file or directory) as CSV rows of `schema`, converting
    /// only the columns and `ROW` fields of `read` (`SourceSpec::read_schema`) when given.
    ///
    /// # Errors
    /// The path does not exist or cannot be listed; bad `csv.*` options.
    pub fn new(
        path: &Path,
        schema: SchemaRef,
        read: Option<SchemaRef>,
        options: CsvOptions,
        time_zone: sluice_common::time::Tz,
        batch_size: usize,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let quoting = Some(Quoting {
            quote: options.quote,
            delimiter: options.delimiter,
        });
        let header = match options.header {
            Some(true) => HeaderRow::Skip,
            Some(false) => HeaderRow::Data,
            // A STRING column (or an ARRAY of them) could hold its own name as data.
            None if schema.fields().iter().any(|f| {
                use datafusion_common::arrow::datatypes::DataType;
                !matches!(f.data_type(), DataType::Utf8)
                    && !matches!(f.data_type(), DataType::List(item) if *item.data_type() == DataType::Utf8)
            }) =>
            {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                HeaderRow::SkipIfNames(
                    names
                        .join(&(options.delimiter as char).to_string())
                        .into_bytes(),
                )
            }
            None => HeaderRow::Data,
        };
        let decoder: Arc<dyn ChunkFormat> =
            Arc::new(ChunkDecoder::new(schema, read, options, time_zone)?);
        Self::with_format(path, decoder, quoting, header, batch_size, metrics)
    }

    /// A source reading `path` with any line-oriented format.
    pub(crate) fn with_format(
        path: &Path,
        decoder: Arc<dyn ChunkFormat>,
        quoting: Option<Quoting>,
        header: HeaderRow,
        batch_size: usize,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let files = list_files(path)?;
        Ok(CsvSource {
            files,
            next_file: 0,
            current: None,
            decoder,
            helper: None,
            order: VecDeque::new(),
            position: None,
            helper_done: VecDeque::new(),
            helper_pending: 0,
            input_done: false,
            quoting,
            header,
            ready: VecDeque::new(),
            batch_size,
            batch_size_rng: None,
            last_chunk_bytes: 0,
            metrics,
        })
    }

    fn open_next(&mut self) -> Result<bool> {
        let Some(path) = self.files.get(self.next_file).cloned() else {
            return Ok(false);
        };
        self.open_at(self.next_file, &path, 0)?;
        Ok(true)
    }

    /// Opens file `index` of the list and skips its first `skip` (decompressed) bytes.
    fn open_at(&mut self, index: usize, path: &Path, skip: u64) -> Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let io_err = |what: &str, e| SluiceError::io(format!("{what} '{}'", path.display()), e);
        let mut file = File::open(path).map_err(|e| io_err("opening", e))?;
        let gz = path.extension().is_some_and(|e| e == "gz");
        if !gz && skip > 0 {
            file.seek(SeekFrom::Start(skip))
                .map_err(|e| io_err("seeking in", e))?;
        }
        let mut reader: Box<dyn BufRead + Send> = if gz {
            Box::new(BufReader::with_capacity(
                1 << 20,
                flate2::read::MultiGzDecoder::new(BufReader::new(file)),
            ))
        } else {
            Box::new(BufReader::with_capacity(1 << 20, file))
        };
        if gz && skip > 0 {
            let skipped = std::io::copy(&mut (&mut reader).take(skip), &mut std::io::sink())
                .map_err(|e| io_err("reading", e))?;
            if skipped < skip {
                return Err(SluiceError::Execution(format!(
                    "'{}' is shorter than the checkpointed offset {skip}: the input changed",
                    path.display()
                )));
            }
        }
        self.next_file = index + 1;
        self.current = Some(OpenFile {
            display: path.display().to_string().into(),
            reader,
            index,
            offset: skip,
            line: 1,
            header_pending: self.header != HeaderRow::Data,
            eof: false,
        });
        Ok(())
    }

    /// The next chunk of up to `batch_size` whole records, `None` at the end of all files.
    fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        loop {
            if self.current.as_ref().is_none_or(|f| f.eof) && !self.open_next()? {
                return Ok(None);
            }
            let chunk = self.read_chunk()?;
            if !chunk.records.is_empty() {
                return Ok(Some(chunk));
            }
        }
    }

    /// Cuts up to `batch_size` whole records from the open file, scanning the reader's
    /// buffer once (a newline ends a record unless it is inside quotes) and copying it in
    /// bulk. Blank lines are skipped; so is the header row under `'csv.header'`.
    fn read_chunk(&mut self) -> Result<Chunk> {
        // Without quotes, a byte that cannot occur in text: newlines always end records.
        let Quoting { quote, delimiter } = self.quoting.unwrap_or(Quoting {
            quote: 0,
            delimiter: 0,
        });
        let batch_size = self.chunk_size();
        let capacity = (batch_size * 64).max(self.last_chunk_bytes + self.last_chunk_bytes / 8);
        let file = self.current.as_mut().expect("a file is open");
        let mut bytes: Vec<u8> = Vec::with_capacity(capacity);
        let mut records = Vec::with_capacity(batch_size);
        // The record being scanned: its start in `bytes`, its first line, quote state.
        let mut start = 0usize;
        let mut first_line = file.line;
        let mut in_quotes = false;
        // Whether the next byte starts a field, and whether the last one closed quotes (a
        // quote right after it is a doubled quote: the field is quoted again).
        let mut field_start = true;
        let mut after_close = false;
        // Newlines inside quotes in the record being scanned (they are lines too).
        let mut quoted_lines = 0u64;
        while records.len() < batch_size {
            let buf = file
                .reader
                .fill_buf()
                .map_err(|e| SluiceError::io(format!("reading '{}'", file.display), e))?;
            if buf.is_empty() {
                file.eof = true;
                if bytes.len() > start {
                    // A last record without a newline.
                    bytes.push(b'\n');
                    file.line += 1 + quoted_lines;
                    end_record(
                        &mut bytes,
                        &mut records,
                        start,
                        first_line,
                        &mut file.header_pending,
                        &self.header,
                    );
                }
                break;
            }
            let mut copied = 0usize; // buf[..copied] is in `bytes`
            let mut full = false;
            // Each newline outside quotes ends a record. Without quotes in the block (the
            // common case) the newlines are found with SIMD search; with quotes, byte by
            // byte, tracking whether we are inside a quoted field.
            // `quoted_lines`: newlines inside quotes since the last record ended.
            let mut on_newline =
                |i: usize, bytes: &mut Vec<u8>, copied: &mut usize, quoted_lines: u64| -> bool {
                    file.line += 1 + quoted_lines;
                    bytes.extend_from_slice(&buf[*copied..=i]);
                    *copied = i + 1;
                    end_record(
                        bytes,
                        &mut records,
                        start,
                        first_line,
                        &mut file.header_pending,
                        &self.header,
                    );
                    start = bytes.len();
                    first_line = file.line;
                    records.len() == batch_size
                };
            if !in_quotes && memchr::memchr(quote, buf).is_none() {
                for i in memchr::memchr_iter(b'\n', buf) {
                    let done = on_newline(i, &mut bytes, &mut copied, quoted_lines);
                    quoted_lines = 0;
                    if done {
                        full = true;
                        break;
                    }
                }
                field_start = matches!(buf.last(), Some(&b) if b == delimiter || b == b'\n');
                after_close = false;
            } else {
                for i in 0..buf.len() {
                    let b = buf[i];
                    if in_quotes {
                        if b == quote {
                            in_quotes = false;
                            after_close = true;
                        } else if b == b'\n' {
                            quoted_lines += 1;
                        }
                        continue;
                    }
                    if b == quote && (field_start || after_close) {
                        in_quotes = true;
                        field_start = false;
                        after_close = false;
                        continue;
                    }
                    after_close = false;
                    field_start = b == delimiter || b == b'\n';
                    if b == b'\n' {
                        let done = on_newline(i, &mut bytes, &mut copied, quoted_lines);
                        quoted_lines = 0;
                        if done {
                            full = true;
                            break;
                        }
                    }
                }
            }
            let used = if full { copied } else { buf.len() };
            bytes.extend_from_slice(&buf[copied..used]);
            JobMetrics::add(&self.metrics.bytes_in, used as u64);
            file.reader.consume(used);
            file.offset += used as u64;
        }
        self.last_chunk_bytes = bytes.len();
        Ok(Chunk {
            file: Arc::clone(&file.display),
            bytes,
            records,
            end: FilePosition {
                file: file.index,
                path: file.display.to_string(),
                byte: file.offset,
                line: file.line,
                header_pending: file.header_pending,
            },
        })
    }

    fn accept(&mut self, decoded: (Option<RecordBatch>, u64), end: FilePosition) {
        let (batch, skipped) = decoded;
        JobMetrics::add(&self.metrics.parse_errors_skipped, skipped);
        if let Some(b) = &batch {
            JobMetrics::add(&self.metrics.rows_in, b.num_rows() as u64);
        }
        self.ready.push_back((batch, end));
    }
}

/// Chunks the helper thread may hold at once; past that the source thread decodes the
/// chunk it cut itself.
const HELPER_QUEUE: usize = 4;
/// Decoded or in-flight chunks kept ahead of the consumer.
const MAX_AHEAD: usize = 10;

/// Where the next batch in input order comes from.
enum Pending {
    /// Decoded on the source thread.
    Local(Result<(Option<RecordBatch>, u64)>),
    /// Being decoded on the helper thread (its results arrive in send order).
    Helper,
}

impl CsvSource {
    fn take_helper_result(&mut self, wait: bool) -> Result<bool> {
        let stopped = || SluiceError::Internal("the CSV decode thread stopped".into());
        let helper = self
            .helper
            .as_ref()
            .expect("a chunk was sent to the helper");
        let result = if wait {
            Some(helper.from_helper.recv().map_err(|_| stopped())?)
        } else {
            match helper.from_helper.try_recv() {
                Ok(r) => Some(r),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err(stopped()),
            }
        };
        match result {
            Some(r) => {
                self.helper_pending -= 1;
                self.helper_done.push_back(r);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl Source for CsvSource {
    /// Keeps the helper thread busy (up to [`HELPER_QUEUE`] chunks) and decodes the rest
    /// on this thread, which also cuts every chunk; batches leave in input order.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some((b, end)) = self.ready.pop_front() {
                self.position = Some(end);
                match b {
                    Some(b) => return Ok(Some(b)),
                    None => continue,
                }
            }
            // The oldest pending chunk, if its result is here.
            match self.order.front() {
                Some((Pending::Local(_), _)) => {
                    if let Some((Pending::Local(r), end)) = self.order.pop_front() {
                        self.accept(r?, end);
                    }
                    continue;
                }
                Some((Pending::Helper, _)) => {
                    let must_wait = self.input_done || self.order.len() >= MAX_AHEAD;
                    if self.helper_done.is_empty() {
                        self.take_helper_result(must_wait)?;
                    }
                    if let Some(r) = self.helper_done.pop_front() {
                        let (_, end) = self.order.pop_front().expect("a pending chunk");
                        self.accept(r?, end);
                        continue;
                    }
                }
                None if self.input_done => return Ok(None),
                None => {}
            }
            // Cut the next chunk: to the helper if it has room, else decode it here.
            match self.next_chunk()? {
                None => self.input_done = true,
                Some(chunk) => {
                    let end = chunk.end.clone();
                    if self.helper_pending < HELPER_QUEUE {
                        if self.helper.is_none() {
                            self.helper = Some(DecodeHelper::spawn(Arc::clone(&self.decoder))?);
                        }
                        let helper = self.helper.as_ref().expect("helper exists");
                        helper.to_helper.send(chunk).map_err(|_| {
                            SluiceError::Internal("the CSV decode thread stopped".into())
                        })?;
                        self.helper_pending += 1;
                        self.order.push_back((Pending::Helper, end));
                    } else {
                        let decoded = self.decoder.decode(&chunk);
                        self.order.push_back((Pending::Local(decoded), end));
                    }
                }
            }
        }
    }

    fn describe(&self) -> String {
        format!("filesystem csv ({} files)", self.files.len())
    }

    /// A [`FilePosition`] after the last batch returned (`null` before the first).
    fn position(&self) -> serde_json::Value {
        match &self.position {
            Some(p) => serde_json::to_value(p).unwrap_or(serde_json::Value::Null),
            None => serde_json::Value::Null,
        }
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        if position.is_null() {
            return Ok(());
        }
        let p: FilePosition = serde_json::from_value(position.clone()).map_err(|e| {
            SluiceError::Execution(format!("a checkpointed file position is unreadable: {e}"))
        })?;
        let path = self.files.get(p.file).cloned().ok_or_else(|| {
            SluiceError::Execution(format!(
                "the checkpoint resumes reading at file {} ('{}'), but the source now has {} files",
                p.file + 1,
                p.path,
                self.files.len()
            ))
        })?;
        if path.display().to_string() != p.path {
            return Err(SluiceError::Execution(format!(
                "the checkpoint resumes reading '{}', but file {} of the source is now '{}'",
                p.path,
                p.file + 1,
                path.display()
            )));
        }
        self.open_at(p.file, &path, p.byte)?;
        let file = self.current.as_mut().expect("just opened");
        file.line = p.line;
        file.header_pending = p.header_pending;
        self.position = Some(p);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::datatypes::{DataType, Field, Fields, Schema};

    /// `text`'s records (each line ending with a newline; blank lines dropped), as
    /// `read_chunk` cuts a chunk of a file without quotes.
    fn chunk_of(text: &str) -> Chunk {
        let mut records = Vec::new();
        let mut start = 0;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if line.bytes().any(|b| b != b'\n' && b != b'\r') {
                records.push(RecordSpan {
                    start,
                    end: start + line.len(),
                    line: i as u64 + 1,
                });
            }
            start += line.len();
        }
        Chunk {
            file: Arc::from("test.csv"),
            bytes: text.as_bytes().to_vec(),
            records,
            end: FilePosition {
                file: 0,
                path: "test.csv".into(),
                byte: text.len() as u64,
                line: 1,
                header_pending: false,
            },
        }
    }

    /// Kafka messages as its CSV decoding cuts them: each a record, with a newline added.
    fn messages_chunk(messages: &[String]) -> Chunk {
        let mut chunk = chunk_of("");
        for m in messages {
            let start = chunk.bytes.len();
            chunk.bytes.extend_from_slice(m.as_bytes());
            chunk.bytes.push(b'\n');
            let (end, line) = (chunk.bytes.len(), chunk.records.len() as u64);
            chunk.records.push(RecordSpan { start, end, line });
        }
        chunk
    }

    /// Fields cut at delimiters and converted by `TextColumns::convert_fields` give the batch
    /// arrow-csv and `TextColumns::convert` give, or leave the chunk to them: on random
    /// records of every type the cut reads (numbers with signs, spaces, overflow and
    /// junk; strings with spaces and non-ASCII text; timestamps; ROWs with too few or
    /// many parts; ARRAYs), empty fields and the null literal in nullable and NOT NULL
    /// columns, records with a field too few or too many, CRLF line ends and lone carriage
    /// returns, quotes, a byte-order mark, Kafka messages that are empty or hold a
    /// newline; with every column read, and with a column and a ROW field unread.
    #[test]
    fn fields_cut_at_delimiters_read_as_arrow_csv_reads_them() {
        use datafusion_common::arrow::datatypes::TimeUnit;
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let tags = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
        let row = Fields::from(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Utf8, true),
            Field::new("t", ts.clone(), true),
        ]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Float64, true),
            Field::new("ts", ts.clone(), true),
            Field::new("r", DataType::Struct(row.clone()), true),
            Field::new("tags", tags.clone(), false),
        ]));
        let read = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("k", DataType::Int64, false),
            Field::new("d", DataType::Float64, true),
            Field::new("ts", ts, true),
            Field::new(
                "r",
                DataType::Struct(Fields::from(vec![row[0].clone(), row[2].clone()])),
                true,
            ),
            Field::new("tags", tags, false),
        ]));
        // Values that convert, and (picked once in 60) values that may not: by their type,
        // or under one of the null-literal settings (`\\N`).
        type Values = (&'static [&'static str], &'static [&'static str]);
        let ints: Values = (
            &["0", "42", "-7", "+5", "007", ""],
            &[" 12", "2147483648", "1a", "\\N"],
        );
        let keys: Values = (&["1", "0", "-3"], &["", "x", "\\N"]);
        let strings: Values = (&["abc", "", " sp ", "x y", "\u{fc}ber", "N"], &["\\N"]);
        let doubles: Values = (&["1.5", "-0", "1e3", "NaN", ""], &[" 2", "x", "\\N"]);
        let times: Values = (
            &["2015-07-15 00:00:00", "2015-07-15 00:00:00.332", ""],
            &["bad", "2015-07-15T00:00:00", "\\N"],
        );
        // In a ROW an empty number or timestamp is an error (as Flink's).
        let row_ints: Values = (&["0", "42", "-7", " 5 "], &["", "1a"]);
        let row_times: Values = (&["2015-07-15 00:00:00.1"], &["", "bad"]);
        // An empty field is an empty ARRAY, but not in a NOT NULL column (arrow-csv
        // rejects the NULL first).
        let lists: Values = (&["1;2", "3", "-4;5;6"], &["", "x", "\\N"]);
        let mut rng = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
        let mut next = move |n: usize| (rng() % n as u64) as usize;
        let pick = |(good, other): Values, next: &mut dyn FnMut(usize) -> usize| {
            if next(60) == 0 {
                other[next(other.len())]
            } else {
                good[next(good.len())]
            }
        };
        // Whether the chunk is cut, and whether its fields convert (then to the batch
        // arrow-csv gives).
        let compare = |decoder: &ChunkDecoder, chunk: &Chunk| {
            let rows = chunk.records.len();
            let slow = (decoder.parse(&chunk.bytes, rows).ok().flatten())
                .and_then(|batch| decoder.convert(batch).ok());
            let cut = decoder.cut_fields(chunk);
            let was_cut = cut.is_some();
            let fast = cut.and_then(|fields| decoder.text.convert_fields(&fields, rows).ok());
            let same = fast.is_some();
            if let Some(fast) = fast {
                let text = String::from_utf8_lossy(&chunk.bytes);
                assert_eq!(Some(fast), slow, "records: {text:?}");
            }
            (was_cut, same)
        };
        let utc: sluice_common::time::Tz = "+00:00".parse().unwrap();
        let one_column = ChunkDecoder::new(
            Arc::new(Schema::new(vec![Field::new("key", DataType::Utf8, true)])),
            None,
            CsvOptions::from_options(&Default::default()).unwrap(),
            utc,
        )
        .unwrap();
        let (mut cut, mut compared) = (0, 0);
        for round in 0..4000 {
            let mut options = sluice_common::plan::ConnectorOptions::new();
            if round % 2 == 1 {
                options.insert("csv.null-literal".into(), "\\N".into());
            }
            let read = (round % 3 == 0).then(|| Arc::clone(&read));
            let options = CsvOptions::from_options(&options).unwrap();
            let decoder = ChunkDecoder::new(Arc::clone(&schema), read, options, utc).unwrap();
            let line_end = if next(4) == 0 { "\r\n" } else { "\n" };
            let mut lines: Vec<String> = Vec::new();
            for _ in 0..1 + next(6) {
                let parts = match next(30) {
                    0 => 2,
                    1 => 4,
                    _ => 3,
                };
                let mut r: Vec<&str> = vec![pick(row_ints, &mut next), pick(strings, &mut next)];
                r.push(pick(row_times, &mut next));
                r.truncate(parts);
                r.resize(parts, "9");
                let r = if next(5) == 0 {
                    String::new()
                } else {
                    r.join(";")
                };
                let mut fields = vec![
                    pick(ints, &mut next).to_string(),
                    pick(keys, &mut next).to_string(),
                    pick(strings, &mut next).to_string(),
                    pick(doubles, &mut next).to_string(),
                    pick(times, &mut next).to_string(),
                    r,
                    pick(lists, &mut next).to_string(),
                ];
                match next(100) {
                    0 => drop(fields.pop()),
                    1 => fields.push("extra".into()),
                    2 => fields[2] = "a\rb".into(),
                    3 => fields[2] = "\"q\"".into(),
                    _ => {}
                }
                lines.push(fields.join(","));
            }
            if next(50) == 0 {
                lines[0].insert(0, '\u{feff}');
            }
            // A file's lines, or (one round in six) Kafka messages, a record each, which
            // may be empty or hold a newline.
            let chunk = if round % 6 == 5 {
                for line in lines.iter_mut() {
                    match next(12) {
                        0 => line.clear(),
                        1 => line.push('\n'),
                        2 => line.insert(line.find(',').unwrap_or(0), '\n'),
                        _ => {}
                    }
                }
                messages_chunk(&lines)
            } else {
                chunk_of(&(lines.join(line_end) + line_end))
            };
            let (was_cut, same) = compare(&decoder, &chunk);
            cut += usize::from(was_cut);
            compared += usize::from(same);
            if round % 6 == 5 {
                // A one-column key of the same messages: an empty one is a record too.
                let keys: Vec<String> = lines
                    .iter()
                    .map(|l| l.split(',').next().unwrap_or_default().to_string())
                    .collect();
                compare(&one_column, &messages_chunk(&keys));
            }
        }
        // Most chunks are cut (none that has a quote, a lone CR or a BOM), and a good share
        // of those convert (the rest have a bad value somewhere).
        assert!(cut > 3000, "{cut} of 4000 chunks cut");
        assert!(compared > 1500, "{compared} of 4000 chunks compared");
    }

    #[test]
    fn not_null_violations_name_their_column() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("v", DataType::Utf8, true),
        ]));
        let csv = "Invalid argument error: Column 'k' is declared as non-nullable but contains \
                   null values";
        assert_eq!(not_null_violation(&schema, csv), Some(0));
        let json = "Json error: Encountered unmasked nulls in non-nullable StructArray child: \
                    Field { \"v\": Utf8 }";
        assert_eq!(not_null_violation(&schema, json), Some(1));
        assert_eq!(
            not_null_violation(&schema, "Column 'x' is declared as non-nullable"),
            None
        );
        assert_eq!(not_null_violation(&schema, "something else"), None);
    }
}
