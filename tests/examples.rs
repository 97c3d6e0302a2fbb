//! Runs every SQL file in `sql-examples/` on the shipped data, and compares each result
//! with the one derived independently by SQLite (`tests/expected/derive_expected.py`).

#[path = "common/mod.rs"]
mod common;

use std::io::Read;
use std::path::{Path, PathBuf};

use common::{compare_csv_multiset, rows_as_csv};
use sluice::arrow::array::RecordBatch;
use sluice::{Engine, EngineConfig, JobMetrics};
use std::time::Duration;

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

/// MATCH_RECOGNIZE over the flights: every late streak of an aircraft, as a plain Python
/// scan of the same file finds them (`tests/expected/derive_expected.py`).
/// A window Top-N over a day's departures per origin (SQLite's ROW_NUMBER over the
/// same rows, ties in file order).
#[test]
fn flights_most_delayed_match_an_independent_window_function() {
    let batches = run_example("flights_most_delayed.sql");
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 365 * 3 * 3, "three per day and origin, appended once");
    assert_matches(
        "flights_most_delayed",
        &expected("flights_most_delayed"),
        &rows_as_csv(&batches),
    );
}

#[test]
fn flights_late_streaks_match_an_independent_scan() {
    let batches = run_example("flights_late_streaks.sql");
    assert_matches(
        "flights_late_streaks",
        &expected("flights_late_streaks"),
        &rows_as_csv(&batches),
    );
}

/// Runs an updating example (a GROUP BY over a join or a subquery) and folds its
/// changelog (`op` column: `+I`/`+U` add a row, `-U`/`-D` remove one) into the final table.
fn final_table(name: &str) -> Vec<RecordBatch> {
    let batches = run_example(name);
    assert_eq!(
        batches[0].schema().field(0).name(),
        "op",
        "{name}: an updating result"
    );
    sluice::format::fold_changelog(&batches)
        .unwrap()
        .into_iter()
        .collect()
}

/// A LEFT JOIN of the flights with planes, then an updating GROUP BY: late departures
/// (over 60 minutes) per manufacturer, a NULL manufacturer for flights without a plane row.
#[test]
fn flights_late_by_manufacturer_matches_an_independent_join() {
    let table = final_table("flights_late_by_manufacturer.sql");
    let rows: usize = table.iter().map(|b| b.num_rows()).sum();
    assert_eq!(
        rows, 32,
        "31 manufacturers and the NULL one (3,391 late departures of aircraft not in planes)"
    );
    assert_matches(
        "flights_late_by_manufacturer",
        &expected("flights_late_by_manufacturer"),
        &rows_as_csv(&table),
    );
}

/// An inner join of the flights with airlines on carrier, grouped by the airline's name.
#[test]
fn flights_delay_by_airline_matches_an_independent_join() {
    let table = final_table("flights_delay_by_airline.sql");
    let rows: usize = table.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 16, "one row per airline");
    assert_matches(
        "flights_delay_by_airline",
        &expected("flights_delay_by_airline"),
        &rows_as_csv(&table),
    );
}

/// `dest NOT IN (SELECT faa FROM airports)`: a null-aware anti join, then a GROUP BY.
#[test]
fn flights_unknown_destinations_match_an_independent_anti_join() {
    let table = final_table("flights_unknown_destinations.sql");
    let rows: usize = table.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 4, "BQN, PSE, SJU and STT are not in airports");
    assert_matches(
        "flights_unknown_destinations",
        &expected("flights_unknown_destinations"),
        &rows_as_csv(&table),
    );
}

/// An interval join: each departure with the weather observations at its origin from one
/// hour before its scheduled departure up to it (both ends included; the weather's UTC
/// times converted to New York time in a computed column), then an updating GROUP BY per
/// origin and month. The expected table converts the times with Python's time zone database.
#[test]
fn flights_weather_before_departure_matches_an_independent_interval_join() {
    let table = final_table("flights_weather_before_departure.sql");
    let rows: usize = table.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 36, "one row per origin (3) and month (12)");
    assert_matches(
        "flights_weather_before_departure",
        &expected("flights_weather_before_departure"),
        &rows_as_csv(&table),
    );
}

