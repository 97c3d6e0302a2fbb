//! One group's distinct values with their row counts: an open-addressing table of
//! `i64` value keys ([`super::value_keys`]) → `[u32; W]` (a count per aggregate sharing
//! the values), with linear probing and each key stored beside its counts.
//!
//! Why not `hashbrown`: a `COUNT(DISTINCT)` state is large and touched at random (Nexmark
//! q16 holds 11 M values in 10 k groups), so a row's cost is its cache misses. A
//! SwissTable lookup misses twice (control bytes, then the entry) and offers no way to
//! start those loads early. Here a lookup reads one slot run, and [`ValueCounts::prefetch`]
//! starts loading it while earlier rows are processed (the batched prefetching of
//! vectorized engines' hash tables: Chen et al., "Improving Hash Join Performance through
//! Prefetching", ICDE 2004).
//!
//! A slot whose counts are all 0 is empty: a value with no rows left is removed
//! (backward-shift deletion, so no tombstones). At most 3/4 of the slots are used.

use std::hash::BuildHasher;
use std::sync::LazyLock;

/// The hasher of every table in the process (foldhash, randomly seeded at start).
static HASHER: LazyLock<hashbrown::DefaultHashBuilder> =
    LazyLock::new(hashbrown::DefaultHashBuilder::default);

#[inline]
fn hash(x: i64) -> usize {
    HASHER.hash_one(x) as usize
}

/// A value key and its counts (all 0: an empty slot).
#[derive(Clone, Copy)]
struct Slot<const W: usize> {
    key: i64,
    counts: [u32; W],
}

impl<const W: usize> Slot<W> {
    const EMPTY: Self = Slot {
        key: 0,
        counts: [0; W],
    };

    #[inline]
    fn is_empty(&self) -> bool {
        self.counts.iter().all(|&c| c == 0)
    }
}

/// See the module docs.
#[derive(Default)]
pub struct ValueCounts<const W: usize> {
    /// A power of two of slots (none before the first insert).
    slots: Box<[Slot<W>]>,
    /// Slots in use.
    len: usize,
}

impl<const W: usize> ValueCounts<W> {
    /// Values held.
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Starts loading the slot where the lookup of `x` begins into the cache (a hint: no
    /// effect on the contents).
    #[inline]
    pub fn prefetch(&self, x: i64) {
        if let Some(slot) = self.slots.get(hash(x) & self.mask()) {
            prefetch(slot);
        }
    }

    /// Where `x` is, or the empty slot ending its probe run.
    #[inline]
    fn find(&self, x: i64) -> (usize, bool) {
        let mask = self.mask();
        let mut i = hash(x) & mask;
        loop {
            let slot = &self.slots[i];
            if slot.is_empty() {
                return (i, false);
            }
            if slot.key == x {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// Applies `change` to `x`'s counts if it is held, and removes `x` when they all end
    /// at 0. Returns whether `x` was held.
    #[inline]
    pub fn change(&mut self, x: i64, change: impl FnOnce(&mut [u32; W])) -> bool {
        if self.len == 0 {
            return false;
        }
        let (i, found) = self.find(x);
        if found {
            change(&mut self.slots[i].counts);
            if self.slots[i].is_empty() {
                self.remove_at(i);
            }
        }
        found
    }

    /// `x`'s counts, all 0 if it was not held. The caller leaves one of them above 0 (to
    /// lower counts, use [`Self::change`]).
    #[inline]
    pub fn get_or_insert(&mut self, x: i64) -> &mut [u32; W] {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let (i, found) = self.find(x);
        if !found {
            self.len += 1;
            self.slots[i].key = x;
        }
        &mut self.slots[i].counts
    }

    /// Removes the (just emptied) slot `hole`. Backward shift: each later slot of the
    /// run whose home is not after the hole (cyclically) moves into it, so every run
    /// stays unbroken.
    fn remove_at(&mut self, mut hole: usize) {
        self.len -= 1;
        let mask = self.mask();
        let mut j = (hole + 1) & mask;
        while !self.slots[j].is_empty() {
            let home = hash(self.slots[j].key) & mask;
            if (hole.wrapping_sub(home) & mask) < (j.wrapping_sub(home) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = Slot::EMPTY;
    }

    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(8);
        let old = std::mem::replace(
            &mut self.slots,
            vec![Slot::EMPTY; capacity].into_boxed_slice(),
        );
        let mask = capacity - 1;
        for slot in old.iter().filter(|s| !s.is_empty()) {
            let mut i = hash(slot.key) & mask;
            while !self.slots[i].is_empty() {
                i = (i + 1) & mask;
            }
            self.slots[i] = *slot;
        }
    }

    /// Each value held with its counts, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&i64, &[u32; W])> {
        self.slots
            .iter()
            .filter(|s| !s.is_empty())
            .map(|s| (&s.key, &s.counts))
    }
}

/// Starts loading `value`'s cache line (x86-64 `prefetcht0`; elsewhere nothing).
#[inline]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of x86-64; a prefetch only hints the cache and never
        // faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(value).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
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
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
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
