//! Updating aggregation: `GROUP BY` without windows, and global aggregates.
//!
//! The result changes as rows arrive, so the output is a changelog (`+I`, `-U`, `+U`,
//! `-D`, Flink's RowKind): per batch (Flink's mini-batch), every group whose result changed
//! emits `+I new` (first time), `-U old` + `+U new` (changed), or `-D old` (its last row was
//! retracted); a group whose result is unchanged emits nothing (Flink's `GroupAggFunction`
//! compares the previous and the new result the same way). Input may itself be a
//! changelog (an aggregate of an aggregate, an aggregate over a join): rows marked
//! `-U`/`-D` are retracted from their group's state.
//!
//! State is column-wise ([`crate::state::group_state`]): per aggregate one
//! [`GroupsState`] over every group, updated a batch at a time; per group id its net row
//! count, last access time (for the TTL) and whether a result row of it is out. The row
//! that is out always holds the group's current values (every change is emitted at the
//! end of the batch that made it), so the old values of a batch's groups are read from
//! the states before the batch is applied and compared, in Arrow's row format, with the
//! values after it. Output rows are built column-wise: keys decoded from the key
//! registry, values interleaved from the before and after arrays.
//!
//! A global aggregate (no `GROUP BY`) always has exactly one row, as the SQL standard says
//! (Flink's streaming mode emits none for empty input; we follow the standard): `COUNT` 0
//! and the other aggregates NULL over empty or fully retracted input. Its row is emitted at
//! the first change, or at the end of the input if there was none.

use std::sync::Arc;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::array::{new_null_array, Array, ArrayRef, Int8Array, UInt32Array};
use datafusion_common::arrow::compute::{interleave, take};
use datafusion_common::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion_common::arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::Result;

use crate::clock::ProcessingClock;
use crate::expr::evaluate_all;
use crate::message::{RowKind, StreamBatch};
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::operators::window_aggregate::AggregateCall;
use crate::state::group_state::aggregate_states::{AggregateInput, AggregateStates};
use crate::state::group_state::BatchRows;
use crate::state::keyed::KeyRegistry;
use crate::state::ttl::IdleKeys;
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// See the module docs. Output schema: the keys, then one column per aggregate; rows carry
/// their RowKind in `StreamBatch::ops`.
pub struct GroupAggregateOperator {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    calls: Vec<AggregateCall>,
    /// The aggregates' column-wise states, indexed by group id.
    states: AggregateStates,
    converter: Option<RowConverter>,
    /// Encodes a group's aggregate values (the output columns after the keys) for
    /// comparing them before and after a batch; `None` without aggregates (`SELECT
    /// DISTINCT`).
    values_converter: Option<RowConverter>,
    /// Group keys ↔ group ids; an expired group's key is forgotten and its id reused.
    registry: KeyRegistry,
    /// Per group id: net row count (inserts minus retractions).
    rows: Vec<i64>,
    /// Per group id: whether a result row is out (emitted and not deleted); it holds the
    /// group's current values.
    emitted: Vec<bool>,
    /// Per group id: the last batch that touched it (`batch_number`), to list each
    /// touched group once.
    touched_in: Vec<u64>,
    batch_number: u64,
    schema: SchemaRef,
    /// Scratch: every row index of a batch, and the rows' group ids.
    all_rows: Vec<u32>,
    group_of: Vec<usize>,
    /// Idle state retention per group id (`'table.exec.state.ttl'`).
    idle: IdleKeys,
}

impl GroupAggregateOperator {
    /// Forgets groups that received no row for `ttl` of processing time (Flink's
    /// `table.exec.state.ttl`): their state is cleared without emitting anything, so a
    /// later row of the key starts from scratch and emits `+I` again. `None`: keep every
    /// group forever. Idle time is measured on `clock`.
    pub fn with_state_ttl(
        mut self,
        ttl: Option<std::time::Duration>,
        clock: ProcessingClock,
    ) -> Self {
        self.idle = IdleKeys::new(ttl, clock);
        self
    }

    fn now_ms(&self) -> i64 {
        self.idle.now_ms()
    }

    /// Forgets the groups idle for longer than the TTL (looked for at most twice per
    /// TTL); their ids are reused by new keys.
    fn expire(&mut self) {
        if !self.idle.enabled() || self.keys.is_empty() {
            return; // the global aggregate always has its row
        }
        for id in self.idle.expired(self.registry.live_ids()) {
            self.forget(id);
        }
    }

