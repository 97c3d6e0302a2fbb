//! The `sluice` command: `sluice run FILE.sql` runs every statement of a SQL file.

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
        /// The SQL file.
        file: PathBuf,
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
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Run {
            file,
            format,
            from_checkpoint,
        }) => match run_file(&file, format.into(), from_checkpoint.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            // The reader of stdout went away (e.g. `| head`): stop quietly.
            Err(SluiceError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("[ERROR] {e}");
                ExitCode::FAILURE
            }
        },
        None => {
            eprintln!(
                "The interactive SQL shell is not available yet. Run a SQL file with:\n  \
                 sluice run FILE.sql [--format table|csv|json]"
            );
            ExitCode::from(2)
        }
    }
}

fn run_file(
    file: &PathBuf,
    format: OutputFormat,
    from_checkpoint: Option<&str>,
) -> Result<(), SluiceError> {
    let sql = std::fs::read_to_string(file)
        .map_err(|e| SluiceError::io(format!("reading '{}'", file.display()), e))?;
    let statements = parse_script(&sql).map_err(|e| in_file(file, e))?;
    if statements.is_empty() {
        eprintln!("[WARN] '{}' contains no SQL statement", file.display());
    }
    let mut engine = Engine::new(EngineConfig::default());
    if let Some(path) = from_checkpoint {
        engine.set("execution.state-recovery.path", path)?;
    }
    for stmt in &statements {
        let result = engine.execute(stmt).map_err(|e| in_file(file, e))?;
        match result {
            StatementResult::Done(msg) => eprintln!("[INFO] {msg}"),
            StatementResult::Info(batch)
                if matches!(stmt.statement, sluice::Statement::Explain(_)) =>
            {
                // EXPLAIN prints the plan as plain text (as Flink does).
                let plan = sluice::format::row_values(&batch, 0)?.join("");
                print!("{plan}");
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

fn in_file(file: &std::path::Path, e: SluiceError) -> SluiceError {
    match e {
        SluiceError::Sql(m) => SluiceError::Sql(format!("{}: {m}", file.display())),
        other => other,
    }
}

fn run_query(mut job: RunningJob, format: OutputFormat) -> Result<(), SluiceError> {
    let started = Instant::now();
    if job.updating && format == OutputFormat::Table {
        // An updating result prints as its final table once the input ends.
        let mut batches = Vec::new();
        while let Some(batch) = job.blocking_next() {
            batches.push(batch?);
        }
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
    summary(&job.metrics, started);
    job.join();
    Ok(())
}

fn run_insert(mut job: RunningJob) -> Result<(), SluiceError> {
    let started = Instant::now();
    while let Some(batch) = job.blocking_next() {
        batch?;
    }
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
    eprintln!("{line}");
    let _ = std::io::stderr().flush();
}
