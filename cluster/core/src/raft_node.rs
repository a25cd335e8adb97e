//! The raft-rs node that orders metadata commands. A single node is a
//! one-voter group: the same code path a cluster uses.
//!
//! Sans-I/O: the caller persists what [`RaftNode::ready`] hands out
//! (entries and hard state, synced), then calls [`RaftNode::persisted`],
//! which returns the entries that are now committed, for it to apply, and
//! queues the messages that may now go to the other voters
//! ([`RaftNode::take_messages`]; a one-voter group has none).
//!
//! A proposal is identified by the (term, index) its entry got
//! ([`Proposed`]): after a leader change another entry can take the same
//! index, so only an applied entry with both equal is the proposal's
//! (see [`crate::waiters`]).

use raft::eraftpb::{Entry, HardState, Message, Snapshot};
use raft::storage::MemStorage;
use raft::{Config, RawNode};

pub use raft::eraftpb::Entry as RaftEntry;
pub use raft::eraftpb::Message as RaftMessage;
pub use raft::eraftpb::MessageType as RaftMessageType;
pub use raft::eraftpb::{ConfChangeSingle, ConfChangeTransition, ConfChangeType, ConfChangeV2, ConfState};

/// Applied entries a multi-voter group keeps in memory for followers that
/// lag (a one-voter group keeps none).
pub const LOG_RETAIN_MULTI: u64 = 4096;

/// Election timeout of [`RaftNode::member`], in ticks (raft-rs randomises
/// it in [this, 2 * this)).
pub const MEMBER_ELECTION_TICK: usize = 20;

/// The most entry bytes one raft message carries (raft-rs
/// `max_size_per_msg`).
pub const MAX_SIZE_PER_MSG: u64 = 16 << 20;

/// Entry bytes a leader holds uncommitted before it refuses proposals
/// (raft-rs `max_uncommitted_size`; `[cluster] uncommitted_mib`'s default):
/// a leader that lost its quorum stops taking changes here instead of
/// growing its log until check quorum deposes it.
pub const UNCOMMITTED_MAX: u64 = 256 << 20;

pub struct RaftNode {
    raw: RawNode<MemStorage>,
    /// Messages for other voters, ready to send.
    outbox: Vec<Message>,
    /// Applied entries kept in memory after they are applied.
    retain: u64,
    /// The membership changes in the log above the applied index, by
    /// index (None: one this node cannot decode), noted as entries reach
    /// the log (at start, from [`RaftNode::ready`], and at
    /// [`RaftNode::propose_conf_change`]) and dropped once applied: what
    /// [`RaftNode::voter_halves`] reads, without going through the log.
    unapplied_confs: std::collections::BTreeMap<u64, Option<ConfChangeV2>>,
    /// The rejoin guard ([`RaftNode::arm_rejoin_guard`]): Some while
    /// armed, with the highest commit index a leader's append named.
    rejoin: Option<u64>,
    /// Vote and pre-vote requests the rejoin guard dropped.
    withheld_votes: u64,
    /// Heartbeats whose commit index was past this node's log.
    lost_log_heartbeats: u64,
    /// On a leader: followers that answered they lost their log.
    lost_log_peers: u64,
    /// While armed: the highest log position (last term, last index) and
    /// the highest term each voter's vote or pre-vote requests named since
    /// this start.
    heard: std::collections::BTreeMap<u64, ((u64, u64), u64)>,
}

/// Where a proposal's entry went: its term and index. Only the entry
/// applied at this index *with this term* is the proposal's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Proposed {
    pub term: u64,
    pub index: u64,
}

/// Work the caller must make durable before calling [`RaftNode::persisted`].
pub struct ReadyWork {
    ready: raft::Ready,
    pub entries: Vec<Entry>,
    pub hard_state: Option<HardState>,
    /// Entries committed before this ready's entries were persisted.
    pub committed: Vec<Entry>,
    /// A snapshot from the leader to install (multi-voter groups only; the
    /// caller must install it before [`RaftNode::persisted`]).
    pub snapshot: Option<Snapshot>,
    /// Messages that may only leave once this work is durable.
    persisted_messages: Vec<Message>,
    /// Answers to [`RaftNode::read_index`]: (the request's context, the
    /// read index). A read may be answered from this node's state once it
    /// has applied up to that index.
    pub read_states: Vec<(Vec<u8>, u64)>,
}

/// State recovered from storage on restart.
#[derive(Default)]
pub struct Recovered {
    pub hard_state: Option<HardState>,
    pub applied_index: u64,
    pub applied_term: u64,
    /// Persisted entries after `applied_index`, in order.
    pub entries: Vec<Entry>,
    /// Applied entries still stored, ending at `applied_index` (a
    /// multi-voter group keeps the last [`LOG_RETAIN_MULTI`] for followers
    /// that lag, across restarts too); empty for a one-voter group.
    pub retained: Vec<Entry>,
}

fn discard_logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

impl RaftNode {
    /// A one-voter group with `id` as its only voter, from recovered state.
    /// It campaigns at once (and, alone, wins).
    pub fn single(id: u64, rec: Recovered) -> Result<Self, raft::Error> {
        let mut node = Self::with_voters(id, &[id], rec)?;
        node.retain = 0;
        node.raw.campaign()?;
        Ok(node)
    }

    /// A member `id` of the group of `voters` (the same list on every
    /// member), from recovered state. It does not campaign: its election
    /// timer ([`RaftNode::tick`]) or [`RaftNode::campaign`] does.
    pub fn with_voters(id: u64, voters: &[u64], rec: Recovered) -> Result<Self, raft::Error> {
        Self::build(id, voters, rec, 10, false)
    }

    /// A member of a group of real processes (the multi-voter store):
    /// [`MEMBER_ELECTION_TICK`] ticks without a leader before an election
    /// (ticks of 100 ms: 2 to 4 s, so that a node starved of CPU for a
    /// second on a loaded machine does not depose a live leader), with
    /// pre-vote and check quorum ([`RaftNode::with_election_guards`]).
    pub fn member(id: u64, voters: &[u64], rec: Recovered) -> Result<Self, raft::Error> {
        Self::build(id, voters, rec, MEMBER_ELECTION_TICK, true)
    }

