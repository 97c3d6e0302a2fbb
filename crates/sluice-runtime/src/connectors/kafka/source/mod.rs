//! Reading a Kafka table: the partitions this source subtask owns, from the startup
//! offsets (or a checkpoint's) to the bounded mode's end offsets (or forever).
//!
//! The consumer is assigned its partitions directly (no group rebalancing, as Flink's
//! `KafkaSource`); the group id only names whose offsets `group-offsets` reads and whose
//! offsets are committed when a checkpoint completes. Start and end offsets are resolved to
//! numbers when the source starts (`earliest-offset`: the log start; `latest-offset`: the
//! high watermark; `timestamp`: the first offset at or after the time; `group-offsets`:
//! the group's committed offset, else `properties.auto.offset.reset`, else an error as in
//! Flink). Partitions found later (`scan.topic-partition-discovery.interval`) start at
//! their earliest offset, as in Flink.
//!
//! Source offset (checkpoint JSON): `{"partitions": {"<topic>/<partition>": next offset}}`
//! for the partitions this subtask reads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion_common::arrow::array::RecordBatch;
use datafusion_common::arrow::datatypes::SchemaRef;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use regex::Regex;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

mod decode;
mod offsets;

pub(crate) use offsets::merge_offsets;
use offsets::offsets_option;

use super::{client_config, decoder, kafka_error, partition_owner, Layout};
use crate::connectors::csv_source::ChunkFormat;
use crate::connectors::Source;
use crate::metrics::JobMetrics;

/// How long a metadata, offsets or commit request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `next_batch` waits for messages before it returns an empty batch (so that
/// barriers and stops are not held up while the topic is quiet).
const IDLE_POLL: Duration = Duration::from_millis(50);

/// What the table reads.
enum Topics {
    List(Vec<String>),
    Pattern(Regex),
}

/// `scan.startup.mode` / `scan.bounded.mode`.
#[derive(Debug, Clone)]
enum Offsets {
    Earliest,
    Latest,
    Group,
    Timestamp(i64),
    Specific(BTreeMap<i32, i64>),
}

/// One partition this subtask reads.
#[derive(Debug)]
struct Partition {
    /// The next offset to read.
    next: i64,
    /// Where reading ends (exclusive), for a bounded scan.
    stop: Option<i64>,
}

/// Reads the partitions of a Kafka table this source subtask owns.
pub struct KafkaSource {
    table: String,
    consumer: BaseConsumer,
    topics: Topics,
    physical: SchemaRef,
    layout: Layout,
    value: Arc<dyn ChunkFormat>,
    key: Option<Arc<dyn ChunkFormat>>,
    subtask: usize,
    readers: usize,
    startup: Offsets,
    bounded: Option<Offsets>,
    auto_offset_reset: Option<String>,
    group_id: Option<String>,
    /// `(topic, partition)` → state; empty until the source starts.
    partitions: BTreeMap<(String, i32), Partition>,
    /// Offsets of a checkpoint to resume from (`"topic/partition"` → next offset).
    restored: Option<BTreeMap<String, i64>>,
    started: bool,
    discovery: Option<Duration>,
    next_discovery: Instant,
    batch_size: usize,
    metrics: Arc<JobMetrics>,
    /// Messages polled but not yet returned, per partition, in the order partitions first
    /// had some (the oldest is served first). Their offsets are not yet in the position.
    pending: Vec<((String, i32), std::collections::VecDeque<Polled>)>,
    /// The last batch's partition and each row's offset, when rows and messages are one to
    /// one (so that [`Source::position_after`] is exact).
    last_batch: Option<((String, i32), Vec<i64>)>,
    /// The partition of the last batch with rows (`Source::last_split`).
    last_split: Option<(String, i32)>,
    /// The session time zone (a `TIMESTAMP` metadata column's wall-clock time).
    tz: sluice_common::time::Tz,
    /// An `upsert-kafka` table: a message is an upsert (`+U`) of its key's row, an empty
    /// value (a tombstone) its delete (`-D`); the planner normalizes them by the primary
    /// key (ChangelogNormalize).
    upsert: bool,
}

