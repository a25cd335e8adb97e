//! The batch: what one client chain (an SMB2 compound, an NFSv4 COMPOUND, an
//! NFSv3 call) becomes. The engine checks it, executes it as one metadata
//! commit and returns a result per operation.

use serde::{Deserialize, Serialize};

use crate::{Attrs, Credentials, FileType, FsError, NodeId, SetAttrs, TimeNs};

/// Refers to an object: by id, or as "the object operation N of this batch
/// produced" (a Lookup, Create or Open result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjRef {
    Id(NodeId),
    Result(usize),
}

/// What to create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CreateKind {
    File,
    Directory,
    Symlink { target: String },
    CharDevice { rdev: u64 },
    BlockDevice { rdev: u64 },
    Fifo,
    Socket,
}

impl CreateKind {
    pub fn file_type(&self) -> FileType {
        match self {
            CreateKind::File => FileType::Regular,
            CreateKind::Directory => FileType::Directory,
            CreateKind::Symlink { .. } => FileType::Symlink,
            CreateKind::CharDevice { .. } => FileType::CharDevice,
            CreateKind::BlockDevice { .. } => FileType::BlockDevice,
            CreateKind::Fifo => FileType::Fifo,
            CreateKind::Socket => FileType::Socket,
        }
    }
}

/// What to do when the name already exists (SMB create dispositions, NFS
/// createmode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IfExists {
    /// Fail with `Exists` (FILE_CREATE, NFS GUARDED/EXCLUSIVE).
    Fail,
    /// Open the existing object (FILE_OPEN_IF, NFS UNCHECKED).
    Open,
    /// Open and truncate to zero (FILE_OVERWRITE_IF).
    Truncate,
}

/// Access an open asks for; checked against the mode bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    pub read: bool,
    pub write: bool,
    pub execute: bool,
}

/// The name of a piece of write data, the same on every node of a cluster:
/// the node that took it in from a client (`origin`, a node id, from 1)
/// and that node's sequence number for it (`seq`, from 1, never reused).
/// The data itself lives in the write logs of the nodes that hold a copy.
///
/// Origin [`ExtentId::LEGACY_LOCAL`] (0) names a record of *this* node's
/// log by its log sequence number: what commands of format version 1 and
/// older, and queue records written before extents had names, mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExtentId {
    pub origin: u64,
    pub seq: u64,
}

impl ExtentId {
    /// The origin of data named before extents had cluster-wide names.
    pub const LEGACY_LOCAL: u64 = 0;

    /// The name with [`ExtentId::LEGACY_LOCAL`] resolved to `node`.
    pub fn resolved(self, node: u64) -> ExtentId {
        if self.origin == Self::LEGACY_LOCAL {
            ExtentId { origin: node, seq: self.seq }
        } else {
            self
        }
    }
}

/// Data of a write. Protocols hand over bytes; the engine moves data that
/// will not live inline into the write log first and proposes only the
/// extent's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteData {
    Bytes(#[serde(with = "serde_bytes_compat")] Vec<u8>),
    /// Made durable in this node's write log at `lsn`. Only decoded from
    /// old raft entries (legacy bincode, command format 1); the engine
    /// proposes [`WriteData::Extent`]. Same as an extent of origin
    /// [`ExtentId::LEGACY_LOCAL`].
    Logged { lsn: u64, len: u64 },
    /// Made durable in the write log as `extent`.
    /// (Appended last: legacy bincode entries keep decoding.)
    Extent { extent: ExtentId, len: u64 },
}

impl WriteData {
    pub fn len(&self) -> u64 {
        match self {
            WriteData::Bytes(b) => b.len() as u64,
            WriteData::Logged { len, .. } | WriteData::Extent { len, .. } => *len,
        }
    }

