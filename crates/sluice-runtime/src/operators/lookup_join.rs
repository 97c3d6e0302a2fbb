//! Lookup joins (Flink SQL "Joins > Lookup Join"): `probe JOIN dim FOR SYSTEM_TIME AS OF
//! probe.proc_time ON probe.k = dim.k`, `INNER` or `LEFT`, where `proc_time` is a
//! processing-time attribute and `dim` a `filesystem` table. Each probe row is joined,
//! when it arrives, with the rows of `dim` that match it at that processing time; the
//! output is append-only and keeps the probe's columns (and time attributes) first.
//!
//! What "at that time" means is Flink's cache options (`'lookup.cache'`):
//! - `'NONE'` (the default): the table as it is now: the files are read again whenever one
//!   changed (checked once per input batch: the file list, lengths, modification times).
//! - `'PARTIAL'`: a key looked up is remembered with its rows until
//!   `'lookup.partial-cache.expire-after-write'` (since it was read) or
//!   `'...expire-after-access'` (since it was last used) passes; at most
//!   `'lookup.partial-cache.max-rows'` keys (the least recently used go first; expired
//!   keys are forgotten within half an expiry time, so the cache stays bounded); a key
//!   without rows is remembered too unless `'lookup.partial-cache.cache-missing-key'` is
//!   `false`. A key not remembered is read from the table as it is now.
//! - `'FULL'`: the whole table is read when the first row comes and again every
//!   `'lookup.full-cache.periodic-reload.interval'` (`'PERIODIC'`, the default strategy;
//!   without an interval never again; `'TIMED'` is not supported).
//!
//! A result depends on processing time: a replay after a failure looks the rows up again
//! and may see other rows. The cache is not state (as in Flink, it is not in checkpoints).
//! Rows whose key has a NULL part match nothing.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, Int64Array, UInt32Array,
};
use datafusion_common::arrow::compute::take;
use datafusion_common::arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion_common::arrow::record_batch::RecordBatch;
use datafusion_common::arrow::row::RowConverter;
use datafusion_physical_expr::PhysicalExpr;
use sluice_common::plan::{ConnectorOptions, JoinKind};
use sluice_common::{Result, SluiceError};

use crate::clock::ProcessingClock;
use crate::connectors::datagen::parse_duration_ms;
use crate::connectors::lookup::LookupFiles;
use crate::expr::{evaluate_all, evaluate_predicate};
use crate::message::StreamBatch;
use crate::operator::{Collector, Operator};
use crate::operators::stateless::batch_with_schema;
use crate::state::key_converter;
use crate::state::row_codec::RowCodec;

/// How lookups see the table (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LookupCache {
    /// The table as it is at each lookup.
    None,
    /// Keys remembered with their rows for a while.
    Partial {
        /// Forget a key this long (ms) after it was read.
        expire_after_write_ms: Option<i64>,
        /// Forget a key this long (ms) after it was last used.
        expire_after_access_ms: Option<i64>,
        /// Keys remembered at most.
        max_rows: Option<usize>,
        /// Remember keys without rows.
        cache_missing_key: bool,
    },
    /// The whole table, read again every `reload_ms`.
    Full {
        /// The reload interval (ms); `None`: never again.
        reload_ms: Option<i64>,
    },
}

