//! Writing a Kafka table: one message per row of an append-only input; for an
//! `upsert-kafka` table, one message per change of a key (Flink docs, "Upsert Kafka SQL
//! Connector"): `+I`/`+U` the row as the key's value; `-D` a tombstone (the key, no value);
//! `-U` nothing when the `+U` of its key follows, else a tombstone (Flink's serializer
//! writes `-U` as a tombstone; its planner sends `-U` to an upsert sink only when a `+U`
//! may not follow, as after a filter on an aggregate).
//!
//! The value is the row's value columns in `value.format` (one JSON object, or one CSV
//! record without its line end); the key, when `key.fields` and `key.format` are set, the
//! key columns in the key format. `sink.partitioner`: `default` (a keyed message goes to
//! the murmur2 hash of its key, as Kafka's Java client and so Flink place it; a message
//! without a key to librdkafka's sticky choice), `fixed` (sink subtask i writes partition
//! i mod n, Flink's `FlinkFixedPartitioner`), `round-robin`.
//!
//! `sink.delivery-guarantee` (Flink docs, "Consistency guarantees"): `at-least-once`
//! (Flink's default) waits at every checkpoint's pre-commit and at the end until the
//! broker acknowledged every message written before, and fails on any delivery error, so a
//! restore from that checkpoint loses nothing (it may write some messages again); `none`
//! does not wait at checkpoints; `exactly-once` writes each checkpoint interval in a Kafka
//! transaction (`sink.transactional-id-prefix`), committed when the checkpoint completes
//! (see [`super::transaction`]): readers with `isolation.level` = `read_committed` see each
//! message once, after the checkpoint that covers it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::datatypes::SchemaRef;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use super::transaction::{abort_lingering, transactional_id, KafkaTransaction};
use super::{client_config, kafka_error, Format, Layout};
use crate::connectors::commit::{PendingCommit, Recovery};
use crate::connectors::filesystem::{csv_bytes, json_bytes};
use crate::connectors::{BatchSink, Committable, ConnectorContext, FileFormat};
use crate::message::{RowKind, StreamBatch};

/// How long a flush may wait for acknowledgements (librdkafka's own `message.timeout.ms`
/// fails a message after 300 s by default, which then fails the flush first).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(600);

/// How often a long flush says that it is still waiting.
const FLUSH_PROGRESS: Duration = Duration::from_secs(30);

/// How long opening a transaction (InitProducerId) or learning its producer id may take.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// `transaction.timeout.ms` unless `properties.transaction.timeout.ms` says otherwise:
/// one hour, Flink's `KafkaSink` default (Kafka brokers allow 15 minutes unless their
/// `transaction.max.timeout.ms` is raised, as Flink's docs say).
const DEFAULT_TRANSACTION_TIMEOUT_MS: i64 = 3_600_000;

/// What a sink's producer reports: the first delivery error, and (transactional
/// producers) the producer id and epoch, from librdkafka's statistics (`eos`), since its
/// API does not expose them.
#[derive(Default)]
pub(crate) struct SinkClient {
    first: Mutex<Option<String>>,
    producer: Mutex<Option<(i64, i16)>>,
}

impl ClientContext for SinkClient {
    fn stats(&self, statistics: Statistics) {
        if let Some(eos) = statistics.eos {
            if eos.idemp_state == "Assigned" && eos.producer_id >= 0 {
                let epoch = i16::try_from(eos.producer_epoch).unwrap_or(-1);
                *self.producer.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((eos.producer_id, epoch));
            }
        }
    }
}

impl ProducerContext for SinkClient {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| e.to_string());
        }
    }
}

/// `sink.delivery-guarantee` (alias `sink.semantic`, Flink's older name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guarantee {
    None,
    AtLeastOnce,
    ExactlyOnce,
}

