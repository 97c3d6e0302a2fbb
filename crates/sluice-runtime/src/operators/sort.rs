//! `ORDER BY` and `LIMIT` on a stream (Flink SQL "ORDER BY clause", "LIMIT clause"; Flink's
//! `RowTimeSortOperator` and `LimitOperator`). `ORDER BY ... LIMIT n` is a Top-N
//! (`operators::rank`), planned there.
//!
//! - [`SortOperator`]: rows wait ([`PendingRows`]) until the watermark reaches their time
//!   (read per row, as the OVER aggregation does), then leave ordered by time, the other
//!   `ORDER BY` keys, and arrival. A row at or before the last time released is late:
//!   dropped and counted.
//! - [`LimitOperator`]: the rows `offset + 1 ..= offset + fetch` in arrival order.
//!
//! Both run in one subtask (a global order, a global count).

use std::sync::Arc;

use datafusion_common::arrow::array::{Array, Int64Array, Int8Array, RecordBatch, UInt32Array};
use datafusion_common::arrow::compute::{take_record_batch, SortOptions};
use datafusion_common::arrow::datatypes::{Int64Type, Int8Type, SchemaRef};
use datafusion_common::arrow::row::RowConverter;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::time::WATERMARK_MIN;
use sluice_common::{Result, SluiceError};

use crate::expr::evaluate_all;
use crate::message::StreamBatch;
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::operators::over_aggregate::time_values;
use crate::state::pending::{PendingRows, Released};
use crate::state::{SnapshotReader, SnapshotWriter};

/// The event-time sort (see the module docs). Output: the input's columns.
pub struct SortOperator {
    time_column: usize,
    /// The `ORDER BY` keys after the time, and their row format.
    keys: Vec<Arc<dyn PhysicalExpr>>,
    key_converter: Option<RowConverter>,
    pending: PendingRows,
    /// The last time released (`None`: nothing yet).
    last_time: Option<i64>,
    watermark: i64,
    metrics: Arc<JobMetrics>,
}

impl SortOperator {
    /// Sorts input `schema` by the event time in `time_column`, then by `keys` (with
    /// their sort options).
    pub fn new(
        time_column: usize,
        keys: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let key_converter = if keys.is_empty() {
            None
        } else {
            Some(crate::state::sort_converter(&keys, &schema)?)
        };
        Ok(SortOperator {
            time_column,
            keys: keys.into_iter().map(|(e, _)| e).collect(),
            key_converter,
            pending: PendingRows::new(schema)?,
            last_time: None,
            watermark: WATERMARK_MIN,
            metrics,
        })
    }

    /// Stages the rows with time `<= limit` (see `PendingRows::stage`).
    fn stage(&mut self, limit: i64) {
        if let Some((t, _)) = self.pending.stage(limit, self.watermark).last() {
            self.last_time = Some(t);
        }
    }

    /// Emits the staged rows, sorted.
    fn flush(&mut self, out: &mut Collector) -> Result<()> {
        let Some(Released {
            rows,
            times,
            watermarks,
        }) = self.pending.take_staged()?
        else {
            return Ok(());
        };
        // Staged in (time, arrival) order (each staging's times are after the last's,
        // since a row at or before the last time is late): a stable sort by (time, keys).
        let order: Option<Vec<u32>> = match &self.key_converter {
            None => None,
            Some(c) => {
                let keys = c.convert_columns(&evaluate_all(&self.keys, &rows)?)?;
                let mut order: Vec<u32> = (0..rows.num_rows() as u32).collect();
                order.sort_by(|&a, &b| {
                    let (a, b) = (a as usize, b as usize);
                    times[a]
                        .0
                        .cmp(&times[b].0)
                        .then(keys.row(a).cmp(&keys.row(b)))
                });
                Some(order)
            }
        };
        let (data, watermarks) = match order {
            None => (rows, watermarks),
            Some(order) => {
                let watermarks = order.iter().map(|&i| watermarks[i as usize]).collect();
                (
                    take_record_batch(&rows, &UInt32Array::from(order))?,
                    watermarks,
                )
            }
        };
        out.emit(StreamBatch {
            data,
            row_watermarks: Some(Int64Array::from(watermarks)),
            ops: None,
        });
        Ok(())
    }
}

