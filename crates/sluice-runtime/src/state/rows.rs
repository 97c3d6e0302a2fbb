//! The rows of a two-input operator, per key: what a regular join keeps of its inputs
//! (Flink's `JoinRecordStateView` without a unique key: a map from row to its count, per
//! key and input).
//!
//! Each distinct row of an input ([`super::row_codec`] bytes of all its columns) is held once,
//! with how many copies are in (`count`) and, for joins that need it, how many partners it
//! has on the other input (`partners`: an outer row is padded with NULLs while it has none;
//! a semi or anti join's row is shown or hidden by it). So a row inserted three times is
//! one entry with count 3, and a retraction finds its entry by hash in O(1). Keys are
//! shared by both inputs: one lookup of a row's key finds the other input's rows (its
//! partners) and the list the row joins. A row with no copies left is forgotten; a key
//! with no rows on either input is forgotten at the end of the batch
//! ([`JoinRows::forget_empty_keys`]), so key ids looked up for a batch stay valid while it
//! is processed, and state holds exactly the rows that are in. An append-only input's rows
//! (never retracted) are not indexed by their bytes: each arrival is its own entry
//! ([`JoinRows::with_held`], [`Held`]); those kept until the end are in a
//! [`RowLog`], compressed when cold.

use super::keyed::{KeyRegistry, KeyedValues};
use super::row_log::{Read, RowLog};
use smallvec::SmallVec;

/// How an input's rows are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Held {
    /// Distinct rows, found by their bytes (each with its count of copies): an input
    /// whose rows are retracted, or (under a state TTL) expire together.
    #[default]
    Distinct,
    /// Append-only rows that leave (an interval join's, by the watermark): each arrival is
    /// its own entry, not found by its bytes (no hash-table slot); freed ids are reused.
    Arrivals,
    /// Append-only rows kept until the job ends (a regular join without a TTL): each
    /// arrival is its own entry in a [`RowLog`], cold rows compressed.
    Forever,
}

/// The bytes of one input's rows, by row id, as the input is [`Held`].
enum Store {
    /// [`Held::Distinct`]: rows ↔ ids in a registry, indexed by their bytes.
    Distinct(KeyRegistry),
    /// [`Held::Arrivals`]: rows ↔ ids in a registry, not indexed.
    Arrivals(KeyRegistry),
    /// [`Held::Forever`]: the rows, and per row id its key's id and its partners (all a
    /// row held for good needs of a [`RowEntry`]: 8 bytes, not 24).
    Forever {
        log: RowLog,
        keys: Vec<u32>,
        partners: Vec<u32>,
    },
}

impl Default for Store {
    fn default() -> Self {
        Store::Distinct(KeyRegistry::default())
    }
}

/// What is kept for one distinct row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowEntry {
    /// The id of the row's key.
    pub key: u32,
    /// Where the row is in its key's list for its input.
    pos: u32,
    /// Copies of the row held (at least 1).
    pub count: u32,
    /// Partners on the other input, with multiplicity (see the module docs).
    pub partners: u32,
    /// Processing time (ms since the epoch) of the row's last insert or retraction, for
    /// `'table.exec.state.ttl'` (`i64::MAX` for a row held for good: never idle).
    pub last_ms: i64,
}

/// One input's rows.
#[derive(Default)]
struct InputRows {
    /// Rows ↔ row ids.
    store: Store,
    /// Per row id (a free id's entry is stale).
    entries: Vec<RowEntry>,
}

impl InputRows {
    fn held(&self) -> Held {
        match &self.store {
            Store::Distinct(_) => Held::Distinct,
            Store::Arrivals(_) => Held::Arrivals,
            Store::Forever { .. } => Held::Forever,
        }
    }

    /// Row ids held, ascending.
    fn live_ids(&self) -> Box<dyn Iterator<Item = u32> + '_> {
        match &self.store {
            Store::Distinct(r) | Store::Arrivals(r) => Box::new(r.live_ids()),
            Store::Forever { log, .. } => Box::new(0..log.len() as u32),
        }
    }

    fn len(&self) -> usize {
        match &self.store {
            Store::Distinct(r) | Store::Arrivals(r) => r.len(),
            Store::Forever { log, .. } => log.len(),
        }
    }
}

