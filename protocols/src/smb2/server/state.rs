//! The SMB server's per-connection state (MS-SMB2 3.3.1): what NEGOTIATE
//! settled, sessions and their tree connects, file and pipe opens with
//! their enumeration state, and the blocking LOCK waiting in the lock
//! table. Plain data: the handlers (`conn.rs`, `session.rs`, `fsops.rs`,
//! `lock.rs`, `pipe.rs`, ...) change it; nothing here imports them.

use std::collections::HashMap;

use duet_fs::{Batch, Credentials, NodeId};
use duet_locks::{GrantId, Level};

use super::crypto::{CipherKey, SessionKeys, SigningKey};
use super::ShareEntry;
use crate::auth::ntlm::ServerContext;
use crate::dcerpc::Endpoint;
use crate::smb2::header::Header;

/// What NEGOTIATE settled.
#[derive(Debug, Clone)]
pub(super) struct Negotiated {
    pub dialect: u16,
    pub client_guid: [u8; 16],
    pub client_caps: u32,
    pub client_security_mode: u16,
    pub server_caps: u32,
    pub server_security_mode: u16,
    /// The cipher for encryption (3.x), if the client can encrypt.
    pub cipher: Option<u16>,
    /// 3.1.1 signs with AES-CMAC (else HMAC-SHA256 when negotiated).
    pub cmac: bool,
    /// 3.1.1 signs with AES-GMAC (negotiated in SIGNING_CAPABILITIES).
    pub gmac: bool,
}

/// One tree connect.
#[derive(Debug, Clone)]
pub(super) struct Tree {
    pub share: ShareEntry,
    pub ipc: bool,
}

#[derive(Debug)]
pub(super) enum AuthState {
    None,
    Ntlm {
        ctx: ServerContext,
        spnego: bool,
        mech_list: Vec<u8>,
    },
}

/// One session.
#[derive(Debug)]
pub(super) struct Session {
    pub valid: bool,
    pub auth: AuthState,
    pub preauth: [u8; 64],
    pub cred: Credentials,
    pub guest: bool,
    pub keys: Option<SessionKeys>,
    pub signing_required: bool,
    pub encrypt: bool,
    pub trees: HashMap<u32, Tree>,
    /// The other connections bound to it as channels (MS-SMB2 3.3.1.8
    /// Session.ChannelList), by connection key: each one's
    /// Channel.SigningKey, which checks and signs what comes and goes
    /// through it.
    pub channels: HashMap<u64, SigningKey>,
    /// This connection's own Channel.SigningKey when it differs from
    /// Session.SigningKey: the session was handed over to it by the
    /// connection that made it ([`MovedSession`]).
    pub own_key: Option<SigningKey>,
}

impl Session {
    /// The key that checks and signs the session's messages on the
    /// connection holding it.
    pub fn own_signing(&self) -> Option<SigningKey> {
        self.own_key.clone().or_else(|| self.keys.as_ref().map(|k| k.signing.clone()))
    }
}

/// A session handed over by the connection holding it, which was lost, to
/// one of its channels (multichannel, MS-SMB2 3.3.7.1: a session lives on
/// while a channel is up): what the session is, and its opens, kept in the
/// daemon-wide durable table meanwhile (`ShareModes::keep_durable`).
#[derive(Debug, Clone)]
pub struct MovedSession {
    pub(super) id: u64,
    pub(super) dialect: u16,
    pub(super) cipher: Option<u16>,
    pub(super) cred: Credentials,
    pub(super) guest: bool,
    pub(super) keys: Option<SessionKeys>,
    pub(super) signing_required: bool,
    pub(super) encrypt: bool,
    pub(super) trees: HashMap<u32, Tree>,
    /// Every channel left, by connection key, with its signing key.
    pub(super) channels: HashMap<u64, SigningKey>,
    /// The session's opens, kept (persistent file ids).
    pub(super) files: Vec<u64>,
}

impl MovedSession {
    /// Its opens, kept meanwhile (persistent file ids).
    pub fn files(&self) -> &[u64] {
        &self.files
    }