/// An event-time temporal join: each departure with the weather observation at its origin
/// valid at its scheduled departure (the weather a versioned table by origin), then an
/// updating GROUP BY per origin and month. The expected table picks, per flight, the latest
/// observation at or before the departure with SQLite (local times from Python's time zone
/// database).
#[test]
fn flights_weather_at_departure_matches_an_independent_lookup() {
    let table = final_table("flights_weather_at_departure.sql");
    let rows: usize = table.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 36, "one row per origin (3) and month (12)");
    assert_matches(
        "flights_weather_at_departure",
        &expected("flights_weather_at_departure"),
        &rows_as_csv(&table),
    );
}

/// Parses `YYYY-MM-DD HH:MM:SS` as seconds since the epoch (UTC) for the checks below.
fn seconds(ts: &str) -> i64 {
    let d = |a: usize, b: usize| ts[a..b].parse::<i64>().unwrap();
    let (y, m, day) = (d(0, 4), d(5, 7), d(8, 10));
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + d(11, 13) * 3600 + d(14, 16) * 60 + d(17, 19)
}

/// MATCH_RECOGNIZE over the weather: every warning satisfies the pattern's conditions
/// (three or more falls, a gust of 35 mph or more, less than six hours from the first
/// fall to the gust), each airport's warnings do not overlap (skip past last row), and
/// the January 20 front (found by reading the data: pressure at EWR falls from 14:00 to
/// 17:00 UTC, gust 37.98 mph at 19:00) is among them.
#[test]
fn weather_storm_warnings_satisfy_the_pattern() {
    let csv = rows_as_csv(&run_example("weather_storm_warnings.sql"));
    let mut rows: Vec<Vec<String>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    assert!(rows.len() >= 10, "{csv}");
    rows.sort_by(|a, b| (&a[0], &a[1]).cmp(&(&b[0], &b[1])));
    for w in rows.windows(2) {
        if w[0][0] == w[1][0] {
            assert!(w[0][4] < w[1][1], "overlapping warnings: {w:?}");
        }
    }
    for r in &rows {
        let falls: i64 = r[2].parse().unwrap();
        let drop: f64 = r[3].parse().unwrap();
        let gust: f64 = r[5].parse().unwrap();
        let span = seconds(&r[4]) - seconds(&r[1]);
        assert!(falls >= 3 && drop > 0.0 && gust >= 35.0, "{r:?}");
        assert!(span > 0 && span < 6 * 3600, "{r:?}");
    }
    assert!(
        rows.iter().any(|r| r[0] == "EWR"
            && r[1] == "2013-01-20 14:00:00"
            && r[4] == "2013-01-20 19:00:00"),
        "{csv}"
    );
}

/// MATCH_RECOGNIZE over generated sensor readings: every alert is a reading above 50 °C
/// followed by smoke from the same sensor less than ten minutes later.
#[test]
fn sensor_alerts_satisfy_the_pattern() {
    let csv = rows_as_csv(&run_example("sensor_alerts.sql"));
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert!(rows.len() > 50, "{csv}");
    for r in &rows {
        let temp: f64 = r[2].parse().unwrap();
        let span = seconds(r[3]) - seconds(r[1]);
        assert!(temp > 50.0, "{r:?}");
        assert!(span > 0 && span < 600, "{r:?}");
        // Readings of one sensor are 20 s apart.
        assert_eq!(span % 20, 0, "{r:?}");
    }
}

