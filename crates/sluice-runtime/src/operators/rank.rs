//! Top-N and deduplication (Flink SQL "Top-N", "Deduplication"; Flink's
//! `AppendOnlyTopNFunction`, `RetractableTopNFunction`).
//!
//! Per partition (`KeyedValues<Ranked>`) the rows in sort order: a `BTreeMap` from (sort
//! key in Arrow's row format, arrival number) to the whole row in row format, so peers
//! (equal sort keys) rank in arrival order, the earlier first. Over an append-only input a
//! partition keeps only the rows ranked within the upper bound (a row pushed past it can
//! never come back); over an updating input every live row, and a retraction (`-U`, `-D`)
//! removes the row it names wherever it ranks, so the next one moves up and a deleted row
//! never returns (shared case 044).
//!
//! Output (mini-batch, like the updating aggregate): after each batch, for every partition
//! it touched, the ranked rows in `lower..=upper` before and after are compared. With the
//! rank column and `ROW_NUMBER`, each rank position whose row changed emits `-U old` /
//! `+U new` (or `+I` / `-D` when the position was or becomes empty), as Flink does; else
//! rows that left emit `-D` and rows that entered `+I`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion_common::arrow::array::{Int64Array, Int8Array, RecordBatch};
use datafusion_common::arrow::compute::SortOptions;
use datafusion_common::arrow::datatypes::{Int64Type, SchemaRef};
use datafusion_common::arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::RankFunction;
use sluice_common::Result;

use crate::expr::evaluate_all;
use crate::message::{RowKind, StreamBatch};
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::state::keyed::KeyedValues;
use crate::state::{key_converter, SnapshotReader, SnapshotWriter};

/// A partition's rows in rank order: (sort key, arrival number) → the row.
type Ranked = BTreeMap<(Box<[u8]>, u64), Box<[u8]>>;

/// A ranked row as output: the row and its rank.
type Entry = (Box<[u8]>, u64);

/// See the module docs. Output: the input's columns, then the rank (`BIGINT`) when asked.
pub struct RankOperator {
    function: RankFunction,
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    key_converter: Option<RowConverter>,
    order_by: Vec<Arc<dyn PhysicalExpr>>,
    sort_converter: RowConverter,
    row_converter: RowConverter,
    lower: u64,
    upper: u64,
    rank_column: bool,
    /// The input is append-only: rows past the upper bound can be dropped.
    append_only: bool,
    partitions: KeyedValues<Ranked>,
    /// The next arrival number.
    next_seq: u64,
    in_schema: SchemaRef,
    schema: SchemaRef,
}

