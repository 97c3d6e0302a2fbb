//! A partition's rows in sort order, for Top-N: `(sort key, arrival number) → row`, all
//! in Arrow's row format (sort keys compare as bytes; equal keys keep arrival order).
//! Most partitions hold a few rows (a Top-N over append-only input keeps at most the top
//! N, a deduplication one): those are a sorted `Vec` (one small allocation); a partition
//! that grows past [`SMALL`] rows (every live row of an updating input) becomes a
//! `BTreeMap`, so an insert or a removal stays logarithmic. Sort keys are [`SortKey`]s:
//! short ones inside the entry, so comparisons in a search read no other memory.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Rows up to which a partition is a sorted `Vec`.
pub const SMALL: usize = 32;

type Key = (SortKey, u64);

/// Bytes of a [`SortKey`] kept inside it (an event-time attribute's or a BIGINT's key in
/// Arrow's row format is 9).
const INLINE: usize = 22;

/// Sort key bytes (Arrow's row format: they compare in `ORDER BY` order): up to
/// [`INLINE`] inside the value, longer ones on the heap. Ordered and equal by bytes.
#[derive(Clone)]
pub struct SortKey(Repr);

#[derive(Clone)]
enum Repr {
    /// A short key: `len` bytes, then zeros.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A long key.
    Heap(Box<[u8]>),
}

impl SortKey {
    /// The key `bytes`.
    pub fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            SortKey(Repr::Inline {
                len: key.len() as u8,
                bytes,
            })
        } else {
            SortKey(Repr::Heap(key.into()))
        }
    }

    /// The key's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..*len as usize],
            Repr::Heap(b) => b,
        }
    }
}

impl Default for SortKey {
    fn default() -> Self {
        SortKey::new(&[])
    }
}

impl PartialEq for SortKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for SortKey {}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SortKey {
    /// Bytes order. Two short keys compare as big-endian words of their zero-padded bytes,
    /// then by length (a key sorts after its prefix, also when the rest is zeros): the
    /// same order without a call to `memcmp`, which a tree search makes many of.
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (&self.0, &other.0) {
            (Repr::Inline { len: a, bytes: x }, Repr::Inline { len: b, bytes: y }) => {
                words(x).cmp(&words(y)).then(a.cmp(b))
            }
            _ => self.bytes().cmp(other.bytes()),
        }
    }
}

/// An inline key's bytes as three big-endian words (the last one zero-padded).
#[inline(always)]
fn words(bytes: &[u8; INLINE]) -> (u64, u64, u64) {
    let word = |from: usize| {
        let mut w = [0u8; 8];
        let n = (INLINE - from).min(8);
        w[..n].copy_from_slice(&bytes[from..from + n]);
        u64::from_be_bytes(w)
    };
    (word(0), word(8), word(16))
}

impl std::fmt::Debug for SortKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.bytes())
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct SortedRows {
    small: Vec<(Key, Arc<[u8]>)>,
    large: Option<BTreeMap<Key, Arc<[u8]>>>,
}

