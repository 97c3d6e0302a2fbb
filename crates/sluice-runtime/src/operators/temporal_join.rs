//! Event-time temporal joins (Flink SQL "Joins > Temporal Joins > Event Time Temporal
//! Join"; Flink's `TemporalRowTimeJoinOperator`): `probe JOIN versioned FOR SYSTEM_TIME AS
//! OF probe.t ON probe.k = versioned.pk`, `INNER` or `LEFT`. Each probe row (input 0,
//! append-only) is joined with the version of its key that was valid at its event time
//! `t`: the versioned input's (input 1) row of that key with the largest time `<= t`.
//!
//! Rules (`W` is the operator's watermark, the minimum over both inputs):
//! - The versioned input is a changelog of upserts by key: `+I` / `+U` at time `v` is the
//!   version valid from `v`, `-D` at `v` means no version from `v`, `-U` is ignored (the
//!   `+U` after it replaces the version; Flink feeds the operator without `-U`s). Two
//!   changes of a key at the same time: the later arrival wins.
//! - A probe row waits until `W >= t` (no version at or before `t` can come after that),
//!   then joins the version valid at `t` if the residual condition holds for the pair;
//!   a `LEFT` join emits it padded with NULLs otherwise. The output is append-only, in
//!   (time, arrival) order per release, and keeps the probe's event-time attribute.
//! - When `W` passes a key's version time, the versions before the last one at or before
//!   `W` are dropped: no probe that is not late can reach them.
//! - A probe that arrives late (`t <= W`) is answered at once when the answer is still
//!   known: its time is at or after the key's oldest held version, or the key never had
//!   a version dropped. Otherwise (its version may have been dropped) it is dropped and
//!   counted late (`late_rows_dropped`). Flink joins such a row with whatever is left,
//!   which can be the wrong version or none; Sluice never emits a guessed answer.
//! - A version older than a key's oldest held one, arriving after older versions were
//!   dropped, is dropped and counted late too (no probe that is not late can reach it).
//! - Rows whose key has a NULL part match nothing: a versioned row is not kept, a probe of
//!   an inner join is dropped, one of a left join is emitted padded when released. A probe
//!   with a NULL time joins nothing (padded at once for a left join).
//!
//! State: the waiting probe rows of all keys in one [`EventTimeBuffer`] (released in
//! (time, arrival) order, so a watermark's answers come out sorted without a per-key
//! timer per probe); per key ([`KeyedValues`]) the versions (row-format bytes, shared by
//! the answers that join them), whether versions were dropped and how many probes wait.
//! One `(time, key)` timer per key with versions to drop, at its second version's time
//! (when the watermark reaches it the first can go). Snapshot (common layout): one row per
//! probe and per version.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array, UInt8Array,
};
use datafusion_common::arrow::compute::{cast, filter, filter_record_batch, nullif, take};
use datafusion_common::arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit, UInt8Type};
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_common::arrow::row::{RowConverter, Rows};
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::JoinKind;
use sluice_common::{Result, SluiceError};

use crate::expr::{evaluate_all, evaluate_predicate};
use crate::message::{RowKind, StreamBatch};
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::state::keyed::KeyedValues;
use crate::state::row_codec::RowCodec;
use crate::state::time::{EventTimeBuffer, EventTimeTimers};
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// One input of a temporal join.
pub struct TemporalInput {
    /// Key expressions (the versioned input's primary key, and the probe expressions
    /// equated with it), of the same types pairwise.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The input's schema.
    pub schema: SchemaRef,
    /// Index of the event-time attribute in `schema`.
    pub time: usize,
}

/// A probe row waiting for the watermark: its key's id and its row-format bytes.
struct Probe {
    key: u32,
    row: Box<[u8]>,
}

/// A version's row-format bytes, shared by the answers that join it.
type VersionRow = Arc<[u8]>;

/// What a key holds.
#[derive(Default)]
struct KeyState {
    /// Versions by ascending time, one per time: `None` is a deletion.
    versions: Vec<(i64, Option<VersionRow>)>,
    /// Older versions were dropped: a probe before the first held one cannot be answered.
    trimmed: bool,
    /// Probes of this key waiting in the operator's buffer.
    waiting: u32,
    /// The time of the key's trim timer, if one is set (the second version's time).
    trim_at: Option<i64>,
}

