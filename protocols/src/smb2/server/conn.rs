//! The connection: framing, credits, signing and encryption of frames,
//! the dispatch of each message to its handler, CANCEL, IOCTL, ECHO, and
//! the assembly of compound responses. The handlers live beside it
//! (`session.rs`, `fsops.rs`, `lock.rs`, `pipe.rs`, `lease.rs`,
//! `oplock.rs`, `notify.rs`, `durable.rs`) as `impl Connection` blocks;
//! the state they share is in `state.rs`, the planning vocabulary in
//! `plan.rs`. This file imports neither handler.

use std::collections::{BTreeSet, HashMap, VecDeque};

use duet_fs::{Batch, BatchResult, NodeId, OpResult};

use super::crypto::{preauth_update, CipherKey, Rng, SigningKey};
use super::info::extra_status;
use super::{Directory, Event, ServerConfig};
use crate::auth::spnego;
use crate::smb2::change_notify::ChangeNotifyRequest;
use crate::smb2::compound::Compound;
use crate::smb2::header::{Command, Header, HeaderFlags, HeaderIds, HEADER_SIZE};
use crate::smb2::ioctl::{
    ctl_code, IoctlRequest, IoctlResponse, NetworkInterfaceInfo, ValidateNegotiateInfoRequest,
    ValidateNegotiateInfoResponse,
};
use crate::smb2::message::{Request, Response};
use crate::smb2::negotiate::dialect;
use crate::smb2::status::NtStatus;
use crate::smb2::transform::{FrameKind, TransformHeader};
use crate::smb2::FileId;
use super::plan::*;
use super::state::*;

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

const OBJECT_ID_BUFFER_SIZE: usize = 64;

/// One response of a frame: request header, credits, signing key, status, body.
type Answered = (Header, u16, Option<SigningKey>, NtStatus, Vec<u8>);

/// An SMB2/3 server connection, sans-I/O.
pub struct Connection {
    pub(super) cfg: ServerConfig,
    /// This connection's key in the daemon-wide share-mode table.
    pub(super) conn_key: u64,
    pub(super) rng: Rng,
    pub(super) negotiated: Option<Negotiated>,
    credits: Credits,
    pub(super) preauth: [u8; 64],
    pub(super) sessions: HashMap<u64, Session>,
    pub(super) opens: HashMap<u64, Open>,
    /// Named pipe opens on IPC$ (`pipe.rs`), keyed like `opens`.
    pub(super) pipes: HashMap<u64, PipeOpen>,
    /// How SIDs are shown to clients and read from them (machine SIDs for
    /// duet's users; [`Directory::sid_map`]), as of the last frame.
    pub(super) sid_map: Option<std::sync::Arc<duet_fs::acl::SidMap>>,
    pub(super) next_tree_id: u32,
    /// Blocking LOCKs waiting, by AsyncId.
    pub(super) async_locks: HashMap<u64, AsyncLock>,
    /// The AsyncId of the interim answer `dispatch` just planned.
    pub(super) last_async: Option<AsyncLock>,
    next_async_id: u64,
    /// Directory watches by open (`notify.rs`).
    pub(super) watches: HashMap<u64, super::state::Watch>,
    /// CHANGE_NOTIFYs answered STATUS_PENDING, by AsyncId.
    pub(super) notifies: std::collections::BTreeMap<u64, super::state::WaitingNotify>,
    /// The CHANGE_NOTIFY `dispatch` just made wait.
    pub(super) last_notify: Option<super::state::WaitingNotify>,
    pub(super) watches_changed: bool,
    pending: HashMap<u64, FramePlan>,
    /// Frames (decrypted, with the session that encrypted them) held back
    /// until the batches in progress finish: a CLOSE must not overtake the
    /// requests sent before it on its handle (a QUERY_DIRECTORY then CLOSE
    /// sent together: the listing is answered, then the close), and what
    /// came after a held frame waits behind it. See [`Connection::resume`].
    held: VecDeque<(Vec<u8>, Option<u64>, Option<Via>)>,
    pub(super) next_token: u64,
    nonce_prefix: [u8; 4],
    nonce_counter: u64,
    pub(super) closed: bool,
    /// What planning decided for other connections (oplock breaks to
    /// route), sent out ahead of the frame's own events.
    pub(super) outbox: Vec<Event>,
    /// CREATEs waiting for oplock breaks, by AsyncId (`oplock.rs`).
    pub(super) parked: HashMap<u64, super::state::ParkedCreate>,
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
    pub(super) side_removals: HashMap<u64, Vec<String>>,
    /// The session a SESSION_SETUP just created, for its response header.
    pub(super) last_new_session: u64,
    /// The tree a TREE_CONNECT just made, for its response header.
    pub(super) last_new_tree: u32,
    /// The channel the frame being processed came through (a connection
    /// bound to one of this connection's sessions), None for this one.
    pub(super) via: Option<Via>,
    /// Credits already granted to the messages of the frame being
    /// processed (by the channel it came through).
    granted: Option<Vec<u16>>,
    /// Channel bindings in progress here, by session id (`session.rs`).
    pub(super) binding: HashMap<u64, Binding>,
    /// Sessions of other connections this one is bound to as a channel:
    /// session id -> the connection holding it. Their frames are
    /// forwarded there ([`Event::Forward`]).
    pub(super) bound: HashMap<u64, u64>,
}

