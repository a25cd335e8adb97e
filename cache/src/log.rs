//! The write log's decisions, sans-I/O: where the next record goes (and
//! when a new segment or a new durable sequence floor must come first),
//! which writes one fdatasync round covers and what each writer is told,
//! and which segments may be deleted; and, at open, where each segment's
//! whole records end ([`LogRecovery`]).
//!
//! The appliance (`DataPath`) owns the files: it asks [`LogCore::append`]
//! what to do, does it (creates a segment file, makes a floor durable,
//! writes the record), reports back ([`LogCore::segment_created`],
//! [`LogCore::floor_persisted`], [`LogCore::write_done`]), runs the sync
//! rounds [`LogCore::start_sync`] hands it and reports them
//! ([`LogCore::sync_done`]), and asks [`LogCore::durable`] what to answer
//! each writer.
//!
//! Group commit: a write that completed is given a [`Ticket`] (numbered in
//! completion order). A sync round covers every ticket given before it
//! started, and only those; one round runs at a time. A ticket is durable
//! when the round covering it succeeded *and* every record placed before
//! it in its segment is durable too; when that round failed the ticket
//! fails, even if a later round (which no longer covers its segment)
//! succeeds. A failed write or sync makes the next append start a new
//! segment: a hole may follow a record, and recovery stops at the first
//! bad record of a segment, so nothing is ever written after one.
//!
//! Writes to one segment run concurrently and may complete out of order,
//! so a record can be synced while one placed before it is still in
//! flight. Recovery would stop at that earlier record if a crash kept it
//! from the disk, so a ticket is not answered while an earlier record of
//! its segment is unsettled (in flight, or written and not yet synced),
//! and fails when an earlier record failed (its write or its round): it
//! lies past a hole recovery never crosses.

use std::collections::{BTreeMap, BTreeSet};

use duet_fs::ExtentId;

use crate::{
    align_up, decode_header, record_len, verify, ExtentIndex, Location, RecordHeader, SegmentBinding, SeqAlloc, HEADER_LEN,
    HEADER_READ, SEQ_RESERVE,
};

/// Why a log write or sync failed, as far as the log's writers are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogIoError {
    /// The volume is full (ENOSPC).
    #[error("no space left on device")]
    NoSpace,
    /// Any other I/O error.
    #[error("I/O error")]
    Io,
}

/// What the appliance must do next for an append.
#[derive(Debug, PartialEq, Eq)]
pub enum AppendStep {
    /// The log holds this name already: nothing is written.
    Held(ExtentId),
    /// Make a segment file with this sequence (a new empty file, or a
    /// spare one renamed to it, the directory synced before any record in
    /// it is acknowledged), report it with [`LogCore::segment_created`],
    /// then ask again. Its records are bound to this sequence and a salt
    /// chosen for this life of the file ([`crate::encode_record`]).
    CreateSegment(u64),
    /// Make this sequence floor durable, report it with
    /// [`LogCore::floor_persisted`], then ask again.
    PersistFloor(u64),
    /// Write the record as planned, then report [`LogCore::write_done`].
    Write(PendingWrite),
}

/// A record placed in the log and not yet written. Not `Clone`: exactly
/// one [`LogCore::write_done`] answers it.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a planned write must be reported with write_done"]
pub struct PendingWrite {
    pub extent: ExtentId,
    pub segment: u64,
    /// Position of the record (its header) in the segment.
    pub pos: u64,
    /// Bytes of the whole record (header, data, padding).
    pub record_len: u64,
}

/// A completed write waiting to be durable. Not `Clone`: once
/// [`LogCore::durable`] answers it, it is gone.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a ticket must be asked about with durable"]
pub struct Ticket {
    n: u64,
    extent: ExtentId,
    segment: u64,
    /// Where its record is in the segment.
    pos: u64,
}

impl Ticket {
    /// Completion order among this log's writes, from 1.
    pub fn number(&self) -> u64 {
        self.n
    }

    pub fn extent(&self) -> ExtentId {
        self.extent
    }

    pub fn segment(&self) -> u64 {
        self.segment
    }
}

/// What [`LogCore::durable`] says of a ticket.
#[derive(Debug, PartialEq, Eq)]
pub enum Durable {
    /// No round covering it has finished: wait (start a round if none runs).
    Pending(Ticket),
    /// The round covering it finished: its writer's answer. A failed
    /// ticket's extent is gone from the log.
    Done(Result<(), LogIoError>),
}

/// One fdatasync round: fdatasync every segment listed, then report it
/// with [`LogCore::sync_done`]. Not `Clone`.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a started sync round must be reported with sync_done"]
pub struct SyncRound {
    /// Segments written since the previous round started.
    pub segments: Vec<u64>,
    /// Tickets after this one...
    low: u64,
    /// ...up to and including this one are covered.
    high: u64,
}

impl SyncRound {
    /// The tickets it covers: `low < n <= high`.
    pub fn covers(&self) -> (u64, u64) {
        (self.low, self.high)
    }
}

#[derive(Debug)]
struct FailedRound {
    low: u64,
    error: LogIoError,
    /// Tickets of the round not yet answered; the entry goes at zero.
    left: u64,
}

/// The write log's state, without its files.
#[derive(Debug)]
pub struct LogCore {
    node_id: u64,
    segment_max: u64,
    /// Every segment the log has, with its next write position.
    segments: BTreeMap<u64, u64>,
    /// The segment appends go to (0: none yet). After recovery it may be a
    /// sequence no segment has (a spare file's last one): the next append
    /// then asks for `current + 1`.
    current: u64,
    /// A write or sync failed in the current segment: the next append
    /// starts a new one.
    roll: bool,
    /// Where each extent the log holds is.
    index: ExtentIndex,
    /// This node's next extent sequences; its limit is always durable.
    seqs: SeqAlloc,
    /// Extents still needed (resolved names): appended and not yet
    /// destaged or forgotten.
    live: BTreeSet<ExtentId>,
    /// Tickets given (completed writes).
    done_writes: u64,
    /// Tickets covered by a finished round (successful or not).
    settled_upto: u64,
    /// The round running, by its `high`.
    running: Option<u64>,
    /// Segments written since the last round started.
    dirty: BTreeSet<u64>,
    /// Failed rounds with tickets not yet answered, by `high`.
    failed: BTreeMap<u64, FailedRound>,
    /// Per segment, by position, the records not yet known durable: in
    /// flight, written (with their ticket) and not yet covered by a
    /// successful round, or failed. A record absent here is durable.
    unsettled: BTreeMap<u64, BTreeMap<u64, Slot>>,
}