impl KeyState {
    /// The version valid at `t`: `Some(None)` none (no version yet, or deleted),
    /// `Some(Some(row))` a row, `None` unknown (dropped).
    fn version_at(&self, t: i64) -> Option<Option<&VersionRow>> {
        let at = self.versions.partition_point(|(v, _)| *v <= t);
        if at == 0 {
            return (!self.trimmed).then_some(None);
        }
        Some(self.versions[at - 1].1.as_ref())
    }

    /// Keeps the last version at or before `watermark` and the later ones; returns how
    /// many went.
    fn trim(&mut self, watermark: i64) -> usize {
        let at = self.versions.partition_point(|(v, _)| *v <= watermark);
        if at > 1 {
            self.versions.drain(..at - 1);
            self.trimmed = true;
            return at - 1;
        }
        0
    }

    fn is_empty(&self) -> bool {
        self.waiting == 0 && self.versions.is_empty()
    }

    /// When the watermark reaching it lets an older version go: the second version's
    /// time.
    fn next_trim(&self) -> Option<i64> {
        self.versions.get(1).map(|(t, _)| *t)
    }
}

/// A probe answered: its row and time, and the version it joins (`None`: none).
struct Answer {
    /// The watermark before the release (the output row's row watermark).
    watermark: i64,
    probe: Box<[u8]>,
    version: Option<VersionRow>,
}

/// The event-time temporal join operator (see the module docs).
pub struct TemporalJoinOperator {
    left_outer: bool,
    inputs: [TemporalInput; 2],
    /// Whole rows of each input.
    rows: [RowCodec; 2],
    key_converter: Option<RowConverter>,
    key_types: Vec<DataType>,
    /// Over the probe's columns then the versioned input's.
    residual: Option<Arc<dyn PhysicalExpr>>,
    out_schema: SchemaRef,
    keys: KeyedValues<KeyState>,
    /// Waiting probes of all keys.
    probes: EventTimeBuffer<Probe>,
    /// Trim timers (see [`KeyState::trim_at`]).
    timers: EventTimeTimers,
    watermark_ms: i64,
    /// Probes and versions held (kept up to date, not counted per message).
    held: u64,
    /// Answers not yet emitted (emitted at the end of the batch or watermark).
    staged: Vec<Answer>,
    metrics: Arc<JobMetrics>,
}

impl TemporalJoinOperator {
    /// A temporal join of `probe` (input 0) with `versioned` (input 1); `kind` inner or
    /// left; `residual` over the probe's columns then the versioned input's; the output
    /// has those columns too.
    ///
    /// # Errors
    /// Another kind, key types that differ, or types the row format cannot hold.
    pub fn new(
        kind: JoinKind,
        probe: TemporalInput,
        versioned: TemporalInput,
        residual: Option<Arc<dyn PhysicalExpr>>,
        out_schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let left_outer = match kind {
            JoinKind::Inner => false,
            JoinKind::Left => true,
            other => {
                return Err(SluiceError::Internal(format!(
                    "a temporal join is INNER or LEFT, not {}",
                    other.sql()
                )))
            }
        };
        let types = |input: &TemporalInput| {
            input
                .keys
                .iter()
                .map(|k| k.data_type(&input.schema))
                .collect::<datafusion_common::Result<Vec<_>>>()
        };
        let key_types = types(&probe)?;
        if key_types != types(&versioned)? {
            return Err(SluiceError::Internal(format!(
                "temporal join keys of different types: {key_types:?} and {:?}",
                types(&versioned)?
            )));
        }
        Ok(TemporalJoinOperator {
            left_outer,
            rows: [
                RowCodec::new(&probe.schema)?,
                RowCodec::new(&versioned.schema)?,
            ],
            inputs: [probe, versioned],
            key_converter: key_converter(&key_types)?,
            key_types,
            residual,
            out_schema,
            keys: KeyedValues::new(),
            probes: EventTimeBuffer::new(),
            timers: EventTimeTimers::new(),
            watermark_ms: sluice_common::time::WATERMARK_MIN,
            held: 0,
            staged: Vec::new(),
            metrics,
        })
    }