fn guarantee(options: &ConnectorOptions, table: &str) -> Result<Guarantee> {
    let g = options
        .get("sink.delivery-guarantee")
        .or_else(|| options.get("sink.semantic"))
        .map(|g| g.to_ascii_lowercase().replace('_', "-"))
        .unwrap_or_else(|| "at-least-once".into());
    match g.as_str() {
        "at-least-once" => Ok(Guarantee::AtLeastOnce),
        "none" => Ok(Guarantee::None),
        "exactly-once" => Ok(Guarantee::ExactlyOnce),
        other => Err(SluiceError::Config(format!(
            "'sink.delivery-guarantee' of Kafka table '{table}' must be 'none', \
             'at-least-once' or 'exactly-once', found '{other}'"
        ))),
    }
}

/// An exactly-once sink's settings and its open transaction.
struct Transactions {
    /// `sink.transactional-id-prefix`.
    prefix: String,
    bootstrap_servers: String,
    /// The client configuration without `transactional.id`.
    config: ClientConfig,
    /// The checkpoint whose transaction is open.
    checkpoint: u64,
    /// The open transaction has messages.
    written: bool,
}

/// The settings of an exactly-once Kafka sink table: (prefix, bootstrap servers,
/// `transaction.timeout.ms`).
///
/// # Errors
/// No `sink.transactional-id-prefix` (Flink's error), a secured connection (the recovery
/// commit speaks the protocol over plain TCP), a transaction timeout that is not a number
/// or not longer than the checkpoint interval.
fn transaction_settings(
    options: &ConnectorOptions,
    table: &str,
    interval: Option<Duration>,
) -> Result<(String, String, i64)> {
    let prefix = options
        .get("sink.transactional-id-prefix")
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| {
            SluiceError::Config(format!(
                "Kafka table '{table}': 'sink.transactional-id-prefix' must be set when \
                 'sink.delivery-guarantee' is 'exactly-once' (unique to the job: its \
                 transactional ids are '<prefix>-<subtask>-<checkpoint>')"
            ))
        })?;
    if let Some(p) = options
        .get("properties.security.protocol")
        .filter(|p| !p.eq_ignore_ascii_case("plaintext"))
    {
        return Err(SluiceError::NotSupported(format!(
            "'sink.delivery-guarantee' = 'exactly-once' of Kafka table '{table}' over \
             'security.protocol' = '{p}' (a restore commits the checkpoint's transactions \
             over plain TCP; use 'at-least-once', or a PLAINTEXT listener)"
        )));
    }
    let bootstrap = options
        .get("properties.bootstrap.servers")
        .cloned()
        .unwrap_or_default();
    let timeout_ms = match options.get("properties.transaction.timeout.ms") {
        None => DEFAULT_TRANSACTION_TIMEOUT_MS,
        Some(t) => t
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| {
                SluiceError::Config(format!(
                    "'properties.transaction.timeout.ms' of Kafka table '{table}' must be a \
                 positive number of milliseconds, found '{t}'"
                ))
            })?,
    };
    if let Some(interval) = interval {
        if timeout_ms as u128 <= interval.as_millis() {
            return Err(SluiceError::Config(format!(
                "Kafka table '{table}': 'properties.transaction.timeout.ms' ({timeout_ms} ms) \
                 must exceed the checkpoint interval ({} ms) plus the longest expected \
                 downtime: a transaction stays open from one checkpoint until the next one \
                 completes, and after a failure until the restore commits it; the broker \
                 aborts it after this timeout, losing its messages",
                interval.as_millis()
            )));
        }
    }
    Ok((prefix.trim().to_string(), bootstrap, timeout_ms))
}

