//! NFSv4.1 / 4.2 COMPOUND (RFC 8881, RFC 7862): one COMPOUND, one batch.
//!
//! The translator walks the operations in order, tracking the current and
//! saved filehandle as [`ObjRef`]s (an export object's id, or "the object
//! batch operation N produced") and the current stateid. File-system
//! operations become batch [`Op`]s (`stop_on_error`), each with a *step*
//! that turns its `OpResult` into the operation's result after the batch.
//! Operations that need no file system (SEQUENCE, PUTFH, SAVEFH, GETFH of
//! a known id, COMMIT, SECINFO_NO_NAME...) are answered from server state
//! on the spot. The reply stops at the first failing result (RFC 8881
//! 16.2.3), whichever kind of step produced it.
//!
//! State changes that depend on the batch are made when its result comes
//! back, in operation order: OPEN creates (or upgrades) its open stateid
//! then, CLOSE removes it then. A stateid an OPEN earlier in the same
//! COMPOUND will create is reserved at translation, so a later WRITE or
//! CLOSE using the current stateid is checked and batched with it: the
//! Linux and vNFS shape SEQUENCE PUTFH OPEN GETFH GETATTR WRITE CLOSE is
//! one batch.
//!
//! A few shapes take more than one batch, in order, still within one
//! COMPOUND reply:
//! - lock-state and session operations (LOCK, LOCKT, LOCKU,
//!   OPEN_DOWNGRADE, TEST_STATEID, FREE_STATEID, DELEGRETURN,
//!   RECLAIM_COMPLETE and the client/session operations) run against
//!   server state with every earlier result known: one that follows
//!   file-system operations ends the batch before it;
//! - an operation whose outcome is decided after the batch but which
//!   must gate what follows (VERIFY, NVERIFY, an EXCLUSIVE4_1 OPEN, an
//!   OPEN while share-deny modes are in play) ends its batch when more
//!   operations follow.
//!
//! The engine then continues from there with the filehandles resolved to
//! ids. Linux and vNFS compounds never hit these cases in their common
//! paths.

mod breaks;
mod deleg;
mod xattr;

pub(crate) use deleg::is_reply as is_cb_reply;

use std::net::IpAddr;

use duet_fs::{
    Access, Attrs, Batch, CreateKind, Credentials, FileType, IfExists, NodeId, ObjRef, Op,
    OpOutput, OpResult, SetAttrs, WriteData,
};

use super::attr::{
    self, fattr4_to_set, fattr4_vals, fattr4_vals_into, FsInfo, ObjCtx, EXCLCREAT, GETTABLE,
    SETTABLE,
};
use super::cookies::{make_cookie, Resume, MAX_POSITION};
use super::errors::nfs4_status;
use super::state::{range_end, Other, Principal, SlotCache, StateRef, KIND_OPEN};
use super::v3::{verf_attrs, verf_matches};
use super::{
    accepted, nobody, reply_with, CallCtx, ConnId, Event, ExportEntry, Exports, FileHandle,
    NfsServer, Pending,
};
use crate::nfs::nfs4::attrs::{fattr4 as fa, Fsid4};
use crate::nfs::nfs4::callback::CbGetattrAttrs;
use crate::nfs::nfs4::*;
use crate::nfs::rpc::{AcceptedReplyData, AUTH_SYS};
use crate::nfs::xdr::{LinkedList, List, Name, Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};

/// The fileid of the pseudo-root (NodeIds count up from 1; this one is
/// never reached).
pub const PSEUDO_FILEID: u64 = u64::MAX - 1;
/// The pseudo-root's fsid major ("duet").
pub const PSEUDO_FSID: u64 = 0x6475_6574;

/// The CLOSE result stateid of NFSv4.1 (as knfsd: seqid all ones).
const CLOSED: Stateid4 = Stateid4 {
    seqid: u32::MAX,
    other: [0; 12],
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fh {
    None,
    Pseudo,
    Obj { fsid: u64, obj: ObjRef },
}

enum Step {
    /// Encoded at translation: opnum and result.
    Ready {
        status: Nfsstat4,
        bytes: Vec<u8>,
    },
    GetFh {
        fsid: u64,
        op: usize,
    },
    GetAttr {
        fsid: u64,
        op: usize,
        req: Bitmap4,
    },
    Status {
        opnum: u32,
        op: usize,
    },
    /// LOOKUPP: `dir`, the current filehandle's attributes; `op`, its "..".
    LookupP {
        dir: usize,
        op: usize,
    },
    SecInfo {
        op: usize,
    },
    Access {
        op: usize,
        req: u32,
        ro: bool,
    },
    Open(Box<OpenStep>),
    Close {
        op: usize,
        other: Other,
    },
    Read {
        op: usize,
        plus: bool,
        offset: u64,
    },
    Write {
        op: usize,
    },
    Create {
        op: usize,
        attrset: Bitmap4,
    },
    Remove {
        op: usize,
    },
    Rename {
        op: usize,
    },
    Link {
        op: usize,
    },
    ReadLink {
        op: usize,
    },
    ReadDir {
        op: usize,
        fsid: u64,
        req: Bitmap4,
        skip: u64,
        base: u64,
        maxcount: u32,
        dircount: u32,
    },
    PseudoReadDir {
        roots: Vec<(String, u64, usize)>,
        req: Bitmap4,
        start: usize,
        maxcount: u32,
    },
    SetAttr {
        op: usize,
        /// The `Op::SetAcl` of an ACL in the same SETATTR.
        acl_op: Option<usize>,
        attrset: Bitmap4,
    },
    Verify {
        op: usize,
        fsid: u64,
        mask: Bitmap4,
        vals: Vec<u8>,
        negate: bool,
    },
    Copy {
        op: usize,
    },
    Seek {
        op: usize,
        offset: u64,
        data: bool,
    },
    Xattr(xattr::XattrStep),
    /// The hidden lookups of an operation that may break SMB caching
    /// (`breaks.rs`): answered DELAY or let through, never counted.
    Gate(Box<breaks::GateStep>),
    /// A GETATTR of a file another client holds a write delegation of:
    /// the COMPOUND waits for that client's CB_GETATTR answer
    /// (`deleg.rs`), then the GETATTR is translated again.
    CbGetattr(deleg::CbGetattrStep),
}

struct OpenStep {
    create: Option<usize>,
    open: usize,
    reserved: Other,
    owner: Vec<u8>,
    client: u64,
    access: u32,
    deny: u32,
    excl: Option<[u8; 8]>,
    attrset: Bitmap4,
    fsid: u64,
    /// OPEN4_SHARE_ACCESS_WANT_* bits (RFC 8881 18.16.3).
    want: u32,
    reclaim: bool,
    /// The delegation a CLAIM_PREVIOUS reclaims (RFC 8881 10.2.1).
    reclaim_deleg: Option<OpenDelegationType4>,
}

/// A COMPOUND in progress (waiting for its batch).
pub(crate) struct Compound {
    conn: ConnId,
    xid: u32,
    peer: IpAddr,
    cred: Credentials,
    tag: Vec<u8>,
    record: Option<Vec<u8>>,
    record_len: usize,
    exports: Vec<ExportEntry>,
    next_op: usize,
    n_ops: usize,
    stop: Option<CompoundStop>,
    halted: bool,
    results: XdrWriter,
    count: u32,
    last: Nfsstat4,
    cfh: Fh,
    sfh: Fh,
    cur_sid: Option<Stateid4>,
    saved_sid: Option<Stateid4>,
    session: Option<(SessionId4, usize, bool)>,
    clientid: Option<u64>,
    sessionless: bool,
    steps: Vec<Step>,
    reserved: Vec<(Other, Option<Stateid4>)>,
    squash: bool,
    read_only: bool,
    /// The server's grace period lasts (RFC 8881 8.4.2).
    grace: bool,
    now: i64,
    /// The most bytes the RPC reply may take under the session's channel
    /// attributes, and the error of the operation that would pass it
    /// (RFC 8881 2.10.6.4: NFS4ERR_REP_TOO_BIG, or
    /// NFS4ERR_REP_TOO_BIG_TO_CACHE when sa_cachethis asked for the reply
    /// to be kept and ca_maxresponsesize_cached is the smaller).
    reply_limit: Option<(usize, Nfsstat4)>,
    /// The operation (by index) that passed its break gate and is now
    /// translated for real (`breaks.rs`).
    gated: Option<usize>,
    /// The batch's WRITEs all asked UNSTABLE of `protocol` exports (and it
    /// changes nothing else): answered UNSTABLE before durable, COMMIT
    /// makes them so (RFC 8881 18.32.3, 18.3; docs/durability.md).
    lazy: Option<bool>,
    /// COMPOUND4args' minorversion: a session's callbacks carry the one
    /// its CREATE_SESSION came with (`deleg.rs`).
    minor: u32,
    /// The GETATTR (by index) whose CB_GETATTR was asked (or could not
    /// be), and what the write delegation's holder answered: its view of
    /// the file's change and size (RFC 8881 10.4.3).
    cb_getattr: Option<(usize, duet_fs::NodeId, Option<CbGetattrAttrs>)>,
}

enum Flow {
    Next,
    Halt,
    Barrier,
    /// The batch ends with a gate's lookups, and the same operation is
    /// translated again after it (`breaks.rs`).
    Gate,
}

fn limits(srv: &NfsServer) -> CompoundLimits {
    CompoundLimits {
        max_ops: srv.cfg.max_ops,
        min_minor_version: 1,
        max_minor_version: 2,
    }
}

fn fs_info(srv: &NfsServer) -> FsInfo {
    let c = &srv.cfg;
    let space = c.space.get();
    FsInfo {
        lease_time: c.lease_time_s,
        max_read: c.max_io,
        max_write: c.max_io,
        space_total: space.total,
        space_free: space.free,
        space_avail: space.avail,
        files_total: c.files_total,
        files_free: c.files_free,
    }
}

fn encode_res(res: &ResOp4<'_>) -> (Nfsstat4, Vec<u8>) {
    let mut w = XdrWriter::new();
    w.put_u32(res.opnum());
    res.encode_result(&mut w);
    (res.status(), w.into_inner())
}

fn err_bytes(opnum: u32, status: Nfsstat4) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.put_u32(opnum);
    status.encode(&mut w);
    if opnum == opnum::SETATTR {
        Bitmap4::new().encode(&mut w);
    }
    w.into_inner()
}

fn needs_empty_batch(op: &ArgOp4<'_>) -> bool {
    matches!(
        op,
        ArgOp4::Lock(_)
            | ArgOp4::LockT(_)
            | ArgOp4::LockU(_)
            | ArgOp4::OpenDowngrade(_)
            | ArgOp4::TestStateid(_)
            | ArgOp4::FreeStateid(_)
            | ArgOp4::DelegReturn(_)
            | ArgOp4::ReclaimComplete(_)
            | ArgOp4::ExchangeId(_)
            | ArgOp4::CreateSession(_)
            | ArgOp4::DestroySession(_)
            | ArgOp4::DestroyClientId(_)
            | ArgOp4::BindConnToSession(_)
    )
}

/// LOOKUPP of a filehandle an earlier operation of this batch yields
/// (LOOKUP, LOOKUPP, CREATE...) waits for that batch: whether it is an
/// export's root, whose parent is the pseudo-root and not the root itself,
/// is known only from the node id (RFC 8881 18.14: LOOKUPP gives the
/// handle LOOKUP gave for the parent).
fn needs_known_fh(c: &Compound, op: &ArgOp4<'_>) -> bool {
    matches!(op, ArgOp4::LookupP(()))
        && matches!(
            c.cfh,
            Fh::Obj {
                obj: ObjRef::Result(_),
                ..
            }
        )
}

fn is_sessionless(op: &ArgOp4<'_>) -> bool {
    matches!(
        op,
        ArgOp4::ExchangeId(_)
            | ArgOp4::CreateSession(_)
            | ArgOp4::DestroySession(_)
            | ArgOp4::DestroyClientId(_)
            | ArgOp4::BindConnToSession(_)
    )
}

fn utf8_name(n: &[u8]) -> Result<String, Nfsstat4> {
    let s = std::str::from_utf8(n).map_err(|_| Nfsstat4::INVAL)?;
    if s.is_empty() {
        return Err(Nfsstat4::INVAL);
    }
    if s == "." || s == ".." {
        return Err(Nfsstat4::BADNAME);
    }
    if s.contains('/') || s.contains('\0') {
        return Err(Nfsstat4::BADCHAR);
    }
    Ok(s.to_string())
}

fn pseudo_attrs(exports: &[ExportEntry]) -> Attrs {
    let mut change = 1u64;
    for e in exports {
        change = change
            .wrapping_mul(31)
            .wrapping_add(super::cookies::fnv32(e.name.as_bytes()) as u64);
    }
    Attrs {
        id: PSEUDO_FILEID,
        ftype: FileType::Directory,
        mode: 0o555,
        uid: 0,
        gid: 0,
        nlink: 2,
        rdev: 0,
        size: 4096,
        alloc_size: 4096,
        dos_attrs: 0,
        btime: 0,
        atime: 0,
        mtime: 0,
        ctime: 0,
        change,
    }
}

