//! Runs every SQL file in `sql-examples/` on the shipped data, and compares each result
//! with the one derived independently by SQLite (`tests/expected/derive_expected.py`).

#[path = "common/mod.rs"]
mod common;

use std::io::Read;
use std::path::{Path, PathBuf};

use common::{compare_csv_multiset, rows_as_csv};
use sluice::arrow::array::RecordBatch;
use sluice::{Engine, EngineConfig};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run_example(name: &str) -> Vec<RecordBatch> {
    let sql = std::fs::read_to_string(root().join("sql-examples").join(name)).unwrap();
    let mut engine = Engine::new(EngineConfig {
        working_dir: Some(root()),
        ..Default::default()
    });
    engine
        .collect(&sql)
        .unwrap_or_else(|e| panic!("{name} failed: {e}"))
}

fn expected(name: &str) -> String {
    let path = root().join("tests/expected").join(format!("{name}.csv.gz"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text
}

fn assert_matches(name: &str, expected: &str, actual: &str) {
    if let Err(e) = compare_csv_multiset(expected, actual) {
        let short: String = e.chars().take(3000).collect();
        panic!("{name}: result differs from the independent engine's:\n{short}");
    }
}

#[test]
fn flights_hourly_matches_an_independent_group_by() {
    let batches = run_example("flights_hourly.sql");
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(
        rows, 19_486,
        "one row per hour and origin with a scheduled departure"
    );
    assert_matches(
        "flights_hourly",
        &expected("flights_hourly"),
        &rows_as_csv(&batches),
    );
}

#[test]
fn flights_hop_matches_an_independent_group_by() {
    let batches = run_example("flights_hop.sql");
    assert_matches(
        "flights_hop",
        &expected("flights_hop"),
        &rows_as_csv(&batches),
    );
}

#[test]
fn flights_daily_sink_writes_what_an_independent_group_by_computes() {
    let out_dir = root().join("target/sql-examples/daily_delays");
    let _ = std::fs::remove_dir_all(&out_dir);
    let batches = run_example("flights_daily_to_files.sql");
    assert!(batches.is_empty(), "an INSERT returns no rows");
    let mut written = String::new();
    for entry in std::fs::read_dir(&out_dir).unwrap() {
        let path = entry.unwrap().path();
        written.push_str(&std::fs::read_to_string(&path).unwrap());
    }
    let expected = expected("flights_daily_to_files");
    let header = expected.lines().next().unwrap();
    assert_matches(
        "flights_daily_to_files",
        &expected,
        &format!("{header}\n{written}"),
    );
}

/// Every example file runs to completion (those above are checked in detail).
#[test]
fn every_example_runs() {
    let checked = [
        "flights_hourly.sql",
        "flights_hop.sql",
        "flights_daily_to_files.sql",
    ];
    let dir = root().join("sql-examples");
    let mut ran = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path: PathBuf = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.extension().is_some_and(|e| e == "sql") {
            ran += 1;
            if !checked.contains(&name.as_str()) {
                run_example(&name);
            }
        }
    }
    assert!(
        ran >= checked.len(),
        "examples found in {}",
        Path::new(&dir).display()
    );
}
