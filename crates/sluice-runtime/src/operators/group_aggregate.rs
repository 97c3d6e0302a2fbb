//! Updating aggregation: `GROUP BY` without windows, and global aggregates.
//!
//! The result changes as rows arrive, so the output is a changelog (`+I`, `-U`, `+U`,
//! `-D`, Flink's RowKind): per batch, every group whose result changed emits `+I new` (first
//! time), `-U old` + `+U new` (changed), or `-D old` (its last row was retracted). Input may
//! itself be a changelog (an aggregate of an aggregate): rows marked `-U`/`-D` are
//! retracted from their group's accumulators.
//!
//! A global aggregate (no `GROUP BY`) always has exactly one row, as the SQL standard says
//! (Flink's streaming mode emits none for empty input; we follow the standard): `COUNT` 0
//! and the other aggregates NULL over empty or fully retracted input. Its row is emitted at
//! the first change, or at the end of the input if there was none.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::array::{Array, ArrayRef, Int8Array, UInt32Array};
use datafusion_common::arrow::compute::take;
use datafusion_common::arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::Result;

use crate::clock::ProcessingClock;
use crate::expr::evaluate_all;
use crate::message::{RowKind, StreamBatch};
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::operators::window_aggregate::AggregateCall;
use crate::state::keyed::KeyedValues;
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// One group's state: accumulators, net row count, key and last emitted values.
struct Group {
    accumulators: Vec<Box<dyn Accumulator>>,
    rows: i64,
    key: Vec<ScalarValue>,
    emitted: Option<Vec<ScalarValue>>,
    /// Processing time of the group's last row (ms since the operator started).
    /// Negative for a group restored with idle time from before the operator started.
    last_access_ms: i64,
}

impl Group {
    /// A new group of `key`, accessed at `now_ms`.
    fn new(key: Vec<ScalarValue>, accumulators: Vec<Box<dyn Accumulator>>, now_ms: i64) -> Self {
        Group {
            accumulators,
            rows: 0,
            key,
            emitted: None,
            last_access_ms: now_ms,
        }
    }

    /// What the slot of a forgotten key holds.
    fn empty() -> Self {
        Group::new(Vec::new(), Vec::new(), 0)
    }
}

/// See the module docs. Output schema: the keys, then one column per aggregate; rows carry
/// their RowKind in `StreamBatch::ops`.
pub struct GroupAggregateOperator {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    calls: Vec<AggregateCall>,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// The input is a changelog: accumulators must retract.
    retracting: bool,
    converter: Option<datafusion_common::arrow::row::RowConverter>,
    /// Groups by key; an expired group's key is forgotten and its id reused.
    groups: KeyedValues<Group>,
    schema: SchemaRef,
    scratch: Vec<usize>,
    /// Idle state retention (`'table.exec.state.ttl'`).
    ttl: Option<std::time::Duration>,
    /// Processing time, which the TTL is measured in.
    clock: ProcessingClock,
    /// When expired groups are looked for.
    sweep: crate::clock::IdleSweep,
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
        self.ttl = ttl;
        self.clock = clock;
        self
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Forgets the groups idle for longer than the TTL (looked for at most twice per
    /// TTL); their ids are reused by new keys.
    fn expire(&mut self) {
        let Some(ttl) = self.ttl else {
            return;
        };
        if self.keys.is_empty() {
            return; // the global aggregate always has its row
        }
        let ttl_ms = ttl.as_millis() as i64;
        let now = self.now_ms();
        if !self.sweep.due(now, ttl_ms) {
            return;
        }
        for id in self.groups.live_ids() {
            if now - self.groups[id as usize].last_access_ms > ttl_ms {
                self.groups.forget(id, Group::empty());
            }
        }
    }

    /// Groups with state (for tests).
    pub fn groups_in_state(&self) -> usize {
        self.groups.len()
    }

    /// Aggregates `aggregates` (with their argument expressions in `calls`) per key.
    pub fn new(
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: &[DataType],
        calls: Vec<AggregateCall>,
        aggregates: Vec<Arc<AggregateFunctionExpr>>,
        retracting: bool,
        schema: SchemaRef,
    ) -> Result<Self> {
        let converter = key_converter(key_types)?;
        Ok(GroupAggregateOperator {
            converter,
            keys,
            calls,
            aggregates,
            retracting,
            groups: KeyedValues::new(),
            schema,
            scratch: Vec::new(),
            ttl: None,
            clock: ProcessingClock::system(),
            // The first batch sweeps (restored groups may be idle already).
            sweep: crate::clock::IdleSweep::default(),
        })
    }

    fn new_accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        new_accumulators(&self.aggregates, self.retracting)
    }

