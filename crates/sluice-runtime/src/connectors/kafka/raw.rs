//! `'format' = 'raw'` (Flink docs, "Raw Format"): a message's key or value bytes are the
//! table's one column, `STRING` (`'raw.charset'`, UTF-8 only here) or `BYTES`. Flink's raw
//! format also reads numbers in `'raw.endianness'`; those types are refused here.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryBuilder, RecordBatch, StringArray, StringBuilder,
};
use datafusion_common::arrow::datatypes::{DataType, SchemaRef};
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::csv_source::{Chunk, ChunkFormat};

/// Decodes each record of a chunk (one message, with the `\n` the reader appended) as the
/// one column.
pub(crate) struct RawFormat {
    schema: SchemaRef,
    string: bool,
}

impl RawFormat {
    /// # Errors
    /// More than one column, a type other than `STRING`/`BYTES`, a charset other than UTF-8.
    pub(crate) fn new(schema: SchemaRef, options: &ConnectorOptions) -> Result<Self> {
        if schema.fields().len() != 1 {
            return Err(SluiceError::Config(format!(
                "the 'raw' format holds exactly one column, found {} ({})",
                schema.fields().len(),
                schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if let Some(c) = options.get("raw.charset") {
            if !c.eq_ignore_ascii_case("UTF-8") {
                return Err(SluiceError::NotSupported(format!(
                    "'raw.charset' = '{c}' (only UTF-8)"
                )));
            }
        }
        let string = match schema.field(0).data_type() {
            DataType::Utf8 => true,
            DataType::Binary => false,
            other => {
                return Err(SluiceError::NotSupported(format!(
                    "the 'raw' format for a {} column (STRING and BYTES are read)",
                    sluice_common::types::flink_type_name(other)
                )))
            }
        };
        Ok(RawFormat { schema, string })
    }
}

impl ChunkFormat for RawFormat {
    fn decode(&self, chunk: &Chunk) -> Result<(Option<RecordBatch>, u64)> {
        let parts = chunk
            .records
            .iter()
            .map(|r| &chunk.bytes[r.start..r.end.saturating_sub(1).max(r.start)]);
        let column: ArrayRef = if self.string {
            let mut b = StringBuilder::new();
            for (part, r) in parts.zip(&chunk.records) {
                let text = std::str::from_utf8(part).map_err(|e| {
                    SluiceError::Data(format!(
                        "{}:{}:1: the 'raw' value is not UTF-8: {e}",
                        chunk.file, r.line
                    ))
                })?;
                b.append_value(text);
            }
            Arc::new(b.finish())
        } else {
            let mut b = BinaryBuilder::new();
            for part in parts {
                b.append_value(part);
            }
            Arc::new(b.finish())
        };
        if column.is_empty() {
            return Ok((None, 0));
        }
        Ok((
            Some(RecordBatch::try_new(
                Arc::clone(&self.schema),
                vec![column],
            )?),
            0,
        ))
    }
}

/// The bytes of each row's one column (NULL: an empty message).
pub(crate) fn encode(batch: &RecordBatch) -> Result<Vec<Vec<u8>>> {
    let column = batch.column(0);
    if let Some(s) = column.as_any().downcast_ref::<StringArray>() {
        return Ok((0..s.len())
            .map(|i| s.value(i).as_bytes().to_vec())
            .collect());
    }
    if let Some(b) = column.as_any().downcast_ref::<BinaryArray>() {
        return Ok((0..b.len()).map(|i| b.value(i).to_vec()).collect());
    }
    Err(SluiceError::NotSupported(format!(
        "writing a {} column in the 'raw' format (STRING and BYTES are written)",
        sluice_common::types::flink_type_name(column.data_type())
    )))
}