/// Recovery of an exactly-once Kafka sink table (see [`crate::connectors::commit::recover_sink`]):
/// aborts the transactions the job's runs may have left open. Returns `false` (nothing
/// done) for any other table.
///
/// # Errors
/// Bad options; the broker cannot be reached or refuses.
pub(crate) fn recover(table: &str, options: &ConnectorOptions, r: &Recovery<'_>) -> Result<bool> {
    let kafka = matches!(
        options.get("connector").map(String::as_str),
        Some("kafka" | "upsert-kafka")
    );
    if !kafka || guarantee(options, table)? != Guarantee::ExactlyOnce {
        return Ok(false);
    }
    let (prefix, bootstrap, timeout_ms) = transaction_settings(options, table, None)?;
    abort_lingering(
        &bootstrap,
        &prefix,
        r.subtasks,
        r.from_checkpoint,
        r.through_checkpoint,
        i32::try_from(timeout_ms).unwrap_or(i32::MAX),
    )
    .map_err(|e| {
        SluiceError::Execution(format!(
            "Kafka table '{table}': aborting the transactions earlier runs left open: {e}"
        ))
    })?;
    Ok(true)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Partitioner {
    Default,
    Fixed,
    RoundRobin,
}

/// Writes rows as messages to one topic.
pub struct KafkaSink {
    table: String,
    topic: String,
    /// The producer (for `exactly-once`, the one of the open transaction; none after the
    /// last one was pre-committed at the end).
    producer: Option<BaseProducer<SinkClient>>,
    layout: Layout,
    partitioner: Partitioner,
    subtask: usize,
    /// Partitions of the topic (for `fixed` and `round-robin`), read at the first write.
    partitions: Option<i32>,
    next_partition: i32,
    /// Wait for acknowledgements at checkpoints (`at-least-once`, `exactly-once`).
    at_least_once: bool,
    /// `exactly-once`: the transactions.
    transactions: Option<Transactions>,
    /// An `upsert-kafka` table (see the module docs).
    upsert: bool,
    /// The session time zone (a `TIMESTAMP` metadata column is wall-clock time in it).
    tz: sluice_common::time::Tz,
}

impl KafkaSink {
    /// A sink writing the rows of `schema` (the table's physical columns) to the table's
    /// topic.
    ///
    /// A sink for subtask `ctx.subtask`; an `exactly-once` one opens the transaction of
    /// checkpoint `ctx.first_checkpoint_id` at once.
    ///
    /// # Errors
    /// Missing or bad options (no single topic, no format, a change-data-capture format,
    /// `exactly-once` without `sink.transactional-id-prefix`), a producer the properties
    /// cannot configure, a transaction the broker does not open.
    pub fn new(
        table: &str,
        options: &ConnectorOptions,
        schema: SchemaRef,
        ctx: &ConnectorContext,
    ) -> Result<Self> {
        let subtask = ctx.subtask;
        let topic = match (options.get("topic"), options.get("topic-pattern")) {
            (Some(t), None) if !t.contains(';') && !t.trim().is_empty() => t.trim().to_string(),
            _ => {
                return Err(SluiceError::Config(format!(
                    "Kafka table '{table}' is written to and needs one 'topic' (not a list or \
                     'topic-pattern')"
                )))
            }
        };
        let upsert = options.get("connector").map(String::as_str) == Some("upsert-kafka");
        if upsert && !options.contains_key("key.format") {
            return Err(SluiceError::Config(format!(
                "upsert-kafka table '{table}' needs the option 'key.format' (the primary key's format)"
            )));
        }
        let layout = Layout::new(options, &schema, table)?;
        let parts = std::iter::once((&layout.value.1, &layout.value.2))
            .chain(layout.key.as_ref().map(|k| (&k.1, &k.2)));
        for (part_schema, format) in parts {
            match format {
                Format::File(FileFormat::Changelog(e)) => {
                    return Err(SluiceError::NotSupported(format!(
                        "writing Kafka table '{table}' in '{}' (write 'json' or 'csv')",
                        e.name()
                    )))
                }
                Format::File(f) => {
                    crate::connectors::check_format_types(*f, part_schema, table, true)?
                }
                Format::Raw => {}
            }
        }
        let guarantee = guarantee(options, table)?;
        let partitioner = match options
            .get("sink.partitioner")
            .map(|p| p.to_ascii_lowercase())
        {
            None => Partitioner::Default,
            Some(p) if p == "default" => Partitioner::Default,
            Some(p) if p == "fixed" => Partitioner::Fixed,
            Some(p) if p == "round-robin" => Partitioner::RoundRobin,
            Some(p) => {
                return Err(SluiceError::NotSupported(format!(
                    "'sink.partitioner' = '{p}' of Kafka table '{table}' (supported: 'default', \
                     'fixed', 'round-robin'; a Java class cannot be loaded)"
                )))
            }
        };
        let mut config = client_config(options, table)?;
        if !options.contains_key("properties.partitioner") {
            // Kafka's Java client (and so Flink) places a keyed message by murmur2.
            config.set("partitioner", "murmur2_random");
        }
        let (producer, transactions) = if guarantee == Guarantee::ExactlyOnce {
            let (prefix, bootstrap_servers, timeout_ms) =
                transaction_settings(options, table, ctx.checkpoint_interval)?;
            config.set("transaction.timeout.ms", timeout_ms.to_string());
            // The producer id and epoch come with the statistics (see `SinkClient`).
            config.set("statistics.interval.ms", "100");
            let t = Transactions {
                prefix,
                bootstrap_servers,
                config,
                checkpoint: ctx.first_checkpoint_id,
                written: false,
            };
            (open_transaction(&t, table, subtask)?, Some(t))
        } else {
            let producer: BaseProducer<SinkClient> = config
                .create_with_context(SinkClient::default())
                .map_err(|e| kafka_error(table, "creating the producer", e))?;
            (producer, None)
        };
        Ok(KafkaSink {
            table: table.to_string(),
            topic,
            producer: Some(producer),
            layout,
            partitioner,
            subtask,
            partitions: None,
            next_partition: 0,
            at_least_once: guarantee != Guarantee::None,
            transactions,
            upsert,
            tz: sluice_common::time::parse_time_zone(&ctx.time_zone)
                .map_err(SluiceError::Config)?,
        })
    }

    fn partition_count(&mut self) -> Result<i32> {
        if let Some(n) = self.partitions {
            return Ok(n);
        }
        let metadata = self
            .producer()?
            .client()
            .fetch_metadata(Some(&self.topic), Duration::from_secs(30))
            .map_err(|e| kafka_error(&self.table, "reading the topic's metadata", e))?;
        let n = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .map(|t| t.partitions().len() as i32)
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                SluiceError::Execution(format!(
                    "Kafka table '{}': topic '{}' has no partitions",
                    self.table, self.topic
                ))
            })?;
        self.partitions = Some(n);
        Ok(n)
    }

    /// One encoded part per row.
    fn encode(
        batch: &RecordBatch,
        format: Format,
        options: &ConnectorOptions,
    ) -> Result<Vec<Vec<u8>>> {
        let one_per_line = |bytes: Vec<u8>| -> Vec<Vec<u8>> {
            bytes
                .split(|b| *b == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
                .collect()
        };
        let n = batch.num_rows();
        match format {
            Format::Raw => super::raw::encode(batch, options),
            Format::File(FileFormat::Json) => {
                // JSON escapes line ends inside strings: one line per row.
                let mut lines = one_per_line(json_bytes(batch)?);
                lines.truncate(n);
                Ok(lines)
            }
            _ => {
                let delimiter = crate::connectors::filesystem::CsvOptions::from_options(options)?
                    .array_delimiter;
                let mut lines = one_per_line(csv_bytes(batch, false, &delimiter)?);
                if lines.last().is_some_and(|l| l.is_empty()) {
                    lines.pop();
                }
                if lines.len() == n {
                    return Ok(lines);
                }
                // A quoted field holds a line end: one record at a time.
                (0..n)
                    .map(|i| {
                        let mut b = csv_bytes(&batch.slice(i, 1), false, &delimiter)?;
                        while b.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
                            b.pop();
                        }
                        Ok(b)
                    })
                    .collect()
            }
        }
    }

    fn producer(&self) -> Result<&BaseProducer<SinkClient>> {
        self.producer.as_ref().ok_or_else(|| {
            SluiceError::Internal(format!(
                "Kafka table '{}': written after its last transaction",
                self.table
            ))
        })
    }

    fn check_delivered(&self) -> Result<()> {
        let first = self
            .producer()?
            .context()
            .first
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match first {
            Some(e) => Err(kafka_error(&self.table, "a message was not delivered", e)),
            None => Ok(()),
        }
    }

    /// Waits until the broker acknowledged every message written (up to
    /// [`FLUSH_TIMEOUT`]), saying every [`FLUSH_PROGRESS`] how many are still waiting.
    fn flush(&self) -> Result<()> {
        let producer = self.producer()?;
        let started = std::time::Instant::now();
        loop {
            match producer.flush(FLUSH_PROGRESS) {
                Ok(()) => break,
                Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
                    if started.elapsed() < FLUSH_TIMEOUT =>
                {
                    crate::checkpoint::coordinator::warn(&format!(
                        "Kafka table '{}': {} message(s) not acknowledged by the broker after \
                         {} s; still waiting (up to {} s)",
                        self.table,
                        producer.in_flight_count(),
                        started.elapsed().as_secs(),
                        FLUSH_TIMEOUT.as_secs()
                    ));
                }
                Err(e) => {
                    return Err(kafka_error(
                        &self.table,
                        "waiting for the broker's acknowledgements",
                        e,
                    ))
                }
            }
        }
        self.check_delivered()
    }
}

