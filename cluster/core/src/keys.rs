//! The RocksDB key schema. One keyspace, one byte of prefix per record kind;
//! integers big-endian so that range scans come out in order.
//!
//! | key                               | value                        |
//! |-----------------------------------|------------------------------|
//! | `n` id                            | [`Node`](crate::Node)        |
//! | `e` parent name                   | [`Edge`](crate::Edge)        |
//! | `d` id                            | inline file data             |
//! | `k` id chunk-index                | chunk attached to a file: empty = its own, or a blob id (u64) it shares |
//! | `b` blob                          | reference count (u64) of a shared chunk |
//! | `x` id                            | () file detached, chunks to reclaim |
//! | `q` dseq                          | [`DataRecord`](crate::DataRecord): data not yet destaged |
//! | `Q` id dseq                       | per-file index of `q`: the bytes the record can change ([`dq_span`]) |
//! | `s` share-name                    | [`ShareRecord`](crate::ShareRecord) |
//! | `u` user-name                     | [`UserRecord`](crate::UserRecord) |
//! | `a` name                          | admin secrets (hashes only)  |
//! | `m` name                          | counters: next id, next dseq, applied index |
//! | `r` index                         | raft log entry               |
//! | `l` name                          | node-local progress: `destaged_upto` |
//! | `h`                               | raft hard state              |
//! | `E` id name                       | an extended attribute's value (SMB EAs) |
//! | `z` zone                          | the zone's newest frozen layer (u64) |
//! | `Y` zone layer                    | [`SnapshotRecord`](crate::records::SnapshotRecord) |
//! | `Z` layer                         | the zone (u64) a frozen layer belongs to |
//! | `y` layer key                     | the before-image of live record `key` as the layer froze it: [`PRESERVED_ABSENT`] or [`PRESERVED_PRESENT`] + value |
//! | `y` layer `D` id                  | the shadow file (u64 id) holding the layer's chunks of file `id` |
//! | `K` clone                         | [`CloneRecord`](crate::records::CloneRecord): a writable clone of a share |
//! | `M` id                            | a clone object's mark: [`CLONE_OWN`] (its contents are its own records), [`CLONE_MERGED`] (a directory: its own entries over its source's) or [`CLONE_GONE`] (deleted: never read through again) |
//! | `W` dir name                      | () a clone directory's whiteout: its source's entry `name` is hidden |
//! | `S` share-name                    | [`ScheduleRecord`](crate::records::ScheduleRecord): the share's snapshot schedule |
//! | `T` id lower-case-name            | a named stream of file `id`: the stream's node id (u64) and its name as created (see [`stream`]) |
//! | `c` origin epoch seq              | exactly-once resend: the results (bincode `Vec<OpResult>`) of the identified batch (see `machine/sessions.rs`) |
//! | `C` origin                        | exactly-once resend: the origin's sessions, `Vec<(epoch, highest seq)>`, most recently used first |
//!
//! Layers (snapshots) are described in `cluster/STORAGE-MODEL.md`,
//! "Layers".
//!
//! Architecture Invariant: a path walk reads `e` records only, and a
//! directory listing is one range scan over `e` parent.

use crate::NodeId;

pub const NODE: u8 = b'n';
pub const EDGE: u8 = b'e';
pub const DATA: u8 = b'd';
pub const CHUNK: u8 = b'k';
pub const DETACHED: u8 = b'x';
pub const DQ: u8 = b'q';
pub const DQ_BY_FILE: u8 = b'Q';
pub const SHARE: u8 = b's';
pub const USER: u8 = b'u';
pub const ADMIN: u8 = b'a';
pub const META: u8 = b'm';
pub const RAFT_LOG: u8 = b'r';
pub const RAFT_HARD_STATE: &[u8] = b"h";
pub const EA: u8 = b'E';
/// A node's stored DACL (`A` id): [`duet_fs::acl::Acl`] bytes, a control
/// word before them (issue 17); the control word alone (with
/// DACL_PRESENT) is a NULL DACL. Layers keep before-images of it.
pub const ACL: u8 = b'A';
/// Shared chunks (reflink): `b` blob -> how many `k` records name it.
pub const BLOB: u8 = b'b';
/// Layers: `z` zone -> newest frozen layer.
pub const ZONE: u8 = b'z';
/// Layers: `Y` zone layer -> snapshot record.
pub const SNAPSHOT: u8 = b'Y';
/// Layers: `Z` layer -> zone.
pub const LAYER_ZONE: u8 = b'Z';
/// Layers: `y` layer original-key -> before-image.
pub const LAYER: u8 = b'y';
/// Inside a layer only: `D` id -> the shadow file holding the frozen
/// chunks of file `id` (never a key of its own outside `y`).
pub const SHADOW: u8 = b'D';
/// Clones: `K` clone number -> [`CloneRecord`](crate::records::CloneRecord).
pub const CLONE: u8 = b'K';
/// Clones: `M` id -> [`CLONE_OWN`], [`CLONE_MERGED`] or [`CLONE_GONE`]
/// (see `machine/clone.rs`).
pub const CLONE_MARK: u8 = b'M';
/// Clones: `W` dir name -> () a whiteout in a merged directory.
pub const WHITEOUT: u8 = b'W';
/// Snapshot schedules: `S` share-name -> [`ScheduleRecord`](crate::records::ScheduleRecord).
pub const SCHEDULE: u8 = b'S';
/// A clone directory's mark: its own edges and whiteouts (`W`) lie over
/// its source's entries (copied up without copying them).
pub const CLONE_MERGED: u8 = 2;
/// A clone object's mark: its edges, data and attributes are its own
/// records (copied up), not read through its source.
pub const CLONE_OWN: u8 = 1;
/// A clone object's mark: deleted in the clone (a whiteout of its id).
pub const CLONE_GONE: u8 = 0;
/// A before-image: the record did not exist when the layer froze.
pub const PRESERVED_ABSENT: u8 = 0;
/// A before-image: the record's value follows.
pub const PRESERVED_PRESENT: u8 = 1;

