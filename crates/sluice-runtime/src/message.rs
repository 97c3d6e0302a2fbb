//! What flows on the edges of the operator graph.

use datafusion_common::arrow::array::{Array, BooleanArray, Int64Array};
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
}

impl StreamBatch {
    /// A batch with no per-row watermarks.
    pub fn new(data: RecordBatch) -> Self {
        StreamBatch {
            data,
            row_watermarks: None,
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
        Ok(StreamBatch {
            data,
            row_watermarks,
        })
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
    /// The input has ended: treated as the watermark +infinity, then the end.
    End,
}
