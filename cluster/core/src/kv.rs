//! The key-value view the state machine runs on, and the transaction overlay
//! that gathers one commit's writes.
//!
//! The store crate implements [`KvRead`] over RocksDB; tests implement it over
//! a `BTreeMap`. The state machine never sees RocksDB.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Reads from committed state.
pub trait KvRead {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
    /// Up to `limit` pairs with `start <= key < end`, in key order.
    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)>;
    /// The values of `keys`, in their order: one read per key, which a store
    /// may do as one batch (RocksDB's MultiGet).
    fn get_many(&self, keys: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
    /// [`KvRead::scan`] of each of `ranges` (`(start, end)`), in their
    /// order: one read, which a store may do on one iterator (a RocksDB
    /// iterator costs more to make than to seek).
    fn scan_ranges(&self, ranges: &[(Vec<u8>, Vec<u8>)], limit: usize) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        ranges.iter().map(|(start, end)| self.scan(start, end, limit)).collect()
    }
}

impl KvRead for BTreeMap<Vec<u8>, Vec<u8>> {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        BTreeMap::get(self, key).cloned()
    }
    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Writes of one transaction over a read view: reads see the transaction's
/// own writes. Counts the reads and writes it does.
pub struct Txn<'a, R: KvRead + ?Sized> {
    base: &'a R,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    pub reads: u64,
    pub write_count: u64,
    /// The first record that failed to encode: the transaction must not
    /// be written (see [`Txn::unencodable`]).
    unencodable: Option<String>,
}

impl<'a, R: KvRead + ?Sized> Txn<'a, R> {
    pub fn new(base: &'a R) -> Self {
        Txn { base, writes: BTreeMap::new(), reads: 0, write_count: 0, unencodable: None }
    }

