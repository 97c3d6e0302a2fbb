//! Whole input rows waiting for the watermark: what the ordered operators (OVER
//! aggregation, the event-time sort) hold until event time passes a row, then release in
//! (time, arrival) order. Rows are kept as [`super::row_codec`] bytes (one allocation per row,
//! decoded back to columns on release and for snapshots), each with the id of its key
//! (partition) in the operator's registry.
//!
//! Releasing is two steps: [`PendingRows::stage`] takes the rows a watermark made final
//! out of the buffer (a heap pop per row; an operator calls it before each run of rows
//! that arrived under one watermark, so lateness is judged per row), and
//! [`PendingRows::take_staged`] decodes everything staged since as one batch (once per
//! input batch or watermark), so rows arriving one watermark apart cost no batch each.

use crate::state::row_codec::{EncodedRows, RowCodec};
use datafusion_common::arrow::array::{ArrayRef, RecordBatch};
use datafusion_common::arrow::datatypes::SchemaRef;
use sluice_common::Result;

use crate::operators::stateless::batch_with_schema;
use crate::state::time::EventTimeBuffer;

/// Rows staged since the last [`PendingRows::take_staged`], as one batch in staging order.
pub struct Released {
    /// The rows, in the input's schema.
    pub rows: RecordBatch,
    /// `(time, key id)` of each row.
    pub times: Vec<(i64, u32)>,
    /// The watermark (ms) in effect before each row's release: the row watermark it
    /// leaves with (it is final under the next one).
    pub watermarks: Vec<i64>,
}

/// Input rows of `schema` waiting for the watermark (see the module docs).
pub struct PendingRows {
    codec: RowCodec,
    schema: SchemaRef,
    buffer: EventTimeBuffer<(u32, Box<[u8]>)>,
    /// Released, not yet decoded: `(time, key id, row)` and the watermark before each.
    staged: Vec<(i64, u32, Box<[u8]>)>,
    staged_watermarks: Vec<i64>,
}

impl PendingRows {
    /// Nothing waiting; rows will have `schema`.
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let codec = RowCodec::new(&schema)?;
        Ok(PendingRows {
            codec,
            schema,
            buffer: EventTimeBuffer::new(),
            staged: Vec::new(),
            staged_watermarks: Vec::new(),
        })
    }

    /// The rows of `columns` (the input's columns) encoded, to `push` from.
    pub fn rows_of(&self, columns: &[ArrayRef]) -> Result<EncodedRows> {
        self.codec.encode(columns)
    }

    /// Holds `row` of key `key` with event time `time_ms` (after every row held before it
    /// with the same time).
    pub fn push(&mut self, time_ms: i64, key: u32, row: &[u8]) {
        self.buffer.push(time_ms, (key, row.into()));
    }

    /// Takes the rows with time `<= limit_ms` out of the buffer, in (time, arrival)
    /// order, to the staged rows (released under `watermark_ms`, the watermark before
    /// `limit_ms`); returns their `(time, key id)`.
    pub fn stage(
        &mut self,
        limit_ms: i64,
        watermark_ms: i64,
    ) -> impl Iterator<Item = (i64, u32)> + '_ {
        let from = self.staged.len();
        let mut released = Vec::new();
        self.buffer.release(limit_ms, &mut released);
        self.staged
            .extend(released.into_iter().map(|(t, (k, r))| (t, k, r)));
        self.staged_watermarks
            .resize(self.staged.len(), watermark_ms);
        self.staged[from..].iter().map(|(t, k, _)| (*t, *k))
    }

    /// Everything staged since the last call, decoded as one batch; `None` when nothing
    /// was.
    pub fn take_staged(&mut self) -> Result<Option<Released>> {
        if self.staged.is_empty() {
            return Ok(None);
        }
        let staged = std::mem::take(&mut self.staged);
        let columns = self.codec.decode(staged.iter().map(|(_, _, r)| &r[..]))?;
        Ok(Some(Released {
            rows: batch_with_schema(&self.schema, columns, staged.len())?,
            times: staged.iter().map(|(t, k, _)| (*t, *k)).collect(),
            watermarks: std::mem::take(&mut self.staged_watermarks),
        }))
    }

    /// Every waiting row in release order (staged rows are not waiting: operators take
    /// them before each call returns, so none is staged at a checkpoint): `(time, key id)` each, and the rows' columns
    /// (for a snapshot; pushing them back in this order restores the buffer).
    pub fn snapshot(&self) -> Result<(Vec<(i64, u32)>, Vec<ArrayRef>)> {
        let ordered = self.buffer.ordered();
        let columns = self
            .codec
            .decode(ordered.iter().map(|(_, (_, r))| &r[..]))?;
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