    /// The extent that holds the data, if it is in a write log.
    pub fn extent(&self) -> Option<ExtentId> {
        match self {
            WriteData::Bytes(_) => None,
            WriteData::Logged { lsn, .. } => Some(ExtentId { origin: ExtentId::LEGACY_LOCAL, seq: *lsn }),
            WriteData::Extent { extent, .. } => Some(*extent),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Serialises byte vectors as one byte string rather than a sequence.
mod serde_bytes_compat {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// One file-system operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Find `name` in `dir`. Produces the child.
    Lookup { dir: ObjRef, name: String },
    /// Create `name` in `dir`. Produces the new (or, with `IfExists::Open`,
    /// the existing) object.
    Create { dir: ObjRef, name: String, kind: CreateKind, attrs: SetAttrs, if_exists: IfExists },
    /// Open an object: checks `access`, optionally truncates. Produces it.
    /// Truncating by Open is SMB's FILE_OVERWRITE: it also deletes the
    /// file's named streams (MS-FSA 2.1.5.1.2.2).
    Open { obj: ObjRef, access: Access, truncate: bool },
    GetAttr { obj: ObjRef },
    SetAttr { obj: ObjRef, attrs: SetAttrs },
    /// Write at `offset`; with `append`, at the end of file (offset ignored).
    Write { obj: ObjRef, offset: u64, data: WriteData, append: bool },
    Read { obj: ObjRef, offset: u64, len: u64 },
    /// Releases an open; returns the final attributes (SMB CLOSE post-query).
    Close { obj: ObjRef },
    /// Unlink a non-directory (`dir_only: Some(false)`), remove an empty
    /// directory (`Some(true)`), or either (`None`).
    Remove { dir: ObjRef, name: String, dir_only: Option<bool> },
    Rename { src_dir: ObjRef, src_name: String, dst_dir: ObjRef, dst_name: String, replace: bool },
    Link { obj: ObjRef, dir: ObjRef, name: String },
    ReadLink { obj: ObjRef },
    /// Entries of `dir` whose names sort after `after` (None: from the start),
    /// at most `max_entries`.
    ReadDir { dir: ObjRef, after: Option<String>, max_entries: u32, with_attrs: bool },
    /// Server-side copy of `len` bytes (u64::MAX: to end of source).
    Copy { src: ObjRef, src_offset: u64, dst: ObjRef, dst_offset: u64, len: u64 },
    /// Find `name` in `dir`, and when no entry has exactly that name, the
    /// first (in name order) that equals it ignoring case (SMB clients
    /// expect case-insensitive names). Produces `OpOutput::Found` with the
    /// entry's real name. (Appended last: stored raft entries keep
    /// decoding.)
    LookupCaseless { dir: ObjRef, name: String },
    /// Sets extended attributes of `obj` (SMB EAs): each name (compared
    /// case-insensitively) gets its value; an empty value removes it.
    SetEas { obj: ObjRef, eas: Vec<(String, Vec<u8>)> },
    /// The extended attributes of `obj`, in name order.
    GetEas { obj: ObjRef },
    /// Zeros `[offset, offset+len)` of a regular file, clipped to its size;
    /// the size never changes (NFSv4.2 DEALLOCATE, RFC 7862 15.4; SMB
    /// FSCTL_SET_ZERO_DATA, MS-FSCC 2.3.85). Produces `OpOutput::Attrs`.
    ZeroRange { obj: ObjRef, offset: u64, len: u64 },
    /// As [`Op::Create`], for clients that see names case-insensitively
    /// (SMB, MS-FSCC 2.1.5): an entry whose name equals `name` ignoring
    /// case counts as existing (`IfExists::Fail` gives `Exists`, the
    /// others act on it); an existing entry, exact or not, produces
    /// `OpOutput::Found` with its real name. (Appended last: stored raft
    /// entries keep decoding.)
    CreateCaseless { dir: ObjRef, name: String, kind: CreateKind, attrs: SetAttrs, if_exists: IfExists },
    /// Sets or removes one extended attribute of `obj`, its name compared
    /// exactly (NFSv4.2 SETXATTR and REMOVEXATTR, RFC 8276 8.4.2 and
    /// 8.4.4), in the same store as SMB's EAs ([`Op::SetEas`]). `how` says
    /// whether the name must exist first; a missing one fails with
    /// `NotFound` (NFS4ERR_NOXATTR), an existing one under
    /// [`XattrHow::Create`] with `Exists`. Produces `OpOutput::Attrs` with
    /// `before`. (Appended last: stored raft entries keep decoding.)
    SetXattr { obj: ObjRef, name: String, value: Vec<u8>, how: XattrHow },
    /// Clones `len` bytes (u64::MAX: to the end of the source) of `src` at
    /// `src_offset` into `dst` at `dst_offset` by reference where it can
    /// (reflink: NFSv4.2 CLONE, RFC 7862 15.13; SMB
    /// FSCTL_DUPLICATE_EXTENTS_TO_FILE, MS-FSCC 2.3.8): chunks aligned on
    /// both sides are shared copy-on-write, the rest is copied. All or
    /// nothing (never a short count); `src` may be `dst`, its two ranges
    /// not overlapping (`Invalid`). With `extend` false, a destination
    /// range past the destination's end does nothing (`Copied` of 0 bytes:
    /// SMB clients extend the target first, MS-FSCC 2.3.8). Produces
    /// `OpOutput::Copied`. (Appended last: stored raft entries keep
    /// decoding.)
    Clone { src: ObjRef, src_offset: u64, dst: ObjRef, dst_offset: u64, len: u64, extend: bool },
    /// The snapshots of the share `obj` belongs to, newest first (SMB
    /// FSCTL_SRV_ENUMERATE_SNAPSHOTS, MS-SMB2 2.2.32.2): produces
    /// `OpOutput::Dir` whose entries are named by each snapshot's
    /// `@GMT-YYYY.MM.DD-HH.MM.SS` token ([`crate::view::gmt_token`]), each
    /// the snapshot's root directory. An object outside any share with
    /// layers lists none. (Appended last: stored raft entries keep
    /// decoding.)
    ListSnapshots { obj: ObjRef },
    /// The ranges of `[offset, offset+len)` (clipped to the file's size)
    /// that hold data, in order and merged (SMB
    /// FSCTL_QUERY_ALLOCATED_RANGES, MS-FSCC 2.3.51; NFSv4.2 SEEK, RFC
    /// 7862 15.11). The rest reads as zeros. Allocation is tracked in
    /// blocks of [`crate::ALLOC_BLOCK`] bytes of chunked files, so a range
    /// may start before and end after the bytes written in it; a hole is
    /// never reported where data lies. Read-only; produces
    /// `OpOutput::Ranges`. (Appended last: stored raft entries keep
    /// decoding.)
    Allocated { obj: ObjRef, offset: u64, len: u64 },
    /// Opens or creates the named stream `name` of `obj` (SMB alternate
    /// data streams, MS-FSCC 2.1.5: `file:name:$DATA`). A stream is a
    /// regular-file node of its own (its data inline or chunked like any
    /// file, so Read, Write and SetAttr act on it by id), reached only
    /// through its file: no directory entry names it. `name` is compared
    /// case-insensitively and kept in the case it was created with.
    /// `create` None opens an existing stream (`NotFound` otherwise); with
    /// `Some(how)` a missing stream is created with `attrs`, and an
    /// existing one is failed (`Exists`), opened or truncated as `how`
    /// says. Produces `OpOutput::Object` (the stream's node) for a new
    /// stream, `OpOutput::Found` with its name as created for an existing
    /// one. Streams of
    /// objects of a writable clone or a snapshot view are refused
    /// (`NotSupported`). (Appended last: stored raft entries keep
    /// decoding.)
    OpenStream { obj: ObjRef, name: String, attrs: SetAttrs, create: Option<IfExists> },
    /// The named streams of `obj`, in name order: `OpOutput::Dir`, each
    /// entry a stream's name, node and attributes. (Appended last.)
    ListStreams { obj: ObjRef },
    /// Deletes the named stream `name` of `obj` (its node and data).
    /// Produces `OpOutput::Attrs` of the stream as it was. (Appended last.)
    RemoveStream { obj: ObjRef, name: String },
    /// Renames the named stream `name` of `obj` to `new_name` (SMB
    /// FileRenameInformation of a stream handle to `:new_name`, MS-FSCC
    /// 2.4.42, MS-FSA 2.1.5.14.11): an existing stream of that name is
    /// `Exists` without `replace`, and with it is replaced only when empty
    /// (`Invalid` otherwise, as NTFS). Produces `OpOutput::Attrs` of the
    /// stream. (Appended last.)
    RenameStream { obj: ObjRef, name: String, new_name: String, replace: bool },
    /// Store `acl` as the object's DACL (issue 17): the descriptor's
    /// control word (DACL_PROTECTED, DACL_AUTO_INHERITED) and the encoded
    /// [`crate::acl::Acl`]; `None` drops it (access back to the mode
    /// bits). The mode becomes the DACL's ([`crate::acl::mode_from_dacl`],
    /// RFC 8881 6.4.1.3), special bits kept. The owner (or root, or a
    /// holder of WRITE_DAC) only. Produces `OpOutput::Attrs`. (Appended:
    /// stored raft entries keep decoding.)
    SetAcl { obj: ObjRef, acl: Option<(u16, Vec<u8>)> },
    /// The object's stored DACL, if any (read-only). Produces
    /// `OpOutput::Acl`.
    GetAcl { obj: ObjRef },
    /// Renames the named stream `name` of file `obj` onto the file's
    /// unnamed data stream (SMB FileRenameInformation of a stream handle
    /// to `::$DATA`, MS-FSA 2.1.5.14.11.1): the stream's data becomes the
    /// file's, its chunks shared by reference as [`Op::Clone`] shares
    /// them, and the stream is deleted, in one commit. A file whose data
    /// is not empty is `Exists` without `replace` (with it, its data is
    /// replaced); a directory is `Invalid`. Produces `OpOutput::Attrs` of
    /// the file. (Appended last.)
    RenameStreamToData { obj: ObjRef, name: String, replace: bool },
}

/// How [`Op::SetXattr`] treats an existing attribute (RFC 8276 8.4.2.1:
/// setxattr_option4, and 8.4.4 REMOVEXATTR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum XattrHow {
    /// Create it or replace its value (SETXATTR4_EITHER).
    Either,
    /// Create it; it must not exist (SETXATTR4_CREATE).
    Create,
    /// Replace its value; it must exist (SETXATTR4_REPLACE).
    Replace,
    /// Remove it; it must exist (REMOVEXATTR). `value` is empty.
    Remove,
}

impl Op {
    /// Whether this operation can change state (needs a commit).
    pub fn mutates(&self) -> bool {
        match self {
            Op::Lookup { .. } | Op::GetAttr { .. } | Op::Read { .. } | Op::Close { .. } => false,
            Op::LookupCaseless { .. } | Op::GetEas { .. } => false,
            Op::ReadLink { .. } | Op::ReadDir { .. } | Op::ListSnapshots { .. } => false,
            Op::Allocated { .. } => false,
            Op::ListStreams { .. } => false,
            Op::OpenStream { create, .. } => create.is_some(),
            Op::GetAcl { .. } => false,
            Op::Open { truncate, .. } => *truncate,
            Op::SetAttr { attrs, .. } => !attrs.is_empty(),
            _ => true,
        }
    }

    /// A short name for statistics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Lookup { .. } | Op::LookupCaseless { .. } => "lookup",
            Op::SetEas { .. } => "seteas",
            Op::GetEas { .. } => "geteas",
            Op::SetXattr { .. } => "setxattr",
            Op::Create { .. } | Op::CreateCaseless { .. } => "create",
            Op::Open { .. } => "open",
            Op::GetAttr { .. } => "getattr",
            Op::SetAttr { .. } => "setattr",
            Op::Write { .. } => "write",
            Op::Read { .. } => "read",
            Op::Close { .. } => "close",
            Op::Remove { .. } => "remove",
            Op::Rename { .. } => "rename",
            Op::Link { .. } => "link",
            Op::ReadLink { .. } => "readlink",
            Op::ReadDir { .. } => "readdir",
            Op::Copy { .. } => "copy",
            Op::Clone { .. } => "clone",
            Op::ZeroRange { .. } => "zero",
            Op::ListSnapshots { .. } => "listsnapshots",
            Op::Allocated { .. } => "allocated",
            Op::OpenStream { .. } => "openstream",
            Op::ListStreams { .. } => "liststreams",
            Op::RemoveStream { .. } => "removestream",
            Op::RenameStream { .. } | Op::RenameStreamToData { .. } => "renamestream",
            Op::SetAcl { .. } => "setacl",
            Op::GetAcl { .. } => "getacl",
        }
    }
}