    /// As [`RaftNode::member`], refusing proposals (`ProposalDropped`)
    /// while it leads with more than `uncommitted_max` bytes of entries
    /// not yet committed (at least [`MAX_SIZE_PER_MSG`]; one entry is
    /// always taken): what a leader without a quorum holds is bounded.
    pub fn member_bounded(id: u64, voters: &[u64], rec: Recovered, uncommitted_max: u64) -> Result<Self, raft::Error> {
        let conf = ConfState::from((voters.to_vec(), vec![]));
        Self::build_conf(id, conf, rec, MEMBER_ELECTION_TICK, true, None, uncommitted_max)
    }

    /// As [`RaftNode::member`] (pre-vote, check quorum), with the election
    /// timeout fixed at `election_tick` ticks (at least
    /// [`MEMBER_ELECTION_TICK`]) instead of raft-rs's pick in
    /// [tick, 2 * tick), which draws from the thread's RNG: for the
    /// deterministic simulation (`tests/sim.rs`), whose seeded scheduler
    /// picks each member's timeout and jitters its ticks instead, so that a
    /// seed replays exactly.
    pub fn member_fixed_timeout(id: u64, voters: &[u64], rec: Recovered, election_tick: usize) -> Result<Self, raft::Error> {
        Self::build_with(id, voters, rec, MEMBER_ELECTION_TICK, true, Some(election_tick.max(MEMBER_ELECTION_TICK)))
    }

    /// As [`RaftNode::member`], with the configuration `conf` (the one
    /// the store recorded when it last applied a membership change, which
    /// may be joint; this node need not be in it).
    pub fn member_conf(id: u64, conf: ConfState, rec: Recovered) -> Result<Self, raft::Error> {
        Self::build_conf(id, conf, rec, MEMBER_ELECTION_TICK, true, None, UNCOMMITTED_MAX)
    }

    /// [`RaftNode::member_conf`] with [`RaftNode::member_bounded`]'s bound.
    pub fn member_conf_bounded(id: u64, conf: ConfState, rec: Recovered, uncommitted_max: u64) -> Result<Self, raft::Error> {
        Self::build_conf(id, conf, rec, MEMBER_ELECTION_TICK, true, None, uncommitted_max)
    }

    fn build(id: u64, voters: &[u64], rec: Recovered, election_tick: usize, guards: bool) -> Result<Self, raft::Error> {
        Self::build_with(id, voters, rec, election_tick, guards, None)
    }

    fn build_with(
        id: u64,
        voters: &[u64],
        rec: Recovered,
        election_tick: usize,
        guards: bool,
        fixed_timeout: Option<usize>,
    ) -> Result<Self, raft::Error> {
        Self::build_conf(id, ConfState::from((voters.to_vec(), vec![])), rec, election_tick, guards, fixed_timeout, UNCOMMITTED_MAX)
    }

    fn build_conf(
        id: u64,
        conf_state: ConfState,
        rec: Recovered,
        election_tick: usize,
        guards: bool,
        fixed_timeout: Option<usize>,
        uncommitted_max: u64,
    ) -> Result<Self, raft::Error> {
        let conf = || conf_state.clone();
        let storage = MemStorage::new_with_conf_state(conf());
        {
            let mut w = storage.wl();
            // The retained applied entries, if they end at the applied
            // index: the log starts after the first of them (its index and
            // term stand as the snapshot's), so a lagging follower can be
            // sent the rest.
            let retained = match rec.retained.last() {
                Some(l) if l.index == rec.applied_index && rec.applied_index > 0 => &rec.retained[..],
                _ => &[],
            };
            if retained.first().is_some_and(|f| f.index == 1) {
                // The whole log from its first entry: nothing stands as a
                // snapshot (the storage starts at index 0, term 0), so a
                // follower that has nothing can still be sent entry 1
                // (else it would need a snapshot, which the store cannot
                // install: found by `tests/sim.rs`).
                w.append(retained)?;
            } else if let Some(first) = retained.first() {
                let mut snap = Snapshot::default();
                snap.mut_metadata().index = first.index;
                snap.mut_metadata().term = first.term;
                snap.mut_metadata().set_conf_state(conf());
                w.apply_snapshot(snap)?;
                if retained.len() > 1 {
                    w.append(&retained[1..])?;
                }
            } else if rec.applied_index > 0 {
                let mut snap = Snapshot::default();
                snap.mut_metadata().index = rec.applied_index;
                snap.mut_metadata().term = rec.applied_term;
                snap.mut_metadata().set_conf_state(conf());
                w.apply_snapshot(snap)?;
            }
            if !rec.entries.is_empty() {
                w.append(&rec.entries)?;
            }
            if let Some(hs) = rec.hard_state {
                let mut hs = hs;
                hs.commit = hs.commit.max(rec.applied_index);
                if hs.term < rec.applied_term {
                    hs.term = rec.applied_term;
                }
                w.set_hardstate(hs);
            }
        }
        let cfg = Config {
            id,
            election_tick,
            heartbeat_tick: 3,
            pre_vote: guards,
            check_quorum: guards,
            applied: rec.applied_index,
            max_size_per_msg: MAX_SIZE_PER_MSG,
            max_inflight_msgs: 256,
            max_uncommitted_size: uncommitted_max.max(MAX_SIZE_PER_MSG),
            min_election_tick: fixed_timeout.unwrap_or(0),
            max_election_tick: fixed_timeout.map_or(0, |t| t + 1),
            ..Default::default()
        };
        let raw = RawNode::new(&cfg, storage, &discard_logger())?;
        let mut node = RaftNode {
            raw,
            outbox: Vec::new(),
            retain: LOG_RETAIN_MULTI,
            unapplied_confs: Default::default(),
            rejoin: None,
            withheld_votes: 0,
            lost_log_heartbeats: 0,
            lost_log_peers: 0,
            heard: Default::default(),
        };
        node.note_entries(&rec.entries);
        Ok(node)
    }

    /// Turns on the election guards a group of real processes needs: a
    /// node that was cut off (or restarted) asks before it disrupts the
    /// term (pre-vote, Raft thesis section 9.6), and a leader that no
    /// longer hears a quorum steps down (check quorum, section 6.2). Off
    /// by default: the in-memory tests elect by explicit `campaign`.
    pub fn with_election_guards(mut self) -> Self {
        self.raw.raft.pre_vote = true;
        self.raw.raft.set_check_quorum(true);
        self
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == raft::StateRole::Leader
    }

