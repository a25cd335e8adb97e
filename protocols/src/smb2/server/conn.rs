//! The connection: framing, credits, NEGOTIATE, SESSION_SETUP, signing,
//! encryption, trees, LOCK, IOCTL, ECHO, and the assembly of compound
//! responses. File-system commands are planned into the frame's batch by
//! `fsops`.

use std::collections::{BTreeSet, HashMap, VecDeque};

use duet_fs::{Batch, BatchResult, Credentials, NodeId, ObjRef, Op, OpResult};

use super::crypto::{derive_keys, preauth_update, CipherKey, Rng, SessionKeys, SigningKey};
use super::fsops::{DirState, FsPlan, PendingOpen};
use super::info::{access, extra_status, to_filetime};
use super::pipe::PipeOpen;
use super::{Directory, Event, ServerConfig, ShareEntry};
use crate::auth::ntlm::{self, NtlmError, ServerContext};
use crate::auth::spnego::{self, ClientToken, NegState};
use crate::smb2::compound::Compound;
use crate::smb2::cursor::Utf16;
use crate::smb2::error::ErrorResponse;
use crate::smb2::header::{Command, Header, HeaderFlags, HeaderIds, HEADER_SIZE};
use crate::smb2::ioctl::{
    ctl_code, IoctlRequest, IoctlResponse, NetworkInterfaceInfo, ValidateNegotiateInfoRequest,
    ValidateNegotiateInfoResponse,
};
use crate::smb2::lock::{LockElement, LockRequest, LockResponse};
use duet_locks::{LockError, Range};
use crate::smb2::message::{Request, Response};
use crate::smb2::negotiate::{
    algorithm, capabilities, dialect, security_mode, NegotiateContext, NegotiateRequest,
    NegotiateResponse,
};
use crate::smb2::session_setup::{SessionSetupRequest, SessionSetupResponse};
use crate::smb2::status::NtStatus;
use crate::smb2::transform::{FrameKind, TransformHeader};
use crate::smb2::tree_connect::{TreeConnectRequest, TreeConnectResponse};
use crate::smb2::FileId;

/// The credit window (MS-SMB2 3.3.1.1 / 3.3.1.2): ids below `low` are used;
/// ids in `[low, high)` are granted, those in `used` already consumed.
#[derive(Debug)]
struct Credits {
    low: u64,
    high: u64,
    used: BTreeSet<u64>,
}

impl Credits {
    fn consume(&mut self, id: u64, charge: u16) -> bool {
        let charge = u64::from(charge.max(1));
        let Some(end) = id.checked_add(charge) else {
            return false;
        };
        if id < self.low || end > self.high {
            return false;
        }
        if self.used.range(id..end).next().is_some() {
            return false;
        }
        for m in id..end {
            self.used.insert(m);
        }
        while self.used.remove(&self.low) {
            self.low += 1;
        }
        true
    }

    fn outstanding(&self) -> u64 {
        (self.high - self.low).saturating_sub(self.used.len() as u64)
    }

    /// Grants up to `requested` credits, keeping at most `max` outstanding
    /// and the window (the lowest unused id to the highest granted one) at
    /// most `4 * max` wide, which bounds `used` when a client skips an id
    /// (MS-SMB2 3.3.1.1 lets the server limit the window).
    fn grant(&mut self, requested: u16, max: u16) -> u16 {
        let outstanding = self.outstanding();
        let room = u64::from(max).saturating_sub(outstanding);
        let window_room = (4 * u64::from(max)).saturating_sub(self.high - self.low);
        let mut g = u64::from(requested).min(room).min(window_room);
        if outstanding == 0 && g == 0 {
            g = 1;
        }
        self.high += g;
        g as u16
    }
}

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
enum AuthState {
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
    auth: AuthState,
    preauth: [u8; 64],
    pub cred: Credentials,
    pub guest: bool,
    pub keys: Option<SessionKeys>,
    pub signing_required: bool,
    pub encrypt: bool,
    pub trees: HashMap<u32, Tree>,
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
    pub durable: Option<super::durable::Durable>,
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
}

/// Where and how the final response of an async request goes (MS-SMB2
/// 3.3.4.2): its header in the ASYNC form, signed or encrypted as its
/// request was.
#[derive(Clone)]
pub(super) struct AsyncReply {
    pub hdr: Header,
    pub sign: Option<SigningKey>,
    pub encrypt: Option<(u64, CipherKey)>,
}

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
const OBJECT_ID_BUFFER_SIZE: usize = 64;

/// One response of a frame: request header, credits, signing key, status, body.
type Answered = (Header, u16, Option<SigningKey>, NtStatus, Vec<u8>);

/// An SMB2/3 server connection, sans-I/O.
pub struct Connection {
    pub(super) cfg: ServerConfig,
    /// This connection's key in the daemon-wide share-mode table.
    pub(super) conn_key: u64,
    rng: Rng,
    pub(super) negotiated: Option<Negotiated>,
    credits: Credits,
    preauth: [u8; 64],
    pub(super) sessions: HashMap<u64, Session>,
    pub(super) opens: HashMap<u64, Open>,
    /// Named pipe opens on IPC$ (`pipe.rs`), keyed like `opens`.
    pub(super) pipes: HashMap<u64, PipeOpen>,
    next_tree_id: u32,
    /// Blocking LOCKs waiting, by AsyncId.
    pub(super) async_locks: HashMap<u64, AsyncLock>,
    /// The AsyncId of the interim answer `dispatch` just planned.
    last_async: Option<AsyncLock>,
    next_async_id: u64,
    /// Directory watches by open (`notify.rs`).
    pub(super) watches: HashMap<u64, super::notify::Watch>,
    /// CHANGE_NOTIFYs answered STATUS_PENDING, by AsyncId.
    pub(super) notifies: std::collections::BTreeMap<u64, super::notify::WaitingNotify>,
    /// The CHANGE_NOTIFY `dispatch` just made wait.
    pub(super) last_notify: Option<super::notify::WaitingNotify>,
    pub(super) watches_changed: bool,
    pending: HashMap<u64, FramePlan>,
    /// Frames (decrypted, with the session that encrypted them) held back
    /// until the batches in progress finish: a CLOSE must not overtake the
    /// requests sent before it on its handle (a QUERY_DIRECTORY then CLOSE
    /// sent together: the listing is answered, then the close), and what
    /// came after a held frame waits behind it. See [`Connection::resume`].
    held: VecDeque<(Vec<u8>, Option<u64>)>,
    next_token: u64,
    nonce_prefix: [u8; 4],
    nonce_counter: u64,
    closed: bool,
    /// What planning decided for other connections (oplock breaks to
    /// route), sent out ahead of the frame's own events.
    pub(super) outbox: Vec<Event>,
    /// CREATEs waiting for oplock breaks, by AsyncId (`oplock.rs`).
    pub(super) parked: HashMap<u64, super::oplock::ParkedCreate>,
    /// Set by a CREATE that must wait: the files whose breaks it awaits.
    pub(super) park: Option<Vec<NodeId>>,
    /// The AsyncId of the parked CREATE being run again.
    pub(super) resuming: Option<u64>,
    /// Batches this connection runs for others (removing the
    /// delete-on-close file of a kept durable open a break closed), by
    /// token, until they are done.
    pub(super) side_runs: std::collections::HashSet<u64>,
    /// Set with `park`: the side batches the parked CREATE waits for.
    pub(super) park_after: Vec<u64>,
    /// Set with `park`: the open (connection key, file id) another
    /// connection is asked to close first (AppInstanceId).
    pub(super) park_gone: Option<((u64, u64), i64)>,
    /// Set with `park`: the share-mode path key whose removal (for an
    /// open dropped elsewhere) the parked CREATE waits for, until when
    /// at most.
    pub(super) park_removal: Option<(String, i64)>,
    /// Removals run for dropped opens by a batch that is not a frame's
    /// (a lost connection's, an ended session's): token -> path keys.
    side_removals: HashMap<u64, Vec<String>>,
    /// The session a SESSION_SETUP just created, for its response header.
    last_new_session: u64,
    /// The tree a TREE_CONNECT just made, for its response header.
    last_new_tree: u32,
}

/// MS-SMB2 2.1: the Direct TCP header carries the length of the message
/// (or compound, or transformed message) in 3 bytes (StreamProtocolLength,
/// after a zero byte): no frame can be longer.
pub const MAX_FRAME: usize = 0x00FF_FFFF;

/// What the responses of one compound may take together, before the
/// TRANSFORM_HEADER of an encrypted reply (MS-SMB2 2.2.41, 52 bytes).
pub const COMPOUND_RESPONSE_MAX: u64 = (MAX_FRAME - TransformHeader::SIZE) as u64;

/// Counted for every message of a compound on top of its variable output:
/// the 64-byte header, padding to 8 and a fixed response body (the largest,
/// CREATE's 88 bytes with its create contexts, is under 512 bytes; the
/// others are under 64).
const RESPONSE_OVERHEAD: u64 = 128;

/// The most variable output (data, listing, information, FSCTL output) a
/// response to `req` can carry: the length the request asks for, which
/// the server never exceeds (MS-SMB2 3.3.5.12, 3.3.5.18, 3.3.5.20, 3.3.5.15,
/// 3.3.5.19).
fn response_output_bound(req: &Request<'_>) -> u64 {
    match req {
        Request::Read(r) => u64::from(r.length),
        Request::QueryDirectory(q) => u64::from(q.output_buffer_length),
        Request::QueryInfo(q) => u64::from(q.output_buffer_length),
        Request::Ioctl(io) => u64::from(io.max_output_response),
        Request::ChangeNotify(n) => u64::from(n.output_buffer_length),
        // Its create contexts (lease, durable handle, maximal access,
        // on-disk id) take up to 512 bytes beyond RESPONSE_OVERHEAD.
        Request::Create(_) => 512,
        _ => 0,
    }
}

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

/// The body of a LOCK response (MS-SMB2 2.2.27).
fn lock_body() -> Vec<u8> {
    let mut out = vec![0u8; HEADER_SIZE];
    Response::Lock(LockResponse).encode(&mut out);
    out.split_off(HEADER_SIZE)
}

pub(super) fn done(status: NtStatus) -> Plan {
    Plan::Done {
        status,
        body: error_body(),
    }
}