/// The state of a record that is not yet known durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    InFlight,
    /// Written: its ticket's number.
    Done(u64),
    /// Its write or the round covering it failed: the records after it in
    /// its segment can never be recovered.
    Failed,
}

impl LogCore {
    /// The state recovered from the segments found at open: each with the
    /// position after its last good record, the index of their records
    /// (resolved names), and the durable sequence floor (0 if none). The
    /// appliance then makes [`LogCore::floor_wanted`] durable and creates
    /// [`LogCore::next_segment`] before the first append: it never
    /// appends after a torn tail.
    pub fn recover(node_id: u64, segment_max: u64, segments: BTreeMap<u64, u64>, index: ExtentIndex, floor: u64) -> LogCore {
        assert!(node_id != ExtentId::LEGACY_LOCAL, "a node id is from 1");
        let mut seqs = SeqAlloc::recover(floor, index.high(node_id));
        // Nothing reserved until a floor is durable.
        seqs.limit = seqs.next;
        let current = segments.keys().next_back().copied().unwrap_or(0);
        LogCore {
            node_id,
            segment_max,
            segments,
            current,
            roll: true,
            index,
            seqs,
            live: BTreeSet::new(),
            done_writes: 0,
            settled_upto: 0,
            running: None,
            dirty: BTreeSet::new(),
            failed: BTreeMap::new(),
            unsettled: BTreeMap::new(),
        }
    }

    /// A new, empty log.
    pub fn new(node_id: u64, segment_max: u64) -> LogCore {
        LogCore::recover(node_id, segment_max, BTreeMap::new(), ExtentIndex::default(), 0)
    }

    /// The sequence the next segment gets.
    pub fn next_segment(&self) -> u64 {
        self.current + 1
    }

    /// The floor to make durable before this node names another extent
    /// (`None` while the reserved range lasts).
    pub fn floor_wanted(&self) -> Option<u64> {
        (self.seqs.next >= self.seqs.limit).then(|| self.seqs.next.saturating_add(SEQ_RESERVE))
    }

    /// Plans an append of `data_len` bytes: `name` for a copy of another
    /// node's extent, `None` for a new extent of this node.
    pub fn append(&mut self, name: Option<ExtentId>, data_len: u64) -> AppendStep {
        if let Some(e) = name {
            assert!(e.origin != ExtentId::LEGACY_LOCAL, "a copy names a real extent: {e:?}");
            if self.index.get(&e).is_some() {
                return AppendStep::Held(e);
            }
        }
        let total = record_len(data_len);
        let need_new = match self.segments.get(&self.current) {
            None => true,
            Some(&len) => len > 0 && (self.roll || len + total > self.segment_max),
        };
        if need_new {
            return AppendStep::CreateSegment(self.next_segment());
        }
        let extent = match name {
            Some(e) => e,
            None => match self.seqs.take() {
                Some(n) => ExtentId { origin: self.node_id, seq: n },
                None => {
                    return AppendStep::PersistFloor(
                        self.floor_wanted().expect("a used-up range wants a floor"),
                    )
                }
            },
        };
        let segment = self.current;
        let len = self.segments.get_mut(&segment).expect("the current segment exists");
        let pos = *len;
        *len += total;
        let fresh = self.index.insert(extent, Location { segment, data_pos: pos + HEADER_LEN, len: data_len });
        assert!(fresh, "extent {extent:?} named twice");
        self.live.insert(extent.resolved(self.node_id));
        self.slot(segment, pos, Slot::InFlight);
        AppendStep::Write(PendingWrite { extent, segment, pos, record_len: total })
    }

    fn slot(&mut self, segment: u64, pos: u64, slot: Slot) {
        self.unsettled.entry(segment).or_default().insert(pos, slot);
    }

    /// Whether `t` waits for a record placed before it in its segment that
    /// is not yet durable (its own round may have finished).
    pub fn waits_on_earlier(&self, t: &Ticket) -> bool {
        self.unsettled.get(&t.segment).is_some_and(|m| m.range(..t.pos).any(|(_, s)| *s != Slot::Failed))
    }

    /// The segment [`AppendStep::CreateSegment`] (or
    /// [`LogCore::next_segment`]) asked for exists, empty: appends go there.
    pub fn segment_created(&mut self, seq: u64) {
        assert_eq!(seq, self.current + 1, "segments are created in order");
        self.segments.insert(seq, 0);
        self.current = seq;
        self.roll = false;
    }

    /// The floor [`AppendStep::PersistFloor`] (or
    /// [`LogCore::floor_wanted`]) asked for is durable.
    pub fn floor_persisted(&mut self, floor: u64) {
        assert!(floor > self.seqs.next, "a new floor is above every sequence handed out");
        self.seqs.limit = self.seqs.limit.max(floor);
    }

    /// The planned write finished. `Ok`: its ticket, to wait on with
    /// [`LogCore::durable`]. `Err`: the extent is gone from the log (a copy
    /// received again is written again) and the next append starts a new
    /// segment.
    pub fn write_done(&mut self, w: PendingWrite, result: Result<(), LogIoError>) -> Option<Ticket> {
        assert!(self.segments.contains_key(&w.segment), "a write in flight keeps its segment");
        match result {
            Ok(()) => {
                self.done_writes += 1;
                self.dirty.insert(w.segment);
                self.slot(w.segment, w.pos, Slot::Done(self.done_writes));
                Some(Ticket { n: self.done_writes, extent: w.extent, segment: w.segment, pos: w.pos })
            }
            Err(_) => {
                self.slot(w.segment, w.pos, Slot::Failed);
                self.drop_extent(w.extent);
                None
            }
        }
    }

    fn drop_extent(&mut self, extent: ExtentId) {
        self.index.remove(&extent);
        self.live.remove(&extent.resolved(self.node_id));
        self.roll = true;
    }

    /// A round to run now: every write completed since the last round
    /// started. `None` while one runs, or when there is nothing to cover.
    pub fn start_sync(&mut self) -> Option<SyncRound> {
        if self.running.is_some() || self.done_writes == self.settled_upto {
            return None;
        }
        let round = SyncRound {
            segments: std::mem::take(&mut self.dirty).into_iter().collect(),
            low: self.settled_upto,
            high: self.done_writes,
        };
        self.running = Some(round.high);
        Some(round)
    }

