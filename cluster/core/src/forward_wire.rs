//! The payload of `FrameKind::Forward` frames ([`crate::peer_wire`]): a
//! client batch a follower forwards to the leader, and the leader's reply.
//! Sans-I/O: bytes in, messages out.
//!
//! Layout (every message):
//!
//! ```text
//! version u8 (FORWARD_V1) | tag u8 | id varint | body
//! ```
//!
//! - `TAG_REQUEST`: body = the batch as a raft command
//!   ([`crate::command::encode_command`] of `Command::Batch`: the
//!   explicit, versioned command format; any other command is refused).
//! - `TAG_REPLY`: body = an outcome tag, then
//!   - `OUT_DONE`: the [`BatchResult`], bincode (transient RPC only, never
//!     persisted; strict: no trailing bytes, no length past the input);
//!   - `OUT_NOT_LEADER`: an optional leader id (0 = none known);
//!   - `OUT_BUSY`: nothing (the leader did not run the batch);
//!   - `OUT_FAILED`: a UTF-8 text (the batch failed on the leader; it was
//!     not applied, or failed the way a local batch fails);
//!   - `OUT_UNAVAILABLE`: a UTF-8 text (the leader could not learn the
//!     batch's outcome in time: it may still commit).
//!
//! Decoding never panics: truncated, trailing, unknown-tag or otherwise
//! malformed input is an error, and the caller drops the message.

use duet_fs::{Batch, BatchResult};

use crate::command::{decode_command, encode_command};
use crate::records::Command;
use crate::wire::{Reader, WireError, Writer};

/// The only version this code speaks.
pub const FORWARD_V1: u8 = 1;

const TAG_REQUEST: u8 = 1;
const TAG_REPLY: u8 = 2;

const OUT_DONE: u8 = 1;
const OUT_NOT_LEADER: u8 = 2;
const OUT_BUSY: u8 = 3;
const OUT_FAILED: u8 = 4;
const OUT_UNAVAILABLE: u8 = 5;

/// The longest error text a reply carries (longer is cut).
pub const TEXT_MAX: usize = 1024;

/// What the leader did with a forwarded batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForwardOutcome {
    /// It ran: the batch's result, exactly as a local client gets it.
    Done(BatchResult),
    /// The node asked is not the leader (nothing was proposed): send it to
    /// `leader`, or wait for an election when `None`.
    NotLeader { leader: Option<u64> },
    /// The leader's queue for forwarded batches was full: not run, retry.
    Busy,
    /// The batch failed on the leader (an engine error, as a local batch
    /// would fail): the client gets an I/O error.
    Failed(String),
    /// The leader could not learn the outcome (the proposal may still
    /// commit): the client gets a retryable error, never a silent re-run.
    Unavailable(String),
}

/// One `FrameKind::Forward` message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForwardMsg {
    Request { id: u64, batch: Batch },
    Reply { id: u64, outcome: ForwardOutcome },
}

/// Why a forward payload was refused.
#[derive(Debug, thiserror::Error)]
pub enum ForwardWireError {
    #[error("empty forward message")]
    Empty,
    #[error("forward message of version {0} (this node speaks {FORWARD_V1})")]
    Version(u8),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("forwarded request: {0}")]
    Command(String),
    #[error("forwarded request holds a command that is not a batch")]
    NotBatch,
    #[error("forwarded result: {0}")]
    Result(String),
}

fn bincode_opts() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new().with_fixint_encoding().with_little_endian().reject_trailing_bytes()
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

/// Encodes a request: a batch to run on the leader. Cannot fail.
pub fn encode_request(id: u64, batch: &Batch) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(FORWARD_V1);
    w.u8(TAG_REQUEST);
    w.u64(id);
    // Moving the batch into a command costs a clone; the command codec
    // takes only a whole command.
    w.raw(&encode_command(&Command::Batch(batch.clone())));
    w.buf
}

/// Encodes a reply. Cannot fail (a result bincode cannot encode, which the
/// types do not allow, becomes `Failed`).
pub fn encode_reply(id: u64, outcome: &ForwardOutcome) -> Vec<u8> {
    use bincode::Options;
    let mut w = Writer::new();
    w.u8(FORWARD_V1);
    w.u8(TAG_REPLY);
    w.u64(id);
    match outcome {
        ForwardOutcome::Done(result) => match bincode_opts().serialize(result) {
            Ok(b) => {
                w.u8(OUT_DONE);
                w.raw(&b);
            }
            Err(e) => {
                w.u8(OUT_FAILED);
                w.str(cut(&format!("cannot encode the result: {e}")));
            }
        },
        ForwardOutcome::NotLeader { leader } => {
            w.u8(OUT_NOT_LEADER);
            w.u64(leader.unwrap_or(0));
        }
        ForwardOutcome::Busy => w.u8(OUT_BUSY),
        ForwardOutcome::Failed(t) => {
            w.u8(OUT_FAILED);
            w.str(cut(t));
        }
        ForwardOutcome::Unavailable(t) => {
            w.u8(OUT_UNAVAILABLE);
            w.str(cut(t));
        }
    }
    w.buf
}

