//! Rows that are kept until the job ends, compressed when cold: what a regular join holds
//! of an append-only input without a state TTL (its rows are never retracted and never
//! expire, so every one stays: Nexmark q9 and q20 keep all their 9.2 M bids).
//!
//! Rows ([`super::row_codec`] bytes) get dense ids `0, 1, 2, ...` in arrival order and are
//! appended to blocks of about [`BLOCK_BYTES`] bytes. The newest [`HOT_BLOCKS`] sealed
//! blocks stay as they are; an older block is compressed with LZ4 (`lz4_flex`'s block
//! format) when it leaves them ("frozen"). In a stream ordered by event time the partners a
//! new row finds are mostly recent, so frozen rows are seldom read: a probe that reads one
//! decompresses its block for good ("thawed"), so rows that keep being read (a dimension
//! table's) cost one decompression, not one per read. A scan (a checkpoint's snapshot)
//! decompresses frozen blocks only for the call.
//!
//! Measured on Nexmark bids (rows of about 160 bytes, 64 KiB blocks): LZ4 holds them in
//! about 102 bytes (1.56x) and compresses at about 600 MB/s on this machine; a row costs 4
//! bytes of locator (its offset in its block) against 12 for a [`super::keyed::KeyRegistry`]
//! span. Rows are never removed: an input whose rows leave (a TTL, a retraction, an
//! interval join's watermark) keeps them in a `KeyRegistry`.

use std::cell::RefCell;
use std::collections::HashMap;

/// Raw bytes a block collects before it is sealed (a row larger than this is a block of
/// its own).
pub const BLOCK_BYTES: usize = 64 << 10;

/// Sealed blocks kept uncompressed behind the open one (16 × 64 KiB: the newest 1 MiB of
/// rows).
pub const HOT_BLOCKS: usize = 16;

/// One block of rows back to back.
enum Block {
    /// Uncompressed (the open block, a hot one, or a thawed one).
    Raw(Vec<u8>),
    /// LZ4-compressed (`lz4_flex::block`), `raw_len` bytes once decompressed.
    Frozen { lz4: Box<[u8]>, raw_len: usize },
}

impl Block {
    fn decompress(&self) -> Vec<u8> {
        match self {
            Block::Raw(bytes) => bytes.clone(),
            Block::Frozen { lz4, raw_len } => lz4_flex::block::decompress(lz4, *raw_len)
                .expect("a block this log compressed decompresses"),
        }
    }

    fn held_bytes(&self) -> usize {
        match self {
            Block::Raw(bytes) => bytes.capacity(),
            Block::Frozen { lz4, .. } => lz4.len(),
        }
    }
}

/// How a read uses frozen blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// A join's probe: the frozen blocks read are thawed for good.
    Probe,
    /// A scan of many rows (a snapshot): frozen blocks are decompressed for this read only.
    Scan,
}

/// Append-only rows with dense ids, cold blocks compressed (see the module docs).
#[derive(Default)]
pub struct RowLog {
    /// Per row id: where its bytes start in its block.
    starts: Vec<u32>,
    /// Per block: the id of its first row (ascending; a block holds at least one row).
    first_ids: Vec<u32>,
    /// The blocks; the last one is open. In a cell so that a probe (`&self`, while the
    /// join reads other state) can thaw the blocks it reads.
    blocks: RefCell<Vec<Block>>,
}