/// Every example file runs to completion (those above are checked in detail).
#[test]
fn every_example_runs() {
    let checked = [
        "flights_hourly.sql",
        "flights_hop.sql",
        "flights_daily_to_files.sql",
        "flights_late_streaks.sql",
        "flights_late_by_manufacturer.sql",
        "flights_delay_by_airline.sql",
        "flights_unknown_destinations.sql",
        "flights_weather_before_departure.sql",
        "flights_weather_at_departure.sql",
        "weather_storm_warnings.sql",
        "sensor_alerts.sql",
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

/// Rows of the embedding tests: uid `u<i % 3>` at second `i`.
fn click_batch(range: std::ops::Range<i64>) -> RecordBatch {
    use sluice::arrow::array::{StringArray, TimestampMillisecondArray};
    use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;
    let schema = Arc::new(Schema::new(vec![
        Field::new("uid", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let uids: Vec<String> = range.clone().map(|i| format!("u{}", i % 3)).collect();
    let ts: Vec<i64> = range.map(|i| i * 1000).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(uids)),
            Arc::new(TimestampMillisecondArray::from(ts)),
        ],
    )
    .unwrap()
}

const CLICKS_CHANNEL: &str = "CREATE TABLE clicks (uid STRING, ts TIMESTAMP(3), \
    WATERMARK FOR ts AS ts) WITH ('connector' = 'channel')";
const CLICK_WINDOWS: &str = "SELECT uid, window_start, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE \
    clicks, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY uid, window_start, window_end";

/// An engine that checkpoints into `dir` (interval 1 h: checkpoints are taken on demand).
fn checkpointing_engine(dir: &std::path::Path) -> Engine {
    let mut engine = Engine::new(EngineConfig::default());
    engine
        .set("execution.checkpointing.interval", "1 h")
        .unwrap();
    engine
        .set("execution.checkpointing.dir", &dir.display().to_string())
        .unwrap();
    engine
}

/// Reads a job's output through its `Stream` implementation until `until` rows came or
/// the job ended.
async fn read_rows(job: &mut sluice::RunningJob, until: usize) -> Vec<String> {
    use sluice::Stream;
    let mut rows = Vec::new();
    while rows.len() < until {
        let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *job).poll_next(cx)).await;
        let Some(batch) = next else { break };
        rows.extend(
            common::slt_rows(&[batch.unwrap()])
                .into_iter()
                .map(|r| r.join(",")),
        );
    }
    rows
}

/// Waits (up to 120 s: a debug build on a busy machine) until the job's source watermark
/// reaches `ms`.
async fn wait_watermark(job: &sluice::RunningJob, ms: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while job
        .metrics
        .watermark_ms
        .load(std::sync::atomic::Ordering::SeqCst)
        < ms
    {
        assert!(
            std::time::Instant::now() < deadline,
            "watermark {ms} not reached"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Embedding: a watermark the application pushes fires windows while no row follows
/// (rows at seconds 0..5, then watermark 9.999 s: window [0, 10) fires, the channel
/// still open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedding_pushed_watermark_fires_windows() {
    let mut engine = Engine::new(EngineConfig::default());
    engine.execute_script(CLICKS_CHANNEL).unwrap();
    let clicks = engine.channel_source("clicks");
    let sluice::StatementResult::Query(mut job) = engine.sql(CLICK_WINDOWS).unwrap() else {
        panic!("a query")
    };
    let sender = clicks.clone();
    tokio::task::spawn_blocking(move || {
        sender.send(click_batch(0..5)).unwrap();
        sender.send_watermark(9_999).unwrap();
    })
    .await
    .unwrap();
    let mut rows = read_rows(&mut job, 3).await;
    rows.sort();
    // 0..5: u0 at 0, 3; u1 at 1, 4; u2 at 2.
    assert_eq!(
        rows,
        [
            "u0,2024-01-01 00:00:00,2",
            "u1,2024-01-01 00:00:00,2",
            "u2,2024-01-01 00:00:00,1"
        ]
        .map(|r| r.replace("2024-01-01", "1970-01-01"))
    );
    drop(clicks);
    assert!(read_rows(&mut job, usize::MAX).await.is_empty());
}

/// Embedding, end to end across a stop: the job stops with a checkpoint, a new `Engine`
/// restarts from it, the application pushes the rest from `resume_after()`, and the
/// results of both runs are exactly those of one run without the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedding_stop_with_checkpoint_and_continue_in_a_new_engine() {
    let dir = std::env::temp_dir().join(format!("sluice-embed-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let start = |restore: Option<&str>| {
        let mut engine = checkpointing_engine(&dir);
        engine.execute_script(CLICKS_CHANNEL).unwrap();
        if let Some(path) = restore {
            engine.set("execution.state-recovery.path", path).unwrap();
        }
        let clicks = engine.channel_source("clicks");
        let sluice::StatementResult::Query(job) = engine.sql(CLICK_WINDOWS).unwrap() else {
            panic!("a query")
        };
        (engine, clicks, job)
    };

    // Run 1: rows for seconds 0..25 (watermark 24 s: windows [0, 10) and [10, 20) fire,
    // 6 rows, released when the checkpoint completes), then stop with a checkpoint.
    let (_e1, clicks, mut job) = start(None);
    let sender = clicks.clone();
    tokio::task::spawn_blocking(move || {
        sender.send(click_batch(0..12)).unwrap();
        sender.send(click_batch(12..25)).unwrap();
    })
    .await
    .unwrap();
    wait_watermark(&job, 24_000).await;
    let handle = job.handle();
    let savepoint =
        tokio::task::spawn_blocking(move || handle.stop_with_checkpoint(Duration::from_secs(120)))
            .await
            .unwrap()
            .unwrap();
    let first = read_rows(&mut job, usize::MAX).await;
    assert_eq!(first.len(), 6, "{first:?}");
    assert_eq!(JobMetrics::get(&job.metrics.rows_in), 25);
    drop(clicks);

    // Run 2, in a new engine: resumes after the 25 rows the checkpoint had read.
    let (_e2, clicks, mut job) = start(Some(&savepoint));
    assert_eq!(clicks.resume_after(), 25);
    tokio::task::spawn_blocking(move || {
        let from = clicks.resume_after() as i64;
        clicks.send(click_batch(from..40)).unwrap();
    })
    .await
    .unwrap();
    let second = read_rows(&mut job, usize::MAX).await;

    // One run without a stop.
    let (_e3, clicks, mut job) = start(None);
    tokio::task::spawn_blocking(move || clicks.send(click_batch(0..40)).unwrap())
        .await
        .unwrap();
    let mut whole = read_rows(&mut job, usize::MAX).await;

    let mut both = first.clone();
    both.extend(second);
    both.sort();
    whole.sort();
    assert_eq!(whole.len(), 12, "4 windows x 3 uids: {whole:?}");
    assert_eq!(both, whole);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Embedding: `INSERT INTO` a `channel` table calls the application's callback with the
/// rows (with the `op` column for an updating query).
#[test]
fn embedding_sink_callback_receives_rows() {
    use std::sync::{Arc, Mutex};
    let mut engine = Engine::new(EngineConfig::default());
    engine.execute_script(CLICKS_CHANNEL).unwrap();
    engine
        .execute_script(
            "CREATE TABLE per_uid (uid STRING, n BIGINT) WITH ('connector' = 'channel')",
        )
        .unwrap();
    let received: Arc<Mutex<Vec<RecordBatch>>> = Arc::default();
    let sink = Arc::clone(&received);
    engine.sink_callback("per_uid", move |batch| {
        sink.lock().unwrap().push(batch.clone());
        Ok(())
    });
    let clicks = engine.channel_source("clicks");
    let sluice::StatementResult::Insert(job) = engine
        .sql("INSERT INTO per_uid SELECT uid, COUNT(*) FROM clicks GROUP BY uid")
        .unwrap()
    else {
        panic!("an insert")
    };
    clicks.send(click_batch(0..10)).unwrap();
    drop(clicks);
    sluice::drain(job).unwrap();
    let batches = received.lock().unwrap().clone();
    assert_eq!(batches[0].schema().field(0).name(), "op");
    let table = sluice::format::fold_changelog(&batches).unwrap().unwrap();
    let mut rows: Vec<String> = common::slt_rows(&[table])
        .into_iter()
        .map(|r| r.join(","))
        .collect();
    rows.sort();
    // i in 0..10: u0 at 0, 3, 6, 9; u1 at 1, 4, 7; u2 at 2, 5, 8.
    assert_eq!(rows, ["u0,4", "u1,3", "u2,3"]);

    // Without a callback the INSERT fails before it runs.
    let mut other = Engine::new(EngineConfig::default());
    other.execute_script(CLICKS_CHANNEL).unwrap();
    other
        .execute_script("CREATE TABLE t2 (uid STRING) WITH ('connector' = 'channel')")
        .unwrap();
    let _c = other.channel_source("clicks");
    let err = other
        .sql("INSERT INTO t2 SELECT uid FROM clicks")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("no callback receives its rows"), "{err}");
}

/// Embedding: two running jobs of one query would number checkpoints in the same
/// directory and overwrite each other's, so the second is refused while the first runs;
/// with its own `'pipeline.name'` it has its own directory, and once the first stops the
/// query can start again.
#[test]
fn two_running_jobs_of_one_query_never_share_a_checkpoint_directory() {
    let dir = std::env::temp_dir().join(format!("sluice-embed-claim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut engine = checkpointing_engine(&dir);
    engine
        .execute_script(
            "CREATE TABLE ticks (n BIGINT) WITH ('connector' = 'datagen', \
             'rows-per-second' = '5', 'fields.n.kind' = 'sequence', 'fields.n.start' = '1', \
             'fields.n.end' = '1000000');",
        )
        .unwrap();
    let query = "SELECT n FROM ticks WHERE n > 0";
    let sluice::StatementResult::Query(first) = engine.sql(query).unwrap() else {
        panic!("a query")
    };
    let err = engine
        .sql(query)
        .err()
        .expect("refused while the first runs");
    assert!(
        err.to_string().contains("already checkpoints into"),
        "{err}"
    );
    engine.set("pipeline.name", "second").unwrap();
    let sluice::StatementResult::Query(second) = engine.sql(query).unwrap() else {
        panic!("a query")
    };
    first.handle().stop();
    first.join();
    engine.execute_script("RESET 'pipeline.name';").unwrap();
    let sluice::StatementResult::Query(again) = engine.sql(query).unwrap() else {
        panic!("the query starts again once the first stopped")
    };
    for job in [second, again] {
        job.handle().stop();
        job.join();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A processing-time OVER window (`pt AS PROCTIME()`, `RANGE 1 s`) on a manual clock: each
/// batch is read at the clock's time; each row covers the rows that arrived before it within
/// the interval (rows read together share the time but are not peers, as in Flink's
/// `ProcTimeRangeBoundedPrecedingFunction`). Batches at 0 ms (v 1, 2), 600 ms (4), 1,500 ms
/// (8), 2,700 ms (16): sums 1, 3, 7 (0..600), 12 (500..1,500), 16 (1,700..2,700).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processing_time_over_window_on_a_manual_clock() {
    use sluice::arrow::array::{Int32Array, StringArray};
    use sluice::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let clock = sluice::ProcessingClock::manual(1_000_000);
    let mut engine = Engine::new(EngineConfig {
        clock: clock.clone(),
        ..Default::default()
    });
    engine
        .execute_script(
            "CREATE TABLE ev (k STRING, v INT, pt AS PROCTIME()) WITH ('connector' = 'channel')",
        )
        .unwrap();
    let ev = engine.channel_source("ev");
    let sluice::StatementResult::Query(mut job) = engine
        .sql(
            "SELECT k, v, SUM(v) OVER (PARTITION BY k ORDER BY pt RANGE BETWEEN \
             INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) FROM ev",
        )
        .unwrap()
    else {
        panic!("a query")
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int32, true),
    ]));
    let batch = |vs: &[i32]| {
        RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(vec!["a"; vs.len()])),
                Arc::new(Int32Array::from(vs.to_vec())),
            ],
        )
        .unwrap()
    };
    let mut rows = Vec::new();
    for (at_ms, vs) in [
        (0, vec![1, 2]),
        (600, vec![4]),
        (1_500, vec![8]),
        (2_700, vec![16]),
    ] {
        clock.set_ms(1_000_000 + at_ms);
        let sender = ev.clone();
        let b = batch(&vs);
        tokio::task::spawn_blocking(move || sender.send(b).unwrap())
            .await
            .unwrap();
        // The rows come out at once (nothing waits for a watermark): read them before the
        // clock moves on.
        rows.extend(read_rows(&mut job, vs.len()).await);
    }
    drop(ev);
    assert_eq!(rows, ["a,1,1", "a,2,3", "a,4,7", "a,8,12", "a,16,16"]);
}

