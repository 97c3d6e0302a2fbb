//! OVER aggregation on event time (Flink SQL "Over Aggregation"; Flink's
//! `RowTimeRowsBoundedPrecedingFunction`, `RowTimeRangeBoundedPrecedingFunction` and their
//! unbounded forms).
//!
//! Ordered by a processing-time attribute (`PROCTIME()`), rows are taken in arrival order
//! and leave at once (Flink's `ProcTime*` functions). Ordered by event time, rows wait
//! (`PendingRows`: row-format bytes of the whole input row) until the watermark reaches
//! their time, then leave in (time, arrival) order, each with its calls
//! evaluated over its frame. The watermark is read per row (`StreamBatch::row_watermarks`):
//! before a row is taken in, everything the watermark in effect at its arrival made final
//! leaves, so results never depend on how the input was cut into batches.
//!
//! Per partition (`KeyedValues<Partition>`): the last time released (a row at or before it
//! is late: dropped and counted), one DataFusion `Accumulator` per aggregate (sliding ones
//! for bounded frames: rows leave a frame in the order they entered it), the frame's rows
//! (their aggregate arguments, to retract them) and the last LAG values. `RANGE` peers
//! (equal times) enter the frame together and get the same values.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, Int64Array, Int8Array, RecordBatch,
};
use datafusion_common::arrow::compute::concat;
use datafusion_common::arrow::datatypes::{DataType, Int64Type, Int8Type, SchemaRef};
use datafusion_common::arrow::row::{RowConverter, Rows};
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
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
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// One call of the window, lowered.
pub enum OverCallExec {
    /// An aggregate over the frame; its arguments are `args` of [`OverAggregateOperator`]
    /// at `first..first + count`.
    Aggregate {
        /// The aggregate function.
        function: Arc<AggregateFunctionExpr>,
        /// Index of its first argument.
        first: usize,
        /// Number of arguments.
        count: usize,
    },
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
    /// One accumulator per aggregate call.
    accumulators: Vec<Box<dyn Accumulator>>,
    /// Bounded frames: the frame's rows, oldest first (time, every aggregate argument).
    frame: VecDeque<(i64, Vec<ScalarValue>)>,
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
    /// (`batch` is the whole batch's rows in row format, `times` their times.)
    fn take_in(
        &mut self,
        batch: &Rows,
        times: &[i64],
        rows: std::ops::Range<usize>,
        ids: &[usize],
    ) -> Result<()> {
        let converted = batch;
        let mut late = 0;
        for i in rows {
            let t = times[i];
            let p = &self.partitions[ids[i]];
            if !self.processing_time && p.last_time.is_some_and(|last| t <= last) {
                late += 1;
                continue;
            }
            self.pending.push(t, ids[i] as u32, converted.row(i));
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
        // Each partition's rows, in order.
        let mut order: Vec<(u32, Vec<usize>)> = Vec::new();
        let mut slot: HashMap<u32, usize> = HashMap::new();
        for (i, (_, p)) in times.iter().enumerate() {
            let s = *slot.entry(*p).or_insert_with(|| {
                order.push((*p, Vec::new()));
                order.len() - 1
            });
            order[s].1.push(i);
        }
        let mut values: Vec<Vec<ScalarValue>> = vec![vec![ScalarValue::Null; n]; self.calls.len()];
        for (p, rows_of) in order {
            self.compute(
                p as usize,
                &rows_of,
                &times,
                &rows,
                &args,
                &lag_values,
                &mut values,
            )?;
        }
        let mut columns = rows.columns().to_vec();
        for (c, v) in values.into_iter().enumerate() {
            let field = self.schema.field(self.in_schema.fields().len() + c);
            columns.push(to_array(v, field.data_type())?);
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
        args: &[ArrayRef],
        lag_values: &[ArrayRef],
        values: &mut [Vec<ScalarValue>],
    ) -> Result<()> {
        let frame = self.frame;
        // Rows with equal times are peers under RANGE; on processing time each row is its
        // own moment (Flink's ProcTime* functions emit every row as it arrives, over the
        // rows before it), even when rows read together share a clock reading.
        let range = matches!(frame, OverFrame::Range { .. }) && !self.processing_time;
        let mut k = 0;
        while k < rows_of.len() {
            // The current row and, under RANGE, its peers (same time).
            let t = times[rows_of[k]].0;
            let mut end = k + 1;
            while range && end < rows_of.len() && times[rows_of[end]].0 == t {
                end += 1;
            }
            let part = &mut self.partitions[p];
            let group = &rows_of[k..end];
            if !range {
                debug_assert_eq!(group.len(), 1);
            }
            for &i in group {
                let row_args: Vec<ArrayRef> = args.iter().map(|a| a.slice(i, 1)).collect();
                let mut acc = 0;
                for call in &self.calls {
                    if let OverCallExec::Aggregate { first, count, .. } = call {
                        part.accumulators[acc].update_batch(&row_args[*first..first + count])?;
                        acc += 1;
                    }
                }
                if matches!(
                    frame,
                    OverFrame::Rows { preceding: Some(_) }
                        | OverFrame::Range {
                            preceding_ms: Some(_)
                        }
                ) {
                    let scalars = row_args
                        .iter()
                        .map(|a| ScalarValue::try_from_array(a, 0))
                        .collect::<datafusion_common::Result<Vec<_>>>()?;
                    part.frame.push_back((t, scalars));
                }
            }
            // Rows that left the frame.
            loop {
                let leaves = match (frame, part.frame.front()) {
                    (OverFrame::Rows { preceding: Some(n) }, Some(_)) => {
                        part.frame.len() as u64 > n + 1
                    }
                    (
                        OverFrame::Range {
                            preceding_ms: Some(ms),
                        },
                        Some((front, _)),
                    ) => *front < t.saturating_sub(ms),
                    _ => false,
                };
                if !leaves {
                    break;
                }
                let (_, old) = part.frame.pop_front().expect("checked");
                let mut acc = 0;
                for call in &self.calls {
                    if let OverCallExec::Aggregate { first, count, .. } = call {
                        let arrays = old[*first..first + count]
                            .iter()
                            .map(|v| v.to_array())
                            .collect::<datafusion_common::Result<Vec<_>>>()?;
                        part.accumulators[acc].retract_batch(&arrays)?;
                        acc += 1;
                    }
                }
            }
            let mut acc = 0;
            for (c, call) in self.calls.iter().enumerate() {
                match call {
                    OverCallExec::Aggregate { .. } => {
                        let v = part.accumulators[acc].evaluate()?;
                        for &i in group {
                            values[c][i] = v.clone();
                        }
                        acc += 1;
                    }
                    OverCallExec::Lag { .. } => {}
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
                            values[c][i] = if last >= back {
                                part.lags[last - back][*value].clone()
                            } else if let Some(d) = default {
                                let d = d.evaluate(&rows.slice(i, 1))?.into_array(1)?;
                                ScalarValue::try_from_array(&d, 0)?
                            } else {
                                ScalarValue::Null
                            };
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

/// A fresh partition: one accumulator per aggregate call (sliding ones for bounded frames).
fn new_partition(calls: &[OverCallExec], bounded: bool) -> Result<Partition> {
    let accumulators = calls
        .iter()
        .filter_map(|c| match c {
            OverCallExec::Aggregate { function, .. } => Some(if bounded {
                function.create_sliding_accumulator()
            } else {
                function.create_accumulator()
            }),
            OverCallExec::Lag { .. } => None,
        })
        .collect::<datafusion_common::Result<Vec<_>>>()?;
    Ok(Partition {
        accumulators,
        ..Partition::default()
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

/// Values of one type as an array (NULLs typed).
fn to_array(values: Vec<ScalarValue>, data_type: &DataType) -> Result<ArrayRef> {
    if values.is_empty() {
        return Ok(new_null_array(data_type, 0));
    }
    let typed_null = ScalarValue::try_from(data_type)?;
    let array = ScalarValue::iter_to_array(values.into_iter().map(|v| {
        if v.is_null() {
            typed_null.clone()
        } else {
            v
        }
    }))?;
    if array.data_type() != data_type {
        return Ok(datafusion_common::arrow::compute::cast(&array, data_type)?);
    }
    Ok(array)
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
    /// row), `arg_<j>` (a frame row's aggregate arguments), `lag_<j>` (a LAG row's values),
    /// `agg_<a>_<i>` (the partition's accumulator state, unbounded frames only). Rows of
    /// one partition keep their order.
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
        let mut frame_args: Vec<Vec<ScalarValue>> = Vec::new();
        let mut lag_rows: Vec<Vec<ScalarValue>> = Vec::new();
        for &id in &live {
            for (t, a) in &self.partitions[id as usize].frame {
                ids.push(id);
                kinds.push(FRAME);
                times.push(Some(*t));
                frame_args.push(a.clone());
            }
        }
        for &id in &live {
            for v in &self.partitions[id as usize].lags {
                ids.push(id);
                kinds.push(LAG);
                times.push(None);
                lag_rows.push(v.clone());
            }
        }
        let mut states: Vec<Vec<Vec<ScalarValue>>> = Vec::new();
        for &id in &live {
            ids.push(id);
            kinds.push(PARTITION);
            let part = &mut self.partitions[id as usize];
            times.push(part.last_time);
            if !bounded {
                // `state()` may consume an accumulator: rebuild it from what it gave.
                let mut per_acc = Vec::new();
                for acc in part.accumulators.iter_mut() {
                    let state = acc.state()?;
                    let arrays = state
                        .iter()
                        .map(|v| v.to_array())
                        .collect::<datafusion_common::Result<Vec<_>>>()?;
                    per_acc.push((state, arrays));
                }
                let fresh = new_partition(&self.calls, false)?;
                let part = &mut self.partitions[id as usize];
                part.accumulators = fresh.accumulators;
                let mut row = Vec::new();
                for (acc, (state, arrays)) in part.accumulators.iter_mut().zip(per_acc) {
                    acc.merge_batch(&arrays)?;
                    row.push(state);
                }
                states.push(row);
            }
        }
        let total = ids.len();
        let (np, nf, nl) = (pending.len(), frame_args.len(), lag_rows.len());
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
        let segment = |before: usize, values: Vec<ScalarValue>, data_type: &DataType| {
            let after = total - before - values.len();
            let middle = to_array(values, data_type)?;
            let b = new_null_array(data_type, before);
            let a = new_null_array(data_type, after);
            Ok::<ArrayRef, SluiceError>(concat(&[b.as_ref(), middle.as_ref(), a.as_ref()])?)
        };
        for (j, e) in self.args.iter().enumerate() {
            let t = e.data_type(&self.in_schema)?;
            let v = frame_args.iter().map(|a| a[j].clone()).collect();
            w.column(format!("arg_{j}"), segment(np, v, &t)?);
        }
        for (j, e) in self.lag_values.iter().enumerate() {
            let t = e.data_type(&self.in_schema)?;
            let v = lag_rows.iter().map(|a| a[j].clone()).collect();
            w.column(format!("lag_{j}"), segment(np + nf, v, &t)?);
        }
        if !bounded {
            let mut a = 0;
            for call in &self.calls {
                if let OverCallExec::Aggregate { function, .. } = call {
                    for (i, field) in function.state_fields()?.iter().enumerate() {
                        let v = states.iter().map(|s| s[a][i].clone()).collect();
                        w.column(
                            format!("agg_{a}_{i}"),
                            segment(np + nf + nl, v, field.data_type())?,
                        );
                    }
                    a += 1;
                }
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
            let args = reader.numbered("arg_");
            let lags = reader.numbered("lag_");
            let scalars = |cols: &[ArrayRef], r: usize| {
                cols.iter()
                    .map(|c| ScalarValue::try_from_array(c, r))
                    .collect::<datafusion_common::Result<Vec<_>>>()
            };
            let mut agg_columns = Vec::new();
            let mut a = 0;
            for call in &self.calls {
                if let OverCallExec::Aggregate { .. } = call {
                    agg_columns.push(reader.numbered(&format!("agg_{a}_")));
                    a += 1;
                }
            }
            for r in 0..n {
                let id = ids[r];
                let time = times.is_valid(r).then(|| times.value(r));
                match kinds.value(r) {
                    PENDING => {
                        self.pending
                            .push(time.unwrap_or_default(), id as u32, waiting.row(r))
                    }
                    FRAME => {
                        let values = scalars(&args, r)?;
                        let part = &mut self.partitions[id];
                        let mut acc = 0;
                        for call in &self.calls {
                            if let OverCallExec::Aggregate { first, count, .. } = call {
                                let arrays: Vec<ArrayRef> = args[*first..first + count]
                                    .iter()
                                    .map(|c| c.slice(r, 1))
                                    .collect();
                                part.accumulators[acc].update_batch(&arrays)?;
                                acc += 1;
                            }
                        }
                        part.frame.push_back((time.unwrap_or_default(), values));
                    }
                    LAG => {
                        let values = scalars(&lags, r)?;
                        self.partitions[id].lags.push_back(values);
                    }
                    PARTITION => {
                        let part = &mut self.partitions[id];
                        part.last_time = time;
                        if !bounded {
                            for (acc, cols) in part.accumulators.iter_mut().zip(&agg_columns) {
                                let state: Vec<ArrayRef> =
                                    cols.iter().map(|c| c.slice(r, 1)).collect();
                                acc.merge_batch(&state)?;
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
