//! Rows that are kept until the job ends, compressed when cold: what a regular join holds
//! of an append-only input without a state TTL (its rows are never retracted and never
//! expire, so every one stays: Nexmark q9 and q20 keep all their 9.2 M bids).
//!
//! Rows ([`super::row_codec`] bytes) get dense ids `0, 1, 2, ...` in arrival order and are
//! appended to blocks of about [`BLOCK_BYTES`] bytes. The newest [`HOT_BLOCKS`] sealed
//! blocks stay as they are; an older block is compressed when it leaves them ("frozen"):
//! with LZ4 (`lz4_flex`'s block format) when that saves at least a third, else with
//! zstd at level 1 when that saves an eighth, else not at all. LZ4 is fast and finds
//! repeats (URLs, names); zstd also entropy-codes bytes without repeats (random
//! letters), at under half LZ4's speed. Rows of one input are alike, so after LZ4 fell
//! short on a block the next [`LZ4_RETRY`] - 1 go straight to zstd. In a stream ordered by event time the partners a
//! new row finds are mostly recent, so frozen rows are seldom read: a probe that reads one
//! decompresses its block for good ("thawed"), so rows that keep being read (a dimension
//! table's) cost one decompression, not one per read. A scan (a checkpoint's snapshot)
//! decompresses frozen blocks only for the call. Each thread keeps its zstd contexts (a
//! new one per block allocated and zeroed hundreds of KiB each time): the compression
//! thread compresses, operator threads decompress.
//!
//! Compression runs off the operator's thread, on one process-wide background thread
//! (`sluice-compress`; RocksDB compresses in background compaction threads likewise): a
//! block leaving the hot ones is sent there as a copy, and stays readable raw until its
//! compressed form comes back, which the next [`RowLog::push`] puts in its place. A log's
//! blocks are compressed in order, so each log's codec choices are those of compressing
//! inline. At most [`COMPRESS_QUEUE`] blocks wait; a push that finds the queue full waits
//! for room (bounded memory).
//!
//! Measured on Nexmark bids (rows of about 160 bytes, 64 KiB blocks, this machine): LZ4
//! holds them in about 102 bytes (1.56x) at about 600 MB/s, zstd level 1 in 71 (2.24x) at
//! about 250-390 MB/s. q9's bids (no URL; 71 of their 88 bytes random letters) do not
//! shrink by an eighth under LZ4, by about a third under zstd. A row costs 4 bytes of
//! locator (its offset in its block) against 12 for a [`super::keyed::KeyRegistry`] span. Rows are never removed: an input whose rows leave (a TTL, a retraction, an
//! interval join's watermark) keeps them in a `KeyRegistry`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, LazyLock};

/// Raw bytes a block collects before it is sealed (a row larger than this is a block of
/// its own).
pub const BLOCK_BYTES: usize = 64 << 10;

/// Sealed blocks kept uncompressed behind the open one (16 × 64 KiB: the newest 1 MiB of
/// rows).
pub const HOT_BLOCKS: usize = 16;

/// After LZ4 fell short on a block, LZ4 is tried again on the block this many later.
pub const LZ4_RETRY: u32 = 32;

/// Blocks waiting for the background compression thread, over all logs.
pub const COMPRESS_QUEUE: usize = 16;

/// One block of rows back to back.
enum Block {
    /// Uncompressed (the open block, a hot one, or a thawed one).
    Raw(Vec<u8>),
    /// Compressed by `codec`, `raw_len` bytes once decompressed.
    Frozen {
        codec: Codec,
        bytes: Box<[u8]>,
        raw_len: usize,
    },
}

/// How a frozen block is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Codec {
    /// `lz4_flex::block`.
    Lz4,
    /// `zstd::bulk` at level 1.
    Zstd,
}

impl Block {
    fn decompress(&self) -> Vec<u8> {
        match self {
            Block::Raw(bytes) => bytes.clone(),
            Block::Frozen {
                codec: Codec::Lz4,
                bytes,
                raw_len,
            } => lz4_flex::block::decompress(bytes, *raw_len)
                .expect("a block this log compressed decompresses"),
            Block::Frozen {
                codec: Codec::Zstd,
                bytes,
                raw_len,
            } => ZSTD
                .with_borrow_mut(|(_, d)| d.decompress(bytes, *raw_len))
                .expect("a block this log compressed decompresses"),
        }
    }

