//! The raft log's commands in a real store (RocksDB): an entry that cannot
//! be decoded stops the store loudly and is never skipped; entries of the
//! legacy (bincode) format left unapplied in a data directory still apply;
//! the raft status; three stores of one group wired in memory.

use duet_cluster::keys;
use duet_cluster::records::Command;
use duet_cluster_store::{Query, QueryAnswer, Store, StoreError};
use duet_fs::{Batch, CreateKind, Credentials, IfExists, ObjRef, Op, OpOutput, SetAttrs, ROOT_ID};
use protobuf::Message as _;
use raft::eraftpb::{Entry, HardState};

fn mkdir_batch(name: &str) -> Batch {
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.push(Op::Create {
        dir: ObjRef::Id(ROOT_ID),
        name: name.into(),
        kind: CreateKind::Directory,
        attrs: SetAttrs { mode: Some(0o755), ..Default::default() },
        if_exists: IfExists::Fail,
    });
    b
}

fn lookup(s: &Store, name: &str) -> bool {
    let mut b = Batch::new(Credentials::root(), 2_000);
    b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: name.into() });
    let out = s.handle().batch_blocking(b).unwrap();
    matches!(out.applied.results[0], Ok(OpOutput::Object { .. }))
}

/// A store with the root and directory "before", shut down cleanly.
fn prepared(dir: &std::path::Path) {
    let s = Store::open(dir, 1).unwrap();
    let h = s.handle();
    h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    h.batch_blocking(mkdir_batch("before")).unwrap();
    s.shutdown();
}

fn meta_u64(db: &rocksdb::DB, name: &str) -> u64 {
    u64::from_be_bytes(db.get(keys::meta(name)).unwrap().unwrap().as_slice().try_into().unwrap())
}

/// Appends raw entries to the stored raft log after the applied index, as
/// a crash between their sync and their apply leaves them. Returns the
/// (term, first index) they got.
fn append_raw(dir: &std::path::Path, payloads: &[Vec<u8>]) -> (u64, u64) {
    let db = rocksdb::DB::open_default(dir).unwrap();
    let hs = HardState::parse_from_bytes(&db.get(keys::RAFT_HARD_STATE).unwrap().unwrap()).unwrap();
    let applied = meta_u64(&db, "applied_index");
    let mut last = applied;
    let it = db.prefix_iterator([keys::RAFT_LOG]);
    for kv in it {
        let (k, _) = kv.unwrap();
        if k.first() != Some(&keys::RAFT_LOG) {
            break;
        }
        last = last.max(keys::u64_at(&k, 1).unwrap());
    }
    for (i, p) in payloads.iter().enumerate() {
        let mut e = Entry::default();
        e.term = hs.term;
        e.index = last + 1 + i as u64;
        e.data = p.clone().into();
        db.put(keys::raft_log(e.index), e.write_to_bytes().unwrap()).unwrap();
    }
    let mut hs = hs;
    hs.commit = last + payloads.len() as u64;
    db.put(keys::RAFT_HARD_STATE, hs.write_to_bytes().unwrap()).unwrap();
    db.flush_wal(true).unwrap();
    (hs.term, last + 1)
}

#[test]
fn an_undecodable_entry_stops_the_store_and_is_never_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    prepared(tmp.path());
    let good_after = duet_cluster::command::encode_command(&Command::Batch(mkdir_batch("after")));
    let (term, index) = append_raw(tmp.path(), &[vec![0x42, 1, 2, 3], good_after]);

    for attempt in 0..2 {
        match Store::open(tmp.path(), 1) {
            Err(StoreError::Undecodable(u)) => {
                assert_eq!((u.term, u.index), (term, index), "attempt {attempt}");
                let text = StoreError::Undecodable(u).to_string();
                assert!(text.contains(&format!("term {term} index {index}")), "{text}");
                assert!(text.contains("unknown command format version 0x42"), "{text}");
            }
            Err(e) => panic!("attempt {attempt}: wrong error: {e}"),
            Ok(_) => panic!("attempt {attempt}: a store with an undecodable entry opened"),
        }
    }
    // Neither the bad entry nor the good one after it was applied, or
    // marked applied.
    let db = rocksdb::DB::open_default(tmp.path()).unwrap();
    assert_eq!(meta_u64(&db, "applied_index"), index - 1);
    assert!(db.get(keys::edge(ROOT_ID, "after")).unwrap().is_none());
    assert!(db.get(keys::edge(ROOT_ID, "before")).unwrap().is_some());
}

