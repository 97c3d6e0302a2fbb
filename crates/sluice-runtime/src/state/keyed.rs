//! Keyed state: the registry of keys every stateful operator keeps its per-key state
//! by, and the two kinds of per-key state built on it.
//!
//! - [`KeyRegistry`]: keys (Arrow row format bytes of the key columns; empty for the one
//!   key of an operator without key columns) ↔ dense ids `0..capacity`. Keys live in one
//!   byte arena (no allocation per key). When a key has no state left, the operator
//!   forgets it and its id is reused by the next new key, so state stays bounded by the
//!   keys that still have state (Flink clears a key's state the same way when its last
//!   window or timer is gone, or when `table.exec.state.ttl` expires it).
//! - [`KeyedValues<V>`]: one value per key (a group's accumulators and last result, a
//!   key's open sessions, a `MATCH_RECOGNIZE` partition's rows and matcher). Values of
//!   forgotten keys are replaced by an empty value, so an id can be used as an index
//!   without a lookup.
//! - [`KeyedAccumulators`]: per key, one DataFusion `GroupsAccumulator` slot per
//!   aggregate, updated a batch at a time (vectorized). A window aggregate keeps one per
//!   window (the window is the state's namespace, as in Flink's `InternalAppendingState`).
//!
//! Every snapshot of this state goes through [`super::snapshot::SnapshotWriter`]: one row
//! per key (or per key and namespace, or per buffered row), with `key_group`, the key
//! columns (decoded from the registry with [`KeyRegistry::key_columns`]) and the state's
//! columns.

use std::hash::BuildHasher;

use datafusion_common::arrow::array::{ArrayRef, BooleanArray};
use datafusion_common::arrow::row::{RowConverter, Rows};
use datafusion_expr::{EmitTo, GroupsAccumulator};
use hashbrown::DefaultHashBuilder;
use sluice_common::{Result, SluiceError};

use super::probe_table::{ProbeSlot, ProbeTable};
use super::AccumulatorFactory;

/// How many keys ahead a batch lookup prefetches a key's table slot.
const PREFETCH_AHEAD: usize = 8;

/// The length recorded for a free id.
const FREE: u32 = u32::MAX;

/// Where an id's key lies in the arena: twelve bytes (a 64-bit start split in two so the
/// array stays 4-byte aligned: probes touch it at random, so its size is what stays in
/// cache), length [`FREE`] for a free id.
#[derive(Clone, Copy)]
struct Span {
    start_lo: u32,
    start_hi: u32,
    len: u32,
}

impl Span {
    /// The span of `len` bytes at `start`.
    ///
    /// # Panics
    /// For one key of 4 GiB or more (memory runs out long before).
    fn new(start: usize, len: usize) -> Self {
        Span {
            start_lo: start as u32,
            start_hi: (start >> 32) as u32,
            len: u32::try_from(len).expect("a key of 4 GiB or more"),
        }
    }

    fn start(&self) -> usize {
        ((self.start_hi as usize) << 32) | self.start_lo as usize
    }

    fn range(&self) -> std::ops::Range<usize> {
        self.start()..self.start() + self.len as usize
    }
}

/// Key bytes kept in a table slot: keys up to this long (an INT or BIGINT key, a pair of
/// INTs, a string of up to 8 bytes in Arrow's row format) are compared without touching
/// the arena, so a lookup costs one cache miss, not three (slot, span, arena).
const INLINE: usize = 11;

/// [`Slot::len`] of a key longer than [`INLINE`] (its first bytes inline, the whole key in
/// the arena).
const LONG: u8 = u8::MAX;

/// A hash table slot: the id ([`FREE`]: an empty slot), and the key's bytes when it is
/// short (else its prefix). Sixteen bytes: four to a cache line.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Slot {
    id: u32,
    len: u8,
    inline: [u8; INLINE],
}

impl ProbeSlot for Slot {
    const EMPTY: Self = Slot {
        id: FREE,
        len: 0,
        inline: [0; INLINE],
    };

