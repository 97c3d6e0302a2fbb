//! The window functions SQL can call in `OVER (...)`: `ROW_NUMBER`, `RANK`, `DENSE_RANK`
//! (Top-N and deduplication), `LAG` and `FIRST_VALUE` / `LAST_VALUE` (OVER aggregation:
//! DataFusion's SQL planner resolves these two names in `OVER` to window functions only;
//! the planner maps them back onto the aggregates). They exist for planning only:
//! the planner turns them into Sluice's ordered operators (`Rank`, `OverAggregate`), which
//! compute them; DataFusion never evaluates them.

use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{exec_err, plan_err, Result};
use datafusion_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion_expr::{PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl};

/// The window functions by (lower-case) name.
pub(crate) fn window_functions() -> Vec<Arc<WindowUDF>> {
    [
        "row_number",
        "rank",
        "dense_rank",
        "lag",
        "first_value",
        "last_value",
    ]
    .into_iter()
    .map(|name| Arc::new(WindowUDF::from(FlinkWindow::new(name))))
    .collect()
}

/// One planning-only window function (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
struct FlinkWindow {
    name: &'static str,
    signature: Signature,
}

impl FlinkWindow {
    fn new(name: &'static str) -> Self {
        let signature = if matches!(name, "lag" | "first_value" | "last_value") {
            // LAG(value [, offset [, default]]), FIRST_VALUE(value), LAST_VALUE(value):
            // checked in `field`.
            Signature::variadic_any(Volatility::Immutable)
        } else {
            Signature::nullary(Volatility::Immutable)
        };
        FlinkWindow { name, signature }
    }
}

impl WindowUDFImpl for FlinkWindow {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        _args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        exec_err!("{} is computed by Sluice's ordered operators", self.name)
    }

    /// `ROW_NUMBER`, `RANK`, `DENSE_RANK`: `BIGINT NOT NULL` (Flink); `LAG`,
    /// `FIRST_VALUE`, `LAST_VALUE`: the value's type, nullable.
    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        let name = args.name();
        let fields = args.input_fields();
        match self.name {
            "lag" if fields.is_empty() || fields.len() > 3 => {
                return plan_err!("LAG takes 1 to 3 arguments (value [, offset [, default]])")
            }
            "first_value" | "last_value" if fields.len() != 1 => {
                return plan_err!("{} takes one argument", self.name.to_uppercase())
            }
            "lag" | "first_value" | "last_value" => {}
            _ => return Ok(Arc::new(Field::new(name, DataType::Int64, false))),
        }
        Ok(Arc::new(Field::new(
            name,
            fields[0].data_type().clone(),
            true,
        )))
    }
}