    /// The leader this node knows of (0: none).
    pub fn leader_id(&self) -> u64 {
        self.raw.raft.leader_id
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The voters of the configuration raft is in (its ConfState), in
    /// ascending order; in a joint configuration, both halves.
    pub fn voters(&self) -> Vec<u64> {
        let cs = self.raw.raft.prs().conf().to_conf_state();
        let mut v: Vec<u64> = cs.get_voters().iter().chain(cs.get_voters_outgoing()).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    pub fn last_index(&self) -> u64 {
        self.raw.raft.raft_log.last_index()
    }

    /// Proposes `data` on the leader; returns the (term, index) its entry
    /// has. Refused (`ProposalDropped`) on a node that is not the leader:
    /// raft-rs would forward it and return no index to wait on.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<Proposed, raft::Error> {
        if !self.is_leader() {
            return Err(raft::Error::ProposalDropped);
        }
        let before = self.last_index();
        self.raw.propose(Vec::new(), data)?;
        let index = self.last_index();
        if index != before + 1 {
            return Err(raft::Error::ProposalDropped);
        }
        let term = self.raw.raft.raft_log.term(index)?;
        Ok(Proposed { term, index })
    }

    /// Proposes a membership change on the leader (`context` goes into the
    /// entry: the caller's tag, to recognise its application). Refused
    /// (`ProposalDropped`) on a follower and while another change is
    /// pending (raft-rs would turn it into an empty entry and say Ok).
    pub fn propose_conf_change(&mut self, context: Vec<u8>, cc: ConfChangeV2) -> Result<Proposed, raft::Error> {
        if !self.is_leader() || self.has_pending_conf() {
            return Err(raft::Error::ProposalDropped);
        }
        let before = self.last_index();
        self.raw.propose_conf_change(context, cc.clone())?;
        let index = self.last_index();
        if index != before + 1 || self.raw.raft.pending_conf_index != index {
            return Err(raft::Error::ProposalDropped);
        }
        self.unapplied_confs.insert(index, Some(cc));
        let term = self.raw.raft.raft_log.term(index)?;
        Ok(Proposed { term, index })
    }

    /// A membership change proposed and not yet applied.
    pub fn has_pending_conf(&self) -> bool {
        self.raw.raft.has_pending_conf()
    }

    /// Applies a committed membership change (in log order, once): the
    /// configuration it leads to (joint after an explicit enter).
    pub fn apply_conf_change(&mut self, cc: &ConfChangeV2) -> Result<ConfState, raft::Error> {
        let cs = self.raw.apply_conf_change(cc)?;
        // The storage's configuration is what snapshots carry.
        self.raw.mut_store().wl().set_conf_state(cs.clone());
        Ok(cs)
    }

    /// The configuration raft is in.
    pub fn conf_state(&self) -> ConfState {
        self.raw.raft.prs().conf().to_conf_state()
    }

    /// The voter sets a majority of each of which must hold a write
    /// cache extent before an entry naming it is proposed now: both
    /// halves of the configuration raft is in, and the halves of every
    /// configuration a membership change in the log and not yet applied
    /// leads to (raft-rs applies a change when it commits: an entry
    /// proposed after a pending change may commit, and be destaged, under
    /// the configuration that change makes). Ascending ids, no duplicates.
    /// The changes come from what this node noted as they reached its log
    /// (no entry is read back: cheap whatever the log's length).
    ///
    /// A change the log holds but this node cannot decode is counted as
    /// one that may remove anybody: the set of every known voter is
    /// replaced by each voter alone (nothing proposed then satisfies all).
    pub fn voter_halves(&self) -> Vec<Vec<u64>> {
        let cs = self.conf_state();
        let mut incoming: Vec<u64> = cs.get_voters().to_vec();
        let mut outgoing: Vec<u64> = cs.get_voters_outgoing().to_vec();
        let mut halves: Vec<Vec<u64>> = Vec::new();
        let note = |h: &[u64], halves: &mut Vec<Vec<u64>>| {
            if !h.is_empty() {
                let mut h = h.to_vec();
                h.sort_unstable();
                h.dedup();
                if !halves.contains(&h) {
                    halves.push(h);
                }
            }
        };
        note(&incoming, &mut halves);
        note(&outgoing, &mut halves);
        let applied = self.raw.raft.raft_log.applied;
        for cc in self.unapplied_confs.range(applied + 1..).map(|(_, cc)| cc) {
            let Some(cc) = cc else {
                // Undecodable: assume it may leave any one voter alone.
                let all: Vec<u64> = incoming.iter().chain(outgoing.iter()).copied().collect();
                for v in all {
                    note(&[v], &mut halves);
                }
                continue;
            };
            if cc.get_changes().is_empty() {
                // The leave of a joint configuration.
                outgoing.clear();
            } else {
                outgoing = incoming.clone();
                for c in cc.get_changes() {
                    match c.get_change_type() {
                        ConfChangeType::AddNode => {
                            if !incoming.contains(&c.node_id) {
                                incoming.push(c.node_id);
                            }
                        }
                        ConfChangeType::RemoveNode | ConfChangeType::AddLearnerNode => incoming.retain(|&v| v != c.node_id),
                    }
                }
            }
            note(&incoming, &mut halves);
            note(&outgoing, &mut halves);
        }
        halves
    }

    /// Notes the membership changes among `entries` (about to be in the
    /// log, replacing any from their first index on).
    fn note_entries(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        self.unapplied_confs.split_off(&first.index);
        use protobuf::Message as _;
        for e in entries.iter().filter(|e| e.get_entry_type() == raft::eraftpb::EntryType::EntryConfChangeV2) {
            self.unapplied_confs.insert(e.index, ConfChangeV2::parse_from_bytes(e.get_data()).ok());
        }
    }

    /// Whether the configuration is joint (a change entered, not left).
    pub fn is_joint(&self) -> bool {
        !self.conf_state().get_voters_outgoing().is_empty()
    }

    /// Asks for a read index (Raft thesis section 6.4, raft-rs
    /// `ReadOnlyOption::Safe`): the leader records its commit index and
    /// confirms with a quorum's heartbeat that it still leads; a follower
    /// asks its leader. The answer comes in a later
    /// [`ReadyWork::read_states`] with `ctx` (unique per request); none
    /// comes when there is no leader or the confirmation is lost (the
    /// caller times out).
    pub fn read_index(&mut self, ctx: Vec<u8>) {
        self.raw.read_index(ctx);
    }

    /// Whether the entry at the commit index is of the current term (a new
    /// leader has committed its first entry): raft-rs drops a leader's
    /// read index request until then.
    pub fn committed_in_term(&self) -> bool {
        let r = &self.raw.raft;
        r.raft_log.term(r.raft_log.committed).is_ok_and(|t| t == r.term)
    }

    /// Starts handing leadership to voter `to` (raft-rs `transfer_leader`:
    /// the leader stops taking proposals, brings `to` up to date and sends
    /// it TimeoutNow; it gives up after an election timeout).
    pub fn transfer_leader(&mut self, to: u64) {
        self.raw.transfer_leader(to);
    }

    pub fn tick(&mut self) {
        self.raw.tick();
    }

    /// The transport cannot reach voter `id` (raft-rs then probes it
    /// instead of streaming entries to it).
    pub fn report_unreachable(&mut self, id: u64) {
        self.raw.report_unreachable(id);
    }

    /// The transfer of the snapshot raft asked to send to `id` (a
    /// `MsgSnapshot`) ended: `ok` when the follower received and checked
    /// the whole image. raft-rs keeps that follower paused until told
    /// (then probes it again, from the snapshot's index on success).
    pub fn report_snapshot(&mut self, id: u64, ok: bool) {
        let status = if ok { raft::SnapshotStatus::Finish } else { raft::SnapshotStatus::Failure };
        self.raw.report_snapshot(id, status);
    }

    /// Keeps the last `retain` applied entries in memory for followers that
    /// lag (default [`LOG_RETAIN_MULTI`] for a multi-voter group); one
    /// further behind is sent a snapshot. At least 1.
    pub fn with_retain(mut self, retain: u64) -> Self {
        self.retain = retain.max(1);
        self
    }

    /// On the leader: each voter's matched index (the last entry raft
    /// knows it holds), ascending by id; empty on a follower, which does
    /// not track the others' progress.
    pub fn progress(&self) -> Vec<(u64, u64)> {
        if !self.is_leader() {
            return Vec::new();
        }
        let mut v: Vec<(u64, u64)> = self.raw.raft.prs().iter().map(|(id, pr)| (*id, pr.matched)).collect();
        v.sort_unstable();
        v
    }

    /// Starts an election now.
    pub fn campaign(&mut self) -> Result<(), raft::Error> {
        self.raw.campaign()
    }

    /// Hands a message from another voter to raft. While the rejoin guard
    /// is armed, a vote or pre-vote request from a candidate that has a
    /// log is dropped unless this node holds every entry a leader told it
    /// was committed ([`RaftNode::arm_rejoin_guard`]).
    pub fn step(&mut self, mut m: Message) -> Result<(), raft::Error> {
        let kind = m.get_msg_type();
        let (from, to) = (m.from, m.to);
        // A leader sends a heartbeat the commit index up to what this node
        // acknowledged before. Past this log's end, this node lost its log
        // (an emptied data directory rejoining under its id): raft-rs would
        // abort the process (`commit_to` out of range). Its commit stays,
        // the heartbeat still names the leader and term, and the answer is
        // marked rejected, which the leader takes as "this follower has
        // nothing of what it acknowledged" (below).
        let lost_log = kind == RaftMessageType::MsgHeartbeat && m.commit > self.last_index();
        if lost_log {
            self.lost_log_heartbeats += 1;
            m.commit = self.commit_index();
        }
        if kind == RaftMessageType::MsgHeartbeatResponse && m.reject && self.is_leader() {
            // The follower lost its log: raft-rs never moves a follower's
            // matched index back, so without this it would go on counting
            // the entries as held there and never send them again. From
            // nothing, probing (a lower matched index never lowers the
            // commit index).
            if let Some(pr) = self.raw.raft.mut_prs().get_mut(from) {
                pr.matched = 0;
                pr.become_probe();
                self.lost_log_peers += 1;
            }
        }
        if let Some(seen) = self.rejoin {
            let vote = matches!(kind, RaftMessageType::MsgRequestVote | RaftMessageType::MsgRequestPreVote);
            if vote && m.index > 0 && (self.last_index() == 0 || self.commit_index() < seen) {
                let pos = (m.log_term, m.index);
                // The sender's own term: a real request names it, a
                // pre-vote the one after it. Only real votes are held to
                // the term rule: failed pre-votes never raise a term, so
                // holding them to it could stall every candidate at one.
                let real = kind == RaftMessageType::MsgRequestVote;
                let its_term = if real { m.term } else { m.term.saturating_sub(1) };
                let e = self.heard.entry(from).or_insert((pos, its_term));
                *e = (e.0.max(pos), e.1.max(its_term));
                if !self.is_most_up_to_date(from, pos, real.then_some(m.term)) {
                    self.withheld_votes += 1;
                    return Ok(());
                }
            }
        }
        let leader_commit = (kind == RaftMessageType::MsgAppend).then_some(m.commit);
        self.raw.step(m)?;
        if lost_log {
            if let Some(r) = self.raw.raft.msgs.iter_mut().rev().find(|r| {
                r.get_msg_type() == RaftMessageType::MsgHeartbeatResponse && r.to == from && r.from == to
            }) {
                r.reject = true;
            }
        }
        if let (Some(seen), Some(c)) = (self.rejoin, leader_commit) {
            let seen = seen.max(c);
            self.rejoin = Some(seen);
            if seen > 0 && self.commit_index() >= seen {
                self.rejoin = None;
            }
        }
        if self.rejoin.is_some() && self.is_leader() {
            // Only a group whose logs were all empty elects an armed node.
            self.rejoin = None;
        }
        Ok(())
    }

    /// While armed: whether a candidate's log position `pos` (last term,
    /// last index) is at least that of every other voter, and (a real
    /// vote) its `term` above every term the others asked votes in, as
    /// their own requests
    /// since this start told it. Logs never lose committed entries, so
    /// such a candidate holds every entry committed before this node lost
    /// its state, whichever voters held it (Raft §5.4.3). And this node's
    /// earlier life voted only in terms some other voter reached (the
    /// candidate it voted for, or, for itself, a voter that granted it),
    /// so a term above all of theirs is one it never voted in: no second
    /// leader in a term (seed 12837 with `DUET_SIM_WIPE`, before the term
    /// rule: the wiped leader of term 2 voted again in term 2 for a node
    /// that had been cut off). A voter not heard (dead, cut off) may hold
    /// an entry alone with this node's earlier life: no vote.
    fn is_most_up_to_date(&self, candidate: u64, pos: (u64, u64), term: Option<u64>) -> bool {
        let cs = self.conf_state();
        let me = self.raw.raft.id;
        cs.get_voters().iter().chain(cs.get_voters_outgoing()).filter(|&&v| v != me).all(|v| {
            self.heard.get(v).is_some_and(|&(p, t)| pos >= p && (*v == candidate || term.is_none_or(|term| term > t)))
        })
    }

    /// Arms the rejoin guard, for a member of a multi-voter group that
    /// started with no raft state at all: it may be a voter whose disk was
    /// lost or emptied, which forgot the votes it cast and the entries it
    /// acknowledged (raft's safety rests on both being stable). Until it
    /// holds every entry up to the highest commit index a leader's append
    /// named, it votes (and pre-votes) for a candidate that has a log only
    /// if that candidate's log is at least as up to date as every other
    /// voter's, as their own requests since this start showed
    /// ([`RaftNode::is_most_up_to_date`]): a candidate missing an entry
    /// that only this node's earlier life and one other voter held would
    /// otherwise win with its vote and lose that acknowledged entry, and
    /// the term rule keeps it from voting twice in one term (found by the
    /// simulation with `DUET_SIM_WIPE`: nodes applying different entries
    /// at one index). A voter that is down keeps it from voting:
    /// the group waits for that voter rather than risk its entries.
    /// Candidates with an empty log (a group forming for the first time)
    /// get its vote as before (so that a group forms with one node down);
    /// that leaves a hole the simulation found: a node that never received
    /// an entry asking in a term this node's earlier life voted in
    /// (`docs/cluster.md`, "Not covered yet"). Disarmed for good once
    /// caught up ([`RaftNode::rejoin_guarded`] turns false); the caller
    /// keeps the armed state across restarts.
    pub fn arm_rejoin_guard(&mut self) {
        if self.rejoin.is_none() {
            self.rejoin = Some(0);
        }
    }

    /// Whether the rejoin guard is armed.
    pub fn rejoin_guarded(&self) -> bool {
        self.rejoin.is_some()
    }

    /// Vote and pre-vote requests the rejoin guard dropped so far.
    pub fn withheld_votes(&self) -> u64 {
        self.withheld_votes
    }

    /// Heartbeats that named a commit index past this node's last entry
    /// (its log was lost: see [`RaftNode::step`]).
    pub fn lost_log_heartbeats(&self) -> u64 {
        self.lost_log_heartbeats
    }

    /// On a leader: answers from followers that lost their log (each
    /// makes the leader send that follower everything again).
    pub fn lost_log_peers(&self) -> u64 {
        self.lost_log_peers
    }

    /// Messages for other voters that may be sent now.
    pub fn take_messages(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    /// The next piece of work, if any.
    pub fn ready(&mut self) -> Option<ReadyWork> {
        if !self.raw.has_ready() {
            return None;
        }
        let mut ready = self.raw.ready();
        self.outbox.extend(ready.take_messages());
        let persisted_messages = ready.take_persisted_messages();
        let committed = ready.take_committed_entries();
        let entries = ready.entries().clone();
        self.note_entries(&entries);
        let hard_state = ready.hs().cloned();
        let snapshot = if ready.snapshot().is_empty() { None } else { Some(ready.snapshot().clone()) };
        let read_states = ready.take_read_states().into_iter().map(|r| (r.request_ctx, r.index)).collect();
        Some(ReadyWork { ready, entries, hard_state, committed, snapshot, persisted_messages, read_states })
    }

    /// The caller has made `work` durable: returns the entries committed now.
    pub fn persisted(&mut self, mut work: ReadyWork) -> Result<Vec<Entry>, raft::Error> {
        {
            let store = self.raw.mut_store();
            let mut w = store.wl();
            if let Some(snap) = work.snapshot.take() {
                w.apply_snapshot(snap)?;
            }
            if !work.entries.is_empty() {
                w.append(&work.entries)?;
            }
            if let Some(hs) = &work.hard_state {
                w.set_hardstate(hs.clone());
            }
        }
        self.outbox.append(&mut work.persisted_messages);
        let mut light = self.raw.advance(work.ready);
        if let Some(c) = light.commit_index() {
            self.raw.mut_store().wl().mut_hard_state().commit = c;
        }
        self.outbox.extend(light.take_messages());
        let committed = light.take_committed_entries();
        Ok(committed)
    }

    /// Everything up to `index` is applied: lets raft release it (a
    /// multi-voter group keeps the last [`LOG_RETAIN_MULTI`] for followers).
    pub fn applied(&mut self, index: u64) {
        self.raw.advance_apply_to(index);
        self.unapplied_confs = self.unapplied_confs.split_off(&(index + 1));
        let upto = index.saturating_sub(self.retain);
        if upto == 0 {
            return;
        }
        let store = self.raw.mut_store();
        let _ = store.wl().compact(upto);
    }
}

/// Whether `holders` (the voters holding a write cache extent durably,
/// the taking node included) hold a majority of every voter set in
/// `halves` ([`RaftNode::voter_halves`]). Counting acknowledgements over
/// the union of a joint configuration's halves is not enough: while a
/// removal is joint, the leaving voter's copy could make the count, and
/// once it is gone one voter that stays may hold the write alone.
pub fn held_by_majorities(holders: &std::collections::BTreeSet<u64>, halves: &[Vec<u64>]) -> bool {
    halves.iter().all(|h| h.iter().filter(|v| holders.contains(v)).count() > h.len() / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joint_removal_needs_a_majority_of_each_half() {
        let set = |v: &[u64]| v.iter().copied().collect::<std::collections::BTreeSet<u64>>();
        let joint = [vec![1, 2], vec![1, 2, 3]];
        // 1 (taking) and 3 (leaving) are 2 of the 3 voters of the union,
        // but 1 alone of the two that stay.
        assert!(!held_by_majorities(&set(&[1, 3]), &joint));
        assert!(held_by_majorities(&set(&[1, 2]), &joint));
        assert!(held_by_majorities(&set(&[1, 2, 3]), &joint));
        // Not joint: one majority.
        assert!(held_by_majorities(&set(&[1, 3]), &[vec![1, 2, 3]]));
        // An add: 3 of the 4.
        let add = [vec![1, 2, 3], vec![1, 2, 3, 4]];
        assert!(!held_by_majorities(&set(&[1, 2]), &add));
        assert!(held_by_majorities(&set(&[1, 2, 4]), &add));
        // A single voter.
        assert!(held_by_majorities(&set(&[1]), &[vec![1]]));
        assert!(!held_by_majorities(&set(&[2]), &[vec![1]]));
    }

    fn drive(node: &mut RaftNode) -> Vec<Entry> {
        let mut out = Vec::new();
        while let Some(w) = node.ready() {
            out.extend(w.committed.clone());
            let c = node.persisted(w).unwrap();
            out.extend(c);
        }
        out
    }

    /// Delivers messages between `nodes` (ids 1..) until none is left (at
    /// most `rounds` rounds); hands each node's committed entries with
    /// data to `applied`.
    fn pump(nodes: &mut [RaftNode], rounds: usize, mut applied: impl FnMut(usize, Vec<u8>)) {
        for _ in 0..rounds {
            let mut msgs = Vec::new();
            for (i, n) in nodes.iter_mut().enumerate() {
                for e in drive(n) {
                    if !e.data.is_empty() {
                        applied(i, e.data.to_vec());
                    }
                }
                msgs.extend(n.take_messages());
            }
            if msgs.is_empty() {
                break;
            }
            for m in msgs {
                let to = m.to as usize - 1;
                nodes[to].step(m).unwrap();
            }
        }
    }

    /// [`pump`] over the links `up` allows (messages of other links are
    /// lost); a node no link reaches is not driven either.
    fn pump_links(nodes: &mut [RaftNode], rounds: usize, up: impl Fn(u64, u64) -> bool, applied: &mut [Vec<Vec<u8>>]) {
        for _ in 0..rounds {
            let mut msgs = Vec::new();
            for (i, n) in nodes.iter_mut().enumerate() {
                for e in drive(n) {
                    if !e.data.is_empty() {
                        applied[i].push(e.data.to_vec());
                    }
                }
                msgs.extend(n.take_messages());
            }
            msgs.retain(|m| up(m.from, m.to));
            if msgs.is_empty() {
                break;
            }
            for m in msgs {
                let to = m.to as usize - 1;
                nodes[to].step(m).unwrap();
            }
        }
    }

    /// One tick of every node, then [`pump_links`] over every link.
    fn tick_and_pump(nodes: &mut [RaftNode], applied: &mut [Vec<Vec<u8>>]) {
        for n in nodes.iter_mut() {
            n.tick();
        }
        pump_links(nodes, 20, |_, _| true, applied);
    }

    /// Node 3 acknowledged "x" with the leader (node 1) while node 2 was
    /// cut off; then node 3 loses its disk and starts empty under its old
    /// id, and node 1 dies. Node 2, which never got "x", asks for votes.
    /// Returns the nodes and what each applied.
    fn rejoin_after_a_lost_disk(armed: bool) -> (Vec<RaftNode>, Vec<Vec<Vec<u8>>>) {
        let voters = [1, 2, 3];
        let mut nodes: Vec<RaftNode> =
            voters.iter().map(|&id| RaftNode::with_voters(id, &voters, Recovered::default()).unwrap()).collect();
        let mut applied = vec![Vec::new(); 3];
        let all = |_: u64, _: u64| true;
        nodes[0].campaign().unwrap();
        pump_links(&mut nodes, 20, all, &mut applied);
        assert!(nodes[0].is_leader());
        nodes[0].propose(b"a".to_vec()).unwrap();
        pump_links(&mut nodes, 20, all, &mut applied);
        let without_2 = |f: u64, t: u64| f != 2 && t != 2;
        let x = nodes[0].propose(b"x".to_vec()).unwrap();
        pump_links(&mut nodes, 20, without_2, &mut applied);
        assert!(nodes[0].commit_index() >= x.index, "x is committed on 1 and 3");
        assert!(applied[0].contains(&b"x".to_vec()));
        // Node 3's disk is gone: it starts with nothing.
        nodes[2] = RaftNode::with_voters(3, &voters, Recovered::default()).unwrap();
        if armed {
            nodes[2].arm_rejoin_guard();
        }
        applied[2].clear();
        let without_1 = |f: u64, t: u64| f != 1 && t != 1;
        nodes[1].campaign().unwrap();
        pump_links(&mut nodes, 20, without_1, &mut applied);
        (nodes, applied)
    }

    /// Without the rejoin guard the emptied voter elects a leader that
    /// lacks a committed entry: "x" is lost. With it, the vote is withheld
    /// (no leader while two of three voters' data is gone), and once node 1
    /// is back it leads again, node 3 catches up, holds "x" and is
    /// disarmed.
    #[test]
    fn an_emptied_voter_withholds_its_vote_until_it_caught_up() {
        let (nodes, _) = rejoin_after_a_lost_disk(false);
        assert!(nodes[1].is_leader(), "unguarded, the empty node votes for node 2");
        use raft::Storage;
        let last = nodes[1].last_index();
        let log = nodes[1].raw.store().entries(1, last + 1, None, raft::GetEntriesContext::empty(false)).unwrap();
        assert!(!log.iter().any(|e| e.data.as_ref() == b"x"), "the new leader's log has no x: the committed entry is gone");

        let (mut nodes, mut applied) = rejoin_after_a_lost_disk(true);
        assert!(!nodes[1].is_leader(), "the armed empty node gave node 2 no vote");
        assert!(nodes[2].withheld_votes() >= 1);
        assert!(nodes[2].rejoin_guarded());
        // Node 1 is back and asks for votes: node 2 grants (node 1's log is
        // the longer), node 3 still withholds (it has nothing yet).
        // Election timeouts are random: tick until every node applied x and
        // node 3 has caught up (node 2 cannot win without x: node 1 refuses
        // its shorter log, node 3 wants a log as long as node 1's; had it
        // won, x would never reach node 2).
        let x = b"x".to_vec();
        for _ in 0..1000 {
            tick_and_pump(&mut nodes, &mut applied);
            if applied.iter().all(|a| a.contains(&x)) && !nodes[2].rejoin_guarded() {
                break;
            }
        }
        assert!(nodes[2].lost_log_heartbeats() > 0, "node 1 remembered node 3 at index 3");
        assert!(
            !nodes[2].rejoin_guarded(),
            "caught up to the leader's commit index: disarmed (node 3 at {}/{}, node 1 at {}/{})",
            nodes[2].last_index(),
            nodes[2].commit_index(),
            nodes[0].last_index(),
            nodes[0].commit_index()
        );
        assert!(applied[2].contains(&b"x".to_vec()) && applied[1].contains(&b"x".to_vec()), "{applied:?}");
    }

    /// A follower emptied while its group is idle (no proposal to make
    /// the leader append again): the leader's heartbeats name the commit
    /// index it acknowledged before; it answers "lost", the leader sends
    /// it everything from the first entry, and it is disarmed.
    #[test]
    fn an_emptied_follower_of_an_idle_group_is_sent_everything_again() {
        let voters = [1, 2, 3];
        let mut nodes: Vec<RaftNode> =
            voters.iter().map(|&id| RaftNode::with_voters(id, &voters, Recovered::default()).unwrap()).collect();
        let mut applied = vec![Vec::new(); 3];
        let all = |_: u64, _: u64| true;
        nodes[0].campaign().unwrap();
        pump_links(&mut nodes, 20, all, &mut applied);
        nodes[0].propose(b"a".to_vec()).unwrap();
        pump_links(&mut nodes, 20, all, &mut applied);
        assert!(applied.iter().all(|a| a == &vec![b"a".to_vec()]));
        nodes[2] = RaftNode::with_voters(3, &voters, Recovered::default()).unwrap();
        nodes[2].arm_rejoin_guard();
        applied[2].clear();
        for _ in 0..10 {
            tick_and_pump(&mut nodes, &mut applied);
        }
        assert!(nodes[0].is_leader());
        assert!(nodes[2].lost_log_heartbeats() > 0 && nodes[0].lost_log_peers() > 0);
        assert_eq!(applied[2], vec![b"a".to_vec()], "node 3 was sent the log again");
        assert!(!nodes[2].rejoin_guarded());
    }

    /// A group forming for the first time elects a leader when every node
    /// is armed (candidates have empty logs), and the first append that
    /// names a commit index the node holds disarms it; an armed node that
    /// holds what it was told was committed votes again (no deadlock when
    /// the first leader dies before any commit reaches the others).
    #[test]
    fn a_group_of_armed_empty_nodes_forms_and_disarms() {
        let voters = [1, 2, 3];
        let mut nodes: Vec<RaftNode> =
            voters.iter().map(|&id| RaftNode::with_voters(id, &voters, Recovered::default()).unwrap()).collect();
        for n in nodes.iter_mut() {
            n.arm_rejoin_guard();
        }
        let mut applied = vec![Vec::new(); 3];
        nodes[0].campaign().unwrap();
        // Two rounds elect node 1 (the requests, the votes); then its
        // first entry reaches 2 and 3 and their answers do not come back:
        // nothing is committed anywhere.
        pump_links(&mut nodes, 2, |_, _| true, &mut applied);
        let out_of_1 = |f: u64, _: u64| f == 1;
        pump_links(&mut nodes, 20, out_of_1, &mut applied);
        assert!(nodes[0].is_leader());
        assert!(nodes[1].last_index() >= 1 && nodes[1].commit_index() == 0);
        // Node 1 dies: 2 asks, 3 (armed, holding all it was told was
        // committed) votes.
        let without_1 = |f: u64, t: u64| f != 1 && t != 1;
        nodes[1].campaign().unwrap();
        pump_links(&mut nodes, 20, without_1, &mut applied);
        assert!(nodes[1].is_leader(), "no deadlock among armed nodes");
        assert_eq!(nodes[2].withheld_votes(), 0);
        nodes[1].propose(b"y".to_vec()).unwrap();
        pump_links(&mut nodes, 20, without_1, &mut applied);
        assert!(!nodes[1].rejoin_guarded() && !nodes[2].rejoin_guarded());
        assert!(applied[2].contains(&b"y".to_vec()));
    }

    /// The halves a write must be held by count a change proposed and
    /// not yet applied, and stay those of the joint configuration once it
    /// applies.
    #[test]
    fn voter_halves_count_a_pending_change() {
        let mut n = RaftNode::single(1, Recovered::default()).unwrap();
        let last = drive(&mut n).last().map(|e| e.index).unwrap_or(0);
        n.applied(last);
        assert!(n.is_leader());
        assert_eq!(n.voter_halves(), vec![vec![1]]);
        let mut cc = ConfChangeV2::default();
        cc.set_transition(ConfChangeTransition::Explicit);
        let mut add = ConfChangeSingle::default();
        add.set_change_type(ConfChangeType::AddNode);
        add.node_id = 2;
        cc.set_changes(vec![add].into());
        let at = n.propose_conf_change(b"t".to_vec(), cc.clone()).unwrap();
        assert!(n.has_pending_conf());
        assert_eq!(n.voter_halves(), vec![vec![1], vec![1, 2]]);
        // Committed (the one voter) and applied: joint, nothing pending.
        drive(&mut n);
        n.apply_conf_change(&cc).unwrap();
        n.applied(at.index);
        assert!(!n.has_pending_conf());
        assert_eq!(n.voter_halves(), vec![vec![1, 2], vec![1]]);
    }

    #[test]
    fn single_voter_commits_after_persist() {
        let mut n = RaftNode::single(1, Recovered::default()).unwrap();
        drive(&mut n);
        assert!(n.is_leader());
        let idx = n.propose(b"a".to_vec()).unwrap().index;
        let p2 = n.propose(b"b".to_vec()).unwrap();
        let idx2 = p2.index;
        assert_eq!(idx2, idx + 1);
        assert_eq!(p2.term, n.term());
        let committed = drive(&mut n);
        let data: Vec<&[u8]> = committed.iter().filter(|e| !e.data.is_empty()).map(|e| &e.data[..]).collect();
        assert_eq!(data, vec![&b"a"[..], &b"b"[..]]);
        assert_eq!(committed.last().unwrap().index, idx2);
        assert_eq!(committed.last().unwrap().term, p2.term);
        n.applied(idx2);
        assert!(n.take_messages().is_empty(), "a one-voter group sends nothing");
        assert_eq!(n.voters(), vec![1]);
        assert_eq!(n.leader_id(), 1);
        assert_eq!(n.progress(), vec![(1, idx2)]);
    }

    /// Three voters in memory: messages routed by hand. Nobody campaigns
    /// until its election timer runs out; one leader emerges, a follower
    /// refuses proposals, and every voter applies the leader's entry.
    #[test]
    fn three_voters_elect_by_ticks_and_replicate() {
        let voters = [1, 2, 3];
        let mut nodes: Vec<RaftNode> = voters
            .iter()
            .map(|&id| RaftNode::with_voters(id, &voters, Recovered::default()).unwrap().with_election_guards())
            .collect();
        let mut applied: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
        let pump = |nodes: &mut Vec<RaftNode>, applied: &mut Vec<Vec<Vec<u8>>>| pump(nodes, 20, |i, d| applied[i].push(d));
        pump(&mut nodes, &mut applied);
        assert!(nodes.iter().all(|n| n.leader_id() == 0), "nobody campaigns before its timer");
        for _ in 0..30 {
            for n in nodes.iter_mut() {
                n.tick();
            }
            pump(&mut nodes, &mut applied);
            if nodes.iter().any(|n| n.is_leader()) {
                break;
            }
        }
        let leader = nodes.iter().position(|n| n.is_leader()).expect("a leader within 30 ticks");
        pump(&mut nodes, &mut applied);
        let lid = nodes[leader].raw.raft.id;
        assert!(nodes.iter().all(|n| n.leader_id() == lid));
        let follower = (leader + 1) % 3;
        assert!(matches!(nodes[follower].propose(b"no".to_vec()), Err(raft::Error::ProposalDropped)));
        let p = nodes[leader].propose(b"yes".to_vec()).unwrap();
        pump(&mut nodes, &mut applied);
        for a in &applied {
            assert_eq!(a, &vec![b"yes".to_vec()]);
        }
        let prog = nodes[leader].progress();
        assert_eq!(prog.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(prog.iter().all(|&(_, m)| m == p.index), "{prog:?}");
        assert!(nodes[follower].progress().is_empty());
    }

    /// A leader cut off from its followers takes proposals up to its
    /// uncommitted bound (`member_bounded`, here the 16 MiB minimum) and
    /// refuses the rest (`ProposalDropped`, which the store answers as a
    /// retryable `Overloaded`); once its followers hear it again and the
    /// entries commit, it takes proposals again.
    #[test]
    fn a_leader_without_its_quorum_holds_a_bounded_uncommitted_log() {
        let voters = [1, 2, 3];
        let mut nodes: Vec<RaftNode> =
            voters.iter().map(|&id| RaftNode::member_bounded(id, &voters, Recovered::default(), 1).unwrap()).collect();
        let pump = |nodes: &mut Vec<RaftNode>| pump(nodes, 50, |_, _| {});
        let mut ticks = 0;
        while !nodes.iter().any(|n| n.is_leader()) {
            for n in nodes.iter_mut() {
                n.tick();
            }
            pump(&mut nodes);
            ticks += 1;
            assert!(ticks < 200, "a leader within 200 ticks");
        }
        pump(&mut nodes);
        let l = nodes.iter().position(|n| n.is_leader()).unwrap();
        // Cut off: nothing it sends arrives, and nothing ticks (it stays
        // the leader).
        let mib = vec![0x5a; 1 << 20];
        let mut taken = 0;
        while nodes[l].propose(mib.clone()).is_ok() {
            drive(&mut nodes[l]);
            nodes[l].take_messages();
            taken += 1;
            assert!(taken <= 64, "the bound holds");
        }
        assert_eq!(taken, (MAX_SIZE_PER_MSG >> 20) as usize, "16 MiB of 1 MiB entries, then refused");
        assert!(matches!(nodes[l].propose(b"small".to_vec()), Err(raft::Error::ProposalDropped)), "any entry past the bound");
        // Healed: the followers catch up, the entries commit, and the
        // leader takes proposals again.
        for _ in 0..10 {
            nodes[l].raw.raft.ping();
            pump(&mut nodes);
        }
        assert!(nodes[l].is_leader());
        assert!(nodes[l].commit_index() >= nodes[l].last_index(), "everything taken committed");
        assert!(nodes[l].propose(mib).is_ok());
    }

    #[test]
    fn restart_replays_unapplied_entries() {
        let mut n = RaftNode::single(1, Recovered::default()).unwrap();
        let mut persisted = Vec::new();
        let mut hs = None;
        for round in 0..2 {
            if round == 1 {
                n.propose(b"x".to_vec()).unwrap();
            }
            while let Some(w) = n.ready() {
                persisted.extend(w.entries.clone());
                if w.hard_state.is_some() {
                    hs = w.hard_state.clone();
                }
                n.persisted(w).unwrap();
            }
        }
        let term = n.term();
        // Restart with nothing applied: the leader re-commits and hands the entries out again.
        let rec = Recovered { hard_state: hs, applied_index: 0, applied_term: 0, entries: persisted, retained: Vec::new() };
        let mut m = RaftNode::single(1, rec).unwrap();
        let committed = drive(&mut m);
        assert!(m.term() > term);
        assert!(committed.iter().any(|e| &e.data[..] == b"x"));
    }
}
