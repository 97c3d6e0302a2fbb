//! The tasks a job runs: the source task (read, computed columns, watermarks, barriers),
//! the router (stateless operators, then rows to the subtask owning their key group), and
//! operator tasks (a chain of operators and the sink; snapshots at barriers). Each task is
//! a thread; tasks are joined by bounded channels and report to the job's coordinator
//! (`crate::job`) through [`Event`]s.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use datafusion_common::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::{PlanNode, SourceSpec};
use sluice_common::time::WATERMARK_MIN;
use sluice_common::{Result, SluiceError};

use crate::checkpoint::{injected, FailPoints, SourceOffset};
use crate::connectors::{create_source, BatchSink, Committable, ConnectorContext, Source};
use crate::expr::{evaluate, evaluate_all, physical, physical_all};
use crate::message::{Message, StreamBatch};
use crate::metrics::JobMetrics;
use crate::operator::Chain;
use crate::operators::stateless::batch_with_schema;
use crate::operators::window_assign::event_times_ms;

/// What tasks report to the job's coordinator.
pub(crate) enum Event {
    /// Source subtask `source` injected barrier `id`; `offset` is where it resumes from
    /// this checkpoint.
    Barrier {
        id: u64,
        source: usize,
        offset: SourceOffset,
    },
    /// Source subtask `source` read all its input; `offset` is its end (it takes part in
    /// later checkpoints with it).
    SourceFinished { source: usize, offset: SourceOffset },
    /// An operator subtask snapshotted for checkpoint `id`: state files `(operator index,
    /// Arrow IPC bytes, rows)` and what its sink pre-committed.
    Ack {
        id: u64,
        subtask: usize,
        states: Vec<(usize, Vec<u8>, u64)>,
        committable: Committable,
        /// The subtask's stage (index of its first plan node) and the watermark its
        /// operators had reached at the barrier (ms).
        stage: usize,
        watermark_ms: i64,
    },
    /// An operator subtask processed its whole input; `committable` commits its last
    /// output.
    Finished {
        subtask: usize,
        committable: Committable,
    },
    /// A task failed.
    Failed(SluiceError),
}

/// What the coordinator shares with the tasks of all attempts.
pub(crate) struct Coordination {
    /// When the job started (the clock of `next_due_ms`).
    pub started: Instant,
    /// When the next periodic checkpoint is due (ms since `started`).
    pub next_due_ms: AtomicU64,
    /// The next checkpoint id.
    pub next_id: AtomicU64,
    /// The newest checkpoint id triggered: every source subtask injects barriers up to
    /// it at its next batch boundary.
    pub trigger: AtomicU64,
    /// Every checkpoint up to this id has completed or failed.
    pub settled: AtomicU64,
    /// Where the source is (for at-most-once restarts, which skip what was read).
    pub live_offset: Mutex<std::collections::BTreeMap<usize, SourceOffset>>,
    /// The job was asked to stop: sources stop reading, the coordinator ends the job
    /// without committing what came after the last checkpoint.
    pub stop_requested: AtomicBool,
    /// Completed checkpoints: id → location (`<dir>/<job>/chk-<id>`).
    pub completed: Mutex<std::collections::BTreeMap<u64, String>>,
    /// The coordinator has ended (the job finished, failed or stopped).
    pub ended: AtomicBool,
}

impl Coordination {
    /// Checkpoint ids start at `first_id`; the first periodic one is due after `interval`.
    pub(crate) fn new(first_id: u64, interval: Option<Duration>) -> Self {
        Coordination {
            started: Instant::now(),
            next_due_ms: AtomicU64::new(interval.map(|i| i.as_millis() as u64).unwrap_or(0)),
            next_id: AtomicU64::new(first_id),
            trigger: AtomicU64::new(first_id - 1),
            settled: AtomicU64::new(first_id - 1),
            live_offset: Default::default(),
            stop_requested: AtomicBool::new(false),
            completed: Default::default(),
            ended: AtomicBool::new(false),
        }
    }

    /// Triggers a checkpoint now (sources inject its barrier at their next batch
    /// boundary); returns its id.
    pub(crate) fn trigger_now(&self) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        self.trigger.fetch_max(id, Ordering::SeqCst);
        id
    }

    /// Waits (at most `timeout`, and only while the attempt is not cancelled) until every
    /// checkpoint triggered so far has settled.
    fn wait_settled(&self, timeout: Duration, cancel: &AtomicBool) {
        let deadline = Instant::now() + timeout;
        let last = self.trigger.load(Ordering::SeqCst);
        while self.settled.load(Ordering::SeqCst) < last
            && Instant::now() < deadline
            && !cancel.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A message and the index of the input (upstream task) it came from.
pub(crate) type Envelope = (usize, Message);

/// What every task of one attempt of a job holds.
#[derive(Clone)]
pub(crate) struct TaskContext {
    pub attempt: u32,
    pub events: Sender<(u32, Event)>,
    pub cancel: Arc<AtomicBool>,
    pub coordination: Arc<Coordination>,
    pub failpoints: FailPoints,
    pub metrics: Arc<JobMetrics>,
}

impl TaskContext {
    fn report(&self, event: Event) {
        let _ = self.events.send((self.attempt, event));
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
            || self.coordination.stop_requested.load(Ordering::Relaxed)
    }
}

/// Starts a task on its own thread. Its error, or its panic (as an internal error), is
/// reported to the coordinator.
pub(crate) fn spawn_task(
    name: &str,
    kind: &'static str,
    ctx: &TaskContext,
    body: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<JoinHandle<()>> {
    let ctx = ctx.clone();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let err = match std::panic::catch_unwind(AssertUnwindSafe(body)) {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(p) => Some(panic_error(kind, p)),
            };
            if let Some(e) = err {
                ctx.report(Event::Failed(e));
            }
        })
        .map_err(|e| SluiceError::io(format!("starting the {kind} task"), e))
}