impl BatchSink for KafkaSink {
    fn write(&mut self, stream_batch: &StreamBatch) -> Result<()> {
        let batch = &stream_batch.data;
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        let value_batch = batch.project(&self.layout.value.0)?;
        let values = Self::encode(&value_batch, self.layout.value.2, &self.layout.value.3)?;
        let keys = match &self.layout.key {
            Some((indices, schema, format, format_options)) => {
                let key_batch = RecordBatch::try_new(
                    Arc::clone(schema),
                    batch.project(indices)?.columns().to_vec(),
                )?;
                Some(Self::encode(&key_batch, *format, format_options)?)
            }
            None => None,
        };
        let partitions = match self.partitioner {
            Partitioner::Default => None,
            _ => Some(self.partition_count()?),
        };
        for (i, value) in values.iter().enumerate() {
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&self.topic);
            match stream_batch.row_kind(i) {
                // The old row of an update whose new row follows: the new row replaces it.
                RowKind::UpdateBefore
                    if self.upsert
                        && i + 1 < n
                        && stream_batch.row_kind(i + 1) == RowKind::UpdateAfter
                        && keys.as_ref().is_some_and(|k| k[i] == k[i + 1]) =>
                {
                    continue
                }
                // A delete, or an old row whose new one does not come (a filter after an
                // aggregate dropped it): a tombstone, the key alone (Flink's upsert-kafka
                // serializer writes both as tombstones).
                RowKind::Delete | RowKind::UpdateBefore if self.upsert => {}
                _ => record = record.payload(value.as_slice()),
            }
            for (c, key) in &self.layout.metadata {
                match key.as_str() {
                    "timestamp" => {
                        if let Some(ms) =
                            super::metadata::timestamp_of(batch.column(*c), i, &self.tz)?
                        {
                            record = record.timestamp(ms);
                        }
                    }
                    "headers" => {
                        if let Some(h) = super::metadata::headers_of(batch.column(*c).as_ref(), i)?
                        {
                            record = record.headers(h);
                        }
                    }
                    _ => {} // read-only keys are VIRTUAL in a written table (planner)
                }
            }
            if let Some(keys) = &keys {
                record = record.key(keys[i].as_slice());
            }
            match (self.partitioner, partitions) {
                (Partitioner::Fixed, Some(n)) => record = record.partition(self.subtask as i32 % n),
                (Partitioner::RoundRobin, Some(n)) => {
                    record = record.partition(self.next_partition % n);
                    self.next_partition = (self.next_partition + 1) % n;
                }
                _ => {}
            }
            loop {
                match self.producer()?.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        // The client's queue is full: let deliveries drain it.
                        record = r;
                        self.producer()?.poll(Duration::from_millis(100));
                    }
                    Err((e, _)) => return Err(kafka_error(&self.table, "writing a message", e)),
                }
            }
        }
        if let Some(t) = &mut self.transactions {
            t.written = true;
        }
        self.producer()?.poll(Duration::ZERO);
        self.check_delivered()
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Committable> {
        if self.transactions.is_some() {
            return self.pre_commit_transaction(Some(checkpoint_id));
        }
        if self.at_least_once {
            self.flush()?;
        } else {
            self.producer()?.poll(Duration::ZERO);
        }
        Ok(Committable::Nothing)
    }

    fn finish(&mut self) -> Result<Committable> {
        if self.transactions.is_some() {
            return self.pre_commit_transaction(None);
        }
        self.flush()?;
        Ok(Committable::Nothing)
    }
}

