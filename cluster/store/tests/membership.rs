//! Membership changes of a multi-voter store (`StoreHandle::change_membership`):
//! four real stores (RocksDB, raft-rs) in one process, their outboxes wired
//! to each other's `step` (a protobuf round trip, as the transport does).
//! Node 4 joins (`Group::Join`) the group formed by 1-3: the leader adds it
//! with a ConfChangeV2 that enters the joint configuration and an explicit
//! leave, both tagged; it catches up and applies what the others do; bad
//! requests are refused with nothing proposed; a restarted member keeps the
//! recorded configuration over its configured list; node 4 is removed and
//! the three voters go on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use duet_cluster_store::{Group, MemberChange, Query, QueryAnswer, Store, StoreError};
use duet_fs::{Batch, CreateKind, Credentials, IfExists, ObjRef, Op, OpOutput, SetAttrs, ROOT_ID};

mod common;
use common::{mkdir, outbox, status, wait, Handles};

#[test]
fn a_fourth_node_is_added_then_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let handles: Handles = Arc::new(Mutex::new(vec![None; 4]));
    let cut = Arc::new(AtomicU64::new(0));
    let mut stores: Vec<Option<Store>> = Vec::new();
    for id in 1..=3u64 {
        let group = Group::Voters { voters: vec![1, 2, 3], outbox: outbox(&handles, &cut) };
        let s = Store::open_group(&tmp.path().join(format!("n{id}")), id, group).unwrap();
        handles.lock().unwrap()[id as usize - 1] = Some(s.handle());
        stores.push(Some(s));
    }
    let h = |id: u64| handles.lock().unwrap()[id as usize - 1].clone().unwrap();
    let leader = || -> u64 {
        let mut l = 0;
        wait("a leader", || {
            l = (1..=3).map(|id| status(&h(id))).find(|r| r.leader).map(|r| r.node_id).unwrap_or(0);
            l != 0
        });
        l
    };
    let l = leader();
    h(l).command_blocking(duet_cluster::records::Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    for i in 0..5 {
        h(l).batch_blocking(mkdir(&format!("before{i}"))).unwrap();
    }

    // Refused, nothing proposed.
    let follower = if l == 1 { 2 } else { 1 };
    assert!(matches!(h(follower).change_membership_blocking(MemberChange::Add(4, "127.0.0.14:7446".into())), Err(StoreError::NotLeader { .. })));
    let before = status(&h(l)).last_index;
    for (change, want) in [
        (MemberChange::Add(9, "no-port".into()), "not an ADDRESS:PORT"),
        (MemberChange::Add(l, "127.0.0.1:1".into()), "already a voter"),
        (MemberChange::Remove(9), "not a voter"),
        (MemberChange::Add(0, "127.0.0.1:1".into()), "start at 1"),
    ] {
        match h(l).change_membership_blocking(change.clone()) {
            Err(StoreError::Membership { message: m, .. }) => assert!(m.contains(want), "{change:?}: {m}"),
            other => panic!("{change:?}: {other:?}"),
        }
    }
    assert_eq!(status(&h(l)).last_index, before, "a refused change proposes nothing");

    // Node 4 joins: it waits, then is added.
    let group = Group::Join { voters: vec![1, 2, 3], outbox: outbox(&handles, &cut) };
    let s4 = Store::open_group(&tmp.path().join("n4"), 4, group).unwrap();
    handles.lock().unwrap()[3] = Some(s4.handle());
    stores.push(Some(s4));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!status(&h(4)).leader, "a joining node does not campaign");
    // Two changes at once: one is refused as in progress (or both pass in turn).
    let (h1, h2) = (h(l), h(l));
    let a = std::thread::spawn(move || h1.change_membership_blocking(MemberChange::Add(4, "127.0.0.14:7446".into())));
    let b = std::thread::spawn(move || h2.change_membership_blocking(MemberChange::Remove(4)));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    eprintln!("add: {a:?}; a concurrent remove: {b:?}");
    assert_eq!(a.unwrap(), vec![1, 2, 3, 4]);
    match b {
        Err(StoreError::Membership { message: m, .. }) => assert!(m.contains("in progress") || m.contains("not a voter"), "{m}"),
        other => panic!("the concurrent remove: {other:?}"),
    }
    for id in 1..=4 {
        wait("every node has the new configuration", || status(&h(id)).voters == vec![1, 2, 3, 4]);
    }
    for id in 1..=4 {
        match h(id).query_blocking(Query::Members).unwrap() {
            QueryAnswer::Members(m) => assert_eq!(m, vec![(4, "127.0.0.14:7446".to_string())], "node {id}"),
            _ => unreachable!(),
        }
    }
    h(l).batch_blocking(mkdir("with4")).unwrap();
    let target = status(&h(l)).applied_index;
    wait("node 4 applies everything", || status(&h(4)).applied_index >= target);
    let lookup = |id: u64, name: &str| {
        let mut b = Batch::new(Credentials::root(), 2_000);
        b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: name.into() });
        h(id).batch_blocking(b).map(|o| matches!(o.applied.results[0], Ok(OpOutput::Object { .. })))
    };
    wait("node 4 serves what was made before it joined", || lookup(4, "before3").unwrap_or(false));

    // A restarted member keeps the recorded configuration, not its list.
    let r = if l == 3 { 2 } else { 3 };
    handles.lock().unwrap()[r as usize - 1] = None;
    stores[r as usize - 1].take().unwrap().shutdown();
    let group = Group::Voters { voters: vec![1, 2, 3], outbox: outbox(&handles, &cut) };
    let s = Store::open_group(&tmp.path().join(format!("n{r}")), r, group).unwrap();
    handles.lock().unwrap()[r as usize - 1] = Some(s.handle());
    stores[r as usize - 1] = Some(s);
    assert_eq!(status(&h(r)).voters, vec![1, 2, 3, 4], "the recorded configuration wins");

    // Node 4 is removed; the three go on.
    let l = {
        let mut l = 0;
        wait("a leader", || {
            l = (1..=4).map(|id| status(&h(id))).find(|r| r.leader).map(|r| r.node_id).unwrap_or(0);
            l != 0
        });
        l
    };
    let mut removed = None;
    wait("node 4 removed", || match h(l).change_membership_blocking(MemberChange::Remove(4)) {
        Ok(v) => {
            removed = Some(v);
            true
        }
        Err(StoreError::Membership { message: m, .. }) if m.contains("in progress") => false,
        Err(e) => panic!("remove: {e}"),
    });
    assert_eq!(removed.unwrap(), vec![1, 2, 3]);
    for id in 1..=3 {
        wait("the three have the configuration", || status(&h(id)).voters == vec![1, 2, 3]);
        wait("the address is forgotten", || matches!(h(id).query_blocking(Query::Members).unwrap(), QueryAnswer::Members(m) if m.is_empty()));
    }
    // The removed node learns it: it refuses everything, and its data
    // directory never opens again.
    wait("node 4 knows it was removed", || h(4).removed().is_some());
    match h(4).batch_blocking(mkdir("on4")) {
        Err(e) => assert!(e.to_string().contains("node 4 was removed from the cluster"), "{e}"),
        Ok(_) => panic!("a removed node accepted a change"),
    }
    cut.store(4, Ordering::Relaxed);
    handles.lock().unwrap()[3] = None;
    stores[3].take().unwrap().shutdown();
    let group = Group::Voters { voters: vec![1, 2, 3], outbox: outbox(&handles, &cut) };
    match Store::open_group(&tmp.path().join("n4"), 4, group) {
        Err(StoreError::Removed { node: 4, index }) => assert!(index > 0),
        Err(e) => panic!("reopening a removed node: {e}"),
        Ok(_) => panic!("a removed node's store opened again"),
    }
    let l = (1..=3).map(|id| status(&h(id))).find(|r| r.leader).map(|r| r.node_id).unwrap_or(l);
    h(l).batch_blocking(mkdir("after4")).unwrap();
    match h(l).change_membership_blocking(MemberChange::Remove(4)) {
        Err(StoreError::Membership { message: m, .. }) => assert!(m.contains("not a voter"), "{m}"),
        other => panic!("{other:?}"),
    }
    handles.lock().unwrap().clear();
}

