//! Kafka's metadata columns (Flink docs, "Apache Kafka SQL Connector", "Available
//! Metadata"; declared in `sluice_common::options`): a message's `topic`, `partition`,
//! `offset`, `timestamp` (`TIMESTAMP_LTZ(3)`), `timestamp-type`, `headers`
//! (`MAP<STRING, BYTES>`) and `leader-epoch` (NULL when the broker does not say),
//! read into `METADATA` columns; `timestamp` and `headers` are also written by a sink.
//!
//! A column may declare another type than the key's: a `TIMESTAMP(3)` column gets the
//! timestamp as wall-clock time in the session time zone (Flink's cast from
//! `TIMESTAMP_LTZ`), other types are cast from the key's type.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    Array, ArrayRef, BinaryBuilder, Int32Array, Int64Array, MapArray, MapBuilder, MapFieldNames,
    StringArray, StringBuilder, TimestampMillisecondArray,
};
use datafusion_common::arrow::compute::cast;
use datafusion_common::arrow::datatypes::{DataType, TimeUnit};
use rdkafka::message::{BorrowedMessage, Headers, Message, OwnedHeaders, Timestamp};
use sluice_common::time::{local_to_utc_ms, utc_to_local_ms, Tz};
use sluice_common::{Result, SluiceError};

/// The metadata of one message that a table reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct MessageMetadata {
    pub timestamp_ms: Option<i64>,
    pub timestamp_type: &'static str,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// The partition leader's epoch the message was written in (`None`: unknown).
    pub leader_epoch: Option<i32>,
}

impl MessageMetadata {
    /// What a message carries (headers only when `headers` is read).
    pub(crate) fn of(message: &BorrowedMessage<'_>, headers: bool) -> Self {
        let (timestamp_ms, timestamp_type) = match message.timestamp() {
            Timestamp::NotAvailable => (None, "NoTimestampType"),
            Timestamp::CreateTime(ms) => (Some(ms), "CreateTime"),
            Timestamp::LogAppendTime(ms) => (Some(ms), "LogAppendTime"),
        };
        let headers = match (headers, message.headers()) {
            // rdkafka panics on a header name that is not UTF-8: such a message keeps
            // the headers read before it, and the panic does not escape.
            (true, Some(h)) => {
                let mut out = Vec::new();
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    for i in 0..h.count() {
                        let header = h.get(i);
                        out.push((header.key.to_string(), header.value.map(<[u8]>::to_vec)));
                    }
                }));
                out
            }
            _ => Vec::new(),
        };
        // SAFETY: `ptr` is the message librdkafka handed out, alive while `message` is
        // borrowed; `rd_kafka_message_leader_epoch` only reads it (librdkafka >= 2.1).
        let epoch = unsafe { rdkafka::bindings::rd_kafka_message_leader_epoch(message.ptr()) };
        MessageMetadata {
            timestamp_ms,
            timestamp_type,
            headers,
            leader_epoch: (epoch >= 0).then_some(epoch),
        }
    }
}

/// The column of metadata `key` for messages of `topic`/`partition` at `offsets`, of the
/// declared type `to`.
pub(crate) fn column(
    key: &str,
    to: &DataType,
    topic: &str,
    partition: i32,
    offsets: &[i64],
    metadata: &[MessageMetadata],
    tz: &Tz,
) -> Result<ArrayRef> {
    let n = offsets.len();
    let natural: ArrayRef = match key {
        "topic" => Arc::new(StringArray::from(vec![topic; n])),
        "partition" => Arc::new(Int32Array::from(vec![partition; n])),
        "offset" => Arc::new(Int64Array::from(offsets.to_vec())),
        "leader-epoch" => Arc::new(Int32Array::from_iter(
            metadata.iter().map(|m| m.leader_epoch),
        )),
        "timestamp-type" => Arc::new(StringArray::from_iter_values(
            metadata.iter().map(|m| m.timestamp_type),
        )),
        "timestamp" => {
            let ms = metadata.iter().map(|m| m.timestamp_ms);
            if let DataType::Timestamp(_, None) = to {
                // TIMESTAMP(p): wall-clock time in the session time zone.
                let local: TimestampMillisecondArray =
                    ms.map(|v| v.map(|v| utc_to_local_ms(tz, v))).collect();
                return Ok(cast(&local, to)?);
            }
            Arc::new(TimestampMillisecondArray::from_iter(ms).with_timezone("UTC"))
        }
        "headers" => return headers_column(to, metadata),
        other => {
            return Err(SluiceError::Internal(format!(
                "Kafka metadata key '{other}' has no reader"
            )))
        }
    };
    if natural.data_type() == to {
        return Ok(natural);
    }
    Ok(cast(&natural, to)?)
}

