//! OVER aggregation on event time (Flink SQL "Over Aggregation"; Flink's
//! `RowTimeRowsBoundedPrecedingFunction`, `RowTimeRangeBoundedPrecedingFunction` and their
//! unbounded forms).
//!
//! Ordered by a processing-time attribute (`PROCTIME()`), rows are taken in arrival order
//! and leave at once (Flink's `ProcTime*` functions). Ordered by event time, rows wait
//! (`PendingRows`: the whole input row's bytes) until the watermark reaches
//! their time, then leave in (time, arrival) order, each with its calls
//! evaluated over its frame. The watermark is read per row (`StreamBatch::row_watermarks`):
//! before a row is taken in, everything the watermark in effect at its arrival made final
//! leaves, so results never depend on how the input was cut into batches.
//!
//! Per partition (`KeyedValues<Partition>`): the last time released (a row at or before it
//! is late: dropped and counted), the frame rows' times (bounded frames: rows leave a frame
//! in the order they entered it), one [`calls::CallState`] per aggregate (a running sum
//! for `COUNT`/`SUM`/`AVG` of numbers, else a DataFusion `Accumulator`; each keeps what
//! it needs of the frame rows to retract them) and the last LAG values. `RANGE` peers
//! (equal times) enter the frame together and get the same values.

pub mod calls;

use std::collections::VecDeque;
use std::sync::Arc;

use calls::{scalars_to_array, AggregateCall, CallArgs, CallOutput, CallState};
use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, Int64Array, Int8Array, RecordBatch,
};
use datafusion_common::arrow::compute::concat;
use datafusion_common::arrow::datatypes::{DataType, Int64Type, Int8Type, SchemaRef};
use datafusion_common::arrow::row::RowConverter;
use datafusion_common::ScalarValue;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::OverFrame;
use sluice_common::time::WATERMARK_MIN;
use sluice_common::{Result, SluiceError};

use crate::expr::evaluate_all;
use crate::message::StreamBatch;
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::state::keyed::KeyedValues;
use crate::state::pending::{PendingRows, Released};
use crate::state::row_codec::EncodedRows;
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// One call of the window, lowered.
pub enum OverCallExec {
    /// An aggregate over the frame; its arguments are `args` of [`OverAggregateOperator`]
    /// from the first index it was built with ([`AggregateCall::new`]) on.
    Aggregate(AggregateCall),
    /// `LAG`: the value of `lag_values[value]` `offset` rows back, else `default`.
    Lag {
        /// Index into the operator's LAG value expressions.
        value: usize,
        /// Rows back (>= 1).
        offset: u64,
        /// The default over the current row (NULL when `None`).
        default: Option<Arc<dyn PhysicalExpr>>,
    },
}

/// What a partition keeps.
#[derive(Default)]
struct Partition {
    /// The last time released (`None`: nothing yet).
    last_time: Option<i64>,
    /// Bounded frames: the frame rows' times, oldest first.
    frame: VecDeque<i64>,
    /// One state per aggregate call.
    aggregates: Vec<CallState>,
    /// The last LAG values (up to the largest offset + 1 rows), oldest first (one per
    /// LAG call).
    lags: VecDeque<Vec<ScalarValue>>,
}

/// See the module docs. Output: the input's columns, then one column per call.
pub struct OverAggregateOperator {
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    key_converter: Option<RowConverter>,
    time_column: usize,
    /// Ordered by a processing-time attribute: rows leave in arrival order at once.
    processing_time: bool,
    frame: OverFrame,
    calls: Vec<OverCallExec>,
    /// Every aggregate argument, call after call.
    args: Vec<Arc<dyn PhysicalExpr>>,
    /// The values LAG calls read.
    lag_values: Vec<Arc<dyn PhysicalExpr>>,
    /// The largest LAG offset (`None`: no LAG call); LAG keeps that many rows back.
    lag_depth: Option<usize>,
    partitions: KeyedValues<Partition>,
    /// Scratch for `flush`: per partition id, its last row in the batch being released
    /// (`u32::MAX`: none; left so after each flush).
    last_of: Vec<u32>,
    pending: PendingRows,
    watermark: i64,
    in_schema: SchemaRef,
    schema: SchemaRef,
    metrics: Arc<JobMetrics>,
}

