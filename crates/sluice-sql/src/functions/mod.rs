//! Flink's built-in functions: the only functions SQL can call.
//!
//! Rule (issue 17): built-in functions and their result types follow Flink 2.3, even where
//! the SQL standard or DataFusion differs. Every name SQL can resolve is listed here: a
//! DataFusion function only where its values and result type are Flink's (checked by the
//! conformance table, `tests/functions/`), our own [`udf::FlinkScalar`] otherwise. A
//! DataFusion function not listed cannot be called (an unknown-function error), so one
//! whose semantics differ from Flink's same-named function cannot slip through. Functions
//! of Flink's list that Sluice does not have are in [`NOT_SUPPORTED`] with the reason.

mod aggregates;
mod arithmetic;
pub mod bitmap;
mod bytes;
pub(crate) mod cast;
mod collection;
pub(crate) mod decimal;
mod hash;
mod java_time;
mod json;
mod json_agg;
pub(crate) mod literals;
mod misc;
mod multiset;
mod planner;
mod regex;
pub(crate) mod rewrite;
mod rows;
mod string;
pub(crate) mod syntax;
pub mod temporal;
mod udf;
pub mod user;
mod window;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datafusion_expr::planner::ExprPlanner;
use datafusion_expr::{AggregateUDF, ScalarUDF};
use sluice_common::time::Tz;

pub use cast::nested_texts;
pub use temporal::ToTimestampLtz;

/// Flink functions taken from DataFusion unchanged: (Flink name, DataFusion name). Each
/// one's values and result type are checked against Flink's by the conformance table.
const DATAFUSION_SCALARS: &[(&str, &str)] = &[
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
    // Behind GREATEST / LEAST, which are NULL when an argument is (functions::syntax).
    ("$greatest", "greatest"),
    ("$least", "least"),
];

/// Flink aggregate functions taken from DataFusion: (Flink name, DataFusion name).
const DATAFUSION_AGGREGATES: &[(&str, &str)] = &[
    ("count", "count"),
    ("min", "min"),
    ("max", "max"),
    ("grouping", "grouping"),
];

/// Flink aggregates computed by a DataFusion aggregate with Flink's result type
/// ([`aggregates::FlinkTyped`]): (Flink name, DataFusion name).
const DEVIATIONS: &[(&str, &str)] = &[
    ("stddev_pop", "stddev_pop"),
    ("stddev_samp", "stddev"),
    ("stddev", "stddev"),
    ("var_pop", "var_pop"),
    ("var_samp", "var"),
    ("variance", "var"),
];

const OVER: &str = "Sluice has ROW_NUMBER, RANK and DENSE_RANK for Top-N and deduplication, and aggregates and LAG over OVER windows";
const JSON: &str = "JSON functions are not built yet (issue 17)";
const LATER: &str = "not built yet (issue 17)";

/// The auxiliary functions of legacy group windows, rewritten onto window columns by
/// `planner/legacy_windows.rs` (only with a `GROUP BY TUMBLE|HOP|SESSION(...)`).
pub(crate) const GROUP_WINDOW_AUXILIARIES: &[&str] = &[
    "tumble_start",
    "tumble_end",
    "tumble_rowtime",
    "tumble_proctime",
    "hop_start",
    "hop_end",
    "hop_rowtime",
    "hop_proctime",
    "session_start",
    "session_end",
    "session_rowtime",
    "session_proctime",
];

