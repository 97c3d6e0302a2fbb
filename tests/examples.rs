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

/// Embedding: the application pushes rows through a channel table and reads windowed
/// results back as an async stream of Arrow batches. Rows: uid `u<i % 3>` at second `i`
/// for i in 0..30, so each 10 s window has 10 rows, 3 or 4 per uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedding_push_rows_and_read_windows() {
    use sluice::arrow::array::{StringArray, TimestampMillisecondArray};
    use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;
    let mut engine = Engine::new(EngineConfig::default());
    engine
        .execute_script(
            "CREATE TABLE clicks (uid STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) \
             WITH ('connector' = 'channel')",
        )
        .unwrap();
    let clicks = engine.channel_source("clicks");
    let stmt = sluice::parse_script(
        "SELECT uid, window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE clicks, \
         DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY uid, window_start, window_end",
    )
    .unwrap();
    let sluice::StatementResult::Query(mut job) = engine.execute(&stmt[0]).unwrap() else {
        panic!("a query")
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("uid", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let pusher = std::thread::spawn(move || {
        for chunk in (0..30i64).collect::<Vec<_>>().chunks(7) {
            let uids: Vec<String> = chunk.iter().map(|i| format!("u{}", i % 3)).collect();
            let ts: Vec<i64> = chunk.iter().map(|i| i * 1000).collect();
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(StringArray::from(uids)),
                    Arc::new(TimestampMillisecondArray::from(ts)),
                ],
            )
            .unwrap();
            clicks.send(batch).unwrap();
        }
        // Dropping the sender ends the input.
    });
    let mut rows = Vec::new();
    while let Some(batch) = job.next().await {
        rows.extend(
            common::slt_rows(&[batch.unwrap()])
                .into_iter()
                .map(|r| r.join(",")),
        );
    }
    pusher.join().unwrap();
    rows.sort();
    let mut expected = Vec::new();
    for w in 0..3i64 {
        for u in 0..3i64 {
            let n = (w * 10..w * 10 + 10).filter(|i| i % 3 == u).count();
            expected.push(format!(
                "u{u},{},{n}",
                sluice::format_timestamp_ms(w * 10_000)
            ));
        }
    }
    expected.sort();
    assert_eq!(rows, expected);
    // A channel feeds one job: a second job on the table has no channel.
    let again = engine.execute(&stmt[0]);
    assert!(
        matches!(&again, Err(e) if e.to_string().contains("no channel is open")),
        "{:?}",
        again.err()
    );
}
