//! The `sluice` command: `sluice` alone is the interactive SQL shell (`repl.rs`);
//! `sluice run FILE.sql` runs every statement of a SQL file (`-` reads standard input;
//! `-e "SQL"` runs the given text).
//!
//! Exit codes: 0 success; 1 a job failed while running (data, I/O, an operator, after its
//! restarts); 2 bad command-line arguments; 3 the SQL is wrong (does not parse, does not
//! plan, not supported, bad setting); 4 the SQL file cannot be read.

mod repl;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use sluice::format::{OutputFormat, ResultPrinter};
use sluice::{
    parse_script, Engine, EngineConfig, JobMetrics, RunningJob, SluiceError, StatementResult,
};

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: continuous SQL over streams"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every statement of a SQL file in order. Results of a SELECT go to stdout;
    /// summaries, late-row counts and warnings go to stderr.
    Run {
        /// The SQL file (`-`: standard input). Not with `-e`.
        #[arg(required_unless_present = "execute", conflicts_with = "execute")]
        file: Option<PathBuf>,
        /// Runs this SQL text instead of a file.
        #[arg(short = 'e', long = "execute", value_name = "SQL")]
        execute: Option<String>,
        /// Sets a session property before the first statement, as `SET 'key' = 'value'`
        /// (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// How results print.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Resume each job from a checkpoint: `latest` (the newest complete checkpoint of
        /// the same query under 'execution.checkpointing.dir') or the path/URL of a
        /// `chk-<id>` directory.
        #[arg(long, value_name = "latest|PATH")]
        from_checkpoint: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Csv,
    Json,
}

impl From<Format> for OutputFormat {
    fn from(f: Format) -> Self {
        match f {
            Format::Table => OutputFormat::Table,
            Format::Csv => OutputFormat::Csv,
            Format::Json => OutputFormat::Json,
        }
    }
}

fn main() -> ExitCode {
    sluice::tune_allocator();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Run {
            file,
            execute,
            set,
            format,
            from_checkpoint,
        }) => {
            let script = match (&execute, &file) {
                (Some(sql), _) => Ok(Script {
                    name: "-e".into(),
                    sql: sql.clone(),
                }),
                (None, Some(path)) => read_script(path),
                (None, None) => unreachable!("clap requires a file or -e"),
            };
            let result = script.and_then(|script| {
                run_script(&script, &set, format.into(), from_checkpoint.as_deref())
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                // The reader of stdout went away (e.g. `| head`): stop quietly.
                Err(Failure::Run(SluiceError::Io { source, .. }))
                    if source.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    ExitCode::SUCCESS
                }
                Err(f) => {
                    let (code, e) = match f {
                        Failure::Run(e) => (1, e),
                        Failure::Sql(e) => (3, e),
                        Failure::Input(e) => (4, e),
                    };
                    eprintln!("[ERROR] {e}");
                    ExitCode::from(code)
                }
            }
        }
        None => ExitCode::from(repl::run()),
    }
}

/// SQL text to run and where it came from (for messages).
struct Script {
    name: String,
    sql: String,
}

/// Why `sluice run` failed, which decides its exit code.
enum Failure {
    /// A job failed while running (exit code 1).
    Run(SluiceError),
    /// The SQL or a setting is wrong: nothing ran (exit code 3).
    Sql(SluiceError),
    /// The SQL file cannot be read (exit code 4).
    Input(SluiceError),
}

impl From<SluiceError> for Failure {
    fn from(e: SluiceError) -> Self {
        Failure::Run(e)
    }
}

fn read_script(path: &PathBuf) -> Result<Script, Failure> {
    let stdin = path.as_os_str() == "-";
    let sql = if stdin {
        std::io::read_to_string(std::io::stdin())
            .map_err(|e| Failure::Input(SluiceError::io("reading standard input", e)))?
    } else {
        std::fs::read_to_string(path).map_err(|e| {
            Failure::Input(SluiceError::io(format!("reading '{}'", path.display()), e))
        })?
    };
    Ok(Script {
        name: if stdin {
            "<stdin>".into()
        } else {
            path.display().to_string()
        },
        sql,
    })
}

/// Errors found before a job runs: the SQL text, planning, settings.
fn is_sql_error(e: &SluiceError) -> bool {
    matches!(
        e,
        SluiceError::Sql(_)
            | SluiceError::Plan(_)
            | SluiceError::NotSupported(_)
            | SluiceError::Config(_)
            | SluiceError::DataFusion(_)
    )
}

