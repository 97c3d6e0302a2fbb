//! Updating-aggregate benchmark (issue 19), parallelism 1, each job reading CSV into a
//! `blackhole` sink (the changelog is produced and dropped), rows/s = input rows per
//! second, with the process's peak resident memory during the job:
//! (g) `COUNT(*)`, `SUM(price)` by key over the throughput benchmark's input (10 M rows,
//! 10,000 keys);
//! (g2) the same by key over 10 M rows with 1 M keys (every key seen about ten times);
//! (g3) an aggregate over an updating aggregate: how many keys have each row count
//! (`SELECT n, COUNT(*) ... GROUP BY n` over `COUNT(*)` by key; every input row retracts
//! its key from one count and adds it to the next), over (g)'s input.
//!
//! Run: `cargo bench --bench updating` (release build); `SLUICE_BENCH_ROWS` changes the
//! row count, `SLUICE_BENCH_ONLY=g2,g3` runs only those jobs. The same queries are written
//! for Flink to `target/bench-data/flink-updating/<job>.sql`; `scripts/flink-bench-sql
//! target/bench-data/flink-updating` runs each in Apache Flink 2.3 with and without
//! Flink's mini-batch settings, and the better figure on this machine is printed beside
//! Sluice's (see `FLINK`).

use std::path::Path;

#[path = "common/mod.rs"]
mod common;
use common::*;

/// Apache Flink 2.3's rows/s (M) and peak RSS (MB) on this machine, same files,
/// parallelism 1 (`scripts/flink-bench-sql`, the better of with and without mini-batch).
const FLINK: &[(&str, f64, u64)] = &[("g", 0.542, 2336), ("g2", 0.267, 4347), ("g3", 0.541, 2088)];

fn ddl(name: &str, path: &Path) -> String {
    format!(
        "CREATE TABLE {name} (ts TIMESTAMP(3), `key` INT, price DOUBLE, \
         WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) \
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n",
        path.display()
    )
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rows: u64 = std::env::var("SLUICE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let data = root().join(format!("target/bench-data/bench_{rows}.csv"));
    let wide = root().join(format!("target/bench-data/dedup_{rows}.csv"));
    generate(&data, rows).expect("bench data");
    generate_1m_keys(&wide, rows).expect("1 M-key data");
    let sink2 = "CREATE TABLE sink2 (`key` INT, n BIGINT, total DOUBLE) WITH ('connector' = 'blackhole');\n";
    let sink_hist =
        "CREATE TABLE sink_hist (n BIGINT, `keys` BIGINT) WITH ('connector' = 'blackhole');\n";
    let count_sum =
        |table: &str| format!("SELECT `key`, COUNT(*), SUM(price) FROM {table} GROUP BY `key`");
    let histogram = "SELECT n, COUNT(*) FROM (SELECT `key`, COUNT(*) AS n FROM bench \
                     GROUP BY `key`) GROUP BY n"
        .to_string();
    // (job, name, table DDL, sink DDL and name, query)
    let jobs = [
        (
            "g",
            "(g) COUNT, SUM by key, 10 k keys",
            ddl("bench", &data),
            sink2,
            "sink2",
            count_sum("bench"),
        ),
        (
            "g2",
            "(g2) COUNT, SUM by key, 1 M keys",
            ddl("wide", &wide),
            sink2,
            "sink2",
            count_sum("wide"),
        ),
        (
            "g3",
            "(g3) keys per row count (aggregate of (g))",
            ddl("bench", &data),
            sink_hist,
            "sink_hist",
            histogram,
        ),
    ];
    let only = std::env::var("SLUICE_BENCH_ONLY").ok();
    let wanted = |job: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x.trim() == job))
    };
    let flink_dir = root().join("target/bench-data/flink-updating");
    std::fs::create_dir_all(&flink_dir).expect("flink SQL directory");
    for (job, name, table, sink, sink_name, query) in jobs {
        // Flink reads the same table; its oracle writes the query's result to its sink.
        std::fs::write(
            flink_dir.join(format!("{job}.sql")),
            format!("{table}{query};\n"),
        )
        .expect("write the Flink query");
        if !wanted(job) {
            continue;
        }
        reset_peak_rss();
        let result = run(&format!("{table}{sink}INSERT INTO {sink_name} {query};"));
        let flink = FLINK.iter().find(|f| f.0 == job);
        report(name, rows, result, flink.map(|f| f.1));
        match flink {
            Some(f) => println!("    peak RSS {} MB (Flink 2.3: {} MB)", peak_rss_mb(), f.2),
            None => println!("    peak RSS {} MB", peak_rss_mb()),
        }
    }
}