    /// Clears group `id`'s state and frees its id.
    fn forget(&mut self, id: u32) {
        if !self.registry.forget(id) {
            return;
        }
        let g = id as usize;
        self.states.reset(g);
        self.rows[g] = 0;
        self.emitted[g] = false;
    }

    /// Groups with state (for tests).
    pub fn groups_in_state(&self) -> usize {
        self.registry.len()
    }

    /// Aggregates `aggregates` (with their argument expressions in `calls`, over rows of
    /// `input`) per key.
    ///
    /// # Errors
    /// Key or result types the row format cannot encode; arguments whose types cannot be
    /// read from `input`.
    pub fn new(
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: &[DataType],
        calls: Vec<AggregateCall>,
        aggregates: Vec<Arc<AggregateFunctionExpr>>,
        retracting: bool,
        input: &Schema,
        schema: SchemaRef,
    ) -> Result<Self> {
        let converter = key_converter(key_types)?;
        let inputs = calls
            .iter()
            .zip(&aggregates)
            .map(|(call, aggregate)| {
                let arg_types = call
                    .args
                    .iter()
                    .map(|a| a.data_type(input))
                    .collect::<datafusion_common::Result<Vec<_>>>()?;
                Ok(AggregateInput {
                    aggregate,
                    args: &call.args,
                    arg_types,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let states = AggregateStates::new(&inputs, retracting)?;
        let values_converter = if aggregates.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                aggregates
                    .iter()
                    .map(|a| SortField::new(a.field().data_type().clone()))
                    .collect(),
            )?)
        };
        Ok(GroupAggregateOperator {
            converter,
            values_converter,
            keys,
            calls,
            states,
            registry: KeyRegistry::new(),
            rows: Vec::new(),
            emitted: Vec::new(),
            touched_in: Vec::new(),
            batch_number: 0,
            schema,
            all_rows: Vec::new(),
            group_of: Vec::new(),
            idle: IdleKeys::new(None, ProcessingClock::system()),
        })
    }

    /// The group ids of `key_rows` (all `n` rows; `None` without keys) into
    /// `self.group_of`, registering new keys.
    fn assign_groups(&mut self, key_rows: Option<&datafusion_common::arrow::row::Rows>, n: usize) {
        if self.all_rows.len() < n {
            self.all_rows = (0..n as u32).collect();
        }
        self.registry
            .ids_of(key_rows, &self.all_rows[..n], &mut self.group_of);
        let capacity = self.registry.capacity();
        if self.rows.len() < capacity {
            self.rows.resize(capacity, 0);
            self.emitted.resize(capacity, false);
            self.touched_in.resize(capacity, 0);
        }
    }

    /// The aggregate values of `groups` that have a result (one array per aggregate).
    fn current_values(&mut self, groups: &[u32]) -> Result<Vec<ArrayRef>> {
        self.states.evaluate(groups)
    }

    /// The groups of the batch's rows (`self.group_of`), each once, ascending; marks them
    /// accessed at `now`.
    fn touched_groups(&mut self, now: i64) -> Vec<u32> {
        self.batch_number += 1;
        let mut touched: Vec<u32> = Vec::new();
        for &g in &self.group_of {
            if self.touched_in[g] != self.batch_number {
                self.touched_in[g] = self.batch_number;
                self.idle.touch(g, now);
                touched.push(g as u32);
            }
        }
        touched.sort_unstable();
        touched
    }

    /// The groups of `groups` with a row out, and their values (one array per
    /// aggregate): read before a batch changes the state, the rows that are out.
    fn values_out(&mut self, groups: &[u32]) -> Result<(Vec<u32>, Vec<ArrayRef>)> {
        let out: Vec<u32> = groups
            .iter()
            .copied()
            .filter(|&g| self.emitted[g as usize])
            .collect();
        let values = self.current_values(&out)?;
        Ok((out, values))
    }

    /// Emits the change of each touched group (ascending ids; the global group too when
    /// asked): `before` are the groups among them with a row out and that row's values.
    fn emit_changes(
        &mut self,
        touched: &[u32],
        (before_groups, before): (Vec<u32>, Vec<ArrayRef>),
        out: &mut Collector,
    ) -> Result<()> {
        let global = self.keys.is_empty();
        // Groups with a result now, and its values.
        let live: Vec<u32> = touched
            .iter()
            .copied()
            .filter(|&g| global || self.rows[g as usize] > 0)
            .collect();
        let after = self.current_values(&live)?;
        let (before_rows, after_rows) = match &self.values_converter {
            Some(c) => (
                Some(c.convert_columns(&before)?),
                Some(c.convert_columns(&after)?),
            ),
            None => (None, None),
        };
        // Each output row: its group, kind and where its values come from (0: `after` at
        // an index of `live`, 1: `before` at an index of `before_groups`).
        let mut out_groups: Vec<u32> = Vec::new();
        let mut ops: Vec<i8> = Vec::new();
        let mut picks: Vec<(usize, usize)> = Vec::new();
        let (mut next_before, mut next_live) = (0, 0);
        let position = |list: &[u32], next: &mut usize, g: u32| match list.get(*next) {
            Some(&x) if x == g => {
                *next += 1;
                Some(*next - 1)
            }
            _ => None,
        };
        for &g in touched {
            let old = position(&before_groups, &mut next_before, g);
            let new = position(&live, &mut next_live, g);
            match (old, new) {
                (None, Some(j)) => {
                    out_groups.push(g);
                    ops.push(RowKind::Insert as i8);
                    picks.push((0, j));
                }
                (Some(i), Some(j)) => {
                    let same = match (&before_rows, &after_rows) {
                        (Some(b), Some(a)) => b.row(i) == a.row(j),
                        _ => true,
                    };
                    if !same {
                        out_groups.extend([g, g]);
                        ops.extend([RowKind::UpdateBefore as i8, RowKind::UpdateAfter as i8]);
                        picks.extend([(1, i), (0, j)]);
                    }
                }
                (Some(i), None) => {
                    out_groups.push(g);
                    ops.push(RowKind::Delete as i8);
                    picks.push((1, i));
                }
                (None, None) => {}
            }
            self.emitted[g as usize] = new.is_some();
        }
        if out_groups.is_empty() {
            return Ok(());
        }
        // The key columns are decoded once per group (an update's two rows share them).
        let mut groups: Vec<u32> = Vec::with_capacity(out_groups.len());
        let mut at: Vec<u32> = Vec::with_capacity(out_groups.len());
        for &g in &out_groups {
            if groups.last() != Some(&g) {
                groups.push(g);
            }
            at.push(groups.len() as u32 - 1);
        }
        let mut columns = self
            .registry
            .key_columns(self.converter.as_ref(), &groups)?;
        if groups.len() < out_groups.len() {
            let at = UInt32Array::from(at);
            columns = columns
                .iter()
                .map(|c| take(c.as_ref(), &at, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
        }
        for (new, old) in after.iter().zip(&before) {
            columns.push(interleave(&[new.as_ref(), old.as_ref()], &picks)?);
        }
        let data = batch_with_schema(&self.schema, columns, out_groups.len())?;
        out.emit(StreamBatch {
            data,
            row_watermarks: None,
            ops: Some(Int8Array::from(ops)),
        });
        Ok(())
    }
}

impl Operator for GroupAggregateOperator {
    fn name(&self) -> &'static str {
        "GroupAggregate"
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.registry.len() as u64)
    }

    /// With a TTL and groups in state: the next sweep for idle groups (so they are
    /// forgotten even when no row arrives).
    fn next_processing_timer(&self) -> Option<i64> {
        self.idle
            .next_timer(!self.keys.is_empty() && !self.registry.is_empty())
    }

    fn on_processing_time(&mut self, _now_ms: i64, _out: &mut Collector) -> Result<()> {
        self.expire();
        Ok(())
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        self.expire();
        let now = self.now_ms();
        let data = &batch.data;
        let n = data.num_rows();
        if n == 0 {
            return Ok(());
        }
        let key_columns = evaluate_all(&self.keys, data)?;
        let key_rows = crate::state::encode_keys(self.converter.as_ref(), &key_columns)?;
        self.assign_groups(key_rows.as_ref(), n);
        let touched = self.touched_groups(now);
        let before = self.values_out(&touched)?;
        let retract: Option<Vec<bool>> = batch.ops.as_ref().map(|ops| {
            ops.values()
                .iter()
                .map(|&c| RowKind::from_code(c).is_retraction())
                .collect()
        });
        let (args, filters) = AggregateCall::evaluate_all(&self.calls, data)?;
        let rows = BatchRows {
            groups: &self.group_of,
            retract: retract.as_deref(),
            total_groups: self.registry.capacity(),
        };
        self.states.update(&args, &filters, rows)?;
        for (row, &g) in self.group_of.iter().enumerate() {
            self.rows[g] += if rows.is_retraction(row) { -1 } else { 1 };
        }
        self.emit_changes(&touched, before, out)
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        // A global aggregate has its one row even when no row ever arrived.
        if self.keys.is_empty() && self.registry.is_empty() {
            self.assign_groups(None, 1);
            let id = self.group_of[0] as u32;
            let nothing_out = (Vec::new(), self.current_values(&[])?);
            self.emit_changes(&[id], nothing_out, out)?;
        }
        Ok(())
    }

    /// One row per group, in the common snapshot layout ([`crate::state::snapshot`]):
    /// `key_group`, the key columns `key_<k>`, `rows` (Int64: the group's net row
    /// count), `idle_ms` (Int64: processing time since the group's last row, for
    /// `'table.exec.state.ttl'`), `emitted` (Boolean: a result row was emitted and not
    /// deleted), each aggregate's state columns `agg_<a>_<i>` ([`GroupsState::state`]),
    /// and the last emitted aggregate values `out_<a>` (NULL where none is out).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        use datafusion_common::arrow::array::{BooleanArray, Int64Array};
        let ids: Vec<u32> = self.registry.live_ids().collect();
        if ids.is_empty() {
            return Ok(None);
        }
        let key_columns = self.registry.key_columns(self.converter.as_ref(), &ids)?;
        let mut w = SnapshotWriter::new(key_columns, ids.len(), max_parallelism)?;
        w.column(
            "rows",
            Arc::new(Int64Array::from_iter_values(
                ids.iter().map(|&g| self.rows[g as usize]),
            )),
        );
        // Idle time, so a restore keeps each group's TTL clock (Flink keeps state TTL
        // timestamps in its snapshots too).
        let now = self.now_ms();
        w.column(
            "idle_ms",
            Arc::new(Int64Array::from_iter_values(
                ids.iter().map(|&g| self.idle.idle_ms(g as usize, now)),
            )),
        );
        w.column(
            "emitted",
            Arc::new(BooleanArray::from_iter(
                ids.iter().map(|&g| Some(self.emitted[g as usize])),
            )),
        );
        for (a, columns) in self.states.state(&ids)?.into_iter().enumerate() {
            for (i, column) in columns.into_iter().enumerate() {
                w.column(format!("agg_{a}_{i}"), column);
            }
        }
        // The values of the rows out (the current ones), NULL for groups without one.
        let (_, emitted) = self.values_out(&ids)?;
        let mut next = 0;
        let picks: Vec<(usize, usize)> = ids
            .iter()
            .map(|&g| {
                if self.emitted[g as usize] {
                    next += 1;
                    (0, next - 1)
                } else {
                    (1, 0)
                }
            })
            .collect();
        for (a, values) in emitted.iter().enumerate() {
            let null = new_null_array(values.data_type(), 1);
            w.column(
                format!("out_{a}"),
                interleave(&[values.as_ref(), null.as_ref()], &picks)?,
            );
        }
        w.finish()
    }

