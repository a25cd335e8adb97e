//! The payloads of `FrameKind::Admin` and `FrameKind::Status` frames
//! ([`crate::peer_wire`]), issue 12. Sans-I/O: bytes in, messages out.
//!
//! **Admin** (a mutating admin API request a follower forwards to the
//! leader, and the leader's reply):
//!
//! ```text
//! version u8 (ADMIN_V1) | tag u8 | id varint | body
//! ```
//!
//! - `TAG_REQUEST`: `who` string (the caller the follower authenticated,
//!   for the leader's audit log) | method string | target string | body
//!   bytes. The request's headers (its credentials among them) are not
//!   sent: the follower checked them; the peer link is authenticated by
//!   the cluster secret.
//! - `TAG_REPLY`: an outcome tag, then
//!   - `OUT_RESPONSE`: audit text string ("ok" or "code: message") | the
//!     HTTP/1.1 response bytes, returned to the caller verbatim;
//!   - `OUT_NOT_LEADER`: the leader id the node asked knows (0 = none):
//!     nothing was done, the follower may route it again;
//!   - `OUT_BUSY`: nothing (the leader's queue was full; nothing done).
//!
//! **Status** (each node's progress, sent to every peer every
//! `STATUS_EVERY` of the transport): `version u8 (STATUS_V3) | applied
//! varint | term varint | commit varint | last_index varint |
//! destaged_upto varint | destage_queue varint` (the sender's last raft
//! log index, its destage progress and the data records it has queued
//! and not destaged; version 2, without the last two, and version 1,
//! without the last three, are still read).
//!
//! Strings and bytes are a varint length then the bytes (`crate::wire`).
//! Decoding never panics: truncated, trailing, unknown-tag, over-limit or
//! otherwise malformed input is an error and the caller drops the message.

use crate::wire::{Reader, WireError, Writer};

/// The only version of the admin payload this code speaks.
pub const ADMIN_V1: u8 = 1;
/// The status payload without the last log index (still read).
pub const STATUS_V1: u8 = 1;
/// The status payload without the destage progress (still read).
pub const STATUS_V2: u8 = 2;
/// The version of the status payload this code writes.
pub const STATUS_V3: u8 = 3;

const TAG_REQUEST: u8 = 1;
const TAG_REPLY: u8 = 2;

const OUT_RESPONSE: u8 = 1;
const OUT_NOT_LEADER: u8 = 2;
const OUT_BUSY: u8 = 3;

/// Longest HTTP method accepted.
pub const METHOD_MAX: usize = 16;
/// Longest request target (the admin API's request head is 16 KiB).
pub const TARGET_MAX: usize = 16 * 1024;
/// Longest request body (the admin API's own limit).
pub const BODY_MAX: usize = 1024 * 1024;
/// Longest caller name or audit text.
pub const TEXT_MAX: usize = 1024;
/// Longest response (the admin client's own limit, plus a head).
pub const RESPONSE_MAX: usize = 64 * 1024 * 1024 + 16 * 1024;

/// A forwarded admin request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminRequestMsg {
    pub who: String,
    pub method: String,
    pub target: String,
    pub body: Vec<u8>,
}

/// What the leader did with a forwarded admin request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminOutcome {
    /// It ran: the audit text and the HTTP response to return verbatim.
    Response { audit: String, http: Vec<u8> },
    /// The node asked does not lead (nothing was done).
    NotLeader { leader: Option<u64> },
    /// Its queue was full (nothing was done).
    Busy,
}

/// One `FrameKind::Admin` message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminMsg {
    Request { id: u64, request: AdminRequestMsg },
    Reply { id: u64, outcome: AdminOutcome },
}