impl KafkaSink {
    /// Pre-commits the open transaction (flushes it; every message acknowledged) and,
    /// at a barrier of checkpoint `checkpoint_id`, opens the next one, named by the
    /// checkpoint after it. Returns the transaction to commit, if it has messages.
    fn pre_commit_transaction(&mut self, checkpoint_id: Option<u64>) -> Result<Committable> {
        self.flush()?;
        let no_transaction = || SluiceError::Internal("no Kafka transaction".into());
        let t = self.transactions.as_mut().ok_or_else(no_transaction)?;
        let id = transactional_id(&t.prefix, self.subtask, t.checkpoint);
        let written = std::mem::take(&mut t.written);
        let bootstrap_servers = t.bootstrap_servers.clone();
        let pending = if written {
            let (producer_id, producer_epoch) = producer_ids(self.producer()?, &self.table, &id)?;
            Some(KafkaTransaction {
                bootstrap_servers,
                transactional_id: id,
                producer_id,
                producer_epoch,
                table: self.table.clone(),
            })
        } else {
            None
        };
        let next = match checkpoint_id {
            Some(c) => {
                let t = self.transactions.as_mut().ok_or_else(no_transaction)?;
                t.checkpoint = c.max(t.checkpoint) + 1;
                Some(open_transaction(t, &self.table, self.subtask)?)
            }
            None => None,
        };
        let done = std::mem::replace(&mut self.producer, next);
        Ok(match (pending, done) {
            (Some(p), Some(done)) => {
                p.hold(done);
                Committable::Pending(vec![PendingCommit::Kafka(p)])
            }
            _ => Committable::Nothing,
        })
    }
}