impl SortedRows {
    /// No rows.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        match &self.large {
            Some(m) => m.len(),
            None => self.small.len(),
        }
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `row` with sort key `sort`, arriving as number `seq` (after every row held with
    /// an equal key, when `seq` is the largest yet).
    pub fn insert(&mut self, sort: SortKey, seq: u64, row: Arc<[u8]>) {
        let key = (sort, seq);
        if let Some(m) = &mut self.large {
            m.insert(key, row);
            return;
        }
        let at = self.small.partition_point(|(k, _)| *k < key);
        self.small.insert(at, (key, row));
        if self.small.len() > SMALL {
            self.large = Some(std::mem::take(&mut self.small).into_iter().collect());
        }
    }

    /// Removes the latest arrival of `row` among the rows with sort key `sort`; whether
    /// there was one.
    pub fn remove_latest(&mut self, sort: &[u8], row: &[u8]) -> bool {
        if let Some(m) = &mut self.large {
            let key = SortKey::new(sort);
            let found = m
                .range((key.clone(), 0)..=(key.clone(), u64::MAX))
                .rev()
                .find(|(_, r)| r.as_ref() == row)
                .map(|((_, seq), _)| *seq);
            return found.is_some_and(|seq| m.remove(&(key, seq)).is_some());
        }
        let end = self.small.partition_point(|((s, _), _)| s.bytes() <= sort);
        let start = self.small.partition_point(|((s, _), _)| s.bytes() < sort);
        match (start..end)
            .rev()
            .find(|&i| self.small[i].1.as_ref() == row)
        {
            Some(i) => {
                self.small.remove(i);
                true
            }
            None => false,
        }
    }

    /// The rows in order: `(sort key, arrival number, row)`.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u64, &Arc<[u8]>)> {
        let large = self.large.iter().flat_map(|m| m.iter());
        let small = self.small.iter().map(|(k, r)| (k, r));
        small
            .chain(large)
            .map(|((sort, seq), row)| (sort.bytes(), *seq, row))
    }

    /// The sort key of the last row.
    pub fn last_sort(&self) -> Option<&[u8]> {
        match &self.large {
            Some(m) => m.last_key_value().map(|((s, _), _)| s.bytes()),
            None => self.small.last().map(|((s, _), _)| s.bytes()),
        }
    }

    /// Keeps the first `keep` rows.
    pub fn truncate(&mut self, keep: usize) {
        match &mut self.large {
            None => self.small.truncate(keep),
            Some(m) => {
                if let Some(from) = m.keys().nth(keep).cloned() {
                    let _ = m.split_off(&from);
                }
                if m.len() <= SMALL / 2 {
                    self.small = std::mem::take(m).into_iter().collect();
                    self.large = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(s: &SortedRows) -> Vec<(u8, u64)> {
        s.iter().map(|(k, seq, _)| (k[0], seq)).collect()
    }

    /// Both forms keep (key, arrival) order, remove the latest equal row, and truncate.
    #[test]
    fn small_and_large_forms_agree() {
        let mut s = SortedRows::new();
        let mut seq = 0;
        for k in [5u8, 3, 5, 1, 3] {
            s.insert(SortKey::new(&[k]), seq, Arc::from(vec![k, seq as u8]));
            seq += 1;
        }
        assert_eq!(rows(&s), [(1, 3), (3, 1), (3, 4), (5, 0), (5, 2)]);
        assert!(s.remove_latest(&[3], &[3, 4]));
        assert!(!s.remove_latest(&[3], &[3, 9]));
        assert_eq!(rows(&s), [(1, 3), (3, 1), (5, 0), (5, 2)]);
        for i in 0..40u8 {
            s.insert(SortKey::new(&[100 + i]), seq, Arc::from(vec![i]));
            seq += 1;
        }
        assert!(s.large.is_some());
        assert_eq!(s.len(), 44);
        assert_eq!(s.last_sort(), Some(&[139u8][..]));
        assert!(s.remove_latest(&[5], &[5, 2]));
        assert_eq!(rows(&s)[..3], [(1, 3), (3, 1), (5, 0)]);
        s.truncate(3);
        assert!(s.large.is_none());
        assert_eq!(rows(&s), [(1, 3), (3, 1), (5, 0)]);
        // Long keys (on the heap) order with short ones by their bytes.
        let long = SortKey::new(&[7; 30]);
        assert!(SortKey::new(&[7; 22]) < long && long < SortKey::new(&[8]));
        assert_eq!(long.bytes(), &[7; 30][..]);
        // Short keys in bytes order, a key after its prefix (also a zero-padded one).
        let keys: [&[u8]; 7] = [&[], &[0], &[0, 0], &[0, 1], &[1], &[1; 9], &[255; 22]];
        for (i, a) in keys.iter().enumerate() {
            for (j, b) in keys.iter().enumerate() {
                assert_eq!(
                    SortKey::new(a).cmp(&SortKey::new(b)),
                    i.cmp(&j),
                    "{a:?} {b:?}"
                );
            }
        }
    }
}
