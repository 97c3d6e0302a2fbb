//! Runs a plan as a job: starts its tasks, coordinates checkpoints, and restarts it after
//! failures.
//!
//! Files: `launch.rs` starts an attempt's tasks from the job graph (`crate::graph`);
//! `supervise.rs` is the event loop and restarts (checkpoint events go to the checkpoint
//! coordinator, `crate::checkpoint::coordinator`, which completes, declines and commits
//! checkpoints); `restore.rs` picks and prepares the restore point.
//! The checkpoint protocol, step by step, is in `crate::checkpoint`'s docs.
//!
//! A job runs as attempts. An attempt is the job graph's tasks (`crate::tasks`): source
//! subtasks, a router behind each when operators are chained onto the source stage, and
//! one operator task per subtask of each operator stage. The coordinator (one thread per
//! job) receives the tasks' [`Event`]s:
//!
//! - a checkpoint `id` is complete when the source reported its barrier (with the source
//!   offset) and every operator subtask acknowledged it (state snapshot and pre-committed
//!   sink output). The coordinator writes the state files, then the manifest, then commits
//!   what the sinks pre-committed up to `id` (two-phase commit), then prunes old
//!   checkpoints. Writing happens on the coordinator's thread while the tasks go on
//!   processing.
//! - a failure (error, panic, injected fault) in any task cancels the attempt. Under the
//!   restart strategy the coordinator starts a new attempt: sink files written after the
//!   restored checkpoint are discarded, what that checkpoint pre-committed is committed,
//!   operator state is restored (split by key group over the subtasks) and the source
//!   resumes at the checkpoint's offset (exactly-once / at-least-once), or, at most once,
//!   with empty state where the source had got to.
//! - the job ends when every operator subtask has finished its input; then all remaining
//!   pre-committed output is committed.

mod launch;
mod restore;
mod supervise;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use datafusion_common::arrow::array::{AsArray, RecordBatch};
use datafusion_common::arrow::compute::filter_record_batch;
use datafusion_common::arrow::datatypes::{SchemaRef, UInt32Type};
use sluice_common::plan::{OperatorSpec, PlanNode};
use sluice_common::{Result, SluiceError};

use crate::checkpoint::coordinator::{warn, AttemptShape, Coordinator};
use crate::checkpoint::{
    plan_fingerprint, CheckpointConfig, CheckpointStorage, CheckpointingMode, Manifest,
    RestoredCheckpoint,
};
use crate::connectors::{resolve_sink_directory, Committable, ConnectorContext};
use crate::metrics::JobMetrics;
use crate::tasks::{localize_schema, subtask_of_key_group, Coordination, Event, RECEIVER_CLOSED};

pub use crate::tasks::{op_schema, SourceStall, OP_COLUMN};

/// How a job runs.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// Where connectors resolve relative paths, rows per batch, job id.
    pub connectors: ConnectorContext,
    /// Subtasks of the keyed operator and what follows it (`'parallelism.default'`).
    pub parallelism: usize,
    /// Number of key groups (`'pipeline.max-parallelism'`, default 128).
    pub max_parallelism: u32,
    /// Checkpoints, result guarantee, restarts.
    pub checkpoint: CheckpointConfig,
    /// `'pipeline.name'`: names the job's checkpoint directory (default:
    /// `job-<plan fingerprint>`).
    pub name: Option<String>,
    /// `'table.exec.state.ttl'`: keys of updating aggregates idle (no row, in processing
    /// time) for this long are forgotten (Flink's idle state retention).
    pub state_ttl: Option<std::time::Duration>,
    /// Processing time (the system clock unless a test or application sets one).
    pub clock: crate::clock::ProcessingClock,
    /// `'table.exec.source.idle-timeout'`: a source subtask without data this long is left
    /// out of the watermark until it sends again.
    pub idle_timeout: Option<std::time::Duration>,
    /// Test hook (`'sluice.test.source-stall'` =
    /// `'<subtask>:<duration>|until-output[:first],...'`): those source subtasks wait
    /// before reading (`first`: only in the job's first attempt, not after restarts).
    pub source_stall: Vec<(usize, SourceStall, bool)>,
    /// Test hook (`'sluice.test.restart-parallelism'`): restart `n` (1-based) runs at
    /// `restart_parallelism[(n - 1) % len]` subtasks, so recovery re-splits state.
    pub restart_parallelism: Vec<usize>,
}