    /// Whether a round runs.
    pub fn syncing(&self) -> bool {
        self.running.is_some()
    }

    /// The round finished: its tickets are settled (the appliance then
    /// wakes every waiter). A failed round fails exactly its tickets.
    pub fn sync_done(&mut self, round: SyncRound, result: Result<(), LogIoError>) {
        assert_eq!(self.running, Some(round.high), "the round reported is the one running");
        assert_eq!(round.low, self.settled_upto, "rounds cover consecutive tickets");
        self.running = None;
        self.settled_upto = round.high;
        let covered = |s: &Slot| matches!(*s, Slot::Done(n) if n > round.low && n <= round.high);
        for m in self.unsettled.values_mut() {
            if result.is_ok() {
                m.retain(|_, s| !covered(s));
            } else {
                m.values_mut().filter(|s| covered(s)).for_each(|s| *s = Slot::Failed);
            }
        }
        self.unsettled.retain(|_, m| !m.is_empty());
        if let Err(error) = result {
            self.roll = true;
            if round.high > round.low {
                self.failed.insert(round.high, FailedRound { low: round.low, error, left: round.high - round.low });
            }
        }
    }

    /// The answer for a ticket's writer, once the round covering it finished.
    pub fn durable(&mut self, t: Ticket) -> Durable {
        assert!(t.n >= 1 && t.n <= self.done_writes, "a ticket this log gave");
        if t.n > self.settled_upto {
            return Durable::Pending(t);
        }
        let failed = match self.failed.range_mut(t.n..).next() {
            Some((&high, f)) if f.low < t.n => {
                f.left -= 1;
                let e = f.error;
                if f.left == 0 {
                    self.failed.remove(&high);
                }
                Some(e)
            }
            _ => None,
        };
        if let Some(e) = failed {
            self.drop_extent(t.extent);
            return Durable::Done(Err(e));
        }
        // Its round succeeded: it is durable once every record before it
        // in its segment is; past a failed one it never will be.
        let earlier = self.unsettled.get(&t.segment).map(|m| m.range(..t.pos).map(|(_, s)| *s).collect::<Vec<_>>());
        let earlier = earlier.unwrap_or_default();
        if earlier.contains(&Slot::Failed) {
            self.drop_extent(t.extent);
            return Durable::Done(Err(LogIoError::Io));
        }
        if !earlier.is_empty() {
            return Durable::Pending(t);
        }
        Durable::Done(Ok(()))
    }

    /// Where the log holds `extent` (any name; legacy ones resolve to this node).
    pub fn locate(&self, extent: ExtentId) -> Option<Location> {
        self.index.get(&extent.resolved(self.node_id))
    }

    /// Every name the log holds.
    pub fn names(&self) -> Vec<ExtentId> {
        self.index.names()
    }

    /// `extent` is still needed (a queued record names it).
    pub fn keep(&mut self, extent: ExtentId) {
        self.live.insert(extent.resolved(self.node_id));
    }

    /// `extent` will never be applied, or is destaged.
    pub fn forget(&mut self, extent: ExtentId) {
        self.live.remove(&extent.resolved(self.node_id));
    }

    pub fn is_live(&self, extent: ExtentId) -> bool {
        self.live.contains(&extent.resolved(self.node_id))
    }

    /// How many extents are still needed.
    pub fn live_len(&self) -> usize {
        self.live.len()
    }

    /// Segments that hold no live extent, the current one never.
    pub fn releasable(&self) -> Vec<u64> {
        self.index.releasable(self.segments.keys().copied(), self.current, &self.live)
    }

    /// The segment is being deleted: it and its extents are forgotten.
    pub fn released(&mut self, seq: u64) {
        assert!(seq != self.current, "the current segment is never released");
        self.segments.remove(&seq);
        self.dirty.remove(&seq);
        self.unsettled.remove(&seq);
        self.index.drop_segment(seq);
    }

    /// The segments, with their next write positions.
    pub fn segments(&self) -> &BTreeMap<u64, u64> {
        &self.segments
    }

    pub fn current(&self) -> u64 {
        self.current
    }
}

/// Reading the segments found at open, sans-I/O: for each segment (in
/// order, [`LogRecovery::begin`]) the appliance reads what
/// [`LogRecovery::next_read`] asks and hands the bytes to
/// [`LogRecovery::got`], until it asks nothing more; a segment's records
/// end at the first one that is not whole (torn tail, bad CRC, no
/// header, or a record bound to another segment life: a version-3 record
/// of another segment sequence, or of another salt than the segment's
/// first version-3 record, or a version-1 or 2 record after a version-3
/// one, all of them what an earlier life of a reused file left after this
/// life's last record). Then [`LogRecovery::finish`] gives the [`LogCore`].
#[derive(Debug)]
pub struct LogRecovery {
    node_id: u64,
    segment_max: u64,
    segments: BTreeMap<u64, u64>,
    index: ExtentIndex,
    scan: Option<Scan>,
    /// The highest sequence a spare segment file was last used under.
    spare_high: u64,
}

#[derive(Debug)]
struct Scan {
    segment: u64,
    size: u64,
    /// The next record's position.
    pos: u64,
    /// The header read at `pos`, its data not yet read.
    header: Option<RecordHeader>,
    /// A record that is not whole was met: the segment ends at `pos`.
    stopped: bool,
    /// The life of the segment's first whole version-3 record: every later
    /// record must be of it.
    bound: Option<SegmentBinding>,
}

impl Scan {
    /// Whether a header read at `pos` may be a record of this segment's life.
    fn belongs(&self, h: &RecordHeader) -> bool {
        match (h.bound, self.bound) {
            (Some(b), _) if b.segment != self.segment => false,
            (Some(b), Some(first)) => b == first,
            (Some(_), None) => true,
            // An older version after a version-3 record: an earlier life's.
            (None, Some(_)) => false,
            (None, None) => true,
        }
    }
}

impl LogRecovery {
    pub fn new(node_id: u64, segment_max: u64) -> LogRecovery {
        LogRecovery { node_id, segment_max, segments: BTreeMap::new(), index: ExtentIndex::default(), scan: None, spare_high: 0 }
    }

    /// A spare segment file (kept for reuse, never read) was last used
    /// under sequence `seq`: new segments are numbered past it, so that a
    /// file's lives always have increasing sequences and its earlier
    /// records never carry its current one.
    pub fn spare(&mut self, seq: u64) {
        self.spare_high = self.spare_high.max(seq);
    }

