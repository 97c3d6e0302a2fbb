//! Interval joins (Flink SQL "Joins > Interval Joins"; Flink's row-time
//! `TimeIntervalJoin`): an equi-join whose condition bounds the right input's event time by
//! the left's, `lower <= tr - tl <= upper` ([`IntervalBounds`]), over append-only inputs.
//! The output is append-only and keeps an event-time attribute.
//!
//! Rules (Flink's, with its source in `TimeIntervalJoin.processElement1/2` and `onTimer`;
//! `W` is the operator's watermark, the minimum over both inputs):
//! - A row joins the other input's held rows of its key within the bounds (and the residual
//!   condition), whatever `W` is: a row arriving late joins what state still holds.
//! - A left row at `tl` is kept while a right row that is not late (`tr >= W`) could still
//!   be its partner: while `tl + upper >= W`; a right row while `tr - lower >= W`. A row
//!   that cannot be kept when it arrives is not stored; an outer row without partners is
//!   then padded with NULLs at once.
//! - When `W` passes a held row's last partner time it is dropped; an outer row that never
//!   had a partner is emitted padded then (once: the output never retracts).
//! - The watermark sent downstream is held back by the widest bound, `W - max(upper,
//!   -lower, 0) - 1`, so no row the join emits later is behind it (a left row emitted
//!   padded at `W` has `tl > W_before - upper`; Flink's FLINK-8158 fix holds the watermark
//!   the same way).
//!
//! State: the rows of both inputs per key ([`crate::state::rows::JoinRows`], through the
//! regular join operator this one wraps, so snapshots have the regular join's layout) and,
//! per input, a min-heap of (expiry time, row id) for the cleanup.

use std::collections::VecDeque;

use datafusion_common::arrow::array::AsArray;
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion_common::arrow::record_batch::RecordBatch;
use sluice_common::plan::IntervalBounds;
use sluice_common::{Result, SluiceError};

use super::join::{JoinOperator, OutputRows};
use crate::message::{RowKind, StreamBatch};
use crate::operator::{Collector, Operator};

/// The interval join operator (see the module docs).
pub struct IntervalJoinOperator {
    /// Rows, keys, residual and output assembly.
    join: JoinOperator,
    bounds: IntervalBounds,
    /// Per input, each held row's event time (ms), by row id.
    times: [Vec<i64>; 2],
    /// Per input, (the watermark past which the row goes, row id) in ascending order;
    /// stale entries (of rows gone or ids reused) are skipped.
    expiry: [SortedQueue; 2],
    /// Per input and key id, the held rows as (event time, row id), in time order: a row's
    /// partners within the bounds are one range.
    by_time: [Vec<SortedQueue>; 2],
    /// The combined input watermark.
    watermark_ms: i64,
    /// The last watermark sent downstream.
    sent_ms: i64,
}

impl IntervalJoinOperator {
    /// An interval join over `join`'s inputs, keys and residual, with `bounds`.
    ///
    /// # Errors
    /// A join kind other than inner or outer.
    pub fn new(join: JoinOperator, bounds: IntervalBounds) -> Result<Self> {
        if join.kind.left_only() {
            return Err(SluiceError::Internal(
                "an interval join is inner or outer".into(),
            ));
        }
        Ok(IntervalJoinOperator {
            join,
            bounds,
            times: [Vec::new(), Vec::new()],
            expiry: [SortedQueue::default(), SortedQueue::default()],
            by_time: [Vec::new(), Vec::new()],
            watermark_ms: i64::MIN,
            sent_ms: i64::MIN,
        })
    }

    /// How far behind the input watermark the output one is held (ms).
    fn hold_ms(&self) -> i64 {
        self.bounds.upper_ms.max(-self.bounds.lower_ms).max(0) + 1
    }

    /// The watermark past which a row of input `s` at `t` can have no new partner.
    fn last_partner_time(&self, s: usize, t: i64) -> i64 {
        if s == 0 {
            t.saturating_add(self.bounds.upper_ms)
        } else {
            t.saturating_sub(self.bounds.lower_ms)
        }
    }

    /// The other input's partner times of a row of input `s` at `t` (inclusive).
    fn partner_range(&self, s: usize, t: i64) -> (i64, i64) {
        let (lo, hi) = (self.bounds.lower_ms, self.bounds.upper_ms);
        if s == 0 {
            (t.saturating_add(lo), t.saturating_add(hi))
        } else {
            (t.saturating_sub(hi), t.saturating_sub(lo))
        }
    }

    fn outer(&self, s: usize) -> bool {
        if s == 0 {
            self.join.kind.left_outer()
        } else {
            self.join.kind.right_outer()
        }
    }