    /// Adds the groups of snapshots (see [`Self::snapshot_state`]).
    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        use datafusion_common::arrow::datatypes::Int64Type;
        for snap in snapshots {
            let n = snap.num_rows();
            if n == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "aggregate");
            let rows = reader.primitive::<Int64Type>("rows")?;
            let emitted = reader.boolean("emitted")?;
            let idle = reader.primitive::<Int64Type>("idle_ms")?;
            // (Snapshots of Sluice 0.1 had no idle time: their plan fingerprints differ.)
            let now = self.now_ms();
            let (_, key_rows) = reader.key_rows(self.converter.as_ref(), self.keys.len())?;
            self.assign_groups(key_rows.as_ref(), n);
            let groups = std::mem::take(&mut self.group_of);
            let total = self.registry.capacity();
            for a in 0..self.states.len() {
                let columns = reader.numbered(&format!("agg_{a}_"));
                self.states.merge(a, &columns, &groups, total)?;
            }
            for (row, &g) in groups.iter().enumerate() {
                self.rows[g] = rows.value(row);
                self.idle.restore(g, now, idle.value(row));
                // The row out holds the restored values (`out_<a>` equals them).
                self.emitted[g] = emitted.value(row);
            }
            self.group_of = groups;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{AsArray, Int32Array};
    use datafusion_common::arrow::datatypes::{Field, Schema};
    use datafusion_physical_expr::expressions::col;

