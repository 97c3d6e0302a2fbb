//! The interactive SQL shell (`sluice` without arguments), built on `rustyline`.
//!
//! - Statements span lines until a `;` outside quotes and comments (the [`Validator`]);
//!   `HELP`, `QUIT` and `EXIT` need none.
//! - History persists in `$SLUICE_HISTORY` (default `~/.sluice_history`).
//! - Tab completes keywords, table and view names, column names and, inside the quotes of
//!   `SET '...`, setting keys; the hint line (dimmed, accepted with →) shows the unique
//!   completion of the word being typed, else the newest history entry it starts.
//! - A statement that does not parse is shown with a caret under the position the error
//!   names (psql's `LINE n:` display).
//! - `SELECT` results stream into the terminal as they are produced, in the result mode
//!   of `SET 'sql-client.execution.result-mode'` (Flink SQL client's option):
//!   `tableau` (default: a bordered table printed row by row, with an `op` column for
//!   updating results), `changelog` (every row with its `op`: `+I`, `-U`, `+U`, `-D`)
//!   or `table` (the current result table, redrawn in place as it changes).
//!   Ctrl-C cancels the running query and returns to the prompt; Ctrl-D leaves.
//! - `INSERT INTO` starts a background job and prints its id at once; `SHOW JOBS` and
//!   `STOP JOB 'id' [WITH SAVEPOINT]` manage it (Flink SQL client statements).

use std::borrow::Cow;
use std::cell::RefCell;
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::{Hinter, HistoryHinter};
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};
use sluice::arrow::array::RecordBatch;
use sluice::format::{OutputFormat, ResultPrinter};
use sluice::{parse_script, Engine, EngineConfig, RunningJob, SluiceError, StatementResult};

/// The setting that picks how `SELECT` results show (Flink SQL client's key).
const RESULT_MODE: &str = "sql-client.execution.result-mode";

const HELP: &str = "\
Statements end with ';' and may span lines.
  CREATE TABLE t (...) WITH (...);      CREATE VIEW v AS SELECT ...;
  SELECT ...;                           results stream until the input ends or Ctrl-C
  INSERT INTO t SELECT ...;             starts a background job and prints its id
  BEGIN STATEMENT SET; INSERT ...; INSERT ...; END;
  EXECUTE STATEMENT SET BEGIN INSERT ...; INSERT ...; END;
                                        the INSERTs as one job (shared sources read once)
  SELECT ... UNION ALL SELECT ...;      every row of every input
  SHOW TABLES; SHOW VIEWS; SHOW JOBS;   DESCRIBE t; SHOW CREATE TABLE t;
  EXPLAIN [FORMAT DOT] SELECT ...;      the physical operator graph
  STOP JOB 'id' [WITH SAVEPOINT];       stops a background job (after a final checkpoint)
  SET 'key' = 'value'; SET; RESET ['key'];
  SET 'sql-client.execution.result-mode' = 'tableau' | 'changelog' | 'table';
Shell: HELP, QUIT or EXIT (no ';' needed); Tab completes; Up/Down walk the history;
Ctrl-C cancels a running query (or clears the line); Ctrl-D leaves.";

