//! The checkpoint coordinator: what it knows of the checkpoints in flight and of the output
//! waiting for them, and the steps that complete (or decline) a checkpoint, write it and
//! commit what was pre-committed (steps 6 and 7 of the sequence in the module docs). The
//! job (`crate::job`) feeds it the tasks' events and asks it at restore time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use datafusion_common::arrow::array::RecordBatch;
use sluice_common::{Result, SluiceError};

use super::{CheckpointConfig, CheckpointStorage, Manifest, SourceGroupOffsets, SourceOffset};
use crate::connectors::Committable;
use crate::metrics::JobMetrics;
use crate::tasks::Coordination;

/// The shape of an attempt, as the coordinator needs it to know when a checkpoint is
/// complete.
pub(crate) struct AttemptShape {
    /// Source subtasks (each reports its offset per checkpoint), numbered group by group.
    pub(crate) sources: usize,
    /// The source groups: table and source subtasks, in order.
    pub(crate) source_groups: Vec<(String, usize)>,
    /// Operator subtasks (each acks every checkpoint and reports `Finished` at the end).
    pub(crate) subtasks: usize,
}

/// What a checkpoint records besides its commits.
pub(crate) struct Cut {
    /// Per source group, its subtasks' offsets.
    pub(crate) sources: Vec<SourceGroupOffsets>,
    /// Per operator stage, the lowest watermark its subtasks acknowledged with (ms).
    pub(crate) stage_watermarks: BTreeMap<usize, i64>,
    /// Operator snapshots: (operator, subtask, Arrow IPC bytes, rows).
    pub(crate) states: Vec<(usize, usize, Vec<u8>, u64)>,
    /// The final checkpoint, after the input ended (see [`Coordinator::finish`]).
    pub(crate) is_final: bool,
}

/// The offsets of source subtasks `0..attempt.sources` (in `flat`'s order), grouped by
/// source table.
fn group_offsets(
    attempt: &AttemptShape,
    flat: &mut impl Iterator<Item = SourceOffset>,
) -> Vec<SourceGroupOffsets> {
    attempt
        .source_groups
        .iter()
        .map(|(table, n)| SourceGroupOffsets {
            table: table.clone(),
            offsets: flat.by_ref().take(*n).collect(),
        })
        .collect()
}

/// A checkpoint whose barrier is on its way.
#[derive(Default)]
pub(crate) struct PendingCheckpoint {
    /// Per source subtask.
    pub(crate) offsets: BTreeMap<usize, SourceOffset>,
    pub(crate) started: Option<Instant>,
    pub(crate) acks: Vec<Ack>,
}

pub(crate) struct Ack {
    pub(crate) subtask: usize,
    pub(crate) states: Vec<(usize, Vec<u8>, u64)>,
    pub(crate) committable: Committable,
    pub(crate) stage: usize,
    pub(crate) watermark_ms: i64,
}

/// See the module docs.
pub(crate) struct Coordinator {
    /// The job's checkpoint storage (none without checkpointing).
    pub(crate) storage: Option<CheckpointStorage>,
    /// The storage of the checkpoint path the job started from, when not its own.
    pub(crate) initial_storage: Option<CheckpointStorage>,
    pub(crate) config: CheckpointConfig,
    /// For manifests and messages.
    pub(crate) job_name: String,
    pub(crate) fingerprint: String,
    pub(crate) parallelism: usize,
    pub(crate) max_parallelism: u32,
    pub(crate) coordination: Arc<Coordination>,
    pub(crate) metrics: Arc<JobMetrics>,
    /// Where released result rows go (the job's reader).
    pub(crate) out_tx: tokio::sync::mpsc::Sender<Result<RecordBatch>>,
    pub(crate) pending: BTreeMap<u64, PendingCheckpoint>,
    /// End offsets of source subtasks that finished (this attempt).
    pub(crate) finished_sources: BTreeMap<usize, SourceOffset>,
    /// Operator subtasks that finished their input (this attempt). A checkpoint whose
    /// barrier one of them never saw cannot complete (its output after its last
    /// checkpoint is in its final committable): it is declined.
    pub(crate) finished_subtasks: BTreeSet<usize>,
    /// A declined checkpoint was reported (once per job).
    pub(crate) declined_told: bool,
    /// What sinks pre-committed, by checkpoint id, not yet committed.
    pub(crate) uncommitted: BTreeMap<u64, Committable>,
    /// The runs whose output leads to the current state (see `Manifest::runs`).
    pub(crate) lineage: Vec<String>,
    /// Checkpoints (`RestoredCheckpoint::location`) whose held result rows this process
    /// released.
    pub(crate) released_results: BTreeSet<String>,
}