impl OverAggregateOperator {
    /// An OVER window over input `in_schema`: rows partitioned by `partition_by`, ordered
    /// by the event time in column `time_column` (a timestamp), with `frame`, computing
    /// `calls` (their arguments `args`, LAG values `lag_values`); output `schema`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        time_column: usize,
        processing_time: bool,
        frame: OverFrame,
        calls: Vec<OverCallExec>,
        args: Vec<Arc<dyn PhysicalExpr>>,
        lag_values: Vec<Arc<dyn PhysicalExpr>>,
        in_schema: SchemaRef,
        schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let key_types = partition_by
            .iter()
            .map(|k| k.data_type(&in_schema))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        // (None: no LAG call.)
        let lag_depth = calls
            .iter()
            .filter_map(|c| match c {
                OverCallExec::Lag { offset, .. } => Some(*offset as usize),
                OverCallExec::Aggregate { .. } => None,
            })
            .max();
        Ok(OverAggregateOperator {
            key_converter: key_converter(&key_types)?,
            partition_by,
            time_column,
            processing_time,
            frame,
            calls,
            args,
            lag_values,
            lag_depth,
            partitions: KeyedValues::new(),
            last_of: Vec::new(),
            pending: PendingRows::new(Arc::clone(&in_schema))?,
            watermark: WATERMARK_MIN,
            in_schema,
            schema,
            metrics,
        })
    }

    fn bounded(&self) -> bool {
        matches!(
            self.frame,
            OverFrame::Rows { preceding: Some(_) }
                | OverFrame::Range {
                    preceding_ms: Some(_)
                }
        )
    }

    /// The partition id of each row of `data`.
    fn partition_ids(&mut self, data: &RecordBatch) -> Result<Vec<usize>> {
        let keys = evaluate_all(&self.partition_by, data)?;
        let rows = crate::state::encode_keys(self.key_converter.as_ref(), &keys)?;
        let all: Vec<u32> = (0..data.num_rows() as u32).collect();
        let mut ids = Vec::new();
        let bounded = self.bounded();
        let calls = &self.calls;
        self.partitions
            .ids_or_insert_with(rows.as_ref(), &all, &mut ids, |_| {
                new_partition(calls, bounded)
            })?;
        Ok(ids)
    }

    /// Takes in the rows of `batch` (none is released by this; see `release`).
    /// (`batch` is the whole batch's rows encoded, `times` their times.)
    fn take_in(
        &mut self,
        batch: &EncodedRows,
        times: &[i64],
        rows: std::ops::Range<usize>,
        ids: &[usize],
    ) -> Result<()> {
        let mut late = 0;
        for i in rows {
            let t = times[i];
            let p = &self.partitions[ids[i]];
            if !self.processing_time && p.last_time.is_some_and(|last| t <= last) {
                late += 1;
                continue;
            }
            self.pending.push(t, ids[i] as u32, batch.row(i));
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, late);
        Ok(())
    }

    /// Releases the rows with time `<= limit` in (time, arrival) order with their calls
    /// evaluated.
    fn release(&mut self, limit: i64, out: &mut Collector) -> Result<()> {
        self.stage(limit);
        self.flush(out)
    }

    /// Stages the rows with time `<= limit` (see `PendingRows::stage`); their
    /// partitions' last times move on, so later rows are judged late against them.
    fn stage(&mut self, limit: i64) {
        for (t, p) in self.pending.stage(limit, self.watermark) {
            self.partitions[p as usize].last_time = Some(t);
        }
    }

    /// Evaluates the staged rows' calls and emits them, in the order they were staged.
    fn flush(&mut self, out: &mut Collector) -> Result<()> {
        let Some(Released {
            rows,
            times,
            watermarks,
        }) = self.pending.take_staged()?
        else {
            return Ok(());
        };
        let n = rows.num_rows();
        let args = evaluate_all(&self.args, &rows)?;
        let lag_values = evaluate_all(&self.lag_values, &rows)?;
        // Each partition's rows, in order: partitions in order of their first row, their
        // rows chained through `next`.
        let mut firsts: Vec<u32> = Vec::new();
        let mut next = vec![u32::MAX; n];
        let last_of = &mut self.last_of;
        for (i, (_, p)) in times.iter().enumerate() {
            let p = *p as usize;
            if p >= last_of.len() {
                last_of.resize(p + 1, u32::MAX);
            }
            match std::mem::replace(&mut last_of[p], i as u32) {
                u32::MAX => firsts.push(i as u32),
                prev => next[prev as usize] = i as u32,
            }
        }
        for &first in &firsts {
            last_of[times[first as usize].1 as usize] = u32::MAX;
        }
        let mut outputs = Vec::with_capacity(self.calls.len());
        let mut call_args = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            match call {
                OverCallExec::Aggregate(a) => {
                    outputs.push(a.output(n));
                    call_args.push(Some(a.args(&args)?));
                }
                OverCallExec::Lag { .. } => {
                    outputs.push(CallOutput::Scalars(vec![ScalarValue::Null; n]));
                    call_args.push(None);
                }
            }
        }
        let mut rows_of = Vec::new();
        for first in firsts {
            rows_of.clear();
            let mut i = first;
            while i != u32::MAX {
                rows_of.push(i as usize);
                i = next[i as usize];
            }
            let p = times[first as usize].1 as usize;
            self.compute(
                p,
                &rows_of,
                &times,
                &rows,
                &call_args,
                &lag_values,
                &mut outputs,
            )?;
        }
        let mut columns = rows.columns().to_vec();
        for (call, out) in self.calls.iter().zip(outputs) {
            columns.push(match call {
                OverCallExec::Aggregate(a) => a.finish(out)?,
                OverCallExec::Lag { .. } => {
                    let field = self.schema.field(columns.len());
                    let CallOutput::Scalars(v) = out else {
                        unreachable!("LAG values are scalars")
                    };
                    scalars_to_array(v, field.data_type())?
                }
            });
        }
        let data = batch_with_schema(&self.schema, columns, n)?;
        out.emit(StreamBatch {
            data,
            row_watermarks: (!self.processing_time).then(|| Int64Array::from(watermarks)),
            ops: None,
        });
        Ok(())
    }

    /// Evaluates the calls for one partition's released rows `rows_of` (in order).
    #[allow(clippy::too_many_arguments)]
    fn compute(
        &mut self,
        p: usize,
        rows_of: &[usize],
        times: &[(i64, u32)],
        rows: &RecordBatch,
        call_args: &[Option<CallArgs>],
        lag_values: &[ArrayRef],
        outputs: &mut [CallOutput],
    ) -> Result<()> {
        let frame = self.frame;
        let bounded = self.bounded();
        // Rows with equal times are peers under RANGE; on processing time each row is its
        // own moment (Flink's ProcTime* functions emit every row as it arrives, over the
        // rows before it), even when rows read together share a clock reading.
        let range = matches!(frame, OverFrame::Range { .. }) && !self.processing_time;
        let part = &mut self.partitions[p];
        let mut k = 0;
        while k < rows_of.len() {
            // The current row and, under RANGE, its peers (same time).
            let t = times[rows_of[k]].0;
            let mut end = k + 1;
            while range && end < rows_of.len() && times[rows_of[end]].0 == t {
                end += 1;
            }
            let group = &rows_of[k..end];
            // Rows that leave the frame are retracted before the current rows are added,
            // as Flink does (floating-point sums round the same way).
            loop {
                let leaves = match (frame, part.frame.front()) {
                    (OverFrame::Rows { preceding: Some(n) }, Some(_)) => {
                        part.frame.len() as u64 + group.len() as u64 > n + 1
                    }
                    (
                        OverFrame::Range {
                            preceding_ms: Some(ms),
                        },
                        Some(front),
                    ) => *front < t.saturating_sub(ms),
                    _ => false,
                };
                if !leaves {
                    break;
                }
                part.frame.pop_front();
                for state in part.aggregates.iter_mut() {
                    state.retract_oldest()?;
                }
            }
            for &i in group {
                for (a, args) in call_args.iter().flatten().enumerate() {
                    part.aggregates[a].add(args, i, bounded)?;
                }
                if bounded {
                    part.frame.push_back(t);
                }
            }
            let mut a = 0;
            for (c, call) in self.calls.iter().enumerate() {
                if let OverCallExec::Aggregate(call) = call {
                    part.aggregates[a].evaluate(call, &mut outputs[c], group)?;
                    a += 1;
                }
            }
            // LAG counts rows back from the last row of the group: under RANGE, peers
            // get the same values, as Flink gives them (it evaluates every call of a peer
            // group after taking in all of its rows).
            if let Some(lag_depth) = self.lag_depth {
                for &i in group {
                    let now = lag_values
                        .iter()
                        .map(|a| ScalarValue::try_from_array(a, i))
                        .collect::<datafusion_common::Result<Vec<_>>>()?;
                    part.lags.push_back(now);
                    if part.lags.len() > lag_depth + 1 {
                        part.lags.pop_front();
                    }
                }
                let last = part.lags.len() - 1;
                for &i in group {
                    for (c, call) in self.calls.iter().enumerate() {
                        if let OverCallExec::Lag {
                            value,
                            offset,
                            default,
                        } = call
                        {
                            let back = *offset as usize;
                            let v = if last >= back {
                                part.lags[last - back][*value].clone()
                            } else if let Some(d) = default {
                                let d = d.evaluate(&rows.slice(i, 1))?.into_array(1)?;
                                ScalarValue::try_from_array(&d, 0)?
                            } else {
                                ScalarValue::Null
                            };
                            if let CallOutput::Scalars(out) = &mut outputs[c] {
                                out[i] = v;
                            }
                        }
                    }
                }
            }
            k = end;
        }
        Ok(())
    }

    /// Takes in `batch`, releasing before each row what its watermark made final.
    fn process(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let ids = self.partition_ids(&batch.data)?;
        let times = time_values(&batch.data, self.time_column)?;
        let rows = self.pending.rows_of(batch.data.columns())?;
        if self.processing_time {
            // In arrival order, at once (processing time only grows).
            self.take_in(&rows, &times, 0..batch.num_rows(), &ids)?;
            return self.release(i64::MAX, out);
        }
        for (w, run) in batch.watermark_runs() {
            if w > self.watermark {
                self.stage(w);
                self.watermark = w;
            }
            self.take_in(&rows, &times, run, &ids)?;
        }
        self.flush(out)
    }
}