    /// `SELECT k, COUNT(k) FROM t GROUP BY k` with a state TTL of 100 ms of `clock`'s
    /// processing time (a manual clock: the tests set the time).
    fn operator(clock: &ProcessingClock) -> GroupAggregateOperator {
        let input = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, false)]));
        let k = col("k", &input).unwrap();
        let count = crate::operators::test_support::count("k", &input);
        let output = crate::operators::test_support::k_n_schema();
        GroupAggregateOperator::new(
            vec![Arc::clone(&k)],
            &[DataType::Int32],
            vec![AggregateCall {
                args: vec![k],
                filter: None,
            }],
            vec![count],
            false,
            &input,
            output,
        )
        .unwrap()
        .with_state_ttl(Some(std::time::Duration::from_millis(100)), clock.clone())
    }

    fn rows(keys: &[i32]) -> StreamBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, false)]));
        StreamBatch::new(
            RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(keys.to_vec()))]).unwrap(),
        )
    }

    /// The (op, k, n) rows emitted.
    fn changes(out: &mut Collector) -> Vec<(i8, i32, i64)> {
        let mut all = Vec::new();
        for m in out.take() {
            if let crate::message::Message::Data(b) = m {
                let ks = b
                    .data
                    .column(0)
                    .as_primitive::<datafusion_common::arrow::datatypes::Int32Type>();
                let ns = b
                    .data
                    .column(1)
                    .as_primitive::<datafusion_common::arrow::datatypes::Int64Type>();
                for r in 0..b.data.num_rows() {
                    all.push((b.row_kind(r) as i8, ks.value(r), ns.value(r)));
                }
            }
        }
        all
    }

    /// `'table.exec.state.ttl'`: idle groups are forgotten (nothing emitted), their ids
    /// reused by new keys (no renumbering of the others), and a forgotten key that comes
    /// back starts from scratch with a new `+I`.
    #[test]
    fn expired_groups_are_forgotten_and_ids_reused() {
        let clock = ProcessingClock::manual(0);
        let mut op = operator(&clock);
        let mut out = Collector::default();
        op.process_batch(rows(&[1, 2, 1, 3]), &mut out).unwrap();
        let insert = RowKind::Insert as i8;
        let mut first = changes(&mut out);
        first.sort();
        assert_eq!(first, vec![(insert, 1, 2), (insert, 2, 1), (insert, 3, 1)]);
        // Within the TTL nothing is forgotten.
        clock.set_ms(100);
        op.process_batch(rows(&[]), &mut out).unwrap();
        assert_eq!(op.groups_in_state(), 3);
        clock.set_ms(300);
        // The sweep before this batch forgets keys 1-3; key 4 takes a freed id.
        op.process_batch(rows(&[4]), &mut out).unwrap();
        assert_eq!(changes(&mut out), vec![(insert, 4, 1)]);
        assert_eq!(op.groups_in_state(), 1);
        assert_eq!(op.registry.capacity(), 3, "ids reused, none added");
        // Key 1 again: a fresh count, emitted as an insert (Flink does the same).
        op.process_batch(rows(&[1]), &mut out).unwrap();
        assert_eq!(changes(&mut out), vec![(insert, 1, 1)]);
        // A snapshot holds only the groups in state.
        let snap = op.snapshot_state(128).unwrap().unwrap();
        assert_eq!(snap.num_rows(), 2);
    }

    /// A restored group keeps the idle time it had at the snapshot: restored after it
    /// idled longer than the TTL, it expires at the first sweep, not a TTL later.
    #[test]
    fn restored_groups_keep_their_idle_time() {
        let clock = ProcessingClock::manual(0);
        let mut op = operator(&clock);
        let mut out = Collector::default();
        op.process_batch(rows(&[1, 2]), &mut out).unwrap();
        clock.set_ms(300);
        // Both keys have idled 300 ms (no batch since, so no sweep yet).
        let snap = op.snapshot_state(128).unwrap().unwrap();
        // Restored in another process, whose clock reads another time.
        let later = ProcessingClock::manual(1_000_000);
        let mut restored = operator(&later);
        restored.restore_state(&[snap]).unwrap();
        assert_eq!(restored.groups_in_state(), 2);
        out.take();
        restored.process_batch(rows(&[3, 2]), &mut out).unwrap();
        let insert = RowKind::Insert as i8;
        let mut emitted = changes(&mut out);
        emitted.sort();
        assert_eq!(
            emitted,
            vec![(insert, 2, 1), (insert, 3, 1)],
            "keys 1 and 2 expired at the first sweep: key 2 starts afresh"
        );
        assert_eq!(restored.groups_in_state(), 2, "keys 2 and 3");
    }
}