/// A started job: its output rows, metrics, and the thread coordinating it.
pub struct RunningJob {
    /// Counters, updated while the job runs.
    pub metrics: Arc<JobMetrics>,
    /// Schema of the output rows: the plan root's columns, after a leading `op` column
    /// (`+I`, `-U`, `+U`, `-D`) when the result is updating.
    pub schema: SchemaRef,
    /// The result is a changelog (its batches start with the `op` column).
    pub updating: bool,
    output: tokio::sync::mpsc::Receiver<Result<RecordBatch>>,
    coordinator: Option<JoinHandle<()>>,
    handle: JobHandle,
}

/// Controls of a running job that can be shared (cloned) and used from any thread while
/// another thread reads its output: checkpoints on demand, stop, metrics.
#[derive(Clone)]
pub struct JobHandle {
    /// The job's id: `<job name>-<unique run id>`, as its part files are named.
    pub id: String,
    /// Counters, updated while the job runs.
    pub metrics: Arc<JobMetrics>,
    control: Arc<Coordination>,
    /// The job checkpoints (has checkpoint storage).
    checkpoints: bool,
}

impl RunningJob {
    /// The next output batch, waiting for it; `None` when the job has finished.
    /// An `Err` is the job's failure (the job stops).
    ///
    /// Must not be called from inside an async runtime; use [`RunningJob::next`] there.
    pub fn blocking_next(&mut self) -> Option<Result<RecordBatch>> {
        self.output.blocking_recv()
    }

    /// The next output batch; `None` when the job has finished.
    pub async fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.output.recv().await
    }

    /// A shareable handle on the job's controls and metrics.
    pub fn handle(&self) -> JobHandle {
        self.handle.clone()
    }

    /// The job's id (see [`JobHandle::id`]).
    pub fn id(&self) -> &str {
        &self.handle.id
    }

    /// See [`JobHandle::checkpoint_now`].
    pub fn checkpoint_now(&self) -> Result<u64> {
        self.handle.checkpoint_now()
    }

    /// See [`JobHandle::wait_for_checkpoint`].
    pub fn wait_for_checkpoint(&self, id: u64, timeout: std::time::Duration) -> Result<String> {
        self.handle.wait_for_checkpoint(id, timeout)
    }

    /// See [`JobHandle::stop`].
    pub fn stop(&self) {
        self.handle.stop()
    }

    /// See [`JobHandle::stop_with_checkpoint`].
    pub fn stop_with_checkpoint(&self, timeout: std::time::Duration) -> Result<String> {
        self.handle.stop_with_checkpoint(timeout)
    }

    /// Waits for the job to stop (after the output is drained).
    pub fn join(mut self) {
        if let Some(t) = self.coordinator.take() {
            let _ = t.join();
        }
    }
}

/// The job's output as an async stream of batches (`futures::StreamExt` and
/// `tokio_stream` adapters apply): the same items as [`RunningJob::next`].
impl futures_core::Stream for RunningJob {
    type Item = Result<RecordBatch>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.get_mut().output.poll_recv(cx)
    }
}

/// Marks the job ended when the coordinator thread ends, even by a panic.
struct EndedGuard(Arc<Coordination>);

impl Drop for EndedGuard {
    fn drop(&mut self) {
        self.0.ended.store(true, Ordering::SeqCst);
    }
}

impl JobHandle {
    /// Triggers a checkpoint now, besides the periodic ones; returns its id. The sources
    /// inject its barrier at their next batch boundary.
    ///
    /// # Errors
    /// The job takes no checkpoints (set `'execution.checkpointing.interval'`, e.g.
    /// `'1 h'` for checkpoints on demand only).
    pub fn checkpoint_now(&self) -> Result<u64> {
        if !self.checkpoints {
            return Err(SluiceError::Config(
                "the job takes no checkpoints: set 'execution.checkpointing.interval' (e.g. \
                 '1 h' to take them only on demand)"
                    .into(),
            ));
        }
        Ok(self.control.trigger_now())
    }

