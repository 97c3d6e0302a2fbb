//! Deduplication and every other Top-1 over an append-only input: `ROW_NUMBER() OVER
//! (PARTITION BY k ORDER BY ...) = 1` (Flink SQL "Deduplication"; Flink's
//! `RowTimeDeduplicateFunction` and the processing-time keep-first / keep-last functions).
//! The general Top-N ([`super::rank::RankOperator`]) keeps the same answer with a sorted
//! row list per partition; a Top-1 over rows that are never retracted needs only one row
//! per partition, so this operator keeps just that, in buffers reused when it is replaced.
//!
//! Per partition id: the kept row in Arrow's row format, its sort key (its `ORDER BY`
//! values in row format, so bytes compare in the `ORDER BY` order) and its arrival number.
//! A new row replaces the kept one when its sort key is smaller (an equal key keeps the
//! earlier arrival: shared cases rule 9); ranked by arrival (a `PROCTIME()` attribute)
//! descending always replaces, ascending never does.
//!
//! Output per batch (mini-batch, as the Top-N): for each partition whose row changed, the
//! batch's best row: `+I` for a new partition, else `-U old` / `+U new` (a Top-1's
//! replacement is an update, as Flink emits it), nothing when the new row equals the old
//! one (a repeated event kept by arrival); with the rank column, a constant 1. A partition's
//! idle time (`'table.exec.state.ttl'`) moves with rows that could replace its row only.
//! State: one row per partition, in the Top-N's snapshot layout, so the two restore each
//! other's checkpoints.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, Int64Array, Int8Array, RecordBatch, UInt32Array,
};
use datafusion_common::arrow::compute::{interleave, take, SortOptions};
use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::arrow::row::{RowConverter, Rows};
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::Result;

use crate::clock::ProcessingClock;
use crate::expr::evaluate_all;
use crate::message::{RowKind, StreamBatch};
use crate::operator::{Collector, Operator};
use crate::operators::ranked_snapshot;
use crate::operators::stateless::batch_with_schema;
use crate::state::key_converter;
use crate::state::keyed::KeyRegistry;
use crate::state::row_codec::RowCodec;
use crate::state::sorted::SortKey;
use crate::state::ttl::IdleKeys;

/// A partition's kept row (`live`: there is one).
#[derive(Default)]
struct Kept {
    live: bool,
    seq: u64,
    sort: SortKey,
    row: Vec<u8>,
}

/// How many rows ahead partition state is prefetched.
const PREFETCH_DISTANCE: usize = 8;

