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
