//! Space used exclusively by each snapshot and each clone (issue 15;
//! `cluster/STORAGE-MODEL.md`, "Space per snapshot and clone").
//!
//! The figure is what deleting that snapshot or clone would free, computed
//! on demand by a bounded scan of its *own* records, never of the share:
//!
//! - a snapshot's layer holds only what changed since it froze (its
//!   before-images `y` layer key and its shadows `y` layer `D` id), so the
//!   scan costs the layer's size;
//! - a clone's records are its id range (`n`, `e`, `d`, `E`, `k`, `M`, `W`
//!   of `clone_id(c, ..)`): only what was copied up or made in it, plus its
//!   own snapshots' layers and the snapshot taken for it.
//!
//! It mirrors the deletion exactly (`layers::drop_snapshot`,
//! `clone::remove_share`) without writing anything: a before-image that
//! would move to the next older snapshot (which has none of its own) is not
//! freed; a chunk record that would go frees its chunk when the chunk is
//! the file's own (no blob) or when every reference its blob counts goes
//! with this deletion. A chunk shared by reference with the live share, a
//! clone or another layer is therefore never counted. A chunk's bytes are
//! its length inside the file as it was (`CHUNK_SIZE`, or the file's tail
//! for the last one): what its chunk file holds on each node.
//!
//! Nothing is kept per layer, so no write path pays for the figure, and it
//! is exact for the committed state it was read from. Each figure reads at
//! most [`SCAN_MAX`] records (the metadata thread serves clients too): past
//! that it is a lower bound, marked `partial`.

use std::collections::BTreeMap;

use super::layers::{share_dir, zone_snapshots, Frozen};
use super::*;
use crate::records::{CloneRecord, SnapshotRecord};

/// Most records one figure reads.
pub const SCAN_MAX: usize = 100_000;

/// What deleting one snapshot or clone would free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Exclusive {
    /// Bytes of chunk data only it holds.
    pub bytes: u64,
    /// Chunks only it holds.
    pub chunks: u64,
    /// Metadata records deleting it removes (before-images, shadows'
    /// chunk records; a clone's own records).
    pub records: u64,
    /// More than [`SCAN_MAX`] records: the figures are lower bounds.
    pub partial: bool,
}

/// The chunk references one deletion drops.
struct Tally {
    /// Blob -> (references dropped, the chunk's length).
    blobs: BTreeMap<u64, (u64, u64)>,
    own: Exclusive,
    /// Records it may still read.
    left: usize,
}

impl Tally {
    fn new(budget: usize) -> Tally {
        Tally { blobs: BTreeMap::new(), own: Exclusive::default(), left: budget }
    }

    /// A range scan within the budget.
    fn scan<R: KvRead + ?Sized>(&mut self, txn: &mut Txn<'_, R>, from: &[u8], to: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut rows = txn.scan(from, to, self.left.saturating_add(1));
        if rows.len() > self.left {
            rows.truncate(self.left);
            self.own.partial = true;
        }
        self.left -= rows.len();
        rows
    }

    /// Whether one more point read fits the budget.
    fn read(&mut self) -> bool {
        if self.left == 0 {
            self.own.partial = true;
            return false;
        }
        self.left -= 1;
        true
    }

    fn chunk(&mut self, value: &[u8], len: u64) {
        self.own.records += 1;
        match keys::chunk_blob(value) {
            Some(b) => {
                let e = self.blobs.entry(b).or_insert((0, 0));
                e.0 += 1;
                e.1 = e.1.max(len);
            }
            None => {
                self.own.bytes += len;
                self.own.chunks += 1;
            }
        }
    }

    fn finish<R: KvRead + ?Sized>(self, txn: &mut Txn<'_, R>) -> Exclusive {
        let mut x = self.own;
        for (b, (dropped, len)) in self.blobs {
            // Every reference the blob counts goes: its bytes go with the
            // last chunk file naming them.
            if blob_refs(txn, b) <= dropped {
                x.bytes += len;
                x.chunks += 1;
            }
        }
        x
    }
}

/// Bytes of chunk `idx` of a file of `size` bytes (unknown: a whole chunk).
fn chunk_len(size: Option<u64>, idx: u64) -> u64 {
    match size {
        Some(s) => s.saturating_sub(idx.saturating_mul(CHUNK_SIZE)).min(CHUNK_SIZE),
        None => CHUNK_SIZE,
    }
}

/// Adds what dropping snapshot `snaps[at]` of its zone drops to `t`.
/// `older`: the layer its records would move to (`drop_snapshot` moves a
/// before-image there when that layer has none of its own), `None` when
/// nothing older remains (all of them are dropped).
fn layer<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, layer: u64, older: Option<u64>, t: &mut Tally) {
    let p = keys::layer_prefix(layer);
    let frozen = Frozen::open(txn, layer).ok();
    for (k, v) in t.scan(txn, &p, &keys::prefix_end(&p)) {
        let key = &k[p.len()..];
        if let Some(o) = older {
            if !t.read() {
                break;
            }
            if txn.get(&keys::layered(o, key)).is_none() {
                // Moves to the older snapshot: not freed.
                continue;
            }
        }
        t.own.records += 1;
        if key.first() != Some(&keys::SHADOW) {
            continue;
        }
        let (Some(id), Ok(b)) = (keys::u64_at(key, 1), <[u8; 8]>::try_from(v.as_slice())) else { continue };
        let sid = u64::from_be_bytes(b);
        // The file as this layer froze it holds the shadow's chunks.
        let size = match &frozen {
            Some(f) => f.get(txn, &keys::node(id)).ok().flatten().and_then(|n| Node::decode(&n)).map(|n| n.attrs.size),
            None => None,
        };
        let cp = keys::chunk_prefix(sid);
        for (ck, cv) in t.scan(txn, &cp, &keys::prefix_end(&cp)) {
            let idx = keys::u64_at(&ck, 9).unwrap_or(0);
            t.chunk(&cv, chunk_len(size, idx));
        }
    }
}

