//! Window table functions without aggregation: `TUMBLE`, `HOP`, `CUMULATE` assignment.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, AsArray, TimestampMillisecondArray, UInt32Array,
};
use datafusion_common::arrow::compute::{cast, take};
use datafusion_common::arrow::datatypes::{
    DataType, Int64Type, SchemaRef, TimeUnit, TimestampMillisecondType,
};
use sluice_common::plan::WindowSpec;
use sluice_common::Result;

use crate::message::StreamBatch;
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;

/// The event times (ms) of a timestamp column, whatever its precision.
pub(crate) fn event_times_ms(array: &ArrayRef) -> Result<TimestampMillisecondArray> {
    let tz = match array.data_type() {
        DataType::Timestamp(_, tz) => tz.clone(),
        _ => None,
    };
    let ms = cast(array, &DataType::Timestamp(TimeUnit::Millisecond, tz))?;
    Ok(ms.as_primitive::<TimestampMillisecondType>().clone())
}

/// Appends `window_start`, `window_end`, `window_time` (`TIMESTAMP(3)`; `window_time` =
/// `window_end - 1 ms`, a `TIMESTAMP_LTZ(3)` instant for windows in a time zone) to each row, once per window that holds the row's event time.
///
/// Input: any schema with the time attribute at `time_column`. Output: the input columns
/// plus the three window columns. Late rows (Flink's window TVF rule): a (row, window)
/// pair is dropped when the window has fired under the row's watermark
/// (`watermark >= window_end - 1`); a row all of whose windows have fired is counted in
/// `late_rows_dropped`. Rows with a NULL time are dropped and counted the same way.
pub struct WindowAssignOperator {
    spec: WindowSpec,
    time_column: usize,
    schema: SchemaRef,
    metrics: Arc<JobMetrics>,
    windows: Vec<(i64, i64)>,
}

impl WindowAssignOperator {
    /// Assigns windows of `spec` by the time at `time_column`, producing `schema`.
    pub fn new(
        spec: WindowSpec,
        time_column: usize,
        schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Self {
        WindowAssignOperator {
            spec,
            time_column,
            schema,
            metrics,
            windows: Vec::new(),
        }
    }
}

impl Operator for WindowAssignOperator {
    fn name(&self) -> &'static str {
        "WindowAssign"
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let times = event_times_ms(batch.data.column(self.time_column))?;
        let n = batch.num_rows();
        let mut indices: Vec<u32> = Vec::with_capacity(n);
        let mut starts: Vec<i64> = Vec::with_capacity(n);
        let mut ends: Vec<i64> = Vec::with_capacity(n);
        let mut late = 0u64;
        for i in 0..n {
            if times.is_null(i) {
                late += 1;
                continue;
            }
            let wm = batch.watermark_at(i);
            self.spec.assign(times.value(i), &mut self.windows);
            let mut kept = false;
            for &(s, e) in &self.windows {
                if !self.spec.fired(e, wm) {
                    indices.push(i as u32);
                    starts.push(s);
                    ends.push(e);
                    kept = true;
                }
            }
            if !kept {
                late += 1;
            }
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, late);
        // Every row in exactly one window, in order: pass the columns through. (A count
        // match alone is not enough: a row in two windows can balance a late one.)
        let identity =
            indices.len() == n && indices.iter().enumerate().all(|(i, r)| *r as usize == i);
        let (mut columns, row_watermarks): (Vec<ArrayRef>, _) = if identity {
            (batch.data.columns().to_vec(), batch.row_watermarks)
        } else {
            let idx = UInt32Array::from(indices);
            let cols = batch
                .data
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let wms = match &batch.row_watermarks {
                Some(w) => Some(take(w, &idx, None)?.as_primitive::<Int64Type>().clone()),
                None => None,
            };
            (cols, wms)
        };
        // window_time = window_end - 1 ms; for TIMESTAMP_LTZ windows an instant (LTZ).
        let window_time: Vec<i64> = ends.iter().map(|e| self.spec.fire_at_ms(*e)).collect();
        columns.push(Arc::new(TimestampMillisecondArray::from(starts)));
        columns.push(Arc::new(TimestampMillisecondArray::from(ends)));
        let window_time = TimestampMillisecondArray::from(window_time);
        columns.push(Arc::new(match self.spec.time_zone {
            Some(_) => window_time.with_timezone("UTC"),
            None => window_time,
        }));
        let rows = columns[columns.len() - 1].len();
        let data = batch_with_schema(&self.schema, columns, rows)?;
        out.emit(StreamBatch {
            data,
            row_watermarks,
            ops: None,
        });
        Ok(())
    }
}