    #[inline]
    fn is_empty(&self) -> bool {
        self.id == FREE
    }
}

impl Slot {
    fn new(id: u32, key: &[u8]) -> Self {
        let mut inline = [0u8; INLINE];
        let n = key.len().min(INLINE);
        inline[..n].copy_from_slice(&key[..n]);
        let len = if key.len() <= INLINE {
            key.len() as u8
        } else {
            LONG
        };
        Slot { id, len, inline }
    }

    /// Whether this slot holds `key`, whose probe slot is `probe`; only a long key's
    /// bytes are read from the arena (through `spans`).
    #[inline]
    fn holds(&self, probe: &Slot, key: &[u8], spans: &[Span], arena: &[u8]) -> bool {
        self.len == probe.len
            && self.inline == probe.inline
            && (self.len != LONG || { &arena[spans[self.id as usize].range()] == key })
    }

    /// The key's bytes (a long key's from the arena).
    fn key<'a>(&'a self, spans: &[Span], arena: &'a [u8]) -> &'a [u8] {
        if self.len == LONG {
            &arena[spans[self.id as usize].range()]
        } else {
            &self.inline[..self.len as usize]
        }
    }
}

/// Keys ↔ dense ids with reuse of forgotten ids (see the module docs).
#[derive(Default)]
pub struct KeyRegistry {
    /// Slots found by the key's hash and bytes; the hash is recomputed from the key when
    /// the table grows or a removal shifts a slot.
    table: ProbeTable<Slot>,
    /// Where each id's key lies in the arena (a HOP aggregate keeps one registry per open
    /// window, so this array's size matters).
    spans: Vec<Span>,
    /// The key bytes of every id, back to back.
    arena: Vec<u8>,
    /// Arena bytes of forgotten keys (reclaimed when they are half the arena).
    garbage: usize,
    free: Vec<u32>,
    hasher: DefaultHashBuilder,
}

impl std::fmt::Debug for KeyRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRegistry")
            .field("keys", &self.len())
            .field("capacity", &self.capacity())
            .field("arena_bytes", &self.arena.len())
            .finish()
    }
}