    /// Keys (row format; `None` without keys), their NULL flags and the event times of a
    /// batch of input `s`.
    fn keys_and_times(
        &self,
        s: usize,
        data: &RecordBatch,
    ) -> Result<(Option<Rows>, Vec<bool>, Vec<Option<i64>>)> {
        let key_columns = evaluate_all(&self.inputs[s].keys, data)?;
        let rows = crate::state::encode_keys(self.key_converter.as_ref(), &key_columns)?;
        let nulls = (0..data.num_rows())
            .map(|i| key_columns.iter().any(|k| k.is_null(i)))
            .collect();
        let ms = cast(
            data.column(self.inputs[s].time),
            &DataType::Timestamp(TimeUnit::Millisecond, None),
        )?;
        let ms = cast(&ms, &DataType::Int64)?;
        let times = ms.as_primitive::<Int64Type>().iter().collect();
        Ok((rows, nulls, times))
    }

    fn key_of(rows: &Option<Rows>, i: usize) -> &[u8] {
        rows.as_ref().map(|r| r.row(i).data()).unwrap_or(&[])
    }

    /// Takes in a batch of input `s`, as if it advanced to each run's watermark before its
    /// rows. Only a late row (its time at or before the run's watermark) can see the
    /// difference (a probe answered at once, a version dropped), so the operator advances
    /// before a run only when it has one, and once at the end of the batch.
    fn take_in(&mut self, s: usize, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let data = &batch.data;
        let (keys, nulls, times) = self.keys_and_times(s, data)?;
        let rows = self.rows[s].encode(data.columns())?;
        let mut late = 0u64;
        let mut last = self.watermark_ms;
        for (w, run) in batch.watermark_runs() {
            last = last.max(w);
            let has_late = || run.clone().any(|i| times[i].is_some_and(|t| t <= w));
            if w > self.watermark_ms && has_late() {
                self.advance(w);
            }
            for i in run {
                let kind = batch.row_kind(i);
                if s == 0 {
                    if kind.is_retraction() {
                        return Err(SluiceError::Execution(
                            "a temporal join's probe input must be append-only".into(),
                        ));
                    }
                    late += self.probe(Self::key_of(&keys, i), nulls[i], times[i], rows.row(i));
                } else if kind != RowKind::UpdateBefore && !nulls[i] {
                    if let Some(t) = times[i] {
                        let row = (kind != RowKind::Delete).then(|| rows.row(i).into());
                        late += self.version(Self::key_of(&keys, i), t, row);
                    }
                }
            }
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, late);
        if last > self.watermark_ms {
            self.advance(last);
        }
        self.flush(out)
    }

    /// A probe row; returns 1 when it is dropped as late.
    fn probe(&mut self, key: &[u8], null_key: bool, time: Option<i64>, row: &[u8]) -> u64 {
        let watermark = self.watermark_ms;
        let answer = |version| Answer {
            watermark,
            probe: row.into(),
            version,
        };
        let Some(t) = time.filter(|_| !null_key || self.left_outer) else {
            // A NULL time (or an inner join's NULL key) joins nothing.
            if self.left_outer {
                self.staged.push(answer(None));
            }
            return 0;
        };
        if t > self.watermark_ms {
            let (id, _) = self.keys.id_or_insert_with(key, KeyState::default);
            self.held += 1;
            self.keys[id as usize].waiting += 1;
            self.probes.push(
                t,
                Probe {
                    key: id,
                    row: row.into(),
                },
            );
            return 0;
        }
        // Late: answered now when the answer is known.
        let found = match self.keys.registry().find(key) {
            None => Some(None),
            Some(_) if null_key => Some(None),
            Some(id) => self.keys[id as usize].version_at(t).map(|v| v.cloned()),
        };
        match found {
            Some(version) => {
                self.staged.push(answer(version));
                0
            }
            None => 1,
        }
    }