impl Operator for SortOperator {
    fn name(&self) -> &'static str {
        "Sort"
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.pending.len() as u64)
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let times = time_values(&batch.data, self.time_column)?;
        let rows = self.pending.rows_of(batch.data.columns())?;
        let mut late = 0;
        for (w, run) in batch.watermark_runs() {
            if w > self.watermark {
                self.stage(w);
                self.watermark = w;
            }
            for i in run {
                if self.last_time.is_some_and(|last| times[i] <= last) {
                    late += 1;
                } else {
                    self.pending.push(times[i], 0, rows.row(i));
                }
            }
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, late);
        self.flush(out)
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        if watermark_ms > self.watermark {
            self.stage(watermark_ms);
            self.flush(out)?;
            self.watermark = watermark_ms;
        }
        out.watermark(watermark_ms);
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.stage(i64::MAX);
        self.flush(out)
    }

    /// One batch in the common layout (no key columns: one global key): `kind` (Int8: 0 a
    /// waiting row, 1 the last time released), `time` (Int64 ms), `row_<i>` (the input
    /// columns of a waiting row, NULL on the kind-1 row), waiting rows in release order.
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let (waiting, columns) = self.pending.snapshot()?;
        let n = waiting.len() + 1;
        let mut w = SnapshotWriter::new(Vec::new(), n, max_parallelism)?;
        let kinds: Vec<i8> = (0..n).map(|i| i8::from(i == n - 1)).collect();
        w.column("kind", Arc::new(Int8Array::from(kinds)));
        let times: Vec<Option<i64>> = waiting
            .iter()
            .map(|(t, _)| Some(*t))
            .chain(std::iter::once(self.last_time))
            .collect();
        w.column("time", Arc::new(Int64Array::from(times)));
        for (i, c) in columns.into_iter().enumerate() {
            let null = datafusion_common::arrow::array::new_null_array(c.data_type(), 1);
            w.column(
                format!("row_{i}"),
                datafusion_common::arrow::compute::concat(&[c.as_ref(), null.as_ref()])?,
            );
        }
        w.finish()
    }

    /// Adds the rows of snapshots (see [`Self::snapshot_state`]).
    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        for snap in snapshots {
            if snap.num_rows() == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "sort");
            let kinds = reader.primitive::<Int8Type>("kind")?;
            let times = reader.primitive::<Int64Type>("time")?;
            let columns = (0..self.pending.schema().fields().len())
                .map(|i| reader.column(&format!("row_{i}")))
                .collect::<Result<Vec<_>>>()?;
            let rows = self.pending.rows_of(&columns)?;
            for r in 0..snap.num_rows() {
                match kinds.value(r) {
                    0 => self.pending.push(times.value(r), 0, rows.row(r)),
                    1 if times.is_valid(r) => {
                        let t = times.value(r);
                        self.last_time = Some(self.last_time.map_or(t, |l| l.max(t)));
                    }
                    1 => {}
                    k => {
                        return Err(SluiceError::Execution(format!(
                            "a sort snapshot row of unknown kind {k}"
                        )))
                    }
                }
            }
        }
        Ok(())
    }
}

/// `LIMIT` without `ORDER BY` (see the module docs). Output: the input's columns.
pub struct LimitOperator {
    offset: u64,
    fetch: u64,
    /// Rows seen so far.
    seen: u64,
}

impl LimitOperator {
    /// Passes on rows `offset + 1 ..= offset + fetch`.
    pub fn new(offset: u64, fetch: u64) -> Self {
        LimitOperator {
            offset,
            fetch,
            seen: 0,
        }
    }
}

impl Operator for LimitOperator {
    fn name(&self) -> &'static str {
        "Limit"
    }

    fn state_rows(&self) -> Option<u64> {
        Some(1)
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let n = batch.num_rows() as u64;
        let first = self.seen;
        self.seen += n;
        let end = self.offset.saturating_add(self.fetch);
        let from = self.offset.max(first);
        let to = end.min(first + n);
        if from >= to {
            return Ok(());
        }
        let (start, len) = ((from - first) as usize, (to - from) as usize);
        out.emit(StreamBatch {
            data: batch.data.slice(start, len),
            row_watermarks: batch.row_watermarks.map(|w| w.slice(start, len)),
            ops: batch.ops.map(|o| o.slice(start, len)),
        });
        Ok(())
    }

    /// One row (no key columns): `seen` (Int64, rows seen so far).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let mut w = SnapshotWriter::new(Vec::new(), 1, max_parallelism)?;
        w.column("seen", Arc::new(Int64Array::from(vec![self.seen as i64])));
        w.finish()
    }

    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        for snap in snapshots {
            let seen = SnapshotReader::new(snap, "limit").primitive::<Int64Type>("seen")?;
            self.seen += seen.values().iter().map(|v| *v as u64).sum::<u64>();
        }
        Ok(())
    }
}
