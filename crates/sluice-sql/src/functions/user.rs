//! User-defined functions (Flink SQL "CREATE FUNCTION"; issue 18): an embedding
//! application registers DataFusion `ScalarUDF`s and `AggregateUDF`s, and table functions,
//! under an identifier (`Engine::register_udf` / `register_udaf` / `register_udtf`; Flink's
//! is a class name), and
//! `CREATE [TEMPORARY [SYSTEM]] FUNCTION name AS 'identifier'` binds a SQL name to one.
//! Lookup order, as Flink's: a `SYSTEM` function shadows the built-in of its name; other
//! bound names come after the built-ins.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_expr::{AggregateUDF, ScalarUDF};
use sluice_common::{Result, SluiceError};

/// A function an application registered.
#[derive(Clone, Debug)]
pub enum UserFunction {
    /// A scalar function (one value per row).
    Scalar(Arc<ScalarUDF>),
    /// An aggregate function (retractable if its accumulator says so).
    Aggregate(Arc<AggregateUDF>),
    /// A table function (Flink's `TableFunction`, called as `LATERAL TABLE(f(...))`): a
    /// scalar function whose value for a row is the ARRAY of the rows it emits for it, an
    /// `ARRAY<ROW<...>>` (one column per field) or an `ARRAY<T>` (one column, `f0`).
    Table(Arc<ScalarUDF>),
}

/// The prefix of the internal name under which a bound table function is resolved
/// (`LATERAL TABLE(f(x))` is planned as `UNNEST("$table:f"(x))`, planner/unnest.rs).
pub(crate) const TABLE_FUNCTION_PREFIX: &str = "$table:";

/// The registered functions and the SQL names bound to them in one session.
#[derive(Default, Clone, Debug)]
pub struct UserFunctions {
    registered: HashMap<String, UserFunction>,
    /// Lower-case SQL name → (function, `SYSTEM`).
    bound: HashMap<String, (UserFunction, bool)>,
}

impl UserFunctions {
    /// Registers `f` under `identifier` (replacing an earlier one of that identifier).
    pub fn register(&mut self, identifier: &str, f: UserFunction) {
        self.registered.insert(identifier.to_string(), f);
    }

    /// `CREATE FUNCTION name AS 'identifier'`.
    ///
    /// # Errors
    /// An identifier nothing was registered under (the message points at the API), or a
    /// name already bound without `IF NOT EXISTS`.
    pub fn bind(
        &mut self,
        name: &str,
        identifier: &str,
        if_not_exists: bool,
        system: bool,
    ) -> Result<()> {
        let Some(f) = self.registered.get(identifier).cloned() else {
            let mut known: Vec<&String> = self.registered.keys().collect();
            known.sort();
            return Err(SluiceError::Plan(format!(
                "CREATE FUNCTION {name}: no function is registered under '{identifier}'; an \
                 application registers Rust functions with Engine::register_udf / \
                 register_udaf / register_udtf (registered: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known
                        .iter()
                        .map(|k| format!("'{k}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )));
        };
        let key = name.to_lowercase();
        if self.bound.contains_key(&key) {
            if if_not_exists {
                return Ok(());
            }
            return Err(SluiceError::Plan(format!(
                "function '{name}' already exists"
            )));
        }
        self.bound.insert(key, (f, system));
        Ok(())
    }

    /// `DROP FUNCTION name`: whether it was bound.
    ///
    /// # Errors
    /// A name not bound, without `IF EXISTS`.
    pub fn unbind(&mut self, name: &str, if_exists: bool) -> Result<bool> {
        match self.bound.remove(&name.to_lowercase()) {
            Some(_) => Ok(true),
            None if if_exists => Ok(false),
            None => Err(SluiceError::Plan(format!(
                "function '{name}' does not exist"
            ))),
        }
    }

    /// The scalar function bound to `name`; `system`: only a `SYSTEM` one.
    pub(crate) fn scalar(&self, name: &str, system: bool) -> Option<Arc<ScalarUDF>> {
        match self.bound.get(&name.to_lowercase()) {
            Some((UserFunction::Scalar(f), s)) if *s || !system => Some(Arc::clone(f)),
            _ => None,
        }
    }

    /// The table function bound to `name`.
    pub(crate) fn table(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        match self.bound.get(&name.to_lowercase()) {
            Some((UserFunction::Table(f), _)) => Some(Arc::clone(f)),
            _ => None,
        }
    }

    /// The aggregate function bound to `name`; `system`: only a `SYSTEM` one.
    pub(crate) fn aggregate(&self, name: &str, system: bool) -> Option<Arc<AggregateUDF>> {
        match self.bound.get(&name.to_lowercase()) {
            Some((UserFunction::Aggregate(f), s)) if *s || !system => Some(Arc::clone(f)),
            _ => None,
        }
    }

    /// The bound names, lower case.
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.bound.keys()
    }
}
