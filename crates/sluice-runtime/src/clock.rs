//! Processing time: the clock operators read for processing-time features (idle state
//! retention, `'table.exec.state.ttl'`), which a test or an embedding application can set
//! so that what depends on processing time is deterministic.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A processing-time clock in milliseconds since the Unix epoch. The system clock by
/// default; a manual clock (shared by its clones) only moves when it is set.
#[derive(Debug, Clone, Default)]
pub struct ProcessingClock {
    manual: Option<Arc<AtomicI64>>,
}

impl ProcessingClock {
    /// The system's wall clock.
    pub fn system() -> Self {
        ProcessingClock { manual: None }
    }

    /// A clock that reads `start_ms` until [`set_ms`](Self::set_ms) or
    /// [`advance_ms`](Self::advance_ms) moves it (for tests).
    pub fn manual(start_ms: i64) -> Self {
        ProcessingClock {
            manual: Some(Arc::new(AtomicI64::new(start_ms))),
        }
    }

    /// Whether this is a manual clock.
    pub fn is_manual(&self) -> bool {
        self.manual.is_some()
    }

    /// Now, in ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
        }
    }

    /// Sets a manual clock to `ms` (never backwards: a smaller value is ignored, as
    /// processing time only moves forward).
    ///
    /// # Panics
    /// On the system clock, which cannot be set.
    pub fn set_ms(&self, ms: i64) {
        self.manual
            .as_ref()
            .expect("only a manual processing-time clock can be set")
            .fetch_max(ms, Ordering::SeqCst);
    }

    /// Moves a manual clock forward by `ms`.
    ///
    /// # Panics
    /// On the system clock, which cannot be set.
    pub fn advance_ms(&self, ms: i64) {
        self.manual
            .as_ref()
            .expect("only a manual processing-time clock can be set")
            .fetch_add(ms.max(0), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_set_and_never_back() {
        let clock = ProcessingClock::manual(1_000);
        let shared = clock.clone();
        assert_eq!(clock.now_ms(), 1_000);
        shared.advance_ms(250);
        assert_eq!(clock.now_ms(), 1_250);
        shared.set_ms(900);
        assert_eq!(clock.now_ms(), 1_250, "never backwards");
        shared.set_ms(5_000);
        assert_eq!(clock.now_ms(), 5_000);
        // The system clock reads the time since the epoch (after 2020-01-01).
        assert!(ProcessingClock::system().now_ms() > 1_577_836_800_000);
    }
}

/// When an operator looks for state idle longer than `'table.exec.state.ttl'`: at most
/// twice per TTL (so a key is forgotten between 1 and 1.5 TTLs after its last row), and on
/// a processing-time timer when no row arrives. One schedule for every operator with
/// idle-state retention (through [`crate::state::ttl::IdleKeys`], or the regular join's
/// per-row times).
#[derive(Debug, Clone, Copy)]
pub struct IdleSweep {
    /// Processing time (ms) of the last sweep; far in the past before the first, so the
    /// first chance sweeps (restored keys may be idle already).
    last_ms: i64,
}

impl Default for IdleSweep {
    fn default() -> Self {
        IdleSweep {
            last_ms: i64::MIN / 4,
        }
    }
}

impl IdleSweep {
    /// Whether a sweep for a TTL of `ttl_ms` is due at `now_ms`; if so it counts as done.
    pub fn due(&mut self, now_ms: i64, ttl_ms: i64) -> bool {
        if now_ms < self.last_ms + ttl_ms / 2 {
            return false;
        }
        self.last_ms = now_ms;
        true
    }

    /// The processing time (ms) of the next sweep: the operator's timer while it holds
    /// state.
    pub fn next_ms(&self, ttl_ms: i64) -> i64 {
        self.last_ms.saturating_add((ttl_ms / 2).max(1))
    }
}