/// Hints the CPU to load `slice[i]` into cache (nothing when out of bounds or on other
/// architectures).
#[inline(always)]
fn prefetch<T>(slice: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = slice.get(i) {
        // SAFETY: a prefetch is only a hint; it never faults and the pointer is valid.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (v as *const T).cast::<i8>(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slice, i);
}

/// No row of this batch (yet) for a partition.
const NONE: u32 = u32::MAX;

/// See the module docs.
pub struct DeduplicateOperator {
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    key_converter: Option<RowConverter>,
    order_by: Vec<Arc<dyn PhysicalExpr>>,
    sort_converter: RowConverter,
    row_codec: RowCodec,
    /// Ranked by arrival (`ORDER BY` a processing-time attribute): `Some(descending)`.
    by_arrival: Option<bool>,
    rank_column: bool,
    partitions: KeyRegistry,
    /// Per partition id.
    kept: Vec<Kept>,
    /// Per partition id: the last batch that touched it and that batch's best row (one
    /// vector: one memory access per row).
    batch_best: Vec<(u64, u32)>,
    batch_number: u64,
    /// Idle state retention per partition id (`'table.exec.state.ttl'`).
    idle: IdleKeys,
    /// The next arrival number.
    next_seq: u64,
    /// Scratch: every row index of a batch, and the rows' partition ids.
    all_rows: Vec<u32>,
    ids: Vec<usize>,
    in_schema: SchemaRef,
    schema: SchemaRef,
}

impl DeduplicateOperator {
    /// The first row of each partition of `partition_by` in `order_by` order (ties: the
    /// earlier arrival), over append-only input `in_schema`; `by_arrival` when `order_by`
    /// is a processing-time attribute; `rank_column` appends the rank (always 1); output
    /// `schema` (the input's columns, then the rank).
    pub fn new(
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        rank_column: bool,
        by_arrival: bool,
        in_schema: SchemaRef,
        schema: SchemaRef,
    ) -> Result<Self> {
        let key_types = partition_by
            .iter()
            .map(|k| k.data_type(&in_schema))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let descending = order_by.first().is_some_and(|(_, o)| o.descending);
        Ok(DeduplicateOperator {
            key_converter: key_converter(&key_types)?,
            partition_by,
            sort_converter: crate::state::sort_converter(&order_by, &in_schema)?,
            order_by: order_by.into_iter().map(|(e, _)| e).collect(),
            row_codec: RowCodec::new(&in_schema)?,
            by_arrival: by_arrival.then_some(descending),
            rank_column,
            partitions: KeyRegistry::new(),
            kept: Vec::new(),
            batch_best: Vec::new(),
            batch_number: 0,
            idle: IdleKeys::new(None, ProcessingClock::system()),
            next_seq: 0,
            all_rows: Vec::new(),
            ids: Vec::new(),
            in_schema,
            schema,
        })
    }

    /// Forgets partitions that received no row for `ttl` of processing time (Flink's
    /// `table.exec.state.ttl`), without output: a later row of the partition is its first
    /// again (`+I`). Idle time is measured on `clock`.
    pub fn with_state_ttl(
        mut self,
        ttl: Option<std::time::Duration>,
        clock: ProcessingClock,
    ) -> Self {
        self.idle = IdleKeys::new(ttl, clock);
        self
    }

    /// The partition ids of the first `n` rows of `data` into `self.ids` (new partitions
    /// start without a row).
    fn assign(&mut self, data: &RecordBatch, n: usize) -> Result<()> {
        let keys = evaluate_all(&self.partition_by, data)?;
        let key_rows = crate::state::encode_keys(self.key_converter.as_ref(), &keys)?;
        self.ids_of(key_rows.as_ref(), n);
        Ok(())
    }

    /// The partition ids of the first `n` of `key_rows` into `self.ids`, registering new
    /// partitions (without a row).
    fn ids_of(&mut self, key_rows: Option<&Rows>, n: usize) {
        if self.all_rows.len() < n {
            self.all_rows = (0..n as u32).collect();
        }
        self.partitions
            .ids_of(key_rows, &self.all_rows[..n], &mut self.ids);
        let capacity = self.partitions.capacity();
        if self.kept.len() < capacity {
            self.kept.resize_with(capacity, Kept::default);
            self.batch_best.resize(capacity, (0, NONE));
        }
    }

    /// The sort keys of `data`'s rows (`None` when ranked by arrival).
    fn sort_rows(&self, data: &RecordBatch) -> Result<Option<Rows>> {
        if self.by_arrival.is_some() {
            return Ok(None);
        }
        let values = evaluate_all(&self.order_by, data)?;
        Ok(Some(self.sort_converter.convert_columns(&values)?))
    }

    /// Whether a row with sort key `new` replaces one with `current` that arrived earlier.
    fn replaces(&self, new: &[u8], current: &[u8]) -> bool {
        match self.by_arrival {
            Some(descending) => descending,
            None => new < current,
        }
    }

    /// Forgets the partitions idle for longer than the TTL.
    fn expire(&mut self) {
        if !self.idle.enabled() {
            return;
        }
        for id in self.idle.expired(self.partitions.live_ids()) {
            self.partitions.forget(id);
            self.kept[id as usize] = Kept::default();
        }
    }
}

impl Operator for DeduplicateOperator {
    fn name(&self) -> &'static str {
        "Deduplicate"
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.partitions.len() as u64)
    }

    fn next_processing_timer(&self) -> Option<i64> {
        self.idle.next_timer(!self.partitions.is_empty())
    }

    fn on_processing_time(&mut self, _now_ms: i64, _out: &mut Collector) -> Result<()> {
        self.expire();
        Ok(())
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        self.expire();
        let data = &batch.data;
        let n = data.num_rows();
        if n == 0 {
            return Ok(());
        }
        let now = self.idle.now_ms();
        self.assign(data, n)?;
        let sort = self.sort_rows(data)?;
        let sort_of = |i: u32| sort.as_ref().map_or(&[][..], |s| s.row(i as usize).data());
        // Each touched partition once, in first-touch order, with the batch's best row.
        self.batch_number += 1;
        let mut touched: Vec<u32> = Vec::new();
        for i in 0..n as u32 {
            // The state of the partition some rows ahead, fetched while this row is
            // looked at (1 M partitions do not stay in cache).
            if let Some(&ahead) = self.ids.get(i as usize + PREFETCH_DISTANCE) {
                prefetch(&self.batch_best, ahead);
                prefetch(&self.kept, ahead);
            }
            // Its kept row's bytes, nearer (the partition's state has arrived by then).
            if let Some(&near) = self.ids.get(i as usize + PREFETCH_DISTANCE / 2) {
                prefetch(&self.kept[near].row, 0);
            }
            let p = self.ids[i as usize];
            let (seen_in, best) = self.batch_best[p];
            let best = if seen_in == self.batch_number {
                best
            } else {
                touched.push(p as u32);
                self.batch_best[p] = (self.batch_number, NONE);
                NONE
            };
            let kept = &self.kept[p];
            // A row that would not be kept over the partition's row leaves its idle time
            // alone (as the Top-N, which passes over such rows, and Flink's keep-first,
            // which updates the TTL on writes only).
            let beats_kept = !kept.live || self.replaces(sort_of(i), kept.sort.bytes());
            if !beats_kept {
                continue;
            }
            self.idle.touch(p, now);
            if best == NONE || self.replaces(sort_of(i), sort_of(best)) {
                self.batch_best[p].1 = i;
            }
        }
        let seq0 = self.next_seq;
        self.next_seq += n as u64;
        // The partitions with a new best row, the rows, and their row format.
        touched.retain(|&p| self.batch_best[p as usize].1 != NONE);
        if touched.is_empty() {
            return Ok(());
        }
        let winners =
            UInt32Array::from_iter_values(touched.iter().map(|&p| self.batch_best[p as usize].1));
        let new = data
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &winners, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let new_rows = self.row_codec.encode(&new)?;
        // -U old, +U new (or +I new), the old rows decoded from state; a row equal to the
        // kept one is no change (a repeated event kept by arrival), as in the Top-N.
        let mut order = Vec::with_capacity(2 * touched.len());
        let mut ops = Vec::with_capacity(2 * touched.len());
        let mut olds = Vec::new();
        for (k, &p) in touched.iter().enumerate() {
            let kept = &self.kept[p as usize];
            if kept.live {
                if kept.row == new_rows.row(k) {
                    continue;
                }
                order.push((0, olds.len()));
                ops.push(RowKind::UpdateBefore as i8);
                olds.push(p);
                order.push((1, k));
                ops.push(RowKind::UpdateAfter as i8);
            } else {
                order.push((1, k));
                ops.push(RowKind::Insert as i8);
            }
        }
        if !order.is_empty() {
            let old = self
                .row_codec
                .decode(olds.iter().map(|&p| &self.kept[p as usize].row[..]))?;
            let mut columns = old
                .iter()
                .zip(&new)
                .map(|(o, n)| interleave(&[o.as_ref() as &dyn Array, n.as_ref()], &order))
                .collect::<std::result::Result<Vec<ArrayRef>, _>>()?;
            if self.rank_column {
                columns.push(Arc::new(Int64Array::from_value(1, order.len())));
            }
            out.emit(StreamBatch {
                data: batch_with_schema(&self.schema, columns, order.len())?,
                row_watermarks: None,
                ops: Some(Int8Array::from(ops)),
            });
        }
        // The new rows become the kept ones (buffers reused).
        for (k, &p) in touched.iter().enumerate() {
            let i = self.batch_best[p as usize].1;
            let kept = &mut self.kept[p as usize];
            kept.live = true;
            kept.seq = seq0 + u64::from(i);
            kept.row.clear();
            kept.row.extend_from_slice(new_rows.row(k));
            kept.sort = SortKey::new(sort_of(i));
        }
        Ok(())
    }

    /// One row per partition, in the Top-N's layout ([`ranked_snapshot`]).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let mut held = ranked_snapshot::HeldRows::default();
        for id in self.partitions.live_ids() {
            let kept = &self.kept[id as usize];
            if kept.live {
                held.ids.push(id);
                held.seqs.push(kept.seq);
                held.rows.push(&kept.row);
            }
        }
        ranked_snapshot::write(
            held,
            &self.partitions,
            self.key_converter.as_ref(),
            &self.row_codec,
            &self.idle,
            max_parallelism,
        )
    }

    /// Takes the rows of snapshots (see [`Self::snapshot_state`]; the Top-N's too): per
    /// partition the first in sort order, then arrival.
    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        for snap in snapshots {
            let n = snap.num_rows();
            if n == 0 {
                continue;
            }
            let restored = ranked_snapshot::read(
                snap,
                "Deduplicate",
                self.key_converter.as_ref(),
                self.partition_by.len(),
                &self.in_schema,
            )?;
            let now = self.idle.now_ms();
            self.ids_of(restored.key_rows.as_ref(), n);
            let data = &restored.data;
            let sort = self.sort_rows(data)?;
            let rows = self.row_codec.encode(data.columns())?;
            for i in 0..n {
                let p = self.ids[i];
                let seq = restored.seqs[i];
                self.next_seq = self.next_seq.max(seq + 1);
                self.idle.restore(p, now, restored.idle_ms.value(i));
                let key = sort.as_ref().map_or(&[][..], |s| s.row(i).data());
                let kept = &self.kept[p];
                let better = !kept.live
                    || match self.by_arrival {
                        Some(descending) => (seq > kept.seq) == descending,
                        None => (key, seq) < (kept.sort.bytes(), kept.seq),
                    };
                if better {
                    let kept = &mut self.kept[p];
                    kept.live = true;
                    kept.seq = seq;
                    kept.sort = SortKey::new(key);
                    kept.row = rows.row(i).to_vec();
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::rank::RankOperator;
    use crate::operators::test_support::push_pairs;
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
    use datafusion_physical_expr::expressions::col;
    use sluice_common::plan::RankFunction;

    const I: RowKind = RowKind::Insert;

    /// Rows `(k INT, v INT)`.
    fn input() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("v", DataType::Int32, true),
        ]))
    }

    fn output(rank_column: bool) -> SchemaRef {
        let mut fields = input().fields().to_vec();
        if rank_column {
            fields.push(Arc::new(Field::new("rn", DataType::Int64, false)));
        }
        Arc::new(Schema::new(fields))
    }

    fn order(descending: bool) -> SortOptions {
        SortOptions {
            descending,
            nulls_first: !descending,
        }
    }

    /// The first row per `k` by `v` (descending: the largest `v`).
    fn dedup(descending: bool, rank_column: bool, by_arrival: bool) -> DeduplicateOperator {
        let s = input();
        DeduplicateOperator::new(
            vec![col("k", &s).unwrap()],
            vec![(col("v", &s).unwrap(), order(descending))],
            rank_column,
            by_arrival,
            Arc::clone(&s),
            output(rank_column),
        )
        .unwrap()
    }

    fn push(op: &mut DeduplicateOperator, rows: &[(i32, i32)]) -> Vec<String> {
        let rows: Vec<_> = rows.iter().map(|&(k, v)| (k, v, I)).collect();
        push_pairs(op, &input(), &rows)
    }

    /// Keep the row with the largest `v` per key (keep-last by event time is this with
    /// `v` the time): a larger `v` replaces (`-U`/`+U`), an equal one keeps the earlier
    /// arrival, a smaller one changes nothing; one batch emits the net change per key.
    #[test]
    fn a_better_row_replaces_the_kept_one() {
        let mut op = dedup(true, false, false);
        assert_eq!(push(&mut op, &[(1, 5), (2, 3)]), ["+I 1 5", "+I 2 3"]);
        assert_eq!(push(&mut op, &[(1, 7)]), ["-U 1 5", "+U 1 7"]);
        assert_eq!(
            push(&mut op, &[(1, 7), (1, 6), (2, 2)]),
            Vec::<String>::new()
        );
        assert_eq!(
            push(&mut op, &[(2, 4), (3, 1), (2, 9), (2, 8), (3, 1)]),
            ["-U 2 3", "+U 2 9", "+I 3 1"]
        );
        assert_eq!(op.state_rows(), Some(3));
        // Ascending, with the rank column: the smallest `v` (keep-first); a later row
        // with an earlier time replaces it (the SQL answer, shared cases README).
        let mut op = dedup(false, true, false);
        assert_eq!(push(&mut op, &[(1, 5), (1, 4)]), ["+I 1 4 1"]);
        assert_eq!(push(&mut op, &[(1, 4), (1, 9)]), Vec::<String>::new());
        assert_eq!(push(&mut op, &[(1, 2)]), ["-U 1 4 1", "+U 1 2 1"]);
    }

    /// Ranked by arrival: descending keeps the last row, ascending the first (append-only
    /// output).
    #[test]
    fn by_arrival_keeps_the_last_or_the_first_row() {
        let mut last = dedup(true, false, true);
        assert_eq!(push(&mut last, &[(1, 5), (1, 2)]), ["+I 1 2"]);
        // A repeated row is no change; another row replaces it.
        assert!(push(&mut last, &[(1, 2)]).is_empty());
        assert_eq!(push(&mut last, &[(1, 3), (1, 2)]), Vec::<String>::new());
        assert_eq!(push(&mut last, &[(1, 2), (1, 3)]), ["-U 1 2", "+U 1 3"]);
        let mut first = dedup(false, false, true);
        assert_eq!(push(&mut first, &[(1, 5), (1, 2)]), ["+I 1 5"]);
        assert_eq!(push(&mut first, &[(1, 9), (2, 0)]), ["+I 2 0"]);
    }

    /// The general Top-N's Top-1 over the same input and clock.
    fn general(
        descending: bool,
        rank_column: bool,
        by_arrival: bool,
        clock: &ProcessingClock,
    ) -> RankOperator {
        let s = input();
        RankOperator::new(
            RankFunction::RowNumber,
            vec![col("k", &s).unwrap()],
            vec![(col("v", &s).unwrap(), order(descending))],
            1,
            1,
            rank_column,
            true,
            by_arrival,
            None,
            Arc::clone(&s),
            output(rank_column),
        )
        .unwrap()
        .with_state_ttl(Some(std::time::Duration::from_millis(100)), clock.clone())
    }

    /// The same changes as the general Top-N's Top-1 over random append-only batches
    /// (peers and repeated rows included), ordered by a column or by arrival, with a TTL
    /// on a clock that moves between batches; and snapshots of either restore into the
    /// other.
    #[test]
    fn agrees_with_the_general_top_n() {
        let s = input();
        let mut rng = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
        let mut next = |m: u64| (rng() % m) as i32;
        for (descending, rank_column, by_arrival) in [
            (true, false, false),
            (false, true, false),
            (true, false, true),
            (false, true, true),
        ] {
            let clock = ProcessingClock::manual(1_000);
            let fresh = || {
                dedup(descending, rank_column, by_arrival)
                    .with_state_ttl(Some(std::time::Duration::from_millis(100)), clock.clone())
            };
            let mut fast = fresh();
            let mut slow = general(descending, rank_column, by_arrival, &clock);
            for round in 0..200 {
                clock.advance_ms(next(40) as i64);
                let mut sweep = Collector::default();
                fast.on_processing_time(clock.now_ms(), &mut sweep).unwrap();
                slow.on_processing_time(clock.now_ms(), &mut sweep).unwrap();
                let len = next(12) as usize;
                let rows: Vec<_> = (0..len).map(|_| (next(5), next(8), I)).collect();
                // (Keys may come out in another order: compared as sets.)
                let mut a = push_pairs(&mut fast, &s, &rows);
                let mut b = push_pairs(&mut slow, &s, &rows);
                a.sort();
                b.sort();
                let case = (descending, rank_column, by_arrival);
                assert_eq!(a, b, "{case:?} round {round}: {rows:?}");
                assert_eq!(fast.state_rows(), slow.state_rows(), "{case:?} {round}");
                if round % 50 == 49 {
                    // Swap state through snapshots: each restores the other's.
                    let from_fast: Vec<_> = fast.snapshot_state(128).unwrap().into_iter().collect();
                    let from_slow: Vec<_> = slow.snapshot_state(128).unwrap().into_iter().collect();
                    fast = fresh();
                    fast.restore_state(&from_slow).unwrap();
                    slow = general(descending, rank_column, by_arrival, &clock);
                    slow.restore_state(&from_fast).unwrap();
                }
            }
        }
    }

    /// A snapshot split in two (as at another parallelism) restores into one operator;
    /// the better row of a key held twice wins.
    #[test]
    fn restore_merges_snapshots() {
        let mut a = dedup(true, false, false);
        push(&mut a, &[(1, 5), (2, 3)]);
        let mut b = dedup(true, false, false);
        push(&mut b, &[(1, 4), (3, 8)]);
        let snaps: Vec<_> = [a.snapshot_state(128), b.snapshot_state(128)]
            .into_iter()
            .map(|s| s.unwrap().unwrap())
            .collect();
        let mut merged = dedup(true, false, false);
        merged.restore_state(&snaps).unwrap();
        assert_eq!(merged.state_rows(), Some(3));
        assert_eq!(push(&mut merged, &[(1, 5), (3, 9)]), ["-U 3 8", "+U 3 9"]);
        assert_eq!(push(&mut merged, &[(1, 6)]), ["-U 1 5", "+U 1 6"]);
    }

    /// `'table.exec.state.ttl'`: an idle partition is forgotten without output; its next
    /// row is its first again.
    #[test]
    fn state_ttl_forgets_idle_partitions() {
        let clock = ProcessingClock::manual(1_000);
        let mut op = dedup(true, false, false)
            .with_state_ttl(Some(std::time::Duration::from_millis(100)), clock.clone());
        assert_eq!(push(&mut op, &[(1, 5), (2, 5)]), ["+I 1 5", "+I 2 5"]);
        clock.advance_ms(60);
        // A row that is not kept leaves the idle time alone; a kept one moves it.
        assert!(push(&mut op, &[(1, 1)]).is_empty());
        assert_eq!(push(&mut op, &[(2, 6)]), ["-U 2 5", "+U 2 6"]);
        clock.advance_ms(60);
        let due = op.next_processing_timer().expect("a sweep is due");
        assert!(due <= clock.now_ms());
        op.on_processing_time(clock.now_ms(), &mut Collector::default())
            .unwrap();
        assert_eq!(op.state_rows(), Some(1));
        assert_eq!(push(&mut op, &[(1, 2), (2, 2)]), ["+I 1 2"]);
    }
}
