//! The SMB2/3 server protocol state machine, sans-I/O (in the style of
//! quinn-proto): a [`Connection`] takes transport frames in and gives
//! [`Event`]s out: frames to send, and duet [`Batch`]es to run on the
//! engine, whose results come back through [`Connection::on_batch_done`].
//!
//! The product's core idea lives here: every file-system command of one
//! transport frame (an SMB2 compound: CREATE + WRITE + SET_INFO + CLOSE of a
//! small-file copy, CREATE + QUERY_INFO + CLOSE of a stat) becomes ONE
//! batch, the later operations referring to the objects of the earlier ones
//! with `ObjRef::Result`, and the per-operation results become the
//! per-command responses of one compound response.
//!
//! Code map, in layers (a module imports only from the layers below it;
//! no two files import each other):
//! - data: `state` (what a connection holds: NEGOTIATE's outcome,
//!   sessions and trees, file and pipe opens, durable and lease records,
//!   watches, parked CREATEs and blocking LOCKs), `plan` (what a frame
//!   will answer: `Plan`, `FsPlan`, `FramePlan` and the response helpers),
//!   `crypto` (PRNG, KDF, signing, encryption, preauth hash), `info`
//!   (FILETIME, NTSTATUS of FsError, access masks, security descriptors,
//!   patterns);
//! - shared tables: `sharemode` (the daemon-wide share modes, leases
//!   and kept durable opens over the lock table), `registry` (the
//!   daemon-wide session table: sessions other connections name);
//! - the connection: `conn` (framing, credits, dispatch, CANCEL, IOCTL,
//!   response assembly);
//! - handlers, each an `impl Connection`: `session` (NEGOTIATE,
//!   SESSION_SETUP, LOGOFF, TREE_CONNECT/DISCONNECT, a lost connection),
//!   `fsops` (CREATE, CLOSE, READ, WRITE, QUERY_DIRECTORY, QUERY_INFO,
//!   SET_INFO, FLUSH: planning into the batch and answering from its
//!   results), `lock` (byte-range LOCK), `pipe` (named pipes on IPC$: the
//!   srvsvc and lsarpc pipes carrying DCE/RPC to `crate::dcerpc`), `oplock` (grants,
//!   breaks routed as [`Event::Recall`], acks, parked CREATEs), `lease`,
//!   `notify` (CHANGE_NOTIFY), `durable` (durable and resilient handles).
//!
//! Architecture Invariant: the SMB server's modules import in layers:
//! `state`/`plan` never import `conn`, `conn` never imports a handler.
//!
//! Architecture Invariant: no I/O, no clock, no OS randomness: time comes
//! as `now_ns`, randomness from the seed given to [`Connection::new`].

mod conn;
mod lock;
mod plan;
mod session;
mod state;
pub mod crypto;
pub mod durable;
mod fsops;
pub mod info;
mod lease;
mod notify;
mod oplock;
mod pipe;
pub mod sharemode;
pub mod registry;

use std::net::SocketAddr;
use std::sync::Arc;

use duet_fs::{Batch, NodeId};

use crate::smb2::negotiate::dialect;

pub use conn::Connection;
pub use notify::{encode_entries, Notified, WatchedDir, DIR_REMOVED, MAX_WATCHES};
pub use sharemode::ShareModes;
pub use state::MovedSession;
pub use registry::{GlobalSession, SessionRegistry};
pub use info::fs_status;

