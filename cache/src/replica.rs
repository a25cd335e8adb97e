//! The messages replicas of the write cache exchange (the payload of
//! `FrameKind::Data` peer frames), sans-I/O: encoding and strict decoding.
//!
//! A leader pushes an extent it logged to every other voter before it
//! proposes the raft entry that names it; each voter that made the extent
//! durable in its own write log acknowledges it. A node that applies an
//! entry naming an extent it lacks asks peers for it; a peer answers with
//! the bytes (from its log, or from its chunk store once it destaged the
//! queued record: see [`Message::Fetch`]) or says it has nothing.
//!
//! Wire format, version 1 (little-endian integers):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | version, [`VERSION`] |
//! | 1 | tag: 1 Push, 2 Ack, 3 Fetch, 4 Have, 5 Missing |
//! | 2..10 | extent origin (from 1) |
//! | 10..18 | extent sequence (from 1) |
//! | then | Push and Have: data length (8), data; Fetch: file (8), offset (8), length (8), data sequence (8); Ack and Missing: nothing |
//!
//! Decoding refuses an unknown version or tag, a zero origin or sequence,
//! a length over [`DATA_MAX`], truncation and trailing bytes.

use duet_fs::ExtentId;

/// The version byte of what is written.
pub const VERSION: u8 = 1;
/// The most data bytes one Push or Have carries (the peer transport's
/// frame limit is 64 MiB; a write is at most a few MiB).
pub const DATA_MAX: u64 = 32 << 20;

const TAG_PUSH: u8 = 1;
const TAG_ACK: u8 = 2;
const TAG_FETCH: u8 = 3;
const TAG_HAVE: u8 = 4;
const TAG_MISSING: u8 = 5;

/// What the file range of a fetched extent is (from the queued data
/// record that names it), so that a peer that no longer holds the extent
/// in its log can answer from its chunk store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchRange {
    /// The file the queued record writes.
    pub file: u64,
    pub offset: u64,
    pub len: u64,
    /// The record's data sequence (the same on every replica: records are
    /// queued by applying raft entries). A peer answers from its chunks
    /// only when it has destaged this record.
    pub dseq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// The extent's bytes, to be made durable in the receiver's write log.
    Push { extent: ExtentId, data: Vec<u8> },
    /// The sender holds the extent durably in its write log.
    Ack { extent: ExtentId },
    /// The sender lacks the extent and asks for it.
    Fetch { extent: ExtentId, range: FetchRange },
    /// The bytes of a fetched extent: from the answerer's log, or the
    /// fetched range as its chunk store holds it (the same bytes laid over
    /// the file by the records up to some later one, which the fetcher
    /// applies again in order, so the result is the same).
    Have { extent: ExtentId, data: Vec<u8> },
    /// The answerer has neither the extent nor the destaged range.
    Missing { extent: ExtentId },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("empty message")]
    Empty,
    #[error("unknown version {0}")]
    Version(u8),
    #[error("unknown tag {0}")]
    Tag(u8),
    #[error("truncated")]
    Truncated,
    #[error("{0} trailing bytes")]
    Trailing(usize),
    #[error("extent with a zero origin or sequence")]
    BadExtent,
    #[error("data length {0} over the limit")]
    TooLong(u64),
}

