//! The read cache's core, sans-I/O: blocks of chunk files kept in memory,
//! bounded in bytes, evicted least recently used, with the rule that keeps
//! it from ever serving bytes older than the chunk file.
//!
//! The appliance reads chunk files with O_DIRECT, so the kernel's page
//! cache holds none of them: without this every client read is a device
//! read. Blocks are `BLOCK` bytes of one chunk file (`file`, chunk index,
//! block index); a block shorter than `BLOCK` ends the file (the rest
//! reads as zeros, as a short chunk file does).
//!
//! **Staleness.** The destager changes chunk files while reads are in
//! flight. Every change of a file's chunks calls [`ReadCache::forget_file`]
//! before it starts and again after it ends; each forget moves a global
//! generation on and records it for the file. A read takes
//! [`ReadCache::begin`] before it reads the device and passes that ticket
//! to [`ReadCache::insert`], which keeps the block only if the file was not
//! forgotten since: a read that raced a change never plants what it saw.
//! The per-file generations are bounded (`MAX_TRACKED` files): past it
//! they are dropped and the floor rises to the current generation, which
//! treats every untracked file as just forgotten (conservative).
//!
//! Architecture Invariant: no I/O here; the appliance reads the files and
//! hands this the bytes.
//!
//! **Sequential readers.** [`ReadCache::read_ahead`] says how far past a
//! read the appliance should read while it is at it: when a read of a
//! file starts where the previous read of that file ended, up to
//! `READ_AHEAD` more bytes (within the chunk), so a streaming reader's
//! next requests find their blocks in memory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Bytes per cached block.
pub const BLOCK: u64 = 64 * 1024;
/// How far past a sequential read to read ahead.
pub const READ_AHEAD: u64 = 1024 * 1024;
/// Files whose last forget generation is remembered.
const MAX_TRACKED: usize = 65_536;
/// Files whose read position is remembered for read-ahead.
const MAX_STREAMS: usize = 4096;

/// A block's key: (file id, chunk index, block index within the chunk).
pub type Key = (u64, u64, u64);

/// What a read was issued under (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct Ticket(u64);

struct Entry {
    data: Arc<[u8]>,
    used: u64,
}

/// Counters for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub inserted: u64,
    pub evicted: u64,
    pub refused_stale: u64,
    pub bytes: u64,
}

pub struct ReadCache {
    capacity: u64,
    bytes: u64,
    blocks: BTreeMap<Key, Entry>,
    /// Use stamp -> key, for eviction.
    lru: BTreeMap<u64, Key>,
    tick: u64,
    generation: u64,
    forgotten: HashMap<u64, u64>,
    /// (file, chunk) -> the generation of its last [`ReadCache::forget_chunk`].
    forgotten_chunks: HashMap<(u64, u64), u64>,
    floor: u64,
    /// file -> where its last read ended.
    streams: HashMap<u64, u64>,
    /// Blocks a device read is fetching now (read-ahead stops at them).
    in_flight: HashSet<Key>,
    stats: ReadCacheStats,
}

