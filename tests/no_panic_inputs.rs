//! No damaged input makes Sluice panic or fail with an internal error (issue 18, "no panic
//! on any input"):
//! - the CSV, JSON and change-data-capture readers over input files mutated at random
//!   (bytes flipped, deleted, repeated, cut short, quotes, braces, separators and line
//!   breaks inserted), with and without `'*.ignore-parse-errors'`;
//! - restoring from a checkpoint one of whose files (the manifest, a state snapshot, the
//!   source offsets) was damaged the same way.
//!
//! Each run must end with rows or a Sluice error that is not an internal one; a panic in
//! any thread (a hook records them) or an "Internal error" fails the test with the case.
//! `SLUICE_NO_PANIC_CASES=N` cases per part (default 300 in CI; README gives the longer
//! run) and `SLUICE_NO_PANIC_SEED`.

#[path = "common/mod.rs"]
mod common;

use common::Rng;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sluice::{Engine, EngineConfig, StatementResult};

/// Bytes a mutation inserts: what a CSV or JSON reader must not trip on.
const NOISE: &[&[u8]] = &[
    b"\"",
    b"'",
    b",",
    b";",
    b"\n",
    b"\r\n",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b"\\",
    b"\0",
    b"\xff\xfe",
    b"\xc3",
    b"null",
    b"-",
    b"1e999",
    b"99999999999999999999999",
    b"NaN",
    b"2024-02-30 25:61:61",
    b"\"before\":",
    b"\"op\":\"u\"",
    b"\"data\":[",
    b"\t",
    b" ",
];

/// One to three random mutations of `bytes`.
fn mutate(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(b.len() + 1);
        match rng.below(6) {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let end = (at + 1 + rng.below(16)).min(b.len());
                b.drain(at..end);
            }
            2 => {
                let end = (at + 1 + rng.below(40)).min(b.len());
                let piece = b[at..end].to_vec();
                b.splice(at..at, piece);
            }
            3 => b.truncate(at),
            _ => {
                let noise = NOISE[rng.below(NOISE.len())];
                b.splice(at..at, noise.iter().copied());
            }
        }
    }
    b
}

/// Panic messages of any thread since the hook was set.
fn panic_recorder() -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    std::panic::set_hook(Box::new(move |info| {
        sink.lock().unwrap().push(info.to_string());
    }));
    seen
}

