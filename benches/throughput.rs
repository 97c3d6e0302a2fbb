//! Throughput benchmark (parallelism 1): prints rows/s for
//! (a) a filter into a `blackhole` sink, (b) `TUMBLE` 1 s `COUNT(*)`, `SUM(price)` by key,
//! (c) `HOP` 10 s / 2 s, same aggregates, (d) `sql-examples/flights_hourly.sql` end to
//! end, (e) `SESSION` 5 s by key and (f) `CUMULATE` 1 s / 10 s, each reading CSV. The
//! updating `GROUP BY` jobs (g), (g2), (g3) are `benches/updating.rs`.
//!
//! Input for (a)-(c): 10 M rows of `ts TIMESTAMP(3), key INT, price DOUBLE` over 1,000 s of
//! event time, 10,000 keys, up to 500 ms of disorder, watermark `ts - INTERVAL '1' SECOND`;
//! generated once into `target/bench-data/` (deterministic). `SLUICE_BENCH_ROWS` changes
//! the row count.
//!
//! Checkpoints: (h) is (b) with a checkpoint every second (local directory, exactly-once)
//! against (b) without; (i) the time and bytes of one checkpoint of 1 M keys of window
//! state, and the time to restore it into a new job from the local filesystem.
//!
//! (j) MATCH_RECOGNIZE `A B+ C` WITHIN 10 s partitioned by key over the same input (A: price
//! > 900, B: < 500, C: >= 500), and the state size of its last checkpoint.
//!
//! Joins, each as one source per input at parallelism 1: (k) a stream of 5 M rows
//! `(key INT, price DOUBLE)` (100,000 keys) joined with a table of 100,000 rows (one per
//! key), rows/s = input rows/s, with the state a checkpoint near the end holds (bytes per
//! state row: both inputs are kept, as a regular join must); (l) the same 5 M-row stream
//! LEFT JOINed with an updating view of 100,000 keys (`MAX(price)` per key) that changes
//! once per 50 stream rows (one file, the view's rows interleaved: every 51st row), so
//! stream rows padded before their key's first view row are retracted and joined again.
//!
//! (m) an interval join of two 5 M-row streams on 10,000 keys with ±10 s bounds; (n) an
//! event-time temporal join of a 5 M-row stream with a versioned table of 1 M versions on
//! 100,000 keys.
//!
//! Run: `cargo bench --bench throughput` (release build); `SLUICE_BENCH_ONLY=h,i` runs
//! only the jobs with those letters. Apache Flink 2.3 on the same
//! machine and data: (a) 0.96 M, (b) 0.41 M, (c) 0.28 M, (k) 0.171 M, (l) 0.151 M,
//! (m) 0.589 M, (n) 0.074 M rows/s
//! (`scripts/flink-join-bench` runs (k), (l), (m) and (n) in Flink on the files this writes).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sluice::{Engine, EngineConfig, StatementResult};

#[path = "common/mod.rs"]
mod common;
use common::*;

fn table_ddl(path: &Path) -> String {
    format!(
        "CREATE TABLE bench (ts TIMESTAMP(3), `key` INT, price DOUBLE, \
         WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE sink_filter (ts TIMESTAMP(3), `key` INT, price DOUBLE) WITH ('connector' = 'blackhole');\n\
         CREATE TABLE sink_agg (ws TIMESTAMP(3), `key` INT, n BIGINT, total DOUBLE) WITH ('connector' = 'blackhole');\n\
         CREATE TABLE sink_mr (`key` INT, s TIMESTAMP(3), n BIGINT) WITH ('connector' = 'blackhole');\n",
        path.display()
    )
}