fn panic_error(task: &str, payload: Box<dyn std::any::Any + Send>) -> SluiceError {
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    SluiceError::Internal(format!("the {task} task panicked: {msg}"))
}

/// When the source injects barriers.
#[derive(Clone)]
pub(crate) struct BarrierSchedule {
    /// Periodic checkpoints.
    pub interval: Option<Duration>,
    /// Test hook: right after these rows (sorted).
    pub after_rows: Vec<u64>,
}

/// How long a source subtask stalls (test hook `'sluice.test.source-stall'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceStall {
    /// For a fixed time.
    For(Duration),
    /// Until the job has emitted a row (at most [`UNTIL_OUTPUT_LIMIT`]): deterministic
    /// where a fixed time would race with the other subtasks on a busy machine.
    UntilOutput,
}

/// The longest a [`SourceStall::UntilOutput`] waits.
const UNTIL_OUTPUT_LIMIT: Duration = Duration::from_secs(300);

/// Reads a source, evaluates computed columns, assigns per-row watermarks, and injects
/// checkpoint barriers (recording the source offset of each).
pub(crate) struct SourceDriver {
    source: Box<dyn Source>,
    columns: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    watermark: Option<Arc<dyn PhysicalExpr>>,
    /// `Some((rowtime index, delay ms))` for `rowtime - <fixed interval>` strategies.
    fixed_delay: Option<(usize, i64)>,
    watermark_ms: i64,
    /// Rows emitted in all (over the job's life, across restores).
    rows: u64,
    /// Rows still to skip after a restore (they were emitted before the checkpoint).
    skip: u64,
    schedule: Option<BarrierSchedule>,
    /// Rows after which a `source-after-row` failpoint may fire (sorted).
    fail_rows: Vec<u64>,
    /// The row count a test hook's barrier last followed (a source that polls without
    /// new rows asks again at the same count).
    barrier_after_rows: Option<u64>,
    /// Keep `Coordination::live_offset` current (at-most-once restarts).
    track_offset: bool,
    /// Which source subtask this is (numbered over all source groups of the job).
    subtask: usize,
    /// Its input (channel) index at the task it sends to.
    input: usize,
    /// The last barrier id injected.
    injected: u64,
    /// `'table.exec.source.idle-timeout'`.
    idle_timeout: Option<Duration>,
    /// Test hook (`'sluice.test.source-stall'`): wait before reading.
    stall: Option<SourceStall>,
    /// Output columns that are processing-time attributes, filled from `clock` per batch.
    proctime: Vec<usize>,
    clock: crate::clock::ProcessingClock,
    ctx: TaskContext,
    /// Per split (see [`Source::last_split`]): its own watermark and when it last had rows.
    split_watermarks: std::collections::BTreeMap<String, (i64, Instant)>,
    /// When the driver started (splits without rows yet count as idle from then on).
    started_at: Instant,
    /// Checkpoints this source's barriers went into and its position at each, until the
    /// source hears that they completed ([`Source::checkpoint_complete`]).
    awaiting_completion: std::collections::VecDeque<(u64, serde_json::Value)>,
}

/// How a source subtask runs besides its connector.
pub(crate) struct SourceSettings {
    /// Which source subtask (numbered over all source groups of the job).
    pub subtask: usize,
    /// Its input (channel) index at the task it sends to.
    pub input: usize,
    /// Barriers: only subtask 0 triggers them (the others follow its trigger).
    pub schedule: Option<BarrierSchedule>,
    pub resume: Option<SourceOffset>,
    pub track_offset: bool,
    pub idle_timeout: Option<Duration>,
    pub stall: Option<SourceStall>,
    /// The newest barrier id triggered before the attempt started (no source injects
    /// it or earlier ones); read once for all source subtasks, before any runs.
    pub injected: u64,
    /// Processing time, for processing-time attributes (`PROCTIME()` columns).
    pub clock: crate::clock::ProcessingClock,
}

