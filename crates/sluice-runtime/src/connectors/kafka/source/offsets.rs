//! Where a Kafka scan starts and ends (`scan.startup.mode`, `scan.bounded.mode`) as
//! concrete offsets per partition, and re-splitting checkpointed offsets over another
//! `'scan.parallelism'`.

use std::collections::BTreeMap;

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use sluice_common::plan::ConnectorOptions;
use sluice_common::{Result, SluiceError};

use super::{KafkaSource, Offsets, REQUEST_TIMEOUT};
use crate::connectors::kafka::parse_specific_offsets;

pub(super) fn offsets_option(
    options: &ConnectorOptions,
    mode_key: &str,
    table: &str,
) -> Result<Option<Offsets>> {
    let prefix = mode_key.trim_end_matches(".mode");
    let Some(mode) = options.get(mode_key) else {
        return Ok(None);
    };
    let needs = |key: &str| {
        options.get(key).ok_or_else(|| {
            SluiceError::Config(format!(
                "Kafka table '{table}': '{mode_key}' = '{mode}' needs the option '{key}'"
            ))
        })
    };
    Ok(Some(match mode.to_ascii_lowercase().as_str() {
        "unbounded" => return Ok(None),
        "earliest-offset" => Offsets::Earliest,
        "latest-offset" => Offsets::Latest,
        "group-offsets" => Offsets::Group,
        "timestamp" => {
            let key = format!("{prefix}.timestamp-millis");
            let ms = needs(&key)?.trim().parse::<i64>().map_err(|_| {
                SluiceError::Config(format!("'{key}' of Kafka table '{table}' must be ms"))
            })?;
            Offsets::Timestamp(ms)
        }
        "specific-offsets" => {
            let key = format!("{prefix}.specific-offsets");
            Offsets::Specific(parse_specific_offsets(needs(&key)?, &key, table)?)
        }
        other => {
            return Err(SluiceError::Config(format!(
                "'{mode_key}' = '{other}' of Kafka table '{table}' is not a mode"
            )))
        }
    }))
}

impl KafkaSource {
    /// Concrete offsets of `mode` for `partitions` (`None`: the group has none).
    pub(super) fn resolve(
        &self,
        mode: &Offsets,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Option<i64>>> {
        let watermarks = |t: &str, p: i32| {
            self.consumer
                .fetch_watermarks(t, p, REQUEST_TIMEOUT)
                .map_err(|e| self.err(&format!("reading the offsets of {t}/{p}"), e))
        };
        let group = || -> Result<Vec<Option<i64>>> {
            let mut tpl = TopicPartitionList::new();
            for (t, p) in partitions {
                tpl.add_partition(t, *p);
            }
            let committed = self
                .consumer
                .committed_offsets(tpl, REQUEST_TIMEOUT)
                .map_err(|e| self.err("reading the group's committed offsets", e))?;
            Ok(partitions
                .iter()
                .map(
                    |(t, p)| match committed.find_partition(t, *p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => Some(o),
                        _ => None,
                    },
                )
                .collect())
        };
        match mode {
            Offsets::Earliest => partitions
                .iter()
                .map(|(t, p)| Ok(Some(watermarks(t, *p)?.0)))
                .collect(),
            Offsets::Latest => partitions
                .iter()
                .map(|(t, p)| Ok(Some(watermarks(t, *p)?.1)))
                .collect(),
            Offsets::Group => group(),
            Offsets::Timestamp(ms) => {
                let mut tpl = TopicPartitionList::new();
                for (t, p) in partitions {
                    tpl.add_partition_offset(t, *p, Offset::Offset(*ms))
                        .map_err(|e| self.err("asking offsets for a time", e))?;
                }
                let found = self
                    .consumer
                    .offsets_for_times(tpl, REQUEST_TIMEOUT)
                    .map_err(|e| self.err("reading the offsets for a time", e))?;
                partitions
                    .iter()
                    .map(
                        |(t, p)| match found.find_partition(t, *p).map(|e| e.offset()) {
                            Some(Offset::Offset(o)) => Ok(Some(o)),
                            // No message at or after the time: the end.
                            _ => Ok(Some(watermarks(t, *p)?.1)),
                        },
                    )
                    .collect()
            }
            Offsets::Specific(map) => {
                let committed = if partitions.iter().any(|(_, p)| !map.contains_key(p))
                    && self.group_id.is_some()
                {
                    group()?
                } else {
                    vec![None; partitions.len()]
                };
                partitions
                    .iter()
                    .zip(committed)
                    .map(|((t, p), c)| match (map.get(p), c) {
                        (Some(o), _) => Ok(Some(*o)),
                        (None, Some(c)) => Ok(Some(c)),
                        (None, None) => Ok(Some(watermarks(t, *p)?.0)),
                    })
                    .collect()
            }
        }
    }

    /// Where a partition without a committed offset starts under `group-offsets`.
    pub(super) fn reset(&self, topic: &str, partition: i32) -> Result<i64> {
        let (low, high) = self
            .consumer
            .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)
            .map_err(|e| self.err(&format!("reading the offsets of {topic}/{partition}"), e))?;
        match self
            .auto_offset_reset
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("earliest" | "smallest" | "beginning") => Ok(low),
            Some("latest" | "largest" | "end") => Ok(high),
            _ => Err(SluiceError::Execution(format!(
                "Kafka table '{}': group '{}' has no committed offset for {topic}/{partition} \
                 and 'properties.auto.offset.reset' is not set (Flink's rule); set it to \
                 'earliest' or 'latest', or choose 'scan.startup.mode'",
                self.table,
                self.group_id.as_deref().unwrap_or("")
            ))),
        }
    }
}

/// The offsets of all old source subtasks as one position for each of `parallelism` new
/// ones (each reads the partitions it owns from it); the watermark is the smallest. `None`
/// when an old subtask's offset needs rows skipped after it (not exact per partition).
pub(crate) fn merge_offsets(
    offsets: &[crate::checkpoint::SourceOffset],
    parallelism: usize,
) -> Option<Vec<crate::checkpoint::SourceOffset>> {
    let mut partitions: BTreeMap<String, i64> = BTreeMap::new();
    for o in offsets {
        if o.skip_rows > 0 {
            return None;
        }
        if o.position.is_null() {
            continue;
        }
        let map: BTreeMap<String, i64> =
            serde_json::from_value(o.position.get("partitions")?.clone()).ok()?;
        partitions.extend(map);
    }
    let watermark_ms = offsets.iter().map(|o| o.watermark_ms).min()?;
    let position = serde_json::json!({ "partitions": partitions });
    Some(
        (0..parallelism)
            .map(|_| crate::checkpoint::SourceOffset {
                position: position.clone(),
                skip_rows: 0,
                rows: 0,
                watermark_ms,
            })
            .collect(),
    )
}