/// Functions of Flink 2.3's list (`tests/functions/flink-2.3-functions.txt`) that Sluice
/// does not have, with the reason; calling one is a "not supported" error naming it.
pub const NOT_SUPPORTED: &[(&str, &str)] = &[
    (
        "multiset",
        "MULTISET values come from COLLECT (a MULTISET constructor is not supported)",
    ),
    ("object_of", "structured types are not supported"),
    ("object_update", "structured types are not supported"),
    ("parse_json", "the VARIANT type is not supported"),
    ("try_parse_json", "the VARIANT type is not supported"),
    ("ml_predict", "models are not supported"),
    ("percent_rank", OVER),
    ("cume_dist", OVER),
    ("ntile", OVER),
    (
        "lead",
        "a streaming OVER window ends at the current row (Flink has no LEAD in streaming either); use LAG",
    ),
    ("current_watermark", "not built yet (issue 15)"),
    (
        "current_row_timestamp",
        "processing time in queries is not built yet (issue 15)",
    ),
    ("json", JSON),
    (
        "between symmetric",
        "BETWEEN SYMMETRIC is not parsed yet (issue 22)",
    ),
    (
        "not between symmetric",
        "BETWEEN SYMMETRIC is not parsed yet (issue 22)",
    ),
    ("approx_count_distinct", LATER),
    ("percentile", LATER),
    ("printf", LATER),
];

/// The functions SQL can call in one session (its time zone is part of some functions).
pub(crate) struct FunctionRegistry {
    pub(crate) scalars: HashMap<String, Arc<ScalarUDF>>,
    pub(crate) aggregates: HashMap<String, Arc<AggregateUDF>>,
    /// Window functions (`OVER (...)` only; planning only, see `window`).
    pub(crate) windows: HashMap<String, Arc<datafusion_expr::WindowUDF>>,
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
            .chain(json::FUNCTIONS)
            .chain(misc::FUNCTIONS)
            .chain(collection::FUNCTIONS)
            .chain(bitmap::FUNCTIONS)
            .chain(bytes::FUNCTIONS)
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
        aggregates.insert("avg".to_string(), aggregates::FlinkAvg::udaf());
        aggregates.insert("collect".to_string(), multiset::Collect::udaf());
        for (name, pick) in [
            ("first_value", aggregates::Pick::First),
            ("last_value", aggregates::Pick::Last),
            ("listagg", aggregates::Pick::Join),
            ("array_agg", aggregates::Pick::Array),
        ] {
            aggregates.insert(name.to_string(), aggregates::ArrivalOrder::udaf(name, pick));
        }
        for f in bitmap::aggregates()
            .into_iter()
            .chain(json_agg::aggregates())
        {
            aggregates.insert(f.name().to_string(), f);
        }
        aggregates.insert(
            "sum".to_string(),
            aggregates::sum(Arc::clone(&datafusion_aggregates["sum"])),
        );
        for (flink, df) in DEVIATIONS {
            let inner = Arc::clone(&datafusion_aggregates[*df]);
            aggregates.insert(flink.to_string(), aggregates::deviation(flink, inner));
        }
        let planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(planner::FlinkSyntax::new(&scalars)),
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions_aggregate::planner::AggregateFunctionPlanner),
        ];
        let windows = window::window_functions()
            .into_iter()
            .map(|f| (f.name().to_string(), f))
            .collect();
        FunctionRegistry {
            scalars,
            aggregates,
            windows,
            planners,
        }
    }

    /// Every function name SQL can call, upper case, sorted (`SHOW FUNCTIONS`).
    pub(crate) fn names(&self) -> Vec<String> {
        let names: BTreeSet<String> = self
            .scalars
            .keys()
            .chain(self.aggregates.keys())
            .chain(self.windows.keys())
            .map(String::as_str)
            .chain(syntax::REWRITTEN.iter().copied())
            .chain(GROUP_WINDOW_AUXILIARIES.iter().copied())
            .filter(|n| !n.starts_with('$'))
            .map(str::to_uppercase)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Plan fingerprints are built from `Debug` text: a function's must not show addresses
    /// (function pointers), which change between processes.
    #[test]
    fn debug_text_of_every_function_is_stable() {
        let utc = sluice_common::time::parse_time_zone("UTC").unwrap();
        let r = FunctionRegistry::new(utc);
        for (name, f) in &r.scalars {
            let text = format!("{:?}", f.inner());
            assert!(!text.contains("0x"), "{name}: {text}");
        }
        for (name, f) in &r.aggregates {
            let text = format!("{:?}", f.inner());
            assert!(!text.contains("0x"), "{name}: {text}");
        }
    }
}