impl SourceDriver {
    /// A driver for the source of `node`, resuming at `resume` if given.
    pub(crate) fn new(
        spec: &SourceSpec,
        node: &PlanNode,
        connectors: &ConnectorContext,
        ctx: TaskContext,
        settings: SourceSettings,
    ) -> Result<Self> {
        let SourceSettings {
            subtask,
            input,
            schedule,
            resume,
            track_offset,
            idle_timeout,
            stall,
            injected,
            clock,
        } = settings;
        let resume = resume.as_ref();
        let mut source = create_source(
            &spec.table,
            &spec.options,
            &spec.partition_keys,
            Arc::new(spec.physical_schema.as_arrow().clone()),
            spec.read_schema
                .as_ref()
                .map(|s| Arc::new(s.as_arrow().clone())),
            connectors,
            Arc::clone(&ctx.metrics),
        )?;
        let columns = physical_all(&spec.columns, &spec.physical_schema)?;
        let watermark = match &spec.watermark {
            // Typed against the table's columns (a query may alias the table: `FROM t x`).
            Some(wm) => {
                let table_schema = datafusion_common::DFSchema::try_from_qualified_schema(
                    spec.table.as_str(),
                    node.schema.as_arrow(),
                )?;
                Some(physical(&wm.expr, &table_schema)?)
            }
            None => None,
        };
        let fixed_delay = spec
            .watermark
            .as_ref()
            .and_then(|wm| wm.delay_ms.map(|d| (wm.rowtime, d)));
        let (mut rows, mut skip, mut watermark_ms) = (0, 0, WATERMARK_MIN);
        if let Some(offset) = resume {
            source.seek(&offset.position)?;
            rows = offset.rows;
            skip = offset.skip_rows;
            watermark_ms = offset.watermark_ms;
        }
        let fail_rows = ctx.failpoints.args("source-after-row");
        Ok(SourceDriver {
            source,
            columns,
            schema: Arc::new(node.schema.as_arrow().clone()),
            watermark,
            fixed_delay,
            watermark_ms,
            rows,
            skip,
            schedule,
            fail_rows,
            barrier_after_rows: None,
            track_offset,
            subtask,
            input,
            injected,
            idle_timeout,
            stall,
            proctime: node
                .schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, f)| sluice_common::types::is_proctime(f))
                .map(|(i, _)| i)
                .collect(),
            clock,
            ctx,
            awaiting_completion: Default::default(),
            split_watermarks: Default::default(),
            started_at: Instant::now(),
        })
    }

    /// Injects the barriers triggered since the last one (all with `offset`).
    fn inject_barriers(
        &mut self,
        tx: &SyncSender<Envelope>,
        offset: &dyn Fn() -> SourceOffset,
    ) -> bool {
        let triggered = self.ctx.coordination.trigger.load(Ordering::SeqCst);
        while self.injected < triggered {
            self.injected += 1;
            let id = self.injected;
            let offset = offset();
            self.awaiting_completion
                .push_back((id, offset.position.clone()));
            self.ctx.report(Event::Barrier {
                id,
                source: self.subtask,
                offset,
            });
            if tx.send((self.input, Message::Barrier(id))).is_err() {
                return false;
            }
        }
        true
    }

    /// The test hook's stall: waits, declaring the source idle after the idle timeout and
    /// passing on barriers meanwhile.
    fn stall(&mut self, tx: &SyncSender<Envelope>) -> bool {
        let Some(stall) = self.stall else {
            return true;
        };
        let started = Instant::now();
        let metrics = Arc::clone(&self.ctx.metrics);
        let waiting = || match stall {
            SourceStall::For(d) => started.elapsed() < d,
            SourceStall::UntilOutput => {
                JobMetrics::get(&metrics.rows_out) == 0 && started.elapsed() < UNTIL_OUTPUT_LIMIT
            }
        };
        // Nothing read yet: the restored position and the rows still to skip after it.
        let offset = SourceOffset {
            position: self.source.position(),
            skip_rows: self.skip,
            rows: self.rows,
            watermark_ms: self.watermark_ms,
        };
        while waiting() {
            if self.ctx.cancelled() {
                return false;
            }
            if !self.inject_barriers(tx, &|| offset.clone()) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Per-row watermarks of `data` (the watermark in effect when each row arrives) and
    /// the watermark after its last row.
    fn row_watermarks(&mut self, data: &RecordBatch) -> Result<(Option<Int64Array>, i64)> {
        let Some(expr) = &self.watermark else {
            return Ok((None, self.watermark_ms));
        };
        let (candidates, delay_ms) = match self.fixed_delay {
            Some((rowtime, delay)) => (event_times_ms(data.column(rowtime))?, delay),
            None => (event_times_ms(&evaluate(expr, data)?)?, 0),
        };
        let mut wms = Vec::with_capacity(data.num_rows());
        let split = self.source.last_split();
        if split.is_none() && !self.split_watermarks.is_empty() {
            // No split's rows (a quiet poll): splits may have become idle since, which can
            // raise the combined watermark. With every live split idle (`i64::MAX`) none
            // moves it (Flink marks the source idle; the idle watchdog does that here).
            let combined = self.other_splits_watermark("");
            let raised = if combined == i64::MAX {
                self.watermark_ms
            } else {
                combined
            };
            return Ok((None, self.watermark_ms.max(raised)));
        }
        if let Some(split) = split {
            // Per-split watermarks: this split's own, capped by the other splits'.
            let others = self.other_splits_watermark(&split);
            let mut own = self
                .split_watermarks
                .get(&split)
                .map_or(WATERMARK_MIN, |(w, _)| *w);
            let combined = |own: i64| self.watermark_ms.max(own.min(others));
            for i in 0..candidates.len() {
                wms.push(combined(own));
                if candidates.is_valid(i) {
                    own = own.max(candidates.value(i).saturating_sub(delay_ms));
                }
            }
            let last = combined(own);
            if data.num_rows() > 0 {
                self.split_watermarks.insert(split, (own, Instant::now()));
            }
            return Ok((Some(Int64Array::from(wms)), last));
        }
        let mut wm = self.watermark_ms;
        for i in 0..candidates.len() {
            wms.push(wm);
            if candidates.is_valid(i) {
                wm = wm.max(candidates.value(i).saturating_sub(delay_ms));
            }
        }
        Ok((Some(Int64Array::from(wms)), wm))
    }

    /// The minimum watermark of the splits other than `split` that are not idle
    /// (`i64::MAX` when all are): a split that has had no rows yet holds the watermark at
    /// its minimum until the idle timeout, as in Flink.
    fn other_splits_watermark(&self, split: &str) -> i64 {
        let idle = |since: Instant| self.idle_timeout.is_some_and(|t| since.elapsed() >= t);
        let mut min = i64::MAX;
        for s in self.source.live_splits() {
            if s == split {
                continue;
            }
            match self.split_watermarks.get(&s) {
                Some((w, seen)) if !idle(*seen) => min = min.min(*w),
                Some(_) => {}
                // No rows yet: it holds the watermark back until the idle timeout.
                None if !idle(self.started_at) => min = WATERMARK_MIN,
                None => {}
            }
        }
        min
    }

    /// Tells the source of the newest checkpoint that completed since the last call (its
    /// position at that checkpoint's barrier).
    fn notify_completed(&mut self) -> Result<()> {
        let Some(&(oldest, _)) = self.awaiting_completion.front() else {
            return Ok(());
        };
        let newest_completed = {
            let completed = self
                .ctx
                .coordination
                .completed
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            completed.range(oldest..).next_back().map(|(id, _)| *id)
        };
        let Some(done) = newest_completed else {
            // Settled without completing (failed or declined): no longer awaited.
            let settled = self.ctx.coordination.settled.load(Ordering::SeqCst);
            while self
                .awaiting_completion
                .front()
                .is_some_and(|(id, _)| *id <= settled)
            {
                self.awaiting_completion.pop_front();
            }
            return Ok(());
        };
        let mut position = None;
        while self
            .awaiting_completion
            .front()
            .is_some_and(|(id, _)| *id <= done)
        {
            position = self.awaiting_completion.pop_front().map(|(_, p)| p);
        }
        match position {
            Some(p) => self.source.checkpoint_complete(&p),
            None => Ok(()),
        }
    }

    /// Where a batch is cut (ends of segments, relative to its first row): after rows with
    /// a barrier or failpoint, and at its end.
    fn cuts(&self, n: usize) -> Vec<usize> {
        let (lo, hi) = (self.rows, self.rows + n as u64);
        let after = self
            .schedule
            .as_ref()
            .map(|s| &s.after_rows[..])
            .unwrap_or(&[]);
        let mut cuts: Vec<usize> = after
            .iter()
            .chain(&self.fail_rows)
            .filter(|r| **r > lo && **r < hi)
            .map(|r| (r - lo) as usize)
            .collect();
        cuts.push(n);
        cuts.sort_unstable();
        cuts.dedup();
        cuts
    }

    pub(crate) fn run(mut self, tx: &SyncSender<Envelope>) -> Result<()> {
        let me = self.input;
        let watchdog = self
            .idle_timeout
            .map(|t| IdleWatchdog::start(t, me, tx.clone()))
            .transpose()?;
        let send = |m: Message| {
            if let Some(w) = &watchdog {
                w.sending(true);
            }
            let sent = tx.send((me, m)).is_ok();
            if let Some(w) = &watchdog {
                w.sending(false);
            }
            sent
        };
        if self.watermark_ms > WATERMARK_MIN && !send(Message::Watermark(self.watermark_ms)) {
            return Ok(());
        }
        if !self.stall(tx) {
            return Ok(());
        }
        loop {
            if self.ctx.cancelled() {
                return Ok(());
            }
            self.notify_completed()?;
            let start_position = self.source.position();
            let Some(mut raw) = self.source.next_batch()? else {
                break;
            };
            // Rows of this batch emitted before the restored checkpoint.
            let mut base = 0u64;
            if self.skip > 0 {
                let n = raw.num_rows() as u64;
                base = self.skip.min(n);
                raw = raw.slice(base as usize, (n - base) as usize);
                self.skip -= base;
                // Read again only to find the restored offset: not rows in.
                self.ctx.metrics.rows_in.fetch_sub(base, Ordering::Relaxed);
                if raw.num_rows() == 0 {
                    continue;
                }
            }
            // A change-data-capture format's row kinds, last column: the changelog's ops.
            let ops = match raw.schema().fields().last() {
                Some(f) if f.name() == crate::connectors::changelog_json::OP_COLUMN => {
                    let last = raw.num_columns() - 1;
                    let ops = raw
                        .column(last)
                        .as_any()
                        .downcast_ref::<datafusion_common::arrow::array::Int8Array>()
                        .cloned();
                    raw = raw.project(&(0..last).collect::<Vec<_>>())?;
                    ops
                }
                _ => None,
            };
            let mut cols = evaluate_all(&self.columns, &raw)?;
            if !self.proctime.is_empty() {
                // Processing-time attributes: the time the batch is read.
                let now = self.clock.now_ms();
                for &c in &self.proctime {
                    cols[c] = Arc::new(
                        datafusion_common::arrow::array::TimestampMillisecondArray::from(
                            vec![now; raw.num_rows()],
                        )
                        .with_timezone("UTC"),
                    );
                }
            }
            let data = batch_with_schema(&self.schema, cols, raw.num_rows())?;
            let (row_watermarks, mut final_wm) = self.row_watermarks(&data)?;
            if let Some(pushed) = self.source.take_watermark() {
                final_wm = final_wm.max(pushed);
            }
            let n = data.num_rows();
            let mut a = 0usize;
            for b in self.cuts(n) {
                let segment = StreamBatch {
                    data: if a == 0 && b == n {
                        data.clone()
                    } else {
                        data.slice(a, b - a)
                    },
                    row_watermarks: row_watermarks.as_ref().map(|w| w.slice(a, b - a)),
                    ops: ops.as_ref().map(|o| o.slice(a, b - a)),
                };
                // A batch without rows only carries a source watermark.
                if b > a && !send(Message::Data(segment)) {
                    return Ok(()); // downstream stopped
                }
                self.rows += (b - a) as u64;
                let wm_after = match &row_watermarks {
                    Some(w) if b < n => w.value(b),
                    _ => final_wm,
                };
                if wm_after > self.watermark_ms {
                    self.watermark_ms = wm_after;
                    self.ctx
                        .metrics
                        .watermark_ms
                        .store(wm_after, Ordering::Relaxed);
                    if !send(Message::Watermark(wm_after)) {
                        return Ok(());
                    }
                }
                let (rows, watermark_ms) = (self.rows, self.watermark_ms);
                let end_position = if b == n {
                    Some(self.source.position())
                } else {
                    self.source.position_after(base as usize + b)
                };
                let here = || match &end_position {
                    Some(p) => SourceOffset {
                        position: p.clone(),
                        skip_rows: 0,
                        rows,
                        watermark_ms,
                    },
                    None => SourceOffset {
                        position: start_position.clone(),
                        skip_rows: base + b as u64,
                        rows,
                        watermark_ms,
                    },
                };
                if self.track_offset {
                    self.ctx
                        .coordination
                        .live_offset
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(self.subtask, here());
                }
                if self.barrier_due(b == n) {
                    let id = self.ctx.coordination.next_id.fetch_add(1, Ordering::SeqCst);
                    self.ctx
                        .coordination
                        .trigger
                        .fetch_max(id, Ordering::SeqCst);
                }
                if !self.inject_barriers(tx, &here) {
                    return Ok(());
                }
                if self.fail_rows.contains(&self.rows)
                    && self
                        .ctx
                        .failpoints
                        .fires("source-after-row", Some(self.rows))
                {
                    // Deterministic tests: checkpoints already triggered settle first.
                    self.ctx
                        .coordination
                        .wait_settled(Duration::from_secs(300), &self.ctx.cancel);
                    return Err(injected("source-after-row", Some(self.rows)));
                }
                a = b;
            }
        }
        self.ctx.report(Event::SourceFinished {
            source: self.subtask,
            offset: SourceOffset {
                position: self.source.position(),
                skip_rows: 0,
                rows: self.rows,
                watermark_ms: self.watermark_ms,
            },
        });
        let _ = send(Message::End);
        Ok(())
    }

    /// A barrier follows the rows emitted so far: the test hook's rows, or the interval
    /// elapsed (checked at the end of a batch).
    fn barrier_due(&mut self, batch_end: bool) -> bool {
        let Some(schedule) = &self.schedule else {
            return false;
        };
        // The test hook's rows are source subtask 0's.
        if self.subtask == 0
            && self.barrier_after_rows != Some(self.rows)
            && schedule.after_rows.binary_search(&self.rows).is_ok()
        {
            self.barrier_after_rows = Some(self.rows);
            return true;
        }
        // The interval: whichever source subtask first sees it elapsed triggers, so
        // checkpoints go on when some subtasks have finished.
        match schedule.interval {
            Some(interval) if batch_end => {
                let c = &self.ctx.coordination;
                let now = c.started.elapsed().as_millis() as u64;
                let due = c.next_due_ms.load(Ordering::SeqCst);
                now >= due
                    && c.next_due_ms
                        .compare_exchange(
                            due,
                            now + interval.as_millis() as u64,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        )
                        .is_ok()
            }
            _ => false,
        }
    }
}

/// Declares a source subtask idle (`Message::Idle`) when it has sent nothing for
/// `'table.exec.source.idle-timeout'`: a helper thread watches the time of the source's
/// last message (the source itself may be blocked reading). The next message the source
/// sends makes it active again (the input gate clears the status on data or watermarks).
struct IdleWatchdog {
    started: Instant,
    /// Milliseconds since `started` of the source's last message.
    last_ms: Arc<AtomicU64>,
    idle: Arc<AtomicBool>,
    /// The source is inside a send (maybe waiting for room: backpressure is not idleness).
    busy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl IdleWatchdog {
    fn start(timeout: Duration, subtask: usize, tx: SyncSender<Envelope>) -> Result<Self> {
        let w = IdleWatchdog {
            started: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
            idle: Arc::new(AtomicBool::new(false)),
            busy: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (last_ms, idle, busy, stop, started) = (
            Arc::clone(&w.last_ms),
            Arc::clone(&w.idle),
            Arc::clone(&w.busy),
            Arc::clone(&w.stop),
            w.started,
        );
        let tick = (timeout / 4).clamp(Duration::from_millis(1), Duration::from_millis(50));
        std::thread::Builder::new()
            .name(format!("sluice-idle-{subtask}"))
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    let quiet = started.elapsed().as_millis() as u64
                        - last_ms
                            .load(Ordering::Relaxed)
                            .min(started.elapsed().as_millis() as u64);
                    if quiet >= timeout.as_millis() as u64
                        && !busy.load(Ordering::SeqCst)
                        && !idle.swap(true, Ordering::SeqCst)
                    {
                        // A full channel means the source is not idle: skip.
                        let _ = tx.try_send((subtask, Message::Idle));
                    }
                }
            })
            .map_err(|e| SluiceError::io("starting the idle-source watchdog", e))?;
        Ok(w)
    }

    /// The source starts (`true`) or ends (`false`) sending a message.
    fn sending(&self, busy: bool) {
        self.busy.store(busy, Ordering::SeqCst);
        self.last_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::SeqCst);
        self.idle.store(false, Ordering::SeqCst);
    }
}