fn body_of(r: &Response<'_>) -> Vec<u8> {
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

/// The bytes of one response message: header and body.
fn message_bytes(hdr: &Header, status: NtStatus, credits: u16, body: &[u8]) -> Vec<u8> {
    let mut h = hdr.response(status, credits);
    if hdr.flags.is_related() {
        h.flags.0 |= HeaderFlags::RELATED_OPERATIONS;
    }
    let mut out = Vec::with_capacity(HEADER_SIZE + body.len());
    h.encode(&mut out);
    out.extend_from_slice(body);
    out
}

impl Connection {
    /// A new connection. `seed` must be fresh randomness (32 bytes or more).
    pub fn new(cfg: ServerConfig, now_ns: i64, seed: &[u8]) -> Connection {
        let _ = now_ns;
        let mut rng = Rng::new(seed);
        let nonce_prefix = rng.bytes();
        let conn_key = rng.u64();
        Connection {
            cfg,
            conn_key,
            rng,
            negotiated: None,
            credits: Credits {
                low: 0,
                high: 1,
                used: BTreeSet::new(),
            },
            preauth: [0; 64],
            sessions: HashMap::new(),
            opens: HashMap::new(),
            pipes: HashMap::new(),
            next_tree_id: 1,
            async_locks: HashMap::new(),
            last_async: None,
            next_async_id: 1,
            watches: HashMap::new(),
            notifies: std::collections::BTreeMap::new(),
            last_notify: None,
            watches_changed: false,
            pending: HashMap::new(),
            held: VecDeque::new(),
            next_token: 1,
            nonce_prefix,
            nonce_counter: 0,
            closed: false,
            outbox: Vec::new(),
            parked: HashMap::new(),
            park: None,
            resuming: None,
            side_runs: Default::default(),
            park_after: Vec::new(),
            park_gone: None,
            park_removal: None,
            side_removals: HashMap::new(),
            last_new_session: 0,
            last_new_tree: 0,
        }
    }

    /// The negotiated dialect, once NEGOTIATE is done.
    pub fn dialect(&self) -> Option<u16> {
        self.negotiated.as_ref().map(|n| n.dialect)
    }

    /// Open files on this connection.
    pub fn open_count(&self) -> usize {
        self.opens.len()
    }

    /// Whether the connection was closed (after an [`Event::Close`]).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn close(&mut self) -> Vec<Event> {
        self.closed = true;
        self.pending.clear();
        self.held.clear();
        self.parked.clear();
        self.notifies.clear();
        self.outbox.clear();
        if !self.watches.is_empty() {
            self.watches.clear();
            self.watches_changed = true;
        }
        vec![Event::Close]
    }

    /// One transport frame (without its 4-byte length prefix).
    pub fn on_frame(&mut self, frame: &[u8], now_ns: i64, dir: &dyn Directory) -> Vec<Event> {
        if self.closed {
            return Vec::new();
        }
        match FrameKind::of(frame) {
            Ok(FrameKind::Plain) if self.must_hold(frame) => self.hold(frame.to_vec(), None),
            Ok(FrameKind::Plain) => self.process(frame, None, now_ns, dir),
            Ok(FrameKind::Smb1) => self.smb1_negotiate(frame, now_ns),
            Ok(FrameKind::Encrypted) => {
                let Ok((th, _)) = TransformHeader::decode(frame) else {
                    return self.close();
                };
                let key = self
                    .sessions
                    .get(&th.session_id)
                    .and_then(|s| s.keys.as_ref())
                    .and_then(|k| k.decrypt.clone());
                let Some(key) = key else { return self.close() };
                match key.decrypt(frame) {
                    Some(plain) if FrameKind::of(&plain) == Ok(FrameKind::Plain) && self.must_hold(&plain) => {
                        self.hold(plain, Some(th.session_id))
                    }
                    Some(plain) if FrameKind::of(&plain) == Ok(FrameKind::Plain) => {
                        self.process(&plain, Some(th.session_id), now_ns, dir)
                    }
                    _ => self.close(),
                }
            }
            _ => self.close(),
        }
    }

    /// Whether `frame` must wait for the batches in progress: it closes a
    /// handle while some run, or frames are already waiting.
    fn must_hold(&self, frame: &[u8]) -> bool {
        !self.held.is_empty() || (!self.pending.is_empty() && chain_has(frame, Command::CLOSE))
    }

    fn hold(&mut self, frame: Vec<u8>, encrypted_by: Option<u64>) -> Vec<Event> {
        if self.held.len() >= self.cfg.max_pending {
            return self.close(); // a client piling up closes behind a slow batch
        }
        self.held.push_back((frame, encrypted_by));
        Vec::new()
    }

    /// How many frames wait behind the batches in progress (the driver
    /// counts them with its requests in progress).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Runs the frames held back by [`Connection::on_frame`] that may go
    /// now. The driver calls it after every [`Connection::on_batch_done`].
    pub fn resume(&mut self, now_ns: i64, dir: &dyn Directory) -> Vec<Event> {
        let mut out = Vec::new();
        while !self.closed {
            match self.held.front() {
                Some((f, _)) if self.pending.is_empty() || !chain_has(f, Command::CLOSE) => {}
                _ => break,
            }
            let Some((frame, enc)) = self.held.pop_front() else { break };
            out.extend(self.process(&frame, enc, now_ns, dir));
        }
        out
    }

    /// The result of the batch of an [`Event::Run`].
    pub fn on_batch_done(&mut self, token: u64, result: BatchResult, now_ns: i64) -> Vec<Event> {
        let _ = now_ns;
        if let Some(mut paths) = self.side_removals.remove(&token) {
            self.end_removals(&mut paths);
            return Vec::new();
        }
        if self.side_runs.remove(&token) {
            return Vec::new();
        }
        let Some(fp) = self.pending.remove(&token) else {
            return Vec::new();
        };
        let mut events = self.finish(fp, result.results);
        // Breaks decided while finishing (an open that recalls NFSv4
        // delegations) go first, as in `process`.
        if !self.outbox.is_empty() {
            let mut out = std::mem::take(&mut self.outbox);
            out.append(&mut events);
            events = out;
        }
        events
    }

    // ---- framing -------------------------------------------------------

    /// A multi-protocol SMB1 NEGOTIATE (MS-SMB2 3.3.5.3.1).
    fn smb1_negotiate(&mut self, frame: &[u8], now_ns: i64) -> Vec<Event> {
        if self.negotiated.is_some() || frame.len() < 35 || frame[4] != 0x72 {
            return self.close();
        }
        let byte_count = usize::from(u16::from_le_bytes([frame[33], frame[34]]));
        let names = frame
            .get(35..35 + byte_count)
            .unwrap_or(&frame[frame.len().min(35)..]);
        let dialects: Vec<&[u8]> = names
            .split(|b| *b == 0)
            .map(|s| s.strip_prefix(&[2]).unwrap_or(s))
            .collect();
        let wildcard = dialects.iter().any(|d| *d == b"SMB 2.???");
        let smb202 = dialects.iter().any(|d| *d == b"SMB 2.002");
        let chosen = if wildcard && self.cfg.dialects.iter().any(|d| *d > dialect::SMB2_0_2) {
            dialect::SMB2_WILDCARD
        } else if (smb202 || wildcard) && self.cfg.dialects.contains(&dialect::SMB2_0_2) {
            dialect::SMB2_0_2
        } else {
            return self.close();
        };
        if !self.credits.consume(0, 1) {
            return self.close();
        }
        let credits = self.credits.grant(1, self.cfg.max_credits);
        let hint = spnego::server_hint();
        let resp = self.negotiate_response(chosen, &hint, Vec::new(), now_ns);
        if chosen == dialect::SMB2_0_2 {
            self.negotiated = Some(Negotiated {
                dialect: chosen,
                client_guid: [0; 16],
                client_caps: 0,
                client_security_mode: 0,
                server_caps: 0,
                server_security_mode: resp.security_mode,
                cipher: None,
                cmac: false,
                gmac: false,
            });
        }
        let hdr = Header {
            credit_charge: 0,
            status: NtStatus::SUCCESS,
            command: Command::NEGOTIATE,
            credit: 1,
            flags: HeaderFlags(0),
            next_command: 0,
            message_id: 0,
            ids: HeaderIds::Sync {
                process_id: 0,
                tree_id: 0,
            },
            session_id: 0,
            signature: [0; 16],
        };
        let msg = message_bytes(
            &hdr,
            NtStatus::SUCCESS,
            credits,
            &body_of(&Response::Negotiate(resp)),
        );
        match transport(msg) {
            Some(f) => vec![Event::Send(f)],
            None => self.close(),
        }
    }

    /// This connection's key: the lock table's client for its opens, and
    /// the key the driver registers it under to route breaks to it.
    pub fn key(&self) -> u64 {
        self.conn_key
    }

    /// Encrypts one message for session `sid` (the next nonce).
    pub(super) fn seal(&mut self, sid: u64, key: &CipherKey, msg: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; 16];
        nonce[..4].copy_from_slice(&self.nonce_prefix);
        nonce[4..12].copy_from_slice(&self.nonce_counter.to_le_bytes());
        self.nonce_counter += 1;
        key.encrypt(sid, nonce, msg)
    }

    pub(super) fn process(
        &mut self,
        frame: &[u8],
        encrypted_by: Option<u64>,
        now_ns: i64,
        dir: &dyn Directory,
    ) -> Vec<Event> {
        let mut events = self.process_inner(frame, encrypted_by, now_ns, dir);
        if !self.outbox.is_empty() {
            let mut out = std::mem::take(&mut self.outbox);
            out.append(&mut events);
            events = out;
        }
        events
    }

    fn process_inner(
        &mut self,
        frame: &[u8],
        encrypted_by: Option<u64>,
        now_ns: i64,
        dir: &dyn Directory,
    ) -> Vec<Event> {
        let mut fp = FramePlan::new(now_ns, "");
        let mut chain = Chain::default();
        let mut prev: Option<Header> = None;
        let mut cancelled = Vec::new();
        for (i, m) in Compound::new(frame).enumerate() {
            let m = match m {
                Ok(m) => m,
                Err(_) if i == 0 => return self.close(),
                Err(_) => break,
            };
            let mut hdr = m.header;
            if hdr.flags.is_response() {
                return self.close();
            }
            if hdr.command == Command::CANCEL {
                // No response of its own, no credit (3.3.5.16): the
                // request it names (a blocking LOCK, a CHANGE_NOTIFY or a
                // parked CREATE, by AsyncId or MessageId) completes with
                // STATUS_CANCELLED.
                cancelled.extend(self.cancel(&hdr));
                continue;
            }
            let charge = if self.dialect().unwrap_or(0) == dialect::SMB2_0_2 {
                1
            } else {
                hdr.credit_charge
            };
            // A parked CREATE run again was charged, and granted its
            // credits in its interim answer (MS-SMB2 3.3.4.2).
            let credits = if self.resuming.is_some() {
                0
            } else {
                if !self.credits.consume(hdr.message_id, charge) {
                    return self.close();
                }
                self.credits.grant(hdr.credit, self.cfg.max_credits)
            };
            let related = i > 0 && hdr.flags.is_related();
            if !related {
                chain = Chain::default();
            }
            chain.first_related = i == 0 && hdr.flags.is_related();
            if let (true, Some(p)) = (related, prev) {
                if hdr.session_id == u64::MAX {
                    hdr.session_id = p.session_id;
                }
                if let (
                    HeaderIds::Sync {
                        process_id,
                        tree_id: u32::MAX,
                    },
                    Some(t),
                ) = (hdr.ids, p.tree_id())
                {
                    hdr.ids = HeaderIds::Sync {
                        process_id,
                        tree_id: t,
                    };
                }
            }
            if fp.tag.is_empty() {
                fp.tag = hdr.command.name().unwrap_or("UNKNOWN");
            }
            fp.reserved += RESPONSE_OVERHEAD;
            let slot_index = fp.slots.len();
            let (plan, sign) = self.dispatch(
                &mut fp,
                &mut chain,
                slot_index,
                &hdr,
                m.bytes,
                related,
                encrypted_by,
                dir,
            );
            prev = Some(hdr);
            if self.closed {
                return vec![Event::Close];
            }
            // A session setup may have assigned the session id.
            let hdr = match &plan {
                Plan::Done { .. } if hdr.command == Command::SESSION_SETUP => {
                    let mut h = hdr;
                    if h.session_id == 0 {
                        h.session_id = self.last_new_session;
                    }
                    h
                }
                _ => hdr,
            };
            let mut hdr = hdr;
            if hdr.command == Command::TREE_CONNECT {
                if let HeaderIds::Sync { process_id, .. } = hdr.ids {
                    if self.last_new_tree != 0 {
                        hdr.ids = HeaderIds::Sync {
                            process_id,
                            tree_id: self.last_new_tree,
                        };
                        self.last_new_tree = 0;
                    }
                }
            }
            // A CREATE waiting for oplock breaks: an interim answer in
            // the ASYNC form now (MS-SMB2 3.3.4.2), the final one when
            // `poll_opens` runs the frame again; run again and still
            // waiting, it is parked again without a second interim.
            if let Some(nodes) = self.park.take() {
                let park = super::oplock::ParkedCreate {
                    frame: frame.to_vec(),
                    encrypted_by,
                    nodes,
                    after: std::mem::take(&mut self.park_after),
                    gone: self.park_gone.take(),
                    removal: self.park_removal.take(),
                };
                if let Some(async_id) = self.resuming {
                    self.parked.insert(async_id, park);
                    return Vec::new();
                }
                let async_id = self.next_async_id;
                self.next_async_id += 1;
                hdr.flags.0 |= crate::smb2::header::HeaderFlags::ASYNC_COMMAND;
                hdr.ids = HeaderIds::Async { async_id };
                self.parked.insert(async_id, park);
            } else if let Some(async_id) = self.resuming {
                hdr.flags.0 |= crate::smb2::header::HeaderFlags::ASYNC_COMMAND;
                hdr.ids = HeaderIds::Async { async_id };
            }
            // A blocking LOCK that waits: its interim answer is in the
            // ASYNC form (MS-SMB2 3.3.4.2), the final one comes later.
            if let Some(mut a) = self.last_async.take() {
                hdr.flags.0 |= crate::smb2::header::HeaderFlags::ASYNC_COMMAND;
                hdr.ids = a.hdr.ids;
                a.hdr = hdr;
                a.sign = sign.clone();
                a.encrypt = fp.encrypt.clone();
                if let HeaderIds::Async { async_id } = hdr.ids {
                    self.async_locks.insert(async_id, a);
                }
            }
            // A CHANGE_NOTIFY that waits for a change: likewise.
            if let Some(mut n) = self.last_notify.take() {
                hdr.flags.0 |= crate::smb2::header::HeaderFlags::ASYNC_COMMAND;
                hdr.ids = n.reply.hdr.ids;
                n.reply = AsyncReply { hdr, sign: sign.clone(), encrypt: fp.encrypt.clone() };
                if let HeaderIds::Async { async_id } = hdr.ids {
                    self.notifies.insert(async_id, n);
                }
            }
            fp.slots.push(Slot {
                hdr,
                credits,
                sign,
                plan,
            });
            if hdr.command == Command::SESSION_SETUP || hdr.command == Command::NEGOTIATE {
                self.hash_response(fp.slots.last());
            }
        }
        if fp.slots.is_empty() {
            return cancelled;
        }
        if !cancelled.is_empty() {
            let mut out = cancelled;
            out.extend(self.finish_frame(fp));
            return out;
        }
        self.finish_frame(fp)
    }

    /// Runs the frame's batch, or answers it at once when it has none.
    fn finish_frame(&mut self, mut fp: FramePlan) -> Vec<Event> {
        match fp.batch.take() {
            Some(mut batch) if !batch.ops.is_empty() => {
                if self.pending.len() >= self.cfg.max_pending {
                    // Fail what needed the engine; answer the rest.
                    let n = batch.ops.len();
                    let results = vec![Err(duet_fs::FsError::Skipped); n];
                    for s in fp.slots.iter_mut() {
                        if matches!(s.plan, Plan::Fs(_)) {
                            s.plan = done(NtStatus::INSUFFICIENT_RESOURCES);
                        }
                    }
                    return self.finish(fp, results);
                }
                batch.read_only = fp.all_read_only;
                // Answered before durable only on `protocol` shares, when
                // nothing in the frame asks for durability.
                batch.flush = fp.flush;
                batch.lazy = !fp.durable
                    && !fp.flush
                    && fp.slots.iter().filter(|s| matches!(s.plan, Plan::Fs(_))).all(|s| {
                        self.tree_of(&s.hdr).is_ok_and(|(_, t)| t.share.protocol_durability)
                    });
                let token = self.next_token;
                self.next_token += 1;
                let tag = fp.tag;
                let exempt = fp.parent_lease;
                self.pending.insert(token, fp);
                vec![Event::Run { token, batch, tag, exempt }]
            }
            _ => self.finish(fp, Vec::new()),
        }
    }

    /// The removals `paths` are over (their batch is done, or there was
    /// none).
    fn end_removals(&mut self, paths: &mut Vec<String>) {
        for p in paths.drain(..) {
            self.cfg.share_modes.end_removal(&p);
        }
    }

    /// Whether a batch of this connection still removes a file for
    /// dropped opens (the driver of a lost connection waits for those:
    /// `on_batch_done`).
    pub fn removing(&self) -> bool {
        !self.side_removals.is_empty()
    }

    /// Gives up waiting for the removals still running (the lost
    /// connection's driver stopped waiting): the names are released.
    pub fn abandon_removals(&mut self) {
        let all: Vec<Vec<String>> = self.side_removals.drain().map(|(_, v)| v).collect();
        for mut paths in all {
            self.end_removals(&mut paths);
        }
    }

    /// Builds every response of the frame and the one frame to send.
    fn finish(&mut self, mut fp: FramePlan, results: Vec<OpResult>) -> Vec<Event> {
        let mut removals = std::mem::take(&mut fp.removals);
        self.end_removals(&mut removals);
        let mut created: HashMap<usize, Result<u64, NtStatus>> = HashMap::new();
        let slots = std::mem::take(&mut fp.slots);
        let mut answered: Vec<Answered> = Vec::with_capacity(slots.len());
        for (i, s) in slots.into_iter().enumerate() {
            let (status, body) = match s.plan {
                Plan::Done { status, body } => match fp.deferred.remove(&i) {
                    Some(d) => self.complete_deferred(d, &created),
                    None => (status, body),
                },
                Plan::Fs(p) => self.complete(&mut fp, i, p, &results, &mut created),
            };
            answered.push((s.hdr, s.credits, s.sign, status, body));
        }
        // Assemble: pad every message of a compound to 8 (the last one
        // too, as Windows and Samba do), chain NextCommand, then sign each
        // message over its bytes (padding included).
        let mut out = Vec::new();
        let mut spans = Vec::with_capacity(answered.len());
        let n = answered.len();
        for (i, (hdr, credits, _, status, body)) in answered.iter().enumerate() {
            let start = out.len();
            let body = if Response::has_command_body(hdr.command, *status) || !body.is_empty() {
                body.clone()
            } else {
                error_body()
            };
            out.extend_from_slice(&message_bytes(hdr, *status, *credits, &body));
            if n > 1 {
                while (out.len() - start) % 8 != 0 {
                    out.push(0);
                }
            }
            if i + 1 < n {
                let next = (out.len() - start) as u32;
                out[start + 20..start + 24].copy_from_slice(&next.to_le_bytes());
            }
            spans.push(start..out.len());
        }
        if fp.encrypt.is_none() {
            for ((_, _, sign, _, _), span) in answered.iter().zip(&spans) {
                if let Some(k) = sign {
                    k.sign_in_place(&mut out[span.clone()]);
                }
            }
        }
        if let Some((sid, key)) = fp.encrypt.take() {
            let mut nonce = [0u8; 16];
            nonce[..4].copy_from_slice(&self.nonce_prefix);
            nonce[4..12].copy_from_slice(&self.nonce_counter.to_le_bytes());
            self.nonce_counter += 1;
            match key.encrypt(sid, nonce, &out) {
                Some(f) => out = f,
                None => return self.close(),
            }
        }
        // Never reached while the reservations of `dispatch` hold (they
        // count every response's largest size); a frame the 24-bit length
        // cannot say is never sent truncated: the connection ends.
        match transport(out) {
            Some(f) => vec![Event::Send(f)],
            None => self.close(),
        }
    }

    fn hash_response(&mut self, slot: Option<&Slot>) {
        let Some(slot) = slot else { return };
        if self.dialect() != Some(dialect::SMB3_1_1) {
            return;
        }
        let Plan::Done { status, body } = &slot.plan else {
            return;
        };
        let msg = message_bytes(&slot.hdr, *status, slot.credits, body);
        if slot.hdr.command == Command::NEGOTIATE {
            if *status == NtStatus::SUCCESS {
                self.preauth = preauth_update(&self.preauth, &msg);
            }
        } else if *status == NtStatus::MORE_PROCESSING_REQUIRED {
            if let Some(s) = self.sessions.get_mut(&slot.hdr.session_id) {
                s.preauth = preauth_update(&s.preauth, &msg);
            }
        }
    }

    // ---- dispatch ------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        fp: &mut FramePlan,
        chain: &mut Chain,
        slot: usize,
        hdr: &Header,
        msg: &[u8],
        related: bool,
        encrypted_by: Option<u64>,
        dir: &dyn Directory,
    ) -> (Plan, Option<SigningKey>) {
        let cmd = hdr.command;
        if cmd == Command::NEGOTIATE {
            return (self.negotiate(msg, fp.now_ns), None);
        }
        if self.negotiated.is_none() {
            // 3.3.5.2: anything before NEGOTIATE ends the connection.
            self.closed = true;
            return (done(NtStatus::INVALID_PARAMETER), None);
        }
        // The session and the signature are checked before the body is
        // decoded (3.3.5.2.9): a tampered request is ACCESS_DENIED.
        let pre_session =
            cmd == Command::SESSION_SETUP || (cmd == Command::ECHO && hdr.session_id == 0);
        let sign = if pre_session {
            None
        } else {
            match self.response_key(hdr, msg, encrypted_by) {
                Ok(k) => k,
                Err(status) => {
                    // A related message runs in the session of the one
                    // before; when that one had none, the chain is broken:
                    // INVALID_PARAMETER, as Windows and Samba answer
                    // (smbtorture smb2.compound.invalid2).
                    let status = if related && !matches!(status, NtStatus::ACCESS_DENIED) {
                        NtStatus::INVALID_PARAMETER
                    } else {
                        status
                    };
                    if related {
                        chain.error.get_or_insert(status);
                        chain.file = None;
                    }
                    return (done(status), None);
                }
            }
        };
        if chain.first_related {
            // 3.3.5.2.7.2: the first message of a frame must not be
            // related; it and the related ones after it fail.
            chain.error = Some(NtStatus::INVALID_PARAMETER);
            chain.file = None;
            chain.pipe = None;
            return (done(NtStatus::INVALID_PARAMETER), sign);
        }
        let req = match Request::decode(cmd, msg) {
            Ok(r) => r,
            Err(e) => {
                let status = if cmd.name().is_none() {
                    NtStatus::INVALID_PARAMETER
                } else {
                    e.status()
                };
                if related {
                    chain.error.get_or_insert(status);
                    chain.file = None;
                }
                return (done(status), sign);
            }
        };
        if let Request::SessionSetup(ss) = &req {
            return self.session_setup(hdr, msg, ss, dir, fp);
        }
        // The responses of one compound go out as one frame (MS-SMB2
        // 3.3.4.1.3), whose length must fit the 24-bit Direct TCP header
        // (2.1). A request whose largest response would not fit after the
        // ones before it fails before it runs, as a request whose response
        // exceeds what its credits allow does (3.3.5.2.5):
        // STATUS_INVALID_PARAMETER. The others of the compound are served.
        let bound = response_output_bound(&req);
        if fp.reserved + bound > COMPOUND_RESPONSE_MAX {
            return (done(NtStatus::INVALID_PARAMETER), sign);
        }
        fp.reserved += bound;
        if let Some(s) = self.sessions.get(&hdr.session_id) {
            if s.encrypt {
                if let Some(k) = s.keys.as_ref().and_then(|k| k.encrypt.clone()) {
                    fp.encrypt.get_or_insert((hdr.session_id, k));
                }
            }
        }
        if let Some(sid) = encrypted_by {
            if let Some(k) = self
                .sessions
                .get(&sid)
                .and_then(|s| s.keys.as_ref())
                .and_then(|k| k.encrypt.clone())
            {
                fp.encrypt.get_or_insert((sid, k));
            }
        }
        if let Some(plan) = self.pipe_dispatch(chain, hdr, &req, related, dir) {
            return (plan, sign);
        }
        let plan = match req {
            Request::Logoff(_) => self.logoff(fp, hdr.session_id),
            Request::TreeConnect(tc) => self.tree_connect(hdr.session_id, &tc, dir),
            Request::TreeDisconnect(_) => self.tree_disconnect(fp, hdr),
            Request::Create(c) => self.plan_create(fp, chain, slot, hdr, &c),
            Request::Close(c) => {
                self.with_target(fp, chain, hdr, related, c.file_id, |me, fp, t| {
                    me.plan_close(fp, hdr, t, c.flags)
                })
            }
            Request::Flush(f) => {
                self.with_target(fp, chain, hdr, related, f.file_id, |me, fp, t| {
                    me.plan_flush(fp, hdr, t)
                })
            }
            Request::Read(r) => {
                self.with_target(fp, chain, hdr, related, r.file_id, |me, fp, t| {
                    me.plan_read(fp, hdr, t, &r)
                })
            }
            Request::Write(w) => {
                self.with_target(fp, chain, hdr, related, w.file_id, |me, fp, t| {
                    me.plan_write(fp, hdr, t, &w)
                })
            }
            Request::QueryDirectory(q) => {
                self.with_target(fp, chain, hdr, related, q.file_id, |me, fp, t| {
                    me.plan_query_directory(fp, hdr, t, &q)
                })
            }
            Request::QueryInfo(q) => {
                self.with_target(fp, chain, hdr, related, q.file_id, |me, fp, t| {
                    me.plan_query_info(fp, hdr, t, &q)
                })
            }
            Request::SetInfo(s) => {
                self.with_target(fp, chain, hdr, related, s.file_id, |me, fp, t| {
                    me.plan_set_info(fp, hdr, t, &s)
                })
            }
            Request::Lock(l) => {
                self.with_target(fp, chain, hdr, related, l.file_id, |me, fp, t| {
                    me.plan_lock(fp, hdr, t, &l)
                })
            }
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_CREATE_OR_GET_OBJECT_ID => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| {
                    me.plan_object_id(fp, slot, t, &io)
                }),
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_SRV_REQUEST_RESUME_KEY => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, _, t| {
                    me.plan_resume_key(t, &io)
                }),
            Request::Ioctl(io)
                if io.ctl_code == ctl_code::FSCTL_SRV_COPYCHUNK
                    || io.ctl_code == ctl_code::FSCTL_SRV_COPYCHUNK_WRITE =>
            {
                self.with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| {
                    me.plan_copychunk(fp, hdr, t, &io)
                })
            }
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_SRV_ENUMERATE_SNAPSHOTS => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| {
                    me.plan_enumerate_snapshots(fp, hdr, t, &io)
                }),
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_SET_SPARSE => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| {
                    me.plan_set_sparse(fp, hdr, t, &io)
                }),
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_SET_ZERO_DATA => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| {
                    me.plan_zero_data(fp, hdr, t, &io)
                }),
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_QUERY_ALLOCATED_RANGES => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| {
                    me.plan_allocated_ranges(fp, hdr, t, &io)
                }),
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_DUPLICATE_EXTENTS_TO_FILE => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| {
                    me.plan_dup_extents(fp, hdr, t, &io)
                }),
            Request::Ioctl(io)
                if io.ctl_code == ctl_code::FSCTL_GET_COMPRESSION || io.ctl_code == ctl_code::FSCTL_SET_COMPRESSION =>
            {
                self.with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| me.plan_compression(fp, t, &io))
            }
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_FILE_LEVEL_TRIM => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| me.plan_trim(fp, hdr, t, &io)),
            Request::Ioctl(io) if io.ctl_code == ctl_code::FSCTL_LMR_REQUEST_RESILIENCY => self
                .with_target(fp, chain, hdr, related, io.file_id, |me, _, t| me.plan_resiliency(t, &io)),
            Request::Ioctl(io) => self.ioctl(hdr, &io),
            Request::ChangeNotify(n) => {
                self.with_target(fp, chain, hdr, related, n.file_id, |me, fp, t| {
                    me.plan_change_notify(fp, hdr, t, &n)
                })
            }
            Request::OplockBreak(crate::smb2::oplock_break::OplockBreakMessage::Oplock(a)) => {
                self.oplock_ack(hdr, &a)
            }
            Request::OplockBreak(crate::smb2::oplock_break::OplockBreakMessage::LeaseAck(a)) => self.lease_ack(&a),
            // A notification is the server's, never a request.
            Request::OplockBreak(_) => done(NtStatus::INVALID_PARAMETER),
            Request::Echo(_) => ok(Response::Echo(Default::default())),
            Request::Negotiate(_) | Request::SessionSetup(_) | Request::Cancel(_) => {
                done(NtStatus::INVALID_PARAMETER)
            }
        };
        (plan, sign)
    }

    /// Checks the session, signature and encryption of a request; returns
    /// the key to sign its response with.
    fn response_key(
        &self,
        hdr: &Header,
        msg: &[u8],
        encrypted_by: Option<u64>,
    ) -> Result<Option<SigningKey>, NtStatus> {
        let Some(s) = self.sessions.get(&hdr.session_id) else {
            if hdr.command == Command::ECHO && hdr.session_id == 0 {
                return Ok(None);
            }
            return Err(NtStatus::USER_SESSION_DELETED);
        };
        if !s.valid {
            return Err(NtStatus::USER_SESSION_DELETED);
        }
        let signed = hdr.flags.is_signed();
        let key = s.keys.as_ref().map(|k| k.signing.clone());
        if encrypted_by.is_some() {
            if encrypted_by != Some(hdr.session_id) {
                return Err(NtStatus::ACCESS_DENIED);
            }
            return Ok(None);
        }
        if s.encrypt {
            return Err(NtStatus::ACCESS_DENIED);
        }
        match (&key, signed) {
            (Some(k), true) => {
                if !k.verify(msg) {
                    return Err(NtStatus::ACCESS_DENIED);
                }
                Ok(key)
            }
            (Some(_), false) if s.signing_required => Err(NtStatus::ACCESS_DENIED),
            (Some(_), false) => Ok(None),
            (None, _) => Ok(None),
        }
    }

    /// Resolves the FileId of a command (3.3.5.2.7.2 for related ones) and
    /// plans it; in a related chain whose CREATE failed, the command gets
    /// the same error.
    fn with_target(
        &mut self,
        fp: &mut FramePlan,
        chain: &mut Chain,
        hdr: &Header,
        related: bool,
        file_id: FileId,
        f: impl FnOnce(&mut Self, &mut FramePlan, Target) -> Plan,
    ) -> Plan {
        if let (true, Some(e)) = (related, chain.error) {
            // A failed chain fails every related message after it, whatever
            // FileId it names (smbtorture smb2.compound.related9).
            return done(e);
        }
        let target = if file_id == FileId::RELATED && related {
            match (chain.file, chain.error) {
                (_, Some(e)) => return done(e),
                (Some(t), None) => t,
                (None, None) => return done(NtStatus::INVALID_PARAMETER),
            }
        } else {
            match self.opens.get(&file_id.volatile) {
                Some(o)
                    if file_id.persistent == file_id.volatile
                        && o.session_id == hdr.session_id
                        && Some(o.tree_id) == hdr.tree_id() =>
                {
                    Target::Table(file_id.volatile)
                }
                _ => {
                    // Related messages after this one fail the same way
                    // (smbtorture smb2.compound.invalid3).
                    chain.error.get_or_insert(NtStatus::FILE_CLOSED);
                    chain.file = None;
                    return done(NtStatus::FILE_CLOSED);
                }
            }
        };
        if related || chain.file.is_none() {
            chain.file = Some(target);
        }
        let slot = fp.slots.len();
        let plan = f(self, fp, target);
        if let (Target::Pending(_), Plan::Done { status, body }) = (target, &plan) {
            if status.0 >= 0xC000_0000 && !fp.deferred.contains_key(&slot) {
                fp.deferred.insert(
                    slot,
                    Deferred::Status {
                        target,
                        status: *status,
                        body: body.clone(),
                    },
                );
            }
        }
        plan
    }

    /// The session, tree and credentials of a file-system command.
    pub(super) fn tree_of(&self, hdr: &Header) -> Result<(&Session, &Tree), NtStatus> {
        let s = self
            .sessions
            .get(&hdr.session_id)
            .ok_or(NtStatus::USER_SESSION_DELETED)?;
        let t = hdr
            .tree_id()
            .and_then(|t| s.trees.get(&t))
            .ok_or(NtStatus::NETWORK_NAME_DELETED)?;
        Ok((s, t))
    }

    /// A FileId for a new open: unique in the daemon (the shared
    /// table's counter), so that a durable open keeps it when another
    /// connection reconnects it.
    pub(super) fn new_file_id(&mut self) -> u64 {
        self.cfg.share_modes.next_file_id()
    }

    /// Runs `batch` for another holder (see `side_runs`); its token.
    pub(super) fn side_run(&mut self, batch: Batch, tag: &'static str) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.side_runs.insert(token);
        self.outbox.push(Event::Run { token, batch, tag, exempt: None });
        token
    }

    // ---- NEGOTIATE -----------------------------------------------------

    fn negotiate_response<'a>(
        &mut self,
        chosen: u16,
        hint: &'a [u8],
        contexts: Vec<NegotiateContext<'a>>,
        now_ns: i64,
    ) -> NegotiateResponse<'a> {
        let mut caps = 0;
        if chosen != dialect::SMB2_0_2 {
            // Leases from 2.1 on (MS-SMB2 3.3.5.4, `lease.rs`).
            caps |= capabilities::LARGE_MTU | capabilities::LEASING;
        }
        if chosen >= dialect::SMB3_0 {
            // v2 leases on directories (`lease.rs`), broken by any change
            // inside them, from either protocol.
            caps |= capabilities::DIRECTORY_LEASING;
        }
        let small = chosen == dialect::SMB2_0_2;
        let cap = |v: u32| if small { v.min(65536) } else { v };
        NegotiateResponse {
            security_mode: security_mode::SIGNING_ENABLED
                | if self.cfg.require_signing {
                    security_mode::SIGNING_REQUIRED
                } else {
                    0
                },
            dialect_revision: chosen,
            server_guid: self.cfg.server_guid,
            capabilities: caps,
            max_transact_size: cap(self.cfg.max_transact_size),
            max_read_size: cap(self.cfg.max_read_size),
            max_write_size: cap(self.cfg.max_write_size),
            system_time: to_filetime(now_ns),
            server_start_time: 0,
            security_buffer: hint,
            negotiate_contexts: contexts,
        }
    }

    fn negotiate(&mut self, msg: &[u8], now_ns: i64) -> Plan {
        if self.negotiated.is_some() {
            // 3.3.5.3: a second NEGOTIATE ends the connection.
            self.closed = true;
            return done(NtStatus::INVALID_PARAMETER);
        }
        let req = match NegotiateRequest::decode(msg) {
            Ok(r) => r,
            Err(e) => return done(e.status()),
        };
        let Some(&chosen) = req
            .dialects
            .iter()
            .filter(|d| self.cfg.dialects.contains(d) && **d != dialect::SMB2_WILDCARD)
            .max()
        else {
            return done(NtStatus::NOT_SUPPORTED);
        };
        let salt: [u8; 32] = self.rng.bytes();
        let mut contexts = Vec::new();
        let mut cipher = None;
        let mut cmac = true;
        let mut gmac = false;
        if chosen == dialect::SMB3_1_1 {
            let mut preauth_ok = false;
            let mut signing_offer: Option<Vec<u16>> = None;
            for c in &req.negotiate_contexts {
                match c {
                    NegotiateContext::PreauthIntegrity {
                        hash_algorithms, ..
                    } => {
                        preauth_ok = hash_algorithms.contains(&algorithm::SHA_512);
                        if !preauth_ok {
                            return done(extra_status::NO_PREAUTH_INTEGRITY_HASH_OVERLAP);
                        }
                    }
                    NegotiateContext::Encryption { ciphers } => {
                        cipher = [
                            algorithm::AES_128_GCM,
                            algorithm::AES_128_CCM,
                            algorithm::AES_256_GCM,
                            algorithm::AES_256_CCM,
                        ]
                        .into_iter()
                        .find(|c| ciphers.contains(c));
                    }
                    NegotiateContext::Signing { algorithms } => {
                        signing_offer = Some(algorithms.clone())
                    }
                    _ => {}
                }
            }
            if !preauth_ok {
                return done(NtStatus::INVALID_PARAMETER);
            }
            contexts.push(NegotiateContext::PreauthIntegrity {
                hash_algorithms: vec![algorithm::SHA_512],
                salt: &[],
            });
            if req
                .negotiate_contexts
                .iter()
                .any(|c| matches!(c, NegotiateContext::Encryption { .. }))
            {
                contexts.push(NegotiateContext::Encryption {
                    ciphers: vec![cipher.unwrap_or(0)],
                });
            }
            if let Some(algs) = signing_offer {
                // The client's first algorithm that duet also signs with
                // (3.3.5.4: the server picks from the client's order).
                let pick = algs
                    .iter()
                    .copied()
                    .find(|a| {
                        matches!(*a, algorithm::AES_GMAC | algorithm::AES_CMAC | algorithm::HMAC_SHA256)
                    })
                    .unwrap_or(algorithm::AES_CMAC);
                match pick {
                    algorithm::AES_GMAC => gmac = true,
                    algorithm::HMAC_SHA256 => cmac = false,
                    _ => {}
                }
                contexts.push(NegotiateContext::Signing {
                    algorithms: vec![pick],
                });
            }
        } else if chosen >= dialect::SMB3_0 && req.capabilities & capabilities::ENCRYPTION != 0 {
            cipher = Some(algorithm::AES_128_CCM);
        }
        let hint = spnego::server_hint();
        // The salt must live as long as the response: encode right here.
        let mut resp = self.negotiate_response(chosen, &hint, Vec::new(), now_ns);
        let salted: Vec<NegotiateContext<'_>> = contexts
            .into_iter()
            .map(|c| match c {
                NegotiateContext::PreauthIntegrity {
                    hash_algorithms, ..
                } => NegotiateContext::PreauthIntegrity {
                    hash_algorithms,
                    salt: &salt,
                },
                c => c,
            })
            .collect();
        resp.negotiate_contexts = salted;
        if chosen >= dialect::SMB3_0 && chosen != dialect::SMB3_1_1 && cipher.is_some() {
            resp.capabilities |= capabilities::ENCRYPTION;
        }
        let body = body_of(&Response::Negotiate(resp.clone()));
        self.negotiated = Some(Negotiated {
            dialect: chosen,
            client_guid: req.client_guid,
            client_caps: req.capabilities,
            client_security_mode: req.security_mode,
            server_caps: resp.capabilities,
            server_security_mode: resp.security_mode,
            cipher,
            cmac,
            gmac,
        });
        if chosen == dialect::SMB3_1_1 {
            self.preauth = preauth_update(&[0; 64], msg);
        }
        Plan::Done {
            status: NtStatus::SUCCESS,
            body,
        }
    }

    // ---- SESSION_SETUP -------------------------------------------------

    fn session_setup(
        &mut self,
        hdr: &Header,
        msg: &[u8],
        req: &SessionSetupRequest<'_>,
        dir: &dyn Directory,
        fp: &mut FramePlan,
    ) -> (Plan, Option<SigningKey>) {
        self.last_new_session = 0;
        if req.flags & SessionSetupRequest::BINDING != 0 {
            return (done(NtStatus::REQUEST_NOT_ACCEPTED), None);
        }
        let Some(neg) = self.negotiated.clone() else {
            return (done(NtStatus::INVALID_PARAMETER), None);
        };
        let sid = if hdr.session_id == 0 {
            if self.sessions.len() >= self.cfg.max_sessions {
                return (done(NtStatus::REQUEST_NOT_ACCEPTED), None);
            }
            // 32 random bits: clients (smbtorture among them) keep session
            // ids in 32-bit variables, and Samba and Windows hand out ids
            // that fit.
            let mut id = self.rng.u64() & 0xFFFF_FFFF;
            while id == 0 || self.sessions.contains_key(&id) {
                id = self.rng.u64() & 0xFFFF_FFFF;
            }
            self.sessions.insert(
                id,
                Session {
                    valid: false,
                    auth: AuthState::None,
                    preauth: self.preauth,
                    cred: Credentials::user(self.cfg.guest_uid, self.cfg.guest_gid),
                    guest: false,
                    keys: None,
                    signing_required: false,
                    encrypt: false,
                    trees: HashMap::new(),
                },
            );
            self.last_new_session = id;
            id
        } else {
            match self.sessions.get_mut(&hdr.session_id) {
                Some(s) => {
                    if s.valid && matches!(s.auth, AuthState::None) {
                        // Re-authentication starts a fresh preauth chain.
                        s.preauth = self.preauth;
                    }
                    hdr.session_id
                }
                None => return (done(NtStatus::USER_SESSION_DELETED), None),
            }
        };
        let is_311 = neg.dialect == dialect::SMB3_1_1;
        // A failed authentication ends the session: a new one, and a valid
        // one whose re-authentication failed (its opens closed as by
        // LOGOFF; smbtorture smb2.session.reauth6, as Windows does).
        let fail = |me: &mut Self, fp: &mut FramePlan, status: NtStatus| {
            match me.sessions.get(&sid).map(|s| s.valid) {
                Some(false) => {
                    me.sessions.remove(&sid);
                }
                Some(true) => {
                    me.drop_opens(fp, sid, None);
                    me.sessions.remove(&sid);
                }
                None => {}
            }
            (done(status), None)
        };
        let token = match spnego::parse_client_token(req.security_buffer) {
            Ok(t) => t,
            Err(_) => return fail(self, fp, NtStatus::LOGON_FAILURE),
        };
        let (ntlm_msg, spnego_used, mech_list, client_mic) = match token {
            ClientToken::Raw(m) => (m, false, Vec::new(), None),
            ClientToken::Init {
                mech_list,
                ntlm_offered: true,
                mech_token: Some(m),
            } => (m, true, mech_list.to_vec(), None),
            ClientToken::Init { .. } => return fail(self, fp, NtStatus::NOT_SUPPORTED),
            ClientToken::Resp {
                response_token: Some(m),
                mech_list_mic,
            } => (m, true, Vec::new(), mech_list_mic),
            ClientToken::Resp {
                response_token: None,
                ..
            } => return fail(self, fp, NtStatus::LOGON_FAILURE),
        };
        if is_311 {
            if let Some(s) = self.sessions.get_mut(&sid) {
                s.preauth = preauth_update(&s.preauth, msg);
            }
        }
        let kind = ntlm_msg
            .get(8..12)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        match kind {
            Some(1) => {
                let mut ctx = ServerContext::new(self.rng.bytes());
                let chal =
                    match ctx.challenge(ntlm_msg, &self.cfg.domain, &self.cfg.server_name, None) {
                        Ok(c) => c,
                        Err(_) => return fail(self, fp, NtStatus::INVALID_PARAMETER),
                    };
                let Some(s) = self.sessions.get_mut(&sid) else {
                    return fail(self, fp, NtStatus::USER_SESSION_DELETED);
                };
                s.auth = AuthState::Ntlm {
                    ctx,
                    spnego: spnego_used,
                    mech_list,
                };
                let out = if spnego_used {
                    spnego::server_response(NegState::AcceptIncomplete, true, Some(&chal), None)
                } else {
                    chal
                };
                let body = body_of(&Response::SessionSetup(SessionSetupResponse {
                    session_flags: 0,
                    security_buffer: &out,
                }));
                (
                    Plan::Done {
                        status: NtStatus::MORE_PROCESSING_REQUIRED,
                        body,
                    },
                    None,
                )
            }
            Some(3) => {
                let Some(s) = self.sessions.get_mut(&sid) else {
                    return fail(self, fp, NtStatus::USER_SESSION_DELETED);
                };
                let AuthState::Ntlm {
                    mut ctx,
                    spnego: sp,
                    mech_list,
                } = std::mem::replace(&mut s.auth, AuthState::None)
                else {
                    return fail(self, fp, NtStatus::INVALID_PARAMETER);
                };
                // Re-authentication of a valid session (MS-SMB2 3.3.5.5.2):
                // the existing Session.SessionKey is retained, so its
                // signing and encryption keys stay what the client holds.
                let reauth = s.valid;
                let lookup = |u: &str| dir.user(u).filter(|e| e.enabled).map(|e| e.nt_hash);
                let who = match ctx.authenticate(ntlm_msg, &lookup) {
                    Ok(w) => w,
                    Err(NtlmError::Malformed(_)) => return fail(self, fp, NtStatus::INVALID_PARAMETER),
                    Err(_) => return fail(self, fp, NtStatus::LOGON_FAILURE),
                };
                let mut flags = 0u16;
                let (cred, guest, keys) = if who.anonymous {
                    if !dir.shares().iter().any(|s| s.guest_ok) {
                        return fail(self, fp, NtStatus::LOGON_FAILURE);
                    }
                    flags |= SessionSetupResponse::IS_NULL;
                    (
                        Credentials::user(self.cfg.guest_uid, self.cfg.guest_gid),
                        true,
                        None,
                    )
                } else {
                    let Some(u) = dir.user(&who.user).filter(|u| u.enabled) else {
                        return fail(self, fp, NtStatus::LOGON_FAILURE);
                    };
                    let preauth = s.preauth;
                    let mut keys = derive_keys(
                        neg.dialect,
                        &who.session_key,
                        neg.cipher,
                        &preauth,
                        neg.cmac,
                    );
                    if neg.gmac {
                        keys.signing = keys.signing.into_gmac();
                    }
                    (Credentials::user(u.uid, u.gid), false, Some(keys))
                };
                let signing_required = keys.is_some()
                    && (self.cfg.require_signing
                        || req.security_mode & security_mode::SIGNING_REQUIRED as u8 != 0);
                let encrypt =
                    keys.as_ref().is_some_and(|k| k.encrypt.is_some()) && self.cfg.encrypt;
                if encrypt {
                    flags |= SessionSetupResponse::ENCRYPT_DATA;
                }
                let mic = match (sp, client_mic, &keys) {
                    (true, Some(_), Some(_)) if !mech_list.is_empty() => Some(ntlm::sign(
                        &who.session_key,
                        who.flags,
                        ntlm::Direction::ServerToClient,
                        0,
                        &mech_list,
                    )),
                    _ => None,
                };
                let out = if sp {
                    spnego::server_response(
                        NegState::AcceptCompleted,
                        false,
                        None,
                        mic.as_ref().map(|m| &m[..]),
                    )
                } else {
                    Vec::new()
                };
                let Some(s) = self.sessions.get_mut(&sid) else {
                    return fail(self, fp, NtStatus::USER_SESSION_DELETED);
                };
                if reauth {
                    // The keys (and what they decided) stay; the identity
                    // is the new one.
                    s.cred = cred;
                    s.guest = guest;
                    if s.encrypt {
                        flags |= SessionSetupResponse::ENCRYPT_DATA;
                    } else {
                        flags &= !SessionSetupResponse::ENCRYPT_DATA;
                    }
                    let sign = s.keys.as_ref().and_then(|k| {
                        (neg.dialect >= dialect::SMB3_0 || s.signing_required).then(|| k.signing.clone())
                    });
                    let body = body_of(&Response::SessionSetup(SessionSetupResponse {
                        session_flags: flags,
                        security_buffer: &out,
                    }));
                    return (Plan::Done { status: NtStatus::SUCCESS, body }, sign);
                }
                // A reconnecting client names its session of the lost
                // connection (MS-SMB2 3.3.5.5.3): that one ends, here or
                // on whichever connection holds it, so its opens no longer
                // stand in the way of the new ones.
                let previous = req.previous_session_id;
                if previous != 0 && previous != sid && !guest {
                    self.outbox.push(Event::EndSession { previous, uid: cred.uid, from: self.conn_key });
                    let uid = cred.uid;
                    let ended = self.end_previous_session(previous, uid, fp.now_ns);
                    self.outbox.extend(ended);
                }
                let Some(s) = self.sessions.get_mut(&sid) else {
                    return fail(self, fp, NtStatus::USER_SESSION_DELETED);
                };
                s.valid = true;
                s.cred = cred;
                s.guest = guest;
                s.signing_required = signing_required;
                s.encrypt = encrypt;
                let sign = keys.as_ref().and_then(|k| {
                    (neg.dialect >= dialect::SMB3_0 || signing_required).then(|| k.signing.clone())
                });
                s.keys = keys;
                let body = body_of(&Response::SessionSetup(SessionSetupResponse {
                    session_flags: flags,
                    security_buffer: &out,
                }));
                (
                    Plan::Done {
                        status: NtStatus::SUCCESS,
                        body,
                    },
                    sign,
                )
            }
            _ => fail(self, fp, NtStatus::INVALID_PARAMETER),
        }
    }

    /// Ends session `previous` of this connection if it is a valid session
    /// of user `uid` (a client reconnected elsewhere and named it as its
    /// PreviousSessionId, MS-SMB2 3.3.5.5.3): its opens close as by LOGOFF
    /// (share reservations, byte-range locks and lease membership released,
    /// delete-on-close files removed by the returned batch), and later
    /// requests on it get STATUS_USER_SESSION_DELETED.
    pub fn end_previous_session(&mut self, previous: u64, uid: u32, now_ns: i64) -> Vec<Event> {
        let Some(s) = self.sessions.get(&previous) else { return Vec::new() };
        if !s.valid || s.guest || s.cred.uid != uid {
            return Vec::new();
        }
        let ended = self.close_session(previous, now_ns, "end-session");
        // Its waiting CHANGE_NOTIFYs were answered STATUS_NOTIFY_CLEANUP.
        let mut out = std::mem::take(&mut self.outbox);
        out.extend(ended);
        out
    }

    /// Closes every open of session `sid` as LOGOFF does and forgets the
    /// session; the batch removing its delete-on-close files, if any, for
    /// the driver to run (its result is not waited for).
    fn close_session(&mut self, sid: u64, now_ns: i64, tag: &'static str) -> Option<Event> {
        let mut fp = FramePlan::new(now_ns, tag);
        self.drop_opens(&mut fp, sid, None);
        self.sessions.remove(&sid);
        let Some(batch) = fp.batch.take().filter(|b| !b.ops.is_empty()) else {
            self.end_removals(&mut fp.removals);
            return None;
        };
        let token = self.next_token;
        self.next_token += 1;
        if !fp.removals.is_empty() {
            self.side_removals.insert(token, fp.removals);
        }
        Some(Event::Run { token, batch, tag, exempt: None })
    }

    /// The transport connection is gone (MS-SMB2 3.3.7.1): every open of
    /// every session closes as by LOGOFF, and the batches that remove the
    /// delete-on-close ones (one per session, its credentials) are returned
    /// as [`Event::Run`] for the driver to run; their results are not
    /// waited for. The connection is closed afterwards.
    pub fn on_disconnect(&mut self, now_ns: i64) -> Vec<Event> {
        let mut ids: Vec<u64> = self.sessions.keys().copied().collect();
        ids.sort_unstable();
        let ended: Vec<Event> = ids.into_iter().filter_map(|sid| self.close_session(sid, now_ns, "disconnect")).collect();
        let _ = self.close();
        // Notices for other connections (a file left delete-pending); its
        // own sends are moot now.
        let mut out: Vec<Event> = std::mem::take(&mut self.outbox)
            .into_iter()
            .filter(|e| matches!(e, Event::DeletePending { .. }))
            .collect();
        out.extend(ended);
        out
    }

    // ---- LOGOFF, TREE_CONNECT, TREE_DISCONNECT -------------------------

    /// Drops the opens of a session (or of one of its trees), removing the
    /// delete-on-close ones in the frame's batch.
    fn drop_opens(&mut self, fp: &mut FramePlan, session_id: u64, tree: Option<u32>) {
        let ids: Vec<u64> = self
            .opens
            .iter()
            .filter(|(_, o)| o.session_id == session_id && tree.iter().all(|t| o.tree_id == *t))
            .map(|(id, _)| *id)
            .collect();
        self.pipes
            .retain(|_, p| p.session_id != session_id || tree.iter().any(|t| p.tree_id != *t));
        let cred = self.sessions.get(&session_id).map(|s| s.cred.clone());
        for id in ids {
            // A lost connection, a LOGOFF or an ended session keeps its
            // durable opens (MS-SMB2 3.3.7.1; `durable.rs`); a
            // TREE_DISCONNECT closes them.
            if tree.is_none() && self.keep_durable(id, fp.now_ns) {
                continue;
            }
            let path = self.cfg.share_modes.path_of((self.conn_key, id));
            let Some(o) = self.forget_open(id) else {
                continue;
            };
            let here = self.opens.values().any(|x| x.node == o.node);
            let remove = if o.delete_on_close && !o.name.is_empty() && !here {
                if self.cfg.share_modes.open_anywhere_or_stream(o.node, path.as_deref().unwrap_or("")) {
                    // Another connection still has it open: it is
                    // delete-pending until that open closes.
                    let d = super::sharemode::PendingDelete {
                        parent: o.parent,
                        name: o.name.clone(),
                        is_dir: o.is_dir,
                        path: path.unwrap_or_default(),
                    };
                    self.cfg.share_modes.defer_delete(o.node, d);
                    self.outbox.push(Event::DeletePending { node: o.node, from: self.conn_key });
                    None
                } else {
                    self.cfg.share_modes.forget_pending_delete(o.node);
                    Some((o.parent, o.name.clone(), o.is_dir, path.unwrap_or_default()))
                }
            } else if !here {
                // A named stream's open may have kept its file.
                let file = o.name.starts_with(':').then_some(o.parent);
                self.cfg.share_modes.take_pending_delete(o.node)
                    .or_else(|| file.and_then(|f| self.cfg.share_modes.take_pending_delete(f)))
                    .map(|d| (d.parent, d.name, d.is_dir, d.path))
            } else {
                None
            };
            if let (Some((parent, name, is_dir, path)), Some(c)) = (remove, &cred) {
                if fp.batch_for(session_id, c, false).is_some() {
                    fp.push(super::fsops::removal(ObjRef::Id(parent), &name, Some(is_dir)));
                    // A CREATE of the name waits until the batch is over.
                    if !path.is_empty() {
                        self.cfg.share_modes.begin_removal(&path);
                        fp.removals.push(path);
                    }
                }
            }
        }
    }

    fn logoff(&mut self, fp: &mut FramePlan, session_id: u64) -> Plan {
        self.drop_opens(fp, session_id, None);
        self.sessions.remove(&session_id);
        ok(Response::Logoff(Default::default()))
    }

    fn tree_connect(
        &mut self,
        session_id: u64,
        req: &TreeConnectRequest<'_>,
        dir: &dyn Directory,
    ) -> Plan {
        self.last_new_tree = 0;
        let path = req.path.to_string_lossy();
        let name = path
            .trim_start_matches('\\')
            .split('\\')
            .nth(1)
            .unwrap_or("")
            .to_string();
        let Some(neg) = self.negotiated.clone() else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        let Some(s) = self.sessions.get(&session_id) else {
            return done(NtStatus::USER_SESSION_DELETED);
        };
        if s.trees.len() >= self.cfg.max_trees_per_session {
            return done(NtStatus::INSUFFICIENT_RESOURCES);
        }
        let ipc = name.eq_ignore_ascii_case("IPC$");
        let share = if ipc {
            ShareEntry {
                name: "IPC$".into(),
                root: 0,
                read_only: true,
                guest_ok: true,
                encrypt: false,
                protocol_durability: false,
            }
        } else {
            match dir.share(&name) {
                Some(sh) => sh,
                None => return done(NtStatus::BAD_NETWORK_NAME),
            }
        };
        if s.guest && !share.guest_ok {
            return done(NtStatus::ACCESS_DENIED);
        }
        // MS-SMB2 3.3.5.7: a user the share does not admit is ACCESS_DENIED.
        if !ipc && !dir.may_connect(&share.name, s.cred.uid) {
            return done(NtStatus::ACCESS_DENIED);
        }
        let mut share_flags = 0u32;
        if share.encrypt && !ipc {
            let can = neg.dialect >= dialect::SMB3_0
                && s.keys.as_ref().is_some_and(|k| k.encrypt.is_some());
            if !can {
                return done(NtStatus::ACCESS_DENIED);
            }
            share_flags |= 0x0000_8000; // SMB2_SHAREFLAG_ENCRYPT_DATA
        }
        let maximal_access = if share.read_only {
            access::FILE_GENERIC_READ | access::FILE_GENERIC_EXECUTE
        } else {
            access::FILE_ALL_ACCESS
        };
        let tid = self.next_tree_id;
        self.next_tree_id = self.next_tree_id.wrapping_add(1).max(1);
        let encrypt_share = share.encrypt && !ipc;
        let Some(s) = self.sessions.get_mut(&session_id) else {
            return done(NtStatus::USER_SESSION_DELETED);
        };
        if encrypt_share {
            s.encrypt = true;
        }
        s.trees.insert(tid, Tree { share, ipc });
        self.last_new_tree = tid;
        ok(Response::TreeConnect(TreeConnectResponse {
            share_type: if ipc {
                TreeConnectResponse::SHARE_TYPE_PIPE
            } else {
                TreeConnectResponse::SHARE_TYPE_DISK
            },
            share_flags,
            capabilities: 0,
            maximal_access,
        }))
    }

    fn tree_disconnect(&mut self, fp: &mut FramePlan, hdr: &Header) -> Plan {
        let Some(tid) = hdr.tree_id() else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        if !self
            .sessions
            .get(&hdr.session_id)
            .is_some_and(|s| s.trees.contains_key(&tid))
        {
            return done(NtStatus::NETWORK_NAME_DELETED);
        }
        self.drop_opens(fp, hdr.session_id, Some(tid));
        if let Some(s) = self.sessions.get_mut(&hdr.session_id) {
            s.trees.remove(&tid);
        }
        ok(Response::TreeDisconnect(Default::default()))
    }

    // ---- LOCK ----------------------------------------------------------

    /// The lock-table holder of one of this connection's opens.
    pub(super) fn lock_holder(&self, file: u64) -> duet_locks::Holder {
        super::sharemode::holder((self.conn_key, file))
    }

    /// Applies the elements of a LOCK request to the daemon's lock table
    /// (MS-SMB2 3.3.5.14). Unlocks (3.3.5.14.1) go one by one and stop at
    /// the first that fails; locks (3.3.5.14.2) are all granted or, at the
    /// first that is not, the ones taken before it are released again.
    /// `wait`: queue a single blocking element instead of failing it
    /// (Ok(Some) is the queued request).
    pub(super) fn apply_locks(
        &mut self,
        file: u64,
        elements: &[LockElement],
        wait: bool,
    ) -> Result<Option<duet_locks::WaiterId>, NtStatus> {
        let Some(o) = self.opens.get(&file) else {
            return Err(NtStatus::FILE_CLOSED);
        };
        // MS-FSA 2.1.5.8 / 2.1.5.9: no byte-range locks on directories.
        if o.is_dir {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        let node = o.node;
        let h = self.lock_holder(file);
        let locks = self.cfg.share_modes.locks().clone();
        let mut t = locks.table();
        if elements[0].flags == LockElement::UNLOCK {
            for e in elements {
                if e.flags != LockElement::UNLOCK {
                    return Err(NtStatus::INVALID_PARAMETER);
                }
                let r = Range::smb(e.offset, e.length).ok_or(NtStatus::INVALID_LOCK_RANGE)?;
                if t.unlock_exact(node, &h, &r).is_err() {
                    return Err(NtStatus::RANGE_NOT_LOCKED);
                }
            }
            return Ok(None);
        }
        let mut added: Vec<Range> = Vec::new();
        let mut status = NtStatus::SUCCESS;
        let mut queued = None;
        for e in elements {
            // A lock that may wait stands alone (MS-SMB2 3.3.5.14.2): in a
            // request of several, every element must fail immediately.
            if elements.len() > 1 && e.flags & LockElement::FAIL_IMMEDIATELY == 0 {
                status = NtStatus::INVALID_PARAMETER;
                break;
            }
            let exclusive = match e.flags & !LockElement::FAIL_IMMEDIATELY {
                LockElement::SHARED_LOCK => false,
                LockElement::EXCLUSIVE_LOCK => true,
                _ => {
                    status = NtStatus::INVALID_PARAMETER;
                    break;
                }
            };
            let Some(r) = Range::smb(e.offset, e.length) else {
                status = NtStatus::INVALID_LOCK_RANGE;
                break;
            };
            let blocking = wait && elements.len() == 1 && e.flags & LockElement::FAIL_IMMEDIATELY == 0;
            let got = if blocking {
                t.lock_or_wait(node, h, r, exclusive, None, file).map(|w| {
                    queued = w;
                })
            } else {
                t.lock(node, h, r, exclusive)
            };
            match got {
                Ok(()) => added.push(r),
                Err(LockError::Conflict(_)) => {
                    status = NtStatus::LOCK_NOT_GRANTED;
                    break;
                }
                Err(LockError::Limit) => {
                    status = NtStatus::INSUFFICIENT_RESOURCES;
                    break;
                }
            }
        }
        if status != NtStatus::SUCCESS {
            for r in added.iter().rev() {
                let _ = t.unlock_exact(node, &h, r);
            }
            return Err(status);
        }
        Ok(queued)
    }

    /// Whether another open's lock forbids this access (MS-FSA 2.1.4.10),
    /// by any client of either protocol.
    pub(super) fn lock_conflict(
        &self,
        file: u64,
        node: NodeId,
        offset: u64,
        length: u64,
        write: bool,
    ) -> bool {
        let h = self.lock_holder(file);
        self.cfg
            .share_modes
            .locks()
            .table()
            .check_io(node, &h, &Range::io(offset, length), write)
            .is_some()
    }

    fn plan_lock(&mut self, fp: &mut FramePlan, hdr: &Header, t: Target, req: &LockRequest<'_>) -> Plan {
        let elements: Vec<LockElement> = req.locks().collect();
        if elements.is_empty() {
            return done(NtStatus::INVALID_PARAMETER);
        }
        // A lock may wait only when it is the frame's one request: an
        // interim answer inside a compound is not what clients expect.
        let alone = fp.slots.is_empty() && hdr.next_command == 0 && !hdr.flags.is_async();
        if let (Target::Table(id), false) = (t, elements[0].flags == LockElement::UNLOCK) {
            // Other opens' read caching goes (MS-FSA 2.1.5.7 with 2.1.4.12,
            // BYTE_RANGE_LOCK); the lock does not wait for it.
            self.break_for_lock(id, fp.now_ns);
        }
        // Lock sequence verification (MS-SMB2 3.3.5.14) on resilient and
        // durable opens, as Windows does (note <314>): a request whose
        // LockSequenceNumber the open's entry at LockSequenceIndex (1 to
        // 64) already holds is a replay, answered success without being
        // applied again; otherwise the entry is invalid until the request
        // succeeds.
        let seq = match t {
            Target::Table(id) => self.lock_seq_slot(id, req.lock_sequence),
            Target::Pending(_) => None,
        };
        if let (Target::Table(id), Some((slot, number))) = (t, seq) {
            let o = self.opens.get_mut(&id).expect("lock_seq_slot found the open");
            if o.lock_seq[slot] == number {
                return ok(Response::Lock(LockResponse));
            }
            o.lock_seq[slot] = NO_LOCK_SEQ;
        }
        match t {
            Target::Table(id) => match self.apply_locks(id, &elements, alone) {
                Ok(None) => {
                    if let Some((slot, number)) = seq {
                        if let Some(o) = self.opens.get_mut(&id) {
                            o.lock_seq[slot] = number;
                        }
                    }
                    ok(Response::Lock(LockResponse))
                }
                Ok(Some(waiter)) => {
                    let async_id = self.new_async_id();
                    let mut h = *hdr;
                    h.ids = HeaderIds::Async { async_id };
                    self.last_async = Some(AsyncLock { waiter, hdr: h, sign: None, encrypt: None });
                    done(NtStatus::PENDING)
                }
                Err(s) => done(s),
            },
            Target::Pending(_) => Plan::Fs(FsPlan::Lock {
                target: t,
                elements,
            }),
        }
    }

    /// The entry of open `id`'s LockSequenceArray a LOCK with
    /// `lock_sequence` uses, and its LockSequenceNumber: None when the
    /// open is neither resilient nor durable or the index is not 1 to 64
    /// (MS-SMB2 2.2.26, 3.3.5.14).
    fn lock_seq_slot(&self, id: u64, lock_sequence: u32) -> Option<(usize, u8)> {
        let o = self.opens.get(&id)?;
        if o.resilient_ms.is_none() && o.durable.is_none() {
            return None;
        }
        if self.dialect().unwrap_or(0) < crate::smb2::negotiate::dialect::SMB2_1 {
            return None;
        }
        let index = (lock_sequence >> 4) as usize;
        let number = (lock_sequence & 0xF) as u8;
        (1..=64).contains(&index).then(|| (index - 1, number))
    }

    /// Whether blocking LOCKs of this connection wait in the lock table:
    /// the driver then calls [`Connection::poll_locks`] now and then.
    pub fn waiting_locks(&self) -> usize {
        self.async_locks.len()
    }

    /// Completes the blocking LOCKs whose fate the lock table decided
    /// (granted when another holder let go; dropped when their open
    /// closed: STATUS_RANGE_NOT_LOCKED).
    pub fn poll_locks(&mut self, now_ns: i64) -> Vec<Event> {
        let _ = now_ns;
        if self.async_locks.is_empty() {
            return Vec::new();
        }
        let outcomes = {
            let mut t = self.cfg.share_modes.locks().table();
            // Looking changes nothing (a mutable use of the table wakes
            // every waiting connection: `LockManager::on_change`).
            if !t.has_outcomes(duet_locks::Protocol::Smb, self.conn_key) {
                return Vec::new();
            }
            t.take_outcomes(duet_locks::Protocol::Smb, self.conn_key)
        };
        let mut out = Vec::new();
        for o in outcomes {
            let Some(async_id) = self
                .async_locks
                .iter()
                .find(|(_, a)| a.waiter == o.id())
                .map(|(k, _)| *k)
            else {
                continue;
            };
            let Some(a) = self.async_locks.remove(&async_id) else { continue };
            let (status, body) = match o {
                duet_locks::Outcome::Granted { .. } => (NtStatus::SUCCESS, lock_body()),
                duet_locks::Outcome::Expired { .. } => (NtStatus::LOCK_NOT_GRANTED, error_body()),
                duet_locks::Outcome::Dropped { .. } => (NtStatus::RANGE_NOT_LOCKED, error_body()),
            };
            out.extend(self.send_async(&a, status, &body));
        }
        out
    }

    /// A fresh AsyncId (MS-SMB2 3.3.4.2).
    pub(super) fn new_async_id(&mut self) -> u64 {
        let id = self.next_async_id;
        self.next_async_id += 1;
        id
    }

    /// CANCEL (MS-SMB2 3.3.5.16) of whatever async request it names: a
    /// blocking LOCK, a CHANGE_NOTIFY, a CREATE parked for breaks.
    fn cancel(&mut self, hdr: &Header) -> Vec<Event> {
        if let Some(out) = self.cancel_notify(hdr) {
            return out;
        }
        if let Some(out) = self.cancel_parked(hdr) {
            return out;
        }
        self.cancel_lock(hdr)
    }

    /// CANCEL of a CREATE parked until oplock or lease breaks are over: it
    /// is forgotten (it had changed nothing) and answered STATUS_CANCELLED
    /// in the ASYNC form of its interim answer.
    fn cancel_parked(&mut self, hdr: &Header) -> Option<Vec<Event>> {
        let first = |frame: &[u8]| Compound::new(frame).next().and_then(|m| m.ok()).map(|m| m.header);
        let key = self
            .parked
            .iter()
            .find(|(id, p)| match hdr.ids {
                HeaderIds::Async { async_id } => **id == async_id,
                HeaderIds::Sync { .. } => first(&p.frame).is_some_and(|h| h.message_id == hdr.message_id),
            })
            .map(|(k, _)| *k)?;
        let p = self.parked.remove(&key)?;
        let mut h = first(&p.frame)?;
        h.flags.0 |= crate::smb2::header::HeaderFlags::ASYNC_COMMAND;
        h.ids = HeaderIds::Async { async_id: key };
        let encrypt = p.encrypted_by.and_then(|sid| {
            let k = self.sessions.get(&sid)?.keys.as_ref()?.encrypt.clone()?;
            Some((sid, k))
        });
        let sign = if encrypt.is_none() && h.flags.is_signed() {
            self.sessions.get(&h.session_id).and_then(|s| s.keys.as_ref()).map(|k| k.signing.clone())
        } else {
            None
        };
        let reply = AsyncReply { hdr: h, sign, encrypt };
        Some(self.send_reply(&reply, NtStatus::CANCELLED, &error_body()))
    }

    /// CANCEL (MS-SMB2 3.3.5.16): the blocking LOCK it names by AsyncId
    /// (or, in the SYNC form, by MessageId) completes with
    /// STATUS_CANCELLED if it still waits.
    fn cancel_lock(&mut self, hdr: &Header) -> Vec<Event> {
        let key = self
            .async_locks
            .iter()
            .find(|(id, a)| match hdr.ids {
                HeaderIds::Async { async_id } => **id == async_id,
                HeaderIds::Sync { .. } => a.hdr.message_id == hdr.message_id,
            })
            .map(|(k, _)| *k);
        let Some(a) = key.and_then(|k| self.async_locks.remove(&k)) else {
            return Vec::new();
        };
        let was_waiting = self.cfg.share_modes.locks().table().cancel(a.waiter);
        if was_waiting {
            self.send_async(&a, NtStatus::CANCELLED, &error_body())
        } else {
            // Granted (or dropped) meanwhile: poll_locks answers it.
            self.async_locks.insert(a.hdr.async_id().unwrap_or(0), a);
            Vec::new()
        }
    }

    /// The final response of an async request: no credits (MS-SMB2
    /// 3.3.4.2), signed and encrypted as its request's session was.
    fn send_async(&mut self, a: &AsyncLock, status: NtStatus, body: &[u8]) -> Vec<Event> {
        let reply = AsyncReply { hdr: a.hdr, sign: a.sign.clone(), encrypt: a.encrypt.clone() };
        self.send_reply(&reply, status, body)
    }

    /// The final response of an async request (see [`AsyncReply`]).
    pub(super) fn send_reply(&mut self, a: &AsyncReply, status: NtStatus, body: &[u8]) -> Vec<Event> {
        let mut out = message_bytes(&a.hdr, status, 0, body);
        if let Some((sid, key)) = &a.encrypt {
            let mut nonce = [0u8; 16];
            nonce[..4].copy_from_slice(&self.nonce_prefix);
            nonce[4..12].copy_from_slice(&self.nonce_counter.to_le_bytes());
            self.nonce_counter += 1;
            match key.encrypt(*sid, nonce, &out) {
                Some(f) => out = f,
                None => return self.close(),
            }
        } else if let Some(k) = &a.sign {
            k.sign_in_place(&mut out);
        }
        match transport(out) {
            Some(f) => vec![Event::Send(f)],
            None => self.close(),
        }
    }

    // ---- IOCTL ---------------------------------------------------------

    /// FSCTL_CREATE_OR_GET_OBJECT_ID (MS-FSCC 2.3.7): duet derives a
    /// stable object id from the node instead of storing one.
    fn plan_object_id(
        &mut self,
        fp: &mut FramePlan,
        slot: usize,
        t: Target,
        io: &IoctlRequest<'_>,
    ) -> Plan {
        if io.flags & IoctlRequest::IS_FSCTL == 0 {
            return done(NtStatus::NOT_SUPPORTED);
        }
        if (io.max_output_response as usize) < OBJECT_ID_BUFFER_SIZE {
            return done(NtStatus::BUFFER_TOO_SMALL);
        }
        let d = Deferred::ObjectId {
            target: t,
            ctl_code: io.ctl_code,
        };
        if let Target::Table(_) = t {
            let (status, body) = self.complete_deferred(d, &HashMap::new());
            return Plan::Done { status, body };
        }
        fp.deferred.insert(slot, d);
        // A placeholder: `finish` answers the slot.
        done(NtStatus::UNSUCCESSFUL)
    }

    /// Answers a [`Deferred`] slot; `created` maps the CREATE slots of the
    /// frame to their opens.
    fn complete_deferred(
        &mut self,
        d: Deferred,
        created: &HashMap<usize, Result<u64, NtStatus>>,
    ) -> (NtStatus, Vec<u8>) {
        match d {
            Deferred::Status {
                target,
                status,
                body,
            } => match target {
                Target::Pending(slot) => match created.get(&slot) {
                    Some(Err(e)) => (*e, error_body()),
                    _ => (status, body),
                },
                Target::Table(_) => (status, body),
            },
            Deferred::ObjectId { target, ctl_code } => {
                let id = match target {
                    Target::Table(id) => Ok(id),
                    Target::Pending(slot) => created
                        .get(&slot)
                        .copied()
                        .unwrap_or(Err(NtStatus::INVALID_PARAMETER)),
                };
                let node = match id.map(|id| (id, self.opens.get(&id).map(|o| o.node))) {
                    Ok((id, Some(node))) => (id, node),
                    Ok((_, None)) => return (NtStatus::FILE_CLOSED, error_body()),
                    Err(s) => return (s, error_body()),
                };
                let (id, node) = node;
                // FILE_OBJECTID_BUFFER: ObjectId, BirthVolumeId,
                // BirthObjectId, DomainId.
                let mut object_id = [0u8; 16];
                object_id[..8].copy_from_slice(&node.to_le_bytes());
                object_id[8..].copy_from_slice(&self.cfg.server_guid[..8]);
                let mut out = Vec::with_capacity(OBJECT_ID_BUFFER_SIZE);
                out.extend_from_slice(&object_id);
                out.extend_from_slice(&self.cfg.server_guid);
                out.extend_from_slice(&object_id);
                out.extend_from_slice(&[0; 16]);
                let body = body_of(&Response::Ioctl(IoctlResponse {
                    ctl_code,
                    file_id: FileId {
                        persistent: id,
                        volatile: id,
                    },
                    input: &[],
                    output: &out,
                    flags: 0,
                }));
                (NtStatus::SUCCESS, body)
            }
        }
    }

    fn ioctl(&mut self, hdr: &Header, req: &IoctlRequest<'_>) -> Plan {
        if req.flags & IoctlRequest::IS_FSCTL == 0 {
            return done(NtStatus::NOT_SUPPORTED);
        }
        if req.max_output_response > self.cfg.max_transact_size {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let reply = |output: &[u8]| {
            ok(Response::Ioctl(IoctlResponse {
                ctl_code: req.ctl_code,
                file_id: req.file_id,
                input: &[],
                output,
                flags: 0,
            }))
        };
        match req.ctl_code {
            ctl_code::FSCTL_VALIDATE_NEGOTIATE_INFO => {
                let Some(n) = self.negotiated.clone() else {
                    return done(NtStatus::INVALID_PARAMETER);
                };
                if n.dialect == dialect::SMB3_1_1 {
                    // 3.1.1 protects the negotiation with the preauth hash;
                    // a client must not send this (3.3.5.15.12).
                    self.closed = true;
                    return done(NtStatus::ACCESS_DENIED);
                }
                let Ok(v) = ValidateNegotiateInfoRequest::decode(req.input) else {
                    return done(NtStatus::INVALID_PARAMETER);
                };
                let chosen_ok = v
                    .dialects
                    .iter()
                    .filter(|d| self.cfg.dialects.contains(d))
                    .max()
                    == Some(&n.dialect);
                if v.guid != n.client_guid
                    || v.security_mode != n.client_security_mode
                    || v.capabilities != n.client_caps
                    || !chosen_ok
                {
                    self.closed = true;
                    return done(NtStatus::ACCESS_DENIED);
                }
                if (req.max_output_response as usize) < ValidateNegotiateInfoResponse::SIZE {
                    return done(NtStatus::INVALID_PARAMETER);
                }
                let mut out = Vec::new();
                ValidateNegotiateInfoResponse {
                    capabilities: n.server_caps,
                    guid: self.cfg.server_guid,
                    security_mode: n.server_security_mode,
                    dialect: n.dialect,
                }
                .encode(&mut out);
                reply(&out)
            }
            ctl_code::FSCTL_QUERY_NETWORK_INTERFACE_INFO => match self.cfg.interface {
                Some(address) => {
                    let mut out = Vec::new();
                    NetworkInterfaceInfo::encode_list(
                        &[NetworkInterfaceInfo {
                            if_index: 1,
                            capability: NetworkInterfaceInfo::RSS_CAPABLE,
                            link_speed: self.cfg.link_speed,
                            address,
                        }],
                        &mut out,
                    );
                    if out.len() > req.max_output_response as usize {
                        return done(NtStatus::BUFFER_TOO_SMALL);
                    }
                    reply(&out)
                }
                None => done(NtStatus::NOT_SUPPORTED),
            },
            ctl_code::FSCTL_DFS_GET_REFERRALS | ctl_code::FSCTL_DFS_GET_REFERRALS_EX => {
                done(extra_status::FS_DRIVER_REQUIRED)
            }
            // Pipe opens are answered by `pipe.rs` before this: here the
            // handle is a file or no open at all.
            ctl_code::FSCTL_PIPE_TRANSCEIVE | ctl_code::FSCTL_PIPE_PEEK => {
                let _ = hdr;
                if self.opens.contains_key(&req.file_id.volatile) {
                    done(NtStatus::INVALID_DEVICE_REQUEST)
                } else {
                    done(NtStatus::FILE_CLOSED)
                }
            }
            ctl_code::FSCTL_PIPE_WAIT => super::pipe::pipe_wait(req.input),
            _ => done(NtStatus::INVALID_DEVICE_REQUEST),
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("dialect", &self.dialect())
            .field("sessions", &self.sessions.len())
            .field("opens", &self.opens.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

/// A UTF-16 string of the wire as Rust text (lossy).
pub(super) fn text(u: &Utf16<'_>) -> String {
    u.to_string_lossy()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_track_the_window() {
        let mut c = Credits {
            low: 0,
            high: 1,
            used: BTreeSet::new(),
        };
        assert!(c.consume(0, 1));
        assert!(!c.consume(0, 1), "reuse");
        assert!(!c.consume(1, 1), "not granted yet");
        assert_eq!(c.grant(10, 8), 8);
        assert!(c.consume(5, 2));
        assert!(c.consume(1, 1));
        assert!(!c.consume(6, 1));
        assert!(!c.consume(9, 1), "beyond the window");
        assert_eq!(c.low, 2);
        assert!(c.outstanding() <= 8);
        let before = c.outstanding() as u16;
        assert_eq!(c.grant(100, 8), 8 - before);
        assert!(!c.consume(u64::MAX, 2));
    }
}

/// Whether a plain frame's compound chain (MS-SMB2 3.3.5.2.7: NextCommand
/// at header offset 20) holds a request with `command` (header offset 12).
fn chain_has(frame: &[u8], command: Command) -> bool {
    let mut at = 0usize;
    for _ in 0..1024 {
        let Some(h) = frame.get(at..at + 64) else { return false };
        if u16::from_le_bytes([h[12], h[13]]) == command.0 {
            return true;
        }
        let next = u32::from_le_bytes([h[20], h[21], h[22], h[23]]) as usize;
        if next == 0 {
            return false;
        }
        at += next;
    }
    false
}
