//! The one layout every operator's state snapshot has, and its Arrow IPC encoding.
//!
//! A snapshot of one operator subtask is one Arrow `RecordBatch`:
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `key_group` | UInt32 | key group of the row's key, `0..max_parallelism` ([`key_groups`]) |
//! | `key_0` ... `key_<k-1>` | the key columns' types | the key (none for an operator without keys) |
//! | the state's columns | any | named by the operator (`agg_<a>_<field>`, `window_start`, ...) |
//!
//! One row per key, or per key and namespace (a window), or per buffered row. Restore at
//! any parallelism keeps the rows whose `key_group` the subtask owns (`job.rs`), then
//! reads columns by name with [`SnapshotReader`], so a snapshot of another query fails
//! with a clear error instead of misreading columns.

use std::sync::Arc;

use datafusion_common::arrow::array::{
    ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, PrimitiveArray, RecordBatch, StringArray,
    UInt32Array,
};
use datafusion_common::arrow::datatypes::{DataType, Field, Schema};
use datafusion_common::arrow::row::{RowConverter, Rows};
use sluice_common::{Result, SluiceError};

/// Number of key groups when `'pipeline.max-parallelism'` is not set (Flink's default).
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// The key group (0..`max_parallelism`) of each row of `key_columns`: a fixed hash of the
/// key (DataFusion's `create_hashes` with its fixed-seed state, so the same key maps to
/// the same group in every run of the same build) modulo the number of key groups. Key
/// groups are the unit in which keyed state is split across subtasks (Flink's
/// `KeyGroupRangeAssignment`). No key columns: group 0.
///
/// # Errors
/// A key type `create_hashes` does not support.
pub fn key_groups(key_columns: &[ArrayRef], rows: usize, max_parallelism: u32) -> Result<Vec<u32>> {
    if key_columns.is_empty() {
        return Ok(vec![0; rows]);
    }
    let mut hashes = vec![0u64; rows];
    datafusion_common::hash_utils::create_hashes(
        key_columns,
        &datafusion_common::hash_utils::RandomState::default(),
        &mut hashes,
    )?;
    Ok(hashes
        .iter()
        .map(|h| (h % max_parallelism as u64) as u32)
        .collect())
}

/// Builds a snapshot in the common layout (see the module docs).
pub struct SnapshotWriter {
    fields: Vec<Field>,
    columns: Vec<ArrayRef>,
    rows: usize,
}

impl SnapshotWriter {
    /// A snapshot of `rows` rows whose keys are `key_columns` (empty without keys):
    /// writes `key_group` and `key_<k>`.
    ///
    /// # Errors
    /// Key columns whose length is not `rows`, or that cannot be hashed.
    pub fn new(key_columns: Vec<ArrayRef>, rows: usize, max_parallelism: u32) -> Result<Self> {
        if key_columns.iter().any(|k| k.len() != rows) {
            return Err(SluiceError::Internal(
                "snapshot key columns do not have one row per state row".into(),
            ));
        }
        let groups = key_groups(&key_columns, rows, max_parallelism)?;
        let mut writer = SnapshotWriter {
            fields: vec![Field::new("key_group", DataType::UInt32, false)],
            columns: vec![Arc::new(UInt32Array::from(groups))],
            rows,
        };
        for (k, key) in key_columns.into_iter().enumerate() {
            writer.column(format!("key_{k}"), key);
        }
        Ok(writer)
    }

    /// Adds a state column (nullable, of the array's type) with one value per row.
    pub fn column(&mut self, name: impl Into<String>, array: ArrayRef) -> &mut Self {
        self.fields
            .push(Field::new(name, array.data_type().clone(), true));
        self.columns.push(array);
        self
    }

    /// The snapshot; `None` when it has no row (nothing to write).
    ///
    /// # Errors
    /// A column whose length is not the row count.
    pub fn finish(self) -> Result<Option<RecordBatch>> {
        if self.rows == 0 {
            return Ok(None);
        }
        Ok(Some(RecordBatch::try_new(
            Arc::new(Schema::new(self.fields)),
            self.columns,
        )?))
    }
}

/// Reads the columns of an operator's state snapshot by name, failing with one clear
/// error when the snapshot does not match the operator (another query's checkpoint).
pub struct SnapshotReader<'a> {
    batch: &'a RecordBatch,
    /// Which state, for the error ("session", "aggregate").
    what: &'static str,
}

impl<'a> SnapshotReader<'a> {
    /// A reader over `batch`, a snapshot of `what` state.
    pub fn new(batch: &'a RecordBatch, what: &'static str) -> Self {
        SnapshotReader { batch, what }
    }