/// Waits until the job's stateful operators hold `rows` state rows in all.
async fn wait_state_rows(job: &sluice::RunningJob, rows: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let now: u64 = job.metrics.state_rows().values().map(|(n, _)| n).sum();
        if now == rows {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "state rows {now}, waiting for {rows}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// A TUMBLE window on a processing-time attribute, fired by the processing-time clock (a
/// manual one, so the result is exact): rows fall into the window of the clock's time when
/// the aggregate takes them in, and a window's row leaves when the clock reaches its end -
/// 1 ms, with no watermark; the end of the input fires the windows still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processing_time_tumble_window_on_a_manual_clock() {
    use sluice::arrow::array::{Int32Array, StringArray};
    use sluice::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let clock = sluice::ProcessingClock::manual(1_000_000);
    let mut engine = Engine::new(EngineConfig {
        clock: clock.clone(),
        ..Default::default()
    });
    engine
        .execute_script(
            "SET 'table.local-time-zone' = 'UTC';\n\
             CREATE TABLE ev (k STRING, v INT, pt AS PROCTIME()) WITH ('connector' = 'channel')",
        )
        .unwrap();
    let ev = engine.channel_source("ev");
    let sluice::StatementResult::Query(mut job) = engine
        .sql(
            "SELECT window_start, window_end, k, COUNT(*), SUM(v) \
             FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(pt), INTERVAL '1' SECOND)) \
             GROUP BY window_start, window_end, k",
        )
        .unwrap()
    else {
        panic!("a query")
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Utf8, true),
        Field::new("v", DataType::Int32, true),
    ]));
    let send = |rows: &[(&str, i32)]| {
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        let sender = ev.clone();
        tokio::task::spawn_blocking(move || sender.send(b).unwrap())
    };
    // 1,000,000 ms is 1970-01-01 00:16:40 UTC: the window [00:16:40, 00:16:41).
    clock.set_ms(1_000_100);
    send(&[("a", 1), ("a", 2), ("b", 4)]).await.unwrap();
    wait_state_rows(&job, 2).await;
    clock.set_ms(1_000_900);
    send(&[("c", 8)]).await.unwrap();
    wait_state_rows(&job, 3).await;
    // The clock reaches the window's end - 1 ms: it fires.
    clock.set_ms(1_000_999);
    let mut first = read_rows(&mut job, 3).await;
    first.sort();
    assert_eq!(
        first,
        [
            "1970-01-01 00:16:40,1970-01-01 00:16:41,a,2,3",
            "1970-01-01 00:16:40,1970-01-01 00:16:41,b,1,4",
            "1970-01-01 00:16:40,1970-01-01 00:16:41,c,1,8",
        ]
    );
    wait_state_rows(&job, 0).await;
    // A row taken in the millisecond its window fired counts in the next window (the
    // fired one is not emitted twice).
    send(&[("d", 32)]).await.unwrap();
    wait_state_rows(&job, 1).await;
    clock.set_ms(1_001_500);
    send(&[("a", 16)]).await.unwrap();
    wait_state_rows(&job, 2).await;
    // The end of the input fires the open window.
    drop(ev);
    let mut last = read_rows(&mut job, 2).await;
    last.sort();
    assert_eq!(
        last,
        [
            "1970-01-01 00:16:41,1970-01-01 00:16:42,a,1,16",
            "1970-01-01 00:16:41,1970-01-01 00:16:42,d,1,32"
        ]
    );
}

