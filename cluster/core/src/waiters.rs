//! Proposals waiting for their entry to be applied, keyed by (term, index).
//!
//! An index alone does not name a proposal: a leader that loses its
//! leadership before its entry commits sees that index taken by the new
//! leader's entry (of a later term), and completing the waiter with that
//! entry's result would answer a client with someone else's outcome. So a
//! waiter is completed only by the entry applied at its index *with its
//! term*; an entry applied at its index (or past it) with another term
//! settles it as [`Settled::Superseded`]: the proposal was never committed
//! and the caller may retry it.
//!
//! Architecture Invariant: a proposal's waiter is completed only by the
//! applied entry whose (term, index) is the one [`crate::raft_node::RaftNode::propose`]
//! returned for it.

use std::collections::BTreeMap;

use crate::raft_node::Proposed;

/// How a waiter was settled.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled<W> {
    /// Its own entry was applied.
    Committed(W),
    /// Its entry was replaced: the index went to an entry of another term
    /// (or was covered by a snapshot, `by_term` 0). Never committed; retryable.
    Superseded { waiter: W, proposed: Proposed, by_term: u64 },
}

/// The waiters of one node's proposals.
#[derive(Debug)]
pub struct Waiters<W> {
    by_index: BTreeMap<u64, (u64, W)>,
}

impl<W> Default for Waiters<W> {
    fn default() -> Self {
        Waiters { by_index: BTreeMap::new() }
    }
}

impl<W> Waiters<W> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.by_index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_index.is_empty()
    }

    /// Waits for the entry proposed at `at`. A waiter already at that
    /// index belongs to an older proposal whose entry this new one
    /// replaced: it comes back superseded.
    pub fn insert(&mut self, at: Proposed, w: W) -> Option<Settled<W>> {
        let old = self.by_index.insert(at.index, (at.term, w))?;
        let (term, waiter) = old;
        Some(Settled::Superseded { waiter, proposed: Proposed { term, index: at.index }, by_term: at.term })
    }

    /// The entry at (`term`, `index`) was applied: settles every waiter at
    /// or below `index` (entries apply in order, so one below was passed
    /// over, e.g. by a snapshot), completing only the one at exactly
    /// (`term`, `index`).
    pub fn applied(&mut self, term: u64, index: u64) -> Vec<Settled<W>> {
        let rest = self.by_index.split_off(&(index.saturating_add(1)));
        let settled = std::mem::replace(&mut self.by_index, rest);
        settled
            .into_iter()
            .map(|(i, (t, waiter))| {
                if i == index && t == term {
                    Settled::Committed(waiter)
                } else {
                    let by_term = if i == index { term } else { 0 };
                    Settled::Superseded { waiter, proposed: Proposed { term: t, index: i }, by_term }
                }
            })
            .collect()
    }

    /// This node's raft log now ends at `last_index` (a new leader
    /// replaced a suffix of it with a shorter one): the waiters past it
    /// lost their entries and are settled as superseded (`by_term` 0).
    /// Without this they would wait until the log grew past them again.
    pub fn truncated(&mut self, last_index: u64) -> Vec<Settled<W>> {
        let gone = self.by_index.split_off(&(last_index.saturating_add(1)));
        gone.into_iter()
            .map(|(i, (t, waiter))| Settled::Superseded { waiter, proposed: Proposed { term: t, index: i }, by_term: 0 })
            .collect()
    }

    /// Removes every waiter (the node stops): the caller fails them.
    pub fn drain(&mut self) -> impl Iterator<Item = (Proposed, W)> + '_ {
        std::mem::take(&mut self.by_index).into_iter().map(|(index, (term, w))| (Proposed { term, index }, w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(term: u64, index: u64) -> Proposed {
        Proposed { term, index }
    }

    #[test]
    fn waiters_past_a_truncated_log_are_superseded() {
        let mut w = Waiters::new();
        for i in 5..=8 {
            assert!(w.insert(p(2, i), i).is_none());
        }
        assert!(w.truncated(8).is_empty());
        let gone = w.truncated(6);
        assert_eq!(
            gone,
            vec![
                Settled::Superseded { waiter: 7, proposed: p(2, 7), by_term: 0 },
                Settled::Superseded { waiter: 8, proposed: p(2, 8), by_term: 0 }
            ]
        );
        assert_eq!(w.len(), 2);
        assert_eq!(w.applied(2, 6), vec![Settled::Superseded { waiter: 5, proposed: p(2, 5), by_term: 0 }, Settled::Committed(6)]);
    }

    #[test]
    fn only_the_same_term_and_index_completes() {
        let mut w = Waiters::new();
        assert!(w.insert(p(2, 5), "a").is_none());
        assert!(w.insert(p(2, 6), "b").is_none());
        assert!(w.applied(2, 4).is_empty());
        // Index 5 applied with another term: "a" was replaced.
        assert_eq!(w.applied(3, 5), vec![Settled::Superseded { waiter: "a", proposed: p(2, 5), by_term: 3 }]);
        assert_eq!(w.applied(2, 6), vec![Settled::Committed("b")]);
        assert!(w.is_empty());
    }

    #[test]
    fn passed_over_waiters_are_superseded_and_a_reused_index_replaces() {
        let mut w = Waiters::new();
        w.insert(p(1, 3), "old");
        // The node lost leadership, its entry 3 was overwritten, and it
        // leads again: its new proposal lands at 3 with a later term.
        assert_eq!(w.insert(p(4, 3), "new"), Some(Settled::Superseded { waiter: "old", proposed: p(1, 3), by_term: 4 }));
        w.insert(p(4, 4), "next");
        // A snapshot jumped to 10: both passed over, none completed.
        let s = w.applied(5, 10);
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|s| matches!(s, Settled::Superseded { .. })));
        w.insert(p(6, 11), "z");
        assert_eq!(w.drain().collect::<Vec<_>>(), vec![(p(6, 11), "z")]);
    }
}
