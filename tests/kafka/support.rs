//! Helpers of the Kafka test binaries (`tests/kafka.rs`, `tests/kafka_exactly_once.rs`):
//! the broker, topics, writing and reading messages with librdkafka, and reading a
//! partition's raw log with its transaction markers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use sluice::arrow::array::RecordBatch;
use sluice::{Engine, EngineConfig};

use crate::common;

/// The broker's address: `SLUICE_TEST_KAFKA_BOOTSTRAP`, else the one
/// `scripts/kafka-test-server start` starts (and builds, the first time on a machine).
pub fn bootstrap() -> String {
    static ADDRESS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ADDRESS
        .get_or_init(|| {
            if let Ok(a) = std::env::var("SLUICE_TEST_KAFKA_BOOTSTRAP") {
                return a;
            }
            let out = std::process::Command::new("scripts/kafka-test-server")
                .arg("start")
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .expect("running scripts/kafka-test-server");
            assert!(
                out.status.success(),
                "scripts/kafka-test-server start failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
        .clone()
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000,
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    )
}

/// A new topic with `partitions` partitions.
pub fn topic(prefix: &str, partitions: i32) -> String {
    let name = unique(prefix);
    create_topic_at(&bootstrap(), &name, partitions);
    name
}

/// Creates topic `name` with `partitions` partitions on the broker at `address`.
pub fn create_topic_at(address: &str, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", address)
        .create()
        .expect("admin client");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = rt
        .block_on(admin.create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .expect("create topics");
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

/// A producer writing to the broker at `address`.
pub fn producer_at(address: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", address)
        .create()
        .expect("producer")
}

/// Writes `(partition, key, value)` messages and waits for their acknowledgement.
pub fn produce(topic: &str, messages: &[(i32, Option<&str>, &str)]) {
    let producer = producer_at(&bootstrap());
    for (p, k, v) in messages {
        let mut r: BaseRecord<'_, str, str> = BaseRecord::to(topic).partition(*p).payload(*v);
        if let Some(k) = k {
            r = r.key(*k);
        }
        producer.send(r).map_err(|(e, _)| e).expect("send");
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Every message of `topic` (all partitions): `(partition, key, value)`, per partition
/// in offset order.
pub fn consume(topic: &str, partitions: i32) -> Vec<(i32, Option<String>, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("reader"))
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut at_end = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while at_end.len() < partitions as usize && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                out.push((
                    m.partition(),
                    m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                ))
            }
        }
    }
    out
}

pub fn engine() -> Engine {
    Engine::new(EngineConfig::default())
}

pub fn sorted_rows(batches: &[RecordBatch]) -> Vec<String> {
    let csv = common::rows_as_csv(batches);
    let mut rows: Vec<String> = csv.lines().skip(1).map(str::to_string).collect();
    rows.sort();
    rows
}

pub fn table(name: &str, columns: &str, topic: &str, extra: &str) -> String {
    format!(
        "CREATE TABLE {name} ({columns}) WITH (
            'connector' = 'kafka',
            'topic' = '{topic}',
            'properties.bootstrap.servers' = '{}'{extra}
        );\n",
        bootstrap()
    )
}

pub const BOUNDED: &str = ",
            'scan.startup.mode' = 'earliest-offset',
            'scan.bounded.mode' = 'latest-offset'";

/// 3 partitions, 10 JSON messages each: id = 10 * partition + i.
pub fn three_partitions() -> (String, Vec<String>) {
    let t = topic("orders", 3);
    let mut messages = Vec::new();
    let mut expected = Vec::new();
    for p in 0..3 {
        for i in 0..10 {
            let id = 10 * p + i;
            messages.push((
                p,
                None,
                format!(
                    r#"{{"id": {id}, "item": "item-{id}", "price": {}.5}}"#,
                    id * 2
                ),
            ));
            expected.push(format!("{id},item-{id},{}.5", id * 2));
        }
    }
    let refs: Vec<(i32, Option<&str>, &str)> = messages
        .iter()
        .map(|(p, k, v)| (*p, *k, v.as_str()))
        .collect();
    produce(&t, &refs);
    expected.sort();
    (t, expected)
}

/// A second broker of the test server's build, on its own port and data directory, for a
/// test that restarts it (the shared one serves the other tests meanwhile).
pub struct OwnBroker {
    port: u16,
    tmp: std::path::PathBuf,
}

impl OwnBroker {
    pub fn start() -> Self {
        bootstrap(); // builds the broker if needed
        let port = 9200 + (std::process::id() % 500) as u16;
        let tmp = std::env::temp_dir().join(unique("sluice-own-broker"));
        std::fs::create_dir_all(&tmp).unwrap();
        let b = OwnBroker { port, tmp };
        b.script("start");
        b
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn script(&self, verb: &str) {
        let out = std::process::Command::new("scripts/kafka-test-server")
            .arg(verb)
            .env("SLUICE_KAFKA_PORT", self.port.to_string())
            .env("TMPDIR", &self.tmp)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{verb}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.script("stop");
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// What a partition's raw log holds, read with its transaction markers (Fetch at
/// `read_uncommitted`, batches decoded by the `kafka-protocol` crate).
#[derive(Debug, Default)]
pub struct TransactionalLog {
    /// Messages outside transactions, and those of transactions that ended with a commit
    /// marker, as `(key, value)` in the order of their commit (per partition).
    pub committed: Vec<(Option<String>, String)>,
    /// The committed messages' values as bytes (in the same order).
    pub committed_bytes: Vec<Vec<u8>>,
    /// Messages of transactions that ended with an abort marker.
    pub aborted: usize,
    /// Messages of transactions with no marker (still open).
    pub open: usize,
    /// Every message's partition leader epoch (its batch's), by offset.
    pub leader_epochs: BTreeMap<i64, i32>,
}

/// Reads partition `partition` of `topic` from its start to its end as a `read_committed`
/// reader of a correct broker sees it: a transaction's messages count once its producer
/// writes a commit marker, never if an abort marker (Kafka's "Transactional Messaging",
/// control batches: key = version (int16), type (int16: 0 abort, 1 commit)). The test
/// broker shows open transactions to `read_committed` readers (README "Kafka"), so the
/// exactly-once tests read through this.
pub fn transactional_log(topic: &str, partition: i32) -> TransactionalLog {
    transactional_log_at(&bootstrap(), topic, partition)
}

/// [`transactional_log`] from the broker at `address`.
pub fn transactional_log_at(address: &str, topic: &str, partition: i32) -> TransactionalLog {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::RecordBatchDecoder;
    use sluice_runtime::connectors::kafka::protocol::Connection;

    let mut c = Connection::open(address).expect("broker connection");
    let version = c.version::<FetchRequest>(11).expect("fetch version");
    let mut log = TransactionalLog::default();
    // Per producer id: the messages of its open transaction.
    type Message = ((Option<String>, String), Vec<u8>);
    let mut open: BTreeMap<i64, Vec<Message>> = BTreeMap::new();
    let text =
        |b: &Option<bytes::Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    let mut offset = 0i64;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "reading {topic}/{partition} took too long"
        );
        let request = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(64 << 20)
            .with_isolation_level(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(offset)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(32 << 20)])]);
        let response = c.send_version(&request, version).expect("fetch");
        let data = &response.responses[0].partitions[0];
        assert_eq!(data.error_code, 0, "fetching {topic}/{partition}");
        if offset >= data.high_watermark {
            break;
        }
        let mut records = data.records.clone().unwrap_or_default();
        let mut progressed = false;
        while !records.is_empty() {
            let Ok(set) = RecordBatchDecoder::decode(&mut records) else {
                break; // a partial batch at the end of the response
            };
            for r in set.records {
                if r.offset < offset {
                    continue;
                }
                offset = r.offset + 1;
                progressed = true;
                if !r.control {
                    log.leader_epochs.insert(r.offset, r.partition_leader_epoch);
                }
                if r.control {
                    let key = r.key.clone().unwrap_or_default();
                    let kind = if key.len() >= 4 {
                        i16::from_be_bytes([key[2], key[3]])
                    } else {
                        -1
                    };
                    let messages = open.remove(&r.producer_id).unwrap_or_default();
                    match kind {
                        1 => {
                            for (m, bytes) in messages {
                                log.committed.push(m);
                                log.committed_bytes.push(bytes);
                            }
                        }
                        0 => log.aborted += messages.len(),
                        other => panic!("control record of type {other} in {topic}/{partition}"),
                    }
                } else if r.transactional {
                    open.entry(r.producer_id).or_default().push((
                        (text(&r.key), text(&r.value).unwrap_or_default()),
                        r.value.as_ref().map(|v| v.to_vec()).unwrap_or_default(),
                    ));
                } else {
                    log.committed
                        .push((text(&r.key), text(&r.value).unwrap_or_default()));
                    log.committed_bytes
                        .push(r.value.as_ref().map(|v| v.to_vec()).unwrap_or_default());
                }
            }
        }
        assert!(
            progressed,
            "no progress reading {topic}/{partition} at offset {offset}"
        );
    }
    log.open = open.values().map(Vec::len).sum();
    log
}