pub(super) fn call(
    srv: &mut NfsServer,
    ctx: &CallCtx,
    proc_: u32,
    mut r: XdrReader<'_>,
    record: &[u8],
    exports: &dyn Exports,
) -> Vec<Event> {
    match proc_ {
        NFSPROC4_NULL => return vec![reply_with(ctx.conn, ctx.xid, |_| {})],
        NFSPROC4_COMPOUND => {}
        _ => return vec![accepted(ctx.conn, ctx.xid, AcceptedReplyData::ProcUnavail)],
    }
    let args = match Compound4Args::decode(&mut r, &limits(srv)) {
        Ok(a) => a,
        Err(_) => return vec![accepted(ctx.conn, ctx.xid, AcceptedReplyData::GarbageArgs)],
    };
    if let Some(stop) = &args.stop {
        if stop.rejects_whole_compound() {
            let res = Compound4Res {
                status: stop.status(),
                tag: args.tag,
                results: Vec::new(),
            };
            return vec![reply_with(ctx.conn, ctx.xid, |w| res.encode(w))];
        }
    }
    let mut c = Box::new(Compound {
        conn: ctx.conn,
        xid: ctx.xid,
        peer: ctx.peer,
        cred: ctx.cred.clone(),
        tag: args.tag.0.to_vec(),
        record: None,
        record_len: ctx.record_len,
        exports: exports.exports(),
        next_op: 0,
        n_ops: args.ops.len(),
        stop: args.stop.clone(),
        halted: false,
        results: XdrWriter::new(),
        count: 0,
        last: Nfsstat4::OK,
        cfh: Fh::None,
        sfh: Fh::None,
        cur_sid: None,
        saved_sid: None,
        session: None,
        clientid: None,
        sessionless: false,
        steps: Vec::new(),
        reserved: Vec::new(),
        squash: false,
        read_only: false,
        grace: srv.in_grace(ctx.now_ns),
        now: ctx.now_ns,
        reply_limit: None,
        gated: None,
        lazy: None,
        minor: args.minorversion,
        cb_getattr: None,
    });
    // RFC 8881 2.10.6: SEQUENCE first, or one of the operations that may
    // come without a session.
    match args.ops.first() {
        None => {}
        Some(ArgOp4::Sequence(s)) => {
            c.next_op = 1;
            match sequence(srv, &mut c, s, args.ops.len(), ctx.now_ns) {
                Ok(bytes) => c.steps.push(Step::Ready {
                    status: Nfsstat4::OK,
                    bytes,
                }),
                Err(Some(cached)) => {
                    // A retry: the cached reply, under the new xid.
                    return vec![reply_with(ctx.conn, ctx.xid, |w| w.put_raw(&cached))];
                }
                Err(None) => {}
            }
        }
        // Without a SEQUENCE before it, EXCHANGE_ID, CREATE_SESSION,
        // DESTROY_SESSION, DESTROY_CLIENTID and BIND_CONN_TO_SESSION must
        // be alone: NFS4ERR_NOT_ONLY_OP on the first (RFC 8881 18.35.3,
        // 18.36.3, 18.37.3, 18.50.3, 18.34.3), before its own checks.
        Some(op) if is_sessionless(op) && args.ops.len() + usize::from(args.stop.is_some()) > 1 => {
            let bytes = err_bytes(op.opnum(), Nfsstat4::NOT_ONLY_OP);
            c.steps.push(Step::Ready {
                status: Nfsstat4::NOT_ONLY_OP,
                bytes,
            });
            c.halted = true;
        }
        Some(op) if is_sessionless(op) => c.sessionless = true,
        Some(op) => {
            let bytes = err_bytes(op.opnum(), Nfsstat4::OP_NOT_IN_SESSION);
            c.steps.push(Step::Ready {
                status: Nfsstat4::OP_NOT_IN_SESSION,
                bytes,
            });
            c.halted = true;
        }
    }
    let batch = if c.halted {
        None
    } else {
        Some(translate(srv, &mut c, &args.ops, ctx.now_ns))
    };
    if c.next_op < c.n_ops && !c.halted {
        c.record = Some(record.to_vec());
    }
    match batch {
        Some(b) if !b.ops.is_empty() => vec![srv.submit(b, "nfs4.compound", Pending::V4(c))],
        _ => drive(srv, c, Vec::new(), ctx.now_ns),
    }
}

/// The bytes of an RPC reply before the COMPOUND's results: the accepted
/// reply header with an AUTH_NONE verifier (RFC 5531, 24 bytes), then
/// COMPOUND4res's status, tag and result count (RFC 8881 16.2.2).
fn reply_overhead(tag: &[u8]) -> usize {
    24 + 4 + 4 + tag.len().div_ceil(4) * 4 + 4
}

/// SEQUENCE's result: opnum, status and SEQUENCE4resok (RFC 8881 18.46.2).
const SEQUENCE_RESULT_LEN: usize = 4 + 4 + 16 + 5 * 4;

/// SEQUENCE (RFC 8881 18.46). Ok: the result bytes; Err(Some): the
/// cached reply of a retry; Err(None): an error result was pushed.
fn sequence(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Sequence4Args,
    nops: usize,
    now: i64,
) -> Result<Vec<u8>, Option<Vec<u8>>> {
    let fail = |c: &mut Compound, st: Nfsstat4| {
        c.steps.push(Step::Ready {
            status: st,
            bytes: err_bytes(opnum::SEQUENCE, st),
        });
        c.halted = true;
        Err(None)
    };
    let Some(sess) = srv.state.sessions.get_mut(&a.sessionid) else {
        return fail(c, Nfsstat4::BADSESSION);
    };
    let nslots = sess.slots.len() as u32;
    let (max_ops, max_req, client) = (sess.max_ops, sess.max_request, sess.client);
    let (max_resp, max_cached) = (sess.max_response, sess.max_cached);
    let Some(slot) = sess.slots.get_mut(a.slotid as usize) else {
        return fail(c, Nfsstat4::BADSLOT);
    };
    if a.sequenceid == slot.seq && slot.seq != 0 {
        if slot.in_progress {
            return fail(c, Nfsstat4::DELAY);
        }
        return match &slot.cache {
            SlotCache::Reply(b) => Err(Some(b.clone())),
            _ => fail(c, Nfsstat4::RETRY_UNCACHED_REP),
        };
    }
    if a.sequenceid != slot.seq.wrapping_add(1) {
        return fail(c, Nfsstat4::SEQ_MISORDERED);
    }
    if nops as u64 > u64::from(max_ops) {
        return fail(c, Nfsstat4::TOO_MANY_OPS);
    }
    if c.record_len as u64 > u64::from(max_req) {
        return fail(c, Nfsstat4::REQ_TOO_BIG);
    }
    // RFC 8881 2.10.6.4, 18.46.3: when even the reply of SEQUENCE alone
    // would not fit the reply cache it asked for, SEQUENCE fails (and the
    // slot does not advance).
    let reply_limit = if a.cachethis && max_cached < max_resp {
        (max_cached as usize, Nfsstat4::REP_TOO_BIG_TO_CACHE)
    } else {
        (max_resp as usize, Nfsstat4::REP_TOO_BIG)
    };
    if reply_overhead(&c.tag) + SEQUENCE_RESULT_LEN > reply_limit.0 {
        return fail(c, reply_limit.1);
    }
    c.reply_limit = Some(reply_limit);
    slot.seq = a.sequenceid;
    slot.in_progress = true;
    slot.cache = SlotCache::Empty;
    srv.state.renew(client, now);
    c.session = Some((a.sessionid, a.slotid as usize, a.cachethis));
    c.clientid = Some(client);
    let status_flags = deleg::status_flags(srv, &a.sessionid, client);
    let res = ResOp4::Sequence(Nfs4Res::Ok(Sequence4ResOk {
        sessionid: a.sessionid,
        sequenceid: a.sequenceid,
        slotid: a.slotid,
        highest_slotid: nslots.saturating_sub(1),
        target_highest_slotid: nslots.saturating_sub(1),
        status_flags,
    }));
    Ok(encode_res(&res).1)
}