impl RankOperator {
    /// A Top-N over input `in_schema`: partitioned by `partition_by`, ordered by
    /// `order_by` (expressions and their sort options), keeping ranks `lower..=upper` by
    /// `function`; `rank_column` appends the rank; `append_only` says the input never
    /// retracts; output `schema`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        function: RankFunction,
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        order_by: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
        lower: u64,
        upper: u64,
        rank_column: bool,
        append_only: bool,
        in_schema: SchemaRef,
        schema: SchemaRef,
    ) -> Result<Self> {
        let key_types = partition_by
            .iter()
            .map(|k| k.data_type(&in_schema))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let sort_fields = order_by
            .iter()
            .map(|(e, o)| Ok(SortField::new_with_options(e.data_type(&in_schema)?, *o)))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let row_converter = RowConverter::new(
            in_schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        Ok(RankOperator {
            function,
            key_converter: key_converter(&key_types)?,
            partition_by,
            order_by: order_by.into_iter().map(|(e, _)| e).collect(),
            sort_converter: RowConverter::new(sort_fields)?,
            row_converter,
            lower,
            upper,
            rank_column,
            append_only,
            partitions: KeyedValues::new(),
            next_seq: 0,
            in_schema,
            schema,
        })
    }

    /// The rows of a partition ranked `<= upper`, with their ranks, in order; and the
    /// first key past them (rows from it on rank beyond `upper`).
    fn ranked(&self, rows: &Ranked) -> (Vec<Entry>, Option<(Box<[u8]>, u64)>) {
        let mut out = Vec::new();
        let mut position = 0u64;
        let mut rank = 0u64;
        let mut previous: Option<&[u8]> = None;
        for ((sort, seq), row) in rows {
            position += 1;
            let peer = previous == Some(sort.as_ref());
            rank = match self.function {
                RankFunction::RowNumber => position,
                RankFunction::Rank if peer => rank,
                RankFunction::Rank => position,
                RankFunction::DenseRank if peer => rank,
                RankFunction::DenseRank => rank + 1,
            };
            if rank > self.upper {
                return (out, Some((sort.clone(), *seq)));
            }
            previous = Some(sort.as_ref());
            out.push((row.clone(), rank));
        }
        (out, None)
    }

    /// The rows in `lower..=upper`.
    fn shown(&self, rows: &Ranked) -> Vec<Entry> {
        let (mut list, _) = self.ranked(rows);
        list.retain(|(_, r)| *r >= self.lower);
        list
    }

    /// The changes from `before` to `after` (see the module docs) into `rows` / `kinds`.
    fn diff(&self, before: Vec<Entry>, after: Vec<Entry>, out: &mut Vec<(Entry, RowKind)>) {
        if self.rank_column && self.function == RankFunction::RowNumber {
            let old: HashMap<u64, Box<[u8]>> = before.into_iter().map(|(r, k)| (k, r)).collect();
            let mut new: HashMap<u64, Box<[u8]>> =
                after.into_iter().map(|(r, k)| (k, r)).collect();
            let mut ranks: Vec<u64> = old.keys().chain(new.keys()).copied().collect();
            ranks.sort_unstable();
            ranks.dedup();
            for k in ranks {
                match (old.get(&k), new.remove(&k)) {
                    (Some(a), Some(b)) if *a == b => {}
                    (Some(a), Some(b)) => {
                        out.push(((a.clone(), k), RowKind::UpdateBefore));
                        out.push(((b, k), RowKind::UpdateAfter));
                    }
                    (Some(a), None) => out.push(((a.clone(), k), RowKind::Delete)),
                    (None, Some(b)) => out.push(((b, k), RowKind::Insert)),
                    (None, None) => {}
                }
            }
            return;
        }
        let key = |(row, rank): &Entry| (row.clone(), if self.rank_column { *rank } else { 0 });
        let mut counts: HashMap<Entry, i64> = HashMap::new();
        for e in &before {
            *counts.entry(key(e)).or_default() -= 1;
        }
        for e in &after {
            *counts.entry(key(e)).or_default() += 1;
        }
        for e in before {
            let c = counts.get_mut(&key(&e)).expect("counted");
            if *c < 0 {
                *c += 1;
                out.push((e, RowKind::Delete));
            }
        }
        for e in after {
            let c = counts.get_mut(&key(&e)).expect("counted");
            if *c > 0 {
                *c -= 1;
                out.push((e, RowKind::Insert));
            }
        }
    }

    /// Drops the rows ranked past the upper bound (append-only input only).
    fn trim(&mut self, p: usize) {
        let (_, first_past) = self.ranked(&self.partitions[p]);
        if let Some(from) = first_past {
            let _ = self.partitions[p].split_off(&from);
        }
    }

    fn emit(&self, changes: Vec<(Entry, RowKind)>, out: &mut Collector) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let parser = self.row_converter.parser();
        let mut columns = self
            .row_converter
            .convert_rows(changes.iter().map(|((row, _), _)| parser.parse(row)))?;
        if self.rank_column {
            columns.push(Arc::new(Int64Array::from_iter_values(
                changes.iter().map(|((_, rank), _)| *rank as i64),
            )));
        }
        let n = changes.len();
        let data = batch_with_schema(&self.schema, columns, n)?;
        out.emit(StreamBatch {
            data,
            row_watermarks: None,
            ops: Some(Int8Array::from_iter_values(
                changes.iter().map(|(_, k)| *k as i8),
            )),
        });
        Ok(())
    }
}