/// A batch of operations run as one commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub cred: Credentials,
    pub ops: Vec<Op>,
    /// Stop at the first failing operation (NFSv4 COMPOUND, SMB related
    /// compounds); later operations get `FsError::Skipped`.
    pub stop_on_error: bool,
    /// Refuse every mutation (read-only share or export).
    pub read_only: bool,
    /// The batch's time, from the caller's clock.
    pub now_ns: TimeNs,
    /// Its changes may be answered once applied, before they are durable
    /// (a share with `durability = protocol`, and a request whose reply
    /// promises no durability: SMB WRITE without WRITE_THROUGH, NFS
    /// UNSTABLE WRITE); a group commit makes them durable within
    /// `[durability] window_ms`. False (the default): durable before the
    /// reply. Not part of the raft entry (it says how to answer, not what
    /// to change), nor of any serialisation.
    #[serde(skip)]
    pub lazy: bool,
    /// Every change answered before this batch is made durable before its
    /// reply (SMB FLUSH, MS-SMB2 3.3.5.11; NFS COMMIT, RFC 1813 3.3.21 /
    /// RFC 8881 18.3), even when the batch itself changes nothing. Not
    /// part of the raft entry, nor of any serialisation.
    #[serde(skip)]
    pub flush: bool,
    /// The batch's identity for exactly-once resend (`None`: none). A
    /// batch with one is executed at most once by the state machine; a
    /// resend of it (same id) is answered the first execution's results
    /// (`cluster/core/src/machine/sessions.rs`). Part of the raft entry
    /// (command tag `CMD_BATCH_ID`), not of the legacy serialisation.
    #[serde(skip)]
    pub request: Option<RequestId>,
}

