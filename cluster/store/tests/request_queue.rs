//! The store's request queue is bounded by `StoreOptions::queue`
//! (`[limits] metadata_queue`, docs/limits.md): with the metadata thread
//! held up (here its transport blocks, as a wedged outbox would), a
//! queue of four takes four raft messages and refuses the fifth
//! (`StoreHandle::step` answers false: dropped, raft sends again), and
//! queries that find it full wait for a place instead of growing it;
//! once the thread moves on, every waiting query is answered (nothing
//! refused, nothing lost).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use duet_cluster::raft_node::{RaftMessage, RaftMessageType};
use duet_cluster_store::{Group, Query, QueryAnswer, Store, StoreOptions};

const QUEUE: usize = 4;

type Gate = Arc<(Mutex<(bool, bool)>, Condvar)>;

/// Opens the gate: the metadata thread moves on.
fn open(gate: &Gate) {
    let (m, cv) = &**gate;
    m.lock().unwrap().1 = true;
    cv.notify_all();
}

/// Opens the gate when dropped (a failed assertion must not leave the
/// store's shutdown waiting on a held thread).
struct Opener(Gate);

impl Drop for Opener {
    fn drop(&mut self) {
        open(&self.0);
    }
}

/// A raft message from node 2 to node 1 (raft ignores it).
fn message() -> RaftMessage {
    let mut m = RaftMessage::default();
    m.set_msg_type(RaftMessageType::MsgHeartbeatResponse);
    m.from = 2;
    m.to = 1;
    m
}

#[test]
fn a_full_request_queue_refuses_raft_messages_and_makes_senders_wait() {
    let dir = tempfile::tempdir().unwrap();
    // (armed, open): once armed, the outbox blocks until opened.
    let gate: Gate = Arc::new((Mutex::new((false, false)), Condvar::new()));
    let (blocked_tx, blocked_rx) = flume::bounded::<()>(1);
    let g = gate.clone();
    let outbox: duet_cluster_store::Outbox = Box::new(move |_msgs| {
        let (m, cv) = &*g;
        let mut st = m.lock().unwrap();
        if st.0 && !st.1 {
            let _ = blocked_tx.try_send(());
            while !st.1 {
                st = cv.wait(st).unwrap();
            }
        }
    });
    // Node 1 of two: it campaigns after its election timeout (2 to 4 s),
    // and its first message to node 2 holds the metadata thread.
    let group = Group::Voters { voters: vec![1, 2], outbox };
    let options = StoreOptions { queue: QUEUE, ..Default::default() };
    let store = Store::open_group_with(dir.path(), 1, group, options).unwrap();
    let h = store.handle();
    let _opener = Opener(gate.clone());
    gate.0.lock().unwrap().0 = true;
    blocked_rx.recv_timeout(Duration::from_secs(60)).expect("node 1 sends a raft message within 60 s");

    assert_eq!(h.queued(), 0);
    for i in 0..QUEUE {
        assert!(h.step(message()), "message {i} fits in a queue of {QUEUE}");
    }
    assert!(!h.step(message()), "a queue of {QUEUE} refuses a fifth raft message");
    assert_eq!(h.queued(), QUEUE);

    // Queries wait for a place (none is refused, none grows the queue).
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let h = h.clone();
            std::thread::spawn(move || h.query_blocking(Query::RaftStatus))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(h.queued(), QUEUE, "senders wait; the queue does not grow");
    assert!(waiting.iter().all(|t| !t.is_finished()), "no query answered while the thread is held");

    // The thread moves on: every waiting query is answered.
    open(&gate);
    let started = Instant::now();
    for t in waiting {
        match t.join().unwrap() {
            Ok(QueryAnswer::Raft(r)) => assert_eq!(r.node_id, 1),
            Ok(_) => panic!("a waiting query: not a raft status"),
            Err(e) => panic!("a waiting query: {e}"),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.queued() > 0 {
        assert!(Instant::now() < deadline, "the queue drains");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(h.step(message()));
    store.shutdown();
}
