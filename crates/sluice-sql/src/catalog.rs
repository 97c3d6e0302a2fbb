//! The session catalog: tables, views and the placeholders that stand for lifted window
//! table function calls, plus DataFusion's [`ContextProvider`] over them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion_common::config::ConfigOptions;
use datafusion_common::utils::datafusion_strsim::levenshtein;
use datafusion_common::{DataFusionError, TableReference};
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::{
    AggregateUDF, Expr, HigherOrderUDF, LogicalPlan, ScalarUDF, TableSource, WindowUDF,
};
use sluice_common::plan::ConnectorOptions;

pub(crate) use crate::functions::FunctionRegistry;
use crate::match_recognize::PlannedMatchRecognize;
use crate::parser::{TemporalRef, WindowTvfCall};

/// Names of the columns a window table function appends to its input.
pub const WINDOW_START: &str = "window_start";
/// See [`WINDOW_START`].
pub const WINDOW_END: &str = "window_end";
/// See [`WINDOW_START`].
pub const WINDOW_TIME: &str = "window_time";
/// The window columns of a legacy group window (internal: the query names them through
/// `TUMBLE_START(...)` and the like, and the input may have columns called `window_start`).
pub const LEGACY_WINDOW_COLUMNS: [&str; 3] = [
    "__sluice_window_start",
    "__sluice_window_end",
    "__sluice_window_time",
];

/// A table declared with `CREATE TABLE`.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// Table name.
    pub name: String,
    /// Every column in declared order (physical and computed).
    pub schema: SchemaRef,
    /// The physical columns only (what the connector reads or writes).
    pub physical_schema: SchemaRef,
    /// One expression per column of `schema`, over the physical columns (qualified by the
    /// table name): a column reference, or a computed column's expression.
    pub column_exprs: Vec<Expr>,
    /// Per column: the type as written, and the computed expression's text.
    pub columns: Vec<ColumnInfo>,
    /// `WATERMARK FOR`: rowtime column index, expression over `schema`, text.
    pub watermark: Option<(usize, Expr, String)>,
    /// Primary key columns.
    pub primary_key: Vec<String>,
    /// The `METADATA` columns.
    pub metadata: Vec<MetadataColumn>,
    /// `WITH` options.
    pub options: ConnectorOptions,
    /// The definition as declared (after `LIKE` merging): the source of a later `LIKE`
    /// or `ALTER TABLE`.
    pub definition: crate::parser::CreateTable,
}

impl TableDef {
    /// Checks the table's `WITH` options against the declarations of its connector and
    /// format (`sluice_common::options`), as Flink does when a query reads or writes it.
    ///
    /// # Errors
    /// An unknown connector, format or key (listing the supported ones), or a value of the
    /// wrong kind.
    pub fn check_options(&self) -> sluice_common::Result<()> {
        let columns: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        sluice_common::options::check_table_options(&self.name, &self.options, &columns)?;
        let connector = self
            .options
            .get("connector")
            .map(String::as_str)
            .unwrap_or("");
        let keys = sluice_common::options::metadata_keys(connector);
        for m in &self.metadata {
            if !keys.iter().any(|k| k.key == m.key) {
                let list: Vec<String> = keys
                    .iter()
                    .map(|k| format!("'{}' {}", k.key, k.flink_type))
                    .collect();
                return Err(sluice_common::SluiceError::Plan(format!(
                    "Invalid metadata key '{}' in column '{}' of table '{}'. The '{connector}' \
                     connector supports the following metadata keys: {}",
                    m.key,
                    m.column,
                    self.name,
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    }
                )));
            }
        }
        Ok(())
    }

    /// The options the connector reads: the declared ones, `sluice.metadata.<column>` =
    /// `<key>` for each metadata column, and for an `upsert-kafka` table `key.fields` from
    /// its primary key (Flink's upsert-kafka keys messages by it).
    ///
    /// # Errors
    /// An `upsert-kafka` table without a primary key (Flink's message).
    pub fn connector_options(&self) -> sluice_common::Result<ConnectorOptions> {
        let mut options = self.options.clone();
        for m in &self.metadata {
            options.insert(
                format!(
                    "{}{}",
                    sluice_common::options::METADATA_OPTION_PREFIX,
                    m.column
                ),
                m.key.clone(),
            );
        }
        if options.get("connector").map(String::as_str) == Some("upsert-kafka") {
            if self.primary_key.is_empty() {
                return Err(sluice_common::SluiceError::Plan(format!(
                    "'upsert-kafka' tables require to define a PRIMARY KEY constraint (table \
                     '{}'). The PRIMARY KEY specifies which columns should be read from or \
                     written to the Kafka message key, and on which keys rows are updated or \
                     deleted",
                    self.name
                )));
            }
            options.insert("key.fields".into(), self.primary_key.join(";"));
        }
        Ok(options)
    }
}