/// Both inputs' rows per key (see the module docs). Inputs are 0 (left) and 1 (right).
#[derive(Default)]
pub struct JoinRows {
    /// Key → each input's row ids (two inline: as big as a `Vec`, and most keys of a
    /// join on a near-unique column hold one or two rows, which then cost no allocation).
    keys: KeyedValues<[SmallVec<[u32; 2]>; 2]>,
    inputs: [InputRows; 2],
    /// Keys whose last row went during the current batch.
    emptied: Vec<u32>,
}

impl JoinRows {
    /// No rows.
    pub fn new() -> Self {
        Self::default()
    }

    /// No rows; each input's held as `held` says ([`Held`]: [`Held::Arrivals`] and
    /// [`Held::Forever`] only for append-only inputs, whose rows are never retracted).
    pub fn with_held(held: [Held; 2]) -> Self {
        let mut rows = Self::default();
        for (input, h) in rows.inputs.iter_mut().zip(held) {
            input.store = match h {
                Held::Distinct => Store::Distinct(KeyRegistry::new()),
                Held::Arrivals => Store::Arrivals(KeyRegistry::new()),
                Held::Forever => Store::Forever {
                    log: RowLog::new(),
                    keys: Vec::new(),
                    partners: Vec::new(),
                },
            };
        }
        rows
    }

    /// The id of `key` (row-format bytes) if some row has it.
    pub fn key_id(&self, key: &[u8]) -> Option<u32> {
        self.keys.registry().find(key)
    }

