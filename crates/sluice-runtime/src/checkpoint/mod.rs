//! Checkpoints: configuration (`config`), test failpoints (`failpoints`), the manifest and
//! plan fingerprint (`manifest`), checkpoint storage on object storage (`storage`), and the
//! coordinator that completes, declines and commits checkpoints (`coordinator`).
//!
//! A checkpoint (Flink's asynchronous barrier snapshotting; Carbone et al. 2015) is
//! complete when its manifest `_manifest.json` exists. The layout under
//! `'execution.checkpointing.dir'`:
//!
//! ```text
//! <dir>/<job>/chk-<id>/op-<operator>-<subtask>.arrow   keyed state, Arrow IPC stream
//! <dir>/<job>/chk-<id>/_manifest.json                   written last (serde JSON)
//! ```
//!
//! `<job>` is `'pipeline.name'` or `job-<plan fingerprint>`, so re-running the same SQL
//! finds its earlier checkpoints (`--from-checkpoint latest`). The manifest lists the
//! source offsets, every state file with its size and CRC-32, and the sink files
//! pre-committed up to this checkpoint (committed on restore). A checkpoint whose manifest
//! is missing or unreadable, or whose files are missing or fail their size or checksum,
//! is skipped (and reported) in favour of the previous complete one.
//!
//! Storage goes through `object_store`: a local directory (`file://` or a plain path,
//! relative paths under the job's working directory), `memory://<name>` (one store per
//! name for the life of the process: tests), `s3://bucket/prefix` (endpoint, region and
//! credentials from the usual `AWS_*` environment variables; plain `http://` endpoints are
//! allowed).
//!
//! # Barrier N, from trigger to commit
//!
//! One sequence, with where each step lives:
//!
//! 1. **Trigger** (`crate::tasks::SourceDriver::barrier_due`, `Coordination::trigger_now`):
//!    the first source subtask to see the interval elapsed (or the test hook's row, or
//!    `RunningJob::checkpoint_now`) takes id N and raises `Coordination::trigger`.
//! 2. **Inject** (`SourceDriver::inject_barriers`): every source subtask, at its next batch
//!    boundary (or while stalled or waiting for data), sends its rows, its watermark, then
//!    `Barrier(N)` downstream and reports `Event::Barrier` with its [`SourceOffset`] to the
//!    coordinator. A source that finished stands in with its end offset.
//! 3. **Route** (`crate::tasks::Outputs`): routers and intermediate stages broadcast the
//!    barrier along every output edge of the job graph (`crate::graph`), after their rows.
//! 4. **Align** (`crate::gate::InputGate`): an operator subtask passes barrier N on once it
//!    arrived on every input that has not ended. `EXACTLY_ONCE` holds an input's later
//!    messages until then; `AT_LEAST_ONCE` does not (rows after an early barrier land in
//!    the snapshot and are replayed after a restore).
//! 5. **Snapshot and pre-commit** (`crate::tasks::OperatorTask::on_barrier`): due
//!    processing-time timers fire first; the chain snapshots each operator's keyed state
//!    (one batch in the common layout, `crate::state::snapshot`), the sink pre-commits
//!    (filesystem: in-progress files become pending; a query result: rows held), the task
//!    reports `Event::Ack` and passes the barrier on.
//! 6. **Complete** ([`coordinator`]): with every source offset and every operator
//!    subtask's ack in, the coordinator writes the state files, the held result rows, then
//!    [`Manifest`] last (the checkpoint exists from then on). A subtask that finished
//!    without acknowledging N (a branch whose input ended first) makes N declined: what was
//!    pre-committed for it waits for the next checkpoint or the job's end.
//! 7. **Commit**: the coordinator commits everything pre-committed up to N (pending files
//!    renamed to their final names, held rows released to the reader, then the
//!    `_results_released` marker), and prunes to `num-retained`.
//! 8. **Restore** (`crate::job` `restore.rs`): after a failure the newest complete
//!    checkpoint is restored: its pre-commits committed again (idempotent), every other
//!    uncommitted output discarded, operator state split by key group, sources sought to
//!    their offsets.

mod config;
pub(crate) mod coordinator;
mod failpoints;
mod manifest;
mod storage;

pub use config::*;
pub use failpoints::*;
pub use manifest::*;
pub use storage::*;
