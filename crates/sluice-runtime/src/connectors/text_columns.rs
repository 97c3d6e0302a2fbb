//! Columns that text formats (CSV, JSON) read as text and Sluice converts itself:
//! - `TIMESTAMP(0..3)`: [`parse_timestamp_ms`] (the common `YYYY-MM-DD HH:MM:SS[.fff]`
//!   spelling, a few integer operations), else arrow's general parser;
//! - `TIMESTAMP_LTZ(0..3)`: the same text as a wall-clock time in the session time zone,
//!   unless it carries its own offset (`Z`, `+02:00`), which makes it an instant;
//! - `DECIMAL(p, s)`: rounded half-up to the scale, as Flink (arrow-csv truncates).

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, StringArray, TimestampMillisecondArray,
};
use datafusion_common::arrow::compute::{cast_with_options, CastOptions};
use datafusion_common::arrow::datatypes::{
    DataType, Field, Schema, SchemaRef, TimeUnit, TimestampMillisecondType,
};
use datafusion_common::arrow::record_batch::RecordBatchOptions;
use sluice_common::time::{local_to_utc_ms, parse_timestamp_ms, Tz};

#[derive(Clone, Copy, PartialEq, Eq)]
enum TextKind {
    Timestamp,
    LocalZoned,
    Decimal,
}

/// A value that does not convert: row, column index, and its text.
pub(crate) struct BadText {
    pub(crate) row: usize,
    pub(crate) column: usize,
    pub(crate) value: String,
}

/// The conversions of one table's text columns.
pub(crate) struct TextColumns {
    schema: SchemaRef,
    parse_schema: SchemaRef,
    columns: Vec<(usize, TextKind)>,
    time_zone: Tz,
}

impl TextColumns {
    /// For a table of `schema` read in the session time zone `time_zone`.
    pub(crate) fn new(schema: SchemaRef, time_zone: Tz) -> Self {
        let mut columns = Vec::new();
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let kind = match f.data_type() {
                    DataType::Timestamp(TimeUnit::Millisecond, None) => Some(TextKind::Timestamp),
                    DataType::Timestamp(TimeUnit::Millisecond, Some(_)) => {
                        Some(TextKind::LocalZoned)
                    }
                    DataType::Decimal128(_, _) => Some(TextKind::Decimal),
                    _ => None,
                };
                match kind {
                    Some(k) => {
                        columns.push((i, k));
                        f.as_ref().clone().with_data_type(DataType::Utf8)
                    }
                    None => f.as_ref().clone(),
                }
            })
            .collect();
        TextColumns {
            parse_schema: Arc::new(Schema::new(fields)),
            schema,
            columns,
            time_zone,
        }
    }

    /// The table's physical columns.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The schema the format's parser reads: converted columns as text.
    pub(crate) fn parse_schema(&self) -> &SchemaRef {
        &self.parse_schema
    }

    /// Converts the text columns of a parsed batch; the first bad value fails.
    pub(crate) fn convert(&self, batch: RecordBatch) -> Result<RecordBatch, BadText> {
        if self.columns.is_empty() {
            return Ok(batch);
        }
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for &(c, kind) in &self.columns {
            let text: &StringArray = columns[c].as_string::<i32>();
            columns[c] = match kind {
                TextKind::Decimal => self.decimal(text, c)?,
                _ => self.timestamp(text, c, kind == TextKind::LocalZoned)?,
            };
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options).map_err(
            |e| BadText {
                row: 0,
                column: 0,
                value: e.to_string(),
            },
        )
    }

    fn timestamp(
        &self,
        text: &StringArray,
        c: usize,
        local_zoned: bool,
    ) -> Result<ArrayRef, BadText> {
        let mut values = Vec::with_capacity(text.len());
        for row in 0..text.len() {
            if text.is_null(row) {
                values.push(None);
                continue;
            }
            let s = text.value(row);
            let value = match parse_timestamp_ms(s.as_bytes()) {
                Some(v) if local_zoned => Some(local_to_utc_ms(&self.time_zone, v)),
                Some(v) => Some(v),
                // Other spellings; one with its own offset is an instant as it stands.
                None => general_timestamp_ms(s).map(|v| {
                    if local_zoned && !has_offset(s) {
                        local_to_utc_ms(&self.time_zone, v)
                    } else {
                        v
                    }
                }),
            };
            match value {
                Some(v) => values.push(Some(v)),
                None => {
                    return Err(BadText {
                        row,
                        column: c,
                        value: s.to_string(),
                    })
                }
            }
        }
        let array = TimestampMillisecondArray::from(values);
        Ok(match self.schema.field(c).data_type() {
            DataType::Timestamp(_, Some(tz)) => Arc::new(array.with_timezone(tz.clone())),
            _ => Arc::new(array),
        })
    }

    fn decimal(&self, text: &StringArray, c: usize) -> Result<ArrayRef, BadText> {
        let target = self.schema.field(c).data_type();
        let strict = CastOptions {
            safe: false,
            ..Default::default()
        };
        let trimmed: StringArray = text.iter().map(|v| v.map(str::trim)).collect();
        match cast_with_options(&trimmed, target, &strict) {
            Ok(a) => Ok(a),
            Err(_) => {
                // Find the first value that does not convert, to report it.
                let lenient = CastOptions::default();
                let converted = cast_with_options(&trimmed, target, &lenient).ok();
                let row = (0..trimmed.len())
                    .find(|&r| {
                        trimmed.is_valid(r) && converted.as_ref().is_none_or(|a| a.is_null(r))
                    })
                    .unwrap_or(0);
                Err(BadText {
                    row,
                    column: c,
                    value: trimmed.value(row).to_string(),
                })
            }
        }
    }
}

/// Whether timestamp text ends with its own offset (`Z`, `+02:00`, `-0500`).
fn has_offset(s: &str) -> bool {
    let s = s.trim();
    if s.ends_with(['Z', 'z']) {
        return true;
    }
    // An offset sign after the time part (the date's '-' signs are in the first 10 bytes).
    s.len() > 19 && s[19..].contains(['+', '-'])
}

/// Timestamps in spellings other than the fast path's (arrow's parser: `T`, offsets,
/// `Z`, ...), in epoch ms (an offset is applied; otherwise the text is read as UTC).
fn general_timestamp_ms(s: &str) -> Option<i64> {
    let array = StringArray::from(vec![s]);
    let ts = cast_with_options(
        &array,
        &DataType::Timestamp(TimeUnit::Millisecond, None),
        &CastOptions::default(),
    )
    .ok()?;
    let ts = ts.as_primitive::<TimestampMillisecondType>();
    ts.is_valid(0).then(|| ts.value(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_recognised() {
        assert!(has_offset("2024-03-10 07:30:00Z"));
        assert!(has_offset("2024-03-10T07:30:00+00:00"));
        assert!(has_offset("2024-03-10 07:30:00.123-05:00"));
        assert!(!has_offset("2024-03-10 07:30:00"));
        assert!(!has_offset("2024-03-10 07:30:00.123"));
    }
}