/// Who sent a batch and which of its batches it is: the raft thesis' client
/// session (Ongaro, "Consensus: Bridging Theory and Practice", §6.3) with
/// the node as client. `origin`: the node id that first submitted it;
/// `epoch`: a nonce of that node's process start (never 0), so that a
/// restarted process's sequence numbers never name an earlier process's
/// batches; `seq`: the batch's number in that process, from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId {
    pub origin: u64,
    pub epoch: u64,
    pub seq: u64,
}

impl Batch {
    pub fn new(cred: Credentials, now_ns: TimeNs) -> Self {
        Batch { cred, ops: Vec::new(), stop_on_error: true, read_only: false, now_ns, lazy: false, flush: false, request: None }
    }
    pub fn push(&mut self, op: Op) -> ObjRef {
        self.ops.push(op);
        ObjRef::Result(self.ops.len() - 1)
    }
    pub fn mutates(&self) -> bool {
        self.ops.iter().any(Op::mutates)
    }
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub id: NodeId,
    pub ftype: FileType,
    pub attrs: Option<Attrs>,
    /// With attributes: the entry's extended attributes (for SMB's EaSize).
    #[serde(default)]
    pub eas: Vec<(String, Vec<u8>)>,
}

/// The result of one operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpOutput {
    /// Lookup, Create, Open: the object and its attributes; for Create,
    /// whether it was created, and the parent's attributes before and after
    /// (NFSv3 wcc data).
    Object { attrs: Attrs, created: bool, dir_before: Option<Attrs>, dir_after: Option<Attrs> },
    /// GetAttr, SetAttr, Close: attributes (SetAttr: before and after).
    Attrs { before: Option<Attrs>, attrs: Attrs },
    /// Write: bytes written, the offset written at, attributes before/after.
    Written { count: u64, offset: u64, before: Attrs, attrs: Attrs },
    Read { data: Vec<u8>, eof: bool, attrs: Attrs },
    /// Remove, Rename, Link: the directories' attributes before and after.
    Dirs { changed: Vec<(Attrs, Attrs)>, target: Option<Attrs> },
    Link { target: String, attrs: Attrs },
    Dir { entries: Vec<DirEntry>, eof: bool, attrs: Attrs },
    Copied { count: u64, attrs: Attrs },
    /// LookupCaseless: the entry's real name and its attributes.
    Found { name: String, attrs: Attrs },
    /// GetEas: the attributes' names and values, in name order.
    Eas { eas: Vec<(String, Vec<u8>)>, attrs: Attrs },
    /// Allocated: the `(offset, length)` ranges holding data, in order,
    /// merged, none empty.
    Ranges { ranges: Vec<(u64, u64)>, attrs: Attrs },
    /// GetAcl: the stored control word and bytes (the DACL, or a whole
    /// descriptor with an owner / group SID: [`OpOutput::stored_security`]
    /// reads both), `None` when the object has none (its DACL is its
    /// mode's, its owner and group its uid and gid).
    Acl { acl: Option<(u16, Vec<u8>)>, attrs: Attrs },
}