impl Drop for IdleWatchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The subtask (of `parallelism`) that owns `key_group` (of `max_parallelism`).
pub fn subtask_of_key_group(key_group: u32, parallelism: usize, max_parallelism: u32) -> usize {
    (key_group as usize * parallelism) / max_parallelism as usize
}

/// One output edge of a subtask: the subtasks of the consuming stage it sends to
/// (`crate::graph::Exchange`).
pub(crate) struct Target {
    /// `Some(keys)`: each row to the subtask that owns its key group (contiguous key-group
    /// ranges per subtask, as Flink's `KeyGroupRangeAssignment`); `None`: everything to
    /// the one subtask in `subtasks` (forward, or into a single subtask).
    pub keys: Option<Vec<Arc<dyn PhysicalExpr>>>,
    pub subtasks: Vec<SyncSender<Envelope>>,
    pub max_parallelism: u32,
    /// This subtask's input (channel) index at the consuming subtasks.
    pub input: usize,
}

/// Where a subtask's output goes: one [`Target`] per consuming stage's edge (several when
/// its output feeds several consumers). Rows go along every edge; watermarks, barriers and
/// the end to every consuming subtask. Empty for the last stage (its sink or the result).
#[derive(Default)]
pub(crate) struct Outputs(pub Vec<Target>);