/// `MAP<STRING, BYTES>` (or `MAP<STRING, STRING>`) of each message's headers.
fn headers_column(to: &DataType, metadata: &[MessageMetadata]) -> Result<ArrayRef> {
    let DataType::Map(entries, _) = to else {
        return Err(SluiceError::Plan(format!(
            "a 'headers' metadata column must be MAP<STRING, BYTES>, found {}",
            sluice_common::types::flink_type_name(to)
        )));
    };
    let DataType::Struct(fields) = entries.data_type() else {
        return Err(SluiceError::Internal("a MAP without entries".into()));
    };
    let names = MapFieldNames {
        entry: entries.name().clone(),
        key: fields[0].name().clone(),
        value: fields[1].name().clone(),
    };
    let array: MapArray = match fields[1].data_type() {
        DataType::Utf8 => {
            let mut b = MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new());
            for m in metadata {
                for (k, v) in &m.headers {
                    b.keys().append_value(k);
                    b.values()
                        .append_option(v.as_ref().map(|v| String::from_utf8_lossy(v)));
                }
                b.append(true)?;
            }
            b.finish()
        }
        _ => {
            let mut b = MapBuilder::new(Some(names), StringBuilder::new(), BinaryBuilder::new());
            for m in metadata {
                for (k, v) in &m.headers {
                    b.keys().append_value(k);
                    b.values().append_option(v.as_deref());
                }
                b.append(true)?;
            }
            b.finish()
        }
    };
    let array: ArrayRef = Arc::new(array);
    if array.data_type() == to {
        Ok(array)
    } else {
        Ok(cast(&array, to)?)
    }
}

/// A sink row's message timestamp (ms since the epoch) from a `timestamp` metadata column:
/// `TIMESTAMP_LTZ` as it is, `TIMESTAMP` as wall-clock time in the session time zone.
pub(crate) fn timestamp_of(column: &dyn Array, row: usize, tz: &Tz) -> Result<Option<i64>> {
    if column.is_null(row) {
        return Ok(None);
    }
    let ms = cast(
        &column.slice(row, 1),
        &DataType::Timestamp(TimeUnit::Millisecond, None),
    )?;
    let ms = ms
        .as_any()
        .downcast_ref::<TimestampMillisecondArray>()
        .map(|a| a.value(0))
        .ok_or_else(|| SluiceError::Internal("a timestamp cast".into()))?;
    Ok(Some(match column.data_type() {
        DataType::Timestamp(_, Some(_)) => ms,
        _ => local_to_utc_ms(tz, ms),
    }))
}

/// A sink row's headers from a `headers` metadata column.
pub(crate) fn headers_of(column: &dyn Array, row: usize) -> Result<Option<OwnedHeaders>> {
    if column.is_null(row) {
        return Ok(None);
    }
    let map = column
        .as_any()
        .downcast_ref::<MapArray>()
        .ok_or_else(|| SluiceError::Plan("a 'headers' metadata column must be a MAP".into()))?;
    let entries = map.value(row);
    let keys = cast(entries.column(0), &DataType::Utf8)?;
    let keys = keys
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| SluiceError::Internal("header keys".into()))?;
    let values = cast(entries.column(1), &DataType::Binary)?;
    let values = values
        .as_any()
        .downcast_ref::<datafusion_common::arrow::array::BinaryArray>()
        .ok_or_else(|| SluiceError::Internal("header values".into()))?;
    let mut headers = OwnedHeaders::new_with_capacity(keys.len());
    for i in 0..keys.len() {
        headers = headers.insert(rdkafka::message::Header {
            key: keys.value(i),
            value: (!values.is_null(i)).then(|| values.value(i)),
        });
    }
    Ok(Some(headers))
}
