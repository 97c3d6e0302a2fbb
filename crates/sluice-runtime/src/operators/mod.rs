//! The operators: one module per kind.

pub mod group_aggregate;
pub mod match_recognize;
pub mod session_aggregate;
pub mod stateless;
pub mod window_aggregate;
pub mod window_assign;
