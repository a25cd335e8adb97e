//! Planning vocabulary shared by every handler: what a message of a frame
//! will answer (`Plan`, `FsPlan`), the frame being planned (`FramePlan`:
//! its slots, its one batch), the related-chain context, and the helpers
//! that make response bodies. Nothing here imports a handler module.

use std::collections::HashMap;

use duet_fs::{Batch, Credentials, NodeId, ObjRef, Op};

use super::crypto::{CipherKey, SigningKey};
use super::state::{DirState, Open};
use crate::smb2::error::ErrorResponse;
use crate::smb2::header::{Header, HEADER_SIZE};
use crate::smb2::message::Response;
use crate::smb2::status::NtStatus;
use crate::smb2::cursor::Utf16;
use crate::smb2::FileId;
use crate::smb2::lock::LockElement;
use crate::smb2::fscc::DirectoryInfoClass;

/// MS-SMB2 2.1: the Direct TCP header carries the length of the message
/// (or compound, or transformed message) in 3 bytes (StreamProtocolLength,
/// after a zero byte): no frame can be longer.
pub const MAX_FRAME: usize = 0x00FF_FFFF;


/// Which file a command acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// An open of the table (volatile id).
    Table(u64),
    /// The open a CREATE earlier in this frame makes (its slot).
    Pending(usize),
}

/// What a message of the frame will answer.
pub(super) enum Plan {
    Done { status: NtStatus, body: Vec<u8> },
    Fs(FsPlan),
}

pub(super) struct Slot {
    /// The request header with the session and tree ids resolved; the
    /// response header is made from it.
    pub hdr: Header,
    pub credits: u16,
    pub sign: Option<SigningKey>,
    pub plan: Plan,
}

/// The related-chain context while planning (3.3.5.2.7.2).
#[derive(Debug, Clone, Default)]
pub(super) struct Chain {
    pub file: Option<Target>,
    pub error: Option<NtStatus>,
    /// The named pipe open of the chain (`pipe.rs`), instead of `file`.
    pub pipe: Option<u64>,
    /// The frame's first message carries SMB2_FLAGS_RELATED_OPERATIONS,
    /// which is invalid (3.3.5.2.7.2).
    pub first_related: bool,
}

/// An answer that needs the results of the frame's batch but no operation
/// of its own (it is completed in `finish`, in slot order).
pub(super) enum Deferred {
    /// FSCTL_CREATE_OR_GET_OBJECT_ID on an open a CREATE of this frame
    /// makes: the object id is derived from the node.
    ObjectId { target: Target, ctl_code: u32 },
    /// CHANGE_NOTIFY, last in its compound, on a directory a CREATE of
    /// this frame opens: it starts waiting once the CREATE has made the
    /// open, and its slot is the interim STATUS_PENDING (MS-SMB2 3.3.4.2,
    /// Windows' compound behavior of <159>/<162>).
    Notify { target: Target, flags: u16, filter: u32, output_len: u32 },
    /// A command refused while planning, on an open a CREATE of this frame
    /// makes: the CREATE's error if it fails (3.3.5.2.7.2), else `status`.
    Status {
        target: Target,
        status: NtStatus,
        body: Vec<u8>,
    },
}