    /// The connections it may go to (its channels).
    pub fn candidates(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.channels.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

impl PartialEq for MovedSession {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && self.files == other.files
    }
}

impl Eq for MovedSession {}

/// A channel binding in progress on this connection (MS-SMB2 3.3.5.5):
/// the NTLM exchange that will give it its signing key.
#[derive(Debug)]
pub(super) struct Binding {
    /// The connection holding the session.
    pub owner: u64,
    pub auth: AuthState,
    /// The channel's preauth hash (3.1.1), from this connection's.
    pub preauth: [u8; 64],
}

/// A frame that came through a channel bound to one of this connection's
/// sessions: its connection, and the credits that connection granted each
/// message (the credit window is the channel's, MS-SMB2 3.3.1.1).
#[derive(Debug, Clone)]
pub(super) struct Via {
    pub channel: u64,
    pub grants: Vec<u16>,
}

/// One open (MS-SMB2 3.3.1.10), keyed by its volatile FileId.
#[derive(Debug, Clone)]
pub(super) struct Open {
    pub session_id: u64,
    pub tree_id: u32,
    pub node: NodeId,
    pub parent: NodeId,
    /// The last path component ("" for the share root).
    pub name: String,
    /// The path from the share root, components joined by '\'.
    pub path: String,
    pub is_dir: bool,
    pub granted: u32,
    pub options: u32,
    pub delete_on_close: bool,
    pub position: u64,
    pub dir: Option<DirState>,
    /// The oplock held (MS-SMB2 2.2.14 OplockLevel; 0 for none).
    pub oplock: u8,
    /// Its grant in the lock table.
    pub grant: Option<duet_locks::GrantId>,
    /// The level a break in progress lowers it to (Open.OplockState
    /// Breaking, MS-SMB2 3.3.1.10).
    pub breaking_to: Option<u8>,
    /// The LeaseKey of the lease it belongs to (Open.Lease, `lease.rs`).
    pub lease: Option<[u8; 16]>,
    /// Open.IsDurable with its timeout and CreateGuid (`durable.rs`).
    pub durable: Option<super::state::Durable>,
    /// Open.AppInstanceId (MS-SMB2 2.2.13.2.13, `durable.rs`).
    pub app_instance: Option<[u8; 16]>,
    /// A WRITE went through it: its close breaks its directory's leases
    /// (`lease.rs`).
    pub written: bool,
    /// Open.IsResilient with Open.ResiliencyTimeout in ms
    /// (FSCTL_LMR_REQUEST_RESILIENCY, MS-SMB2 3.3.5.15.9; `durable.rs`).
    pub resilient_ms: Option<u32>,
    /// Open.LockSequenceArray (MS-SMB2 3.3.1.10, 3.3.5.14): per index
    /// 1..=64 the last LockSequenceNumber applied, or [`NO_LOCK_SEQ`].
    pub lock_seq: [u8; 64],
}

/// An invalid entry of [`Open::lock_seq`] (sequence numbers are 4 bits).
pub(super) const NO_LOCK_SEQ: u8 = 0xFF;

/// A LOCK waiting in the lock table (MS-SMB2 3.3.5.14.2: a blocking lock
/// answered STATUS_PENDING, completed when granted, cancelled or dropped).
#[derive(Clone)]
pub(super) struct AsyncLock {
    pub waiter: duet_locks::WaiterId,
    /// The header of the final response (ASYNC form, this AsyncId).
    pub hdr: Header,
    pub sign: Option<SigningKey>,
    pub encrypt: Option<(u64, CipherKey)>,
    /// The channel the request came through (its response goes back
    /// there), None for this connection.
    pub channel: Option<u64>,
}

/// Enumeration state of a directory open (MS-SMB2 3.3.1.10
/// EnumerationLocation / SearchPattern).
#[derive(Debug, Clone, Default)]
pub struct DirState {
    pub pattern: String,
    /// The last name returned (or skipped): the next ReadDir starts after it.
    pub last: Option<String>,
    /// How many of "." and ".." were returned (or skipped).
    pub dots: u8,
    /// Positions passed since the enumeration (re)started: ".", "..",
    /// then every name in the order ReadDir gives (matching the pattern
    /// or not). An entry's FileIndex is its position, 1-based, which is
    /// also the 0-based offset of the entry after it: SMB2_INDEX_SPECIFIED
    /// "returns entries beginning at" that offset (MS-SMB2 2.2.33), i.e.
    /// after the entry whose FileIndex the client sends back.
    pub pos: u32,
    /// The position of the last entry returned, or the one the
    /// enumeration was last resumed after: every position from it to
    /// `pos` was passed without being returned (it did not match).
    pub returned_pos: u32,
    pub started: bool,
    pub eof: bool,
}

/// One open of a named pipe.
#[derive(Debug)]
pub(super) struct PipeOpen {
    pub session_id: u64,
    pub tree_id: u32,
    /// Which pipe (one of `pipe::PIPES`): which service answers.
    pub kind: &'static str,
    pub endpoint: Endpoint,
    /// FilePipeInformation (MS-FSCC 2.4.29): ReadMode, CompletionMode.
    pub read_mode: u32,
    pub completion_mode: u32,
}

/// The lock-table client of kept durable opens: no connection has this
/// key (connection keys are random; see [`super::Connection::key`]).
pub(super) const KEPT: u64 = u64::MAX - 1;

/// The durability of an open (MS-SMB2 3.3.1.10 Open.IsDurable,
/// Open.DurableOpenTimeout, Open.CreateGuid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Durable {
    /// Granted through DH2Q (else DHnQ).
    pub v2: bool,
    /// Open.CreateGuid (zeros for v1).
    pub create_guid: [u8; 16],
    pub timeout_ms: u32,
}

