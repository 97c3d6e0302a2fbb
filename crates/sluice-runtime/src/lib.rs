//! Sluice's runtime: operators over Arrow batches with event time, keyed window state,
//! connectors, and the task driver that runs a plan.
//!
//! The runtime consumes the plan IR ([`sluice_common::plan`]); it never sees SQL.

#![warn(missing_docs)]

mod build;
pub mod checkpoint;
pub mod clock;
pub mod connectors;
pub mod expr;
mod gate;
pub mod graph;
pub mod job;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod operators;
pub mod state;
mod tasks;
#[cfg(test)]
mod test_rng;

pub use checkpoint::{CheckpointConfig, CheckpointingMode, FailPoints, RestartStrategy};
pub use clock::ProcessingClock;
pub use futures_core::Stream;
pub use job::{start, start_all, JobConfig, JobHandle, RunningJob};
pub use metrics::JobMetrics;