/// A frame being planned or waiting for its batch.
pub(super) struct FramePlan {
    pub slots: Vec<Slot>,
    pub batch: Option<Batch>,
    pub batch_session: u64,
    pub all_read_only: bool,
    pub pending_opens: HashMap<usize, PendingOpen>,
    pub encrypt: Option<(u64, CipherKey)>,
    pub now_ns: i64,
    pub tag: &'static str,
    /// Slots answered by `finish` from the batch results (see [`Deferred`]).
    pub deferred: HashMap<usize, Deferred>,
    /// The most bytes the responses planned so far can take (see
    /// [`COMPOUND_RESPONSE_MAX`]).
    pub reserved: u64,
    /// A request of the frame asks for durability (WRITE_THROUGH) / is a
    /// FLUSH: see [`ShareEntry::protocol_durability`].
    pub durable: bool,
    pub flush: bool,
    /// The lease named as ParentLeaseKey by an open of the frame (a
    /// CREATE's v2 lease context, or the lease of an open the frame
    /// changes through): the directory lease its changes do not break
    /// (MS-SMB2 3.3.4.7, `lease.rs`).
    pub parent_lease: Option<duet_locks::Holder>,
    /// Share-mode path keys of the files this frame's batch removes for
    /// dropped opens (`ShareModes::begin_removal`), ended when the batch
    /// is over.
    pub removals: Vec<String>,
    /// The channel the frame came through (its responses go back there),
    /// None for this connection.
    pub channel: Option<u64>,
}

impl FramePlan {
    /// An empty plan for one frame (or for the closing of a connection).
    pub fn new(now_ns: i64, tag: &'static str) -> FramePlan {
        FramePlan {
            slots: Vec::new(),
            batch: None,
            batch_session: 0,
            all_read_only: true,
            pending_opens: HashMap::new(),
            encrypt: None,
            now_ns,
            tag,
            deferred: HashMap::new(),
            reserved: 0,
            durable: false,
            flush: false,
            parent_lease: None,
            removals: Vec::new(),
            channel: None,
        }
    }

    /// The batch for a message of `session_id` (None when the frame already
    /// batches for another session).
    pub fn batch_for(
        &mut self,
        session_id: u64,
        cred: &Credentials,
        read_only: bool,
    ) -> Option<&mut Batch> {
        match &self.batch {
            Some(_) if self.batch_session != session_id => return None,
            Some(_) => {}
            None => {
                let mut b = Batch::new(cred.clone(), self.now_ns);
                b.stop_on_error = false;
                self.batch = Some(b);
                self.batch_session = session_id;
            }
        }
        self.all_read_only &= read_only;
        self.batch.as_mut()
    }

    pub fn push(&mut self, op: Op) -> usize {
        let b = self.batch.as_mut().expect("batch_for before push");
        b.ops.push(op);
        b.ops.len() - 1
    }
}

/// FILE_OBJECTID_BUFFER (MS-FSCC 2.1.3): four 16-byte ids.
/// Wraps one message or compound in the 4-byte Direct TCP header; None
/// when it is longer than the header can say ([`MAX_FRAME`]): the caller
/// drops the connection rather than send a length that wrapped.
pub(super) fn transport(frame: Vec<u8>) -> Option<Vec<u8>> {
    if frame.len() > MAX_FRAME {
        return None;
    }
    let mut out = Vec::with_capacity(frame.len() + 4);
    out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    out.extend_from_slice(&frame);
    Some(out)
}

pub(super) fn error_body() -> Vec<u8> {
    let mut b = Vec::with_capacity(9);
    ErrorResponse::EMPTY.encode(&mut b);
    b
}

pub(super) fn done(status: NtStatus) -> Plan {
    Plan::Done {
        status,
        body: error_body(),
    }
}

pub(super) fn body_of(r: &Response<'_>) -> Vec<u8> {
    // Response encoders compute offsets as 64 + body position: encode after
    // a dummy header, then drop it.
    let mut out = vec![0u8; HEADER_SIZE];
    r.encode(&mut out);
    out.split_off(HEADER_SIZE)
}

pub(super) fn ok(r: Response<'_>) -> Plan {
    Plan::Done {
        status: NtStatus::SUCCESS,
        body: body_of(&r),
    }
}

/// The open a CREATE of this frame will make, as later commands of the
/// same related chain see it while planning.
#[derive(Debug, Clone)]
pub struct PendingOpen {
    pub obj: ObjRef,
    pub parent: ObjRef,
    pub name: String,
    pub granted: u32,
    pub is_dir: Option<bool>,
    pub delete_on_close: bool,
}

