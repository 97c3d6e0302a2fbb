//! Window joins (Flink SQL "Window Join"; Flink's `WindowJoinOperator`): two inputs with
//! the windows of the same window table function (or window aggregates), joined on
//! `window_start`, `window_end` and keys. Only rows of the same window are paired; a
//! window's result is final when it fires, so the output is append-only.
//!
//! Rows are buffered per window and input as they come (the batches' rows of that window,
//! columnar). When the watermark (the minimum over both inputs) reaches a window's end
//! minus 1 ms, the window's rows are joined at once (a hash of the right rows by key; the
//! residual condition evaluated over all candidate pairs) and the window's state is
//! dropped: inner pairs, outer rows without a partner padded with NULLs, semi / anti joins'
//! left rows with / without a partner. A row whose window has already fired here is late:
//! dropped and counted (the window TVF rule; upstream window assignment drops such rows
//! first, so this happens only when a restore replays). NULL keys match nothing (unless
//! `IS NOT DISTINCT FROM`; `NOT IN` compares a NULL with every key).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array, UInt8Array,
};
use datafusion_common::arrow::compute::{cast, concat_batches, filter, take};
use datafusion_common::arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit};
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_common::arrow::row::{RowConverter, Rows};
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::{JoinKind, WindowJoinColumns};
use sluice_common::{Result, SluiceError};

use super::join::{concat_parts, write_input_columns};
use crate::expr::{evaluate_all, evaluate_predicate};
use crate::message::StreamBatch;
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// One input of a window join.
pub struct WindowJoinInput {
    /// Key expressions over this input's batches (the window bounds among them).
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The input's schema.
    pub schema: SchemaRef,
    /// `window_start` and `window_end` columns.
    pub bounds: (usize, usize),
}

/// The window join operator (see the module docs).
pub struct WindowJoinOperator {
    kind: JoinKind,
    null_equal: bool,
    null_aware: bool,
    inputs: [WindowJoinInput; 2],
    columns: WindowJoinColumns,
    key_converter: Option<RowConverter>,
    key_types: Vec<DataType>,
    residual: Option<Arc<dyn PhysicalExpr>>,
    pair_schema: SchemaRef,
    out_schema: SchemaRef,
    /// (window end, window start) → each input's buffered rows of that window.
    pending: BTreeMap<(i64, i64), [Vec<RecordBatch>; 2]>,
    watermark_ms: i64,
    metrics: Arc<JobMetrics>,
}

