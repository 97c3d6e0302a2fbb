//! One group's distinct values with their row counts: a [`ProbeTable`] of `i64` value
//! keys ([`super::value_keys`]) → `[u32; W]` (a count per aggregate sharing the values),
//! each key stored beside its counts. A slot whose counts are all 0 is empty: a value
//! with no rows left is removed.

use std::hash::BuildHasher;
use std::sync::LazyLock;

use crate::state::probe_table::{ProbeSlot, ProbeTable};

/// The hasher of every value table in the process (foldhash, randomly seeded at start).
static HASHER: LazyLock<hashbrown::DefaultHashBuilder> =
    LazyLock::new(hashbrown::DefaultHashBuilder::default);

#[inline]
fn hash(x: i64) -> u64 {
    HASHER.hash_one(x)
}

/// A value key and its counts (all 0: an empty slot).
#[derive(Clone, Copy)]
struct Slot<const W: usize> {
    key: i64,
    counts: [u32; W],
}

impl<const W: usize> ProbeSlot for Slot<W> {
    const EMPTY: Self = Slot {
        key: 0,
        counts: [0; W],
    };

    #[inline]
    fn is_empty(&self) -> bool {
        self.counts.iter().all(|&c| c == 0)
    }
}

#[inline]
fn rehash<const W: usize>(slot: &Slot<W>) -> u64 {
    hash(slot.key)
}

/// See the module docs.
#[derive(Default)]
pub struct ValueCounts<const W: usize> {
    table: ProbeTable<Slot<W>>,
}

impl<const W: usize> ValueCounts<W> {
    /// Values held.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Starts loading the slot where the lookup of `x` begins into the cache (a hint: no
    /// effect on the contents).
    #[inline]
    pub fn prefetch(&self, x: i64) {
        self.table.prefetch(hash(x));
    }

    /// Applies `change` to `x`'s counts if it is held, and removes `x` when they all end
    /// at 0. Returns whether `x` was held.
    #[inline]
    pub fn change(&mut self, x: i64, change: impl FnOnce(&mut [u32; W])) -> bool {
        let Some(pos) = self.table.find(hash(x), |s| s.key == x) else {
            return false;
        };
        let slot = self.table.get_mut(pos);
        change(&mut slot.counts);
        if slot.is_empty() {
            self.table.remove_at(pos, rehash);
        }
        true
    }

    /// `x`'s counts, all 0 if it was not held. The caller leaves one of them above 0 (to
    /// lower counts, use [`Self::change`]).
    #[inline]
    pub fn get_or_insert(&mut self, x: i64) -> &mut [u32; W] {
        let h = hash(x);
        let pos = match self.table.find(h, |s| s.key == x) {
            Some(pos) => pos,
            None => self.table.insert(
                h,
                Slot {
                    key: x,
                    counts: [0; W],
                },
                rehash,
            ),
        };
        &mut self.table.get_mut(pos).counts
    }

    /// Each value held with its counts, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&i64, &[u32; W])> {
        self.table.iter().map(|s| (&s.key, &s.counts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts, count changes and removals agree with a `HashMap` model at every
    /// step. Few keys in small tables (from 8 slots) make runs that wrap around the end,
    /// overlap and are shifted back by removals.
    #[test]
    fn agrees_with_a_map_through_inserts_and_removals() {
        let mut next = crate::test_rng::xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..50 {
            let mut table = ValueCounts::<2>::default();
            let mut model: HashMap<i64, [u32; 2]> = HashMap::new();
            let spread = [4, 40, 4000][round % 3];
            for _ in 0..3000 {
                let x = (next() % spread) as i64 * 8 - 100 + (next() % 2) as i64;
                match next() % 3 {
                    0 | 1 => {
                        let j = (next() % 2) as usize;
                        table.get_or_insert(x)[j] += 1;
                        model.entry(x).or_default()[j] += 1;
                    }
                    _ => {
                        let held = table.change(x, |c| {
                            let j = usize::from(c[0] == 0);
                            c[j] -= 1;
                        });
                        assert_eq!(held, model.contains_key(&x));
                        if let Some(m) = model.get_mut(&x) {
                            let j = usize::from(m[0] == 0);
                            m[j] -= 1;
                            if *m == [0, 0] {
                                model.remove(&x);
                            }
                        }
                    }
                }
                assert_eq!(table.len(), model.len());
            }
            let mut held: Vec<(i64, [u32; 2])> = table.iter().map(|(&x, &c)| (x, c)).collect();
            held.sort_unstable();
            let mut expected: Vec<(i64, [u32; 2])> = model.into_iter().collect();
            expected.sort_unstable();
            assert_eq!(held, expected, "round {round}");
            for (x, c) in expected {
                let mut seen = None;
                assert!(table.change(x, |held| seen = Some(*held)));
                assert_eq!(seen, Some(c));
            }
        }
    }
}