/// A CREATE waiting for its operations.
#[derive(Debug)]
pub struct CreatePlan {
    pub first_op: usize,
    /// The path starts with `.snapshot\@GMT-...` from a TWrp context or
    /// an `@GMT-` token (its first two lookups).
    pub timewarp: bool,
    pub final_op: usize,
    pub open_op: Option<usize>,
    pub disposition: u32,
    pub options: u32,
    pub desired: u32,
    pub mxac: bool,
    pub qfid: bool,
    pub root: NodeId,
    pub read_only: bool,
    pub session_id: u64,
    pub tree_id: u32,
    pub name: String,
    pub path: String,
    /// The named stream opened (MS-FSCC 2.1.5.1), if any: `path` is then
    /// its file's and `name` is `:stream`.
    pub stream: Option<String>,
    /// The path named the unnamed stream explicitly (`file::$DATA`).
    pub data: bool,
    pub share_access: u32,
    /// SetEas of the CREATE's EA buffer, if any.
    pub ea_op: Option<usize>,
    /// GetAcl of the opened object: a stored DACL decides the access
    /// granted (issue 17).
    pub acl_op: Option<usize>,
    /// GetAcl of the parent directory of a nested name opened for DELETE
    /// (or MAXIMUM_ALLOWED, or delete-on-close).
    pub parent_acl_op: Option<usize>,
    /// GetAcl of the share root, when a name directly in it is opened for
    /// DELETE (its permission check needs the root's attributes and DACL).
    pub root_attrs_op: Option<usize>,
    /// RequestedOplockLevel (MS-SMB2 2.2.13).
    pub oplock: u8,
    /// The lease asked for, when the dialect allows it (`lease.rs`).
    pub lease: Option<crate::smb2::create_context::Lease>,
    /// DHnQ / DH2Q (`durable.rs`).
    pub durable: Option<super::plan::DurableRequest>,
    /// SMB2_CREATE_APP_INSTANCE_ID (with DH2Q only).
    pub app_instance: Option<[u8; 16]>,
    /// A reconnected durable open (DHnC / DH2C) or a replayed DH2Q: the
    /// open (already in the table) the response describes, and whether
    /// the DH2Q response context goes with it (a replay).
    pub reattach: Option<(u64, bool)>,
}

#[derive(Debug)]
pub enum SetKind {
    /// One SetAttr (or nothing).
    Plain,
    Disposition {
        check_op: Option<usize>,
        /// A file's attributes, to refuse READONLY (MS-FSA 2.1.5.14.3).
        attr_op: Option<usize>,
    },
    Rename {
        first_lookup: usize,
        dst_op: usize,
        name: String,
        path: String,
        root: NodeId,
    },
    Link {
        first_lookup: usize,
        link_op: usize,
    },
    Position(u64),
    /// FileRenameInformation of a stream handle to `:name`: the open's
    /// new stream name.
    StreamRename {
        op: usize,
        name: String,
        root: NodeId,
    },
    /// FileRenameInformation of a stream handle to `::$DATA`: the open
    /// becomes an open of its file at `path` (the directory found by the
    /// lookups from `first_lookup` to `op`).
    StreamToData {
        first_lookup: usize,
        op: usize,
        path: String,
        root: NodeId,
    },
    /// FileModeInformation (MS-FSCC 2.4.26): the open's mode bits.
    Mode(u32),
}