const KEYWORDS: &[&str] = &[
    "ADD",
    "AFTER",
    "ALL",
    "AND",
    "AS",
    "ASC",
    "AVG",
    "BEGIN",
    "BETWEEN",
    "BIGINT",
    "BOOLEAN",
    "BY",
    "CASE",
    "CAST",
    "CLASSIFIER",
    "COUNT",
    "CREATE",
    "CUMULATE",
    "DAY",
    "DECIMAL",
    "DEFINE",
    "DESC",
    "DESCRIBE",
    "DESCRIPTOR",
    "DISTINCT",
    "DOUBLE",
    "DRAIN",
    "ELSE",
    "END",
    "ENFORCED",
    "EXECUTE",
    "EXIT",
    "EXPLAIN",
    "FALSE",
    "FIRST",
    "FLOAT",
    "FOR",
    "FORMAT",
    "FROM",
    "GROUP",
    "HAVING",
    "HELP",
    "HOP",
    "HOUR",
    "IN",
    "INSERT",
    "INT",
    "INTERVAL",
    "INTO",
    "IS",
    "JOB",
    "JOBS",
    "KEY",
    "LAST",
    "LIKE",
    "LIMIT",
    "MATCH",
    "MATCH_RECOGNIZE",
    "MATCH_ROWTIME",
    "MAX",
    "MEASURES",
    "MIN",
    "MINUTE",
    "MONTH",
    "NEXT",
    "NOT",
    "NULL",
    "ON",
    "ONE",
    "OR",
    "ORDER",
    "PARTITION",
    "PAST",
    "PATTERN",
    "PER",
    "PRIMARY",
    "QUIT",
    "RESET",
    "ROW",
    "ROWS",
    "SAVEPOINT",
    "SECOND",
    "SELECT",
    "SESSION",
    "SET",
    "SHOW",
    "SKIP",
    "STATEMENT",
    "STOP",
    "STRING",
    "SUM",
    "TABLE",
    "TABLES",
    "TEMPORARY",
    "THEN",
    "TIMESTAMP",
    "TIMESTAMP_LTZ",
    "TO",
    "TRUE",
    "TUMBLE",
    "UNION",
    "VALUES",
    "VARCHAR",
    "VIEW",
    "VIEWS",
    "WATERMARK",
    "WHEN",
    "WHERE",
    "WITH",
    "WITHIN",
    "YEAR",
];

/// Tables and views with their columns, refreshed after every statement.
type Relations = Rc<RefCell<Vec<(String, Vec<String>)>>>;

/// rustyline's helper: completion, hints, multi-line input.
struct SqlHelper {
    relations: Relations,
    history_hinter: HistoryHinter,
}

impl Helper for SqlHelper {}

/// The word being typed before `pos`: its start and text. Inside an unclosed single
/// quote, the word is everything after the quote (setting keys contain dots).
fn current_word(line: &str, pos: usize) -> (usize, &str, bool) {
    let before = &line[..pos];
    let quotes = before.matches('\'').count();
    if quotes % 2 == 1 {
        let start = before.rfind('\'').map(|i| i + 1).unwrap_or(0);
        return (start, &before[start..], true);
    }
    let start = before
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
        .map(|(i, c)| i + c.len_utf8())
        .unwrap_or(0);
    (start, &before[start..], false)
}

impl SqlHelper {
    /// Completions of the word before `pos`, best first.
    fn candidates(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let (start, word, quoted) = current_word(line, pos);
        if quoted {
            // Option keys from their declarations: a table's inside WITH (...), else the
            // session's.
            let in_with = line[..start].to_ascii_uppercase().contains("WITH");
            let keys = if in_with {
                sluice_common::options::table_keys()
            } else {
                sluice_common::options::SESSION
                    .iter()
                    .map(|d| d.key)
                    .collect()
            };
            let keys = keys
                .into_iter()
                .filter(|k| k.starts_with(word))
                .map(|k| k.to_string())
                .collect();
            return (start, keys);
        }
        if word.is_empty() {
            return (start, Vec::new());
        }
        let mut out: Vec<String> = Vec::new();
        let relations = self.relations.borrow();
        let names = relations
            .iter()
            .flat_map(|(t, cols)| std::iter::once(t).chain(cols.iter()));
        for name in names {
            if name.starts_with(word) && !out.contains(name) {
                out.push(name.clone());
            }
        }
        let lower = word.chars().all(|c| !c.is_uppercase());
        for k in KEYWORDS {
            if k.len() >= word.len() && k[..word.len()].eq_ignore_ascii_case(word) {
                let k = if lower {
                    k.to_ascii_lowercase()
                } else {
                    k.to_string()
                };
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
        (start, out)
    }
}

impl Completer for SqlHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        Ok(self.candidates(line, pos))
    }
}

impl Hinter for SqlHelper {
    type Hint = String;

    fn hint(&self, line: &str, pos: usize, ctx: &Context<'_>) -> Option<String> {
        if pos < line.len() || line.trim().is_empty() {
            return None;
        }
        let (_, word, _) = current_word(line, pos);
        if word.len() >= 2 {
            let (_, c) = self.candidates(line, pos);
            if let [only] = c.as_slice() {
                if only.len() > word.len() {
                    return Some(only[word.len()..].to_string());
                }
            }
        }
        self.history_hinter.hint(line, pos, ctx)
    }
}