/// Lookup joins see the looked-up file as Flink's cache options say, on a manual clock:
/// without a cache (`'NONE'`) every row sees the file as it is; a partial cache keeps a
/// key's rows until `'lookup.partial-cache.expire-after-write'` passes; a full cache keeps
/// the whole table until `'lookup.full-cache.periodic-reload.interval'` passes. The file
/// changes (Ann becomes Anna) after the first row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_join_caches_follow_the_clock() {
    use sluice::arrow::array::Int32Array;
    use sluice::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let dir = std::env::temp_dir().join(format!("sluice-lookup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("names.csv"), "1,Ann\n2,Bob\n").unwrap();
    let clock = sluice::ProcessingClock::manual(1_000_000);
    let mut engine = Engine::new(EngineConfig {
        clock: clock.clone(),
        working_dir: Some(dir.clone()),
        ..Default::default()
    });
    let dim = |name: &str, cache: &str| {
        format!(
            "CREATE TABLE {name} (k INT, name STRING) WITH ('connector' = 'filesystem', \
             'path' = 'names.csv', 'format' = 'csv'{cache});\n"
        )
    };
    engine
        .execute_script(&format!(
            "CREATE TABLE ev (k INT, pt AS PROCTIME()) WITH ('connector' = 'channel');\n{}{}{}",
            dim("now", ""),
            dim(
                "partial",
                ", 'lookup.cache' = 'PARTIAL', 'lookup.partial-cache.expire-after-write' = '10 s'"
            ),
            dim(
                "full",
                ", 'lookup.cache' = 'FULL', 'lookup.full-cache.periodic-reload.interval' = '1 min'"
            ),
        ))
        .unwrap();
    let ev = engine.channel_source("ev");
    let sluice::StatementResult::Query(mut job) = engine
        .sql(
            "SELECT e.k, n.name, p.name, f.name FROM ev e \
             LEFT JOIN now FOR SYSTEM_TIME AS OF e.pt AS n ON e.k = n.k \
             LEFT JOIN partial FOR SYSTEM_TIME AS OF e.pt AS p ON e.k = p.k \
             LEFT JOIN full FOR SYSTEM_TIME AS OF e.pt AS f ON e.k = f.k",
        )
        .unwrap()
    else {
        panic!("a query")
    };
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, true)]));
    let mut rows = Vec::new();
    for (at_s, k) in [(0, 1), (1, 1), (11, 1), (61, 1), (62, 3)] {
        clock.set_ms(1_000_000 + at_s * 1000);
        let b = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int32Array::from(vec![k]))],
        )
        .unwrap();
        let sender = ev.clone();
        tokio::task::spawn_blocking(move || sender.send(b).unwrap())
            .await
            .unwrap();
        rows.extend(read_rows(&mut job, 1).await);
        if at_s == 0 {
            // A new file (another length) in place of the old one.
            let tmp = dir.join(".names.tmp");
            std::fs::write(&tmp, "1,Anna\n2,Bob\n").unwrap();
            std::fs::rename(&tmp, dir.join("names.csv")).unwrap();
        }
    }
    drop(ev);
    assert_eq!(
        rows,
        [
            "1,Ann,Ann,Ann",
            "1,Anna,Ann,Ann",
            "1,Anna,Anna,Ann",
            "1,Anna,Anna,Anna",
            "3,NULL,NULL,NULL"
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