    /// Starts reading segment `segment`, whose file has `size` bytes.
    /// Segments come in increasing order, each read to its end.
    pub fn begin(&mut self, segment: u64, size: u64) {
        assert!(self.scan.is_none(), "one segment at a time");
        assert!(self.segments.keys().next_back().is_none_or(|&last| last < segment), "segments in order");
        assert!(segment > 0, "segment sequences are from 1");
        self.scan = Some(Scan { segment, size, pos: 0, header: None, stopped: false, bound: None });
    }

    /// The bytes to read next, as (position, length); `None` when the
    /// segment is read (its records end where its next append would be).
    pub fn next_read(&mut self) -> Option<(u64, u64)> {
        let s = self.scan.as_mut().expect("a segment is being read");
        let next = match s.header {
            _ if s.stopped => None,
            Some(h) => Some((s.pos + h.header_len, h.len)),
            None => (s.pos + HEADER_READ <= s.size).then_some((s.pos, HEADER_READ)),
        };
        if next.is_none() {
            self.segments.insert(s.segment, s.pos);
            self.scan = None;
        }
        next
    }

    /// The bytes [`LogRecovery::next_read`] asked for.
    pub fn got(&mut self, bytes: &[u8]) {
        let s = self.scan.as_mut().expect("a segment is being read");
        assert!(!s.stopped, "nothing was asked");
        match s.header.take() {
            None => match decode_header(bytes, self.segment_max) {
                Some(h) if s.pos + h.header_len + h.len <= s.size && s.belongs(&h) => s.header = Some(h),
                // Not a header, its data runs past the file (a torn tail),
                // or an earlier life's record.
                _ => s.stopped = true,
            },
            Some(h) => {
                if verify(&h, bytes) {
                    if s.bound.is_none() {
                        s.bound = h.bound;
                    }
                    let data_pos = s.pos + h.header_len;
                    self.index.insert(h.extent.resolved(self.node_id), Location { segment: s.segment, data_pos, len: h.len });
                    s.pos = align_up(data_pos + h.len);
                } else {
                    s.stopped = true;
                }
            }
        }
    }