/// One message polled, copied out of the client's buffer.
struct Polled {
    offset: i64,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    /// Timestamp and headers, when the table has metadata columns.
    meta: crate::connectors::kafka::metadata::MessageMetadata,
}

impl KafkaSource {
    /// A source over the partitions that subtask `subtask` of `readers` owns.
    ///
    /// # Errors
    /// Missing or bad options (no topic, no format, a bad pattern or offsets), a client the
    /// properties cannot configure.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        table: &str,
        options: &ConnectorOptions,
        physical: SchemaRef,
        subtask: usize,
        readers: usize,
        time_zone: &str,
        batch_size: usize,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let topics = match (options.get("topic"), options.get("topic-pattern")) {
            (Some(_), Some(_)) => {
                return Err(SluiceError::Config(format!(
                    "Kafka table '{table}' sets both 'topic' and 'topic-pattern'"
                )))
            }
            (Some(t), None) => Topics::List(
                t.split(';')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect(),
            ),
            (None, Some(p)) => Topics::Pattern(Regex::new(&format!("^(?:{p})$")).map_err(|e| {
                SluiceError::Config(format!("'topic-pattern' of Kafka table '{table}': {e}"))
            })?),
            (None, None) => {
                return Err(SluiceError::Config(format!(
                    "Kafka table '{table}' needs the option 'topic' or 'topic-pattern'"
                )))
            }
        };
        let upsert = options.get("connector").map(String::as_str) == Some("upsert-kafka");
        if upsert && !options.contains_key("key.format") {
            return Err(SluiceError::Config(format!(
                "upsert-kafka table '{table}' needs the option 'key.format' (the primary key's format)"
            )));
        }
        let layout = Layout::new(options, &physical, table)?;
        let (_, value_schema, value_format, value_options) = &layout.value;
        if value_format.is_changelog() && !layout.metadata.is_empty() {
            return Err(SluiceError::NotSupported(format!(
                "Kafka table '{table}': METADATA columns with a change-data-capture format"
            )));
        }
        if upsert && value_format.is_changelog() {
            return Err(SluiceError::NotSupported(format!(
                "upsert-kafka table '{table}' with a change-data-capture 'value.format'"
            )));
        }
        if value_format.is_changelog() && layout.key.is_some() {
            return Err(SluiceError::NotSupported(format!(
                "Kafka table '{table}': a change-data-capture value format with 'key.fields'"
            )));
        }
        let value = decoder(
            *value_format,
            Arc::clone(value_schema),
            value_options,
            time_zone,
            table,
        )?;
        let key = match &layout.key {
            Some((_, schema, format, key_options)) => Some(decoder(
                *format,
                Arc::clone(schema),
                key_options,
                time_zone,
                table,
            )?),
            None => None,
        };
        let mut config = client_config(options, table)?;
        let group_id = options.get("properties.group.id").cloned();
        // Offsets are Sluice's to keep (checkpoints) and to commit (on completion).
        config.set("enable.auto.commit", "false");
        config.set("enable.auto.offset.store", "false");
        config.set("enable.partition.eof", "true");
        if !options.contains_key("properties.isolation.level") {
            config.set("isolation.level", "read_committed");
        }
        if !options.contains_key("properties.auto.offset.reset") {
            // Start offsets are resolved to numbers here; an offset that is out of range
            // later (deleted by retention) fails the job instead of silently jumping.
            config.set("auto.offset.reset", "error");
        }
        if group_id.is_none() {
            // librdkafka's consumer wants a group id even when nothing is committed.
            config.set("group.id", format!("sluice-{table}"));
        }
        let consumer: BaseConsumer = config
            .create()
            .map_err(|e| kafka_error(table, "creating the consumer", e))?;
        // An upsert-kafka table is read from the earliest offset (Flink's has no startup
        // option: the whole topic is the table).
        let startup = if upsert {
            Offsets::Earliest
        } else {
            offsets_option(options, "scan.startup.mode", table)?.unwrap_or(Offsets::Group)
        };
        let bounded = offsets_option(options, "scan.bounded.mode", table)?;
        if (matches!(startup, Offsets::Group) || matches!(bounded, Some(Offsets::Group)))
            && group_id.is_none()
        {
            return Err(SluiceError::Config(format!(
                "Kafka table '{table}' reads the group's offsets ('scan.startup.mode' is \
                 'group-offsets' unless set) and needs 'properties.group.id'; or set \
                 'scan.startup.mode' = 'earliest-offset'"
            )));
        }
        let discovery = match options.get("scan.topic-partition-discovery.interval") {
            None => Some(Duration::from_secs(300)),
            Some(v) => {
                let ms =
                    sluice_common::options::parse_duration_ms(v).map_err(SluiceError::Config)?;
                (ms > 0).then(|| Duration::from_millis(ms as u64))
            }
        };
        Ok(KafkaSource {
            table: table.to_string(),
            consumer,
            topics,
            physical,
            layout,
            value,
            key,
            subtask,
            readers: readers.max(1),
            startup,
            bounded,
            auto_offset_reset: options.get("properties.auto.offset.reset").cloned(),
            group_id,
            partitions: BTreeMap::new(),
            restored: None,
            started: false,
            discovery,
            next_discovery: Instant::now(),
            batch_size: batch_size.max(1),
            metrics,
            pending: Vec::new(),
            last_batch: None,
            last_split: None,
            upsert,
            tz: sluice_common::time::parse_time_zone(time_zone).map_err(SluiceError::Config)?,
        })
    }

    fn err(&self, doing: &str, e: impl std::fmt::Display) -> SluiceError {
        kafka_error(&self.table, doing, e)
    }

    /// The partitions of the table's topics that this subtask owns.
    fn owned_partitions(&self) -> Result<Vec<(String, i32)>> {
        let metadata = match &self.topics {
            Topics::List(list) if list.len() == 1 => self
                .consumer
                .fetch_metadata(Some(&list[0]), REQUEST_TIMEOUT),
            _ => self.consumer.fetch_metadata(None, REQUEST_TIMEOUT),
        }
        .map_err(|e| self.err("reading the topics' metadata", e))?;
        let mut out = Vec::new();
        for topic in metadata.topics() {
            let wanted = match &self.topics {
                Topics::List(list) => list.iter().any(|t| t == topic.name()),
                Topics::Pattern(re) => re.is_match(topic.name()),
            };
            if !wanted {
                continue;
            }
            if let Some(e) = topic.error() {
                if matches!(
                    e,
                    rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                ) {
                    return Err(SluiceError::Execution(format!(
                        "Kafka table '{}': topic '{}' does not exist",
                        self.table,
                        topic.name()
                    )));
                }
                return Err(self.err(
                    &format!("reading the metadata of topic '{}'", topic.name()),
                    KafkaError::MetadataFetch(e.into()),
                ));
            }
            for p in topic.partitions() {
                if partition_owner(topic.name(), p.id(), self.readers) == self.subtask {
                    out.push((topic.name().to_string(), p.id()));
                }
            }
        }
        if let Topics::List(list) = &self.topics {
            for t in list {
                if !metadata
                    .topics()
                    .iter()
                    .any(|m| m.name() == t && m.error().is_none())
                {
                    return Err(SluiceError::Execution(format!(
                        "Kafka table '{}': topic '{t}' does not exist",
                        self.table
                    )));
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Adds `new` partitions (not read so far) at `starts`, with their end offsets.
    fn add_partitions(&mut self, new: &[(String, i32)], starts: Vec<i64>) -> Result<()> {
        if new.is_empty() {
            return Ok(());
        }
        let stops = match &self.bounded {
            Some(mode) => self.resolve(&mode.clone(), new)?,
            None => vec![None; new.len()],
        };
        let mut tpl = TopicPartitionList::new();
        for (((t, p), start), stop) in new.iter().zip(starts).zip(stops) {
            let stop = match (&self.bounded, stop) {
                (None, _) => None,
                (Some(_), Some(s)) => Some(s),
                // A bounded group-offsets scan of a partition the group never read: nothing.
                (Some(_), None) => Some(start),
            };
            tpl.add_partition_offset(t, *p, Offset::Offset(start))
                .map_err(|e| self.err("assigning partitions", e))?;
            self.partitions
                .insert((t.clone(), *p), Partition { next: start, stop });
        }
        self.consumer
            .incremental_assign(&tpl)
            .map_err(|e| self.err("assigning partitions", e))
    }

    fn start(&mut self) -> Result<()> {
        self.started = true;
        let owned = self.owned_partitions()?;
        let starts: Vec<i64> = match self.restored.take() {
            Some(restored) => {
                // A checkpoint's partitions resume where it left them; partitions created
                // since start at their earliest offset.
                let mut out = Vec::new();
                for (t, p) in &owned {
                    match restored.get(&format!("{t}/{p}")) {
                        Some(o) => out.push(*o),
                        None => out.push(
                            self.resolve(&Offsets::Earliest, &[(t.clone(), *p)])?[0].unwrap_or(0),
                        ),
                    }
                }
                out
            }
            None => {
                let resolved = self.resolve(&self.startup.clone(), &owned)?;
                let mut out = Vec::new();
                for ((t, p), o) in owned.iter().zip(resolved) {
                    out.push(match o {
                        Some(o) => o,
                        None => self.reset(t, *p)?,
                    });
                }
                out
            }
        };
        self.add_partitions(&owned, starts)?;
        if let Some(every) = self.discovery {
            self.next_discovery = Instant::now() + every;
        }
        Ok(())
    }

    /// Looks for partitions created since the last look (they start at their earliest
    /// offset, as in Flink).
    fn discover(&mut self) -> Result<()> {
        let Some(every) = self.discovery else {
            return Ok(());
        };
        if Instant::now() < self.next_discovery {
            return Ok(());
        }
        self.next_discovery = Instant::now() + every;
        let owned = self.owned_partitions()?;
        let new: Vec<(String, i32)> = owned
            .into_iter()
            .filter(|k| !self.partitions.contains_key(k))
            .collect();
        let starts: Vec<i64> = self
            .resolve(&Offsets::Earliest, &new)?
            .into_iter()
            .map(|o| o.unwrap_or(0))
            .collect();
        self.add_partitions(&new, starts)
    }

    fn finished(&self) -> bool {
        self.bounded.is_some()
            && self
                .partitions
                .values()
                .all(|p| p.stop.is_some_and(|s| p.next >= s))
    }

    /// Polls messages into `pending` for at most `wait` (less once some are pending).
    fn poll(&mut self, wait: Duration) -> Result<()> {
        let deadline = Instant::now() + wait;
        let mut polled = 0usize;
        while polled < self.batch_size {
            let timeout = if polled == 0 && self.pending.is_empty() {
                deadline.saturating_duration_since(Instant::now())
            } else {
                Duration::ZERO
            };
            let Some(result) = self.consumer.poll(timeout) else {
                break;
            };
            let message = match result {
                Ok(m) => m,
                Err(KafkaError::PartitionEOF(_)) => {
                    // The end of what is readable now: control records (transaction
                    // markers) before it were never delivered.
                    self.advance_to_positions()?;
                    if self.finished() {
                        break;
                    }
                    continue;
                }
                Err(e) => return Err(self.err("reading messages", e)),
            };
            let key = (message.topic().to_string(), message.partition());
            let offset = message.offset();
            let Some(state) = self.partitions.get(&key) else {
                continue; // not ours (any more)
            };
            if state.stop.is_some_and(|s| offset >= s) {
                continue;
            }
            let meta = if self.layout.metadata.is_empty() {
                Default::default()
            } else {
                let headers = self.layout.metadata.iter().any(|(_, k)| k == "headers");
                crate::connectors::kafka::metadata::MessageMetadata::of(&message, headers)
            };
            let item = Polled {
                offset,
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().unwrap_or_default().to_vec(),
                meta,
            };
            JobMetrics::add(&self.metrics.bytes_in, item.value.len() as u64);
            match self.pending.iter_mut().find(|(k, _)| *k == key) {
                Some((_, q)) => q.push_back(item),
                None => self
                    .pending
                    .push((key, std::collections::VecDeque::from([item]))),
            }
            polled += 1;
        }
        // A quiet poll: partitions whose queue has drained may sit before control records
        // (an end-of-partition event comes once per end offset, maybe while rows were
        // still queued).
        if polled == 0 {
            self.advance_to_positions()?;
        }
        Ok(())
    }

    /// Moves each partition with nothing queued to the client's position (past control
    /// records, which are never delivered), so that a bounded scan of a transactional
    /// topic ends and its offsets are exact.
    fn advance_to_positions(&mut self) -> Result<()> {
        let position = self
            .consumer
            .position()
            .map_err(|e| self.err("reading positions", e))?;
        for e in position.elements() {
            let key = (e.topic().to_string(), e.partition());
            if self.pending.iter().any(|(k, q)| *k == key && !q.is_empty()) {
                continue;
            }
            if let (Offset::Offset(o), Some(p)) = (e.offset(), self.partitions.get_mut(&key)) {
                p.next = p.next.max(o);
            }
        }
        Ok(())
    }
}

impl Source for KafkaSource {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if !self.started {
            self.start()?;
        } else {
            self.discover()?;
        }
        if self.finished() {
            return Ok(None);
        }
        self.poll(IDLE_POLL)?;
        self.last_batch = None;
        self.last_split = None;
        // One partition per batch, the one waiting longest: a batch's rows are in offset
        // order, so a position inside it is exact (`position_after`).
        let Some(i) = self.pending.iter().position(|(_, q)| !q.is_empty()) else {
            self.pending.clear();
            return Ok(Some(RecordBatch::new_empty(Arc::clone(&self.physical))));
        };
        let (key, mut queue) = self.pending.remove(i);
        let take = queue.len().min(self.batch_size);
        let messages: Vec<Polled> = queue.drain(..take).collect();
        if !queue.is_empty() {
            self.pending.push((key.clone(), queue));
        }
        let last = messages.last().map(|m| m.offset).unwrap_or_default();
        if let Some(p) = self.partitions.get_mut(&key) {
            p.next = last + 1;
        }
        // A tombstone or an empty message has no row (Flink's formats skip null).
        // Upsert tables: a tombstone deletes its key's row.
        let upsert = self.upsert;
        let rows: Vec<Polled> = messages
            .into_iter()
            .filter(|m| upsert || !m.value.is_empty())
            .collect();
        let offsets: Vec<i64> = rows.iter().map(|m| m.offset).collect();
        let (batch, one_to_one) = if upsert {
            self.decode_upserts(&key.0, key.1, &rows)?
        } else {
            self.decode(&key.0, key.1, &rows)?
        };
        let batch = batch.unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(&self.physical)));
        self.last_split = Some(key.clone());
        if one_to_one {
            self.last_batch = Some((key, offsets));
        }
        JobMetrics::add(&self.metrics.rows_in, batch.num_rows() as u64);
        Ok(Some(batch))
    }

    fn describe(&self) -> String {
        match &self.topics {
            Topics::List(l) => format!("kafka topic {}", l.join(";")),
            Topics::Pattern(p) => format!("kafka topics matching {}", p.as_str()),
        }
    }

    fn position(&self) -> serde_json::Value {
        if !self.started {
            if let Some(r) = &self.restored {
                return serde_json::json!({ "partitions": r });
            }
            return serde_json::Value::Null;
        }
        let partitions: BTreeMap<String, i64> = self
            .partitions
            .iter()
            .map(|((t, p), s)| (format!("{t}/{p}"), s.next))
            .collect();
        serde_json::json!({ "partitions": partitions })
    }

    fn last_split(&self) -> Option<String> {
        self.last_split.as_ref().map(|(t, p)| format!("{t}/{p}"))
    }

    fn live_splits(&self) -> Vec<String> {
        self.partitions
            .iter()
            .filter(|(_, p)| !p.stop.is_some_and(|s| p.next >= s))
            .map(|((t, p), _)| format!("{t}/{p}"))
            .collect()
    }

    fn position_after(&self, rows: usize) -> Option<serde_json::Value> {
        let (key, offsets) = self.last_batch.as_ref()?;
        let next = *offsets.get(rows)?;
        let partitions: BTreeMap<String, i64> = self
            .partitions
            .iter()
            .map(|((t, p), s)| {
                let o = if (t, p) == (&key.0, &key.1) {
                    next
                } else {
                    s.next
                };
                (format!("{t}/{p}"), o)
            })
            .collect();
        Some(serde_json::json!({ "partitions": partitions }))
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<()> {
        if position.is_null() {
            return Ok(());
        }
        let partitions = position
            .get("partitions")
            .and_then(|p| serde_json::from_value::<BTreeMap<String, i64>>(p.clone()).ok())
            .ok_or_else(|| {
                SluiceError::Config(format!(
                    "Kafka table '{}': the checkpoint's source offset {position} is not a Kafka \
                     one",
                    self.table
                ))
            })?;
        self.restored = Some(partitions);
        Ok(())
    }

    fn checkpoint_complete(&mut self, position: &serde_json::Value) -> Result<()> {
        if self.group_id.is_none() {
            return Ok(());
        }
        let Some(partitions) = position
            .get("partitions")
            .and_then(|p| serde_json::from_value::<BTreeMap<String, i64>>(p.clone()).ok())
        else {
            return Ok(());
        };
        let mut tpl = TopicPartitionList::new();
        for (tp, offset) in &partitions {
            let Some((t, p)) = tp.rsplit_once('/') else {
                continue;
            };
            let Ok(p) = p.parse::<i32>() else { continue };
            tpl.add_partition_offset(t, p, Offset::Offset(*offset))
                .map_err(|e| self.err("committing offsets", e))?;
        }
        if tpl.count() == 0 {
            return Ok(());
        }
        // Flink logs a failed commit and goes on: the checkpoint, not the group, is what
        // a restore reads.
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            eprintln!("warning: {}", self.err("committing the group's offsets", e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::datatypes::{DataType, Field, Schema};

    /// A source whose client never connects (nothing here talks to a broker).
    fn source() -> KafkaSource {
        let options: ConnectorOptions = [
            ("connector", "kafka"),
            ("topic", "t"),
            ("properties.bootstrap.servers", "127.0.0.1:1"),
            ("format", "json"),
            ("scan.startup.mode", "earliest-offset"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        KafkaSource::new(
            "t",
            &options,
            schema,
            0,
            1,
            "UTC",
            8,
            Arc::new(JobMetrics::default()),
        )
        .unwrap()
    }

    #[test]
    fn a_position_inside_a_batch_moves_only_that_batchs_partition() {
        let mut s = source();
        s.started = true;
        s.partitions.insert(
            ("t".into(), 0),
            Partition {
                next: 40,
                stop: None,
            },
        );
        s.partitions.insert(
            ("t".into(), 1),
            Partition {
                next: 13,
                stop: None,
            },
        );
        // The last batch: partition 1, offsets 7, 9, 12 (gaps: tombstones, markers).
        s.last_batch = Some((("t".into(), 1), vec![7, 9, 12]));
        let at = |rows| s.position_after(rows).unwrap()["partitions"].clone();
        assert_eq!(at(0), serde_json::json!({"t/0": 40, "t/1": 7}));
        assert_eq!(at(2), serde_json::json!({"t/0": 40, "t/1": 12}));
        // After every row of the batch: the position itself (the driver asks position()).
        assert!(s.position_after(3).is_none());
        assert_eq!(
            s.position()["partitions"],
            serde_json::json!({"t/0": 40, "t/1": 13})
        );
    }
}