    fn current_values(group: &mut Group) -> Result<Vec<ScalarValue>> {
        let mut out = group.key.clone();
        for acc in &mut group.accumulators {
            out.push(acc.evaluate()?);
        }
        Ok(out)
    }

    /// Emits the change of each touched group (and of the global group when asked).
    fn emit_changes(&mut self, touched: &[usize], out: &mut Collector) -> Result<()> {
        let global = self.keys.is_empty();
        let mut rows: Vec<Vec<ScalarValue>> = Vec::new();
        let mut ops: Vec<i8> = Vec::new();
        for &g in touched {
            let group = &mut self.groups[g];
            let new = if group.rows > 0 || global {
                Some(Self::current_values(group)?)
            } else {
                None
            };
            match (group.emitted.take(), new) {
                (None, Some(new)) => {
                    rows.push(new.clone());
                    ops.push(RowKind::Insert as i8);
                    group.emitted = Some(new);
                }
                (Some(old), Some(new)) => {
                    if old != new {
                        rows.push(old);
                        ops.push(RowKind::UpdateBefore as i8);
                        rows.push(new.clone());
                        ops.push(RowKind::UpdateAfter as i8);
                    }
                    group.emitted = Some(new);
                }
                (Some(old), None) => {
                    rows.push(old);
                    ops.push(RowKind::Delete as i8);
                }
                (None, None) => {}
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let n = rows.len();
        let columns = (0..self.schema.fields().len())
            .map(|c| {
                let values = rows.iter().map(|r| r[c].clone());
                ScalarValue::iter_to_array(values)
            })
            .collect::<datafusion_common::Result<Vec<ArrayRef>>>()?;
        let data = batch_with_schema(&self.schema, columns, n)?;
        out.emit(StreamBatch {
            data,
            row_watermarks: None,
            ops: Some(Int8Array::from(ops)),
        });
        Ok(())
    }

    /// The group id of each of `rows` of the batch (its key rows `key_rows`, `None`
    /// without keys), creating the groups of new keys from `key_columns`.
    fn group_ids(
        &mut self,
        key_columns: &[ArrayRef],
        key_rows: Option<&datafusion_common::arrow::row::Rows>,
        rows: &[u32],
        out: &mut Vec<usize>,
    ) -> Result<()> {
        let now = self.now_ms();
        let (aggregates, retracting) = (&self.aggregates, self.retracting);
        self.groups.ids_or_insert_with(key_rows, rows, out, |row| {
            let key = key_columns
                .iter()
                .map(|c| ScalarValue::try_from_array(c, row))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            Ok(Group::new(
                key,
                new_accumulators(aggregates, retracting)?,
                now,
            ))
        })
    }
}

impl Operator for GroupAggregateOperator {
    fn name(&self) -> &'static str {
        "GroupAggregate"
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.groups.len() as u64)
    }

