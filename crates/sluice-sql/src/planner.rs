//! SQL → logical plan → physical operator graph.
//!
//! 1. DataFusion's `SqlToRel` turns a query (with window table function calls already
//!    replaced by placeholder tables) into a `LogicalPlan`; the `TypeCoercion` analyzer
//!    rule coerces its expressions.
//! 2. [`Planner::plan_query`] lowers that logical plan into a streaming [`PlanNode`] tree:
//!    table scans become sources (with watermark assignment), placeholder scans become
//!    window assignment, an `Aggregate` grouped by `window_start` and `window_end`
//!    becomes a keyed window aggregate, projections and filters stay stateless.
//!
//! Event-time attributes are tracked through the plan (`PlanNode::rowtime`); window
//! bounds are tracked so that only a `GROUP BY` over both bounds of one window table
//! function becomes a window aggregate (Flink's rule for window aggregation).

use std::sync::Arc;

use datafusion_common::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion_common::config::ConfigOptions;
use datafusion_common::tree_node::TreeNode;
use datafusion_common::{Column, DFSchema, DFSchemaRef, DataFusionError};
use datafusion_expr::logical_plan::{Aggregate, LogicalPlan, Projection, TableScan, Union};
use datafusion_expr::{Expr, ExprSchemable};
use datafusion_optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use datafusion_optimizer::analyzer::Analyzer;
use datafusion_sql::planner::{ParserOptions, PlannerContext, SqlToRel};
use datafusion_sql::sqlparser::ast;
use sluice_common::plan::{
    GroupOutput, JoinKind, OperatorSpec, PlanNode, SinkSpec, SourceSpec, WatermarkSpec,
    WindowAggregateSpec, WindowInput, WindowKind, WindowSpec,
};
pub use sluice_common::types::flink_type_name;
use sluice_common::{not_supported, plan_err, Result, SluiceError};

use crate::catalog::{
    closest, Catalog, ColumnInfo, FunctionRegistry, SqlContext, TableDef, ViewDef, WINDOW_END,
    WINDOW_START,
};
use crate::match_recognize::PlannedMatchRecognize;

mod aggregate_input;
mod common_subexpr;
mod ddl;
mod grouping_sets;
mod joins;
mod legacy_windows;
mod ordered;
mod prune;
mod temporal;
mod unnest;
mod values;
use crate::parser::{CreateTable, QueryStatement, TvfKind, WindowTvfCall};

/// Plans statements against a session catalog.
pub struct Planner {
    catalog: Catalog,
    functions: FunctionRegistry,
    /// Functions the application registered and the names `CREATE FUNCTION` bound.
    user_functions: crate::functions::user::UserFunctions,
    /// The session time zone (`'table.local-time-zone'`): windows over `TIMESTAMP_LTZ`
    /// attributes align to its wall clock.
    time_zone: sluice_common::time::Tz,
    /// `'table.exec.source.cdc-events-duplicate'`: change-data-capture events may repeat,
    /// so a ChangelogNormalize by primary key follows each such table.
    cdc_events_duplicate: bool,
    /// `'table.exec.sink.not-null-enforcer' = 'DROP'`: a row with a NULL in a NOT NULL
    /// column of a sink is dropped instead of failing the job.
    drop_sink_null_rows: bool,
}

impl Default for Planner {
    fn default() -> Self {
        Self::new()
    }
}

/// A planned stream: the operator tree plus the window bounds it carries, if any.
struct Planned {
    node: PlanNode,
    window: Option<WindowColumns>,
}

/// Where the bounds of a window table function's windows are in a node's output.
#[derive(Clone)]
struct WindowColumns {
    start: usize,
    end: usize,
    /// `window_time`, where the node still has it.
    time: Option<usize>,
    spec: WindowSpec,
    /// `PARTITION BY` columns of a SESSION call.
    partition_by: Vec<String>,
}

impl Planner {
    /// A planner with an empty catalog.
    pub fn new() -> Self {
        let utc = sluice_common::time::parse_time_zone("UTC").expect("UTC is a time zone");
        Planner {
            catalog: Catalog::default(),
            functions: FunctionRegistry::new(utc),
            user_functions: Default::default(),
            time_zone: utc,
            cdc_events_duplicate: false,
            drop_sink_null_rows: false,
        }
    }

    /// `'table.exec.source.cdc-events-duplicate'` (Flink, default false): the events of
    /// change-data-capture tables may be delivered more than once; each such table is then
    /// read through a ChangelogNormalize by its primary key (required).
    pub fn set_cdc_events_duplicate(&mut self, duplicate: bool) {
        self.cdc_events_duplicate = duplicate;
    }

    /// `'table.exec.sink.not-null-enforcer'` (Flink, default `ERROR`): `DROP` drops a row
    /// that has a NULL in a NOT NULL column of the sink it goes to, instead of failing the
    /// job.
    pub fn set_drop_sink_null_rows(&mut self, drop: bool) {
        self.drop_sink_null_rows = drop;
    }

    /// Sets the session time zone (`SET 'table.local-time-zone' = '...'`).
    ///
    /// # Errors
    /// An unknown zone.
    pub fn set_time_zone(&mut self, name: &str) -> Result<()> {
        self.time_zone = sluice_common::time::parse_time_zone(name).map_err(SluiceError::Config)?;
        self.functions = FunctionRegistry::new(self.time_zone);
        Ok(())
    }

    /// The names of the functions SQL can call, upper case, sorted (`SHOW FUNCTIONS`).
    pub fn function_names(&self) -> Vec<String> {
        let mut names = self.functions.names();
        names.extend(self.user_functions.names().map(|n| n.to_uppercase()));
        names.sort();
        names.dedup();
        names
    }

    /// The application's functions and the session's `CREATE FUNCTION` bindings.
    pub fn user_functions(&mut self) -> &mut crate::functions::user::UserFunctions {
        &mut self.user_functions
    }