fn run_script(
    script: &Script,
    settings: &[String],
    format: OutputFormat,
    from_checkpoint: Option<&str>,
) -> Result<(), Failure> {
    let sql_failure = |e: SluiceError| {
        let e = in_file(&script.name, e);
        if is_sql_error(&e) {
            Failure::Sql(e)
        } else {
            Failure::Run(e)
        }
    };
    let statements = parse_script(&script.sql).map_err(sql_failure)?;
    if statements.is_empty() {
        eprintln!("[WARN] '{}' contains no SQL statement", script.name);
    }
    let mut engine = Engine::new(EngineConfig::default());
    sluice::nexmark::register_udfs(&mut engine);
    for pair in settings {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            Failure::Sql(SluiceError::Config(format!(
                "--set expects KEY=VALUE, found '{pair}'"
            )))
        })?;
        engine.set(key.trim(), value.trim()).map_err(Failure::Sql)?;
    }
    if let Some(path) = from_checkpoint {
        engine
            .set("execution.state-recovery.path", path)
            .map_err(Failure::Sql)?;
    }
    for stmt in &statements {
        let result = engine.execute(stmt).map_err(sql_failure)?;
        match result {
            StatementResult::Done(msg) => eprintln!("[INFO] {msg}"),
            StatementResult::Info(batch)
                if matches!(
                    stmt.statement,
                    sluice::Statement::Explain(_)
                        | sluice::Statement::ExplainDot(_)
                        | sluice::Statement::ExplainStatementSet { .. }
                        | sluice::Statement::ShowCreateTable { .. }
                        | sluice::Statement::ShowCreateView { .. }
                ) =>
            {
                // EXPLAIN and SHOW CREATE TABLE print plain text (as Flink does).
                let text = sluice::format::row_values(&batch, 0)?.join("");
                if text.ends_with('\n') {
                    print!("{text}");
                } else {
                    println!("{text}");
                }
            }
            StatementResult::Info(batch) => {
                let mut p = ResultPrinter::for_batch(std::io::stdout().lock(), format, &batch)?;
                p.batch(&batch)?;
                p.finish()?;
            }
            StatementResult::Query(job) => run_query(job, format)?,
            StatementResult::Insert(job) => run_insert(job)?,
        }
    }
    Ok(())
}

fn in_file(name: &str, e: SluiceError) -> SluiceError {
    match e {
        SluiceError::Sql(m) => SluiceError::Sql(format!("{name}: {m}")),
        other => other,
    }
}

fn run_query(mut job: RunningJob, format: OutputFormat) -> Result<(), SluiceError> {
    use std::io::IsTerminal;
    let started = Instant::now();
    // An updating result in `table` format prints only at the end: the progress line
    // can share the terminal until then.
    let final_table = job.updating && format == OutputFormat::Table;
    let mut progress = Progress::start(
        &job.metrics,
        std::io::stdout().is_terminal() && !final_table,
    );
    if final_table {
        // An updating result prints as its final table once the input ends.
        let mut batches = Vec::new();
        while let Some(batch) = job.blocking_next() {
            batches.push(batch?);
        }
        drop(progress.take());
        match sluice::format::fold_changelog(&batches)? {
            Some(table) => {
                let mut printer =
                    ResultPrinter::new(std::io::stdout().lock(), format, table.schema());
                printer.batch(&table)?;
                printer.finish()?;
            }
            None => {
                let fields: Vec<_> = job.schema.fields().iter().skip(1).cloned().collect();
                let schema = std::sync::Arc::new(sluice::arrow::datatypes::Schema::new(fields));
                ResultPrinter::new(std::io::stdout().lock(), format, schema).finish()?;
            }
        }
        summary(&job.metrics, started);
        job.join();
        return Ok(());
    }
    let stdout = std::io::stdout();
    let mut printer = ResultPrinter::new(stdout.lock(), format, job.schema.clone());
    while let Some(batch) = job.blocking_next() {
        printer.batch(&batch?)?;
    }
    printer.finish()?;
    drop(progress);
    summary(&job.metrics, started);
    job.join();
    Ok(())
}

