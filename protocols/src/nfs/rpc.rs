//! ONC RPC version 2 (RFC 5531): record marking, call and reply messages,
//! authentication flavours AUTH_NONE and AUTH_SYS.
//!
//! A call decodes as a [`CallBody`] header; the procedure's arguments follow
//! in the same [`XdrReader`], so the server decodes them next without a copy.
//! A reply is encoded as a [`ReplyHeader`] followed by the results.

use super::xdr::{
    xdr_enum, xdr_struct, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter,
};

/// RFC 5531 section 9: the only RPC protocol version.
pub const RPC_VERSION: u32 = 2;
/// RFC 5531 section 8.2: bound on the body of an opaque_auth.
pub const MAX_AUTH_BYTES: u32 = 400;
/// RFC 5531 appendix A: bound on authsys_parms.machinename.
pub const AUTH_SYS_MAX_MACHINE_NAME: u32 = 255;
/// RFC 5531 appendix A: bound on authsys_parms.gids.
pub const AUTH_SYS_MAX_GIDS: u32 = 16;

/// Program numbers (RFC 1833, RFC 1813, RFC 8881).
pub const PROGRAM_PORTMAP: u32 = 100000;
pub const PROGRAM_NFS: u32 = 100003;
pub const PROGRAM_MOUNT: u32 = 100005;
pub const PROGRAM_NLM: u32 = 100021;
/// XNFS: the network status monitor (NSM, statd).
pub const PROGRAM_NSM: u32 = 100024;
/// RFC 8881 18.36: the NFSv4.1 callback program.
pub const PROGRAM_NFS4_CB: u32 = 0x4000_0000;

xdr_enum! {
    /// RFC 5531 section 9: msg_type.
    pub enum MsgType {
        Call = 0,
        Reply = 1,
    }
}

xdr_enum! {
    /// RFC 5531 section 9: reply_stat.
    pub enum ReplyStat {
        MsgAccepted = 0,
        MsgDenied = 1,
    }
}

xdr_enum! {
    /// RFC 5531 section 9: accept_stat.
    pub enum AcceptStat {
        Success = 0,
        ProgUnavail = 1,
        ProgMismatch = 2,
        ProcUnavail = 3,
        GarbageArgs = 4,
        SystemErr = 5,
    }
}

xdr_enum! {
    /// RFC 5531 section 9: reject_stat.
    pub enum RejectStat {
        RpcMismatch = 0,
        AuthError = 1,
    }
}

xdr_enum! {
    /// RFC 5531 section 9: auth_stat (with the RPCSEC_GSS values of RFC 2203).
    pub enum AuthStat {
        Ok = 0,
        BadCred = 1,
        RejectedCred = 2,
        BadVerf = 3,
        RejectedVerf = 4,
        TooWeak = 5,
        InvalidResp = 6,
        Failed = 7,
        KerbGeneric = 8,
        TimeExpire = 9,
        TktFile = 10,
        Decode = 11,
        NetAddr = 12,
        RpcsecGssCredProblem = 13,
        RpcsecGssCtxProblem = 14,
    }
}

/// RFC 5531 section 8.2 / appendix A: auth_flavor numbers.
pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;
pub const AUTH_SHORT: u32 = 2;
pub const AUTH_DH: u32 = 3;
pub const RPCSEC_GSS: u32 = 6;

/// RFC 5531 section 8.2: opaque_auth, a flavour and up to 400 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpaqueAuth<'a> {
    pub flavor: u32,
    pub body: &'a [u8],
}

impl<'a> OpaqueAuth<'a> {
    /// AUTH_NONE with an empty body (RFC 5531 appendix A), the usual verifier.
    pub const NONE: OpaqueAuth<'static> = OpaqueAuth {
        flavor: AUTH_NONE,
        body: &[],
    };
}

impl<'a> XdrDecode<'a> for OpaqueAuth<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let flavor = r.get_u32()?;
        let body = r.get_opaque(MAX_AUTH_BYTES, "opaque_auth body")?;
        Ok(OpaqueAuth { flavor, body })
    }
}
impl XdrEncode for OpaqueAuth<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_u32(self.flavor);
        w.put_opaque(self.body);
    }
}

