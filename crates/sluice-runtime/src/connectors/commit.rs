//! Two-phase commit: one interface for every transactional sink (Flink's
//! `TwoPhaseCommittingSink` and `Committer`; Carbone et al., "Lightweight Asynchronous
//! Snapshots for Distributed Dataflows").
//!
//! 1. **Pre-commit**: at each checkpoint barrier a sink makes what it wrote since the last
//!    one durable but invisible and returns it as [`PendingCommit`]s
//!    (`BatchSink::pre_commit` → `Committable::Pending`).
//! 2. The coordinator keeps them with the checkpoint (in memory, and serialized in its
//!    manifest's `pending_commits`), and **commits** them once the checkpoint is complete
//!    ([`PendingCommit::commit`]).
//! 3. **Recovery**: a restore commits the restored checkpoint's pending commits again
//!    (commit is idempotent, and works from any process: the one that pre-committed may be
//!    gone), then [`recover_sink`] discards everything else the job's runs left
//!    uncommitted or committed after that checkpoint, since the replay writes it again.
//!
//! The coordinator and the manifest see only this module's types: a new transactional
//! sink adds a [`PendingCommit`] variant and a branch of [`recover_sink`], nothing else.
//! Two sinks use it: the filesystem sink (part files renamed on commit) and the Kafka sink
//! (`'sink.delivery-guarantee' = 'exactly-once'`: Kafka transactions).

use std::path::Path;

use serde::{Deserialize, Serialize};
use sluice_common::plan::ConnectorOptions;
use sluice_common::Result;

use crate::connectors::filesystem::{discard_committed_after, discard_uncommitted, PendingFile};
use crate::connectors::kafka::transaction::KafkaTransaction;
use crate::connectors::{resolve_sink_directory, ConnectorContext};

/// One piece of a sink's pre-committed output, serialized in checkpoint manifests
/// (`{"sink": "file", ...}`, `{"sink": "kafka", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "sink", rename_all = "kebab-case")]
pub enum PendingCommit {
    /// A filesystem part file (or success file) to rename to its visible name.
    File(PendingFile),
    /// A Kafka transaction to commit.
    Kafka(KafkaTransaction),
}

impl PendingCommit {
    /// Makes the output visible. Idempotent: committing something already committed does
    /// nothing.
    ///
    /// # Errors
    /// The pre-committed output is gone (it cannot be committed), or the commit fails.
    pub fn commit(&self) -> Result<()> {
        match self {
            PendingCommit::File(f) => f.commit(),
            PendingCommit::Kafka(t) => t.commit(),
        }
    }
}

/// What a restore (or a fresh start) knows when it recovers a sink.
#[derive(Debug, Clone)]
pub struct Recovery<'a> {
    /// The runs whose sink output the restored state continues (`Manifest::runs`).
    pub lineage: &'a [String],
    /// The checkpoint restored (`None`: the job starts from the beginning).
    pub restored: Option<u64>,
    /// The restored checkpoint is a final one (written after the input ended): the last
    /// output, committed with it, is not after it.
    pub restored_final: bool,
    /// The first checkpoint id whose output the job's runs may have left uncommitted: the
    /// one after the restored checkpoint, or on a fresh start the one after the newest
    /// checkpoint in storage.
    pub from_checkpoint: u64,
    /// The last checkpoint id this process handed out (its own attempts' output up to
    /// it is discarded even where an earlier id went unused).
    pub through_checkpoint: u64,
    /// Sink subtasks of the runs: the most of the restored checkpoint's parallelism and
    /// the job's.
    pub subtasks: usize,
    /// The job checkpoints exactly-once (file sinks commit in two phases).
    pub two_phase: bool,
}

/// Before an attempt starts, after the restored checkpoint's pending commits were
/// committed: discards the sink's output that the job's runs left uncommitted, or (files)
/// committed after the restored checkpoint, since the replay writes it again. A filesystem
/// sink removes the part files of the runs of `lineage`; an exactly-once Kafka sink aborts
/// the transactions (see [`crate::connectors::kafka::transaction::abort_lingering`]; what
/// Kafka committed cannot be taken back). Returns what was removed from committed output,
/// for a warning.
///
/// # Errors
/// The output cannot be listed or removed; the broker cannot be reached.
pub fn recover_sink(
    table: &str,
    options: &ConnectorOptions,
    ctx: &ConnectorContext,
    recovery: &Recovery<'_>,
) -> Result<Vec<String>> {
    if crate::connectors::kafka::sink::recover(table, options, recovery)? {
        return Ok(Vec::new());
    }
    if !recovery.two_phase {
        return Ok(Vec::new());
    }
    let Some(dir) = resolve_sink_directory(options, ctx) else {
        return Ok(Vec::new());
    };
    recover_directory(&dir, recovery)
}

fn recover_directory(dir: &Path, recovery: &Recovery<'_>) -> Result<Vec<String>> {
    let (lineage, restored) = (recovery.lineage, recovery.restored);
    for run in lineage {
        // Their uncommitted files (this run's from a failed attempt).
        discard_uncommitted(dir, run)?;
    }
    // Output committed after the restored checkpoint (the newest checkpoint was damaged,
    // or an older one was chosen; with none, everything these runs committed).
    let after = restored.unwrap_or(0);
    let mut removed = Vec::new();
    for run in lineage {
        removed.extend(discard_committed_after(
            dir,
            run,
            after,
            recovery.restored_final,
        )?);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_file_round_trips_through_the_manifest_form() {
        let p = PendingCommit::File(PendingFile {
            pending: ".part-a.csv.pending".into(),
            target: "part-a.csv".into(),
        });
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["sink"], "file");
        let back: PendingCommit = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
    }
}
