//! Checkpoint settings: the guarantee (`'execution.checkpointing.mode'`), interval,
//! storage directory, retention and the restart strategy.

use std::time::Duration;

use sluice_common::{Result, SluiceError};

use super::FailPoints;

/// The result guarantee a job declares (`'execution.checkpointing.mode'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointingMode {
    /// `EXACTLY_ONCE` (default): barriers aligned, state updated once per event; with a
    /// two-phase-commit sink, the committed output equals the failure-free output.
    ExactlyOnce,
    /// `AT_LEAST_ONCE`: state restored and sources replayed, sinks write directly: no
    /// event is lost, results after a restore may repeat.
    AtLeastOnce,
    /// `AT_MOST_ONCE` (ours): a failed job restarts with empty state and its sources
    /// continue where they were: events may be lost, none is counted twice.
    AtMostOnce,
}

impl CheckpointingMode {
    /// Parses Flink's spelling (`EXACTLY_ONCE`, `AT_LEAST_ONCE`) and ours
    /// (`AT_MOST_ONCE`), any case, `-` or `_`.
    ///
    /// # Errors
    /// Any other value.
    pub fn parse(value: &str) -> Result<Self> {
        match value.trim().to_ascii_uppercase().replace('-', "_").as_str() {
            "EXACTLY_ONCE" => Ok(CheckpointingMode::ExactlyOnce),
            "AT_LEAST_ONCE" => Ok(CheckpointingMode::AtLeastOnce),
            "AT_MOST_ONCE" => Ok(CheckpointingMode::AtMostOnce),
            _ => Err(SluiceError::Config(format!(
                "'execution.checkpointing.mode' must be EXACTLY_ONCE, AT_LEAST_ONCE or \
                 AT_MOST_ONCE, found '{value}'"
            ))),
        }
    }

    /// The name as written in SQL.
    pub fn name(self) -> &'static str {
        match self {
            CheckpointingMode::ExactlyOnce => "EXACTLY_ONCE",
            CheckpointingMode::AtLeastOnce => "AT_LEAST_ONCE",
            CheckpointingMode::AtMostOnce => "AT_MOST_ONCE",
        }
    }
}

/// What happens when a task fails (`'restart-strategy.type'` = `fixed-delay`): wait
/// `delay`, restart from the latest complete checkpoint; after `attempts` restarts the job
/// fails with the cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartStrategy {
    /// Restarts allowed (`'restart-strategy.fixed-delay.attempts'`).
    pub attempts: u32,
    /// Wait before each restart (`'restart-strategy.fixed-delay.delay'`).
    pub delay: Duration,
}

/// How a job checkpoints and recovers.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// `'execution.checkpointing.interval'`: time between checkpoints; `None`: no periodic
    /// checkpoints.
    pub interval: Option<Duration>,
    /// `'execution.checkpointing.mode'`.
    pub mode: CheckpointingMode,
    /// `'execution.checkpointing.dir'` (or Flink 1's `'state.checkpoints.dir'`): URL or
    /// path; default `checkpoints` under the working directory.
    pub dir: String,
    /// `'execution.checkpointing.num-retained'` (default 3): complete checkpoints kept.
    pub num_retained: usize,
    /// `None`: a failure fails the job.
    pub restart: Option<RestartStrategy>,
    /// Start from a checkpoint: `latest` (the newest complete one of this job) or the
    /// path/URL of a `chk-<id>` directory.
    pub restore: Option<String>,
    /// Test hook (`'sluice.test.checkpoint-after-rows'`): also inject a barrier right
    /// after each of these source rows (1-based, counted over the whole input).
    pub checkpoint_after_rows: Vec<u64>,
    /// Test hook (`'sluice.test.failpoints'`): injected failures.
    pub failpoints: FailPoints,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: None,
            mode: CheckpointingMode::ExactlyOnce,
            dir: "checkpoints".into(),
            num_retained: 3,
            restart: None,
            restore: None,
            checkpoint_after_rows: Vec::new(),
            failpoints: FailPoints::default(),
        }
    }
}