impl LookupCache {
    /// The cache a table's `WITH` options ask for.
    ///
    /// # Errors
    /// An unknown `'lookup.cache'` or reload strategy, a malformed duration or count.
    pub fn from_options(table: &str, options: &ConnectorOptions) -> Result<Self> {
        let mode = options
            .get("lookup.cache")
            .map(|s| s.to_ascii_uppercase())
            .unwrap_or_else(|| "NONE".into());
        Ok(match mode.as_str() {
            "NONE" => LookupCache::None,
            "PARTIAL" => LookupCache::Partial {
                expire_after_write_ms: parse_duration_ms(
                    options,
                    "lookup.partial-cache.expire-after-write",
                )?,
                expire_after_access_ms: parse_duration_ms(
                    options,
                    "lookup.partial-cache.expire-after-access",
                )?,
                max_rows: match options.get("lookup.partial-cache.max-rows") {
                    Some(v) => Some(v.trim().parse().map_err(|_| {
                        SluiceError::Config(format!(
                            "'lookup.partial-cache.max-rows' of '{table}' must be a count, \
                             found '{v}'"
                        ))
                    })?),
                    None => None,
                },
                cache_missing_key: crate::connectors::filesystem::bool_option(
                    options,
                    "lookup.partial-cache.cache-missing-key",
                    true,
                )?,
            },
            "FULL" => {
                let strategy = options
                    .get("lookup.full-cache.reload-strategy")
                    .map(|s| s.to_ascii_uppercase())
                    .unwrap_or_else(|| "PERIODIC".into());
                if strategy != "PERIODIC" {
                    return Err(SluiceError::NotSupported(format!(
                        "'lookup.full-cache.reload-strategy' = '{strategy}' of '{table}' \
                         (supported: 'PERIODIC')"
                    )));
                }
                LookupCache::Full {
                    reload_ms: parse_duration_ms(
                        options,
                        "lookup.full-cache.periodic-reload.interval",
                    )?,
                }
            }
            other => {
                return Err(SluiceError::Config(format!(
                    "'lookup.cache' of '{table}' must be 'NONE', 'PARTIAL' or 'FULL', found \
                     '{other}'"
                )))
            }
        })
    }
}

/// The table looked up: how it is read and matched.
pub struct LookupTable {
    /// The files.
    pub files: LookupFiles,
    /// One expression per column of the table (physical and computed), over its physical
    /// columns.
    pub columns: Vec<Arc<dyn PhysicalExpr>>,
    /// The table's columns as the join sees them.
    pub schema: SchemaRef,
    /// Key expressions over `schema`, of the probe keys' types pairwise.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// How lookups see the table.
    pub cache: LookupCache,
}

/// The table as read: rows (row format) by key.
#[derive(Default)]
struct Loaded {
    by_key: HashMap<Box<[u8]>, Vec<Arc<[u8]>>>,
    at_ms: i64,
}

/// A remembered key (`'PARTIAL'`).
struct Entry {
    rows: Vec<Arc<[u8]>>,
    written_ms: i64,
    accessed_ms: i64,
}

/// The lookup join operator (see the module docs).
pub struct LookupJoinOperator {
    left_outer: bool,
    probe_keys: Vec<Arc<dyn PhysicalExpr>>,
    table: LookupTable,
    keys: RowConverter,
    rows: RowCodec,
    /// Over the probe's columns then the table's.
    residual: Option<Arc<dyn PhysicalExpr>>,
    out_schema: SchemaRef,
    clock: ProcessingClock,
    loaded: Option<Loaded>,
    remembered: HashMap<Box<[u8]>, Entry>,
    /// When expired keys were last forgotten (ms).
    swept_ms: i64,
}

impl LookupJoinOperator {
    /// A lookup join of the probe input (keys `probe_keys`) with `table`; `kind` inner or
    /// left; `residual` over the probe's columns then the table's, which the output has too.
    ///
    /// # Errors
    /// Another kind, no keys, key types that differ, types the row format cannot hold.
    pub fn new(
        kind: JoinKind,
        probe_keys: Vec<Arc<dyn PhysicalExpr>>,
        probe_schema: &SchemaRef,
        table: LookupTable,
        residual: Option<Arc<dyn PhysicalExpr>>,
        out_schema: SchemaRef,
        clock: ProcessingClock,
    ) -> Result<Self> {
        let left_outer = match kind {
            JoinKind::Inner => false,
            JoinKind::Left => true,
            other => {
                return Err(SluiceError::Internal(format!(
                    "a lookup join is INNER or LEFT, not {}",
                    other.sql()
                )))
            }
        };
        let types = |keys: &[Arc<dyn PhysicalExpr>], schema: &SchemaRef| {
            keys.iter()
                .map(|k| k.data_type(schema))
                .collect::<datafusion_common::Result<Vec<DataType>>>()
        };
        let key_types = types(&probe_keys, probe_schema)?;
        if key_types != types(&table.keys, &table.schema)? {
            return Err(SluiceError::Internal(
                "lookup join keys of different types".into(),
            ));
        }
        let keys = key_converter(&key_types)?.ok_or_else(|| {
            SluiceError::Internal("a lookup join needs an equality on the table".into())
        })?;
        Ok(LookupJoinOperator {
            left_outer,
            probe_keys,
            rows: RowCodec::new(&table.schema)?,
            table,
            keys,
            residual,
            out_schema,
            clock,
            loaded: None,
            remembered: HashMap::new(),
            swept_ms: i64::MIN,
        })
    }