impl Outputs {
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Runs the router of a source stage: the source subtask's messages through the
    /// stateless operators chained after it, then out.
    pub(crate) fn run_router(&self, chain: &mut Chain, rx: Receiver<Envelope>) -> Result<()> {
        // The source's channel closes without an end when it fails (it reports why).
        while let Ok((_, msg)) = rx.recv() {
            let mut ended = false;
            let mut stopped = false;
            chain.push(msg, &mut |m: Message| {
                let delivered = match m {
                    Message::Data(b) => self.route(b)?,
                    Message::End => {
                        ended = true;
                        self.broadcast(Message::End)
                    }
                    other => self.broadcast(other),
                };
                stopped |= !delivered;
                Ok(())
            })?;
            if ended || stopped {
                break; // at the end, or a subtask stopped (it reports why)
            }
        }
        Ok(())
    }

    /// Sends `m` to every consuming subtask; `false` when one of them has stopped.
    pub(crate) fn broadcast(&self, m: Message) -> bool {
        self.0.iter().all(|t| {
            t.subtasks
                .iter()
                .all(|s| s.send((t.input, m.clone())).is_ok())
        })
    }

    /// Sends the rows of `b` along every edge; `false` when a consumer has stopped.
    pub(crate) fn route(&self, b: StreamBatch) -> Result<bool> {
        let Some((last, others)) = self.0.split_last() else {
            return Ok(true);
        };
        // Every edge but the last takes a copy (columns shared); the last the batch itself.
        for t in others {
            if !t.route(b.clone())? {
                return Ok(false);
            }
        }
        last.route(b)
    }
}

