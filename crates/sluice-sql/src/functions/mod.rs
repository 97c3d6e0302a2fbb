//! Flink's built-in functions: the only functions SQL can call.
//!
//! Rule (issue 17): built-in functions and their result types follow Flink 2.3, even where
//! the SQL standard or DataFusion differs. Every name SQL can resolve is listed here: a
//! DataFusion function only where its values and result type are Flink's (checked by the
//! conformance table, `tests/functions/`), our own [`udf::FlinkScalar`] otherwise. A
//! DataFusion function not listed cannot be called (an unknown-function error), so one
//! whose semantics differ from Flink's same-named function cannot slip through. Functions
//! of Flink's list that Sluice does not have are in [`NOT_SUPPORTED`] with the reason.

mod arithmetic;
mod hash;
mod java_time;
pub(crate) mod literals;
mod planner;
mod regex;
mod rows;
mod string;
pub(crate) mod syntax;
pub mod temporal;
mod udf;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datafusion_expr::planner::ExprPlanner;
use datafusion_expr::{AggregateUDF, ScalarUDF};
use sluice_common::time::Tz;

pub use temporal::ToTimestampLtz;

/// Flink functions taken from DataFusion unchanged: (Flink name, DataFusion name). Each
/// one's values and result type are checked against Flink's by the conformance table.
const DATAFUSION_SCALARS: &[(&str, &str)] = &[
    ("abs", "abs"),
    ("acos", "acos"),
    ("asin", "asin"),
    ("atan", "atan"),
    ("atan2", "atan2"),
    ("cos", "cos"),
    ("cosh", "cosh"),
    ("cot", "cot"),
    ("degrees", "degrees"),
    ("exp", "exp"),
    ("ln", "ln"),
    ("log10", "log10"),
    ("log2", "log2"),
    ("pi", "pi"),
    ("power", "power"),
    ("radians", "radians"),
    ("sin", "sin"),
    ("sinh", "sinh"),
    ("tan", "tan"),
    ("tanh", "tanh"),
    ("coalesce", "coalesce"),
    ("nullif", "nullif"),
    // Behind GREATEST / LEAST, which are NULL when an argument is (functions::syntax).
    ("$greatest", "greatest"),
    ("$least", "least"),
];

/// Flink aggregate functions taken from DataFusion: (Flink name, DataFusion name).
const DATAFUSION_AGGREGATES: &[(&str, &str)] = &[
    ("count", "count"),
    ("sum", "sum"),
    ("min", "min"),
    ("max", "max"),
    ("avg", "avg"),
    ("stddev_pop", "stddev_pop"),
    ("stddev_samp", "stddev"),
    ("stddev", "stddev"),
    ("var_pop", "var_pop"),
    ("var_samp", "var"),
    ("variance", "var"),
];

/// Functions of Flink 2.3's list that Sluice does not have, with the reason; calling one is
/// a "not supported" error naming it.
pub const NOT_SUPPORTED: &[(&str, &str)] = &[];

/// The functions SQL can call in one session (its time zone is part of some functions).
pub(crate) struct FunctionRegistry {
    pub(crate) scalars: HashMap<String, Arc<ScalarUDF>>,
    pub(crate) aggregates: HashMap<String, Arc<AggregateUDF>>,
    pub(crate) planners: Vec<Arc<dyn ExprPlanner>>,
}

impl FunctionRegistry {
    /// Flink's functions for a session in `zone`.
    pub(crate) fn new(zone: Tz) -> Self {
        let datafusion: HashMap<String, Arc<ScalarUDF>> =
            datafusion_functions::all_default_functions()
                .into_iter()
                .map(|f| (f.name().to_string(), f))
                .collect();
        let mut scalars = HashMap::new();
        for (flink, df) in DATAFUSION_SCALARS {
            let f = datafusion
                .get(*df)
                .unwrap_or_else(|| panic!("DataFusion has no function {df}"));
            scalars.insert(flink.to_string(), Arc::clone(f));
        }
        for def in string::FUNCTIONS
            .iter()
            .chain(temporal::FUNCTIONS)
            .chain(arithmetic::FUNCTIONS)
            .chain(regex::FUNCTIONS)
            .chain(hash::FUNCTIONS)
        {
            scalars.insert(def.name.to_string(), def.udf(zone));
        }
        let ltz = ToTimestampLtz::udf();
        scalars.insert(ltz.name().to_string(), ltz);

        let datafusion_aggregates: HashMap<String, Arc<AggregateUDF>> =
            datafusion_functions_aggregate::all_default_aggregate_functions()
                .into_iter()
                .map(|f| (f.name().to_string(), f))
                .collect();
        let mut aggregates = HashMap::new();
        for (flink, df) in DATAFUSION_AGGREGATES {
            let f = datafusion_aggregates
                .get(*df)
                .unwrap_or_else(|| panic!("DataFusion has no aggregate {df}"));
            aggregates.insert(flink.to_string(), Arc::clone(f));
        }
        let planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(planner::FlinkSyntax::new(&scalars)),
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions_aggregate::planner::AggregateFunctionPlanner),
        ];
        FunctionRegistry {
            scalars,
            aggregates,
            planners,
        }
    }

    /// Every function name SQL can call, upper case, sorted (`SHOW FUNCTIONS`).
    pub(crate) fn names(&self) -> Vec<String> {
        let names: BTreeSet<String> = self
            .scalars
            .keys()
            .chain(self.aggregates.keys())
            .filter(|n| !n.starts_with('$'))
            .map(|n| n.to_uppercase())
            .collect();
        names.into_iter().collect()
    }
}

/// Why Sluice does not have the Flink function `name`, if it is one it lacks.
pub fn not_supported_reason(name: &str) -> Option<&'static str> {
    NOT_SUPPORTED
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, why)| *why)
}
