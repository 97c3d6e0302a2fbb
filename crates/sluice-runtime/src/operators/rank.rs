//! Top-N and deduplication (Flink SQL "Top-N", "Deduplication"; Flink's
//! `AppendOnlyTopNFunction`, `RetractableTopNFunction`).
//!
//! Per partition (`KeyedValues<Ranked>`) the rows in sort order: a `BTreeMap` from (sort
//! key in Arrow's row format, arrival number) to the whole row in row format, so peers
//! (equal sort keys) rank in arrival order, the earlier first. Over an append-only input a
//! partition keeps only the rows ranked within the upper bound (a row pushed past it can
//! never come back); over an updating input every live row, and a retraction (`-U`, `-D`)
//! removes the row it names wherever it ranks, so the next one moves up and a deleted row
//! never returns (shared case 044).
//!
//! Over an updating input whose updates only move a row up (Flink's `UpdatableTopNFunction`;
//! the planner's `RankSpec::update_fast_key`: upserts by a unique key, `ORDER BY` a
//! `COUNT(*)` descending, `ROW_NUMBER` or `RANK`), a partition keeps only the rows ranked
//! within the upper bound,
//! as over append-only input: `-U` rows are passed over, and a `+U` first removes the kept
//! row of its key, if any. A row pushed out comes back only by an update of its own.
//!
//! Output (mini-batch, like the updating aggregate): after each batch, for every partition
//! it touched, the ranked rows in `lower..=upper` before and after are compared. With the
//! rank column and `ROW_NUMBER`, each rank position whose row changed emits `-U old` /
//! `+U new` (or `+I` / `-D` when the position was or becomes empty), as Flink does; else
//! rows that left emit `-D` and rows that entered `+I`, except that a Top-1's (a
//! deduplication's) new row replacing the old one is `-U old` / `+U new`.
//!
//! A window Top-N (Flink's `WindowRankOperator`; the partition holds the window bounds)
//! emits nothing per batch: when the watermark reaches a window's end - 1 ms, each of its
//! partitions emits its ranked rows as inserts and is forgotten. A row whose window has
//! fired under the row's watermark is late: dropped and counted.

use std::collections::BTreeMap;

use sluice_common::plan::WindowSpec;
use sluice_common::time::WATERMARK_MIN;

use crate::clock::ProcessingClock;
use crate::metrics::JobMetrics;
use std::sync::Arc;

use datafusion_common::arrow::array::{Int64Array, Int8Array, RecordBatch, UInt32Array};
use datafusion_common::arrow::compute::{take, SortOptions};
use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::arrow::row::{RowConverter, Rows};
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::RankFunction;
use sluice_common::Result;

use crate::expr::evaluate_all;
use crate::message::{RowKind, StreamBatch};
use crate::operator::{Collector, Operator};
use crate::operators::ranked_snapshot;
use crate::operators::stateless::batch_with_schema;
use crate::state::key_converter;
use crate::state::keyed::KeyedValues;
use crate::state::row_codec::RowCodec;
use crate::state::sorted::{SortKey, SortedRows};
use crate::state::ttl::IdleKeys;

/// A partition's rows in rank order (rows shared, so the lists compared per batch copy no
/// bytes).
type Ranked = SortedRows;

/// A ranked row: the row, its arrival number and its rank.
#[derive(Clone)]
struct Entry {
    row: Arc<[u8]>,
    seq: u64,
    rank: u64,
}

impl Entry {
    /// The same row content (and rank, when `by_rank`).
    fn same(&self, other: &Entry, by_rank: bool) -> bool {
        (!by_rank || self.rank == other.rank) && (self.seq == other.seq || self.row == other.row)
    }
}

/// Over upserts whose updates only move a row up: the unique key of the kept rows.
struct UpdateFast {
    key: Vec<Arc<dyn PhysicalExpr>>,
    converter: RowConverter,
    /// Per partition id, each kept row's unique key (row format) and arrival number.
    kept: Vec<Vec<(Box<[u8]>, u64)>>,
}

impl UpdateFast {
    /// The unique keys of the rows of `data`.
    fn keys(&self, data: &RecordBatch) -> Result<Rows> {
        Ok(self
            .converter
            .convert_columns(&evaluate_all(&self.key, data)?)?)
    }

    fn kept_of(&mut self, p: usize) -> &mut Vec<(Box<[u8]>, u64)> {
        if p >= self.kept.len() {
            self.kept.resize_with(p + 1, Vec::new);
        }
        &mut self.kept[p]
    }
}

/// A window Top-N's firing state (see the module docs).
pub struct WindowRanking {
    spec: WindowSpec,
    end_column: usize,
    /// Partitions by the watermark at which their window fires.
    fires: BTreeMap<i64, Vec<u32>>,
    watermark: i64,
    metrics: Arc<JobMetrics>,
}

