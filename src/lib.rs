//! Sluice: an embeddable streaming SQL engine.
//!
//! Continuous SQL in the Flink SQL dialect over unbounded (and bounded) streams of Apache
//! Arrow record batches: `CREATE TABLE ... WATERMARK FOR ... WITH (...)`, window table
//! functions (`TUMBLE`, `HOP`, `CUMULATE`), keyed window aggregation, `INSERT INTO`.
//!
//! ```no_run
//! use sluice::{Engine, EngineConfig};
//!
//! let mut engine = Engine::new(EngineConfig::default());
//! engine.execute_script("CREATE TABLE clicks (user_id INT, ts TIMESTAMP(3), \
//!     WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
//!     WITH ('connector' = 'filesystem', 'path' = 'clicks.csv', 'format' = 'csv')")?;
//! let batches = engine.collect(
//!     "SELECT window_start, COUNT(*) AS n \
//!      FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '10' MINUTE)) \
//!      GROUP BY window_start, window_end")?;
//! # Ok::<(), sluice::SluiceError>(())
//! ```

#![warn(missing_docs)]

pub mod explain;
pub mod format;
mod jobs;
pub mod nexmark;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use datafusion_common::arrow;
use datafusion_common::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
/// DataFusion's logical expressions and UDF traits (`ScalarUDF`, `AggregateUDF`,
/// `create_udf`), for functions registered with [`Engine::register_udf`].
pub use datafusion_expr;
pub use sluice_common::plan::PlanNode;
pub use sluice_common::time::format_timestamp_ms;
pub use sluice_common::{Result, SluiceError};
pub use sluice_runtime::connectors::channel::ChannelSender;
use sluice_runtime::connectors::ConnectorContext;
use sluice_runtime::job::SourceStall;
pub use sluice_runtime::{JobHandle, JobMetrics, ProcessingClock, RunningJob, Stream};
pub use sluice_sql::parser::Statement;
use sluice_sql::{flink_type_name, Planner};
pub use sluice_sql::{parse_script, ParsedStatement};

/// Sets the C allocator (glibc's malloc; elsewhere a no-op) for streaming work, as the
/// `sluice` binary does at start; an application embedding Sluice may call it once before
/// its first job, or choose its own allocator.
///
/// Every batch allocates buffers of hundreds of KiB to a few MiB and frees them soon after.
/// By default glibc serves such a block with its own `mmap` (or trims the heap after it is
/// freed), so each batch's memory is new pages: page faults and zeroing in the kernel. On
/// Nexmark q0 read from a CSV file that was 3-4 s of system time in a 7 s run. Here blocks
/// under 32 MiB come from the heap and the heap is trimmed only when 128 MiB at its top are
/// free (`M_MMAP_THRESHOLD`, `M_TRIM_THRESHOLD`; mallopt(3)): system time 0.5-0.9 s, peak
/// RSS within 5% (q9: 1,462 -> 1,539 MB).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc's allocator parameters; any values are valid.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
    }
}

/// How an [`Engine`] runs jobs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Base directory for relative paths in `WITH` options (default: the current
    /// directory, as in Flink).
    pub working_dir: Option<PathBuf>,
    /// Rows per source batch (default 8192).
    pub batch_size: usize,
    /// Test hook: when set, each source batch has a pseudo-random size in
    /// `1..=batch_size` drawn from this seed. Results never depend on it.
    pub batch_size_seed: Option<u64>,
    /// Processing time (`'table.exec.state.ttl'` is measured in it): the system clock by
    /// default; a [`ProcessingClock::manual`] clock makes processing time what the
    /// application (or a test) sets.
    pub clock: ProcessingClock,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            working_dir: None,
            batch_size: 8192,
            batch_size_seed: None,
            clock: ProcessingClock::system(),
        }
    }
}

/// What running one statement gives.
pub enum StatementResult {
    /// A DDL or `SET` statement succeeded; a message for the user.
    Done(String),
    /// A small, complete result (`SHOW TABLES`, `DESCRIBE`, `EXPLAIN`, `SET`).
    Info(RecordBatch),
    /// A running `SELECT`: read its rows from the job until it ends.
    Query(RunningJob),
    /// A running `INSERT INTO`: drain the job to wait for it (it yields no rows).
    Insert(RunningJob),
}

/// The engine: a session catalog plus the settings of `SET`, and the means to run SQL.
pub struct Engine {
    /// Channels opened for `'connector' = 'channel'` tables, by table name.
    channels: sluice_runtime::connectors::channel::ChannelRegistry,
    /// Callbacks registered for `'connector' = 'channel'` sink tables, by table name.
    sink_callbacks: sluice_runtime::connectors::channel::SinkRegistry,
    /// Jobs running in the background ([`Engine::detach`]), for `SHOW JOBS` / `STOP JOB`.
    jobs: jobs::BackgroundJobs,
    planner: Planner,
    settings: BTreeMap<String, String>,
    config: EngineConfig,
    /// `'table.local-time-zone'`: the system time zone unless set.
    time_zone: String,
    /// The `INSERT`s collected since `BEGIN STATEMENT SET` (until `END`).
    statement_set: Option<Vec<sluice_sql::parser::InsertStatement>>,
}

