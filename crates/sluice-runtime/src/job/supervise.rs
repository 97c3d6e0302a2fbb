//! The coordinator's loop: events from the tasks, checkpoints completed, failures and
//! restarts under the restart strategy.

use super::*;
use crate::checkpoint::coordinator::Ack;

impl Job {
    /// The coordinator's loop (see the module docs).
    pub(super) fn supervise(
        mut self,
        mut attempt: Attempt,
        events_tx: Sender<(u32, Event)>,
        events: Receiver<(u32, Event)>,
    ) {
        let mut restarts = 0u32;
        let mut finished: Vec<(usize, Committable)> = Vec::new();
        loop {
            let (number, event) = match events.recv_timeout(std::time::Duration::from_millis(200)) {
                Ok(e) => e,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if self.coordination.stop_requested.load(Ordering::SeqCst) {
                        // Stopped: nothing after the last checkpoint is committed.
                        attempt.stop();
                        return;
                    }
                    // Never wait for tasks that are gone: that is a failure too (unless
                    // their last events arrived meanwhile).
                    if attempt.threads.iter().all(|t| t.is_finished()) {
                        if let Ok(e) = events.try_recv() {
                            e
                        } else {
                            (
                                attempt.number,
                                Event::Failed(SluiceError::Internal(
                                    "every task of the job stopped without finishing".into(),
                                )),
                            )
                        }
                    } else {
                        continue;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            };
            if number != attempt.number {
                continue; // from a cancelled attempt
            }
            let outcome = match event {
                Event::Barrier { id, source, offset } => {
                    let p = self.checkpoints.pending.entry(id).or_default();
                    p.offsets.insert(source, offset);
                    p.started.get_or_insert_with(Instant::now);
                    self.checkpoints.try_complete(id, &attempt.shape)
                }
                Event::SourceFinished { source, offset } => {
                    self.checkpoints.finished_sources.insert(source, offset);
                    let ids: Vec<u64> = self.checkpoints.pending.keys().copied().collect();
                    ids.into_iter()
                        .try_for_each(|id| self.checkpoints.try_complete(id, &attempt.shape))
                }
                Event::Ack {
                    id,
                    subtask,
                    states,
                    committable,
                    stage,
                    watermark_ms,
                } => {
                    self.checkpoints
                        .pending
                        .entry(id)
                        .or_default()
                        .acks
                        .push(Ack {
                            subtask,
                            states,
                            committable,
                            stage,
                            watermark_ms,
                        });
                    self.checkpoints.try_complete(id, &attempt.shape)
                }
                Event::Finished {
                    subtask,
                    committable,
                } => {
                    finished.push((subtask, committable));
                    self.checkpoints.finished_subtasks.insert(subtask);
                    // Checkpoints this subtask will never acknowledge.
                    let ids: Vec<u64> = self.checkpoints.pending.keys().copied().collect();
                    let declined = ids
                        .into_iter()
                        .try_for_each(|id| self.checkpoints.try_complete(id, &attempt.shape));
                    if declined.is_ok() && finished.len() == attempt.shape.subtasks {
                        finished.sort_by_key(|(s, _)| *s);
                        let finals = std::mem::take(&mut finished).into_iter().map(|(_, c)| c);
                        // A failure here (writing the final checkpoint, a commit) restarts
                        // the job like any other: the restore commits what the final
                        // checkpoint holds, or replays from the last periodic one.
                        let result = self.checkpoints.finish(finals.collect(), &attempt.shape);
                        if result.is_ok() {
                            attempt.stop();
                            return;
                        }
                        result
                    } else {
                        declined
                    }
                }
                Event::Failed(e) => Err(e),
            };
            let Err(error) = outcome else {
                continue;
            };
            attempt.stop();
            if self.coordination.stop_requested.load(Ordering::SeqCst) {
                return; // stopping, not failing
            }
            if self.out_tx.is_closed()
                || matches!(&error, SluiceError::Execution(m) if m == RECEIVER_CLOSED)
            {
                return; // nobody reads the results any more
            }
            finished.clear();
            self.checkpoints.clear_attempt();
            match self.restart(&mut restarts, error, &events_tx) {
                Ok(a) => attempt = a,
                Err(e) => {
                    let _ = self.out_tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    }

    /// Restarts after `error` under the restart strategy; the error to end the job with
    /// when no restart is left.
    pub(super) fn restart(
        &mut self,
        restarts: &mut u32,
        mut error: SluiceError,
        events: &Sender<(u32, Event)>,
    ) -> Result<Attempt> {
        let strategy = self.config.checkpoint.restart;
        loop {
            let Some(strategy) = strategy.filter(|s| *restarts < s.attempts) else {
                return Err(match strategy {
                    Some(s) => SluiceError::Execution(format!(
                        "the job failed after {} restart(s) (restart-strategy.fixed-delay.attempts \
                         = {}): {error}",
                        *restarts, s.attempts
                    )),
                    None => error,
                });
            };
            *restarts += 1;
            JobMetrics::add(&self.metrics.restarts, 1);
            warn(&format!(
                "job '{}' failed: {error}; restarting ({} of {})",
                self.job_name, restarts, strategy.attempts
            ));
            std::thread::sleep(strategy.delay);
            match self.relaunch(*restarts, events) {
                Ok(a) => return Ok(a),
                Err(e) => error = e,
            }
        }
    }

    /// Starts a new attempt from the restore point the guarantee calls for.
    pub(super) fn relaunch(
        &mut self,
        number: u32,
        events: &Sender<(u32, Event)>,
    ) -> Result<Attempt> {
        let (restore, resume) = match self.mode() {
            CheckpointingMode::AtMostOnce => {
                let live = self
                    .coordination
                    .live_offset
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                (None, Some(live).filter(|l| !l.is_empty()))
            }
            _ => (self.restore_point()?, None),
        };
        self.prepare_restore(restore.as_ref())?;
        self.launch(number, restore.as_ref(), resume, events)
    }
}
