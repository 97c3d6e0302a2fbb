//! Keyed-state building blocks shared by the stateful operators: a registry of keys with
//! dense, reusable ids, and event-time timers per key.
//!
//! - [`KeyRegistry`]: keys (Arrow row format bytes of the key columns) ↔ dense ids
//!   `0..capacity`. An operator keeps its per-key state in vectors indexed by id; when a
//!   key has no state left, the operator forgets it and its id is reused by the next new
//!   key, so state stays bounded by the keys that still have state (Flink clears a key's
//!   state the same way when its last window or timer is gone). Used by SESSION and
//!   MATCH_RECOGNIZE.
//! - [`EventTimeTimers`]: `(time, key id)` timers, earliest first, with lazy deletion: a
//!   timer is not removed when the state it was set for changes; when it fires, the
//!   operator looks at the key's current state and ignores or re-arms it (SESSION's
//!   window ends, MATCH_RECOGNIZE's `WITHIN` expiry).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use datafusion_common::arrow::array::ArrayRef;
use datafusion_common::arrow::row::RowConverter;
use sluice_common::Result;

/// Keys ↔ dense ids with reuse of forgotten ids (see the module docs).
#[derive(Debug, Default)]
pub struct KeyRegistry {
    ids: hashbrown::HashMap<Box<[u8]>, u32>,
    /// The key of each id; `None` for a free id.
    keys: Vec<Option<Box<[u8]>>>,
    free: Vec<u32>,
}

impl KeyRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `key` (its row-format bytes; empty for the one key of an operator
    /// without key columns), registering it when new: a forgotten id is reused, else the
    /// next id (`capacity()` before the call). The flag says whether the key was new.
    pub fn id(&mut self, key: &[u8]) -> (u32, bool) {
        if let Some(id) = self.ids.get(key) {
            return (*id, false);
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.keys[id as usize] = Some(key.into());
                id
            }
            None => {
                self.keys.push(Some(key.into()));
                (self.keys.len() - 1) as u32
            }
        };
        self.ids.insert(key.into(), id);
        (id, true)
    }

    /// The key registered under `id`, if it is not free.
    pub fn key(&self, id: u32) -> Option<&[u8]> {
        self.keys.get(id as usize).and_then(|k| k.as_deref())
    }

    /// Forgets the key of `id` (its state is gone); the id is reused. Returns `false`
    /// when the id was already free (a stale timer, say).
    pub fn forget(&mut self, id: u32) -> bool {
        let Some(key) = self.keys.get_mut(id as usize).and_then(|k| k.take()) else {
            return false;
        };
        self.ids.remove(&key);
        self.free.push(id);
        true
    }

    /// Keys registered (not forgotten).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no key is registered.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// One more than the largest id ever given (the length of per-id state vectors).
    pub fn capacity(&self) -> usize {
        self.keys.len()
    }

    /// Ids free for reuse (for tests).
    pub fn free_ids(&self) -> &[u32] {
        &self.free
    }

    /// The key columns of `ids` (which must be registered), decoded with `converter`
    /// (the one the keys were encoded with), for snapshots and output.
    ///
    /// # Errors
    /// An id that is free, or bytes the converter cannot decode.
    pub fn key_columns(&self, converter: &RowConverter, ids: &[u32]) -> Result<Vec<ArrayRef>> {
        let parser = converter.parser();
        let rows = ids
            .iter()
            .map(|&id| {
                self.key(id).map(|k| parser.parse(k)).ok_or_else(|| {
                    sluice_common::SluiceError::Internal(format!("key id {id} is free"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(converter.convert_rows(rows)?)
    }
}

/// `(time in ms, key id)` timers, earliest first, with lazy deletion (see the module
/// docs).
#[derive(Debug, Default)]
pub struct EventTimeTimers {
    heap: BinaryHeap<Reverse<(i64, u32)>>,
}

impl EventTimeTimers {
    /// No timers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a timer for `key` at `time_ms` (another timer of the key stays set).
    pub fn set(&mut self, time_ms: i64, key: u32) {
        self.heap.push(Reverse((time_ms, key)));
    }

    /// Removes and returns the earliest timer if `due(its time)`; `None` when there is
    /// none or the earliest is not due yet.
    pub fn pop_due(&mut self, due: impl Fn(i64) -> bool) -> Option<(i64, u32)> {
        let Reverse((time, key)) = *self.heap.peek()?;
        if !due(time) {
            return None;
        }
        self.heap.pop();
        Some((time, key))
    }

    /// Timers set (stale ones included).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no timer is set.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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
        let a = r.id(rows.row(0).as_ref()).0;
        let b = r.id(rows.row(1).as_ref()).0;
        let back = r.key_columns(&converter, &[b, a]).unwrap();
        let names = back[0].as_any().downcast_ref::<StringArray>().unwrap();
        assert!(names.is_null(0));
        assert_eq!(names.value(1), "x");
        let n = back[1].as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(n.values(), &[2, 1]);
        assert!(r.key_columns(&converter, &[7]).is_err());
    }

    #[test]
    fn timers_fire_in_time_order_when_due() {
        let mut t = EventTimeTimers::new();
        t.set(30, 1);
        t.set(10, 2);
        t.set(20, 3);
        assert_eq!(t.pop_due(|time| time <= 5), None);
        assert_eq!(t.pop_due(|time| time <= 25), Some((10, 2)));
        assert_eq!(t.pop_due(|time| time <= 25), Some((20, 3)));
        assert_eq!(t.pop_due(|time| time <= 25), None);
        assert_eq!(t.len(), 1);
    }
}
