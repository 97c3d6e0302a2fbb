//! What flows on the edges of the operator graph.

use datafusion_common::arrow::array::{Array, BooleanArray, Int64Array, Int8Array};
use datafusion_common::arrow::compute::{filter, filter_record_batch};
use datafusion_common::arrow::record_batch::RecordBatch;

use sluice_common::Result;

/// A batch of rows on an event-time stream.
///
/// `row_watermarks[i]` is the watermark (ms) in effect when row `i` arrives: the
/// watermark after every earlier row of the stream. The watermark advances row by row
/// (after each row: max(previous, watermark expression)), so an operator that drops late
/// rows judges each row against its own watermark, and its results never depend on how
/// the input was cut into batches. Streams without a watermark carry `None`.
#[derive(Debug, Clone)]
pub struct StreamBatch {
    /// The rows; the schema is the producing operator's output schema.
    pub data: RecordBatch,
    /// Per-row watermark (ms), as above; same length as `data`.
    pub row_watermarks: Option<Int64Array>,
    /// Per-row [`RowKind`] codes of a changelog stream; `None`: every row is an insert
    /// (an append-only stream).
    pub ops: Option<Int8Array>,
}

/// The kind of change a row of a changelog stream is (Flink's RowKind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i8)]
pub enum RowKind {
    /// `+I`: a new row.
    Insert = 0,
    /// `-U`: the old value of an updated row (retracted).
    UpdateBefore = 1,
    /// `+U`: the new value of an updated row.
    UpdateAfter = 2,
    /// `-D`: a deleted row (retracted).
    Delete = 3,
}

impl RowKind {
    /// The kind of a code in [`StreamBatch::ops`].
    pub fn from_code(code: i8) -> RowKind {
        match code {
            1 => RowKind::UpdateBefore,
            2 => RowKind::UpdateAfter,
            3 => RowKind::Delete,
            _ => RowKind::Insert,
        }
    }

    /// `-U` and `-D` take a row away.
    pub fn is_retraction(self) -> bool {
        matches!(self, RowKind::UpdateBefore | RowKind::Delete)
    }

    /// The short form Flink prints: `+I`, `-U`, `+U`, `-D`.
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }
}

impl StreamBatch {
    /// A batch with no per-row watermarks.
    pub fn new(data: RecordBatch) -> Self {
        StreamBatch {
            data,
            row_watermarks: None,
            ops: None,
        }
    }

    /// The kind of row `i` (an insert on append-only streams).
    #[inline]
    pub fn row_kind(&self, i: usize) -> RowKind {
        match &self.ops {
            Some(ops) => RowKind::from_code(ops.value(i)),
            None => RowKind::Insert,
        }
    }

    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.data.num_rows()
    }

    /// Keeps the rows where `mask` is true, with their watermarks.
    pub fn filter(&self, mask: &BooleanArray) -> Result<StreamBatch> {
        let data = filter_record_batch(&self.data, mask)?;
        let row_watermarks = match &self.row_watermarks {
            Some(w) => Some(
                filter(w, mask)?
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .cloned()
                    .expect("filter keeps the array type"),
            ),
            None => None,
        };
        let ops = match &self.ops {
            Some(o) => Some(
                filter(o, mask)?
                    .as_any()
                    .downcast_ref::<Int8Array>()
                    .cloned()
                    .expect("filter keeps the array type"),
            ),
            None => None,
        };
        Ok(StreamBatch {
            data,
            row_watermarks,
            ops,
        })
    }

    /// The batch cut into runs of rows that arrived under the same watermark: `(watermark,
    /// rows)` in order. An operator that releases rows by event time releases what each
    /// run's watermark made final before taking the run in.
    pub fn watermark_runs(&self) -> Vec<(i64, std::ops::Range<usize>)> {
        let n = self.num_rows();
        let mut runs = Vec::new();
        let mut start = 0;
        while start < n {
            let w = self.watermark_at(start);
            let mut end = start + 1;
            while end < n && self.watermark_at(end) == w {
                end += 1;
            }
            runs.push((w, start..end));
            start = end;
        }
        runs
    }

    /// The watermark in effect when row `i` arrives (`i64::MIN` if none).
    #[inline]
    pub fn watermark_at(&self, i: usize) -> i64 {
        match &self.row_watermarks {
            Some(w) => w.value(i),
            None => sluice_common::time::WATERMARK_MIN,
        }
    }
}

/// One message on an edge. Order matters: a watermark follows the rows it covers.
#[derive(Debug, Clone)]
pub enum Message {
    /// Rows.
    Data(StreamBatch),
    /// Event time has advanced to this watermark (ms): no later row has a smaller time,
    /// except late rows.
    Watermark(i64),
    /// A checkpoint barrier (Carbone et al., "Lightweight Asynchronous Snapshots for
    /// Distributed Dataflows", 2015; Flink's `CheckpointBarrier`): everything before it on
    /// this edge belongs to checkpoint `id`, everything after it to later ones. Operators
    /// never see it; the task driver snapshots its chain when it arrives.
    Barrier(u64),
    /// The sending source has had no data for `'table.exec.source.idle-timeout'`: leave it
    /// out of the watermark until it sends again (Flink's idle watermark status).
    /// Operators never see it; the input gate consumes it.
    Idle,
    /// The input has ended: treated as the watermark +infinity, then the end.
    End,
}
