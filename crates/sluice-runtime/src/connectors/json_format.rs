//! `'format' = 'json'`: JSON lines (one object per line, `.gz` decompressed), read with
//! arrow-json; the same chunked, two-thread reader as CSV ([`super::csv_source`]).
//!
//! Fields are matched by name; missing fields and JSON `null` are NULL; fields the table
//! does not declare are ignored (Flink's `'json.fail-on-missing-field'` default). A line
//! that does not parse is reported as `file:line:1` or, under
//! `'json.ignore-parse-errors' = 'true'`, skipped and counted.

use std::sync::{Arc, Mutex};

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions, StructArray,
};
use datafusion_common::arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::arrow::json::reader::Decoder;
use datafusion_common::arrow::json::ReaderBuilder;
use sluice_common::Result;

use crate::connectors::csv_source::{decode_records, feed_all, Chunk, ChunkFormat};
use crate::connectors::text_columns::{BadText, TextColumns};
use sluice_common::time::Tz;

/// Idle arrow-json decoders, each with the batch size (rows) it was built for; one is
/// reused for a chunk of exactly that many lines (every chunk of a file but its last),
/// so it stops after the chunk's last line and [`feed_all`] sees any value beyond. A
/// decoder keeps its tape's buffers from chunk to chunk; a fresh one per chunk regrew them from a
/// few bytes every time (reallocations and page faults: 15% of Nexmark q0's time). A
/// successful `flush` leaves a decoder empty (arrow-json's `finish` fails on a value cut
/// short); one that failed is dropped. At most [`IDLE_DECODERS`] are kept (the largest),
/// one per decoding thread (the source thread and its helper).
struct DecoderPool(Mutex<Vec<(usize, Decoder)>>);

/// Idle decoders a [`DecoderPool`] keeps.
const IDLE_DECODERS: usize = 2;

impl DecoderPool {
    fn new() -> Self {
        DecoderPool(Mutex::new(Vec::new()))
    }

    /// Runs `decode` with an idle decoder built for `records` rows, or a new one
    /// (`build(records)`); the decoder is kept only when `decode` succeeds.
    fn decode<T>(
        &self,
        records: usize,
        build: impl FnOnce(usize) -> std::result::Result<Decoder, String>,
        decode: impl FnOnce(&mut Decoder) -> std::result::Result<T, String>,
    ) -> std::result::Result<T, String> {
        let records = records.max(1);
        let idle = self.0.lock().ok().and_then(|mut idle| {
            let i = idle.iter().position(|(size, _)| *size == records)?;
            Some(idle.swap_remove(i))
        });
        let (size, mut decoder) = match idle {
            Some(d) => d,
            None => (records, build(records)?),
        };
        let out = decode(&mut decoder)?;
        if let Ok(mut idle) = self.0.lock() {
            idle.push((size, decoder));
            if idle.len() > IDLE_DECODERS {
                let smallest = (0..idle.len()).min_by_key(|&i| idle[i].0).unwrap_or(0);
                idle.swap_remove(smallest);
            }
        }
        Ok(out)
    }
}

/// The error for a line holding two JSON values (Flink's Jackson reads the first one and
/// drops the rest).
const MORE_THAN_ONE_VALUE: &str = "a line holds more than one JSON value";

/// Decodes chunks of JSON lines into batches of the table's physical columns.
pub(crate) struct JsonFormat {
    /// The batches' columns: the table's physical columns.
    schema: SchemaRef,
    /// The columns and fields decoded (`schema`, or fewer: the plan's read schema, the
    /// rest NULL); timestamp and decimal fields read as JSON strings, converted by us.
    text: TextColumns,
    /// Whether `text` decodes fewer columns or fields than `schema` has.
    narrowed: bool,
    ignore_parse_errors: bool,
    decoders: DecoderPool,
}