impl Highlighter for SqlHelper {
    fn highlight_hint<'h>(&self, hint: &'h str) -> Cow<'h, str> {
        Cow::Owned(format!("\x1b[2m{hint}\x1b[0m"))
    }
}

impl Validator for SqlHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if is_complete(ctx.input()) {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

/// A shell command that needs no `;`.
fn shell_command(input: &str) -> Option<&'static str> {
    let word = input.trim().trim_end_matches(';').trim();
    ["HELP", "QUIT", "EXIT"]
        .into_iter()
        .find(|c| word.eq_ignore_ascii_case(c))
}

/// The input is ready to run: empty, a shell command, or ending with a `;` that is not
/// inside a string, a quoted identifier or a comment.
fn is_complete(input: &str) -> bool {
    if input.trim().is_empty() || shell_command(input).is_some() {
        return true;
    }
    let b = input.as_bytes();
    let mut i = 0;
    let mut last_significant = None;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
                if i >= b.len() {
                    return false; // an unclosed string
                }
                last_significant = Some(q);
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                if i + 1 >= b.len() {
                    return false; // an unclosed comment
                }
                i += 1;
            }
            c if !c.is_ascii_whitespace() => last_significant = Some(c),
            _ => {}
        }
        i += 1;
    }
    // Inside `EXECUTE STATEMENT SET BEGIN ...` before its `END;`, a `;` separates the
    // INSERTs in it: the input goes on.
    last_significant == Some(b';') && !sluice_sql::parser::ends_inside_statement_set(input)
}

/// `LINE n: text` and a caret under the column an error names (`at Line: L, Column: C`).
fn caret(input: &str, message: &str) -> Option<String> {
    let number_after = |key: &str| -> Option<usize> {
        let at = message.rfind(key)? + key.len();
        let digits: String = message[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().ok()
    };
    let (line, column) = (number_after("Line: ")?, number_after("Column: ")?);
    let text = input.lines().nth(line.checked_sub(1)?)?;
    let prefix = format!("LINE {line}: ");
    let pad: String = text
        .chars()
        .take(column.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    Some(format!(
        "{prefix}{text}\n{}{pad}^",
        " ".repeat(prefix.len())
    ))
}

fn history_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_HISTORY") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".sluice_history"))
}

/// Runs the shell until `QUIT` or Ctrl-D. Returns the process exit code: 0, or 1 when
/// the terminal cannot be used or, with input piped in (not a terminal), when a statement
/// failed.
///
/// Leaving stops the background jobs still running (after saying so); with piped input
/// the shell instead waits for them to finish, as `sluice run` does.
pub fn run() -> u8 {
    use std::io::IsTerminal;
    let interactive = std::io::stdin().is_terminal();
    let config = rustyline::Config::builder()
        .auto_add_history(false)
        .max_history_size(10_000)
        .map(|b| b.build())
        .unwrap_or_default();
    let mut editor: Editor<SqlHelper, rustyline::history::DefaultHistory> =
        match Editor::with_config(config) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("[ERROR] cannot start the shell: {e}");
                return 1;
            }
        };
    let relations: Relations = Rc::default();
    editor.set_helper(Some(SqlHelper {
        relations: Rc::clone(&relations),
        history_hinter: HistoryHinter::new(),
    }));
    let history = history_path().filter(|_| interactive);
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("[ERROR] cannot start the shell: {e}");
            return 1;
        }
    };
    let mut engine = Engine::new(EngineConfig::default());
    sluice::nexmark::register_udfs(&mut engine);
    if interactive {
        println!(
            "Sluice {}: continuous SQL. End statements with ';'. HELP for help, QUIT or Ctrl-D to leave.",
            env!("CARGO_PKG_VERSION")
        );
    }
    let mut failed = false;
    loop {
        let input = match editor.readline("sluice> ") {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => continue, // Ctrl-C clears the line
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("[ERROR] reading input: {e}");
                return 1;
            }
        };
        if input.trim().is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(input.trim_end());
        if let Some(h) = &history {
            let _ = editor.append_history(h);
        }
        match shell_command(&input) {
            Some("HELP") => {
                println!("{HELP}");
                continue;
            }
            Some(_) => break,
            None => {}
        }
        failed |= !run_input(&mut engine, &runtime, &input);
        *relations.borrow_mut() = engine.relations();
    }
    let running = engine.running_jobs();
    if !running.is_empty() {
        if interactive {
            println!(
                "[INFO] Stopping {} running job(s): {} (output after a job's last checkpoint \
                 is not committed; STOP JOB '...' WITH SAVEPOINT keeps a restart point).",
                running.len(),
                running.join(", ")
            );
            engine.stop_running_jobs();
        } else {
            eprintln!(
                "[INFO] Waiting for {} running job(s) to finish: {}",
                running.len(),
                running.join(", ")
            );
            engine.wait_for_jobs();
        }
    }
    if interactive {
        println!("Bye.");
    }
    u8::from(failed && !interactive)
}