/// (h): TUMBLE with and without a checkpoint every second.
fn checkpoint_overhead(ddl: &str, rows: u64) {
    let query = "INSERT INTO sink_agg SELECT window_start, `key`, COUNT(*), SUM(price) \
                 FROM TABLE(TUMBLE(TABLE bench, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
                 GROUP BY window_start, window_end, `key`;";
    let dir = root().join("target/bench-data/checkpoints");
    let _ = std::fs::remove_dir_all(&dir);
    // Alternate the runs, three times each, and compare medians (the machine is noisy).
    // The job lasts about 1.5 s: 1 s gives one checkpoint, 100 ms about fifteen.
    let intervals = ["1 s", "100 ms"];
    let mut plain = Vec::new();
    let mut with: Vec<Vec<(f64, u64, u64)>> = vec![Vec::new(); intervals.len()];
    let mut last = vec![None; intervals.len()];
    for _ in 0..3 {
        plain.push(run(&format!("{ddl}{query}")));
        for (i, interval) in intervals.iter().enumerate() {
            let r = run_with_metrics(&format!(
                "SET 'execution.checkpointing.interval' = '{interval}';\n\
                 SET 'execution.checkpointing.dir' = '{}';\n{ddl}{query}",
                dir.display()
            ));
            with[i].push((r.0, r.1, r.2));
            last[i] = r.3;
        }
    }
    let median = |v: &mut Vec<(f64, u64, u64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v[v.len() / 2]
    };
    let plain = median(&mut plain);
    report(
        "(h) TUMBLE, no checkpoints (median of 3)",
        rows,
        plain,
        None,
    );
    for (i, interval) in intervals.iter().enumerate() {
        let w = median(&mut with[i]);
        let m = last[i].clone().expect("a job ran");
        report(
            &format!("(h) TUMBLE, checkpoint every {interval} (median of 3)"),
            rows,
            w,
            None,
        );
        println!(
            "    {:+.1}% time; the last run took {} checkpoints, the last {} ms, {} bytes",
            (w.0 / plain.0 - 1.0) * 100.0,
            sluice::JobMetrics::get(&m.checkpoints_completed),
            sluice::JobMetrics::get(&m.last_checkpoint_duration_ms),
            sluice::JobMetrics::get(&m.last_checkpoint_bytes),
        );
    }
}