/// RFC 5531 appendix A: authsys_parms, the body of an AUTH_SYS credential.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSysParms<'a> {
    pub stamp: u32,
    /// `string machinename<255>`.
    pub machine_name: Opaque<'a, AUTH_SYS_MAX_MACHINE_NAME>,
    pub uid: u32,
    pub gid: u32,
    /// `unsigned int gids<16>`.
    pub gids: Vec<u32>,
}

impl<'a> XdrDecode<'a> for AuthSysParms<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(AuthSysParms {
            stamp: r.get_u32()?,
            machine_name: Opaque(r.get_string(AUTH_SYS_MAX_MACHINE_NAME, "machinename")?),
            uid: r.get_u32()?,
            gid: r.get_u32()?,
            gids: r.get_array(AUTH_SYS_MAX_GIDS, "gids", |r| r.get_u32())?,
        })
    }
}
impl XdrEncode for AuthSysParms<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_u32(self.stamp);
        w.put_string(self.machine_name.0);
        w.put_u32(self.uid);
        w.put_u32(self.gid);
        w.put_array(&self.gids, |w, g| w.put_u32(*g));
    }
}

/// A credential the server understands, parsed from an [`OpaqueAuth`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential<'a> {
    /// RFC 5531 appendix A: AUTH_NONE.
    None,
    /// RFC 5531 appendix A: AUTH_SYS.
    Sys(AuthSysParms<'a>),
}

impl<'a> Credential<'a> {
    /// Parses a call's credential. The error is the auth_stat for a
    /// MSG_DENIED/AUTH_ERROR reply (RFC 5531 section 9): AUTH_BADCRED for a
    /// malformed body, AUTH_REJECTEDCRED for a flavour duet does not take
    /// (so the client may retry with another).
    pub fn parse(cred: &OpaqueAuth<'a>) -> Result<Self, AuthStat> {
        match cred.flavor {
            AUTH_NONE => Ok(Credential::None),
            AUTH_SYS => {
                let mut r = XdrReader::new(cred.body);
                let parms = AuthSysParms::decode(&mut r).map_err(|_| AuthStat::BadCred)?;
                r.finish().map_err(|_| AuthStat::BadCred)?;
                Ok(Credential::Sys(parms))
            }
            _ => Err(AuthStat::RejectedCred),
        }
    }
}

/// RFC 5531 section 9: the header of a call, `xid` + CALL + call_body up to
/// the procedure's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallBody<'a> {
    pub xid: u32,
    /// Must be [`RPC_VERSION`]; the server answers anything else with
    /// MSG_DENIED/RPC_MISMATCH. Decoding does not reject it so that the xid
    /// is known for that reply.
    pub rpcvers: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: OpaqueAuth<'a>,
    pub verf: OpaqueAuth<'a>,
}

xdr_struct! {
    /// RFC 5531 section 9: low and high version in PROG_MISMATCH and
    /// RPC_MISMATCH.
    pub struct MismatchInfo {
        pub low: u32,
        pub high: u32,
    }
}

/// RFC 5531 section 9: accepted_reply.reply_data, without the SUCCESS
/// results, which follow as the procedure's own encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptedReplyData {
    Success,
    ProgUnavail,
    ProgMismatch(MismatchInfo),
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

impl AcceptedReplyData {
    pub fn stat(&self) -> AcceptStat {
        match self {
            AcceptedReplyData::Success => AcceptStat::Success,
            AcceptedReplyData::ProgUnavail => AcceptStat::ProgUnavail,
            AcceptedReplyData::ProgMismatch(_) => AcceptStat::ProgMismatch,
            AcceptedReplyData::ProcUnavail => AcceptStat::ProcUnavail,
            AcceptedReplyData::GarbageArgs => AcceptStat::GarbageArgs,
            AcceptedReplyData::SystemErr => AcceptStat::SystemErr,
        }
    }
}