    /// [`Self::key_id`] of each of `keys`, into `out` (cleared first), later lookups
    /// prefetched while earlier ones are made.
    pub fn key_ids<'a>(&self, keys: impl Iterator<Item = &'a [u8]>, out: &mut Vec<Option<u32>>) {
        self.keys.registry().find_all(keys, out);
    }

    /// Starts loading key `key_id`'s row lists into the cache (a hint).
    #[inline]
    pub fn prefetch_key(&self, key_id: u32) {
        if let Some(lists) = self.keys.slots().get(key_id as usize) {
            super::probe_table::prefetch(lists);
        }
    }

    /// Input `input`'s rows under key `key_id`.
    pub fn rows_of(&self, key_id: u32, input: usize) -> &[u32] {
        &self.keys[key_id as usize][input]
    }

    /// Adds one copy of `row` (row-format bytes) of `input` under `key` (a row always has
    /// the same key; `key_id`: its id when known). Returns the row's id.
    pub fn insert(
        &mut self,
        input: usize,
        key: &[u8],
        key_id: Option<u32>,
        row: &[u8],
        now_ms: i64,
    ) -> u32 {
        let rows = &mut self.inputs[input];
        let (id, new) = match &mut rows.store {
            Store::Forever { log, .. } => (log.push(row), true),
            Store::Arrivals(r) => (r.push_unindexed(row), true),
            Store::Distinct(r) => r.id(row),
        };
        if !new {
            let e = &mut rows.entries[id as usize];
            e.count += 1;
            e.last_ms = now_ms;
            return id;
        }
        let key_id = match key_id {
            Some(k) => k,
            None => self.keys.id_or_insert_with(key, Default::default).0,
        };
        let list = &mut self.keys[key_id as usize][input];
        if let Store::Forever { keys, partners, .. } = &mut rows.store {
            list.push(id);
            keys.push(key_id);
            partners.push(0);
            return id;
        }
        let entry = RowEntry {
            key: key_id,
            pos: list.len() as u32,
            count: 1,
            partners: 0,
            last_ms: now_ms,
        };
        list.push(id);
        match rows.entries.get_mut(id as usize) {
            Some(slot) => *slot = entry,
            None => rows.entries.push(entry),
        }
        id
    }

    /// Puts a row back as a snapshot held it.
    pub fn restore(
        &mut self,
        input: usize,
        key: &[u8],
        row: &[u8],
        count: u32,
        partners: u32,
        last_ms: i64,
    ) {
        let id = self.insert(input, key, None, row, last_ms);
        if self.inputs[input].held() == Held::Forever {
            // One entry per copy (equal rows are not counted there).
            for _ in 1..count {
                let copy = self.insert(input, key, None, row, last_ms);
                self.set_partners(input, copy, partners);
            }
        } else {
            self.inputs[input].entries[id as usize].count += count.max(1) - 1;
        }
        self.set_partners(input, id, partners);
    }

    /// Whether `input`'s rows are an append-only input's ([`Held::Arrivals`] or
    /// [`Held::Forever`]: not found by their bytes, so never retracted).
    pub fn is_append_only(&self, input: usize) -> bool {
        self.inputs[input].held() != Held::Distinct
    }

    /// Takes one copy of `input`'s `row` away; `false` when it is not held (retracted
    /// before, or expired by the TTL; an append-only input's rows are never found).
    pub fn retract(&mut self, input: usize, row: &[u8], now_ms: i64) -> bool {
        let rows = &mut self.inputs[input];
        let Some(id) = (match &rows.store {
            Store::Distinct(r) => r.find(row),
            _ => None,
        }) else {
            return false;
        };
        let e = &mut rows.entries[id as usize];
        e.count -= 1;
        e.last_ms = now_ms;
        if e.count == 0 {
            self.remove(input, id);
        }
        true
    }

    /// Takes every copy of `input`'s row `id` away (it must be held); returns its entry.
    pub fn remove_row(&mut self, input: usize, id: u32) -> RowEntry {
        let entry = self.entry(input, id);
        self.remove(input, id);
        entry
    }

    /// Whether `input`'s row `id` is held.
    pub fn is_held(&self, input: usize, id: u32) -> bool {
        match &self.inputs[input].store {
            Store::Distinct(r) | Store::Arrivals(r) => r.key(id).is_some(),
            Store::Forever { log, .. } => (id as usize) < log.len(),
        }
    }

    /// Forgets row `id` of `input`; its key is forgotten by
    /// [`Self::forget_empty_keys`] when no row is left under it.
    ///
    /// # Panics
    /// On a [`Held::Forever`] input (whose rows never leave, by construction).
    fn remove(&mut self, input: usize, id: u32) {
        let rows = &mut self.inputs[input];
        let (Store::Distinct(registry) | Store::Arrivals(registry)) = &mut rows.store else {
            panic!("a row of an input held for good was removed");
        };
        let RowEntry { key, pos, .. } = rows.entries[id as usize];
        let lists = &mut self.keys[key as usize];
        let list = &mut lists[input];
        list.swap_remove(pos as usize);
        if let Some(&moved) = list.get(pos as usize) {
            rows.entries[moved as usize].pos = pos;
        }
        if lists.iter().all(|l| l.is_empty()) {
            self.emptied.push(key);
        }
        registry.forget(id);
    }

    /// Forgets the keys whose rows all went since the last call (their ids are reused by
    /// new keys). Call between batches, never while key ids looked up are in use.
    pub fn forget_empty_keys(&mut self) {
        for key in std::mem::take(&mut self.emptied) {
            if self.keys.registry().key(key).is_some()
                && self.keys[key as usize].iter().all(|l| l.is_empty())
            {
                self.keys.forget(key, Default::default());
            }
        }
    }

    /// The ids of every row of `input` held, ascending.
    pub fn ids(&self, input: usize) -> impl Iterator<Item = u32> + '_ {
        self.inputs[input].live_ids()
    }

    /// Calls `f` with the bytes of `input`'s rows `ids` (which must be held), in that
    /// order; `read` says whether compressed rows read stay decompressed
    /// ([`Read::Probe`]) or not ([`Read::Scan`], for a snapshot of every row).
    pub fn with_rows<R>(
        &self,
        input: usize,
        ids: &[u32],
        read: Read,
        f: impl FnOnce(&mut dyn Iterator<Item = &[u8]>) -> R,
    ) -> R {
        match &self.inputs[input].store {
            Store::Distinct(r) | Store::Arrivals(r) => {
                f(&mut ids.iter().map(|&id| r.key(id).expect("a held row")))
            }
            Store::Forever { log, .. } => log.with_rows(ids, read, f),
        }
    }

    /// The key bytes of `input`'s row `id`.
    pub fn key_of(&self, input: usize, id: u32) -> &[u8] {
        let key = self.entry(input, id).key;
        self.keys.registry().key(key).expect("a held row's key")
    }

    /// `input`'s row `id`'s entry (a row held for good: one copy, never idle).
    pub fn entry(&self, input: usize, id: u32) -> RowEntry {
        match &self.inputs[input].store {
            Store::Forever { keys, partners, .. } => RowEntry {
                key: keys[id as usize],
                pos: 0,
                count: 1,
                partners: partners[id as usize],
                last_ms: i64::MAX,
            },
            Store::Distinct(_) | Store::Arrivals(_) => self.inputs[input].entries[id as usize],
        }
    }

    /// Sets `input`'s row `id`'s partner count.
    pub fn set_partners(&mut self, input: usize, id: u32, count: u32) {
        let rows = &mut self.inputs[input];
        match &mut rows.store {
            Store::Forever { partners, .. } => partners[id as usize] = count,
            Store::Distinct(_) | Store::Arrivals(_) => rows.entries[id as usize].partners = count,
        }
    }

    /// Rows of `input` held: distinct rows (copies counted in one) of a [`Held::Distinct`]
    /// input, every arrival of an append-only one.
    pub fn len(&self, input: usize) -> usize {
        self.inputs[input].len()
    }

    /// Whether no row of either input is held.
    pub fn is_empty(&self) -> bool {
        self.inputs.iter().all(|i| i.len() == 0)
    }

    /// Bytes held for rows and keys (row-format bytes, forgotten ones not yet reclaimed
    /// included, the per-row entries and the key lists).
    pub fn bytes(&self) -> usize {
        let rows: usize = self
            .inputs
            .iter()
            .map(|i| {
                let store = match &i.store {
                    Store::Distinct(r) | Store::Arrivals(r) => r.key_bytes() + r.capacity() * 12,
                    Store::Forever {
                        log,
                        keys,
                        partners,
                    } => log.bytes() + (keys.capacity() + partners.capacity()) * 4,
                };
                store + i.entries.len() * std::mem::size_of::<RowEntry>()
            })
            .sum();
        rows + self.keys.registry().key_bytes() + self.keys.capacity() * 56
    }

    /// Compressed blocks of `input`'s rows held for good (0 for other inputs).
    pub fn frozen_blocks(&mut self, input: usize) -> usize {
        match &mut self.inputs[input].store {
            Store::Forever { log, .. } => log.frozen_blocks(),
            Store::Distinct(_) | Store::Arrivals(_) => 0,
        }
    }

    /// Forgets the rows unchanged for more than `ttl_ms` of processing time (without
    /// emitting anything: Flink's state TTL). Returns how many distinct rows went.
    pub fn expire(&mut self, now_ms: i64, ttl_ms: i64) -> usize {
        let mut gone = 0;
        for input in 0..2 {
            if self.inputs[input].held() == Held::Forever {
                continue;
            }
            let old: Vec<u32> = self.inputs[input]
                .live_ids()
                .filter(|&id| now_ms - self.inputs[input].entries[id as usize].last_ms > ttl_ms)
                .collect();
            for &id in &old {
                self.remove(input, id);
            }
            gone += old.len();
        }
        self.forget_empty_keys();
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(s: &JoinRows, input: usize, id: u32) -> Vec<u8> {
        s.with_rows(input, &[id], Read::Probe, |r| r.next().unwrap().to_vec())
    }

    #[test]
    fn copies_share_one_entry_and_the_last_retraction_forgets_row_and_key() {
        let mut s = JoinRows::new();
        let a = s.insert(0, b"k1", None, b"row-a", 0);
        assert_eq!(s.insert(0, b"k1", None, b"row-a", 1), a);
        let b = s.insert(0, b"k1", None, b"row-b", 2);
        let c = s.insert(0, b"k2", None, b"row-c", 3);
        let k1 = s.key_id(b"k1").unwrap();
        // The other input's row of k1 shares the key.
        let r = s.insert(1, b"k1", Some(k1), b"row-r", 3);
        assert_eq!(s.rows_of(k1, 1), &[r]);
        assert_eq!(s.len(0), 3);
        assert_eq!(s.entry(0, a).count, 2);
        assert_eq!(s.rows_of(k1, 0), &[a, b]);
        assert!(s.retract(0, b"row-a", 4));
        assert_eq!(s.entry(0, a).count, 1);
        assert!(s.retract(0, b"row-a", 5));
        // `b` moved into `a`'s place in k1's list.
        assert_eq!(s.rows_of(k1, 0), &[b]);
        assert_eq!(s.entry(0, b).pos, 0);
        assert!(!s.retract(0, b"row-a", 6), "nothing left to retract");
        assert!(s.retract(0, b"row-b", 7));
        s.forget_empty_keys();
        assert_eq!(s.key_id(b"k1"), Some(k1), "k1 still has a right row");
        assert!(s.retract(1, b"row-r", 8));
        assert_eq!(s.key_id(b"k1"), Some(k1), "forgotten only between batches");
        s.forget_empty_keys();
        assert_eq!(s.key_id(b"k1"), None);
        let k2 = s.key_id(b"k2").unwrap();
        assert_eq!(s.rows_of(k2, 0), &[c]);
        assert_eq!(s.len(0), 1);
        assert_eq!(s.key_of(0, c), b"k2");
    }

    #[test]
    fn rows_idle_past_the_ttl_expire() {
        let mut s = JoinRows::new();
        s.insert(0, b"k", None, b"old", 0);
        s.insert(0, b"k", None, b"new", 900);
        assert_eq!(s.expire(1_500, 1_000), 1);
        assert_eq!(s.len(0), 1);
        let k = s.key_id(b"k").unwrap();
        assert_eq!(row(&s, 0, s.rows_of(k, 0)[0]), b"new");
    }

    #[test]
    fn an_append_only_inputs_equal_rows_are_separate_entries_and_expire_one_by_one() {
        let mut s = JoinRows::with_held([Held::Arrivals, Held::Distinct]);
        let a = s.insert(0, b"k", None, b"row", 0);
        let b = s.insert(0, b"k", None, b"row", 500);
        assert_ne!(a, b);
        assert_eq!((s.entry(0, a).count, s.entry(0, b).count), (1, 1));
        let k = s.key_id(b"k").unwrap();
        assert_eq!(s.rows_of(k, 0), &[a, b]);
        assert_eq!(
            (row(&s, 0, a), row(&s, 0, b)),
            (b"row".to_vec(), b"row".to_vec())
        );
        // The other input still counts copies.
        let r = s.insert(1, b"k", Some(k), b"r", 0);
        assert_eq!(s.insert(1, b"k", Some(k), b"r", 0), r);
        assert_eq!(s.entry(1, r).count, 2);
        // TTL: the older copy goes, the newer stays; a freed id is reused.
        assert_eq!(
            s.expire(1_200, 1_000),
            2,
            "the older left row and the right row"
        );
        assert_eq!(s.rows_of(k, 0), &[b]);
        assert_eq!(s.insert(0, b"k", None, b"again", 1_300), a);
        assert_eq!(s.len(0), 2);
    }

    #[test]
    fn rows_held_forever_are_logged_in_arrival_order_and_never_expire() {
        let mut s = JoinRows::with_held([Held::Forever, Held::Distinct]);
        let a = s.insert(0, b"k1", None, b"row", 0);
        let b = s.insert(0, b"k2", None, b"row", 10);
        let c = s.insert(0, b"k1", None, b"other", 20);
        assert_eq!((a, b, c), (0, 1, 2));
        assert!(s.is_append_only(0) && !s.is_append_only(1));
        assert!(!s.retract(0, b"row", 30), "not found by its bytes");
        let k1 = s.key_id(b"k1").unwrap();
        assert_eq!(s.rows_of(k1, 0), &[a, c]);
        let got = s.with_rows(0, &[c, a, b], Read::Scan, |r| {
            r.map(<[u8]>::to_vec).collect::<Vec<_>>()
        });
        assert_eq!(got, [b"other".to_vec(), b"row".to_vec(), b"row".to_vec()]);
        s.insert(1, b"k1", Some(k1), b"r", 0);
        assert_eq!(s.expire(10_000, 1_000), 1, "only the other input's row");
        assert_eq!(s.ids(0).collect::<Vec<_>>(), [a, b, c]);
        assert_eq!(s.key_of(0, b), b"k2");
    }
}