    /// A change of the versioned input at `t` (`None`: a deletion); returns 1 when it is
    /// dropped as late.
    fn version(&mut self, key: &[u8], t: i64, row: Option<VersionRow>) -> u64 {
        let (id, _) = self.keys.id_or_insert_with(key, KeyState::default);
        let state = &mut self.keys[id as usize];
        if state.trimmed && state.versions.first().is_some_and(|(v, _)| t < *v) {
            return 1;
        }
        let at = state.versions.partition_point(|(v, _)| *v < t);
        match state.versions.get_mut(at) {
            Some(slot) if slot.0 == t => slot.1 = row,
            _ => {
                state.versions.insert(at, (t, row));
                self.held += 1;
            }
        }
        Self::arm(&mut self.timers, id, state);
        0
    }

    /// Sets `id`'s trim timer at its second version's time unless one as early is set.
    fn arm(timers: &mut EventTimeTimers, id: u32, state: &mut KeyState) {
        if let Some(t) = state.next_trim() {
            if state.trim_at.is_none_or(|at| t < at) {
                state.trim_at = Some(t);
                timers.set(t, id);
            }
        }
    }

    /// The watermark reached `w`: answers the probes it made final (in time, then arrival
    /// order), then drops the versions no probe can reach any more of the keys whose trim
    /// timers are due.
    fn advance(&mut self, w: i64) {
        let before = self.watermark_ms;
        let mut ready = Vec::new();
        self.probes.release(w, &mut ready);
        self.staged.reserve(ready.len());
        for (t, p) in ready {
            let state = &mut self.keys[p.key as usize];
            state.waiting -= 1;
            let version = state.version_at(t).and_then(|v| v.cloned());
            if state.is_empty() {
                self.keys.forget(p.key, KeyState::default());
            }
            self.held -= 1;
            self.staged.push(Answer {
                watermark: before,
                probe: p.row,
                version,
            });
        }
        while let Some((t, id)) = self.timers.pop_due(|t| t <= w) {
            if self.keys.registry().key(id).is_none() {
                continue;
            }
            let state = &mut self.keys[id as usize];
            if state.trim_at != Some(t) {
                continue; // stale: an earlier timer replaced it
            }
            state.trim_at = None;
            self.held -= state.trim(w) as u64;
            Self::arm(&mut self.timers, id, state);
            if state.is_empty() {
                self.keys.forget(id, KeyState::default());
            }
        }
        self.watermark_ms = w;
    }

    /// Emits the staged answers as one batch: probe columns then version columns, the
    /// residual applied.
    fn flush(&mut self, out: &mut Collector) -> Result<()> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let staged = std::mem::take(&mut self.staged);
        let left = self.decode(0, staged.iter().map(|a| a.probe.as_ref()))?;
        let mut found: Vec<&[u8]> = Vec::new();
        let at: Vec<Option<u32>> = staged
            .iter()
            .map(|a| {
                a.version.as_deref().map(|r| {
                    found.push(r);
                    found.len() as u32 - 1
                })
            })
            .collect();
        let right = self.placed(1, &found, at)?;
        // Probes without a version have NULLs on the right, also where the output (an
        // inner join's) declares a column NOT NULL: they go before the output is built.
        let joined = batch_with_schema(&self.out_schema, [left, right].concat(), staged.len())?;
        // A pair joins when it has a version and the residual holds.
        let has_version = BooleanArray::from_iter(staged.iter().map(|a| Some(a.version.is_some())));
        let matched = match &self.residual {
            Some(residual) => {
                let mask = evaluate_predicate(residual, &joined, "temporal join condition")?;
                datafusion_common::arrow::compute::and(&mask, &has_version)?
            }
            None => has_version,
        };
        let watermarks = Int64Array::from_iter_values(staged.iter().map(|a| a.watermark));
        let (data, watermarks) = if self.left_outer {
            let unmatched = datafusion_common::arrow::compute::not(&matched)?;
            let width = self.inputs[0].schema.fields().len();
            let mut columns = joined.columns().to_vec();
            for c in columns.iter_mut().skip(width) {
                *c = nullif(c.as_ref(), &unmatched)?;
            }
            (
                batch_with_schema(&self.out_schema, columns, staged.len())?,
                watermarks,
            )
        } else {
            let w = filter(&watermarks, &matched)?;
            let kept = filter_record_batch(&joined, &matched)?;
            (
                RecordBatch::try_new(Arc::clone(&self.out_schema), kept.columns().to_vec())?,
                w.as_primitive::<Int64Type>().clone(),
            )
        };
        out.emit(StreamBatch {
            data,
            row_watermarks: Some(watermarks),
            ops: None,
        });
        Ok(())
    }

    /// Input `s`'s held rows decoded into columns.
    fn decode<'a>(&self, s: usize, rows: impl Iterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        self.rows[s].decode(rows)
    }

    /// Columns of input `s` with one row per entry of `at`: `rows[i]` where it is
    /// `Some(i)`, NULLs where it is `None`.
    fn placed(&self, s: usize, rows: &[&[u8]], at: Vec<Option<u32>>) -> Result<Vec<ArrayRef>> {
        if rows.is_empty() {
            return Ok(self.inputs[s]
                .schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), at.len()))
                .collect());
        }
        let at = UInt32Array::from(at);
        Ok(self
            .decode(s, rows.iter().copied())?
            .iter()
            .map(|c| take(c.as_ref(), &at, None))
            .collect::<std::result::Result<Vec<_>, _>>()?)
    }

    /// Rows held: waiting probes and versions.
    fn held(&self) -> u64 {
        self.held
    }
}