/// Translates operations from `c.next_op` into one batch.
fn translate(srv: &mut NfsServer, c: &mut Compound, ops: &[ArgOp4<'_>], now: i64) -> Batch {
    let mut b = Batch::new(c.cred.clone(), now);
    b.stop_on_error = true;
    c.squash = false;
    c.read_only = false;
    c.lazy = None;
    while c.next_op < ops.len() {
        let Some(op) = ops.get(c.next_op) else { break };
        if (needs_empty_batch(op) || needs_known_fh(c, op)) && !b.ops.is_empty() {
            break;
        }
        let flow = translate_op(srv, c, op, &mut b, now);
        if matches!(flow, Flow::Gate) {
            break;
        }
        c.next_op += 1;
        match flow {
            Flow::Next | Flow::Gate => {}
            Flow::Halt => {
                c.halted = true;
                break;
            }
            Flow::Barrier => {
                if c.next_op < ops.len() {
                    break;
                }
            }
        }
    }
    if c.squash && c.cred.uid == 0 {
        b.cred = nobody();
    }
    b.read_only = c.read_only;
    b.lazy = c.lazy == Some(true) && b.ops.iter().all(|op| !op.mutates() || matches!(op, Op::Write { .. }));
    c.lazy = Some(b.lazy);
    b
}

fn ready(c: &mut Compound, res: ResOp4<'_>) -> Flow {
    let (status, bytes) = encode_res(&res);
    c.steps.push(Step::Ready { status, bytes });
    if status == Nfsstat4::OK {
        Flow::Next
    } else {
        Flow::Halt
    }
}

fn fail(c: &mut Compound, opnum: u32, status: Nfsstat4) -> Flow {
    c.steps.push(Step::Ready {
        status,
        bytes: err_bytes(opnum, status),
    });
    Flow::Halt
}

/// Pushes `op` with the step that answers `opnum` with its status alone;
/// returns the op's result reference.
fn push_status(c: &mut Compound, b: &mut Batch, opnum: u32, op: Op) -> ObjRef {
    let r = b.push(op);
    c.steps.push(Step::Status { opnum, op: b.ops.len() - 1 });
    r
}

fn ok_status(c: &mut Compound, opnum: u32) -> Flow {
    c.steps.push(Step::Ready {
        status: Nfsstat4::OK,
        bytes: err_bytes(opnum, Nfsstat4::OK),
    });
    Flow::Next
}

impl Compound {
    /// Sets the current filehandle from an operation that gives no
    /// stateid (PUTFH, PUTROOTFH, PUTPUBFH, LOOKUP, LOOKUPP, CREATE,
    /// SECINFO...): the current stateid becomes invalid, so a later use of
    /// the current-stateid value fails (RFC 8881 16.2.3.1.2). RESTOREFH and
    /// OPEN set both themselves.
    fn set_cfh(&mut self, fh: Fh) {
        self.cfh = fh;
        self.cur_sid = None;
    }

    fn export(&self, fsid: u64) -> Option<&ExportEntry> {
        self.exports.iter().find(|e| e.fsid == fsid)
    }

    /// Marks an export as used by this batch (credentials, read-only).
    fn touch(&mut self, fsid: u64) {
        if let Some(e) = self.exports.iter().find(|e| e.fsid == fsid) {
            self.squash |= e.root_squash;
            self.read_only |= e.read_only;
        }
    }

    /// The current filehandle as an export object.
    fn obj(&mut self) -> Result<(u64, ObjRef), Nfsstat4> {
        match self.cfh {
            Fh::None => Err(Nfsstat4::NOFILEHANDLE),
            Fh::Pseudo => Err(Nfsstat4::ISDIR),
            Fh::Obj { fsid, obj } => {
                self.touch(fsid);
                Ok((fsid, obj))
            }
        }
    }

    fn saved_obj(&mut self) -> Result<(u64, ObjRef), Nfsstat4> {
        match self.sfh {
            Fh::None => Err(Nfsstat4::NOFILEHANDLE),
            Fh::Pseudo => Err(Nfsstat4::ROFS),
            Fh::Obj { fsid, obj } => {
                self.touch(fsid);
                Ok((fsid, obj))
            }
        }
    }

    /// A known node id of the current filehandle (state operations run
    /// with every earlier result resolved).
    fn node(&self) -> Result<(u64, NodeId), Nfsstat4> {
        match self.cfh {
            Fh::None => Err(Nfsstat4::NOFILEHANDLE),
            Fh::Pseudo => Err(Nfsstat4::ISDIR),
            Fh::Obj {
                fsid,
                obj: ObjRef::Id(id),
            } => Ok((fsid, id)),
            Fh::Obj { .. } => Err(Nfsstat4::SERVERFAULT),
        }
    }

    fn actual(&self, other: &Other) -> Option<Option<Stateid4>> {
        self.reserved
            .iter()
            .find(|(r, _)| r == other)
            .map(|(_, a)| *a)
    }
}

/// Resolves a stateid argument: Ok(None) for the anonymous and bypass
/// stateids, Ok(Some(other)) for an open or lock stateid (possibly one
/// this COMPOUND reserved).
fn resolve_sid(srv: &NfsServer, c: &Compound, sid: &Stateid4) -> Result<Option<Other>, Nfsstat4> {
    let mut sid = *sid;
    if sid == Stateid4::CURRENT {
        sid = c.cur_sid.ok_or(Nfsstat4::BAD_STATEID)?;
    }
    if sid == Stateid4::ANONYMOUS || sid == Stateid4::BYPASS {
        return Ok(None);
    }
    if let Some(actual) = c.actual(&sid.other) {
        return Ok(Some(actual.map_or(sid.other, |a| a.other)));
    }
    match srv.state.check_stateid(&sid, c.clientid)? {
        StateRef::Open(o) | StateRef::Lock(o) => Ok(Some(o)),
        // A delegation stateid reads and writes as the special stateids
        // do (RFC 8881 10.4: I/O under the delegation needs no open).
        StateRef::Deleg(_) => Ok(None),
    }
}

fn is_open_sid(srv: &NfsServer, c: &Compound, other: &Other) -> bool {
    srv.state.opens.contains_key(other) || c.actual(other).is_some()
}

/// READ and READ_PLUS (RFC 8881 18.22, RFC 7862 15.10): one Op::Read each.
fn push_read(
    srv: &NfsServer,
    c: &mut Compound,
    b: &mut Batch,
    stateid: &Stateid4,
    offset: u64,
    count: u32,
    plus: bool,
) -> Result<Flow, Nfsstat4> {
    let (_, obj) = c.obj()?;
    resolve_sid(srv, c, stateid)?;
    // An SMB client's exclusive lock forbids the read (RFC 8881 18.22.3).
    if let ObjRef::Id(node) = obj {
        if srv.state.io_conflict(node, offset, u64::from(count), false) {
            return Err(Nfsstat4::LOCKED);
        }
    }
    b.push(Op::Read {
        obj,
        offset,
        len: u64::from(count.min(srv.cfg.max_io)),
    });
    c.steps.push(Step::Read {
        op: b.ops.len() - 1,
        plus,
        offset,
    });
    Ok(Flow::Next)
}

fn translate_op(
    srv: &mut NfsServer,
    c: &mut Compound,
    op: &ArgOp4<'_>,
    b: &mut Batch,
    now: i64,
) -> Flow {
    let opnum = op.opnum();
    if c.sessionless && c.next_op > 0 {
        return fail(c, opnum, Nfsstat4::NOT_ONLY_OP);
    }
    if matches!(op, ArgOp4::Open(_) | ArgOp4::Lock(_) | ArgOp4::LockT(_)) {
        // Courtesy clients (lease expired, state kept) give way to a
        // client that asks for locking state (RFC 8881 8.3).
        srv.state.revoke_courtesy(now);
    }
    match translate_inner(srv, c, op, b, now) {
        Ok(f) => f,
        Err(st) => fail(c, opnum, st),
    }
}

/// The eia_flags a client may send (RFC 8881 18.35.1).
const EXCHGID_ARG_FLAGS: u32 = exchgid4_flag::SUPP_MOVED_REFER
    | exchgid4_flag::SUPP_MOVED_MIGR
    | exchgid4_flag::BIND_PRINC_STATEID
    | exchgid4_flag::MASK_PNFS
    | exchgid4_flag::UPD_CONFIRMED_REC_A;

/// The principal of a call (RFC 8881 2.4.3): AUTH_SYS's uid and gid.
fn principal(cred: &Credentials) -> Principal {
    (cred.uid, cred.gid)
}

fn need_session(c: &Compound) -> Result<u64, Nfsstat4> {
    c.clientid.ok_or(Nfsstat4::OP_NOT_IN_SESSION)
}

/// One operation of a COMPOUND, dispatched to its handler.
fn translate_inner(
    srv: &mut NfsServer,
    c: &mut Compound,
    op: &ArgOp4<'_>,
    b: &mut Batch,
    now: i64,
) -> Result<Flow, Nfsstat4> {
    match op {
        ArgOp4::Sequence(_) => Err(Nfsstat4::SEQUENCE_POS),
        ArgOp4::PutFh(a) => op_putfh(srv, c, a),
        ArgOp4::PutRootFh(()) => op_putrootfh(c),
        ArgOp4::PutPubFh(()) => op_putpubfh(c),
        ArgOp4::SaveFh(()) => op_savefh(c),
        ArgOp4::RestoreFh(()) => op_restorefh(c),
        ArgOp4::GetFh(()) => op_getfh(srv, c),
        ArgOp4::Lookup(a) => op_lookup(c, a, b),
        ArgOp4::LookupP(()) => op_lookupp(c, b),
        ArgOp4::GetAttr(a) => op_getattr(srv, c, a, b),
        ArgOp4::Access(a) => op_access(c, a, b),
        ArgOp4::SecInfo(a) => op_secinfo(c, a, b),
        ArgOp4::SecInfoNoName(style) => op_secinfo_no_name(c, style),
        ArgOp4::Open(a) => open(srv, c, a, b, now),
        ArgOp4::Close(a) => op_close(srv, c, a, b),
        ArgOp4::Read(a) => push_read(srv, c, b, &a.stateid, a.offset, a.count, false),
        ArgOp4::ReadPlus(a) => push_read(srv, c, b, &a.stateid, a.offset, a.count, true),
        ArgOp4::Write(a) => op_write(srv, c, a, b, now),
        ArgOp4::Commit(_) => op_commit(srv, c, b),
        ArgOp4::Create(a) => op_create(srv, c, a, b),
        ArgOp4::Remove(a) => op_remove(srv, c, a, b, now),
        ArgOp4::Rename(a) => op_rename(srv, c, a, b, now),
        ArgOp4::Link(a) => op_link(c, a, b),
        ArgOp4::ReadLink(()) => op_readlink(c, b),
        ArgOp4::ReadDir(a) => op_readdir(srv, c, a, b),
        ArgOp4::SetAttr(a) => op_setattr(srv, c, a, b, now),
        ArgOp4::Verify(a) => op_verify(srv, c, a, b, false),
        ArgOp4::NVerify(a) => op_verify(srv, c, a, b, true),
        ArgOp4::Copy(a) => op_copy(srv, c, a, b),
        ArgOp4::Clone(a) => op_clone(srv, c, a, b),
        ArgOp4::Seek(a) => op_seek(srv, c, a, b),
        ArgOp4::Allocate(a) => op_allocate(srv, c, a, b),
        ArgOp4::Deallocate(a) => op_deallocate(srv, c, a, b),
        ArgOp4::GetXattr(a) => xattr::op_getxattr(c, a, b),
        ArgOp4::SetXattr(a) => xattr::op_setxattr(c, a, b),
        ArgOp4::ListXattrs(a) => xattr::op_listxattrs(c, a, b),
        ArgOp4::RemoveXattr(a) => xattr::op_removexattr(c, a, b),
        ArgOp4::DelegReturn(a) => deleg::op_delegreturn(srv, c, a),
        ArgOp4::BackchannelCtl(a) => deleg::op_backchannel_ctl(srv, c, a),
        ArgOp4::OpenDowngrade(a) => op_open_downgrade(srv, c, a),
        ArgOp4::Lock(a) => lock(srv, c, a),
        ArgOp4::LockT(a) => op_lockt(srv, c, a),
        ArgOp4::LockU(a) => op_locku(srv, c, a),
        ArgOp4::TestStateid(a) => op_test_stateid(srv, c, a),
        ArgOp4::FreeStateid(a) => op_free_stateid(srv, c, a),
        ArgOp4::ReclaimComplete(a) => op_reclaim_complete(srv, c, a),
        ArgOp4::ExchangeId(a) => op_exchange_id(srv, c, a, now),
        ArgOp4::CreateSession(a) => create_session(srv, c, a),
        ArgOp4::DestroySession(a) => op_destroy_session(srv, c, a),
        ArgOp4::BindConnToSession(a) => op_bind_conn_to_session(srv, c, a),
        ArgOp4::DestroyClientId(a) => op_destroy_clientid(srv, c, a),
    }
}

/// PUTFH (RFC 8881 18.19).
fn op_putfh(srv: &mut NfsServer, c: &mut Compound, a: &PutFh4Args<'_>) -> Result<Flow, Nfsstat4> {
    let key = srv.cfg.handle_key;
    let fh = match FileHandle::decode(key, a.object.0).map_err(|_| Nfsstat4::BADHANDLE)? {
        FileHandle::Pseudo => Fh::Pseudo,
        FileHandle::Object { fsid, id } => {
            let e = c.export(fsid).ok_or(Nfsstat4::STALE)?;
            if !e.allows(c.peer) || !e.allows_uid(c.cred.uid) {
                return Err(Nfsstat4::ACCESS);
            }
            Fh::Obj {
                fsid,
                obj: ObjRef::Id(id),
            }
        }
    };
    c.set_cfh(fh);
    Ok(ok_status(c, opnum::PUTFH))
}

/// PUTROOTFH (RFC 8881 18.21).
fn op_putrootfh(c: &mut Compound) -> Result<Flow, Nfsstat4> {
    c.set_cfh(Fh::Pseudo);
    Ok(ok_status(c, opnum::PUTROOTFH))
}

/// PUTPUBFH (RFC 8881 18.20).
fn op_putpubfh(c: &mut Compound) -> Result<Flow, Nfsstat4> {
    c.set_cfh(Fh::Pseudo);
    Ok(ok_status(c, opnum::PUTPUBFH))
}

/// SAVEFH (RFC 8881 18.28).
fn op_savefh(c: &mut Compound) -> Result<Flow, Nfsstat4> {
    if c.cfh == Fh::None {
        return Err(Nfsstat4::NOFILEHANDLE);
    }
    c.sfh = c.cfh;
    c.saved_sid = c.cur_sid;
    Ok(ok_status(c, opnum::SAVEFH))
}

/// RESTOREFH (RFC 8881 18.27).
fn op_restorefh(c: &mut Compound) -> Result<Flow, Nfsstat4> {
    if c.sfh == Fh::None {
        return Err(Nfsstat4::RESTOREFH);
    }
    c.cfh = c.sfh;
    c.cur_sid = c.saved_sid;
    Ok(ok_status(c, opnum::RESTOREFH))
}

/// GETFH (RFC 8881 18.8).
fn op_getfh(srv: &mut NfsServer, c: &mut Compound) -> Result<Flow, Nfsstat4> {
    let key = srv.cfg.handle_key;
    Ok(match c.cfh {
        Fh::None => return Err(Nfsstat4::NOFILEHANDLE),
        Fh::Pseudo => {
            let fh = FileHandle::Pseudo.encode(key);
            ready(
                c,
                ResOp4::GetFh(Nfs4Res::Ok(GetFh4ResOk {
                    object: Opaque(&fh),
                })),
            )
        }
        Fh::Obj {
            fsid,
            obj: ObjRef::Id(id),
        } => {
            let fh = FileHandle::Object { fsid, id }.encode(key);
            ready(
                c,
                ResOp4::GetFh(Nfs4Res::Ok(GetFh4ResOk {
                    object: Opaque(&fh),
                })),
            )
        }
        Fh::Obj {
            fsid,
            obj: ObjRef::Result(op),
        } => {
            c.steps.push(Step::GetFh { fsid, op });
            Flow::Next
        }
    })
}

/// LOOKUP (RFC 8881 18.13).
fn op_lookup(c: &mut Compound, a: &Lookup4Args<'_>, b: &mut Batch) -> Result<Flow, Nfsstat4> {
    let name = utf8_name(a.objname.0)?;
    Ok(match c.cfh {
        Fh::None => return Err(Nfsstat4::NOFILEHANDLE),
        Fh::Pseudo => {
            let e = c
                .exports
                .iter()
                .find(|e| e.name == name && e.allows(c.peer))
                .ok_or(Nfsstat4::NOENT)?;
            if !e.allows_uid(c.cred.uid) {
                return Err(Nfsstat4::ACCESS);
            }
            c.set_cfh(Fh::Obj {
                fsid: e.fsid,
                obj: ObjRef::Id(e.root),
            });
            ok_status(c, opnum::LOOKUP)
        }
        Fh::Obj { .. } => {
            let (fsid, dir) = c.obj()?;
            let r = push_status(c, b, opnum::LOOKUP, Op::Lookup { dir, name });
            c.set_cfh(Fh::Obj { fsid, obj: r });
            Flow::Next
        }
    })
}

/// LOOKUPP (RFC 8881 18.14).
fn op_lookupp(c: &mut Compound, b: &mut Batch) -> Result<Flow, Nfsstat4> {
    Ok(match c.cfh {
        Fh::None => return Err(Nfsstat4::NOFILEHANDLE),
        Fh::Pseudo => return Err(Nfsstat4::NOENT),
        Fh::Obj { fsid, obj } => {
            let root = c.export(fsid).map(|e| e.root);
            if obj == ObjRef::Id(root.unwrap_or(0)) {
                c.set_cfh(Fh::Pseudo);
                ok_status(c, opnum::LOOKUPP)
            } else {
                // The directory's attributes first: a symlink's LOOKUPP
                // is NFS4ERR_SYMLINK, any other non-directory's
                // NFS4ERR_NOTDIR (RFC 8881 18.14.3).
                let (fsid, dir) = c.obj()?;
                b.push(Op::GetAttr { obj: dir });
                let r = b.push(Op::Lookup {
                    dir,
                    name: "..".into(),
                });
                c.steps.push(Step::LookupP {
                    dir: b.ops.len() - 2,
                    op: b.ops.len() - 1,
                });
                c.set_cfh(Fh::Obj { fsid, obj: r });
                Flow::Next
            }
        }
    })
}

/// GETATTR (RFC 8881 18.7).
fn op_getattr(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &GetAttr4Args,
    b: &mut Batch,
) -> Result<Flow, Nfsstat4> {
    let key = srv.cfg.handle_key;
    Ok(match c.cfh {
        Fh::None => return Err(Nfsstat4::NOFILEHANDLE),
        Fh::Pseudo => {
            let attrs = pseudo_attrs(&c.exports);
            let fh = FileHandle::Pseudo.encode(key);
            let ctx = ObjCtx {
                fsid: Fsid4 {
                    major: PSEUDO_FSID,
                    minor: 0,
                },
                fh: &fh,
                mounted_on: PSEUDO_FILEID,
                acl: None,
                ids: &srv.ids,
            };
            let (mask, vals) = fattr4_vals(&attrs, &ctx, &fs_info(srv), &a.attr_request);
            ready(
                c,
                ResOp4::GetAttr(Nfs4Res::Ok(GetAttr4ResOk {
                    obj_attributes: Fattr4 {
                        attrmask: mask,
                        attr_vals: Opaque(&vals),
                    },
                })),
            )
        }
        Fh::Obj { .. } => {
            let (fsid, obj) = c.obj()?;
            if let Some(step) = deleg::cb_getattr_needed(srv, c, obj, &a.attr_request) {
                c.steps.push(Step::CbGetattr(step));
                return Ok(Flow::Gate);
            }
            // The ACL needs the stored DACL, which GetAcl reads with the
            // attributes (RFC 8881 6.2.1).
            if a.attr_request.is_set(fa::ACL) {
                b.push(Op::GetAcl { obj });
            } else {
                b.push(Op::GetAttr { obj });
            }
            c.steps.push(Step::GetAttr {
                fsid,
                op: b.ops.len() - 1,
                req: a.attr_request,
            });
            Flow::Next
        }
    })
}

/// ACCESS (RFC 8881 18.1).
fn op_access(c: &mut Compound, a: &Access4Args, b: &mut Batch) -> Result<Flow, Nfsstat4> {
    Ok(match c.cfh {
        Fh::None => return Err(Nfsstat4::NOFILEHANDLE),
        Fh::Pseudo => {
            let ok = a.access & (access4::READ | access4::LOOKUP);
            ready(
                c,
                ResOp4::Access(Nfs4Res::Ok(Access4ResOk {
                    supported: a.access & 0x3f,
                    access: ok,
                })),
            )
        }
        Fh::Obj { fsid, .. } => {
            let ro = c.export(fsid).is_some_and(|e| e.read_only);
            let (_, obj) = c.obj()?;
            // With the stored DACL, if any (issue 17).
            b.push(Op::GetAcl { obj });
            c.steps.push(Step::Access {
                op: b.ops.len() - 1,
                req: a.access,
                ro,
            });
            Flow::Next
        }
    })
}

/// SECINFO (RFC 8881 18.29).
fn op_secinfo(c: &mut Compound, a: &SecInfo4Args<'_>, b: &mut Batch) -> Result<Flow, Nfsstat4> {
    let name = utf8_name(a.name.0)?;
    Ok(match c.cfh {
        Fh::None => return Err(Nfsstat4::NOFILEHANDLE),
        Fh::Pseudo => {
            c.exports
                .iter()
                .find(|e| e.name == name)
                .ok_or(Nfsstat4::NOENT)?;
            c.set_cfh(Fh::None);
            ready(
                c,
                ResOp4::SecInfo(Nfs4Res::Ok(List(vec![SecInfo4::Flavor(AUTH_SYS)]))),
            )
        }
        Fh::Obj { .. } => {
            let (_, dir) = c.obj()?;
            b.push(Op::Lookup { dir, name });
            c.steps.push(Step::SecInfo {
                op: b.ops.len() - 1,
            });
            c.set_cfh(Fh::None);
            Flow::Next
        }
    })
}

/// SECINFO_NO_NAME (RFC 8881 18.45).
fn op_secinfo_no_name(c: &mut Compound, style: &SecInfoStyle4) -> Result<Flow, Nfsstat4> {
    if c.cfh == Fh::None {
        return Err(Nfsstat4::NOFILEHANDLE);
    }
    // RFC 8881 18.45.3: SECINFO_STYLE4_PARENT asks about the
    // parent of the current filehandle; the pseudo-root has none
    // (NFS4ERR_NOENT). An export's root has the pseudo-root, any
    // other directory its parent in the export: the same flavors.
    if *style == SecInfoStyle4::Parent && c.cfh == Fh::Pseudo {
        return Err(Nfsstat4::NOENT);
    }
    c.set_cfh(Fh::None);
    Ok(ready(
        c,
        ResOp4::SecInfoNoName(Nfs4Res::Ok(List(vec![SecInfo4::Flavor(AUTH_SYS)]))),
    ))
}

/// CLOSE (RFC 8881 18.2).
fn op_close(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Close4Args,
    b: &mut Batch,
) -> Result<Flow, Nfsstat4> {
    need_session(c)?;
    let (_, obj) = c.obj()?;
    let other = resolve_sid(srv, c, &a.open_stateid)?.ok_or(Nfsstat4::BAD_STATEID)?;
    if !is_open_sid(srv, c, &other) {
        return Err(Nfsstat4::BAD_STATEID);
    }
    if srv.state.open_has_locks(&other) {
        return Err(Nfsstat4::LOCKS_HELD);
    }
    b.push(Op::Close { obj });
    c.steps.push(Step::Close {
        op: b.ops.len() - 1,
        other,
    });
    // An NFSv4 open is a handle: when this is the last open of a file an
    // SMB client left delete-pending, `finish_close` (`remove_open`)
    // notes it and the file is removed once the COMPOUND is done, as the
    // last SMB CLOSE would (MS-FSA 2.1.5.4; `last_close_removals`).
    Ok(Flow::Next)
}

/// WRITE (RFC 8881 18.32).
fn op_write(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Write4Args<'_>,
    b: &mut Batch,
    now: i64,
) -> Result<Flow, Nfsstat4> {
    let (fsid, obj) = c.obj()?;
    resolve_sid(srv, c, &a.stateid)?;
    if a.data.0.len() > srv.cfg.max_io as usize {
        return Err(Nfsstat4::INVAL);
    }
    // Others' SMB read caching goes (no wait, as for an SMB WRITE); another
    // NFS client's delegation is recalled and the write waits for it
    // (RFC 8881 10.4.4).
    breaks::break_for_write(srv, c, obj, now);
    breaks::deleg_wait(srv, c, obj)?;
    let append = a.offset == u64::MAX && c.export(fsid).is_some_and(|e| e.append_extension);
    // An SMB client's lock on the range forbids the write (RFC
    // 8881 18.32.3: NFS4ERR_LOCKED).
    if let (ObjRef::Id(node), false) = (obj, append) {
        if srv
            .state
            .io_conflict(node, a.offset, a.data.0.len() as u64, true)
        {
            return Err(Nfsstat4::LOCKED);
        }
    }
    b.push(Op::Write {
        obj,
        offset: a.offset,
        data: WriteData::Bytes(a.data.0.to_vec()),
        append,
    });
    let unstable = a.stable == StableHow4::Unstable && c.export(fsid).is_some_and(|e| e.protocol_durability);
    c.lazy = Some(c.lazy.unwrap_or(true) && unstable);
    c.steps.push(Step::Write {
        op: b.ops.len() - 1,
    });
    Ok(Flow::Next)
}

/// COMMIT (RFC 8881 18.3).
fn op_commit(srv: &mut NfsServer, c: &mut Compound, b: &mut Batch) -> Result<Flow, Nfsstat4> {
    let (fsid, obj) = c.obj()?;
    // On a `protocol` export, everything answered before is made durable
    // before this reply (the batch carries `flush`).
    if c.export(fsid).is_some_and(|e| e.protocol_durability) {
        b.push(Op::GetAttr { obj });
        b.flush = true;
    }
    let verf = srv.write_verf;
    Ok(ready(
        c,
        ResOp4::Commit(Nfs4Res::Ok(Commit4ResOk { writeverf: verf })),
    ))
}

/// CREATE (RFC 8881 18.4).
fn op_create(srv: &NfsServer, c: &mut Compound, a: &Create4Args<'_>, b: &mut Batch) -> Result<Flow, Nfsstat4> {
    if c.cfh == Fh::Pseudo {
        return Err(Nfsstat4::ROFS);
    }
    let (fsid, dir) = c.obj()?;
    let name = utf8_name(a.objname.0)?;
    let kind = match &a.objtype {
        CreateType4::Lnk(t) => CreateKind::Symlink {
            target: String::from_utf8(t.0.to_vec()).map_err(|_| Nfsstat4::INVAL)?,
        },
        CreateType4::Blk(d) => CreateKind::BlockDevice {
            rdev: attr::rdev_of(d.specdata1, d.specdata2),
        },
        CreateType4::Chr(d) => CreateKind::CharDevice {
            rdev: attr::rdev_of(d.specdata1, d.specdata2),
        },
        CreateType4::Other(NfsFtype4::Dir) => CreateKind::Directory,
        CreateType4::Other(NfsFtype4::Sock) => CreateKind::Socket,
        CreateType4::Other(NfsFtype4::Fifo) => CreateKind::Fifo,
        CreateType4::Other(_) => return Err(Nfsstat4::BADTYPE),
    };
    let (attrs, attrset) = fattr4_to_set(&a.createattrs, SETTABLE, &srv.ids)?;
    let r = b.push(Op::Create {
        dir,
        name,
        kind,
        attrs,
        if_exists: IfExists::Fail,
    });
    c.steps.push(Step::Create {
        op: b.ops.len() - 1,
        attrset,
    });
    c.set_cfh(Fh::Obj { fsid, obj: r });
    Ok(Flow::Next)
}

/// REMOVE (RFC 8881 18.25).
fn op_remove(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Remove4Args<'_>,
    b: &mut Batch,
    now: i64,
) -> Result<Flow, Nfsstat4> {
    if c.cfh == Fh::Pseudo {
        return Err(Nfsstat4::ROFS);
    }
    let (_, dir) = c.obj()?;
    let name = utf8_name(a.target.0)?;
    // SMB leases of the file lose handle caching first.
    if breaks::gate_needed(srv, c) {
        let look = Op::Lookup { dir, name: name.clone() };
        let kind = breaks::GateKind::namespace();
        if let Some(f) = breaks::gate(srv, c, b, opnum::REMOVE, vec![look], kind, now)? {
            return Ok(f);
        }
    }
    b.push(Op::Remove {
        dir,
        name,
        dir_only: None,
    });
    c.steps.push(Step::Remove {
        op: b.ops.len() - 1,
    });
    Ok(Flow::Next)
}

/// RENAME (RFC 8881 18.26).
fn op_rename(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Rename4Args<'_>,
    b: &mut Batch,
    now: i64,
) -> Result<Flow, Nfsstat4> {
    if c.cfh == Fh::Pseudo || c.sfh == Fh::Pseudo {
        return Err(Nfsstat4::ROFS);
    }
    let (sfs, src_dir) = c.saved_obj()?;
    let (dfs, dst_dir) = c.obj()?;
    if sfs != dfs {
        return Err(Nfsstat4::XDEV);
    }
    let src_name = utf8_name(a.oldname.0)?;
    let dst_name = utf8_name(a.newname.0)?;
    // SMB leases of the file renamed, and of one it replaces, lose handle
    // caching first.
    if breaks::gate_needed(srv, c) {
        let looks = vec![
            Op::Lookup { dir: src_dir, name: src_name.clone() },
            Op::Lookup { dir: dst_dir, name: dst_name.clone() },
        ];
        let kind = breaks::GateKind::namespace();
        if let Some(f) = breaks::gate(srv, c, b, opnum::RENAME, looks, kind, now)? {
            return Ok(f);
        }
    }
    b.push(Op::Rename {
        src_dir,
        src_name,
        dst_dir,
        dst_name,
        replace: true,
    });
    c.steps.push(Step::Rename {
        op: b.ops.len() - 1,
    });
    Ok(Flow::Next)
}

/// LINK (RFC 8881 18.9).
fn op_link(c: &mut Compound, a: &Link4Args<'_>, b: &mut Batch) -> Result<Flow, Nfsstat4> {
    if c.cfh == Fh::Pseudo {
        return Err(Nfsstat4::ROFS);
    }
    let (sfs, src) = c.saved_obj()?;
    let (dfs, dir) = c.obj()?;
    if sfs != dfs {
        return Err(Nfsstat4::XDEV);
    }
    let name = utf8_name(a.newname.0)?;
    b.push(Op::Link {
        obj: src,
        dir,
        name,
    });
    c.steps.push(Step::Link {
        op: b.ops.len() - 1,
    });
    Ok(Flow::Next)
}

/// READLINK (RFC 8881 18.24).
fn op_readlink(c: &mut Compound, b: &mut Batch) -> Result<Flow, Nfsstat4> {
    let (_, obj) = c.obj().map_err(|e| {
        if e == Nfsstat4::ISDIR {
            Nfsstat4::INVAL
        } else {
            e
        }
    })?;
    b.push(Op::ReadLink { obj });
    c.steps.push(Step::ReadLink {
        op: b.ops.len() - 1,
    });
    Ok(Flow::Next)
}

/// READDIR (RFC 8881 18.23).
fn op_readdir(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &ReadDir4Args,
    b: &mut Batch,
) -> Result<Flow, Nfsstat4> {
    if a.cookie != 0 && a.cookieverf != [0; 8] && a.cookieverf != srv.cookieverf {
        return Err(Nfsstat4::NOT_SAME);
    }
    Ok(match c.cfh {
        Fh::None => return Err(Nfsstat4::NOFILEHANDLE),
        Fh::Pseudo => {
            let start = match a.cookie {
                0 => 0,
                1 | 2 => return Err(Nfsstat4::BAD_COOKIE),
                n if n - 3 < 1 << 20 => (n - 2) as usize,
                _ => return Err(Nfsstat4::BAD_COOKIE),
            };
            let peer = c.peer;
            let list: Vec<(String, u64, NodeId)> = c
                .exports
                .iter()
                .filter(|e| e.allows(peer))
                .skip(start)
                .take(256)
                .map(|e| (e.name.clone(), e.fsid, e.root))
                .collect();
            let mut roots = Vec::with_capacity(list.len());
            for (name, fsid, root) in list {
                c.touch(fsid);
                b.push(Op::GetAttr {
                    obj: ObjRef::Id(root),
                });
                roots.push((name, fsid, b.ops.len() - 1));
            }
            c.steps.push(Step::PseudoReadDir {
                roots,
                req: a.attr_request,
                start,
                maxcount: a.maxcount,
            });
            Flow::Next
        }
        Fh::Obj { .. } => {
            let (fsid, dir) = c.obj()?;
            let known = match dir {
                ObjRef::Id(id) => Some(id),
                ObjRef::Result(_) => None,
            };
            let resume = srv
                .cookies
                .resume(known, a.cookie)
                .ok_or(Nfsstat4::BAD_COOKIE)?;
            // Entries to read: about as many as the reply can hold,
            // so a large directory takes few round trips without
            // reading entries that do not fit (an entry costs 16
            // bytes and its name against dircount; against maxcount
            // about 40, 12 per requested attribute and the handle).
            let maxcount = a.maxcount.min(srv.cfg.max_readdir);
            let fh = if a.attr_request.is_set(fa::FILEHANDLE) {
                4 + super::fh::FH_LEN as u32
            } else {
                0
            };
            let per = 40 + 12 * a.attr_request.iter().count() as u32 + fh;
            let by_dir = if a.dircount > 0 {
                a.dircount / 24
            } else {
                u32::MAX
            };
            let n = u64::from((maxcount / per).min(by_dir)).clamp(1, 8192);
            let (after, max, skip, base) = match resume {
                Resume::Start => (None, n, 0, 0),
                Resume::After { name, pos } => (Some(name), n, 0, pos),
                Resume::Skip(pos) => (None, (pos + n).min(MAX_POSITION), pos, pos),
            };
            b.push(Op::ReadDir {
                dir,
                after,
                max_entries: max as u32,
                with_attrs: true,
            });
            c.steps.push(Step::ReadDir {
                op: b.ops.len() - 1,
                fsid,
                req: a.attr_request,
                skip,
                base,
                // The daemon's enumeration limit (NfsServerConfig::max_readdir).
                maxcount: a.maxcount.min(srv.cfg.max_readdir),
                dircount: a.dircount,
            });
            Flow::Next
        }
    })
}

/// SETATTR (RFC 8881 18.30).
fn op_setattr(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &SetAttr4Args<'_>,
    b: &mut Batch,
    now: i64,
) -> Result<Flow, Nfsstat4> {
    if c.cfh == Fh::Pseudo {
        return Err(Nfsstat4::ROFS);
    }
    let (_, obj) = c.obj()?;
    resolve_sid(srv, c, &a.stateid)?;
    let acl = attr::acl_to_set(&a.obj_attributes, &srv.ids)?;
    let (attrs, attrset) = fattr4_to_set(&a.obj_attributes, attr::SETATTR_SETTABLE, &srv.ids)?;
    if attrs.size.is_some() {
        // A size change is a change of the data (MS-FSA 2.1.5.15.4 as SMB's
        // end-of-file sees it): others' SMB read caching goes, others'
        // delegations are recalled (and the change waits for them).
        breaks::break_for_write(srv, c, obj, now);
        breaks::deleg_wait(srv, c, obj)?;
    }
    // With an ACL (RFC 8881 6.2.1) the other attributes go first: the
    // mode is then the one the ACL amounts to (6.4.1.2), its special bits
    // kept.
    let acl_only = acl.is_some() && attrs.is_empty();
    if !acl_only {
        b.push(Op::SetAttr { obj, attrs });
    }
    let first = b.ops.len().wrapping_sub(1);
    let acl_op = acl.map(|acl| {
        b.push(Op::SetAcl { obj, acl: Some(acl) });
        b.ops.len() - 1
    });
    c.steps.push(Step::SetAttr {
        op: if acl_only { b.ops.len() - 1 } else { first },
        acl_op,
        attrset,
    });
    Ok(Flow::Next)
}

/// VERIFY (RFC 8881 18.31) and NVERIFY (RFC 8881 18.15, `negate`).
fn op_verify(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Verify4Args<'_>,
    b: &mut Batch,
    negate: bool,
) -> Result<Flow, Nfsstat4> {
    let key = srv.cfg.handle_key;
    let mask = a.obj_attributes.attrmask;
    for bit in mask.iter() {
        if bit == fa::RDATTR_ERROR {
            return Err(Nfsstat4::INVAL);
        }
        if !GETTABLE.contains(&bit) {
            return Err(Nfsstat4::ATTRNOTSUPP);
        }
    }
    let vals = a.obj_attributes.attr_vals.0.to_vec();
    Ok(match c.cfh {
        Fh::None => return Err(Nfsstat4::NOFILEHANDLE),
        Fh::Pseudo => {
            let attrs = pseudo_attrs(&c.exports);
            let fh = FileHandle::Pseudo.encode(key);
            let ctx = ObjCtx {
                fsid: Fsid4 {
                    major: PSEUDO_FSID,
                    minor: 0,
                },
                fh: &fh,
                mounted_on: PSEUDO_FILEID,
                acl: None,
                ids: &srv.ids,
            };
            let (m, v) = fattr4_vals(&attrs, &ctx, &fs_info(srv), &mask);
            let same = m == mask && v == vals;
            return Ok(verify_result(c, negate, same));
        }
        Fh::Obj { .. } => {
            let (fsid, obj) = c.obj()?;
            b.push(Op::GetAttr { obj });
            c.steps.push(Step::Verify {
                op: b.ops.len() - 1,
                fsid,
                mask,
                vals,
                negate,
            });
            Flow::Barrier
        }
    })
}

/// COPY (RFC 7862 15.2).
fn op_copy(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Copy4Args<'_>,
    b: &mut Batch,
) -> Result<Flow, Nfsstat4> {
    let (_, src) = c.saved_obj()?;
    let (_, dst) = c.obj()?;
    resolve_sid(srv, c, &a.src_stateid)?;
    resolve_sid(srv, c, &a.dst_stateid)?;
    if !a.source_server.0.is_empty() {
        return Err(Nfsstat4::NOTSUPP);
    }
    let len = if a.count == 0 { u64::MAX } else { a.count };
    b.push(Op::Copy {
        src,
        src_offset: a.src_offset,
        dst,
        dst_offset: a.dst_offset,
        len,
    });
    c.steps.push(Step::Copy {
        op: b.ops.len() - 1,
    });
    Ok(Flow::Next)
}

/// CLONE (RFC 7862 15.13).
fn op_clone(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Clone4Args,
    b: &mut Batch,
) -> Result<Flow, Nfsstat4> {
    let (_, src) = c.saved_obj()?;
    let (_, dst) = c.obj()?;
    resolve_sid(srv, c, &a.src_stateid)?;
    resolve_sid(srv, c, &a.dst_stateid)?;
    // RFC 7862 15.13.3: a count of 0 clones to the source's end. The
    // clone shares the source's chunks by reference where both ranges are
    // aligned alike (reflink), all or nothing.
    let len = if a.count == 0 { u64::MAX } else { a.count };
    push_status(c, b, opnum::CLONE, Op::Clone {
        src,
        src_offset: a.src_offset,
        dst,
        dst_offset: a.dst_offset,
        len,
        extend: true,
    });
    Ok(Flow::Next)
}

/// SEEK (RFC 7862 15.11).
fn op_seek(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Seek4Args,
    b: &mut Batch,
) -> Result<Flow, Nfsstat4> {
    let (_, obj) = c.obj()?;
    resolve_sid(srv, c, &a.stateid)?;
    b.push(Op::Allocated { obj, offset: a.offset, len: u64::MAX });
    c.steps.push(Step::Seek {
        op: b.ops.len() - 1,
        offset: a.offset,
        data: a.what == DataContent4::Data,
    });
    Ok(Flow::Next)
}

/// ALLOCATE (RFC 7862 15.1).
fn op_allocate(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Allocate4Args,
    b: &mut Batch,
) -> Result<Flow, Nfsstat4> {
    let (_, obj) = c.obj()?;
    resolve_sid(srv, c, &a.stateid)?;
    let end = a.offset.checked_add(a.length).ok_or(Nfsstat4::INVAL)?;
    push_status(c, b, opnum::ALLOCATE, Op::SetAttr {
        obj,
        attrs: SetAttrs {
            alloc_size: Some(end),
            ..Default::default()
        },
    });
    Ok(Flow::Next)
}

/// DEALLOCATE (RFC 7862 15.4).
fn op_deallocate(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Deallocate4Args,
    b: &mut Batch,
) -> Result<Flow, Nfsstat4> {
    // RFC 7862 15.4: the range reads as zeros afterwards; the size
    // does not change.
    let (_, obj) = c.obj()?;
    resolve_sid(srv, c, &a.stateid)?;
    a.offset.checked_add(a.length).ok_or(Nfsstat4::INVAL)?;
    push_status(c, b, opnum::DEALLOCATE, Op::ZeroRange {
        obj,
        offset: a.offset,
        len: a.length,
    });
    Ok(Flow::Next)
}

/// OPEN_DOWNGRADE (RFC 8881 18.18).
fn op_open_downgrade(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &OpenDowngrade4Args,
) -> Result<Flow, Nfsstat4> {
    need_session(c)?;
    let other = resolve_sid(srv, c, &a.open_stateid)?.ok_or(Nfsstat4::BAD_STATEID)?;
    let sid = srv
        .state
        .downgrade(&other, a.share_access & share::ACCESS_BOTH, a.share_deny)?;
    c.cur_sid = Some(sid);
    Ok(ready(c, ResOp4::OpenDowngrade(Nfs4Res::Ok(sid))))
}

/// LOCKT (RFC 8881 18.11).
fn op_lockt(srv: &mut NfsServer, c: &mut Compound, a: &LockT4Args<'_>) -> Result<Flow, Nfsstat4> {
    need_session(c)?;
    let (_, node) = c.node()?;
    let end = range_end(a.offset, a.length)?;
    let write = matches!(a.locktype, NfsLockType4::Write | NfsLockType4::WriteW);
    Ok(
        match srv.state.test_lock(
            node,
            a.owner.clientid,
            a.owner.owner.0,
            a.offset,
            end,
            write,
        ) {
            None => ready(c, ResOp4::LockT(LockT4Res::Ok)),
            Some(k) => ready(
                c,
                ResOp4::LockT(LockT4Res::Denied(Lock4Denied {
                    offset: k.offset,
                    length: k.length,
                    locktype: if k.write {
                        NfsLockType4::Write
                    } else {
                        NfsLockType4::Read
                    },
                    owner: StateOwner4 {
                        clientid: k.clientid,
                        owner: Opaque(&k.owner),
                    },
                })),
            ),
        },
    )
}

/// LOCKU (RFC 8881 18.12).
fn op_locku(srv: &mut NfsServer, c: &mut Compound, a: &LockU4Args) -> Result<Flow, Nfsstat4> {
    need_session(c)?;
    let other = resolve_sid(srv, c, &a.lock_stateid)?.ok_or(Nfsstat4::BAD_STATEID)?;
    if !srv.state.locks.contains_key(&other) {
        return Err(Nfsstat4::BAD_STATEID);
    }
    let end = range_end(a.offset, a.length)?;
    let sid = srv.state.unlock(&other, a.offset, end)?;
    c.cur_sid = Some(sid);
    Ok(ready(c, ResOp4::LockU(Nfs4Res::Ok(sid))))
}

/// TEST_STATEID (RFC 8881 18.48).
fn op_test_stateid(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &TestStateid4Args,
) -> Result<Flow, Nfsstat4> {
    need_session(c)?;
    let codes = a
        .stateids
        .0
        .iter()
        .map(|s| match srv.state.check_stateid(s, c.clientid) {
            Ok(_) => Nfsstat4::OK,
            Err(e) => e,
        })
        .collect();
    Ok(ready(
        c,
        ResOp4::TestStateid(Nfs4Res::Ok(TestStateid4ResOk {
            status_codes: List(codes),
        })),
    ))
}

/// FREE_STATEID (RFC 8881 18.38).
fn op_free_stateid(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &FreeStateid4Args,
) -> Result<Flow, Nfsstat4> {
    let client = need_session(c)?;
    // A delegation stateid (revoked ones included) is freed by its own.
    if let Some(d) = srv.state.delegs.get(&a.stateid.other) {
        if d.client != client {
            return Err(Nfsstat4::BAD_STATEID);
        }
        let st = srv.state.free_stateid(&a.stateid.other);
        if st != Nfsstat4::OK {
            return Err(st);
        }
        return Ok(ok_status(c, opnum::FREE_STATEID));
    }
    let other = resolve_sid(srv, c, &a.stateid)?.ok_or(Nfsstat4::BAD_STATEID)?;
    let st = srv.state.free_stateid(&other);
    if st != Nfsstat4::OK {
        return Err(st);
    }
    Ok(ok_status(c, opnum::FREE_STATEID))
}

/// RECLAIM_COMPLETE (RFC 8881 18.51).
fn op_reclaim_complete(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &ReclaimComplete4Args,
) -> Result<Flow, Nfsstat4> {
    let client = need_session(c)?;
    let Some(cl) = srv.state.clients.get_mut(&client) else {
        return Err(Nfsstat4::BADSESSION);
    };
    if !a.one_fs {
        if cl.reclaim_done {
            return Err(Nfsstat4::COMPLETE_ALREADY);
        }
        cl.reclaim_done = true;
        let owner = cl.owner.clone();
        srv.reclaim_complete(&owner);
    }
    Ok(ok_status(c, opnum::RECLAIM_COMPLETE))
}

/// EXCHANGE_ID (RFC 8881 18.35).
fn op_exchange_id(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &ExchangeId4Args<'_>,
    now: i64,
) -> Result<Flow, Nfsstat4> {
    // RFC 8881 18.35.3: bits not defined for eia_flags (and
    // CONFIRMED_R, a reply-only bit) are NFS4ERR_INVAL.
    if a.flags & !EXCHGID_ARG_FLAGS != 0 {
        return Err(Nfsstat4::INVAL);
    }
    if !matches!(a.state_protect, StateProtect4A::None) {
        return Err(Nfsstat4::NOTSUPP);
    }
    let (id, seq, confirmed) = srv.state.exchange_id(
        a.clientowner.ownerid.0,
        a.clientowner.verifier,
        principal(&c.cred),
        a.flags & exchgid4_flag::UPD_CONFIRMED_REC_A != 0,
        now,
    )?;
    let mut flags = exchgid4_flag::USE_NON_PNFS;
    if confirmed {
        flags |= exchgid4_flag::CONFIRMED_R;
    }
    let owner = srv.cfg.server_owner.clone();
    Ok(ready(
        c,
        ResOp4::ExchangeId(Nfs4Res::Ok(ExchangeId4ResOk {
            clientid: id,
            sequenceid: seq,
            flags,
            state_protect: StateProtect4R::None,
            server_owner: ServerOwner4 {
                minor_id: 0,
                major_id: Opaque(&owner),
            },
            server_scope: Opaque(&owner),
            server_impl_id: List(vec![NfsImplId4 {
                domain: Opaque(b"duet"),
                name: Opaque(b"duet nfs"),
                date: NfsTime4 {
                    seconds: 0,
                    nseconds: 0,
                },
            }]),
        })),
    ))
}

/// DESTROY_SESSION (RFC 8881 18.37).
fn op_destroy_session(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &DestroySession4Args,
) -> Result<Flow, Nfsstat4> {
    if !srv.state.destroy_session(&a.sessionid) {
        return Err(Nfsstat4::BADSESSION);
    }
    Ok(ok_status(c, opnum::DESTROY_SESSION))
}

/// BIND_CONN_TO_SESSION (RFC 8881 18.34).
fn op_bind_conn_to_session(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &BindConnToSession4Args,
) -> Result<Flow, Nfsstat4> {
    if !srv.state.bind_conn(&a.sessid, c.conn) {
        return Err(Nfsstat4::BADSESSION);
    }
    let dir = match a.dir {
        ChannelDirFromClient4::Fore => ChannelDirFromServer4::Fore,
        ChannelDirFromClient4::Back => ChannelDirFromServer4::Back,
        _ => ChannelDirFromServer4::Both,
    };
    // 18.34.3: the connection now carries the session's callbacks too.
    if dir != ChannelDirFromServer4::Fore {
        srv.state.bind_back(&a.sessid, c.conn);
        let ev = srv.cb_pump(c.now);
        srv.deferred.extend(ev);
    }
    Ok(ready(
        c,
        ResOp4::BindConnToSession(Nfs4Res::Ok(BindConnToSession4ResOk {
            sessid: a.sessid,
            dir,
            use_conn_in_rdma_mode: false,
        })),
    ))
}

/// DESTROY_CLIENTID (RFC 8881 18.50).
fn op_destroy_clientid(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &DestroyClientId4Args,
) -> Result<Flow, Nfsstat4> {
    // RFC 8881 18.50.3: unknown: STALE_CLIENTID; one that still
    // has sessions (the one this COMPOUND's SEQUENCE uses too),
    // opens or locks: CLIENTID_BUSY.
    if !srv.state.clients.contains_key(&a.clientid) {
        return Err(Nfsstat4::STALE_CLIENTID);
    }
    if srv.state.has_state(a.clientid) {
        return Err(Nfsstat4::CLIENTID_BUSY);
    }
    srv.state.purge_client(a.clientid);
    Ok(ok_status(c, opnum::DESTROY_CLIENTID))
}

fn verify_result(c: &mut Compound, negate: bool, same: bool) -> Flow {
    let (opnum, status) = match (negate, same) {
        (false, true) => (opnum::VERIFY, Nfsstat4::OK),
        (false, false) => (opnum::VERIFY, Nfsstat4::NOT_SAME),
        (true, false) => (opnum::NVERIFY, Nfsstat4::OK),
        (true, true) => (opnum::NVERIFY, Nfsstat4::SAME),
    };
    c.steps.push(Step::Ready {
        status,
        bytes: err_bytes(opnum, status),
    });
    if status == Nfsstat4::OK {
        Flow::Next
    } else {
        Flow::Halt
    }
}

/// The smallest request a channel must carry (RFC 8881 18.36.3): an ONC
/// RPC call header with AUTH_NONE (40 bytes) and a COMPOUND of one
/// SEQUENCE with an empty tag (12 + 36).
const MIN_CHANNEL_REQUEST: u32 = 88;
/// The smallest reply: the RPC reply header (24) and a COMPOUND4res of one
/// SEQUENCE4resok with an empty tag (12 + 44).
const MIN_CHANNEL_RESPONSE: u32 = 80;

fn create_session(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &CreateSession4Args<'_>,
) -> Result<Flow, Nfsstat4> {
    let cfg = srv.cfg.clone();
    let lease = srv.state.lease_ns;
    let (confirmed, stale, same_principal) = {
        let cl = srv
            .state
            .clients
            .get(&a.clientid)
            .ok_or(Nfsstat4::STALE_CLIENTID)?;
        (
            cl.confirmed,
            c.now.saturating_sub(cl.last_renew) > lease,
            cl.principal == principal(&c.cred),
        )
    };
    if !confirmed {
        // RFC 8881 18.35.4: a record not confirmed within a lease period
        // is gone; 18.36.4: only its own principal may confirm it.
        if stale {
            srv.state.purge_client(a.clientid);
            return Err(Nfsstat4::STALE_CLIENTID);
        }
        if !same_principal {
            return Err(Nfsstat4::CLID_INUSE);
        }
    }
    {
        let Some(cl) = srv.state.clients.get(&a.clientid) else {
            return Err(Nfsstat4::STALE_CLIENTID);
        };
        // 18.36.4: the previous sequence id is a retry, answered from the
        // client's one-entry CREATE_SESSION reply cache.
        if a.sequence == cl.cs_seq.wrapping_sub(1) {
            if let Some(bytes) = &cl.cs_cache {
                c.steps.push(Step::Ready {
                    status: Nfsstat4::OK,
                    bytes: bytes.clone(),
                });
                return Ok(Flow::Next);
            }
        }
        if a.sequence != cl.cs_seq {
            return Err(Nfsstat4::SEQ_MISORDERED);
        }
    }
    // 18.36.3: csa_flags has three bits.
    let known = create_session4_flag::PERSIST
        | create_session4_flag::CONN_BACK_CHAN
        | create_session4_flag::CONN_RDMA;
    if a.flags & !known != 0 {
        return Err(Nfsstat4::INVAL);
    }
    // 18.36.3: a channel whose requests or replies could not hold a
    // SEQUENCE (or CB_SEQUENCE) is NFS4ERR_TOOSMALL.
    for ch in [&a.fore_chan_attrs, &a.back_chan_attrs] {
        if ch.maxrequestsize < MIN_CHANNEL_REQUEST || ch.maxresponsesize < MIN_CHANNEL_RESPONSE {
            return Err(Nfsstat4::TOOSMALL);
        }
    }
    let f = &a.fore_chan_attrs;
    let slots = f.maxrequests.min(cfg.max_slots).max(1);
    let max_req = f.maxrequestsize.min(cfg.max_request);
    let max_resp = f.maxresponsesize.min(cfg.max_response);
    let max_cached = f.maxresponsesize_cached.min(cfg.max_response_cached);
    // RFC 8881 18.36.3: the server may lower but not raise what the
    // client asked for; SEQUENCE then checks a COMPOUND's operation count
    // against this ca_maxoperations and its size against ca_maxrequestsize
    // (18.46.3), so a client that sends as many operations as it was
    // granted stays under the size it asked for.
    let max_ops = f.maxoperations.min(cfg.max_ops).max(1);
    let id = srv.state.add_session(
        a.clientid, slots, max_ops, max_req, max_resp, max_cached, c.conn,
    )?;
    deleg::setup_session(srv, &id, c.conn, c.minor, a);
    let res = ResOp4::CreateSession(Nfs4Res::Ok(CreateSession4ResOk {
        sessionid: id,
        sequence: a.sequence,
        flags: a.flags & create_session4_flag::CONN_BACK_CHAN,
        fore_chan_attrs: ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: max_req,
            maxresponsesize: max_resp,
            maxresponsesize_cached: max_cached,
            maxoperations: max_ops,
            maxrequests: slots,
            rdma_ird: List(Vec::new()),
        },
        back_chan_attrs: ChannelAttrs4 {
            rdma_ird: List(Vec::new()),
            ..a.back_chan_attrs.clone()
        },
    }));
    let (_, bytes) = encode_res(&res);
    if let Some(cl) = srv.state.clients.get_mut(&a.clientid) {
        cl.cs_seq = cl.cs_seq.wrapping_add(1);
        cl.cs_cache = Some(bytes.clone());
    }
    c.steps.push(Step::Ready {
        status: Nfsstat4::OK,
        bytes,
    });
    Ok(Flow::Next)
}