impl OpOutput {
    /// GetAcl's kept security decoded (`acl::Stored`, the one decoder for
    /// every reader): `Ok(None)` when none is kept or this is another
    /// output. An error (the state machine answers only records that
    /// decode, so a bug): callers grant nothing and answer an error.
    pub fn stored_security(&self) -> Result<Option<crate::acl::Stored>, crate::acl::AclError> {
        match self {
            OpOutput::Acl { acl: Some((c, b)), .. } => crate::acl::Stored::decode(*c, b).map(Some),
            _ => Ok(None),
        }
    }

    /// The attributes of the operation's own object, if it has one.
    pub fn attrs(&self) -> Option<&Attrs> {
        match self {
            OpOutput::Object { attrs, .. }
            | OpOutput::Attrs { attrs, .. }
            | OpOutput::Written { attrs, .. }
            | OpOutput::Read { attrs, .. }
            | OpOutput::Link { attrs, .. }
            | OpOutput::Dir { attrs, .. }
            | OpOutput::Copied { attrs, .. }
            | OpOutput::Found { attrs, .. }
            | OpOutput::Eas { attrs, .. }
            | OpOutput::Ranges { attrs, .. }
            | OpOutput::Acl { attrs, .. } => Some(attrs),
            OpOutput::Dirs { target, .. } => target.as_ref(),
        }
    }
}

pub type OpResult = Result<OpOutput, FsError>;

/// Back-end operations one batch cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchCost {
    pub proposals: u64,
    /// fsyncs the batch waited for (shared with the other batches of its group).
    pub fsyncs: u64,
    pub rocksdb_reads: u64,
    pub rocksdb_writes: u64,
    pub chunk_reads: u64,
    pub chunk_writes: u64,
    pub log_writes: u64,
}

impl BatchCost {
    pub fn add(&mut self, o: &BatchCost) {
        self.proposals += o.proposals;
        self.fsyncs += o.fsyncs;
        self.rocksdb_reads += o.rocksdb_reads;
        self.rocksdb_writes += o.rocksdb_writes;
        self.chunk_reads += o.chunk_reads;
        self.chunk_writes += o.chunk_writes;
        self.log_writes += o.log_writes;
    }
}

/// What the engine answers for a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchResult {
    pub results: Vec<OpResult>,
    pub cost: BatchCost,
}