impl Operator for RankOperator {
    fn name(&self) -> &'static str {
        if self.function == RankFunction::RowNumber && self.lower == 1 && self.upper == 1 {
            "Deduplicate"
        } else {
            "Rank"
        }
    }

    fn state_rows(&self) -> Option<u64> {
        Some(self.partitions.slots().iter().map(|p| p.len() as u64).sum())
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        let data = &batch.data;
        let n = data.num_rows();
        let keys = evaluate_all(&self.partition_by, data)?;
        let key_rows = match &self.key_converter {
            Some(c) => Some(c.convert_columns(&keys)?),
            None => None,
        };
        let all: Vec<u32> = (0..n as u32).collect();
        let mut ids = Vec::new();
        self.partitions
            .ids_or_insert_with(key_rows.as_ref(), &all, &mut ids, |_| Ok(Ranked::new()))?;
        let sort_keys = self
            .sort_converter
            .convert_columns(&evaluate_all(&self.order_by, data)?)?;
        let rows = self.row_converter.convert_columns(data.columns())?;
        // Each touched partition's shown rows before the batch, in first-touch order.
        let mut before: Vec<(usize, Vec<Entry>)> = Vec::new();
        let mut touched: HashMap<usize, ()> = HashMap::new();
        for (i, &p) in ids.iter().enumerate() {
            if touched.insert(p, ()).is_none() {
                before.push((p, self.shown(&self.partitions[p])));
            }
            let sort: Box<[u8]> = sort_keys.row(i).as_ref().into();
            let row: Box<[u8]> = rows.row(i).as_ref().into();
            if batch.row_kind(i).is_retraction() {
                // The latest arrival of this row (any copy of equal rows ranks alike).
                let part = &mut self.partitions[p];
                let found = part
                    .range((sort.clone(), 0)..=(sort, u64::MAX))
                    .rev()
                    .find(|(_, r)| **r == row)
                    .map(|(k, _)| k.clone());
                if let Some(k) = found {
                    part.remove(&k);
                }
            } else {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.partitions[p].insert((sort, seq), row);
            }
        }
        let mut changes = Vec::new();
        for (p, old) in before {
            let new = self.shown(&self.partitions[p]);
            self.diff(old, new, &mut changes);
            if self.append_only {
                self.trim(p);
            }
            if self.partitions[p].is_empty() {
                self.partitions.forget(p as u32, Ranked::new());
            }
        }
        self.emit(changes, out)
    }

    /// One row per held row, in the common layout: `key_group`, `key_<k>` (the
    /// partition), `seq` (Int64: its arrival number, which orders peers), `row_<i>` (the
    /// input columns).
    fn snapshot_state(&mut self, max_parallelism: u32) -> Result<Option<RecordBatch>> {
        let live = self.partitions.live_ids();
        let mut ids = Vec::new();
        let mut seqs = Vec::new();
        let mut held = Vec::new();
        for &id in &live {
            for ((_, seq), row) in &self.partitions[id as usize] {
                ids.push(id);
                seqs.push(*seq as i64);
                held.push(row);
            }
        }
        if ids.is_empty() {
            return Ok(None);
        }
        let key_columns = self
            .partitions
            .key_columns(self.key_converter.as_ref(), &ids)?;
        let mut w = SnapshotWriter::new(key_columns, ids.len(), max_parallelism)?;
        w.column("seq", Arc::new(Int64Array::from(seqs)));
        let parser = self.row_converter.parser();
        let columns = self
            .row_converter
            .convert_rows(held.iter().map(|r| parser.parse(r)))?;
        for (i, c) in columns.into_iter().enumerate() {
            w.column(format!("row_{i}"), c);
        }
        w.finish()
    }

    /// Adds the rows of snapshots (see [`Self::snapshot_state`]).
    fn restore_state(&mut self, snapshots: &[RecordBatch]) -> Result<()> {
        for snap in snapshots {
            let n = snap.num_rows();
            if n == 0 {
                continue;
            }
            let reader = SnapshotReader::new(snap, "Top-N");
            let seqs = reader.primitive::<Int64Type>("seq")?;
            let (_, key_rows) =
                reader.key_rows(self.key_converter.as_ref(), self.partition_by.len())?;
            let columns = (0..self.in_schema.fields().len())
                .map(|i| reader.column(&format!("row_{i}")))
                .collect::<Result<Vec<_>>>()?;
            let data = batch_with_schema(&self.in_schema, columns, n)?;
            let all: Vec<u32> = (0..n as u32).collect();
            let mut ids = Vec::new();
            self.partitions
                .ids_or_insert_with(key_rows.as_ref(), &all, &mut ids, |_| Ok(Ranked::new()))?;
            let sort_keys = self
                .sort_converter
                .convert_columns(&evaluate_all(&self.order_by, &data)?)?;
            let rows = self.row_converter.convert_columns(data.columns())?;
            for (i, &p) in ids.iter().enumerate() {
                let seq = seqs.value(i) as u64;
                self.next_seq = self.next_seq.max(seq + 1);
                self.partitions[p].insert(
                    (sort_keys.row(i).as_ref().into(), seq),
                    rows.row(i).as_ref().into(),
                );
            }
        }
        Ok(())
    }
}