impl CheckpointConfig {
    /// Checkpoints are taken (periodically or by the test hook).
    pub fn enabled(&self) -> bool {
        self.mode != CheckpointingMode::AtMostOnce
            && (self.interval.is_some() || !self.checkpoint_after_rows.is_empty())
    }

    /// Sinks commit in two phases.
    pub fn two_phase(&self) -> bool {
        self.enabled() && self.mode == CheckpointingMode::ExactlyOnce
    }
}
//! Test hooks that inject failures at named points of the checkpoint protocol
//! (`'sluice.test.failpoints'`).

use std::sync::{Arc, Mutex};

use sluice_common::{Result, SluiceError};

/// Failures injected at named points, for tests (a failpoint registry per job, shared by
/// its tasks and kept across restarts).
///
/// Spec: a comma-separated list of `point[:arg][xK]`; a point fires the first `K` times
/// (default 1) it is reached with a matching `arg`:
///
/// | point | where the job fails |
/// |---|---|
/// | `source-after-row:N` | the source, right after sending row `N` (once checkpoints already triggered have settled) |
/// | `operator-after-update:N` | an operator task, after the `N`-th batch updated its state, before its output reaches the sink |
/// | `barrier:ID` | an operator task, when barrier `ID` arrives (the checkpoint never completes) |
/// | `upload:ID` | writing a state file of checkpoint `ID` (the checkpoint fails; the job goes on) |
/// | `after-manifest:ID` | the coordinator, after writing checkpoint `ID`'s manifest, before the sinks commit |
/// | `sink-after-precommit:ID` | an operator task, after its sink pre-committed `ID` |
/// | `before-final-commit` | an operator task, after the end of input was pre-committed, before it is committed |
#[derive(Debug, Clone, Default)]
pub struct FailPoints {
    points: Arc<Mutex<Vec<FailPoint>>>,
    /// Data batches processed by operator tasks (for `operator-after-update`).
    batches: Arc<std::sync::atomic::AtomicU64>,
}

#[derive(Debug)]
struct FailPoint {
    name: String,
    arg: Option<u64>,
    remaining: u32,
}

const FAILPOINT_NAMES: [&str; 7] = [
    "source-after-row",
    "operator-after-update",
    "barrier",
    "upload",
    "after-manifest",
    "sink-after-precommit",
    "before-final-commit",
];

impl FailPoints {
    /// Parses a spec (see the type).
    ///
    /// # Errors
    /// An unknown point or a malformed number.
    pub fn parse(spec: &str) -> Result<Self> {
        let mut points = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || {
                SluiceError::Config(format!(
                    "bad failpoint '{item}': expected point[:arg][xK] with point one of {}",
                    FAILPOINT_NAMES.join(", ")
                ))
            };
            let (body, times) = match item.rsplit_once('x') {
                Some((b, k)) if k.chars().all(|c| c.is_ascii_digit()) && !k.is_empty() => {
                    (b, k.parse::<u32>().map_err(|_| bad())?)
                }
                _ => (item, 1),
            };
            let (name, arg) = match body.split_once(':') {
                Some((n, a)) => (n, Some(a.trim().parse::<u64>().map_err(|_| bad())?)),
                None => (body, None),
            };
            if !FAILPOINT_NAMES.contains(&name.trim()) {
                return Err(bad());
            }
            points.push(FailPoint {
                name: name.trim().to_string(),
                arg,
                remaining: times,
            });
        }
        Ok(FailPoints {
            points: Arc::new(Mutex::new(points)),
            batches: Default::default(),
        })
    }

    /// Whether point `name` fires now for `arg` (consuming one of its firings).
    pub fn fires(&self, name: &str, arg: Option<u64>) -> bool {
        let mut points = self.points.lock().unwrap_or_else(|e| e.into_inner());
        for p in points.iter_mut() {
            if p.name == name && p.remaining > 0 && (p.arg.is_none() || p.arg == arg) {
                p.remaining -= 1;
                return true;
            }
        }
        false
    }

    /// The arguments configured for point `name` (sorted).
    pub fn args(&self, name: &str) -> Vec<u64> {
        let points = self.points.lock().unwrap_or_else(|e| e.into_inner());
        let mut args: Vec<u64> = points
            .iter()
            .filter(|p| p.name == name)
            .filter_map(|p| p.arg)
            .collect();
        args.sort_unstable();
        args.dedup();
        args
    }

    /// `Err` (an injected failure) when point `name` fires for `arg`.
    pub fn check(&self, name: &str, arg: Option<u64>) -> Result<()> {
        if self.fires(name, arg) {
            return Err(injected(name, arg));
        }
        Ok(())
    }

    /// Counts a data batch processed by an operator task and checks
    /// `operator-after-update`.
    pub fn check_operator_batch(&self) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let n = self
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        self.check("operator-after-update", Some(n))
    }

    /// No failpoint is configured.
    pub fn is_empty(&self) -> bool {
        self.points
            .lock()
            .map(|p| p.iter().all(|p| p.remaining == 0))
            .unwrap_or(true)
    }
}

