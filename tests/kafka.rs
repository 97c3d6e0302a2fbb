//! The `kafka` connector against a real Kafka-protocol broker: the one
//! `scripts/kafka-test-server` starts (`.ci/run` starts it and sets
//! `SLUICE_TEST_KAFKA_BOOTSTRAP`; without that variable the tests start it themselves).
//!
//! Each test makes its own topics (unique names), writes messages with librdkafka
//! directly (not through Sluice), runs SQL, and reads what Sluice wrote with librdkafka.
//! Expected rows are worked out by hand from the messages written.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use sluice::arrow::array::RecordBatch;
use sluice::{Engine, EngineConfig, StatementResult};

mod common;
#[path = "kafka/support.rs"]
mod support;

use support::*;

#[test]
fn a_bounded_scan_reads_every_partition_at_any_scan_parallelism() {
    let (t, expected) = three_partitions();
    for parallelism in [1, 2, 3] {
        let sql = table(
            "orders",
            "id BIGINT, item STRING, price DOUBLE",
            &t,
            &format!("{BOUNDED}, 'format' = 'json', 'scan.parallelism' = '{parallelism}'"),
        ) + "SELECT * FROM orders;";
        let rows = sorted_rows(&engine().collect(&sql).unwrap());
        assert_eq!(rows, expected, "scan.parallelism {parallelism}");
    }
}

#[test]
fn startup_modes_start_where_flink_starts() {
    let (t, _) = three_partitions();
    let read = |extra: &str| {
        let sql = table(
            "orders",
            "id BIGINT, item STRING, price DOUBLE",
            &t,
            &format!(", 'format' = 'json', 'scan.bounded.mode' = 'latest-offset'{extra}"),
        ) + "SELECT id FROM orders;";
        let mut ids: Vec<i64> = sorted_rows(&engine().collect(&sql).unwrap())
            .iter()
            .map(|r| r.parse().unwrap())
            .collect();
        ids.sort();
        ids
    };
    // Partition 0 from offset 8 (ids 8, 9), partition 2 from 5 (ids 25..29); partition 1
    // is not listed and has no group offset: from its earliest (ids 10..19).
    let ids = read(
        ", 'scan.startup.mode' = 'specific-offsets',
           'scan.startup.specific-offsets' = 'partition:0,offset:8;partition:2,offset:5'",
    );
    let mut want: Vec<i64> = vec![8, 9];
    want.extend(10..20);
    want.extend(25..30);
    assert_eq!(ids, want);
    // latest-offset at the start, bounded by latest-offset at the start: nothing.
    assert!(read(", 'scan.startup.mode' = 'latest-offset'").is_empty());
    // group-offsets: a group that committed 3 for partition 1 only, with the reset to
    // earliest for the others.
    let group = unique("group");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&t, 1, Offset::Offset(3)).unwrap();
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
    let ids = read(&format!(
        ", 'properties.group.id' = '{group}', 'properties.auto.offset.reset' = 'earliest'"
    ));
    let mut want: Vec<i64> = (0..10).collect();
    want.extend(13..20);
    want.extend(20..30);
    assert_eq!(ids, want);
    // Without the reset, Flink's rule: no committed offset is an error.
    let sql = table(
        "orders",
        "id BIGINT",
        &t,
        &format!(", 'format' = 'json', 'scan.bounded.mode' = 'latest-offset', 'properties.group.id' = '{group}'"),
    ) + "SELECT id FROM orders;";
    let err = engine().collect(&sql).unwrap_err().to_string();
    assert!(
        err.contains("has no committed offset") && err.contains("'properties.auto.offset.reset'"),
        "{err}"
    );
}