/// What the server offers and enforces.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub server_guid: [u8; 16],
    /// NetBIOS name of the server (NTLM target info).
    pub server_name: String,
    /// NetBIOS domain or workgroup (NTLM target name).
    pub domain: String,
    /// Dialects the server accepts, any order.
    pub dialects: Vec<u16>,
    /// Require signed messages on every authenticated session.
    pub require_signing: bool,
    /// Encrypt every authenticated session (3.x clients that can).
    pub encrypt: bool,
    pub max_read_size: u32,
    pub max_write_size: u32,
    pub max_transact_size: u32,
    /// The most credits a client may hold.
    pub max_credits: u16,
    pub max_sessions: usize,
    pub max_trees_per_session: usize,
    pub max_opens: usize,
    /// Opens one session may hold (a CREATE over it gets
    /// STATUS_TOO_MANY_OPENED_FILES).
    pub max_opens_per_session: usize,
    /// CHANGE_NOTIFY watches one connection may hold, and as many waiting
    /// requests (more get STATUS_INSUFFICIENT_RESOURCES).
    pub max_watches: usize,
    pub max_locks: usize,
    /// Frames whose batches may be in flight at once.
    pub max_pending: usize,
    /// Credentials of the guest (anonymous logons on guest shares).
    pub guest_uid: u32,
    pub guest_gid: u32,
    /// What FileFsSizeInformation and FileFsFullSizeInformation report
    /// (MS-FSCC 2.5.8, 2.5.4): the appliance keeps it current.
    pub space: Arc<crate::space::Space>,
    /// The local address of this connection, for
    /// FSCTL_QUERY_NETWORK_INTERFACE_INFO; None answers NOT_SUPPORTED.
    pub interface: Option<SocketAddr>,
    pub link_speed: u64,
    /// The daemon-wide share-mode table: give every connection the same
    /// one (the default makes a private table).
    pub share_modes: Arc<ShareModes>,
    /// The daemon-wide session table (MS-SMB2 GlobalSessionTable): give
    /// every connection the same one (the default makes a private table).
    pub sessions: Arc<SessionRegistry>,
    /// Offer SMB2_GLOBAL_CAP_MULTI_CHANNEL (3.x) and bind channels to
    /// sessions (MS-SMB2 3.3.5.5).
    pub multichannel: bool,
    /// How long a durable handle is kept after its connection is lost
    /// (ms): DHnQ, and DH2Q asking 0 (`[limits] smb_durable_timeout_ms`;
    /// MS-SMB2 3.3.5.9.6 / 3.3.5.9.10). DH2Q may ask up to
    /// [`durable::MAX_TIMEOUT_MS`].
    pub durable_timeout_ms: u32,
    /// Durable handles kept at most, daemon-wide (`[limits]
    /// smb_durable_handles`); past it a lost connection's durable opens
    /// close as others do.
    pub max_durable: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            server_guid: *b"duet-server-guid",
            server_name: "DUET".to_string(),
            domain: "WORKGROUP".to_string(),
            dialects: vec![
                dialect::SMB2_0_2,
                dialect::SMB2_1,
                dialect::SMB3_0,
                dialect::SMB3_0_2,
                dialect::SMB3_1_1,
            ],
            require_signing: false,
            encrypt: false,
            max_read_size: 8 << 20,
            max_write_size: 8 << 20,
            max_transact_size: 8 << 20,
            // What Windows Server grants (smbtorture smb2.credits).
            max_credits: 8192,
            max_sessions: 64,
            max_trees_per_session: 64,
            max_opens: 16384,
            max_opens_per_session: 16384,
            max_watches: MAX_WATCHES,
            max_locks: 4096,
            max_pending: 256,
            guest_uid: 65534,
            guest_gid: 65534,
            space: Arc::new(crate::space::Space::new(1 << 40, 1 << 39, 1 << 39)),
            interface: None,
            link_speed: 10_000_000_000,
            share_modes: Arc::new(ShareModes::new()),
            sessions: Arc::new(SessionRegistry::new()),
            multichannel: true,
            durable_timeout_ms: 60_000,
            max_durable: 4096,
        }
    }
}

/// A user, as the admin database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserEntry {
    pub nt_hash: [u8; 16],
    pub uid: u32,
    pub gid: u32,
    pub enabled: bool,
}

/// A share, with its root resolved to a node by the appliance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareEntry {
    pub name: String,
    pub root: NodeId,
    pub read_only: bool,
    pub guest_ok: bool,
    /// Require encryption on this share (3.x).
    pub encrypt: bool,
    /// The share's durability is `protocol`: a change is answered before
    /// it is durable unless its request asks for durability (WRITE with
    /// SMB2_WRITEFLAG_WRITE_THROUGH or on a FILE_WRITE_THROUGH open, a
    /// CREATE with FILE_WRITE_THROUGH, MS-SMB2 2.2.13 / 2.2.21; FLUSH,
    /// 3.3.5.11, makes everything before it durable). False: every change
    /// is durable before its reply.
    pub protocol_durability: bool,
}

