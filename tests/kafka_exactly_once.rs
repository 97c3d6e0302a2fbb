//! The exactly-once Kafka sink (`'sink.delivery-guarantee' = 'exactly-once'`) against the
//! broker `scripts/kafka-test-server` starts, with failures injected: in-process failpoints
//! (also in the commit path) and SIGKILL of `sluice run`. What Sluice wrote is read as a
//! `read_committed` reader of a correct broker reads it, from the raw log with its
//! transaction markers (`support::transactional_log`; the test broker itself shows open
//! transactions to `read_committed` readers). Expected rows are worked out by hand.

use std::time::{Duration, Instant};

use sluice::{Engine, EngineConfig};

mod common;
#[path = "kafka/support.rs"]
mod support;

use support::*;

/// The committed values of `topic` (all partitions), sorted; asserts that no transaction
/// was left open.
fn committed_values(topic: &str, partitions: i32) -> Vec<String> {
    let mut values = Vec::new();
    for p in 0..partitions {
        let log = transactional_log(topic, p);
        eprintln!(
            "DEBUG {topic}/{p}: committed {} aborted {} open {}",
            log.committed.len(),
            log.aborted,
            log.open
        );
        assert_eq!(
            log.open, 0,
            "{topic}/{p}: messages of transactions left open"
        );
        values.extend(log.committed.into_iter().map(|(_, v)| v));
    }
    values.sort();
    values
}

fn exactly_once(prefix: &str) -> String {
    format!(
        ", 'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = '{}'",
        unique(prefix)
    )
}

#[test]
fn each_row_is_committed_once_across_restarts() {
    let (t, expected) = three_partitions();
    let out = topic("eos-copy", 2);
    let sql = format!(
        "SET 'execution.checkpointing.dir' = 'memory://{}';
         SET 'sluice.test.checkpoint-after-rows' = '9,18';
         SET 'sluice.test.failpoints' = 'source-after-row:14,source-after-row:25';
         SET 'restart-strategy.fixed-delay.attempts' = '5';
         SET 'restart-strategy.fixed-delay.delay' = '0 ms';
         {}{}
         INSERT INTO copy SELECT * FROM orders;",
        unique("kafka-eos"),
        table(
            "orders",
            "id BIGINT, item STRING, price DOUBLE",
            &t,
            &format!("{BOUNDED}, 'format' = 'json'")
        ),
        table(
            "copy",
            "id BIGINT, item STRING, price DOUBLE",
            &out,
            &format!(", 'format' = 'csv'{}", exactly_once("copy"))
        ),
    );
    let mut e = Engine::new(EngineConfig {
        batch_size: 4,
        ..Default::default()
    });
    e.execute_script(&sql).unwrap();
    assert_eq!(committed_values(&out, 2), expected);
}

#[test]
fn exactly_once_settings_that_cannot_hold_are_clear_errors() {
    let t = topic("eos-bad", 1);
    let run = |sink_options: &str, settings: &str| {
        let sql = format!(
            "{settings}{}{}INSERT INTO s SELECT id FROM t;",
            table(
                "t",
                "id BIGINT",
                &t,
                &format!("{BOUNDED}, 'format' = 'json'")
            ),
            table(
                "s",
                "id BIGINT",
                &t,
                &format!(", 'format' = 'json'{sink_options}")
            )
        );
        engine().execute_script(&sql).unwrap_err().to_string()
    };
    // No transactional-id prefix (Flink's rule), also under Flink's older option name.
    for key in ["sink.delivery-guarantee", "sink.semantic"] {
        let err = run(&format!(", '{key}' = 'exactly-once'"), "");
        assert!(
            err.contains("'sink.transactional-id-prefix' must be set"),
            "{key}: {err}"
        );
    }
    let eos = exactly_once("bad");
    // A transaction timeout the checkpoint interval reaches.
    let err = run(
        &format!("{eos}, 'properties.transaction.timeout.ms' = '1000'"),
        "SET 'execution.checkpointing.interval' = '2 s';",
    );
    assert!(
        err.contains("'properties.transaction.timeout.ms' (1000 ms) must exceed the checkpoint interval (2000 ms)"),
        "{err}"
    );
    let err = run(
        &format!("{eos}, 'properties.transaction.timeout.ms' = 'soon'"),
        "",
    );
    assert!(
        err.contains("must be a positive number of milliseconds"),
        "{err}"
    );
    // A secured connection: the restore's own commit speaks plain TCP.
    let err = run(
        &format!("{eos}, 'properties.security.protocol' = 'SASL_SSL'"),
        "",
    );
    assert!(
        err.contains("over 'security.protocol' = 'SASL_SSL'"),
        "{err}"
    );
}