/// The error of an injected failure.
pub fn injected(name: &str, arg: Option<u64>) -> SluiceError {
    match arg {
        Some(a) => SluiceError::Execution(format!("injected failure at {name}:{a}")),
        None => SluiceError::Execution(format!("injected failure at {name}")),
    }
}
//! What a checkpoint records: source offsets, state files, pre-committed sink output and
//! held result rows (the manifest, `_manifest.json`), and the plan fingerprint that ties a
//! checkpoint to its query.

use std::collections::BTreeMap;

use datafusion_common::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::connectors::filesystem::PendingFile;

/// Where a source resumes: its connector position, rows to skip after it (a barrier
/// inside a batch), and the source's own progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceOffset {
    /// The connector's position (`Source::position`) before the batch the barrier split,
    /// or after the last batch.
    pub position: serde_json::Value,
    /// Rows after `position` already emitted before the barrier.
    pub skip_rows: u64,
    /// Rows emitted before the barrier, in all (the test hooks count them).
    pub rows: u64,
    /// The source's watermark at the barrier (ms).
    pub watermark_ms: i64,
}

/// One state file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateFile {
    /// The operator's index in the job's operator chain (from the source).
    pub operator: usize,
    /// The subtask that wrote it.
    pub subtask: usize,
    /// Name inside the checkpoint directory.
    pub name: String,
    /// Size (bytes).
    pub bytes: u64,
    /// CRC-32 (IEEE) of the bytes.
    pub crc32: u32,
    /// Rows (keys, windows, buffered rows: the operator's snapshot rows).
    pub rows: u64,
}

/// One source group's offsets in a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SourceGroupOffsets {
    /// The source table.
    pub table: String,
    /// Per source subtask (its `'scan.parallelism'`), where it resumes.
    pub offsets: Vec<SourceOffset>,
}

/// The manifest of a complete checkpoint (`_manifest.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Checkpoint id (increasing over the job's life, across restarts).
    pub checkpoint_id: u64,
    /// The job's name (the directory the checkpoint is in).
    pub job: String,
    /// Fingerprint of the plan: a checkpoint only restores into the same query.
    pub plan_fingerprint: String,
    /// Sluice's version.
    pub engine_version: String,
    /// `EXACTLY_ONCE` or `AT_LEAST_ONCE`.
    pub mode: String,
    /// When the checkpoint completed (ms since the epoch).
    pub completed_at_ms: i64,
    /// Subtasks of the keyed operators when it was taken.
    pub parallelism: usize,
    /// Key groups (`'pipeline.max-parallelism'`).
    pub max_parallelism: u32,
    /// Each source group's offsets at the barrier: one group per source table the job
    /// reads (a table read by several branches is one group), in the job graph's order,
    /// with one offset per source subtask.
    pub sources: Vec<SourceGroupOffsets>,
    /// The watermark (ms) each stage's operators had reached at the barrier (minimum
    /// over its subtasks), by the index of the stage's first operator: restored so that no
    /// late row recreates a window that had fired.
    #[serde(default)]
    pub stage_watermarks: BTreeMap<usize, i64>,
    /// The state files.
    pub files: Vec<StateFile>,
    /// Sink files pre-committed up to this checkpoint, committed when it completes (and
    /// again, idempotently, when it is restored).
    pub pending_commits: Vec<PendingFile>,
    /// The runs whose output leads to this checkpoint (their part-file job ids): the run
    /// that took it and the runs it resumed from, oldest first. A restore rewinds only
    /// their sink output; other runs of the same query are left alone. Empty in
    /// manifests of older versions (then every run of the job is rewound).
    #[serde(default)]
    pub runs: Vec<String>,
    /// Query result rows (a `SELECT`'s result stream under exactly-once) pre-committed
    /// up to this checkpoint: Arrow IPC file `results.arrow`. They are released to the
    /// reader when the checkpoint completes, which `_results_released` records; a run
    /// that restores the checkpoint without that marker (the process stopped in
    /// between) releases them first.
    #[serde(default)]
    pub pending_results: Option<StateFile>,
}