fn open(
    srv: &mut NfsServer,
    c: &mut Compound,
    a: &Open4Args<'_>,
    b: &mut Batch,
    now: i64,
) -> Result<Flow, Nfsstat4> {
    let client = need_session(c)?;
    let access_bits = a.share_access & share::ACCESS_BOTH;
    if access_bits == 0 || a.share_deny & !share::DENY_BOTH != 0 {
        return Err(Nfsstat4::INVAL);
    }
    let access = Access {
        read: access_bits & share::ACCESS_READ != 0,
        write: access_bits & share::ACCESS_WRITE != 0,
        execute: false,
    };
    // RFC 8881 8.4.2: during the grace period only reclaims are granted.
    if c.grace && !matches!(a.claim, OpenClaim4::Previous(_)) {
        return Err(Nfsstat4::GRACE);
    }
    // RFC 8881 18.51.3: a client that has not sent RECLAIM_COMPLETE gets
    // NFS4ERR_GRACE for a non-reclaim OPEN (pynfs RECC3; knfsd does so).
    if !matches!(a.claim, OpenClaim4::Previous(_)) && !reclaim_completed(srv, client) {
        return Err(Nfsstat4::GRACE);
    }
    if c.cfh == Fh::Pseudo {
        return Err(match (&a.claim, &a.openhow) {
            (OpenClaim4::Null(n), OpenFlag4::NoCreate)
                if c.exports.iter().any(|e| e.name.as_bytes() == n.0) =>
            {
                Nfsstat4::ISDIR
            }
            (_, OpenFlag4::Create(_)) => Nfsstat4::ROFS,
            _ => Nfsstat4::NOENT,
        });
    }
    let (fsid, cur) = c.obj()?;
    // What SMB clients cache of the file goes as far as this open
    // contradicts it, before the open (and any truncation) happens; a
    // delete-pending file is refused then too.
    if breaks::open_gate_needed(srv, c) {
        let target = match &a.claim {
            OpenClaim4::Null(name) => Some(Op::Lookup { dir: cur, name: utf8_name(name.0)? }),
            OpenClaim4::Fh | OpenClaim4::Previous(_) => Some(Op::GetAttr { obj: cur }),
            _ => None,
        };
        if let Some(t) = target {
            let kind = breaks::GateKind::open(access_bits, a.share_deny);
            if let Some(f) = breaks::gate(srv, c, b, opnum::OPEN, vec![t], kind, now)? {
                return Ok(f);
            }
        }
    }
    let mut excl = None;
    let mut attrset = Bitmap4::new();
    let mut create_op = None;
    let obj = match &a.claim {
        OpenClaim4::Null(name) => {
            let name = utf8_name(name.0)?;
            match &a.openhow {
                OpenFlag4::NoCreate => b.push(Op::Lookup { dir: cur, name }),
                OpenFlag4::Create(how) => {
                    let (attrs, if_exists) = match how {
                        CreateHow4::Unchecked(f) | CreateHow4::Guarded(f) => {
                            let (s, set) = fattr4_to_set(f, SETTABLE, &srv.ids)?;
                            attrset = set;
                            let ie = match how {
                                CreateHow4::Guarded(_) => IfExists::Fail,
                                _ if s.size == Some(0) => IfExists::Truncate,
                                _ => IfExists::Open,
                            };
                            (s, ie)
                        }
                        CreateHow4::Exclusive(v) => {
                            excl = Some(*v);
                            (verf_attrs(v), IfExists::Open)
                        }
                        CreateHow4::Exclusive41(cv) => {
                            let (mut s, set) = fattr4_to_set(&cv.cva_attrs, EXCLCREAT, &srv.ids)?;
                            attrset = set;
                            let t = verf_attrs(&cv.cva_verf);
                            s.atime = t.atime;
                            s.mtime = t.mtime;
                            excl = Some(cv.cva_verf);
                            (s, IfExists::Open)
                        }
                    };
                    let r = b.push(Op::Create {
                        dir: cur,
                        name,
                        kind: CreateKind::File,
                        attrs,
                        if_exists,
                    });
                    create_op = Some(b.ops.len() - 1);
                    r
                }
            }
        }
        OpenClaim4::Fh => {
            if matches!(a.openhow, OpenFlag4::Create(_)) {
                return Err(Nfsstat4::INVAL);
            }
            cur
        }
        OpenClaim4::Previous(_) => {
            // A reclaim (RFC 8881 9.11): the current filehandle is the file
            // the client had open before the restart; no delegation.
            if !reclaim_allowed(srv, c, client) {
                return Err(Nfsstat4::NO_GRACE);
            }
            if matches!(a.openhow, OpenFlag4::Create(_)) {
                return Err(Nfsstat4::INVAL);
            }
            cur
        }
        OpenClaim4::DelegPrevFh | OpenClaim4::DelegatePrev(_) => return Err(Nfsstat4::NO_GRACE),
        // RFC 8881 18.16.3: an open the client made locally
        // under its delegation, told to the server (before DELEGRETURN):
        // the delegation must be this client's and live.
        OpenClaim4::DelegCurFh(sid) => {
            if matches!(a.openhow, OpenFlag4::Create(_)) {
                return Err(Nfsstat4::INVAL);
            }
            own_deleg(srv, client, sid)?;
            cur
        }
        OpenClaim4::DelegateCur(dc) => {
            if matches!(a.openhow, OpenFlag4::Create(_)) {
                return Err(Nfsstat4::INVAL);
            }
            own_deleg(srv, client, &dc.delegate_stateid)?;
            b.push(Op::Lookup { dir: cur, name: utf8_name(dc.file.0)? })
        }
    };
    let r = b.push(Op::Open {
        obj,
        access,
        truncate: false,
    });
    let open_op = b.ops.len() - 1;
    let reserved = srv.state.new_other(KIND_OPEN);
    c.reserved.push((reserved, None));
    if c.reserved.len() > 4096 {
        c.reserved.remove(0);
    }
    c.cur_sid = Some(Stateid4 {
        seqid: 1,
        other: reserved,
    });
    c.cfh = Fh::Obj { fsid, obj: r };
    let barrier = excl.is_some() || a.share_deny != 0 || srv.state.deny_opens > 0;
    c.steps.push(Step::Open(Box::new(OpenStep {
        create: create_op,
        open: open_op,
        reserved,
        owner: a.owner.owner.0.to_vec(),
        client,
        access: access_bits,
        deny: a.share_deny,
        excl,
        attrset,
        fsid,
        want: a.share_access & share::WANT_DELEG_MASK,
        reclaim: matches!(a.claim, OpenClaim4::Previous(_)),
        reclaim_deleg: match a.claim {
            OpenClaim4::Previous(t) => Some(t),
            _ => None,
        },
    })));
    Ok(if barrier { Flow::Barrier } else { Flow::Next })
}