/// RFC 5531 section 9: rejected_reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectedReply {
    RpcMismatch(MismatchInfo),
    AuthError(AuthStat),
}

/// RFC 5531 section 9: reply_body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyBody<'a> {
    Accepted {
        verf: OpaqueAuth<'a>,
        data: AcceptedReplyData,
    },
    Denied(RejectedReply),
}

/// RFC 5531 section 9: the header of a reply, `xid` + REPLY + reply_body up
/// to the procedure's results (present only for accepted SUCCESS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader<'a> {
    pub xid: u32,
    pub body: ReplyBody<'a>,
}

impl<'a> ReplyHeader<'a> {
    /// An accepted SUCCESS reply with an AUTH_NONE verifier; the results go
    /// after it.
    pub fn success(xid: u32) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Accepted {
                verf: OpaqueAuth::NONE,
                data: AcceptedReplyData::Success,
            },
        }
    }

    /// An accepted reply with a non-SUCCESS accept_stat.
    pub fn accepted(xid: u32, data: AcceptedReplyData) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Accepted {
                verf: OpaqueAuth::NONE,
                data,
            },
        }
    }

    /// A MSG_DENIED reply.
    pub fn denied(xid: u32, rejected: RejectedReply) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Denied(rejected),
        }
    }
}

/// An RPC message header: a call or a reply (RFC 5531 section 9, rpc_msg).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpcMessage<'a> {
    Call(CallBody<'a>),
    Reply(ReplyHeader<'a>),
}

impl<'a> RpcMessage<'a> {
    pub fn xid(&self) -> u32 {
        match self {
            RpcMessage::Call(c) => c.xid,
            RpcMessage::Reply(r) => r.xid,
        }
    }
}

impl<'a> XdrDecode<'a> for RpcMessage<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let xid = r.get_u32()?;
        match MsgType::decode(r)? {
            MsgType::Call => Ok(RpcMessage::Call(CallBody::decode_after_xid(xid, r)?)),
            MsgType::Reply => Ok(RpcMessage::Reply(ReplyHeader::decode_after_xid(xid, r)?)),
        }
    }
}
impl XdrEncode for RpcMessage<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            RpcMessage::Call(c) => c.encode(w),
            RpcMessage::Reply(r) => r.encode(w),
        }
    }
}

impl<'a> CallBody<'a> {
    fn decode_after_xid(xid: u32, r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(CallBody {
            xid,
            rpcvers: r.get_u32()?,
            prog: r.get_u32()?,
            vers: r.get_u32()?,
            proc_: r.get_u32()?,
            cred: OpaqueAuth::decode(r)?,
            verf: OpaqueAuth::decode(r)?,
        })
    }
}

impl<'a> XdrDecode<'a> for CallBody<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let xid = r.get_u32()?;
        match MsgType::decode(r)? {
            MsgType::Call => CallBody::decode_after_xid(xid, r),
            MsgType::Reply => Err(XdrError::BadDiscriminant {
                what: "msg_type (expected CALL)",
                value: 1,
            }),
        }
    }
}
impl XdrEncode for CallBody<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_u32(self.xid);
        MsgType::Call.encode(w);
        w.put_u32(self.rpcvers);
        w.put_u32(self.prog);
        w.put_u32(self.vers);
        w.put_u32(self.proc_);
        self.cred.encode(w);
        self.verf.encode(w);
    }
}

impl<'a> ReplyHeader<'a> {
    fn decode_after_xid(xid: u32, r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let body = match ReplyStat::decode(r)? {
            ReplyStat::MsgAccepted => {
                let verf = OpaqueAuth::decode(r)?;
                let data = match AcceptStat::decode(r)? {
                    AcceptStat::Success => AcceptedReplyData::Success,
                    AcceptStat::ProgUnavail => AcceptedReplyData::ProgUnavail,
                    AcceptStat::ProgMismatch => {
                        AcceptedReplyData::ProgMismatch(MismatchInfo::decode(r)?)
                    }
                    AcceptStat::ProcUnavail => AcceptedReplyData::ProcUnavail,
                    AcceptStat::GarbageArgs => AcceptedReplyData::GarbageArgs,
                    AcceptStat::SystemErr => AcceptedReplyData::SystemErr,
                };
                ReplyBody::Accepted { verf, data }
            }
            ReplyStat::MsgDenied => ReplyBody::Denied(match RejectStat::decode(r)? {
                RejectStat::RpcMismatch => RejectedReply::RpcMismatch(MismatchInfo::decode(r)?),
                RejectStat::AuthError => RejectedReply::AuthError(AuthStat::decode(r)?),
            }),
        };
        Ok(ReplyHeader { xid, body })
    }
}