/// A warning on stderr.
pub(crate) fn warn(message: &str) {
    eprintln!("[WARN] {message}");
}

impl Coordinator {
    /// Forgets what an attempt that ended left in flight.
    pub(crate) fn clear_attempt(&mut self) {
        self.pending.clear();
        self.finished_sources.clear();
        self.finished_subtasks.clear();
    }

    /// Completes checkpoint `id` once its barrier and every subtask's ack are in; declines
    /// it when a subtask finished without acknowledging it.
    pub(crate) fn try_complete(&mut self, id: u64, attempt: &AttemptShape) -> Result<()> {
        let unackable = self.pending.get(&id).is_some_and(|p| {
            self.finished_subtasks
                .iter()
                .any(|s| !p.acks.iter().any(|a| a.subtask == *s))
        });
        if unackable {
            self.decline(id);
            return Ok(());
        }
        let offsets_in = |p: &PendingCheckpoint| {
            (0..attempt.sources)
                .all(|s| p.offsets.contains_key(&s) || self.finished_sources.contains_key(&s))
        };
        let ready = self
            .pending
            .get(&id)
            .is_some_and(|p| p.acks.len() == attempt.subtasks && offsets_in(p));
        if !ready {
            return Ok(());
        }
        let mut p = self.pending.remove(&id).expect("checked above");
        let mut flat = (0..attempt.sources).map(|s| match p.offsets.remove(&s) {
            Some(o) => o,
            None => self.finished_sources[&s].clone(),
        });
        let sources = group_offsets(attempt, &mut flat);
        let mut committable = Committable::Nothing;
        let mut states = Vec::new();
        let mut stage_watermarks: BTreeMap<usize, i64> = BTreeMap::new();
        for ack in p.acks {
            let w = stage_watermarks
                .entry(ack.stage)
                .or_insert(ack.watermark_ms);
            *w = (*w).min(ack.watermark_ms);
            committable.append(ack.committable);
            for (operator, bytes, rows) in ack.states {
                states.push((operator, ack.subtask, bytes, rows));
            }
        }
        let cut = Cut {
            sources,
            stage_watermarks,
            states,
            is_final: false,
        };
        self.complete(id, cut, committable, p.started)
    }