/// The delegation stateid of a CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH
/// open (RFC 8881 18.16.3): this client's, not revoked.
fn own_deleg(srv: &NfsServer, client: u64, sid: &Stateid4) -> Result<(), Nfsstat4> {
    match srv.state.delegs.get(&sid.other) {
        Some(d) if d.client == client && !d.revoked => Ok(()),
        Some(d) if d.client == client => Err(Nfsstat4::DELEG_REVOKED),
        _ => Err(Nfsstat4::BAD_STATEID),
    }
}

/// Whether `client` sent RECLAIM_COMPLETE (RFC 8881 18.51): until then its
/// non-reclaim OPENs and LOCKs get NFS4ERR_GRACE.
fn reclaim_completed(srv: &NfsServer, client: u64) -> bool {
    srv.state.clients.get(&client).is_some_and(|cl| cl.reclaim_done)
}

/// Whether `client` may reclaim now: in the grace period, one of the
/// owners that held state before the restart, RECLAIM_COMPLETE not sent.
fn reclaim_allowed(srv: &mut NfsServer, c: &Compound, client: u64) -> bool {
    let Some(cl) = srv.state.clients.get(&client) else {
        return false;
    };
    if cl.reclaim_done {
        return false;
    }
    let owner = cl.owner.clone();
    srv.may_reclaim(&owner, c.now)
}