#[test]
fn a_window_aggregate_reads_one_topic_and_writes_another() {
    // 90 CSV events, one every 2 s from 10:00:00: 30 per minute, in 2 partitions (even
    // seconds alternate). Tumbling 1-minute counts per kind ('a' when i % 3 == 0, else
    // 'b'): per minute 10 'a' and 20 'b'.
    let input = topic("events", 2);
    let output = topic("counts", 1);
    let mut messages = Vec::new();
    for i in 0..90 {
        let secs = 2 * i;
        let kind = if i % 3 == 0 { "a" } else { "b" };
        messages.push((
            (i % 2) as i32,
            format!("{kind},2024-05-01 10:{:02}:{:02}", secs / 60, secs % 60),
        ));
    }
    let refs: Vec<(i32, Option<&str>, &str)> = messages
        .iter()
        .map(|(p, v)| (*p, None, v.as_str()))
        .collect();
    produce(&input, &refs);
    let sql = table(
        "events",
        "kind STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '5' SECOND",
        &input,
        &format!("{BOUNDED}, 'format' = 'csv'"),
    ) + &table(
        "counts",
        "window_start TIMESTAMP(3), kind STRING, n BIGINT",
        &output,
        ", 'format' = 'json'",
    ) + "INSERT INTO counts
         SELECT window_start, kind, COUNT(*) FROM TABLE(
           TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
         GROUP BY window_start, window_end, kind;";
    engine().execute_script(&sql).unwrap();
    let mut got: Vec<String> = consume(&output, 1).into_iter().map(|(_, _, v)| v).collect();
    got.sort();
    let mut want = Vec::new();
    for minute in 0..3 {
        for (kind, n) in [("a", 10), ("b", 20)] {
            want.push(format!(
                r#"{{"window_start":"2024-05-01 10:{minute:02}:00","kind":"{kind}","n":{n}}}"#
            ));
        }
    }
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn key_fields_are_written_and_read_back() {
    let t = topic("users", 2);
    let columns = "k_id BIGINT, name STRING, city STRING";
    let options = ", 'key.format' = 'json', 'key.fields' = 'k_id', 'key.fields-prefix' = 'k_',
        'value.format' = 'json', 'value.fields-include' = 'EXCEPT_KEY'";
    let sql = table("users", columns, &t, options)
        + "INSERT INTO users VALUES (1, 'ann', 'Oslo'), (2, 'bob', 'Rome'), (3, 'cy', 'Lima');";
    engine().execute_script(&sql).unwrap();
    let mut got: Vec<(Option<String>, String)> =
        consume(&t, 2).into_iter().map(|(_, k, v)| (k, v)).collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                Some(r#"{"id":1}"#.into()),
                r#"{"name":"ann","city":"Oslo"}"#.into()
            ),
            (
                Some(r#"{"id":2}"#.into()),
                r#"{"name":"bob","city":"Rome"}"#.into()
            ),
            (
                Some(r#"{"id":3}"#.into()),
                r#"{"name":"cy","city":"Lima"}"#.into()
            ),
        ]
    );
    // Equal keys go to one partition (murmur2 of the key, as Kafka's Java client).
    let sql = table("users", columns, &t, &format!("{options}{BOUNDED}")) + "SELECT * FROM users;";
    assert_eq!(
        sorted_rows(&engine().collect(&sql).unwrap()),
        vec!["1,ann,Oslo", "2,bob,Rome", "3,cy,Lima"]
    );
}

#[test]
fn a_restored_job_resumes_at_its_checkpointed_offsets() {
    // Two partitions read by one source subtask; checkpoints inside batches, failures
    // after them: the exactly-once result holds each row once.
    let (t, expected) = three_partitions();
    let sql = format!(
        "SET 'execution.checkpointing.dir' = 'memory://{}';
         SET 'execution.checkpointing.mode' = 'EXACTLY_ONCE';
         SET 'sluice.test.checkpoint-after-rows' = '7,16,23';
         SET 'sluice.test.failpoints' = 'source-after-row:12,source-after-row:20';
         SET 'restart-strategy.fixed-delay.attempts' = '5';
         SET 'restart-strategy.fixed-delay.delay' = '0 ms';
         {}
         SELECT * FROM orders;",
        unique("kafka-restore"),
        table(
            "orders",
            "id BIGINT, item STRING, price DOUBLE",
            &t,
            &format!("{BOUNDED}, 'format' = 'json'"),
        )
    );
    let mut e = Engine::new(EngineConfig {
        batch_size: 4,
        ..Default::default()
    });
    let rows = sorted_rows(&e.collect(&sql).unwrap());
    assert_eq!(rows, expected);
}

#[test]
fn an_at_least_once_sink_loses_nothing_across_failures() {
    let (out, expected) = copy_across_failures("AT_LEAST_ONCE", "", 1);
    let written: Vec<String> = consume(&out, 1).into_iter().map(|(_, _, v)| v).collect();
    let distinct: std::collections::BTreeSet<String> = written.iter().cloned().collect();
    assert_eq!(distinct.into_iter().collect::<Vec<_>>(), expected);
    assert!(written.len() >= expected.len());
}

#[test]
fn group_offsets_are_committed_when_a_checkpoint_completes() {
    let (t, _) = three_partitions();
    let group = unique("committer");
    let mut e = engine();
    e.execute_script(&format!(
        "SET 'execution.checkpointing.dir' = 'memory://{}';
         SET 'execution.checkpointing.interval' = '100 ms';
         {}",
        unique("kafka-commit"),
        table(
            "orders",
            "id BIGINT",
            &t,
            &format!(", 'format' = 'json', 'scan.startup.mode' = 'earliest-offset', 'properties.group.id' = '{group}'"),
        )
    ))
    .unwrap();
    let StatementResult::Query(job) = e.sql("SELECT id FROM orders").unwrap() else {
        panic!("a query")
    };
    let handle = job.handle();
    // Read the unbounded query's rows as they come (it holds them until checkpoints).
    let reader = std::thread::spawn(move || sluice::drain(job).map(|b| b.len()));
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition(&t, p);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let committed = loop {
        let c = consumer
            .committed_offsets(tpl.clone(), Duration::from_secs(10))
            .unwrap();
        let offsets: BTreeMap<i32, Offset> = c
            .elements()
            .iter()
            .map(|e| (e.partition(), e.offset()))
            .collect();
        if offsets.values().all(|o| *o == Offset::Offset(10)) || Instant::now() > deadline {
            break offsets;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    handle.stop();
    let rows = reader.join().unwrap();
    assert_eq!(
        committed,
        (0..3)
            .map(|p| (p, Offset::Offset(10)))
            .collect::<BTreeMap<_, _>>(),
        "each partition's 10 messages committed ({rows:?})"
    );
}

#[test]
fn bad_input_and_unsupported_uses_are_clear_errors() {
    let t = topic("bad", 1);
    produce(
        &t,
        &[(0, None, r#"{"id": 1}"#), (0, None, r#"{"id": "x"}"#)],
    );
    let sql = table(
        "t",
        "id BIGINT",
        &t,
        &format!("{BOUNDED}, 'format' = 'json'"),
    ) + "SELECT * FROM t;";
    let err = engine().collect(&sql).unwrap_err().to_string();
    assert!(
        err.contains(&format!("kafka://{t}/0:1:1")),
        "the message's place: {err}"
    );
    let sql = table(
        "t",
        "id BIGINT",
        &t,
        &format!("{BOUNDED}, 'format' = 'json', 'json.ignore-parse-errors' = 'true'"),
    ) + "SELECT * FROM t;";
    assert_eq!(sorted_rows(&engine().collect(&sql).unwrap()), vec!["1"]);
    let sql = table(
        "t",
        "id BIGINT",
        "no-such-topic-here",
        &format!("{BOUNDED}, 'format' = 'json'"),
    ) + "SELECT * FROM t;";
    let err = engine().collect(&sql).unwrap_err().to_string();
    assert!(
        err.contains("topic 'no-such-topic-here' does not exist"),
        "{err}"
    );
    let sql = table(
        "t",
        "id BIGINT",
        &t,
        ", 'format' = 'json', 'scan.startup.mod' = 'earliest-offset'",
    ) + "SELECT * FROM t;";
    let err = engine().collect(&sql).unwrap_err().to_string();
    assert!(
        err.contains("Unsupported options found for 'kafka'") && err.contains("scan.startup.mode"),
        "{err}"
    );
    let sql = table(
        "t",
        "id BIGINT",
        &t,
        &format!("{BOUNDED}, 'format' = 'json'"),
    ) + &table("s", "id BIGINT, n BIGINT", &t, ", 'format' = 'json'")
        + "INSERT INTO s SELECT id, COUNT(*) FROM t GROUP BY id;";
    let err = engine().execute_script(&sql).unwrap_err().to_string();
    assert!(
        err.contains("the 'kafka' sink can only append rows"),
        "{err}"
    );
}

/// `sql-examples/kafka/`: the flights replayed into a topic keyed by origin (3
/// partitions), then the hourly departures read from it and written to another topic,
/// read back: the result SQLite derived for `flights_hourly.sql`
/// (`tests/expected/flights_hourly.csv.gz`, 19,486 rows).
#[test]
fn the_kafka_examples_give_the_hourly_result_sqlite_derived() {
    use std::io::Read;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let flights = topic("flights", 3);
    let hourly = topic("hourly", 1);
    let example = |name: &str| {
        std::fs::read_to_string(root.join("sql-examples/kafka").join(name))
            .unwrap()
            .replace("127.0.0.1:9094", &bootstrap())
            .replace("'topic' = 'flights'", &format!("'topic' = '{flights}'"))
            .replace(
                "'topic' = 'hourly_delays'",
                &format!("'topic' = '{hourly}'"),
            )
    };
    for file in ["flights_to_kafka.sql", "hourly_delays_from_kafka.sql"] {
        Engine::new(EngineConfig {
            working_dir: Some(root.to_path_buf()),
            ..Default::default()
        })
        .execute_script(&example(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    let sql = table(
        "hourly",
        "window_start TIMESTAMP(3), window_end TIMESTAMP(3), origin STRING, departures BIGINT, \
         avg_dep_delay DOUBLE, max_dep_delay DOUBLE",
        &hourly,
        &format!("{BOUNDED}, 'format' = 'json'"),
    ) + "SELECT * FROM hourly;";
    let got = common::rows_as_csv(&engine().collect(&sql).unwrap());
    let mut expected = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(root.join("tests/expected/flights_hourly.csv.gz")).unwrap(),
    )
    .read_to_string(&mut expected)
    .unwrap();
    if let Err(e) = common::compare_csv_multiset(&expected, &got) {
        panic!("{}", e.chars().take(3000).collect::<String>());
    }
}

#[test]
fn topic_patterns_and_partitioners() {
    // Two topics matching one pattern, a third that does not.
    let base = unique("pat");
    let made: Vec<String> = ["a", "b", "zz"]
        .iter()
        .map(|suffix| {
            let name = format!("{base}-{suffix}");
            create_topic_at(&bootstrap(), &name, 2);
            produce(
                &name,
                &[
                    (0, None, &format!(r#"{{"s": "{suffix}0"}}"#)),
                    (1, None, &format!(r#"{{"s": "{suffix}1"}}"#)),
                ],
            );
            name
        })
        .collect();
    let sql = format!(
        "CREATE TABLE t (s STRING) WITH (
            'connector' = 'kafka',
            'topic-pattern' = '{base}-[ab]',
            'properties.bootstrap.servers' = '{}'{BOUNDED},
            'format' = 'json');
         SELECT * FROM t;",
        bootstrap()
    );
    assert_eq!(
        sorted_rows(&engine().collect(&sql).unwrap()),
        vec!["a0", "a1", "b0", "b1"]
    );
    assert_eq!(made.len(), 3);

    // round-robin: 6 rows over 3 partitions, two each; fixed: subtask 0 writes partition 0.
    for (partitioner, want) in [("round-robin", vec![2, 2, 2]), ("fixed", vec![6, 0, 0])] {
        let out = topic("rr", 3);
        let sql = table(
            "o",
            "n INT",
            &out,
            &format!(", 'format' = 'csv', 'sink.partitioner' = '{partitioner}'"),
        ) + "INSERT INTO o VALUES (1), (2), (3), (4), (5), (6);";
        engine().execute_script(&sql).unwrap();
        let mut per_partition = vec![0; 3];
        for (p, _, _) in consume(&out, 3) {
            per_partition[p as usize] += 1;
        }
        assert_eq!(per_partition, want, "{partitioner}");
    }
}

/// Keyed messages to partition 0; `None` a tombstone (no value).
fn produce_keyed(topic: &str, messages: &[(&str, Option<&str>)]) {
    let producer = producer_at(&bootstrap());
    for (k, v) in messages {
        let mut r: BaseRecord<'_, str, str> = BaseRecord::to(topic).partition(0).key(*k);
        if let Some(v) = v {
            r = r.payload(*v);
        }
        producer.send(r).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// The rows of a query, CSV lines in arrival order (an updating query's start with its
/// row kind).
fn rows_in_order(batches: &[RecordBatch]) -> Vec<String> {
    common::rows_as_csv(batches)
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

#[test]
fn upsert_kafka_reads_upserts_and_tombstones_as_a_changelog() {
    let t = topic("upserts", 1);
    produce_keyed(
        &t,
        &[
            (r#"{"id":1}"#, Some(r#"{"id":1,"name":"x"}"#)),
            (r#"{"id":2}"#, Some(r#"{"id":2,"name":"p"}"#)),
            (r#"{"id":1}"#, Some(r#"{"id":1,"name":"y"}"#)),
            (r#"{"id":1}"#, Some(r#"{"id":1,"name":"y"}"#)),
            (r#"{"id":2}"#, None),
            (r#"{"id":3}"#, None),
        ],
    );
    let ddl = format!(
        "CREATE TABLE users (id BIGINT, name STRING, PRIMARY KEY (id) NOT ENFORCED) WITH (
            'connector' = 'upsert-kafka',
            'topic' = '{t}',
            'properties.bootstrap.servers' = '{}',
            'scan.bounded.mode' = 'latest-offset',
            'key.format' = 'json',
            'value.format' = 'json');\n",
        bootstrap()
    );
    // Flink's ChangelogNormalize over the upserts: a new key is +I, a changed value -U/+U,
    // a repeated value nothing, a tombstone -D of the row held, a tombstone of an unknown
    // key nothing.
    let rows = rows_in_order(
        &engine()
            .collect(&(ddl.clone() + "SELECT * FROM users;"))
            .unwrap(),
    );
    assert_eq!(rows, vec!["+I,1,x", "+I,2,p", "-U,1,x", "+U,1,y", "-D,2,p"]);
    let rows = rows_in_order(
        &engine()
            .collect(&(ddl + "SELECT COUNT(*) AS n FROM users;"))
            .unwrap(),
    );
    // One count (the aggregate may fold a batch's changes; the last value is 1).
    let last = rows.last().cloned().unwrap_or_default();
    assert!(last == "+I,1" || last == "+U,1", "{rows:?}");
}

#[test]
fn upsert_kafka_writes_changes_as_upserts_and_tombstones() {
    let t = topic("upsert-out", 2);
    let ddl = format!(
        "CREATE TABLE once (k STRING, n BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH (
            'connector' = 'upsert-kafka',
            'topic' = '{t}',
            'properties.bootstrap.servers' = '{}',
            'key.format' = 'json',
            'value.format' = 'json',
            'value.fields-include' = 'EXCEPT_KEY');\n",
        bootstrap()
    );
    // Keys seen once: 'a' is +I then -D when it is seen again; 'b' stays; 'c' is +I. One
    // row per batch, so that each change reaches the sink on its own.
    Engine::new(EngineConfig {
        batch_size: 1,
        ..Default::default()
    })
    .execute_script(&format!(
        "{ddl}INSERT INTO once SELECT k, COUNT(*) FROM (VALUES ('a'), ('b'), ('a'), ('c')) AS v(k)
             GROUP BY k HAVING COUNT(*) < 2;"
    ))
    .unwrap();
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, k, v) in consume(&t, 2) {
        by_key.entry(k.unwrap()).or_default().push(v);
    }
    let expected: BTreeMap<String, Vec<String>> = [
        (r#"{"k":"a"}"#, vec![r#"{"n":1}"#, ""]),
        (r#"{"k":"b"}"#, vec![r#"{"n":1}"#]),
        (r#"{"k":"c"}"#, vec![r#"{"n":1}"#]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(by_key, expected);
    // An update's old row is not written when its new row follows: a's count goes 1, 2.
    let counts = topic("upsert-counts", 1);
    Engine::new(EngineConfig {
        batch_size: 1,
        ..Default::default()
    })
    .execute_script(&format!(
        "{}INSERT INTO once SELECT k, COUNT(*) FROM (VALUES ('a'), ('a')) AS v(k) GROUP BY k;",
        ddl.replace(
            &format!("'topic' = '{t}'"),
            &format!("'topic' = '{counts}'")
        )
    ))
    .unwrap();
    let written: Vec<(Option<String>, String)> = consume(&counts, 1)
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .collect();
    let a = Some(r#"{"k":"a"}"#.to_string());
    assert_eq!(
        written,
        vec![(a.clone(), r#"{"n":1}"#.into()), (a, r#"{"n":2}"#.into())]
    );
    // Read back: the table holds b and c.
    let sql = ddl.replace(
        "'value.fields-include' = 'EXCEPT_KEY');",
        "'value.fields-include' = 'EXCEPT_KEY', 'scan.bounded.mode' = 'latest-offset');",
    ) + "SELECT k, n FROM once;";
    let rows = rows_in_order(&engine().collect(&sql).unwrap());
    let mut folded: BTreeMap<String, String> = BTreeMap::new();
    for r in rows {
        let (op, rest) = r.split_once(',').unwrap();
        let (k, n) = rest.split_once(',').unwrap();
        match op {
            "+I" | "+U" => folded.insert(k.to_string(), n.to_string()),
            _ => folded.remove(k),
        };
    }
    assert_eq!(
        folded,
        BTreeMap::from([("b".into(), "1".into()), ("c".into(), "1".into())])
    );
    // Without a primary key: Flink's error.
    let err = engine()
        .execute_script(
            &(ddl.replace(", PRIMARY KEY (k) NOT ENFORCED", "")
                + "INSERT INTO once VALUES ('x', 1);"),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'upsert-kafka' tables require to define a PRIMARY KEY"),
        "{err}"
    );
}

#[test]
fn an_upsert_table_restored_after_failures_has_the_last_value_of_each_key() {
    // 30 changes of 5 keys: change i sets key i % 5 to i, every 7th deletes it.
    let t = topic("upsert-restore", 2);
    let producer = producer_at(&bootstrap());
    let mut last: BTreeMap<i64, Option<i64>> = BTreeMap::new();
    for i in 0..30i64 {
        let k = i % 5;
        let key = format!(r#"{{"k":{k}}}"#);
        let value = format!(r#"{{"k":{k},"v":{i}}}"#);
        let mut r: BaseRecord<'_, str, str> =
            BaseRecord::to(&t).partition((k % 2) as i32).key(&key);
        if i % 7 == 6 {
            last.insert(k, None);
        } else {
            r = r.payload(&value);
            last.insert(k, Some(i));
        }
        producer.send(r).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let expected: Vec<String> = last
        .iter()
        .filter_map(|(k, v)| v.map(|v| format!("{k},{v}")))
        .collect();
    let sql = format!(
        "SET 'execution.checkpointing.dir' = 'memory://{}';
         SET 'execution.checkpointing.mode' = 'EXACTLY_ONCE';
         SET 'sluice.test.checkpoint-after-rows' = '5,11,19';
         SET 'sluice.test.failpoints' = 'source-after-row:8,source-after-row:22';
         SET 'restart-strategy.fixed-delay.attempts' = '5';
         SET 'restart-strategy.fixed-delay.delay' = '0 ms';
         CREATE TABLE u (k BIGINT, v BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH (
            'connector' = 'upsert-kafka', 'topic' = '{t}',
            'properties.bootstrap.servers' = '{}', 'scan.bounded.mode' = 'latest-offset',
            'key.format' = 'json', 'value.format' = 'json');
         SELECT k, v FROM u;",
        unique("upsert-restore"),
        bootstrap()
    );
    let rows = rows_in_order(
        &Engine::new(EngineConfig {
            batch_size: 3,
            ..Default::default()
        })
        .collect(&sql)
        .unwrap(),
    );
    let mut folded: BTreeMap<String, String> = BTreeMap::new();
    for r in &rows {
        let mut parts = r.splitn(3, ',');
        let (op, k, v) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        match op {
            "+I" | "+U" => folded.insert(k.to_string(), v.to_string()),
            _ => folded.remove(k),
        };
    }
    let got: Vec<String> = folded.iter().map(|(k, v)| format!("{k},{v}")).collect();
    assert_eq!(got, expected, "changelog: {rows:?}");
}

#[test]
fn a_debezium_topic_is_read_as_a_changelog() {
    let t = topic("cdc", 1);
    produce(
        &t,
        &[
            (
                0,
                None,
                r#"{"before":null,"after":{"id":1,"qty":5},"op":"c"}"#,
            ),
            (
                0,
                None,
                r#"{"before":{"id":1,"qty":5},"after":{"id":1,"qty":7},"op":"u"}"#,
            ),
            (
                0,
                None,
                r#"{"before":null,"after":{"id":2,"qty":1},"op":"c"}"#,
            ),
            (
                0,
                None,
                r#"{"before":{"id":2,"qty":1},"after":null,"op":"d"}"#,
            ),
        ],
    );
    let sql = table(
        "stock",
        "id BIGINT, qty INT",
        &t,
        &format!("{BOUNDED}, 'value.format' = 'debezium-json'"),
    ) + "SELECT * FROM stock;";
    assert_eq!(
        rows_in_order(&engine().collect(&sql).unwrap()),
        vec!["+I,1,5", "-U,1,5", "+U,1,7", "+I,2,1", "-D,2,1"]
    );
}

#[test]
fn metadata_columns_read_and_write_timestamps_headers_partitions_and_offsets() {
    use rdkafka::message::{Header, Headers, OwnedHeaders};
    // Six messages, ids 0..5, to partitions id % 2, timestamps 2024-01-01 00:00:0<id> UTC
    // (1704067200000 + id * 1000 ms), header trace = "t<id>".
    let t = topic("meta", 2);
    let producer = producer_at(&bootstrap());
    for id in 0..6i64 {
        let value = format!(r#"{{"id":{id}}}"#);
        let trace = format!("t{id}");
        let r: BaseRecord<'_, str, str> = BaseRecord::to(&t)
            .partition((id % 2) as i32)
            .payload(value.as_str())
            .timestamp(1_704_067_200_000 + id * 1000)
            .headers(OwnedHeaders::new().insert(Header {
                key: "trace",
                value: Some(trace.as_bytes()),
            }));
        producer.send(r).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let table_ddl = |name: &str, topic: &str, extra: &str| {
        format!(
            "CREATE TABLE {name} (
                id BIGINT,
                ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp',
                local_ts TIMESTAMP(3) METADATA FROM 'timestamp' VIRTUAL,
                p INT METADATA FROM 'partition' VIRTUAL,
                o BIGINT METADATA FROM 'offset' VIRTUAL,
                `topic` STRING METADATA VIRTUAL,
                tt STRING METADATA FROM 'timestamp-type' VIRTUAL,
                h MAP<STRING, BYTES> METADATA FROM 'headers',
                WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
             ) WITH (
                'connector' = 'kafka', 'topic' = '{topic}',
                'properties.bootstrap.servers' = '{}'{extra},
                'format' = 'json');\n",
            bootstrap()
        )
    };
    let ddl = format!(
        "SET 'table.local-time-zone' = 'Asia/Tokyo';\n{}",
        table_ddl("events", &t, BOUNDED)
    );
    // Offsets: partition 0 holds ids 0, 2, 4 at offsets 0, 1, 2; partition 1 ids 1, 3, 5.
    // Tokyo is UTC+9: 00:00:0<id> UTC is 09:00:0<id> there.
    let rows = sorted_rows(
        &engine()
            .collect(&format!(
                "{ddl}SELECT id, local_ts, p, o, `topic` = '{t}', tt, DECODE(h['trace'], 'UTF-8') FROM events;"
            ))
            .unwrap(),
    );
    let want: Vec<String> = (0..6)
        .map(|id| {
            format!(
                "{id},2024-01-01 09:00:0{id},{},{},true,CreateTime,t{id}",
                id % 2,
                id / 2
            )
        })
        .collect();
    assert_eq!(rows, want);
    // The leader epoch: what the broker's record batches say (read raw), NULL if -1.
    let rows = sorted_rows(
        &engine()
            .collect(&format!(
                "{}SELECT o, le FROM e WHERE p = 0;",
                table(
                    "e",
                    "id BIGINT, p INT METADATA FROM 'partition' VIRTUAL, \
                     o BIGINT METADATA FROM 'offset' VIRTUAL, \
                     le INT METADATA FROM 'leader-epoch' VIRTUAL",
                    &t,
                    &format!("{BOUNDED}, 'format' = 'json'")
                )
            ))
            .unwrap(),
    );
    let want: Vec<String> = transactional_log(&t, 0)
        .leader_epochs
        .iter()
        .map(|(o, e)| match *e {
            e if e >= 0 => format!("{o},{e}"),
            _ => format!("{o},"),
        })
        .collect();
    assert_eq!(rows, want);
    // The message time is an event-time attribute: 2-second windows hold ids {0,1},
    // {2,3}, {4,5}.
    let rows = sorted_rows(
        &engine()
            .collect(&format!(
                "{ddl}SELECT window_start, COUNT(*) FROM TABLE(
                   TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '2' SECOND))
                 GROUP BY window_start, window_end;"
            ))
            .unwrap(),
    );
    assert_eq!(
        rows,
        vec![
            "2024-01-01 09:00:00,2",
            "2024-01-01 09:00:02,2",
            "2024-01-01 09:00:04,2"
        ]
    );
    // DESCRIBE shows the metadata.
    let mut e = engine();
    e.execute_script(&ddl).unwrap();
    let sluice::StatementResult::Info(described) = e.sql("DESCRIBE events").unwrap() else {
        panic!("DESCRIBE gives a table")
    };
    let text = common::rows_as_csv(&[described]);
    assert!(text.contains("METADATA FROM 'offset' VIRTUAL"), "{text}");

    // Written: the timestamp and headers columns become the message's; the VIRTUAL ones
    // are not written.
    let out = topic("meta-out", 1);
    let sink = table_ddl("events_out", &out, "");
    let mut e = engine();
    e.execute_script(&(ddl.clone() + &sink)).unwrap();
    e.execute_script(
        "INSERT INTO events_out SELECT id + 10, ts + INTERVAL '1' HOUR, h FROM events WHERE id < 2;",
    )
    .unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("meta-reader"))
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&out, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let h = m.headers().map(|h| {
                    h.iter()
                        .map(|h| {
                            format!(
                                "{}={}",
                                h.key,
                                String::from_utf8_lossy(h.value.unwrap_or_default())
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(";")
                });
                got.push((
                    String::from_utf8_lossy(m.payload().unwrap()).into_owned(),
                    m.timestamp().to_millis(),
                    h,
                ));
            }
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            _ => {}
        }
    }
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                r#"{"id":10}"#.to_string(),
                Some(1_704_070_800_000),
                Some("trace=t0".to_string())
            ),
            (
                r#"{"id":11}"#.to_string(),
                Some(1_704_070_801_000),
                Some("trace=t1".to_string())
            ),
        ]
    );
}

#[test]
fn metadata_a_connector_lacks_or_cannot_write_is_a_clear_error() {
    let t = topic("meta-bad", 1);
    let ddl = format!(
        "CREATE TABLE k (id BIGINT, o BIGINT METADATA FROM 'offset') WITH (
            'connector' = 'kafka', 'topic' = '{t}', 'properties.bootstrap.servers' = '{}',
            'format' = 'json');\n",
        bootstrap()
    );
    let err = engine()
        .execute_script(&(ddl + "INSERT INTO k VALUES (1, 2);"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("metadata column 'o' ('offset') is read only; declare it VIRTUAL"),
        "{err}"
    );
    let err = engine()
        .collect(
            "CREATE TABLE f (id BIGINT, ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp') WITH (
                'connector' = 'filesystem', 'path' = 'nowhere', 'format' = 'json');
             SELECT * FROM f;",
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Invalid metadata key 'timestamp' in column 'ts' of table 'f'"),
        "{err}"
    );
    let err = engine()
        .collect(&format!(
            "CREATE TABLE k2 (id BIGINT, x INT METADATA FROM 'nope') WITH (
                'connector' = 'kafka', 'topic' = '{t}', 'properties.bootstrap.servers' = '{}',
                'format' = 'json');
             SELECT * FROM k2;",
            bootstrap()
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("supports the following metadata keys: 'topic'"),
        "{err}"
    );
}

/// `sluice run` of a Kafka-fed statement set killed with SIGKILL after a checkpoint, then
/// resumed with `--from-checkpoint latest`: the exactly-once filesystem sink holds exactly
/// the failure-free windows, the at-least-once Kafka sink every expected row (some maybe
/// twice). Input: ids 1..=4000 written while the job runs (about 1,000 a second, partition
/// id % 2), event time id * 10 ms; the scan ends at offset 2000 of each partition. Windows
/// of 1 s hold ids 100w..100w+99 (count and sum by formula); `sevens` gets ids divisible
/// by 7.
#[test]
fn a_killed_kafka_job_resumes_from_its_checkpoint() {
    let input = topic("kill-in", 2);
    let sevens = topic("kill-sevens", 1);
    let dir = std::env::temp_dir().join(unique("sluice-kafka-kill"));
    let (windows, checkpoints) = (dir.join("windows"), dir.join("chk"));
    std::fs::create_dir_all(&dir).unwrap();
    let writer = write_ids_while_running(&input, 2);
    let script = format!(
        "SET 'table.local-time-zone' = 'UTC';
         SET 'execution.checkpointing.interval' = '300 ms';
         SET 'execution.checkpointing.dir' = '{}';
         CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
           WATERMARK FOR ts AS ts) WITH ('connector' = 'kafka', 'topic' = '{input}',
           'properties.bootstrap.servers' = '{}', 'format' = 'json',
           'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'specific-offsets',
           'scan.bounded.specific-offsets' = 'partition:0,offset:2000;partition:1,offset:2000');
         CREATE TABLE windows (window_start TIMESTAMP(3), n BIGINT, s BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         CREATE TABLE sevens (id BIGINT) WITH ('connector' = 'kafka', 'topic' = '{sevens}',
           'properties.bootstrap.servers' = '{}', 'format' = 'csv');
         EXECUTE STATEMENT SET BEGIN
           INSERT INTO windows SELECT window_start, COUNT(*), SUM(id)
             FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))
             GROUP BY window_start, window_end;
           INSERT INTO sevens SELECT id FROM seq WHERE id % 7 = 0;
         END;",
        checkpoints.display(),
        bootstrap(),
        windows.display(),
        bootstrap()
    );
    let file = dir.join("job.sql");
    std::fs::write(&file, script).unwrap();
    let mut child = sluice_run(&file, false).spawn().expect("sluice starts");
    let deadline = Instant::now() + Duration::from_secs(180);
    while common::committed_lines(&windows).is_empty() {
        assert!(Instant::now() < deadline, "no checkpoint committed");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before a checkpoint"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let partial = common::committed_lines(&windows).len();
    assert!(
        partial < 41,
        "killed mid-run: {partial} of 41 windows committed"
    );
    writer.join().unwrap();
    let resumed = sluice_run(&file, true)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let expected_windows = common::second_windows_of_ids(4000);
    assert_eq!(common::committed_lines(&windows), expected_windows);
    let written: Vec<String> = consume(&sevens, 1).into_iter().map(|(_, _, v)| v).collect();
    let distinct: std::collections::BTreeSet<i64> =
        written.iter().map(|v| v.parse().unwrap()).collect();
    let expected: std::collections::BTreeSet<i64> = (1..=4000).filter(|i| i % 7 == 0).collect();
    assert_eq!(distinct, expected);
    assert!(written.len() >= expected.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_raw_format_reads_and_writes_a_message_as_one_column() {
    let t = topic("raw", 1);
    produce(
        &t,
        &[
            (0, None, "GET /index.html 200"),
            (0, None, "POST /login 302, with a comma"),
        ],
    );
    let sql = table(
        "logs",
        "line STRING",
        &t,
        &format!("{BOUNDED}, 'format' = 'raw'"),
    ) + "SELECT line, CHAR_LENGTH(line) FROM logs;";
    assert_eq!(
        rows_in_order(&engine().collect(&sql).unwrap()),
        vec!["GET /index.html 200,19", "POST /login 302, with a comma,29"]
    );
    // Written: the column's bytes are the value; a raw key from a column.
    let out = topic("raw-out", 1);
    let sql = table(
        "o",
        "k STRING, line STRING",
        &out,
        ", 'key.format' = 'raw', 'key.fields' = 'k', 'value.format' = 'raw', \
         'value.fields-include' = 'EXCEPT_KEY'",
    ) + "INSERT INTO o VALUES ('a', 'first line'), ('b', 'second');";
    engine().execute_script(&sql).unwrap();
    let got: Vec<(Option<String>, String)> = consume(&out, 1)
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .collect();
    assert_eq!(
        got,
        vec![
            (Some("a".to_string()), "first line".to_string()),
            (Some("b".to_string()), "second".to_string())
        ]
    );
    let err = engine()
        .collect(
            &(table(
                "two",
                "a STRING, b STRING",
                &t,
                &format!("{BOUNDED}, 'format' = 'raw'"),
            ) + "SELECT * FROM two;"),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the 'raw' format holds exactly one column"),
        "{err}"
    );
}

/// Numbers in the `raw` format (Flink docs, "Raw Format"): a message is the number's bytes
/// in `'raw.endianness'` (big-endian unless said). Bytes worked out by hand: 500 =
/// 0x000001F4, -2 = 0xFFFFFFFE, 1.5 = 0x3FF8000000000000.
#[test]
fn the_raw_format_reads_and_writes_numbers_in_either_byte_order() {
    let t = topic("raw-num", 1);
    let producer = producer_at(&bootstrap());
    let messages: [&[u8]; 3] = [
        &[0, 0, 1, 0xF4],
        &[0xFF, 0xFF, 0xFF, 0xFE],
        &[0xF4, 1, 0, 0],
    ];
    for m in messages {
        let r: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&t).partition(0).payload(m);
        producer.send(r).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    for (endianness, expected) in [
        ("big-endian", vec!["500", "-2", "-201261056"]),
        ("little-endian", vec!["-201261056", "-16777217", "500"]),
    ] {
        let sql = table(
            "n",
            "v INT",
            &t,
            &format!("{BOUNDED}, 'format' = 'raw', 'raw.endianness' = '{endianness}'"),
        ) + "SELECT v FROM n;";
        assert_eq!(
            rows_in_order(&engine().collect(&sql).unwrap()),
            expected,
            "{endianness}"
        );
    }
    // A message of the wrong length is a data error at its offset.
    let sql =
        table("d", "v DOUBLE", &t, &format!("{BOUNDED}, 'format' = 'raw'")) + "SELECT v FROM d;";
    let err = engine().collect(&sql).unwrap_err().to_string();
    assert!(
        err.contains(&format!(
            "kafka://{t}/0:0:1: a 'raw' DOUBLE value has 8 byte(s), found 4"
        )),
        "{err}"
    );
    // Written: DOUBLE 1.5 big-endian, BIGINT -2 little-endian.
    let (d, b) = (topic("raw-double", 1), topic("raw-bigint", 1));
    let sql = table("d", "v DOUBLE", &d, ", 'format' = 'raw'")
        + &table(
            "b",
            "v BIGINT",
            &b,
            ", 'format' = 'raw', 'raw.endianness' = 'little-endian'",
        )
        + "INSERT INTO d VALUES (1.5); INSERT INTO b VALUES (CAST(-2 AS BIGINT));";
    engine().execute_script(&sql).unwrap();
    let read_bytes = |topic: &str| -> Vec<u8> {
        let log = transactional_log(topic, 0);
        log.committed_bytes.into_iter().next().expect("one message")
    };
    assert_eq!(read_bytes(&d), vec![0x3F, 0xF8, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        read_bytes(&b),
        vec![0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]
    );
}

/// A job reading 3 partitions with one source subtask fails after a checkpoint; the same
/// job restored from that checkpoint with `'scan.parallelism' = '3'` gives each new
/// subtask its partitions' checkpointed offsets: the exactly-once filesystem sink holds
/// every id once.
#[test]
fn a_restore_at_another_scan_parallelism_reassigns_the_partitions() {
    let (t, _) = three_partitions();
    let dir = std::env::temp_dir().join(unique("sluice-kafka-rescale"));
    let (out, chk) = (dir.join("out"), dir.join("chk"));
    let job = |scan: usize, extra: &str| {
        format!(
            "SET 'pipeline.name' = 'rescale';
             SET 'execution.checkpointing.dir' = '{}';
             {extra}
             {}
             CREATE TABLE o (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}',
               'format' = 'csv');
             INSERT INTO o SELECT id FROM orders;",
            chk.display(),
            table(
                "orders",
                "id BIGINT, item STRING, price DOUBLE",
                &t,
                &format!("{BOUNDED}, 'format' = 'json', 'scan.parallelism' = '{scan}'")
            ),
            out.display()
        )
    };
    let mut first = Engine::new(EngineConfig {
        batch_size: 4,
        ..Default::default()
    });
    let err = first
        .execute_script(&job(
            1,
            "SET 'sluice.test.checkpoint-after-rows' = '12';
             SET 'sluice.test.failpoints' = 'source-after-row:17';
             SET 'restart-strategy.type' = 'none';",
        ))
        .unwrap_err()
        .to_string();
    assert!(err.contains("source-after-row"), "{err}");
    let partial = common::committed_lines(&out).len();
    assert_eq!(partial, 12, "the checkpoint after 12 rows committed them");
    Engine::new(EngineConfig::default())
        .execute_script(&job(3, "SET 'execution.state-recovery.path' = 'latest';"))
        .unwrap();
    let mut want: Vec<String> = (0..30).map(|i: i64| i.to_string()).collect();
    want.sort();
    assert_eq!(common::committed_lines(&out), want);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The broker restarted while an at-least-once Kafka → Kafka job runs: librdkafka
/// reconnects, the job goes on, and every row reaches the output topic.
#[test]
fn an_at_least_once_job_survives_a_broker_restart() {
    let (broker, output) =
        double_across_a_broker_restart("SET 'execution.checkpointing.mode' = 'AT_LEAST_ONCE';", "");
    let address = broker.address();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &address)
        .set("group.id", unique("restart-reader"))
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&output, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                seen.insert(
                    String::from_utf8_lossy(m.payload().unwrap())
                        .parse::<i64>()
                        .unwrap(),
                );
            }
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            _ => {}
        }
    }
    let want: std::collections::BTreeSet<i64> = (1..=2000).map(|n| n * 2).collect();
    assert_eq!(seen, want);
}

#[test]
fn timestamp_startup_and_bounded_modes_use_the_message_times() {
    // Ten messages at 2024-01-01 00:00:0<i> UTC (i = 0..9), partition 0.
    let t = topic("times", 1);
    let producer = producer_at(&bootstrap());
    for i in 0..10i64 {
        let v = format!(r#"{{"id":{i}}}"#);
        producer
            .send(
                BaseRecord::<'_, str, str>::to(&t)
                    .partition(0)
                    .payload(v.as_str())
                    .timestamp(1_704_067_200_000 + i * 1000),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    // From the first message at or after 00:00:03 to before the first at or after 00:00:07.
    let sql = table(
        "t",
        "id BIGINT",
        &t,
        ", 'format' = 'json', 'scan.startup.mode' = 'timestamp',
           'scan.startup.timestamp-millis' = '1704067203000',
           'scan.bounded.mode' = 'timestamp', 'scan.bounded.timestamp-millis' = '1704067207000'",
    ) + "SELECT id FROM t;";
    assert_eq!(
        rows_in_order(&engine().collect(&sql).unwrap()),
        vec!["3", "4", "5", "6"]
    );
}

/// A partition without messages holds the source subtask's watermark back (as in Flink),
/// until `'table.exec.source.idle-timeout'` leaves it out: then the windows of the other,
/// active partition fire while the (unbounded) job runs.
#[test]
fn an_idle_partition_stops_holding_the_watermark_after_the_idle_timeout() {
    let t = topic("idle", 2);
    // Partition 0 gets a message per second of event time, one every 20 ms, until the test
    // has its windows; partition 1 gets none.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (t, stop) = (t.clone(), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            let producer = producer_at(&bootstrap());
            let mut i = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 3000 {
                let v = format!(
                    r#"{{"id":{i},"ts":"{}"}}"#,
                    sluice::format_timestamp_ms(1_704_067_200_000 + i * 1000)
                );
                producer
                    .send(
                        BaseRecord::<'_, str, str>::to(&t)
                            .partition(0)
                            .payload(v.as_str()),
                    )
                    .map_err(|(e, _)| e)
                    .unwrap();
                producer.flush(Duration::from_secs(10)).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                i += 1;
            }
        })
    };
    let mut e = engine();
    e.execute_script(&format!(
        "SET 'table.exec.source.idle-timeout' = '500 ms';\n{}",
        table(
            "t",
            "id BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts",
            &t,
            ", 'format' = 'json', 'scan.startup.mode' = 'earliest-offset'",
        )
    ))
    .unwrap();
    let StatementResult::Query(job) = e
        .sql(
            "SELECT window_start, COUNT(*) FROM TABLE(
               TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND))
             GROUP BY window_start, window_end",
        )
        .unwrap()
    else {
        panic!("a query")
    };
    // Windows [0, 10) and [10, 20) close once partition 0 passes 20 s.
    // Read on another thread, so that a watermark held back fails the test, not hangs it.
    let handle = job.handle();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut job = job;
        while let Some(batch) = job.blocking_next() {
            if tx.send(rows_in_order(&[batch.unwrap()])).is_err() {
                break;
            }
        }
    });
    let mut rows = Vec::new();
    while rows.len() < 2 {
        let more = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the windows of partition 0 fire while partition 1 is idle");
        rows.extend(more);
    }
    handle.stop();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(rx);
    reader.join().unwrap();
    writer.join().unwrap();
    rows.sort();
    assert_eq!(
        rows[..2],
        ["2024-01-01 00:00:00,10", "2024-01-01 00:00:10,10"]
    );
}

/// A topic written in transactions ends with commit markers, which no reader is given: a
/// bounded scan still ends (at the markers' offsets) with the committed messages.
#[test]
fn a_bounded_scan_of_a_transactional_topic_ends() {
    let t = topic("txn", 1);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", unique("txn-writer"))
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    for batch in 0..3 {
        producer.begin_transaction().unwrap();
        for i in 0..4 {
            let v = format!(r#"{{"id":{}}}"#, batch * 4 + i);
            producer
                .send(
                    BaseRecord::<'_, str, str>::to(&t)
                        .partition(0)
                        .payload(v.as_str()),
                )
                .map_err(|(e, _)| e)
                .unwrap();
        }
        producer
            .commit_transaction(Duration::from_secs(30))
            .unwrap();
    }
    let sql = table(
        "t",
        "id BIGINT",
        &t,
        &format!("{BOUNDED}, 'format' = 'json'"),
    ) + "SELECT COUNT(*), SUM(id) FROM t;";
    let rows = rows_in_order(&engine().collect(&sql).unwrap());
    // 12 messages, ids 0..11: sum 66.
    assert_eq!(
        rows.last()
            .map(String::as_str)
            .map(|r| r.ends_with("12,66")),
        Some(true),
        "{rows:?}"
    );
}

/// With keys and values that may not parse, a message is dropped when either does: never
/// one message's key with another's value.
#[test]
fn a_bad_key_or_value_drops_its_own_message_only() {
    let t = topic("kv-bad", 1);
    let producer = producer_at(&bootstrap());
    for (k, v) in [
        (r#"{"id":1}"#, r#"{"name":"a"}"#),
        (r#"{"id":"x"}"#, r#"{"name":"b"}"#), // bad key
        (r#"{"id":3}"#, r#"{"name":7"#),      // bad value
        (r#"{"id":4}"#, r#"{"name":"d"}"#),
    ] {
        producer
            .send(
                BaseRecord::<'_, str, str>::to(&t)
                    .partition(0)
                    .key(k)
                    .payload(v),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let sql = table(
        "t",
        "id BIGINT, name STRING",
        &t,
        &format!(
            "{BOUNDED}, 'key.format' = 'json', 'key.fields' = 'id', 'key.json.ignore-parse-errors' = 'true',
             'value.format' = 'json', 'value.json.ignore-parse-errors' = 'true',
             'value.fields-include' = 'EXCEPT_KEY'"
        ),
    ) + "SELECT * FROM t;";
    assert_eq!(
        sorted_rows(&engine().collect(&sql).unwrap()),
        vec!["1,a", "4,d"]
    );
}