/// Users and shares; the appliance implements it over its admin database.
pub trait Directory {
    fn user(&self, name: &str) -> Option<UserEntry>;
    /// Case-insensitive lookup is the implementer's choice.
    fn share(&self, name: &str) -> Option<ShareEntry>;
    fn shares(&self) -> Vec<ShareEntry>;
    /// Whether the user with `uid` may connect to share `name` (the share's
    /// allowed users); TREE_CONNECT answers ACCESS_DENIED otherwise.
    fn may_connect(&self, name: &str, uid: u32) -> bool {
        let _ = (name, uid);
        true
    }
    /// How SIDs are shown to clients: duet's users and their groups under
    /// the machine SID (`duet_fs::acl::SidMap`). None: as stored (S-1-22).
    fn sid_map(&self) -> Option<std::sync::Arc<duet_fs::acl::SidMap>> {
        None
    }
    /// duet's users (name, uid, primary gid), ordered by uid: what the
    /// LSA lookups of `\PIPE\lsarpc` name (`crate::dcerpc::lsarpc`).
    /// None by default: every SID then shows by number.
    fn users_by_uid(&self) -> Vec<crate::dcerpc::lsarpc::Account> {
        Vec::new()
    }
}

/// What the connection asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Send this whole transport frame (the 4-byte Direct TCP length prefix
    /// included).
    Send(Vec<u8>),
    /// Run `batch` on the engine and call [`Connection::on_batch_done`] with
    /// `token` and the result. `tag` names the frame's first command, for
    /// statistics.
    Run {
        token: u64,
        batch: Batch,
        tag: &'static str,
        /// The directory lease the batch's changes do not break (the
        /// ParentLeaseKey of the open making them, MS-SMB2 3.3.4.7); the
        /// driver breaks every other lease of each directory the batch
        /// changes (`lease.rs`).
        exempt: Option<duet_locks::Holder>,
    },
    /// Close the transport connection.
    Close,
    /// Deliver this oplock break to the connection whose [`Connection::key`]
    /// is `holder.client` (this one, or another on any executor), which
    /// passes it to its [`Connection::on_recall`].
    Recall(duet_locks::Break),
    /// A client reconnected with PreviousSessionId (MS-SMB2 3.3.5.5.3):
    /// every other connection passes this to its
    /// [`Connection::end_previous_session`], and the one that holds
    /// session `previous` of the same user ends it. `from` is this
    /// connection's [`Connection::key`].
    EndSession { previous: u64, uid: u32, from: u64 },
    /// Close open `file` of the connection whose [`Connection::key`] is
    /// `conn` (MS-SMB2 3.3.5.9.13: a new open with the same AppInstanceId
    /// replaces it); that connection passes it to its
    /// [`Connection::close_open`].
    CloseOpen { conn: u64, file: u64 },
    /// Directory or file `node` became delete-pending daemon-wide (its
    /// delete-on-close open closed while other opens remain, MS-FSA
    /// 2.1.5.4): every other connection watching it completes its
    /// waiting CHANGE_NOTIFYs with STATUS_DELETE_PENDING (the driver
    /// routes it as a [`Notified`] with [`DIR_REMOVED`]). `from` is this
    /// connection's [`Connection::key`], whose own watches already know.
    DeletePending { node: NodeId, from: u64 },
    /// Send this whole transport frame on the connection whose
    /// [`Connection::key`] is `conn`: a channel bound to one of this
    /// connection's sessions (MS-SMB2 3.3.5.5), which answers what came
    /// through it. Its driver writes the frame as it is.
    SendOn { conn: u64, frame: Vec<u8> },
    /// A frame for a session of connection `owner`, to which this
    /// connection (`channel`) is bound as a channel: the driver hands it
    /// to `owner`'s [`Connection::on_channel_frame`]; when `owner` is
    /// gone, back to this connection's [`Connection::on_channel_lost`].
    /// `grants` are the credits this connection granted each message (the
    /// credit window is the channel's, MS-SMB2 3.3.1.1); `encrypted_by`
    /// the session that encrypted it (decrypted here).
    Forward { owner: u64, channel: u64, frame: Vec<u8>, grants: Vec<u16>, encrypted_by: Option<u64> },
    /// This connection (`channel`) was bound to session `session` of
    /// connection `owner` with Channel.SigningKey `key`: the driver hands
    /// it to `owner`'s [`Connection::add_channel`] (before any frame
    /// forwarded through the channel).
    Bound { owner: u64, session: u64, channel: u64, key: crypto::SigningKey },
    /// This connection is gone but its session has channels: the driver
    /// hands the session to the first of `session.candidates()` still up,
    /// whose [`Connection::adopt_session`] takes it and its opens over.
    /// Nobody taking it, its opens close when their keep time ends.
    Adopt(Box<MovedSession>),
}
