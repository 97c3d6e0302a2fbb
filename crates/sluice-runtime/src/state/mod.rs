//! Keyed, columnar operator state. `keyed`: the key registry (dense, reusable key ids)
//! and event-time timers that SESSION and MATCH_RECOGNIZE keep their per-key state with.
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

pub mod keyed;

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
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

/// Number of key groups when `'pipeline.max-parallelism'` is not set (Flink's default).
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// The key group (0..`max_parallelism`) of each row of `key_columns`: a fixed hash of the
/// key (DataFusion's `create_hashes` with its fixed-seed state, so the same key maps to
/// the same group in every run of the same build) modulo the number of key groups. Key
/// groups are the unit in which keyed state is split across subtasks (Flink's
/// `KeyGroupRangeAssignment`). No key columns: group 0.
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

impl WindowAggregateState {
    /// A columnar snapshot of the state: one row per (window, key), with columns
    /// `window_start`, `window_end` (ms), `key_group`, the key columns (`key_0`, ...), and
    /// each aggregate's accumulator state columns (`agg_<n>_<state field>`). `None` when
    /// no window is open. This is what a checkpoint writes (as Arrow IPC); [`Self::restore`]
    /// reads it back, at any parallelism (rows can be split by `key_group`).
    ///
    /// Taking the snapshot leaves the state as it was: DataFusion's `state()` consumes an
    /// accumulator, so each is rebuilt from the emitted state with `merge_batch`.
    pub fn snapshot(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        use datafusion_common::arrow::array::{Int64Array, UInt32Array};
        use datafusion_common::arrow::datatypes::{Field, Schema};
        let mut batches = Vec::new();
        let factory = self.factory.clone();
        for ((end_ms, start_ms), window) in self.windows.iter_mut() {
            let n = window.keys.len();
            if n == 0 {
                continue;
            }
            let keys = window.keys.key_columns(self.converter.as_ref())?;
            let groups = key_groups(&keys, n, max_parallelism)?;
            let mut columns: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from(vec![*start_ms; n])),
                Arc::new(Int64Array::from(vec![*end_ms; n])),
                Arc::new(UInt32Array::from(groups)),
            ];
            let mut fields = vec![
                Field::new("window_start", DataType::Int64, false),
                Field::new("window_end", DataType::Int64, false),
                Field::new("key_group", DataType::UInt32, false),
            ];
            for (i, k) in keys.iter().enumerate() {
                fields.push(Field::new(format!("key_{i}"), k.data_type().clone(), true));
                columns.push(Arc::clone(k));
            }
            let mut rebuilt = factory.create()?;
            let all_groups: Vec<usize> = (0..n).collect();
            for (a, (acc, fresh)) in window
                .accumulators
                .iter_mut()
                .zip(rebuilt.iter_mut())
                .enumerate()
            {
                let state = acc.state(EmitTo::All)?;
                fresh.merge_batch(&state, &all_groups, n)?;
                let names = factory.state_fields(a)?;
                for (s, f) in state.into_iter().zip(names) {
                    fields.push(Field::new(
                        format!("agg_{a}_{}", f.name()),
                        s.data_type().clone(),
                        true,
                    ));
                    columns.push(s);
                }
            }
            window.accumulators = rebuilt;
            batches.push(RecordBatch::try_new(
                Arc::new(Schema::new(fields)),
                columns,
            )?);
        }
        if batches.is_empty() {
            return Ok(None);
        }
        let schema = batches[0].schema();
        Ok(Some(datafusion_common::arrow::compute::concat_batches(
            &schema, &batches,
        )?))
    }

    /// Adds the windows and keys of a snapshot (from [`Self::snapshot`]) to this state,
    /// merging into windows and keys already present. Rows may be a subset (the key groups
    /// a subtask owns).
    ///
    /// # Errors
    /// A snapshot whose columns do not match this operator's keys and aggregates.
    pub fn restore(&mut self, snapshot: &RecordBatch) -> Result<()> {
        use datafusion_common::arrow::array::AsArray;
        use datafusion_common::arrow::datatypes::Int64Type;
        let key_count = self
            .converter
            .as_ref()
            .map(|_| {
                snapshot
                    .schema()
                    .fields()
                    .iter()
                    .filter(|f| f.name().starts_with("key_") && f.name() != "key_group")
                    .count()
            })
            .unwrap_or(0);
        let starts = snapshot.column(0).as_primitive::<Int64Type>();
        let ends = snapshot.column(1).as_primitive::<Int64Type>();
        // Rows of each window.
        let mut per_window: BTreeMap<(i64, i64), Vec<u32>> = BTreeMap::new();
        for r in 0..snapshot.num_rows() {
            per_window
                .entry((ends.value(r), starts.value(r)))
                .or_default()
                .push(r as u32);
        }
        let first_state = 3 + key_count;
        for ((end_ms, start_ms), rows) in per_window {
            let idx = datafusion_common::arrow::array::UInt32Array::from(rows.clone());
            let take =
                |c: usize| datafusion_common::arrow::compute::take(snapshot.column(c), &idx, None);
            let keys = (3..first_state)
                .map(take)
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let window = match self.windows.entry((end_ms, start_ms)) {
                std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => v.insert(WindowGroups {
                    keys: KeyIndex::new(self.converter.as_ref()),
                    accumulators: self.factory.create()?,
                }),
            };
            let key_rows = match &self.converter {
                Some(c) => Some(c.convert_columns(&keys)?),
                None => None,
            };
            let selection: Vec<u32> = (0..rows.len() as u32).collect();
            window
                .keys
                .group_indices(key_rows.as_ref(), &selection, &mut self.scratch);
            let total = window.keys.len();
            let mut column = first_state;
            for (a, acc) in window.accumulators.iter_mut().enumerate() {
                let width = self.factory.state_fields(a)?.len();
                if column + width > snapshot.num_columns() {
                    return Err(sluice_common::SluiceError::Execution(
                        "a window state snapshot does not match the operator's aggregates".into(),
                    ));
                }
                let states = (column..column + width)
                    .map(take)
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                acc.merge_batch(&states, &self.scratch, total)?;
                column += width;
            }
        }
        Ok(())
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
            sluice_common::SluiceError::Execution(format!(
                "a {} state snapshot does not match the operator's keys and aggregates (no \
                 column '{name}')",
                self.what
            ))
        })
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
}