impl RowLog {
    /// No rows.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `row`; returns its id (the number of rows before it).
    ///
    /// # Panics
    /// At 2^32 rows (memory runs out long before).
    pub fn push(&mut self, row: &[u8]) -> u32 {
        let id = u32::try_from(self.starts.len()).expect("fewer than 2^32 rows");
        let blocks = self.blocks.get_mut();
        let open_len = match blocks.last() {
            Some(Block::Raw(open)) => Some(open.len()),
            _ => None,
        };
        match open_len {
            Some(len) if len == 0 || len + row.len() <= BLOCK_BYTES => {}
            _ => {
                blocks.push(Block::Raw(Vec::with_capacity(BLOCK_BYTES.max(row.len()))));
                self.first_ids.push(id);
                // The block that leaves the hot ones (the open block is not counted).
                if let Some(cold) = blocks.len().checked_sub(HOT_BLOCKS + 2) {
                    freeze(&mut blocks[cold]);
                }
            }
        }
        let Some(Block::Raw(open)) = blocks.last_mut() else {
            unreachable!("the last block is open");
        };
        self.starts.push(open.len() as u32);
        open.extend_from_slice(row);
        id
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The block of row `id`.
    fn block_of(&self, id: u32) -> usize {
        self.first_ids.partition_point(|&first| first <= id) - 1
    }

    /// Row `id`'s byte range in its block `b` of `len` raw bytes.
    fn range(&self, id: u32, b: usize, len: usize) -> std::ops::Range<usize> {
        let start = self.starts[id as usize] as usize;
        let next = id as usize + 1;
        let end = match self.first_ids.get(b + 1) {
            Some(&first) if next as u32 >= first => len,
            None if next >= self.starts.len() => len,
            _ => self.starts[next] as usize,
        };
        start..end
    }

    /// Calls `f` with the bytes of rows `ids` (each `< len()`), in that order. A
    /// [`Read::Probe`] thaws the frozen blocks it reads; a [`Read::Scan`] decompresses
    /// them for this call only.
    ///
    /// # Panics
    /// An id that was never given.
    pub fn with_rows<R>(
        &self,
        ids: &[u32],
        read: Read,
        f: impl FnOnce(&mut dyn Iterator<Item = &[u8]>) -> R,
    ) -> R {
        let mut scanned: HashMap<usize, Vec<u8>> = HashMap::new();
        {
            let mut blocks = self.blocks.borrow_mut();
            for &id in ids {
                let b = self.block_of(id);
                if matches!(blocks[b], Block::Frozen { .. }) {
                    match read {
                        Read::Probe => blocks[b] = Block::Raw(blocks[b].decompress()),
                        Read::Scan => {
                            scanned.entry(b).or_insert_with(|| blocks[b].decompress());
                        }
                    }
                }
            }
        }
        let blocks = self.blocks.borrow();
        let mut rows = ids.iter().map(|&id| {
            let b = self.block_of(id);
            let bytes: &[u8] = match &blocks[b] {
                Block::Raw(bytes) => bytes,
                Block::Frozen { .. } => &scanned[&b],
            };
            &bytes[self.range(id, b, bytes.len())]
        });
        f(&mut rows)
    }

    /// Bytes held: blocks (raw capacity or compressed), row offsets and block starts.
    pub fn bytes(&self) -> usize {
        let blocks: usize = self.blocks.borrow().iter().map(Block::held_bytes).sum();
        blocks + self.starts.capacity() * 4 + self.first_ids.capacity() * 4
    }

    /// Blocks compressed now (for tests and metrics).
    pub fn frozen_blocks(&self) -> usize {
        self.blocks
            .borrow()
            .iter()
            .filter(|b| matches!(b, Block::Frozen { .. }))
            .count()
    }
}

/// Compresses a raw block when that saves at least an eighth of it (rows that do not
/// compress stay raw, and are read without a copy).
fn freeze(block: &mut Block) {
    let Block::Raw(raw) = block else {
        return;
    };
    let lz4 = lz4_flex::block::compress(raw);
    if lz4.len() <= raw.len() - raw.len() / 8 {
        *block = Block::Frozen {
            lz4: lz4.into_boxed_slice(),
            raw_len: raw.len(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compressible row of `len` bytes numbered `i` (its number, then a repeated text).
    fn row(i: u32, len: usize) -> Vec<u8> {
        let mut r = i.to_le_bytes().to_vec();
        r.extend(
            b"https://www.nexmark.com/item.htm?query=1"
                .iter()
                .cycle()
                .take(len - 4),
        );
        r
    }

    fn read_all(log: &RowLog, ids: &[u32], read: Read) -> Vec<Vec<u8>> {
        log.with_rows(ids, read, |rows| rows.map(<[u8]>::to_vec).collect())
    }

    #[test]
    fn rows_read_back_from_hot_frozen_and_thawed_blocks() {
        let mut log = RowLog::new();
        // 100-byte rows: 655 to a block; 20,000 rows fill 31 blocks, 14 of them frozen.
        let n = 20_000u32;
        let lens = |i: u32| 60 + (i as usize * 7) % 80;
        for i in 0..n {
            assert_eq!(log.push(&row(i, lens(i))), i);
        }
        assert_eq!(log.len(), n as usize);
        let frozen = log.frozen_blocks();
        assert!(frozen > 0, "old blocks are compressed");
        let raw: usize = (0..n).map(lens).sum();
        assert!(log.bytes() < raw, "{} held for {raw} raw", log.bytes());
        // Every row, in an order that jumps between blocks, by a scan: nothing thaws.
        let ids: Vec<u32> = (0..n).rev().step_by(3).chain(0..n).collect();
        let expect: Vec<Vec<u8>> = ids.iter().map(|&i| row(i, lens(i))).collect();
        assert_eq!(read_all(&log, &ids, Read::Scan), expect);
        assert_eq!(log.frozen_blocks(), frozen);
        // A probe of the first row thaws its block only.
        assert_eq!(read_all(&log, &[0], Read::Probe), vec![row(0, lens(0))]);
        assert_eq!(log.frozen_blocks(), frozen - 1);
        assert_eq!(read_all(&log, &ids, Read::Probe), expect);
        assert_eq!(log.frozen_blocks(), 0);
    }

    #[test]
    fn a_row_larger_than_a_block_is_a_block_of_its_own_and_empty_rows_are_rows() {
        let mut log = RowLog::new();
        let big = row(1, BLOCK_BYTES * 3);
        let ids = [
            log.push(b"a"),
            log.push(&big),
            log.push(b""),
            log.push(b"bc"),
        ];
        assert_eq!(ids, [0, 1, 2, 3]);
        let got = read_all(&log, &ids, Read::Probe);
        assert_eq!(got, vec![b"a".to_vec(), big, Vec::new(), b"bc".to_vec()]);
    }

    #[test]
    fn incompressible_blocks_stay_raw() {
        let mut log = RowLog::new();
        // A xorshift stream: bytes LZ4 cannot shorten.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let rows: Vec<Vec<u8>> = (0..40_000)
            .map(|_| {
                (0..64)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect()
            })
            .collect();
        for r in &rows {
            log.push(r);
        }
        assert_eq!(log.frozen_blocks(), 0);
        let ids: Vec<u32> = (0..rows.len() as u32).collect();
        assert_eq!(read_all(&log, &ids, Read::Scan), rows);
    }
}
