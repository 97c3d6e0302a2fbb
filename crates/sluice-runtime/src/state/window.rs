//! Window aggregate state: per window `[start, end)` (ms) — the state's namespace — the
//! keys seen and their vectorized accumulators ([`KeyedAccumulators`]). Windows are kept
//! in end order, so firing takes them from the front, and a window's state is dropped as
//! soon as it fires (state stays bounded by the windows still open; Flink clears a
//! window's state at its cleanup time the same way).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array};
use datafusion_common::arrow::array::{RecordBatch, UInt32Array};
use datafusion_common::arrow::compute::take;
use datafusion_common::arrow::datatypes::{DataType, Int64Type};
use datafusion_common::arrow::row::{RowConverter, Rows};
use sluice_common::Result;

use super::keyed::KeyedAccumulators;
use super::snapshot::{SnapshotReader, SnapshotWriter};
use super::{key_converter, AccumulatorFactory};

/// Keyed window-aggregate state: windows by `(end_ms, start_ms)`.
pub struct WindowAggregateState {
    converter: Option<RowConverter>,
    key_count: usize,
    factory: AccumulatorFactory,
    windows: BTreeMap<(i64, i64), KeyedAccumulators>,
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
    ///
    /// # Errors
    /// Key types Arrow's row format does not support.
    pub fn new(key_types: &[DataType], factory: AccumulatorFactory) -> Result<Self> {
        Ok(WindowAggregateState {
            converter: key_converter(key_types)?,
            key_count: key_types.len(),
            factory,
            windows: BTreeMap::new(),
            scratch: Vec::new(),
        })
    }

    /// Number of open windows.
    pub fn open_windows(&self) -> usize {
        self.windows.len()
    }

    /// The end (ms) of the window that fires first, if any is open.
    pub fn first_end(&self) -> Option<i64> {
        self.windows.keys().next().map(|(end, _)| *end)
    }

    /// (window, key) groups held.
    pub fn len(&self) -> usize {
        self.windows.values().map(|w| w.len()).sum()
    }

