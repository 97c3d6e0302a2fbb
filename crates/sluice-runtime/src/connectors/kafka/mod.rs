//! The `kafka` connector: a table over Kafka topics, read and written through librdkafka
//! (the `rdkafka` crate), with Flink's table options (Flink docs, "Apache Kafka SQL
//! Connector"; declared in `sluice_common::options::CONNECTORS`, "kafka").
//!
//! - [`source::KafkaSource`]: the partitions of `topic` (`;`-separated) or `topic-pattern`,
//!   spread over `'scan.parallelism'` source subtasks as Flink's `KafkaSourceEnumerator`
//!   spreads them; starts at `scan.startup.mode`, ends at `scan.bounded.mode`; its source
//!   offset is the next offset of each of its partitions; the consumer group's offsets are
//!   committed when a checkpoint completes. Reads with `isolation.level` =
//!   `read_committed` unless `properties.isolation.level` says otherwise (Flink leaves the
//!   client's default, `read_uncommitted`).
//! - [`sink::KafkaSink`]: one message per row (append-only input), the value in
//!   `value.format`, the key (`key.fields` in `key.format`) if declared;
//!   `sink.delivery-guarantee` `none`, `at-least-once` (every message acknowledged at
//!   each checkpoint and at the end) or `exactly-once` (Kafka transactions, committed
//!   when the checkpoint completes: [`transaction`], [`protocol`]).
//!
//! Message values are decoded and encoded by the filesystem formats (`csv`, `json`, and
//! for reading the change-data-capture formats `debezium-json`, `canal-json`): a message is
//! one record. A record that does not parse is reported as `kafka://<topic>/<partition>`
//! with its offset in the place of the line number.

mod metadata;
pub mod protocol;
mod raw;
pub mod sink;
pub mod source;
pub mod transaction;

use std::sync::Arc;

use datafusion_common::arrow::datatypes::{Schema, SchemaRef};
use rdkafka::config::ClientConfig;
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use crate::connectors::{changelog_json, csv_source, filesystem, json_format, FileFormat};

/// The client properties of a table: `properties.<key>` without the prefix (Flink passes
/// them to Kafka's Java client; librdkafka takes the same names for the common ones and
/// refuses a name it does not know, which is then the table's error).
pub(crate) fn client_config(options: &ConnectorOptions, table: &str) -> Result<ClientConfig> {
    if !options.contains_key("properties.bootstrap.servers") {
        return Err(SluiceError::Config(format!(
            "Kafka table '{table}' needs the option 'properties.bootstrap.servers' (the brokers, \
             host:port,...)"
        )));
    }
    let mut config = ClientConfig::new();
    for (key, value) in options {
        if let Some(property) = key.strip_prefix("properties.") {
            config.set(property, value);
        }
    }
    // librdkafka logs through its own logger; errors reach us as results.
    config.set("log_level", "3");
    Ok(config)
}

/// A librdkafka error as a Sluice error naming the table and what was being done.
pub(crate) fn kafka_error(table: &str, doing: &str, e: impl std::fmt::Display) -> SluiceError {
    SluiceError::Execution(format!("Kafka table '{table}': {doing}: {e}"))
}

/// The format of a message's key or value: a filesystem format (one record per message),
/// or `raw` (Flink's: the message's bytes are the one column, `STRING` in UTF-8 or
/// `BYTES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    File(FileFormat),
    Raw,
}

impl Format {
    /// A change-data-capture format (each value is a change event).
    pub(crate) fn is_changelog(self) -> bool {
        matches!(self, Format::File(FileFormat::Changelog(_)))
    }
}

/// The columns of a table a message's key and value hold.
pub(crate) struct Layout {
    /// Key columns (indices into the physical schema) and their schema as the key format
    /// sees them (without `key.fields-prefix`).
    pub key: Option<(Vec<usize>, SchemaRef, Format, ConnectorOptions)>,
    /// Value columns and their schema.
    pub value: (Vec<usize>, SchemaRef, Format, ConnectorOptions),
    /// Metadata columns (`METADATA FROM 'key'`): index and key.
    pub metadata: Vec<(usize, String)>,
}