pub use super::plan::MAX_FRAME;

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

/// The bytes of one response message: header and body.
fn message_bytes(hdr: &Header, status: NtStatus, credits: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_SIZE + body.len());
    put_message(&mut out, hdr, status, credits, body);
    out
}

/// The Direct TCP transport header before each frame (MS-SMB2 2.1).
const TRANSPORT_HEADER: usize = 4;

/// Appends the response to the request of `hdr`: its header, then `body`.
fn put_message(out: &mut Vec<u8>, hdr: &Header, status: NtStatus, credits: u16, body: &[u8]) {
    let mut h = hdr.response(status, credits);
    if hdr.flags.is_related() {
        h.flags.0 |= HeaderFlags::RELATED_OPERATIONS;
    }
    h.encode(out);
    out.extend_from_slice(body);
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
            sid_map: None,
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
            via: None,
            granted: None,
            binding: HashMap::new(),
            bound: HashMap::new(),
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

    pub(super) fn close(&mut self) -> Vec<Event> {
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
            Ok(FrameKind::Plain) if self.is_forwarded(frame) => self.forward(frame, None, now_ns, dir),
            Ok(FrameKind::Plain) if self.must_hold(frame) => self.hold(frame.to_vec(), None),
            Ok(FrameKind::Plain) => self.process(frame, None, now_ns, dir),
            Ok(FrameKind::Smb1) => self.smb1_negotiate(frame, now_ns),
            Ok(FrameKind::Encrypted) => {
                let Ok((th, _)) = TransformHeader::decode(frame) else {
                    return self.close();
                };
                let key = match self.sessions.get(&th.session_id) {
                    Some(s) => s.keys.as_ref().and_then(|k| k.decrypt.clone()),
                    // A session this connection is a channel of: its
                    // keys are the session's (MS-SMB2 3.3.5.2.1.1).
                    None if self.bound.contains_key(&th.session_id) => {
                        self.cfg.sessions.get(th.session_id).and_then(|g| g.decrypt)
                    }
                    None => None,
                };
                let Some(key) = key else { return self.close() };
                match key.decrypt(frame) {
                    Some(plain) if FrameKind::of(&plain) == Ok(FrameKind::Plain) && self.is_forwarded(&plain) => {
                        self.forward(&plain, Some(th.session_id), now_ns, dir)
                    }
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
        let via = self.via.clone();
        self.held.push_back((frame, encrypted_by, via));
        Vec::new()
    }

    /// Whether `frame` is for a session of another connection that this
    /// one is bound to as a channel (its first message names it).
    fn is_forwarded(&self, frame: &[u8]) -> bool {
        if self.bound.is_empty() {
            return false;
        }
        let Some(Ok(m)) = Compound::new(frame).next() else { return false };
        // A NEGOTIATE is this connection's own (a second one ends it).
        m.header.command != Command::NEGOTIATE
            && self.bound.contains_key(&m.header.session_id)
            && !self.sessions.contains_key(&m.header.session_id)
    }

    /// A frame of a session this connection is a channel of (MS-SMB2
    /// 3.3.5.5): its credits are this connection's (3.3.1.1), the rest is
    /// the session's connection's, which gets the frame with the credits
    /// granted ([`Event::Forward`]). A session gone from the daemon-wide
    /// table is forgotten and the frame answered here.
    fn forward(&mut self, frame: &[u8], encrypted_by: Option<u64>, now_ns: i64, dir: &dyn Directory) -> Vec<Event> {
        let sid = match Compound::new(frame).next() {
            Some(Ok(m)) => m.header.session_id,
            _ => return self.close(),
        };
        if !self.bound.contains_key(&sid) {
            return self.close();
        }
        // The table names the connection holding the session now (it may
        // have been handed over to another channel).
        let owner = match self.cfg.sessions.get(sid) {
            Some(g) if g.valid && g.conn != self.conn_key => g.conn,
            _ => {
                self.bound.remove(&sid);
                return self.process(frame, encrypted_by, now_ns, dir);
            }
        };
        self.bound.insert(sid, owner);
        let mut grants = Vec::new();
        for m in Compound::new(frame) {
            let Ok(m) = m else { break };
            let hdr = m.header;
            if hdr.flags.is_response() {
                return self.close();
            }
            if hdr.command == Command::CANCEL {
                grants.push(0);
                continue;
            }
            if !self.credits.consume(hdr.message_id, hdr.credit_charge) {
                return self.close();
            }
            grants.push(self.credits.grant(hdr.credit, self.cfg.max_credits));
        }
        vec![Event::Forward { owner, channel: self.conn_key, frame: frame.to_vec(), grants, encrypted_by }]
    }

    /// A frame that came through channel `channel` (a connection bound to
    /// one of this connection's sessions, MS-SMB2 3.3.5.5), decrypted
    /// there, with the credits it granted: served as if it came here, its
    /// responses checked and signed with that Channel.SigningKey and sent
    /// back through it ([`Event::SendOn`]).
    pub fn on_channel_frame(
        &mut self,
        channel: u64,
        frame: &[u8],
        grants: Vec<u16>,
        encrypted_by: Option<u64>,
        now_ns: i64,
        dir: &dyn Directory,
    ) -> Vec<Event> {
        if self.closed {
            return Vec::new();
        }
        self.via = Some(Via { channel, grants });
        let out = if self.must_hold(frame) {
            self.hold(frame.to_vec(), encrypted_by)
        } else {
            self.process(frame, encrypted_by, now_ns, dir)
        };
        self.via = None;
        out
    }

    /// A frame [`Event::Forward`] could not deliver: the session's
    /// connection is gone, and with it the session. The channel forgets
    /// it and answers the frame itself (STATUS_USER_SESSION_DELETED), with
    /// the credits it granted.
    pub fn on_channel_lost(&mut self, frame: &[u8], grants: Vec<u16>, encrypted_by: Option<u64>, now_ns: i64, dir: &dyn Directory) -> Vec<Event> {
        if let Some(Ok(m)) = Compound::new(frame).next() {
            self.bound.remove(&m.header.session_id);
        }
        self.granted = Some(grants);
        let out = self.process(frame, encrypted_by, now_ns, dir);
        self.granted = None;
        out
    }

    /// Connection `channel` was bound to session `session` with
    /// Channel.SigningKey `key` ([`Event::Bound`]).
    pub fn add_channel(&mut self, session: u64, channel: u64, key: SigningKey) {
        if let Some(s) = self.sessions.get_mut(&session) {
            s.channels.insert(channel, key);
        }
    }

    /// The key that checks and signs session `sid`'s messages through
    /// `channel` (None: this connection): Channel.SigningKey.
    pub(super) fn channel_key(&self, sid: u64, channel: Option<u64>) -> Option<SigningKey> {
        let s = self.sessions.get(&sid)?;
        match channel {
            None => s.own_signing(),
            Some(c) => s.channels.get(&c).cloned(),
        }
    }

    /// The event that sends `frame` where the request came from.
    pub(super) fn send_to(channel: Option<u64>, frame: Vec<u8>) -> Event {
        match channel {
            None => Event::Send(frame),
            Some(conn) => Event::SendOn { conn, frame },
        }
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
                Some((f, _, _)) if self.pending.is_empty() || !chain_has(f, Command::CLOSE) => {}
                _ => break,
            }
            let Some((frame, enc, via)) = self.held.pop_front() else { break };
            self.via = via;
            out.extend(self.process(&frame, enc, now_ns, dir));
            self.via = None;
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

    /// The batch of [`Event::Run`] `token` is taking long (the driver's
    /// timer: a slow device, a cluster waiting for a leader). Every
    /// request of its frame not yet asynchronous gets an AsyncId and an
    /// interim STATUS_PENDING response now, which carries its credits
    /// (MS-SMB2 3.3.4.2), so the client extends its request timer
    /// (3.2.5.1.5) instead of giving up; the final responses follow when
    /// the batch is done, in the ASYNC form with no credits (3.3.4.3). All
    /// requests of a compound go asynchronous together, since the frame
    /// commits as one batch. Nothing is sent for a token already answered,
    /// or for a frame whose CHANGE_NOTIFY will wait (it has an interim of
    /// its own). A CANCEL naming one of these AsyncIds finds nothing to
    /// cancel (3.3.5.16): the batch completes either way.
    pub fn go_async(&mut self, token: u64) -> Vec<Event> {
        let Some(fp) = self.pending.get_mut(&token) else {
            return Vec::new();
        };
        if fp.deferred.values().any(|d| matches!(d, Deferred::Notify { .. })) {
            return Vec::new();
        }
        let mut interim: Vec<Answered> = Vec::new();
        for s in fp.slots.iter_mut() {
            // A parked CREATE run again already had its interim answer.
            if s.hdr.flags.is_async() {
                continue;
            }
            let async_id = self.next_async_id;
            self.next_async_id += 1;
            s.hdr.flags.0 |= HeaderFlags::ASYNC_COMMAND;
            s.hdr.ids = HeaderIds::Async { async_id };
            interim.push((s.hdr, s.credits, s.sign.clone(), NtStatus::PENDING, error_body()));
            s.credits = 0;
        }
        if interim.is_empty() {
            return Vec::new();
        }
        let (encrypt, channel) = (fp.encrypt.clone(), fp.channel);
        self.send_frame(interim, encrypt, channel)
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
        self.sid_map = dir.sid_map();
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
        fp.channel = self.via.as_ref().map(|v| v.channel);
        let pregranted = self.via.as_ref().map(|v| v.grants.clone()).or_else(|| self.granted.clone());
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
            } else if let Some(g) = &pregranted {
                // Consumed and granted by the channel it came through.
                g.get(i).copied().unwrap_or(0)
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
                let park = super::state::ParkedCreate {
                    frame: frame.to_vec(),
                    encrypted_by,
                    channel: fp.channel,
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
                a.channel = fp.channel;
                if let HeaderIds::Async { async_id } = hdr.ids {
                    self.async_locks.insert(async_id, a);
                }
            }
            // A CHANGE_NOTIFY that waits for a change: likewise.
            self.wait_notify(&mut hdr, sign.clone(), fp.encrypt.clone(), fp.channel);
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

    /// A CHANGE_NOTIFY just planned waits (`plan_change_notify` left it
    /// in `last_notify`): its response header `hdr` takes the ASYNC form,
    /// and the final answer will go out as its request came (signed or
    /// encrypted).
    fn wait_notify(&mut self, hdr: &mut Header, sign: Option<SigningKey>, encrypt: Option<(u64, CipherKey)>, channel: Option<u64>) {
        if let Some(mut n) = self.last_notify.take() {
            hdr.flags.0 |= crate::smb2::header::HeaderFlags::ASYNC_COMMAND;
            hdr.ids = n.reply.hdr.ids;
            n.reply = AsyncReply { hdr: *hdr, sign, encrypt, channel };
            if let HeaderIds::Async { async_id } = hdr.ids {
                self.notifies.insert(async_id, n);
            }
        }
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
    pub(super) fn end_removals(&mut self, paths: &mut Vec<String>) {
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
            let mut hdr = s.hdr;
            let (status, body) = match s.plan {
                Plan::Done { status, body } => match fp.deferred.remove(&i) {
                    Some(Deferred::Notify { target, flags, filter, output_len }) => {
                        let req = ChangeNotifyRequest {
                            flags,
                            output_buffer_length: output_len,
                            file_id: FileId::RELATED,
                            completion_filter: filter,
                        };
                        let plan = match target {
                            Target::Pending(slot) => match created.get(&slot).copied() {
                                Some(Ok(id)) => self.plan_change_notify(&mut fp, &hdr, Target::Table(id), &req),
                                Some(Err(e)) => done(e),
                                None => done(NtStatus::INVALID_PARAMETER),
                            },
                            Target::Table(_) => done(NtStatus::INVALID_PARAMETER),
                        };
                        let encrypt = fp.encrypt.clone();
                        self.wait_notify(&mut hdr, s.sign.clone(), encrypt, fp.channel);
                        match plan {
                            Plan::Done { status, body } => (status, body),
                            Plan::Fs(_) => (NtStatus::INTERNAL_ERROR, error_body()),
                        }
                    }
                    Some(d) => self.complete_deferred(d, &created),
                    None => (status, body),
                },
                Plan::Fs(p) => self.complete(&mut fp, i, p, &results, &mut created),
            };
            answered.push((hdr, s.credits, s.sign, status, body));
        }
        let encrypt = fp.encrypt.take();
        self.send_frame(answered, encrypt, fp.channel)
    }

    /// Assembles the responses `answered` into the one frame to send
    /// (compounded when several), signed or encrypted as their requests'
    /// sessions ask.
    fn send_frame(&mut self, answered: Vec<Answered>, encrypt: Option<(u64, CipherKey)>, channel: Option<u64>) -> Vec<Event> {
        // Assemble, behind room for the transport header (MS-SMB2 2.1):
        // pad every message of a compound to 8 (the last one too, as
        // Windows and Samba do), chain NextCommand, then sign each message
        // over its bytes (padding included). Each body is copied once, into
        // the frame that is sent (a READ's body is the data read).
        let size: usize = answered.iter().map(|a| HEADER_SIZE + a.4.len().max(9) + 7).sum();
        let mut out = Vec::with_capacity(TRANSPORT_HEADER + size);
        out.extend_from_slice(&[0; TRANSPORT_HEADER]);
        let mut spans = Vec::with_capacity(answered.len());
        let n = answered.len();
        for (i, (hdr, credits, _, status, body)) in answered.iter().enumerate() {
            let start = out.len();
            // A status without a command body carries the error body
            // (MS-SMB2 2.2.2).
            let empty;
            let body: &[u8] = if Response::has_command_body(hdr.command, *status) || !body.is_empty() {
                body
            } else {
                empty = error_body();
                &empty
            };
            put_message(&mut out, hdr, *status, *credits, body);
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
        if encrypt.is_none() {
            for ((hdr, _, sign, status, _), span) in answered.iter().zip(&spans) {
                if let Some(k) = sign {
                    k.sign_in_place(&mut out[span.clone()]);
                } else if *status == NtStatus::USER_SESSION_DELETED && hdr.flags.is_signed() {
                    // A signed request naming a session this connection
                    // does not hold (a channel not bound): no key to sign
                    // with, but the SIGNED flag stays, so that a client
                    // requiring signing takes the status (it does not
                    // check this status's signature; smbtorture
                    // smb2.session.bind2, bind_invalid_auth).
                    let m = &mut out[span.clone()];
                    let flags = u32::from_le_bytes([m[16], m[17], m[18], m[19]]) | HeaderFlags::SIGNED;
                    m[16..20].copy_from_slice(&flags.to_le_bytes());
                }
            }
        }
        if let Some((sid, key)) = encrypt {
            let mut nonce = [0u8; 16];
            nonce[..4].copy_from_slice(&self.nonce_prefix);
            nonce[4..12].copy_from_slice(&self.nonce_counter.to_le_bytes());
            self.nonce_counter += 1;
            // Never reached while the reservations of `dispatch` hold
            // (they count every response's largest size); a frame the
            // 24-bit length cannot say is never sent truncated: the
            // connection ends.
            return match key.encrypt(sid, nonce, &out[TRANSPORT_HEADER..]).and_then(transport) {
                Some(f) => vec![Self::send_to(channel, f)],
                None => self.close(),
            };
        }
        // As above: past the 24-bit length, the connection ends.
        let len = out.len() - TRANSPORT_HEADER;
        if len > MAX_FRAME {
            return self.close();
        }
        out[..TRANSPORT_HEADER].copy_from_slice(&(len as u32).to_be_bytes());
        vec![Self::send_to(channel, out)]
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
            } else if let Some(b) = self.binding.get_mut(&slot.hdr.session_id) {
                // A binding's answers go out signed: hashed as sent.
                let mut msg = msg;
                if let Some(k) = &slot.sign {
                    k.sign_in_place(&mut msg);
                }
                b.preauth = preauth_update(&b.preauth, &msg);
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
        if cmd == Command::NEGOTIATE && self.via.is_some() {
            // Another connection's NEGOTIATE (inside a compound that came
            // through a channel) is not this connection's second one.
            return (done(NtStatus::INVALID_PARAMETER), None);
        }
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
            if let Some(v) = &self.via {
                let channel = v.channel;
                return self.channel_session_setup(hdr, msg, ss, channel, dir, fp);
            }
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
                self.with_target(fp, chain, hdr, related, io.file_id, |me, fp, t| me.plan_compression(fp, hdr, t, &io))
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
        let key = match self.via.as_ref() {
            None => s.own_signing(),
            // Through a channel: its Channel.SigningKey (MS-SMB2
            // 3.3.5.2.4); a connection that is not one has no session.
            Some(v) => match s.channels.get(&v.channel) {
                Some(k) => Some(k.clone()),
                None => return Err(NtStatus::USER_SESSION_DELETED),
            },
        };
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
            self.channel_key(h.session_id, p.channel)
        } else {
            None
        };
        let reply = AsyncReply { hdr: h, sign, encrypt, channel: p.channel };
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
    pub(super) fn send_async(&mut self, a: &AsyncLock, status: NtStatus, body: &[u8]) -> Vec<Event> {
        let reply = AsyncReply { hdr: a.hdr, sign: a.sign.clone(), encrypt: a.encrypt.clone(), channel: a.channel };
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
            Some(f) => vec![Self::send_to(a.channel, f)],
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
            // Answered by `finish` itself (it changes the slot's header).
            Deferred::Notify { .. } => (NtStatus::INTERNAL_ERROR, error_body()),
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
                            // Not RSS_CAPABLE: a session's channels are all
                            // served by its first connection (multichannel,
                            // `session.rs`), so more channels to one address
                            // would add a hop, not throughput; Windows opens
                            // extra channels to an RSS interface.
                            capability: 0,
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
            ctl_code::FSCTL_PIPE_WAIT => Connection::pipe_wait(req.input),
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