impl Message {
    pub fn extent(&self) -> ExtentId {
        match self {
            Message::Push { extent, .. }
            | Message::Ack { extent }
            | Message::Fetch { extent, .. }
            | Message::Have { extent, .. }
            | Message::Missing { extent } => *extent,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let data_len = match self {
            Message::Push { data, .. } | Message::Have { data, .. } => data.len() + 8,
            Message::Fetch { .. } => 32,
            _ => 0,
        };
        let mut out = Vec::with_capacity(18 + data_len);
        out.push(VERSION);
        let tag = match self {
            Message::Push { .. } => TAG_PUSH,
            Message::Ack { .. } => TAG_ACK,
            Message::Fetch { .. } => TAG_FETCH,
            Message::Have { .. } => TAG_HAVE,
            Message::Missing { .. } => TAG_MISSING,
        };
        out.push(tag);
        let e = self.extent();
        out.extend_from_slice(&e.origin.to_le_bytes());
        out.extend_from_slice(&e.seq.to_le_bytes());
        match self {
            Message::Push { data, .. } | Message::Have { data, .. } => {
                out.extend_from_slice(&(data.len() as u64).to_le_bytes());
                out.extend_from_slice(data);
            }
            Message::Fetch { range, .. } => {
                for v in [range.file, range.offset, range.len, range.dseq] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            Message::Ack { .. } | Message::Missing { .. } => {}
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Message, DecodeError> {
        let mut r = Reader { b, at: 0 };
        let version = *b.first().ok_or(DecodeError::Empty)?;
        r.at = 1;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let tag = r.u8()?;
        if !(TAG_PUSH..=TAG_MISSING).contains(&tag) {
            return Err(DecodeError::Tag(tag));
        }
        let extent = ExtentId { origin: r.u64()?, seq: r.u64()? };
        if extent.origin == 0 || extent.seq == 0 {
            return Err(DecodeError::BadExtent);
        }
        let m = match tag {
            TAG_PUSH | TAG_HAVE => {
                let len = r.u64()?;
                if len > DATA_MAX {
                    return Err(DecodeError::TooLong(len));
                }
                let data = r.bytes(len as usize)?.to_vec();
                if tag == TAG_PUSH {
                    Message::Push { extent, data }
                } else {
                    Message::Have { extent, data }
                }
            }
            TAG_FETCH => {
                let range = FetchRange { file: r.u64()?, offset: r.u64()?, len: r.u64()?, dseq: r.u64()? };
                if range.len > DATA_MAX {
                    return Err(DecodeError::TooLong(range.len));
                }
                Message::Fetch { extent, range }
            }
            TAG_ACK => Message::Ack { extent },
            _ => Message::Missing { extent },
        };
        if r.at != b.len() {
            return Err(DecodeError::Trailing(b.len() - r.at));
        }
        Ok(m)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.b.get(self.at..end).ok_or(DecodeError::Truncated)?;
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let s = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
}

/// How many acknowledgements from other voters make an extent durable on
/// a majority of `voters` (this node counting itself).
pub fn acks_needed(voters: usize) -> usize {
    voters / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext() -> ExtentId {
        ExtentId { origin: 2, seq: 77 }
    }

    fn all() -> Vec<Message> {
        vec![
            Message::Push { extent: ext(), data: vec![1, 2, 3, 4, 5] },
            Message::Push { extent: ext(), data: vec![] },
            Message::Ack { extent: ext() },
            Message::Fetch { extent: ext(), range: FetchRange { file: 9, offset: 4096, len: 65536, dseq: 12 } },
            Message::Have { extent: ext(), data: vec![9; 100] },
            Message::Missing { extent: ext() },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in all() {
            let b = m.encode();
            assert_eq!(b[0], VERSION);
            assert_eq!(Message::decode(&b), Ok(m.clone()), "{m:?}");
        }
    }

    #[test]
    fn the_layout_is_as_documented() {
        let b = Message::Ack { extent: ExtentId { origin: 1, seq: 0x0203 } }.encode();
        assert_eq!(b, [1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 0, 0]);
        let b = Message::Push { extent: ext(), data: vec![0xaa] }.encode();
        assert_eq!(&b[18..26], &1u64.to_le_bytes());
        assert_eq!(b[26], 0xaa);
        assert_eq!(b.len(), 27);
    }

    #[test]
    fn truncation_and_trailing_bytes_are_refused() {
        for m in all() {
            let b = m.encode();
            for n in 0..b.len() {
                assert!(Message::decode(&b[..n]).is_err(), "{m:?} cut at {n} decoded");
            }
            let mut long = b.clone();
            long.push(0);
            assert_eq!(Message::decode(&long), Err(DecodeError::Trailing(1)), "{m:?}");
        }
    }

    #[test]
    fn hostile_input_is_refused() {
        let mut b = Message::Ack { extent: ext() }.encode();
        b[0] = 2;
        assert_eq!(Message::decode(&b), Err(DecodeError::Version(2)));
        let mut b = Message::Ack { extent: ext() }.encode();
        b[1] = 0;
        assert_eq!(Message::decode(&b), Err(DecodeError::Tag(0)));
        b[1] = 6;
        assert_eq!(Message::decode(&b), Err(DecodeError::Tag(6)));
        // Zero origin, zero sequence.
        assert_eq!(Message::decode(&Message::Ack { extent: ExtentId { origin: 0, seq: 1 } }.encode()), Err(DecodeError::BadExtent));
        assert_eq!(Message::decode(&Message::Missing { extent: ExtentId { origin: 1, seq: 0 } }.encode()), Err(DecodeError::BadExtent));
        // A length field that claims more than there is, or than allowed.
        let mut b = Message::Push { extent: ext(), data: vec![1, 2] }.encode();
        b[18..26].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(Message::decode(&b), Err(DecodeError::TooLong(u64::MAX)));
        b[18..26].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(Message::decode(&b), Err(DecodeError::Truncated));
        b[18..26].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(Message::decode(&b), Err(DecodeError::Trailing(1)));
        let mut f = Message::Fetch { extent: ext(), range: FetchRange { file: 1, offset: 0, len: 1, dseq: 1 } }.encode();
        f[34..42].copy_from_slice(&(DATA_MAX + 1).to_le_bytes());
        assert_eq!(Message::decode(&f), Err(DecodeError::TooLong(DATA_MAX + 1)));
        assert_eq!(Message::decode(&[]), Err(DecodeError::Empty));
        // Every one-byte corruption of every message either decodes to
        // something well-formed or is refused; nothing panics.
        for m in all() {
            let b = m.encode();
            for i in 0..b.len() {
                for v in [0u8, 1, 0x7f, 0xff] {
                    let mut c = b.clone();
                    c[i] = v;
                    if let Ok(d) = Message::decode(&c) {
                        assert_eq!(d.encode(), c);
                    }
                }
            }
        }
    }

    #[test]
    fn a_majority_counts_this_node() {
        assert_eq!(acks_needed(1), 0);
        assert_eq!(acks_needed(2), 1);
        assert_eq!(acks_needed(3), 1);
        assert_eq!(acks_needed(4), 2);
        assert_eq!(acks_needed(5), 2);
    }
}

/// How long after a replica copy arrives the entry naming it has surely
/// been proposed (the leader proposes within its 5 s push wait, or never)
/// and, if it ever commits, committed (a leader without a quorum steps
/// down within an election timeout; its successor commits what it holds
/// at once).
pub const UNCLAIMED_GRACE_MS: u64 = 30_000;

/// What bounds the raft index of any entry that may still commit, as this
/// node knows it at `as_of_ms`: its own last log index when it leads; as
/// a follower, the larger of its own and the last index its leader
/// reported in a status frame that arrived at `as_of_ms`. A follower that
/// knows no leader, or has no status from it, has no view: its own last
/// index may be far behind (cut off), and an entry it lacks may name a
/// copy that counted in the proposer's majority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogView {
    pub last_index: u64,
    pub as_of_ms: u64,
}

/// Extents this node holds for another origin (pushed to it, or found in
/// its log at start) that no queued data record has named yet. Each is
/// kept (its log segment with it) until it is destaged, or until it is
/// proven unnamed: from a [`LogView`] taken at least
/// [`UNCLAIMED_GRACE_MS`] after the copy arrived, its last index is noted
/// as the extent's bar; once the node has applied past the bar, an entry
/// that names it would have queued it, so one that is still not queued
/// may be dropped (the caller checks the queue). Until such a view comes
/// (no leader heard), the copy is kept.
///
/// A time is milliseconds of a monotonic clock, passed in.
#[derive(Default)]
pub struct Unclaimed {
    entries: std::collections::BTreeMap<ExtentId, (u64, Option<u64>)>,
}

impl Unclaimed {
    pub fn add(&mut self, extent: ExtentId, now_ms: u64) {
        self.entries.entry(extent).or_insert((now_ms, None));
    }

    /// The extent was destaged (or its copy failed): no longer tracked.
    pub fn remove(&mut self, extent: &ExtentId) {
        self.entries.remove(extent);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Notes the view's last index as the bar of every extent that has
    /// none and whose grace ended by the view's time, and returns (and
    /// stops tracking) those whose bar `applied` has reached: drop each
    /// unless a queued record names it.
    pub fn step(&mut self, view: Option<LogView>, applied: u64) -> Vec<ExtentId> {
        let mut done = Vec::new();
        for (e, (seen, bar)) in self.entries.iter_mut() {
            if let Some(v) = view {
                if bar.is_none() && v.as_of_ms.saturating_sub(*seen) >= UNCLAIMED_GRACE_MS {
                    *bar = Some(v.last_index);
                }
            }
            if bar.is_some_and(|b| applied >= b) {
                done.push(*e);
            }
        }
        for e in &done {
            self.entries.remove(e);
        }
        done
    }
}

#[cfg(test)]
mod unclaimed_tests {
    use super::*;

    fn view(last_index: u64, as_of_ms: u64) -> Option<LogView> {
        Some(LogView { last_index, as_of_ms })
    }

    #[test]
    fn an_extent_is_dropped_only_after_its_grace_and_its_bar_applied() {
        let mut u = Unclaimed::default();
        let a = ExtentId { origin: 1, seq: 1 };
        let b = ExtentId { origin: 1, seq: 2 };
        u.add(a, 0);
        u.add(b, 10_000);
        // Within the grace nothing is released, however far applied is.
        assert!(u.step(view(100, UNCLAIMED_GRACE_MS - 1), 1_000).is_empty());
        // a's grace ends: its bar is 100, not reached by applied 99.
        assert!(u.step(view(100, UNCLAIMED_GRACE_MS), 99).is_empty());
        // b's grace ends later with a higher bar.
        assert!(u.step(view(150, UNCLAIMED_GRACE_MS + 10_000), 99).is_empty());
        assert_eq!(u.step(view(200, UNCLAIMED_GRACE_MS + 10_001), 100), vec![a]);
        assert_eq!(u.len(), 1);
        assert_eq!(u.step(view(200, UNCLAIMED_GRACE_MS + 10_002), 150), vec![b]);
        assert!(u.is_empty());
        // Adding again keeps the first arrival; removing forgets.
        u.add(a, 5);
        u.add(a, 50_000);
        u.remove(&b);
        assert_eq!(u.step(view(1, UNCLAIMED_GRACE_MS + 5), 1), vec![a]);
    }

    /// A node cut off from its leader (no view) keeps its copies however
    /// long: its own last index may be below the entry that names one,
    /// and that entry may commit through the others. The first view after
    /// the grace sets the bar, not one from before it.
    #[test]
    fn without_a_view_of_the_leaders_log_nothing_is_dropped() {
        let mut u = Unclaimed::default();
        let a = ExtentId { origin: 2, seq: 9 };
        u.add(a, 1_000);
        for t in [0, 1, 10, 1_000] {
            assert!(u.step(None, 10 * t).is_empty());
        }
        // A status from before the grace ended sets nothing.
        assert!(u.step(view(40, UNCLAIMED_GRACE_MS), 1 << 40).is_empty());
        // Heard again after the grace: the leader's log reaches 500.
        assert!(u.step(view(500, UNCLAIMED_GRACE_MS + 1_000), 499).is_empty());
        // Cut off again: the bar stays, applied catches up later.
        assert!(u.step(None, 499).is_empty());
        assert_eq!(u.step(None, 500), vec![a]);
    }
}