/// A fresh partition: one state per aggregate call (sliding accumulators for bounded
/// frames).
fn new_partition(calls: &[OverCallExec], bounded: bool) -> Result<Partition> {
    let aggregates = aggregate_calls(calls)
        .map(|c| c.start(bounded))
        .collect::<Result<Vec<_>>>()?;
    Ok(Partition {
        aggregates,
        ..Partition::default()
    })
}

/// The aggregate calls, in order.
fn aggregate_calls(calls: &[OverCallExec]) -> impl Iterator<Item = &AggregateCall> {
    calls.iter().filter_map(|c| match c {
        OverCallExec::Aggregate(a) => Some(a),
        OverCallExec::Lag { .. } => None,
    })
}

/// The event times (ms) of a timestamp column.
pub(crate) fn time_values(data: &RecordBatch, column: usize) -> Result<Vec<i64>> {
    let c = datafusion_common::arrow::compute::cast(
        data.column(column),
        &DataType::Timestamp(
            datafusion_common::arrow::datatypes::TimeUnit::Millisecond,
            None,
        ),
    )?;
    let c = datafusion_common::arrow::compute::cast(&c, &DataType::Int64)?;
    let c = c
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("cast to Int64");
    if c.null_count() > 0 {
        return Err(SluiceError::Execution(format!(
            "a row with a NULL time ('{}') reached an operator that orders rows by it \
             (OVER, ORDER BY, a window Top-N); filter such rows out first",
            data.schema().field(column).name()
        )));
    }
    Ok(c.values().to_vec())
}