/// A file-system command waiting for the batch.
#[derive(Debug)]
pub enum FsPlan {
    Create(Box<CreatePlan>),
    Close {
        target: Target,
        closed: Option<Box<Open>>,
        close_op: Option<usize>,
        postquery: bool,
    },
    Flush {
        target: Target,
    },
    Read {
        target: Target,
        op: usize,
        offset: u64,
        min_count: u32,
        len: u32,
    },
    Write {
        target: Target,
        op: usize,
    },
    QueryInfo {
        target: Target,
        op: Option<usize>,
        /// GetEas for the classes that report EAs (EA, ALL, FULL_EA).
        ea_op: Option<usize>,
        /// GetAttr of a named stream's node (`op` is then its file's).
        stream_op: Option<usize>,
        info_type: u8,
        class: u8,
        out_len: u32,
        addl: u32,
        root: NodeId,
        share: String,
    },
    SetInfo {
        target: Target,
        op: Option<usize>,
        kind: SetKind,
    },
    QueryDir {
        target: Target,
        op: usize,
        class: DirectoryInfoClass,
        out_len: u32,
        single: bool,
        state: DirState,
        dots: bool,
        exact: bool,
        /// An earlier QUERY_DIRECTORY of the same frame enumerates the same
        /// open: this one continues where that one stops.
        chained: bool,
        /// SMB2_INDEX_SPECIFIED moved the enumeration: the positions up to
        /// this one are passed without being returned.
        resume_at: u32,
    },
    Lock {
        target: Target,
        elements: Vec<LockElement>,
    },
    /// FSCTL_SRV_COPYCHUNK(_WRITE): one `Op::Copy` per chunk, in order.
    CopyChunk {
        target: Target,
        ops: Vec<usize>,
        ctl_code: u32,
        file_id: FileId,
    },
    /// FSCTL_SRV_ENUMERATE_SNAPSHOTS: one `Op::ListSnapshots`.
    Snapshots {
        target: Target,
        op: usize,
        ctl_code: u32,
        file_id: FileId,
        max_out: u32,
    },
    /// FSCTL_SET_SPARSE (one `Op::SetAttr`, ONLY_SPARSE),
    /// FSCTL_SET_COMPRESSION (one `Op::SetAttr`, ONLY_COMPRESSED) and
    /// FSCTL_SET_ZERO_DATA (one `Op::ZeroRange`): no output.
    NoOutput {
        target: Target,
        op: usize,
        ctl_code: u32,
        file_id: FileId,
    },
    /// FSCTL_GET_COMPRESSION: one `Op::GetAttr`; the output is the
    /// node's CompressionState (MS-FSCC 2.3.22).
    GetCompression {
        target: Target,
        op: usize,
        ctl_code: u32,
        file_id: FileId,
    },
    /// FSCTL_FILE_LEVEL_TRIM: one `Op::ZeroRange` per range; the output
    /// counts the ranges done before the first that failed.
    Trim {
        target: Target,
        ops: Vec<usize>,
        ctl_code: u32,
        file_id: FileId,
    },
    /// FSCTL_QUERY_ALLOCATED_RANGES: one `Op::GetAttr`; the asked range.
    AllocatedRanges {
        target: Target,
        op: usize,
        ctl_code: u32,
        file_id: FileId,
        range: (u64, u64),
        max_out: u32,
    },
    /// FSCTL_DUPLICATE_EXTENTS_TO_FILE: one `Op::Clone`.
    DupExtents {
        target: Target,
        op: usize,
        ctl_code: u32,
        file_id: FileId,
    },
}

/// A UTF-16 string of the wire as Rust text (lossy).
pub(super) fn text(u: &Utf16<'_>) -> String {
    u.to_string_lossy()
}

/// A durable request a CREATE carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DurableRequest {
    pub v2: bool,
    pub timeout_ms: u32,
    pub create_guid: [u8; 16],
}

/// A reconnect request (DHnC / DH2C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reconnect {
    pub persistent: u64,
    /// DH2C: its CreateGuid.
    pub v2: Option<[u8; 16]>,
}

/// The operation that deletes what an open names: its directory entry,
/// or, for an open of a named stream (its `name` is `:stream`, `parent`
/// the file), that stream alone.
pub(super) fn removal(parent: ObjRef, name: &str, is_dir: Option<bool>) -> Op {
    match name.strip_prefix(':') {
        Some(stream) => Op::RemoveStream { obj: parent, name: stream.to_string() },
        None => Op::Remove { dir: parent, name: name.to_string(), dir_only: is_dir },
    }
}