    /// Records checkpoint `id` (its state files, then its manifest) and commits what it
    /// pre-committed (`committable`, with what earlier checkpoints that failed to write
    /// left). A checkpoint that fails to write is reported and the job goes on: its
    /// commits wait for the next one.
    fn complete(
        &mut self,
        id: u64,
        cut: Cut,
        committable: Committable,
        started: Option<Instant>,
    ) -> Result<()> {
        self.uncommitted
            .entry(id)
            .or_insert(Committable::Nothing)
            .append(committable);
        let written = self.write_checkpoint(id, cut);
        if written.is_ok() {
            if let Some(storage) = &self.storage {
                self.coordination
                    .completed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id, format!("{}/chk-{id}", storage.display()));
            }
        }
        // Settled after `completed` is recorded: waiters read them in that order.
        self.coordination.settled.fetch_max(id, Ordering::SeqCst);
        let bytes = match written {
            Ok(bytes) => bytes,
            Err(e) => {
                // The job goes on; what this checkpoint pre-committed is committed with
                // the next one that completes.
                JobMetrics::add(&self.metrics.checkpoints_failed, 1);
                warn(&format!("checkpoint {id} failed: {e}"));
                return Ok(());
            }
        };
        JobMetrics::add(&self.metrics.checkpoints_completed, 1);
        let m = &self.metrics;
        m.last_checkpoint_id.store(id, Ordering::Relaxed);
        m.last_checkpoint_bytes.store(bytes, Ordering::Relaxed);
        let took = started.map(|s| s.elapsed().as_millis() as u64).unwrap_or(0);
        m.last_checkpoint_duration_ms.store(took, Ordering::Relaxed);
        self.config.failpoints.check("after-manifest", Some(id))?;
        if self
            .config
            .failpoints
            .fires("kill-after-manifest", Some(id))
        {
            eprintln!("[WARN] injected failure at kill-after-manifest:{id}: the process aborts");
            std::process::abort();
        }
        let releases_rows = self.holds_result_rows(id);
        self.commit_up_to(id)?;
        let own = self.storage.as_ref().map(|s| s.location(id));
        if let (true, Some(location)) = (releases_rows, own) {
            self.mark_results_released(id, location);
        }
        if let Some(storage) = &self.storage {
            if let Err(e) = storage.prune(id, self.config.num_retained) {
                warn(&format!("removing old checkpoints failed: {e}"));
            }
        }
        Ok(())
    }

    /// Declines checkpoint `id`: a subtask finished before its barrier reached it (a branch
    /// of the job whose input ended earlier than the others'). What the other subtasks
    /// pre-committed for it waits for the next checkpoint or the job's end, as after a
    /// failed write. (Flink before FLIP-147 also stops checkpointing once a task finished.)
    pub(crate) fn decline(&mut self, id: u64) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        let mut committable = Committable::Nothing;
        for ack in p.acks {
            committable.append(ack.committable);
        }
        self.uncommitted
            .entry(id)
            .or_insert(Committable::Nothing)
            .append(committable);
        self.coordination.settled.fetch_max(id, Ordering::SeqCst);
        if !self.declined_told {
            self.declined_told = true;
            warn(&format!(
                "job '{}': checkpoint {id} and later ones cannot complete: a part of the job \
                 finished its input (checkpoints need every task running)",
                self.job_name
            ));
        }
    }

    /// Writes the state files and then the manifest of checkpoint `id`; returns the bytes
    /// of state written.
    pub(crate) fn write_checkpoint(&self, id: u64, cut: Cut) -> Result<u64> {
        let Cut {
            sources,
            stage_watermarks,
            states,
            is_final,
        } = cut;
        let storage = self
            .storage
            .as_ref()
            .ok_or_else(|| SluiceError::Internal("checkpointing without storage".into()))?;
        let failpoints = &self.config.failpoints;
        let mut files = Vec::new();
        let mut total = 0u64;
        for (operator, subtask, bytes, rows) in states {
            failpoints.check("upload", Some(id))?;
            total += bytes.len() as u64;
            files.push(storage.put_state(id, operator, subtask, bytes, rows)?);
        }
        let pending_commits = self
            .uncommitted
            .range(..=id)
            .flat_map(|(_, c)| match c {
                Committable::Pending(p) => p.clone(),
                _ => Vec::new(),
            })
            .collect();
        let results = self.pending_result_rows(id);
        let pending_results = if results.is_empty() {
            None
        } else {
            failpoints.check("upload", Some(id))?;
            Some(storage.put_results(id, &results)?)
        };
        let manifest = Manifest {
            checkpoint_id: id,
            job: self.job_name.clone(),
            plan_fingerprint: self.fingerprint.clone(),
            engine_version: env!("CARGO_PKG_VERSION").to_string(),
            mode: self.config.mode.name().to_string(),
            completed_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            parallelism: self.parallelism,
            max_parallelism: self.max_parallelism,
            sources,
            stage_watermarks,
            files,
            pending_commits,
            runs: self.lineage.clone(),
            pending_results,
            is_final,
        };
        failpoints.check("upload", Some(id))?;
        storage.put_manifest(&manifest)?;
        Ok(total)
    }

    /// Whether result rows pre-committed for checkpoints up to `id` wait for release.
    pub(crate) fn holds_result_rows(&self, id: u64) -> bool {
        self.uncommitted.range(..=id).any(
            |(_, c)| matches!(c, Committable::Rows(rows) if rows.iter().any(|b| b.num_rows() > 0)),
        )
    }

    /// The result rows pre-committed for checkpoints up to `id`, not yet released.
    pub(crate) fn pending_result_rows(&self, id: u64) -> Vec<RecordBatch> {
        self.uncommitted
            .range(..=id)
            .flat_map(|(_, c)| match c {
                Committable::Rows(rows) => rows.clone(),
                _ => Vec::new(),
            })
            .filter(|b| b.num_rows() > 0)
            .collect()
    }

    /// Records that the pending result rows of checkpoint `id` at `location` were
    /// released (see `Manifest::pending_results`): in this process, and with a marker
    /// next to the checkpoint. A failure to write the marker is only reported: a
    /// restore of the checkpoint by another process would release the rows again.
    pub(crate) fn mark_results_released(&mut self, id: u64, location: String) {
        if let Some(storage) = self.storage_at(id, &location) {
            if let Err(e) = storage.put(id, crate::checkpoint::RESULTS_RELEASED, Vec::new()) {
                warn(&format!(
                    "checkpoint {id}: recording released results failed: {e}"
                ));
            }
        }
        self.released_results.insert(location);
    }

    /// Commits what was pre-committed for checkpoints up to `id`: sink files get their
    /// final names, buffered result rows go to the reader.
    pub(crate) fn commit_up_to(&mut self, id: u64) -> Result<()> {
        let later = self.uncommitted.split_off(&(id + 1));
        let due = std::mem::replace(&mut self.uncommitted, later);
        for (checkpoint, c) in due {
            self.commit(c, Some(checkpoint))?;
        }
        Ok(())
    }

    /// Commits `c`, pre-committed for checkpoint `checkpoint` (`None`: the end of input).
    pub(crate) fn commit(&self, c: Committable, checkpoint: Option<u64>) -> Result<()> {
        match c {
            Committable::Nothing => {}
            Committable::Pending(pending) => {
                for (i, p) in pending.iter().enumerate() {
                    if i == 1 {
                        self.config.failpoints.check("mid-commit", checkpoint)?;
                    }
                    p.commit()?;
                }
            }
            Committable::Rows(rows) => {
                for b in rows {
                    let _ = self.out_tx.blocking_send(Ok(b));
                }
            }
        }
        Ok(())
    }

    /// Every subtask finished: commit everything still pre-committed, then the last
    /// output.
    ///
    /// When the last output goes to a sink (not to the job's reader) and the job
    /// checkpoints exactly-once, the end is first recorded as a final checkpoint (Flink's
    /// FLIP-147): the sources' end offsets and the last pre-committed output, no operator
    /// state. A failure after it restores it: the last output is committed again
    /// (idempotent) and nothing is replayed. Without it, a restore would replay the input
    /// since the last checkpoint and write output again that a sink which cannot take
    /// output back (Kafka) already committed.
    pub(crate) fn finish(
        &mut self,
        finals: Vec<Committable>,
        attempt: &AttemptShape,
    ) -> Result<()> {
        let to_sinks = finals
            .iter()
            .any(|c| matches!(c, Committable::Pending(p) if !p.is_empty()));
        let every_source_ended =
            (0..attempt.sources).all(|s| self.finished_sources.contains_key(&s));
        let finals = if to_sinks
            && every_source_ended
            && self.storage.is_some()
            && self.config.two_phase()
        {
            let id = self.coordination.next_id.fetch_add(1, Ordering::SeqCst);
            let (pending, rest): (Vec<_>, Vec<_>) = finals
                .into_iter()
                .partition(|c| matches!(c, Committable::Pending(_)));
            let mut committable = Committable::Nothing;
            for c in pending {
                committable.append(c);
            }
            let mut flat = (0..attempt.sources).map(|s| self.finished_sources[&s].clone());
            let cut = Cut {
                sources: group_offsets(attempt, &mut flat),
                stage_watermarks: BTreeMap::new(),
                states: Vec::new(),
                is_final: true,
            };
            self.complete(id, cut, committable, None)?;
            let written = self
                .coordination
                .completed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&id);
            if !written {
                // Committing without it would leave nothing to restore but the last
                // periodic checkpoint, whose replay writes again what a sink that cannot
                // take output back already committed: nothing is committed, and the
                // restart (which aborts this output) replays the end.
                return Err(SluiceError::Execution(format!(
                    "the final checkpoint {id} could not be written; the job restarts from \
                     its last checkpoint"
                )));
            }
            rest
        } else {
            finals
        };
        self.commit_up_to(u64::MAX - 1)?;
        for c in finals {
            self.commit(c, None)?;
        }
        Ok(())
    }

    /// The storage holding checkpoint `id` at `location`
    /// ([`CheckpointStorage::location`]): the job's own, or the one of the path it
    /// started from.
    pub(crate) fn storage_at(&self, id: u64, location: &str) -> Option<&CheckpointStorage> {
        [self.storage.as_ref(), self.initial_storage.as_ref()]
            .into_iter()
            .flatten()
            .find(|s| s.location(id) == location)
    }
}