/// One `FrameKind::Status` message: the sender's raft progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NodeStatus {
    pub applied: u64,
    pub term: u64,
    pub commit: u64,
    /// The sender's last raft log index (`None` from a node that sends
    /// version 1): a follower bounds what its leader may still commit by
    /// it (`duet_cache::replica::Unclaimed`).
    pub last_index: Option<u64>,
    /// The sender's destage progress (every data record up to it is in
    /// its chunk store) and how many data records it has applied and not
    /// destaged (`None` from a node that sends version 1 or 2): a leader
    /// does not send an image the follower would refuse for dropping its
    /// copies, and `duetctl cluster status` shows each node's queue.
    pub destage: Option<Destage>,
}

/// A node's destage progress, as its status frames carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Destage {
    pub upto: u64,
    pub queue: u64,
}

/// Why an admin or status payload was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminWireError {
    #[error("empty message")]
    Empty,
    #[error("message of version {0} (this node speaks 1)")]
    Version(u8),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("{what} of {len} bytes is over the limit of {max}")]
    TooLong { what: &'static str, len: usize, max: usize },
}

fn cut(text: &str) -> &str {
    if text.len() <= TEXT_MAX {
        return text;
    }
    let mut end = TEXT_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Encodes a request. The caller keeps method, target and body within
/// their limits (the admin API's parser does); longer is refused by the
/// decoder.
pub fn encode_request(id: u64, req: &AdminRequestMsg) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(ADMIN_V1);
    w.u8(TAG_REQUEST);
    w.u64(id);
    w.str(cut(&req.who));
    w.str(&req.method);
    w.str(&req.target);
    w.bytes(&req.body);
    w.buf
}

pub fn encode_reply(id: u64, outcome: &AdminOutcome) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(ADMIN_V1);
    w.u8(TAG_REPLY);
    w.u64(id);
    match outcome {
        AdminOutcome::Response { audit, http } => {
            w.u8(OUT_RESPONSE);
            w.str(cut(audit));
            w.bytes(http);
        }
        AdminOutcome::NotLeader { leader } => {
            w.u8(OUT_NOT_LEADER);
            w.u64(leader.unwrap_or(0));
        }
        AdminOutcome::Busy => w.u8(OUT_BUSY),
    }
    w.buf
}

fn limited(v: Vec<u8>, what: &'static str, max: usize) -> Result<Vec<u8>, AdminWireError> {
    if v.len() > max {
        return Err(AdminWireError::TooLong { what, len: v.len(), max });
    }
    Ok(v)
}

fn limited_str(v: String, what: &'static str, max: usize) -> Result<String, AdminWireError> {
    if v.len() > max {
        return Err(AdminWireError::TooLong { what, len: v.len(), max });
    }
    Ok(v)
}

/// Decodes an admin message; every byte must belong to it.
pub fn decode(b: &[u8]) -> Result<AdminMsg, AdminWireError> {
    let Some(&v) = b.first() else { return Err(AdminWireError::Empty) };
    if v != ADMIN_V1 {
        return Err(AdminWireError::Version(v));
    }
    let mut r = Reader::new(b);
    r.u8("version")?;
    let tag = r.tag("admin message")?;
    let id = r.u64("request id")?;
    let msg = match tag {
        TAG_REQUEST => {
            let who = limited_str(r.string("caller")?, "caller", TEXT_MAX)?;
            let method = limited_str(r.string("method")?, "method", METHOD_MAX)?;
            let target = limited_str(r.string("target")?, "target", TARGET_MAX)?;
            let body = limited(r.bytes("body")?, "body", BODY_MAX)?;
            AdminMsg::Request { id, request: AdminRequestMsg { who, method, target, body } }
        }
        TAG_REPLY => {
            let outcome = match r.tag("admin outcome")? {
                OUT_RESPONSE => {
                    let audit = limited_str(r.string("audit text")?, "audit text", TEXT_MAX)?;
                    let http = limited(r.bytes("response")?, "response", RESPONSE_MAX)?;
                    AdminOutcome::Response { audit, http }
                }
                OUT_NOT_LEADER => {
                    let l = r.u64("leader")?;
                    AdminOutcome::NotLeader { leader: (l != 0).then_some(l) }
                }
                OUT_BUSY => AdminOutcome::Busy,
                t => return r.unknown("admin outcome", t).map_err(Into::into),
            };
            AdminMsg::Reply { id, outcome }
        }
        t => return r.unknown("admin message", t).map_err(Into::into),
    };
    r.finish()?;
    Ok(msg)
}