/// A removal leaves the joint configuration only once the voters that
/// stay have destaged every data record queued before it (the voter
/// leaving may have held one of the copies a write's majority counted):
/// the leader's own progress and the other voter's reported progress
/// (`StoreHandle::peer_destaged`, from its status frames) must both
/// reach the last record queued when the leader first tried to leave.
/// Meanwhile a write whose data the leader and the voter leaving hold is
/// not proposed (not a majority of the voters that stay).
#[test]
fn a_removal_waits_for_the_voters_that_stay_to_destage() {
    let tmp = tempfile::tempdir().unwrap();
    let handles: Handles = Arc::new(Mutex::new(vec![None; 3]));
    let cut = Arc::new(AtomicU64::new(0));
    let mut stores = Vec::new();
    for id in 1..=3u64 {
        let group = Group::Voters { voters: vec![1, 2, 3], outbox: outbox(&handles, &cut) };
        let s = Store::open_group(&tmp.path().join(format!("n{id}")), id, group).unwrap();
        handles.lock().unwrap()[id as usize - 1] = Some(s.handle());
        stores.push(s);
    }
    let h = |id: u64| handles.lock().unwrap()[id as usize - 1].clone().unwrap();
    let mut l = 0;
    wait("a leader", || {
        l = (1..=3).map(|id| status(&h(id))).find(|r| r.leader).map(|r| r.node_id).unwrap_or(0);
        l != 0
    });
    h(l).command_blocking(duet_cluster::records::Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    // File data queued for destaging (data records 1..).
    let mut b = Batch::new(Credentials::root(), 1_000);
    let f = b.push(Op::Create {
        dir: ObjRef::Id(ROOT_ID),
        name: "data".into(),
        kind: CreateKind::File,
        attrs: SetAttrs { mode: Some(0o644), ..Default::default() },
        if_exists: IfExists::Fail,
    });
    b.push(Op::Write { obj: f, offset: 0, data: duet_fs::WriteData::Bytes(vec![7u8; 8192]), append: false });
    h(l).batch_blocking(b).unwrap();
    let st = status(&h(l));
    let upto = st.destaged_upto + st.destage_queue;
    assert!(upto > 0 && st.destage_queue > 0, "{st:?}");

    let (r, f) = {
        let others: Vec<u64> = (1..=3).filter(|&i| i != l).collect();
        (others[0], others[1])
    };
    let hl = h(l);
    let removal = std::thread::spawn(move || hl.change_membership_blocking(MemberChange::Remove(r)));
    let stays_joint = |what: &str| {
        std::thread::sleep(Duration::from_millis(1500));
        let v = status(&h(l)).voters;
        assert!(v.contains(&r), "{what}: the joint configuration was left: {v:?}");
    };
    stays_joint("nothing destaged");
    // While joint, a write's holders must be a majority of each half
    // (`propose_held`): the leader and the voter leaving are two of the
    // three voters, but one of the two that stay.
    let mut stay = vec![l, f];
    stay.sort_unstable();
    assert_eq!(h(l).voter_halves(), vec![stay.clone(), vec![1, 2, 3]]);
    match h(l).batch_held_blocking(mkdir("held-by-the-leaver"), [l, r].into()) {
        Err(StoreError::NotHeld { holders, halves }) => {
            assert_eq!(halves, vec![stay.clone(), vec![1, 2, 3]]);
            let mut want = vec![l, r];
            want.sort_unstable();
            assert_eq!(holders, want);
        }
        other => panic!("held by the leader and the voter leaving: {other:?}"),
    }
    h(l).batch_held_blocking(mkdir("held-by-the-stayers"), [l, f].into()).expect("held by the voters that stay");
    assert_eq!(h(l).counters().not_held.load(Ordering::Relaxed), 1);
    // The leader destaged, the other voter that stays reports less.
    h(l).destaged_blocking(upto, vec![]).unwrap();
    h(l).peer_destaged(f, upto - 1);
    stays_joint("the other voter behind");
    // The voter leaving reports everything: it does not count.
    h(l).peer_destaged(r, upto);
    stays_joint("only the voter leaving caught up");
    assert!(!removal.is_finished(), "the removal answered while joint");
    h(l).peer_destaged(f, upto);
    assert_eq!(removal.join().unwrap().unwrap(), {
        let mut v = vec![l, f];
        v.sort_unstable();
        v
    });
    wait("the voters that stay leave the joint configuration", || {
        [l, f].iter().all(|&i| {
            let v = status(&h(i)).voters;
            !v.contains(&r) && v.len() == 2
        })
    });
}