/// Runs every statement of `input`, printing results and errors; stops at the first
/// error (and then returns `false`).
fn run_input(engine: &mut Engine, runtime: &tokio::runtime::Runtime, input: &str) -> bool {
    let statements = match parse_script(input) {
        Ok(s) => s,
        Err(e) => return report(input, &e),
    };
    for stmt in &statements {
        let result = match engine.execute(stmt) {
            Ok(r) => r,
            Err(e) => return report(input, &e),
        };
        let shown = match result {
            StatementResult::Done(msg) => {
                println!("[INFO] {msg}");
                Ok(())
            }
            StatementResult::Info(batch) => print_info(stmt, &batch),
            StatementResult::Query(job) => {
                let mode = engine.setting(RESULT_MODE).unwrap_or("tableau").to_string();
                if let Some(every) = engine.query_results_held_for() {
                    let every = format!("{} s", every.as_secs_f64());
                    println!(
                        "[INFO] Exactly-once checkpointing is on: rows show as each checkpoint \
                         completes (every {every}), or at the end of the input."
                    );
                }
                stream_query(runtime, job, &mode)
            }
            StatementResult::Insert(job) => {
                let id = engine.detach(job, &stmt.text);
                println!(
                    "[INFO] Submitted job '{id}'. SHOW JOBS lists it; STOP JOB '{id}' [WITH SAVEPOINT] stops it."
                );
                Ok(())
            }
        };
        if let Err(e) = shown {
            return report(input, &e);
        }
    }
    true
}

/// Prints an error (with a caret under the position a SQL error names); returns `false`.
fn report(input: &str, e: &SluiceError) -> bool {
    let message = e.to_string();
    println!("[ERROR] {message}");
    if matches!(e, SluiceError::Sql(_)) {
        if let Some(c) = caret(input, &message) {
            println!("{c}");
        }
    }
    false
}

fn print_info(stmt: &sluice::ParsedStatement, batch: &RecordBatch) -> sluice::Result<()> {
    use sluice::Statement;
    if matches!(
        stmt.statement,
        Statement::Explain(_)
            | Statement::ExplainDot(_)
            | Statement::ExplainStatementSet { .. }
            | Statement::ShowCreateTable { .. }
            | Statement::ShowCreateView { .. }
    ) {
        let text = sluice::format::row_values(batch, 0)?.join("");
        println!("{}", text.trim_end());
        return Ok(());
    }
    let mut p = ResultPrinter::for_batch(std::io::stdout().lock(), OutputFormat::Table, batch)?;
    p.batch(batch)?;
    p.finish()?;
    Ok(())
}

/// How a `SELECT`'s rows show while they arrive.
enum View {
    /// Rows as they come, in a bordered table (with `op` when updating).
    Tableau(ResultPrinter<std::io::Stdout>),
    /// Every row with its change kind, `+I` for an append-only result.
    Changelog(ResultPrinter<std::io::Stdout>),
    /// The current result table, redrawn in place.
    Table {
        batches: Vec<RecordBatch>,
        updating: bool,
        drawn_lines: usize,
        last_draw: Option<Instant>,
    },
}