    pub fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(v) = self.writes.get(key) {
            return v.clone();
        }
        self.reads += 1;
        self.base.get(key)
    }

    /// The value of `key` in the committed state under this transaction,
    /// ignoring the transaction's own writes (the before-image a layer
    /// keeps).
    pub fn base_get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.reads += 1;
        self.base.get(key)
    }

    /// The keys this transaction wrote (put or deleted) so far that start
    /// with `first` byte in `prefixes`, in key order.
    pub fn written_keys(&self, prefixes: &[u8]) -> Vec<Vec<u8>> {
        self.writes.keys().filter(|k| k.first().is_some_and(|b| prefixes.contains(b))).cloned().collect()
    }

    /// The values of `keys`, in their order, as [`Txn::get`] of each (and
    /// counted so): the ones this transaction has not written are read from
    /// the base as one batch.
    pub fn get_many(&mut self, keys: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
        if self.writes.is_empty() {
            self.reads += keys.len() as u64;
            return self.base.get_many(keys);
        }
        keys.iter().map(|k| self.get(k)).collect()
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.write_count += 1;
        self.writes.insert(key, Some(value));
    }

    /// Puts a record encoded by [`crate::records::encode`]. One that fails
    /// to encode is not written, and marks the transaction unwritable.
    pub fn put_record<T: serde::Serialize>(&mut self, key: Vec<u8>, value: &T) {
        match crate::records::encode(value) {
            Ok(v) => self.put(key, v),
            Err(e) => {
                let what = format!("record under key {key:02x?}: {e}");
                self.unencodable.get_or_insert(what);
            }
        }
    }

    /// Why this transaction must not be written (a record failed to
    /// encode), if it must not.
    pub fn unencodable(&self) -> Option<&str> {
        self.unencodable.as_deref()
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.write_count += 1;
        self.writes.insert(key, None);
    }

    /// [`Txn::scan`] of each of `ranges`, in their order: one read of the
    /// base ([`KvRead::scan_ranges`]) when the transaction wrote nothing
    /// in them.
    pub fn scan_ranges(&mut self, ranges: &[(Vec<u8>, Vec<u8>)], limit: usize) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let touched = ranges.iter().any(|(start, end)| {
            self.writes
                .range::<[u8], _>((Bound::Included(start.as_slice()), Bound::Excluded(end.as_slice())))
                .next()
                .is_some()
        });
        if touched {
            return ranges.iter().map(|(start, end)| self.scan(start, end, limit)).collect();
        }
        self.reads += 1;
        self.base.scan_ranges(ranges, limit)
    }

    /// Up to `limit` live pairs with `start <= key < end`, merging the
    /// transaction's writes over the base.
    pub fn scan(&mut self, start: &[u8], end: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.reads += 1;
        let untouched = self
            .writes
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .next()
            .is_none();
        if untouched {
            // Nothing of this transaction's in the range (every read-only
            // batch): the base's pairs as they are.
            return self.base.scan(start, end, limit);
        }
        let mut out = Vec::new();
        let mut from = start.to_vec();
        // Read the base in pages; overlay deletions may hide base entries.
        loop {
            let page = self.base.scan(&from, end, limit.saturating_add(1).max(16));
            let base_done = page.len() < limit.saturating_add(1).max(16);
            let page_end: Vec<u8> = if base_done {
                end.to_vec()
            } else {
                let mut k = page.last().map(|(k, _)| k.clone()).unwrap_or_default();
                k.push(0);
                k
            };
            let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = page.into_iter().collect();
            for (k, v) in self
                .writes
                .range::<[u8], _>((Bound::Included(from.as_slice()), Bound::Excluded(page_end.as_slice())))
            {
                match v {
                    Some(v) => {
                        merged.insert(k.clone(), v.clone());
                    }
                    None => {
                        merged.remove(k);
                    }
                }
            }
            for (k, v) in merged {
                if out.len() == limit {
                    return out;
                }
                out.push((k, v));
            }
            if base_done || out.len() == limit {
                return out;
            }
            from = page_end;
        }
    }

    /// The writes, in key order: `None` deletes.
    pub fn into_writes(self) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        self.writes
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value whose serialisation fails.
    struct Unencodable;
    impl serde::Serialize for Unencodable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refuses to encode"))
        }
    }

    #[test]
    fn a_record_that_does_not_encode_marks_the_transaction_and_writes_nothing() {
        let base = BTreeMap::new();
        let mut t = Txn::new(&base);
        t.put_record(vec![b'n', 1], &7u64);
        assert_eq!(t.unencodable(), None);
        t.put_record(vec![b'n', 2], &Unencodable);
        let why = t.unencodable().expect("marked");
        assert!(why.contains("refuses to encode"), "{why}");
        // The failed record is not there as an empty value.
        assert_eq!(t.get(&[b'n', 2]), None);
        assert!(crate::records::encode(&Unencodable).is_err());
    }

    #[test]
    fn scan_merges_overlay_with_base() {
        let mut base = BTreeMap::new();
        for i in 0u8..50 {
            base.insert(vec![b'e', i], vec![i]);
        }
        let mut t = Txn::new(&base);
        t.delete(vec![b'e', 3]);
        t.put(vec![b'e', 3, 1], vec![99]);
        for i in 0u8..40 {
            if i % 2 == 0 {
                t.delete(vec![b'e', i]);
            }
        }
        let all = t.scan(&[b'e'], &[b'f'], 1000);
        let keys: Vec<Vec<u8>> = all.iter().map(|(k, _)| k.clone()).collect();
        let mut want: Vec<Vec<u8>> = (0u8..50).filter(|i| *i >= 40 || i % 2 == 1).filter(|i| *i != 3).map(|i| vec![b'e', i]).collect();
        want.push(vec![b'e', 3, 1]);
        want.sort();
        assert_eq!(keys, want);
        let few = t.scan(&[b'e'], &[b'f'], 3);
        assert_eq!(few.len(), 3);
        assert_eq!(few[0].0, vec![b'e', 1]);
        assert_eq!(few[1].0, vec![b'e', 3, 1]);
    }
}