/// The marker file saying a checkpoint's pending result rows were released.
pub const RESULTS_RELEASED: &str = "_results_released";

/// A checkpoint read back: its manifest and the state of each operator.
#[derive(Debug, Clone)]
pub struct RestoredCheckpoint {
    /// The manifest.
    pub manifest: Manifest,
    /// Snapshot batches per operator index (from all subtasks).
    pub state: BTreeMap<usize, Vec<RecordBatch>>,
    /// The pre-committed result rows (`Manifest::pending_results`).
    pub pending_results: Vec<RecordBatch>,
    /// Where it was loaded from (`<storage>/chk-<id>`, [`super::CheckpointStorage::location`]).
    pub location: String,
}

/// A stable fingerprint of a plan (hex CRC-32 of its debug rendering and the engine
/// version). The names of the parser's placeholder tables (`__sluice_mr_<n>`,
/// `__sluice_tvf_<n>`: `n` counts parses in the process) are numbered by first appearance
/// instead, so the same query parsed in another engine, or after other statements, has
/// the same fingerprint and finds its checkpoints.
pub fn plan_fingerprint(plans: &[sluice_common::plan::PlanNode]) -> String {
    let mut text = env!("CARGO_PKG_VERSION").to_string();
    for plan in plans {
        text.push_str(&format!("\n{plan:?}"));
    }
    let text = normalize_placeholders(&text);
    format!("{:08x}", crc32fast::hash(text.as_bytes()))
}