impl JsonFormat {
    /// A format giving batches of `schema`, decoding only the columns and `ROW` fields of
    /// `read` (a narrowing of `schema`, in its order) when given.
    pub(crate) fn new(
        schema: SchemaRef,
        read: Option<SchemaRef>,
        time_zone: Tz,
        ignore_parse_errors: bool,
    ) -> Self {
        let narrowed = read.as_ref().is_some_and(|r| r != &schema);
        let decoded = read
            .filter(|_| narrowed)
            .unwrap_or_else(|| Arc::clone(&schema));
        JsonFormat {
            text: TextColumns::new(decoded, time_zone),
            schema,
            narrowed,
            ignore_parse_errors,
            decoders: DecoderPool::new(),
        }
    }

    /// Rows of `records` JSON lines in `bytes`, their text columns converted.
    pub(crate) fn parse(
        &self,
        bytes: &[u8],
        records: usize,
    ) -> std::result::Result<Option<RecordBatch>, String> {
        let batch = self.parse_text(bytes, records)?;
        match batch {
            None => Ok(None),
            Some(b) if self.narrowed => {
                let b = self.text.convert(b).map_err(|bad| self.describe(&bad))?;
                widen(&b, &self.schema).map(Some).map_err(|e| e.to_string())
            }
            Some(b) => self
                .text
                .convert(b)
                .map(Some)
                .map_err(|bad| self.describe(&bad)),
        }
    }

    /// "cannot parse 'v' as T for field 'f'".
    fn describe(&self, bad: &BadText) -> String {
        let field = self.text.schema().field(bad.column);
        format!(
            "cannot parse '{}' as {} for field '{}'",
            bad.value,
            field.data_type(),
            field.name()
        )
    }

    /// arrow-json over `bytes` holding `records` whole lines.
    fn parse_text(
        &self,
        bytes: &[u8],
        records: usize,
    ) -> std::result::Result<Option<RecordBatch>, String> {
        let build = |batch_size| {
            // A number or boolean read into a STRING (or into a timestamp or decimal,
            // read as text) is its text, as Flink's `JsonNode.asText()`.
            ReaderBuilder::new(Arc::clone(self.text.parse_schema()))
                .with_batch_size(batch_size)
                .with_coerce_primitive(true)
                .build_decoder()
                .map_err(|e| e.to_string())
        };
        self.decoders.decode(records, build, |decoder| {
            feed_all(bytes, MORE_THAN_ONE_VALUE, |b| decoder.decode(b))?;
            decoder.flush().map_err(|e| e.to_string())
        })
    }
}

impl ChunkFormat for JsonFormat {
    fn decode(&self, chunk: &Chunk) -> Result<(Option<RecordBatch>, u64)> {
        decode_records(
            chunk,
            &self.schema,
            self.ignore_parse_errors,
            "json.ignore-parse-errors",
            |bytes, records, line| {
                self.parse(bytes, records).map_err(|e| {
                    let what = super::csv_source::describe_missing_field(&self.schema, &e);
                    format!(
                        "{}:{line}:1: {}",
                        chunk.file,
                        what.as_deref()
                            .unwrap_or(e.trim_start_matches("Json error: "))
                    )
                })
            },
        )
    }
}

/// `batch` (a narrowing of `schema`: fewer columns or `ROW` fields, in its order) with
/// every column and field of `schema` it lacks filled with NULL.
///
/// # Errors
/// When `batch` is not a narrowing of `schema` (a column of another type).
pub(crate) fn widen(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let have = batch.schema();
    let columns = schema
        .fields()
        .iter()
        .map(|f| match have.index_of(f.name()) {
            Ok(i) => widen_array(batch.column(i), f.data_type()),
            Err(_) => new_null_array(f.data_type(), rows),
        })
        .collect();
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

/// `array` as `to`: a `ROW` with the fields it lacks NULL.
fn widen_array(array: &ArrayRef, to: &DataType) -> ArrayRef {
    match (array.data_type(), to) {
        (DataType::Struct(have), DataType::Struct(want)) if have != want => {
            let row = array.as_struct();
            let columns = want
                .iter()
                .map(|f| match have.find(f.name()) {
                    Some((i, _)) => widen_array(row.column(i), f.data_type()),
                    None => new_null_array(f.data_type(), row.len()),
                })
                .collect();
            Arc::new(StructArray::new(
                want.clone(),
                columns,
                row.nulls().cloned(),
            ))
        }
        _ => Arc::clone(array),
    }
}
