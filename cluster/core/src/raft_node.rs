//! The raft-rs node that orders metadata commands. A single node is a
//! one-voter group: the same code path a cluster uses.
//!
//! Sans-I/O: the caller persists what [`RaftNode::ready`] hands out
//! (entries and hard state, synced), then calls [`RaftNode::persisted`],
//! which returns the entries that are now committed, for it to apply.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::storage::MemStorage;
use raft::{Config, RawNode};

pub use raft::eraftpb::Entry as RaftEntry;

pub struct RaftNode {
    raw: RawNode<MemStorage>,
}

/// Work the caller must make durable before calling [`RaftNode::persisted`].
pub struct ReadyWork {
    ready: raft::Ready,
    pub entries: Vec<Entry>,
    pub hard_state: Option<HardState>,
    /// Entries committed before this ready's entries were persisted.
    pub committed: Vec<Entry>,
}

/// State recovered from storage on restart.
#[derive(Default)]
pub struct Recovered {
    pub hard_state: Option<HardState>,
    pub applied_index: u64,
    pub applied_term: u64,
    /// Persisted entries after `applied_index`, in order.
    pub entries: Vec<Entry>,
}

fn discard_logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

impl RaftNode {
    /// A one-voter group with `id` as its only voter, from recovered state.
    pub fn single(id: u64, rec: Recovered) -> Result<Self, raft::Error> {
        let storage = MemStorage::new_with_conf_state(ConfState::from((vec![id], vec![])));
        {
            let mut w = storage.wl();
            if rec.applied_index > 0 {
                let mut snap = Snapshot::default();
                snap.mut_metadata().index = rec.applied_index;
                snap.mut_metadata().term = rec.applied_term;
                snap.mut_metadata().set_conf_state(ConfState::from((vec![id], vec![])));
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
            election_tick: 10,
            heartbeat_tick: 3,
            applied: rec.applied_index,
            max_size_per_msg: 16 << 20,
            max_inflight_msgs: 256,
            ..Default::default()
        };
        let mut raw = RawNode::new(&cfg, storage, &discard_logger())?;
        raw.campaign()?;
        Ok(RaftNode { raw })
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == raft::StateRole::Leader
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    pub fn last_index(&self) -> u64 {
        self.raw.raft.raft_log.last_index()
    }

    /// Proposes `data`; returns the index the entry will have.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<u64, raft::Error> {
        self.raw.propose(Vec::new(), data)?;
        Ok(self.last_index())
    }

    pub fn tick(&mut self) {
        self.raw.tick();
    }

    /// The next piece of work, if any.
    pub fn ready(&mut self) -> Option<ReadyWork> {
        if !self.raw.has_ready() {
            return None;
        }
        let mut ready = self.raw.ready();
        let committed = ready.take_committed_entries();
        let entries = ready.entries().clone();
        let hard_state = ready.hs().cloned();
        Some(ReadyWork { ready, entries, hard_state, committed })
    }

    /// The caller has made `work` durable: returns the entries committed now.
    pub fn persisted(&mut self, work: ReadyWork) -> Result<Vec<Entry>, raft::Error> {
        {
            let store = self.raw.mut_store();
            let mut w = store.wl();
            if !work.entries.is_empty() {
                w.append(&work.entries)?;
            }
            if let Some(hs) = &work.hard_state {
                w.set_hardstate(hs.clone());
            }
        }
        let mut light = self.raw.advance(work.ready);
        if let Some(c) = light.commit_index() {
            self.raw.mut_store().wl().mut_hard_state().commit = c;
        }
        let committed = light.take_committed_entries();
        Ok(committed)
    }

    /// Everything up to `index` is applied: lets raft release it.
    pub fn applied(&mut self, index: u64) {
        self.raw.advance_apply_to(index);
        let store = self.raw.mut_store();
        let _ = store.wl().compact(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(node: &mut RaftNode) -> Vec<Entry> {
        let mut out = Vec::new();
        while let Some(w) = node.ready() {
            out.extend(w.committed.clone());
            let c = node.persisted(w).unwrap();
            out.extend(c);
        }
        out
    }

    #[test]
    fn single_voter_commits_after_persist() {
        let mut n = RaftNode::single(1, Recovered::default()).unwrap();
        drive(&mut n);
        assert!(n.is_leader());
        let idx = n.propose(b"a".to_vec()).unwrap();
        let idx2 = n.propose(b"b".to_vec()).unwrap();
        assert_eq!(idx2, idx + 1);
        let committed = drive(&mut n);
        let data: Vec<&[u8]> = committed.iter().filter(|e| !e.data.is_empty()).map(|e| &e.data[..]).collect();
        assert_eq!(data, vec![&b"a"[..], &b"b"[..]]);
        assert_eq!(committed.last().unwrap().index, idx2);
        n.applied(idx2);
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
        let rec = Recovered { hard_state: hs, applied_index: 0, applied_term: 0, entries: persisted };
        let mut m = RaftNode::single(1, rec).unwrap();
        let committed = drive(&mut m);
        assert!(m.term() > term);
        assert!(committed.iter().any(|e| &e.data[..] == b"x"));
    }
}