impl WindowJoinOperator {
    /// A window join of `left` and `right` (keys of the same types pairwise) producing
    /// `out_schema`; `residual` over `pair_schema` (left columns then right ones).
    ///
    /// # Errors
    /// Key types that differ, or that the row format cannot hold.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: JoinKind,
        left: WindowJoinInput,
        right: WindowJoinInput,
        columns: WindowJoinColumns,
        null_equal: bool,
        null_aware: bool,
        residual: Option<Arc<dyn PhysicalExpr>>,
        pair_schema: SchemaRef,
        out_schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let types = |input: &WindowJoinInput| {
            input
                .keys
                .iter()
                .map(|k| k.data_type(&input.schema))
                .collect::<datafusion_common::Result<Vec<_>>>()
        };
        let key_types = types(&left)?;
        if key_types != types(&right)? {
            return Err(SluiceError::Internal(
                "window join keys of different types".into(),
            ));
        }
        Ok(WindowJoinOperator {
            kind,
            null_equal,
            null_aware,
            key_converter: key_converter(&key_types)?,
            key_types,
            inputs: [left, right],
            columns,
            residual,
            pair_schema,
            out_schema,
            pending: BTreeMap::new(),
            watermark_ms: i64::MIN,
            metrics,
        })
    }

    /// Rows buffered (both inputs, all windows).
    pub fn rows_in_state(&self) -> usize {
        self.pending
            .values()
            .flat_map(|sides| sides.iter().flatten())
            .map(|b| b.num_rows())
            .sum()
    }

    /// The window bounds (ms) of each row of input `s`'s `data`.
    fn bounds(&self, s: usize, data: &RecordBatch) -> Result<(Vec<Option<i64>>, Vec<Option<i64>>)> {
        let (start, end) = self.inputs[s].bounds;
        let ms = |c: usize| -> Result<Vec<Option<i64>>> {
            let a = cast(
                data.column(c),
                &DataType::Timestamp(TimeUnit::Millisecond, None),
            )?;
            let a = cast(&a, &DataType::Int64)?;
            Ok(a.as_primitive::<Int64Type>().iter().collect())
        };
        Ok((ms(start)?, ms(end)?))
    }

    /// Buffers a batch of input `s` by window.
    fn buffer(&mut self, s: usize, data: RecordBatch) -> Result<()> {
        let (starts, ends) = self.bounds(s, &data)?;
        let mut by_window: BTreeMap<(i64, i64), Vec<u32>> = BTreeMap::new();
        let mut late = 0u64;
        for i in 0..data.num_rows() {
            match (ends[i], starts[i]) {
                (Some(end), Some(start)) if !self.columns.window.fired(end, self.watermark_ms) => {
                    by_window.entry((end, start)).or_default().push(i as u32);
                }
                _ => late += 1,
            }
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, late);
        for (window, rows) in by_window {
            let part = if rows.len() == data.num_rows() {
                data.clone()
            } else {
                let idx = UInt32Array::from(rows);
                let columns = data
                    .columns()
                    .iter()
                    .map(|c| take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                RecordBatch::try_new(data.schema(), columns)?
            };
            self.pending.entry(window).or_default()[s].push(part);
        }
        Ok(())
    }

    /// Key rows and "has a NULL key part" flags of `data` of input `s`.
    fn keys_of(&self, s: usize, data: &RecordBatch) -> Result<(Option<Rows>, Vec<bool>)> {
        let key_columns = evaluate_all(&self.inputs[s].keys, data)?;
        let nulls = (0..data.num_rows())
            .map(|i| key_columns.iter().any(|k| k.is_null(i)))
            .collect();
        let rows = crate::state::encode_keys(self.key_converter.as_ref(), &key_columns)?;
        Ok((rows, nulls))
    }

    /// Joins one window's rows (see the module docs).
    fn join_window(&self, sides: [Vec<RecordBatch>; 2]) -> Result<Option<StreamBatch>> {
        let [l, r] = sides;
        let left = concat_batches(&self.inputs[0].schema, &l)?;
        let right = concat_batches(&self.inputs[1].schema, &r)?;
        let (lkeys, lnull) = self.keys_of(0, &left)?;
        let (rkeys, rnull) = self.keys_of(1, &right)?;
        fn key(rows: &Option<Rows>, i: usize) -> &[u8] {
            rows.as_ref().map(|r| r.row(i).data()).unwrap_or(&[])
        }
        // Right rows by key; NULL-key rows apart.
        let mut by_key: HashMap<&[u8], Vec<u32>> = HashMap::new();
        let mut null_rows = Vec::new();
        for j in 0..right.num_rows() {
            if rnull[j] && !self.null_equal {
                null_rows.push(j as u32);
            } else {
                by_key.entry(key(&rkeys, j)).or_default().push(j as u32);
            }
        }
        let (mut pl, mut pr) = (Vec::new(), Vec::new());
        for i in 0..left.num_rows() {
            let mut add = |j: u32| {
                pl.push(i as u32);
                pr.push(j);
            };
            if self.null_aware && lnull[i] {
                (0..right.num_rows() as u32).for_each(&mut add);
                continue;
            }
            if lnull[i] && !self.null_equal {
                continue;
            }
            if let Some(js) = by_key.get(&key(&lkeys, i)) {
                js.iter().copied().for_each(&mut add);
            }
            if self.null_aware {
                null_rows.iter().copied().for_each(&mut add);
            }
        }
        // The residual over all candidate pairs.
        if let (Some(residual), false) = (&self.residual, pl.is_empty()) {
            let (li, ri) = (UInt32Array::from(pl.clone()), UInt32Array::from(pr.clone()));
            let mut columns = Vec::new();
            for c in left.columns() {
                columns.push(take(c.as_ref(), &li, None)?);
            }
            for c in right.columns() {
                columns.push(take(c.as_ref(), &ri, None)?);
            }
            let pairs = RecordBatch::try_new(Arc::clone(&self.pair_schema), columns)?;
            let mask = evaluate_predicate(residual, &pairs, "join condition")?;
            let keep = |v: Vec<u32>| {
                v.into_iter()
                    .enumerate()
                    .filter(|(k, _)| mask.value(*k))
                    .map(|(_, x)| x)
                    .collect::<Vec<_>>()
            };
            pl = keep(pl);
            pr = keep(pr);
        }
        let mut left_matched = vec![false; left.num_rows()];
        let mut right_matched = vec![false; right.num_rows()];
        for (&i, &j) in pl.iter().zip(&pr) {
            left_matched[i as usize] = true;
            right_matched[j as usize] = true;
        }
        let (mut out_l, mut out_r): (Vec<Option<u32>>, Vec<Option<u32>>) = (Vec::new(), Vec::new());
        match self.kind {
            JoinKind::LeftSemi | JoinKind::LeftAnti => {
                let semi = self.kind == JoinKind::LeftSemi;
                for (i, &m) in left_matched.iter().enumerate() {
                    if m == semi {
                        out_l.push(Some(i as u32));
                    }
                }
            }
            kind => {
                out_l.extend(pl.iter().map(|&i| Some(i)));
                out_r.extend(pr.iter().map(|&j| Some(j)));
                if kind.left_outer() {
                    for (i, &m) in left_matched.iter().enumerate() {
                        if !m {
                            out_l.push(Some(i as u32));
                            out_r.push(None);
                        }
                    }
                }
                if kind.right_outer() {
                    for (j, &m) in right_matched.iter().enumerate() {
                        if !m {
                            out_l.push(None);
                            out_r.push(Some(j as u32));
                        }
                    }
                }
            }
        }
        if out_l.is_empty() {
            return Ok(None);
        }
        let gather = |data: &RecordBatch, idx: &[Option<u32>]| -> Result<Vec<ArrayRef>> {
            let idx = UInt32Array::from(idx.to_vec());
            Ok(data
                .columns()
                .iter()
                .map(|c| take(c.as_ref(), &idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?)
        };
        let mut columns = gather(&left, &out_l)?;
        if !self.kind.left_only() {
            columns.extend(gather(&right, &out_r)?);
        }
        Ok(Some(StreamBatch::new(RecordBatch::try_new(
            Arc::clone(&self.out_schema),
            columns,
        )?)))
    }

    /// Fires the windows the watermark `watermark_ms` has reached, in end order.
    fn fire(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        while let Some((&(end, start), _)) = self.pending.first_key_value() {
            if !self.columns.window.fired(end, watermark_ms) {
                break;
            }
            let sides = self
                .pending
                .remove(&(end, start))
                .expect("the first window");
            if let Some(b) = self.join_window(sides)? {
                out.emit(b);
            }
        }
        Ok(())
    }
}

impl Operator for WindowJoinOperator {
    fn name(&self) -> &'static str {
        "WindowJoin"
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.rows_in_state() as u64)
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        self.process_input(0, batch, out)
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: StreamBatch,
        _out: &mut Collector,
    ) -> Result<()> {
        if input > 1 {
            return Err(SluiceError::Internal(format!(
                "a join has no input {input}"
            )));
        }
        if batch.ops.is_some() {
            return Err(SluiceError::Execution(
                "a window join's input must be append-only".into(),
            ));
        }
        self.buffer(input, batch.data)
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        self.watermark_ms = self.watermark_ms.max(watermark_ms);
        self.fire(watermark_ms, out)?;
        out.watermark(watermark_ms);
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        self.watermark_ms = i64::MAX;
        self.fire(i64::MAX, out)
    }

    /// One row per buffered row, in the common snapshot layout: `key_group`, the join keys
    /// `key_<k>`, `input` (UInt8: 0 left, 1 right), `window_start` and `window_end` (Int64
    /// ms, wall clock), then `left_<i>` / `right_<i>` (NULL on the other input's rows).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let mut keys: Vec<Vec<ArrayRef>> = vec![Vec::new(); self.key_types.len()];
        let (mut input_of, mut starts, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        let mut sides: [Vec<Vec<ArrayRef>>; 2] = [Vec::new(), Vec::new()];
        for (&(end, start), buffered) in &self.pending {
            for (s, batches) in buffered.iter().enumerate() {
                for b in batches {
                    let n = b.num_rows();
                    for (k, col) in evaluate_all(&self.inputs[s].keys, b)?
                        .into_iter()
                        .enumerate()
                    {
                        keys[k].push(col);
                    }
                    input_of.extend(std::iter::repeat_n(s as u8, n));
                    starts.extend(std::iter::repeat_n(start, n));
                    ends.extend(std::iter::repeat_n(end, n));
                    for (t, target) in self.inputs.iter().enumerate() {
                        sides[t].push(if t == s {
                            b.columns().to_vec()
                        } else {
                            target
                                .schema
                                .fields()
                                .iter()
                                .map(|f| new_null_array(f.data_type(), n))
                                .collect()
                        });
                    }
                }
            }
        }
        let total = input_of.len();
        if total == 0 {
            return Ok(None);
        }
        let mut w = SnapshotWriter::new(concat_parts(&keys)?, total, max_parallelism)?;
        w.column("input", Arc::new(UInt8Array::from(input_of)));
        w.column("window_start", Arc::new(Int64Array::from(starts)));
        w.column("window_end", Arc::new(Int64Array::from(ends)));
        write_input_columns(&mut w, &sides)?;
        w.finish()
    }

    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        use datafusion_common::arrow::datatypes::UInt8Type;
        for snap in snapshots {
            if snap.num_rows() == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "window join");
            let input_of = reader.primitive::<UInt8Type>("input")?;
            let starts = reader.primitive::<Int64Type>("window_start")?;
            let ends = reader.primitive::<Int64Type>("window_end")?;
            for (s, prefix) in ["left_", "right_"].iter().enumerate() {
                let mask =
                    BooleanArray::from_iter(input_of.iter().map(|v| Some(v == Some(s as u8))));
                let columns = reader
                    .numbered(prefix)
                    .iter()
                    .map(|c| filter(c.as_ref(), &mask))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let batch = RecordBatch::try_new(Arc::clone(&self.inputs[s].schema), columns)
                    .map_err(|e| {
                        SluiceError::Execution(format!(
                            "a window join state snapshot does not match the join's inputs: {e}"
                        ))
                    })?;
                let picked: Vec<usize> = (0..snap.num_rows()).filter(|&r| mask.value(r)).collect();
                let mut by_window: BTreeMap<(i64, i64), Vec<u32>> = BTreeMap::new();
                for (k, &r) in picked.iter().enumerate() {
                    by_window
                        .entry((ends.value(r), starts.value(r)))
                        .or_default()
                        .push(k as u32);
                }
                for (window, rows) in by_window {
                    let idx = UInt32Array::from(rows);
                    let columns = batch
                        .columns()
                        .iter()
                        .map(|c| take(c.as_ref(), &idx, None))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    let part = RecordBatch::try_new(batch.schema(), columns)?;
                    self.pending.entry(window).or_default()[s].push(part);
                }
            }
        }
        Ok(())
    }
}
