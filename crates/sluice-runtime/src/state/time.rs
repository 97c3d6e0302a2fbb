//! Event-time state: timers per key, and rows buffered until the watermark passes them.
//!
//! - [`EventTimeTimers`]: `(time, key id)` timers, earliest first, with lazy deletion: a
//!   timer is not removed when the state it was set for changes; when it fires, the
//!   operator looks at the key's current state and ignores or re-arms it (SESSION's
//!   window ends, MATCH_RECOGNIZE's `WITHIN` expiry). Flink's `InternalTimerService`
//!   with event-time timers plays this part there.
//! - [`EventTimeBuffer`]: items (rows of any key) held until the watermark reaches their
//!   event time, then released in event-time order, ties in arrival order. Each key's
//!   list ordered by event time is the subsequence of its rows (MATCH_RECOGNIZE's input
//!   sorting; Flink's CEP operator keeps a `MapState<Long, List<Row>>` per key for it).
//!   One buffer for all keys releases a watermark's rows in one pass.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// `(time in ms, key id)` timers, earliest first, with lazy deletion (see the module
/// docs).
#[derive(Debug, Default)]
pub struct EventTimeTimers {
    heap: BinaryHeap<Reverse<(i64, u32)>>,
}

impl EventTimeTimers {
    /// No timers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a timer for `key` at `time_ms` (another timer of the key stays set).
    pub fn set(&mut self, time_ms: i64, key: u32) {
        self.heap.push(Reverse((time_ms, key)));
    }

    /// Removes and returns the earliest timer if `due(its time)`; `None` when there is
    /// none or the earliest is not due yet.
    pub fn pop_due(&mut self, due: impl Fn(i64) -> bool) -> Option<(i64, u32)> {
        let Reverse((time, key)) = *self.heap.peek()?;
        if !due(time) {
            return None;
        }
        self.heap.pop();
        Some((time, key))
    }

    /// Timers set (stale ones included).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no timer is set.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// One buffered item, ordered by `(time, arrival)` only.
#[derive(Debug)]
struct Buffered<T> {
    time_ms: i64,
    arrival: u64,
    item: T,
}

impl<T> PartialEq for Buffered<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.time_ms, self.arrival) == (other.time_ms, other.arrival)
    }
}

impl<T> Eq for Buffered<T> {}

impl<T> PartialOrd for Buffered<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Buffered<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time_ms, self.arrival).cmp(&(other.time_ms, other.arrival))
    }
}

/// Items held until the watermark passes their event time (see the module docs).
#[derive(Debug)]
pub struct EventTimeBuffer<T> {
    heap: BinaryHeap<Reverse<Buffered<T>>>,
    arrivals: u64,
}

impl<T> Default for EventTimeBuffer<T> {
    fn default() -> Self {
        EventTimeBuffer {
            heap: BinaryHeap::new(),
            arrivals: 0,
        }
    }
}

impl<T> EventTimeBuffer<T> {
    /// Nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Buffers `item` with event time `time_ms`; it comes out after every item buffered
    /// before it with the same time.
    pub fn push(&mut self, time_ms: i64, item: T) {
        let arrival = self.arrivals;
        self.arrivals += 1;
        self.heap.push(Reverse(Buffered {
            time_ms,
            arrival,
            item,
        }));
    }

    /// Removes the items with event time `<= limit_ms` into `out` as `(time, item)`, in
    /// event-time order, ties in arrival order.
    pub fn release(&mut self, limit_ms: i64, out: &mut Vec<(i64, T)>) {
        while self.heap.peek().is_some_and(|b| b.0.time_ms <= limit_ms) {
            let Reverse(b) = self.heap.pop().expect("peeked");
            out.push((b.time_ms, b.item));
        }
    }

    /// Every buffered item as `(time, item)`, in the order they would be released (for
    /// snapshots; pushing them in this order into a new buffer restores it).
    pub fn ordered(&self) -> Vec<(i64, &T)> {
        let mut all: Vec<&Buffered<T>> = self.heap.iter().map(|b| &b.0).collect();
        all.sort_unstable();
        all.into_iter().map(|b| (b.time_ms, &b.item)).collect()
    }

    /// Items buffered.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_fire_in_time_order_when_due() {
        let mut t = EventTimeTimers::new();
        t.set(30, 1);
        t.set(10, 2);
        t.set(20, 3);
        assert_eq!(t.pop_due(|time| time <= 5), None);
        assert_eq!(t.pop_due(|time| time <= 25), Some((10, 2)));
        assert_eq!(t.pop_due(|time| time <= 25), Some((20, 3)));
        assert_eq!(t.pop_due(|time| time <= 25), None);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn buffer_releases_in_time_then_arrival_order() {
        let mut b = EventTimeBuffer::new();
        for (t, x) in [(5, 'a'), (3, 'b'), (5, 'c'), (9, 'd'), (3, 'e'), (1, 'f')] {
            b.push(t, x);
        }
        assert_eq!(
            b.ordered(),
            vec![
                (1, &'f'),
                (3, &'b'),
                (3, &'e'),
                (5, &'a'),
                (5, &'c'),
                (9, &'d')
            ]
        );
        let mut out = Vec::new();
        b.release(0, &mut out);
        assert!(out.is_empty());
        b.release(5, &mut out);
        assert_eq!(out, vec![(1, 'f'), (3, 'b'), (3, 'e'), (5, 'a'), (5, 'c')]);
        // A later push with a time already released still comes out (the operator
        // decides what is late, not the buffer).
        b.push(2, 'g');
        out.clear();
        b.release(i64::MAX, &mut out);
        assert_eq!(out, vec![(2, 'g'), (9, 'd')]);
        assert!(b.is_empty());
    }
}
