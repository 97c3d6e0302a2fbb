//! The snapshot layout of ranked rows, written and read by the Top-N
//! ([`super::rank::RankOperator`]) and the deduplication
//! ([`super::deduplicate::DeduplicateOperator`]), so each restores the other's
//! checkpoints: one row per held row, in the common layout ([`crate::state::snapshot`]):
//! `key_group`, `key_<k>` (the partition), `seq` (Int64: the row's arrival number, which
//! orders peers), `idle_ms` (Int64: processing time since the partition's last row, for
//! `'table.exec.state.ttl'`), `row_<i>` (the input columns).

use std::sync::Arc;

use datafusion_common::arrow::array::{Int64Array, RecordBatch};
use datafusion_common::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion_common::arrow::row::{RowConverter, Rows};

use crate::state::row_codec::RowCodec;
use sluice_common::Result;

use crate::operators::stateless::batch_with_schema;
use crate::state::keyed::KeyRegistry;
use crate::state::ttl::IdleKeys;
use crate::state::{SnapshotReader, SnapshotWriter};

/// The held rows to write: per row its partition id, arrival number and bytes (Arrow's
/// row format of the input columns).
#[derive(Default)]
pub struct HeldRows<'a> {
    /// Partition ids (registered in the operator's registry).
    pub ids: Vec<u32>,
    /// Arrival numbers.
    pub seqs: Vec<u64>,
    /// Row bytes.
    pub rows: Vec<&'a [u8]>,
}

/// Writes `held` (see the module docs); `None` when nothing is held.
///
/// # Errors
/// Key or row bytes the converters cannot decode.
pub fn write(
    held: HeldRows<'_>,
    partitions: &KeyRegistry,
    key_converter: Option<&RowConverter>,
    row_codec: &RowCodec,
    idle: &IdleKeys,
    max_parallelism: u32,
) -> Result<Option<RecordBatch>> {
    if held.ids.is_empty() {
        return Ok(None);
    }
    let key_columns = partitions.key_columns(key_converter, &held.ids)?;
    let mut w = SnapshotWriter::new(key_columns, held.ids.len(), max_parallelism)?;
    w.column(
        "seq",
        Arc::new(Int64Array::from_iter_values(
            held.seqs.iter().map(|&s| s as i64),
        )),
    );
    let now = idle.now_ms();
    w.column(
        "idle_ms",
        Arc::new(Int64Array::from_iter_values(
            held.ids.iter().map(|&id| idle.idle_ms(id as usize, now)),
        )),
    );
    let columns = row_codec.decode(held.rows.iter().copied())?;
    for (i, c) in columns.into_iter().enumerate() {
        w.column(format!("row_{i}"), c);
    }
    w.finish()
}

/// A snapshot read back: per row its partition key (row format; `None` without
/// `PARTITION BY`), arrival number, idle time (ms) and the row (`data`, of the input
/// schema).
pub struct Restored {
    /// The partition keys.
    pub key_rows: Option<Rows>,
    /// Arrival numbers.
    pub seqs: Vec<u64>,
    /// Idle times (ms).
    pub idle_ms: Int64Array,
    /// The rows.
    pub data: RecordBatch,
}

/// Reads a snapshot of `what` (an operator's name, for errors) written by [`write`]:
/// `keys` partition columns encoded with `key_converter`, rows of `in_schema`.
///
/// # Errors
/// A column missing or of another type (a snapshot of another operator or query).
pub fn read(
    snap: &RecordBatch,
    what: &'static str,
    key_converter: Option<&RowConverter>,
    keys: usize,
    in_schema: &SchemaRef,
) -> Result<Restored> {
    let reader = SnapshotReader::new(snap, what);
    let seqs = reader.primitive::<Int64Type>("seq")?;
    let idle_ms = reader.primitive::<Int64Type>("idle_ms")?;
    let (_, key_rows) = reader.key_rows(key_converter, keys)?;
    let columns = reader.numbered_exactly("row_", in_schema.fields().len())?;
    Ok(Restored {
        key_rows,
        seqs: seqs.values().iter().map(|&s| s as u64).collect(),
        idle_ms,
        data: batch_with_schema(in_schema, columns, snap.num_rows())?,
    })
}
