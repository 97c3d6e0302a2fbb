//! Keyed session window aggregation (`SESSION` window TVF + `GROUP BY window_start,
//! window_end, keys`).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, TimestampMillisecondArray,
};
use datafusion_common::arrow::compute::interleave;
use datafusion_common::arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_common::arrow::row::RowConverter;
use datafusion_expr::EmitTo;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::GroupOutput;
use sluice_common::time::{window_fired, WATERMARK_MAX, WATERMARK_MIN};
use sluice_common::Result;

use crate::expr::evaluate_all;
use crate::message::StreamBatch;
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::operators::window_aggregate::AggregateCall;
use crate::operators::window_assign::event_times_ms;
use crate::state::keyed::KeyedValues;
use crate::state::time::EventTimeTimers;
use crate::state::{key_converter, AccumulatorFactory, SnapshotReader, SnapshotWriter};

/// A session of one key: `[start, end)` with `end` = last row's time + gap, and the
/// buffered rows it holds (`(batch id, row)`).
struct Session {
    start_ms: i64,
    end_ms: i64,
    rows: Vec<(u64, u32)>,
}

/// A buffered input batch: the columns a session needs when it fires.
struct BufferedBatch {
    keys: Vec<ArrayRef>,
    args: Vec<Vec<ArrayRef>>,
    filters: Vec<Option<BooleanArray>>,
    /// Rows still held by open sessions; the batch is dropped at zero.
    live_rows: usize,
}

/// Aggregates rows per key and session, and emits one row per session when it closes.
///
/// Semantics (Flink's session windows, `SessionWindowAssigner` + merging windows): each
/// row opens `[ts, ts + gap)`; windows of the same key that overlap **or touch** merge, so
/// a row that bridges two sessions joins them; `window_end` = last row's time + gap. A
/// session fires once, when the watermark reaches `window_end - 1 ms`. A row is late (dropped
/// and counted) when it joins no open session and its own window has already fired under
/// its watermark; a session that fired is never reopened.
///
/// Rows are buffered (columnar: the batches themselves, kept until their last row's session
/// fires) and aggregated when a session fires, with one vectorized accumulator pass over
/// all sessions that fire together.
pub struct SessionAggregateOperator {
    gap_ms: i64,
    /// For `TIMESTAMP_LTZ` attributes: the session time zone, in which the (instant)
    /// bounds of a session are shown as wall-clock `TIMESTAMP(3)`s.
    spec: sluice_common::plan::WindowSpec,
    time_column: usize,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    aggregates: Vec<AggregateCall>,
    factory: AccumulatorFactory,
    converter: Option<RowConverter>,
    group_outputs: Vec<GroupOutput>,
    schema: SchemaRef,
    batches: HashMap<u64, BufferedBatch>,
    next_batch_id: u64,
    /// The open sessions of each key: a key with no open session is forgotten and its id
    /// reused, so state stays bounded by the keys with open sessions.
    sessions: KeyedValues<Vec<Session>>,
    /// (end, key id) timers, earliest first. A timer is set when a session opens and
    /// re-armed at the key's earliest open session end when it finds that session grew.
    timers: EventTimeTimers,
    watermark_ms: i64,
    metrics: Arc<JobMetrics>,
}