/// Copies `three_partitions()` into a new topic of `out_partitions` partitions through a
/// job failing twice (after source rows 14 and 25; checkpoints after rows 9 and 18) in
/// checkpointing mode `mode`, the sink table's extra options `sink_options`. Returns the
/// output topic and the expected rows (sorted).
pub fn copy_across_failures(
    mode: &str,
    sink_options: &str,
    out_partitions: i32,
) -> (String, Vec<String>) {
    let (t, expected) = three_partitions();
    let out = topic("copy", out_partitions);
    let sql = format!(
        "SET 'execution.checkpointing.dir' = 'memory://{}';
         SET 'execution.checkpointing.mode' = '{mode}';
         SET 'sluice.test.checkpoint-after-rows' = '9,18';
         SET 'sluice.test.failpoints' = 'source-after-row:14,source-after-row:25';
         SET 'restart-strategy.fixed-delay.attempts' = '5';
         SET 'restart-strategy.fixed-delay.delay' = '0 ms';
         {}{}
         INSERT INTO copy SELECT * FROM orders;",
        unique("kafka-copy"),
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
            &format!(", 'format' = 'csv'{sink_options}")
        ),
    );
    let mut e = Engine::new(EngineConfig {
        batch_size: 4,
        ..Default::default()
    });
    e.execute_script(&sql).unwrap();
    (out, expected)
}