    /// The session catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    fn sql_context(&self) -> SqlContext<'_> {
        let mut options = ConfigOptions::default();
        options.sql_parser.enable_ident_normalization = false;
        options.sql_parser.map_string_types_to_utf8view = false;
        options.sql_parser.collect_spans = true;
        SqlContext {
            catalog: &self.catalog,
            functions: &self.functions,
            user: &self.user_functions,
            options,
        }
    }

    fn parser_options() -> ParserOptions {
        ParserOptions::new()
            // Flink (Calcite) types `2.5` as DECIMAL(2, 1), not DOUBLE.
            .with_parse_float_as_decimal(true)
            .with_enable_ident_normalization(false)
            .with_map_string_types_to_utf8view(false)
            .with_collect_spans(true)
            // Flink (Calcite with NullCollation.LOW): NULL sorts as the smallest value,
            // first when ascending, last when descending.
            .with_default_null_ordering(datafusion_sql::planner::NullOrdering::NullsMin)
    }

    /// Types and coerces one SQL expression against `schema`.
    fn plan_expr(&self, sql: &ast::Expr, schema: &DFSchema) -> Result<Expr> {
        let ctx = self.sql_context();
        let to_rel = SqlToRel::new_with_options(&ctx, Self::parser_options());
        let mut sql = sql.clone();
        crate::functions::syntax::rewrite_expr(&mut sql);
        let expr = to_rel
            .sql_to_expr(sql, schema, &mut PlannerContext::new())
            .and_then(crate::functions::literals::int_literals_in_expr)
            .and_then(|e| crate::functions::decimal::flink_decimals_in_expr(e, schema))
            .map_err(|e| df_error(e, &self.catalog))?;
        let mut rewriter = TypeCoercionRewriter::new(schema);
        let expr = expr
            .rewrite(&mut rewriter)
            .and_then(|e| crate::functions::decimal::flink_decimals_in_expr(e.data, schema))
            .and_then(|e| crate::functions::cast::flink_casts_in_expr(e, schema, self.time_zone))
            .map_err(|e| df_error(e, &self.catalog))?;
        Ok(expr)
    }

    /// `DROP TABLE [IF EXISTS] name` (`view` false) or `DROP VIEW [IF EXISTS] name` (`view`
    /// true); whether something was dropped.
    ///
    /// # Errors
    /// No such table or view (unless `if_exists`); `name` is the other kind (a view named
    /// in `DROP TABLE`, or a table in `DROP VIEW`).
    pub fn drop_relation(&mut self, name: &str, view: bool, if_exists: bool) -> Result<bool> {
        let (wanted, other) = if view {
            ("view", "table")
        } else {
            ("table", "view")
        };
        let removed = if view {
            self.catalog.views.remove(name).is_some()
        } else {
            self.catalog.tables.remove(name).is_some()
        };
        if removed {
            return Ok(true);
        }
        if self.catalog.contains(name) {
            return plan_err!(
                "'{name}' is a {other}, not a {wanted}: DROP {} {name}",
                other.to_uppercase()
            );
        }
        if if_exists {
            return Ok(false);
        }
        Err(SluiceError::Plan(self.catalog.unknown_relation(name)))
    }

    /// Registers a table (`CREATE TABLE`): types computed columns and the watermark.
    ///
    /// # Errors
    /// A duplicate name (without `IF NOT EXISTS`), a duplicate column, a computed column
    /// or watermark expression that does not type, a watermark on a column that is not a
    /// `TIMESTAMP(p)`/`TIMESTAMP_LTZ(p)` with p <= 3, or a watermark expression that is not a
    /// timestamp.
    pub fn create_table(&mut self, ct: &CreateTable) -> Result<()> {
        if let Some(like) = &ct.like {
            if !(ct.if_not_exists && self.catalog.contains(&ct.name)) {
                let merged = self.merged_like(ct, like)?;
                return self.create_table(&merged);
            }
        }
        if self.catalog.contains(&ct.name) {
            if ct.if_not_exists {
                return Ok(());
            }
            return plan_err!("Table or view '{}' already exists", ct.name);
        }
        let mut physical = Vec::new();
        for c in &ct.columns {
            if ct.columns.iter().filter(|o| o.name == c.name).count() > 1 {
                return plan_err!(
                    "Column '{}' is declared twice in table '{}'",
                    c.name,
                    ct.name
                );
            }
            if let Some(dt) = &c.data_type {
                // Primary key columns are NOT NULL (Flink docs, CREATE TABLE, "PRIMARY KEY":
                // "the columns of a primary key are implicitly NOT NULL").
                let key = ct.primary_key.contains(&c.name);
                physical.push(Field::new(&c.name, dt.clone(), !c.not_null && !key));
            }
        }
        let physical_schema = Arc::new(Schema::new(physical));
        let physical_df = DFSchema::try_from_qualified_schema(&ct.name, &physical_schema)?;
        let mut fields = Vec::new();
        let mut column_exprs = Vec::new();
        let mut columns = Vec::new();
        for c in &ct.columns {
            match &c.computed {
                None => {
                    let (q, f) = physical_df.qualified_field_with_unqualified_name(&c.name)?;
                    fields.push(f.as_ref().clone());
                    column_exprs.push(Expr::Column(Column::from((q, f))));
                    columns.push(ColumnInfo {
                        type_text: c.type_text.clone(),
                        computed: None,
                        metadata: c.metadata.as_ref().map(|m| {
                            let key = m.key.as_deref().unwrap_or(&c.name);
                            let v = if m.is_virtual { " VIRTUAL" } else { "" };
                            format!("METADATA FROM '{key}'{v}")
                        }),
                    });
                }
                Some(sql) => {
                    let expr = self.plan_expr(sql, &physical_df).map_err(|e| {
                        SluiceError::Plan(format!(
                            "computed column '{}' of table '{}'{}: {e}",
                            c.name, ct.name, c.location
                        ))
                    })?;
                    let (_, field) = expr.to_field(&physical_df)?;
                    let (dt, nullable) = (field.data_type().clone(), field.is_nullable());
                    // `pt AS PROCTIME()`: a processing-time attribute.
                    let proctime = matches!(&expr, Expr::ScalarFunction(f)
                        if f.func.name() == "proctime");
                    let mut field = Field::new(&c.name, dt.clone(), nullable && !proctime);
                    if proctime {
                        field = field.with_metadata(
                            [(
                                sluice_common::types::PROCTIME_KEY.to_string(),
                                "true".into(),
                            )]
                            .into(),
                        );
                    }
                    fields.push(field);
                    column_exprs.push(expr.alias(&c.name));
                    columns.push(ColumnInfo {
                        type_text: if proctime {
                            format!("{} NOT NULL *PROCTIME*", flink_type_name(&dt))
                        } else {
                            flink_type_name(&dt)
                        },
                        computed: Some(sql.to_string()),
                        metadata: None,
                    });
                }
            }
        }
        let schema = Arc::new(Schema::new(fields));
        let full_df = DFSchema::try_from_qualified_schema(&ct.name, &schema)?;
        let watermark = match &ct.watermark {
            None => None,
            Some(wm) => {
                let Some(idx) = schema.fields().iter().position(|f| f.name() == &wm.column) else {
                    let names = schema.fields().iter().map(|f| f.name().as_str());
                    let hint = closest(&wm.column, names)
                        .map(|c| format!(" Did you mean '{c}'?"))
                        .unwrap_or_default();
                    return plan_err!(
                        "WATERMARK FOR '{}'{}: table '{}' has no such column.{hint}",
                        wm.column,
                        wm.location,
                        ct.name
                    );
                };
                match schema.field(idx).data_type() {
                    DataType::Timestamp(TimeUnit::Millisecond | TimeUnit::Second, _) => {}
                    other => {
                        return plan_err!(
                            "WATERMARK FOR '{}'{}: the rowtime column must be TIMESTAMP(p) or \
                             TIMESTAMP_LTZ(p) with precision 0 to 3, found {}",
                            wm.column,
                            wm.location,
                            flink_type_name(other)
                        )
                    }
                }
                let expr = self.plan_expr(&wm.expr, &full_df).map_err(|e| {
                    SluiceError::Plan(format!("WATERMARK expression{}: {e}", wm.location))
                })?;
                let dt = expr.get_type(&full_df)?;
                if !matches!(dt, DataType::Timestamp(_, _)) {
                    return plan_err!(
                        "WATERMARK expression{} must be a timestamp, found {}",
                        wm.location,
                        flink_type_name(&dt)
                    );
                }
                Some((idx, expr, wm.expr.to_string()))
            }
        };
        for k in &ct.primary_key {
            if schema.field_with_name(k).is_err() {
                return plan_err!("PRIMARY KEY column '{k}' is not a column of '{}'", ct.name);
            }
            if ct
                .columns
                .iter()
                .any(|c| &c.name == k && (c.computed.is_some() || c.metadata.is_some()))
            {
                return plan_err!(
                    "Could not create a PRIMARY KEY with column '{k}' of '{}'. A PRIMARY KEY \
                     constraint must be declared on physical columns.",
                    ct.name
                );
            }
        }
        for k in &ct.partition_keys {
            if physical_schema.field_with_name(k).is_err() {
                return plan_err!(
                    "PARTITIONED BY column '{k}' is not a physical column of '{}'",
                    ct.name
                );
            }
        }
        self.catalog.tables.insert(
            ct.name.clone(),
            TableDef {
                name: ct.name.clone(),
                schema,
                physical_schema,
                column_exprs,
                columns,
                watermark,
                primary_key: ct.primary_key.clone(),
                metadata: ct
                    .columns
                    .iter()
                    .filter_map(|c| {
                        c.metadata.as_ref().map(|m| crate::catalog::MetadataColumn {
                            column: c.name.clone(),
                            key: m.key.clone().unwrap_or_else(|| c.name.clone()),
                            is_virtual: m.is_virtual,
                        })
                    })
                    .collect(),
                options: ct.options.iter().cloned().collect(),
                definition: ct.clone(),
            },
        );
        Ok(())
    }

    /// Registers a view (`CREATE VIEW`); its query is planned now, so errors surface here.
    pub fn create_view(
        &mut self,
        name: &str,
        if_not_exists: bool,
        query: &QueryStatement,
        text: &str,
    ) -> Result<()> {
        if self.catalog.contains(name) {
            if if_not_exists {
                return Ok(());
            }
            return plan_err!("Table or view '{name}' already exists");
        }
        let plan = crate::names::with_final_names(self.logical_plan(query)?)?;
        // Lowering now reports streaming errors (unsupported constructs) at CREATE time.
        self.lower(&plan)?;
        self.catalog.views.insert(
            name.to_string(),
            ViewDef {
                name: name.to_string(),
                plan,
                text: text.to_string(),
            },
        );
        Ok(())
    }

    /// The analyzed DataFusion logical plan of a query.
    pub fn logical_plan(&mut self, query: &QueryStatement) -> Result<LogicalPlan> {
        for call in &query.window_tvfs {
            self.catalog
                .window_tvfs
                .insert(call.placeholder.clone(), call.clone());
        }
        for r in &query.temporal {
            if !self.catalog.contains(&r.table) {
                return Err(SluiceError::Plan(format!(
                    "{} (FOR SYSTEM_TIME AS OF at Line: {}, Column: {})",
                    self.catalog.unknown_relation(&r.table),
                    r.location.line,
                    r.location.column
                )));
            }
            self.catalog
                .temporal
                .insert(r.placeholder.clone(), r.clone());
        }
        for mr in &query.match_recognize {
            let input = self
                .catalog
                .relation_schema(&mr.input)
                .ok_or_else(|| SluiceError::Plan(self.catalog.unknown_relation(&mr.input)))?;
            let planned = crate::match_recognize::plan_clause(mr, &input, &|e, schema| {
                self.plan_expr(e, schema)
            })?;
            self.catalog
                .match_recognize
                .insert(mr.placeholder.clone(), planned);
        }
        joins::check_join_syntax(&query.query)?;
        let mut ast_query = query.query.clone();
        legacy_windows::rewrite(self, &mut ast_query)?;
        let ctx = self.sql_context();
        let to_rel = SqlToRel::new_with_options(&ctx, Self::parser_options());
        crate::functions::syntax::rewrite_query(&mut ast_query);
        ordered::inline_named_windows(&mut ast_query);
        ordered::fetch_as_limit(&mut ast_query);
        crate::names::name_select_items(&mut ast_query);
        unnest::table_functions(&mut ast_query, &self.user_functions)?;
        unnest::ordinality(&mut ast_query);
        let plan = to_rel
            .sql_statement_to_plan(ast::Statement::Query(ast_query))
            .and_then(crate::functions::literals::int_literals)
            .and_then(crate::functions::decimal::flink_decimal_arithmetic)
            .map_err(|e| df_error(e, &self.catalog))?;
        let plan = Analyzer::new()
            .execute_and_check(plan, &ctx.options, |_, _| {})
            .map_err(|e| df_error(e, &self.catalog))?;
        let plan = rewrite_needed_simplifications(plan)
            .and_then(unnest::decorrelate)
            .and_then(crate::functions::decimal::flink_decimals)
            .and_then(|p| crate::functions::cast::flink_casts(p, self.time_zone))
            .map_err(|e| df_error(e, &self.catalog))?;
        joins::check_scalar_subqueries(&plan)?;
        // A temporal join's conditions hold for the version valid at the probe's time:
        // none may be pushed below it (temporal.rs).
        let push_down_filters = query.temporal.is_empty();
        let plan = joins::rewrite_subqueries_and_joins(plan, push_down_filters)
            .map_err(|e| df_error(e, &self.catalog))?;
        temporal::check_placement(self, &plan)?;
        common_subexpr::eliminate(plan).map_err(|e| df_error(e, &self.catalog))
    }

    /// Plans a query into the physical operator graph whose output is the query's result.
    ///
    /// # Errors
    /// Unknown tables or columns (with the closest name), type errors, and constructs a
    /// continuous query cannot run yet (named in the message).
    pub fn plan_query(&mut self, query: &QueryStatement) -> Result<PlanNode> {
        let plan = self.logical_plan(query)?;
        let mut node = self.lower(&plan)?.node;
        Self::check_runnable(&node)?;
        let needed = prune::all_needed(node.schema.fields().len());
        prune::prune_columns(&mut node, &needed);
        node.schema = crate::names::final_names(&node.schema)?;
        Ok(node)
    }

    /// Plans `INSERT INTO table query`: the query, cast to the table's physical columns,
    /// into a sink.
    pub fn plan_insert(&mut self, table: &str, query: &QueryStatement) -> Result<PlanNode> {
        let Some(def) = self.catalog.tables.get(table).cloned() else {
            if self.catalog.views.contains_key(table) {
                return plan_err!("INSERT INTO '{table}': a view cannot be written to");
            }
            return Err(SluiceError::Plan(self.catalog.unknown_relation(table)));
        };
        def.check_options()?;
        let node = self.plan_query(query)?;
        let connector = def
            .options
            .get("connector")
            .map(|s| s.as_str())
            .unwrap_or("");
        if connector == "filesystem" {
            if let Some(f @ ("debezium-json" | "canal-json")) =
                def.options.get("format").map(String::as_str)
            {
                return not_supported!(
                    "INSERT INTO '{table}' in '{f}': change-data-capture formats are read only \
                     (write 'csv' or 'json')"
                );
            }
        }
        if node.is_updating() && matches!(connector, "filesystem" | "kafka") {
            return plan_err!(
                "INSERT INTO '{table}': the query's result is updating (a changelog of +I, -U, \
                 +U, -D rows, e.g. from a table in a change-data-capture format, GROUP BY without a \
                 window, or an outer or anti join \
                 whose padded rows are retracted later), and the '{connector}' sink can only \
                 append rows; aggregate over a window table function, join with time bounds \
                 (an interval or window join), or write to a 'print' or 'blackhole' table"
            );
        }
        // What an INSERT writes: the physical columns without VIRTUAL metadata columns, and
        // a metadata column only if its key can be written (Flink's rule).
        let connector_name = def.options.get("connector").cloned().unwrap_or_default();
        let keys = sluice_common::options::metadata_keys(&connector_name);
        for m in def.metadata.iter().filter(|m| !m.is_virtual) {
            if !keys.iter().any(|k| k.key == m.key && k.writable) {
                return plan_err!(
                    "INSERT INTO '{table}': metadata column '{}' ('{}') is read only; declare it \
                     VIRTUAL to write the table",
                    m.column,
                    m.key
                );
            }
        }
        let written: Vec<usize> = (0..def.physical_schema.fields().len())
            .filter(|&i| {
                let name = def.physical_schema.field(i).name();
                !def.metadata
                    .iter()
                    .any(|m| m.is_virtual && &m.column == name)
            })
            .collect();
        let target_schema = Arc::new(def.physical_schema.project(&written)?);
        let target = &target_schema;
        let got = node.schema.fields().len();
        if got != target.fields().len() {
            return plan_err!(
                "INSERT INTO '{table}': the query has {got} columns, the table has {} ({})",
                target.fields().len(),
                target
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let mut exprs = Vec::new();
        for (i, field) in target.fields().iter().enumerate() {
            let (q, f) = node.schema.qualified_field(i);
            let col = Expr::Column(Column::from((q, f)));
            let expr = if f.data_type() == field.data_type() {
                col.alias(field.name())
            } else if !insert_compatible(f.data_type(), field.data_type()) {
                return plan_err!(
                    "INSERT INTO '{table}': column {} ('{}', {}) cannot be written to column '{}' \
                     of type {}; CAST it explicitly",
                    i + 1,
                    f.name(),
                    flink_type_name(f.data_type()),
                    field.name(),
                    flink_type_name(field.data_type())
                );
            } else {
                // Flink's casts (a ROW by position, numbers as Java's, ...).
                let casted = crate::functions::cast::flink_casts_in_expr(
                    col.cast_to(field.data_type(), &node.schema)?,
                    &node.schema,
                    self.time_zone,
                )?;
                casted.alias(field.name())
            };
            exprs.push(expr);
        }
        let schema = Arc::new(DFSchema::try_from_qualified_schema(table, target)?);
        let project = PlanNode {
            spec: OperatorSpec::Project { exprs },
            schema: Arc::clone(&schema),
            rowtime: None,
            inputs: vec![node],
        };
        let partition_keys = def
            .definition
            .partition_keys
            .iter()
            .map(|k| Ok((target.index_of(k)?, k.clone())))
            .collect::<Result<Vec<_>>>()?;
        Ok(PlanNode {
            spec: OperatorSpec::Sink(SinkSpec {
                table: table.to_string(),
                options: def.connector_options()?,
                partition_keys,
                not_null: target
                    .fields()
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| !f.is_nullable())
                    .map(|(i, f)| (i, f.name().clone()))
                    .collect(),
                drop_null_rows: self.drop_sink_null_rows,
            }),
            schema,
            rowtime: None,
            inputs: vec![project],
        })
    }

    fn lower(&self, plan: &LogicalPlan) -> Result<Planned> {
        let has = |f: fn(&Expr) -> bool| {
            plan.expressions()
                .iter()
                .any(|e| e.exists(|e| Ok(f(e))).unwrap_or(false))
        };
        if has(|e| matches!(e, Expr::SetComparison(_))) {
            return not_supported!(
                "comparisons with ANY / SOME / ALL (subquery); write IN (subquery), or compare \
                 with an aggregate of it (MAX, MIN)"
            );
        }
        if has(|e| {
            matches!(
                e,
                Expr::InSubquery(_) | Expr::Exists(_) | Expr::ScalarSubquery(_)
            )
        }) {
            return not_supported!(
                "this subquery: IN (SELECT ...) and EXISTS run as joins when they are a WHERE \
                 condition (ANDed with the others), scalar subqueries when they are a SELECT \
                 value or in WHERE; a correlated one must be correlated by equalities"
            );
        }
        match plan {
            LogicalPlan::TableScan(scan) => self.lower_scan(scan),
            LogicalPlan::Projection(p) => self.lower_projection(p),
            LogicalPlan::Filter(f) => {
                if let Some(top_n) = self.lower_top_n(f)? {
                    return Ok(top_n);
                }
                let input = self.lower_filter_input(f)?;
                Ok(filter(f.predicate.clone(), input))
            }
            LogicalPlan::SubqueryAlias(a) => {
                let input = self.lower(&a.input)?;
                Ok(reschema(input, Arc::clone(&a.schema)))
            }
            LogicalPlan::Aggregate(agg) => self.lower_aggregate(agg),
            LogicalPlan::Sort(s) => self.lower_sort(s),
            LogicalPlan::Limit(l) => self.lower_limit(l),
            LogicalPlan::Join(j) => self.lower_join(j),
            LogicalPlan::Union(u) => self.lower_union(u),
            LogicalPlan::Window(w) => self.lower_over(w),
            LogicalPlan::Unnest(u) => self.lower_unnest(u),
            LogicalPlan::Distinct(datafusion_expr::logical_plan::Distinct::All(input)) => {
                // SELECT DISTINCT: an updating aggregate keyed by every column.
                let planned = self.lower(input)?;
                let schema = Arc::clone(&planned.node.schema);
                let keys = (0..schema.fields().len())
                    .map(|i| Expr::Column(Column::from(schema.qualified_field(i))))
                    .collect();
                Ok(Planned {
                    node: PlanNode {
                        spec: OperatorSpec::GroupAggregate {
                            keys,
                            aggregates: vec![],
                        },
                        schema,
                        rowtime: None,
                        inputs: vec![planned.node],
                    },
                    window: None,
                })
            }
            LogicalPlan::Distinct(_) => not_supported!("SELECT DISTINCT ON"),
            LogicalPlan::Values(v) => self.lower_values(v),
            LogicalPlan::EmptyRelation(e) => self.row_numbers(usize::from(e.produce_one_row)),
            LogicalPlan::Subquery(_) => {
                not_supported!("a subquery in FROM that reads the outer query's columns (LATERAL)")
            }
            other => not_supported!("the query construct {}", other.display()),
        }
    }

    /// A filter's input. Mark joins (IN / EXISTS inside OR) directly under it, a chain of
    /// them through their left inputs, are allowed when the filter reads their marks only
    /// positively ([`joins::marks_read_positively`]); anywhere else a mark join is refused.
    fn lower_filter_input(&self, f: &datafusion_expr::logical_plan::Filter) -> Result<Planned> {
        let mut marks = Vec::new();
        let mut p = f.input.as_ref();
        while let LogicalPlan::Join(j) = p {
            if j.join_type != datafusion_common::JoinType::LeftMark {
                break;
            }
            let n = j.schema.fields().len();
            marks.push(Column::from(j.schema.qualified_field(n - 1)));
            p = j.left.as_ref();
        }
        if marks.is_empty() || !joins::marks_read_positively(&f.predicate, &marks) {
            return self.lower(&f.input);
        }
        self.lower_mark_chain(&f.input)
    }

    fn lower_mark_chain(&self, plan: &LogicalPlan) -> Result<Planned> {
        match plan {
            LogicalPlan::Join(j) if j.join_type == datafusion_common::JoinType::LeftMark => {
                self.lower_join_with(j, true)
            }
            other => self.lower(other),
        }
    }

    /// A regular join: both inputs, then the join (see [`joins::join_spec`]). The output has
    /// no event-time attribute (Flink: a time attribute is a plain column after a
    /// regular join).
    fn lower_join(&self, j: &datafusion_expr::logical_plan::Join) -> Result<Planned> {
        self.lower_join_with(j, false)
    }

    fn lower_join_with(
        &self,
        j: &datafusion_expr::logical_plan::Join,
        mark_allowed: bool,
    ) -> Result<Planned> {
        if let Some(tref) = temporal::temporal_ref(self, &j.right) {
            return self.lower_temporal_join(j, tref);
        }
        let left = if mark_allowed {
            self.lower_mark_chain(&j.left)?
        } else {
            self.lower(&j.left)?
        };
        let left = reschema(left, Arc::clone(j.left.schema()));
        let right = reschema(self.lower(&j.right)?, Arc::clone(j.right.schema()));
        let time_attributes = match (left.node.rowtime, right.node.rowtime) {
            (Some(l), Some(r)) if !left.node.is_updating() && !right.node.is_updating() => {
                Some((l, r))
            }
            _ => None,
        };
        let mut spec = joins::join_spec(j, time_attributes, mark_allowed)?;
        let windows = |p: &Planned| p.window.as_ref().map(|w| (w.spec, w.start, w.end));
        if spec.kind != JoinKind::LeftMark {
            spec.window = joins::window_join(j, windows(&left), windows(&right));
        }
        if spec.window.is_some() {
            spec.interval = None;
            if left.node.is_updating() || right.node.is_updating() {
                return not_supported!("a window join of an updating input");
            }
        }
        // An interval join keeps an event-time attribute: the left one (the right one for
        // a right join; none for a full join, whose rows may lack either).
        let rowtime = match (&spec.interval, spec.kind) {
            (Some(b), JoinKind::Inner | JoinKind::Left) => Some(b.left_time),
            (Some(b), JoinKind::Right) => Some(j.left.schema().fields().len() + b.right_time),
            _ => None,
        };
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Join(Box::new(spec)),
                schema: Arc::clone(&j.schema),
                rowtime,
                inputs: vec![left.node, right.node],
            },
            window: None,
        })
    }

    /// `UNION ALL` (and, under a `Distinct`, `UNION`): every input's rows. DataFusion's
    /// type coercion has cast the inputs to common column types. The event-time
    /// attribute survives when every input has it at the same column (Flink keeps a time
    /// attribute through a union); the watermark is then the minimum over the inputs.
    fn lower_union(&self, u: &Union) -> Result<Planned> {
        let inputs = u
            .inputs
            .iter()
            .map(|i| self.lower(i))
            .collect::<Result<Vec<_>>>()?;
        let types: Vec<&DataType> = u.schema.fields().iter().map(|f| f.data_type()).collect();
        for (k, input) in inputs.iter().enumerate() {
            let input_types: Vec<&DataType> = input
                .node
                .schema
                .fields()
                .iter()
                .map(|f| f.data_type())
                .collect();
            if input_types != types {
                return plan_err!(
                    "the inputs of a UNION must have the same column types: input {} has \
                     ({}), the union ({})",
                    k + 1,
                    input_types
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    types
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        let rowtime = inputs[0]
            .node
            .rowtime
            .filter(|r| inputs.iter().all(|i| i.node.rowtime == Some(*r)));
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::Union,
                schema: Arc::clone(&u.schema),
                rowtime,
                inputs: inputs.into_iter().map(|i| i.node).collect(),
            },
            window: None,
        })
    }

    fn lower_scan(&self, scan: &TableScan) -> Result<Planned> {
        let name = scan.table_name.table();
        let mut planned = if let Some(call) = self.catalog.window_tvfs.get(name) {
            self.lower_window_tvf(call, Arc::clone(&scan.projected_schema))?
        } else if let Some(mr) = self.catalog.match_recognize.get(name) {
            self.lower_match_recognize(mr, name)?
        } else if let Some(r) = self.catalog.temporal.get(name) {
            self.lower_relation(&r.table)?
        } else {
            self.lower_relation(name)?
        };
        if let Some(proj) = &scan.projection {
            let input_schema = Arc::clone(&planned.node.schema);
            let exprs = proj
                .iter()
                .map(|&i| Expr::Column(Column::from(input_schema.qualified_field(i))))
                .collect();
            let rowtime = planned
                .node
                .rowtime
                .and_then(|r| proj.iter().position(|&i| i == r));
            let window = planned.window.and_then(|w| {
                Some(WindowColumns {
                    start: proj.iter().position(|&i| i == w.start)?,
                    end: proj.iter().position(|&i| i == w.end)?,
                    time: w.time.and_then(|t| proj.iter().position(|&i| i == t)),
                    spec: w.spec,
                    partition_by: w.partition_by,
                })
            });
            planned = Planned {
                node: PlanNode {
                    spec: OperatorSpec::Project { exprs },
                    schema: Arc::clone(&scan.projected_schema),
                    rowtime,
                    inputs: vec![planned.node],
                },
                window,
            };
        }
        Ok(reschema(planned, Arc::clone(&scan.projected_schema)))
    }

    /// A table (as a source) or a view (its plan), with columns qualified by its name.
    fn lower_relation(&self, name: &str) -> Result<Planned> {
        if let Some(def) = self.catalog.tables.get(name) {
            def.check_options()?;
            let schema = Arc::new(DFSchema::try_from_qualified_schema(name, &def.schema)?);
            let physical_schema = Arc::new(DFSchema::try_from_qualified_schema(
                name,
                &def.physical_schema,
            )?);
            let watermark = def.watermark.as_ref().map(|(i, e, t)| WatermarkSpec {
                rowtime: *i,
                expr: e.clone(),
                text: t.clone(),
                delay_ms: fixed_delay_ms(e, &def.schema.field(*i).name().clone()),
            });
            let spec = SourceSpec {
                table: name.to_string(),
                options: def.connector_options()?,
                physical_schema,
                columns: def.column_exprs.clone(),
                watermark,
                partition_keys: def.definition.partition_keys.clone(),
                read_schema: None,
            };
            let rowtime = def.watermark.as_ref().map(|(i, _, _)| *i);
            let mut node = PlanNode {
                rowtime,
                schema: Arc::clone(&schema),
                inputs: vec![],
                spec: OperatorSpec::Source(spec),
            };
            // An upsert-kafka table's messages are upserts and tombstones: always
            // normalized by its primary key, as Flink plans it.
            let upserts = def.options.get("connector").map(String::as_str) == Some("upsert-kafka");
            if (self.cdc_events_duplicate || upserts) && node.is_updating() {
                if def.primary_key.is_empty() {
                    return plan_err!(
                        "'table.exec.source.cdc-events-duplicate' is 'true', which needs the \
                         change-data-capture table '{name}' to declare a PRIMARY KEY (...) NOT \
                         ENFORCED (its events are deduplicated by it)"
                    );
                }
                let key = def
                    .primary_key
                    .iter()
                    .map(|k| def.schema.index_of(k))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                node = PlanNode {
                    spec: OperatorSpec::ChangelogNormalize { key },
                    schema,
                    rowtime,
                    inputs: vec![node],
                };
            }
            return Ok(Planned { node, window: None });
        }
        let view = self.catalog.views.get(name);
        if let Some(view) = view.or_else(|| self.catalog.inline_views.get(name)) {
            let planned = self.lower(&view.plan)?;
            let schema = Arc::new(DFSchema::try_from_qualified_schema(
                name,
                planned.node.schema.as_arrow(),
            )?);
            return Ok(reschema(planned, schema));
        }
        Err(SluiceError::Plan(self.catalog.unknown_relation(name)))
    }

    /// `input MATCH_RECOGNIZE (...)`: the operator over the input's plan. Its output's
    /// event-time attribute is a `MATCH_ROWTIME()` measure (one row per match) or the
    /// input's (all rows per match).
    fn lower_match_recognize(&self, mr: &PlannedMatchRecognize, name: &str) -> Result<Planned> {
        let at = mr.clause.location;
        let input = self.lower_relation(&mr.clause.input)?;
        if input.node.is_updating() {
            return not_supported!(
                "MATCH_RECOGNIZE{at} over '{}', an updating (changelog) input: row pattern \
                 matching needs an append-only input",
                mr.clause.input
            );
        }
        let spec = &mr.spec;
        if input.node.rowtime != Some(spec.rowtime) {
            return plan_err!(
                "MATCH_RECOGNIZE{at}: ORDER BY {} must be the event-time attribute of '{}' \
                 (a column with a WATERMARK FOR declaration in its table)",
                input.node.schema.field(spec.rowtime).name(),
                mr.clause.input
            );
        }
        let keys = spec.partition_by.len();
        let rowtime = if spec.all_rows {
            let others =
                (0..input.node.schema.fields().len()).filter(|i| !spec.partition_by.contains(i));
            others
                .enumerate()
                .find(|(_, i)| *i == spec.rowtime)
                .map(|(k, _)| keys + spec.measures.len() + k)
        } else {
            spec.measures
                .iter()
                .position(|m| {
                    matches!(m, Expr::Column(c) if c.name.strip_prefix("__nav_")
                    .and_then(|i| i.parse::<usize>().ok())
                    .is_some_and(|i| spec.navs[i] == sluice_common::plan::MatchNav::MatchRowtime))
                })
                .map(|m| keys + m)
        };
        let schema = Arc::new(DFSchema::try_from_qualified_schema(name, &mr.schema)?);
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::MatchRecognize(Box::new(spec.clone())),
                inputs: vec![input.node],
                schema,
                rowtime,
            },
            window: None,
        })
    }

    fn lower_window_tvf(&self, call: &WindowTvfCall, schema: DFSchemaRef) -> Result<Planned> {
        let input = self.lower_relation(&call.input)?;
        // How messages name the call and its input: a legacy group window has a generated
        // input (its FROM and WHERE) and no DESCRIPTOR.
        let input_name = if call.input.starts_with("__sluice_") {
            "the query's FROM".to_string()
        } else {
            format!("'{}'", call.input)
        };
        let descriptor = if call.legacy {
            format!("{}({}, ...)", call.kind.name(), call.time_column)
        } else {
            format!("DESCRIPTOR({})", call.time_column)
        };
        if input.node.is_updating() {
            return not_supported!(
                "{}{} over {input_name}, an updating (changelog) input: windows need an \
                 append-only input",
                call.kind.name(),
                call.location,
            );
        }
        let in_schema = Arc::clone(&input.node.schema);
        let Some(time_column) = in_schema
            .fields()
            .iter()
            .position(|f| f.name() == &call.time_column)
        else {
            let hint = closest(
                &call.time_column,
                in_schema.fields().iter().map(|f| f.name().as_str()),
            )
            .map(|c| format!(" Did you mean '{c}'?"))
            .unwrap_or_default();
            return plan_err!(
                "{descriptor}{}: {input_name} has no column '{}'.{hint}",
                call.location,
                call.time_column
            );
        };
        let processing_time = sluice_common::types::is_proctime(in_schema.field(time_column));
        if processing_time && call.kind == TvfKind::Session {
            return not_supported!(
                "{descriptor}{}: SESSION windows on a processing-time attribute; TUMBLE, \
                 HOP and CUMULATE run on one",
                call.location
            );
        }
        if !processing_time && input.node.rowtime != Some(time_column) {
            let joined = if contains_join(&input.node) {
                "; a regular join's output has none (as in Flink, a time attribute becomes a \
                 plain column after a regular join: its rows may be updated long after the \
                 watermark passed)"
            } else {
                ""
            };
            return plan_err!(
                "{descriptor}{}: the time column of {} must be an event-time attribute \
                 (a column with a WATERMARK FOR declaration in its table){joined}",
                call.location,
                call.kind.name()
            );
        }
        let offset_ms = call.interval("OFFSET").unwrap_or(0);
        let kind = match call.kind {
            TvfKind::Tumble => WindowKind::Tumble {
                size_ms: call.interval("SIZE").unwrap_or_default(),
            },
            TvfKind::Hop => WindowKind::Hop {
                slide_ms: call.interval("SLIDE").unwrap_or_default(),
                size_ms: call.interval("SIZE").unwrap_or_default(),
            },
            TvfKind::Cumulate => {
                let step_ms = call.interval("STEP").unwrap_or_default();
                let max_size_ms = call.interval("SIZE").unwrap_or_default();
                if max_size_ms % step_ms != 0 {
                    return plan_err!(
                        "CUMULATE{}: the max size ({max_size_ms} ms) must be a multiple of the \
                         step ({step_ms} ms)",
                        call.location
                    );
                }
                WindowKind::Cumulate {
                    step_ms,
                    max_size_ms,
                }
            }
            TvfKind::Session => {
                for p in &call.partition_by {
                    if !in_schema.fields().iter().any(|f| f.name() == p) {
                        return plan_err!(
                            "SESSION{}: PARTITION BY column '{p}' is not a column of '{}'",
                            call.location,
                            call.input
                        );
                    }
                }
                WindowKind::Session {
                    gap_ms: call.interval("GAP").unwrap_or_default(),
                }
            }
        };
        // A TIMESTAMP_LTZ attribute: windows on the session time zone's wall clock.
        let time_zone = match in_schema.field(time_column).data_type() {
            DataType::Timestamp(_, Some(_)) => Some(self.time_zone),
            _ => None,
        };
        let spec = WindowSpec {
            kind,
            offset_ms,
            time_zone,
            processing_time,
        };
        let n = in_schema.fields().len();
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::WindowAssign {
                    window: spec,
                    time_column,
                },
                schema,
                // After a window TVF, window_time is the event-time attribute (Flink); on
                // processing time there is none.
                rowtime: (!processing_time).then_some(n + 2),
                inputs: vec![input.node],
            },
            window: Some(WindowColumns {
                start: n,
                end: n + 1,
                time: Some(n + 2),
                spec,
                partition_by: call.partition_by.clone(),
            }),
        })
    }

    /// Refuses plans the runtime cannot run: a SESSION window table function that is not
    /// fused into its aggregate.
    fn check_runnable(node: &PlanNode) -> Result<()> {
        if let OperatorSpec::WindowAssign { window, .. } = &node.spec {
            if matches!(window.kind, WindowKind::Session { .. }) {
                return not_supported!(
                    "SESSION windows without an aggregate directly over them: use \
                     SELECT ..., window_start, window_end, <aggregates> FROM TABLE(SESSION(...)) \
                     GROUP BY window_start, window_end, <partition keys>"
                );
            }
            if window.processing_time {
                return not_supported!(
                    "a window table function on a processing-time attribute other than \
                     directly under its aggregate (SELECT window_start, window_end, ..., \
                     <aggregates> FROM TABLE(TUMBLE(...)) GROUP BY window_start, window_end, \
                     ...; no filter, projection, Top-N or join in between)"
                );
            }
        }
        node.inputs.iter().try_for_each(Self::check_runnable)
    }

    fn lower_projection(&self, p: &Projection) -> Result<Planned> {
        let input = self.lower(&p.input)?;
        Ok(self.project(p, input))
    }

    /// `p` over its already planned input.
    fn project(&self, p: &Projection, input: Planned) -> Planned {
        let in_schema = Arc::clone(&input.node.schema);
        // Where each output column comes from when it is a plain column reference.
        let passthrough: Vec<Option<usize>> = p
            .expr
            .iter()
            .map(|e| match unalias(e) {
                Expr::Column(c) => in_schema.index_of_column(c).ok(),
                _ => None,
            })
            .collect();
        let find = |i: usize| passthrough.iter().position(|p| *p == Some(i));
        let rowtime = input.node.rowtime.and_then(find);
        let window = input.window.and_then(|w| {
            Some(WindowColumns {
                start: find(w.start)?,
                end: find(w.end)?,
                time: w.time.and_then(find),
                spec: w.spec,
                partition_by: w.partition_by,
            })
        });
        Planned {
            node: PlanNode {
                spec: OperatorSpec::Project {
                    exprs: p.expr.clone(),
                },
                schema: Arc::clone(&p.schema),
                rowtime,
                inputs: vec![input.node],
            },
            window,
        }
    }

    fn lower_aggregate(&self, agg: &Aggregate) -> Result<Planned> {
        if agg
            .group_expr
            .iter()
            .any(|e| matches!(e, Expr::GroupingSet(_)))
        {
            return self.lower_grouping_sets(agg);
        }
        let input = self.lower(&agg.input)?;
        let in_schema = Arc::clone(&input.node.schema);
        let column_index = |e: &Expr| match unalias(e) {
            Expr::Column(c) => in_schema.index_of_column(c).ok(),
            _ => None,
        };
        // Computed keys and call inputs are evaluated by a projection below
        // (aggregate_input.rs).
        let group_aggregate = |input: Planned| -> Result<Planned> {
            let (input, keys, aggregates) =
                aggregate_input::project_inputs(input.node, &agg.group_expr, &agg.aggr_expr)?;
            Ok(Planned {
                node: PlanNode {
                    spec: OperatorSpec::GroupAggregate { keys, aggregates },
                    schema: Arc::clone(&agg.schema),
                    rowtime: None,
                    inputs: vec![input],
                },
                window: None,
            })
        };
        // Without both bounds of a window in GROUP BY this is a regular, updating
        // aggregate (Flink's rule for window aggregation).
        let Some(window) = input.window.clone() else {
            return group_aggregate(input);
        };
        let grouped = |i: usize| agg.group_expr.iter().any(|e| column_index(e) == Some(i));
        if !(grouped(window.start) && grouped(window.end)) {
            if matches!(window.spec.kind, WindowKind::Session { .. }) {
                return not_supported!(
                    "a SESSION window without both {WINDOW_START} and {WINDOW_END} in GROUP BY"
                );
            }
            return group_aggregate(input);
        }
        let mut keys = Vec::new();
        let mut group_outputs = Vec::new();
        for e in &agg.group_expr {
            match column_index(e) {
                Some(i) if i == window.start => group_outputs.push(GroupOutput::WindowStart),
                Some(i) if i == window.end => group_outputs.push(GroupOutput::WindowEnd),
                Some(i) if Some(i) == window.time => group_outputs.push(GroupOutput::WindowTime),
                _ => {
                    group_outputs.push(GroupOutput::Key(keys.len()));
                    keys.push(e.clone());
                }
            }
        }
        // window_time grouped as a key stays the event-time attribute.
        let rowtime = input.node.rowtime.and_then(|r| {
            agg.group_expr
                .iter()
                .position(|e| column_index(e) == Some(r))
        });
        // Fuse the window table function into the aggregate when nothing lies between
        // them and no key or aggregate reads a window column: windows are then assigned
        // per row without copying rows.
        let mut node_input = input.node;
        let mut windows = WindowInput::Columns {
            start: window.start,
            end: window.end,
        };
        if let OperatorSpec::WindowAssign { time_column, .. } = &node_input.spec {
            let n = node_input.input().schema.fields().len();
            let reads_only_input = |e: &Expr| {
                e.column_refs()
                    .iter()
                    .all(|c| in_schema.index_of_column(c).is_ok_and(|i| i < n))
            };
            if let WindowKind::Session { .. } = window.spec.kind {
                for p in &window.partition_by {
                    let grouped = keys
                        .iter()
                        .any(|k| matches!(unalias(k), Expr::Column(c) if &c.name == p));
                    if !grouped {
                        return plan_err!(
                            "SESSION is partitioned by '{p}': GROUP BY must include it"
                        );
                    }
                }
            }
            if keys.iter().chain(&agg.aggr_expr).all(reads_only_input) {
                windows = WindowInput::Assign {
                    time_column: *time_column,
                };
                node_input = node_input.inputs.remove(0);
            }
        }
        let is_session = matches!(window.spec.kind, WindowKind::Session { .. });
        if is_session && matches!(windows, WindowInput::Columns { .. }) {
            return not_supported!(
                "a SESSION aggregate with a filter or projection between SESSION(...) and \
                 GROUP BY, or whose keys or aggregates read window columns; filter in a view \
                 over the table instead"
            );
        }
        // The output's window bounds are window columns again (Flink's window properties):
        // a window join or a window aggregate can follow. Not for sessions, whose bounds
        // are per key.
        // Nor for processing-time windows: their bounds are not event time.
        let out_window = if is_session || window.spec.processing_time {
            None
        } else {
            let at = |g: &GroupOutput| group_outputs.iter().position(|o| o == g);
            Some(WindowColumns {
                start: at(&GroupOutput::WindowStart).expect("window_start is grouped"),
                end: at(&GroupOutput::WindowEnd).expect("window_end is grouped"),
                time: at(&GroupOutput::WindowTime),
                spec: window.spec,
                partition_by: Vec::new(),
            })
        };
        Ok(Planned {
            node: PlanNode {
                spec: OperatorSpec::WindowAggregate(WindowAggregateSpec {
                    window: window.spec,
                    windows,
                    expr_schema: Arc::clone(&in_schema),
                    keys,
                    group_outputs,
                    aggregates: agg.aggr_expr.clone(),
                }),
                schema: Arc::clone(&agg.schema),
                rowtime,
                inputs: vec![node_input],
            },
            window: out_window,
        })
    }
}