impl SessionAggregateOperator {
    /// Sessions of `gap_ms` over the time attribute at `time_column`, per key.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: sluice_common::plan::WindowSpec,
        gap_ms: i64,
        time_column: usize,
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: &[DataType],
        aggregates: Vec<AggregateCall>,
        factory: AccumulatorFactory,
        group_outputs: Vec<GroupOutput>,
        schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let converter = key_converter(key_types)?;
        Ok(SessionAggregateOperator {
            gap_ms,
            spec,
            time_column,
            keys,
            aggregates,
            factory,
            converter,
            group_outputs,
            schema,
            batches: HashMap::new(),
            next_batch_id: 0,
            sessions: KeyedValues::new(),
            timers: EventTimeTimers::new(),
            watermark_ms: WATERMARK_MIN,
            metrics,
        })
    }

    fn key_id(&mut self, key: &[u8]) -> u32 {
        self.sessions.id_or_insert_with(key, Vec::new).0
    }

    /// Number of keys with state (open sessions), for tests.
    pub fn keys_in_state(&self) -> usize {
        self.sessions.len()
    }

    /// Adds one row to its key's sessions; returns false when the row is late.
    ///
    /// The first open session the row's window overlaps or touches absorbs it in place
    /// (O(1) for the usual row that extends its key's current session); any further
    /// session it bridges is merged into that one.
    fn add_row(&mut self, key: u32, ts_ms: i64, watermark_ms: i64, row: (u64, u32)) -> bool {
        // Sessions measure inactivity in elapsed time, so they run on instants even for
        // TIMESTAMP_LTZ attributes; only their bounds are shown as local wall-clock times.
        let start = ts_ms;
        let end = start.saturating_add(self.gap_ms);
        let sessions = &mut self.sessions[key as usize];
        let mut into: Option<usize> = None;
        let mut i = 0;
        while i < sessions.len() {
            let s = &sessions[i];
            // Fired sessions are final: a row never joins them.
            let open = !window_fired(s.end_ms, watermark_ms);
            if !(open && s.start_ms <= end && s.end_ms >= start) {
                i += 1;
                continue;
            }
            match into {
                None => {
                    let s = &mut sessions[i];
                    s.start_ms = s.start_ms.min(start);
                    s.end_ms = s.end_ms.max(end);
                    s.rows.push(row);
                    into = Some(i);
                    i += 1;
                }
                Some(f) => {
                    // f < i, so swap_remove(i) never moves the session at f.
                    let bridged = sessions.swap_remove(i);
                    let target = &mut sessions[f];
                    target.start_ms = target.start_ms.min(bridged.start_ms);
                    target.end_ms = target.end_ms.max(bridged.end_ms);
                    target.rows.extend(bridged.rows);
                }
            }
        }
        if into.is_some() {
            return true;
        }
        if window_fired(end, watermark_ms) {
            return false;
        }
        sessions.push(Session {
            start_ms: start,
            end_ms: end,
            rows: vec![row],
        });
        // One timer per new session; a timer that finds its session extended is re-armed.
        self.timers.set(end, key);
        true
    }

    fn fire(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        // Sessions to emit: (key, session).
        let mut fired: Vec<Session> = Vec::new();
        while let Some((_, key)) = self.timers.pop_due(|end| window_fired(end, watermark_ms)) {
            let sessions = &mut self.sessions[key as usize];
            let mut i = 0;
            while i < sessions.len() {
                if window_fired(sessions[i].end_ms, watermark_ms) {
                    fired.push(sessions.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            // Sessions that grew since their timer was set: re-arm at their new end.
            match sessions.iter().map(|s| s.end_ms).min() {
                Some(next_end) => self.timers.set(next_end, key),
                // No open session left: forget the key, once (a stale timer for an id
                // already freed finds no session either; stale timers for a reused id
                // find no fired session and only re-arm).
                None => {
                    self.sessions.forget(key, Vec::new());
                }
            }
        }
        if fired.is_empty() {
            return Ok(());
        }
        fired.sort_by_key(|s| (s.end_ms, s.start_ms));
        // Gather the rows of all fired sessions from the buffered batches.
        let mut slot_of: HashMap<u64, usize> = HashMap::new();
        let mut slots: Vec<u64> = Vec::new();
        let mut indices: Vec<(usize, usize)> = Vec::new();
        let mut groups: Vec<usize> = Vec::new();
        let mut first_rows: Vec<(usize, usize)> = Vec::new();
        for (g, s) in fired.iter().enumerate() {
            for (n, &(batch, row)) in s.rows.iter().enumerate() {
                let slot = *slot_of.entry(batch).or_insert_with(|| {
                    slots.push(batch);
                    slots.len() - 1
                });
                indices.push((slot, row as usize));
                groups.push(g);
                if n == 0 {
                    first_rows.push((slot, row as usize));
                }
            }
        }
        let buffered: Vec<&BufferedBatch> = slots.iter().map(|b| &self.batches[b]).collect();
        let gather = |pick: &dyn Fn(&BufferedBatch) -> &ArrayRef, at: &[(usize, usize)]| {
            let arrays: Vec<&dyn Array> = buffered.iter().map(|b| pick(b).as_ref()).collect();
            interleave(&arrays, at)
        };
        let mut accumulators = self.factory.create()?;
        for (a, acc) in accumulators.iter_mut().enumerate() {
            let values = (0..self.aggregates[a].args.len())
                .map(|k| gather(&|b: &BufferedBatch| &b.args[a][k], &indices))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let filter = if self.aggregates[a].filter.is_some() {
                let arrays: Vec<&dyn Array> = buffered
                    .iter()
                    .map(|b| b.filters[a].as_ref().expect("filter kept") as &dyn Array)
                    .collect();
                Some(interleave(&arrays, &indices)?.as_boolean().clone())
            } else {
                None
            };
            acc.update_batch(&values, &groups, filter.as_ref(), fired.len())?;
        }
        let values = accumulators
            .iter_mut()
            .map(|a| a.evaluate(EmitTo::All))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let key_columns = (0..self.keys.len())
            .map(|k| gather(&|b: &BufferedBatch| &b.keys[k], &first_rows))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let rows = fired.len();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for g in &self.group_outputs {
            columns.push(match g {
                GroupOutput::WindowStart => Arc::new(TimestampMillisecondArray::from(
                    fired
                        .iter()
                        .map(|s| self.spec.local_ms(s.start_ms))
                        .collect::<Vec<_>>(),
                )),
                GroupOutput::WindowEnd => Arc::new(TimestampMillisecondArray::from(
                    fired
                        .iter()
                        .map(|s| self.spec.local_ms(s.end_ms))
                        .collect::<Vec<_>>(),
                )),
                GroupOutput::WindowTime => super::window_aggregate::window_time_array(
                    self.schema.field(columns.len()),
                    fired.iter().map(|s| s.end_ms - 1).collect(),
                ),
                GroupOutput::Key(k) => match key_columns.get(*k) {
                    Some(a) => Arc::clone(a),
                    None => new_null_array(self.schema.field(columns.len()).data_type(), rows),
                },
            });
        }
        columns.extend(values);
        out.emit(StreamBatch::new(batch_with_schema(
            &self.schema,
            columns,
            rows,
        )?));
        // Release buffered batches whose rows have all been emitted.
        for s in &fired {
            for &(batch, _) in &s.rows {
                let done = match self.batches.get_mut(&batch) {
                    Some(b) => {
                        b.live_rows -= 1;
                        b.live_rows == 0
                    }
                    None => false,
                };
                if done {
                    self.batches.remove(&batch);
                }
            }
        }
        Ok(())
    }
}

impl Operator for SessionAggregateOperator {
    fn name(&self) -> &'static str {
        "SessionAggregate"
    }

    fn process_batch(&mut self, batch: StreamBatch, _out: &mut Collector) -> Result<()> {
        let data = &batch.data;
        let times = event_times_ms(data.column(self.time_column))?;
        let keys = evaluate_all(&self.keys, data)?;
        let key_rows = crate::state::encode_keys(self.converter.as_ref(), &keys)?;
        let batch_id = self.next_batch_id;
        self.next_batch_id += 1;
        let mut live = 0usize;
        let mut late = 0u64;
        for i in 0..data.num_rows() {
            if times.is_null(i) {
                late += 1;
                continue;
            }
            let key = match &key_rows {
                Some(r) => self.key_id(r.row(i).as_ref()),
                None => self.key_id(&[]),
            };
            let wm = batch.watermark_at(i).max(self.watermark_ms);
            if self.add_row(key, times.value(i), wm, (batch_id, i as u32)) {
                live += 1;
            } else {
                late += 1;
                // A late row of a key with no open session leaves no state behind.
                if self.sessions[key as usize].is_empty() {
                    self.sessions.forget(key, Vec::new());
                }
            }
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, late);
        if live > 0 {
            let (args, filters) = AggregateCall::evaluate_all(&self.aggregates, data)?;
            self.batches.insert(
                batch_id,
                BufferedBatch {
                    keys,
                    args,
                    filters,
                    live_rows: live,
                },
            );
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        if watermark_ms > self.watermark_ms {
            self.watermark_ms = watermark_ms;
            self.fire(watermark_ms, out)?;
        }
        out.watermark(watermark_ms);
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.watermark_ms = WATERMARK_MAX;
        self.fire(WATERMARK_MAX, out)
    }

    /// One row per buffered row of an open session, in the common snapshot layout
    /// ([`crate::state::snapshot`]): `key_group`, the key columns `key_<k>`,
    /// `session_start`, `session_end` (Int64, ms instants), the
    /// aggregate arguments `arg_<a>_<k>` and `FILTER` masks `filter_<a>` as evaluated when
    /// the row arrived. The sessions' timers are re-derived from their ends on restore.
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        use datafusion_common::arrow::array::Int64Array;
        let mut slot_of: HashMap<u64, usize> = HashMap::new();
        let mut slots: Vec<u64> = Vec::new();
        let mut indices: Vec<(usize, usize)> = Vec::new();
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        for sessions in self.sessions.slots() {
            for s in sessions {
                for &(batch, row) in &s.rows {
                    let slot = *slot_of.entry(batch).or_insert_with(|| {
                        slots.push(batch);
                        slots.len() - 1
                    });
                    indices.push((slot, row as usize));
                    starts.push(s.start_ms);
                    ends.push(s.end_ms);
                }
            }
        }
        if indices.is_empty() {
            return Ok(None);
        }
        let buffered: Vec<&BufferedBatch> = slots.iter().map(|b| &self.batches[b]).collect();
        let gather = |pick: &dyn Fn(&BufferedBatch) -> &dyn Array| {
            let arrays: Vec<&dyn Array> = buffered.iter().map(|b| pick(b)).collect();
            interleave(&arrays, &indices)
        };
        let keys = (0..self.keys.len())
            .map(|k| gather(&|b: &BufferedBatch| b.keys[k].as_ref()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut w = SnapshotWriter::new(keys, indices.len(), max_parallelism)?;
        w.column("session_start", Arc::new(Int64Array::from(starts)));
        w.column("session_end", Arc::new(Int64Array::from(ends)));
        for (a, call) in self.aggregates.iter().enumerate() {
            for k in 0..call.args.len() {
                w.column(
                    format!("arg_{a}_{k}"),
                    gather(&|b: &BufferedBatch| b.args[a][k].as_ref())?,
                );
            }
            if call.filter.is_some() {
                let f = gather(&|b: &BufferedBatch| {
                    b.filters[a].as_ref().expect("filter kept") as &dyn Array
                })?;
                w.column(format!("filter_{a}"), f);
            }
        }
        w.finish()
    }

    /// Rebuilds the open sessions of a snapshot (see [`Self::snapshot_state`]): the rows
    /// of one `(key, session_start, session_end)` form one session again, with its timer.
    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        use datafusion_common::arrow::datatypes::Int64Type;
        for snap in snapshots {
            let n = snap.num_rows();
            if n == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "session");
            let starts = reader.primitive::<Int64Type>("session_start")?;
            let ends = reader.primitive::<Int64Type>("session_end")?;
            let (keys, key_rows) = reader.key_rows(self.converter.as_ref(), self.keys.len())?;
            let mut args = Vec::new();
            let mut filters = Vec::new();
            for (a, call) in self.aggregates.iter().enumerate() {
                args.push(
                    (0..call.args.len())
                        .map(|k| reader.column(&format!("arg_{a}_{k}")))
                        .collect::<Result<Vec<_>>>()?,
                );
                filters.push(match call.filter {
                    Some(_) => Some(reader.boolean(&format!("filter_{a}"))?),
                    None => None,
                });
            }
            let batch_id = self.next_batch_id;
            self.next_batch_id += 1;
            for i in 0..n {
                let key = match &key_rows {
                    Some(r) => self.key_id(r.row(i).as_ref()),
                    None => self.key_id(&[]),
                };
                let (start, end) = (starts.value(i), ends.value(i));
                let sessions = &mut self.sessions[key as usize];
                match sessions
                    .iter_mut()
                    .find(|s| s.start_ms == start && s.end_ms == end)
                {
                    Some(s) => s.rows.push((batch_id, i as u32)),
                    None => {
                        sessions.push(Session {
                            start_ms: start,
                            end_ms: end,
                            rows: vec![(batch_id, i as u32)],
                        });
                        self.timers.set(end, key);
                    }
                }
            }
            self.batches.insert(
                batch_id,
                BufferedBatch {
                    keys,
                    args,
                    filters,
                    live_rows: n,
                },
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{Int32Array, Int64Array, TimestampMillisecondArray};
    use datafusion_common::arrow::datatypes::{Field, Schema, TimeUnit};
    use datafusion_physical_expr::expressions::col;
    use sluice_common::plan::{WindowKind, WindowSpec};

    fn operator() -> SessionAggregateOperator {
        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
        ]));
        let k = col("k", &input).unwrap();
        let count = crate::operators::test_support::count("k", &input);
        let output = crate::operators::test_support::k_n_schema();
        SessionAggregateOperator::new(
            WindowSpec {
                kind: WindowKind::Session { gap_ms: 10 },
                offset_ms: 0,
                time_zone: None,
                processing_time: false,
            },
            10,
            1,
            vec![Arc::clone(&k)],
            &[DataType::Int32],
            vec![AggregateCall {
                args: vec![k],
                filter: None,
            }],
            AccumulatorFactory::new(vec![count]),
            vec![GroupOutput::Key(0)],
            output,
            Arc::new(JobMetrics::default()),
        )
        .unwrap()
    }

    fn rows(keys: &[i32], ts: &[i64]) -> StreamBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
        ]));
        StreamBatch {
            data: RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(Int32Array::from(keys.to_vec())),
                    Arc::new(TimestampMillisecondArray::from(ts.to_vec())),
                ],
            )
            .unwrap(),
            row_watermarks: Some(Int64Array::from(vec![WATERMARK_MIN; keys.len()])),
            ops: None,
        }
    }

    /// State is bounded: a key whose sessions all fired is forgotten, and its id reused.
    #[test]
    fn keys_without_open_sessions_are_forgotten() {
        let mut op = operator();
        let mut out = Collector::default();
        op.process_batch(rows(&[1, 2, 3], &[0, 5, 100]), &mut out)
            .unwrap();
        assert_eq!(op.keys_in_state(), 3);
        // Sessions of keys 1 and 2 end at 10 and 15: fired by watermark 20.
        op.on_watermark(20, &mut out).unwrap();
        assert_eq!(op.keys_in_state(), 1);
        // New keys reuse the freed ids; key 1 comes back as a new session.
        op.process_batch(rows(&[4, 1], &[30, 31]), &mut out)
            .unwrap();
        assert_eq!(op.keys_in_state(), 3);
        assert_eq!(op.sessions.capacity(), 3, "ids reused, none added");
        op.on_end(&mut out).unwrap();
        assert_eq!(op.keys_in_state(), 0);
        assert_eq!(
            op.sessions.registry().free_ids().len(),
            3,
            "each id freed once"
        );
    }

    /// A late row of a new key is dropped without leaving the key in state.
    #[test]
    fn late_rows_of_new_keys_leave_no_state() {
        let mut op = operator();
        let mut out = Collector::default();
        op.on_watermark(1_000, &mut out).unwrap();
        op.process_batch(rows(&[7, 8], &[5, 1_500]), &mut out)
            .unwrap();
        assert_eq!(op.keys_in_state(), 1, "only key 8's session");
        op.on_end(&mut out).unwrap();
        assert_eq!(op.keys_in_state(), 0);
    }

    /// A key's extra timers pop after the key was forgotten: the id must not be freed
    /// twice (two keys would then share it).
    #[test]
    fn stale_timers_never_free_an_id_twice() {
        let mut op = operator();
        let mut out = Collector::default();
        // Key 1 has two sessions, [0, 10) and [100, 110): timers at 10 and 110. When the
        // first fires, the key's timer is re-armed at 110: two timers at 110.
        op.process_batch(rows(&[1, 1], &[0, 100]), &mut out)
            .unwrap();
        op.on_watermark(20, &mut out).unwrap();
        op.on_watermark(200, &mut out).unwrap(); // both pop; key 1 forgotten once
        assert_eq!(op.sessions.registry().free_ids(), &[0]);
        // Two new keys must get two different ids.
        op.process_batch(rows(&[2, 3], &[400, 401]), &mut out)
            .unwrap();
        assert_eq!(op.keys_in_state(), 2);
        assert_eq!(op.sessions.registry().capacity(), 2, "ids 0 and 1");
        assert!(op.sessions.registry().key(0).is_some() && op.sessions.registry().key(1).is_some());
    }
}
