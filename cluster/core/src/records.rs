//! What the schema stores, and the commands a raft entry carries.

use duet_fs::{Attrs, Batch, ExtentId, FileType, NodeId, TimeNs};
use serde::{Deserialize, Serialize};

/// A node record (`n` id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub attrs: Attrs,
    /// Directories: the one parent (`..`, LOOKUPP). Others: the parent of
    /// the first link.
    pub parent: NodeId,
    /// Symbolic links: the target.
    pub target: Option<String>,
    /// Data lives in chunks (and the data queue) rather than inline.
    pub chunked: bool,
    /// The node may have extended attributes (`x` records). False means it
    /// has none, so listings skip the range scan for them. `SetEas` keeps it
    /// exact; nodes stored before the field existed read as true (see
    /// [`Node::decode`]). Appended: older node records are a prefix.
    pub may_have_eas: bool,
    /// The zone: the id of the share directory whose layers (snapshots)
    /// this node belongs to, inherited from the directory it is created
    /// in; a share's directory made by `PutShare` is its own zone. 0: no
    /// zone (nodes stored before layers existed, and the namespace above
    /// the shares). Renames and links across zones are refused
    /// (`CrossDevice`), so a zone's subtree never holds another zone's
    /// nodes. Appended: older node records are a prefix.
    pub zone: NodeId,
    /// The node has a stored DACL (`A` id record, issue 17): access checks
    /// read it and evaluate it (MS-DTYP 2.5.3.2) instead of the mode bits.
    /// False: no record, no extra read. Appended last: nodes stored before
    /// it decode as false ([`Node::decode`]).
    pub has_acl: bool,
}

/// A node record as versions before `has_acl` stored it.
#[derive(Deserialize)]
struct NodeV3 {
    attrs: Attrs,
    parent: NodeId,
    target: Option<String>,
    chunked: bool,
    may_have_eas: bool,
    zone: NodeId,
}

/// A node record as versions before `zone` stored it.
#[derive(Deserialize)]
struct NodeV2 {
    attrs: Attrs,
    parent: NodeId,
    target: Option<String>,
    chunked: bool,
    may_have_eas: bool,
}

/// A node record as versions before `may_have_eas` stored it.
#[derive(Deserialize)]
struct NodeV1 {
    attrs: Attrs,
    parent: NodeId,
    target: Option<String>,
    chunked: bool,
}

impl Node {
    /// Decodes a node record, of this layout or of the one before
    /// `may_have_eas` (which, being a strict prefix, fails the new layout at
    /// its end). Old nodes may have extended attributes.
    pub fn decode(b: &[u8]) -> Option<Node> {
        if let Some(n) = decode::<Node>(b) {
            return Some(n);
        }
        if let Some(NodeV3 { attrs, parent, target, chunked, may_have_eas, zone }) = decode(b) {
            return Some(Node { attrs, parent, target, chunked, may_have_eas, zone, has_acl: false });
        }
        if let Some(NodeV2 { attrs, parent, target, chunked, may_have_eas }) = decode(b) {
            return Some(Node { attrs, parent, target, chunked, may_have_eas, zone: 0, has_acl: false });
        }
        let NodeV1 { attrs, parent, target, chunked } = decode(b)?;
        Some(Node { attrs, parent, target, chunked, may_have_eas: true, zone: 0, has_acl: false })
    }
}

/// An edge record (`e` parent name): the child and what a path walk's
/// permission check needs without reading the child node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    pub child: NodeId,
    pub ftype: FileType,
    /// For directories: mode, uid and gid, kept equal to the child node's.
    /// No permission check reads it (every check, traverse included,
    /// reads the node, so a directory's stored DACL is never bypassed);
    /// a check that used it would have to read the node when it has a
    /// DACL (`Node::has_acl`).
    pub dir_perm: Option<(u32, u32, u32)>,
}