impl<'a> XdrDecode<'a> for ReplyHeader<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let xid = r.get_u32()?;
        match MsgType::decode(r)? {
            MsgType::Reply => ReplyHeader::decode_after_xid(xid, r),
            MsgType::Call => Err(XdrError::BadDiscriminant {
                what: "msg_type (expected REPLY)",
                value: 0,
            }),
        }
    }
}
impl XdrEncode for ReplyHeader<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_u32(self.xid);
        MsgType::Reply.encode(w);
        match &self.body {
            ReplyBody::Accepted { verf, data } => {
                ReplyStat::MsgAccepted.encode(w);
                verf.encode(w);
                data.stat().encode(w);
                if let AcceptedReplyData::ProgMismatch(m) = data {
                    m.encode(w);
                }
            }
            ReplyBody::Denied(rejected) => {
                ReplyStat::MsgDenied.encode(w);
                match rejected {
                    RejectedReply::RpcMismatch(m) => {
                        RejectStat::RpcMismatch.encode(w);
                        m.encode(w);
                    }
                    RejectedReply::AuthError(stat) => {
                        RejectStat::AuthError.encode(w);
                        stat.encode(w);
                    }
                }
            }
        }
    }
}

/// RFC 5531 section 11: the last-fragment bit of a record-marking header.
pub const LAST_FRAGMENT: u32 = 0x8000_0000;
/// RFC 5531 section 11: the largest fragment length a header can carry.
pub const MAX_FRAGMENT_LEN: u32 = 0x7fff_ffff;