impl View {
    fn new(mode: &str, job: &RunningJob) -> sluice::Result<View> {
        let out = std::io::stdout();
        Ok(match mode.to_ascii_lowercase().as_str() {
            "tableau" => View::Tableau(ResultPrinter::new(
                out,
                OutputFormat::Table,
                job.schema.clone(),
            )),
            "changelog" => {
                let schema = if job.updating {
                    job.schema.clone()
                } else {
                    std::sync::Arc::new(sluice_runtime::job::op_schema(&job.schema))
                };
                View::Changelog(ResultPrinter::new(out, OutputFormat::Table, schema))
            }
            "table" => View::Table {
                batches: Vec::new(),
                updating: job.updating,
                drawn_lines: 0,
                last_draw: None,
            },
            other => {
                return Err(SluiceError::Config(format!(
                    "'{RESULT_MODE}' must be 'tableau', 'changelog' or 'table', found '{other}'"
                )))
            }
        })
    }

    fn batch(&mut self, batch: RecordBatch, updating: bool) -> sluice::Result<()> {
        match self {
            View::Tableau(p) => p.batch(&batch),
            View::Changelog(p) if updating => p.batch(&batch),
            View::Changelog(p) => {
                let ops = sluice::arrow::array::StringArray::from(vec!["+I"; batch.num_rows()]);
                let mut columns: Vec<sluice::arrow::array::ArrayRef> =
                    vec![std::sync::Arc::new(ops)];
                columns.extend(batch.columns().iter().cloned());
                let with_op = RecordBatch::try_new(p.schema(), columns)?;
                p.batch(&with_op)
            }
            View::Table {
                batches, last_draw, ..
            } => {
                batches.push(batch);
                // Redraw at most 10 times a second, and only on a terminal (elsewhere
                // the table prints once, at the end).
                use std::io::IsTerminal;
                if std::io::stdout().is_terminal()
                    && last_draw.is_none_or(|t| t.elapsed() >= Duration::from_millis(100))
                {
                    self.redraw()?;
                }
                Ok(())
            }
        }
    }

    /// Draws the current table over the previous drawing (at most a screenful of rows).
    fn redraw(&mut self) -> sluice::Result<()> {
        let View::Table {
            batches,
            updating,
            drawn_lines,
            last_draw,
        } = self
        else {
            return Ok(());
        };
        let table = if *updating {
            sluice::format::fold_changelog(batches)?
        } else if batches.is_empty() {
            None
        } else {
            Some(sluice::arrow::compute::concat_batches(
                &batches[0].schema(),
                batches.iter(),
            )?)
        };
        let Some(table) = table else {
            return Ok(());
        };
        let (rows, _) = console::Term::stdout().size();
        // Borders, header, the "more rows" line and the prompt must fit too: a drawing
        // taller than the terminal would scroll out of reach of the redraw.
        let room = (rows as usize).saturating_sub(9).max(3);
        let shown = table.slice(0, table.num_rows().min(room));
        let mut text = Vec::new();
        let mut p = ResultPrinter::for_batch(&mut text, OutputFormat::Table, &shown)?;
        p.batch(&shown)?;
        p.finish()?;
        let mut text = String::from_utf8_lossy(&text).to_string();
        if table.num_rows() > shown.num_rows() {
            text.push_str(&format!(
                "... and {} more rows ({} in all)\n",
                table.num_rows() - shown.num_rows(),
                table.num_rows()
            ));
        }
        let mut out = std::io::stdout().lock();
        let io = |e| SluiceError::io("writing results", e);
        if *drawn_lines > 0 {
            // Back to the first line of the previous drawing, and clear below.
            write!(out, "\x1b[{}F\x1b[J", *drawn_lines).map_err(io)?;
        }
        out.write_all(text.as_bytes()).map_err(io)?;
        out.flush().map_err(io)?;
        *drawn_lines = text.lines().count();
        *last_draw = Some(Instant::now());
        Ok(())
    }

    fn finish(mut self) -> sluice::Result<()> {
        match self {
            View::Tableau(p) | View::Changelog(p) => {
                p.finish()?;
            }
            View::Table { .. } => self.redraw()?,
        }
        Ok(())
    }
}