/// The key of the session time zone setting (Flink's name).
pub const LOCAL_TIME_ZONE: &str = "table.local-time-zone";

/// `'table.exec.source.cdc-events-duplicate'` (Flink): change-data-capture events may repeat;
/// each such table is read through a ChangelogNormalize by its primary key.
pub const CDC_EVENTS_DUPLICATE: &str = "table.exec.source.cdc-events-duplicate";
/// Flink's setting for NULLs written into NOT NULL sink columns: `ERROR` or `DROP`.
pub const SINK_NOT_NULL_ENFORCER: &str = "table.exec.sink.not-null-enforcer";

/// The system time zone, as Flink defaults to it: `TZ`, else `/etc/timezone`, else UTC.
fn system_time_zone() -> String {
    let candidates = [
        std::env::var("TZ").ok(),
        std::fs::read_to_string("/etc/timezone").ok(),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(|s| s.trim().trim_start_matches(':').to_string())
        .find(|s| sluice_common::time::parse_time_zone(s).is_ok())
        .unwrap_or_else(|| "UTC".to_string())
}

static JOB_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Engine {
    /// A new engine with an empty catalog.
    pub fn new(config: EngineConfig) -> Self {
        let time_zone = system_time_zone();
        let mut planner = Planner::new();
        planner
            .set_time_zone(&time_zone)
            .expect("system_time_zone returns a valid zone");
        Engine {
            channels: Default::default(),
            sink_callbacks: Default::default(),
            jobs: Default::default(),
            planner,
            settings: BTreeMap::new(),
            config,
            time_zone,
            statement_set: None,
        }
    }

    /// Registers a Rust scalar function (DataFusion's `ScalarUDF`: signature, return type,
    /// evaluation over Arrow arrays) under `identifier`; SQL binds a name to it with
    /// `CREATE [TEMPORARY [SYSTEM]] FUNCTION name AS 'identifier'` (Flink SQL "CREATE
    /// FUNCTION", where the identifier is a class name). Registrations outlive `RESET`; a
    /// job restored from a checkpoint in a new process needs the same registrations.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use sluice::{Engine, EngineConfig};
    /// use sluice::datafusion_expr::{create_udf, ColumnarValue, Volatility};
    /// use sluice::arrow::datatypes::DataType;
    /// let mut engine = Engine::new(EngineConfig::default());
    /// let twice = create_udf("twice", vec![DataType::Int64], DataType::Int64,
    ///     Volatility::Immutable, Arc::new(|args: &[ColumnarValue]| {
    ///         let a = args[0].to_array(1)?;
    ///         let a = sluice::arrow::compute::kernels::numeric::add(&a, &a)?;
    ///         Ok(ColumnarValue::Array(a))
    ///     }));
    /// engine.register_udf("com.example.Twice", twice);
    /// engine.sql("CREATE FUNCTION twice AS 'com.example.Twice'")?;
    /// # Ok::<(), sluice::SluiceError>(())
    /// ```
    pub fn register_udf(&mut self, identifier: &str, udf: datafusion_expr::ScalarUDF) {
        self.planner.user_functions().register(
            identifier,
            sluice_sql::functions::user::UserFunction::Scalar(Arc::new(udf)),
        );
    }

    /// Registers a Rust aggregate function (DataFusion's `AggregateUDF`) under
    /// `identifier`, bound by `CREATE FUNCTION` as [`Engine::register_udf`]'s. Over an
    /// updating input its accumulator must retract (`retract_batch`), else the query fails.
    pub fn register_udaf(&mut self, identifier: &str, udaf: datafusion_expr::AggregateUDF) {
        self.planner.user_functions().register(
            identifier,
            sluice_sql::functions::user::UserFunction::Aggregate(Arc::new(udaf)),
        );
    }

    /// Registers a Rust table function (Flink's `TableFunction`) under `identifier`, bound
    /// by `CREATE FUNCTION` as [`Engine::register_udf`]'s and called in `FROM` as Flink SQL
    /// "Table Functions" says: `FROM t, LATERAL TABLE(f(t.x)) [AS] T(a, b)` (a row of `t`
    /// for each row `f` emits for it, none when it emits none), `FROM t LEFT JOIN LATERAL
    /// TABLE(f(t.x)) [AS] T(a, b) ON TRUE` (a row of NULLs when it emits none), and `FROM
    /// TABLE(f(1))`.
    ///
    /// `udtf` is a scalar function whose value for a row is the list of rows it emits: an
    /// `ARRAY<ROW<a .., b ..>>` (`List<Struct>`; its fields are the columns) or an `ARRAY<T>`
    /// (one column, named `f0` as Flink names an atomic result); a NULL list emits nothing.
    /// Without column names in the alias the columns take the field names, which needs
    /// the function's return type without argument types (a fixed signature, as
    /// `create_udf`'s); otherwise the alias must name them. It runs once per input row.
    pub fn register_udtf(&mut self, identifier: &str, udtf: datafusion_expr::ScalarUDF) {
        self.planner.user_functions().register(
            identifier,
            sluice_sql::functions::user::UserFunction::Table(Arc::new(udtf)),
        );
    }

    /// Opens the channel that feeds table `table` (declared `WITH ('connector' =
    /// 'channel')`): the application pushes Arrow batches of the table's declared columns
    /// into the returned sender; dropping every sender ends the input. Call it before
    /// starting the job that reads the table; a channel feeds one job.
    ///
    /// ```no_run
    /// # use sluice::{Engine, EngineConfig};
    /// let mut engine = Engine::new(EngineConfig::default());
    /// engine.execute_script("CREATE TABLE clicks (uid STRING, ts TIMESTAMP(3), \
    ///     WATERMARK FOR ts AS ts) WITH ('connector' = 'channel')")?;
    /// let clicks = engine.channel_source("clicks");
    /// // clicks.send(batch)?; ... drop(clicks) ends the input.
    /// # Ok::<(), sluice::SluiceError>(())
    /// ```
    pub fn channel_source(&mut self, table: &str) -> ChannelSender {
        sluice_runtime::connectors::channel::register(&self.channels, table)
    }

    /// Registers `callback` to receive the rows that `INSERT INTO table` writes, for a
    /// table declared `WITH ('connector' = 'channel')`: each call gets a batch of the
    /// table's columns, after a leading `op` column (`+I`, `-U`, `+U`, `-D`) when the
    /// query's result is updating. Calls come from the job's threads, one at a time; an
    /// `Err` fails the job. Rows are delivered as written (at least once across restarts).
    ///
    /// ```no_run
    /// # use sluice::{Engine, EngineConfig};
    /// let mut engine = Engine::new(EngineConfig::default());
    /// engine.execute_script("CREATE TABLE alerts (uid STRING, n BIGINT) \
    ///     WITH ('connector' = 'channel')")?;
    /// engine.sink_callback("alerts", |batch| {
    ///     println!("{} alert rows", batch.num_rows());
    ///     Ok(())
    /// });
    /// # Ok::<(), sluice::SluiceError>(())
    /// ```
    pub fn sink_callback(
        &mut self,
        table: &str,
        callback: impl FnMut(&RecordBatch) -> Result<()> + Send + 'static,
    ) {
        sluice_runtime::connectors::channel::register_sink(
            &self.sink_callbacks,
            table,
            Box::new(callback),
        )
    }

    /// Sets a session property, as `SET 'key' = 'value'` does.
    ///
    /// # Errors
    /// A value of the wrong form for the key (parallelism, time zone, checkpointing).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let (k, v) = (key, value);
        // Known keys take values of their declared kind (sluice_common::options::SESSION).
        sluice_common::options::check_setting(k, v).map_err(SluiceError::Config)?;
        if k == CDC_EVENTS_DUPLICATE {
            self.planner
                .set_cdc_events_duplicate(v.trim().eq_ignore_ascii_case("true"));
        }
        if k == SINK_NOT_NULL_ENFORCER {
            self.planner
                .set_drop_sink_null_rows(v.trim().eq_ignore_ascii_case("drop"));
        }
        if k == LOCAL_TIME_ZONE {
            let zone = sluice_common::time::normalize_time_zone(v).map_err(SluiceError::Config)?;
            self.planner.set_time_zone(&zone)?;
            self.time_zone = zone;
        }
        let previous = self.settings.insert(k.to_string(), v.to_string());
        // A setting of the wrong form fails here, not at the next job.
        if let Err(e) = self
            .checkpoint_config()
            .and_then(|_| self.job_config().map(|_| ()))
        {
            match previous {
                Some(p) => self.settings.insert(k.to_string(), p),
                None => self.settings.remove(k),
            };
            return Err(e);
        }
        Ok(())
    }

    /// The value of a session property.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings.get(key).map(|s| s.as_str())
    }

    /// Checkpointing, result guarantee and restarts from the session's settings (Flink's
    /// option names; see README "Checkpoints and recovery").
    ///
    /// # Errors
    /// A setting with a value of the wrong form.
    fn checkpoint_config(&self) -> Result<sluice_runtime::CheckpointConfig> {
        use sluice_runtime::connectors::datagen::parse_duration_ms;
        use sluice_runtime::{CheckpointConfig, CheckpointingMode, FailPoints, RestartStrategy};
        let s = &self.settings;
        let get = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| s.get(*k).map(|v| v.trim().to_string()))
        };
        let count = |key: &str, default: u64| -> Result<u64> {
            match s.get(key) {
                None => Ok(default),
                Some(v) => v.trim().parse::<u64>().map_err(|_| {
                    SluiceError::Config(format!("'{key}' must be a whole number, found '{v}'"))
                }),
            }
        };
        let duration = |key: &str| -> Result<Option<std::time::Duration>> {
            Ok(parse_duration_ms(s, key)?
                .map(|ms| std::time::Duration::from_millis(ms.max(0) as u64)))
        };
        let mut config = CheckpointConfig {
            interval: duration("execution.checkpointing.interval")?.filter(|d| !d.is_zero()),
            ..CheckpointConfig::default()
        };
        if let Some(mode) = get(&["execution.checkpointing.mode"]) {
            config.mode = CheckpointingMode::parse(&mode)?;
        }
        if let Some(dir) = get(&["execution.checkpointing.dir", "state.checkpoints.dir"]) {
            config.dir = dir;
        }
        config.num_retained = match count("execution.checkpointing.num-retained", 3)? {
            0 => {
                return Err(SluiceError::Config(
                    "'execution.checkpointing.num-retained' must be at least 1: the newest \
                     complete checkpoint is what a restart restores"
                        .into(),
                ))
            }
            n => n as usize,
        };
        if let Some(rows) = s.get("sluice.test.checkpoint-after-rows") {
            config.checkpoint_after_rows = rows
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(|r| {
                    r.parse::<u64>().map_err(|_| {
                        SluiceError::Config(format!(
                            "'sluice.test.checkpoint-after-rows' must list row numbers, found '{r}'"
                        ))
                    })
                })
                .collect::<Result<_>>()?;
        }
        if let Some(spec) = s.get("sluice.test.failpoints") {
            config.failpoints = FailPoints::parse(spec)?;
        }
        let restart_type = get(&["restart-strategy.type", "restart-strategy"])
            .map(|t| t.to_ascii_lowercase().replace('_', "-"));
        let restarts_by_default = config.enabled() || config.mode == CheckpointingMode::AtMostOnce;
        config.restart = match restart_type.as_deref() {
            None if !restarts_by_default => None,
            None | Some("fixed-delay") | Some("fixeddelay") => Some(RestartStrategy {
                attempts: count("restart-strategy.fixed-delay.attempts", 3)? as u32,
                delay: duration("restart-strategy.fixed-delay.delay")?
                    .unwrap_or(std::time::Duration::from_secs(1)),
            }),
            Some("none") | Some("off") | Some("disable") => None,
            Some(other) => {
                return Err(SluiceError::Config(format!(
                    "'restart-strategy.type' must be 'fixed-delay' or 'none', found '{other}'"
                )))
            }
        };
        config.restore = get(&["execution.state-recovery.path", "execution.savepoint.path"])
            .filter(|p| !p.is_empty());
        Ok(config)
    }

    fn job_config(&self) -> Result<sluice_runtime::JobConfig> {
        let working_dir = self
            .config
            .working_dir
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("."));
        let n = JOB_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let setting = |key: &str, default: u64| -> u64 {
            self.settings
                .get(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|v| *v > 0)
                .unwrap_or(default)
        };
        Ok(sluice_runtime::JobConfig {
            checkpoint: self.checkpoint_config()?,
            name: self.settings.get("pipeline.name").cloned(),
            state_ttl: sluice_runtime::connectors::datagen::parse_duration_ms(
                &self.settings,
                "table.exec.state.ttl",
            )?
            .filter(|ms| *ms > 0)
            .map(|ms| std::time::Duration::from_millis(ms as u64)),
            clock: self.config.clock.clone(),
            idle_timeout: sluice_runtime::connectors::datagen::parse_duration_ms(
                &self.settings,
                "table.exec.source.idle-timeout",
            )?
            .filter(|ms| *ms > 0)
            .map(|ms| std::time::Duration::from_millis(ms as u64)),
            source_stall: match self.settings.get("sluice.test.source-stall") {
                None => Vec::new(),
                Some(v) => {
                    let bad = || {
                        SluiceError::Config(format!(
                            "'sluice.test.source-stall' must list '<subtask>:<duration>|until-output[:first]', found '{v}'"
                        ))
                    };
                    let mut stalls = Vec::new();
                    for item in v.split(',').filter(|i| !i.trim().is_empty()) {
                        let (subtask, rest) = item.split_once(':').ok_or_else(bad)?;
                        let (duration, first_only) = match rest.strip_suffix(":first") {
                            Some(d) => (d, true),
                            None => (rest, false),
                        };
                        let stall = if duration.trim() == "until-output" {
                            SourceStall::UntilOutput
                        } else {
                            let mut one = BTreeMap::new();
                            one.insert("d".to_string(), duration.to_string());
                            let ms =
                                sluice_runtime::connectors::datagen::parse_duration_ms(&one, "d")?
                                    .ok_or_else(bad)?;
                            SourceStall::For(std::time::Duration::from_millis(ms.max(0) as u64))
                        };
                        stalls.push((
                            subtask.trim().parse().map_err(|_| bad())?,
                            stall,
                            first_only,
                        ));
                    }
                    stalls
                }
            },
            restart_parallelism: self
                .settings
                .get("sluice.test.restart-parallelism")
                .map(|v| v.split(',').filter_map(|p| p.trim().parse().ok()).collect())
                .unwrap_or_default(),
            parallelism: setting("parallelism.default", 1) as usize,
            max_parallelism: setting("pipeline.max-parallelism", 128) as u32,
            connectors: ConnectorContext {
                working_dir,
                batch_size: self.config.batch_size,
                batch_size_seed: self.config.batch_size_seed,
                time_zone: self.time_zone.clone(),
                job_id: format!(
                    "{:x}{:04x}-{n}",
                    nanos & 0xffff_ffff_ffff,
                    std::process::id() & 0xffff
                ),
                subtask: 0,
                source_subtask: 0,
                source_parallelism: 1,
                channels: std::sync::Arc::clone(&self.channels),
                sink_callbacks: self.sink_callbacks.clone(),
                attempt: 0,
                two_phase_sinks: false,
                first_checkpoint_id: 1,
                checkpoint_interval: None,
            },
        })
    }

    /// EXPLAIN of the job of `plans`: text, or Graphviz DOT.
    fn explain(&self, plans: &[PlanNode], dot: bool) -> Result<StatementResult> {
        let config = self.job_config()?;
        let ctx = explain::ExplainContext {
            parallelism: config.parallelism,
            max_parallelism: config.max_parallelism,
            state_ttl: self.settings.get("table.exec.state.ttl").cloned(),
        };
        let text = if dot {
            explain::explain_dot(plans, &ctx)?
        } else {
            explain::explain(plans, &ctx)?
        };
        Ok(StatementResult::Info(single_column("plan", vec![text])))
    }

    /// Runs the `INSERT`s of a statement set as one job: each source is read once however
    /// many of them read it, and one checkpoint covers (and commits) every sink.
    fn run_statement_set(
        &mut self,
        inserts: &[sluice_sql::parser::InsertStatement],
    ) -> Result<StatementResult> {
        let plans = self.plan_statement_set(inserts)?;
        Ok(StatementResult::Insert(sluice_runtime::job::start_all(
            &plans,
            &self.job_config()?,
        )?))
    }

    /// The plans of a statement set's `INSERT`s (one per sink table).
    fn plan_statement_set(
        &mut self,
        inserts: &[sluice_sql::parser::InsertStatement],
    ) -> Result<Vec<PlanNode>> {
        let mut plans = Vec::new();
        for (i, insert) in inserts.iter().enumerate() {
            if inserts[..i].iter().any(|other| other.table == insert.table) {
                return Err(SluiceError::Plan(format!(
                    "a statement set writes table '{}' twice (one INSERT per sink table)",
                    insert.table
                )));
            }
            plans.push(self.planner.plan_insert(&insert.table, &insert.query)?);
        }
        Ok(plans)
    }

    /// Plans a query into its physical operator graph without running it.
    pub fn plan(&mut self, sql: &str) -> Result<PlanNode> {
        let mut statements = parse_script(sql)?;
        if statements.len() != 1 {
            return Err(SluiceError::Plan(format!(
                "expected one query, found {} statements",
                statements.len()
            )));
        }
        match statements.remove(0).statement {
            Statement::Query(q) | Statement::Explain(q) | Statement::ExplainDot(q) => {
                self.planner.plan_query(&q)
            }
            _ => Err(SluiceError::Plan("expected a query".into())),
        }
    }

    /// Runs one parsed statement.
    ///
    /// # Errors
    /// Planning errors (unknown table or column, type errors, unsupported constructs)
    /// and connector errors found before the job starts. Errors while the job runs
    /// arrive through the [`RunningJob`].
    pub fn execute(&mut self, stmt: &ParsedStatement) -> Result<StatementResult> {
        // While a statement set is open: its INSERTs, END, and session settings (they
        // apply to the set's job, which starts at END).
        let collecting = matches!(
            stmt.statement,
            Statement::Insert { .. }
                | Statement::EndStatementSet
                | Statement::BeginStatementSet
                | Statement::Set { .. }
                | Statement::Reset { .. }
        );
        if self.statement_set.is_some() && !collecting {
            return Err(SluiceError::Plan(
                "only INSERT INTO statements go into a statement set (END runs it)".into(),
            ));
        }
        match &stmt.statement {
            Statement::CreateTable(ct) => {
                self.planner.create_table(ct)?;
                Ok(StatementResult::Done(format!(
                    "Table '{}' has been created.",
                    ct.name
                )))
            }
            Statement::CreateTableAs { table, query } => {
                if table.if_not_exists && self.planner.catalog().contains(&table.name) {
                    return Ok(StatementResult::Done(format!(
                        "Table '{}' already exists.",
                        table.name
                    )));
                }
                self.planner.create_table_as(table, query)?;
                // The table exists only if its job starts (Flink's CTAS is atomic in the
                // same sense: a failed submission leaves no table).
                let started = self
                    .planner
                    .plan_insert(&table.name, query)
                    .and_then(|plan| sluice_runtime::start(&plan, &self.job_config()?));
                match started {
                    Ok(job) => Ok(StatementResult::Insert(job)),
                    Err(e) => {
                        let _ = self.planner.drop_relation(&table.name, false, true);
                        Err(e)
                    }
                }
            }
            Statement::AlterTable {
                name,
                if_exists,
                change,
            } => {
                let altered = self.planner.alter_table(name, *if_exists, change)?;
                Ok(StatementResult::Done(if altered {
                    "Alter table succeeded!".to_string()
                } else {
                    format!("Table '{name}' does not exist; nothing altered.")
                }))
            }
            Statement::CreateView {
                name,
                if_not_exists,
                query,
            } => {
                self.planner
                    .create_view(name, *if_not_exists, query, &stmt.text)?;
                Ok(StatementResult::Done(format!(
                    "View '{name}' has been created."
                )))
            }
            Statement::Query(q) => {
                let plan = self.planner.plan_query(q)?;
                Ok(StatementResult::Query(sluice_runtime::start(
                    &plan,
                    &self.job_config()?,
                )?))
            }
            Statement::Insert { table, query } if self.statement_set.is_some() => {
                // Planned now, so a mistake shows at once; run at END.
                self.planner.plan_insert(table, query)?;
                let set = self.statement_set.as_mut().expect("checked");
                set.push(sluice_sql::parser::InsertStatement {
                    table: table.clone(),
                    query: query.clone(),
                });
                Ok(StatementResult::Done(
                    "Add SQL update statement to the statement set.".into(),
                ))
            }
            Statement::BeginStatementSet => {
                if self.statement_set.is_some() {
                    return Err(SluiceError::Plan(
                        "a statement set is already open: END runs it".into(),
                    ));
                }
                self.statement_set = Some(Vec::new());
                Ok(StatementResult::Done("Begin a statement set.".into()))
            }
            Statement::EndStatementSet => {
                let inserts = self
                    .statement_set
                    .take()
                    .ok_or_else(|| SluiceError::Plan("END without BEGIN STATEMENT SET".into()))?;
                if inserts.is_empty() {
                    return Err(SluiceError::Plan(
                        "the statement set has no INSERT INTO statement".into(),
                    ));
                }
                self.run_statement_set(&inserts)
            }
            Statement::StatementSet(inserts) => self.run_statement_set(inserts),
            Statement::Insert { table, query } => {
                let plan = self.planner.plan_insert(table, query)?;
                Ok(StatementResult::Insert(sluice_runtime::start(
                    &plan,
                    &self.job_config()?,
                )?))
            }
            Statement::Explain(q) | Statement::ExplainDot(q) => {
                let plans = vec![self.planner.plan_query(q)?];
                let dot = matches!(stmt.statement, Statement::ExplainDot(_));
                self.explain(&plans, dot)
            }
            Statement::ExplainStatementSet { inserts, dot } => {
                let plans = self.plan_statement_set(inserts)?;
                self.explain(&plans, *dot)
            }
            Statement::Set { pair: Some((k, v)) } => {
                self.set(k, v)?;
                // Flink takes any key (its configuration is open); say when Sluice does not
                // read one, with the closest key it does read.
                if sluice_common::options::is_known_setting(k) {
                    return Ok(StatementResult::Done(
                        "Session property has been set.".into(),
                    ));
                }
                let keys = sluice_common::options::SESSION.iter().map(|d| d.key);
                let hint = sluice_sql::catalog::closest(k, keys)
                    .map(|c| format!("; did you mean '{c}'?"))
                    .unwrap_or_default();
                Ok(StatementResult::Done(format!(
                    "Session property has been set. Sluice does not read '{k}'{hint}"
                )))
            }
            Statement::Set { pair: None } => {
                let keys: Vec<String> = self.settings.keys().cloned().collect();
                let values: Vec<String> = self.settings.values().cloned().collect();
                Ok(StatementResult::Info(two_columns(
                    "key", keys, "value", values,
                )))
            }
            Statement::Reset { key } => {
                match key {
                    Some(k) => {
                        self.settings.remove(k);
                    }
                    None => self.settings.clear(),
                }
                if !self.settings.contains_key(CDC_EVENTS_DUPLICATE) {
                    self.planner.set_cdc_events_duplicate(false);
                }
                if !self.settings.contains_key(SINK_NOT_NULL_ENFORCER) {
                    self.planner.set_drop_sink_null_rows(false);
                }
                if !self.settings.contains_key(LOCAL_TIME_ZONE) {
                    self.time_zone = system_time_zone();
                    self.planner.set_time_zone(&self.time_zone)?;
                }
                Ok(StatementResult::Done(
                    "Session property has been reset.".into(),
                ))
            }
            Statement::ShowTables => {
                // Tables and views, by name (as Flink's SHOW TABLES).
                let mut names: Vec<String> = self
                    .planner
                    .catalog()
                    .tables
                    .keys()
                    .chain(self.planner.catalog().views.keys())
                    .cloned()
                    .collect();
                names.sort();
                Ok(StatementResult::Info(single_column("table name", names)))
            }
            Statement::DropTable { name, if_exists } | Statement::DropView { name, if_exists } => {
                let view = matches!(stmt.statement, Statement::DropView { .. });
                let kind = if view { "View" } else { "Table" };
                Ok(StatementResult::Done(
                    if self.planner.drop_relation(name, view, *if_exists)? {
                        format!("{kind} '{name}' has been dropped.")
                    } else {
                        format!("{kind} '{name}' does not exist: nothing to drop.")
                    },
                ))
            }
            Statement::ShowCreateView { name } => {
                let catalog = self.planner.catalog();
                let v = catalog
                    .views
                    .get(name)
                    .ok_or_else(|| SluiceError::Plan(catalog.unknown_relation(name)))?;
                // The statement as it was written.
                Ok(StatementResult::Info(single_column(
                    "create view",
                    vec![v.text.clone()],
                )))
            }
            Statement::CreateFunction {
                name,
                identifier,
                if_not_exists,
                system,
            } => {
                self.planner
                    .user_functions()
                    .bind(name, identifier, *if_not_exists, *system)?;
                Ok(StatementResult::Done(format!(
                    "Function '{name}' has been created."
                )))
            }
            Statement::DropFunction { name, if_exists } => Ok(StatementResult::Done(
                if self.planner.user_functions().unbind(name, *if_exists)? {
                    format!("Function '{name}' has been dropped.")
                } else {
                    format!("Function '{name}' does not exist: nothing to drop.")
                },
            )),
            Statement::ShowViews => {
                let names: Vec<String> = self.planner.catalog().views.keys().cloned().collect();
                Ok(StatementResult::Info(single_column("view name", names)))
            }
            Statement::Describe { name } => self.describe(name),
            Statement::ShowJobs => Ok(StatementResult::Info(self.jobs.show())),
            Statement::ShowFunctions => Ok(StatementResult::Info(single_column(
                "function name",
                self.planner.function_names(),
            ))),
            Statement::StopJob { id, savepoint } => self.jobs.stop(id, *savepoint),
            Statement::ShowCreateTable { name } => {
                let catalog = self.planner.catalog();
                let t = catalog
                    .tables
                    .get(name)
                    .ok_or_else(|| SluiceError::Plan(catalog.unknown_relation(name)))?;
                let mut lines: Vec<String> = t
                    .schema
                    .fields()
                    .iter()
                    .zip(&t.columns)
                    .map(|(f, c)| {
                        let not_null = if f.is_nullable() { "" } else { " NOT NULL" };
                        match (&c.computed, &c.metadata) {
                            (Some(expr), _) => format!("  `{}` AS {expr}", f.name()),
                            (None, Some(m)) => {
                                format!("  `{}` {}{not_null} {m}", f.name(), c.type_text)
                            }
                            (None, None) => format!("  `{}` {}{not_null}", f.name(), c.type_text),
                        }
                    })
                    .collect();
                if let Some((rowtime, _, text)) = &t.watermark {
                    lines.push(format!(
                        "  WATERMARK FOR `{}` AS {text}",
                        t.schema.field(*rowtime).name()
                    ));
                }
                if !t.primary_key.is_empty() {
                    lines.push(format!(
                        "  PRIMARY KEY ({}) NOT ENFORCED",
                        t.primary_key.join(", ")
                    ));
                }
                let options: Vec<String> = t
                    .options
                    .iter()
                    .map(|(k, v)| format!("  '{k}' = '{}'", v.replace('\'', "''")))
                    .collect();
                let partitioned = match t.definition.partition_keys.as_slice() {
                    [] => String::new(),
                    keys => format!(
                        "\nPARTITIONED BY ({})",
                        keys.iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let ddl = format!(
                    "CREATE TABLE `{}` (\n{}\n){partitioned} WITH (\n{}\n)",
                    t.name,
                    lines.join(",\n"),
                    options.join(",\n")
                );
                Ok(StatementResult::Info(single_column(
                    "create table",
                    vec![ddl],
                )))
            }
        }
    }

    fn describe(&self, name: &str) -> Result<StatementResult> {
        let catalog = self.planner.catalog();
        let mut names = Vec::new();
        let mut types = Vec::new();
        let mut nulls = Vec::new();
        let mut keys = Vec::new();
        let mut extras = Vec::new();
        let mut watermarks = Vec::new();
        if let Some(t) = catalog.tables.get(name) {
            // Flink's DESCRIBE: `PRI(k1, k2)` beside each primary-key column.
            let primary = format!("PRI({})", t.primary_key.join(", "));
            for (i, f) in t.schema.fields().iter().enumerate() {
                names.push(f.name().clone());
                let mut ty = t.columns[i].type_text.clone();
                if t.watermark.as_ref().is_some_and(|(r, _, _)| *r == i) {
                    ty.push_str(" *ROWTIME*");
                }
                types.push(ty);
                nulls.push(if f.is_nullable() { "TRUE" } else { "FALSE" }.to_string());
                keys.push(if t.primary_key.contains(f.name()) {
                    primary.clone()
                } else {
                    String::new()
                });
                extras.push(
                    t.columns[i]
                        .computed
                        .as_ref()
                        .map(|c| format!("AS {c}"))
                        .or_else(|| t.columns[i].metadata.clone())
                        .unwrap_or_default(),
                );
                watermarks.push(match &t.watermark {
                    Some((r, _, text)) if *r == i => text.clone(),
                    _ => String::new(),
                });
            }
        } else if let Some(v) = catalog.views.get(name) {
            for f in v.plan.schema().fields() {
                names.push(f.name().clone());
                types.push(flink_type_name(f.data_type()));
                nulls.push(if f.is_nullable() { "TRUE" } else { "FALSE" }.to_string());
                keys.push(String::new());
                extras.push(String::new());
                watermarks.push(String::new());
            }
        } else {
            return Err(SluiceError::Plan(catalog.unknown_relation(name)));
        }
        let cols: Vec<(&str, Vec<String>)> = vec![
            ("name", names),
            ("type", types),
            ("null", nulls),
            ("key", keys),
            ("extras", extras),
            ("watermark", watermarks),
        ];
        Ok(StatementResult::Info(string_batch(cols)))
    }

    /// Runs the statements of `sql` in order and returns the result of the last one: a
    /// running `SELECT` or `INSERT INTO` job ([`RunningJob`] streams its batches), a
    /// small result (`SHOW`, `DESCRIBE`, `EXPLAIN`) or a message. Jobs of earlier
    /// statements are run to their end first.
    ///
    /// ```no_run
    /// # use sluice::{Engine, EngineConfig, StatementResult};
    /// let mut engine = Engine::new(EngineConfig::default());
    /// engine.sql("CREATE TABLE t (x INT) WITH ('connector' = 'datagen', 'number-of-rows' = '5')")?;
    /// if let StatementResult::Query(mut job) = engine.sql("SELECT x FROM t")? {
    ///     while let Some(batch) = job.blocking_next() {
    ///         println!("{} rows", batch?.num_rows());
    ///     }
    /// }
    /// # Ok::<(), sluice::SluiceError>(())
    /// ```
    ///
    /// # Errors
    /// Parse errors (nothing runs), then the first statement that fails.
    pub fn sql(&mut self, sql: &str) -> Result<StatementResult> {
        let statements = parse_script(sql)?;
        let Some((last, earlier)) = statements.split_last() else {
            return Ok(StatementResult::Done("No statement.".into()));
        };
        for stmt in earlier {
            match self.execute(stmt)? {
                StatementResult::Query(job) | StatementResult::Insert(job) => {
                    drain(job)?;
                }
                StatementResult::Done(_) | StatementResult::Info(_) => {}
            }
        }
        self.execute(last)
    }

    /// Lets `job` run in the background (its output is read and dropped; it should be an
    /// `INSERT INTO` job) and lists it in `SHOW JOBS`, where `STOP JOB` can stop it.
    /// Returns the job's id. `statement` is the SQL shown as the job's name.
    pub fn detach(&mut self, job: RunningJob, statement: &str) -> String {
        self.jobs.detach(job, statement)
    }

    /// The checkpoint interval when the rows of a `SELECT` are held until each checkpoint
    /// completes (exactly-once checkpointing on; see [`RunningJob`]); `None` when they
    /// are delivered at once.
    pub fn query_results_held_for(&self) -> Option<std::time::Duration> {
        let config = self.checkpoint_config().ok()?;
        (config.mode == sluice_runtime::CheckpointingMode::ExactlyOnce)
            .then_some(config.interval)
            .flatten()
    }

    /// Ids of the background jobs ([`Engine::detach`]) still running.
    pub fn running_jobs(&self) -> Vec<String> {
        self.jobs.running()
    }

    /// Stops every running background job and waits until each has ended (output after
    /// a job's last checkpoint is not committed).
    pub fn stop_running_jobs(&self) {
        self.jobs.stop_all()
    }

    /// Waits until every background job has ended by itself (jobs over bounded inputs).
    pub fn wait_for_jobs(&self) {
        self.jobs.wait_all()
    }

    /// Tables and views of the session catalog with their column names, sorted by name
    /// (for completion in the shell).
    pub fn relations(&self) -> Vec<(String, Vec<String>)> {
        let catalog = self.planner.catalog();
        let mut out: Vec<(String, Vec<String>)> = catalog
            .tables
            .iter()
            .map(|(name, t)| {
                let cols = t.schema.fields().iter().map(|f| f.name().clone()).collect();
                (name.clone(), cols)
            })
            .chain(catalog.views.iter().map(|(name, v)| {
                let cols = v
                    .plan
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
                (name.clone(), cols)
            }))
            .collect();
        out.sort();
        out
    }

    /// Runs every statement of a script in order, waiting for each job to finish, and
    /// returns the rows of every `SELECT` (one entry per `SELECT`, in order).
    ///
    /// # Errors
    /// The first statement that fails, parse errors first (nothing runs if the script
    /// does not parse).
    pub fn execute_script(&mut self, sql: &str) -> Result<Vec<Vec<RecordBatch>>> {
        let statements = parse_script(sql)?;
        let mut results = Vec::new();
        for stmt in &statements {
            match self.execute(stmt)? {
                StatementResult::Query(job) => results.push(drain(job)?),
                StatementResult::Insert(job) => {
                    drain(job)?;
                }
                StatementResult::Done(_) | StatementResult::Info(_) => {}
            }
        }
        Ok(results)
    }

    /// Runs a script and returns the rows of its last `SELECT` (empty if none).
    pub fn collect(&mut self, sql: &str) -> Result<Vec<RecordBatch>> {
        Ok(self.execute_script(sql)?.pop().unwrap_or_default())
    }
}

/// Reads a job to its end, returning its rows or its first error.
pub fn drain(mut job: RunningJob) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    while let Some(b) = job.blocking_next() {
        out.push(b?);
    }
    job.join();
    Ok(out)
}

pub(crate) fn string_batch(cols: Vec<(&str, Vec<String>)>) -> RecordBatch {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, _)| Field::new(*n, DataType::Utf8, false))
        .collect();
    let arrays: Vec<ArrayRef> = cols
        .into_iter()
        .map(|(_, v)| Arc::new(StringArray::from(v)) as ArrayRef)
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).expect("string columns match")
}

fn single_column(name: &str, values: Vec<String>) -> RecordBatch {
    string_batch(vec![(name, values)])
}

fn two_columns(a: &str, av: Vec<String>, b: &str, bv: Vec<String>) -> RecordBatch {
    string_batch(vec![(a, av), (b, bv)])
}
