//! Counters of a running job, shared between its tasks and whoever watches it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

/// Counters of one job. All counts are rows unless the name says otherwise.
#[derive(Debug)]
pub struct JobMetrics {
    /// Rows read by the sources.
    pub rows_in: AtomicU64,
    /// Bytes read by the sources (uncompressed).
    pub bytes_in: AtomicU64,
    /// Bytes the file sources read in all (their files' sizes), for progress bars; only
    /// meaningful when [`JobMetrics::bytes_total_known`] says so.
    pub bytes_total: AtomicU64,
    /// `false` once a source whose size is not known in advance took part (an unbounded
    /// or generated source, a compressed file).
    pub bytes_total_known: AtomicBool,
    /// Rows emitted to the result or the sink.
    pub rows_out: AtomicU64,
    /// Rows dropped because every window they belong to had already fired.
    pub late_rows_dropped: AtomicU64,
    /// Input rows skipped as unparsable (`'csv.ignore-parse-errors' = 'true'`).
    pub parse_errors_skipped: AtomicU64,
    /// The latest watermark of the sources (ms; `i64::MIN` before the first).
    pub watermark_ms: AtomicI64,
    /// Checkpoints completed (manifest written).
    pub checkpoints_completed: AtomicU64,
    /// Checkpoints that failed (a state file or the manifest could not be written).
    pub checkpoints_failed: AtomicU64,
    /// Id of the latest completed checkpoint (0: none).
    pub last_checkpoint_id: AtomicU64,
    /// Time from the latest completed checkpoint's barrier to its manifest (ms).
    pub last_checkpoint_duration_ms: AtomicU64,
    /// Bytes of state files of the latest completed checkpoint.
    pub last_checkpoint_bytes: AtomicU64,
    /// Times the job was restarted after a failure.
    pub restarts: AtomicU64,
    /// The checkpoint the latest attempt restored (0: none, it started empty).
    pub restored_checkpoint_id: AtomicU64,
    /// Rows each stateful operator subtask holds in its state now and at most so far, by
    /// (operator id, subtask): see [`JobMetrics::state_rows`].
    state_rows: Mutex<BTreeMap<(usize, usize), (u64, u64)>>,
}

impl Default for JobMetrics {
    fn default() -> Self {
        JobMetrics {
            rows_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_total: AtomicU64::new(0),
            bytes_total_known: AtomicBool::new(true),
            rows_out: AtomicU64::new(0),
            late_rows_dropped: AtomicU64::new(0),
            parse_errors_skipped: AtomicU64::new(0),
            watermark_ms: AtomicI64::new(i64::MIN),
            checkpoints_completed: AtomicU64::new(0),
            checkpoints_failed: AtomicU64::new(0),
            last_checkpoint_id: AtomicU64::new(0),
            last_checkpoint_duration_ms: AtomicU64::new(0),
            last_checkpoint_bytes: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            restored_checkpoint_id: AtomicU64::new(0),
            state_rows: Mutex::new(BTreeMap::new()),
        }
    }
}

impl JobMetrics {
    /// Adds `n` to a counter.
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The total bytes the sources read, when every source's size is known in advance.
    pub fn total_bytes(&self) -> Option<u64> {
        let total = self.bytes_total.load(Ordering::Relaxed);
        (self.bytes_total_known.load(Ordering::Relaxed) && total > 0).then_some(total)
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Records that subtask `subtask` of operator `operator` holds `rows` state rows (what
    /// each operator counts: a join's distinct rows, buffered rows, groups).
    pub fn set_state_rows(&self, operator: usize, subtask: usize, rows: u64) {
        let mut m = self.state_rows.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entry((operator, subtask)).or_insert((0, 0));
        e.0 = rows;
        e.1 = e.1.max(rows);
    }

    /// Per stateful operator (its id, as in EXPLAIN's order and the state file names): the
    /// state rows its subtasks hold now and the sum of their peaks (rows).
    pub fn state_rows(&self) -> BTreeMap<usize, (u64, u64)> {
        let m = self.state_rows.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
        for (&(op, _), &(now, peak)) in m.iter() {
            let e = out.entry(op).or_default();
            e.0 += now;
            e.1 += peak;
        }
        out
    }
}