    fn held_bytes(&self) -> usize {
        match self {
            Block::Raw(bytes) => bytes.capacity(),
            Block::Frozen { bytes, .. } => bytes.len(),
        }
    }
}

/// Frozen blocks a [`Read::Probe`] thaws for good at most; a probe that reads more (a
/// NULL key of a null-aware join reads every row) decompresses them for the call only.
pub const THAW_AT_MOST: usize = 4;

/// How a read uses frozen blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// A join's probe: the frozen blocks read are thawed for good (up to
    /// [`THAW_AT_MOST`] of them).
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
    /// Blocks still to freeze without trying LZ4 (see [`LZ4_RETRY`]); read and written
    /// by the compression thread only, in this log's block order.
    skip_lz4: Arc<AtomicU32>,
    /// Compressed blocks coming back from the compression thread (made at the first
    /// block sent).
    compressed: Option<(Sender<Compressed>, Receiver<Compressed>)>,
    /// Blocks sent and not yet back.
    pending: usize,
}

/// A block the compression thread compressed (`None`: it stays raw).
type Compressed = (usize, Option<Block>);

/// A block for the compression thread: its index in its log, a copy of its bytes, the
/// log's LZ4 state and where to send the result.
struct CompressJob {
    block: usize,
    raw: Vec<u8>,
    skip_lz4: Arc<AtomicU32>,
    reply: Sender<Compressed>,
}

/// Blocks to freeze without trying LZ4 after one frozen with `skip` of them left (LZ4
/// tried when 0; `lz4_fell_short` as [`freeze`] returns it).
fn next_skip(skip: u32, lz4_fell_short: bool) -> u32 {
    match (skip == 0, lz4_fell_short) {
        (true, true) => LZ4_RETRY - 1,
        (true, false) => 0,
        (false, _) => skip - 1,
    }
}

