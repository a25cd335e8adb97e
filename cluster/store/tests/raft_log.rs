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

/// Three stores in one process, their outboxes wired to each other's
/// `step` by a router thread per store (no network): nobody campaigns
/// until an election timer runs out, which it does by elapsed time even
/// while the queues are kept busy with queries; a change on a follower is
/// refused naming the leader; a change on the leader is applied by every
/// member; a member that is cut off is reported unreachable and the other
/// two go on.
#[test]
fn three_stores_elect_by_elapsed_time_and_replicate() {
    use duet_cluster::raft_node::RaftMessage;
    use duet_cluster_store::{Group, StoreHandle};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    let tmp = tempfile::tempdir().unwrap();
    let handles: Arc<Mutex<Vec<Option<StoreHandle>>>> = Arc::new(Mutex::new(vec![None, None, None]));
    let cut = Arc::new(AtomicBool::new(false)); // node 3 cut off
    let mut stores = Vec::new();
    for id in 1..=3u64 {
        let (tx, rx) = flume::unbounded::<Vec<RaftMessage>>();
        let outbox: duet_cluster_store::Outbox = Box::new(move |m| {
            let _ = tx.send(m);
        });
        let s = Store::open_group(&tmp.path().join(format!("n{id}")), id, Group::Voters { voters: vec![1, 2, 3], outbox })
            .unwrap();
        handles.lock().unwrap()[id as usize - 1] = Some(s.handle());
        let (hs, cut) = (handles.clone(), cut.clone());
        std::thread::spawn(move || {
            for msgs in rx.iter() {
                for m in msgs {
                    // A protobuf round trip, as the transport does.
                    let m = RaftMessage::parse_from_bytes(&m.write_to_bytes().unwrap()).unwrap();
                    if cut.load(Ordering::Relaxed) && (m.to == 3 || m.from == 3) {
                        continue;
                    }
                    if let Some(Some(h)) = hs.lock().unwrap().get(m.to as usize - 1) {
                        h.step(m);
                    }
                }
            }
        });
        stores.push(s);
    }
    let status = |s: &Store| match s.handle().query_blocking(Query::RaftStatus).unwrap() {
        QueryAnswer::Raft(r) => r,
        _ => unreachable!(),
    };
    // Keep every queue busy: ticks must come anyway.
    let busy = Arc::new(AtomicBool::new(true));
    let pounders: Vec<_> = stores
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
    let deadline = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        let st: Vec<_> = stores.iter().map(status).collect();
        if let Some(l) = st.iter().find(|r| r.leader) {
            if st.iter().all(|r| r.leader_id == l.node_id && r.term == l.term) {
                break l.node_id;
            }
        }
        assert!(Instant::now() < deadline, "no leader within 20 s under load: {st:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    busy.store(false, Ordering::Relaxed);
    for p in pounders {
        p.join().unwrap();
    }
    let follower = if leader == 1 { 2 } else { 1 };
    match stores[follower as usize - 1].handle().batch_blocking(mkdir_batch("x")) {
        Err(e @ StoreError::NotLeader { .. }) => {
            assert!(e.to_string().contains(&format!("node {leader} is")), "{e}");
        }
        other => panic!("a follower took a change: {:?}", other.map(|o| o.applied.results.len())),
    }
    let h = stores[leader as usize - 1].handle();
    h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    h.batch_blocking(mkdir_batch("everywhere")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stores.iter().all(|s| lookup(s, "everywhere")) {
        assert!(Instant::now() < deadline, "not applied everywhere");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = status(&stores[leader as usize - 1]);
    assert_eq!(st.progress.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(status(&stores[follower as usize - 1]).progress.is_empty());
    // Node 3 cut off: two of three still commit (unless 3 led: then the
    // other two elect one first).
    cut.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let l = stores[..2].iter().find(|s| status(s).leader);
        if let Some(l) = l {
            if l.handle().batch_blocking(mkdir_batch("two-of-three")).is_ok() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the two connected stores did not commit");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!lookup(&stores[2], "two-of-three"));
    handles.lock().unwrap().clear();
}
