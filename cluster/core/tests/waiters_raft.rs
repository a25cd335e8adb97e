//! Waiters keyed by (term, index), under a deterministic three-voter raft
//! group driven in memory (no I/O, no clock, no ticks: elections are
//! started explicitly, messages delivered by the test).
//!
//! The case a waiter keyed by index alone gets wrong: a leader proposes X
//! at index i, is cut off before X commits, a new leader puts its own
//! entry at i, and when the old leader rejoins, i is applied on it with the
//! new leader's entry. X's waiter must fail as superseded (retryable),
//! never complete with the other entry's result.

use std::collections::HashSet;

use duet_cluster::raft_node::{Proposed, RaftMessage, RaftNode, Recovered};
use duet_cluster::waiters::{Settled, Waiters};

struct Member {
    node: RaftNode,
    /// Waiting proposals: the data each proposed.
    waiters: Waiters<Vec<u8>>,
    /// (term, index, data) of every applied entry, in order.
    applied: Vec<(u64, u64, Vec<u8>)>,
    /// Waiters completed with their own entry: (proposed data, applied data).
    committed: Vec<(Vec<u8>, Vec<u8>)>,
    /// Waiters failed as superseded: (proposed data, where, by which term).
    superseded: Vec<(Vec<u8>, Proposed, u64)>,
}

struct Group {
    members: Vec<Member>,
    /// Nodes cut off from the others (messages to or from them are lost).
    cut: HashSet<u64>,
}

impl Group {
    fn new() -> Group {
        let members = (1..=3)
            .map(|id| Member {
                node: RaftNode::with_voters(id, &[1, 2, 3], Recovered::default()).unwrap(),
                waiters: Waiters::new(),
                applied: Vec::new(),
                committed: Vec::new(),
                superseded: Vec::new(),
            })
            .collect();
        Group { members, cut: HashSet::new() }
    }

    fn m(&mut self, id: u64) -> &mut Member {
        &mut self.members[id as usize - 1]
    }

    fn propose(&mut self, id: u64, data: &[u8]) -> Proposed {
        let m = self.m(id);
        let at = m.node.propose(data.to_vec()).unwrap();
        assert!(m.waiters.insert(at, data.to_vec()).is_none());
        at
    }

    /// Persists, applies and delivers until nothing moves.
    fn settle(&mut self) {
        loop {
            let mut outbox: Vec<RaftMessage> = Vec::new();
            for m in &mut self.members {
                while let Some(work) = m.node.ready() {
                    let mut entries = work.committed.clone();
                    entries.extend(m.node.persisted(work).unwrap());
                    for e in entries {
                        m.applied.push((e.term, e.index, e.data.to_vec()));
                        for s in m.waiters.applied(e.term, e.index) {
                            match s {
                                Settled::Committed(w) => m.committed.push((w, e.data.to_vec())),
                                Settled::Superseded { waiter, proposed, by_term } => {
                                    m.superseded.push((waiter, proposed, by_term))
                                }
                            }
                        }
                        m.node.applied(e.index);
                    }
                }
                outbox.extend(m.node.take_messages());
            }
            if outbox.is_empty() {
                return;
            }
            for msg in outbox {
                if self.cut.contains(&msg.from) || self.cut.contains(&msg.to) {
                    continue;
                }
                self.m(msg.to).node.step(msg).unwrap();
            }
        }
    }
}

#[test]
fn an_index_taken_by_a_new_leader_fails_the_old_waiter() {
    let mut g = Group::new();
    g.m(1).node.campaign().unwrap();
    g.settle();
    assert!(g.m(1).node.is_leader());
    let t1 = g.m(1).node.term();

    // A proposal that commits everywhere: its waiter completes with it.
    let a = g.propose(1, b"a");
    g.settle();
    assert_eq!(g.m(1).committed, vec![(b"a".to_vec(), b"a".to_vec())]);
    for id in 1..=3 {
        assert!(g.m(id).applied.iter().any(|(t, i, d)| (*t, *i, &d[..]) == (a.term, a.index, b"a")));
    }

    // Node 1 is cut off and proposes X: appended to its log only.
    g.cut.insert(1);
    let x = g.propose(1, b"x");
    assert_eq!((x.term, x.index), (t1, a.index + 1));
    g.settle();
    assert!(g.m(1).committed.len() == 1 && g.m(1).superseded.is_empty());

    // Nodes 2 and 3 elect 2, whose first entry (empty) takes X's index,
    // and commit Y after it.
    g.m(2).node.campaign().unwrap();
    g.settle();
    assert!(g.m(2).node.is_leader());
    let t2 = g.m(2).node.term();
    assert!(t2 > t1);
    let y = g.propose(2, b"y");
    assert_eq!(y.index, x.index + 1);
    g.settle();
    assert_eq!(g.m(2).committed, vec![(b"y".to_vec(), b"y".to_vec())]);
    assert!(g.m(2).applied.iter().any(|(t, i, _)| (*t, *i) == (t2, x.index)));

    // Node 1 rejoins: the new leader's next entry reaches it, its log is
    // repaired, and index x.index is applied there with term t2.
    g.cut.clear();
    // The leader's heartbeats (its ticks; node 1 is not ticked, so no
    // election starts) reach node 1, which steps down.
    for _ in 0..3 {
        g.m(2).node.tick();
    }
    g.settle();
    let z = g.propose(2, b"z");
    g.settle();
    assert!(!g.m(1).node.is_leader());
    assert_eq!(g.m(1).node.term(), t2);
    let m1 = g.m(1);
    assert!(m1.applied.iter().any(|(t, i, d)| (*t, *i) == (t2, x.index) && d.is_empty()), "{:?}", m1.applied);
    assert!(!m1.applied.iter().any(|(_, _, d)| d == b"x"), "X never applies: it was never committed");
    assert!(m1.applied.iter().any(|(t, i, d)| (*t, *i, &d[..]) == (y.term, y.index, b"y")));
    assert!(m1.applied.iter().any(|(t, i, d)| (*t, *i, &d[..]) == (z.term, z.index, b"z")));
    // X's waiter: failed as superseded by term t2, never completed.
    assert_eq!(m1.superseded, vec![(b"x".to_vec(), x, t2)]);
    assert_eq!(m1.committed, vec![(b"a".to_vec(), b"a".to_vec())]);
    assert!(m1.waiters.is_empty());
    // The new leader's waiters complete with their own entries.
    assert_eq!(g.m(2).committed, vec![(b"y".to_vec(), b"y".to_vec()), (b"z".to_vec(), b"z".to_vec())]);
    // Every replica applied the same entries.
    let logs: Vec<_> = (1..=3).map(|id| g.m(id).applied.clone()).collect();
    assert_eq!(logs[0], logs[1]);
    assert_eq!(logs[1], logs[2]);
}

#[test]
fn a_follower_refuses_to_propose() {
    let mut g = Group::new();
    g.m(1).node.campaign().unwrap();
    g.settle();
    assert!(g.m(2).node.propose(b"q".to_vec()).is_err(), "a follower has no index to wait on");
    assert_eq!(g.m(2).node.leader_id(), 1);
}