/// Display facts of one column, for DESCRIBE.
#[derive(Debug, Clone)]
pub struct ColumnInfo {
    /// Flink type text (`TIMESTAMP(3)`, `STRING`, ...).
    pub type_text: String,
    /// `AS expr` of a computed column.
    pub computed: Option<String>,
    /// `METADATA FROM 'key' [VIRTUAL]` of a metadata column, as shown.
    pub metadata: Option<String>,
}

/// A `METADATA` column: filled by the connector from a message's metadata `key`.
#[derive(Debug, Clone)]
pub struct MetadataColumn {
    /// The column (a physical column of the table's source).
    pub column: String,
    /// The connector's metadata key.
    pub key: String,
    /// `VIRTUAL`: read only, not written by an `INSERT`.
    pub is_virtual: bool,
}

/// A view declared with `CREATE VIEW`.
#[derive(Debug, Clone)]
pub struct ViewDef {
    /// View name.
    pub name: String,
    /// The analyzed logical plan of the view's query.
    pub plan: LogicalPlan,
    /// The query as written.
    pub text: String,
}

/// Tables, views and query placeholders of one session.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    /// Tables by name.
    pub tables: BTreeMap<String, TableDef>,
    /// Views by name.
    pub views: BTreeMap<String, ViewDef>,
    /// Lifted window table function calls by placeholder name.
    pub window_tvfs: HashMap<String, WindowTvfCall>,
    /// Lifted MATCH_RECOGNIZE clauses by placeholder name, planned against their input.
    pub match_recognize: HashMap<String, PlannedMatchRecognize>,
    /// Lifted `FOR SYSTEM_TIME AS OF` references by placeholder name.
    pub temporal: HashMap<String, TemporalRef>,
    /// Queries a rewrite made relations of their own (the input of a legacy group
    /// window: its `FROM` and `WHERE`), by placeholder name. Not listed as views.
    pub inline_views: HashMap<String, ViewDef>,
}