fn lock(srv: &mut NfsServer, c: &mut Compound, a: &Lock4Args<'_>) -> Result<Flow, Nfsstat4> {
    let client = need_session(c)?;
    if a.reclaim && !reclaim_allowed(srv, c, client) {
        return Err(Nfsstat4::NO_GRACE);
    }
    if !a.reclaim && (c.grace || !reclaim_completed(srv, client)) {
        return Err(Nfsstat4::GRACE);
    }
    let end = range_end(a.offset, a.length)?;
    let write = matches!(a.locktype, NfsLockType4::Write | NfsLockType4::WriteW);
    // SMB read caching of the file goes, as for an SMB byte-range lock
    // (MS-FSA 2.1.5.7, 2.1.4.12 BYTE_RANGE_LOCK); nothing waits for it.
    if let Ok((_, node)) = c.node() {
        let now = c.now;
        breaks::break_for_write(srv, c, ObjRef::Id(node), now);
    }
    let (lock_other, fresh) = match &a.locker {
        Locker4::New(o) => {
            let open = resolve_sid(srv, c, &o.open_stateid)?.ok_or(Nfsstat4::BAD_STATEID)?;
            if !srv.state.opens.contains_key(&open) {
                return Err(Nfsstat4::BAD_STATEID);
            }
            let before = srv.state.locks.len();
            let l = srv.state.lock_state_for(&open, o.lock_owner.owner.0)?;
            (l, srv.state.locks.len() > before)
        }
        Locker4::Existing(e) => {
            let l = resolve_sid(srv, c, &e.lock_stateid)?.ok_or(Nfsstat4::BAD_STATEID)?;
            if !srv.state.locks.contains_key(&l) {
                return Err(Nfsstat4::BAD_STATEID);
            }
            (l, false)
        }
    };
    match srv.state.lock(&lock_other, a.offset, end, write) {
        Ok(sid) => {
            c.cur_sid = Some(sid);
            Ok(ready(c, ResOp4::Lock(Lock4Res::Ok(sid))))
        }
        Err(e) => {
            if fresh {
                srv.state.free_stateid(&lock_other);
            }
            match e {
                Ok(k) => Ok(ready(
                    c,
                    ResOp4::Lock(Lock4Res::Denied(Lock4Denied {
                        offset: k.offset,
                        length: k.length,
                        locktype: if k.write {
                            NfsLockType4::Write
                        } else {
                            NfsLockType4::Read
                        },
                        owner: StateOwner4 {
                            clientid: k.clientid,
                            owner: Opaque(&k.owner),
                        },
                    })),
                )),
                Err(st) => Err(st),
            }
        }
    }
}

// ---- after the batch ----

fn out_of(results: &[OpResult], i: usize) -> Result<&OpOutput, Nfsstat4> {
    match results.get(i) {
        Some(Ok(o)) => Ok(o),
        Some(Err(e)) => Err(nfs4_status(*e)),
        None => Err(Nfsstat4::SERVERFAULT),
    }
}

fn attrs_of(results: &[OpResult], i: usize) -> Result<&Attrs, Nfsstat4> {
    out_of(results, i)?.attrs().ok_or(Nfsstat4::SERVERFAULT)
}

fn cinfo(before: Option<&Attrs>, after: Option<&Attrs>) -> ChangeInfo4 {
    match (before, after) {
        (Some(b), Some(a)) => ChangeInfo4 {
            atomic: true,
            before: b.change,
            after: a.change,
        },
        _ => ChangeInfo4 {
            atomic: false,
            before: 0,
            after: 0,
        },
    }
}

/// Writes one step's result into the reply; returns its status.
fn finish_step(
    srv: &mut NfsServer,
    c: &mut Compound,
    step: Step,
    results: &[OpResult],
) -> Nfsstat4 {
    let (opnum, r): (u32, Result<Nfsstat4, Nfsstat4>) = match step {
        Step::Ready { status, bytes } => {
            c.results.put_raw(&bytes);
            return status;
        }
        Step::GetFh { fsid, op } => finish_get_fh(srv, c, results, fsid, op),
        Step::GetAttr { fsid, op, req } => finish_get_attr(srv, c, results, fsid, op, req),
        Step::Status { opnum, op } => (opnum, out_of(results, op).map(|_| put_ok(c, opnum))),
        Step::LookupP { dir, op } => finish_lookup_p(c, results, dir, op),
        Step::SecInfo { op } => finish_sec_info(c, results, op),
        Step::Access { op, req, ro } => finish_access(c, results, op, req, ro),
        Step::Open(o) => (opnum::OPEN, finish_open(srv, c, &o, results)),
        Step::Close { op, other } => finish_close(srv, c, results, op, other),
        Step::Read { op, plus, offset } => finish_read(c, results, op, plus, offset),
        Step::Write { op } => finish_write(srv, c, results, op),
        Step::Create { op, attrset } => finish_create(c, results, op, attrset),
        Step::Remove { op } => finish_remove(c, results, op),
        Step::Rename { op } => finish_rename(c, results, op),
        Step::Link { op } => finish_link(c, results, op),
        Step::ReadLink { op } => finish_read_link(c, results, op),
        Step::ReadDir {
            op,
            fsid,
            req,
            skip,
            base,
            maxcount,
            dircount,
        } => finish_read_dir(
            srv, c, results, op, fsid, req, skip, base, maxcount, dircount,
        ),
        Step::PseudoReadDir {
            roots,
            req,
            start,
            maxcount,
        } => finish_pseudo_read_dir(srv, c, results, roots, req, start, maxcount),
        Step::SetAttr { op, acl_op, attrset } => return finish_set_attr(c, results, op, acl_op, attrset),
        Step::Verify {
            op,
            fsid,
            mask,
            vals,
            negate,
        } => finish_verify(srv, c, results, op, fsid, mask, vals, negate),
        Step::Copy { op } => finish_copy(srv, c, results, op),
        Step::Seek { op, offset, data } => finish_seek(c, results, op, offset, data),
        Step::Xattr(x) => xattr::finish(c, x, results),
        // Handled by `drive` before it comes here.
        Step::Gate(_) | Step::CbGetattr(_) => return Nfsstat4::OK,
    };
    match r {
        Ok(s) => s,
        Err(st) => {
            c.results.put_raw(&err_bytes(opnum, st));
            st
        }
    }
}