/// Data of a chunked file that the chunk store does not have yet, in commit
/// order (`q` dseq). The destager applies them in order and deletes them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataRecord {
    pub file: NodeId,
    pub op: DataOp,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataOp {
    /// Bytes carried by the raft entry itself (small writes to large files).
    /// Encoded as bytes (`serde_bytes`: bincode's layout for a byte
    /// sequence is the same, a u64 length then the bytes, so stored
    /// records keep decoding), which decode with one copy instead of one
    /// visit per byte: every read of a file decodes its queued records.
    WriteInline {
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// Bytes in the write log at `lsn`.
    WriteLogged { offset: u64, lsn: u64, len: u64 },
    /// Everything from `size` on is gone.
    Truncate { size: u64 },
    /// The file is gone: delete all its chunks.
    Reclaim,
    /// `[offset, offset+len)` reads as zeros (a punched hole).
    /// (Appended after Reclaim: stored queue records keep decoding.)
    Zero { offset: u64, len: u64 },
    /// Bytes of the write-log extent `extent` (named cluster-wide). What
    /// `machine::apply` queues for logged writes; old records keep
    /// `WriteLogged`. (Appended last: stored queue records keep decoding.)
    WriteExtent { offset: u64, extent: ExtentId, len: u64 },
    /// The file gets its own copy of each of these chunks, which it shares
    /// with other files (copy-on-write, before a write, truncation or zeroing
    /// changes it in place). Content-preserving: applying it again, or to a
    /// chunk no longer shared, changes no byte. (Appended: stored queue
    /// records keep decoding.)
    Unshare { chunks: Vec<u64> },
    /// A clone from file `src` (which may be this file), as `src` was when
    /// this record was queued: each `(src chunk, chunk)` of `share` is made
    /// the same chunk as `src`'s (shared by reference; a hole stays a hole),
    /// and each `(src offset, offset, len)` of `copy` is copied byte for
    /// byte. Every source is read before anything is written. A
    /// cross-file record: the destager applies it in a round of its own,
    /// after every earlier record is destaged, and a read laying it over
    /// chunks waits until it is destaged ([`DataOp::cross_file`]).
    /// (Appended: stored queue records keep decoding.)
    CloneFrom { src: NodeId, share: Vec<(u64, u64)>, copy: Vec<(u64, u64, u64)> },
    /// The file's compression attribute changed (FSCTL_SET_COMPRESSION):
    /// the destager rewrites each of its chunks in the format the file's
    /// attribute asks for when the record is destaged (compressed or
    /// plain). Content-preserving: applying it again changes no byte.
    /// (Appended: stored queue records keep decoding.)
    Recompress,
}

impl DataOp {
    /// Whether applying this record reads another file's chunks (or other
    /// chunks of this file) as they were when it was queued: such a record
    /// is destaged alone, once every earlier one is, and reads wait for it.
    pub fn cross_file(&self) -> bool {
        matches!(self, DataOp::CloneFrom { .. })
    }

    /// A write whose bytes are in a write log: (file offset, extent, length).
    /// `WriteLogged` (this node's lsn) is an extent of origin
    /// [`ExtentId::LEGACY_LOCAL`].
    pub fn logged(&self) -> Option<(u64, ExtentId, u64)> {
        match *self {
            DataOp::WriteLogged { offset, lsn, len } => {
                Some((offset, ExtentId { origin: ExtentId::LEGACY_LOCAL, seq: lsn }, len))
            }
            DataOp::WriteExtent { offset, extent, len } => Some((offset, extent, len)),
            _ => None,
        }
    }

    /// Whether laying this record over the bytes `[start, end)` of its
    /// file can change them: false only for a write wholly outside the
    /// range (every other record is kept: truncations, zeroing, reclaims
    /// and clones reach past their own ranges).
    pub fn touches(&self, start: u64, end: u64) -> bool {
        match self.span() {
            Some((s, e)) => s < end && e > start,
            None => true,
        }
    }

    /// The bytes `[start, end)` of its file this record writes, for a
    /// write; `None` for every other record (it can change any byte). The
    /// per-file index of the queue (`Q`) carries it.
    pub fn span(&self) -> Option<(u64, u64)> {
        let (offset, len) = match self {
            DataOp::WriteInline { offset, data } => (*offset, data.len() as u64),
            _ => self.logged().map(|(offset, _, len)| (offset, len))?,
        };
        Some((offset, offset.saturating_add(len)))
    }
}

/// A share (`s` name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareRecord {
    pub name: String,
    pub path: String,
    pub smb: bool,
    pub nfs: bool,
    pub read_only: bool,
    pub guest_ok: bool,
    pub nfs_clients: Vec<String>,
    pub root_squash: bool,
    pub append_extension: bool,
    /// When a change is durable before its reply (`docs/durability.md`).
    /// Appended last: records stored before it decode as
    /// [`Durability::Always`] ([`ShareRecord::decode`]).
    pub durability: Durability,
}

