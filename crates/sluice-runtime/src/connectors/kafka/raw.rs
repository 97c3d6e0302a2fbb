//! `'format' = 'raw'` (Flink docs, "Raw Format"): a message's key or value bytes are the
//! table's one column: `STRING` (`'raw.charset'`, UTF-8 only here), `BYTES`, or a number
//! in `'raw.endianness'` (big-endian by default, as Flink): `BOOLEAN` and `TINYINT` one
//! byte, `SMALLINT` two, `INT` and `FLOAT` four, `BIGINT` and `DOUBLE` eight (a message
//! of another length is a data error naming its offset).

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, BinaryBuilder, BooleanArray, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, Int8Array, RecordBatch, StringBuilder,
};
use datafusion_common::arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, SchemaRef,
};
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::csv_source::{Chunk, ChunkFormat};

/// Decodes each record of a chunk (one message, with the `\n` the reader appended) as the
/// one column.
pub(crate) struct RawFormat {
    schema: SchemaRef,
    /// `'raw.endianness'` = `little-endian`.
    little_endian: bool,
}

/// The bytes of a number of type `data_type` in a raw message (`None`: not a number type).
fn width(data_type: &DataType) -> Option<usize> {
    match data_type {
        DataType::Boolean | DataType::Int8 => Some(1),
        DataType::Int16 => Some(2),
        DataType::Int32 | DataType::Float32 => Some(4),
        DataType::Int64 | DataType::Float64 => Some(8),
        _ => None,
    }
}

/// `bytes` (exactly `N` of them) as big-endian bytes.
fn be<const N: usize>(bytes: &[u8], little_endian: bool) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(bytes);
    if little_endian {
        a.reverse();
    }
    a
}

/// `a` (big-endian) in the table's byte order.
fn ordered<const N: usize>(mut a: [u8; N], little_endian: bool) -> Vec<u8> {
    if little_endian {
        a.reverse();
    }
    a.to_vec()
}

impl RawFormat {
    /// # Errors
    /// More than one column, a type the raw format does not hold, a charset other than
    /// UTF-8.
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
        let t = schema.field(0).data_type();
        if !matches!(t, DataType::Utf8 | DataType::Binary) && width(t).is_none() {
            return Err(SluiceError::NotSupported(format!(
                "the 'raw' format for a {} column (STRING, BYTES, BOOLEAN, TINYINT, \
                 SMALLINT, INT, BIGINT, FLOAT and DOUBLE are read)",
                sluice_common::types::flink_type_name(t)
            )));
        }
        Ok(RawFormat {
            schema,
            little_endian: little_endian(options),
        })
    }
}

fn little_endian(options: &ConnectorOptions) -> bool {
    options
        .get("raw.endianness")
        .is_some_and(|e| e.eq_ignore_ascii_case("little-endian"))
}

impl ChunkFormat for RawFormat {
    fn decode(&self, chunk: &Chunk) -> Result<(Option<RecordBatch>, u64)> {
        let parts = chunk
            .records
            .iter()
            .map(|r| &chunk.bytes[r.start..r.end.saturating_sub(1).max(r.start)]);
        let data_type = self.schema.field(0).data_type();
        let column: ArrayRef = match data_type {
            DataType::Utf8 => {
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
            }
            DataType::Binary => {
                let mut b = BinaryBuilder::new();
                for part in parts {
                    b.append_value(part);
                }
                Arc::new(b.finish())
            }
            t => {
                let n = width(t).unwrap_or(0);
                let mut numbers = Vec::with_capacity(chunk.records.len());
                for (part, r) in parts.zip(&chunk.records) {
                    if part.len() != n {
                        return Err(SluiceError::Data(format!(
                            "{}:{}:1: a 'raw' {} value has {n} byte(s), found {}",
                            chunk.file,
                            r.line,
                            sluice_common::types::flink_type_name(t),
                            part.len()
                        )));
                    }
                    numbers.push(part);
                }
                let le = self.little_endian;
                let it = numbers.into_iter();
                match t {
                    DataType::Boolean => Arc::new(BooleanArray::from(
                        it.map(|p| p[0] != 0).collect::<Vec<_>>(),
                    )),
                    DataType::Int8 => Arc::new(Int8Array::from_iter_values(
                        it.map(|p| i8::from_be_bytes(be(p, le))),
                    )),
                    DataType::Int16 => Arc::new(Int16Array::from_iter_values(
                        it.map(|p| i16::from_be_bytes(be(p, le))),
                    )),
                    DataType::Int32 => Arc::new(Int32Array::from_iter_values(
                        it.map(|p| i32::from_be_bytes(be(p, le))),
                    )),
                    DataType::Int64 => Arc::new(Int64Array::from_iter_values(
                        it.map(|p| i64::from_be_bytes(be(p, le))),
                    )),
                    DataType::Float32 => Arc::new(Float32Array::from_iter_values(
                        it.map(|p| f32::from_be_bytes(be(p, le))),
                    )),
                    _ => Arc::new(Float64Array::from_iter_values(
                        it.map(|p| f64::from_be_bytes(be(p, le))),
                    )),
                }
            }
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

/// The bytes of each row's one column (NULL: an empty message), numbers in
/// `'raw.endianness'`.
pub(crate) fn encode(batch: &RecordBatch, options: &ConnectorOptions) -> Result<Vec<Vec<u8>>> {
    let column = batch.column(0);
    let le = little_endian(options);
    let rows = 0..column.len();
    let bytes: Vec<Vec<u8>> = match column.data_type() {
        DataType::Utf8 => {
            let s = column.as_string::<i32>();
            rows.map(|i| s.value(i).as_bytes().to_vec()).collect()
        }
        DataType::Binary => {
            let b = column.as_binary::<i32>();
            rows.map(|i| b.value(i).to_vec()).collect()
        }
        DataType::Boolean => {
            let b = column.as_boolean();
            rows.map(|i| vec![u8::from(b.value(i))]).collect()
        }
        DataType::Int8 => {
            let a = column.as_primitive::<Int8Type>();
            rows.map(|i| a.value(i).to_be_bytes().to_vec()).collect()
        }
        DataType::Int16 => {
            let a = column.as_primitive::<Int16Type>();
            rows.map(|i| ordered(a.value(i).to_be_bytes(), le))
                .collect()
        }
        DataType::Int32 => {
            let a = column.as_primitive::<Int32Type>();
            rows.map(|i| ordered(a.value(i).to_be_bytes(), le))
                .collect()
        }
        DataType::Int64 => {
            let a = column.as_primitive::<Int64Type>();
            rows.map(|i| ordered(a.value(i).to_be_bytes(), le))
                .collect()
        }
        DataType::Float32 => {
            let a = column.as_primitive::<Float32Type>();
            rows.map(|i| ordered(a.value(i).to_be_bytes(), le))
                .collect()
        }
        DataType::Float64 => {
            let a = column.as_primitive::<Float64Type>();
            rows.map(|i| ordered(a.value(i).to_be_bytes(), le))
                .collect()
        }
        other => {
            return Err(SluiceError::NotSupported(format!(
                "writing a {} column in the 'raw' format",
                sluice_common::types::flink_type_name(other)
            )))
        }
    };
    // A NULL is an empty message.
    Ok(bytes
        .into_iter()
        .enumerate()
        .map(|(i, b)| if column.is_null(i) { Vec::new() } else { b })
        .collect())
}
