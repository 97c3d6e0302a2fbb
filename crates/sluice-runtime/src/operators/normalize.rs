//! ChangelogNormalize (Flink's operator of that name, `DeduplicateFunctionHelper.
//! processLastRowOnChangelog`): the last row per primary key of a changelog whose events
//! may repeat (`'table.exec.source.cdc-events-duplicate'`), so that downstream each key
//! changes once per real change.
//!
//! Per key the row held (row-format bytes, [`KeyedValues`]):
//! - `+I` / `+U` of row `r`: none held: `+I r`; `r` held already (a repeated event):
//!   nothing; another row held: `-U` of it, `+U r`. `r` is held then.
//! - `-U` / `-D`: a row held: `-D` of it (the held row, whole: the event may carry only
//!   the key), and the key is forgotten; none held (a repeated delete): nothing.
//!
//! Snapshot (common layout): one row per key: `key_group`, `key_<k>`, `row_<i>`.

use std::sync::Arc;

use datafusion_common::arrow::array::{ArrayRef, Int8Array};
use datafusion_common::arrow::datatypes::SchemaRef;
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_common::arrow::row::RowConverter;
use sluice_common::{Result, SluiceError};

use crate::message::{RowKind, StreamBatch};
use crate::operator::{Collector, Operator};
use crate::state::keyed::KeyedValues;
use crate::state::row_codec::RowCodec;
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// The ChangelogNormalize operator (see the module docs).
pub struct ChangelogNormalizeOperator {
    /// The primary key's column indexes.
    key: Vec<usize>,
    keys: RowConverter,
    rows: RowCodec,
    schema: SchemaRef,
    held: KeyedValues<Option<Box<[u8]>>>,
}

impl ChangelogNormalizeOperator {
    /// Normalizes a changelog of `schema` by the columns `key`.
    ///
    /// # Errors
    /// No key, or types the row format cannot hold.
    pub fn new(key: Vec<usize>, schema: SchemaRef) -> Result<Self> {
        let types: Vec<_> = key
            .iter()
            .map(|&k| schema.field(k).data_type().clone())
            .collect();
        let keys = key_converter(&types)?
            .ok_or_else(|| SluiceError::Internal("ChangelogNormalize needs a key".into()))?;
        Ok(ChangelogNormalizeOperator {
            key,
            keys,
            rows: RowCodec::new(&schema)?,
            schema,
            held: KeyedValues::new(),
        })
    }

    fn key_columns(&self, data: &RecordBatch) -> Vec<ArrayRef> {
        self.key
            .iter()
            .map(|&k| Arc::clone(data.column(k)))
            .collect()
    }
}