/// Exactly-once resend: `c` origin epoch seq -> the batch's results.
pub const RESULT: u8 = b'c';
/// Exactly-once resend: `C` origin -> that origin's sessions (epochs).
pub const SESSION: u8 = b'C';

/// The stored results of identified batch (`origin`, `epoch`, `seq`).
pub fn result(origin: u64, epoch: u64, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(25);
    k.push(RESULT);
    k.extend_from_slice(&origin.to_be_bytes());
    k.extend_from_slice(&epoch.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The session record of origin node `origin`.
pub fn session(origin: u64) -> Vec<u8> {
    with_u64(SESSION, origin)
}

/// Node-local records: progress of this node's own data path, never
/// written by a raft command (see `machine::drop_destaged`).
pub const LOCAL: u8 = b'l';

pub fn node(id: NodeId) -> Vec<u8> {
    with_u64(NODE, id)
}

pub fn data(id: NodeId) -> Vec<u8> {
    with_u64(DATA, id)
}

pub fn detached(id: NodeId) -> Vec<u8> {
    with_u64(DETACHED, id)
}

pub fn dq(dseq: u64) -> Vec<u8> {
    with_u64(DQ, dseq)
}

pub fn edge(parent: NodeId, name: &str) -> Vec<u8> {
    let mut k = edge_prefix(parent);
    k.extend_from_slice(name.as_bytes());
    k
}

/// One extended attribute of a node (names are stored upper-case: SMB EA
/// names are case-insensitive, MS-FSCC 2.4.15).
pub fn ea(id: NodeId, name: &str) -> Vec<u8> {
    let mut k = ea_prefix(id);
    k.extend_from_slice(name.as_bytes());
    k
}

/// A node's stored DACL.
pub fn acl(id: NodeId) -> Vec<u8> {
    with_u64(ACL, id)
}

pub fn ea_prefix(id: NodeId) -> Vec<u8> {
    with_u64(EA, id)
}

pub fn edge_prefix(parent: NodeId) -> Vec<u8> {
    with_u64(EDGE, parent)
}

pub fn chunk(id: NodeId, index: u64) -> Vec<u8> {
    let mut k = with_u64(CHUNK, id);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

pub fn chunk_prefix(id: NodeId) -> Vec<u8> {
    with_u64(CHUNK, id)
}

pub fn zone(zone: NodeId) -> Vec<u8> {
    with_u64(ZONE, zone)
}

pub fn snapshot(zone: NodeId, layer: u64) -> Vec<u8> {
    let mut k = with_u64(SNAPSHOT, zone);
    k.extend_from_slice(&layer.to_be_bytes());
    k
}

pub fn snapshot_prefix(zone: NodeId) -> Vec<u8> {
    with_u64(SNAPSHOT, zone)
}

pub fn layer_zone(layer: u64) -> Vec<u8> {
    with_u64(LAYER_ZONE, layer)
}

/// The before-image of live key `key` in `layer`.
pub fn layered(layer: u64, key: &[u8]) -> Vec<u8> {
    let mut k = with_u64(LAYER, layer);
    k.extend_from_slice(key);
    k
}

pub fn layer_prefix(layer: u64) -> Vec<u8> {
    with_u64(LAYER, layer)
}

/// The (pseudo) key of file `id`'s shadow inside a layer.
pub fn shadow(id: NodeId) -> Vec<u8> {
    with_u64(SHADOW, id)
}

/// Whether a live key is one a layer keeps before-images of (node, edge,
/// inline data, extended attribute, stored DACL).
pub fn layered_kind(key: &[u8]) -> bool {
    LAYERED.contains(key.first().unwrap_or(&0))
}

/// The record kinds [`layered_kind`] names.
pub const LAYERED: &[u8] = &[NODE, EDGE, DATA, EA, ACL, CLONE_MARK, WHITEOUT];

pub fn schedule(share: &str) -> Vec<u8> {
    let mut k = vec![SCHEDULE];
    k.extend_from_slice(share.as_bytes());
    k
}

pub fn clone(c: u64) -> Vec<u8> {
    with_u64(CLONE, c)
}

pub fn clone_mark(id: NodeId) -> Vec<u8> {
    with_u64(CLONE_MARK, id)
}

pub fn whiteout(dir: NodeId, name: &str) -> Vec<u8> {
    let mut k = whiteout_prefix(dir);
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn whiteout_prefix(dir: NodeId) -> Vec<u8> {
    with_u64(WHITEOUT, dir)
}

/// A before-image's value: `None` for "absent".
pub fn preserved(value: Option<&[u8]>) -> Vec<u8> {
    match value {
        None => vec![PRESERVED_ABSENT],
        Some(v) => {
            let mut out = Vec::with_capacity(1 + v.len());
            out.push(PRESERVED_PRESENT);
            out.extend_from_slice(v);
            out
        }
    }
}

/// Reads a before-image: `Some(None)` absent, `Some(Some(v))` present,
/// `None` undecodable.
pub fn unpreserved(b: &[u8]) -> Option<Option<&[u8]>> {
    match b.split_first()? {
        (&PRESERVED_ABSENT, []) => Some(None),
        (&PRESERVED_PRESENT, v) => Some(Some(v)),
        _ => None,
    }
}

pub fn blob(id: u64) -> Vec<u8> {
    with_u64(BLOB, id)
}

/// The blob a `k` record's value names, if the chunk is shared.
pub fn chunk_blob(value: &[u8]) -> Option<u64> {
    value.try_into().ok().map(u64::from_be_bytes)
}

/// First byte of a `k` value that is the file's own chunk with a map of
/// its allocated blocks (8 more bytes, big-endian: bit `i` = block `i` of
/// [`duet_fs::ALLOC_BLOCK`] bytes holds data).
pub const CHUNK_OWN_MAP: u8 = 1;

/// All blocks of a chunk allocated.
pub const ALL_BLOCKS: u64 = u64::MAX;

const _: () = assert!(duet_fs::CHUNK_SIZE / duet_fs::ALLOC_BLOCK == 64, "one bit per block in a u64");

/// What a `k` record's value says of its chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkValue {
    /// The file's own chunk; the blocks that hold data (an empty value,
    /// written before maps existed: all of them).
    Own(u64),
    /// A chunk shared by reference (every block counts as allocated).
    Shared(u64),
}

/// Decodes a `k` value: empty, 8 bytes (a blob), or [`CHUNK_OWN_MAP`] + 8
/// bytes. Anything else is `None` (fsck reports it; the state machine
/// treats it as an own, fully allocated chunk, never as a hole).
pub fn chunk_value(value: &[u8]) -> Option<ChunkValue> {
    match value.len() {
        0 => Some(ChunkValue::Own(ALL_BLOCKS)),
        8 => chunk_blob(value).map(ChunkValue::Shared),
        9 if value[0] == CHUNK_OWN_MAP => value[1..].try_into().ok().map(|b| ChunkValue::Own(u64::from_be_bytes(b))),
        _ => None,
    }
}

/// The value of an own chunk whose allocated blocks are `blocks`. All of
/// them is the empty value (as before maps existed).
pub fn own_chunk(blocks: u64) -> Vec<u8> {
    if blocks == ALL_BLOCKS {
        return Vec::new();
    }
    let mut v = Vec::with_capacity(9);
    v.push(CHUNK_OWN_MAP);
    v.extend_from_slice(&blocks.to_be_bytes());
    v
}

/// The blocks of a chunk that `[from, to)` (offsets within the chunk)
/// touches at all (`whole` false) or covers whole (`whole` true).
pub fn chunk_blocks(from: u64, to: u64, whole: bool) -> u64 {
    let b = duet_fs::ALLOC_BLOCK;
    if from >= to {
        return 0;
    }
    let (first, end) = if whole { (from.div_ceil(b), to / b) } else { (from / b, to.div_ceil(b)) };
    let end = end.min(64);
    if first >= end {
        return 0;
    }
    let n = end - first;
    let ones = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    ones << first
}

pub fn dq_by_file(id: NodeId, dseq: u64) -> Vec<u8> {
    let mut k = with_u64(DQ_BY_FILE, id);
    k.extend_from_slice(&dseq.to_be_bytes());
    k
}

pub fn dq_by_file_prefix(id: NodeId) -> Vec<u8> {
    with_u64(DQ_BY_FILE, id)
}

/// The value of a `Q` record: which bytes of its file the queued record
/// can change, so that a read fetches only the records over its range.
/// `Some((start, end))`: only `[start, end)`; `None`: any byte (a
/// truncation, a clone, a reclaim).
pub fn dq_span(span: Option<(u64, u64)>) -> Vec<u8> {
    match span {
        Some((start, end)) => {
            let mut v = Vec::with_capacity(17);
            v.push(SPAN_RANGE);
            v.extend_from_slice(&start.to_be_bytes());
            v.extend_from_slice(&end.to_be_bytes());
            v
        }
        None => vec![SPAN_ANY],
    }
}

/// Whether the queued record whose `Q` value is `v` can change a byte of
/// `[start, end)`. A value this code does not know (the empty value that
/// nodes before the span wrote, or anything else) answers true: the
/// caller then reads the record itself, which is always correct.
pub fn dq_span_touches(v: &[u8], start: u64, end: u64) -> bool {
    match (v.first(), v.len()) {
        (Some(&SPAN_RANGE), 17) => {
            let (Some(s), Some(e)) = (u64_at(v, 1), u64_at(v, 9)) else { return true };
            s < end && e > start
        }
        _ => true,
    }
}

/// Decodes a `Q` value written by [`dq_span`]: `None` for one it did not
/// write (fsck reports those).
pub fn dq_span_decode(v: &[u8]) -> Option<Option<(u64, u64)>> {
    match (v.first(), v.len()) {
        (Some(&SPAN_RANGE), 17) => Some(Some((u64_at(v, 1)?, u64_at(v, 9)?))),
        (Some(&SPAN_ANY), 1) => Some(None),
        _ => None,
    }
}

const SPAN_RANGE: u8 = 1;
const SPAN_ANY: u8 = 2;

pub fn share(name: &str) -> Vec<u8> {
    named(SHARE, name)
}

pub fn user(name: &str) -> Vec<u8> {
    named(USER, name)
}

pub fn admin(name: &str) -> Vec<u8> {
    named(ADMIN, name)
}

pub fn meta(name: &str) -> Vec<u8> {
    named(META, name)
}

pub fn local(name: &str) -> Vec<u8> {
    named(LOCAL, name)
}

pub fn raft_log(index: u64) -> Vec<u8> {
    with_u64(RAFT_LOG, index)
}

/// Reads the big-endian u64 at `at` of a key, if the key is long enough.
pub fn u64_at(key: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = key.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

fn with_u64(prefix: u8, v: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(prefix);
    k.extend_from_slice(&v.to_be_bytes());
    k
}

fn named(prefix: u8, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(prefix);
    k.extend_from_slice(name.as_bytes());
    k
}

/// The smallest key greater than every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; prefix.len() + 1]
}

/// Named streams (SMB alternate data streams, MS-FSCC 2.1.5): `T` file id
/// name -> the stream's node. Names are case-insensitive: the key holds
/// the name lower-cased, the value the stream's node id (8 bytes,
/// big-endian) and then its name as created (UTF-8). A stream's node is an
/// ordinary regular-file node (`n`, `d`, `k`) whose parent is the file;
/// no `e` edge names it, so no listing or path walk meets it.
pub const STREAM: u8 = b'T';

pub fn stream_prefix(file: NodeId) -> Vec<u8> {
    with_u64(STREAM, file)
}

pub fn stream(file: NodeId, name: &str) -> Vec<u8> {
    let mut k = stream_prefix(file);
    k.extend_from_slice(name.to_lowercase().as_bytes());
    k
}

/// A `T` value: the stream's node id and its name as created.
pub fn stream_value(id: NodeId, name: &str) -> Vec<u8> {
    let mut v = id.to_be_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v
}

/// Decodes a `T` value; `None` when it is malformed.
pub fn stream_entry(value: &[u8]) -> Option<(NodeId, String)> {
    let id = u64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let name = std::str::from_utf8(&value[8..]).ok()?.to_string();
    Some((id, name))
}