/// `text` with each distinct `__sluice_<kind>_<digits>` renamed `__sluice_<kind>_#<k>`,
/// `k` its rank of first appearance.
fn normalize_placeholders(text: &str) -> String {
    const PREFIX: &str = "__sluice_";
    let mut seen: Vec<String> = Vec::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        out.push_str(&rest[..at]);
        let tail = &rest[at + PREFIX.len()..];
        let kind_len = tail
            .find(|c: char| !c.is_ascii_lowercase())
            .unwrap_or(tail.len());
        let after_kind = &tail[kind_len..];
        let digits = after_kind
            .strip_prefix('_')
            .map(|d| d.find(|c: char| !c.is_ascii_digit()).unwrap_or(d.len()))
            .unwrap_or(0);
        if kind_len == 0 || digits == 0 {
            out.push_str(PREFIX);
            rest = tail;
            continue;
        }
        let name = &rest[at..at + PREFIX.len() + kind_len + 1 + digits];
        let rank = match seen.iter().position(|s| s == name) {
            Some(r) => r,
            None => {
                seen.push(name.to_string());
                seen.len() - 1
            }
        };
        out.push_str(&format!("{PREFIX}{}_#{rank}", &tail[..kind_len]));
        rest = &rest[at + name.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod fingerprint_tests {
    use super::normalize_placeholders;

    /// Placeholder numbers depend on how many queries the process parsed before; the
    /// fingerprint must not.
    #[test]
    fn placeholders_are_numbered_by_first_appearance() {
        let a =
            normalize_placeholders("scan __sluice_mr_7 (x), tvf __sluice_tvf_12, __sluice_mr_7.y");
        let b =
            normalize_placeholders("scan __sluice_mr_40 (x), tvf __sluice_tvf_3, __sluice_mr_40.y");
        assert_eq!(a, b);
        assert_eq!(
            a,
            "scan __sluice_mr_#0 (x), tvf __sluice_tvf_#1, __sluice_mr_#0.y"
        );
        // Two placeholders stay two.
        assert_ne!(
            normalize_placeholders("__sluice_mr_1 __sluice_mr_2"),
            normalize_placeholders("__sluice_mr_1 __sluice_mr_1")
        );
        // Text that only looks like a prefix is left alone.
        assert_eq!(
            normalize_placeholders("__sluice_ __sluice_x y"),
            "__sluice_ __sluice_x y"
        );
    }
}
//! Checkpoint storage through `object_store`: state files, manifests, held result rows
//! and markers under `<dir>/<job>/chk-<id>/`; listing, loading with verification, pruning.

use std::collections::BTreeMap;
use std::path::Path as FsPath;
use std::sync::{Arc, Mutex, OnceLock};

use datafusion_common::arrow::record_batch::RecordBatch;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_common::{Result, SluiceError};

use super::{Manifest, RestoredCheckpoint, StateFile};

/// A checkpoint storage location for one job (see the module docs).
pub struct CheckpointStorage {
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// For messages: where the checkpoints are.
    display: String,
    /// The job's directory, for a local store (emptied directories are removed).
    local_dir: Option<std::path::PathBuf>,
    /// Drives the object store's I/O (`None` only while dropping).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for CheckpointStorage {
    /// Shuts the I/O runtime down without blocking: storage may be dropped on an
    /// application's async thread (an embedding that starts jobs from async code), where
    /// a blocking runtime drop would panic.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for CheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CheckpointStorage({})", self.display)
    }
}

/// `memory://` stores by name, for the life of the process.
fn memory_stores() -> &'static Mutex<BTreeMap<String, Arc<dyn ObjectStore>>> {
    static STORES: OnceLock<Mutex<BTreeMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

fn storage_error(what: String) -> impl FnOnce(object_store::Error) -> SluiceError {
    move |e| SluiceError::Execution(format!("{what}: {e}"))
}

impl CheckpointStorage {
    /// Runs an object store operation to completion. Called from an async context (an
    /// application's tokio task starting a job), it runs on a scoped helper thread, since
    /// a runtime cannot block inside another.
    fn block_on<F>(&self, future: F) -> F::Output
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        let runtime = self
            .runtime
            .as_ref()
            .expect("the I/O runtime lives until the storage is dropped");
        if tokio::runtime::Handle::try_current().is_err() {
            return runtime.block_on(future);
        }
        std::thread::scope(|scope| {
            scope
                .spawn(|| runtime.block_on(future))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Opens `dir` (URL or path, see the module docs) for job `job`.
    ///
    /// # Errors
    /// An unsupported URL scheme, a local directory that cannot be created, S3 settings
    /// missing from the environment.
    pub fn open(dir: &str, working_dir: &FsPath, job: &str) -> Result<Self> {
        Self::open_with(dir, working_dir, job, true)
    }

    /// [`Self::open`]; a local directory is created only when `create`.
    fn open_with(dir: &str, working_dir: &FsPath, job: &str, create: bool) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SluiceError::io("starting the checkpoint I/O runtime", e))?;
        let mut local_root = None;
        let (store, prefix, display): (Arc<dyn ObjectStore>, String, String) =
            if let Some(rest) = dir.strip_prefix("memory://") {
                let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let mut stores = memory_stores().lock().unwrap_or_else(|e| e.into_inner());
                let store = stores
                    .entry(name.to_string())
                    .or_insert_with(|| Arc::new(object_store::memory::InMemory::new()))
                    .clone();
                (store, prefix.to_string(), dir.to_string())
            } else if dir.starts_with("s3://") || dir.starts_with("s3a://") {
                let url = dir.replacen("s3a://", "s3://", 1);
                let rest = &url["s3://".len()..];
                let prefix = rest.split_once('/').map(|(_, p)| p).unwrap_or("");
                let mut builder = object_store::aws::AmazonS3Builder::from_env().with_url(&url);
                let endpoint = std::env::var("AWS_ENDPOINT_URL")
                    .or_else(|_| std::env::var("AWS_ENDPOINT"))
                    .unwrap_or_default();
                if endpoint.starts_with("http://") {
                    builder = builder.with_allow_http(true);
                }
                let store = builder
                    .build()
                    .map_err(|e| SluiceError::Config(format!("checkpoint storage '{dir}': {e}")))?;
                (Arc::new(store), prefix.to_string(), dir.to_string())
            } else if dir.contains("://") && !dir.starts_with("file://") {
                return Err(SluiceError::Config(format!(
                    "checkpoint storage '{dir}': supported are file://, memory:// and s3:// \
                     URLs and local paths"
                )));
            } else {
                let path = dir.strip_prefix("file://").unwrap_or(dir);
                let path = if FsPath::new(path).is_absolute() {
                    FsPath::new(path).to_path_buf()
                } else {
                    working_dir.join(path)
                };
                if create {
                    std::fs::create_dir_all(&path).map_err(|e| {
                        SluiceError::io(
                            format!("creating checkpoint directory '{}'", path.display()),
                            e,
                        )
                    })?;
                } else if !path.is_dir() {
                    return Err(SluiceError::Config(format!(
                        "checkpoint directory '{}' does not exist",
                        path.display()
                    )));
                }
                let store = object_store::local::LocalFileSystem::new_with_prefix(&path)
                    .map_err(storage_error(format!("opening '{}'", path.display())))?;
                local_root = Some(path.clone());
                (Arc::new(store), String::new(), path.display().to_string())
            };
        let prefix = prefix.trim_matches('/');
        let root = if prefix.is_empty() {
            Path::from(job)
        } else {
            Path::from(format!("{prefix}/{job}"))
        };
        Ok(CheckpointStorage {
            store,
            local_dir: local_root.map(|r| r.join(root.as_ref())),
            root,
            display: format!("{}/{job}", display.trim_end_matches('/')),
            runtime: Some(runtime),
        })
    }

    /// Opens the storage a `chk-<id>` directory (path or URL, optionally ending in
    /// `/_manifest.json`) belongs to, and returns it with the id.
    ///
    /// # Errors
    /// A path that does not end in `<job>/chk-<id>`.
    pub fn open_checkpoint_path(path: &str, working_dir: &FsPath) -> Result<(Self, u64)> {
        let trimmed = path
            .trim_end_matches('/')
            .trim_end_matches("_manifest.json")
            .trim_end_matches('/');
        let bad = || {
            SluiceError::Config(format!(
                "'{path}' is not a checkpoint: expected a path ending in <job>/chk-<id>"
            ))
        };
        let (parent, chk) = trimmed.rsplit_once('/').ok_or_else(bad)?;
        let id = chk
            .strip_prefix("chk-")
            .and_then(|i| i.parse::<u64>().ok())
            .ok_or_else(bad)?;
        let (dir, job) = parent.rsplit_once('/').unwrap_or((".", parent));
        let dir = if dir.is_empty() { "/" } else { dir };
        Ok((Self::open_with(dir, working_dir, job, false)?, id))
    }

    /// Where the checkpoints are, for messages.
    pub fn display(&self) -> &str {
        &self.display
    }

    fn path(&self, id: u64, name: &str) -> Path {
        self.root.clone().join(format!("chk-{id}")).join(name)
    }

    /// Writes a file of checkpoint `id`.
    ///
    /// # Errors
    /// The store's put failed.
    pub fn put(&self, id: u64, name: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(id, name);
        self.block_on(self.store.put(&path, PutPayload::from(bytes)))
            .map_err(storage_error(format!("writing checkpoint file '{path}'")))?;
        Ok(())
    }

    fn get(&self, id: u64, name: &str) -> Result<Vec<u8>> {
        let path = self.path(id, name);
        let bytes = self
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => SluiceError::Execution(format!(
                    "'{}/chk-{id}/{name}' does not exist",
                    self.display
                )),
                e => SluiceError::Execution(format!(
                    "reading '{}/chk-{id}/{name}': {e}",
                    self.display
                )),
            })?;
        Ok(bytes.to_vec())
    }

    /// Ids of the checkpoint directories present (complete or not), ascending.
    ///
    /// # Errors
    /// The store cannot be listed.
    pub fn checkpoint_ids(&self) -> Result<Vec<u64>> {
        let listing = self
            .block_on(self.store.list_with_delimiter(Some(&self.root)))
            .map_err(storage_error(format!("listing '{}'", self.display)))?;
        let mut ids: Vec<u64> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename())
            .filter_map(|name| name.strip_prefix("chk-")?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Deletes every file of checkpoint `id`.
    ///
    /// # Errors
    /// The store cannot be listed or a delete fails.
    pub fn delete(&self, id: u64) -> Result<()> {
        let dir = self.root.clone().join(format!("chk-{id}"));
        self.block_on(async {
            let listing = self
                .store
                .list_with_delimiter(Some(&dir))
                .await
                .map_err(storage_error(format!("listing '{dir}'")))?;
            // The manifest first: a half-deleted checkpoint must not look complete.
            let mut objects = listing.objects;
            objects.sort_by_key(|o| o.location.filename() != Some("_manifest.json"));
            for o in objects {
                self.store
                    .delete(&o.location)
                    .await
                    .map_err(storage_error(format!("deleting '{}'", o.location)))?;
            }
            Ok::<(), SluiceError>(())
        })?;
        if let Some(local) = &self.local_dir {
            // Object stores have no directories; a local one keeps them.
            let _ = std::fs::remove_dir(local.join(format!("chk-{id}")));
        }
        Ok(())
    }

    /// Writes a state file and returns its manifest entry.
    ///
    /// # Errors
    /// The put failed.
    pub fn put_state(
        &self,
        id: u64,
        operator: usize,
        subtask: usize,
        bytes: Vec<u8>,
        rows: u64,
    ) -> Result<StateFile> {
        let name = format!("op-{operator}-{subtask}.arrow");
        let entry = StateFile {
            operator,
            subtask,
            name: name.clone(),
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
            rows,
        };
        self.put(id, &name, bytes)?;
        Ok(entry)
    }

    /// Writes the pre-committed result rows of checkpoint `id` (one Arrow IPC stream) and
    /// returns their manifest entry.
    ///
    /// # Errors
    /// The put failed, or the batches cannot be encoded.
    pub fn put_results(&self, id: u64, batches: &[RecordBatch]) -> Result<StateFile> {
        let mut bytes = Vec::new();
        {
            let schema = batches
                .first()
                .map(|b| b.schema())
                .ok_or_else(|| SluiceError::Internal("no result rows to write".into()))?;
            let mut w =
                datafusion_common::arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &schema)?;
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
        let name = "results.arrow".to_string();
        let entry = StateFile {
            operator: 0,
            subtask: 0,
            name: name.clone(),
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
            rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
        };
        self.put(id, &name, bytes)?;
        Ok(entry)
    }

    /// Checkpoint `id`'s directory, as shown in messages (`<storage>/chk-<id>`).
    pub fn location(&self, id: u64) -> String {
        format!("{}/chk-{id}", self.display)
    }

    /// Whether file `name` of checkpoint `id` exists.
    pub fn exists(&self, id: u64, name: &str) -> bool {
        self.block_on(self.store.head(&self.path(id, name))).is_ok()
    }

    /// Writes the manifest, which completes the checkpoint.
    ///
    /// # Errors
    /// The put failed.
    pub fn put_manifest(&self, manifest: &Manifest) -> Result<()> {
        let json = serde_json::to_vec_pretty(manifest)
            .map_err(|e| SluiceError::Internal(format!("encoding a manifest: {e}")))?;
        self.put(manifest.checkpoint_id, "_manifest.json", json)
    }

    /// Reads and verifies checkpoint `id`: its manifest, and each state file's size and
    /// checksum.
    ///
    /// # Errors
    /// No manifest (the checkpoint is incomplete), an unreadable manifest, a missing
    /// file, a size or checksum mismatch, undecodable state.
    pub fn load(&self, id: u64) -> Result<RestoredCheckpoint> {
        let where_ = format!("checkpoint {id} in '{}'", self.display);
        let manifest = self.get(id, "_manifest.json").map_err(|e| {
            SluiceError::Execution(format!(
                "{where_} is incomplete or missing (no manifest): {}",
                e.to_string().trim_start_matches("Execution error: ")
            ))
        })?;
        let manifest: Manifest = serde_json::from_slice(&manifest).map_err(|e| {
            SluiceError::Execution(format!("{where_} has an unreadable manifest: {e}"))
        })?;
        if manifest.checkpoint_id != id {
            return Err(SluiceError::Execution(format!(
                "{where_}: its manifest names checkpoint {}",
                manifest.checkpoint_id
            )));
        }
        let mut state: BTreeMap<usize, Vec<RecordBatch>> = BTreeMap::new();
        let mut pending_results = Vec::new();
        for (i, f) in manifest
            .files
            .iter()
            .chain(manifest.pending_results.iter())
            .enumerate()
        {
            let bytes = self.get(id, &f.name)?;
            if bytes.len() as u64 != f.bytes || crc32fast::hash(&bytes) != f.crc32 {
                return Err(SluiceError::Execution(format!(
                    "{where_}: state file '{}' is corrupt ({} bytes, CRC-32 {:08x}; the \
                     manifest says {} bytes, {:08x})",
                    f.name,
                    bytes.len(),
                    crc32fast::hash(&bytes),
                    f.bytes,
                    f.crc32
                )));
            }
            let batches = crate::state::from_ipc(&bytes)?;
            if i < manifest.files.len() {
                state.entry(f.operator).or_default().extend(batches);
            } else {
                pending_results.extend(batches);
            }
        }
        Ok(RestoredCheckpoint {
            manifest,
            state,
            pending_results,
            location: self.location(id),
        })
    }

    /// The newest checkpoint that loads and verifies, skipping (and reporting through
    /// `warn`) incomplete or corrupt ones; `None` when there is none.
    ///
    /// # Errors
    /// The store cannot be listed.
    pub fn latest(&self, warn: &mut dyn FnMut(String)) -> Result<Option<RestoredCheckpoint>> {
        self.latest_since(0, warn)
    }

    /// [`Self::latest`] among checkpoints with ids `>= min_id` (a run's own).
    ///
    /// # Errors
    /// The store cannot be listed.
    pub fn latest_since(
        &self,
        min_id: u64,
        warn: &mut dyn FnMut(String),
    ) -> Result<Option<RestoredCheckpoint>> {
        for id in self.checkpoint_ids()?.into_iter().rev() {
            if id < min_id {
                break;
            }
            match self.load(id) {
                Ok(c) => return Ok(Some(c)),
                Err(e) => warn(format!("skipping checkpoint {id}: {e}")),
            }
        }
        Ok(None)
    }

    /// Keeps the newest `retained` complete checkpoints up to `latest_complete`; deletes
    /// older ones and incomplete ones older than it (orphans of failed checkpoints).
    ///
    /// # Errors
    /// Listing or deleting fails.
    pub fn prune(&self, latest_complete: u64, retained: usize) -> Result<()> {
        let ids = self.checkpoint_ids()?;
        let mut kept = 0usize;
        for id in ids.into_iter().rev() {
            if id > latest_complete {
                continue; // a checkpoint in progress
            }
            let complete = self.exists(id, "_manifest.json");
            if complete && kept < retained.max(1) {
                kept += 1;
                continue;
            }
            self.delete(id)?;
        }
        Ok(())
    }
}