/// The compression thread's queue (started at the first block to compress).
/// `None` when the thread could not be started: blocks are then compressed inline.
static COMPRESSOR: LazyLock<Option<SyncSender<CompressJob>>> = LazyLock::new(|| {
    let (jobs, queue) = sync_channel::<CompressJob>(COMPRESS_QUEUE);
    std::thread::Builder::new()
        .name("sluice-compress".into())
        .spawn(move || {
            for job in queue {
                let mut block = Block::Raw(job.raw);
                let skip = job.skip_lz4.load(Ordering::Relaxed);
                let lz4_fell_short = freeze(&mut block, skip == 0);
                job.skip_lz4
                    .store(next_skip(skip, lz4_fell_short), Ordering::Relaxed);
                let frozen = matches!(block, Block::Frozen { .. }).then_some(block);
                // A log dropped meanwhile no longer listens.
                let _ = job.reply.send((job.block, frozen));
            }
        })
        .ok()?;
    Some(jobs)
});

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
        if !matches!(open_len, Some(len) if len == 0 || len + row.len() <= BLOCK_BYTES) {
            blocks.push(Block::Raw(Vec::with_capacity(BLOCK_BYTES.max(row.len()))));
            self.first_ids.push(id);
            // The block that leaves the hot ones (the open block is not counted).
            let cold = blocks
                .len()
                .checked_sub(HOT_BLOCKS + 2)
                .and_then(|b| match &blocks[b] {
                    Block::Raw(raw) => Some((b, raw.clone())),
                    Block::Frozen { .. } => None,
                });
            if let Some((b, raw)) = cold {
                self.compress(b, raw);
            }
            self.take_compressed(false);
        }
        let blocks = self.blocks.get_mut();
        let Some(Block::Raw(open)) = blocks.last_mut() else {
            unreachable!("the last block is open");
        };
        self.starts.push(open.len() as u32);
        open.extend_from_slice(row);
        id
    }

    /// Sends block `block` (its bytes `raw`) to the compression thread.
    fn compress(&mut self, block: usize, raw: Vec<u8>) {
        let reply = self.compressed.get_or_insert_with(channel).0.clone();
        let job = CompressJob {
            block,
            raw,
            skip_lz4: Arc::clone(&self.skip_lz4),
            reply,
        };
        let Some(jobs) = COMPRESSOR.as_ref() else {
            // No compression thread: compressed here, in order as there.
            let mut frozen = Block::Raw(job.raw);
            let skip = self.skip_lz4.load(Ordering::Relaxed);
            let lz4_fell_short = freeze(&mut frozen, skip == 0);
            self.skip_lz4
                .store(next_skip(skip, lz4_fell_short), Ordering::Relaxed);
            if matches!(frozen, Block::Frozen { .. }) {
                self.blocks.get_mut()[block] = frozen;
            }
            return;
        };
        // The thread lives as long as the process; should it be gone, the block stays raw.
        if jobs.send(job).is_ok() {
            self.pending += 1;
        }
    }

    /// Puts the compressed blocks that came back in place of their raw ones; with `wait`,
    /// first waits for every block sent.
    fn take_compressed(&mut self, wait: bool) {
        let Some((_, results)) = &self.compressed else {
            return;
        };
        let blocks = self.blocks.get_mut();
        loop {
            let next = if wait && self.pending > 0 {
                results.recv().ok()
            } else {
                results.try_recv().ok()
            };
            let Some((b, frozen)) = next else {
                break;
            };
            self.pending -= 1;
            // A block is raw until its compressed form arrives (a thaw only turns a
            // frozen block raw), so the bytes are the same.
            if let Some(frozen) = frozen {
                blocks[b] = frozen;
            }
        }
    }

    /// Waits until every block sent to the compression thread is back in place (tests,
    /// metrics that count frozen blocks).
    pub fn settle(&mut self) {
        self.take_compressed(true);
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
    /// [`Read::Probe`] thaws the frozen blocks it reads (when they are at most
    /// [`THAW_AT_MOST`]); a [`Read::Scan`] decompresses them for this call only.
    ///
    /// # Panics
    /// An id that was never given, or a call from within `f` (the blocks are borrowed).
    pub fn with_rows<R>(
        &self,
        ids: &[u32],
        read: Read,
        f: impl FnOnce(&mut dyn Iterator<Item = &[u8]>) -> R,
    ) -> R {
        let block_of: Vec<usize> = ids.iter().map(|&id| self.block_of(id)).collect();
        let mut scanned: HashMap<usize, Vec<u8>> = HashMap::new();
        {
            let mut blocks = self.blocks.borrow_mut();
            for &b in &block_of {
                if matches!(blocks[b], Block::Frozen { .. }) {
                    scanned.entry(b).or_insert_with(|| blocks[b].decompress());
                }
            }
            if read == Read::Probe && scanned.len() <= THAW_AT_MOST {
                for (b, raw) in scanned.drain() {
                    blocks[b] = Block::Raw(raw);
                }
            }
        }
        let blocks = self.blocks.borrow();
        let mut rows = ids.iter().zip(&block_of).map(|(&id, &b)| {
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

    /// Blocks compressed, once every block sent to be compressed is back (for tests and
    /// metrics).
    pub fn frozen_blocks(&mut self) -> usize {
        self.settle();
        self.blocks
            .borrow()
            .iter()
            .filter(|b| matches!(b, Block::Frozen { .. }))
            .count()
    }
}

thread_local! {
    /// This thread's zstd contexts (level 1), kept: a context per call allocated and
    /// zeroed hundreds of KiB for every 64 KiB block (11% of Nexmark q7's time).
    static ZSTD: RefCell<(zstd::bulk::Compressor<'static>, zstd::bulk::Decompressor<'static>)> =
        RefCell::new((
            zstd::bulk::Compressor::new(1).expect("zstd level 1 exists"),
            zstd::bulk::Decompressor::new().expect("a zstd decompression context"),
        ));
}

/// Compresses a raw block as the module docs say (rows that do not compress stay raw,
/// and are read without a copy); LZ4 only when `try_lz4`. Returns whether LZ4 was tried
/// and fell short.
fn freeze(block: &mut Block, try_lz4: bool) -> bool {
    let Block::Raw(raw) = block else {
        return false;
    };
    let n = raw.len();
    let lz4 = try_lz4.then(|| lz4_flex::block::compress(raw));
    let (codec, bytes) = match lz4 {
        Some(lz4) if lz4.len() <= n - n / 3 => (Codec::Lz4, lz4),
        _ => match ZSTD.with_borrow_mut(|(c, _)| c.compress(raw)) {
            Ok(z) if z.len() <= n - n / 8 => (Codec::Zstd, z),
            _ => return try_lz4,
        },
    };
    *block = Block::Frozen {
        codec,
        bytes: bytes.into_boxed_slice(),
        raw_len: n,
    };
    try_lz4 && codec == Codec::Zstd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::xorshift;

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
        // A probe of every row reads more than THAW_AT_MOST frozen blocks: none thaws.
        assert_eq!(read_all(&log, &ids, Read::Probe), expect);
        assert_eq!(log.frozen_blocks(), frozen - 1);
        // One of a few blocks' rows each: all thaw.
        let few: Vec<u32> = (0..THAW_AT_MOST as u32).map(|b| 1_000 + b * 700).collect();
        let want: Vec<Vec<u8>> = few.iter().map(|&i| row(i, lens(i))).collect();
        assert_eq!(read_all(&log, &few, Read::Probe), want);
        assert_eq!(log.frozen_blocks(), frozen - 1 - THAW_AT_MOST);
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

    /// The codec of each frozen block.
    fn codecs(log: &mut RowLog) -> Vec<Codec> {
        ratios(log).into_iter().map(|(c, _)| c).collect()
    }

    /// The codec and compressed / raw bytes of each frozen block.
    fn ratios(log: &mut RowLog) -> Vec<(Codec, f64)> {
        log.settle();
        let blocks = log.blocks.borrow();
        blocks
            .iter()
            .filter_map(|b| match b {
                Block::Frozen {
                    codec,
                    bytes,
                    raw_len,
                } => Some((*codec, bytes.len() as f64 / *raw_len as f64)),
                Block::Raw(_) => None,
            })
            .collect()
    }

    #[test]
    fn repeats_freeze_with_lz4_and_random_letters_with_zstd() {
        let mut log = RowLog::new();
        for i in 0..20_000 {
            log.push(&row(i, 100));
        }
        let lz4 = codecs(&mut log);
        assert!(
            !lz4.is_empty() && lz4.iter().all(|&c| c == Codec::Lz4),
            "{lz4:?}"
        );
        // Random lowercase letters: no repeats for LZ4, 4.7 bits of 8 for an entropy coder.
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        let rows: Vec<Vec<u8>> = (0..20_000)
            .map(|_| (0..100).map(|_| b'a' + (next() % 26) as u8).collect())
            .collect();
        let mut log = RowLog::new();
        for r in &rows {
            log.push(r);
        }
        let zstd = codecs(&mut log);
        assert!(
            !zstd.is_empty() && zstd.iter().all(|&c| c == Codec::Zstd),
            "{zstd:?}"
        );
        // log2(26) = 4.7 bits of 8 (0.59), plus zstd's tables.
        let r = ratios(&mut log);
        assert!(r.iter().all(|&(_, r)| r < 0.65), "{r:?}");
        let ids: Vec<u32> = (0..rows.len() as u32).collect();
        assert_eq!(read_all(&log, &ids, Read::Scan), rows);
        assert_eq!(read_all(&log, &ids, Read::Probe), rows);
        assert_eq!(codecs(&mut log), zstd, "a probe of every block thaws none");
    }

    /// After LZ4 fell short, blocks go to zstd until LZ4 is tried again `LZ4_RETRY`
    /// blocks later, and is kept when it works again.
    #[test]
    fn lz4_is_tried_again_after_rows_change() {
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        let mut log = RowLog::new();
        for _ in 0..20_000 {
            let r: Vec<u8> = (0..100).map(|_| b'a' + (next() % 26) as u8).collect();
            log.push(&r);
        }
        for i in 0..60_000 {
            log.push(&row(i, 100));
        }
        let c = codecs(&mut log);
        let first_lz4 = c.iter().position(|&c| c == Codec::Lz4).expect("LZ4 again");
        assert!(first_lz4 > 0 && c[..first_lz4].iter().all(|&c| c == Codec::Zstd));
        assert!(c[first_lz4..].iter().all(|&c| c == Codec::Lz4), "{c:?}");
    }

    #[test]
    fn incompressible_blocks_stay_raw() {
        let mut log = RowLog::new();
        // Random bytes: neither codec shortens them.
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        let rows: Vec<Vec<u8>> = (0..40_000)
            .map(|_| (0..64).map(|_| next() as u8).collect())
            .collect();
        for r in &rows {
            log.push(r);
        }
        assert_eq!(log.frozen_blocks(), 0);
        let ids: Vec<u32> = (0..rows.len() as u32).collect();
        assert_eq!(read_all(&log, &ids, Read::Scan), rows);
    }
}
