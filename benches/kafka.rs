//! Kafka throughput (parallelism 1) against the local test broker
//! (`scripts/kafka-test-server`: tansu 0.6.0 with SQLite storage, on the same machine):
//!
//! - (a) file → `kafka` sink, `'sink.delivery-guarantee' = 'none'`;
//! - (b) the same, `at-least-once` with a checkpoint every second (each one waits for
//!   every message to be acknowledged): the cost of the guarantee against (a);
//! - (b2) the same, `exactly-once` (a Kafka transaction per checkpoint, committed when it
//!   completes): the cost of transactions against (b);
//! - (c) `kafka` source → `blackhole` (the topic (a) wrote, bounded at its end);
//! - (d) `kafka` source → `TUMBLE` 1 s `COUNT(*)`, `SUM(price)` by key → `blackhole`.
//!
//! Input: `SLUICE_BENCH_ROWS` (default 1 M) rows of `ts, key, price` (the throughput
//! benchmark's generator), written once under `target/bench-data/`; messages are JSON, in
//! a topic of 3 partitions. Flink's Kafka connector cannot be fetched on this machine
//! (Maven Central is not reachable), so no Flink figure is printed beside these.
//!
//! Run: `cargo bench --bench kafka` (release build; starts the broker if
//! `SLUICE_TEST_KAFKA_BOOTSTRAP` is not set). Session 16, 1 M rows: (a) 0.047, (b) 0.047,
//! (c) 0.030, (d) 0.036 M rows/s; librdkafka alone (Confluent's Python client) produces
//! 0.048 M and reads 0.031 M messages/s against the same broker: the broker bounds them.
//! Session 17, one run: (a) 18.9 s, (b) 19.9 s, (b2) 22.5 s for 1 M rows: exactly-once
//! costs 13% over at-least-once (a new producer and InitProducerId per checkpoint, and the
//! commit).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;

#[path = "common/mod.rs"]
mod common;
use common::*;

fn bootstrap() -> String {
    if let Ok(a) = std::env::var("SLUICE_TEST_KAFKA_BOOTSTRAP") {
        return a;
    }
    let out = std::process::Command::new("scripts/kafka-test-server")
        .arg("start")
        .current_dir(root())
        .output()
        .expect("running scripts/kafka-test-server");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn create_topic(bootstrap: &str, name: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for r in rt
        .block_on(admin.create_topics(
            &[NewTopic::new(name, 3, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .expect("create topic")
    {
        r.expect("topic created");
    }
}

fn kafka_table(name: &str, topic: &str, bootstrap: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE {name} (ts TIMESTAMP(3), `key` INT, price DOUBLE, \
         WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('connector' = 'kafka', \
         'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}', \
         'format' = 'json'{extra});\n"
    )
}

fn main() {
    let rows: u64 = std::env::var("SLUICE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let path = root().join(format!("target/bench-data/bench-{rows}.csv"));
    generate(&path, rows).expect("bench input");
    let bootstrap = bootstrap();
    let run_id = std::process::id();
    let file = format!(
        "CREATE TABLE src (ts TIMESTAMP(3), `key` INT, price DOUBLE) WITH ( \
         'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');\n",
        path.display()
    );
    let bounded =
        ", 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset'";

    let none = format!("bench-none-{run_id}");
    let checkpoints = format!(
        "SET 'execution.checkpointing.interval' = '1 s';
         SET 'execution.checkpointing.dir' = 'memory://kafka-bench-{run_id}';"
    );
    let sinks = [
        (
            "(a) file -> kafka sink, none",
            none.clone(),
            String::new(),
            "'none'".to_string(),
        ),
        (
            "(b) file -> kafka sink, at-least-once, 1 s chk",
            format!("bench-alo-{run_id}"),
            checkpoints.clone(),
            "'at-least-once'".to_string(),
        ),
        (
            "(b2) file -> kafka sink, exactly-once, 1 s chk",
            format!("bench-eos-{run_id}"),
            checkpoints.clone(),
            format!("'exactly-once', 'sink.transactional-id-prefix' = 'bench-{run_id}'"),
        ),
    ];
    for (name, topic, settings, guarantee) in sinks {
        create_topic(&bootstrap, &topic);
        let r = run(&format!(
            "{settings}{file}{}INSERT INTO out SELECT * FROM src;",
            kafka_table(
                "out",
                &topic,
                &bootstrap,
                &format!(", 'sink.delivery-guarantee' = {guarantee}")
            )
        ));
        report(name, rows, r, None);
    }

    let r = run(&format!(
        "{}CREATE TABLE sink (ts TIMESTAMP(3), `key` INT, price DOUBLE) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT * FROM t;",
        kafka_table("t", &none, &bootstrap, bounded)
    ));
    report("(c) kafka source -> blackhole", rows, r, None);

    let r = run(&format!(
        "{}CREATE TABLE sink (window_start TIMESTAMP(3), `key` INT, n BIGINT, total DOUBLE) \
         WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT window_start, `key`, COUNT(*), SUM(price) FROM TABLE(
           TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND))
         GROUP BY window_start, window_end, `key`;",
        kafka_table("t", &none, &bootstrap, bounded)
    ));
    report("(d) kafka source -> TUMBLE 1 s by key", rows, r, None);
}