impl ReadCache {
    /// A cache of at most `capacity` bytes of block data (0: keeps nothing).
    pub fn new(capacity: u64) -> ReadCache {
        ReadCache {
            capacity,
            bytes: 0,
            blocks: BTreeMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            generation: 0,
            forgotten: HashMap::new(),
            forgotten_chunks: HashMap::new(),
            floor: 0,
            streams: HashMap::new(),
            in_flight: HashSet::new(),
            stats: ReadCacheStats::default(),
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn stats(&self) -> ReadCacheStats {
        ReadCacheStats { bytes: self.bytes, ..self.stats }
    }

    /// The block, if cached (counts a hit or a miss).
    pub fn get(&mut self, key: Key) -> Option<Arc<[u8]>> {
        if self.capacity == 0 {
            return None;
        }
        self.tick += 1;
        let tick = self.tick;
        match self.blocks.get_mut(&key) {
            Some(e) => {
                self.lru.remove(&e.used);
                e.used = tick;
                self.lru.insert(tick, key);
                self.stats.hits += 1;
                Some(e.data.clone())
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// The block, if cached, without counting a hit or a miss or marking
    /// it used (the destager takes a block it is about to change as the
    /// base of the block's new bytes).
    pub fn peek(&self, key: Key) -> Option<Arc<[u8]>> {
        if self.capacity == 0 {
            return None;
        }
        self.blocks.get(&key).map(|e| e.data.clone())
    }

    /// Whether the block is cached (counts nothing, uses nothing: a
    /// caller that only takes a read whose every block is here asks this
    /// first, then [`Self::get`]s them).
    pub fn has(&self, key: Key) -> bool {
        self.capacity > 0 && self.blocks.contains_key(&key)
    }

    /// Taken before reading the device for blocks to insert.
    pub fn begin(&self) -> Ticket {
        Ticket(self.generation)
    }

    fn forgotten_at(&self, file: u64) -> u64 {
        self.forgotten.get(&file).copied().unwrap_or(self.floor)
    }

    /// Whether something read or opened under `ticket` for `file` may be
    /// kept: the file's chunks were not forgotten since.
    pub fn still_valid(&self, ticket: Ticket, file: u64) -> bool {
        self.forgotten_at(file) <= ticket.0 && self.floor <= ticket.0
    }

    /// Whether something read or opened under `ticket` for chunk `idx` of
    /// `file` may be kept: neither the file nor that chunk was forgotten
    /// since.
    pub fn still_valid_chunk(&self, ticket: Ticket, file: u64, idx: u64) -> bool {
        self.still_valid(ticket, file) && self.forgotten_chunks.get(&(file, idx)).is_none_or(|&g| g <= ticket.0)
    }

    /// Keeps a block read under `ticket`, unless its file's chunks were
    /// forgotten since (the bytes may predate a change) or it is larger
    /// than a block. Evicts least recently used blocks to stay in bounds.
    pub fn insert(&mut self, ticket: Ticket, key: Key, data: &[u8]) {
        if self.capacity == 0 || data.len() as u64 > BLOCK || data.len() as u64 > self.capacity {
            return;
        }
        if !self.still_valid_chunk(ticket, key.0, key.1) {
            self.stats.refused_stale += 1;
            return;
        }
        self.remove(key);
        while self.bytes + data.len() as u64 > self.capacity {
            let Some((_, victim)) = self.lru.pop_first() else { break };
            if let Some(e) = self.blocks.remove(&victim) {
                self.bytes -= e.data.len() as u64;
                self.stats.evicted += 1;
            }
        }
        self.tick += 1;
        self.lru.insert(self.tick, key);
        self.blocks.insert(key, Entry { data: Arc::from(data), used: self.tick });
        self.bytes += data.len() as u64;
        self.stats.inserted += 1;
        assert!(self.bytes <= self.capacity, "read cache over its bound: {} > {}", self.bytes, self.capacity);
    }

    fn remove(&mut self, key: Key) {
        if let Some(e) = self.blocks.remove(&key) {
            self.lru.remove(&e.used);
            self.bytes -= e.data.len() as u64;
        }
    }

    /// Drops every block of chunk `idx` of `file` and refuses inserts of
    /// its blocks read before now: [`ReadCache::forget_file`] for a change
    /// known to touch that chunk only (the file's other chunks stay).
    pub fn forget_chunk(&mut self, file: u64, idx: u64) {
        self.forget_blocks(file, idx, 0, u64::MAX);
    }

    /// [`ReadCache::forget_chunk`] for a change of blocks `first..=last`
    /// of the chunk only: every read of the chunk begun before now is
    /// refused as before, but its cached blocks outside the range stay
    /// (the change leaves their bytes as they are).
    pub fn forget_blocks(&mut self, file: u64, idx: u64, first: u64, last: u64) {
        self.fence_chunk(file, idx);
        let keys: Vec<Key> = self.blocks.range((file, idx, first)..=(file, idx, last)).map(|(k, _)| *k).collect();
        for k in keys {
            self.remove(k);
        }
    }

    /// Refuses inserts of chunk `idx` of `file` read before now, and keeps
    /// its cached blocks: the destager calls it before a record changes
    /// bytes of the chunk in place. A block kept is the chunk as it was
    /// before, which a read still lays the queued record over until the
    /// record is destaged, and [`ReadCache::forget_blocks`] after the
    /// chunk's sync (before the record leaves the queue) drops it.
    pub fn fence_chunk(&mut self, file: u64, idx: u64) {
        self.generation += 1;
        if self.forgotten_chunks.len() >= MAX_TRACKED && !self.forgotten_chunks.contains_key(&(file, idx)) {
            self.forgotten_chunks.clear();
            self.forgotten.clear();
            self.floor = self.generation;
        }
        self.forgotten_chunks.insert((file, idx), self.generation);
    }

    /// Drops every block of `file` and refuses inserts of blocks read
    /// before now. Call before and after any change of the file's chunks.
    pub fn forget_file(&mut self, file: u64) {
        self.generation += 1;
        if self.forgotten.len() >= MAX_TRACKED && !self.forgotten.contains_key(&file) {
            self.forgotten.clear();
            self.forgotten_chunks.clear();
            self.floor = self.generation;
        }
        self.forgotten.insert(file, self.generation);
        let keys: Vec<Key> = self.blocks.range((file, 0, 0)..=(file, u64::MAX, u64::MAX)).map(|(k, _)| *k).collect();
        for k in keys {
            self.remove(k);
        }
    }

    /// Where a read of blocks `..=last` of chunk `idx` of `file` should end
    /// its read-ahead, given `ahead` bytes wanted and `chunk_blocks` blocks
    /// in a chunk: the block after the last one to read. Read-ahead stops
    /// before the first block that is cached or that another read is
    /// fetching, so concurrent sequential readers (an NFS client's
    /// parallel READs) do not read the same blocks twice.
    pub fn ahead_end(&self, file: u64, idx: u64, last: u64, ahead: u64, chunk_blocks: u64) -> u64 {
        let want = (last + 1 + ahead.div_ceil(BLOCK)).min(chunk_blocks);
        let mut end = last + 1;
        while end < want && !self.blocks.contains_key(&(file, idx, end)) && !self.in_flight.contains(&(file, idx, end)) {
            end += 1;
        }
        end
    }

    /// Marks blocks `[from, to)` of chunk `idx` of `file` as being read.
    pub fn start_reading(&mut self, file: u64, idx: u64, from: u64, to: u64) {
        for b in from..to {
            self.in_flight.insert((file, idx, b));
        }
    }

    /// The read of blocks `[from, to)` ended (done or failed).
    pub fn done_reading(&mut self, file: u64, idx: u64, from: u64, to: u64) {
        for b in from..to {
            self.in_flight.remove(&(file, idx, b));
        }
    }

    /// A read of `[offset, offset + len)` of `file`: how many bytes past
    /// its end to read as well (0 unless it continues the previous read of
    /// the file). Remembers where it ends.
    pub fn read_ahead(&mut self, file: u64, offset: u64, len: u64) -> u64 {
        if self.capacity == 0 {
            return 0;
        }
        let sequential = self.streams.get(&file) == Some(&offset) && offset > 0;
        if self.streams.len() >= MAX_STREAMS && !self.streams.contains_key(&file) {
            self.streams.clear();
        }
        self.streams.insert(file, offset.saturating_add(len));
        if sequential {
            READ_AHEAD.min(self.capacity / 4)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_after_insert_and_bounded_by_lru() {
        let mut c = ReadCache::new(3 * BLOCK);
        let b = vec![7u8; BLOCK as usize];
        for i in 0..3 {
            let t = c.begin();
            c.insert(t, (1, 0, i), &b);
        }
        assert!(c.get((1, 0, 0)).is_some()); // 0 is now the newest
        let t = c.begin();
        c.insert(t, (1, 0, 3), &b); // evicts 1, the least recently used
        assert!(c.get((1, 0, 1)).is_none());
        assert!(c.get((1, 0, 0)).is_some());
        assert!(c.get((1, 0, 3)).is_some());
        assert_eq!(c.stats().bytes, 3 * BLOCK);
        assert_eq!(c.stats().evicted, 1);
    }

    #[test]
    fn forgetting_a_chunk_keeps_the_files_other_chunks() {
        let mut c = ReadCache::new(16 * BLOCK);
        let t = c.begin();
        c.insert(t, (5, 0, 0), b"zero");
        c.insert(t, (5, 1, 0), b"one");
        c.forget_chunk(5, 1);
        assert!(c.get((5, 0, 0)).is_some(), "chunk 0 went with chunk 1");
        assert!(c.get((5, 1, 0)).is_none());
        // A read of chunk 1 begun before the forget is not kept; one of
        // chunk 0 is, and so is one of chunk 1 begun after.
        c.insert(t, (5, 1, 1), b"old");
        assert!(c.get((5, 1, 1)).is_none(), "bytes of chunk 1 read before its change were kept");
        c.insert(t, (5, 0, 1), b"fine");
        assert!(c.get((5, 0, 1)).is_some());
        assert!(!c.still_valid_chunk(t, 5, 1) && c.still_valid_chunk(t, 5, 0));
        let t2 = c.begin();
        c.insert(t2, (5, 1, 1), b"new");
        assert!(c.get((5, 1, 1)).is_some());
        // Forgetting some blocks keeps the chunk's others.
        let t3 = c.begin();
        c.insert(t3, (5, 1, 2), b"two");
        c.forget_blocks(5, 1, 2, 3);
        assert!(c.get((5, 1, 1)).is_some() && c.get((5, 1, 2)).is_none());
        c.insert(t3, (5, 1, 9), b"late");
        assert!(c.get((5, 1, 9)).is_none(), "a read of the chunk begun before was kept");
        // A whole-file forget still drops every chunk.
        c.forget_file(5);
        assert!(c.get((5, 0, 0)).is_none() && c.get((5, 1, 1)).is_none());
    }

    #[test]
    fn a_read_that_raced_a_change_is_not_kept() {
        let mut c = ReadCache::new(16 * BLOCK);
        let t = c.begin();
        c.forget_file(5); // the destager starts changing file 5
        c.insert(t, (5, 0, 0), b"old");
        assert!(c.get((5, 0, 0)).is_none(), "bytes read before the change were kept");
        // Other files are not affected.
        c.insert(t, (6, 0, 0), b"other");
        assert_eq!(&*c.get((6, 0, 0)).unwrap(), b"other");
        // A read begun after the change ended is kept.
        c.forget_file(5);
        let t2 = c.begin();
        c.insert(t2, (5, 0, 0), b"new");
        assert_eq!(&*c.get((5, 0, 0)).unwrap(), b"new");
        // Forgetting drops what is cached.
        c.forget_file(5);
        assert!(c.get((5, 0, 0)).is_none());
        assert_eq!(&*c.get((6, 0, 0)).unwrap(), b"other");
    }

    #[test]
    fn a_fenced_chunk_keeps_its_blocks_and_refuses_older_reads() {
        let mut c = ReadCache::new(1 << 20);
        let t = c.begin();
        c.insert(t, (1, 0, 0), &[1u8; 100]);
        let before = c.begin();
        c.fence_chunk(1, 0);
        assert!(c.get((1, 0, 0)).is_some(), "a fence drops nothing");
        c.insert(before, (1, 0, 1), &[2u8; 100]);
        assert!(c.get((1, 0, 1)).is_none(), "a read begun before the fence was kept");
        c.insert(c.begin(), (1, 0, 1), &[3u8; 100]);
        assert_eq!(c.peek((1, 0, 1)).as_deref(), Some(&[3u8; 100][..]));
        c.forget_blocks(1, 0, 0, 0);
        assert!(c.peek((1, 0, 0)).is_none() && c.peek((1, 0, 1)).is_some());
    }

    #[test]
    fn untracked_files_count_as_just_forgotten() {
        let mut c = ReadCache::new(16 * BLOCK);
        let t = c.begin();
        for f in 0..MAX_TRACKED as u64 + 1 {
            c.forget_file(1000 + f);
        }
        // File 7 was never forgotten, but its generation was dropped with
        // the table: a read begun before must not be kept.
        c.insert(t, (7, 0, 0), b"x");
        assert!(c.get((7, 0, 0)).is_none());
        let t = c.begin();
        c.insert(t, (7, 0, 0), b"x");
        assert!(c.get((7, 0, 0)).is_some());
    }

    #[test]
    fn zero_capacity_keeps_nothing_and_reads_ahead_only_sequentially() {
        let mut c = ReadCache::new(0);
        let t = c.begin();
        c.insert(t, (1, 0, 0), b"x");
        assert!(c.get((1, 0, 0)).is_none());
        assert_eq!(c.read_ahead(1, 0, 100), 0);
        let mut c = ReadCache::new(64 * BLOCK);
        assert_eq!(c.read_ahead(1, 0, 65536), 0);
        assert_eq!(c.read_ahead(1, 65536, 65536), READ_AHEAD);
        assert_eq!(c.read_ahead(1, 0, 65536), 0); // a jump back
        assert_eq!(c.read_ahead(2, 65536, 1), 0); // another file's first read
    }

    #[test]
    fn read_ahead_stops_at_cached_and_in_flight_blocks() {
        let mut c = ReadCache::new(64 * BLOCK);
        // 64 blocks a chunk; a read of block 3 wanting 4 blocks ahead.
        assert_eq!(c.ahead_end(1, 0, 3, 4 * BLOCK, 64), 8);
        // Another read is fetching blocks 6..10: ahead stops at 6.
        c.start_reading(1, 0, 6, 10);
        assert_eq!(c.ahead_end(1, 0, 3, 4 * BLOCK, 64), 6);
        c.done_reading(1, 0, 6, 10);
        let t = c.begin();
        c.insert(t, (1, 0, 5), b"x");
        assert_eq!(c.ahead_end(1, 0, 3, 4 * BLOCK, 64), 5);
        // Never past the chunk's end; nothing ahead: just the block after.
        assert_eq!(c.ahead_end(1, 0, 62, 4 * BLOCK, 64), 64);
        assert_eq!(c.ahead_end(2, 0, 3, 0, 64), 4);
    }

    #[test]
    fn oversized_blocks_are_refused() {
        let mut c = ReadCache::new(16 * BLOCK);
        let t = c.begin();
        c.insert(t, (1, 0, 0), &vec![0u8; BLOCK as usize + 1]);
        assert!(c.get((1, 0, 0)).is_none());
        assert_eq!(c.stats().bytes, 0);
    }
}