/// The snapshots of a share, oldest first, each with what deleting it
/// would free (`None`: no such share).
pub fn snapshot_space<R: KvRead + ?Sized>(kv: &R, share: &str) -> Option<Vec<(SnapshotRecord, Exclusive)>> {
    snapshot_space_within(kv, share, SCAN_MAX)
}

/// [`snapshot_space`] reading at most `budget` records per figure.
pub fn snapshot_space_within<R: KvRead + ?Sized>(
    kv: &R,
    share: &str,
    budget: usize,
) -> Option<Vec<(SnapshotRecord, Exclusive)>> {
    let mut txn = Txn::new(kv);
    let root = match share_dir(&mut txn, share) {
        Ok(r) => r,
        Err(AdminError::NotFound(_)) => return None,
        Err(_) => return Some(Vec::new()),
    };
    let snaps = zone_snapshots(&mut txn, root);
    let mut out = Vec::with_capacity(snaps.len());
    for (at, s) in snaps.iter().enumerate() {
        let mut t = Tally::new(budget);
        let older = at.checked_sub(1).map(|i| snaps[i].layer);
        layer(&mut txn, s.layer, older, &mut t);
        out.push((s.clone(), t.finish(&mut txn)));
    }
    Some(out)
}

/// Every clone with what removing its share would free: its own records
/// and chunks, its own snapshots, and the snapshot taken for it when no
/// other clone stands on that one.
pub fn clone_space<R: KvRead + ?Sized>(kv: &R) -> Vec<(CloneRecord, Exclusive)> {
    clone_space_within(kv, SCAN_MAX)
}

/// [`clone_space`] reading at most `budget` records per figure.
pub fn clone_space_within<R: KvRead + ?Sized>(kv: &R, budget: usize) -> Vec<(CloneRecord, Exclusive)> {
    let mut txn = Txn::new(kv);
    let p = [keys::CLONE];
    let clones: Vec<(u64, CloneRecord)> = txn
        .scan(&p, &keys::prefix_end(&p), usize::MAX)
        .into_iter()
        .filter_map(|(k, v)| Some((keys::u64_at(&k, 1)?, decode::<CloneRecord>(&v)?)))
        .collect();
    let mut out = Vec::with_capacity(clones.len());
    for (c, rec) in &clones {
        let mut t = Tally::new(budget);
        // Its snapshots go oldest first: each has nothing older left.
        for s in zone_snapshots(&mut txn, clone_id(*c, rec.root_base)) {
            layer(&mut txn, s.layer, None, &mut t);
        }
        let lo = clone_id(*c, 0);
        let hi = clone_id(*c, duet_fs::view::ID_MAX);
        let range = |kind: u8| {
            let mut a = vec![kind];
            a.extend_from_slice(&lo.to_be_bytes());
            let mut b = vec![kind];
            b.extend_from_slice(&hi.to_be_bytes());
            (a, keys::prefix_end(&b))
        };
        let mut sizes = BTreeMap::new();
        let (a, b) = range(keys::NODE);
        for (k, v) in t.scan(&mut txn, &a, &b) {
            t.own.records += 1;
            if let (Some(id), Some(n)) = (keys::u64_at(&k, 1), Node::decode(&v)) {
                sizes.insert(id, n.attrs.size);
            }
        }
        let (a, b) = range(keys::CHUNK);
        for (k, v) in t.scan(&mut txn, &a, &b) {
            let size = keys::u64_at(&k, 1).and_then(|id| sizes.get(&id).copied());
            t.chunk(&v, chunk_len(size, keys::u64_at(&k, 9).unwrap_or(0)));
        }
        for kind in [keys::EDGE, keys::DATA, keys::EA, keys::CLONE_MARK, keys::WHITEOUT] {
            let (a, b) = range(kind);
            t.own.records += t.scan(&mut txn, &a, &b).len() as u64;
        }
        if rec.implicit && !clones.iter().any(|(o, r)| o != c && r.layer == rec.layer) {
            let snaps = zone_snapshots(&mut txn, rec.source_zone);
            if let Some(at) = snaps.iter().position(|s| s.layer == rec.layer) {
                let older = at.checked_sub(1).map(|i| snaps[i].layer);
                layer(&mut txn, rec.layer, older, &mut t);
            }
        }
        out.push((rec.clone(), t.finish(&mut txn)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::chunk_len;
    use duet_fs::CHUNK_SIZE;

    #[test]
    fn chunk_lengths() {
        assert_eq!(chunk_len(Some(10), 0), 10);
        assert_eq!(chunk_len(Some(CHUNK_SIZE * 2 + 5), 1), CHUNK_SIZE);
        assert_eq!(chunk_len(Some(CHUNK_SIZE * 2 + 5), 2), 5);
        assert_eq!(chunk_len(Some(CHUNK_SIZE), 1), 0);
        assert_eq!(chunk_len(None, 7), CHUNK_SIZE);
    }
}
