//! The `MATCH_RECOGNIZE` operator: row pattern recognition per partition key, in
//! event-time order (SQL:2016 §7.6; Flink SQL "Pattern Recognition").
//!
//! Rules (the operator's contract; the matching rules themselves are in [`super::nfa`]):
//! - **Order.** Rows wait in a buffer until the watermark reaches their event time, then
//!   are released in `(event time, arrival)` order (ties keep arrival order). A row whose
//!   time is below the watermark in effect when it arrives is late: dropped and counted
//!   (`late_rows_dropped`), as Flink's CEP operator drops late rows.
//! - **Partitions.** Each `PARTITION BY` key has its own sequence of released rows
//!   (numbered 0, 1, ... within the partition) and its own [`Matcher`]; rows of other
//!   keys never take part in a match (strict contiguity within the partition).
//! - **DEFINE.** While a condition of variable `V` is tested on a row, that row counts as
//!   the last row of the match, mapped to `V` (SQL:2016 running semantics): `V.x` and a
//!   bare `x` are the row's own values; `A.x` is the last row mapped to `A` so far;
//!   `PREV(x, n)` is the row `n` rows earlier in the partition, matched or not, NULL
//!   before the partition's first row (SQL:2016; Flink rejects PREV with an offset over
//!   other variables). A variable without DEFINE matches any row. NULL counts as false.
//!   When every condition reads only the tested row and rows before it (`history_free`),
//!   conditions are evaluated once per released batch, vectorized; otherwise per partial
//!   match and row.
//! - **MEASURES.** `ONE ROW PER MATCH` evaluates them over the whole match (final
//!   semantics: `A.x` is the last row mapped to `A`, NULL if none); `ALL ROWS PER MATCH`
//!   emits every row of the match with the measures over the rows up to it (running
//!   semantics, the SQL:2016 default). `MATCH_NUMBER()` counts the partition's matches
//!   from 1; `CLASSIFIER()` is the variable of the (current) last row;
//!   `MATCH_ROWTIME()` its event time.
//! - **Emission.** A match is emitted as soon as it is final (see [`Matcher`]): when no
//!   more preferred partial match can still complete, after the rows released at a
//!   watermark (or when `WITHIN` expires the partial matches that kept it open, or at the
//!   end of the input, when open partial matches are discarded). Output rows are emitted
//!   before the watermark that made them final is forwarded.
//! - **State.** Buffered rows (waiting for the watermark), each partition's rows still
//!   needed (from its oldest live partial match, minus the deepest `PREV`), and the
//!   matchers. Released rows live in shared columnar batches, dropped when no partition
//!   needs any of their rows.

use std::collections::VecDeque;

use hashbrown::HashMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch,
};
use datafusion_common::arrow::compute::interleave;
use datafusion_common::arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::arrow::row::{RowConverter, SortField};
use datafusion_common::ScalarValue;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::{MatchNav, MatchRecognizeSpec, MatchSkip, NavAggregate, NavRow};
use sluice_common::{Result, SluiceError};

use super::nfa::{
    AfterMatchSkip, CompiledPattern, Conditions, Match, MatchOptions, MatchSpec, Matcher, Path,
    VarId,
};
use crate::message::StreamBatch;
use crate::metrics::JobMetrics;
use crate::operator::{Collector, Operator};
use crate::operators::window_assign::event_times_ms;
use crate::state::keyed::KeyedValues;
use crate::state::time::{EventTimeBuffer, EventTimeTimers};
use crate::state::{SnapshotReader, SnapshotWriter};

/// A released row: the store batch it is in and its index there.
#[derive(Debug, Clone, Copy)]
struct RowRef {
    batch: u32,
    row: u32,
}

/// One partition key's rows and matcher.
struct Partition {
    /// Rows still needed, in order; `rows[0]` has sequence number `base`.
    rows: VecDeque<RowRef>,
    base: u64,
    next_seq: u64,
    matcher: Matcher,
    /// Matches emitted so far (`MATCH_NUMBER()` of the next is this + 1).
    matches: u64,
    /// Event time of the last row fed to the matcher (`i64::MIN`: none).
    last_ts: i64,
    /// A `WITHIN` timer is queued for this partition.
    timer: bool,
    /// Listed in `MatchRecognizeOperator::touched`.
    touched: bool,
    /// Listed in `MatchRecognizeOperator::active`.
    active: bool,
}

/// See the module docs.
pub struct MatchRecognizeOperator {
    spec: MatchRecognizeSpec,
    match_spec: Arc<MatchSpec>,
    define: Vec<Option<Arc<dyn PhysicalExpr>>>,
    measures: Vec<Arc<dyn PhysicalExpr>>,
    nav_schema: SchemaRef,
    input_schema: SchemaRef,
    out_schema: SchemaRef,
    /// Input columns that are not partition columns (ALL ROWS PER MATCH outputs them).
    other_columns: Vec<usize>,
    key_converter: Option<RowConverter>,
    /// The partition of each key; a partition with no rows, no partial match and no
    /// match number to keep is forgotten and its id reused.
    partitions: KeyedValues<Partition>,
    /// Rows waiting for the watermark, released in event-time order, ties in arrival
    /// order: (input batch, row).
    pending: EventTimeBuffer<(u32, u32)>,
    /// Input batches with rows still pending, and how many.
    pending_batches: HashMap<u32, (RecordBatch, usize)>,
    /// Released rows, with how many of each batch's rows partitions still hold.
    store: HashMap<u32, (RecordBatch, usize)>,
    next_batch: u32,
    watermark: i64,
    /// The watermark forwarded downstream: held below the first row of every open
    /// partial match, whose output (`MATCH_ROWTIME()`, or the rows of `ALL ROWS PER
    /// MATCH`) is at or after that row's time.
    forwarded: i64,
    /// Partitions whose matcher has (or recently had) open partial matches; entries
    /// whose `Partition::active` flag is off are dropped lazily.
    active: Vec<usize>,
    /// Partitions whose rows or matcher changed since the last trim.
    touched: Vec<usize>,
    /// Rows in the store's batches, and how many of them partitions still hold.
    stored_rows: usize,
    live_rows: usize,
    /// Per variable, which navigations its DEFINE reads (the others are not computed
    /// when it is evaluated row by row).
    define_navs: Vec<Vec<bool>>,
    /// A measure reads `MATCH_NUMBER()`: partitions keep their match count.
    uses_match_number: bool,
    /// Keys registered after the last sweep, and the fewest keys worth a sweep.
    sweep_survivors: usize,
    sweep_min: usize,
    /// `WITHIN` expiry: (time at which the oldest partial match expires, partition).
    timers: EventTimeTimers,
    metrics: Arc<JobMetrics>,
}