/// Streams a query's rows until its input ends, it fails, or Ctrl-C cancels it.
fn stream_query(
    runtime: &tokio::runtime::Runtime,
    mut job: RunningJob,
    mode: &str,
) -> sluice::Result<()> {
    let started = Instant::now();
    let mut view = View::new(mode, &job)?;
    let updating = job.updating;
    let mut shown = 0u64;
    let canceled = runtime.block_on(async {
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                next = job.next() => match next {
                    None => return Ok(false),
                    Some(batch) => {
                        let batch = batch?;
                        shown += batch.num_rows() as u64;
                        view.batch(batch, updating)?
                    }
                },
                _ = &mut ctrl_c => {
                    job.stop();
                    println!();
                    // What the job still emits while stopping is not shown.
                    let _ = tokio::time::timeout(Duration::from_secs(10), async {
                        while job.next().await.is_some() {}
                    })
                    .await;
                    return Ok::<bool, SluiceError>(true);
                }
            }
        }
    })?;
    view.finish()?;
    let rows = shown;
    let rows = if updating {
        format!("{rows} changelog rows")
    } else {
        format!("{rows} rows")
    };
    if canceled {
        println!("[INFO] Query canceled ({rows}).");
    } else {
        println!("[INFO] {rows} in {:.2} s.", started.elapsed().as_secs_f64());
    }
    job.join();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_complete_at_a_semicolon_outside_quotes_and_comments() {
        assert!(is_complete("SELECT 1;"));
        assert!(is_complete("SELECT 1;  -- done\n"));
        assert!(is_complete("help"));
        assert!(is_complete("QUIT;"));
        assert!(!is_complete("SELECT 1"));
        assert!(!is_complete("SELECT ';"));
        assert!(!is_complete("SELECT 1 -- ;"));
        assert!(!is_complete("SELECT /* ; */ 1"));
        assert!(!is_complete("SELECT 1; SELECT 2"));
        assert!(is_complete("SELECT 'a;b', `c;` FROM t;"));
        // A statement set goes on past the `;`s of its INSERTs, up to `END;`.
        assert!(!is_complete(
            "EXECUTE STATEMENT SET BEGIN\nINSERT INTO a SELECT 1;"
        ));
        assert!(is_complete(
            "execute statement set begin insert into a select 1; end;"
        ));
        assert!(is_complete("BEGIN STATEMENT SET;"));
        // A CASE ... END inside does not close it; a word ending in "end" neither.
        assert!(!is_complete(
            "EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT CASE WHEN x THEN 1 END FROM t;"
        ));
        assert!(!is_complete(
            "EXECUTE STATEMENT SET BEGIN INSERT INTO a SELECT spend FROM t;"
        ));
        assert!(!is_complete(
            "EXPLAIN STATEMENT SET BEGIN INSERT INTO a SELECT x FROM t;"
        ));
        assert!(is_complete(
            "EXPLAIN STATEMENT SET BEGIN INSERT INTO a SELECT x FROM t; END;"
        ));
    }

    #[test]
    fn caret_points_at_the_column() {
        let c = caret(
            "SELECT 1;\nSELEC x;",
            "Expected: x, found: SELEC at Line: 2, Column: 1",
        );
        assert_eq!(c.as_deref(), Some("LINE 2: SELEC x;\n        ^"));
        let c = caret(
            "SHOW TABELS;",
            "Expected: TABLES, found: TABELS at Line: 1, Column: 6",
        );
        assert_eq!(c.as_deref(), Some("LINE 1: SHOW TABELS;\n             ^"));
        assert_eq!(caret("x", "no position"), None);
    }

    #[test]
    fn completes_keywords_names_and_setting_keys() {
        let helper = SqlHelper {
            relations: Rc::new(RefCell::new(vec![(
                "clicks".to_string(),
                vec!["user_id".to_string(), "ts".to_string()],
            )])),
            history_hinter: HistoryHinter::new(),
        };
        assert_eq!(helper.candidates("SEL", 3), (0, vec!["SELECT".to_string()]));
        assert_eq!(helper.candidates("sel", 3), (0, vec!["select".to_string()]));
        assert_eq!(
            helper.candidates("SELECT * FROM cli", 17),
            (14, vec!["clicks".to_string()])
        );
        assert_eq!(
            helper.candidates("SELECT us", 9),
            (7, vec!["user_id".to_string()])
        );
        assert_eq!(
            helper.candidates("SET 'parallelism.d", 18),
            (5, vec!["parallelism.default".to_string()])
        );
        let line = "CREATE TABLE t (a INT) WITH ('csv.he";
        assert_eq!(
            helper.candidates(line, line.len()),
            (30, vec!["csv.header".to_string()])
        );
    }
}