    /// The log as recovered, with the durable sequence floor (0 if none):
    /// see [`LogCore::recover`] for what the appliance does next.
    pub fn finish(self, floor: u64) -> LogCore {
        assert!(self.scan.is_none(), "every segment read to its end");
        let mut core = LogCore::recover(self.node_id, self.segment_max, self.segments, self.index, floor);
        // No segment was created past a spare's last sequence yet: the
        // next one is numbered past it (`current` need not be a segment).
        core.current = core.current.max(self.spare_high);
        core
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 64 << 10;

    fn ext(origin: u64, seq: u64) -> ExtentId {
        ExtentId { origin, seq }
    }

    /// An opened log: floor made durable, first segment created.
    fn open(node: u64) -> LogCore {
        let mut c = LogCore::new(node, MAX);
        let f = c.floor_wanted().unwrap();
        c.floor_persisted(f);
        let s = c.next_segment();
        c.segment_created(s);
        c
    }

    fn write(c: &mut LogCore, name: Option<ExtentId>, len: u64) -> PendingWrite {
        loop {
            match c.append(name, len) {
                AppendStep::Write(w) => return w,
                AppendStep::CreateSegment(s) => c.segment_created(s),
                AppendStep::PersistFloor(f) => c.floor_persisted(f),
                AppendStep::Held(e) => panic!("{e:?} held"),
            }
        }
    }

    fn written(c: &mut LogCore, len: u64) -> Ticket {
        let w = write(c, None, len);
        c.write_done(w, Ok(())).unwrap()
    }

    fn answer(c: &mut LogCore, t: Ticket) -> Option<Result<(), LogIoError>> {
        match c.durable(t) {
            Durable::Pending(_) => None,
            Durable::Done(r) => Some(r),
        }
    }

    #[test]
    fn a_round_covers_exactly_the_writes_completed_before_it_started() {
        let mut c = open(1);
        let a = written(&mut c, 10);
        let b = written(&mut c, 10);
        let round = c.start_sync().unwrap();
        assert_eq!(round.covers(), (0, 2));
        assert_eq!(round.segments, vec![1]);
        assert!(c.start_sync().is_none(), "one round at a time");
        // Completes after the round started: not covered by it.
        let late = written(&mut c, 10);
        c.sync_done(round, Ok(()));
        assert_eq!(answer(&mut c, a), Some(Ok(())));
        assert_eq!(answer(&mut c, b), Some(Ok(())));
        let late = match c.durable(late) {
            Durable::Pending(t) => t,
            d => panic!("a write after the round started is not durable by it: {d:?}"),
        };
        let r2 = c.start_sync().unwrap();
        assert_eq!(r2.covers(), (2, 3));
        c.sync_done(r2, Ok(()));
        assert_eq!(answer(&mut c, late), Some(Ok(())));
        assert!(c.start_sync().is_none(), "nothing left to cover");
    }

    #[test]
    fn a_failed_round_fails_its_writers_and_not_later_ones() {
        let mut c = open(1);
        let a = written(&mut c, 10);
        let (ea, sa) = (a.extent(), a.segment());
        let r1 = c.start_sync().unwrap();
        let b = written(&mut c, 10);
        c.sync_done(r1, Err(LogIoError::NoSpace));
        let r2 = c.start_sync().unwrap();
        c.sync_done(r2, Ok(()));
        // `a` is asked only after the later round succeeded: still failed.
        assert_eq!(answer(&mut c, a), Some(Err(LogIoError::NoSpace)));
        assert_eq!(c.locate(ea), None, "a failed extent leaves the log");
        assert!(!c.is_live(ea));
        // `b` was synced by a round that succeeded, but it lies after `a` in
        // the same segment: recovery would stop at `a`, so it fails too.
        assert_eq!(b.segment(), sa);
        assert_eq!(answer(&mut c, b), Some(Err(LogIoError::Io)));
        // The next append rolls (the failed round's segment was `sa`), and
        // a write there is durable by its own round.
        let w = write(&mut c, None, 10);
        assert_eq!((w.segment, w.pos), (sa + 1, 0));
        let d = c.write_done(w, Ok(())).unwrap();
        let r3 = c.start_sync().unwrap();
        c.sync_done(r3, Ok(()));
        assert_eq!(answer(&mut c, d), Some(Ok(())));
        assert!(c.failed.is_empty(), "answered failures are not kept");
    }

    /// The ticket back, asserting the log has no answer for it yet.
    fn still_pending(c: &mut LogCore, t: Ticket, why: &str) -> Ticket {
        match c.durable(t) {
            Durable::Pending(t) => t,
            d => panic!("{why}: {d:?}"),
        }
    }

    #[test]
    fn a_record_synced_before_an_earlier_one_is_written_waits_for_it() {
        let mut c = open(1);
        let first = write(&mut c, None, 100);
        let second = write(&mut c, None, 100);
        assert_eq!((first.pos, second.pos), (0, 4096));
        // The later record completes first and its round succeeds, while the
        // record at 0 is still in flight: a crash now would end the segment
        // at 0 in recovery, so it is not durable yet.
        let t2 = c.write_done(second, Ok(())).unwrap();
        let r = c.start_sync().unwrap();
        c.sync_done(r, Ok(()));
        let t2 = still_pending(&mut c, t2, "answered past an unwritten record");
        assert!(c.waits_on_earlier(&t2));
        assert!(c.start_sync().is_none(), "nothing new to sync: it waits for the earlier writer");
        let t1 = c.write_done(first, Ok(())).unwrap();
        // Written, not yet synced: still not.
        let t2 = still_pending(&mut c, t2, "answered before the earlier record is synced");
        let r = c.start_sync().unwrap();
        c.sync_done(r, Ok(()));
        assert_eq!(answer(&mut c, t1), Some(Ok(())));
        assert_eq!(answer(&mut c, t2), Some(Ok(())));

        // The earlier record's write fails: the later one, synced, fails too
        // (recovery never crosses the hole) and leaves the log.
        let first = write(&mut c, None, 100);
        let second = write(&mut c, None, 100);
        assert_eq!(first.segment, second.segment);
        let e2 = second.extent;
        let t2 = c.write_done(second, Ok(())).unwrap();
        let r = c.start_sync().unwrap();
        c.sync_done(r, Ok(()));
        let t2 = still_pending(&mut c, t2, "answered past an unwritten record");
        assert!(c.write_done(first, Err(LogIoError::Io)).is_none());
        assert!(!c.waits_on_earlier(&t2), "nothing left to wait for: the earlier record failed");
        assert_eq!(answer(&mut c, t2), Some(Err(LogIoError::Io)));
        assert_eq!(c.locate(e2), None, "a record past a hole leaves the log");
        assert!(!c.is_live(e2));
    }

    #[test]
    fn a_failed_write_rolls_the_next_append_to_a_new_segment() {
        let mut c = open(1);
        let ok = write(&mut c, None, 100);
        assert_eq!((ok.segment, ok.pos), (1, 0));
        let _ = c.write_done(ok, Ok(())).unwrap();
        let bad = write(&mut c, None, 100);
        assert_eq!((bad.segment, bad.pos), (1, 4096));
        let e = bad.extent;
        assert!(c.write_done(bad, Err(LogIoError::Io)).is_none());
        assert_eq!(c.locate(e), None);
        assert!(!c.is_live(e));
        assert_eq!(c.append(None, 100), AppendStep::CreateSegment(2));
        c.segment_created(2);
        let next = write(&mut c, None, 100);
        assert_eq!((next.segment, next.pos), (2, 0));
        // A copy that failed is written again when received again.
        let copy = write(&mut c, Some(ext(7, 3)), 5);
        let _ = c.write_done(copy, Err(LogIoError::Io));
        assert!(matches!(c.append(Some(ext(7, 3)), 5), AppendStep::CreateSegment(3)));
    }

    #[test]
    fn segments_roll_over_at_segment_max() {
        let mut c = open(1);
        // Records of 16 KiB (header + data, aligned): four fill 64 KiB.
        let data = 16 * 1024 - HEADER_LEN;
        for i in 0..4 {
            let w = write(&mut c, None, data);
            assert_eq!((w.segment, w.pos), (1, i * 16 * 1024));
            let _ = c.write_done(w, Ok(()));
        }
        assert_eq!(c.append(None, 1), AppendStep::CreateSegment(2));
        c.segment_created(2);
        // A record larger than segment_max goes alone into an empty segment.
        let w = write(&mut c, None, 2 * MAX);
        assert_eq!((w.segment, w.pos), (2, 0));
        let _ = c.write_done(w, Ok(()));
        assert_eq!(c.append(None, 1), AppendStep::CreateSegment(3));
    }

    #[test]
    fn the_floor_is_durable_before_the_first_sequence_past_it() {
        let mut c = LogCore::new(1, MAX);
        c.segment_created(1);
        // Nothing durable yet: the first name needs a floor.
        assert_eq!(c.append(None, 1), AppendStep::PersistFloor(1 + SEQ_RESERVE));
        c.floor_persisted(1 + SEQ_RESERVE);
        c.seqs.next = SEQ_RESERVE; // near the end of the range
        let w = write(&mut c, None, 1);
        assert_eq!(w.extent, ext(1, SEQ_RESERVE));
        let _ = c.write_done(w, Ok(()));
        // The next sequence is the floor itself: a higher floor first, and
        // asking again without one asks again.
        let want = 1 + 2 * SEQ_RESERVE;
        assert_eq!(c.append(None, 1), AppendStep::PersistFloor(want));
        assert_eq!(c.append(None, 1), AppendStep::PersistFloor(want), "no sequence before the floor is durable");
        // Copies of other nodes' extents need no floor.
        assert!(matches!(c.append(Some(ext(2, 9)), 1), AppendStep::Write(_)));
        c.floor_persisted(want);
        assert_eq!(write(&mut c, None, 1).extent, ext(1, 1 + SEQ_RESERVE));
        // Recovery: past both the floor and the log's highest sequence.
        let mut ix = ExtentIndex::default();
        ix.insert(ext(1, 40), Location { segment: 3, data_pos: 40, len: 1 });
        let mut r = LogCore::recover(1, MAX, [(3, 4096)].into_iter().collect(), ix, 10);
        assert_eq!(r.floor_wanted(), Some(41 + SEQ_RESERVE));
        assert_eq!(r.next_segment(), 4);
        r.segment_created(4);
        assert_eq!(r.append(None, 1), AppendStep::PersistFloor(41 + SEQ_RESERVE));
        r.floor_persisted(41 + SEQ_RESERVE);
        assert_eq!(write(&mut r, None, 1).extent, ext(1, 41));
    }

    #[test]
    fn only_segments_without_live_extents_are_released_never_the_current() {
        let mut c = open(1);
        let a = written(&mut c, 10);
        let ea = a.extent();
        let r = c.start_sync().unwrap();
        c.sync_done(r, Ok(()));
        assert_eq!(answer(&mut c, a), Some(Ok(())));
        c.segment_created(2);
        let b = written(&mut c, 10);
        let eb = b.extent();
        c.segment_created(3);
        assert!(c.releasable().is_empty(), "segments 1 and 2 hold live extents, 3 is current");
        c.forget(ea);
        assert_eq!(c.releasable(), vec![1]);
        c.released(1);
        assert_eq!(c.locate(ea), None);
        c.forget(eb);
        c.keep(eb);
        assert!(c.releasable().is_empty(), "kept again");
        c.forget(eb);
        assert_eq!(c.releasable(), vec![2]);
        c.released(2);
        assert!(c.releasable().is_empty(), "the current segment, empty, stays");
        // A copy of another node's extent keeps its segment too.
        let w = write(&mut c, Some(ext(5, 1)), 10);
        let _ = c.write_done(w, Ok(()));
        c.segment_created(4);
        assert!(c.releasable().is_empty());
        c.forget(ext(5, 1));
        assert_eq!(c.releasable(), vec![3]);
        assert!(matches!(c.append(Some(ext(5, 1)), 10), AppendStep::Held(_)));
    }

    #[test]
    #[should_panic(expected = "the current segment is never released")]
    fn releasing_the_current_segment_is_refused() {
        let mut c = open(1);
        c.released(1);
    }

    /// Feeds a recovery from segment images, as the appliance reads files.
    fn recover_from(node: u64, images: &[(u64, Vec<u8>)], floor: u64) -> LogCore {
        let mut r = LogRecovery::new(node, MAX);
        for (seq, img) in images {
            r.begin(*seq, img.len() as u64);
            while let Some((pos, len)) = r.next_read() {
                let end = (pos + len).min(img.len() as u64);
                r.got(&img[pos as usize..end as usize]);
            }
        }
        r.finish(floor)
    }

    /// A segment's life: its sequence and a salt made from it.
    fn life(seq: u64) -> SegmentBinding {
        SegmentBinding { segment: seq, salt: seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) }
    }