impl Catalog {
    /// Whether a table or a view of that name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.views.contains_key(name)
    }

    /// The Arrow schema of a table or view.
    pub fn relation_schema(&self, name: &str) -> Option<SchemaRef> {
        if let Some(t) = self.tables.get(name) {
            return Some(Arc::clone(&t.schema));
        }
        self.views
            .get(name)
            .or_else(|| self.inline_views.get(name))
            .map(|v| Arc::new(v.plan.schema().as_arrow().clone()))
    }

    /// "table 'x' not found", with the closest existing name when one is near.
    pub fn unknown_relation(&self, name: &str) -> String {
        let candidates = self.tables.keys().chain(self.views.keys());
        match closest(name, candidates.map(|s| s.as_str())) {
            Some(c) => format!("Table or view '{name}' not found. Did you mean '{c}'?"),
            None if self.tables.is_empty() && self.views.is_empty() => {
                format!("Table or view '{name}' not found: no table is declared yet (CREATE TABLE)")
            }
            None => format!(
                "Table or view '{name}' not found. Known: {}",
                self.tables
                    .keys()
                    .chain(self.views.keys())
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The schema a window table function call produces: its input's columns plus
    /// `window_start`, `window_end`, `window_time` (all `TIMESTAMP(3)`, not null).
    pub fn window_tvf_schema(&self, call: &WindowTvfCall) -> Result<SchemaRef, String> {
        let input = self
            .relation_schema(&call.input)
            .ok_or_else(|| self.unknown_relation(&call.input))?;
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        // Over a TIMESTAMP_LTZ attribute, window_time is TIMESTAMP_LTZ(3) too (Flink);
        // window_start and window_end are wall-clock TIMESTAMP(3)s.
        let time_field = input.field_with_name(&call.time_column).ok().cloned();
        let ltz = time_field
            .as_ref()
            .is_some_and(|f| matches!(f.data_type(), DataType::Timestamp(_, Some(_))));
        let [_, _, time_name] = call.window_columns();
        for name in call.window_columns() {
            if input.field_with_name(name).is_ok() {
                return Err(format!(
                    "{} input '{}' already has a column named {name}",
                    call.kind.name(),
                    call.input
                ));
            }
            let tz = (ltz && name == time_name).then(|| "UTC".into());
            let field = Field::new(name, DataType::Timestamp(TimeUnit::Millisecond, tz), false);
            // Over a processing-time attribute, window_time is one too (Flink).
            let field = match &time_field {
                Some(t) if name == time_name && sluice_common::types::is_proctime(t) => {
                    field.with_metadata(t.metadata().clone())
                }
                _ => field,
            };
            fields.push(field);
        }
        Ok(Arc::new(Schema::new(fields)))
    }
}

/// The closest candidate by edit distance, if it is close enough to be a likely typo.
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.to_lowercase();
    candidates
        .map(|c| (levenshtein(&lower, &c.to_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(name.len()) / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// A relation seen by DataFusion's SQL planner: just its schema.
#[derive(Debug)]
pub(crate) struct RelationSource {
    schema: SchemaRef,
}

impl TableSource for RelationSource {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}

/// DataFusion's view of the catalog while planning one statement.
pub(crate) struct SqlContext<'a> {
    pub(crate) catalog: &'a Catalog,
    pub(crate) functions: &'a FunctionRegistry,
    pub(crate) user: &'a crate::functions::user::UserFunctions,
    pub(crate) options: ConfigOptions,
}

impl ContextProvider for SqlContext<'_> {
    fn get_table_source(
        &self,
        name: TableReference,
    ) -> datafusion_common::Result<Arc<dyn TableSource>> {
        let table = name.table();
        let schema = if let Some(call) = self.catalog.window_tvfs.get(table) {
            self.catalog
                .window_tvf_schema(call)
                .map_err(DataFusionError::Plan)?
        } else if let Some(mr) = self.catalog.match_recognize.get(table) {
            Arc::new(mr.schema.clone())
        } else if let Some(schema) = self
            .catalog
            .temporal
            .get(table)
            .and_then(|r| self.catalog.relation_schema(&r.table))
        {
            schema
        } else if let Some(schema) = self.catalog.relation_schema(table) {
            schema
        } else {
            return Err(DataFusionError::Plan(self.catalog.unknown_relation(table)));
        };
        Ok(Arc::new(RelationSource { schema }))
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.functions.planners
    }

    fn get_type_planner(&self) -> Option<Arc<dyn datafusion_expr::planner::TypePlanner>> {
        Some(Arc::new(crate::flink_types::FlinkTypePlanner))
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        if let Some(table) = name.strip_prefix(crate::functions::user::TABLE_FUNCTION_PREFIX) {
            return self.user.table(table);
        }
        self.user
            .scalar(name, true)
            .or_else(|| self.functions.scalars.get(name).cloned())
            .or_else(|| self.user.scalar(name, false))
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.user
            .aggregate(name, true)
            .or_else(|| self.functions.aggregates.get(name).cloned())
            .or_else(|| self.user.aggregate(name, false))
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        self.functions.windows.get(name).cloned()
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.functions.scalars.keys().cloned().collect()
    }

    fn udaf_names(&self) -> Vec<String> {
        self.functions.aggregates.keys().cloned().collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.functions.windows.keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        vec![]
    }
}
