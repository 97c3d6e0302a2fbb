//! Turning one partition's polled messages into a batch of the table's columns: keys and
//! values through their formats (a message is one record; errors name
//! `kafka://<topic>/<partition>:<offset>`), metadata columns, and upserts and tombstones of
//! an `upsert-kafka` table.

use std::sync::Arc;

use datafusion_common::arrow::array::{ArrayRef, RecordBatch};
use sluice_common::{Result, SluiceError};

use super::{KafkaSource, Polled};
use crate::connectors::csv_source::{Chunk, FilePosition, RecordSpan};
use crate::metrics::JobMetrics;

impl KafkaSource {
    /// Decodes messages of one partition; also tells whether rows and messages are one to
    /// one (no message skipped, none made several rows).
    pub(super) fn decode(
        &self,
        topic: &str,
        partition: i32,
        messages: &[Polled],
    ) -> Result<(Option<RecordBatch>, bool)> {
        let file: Arc<str> = Arc::from(format!("kafka://{topic}/{partition}"));
        let values = chunk_of(
            &file,
            messages.iter().map(|m| (m.value.as_slice(), m.offset)),
        );
        let (value, skipped) = self.value.decode(&values)?;
        JobMetrics::add(&self.metrics.parse_errors_skipped, skipped);
        let one_to_one = skipped == 0
            && value.as_ref().map_or(0, |b| b.num_rows()) == messages.len()
            && !self.layout.value.2.is_changelog();
        if self.key.is_none() && self.layout.metadata.is_empty() {
            return Ok((value, one_to_one));
        }
        let Some(value) = value else {
            return Ok((None, false));
        };
        let (key, key_skipped) = match &self.key {
            Some(d) => d.decode(&chunk_of(
                &file,
                messages
                    .iter()
                    .map(|m| (m.key.as_deref().unwrap_or_default(), m.offset)),
            ))?,
            None => (Some(value.clone()), skipped),
        };
        let Some(key) = key else {
            return Ok((None, false));
        };
        if skipped > 0 || key_skipped > 0 || key.num_rows() != value.num_rows() {
            // Which messages were skipped is not known from counts: decode them one by one
            // and keep those whose key and value both parse.
            if messages.len() > 1 {
                return self.decode_one_by_one(topic, partition, messages);
            }
            return Ok((None, false));
        }
        let mut columns: Vec<Option<ArrayRef>> = vec![None; self.physical.fields().len()];
        for (j, &i) in self.layout.value.0.iter().enumerate() {
            columns[i] = Some(Arc::clone(value.column(j)));
        }
        if let Some((key_indices, ..)) = &self.layout.key {
            for (j, &i) in key_indices.iter().enumerate() {
                columns[i].get_or_insert_with(|| Arc::clone(key.column(j)));
            }
        }
        if !self.layout.metadata.is_empty() {
            if !one_to_one {
                return Err(SluiceError::Data(format!(
                    "Kafka table '{}': messages of {file} did not parse and were skipped; a \
                     table with METADATA columns cannot skip messages yet",
                    self.table
                )));
            }
            self.fill_metadata(&mut columns, topic, partition, messages)?;
        }
        let columns: Vec<ArrayRef> = columns
            .into_iter()
            .map(|c| c.expect("every column is key or value"))
            .collect();
        Ok((
            Some(RecordBatch::try_new(Arc::clone(&self.physical), columns)?),
            one_to_one,
        ))
    }

    /// [`Self::decode`] message by message (after a message with a bad key or value was
    /// skipped), dropping every message whose key or value does not parse.
    fn decode_one_by_one(
        &self,
        topic: &str,
        partition: i32,
        messages: &[Polled],
    ) -> Result<(Option<RecordBatch>, bool)> {
        let mut batches = Vec::new();
        for m in messages {
            let one = Polled {
                offset: m.offset,
                key: m.key.clone(),
                value: m.value.clone(),
                meta: m.meta.clone(),
            };
            if let (Some(b), true) = self.decode(topic, partition, std::slice::from_ref(&one))? {
                batches.push(b);
            }
        }
        let Some(first) = batches.first() else {
            return Ok((None, false));
        };
        let schema = first.schema();
        Ok((
            Some(datafusion_common::arrow::compute::concat_batches(
                &schema, &batches,
            )?),
            false,
        ))
    }

    /// The metadata columns of `messages` (one row each) into `columns`.
    fn fill_metadata(
        &self,
        columns: &mut [Option<ArrayRef>],
        topic: &str,
        partition: i32,
        messages: &[Polled],
    ) -> Result<()> {
        if self.layout.metadata.is_empty() {
            return Ok(());
        }
        let offsets: Vec<i64> = messages.iter().map(|m| m.offset).collect();
        let metas: Vec<crate::connectors::kafka::metadata::MessageMetadata> =
            messages.iter().map(|m| m.meta.clone()).collect();
        for (i, key) in &self.layout.metadata {
            columns[*i] = Some(crate::connectors::kafka::metadata::column(
                key,
                self.physical.field(*i).data_type(),
                topic,
                partition,
                &offsets,
                &metas,
                &self.tz,
            )?);
        }
        Ok(())
    }