    /// The column `name`.
    ///
    /// # Errors
    /// The snapshot has no such column.
    pub fn column(&self, name: &str) -> Result<ArrayRef> {
        self.batch.column_by_name(name).cloned().ok_or_else(|| {
            SluiceError::Execution(format!(
                "a {} state snapshot does not match the operator's keys and aggregates (no \
                 column '{name}')",
                self.what
            ))
        })
    }

    /// The column `name` as values of type `T`.
    ///
    /// # Errors
    /// The snapshot has no such column, or it holds another type.
    pub fn primitive<T: ArrowPrimitiveType>(&self, name: &str) -> Result<PrimitiveArray<T>> {
        let c = self.column(name)?;
        c.as_primitive_opt::<T>()
            .cloned()
            .ok_or_else(|| self.wrong_type(name, &c))
    }

    /// The BOOLEAN column `name`.
    ///
    /// # Errors
    /// The snapshot has no such column, or it holds another type.
    pub fn boolean(&self, name: &str) -> Result<BooleanArray> {
        let c = self.column(name)?;
        c.as_boolean_opt()
            .cloned()
            .ok_or_else(|| self.wrong_type(name, &c))
    }

    /// The UTF-8 column `name`.
    ///
    /// # Errors
    /// The snapshot has no such column, or it holds another type.
    pub fn string(&self, name: &str) -> Result<StringArray> {
        let c = self.column(name)?;
        c.as_string_opt::<i32>()
            .cloned()
            .ok_or_else(|| self.wrong_type(name, &c))
    }

    fn wrong_type(&self, name: &str, column: &ArrayRef) -> SluiceError {
        SluiceError::Execution(format!(
            "a {} state snapshot does not match the operator (column '{name}' holds {})",
            self.what,
            column.data_type()
        ))
    }

    /// The columns `<prefix>0`, `<prefix>1`, ... up to the first missing one.
    pub fn numbered(&self, prefix: &str) -> Vec<ArrayRef> {
        (0..)
            .map_while(|i| self.batch.column_by_name(&format!("{prefix}{i}")).cloned())
            .collect()
    }

    /// The columns `<prefix>0` to `<prefix><count - 1>`: a held row's `count` columns.
    ///
    /// # Errors
    /// The snapshot holds another number of them (a snapshot of another query or plan).
    pub fn numbered_exactly(&self, prefix: &str, count: usize) -> Result<Vec<ArrayRef>> {
        let columns = self.numbered(prefix);
        if columns.len() != count {
            return Err(SluiceError::Execution(format!(
                "a {} state snapshot holds {} '{prefix}' columns, the operator {count} (a \
                 snapshot of another query or plan)",
                self.what,
                columns.len()
            )));
        }
        Ok(columns)
    }

    /// The key columns `key_0`, ... `key_<count - 1>`.
    ///
    /// # Errors
    /// One is missing.
    pub fn keys(&self, count: usize) -> Result<Vec<ArrayRef>> {
        (0..count)
            .map(|k| self.column(&format!("key_{k}")))
            .collect()
    }

    /// The key columns (`count` of them) and their rows in `converter`'s row format
    /// (`None` without a converter: an operator without keys).
    ///
    /// # Errors
    /// A key column is missing or has another type than the converter's.
    pub fn key_rows(
        &self,
        converter: Option<&RowConverter>,
        count: usize,
    ) -> Result<(Vec<ArrayRef>, Option<Rows>)> {
        let keys = self.keys(count)?;
        let rows = match converter {
            Some(c) => Some(c.convert_columns(&keys).map_err(|e| {
                SluiceError::Execution(format!(
                    "a {} state snapshot's key columns do not match the operator's keys: {e}",
                    self.what
                ))
            })?),
            None => None,
        };
        Ok((keys, rows))
    }
}

/// Arrow IPC (stream format) bytes of a batch: how snapshots are written.
///
/// # Errors
/// Arrow's IPC writer failing (not expected for in-memory output).
pub fn to_ipc(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    {
        let mut w = datafusion_common::arrow::ipc::writer::StreamWriter::try_new(
            &mut out,
            &batch.schema(),
        )?;
        w.write(batch)?;
        w.finish()?;
    }
    Ok(out)
}

/// The batches of Arrow IPC stream bytes.
///
/// # Errors
/// Bytes that are not an Arrow IPC stream.
pub fn from_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    let reader = datafusion_common::arrow::ipc::reader::StreamReader::try_new(bytes, None)?;
    Ok(reader.collect::<std::result::Result<Vec<_>, _>>()?)
}
