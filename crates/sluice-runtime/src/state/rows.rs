//! A multiset of rows per key: what a regular join keeps of each input (Flink's
//! `JoinRecordStateView` without a unique key: a map from row to its count, per key).
//!
//! Each distinct row (Arrow row-format bytes of all the input's columns) is held once,
//! with how many copies are in (`count`) and, for joins that need it, how many partners it
//! has on the other side (`partners`: an outer row is padded with NULLs while it has none;
//! a semi or anti join's row is shown or hidden by it). So a row inserted three times is
//! one entry with count 3, and a retraction finds its entry by hash in O(1). A key's rows
//! are listed so the other input's rows find their partners in O(partners). A key with
//! no rows left and a row with no copies left are forgotten (their ids are reused), so
//! state holds exactly the rows that are in.

use super::keyed::{KeyRegistry, KeyedValues};

/// What is kept for one distinct row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowEntry {
    /// The id of the row's key.
    pub key: u32,
    /// Where the row is in its key's list.
    pos: u32,
    /// Copies of the row held (at least 1).
    pub count: u64,
    /// Partners on the other input, with multiplicity (see the module docs).
    pub partners: u64,
    /// Processing time (ms since the epoch) of the row's last insert or retraction, for
    /// `'table.exec.state.ttl'`.
    pub last_ms: i64,
}

/// Rows per key (see the module docs).
#[derive(Default)]
pub struct KeyedRows {
    /// Key → the ids of its rows.
    keys: KeyedValues<Vec<u32>>,
    /// Distinct rows ↔ row ids.
    rows: KeyRegistry,
    /// Per row id (a free id's entry is stale).
    entries: Vec<RowEntry>,
}

impl KeyedRows {
    /// No rows.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one copy of `row` (row-format bytes) under `key` (the key's row-format bytes;
    /// a row always has the same key). Returns the row's id.
    pub fn insert(&mut self, key: &[u8], row: &[u8], now_ms: i64) -> u32 {
        let (id, new) = self.rows.id(row);
        if !new {
            let e = &mut self.entries[id as usize];
            e.count += 1;
            e.last_ms = now_ms;
            return id;
        }
        let (key_id, _) = self.keys.id_or_insert_with(key, Vec::new);
        let list = &mut self.keys[key_id as usize];
        let entry = RowEntry {
            key: key_id,
            pos: list.len() as u32,
            count: 1,
            partners: 0,
            last_ms: now_ms,
        };
        list.push(id);
        match self.entries.get_mut(id as usize) {
            Some(slot) => *slot = entry,
            None => self.entries.push(entry),
        }
        id
    }

    /// Puts a row back as a snapshot held it.
    pub fn restore(&mut self, key: &[u8], row: &[u8], count: u64, partners: u64, last_ms: i64) {
        let id = self.insert(key, row, last_ms);
        let e = &mut self.entries[id as usize];
        e.count += count.max(1) - 1;
        e.partners = partners;
    }

    /// Takes one copy of `row` away; `false` when it is not held (retracted before, or
    /// expired by the TTL).
    pub fn retract(&mut self, row: &[u8], now_ms: i64) -> bool {
        let Some(id) = self.rows.find(row) else {
            return false;
        };
        let e = &mut self.entries[id as usize];
        e.count -= 1;
        e.last_ms = now_ms;
        if e.count == 0 {
            self.remove(id);
        }
        true
    }

    /// Forgets row `id` and, when it was its key's last, the key.
    fn remove(&mut self, id: u32) {
        let RowEntry { key, pos, .. } = self.entries[id as usize];
        let list = &mut self.keys[key as usize];
        list.swap_remove(pos as usize);
        if let Some(&moved) = list.get(pos as usize) {
            self.entries[moved as usize].pos = pos;
        }
        if list.is_empty() {
            self.keys.forget(key, Vec::new());
        }
        self.rows.forget(id);
    }

    /// The ids of the rows under `key` (none when the key has no rows).
    pub fn rows_of(&self, key: &[u8]) -> &[u32] {
        match self.keys.registry().find(key) {
            Some(k) => &self.keys[k as usize],
            None => &[],
        }
    }

    /// The ids of every row held, ascending.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.rows.live_ids()
    }

    /// The row-format bytes of row `id` (which must be held).
    pub fn row(&self, id: u32) -> &[u8] {
        self.rows.key(id).expect("a held row")
    }

    /// The key bytes of row `id`.
    pub fn key_of(&self, id: u32) -> &[u8] {
        let key = self.entries[id as usize].key;
        self.keys.registry().key(key).expect("a held row's key")
    }

    /// Row `id`'s entry.
    pub fn entry(&self, id: u32) -> &RowEntry {
        &self.entries[id as usize]
    }

    /// Row `id`'s entry, to change its partner count.
    pub fn entry_mut(&mut self, id: u32) -> &mut RowEntry {
        &mut self.entries[id as usize]
    }

    /// Distinct rows held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Bytes held for rows and keys (row-format bytes, forgotten ones not yet reclaimed
    /// included, plus the per-row entries).
    pub fn bytes(&self) -> usize {
        self.rows.key_bytes()
            + self.keys.registry().key_bytes()
            + self.entries.len() * std::mem::size_of::<RowEntry>()
            + self.rows.capacity() * 4
    }

    /// Forgets the rows unchanged for more than `ttl_ms` of processing time (without
    /// emitting anything: Flink's state TTL). Returns how many distinct rows went.
    pub fn expire(&mut self, now_ms: i64, ttl_ms: i64) -> usize {
        let old: Vec<u32> = self
            .rows
            .live_ids()
            .filter(|&id| now_ms - self.entries[id as usize].last_ms > ttl_ms)
            .collect();
        for &id in &old {
            self.remove(id);
        }
        old.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_share_one_entry_and_the_last_retraction_forgets_row_and_key() {
        let mut s = KeyedRows::new();
        let a = s.insert(b"k1", b"row-a", 0);
        assert_eq!(s.insert(b"k1", b"row-a", 1), a);
        let b = s.insert(b"k1", b"row-b", 2);
        let c = s.insert(b"k2", b"row-c", 3);
        assert_eq!(s.len(), 3);
        assert_eq!(s.entry(a).count, 2);
        assert_eq!(s.rows_of(b"k1"), &[a, b]);
        assert!(s.retract(b"row-a", 4));
        assert_eq!(s.entry(a).count, 1);
        assert!(s.retract(b"row-a", 5));
        // `b` moved into `a`'s place in k1's list.
        assert_eq!(s.rows_of(b"k1"), &[b]);
        assert_eq!(s.entry(b).pos, 0);
        assert!(!s.retract(b"row-a", 6), "nothing left to retract");
        assert!(s.retract(b"row-b", 7));
        assert!(s.rows_of(b"k1").is_empty());
        assert_eq!(s.rows_of(b"k2"), &[c]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.key_of(c), b"k2");
    }

    #[test]
    fn rows_idle_past_the_ttl_expire() {
        let mut s = KeyedRows::new();
        s.insert(b"k", b"old", 0);
        s.insert(b"k", b"new", 900);
        assert_eq!(s.expire(1_500, 1_000), 1);
        assert_eq!(s.len(), 1);
        assert_eq!(s.row(s.rows_of(b"k")[0]), b"new");
    }
}