    /// Whether no window is open.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    fn window(&mut self, end_ms: i64, start_ms: i64) -> Result<&mut KeyedAccumulators> {
        Ok(match self.windows.entry((end_ms, start_ms)) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(KeyedAccumulators::new(&self.factory)?)
            }
        })
    }

    /// Adds the selected rows to window `[start_ms, end_ms)`.
    ///
    /// `key_rows` are the batch's key rows (from [`Self::key_rows`]), `args[a]` the
    /// argument arrays of aggregate `a` (already restricted to `selection`), `filters[a]`
    /// its optional `FILTER` mask (also restricted).
    ///
    /// # Errors
    /// What an accumulator fails with.
    pub fn update(
        &mut self,
        start_ms: i64,
        end_ms: i64,
        key_rows: Option<&Rows>,
        selection: &[u32],
        args: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
    ) -> Result<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result =
            self.window(end_ms, start_ms)?
                .update(key_rows, selection, args, filters, &mut scratch);
        self.scratch = scratch;
        result
    }

    /// The key rows of a batch's key columns (once per batch, shared by its windows).
    ///
    /// # Errors
    /// Key columns of other types than the state's.
    pub fn key_rows(&self, key_columns: &[ArrayRef]) -> Result<Option<Rows>> {
        super::encode_keys(self.converter.as_ref(), key_columns)
    }

    /// Removes and returns every window that has fired under `watermark_ms` (by `spec`'s
    /// rule: `end - 1 <= watermark`), in end order.
    ///
    /// # Errors
    /// An accumulator that fails to evaluate.
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
            let (keys, values) = entry.remove().evaluate(self.converter.as_ref())?;
            fired.push(FiredWindow {
                start_ms,
                end_ms,
                keys,
                values,
            });
        }
        Ok(fired)
    }

    /// A snapshot of the state in the common layout
    /// ([`super::snapshot`]): one row per (window, key), with `key_group`, `key_<k>`,
    /// `window_start`, `window_end` (Int64, ms), and each aggregate's accumulator state
    /// columns `agg_<a>_<i>` (DataFusion's `GroupsAccumulator::state`). `None` when no
    /// window is open. [`Self::restore`] reads it back, at any parallelism.
    ///
    /// # Errors
    /// An accumulator whose state cannot be taken or rebuilt.
    pub fn snapshot(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let mut keys: Vec<Vec<ArrayRef>> = vec![Vec::new(); self.key_count];
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        let mut states: Vec<Vec<Vec<ArrayRef>>> = Vec::new();
        for ((end_ms, start_ms), window) in self.windows.iter_mut() {
            let n = window.len();
            if n == 0 {
                continue;
            }
            let (k, s) = window.snapshot(self.converter.as_ref(), &self.factory)?;
            for (all, k) in keys.iter_mut().zip(k) {
                all.push(k);
            }
            starts.extend(std::iter::repeat_n(*start_ms, n));
            ends.extend(std::iter::repeat_n(*end_ms, n));
            if states.is_empty() {
                states = s.iter().map(|cols| vec![Vec::new(); cols.len()]).collect();
            }
            for (all, cols) in states.iter_mut().zip(s) {
                for (all, c) in all.iter_mut().zip(cols) {
                    all.push(c);
                }
            }
        }
        let concat = |parts: &[ArrayRef]| -> Result<ArrayRef> {
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            Ok(datafusion_common::arrow::compute::concat(&refs)?)
        };
        let rows = starts.len();
        if rows == 0 {
            return Ok(None);
        }
        let key_columns = keys
            .iter()
            .map(|parts| concat(parts))
            .collect::<Result<Vec<_>>>()?;
        let mut w = SnapshotWriter::new(key_columns, rows, max_parallelism)?;
        w.column("window_start", Arc::new(Int64Array::from(starts)));
        w.column("window_end", Arc::new(Int64Array::from(ends)));
        for (a, cols) in states.iter().enumerate() {
            for (i, parts) in cols.iter().enumerate() {
                w.column(format!("agg_{a}_{i}"), concat(parts)?);
            }
        }
        w.finish()
    }

    /// Adds the windows and keys of a snapshot (from [`Self::snapshot`]) to this state,
    /// merging into windows and keys already present. Rows may be a subset (the key groups
    /// a subtask owns).
    ///
    /// # Errors
    /// A snapshot whose columns do not match this operator's keys and aggregates.
    pub fn restore(&mut self, snapshot: &RecordBatch) -> Result<()> {
        let reader = SnapshotReader::new(snapshot, "window aggregate");
        let (keys, _) = reader.key_rows(None, self.key_count)?;
        let starts = reader.primitive::<Int64Type>("window_start")?;
        let ends = reader.primitive::<Int64Type>("window_end")?;
        let mut state_columns = Vec::new();
        for a in 0..self.factory.len() {
            let width = self.factory.state_fields(a)?.len();
            state_columns.push(
                (0..width)
                    .map(|i| reader.column(&format!("agg_{a}_{i}")))
                    .collect::<Result<Vec<_>>>()?,
            );
        }
        // Rows of each window.
        let mut per_window: BTreeMap<(i64, i64), Vec<u32>> = BTreeMap::new();
        for r in 0..snapshot.num_rows() {
            per_window
                .entry((ends.value(r), starts.value(r)))
                .or_default()
                .push(r as u32);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        for ((end_ms, start_ms), rows) in per_window {
            let idx = UInt32Array::from(rows);
            let pick = |cols: &[ArrayRef]| -> Result<Vec<ArrayRef>> {
                Ok(cols
                    .iter()
                    .map(|c| take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?)
            };
            let key_rows = self.key_rows(&pick(&keys)?)?;
            let states = state_columns
                .iter()
                .map(|cols| pick(cols))
                .collect::<Result<Vec<_>>>()?;
            self.window(end_ms, start_ms)?.merge(
                key_rows.as_ref(),
                idx.len(),
                &states,
                &mut scratch,
            )?;
        }
        self.scratch = scratch;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::snapshot::{from_ipc, key_groups, to_ipc, DEFAULT_MAX_PARALLELISM};
    use datafusion_common::arrow::array::BooleanArray;
    use datafusion_common::arrow::array::{Float64Array, StringArray};
    use datafusion_common::arrow::datatypes::{Field, Schema};
    use datafusion_common::ScalarValue;
    use sluice_common::plan::{WindowKind, WindowSpec};

    fn factory() -> AccumulatorFactory {
        use crate::operators::test_support::aggregate;
        use datafusion_functions_aggregate as f;
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Float64, true)]));
        AccumulatorFactory::new(vec![
            aggregate(f::sum::sum_udaf(), "v", &schema, "s"),
            aggregate(f::count::count_udaf(), "v", &schema, "c"),
            aggregate(f::min_max::max_udaf(), "v", &schema, "m"),
            aggregate(f::average::avg_udaf(), "v", &schema, "a"),
            aggregate(f::count::count_udaf(), "v", &schema, "d"),
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
            processing_time: false,
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
            .column_by_name("key_group")
            .unwrap()
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