    /// Waits until checkpoint `id` has completed; returns its location
    /// (`<dir>/<job>/chk-<id>`, what `--from-checkpoint` takes).
    ///
    /// # Errors
    /// The checkpoint failed (a write failed, or the job failed or stopped first), or
    /// `timeout` passed.
    pub fn wait_for_checkpoint(&self, id: u64, timeout: std::time::Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(path) = self
                .control
                .completed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
            {
                return Ok(path.clone());
            }
            if self.control.settled.load(Ordering::SeqCst) >= id {
                return Err(SluiceError::Execution(format!("checkpoint {id} failed")));
            }
            if self.is_finished() {
                return Err(SluiceError::Execution(format!(
                    "the job ended before checkpoint {id} completed"
                )));
            }
            if Instant::now() >= deadline {
                return Err(SluiceError::Execution(format!(
                    "checkpoint {id} did not complete within {timeout:?}"
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Stops the job: the sources stop reading and the job ends (its output ends);
    /// nothing after the last completed checkpoint is committed.
    pub fn stop(&self) {
        self.control.stop_requested.store(true, Ordering::SeqCst);
    }

    /// The job was asked to stop ([`JobHandle::stop`]).
    pub fn stop_requested(&self) -> bool {
        self.control.stop_requested.load(Ordering::SeqCst)
    }

    /// The job has ended: finished, failed (after its restarts) or stopped.
    pub fn is_finished(&self) -> bool {
        self.control.ended.load(Ordering::SeqCst)
    }

    /// Takes a checkpoint, waits for it, then stops the job (Flink's stop with savepoint):
    /// a new job restores from the returned location (`'execution.state-recovery.path'`,
    /// `--from-checkpoint`) and continues exactly where this one stopped.
    ///
    /// # Errors
    /// As [`Self::checkpoint_now`] and [`Self::wait_for_checkpoint`]; the job is then not
    /// stopped.
    pub fn stop_with_checkpoint(&self, timeout: std::time::Duration) -> Result<String> {
        let id = self.checkpoint_now()?;
        let path = self.wait_for_checkpoint(id, timeout)?;
        self.stop();
        Ok(path)
    }
}

/// Starts running `plan`.
///
/// # Errors
/// Connector errors (missing options, a path that does not exist), expressions that
/// cannot be lowered, checkpoint storage that cannot be opened, and a checkpoint to
/// restore from that is missing, corrupt or of another query are reported here, before
/// any row is read; data errors arrive through [`RunningJob`].
pub fn start(plan: &PlanNode, config: &JobConfig) -> Result<RunningJob> {
    start_all(std::slice::from_ref(plan), config)
}

/// Starts the job of several plans at once (a statement set: each plan ends in a sink):
/// one job graph, a source that several plans read is read once, one checkpoint covers
/// every sink and commits them together. The result stream carries no rows (only the
/// job's end or error); see [`start`].
///
/// # Errors
/// As [`start`]; no plan at all.
pub fn start_all(plans: &[PlanNode], config: &JobConfig) -> Result<RunningJob> {
    let Some(plan) = plans.first() else {
        return Err(SluiceError::Internal("a job of no plans".into()));
    };
    if config.parallelism > config.max_parallelism as usize {
        // Each subtask owns a non-empty range of key groups (Flink rejects this too).
        return Err(SluiceError::Config(format!(
            "'parallelism.default' ({}) is larger than 'pipeline.max-parallelism' ({}), the \
             number of key groups each keyed subtask owns a share of",
            config.parallelism, config.max_parallelism
        )));
    }
    // Two filesystem sinks in one directory would write part files of the same names.
    let mut directories: Vec<(PathBuf, &str)> = Vec::new();
    for p in plans {
        if let OperatorSpec::Sink(spec) = &p.spec {
            if let Some(dir) = resolve_sink_directory(&spec.options, &config.connectors) {
                if let Some((_, other)) = directories.iter().find(|(d, _)| *d == dir) {
                    return Err(SluiceError::Config(format!(
                        "tables '{other}' and '{}' of one job write to the same directory \
                         '{}': give each sink its own 'path'",
                        spec.table,
                        dir.display()
                    )));
                }
                directories.push((dir, &spec.table));
            }
        }
    }
    let metrics = Arc::new(JobMetrics::default());
    let updating = plans.len() == 1 && plan.is_updating();
    let (out_tx, out_rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(16);
    let fingerprint = plan_fingerprint(plans);
    let job_name = config
        .name
        .clone()
        .unwrap_or_else(|| format!("job-{fingerprint}"));
    // Part files are named after the job (stable across runs of the same query) and the
    // run, so a restore finds what earlier runs of the job left behind.
    // `-` separates the parts of a part file's name, so it never appears in the job's:
    // job `orders` must not match the files of job `orders-eu`.
    let file_job: String = job_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let mut config = config.clone();
    config.connectors.job_id = format!("{file_job}-{}", config.connectors.job_id);
    let config = &config;
    let cp = &config.checkpoint;
    let working_dir = &config.connectors.working_dir;
    let storage = if cp.enabled() || cp.restore.is_some() {
        Some(CheckpointStorage::open(&cp.dir, working_dir, &job_name)?)
    } else {
        None
    };
    let claim = match &storage {
        Some(s) if cp.enabled() => Some(CheckpointDirClaim::claim(s.display())?),
        _ => None,
    };
    let mut initial_storage = None;
    let restored = match (cp.restore.as_deref(), &storage) {
        (None, _) | (_, None) => None,
        (Some("latest"), Some(storage)) => {
            let found = storage.latest(&mut |w| warn(&w))?;
            Some(found.ok_or_else(|| {
                SluiceError::Config(format!(
                    "no complete checkpoint of this query in '{}' to start from (checkpoints \
                     are kept per query, by its plan fingerprint or 'pipeline.name': a \
                     changed query or plan setting, such as a table's 'WITH' options or \
                     'table.exec.source.cdc-events-duplicate', looks in another directory)",
                    storage.display()
                ))
            })?)
        }
        (Some(path), Some(_)) => {
            let (other, id) = CheckpointStorage::open_checkpoint_path(path, working_dir)?;
            let loaded = other.load(id).map_err(|e| {
                SluiceError::Config(format!(
                    "cannot start from '{path}': {}",
                    e.to_string().trim_start_matches("Execution error: ")
                ))
            })?;
            initial_storage = Some(other);
            Some(loaded)
        }
    };
    if let Some(r) = &restored {
        check_compatible(&r.manifest, &fingerprint, config)?;
    }
    let existing = match &storage {
        Some(s) => s.checkpoint_ids()?.last().copied().unwrap_or(0),
        None => 0,
    };
    let restored_id = restored.as_ref().map(|r| r.manifest.checkpoint_id);
    let first_id = existing.max(restored_id.unwrap_or(0)) + 1;
    let coordination = Arc::new(Coordination::new(first_id, cp.interval));
    let mut job = Job {
        plans: plans.to_vec(),
        config: config.clone(),
        metrics: Arc::clone(&metrics),
        updating,
        checkpoints: Coordinator {
            storage,
            initial_storage,
            config: config.checkpoint.clone(),
            job_name: job_name.clone(),
            fingerprint,
            parallelism: config.parallelism,
            max_parallelism: config.max_parallelism,
            coordination: Arc::clone(&coordination),
            metrics: Arc::clone(&metrics),
            out_tx: out_tx.clone(),
            pending: BTreeMap::new(),
            finished_sources: BTreeMap::new(),
            finished_subtasks: Default::default(),
            declined_told: false,
            uncommitted: BTreeMap::new(),
            lineage: Vec::new(),
            released_results: Default::default(),
        },
        out_tx,
        coordination,
        job_name,
        file_job,
        first_id,
        initial: restored,
    };
    let control = Arc::clone(&job.coordination);
    let checkpoints = job.checkpoints.storage.is_some() && cp.mode != CheckpointingMode::AtMostOnce;
    let (events_tx, events_rx) = channel();
    let initial = job.initial.clone();
    job.prepare_restore(initial.as_ref())?;
    let attempt = job.launch(0, initial.as_ref(), None, &events_tx)?;
    let coordinator = std::thread::Builder::new()
        .name("sluice-coordinator".into())
        .spawn(move || {
            let _ended = EndedGuard(Arc::clone(&job.coordination));
            let _claim = claim;
            job.supervise(attempt, events_tx, events_rx);
        })
        .map_err(|e| SluiceError::io("starting the job coordinator", e))?;
    let mut schema = localize_schema(plan.schema.as_arrow(), &config.connectors.time_zone);
    if updating {
        schema = op_schema(&schema);
    }
    Ok(RunningJob {
        metrics: Arc::clone(&metrics),
        updating,
        schema: Arc::new(schema),
        output: out_rx,
        coordinator: Some(coordinator),
        handle: JobHandle {
            id: config.connectors.job_id.clone(),
            metrics: Arc::clone(&metrics),
            control,
            checkpoints,
        },
    })
}

/// The checkpoint directories of this process's running jobs.
static CLAIMED_CHECKPOINT_DIRS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A running job's claim on its checkpoint directory, released when dropped (when the
/// job's coordinator ends). Two running jobs of one query would number checkpoints in the
/// same directory and overwrite each other's (Flink gives every job its own id; our
/// directory is per query, so `--from-checkpoint latest` finds it).
struct CheckpointDirClaim(String);

impl CheckpointDirClaim {
    /// Claims `dir`, waiting up to 2 s for a job that is stopping to release it.
    ///
    /// # Errors
    /// Another running job of this process checkpoints into `dir`.
    fn claim(dir: &str) -> Result<Self> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            {
                let mut claimed = CLAIMED_CHECKPOINT_DIRS
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if !claimed.iter().any(|d| d == dir) {
                    claimed.push(dir.to_string());
                    return Ok(CheckpointDirClaim(dir.to_string()));
                }
            }
            if std::time::Instant::now() >= deadline {
                return Err(SluiceError::Config(format!(
                    "a running job of this query already checkpoints into '{dir}'; stop it, \
                     or give this one its own 'pipeline.name'"
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for CheckpointDirClaim {
    fn drop(&mut self) {
        let mut claimed = CLAIMED_CHECKPOINT_DIRS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        claimed.retain(|d| *d != self.0);
    }
}

/// A checkpoint restores only into the query that took it, with the same key groups.
fn check_compatible(manifest: &Manifest, fingerprint: &str, config: &JobConfig) -> Result<()> {
    if manifest.plan_fingerprint != fingerprint {
        let version = env!("CARGO_PKG_VERSION");
        let cause = if manifest.engine_version == version {
            "another query, or the same query with other plan settings (such as a table's \
             'WITH' options)"
                .to_string()
        } else {
            format!(
                "Sluice {} (this is {version}), or another query",
                manifest.engine_version
            )
        };
        return Err(SluiceError::Config(format!(
            "checkpoint {} was taken by {cause}: plan fingerprint {}, this query's is \
             {fingerprint} (in a shell session, 'execution.state-recovery.path' stays set \
             after a restore: RESET it to start fresh)",
            manifest.checkpoint_id, manifest.plan_fingerprint
        )));
    }
    if manifest.max_parallelism != config.max_parallelism {
        return Err(SluiceError::Config(format!(
            "checkpoint {} has {} key groups ('pipeline.max-parallelism'); the job has {}: \
             state cannot be re-split",
            manifest.checkpoint_id, manifest.max_parallelism, config.max_parallelism
        )));
    }
    Ok(())
}

/// One attempt's tasks.
struct Attempt {
    number: u32,
    /// Its sources and operator subtasks.
    shape: AttemptShape,
    cancel: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Attempt {
    /// Cancels the tasks and waits for them. A failed task has dropped its channels, so
    /// the others see their input or output close and stop.
    fn stop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The coordinator's view of a job.
struct Job {
    /// The job's plans: one query or `INSERT`, or the `INSERT`s of a statement set.
    plans: Vec<PlanNode>,
    config: JobConfig,
    metrics: Arc<JobMetrics>,
    updating: bool,
    out_tx: tokio::sync::mpsc::Sender<Result<RecordBatch>>,
    /// The checkpoint coordinator (checkpoints in flight, output waiting for them).
    checkpoints: Coordinator,
    coordination: Arc<Coordination>,
    job_name: String,
    /// The job's name in part-file names (`[A-Za-z0-9_]` only).
    file_job: String,
    /// This run's first checkpoint id: checkpoints below it belong to earlier runs, and
    /// a restart never restores them (it falls back to the one the job started from).
    first_id: u64,
    /// The checkpoint the job started from (`--from-checkpoint`), if any.
    initial: Option<RestoredCheckpoint>,
}

impl Job {
    fn mode(&self) -> CheckpointingMode {
        self.config.checkpoint.mode
    }
}