impl MatchRecognizeOperator {
    /// The operator for `spec` over input rows of `input_schema`.
    ///
    /// # Errors
    /// A pattern the automaton cannot be built for (too large), expressions that cannot
    /// be lowered.
    pub fn new(
        spec: MatchRecognizeSpec,
        input_schema: SchemaRef,
        out_schema: SchemaRef,
        metrics: Arc<JobMetrics>,
    ) -> Result<Self> {
        let compiled = CompiledPattern::compile(&spec.pattern)
            .map_err(|e| SluiceError::Plan(format!("PATTERN ({}): {e}", spec.pattern)))?;
        let skip = match spec.skip {
            MatchSkip::PastLastRow => AfterMatchSkip::PastLastRow,
            MatchSkip::ToNextRow => AfterMatchSkip::ToNextRow,
            MatchSkip::ToFirst(v) => AfterMatchSkip::ToFirst(var_id(&compiled, &spec, v)?),
            MatchSkip::ToLast(v) => AfterMatchSkip::ToLast(var_id(&compiled, &spec, v)?),
        };
        if compiled.variables() != spec.variables.as_slice() {
            return Err(SluiceError::Internal(
                "MATCH_RECOGNIZE variables out of order".into(),
            ));
        }
        let match_spec = Arc::new(
            MatchSpec::new(
                compiled,
                MatchOptions {
                    skip,
                    within_ms: spec.within_ms,
                    history_free: spec.history_free,
                },
            )
            .map_err(|e| SluiceError::Plan(e.to_string()))?,
        );
        let nav_df = spec.nav_schema.as_ref();
        let define = spec
            .define
            .iter()
            .map(|d| {
                d.as_ref()
                    .map(|e| crate::expr::physical(e, nav_df))
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        let measures = crate::expr::physical_all(&spec.measures, nav_df)?;
        let spec_uses_match_number = spec.navs.contains(&MatchNav::MatchNumber);
        let define_navs = spec
            .define
            .iter()
            .map(|d| {
                let mut used = vec![false; spec.navs.len()];
                if let Some(e) = d {
                    for c in e.column_refs() {
                        if let Some(i) = c
                            .name
                            .strip_prefix("__nav_")
                            .and_then(|i| i.parse::<usize>().ok())
                        {
                            if i < used.len() {
                                used[i] = true;
                            }
                        }
                    }
                }
                used
            })
            .collect();
        let key_converter = if spec.partition_by.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                spec.partition_by
                    .iter()
                    .map(|&c| SortField::new(input_schema.field(c).data_type().clone()))
                    .collect(),
            )?)
        };
        let other_columns = (0..input_schema.fields().len())
            .filter(|c| !spec.partition_by.contains(c))
            .collect();
        Ok(MatchRecognizeOperator {
            nav_schema: Arc::new(spec.nav_schema.as_arrow().clone()),
            input_schema: Arc::clone(&input_schema),
            spec,
            match_spec,
            define,
            measures,
            out_schema,
            other_columns,
            key_converter,
            partitions: KeyedValues::new(),
            pending: EventTimeBuffer::new(),
            pending_batches: HashMap::new(),
            store: HashMap::new(),
            next_batch: 0,
            watermark: i64::MIN,
            forwarded: i64::MIN,
            active: Default::default(),
            touched: Vec::new(),
            stored_rows: 0,
            live_rows: 0,
            define_navs,
            uses_match_number: spec_uses_match_number,
            sweep_survivors: 0,
            sweep_min: 1024,
            timers: EventTimeTimers::new(),
            metrics,
        })
    }

    fn row(&self, p: usize, seq: u64) -> Option<RowRef> {
        let part = &self.partitions[p];
        if seq < part.base {
            return None;
        }
        part.rows.get((seq - part.base) as usize).copied()
    }

    fn value(&self, r: RowRef, column: usize) -> Result<ScalarValue> {
        let (batch, _) = &self.store[&r.batch];
        Ok(ScalarValue::try_from_array(
            batch.column(column),
            r.row as usize,
        )?)
    }

    /// The partition sequence number a navigation's row resolves to, over `rows` (the
    /// match so far, the current row last).
    fn resolve(&self, row: &NavRow, rows: &[(u64, VarId)]) -> Option<u64> {
        let mapped = |vars: &Option<Vec<usize>>, v: VarId| {
            vars.as_ref().is_none_or(|vs| vs.contains(&(v as usize)))
        };
        match row {
            NavRow::Last { vars, n } => rows
                .iter()
                .rev()
                .filter(|(_, v)| mapped(vars, *v))
                .nth(*n as usize)
                .map(|(s, _)| *s),
            NavRow::First { vars, n } => rows
                .iter()
                .filter(|(_, v)| mapped(vars, *v))
                .nth(*n as usize)
                .map(|(s, _)| *s),
            NavRow::Prev { base, n } => self.resolve(base, rows)?.checked_sub(*n),
        }
    }

    /// The values of every navigation for one evaluation: over `rows` (the match so
    /// far, in order, the current row last) of partition `p`, whose match number is
    /// `number`.
    fn nav_values(
        &self,
        p: usize,
        rows: &[(u64, VarId)],
        number: u64,
        only: Option<&[bool]>,
    ) -> Result<Vec<ScalarValue>> {
        let mut out = Vec::with_capacity(self.spec.navs.len());
        for (i, nav) in self.spec.navs.iter().enumerate() {
            let ty = self.nav_schema.field(i).data_type();
            if only.is_some_and(|o| !o[i]) {
                out.push(ScalarValue::try_from(ty)?);
                continue;
            }
            let v = match nav {
                MatchNav::Value { row, column } => {
                    match self.resolve(row, rows).and_then(|s| self.row(p, s)) {
                        Some(r) => self.value(r, *column)?,
                        None => ScalarValue::try_from(ty)?,
                    }
                }
                MatchNav::Aggregate { func, vars, column } => {
                    let selected = rows.iter().filter(|(_, v)| {
                        vars.as_ref().is_none_or(|vs| vs.contains(&(*v as usize)))
                    });
                    let mut values = Vec::new();
                    for (s, _) in selected {
                        match (column, self.row(p, *s)) {
                            (Some(c), Some(r)) => values.push(self.value(r, *c)?),
                            (None, _) => values.push(ScalarValue::Boolean(Some(true))),
                            (Some(_), None) => {}
                        }
                    }
                    aggregate(*func, values, ty)?
                }
                MatchNav::MatchRowtime => match rows.last().and_then(|(s, _)| self.row(p, *s)) {
                    Some(r) => self.value(r, self.spec.rowtime)?,
                    None => ScalarValue::try_from(ty)?,
                },
                MatchNav::Classifier => ScalarValue::Utf8(
                    rows.last()
                        .map(|(_, v)| self.spec.variables[*v as usize].clone()),
                ),
                MatchNav::MatchNumber => ScalarValue::Int64(Some(number as i64)),
            };
            out.push(if v.data_type() == *ty {
                v
            } else {
                v.cast_to(ty)?
            });
        }
        Ok(out)
    }

    /// The nav values of many evaluations at once (one row each: partition, match in
    /// `found`, rows of the match counted, match number), gathered column by column.
    fn nav_columns(
        &self,
        found: &[(usize, Match)],
        evals: &[(usize, usize, usize, u64)],
    ) -> Result<RecordBatch> {
        use datafusion_common::arrow::array::{Int64Array, StringArray};
        let n = evals.len();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.spec.navs.len());
        for (i, nav) in self.spec.navs.iter().enumerate() {
            let ty = self.nav_schema.field(i).data_type();
            let rows_of = |e: &(usize, usize, usize, u64)| &found[e.1].1.rows[..e.2];
            let col: ArrayRef = match nav {
                MatchNav::Value { row, column } => {
                    let refs: Vec<Option<RowRef>> = evals
                        .iter()
                        .map(|e| self.resolve(row, rows_of(e)).and_then(|s| self.row(e.0, s)))
                        .collect();
                    self.gather_nullable(&refs, *column, ty)?
                }
                MatchNav::MatchRowtime => {
                    let refs: Vec<Option<RowRef>> = evals
                        .iter()
                        .map(|e| rows_of(e).last().and_then(|(s, _)| self.row(e.0, *s)))
                        .collect();
                    self.gather_nullable(&refs, self.spec.rowtime, ty)?
                }
                MatchNav::Aggregate {
                    func: NavAggregate::Count,
                    vars,
                    column: None,
                } => Arc::new(Int64Array::from_iter_values(evals.iter().map(|e| {
                    rows_of(e)
                        .iter()
                        .filter(|(_, v)| vars.as_ref().is_none_or(|vs| vs.contains(&(*v as usize))))
                        .count() as i64
                }))),
                MatchNav::Classifier => Arc::new(StringArray::from_iter(evals.iter().map(|e| {
                    rows_of(e)
                        .last()
                        .map(|(_, v)| self.spec.variables[*v as usize].as_str())
                }))),
                MatchNav::MatchNumber => Arc::new(Int64Array::from_iter_values(
                    evals.iter().map(|e| e.3 as i64),
                )),
                MatchNav::Aggregate { .. } => {
                    let only: Vec<bool> = (0..self.spec.navs.len()).map(|k| k == i).collect();
                    let values = evals
                        .iter()
                        .map(|e| Ok(self.nav_values(e.0, rows_of(e), e.3, Some(&only))?[i].clone()))
                        .collect::<Result<Vec<ScalarValue>>>()?;
                    if values.is_empty() {
                        new_null_array(ty, 0)
                    } else {
                        ScalarValue::iter_to_array(values)?
                    }
                }
            };
            let col = if col.data_type() == ty {
                col
            } else {
                datafusion_common::arrow::compute::cast(&col, ty)?
            };
            columns.push(col);
        }
        self.nav_record_batch(columns, n)
    }

    /// A batch of the nav schema with `n` rows (nav schemas may have no column).
    fn nav_record_batch(&self, columns: Vec<ArrayRef>, n: usize) -> Result<RecordBatch> {
        let options =
            datafusion_common::arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(
            Arc::clone(&self.nav_schema),
            columns,
            &options,
        )?)
    }

    /// Column `column` of each row (NULL where there is none).
    fn gather_nullable(
        &self,
        refs: &[Option<RowRef>],
        column: usize,
        ty: &DataType,
    ) -> Result<ArrayRef> {
        let nulls = new_null_array(ty, 1);
        let mut arrays: Vec<&dyn Array> = vec![nulls.as_ref()];
        let mut slot: HashMap<u32, usize> = HashMap::new();
        let mut indices = Vec::with_capacity(refs.len());
        for r in refs {
            match r {
                Some(r) => {
                    let k = *slot.entry(r.batch).or_insert_with(|| {
                        arrays.push(self.store[&r.batch].0.column(column).as_ref());
                        arrays.len() - 1
                    });
                    indices.push((k, r.row as usize));
                }
                None => indices.push((0, 0)),
            }
        }
        Ok(interleave(&arrays, &indices)?)
    }

    /// A batch of nav values, one row per evaluation.
    fn nav_batch(&self, rows: Vec<Vec<ScalarValue>>) -> Result<RecordBatch> {
        let n = rows.len();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.spec.navs.len());
        for i in 0..self.spec.navs.len() {
            columns.push(if n == 0 {
                new_null_array(self.nav_schema.field(i).data_type(), 0)
            } else {
                ScalarValue::iter_to_array(rows.iter().map(|r| r[i].clone()))?
            });
        }
        self.nav_record_batch(columns, n)
    }

    /// Tests `var`'s DEFINE on the current row `row` after `path` (not history-free).
    fn test_define(&self, p: usize, var: VarId, row: u64, path: &Path<'_>) -> Result<bool> {
        let Some(cond) = &self.define[var as usize] else {
            return Ok(true);
        };
        let mut rows = path.to_vec();
        rows.push((row, var));
        let number = self.partitions[p].matches + 1;
        let only = &self.define_navs[var as usize];
        let batch = self.nav_batch(vec![self.nav_values(p, &rows, number, Some(only))?])?;
        let v = cond.evaluate(&batch)?.into_array(1)?;
        let b = v.as_boolean();
        Ok(b.is_valid(0) && b.value(0))
    }

    /// Evaluates every DEFINE for each released row (history-free conditions read only
    /// the row and rows before it): `out[var][i]`.
    fn define_columns(
        &self,
        released: &RecordBatch,
        parts: &[usize],
        seqs: &[u64],
    ) -> Result<Vec<Option<BooleanArray>>> {
        let n = released.num_rows();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.spec.navs.len());
        for (i, nav) in self.spec.navs.iter().enumerate() {
            let ty = self.nav_schema.field(i).data_type();
            let col = match nav {
                MatchNav::Value {
                    row: NavRow::Last { n: 0, .. },
                    column,
                } => Arc::clone(released.column(*column)),
                MatchNav::Value { row, column } if is_prev_of_current(row) => {
                    // PREV over the current row: gather from the partitions' rows.
                    let back = row.prev_depth();
                    let refs: Vec<Option<RowRef>> = (0..n)
                        .map(|i| {
                            (seqs[i] != u64::MAX)
                                .then(|| seqs[i].checked_sub(back))
                                .flatten()
                                .and_then(|s| self.row(parts[i], s))
                        })
                        .collect();
                    self.gather_nullable(&refs, *column, ty)?
                }
                // Not read by history-free conditions.
                _ => new_null_array(ty, n),
            };
            columns.push(col);
        }
        let options =
            datafusion_common::arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
        let navs =
            RecordBatch::try_new_with_options(Arc::clone(&self.nav_schema), columns, &options)?;
        self.define
            .iter()
            .map(|d| {
                d.as_ref()
                    .map(|e| -> Result<BooleanArray> {
                        let v = e.evaluate(&navs)?.into_array(n)?;
                        Ok(v.as_boolean().clone())
                    })
                    .transpose()
            })
            .collect()
    }

    /// Releases the buffered rows with event time <= `limit` in (time, arrival) order
    /// and feeds them to their partitions' matchers; returns the matches found.
    fn release(&mut self, limit: i64, found: &mut Vec<(usize, Match)>) -> Result<()> {
        let mut ready: Vec<(i64, (u32, u32))> = Vec::new();
        self.pending.release(limit, &mut ready);
        if ready.is_empty() {
            return Ok(());
        }
        // Gather the released rows into one batch.
        let mut ids: Vec<u32> = ready.iter().map(|p| p.1 .0).collect();
        ids.sort_unstable();
        ids.dedup();
        let position: HashMap<u32, usize> =
            ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let indices: Vec<(usize, usize)> = ready
            .iter()
            .map(|p| (position[&p.1 .0], p.1 .1 as usize))
            .collect();
        let released = {
            let batches: Vec<&RecordBatch> =
                ids.iter().map(|id| &self.pending_batches[id].0).collect();
            let schema = batches[0].schema();
            let columns = (0..schema.fields().len())
                .map(|c| {
                    let arrays: Vec<&dyn Array> =
                        batches.iter().map(|b| b.column(c).as_ref()).collect();
                    interleave(&arrays, &indices)
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            RecordBatch::try_new(schema, columns)?
        };
        for p in &ready {
            let entry = self
                .pending_batches
                .get_mut(&p.1 .0)
                .expect("pending batch");
            entry.1 -= 1;
            if entry.1 == 0 {
                self.pending_batches.remove(&p.1 .0);
            }
        }
        let n = released.num_rows();
        let id = self.next_batch;
        self.next_batch = self.next_batch.wrapping_add(1);
        self.store.insert(id, (released.clone(), n));
        // Partitions and sequence numbers. A row older than the last one its partition
        // matched is late (possible only after a restore that resumed the operator
        // below where this partition had got to).
        let parts = self.partitions_of(released.columns(), n)?;
        let ts = event_times_ms(released.column(self.spec.rowtime))?;
        let mut seqs = Vec::with_capacity(n);
        let mut kept = 0usize;
        for (i, &p) in parts.iter().enumerate() {
            let part = &mut self.partitions[p];
            if ts.value(i) < part.last_ts {
                seqs.push(u64::MAX);
                continue;
            }
            part.last_ts = ts.value(i);
            seqs.push(part.next_seq);
            part.next_seq += 1;
            part.rows.push_back(RowRef {
                batch: id,
                row: i as u32,
            });
            kept += 1;
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, (n - kept) as u64);
        if kept == 0 {
            self.store.remove(&id);
            return Ok(());
        }
        self.store.get_mut(&id).expect("the batch just stored").1 = kept;
        self.stored_rows += n;
        self.live_rows += kept;
        // Vectorized conditions; if that fails (e.g. a division by zero on a row the
        // condition is never tested on), they are evaluated row by row as tested.
        let conditions = if self.spec.history_free {
            self.define_columns(&released, &parts, &seqs).ok()
        } else {
            None
        };
        let mut touched = Vec::new();
        for i in 0..n {
            if seqs[i] == u64::MAX {
                continue;
            }
            let p = parts[i];
            let result = match &conditions {
                Some(cols) => {
                    let mut lookup = |var: VarId, _row: u64, _path: &Path<'_>| {
                        cols[var as usize]
                            .as_ref()
                            .is_none_or(|c| c.is_valid(i) && c.value(i))
                    };
                    self.partitions[p]
                        .matcher
                        .push_row(seqs[i], ts.value(i), &mut lookup)
                }
                None => {
                    // The conditions read the operator's rows while the matcher runs.
                    let mut matcher = std::mem::replace(
                        &mut self.partitions[p].matcher,
                        Matcher::new(Arc::clone(&self.match_spec)),
                    );
                    let mut eval = Evaluator {
                        op: self,
                        partition: p,
                        error: None,
                    };
                    let r = matcher.push_row(seqs[i], ts.value(i), &mut eval);
                    let error = eval.error;
                    self.partitions[p].matcher = matcher;
                    if let Some(e) = error {
                        return Err(e);
                    }
                    r
                }
            };
            result.map_err(|e| SluiceError::Execution(format!("MATCH_RECOGNIZE: {e}")))?;
            self.collect_matches(p, found);
            if !self.partitions[p].touched {
                self.partitions[p].touched = true;
                touched.push(p);
            }
        }
        for &p in &touched {
            self.arm_timer(p);
            self.note_activity(p);
        }
        self.touched.extend(touched);
        Ok(())
    }

    /// Records whether partition `p` has open partial matches (for the watermark hold).
    fn note_activity(&mut self, p: usize) {
        let part = &mut self.partitions[p];
        let open = !part.matcher.is_idle();
        if open && !part.active {
            self.active.push(p);
        }
        part.active = open;
    }

    /// The watermark that may go downstream: `watermark`, held below the first row of
    /// the oldest open partial match (a match found later outputs rows at or after it).
    fn hold(&mut self, watermark: i64) -> i64 {
        let partitions = &self.partitions;
        self.active.retain(|&p| partitions[p].active);
        self.active
            .iter()
            .filter_map(|&p| partitions[p].matcher.oldest_start_ts())
            .min()
            .map_or(watermark, |start| watermark.min(start.saturating_sub(1)))
    }

    fn collect_matches(&mut self, p: usize, found: &mut Vec<(usize, Match)>) {
        let mut ms = Vec::new();
        self.partitions[p].matcher.drain_matches(&mut ms);
        found.extend(ms.into_iter().map(|m| (p, m)));
    }

    fn arm_timer(&mut self, p: usize) {
        let Some(within) = self.spec.within_ms else {
            return;
        };
        let part = &mut self.partitions[p];
        if part.timer {
            return;
        }
        if let Some(start) = part.matcher.oldest_start_ts() {
            part.timer = true;
            self.timers.set(start.saturating_add(within), p as u32);
        }
    }

    /// `WITHIN`: partial matches that can no longer finish in time expire.
    fn expire(&mut self, watermark: i64, found: &mut Vec<(usize, Match)>) -> Result<()> {
        while let Some((_, p)) = self.timers.pop_due(|at| at <= watermark) {
            let p = p as usize;
            self.partitions[p].timer = false;
            self.partitions[p]
                .matcher
                .advance_time(watermark)
                .map_err(|e| SluiceError::Execution(format!("MATCH_RECOGNIZE: {e}")))?;
            self.collect_matches(p, found);
            self.arm_timer(p);
            self.note_activity(p);
            if !self.partitions[p].touched {
                self.partitions[p].touched = true;
                self.touched.push(p);
            }
        }
        Ok(())
    }

    /// Output rows for `found` (in order), then frees rows no partition needs.
    fn emit(&mut self, found: Vec<(usize, Match)>, out: &mut Collector) -> Result<()> {
        if !found.is_empty() {
            // One evaluation per output row: (partition, match, rows counted, number).
            let mut evals: Vec<(usize, usize, usize, u64)> = Vec::new();
            let mut first_rows: Vec<RowRef> = Vec::new();
            let mut row_refs: Vec<RowRef> = Vec::new();
            for (mi, (p, m)) in found.iter().enumerate() {
                self.partitions[*p].matches += 1;
                let number = self.partitions[*p].matches;
                let first = self
                    .row(*p, m.start())
                    .ok_or_else(|| SluiceError::Internal("a match row was freed".into()))?;
                if self.spec.all_rows {
                    for k in 0..m.rows.len() {
                        evals.push((*p, mi, k + 1, number));
                        first_rows.push(first);
                        row_refs.push(self.row(*p, m.rows[k].0).ok_or_else(|| {
                            SluiceError::Internal("a match row was freed".into())
                        })?);
                    }
                } else {
                    evals.push((*p, mi, m.rows.len(), number));
                    first_rows.push(first);
                }
            }
            let n = evals.len();
            let navs = self.nav_columns(&found, &evals)?;
            let mut columns: Vec<ArrayRef> = Vec::new();
            for &k in &self.spec.partition_by {
                columns.push(self.gather(&first_rows, k)?);
            }
            for m in &self.measures {
                columns.push(m.evaluate(&navs)?.into_array(n)?);
            }
            if self.spec.all_rows {
                for &c in &self.other_columns {
                    columns.push(self.gather(&row_refs, c)?);
                }
            }
            let columns = columns
                .into_iter()
                .zip(self.out_schema.fields())
                .map(|(c, f)| {
                    if c.data_type() == f.data_type() {
                        Ok(c)
                    } else {
                        Ok(datafusion_common::arrow::compute::cast(&c, f.data_type())?)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            let batch = RecordBatch::try_new(Arc::clone(&self.out_schema), columns)?;
            out.emit(StreamBatch {
                data: batch,
                row_watermarks: None,
                ops: None,
            });
        }
        self.trim_touched()
    }

    /// Column `column` of each row.
    fn gather(&self, rows: &[RowRef], column: usize) -> Result<ArrayRef> {
        let refs: Vec<Option<RowRef>> = rows.iter().copied().map(Some).collect();
        self.gather_nullable(&refs, column, self.input_schema.field(column).data_type())
    }

    /// Frees, in each partition touched since the last trim, the rows before its oldest
    /// live partial match (minus the rows `PREV` reaches back); compacts the store when
    /// most of its rows are free (a few rows still needed must not pin whole batches).
    fn trim_touched(&mut self) -> Result<()> {
        let touched = std::mem::take(&mut self.touched);
        for p in touched {
            let part = &mut self.partitions[p];
            part.touched = false;
            let live = part.matcher.oldest_live_row().unwrap_or(part.next_seq);
            let keep_from = live.min(part.next_seq).saturating_sub(self.spec.max_prev);
            while part.base < keep_from {
                let Some(r) = part.rows.pop_front() else {
                    break;
                };
                part.base += 1;
                self.live_rows -= 1;
                if let Some(entry) = self.store.get_mut(&r.batch) {
                    entry.1 -= 1;
                    if entry.1 == 0 {
                        self.stored_rows -= entry.0.num_rows();
                        self.store.remove(&r.batch);
                    }
                }
            }
        }
        if self.stored_rows > 2 * self.live_rows + 16_384 {
            self.compact()?;
        }
        self.sweep();
        Ok(())
    }

    /// Forgets the partitions with nothing left (no rows, partial match, timer or match
    /// count to keep); their ids are reused. Runs when the registered keys have doubled
    /// since the last sweep (amortized O(1) per new key; forgetting at once would make
    /// a key that comes back register again at every row).
    fn sweep(&mut self) {
        if self.partitions.len() <= 2 * self.sweep_survivors + self.sweep_min {
            return;
        }
        for p in self.partitions.live_ids() {
            let part = &self.partitions[p as usize];
            let empty = part.rows.is_empty()
                && part.matcher.is_idle()
                && !part.timer
                && !part.touched
                && (part.matches == 0 || !self.uses_match_number);
            if empty {
                self.partitions.forget(p, Partition::new(&self.match_spec));
            }
        }
        self.sweep_survivors = self.partitions.len();
    }

    /// Copies every row a partition still holds into one new store batch.
    fn compact(&mut self) -> Result<()> {
        let mut refs: Vec<RowRef> = Vec::with_capacity(self.live_rows);
        for part in self.partitions.slots() {
            refs.extend(part.rows.iter().copied());
        }
        if refs.is_empty() {
            self.store.clear();
            self.stored_rows = 0;
            return Ok(());
        }
        let columns = (0..self.input_schema.fields().len())
            .map(|c| self.gather(&refs, c))
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new(Arc::clone(&self.input_schema), columns)?;
        let id = self.next_batch;
        self.next_batch = self.next_batch.wrapping_add(1);
        let mut k = 0u32;
        for part in self.partitions.slots_mut() {
            for r in part.rows.iter_mut() {
                *r = RowRef { batch: id, row: k };
                k += 1;
            }
        }
        self.store.clear();
        self.store.insert(id, (batch, refs.len()));
        self.stored_rows = refs.len();
        self.live_rows = refs.len();
        Ok(())
    }
}

/// Row-by-row DEFINE evaluation for conditions that read the match so far.
struct Evaluator<'a> {
    op: &'a MatchRecognizeOperator,
    partition: usize,
    error: Option<SluiceError>,
}

impl Conditions for Evaluator<'_> {
    fn test(&mut self, var: VarId, row: u64, path: &Path<'_>) -> bool {
        if self.error.is_some() {
            return false;
        }
        match self.op.test_define(self.partition, var, row, path) {
            Ok(b) => b,
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }
}

fn var_id(compiled: &CompiledPattern, spec: &MatchRecognizeSpec, v: usize) -> Result<VarId> {
    compiled
        .var_id(&spec.variables[v])
        .ok_or_else(|| SluiceError::Internal(format!("unknown variable {v}")))
}

/// `PREV(x, n)` counted back from the row being tested.
fn is_prev_of_current(row: &NavRow) -> bool {
    match row {
        NavRow::Prev { base, .. } => {
            matches!(**base, NavRow::Last { n: 0, .. }) || is_prev_of_current(base)
        }
        _ => false,
    }
}

/// `func` over `values` (the selected rows' values; for a row count, one per row), typed
/// `ty`. NULLs are skipped; an empty input gives NULL (COUNT: 0).
fn aggregate(func: NavAggregate, values: Vec<ScalarValue>, ty: &DataType) -> Result<ScalarValue> {
    let values: Vec<ScalarValue> = values.into_iter().filter(|v| !v.is_null()).collect();
    Ok(match func {
        NavAggregate::Count => ScalarValue::Int64(Some(values.len() as i64)),
        _ if values.is_empty() => ScalarValue::try_from(ty)?,
        NavAggregate::Sum => {
            let mut acc = values[0].cast_to(ty)?;
            for v in &values[1..] {
                acc = acc.add(v.cast_to(ty)?)?;
            }
            acc
        }
        NavAggregate::Avg => {
            let mut sum = 0f64;
            for v in &values {
                match v.cast_to(&DataType::Float64)? {
                    ScalarValue::Float64(Some(x)) => sum += x,
                    _ => {}
                }
            }
            ScalarValue::Float64(Some(sum / values.len() as f64))
        }
        NavAggregate::Min | NavAggregate::Max => {
            let mut best = values[0].clone();
            for v in &values[1..] {
                let better = match v.partial_cmp(&best) {
                    Some(std::cmp::Ordering::Less) => func == NavAggregate::Min,
                    Some(std::cmp::Ordering::Greater) => func == NavAggregate::Max,
                    _ => false,
                };
                if better {
                    best = v.clone();
                }
            }
            best
        }
    })
}

impl MatchRecognizeOperator {
    /// Partition keys with state (rows, partial matches or a match count), for tests.
    pub fn keys_in_state(&self) -> usize {
        self.partitions.len()
    }
}

/// Snapshot row kinds (column `kind`).
const PENDING: i8 = 0;
const PARTITION_ROW: i8 = 1;
const PARTITION: i8 = 2;

/// A partition's scalars in a snapshot (`kind` = 2 rows, column `partition`, JSON).
#[derive(serde::Serialize, serde::Deserialize)]
struct PartitionState {
    base: u64,
    next_seq: u64,
    matches: u64,
    last_ts: i64,
    matcher: super::nfa::MatcherState,
}

impl Partition {
    /// A partition with no rows and an idle matcher for `spec`.
    fn new(spec: &Arc<MatchSpec>) -> Partition {
        Partition {
            rows: VecDeque::new(),
            base: 0,
            next_seq: 0,
            matcher: Matcher::new(Arc::clone(spec)),
            matches: 0,
            last_ts: i64::MIN,
            timer: false,
            touched: false,
            active: false,
        }
    }
}

impl MatchRecognizeOperator {
    /// The partition of each row of `columns` (input columns), created when new.
    fn partitions_of(&mut self, columns: &[ArrayRef], n: usize) -> Result<Vec<usize>> {
        let key_rows = match &self.key_converter {
            Some(c) => {
                let cols: Vec<ArrayRef> = self
                    .spec
                    .partition_by
                    .iter()
                    .map(|&k| Arc::clone(&columns[k]))
                    .collect();
                Some(c.convert_columns(&cols)?)
            }
            None => None,
        };
        let mut parts = Vec::with_capacity(n);
        let all: Vec<u32> = (0..n as u32).collect();
        let spec = &self.match_spec;
        self.partitions
            .ids_or_insert_with(key_rows.as_ref(), &all, &mut parts, |_| {
                Ok(Partition::new(spec))
            })?;
        Ok(parts)
    }
}

impl Operator for MatchRecognizeOperator {
    fn name(&self) -> &'static str {
        "MatchRecognize"
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let _ = out;
        let data = batch.data;
        let n = data.num_rows();
        if n == 0 {
            return Ok(());
        }
        let ts = event_times_ms(data.column(self.spec.rowtime))?;
        let id = self.next_batch;
        let mut kept = 0usize;
        let mut late = 0u64;
        for i in 0..n {
            let wm = batch
                .row_watermarks
                .as_ref()
                .map(|w| w.value(i))
                .unwrap_or(self.watermark)
                .max(self.watermark);
            if ts.is_null(i) || ts.value(i) < wm {
                late += 1;
                continue;
            }
            self.pending.push(ts.value(i), (id, i as u32));
            kept += 1;
        }
        JobMetrics::add(&self.metrics.late_rows_dropped, late);
        if kept > 0 {
            self.next_batch = self.next_batch.wrapping_add(1);
            self.pending_batches.insert(id, (data, kept));
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark_ms: i64, out: &mut Collector) -> Result<()> {
        if watermark_ms > self.watermark {
            self.watermark = watermark_ms;
            let mut found = Vec::new();
            self.release(watermark_ms, &mut found)?;
            self.expire(watermark_ms, &mut found)?;
            self.emit(found, out)?;
        }
        let forward = self.hold(watermark_ms);
        if forward > self.forwarded {
            self.forwarded = forward;
            out.watermark(forward);
        }
        Ok(())
    }

    /// The common snapshot layout ([`crate::state::snapshot`]): `key_group`, the
    /// `PARTITION BY` columns as `key_<k>`, `kind` (0: a row waiting for the watermark,
    /// 1: a row a partition still needs, 2: a partition), `seq` (kind 1: its number in
    /// the partition; kind 0: its place in release order), `partition` (kind 2: JSON of
    /// the partition's counters and matcher state: partial matches as their rows'
    /// numbers and variables), then `row_<i>` per other input column `i` (kinds 0 and 1:
    /// the row; kind 2: null).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        use datafusion_common::arrow::array::{Int8Array, StringArray, UInt64Array};
        let mut kinds: Vec<i8> = Vec::new();
        let mut seqs: Vec<Option<u64>> = Vec::new();
        let mut states: Vec<Option<String>> = Vec::new();
        // Row sources: (store batch or pending batch, row) per snapshot row, or a key.
        enum Src {
            Store(u32, u32),
            Pending(u32, u32),
            Key(usize),
        }
        let mut srcs: Vec<Src> = Vec::new();
        for (arrival, (_, &(batch, row))) in self.pending.ordered().into_iter().enumerate() {
            kinds.push(PENDING);
            seqs.push(Some(arrival as u64));
            states.push(None);
            srcs.push(Src::Pending(batch, row));
        }
        // Partitions written (their ids), in order: `Src::Key(k)` is the k-th.
        let mut header_ids: Vec<u32> = Vec::new();
        for pi in self.partitions.live_ids() {
            let part = &self.partitions[pi as usize];
            // A partition with no rows, no partial match and no match number to keep
            // starts afresh after a restore, as if new.
            if part.rows.is_empty()
                && part.matcher.is_idle()
                && (part.matches == 0 || !self.uses_match_number)
            {
                continue;
            }
            let state = PartitionState {
                base: part.base,
                next_seq: part.next_seq,
                matches: part.matches,
                last_ts: part.last_ts,
                matcher: part.matcher.snapshot(),
            };
            kinds.push(PARTITION);
            seqs.push(None);
            states.push(Some(serde_json::to_string(&state).map_err(|e| {
                SluiceError::Internal(format!("encoding MATCH_RECOGNIZE state: {e}"))
            })?));
            srcs.push(Src::Key(header_ids.len()));
            header_ids.push(pi);
            for (k, r) in part.rows.iter().enumerate() {
                kinds.push(PARTITION_ROW);
                seqs.push(Some(part.base + k as u64));
                states.push(None);
                srcs.push(Src::Store(r.batch, r.row));
            }
        }
        if kinds.is_empty() {
            return Ok(None);
        }
        // Row columns: interleave from the store, the pending batches and the keys.
        let key_columns = self
            .partitions
            .key_columns(self.key_converter.as_ref(), &header_ids)?;
        let mut columns: Vec<ArrayRef> = Vec::new();
        for c in 0..self.input_schema.fields().len() {
            let ty = self.input_schema.field(c).data_type();
            let nulls = new_null_array(ty, 1);
            let key_pos = self.spec.partition_by.iter().position(|&k| k == c);
            let mut arrays: Vec<&dyn Array> = vec![nulls.as_ref()];
            let mut index_of: HashMap<(u8, u32), usize> = HashMap::new();
            let mut indices = Vec::with_capacity(srcs.len());
            for src in &srcs {
                let (slot, row) = match src {
                    Src::Store(b, r) => {
                        let k = *index_of.entry((0, *b)).or_insert_with(|| {
                            arrays.push(self.store[b].0.column(c).as_ref());
                            arrays.len() - 1
                        });
                        (k, *r as usize)
                    }
                    Src::Pending(b, r) => {
                        let k = *index_of.entry((1, *b)).or_insert_with(|| {
                            arrays.push(self.pending_batches[b].0.column(c).as_ref());
                            arrays.len() - 1
                        });
                        (k, *r as usize)
                    }
                    Src::Key(p) => match key_pos {
                        Some(kp) => {
                            let k = *index_of.entry((2, 0)).or_insert_with(|| {
                                arrays.push(key_columns[kp].as_ref());
                                arrays.len() - 1
                            });
                            (k, *p)
                        }
                        None => (0, 0),
                    },
                };
                indices.push((slot, row));
            }
            columns.push(interleave(&arrays, &indices)?);
        }
        let partition_columns: Vec<ArrayRef> = self
            .spec
            .partition_by
            .iter()
            .map(|&k| Arc::clone(&columns[k]))
            .collect();
        let mut w = SnapshotWriter::new(partition_columns, kinds.len(), max_parallelism)?;
        w.column("kind", Arc::new(Int8Array::from(kinds)));
        w.column("seq", Arc::new(UInt64Array::from(seqs)));
        w.column("partition", Arc::new(StringArray::from(states)));
        for &c in &self.other_columns {
            w.column(format!("row_{c}"), Arc::clone(&columns[c]));
        }
        w.finish()
    }

    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        use datafusion_common::arrow::datatypes::{Int8Type, UInt64Type};
        for snap in snapshots {
            let n = snap.num_rows();
            if n == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "MATCH_RECOGNIZE");
            let kinds = reader.primitive::<Int8Type>("kind")?;
            let seqs = reader.primitive::<UInt64Type>("seq")?;
            let states = reader.string("partition")?;
            // The partition columns are the snapshot's key columns.
            let columns = (0..self.input_schema.fields().len())
                .map(
                    |c| match self.spec.partition_by.iter().position(|&k| k == c) {
                        Some(k) => reader.column(&format!("key_{k}")),
                        None => reader.column(&format!("row_{c}")),
                    },
                )
                .collect::<Result<Vec<_>>>()?;
            let rows = RecordBatch::try_new(Arc::clone(&self.input_schema), columns)?;
            let parts = self.partitions_of(rows.columns(), n)?;
            // Partitions first (their matchers), then their rows in order.
            for i in 0..n {
                if kinds.value(i) != PARTITION {
                    continue;
                }
                let state: PartitionState = serde_json::from_str(states.value(i)).map_err(|e| {
                    SluiceError::Execution(format!(
                        "the checkpoint's MATCH_RECOGNIZE state cannot be read: {e}"
                    ))
                })?;
                let matcher = Matcher::restore(Arc::clone(&self.match_spec), state.matcher)
                    .map_err(|e| SluiceError::Execution(format!("MATCH_RECOGNIZE restore: {e}")))?;
                let part = &mut self.partitions[parts[i]];
                part.base = state.base;
                part.next_seq = state.next_seq;
                part.matches = state.matches;
                part.last_ts = state.last_ts;
                part.matcher = matcher;
            }
            let mut store_rows: Vec<(usize, u64, usize)> = Vec::new();
            let mut pending_rows: Vec<(u64, usize)> = Vec::new();
            for i in 0..n {
                match kinds.value(i) {
                    PARTITION_ROW => store_rows.push((parts[i], seqs.value(i), i)),
                    PENDING => pending_rows.push((seqs.value(i), i)),
                    _ => {}
                }
            }
            store_rows.sort_unstable();
            if !store_rows.is_empty() {
                let id = self.next_batch;
                self.next_batch = self.next_batch.wrapping_add(1);
                self.store.insert(id, (rows.clone(), store_rows.len()));
                self.stored_rows += rows.num_rows();
                self.live_rows += store_rows.len();
                for (p, seq, i) in store_rows {
                    let part = &mut self.partitions[p];
                    if seq != part.base + part.rows.len() as u64 {
                        return Err(SluiceError::Execution(format!(
                            "the checkpoint's MATCH_RECOGNIZE rows of a partition are not \
                             contiguous (row {seq}, expected {})",
                            part.base + part.rows.len() as u64
                        )));
                    }
                    part.rows.push_back(RowRef {
                        batch: id,
                        row: i as u32,
                    });
                }
            }
            if !pending_rows.is_empty() {
                pending_rows.sort_unstable();
                let ts = event_times_ms(rows.column(self.spec.rowtime))?;
                let id = self.next_batch;
                self.next_batch = self.next_batch.wrapping_add(1);
                self.pending_batches
                    .insert(id, (rows.clone(), pending_rows.len()));
                for (_, i) in pending_rows {
                    self.pending.push(ts.value(i), (id, i as u32));
                }
            }
        }
        for p in self.partitions.live_ids() {
            self.arm_timer(p as usize);
            self.note_activity(p as usize);
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut Collector) -> Result<()> {
        let mut found = Vec::new();
        self.release(i64::MAX, &mut found)?;
        for p in self.partitions.live_ids() {
            let p = p as usize;
            self.partitions[p]
                .matcher
                .finish()
                .map_err(|e| SluiceError::Execution(format!("MATCH_RECOGNIZE: {e}")))?;
            self.collect_matches(p, &mut found);
        }
        self.emit(found, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::{Int32Array, TimestampMillisecondArray};
    use datafusion_common::arrow::datatypes::{Field, Schema, TimeUnit};
    use datafusion_common::DFSchema;
    use sluice_common::row_pattern::RowPattern;

    /// `PARTITION BY k ORDER BY ts PATTERN (A B)`, A and B any row, no measures.
    fn operator() -> MatchRecognizeOperator {
        let input = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]));
        let spec = MatchRecognizeSpec {
            partition_by: vec![0],
            rowtime: 1,
            pattern: RowPattern::Concat(vec![RowPattern::var("A"), RowPattern::var("B")]),
            variables: vec!["A".into(), "B".into()],
            navs: vec![],
            nav_schema: Arc::new(DFSchema::empty()),
            define: vec![None, None],
            history_free: true,
            measures: vec![],
            all_rows: false,
            skip: MatchSkip::PastLastRow,
            within_ms: None,
            max_prev: 0,
        };
        let out = Arc::new(Schema::new(vec![Field::new("k", DataType::Int32, true)]));
        MatchRecognizeOperator::new(spec, Arc::clone(&input), out, Arc::default()).unwrap()
    }

    fn rows(keys: &[i32], ts: &[i64]) -> StreamBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]));
        StreamBatch {
            data: RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(Int32Array::from(keys.to_vec())),
                    Arc::new(TimestampMillisecondArray::from(ts.to_vec())),
                ],
            )
            .unwrap(),
            row_watermarks: None,
            ops: None,
        }
    }

    /// A key whose match completed has no state left: it is forgotten and its id reused,
    /// so state stays bounded by the keys with open partial matches.
    #[test]
    fn completed_keys_are_forgotten_and_ids_reused() {
        let mut op = operator();
        op.sweep_min = 0;
        let mut out = Collector::default();
        // 100 keys, two rows each: one match per key.
        let keys: Vec<i32> = (0..100).flat_map(|k| [k, k]).collect();
        let ts: Vec<i64> = (0..200).collect();
        op.process_batch(rows(&keys, &ts), &mut out).unwrap();
        op.on_watermark(1_000, &mut out).unwrap();
        let emitted: usize = out
            .take()
            .iter()
            .map(|m| match m {
                crate::message::Message::Data(b) => b.data.num_rows(),
                _ => 0,
            })
            .sum();
        assert_eq!(emitted, 100);
        assert_eq!(op.keys_in_state(), 0);
        // One open partial match each for 50 new keys: ids 0..50 are reused.
        let keys: Vec<i32> = (100..150).collect();
        let ts: Vec<i64> = (2_000..2_050).collect();
        op.process_batch(rows(&keys, &ts), &mut out).unwrap();
        op.on_watermark(3_000, &mut out).unwrap();
        assert_eq!(op.keys_in_state(), 50);
        assert_eq!(op.partitions.capacity(), 100, "no new partition slots");
        // The watermark is held below the open partial matches (first row at 2000).
        let watermarks: Vec<i64> = out
            .take()
            .into_iter()
            .filter_map(|m| match m {
                crate::message::Message::Watermark(w) => Some(w),
                _ => None,
            })
            .collect();
        assert_eq!(watermarks, vec![1_999]);
    }
}