/// Runs `sql` (DDL, then one query) to the end: its rows or its error.
fn run_script(engine: &mut Engine, sql: &str) -> Result<(), String> {
    let statements = sluice::parse_script(sql).map_err(|e| e.to_string())?;
    for stmt in &statements {
        match engine.execute(stmt).map_err(|e| e.to_string())? {
            StatementResult::Query(mut job) | StatementResult::Insert(mut job) => {
                let mut error = None;
                while let Some(b) = job.blocking_next() {
                    if let Err(e) = b {
                        error = Some(e.to_string());
                    }
                }
                job.join();
                if let Some(e) = error {
                    return Err(e);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn cases(default: usize) -> (usize, u64) {
    let n = std::env::var("SLUICE_NO_PANIC_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let seed: u64 = std::env::var("SLUICE_NO_PANIC_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    (n, seed)
}

fn check(outcome: Result<(), String>, panics: &Arc<Mutex<Vec<String>>>) -> Result<(), String> {
    let panicked: Vec<String> = std::mem::take(&mut *panics.lock().unwrap());
    if !panicked.is_empty() {
        return Err(format!("panic: {}", panicked.join(" | ")));
    }
    match outcome {
        Err(e) if e.to_ascii_lowercase().contains("internal error") => Err(e),
        _ => Ok(()),
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-no-panic-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// (data file, columns, format options).
const INPUTS: &[(&str, &str, &str)] = &[
    ("clicks.csv", "uid STRING, url STRING, amount INT, price DOUBLE, ts TIMESTAMP(3)", "'format' = 'csv'"),
    ("clicks.json", "uid STRING, url STRING, amount INT, price DOUBLE, ts TIMESTAMP(3)", "'format' = 'json'"),
    ("orders_nested.json", "id INT, tags ARRAY<STRING>, attrs MAP<STRING, STRING>, buyer ROW<name STRING, city STRING>, ts TIMESTAMP(3)", "'format' = 'json'"),
    ("products_debezium.json", "id INT, name STRING, weight DOUBLE, PRIMARY KEY (id) NOT ENFORCED", "'format' = 'debezium-json'"),
    ("products_canal.json", "id INT, name STRING, weight DOUBLE", "'format' = 'canal-json'"),
    ("ltz.csv", "id INT, ts TIMESTAMP_LTZ(3)", "'format' = 'csv'"),
    ("nested.csv", "id INT, tags ARRAY<STRING>, r ROW<n STRING, c INT>, ds ARRAY<DOUBLE>", "'format' = 'csv'"),
    ("nested_typed.csv", "id INT, ts ARRAY<TIMESTAMP(3)>, r ROW<d DECIMAL(5, 2), s STRING>, b ARRAY<BOOLEAN>", "'format' = 'csv'"),
    ("multiset.json", "k STRING, m MULTISET<STRING>", "'format' = 'json'"),
];

#[test]
fn damaged_input_files_never_panic() {
    let (n, seed) = cases(300);
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt/data");
    let dir = temp_dir("inputs");
    let panics = panic_recorder();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut failures = Vec::new();
    let mut read = 0;
    for case in 0..n {
        let (file, columns, format) = INPUTS[case % INPUTS.len()];
        let original = std::fs::read(data.join(file)).unwrap();
        let damaged = mutate(&original, &mut rng);
        let path = dir.join(format!("case-{case}-{file}"));
        std::fs::write(&path, &damaged).unwrap();
        let ignore = if rng.below(2) == 0 {
            let prefix = format.split('\'').nth(3).unwrap_or("csv");
            format!(", '{prefix}.ignore-parse-errors' = 'true'")
        } else {
            String::new()
        };
        let sql = format!(
            "CREATE TABLE t ({columns}) WITH ('connector' = 'filesystem', 'path' = '{}', {format}{ignore});\n\
             SELECT * FROM t",
            path.display()
        );
        let mut engine = Engine::new(EngineConfig {
            batch_size: 1 + rng.below(4),
            ..Default::default()
        });
        let outcome = run_script(&mut engine, &sql);
        read += usize::from(outcome.is_ok());
        if let Err(e) = check(outcome, &panics) {
            failures.push(format!("{}: {e}", path.display()));
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
    eprintln!(
        "{n} damaged files: {read} read to the end, {} refused with an error",
        n - read
    );
    // The mutations leave many files readable and make many fail: both paths are tried.
    assert!(read > 0 && read < n, "{read} of {n} read");
    let _ = std::panic::take_hook();
    assert!(
        failures.is_empty(),
        "{} of {n} damaged files panicked or failed internally (kept for a look):\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The files of a directory tree, relative paths.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

#[test]
fn damaged_checkpoints_never_panic() {
    let (n, seed) = cases(300);
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt/data");
    let base = temp_dir("checkpoints");
    let table = format!(
        "CREATE TABLE clicks (uid STRING, url STRING, amount INT, price DOUBLE, ts TIMESTAMP(3), \
         WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) WITH ('connector' = 'filesystem', \
         'path' = '{}', 'format' = 'csv');",
        data.join("clicks.csv").display()
    );
    // Keyed state of an updating aggregate and of a window, and source offsets.
    let query = "SELECT uid, COUNT(*) AS c, SUM(amount) AS s FROM clicks GROUP BY uid";
    let window = "SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), \
                  INTERVAL '10' SECOND)) GROUP BY window_start, window_end";
    let mut originals = Vec::new();
    for (i, q) in [query, window].into_iter().enumerate() {
        let store = base.join(format!("store-{i}"));
        let sql = format!(
            "SET 'execution.checkpointing.dir' = '{}'; SET 'sluice.test.checkpoint-after-rows' = '4'; \
             SET 'sluice.test.failpoints' = 'source-after-row:7'; SET 'restart-strategy.type' = 'none';\n\
             SET 'pipeline.name' = 'damaged{i}';\n{table}\n{q}",
            store.display()
        );
        let mut engine = Engine::new(EngineConfig {
            batch_size: 2,
            ..Default::default()
        });
        assert!(
            run_script(&mut engine, &sql).is_err(),
            "the first run fails at row 7"
        );
        let mut found = Vec::new();
        files(&store, &mut found);
        let chk = found
            .iter()
            .find(|p| p.file_name().is_some_and(|n| n == "_manifest.json"))
            .and_then(|p| p.parent())
            .unwrap_or_else(|| panic!("no checkpoint in {found:?}"))
            .to_path_buf();
        originals.push((chk, q));
    }
    let panics = panic_recorder();
    let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    let mut failures = Vec::new();
    let mut restored = 0;
    for case in 0..n {
        let (chk, q) = &originals[case % originals.len()];
        let copy = base
            .join(format!("case-{case}"))
            .join(chk.file_name().unwrap());
        copy_tree(chk, &copy);
        let mut in_copy = Vec::new();
        files(&copy, &mut in_copy);
        in_copy.sort();
        let victim = &in_copy[rng.below(in_copy.len())];
        let bytes = std::fs::read(victim).unwrap();
        std::fs::write(victim, mutate(&bytes, &mut rng)).unwrap();
        let sql = format!(
            "SET 'execution.checkpointing.dir' = '{}'; SET 'execution.checkpointing.interval' = '1 h';\n\
             SET 'execution.state-recovery.path' = '{}'; SET 'restart-strategy.type' = 'none';\n{table}\n{q}",
            base.join(format!("case-{case}-store")).display(),
            copy.display()
        );
        let mut engine = Engine::new(EngineConfig {
            batch_size: 2,
            ..Default::default()
        });
        let outcome = run_script(&mut engine, &sql);
        restored += usize::from(outcome.is_ok());
        match check(outcome, &panics) {
            Err(e) => failures.push(format!("{} ({}): {e}", victim.display(), q)),
            Ok(()) => {
                let _ = std::fs::remove_dir_all(base.join(format!("case-{case}")));
                let _ = std::fs::remove_dir_all(base.join(format!("case-{case}-store")));
            }
        }
    }
    let _ = std::panic::take_hook();
    eprintln!(
        "{n} damaged checkpoints: {restored} restored and ran, {} refused",
        n - restored
    );
    assert!(restored < n, "no damage was ever noticed");
    assert!(
        failures.is_empty(),
        "{} of {n} damaged checkpoints panicked or failed internally (kept for a look):\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&base);
}
