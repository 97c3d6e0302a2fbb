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
//! does not wait at checkpoints. `exactly-once` (Kafka transactions) is not built yet and is
//! refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::datatypes::SchemaRef;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use super::{client_config, kafka_error, Format, Layout};
use crate::connectors::filesystem::{csv_bytes, json_bytes};
use crate::connectors::{BatchSink, Committable, FileFormat};
use crate::message::{RowKind, StreamBatch};

/// How long a flush may wait for acknowledgements (librdkafka's own `message.timeout.ms`
/// fails a message after 300 s by default, which then fails the flush first).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(600);

/// Keeps the first delivery error.
#[derive(Default)]
pub(crate) struct DeliveryErrors {
    first: Mutex<Option<String>>,
}

impl ClientContext for DeliveryErrors {}

impl ProducerContext for DeliveryErrors {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| e.to_string());
        }
    }
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
    producer: BaseProducer<DeliveryErrors>,
    layout: Layout,
    partitioner: Partitioner,
    subtask: usize,
    /// Partitions of the topic (for `fixed` and `round-robin`), read at the first write.
    partitions: Option<i32>,
    next_partition: i32,
    /// Wait for acknowledgements at checkpoints (`at-least-once`).
    at_least_once: bool,
    /// An `upsert-kafka` table (see the module docs).
    upsert: bool,
    /// The session time zone (a `TIMESTAMP` metadata column is wall-clock time in it).
    tz: sluice_common::time::Tz,
}

impl KafkaSink {
    /// A sink writing the rows of `schema` (the table's physical columns) to the table's
    /// topic.
    ///
    /// # Errors
    /// Missing or bad options (no single topic, no format, `exactly-once`, a
    /// change-data-capture format), a producer the properties cannot configure.
    pub fn new(
        table: &str,
        options: &ConnectorOptions,
        schema: SchemaRef,
        subtask: usize,
        time_zone: &str,
    ) -> Result<Self> {
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
        for format in std::iter::once(&layout.value.2).chain(layout.key.as_ref().map(|k| &k.2)) {
            if let Format::File(FileFormat::Changelog(e)) = format {
                return Err(SluiceError::NotSupported(format!(
                    "writing Kafka table '{table}' in '{}' (write 'json' or 'csv')",
                    e.name()
                )));
            }
        }
        let guarantee = options
            .get("sink.delivery-guarantee")
            .or_else(|| options.get("sink.semantic"))
            .map(|g| g.to_ascii_lowercase().replace('_', "-"))
            .unwrap_or_else(|| "at-least-once".into());
        let at_least_once = match guarantee.as_str() {
            "at-least-once" => true,
            "none" => false,
            "exactly-once" => {
                return Err(SluiceError::NotSupported(format!(
                    "'sink.delivery-guarantee' = 'exactly-once' of Kafka table '{table}' \
                     (Kafka transactions are not built yet; use 'at-least-once')"
                )))
            }
            other => {
                return Err(SluiceError::Config(format!(
                    "'sink.delivery-guarantee' of Kafka table '{table}' must be 'none', \
                     'at-least-once' or 'exactly-once', found '{other}'"
                )))
            }
        };
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
        let producer: BaseProducer<DeliveryErrors> = config
            .create_with_context(DeliveryErrors::default())
            .map_err(|e| kafka_error(table, "creating the producer", e))?;
        Ok(KafkaSink {
            table: table.to_string(),
            topic,
            producer,
            layout,
            partitioner,
            subtask,
            partitions: None,
            next_partition: 0,
            at_least_once,
            upsert,
            tz: sluice_common::time::parse_time_zone(time_zone).map_err(SluiceError::Config)?,
        })
    }

    fn partition_count(&mut self) -> Result<i32> {
        if let Some(n) = self.partitions {
            return Ok(n);
        }
        let metadata = self
            .producer
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
    fn encode(batch: &RecordBatch, format: Format) -> Result<Vec<Vec<u8>>> {
        let one_per_line = |bytes: Vec<u8>| -> Vec<Vec<u8>> {
            bytes
                .split(|b| *b == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
                .collect()
        };
        let n = batch.num_rows();
        match format {
            Format::Raw => super::raw::encode(batch),
            Format::File(FileFormat::Json) => {
                // JSON escapes line ends inside strings: one line per row.
                let mut lines = one_per_line(json_bytes(batch)?);
                lines.truncate(n);
                Ok(lines)
            }
            _ => {
                let mut lines = one_per_line(csv_bytes(batch, false)?);
                if lines.last().is_some_and(|l| l.is_empty()) {
                    lines.pop();
                }
                if lines.len() == n {
                    return Ok(lines);
                }
                // A quoted field holds a line end: one record at a time.
                (0..n)
                    .map(|i| {
                        let mut b = csv_bytes(&batch.slice(i, 1), false)?;
                        while b.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
                            b.pop();
                        }
                        Ok(b)
                    })
                    .collect()
            }
        }
    }

    fn check_delivered(&self) -> Result<()> {
        let first = self
            .producer
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

    fn flush(&self) -> Result<()> {
        self.producer.flush(FLUSH_TIMEOUT).map_err(|e| {
            kafka_error(&self.table, "waiting for the broker's acknowledgements", e)
        })?;
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
        let values = Self::encode(&value_batch, self.layout.value.2)?;
        let keys = match &self.layout.key {
            Some((indices, schema, format, _)) => {
                let key_batch = RecordBatch::try_new(
                    Arc::clone(schema),
                    batch.project(indices)?.columns().to_vec(),
                )?;
                Some(Self::encode(&key_batch, *format)?)
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
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        // The client's queue is full: let deliveries drain it.
                        record = r;
                        self.producer.poll(Duration::from_millis(100));
                    }
                    Err((e, _)) => return Err(kafka_error(&self.table, "writing a message", e)),
                }
            }
        }
        self.producer.poll(Duration::ZERO);
        self.check_delivered()
    }

    fn pre_commit(&mut self, _checkpoint_id: u64) -> Result<Committable> {
        if self.at_least_once {
            self.flush()?;
        } else {
            self.producer.poll(Duration::ZERO);
        }
        Ok(Committable::Nothing)
    }

    fn finish(&mut self) -> Result<Committable> {
        self.flush()?;
        Ok(Committable::Nothing)
    }
}
