//! Sluice's SQL front end: the Flink-dialect parser and the streaming planner.
//!
//! Planning is a pure function from SQL text plus a catalog to the plan IR
//! ([`sluice_common::plan::PlanNode`]); nothing here runs a query.

#![warn(missing_docs)]

pub mod catalog;
pub mod ddl;
pub mod dialect;
pub mod flink_types;
pub mod functions;
pub mod match_recognize;
mod names;
pub mod parser;
pub mod planner;
pub mod row_pattern_parser;

pub use catalog::{Catalog, TableDef, ViewDef};
pub use parser::{parse_script, ParsedStatement, QueryStatement, Statement};
pub use planner::{flink_type_name, Planner};