/// Why a byte stream of records (RFC 5531 section 11) is unusable. After
/// any of these the connection must be closed: the framing is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// The record would exceed the configured maximum size.
    RecordTooLarge { len: u64, max: usize },
    /// The record has more fragments than the configured maximum.
    TooManyFragments { max: u32 },
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::RecordTooLarge { len, max } => {
                write!(f, "rpc record of at least {len} bytes exceeds {max}")
            }
            RecordError::TooManyFragments { max } => {
                write!(f, "rpc record has more than {max} fragments")
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// Reassembles RPC records from a byte stream (RFC 5531 section 11, record
/// marking), sans-I/O: feed it whatever the socket gave with
/// [`RecordAssembler::push`], take whole records with
/// [`RecordAssembler::take_record`].
///
/// At most one complete record is held at a time: `push` stops consuming
/// at the end of a record, so memory is bounded by `max_record_len`.
#[derive(Debug)]
pub struct RecordAssembler {
    max_record_len: usize,
    max_fragments: u32,
    header: [u8; 4],
    header_len: usize,
    /// Bytes still to read in the current fragment; None while reading a header.
    fragment_left: Option<usize>,
    fragment_is_last: bool,
    fragments: u32,
    record: Vec<u8>,
    complete: bool,
}

impl RecordAssembler {
    /// `max_record_len` bounds the reassembled record (duet takes at least
    /// 1 MiB of payload plus headers); `max_fragments` bounds how many
    /// fragments one record may use, so that empty fragments cannot spin.
    pub fn new(max_record_len: usize, max_fragments: u32) -> Self {
        RecordAssembler {
            max_record_len,
            max_fragments: max_fragments.max(1),
            header: [0; 4],
            header_len: 0,
            fragment_left: None,
            fragment_is_last: false,
            fragments: 0,
            record: Vec::new(),
            complete: false,
        }
    }

    /// Consumes bytes from `input` up to the end of the next complete
    /// record, and returns how many it consumed. If a record is complete
    /// (see [`Self::take_record`]) it consumes nothing more until the
    /// record is taken.
    pub fn push(&mut self, input: &[u8]) -> Result<usize, RecordError> {
        let mut used = 0;
        while !self.complete {
            let rest = input.get(used..).unwrap_or(&[]);
            match self.fragment_left {
                None => {
                    if rest.is_empty() {
                        break;
                    }
                    // header_len < 4 between headers and n <= 4 - header_len,
                    // n <= rest.len(): both slices below are in bounds.
                    let want = 4 - self.header_len;
                    let n = want.min(rest.len());
                    self.header[self.header_len..self.header_len + n].copy_from_slice(&rest[..n]);
                    self.header_len += n;
                    used += n;
                    if self.header_len == 4 {
                        self.header_len = 0;
                        self.start_fragment(u32::from_be_bytes(self.header))?;
                    }
                }
                Some(0) => {
                    self.fragment_left = None;
                    if self.fragment_is_last {
                        self.complete = true;
                    }
                }
                Some(left) => {
                    if rest.is_empty() {
                        break;
                    }
                    // n <= rest.len() by construction.
                    let n = left.min(rest.len());
                    self.record.extend_from_slice(&rest[..n]);
                    used += n;
                    self.fragment_left = Some(left - n);
                }
            }
        }
        Ok(used)
    }

    fn start_fragment(&mut self, header: u32) -> Result<(), RecordError> {
        self.fragments += 1;
        if self.fragments > self.max_fragments {
            return Err(RecordError::TooManyFragments {
                max: self.max_fragments,
            });
        }
        let len = (header & MAX_FRAGMENT_LEN) as usize;
        let total = self.record.len() as u64 + len as u64;
        if total > self.max_record_len as u64 {
            return Err(RecordError::RecordTooLarge {
                len: total,
                max: self.max_record_len,
            });
        }
        self.record.reserve(len);
        self.fragment_left = Some(len);
        self.fragment_is_last = header & LAST_FRAGMENT != 0;
        Ok(())
    }

    /// Takes the completed record, if there is one.
    pub fn take_record(&mut self) -> Option<Vec<u8>> {
        if !self.complete {
            return None;
        }
        self.complete = false;
        self.fragments = 0;
        self.fragment_is_last = false;
        Some(std::mem::take(&mut self.record))
    }

    /// True between records: no partial header or fragment is buffered.
    pub fn is_idle(&self) -> bool {
        !self.complete
            && self.header_len == 0
            && self.fragment_left.is_none()
            && self.record.is_empty()
    }
}

/// Frames `payload` as one record in as few fragments as possible
/// (RFC 5531 section 11), appending to `out`.
pub fn write_record(payload: &[u8], out: &mut Vec<u8>) {
    let mut chunks = payload.chunks(MAX_FRAGMENT_LEN as usize).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&LAST_FRAGMENT.to_be_bytes());
        return;
    }
    while let Some(chunk) = chunks.next() {
        let last = if chunks.peek().is_none() {
            LAST_FRAGMENT
        } else {
            0
        };
        // chunks() bounds each chunk by MAX_FRAGMENT_LEN, so the cast is exact.
        out.extend_from_slice(&(last | chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
}

/// Starts a record inside an [`XdrWriter`]: reserves the record-marking
/// header, to be completed by [`end_record`] once the message is encoded,
/// so a reply is framed without a second copy.
pub fn begin_record(w: &mut XdrWriter) -> usize {
    w.reserve_u32()
}

/// Completes a record started by [`begin_record`] as a single last
/// fragment. The message must be under 2 GiB, which duet's bounds ensure.
pub fn end_record(w: &mut XdrWriter, at: usize) {
    let len = w.len().saturating_sub(at + 4);
    let len = (len as u32) & MAX_FRAGMENT_LEN;
    w.patch_u32(at, LAST_FRAGMENT | len);
}

impl Copy for MismatchInfo {}