/// The delay (ms) of a watermark expression `rowtime - INTERVAL '<day-time>'` (or the
/// rowtime alone: 0); `None` for anything else.
fn fixed_delay_ms(expr: &Expr, rowtime: &str) -> Option<i64> {
    use datafusion_common::ScalarValue;
    use datafusion_expr::{BinaryExpr, Operator};
    let is_rowtime = |e: &Expr| matches!(unalias(e), Expr::Column(c) if c.name == rowtime);
    match unalias(expr) {
        e if is_rowtime(e) => Some(0),
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Minus,
            right,
        }) if is_rowtime(left) => match unalias(right) {
            Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
                Some(v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000)
                    .filter(|_| v.nanoseconds % 1_000_000 == 0)
            }
            Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
                Some(v.days as i64 * 86_400_000 + v.milliseconds as i64)
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether `INSERT` casts a query column of type `from` into a sink column of type `to`
/// implicitly: numbers into numbers, timestamps into timestamps, NULL and anything into
/// STRING. Other pairs (e.g. STRING into INT) need an explicit CAST, as in Flink.
fn insert_compatible(from: &DataType, to: &DataType) -> bool {
    match (from, to) {
        // A ROW is written into a ROW of as many fields field by field, by position (its
        // names do not matter: `ROW(1, 'a')` fills `ROW<a INT, b STRING>`), an ARRAY
        // element by element, as Flink's implicit casts of structured values.
        (DataType::Struct(a), DataType::Struct(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b.iter())
                    .all(|(x, y)| insert_compatible(x.data_type(), y.data_type()))
        }
        (DataType::List(a), DataType::List(b)) => insert_compatible(a.data_type(), b.data_type()),
        _ => {
            from == to
                || matches!(from, DataType::Null)
                || matches!(to, DataType::Utf8)
                || (from.is_numeric() && to.is_numeric())
                || (matches!(from, DataType::Timestamp(_, _))
                    && matches!(to, DataType::Timestamp(_, _)))
        }
    }
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        other => other,
    }
}

