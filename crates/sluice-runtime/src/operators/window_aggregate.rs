//! Keyed window aggregation (window TVF + `GROUP BY window_start, window_end, ...`).

use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, TimestampMillisecondArray, UInt32Array,
};
use datafusion_common::arrow::compute::{concat_batches, take};
use datafusion_common::arrow::datatypes::{SchemaRef, TimestampMillisecondType};
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::GroupOutput;
use sluice_common::time::{window_fired, WATERMARK_MAX, WATERMARK_MIN};
use sluice_common::Result;

use crate::expr::evaluate;
use crate::message::StreamBatch;
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::state::{AccumulatorFactory, WindowAggregateState};

/// One aggregate call: its argument expressions and optional `FILTER (WHERE ...)`.
pub struct AggregateCall {
    /// Argument expressions over the input.
    pub args: Vec<Arc<dyn PhysicalExpr>>,
    /// The `FILTER` predicate over the input, if any.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
}

/// Aggregates rows per (window, key) and emits one row per (window, key) when the window
/// fires.
///
/// Input: rows carrying their window in two `TIMESTAMP(3)` columns (`window_start`,
/// `window_end`), as a window table function produces them. Output: the `GROUP BY`
/// columns in written order (window bounds and keys), then one column per aggregate.
///
/// Firing (Flink window TVF aggregation): a window `[start, end)` fires once, when the
/// watermark reaches `end - 1 ms`; its state is then dropped. A row for a window that has
/// already fired is late and dropped (the window assignment upstream already removes
/// them, judged by each row's own watermark; this operator checks again).
pub struct WindowAggregateOperator {
    window_start: usize,
    window_end: usize,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    aggregates: Vec<AggregateCall>,
    group_outputs: Vec<GroupOutput>,
    schema: SchemaRef,
    state: WindowAggregateState,
    watermark_ms: i64,
    metrics: Arc<JobMetrics>,
}

impl WindowAggregateOperator {
    /// See the type docs; `state` holds the accumulators for `aggregates` in order.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        window_start: usize,
        window_end: usize,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        aggregates: Vec<AggregateCall>,
        factory: AccumulatorFactory,
        key_types: &[datafusion_common::arrow::datatypes::DataType],
        group_outputs: Vec<GroupOutput>,
        schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        Ok(WindowAggregateOperator {
            window_start,
            window_end,
            keys,
            aggregates,
            group_outputs,
            schema,
            state: WindowAggregateState::new(key_types, factory)?,
            watermark_ms: WATERMARK_MIN,
            metrics,
        })
    }

    fn emit_fired(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        let fired = self.state.fire(watermark_ms)?;
        if fired.is_empty() {
            return Ok(());
        }
        let mut batches = Vec::with_capacity(fired.len());
        for w in fired {
            let rows = w.values.first().map(|v| v.len()).unwrap_or_else(|| {
                w.keys.first().map(|k| k.len()).unwrap_or(1)
            });
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
            for g in &self.group_outputs {
                columns.push(match g {
                    GroupOutput::WindowStart => {
                        Arc::new(TimestampMillisecondArray::from(vec![w.start_ms; rows]))
                    }
                    GroupOutput::WindowEnd => {
                        Arc::new(TimestampMillisecondArray::from(vec![w.end_ms; rows]))
                    }
                    GroupOutput::Key(k) => match w.keys.get(*k) {
                        Some(a) => Arc::clone(a),
                        None => new_null_array(self.schema.field(columns.len()).data_type(), rows),
                    },
                });
            }
            columns.extend(w.values);
            batches.push(batch_with_schema(&self.schema, columns, rows)?);
        }
        let schema = batches[0].schema();
        let data = if batches.len() == 1 {
            batches.pop().expect("one batch")
        } else {
            concat_batches(&schema, &batches)?
        };
        JobMetrics::add(&self.metrics.rows_out, 0);
        out.emit(StreamBatch::new(data));
        Ok(())
    }
}

