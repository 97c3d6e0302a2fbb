//! A partition's rows in sort order, for Top-N: `(sort key, arrival number) → row`, all
//! in Arrow's row format (sort keys compare as bytes; equal keys keep arrival order).
//! Most partitions hold a few rows (a Top-N over append-only input keeps at most the top
//! N, a deduplication one): those are a sorted `Vec` (one small allocation); a partition
//! that grows past [`SMALL`] rows (every live row of an updating input) becomes a
//! `BTreeMap`, so an insert or a removal stays logarithmic.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Rows up to which a partition is a sorted `Vec`.
pub const SMALL: usize = 32;

type Key = (Box<[u8]>, u64);

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
    pub fn insert(&mut self, sort: Box<[u8]>, seq: u64, row: Arc<[u8]>) {
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
            let from: Key = (sort.into(), 0);
            let to: Key = (sort.into(), u64::MAX);
            let found = m
                .range(from..=to)
                .rev()
                .find(|(_, r)| r.as_ref() == row)
                .map(|(k, _)| k.clone());
            return found.is_some_and(|k| m.remove(&k).is_some());
        }
        let end = self.small.partition_point(|((s, _), _)| s.as_ref() <= sort);
        let start = self.small.partition_point(|((s, _), _)| s.as_ref() < sort);
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
            .map(|((sort, seq), row)| (sort.as_ref(), *seq, row))
    }

    /// The sort key of the last row.
    pub fn last_sort(&self) -> Option<&[u8]> {
        match &self.large {
            Some(m) => m.last_key_value().map(|((s, _), _)| s.as_ref()),
            None => self.small.last().map(|((s, _), _)| s.as_ref()),
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
            s.insert(Box::new([k]), seq, Arc::from(vec![k, seq as u8]));
            seq += 1;
        }
        assert_eq!(rows(&s), [(1, 3), (3, 1), (3, 4), (5, 0), (5, 2)]);
        assert!(s.remove_latest(&[3], &[3, 4]));
        assert!(!s.remove_latest(&[3], &[3, 9]));
        assert_eq!(rows(&s), [(1, 3), (3, 1), (5, 0), (5, 2)]);
        for i in 0..40u8 {
            s.insert(Box::new([100 + i]), seq, Arc::from(vec![i]));
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
    }
}