    /// Reads the whole table.
    fn load(&mut self, now: i64) -> Result<()> {
        let batches = self.table.files.read()?;
        let mut loaded = Loaded {
            by_key: HashMap::new(),
            at_ms: now,
        };
        for raw in batches {
            let columns = evaluate_all(&self.table.columns, &raw)?;
            let data = batch_with_schema(&self.table.schema, columns, raw.num_rows())?;
            let key_columns = evaluate_all(&self.table.keys, &data)?;
            let keys = self.keys.convert_columns(&key_columns)?;
            let rows = self.rows.encode(data.columns())?;
            for i in 0..data.num_rows() {
                if key_columns.iter().any(|k| k.is_null(i)) {
                    continue;
                }
                loaded
                    .by_key
                    .entry(keys.row(i).data().into())
                    .or_default()
                    .push(rows.row(i).into());
            }
        }
        self.loaded = Some(loaded);
        Ok(())
    }

    /// Brings the loaded table up to date for a batch at `now`, as the cache says.
    fn refresh(&mut self, now: i64) -> Result<()> {
        let stale = match (&self.loaded, self.table.cache) {
            (None, _) => true,
            (Some(_), LookupCache::Full { reload_ms }) => {
                let at = self.loaded.as_ref().map(|l| l.at_ms).unwrap_or(now);
                reload_ms.is_some_and(|r| now - at >= r)
            }
            (Some(_), _) => self.table.files.changed()?,
        };
        if stale {
            self.load(now)?;
        }
        Ok(())
    }

    /// The table's rows of `key` at `now`.
    fn lookup(&mut self, key: &[u8], now: i64) -> Vec<Arc<[u8]>> {
        let of_table = |loaded: &Option<Loaded>| {
            loaded
                .as_ref()
                .and_then(|l| l.by_key.get(key).cloned())
                .unwrap_or_default()
        };
        let LookupCache::Partial {
            expire_after_write_ms,
            expire_after_access_ms,
            max_rows,
            cache_missing_key,
        } = self.table.cache
        else {
            return of_table(&self.loaded);
        };
        self.sweep(now, expire_after_write_ms, expire_after_access_ms);
        if let Some(e) = self.remembered.get_mut(key) {
            let fresh = expire_after_write_ms.is_none_or(|w| now - e.written_ms < w)
                && expire_after_access_ms.is_none_or(|a| now - e.accessed_ms < a);
            if fresh {
                e.accessed_ms = now;
                return e.rows.clone();
            }
            self.remembered.remove(key);
        }
        let rows = of_table(&self.loaded);
        if !rows.is_empty() || cache_missing_key {
            if let Some(m) = max_rows.filter(|m| self.remembered.len() >= *m && *m > 0) {
                // The least recently used keys go, a quarter of them at a time (one sort
                // for many misses).
                let mut by_use: Vec<(i64, Box<[u8]>)> = self
                    .remembered
                    .iter()
                    .map(|(k, e)| (e.accessed_ms, k.clone()))
                    .collect();
                by_use.sort_unstable();
                for (_, k) in by_use.into_iter().take((m / 4).max(1)) {
                    self.remembered.remove(&k);
                }
            }
            if max_rows != Some(0) {
                self.remembered.insert(
                    key.into(),
                    Entry {
                        rows: rows.clone(),
                        written_ms: now,
                        accessed_ms: now,
                    },
                );
            }
        }
        rows
    }