/// Sorts row indices by window `(end, start)`, returning runs of equal windows.
fn runs_by_window(starts: &[i64], ends: &[i64], keep: &[bool]) -> Vec<((i64, i64), Vec<u32>)> {
    let n = starts.len();
    // Fast path: one window for the whole batch (sorted input, big windows).
    if n > 0 && keep.iter().all(|k| *k) {
        let (s0, e0) = (starts[0], ends[0]);
        if starts.iter().all(|s| *s == s0) && ends.iter().all(|e| *e == e0) {
            return vec![((e0, s0), (0..n as u32).collect())];
        }
    }
    let mut idx: Vec<u32> = (0..n as u32).filter(|&i| keep[i as usize]).collect();
    idx.sort_by_key(|&i| (ends[i as usize], starts[i as usize]));
    let mut runs: Vec<((i64, i64), Vec<u32>)> = Vec::new();
    for i in idx {
        let w = (ends[i as usize], starts[i as usize]);
        match runs.last_mut() {
            Some((lw, v)) if *lw == w => v.push(i),
            _ => runs.push((w, vec![i])),
        }
    }
    runs
}

fn take_all(arrays: &[ArrayRef], idx: &UInt32Array) -> Result<Vec<ArrayRef>> {
    Ok(arrays
        .iter()
        .map(|a| take(a.as_ref(), idx, None))
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

impl Operator for WindowAggregateOperator {
    fn name(&self) -> &'static str {
        "WindowAggregate"
    }

    fn process_batch(&mut self, batch: StreamBatch, _out: &mut Collector) -> Result<()> {
        let data: &RecordBatch = &batch.data;
        let starts = data
            .column(self.window_start)
            .as_primitive::<TimestampMillisecondType>();
        let ends = data
            .column(self.window_end)
            .as_primitive::<TimestampMillisecondType>();
        let keep: Vec<bool> = (0..data.num_rows())
            .map(|i| !window_fired(ends.value(i), self.watermark_ms))
            .collect();
        let late = keep.iter().filter(|k| !**k).count() as u64;
        JobMetrics::add(&self.metrics.late_rows_dropped, late);

        let key_columns = self
            .keys
            .iter()
            .map(|k| evaluate(k, data))
            .collect::<Result<Vec<_>>>()?;
        let key_rows = self.state.key_rows(&key_columns)?;
        let args: Vec<Vec<ArrayRef>> = self
            .aggregates
            .iter()
            .map(|a| a.args.iter().map(|e| evaluate(e, data)).collect())
            .collect::<Result<_>>()?;
        let filters: Vec<Option<BooleanArray>> = self
            .aggregates
            .iter()
            .map(|a| match &a.filter {
                Some(f) => Ok(Some(evaluate(f, data)?.as_boolean().clone())),
                None => Ok(None),
            })
            .collect::<Result<_>>()?;

        let runs = runs_by_window(starts.values(), ends.values(), &keep);
        let whole = runs.len() == 1 && runs[0].1.len() == data.num_rows();
        for ((end_ms, start_ms), selection) in runs {
            if whole {
                self.state.update(
                    start_ms,
                    end_ms,
                    key_rows.as_ref(),
                    &selection,
                    &args,
                    &filters,
                )?;
            } else {
                let idx = UInt32Array::from(selection.clone());
                let sel_args: Vec<Vec<ArrayRef>> = args
                    .iter()
                    .map(|a| take_all(a, &idx))
                    .collect::<Result<_>>()?;
                let sel_filters: Vec<Option<BooleanArray>> = filters
                    .iter()
                    .map(|f| match f {
                        Some(f) => Ok(Some(take(f, &idx, None)?.as_boolean().clone())),
                        None => Ok(None),
                    })
                    .collect::<Result<_>>()?;
                self.state.update(
                    start_ms,
                    end_ms,
                    key_rows.as_ref(),
                    &selection,
                    &sel_args,
                    &sel_filters,
                )?;
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        if watermark_ms > self.watermark_ms {
            self.watermark_ms = watermark_ms;
            self.emit_fired(watermark_ms, out)?;
        }
        out.watermark(watermark_ms);
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.watermark_ms = WATERMARK_MAX;
        self.emit_fired(WATERMARK_MAX, out)
    }
}