impl Target {
    fn route(&self, b: StreamBatch) -> Result<bool> {
        use datafusion_common::arrow::array::UInt32Array;
        use datafusion_common::arrow::compute::take;
        let Some(keys) = &self.keys else {
            return Ok(self.subtasks[0]
                .send((self.input, Message::Data(b)))
                .is_ok());
        };
        let n = self.subtasks.len();
        let rows = b.num_rows();
        let key_columns = evaluate_all(keys, &b.data)?;
        let groups = crate::state::key_groups(&key_columns, rows, self.max_parallelism)?;
        let mut per: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (row, g) in groups.iter().enumerate() {
            per[subtask_of_key_group(*g, n, self.max_parallelism)].push(row as u32);
        }
        for (subtask, rows_of) in per.into_iter().enumerate() {
            if rows_of.is_empty() {
                continue;
            }
            let part = if rows_of.len() == rows {
                b.clone()
            } else {
                let idx = UInt32Array::from(rows_of);
                let columns = b
                    .data
                    .columns()
                    .iter()
                    .map(|c| take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let take_i64 = |a: &Int64Array| -> Result<Int64Array> {
                    Ok(take(a, &idx, None)?
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .cloned()
                        .expect("i64"))
                };
                StreamBatch {
                    data: RecordBatch::try_new(b.data.schema(), columns)?,
                    row_watermarks: b.row_watermarks.as_ref().map(take_i64).transpose()?,
                    ops: match &b.ops {
                        Some(o) => Some(
                            take(o, &idx, None)?
                                .as_any()
                                .downcast_ref::<datafusion_common::arrow::array::Int8Array>()
                                .cloned()
                                .expect("i8"),
                        ),
                        None => None,
                    },
                }
            };
            if self.subtasks[subtask]
                .send((self.input, Message::Data(part)))
                .is_err()
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Where an operator task without a sink puts the query's result rows.
pub(crate) enum ResultOutput {
    /// Straight to the reader (no two-phase commit).
    Direct(tokio::sync::mpsc::Sender<Result<RecordBatch>>),
    /// Held until the checkpoint after them completes (exactly-once results).
    Buffered(Vec<RecordBatch>),
}

/// The error of a stage whose next stage stopped (that stage reports its own failure).
fn downstream_stopped() -> SluiceError {
    SluiceError::Execution("the next stage of the job stopped".into())
}

/// The error an operator task stops with when the job's reader has gone away.
pub(crate) const RECEIVER_CLOSED: &str = "result receiver closed";

/// Runs a chain of operators and the sink (or the result output) of one subtask.
pub(crate) struct OperatorTask {
    pub chain: Chain,
    /// Each chained operator's index in the job's operator list (state file names).
    pub operator_indices: Vec<usize>,
    pub sink: Option<Box<dyn BatchSink>>,
    pub output: ResultOutput,
    /// An intermediate stage: where its output goes (no sink, no result output); empty
    /// for the last stage.
    pub outputs: Outputs,
    /// For each gate input (channel), which input of the first operator it feeds.
    pub channel_inputs: Vec<usize>,
    pub updating: bool,
    pub time_zone: String,
    pub subtask: usize,
    pub max_parallelism: u32,
    /// Combines the inputs (source subtasks or their routers).
    pub gate: crate::gate::InputGate,
    /// After a restore: the watermark the stage had reached at the checkpoint, passed
    /// through the chain first so the operators do not start below it.
    pub restored_watermark: Option<i64>,
    /// The stage (index of its first plan node), reported with each ack.
    pub stage: usize,
    /// The last watermark passed to the chain (ms).
    pub watermark_ms: i64,
    /// Processing time, for the operators' timers.
    pub clock: crate::clock::ProcessingClock,
    pub ctx: TaskContext,
}

/// How often a task waiting for a processing-time timer reads a manual clock.
const MANUAL_CLOCK_POLL: Duration = Duration::from_millis(5);

impl OperatorTask {
    pub(crate) fn run(mut self, rx: Receiver<Envelope>) -> Result<()> {
        if let Some(w) = self.restored_watermark {
            self.gate.restore_watermark(w);
            self.process(0, Message::Watermark(w))?;
        }
        let mut ready = Vec::new();
        loop {
            let received = match self.chain.next_processing_timer() {
                None => rx.recv().ok(),
                Some(due) => {
                    // Wake up for the timer; a manual clock (tests) is polled.
                    let wait = if self.clock.is_manual() {
                        MANUAL_CLOCK_POLL
                    } else {
                        Duration::from_millis((due - self.clock.now_ms()).clamp(0, 60_000) as u64)
                    };
                    match rx.recv_timeout(wait) {
                        Ok(m) => Some(m),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                            self.fire_due_timers()?;
                            continue;
                        }
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
                    }
                }
            };
            let Some((input, msg)) = received else {
                // Upstream failed (and reports it) or the attempt was cancelled.
                return Ok(());
            };
            // Timers due before this message fire first (a barrier snapshots after them).
            self.fire_due_timers()?;
            self.gate.push_tagged(input, msg, &mut ready);
            for (channel, msg) in std::mem::take(&mut ready) {
                if self.process(channel, msg)? {
                    return Ok(());
                }
            }
        }
    }

    /// Fires the chain's processing-time timers that are due; their output goes on.
    fn fire_due_timers(&mut self) -> Result<()> {
        // No clock read on the hot path of a chain without timers.
        let Some(due) = self.chain.next_processing_timer() else {
            return Ok(());
        };
        let now = self.clock.now_ms();
        if due > now {
            return Ok(());
        }
        let mut produced = Vec::new();
        self.chain.fire_processing_timers(now, &mut |m| {
            produced.push(m);
            Ok(())
        })?;
        for m in produced {
            self.deliver(m)?;
        }
        // Timers change state too (windows fired, idle keys forgotten).
        self.publish_state_rows();
        Ok(())
    }

    /// Processes one message the gate passed on (rows from gate input `channel`); `true`
    /// at the end.
    fn process(&mut self, channel: usize, msg: Message) -> Result<bool> {
        {
            match msg {
                Message::Barrier(id) => self.on_barrier(id)?,
                Message::End => {
                    for m in self.run_chain(Message::End)? {
                        self.deliver(m)?;
                    }
                    let committable = match self.sink.as_mut() {
                        Some(s) => s.finish()?,
                        None => self.take_buffered(),
                    };
                    self.ctx.failpoints.check("before-final-commit", None)?;
                    self.ctx.report(Event::Finished {
                        subtask: self.subtask,
                        committable,
                    });
                    return Ok(true);
                }
                msg => {
                    let is_data = matches!(msg, Message::Data(_));
                    if let Message::Watermark(w) = msg {
                        self.watermark_ms = self.watermark_ms.max(w);
                    }
                    let input = self.channel_inputs.get(channel).copied().unwrap_or(0);
                    let produced = self.run_chain_from(input, msg)?;
                    if is_data {
                        // State is updated; its output has not reached the sink yet.
                        self.ctx.failpoints.check_operator_batch()?;
                    }
                    for m in produced {
                        self.deliver(m)?;
                    }
                }
            }
        }
        Ok(false)
    }

    fn run_chain(&mut self, msg: Message) -> Result<Vec<Message>> {
        self.run_chain_from(0, msg)
    }

    /// Runs `msg` through the chain, rows as input `input` of its first operator.
    fn run_chain_from(&mut self, input: usize, msg: Message) -> Result<Vec<Message>> {
        let mut produced = Vec::new();
        self.chain.push_input(input, msg, &mut |m| {
            produced.push(m);
            Ok(())
        })?;
        self.publish_state_rows();
        Ok(produced)
    }

    /// Publishes the chain's state sizes to the job's metrics.
    fn publish_state_rows(&self) {
        for (rows, &operator) in self.chain.state_rows().iter().zip(&self.operator_indices) {
            if let Some(rows) = rows {
                self.ctx
                    .metrics
                    .set_state_rows(operator, self.subtask, *rows);
            }
        }
    }

    fn take_buffered(&mut self) -> Committable {
        match &mut self.output {
            ResultOutput::Buffered(rows) if !rows.is_empty() => {
                Committable::Rows(std::mem::take(rows))
            }
            _ => Committable::Nothing,
        }
    }

    fn on_barrier(&mut self, id: u64) -> Result<()> {
        self.ctx.failpoints.check("barrier", Some(id))?;
        let mut states = Vec::new();
        for (snapshot, &operator) in self
            .chain
            .snapshot(self.max_parallelism)?
            .into_iter()
            .zip(&self.operator_indices)
        {
            if let Some(batch) = snapshot {
                let rows = batch.num_rows() as u64;
                states.push((operator, crate::state::to_ipc(&batch)?, rows));
            }
        }
        let committable = match self.sink.as_mut() {
            Some(s) => s.pre_commit(id)?,
            None => self.take_buffered(),
        };
        self.ctx
            .failpoints
            .check("sink-after-precommit", Some(id))?;
        self.ctx.report(Event::Ack {
            id,
            subtask: self.subtask,
            states,
            committable,
            stage: self.stage,
            watermark_ms: self.watermark_ms,
        });
        // An intermediate stage passes the barrier on after its snapshot.
        if !self.outputs.is_empty() && !self.outputs.broadcast(Message::Barrier(id)) {
            return Err(downstream_stopped());
        }
        Ok(())
    }

    fn deliver(&mut self, m: Message) -> Result<()> {
        if !self.outputs.is_empty() {
            let delivered = match m {
                Message::Data(b) => self.outputs.route(b)?,
                other => self.outputs.broadcast(other),
            };
            return if delivered {
                Ok(())
            } else {
                Err(downstream_stopped())
            };
        }
        let mut b = match m {
            Message::Data(b) => b,
            Message::Watermark(w) => {
                if let Some(s) = self.sink.as_mut() {
                    s.on_watermark(w);
                }
                return Ok(());
            }
            _ => return Ok(()), // barriers and the end stop here
        };
        JobMetrics::add(&self.ctx.metrics.rows_out, b.num_rows() as u64);
        b.data = localize(&b.data, &self.time_zone)?;
        if let Some(s) = self.sink.as_mut() {
            return s.write(&b);
        }
        let data = if self.updating {
            with_op_column(&b)?
        } else {
            b.data
        };
        match &mut self.output {
            ResultOutput::Direct(out) => out
                .blocking_send(Ok(data))
                .map_err(|_| SluiceError::Execution(RECEIVER_CLOSED.into())),
            ResultOutput::Buffered(rows) => {
                rows.push(data);
                Ok(())
            }
        }
    }
}

/// `TIMESTAMP_LTZ` columns show and write as wall-clock times of the session time zone:
/// their values (instants) stay, their Arrow time zone becomes the session's.
pub(crate) fn localize(batch: &RecordBatch, time_zone: &str) -> Result<RecordBatch> {
    use datafusion_common::arrow::compute::cast;
    use datafusion_common::arrow::datatypes::DataType;
    let has_ltz = batch.schema().fields().iter().any(
        |f| matches!(f.data_type(), DataType::Timestamp(_, Some(tz)) if tz.as_ref() != time_zone),
    );
    if !has_ltz {
        return Ok(batch.clone());
    }
    let schema = Arc::new(localize_schema(&batch.schema(), time_zone));
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| cast(c, f.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

pub(crate) fn localize_schema(
    schema: &datafusion_common::arrow::datatypes::Schema,
    time_zone: &str,
) -> datafusion_common::arrow::datatypes::Schema {
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Timestamp(unit, Some(_)) => f
                .as_ref()
                .clone()
                .with_data_type(DataType::Timestamp(*unit, Some(time_zone.into()))),
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new(fields)
}

/// The name of the RowKind column of an updating result.
pub const OP_COLUMN: &str = "op";

/// The schema of an updating result: the `op` column (`+I`, `-U`, `+U`, `-D`; Utf8) and
/// then `schema`'s columns.
pub fn op_schema(
    schema: &datafusion_common::arrow::datatypes::Schema,
) -> datafusion_common::arrow::datatypes::Schema {
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
    let mut fields = vec![Arc::new(Field::new(OP_COLUMN, DataType::Utf8, false))];
    fields.extend(schema.fields().iter().cloned());
    Schema::new(fields)
}

/// The batch with its RowKinds as a leading `op` column of `+I`/`-U`/`+U`/`-D`.
pub(crate) fn with_op_column(b: &StreamBatch) -> Result<RecordBatch> {
    use datafusion_common::arrow::array::{ArrayRef, StringArray};
    let ops: Vec<&str> = (0..b.num_rows()).map(|i| b.row_kind(i).short()).collect();
    let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from(ops))];
    columns.extend(b.data.columns().iter().cloned());
    Ok(RecordBatch::try_new(
        Arc::new(op_schema(&b.data.schema())),
        columns,
    )?)
}
