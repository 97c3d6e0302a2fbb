//! No input makes the parser or the planner panic or fail with an internal error: every
//! statement of the `.slt` corpus, mutated at random (a word deleted, repeated, swapped,
//! replaced by a keyword or symbol of the grammar, the text cut short), is parsed and, when
//! it parses, planned (queries) or executed (DDL, SET, SHOW, DESCRIBE) against the
//! catalog of its file. Each must succeed or give a Sluice error that is not an internal
//! one; a panic or an "Internal error" fails the test with the input.
//!
//! `SLUICE_NO_PANIC_CASES=N` (default 3000 in CI) sets the number of mutated statements;
//! `SLUICE_NO_PANIC_SEED` the first seed. Queries are only planned, never run.

#[path = "common/mod.rs"]
mod common;

use common::Rng;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use common::files_under;
use sluice::{parse_script, Engine, EngineConfig, Statement};

/// Words and symbols the mutations insert.
const VOCABULARY: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "HAVING",
    "ORDER",
    "LIMIT",
    "AS",
    "(",
    ")",
    ",",
    "*",
    "+",
    "-",
    "/",
    "=",
    "<",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "IS",
    "IN",
    "BETWEEN",
    "LIKE",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "INTERVAL",
    "'1'",
    "SECOND",
    "1",
    "0",
    "-1",
    "'x'",
    "TABLE",
    "DESCRIPTOR",
    "TUMBLE",
    "HOP",
    "SESSION",
    "CUMULATE",
    "OVER",
    "PARTITION",
    "ROWS",
    "RANGE",
    "PRECEDING",
    "UNBOUNDED",
    "ROW_NUMBER()",
    "JOIN",
    "ON",
    "LEFT",
    "FULL",
    "UNION",
    "ALL",
    "VALUES",
    "MATCH_RECOGNIZE",
    "PATTERN",
    "DEFINE",
    "MEASURES",
    "WITHIN",
    "WATERMARK",
    "FOR",
    "PRIMARY",
    "KEY",
    "DISTINCT",
    "COUNT(*)",
    "SUM(",
    "window_start",
    "window_end",
    "ts",
    "k",
    "TIMESTAMP",
    "DECIMAL(38, 10)",
    "'",
    "\"",
    ";",
    "[1]",
    ".",
    "::",
    "EXPR$0",
    "`a`",
    "1e400",
    "99999999999999999999",
];

/// A statement's SQL records of a `.slt` file: (is setup DDL, text).
fn records(path: &Path) -> Vec<(bool, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let head = line.trim();
        if !(head.starts_with("statement") || head.starts_with("query")) {
            continue;
        }
        let mut sql = Vec::new();
        while let Some(l) = lines.peek() {
            if l.trim().is_empty() || l.trim() == "----" {
                break;
            }
            sql.push(lines.next().unwrap_or_default());
        }
        let sql = sql.join("\n");
        // Declarations only: a CREATE TABLE ... AS SELECT would start a job writing files.
        let setup = head == "statement ok"
            && sql.trim_start().to_ascii_uppercase().starts_with("CREATE")
            && parse_script(&sql).is_ok_and(|s| {
                !s.iter()
                    .any(|p| matches!(p.statement, Statement::CreateTableAs { .. }))
            });
        if !sql.trim().is_empty() {
            out.push((setup, sql));
        }
    }
    out
}

/// One random mutation of `sql`, at word granularity.
fn mutate(sql: &str, rng: &mut Rng) -> String {
    let mut words: Vec<String> = sql.split_whitespace().map(str::to_string).collect();
    if words.is_empty() {
        return sql.to_string();
    }
    for _ in 0..1 + rng.below(3) {
        let i = rng.below(words.len());
        match rng.below(5) {
            0 if words.len() > 1 => {
                words.remove(i);
            }
            1 => {
                let w = words[i].clone();
                words.insert(i, w);
            }
            2 => {
                let j = rng.below(words.len());
                words.swap(i, j);
            }
            3 => {
                let w = VOCABULARY[rng.below(VOCABULARY.len())].to_string();
                words.insert(i, w);
            }
            _ => {
                let w = VOCABULARY[rng.below(VOCABULARY.len())].to_string();
                words[i] = w;
            }
        }
    }
    let mut text = words.join(" ");
    if rng.below(8) == 0 {
        let cut = rng.below(text.len());
        text = text.chars().take(cut).collect();
    }
    text
}

/// Parses `sql` and plans or executes what can be without running a job; `Err` for a
/// panic or an internal error.
fn check(engine: &mut Engine, sql: &str) -> Result<(), String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        let statements = match parse_script(sql) {
            Ok(s) => s,
            Err(e) => return internal(&e.to_string()),
        };
        for stmt in statements {
            let result = match &stmt.statement {
                Statement::Query(_) | Statement::Explain(_) | Statement::ExplainDot(_) => {
                    engine.plan(&stmt.text).map(|_| ())
                }
                Statement::CreateTable(_)
                | Statement::CreateView { .. }
                | Statement::Set { .. }
                | Statement::Reset { .. }
                | Statement::ShowTables
                | Statement::ShowViews
                | Statement::ShowFunctions
                | Statement::ShowCreateTable { .. }
                | Statement::ShowCreateView { .. }
                | Statement::Describe { .. } => engine.execute(&stmt).map(|_| ()),
                // Jobs, drops and statement sets are not run here.
                _ => Ok(()),
            };
            if let Err(e) = result {
                internal(&e.to_string())?;
            }
        }
        Ok(())
    }));
    match outcome {
        Ok(r) => r,
        Err(panic) => Err(format!(
            "panic: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

fn internal(message: &str) -> Result<(), String> {
    if message.to_ascii_lowercase().contains("internal error") {
        Err(message.to_string())
    } else {
        Ok(())
    }
}

#[test]
fn no_statement_panics_or_fails_internally() {
    let cases: usize = std::env::var("SLUICE_NO_PANIC_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("SLUICE_NO_PANIC_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files = Vec::new();
    files_under(&root, "slt", &mut files);
    let corpus: Vec<(PathBuf, Vec<(bool, String)>)> =
        files.iter().map(|f| (f.clone(), records(f))).collect();
    let per_file = cases.div_ceil(corpus.len().max(1));
    eprintln!(
        "{} files, {} statements",
        corpus.len(),
        corpus.iter().map(|c| c.1.len()).sum::<usize>()
    );
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for (file, records) in &corpus {
        let mut engine = Engine::new(EngineConfig {
            working_dir: Some(root.clone()),
            ..Default::default()
        });
        for (setup, sql) in records {
            if *setup {
                let _ = engine.sql(sql);
            }
        }
        let statements: Vec<&String> = records.iter().map(|(_, s)| s).collect();
        if statements.is_empty() {
            continue;
        }
        for _ in 0..per_file {
            let original = statements[rng.below(statements.len())];
            let input = mutate(original, &mut rng);
            if let Err(e) = check(&mut engine, &input) {
                failures.push(format!("{}: {input}\n  => {e}", file.display()));
            }
        }
    }
    std::panic::set_hook(previous_hook);
    assert!(
        failures.is_empty(),
        "{} of {} mutated statements panicked or failed internally:\n{}",
        failures.len(),
        per_file * corpus.len(),
        failures.join("\n")
    );
}
