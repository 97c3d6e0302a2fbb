//! `'format' = 'json'`: JSON lines (one object per line, `.gz` decompressed), read with
//! arrow-json; the same chunked, two-thread reader as CSV ([`super::csv_source`]).
//!
//! Fields are matched by name; missing fields and JSON `null` are NULL; fields the table
//! does not declare are ignored (Flink's `'json.fail-on-missing-field'` default). A line
//! that does not parse is reported as `file:line:1` or, under
//! `'json.ignore-parse-errors' = 'true'`, skipped and counted.

use std::sync::Arc;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::arrow::json::ReaderBuilder;
use sluice_common::Result;

use crate::connectors::csv_source::{decode_records, feed_all, Chunk, ChunkFormat};
use crate::connectors::text_columns::TextColumns;
use sluice_common::time::Tz;

/// Decodes chunks of JSON lines into batches of the table's physical columns.
pub(crate) struct JsonFormat {
    schema: SchemaRef,
    /// Timestamp and decimal fields: read as JSON strings, converted by us.
    text: TextColumns,
    ignore_parse_errors: bool,
}

impl JsonFormat {
    pub(crate) fn new(schema: SchemaRef, time_zone: Tz, ignore_parse_errors: bool) -> Self {
        JsonFormat {
            text: TextColumns::new(Arc::clone(&schema), time_zone),
            schema,
            ignore_parse_errors,
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
            Some(b) => self.text.convert(b).map(Some).map_err(|bad| {
                format!(
                    "cannot parse '{}' as {} for field '{}'",
                    bad.value,
                    self.text.schema().field(bad.column).data_type(),
                    self.text.schema().field(bad.column).name()
                )
            }),
        }
    }

    fn parse_text(
        &self,
        bytes: &[u8],
        records: usize,
    ) -> std::result::Result<Option<RecordBatch>, String> {
        let mut decoder = ReaderBuilder::new(Arc::clone(self.text.parse_schema()))
            .with_batch_size(records.max(1))
            .build_decoder()
            .map_err(|e| e.to_string())?;
        feed_all(bytes, |b| decoder.decode(b))?;
        decoder.flush().map_err(|e| e.to_string())
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