/// A producer for `t`'s transaction of checkpoint `t.checkpoint`, its transaction begun.
fn open_transaction(
    t: &Transactions,
    table: &str,
    subtask: usize,
) -> Result<BaseProducer<SinkClient>> {
    let id = transactional_id(&t.prefix, subtask, t.checkpoint);
    let mut config = t.config.clone();
    config.set("transactional.id", &id);
    let producer: BaseProducer<SinkClient> = config
        .create_with_context(SinkClient::default())
        .map_err(|e| kafka_error(table, "creating the producer", e))?;
    producer
        .init_transactions(TRANSACTION_TIMEOUT)
        .and_then(|()| producer.begin_transaction())
        .map_err(|e| kafka_error(table, &format!("opening transaction '{id}'"), e))?;
    Ok(producer)
}

/// The producer id and epoch of `producer`'s transaction `id`, from its statistics.
fn producer_ids(producer: &BaseProducer<SinkClient>, table: &str, id: &str) -> Result<(i64, i16)> {
    let deadline = std::time::Instant::now() + TRANSACTION_TIMEOUT;
    loop {
        if let Some(ids) = *producer
            .context()
            .producer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
        {
            return Ok(ids);
        }
        if std::time::Instant::now() > deadline {
            return Err(kafka_error(
                table,
                &format!("transaction '{id}'"),
                "librdkafka reported no producer id",
            ));
        }
        producer.poll(Duration::from_millis(20));
    }
}
