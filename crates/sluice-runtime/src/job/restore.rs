//! Restoring: which checkpoint a restart restores, committing what it pre-committed,
//! releasing its held result rows, rewinding sink output written after it, and splitting
//! operator state by key group.

use super::*;

impl Job {
    /// The newest complete checkpoint of this run (or the one it started from).
    pub(super) fn restore_point(&self) -> Result<Option<RestoredCheckpoint>> {
        let Some(storage) = &self.checkpoints.storage else {
            return Ok(None);
        };
        if !self.config.checkpoint.enabled() {
            return Ok(self.initial.clone());
        }
        let own = storage.latest_since(self.first_id, &mut |w| warn(&w))?;
        Ok(own.or_else(|| self.initial.clone()))
    }

    /// Before an attempt starts: commits what the restored checkpoint pre-committed,
    /// discards everything pre-committed or written after it.
    pub(super) fn prepare_restore(&mut self, restore: Option<&RestoredCheckpoint>) -> Result<()> {
        if let Some(r) = restore {
            for f in &r.manifest.pending_commits {
                f.commit()?;
            }
            self.release_held_results(r)?;
        }
        self.checkpoints.uncommitted.clear();
        let run = self.config.connectors.job_id.clone();
        // The runs whose sink output the restored state continues (recorded in the next
        // manifests): a fresh start continues nothing, earlier runs' output is theirs.
        self.checkpoints.lineage = restore.map(|r| r.manifest.runs.clone()).unwrap_or_default();
        if !self.checkpoints.lineage.contains(&run) {
            self.checkpoints.lineage.push(run.clone());
        }
        // The runs whose files this restore rewinds: the lineage; for a manifest of an
        // older version without one, every run of the job (for this restore only).
        let mut rewound = self.checkpoints.lineage.clone();
        if restore.is_some_and(|r| r.manifest.runs.is_empty()) {
            rewound.push(self.file_job.clone());
        }
        let restored = restore.map(|r| r.manifest.checkpoint_id);
        let subtasks = std::iter::once(self.config.parallelism)
            .chain(restore.map(|r| r.manifest.parallelism))
            .chain(self.config.restart_parallelism.iter().copied())
            .max()
            .unwrap_or(1);
        let next = self
            .coordination
            .next_id
            .load(std::sync::atomic::Ordering::SeqCst);
        let recovery = crate::connectors::commit::Recovery {
            lineage: &rewound,
            restored,
            restored_final: restore.is_some_and(|r| r.manifest.is_final),
            from_checkpoint: restored.map_or(self.first_id, |id| id + 1),
            through_checkpoint: next.saturating_sub(1),
            subtasks,
            two_phase: self.config.checkpoint.two_phase(),
        };
        for spec in self.sink_specs() {
            let removed = crate::connectors::commit::recover_sink(
                &spec.table,
                &spec.options,
                &self.config.connectors,
                &recovery,
            )?;
            if !removed.is_empty() {
                let from = match restored {
                    Some(id) => format!("restoring checkpoint {id}"),
                    None => "restarting from the beginning".to_string(),
                };
                warn(&format!(
                    "{from}: removed {} part file(s) committed after it, which the \
                     replay writes again: {}",
                    removed.len(),
                    removed.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Releases the result rows checkpoint `r` held back (`Manifest::pending_results`),
    /// once: still in memory when this run took it (a restart), else from the checkpoint
    /// unless they were released already, by this process (`released_results`) or by
    /// another (the `_results_released` marker next to the checkpoint).
    pub(super) fn release_held_results(&mut self, r: &RestoredCheckpoint) -> Result<()> {
        let id = r.manifest.checkpoint_id;
        let in_memory = self.checkpoints.holds_result_rows(id);
        self.checkpoints.commit_up_to(id)?;
        let released_here = self.checkpoints.released_results.contains(&r.location);
        let marked = self
            .checkpoints
            .storage_at(id, &r.location)
            .is_some_and(|s| s.exists(id, crate::checkpoint::RESULTS_RELEASED));
        let from_file = !in_memory && !r.pending_results.is_empty() && !released_here && !marked;
        if from_file {
            // One batch, sent without blocking: at the job's start nobody reads yet (and
            // the caller may be async code), and one batch always fits the channel.
            let rows = &r.pending_results;
            let batch = datafusion_common::arrow::compute::concat_batches(&rows[0].schema(), rows)?;
            // Shown in this session's time zone, as the rows this run produces.
            let batch = crate::tasks::localize(&batch, &self.config.connectors.time_zone)?;
            match self.out_tx.try_send(Ok(batch)) {
                Ok(()) | Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {}
                Err(tokio::sync::mpsc::error::TrySendError::Full(b)) => {
                    // A restart, on the coordinator thread: waiting is fine.
                    let _ = self.out_tx.blocking_send(b);
                }
            }
        }
        if in_memory || from_file {
            self.checkpoints
                .mark_results_released(id, r.location.clone());
        }
        Ok(())
    }

    /// The job's sinks.
    pub(super) fn sink_specs(&self) -> Vec<&sluice_common::plan::SinkSpec> {
        self.plans
            .iter()
            .filter_map(|plan| match &plan.spec {
                OperatorSpec::Sink(spec) => Some(spec),
                _ => None,
            })
            .collect()
    }
}

/// The rows of snapshot `batches` whose `key_group` subtask `subtask` of `parallelism`
/// owns.
pub(super) fn owned_key_groups(
    batches: &[RecordBatch],
    subtask: usize,
    parallelism: usize,
    max_parallelism: u32,
) -> Result<Vec<RecordBatch>> {
    if parallelism == 1 {
        return Ok(batches.to_vec());
    }
    let mut out = Vec::new();
    for b in batches {
        let groups = b.column_by_name("key_group").ok_or_else(|| {
            SluiceError::Execution("a state snapshot has no key_group column".into())
        })?;
        let groups = groups.as_primitive::<UInt32Type>();
        let mask: datafusion_common::arrow::array::BooleanArray = groups
            .iter()
            .map(|g| {
                Some(g.is_some_and(|g| {
                    subtask_of_key_group(g, parallelism, max_parallelism) == subtask
                }))
            })
            .collect();
        let kept = filter_record_batch(b, &mask)?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}