#[test]
fn a_truncated_or_padded_entry_also_stops_the_store() {
    for (what, mutate) in [
        ("truncated", Box::new(|b: &mut Vec<u8>| b.truncate(b.len() - 1)) as Box<dyn Fn(&mut Vec<u8>)>),
        ("trailing", Box::new(|b: &mut Vec<u8>| b.push(0))),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        prepared(tmp.path());
        let mut bad = duet_cluster::command::encode_command(&Command::Batch(mkdir_batch("x")));
        mutate(&mut bad);
        let (term, index) = append_raw(tmp.path(), &[bad]);
        match Store::open(tmp.path(), 1) {
            Err(StoreError::Undecodable(u)) => assert_eq!((u.term, u.index), (term, index), "{what}"),
            Err(e) => panic!("{what}: wrong error: {e}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }
}

#[test]
fn legacy_bincode_entries_left_unapplied_are_applied_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    prepared(tmp.path());
    // What a binary before the versioned format wrote.
    let legacy = bincode::serialize(&Command::Batch(mkdir_batch("legacy"))).unwrap();
    append_raw(tmp.path(), &[legacy]);
    let s = Store::open(tmp.path(), 1).unwrap();
    assert!(lookup(&s, "before"));
    assert!(lookup(&s, "legacy"));
    // New proposals go on in the versioned format.
    s.handle().batch_blocking(mkdir_batch("new")).unwrap();
    assert!(lookup(&s, "new"));
    match s.handle().query_blocking(Query::RaftStatus).unwrap() {
        QueryAnswer::Raft(r) => assert!(r.leader && r.applied_index == r.commit_index),
        _ => unreachable!(),
    }
    s.shutdown();
    let s = Store::open(tmp.path(), 1).unwrap();
    assert!(lookup(&s, "legacy") && lookup(&s, "new"));
}

/// The raft status the admin API reports comes from the node's raft
/// state: its id, the ConfState's voters, the leader it knows, the term,
/// and an applied index that moves with every proposal (and survives a
/// restart, where the term grows: the node campaigns again).
#[test]
fn raft_status_is_the_nodes_raft_state() {
    let tmp = tempfile::tempdir().unwrap();
    let status = |s: &Store| match s.handle().query_blocking(Query::RaftStatus).unwrap() {
        QueryAnswer::Raft(r) => r,
        _ => unreachable!(),
    };
    let s = Store::open(tmp.path(), 7).unwrap();
    s.handle().command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    let a = status(&s);
    assert_eq!((a.node_id, a.leader_id, a.voters.clone()), (7, 7, vec![7]));
    assert!(a.leader && a.term >= 1 && a.applied_index >= 1);
    for i in 0..3 {
        s.handle().batch_blocking(mkdir_batch(&format!("d{i}"))).unwrap();
    }
    let b = status(&s);
    assert_eq!(b.applied_index, a.applied_index + 3, "one entry per mutating batch");
    assert_eq!(b.commit_index, b.applied_index);
    // A read-only batch proposes nothing.
    assert!(lookup(&s, "d0"));
    assert_eq!(status(&s).applied_index, b.applied_index);
    s.shutdown();
    let s = Store::open(tmp.path(), 7).unwrap();
    let c = status(&s);
    assert!(c.term > b.term, "a restarted single node campaigns in a new term");
    assert!(c.applied_index > b.applied_index, "the new term's empty entry is applied");
    assert_eq!((c.leader_id, c.voters), (7, vec![7]));
}

/// Three stores of one group in one process, their outboxes wired to each
/// other's `step` by a router thread per store (no network; a protobuf
/// round trip as the transport does). `cut` names a node whose messages
/// are lost (0: none).
struct Wired {
    stores: Vec<Store>,
    handles: std::sync::Arc<std::sync::Mutex<Vec<Option<duet_cluster_store::StoreHandle>>>>,
    cut: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Wired {
    fn open(dir: &std::path::Path) -> Wired {
        use duet_cluster::raft_node::RaftMessage;
        use duet_cluster_store::Group;
        use std::sync::atomic::Ordering;
        use std::sync::{Arc, Mutex};
        let handles = Arc::new(Mutex::new(vec![None, None, None]));
        let cut = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut stores = Vec::new();
        for id in 1..=3u64 {
            let (tx, rx) = flume::unbounded::<Vec<RaftMessage>>();
            let outbox: duet_cluster_store::Outbox = Box::new(move |m| {
                let _ = tx.send(m);
            });
            let group = Group::Voters { voters: vec![1, 2, 3], outbox };
            let s = Store::open_group(&dir.join(format!("n{id}")), id, group).unwrap();
            handles.lock().unwrap()[id as usize - 1] = Some(s.handle());
            let (hs, cut) = (handles.clone(), cut.clone());
            std::thread::spawn(move || {
                for msgs in rx.iter() {
                    for m in msgs {
                        let m = RaftMessage::parse_from_bytes(&m.write_to_bytes().unwrap()).unwrap();
                        let c = cut.load(Ordering::Relaxed);
                        if c != 0 && (m.to == c || m.from == c) {
                            continue;
                        }
                        let h = hs.lock().unwrap().get(m.to as usize - 1).cloned().flatten();
                        if let Some(h) = h {
                            h.step(m);
                        }
                    }
                }
            });
            stores.push(s);
        }
        Wired { stores, handles, cut }
    }

    fn status(&self, id: u64) -> duet_cluster_store::RaftStatus {
        match self.stores[id as usize - 1].handle().query_blocking(Query::RaftStatus).unwrap() {
            QueryAnswer::Raft(r) => r,
            _ => unreachable!(),
        }
    }

    /// Waits until every node applied what `leader` has applied now.
    fn applied_everywhere(&self, leader: u64, what: &str) {
        use std::time::{Duration, Instant};
        let target = self.status(leader).applied_index;
        let deadline = Instant::now() + Duration::from_secs(10);
        while (1..=3).any(|id| self.status(id).applied_index < target) {
            assert!(Instant::now() < deadline, "{what} not applied everywhere within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the nodes not cut off agree on a leader; returns it.
    fn leader(&self, what: &str) -> u64 {
        use std::time::{Duration, Instant};
        let deadline = Instant::now() + Duration::from_secs(20);
        let cut = self.cut.load(std::sync::atomic::Ordering::Relaxed);
        loop {
            let st: Vec<_> = (1..=3).filter(|&id| id != cut).map(|id| self.status(id)).collect();
            if let Some(l) = st.iter().find(|r| r.leader) {
                if st.iter().all(|r| r.leader_id == l.node_id && r.term == l.term) {
                    return l.node_id;
                }
            }
            assert!(Instant::now() < deadline, "{what}: no leader within 20 s: {st:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Wired {
    fn drop(&mut self) {
        if let Ok(mut h) = self.handles.lock() {
            h.clear();
        }
    }
}

/// Nobody campaigns until an election timer runs out, which it does by
/// elapsed time even while the queues are kept busy with queries; a
/// change on a follower is refused naming the leader; a change on the
/// leader is applied by every member; with one member cut off the other
/// two go on.
#[test]
fn three_stores_elect_by_elapsed_time_and_replicate() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let tmp = tempfile::tempdir().unwrap();
    let g = Wired::open(tmp.path());
    // Keep every queue busy: ticks must come anyway.
    let busy = Arc::new(AtomicBool::new(true));
    let pounders: Vec<_> = g
        .stores
        .iter()
        .map(|s| {
            let (h, busy) = (s.handle(), busy.clone());
            std::thread::spawn(move || {
                while busy.load(Ordering::Relaxed) {
                    let _ = h.query_blocking(Query::Initialized);
                }
            })
        })
        .collect();
    let leader = g.leader("under load");
    busy.store(false, Ordering::Relaxed);
    for p in pounders {
        p.join().unwrap();
    }
    let follower = if leader == 1 { 2 } else { 1 };
    match g.stores[follower as usize - 1].handle().batch_blocking(mkdir_batch("x")) {
        Err(e @ StoreError::NotLeader { .. }) => {
            assert!(e.to_string().contains(&format!("node {leader} is")), "{e}");
        }
        other => panic!("a follower took a change: {:?}", other.map(|o| o.applied.results.len())),
    }
    let h = g.stores[leader as usize - 1].handle();
    h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    h.batch_blocking(mkdir_batch("everywhere")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !g.stores.iter().all(|s| lookup(s, "everywhere")) {
        assert!(Instant::now() < deadline, "not applied everywhere");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = g.status(leader);
    assert_eq!(st.progress.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(g.status(follower).progress.is_empty());
    // Node 3 cut off: two of three still commit (if 3 led, the other two
    // elect one first).
    g.cut.store(3, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(l) = g.stores[..2].iter().find(|s| matches!(s.handle().query_blocking(Query::RaftStatus), Ok(QueryAnswer::Raft(r)) if r.leader)) {
            if l.handle().batch_blocking(mkdir_batch("two-of-three")).is_ok() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the two connected stores did not commit");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The cut-off node cannot confirm a read (no leader reaches it): it
    // refuses rather than answer from its state.
    let mut b = Batch::new(Credentials::root(), 2_000);
    b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: "two-of-three".into() });
    match g.stores[2].handle().batch_blocking(b) {
        Err(StoreError::NotLeader { .. } | StoreError::ReadUnconfirmed { .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(o) => panic!("a cut-off node answered a read: {:?}", o.applied.results),
    }
}

/// A leader cut off appends five proposals that never commit; the other
/// two elect a new leader, whose shorter log replaces that suffix when the
/// old leader rejoins. The proposers are answered "superseded", and the
/// replaced entries are gone from the old leader's stored raft log too:
/// they do not come back at its next start.
#[test]
fn a_replaced_log_suffix_is_deleted_from_rocksdb() {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    let tmp = tempfile::tempdir().unwrap();
    let mut g = Wired::open(tmp.path());
    let old = g.leader("first election");
    let h = g.stores[old as usize - 1].handle();
    h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    let before = g.status(old).last_index;
    g.cut.store(old, Ordering::Relaxed);
    let proposers: Vec<_> = (0..5)
        .map(|i| {
            let h = h.clone();
            std::thread::spawn(move || h.batch_blocking(mkdir_batch(&format!("stale{i}"))).map(|_| ()))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while g.status(old).last_index < before + 5 {
        assert!(Instant::now() < deadline, "the cut-off leader did not append: {:?}", g.status(old));
        std::thread::sleep(Duration::from_millis(20));
    }
    let new = g.leader("the two others");
    assert_ne!(new, old);
    assert!(g.status(new).last_index < before + 5, "the new leader's log is shorter: {:?}", g.status(new));
    g.cut.store(0, Ordering::Relaxed);
    for p in proposers {
        match p.join().unwrap() {
            Err(StoreError::Superseded { .. }) => {}
            other => panic!("a stale proposal was answered {other:?}"),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while g.status(old).applied_index < g.status(new).applied_index {
        assert!(Instant::now() < deadline, "the old leader did not catch up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let last = g.status(old).last_index;
    assert!(!lookup(&g.stores[old as usize - 1], "stale0"));
    // Stop the old leader and read its stored raft log.
    let s = g.stores.remove(old as usize - 1);
    s.shutdown();
    let db = rocksdb::DB::open_default(tmp.path().join(format!("n{old}"))).unwrap();
    for kv in db.prefix_iterator([keys::RAFT_LOG]) {
        let (k, v) = kv.unwrap();
        if k.first() != Some(&keys::RAFT_LOG) {
            break;
        }
        let idx = keys::u64_at(&k, 1).unwrap();
        assert!(idx <= last, "entry {idx} past the log's end {last} is still stored");
        let e = Entry::parse_from_bytes(&v).unwrap();
        assert!(!e.data.windows(5).any(|w| w == b"stale"), "a replaced entry is still stored at {idx}");
    }
}

/// A proposal costs each member one synced write, not two: entries are
/// synced before they are acknowledged, but the hard state that then only
/// moves the commit index (on the leader when the acknowledgements come,
/// on each follower when the leader's commit reaches it) is written
/// without a sync (the commit index is volatile in raft). Everything
/// committed is applied on every member. (Crashes that lose such a write
/// are the simulation's: `cluster/core/tests/sim.rs`.)
#[test]
fn a_proposal_costs_each_member_one_fsync() {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    const N: u64 = 40;
    let tmp = tempfile::tempdir().unwrap();
    let g = Wired::open(tmp.path());
    let leader = g.leader("first election");
    let h = g.stores[leader as usize - 1].handle();
    h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    // Let the Init entry's commit reach everyone first.
    g.applied_everywhere(leader, "Init");
    std::thread::sleep(Duration::from_millis(300));
    let before: Vec<u64> = g.stores.iter().map(|s| s.handle().counters().fsyncs.load(Ordering::Relaxed)).collect();
    for i in 0..N {
        h.batch_blocking(mkdir_batch(&format!("one-sync-{i}"))).unwrap();
    }
    g.applied_everywhere(leader, "the proposals");
    // Heartbeats that carry the last commit add no syncs either.
    std::thread::sleep(Duration::from_millis(500));
    let after: Vec<u64> = g.stores.iter().map(|s| s.handle().counters().fsyncs.load(Ordering::Relaxed)).collect();
    for id in 1..=3usize {
        let n = after[id - 1] - before[id - 1];
        eprintln!("node {id}: {n} fsyncs for {N} proposals");
        // Two per proposal before: the entry, then the commit.
        assert!(n <= N + N / 4, "node {id} made {n} fsyncs for {N} proposals (leader {leader})");
        assert!(n >= 1, "node {id} synced nothing");
    }
    assert!(g.stores.iter().all(|s| lookup(s, &format!("one-sync-{}", N - 1))));
}