    /// The event times (ms) of input `s`'s rows in `data`.
    fn row_times(&self, s: usize, data: &RecordBatch) -> Result<Vec<Option<i64>>> {
        let column = if s == 0 {
            self.bounds.left_time
        } else {
            self.bounds.right_time
        };
        let ms = cast(
            data.column(column),
            &DataType::Timestamp(TimeUnit::Millisecond, None),
        )?;
        let ms = cast(&ms, &DataType::Int64)?;
        Ok(ms.as_primitive::<Int64Type>().iter().collect())
    }

    fn join_batch(&mut self, s: usize, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        if (0..batch.num_rows()).any(|i| batch.row_kind(i).is_retraction()) {
            return Err(SluiceError::Execution(
                "an interval join's input must be append-only".into(),
            ));
        }
        let n = batch.num_rows();
        let data = &batch.data;
        let other = 1 - s;
        let times = self.row_times(s, data)?;
        let keys = self.join.batch_keys(s, data)?;
        let rows = self.join.inputs[s].encode_rows(data)?;
        // The watermark in effect at each row (it may rise within the batch): a held row
        // whose last partner time it has passed is gone for this row and later ones, as if
        // the batch had been cut there (results must not depend on batch sizes).
        let row_watermark: Vec<i64> = (0..n)
            .map(|i| self.watermark_ms.max(batch.watermark_at(i)))
            .collect();
        // Candidates: the other input's rows of the key within the time bounds.
        let mut offsets = Vec::with_capacity(n + 1);
        let mut candidates = Vec::new();
        offsets.push(0);
        for i in 0..n {
            if let (Some(t), Some(k)) = (times[i], keys.ids[i]) {
                if !keys.nulls[i] || self.join.null_equal {
                    let (from, to) = self.partner_range(s, t);
                    if let Some(rows) = self.by_time[other].get(k as usize) {
                        let w = row_watermark[i];
                        candidates.extend(
                            rows.range(from, to)
                                .filter(|&&(t, _)| self.last_partner_time(other, t) >= w)
                                .map(|&(_, r)| r),
                        );
                    }
                }
            }
            offsets.push(candidates.len());
        }
        let mask = if self.join.residual.is_some() {
            let pair_rows: Vec<u32> = (0..n)
                .flat_map(|i| std::iter::repeat_n(i as u32, offsets[i + 1] - offsets[i]))
                .collect();
            self.join.residual_mask(s, data, &pair_rows, &candidates)?
        } else {
            None
        };
        let now = self.join.now_ms();
        let mut output = OutputRows::default();
        for i in 0..n {
            let mut matched = 0u32;
            for j in offsets[i]..offsets[i + 1] {
                if mask.as_ref().is_some_and(|m| !m.value(j)) {
                    continue;
                }
                let r = candidates[j];
                let e = self.join.state.entry(other, r);
                self.join
                    .state
                    .set_partners(other, r, e.partners.saturating_add(1));
                matched = matched.saturating_add(e.count);
                output.push(RowKind::Insert, Some(i as u32), Some(r), e.count);
            }
            let kept = times[i].is_some_and(|t| {
                self.last_partner_time(s, t) >= row_watermark[i]
                    && (!keys.nulls[i] || self.join.null_equal)
            });
            if kept {
                let t = times[i].expect("kept rows have a time");
                let id = self
                    .join
                    .state
                    .insert(s, keys.key(i), keys.ids[i], rows.row(i), now);
                let e = self.join.state.entry(s, id);
                self.join
                    .state
                    .set_partners(s, id, e.partners.saturating_add(matched));
                if e.count == 1 {
                    let key_id = e.key;
                    self.index(s, id, key_id, t);
                }
            } else if matched == 0 && self.outer(s) {
                output.push(RowKind::Insert, Some(i as u32), None, 1);
            }
        }
        self.join.state.forget_empty_keys();
        if !output.is_empty() {
            // Append-only: no row kinds.
            let mut joined = self.join.build_output(s, data, output)?;
            joined.ops = None;
            out.emit(joined);
        }
        // Rows the batch's watermark has passed go now (outer ones padded).
        if let Some(&w) = row_watermark.last() {
            if w > self.watermark_ms {
                self.watermark_ms = w;
                self.expire(w, out)?;
            }
        }
        Ok(())
    }

    /// Indexes a new row `id` of input `s` with key id `key_id` at `t`: its time, its place
    /// in its key's time order, its expiry.
    fn index(&mut self, s: usize, id: u32, key_id: u32, t: i64) {
        let slot = id as usize;
        if self.times[s].len() <= slot {
            self.times[s].resize(slot + 1, 0);
        }
        self.times[s][slot] = t;
        let key_slot = key_id as usize;
        if self.by_time[s].len() <= key_slot {
            self.by_time[s].resize_with(key_slot + 1, SortedQueue::default);
        }
        self.by_time[s][key_slot].insert((t, id));
        let expiry = self.last_partner_time(s, t);
        self.expiry[s].insert((expiry, id));
    }

