//! The newest write-log extents in memory, sans-I/O: what a client just
//! wrote reads from memory until the destager has moved it into the chunk
//! files (whose blocks it then keeps in the read cache, `read.rs`), as a
//! page cache would serve it, and the destager itself reads the extents it
//! moves from here instead of the device.
//!
//! Bounded in bytes; when full, the oldest extents go first (the destager
//! moves extents in the order they were written, so the oldest are the
//! nearest to leaving anyway). An extent is only ever the bytes its log
//! record holds: it is inserted once its record is written and durable,
//! and dropped when the log forgets it. The caller asks the log whether it
//! still holds an extent before it trusts a copy from here.
//!
//! Architecture Invariant: no I/O here; the appliance hands this the bytes
//! it appended.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// An extent's name: (origin node, sequence).
pub type Name = (u64, u64);

/// Counters for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogMemStats {
    pub hits: u64,
    pub misses: u64,
    pub bytes: u64,
}

pub struct LogMem {
    capacity: u64,
    bytes: u64,
    /// Name -> (insertion stamp, bytes).
    extents: HashMap<Name, (u64, Arc<Vec<u8>>)>,
    /// Insertion stamp -> name, oldest first.
    order: BTreeMap<u64, Name>,
    stamp: u64,
    stats: LogMemStats,
}