/// Gives a planned node a new (positionally identical) output schema: how a scan of a
/// view or an alias renames the columns of what it reads.
/// Rewrites the calls DataFusion only evaluates after its expression simplifier
/// (`COALESCE(a, b, ...)` becomes `CASE WHEN a IS NOT NULL THEN a ... ELSE last END`).
/// Sluice does not run the whole simplifier: it would also fold `NOW()` into one
/// plan-time constant, wrong for a continuous query.
fn rewrite_needed_simplifications(plan: LogicalPlan) -> datafusion_common::Result<LogicalPlan> {
    use datafusion_common::tree_node::Transformed;
    use datafusion_expr::simplify::{ExprSimplifyResult, SimplifyContext};
    const NEEDS_SIMPLIFY: &[&str] = &["coalesce"];
    let context = SimplifyContext::default();
    // Through `rewrite_plan`, so a rewritten aggregate argument keeps its output name (the
    // nodes above read it by name).
    crate::functions::rewrite::rewrite_plan(plan, &|e, _| {
        e.transform_up(|e| match e {
            Expr::ScalarFunction(f) if NEEDS_SIMPLIFY.contains(&f.func.name()) => {
                match f.func.simplify(f.args.clone(), &context)? {
                    ExprSimplifyResult::Simplified(new) => Ok(Transformed::yes(new)),
                    ExprSimplifyResult::Original(_) => Ok(Transformed::no(Expr::ScalarFunction(f))),
                }
            }
            other => Ok(Transformed::no(other)),
        })
    })
}