    /// Drops the rows whose last partner time is below `watermark_ms`, emitting outer rows
    /// that never had a partner padded with NULLs.
    fn expire(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        for s in 0..2 {
            let mut gone = Vec::new();
            while let Some(&(expiry, id)) = self.expiry[s].first() {
                if expiry >= watermark_ms {
                    break;
                }
                self.expiry[s].pop_first();
                let live = self.join.state.is_held(s, id)
                    && self.last_partner_time(s, self.times[s][id as usize]) == expiry;
                if live {
                    gone.push(id);
                }
            }
            // A row indexed twice (removed and added again at the same time) goes once.
            gone.sort_unstable();
            gone.dedup();
            if gone.is_empty() {
                continue;
            }
            if self.outer(s) {
                let mut padded = Vec::new();
                for &id in &gone {
                    let e = self.join.state.entry(s, id);
                    if e.partners == 0 {
                        padded.extend(std::iter::repeat_n(id, e.count as usize));
                    }
                }
                if !padded.is_empty() {
                    out.emit(self.join.padded_rows(s, &padded)?);
                }
            }
            for id in gone {
                let entry = self.join.state.remove_row(s, id);
                if let Some(rows) = self.by_time[s].get_mut(entry.key as usize) {
                    rows.remove(&(self.times[s][id as usize], id));
                }
            }
            self.join.state.forget_empty_keys();
        }
        Ok(())
    }
}

/// `(time, row id)` pairs in ascending order. Rows come nearly in time order, so an
/// insert is almost always a push at the back and the oldest go from the front (a
/// binary-searched insert or removal otherwise).
#[derive(Default)]
struct SortedQueue(VecDeque<(i64, u32)>);

impl SortedQueue {
    fn insert(&mut self, item: (i64, u32)) {
        if self.0.back().is_none_or(|b| *b <= item) {
            self.0.push_back(item);
        } else {
            let at = self.0.partition_point(|x| *x < item);
            self.0.insert(at, item);
        }
    }

    fn remove(&mut self, item: &(i64, u32)) {
        if self.0.front() == Some(item) {
            self.0.pop_front();
        } else if let Ok(at) = self.0.binary_search(item) {
            self.0.remove(at);
        }
    }

    fn first(&self) -> Option<&(i64, u32)> {
        self.0.front()
    }

    fn pop_first(&mut self) {
        self.0.pop_front();
    }

    /// The items with a time in `from..=to`.
    fn range(&self, from: i64, to: i64) -> impl Iterator<Item = &(i64, u32)> {
        let start = self.0.partition_point(|x| x.0 < from);
        let end = self.0.partition_point(|x| x.0 <= to);
        self.0.range(start..end.max(start))
    }
}

impl Operator for IntervalJoinOperator {
    fn name(&self) -> &'static str {
        "IntervalJoin"
    }

    fn state_rows(&self) -> Option<u64> {
        self.join.state_rows()
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
                "a join has no input {input}"
            )));
        }
        self.join_batch(input, batch, out)
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        if watermark_ms > self.watermark_ms {
            self.watermark_ms = watermark_ms;
            self.expire(watermark_ms, out)?;
        }
        let held = watermark_ms.saturating_sub(self.hold_ms());
        if held > self.sent_ms {
            self.sent_ms = held;
            out.watermark(held);
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.watermark_ms = i64::MAX;
        self.expire(i64::MAX, out)
    }

    /// The regular join's layout (see [`JoinOperator`]); the expiry heaps are rebuilt
    /// from the rows' event times on restore.
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        self.join.snapshot_state(max_parallelism)
    }

    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        self.join.restore_state(snapshots)?;
        for s in 0..2 {
            let ids: Vec<u32> = self.join.state.ids(s).collect();
            let columns = self.join.columns_of(s, &ids)?;
            let time_column = if s == 0 {
                self.bounds.left_time
            } else {
                self.bounds.right_time
            };
            let ms = cast(
                &columns[time_column],
                &DataType::Timestamp(TimeUnit::Millisecond, None),
            )?;
            let ms = cast(&ms, &DataType::Int64)?;
            let ms = ms.as_primitive::<Int64Type>();
            for (k, &id) in ids.iter().enumerate() {
                let key_id = self.join.state.entry(s, id).key;
                self.index(s, id, key_id, ms.value(k));
            }
        }
        Ok(())
    }
}