/// Arrow IPC (stream format) bytes of a batch: how snapshots are written.
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
pub fn from_ipc(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    let reader = datafusion_common::arrow::ipc::reader::StreamReader::try_new(bytes, None)?;
    Ok(reader.collect::<std::result::Result<Vec<_>, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{Float64Array, StringArray};
    use datafusion_common::arrow::datatypes::{Field, Schema};
    use datafusion_common::ScalarValue;
    use datafusion_physical_expr::aggregate::AggregateExprBuilder;
    use datafusion_physical_expr::expressions::col;
    use sluice_common::plan::{WindowKind, WindowSpec};

    fn factory() -> AccumulatorFactory {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Float64, true)]));
        let v = col("v", &schema).unwrap();
        let build = |udf, name: &str| {
            Arc::new(
                AggregateExprBuilder::new(udf, vec![Arc::clone(&v)])
                    .schema(Arc::clone(&schema))
                    .alias(name)
                    .build()
                    .unwrap(),
            )
        };
        AccumulatorFactory::new(vec![
            build(datafusion_functions_aggregate::sum::sum_udaf(), "s"),
            build(datafusion_functions_aggregate::count::count_udaf(), "c"),
            build(datafusion_functions_aggregate::min_max::max_udaf(), "m"),
            build(datafusion_functions_aggregate::average::avg_udaf(), "a"),
            build(datafusion_functions_aggregate::count::count_udaf(), "d"),
        ])
    }

    /// Rows (window start ms, key, value) into 10 ms windows.
    fn feed(state: &mut WindowAggregateState, rows: &[(i64, &str, Option<f64>)]) {
        for &(start, key, v) in rows {
            let keys: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![key]))];
            let key_rows = state.key_rows(&keys).unwrap();
            let arg: ArrayRef = Arc::new(Float64Array::from(vec![v]));
            let args = vec![vec![Arc::clone(&arg)]; 5];
            state
                .update(
                    start,
                    start + 10,
                    key_rows.as_ref(),
                    &[0],
                    &args,
                    &[None, None, None, None, None],
                )
                .unwrap();
        }
    }

    fn fire_all(state: &mut WindowAggregateState) -> Vec<String> {
        let spec = WindowSpec {
            kind: WindowKind::Tumble { size_ms: 10 },
            offset_ms: 0,
            time_zone: None,
        };
        let mut rows = Vec::new();
        for w in state.fire(&spec, i64::MAX).unwrap() {
            for r in 0..w.keys[0].len() {
                let mut row = format!(
                    "{} {}",
                    w.start_ms,
                    ScalarValue::try_from_array(&w.keys[0], r).unwrap()
                );
                for v in &w.values {
                    row.push_str(&format!(" {}", ScalarValue::try_from_array(v, r).unwrap()));
                }
                rows.push(row);
            }
        }
        rows.sort();
        rows
    }

    const PART1: &[(i64, &str, Option<f64>)] = &[
        (0, "a", Some(1.0)),
        (0, "b", Some(5.0)),
        (0, "a", None),
        (10, "a", Some(7.0)),
        (20, "c", Some(2.0)),
    ];
    const PART2: &[(i64, &str, Option<f64>)] = &[
        (0, "a", Some(4.0)),
        (10, "b", Some(3.0)),
        (10, "a", Some(-1.0)),
        (20, "c", Some(9.0)),
        (30, "d", Some(6.0)),
    ];

    fn uninterrupted() -> Vec<String> {
        let mut state = WindowAggregateState::new(&[DataType::Utf8], factory()).unwrap();
        feed(&mut state, PART1);
        feed(&mut state, PART2);
        fire_all(&mut state)
    }

    /// Snapshot (through Arrow IPC), restore into a new state, continue: the results are
    /// those of a run without the snapshot, and taking the snapshot does not disturb the
    /// original state either.
    #[test]
    fn snapshot_and_restore_continue_identically() {
        let expected = uninterrupted();
        assert_eq!(expected.len(), 6);
        let mut original = WindowAggregateState::new(&[DataType::Utf8], factory()).unwrap();
        feed(&mut original, PART1);
        let snapshot = original.snapshot(DEFAULT_MAX_PARALLELISM).unwrap().unwrap();
        assert_eq!(snapshot.num_rows(), 4, "windows x keys after part 1");
        let bytes = to_ipc(&snapshot).unwrap();
        let mut restored = WindowAggregateState::new(&[DataType::Utf8], factory()).unwrap();
        for batch in from_ipc(&bytes).unwrap() {
            restored.restore(&batch).unwrap();
        }
        feed(&mut original, PART2);
        feed(&mut restored, PART2);
        assert_eq!(fire_all(&mut original), expected);
        assert_eq!(fire_all(&mut restored), expected);
    }

    /// Restored in two halves by key group (two subtasks), the union is the whole.
    #[test]
    fn a_snapshot_splits_by_key_group() {
        let mut original = WindowAggregateState::new(&[DataType::Utf8], factory()).unwrap();
        feed(&mut original, PART1);
        let snapshot = original.snapshot(4).unwrap().unwrap();
        let groups = snapshot
            .column(2)
            .as_any()
            .downcast_ref::<datafusion_common::arrow::array::UInt32Array>()
            .unwrap()
            .clone();
        assert!(groups.values().iter().all(|g| *g < 4));
        let mut union = Vec::new();
        for subtask in 0..2u32 {
            let mask: BooleanArray = groups
                .values()
                .iter()
                .map(|g| Some(g % 2 == subtask))
                .collect();
            let part =
                datafusion_common::arrow::compute::filter_record_batch(&snapshot, &mask).unwrap();
            let mut state = WindowAggregateState::new(&[DataType::Utf8], factory()).unwrap();
            state.restore(&part).unwrap();
            // Each subtask continues with the rows of its own key groups.
            let mine: Vec<_> = PART2
                .iter()
                .copied()
                .filter(|(_, k, _)| {
                    let keys: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![*k]))];
                    key_groups(&keys, 1, 4).unwrap()[0] % 2 == subtask
                })
                .collect();
            feed(&mut state, &mine);
            union.extend(fire_all(&mut state));
        }
        union.sort();
        assert_eq!(union, uninterrupted());
    }
}