    /// Decodes upserts and tombstones of one partition: the key columns from each
    /// message's key, the others from its value (NULL for a tombstone), and a last
    /// `$op` column of row kinds (`+U`, or `-D` for a tombstone).
    pub(super) fn decode_upserts(
        &self,
        topic: &str,
        partition: i32,
        messages: &[Polled],
    ) -> Result<(Option<RecordBatch>, bool)> {
        use datafusion_common::arrow::array::{Int8Array, UInt32Array};
        use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
        if messages.is_empty() {
            return Ok((None, true));
        }
        let (Some(key_decoder), Some((key_indices, ..))) = (&self.key, &self.layout.key) else {
            return Err(SluiceError::Internal(
                "an upsert-kafka source without a key".into(),
            ));
        };
        let file: Arc<str> = Arc::from(format!("kafka://{topic}/{partition}"));
        let keys = chunk_of(
            &file,
            messages
                .iter()
                .map(|m| (m.key.as_deref().unwrap_or_default(), m.offset)),
        );
        let values = chunk_of(
            &file,
            messages
                .iter()
                .filter(|m| !m.value.is_empty())
                .map(|m| (m.value.as_slice(), m.offset)),
        );
        let live = values.records.len();
        let (key_batch, key_skipped) = key_decoder.decode(&keys)?;
        let (value_batch, value_skipped) = if live > 0 {
            self.value.decode(&values)?
        } else {
            (None, 0)
        };
        let key_rows = key_batch.as_ref().map_or(0, |b| b.num_rows());
        let value_rows = value_batch.as_ref().map_or(0, |b| b.num_rows());
        if key_skipped + value_skipped > 0 || key_rows != messages.len() || value_rows != live {
            return Err(SluiceError::Data(format!(
                "upsert-kafka table '{}': messages of {file} whose key or value does not parse \
                 cannot be skipped (each is a change of its key)",
                self.table
            )));
        }
        let key_batch = key_batch.expect("every message has a key row");
        // Row i's value row, or NULL for a tombstone.
        let mut next = 0u32;
        let take: UInt32Array = messages
            .iter()
            .map(|m| {
                (!m.value.is_empty()).then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.physical.fields().len() + 1);
        let mut meta: Vec<Option<ArrayRef>> = vec![None; self.physical.fields().len()];
        self.fill_metadata(&mut meta, topic, partition, messages)?;
        for (i, field) in self.physical.fields().iter().enumerate() {
            if let Some(m) = meta[i].take() {
                columns.push(m);
                continue;
            }
            if let Some(k) = key_indices.iter().position(|&ki| ki == i) {
                columns.push(Arc::clone(key_batch.column(k)));
                continue;
            }
            let j = self
                .layout
                .value
                .0
                .iter()
                .position(|&vi| vi == i)
                .ok_or_else(|| {
                    SluiceError::Internal(format!(
                        "column {} is neither key nor value",
                        field.name()
                    ))
                })?;
            columns.push(match &value_batch {
                Some(v) => {
                    datafusion_common::arrow::compute::take(v.column(j).as_ref(), &take, None)?
                }
                None => datafusion_common::arrow::array::new_null_array(
                    field.data_type(),
                    messages.len(),
                ),
            });
        }
        let ops: Int8Array = messages
            .iter()
            .map(|m| Some(if m.value.is_empty() { 3i8 } else { 2i8 }))
            .collect();
        columns.push(Arc::new(ops));
        let mut fields: Vec<Field> = self
            .physical
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        fields.push(Field::new(
            crate::connectors::changelog_json::OP_COLUMN,
            DataType::Int8,
            false,
        ));
        Ok((
            Some(RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                columns,
            )?),
            true,
        ))
    }
}

/// Messages (bytes and offset) as a chunk for the formats: one record each, its offset in
/// the place of the line number (errors read `kafka://<topic>/<partition>:<offset>:...`).
fn chunk_of<'a>(file: &Arc<str>, parts: impl Iterator<Item = (&'a [u8], i64)>) -> Chunk {
    let mut bytes = Vec::new();
    let mut records = Vec::new();
    for (part, offset) in parts {
        let start = bytes.len();
        bytes.extend_from_slice(part);
        bytes.push(b'\n');
        records.push(RecordSpan {
            start,
            end: bytes.len(),
            line: offset.max(0) as u64,
        });
    }
    Chunk {
        file: Arc::clone(file),
        bytes,
        records,
        end: FilePosition {
            file: 0,
            path: String::new(),
            byte: 0,
            line: 0,
            header_pending: false,
        },
    }
}