impl KeyRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `key` (its row-format bytes), registering it when new: a forgotten id is
    /// reused, else the next id (`capacity()` before the call). The flag says whether the
    /// key was new.
    pub fn id(&mut self, key: &[u8]) -> (u32, bool) {
        self.id_hashed(key, self.hash(key))
    }

    /// `key`'s hash, for [`Self::prefetch`] and the `_hashed` lookups.
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Starts loading the table slot where the lookup of the key of hash `hash` begins
    /// (a hint: no effect on the contents).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        self.table.prefetch(hash);
    }

    /// [`Self::id`] of `key` whose [`Self::hash`] is `hash`.
    pub fn id_hashed(&mut self, key: &[u8], hash: u64) -> (u32, bool) {
        let probe = Slot::new(0, key);
        let Self {
            table,
            spans,
            arena,
            free,
            hasher,
            ..
        } = self;
        if let Some(pos) = table.find(hash, |slot| slot.holds(&probe, key, spans, arena)) {
            return (table.get(pos).id, false);
        }
        let span = Span::new(arena.len(), key.len());
        arena.extend_from_slice(key);
        let id = match free.pop() {
            Some(id) => {
                spans[id as usize] = span;
                id
            }
            None => {
                spans.push(span);
                // FREE marks an empty table slot: it is never an id.
                u32::try_from(spans.len() - 1)
                    .ok()
                    .filter(|&id| id != FREE)
                    .expect("fewer than 2^32 - 1 keys")
            }
        };
        table.insert(hash, Slot { id, ..probe }, |slot| {
            hasher.hash_one(slot.key(spans, arena))
        });
        (id, true)
    }

    /// Registers `bytes` under a new id (a forgotten one reused) without indexing them:
    /// [`Self::find`] and [`Self::id`] never return it, and equal bytes pushed twice get
    /// two ids. For bytes never looked up by value (an append-only join input's rows,
    /// which are never retracted): they cost no hash-table slot.
    pub fn push_unindexed(&mut self, bytes: &[u8]) -> u32 {
        let span = Span::new(self.arena.len(), bytes.len());
        self.arena.extend_from_slice(bytes);
        match self.free.pop() {
            Some(id) => {
                self.spans[id as usize] = span;
                id
            }
            None => {
                self.spans.push(span);
                (self.spans.len() - 1) as u32
            }
        }
    }

    /// The id of `key` if it is registered (nothing is registered).
    pub fn find(&self, key: &[u8]) -> Option<u32> {
        self.find_hashed(key, self.hash(key))
    }

    /// [`Self::find`] of `key` whose [`Self::hash`] is `hash`.
    pub fn find_hashed(&self, key: &[u8], hash: u64) -> Option<u32> {
        let probe = Slot::new(0, key);
        self.table
            .find(hash, |slot| {
                slot.holds(&probe, key, &self.spans, &self.arena)
            })
            .map(|pos| self.table.get(pos).id)
    }

    /// The id of each of `keys` if it is registered, into `out` (cleared first); the
    /// lookups of later keys are prefetched while earlier ones are made.
    pub fn find_all<'a>(&self, keys: impl Iterator<Item = &'a [u8]>, out: &mut Vec<Option<u32>>) {
        out.clear();
        let keys: Vec<(&[u8], u64)> = keys.map(|k| (k, self.hash(k))).collect();
        for (i, &(key, hash)) in keys.iter().enumerate() {
            if let Some(&(_, ahead)) = keys.get(i + PREFETCH_AHEAD) {
                self.prefetch(ahead);
            }
            out.push(self.find_hashed(key, hash));
        }
    }

    /// The id of each selected row of `rows` (`None`: no key columns, every row has the
    /// one empty key), registering new keys; ids go to `out` (cleared first), as `usize`
    /// because DataFusion's `GroupsAccumulator` takes group indices so. Later rows'
    /// lookups are prefetched while earlier ones are made.
    pub fn ids_of(&mut self, rows: Option<&Rows>, selection: &[u32], out: &mut Vec<usize>) {
        out.clear();
        match rows {
            None => {
                let id = self.id(&[]).0 as usize;
                out.resize(selection.len(), id);
            }
            Some(rows) => {
                let hashes = self.hashes(rows, selection);
                for (i, &row) in selection.iter().enumerate() {
                    if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
                        self.prefetch(ahead);
                    }
                    let key = rows.row(row as usize);
                    out.push(self.id_hashed(key.as_ref(), hashes[i]).0 as usize);
                }
            }
        }
    }

    /// The hash of each selected row's key.
    fn hashes(&self, rows: &Rows, selection: &[u32]) -> Vec<u64> {
        selection
            .iter()
            .map(|&i| self.hash(rows.row(i as usize).as_ref()))
            .collect()
    }

    /// The key registered under `id`, if it is not free.
    pub fn key(&self, id: u32) -> Option<&[u8]> {
        let span = self.spans.get(id as usize)?;
        (span.len != FREE).then(|| &self.arena[span.range()])
    }

    /// Forgets the key of `id` (its state is gone); the id is reused. Returns `false`
    /// when the id was already free (a stale timer, say).
    pub fn forget(&mut self, id: u32) -> bool {
        let Some(&span) = self.spans.get(id as usize) else {
            return false;
        };
        if span.len == FREE {
            return false;
        }
        let len = span.len;
        let hash = self.hasher.hash_one(&self.arena[span.range()]);
        if let Some(pos) = self.table.find(hash, |slot| slot.id == id) {
            let Self {
                table,
                spans,
                arena,
                hasher,
                ..
            } = self;
            table.remove_at(pos, |slot| hasher.hash_one(slot.key(spans, arena)));
        }
        self.spans[id as usize].len = FREE;
        self.garbage += len as usize;
        self.free.push(id);
        if self.garbage > 4096 && self.garbage > self.arena.len() / 2 {
            self.compact_arena();
        }
        true
    }

    /// Copies the live keys into a new arena.
    fn compact_arena(&mut self) {
        let mut arena = Vec::with_capacity(self.arena.len() - self.garbage);
        for span in &mut self.spans {
            if span.len != FREE {
                let start = arena.len();
                arena.extend_from_slice(&self.arena[span.range()]);
                *span = Span::new(start, span.len as usize);
            }
        }
        self.arena = arena;
        self.garbage = 0;
    }

    /// Keys registered (not forgotten).
    pub fn len(&self) -> usize {
        self.spans.len() - self.free.len()
    }

    /// Whether no key is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One more than the largest id ever given (the length of per-id state vectors).
    pub fn capacity(&self) -> usize {
        self.spans.len()
    }

    /// The registered ids, ascending.
    pub fn live_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.len != FREE)
            .map(|(id, _)| id as u32)
    }

    /// Ids free for reuse (for tests).
    pub fn free_ids(&self) -> &[u32] {
        &self.free
    }

    /// Bytes held for keys (the arena, forgotten keys not yet reclaimed included).
    pub fn key_bytes(&self) -> usize {
        self.arena.len()
    }

    /// The key columns of every key in id order, consuming the registry; no id may have
    /// been forgotten (the keys then lie back to back in the arena, which becomes the row
    /// buffer without a copy). `None` without a converter.
    ///
    /// # Errors
    /// An id was forgotten, or bytes the converter cannot decode.
    pub fn into_key_columns(self, converter: Option<&RowConverter>) -> Result<Vec<ArrayRef>> {
        use datafusion_common::arrow::array::BinaryArray;
        use datafusion_common::arrow::buffer::{Buffer, OffsetBuffer};
        let Some(converter) = converter else {
            return Ok(Vec::new());
        };
        if !self.free.is_empty() || self.garbage > 0 {
            return Err(SluiceError::Internal(
                "key columns of a registry with forgotten keys".into(),
            ));
        }
        if self.arena.len() > i32::MAX as usize {
            return Err(SluiceError::Execution(format!(
                "{} bytes of keys: more than one Arrow binary column holds (2 GiB)",
                self.arena.len()
            )));
        }
        let offsets = OffsetBuffer::<i32>::from_lengths(self.spans.iter().map(|s| s.len as usize));
        let values = Buffer::from_vec(self.arena);
        let binary = BinaryArray::try_new(offsets, values, None)?;
        let rows = converter.from_binary(binary);
        Ok(converter.convert_rows(&rows)?)
    }

    /// The key columns of `ids` (which must be registered), decoded with `converter`
    /// (the one the keys were encoded with; `None` for an operator without key columns:
    /// no columns), for snapshots and output.
    ///
    /// # Errors
    /// An id that is free, or bytes the converter cannot decode.
    pub fn key_columns(
        &self,
        converter: Option<&RowConverter>,
        ids: &[u32],
    ) -> Result<Vec<ArrayRef>> {
        let Some(converter) = converter else {
            return Ok(Vec::new());
        };
        let parser = converter.parser();
        let rows = ids
            .iter()
            .map(|&id| {
                self.key(id)
                    .map(|k| parser.parse(k))
                    .ok_or_else(|| SluiceError::Internal(format!("key id {id} is free")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(converter.convert_rows(rows)?)
    }
}

/// One value per key, indexed by key id (see the module docs). `V` is whatever the
/// operator keeps per key; a forgotten key's slot holds the empty value given to
/// [`Self::forget`].
pub struct KeyedValues<V> {
    keys: KeyRegistry,
    values: Vec<V>,
}

impl<V> Default for KeyedValues<V> {
    fn default() -> Self {
        KeyedValues {
            keys: KeyRegistry::new(),
            values: Vec::new(),
        }
    }
}

impl<V> KeyedValues<V> {
    /// No keys.
    pub fn new() -> Self {
        Self::default()
    }

    fn set(&mut self, id: u32, value: V) {
        match self.values.get_mut(id as usize) {
            Some(slot) => *slot = value,
            None => {
                // A new id is the next slot (ids and slots never drift apart).
                assert_eq!(
                    id as usize,
                    self.values.len(),
                    "keyed value slots out of step"
                );
                self.values.push(value)
            }
        }
    }

    /// The id of `key`; a new key's value is `init()`. The flag says whether it was new.
    pub fn id_or_insert_with(&mut self, key: &[u8], init: impl FnOnce() -> V) -> (u32, bool) {
        let (id, new) = self.keys.id(key);
        if new {
            self.set(id, init());
        }
        (id, new)
    }

    /// The id of each selected row's key (`rows`: `None` without key columns), into `out`;
    /// a new key's value is `init(row)`, `row` being the first selected row with it.
    ///
    /// # Errors
    /// What `init` fails with; the key is forgotten again, so ids and slots stay in step.
    pub fn ids_or_insert_with(
        &mut self,
        rows: Option<&Rows>,
        selection: &[u32],
        out: &mut Vec<usize>,
        mut init: impl FnMut(usize) -> Result<V>,
    ) -> Result<()> {
        out.clear();
        let Some(rows) = rows else {
            for &row in selection {
                let (id, new) = self.keys.id(&[]);
                if new {
                    self.init_slot(id, init(row as usize))?;
                }
                out.push(id as usize);
            }
            return Ok(());
        };
        let hashes = self.keys.hashes(rows, selection);
        for (i, &row) in selection.iter().enumerate() {
            if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
                self.keys.prefetch(ahead);
            }
            let key = rows.row(row as usize);
            let (id, new) = self.keys.id_hashed(key.as_ref(), hashes[i]);
            if new {
                self.init_slot(id, init(row as usize))?;
            }
            out.push(id as usize);
        }
        Ok(())
    }

    /// Sets new key `id`'s value, or forgets the key when `init` failed.
    fn init_slot(&mut self, id: u32, value: Result<V>) -> Result<()> {
        match value {
            Ok(v) => {
                self.set(id, v);
                Ok(())
            }
            Err(e) => {
                // Never given a slot if it was a new id past the end: free it again.
                self.keys.forget(id);
                Err(e)
            }
        }
    }

    /// Forgets `id`'s key; its slot takes `empty`. Returns the value it had (`None` when
    /// it was already free).
    pub fn forget(&mut self, id: u32, empty: V) -> Option<V> {
        if !self.keys.forget(id) {
            return None;
        }
        Some(std::mem::replace(&mut self.values[id as usize], empty))
    }

    /// Registered ids, ascending.
    pub fn live_ids(&self) -> Vec<u32> {
        self.keys.live_ids().collect()
    }

    /// Keys with a value.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Slots (live and free): the length of per-id vectors.
    pub fn capacity(&self) -> usize {
        self.values.len()
    }

    /// Every slot, free ones holding their empty value.
    pub fn slots(&self) -> &[V] {
        &self.values
    }

    /// Every slot, mutable.
    pub fn slots_mut(&mut self) -> &mut [V] {
        &mut self.values
    }

    /// The registry (keys of ids, free ids).
    pub fn registry(&self) -> &KeyRegistry {
        &self.keys
    }

    /// The key columns of `ids`: see [`KeyRegistry::key_columns`].
    ///
    /// # Errors
    /// As there.
    pub fn key_columns(
        &self,
        converter: Option<&RowConverter>,
        ids: &[u32],
    ) -> Result<Vec<ArrayRef>> {
        self.keys.key_columns(converter, ids)
    }
}

impl<V> std::ops::Index<usize> for KeyedValues<V> {
    type Output = V;
    fn index(&self, id: usize) -> &V {
        &self.values[id]
    }
}

impl<V> std::ops::IndexMut<usize> for KeyedValues<V> {
    fn index_mut(&mut self, id: usize) -> &mut V {
        &mut self.values[id]
    }
}

/// Per key, one `GroupsAccumulator` slot per aggregate (see the module docs): DataFusion's
/// vectorized accumulators index their state by our dense key ids.
pub struct KeyedAccumulators {
    keys: KeyRegistry,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
}

impl KeyedAccumulators {
    /// No keys, fresh accumulators from `factory`.
    ///
    /// # Errors
    /// An aggregate whose accumulator cannot be created.
    pub fn new(factory: &AccumulatorFactory) -> Result<Self> {
        Ok(KeyedAccumulators {
            keys: KeyRegistry::new(),
            accumulators: factory.create()?,
        })
    }

    /// Keys with state.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Adds the selected rows: `key_rows` are the batch's key rows (`None` without key
    /// columns), `args[a]` the argument arrays of aggregate `a` and `filters[a]` its
    /// `FILTER` mask, both already restricted to `selection`. `scratch` holds the ids.
    ///
    /// # Errors
    /// What an accumulator fails with (e.g. an overflow).
    pub fn update(
        &mut self,
        key_rows: Option<&Rows>,
        selection: &[u32],
        args: &[Vec<ArrayRef>],
        filters: &[Option<BooleanArray>],
        scratch: &mut Vec<usize>,
    ) -> Result<()> {
        self.keys.ids_of(key_rows, selection, scratch);
        let total = self.keys.capacity();
        for ((acc, values), filter) in self.accumulators.iter_mut().zip(args).zip(filters) {
            acc.update_batch(values, scratch, filter.as_ref(), total)?;
        }
        Ok(())
    }

    /// Merges accumulator states (`states[a]`: aggregate `a`'s state columns, one row
    /// per key of `key_rows`) into the keys' state: how a snapshot is restored.
    ///
    /// # Errors
    /// States that do not fit the accumulators.
    pub fn merge(
        &mut self,
        key_rows: Option<&Rows>,
        rows: usize,
        states: &[Vec<ArrayRef>],
        scratch: &mut Vec<usize>,
    ) -> Result<()> {
        let selection: Vec<u32> = (0..rows as u32).collect();
        self.keys.ids_of(key_rows, &selection, scratch);
        let total = self.keys.capacity();
        for (acc, state) in self.accumulators.iter_mut().zip(states) {
            acc.merge_batch(state, scratch, total)?;
        }
        Ok(())
    }

    /// The final values (one array per aggregate) and key columns of every key, in id
    /// order, consuming the state.
    ///
    /// # Errors
    /// An accumulator that fails to evaluate, keys the converter cannot decode.
    pub fn evaluate(
        mut self,
        converter: Option<&RowConverter>,
    ) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
        let values = self
            .accumulators
            .iter_mut()
            .map(|a| a.evaluate(EmitTo::All))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        Ok((self.keys.into_key_columns(converter)?, values))
    }

    /// The key columns and accumulator states (per aggregate, its state columns) of
    /// every key, in id order, for a snapshot. The state stays as it was: DataFusion's
    /// `state()` consumes an accumulator, so each is rebuilt from the state it gave.
    ///
    /// # Errors
    /// As [`Self::evaluate`].
    pub fn snapshot(
        &mut self,
        converter: Option<&RowConverter>,
        factory: &AccumulatorFactory,
    ) -> Result<(Vec<ArrayRef>, Vec<Vec<ArrayRef>>)> {
        let ids: Vec<u32> = self.keys.live_ids().collect();
        let keys = self.keys.key_columns(converter, &ids)?;
        let n = self.keys.capacity();
        let all: Vec<usize> = (0..n).collect();
        let mut rebuilt = factory.create()?;
        let mut states = Vec::with_capacity(self.accumulators.len());
        for (acc, fresh) in self.accumulators.iter_mut().zip(rebuilt.iter_mut()) {
            let state = acc.state(EmitTo::All)?;
            fresh.merge_batch(&state, &all, n)?;
            states.push(state);
        }
        self.accumulators = rebuilt;
        Ok((keys, states))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_reuses_forgotten_ids() {
        let mut r = KeyRegistry::new();
        assert_eq!(r.id(b"a"), (0, true));
        assert_eq!(r.id(b"b"), (1, true));
        assert_eq!(r.id(b"a"), (0, false));
        assert!(r.forget(0));
        assert!(!r.forget(0), "forgetting twice is a no-op");
        assert_eq!(r.len(), 1);
        assert_eq!(r.key(0), None);
        // The next new key takes the freed id; capacity does not grow.
        assert_eq!(r.id(b"c"), (0, true));
        assert_eq!(r.capacity(), 2);
        assert_eq!(r.key(0), Some(&b"c"[..]));
        assert_eq!(r.id(b"a"), (2, true));
        assert_eq!(r.live_ids().collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    /// Many keys come and go: the arena is reclaimed (memory stays bounded by the live
    /// keys) and every live key keeps its id and bytes through the compactions.
    #[test]
    fn registry_arena_stays_bounded_under_churn() {
        let mut r = KeyRegistry::new();
        let mut live: std::collections::HashMap<Vec<u8>, u32> = Default::default();
        for round in 0..50u32 {
            for k in 0..1000u32 {
                let key = format!("key-{round}-{k}-padding-padding").into_bytes();
                let (id, new) = r.id(&key);
                assert!(new);
                live.insert(key, id);
            }
            // Forget all but every tenth key of this round.
            let gone: Vec<Vec<u8>> = live
                .keys()
                .filter(|k| !k.ends_with(b"0-padding-padding"))
                .cloned()
                .collect();
            for k in gone {
                let id = live.remove(&k).unwrap();
                assert!(r.forget(id));
            }
        }
        assert_eq!(r.len(), live.len());
        for (k, id) in &live {
            assert_eq!(r.key(*id), Some(k.as_slice()));
            assert_eq!(r.id(k), (*id, false));
        }
        let live_bytes: usize = live.keys().map(|k| k.len()).sum();
        assert!(
            r.key_bytes() <= 2 * live_bytes + 4096 + 40_000,
            "arena {} bytes for {} live bytes",
            r.key_bytes(),
            live_bytes
        );
        // 50,000 keys registered in all; at most one round's forgotten ids are free.
        assert_eq!(live.len(), 5000);
        assert!(r.capacity() <= 6000, "ids are reused: {}", r.capacity());
    }

    /// Random registrations and forgets of short (inline) and long (arena) keys agree
    /// with a map model at every step, through `id`, `find`, `find_all` and forgets
    /// that shift runs of the table back.
    #[test]
    fn registry_agrees_with_a_map_under_random_churn() {
        let mut next = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut r = KeyRegistry::new();
        let mut model: std::collections::HashMap<Vec<u8>, u32> = Default::default();
        let key = |n: u64| {
            if n % 2 == 0 {
                n.to_le_bytes()[..3].to_vec()
            } else {
                format!("a-long-key-{n}").into_bytes()
            }
        };
        for step in 0..20_000 {
            let k = key(next() % 600);
            if next() % 3 == 0 {
                if let Some(id) = model.remove(&k) {
                    assert!(r.forget(id));
                }
            } else {
                let (id, new) = r.id(&k);
                match model.get(&k) {
                    Some(&held) => assert_eq!((id, new), (held, false), "step {step}"),
                    None => {
                        assert!(new, "step {step}");
                        model.insert(k.clone(), id);
                    }
                }
            }
            assert_eq!(r.len(), model.len());
        }
        let keys: Vec<Vec<u8>> = (0..600).map(key).collect();
        let mut found = Vec::new();
        r.find_all(keys.iter().map(Vec::as_slice), &mut found);
        for (k, id) in keys.iter().zip(found) {
            assert_eq!(id, model.get(k).copied());
            assert_eq!(r.find(k), model.get(k).copied());
        }
    }

    #[test]
    fn registry_decodes_key_columns() {
        use datafusion_common::arrow::array::{Array, Int32Array, StringArray};
        use datafusion_common::arrow::datatypes::DataType;
        use datafusion_common::arrow::row::SortField;
        use std::sync::Arc;
        let converter = RowConverter::new(vec![
            SortField::new(DataType::Utf8),
            SortField::new(DataType::Int32),
        ])
        .unwrap();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![Some("x"), None])),
            Arc::new(Int32Array::from(vec![1, 2])),
        ];
        let rows = converter.convert_columns(&cols).unwrap();
        let mut r = KeyRegistry::new();
        let mut ids = Vec::new();
        r.ids_of(Some(&rows), &[0, 1, 0], &mut ids);
        assert_eq!(ids, vec![0, 1, 0]);
        let back = r.key_columns(Some(&converter), &[1, 0]).unwrap();
        let names = back[0].as_any().downcast_ref::<StringArray>().unwrap();
        assert!(names.is_null(0));
        assert_eq!(names.value(1), "x");
        let n = back[1].as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(n.values(), &[2, 1]);
        assert!(r.key_columns(Some(&converter), &[7]).is_err());
        assert!(r.key_columns(None, &[0]).unwrap().is_empty());
    }

    /// The arena becomes the row buffer: the same columns as decoding id by id.
    #[test]
    fn spans_address_arenas_past_4_gib() {
        // q23 at 10 M events keeps more than 4 GiB of joined rows in one registry.
        for start in [
            0usize,
            7,
            u32::MAX as usize,
            (1usize << 32) + 5,
            (3usize << 40) + 1,
        ] {
            let span = Span::new(start, 12);
            assert_eq!(span.start(), start);
            assert_eq!(span.range(), start..start + 12);
        }
        assert_eq!(std::mem::size_of::<Span>(), 12);
    }

    #[test]
    fn registry_into_key_columns_matches_key_columns() {
        use datafusion_common::arrow::array::{Int64Array, StringArray};
        use datafusion_common::arrow::datatypes::DataType;
        use datafusion_common::arrow::row::SortField;
        use std::sync::Arc;
        let converter = RowConverter::new(vec![
            SortField::new(DataType::Utf8),
            SortField::new(DataType::Int64),
        ])
        .unwrap();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![
                Some("b"),
                None,
                Some("a"),
                Some("b"),
            ])),
            Arc::new(Int64Array::from(vec![Some(1), Some(2), None, Some(1)])),
        ];
        let rows = converter.convert_columns(&cols).unwrap();
        let mut r = KeyRegistry::new();
        let mut ids = Vec::new();
        r.ids_of(Some(&rows), &[0, 1, 2, 3], &mut ids);
        assert_eq!(ids, vec![0, 1, 2, 0]);
        let by_id = r.key_columns(Some(&converter), &[0, 1, 2]).unwrap();
        let whole = r.into_key_columns(Some(&converter)).unwrap();
        assert_eq!(by_id.len(), 2);
        for (a, b) in by_id.iter().zip(&whole) {
            assert_eq!(a.to_data(), b.to_data());
        }
        let mut churned = KeyRegistry::new();
        churned.id(b"x");
        churned.forget(0);
        assert!(churned.into_key_columns(Some(&converter)).is_err());
    }

    #[test]
    fn keyed_values_initialize_new_keys_once_and_reset_forgotten_slots() {
        let mut v: KeyedValues<Vec<u32>> = KeyedValues::new();
        let keys: Vec<&[u8]> = vec![b"a", b"b", b"a", b"c"];
        for (row, k) in keys.iter().enumerate() {
            let (id, _) = v.id_or_insert_with(k, Vec::new);
            v[id as usize].push(row as u32);
        }
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], vec![0, 2]);
        assert_eq!(v.forget(0, Vec::new()), Some(vec![0, 2]));
        assert_eq!(v.forget(0, Vec::new()), None);
        assert!(v[0].is_empty(), "a forgotten slot holds the empty value");
        // A new key takes slot 0 with a fresh value.
        let (id, new) = v.id_or_insert_with(b"d", || vec![99]);
        assert_eq!((id, new), (0, true));
        assert_eq!(v[0], vec![99]);
        assert_eq!(v.live_ids(), vec![0, 1, 2]);
        assert_eq!(v.capacity(), 3);
    }
}
