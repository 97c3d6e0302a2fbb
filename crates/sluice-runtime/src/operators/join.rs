//! Regular joins (Flink SQL "Joins > Regular Joins"; Flink's `StreamingJoinOperator` and
//! `StreamingSemiAntiJoinOperator`): inner, left, right and full outer joins, and the semi
//! and anti joins `IN` / `EXISTS` subqueries become, over append-only or updating inputs.
//!
//! Each input's rows are kept per key ([`JoinRows`]: a count per distinct row and, where
//! needed, its partner count; keys shared by both inputs). A row arriving on one input is stored and joined with the
//! other input's rows of its key for which the residual condition holds; a retraction
//! takes it away and retracts what it produced. The output is a changelog:
//!
//! - accumulate (`+I`/`+U`) on input S: `+I` S-row ⨝ each partner (times its count); an
//!   outer S-row without partners: `+I` padded with NULLs; an outer partner whose partner
//!   count goes 0 → 1: `-D` its padded row first;
//! - retract (`-U`/`-D`): `-D` of the same rows; an outer S-row without partners: `-D`
//!   padded; an outer partner whose count goes 1 → 0: `+I` its padded row again;
//! - semi (anti) join: a left row is shown while it has (has no) partners; right rows
//!   flip left rows in and out as their partner counts cross zero.
//!
//! NULL key parts match nothing unless the join's keys are `IS NOT DISTINCT FROM`; a row
//! with such a key is not stored (it can never have partners). Under `NOT IN` semantics
//! (`null_aware`) a NULL key on either side is a partner of every row (see
//! [`sluice_common::plan::JoinSpec`]); such a join runs as one subtask.
//!
//! The output carries no event-time attribute (Flink: a time attribute becomes a plain
//! column after a regular join); watermarks pass through (the minimum over the inputs).

use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, BooleanArray, Int64Array, Int8Array, UInt32Array, UInt8Array,
};
use datafusion_common::arrow::compute::{concat, filter, take};
use datafusion_common::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_common::arrow::row::{RowConverter, Rows};
use datafusion_physical_expr::utils::collect_columns;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::JoinKind;
use sluice_common::{Result, SluiceError};

use crate::clock::ProcessingClock;
use crate::expr::{evaluate_all, evaluate_predicate};
use crate::message::{RowKind, StreamBatch};
use crate::operator::{Collector, Operator};
use crate::state::row_codec::{EncodedRows, RowCodec};
use crate::state::row_log::Read;
use crate::state::rows::{Held, JoinRows};
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// One input of the join and what is kept of it.
pub struct JoinInput {
    /// Key expressions over this input's batches.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The input's schema.
    pub schema: SchemaRef,
    /// Encodes whole rows to the bytes the state holds and back.
    codec: RowCodec,
}

impl JoinInput {
    /// An input with these keys and columns.
    ///
    /// # Errors
    /// A column type the row codec cannot hold.
    pub fn new(keys: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Result<Self> {
        let codec = RowCodec::new(&schema)?;
        Ok(JoinInput {
            keys,
            schema,
            codec,
        })
    }
}

impl JoinInput {
    /// The rows of a batch of this input as the state holds them.
    pub(crate) fn encode_rows(&self, data: &RecordBatch) -> Result<EncodedRows> {
        self.codec.encode(data.columns())
    }
}

/// A batch's join keys: row-format bytes, NULL flags and, for keys held, their ids (valid
/// for the batch: emptied keys are forgotten after it).
pub(crate) struct BatchKeys {
    rows: Option<Rows>,
    /// A key part of the row is NULL.
    pub(crate) nulls: Vec<bool>,
    /// The key's id when some row holds it.
    pub(crate) ids: Vec<Option<u32>>,
}

impl BatchKeys {
    /// Row `i`'s key bytes (empty without key columns).
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        self.rows.as_ref().map(|r| r.row(i).data()).unwrap_or(&[])
    }
}

impl JoinOperator {
    /// The keys of a batch of input `s`.
    pub(crate) fn batch_keys(&self, s: usize, data: &RecordBatch) -> Result<BatchKeys> {
        let key_columns = evaluate_all(&self.inputs[s].keys, data)?;
        let rows = crate::state::encode_keys(self.key_converter.as_ref(), &key_columns)?;
        let nulls = (0..data.num_rows())
            .map(|i| key_columns.iter().any(|k| k.is_null(i)))
            .collect();
        let mut keys = BatchKeys {
            rows,
            nulls,
            ids: Vec::new(),
        };
        let mut ids = Vec::with_capacity(data.num_rows());
        self.state
            .key_ids((0..data.num_rows()).map(|i| keys.key(i)), &mut ids);
        keys.ids = ids;
        Ok(keys)
    }

    /// The processing time (ms).
    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Input `s`'s held rows `ids` (repeated as often as they are to be emitted) padded
    /// with NULLs for the other input's columns, as inserts.
    pub(crate) fn padded_rows(&self, s: usize, ids: &[u32]) -> Result<StreamBatch> {
        let mine = self.columns_of(s, ids)?;
        let theirs: Vec<ArrayRef> = self.inputs[1 - s]
            .schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), ids.len()))
            .collect();
        let columns = if s == 0 {
            [mine, theirs].concat()
        } else {
            [theirs, mine].concat()
        };
        Ok(StreamBatch::new(RecordBatch::try_new(
            Arc::clone(&self.out_schema),
            columns,
        )?))
    }

    /// The columns of input `input`'s held rows `ids`, decoded.
    pub(crate) fn columns_of(&self, input: usize, ids: &[u32]) -> Result<Vec<ArrayRef>> {
        self.rows_of(input, ids, Read::Probe)
    }

    /// The columns of input `input`'s held rows `ids`, decoded; `read` as
    /// [`JoinRows::with_rows`] takes it.
    fn rows_of(&self, input: usize, ids: &[u32], read: Read) -> Result<Vec<ArrayRef>> {
        let codec = &self.inputs[input].codec;
        self.state
            .with_rows(input, ids, read, |rows| codec.decode(rows))
    }
}