impl WindowRanking {
    /// Windows of `spec` whose `window_end` is input column `end_column`.
    pub fn new(spec: WindowSpec, end_column: usize, metrics: Arc<JobMetrics>) -> Self {
        WindowRanking {
            spec,
            end_column,
            fires: BTreeMap::new(),
            watermark: WATERMARK_MIN,
            metrics,
        }
    }

    /// The watermark at which each row's window fires.
    fn fire_times(&self, data: &RecordBatch) -> Result<Vec<i64>> {
        let ends = crate::operators::over_aggregate::time_values(data, self.end_column)?;
        Ok(ends.into_iter().map(|e| self.spec.fire_at_ms(e)).collect())
    }
}

/// See the module docs. Output: the input's columns, then the rank (`BIGINT`) when asked.
pub struct RankOperator {
    function: RankFunction,
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    key_converter: Option<RowConverter>,
    order_by: Vec<Arc<dyn PhysicalExpr>>,
    sort_converter: RowConverter,
    row_codec: RowCodec,
    lower: u64,
    upper: u64,
    rank_column: bool,
    /// The input is append-only, or updates only move rows up: rows past the upper bound
    /// can be dropped.
    append_only: bool,
    /// Updates only move rows up: the rows' unique key (see the module docs).
    update_fast: Option<UpdateFast>,
    /// Ranked by arrival (`ORDER BY` a processing-time attribute): `Some(descending)`.
    by_arrival: Option<bool>,
    partitions: KeyedValues<Ranked>,
    /// A window Top-N's windows.
    window: Option<WindowRanking>,
    /// Rows held over all partitions.
    held: usize,
    /// Per partition id, the number of the last batch that touched it.
    touched_in: Vec<u32>,
    batch_number: u32,
    /// Idle state retention per partition id (`'table.exec.state.ttl'`; not for a window
    /// Top-N, whose state goes with its windows).
    idle: IdleKeys,
    /// The next arrival number.
    next_seq: u64,
    in_schema: SchemaRef,
    schema: SchemaRef,
}

