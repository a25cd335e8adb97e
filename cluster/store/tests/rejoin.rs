//! A voter whose data directory was emptied starts again under its id
//! (issue 12: "a node's data directory is deleted; it is rebuilt from the
//! others"): three real stores (RocksDB, raft-rs) in one process, their
//! outboxes wired to each other's `step` through a protobuf round trip, as
//! the transport does. The emptied node starts armed (`l rejoin_guard`,
//! kept across a restart), gives no vote to a candidate with a log until
//! it holds every entry the leader says is committed
//! (`RaftNode::arm_rejoin_guard`), is not aborted by the leader's
//! heartbeats that name the commit index it acknowledged in its earlier
//! life (raft-rs's `commit_to` would panic), catches up, serves what was
//! made before, and is disarmed for good. The wiring is `common::outbox`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use duet_cluster_store::{Group, Store};
use duet_fs::{Batch, Credentials, ObjRef, Op, OpOutput, ROOT_ID};

mod common;
use common::{mkdir, outbox, status, wait, Handles};

#[test]
fn an_emptied_voter_rejoins_armed_and_is_disarmed_once_caught_up() {
    let tmp = tempfile::tempdir().unwrap();
    let handles: Handles = Arc::new(Mutex::new(vec![None; 3]));
    let cut = Arc::new(AtomicU64::new(0));
    let dir = |id: u64| tmp.path().join(format!("n{id}"));
    let open = |id: u64| {
        let group = Group::Voters { voters: vec![1, 2, 3], outbox: outbox(&handles, &cut) };
        let s = Store::open_group(&dir(id), id, group).unwrap();
        handles.lock().unwrap()[id as usize - 1] = Some(s.handle());
        s
    };
    let mut stores: Vec<Option<Store>> = (1..=3).map(|id| Some(open(id))).collect();
    let h = |id: u64| handles.lock().unwrap()[id as usize - 1].clone().unwrap();
    let mut l = 0;
    wait("a leader", || {
        l = (1..=3).map(|id| status(&h(id))).find(|r| r.leader).map(|r| r.node_id).unwrap_or(0);
        l != 0
    });
    // A group forming from empty stores: armed at first, disarmed by the
    // first commit index they hold.
    h(l).command_blocking(duet_cluster::records::Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    for i in 0..5 {
        h(l).batch_blocking(mkdir(&format!("before{i}"))).unwrap();
    }
    let f = if l == 1 { 2 } else { 1 };
    let target = status(&h(l)).applied_index;
    for id in 1..=3 {
        wait("every node applied and is disarmed", || {
            let s = status(&h(id));
            s.applied_index >= target && !s.rejoin_guarded
        });
    }
    let leader_saw = status(&h(l)).progress.iter().find(|p| p.0 == f).map(|p| p.1).unwrap_or(0);
    assert!(leader_saw >= target, "the leader knows follower {f} at index {leader_saw}");

    // Follower f loses its data: cut off, stopped, emptied, started again.
    cut.store(f, Ordering::Relaxed);
    handles.lock().unwrap()[f as usize - 1] = None;
    stores[f as usize - 1].take().unwrap().shutdown();
    std::fs::remove_dir_all(dir(f)).unwrap();
    stores[f as usize - 1] = Some(open(f));
    let s = status(&h(f));
    assert!(s.rejoin_guarded && s.applied_index == 0 && s.last_index == 0, "{s:?}");
    // A restart before it heard from anyone: still armed (the mark).
    handles.lock().unwrap()[f as usize - 1] = None;
    stores[f as usize - 1].take().unwrap().shutdown();
    stores[f as usize - 1] = Some(open(f));
    assert!(status(&h(f)).rejoin_guarded, "armed again after a restart");

    // Back on the network, the group idle. The leader still counts f at
    // its old index: its heartbeats name a commit index past f's empty
    // log (raft-rs would abort f), and it sends f nothing more unless told
    // f lost its log.
    cut.store(0, Ordering::Relaxed);
    wait("the emptied node catches up while the group is idle", || status(&h(f)).applied_index >= target);
    wait("and is disarmed", || !status(&h(f)).rejoin_guarded);
    h(l).batch_blocking(mkdir("after")).unwrap();
    let target = status(&h(l)).applied_index;
    wait("the emptied node applies new changes", || status(&h(f)).applied_index >= target);
    assert!(!h(f).failed(), "the emptied node's store stopped");
    let lookup = |id: u64, name: &str| {
        let mut b = Batch::new(Credentials::root(), 2_000);
        b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: name.into() });
        h(id).batch_blocking(b).map(|o| matches!(o.applied.results[0], Ok(OpOutput::Object { .. })))
    };
    for name in ["before0", "before4", "after"] {
        wait("the emptied node serves what was made", || lookup(f, name).unwrap_or(false));
    }
    // Restarted once more: it has its state now, and no mark.
    handles.lock().unwrap()[f as usize - 1] = None;
    stores[f as usize - 1].take().unwrap().shutdown();
    stores[f as usize - 1] = Some(open(f));
    assert!(!status(&h(f)).rejoin_guarded, "disarmed for good");
    for s in stores.iter_mut() {
        s.take().unwrap().shutdown();
    }
}
