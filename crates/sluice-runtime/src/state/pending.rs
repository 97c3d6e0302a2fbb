//! Whole input rows waiting for the watermark: what the ordered operators (OVER
//! aggregation, the event-time sort) hold until event time passes a row, then release in
//! (time, arrival) order as one batch. Rows are kept in Arrow's row format (one
//! allocation per row, decoded back to columns on release and for snapshots), each with
//! the id of its key (partition) in the operator's registry.

use datafusion_common::arrow::array::{ArrayRef, RecordBatch};
use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::arrow::row::{OwnedRow, Row, RowConverter, Rows};
use sluice_common::Result;

use crate::operators::stateless::batch_with_schema;
use crate::state::time::EventTimeBuffer;

/// Rows released together: the rows, and each one's time (ms) and key id, in order.
pub struct Released {
    /// The rows, in the input's schema.
    pub rows: RecordBatch,
    /// `(time, key id)` of each row.
    pub times: Vec<(i64, u32)>,
}

/// Input rows of `schema` waiting for the watermark (see the module docs).
pub struct PendingRows {
    converter: RowConverter,
    schema: SchemaRef,
    buffer: EventTimeBuffer<(u32, OwnedRow)>,
}

impl PendingRows {
    /// Nothing waiting; rows will have `schema`.
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let converter = crate::state::row_converter(&schema)?;
        Ok(PendingRows {
            converter,
            schema,
            buffer: EventTimeBuffer::new(),
        })
    }

    /// The rows of `columns` (the input's columns) in row format, to `push` from.
    pub fn rows_of(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.converter.convert_columns(columns)?)
    }

    /// Holds `row` of key `key` with event time `time_ms` (after every row held before it
    /// with the same time).
    pub fn push(&mut self, time_ms: i64, key: u32, row: Row<'_>) {
        self.buffer.push(time_ms, (key, row.owned()));
    }

    /// Releases the rows with time `<= limit_ms`, in (time, arrival) order; `None` when
    /// there are none.
    pub fn release(&mut self, limit_ms: i64) -> Result<Option<Released>> {
        let mut out = Vec::new();
        self.buffer.release(limit_ms, &mut out);
        if out.is_empty() {
            return Ok(None);
        }
        let columns = self
            .converter
            .convert_rows(out.iter().map(|(_, (_, r))| r.row()))?;
        Ok(Some(Released {
            rows: batch_with_schema(&self.schema, columns, out.len())?,
            times: out.into_iter().map(|(t, (k, _))| (t, k)).collect(),
        }))
    }

    /// Removes the rows with time `<= limit_ms` into `out` as `(time, key id, row)`, in
    /// (time, arrival) order, without decoding them (see [`PendingRows::decode`]).
    pub fn release_rows(&mut self, limit_ms: i64, out: &mut Vec<(i64, u32, OwnedRow)>) {
        let mut released = Vec::new();
        self.buffer.release(limit_ms, &mut released);
        out.extend(released.into_iter().map(|(t, (k, r))| (t, k, r)));
    }

    /// Rows taken out by [`PendingRows::release_rows`] as one batch, in their order.
    pub fn decode<'a>(&self, rows: impl Iterator<Item = &'a OwnedRow>) -> Result<RecordBatch> {
        let rows: Vec<&OwnedRow> = rows.collect();
        let columns = self.converter.convert_rows(rows.iter().map(|r| r.row()))?;
        batch_with_schema(&self.schema, columns, rows.len())
    }

    /// Every waiting row in release order: `(time, key id)` each, and the rows' columns
    /// (for a snapshot; pushing them back in this order restores the buffer).
    pub fn snapshot(&self) -> Result<(Vec<(i64, u32)>, Vec<ArrayRef>)> {
        let ordered = self.buffer.ordered();
        let columns = self
            .converter
            .convert_rows(ordered.iter().map(|(_, (_, r))| r.row()))?;
        Ok((
            ordered.iter().map(|(t, (k, _))| (*t, *k)).collect(),
            columns,
        ))
    }

    /// Rows waiting.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether no row waits.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// The schema rows have.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}