impl RankOperator {
    /// A Top-N over input `in_schema`: partitioned by `partition_by`, ordered by
    /// `order_by` (expressions and their sort options), keeping ranks `lower..=upper` by
    /// `function`; `rank_column` appends the rank; `append_only` says the input never
    /// retracts; output `schema`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        function: RankFunction,
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        lower: u64,
        upper: u64,
        rank_column: bool,
        append_only: bool,
        by_arrival: bool,
        window: Option<WindowRanking>,
        in_schema: SchemaRef,
        schema: SchemaRef,
    ) -> Result<Self> {
        let key_types = partition_by
            .iter()
            .map(|k| k.data_type(&in_schema))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let descending = order_by.first().is_some_and(|(_, o)| o.descending);
        let sort_converter = crate::state::sort_converter(&order_by, &in_schema)?;
        let row_codec = RowCodec::new(&in_schema)?;
        Ok(RankOperator {
            function,
            key_converter: key_converter(&key_types)?,
            partition_by,
            order_by: order_by.into_iter().map(|(e, _)| e).collect(),
            sort_converter,
            row_codec,
            lower,
            upper,
            rank_column,
            append_only,
            by_arrival: by_arrival.then_some(descending),
            update_fast: None,
            partitions: KeyedValues::new(),
            window,
            held: 0,
            touched_in: Vec::new(),
            batch_number: 0,
            idle: IdleKeys::new(None, ProcessingClock::system()),
            next_seq: 0,
            in_schema,
            schema,
        })
    }

    /// Forgets partitions that received no row for `ttl` of processing time (Flink's
    /// `table.exec.state.ttl`; what bounds the state of a Top-N over updating input):
    /// without output, so a later row of the partition ranks among the rows after it only.
    /// Not for a window Top-N. Idle time is measured on `clock`.
    pub fn with_state_ttl(
        mut self,
        ttl: Option<std::time::Duration>,
        clock: ProcessingClock,
    ) -> Self {
        let ttl = if self.window.is_none() { ttl } else { None };
        self.idle = IdleKeys::new(ttl, clock);
        self
    }

    /// The input is a stream of upserts by the unique key `key` (expressions over the
    /// input) whose updates only move a row up (see the module docs): keeps only the rows
    /// ranked within the upper bound. Not with a state TTL (an aggregate that forgets a
    /// group starts its count again) nor for a window Top-N.
    ///
    /// # Errors
    /// Key types the row format cannot encode.
    pub fn with_update_fast_key(mut self, key: Vec<Arc<dyn PhysicalExpr>>) -> Result<Self> {
        let types = key
            .iter()
            .map(|k| k.data_type(&self.in_schema))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let converter = RowConverter::new(
            types
                .into_iter()
                .map(datafusion_common::arrow::row::SortField::new)
                .collect(),
        )?;
        self.append_only = true;
        self.update_fast = Some(UpdateFast {
            key,
            converter,
            kept: Vec::new(),
        });
        Ok(self)
    }

    /// Forgets the partitions idle for longer than the TTL (looked for at most twice per
    /// TTL).
    fn expire(&mut self) {
        if !self.idle.enabled() {
            return;
        }
        for id in self.idle.expired(self.partitions.live_ids().into_iter()) {
            self.forget(id);
        }
    }

    /// Appends the rows of a partition ranked in `lower..=upper` to `out`, with their
    /// ranks, in order; returns how many rows rank `<= upper` (rows from there on rank
    /// beyond it), `None` when all do. Only the shown rows are cloned (a reference count).
    fn ranked_into(&self, rows: &Ranked, out: &mut Vec<Entry>) -> Option<usize> {
        let mut position = 0u64;
        let mut rank = 0u64;
        let mut previous: Option<&[u8]> = None;
        let by_position = self.function == RankFunction::RowNumber;
        for (sort, seq, row) in rows.iter() {
            position += 1;
            // (ROW_NUMBER never compares keys.)
            let peer = !by_position && previous == Some(sort);
            rank = match self.function {
                RankFunction::RowNumber => position,
                RankFunction::Rank if peer => rank,
                RankFunction::Rank => position,
                RankFunction::DenseRank if peer => rank,
                RankFunction::DenseRank => rank + 1,
            };
            if rank > self.upper {
                return Some(position as usize - 1);
            }
            previous = Some(sort);
            if rank >= self.lower {
                out.push(Entry {
                    row: Arc::clone(row),
                    seq,
                    rank,
                });
            }
        }
        None
    }

    /// The rows in `lower..=upper`.
    fn shown(&self, rows: &Ranked) -> Vec<Entry> {
        let mut list = Vec::new();
        self.ranked_into(rows, &mut list);
        list
    }

    /// The changes from `before` to `after` (see the module docs), both in rank order.
    fn diff(&self, before: &[Entry], after: &[Entry], out: &mut Vec<(Entry, RowKind)>) {
        if self.rank_column && self.function == RankFunction::RowNumber {
            // Ranks are lower, lower + 1, ... in both lists: compare position by position.
            for i in 0..before.len().max(after.len()) {
                match (before.get(i), after.get(i)) {
                    (Some(a), Some(b)) if a.same(b, true) => {}
                    (Some(a), Some(b)) => {
                        out.push((a.clone(), RowKind::UpdateBefore));
                        out.push((b.clone(), RowKind::UpdateAfter));
                    }
                    (Some(a), None) => out.push((a.clone(), RowKind::Delete)),
                    (None, Some(b)) => out.push((b.clone(), RowKind::Insert)),
                    (None, None) => {}
                }
            }
            return;
        }
        // As multisets of (row, rank) (of rows alone without the rank column). The lists
        // hold the top N: a pairwise search.
        let by_rank = self.rank_column;
        let mut matched = vec![false; after.len()];
        let mut left = Vec::new();
        for a in before {
            let hit = after
                .iter()
                .enumerate()
                .find(|(j, b)| !matched[*j] && a.same(b, by_rank))
                .map(|(j, _)| j);
            match hit {
                Some(j) => matched[j] = true,
                None => left.push(a.clone()),
            }
        }
        let mut entered: Vec<Entry> = after
            .iter()
            .zip(matched)
            .filter(|(_, m)| !m)
            .map(|(e, _)| e.clone())
            .collect();
        // A deduplication's (a Top-1's) new row replacing the old one: an update of the
        // partition's row. (In a larger top N, one row leaving and another entering are
        // different rows: a delete and an insert, as Flink emits them.)
        if self.upper == 1 && left.len() == 1 && entered.len() == 1 {
            out.push((left.remove(0), RowKind::UpdateBefore));
            out.push((entered.remove(0), RowKind::UpdateAfter));
            return;
        }
        out.extend(left.into_iter().map(|e| (e, RowKind::Delete)));
        out.extend(entered.into_iter().map(|e| (e, RowKind::Insert)));
    }

    /// The sort key of row `i` (of `keys`) arriving as number `seq`: its `ORDER BY` values,
    /// or, ranked by arrival, the arrival number (ascending: earlier first; descending:
    /// later first).
    fn sort_key(&self, keys: &Rows, i: usize, seq: u64) -> SortKey {
        match self.by_arrival {
            Some(false) => SortKey::new(&seq.to_be_bytes()),
            Some(true) => SortKey::new(&(!seq).to_be_bytes()),
            None => SortKey::new(keys.row(i).as_ref()),
        }
    }

    /// The sort key a new row `i` would have (its arrival number not yet given: after
    /// every row held when ascending, before them when descending).
    fn new_sort_key(&self, keys: &Rows, i: usize) -> SortKey {
        self.sort_key(keys, i, self.next_seq)
    }

    /// Over append-only input: whether a row with sort key `key` cannot rank within
    /// `upper` in `part` (it sorts after rows that already fill the range), so it need not
    /// be kept.
    fn cannot_enter(&self, part: &Ranked, key: &[u8]) -> bool {
        if (part.len() as u64) < self.upper {
            return false;
        }
        let Some(last) = part.last_sort() else {
            return false;
        };
        match self.function {
            // A later arrival ranks after equal keys.
            RankFunction::RowNumber => key >= last,
            RankFunction::Rank => key > last,
            RankFunction::DenseRank => {
                if key <= last {
                    return false;
                }
                let mut distinct = 0u64;
                let mut previous: Option<&[u8]> = None;
                for (sort, _, _) in part.iter() {
                    if previous != Some(sort) {
                        distinct += 1;
                        previous = Some(sort);
                    }
                }
                distinct >= self.upper
            }
        }
    }

    /// Drops the rows of partition `p` from position `keep` on (ranked past the upper
    /// bound; append-only or update-fast input only).
    fn trim(&mut self, p: usize, keep: usize) {
        self.held -= self.partitions[p].len() - keep;
        self.partitions[p].truncate(keep);
        if let Some(fast) = &mut self.update_fast {
            let part = &self.partitions[p];
            fast.kept_of(p)
                .retain(|(_, seq)| part.iter().any(|(_, s, _)| s == *seq));
        }
    }

    /// Forgets partition `p` and its rows.
    fn forget(&mut self, p: u32) {
        self.held -= self.partitions[p as usize].len();
        self.partitions.forget(p, Ranked::new());
        if let Some(fast) = &mut self.update_fast {
            fast.kept_of(p as usize).clear();
        }
    }

    /// Update-fast: removes the kept row of unique key `key` from partition `p`, if any.
    fn remove_kept(&mut self, p: usize, key: &[u8]) {
        let Some(fast) = &mut self.update_fast else {
            return;
        };
        let kept = fast.kept_of(p);
        let Some(at) = kept.iter().position(|(k, _)| k.as_ref() == key) else {
            return;
        };
        let (_, seq) = kept.swap_remove(at);
        let part = &mut self.partitions[p];
        let found = part
            .iter()
            .find(|(_, s, _)| *s == seq)
            .map(|(sort, _, row)| (sort.to_vec(), Arc::clone(row)));
        if let Some((sort, row)) = found {
            if part.remove_latest(&sort, &row) {
                self.held -= 1;
            }
        }
    }

    /// The partition id of each of `rows` of `data` (new partitions start empty).
    fn partition_ids(&mut self, data: &RecordBatch, rows: &[u32]) -> Result<Vec<usize>> {
        let keys = evaluate_all(&self.partition_by, data)?;
        let key_rows = crate::state::encode_keys(self.key_converter.as_ref(), &keys)?;
        let mut ids = Vec::new();
        self.partitions
            .ids_or_insert_with(key_rows.as_ref(), rows, &mut ids, |_| Ok(Ranked::new()))?;
        Ok(ids)
    }

    /// Window Top-N: takes the rows in (late ones dropped), emitting nothing.
    fn process_windowed(&mut self, batch: StreamBatch) -> Result<()> {
        let data = &batch.data;
        let window = self.window.as_ref().expect("a window Top-N");
        let fires = window.fire_times(data)?;
        let mut late = 0;
        let kept: Vec<u32> = (0..data.num_rows())
            .filter(|&i| {
                let in_time = fires[i] > batch.watermark_at(i);
                late += u64::from(!in_time);
                in_time
            })
            .map(|i| i as u32)
            .collect();
        JobMetrics::add(&window.metrics.late_rows_dropped, late);
        let ids = self.partition_ids(data, &kept)?;
        let sort_keys = self
            .sort_converter
            .convert_columns(&evaluate_all(&self.order_by, data)?)?;
        let rows = self.row_codec.encode(data.columns())?;
        let mut touched = Vec::new();
        for (&i, &p) in kept.iter().zip(&ids) {
            let i = i as usize;
            if self.partitions[p].is_empty() {
                let w = self.window.as_mut().expect("a window Top-N");
                w.fires.entry(fires[i]).or_default().push(p as u32);
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            let sort = self.sort_key(&sort_keys, i, seq);
            self.partitions[p].insert(sort, seq, Arc::from(rows.row(i)));
            self.held += 1;
            touched.push(p);
        }
        touched.sort_unstable();
        touched.dedup();
        let mut scratch = Vec::new();
        for p in touched {
            scratch.clear();
            if let Some(keep) = self.ranked_into(&self.partitions[p], &mut scratch) {
                self.trim(p, keep);
            }
        }
        Ok(())
    }

    /// Window Top-N: emits and forgets the partitions whose window fired at `watermark`.
    fn fire(&mut self, watermark: i64, out: &mut Collector) -> Result<()> {
        let Some(window) = self.window.as_mut() else {
            return Ok(());
        };
        window.watermark = window.watermark.max(watermark);
        let mut due = Vec::new();
        while let Some(entry) = window.fires.first_entry() {
            if *entry.key() > watermark {
                break;
            }
            due.extend(entry.remove());
        }
        let mut changes = Vec::new();
        for p in due {
            for e in self.shown(&self.partitions[p as usize]) {
                changes.push((e, RowKind::Insert));
            }
            self.held -= self.partitions[p as usize].len();
            self.partitions.forget(p, Ranked::new());
        }
        self.emit(changes, out)
    }

    fn emit(&self, changes: Vec<(Entry, RowKind)>, out: &mut Collector) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut columns = self
            .row_codec
            .decode(changes.iter().map(|(e, _)| &e.row[..]))?;
        if self.rank_column {
            columns.push(Arc::new(Int64Array::from_iter_values(
                changes.iter().map(|(e, _)| e.rank as i64),
            )));
        }
        let n = changes.len();
        let data = batch_with_schema(&self.schema, columns, n)?;
        out.emit(StreamBatch {
            data,
            row_watermarks: None,
            ops: Some(Int8Array::from_iter_values(
                changes.iter().map(|(_, k)| *k as i8),
            )),
        });
        Ok(())
    }
}