/// A share's durability setting (`duetctl share add|modify
/// --durability`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Durability {
    /// Every change is durable before its reply (the default).
    #[default]
    Always,
    /// A change is durable before its reply when the protocol promises it
    /// (SMB WRITE_THROUGH, FLUSH, CREATE with FILE_WRITE_THROUGH; NFS
    /// FILE_SYNC/DATA_SYNC WRITE, COMMIT and every metadata operation);
    /// the rest within `[durability] window_ms` by a group commit. A
    /// multi-voter cluster serves it as `Always`.
    Protocol,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Always => "always",
            Durability::Protocol => "protocol",
        }
    }
    pub fn parse(s: &str) -> Option<Durability> {
        match s {
            "always" => Some(Durability::Always),
            "protocol" => Some(Durability::Protocol),
            _ => None,
        }
    }
}

/// A share record as versions before `durability` stored it.
#[derive(Deserialize)]
struct ShareRecordV1 {
    name: String,
    path: String,
    smb: bool,
    nfs: bool,
    read_only: bool,
    guest_ok: bool,
    nfs_clients: Vec<String>,
    root_squash: bool,
    append_extension: bool,
}

impl ShareRecord {
    /// Decodes a share record of this layout or of the one before
    /// `durability` (a strict prefix: it fails the new layout at its end),
    /// which decodes as `always`.
    pub fn decode(b: &[u8]) -> Option<ShareRecord> {
        if let Some(s) = decode::<ShareRecord>(b) {
            return Some(s);
        }
        let ShareRecordV1 { name, path, smb, nfs, read_only, guest_ok, nfs_clients, root_squash, append_extension } =
            decode(b)?;
        Some(ShareRecord {
            name,
            path,
            smb,
            nfs,
            read_only,
            guest_ok,
            nfs_clients,
            root_squash,
            append_extension,
            durability: Durability::Always,
        })
    }
}

/// A snapshot of a share (`Y` zone layer): the frozen layer `layer` of the
/// zone whose root is the share's directory `root`, under `name`, taken at
/// `created_ns` (the command's time).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub name: String,
    pub layer: u64,
    pub root: NodeId,
    pub created_ns: TimeNs,
}

/// A writable clone of a share (`K` clone number; `machine/clone.rs`,
/// `cluster/STORAGE-MODEL.md` "Clones"): share `name` reads through the
/// frozen layer `layer` of its source's zone `source_zone` (snapshot
/// `snapshot` of share `source`) until its objects are copied up. Its
/// objects' ids are `clone_id(number, base)`, base being the id the object
/// has in the original share (or, for objects made in a clone, a fresh id
/// of at least that clone's `floor`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneRecord {
    /// The clone share's name.
    pub name: String,
    pub source: String,
    pub snapshot: String,
    /// The snapshot was taken for this clone (`share clone SOURCE NEW`)
    /// and is deleted with it.
    pub implicit: bool,
    pub layer: u64,
    /// The source share's directory (its zone).
    pub source_zone: NodeId,
    /// The clone number of the source when it is itself a clone, else 0.
    pub source_clone: u64,
    /// The base id of the share's root directory.
    pub root_base: NodeId,
    /// The live directory holding the clone's root, and the root's name in it.
    pub parent: NodeId,
    pub leaf: String,
    /// Ids of at least `floor` were made in this clone (never read through).
    pub floor: NodeId,
    /// 1 for a clone of a share, 2 for a clone of such a clone, ...
    pub depth: u32,
    pub created_ns: TimeNs,
}

/// A share's snapshot schedule (`S` share-name; `crate::schedule`): a
/// snapshot `auto-YYYYMMDDTHHMMSSZ` every `every_s` seconds, the newest
/// `keep` scheduled ones kept (manual snapshots and those a clone stands
/// on are never deleted by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    pub every_s: u64,
    pub keep: u32,
}

/// A user (`u` name): what NTLMv2 needs (the NT one-way function of the
/// password, MS-NLMP 3.3.1), never the password.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub nt_hash: [u8; 16],
    pub enabled: bool,
}