/// A live progress line on stderr while a job runs: rows and bytes read, rows/s, the
/// watermark, late rows, checkpoints. Only on a terminal, and only when the job's rows do
/// not print to the same terminal; cleared before the summary line.
struct Progress {
    bar: indicatif::ProgressBar,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(metrics: &std::sync::Arc<JobMetrics>, rows_on_terminal: bool) -> Option<Progress> {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() || rows_on_terminal {
            return None;
        }
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg}") {
            bar.set_style(style);
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (b, s, m) = (
            bar.clone(),
            std::sync::Arc::clone(&stop),
            std::sync::Arc::clone(metrics),
        );
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            let mut with_total = false;
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                // Bounded file sources: a bar of bytes read out of their total size.
                if let Some(total) = m.total_bytes() {
                    if !with_total {
                        with_total = true;
                        if let Ok(style) = indicatif::ProgressStyle::with_template(
                            "{spinner} [{bar:24}] {percent:>3}% {msg}",
                        ) {
                            b.set_style(style.progress_chars("=> "));
                        }
                    }
                    b.set_length(total);
                    b.set_position(JobMetrics::get(&m.bytes_in).min(total));
                }
                b.set_message(progress_line(&m, started));
                b.tick();
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        Some(Progress {
            bar,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.bar.finish_and_clear();
    }
}

/// `1234567 rows (45.6 MB) read, 890123 rows/s, watermark 2013-01-01 05:00:00, 0 late,
/// 2 checkpoints`.
fn progress_line(m: &JobMetrics, started: Instant) -> String {
    let rows = JobMetrics::get(&m.rows_in);
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let wm = m.watermark_ms.load(std::sync::atomic::Ordering::Relaxed);
    let watermark = if wm == i64::MIN {
        "none yet".to_string()
    } else {
        sluice::format_timestamp_ms(wm)
    };
    let total = m
        .total_bytes()
        .map(|t| format!(" of {:.1} MB", t as f64 / 1e6))
        .unwrap_or_default();
    format!(
        "{rows} rows ({:.1} MB{total}) read, {:.0} rows/s, watermark {watermark}, {} late, {} checkpoints{}",
        JobMetrics::get(&m.bytes_in) as f64 / 1e6,
        rows as f64 / secs,
        JobMetrics::get(&m.late_rows_dropped),
        JobMetrics::get(&m.checkpoints_completed),
        state_rows_text(m, false),
    )
}

/// `, state rows: op 2 1234, op 5 17` (now), or with `peak` `op 2 1234 (peak 2000)`;
/// empty without stateful operators. Operator numbers are the job's operator ids.
fn state_rows_text(m: &JobMetrics, peak: bool) -> String {
    let rows = m.state_rows();
    if rows.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = rows
        .iter()
        .map(|(op, (now, max))| {
            if peak {
                format!("op {op} {now} (peak {max})")
            } else {
                format!("op {op} {now}")
            }
        })
        .collect();
    format!(", state rows: {}", parts.join(", "))
}

fn run_insert(mut job: RunningJob) -> Result<(), SluiceError> {
    let started = Instant::now();
    let progress = Progress::start(&job.metrics, false);
    while let Some(batch) = job.blocking_next() {
        batch?;
    }
    drop(progress);
    summary(&job.metrics, started);
    job.join();
    Ok(())
}

fn summary(m: &JobMetrics, started: Instant) {
    let mut line = format!(
        "[INFO] Job finished: {} rows in, {} rows out, {} late rows dropped, {:.2} s",
        JobMetrics::get(&m.rows_in),
        JobMetrics::get(&m.rows_out),
        JobMetrics::get(&m.late_rows_dropped),
        started.elapsed().as_secs_f64()
    );
    let skipped = JobMetrics::get(&m.parse_errors_skipped);
    if skipped > 0 {
        line.push_str(&format!(", {skipped} unparsable rows skipped"));
    }
    let checkpoints = JobMetrics::get(&m.checkpoints_completed);
    if checkpoints > 0 {
        line.push_str(&format!(", {checkpoints} checkpoints"));
    }
    let restored = JobMetrics::get(&m.restored_checkpoint_id);
    if restored > 0 {
        line.push_str(&format!(", restored checkpoint {restored}"));
    }
    match JobMetrics::get(&m.restarts) {
        0 => {}
        1 => line.push_str(", 1 restart"),
        n => line.push_str(&format!(", {n} restarts")),
    }
    line.push_str(&state_rows_text(m, true));
    eprintln!("{line}");
    let _ = std::io::stderr().flush();
}