    /// Forgets the remembered keys that expired, at most twice per expiry time (so the
    /// cache holds only keys used within it, whatever keys come).
    fn sweep(&mut self, now: i64, write_ms: Option<i64>, access_ms: Option<i64>) {
        let Some(every) = write_ms.into_iter().chain(access_ms).min() else {
            return;
        };
        if now.saturating_sub(self.swept_ms) < every / 2 {
            return;
        }
        self.swept_ms = now;
        self.remembered.retain(|_, e| {
            write_ms.is_none_or(|w| now - e.written_ms < w)
                && access_ms.is_none_or(|a| now - e.accessed_ms < a)
        });
    }

    fn join(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        // Operators over append-only input may still label their rows (+I).
        if (0..batch.num_rows()).any(|i| batch.row_kind(i).is_retraction()) {
            return Err(SluiceError::Execution(
                "a lookup join's input must be append-only".into(),
            ));
        }
        let now = self.clock.now_ms();
        self.refresh(now)?;
        let data = &batch.data;
        let n = data.num_rows();
        let key_columns = evaluate_all(&self.probe_keys, data)?;
        let keys = self.keys.convert_columns(&key_columns)?;
        // Candidate pairs: probe row, table row (index into `found`).
        let mut pair_left: Vec<u32> = Vec::new();
        let mut found: Vec<Arc<[u8]>> = Vec::new();
        for i in 0..n {
            if key_columns.iter().any(|k| k.is_null(i)) {
                continue;
            }
            for row in self.lookup(keys.row(i).data(), now) {
                pair_left.push(i as u32);
                found.push(row);
            }
        }
        let decoded: Vec<ArrayRef> = if found.is_empty() {
            self.table
                .schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), 0))
                .collect()
        } else {
            self.rows.decode(found.iter().map(|r| &r[..]))?
        };
        let take_all = |columns: &[ArrayRef], idx: &UInt32Array| -> Result<Vec<ArrayRef>> {
            Ok(columns
                .iter()
                .map(|c| take(c.as_ref(), idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?)
        };
        let keep: Vec<bool> = match &self.residual {
            Some(residual) if !found.is_empty() => {
                let left = take_all(data.columns(), &UInt32Array::from(pair_left.clone()))?;
                let pairs = RecordBatch::try_new(
                    Arc::clone(&self.out_schema),
                    [left, decoded.clone()].concat(),
                )?;
                let mask = evaluate_predicate(residual, &pairs, "lookup join condition")?;
                mask.values().iter().collect()
            }
            _ => vec![true; found.len()],
        };
        // The output in input order: each probe row's matches, or the row padded.
        let mut out_left = Vec::new();
        let mut out_right: Vec<Option<u32>> = Vec::new();
        let mut p = 0;
        for i in 0..n as u32 {
            let mut matched = false;
            while p < pair_left.len() && pair_left[p] == i {
                if keep[p] {
                    out_left.push(i);
                    out_right.push(Some(p as u32));
                    matched = true;
                }
                p += 1;
            }
            if !matched && self.left_outer {
                out_left.push(i);
                out_right.push(None);
            }
        }
        if out_left.is_empty() {
            return Ok(());
        }
        let idx = UInt32Array::from(out_left);
        let mut columns = take_all(data.columns(), &idx)?;
        columns.extend(take_all(&decoded, &UInt32Array::from(out_right))?);
        let rows = idx.len();
        let row_watermarks = match &batch.row_watermarks {
            Some(w) => Some(take(w, &idx, None)?.as_primitive::<Int64Type>().clone()),
            None => None::<Int64Array>,
        };
        out.emit(StreamBatch {
            data: batch_with_schema(&self.out_schema, columns, rows)?,
            row_watermarks,
            ops: None,
        });
        Ok(())
    }
}

impl Operator for LookupJoinOperator {
    fn name(&self) -> &'static str {
        "LookupJoin"
    }

    fn process_batch(&mut self, batch: StreamBatch, out: &mut Collector) -> Result<()> {
        self.join(batch, out)
    }
}
