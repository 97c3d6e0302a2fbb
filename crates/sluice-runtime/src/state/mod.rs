//! Keyed, columnar operator state: the one layer every stateful operator declares its
//! state through (issue 4, "keyed state").
//!
//! - [`keyed`]: the key registry (keys ↔ dense, reusable ids), [`keyed::KeyedValues`]
//!   (one value per key: the updating aggregate's groups, SESSION's open sessions,
//!   MATCH_RECOGNIZE's partitions) and [`keyed::KeyedAccumulators`] (vectorized
//!   accumulators per key, one set per window in [`WindowAggregateState`]).
//! - [`group_state`]: the updating aggregate's state, column-wise per aggregate over every
//!   group, retractable and read without being consumed.
//! - [`time`]: event-time timers per key (SESSION ends, `WITHIN`) and the buffer of rows
//!   waiting for the watermark, released in event-time order (MATCH_RECOGNIZE).
//! - [`pending`]: whole rows waiting for the watermark, released in (time, arrival) order
//!   as a batch (OVER aggregation, the event-time sort).
//! - [`sorted`]: a partition's rows in sort order (Top-N), a small sorted `Vec` that
//!   becomes a `BTreeMap` when it grows.
//! - [`row_codec`]: the bytes whole rows are held in (joins, Top-N, deduplication, rows
//!   waiting for the watermark), denser than Arrow's row format, decoded back to columns.
//! - [`row_log`]: rows kept until the job ends (a regular join's append-only input without
//!   a TTL), in blocks compressed with LZ4 when cold.
//! - [`snapshot`]: the common snapshot layout (`key_group`, `key_<k>`, state columns),
//!   written with [`SnapshotWriter`], read with [`SnapshotReader`], encoded as Arrow IPC.
//! - [`window`]: window aggregate state, namespaced by window.
//! - [`ttl`]: idle state retention per key id (`'table.exec.state.ttl'`).
//! - [`probe_table`]: the open-addressing hash table the key registry and the distinct
//!   value sets are looked up in, whose slots a batch prefetches rows ahead.
//!
//! Everything held here is columnar or decodes to columns (key rows in Arrow's row format,
//! accumulator state arrays, buffered batches), which is what checkpoints write.

pub mod group_state;
pub mod keyed;
pub mod pending;
pub mod probe_table;
pub mod row_codec;
pub mod row_log;
pub mod rows;
pub mod snapshot;
pub mod sorted;
pub mod time;
pub mod ttl;
pub mod window;

use std::sync::Arc;

use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::arrow::row::{RowConverter, SortField};
use datafusion_expr::GroupsAccumulator;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::GroupsAccumulatorAdapter;
use sluice_common::Result;

pub use snapshot::{
    from_ipc, key_groups, to_ipc, SnapshotReader, SnapshotWriter, DEFAULT_MAX_PARALLELISM,
};
pub use window::{FiredWindow, WindowAggregateState};

/// The row converter for keys of these types (`None` without key columns: one global
/// group). Every keyed operator converts its key columns with one of these.
pub fn key_converter(key_types: &[DataType]) -> Result<Option<RowConverter>> {
    if key_types.is_empty() {
        return Ok(None);
    }
    Ok(Some(RowConverter::new(
        key_types
            .iter()
            .map(|t| SortField::new(t.clone()))
            .collect(),
    )?))
}

/// Key columns encoded as key rows with `converter` (the one [`key_converter`] made for
/// their types); `None` without key columns (no converter), where every row has the one
/// empty key.
///
/// # Errors
/// Columns of other types than the converter's.
pub fn encode_keys(
    converter: Option<&RowConverter>,
    columns: &[datafusion_common::arrow::array::ArrayRef],
) -> Result<Option<datafusion_common::arrow::row::Rows>> {
    match converter {
        Some(c) => Ok(Some(c.convert_columns(columns)?)),
        None => Ok(None),
    }
}

/// The row converter for sort keys: `ORDER BY` expressions over `schema` with their sort
/// options, so row bytes compare in the `ORDER BY` order (Top-N, the event-time sort).
pub fn sort_converter(
    keys: &[(
        Arc<dyn datafusion_physical_expr::PhysicalExpr>,
        datafusion_common::arrow::compute::SortOptions,
    )],
    schema: &datafusion_common::arrow::datatypes::Schema,
) -> Result<RowConverter> {
    Ok(RowConverter::new(
        keys.iter()
            .map(|(e, o)| Ok(SortField::new_with_options(e.data_type(schema)?, *o)))
            .collect::<datafusion_common::Result<Vec<_>>>()?,
    )?)
}

/// Creates fresh accumulators for the aggregates of an operator.
#[derive(Clone)]
pub struct AccumulatorFactory {
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
}

impl AccumulatorFactory {
    /// A factory for these aggregate functions.
    pub fn new(aggregates: Vec<Arc<AggregateFunctionExpr>>) -> Self {
        AccumulatorFactory { aggregates }
    }

    /// Number of aggregates.
    pub fn len(&self) -> usize {
        self.aggregates.len()
    }

    /// Whether there is no aggregate.
    pub fn is_empty(&self) -> bool {
        self.aggregates.is_empty()
    }

    /// The accumulator state fields of aggregate `a` (what `state()` emits).
    pub fn state_fields(
        &self,
        a: usize,
    ) -> Result<Vec<datafusion_common::arrow::datatypes::FieldRef>> {
        Ok(self.aggregates[a].state_fields()?)
    }

    /// One new accumulator per aggregate: DataFusion's vectorized `GroupsAccumulator`
    /// where it has one, otherwise its row-wise `Accumulator` behind an adapter.
    pub fn create(&self) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        self.aggregates
            .iter()
            .map(|agg| -> Result<Box<dyn GroupsAccumulator>> {
                if agg.groups_accumulator_supported() {
                    Ok(agg.create_groups_accumulator()?)
                } else {
                    let agg = Arc::clone(agg);
                    Ok(Box::new(GroupsAccumulatorAdapter::new(move || {
                        agg.create_accumulator()
                    })))
                }
            })
            .collect()
    }
}