/// A durable open kept after its connection or session went away.
#[derive(Debug, Clone)]
pub(super) struct Kept {
    pub open: Open,
    /// Open.DurableOwner.
    pub cred: Credentials,
    /// Open.ClientGuid (the lease table's client).
    pub client_guid: [u8; 16],
    /// The share root of its tree connect.
    pub root: NodeId,
    /// When the scavenger closes it (ns).
    pub deadline: i64,
}

/// Durable opens whose connection is gone, by persistent file id
/// (3.3.1.10 GlobalOpenTable, the disconnected part of it).
#[derive(Debug, Default)]
pub struct DurableTable {
    pub(super) kept: HashMap<u64, Kept>,
    /// Batches of kept opens closed outside any connection (a break, the
    /// scavenger) for the driver to run.
    pub(super) closed: Vec<Batch>,
}

/// The lock-table owner bit of a lease (file ids never reach it).
pub(super) const LEASE_OWNER: u64 = 1 << 62;

/// Every client's leases (MS-SMB2 3.3.1.13 LeaseTable, by ClientGuid,
/// then 3.3.1.12 Lease by LeaseKey), shared by all connections.
#[derive(Debug, Default)]
pub struct Leases {
    pub(super) by_key: HashMap<([u8; 16], [u8; 16]), LeaseRec>,
    pub(super) next: u64,
}

/// One lease of a client (MS-SMB2 3.3.1.12 Lease), by LeaseKey.
#[derive(Debug, Clone)]
pub(super) struct LeaseRec {
    /// Its owner number in the lock table (`LEASE_OWNER` | n).
    pub owner: u64,
    /// The share-mode path key of its file (Lease.Filename).
    pub path: String,
    /// Its file, and whether that file had other names (hard links) when
    /// last opened: clients key leases by inode (the Linux cifs client
    /// sends one lease key for every name of a file), so another name of
    /// the same file is not "another file" (3.3.5.9.8).
    pub node: NodeId,
    pub linked: bool,
    pub grant: Option<GrantId>,
    /// Lease.LeaseState.
    pub state: Level,
    /// Lease.BreakToLeaseState while a break awaits its acknowledgment.
    pub breaking_to: Option<Level>,
    /// Lease.Epoch (v2 only).
    pub epoch: u16,
    /// Lease.Version 2.
    pub v2: bool,
    /// The ParentLeaseKey the client set, echoed in responses (v2).
    pub parent: Option<[u8; 16]>,
    /// The opens made with this key (Lease.LeaseOpens), by connection
    /// key and FileId.
    pub opens: Vec<(u64, u64)>,
    /// The connection and session of the last open, whose encryption the
    /// breaks use when they go out on that connection.
    pub session: (u64, u64),
}

/// The lock-table owner that stands for an open a CREATE has not made yet
/// (file ids count up from 1 and never reach it).
pub(super) const OPENER: u64 = u64::MAX;

/// A CREATE waiting for oplock breaks, by the AsyncId of its interim
/// answer: the frame (decrypted) to run again, and the files it waits on.
#[derive(Debug)]
pub(super) struct ParkedCreate {
    pub frame: Vec<u8>,
    pub encrypted_by: Option<u64>,
    /// The channel it came through, if not this connection.
    pub channel: Option<u64>,
    pub nodes: Vec<NodeId>,
    /// Side batches it waits for (`Connection::side_runs`).
    pub after: Vec<u64>,
    /// An open of another connection it waits to see closed
    /// (AppInstanceId, `durable.rs`).
    /// (the open, until when at most).
    pub gone: Option<((u64, u64), i64)>,
    /// A removal of the name it waits to see over (share-mode path key,
    /// until when at most; `ShareModes::removing_at`).
    pub removal: Option<(String, i64)>,
}

/// The watch of one directory open.
#[derive(Debug, Clone)]
pub(super) struct Watch {
    pub node: NodeId,
    pub parent: NodeId,
    pub name: String,
    pub filter: u32,
    pub tree: bool,
    /// The buffer for changes between requests: the first request's
    /// OutputBufferLength.
    pub capacity: u32,
    pub buffered: Vec<(u32, String)>,
    /// What `buffered` takes encoded, each entry padded to 4 bytes.
    pub padded: usize,
    /// Changes were lost: the next answer is STATUS_NOTIFY_ENUM_DIR.
    pub overflow: bool,
}

/// A CHANGE_NOTIFY answered STATUS_PENDING, waiting for a change.
#[derive(Clone)]
pub(super) struct WaitingNotify {
    pub file: u64,
    pub output_len: u32,
    pub reply: AsyncReply,
}

/// Where and how the final response of an async request goes (MS-SMB2
/// 3.3.4.2): its header in the ASYNC form, signed or encrypted as its
/// request was.
#[derive(Clone)]
pub(super) struct AsyncReply {
    pub hdr: Header,
    pub sign: Option<SigningKey>,
    pub encrypt: Option<(u64, CipherKey)>,
    /// The channel the request came through, None for this connection.
    pub channel: Option<u64>,
}
