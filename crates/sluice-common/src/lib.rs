//! Shared vocabulary of Sluice: the error type, event time in milliseconds, and the plan
//! IR (the physical operator graph) that the SQL planner emits and the runtime executes.
//!
//! This crate depends on no other Sluice crate.

#![warn(missing_docs)]

pub mod error;
pub mod numeric;
pub mod options;
pub mod plan;
pub mod row_pattern;
pub mod time;
pub mod types;

pub use error::{Result, SluiceError};