/// Whether a regular join feeds `node`.
fn contains_join(node: &PlanNode) -> bool {
    matches!(node.spec, OperatorSpec::Join(_)) || node.inputs.iter().any(contains_join)
}

/// `predicate` over `input` (a filter keeps the schema, time attribute and window columns).
fn filter(predicate: Expr, input: Planned) -> Planned {
    Planned {
        node: PlanNode {
            spec: OperatorSpec::Filter { predicate },
            schema: Arc::clone(&input.node.schema),
            rowtime: input.node.rowtime,
            inputs: vec![input.node],
        },
        window: input.window,
    }
}

fn reschema(mut planned: Planned, schema: DFSchemaRef) -> Planned {
    planned.node.schema = schema;
    planned
}

/// Turns a DataFusion planning error into a Sluice error: keeps the line and column of a
/// diagnostic, and adds the closest column name to a "field not found" error.
pub(crate) fn df_error(e: DataFusionError, catalog: &Catalog) -> SluiceError {
    let _ = catalog;
    let location = e.diagnostic().and_then(|d| d.span).map(|s| s.start);
    let root = e.find_root();
    let mut msg = match root {
        DataFusionError::SchemaError(se, _) => match se.as_ref() {
            datafusion_common::SchemaError::FieldNotFound {
                field,
                valid_fields,
            } => {
                let names: Vec<String> = valid_fields.iter().map(|c| c.name.clone()).collect();
                let hint = closest(&field.name, names.iter().map(|s| s.as_str()))
                    .map(|c| format!(" Did you mean '{c}'?"))
                    .unwrap_or_default();
                let mut uniq = names.clone();
                uniq.dedup();
                format!(
                    "Column '{}' not found.{hint} Available columns: {}",
                    field.flat_name(),
                    uniq.join(", ")
                )
            }
            other => other.to_string(),
        },
        DataFusionError::NotImplemented(m) => {
            return SluiceError::NotSupported(m.clone());
        }
        DataFusionError::Plan(m) if m.starts_with("Invalid function '") => {
            let name = m.split('\'').nth(1).unwrap_or("");
            // A rewritten function (functions/syntax.rs) written in a form the rewrite
            // does not take.
            let form = match name.to_ascii_lowercase().as_str() {
                "json_objectagg" => {
                    Some("JSON_OBJECTAGG([KEY] key VALUE value [NULL|ABSENT ON NULL])")
                }
                "json_arrayagg" => Some("JSON_ARRAYAGG(value [NULL|ABSENT ON NULL])"),
                "json_object" => {
                    Some("JSON_OBJECT([KEY] key VALUE value, ... [NULL|ABSENT ON NULL])")
                }
                "json_array" => Some("JSON_ARRAY(value, ... [NULL|ABSENT ON NULL])"),
                _ => None,
            };
            if let Some(form) = form {
                let at = location
                    .map(|l| format!(" at Line: {}, Column: {}", l.line, l.column))
                    .unwrap_or_default();
                return SluiceError::Plan(format!(
                    "{} is written {form} (no DISTINCT, ORDER BY or OVER){at}",
                    name.to_uppercase()
                ));
            }
            if let Some(why) = crate::functions::not_supported_reason(name) {
                return SluiceError::NotSupported(format!("{} ({why})", name.to_uppercase()));
            }
            let hint = m
                .find("Did you mean")
                .map(|i| {
                    format!(
                        " {}",
                        m[i..]
                            .to_uppercase()
                            .replace("DID YOU MEAN", "Did you mean")
                    )
                })
                .unwrap_or_default();
            format!(
                "Unknown function '{}': not one of Flink's built-in functions (SHOW FUNCTIONS lists them).{hint}",
                name.to_uppercase()
            )
        }
        DataFusionError::Plan(m) if m.starts_with("unnest() can only be applied to") => {
            "UNNEST takes an ARRAY, or a MAP with a name for its keys and one for its values: \
             UNNEST(m) AS t(k, v)"
                .to_string()
        }
        DataFusionError::Plan(m) => m.clone(),
        // DataFusion reports operands that have no common type as an internal error
        // (`BETWEEN` of a TIMESTAMP and an INTERVAL): the user's type error.
        DataFusionError::Internal(m) if m.starts_with("Failed to coerce types") => {
            format!("Cannot apply the operator to these types: {m}")
        }
        other => other.to_string(),
    };
    // Placeholders of lifted window calls are ours, not the user's.
    msg = msg.replace("While expanding wildcard, column", "Column");
    // A legacy group window's internal columns and input.
    for (internal, shown) in crate::catalog::LEGACY_WINDOW_COLUMNS.iter().zip([
        "the group window's start",
        "the group window's end",
        "the group window's time",
    ]) {
        msg = msg.replace(internal, shown);
    }
    while let Some(p) = msg.find("__sluice_group_window_input_") {
        let end = msg[p..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map(|d| p + d)
            .unwrap_or(msg.len());
        msg.replace_range(p..end, "the group window's FROM");
    }
    while let Some(p) = msg.find("__sluice_tvf_") {
        let end = msg[p..].find('.').map(|d| p + d + 1).unwrap_or(msg.len());
        msg.replace_range(p..end, "");
    }
    if let Some(loc) = location {
        if !msg.contains(" at Line: ") {
            msg.push_str(&format!(" at Line: {}, Column: {}", loc.line, loc.column));
        }
    }
    SluiceError::Plan(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{parse_script, Statement};

    const SCRIPT: &str = "CREATE TABLE t (a INT, b STRING, ts TIMESTAMP(3), c AS a * 2, \
        WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', 'path' = 'x');\n\
        CREATE VIEW v AS SELECT a, b, ts FROM t WHERE a > 1;\n\
        SELECT window_start, b, COUNT(*), AVG(a), COUNT(DISTINCT b) FROM TABLE(HOP(TABLE v, DESCRIPTOR(ts), \
        INTERVAL '1' SECOND, INTERVAL '3' SECOND)) GROUP BY window_start, window_end, b HAVING SUM(a) > 2;\n\
        SELECT * FROM TABLE(CUMULATE(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), STEP => INTERVAL '1' MINUTE, SIZE => INTERVAL '1' HOUR));\n\
        SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY b ORDER BY ts MEASURES A.a AS x PATTERN (A B+) DEFINE A AS A.a > 1);\n\
        SET 'k' = 'v'; DESCRIBE t; SHOW TABLES; EXPLAIN SELECT a FROM t";

    /// Runs every statement of `sql` through the parser and planner.
    fn plan_all(planner: &mut Planner, sql: &str) {
        let Ok(statements) = parse_script(sql) else {
            return;
        };
        for s in statements {
            let _ = match &s.statement {
                Statement::CreateTable(ct) => planner.create_table(ct),
                Statement::CreateView {
                    name,
                    if_not_exists,
                    query,
                } => planner.create_view(name, *if_not_exists, query, &s.text),
                Statement::Query(q) | Statement::Explain(q) => planner.plan_query(q).map(|_| ()),
                Statement::Insert { table, query } => planner.plan_insert(table, query).map(|_| ()),
                _ => Ok(()),
            };
        }
    }

    #[test]
    fn the_valid_script_plans() {
        let mut planner = Planner::new();
        let statements = parse_script(SCRIPT).unwrap();
        assert_eq!(statements.len(), 9);
        let Statement::CreateTable(ct) = &statements[0].statement else {
            panic!()
        };
        planner.create_table(ct).unwrap();
        let Statement::Query(q) = &statements[3].statement else {
            panic!()
        };
        let node = planner.plan_query(q).unwrap();
        assert!(matches!(node.spec, OperatorSpec::Project { .. }));
        assert!(matches!(
            node.input().spec,
            OperatorSpec::WindowAssign { .. }
        ));
        let Statement::Query(q) = &statements[4].statement else {
            panic!()
        };
        // The MATCH_RECOGNIZE query plans into the pattern operator over the source.
        let node = planner.plan_query(q).unwrap();
        assert!(
            matches!(node.input().spec, OperatorSpec::MatchRecognize(_)),
            "{node:?}"
        );
    }

    /// An updating aggregate reads columns: a projection below it computes each distinct
    /// computed argument once (`a + 1` for two calls), each volatile one once per call
    /// (`a * RAND()` twice), and the computed key; the aggregate's keys and arguments are
    /// plain columns.
    #[test]
    fn an_updating_aggregate_reads_columns_computed_below_it() {
        let mut planner = Planner::new();
        let sql =
            "CREATE TABLE t (a INT, b STRING) WITH ('connector' = 'filesystem', 'path' = 'x');\n\
            SELECT UPPER(b), SUM(a + 1), MAX(a + 1), SUM(a * RAND()), MAX(a * RAND()), COUNT(*) \
            FROM t GROUP BY UPPER(b)";
        let statements = parse_script(sql).unwrap();
        let Statement::CreateTable(ct) = &statements[0].statement else {
            panic!()
        };
        planner.create_table(ct).unwrap();
        let Statement::Query(q) = &statements[1].statement else {
            panic!()
        };
        let mut node = planner.plan_query(q).unwrap();
        while !matches!(node.spec, OperatorSpec::GroupAggregate { .. }) {
            node = node.inputs.remove(0);
        }
        let OperatorSpec::GroupAggregate { keys, aggregates } = &node.spec else {
            unreachable!()
        };
        let reads_columns = |e: &Expr| match e {
            Expr::AggregateFunction(f) => f
                .params
                .args
                .iter()
                .all(|a| matches!(a, Expr::Column(_) | Expr::Literal(..))),
            other => matches!(other, Expr::Column(_)),
        };
        assert!(keys.iter().chain(aggregates).all(reads_columns), "{node:?}");
        let OperatorSpec::Project { exprs } = &node.input().spec else {
            panic!("{:?}", node.input().spec)
        };
        let computed = exprs
            .iter()
            .filter(|e| !matches!(e, Expr::Column(_)))
            .count();
        assert_eq!(computed, 4, "{exprs:?}");
    }

    /// No input makes the front end panic: every truncation of the script, and the script
    /// with any one character removed, either plans or returns an error.
    #[test]
    fn mutilated_sql_never_panics() {
        let chars: Vec<char> = SCRIPT.chars().collect();
        let mut variants = Vec::new();
        for i in (0..chars.len()).step_by(3) {
            variants.push(chars[..i].iter().collect::<String>());
            let mut without = chars.clone();
            without.remove(i);
            variants.push(without.iter().collect::<String>());
        }
        for v in variants {
            let result = std::panic::catch_unwind(|| {
                let mut planner = Planner::new();
                plan_all(&mut planner, &v);
            });
            assert!(result.is_ok(), "panicked on:\n{v}");
        }
    }
}