impl LogMem {
    /// At most `capacity` bytes of extent data (0: keeps nothing).
    pub fn new(capacity: u64) -> LogMem {
        LogMem { capacity, bytes: 0, extents: HashMap::new(), order: BTreeMap::new(), stamp: 0, stats: LogMemStats::default() }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn stats(&self) -> LogMemStats {
        LogMemStats { bytes: self.bytes, ..self.stats }
    }

    /// Keeps `data` as extent `name`'s bytes, evicting the oldest extents
    /// to stay in bounds; an extent larger than the whole bound is not
    /// kept. A name already held keeps its first bytes (a log never holds
    /// two records of one name).
    pub fn insert(&mut self, name: Name, data: &[u8]) {
        if self.wants(name, data.len() as u64) {
            self.insert_vec(name, data.to_vec());
        }
    }

    /// Whether [`LogMem::insert`] would keep `len` bytes as `name`.
    fn wants(&self, name: Name, len: u64) -> bool {
        len != 0 && len <= self.capacity && !self.extents.contains_key(&name)
    }

    /// [`LogMem::insert`] of bytes the caller gives up: kept without a
    /// copy (the write path hands over a client's write buffer once its
    /// record is durable).
    pub fn insert_vec(&mut self, name: Name, data: Vec<u8>) {
        let len = data.len() as u64;
        if len == 0 || len > self.capacity || self.extents.contains_key(&name) {
            return;
        }
        while self.bytes + len > self.capacity {
            let Some((_, old)) = self.order.pop_first() else { break };
            if let Some((_, d)) = self.extents.remove(&old) {
                self.bytes -= d.len() as u64;
            }
        }
        self.stamp += 1;
        self.order.insert(self.stamp, name);
        self.extents.insert(name, (self.stamp, Arc::new(data)));
        self.bytes += len;
        assert!(self.bytes <= self.capacity, "write-log memory over its bound: {} > {}", self.bytes, self.capacity);
    }

    /// `n` bytes at `skip` of extent `name` (fewer at its end), if held;
    /// counts a hit or a miss.
    pub fn read(&mut self, name: Name, skip: u64, n: u64) -> Option<Vec<u8>> {
        self.read_shared(name, skip, n).map(|(d, r)| d[r].to_vec())
    }

    /// [`LogMem::read`] without a copy: the extent's bytes, shared, and
    /// the range of them asked for. They stay valid however long the
    /// caller holds them (an eviction only drops this map's reference; the
    /// bound counts what the map holds).
    pub fn read_shared(&mut self, name: Name, skip: u64, n: u64) -> Option<(Arc<Vec<u8>>, std::ops::Range<usize>)> {
        if self.capacity == 0 {
            return None;
        }
        match self.extents.get(&name) {
            Some((_, d)) => {
                self.stats.hits += 1;
                let len = d.len() as u64;
                let from = skip.min(len);
                let to = skip.saturating_add(n).min(len);
                Some((d.clone(), from as usize..to as usize))
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Drops extent `name` (destaged, or its batch failed).
    pub fn remove(&mut self, name: Name) {
        if let Some((stamp, d)) = self.extents.remove(&name) {
            self.order.remove(&stamp);
            self.bytes -= d.len() as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_was_inserted_until_removed() {
        let mut m = LogMem::new(1000);
        m.insert((1, 1), &[7u8; 100]);
        assert_eq!(m.read((1, 1), 10, 5), Some(vec![7u8; 5]));
        assert_eq!(m.read((1, 1), 95, 50), Some(vec![7u8; 5]), "a read past the end is cut");
        assert_eq!(m.read((1, 1), 200, 5), Some(vec![]));
        m.remove((1, 1));
        assert_eq!(m.read((1, 1), 0, 5), None);
        assert_eq!(m.stats(), LogMemStats { hits: 3, misses: 1, bytes: 0 });
    }

    #[test]
    fn the_oldest_go_first_and_the_bound_holds() {
        let mut m = LogMem::new(250);
        for s in 1..=3 {
            m.insert((1, s), &[s as u8; 100]);
        }
        assert_eq!(m.read((1, 1), 0, 1), None, "the oldest was evicted");
        assert_eq!(m.read((1, 2), 0, 1), Some(vec![2]));
        assert_eq!(m.read((1, 3), 0, 1), Some(vec![3]));
        assert!(m.stats().bytes <= 250);
        m.insert((2, 9), &[9u8; 300]);
        assert_eq!(m.read((2, 9), 0, 1), None, "larger than the bound: not kept");
        m.insert((1, 2), &[0u8; 10]);
        assert_eq!(m.read((1, 2), 0, 1), Some(vec![2]), "a name keeps its first bytes");
    }

    #[test]
    fn shared_reads_outlive_an_eviction() {
        let mut m = LogMem::new(150);
        m.insert_vec((1, 1), (0..100u8).collect());
        let (d, r) = m.read_shared((1, 1), 10, 5).unwrap();
        assert_eq!(&d[r], &[10, 11, 12, 13, 14]);
        let (d, r) = m.read_shared((1, 1), 95, 50).unwrap();
        m.insert_vec((1, 2), vec![2u8; 100]);
        assert_eq!(m.read((1, 1), 0, 1), None, "evicted");
        assert_eq!(&d[r], &[95, 96, 97, 98, 99], "what was handed out stays");
        assert_eq!(m.stats().bytes, 100);
    }

    #[test]
    fn owned_bytes_are_kept_by_the_same_rules() {
        let mut m = LogMem::new(250);
        m.insert_vec((1, 1), vec![1u8; 100]);
        m.insert_vec((1, 1), vec![0u8; 100]);
        m.insert_vec((1, 2), vec![2u8; 300]);
        m.insert_vec((1, 3), Vec::new());
        assert_eq!(m.read((1, 1), 0, 2), Some(vec![1, 1]), "a name keeps its first bytes");
        assert_eq!(m.read((1, 2), 0, 1), None, "larger than the bound: not kept");
        assert_eq!(m.read((1, 3), 0, 1), None, "nothing to keep");
        assert_eq!(m.stats().bytes, 100);
    }

    #[test]
    fn zero_capacity_keeps_nothing() {
        let mut m = LogMem::new(0);
        m.insert((1, 1), &[1u8; 10]);
        assert_eq!(m.read((1, 1), 0, 1), None);
        assert_eq!(m.stats(), LogMemStats::default());
    }
}