/// Update-fast: `batch` without its `-U` rows (each is followed by the `+U` of its key,
/// which replaces the kept row of the key).
///
/// # Errors
/// A `-D` row: the input is not an aggregate's upserts (a planner bug).
fn without_update_befores(batch: StreamBatch) -> Result<StreamBatch> {
    let Some(ops) = &batch.ops else {
        return Ok(batch);
    };
    if ops.values().contains(&(RowKind::Delete as i8)) {
        return Err(sluice_common::SluiceError::Internal(
            "an update-fast Top-N received a delete: its input is not an aggregate's upserts"
                .into(),
        ));
    }
    let keep = datafusion_common::arrow::array::BooleanArray::from_iter(
        ops.values()
            .iter()
            .map(|&k| Some(k != RowKind::UpdateBefore as i8)),
    );
    if keep.true_count() == batch.data.num_rows() {
        return Ok(batch);
    }
    batch.filter(&keep)
}

impl Operator for RankOperator {
    fn name(&self) -> &'static str {
        match (self.window.is_some(), self.upper == 1) {
            (true, true) => "WindowDeduplicate",
            (true, false) => "WindowRank",
            (false, true) => "Deduplicate",
            (false, false) => "Rank",
        }
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.held as u64)
    }

    /// With a TTL and partitions in state: the next sweep for idle ones.
    fn next_processing_timer(&self) -> Option<i64> {
        self.idle.next_timer(!self.partitions.is_empty())
    }

    fn on_processing_time(&mut self, _now_ms: i64, _out: &mut Collector) -> Result<()> {
        self.expire();
        Ok(())
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        self.fire(watermark_ms, out)?;
        out.watermark(watermark_ms);
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.fire(i64::MAX, out)
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        if self.window.is_some() {
            return self.process_windowed(batch);
        }
        self.expire();
        let batch = match &self.update_fast {
            Some(_) => without_update_befores(batch)?,
            None => batch,
        };
        let now = self.idle.now_ms();
        let data = &batch.data;
        let n = data.num_rows();
        let all: Vec<u32> = (0..n as u32).collect();
        let ids = self.partition_ids(data, &all)?;
        let sort_keys = self
            .sort_converter
            .convert_columns(&evaluate_all(&self.order_by, data)?)?;
        // Rows that cannot enter a full ranking of append-only input are passed over
        // before anything is copied; the others are converted to row format.
        let accepted: Vec<u32> = (0..n)
            .filter(|&i| {
                !self.append_only
                    || !self.cannot_enter(
                        &self.partitions[ids[i]],
                        self.new_sort_key(&sort_keys, i).bytes(),
                    )
            })
            .map(|i| i as u32)
            .collect();
        let taken = if accepted.len() == n {
            data.clone()
        } else {
            let idx = UInt32Array::from(accepted.clone());
            let taken = data
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            RecordBatch::try_new(data.schema(), taken)?
        };
        let rows = self.row_codec.encode(taken.columns())?;
        let unique_keys = match &self.update_fast {
            Some(f) => Some(f.keys(&taken)?),
            None => None,
        };
        // Each touched partition's shown rows before the batch (`shown[from..to]`), in
        // first-touch order.
        self.batch_number = self.batch_number.wrapping_add(1);
        if self.touched_in.len() < self.partitions.capacity() {
            self.touched_in.resize(self.partitions.capacity(), 0);
        }
        let mut shown: Vec<Entry> = Vec::new();
        let mut before: Vec<(usize, usize, usize)> = Vec::new();
        for (j, &i) in accepted.iter().enumerate() {
            let i = i as usize;
            let p = ids[i];
            if self.touched_in[p] != self.batch_number {
                self.touched_in[p] = self.batch_number;
                self.idle.touch(p, now);
                let from = shown.len();
                self.ranked_into(&self.partitions[p], &mut shown);
                before.push((p, from, shown.len()));
            }
            let row = rows.row(j);
            if batch.row_kind(i).is_retraction() {
                // The latest arrival of this row (any copy of equal rows ranks alike).
                if self.partitions[p].remove_latest(sort_keys.row(i).as_ref(), row) {
                    self.held -= 1;
                }
            } else {
                if let Some(keys) = &unique_keys {
                    // Update-fast: the key's kept row is the old version of this one.
                    let key = keys.row(j);
                    self.remove_kept(p, key.as_ref());
                    let fast = self.update_fast.as_mut().expect("update-fast");
                    fast.kept_of(p)
                        .push((Box::from(key.as_ref()), self.next_seq));
                }
                let seq = self.next_seq;
                self.next_seq += 1;
                let sort = self.sort_key(&sort_keys, i, seq);
                self.partitions[p].insert(sort, seq, Arc::from(row));
                self.held += 1;
            }
        }
        let mut changes = Vec::new();
        let mut after = Vec::new();
        for (p, from, to) in before {
            after.clear();
            let cut = self.ranked_into(&self.partitions[p], &mut after);
            self.diff(&shown[from..to], &after, &mut changes);
            if let (true, Some(keep)) = (self.append_only, cut) {
                self.trim(p, keep);
            }
            if self.partitions[p].is_empty() {
                self.forget(p as u32);
            }
        }
        self.emit(changes, out)
    }

    /// One row per held row ([`ranked_snapshot`]).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let mut held = ranked_snapshot::HeldRows::default();
        for id in self.partitions.live_ids() {
            for (_, seq, row) in self.partitions[id as usize].iter() {
                held.ids.push(id);
                held.seqs.push(seq);
                held.rows.push(row);
            }
        }
        ranked_snapshot::write(
            held,
            self.partitions.registry(),
            self.key_converter.as_ref(),
            &self.row_codec,
            &self.idle,
            max_parallelism,
        )
    }

    /// Adds the rows of snapshots (see [`Self::snapshot_state`]).
    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        for snap in snapshots {
            let n = snap.num_rows();
            if n == 0 {
                continue;
            }
            let restored = ranked_snapshot::read(
                snap,
                "Top-N",
                self.key_converter.as_ref(),
                self.partition_by.len(),
                &self.in_schema,
            )?;
            let now = self.idle.now_ms();
            let data = &restored.data;
            let all: Vec<u32> = (0..n as u32).collect();
            let mut ids = Vec::new();
            self.partitions.ids_or_insert_with(
                restored.key_rows.as_ref(),
                &all,
                &mut ids,
                |_| Ok(Ranked::new()),
            )?;
            let sort_keys = self
                .sort_converter
                .convert_columns(&evaluate_all(&self.order_by, data)?)?;
            let rows = self.row_codec.encode(data.columns())?;
            let unique_keys = match &self.update_fast {
                Some(f) => Some(f.keys(data)?),
                None => None,
            };
            let fires = match &self.window {
                Some(w) => w.fire_times(data)?,
                None => Vec::new(),
            };
            for (i, &p) in ids.iter().enumerate() {
                if let Some(w) = self.window.as_mut() {
                    if self.partitions[p].is_empty() {
                        w.fires.entry(fires[i]).or_default().push(p as u32);
                    }
                }
                let seq = restored.seqs[i];
                self.next_seq = self.next_seq.max(seq + 1);
                self.idle.restore(p, now, restored.idle_ms.value(i));
                let sort = self.sort_key(&sort_keys, i, seq);
                self.partitions[p].insert(sort, seq, Arc::from(rows.row(i)));
                self.held += 1;
                if let (Some(keys), Some(fast)) = (&unique_keys, self.update_fast.as_mut()) {
                    fast.kept_of(p).push((Box::from(keys.row(i).as_ref()), seq));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
    use datafusion_physical_expr::expressions::col;

    /// Top 2 of `v` descending over one partition, rows `(k, v)`.
    fn top2(function: RankFunction, rank_column: bool, append_only: bool) -> RankOperator {
        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("v", DataType::Int32, true),
        ]));
        let mut fields = input.fields().to_vec();
        if rank_column {
            fields.push(Arc::new(Field::new("rn", DataType::Int64, false)));
        }
        let descending = SortOptions {
            descending: true,
            nulls_first: true,
        };
        RankOperator::new(
            function,
            vec![],
            vec![(col("v", &input).unwrap(), descending)],
            1,
            2,
            rank_column,
            append_only,
            false,
            None,
            Arc::clone(&input),
            Arc::new(Schema::new(fields)),
        )
        .unwrap()
    }

    /// Pushes one batch of `(k, v, kind)` rows; the changes as `"+I k v rn"` strings.
    fn push(op: &mut RankOperator, rows: &[(i32, i32, RowKind)]) -> Vec<String> {
        let schema = Arc::clone(&op.in_schema);
        crate::operators::test_support::push_pairs(op, &schema, rows)
    }

    const I: RowKind = RowKind::Insert;
    const D: RowKind = RowKind::Delete;

    /// Flink's `AppendOnlyTopNFunction` with the row number: each rank position whose row
    /// changed is updated (`-U` the row it had, `+U` the row it has now).
    #[test]
    fn row_number_updates_each_position_that_changed() {
        let mut op = top2(RankFunction::RowNumber, true, true);
        assert_eq!(push(&mut op, &[(1, 5, I)]), ["+I 1 5 1"]);
        assert_eq!(
            push(&mut op, &[(2, 7, I)]),
            ["-U 1 5 1", "+U 2 7 1", "+I 1 5 2"]
        );
        assert_eq!(push(&mut op, &[(3, 6, I)]), ["-U 1 5 2", "+U 3 6 2"]);
        // Equal to rank 2: the earlier arrival stays ahead; nothing changes.
        assert_eq!(push(&mut op, &[(4, 6, I)]), Vec::<String>::new());
        assert_eq!(
            push(&mut op, &[(5, 9, I)]),
            ["-U 2 7 1", "+U 5 9 1", "-U 3 6 2", "+U 2 7 2"]
        );
        // Append-only input: only the top 2 are kept.
        assert_eq!(op.state_rows(), Some(2));
        // Mini-batch: one batch, one change per position.
        assert_eq!(
            push(&mut op, &[(6, 10, I), (7, 11, I)]),
            ["-U 5 9 1", "+U 7 11 1", "-U 2 7 2", "+U 6 10 2"]
        );
    }

    /// Over an updating input every live row is kept: a deleted top row lets the next
    /// one move up, and a deleted row outside the top never comes back (shared case 044).
    #[test]
    fn a_deleted_row_leaves_the_ranking_wherever_it_is() {
        let mut op = top2(RankFunction::RowNumber, false, false);
        assert_eq!(
            push(&mut op, &[(1, 50, I), (2, 40, I)]),
            ["+I 1 50", "+I 2 40"]
        );
        assert_eq!(push(&mut op, &[(3, 60, I)]), ["-D 2 40", "+I 3 60"]);
        assert_eq!(op.state_rows(), Some(3));
        // Row 2 is deleted outside the top 2: no change.
        assert_eq!(push(&mut op, &[(2, 40, D)]), Vec::<String>::new());
        // The top row goes: 50 moves up, nothing fills rank 2 (40 is gone).
        assert_eq!(push(&mut op, &[(3, 60, D)]), ["-D 3 60"]);
        assert_eq!(push(&mut op, &[(4, 10, I)]), ["+I 4 10"]);
        // Two rows enter together.
        assert_eq!(
            push(&mut op, &[(5, 70, I), (6, 80, I)]),
            ["-D 1 50", "-D 4 10", "+I 6 80", "+I 5 70"]
        );
        // A retraction of a row never seen changes nothing.
        assert_eq!(push(&mut op, &[(9, 99, D)]), Vec::<String>::new());
    }

    /// Over the upserts of a `COUNT(*)` by `k` (Flink's `UpdatableTopNFunction`): a song's
    /// count only grows, so the top 2 keep only two rows, `-U` rows change nothing, and a
    /// row pushed out comes back by an update of its own. Plays (k, count): a=1, b=2, c=3.
    /// The changes are the retractable Top-N's (every live row kept), derived by hand and
    /// checked on both operators; the update-fast one is restored from a snapshot midway.
    #[test]
    fn update_fast_keeps_the_top_only_and_agrees_with_the_retractable_top_n() {
        const UB: RowKind = RowKind::UpdateBefore;
        const UA: RowKind = RowKind::UpdateAfter;
        let fast = || {
            let op = top2(RankFunction::RowNumber, true, false);
            let k = col("k", &op.in_schema).unwrap();
            op.with_update_fast_key(vec![k]).unwrap()
        };
        type Step = (Vec<(i32, i32, RowKind)>, Vec<&'static str>);
        let script: Vec<Step> = vec![
            (vec![(1, 1, I)], vec!["+I 1 1 1"]),
            (vec![(2, 1, I)], vec!["+I 2 1 2"]),
            (
                vec![(2, 1, UB), (2, 2, UA)],
                vec!["-U 1 1 1", "+U 2 2 1", "-U 2 1 2", "+U 1 1 2"],
            ),
            // c's 1 ties a's and arrives later: outside the top 2.
            (vec![(3, 1, I)], vec![]),
            (vec![(3, 1, UB), (3, 2, UA)], vec!["-U 1 1 2", "+U 3 2 2"]),
            (
                vec![(3, 2, UB), (3, 3, UA)],
                vec!["-U 2 2 1", "+U 3 3 1", "-U 3 2 2", "+U 2 2 2"],
            ),
            (vec![(1, 1, UB), (1, 2, UA)], vec![]),
            // a comes back.
            (vec![(1, 2, UB), (1, 3, UA)], vec!["-U 2 2 2", "+U 1 3 2"]),
            (
                vec![(1, 3, UB), (1, 4, UA)],
                vec!["-U 3 3 1", "+U 1 4 1", "-U 1 3 2", "+U 3 3 2"],
            ),
            // b comes back past both in one batch of two updates.
            (
                vec![(2, 2, UB), (2, 5, UA), (3, 3, UB), (3, 4, UA)],
                vec!["-U 1 4 1", "+U 2 5 1", "-U 3 3 2", "+U 1 4 2"],
            ),
        ];
        let mut retractable = top2(RankFunction::RowNumber, true, false);
        let mut op = fast();
        for (step, (rows, expected)) in script.iter().enumerate() {
            assert_eq!(
                push(&mut retractable, rows),
                *expected,
                "retractable, step {step}"
            );
            assert_eq!(push(&mut op, rows), *expected, "update-fast, step {step}");
            assert!(op.state_rows().unwrap() <= 2, "only the top 2 are kept");
            if step == 5 {
                let snap = op.snapshot_state(128).unwrap().unwrap();
                op = fast();
                op.restore_state(&[snap]).unwrap();
            }
        }
        assert_eq!(retractable.state_rows(), Some(3));
    }

    /// `'table.exec.state.ttl'`: a partition idle for longer is forgotten without output;
    /// a later row of it ranks alone.
    #[test]
    fn state_ttl_forgets_idle_partitions() {
        let clock = ProcessingClock::manual(1_000);
        let mut op = top2(RankFunction::RowNumber, true, false)
            .with_state_ttl(Some(std::time::Duration::from_millis(100)), clock.clone());
        assert_eq!(
            push(&mut op, &[(1, 5, I), (2, 7, I)]),
            ["+I 2 7 1", "+I 1 5 2"]
        );
        clock.advance_ms(120);
        let due = op.next_processing_timer().expect("a sweep is due");
        assert!(due <= clock.now_ms());
        let mut out = Collector::default();
        op.on_processing_time(clock.now_ms(), &mut out).unwrap();
        assert!(out.take().is_empty());
        assert_eq!(op.state_rows(), Some(0));
        assert_eq!(push(&mut op, &[(3, 6, I)]), ["+I 3 6 1"]);
    }

    /// RANK gives peers one number and leaves a gap; rows whose rank passes the bound
    /// leave; a snapshot restored into a new operator goes on the same way.
    #[test]
    fn rank_peers_and_restore() {
        let mut op = top2(RankFunction::Rank, true, true);
        assert_eq!(
            push(&mut op, &[(1, 5, I), (2, 5, I)]),
            ["+I 1 5 1", "+I 2 5 1"]
        );
        // 7 ranks 1, the two 5s rank 2.
        assert_eq!(
            push(&mut op, &[(3, 7, I)]),
            ["-D 1 5 1", "-D 2 5 1", "+I 3 7 1", "+I 1 5 2", "+I 2 5 2"]
        );
        let snapshot = op.snapshot_state(128).unwrap().unwrap();
        let mut restored = top2(RankFunction::Rank, true, true);
        restored.restore_state(&[snapshot]).unwrap();
        // 8 ranks 1, 7 ranks 2, the 5s rank 3: out.
        for o in [&mut op, &mut restored] {
            assert_eq!(
                push(o, &[(4, 8, I)]),
                ["-D 3 7 1", "-D 1 5 2", "-D 2 5 2", "+I 4 8 1", "+I 3 7 2"]
            );
        }
        assert_eq!(
            restored
                .partitions
                .slots()
                .iter()
                .map(|p| p.len())
                .sum::<usize>(),
            2
        );
    }
}