impl Operator for ChangelogNormalizeOperator {
    fn name(&self) -> &'static str {
        "ChangelogNormalize"
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.held.len() as u64)
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let data = &batch.data;
        let keys = self.keys.convert_columns(&self.key_columns(data))?;
        let rows = self.rows.encode(data.columns())?;
        // The output: (row bytes, kind), in order.
        let mut emitted: Vec<(Box<[u8]>, RowKind)> = Vec::new();
        for i in 0..data.num_rows() {
            let key = keys.row(i);
            let row = rows.row(i);
            if batch.row_kind(i).is_retraction() {
                if let Some(id) = self.held.registry().find(key.as_ref()) {
                    if let Some(prev) = self.held.forget(id, None).flatten() {
                        emitted.push((prev, RowKind::Delete));
                    }
                }
                continue;
            }
            let (id, _) = self.held.id_or_insert_with(key.as_ref(), || None);
            let slot = &mut self.held[id as usize];
            match slot.take() {
                None => emitted.push((row.into(), RowKind::Insert)),
                Some(prev) if *prev == *row => {}
                Some(prev) => {
                    emitted.push((prev, RowKind::UpdateBefore));
                    emitted.push((row.into(), RowKind::UpdateAfter));
                }
            }
            *slot = Some(row.into());
        }
        if emitted.is_empty() {
            return Ok(());
        }
        let columns = self.rows.decode(emitted.iter().map(|(r, _)| &r[..]))?;
        out.emit(StreamBatch {
            data: RecordBatch::try_new(Arc::clone(&self.schema), columns)?,
            row_watermarks: None,
            ops: Some(Int8Array::from_iter_values(
                emitted.iter().map(|(_, k)| *k as i8),
            )),
        });
        Ok(())
    }

    /// One row per key: its held row's columns `row_<i>`.
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let ids: Vec<u32> = self
            .held
            .live_ids()
            .into_iter()
            .filter(|&id| self.held[id as usize].is_some())
            .collect();
        if ids.is_empty() {
            return Ok(None);
        }
        let keys = self.held.key_columns(Some(&self.keys), &ids)?;
        let columns = self.rows.decode(
            ids.iter()
                .map(|&id| self.held[id as usize].as_deref().unwrap_or(&[])),
        )?;
        let mut w = SnapshotWriter::new(keys, ids.len(), max_parallelism)?;
        for (i, c) in columns.into_iter().enumerate() {
            w.column(format!("row_{i}"), c);
        }
        w.finish()
    }

    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        for snap in snapshots {
            if snap.num_rows() == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "ChangelogNormalize");
            let columns = reader.numbered_exactly("row_", self.schema.fields().len())?;
            let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
            let keys = self.keys.convert_columns(&self.key_columns(&batch))?;
            let rows = self.rows.encode(batch.columns())?;
            for r in 0..batch.num_rows() {
                let (id, _) = self.held.id_or_insert_with(keys.row(r).as_ref(), || None);
                self.held[id as usize] = Some(rows.row(r).into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{AsArray, Int32Array};
    use datafusion_common::arrow::datatypes::{DataType, Field, Int32Type, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, false),
            Field::new("v", DataType::Int32, true),
        ]))
    }

    fn batch(rows: &[(RowKind, i32, i32)]) -> StreamBatch {
        StreamBatch {
            data: RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
                    Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2))),
                ],
            )
            .unwrap(),
            row_watermarks: None,
            ops: Some(Int8Array::from_iter_values(rows.iter().map(|r| r.0 as i8))),
        }
    }

    fn run(op: &mut ChangelogNormalizeOperator, rows: &[(RowKind, i32, i32)]) -> Vec<String> {
        let mut out = Collector::default();
        op.process_batch(batch(rows), &mut out).unwrap();
        let mut lines = Vec::new();
        for m in out.take() {
            if let crate::message::Message::Data(b) = m {
                let k = b.data.column(0).as_primitive::<Int32Type>();
                let v = b.data.column(1).as_primitive::<Int32Type>();
                for i in 0..b.num_rows() {
                    lines.push(format!(
                        "{} {} {}",
                        b.row_kind(i).short(),
                        k.value(i),
                        v.value(i)
                    ));
                }
            }
        }
        lines
    }

    use RowKind::{Delete as D, Insert as I, UpdateAfter as UA, UpdateBefore as UB};

    /// Flink's rules, then a snapshot restored into a new operator continues the same way.
    #[test]
    fn repeated_events_change_nothing_and_state_restores() {
        let mut op = ChangelogNormalizeOperator::new(vec![0], schema()).unwrap();
        assert_eq!(
            run(
                &mut op,
                &[(I, 1, 10), (I, 1, 10), (I, 2, 20), (UA, 1, 11), (UA, 1, 11)]
            ),
            ["+I 1 10", "+I 2 20", "-U 1 10", "+U 1 11"]
        );
        let snap = op.snapshot_state(128).unwrap().unwrap();
        assert_eq!(snap.num_rows(), 2);
        let mut restored = ChangelogNormalizeOperator::new(vec![0], schema()).unwrap();
        restored.restore_state(&[snap]).unwrap();
        for o in [&mut op, &mut restored] {
            // A before image or a delete takes the held row away (the event's other
            // columns do not matter); a repeat finds nothing.
            assert_eq!(
                run(
                    o,
                    &[(UB, 1, 0), (UA, 1, 12), (D, 2, 0), (D, 2, 0), (I, 3, 30)]
                ),
                ["-D 1 11", "+I 1 12", "-D 2 20", "+I 3 30"]
            );
            assert_eq!(o.state_rows(), Some(2));
        }
    }
}