    /// With a TTL and groups in state: the next sweep for idle groups (so they are
    /// forgotten even when no row arrives).
    fn next_processing_timer(&self) -> Option<i64> {
        let ttl = self.ttl?.as_millis() as i64;
        if self.keys.is_empty() || self.groups.is_empty() {
            return None;
        }
        Some(self.sweep.next_ms(ttl))
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
        let key_columns = evaluate_all(&self.keys, data)?;
        let key_rows = match &self.converter {
            Some(c) => Some(c.convert_columns(&key_columns)?),
            None => None,
        };
        let all: Vec<u32> = (0..n as u32).collect();
        let mut group_of = std::mem::take(&mut self.scratch);
        self.group_ids(&key_columns, key_rows.as_ref(), &all, &mut group_of)?;
        // Rows of each group in arrival order, as runs of added or retracted rows: an
        // order-sensitive aggregate (LAST_VALUE, LISTAGG) must see a retraction after the
        // rows that arrived before it and before those after it.
        let mut per_group: BTreeMap<usize, Vec<(bool, Vec<u32>)>> = BTreeMap::new();
        for (row, &g) in group_of.iter().enumerate() {
            let retract = batch.row_kind(row).is_retraction();
            let runs = per_group.entry(g).or_default();
            match runs.last_mut() {
                Some((r, rows)) if *r == retract => rows.push(row as u32),
                _ => runs.push((retract, vec![row as u32])),
            }
        }
        self.scratch = group_of;
        let (args, filters) = AggregateCall::evaluate_all(&self.calls, data)?;
        let select = |rows: &[u32], a: usize| -> Result<Vec<ArrayRef>> {
            let idx = UInt32Array::from(rows.to_vec());
            let idx = match &filters[a] {
                // FILTER (WHERE ...): only rows where it is true.
                Some(f) => {
                    let kept: Vec<u32> = rows
                        .iter()
                        .copied()
                        .filter(|r| f.is_valid(*r as usize) && f.value(*r as usize))
                        .collect();
                    UInt32Array::from(kept)
                }
                None => idx,
            };
            Ok(args[a]
                .iter()
                .map(|c| take(c.as_ref(), &idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?)
        };
        let mut touched = Vec::with_capacity(per_group.len());
        for (g, runs) in per_group {
            for (retract, rows) in runs {
                for a in 0..self.calls.len() {
                    let values = select(&rows, a)?;
                    let accumulator = &mut self.groups[g].accumulators[a];
                    if retract {
                        accumulator.retract_batch(&values)?;
                    } else {
                        accumulator.update_batch(&values)?;
                    }
                }
                let n = rows.len() as i64;
                self.groups[g].rows += if retract { -n } else { n };
            }
            self.groups[g].last_access_ms = now;
            touched.push(g);
        }
        self.emit_changes(&touched, out)
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        // A global aggregate has its one row even when no row ever arrived.
        if self.keys.is_empty() && self.groups.is_empty() {
            let mut ids = Vec::new();
            self.group_ids(&[], None, &[0], &mut ids)?;
            self.emit_changes(&ids, out)?;
        }
        Ok(())
    }

    /// One row per group, in the common snapshot layout ([`crate::state::snapshot`]):
    /// `key_group`, the key columns `key_<k>`, `rows` (Int64: the group's net row
    /// count), `idle_ms` (Int64: processing time since the group's last row, for
    /// `'table.exec.state.ttl'`), `emitted` (Boolean: a result row was emitted and not
    /// deleted), each
    /// accumulator's state `agg_<a>_<i>` (DataFusion's `Accumulator::state`), and the last
    /// emitted aggregate values `out_<a>`.
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        use datafusion_common::arrow::array::{BooleanArray, Int64Array};
        let ids = self.groups.live_ids();
        if ids.is_empty() {
            return Ok(None);
        }
        let key_count = self.keys.len();
        let mut states: Vec<Vec<Vec<ScalarValue>>> = vec![Vec::new(); self.calls.len()];
        for &id in &ids {
            // `state()` may consume an accumulator: rebuild it from the state it gave.
            let fresh = self.new_accumulators()?;
            let group = &mut self.groups[id as usize];
            for (a, (acc, mut rebuilt)) in group.accumulators.iter_mut().zip(fresh).enumerate() {
                let state = acc.state()?;
                let arrays = state
                    .iter()
                    .map(|v| v.to_array())
                    .collect::<datafusion_common::Result<Vec<_>>>()?;
                rebuilt.merge_batch(&arrays)?;
                *acc = rebuilt;
                states[a].push(state);
            }
        }
        let groups: Vec<&Group> = ids.iter().map(|&id| &self.groups[id as usize]).collect();
        let key_columns = self.groups.key_columns(self.converter.as_ref(), &ids)?;
        let mut w = SnapshotWriter::new(key_columns, ids.len(), max_parallelism)?;
        w.column(
            "rows",
            Arc::new(Int64Array::from_iter_values(groups.iter().map(|g| g.rows))),
        );
        // Idle time, so a restore keeps each group's TTL clock (Flink keeps state TTL
        // timestamps in its snapshots too).
        let now = self.now_ms();
        w.column(
            "idle_ms",
            Arc::new(Int64Array::from_iter_values(
                groups.iter().map(|g| (now - g.last_access_ms).max(0)),
            )),
        );
        w.column(
            "emitted",
            Arc::new(BooleanArray::from_iter(
                groups.iter().map(|g| Some(g.emitted.is_some())),
            )),
        );
        for (a, per_group) in states.iter().enumerate() {
            let width = per_group.first().map(|s| s.len()).unwrap_or(0);
            for i in 0..width {
                let c = ScalarValue::iter_to_array(per_group.iter().map(|s| s[i].clone()))?;
                w.column(format!("agg_{a}_{i}"), c);
            }
        }
        for a in 0..self.calls.len() {
            let field = self.schema.field(key_count + a);
            let c = ScalarValue::iter_to_array(groups.iter().map(|g| match &g.emitted {
                Some(v) => v[key_count + a].clone(),
                None => ScalarValue::try_from(field.data_type()).unwrap_or(ScalarValue::Null),
            }))?;
            w.column(format!("out_{a}"), c);
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
            let (keys, key_rows) = reader.key_rows(self.converter.as_ref(), self.keys.len())?;
            let state_columns: Vec<Vec<ArrayRef>> = (0..self.calls.len())
                .map(|a| reader.numbered(&format!("agg_{a}_")))
                .collect();
            let outs = (0..self.calls.len())
                .map(|a| reader.column(&format!("out_{a}")))
                .collect::<Result<Vec<_>>>()?;
            let all: Vec<u32> = (0..n as u32).collect();
            let mut group_of = Vec::new();
            self.group_ids(&keys, key_rows.as_ref(), &all, &mut group_of)?;
            for (row, &g) in group_of.iter().enumerate() {
                let mut accumulators = self.new_accumulators()?;
                for (acc, columns) in accumulators.iter_mut().zip(&state_columns) {
                    let states = columns.iter().map(|c| c.slice(row, 1)).collect::<Vec<_>>();
                    acc.merge_batch(&states)?;
                }
                let group = &mut self.groups[g];
                group.accumulators = accumulators;
                group.rows = rows.value(row);
                group.last_access_ms = now - idle.value(row);
                group.emitted = if emitted.value(row) {
                    let mut v = group.key.clone();
                    for o in &outs {
                        v.push(ScalarValue::try_from_array(o, row)?);
                    }
                    Some(v)
                } else {
                    None
                };
            }
        }
        Ok(())
    }
}

/// One new accumulator per aggregate; for a changelog input (`retracting`), ones that can
/// retract any value.
fn new_accumulators(
    aggregates: &[Arc<AggregateFunctionExpr>],
    retracting: bool,
) -> Result<Vec<Box<dyn Accumulator>>> {
    aggregates
        .iter()
        .map(|a| -> Result<Box<dyn Accumulator>> {
            if !retracting {
                return Ok(a.create_accumulator()?);
            }
            match a.fun().name() {
                // DataFusion's sliding MIN/MAX retract in arrival order only (window
                // frames); a changelog retracts any value, so keep them all.
                "min" | "max" => Ok(Box::new(Multiset::new(
                    if a.fun().name() == "min" {
                        MultisetKind::Min
                    } else {
                        MultisetKind::Max
                    },
                    a.field().data_type().clone(),
                ))),
                // DataFusion's sliding COUNT(DISTINCT) keeps counts, but its state
                // (what a checkpoint holds) only the values: a restored one would lose
                // multiplicities. Ours keeps both in its state.
                "count" if a.is_distinct() => {
                    let values_type = match a.state_fields()?[0].data_type() {
                        DataType::List(item) => item.data_type().clone(),
                        other => other.clone(),
                    };
                    Ok(Box::new(Multiset::new(
                        MultisetKind::CountDistinct,
                        values_type,
                    )))
                }
                _ => Ok(a.create_sliding_accumulator()?),
            }
        })
        .collect()
}

/// What a [`Multiset`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MultisetKind {
    Min,
    Max,
    CountDistinct,
}

