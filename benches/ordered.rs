//! Ordered analytics benchmark (parallelism 1), each job reading CSV into a `blackhole`
//! sink, rows/s = input rows per second:
//! (o) `AVG(price) OVER (PARTITION BY key ORDER BY ts ROWS BETWEEN 100 PRECEDING AND
//! CURRENT ROW)` over the throughput benchmark's input (10 M rows, 10,000 keys, watermark
//! `ts - 1 s`);
//! (p1) the top 3 prices per key over the same append-only input (`ROW_NUMBER() ... <= 3`);
//! (p2) the top 3 keys by row count in each of 100 groups (`key % 100`), over the updating
//! `COUNT(*)` per key (every input row updates one ranked row; the count only grows, so the
//! Top-N is update-fast, as Flink's);
//! (q) keep-last deduplication by event time on 1 M keys (10 M rows, every key seen about
//! ten times).
//!
//! Run: `cargo bench --bench ordered` (release build); `SLUICE_BENCH_ROWS` changes the row
//! count, `SLUICE_BENCH_ONLY=o,q` runs only those jobs. `scripts/flink-ordered-bench` runs
//! the same queries in Apache Flink 2.3 on the same files; its figures on this machine are
//! printed beside Sluice's (see `FLINK`).

use std::path::Path;

#[path = "common/mod.rs"]
mod common;
use common::*;

/// Apache Flink 2.3's rows/s on this machine, same files, parallelism 1
/// (`scripts/flink-ordered-bench`, the better of with and without mini-batch; (q) measured
/// again in session 11, beside the deduplication operator: 0.188 without, 0.198 with; (o)
/// and (p2) in session 12, beside the running-sum OVER state and the update-fast Top-N, on
/// a day the machine was slower: (o) 0.046 / 0.050, (p2) 0.280 / 0.267, against 0.075 and
/// 0.478 in session 8).
const FLINK: &[(&str, f64)] = &[("o", 0.050), ("p1", 0.386), ("p2", 0.280), ("q", 0.198)];

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
    let dedup = root().join(format!("target/bench-data/dedup_{rows}.csv"));
    generate(&data, rows).expect("bench data");
    generate_1m_keys(&dedup, rows).expect("dedup data");
    let tables = format!(
        "{}{}CREATE TABLE sink_over (`key` INT, price DOUBLE, a DOUBLE) WITH ('connector' = 'blackhole');\n\
         CREATE TABLE sink_top (`key` INT, price DOUBLE, rn BIGINT) WITH ('connector' = 'blackhole');\n\
         CREATE TABLE sink_top_upd (g INT, `key` INT, c BIGINT, rn BIGINT) WITH ('connector' = 'blackhole');\n\
         CREATE TABLE sink_dedup (`key` INT, price DOUBLE, ts TIMESTAMP(3)) WITH ('connector' = 'blackhole');\n",
        ddl("bench", &data),
        ddl("dedup", &dedup)
    );
    let jobs: Vec<(&str, &str, String)> = vec![
        (
            "o",
            "(o) AVG OVER (ROWS 100 PRECEDING) by key",
            "INSERT INTO sink_over SELECT `key`, price, AVG(price) OVER (PARTITION BY `key` \
             ORDER BY ts ROWS BETWEEN 100 PRECEDING AND CURRENT ROW) FROM bench;"
                .into(),
        ),
        (
            "p1",
            "(p1) top 3 per key, append-only input",
            "INSERT INTO sink_top SELECT `key`, price, rn FROM (SELECT `key`, price, \
             ROW_NUMBER() OVER (PARTITION BY `key` ORDER BY price DESC) AS rn FROM bench) \
             WHERE rn <= 3;"
                .into(),
        ),
        (
            "p2",
            "(p2) top 3 per group, updating input",
            "INSERT INTO sink_top_upd SELECT g, `key`, c, rn FROM (SELECT g, `key`, c, \
             ROW_NUMBER() OVER (PARTITION BY g ORDER BY c DESC) AS rn FROM (SELECT `key` % 100 \
             AS g, `key`, COUNT(*) AS c FROM bench GROUP BY `key` % 100, `key`)) WHERE rn <= 3;"
                .into(),
        ),
        (
            "q",
            "(q) keep-last dedup, 1 M keys",
            "INSERT INTO sink_dedup SELECT `key`, price, ts FROM (SELECT *, ROW_NUMBER() OVER \
             (PARTITION BY `key` ORDER BY ts DESC) AS rn FROM dedup) WHERE rn = 1;"
                .into(),
        ),
    ];
    let only = std::env::var("SLUICE_BENCH_ONLY").ok();
    for (letter, name, query) in jobs {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|x| x.trim() == letter))
        {
            continue;
        }
        let flink = FLINK.iter().find(|(l, _)| *l == letter).map(|(_, f)| *f);
        report(name, rows, run(&format!("{tables}{query}")), flink);
    }
}