/// (i): one checkpoint of 1 M keys of window state (an hour-long window, one row per
/// key), and its restore into a new job.
fn checkpoint_and_restore_1m_keys() {
    let keys = 1_000_000u64;
    let data = root().join("target/bench-data/keys_1m.csv");
    if !data.exists() {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&data).expect("create"));
        for k in 0..keys {
            writeln!(
                f,
                "2024-01-01 00:00:{:02}.000,{k},{}.5",
                (k / 20_000) % 60,
                k % 1000
            )
            .expect("write");
        }
    }
    let dir = root().join("target/bench-data/checkpoints-1m");
    let _ = std::fs::remove_dir_all(&dir);
    let script = |extra: &str| {
        format!(
            "SET 'execution.checkpointing.dir' = '{}';\n{extra}\n{}\
             INSERT INTO sink_agg SELECT window_start, `key`, COUNT(*), SUM(price) \
             FROM TABLE(TUMBLE(TABLE bench, DESCRIPTOR(ts), INTERVAL '1' HOUR)) \
             GROUP BY window_start, window_end, `key`;",
            dir.display(),
            table_ddl(&data)
        )
    };
    // Checkpoint after the last row, then stop (fail) before the window fires.
    let first = script(&format!(
        "SET 'sluice.test.checkpoint-after-rows' = '{keys}';\n\
         SET 'sluice.test.failpoints' = 'before-final-commit';\n\
         SET 'restart-strategy.type' = 'none';"
    ));
    let mut engine = Engine::new(EngineConfig {
        working_dir: Some(root()),
        ..Default::default()
    });
    let mut metrics = None;
    for stmt in &sluice::parse_script(&first).expect("parses") {
        if let StatementResult::Insert(mut job) = engine.execute(stmt).expect("runs") {
            while job.blocking_next().is_some() {}
            metrics = Some(std::sync::Arc::clone(&job.metrics));
            job.join();
        }
    }
    let m = metrics.expect("a job ran");
    // The restore: loading and verifying the checkpoint and rebuilding the state happen
    // when the job starts; then the window fires for all 1 M keys.
    let second = script("SET 'execution.state-recovery.path' = 'latest';");
    let mut engine = Engine::new(EngineConfig {
        working_dir: Some(root()),
        ..Default::default()
    });
    let mut restore_secs = 0.0;
    let mut out = 0;
    for stmt in &sluice::parse_script(&second).expect("parses") {
        let started = Instant::now();
        if let StatementResult::Insert(mut job) = engine.execute(stmt).expect("restores") {
            restore_secs = started.elapsed().as_secs_f64();
            while let Some(b) = job.blocking_next() {
                b.expect("the restored job succeeds");
            }
            out = sluice::JobMetrics::get(&job.metrics.rows_out);
            job.join();
        }
    }
    println!(
        "(i) checkpoint of {keys} keys: {} ms, {:.1} MB; restore: {restore_secs:.2} s ({out} rows out after it)",
        sluice::JobMetrics::get(&m.last_checkpoint_duration_ms),
        sluice::JobMetrics::get(&m.last_checkpoint_bytes) as f64 / 1e6,
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test` runs benches with no flag: skip then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rows: u64 = std::env::var("SLUICE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let data = root().join(format!("target/bench-data/bench_{rows}.csv"));
    let t = Instant::now();
    generate(&data, rows).expect("generate bench data");
    eprintln!(
        "input: {} ({:.1} s to prepare)",
        data.display(),
        t.elapsed().as_secs_f64()
    );
    let ddl = table_ddl(&data);

    // (name, query over `bench`, sink table, Flink 2.3's rows/s on this machine)
    let window = |tvf: &str| {
        format!(
            "INSERT INTO sink_agg SELECT window_start, `key`, COUNT(*), SUM(price) \
             FROM TABLE({tvf}) GROUP BY window_start, window_end, `key`;"
        )
    };
    let jobs: Vec<(&str, String, Option<f64>)> = vec![
        (
            "(a) filter -> blackhole",
            "INSERT INTO sink_filter SELECT ts, `key`, price FROM bench WHERE price > 500;".into(),
            Some(0.96),
        ),
        (
            "(b) TUMBLE 1 s COUNT, SUM by key",
            window("TUMBLE(TABLE bench, DESCRIPTOR(ts), INTERVAL '1' SECOND)"),
            Some(0.41),
        ),
        (
            "(c) HOP 10 s / 2 s COUNT, SUM by key",
            window("HOP(TABLE bench, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND)"),
            Some(0.28),
        ),
        (
            "(e) SESSION 5 s by key COUNT, SUM",
            window("SESSION(TABLE bench PARTITION BY `key`, DESCRIPTOR(ts), INTERVAL '5' SECOND)"),
            Some(0.30),
        ),
        (
            "(f) CUMULATE 1 s / 10 s COUNT, SUM by key",
            window(
                "CUMULATE(TABLE bench, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '10' SECOND)",
            ),
            None,
        ),
    ];
    // `SLUICE_BENCH_ONLY=h,i` runs only those jobs.
    let only = std::env::var("SLUICE_BENCH_ONLY").ok();
    let wanted = |letter: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x.trim() == letter))
    };
    for (name, query, flink) in jobs {
        if wanted(&name[1..2]) {
            report(name, rows, run(&format!("{ddl}{query}")), flink);
        }
    }
    if wanted("d") {
        let flights =
            std::fs::read_to_string(root().join("sql-examples/flights_hourly.sql")).unwrap();
        let d = run(&flights);
        report("(d) flights_hourly.sql end to end", 336_776, d, None);
    }
    if wanted("h") {
        checkpoint_overhead(&ddl, rows);
    }
    if wanted("i") {
        checkpoint_and_restore_1m_keys();
    }
    if wanted("j") {
        match_recognize(&ddl, rows);
    }
    if wanted("k") {
        join_with_table();
    }
    if wanted("l") {
        left_join_with_updating_view();
    }
    if wanted("m") {
        interval_join();
    }
    if wanted("n") {
        temporal_join();
    }
}

/// (n): a 5 M-row stream `(key INT, ts TIMESTAMP(3), price DOUBLE)` on 100,000 keys (10 ms
/// of event time per row, up to 500 ms of disorder) joined `FOR SYSTEM_TIME AS OF s.ts`
/// with a versioned table of 1 M versions `(key INT, rate DOUBLE, ts TIMESTAMP(3),
/// PRIMARY KEY (key))`, 10 per key, over the same 50,000 s of event time (50 ms per
/// version, the same disorder); watermarks `ts - 1 s`. Rows/s = input rows (both inputs)
/// per second. `scripts/flink-temporal-bench` runs the same files in Flink 2.3.
fn temporal_join() {
    let dir = root().join("target/bench-data");
    let base_ms: i64 = 1_704_067_200_000;
    let stream = dir.join(format!("temporal_stream_{JOIN_STREAM_ROWS}.csv"));
    let versions = dir.join(format!("temporal_versions_{TEMPORAL_VERSIONS}.csv"));
    generate_lines(&stream, JOIN_STREAM_ROWS, |i, rng| {
        let r = rng.next();
        let ts = base_ms + i as i64 * 10 - (r % 500) as i64;
        format!(
            "{},{},{}",
            (r >> 16) % JOIN_KEYS,
            sluice_format_ts(ts),
            ((r >> 40) % 100_000) as f64 / 100.0
        )
    })
    .expect("temporal stream data");
    generate_lines(&versions, TEMPORAL_VERSIONS, |i, rng| {
        let r = rng.next();
        let ts = base_ms + i as i64 * 50 - (r % 500) as i64;
        // Each key's versions: one every 100,000 rows (5,000 s apart).
        format!(
            "{},{},{}",
            i % JOIN_KEYS,
            ((r >> 40) % 10_000) as f64 / 100.0,
            sluice_format_ts(ts)
        )
    })
    .expect("versioned table data");
    let ddl = format!(
        "CREATE TABLE events (`key` INT, ts TIMESTAMP(3), price DOUBLE, \
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', \
           'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE rates (`key` INT, rate DOUBLE, ts TIMESTAMP(3), \
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND, PRIMARY KEY (`key`) NOT ENFORCED) \
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE sink_temporal (`key` INT, ts TIMESTAMP(3), price DOUBLE, rate DOUBLE) \
           WITH ('connector' = 'blackhole');\n",
        stream.display(),
        versions.display()
    );
    let query = "INSERT INTO sink_temporal SELECT s.`key`, s.ts, s.price, r.rate FROM events s \
        JOIN rates FOR SYSTEM_TIME AS OF s.ts AS r ON s.`key` = r.`key`;";
    report(
        "(n) temporal join, 5 M rows x 1 M versions",
        JOIN_STREAM_ROWS + TEMPORAL_VERSIONS,
        run(&format!("{ddl}{query}")),
        Some(0.074),
    );
}

const TEMPORAL_VERSIONS: u64 = 1_000_000;

/// (m): two streams of 5 M rows `(key INT, ts TIMESTAMP(3), price DOUBLE)` on 10,000 keys
/// (10 ms of event time per row, up to 500 ms of disorder, watermark `ts - 1 s`), joined
/// on the key with `b.ts BETWEEN a.ts - 10 s AND a.ts + 10 s` (about 0.2 partners per
/// row). Rows/s = input rows (both streams) per second.
fn interval_join() {
    let dir = root().join("target/bench-data");
    let make = |name: &str, seed: u64| {
        let path = dir.join(format!("interval_{name}_{JOIN_STREAM_ROWS}.csv"));
        let base_ms: i64 = 1_704_067_200_000;
        let mut rng = Rng(seed);
        generate_lines(&path, JOIN_STREAM_ROWS, |i, _| {
            let r = rng.next();
            let ts = base_ms + i as i64 * 10 - (r % 500) as i64;
            format!(
                "{},{},{}",
                (r >> 16) % 10_000,
                sluice_format_ts(ts),
                ((r >> 40) % 100_000) as f64 / 100.0
            )
        })
        .expect("interval join data");
        path
    };
    let (a, b) = (make("a", 0x51ED_2701), make("b", 0x9E37_79B9));
    let ddl = format!(
        "CREATE TABLE sa (`key` INT, ts TIMESTAMP(3), price DOUBLE, \
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', \
           'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE sb (`key` INT, ts TIMESTAMP(3), price DOUBLE, \
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'filesystem', \
           'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE sink_interval (`key` INT, ats TIMESTAMP(3), bts TIMESTAMP(3)) \
           WITH ('connector' = 'blackhole');\n",
        a.display(),
        b.display()
    );
    let query = "INSERT INTO sink_interval SELECT a.`key`, a.ts, CAST(b.ts AS TIMESTAMP(3)) FROM sa a JOIN sb b \
        ON a.`key` = b.`key` AND b.ts BETWEEN a.ts - INTERVAL '10' SECOND AND a.ts + INTERVAL '10' SECOND;";
    report(
        "(m) interval join +-10 s, 2 x 5 M rows",
        2 * JOIN_STREAM_ROWS,
        run(&format!("{ddl}{query}")),
        Some(0.589),
    );
}

const JOIN_STREAM_ROWS: u64 = 5_000_000;
const JOIN_KEYS: u64 = 100_000;

/// The distinct state rows and bytes of the newest checkpoint under `dir` (its manifest).
fn checkpoint_state(dir: &Path) -> (u64, u64) {
    let mut newest: Option<(u64, PathBuf)> = None;
    for job in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for chk in std::fs::read_dir(job.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = chk.file_name().to_string_lossy().to_string();
            if let Some(id) = name
                .strip_prefix("chk-")
                .and_then(|i| i.parse::<u64>().ok())
            {
                if newest.as_ref().is_none_or(|(n, _)| id > *n) {
                    newest = Some((id, chk.path().join("_manifest.json")));
                }
            }
        }
    }
    let Some((_, manifest)) = newest else {
        return (0, 0);
    };
    let text = std::fs::read_to_string(manifest).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let files = json["files"].as_array().cloned().unwrap_or_default();
    let sum = |field: &str| files.iter().map(|f| f[field].as_u64().unwrap_or(0)).sum();
    (sum("rows"), sum("bytes"))
}

/// (k): see the module docs. Flink 2.3 figure: see the README.
fn join_with_table() {
    let dir = root().join("target/bench-data");
    let stream = dir.join(format!("join_stream_{JOIN_STREAM_ROWS}.csv"));
    let table = dir.join(format!("join_table_{JOIN_KEYS}.csv"));
    generate_lines(&stream, JOIN_STREAM_ROWS, |_, rng| {
        let r = rng.next();
        format!(
            "{},{}",
            (r >> 16) % JOIN_KEYS,
            ((r >> 40) % 100_000) as f64 / 100.0
        )
    })
    .expect("stream data");
    generate_lines(&table, JOIN_KEYS, |i, _| format!("{i},name-{i}")).expect("table data");
    let ddl = format!(
        "CREATE TABLE events (`key` INT, price DOUBLE) WITH ('connector' = 'filesystem', \
           'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE names (`key` INT, name STRING) WITH ('connector' = 'filesystem', \
           'path' = '{}', 'format' = 'csv');\n\
         CREATE TABLE sink_join (`key` INT, price DOUBLE, name STRING) WITH ('connector' = 'blackhole');\n",
        stream.display(),
        table.display()
    );
    let query = "INSERT INTO sink_join SELECT s.`key`, s.price, n.name \
        FROM events s JOIN names n ON s.`key` = n.`key`;";
    let rows = JOIN_STREAM_ROWS + JOIN_KEYS;
    report(
        "(k) stream JOIN table (100 k keys)",
        rows,
        run(&format!("{ddl}{query}")),
        Some(0.171),
    );
    let chk = dir.join("chk-join");
    let _ = std::fs::remove_dir_all(&chk);
    let settings = format!(
        "SET 'execution.checkpointing.dir' = '{}';\n\
         SET 'sluice.test.checkpoint-after-rows' = '{}';\n",
        chk.display(),
        JOIN_STREAM_ROWS - 1000
    );
    run(&format!("{ddl}{settings}{query}"));
    let (state_rows, bytes) = checkpoint_state(&chk);
    eprintln!(
        "(k) checkpoint after {} stream rows: {state_rows} state rows, {:.1} MB, {:.1} bytes per state row",
        JOIN_STREAM_ROWS - 1000,
        bytes as f64 / 1e6,
        bytes as f64 / state_rows.max(1) as f64
    );
    let _ = std::fs::remove_dir_all(&chk);
}

/// (l): see the module docs.
fn left_join_with_updating_view() {
    let dir = root().join("target/bench-data");
    let mixed = dir.join(format!("join_mixed_{JOIN_STREAM_ROWS}.csv"));
    let updates = JOIN_STREAM_ROWS / 50;
    // Every 51st row is a view row (kind 1): the keys in a scattered order, each once.
    generate_lines(&mixed, JOIN_STREAM_ROWS + updates, |i, rng| {
        let r = rng.next();
        let price = ((r >> 40) % 100_000) as f64 / 100.0;
        if i % 51 == 50 {
            let n = i / 51;
            format!("1,{},{price}", (n * 7919) % JOIN_KEYS)
        } else {
            format!("0,{},{price}", (r >> 16) % JOIN_KEYS)
        }
    })
    .expect("mixed data");
    let ddl = format!(
        "CREATE TABLE mixed (kind INT, `key` INT, price DOUBLE) WITH ('connector' = 'filesystem', \
           'path' = '{}', 'format' = 'csv');\n\
         CREATE VIEW latest AS SELECT `key`, MAX(price) AS top FROM mixed WHERE kind = 1 GROUP BY `key`;\n\
         CREATE TABLE sink_left (`key` INT, price DOUBLE, top DOUBLE) WITH ('connector' = 'blackhole');\n",
        mixed.display()
    );
    let query = "INSERT INTO sink_left SELECT s.`key`, s.price, l.top \
        FROM mixed s LEFT JOIN latest l ON s.`key` = l.`key` WHERE s.kind = 0;";
    report(
        "(l) stream LEFT JOIN updating view",
        JOIN_STREAM_ROWS + updates,
        run(&format!("{ddl}{query}")),
        Some(0.151),
    );
}

/// (j) MATCH_RECOGNIZE `A B+ C` WITHIN 10 s per key (10,000 keys; one row per key per
/// second of event time): rows/s, matches, and the state a checkpoint every 2 s holds (the
/// last one, near the end of the input).
fn match_recognize(ddl: &str, rows: u64) {
    let query = "INSERT INTO sink_mr SELECT `key`, s, n FROM bench MATCH_RECOGNIZE ( \
        PARTITION BY `key` ORDER BY ts \
        MEASURES FIRST(A.ts) AS s, COUNT(B.*) AS n \
        PATTERN (A B+ C) WITHIN INTERVAL '10' SECOND \
        DEFINE A AS price > 900, B AS price < 500, C AS price >= 500);";
    let (secs, out, late) = run(&format!("{ddl}{query}"));
    report(
        "(j) MATCH_RECOGNIZE A B+ C WITHIN 10 s by key",
        rows,
        (secs, out, late),
        None,
    );
    let dir = root().join("target/bench-data/chk-mr");
    let _ = std::fs::remove_dir_all(&dir);
    let settings = format!(
        "SET 'execution.checkpointing.interval' = '2 s';\n\
         SET 'execution.checkpointing.dir' = '{}';\n",
        dir.display()
    );
    let (secs, _, _, metrics) = run_with_metrics(&format!("{ddl}{settings}{query}"));
    let m = metrics.expect("metrics");
    eprintln!(
        "(j) with a checkpoint every 2 s: {:.2} M rows/s; last checkpoint {} ({} of {}): {:.1} MB of state",
        rows as f64 / secs / 1e6,
        sluice::JobMetrics::get(&m.last_checkpoint_id),
        sluice::JobMetrics::get(&m.checkpoints_completed),
        sluice::JobMetrics::get(&m.checkpoints_completed),
        sluice::JobMetrics::get(&m.last_checkpoint_bytes) as f64 / 1e6,
    );
    let _ = std::fs::remove_dir_all(&dir);
}