/// The result of GETFH (RFC 8881 18.8) once its batch ran.
fn finish_get_fh(
    srv: &mut NfsServer,
    c: &mut Compound,
    results: &[OpResult],
    fsid: u64,
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    let key = srv.cfg.handle_key;
    (
        opnum::GETFH,
        attrs_of(results, op).map(|a| {
            let fh = FileHandle::Object { fsid, id: a.id }.encode(key);
            put(
                c,
                ResOp4::GetFh(Nfs4Res::Ok(GetFh4ResOk {
                    object: Opaque(&fh),
                })),
            )
        }),
    )
}

/// The result of GETATTR (RFC 8881 18.7) once its batch ran.
fn finish_get_attr(
    srv: &mut NfsServer,
    c: &mut Compound,
    results: &[OpResult],
    fsid: u64,
    op: usize,
    req: Bitmap4,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    let key = srv.cfg.handle_key;
    let info = fs_info(srv);
    (
        opnum::GETATTR,
        attrs_of(results, op).and_then(|a| {
            let fh = FileHandle::Object { fsid, id: a.id }.encode(key);
            let aces = match out_of(results, op) {
                Ok(OpOutput::Acl { acl, .. }) => Some(attr::nfs4_acl(a, acl.as_ref(), &srv.ids)?),
                _ => None,
            };
            let wire = aces.as_deref().map(attr::nfs4_acl_wire);
            let ctx = ObjCtx {
                fsid: Fsid4 {
                    major: fsid,
                    minor: 0,
                },
                fh: &fh,
                mounted_on: a.id,
                acl: wire.as_deref(),
                ids: &srv.ids,
            };
            let seen = deleg::holder_view(c, a);
            let (mask, vals) = fattr4_vals(seen.as_ref().unwrap_or(a), &ctx, &info, &req);
            Ok(put(
                c,
                ResOp4::GetAttr(Nfs4Res::Ok(GetAttr4ResOk {
                    obj_attributes: Fattr4 {
                        attrmask: mask,
                        attr_vals: Opaque(&vals),
                    },
                })),
            ))
        }),
    )
}

/// The result of LOOKUPP (RFC 8881 18.14.3) once its batch ran.
fn finish_lookup_p(
    c: &mut Compound,
    results: &[OpResult],
    dir: usize,
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::LOOKUPP,
        attrs_of(results, dir).and_then(|a| match out_of(results, op) {
            Err(Nfsstat4::NOTDIR) if a.ftype == FileType::Symlink => Err(Nfsstat4::SYMLINK),
            r => r.map(|_| put_ok(c, opnum::LOOKUPP)),
        }),
    )
}

/// The result of SECINFO (RFC 8881 18.29) once its batch ran.
fn finish_sec_info(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::SECINFO,
        out_of(results, op).map(|_| {
            put(
                c,
                ResOp4::SecInfo(Nfs4Res::Ok(List(vec![SecInfo4::Flavor(AUTH_SYS)]))),
            )
        }),
    )
}

/// The result of ACCESS (RFC 8881 18.1) once its batch ran.
fn finish_access(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
    req: u32,
    ro: bool,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::ACCESS,
        attrs_of(results, op).map(|a| {
            let cred = c.cred.clone();
            let stored = match results.get(op) {
                Some(Ok(o)) => o.stored_security(),
                _ => Ok(None),
            };
            let mut granted = attr::access_bits_with_acl(&cred, a, stored, req, ro);
            // Extended attributes (RFC 8276 8.4.5): reading and listing
            // with read permission, writing with write permission.
            let p = attr::perm_bits(&cred, a);
            if p & 4 != 0 || cred.uid == 0 {
                granted |= req & (access4::XAREAD | access4::XALIST);
            }
            if (p & 2 != 0 || cred.uid == 0 || cred.uid == a.uid) && !ro {
                granted |= req & access4::XAWRITE;
            }
            put(
                c,
                ResOp4::Access(Nfs4Res::Ok(Access4ResOk {
                    supported: req & access4::ALL,
                    access: granted,
                })),
            )
        }),
    )
}

/// The result of CLOSE (RFC 8881 18.2) once its batch ran.
fn finish_close(
    srv: &mut NfsServer,
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
    other: Other,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::CLOSE,
        // CLOSE ends the open state, which the stateid names: it
        // succeeds when the file went while open (a RENAME over it or
        // a REMOVE of its last name, which duet does not defer), as
        // it would on a server that keeps unlinked open files (RFC
        // 8881 18.2.3; pynfs RNM21).
        match results.get(op) {
            Some(Err(duet_fs::FsError::Stale)) => Ok(()),
            _ => out_of(results, op).map(|_| ()),
        }
        .map(|()| {
            let actual = c.actual(&other).flatten().map_or(other, |s| s.other);
            srv.state.remove_open(&actual);
            c.cur_sid = Some(CLOSED);
            put(c, ResOp4::Close(Nfs4Res::Ok(CLOSED)))
        }),
    )
}