/// How many rows ahead the insert loop prefetches a row's key's row lists.
const KEY_PREFETCH_AHEAD: usize = 8;

/// Rows a snapshot decodes at a time (held rows are decompressed for one chunk at a time:
/// a snapshot's peak memory is its columns, not also every compressed block raw).
const SNAPSHOT_CHUNK_ROWS: usize = 8_192;

/// Where an output row's columns of one side come from.
#[derive(Default)]
pub(crate) struct OutputRows {
    /// Index into the input batch, or NULL padding.
    from_batch: Vec<Option<u32>>,
    /// Row id on the other side, or NULL padding.
    from_state: Vec<Option<u32>>,
    kinds: Vec<i8>,
    /// A mark join's `mark` per row.
    marks: Vec<bool>,
}

impl OutputRows {
    /// Whether no row was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    pub(crate) fn push(
        &mut self,
        kind: RowKind,
        batch_row: Option<u32>,
        state_row: Option<u32>,
        times: u32,
    ) {
        for _ in 0..times {
            self.from_batch.push(batch_row);
            self.from_state.push(state_row);
            self.kinds.push(kind as i8);
        }
    }
}

/// The regular join operator (see the module docs).
pub struct JoinOperator {
    pub(crate) kind: JoinKind,
    pub(crate) null_equal: bool,
    null_aware: bool,
    /// Left (0) and right (1).
    pub(crate) inputs: [JoinInput; 2],
    /// Both inputs' rows.
    pub(crate) state: JoinRows,
    /// Key row format (the same key types on both inputs); `None` without keys.
    pub(crate) key_converter: Option<RowConverter>,
    key_types: Vec<DataType>,
    /// The NULL key's bytes (null-aware joins).
    null_key: Option<Vec<u8>>,
    /// Over the left columns then the right ones.
    pub(crate) residual: Option<Arc<dyn PhysicalExpr>>,
    /// Per input, which of its columns the residual condition reads.
    residual_reads: [Vec<bool>; 2],
    /// The pair schema with the columns the residual does not read nullable (they are
    /// NULL in the pairs it is evaluated on).
    residual_schema: SchemaRef,
    out_schema: SchemaRef,
    ttl: Option<std::time::Duration>,
    clock: ProcessingClock,
    sweep: crate::clock::IdleSweep,
}

