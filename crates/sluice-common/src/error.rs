//! The one error type of Sluice, with variants by phase and by who must act.
//!
//! Modelled on DataFusion's `DataFusionError` (variants by phase) and Arroyo's
//! `DataflowError` (user vs. internal blame): a `Sql` error is the user's SQL text, a
//! `Plan` error is a query that parses but cannot run, a `Data` error is bad input data
//! (it names the file, line and column), `Execution` is a runtime failure, and `Internal`
//! is a bug in Sluice.

use datafusion_common::DataFusionError;

/// Result alias used across Sluice.
pub type Result<T, E = SluiceError> = std::result::Result<T, E>;

/// Every error Sluice reports.
#[derive(Debug, thiserror::Error)]
pub enum SluiceError {
    /// The SQL text does not parse. The message names the line and column (1-based) and
    /// what was expected there.
    #[error("SQL error: {0}")]
    Sql(String),
    /// The SQL parses but cannot be planned: unknown table or column (with the closest
    /// name), wrong argument, unsupported construct.
    #[error("Planning error: {0}")]
    Plan(String),
    /// A construct Sluice parses but does not run yet.
    #[error("Not yet supported: {0}")]
    NotSupported(String),
    /// Bad input data: the message names file, line and column.
    #[error("Data error: {0}")]
    Data(String),
    /// A failure while running a job (I/O, a connector, an operator).
    #[error("Execution error: {0}")]
    Execution(String),
    /// A configuration key or value is invalid.
    #[error("Configuration error: {0}")]
    Config(String),
    /// An error from DataFusion or Arrow while planning or evaluating expressions.
    #[error("{0}")]
    DataFusion(#[from] DataFusionError),
    /// An I/O error, with what was being done.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What Sluice was doing (e.g. "reading 'data/x.csv'").
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A broken invariant: a bug in Sluice.
    #[error("Internal error: {0}. This is a bug in Sluice; please report it")]
    Internal(String),
}

impl From<datafusion_common::arrow::error::ArrowError> for SluiceError {
    fn from(e: datafusion_common::arrow::error::ArrowError) -> Self {
        SluiceError::DataFusion(DataFusionError::ArrowError(Box::new(e), None))
    }
}

impl SluiceError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SluiceError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Returns early with a [`SluiceError::Plan`] built from `format!` arguments.
#[macro_export]
macro_rules! plan_err {
    ($($arg:tt)*) => { Err($crate::SluiceError::Plan(format!($($arg)*))) };
}

/// Returns early with a [`SluiceError::Execution`] built from `format!` arguments.
#[macro_export]
macro_rules! exec_err {
    ($($arg:tt)*) => { Err($crate::SluiceError::Execution(format!($($arg)*))) };
}

/// Returns early with a [`SluiceError::Internal`] built from `format!` arguments.
#[macro_export]
macro_rules! internal_err {
    ($($arg:tt)*) => { Err($crate::SluiceError::Internal(format!($($arg)*))) };
}

/// Returns early with a [`SluiceError::NotSupported`] built from `format!` arguments.
#[macro_export]
macro_rules! not_supported {
    ($($arg:tt)*) => { Err($crate::SluiceError::NotSupported(format!($($arg)*))) };
}