/// The result of READ and READ_PLUS (RFC 8881 18.22, RFC 7862 15.10) once its batch ran.
fn finish_read(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
    plus: bool,
    offset: u64,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        if plus { opnum::READ_PLUS } else { opnum::READ },
        match out_of(results, op) {
            Ok(OpOutput::Read { data, eof, .. }) => Ok(if plus {
                let contents = if data.is_empty() {
                    Vec::new()
                } else {
                    vec![ReadPlusContent::Data(Data4 {
                        offset,
                        data: Opaque(data),
                    })]
                };
                put(
                    c,
                    ResOp4::ReadPlus(Nfs4Res::Ok(ReadPlus4ResOk {
                        eof: *eof,
                        contents: List(contents),
                    })),
                )
            } else {
                put(
                    c,
                    ResOp4::Read(Nfs4Res::Ok(Read4ResOk {
                        eof: *eof,
                        data: Opaque(data),
                    })),
                )
            }),
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// The result of WRITE (RFC 8881 18.32) once its batch ran.
fn finish_write(
    srv: &mut NfsServer,
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::WRITE,
        match out_of(results, op) {
            Ok(OpOutput::Written { count, .. }) => {
                let verf = srv.write_verf;
                Ok(put(
                    c,
                    ResOp4::Write(Nfs4Res::Ok(Write4ResOk {
                        count: *count as u32,
                        committed: if c.lazy == Some(true) { StableHow4::Unstable } else { StableHow4::FileSync },
                        writeverf: verf,
                    })),
                ))
            }
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// The result of CREATE (RFC 8881 18.4) once its batch ran.
fn finish_create(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
    attrset: Bitmap4,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::CREATE,
        match out_of(results, op) {
            Ok(OpOutput::Object {
                dir_before,
                dir_after,
                ..
            }) => {
                let ci = cinfo(dir_before.as_ref(), dir_after.as_ref());
                Ok(put(
                    c,
                    ResOp4::Create(Nfs4Res::Ok(Create4ResOk { cinfo: ci, attrset })),
                ))
            }
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// The result of REMOVE (RFC 8881 18.25) once its batch ran.
fn finish_remove(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::REMOVE,
        match out_of(results, op) {
            Ok(OpOutput::Dirs { changed, .. }) => {
                let ci = changed
                    .first()
                    .map_or(cinfo(None, None), |(b, a)| cinfo(Some(b), Some(a)));
                Ok(put(
                    c,
                    ResOp4::Remove(Nfs4Res::Ok(Remove4ResOk { cinfo: ci })),
                ))
            }
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// The result of RENAME (RFC 8881 18.26) once its batch ran.
fn finish_rename(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::RENAME,
        match out_of(results, op) {
            Ok(OpOutput::Dirs { changed, .. }) => {
                let s = changed
                    .first()
                    .map_or(cinfo(None, None), |(b, a)| cinfo(Some(b), Some(a)));
                let t = changed
                    .get(1)
                    .map_or(s.clone(), |(b, a)| cinfo(Some(b), Some(a)));
                Ok(put(
                    c,
                    ResOp4::Rename(Nfs4Res::Ok(Rename4ResOk {
                        source_cinfo: s,
                        target_cinfo: t,
                    })),
                ))
            }
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// The result of LINK (RFC 8881 18.9) once its batch ran.
fn finish_link(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::LINK,
        match out_of(results, op) {
            Ok(OpOutput::Dirs { changed, .. }) => {
                let ci = changed
                    .first()
                    .map_or(cinfo(None, None), |(b, a)| cinfo(Some(b), Some(a)));
                Ok(put(c, ResOp4::Link(Nfs4Res::Ok(Link4ResOk { cinfo: ci }))))
            }
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// The result of READLINK (RFC 8881 18.24) once its batch ran.
fn finish_read_link(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::READLINK,
        match out_of(results, op) {
            Ok(OpOutput::Link { target, .. }) => Ok(put(
                c,
                ResOp4::ReadLink(Nfs4Res::Ok(ReadLink4ResOk {
                    link: Opaque(target.as_bytes()),
                })),
            )),
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// The result of READDIR (RFC 8881 18.23) once its batch ran.
#[allow(clippy::too_many_arguments)]
fn finish_read_dir(
    srv: &mut NfsServer,
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
    fsid: u64,
    req: Bitmap4,
    skip: u64,
    base: u64,
    maxcount: u32,
    dircount: u32,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::READDIR,
        match out_of(results, op) {
            Ok(OpOutput::Dir {
                entries,
                eof,
                attrs,
            }) => {
                let list: Vec<(&str, NodeId, Option<&Attrs>)> = entries
                    .iter()
                    .skip(skip.min(usize::MAX as u64) as usize)
                    .map(|e| (e.name.as_str(), e.id, e.attrs.as_ref()))
                    .collect();
                readdir_reply(
                    srv, c, fsid, attrs.id, &list, *eof, &req, base, maxcount, dircount, true,
                )
            }
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// The result of READDIR of the pseudo-root (RFC 8881 18.23, 7.4) once its batch ran.
fn finish_pseudo_read_dir(
    srv: &mut NfsServer,
    c: &mut Compound,
    results: &[OpResult],
    roots: Vec<(String, u64, usize)>,
    req: Bitmap4,
    start: usize,
    maxcount: u32,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    let mut list: Vec<(String, u64, Attrs)> = Vec::new();
    for (name, fsid, op) in &roots {
        if let Ok(a) = attrs_of(results, *op) {
            list.push((name.clone(), *fsid, a.clone()));
        }
    }
    (
        opnum::READDIR,
        pseudo_readdir_reply(srv, c, &list, &req, start, maxcount),
    )
}

/// The result of SETATTR (RFC 8881 18.30) once its batch ran.
fn finish_set_attr(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
    acl_op: Option<usize>,
    attrset: Bitmap4,
) -> Nfsstat4 {
    let st = match out_of(results, op).and_then(|_| acl_op.map_or(Ok(()), |i| out_of(results, i).map(|_| ()))) {
        Ok(_) => SetAttr4Res {
            status: Nfsstat4::OK,
            attrsset: attrset,
        },
        Err(e) => SetAttr4Res {
            status: e,
            attrsset: Bitmap4::new(),
        },
    };
    let status = st.status;
    put(c, ResOp4::SetAttr(st));
    status
}

/// The result of VERIFY and NVERIFY (RFC 8881 18.31, 18.15) once its batch ran.
#[allow(clippy::too_many_arguments)]
fn finish_verify(
    srv: &mut NfsServer,
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
    fsid: u64,
    mask: Bitmap4,
    vals: Vec<u8>,
    negate: bool,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    let key = srv.cfg.handle_key;
    let info = fs_info(srv);
    (
        if negate {
            opnum::NVERIFY
        } else {
            opnum::VERIFY
        },
        attrs_of(results, op).map(|a| {
            let fh = FileHandle::Object { fsid, id: a.id }.encode(key);
            let ctx = ObjCtx {
                fsid: Fsid4 {
                    major: fsid,
                    minor: 0,
                },
                fh: &fh,
                mounted_on: a.id,
                acl: None,
                ids: &srv.ids,
            };
            let (m, v) = fattr4_vals(a, &ctx, &info, &mask);
            let same = m == mask && v == vals;
            let status = match (negate, same) {
                (false, true) | (true, false) => Nfsstat4::OK,
                (false, false) => Nfsstat4::NOT_SAME,
                (true, true) => Nfsstat4::SAME,
            };
            let opn = if negate {
                opnum::NVERIFY
            } else {
                opnum::VERIFY
            };
            c.results.put_raw(&err_bytes(opn, status));
            status
        }),
    )
}

/// The result of COPY (RFC 7862 15.2) once its batch ran.
fn finish_copy(
    srv: &mut NfsServer,
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::COPY,
        match out_of(results, op) {
            Ok(OpOutput::Copied { count, .. }) => {
                let verf = srv.write_verf;
                Ok(put(
                    c,
                    ResOp4::Copy(Copy4Res::Ok(Copy4ResOk {
                        response: WriteResponse4 {
                            callback_id: List(Vec::new()),
                            count: *count,
                            committed: StableHow4::FileSync,
                            writeverf: verf,
                        },
                        requirements: CopyRequirements4 {
                            consecutive: true,
                            synchronous: true,
                        },
                    })),
                ))
            }
            Ok(_) => Err(Nfsstat4::SERVERFAULT),
            Err(e) => Err(e),
        },
    )
}

/// Where SEEK (RFC 7862 15.11) from `offset` (below `size`) lands, given
/// the allocated ranges from `offset` on (in order, merged): DATA = the
/// first allocated byte at or after it, none past the last data (`None`:
/// NFS4ERR_NXIO, as lseek(2) SEEK_DATA answers ENXIO and knfsd passes it
/// on); HOLE = the first byte at or after it in no range (the implied hole
/// at the end of the file counts). `sr_eof` when the answer is the end of
/// the file.
fn seek_in(ranges: &[(u64, u64)], offset: u64, size: u64, data: bool) -> Option<Seek4ResOk> {
    if data {
        let &(o, _) = ranges.iter().find(|&&(o, l)| o + l > offset)?;
        let at = o.max(offset);
        return Some(Seek4ResOk { eof: at >= size, offset: at });
    }
    let mut at = offset;
    for &(o, l) in ranges {
        if o > at {
            break;
        }
        at = at.max(o + l);
    }
    Some(Seek4ResOk { eof: at >= size, offset: at.min(size) })
}

/// The result of SEEK (RFC 7862 15.11) once its batch ran.
fn finish_seek(
    c: &mut Compound,
    results: &[OpResult],
    op: usize,
    offset: u64,
    data: bool,
) -> (u32, Result<Nfsstat4, Nfsstat4>) {
    (
        opnum::SEEK,
        attrs_of(results, op).and_then(|a| {
            if a.ftype == FileType::Directory {
                return Err(Nfsstat4::ISDIR);
            }
            if offset >= a.size {
                return Err(Nfsstat4::NXIO);
            }
            let ranges = match results.get(op) {
                Some(Ok(OpOutput::Ranges { ranges, .. })) => ranges.as_slice(),
                _ => return Err(Nfsstat4::SERVERFAULT),
            };
            let res = seek_in(ranges, offset, a.size, data).ok_or(Nfsstat4::NXIO)?;
            Ok(put(c, ResOp4::Seek(Nfs4Res::Ok(res))))
        }),
    )
}

fn put(c: &mut Compound, res: ResOp4<'_>) -> Nfsstat4 {
    c.results.put_u32(res.opnum());
    res.encode_result(&mut c.results);
    res.status()
}

fn put_ok(c: &mut Compound, opnum: u32) -> Nfsstat4 {
    c.results.put_raw(&err_bytes(opnum, Nfsstat4::OK));
    Nfsstat4::OK
}

fn finish_open(
    srv: &mut NfsServer,
    c: &mut Compound,
    o: &OpenStep,
    results: &[OpResult],
) -> Result<Nfsstat4, Nfsstat4> {
    let mut ci = cinfo(None, None);
    let mut created = false;
    if let Some(ci_op) = o.create {
        if let OpOutput::Object {
            attrs,
            created: cr,
            dir_before,
            dir_after,
        } = out_of(results, ci_op)?
        {
            created = *cr;
            ci = cinfo(dir_before.as_ref(), dir_after.as_ref());
            if let Some(v) = &o.excl {
                if !created && !verf_matches(attrs, v) {
                    return Err(Nfsstat4::EXIST);
                }
            }
        }
    }
    // The lookup of a CLAIM_NULL open without create failed (NOENT...):
    // its error is the OPEN's, not the open op's "skipped".
    if let (Some(Err(duet_fs::FsError::Skipped)), Some(i)) = (results.get(o.open), o.open.checked_sub(1)) {
        if let Some(Err(e)) = results.get(i) {
            return Err(nfs4_status(*e));
        }
    }
    let a = attrs_of(results, o.open)?;
    match a.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(Nfsstat4::ISDIR),
        FileType::Symlink => return Err(Nfsstat4::SYMLINK),
        _ => return Err(Nfsstat4::WRONG_TYPE),
    }
    // A delete-pending file takes no new open (MS-FSA 2.1.5.1.2.1; the
    // gate refused it before the batch unless it became so meanwhile).
    if crate::nfs::server::breaks::delete_pending(srv, a.id) {
        return Err(Nfsstat4::ACCESS);
    }
    if srv
        .state
        .share_conflict(o.client, &o.owner, a.id, o.access, o.deny)
    {
        return Err(Nfsstat4::SHARE_DENIED);
    }
    let sid = srv.state.upsert_open(
        o.reserved, o.client, &o.owner, a.id, o.fsid, o.access, o.deny,
    )?;
    if let Some(e) = c.reserved.iter_mut().find(|(r, _)| *r == o.reserved) {
        e.1 = Some(sid);
    }
    c.cur_sid = Some(sid);
    let attrset = if created { o.attrset } else { Bitmap4::new() };
    let offer = deleg::Offer {
        client: o.client,
        node: a.id,
        fsid: o.fsid,
        want: o.want,
        access: o.access,
        reclaim: o.reclaim,
        reclaim_deleg: o.reclaim_deleg,
    };
    let delegation = deleg::offer(srv, &offer, c.now);
    Ok(put(
        c,
        ResOp4::Open(Nfs4Res::Ok(Open4ResOk {
            stateid: sid,
            cinfo: ci,
            rflags: open4_result::LOCKTYPE_POSIX,
            attrset,
            delegation,
        })),
    ))
}

#[allow(clippy::too_many_arguments)]
fn readdir_reply(
    srv: &mut NfsServer,
    c: &mut Compound,
    fsid: u64,
    dir: NodeId,
    list: &[(&str, NodeId, Option<&Attrs>)],
    eof: bool,
    req: &Bitmap4,
    base: u64,
    maxcount: u32,
    dircount: u32,
    remember: bool,
) -> Result<Nfsstat4, Nfsstat4> {
    let key = srv.cfg.handle_key;
    let info = fs_info(srv);
    let want_fh = req.is_set(fa::FILEHANDLE);
    let mut used = 32usize;
    let mut dirused = 0usize;
    // All entries' attribute values in one buffer: (cookie, mask, range).
    let mut vals = XdrWriter::with_buffer(Vec::with_capacity(
        (maxcount as usize).min(list.len() * 160),
    ));
    let mut encoded: Vec<(u64, Bitmap4, std::ops::Range<usize>)> = Vec::with_capacity(list.len());
    for (k, (name, id, attrs)) in list.iter().enumerate() {
        let start = vals.len();
        let mask = match attrs {
            Some(a) => {
                let fh = want_fh.then(|| FileHandle::Object { fsid, id: *id }.encode(key));
                let ctx = ObjCtx {
                    fsid: Fsid4 {
                        major: fsid,
                        minor: 0,
                    },
                    fh: fh.as_ref().map_or(&[], |f| &f[..]),
                    mounted_on: *id,
                    acl: None,
                    ids: &srv.ids,
                };
                fattr4_vals_into(a, &ctx, &info, req, &mut vals)
            }
            None => Bitmap4::new(),
        };
        let len = vals.len() - start;
        let name_len = name.len().div_ceil(4) * 4;
        let cost = 4 + 8 + 4 + name_len + 4 + 4 * mask.words().len() + 4 + len;
        if used + cost > maxcount as usize
            || (k > 0 && dircount > 0 && dirused + 16 + name_len > dircount as usize)
        {
            vals.truncate(start);
            break;
        }
        used += cost;
        dirused += 16 + name_len;
        encoded.push((
            make_cookie(base + k as u64 + 1, name),
            mask,
            start..start + len,
        ));
    }
    let vals = vals.into_inner();
    if encoded.is_empty() && !list.is_empty() {
        return Err(Nfsstat4::TOOSMALL);
    }
    let all = encoded.len() == list.len() && eof;
    if remember {
        if let (Some((cookie, _, _)), Some((name, _, _))) =
            (encoded.last(), list.get(encoded.len().wrapping_sub(1)))
        {
            srv.cookies.remember(dir, *cookie, name);
        }
    }
    let entries = encoded
        .iter()
        .zip(list)
        .map(|((cookie, mask, range), (name, _, _))| Entry4 {
            cookie: *cookie,
            name: Name(name.as_bytes()),
            attrs: Fattr4 {
                attrmask: *mask,
                attr_vals: Opaque(&vals[range.clone()]),
            },
        })
        .collect();
    let verf = srv.cookieverf;
    Ok(put(
        c,
        ResOp4::ReadDir(Nfs4Res::Ok(ReadDir4ResOk {
            cookieverf: verf,
            reply: DirList4 {
                entries: LinkedList(entries),
                eof: all,
            },
        })),
    ))
}

fn pseudo_readdir_reply(
    srv: &mut NfsServer,
    c: &mut Compound,
    list: &[(String, u64, Attrs)],
    req: &Bitmap4,
    start: usize,
    maxcount: u32,
) -> Result<Nfsstat4, Nfsstat4> {
    let key = srv.cfg.handle_key;
    let info = fs_info(srv);
    let mut used = 32usize;
    let mut encoded: Vec<(u64, Bitmap4, Vec<u8>)> = Vec::new();
    for (k, (name, fsid, a)) in list.iter().enumerate() {
        let fh = FileHandle::Object {
            fsid: *fsid,
            id: a.id,
        }
        .encode(key);
        let ctx = ObjCtx {
            fsid: Fsid4 {
                major: *fsid,
                minor: 0,
            },
            fh: &fh,
            mounted_on: a.id,
            acl: None,
            ids: &srv.ids,
        };
        let (mask, vals) = fattr4_vals(a, &ctx, &info, req);
        let cost =
            4 + 8 + 4 + name.len().div_ceil(4) * 4 + 4 + 4 * mask.words().len() + 4 + vals.len();
        if used + cost > maxcount as usize {
            break;
        }
        used += cost;
        encoded.push(((start + k + 3) as u64, mask, vals));
    }
    if encoded.is_empty() && !list.is_empty() {
        return Err(Nfsstat4::TOOSMALL);
    }
    let all = encoded.len() == list.len();
    let entries = encoded
        .iter()
        .zip(list)
        .map(|((cookie, mask, vals), (name, _, _))| Entry4 {
            cookie: *cookie,
            name: Name(name.as_bytes()),
            attrs: Fattr4 {
                attrmask: *mask,
                attr_vals: Opaque(vals),
            },
        })
        .collect();
    let verf = srv.cookieverf;
    Ok(put(
        c,
        ResOp4::ReadDir(Nfs4Res::Ok(ReadDir4ResOk {
            cookieverf: verf,
            reply: DirList4 {
                entries: LinkedList(entries),
                eof: all,
            },
        })),
    ))
}

/// Processes a batch result and continues the COMPOUND.
pub(super) fn batch_done(
    srv: &mut NfsServer,
    c: Box<Compound>,
    results: Vec<OpResult>,
    now: i64,
) -> Vec<Event> {
    drive(srv, c, results, now)
}

fn drive(
    srv: &mut NfsServer,
    mut c: Box<Compound>,
    mut results: Vec<OpResult>,
    now: i64,
) -> Vec<Event> {
    loop {
        let steps = std::mem::take(&mut c.steps);
        let mut ok = true;
        for step in steps {
            if let Step::Gate(g) = step {
                // The last step of its batch: the operation goes on in the
                // next batch, or answers DELAY.
                if let Err(st) = breaks::finish_gate(srv, &g, &results, now) {
                    c.results.put_raw(&err_bytes(g.opnum, st));
                    c.count += 1;
                    c.last = st;
                    ok = false;
                }
                break;
            }
            if let Step::CbGetattr(g) = step {
                // The last step of its batch: the COMPOUND waits for the
                // CB_GETATTR's answer, or goes on without one. Its file
                // handles name ids first (the batch's results go).
                c.cfh = resolve_fh(c.cfh, &results);
                c.sfh = resolve_fh(c.sfh, &results);
                results = Vec::new();
                match deleg::send_cb_getattr(srv, c, g, now) {
                    Ok(events) => return events,
                    Err(back) => {
                        c = back;
                        break;
                    }
                }
            }
            let before = c.results.len();
            let mut st = finish_step(srv, &mut c, step, &results);
            if let Some((limit, err)) = c.reply_limit {
                // RFC 8881 2.10.6.4: the operation whose result would make
                // the reply larger than the session allows fails instead.
                if reply_overhead(&c.tag) + c.results.len() > limit {
                    let opnum = c
                        .results
                        .as_bytes()
                        .get(before..before + 4)
                        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    c.results.truncate(before);
                    c.results.put_raw(&err_bytes(opnum, err));
                    st = err;
                }
            }
            c.count += 1;
            c.last = st;
            if st != Nfsstat4::OK {
                ok = false;
                break;
            }
        }
        if !ok || c.halted || c.next_op >= c.n_ops {
            if let Some(b) = last_close_removals(srv, &c, now) {
                // Answered once it ran; its outcome is not the COMPOUND's
                // (halted: nothing is translated after it, and a failure
                // before it stays the answer).
                c.halted |= !ok;
                return vec![srv.submit(b, "nfs4.compound", Pending::V4(c))];
            }
            return vec![finalize(srv, c, ok)];
        }
        // Continue with the filehandles resolved to ids.
        c.cfh = resolve_fh(c.cfh, &results);
        c.sfh = resolve_fh(c.sfh, &results);
        let Some(record) = c.record.take() else {
            return vec![finalize(srv, c, false)];
        };
        let batch = {
            let mut r = XdrReader::new(&record);
            let args = match crate::nfs::rpc::CallBody::decode(&mut r)
                .and_then(|_| Compound4Args::decode(&mut r, &limits(srv)))
            {
                Ok(a) => a,
                Err(_) => return vec![finalize(srv, c, false)],
            };
            translate(srv, &mut c, &args.ops, now)
        };
        if c.next_op < c.n_ops && !c.halted {
            c.record = Some(record);
        }
        if !batch.ops.is_empty() {
            return vec![srv.submit(batch, "nfs4.compound", Pending::V4(c))];
        }
        results = Vec::new();
    }
}

/// The batch removing the delete-pending files whose last open a CLOSE
/// of this COMPOUND (or an expired client meanwhile) ended
/// (`NfsServer::pending_removals`), under the caller's credentials as
/// the last SMB closer's are. It runs after the COMPOUND's operations, so
/// that a GETATTR after the CLOSE (the Linux client sends one) still
/// finds the file.
fn last_close_removals(srv: &mut NfsServer, c: &Compound, now: i64) -> Option<Batch> {
    let cred = if c.squash && c.cred.uid == 0 { nobody() } else { c.cred.clone() };
    srv.pending_removals(cred, now)
}

/// A file handle naming a result of the batch that ran, as the id it
/// found (none if it failed); others as they are.
fn resolve_fh(fh: Fh, results: &[OpResult]) -> Fh {
    match fh {
        Fh::Obj {
            fsid,
            obj: ObjRef::Result(i),
        } => match results.get(i).and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs()) {
            Some(a) => Fh::Obj {
                fsid,
                obj: ObjRef::Id(a.id),
            },
            None => Fh::None,
        },
        other => other,
    }
}

/// Builds the reply, caches it in the SEQUENCE slot, and frees the slot.
fn finalize(srv: &mut NfsServer, c: Box<Compound>, all_ok: bool) -> Event {
    let mut results = c.results;
    let mut count = c.count;
    let mut last = c.last;
    if all_ok && !c.halted && c.next_op >= c.n_ops {
        if let Some(res) = c.stop.as_ref().and_then(|s| s.result()) {
            let (_, bytes) = encode_res(&res);
            results.put_raw(&bytes);
            count += 1;
            last = res.status();
        }
    }
    // The COMPOUND status is the last result's status.
    let body = results.into_inner();
    let mut w = XdrWriter::new();
    last.encode(&mut w);
    w.put_opaque(&c.tag);
    w.put_u32(count);
    w.put_raw(&body);
    let bytes = w.into_inner();
    if let Some((sid, slot, cachethis)) = c.session {
        if let Some(s) = srv.state.sessions.get_mut(&sid) {
            let max_cached = s.max_cached as usize;
            if let Some(sl) = s.slots.get_mut(slot) {
                sl.in_progress = false;
                sl.cache = if cachethis && bytes.len() <= max_cached {
                    SlotCache::Reply(bytes.clone())
                } else {
                    SlotCache::Uncached
                };
            }
        }
    }
    reply_with(c.conn, c.xid, |w| w.put_raw(&bytes))
}
