//! Keyed, columnar operator state.
//!
//! Window aggregates keep their state here, behind one interface: per window
//! `[start, end)` (ms), the keys seen (in Arrow's row format, so any key type works) and,
//! per aggregate, a vectorized DataFusion `GroupsAccumulator` indexed by the key's group
//! index. Windows are kept in end order, so firing takes them from the front, and a
//! window's state is dropped as soon as it fires (state stays bounded by the windows
//! still open).
//!
//! Everything held here is columnar (key rows, accumulator state arrays), which is what
//! the checkpoint layer snapshots as Arrow IPC.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{ArrayRef, BooleanArray};
use datafusion_common::arrow::datatypes::DataType;
use datafusion_common::arrow::row::{RowConverter, Rows, SortField};
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::GroupsAccumulatorAdapter;
use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, HashTable};
use sluice_common::Result;
use std::hash::BuildHasher;

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

/// Maps keys (rows of key columns, in Arrow's row format) to dense group indices
/// `0..len`. With no key columns, every row is in the one global group 0.
pub struct KeyIndex {
    table: HashTable<(u64, u32)>,
    keys: Option<Rows>,
    hasher: DefaultHashBuilder,
    len: usize,
}

impl KeyIndex {
    /// An empty index for keys converted by `converter` (`None`: one global group).
    pub fn new(converter: Option<&RowConverter>) -> Self {
        KeyIndex {
            table: HashTable::new(),
            keys: converter.map(|c| c.empty_rows(0, 0)),
            hasher: DefaultHashBuilder::default(),
            len: 0,
        }
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key has been seen.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Group index of each selected row of `rows` (`None` rows = the global group),
    /// adding unseen keys.
    pub fn group_indices(&mut self, rows: Option<&Rows>, selection: &[u32], out: &mut Vec<usize>) {
        out.clear();
        let (Some(rows), Some(keys)) = (rows, self.keys.as_mut()) else {
            if self.len == 0 {
                self.len = 1;
            }
            out.resize(selection.len(), 0);
            return;
        };
        for &i in selection {
            let row = rows.row(i as usize);
            let bytes = row.as_ref();
            let hash = self.hasher.hash_one(bytes);
            let entry = self.table.entry(
                hash,
                |(h, g)| *h == hash && keys.row(*g as usize).as_ref() == bytes,
                |(h, _)| *h,
            );
            let group = match entry {
                Entry::Occupied(o) => o.get().1 as usize,
                Entry::Vacant(v) => {
                    let g = self.len;
                    keys.push(row);
                    v.insert((hash, g as u32));
                    self.len += 1;
                    g
                }
            };
            out.push(group);
        }
    }

    /// The key columns of all groups, in group-index order.
    pub fn key_columns(&self, converter: Option<&RowConverter>) -> Result<Vec<ArrayRef>> {
        match (converter, &self.keys) {
            (Some(c), Some(k)) => Ok(c.convert_rows(k)?),
            _ => Ok(vec![]),
        }
    }
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

/// The state of one window: its keys and their accumulators.
pub struct WindowGroups {
    /// Keys seen in this window.
    pub keys: KeyIndex,
    /// One accumulator per aggregate, indexed by group.
    pub accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

/// Keyed window-aggregate state: windows by `(end_ms, start_ms)`.
pub struct WindowAggregateState {
    converter: Option<RowConverter>,
    factory: AccumulatorFactory,
    windows: BTreeMap<(i64, i64), WindowGroups>,
    scratch: Vec<usize>,
}

/// What a fired window yields: its bounds (ms), key columns and one array per aggregate,
/// all with one row per key.
pub struct FiredWindow {
    /// Window start (ms).
    pub start_ms: i64,
    /// Window end (ms, exclusive).
    pub end_ms: i64,
    /// Key columns, one row per group.
    pub keys: Vec<ArrayRef>,
    /// Final aggregate values, one array per aggregate.
    pub values: Vec<ArrayRef>,
}

impl WindowAggregateState {
    /// Empty state for keys of `key_types` and the aggregates of `factory`.
    pub fn new(key_types: &[DataType], factory: AccumulatorFactory) -> Result<Self> {
        let converter = key_converter(key_types)?;
        Ok(WindowAggregateState {
            converter,
            factory,
            windows: BTreeMap::new(),
            scratch: Vec::new(),
        })
    }

    /// Number of open windows.
    pub fn open_windows(&self) -> usize {
        self.windows.len()
    }

    /// Adds the selected rows to window `[start_ms, end_ms)`.
    ///
    /// `key_rows` are the batch's key rows (from [`Self::key_rows`]), `args[a]` the argument arrays of aggregate `a`
    /// (already restricted to `selection`), `filters[a]` its optional `FILTER` mask (also
    /// restricted).
    pub fn update(
        &mut self,
        start_ms: i64,
        end_ms: i64,
        key_rows: Option<&Rows>,
        selection: &[u32],
        args: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<()> {
        let window = match self.windows.entry((end_ms, start_ms)) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(WindowGroups {
                keys: KeyIndex::new(self.converter.as_ref()),
                accumulators: self.factory.create()?,
            }),
        };
        window
            .keys
            .group_indices(key_rows, selection, &mut self.scratch);
        let total = window.keys.len();
        for ((acc, values), filter) in window.accumulators.iter_mut().zip(args).zip(filters) {
            acc.update_batch(values, &self.scratch, filter.as_ref(), total)?;
        }
        Ok(())
    }

    /// The key rows of a batch's key columns (once per batch, shared by its windows).
    pub fn key_rows(&self, key_columns: &[ArrayRef]) -> Result<Option<Rows>> {
        match &self.converter {
            Some(c) => Ok(Some(c.convert_columns(key_columns)?)),
            None => Ok(None),
        }
    }

    /// Removes and returns every window that has fired under `watermark_ms` (by `spec`'s
    /// rule: `end - 1 <= watermark`), in end order.
    pub fn fire(
        &mut self,
        spec: &sluice_common::plan::WindowSpec,
        watermark_ms: i64,
    ) -> Result<Vec<FiredWindow>> {
        let mut fired = Vec::new();
        while let Some(entry) = self.windows.first_entry() {
            let (end_ms, start_ms) = *entry.key();
            if !spec.fired(end_ms, watermark_ms) {
                break;
            }
            let mut groups = entry.remove();
            let keys = groups.keys.key_columns(self.converter.as_ref())?;
            let values = groups
                .accumulators
                .iter_mut()
                .map(|a| a.evaluate(EmitTo::All))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            fired.push(FiredWindow {
                start_ms,
                end_ms,
                keys,
                values,
            });
        }
        Ok(fired)
    }
}