    /// Records as written into a segment file with this life.
    fn image_of(bound: SegmentBinding, records: &[(ExtentId, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (e, d) in records {
            let mut b = vec![0u8; record_len(d.len() as u64) as usize];
            crate::encode_record(&mut b, bound, *e, d);
            out.extend_from_slice(&b);
        }
        out
    }

    /// Overwrites the start of `file` with `records` (a reused file's new life).
    fn overwrite(file: &mut [u8], records: &[u8]) {
        file[..records.len()].copy_from_slice(records);
    }

    #[test]
    fn recovery_keeps_whole_records_and_stops_at_the_first_bad_one() {
        let image = |records: &[(ExtentId, &[u8])]| image_of(life(1), records);
        let seg1 = image(&[(ext(1, 1), b"one"), (ext(2, 7), b"copy"), (ext(1, 2), b"two")]);
        // A bit flipped in the second record's data: it and the third go.
        let mut seg2 = image_of(life(2), &[(ext(1, 3), b"three"), (ext(1, 4), b"four"), (ext(1, 5), b"five")]);
        seg2[4096 + HEADER_LEN as usize] ^= 1;
        // A torn tail: the last record's data cut short.
        let mut seg3 = image_of(life(4), &[(ext(1, 6), b"six"), (ext(1, 9), &[7u8; 5000])]);
        seg3.truncate(4096 + 4096);
        // A version-1 record (lsn 8) resolves to this node.
        let mut v1 = vec![0u8; 4096];
        v1[..8].copy_from_slice(crate::MAGIC_V1);
        v1[8..16].copy_from_slice(&8u64.to_le_bytes());
        v1[16..24].copy_from_slice(&1u64.to_le_bytes());
        v1[24..28].copy_from_slice(&crate::record_crc(ext(ExtentId::LEGACY_LOCAL, 8), None, b"v").to_le_bytes());
        v1[32] = b'v';
        // Older versions before any version-3 record of a segment are read.
        v1.splice(0..0, crate::tests::encode_v2(ext(2, 8), b"v2"));
        let mut seg1 = [v1, seg1].concat();
        seg1.extend_from_slice(&[0u8; 100]); // less than a header after it
        let mut c = recover_from(1, &[(1, seg1), (2, seg2), (4, seg3)], 0);
        assert_eq!(c.segments().clone(), [(1, 5 * 4096), (2, 4096), (4, 4096)].into_iter().collect());
        assert_eq!(c.locate(ext(2, 8)), Some(Location { segment: 1, data_pos: 40, len: 2 }));
        assert_eq!(c.locate(ext(2, 7)), Some(Location { segment: 1, data_pos: 3 * 4096 + HEADER_LEN, len: 4 }));
        assert_eq!(c.locate(ext(1, 8)), Some(Location { segment: 1, data_pos: 4096 + 32, len: 1 }));
        assert_eq!(c.locate(ExtentId { origin: ExtentId::LEGACY_LOCAL, seq: 8 }), c.locate(ext(1, 8)));
        assert!(c.locate(ext(1, 3)).is_some());
        assert_eq!(c.locate(ext(1, 4)), None, "bad CRC");
        assert_eq!(c.locate(ext(1, 5)), None, "after a bad record");
        assert!(c.locate(ext(1, 6)).is_some());
        assert_eq!(c.locate(ext(1, 9)), None, "torn");
        // Past the highest sequence the log holds (8), never after a torn tail.
        assert_eq!(c.floor_wanted(), Some(9 + SEQ_RESERVE));
        c.floor_persisted(9 + SEQ_RESERVE);
        assert_eq!(c.next_segment(), 5);
        assert_eq!(c.append(None, 1), AppendStep::CreateSegment(5), "recovered segments get no appends");
        c.segment_created(5);
        assert_eq!(write(&mut c, None, 1).extent, ext(1, 9));
        // Nothing is live until the queue says so: all but the current may go.
        assert_eq!(c.releasable(), vec![1, 2, 4]);
        c.keep(ext(ExtentId::LEGACY_LOCAL, 8));
        assert_eq!(c.releasable(), vec![2, 4]);
        // A header whose length is over segment_max ends the segment.
        let big = image(&[(ext(1, 1), b"x")]);
        let mut r = LogRecovery::new(1, 0);
        r.begin(1, big.len() as u64);
        let (pos, len) = r.next_read().unwrap();
        r.got(&big[pos as usize..(pos + len) as usize]);
        assert_eq!(r.next_read(), None);
        assert_eq!(r.finish(0).segments().clone(), [(1, 0)].into_iter().collect());
    }

    #[test]
    fn a_reused_segment_ends_at_its_own_records_never_an_earlier_lifes() {
        // File A lived as segment 3 (four records), then was reused as
        // segment 7: two records written over its start.
        let old = image_of(life(3), &[(ext(1, 1), b"a"), (ext(1, 2), b"b"), (ext(2, 5), b"c"), (ext(1, 3), b"d")]);
        let mut a = old.clone();
        overwrite(&mut a, &image_of(life(7), &[(ext(1, 10), b"new"), (ext(1, 11), b"new too")]));
        // File B: segment 3's life over version-2 records of an older binary.
        let mut b = [
            crate::tests::encode_v2(ext(1, 4), b"v2"),
            crate::tests::encode_v2(ext(1, 5), b"v2"),
            crate::tests::encode_v2(ext(1, 6), b"v2"),
        ]
        .concat();
        overwrite(&mut b, &image_of(life(8), &[(ext(1, 12), b"x")]));
        // File C: reused as segment 9, but the earlier life (segment 4) had
        // a record at the new tail whose sequence... is another salt's: a
        // record of segment 9 from another life (stale or forged) ends it too.
        let mut c = image_of(life(4), &[(ext(1, 20), b"p"), (ext(1, 21), b"q")]);
        overwrite(&mut c, &image_of(life(9), &[(ext(1, 13), b"y")]));
        let forged = image_of(SegmentBinding { segment: 9, salt: 1 }, &[(ext(1, 22), b"forged")]);
        c[4096..8192].copy_from_slice(&forged);
        // File D: reused as segment 10, nothing of its new life written
        // yet: the earlier life's first record ends it at once.
        let d = image_of(life(5), &[(ext(1, 30), b"z")]);
        let core = recover_from(1, &[(7, a), (8, b), (9, c), (10, d)], 0);
        assert_eq!(core.segments().clone(), [(7, 2 * 4096), (8, 4096), (9, 4096), (10, 0)].into_iter().collect());
        assert_eq!(core.locate(ext(1, 10)), Some(Location { segment: 7, data_pos: HEADER_LEN, len: 3 }));
        assert!(core.locate(ext(1, 11)).is_some());
        assert!(core.locate(ext(1, 12)).is_some());
        assert!(core.locate(ext(1, 13)).is_some());
        for (e, why) in [
            (ext(2, 5), "segment 3's record after segment 7's tail"),
            (ext(1, 3), "segment 3's record after segment 7's tail"),
            (ext(1, 5), "a version-2 record after a version-3 one"),
            (ext(1, 6), "a version-2 record after a version-3 one"),
            (ext(1, 22), "segment 9's sequence with another salt"),
            (ext(1, 21), "after a record of another life"),
            (ext(1, 30), "segment 5's record in segment 10"),
        ] {
            assert_eq!(core.locate(e), None, "{e:?}: {why}");
        }
        // The records themselves are whole: read under their own life they recover.
        let again = recover_from(1, &[(3, old)], 0);
        assert!(again.locate(ext(1, 3)).is_some(), "the test's stale records are whole ones");
        // New segments never reuse a sequence.
        assert_eq!(core.next_segment(), 11);
    }

    #[test]
    fn a_record_of_another_segment_ends_the_segment_and_spares_raise_the_next_sequence() {
        // Segment 2 holds one record of its own, then one bound to segment
        // 3 (whole, CRC good), then another of its own.
        let seg = [
            image_of(life(2), &[(ext(1, 1), b"one")]),
            image_of(life(3), &[(ext(1, 2), b"two")]),
            image_of(life(2), &[(ext(1, 3), b"three")]),
        ]
        .concat();
        let mut r = LogRecovery::new(1, MAX);
        // Spare files were last used as segments 5 and 4.
        r.spare(5);
        r.spare(4);
        r.begin(2, seg.len() as u64);
        while let Some((pos, len)) = r.next_read() {
            r.got(&seg[pos as usize..(pos + len) as usize]);
        }
        let mut c = r.finish(0);
        assert_eq!(c.segments().clone(), [(2, 4096)].into_iter().collect());
        assert!(c.locate(ext(1, 1)).is_some());
        assert_eq!(c.locate(ext(1, 2)), None, "bound to segment 3");
        assert_eq!(c.locate(ext(1, 3)), None, "after it");
        // Past the spares' last sequence, though no segment has it.
        assert_eq!(c.next_segment(), 6);
        let f = c.floor_wanted().unwrap();
        c.floor_persisted(f);
        assert_eq!(c.append(None, 1), AppendStep::CreateSegment(6));
        c.segment_created(6);
        assert_eq!(c.releasable(), vec![2]);
        c.released(2);
        assert_eq!(write(&mut c, None, 1).segment, 6);
        // Spares alone (every segment released before the restart).
        let mut r = LogRecovery::new(1, MAX);
        r.spare(9);
        assert_eq!(r.finish(0).next_segment(), 10);
    }

    /// A small deterministic generator (xorshift64*), so failures replay.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random interleavings of appends, write completions, sync rounds and
    /// questions: a ticket is reported durable only if a successful round
    /// started after its write completed and synced its segment; it fails
    /// only if the round covering it failed; every ticket is answered once
    /// rounds stop; no segment holding a live extent is released.
    /// A record placed in the random test: in flight, written with its
    /// ticket number, or failed to write.
    #[derive(Clone, Copy)]
    enum Placed {
        InFlight,
        Written(u64),
        WriteFailed,
    }

    /// What a ticket must be answered, from the test's own model: `None`
    /// pending, else the outcome. Its covering round decides unless a
    /// record placed before it in its segment failed (an error) or is not
    /// yet durable (pending).
    fn expected(
        n: u64,
        seg: u64,
        pos: u64,
        placed: &BTreeMap<(u64, u64), Placed>,
        history: &[(u64, (u64, u64), Vec<u64>, bool)],
    ) -> Option<bool> {
        let cover = |n: u64| history.iter().find(|(_, (lo, hi), _, _)| *lo < n && n <= *hi).map(|h| h.3);
        match cover(n) {
            None => return None,
            Some(false) => return Some(false),
            Some(true) => {}
        }
        let mut unsettled = false;
        for (_, p) in placed.range((seg, 0)..(seg, pos)) {
            match *p {
                Placed::WriteFailed => return Some(false),
                Placed::InFlight => unsettled = true,
                Placed::Written(m) => match cover(m) {
                    Some(false) => return Some(false),
                    None => unsettled = true,
                    Some(true) => {}
                },
            }
        }
        (!unsettled).then_some(true)
    }

    #[test]
    fn random_interleavings_never_report_an_unsynced_write_durable() {
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut c = open(1);
            c.segment_max = 8 * 4096;
            let mut step = 0u64;
            // Planned writes; completed tickets with their completion step.
            let mut planned: Vec<PendingWrite> = Vec::new();
            let mut waiting: Vec<(Ticket, u64)> = Vec::new();
            // The running round: its start step, the tickets it covers.
            let mut round: Option<(SyncRound, u64)> = None;
            // Finished rounds: (start step, covers, segments, ok).
            let mut history: Vec<(u64, (u64, u64), Vec<u64>, bool)> = Vec::new();
            let mut durable_extents: Vec<ExtentId> = Vec::new();
            let mut answered = 0u64;
            let mut given = 0u64;
            let mut placed: BTreeMap<(u64, u64), Placed> = BTreeMap::new();
            for _ in 0..400 {
                step += 1;
                match rng.below(8) {
                    0 | 1 => {
                        let len = rng.below(3 * 4096);
                        let name = (rng.below(4) == 0).then(|| ext(2, rng.below(50) + 1));
                        loop {
                            match c.append(name, len) {
                                AppendStep::Write(w) => {
                                    placed.insert((w.segment, w.pos), Placed::InFlight);
                                    planned.push(w);
                                    break;
                                }
                                AppendStep::CreateSegment(s) => c.segment_created(s),
                                AppendStep::PersistFloor(f) => c.floor_persisted(f),
                                AppendStep::Held(_) => break,
                            }
                        }
                    }
                    2 if !planned.is_empty() => {
                        let w = planned.swap_remove(rng.below(planned.len() as u64) as usize);
                        let at = (w.segment, w.pos);
                        let ok = rng.below(6) != 0;
                        let r = if ok { Ok(()) } else { Err(LogIoError::Io) };
                        match c.write_done(w, r) {
                            Some(t) => {
                                given += 1;
                                assert_eq!(t.number(), given, "tickets in completion order");
                                placed.insert(at, Placed::Written(given));
                                waiting.push((t, step));
                            }
                            None => {
                                assert!(!ok);
                                placed.insert(at, Placed::WriteFailed);
                            }
                        }
                    }
                    3 if round.is_none() => {
                        if let Some(r) = c.start_sync() {
                            round = Some((r, step));
                        } else {
                            assert!(waiting.iter().all(|(t, _)| t.number() <= c.settled_upto));
                        }
                    }
                    4 => {
                        if let Some((r, at)) = round.take() {
                            let ok = rng.below(4) != 0;
                            history.push((at, r.covers(), r.segments.clone(), ok));
                            c.sync_done(r, if ok { Ok(()) } else { Err(LogIoError::Io) });
                        }
                    }
                    5 | 6 if !waiting.is_empty() => {
                        let (t, done_at) = waiting.swap_remove(rng.below(waiting.len() as u64) as usize);
                        let (n, seg, e, pos) = (t.number(), t.segment(), t.extent(), t.pos);
                        let want = expected(n, seg, pos, &placed, &history);
                        match c.durable(t) {
                            Durable::Pending(t) => {
                                assert_eq!(want, None, "seed {seed}: pending although its round and every earlier record settled");
                                waiting.push((t, done_at));
                            }
                            Durable::Done(r) => {
                                answered += 1;
                                let cover = history
                                    .iter()
                                    .find(|(_, (lo, hi), _, _)| *lo < n && n <= *hi)
                                    .expect("answered only once a round covering it finished");
                                assert!(cover.0 > done_at, "the round covering it started after its write completed");
                                assert_eq!(
                                    Some(r.is_ok()),
                                    want,
                                    "seed {seed}: the answer is its round's outcome, an error past a failed record"
                                );
                                if r.is_ok() {
                                    assert!(cover.2.contains(&seg), "its segment was synced");
                                    durable_extents.push(e);
                                } else {
                                    assert_eq!(c.locate(e), None);
                                }
                            }
                        }
                    }
                    7 => {
                        // The destager finishes with some durable extents.
                        if !durable_extents.is_empty() {
                            let e = durable_extents.swap_remove(rng.below(durable_extents.len() as u64) as usize);
                            c.forget(e);
                        }
                        for s in c.releasable() {
                            assert_ne!(s, c.current());
                            for w in &planned {
                                assert_ne!(w.segment, s, "a planned write's segment is not released");
                            }
                            for (t, _) in &waiting {
                                assert_ne!(t.segment(), s, "a waiting write's segment is not released");
                            }
                            c.released(s);
                        }
                    }
                    _ => {}
                }
            }
            // Drain: finish writes and rounds until every ticket is answered.
            for w in planned.drain(..) {
                let at = (w.segment, w.pos);
                if let Some(t) = c.write_done(w, Ok(())) {
                    given += 1;
                    placed.insert(at, Placed::Written(given));
                    waiting.push((t, step));
                }
            }
            step += 1;
            if let Some((r, at)) = round.take() {
                history.push((at, r.covers(), r.segments.clone(), true));
                c.sync_done(r, Ok(()));
            }
            step += 1;
            if let Some(r) = c.start_sync() {
                history.push((step, r.covers(), r.segments.clone(), true));
                c.sync_done(r, Ok(()));
            }
            for (t, done_at) in waiting.drain(..) {
                let (n, seg, pos) = (t.number(), t.segment(), t.pos);
                let want = expected(n, seg, pos, &placed, &history);
                let Durable::Done(r) = c.durable(t) else { panic!("seed {seed}: ticket {n} unanswered after the last round") };
                let cover = history.iter().find(|(_, (lo, hi), _, _)| *lo < n && n <= *hi).unwrap();
                assert!(cover.0 > done_at, "seed {seed}");
                assert_eq!(Some(r.is_ok()), want, "seed {seed}");
                answered += 1;
            }
            assert_eq!(answered, given, "seed {seed}: every ticket answered once");
            assert!(c.failed.is_empty(), "seed {seed}: failures kept only until answered");
        }
    }
}