/// MIN, MAX or COUNT(DISTINCT) that can retract any value: keeps every value with its
/// count (its state, for checkpoints, is the list of values repeated by their counts).
struct Multiset {
    kind: MultisetKind,
    /// Type of the values (and of MIN/MAX's result).
    data_type: DataType,
    values: BTreeMap<OrdScalar, usize>,
}

/// A scalar ordered by `partial_cmp` (values of one column compare; NaN sorts as equal).
#[derive(PartialEq, Eq)]
struct OrdScalar(ScalarValue);

impl PartialOrd for OrdScalar {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdScalar {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .partial_cmp(&other.0)
            .unwrap_or(std::cmp::Ordering::Equal)
    }
}

impl Multiset {
    fn new(kind: MultisetKind, data_type: DataType) -> Self {
        Multiset {
            kind,
            data_type,
            values: BTreeMap::new(),
        }
    }
}

impl fmt::Debug for Multiset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Multiset({:?}, {} values)", self.kind, self.values.len())
    }
}

impl Accumulator for Multiset {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion_common::Result<()> {
        let array = &values[0];
        for i in 0..array.len() {
            if array.is_valid(i) {
                *self
                    .values
                    .entry(OrdScalar(ScalarValue::try_from_array(array, i)?))
                    .or_default() += 1;
            }
        }
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion_common::Result<()> {
        let array = &values[0];
        for i in 0..array.len() {
            if array.is_valid(i) {
                let key = OrdScalar(ScalarValue::try_from_array(array, i)?);
                if let Some(c) = self.values.get_mut(&key) {
                    *c -= 1;
                    if *c == 0 {
                        self.values.remove(&key);
                    }
                }
            }
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> datafusion_common::Result<ScalarValue> {
        let v = match self.kind {
            MultisetKind::CountDistinct => {
                return Ok(ScalarValue::Int64(Some(self.values.len() as i64)))
            }
            MultisetKind::Min => self.values.keys().next(),
            MultisetKind::Max => self.values.keys().next_back(),
        };
        match v {
            Some(v) => Ok(v.0.clone()),
            None => ScalarValue::try_from(&self.data_type),
        }
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.len() * 64
    }

    /// One list of every value held, repeated by its count.
    fn state(&mut self) -> datafusion_common::Result<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self
            .values
            .iter()
            .flat_map(|(v, c)| std::iter::repeat_n(v.0.clone(), *c))
            .collect();
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &values,
            &self.data_type,
        ))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion_common::Result<()> {
        use datafusion_common::arrow::array::AsArray;
        let lists = states[0].as_list::<i32>();
        for values in lists.iter().flatten() {
            self.update_batch(&[values])?;
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
        assert_eq!(op.groups.capacity(), 3, "ids reused, none added");
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
