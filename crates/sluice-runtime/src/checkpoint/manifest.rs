//! What a checkpoint records: source offsets, state files, pre-committed sink output and
//! held result rows (the manifest, `_manifest.json`), and the plan fingerprint that ties a
//! checkpoint to its query.

use std::collections::BTreeMap;

use datafusion_common::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::connectors::commit::PendingCommit;

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
    /// Sink output pre-committed up to this checkpoint, committed when it completes (and
    /// again, idempotently, when it is restored): `connectors::commit`.
    pub pending_commits: Vec<PendingCommit>,
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
    /// The final checkpoint: written when every task had finished its input, before the
    /// last output was committed (`Coordinator::finish`). Its sources are at their ends
    /// and it has no operator state: restoring it replays nothing.
    #[serde(default, rename = "final")]
    pub is_final: bool,
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
    // A source's 'scan.parallelism' may change between a checkpoint and its restore when
    // the connector can re-split its offsets (launch checks, per source group).
    let text = regex::Regex::new(r#""scan\.parallelism": "[^"]*"(, )?"#)
        .expect("valid regex")
        .replace_all(&text, "");
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
