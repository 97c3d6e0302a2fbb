//! Keyed window aggregation (window TVF + `GROUP BY window_start, window_end, ...`).

use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, TimestampMillisecondArray, UInt32Array,
};
use datafusion_common::arrow::compute::{concat_batches, take};
use datafusion_common::arrow::datatypes::{SchemaRef, TimestampMillisecondType};
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::{GroupOutput, WindowSpec};
use sluice_common::time::{WATERMARK_MAX, WATERMARK_MIN};
use sluice_common::Result;

use crate::expr::{evaluate, evaluate_all};
use crate::message::StreamBatch;
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::operators::window_assign::event_times_ms;
use crate::state::{AccumulatorFactory, WindowAggregateState};

/// The arguments (one array per argument, per call) and `FILTER` masks of aggregate calls
/// over a batch.
pub type CallInputs = (Vec<Vec<ArrayRef>>, Vec<Option<BooleanArray>>);

impl AggregateCall {
    /// Evaluates the arguments and filters of `calls` over `data`.
    pub fn evaluate_all(calls: &[AggregateCall], data: &RecordBatch) -> Result<CallInputs> {
        let args = calls
            .iter()
            .map(|a| evaluate_all(&a.args, data))
            .collect::<Result<Vec<_>>>()?;
        let filters = calls
            .iter()
            .map(|a| match &a.filter {
                Some(f) => Ok(Some(evaluate(f, data)?.as_boolean().clone())),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((args, filters))
    }
}

/// Where a window aggregate finds each row's windows.
pub enum WindowSource {
    /// In two `TIMESTAMP(3)` columns of the input (a window TVF upstream assigned them).
    Columns {
        /// Index of `window_start`.
        start: usize,
        /// Index of `window_end`.
        end: usize,
    },
    /// Assigned here from the time attribute (the window TVF fused into the aggregate):
    /// no row is copied per window. A (row, window) pair whose window has fired under the
    /// row's watermark is dropped; a row with no window left is late and counted.
    Assign {
        /// Index of the time attribute.
        time_column: usize,
    },
}

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
///
/// On a processing-time attribute (`WindowSpec::processing_time`, windows assigned here)
/// the processing-time clock takes the watermark's place (Flink's processing-time
/// windows): rows are in the windows of the operator's clock when they come in (rows
/// taken in the millisecond a window fired count in the next one), and a window fires on
/// a processing-time timer when the clock reaches `end - 1 ms`. No row is late. The end of
/// the input fires every open window.
pub struct WindowAggregateOperator {
    spec: WindowSpec,
    windows: WindowSource,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    aggregates: Vec<AggregateCall>,
    group_outputs: Vec<GroupOutput>,
    schema: SchemaRef,
    state: WindowAggregateState,
    /// The watermark, or on processing time the clock's time of the last firing.
    watermark_ms: i64,
    metrics: Arc<JobMetrics>,
    clock: crate::clock::ProcessingClock,
    /// Scratch for window assignment.
    assigned: Vec<(i64, i64)>,
}

impl WindowAggregateOperator {
    /// See the type docs; `state` holds the accumulators for `aggregates` in order.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: WindowSpec,
        windows: WindowSource,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        aggregates: Vec<AggregateCall>,
        factory: AccumulatorFactory,
        key_types: &[datafusion_common::arrow::datatypes::DataType],
        group_outputs: Vec<GroupOutput>,
        schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        Ok(WindowAggregateOperator {
            spec,
            windows,
            keys,
            aggregates,
            group_outputs,
            schema,
            state: WindowAggregateState::new(key_types, factory)?,
            watermark_ms: WATERMARK_MIN,
            metrics,
            clock: crate::clock::ProcessingClock::system(),
            assigned: Vec::new(),
        })
    }

    /// The processing-time clock windows on a processing-time attribute fire by.
    pub fn with_clock(mut self, clock: crate::clock::ProcessingClock) -> Self {
        self.clock = clock;
        self
    }

    fn emit_fired(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        let fired = self.state.fire(&self.spec, watermark_ms)?;
        if fired.is_empty() {
            return Ok(());
        }
        let mut batches = Vec::with_capacity(fired.len());
        for w in fired {
            let rows = w
                .values
                .first()
                .map(|v| v.len())
                .unwrap_or_else(|| w.keys.first().map(|k| k.len()).unwrap_or(1));
            let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
            for g in &self.group_outputs {
                columns.push(match g {
                    GroupOutput::WindowStart => {
                        Arc::new(TimestampMillisecondArray::from(vec![w.start_ms; rows]))
                    }
                    GroupOutput::WindowEnd => {
                        Arc::new(TimestampMillisecondArray::from(vec![w.end_ms; rows]))
                    }
                    GroupOutput::WindowTime => window_time_array(
                        self.schema.field(columns.len()),
                        vec![self.spec.fire_at_ms(w.end_ms); rows],
                    ),
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
        out.emit(StreamBatch::new(data));
        Ok(())
    }
}

/// Row indices grouped by window `(end, start)`, in first-seen order. A batch touches few
/// windows, so a linear search from the last window hit is cheaper than sorting.
#[derive(Default)]
struct WindowBuckets {
    buckets: Vec<((i64, i64), Vec<u32>)>,
    last: usize,
}

impl WindowBuckets {
    fn add(&mut self, window: (i64, i64), row: u32) {
        if let Some((w, rows)) = self.buckets.get_mut(self.last) {
            if *w == window {
                rows.push(row);
                return;
            }
        }
        match self.buckets.iter().position(|(w, _)| *w == window) {
            Some(p) => {
                self.last = p;
                self.buckets[p].1.push(row);
            }
            None => {
                self.last = self.buckets.len();
                self.buckets.push((window, vec![row]));
            }
        }
    }
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
        let n = data.num_rows();
        let mut buckets = WindowBuckets::default();
        let mut late = 0u64;
        match &self.windows {
            WindowSource::Columns { start, end } => {
                let starts = data
                    .column(*start)
                    .as_primitive::<TimestampMillisecondType>();
                let ends = data.column(*end).as_primitive::<TimestampMillisecondType>();
                for i in 0..n {
                    let e = ends.value(i);
                    if self.spec.fired(e, self.watermark_ms) {
                        late += 1;
                    } else {
                        buckets.add((e, starts.value(i)), i as u32);
                    }
                }
            }
            WindowSource::Assign { .. } if self.spec.processing_time => {
                // Flink's processing-time windows: the windows of the operator's clock when
                // the rows come in; none is late. Rows taken in the millisecond a window
                // fired (its end - 1) belong to the next one, so no window fires twice.
                let now = self.clock.now_ms().max(self.watermark_ms.saturating_add(1));
                self.spec.assign(now, &mut self.assigned);
                for &(s, e) in &self.assigned {
                    for i in 0..n {
                        buckets.add((e, s), i as u32);
                    }
                }
            }
            WindowSource::Assign { time_column } => {
                let spec = &self.spec;
                let times = event_times_ms(data.column(*time_column))?;
                let windows = &mut self.assigned;
                for i in 0..n {
                    if times.is_null(i) {
                        late += 1;
                        continue;
                    }
                    let wm = batch.watermark_at(i).max(self.watermark_ms);
                    spec.assign(times.value(i), windows);
                    let mut kept = false;
                    for &(s, e) in windows.iter() {
                        if !spec.fired(e, wm) {
                            buckets.add((e, s), i as u32);
                            kept = true;
                        }
                    }
                    if !kept {
                        late += 1;
                    }
                }
            }
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, late);

        let key_columns = evaluate_all(&self.keys, data)?;
        let key_rows = self.state.key_rows(&key_columns)?;
        let (args, filters) = AggregateCall::evaluate_all(&self.aggregates, data)?;

        for ((end_ms, start_ms), selection) in buckets.buckets {
            // All rows in input order: no copy needed.
            let whole = selection.len() == n;
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
        if watermark_ms > self.watermark_ms && !self.spec.processing_time {
            self.watermark_ms = watermark_ms;
            self.emit_fired(watermark_ms, out)?;
        }
        out.watermark(watermark_ms);
        Ok(())
    }

    fn next_processing_timer(&self) -> Option<i64> {
        if !self.spec.processing_time {
            return None;
        }
        self.state.first_end().map(|end| self.spec.fire_at_ms(end))
    }

    fn on_processing_time(&mut self, now_ms: i64, out: &mut Collector) -> Result<()> {
        if self.spec.processing_time && now_ms > self.watermark_ms {
            self.watermark_ms = now_ms;
            self.emit_fired(now_ms, out)?;
        }
        Ok(())
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.state.len() as u64)
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.watermark_ms = WATERMARK_MAX;
        self.emit_fired(WATERMARK_MAX, out)
    }

    /// The open windows: see [`WindowAggregateState::snapshot`] for the columns.
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        self.state.snapshot(max_parallelism)
    }

    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        for s in snapshots {
            self.state.restore(s)?;
        }
        Ok(())
    }
}

/// A `window_time` column (instants, ms) typed as `field` declares it: `TIMESTAMP(3)`, or
/// `TIMESTAMP_LTZ(3)` (with its time zone) over a `TIMESTAMP_LTZ` attribute.
pub(crate) fn window_time_array(
    field: &datafusion_common::arrow::datatypes::Field,
    instants_ms: Vec<i64>,
) -> ArrayRef {
    let zone = match field.data_type() {
        datafusion_common::arrow::datatypes::DataType::Timestamp(_, zone) => zone.clone(),
        _ => None,
    };
    Arc::new(TimestampMillisecondArray::from(instants_ms).with_timezone_opt(zone))
}