impl Operator for TemporalJoinOperator {
    fn name(&self) -> &'static str {
        "TemporalJoin"
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.held())
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        self.process_input(0, batch, out)
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: StreamBatch,
        out: &mut Collector,
    ) -> Result<()> {
        if input > 1 {
            return Err(SluiceError::Internal(format!(
                "a temporal join has no input {input}"
            )));
        }
        self.take_in(input, batch, out)
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        if watermark_ms > self.watermark_ms {
            self.advance(watermark_ms);
            self.flush(out)?;
        }
        out.watermark(watermark_ms);
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.advance(i64::MAX);
        self.flush(out)
    }

    /// One row per waiting probe and per version, in the common snapshot layout
    /// ([`crate::state::snapshot`]): `key_group`, the key `key_<k>`, `kind` (UInt8: 0 a
    /// probe, 1 a version, 2 a deletion), `time` (Int64 ms), `seq` (Int64: a probe's
    /// arrival number), `trimmed` (BOOLEAN: the key's older versions were dropped), then
    /// the probe's columns `left_<i>` and the version's `right_<i>` (NULL otherwise).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let (mut key_ids, mut kinds, mut times, mut seqs, mut trimmed) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut probes, mut versions): (Vec<&[u8]>, Vec<&[u8]>) = (Vec::new(), Vec::new());
        let (mut probe_at, mut version_at) = (Vec::new(), Vec::new());
        // Probes in release order: `seq` is the position in it.
        for (seq, (t, p)) in self.probes.ordered().into_iter().enumerate() {
            probe_at.push(Some(probes.len() as u32));
            version_at.push(None);
            probes.push(&p.row);
            key_ids.push(p.key);
            kinds.push(0u8);
            times.push(t);
            seqs.push(seq as i64);
            trimmed.push(self.keys[p.key as usize].trimmed);
        }
        for id in self.keys.live_ids() {
            let s = &self.keys[id as usize];
            for (t, v) in &s.versions {
                probe_at.push(None);
                version_at.push(v.as_ref().map(|r| {
                    versions.push(r);
                    versions.len() as u32 - 1
                }));
                key_ids.push(id);
                kinds.push(if v.is_some() { 1 } else { 2 });
                times.push(*t);
                seqs.push(0);
                trimmed.push(s.trimmed);
            }
        }
        if key_ids.is_empty() {
            return Ok(None);
        }
        let left = self.placed(0, &probes, probe_at)?;
        let right = self.placed(1, &versions, version_at)?;
        let keys = self
            .keys
            .key_columns(self.key_converter.as_ref(), &key_ids)?;
        let mut w = SnapshotWriter::new(keys, key_ids.len(), max_parallelism)?;
        w.column("kind", Arc::new(UInt8Array::from(kinds)));
        w.column("time", Arc::new(Int64Array::from(times)));
        w.column("seq", Arc::new(Int64Array::from(seqs)));
        w.column("trimmed", Arc::new(BooleanArray::from(trimmed)));
        for (prefix, columns) in [("left", left), ("right", right)] {
            for (i, c) in columns.into_iter().enumerate() {
                w.column(format!("{prefix}_{i}"), c);
            }
        }
        w.finish()
    }

    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        // Probes are buffered after all snapshots are read, in their release order.
        let mut probes: Vec<(i64, i64, Probe)> = Vec::new();
        for snap in snapshots {
            if snap.num_rows() == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "temporal join");
            let kinds = reader.primitive::<UInt8Type>("kind")?;
            let times = reader.primitive::<Int64Type>("time")?;
            let seqs = reader.primitive::<Int64Type>("seq")?;
            let trimmed = reader.boolean("trimmed")?;
            let (_, key_rows) =
                reader.key_rows(self.key_converter.as_ref(), self.key_types.len())?;
            let mut sides = Vec::new();
            for (s, prefix) in ["left_", "right_"].iter().enumerate() {
                let columns =
                    reader.numbered_exactly(prefix, self.inputs[s].schema.fields().len())?;
                sides.push(self.rows[s].encode(&columns).map_err(|e| {
                    SluiceError::Execution(format!(
                        "a temporal join state snapshot's rows do not match the join's inputs: \
                         {e}"
                    ))
                })?);
            }
            for r in 0..snap.num_rows() {
                let key = key_rows.as_ref().map(|k| k.row(r));
                let key = key.as_ref().map(|k| k.as_ref()).unwrap_or(&[]);
                let (id, _) = self.keys.id_or_insert_with(key, KeyState::default);
                let t = times.value(r);
                let state = &mut self.keys[id as usize];
                state.trimmed |= trimmed.value(r);
                self.held += 1;
                match kinds.value(r) {
                    0 => {
                        state.waiting += 1;
                        let row = sides[0].row(r).into();
                        probes.push((t, seqs.value(r), Probe { key: id, row }));
                    }
                    k => {
                        let row = (k == 1).then(|| sides[1].row(r).into());
                        let at = state.versions.partition_point(|(v, _)| *v < t);
                        state.versions.insert(at, (t, row));
                        Self::arm(&mut self.timers, id, state);
                    }
                }
            }
        }
        probes.sort_by_key(|(t, seq, _)| (*t, *seq));
        for (t, _, p) in probes {
            self.probes.push(t, p);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{Int32Array, Int8Array};
    use datafusion_common::arrow::datatypes::{Field, Schema};
    use datafusion_common::arrow::util::display::array_value_to_string;
    use datafusion_physical_expr::expressions::col;

    const MIN: i64 = i64::MIN;

    /// Probe: (k, t, p); versioned: (k, v, t). Times are Int64 ms.
    fn schemas() -> (SchemaRef, SchemaRef, SchemaRef) {
        let f = |n: &str, t: DataType| Field::new(n, t, true);
        let probe = Schema::new(vec![
            f("k", DataType::Int32),
            f("t", DataType::Int64),
            f("p", DataType::Int32),
        ]);
        let versioned = Schema::new(vec![
            f("k", DataType::Int32),
            f("v", DataType::Int32),
            f("t", DataType::Int64),
        ]);
        let out = Schema::new([probe.fields().to_vec(), versioned.fields().to_vec()].concat());
        (Arc::new(probe), Arc::new(versioned), Arc::new(out))
    }

    fn operator(kind: JoinKind, metrics: Arc<JobMetrics>) -> TemporalJoinOperator {
        let (probe, versioned, out) = schemas();
        let input = |schema: &SchemaRef, time| TemporalInput {
            keys: vec![col("k", schema).unwrap()],
            schema: Arc::clone(schema),
            time,
        };
        TemporalJoinOperator::new(
            kind,
            input(&probe, 1),
            input(&versioned, 2),
            None,
            out,
            metrics,
        )
        .unwrap()
    }

    /// Probe rows (k, t, p), each arriving under watermark `wm`.
    fn probes(rows: &[(Option<i32>, i64, i32)], wm: i64) -> StreamBatch {
        let (probe, _, _) = schemas();
        let data = RecordBatch::try_new(
            probe,
            vec![
                Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap();
        StreamBatch {
            data,
            row_watermarks: Some(Int64Array::from(vec![wm; rows.len()])),
            ops: None,
        }
    }

    /// Versioned rows (kind, k, v, t), each arriving under watermark `wm`.
    fn versions(rows: &[(RowKind, i32, i32, i64)], wm: i64) -> StreamBatch {
        let (_, versioned, _) = schemas();
        let data = RecordBatch::try_new(
            versioned,
            vec![
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.3))),
            ],
        )
        .unwrap();
        StreamBatch {
            data,
            row_watermarks: Some(Int64Array::from(vec![wm; rows.len()])),
            ops: Some(Int8Array::from_iter_values(rows.iter().map(|r| r.0 as i8))),
        }
    }

    /// Emitted rows as `k t p | k v t` (NULL as `_`), in emission order.
    fn rows(out: &mut Collector) -> Vec<String> {
        let mut all = Vec::new();
        for m in out.take() {
            if let crate::message::Message::Data(b) = m {
                assert!(b.ops.is_none(), "a temporal join is append-only");
                for i in 0..b.num_rows() {
                    let cell = |c: usize| {
                        let a = b.data.column(c);
                        if a.is_null(i) {
                            "_".to_string()
                        } else {
                            array_value_to_string(a, i).unwrap()
                        }
                    };
                    all.push(format!(
                        "{} {} {} | {} {} {}",
                        cell(0),
                        cell(1),
                        cell(2),
                        cell(3),
                        cell(4),
                        cell(5)
                    ));
                }
            }
        }
        all
    }

    fn push(op: &mut TemporalJoinOperator, input: usize, b: StreamBatch) -> Vec<String> {
        let mut out = Collector::default();
        op.process_input(input, b, &mut out).unwrap();
        rows(&mut out)
    }

    fn watermark(op: &mut TemporalJoinOperator, w: i64) -> Vec<String> {
        let mut out = Collector::default();
        op.on_watermark(w, &mut out).unwrap();
        rows(&mut out)
    }

    use RowKind::{Delete as D, Insert as I, UpdateAfter as UA, UpdateBefore as UB};

    #[test]
    fn each_probe_joins_the_version_valid_at_its_time() {
        for kind in [JoinKind::Inner, JoinKind::Left] {
            let mut op = operator(kind, Arc::default());
            assert!(push(
                &mut op,
                1,
                versions(&[(I, 1, 10, 100), (UA, 1, 20, 200)], MIN)
            )
            .is_empty());
            let probe_rows = [
                (Some(1), 150, 1),
                (Some(1), 200, 2),
                (Some(1), 250, 3),
                (Some(1), 50, 4),
                (Some(2), 150, 5),
                (None, 160, 6),
            ];
            // Nothing leaves before the watermark passes a probe's time.
            assert!(push(&mut op, 0, probes(&probe_rows, MIN)).is_empty());
            assert!(watermark(&mut op, 40).is_empty());
            let mut expected = vec![
                "1 50 4 | _ _ _",
                "1 150 1 | 1 10 100",
                "2 150 5 | _ _ _",
                "_ 160 6 | _ _ _",
                "1 200 2 | 1 20 200",
            ];
            if kind == JoinKind::Inner {
                expected.retain(|r| !r.ends_with("_ _ _"));
            }
            // In (time, arrival) order; a version is valid from its own time on.
            assert_eq!(watermark(&mut op, 200), expected, "{kind:?}");
            assert_eq!(watermark(&mut op, 250), vec!["1 250 3 | 1 20 200"]);
        }
    }

    #[test]
    fn deletions_updates_and_changes_at_one_time() {
        let mut op = operator(JoinKind::Left, Arc::default());
        push(
            &mut op,
            1,
            versions(
                &[
                    (I, 1, 10, 100),
                    // The later arrival at the same time wins; a before image is no version.
                    (UA, 1, 11, 100),
                    (UB, 1, 11, 100),
                    (D, 1, 11, 150),
                    (I, 1, 12, 300),
                ],
                MIN,
            ),
        );
        push(
            &mut op,
            0,
            probes(
                &[(Some(1), 120, 1), (Some(1), 160, 2), (Some(1), 300, 3)],
                MIN,
            ),
        );
        assert_eq!(
            watermark(&mut op, 400),
            vec![
                "1 120 1 | 1 11 100",
                "1 160 2 | _ _ _",
                "1 300 3 | 1 12 300"
            ]
        );
    }

    #[test]
    fn late_probes_are_answered_only_when_the_answer_is_known() {
        let metrics = Arc::new(JobMetrics::default());
        let mut op = operator(JoinKind::Left, Arc::clone(&metrics));
        push(
            &mut op,
            1,
            versions(&[(I, 1, 10, 100), (I, 1, 20, 200), (I, 2, 5, 500)], MIN),
        );
        // The watermark passes 200: key 1's version 100 is dropped, 200 kept.
        assert!(watermark(&mut op, 250).is_empty());
        let out = push(
            &mut op,
            0,
            probes(
                &[
                    (Some(1), 150, 1), // before the oldest held version, one was dropped: late
                    (Some(1), 220, 2), // late, but its version is held
                    (Some(2), 100, 3), // late; key 2 never dropped a version: none then
                    (Some(3), 100, 4), // late; key 3 never had a version
                ],
                250,
            ),
        );
        assert_eq!(
            out,
            vec!["1 220 2 | 1 20 200", "2 100 3 | _ _ _", "3 100 4 | _ _ _"]
        );
        assert_eq!(JobMetrics::get(&metrics.late_rows_dropped), 1);
        // A version older than the oldest held one of a key that dropped versions is late.
        push(&mut op, 1, versions(&[(I, 1, 15, 150)], 250));
        assert_eq!(JobMetrics::get(&metrics.late_rows_dropped), 2);
    }

    #[test]
    fn state_keeps_only_versions_a_probe_can_reach() {
        let mut op = operator(JoinKind::Inner, Arc::default());
        for i in 0..1000 {
            push(&mut op, 1, versions(&[(I, i % 3, i, i as i64 * 10)], MIN));
            push(
                &mut op,
                0,
                probes(&[(Some(i % 3), i as i64 * 10 + 5, i)], MIN),
            );
            let out = watermark(&mut op, i as i64 * 10 + 5);
            assert_eq!(
                out,
                vec![format!(
                    "{} {} {i} | {} {i} {}",
                    i % 3,
                    i * 10 + 5,
                    i % 3,
                    i * 10
                )]
            );
            // One version per key, no waiting probe.
            assert!(op.held() <= 3, "{} rows held after {i}", op.held());
        }
    }

    #[test]
    fn a_snapshot_restores_probes_versions_and_lateness() {
        let mut op = operator(JoinKind::Left, Arc::default());
        push(
            &mut op,
            1,
            versions(&[(I, 1, 10, 100), (I, 1, 20, 200), (I, 2, 7, 50)], MIN),
        );
        push(
            &mut op,
            0,
            probes(&[(Some(1), 250, 1), (Some(2), 300, 2)], MIN),
        );
        watermark(&mut op, 210);
        let snap = op.snapshot_state(128).unwrap().unwrap();
        let mut restored = operator(JoinKind::Left, Arc::default());
        restored.restore_state(&[snap]).unwrap();
        watermark(&mut restored, 210);
        for o in [&mut op, &mut restored] {
            // Key 1 dropped version 100: a late probe before 200 is unknown, so dropped.
            let out = push(o, 0, probes(&[(Some(1), 150, 3), (Some(1), 205, 4)], 210));
            assert_eq!(out, vec!["1 205 4 | 1 20 200"]);
            let mut end = Collector::default();
            o.on_end(&mut end).unwrap();
            assert_eq!(
                rows(&mut end),
                vec!["1 250 1 | 1 20 200", "2 300 2 | 2 7 50"]
            );
        }
    }
}