pub fn encode_status(s: &NodeStatus) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(STATUS_V3);
    w.u64(s.applied);
    w.u64(s.term);
    w.u64(s.commit);
    // Written as version 3 only, with every field (a status always has
    // them from this code; the type keeps what an older sender left out).
    w.u64(s.last_index.unwrap_or(s.commit));
    let d = s.destage.unwrap_or_default();
    w.u64(d.upto);
    w.u64(d.queue);
    w.buf
}

/// Decodes a status message; every byte must belong to it.
pub fn decode_status(b: &[u8]) -> Result<NodeStatus, AdminWireError> {
    let Some(&v) = b.first() else { return Err(AdminWireError::Empty) };
    if !(STATUS_V1..=STATUS_V3).contains(&v) {
        return Err(AdminWireError::Version(v));
    }
    let mut r = Reader::new(b);
    r.u8("version")?;
    let mut s = NodeStatus {
        applied: r.u64("applied")?,
        term: r.u64("term")?,
        commit: r.u64("commit")?,
        last_index: None,
        destage: None,
    };
    if v >= STATUS_V2 {
        s.last_index = Some(r.u64("last_index")?);
    }
    if v >= STATUS_V3 {
        s.destage = Some(Destage { upto: r.u64("destaged_upto")?, queue: r.u64("destage_queue")? });
    }
    r.finish()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> AdminRequestMsg {
        AdminRequestMsg {
            who: "admin".into(),
            method: "POST".into(),
            target: "/v1/shares".into(),
            body: br#"{"name":"projects","path":"/projects"}"#.to_vec(),
        }
    }

    fn outcomes() -> Vec<AdminOutcome> {
        vec![
            AdminOutcome::Response { audit: "ok".into(), http: b"HTTP/1.1 201 Created\r\n\r\n{}".to_vec() },
            AdminOutcome::Response { audit: String::new(), http: Vec::new() },
            AdminOutcome::NotLeader { leader: Some(2) },
            AdminOutcome::NotLeader { leader: None },
            AdminOutcome::Busy,
        ]
    }

    fn all() -> Vec<Vec<u8>> {
        let mut v = vec![encode_request(u64::MAX, &request())];
        v.extend(outcomes().iter().map(|o| encode_reply(9, o)));
        v
    }

    #[test]
    fn round_trips() {
        let enc = encode_request(u64::MAX, &request());
        assert_eq!(decode(&enc).unwrap(), AdminMsg::Request { id: u64::MAX, request: request() });
        for o in outcomes() {
            assert_eq!(decode(&encode_reply(9, &o)).unwrap(), AdminMsg::Reply { id: 9, outcome: o });
        }
        let s = NodeStatus {
            applied: 812,
            term: 3,
            commit: u64::MAX,
            last_index: Some(815),
            destage: Some(Destage { upto: 700, queue: u64::MAX }),
        };
        assert_eq!(decode_status(&encode_status(&s)).unwrap(), s);
        // Version 1 (no last index) and version 2 (no destage progress)
        // are still read.
        let mut w = Writer::new();
        w.u8(STATUS_V1);
        w.u64(812);
        w.u64(3);
        w.u64(810);
        assert_eq!(
            decode_status(&w.buf).unwrap(),
            NodeStatus { applied: 812, term: 3, commit: 810, last_index: None, destage: None }
        );
        w.buf[0] = STATUS_V2;
        w.u64(811);
        assert_eq!(
            decode_status(&w.buf).unwrap(),
            NodeStatus { applied: 812, term: 3, commit: 810, last_index: Some(811), destage: None }
        );
        // A version-2 payload with the fields of version 3 after it: trailing bytes.
        let mut v2 = encode_status(&s);
        v2[0] = STATUS_V2;
        assert!(decode_status(&v2).is_err());
        let mut v4 = encode_status(&s);
        v4[0] = 4;
        assert!(matches!(decode_status(&v4), Err(AdminWireError::Version(4))));
    }

    #[test]
    fn every_truncation_and_trailing_byte_is_refused() {
        let mut msgs = all();
        msgs.push(encode_status(&NodeStatus {
            applied: 1 << 40,
            term: 7,
            commit: 300,
            last_index: Some(301),
            destage: Some(Destage { upto: 1 << 33, queue: 12 }),
        }));
        for (i, enc) in msgs.iter().enumerate() {
            let is_status = i == msgs.len() - 1;
            let dec = |b: &[u8]| if is_status { decode_status(b).is_ok() } else { decode(b).is_ok() };
            assert!(dec(enc));
            for n in 0..enc.len() {
                assert!(!dec(&enc[..n]), "a prefix of {n} of {} bytes decoded", enc.len());
            }
            let mut long = enc.clone();
            long.push(0);
            assert!(!dec(&long), "a trailing byte was accepted");
        }
    }

    #[test]
    fn versions_tags_and_limits_are_checked() {
        let mut enc = encode_request(1, &request());
        enc[0] = 2;
        assert!(matches!(decode(&enc), Err(AdminWireError::Version(2))));
        let mut enc = encode_request(1, &request());
        enc[1] = 7;
        assert!(matches!(decode(&enc), Err(AdminWireError::Wire(WireError::UnknownTag { .. }))));
        let mut enc = encode_reply(1, &AdminOutcome::Busy);
        *enc.last_mut().unwrap() = 77;
        assert!(matches!(decode(&enc), Err(AdminWireError::Wire(WireError::UnknownTag { .. }))));
        assert!(matches!(decode(&[]), Err(AdminWireError::Empty)));
        assert!(matches!(decode_status(&[]), Err(AdminWireError::Empty)));
        assert!(matches!(decode_status(&[9, 1, 1, 1]), Err(AdminWireError::Version(9))));
        let long = AdminRequestMsg { method: "X".repeat(METHOD_MAX + 1), ..request() };
        assert!(matches!(decode(&encode_request(1, &long)), Err(AdminWireError::TooLong { what: "method", .. })));
        let big = AdminRequestMsg { body: vec![b'a'; BODY_MAX + 1], ..request() };
        assert!(matches!(decode(&encode_request(1, &big)), Err(AdminWireError::TooLong { what: "body", .. })));
        // A length past the input is refused, not allocated.
        let mut w = Writer::new();
        w.u8(ADMIN_V1);
        w.u8(TAG_REPLY);
        w.u64(1);
        w.u8(OUT_RESPONSE);
        w.str("ok");
        w.u64(u64::MAX);
        assert!(decode(&w.buf).is_err());
        // Invalid UTF-8 in a string.
        let mut w = Writer::new();
        w.u8(ADMIN_V1);
        w.u8(TAG_REQUEST);
        w.u64(1);
        w.bytes(&[0xff, 0xfe]);
        assert!(decode(&w.buf).is_err());
    }

    #[test]
    fn long_texts_are_cut() {
        let long = "é".repeat(TEXT_MAX);
        let enc = encode_reply(1, &AdminOutcome::Response { audit: long, http: vec![] });
        let AdminMsg::Reply { outcome: AdminOutcome::Response { audit, .. }, .. } = decode(&enc).unwrap() else { panic!() };
        assert!(audit.len() <= TEXT_MAX && audit.len() >= TEXT_MAX - 1);
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds = all();
        for _ in 0..20_000 {
            let len = (next() % 120) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(f) = b.first_mut() {
                *f = ADMIN_V1;
            }
            let _ = decode(&b);
            let _ = decode_status(&b);
            for s in &seeds {
                let mut m = s.clone();
                let i = (next() % m.len() as u64) as usize;
                m[i] ^= (next() as u8) | 1;
                let _ = decode(&m);
            }
        }
    }
}