/// Decodes a message; every byte must belong to it.
pub fn decode(b: &[u8]) -> Result<ForwardMsg, ForwardWireError> {
    use bincode::Options;
    let Some(&v) = b.first() else { return Err(ForwardWireError::Empty) };
    if v != FORWARD_V1 {
        return Err(ForwardWireError::Version(v));
    }
    let mut r = Reader::new(b);
    r.u8("version")?;
    let tag = r.tag("forward message")?;
    let id = r.u64("request id")?;
    match tag {
        TAG_REQUEST => {
            let body = r.raw(r.remaining(), "batch")?;
            // Only the explicit, versioned format: not the legacy bincode
            // entries the command reader also accepts for old logs.
            if body.first() != encode_command(&Command::Destaged { upto: 0, reclaimed: vec![] }).first() {
                return Err(ForwardWireError::Command("not in the versioned command format".into()));
            }
            match decode_command(body) {
                Ok(Command::Batch(batch)) => Ok(ForwardMsg::Request { id, batch }),
                Ok(_) => Err(ForwardWireError::NotBatch),
                Err(e) => Err(ForwardWireError::Command(e.to_string())),
            }
        }
        TAG_REPLY => {
            let outcome = match r.tag("forward outcome")? {
                OUT_DONE => {
                    let body = r.raw(r.remaining(), "result")?;
                    let result: BatchResult = bincode_opts()
                        .with_limit(body.len() as u64)
                        .deserialize(body)
                        .map_err(|e| ForwardWireError::Result(e.to_string()))?;
                    ForwardOutcome::Done(result)
                }
                OUT_NOT_LEADER => {
                    let l = r.u64("leader")?;
                    ForwardOutcome::NotLeader { leader: (l != 0).then_some(l) }
                }
                OUT_BUSY => ForwardOutcome::Busy,
                OUT_FAILED => ForwardOutcome::Failed(r.string("error text")?),
                OUT_UNAVAILABLE => ForwardOutcome::Unavailable(r.string("error text")?),
                t => return r.unknown("forward outcome", t).map_err(Into::into),
            };
            r.finish()?;
            Ok(ForwardMsg::Reply { id, outcome })
        }
        t => r.unknown("forward message", t).map_err(Into::into),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use duet_fs::{Attrs, BatchCost, Credentials, FileType, FsError, ObjRef, Op, OpOutput, WriteData};

    fn batch() -> Batch {
        let mut b = Batch::new(Credentials { uid: 1000, gid: 100, groups: vec![100, 4] }, 1_700_000_000_000_000_000);
        b.push(Op::Lookup { dir: ObjRef::Id(1), name: "a.txt".into() });
        b.push(Op::Write { obj: ObjRef::Result(0), offset: 7, data: WriteData::Bytes(vec![1, 2, 3, 255]), append: false });
        b.push(Op::Read { obj: ObjRef::Result(0), offset: 0, len: 4096 });
        b
    }

    fn result() -> BatchResult {
        let attrs = Attrs {
            id: 77,
            ftype: FileType::Regular,
            mode: 0o644,
            uid: 1000,
            gid: 100,
            nlink: 1,
            rdev: 0,
            size: 11,
            alloc_size: 4096,
            dos_attrs: 0x20,
            btime: -5,
            atime: 1,
            mtime: 2,
            ctime: 3,
            change: 9,
        };
        BatchResult {
            results: vec![
                Ok(OpOutput::Read { data: b"hello".to_vec(), eof: true, attrs: attrs.clone() }),
                Err(FsError::NotFound),
                Ok(OpOutput::Written { count: 4, offset: 7, before: attrs.clone(), attrs }),
            ],
            cost: BatchCost { proposals: 1, fsyncs: 1, ..Default::default() },
        }
    }

    fn outcomes() -> Vec<ForwardOutcome> {
        vec![
            ForwardOutcome::Done(result()),
            ForwardOutcome::NotLeader { leader: Some(3) },
            ForwardOutcome::NotLeader { leader: None },
            ForwardOutcome::Busy,
            ForwardOutcome::Failed("metadata: rocksdb: boom".into()),
            ForwardOutcome::Unavailable("not committed within 10 s".into()),
        ]
    }

    #[test]
    fn round_trips() {
        let b = batch();
        let enc = encode_request(42, &b);
        assert_eq!(enc[0], FORWARD_V1);
        assert_eq!(decode(&enc).unwrap(), ForwardMsg::Request { id: 42, batch: b });
        for o in outcomes() {
            let enc = encode_reply(u64::MAX, &o);
            assert_eq!(decode(&enc).unwrap(), ForwardMsg::Reply { id: u64::MAX, outcome: o });
        }
    }

    #[test]
    fn a_request_id_travels_with_the_batch() {
        // Exactly-once resend: the leader proposes the batch with the id
        // the follower gave it (command tag 15 inside the payload).
        let mut b = batch();
        b.request = Some(duet_fs::RequestId { origin: 2, epoch: 0xDEAD_BEEF, seq: 9 });
        let enc = encode_request(42, &b);
        assert_eq!(decode(&enc).unwrap(), ForwardMsg::Request { id: 42, batch: b.clone() });
        for n in 0..enc.len() {
            assert!(decode(&enc[..n]).is_err(), "a prefix of {n} of {} bytes decoded", enc.len());
        }
        b.request = None;
        assert!(encode_request(42, &b).len() < enc.len());
    }

    #[test]
    fn every_truncation_is_refused() {
        let mut all = vec![encode_request(7, &batch())];
        all.extend(outcomes().iter().map(|o| encode_reply(7, o)));
        for enc in all {
            for n in 0..enc.len() {
                assert!(decode(&enc[..n]).is_err(), "a prefix of {n} of {} bytes decoded", enc.len());
            }
        }
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut all = vec![encode_request(7, &batch())];
        all.extend(outcomes().iter().map(|o| encode_reply(7, o)));
        for mut enc in all {
            enc.push(0);
            assert!(decode(&enc).is_err());
        }
    }

    #[test]
    fn version_tags_and_commands_are_checked() {
        let mut enc = encode_request(1, &batch());
        enc[0] = 2;
        assert!(matches!(decode(&enc), Err(ForwardWireError::Version(2))));
        let mut enc = encode_request(1, &batch());
        enc[1] = 9;
        assert!(matches!(decode(&enc), Err(ForwardWireError::Wire(WireError::UnknownTag { .. }))));
        let mut enc = encode_reply(1, &ForwardOutcome::Busy);
        *enc.last_mut().unwrap() = 77;
        assert!(matches!(decode(&enc), Err(ForwardWireError::Wire(WireError::UnknownTag { .. }))));
        // A command that is not a batch.
        let mut w = Writer::new();
        w.u8(FORWARD_V1);
        w.u8(TAG_REQUEST);
        w.u64(1);
        w.raw(&encode_command(&Command::Destaged { upto: 5, reclaimed: vec![] }));
        assert!(matches!(decode(&w.buf), Err(ForwardWireError::NotBatch)));
        // A legacy (bincode) command is not accepted here.
        let mut w = Writer::new();
        w.u8(FORWARD_V1);
        w.u8(TAG_REQUEST);
        w.u64(1);
        w.raw(&[1, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(decode(&w.buf), Err(ForwardWireError::Command(_))));
        assert!(matches!(decode(&[]), Err(ForwardWireError::Empty)));
    }

    #[test]
    fn garbage_never_panics() {
        // A small deterministic generator (no clock, no OS randomness).
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds = [encode_request(3, &batch()), encode_reply(3, &ForwardOutcome::Done(result()))];
        for _ in 0..20_000 {
            let len = (next() % 200) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(f) = b.first_mut() {
                *f = FORWARD_V1;
            }
            let _ = decode(&b);
            // Mutations of valid messages: flip one byte.
            for s in &seeds {
                let mut m = s.clone();
                let i = (next() % m.len() as u64) as usize;
                m[i] ^= (next() as u8) | 1;
                let _ = decode(&m);
            }
        }
        // A result claiming a huge vector length is refused, not allocated.
        let mut w = Writer::new();
        w.u8(FORWARD_V1);
        w.u8(TAG_REPLY);
        w.u64(1);
        w.u8(OUT_DONE);
        w.raw(&u64::MAX.to_le_bytes());
        assert!(matches!(decode(&w.buf), Err(ForwardWireError::Result(_))));
    }

    #[test]
    fn long_texts_are_cut() {
        let long = "é".repeat(TEXT_MAX);
        let enc = encode_reply(1, &ForwardOutcome::Failed(long));
        let ForwardMsg::Reply { outcome: ForwardOutcome::Failed(t), .. } = decode(&enc).unwrap() else { panic!() };
        assert!(t.len() <= TEXT_MAX && t.len() >= TEXT_MAX - 1);
    }
}
