//! Idle state retention per key (Flink's `'table.exec.state.ttl'`, "Idle State Retention
//! Time" in Flink's configuration docs): the processing time of each key id's last row,
//! and the ids idle for longer than the TTL, looked for on the [`IdleSweep`] schedule. One
//! tracker for every operator whose keyed state is bounded by a TTL (updating aggregate,
//! Top-N, deduplication); the regular join keeps a time per row instead.

use std::time::Duration;

use crate::clock::{IdleSweep, ProcessingClock};

/// See the module docs. Times are processing time in ms since the epoch, read from the
/// operator's clock.
pub struct IdleKeys {
    /// The TTL in ms; `None` keeps every key forever (and records no times: a snapshot
    /// says every key was just used).
    ttl_ms: Option<i64>,
    clock: ProcessingClock,
    /// Per key id, the processing time of its last row.
    last_ms: Vec<i64>,
    sweep: IdleSweep,
}

impl IdleKeys {
    /// Keys forgotten after `ttl` without a row (`None`: never), idle time measured on
    /// `clock`.
    pub fn new(ttl: Option<Duration>, clock: ProcessingClock) -> Self {
        IdleKeys {
            ttl_ms: ttl.map(|t| t.as_millis() as i64),
            clock,
            last_ms: Vec::new(),
            sweep: IdleSweep::default(),
        }
    }

    /// The clock's time now (ms).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Whether keys expire at all.
    pub fn enabled(&self) -> bool {
        self.ttl_ms.is_some()
    }

    /// Records a row of key `id` at `now_ms` (nothing without a TTL).
    #[inline]
    pub fn touch(&mut self, id: usize, now_ms: i64) {
        if self.ttl_ms.is_none() {
            return;
        }
        if self.last_ms.len() <= id {
            self.last_ms.resize(id + 1, now_ms);
        }
        self.last_ms[id] = now_ms;
    }

    /// When a sweep is due (at most twice per TTL; see [`IdleSweep`]): the ids of `live`
    /// idle for longer than the TTL, for the operator to forget. Empty otherwise.
    pub fn expired(&mut self, live: impl Iterator<Item = u32>) -> Vec<u32> {
        let Some(ttl_ms) = self.ttl_ms else {
            return Vec::new();
        };
        let now = self.now_ms();
        if !self.sweep.due(now, ttl_ms) {
            return Vec::new();
        }
        live.filter(|&id| now - self.last(id as usize, now) > ttl_ms)
            .collect()
    }

    /// The time of `id`'s last row; an id never touched counts as used at `now_ms`.
    fn last(&self, id: usize, now_ms: i64) -> i64 {
        self.last_ms.get(id).copied().unwrap_or(now_ms)
    }

    /// Processing time (ms, never negative) from key `id`'s last row to `now_ms`: a
    /// snapshot's `idle_ms` column, so a restore keeps each key's TTL clock.
    pub fn idle_ms(&self, id: usize, now_ms: i64) -> i64 {
        (now_ms - self.last(id, now_ms)).max(0)
    }

    /// A restored key `id` that had been idle for `idle_ms` at the snapshot.
    pub fn restore(&mut self, id: usize, now_ms: i64, idle_ms: i64) {
        self.touch(id, now_ms - idle_ms);
    }

    /// The processing time (ms) of the next sweep while the operator `holds_state` (its
    /// processing-time timer); `None` without a TTL or state.
    pub fn next_timer(&self, holds_state: bool) -> Option<i64> {
        let ttl_ms = self.ttl_ms?;
        holds_state.then(|| self.sweep.next_ms(ttl_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_idle_longer_than_the_ttl_expire_at_the_next_sweep() {
        let clock = ProcessingClock::manual(1_000);
        let mut idle = IdleKeys::new(Some(Duration::from_millis(100)), clock.clone());
        idle.touch(0, 1_000);
        idle.touch(2, 1_000);
        // The first chance sweeps: nothing is idle yet.
        assert!(idle.expired([0, 2].into_iter()).is_empty());
        clock.advance_ms(60);
        idle.touch(2, clock.now_ms());
        clock.advance_ms(60); // key 0 idle 120 ms, key 2 60 ms
        assert_eq!(idle.next_timer(true), Some(1_050));
        assert_eq!(idle.next_timer(false), None);
        assert_eq!(idle.expired([0, 2].into_iter()), vec![0]);
        // Due again half a TTL later.
        clock.advance_ms(100);
        assert_eq!(idle.idle_ms(2, clock.now_ms()), 160);
        idle.restore(5, clock.now_ms(), 150);
        assert_eq!(idle.expired([2, 5].into_iter()), vec![2, 5]);
        // Without a TTL nothing expires, and no time is kept.
        let mut keep = IdleKeys::new(None, clock.clone());
        keep.touch(1, 10);
        assert!(keep.expired([1].into_iter()).is_empty());
        assert_eq!(keep.idle_ms(1, 30), 0);
        assert_eq!(keep.next_timer(true), None);
    }
}