impl JoinOperator {
    /// A join of `left` and `right` (keys of the same types pairwise) producing
    /// `out_schema` (left columns then right ones; left only for semi and anti joins).
    /// `residual` is over `pair_schema` (left columns then right ones).
    ///
    /// # Errors
    /// Key types that differ between the inputs, or that the row format cannot hold.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: JoinKind,
        left: JoinInput,
        right: JoinInput,
        null_equal: bool,
        null_aware: bool,
        residual: Option<Arc<dyn PhysicalExpr>>,
        pair_schema: SchemaRef,
        out_schema: SchemaRef,
    ) -> Result<Self> {
        let types = |input: &JoinInput| {
            input
                .keys
                .iter()
                .map(|k| k.data_type(&input.schema))
                .collect::<datafusion_common::Result<Vec<_>>>()
        };
        let key_types = types(&left)?;
        if key_types != types(&right)? {
            return Err(SluiceError::Internal(format!(
                "join keys of different types: {key_types:?} and {:?}",
                types(&right)?
            )));
        }
        let key_converter = key_converter(&key_types)?;
        let null_key = match (&key_converter, null_aware) {
            (Some(c), true) => {
                let nulls: Vec<ArrayRef> = key_types.iter().map(|t| new_null_array(t, 1)).collect();
                Some(c.convert_columns(&nulls)?.row(0).as_ref().to_vec())
            }
            _ => None,
        };
        let left_width = left.schema.fields().len();
        let mut reads = vec![false; pair_schema.fields().len()];
        if let Some(r) = &residual {
            for c in collect_columns(r) {
                if let Some(read) = reads.get_mut(c.index()) {
                    *read = true;
                }
            }
        }
        let residual_schema = Arc::new(Schema::new(
            pair_schema
                .fields()
                .iter()
                .zip(&reads)
                .map(|(f, &read)| {
                    if read {
                        Arc::clone(f)
                    } else {
                        Arc::new(f.as_ref().clone().with_nullable(true))
                    }
                })
                .collect::<Vec<_>>(),
        ));
        let right_reads = reads.split_off(left_width.min(reads.len()));
        Ok(JoinOperator {
            kind,
            null_equal,
            null_aware,
            inputs: [left, right],
            state: JoinRows::new(),
            key_converter,
            key_types,
            null_key,
            residual,
            residual_reads: [reads, right_reads],
            residual_schema,
            out_schema,
            ttl: None,
            clock: ProcessingClock::system(),
            sweep: crate::clock::IdleSweep::default(),
        })
    }

    /// Forgets rows unchanged for `ttl` of processing time (`'table.exec.state.ttl'`),
    /// measured on `clock`.
    pub fn with_state_ttl(
        mut self,
        ttl: Option<std::time::Duration>,
        clock: ProcessingClock,
    ) -> Self {
        self.ttl = ttl;
        self.clock = clock;
        if ttl.is_some() {
            // Equal rows are one entry again (see `with_append_only_inputs`).
            self.state = JoinRows::new();
        }
        self
    }

    /// Marks the append-only inputs (`[left, right]`: their rows are never retracted),
    /// whose rows are then held without an index by their bytes: [`Held::Arrivals`] when
    /// `rows_leave` (an interval join's, by the watermark), else [`Held::Forever`] (kept
    /// to the end, cold ones compressed). Not under a state TTL: there equal rows stay
    /// one entry, which every copy's arrival keeps alive (Flink's row-to-count map state,
    /// its TTL updated on write). Call before any row arrives.
    pub fn with_append_only_inputs(mut self, append_only: [bool; 2], rows_leave: bool) -> Self {
        if self.ttl.is_none() {
            let append_only_as = if rows_leave {
                Held::Arrivals
            } else {
                Held::Forever
            };
            self.state = JoinRows::with_held(append_only.map(|a| {
                if a {
                    append_only_as
                } else {
                    Held::Distinct
                }
            }));
        }
        self
    }

    /// Rows held per input (left, right): distinct rows with their copies counted, and
    /// each arrival of an append-only input.
    pub fn rows_in_state(&self) -> (usize, usize) {
        (self.state.len(0), self.state.len(1))
    }

    /// Bytes of state held (both inputs).
    pub fn state_bytes(&self) -> usize {
        self.state.bytes()
    }

    fn expire(&mut self) {
        let Some(ttl) = self.ttl else {
            return;
        };
        let ttl_ms = ttl.as_millis() as i64;
        let now = self.clock.now_ms();
        if !self.sweep.due(now, ttl_ms) {
            return;
        }
        self.state.expire(now, ttl_ms);
    }

    /// Whether input `s`'s rows are padded with NULLs while they have no partner.
    fn outer(&self, s: usize) -> bool {
        if s == 0 {
            self.kind.left_outer()
        } else {
            self.kind.right_outer()
        }
    }

    /// The other input's rows that may be partners of a row whose key has id `key_id`
    /// (`has_null`: a key part is NULL), before the residual condition.
    fn candidates(&self, other: usize, key_id: Option<u32>, has_null: bool, out: &mut Vec<u32>) {
        let state = &self.state;
        let of_key = |k: Option<u32>| k.map(|k| state.rows_of(k, other)).unwrap_or(&[]);
        if self.null_aware {
            if has_null {
                out.extend(state.ids(other));
            } else {
                out.extend_from_slice(of_key(key_id));
                let null_key = self.null_key.as_ref().and_then(|k| state.key_id(k));
                out.extend_from_slice(of_key(null_key));
            }
        } else if !has_null || self.null_equal {
            out.extend_from_slice(of_key(key_id));
        }
    }

    /// Which candidate pairs (batch row `pair_rows[j]` of input `s`, other row
    /// `candidates[j]`) satisfy the residual condition (all when there is none).
    pub(crate) fn residual_mask(
        &self,
        s: usize,
        data: &RecordBatch,
        pair_rows: &[u32],
        candidates: &[u32],
    ) -> Result<Option<BooleanArray>> {
        let Some(residual) = &self.residual else {
            return Ok(None);
        };
        if candidates.is_empty() {
            return Ok(None);
        }
        // Only the columns the condition reads are taken and decoded; the others are
        // NULL (`residual_schema` has them nullable).
        let [left_reads, right_reads] = &self.residual_reads;
        let (my_reads, their_reads) = if s == 0 {
            (left_reads, right_reads)
        } else {
            (right_reads, left_reads)
        };
        let idx = UInt32Array::from(pair_rows.to_vec());
        let mine = data
            .columns()
            .iter()
            .zip(my_reads)
            .map(|(c, &read)| {
                if read {
                    take(c.as_ref(), &idx, None)
                } else {
                    Ok(new_null_array(c.data_type(), idx.len()))
                }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let other = 1 - s;
        let codec = &self.inputs[other].codec;
        let theirs = self
            .state
            .with_rows(other, candidates, Read::Probe, |rows| {
                codec.decode_only(rows, their_reads)
            })?;
        let columns = if s == 0 {
            [mine, theirs].concat()
        } else {
            [theirs, mine].concat()
        };
        let pairs = RecordBatch::try_new(Arc::clone(&self.residual_schema), columns)?;
        Ok(Some(evaluate_predicate(
            residual,
            &pairs,
            "join condition",
        )?))
    }

    /// The output batch of `rows`, input `s`'s columns from `data`.
    pub(crate) fn build_output(
        &self,
        s: usize,
        data: &RecordBatch,
        rows: OutputRows,
    ) -> Result<StreamBatch> {
        let idx = UInt32Array::from(rows.from_batch);
        let mine = data
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let other = 1 - s;
        let held: Vec<u32> = rows.from_state.iter().flatten().copied().collect();
        let mut next = 0u32;
        let positions = UInt32Array::from_iter(rows.from_state.iter().map(|r| {
            r.map(|_| {
                next += 1;
                next - 1
            })
        }));
        let theirs = self
            .columns_of(other, &held)?
            .iter()
            .map(|c| take(c.as_ref(), &positions, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let left_only = self.kind.left_only() || self.kind == JoinKind::LeftMark;
        let mut columns = match (left_only, s) {
            (true, 0) => mine,
            (true, _) => theirs,
            (false, 0) => [mine, theirs].concat(),
            (false, _) => [theirs, mine].concat(),
        };
        if self.kind == JoinKind::LeftMark {
            columns.push(Arc::new(BooleanArray::from(rows.marks)) as ArrayRef);
        }
        let data = RecordBatch::try_new(Arc::clone(&self.out_schema), columns)?;
        Ok(StreamBatch {
            data,
            row_watermarks: None,
            ops: Some(Int8Array::from(rows.kinds)),
        })
    }

    /// Joins a batch of input `s` (see the module docs).
    fn join_batch(&mut self, s: usize, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        if self.state.is_append_only(s)
            && (0..batch.num_rows()).any(|i| batch.row_kind(i).is_retraction())
        {
            // Its rows are not indexed by their bytes: a retraction could not find them.
            return Err(SluiceError::Internal(format!(
                "a retraction on join input {s}, planned as append-only"
            )));
        }
        let n = batch.num_rows();
        let data = &batch.data;
        let other = 1 - s;
        let keys = self.batch_keys(s, data)?;
        let rows = self.inputs[s].encode_rows(data)?;
        // Every row's candidate partners, before the residual condition. The other input's
        // rows do not change while this batch is joined.
        let mut offsets = Vec::with_capacity(n + 1);
        let mut candidates = Vec::new();
        offsets.push(0);
        for i in 0..n {
            self.candidates(other, keys.ids[i], keys.nulls[i], &mut candidates);
            offsets.push(candidates.len());
        }
        let mask = if self.residual.is_some() {
            let pair_rows: Vec<u32> = (0..n)
                .flat_map(|i| std::iter::repeat_n(i as u32, offsets[i + 1] - offsets[i]))
                .collect();
            self.residual_mask(s, data, &pair_rows, &candidates)?
        } else {
            None
        };
        let now = self.clock.now_ms();
        let mut output = OutputRows::default();
        let mut partners = Vec::new();
        // Rows with a NULL key part match nothing unless NULLs are equal or the join is
        // null-aware: then they are stored too.
        let store_null_keys = self.null_equal || self.null_aware;
        for i in 0..n {
            if let Some(&Some(ahead)) = keys.ids.get(i + KEY_PREFETCH_AHEAD) {
                self.state.prefetch_key(ahead);
            }
            partners.clear();
            partners.extend(
                (offsets[i]..offsets[i + 1])
                    .filter(|&j| mask.as_ref().is_none_or(|m| m.value(j)))
                    .map(|j| candidates[j]),
            );
            let matched: u32 = partners
                .iter()
                .map(|&r| self.state.entry(other, r).count)
                .fold(0u32, |a, c| a.saturating_add(c));
            let accumulate = !batch.row_kind(i).is_retraction();
            // A row whose key cannot match is not kept (it can never gain partners).
            if store_null_keys || !keys.nulls[i] {
                let row = rows.row(i);
                if accumulate {
                    let id = self.state.insert(s, keys.key(i), keys.ids[i], row, now);
                    self.state.set_partners(s, id, matched);
                } else {
                    self.state.retract(s, row, now);
                }
            }
            self.emit_row(s, i as u32, accumulate, &partners, matched, &mut output);
        }
        self.state.forget_empty_keys();
        if !output.kinds.is_empty() {
            out.emit(self.build_output(s, data, output)?);
        }
        Ok(())
    }

    /// Counts one partner more (`accumulate`) or less for input `s`'s row `r`; returns its
    /// partner count before and after, and its copies.
    fn count_partner(&mut self, s: usize, r: u32, accumulate: bool) -> (u32, u32, u32) {
        let e = self.state.entry(s, r);
        let after = if accumulate {
            e.partners.saturating_add(1)
        } else {
            e.partners.saturating_sub(1)
        };
        self.state.set_partners(s, r, after);
        (e.partners, after, e.count)
    }

    /// The changes one row of input `s` (`batch_row`, accumulated or retracted, with
    /// `partners` on the other input, `matched` copies in all) makes to the output.
    fn emit_row(
        &mut self,
        s: usize,
        batch_row: u32,
        accumulate: bool,
        partners: &[u32],
        matched: u32,
        output: &mut OutputRows,
    ) {
        let other = 1 - s;
        let (add, remove) = (RowKind::Insert, RowKind::Delete);
        if self.kind == JoinKind::LeftMark {
            if s == 0 {
                // Every left row, marked with whether it has a partner.
                output.push(
                    if accumulate { add } else { remove },
                    Some(batch_row),
                    None,
                    1,
                );
                output.marks.push(matched > 0);
                return;
            }
            // A right row: left rows whose partner count crosses zero change their mark.
            for &r in partners {
                let (before, after, count) = self.count_partner(other, r, accumulate);
                if (before == 0) != (after == 0) {
                    for _ in 0..count {
                        output.push(remove, None, Some(r), 1);
                        output.marks.push(before > 0);
                        output.push(add, None, Some(r), 1);
                        output.marks.push(after > 0);
                    }
                }
            }
            return;
        }
        if self.kind.left_only() {
            let semi = self.kind == JoinKind::LeftSemi;
            if s == 0 {
                // The left row itself is shown while it has (semi) / lacks (anti) partners.
                if (matched > 0) == semi {
                    output.push(
                        if accumulate { add } else { remove },
                        Some(batch_row),
                        None,
                        1,
                    );
                }
                return;
            }
            // A right row: left rows whose partner count crosses zero flip.
            for &r in partners {
                let (before, after, count) = self.count_partner(other, r, accumulate);
                let crossed = (before == 0) != (after == 0);
                if crossed {
                    let shown = accumulate == semi;
                    output.push(if shown { add } else { remove }, None, Some(r), count);
                }
            }
            return;
        }
        let (in_outer, other_outer) = (self.outer(s), self.outer(other));
        if partners.is_empty() {
            if in_outer {
                output.push(
                    if accumulate { add } else { remove },
                    Some(batch_row),
                    None,
                    1,
                );
            }
            return;
        }
        if accumulate {
            if other_outer {
                for &r in partners {
                    let e = self.state.entry(other, r);
                    if e.partners == 0 {
                        output.push(remove, None, Some(r), e.count);
                    }
                    self.state.set_partners(other, r, e.partners + 1);
                }
            }
            for &r in partners {
                let count = self.state.entry(other, r).count;
                output.push(add, Some(batch_row), Some(r), count);
            }
        } else {
            for &r in partners {
                let count = self.state.entry(other, r).count;
                output.push(remove, Some(batch_row), Some(r), count);
            }
            if other_outer {
                for &r in partners {
                    let e = self.state.entry(other, r);
                    let before = e.partners;
                    self.state.set_partners(other, r, before.saturating_sub(1));
                    if before == 1 {
                        output.push(add, None, Some(r), e.count);
                    }
                }
            }
        }
    }
}

/// Each column of `parts` (per column, its pieces) concatenated.
pub(crate) fn concat_parts(parts: &[Vec<ArrayRef>]) -> Result<Vec<ArrayRef>> {
    parts
        .iter()
        .map(|pieces| {
            let pieces: Vec<&dyn Array> = pieces.iter().map(|a| a.as_ref()).collect();
            Ok(concat(&pieces)?)
        })
        .collect()
}

/// Writes a two-input operator's rows into its snapshot as `left_<i>` and `right_<i>`:
/// `sides[t]` holds, per group of rows, input `t`'s columns (NULL for the other input's
/// rows), in the same row order for both inputs.
pub(crate) fn write_input_columns(
    w: &mut SnapshotWriter,
    sides: &[Vec<Vec<ArrayRef>>; 2],
) -> Result<()> {
    for (t, prefix) in ["left", "right"].iter().enumerate() {
        let width = sides[t].first().map(|c| c.len()).unwrap_or(0);
        let per_column: Vec<Vec<ArrayRef>> = (0..width)
            .map(|c| {
                sides[t]
                    .iter()
                    .map(|columns| Arc::clone(&columns[c]))
                    .collect()
            })
            .collect();
        for (c, column) in concat_parts(&per_column)?.into_iter().enumerate() {
            w.column(format!("{prefix}_{c}"), column);
        }
    }
    Ok(())
}

impl Operator for JoinOperator {
    fn name(&self) -> &'static str {
        "Join"
    }

    fn state_rows(&self) -> Option<u64> {
        Some((self.state.len(0) + self.state.len(1)) as u64)
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        self.process_input(0, batch, out)
    }

    fn process_input(
        &mut self,
        input: usize,
        batch: StreamBatch,
        out: &mut Collector,
    ) -> Result<()> {
        if input > 1 {
            return Err(SluiceError::Internal(format!(
                "a join has no input {input}"
            )));
        }
        self.expire();
        self.join_batch(input, batch, out)
    }

    fn next_processing_timer(&self) -> Option<i64> {
        let ttl = self.ttl?.as_millis() as i64;
        if self.state.is_empty() {
            return None;
        }
        Some(self.sweep.next_ms(ttl))
    }

    fn on_processing_time(&mut self, _now_ms: i64, _out: &mut Collector) -> Result<()> {
        self.expire();
        Ok(())
    }

    /// One row per distinct row held, in the common snapshot layout
    /// ([`crate::state::snapshot`]): `key_group`, the join key `key_<k>`, `input` (UInt8:
    /// 0 left, 1 right), `count` (Int64: copies), `partners` (Int64), `idle_ms` (Int64:
    /// processing time since the row last changed, for the TTL), then the left input's
    /// columns `left_<i>` and the right input's `right_<i>` (NULL on the other input's
    /// rows).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let now = self.clock.now_ms();
        let mut key_parts: Vec<Vec<ArrayRef>> = vec![Vec::new(); self.key_types.len()];
        let mut input_of = Vec::new();
        let (mut counts, mut partners, mut idle) = (Vec::new(), Vec::new(), Vec::new());
        // Per output input t, per stored input s: t's columns for s's rows.
        let mut sides: [Vec<Vec<ArrayRef>>; 2] = [Vec::new(), Vec::new()];
        for s in 0..2 {
            let ids: Vec<u32> = self.state.ids(s).collect();
            if let Some(c) = &self.key_converter {
                let parser = c.parser();
                let keys =
                    c.convert_rows(ids.iter().map(|&id| parser.parse(self.state.key_of(s, id))))?;
                for (k, col) in keys.into_iter().enumerate() {
                    key_parts[k].push(col);
                }
            }
            for &id in &ids {
                let e = self.state.entry(s, id);
                input_of.push(s as u8);
                counts.push(e.count as i64);
                partners.push(e.partners as i64);
                // A row held for good is never idle (no TTL applies to it).
                let held_for_good = e.last_ms == i64::MAX;
                idle.push(if held_for_good {
                    0
                } else {
                    (now - e.last_ms).max(0)
                });
            }
            // In chunks, so that compressed rows are decompressed a few blocks at a time.
            for chunk in ids.chunks(SNAPSHOT_CHUNK_ROWS) {
                for (t, target) in self.inputs.iter().enumerate() {
                    let columns = if t == s {
                        self.rows_of(s, chunk, Read::Scan)?
                    } else {
                        target
                            .schema
                            .fields()
                            .iter()
                            .map(|f| new_null_array(f.data_type(), chunk.len()))
                            .collect()
                    };
                    sides[t].push(columns);
                }
            }
        }
        let total = input_of.len();
        if total == 0 {
            return Ok(None);
        }
        let mut w = SnapshotWriter::new(concat_parts(&key_parts)?, total, max_parallelism)?;
        w.column("input", Arc::new(UInt8Array::from(input_of)));
        w.column("count", Arc::new(Int64Array::from(counts)));
        w.column("partners", Arc::new(Int64Array::from(partners)));
        w.column("idle_ms", Arc::new(Int64Array::from(idle)));
        write_input_columns(&mut w, &sides)?;
        w.finish()
    }

    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        use datafusion_common::arrow::datatypes::{Int64Type, UInt8Type};
        let now = self.clock.now_ms();
        for snap in snapshots {
            if snap.num_rows() == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "join");
            let input_of = reader.primitive::<UInt8Type>("input")?;
            let counts = reader.primitive::<Int64Type>("count")?;
            let partners = reader.primitive::<Int64Type>("partners")?;
            let idle = reader.primitive::<Int64Type>("idle_ms")?;
            let (_, key_rows) =
                reader.key_rows(self.key_converter.as_ref(), self.key_types.len())?;
            for (s, prefix) in ["left_", "right_"].iter().enumerate() {
                let mask =
                    BooleanArray::from_iter(input_of.iter().map(|v| Some(v == Some(s as u8))));
                let picked: Vec<usize> = (0..snap.num_rows()).filter(|&r| mask.value(r)).collect();
                if picked.is_empty() {
                    continue;
                }
                let input = &self.inputs[s];
                let columns = reader
                    .numbered_exactly(prefix, input.schema.fields().len())?
                    .iter()
                    .map(|c| filter(c.as_ref(), &mask))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let rows = input.codec.encode(&columns).map_err(|e| {
                    SluiceError::Execution(format!(
                        "a join state snapshot's rows do not match the join's inputs: {e}"
                    ))
                })?;
                for (j, &r) in picked.iter().enumerate() {
                    let key = key_rows.as_ref().map(|k| k.row(r));
                    self.state.restore(
                        s,
                        key.as_ref().map(|k| k.as_ref()).unwrap_or(&[]),
                        rows.row(j),
                        counts.value(r).clamp(1, u32::MAX as i64) as u32,
                        partners.value(r).clamp(0, u32::MAX as i64) as u32,
                        now - idle.value(r),
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_common::arrow::array::AsArray;
    use datafusion_common::arrow::array::Int32Array;
    use datafusion_common::arrow::datatypes::{Field, Schema};
    use datafusion_physical_expr::expressions::col;

    fn side(names: [&str; 2]) -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(names[0], DataType::Int32, true),
            Field::new(names[1], DataType::Int32, true),
        ]))
    }

    /// `l(k, v) <kind> JOIN r(rk, w) ON k = rk` on `clock`.
    fn join(kind: JoinKind, clock: &ProcessingClock, ttl_ms: Option<u64>) -> JoinOperator {
        let (l, r) = (side(["k", "v"]), side(["rk", "w"]));
        let pair = Arc::new(Schema::new(
            [l.fields().to_vec(), r.fields().to_vec()].concat(),
        ));
        let out = if kind.left_only() {
            Arc::clone(&l)
        } else {
            Arc::new(Schema::new(
                pair.fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect::<Vec<_>>(),
            ))
        };
        let left = JoinInput::new(vec![col("k", &l).unwrap()], Arc::clone(&l)).unwrap();
        let right = JoinInput::new(vec![col("rk", &r).unwrap()], Arc::clone(&r)).unwrap();
        JoinOperator::new(kind, left, right, false, false, None, pair, out)
            .unwrap()
            .with_state_ttl(ttl_ms.map(std::time::Duration::from_millis), clock.clone())
    }

    /// A batch of (key, value) rows with row kinds (`None`: all inserts).
    fn batch(rows: &[(Option<i32>, i32)], kinds: Option<&[RowKind]>) -> StreamBatch {
        let schema = side(["a", "b"]);
        let data = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )),
                Arc::new(Int32Array::from(
                    rows.iter().map(|r| r.1).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap();
        StreamBatch {
            data,
            row_watermarks: None,
            ops: kinds.map(|k| Int8Array::from(k.iter().map(|k| *k as i8).collect::<Vec<_>>())),
        }
    }

    /// Emitted rows as `op col0 col1 ...` (NULL as `_`).
    fn changes(out: &mut Collector) -> Vec<String> {
        let mut all = Vec::new();
        for m in out.take() {
            if let crate::message::Message::Data(b) = m {
                for i in 0..b.num_rows() {
                    let mut line = b.row_kind(i).short().to_string();
                    for c in b.data.columns() {
                        let c = c.as_primitive::<datafusion_common::arrow::datatypes::Int32Type>();
                        if c.is_null(i) {
                            line.push_str(" _");
                        } else {
                            line.push_str(&format!(" {}", c.value(i)));
                        }
                    }
                    all.push(line);
                }
            }
        }
        all
    }

    fn push(op: &mut JoinOperator, input: usize, b: StreamBatch) -> Vec<String> {
        let mut out = Collector::default();
        op.process_input(input, b, &mut out).unwrap();
        changes(&mut out)
    }

    /// Flink's outer join rules over updating inputs (shared case 039's sequences): a
    /// padded row goes when the first partner comes and comes back when the last goes; an
    /// update of a partner (retract then add) does not count it twice; NULL keys never
    /// match and are not stored.
    #[test]
    fn full_join_pads_retracts_and_pads_again() {
        use RowKind::*;
        let clock = ProcessingClock::manual(0);
        let mut j = join(JoinKind::Full, &clock, None);
        assert_eq!(
            push(&mut j, 0, batch(&[(Some(2), 10)], None)),
            ["+I 2 10 _ _"]
        );
        assert_eq!(
            push(&mut j, 1, batch(&[(Some(2), 3)], None)),
            ["-D 2 10 _ _", "+I 2 10 2 3"]
        );
        // The right row 3 is updated to 7: the join row follows, nothing is padded.
        assert_eq!(
            push(
                &mut j,
                1,
                batch(
                    &[(Some(2), 3), (Some(2), 7)],
                    Some(&[UpdateBefore, UpdateAfter])
                )
            ),
            ["-D 2 10 2 3", "+I 2 10 _ _", "-D 2 10 _ _", "+I 2 10 2 7"]
        );
        // The last partner goes: the left row is padded again.
        assert_eq!(
            push(&mut j, 1, batch(&[(Some(2), 7)], Some(&[Delete]))),
            ["-D 2 10 2 7", "+I 2 10 _ _"]
        );
        // NULL keys: padded on both sides, never joined, never stored.
        assert_eq!(push(&mut j, 0, batch(&[(None, 3)], None)), ["+I _ 3 _ _"]);
        assert_eq!(push(&mut j, 1, batch(&[(None, 4)], None)), ["+I _ _ _ 4"]);
        assert_eq!(j.rows_in_state(), (1, 0));
        // Deleting the left row takes its padded row away.
        assert_eq!(
            push(&mut j, 0, batch(&[(Some(2), 10)], Some(&[Delete]))),
            ["-D 2 10 _ _"]
        );
        assert_eq!(j.rows_in_state(), (0, 0));
    }

    /// A row arriving twice is one state row with count 2 and joins twice; an anti join's
    /// left row is hidden by its first partner and shown again when the last one goes.
    #[test]
    fn duplicates_count_and_anti_join_flips() {
        let clock = ProcessingClock::manual(0);
        let mut j = join(JoinKind::Inner, &clock, None);
        push(&mut j, 0, batch(&[(Some(1), 5), (Some(1), 5)], None));
        assert_eq!(j.rows_in_state(), (1, 0));
        assert_eq!(
            push(&mut j, 1, batch(&[(Some(1), 9)], None)),
            ["+I 1 5 1 9", "+I 1 5 1 9"]
        );
        anti_join_flips(join(JoinKind::LeftAnti, &clock, None));
    }

    /// An anti join's left row (1, 5) is hidden while a right row of key 1 is in: shown,
    /// hidden by the first of two partners, shown again when the last goes.
    fn anti_join_flips(mut anti: JoinOperator) {
        use RowKind::*;
        assert_eq!(push(&mut anti, 0, batch(&[(Some(1), 5)], None)), ["+I 1 5"]);
        assert_eq!(
            push(&mut anti, 1, batch(&[(Some(1), 8), (Some(1), 9)], None)),
            ["-D 1 5"]
        );
        assert!(push(&mut anti, 1, batch(&[(Some(1), 8)], Some(&[Delete]))).is_empty());
        assert_eq!(
            push(&mut anti, 1, batch(&[(Some(1), 9)], Some(&[Delete]))),
            ["+I 1 5"]
        );
    }

    /// One million distinct rows, each arriving three times, are one million state rows
    /// (a count per distinct row, not a copy per arrival).
    #[test]
    fn a_million_distinct_rows_arriving_three_times_are_a_million_state_rows() {
        let clock = ProcessingClock::manual(0);
        let mut j = join(JoinKind::Inner, &clock, None);
        let n = 1_000_000i32;
        for _ in 0..3 {
            for start in (0..n).step_by(50_000) {
                let rows: Vec<(Option<i32>, i32)> = (start..start + 50_000)
                    .map(|i| (Some(i % 1000), i))
                    .collect();
                assert!(push(&mut j, 0, batch(&rows, None)).is_empty());
            }
        }
        assert_eq!(j.rows_in_state(), (1_000_000, 0));
    }

    /// Rows idle longer than the TTL are forgotten without output, on a timer even when no
    /// row arrives; a later partner finds nothing.
    #[test]
    fn state_ttl_forgets_idle_rows() {
        let clock = ProcessingClock::manual(1_000);
        let mut j = join(JoinKind::Inner, &clock, Some(100));
        push(&mut j, 0, batch(&[(Some(1), 5)], None));
        clock.advance_ms(60);
        push(&mut j, 0, batch(&[(Some(2), 6)], None));
        clock.advance_ms(60);
        let due = j.next_processing_timer().expect("a sweep is due");
        assert!(due <= clock.now_ms());
        let mut out = Collector::default();
        j.on_processing_time(clock.now_ms(), &mut out).unwrap();
        assert!(changes(&mut out).is_empty());
        assert_eq!(j.rows_in_state(), (1, 0), "the row idle for 120 ms went");
        assert!(push(&mut j, 1, batch(&[(Some(1), 9)], None)).is_empty());
        assert_eq!(
            push(&mut j, 1, batch(&[(Some(2), 9)], None)),
            ["+I 2 6 2 9"]
        );
    }

    /// Under a TTL, equal rows of an append-only input expire together, kept alive by the
    /// last copy's arrival (Flink: the row's count in map state, TTL updated on write), in
    /// either order of the builder calls.
    #[test]
    fn state_ttl_keeps_equal_append_only_rows_alive_together() {
        for ttl_first in [true, false] {
            let clock = ProcessingClock::manual(1_000);
            let j = join(JoinKind::Inner, &clock, None);
            let ttl = Some(std::time::Duration::from_millis(100));
            let mut j = if ttl_first {
                j.with_state_ttl(ttl, clock.clone())
                    .with_append_only_inputs([true, true], false)
            } else {
                j.with_append_only_inputs([true, true], false)
                    .with_state_ttl(ttl, clock.clone())
            };
            push(&mut j, 0, batch(&[(Some(1), 5)], None));
            clock.advance_ms(60);
            push(&mut j, 0, batch(&[(Some(1), 5)], None));
            clock.advance_ms(60);
            let mut out = Collector::default();
            j.on_processing_time(clock.now_ms(), &mut out).unwrap();
            assert_eq!(
                push(&mut j, 1, batch(&[(Some(1), 9)], None)),
                ["+I 1 5 1 9", "+I 1 5 1 9"],
                "both copies alive 120 ms after the first (ttl first: {ttl_first})"
            );
        }
    }

    /// An append-only input's retraction is refused (its rows cannot be found by value).
    #[test]
    fn a_retraction_on_an_append_only_input_is_an_error() {
        let clock = ProcessingClock::manual(0);
        let mut j =
            join(JoinKind::Inner, &clock, None).with_append_only_inputs([true, false], false);
        push(&mut j, 0, batch(&[(Some(1), 5)], None));
        let mut out = Collector::default();
        let retract = batch(&[(Some(1), 5)], Some(&[RowKind::Delete]));
        assert!(j.process_input(0, retract, &mut out).is_err());
        let retract = batch(&[(Some(1), 9)], Some(&[RowKind::Delete]));
        assert!(
            j.process_input(1, retract, &mut out).is_ok(),
            "the updating input"
        );
    }

    /// A snapshot restored into a new operator (split by key group) gives the same later
    /// output, partner counts included.
    #[test]
    fn snapshot_and_restore_keep_counts_and_partners() {
        use RowKind::*;
        let clock = ProcessingClock::manual(0);
        let mut j = join(JoinKind::Left, &clock, None);
        push(
            &mut j,
            0,
            batch(&[(Some(1), 5), (Some(1), 5), (Some(2), 6)], None),
        );
        push(&mut j, 1, batch(&[(Some(1), 9)], None));
        let snap = j.snapshot_state(128).unwrap().expect("state");
        assert_eq!(
            snap.num_rows(),
            3,
            "two distinct left rows and one right row"
        );
        let mut restored = join(JoinKind::Left, &clock, None);
        restored.restore_state(&[snap]).unwrap();
        assert_eq!(restored.rows_in_state(), (2, 1));
        // The right row goes: both copies of (1, 5) are padded again.
        assert_eq!(
            push(&mut restored, 1, batch(&[(Some(1), 9)], Some(&[Delete]))),
            ["-D 1 5 1 9", "-D 1 5 1 9", "+I 1 5 _ _", "+I 1 5 _ _"]
        );
    }

    /// Rows held for good (append-only inputs, no TTL) keep their partner counts: an
    /// outer join's padded rows go and come as with counted rows, through a snapshot, and
    /// a snapshot of counted copies restores as one held row per copy.
    #[test]
    fn rows_held_for_good_keep_partners_through_a_snapshot() {
        let clock = ProcessingClock::manual(0);
        let forever =
            || join(JoinKind::Full, &clock, None).with_append_only_inputs([true, true], false);
        for counted in [false, true] {
            let mut j = if counted {
                join(JoinKind::Full, &clock, None)
            } else {
                forever()
            };
            assert_eq!(
                push(
                    &mut j,
                    0,
                    batch(&[(Some(1), 5), (Some(1), 5), (Some(2), 6)], None)
                ),
                ["+I 1 5 _ _", "+I 1 5 _ _", "+I 2 6 _ _"]
            );
            assert_eq!(
                push(&mut j, 1, batch(&[(Some(3), 1)], None)),
                ["+I _ _ 3 1"]
            );
            assert_eq!(
                push(&mut j, 1, batch(&[(Some(1), 9)], None)),
                ["-D 1 5 _ _", "-D 1 5 _ _", "+I 1 5 1 9", "+I 1 5 1 9"]
            );
            let snap = j.snapshot_state(128).unwrap().expect("state");
            let mut restored = forever();
            restored.restore_state(&[snap]).unwrap();
            assert_eq!(restored.rows_in_state(), (3, 2), "counted: {counted}");
            assert_eq!(
                push(&mut restored, 0, batch(&[(Some(3), 7)], None)),
                ["-D _ _ 3 1", "+I 3 7 3 1"]
            );
            assert_eq!(
                push(
                    &mut restored,
                    1,
                    batch(&[(Some(1), 10), (Some(2), 8)], None)
                ),
                ["+I 1 5 1 10", "+I 1 5 1 10", "-D 2 6 _ _", "+I 2 6 2 8"]
            );
        }
    }

    /// A snapshot of rows held for good, compressed blocks included, restores every row:
    /// 600,000 left rows (k = i % 1000, v = i % 10) are 37 blocks, 20 of them compressed.
    #[test]
    fn a_snapshot_reads_compressed_rows() {
        let clock = ProcessingClock::manual(0);
        let forever =
            || join(JoinKind::Inner, &clock, None).with_append_only_inputs([true, false], false);
        let mut j = forever();
        let rows: Vec<(Option<i32>, i32)> =
            (0..600_000).map(|i| (Some(i % 1000), i % 10)).collect();
        for chunk in rows.chunks(50_000) {
            assert!(push(&mut j, 0, batch(chunk, None)).is_empty());
        }
        assert!(j.state.frozen_blocks(0) > 0, "some blocks are compressed");
        let snap = j.snapshot_state(128).unwrap().expect("state");
        let mut restored = forever();
        restored.restore_state(&[snap]).unwrap();
        assert_eq!(restored.rows_in_state(), (600_000, 0));
        // Key 7's 600 rows: i = 7 + 1000 n, so v = 7.
        let out = push(&mut restored, 1, batch(&[(Some(7), 1)], None));
        assert_eq!(out, vec!["+I 7 7 7 1".to_string(); 600]);
    }

    /// Semi and anti joins over a left input held for good (append-only) and an updating
    /// right input: each left copy is shown or hidden by its partner count, as with
    /// counted rows (by hand: a semi join shows a left row while it has a partner, an
    /// anti join while it has none).
    #[test]
    fn semi_and_anti_joins_count_partners_of_rows_held_for_good() {
        use RowKind::*;
        let clock = ProcessingClock::manual(0);
        let held = |kind| join(kind, &clock, None).with_append_only_inputs([true, false], false);
        let mut semi = held(JoinKind::LeftSemi);
        assert!(push(&mut semi, 0, batch(&[(Some(1), 5), (Some(1), 5)], None)).is_empty());
        assert_eq!(
            push(&mut semi, 1, batch(&[(Some(1), 8)], None)),
            ["+I 1 5", "+I 1 5"]
        );
        assert!(push(&mut semi, 1, batch(&[(Some(1), 9)], None)).is_empty());
        assert!(push(&mut semi, 1, batch(&[(Some(1), 8)], Some(&[Delete]))).is_empty());
        assert_eq!(
            push(&mut semi, 1, batch(&[(Some(1), 9)], Some(&[Delete]))),
            ["-D 1 5", "-D 1 5"]
        );
        anti_join_flips(held(JoinKind::LeftAnti));
    }

    /// A snapshot of rows held for good restored under a state TTL: they count as just
    /// written (never idle before), so they live one TTL from the restore.
    #[test]
    fn rows_held_for_good_restore_under_a_ttl_as_fresh() {
        let clock = ProcessingClock::manual(1_000);
        let mut j =
            join(JoinKind::Inner, &clock, None).with_append_only_inputs([true, true], false);
        push(&mut j, 0, batch(&[(Some(1), 5)], None));
        clock.advance_ms(10_000);
        let snap = j.snapshot_state(128).unwrap().expect("state");
        let ttl = Some(std::time::Duration::from_millis(100));
        let mut restored = join(JoinKind::Inner, &clock, None).with_state_ttl(ttl, clock.clone());
        restored.restore_state(&[snap]).unwrap();
        clock.advance_ms(60);
        let mut out = Collector::default();
        restored
            .on_processing_time(clock.now_ms(), &mut out)
            .unwrap();
        assert_eq!(
            push(&mut restored, 1, batch(&[(Some(1), 9)], None)),
            ["+I 1 5 1 9"]
        );
        assert_eq!(restored.rows_in_state(), (1, 1));
        clock.advance_ms(200);
        restored
            .on_processing_time(clock.now_ms(), &mut out)
            .unwrap();
        assert_eq!(restored.rows_in_state(), (0, 0), "both idle past the TTL");
    }
}