/// A raft entry's payload: everything that changes metadata.
///
/// In the raft log it is stored in the cluster's own versioned format
/// ([`crate::command::encode_command`]), never with [`encode`]; the serde
/// derives remain only so that entries of the legacy (bincode) format can
/// still be read ([`crate::command::decode_command`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// First start: the root directory, the default share's directory, admin secrets.
    Init { now_ns: TimeNs, admin_secrets: Vec<(String, Vec<u8>)>, shares: Vec<ShareRecord> },
    Batch(Batch),
    PutShare { share: ShareRecord, replace: bool, now_ns: TimeNs },
    RemoveShare { name: String },
    PutUser { user: UserRecord, replace: bool },
    RemoveUser { name: String },
    /// The destager has applied every data record up to `upto` (inclusive)
    /// to the chunk store, and deleted the chunks of `reclaimed` files.
    /// To be retired: it names node-local progress. Its node-local
    /// replacement is `StoreHandle::destaged` (`machine::drop_destaged`,
    /// written by the store directly, no proposal); once the destager
    /// (`appliance/src/datapath.rs`) calls that, this variant is only
    /// applied from raft logs written before.
    Destaged { upto: u64, reclaimed: Vec<NodeId> },
    /// The raft leader's table of who holds the cluster's public service
    /// addresses (`[cluster] public_addresses`): (address, node id), the
    /// whole table, replacing the previous one (`crate::addresses`).
    PublicAddresses { assignment: Vec<(String, u64)> },
    /// Freezes the current state of share `share`'s directory as snapshot
    /// `name` taken at `now_ns`: constant time and metadata whatever the
    /// share's size (see `cluster/STORAGE-MODEL.md`, "Layers"). Appended
    /// last (legacy bincode entries never hold it).
    Snapshot { share: String, name: String, now_ns: TimeNs },
    /// Deletes snapshot `name` of share `share`: its layer's records move to
    /// the next older snapshot or are dropped, and the chunks only it held
    /// are detached for reclaim. `now_ns`: the `.snapshot` directory's new
    /// modification time.
    DropSnapshot { share: String, name: String, now_ns: TimeNs },
    /// Makes share `share` a writable clone of share `source` at its
    /// snapshot `snapshot` (none: a snapshot `clone.NAME` is taken first and
    /// dropped with the clone), in a constant number of keys (see
    /// `cluster/STORAGE-MODEL.md`, "Clones"). Appended last.
    Clone { source: String, snapshot: Option<String>, share: ShareRecord, now_ns: TimeNs },
    /// Sets (or, `None`, removes) share `share`'s snapshot schedule
    /// (`crate::schedule`; command tag 14). Appended last.
    SnapshotSchedule { share: String, schedule: Option<ScheduleRecord> },
}

/// Encodes a stored record (RocksDB). Raft commands use
/// [`crate::command::encode_command`] instead. The state machine writes
/// records through [`crate::kv::Txn::put_record`], which refuses the
/// whole transaction when one fails to encode (never an empty record).
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, String> {
    bincode::serialize(v).map_err(|e| e.to_string())
}

/// Decodes a record; `None` if the bytes are not one.
pub fn decode<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Option<T> {
    bincode::deserialize(b).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `DataOp::WriteInline` as it was declared before its data was
    /// encoded as bytes: the records stored then must keep decoding.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    enum OldDataOp {
        WriteInline { offset: u64, data: Vec<u8> },
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct OldDataRecord {
        file: NodeId,
        op: OldDataOp,
    }

    #[test]
    fn inline_write_records_keep_their_stored_layout() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let old = OldDataRecord { file: 42, op: OldDataOp::WriteInline { offset: 4096, data: data.clone() } };
        let new = DataRecord { file: 42, op: DataOp::WriteInline { offset: 4096, data: data.clone() } };
        let old_bytes = bincode::serialize(&old).unwrap();
        assert_eq!(encode(&new).unwrap(), old_bytes, "the same bytes as before");
        assert_eq!(decode::<DataRecord>(&old_bytes), Some(new.clone()));
        let back: OldDataRecord = bincode::deserialize(&encode(&new).unwrap()).unwrap();
        assert_eq!(back, old);
        // A length past the end is refused, never read out of bounds.
        let mut cut = old_bytes.clone();
        cut.truncate(old_bytes.len() - 1);
        assert_eq!(decode::<DataRecord>(&cut), None);
    }

    #[test]
    fn a_write_touches_only_ranges_it_overlaps() {
        let w = DataOp::WriteInline { offset: 100, data: vec![1; 50] };
        assert!(w.touches(0, 101) && w.touches(149, 200) && w.touches(120, 130));
        assert!(!w.touches(0, 100) && !w.touches(150, 300));
        let e = DataOp::WriteExtent { offset: 8192, extent: ExtentId { origin: 1, seq: 9 }, len: 8192 };
        assert!(e.touches(16383, 16384) && !e.touches(16384, 20000) && !e.touches(0, 8192));
        let l = DataOp::WriteLogged { offset: u64::MAX - 10, lsn: 3, len: 100 };
        assert!(l.touches(u64::MAX - 1, u64::MAX));
        for other in [DataOp::Truncate { size: 0 }, DataOp::Reclaim, DataOp::Zero { offset: 0, len: 1 }, DataOp::Recompress] {
            assert!(other.touches(1 << 40, (1 << 40) + 1), "{other:?} is always laid over");
        }
    }
}