/// Runs `INSERT INTO o SELECT n * 2 FROM i` (`n` = 1..=2000 in one partition) on a broker
/// of its own that restarts (data kept) after the job read the first half, with
/// `settings` (SET statements) and the sink table's extra options `sink_options`. Returns
/// the broker (still running) and the output topic.
pub fn double_across_a_broker_restart(settings: &str, sink_options: &str) -> (OwnBroker, String) {
    let broker = OwnBroker::start();
    let address = broker.address();
    let (input, output) = (unique("restart-in"), unique("restart-out"));
    create_topic_at(&address, &input, 1);
    create_topic_at(&address, &output, 1);
    let producer = producer_at(&address);
    let produce_range = |from: i64, to: i64| {
        for id in from..=to {
            let v = id.to_string();
            producer
                .send(
                    BaseRecord::<'_, str, str>::to(&input)
                        .partition(0)
                        .payload(v.as_str()),
                )
                .map_err(|(e, _)| e)
                .unwrap();
        }
        producer.flush(Duration::from_secs(60)).unwrap();
    };
    produce_range(1, 1000);
    let mut e = engine();
    e.execute_script(&format!(
        "SET 'execution.checkpointing.interval' = '200 ms';
         SET 'execution.checkpointing.dir' = 'memory://{}';
         {settings}
         CREATE TABLE i (n BIGINT) WITH ('connector' = 'kafka', 'topic' = '{input}',
           'properties.bootstrap.servers' = '{address}', 'format' = 'csv',
           'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'specific-offsets',
           'scan.bounded.specific-offsets' = 'partition:0,offset:2000');
         CREATE TABLE o (n BIGINT) WITH ('connector' = 'kafka', 'topic' = '{output}',
           'properties.bootstrap.servers' = '{address}', 'format' = 'csv'{sink_options});",
        unique("broker-restart")
    ))
    .unwrap();
    let sluice::StatementResult::Insert(job) = e.sql("INSERT INTO o SELECT n * 2 FROM i").unwrap()
    else {
        panic!("an insert")
    };
    let runner = std::thread::spawn(move || sluice::drain(job).map(|_| ()));
    // The job has read the first half and waits for the rest; restart the broker, then
    // write the second half.
    std::thread::sleep(Duration::from_millis(1500));
    broker.script("restart");
    produce_range(1001, 2000);
    runner
        .join()
        .unwrap()
        .expect("the job survives the restart");
    (broker, output)
}

/// Writes `{"id": n}` for n = 1..=4000 into `topic` (partition n mod `partitions`) at
/// about 1,000 messages a second, from a thread: input that arrives while a job runs.
pub fn write_ids_while_running(topic: &str, partitions: i64) -> std::thread::JoinHandle<()> {
    let topic = topic.to_string();
    std::thread::spawn(move || {
        for chunk in (1..=4000i64).collect::<Vec<_>>().chunks(50) {
            let messages: Vec<(i32, String)> = chunk
                .iter()
                .map(|id| ((id % partitions) as i32, format!(r#"{{"id":{id}}}"#)))
                .collect();
            let refs: Vec<(i32, Option<&str>, &str)> = messages
                .iter()
                .map(|(p, v)| (*p, None, v.as_str()))
                .collect();
            produce(&topic, &refs);
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// `sluice run FILE` (with `--from-checkpoint latest` when `resume`), output discarded.
pub fn sluice_run(file: &std::path::Path, resume: bool) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.args(["run", file.to_str().unwrap()]);
    if resume {
        c.args(["--from-checkpoint", "latest"]);
    }
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    c
}