/// Which options name the value format: `value.format` (its options `value.<format>.*`)
/// or `format` (its options `<format>.*`). The returned options have the prefix removed.
fn format_of(
    options: &ConnectorOptions,
    slot: &str,
    table: &str,
) -> Result<Option<(Format, ConnectorOptions)>> {
    let (name, prefix) = match (slot, options.get(&format!("{slot}.format"))) {
        (_, Some(f)) => (f.clone(), format!("{slot}.")),
        ("value", None) => match options.get("format") {
            Some(f) => (f.clone(), String::new()),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    let mut stripped = ConnectorOptions::new();
    for (k, v) in options {
        if let Some(rest) = k.strip_prefix(&prefix) {
            if rest.starts_with(&format!("{name}.")) {
                stripped.insert(rest.to_string(), v.clone());
            }
        }
    }
    let format = if name == "raw" {
        Format::Raw
    } else {
        stripped.insert("format".into(), name);
        Format::File(super::file_format(&stripped, table)?)
    };
    Ok(Some((format, stripped)))
}

impl Layout {
    /// The layout of a table's physical columns over key and value (Flink docs, "Key and
    /// Value Formats").
    ///
    /// # Errors
    /// No value format, `key.fields` without `key.format` (or the other way round), a key
    /// field that is not a column.
    pub(crate) fn new(options: &ConnectorOptions, physical: &Schema, table: &str) -> Result<Self> {
        let Some((value_format, value_options)) = format_of(options, "value", table)? else {
            return Err(SluiceError::Config(format!(
                "Kafka table '{table}' needs the option 'format' or 'value.format'"
            )));
        };
        let key_format = format_of(options, "key", table)?;
        let key_fields: Vec<String> = options
            .get("key.fields")
            .map(|f| {
                f.split(';')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let prefix = options
            .get("key.fields-prefix")
            .cloned()
            .unwrap_or_default();
        let key = match (key_format, key_fields.is_empty()) {
            (None, true) => None,
            (None, false) => {
                return Err(SluiceError::Config(format!(
                    "Kafka table '{table}' sets 'key.fields' but no 'key.format'"
                )))
            }
            (Some(_), true) => {
                return Err(SluiceError::Config(format!(
                    "Kafka table '{table}' sets 'key.format' but no 'key.fields'"
                )))
            }
            (Some((format, key_options)), false) => {
                let mut indices = Vec::new();
                let mut fields = Vec::new();
                for name in &key_fields {
                    let i = physical.index_of(name).map_err(|_| {
                        SluiceError::Config(format!(
                            "'key.fields' of Kafka table '{table}' names '{name}', which is not a \
                             physical column"
                        ))
                    })?;
                    let f = physical.field(i);
                    let bare = f.name().strip_prefix(&prefix).ok_or_else(|| {
                        SluiceError::Config(format!(
                            "key column '{name}' of Kafka table '{table}' does not start with \
                             'key.fields-prefix' = '{prefix}'"
                        ))
                    })?;
                    indices.push(i);
                    fields.push(f.as_ref().clone().with_name(bare));
                }
                Some((indices, Arc::new(Schema::new(fields)), format, key_options))
            }
        };
        let except_key = options
            .get("value.fields-include")
            .is_some_and(|v| v.eq_ignore_ascii_case("EXCEPT_KEY"));
        if except_key && key.is_none() {
            return Err(SluiceError::Config(format!(
                "Kafka table '{table}': 'value.fields-include' = 'EXCEPT_KEY' needs 'key.fields'"
            )));
        }
        if !except_key && !prefix.is_empty() {
            return Err(SluiceError::Config(format!(
                "Kafka table '{table}': 'key.fields-prefix' needs 'value.fields-include' = \
                 'EXCEPT_KEY' (Flink's rule)"
            )));
        }
        // Metadata columns (the planner names them; a VIRTUAL one is not in a sink's
        // columns) are neither key nor value.
        let mut metadata: Vec<(usize, String)> = options
            .iter()
            .filter_map(|(k, v)| {
                let column = k.strip_prefix(sluice_common::options::METADATA_OPTION_PREFIX)?;
                physical.index_of(column).ok().map(|i| (i, v.clone()))
            })
            .collect();
        metadata.sort();
        let value_indices: Vec<usize> = (0..physical.fields().len())
            .filter(|i| !(except_key && key.as_ref().is_some_and(|(k, ..)| k.contains(i))))
            .filter(|i| !metadata.iter().any(|(m, _)| m == i))
            .collect();
        let value_schema = Arc::new(physical.project(&value_indices)?);
        Ok(Layout {
            key,
            value: (value_indices, value_schema, value_format, value_options),
            metadata,
        })
    }
}

/// The decoder of one of a message's parts in `format` over `schema`.
pub(crate) fn decoder(
    format: Format,
    schema: SchemaRef,
    options: &ConnectorOptions,
    time_zone: &str,
    table: &str,
) -> Result<Arc<dyn csv_source::ChunkFormat>> {
    let tz = sluice_common::time::parse_time_zone(time_zone).map_err(SluiceError::Config)?;
    let format = match format {
        Format::Raw => return Ok(Arc::new(raw::RawFormat::new(schema, options)?)),
        Format::File(f) => f,
    };
    super::check_format_types(format, &schema, table, false)?;
    Ok(match format {
        FileFormat::Csv => {
            let csv = filesystem::CsvOptions::from_options(options)?;
            Arc::new(csv_source::ChunkDecoder::new(schema, None, csv, tz)?)
        }
        FileFormat::Json => {
            let ignore = filesystem::bool_option(options, "json.ignore-parse-errors", false)?;
            Arc::new(json_format::JsonFormat::new(schema, None, tz, ignore))
        }
        FileFormat::Changelog(envelope) => Arc::new(changelog_json::ChangelogJsonFormat::new(
            envelope, schema, tz, options,
        )?),
    })
}

/// Flink's owner of a partition among `readers` source subtasks
/// (`KafkaSourceEnumerator.getSplitOwner`): the topic's Java hash code picks where its
/// partitions start, then they go round the subtasks, so a topic's partitions spread evenly
/// and a new partition does not move the others.
pub(crate) fn partition_owner(topic: &str, partition: i32, readers: usize) -> usize {
    let hash = topic
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
    let start = (hash.wrapping_mul(31) & 0x7FFF_FFFF) as usize % readers;
    (start + partition.max(0) as usize) % readers
}

/// `partition:0,offset:42;partition:1,offset:300` (Flink's `scan.startup.specific-offsets`).
///
/// # Errors
/// Any other shape, naming the option.
pub(crate) fn parse_specific_offsets(
    text: &str,
    key: &str,
    table: &str,
) -> Result<std::collections::BTreeMap<i32, i64>> {
    let bad = || {
        SluiceError::Config(format!(
            "'{key}' of Kafka table '{table}' must look like \
             'partition:0,offset:42;partition:1,offset:300', found '{text}'"
        ))
    };
    let mut out = std::collections::BTreeMap::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (p, o) = part.split_once(',').ok_or_else(bad)?;
        let p = p.trim().strip_prefix("partition:").ok_or_else(bad)?;
        let o = o.trim().strip_prefix("offset:").ok_or_else(bad)?;
        let p: i32 = p.trim().parse().map_err(|_| bad())?;
        let o: i64 = o.trim().parse().map_err(|_| bad())?;
        out.insert(p, o);
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_spread_as_flink_spreads_them() {
        // Java's "orders".hashCode() is -1008770331; (-1008770331 * 31) & 0x7FFFFFFF is
        // 940374459, which is 0 mod 3 (worked out with Python's integers): partition p goes
        // to subtask p mod 3.
        let owners: Vec<usize> = (0..6).map(|p| partition_owner("orders", p, 3)).collect();
        assert_eq!(owners, vec![0, 1, 2, 0, 1, 2]);
        // 940374459 mod 4 = 3: partition 0 to subtask 3, partition 1 to subtask 0.
        assert_eq!(partition_owner("orders", 0, 4), 3);
        assert_eq!(partition_owner("orders", 1, 4), 0);
        // Every subtask gets two of six partitions.
        for s in 0..3 {
            assert_eq!(owners.iter().filter(|o| **o == s).count(), 2);
        }
    }

    #[test]
    fn specific_offsets() {
        let m = parse_specific_offsets("partition:0,offset:42;partition:1,offset:300", "k", "t")
            .unwrap();
        assert_eq!(m.get(&0), Some(&42));
        assert_eq!(m.get(&1), Some(&300));
        let err = parse_specific_offsets("0:42", "k", "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("partition:0,offset:42"), "{err}");
    }
}
