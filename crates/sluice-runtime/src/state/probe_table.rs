//! The hash table keyed state is looked up in: open addressing with linear probing, each
//! slot holding its key (or enough of it to compare) beside its value, so a lookup
//! reads one run of adjacent slots.
//!
//! Why not `hashbrown`: keyed state is large and touched at random (Nexmark q16's
//! distinct values: 11 M in 10 k groups; q7's join keys: a million prices), so a row's
//! cost is its cache misses. A SwissTable lookup misses twice (control bytes, then the
//! slot) and offers no way to start those loads early. Here [`ProbeTable::prefetch`]
//! starts loading a row's slot while earlier rows are processed, so the misses of
//! several rows overlap (the batched prefetching of vectorized engines' hash tables:
//! Chen et al., "Improving Hash Join Performance through Prefetching", ICDE 2004).
//!
//! The slot type says which slots are empty ([`ProbeSlot`]); removal shifts the rest of
//! the run back (no tombstones); at most 3/4 of the slots are used. Hashes come from the
//! caller (the table keeps none), so growing and removing take a `rehash` function.

/// A slot of a [`ProbeTable`].
pub trait ProbeSlot: Copy {
    /// The empty slot.
    const EMPTY: Self;

    /// Whether this slot is empty.
    fn is_empty(&self) -> bool;
}

/// See the module docs.
pub struct ProbeTable<T> {
    /// A power of two of slots (none before the first insert).
    slots: Box<[T]>,
    /// Slots in use.
    len: usize,
}

impl<T> Default for ProbeTable<T> {
    fn default() -> Self {
        ProbeTable {
            slots: Box::default(),
            len: 0,
        }
    }
}

impl<T: ProbeSlot> ProbeTable<T> {
    /// Slots in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no slot is in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        hash as usize & self.slots.len().wrapping_sub(1)
    }

    /// Starts loading the slot where a lookup of `hash` begins into the cache (a hint:
    /// no effect on the contents).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        if let Some(slot) = self.slots.get(self.home(hash)) {
            prefetch(slot);
        }
    }

    /// The position of the slot of `hash`'s run that `eq` accepts, if any.
    #[inline]
    pub fn find(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            let slot = &self.slots[i];
            if slot.is_empty() {
                return None;
            }
            if eq(slot) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The slot at `pos` (from [`Self::find`] or [`Self::insert`]).
    #[inline]
    pub fn get(&self, pos: usize) -> &T {
        &self.slots[pos]
    }

    /// The slot at `pos`, mutable; the caller keeps it non-empty (use
    /// [`Self::remove_at`]).
    #[inline]
    pub fn get_mut(&mut self, pos: usize) -> &mut T {
        &mut self.slots[pos]
    }

    /// Puts `slot` (not held yet, hash `hash`) at the end of its run, growing the table
    /// first when it is 3/4 full (`rehash` gives a held slot's hash). Returns its
    /// position. A slot that reads as empty (a value whose counts the caller raises
    /// next) must be made non-empty before the next call.
    #[inline]
    pub fn insert(&mut self, hash: u64, slot: T, rehash: impl Fn(&T) -> u64) -> usize {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow(rehash);
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        while !self.slots[i].is_empty() {
            i = (i + 1) & mask;
        }
        self.slots[i] = slot;
        self.len += 1;
        i
    }

    /// Empties the slot at `pos`. Backward shift: each later slot of the run whose home
    /// is not after the hole (cyclically) moves into it, so every run stays unbroken.
    pub fn remove_at(&mut self, pos: usize, rehash: impl Fn(&T) -> u64) {
        self.len -= 1;
        let mask = self.slots.len() - 1;
        let mut hole = pos;
        let mut j = (hole + 1) & mask;
        while !self.slots[j].is_empty() {
            let home = self.home(rehash(&self.slots[j]));
            if (hole.wrapping_sub(home) & mask) < (j.wrapping_sub(home) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.slots[hole] = T::EMPTY;
    }

    fn grow(&mut self, rehash: impl Fn(&T) -> u64) {
        let capacity = (self.slots.len() * 2).max(8);
        let old = std::mem::replace(&mut self.slots, vec![T::EMPTY; capacity].into_boxed_slice());
        let mask = capacity - 1;
        for slot in old.iter().filter(|s| !s.is_empty()) {
            let mut i = self.home(rehash(slot));
            while !self.slots[i].is_empty() {
                i = (i + 1) & mask;
            }
            self.slots[i] = *slot;
        }
    }

    /// The slots in use, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter(|s| !s.is_empty())
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