const PENDING: i8 = 0;
const FRAME: i8 = 1;
const LAG: i8 = 2;
const PARTITION: i8 = 3;

impl Operator for OverAggregateOperator {
    fn name(&self) -> &'static str {
        "OverAggregate"
    }

    fn state_rows(&self) -> Option<u64> {
        let held: usize = self
            .partitions
            .slots()
            .iter()
            .map(|p| p.frame.len() + p.lags.len())
            .sum();
        Some((self.pending.len() + held) as u64)
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        self.process(batch, out)
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        if watermark_ms > self.watermark {
            self.release(watermark_ms, out)?;
            self.watermark = watermark_ms;
        }
        out.watermark(watermark_ms);
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.release(i64::MAX, out)
    }

    /// One batch in the common layout: `key_group`, `key_<k>` (the partition), `kind`
    /// (Int8: 0 a row waiting for the watermark, 1 a row of a bounded frame, 2 a row LAG
    /// keeps, 3 the partition), `time` (Int64 ms: the row's time; for the partition the
    /// last time released, NULL before any), `row_<i>` (the input columns of a waiting
    /// row), `frame_<a>_<i>` (what aggregate call `a` keeps of a frame row: a `COUNT`,
    /// `SUM` or `AVG` of numbers the value as its sum keeps it, NULL where not counted;
    /// another aggregate its arguments), `lag_<j>` (a LAG row's values), `agg_<a>_<i>`
    /// (call `a`'s running state, unbounded frames only: `sum` and `count`, or
    /// DataFusion's state fields). Rows of one partition keep their order.
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let live = self.partitions.live_ids();
        if live.is_empty() {
            return Ok(None);
        }
        let bounded = self.bounded();
        let mut ids: Vec<u32> = Vec::new();
        let mut kinds: Vec<i8> = Vec::new();
        let mut times: Vec<Option<i64>> = Vec::new();
        let (pending, waiting) = self.pending.snapshot()?;
        for (t, p) in &pending {
            ids.push(*p);
            kinds.push(PENDING);
            times.push(Some(*t));
        }
        for &id in &live {
            for t in &self.partitions[id as usize].frame {
                ids.push(id);
                kinds.push(FRAME);
                times.push(Some(*t));
            }
        }
        let mut lag_rows: Vec<Vec<ScalarValue>> = Vec::new();
        for &id in &live {
            for v in &self.partitions[id as usize].lags {
                ids.push(id);
                kinds.push(LAG);
                times.push(None);
                lag_rows.push(v.clone());
            }
        }
        for &id in &live {
            ids.push(id);
            kinds.push(PARTITION);
            times.push(self.partitions[id as usize].last_time);
        }
        let total = ids.len();
        let np = pending.len();
        let nf: usize = live
            .iter()
            .map(|&id| self.partitions[id as usize].frame.len())
            .sum();
        let nl = lag_rows.len();
        let key_columns = self
            .partitions
            .key_columns(self.key_converter.as_ref(), &ids)?;
        let mut w = SnapshotWriter::new(key_columns, total, max_parallelism)?;
        w.column("kind", Arc::new(Int8Array::from(kinds)));
        w.column("time", Arc::new(Int64Array::from(times)));
        for (i, c) in waiting.into_iter().enumerate() {
            let after = new_null_array(c.data_type(), total - np);
            w.column(format!("row_{i}"), concat(&[c.as_ref(), after.as_ref()])?);
        }
        // A column whose rows `before..before + middle.len()` are `middle`, NULL elsewhere.
        let segment = |before: usize, middle: ArrayRef| {
            let t = middle.data_type().clone();
            let after = total - before - middle.len();
            let b = new_null_array(&t, before);
            let a = new_null_array(&t, after);
            Ok::<ArrayRef, SluiceError>(concat(&[b.as_ref(), middle.as_ref(), a.as_ref()])?)
        };
        let aggregates: Vec<&AggregateCall> = aggregate_calls(&self.calls).collect();
        for (a, call) in aggregates.iter().enumerate() {
            let parts = &self.partitions;
            let columns = if bounded {
                call.frame_columns(live.iter().map(|&id| &parts[id as usize].aggregates[a]))?
            } else {
                call.frame_types()
                    .iter()
                    .map(|t| new_null_array(t, 0))
                    .collect()
            };
            for (i, c) in columns.into_iter().enumerate() {
                w.column(format!("frame_{a}_{i}"), segment(np, c)?);
            }
        }
        for (j, e) in self.lag_values.iter().enumerate() {
            let t = e.data_type(&self.in_schema)?;
            let v = lag_rows.iter().map(|r| r[j].clone()).collect();
            w.column(
                format!("lag_{j}"),
                segment(np + nf, scalars_to_array(v, &t)?)?,
            );
        }
        for (a, call) in aggregates.iter().enumerate() {
            let columns = if bounded {
                call.state_types()?
                    .iter()
                    .map(|t| new_null_array(t, 0))
                    .collect()
            } else {
                let parts = &mut self.partitions;
                let mut states = Vec::with_capacity(live.len());
                // (Each partition's state, in `live` order.)
                let slots = parts.slots_mut();
                let mut by_id: Vec<Option<&mut CallState>> =
                    slots.iter_mut().map(|p| p.aggregates.get_mut(a)).collect();
                for &id in &live {
                    states.push(by_id[id as usize].take().expect("a live partition"));
                }
                call.state_columns(states.into_iter())?
            };
            for (i, c) in columns.into_iter().enumerate() {
                w.column(format!("agg_{a}_{i}"), segment(np + nf + nl, c)?);
            }
        }
        w.finish()
    }

    /// Adds the partitions and rows of snapshots (see [`Self::snapshot_state`]).
    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        let bounded = self.bounded();
        for snap in snapshots {
            let n = snap.num_rows();
            if n == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "OVER aggregate");
            let kinds = reader.primitive::<Int8Type>("kind")?;
            let times = reader.primitive::<Int64Type>("time")?;
            let (_, key_rows) =
                reader.key_rows(self.key_converter.as_ref(), self.partition_by.len())?;
            let all: Vec<u32> = (0..n as u32).collect();
            let mut ids = Vec::new();
            let calls = &self.calls;
            self.partitions
                .ids_or_insert_with(key_rows.as_ref(), &all, &mut ids, |_| {
                    new_partition(calls, bounded)
                })?;
            let in_cols = self.in_schema.fields().len();
            let row_columns = (0..in_cols)
                .map(|i| reader.column(&format!("row_{i}")))
                .collect::<Result<Vec<_>>>()?;
            let waiting = self.pending.rows_of(&row_columns)?;
            let lags = reader.numbered("lag_");
            let aggregates: Vec<&AggregateCall> = aggregate_calls(&self.calls).collect();
            let frame_columns: Vec<Vec<ArrayRef>> = (0..aggregates.len())
                .map(|a| reader.numbered(&format!("frame_{a}_")))
                .collect();
            let agg_columns: Vec<Vec<ArrayRef>> = (0..aggregates.len())
                .map(|a| reader.numbered(&format!("agg_{a}_")))
                .collect();
            for r in 0..n {
                let id = ids[r];
                let time = times.is_valid(r).then(|| times.value(r));
                match kinds.value(r) {
                    PENDING => {
                        self.pending
                            .push(time.unwrap_or_default(), id as u32, waiting.row(r))
                    }
                    FRAME => {
                        let part = &mut self.partitions[id];
                        for (a, call) in aggregates.iter().enumerate() {
                            part.aggregates[a].restore_frame_row(call, &frame_columns[a], r)?;
                        }
                        part.frame.push_back(time.unwrap_or_default());
                    }
                    LAG => {
                        let values = lags
                            .iter()
                            .map(|c| ScalarValue::try_from_array(c, r))
                            .collect::<datafusion_common::Result<Vec<_>>>()?;
                        self.partitions[id].lags.push_back(values);
                    }
                    PARTITION => {
                        let part = &mut self.partitions[id];
                        part.last_time = time;
                        if !bounded {
                            for (a, call) in aggregates.iter().enumerate() {
                                part.aggregates[a].restore_state(call, &agg_columns[a], r)?;
                            }
                        }
                    }
                    other => {
                        return Err(SluiceError::Execution(format!(
                            "an OVER aggregate snapshot row of unknown kind {other}"
                        )))
                    }
                }
            }
        }
        Ok(())
    }
}
