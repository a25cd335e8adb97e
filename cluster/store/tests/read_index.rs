//! Linearizable reads in a multi-voter group (Raft thesis 6.4, read
//! index): three real stores (RocksDB) wired in memory. A leader cut off
//! from the others never answers a read from its stale state; the new
//! leader's reads see what it committed; a healthy leader answers reads
//! within a bound, many reads sharing one read index; the cost is printed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use duet_cluster::raft_node::RaftMessage;
use duet_cluster::records::Command;
use duet_cluster_store::{Group, Query, QueryAnswer, Store, StoreError, StoreHandle};
use duet_fs::{Batch, CreateKind, Credentials, IfExists, ObjRef, Op, OpOutput, SetAttrs, ROOT_ID};
use protobuf::Message as _;

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

fn lookup_batch(name: &str) -> Batch {
    let mut b = Batch::new(Credentials::root(), 2_000);
    b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: name.into() });
    assert!(!b.mutates());
    b
}

/// A LOOKUP of `name` in the root: whether it exists, or the store's error.
fn lookup(h: &StoreHandle, name: &str) -> Result<bool, StoreError> {
    let out = h.batch_blocking(lookup_batch(name))?;
    Ok(matches!(out.applied.results[0], Ok(OpOutput::Object { .. })))
}

/// Three stores of one group; `cut` (a node id, 0: none) drops every
/// message to or from that node.
struct Wired {
    stores: Vec<Store>,
    handles: Arc<Mutex<Vec<Option<StoreHandle>>>>,
    cut: Arc<AtomicU64>,
}

impl Wired {
    fn open(dir: &std::path::Path) -> Wired {
        Wired::open_with(dir, duet_cluster_store::StoreOptions::default())
    }

    fn open_with(dir: &std::path::Path, options: duet_cluster_store::StoreOptions) -> Wired {
        let handles = Arc::new(Mutex::new(vec![None, None, None]));
        let cut = Arc::new(AtomicU64::new(0));
        let mut stores = Vec::new();
        for id in 1..=3u64 {
            let (tx, rx) = flume::unbounded::<Vec<RaftMessage>>();
            let outbox: duet_cluster_store::Outbox = Box::new(move |m| {
                let _ = tx.send(m);
            });
            let group = Group::Voters { voters: vec![1, 2, 3], outbox };
            let s = Store::open_group_with(&dir.join(format!("n{id}")), id, group, options.clone()).unwrap();
            handles.lock().unwrap()[id as usize - 1] = Some(s.handle());
            let (hs, cut) = (handles.clone(), cut.clone());
            std::thread::spawn(move || {
                for msgs in rx.iter() {
                    for m in msgs {
                        // Through the wire format, as the transport does.
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

    fn h(&self, id: u64) -> StoreHandle {
        self.stores[id as usize - 1].handle()
    }

    fn status(&self, id: u64) -> duet_cluster_store::RaftStatus {
        match self.h(id).query_blocking(Query::RaftStatus).unwrap() {
            QueryAnswer::Raft(r) => r,
            _ => unreachable!(),
        }
    }

    /// Waits until the nodes not cut off agree on a leader; returns it.
    fn leader(&self, what: &str) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        let cut = self.cut.load(Ordering::Relaxed);
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

    /// Runs `b` on the leader of the nodes not cut off until it commits.
    fn commit(&self, b: impl Fn() -> Batch, what: &str) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let l = self.leader(what);
            if self.h(l).batch_blocking(b()).is_ok() {
                return l;
            }
            assert!(Instant::now() < deadline, "{what}: not committed within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until a read on `id` answers (its leader confirmed it).
    fn read_until(&self, id: u64, name: &str, want: bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match lookup(&self.h(id), name) {
                Ok(v) if v == want => return,
                Ok(v) => panic!("{what}: node {id} read {name:?} exists = {v}, want {want}"),
                Err(_) => {}
            }
            assert!(Instant::now() < deadline, "{what}: node {id} did not answer a read within 20 s");
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

/// A read the old leader must not answer: an error that means "cannot
/// now", never an answer.
fn assert_refused(r: Result<bool, StoreError>, what: &str) {
    match r {
        Err(StoreError::NotLeader { .. } | StoreError::ReadUnconfirmed { .. }) => {}
        Ok(false) => panic!("{what}: the deposed leader answered a STALE read (the committed write is missing)"),
        Ok(true) => panic!("{what}: the cut-off leader answered a read it could not confirm"),
        Err(e) => panic!("{what}: wrong error: {e}"),
    }
}

/// The leader is cut off from both followers; a read on it while it still
/// believes it leads waits (no quorum confirms it) and then fails; the
/// other two elect a leader and commit a write; reads on the old leader
/// never return the value from before that write; reads on the new leader
/// see it; once the cut heals the old leader (now a follower) reads it too.
#[test]
fn a_cut_off_leader_never_answers_a_stale_read() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Wired::open(tmp.path());
    let old = g.leader("first election");
    g.h(old).command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    g.h(old).batch_blocking(mkdir_batch("before")).unwrap();
    assert_eq!(lookup(&g.h(old), "before").unwrap(), true);
    assert_eq!(lookup(&g.h(old), "after").unwrap(), false);

    g.cut.store(old, Ordering::Relaxed);
    assert!(g.status(old).leader, "the cut-off node still believes it leads");
    // A read while it still believes it leads: no heartbeat comes back.
    let t0 = Instant::now();
    let early = {
        let h = g.h(old);
        std::thread::spawn(move || (lookup(&h, "after"), t0.elapsed()))
    };
    let new = g.commit(|| mkdir_batch("after"), "the other two");
    assert_ne!(new, old);
    let (r, took) = early.join().unwrap();
    assert_refused(r, "a read sent while the cut-off node led");
    assert!(took >= Duration::from_millis(500), "the read was refused before any confirmation could time out: {took:?}");
    println!("read on the cut-off leader refused after {took:?}");
    // The write is acknowledged by the new leader: a read on the old one
    // must not return the state from before it, whatever role it has now.
    for i in 0..3 {
        assert_refused(lookup(&g.h(old), "after"), &format!("read {i} after the write"));
    }
    assert_eq!(lookup(&g.h(new), "after").unwrap(), true, "the new leader reads its write");
    let third = (1..=3).find(|&i| i != old && i != new).unwrap();
    g.read_until(third, "after", true, "the other follower (read index through the leader)");

    g.cut.store(0, Ordering::Relaxed);
    g.read_until(old, "after", true, "the old leader after the cut heals");
}

/// On a healthy group a read on the leader answers within a bound, and
/// concurrent reads share read index requests (one heartbeat round for all
/// waiting). Prints read-only batches per second: a single node (today's
/// path, no raft), the 3-store leader one at a time, and 32 at a time.
#[test]
fn healthy_leader_reads_are_bounded_and_batched() {
    let tmp = tempfile::tempdir().unwrap();
    let g = Wired::open(tmp.path());
    let leader = g.leader("election");
    let h = g.h(leader);
    h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    h.batch_blocking(mkdir_batch("d")).unwrap();
    // The bound: a read never waits an election timeout on a healthy leader.
    let mut worst = Duration::ZERO;
    for _ in 0..200 {
        let t = Instant::now();
        assert!(lookup(&h, "d").unwrap());
        worst = worst.max(t.elapsed());
    }
    assert!(worst < Duration::from_millis(500), "a read on a healthy leader took {worst:?}");

    let single_dir = tmp.path().join("single");
    let single = Store::open(&single_dir, 1).unwrap();
    single.handle().command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    single.handle().batch_blocking(mkdir_batch("d")).unwrap();
    let before = single.handle().counters().read_indexes.load(Ordering::Relaxed);

    let rate = |h: &StoreHandle, threads: usize| -> (f64, u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (h, stop, done) = (h.clone(), stop.clone(), done.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        assert!(lookup(&h, "d").unwrap());
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        let n = done.load(Ordering::Relaxed);
        (n as f64 / t.elapsed().as_secs_f64(), n)
    };
    let (single1, _) = rate(&single.handle(), 1);
    let (single32, _) = rate(&single.handle(), 32);
    assert_eq!(single.handle().counters().read_indexes.load(Ordering::Relaxed), before, "a single node asks no read index");
    let ri0 = h.counters().read_indexes.load(Ordering::Relaxed);
    let (group1, n1) = rate(&h, 1);
    let ri1 = h.counters().read_indexes.load(Ordering::Relaxed);
    let (group32, n32) = rate(&h, 32);
    let ri32 = h.counters().read_indexes.load(Ordering::Relaxed);
    println!("read-only batches/s: single node 1 thread {single1:.0}, 32 threads {single32:.0}");
    println!(
        "read-only batches/s: 3-store leader 1 thread {group1:.0} ({} read indexes for {n1} reads), \
         32 threads {group32:.0} ({} read indexes for {n32} reads)",
        ri1 - ri0,
        ri32 - ri1
    );
    assert!(n1 > 0 && n32 > 0);
    // One at a time: one read index each. Concurrent: shared.
    assert!(ri1 - ri0 >= n1, "each lone read asks a read index");
    assert!(ri32 - ri1 < n32, "concurrent reads share read index requests: {} for {n32}", ri32 - ri1);
}

/// A leader cut off from its quorum holds at most `uncommitted_max` of
/// raft entries (here 16 MiB, the least raft-rs takes): of eight 4 MiB
/// changes sent to it at once, those past the bound are refused at once
/// with the retryable `Overloaded` (nothing proposed) instead of waiting
/// in its log; the rest wait and end when it is deposed (superseded, or
/// not the leader), and none is applied by the others.
#[test]
fn a_cut_off_leader_refuses_changes_past_its_uncommitted_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let options = duet_cluster_store::StoreOptions { uncommitted_max: 16 << 20, ..Default::default() };
    let g = Wired::open_with(tmp.path(), options);
    let old = g.leader("first election");
    g.h(old).command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    g.h(old).batch_blocking(mkdir_batch("f")).unwrap();
    let fh = match lookup_batch_out(&g.h(old), "f") {
        Some(id) => id,
        None => panic!("f exists"),
    };
    g.cut.store(old, Ordering::Relaxed);
    let t0 = Instant::now();
    let sent: Vec<_> = (0..8u64)
        .map(|i| {
            let h = g.h(old);
            std::thread::spawn(move || {
                let mut b = Batch::new(Credentials::root(), 3_000);
                b.push(Op::Write { obj: ObjRef::Id(fh), offset: i << 22, data: duet_fs::WriteData::Bytes(vec![i as u8; 4 << 20]), append: false });
                let r = h.batch_blocking(b);
                (r.map(|_| ()), t0.elapsed())
            })
        })
        .collect();
    // The others elect a leader and commit; the cut heals, and the old
    // leader's waiting changes end (superseded by the new term's log).
    let new = g.commit(|| mkdir_batch("after"), "the other two");
    assert_ne!(new, old);
    let healed = t0.elapsed();
    g.cut.store(0, Ordering::Relaxed);
    g.read_until(old, "after", true, "the old leader after the cut heals");
    let results: Vec<_> = sent.into_iter().map(|t| t.join().unwrap()).collect();
    let overloaded: Vec<_> = results.iter().filter(|(r, _)| matches!(r, Err(StoreError::Overloaded { .. }))).collect();
    assert!(overloaded.len() >= 3, "at most 16 MiB (4 changes) held: {results:?}");
    assert!(overloaded.iter().all(|(_, t)| *t < healed), "refused at once, not held until the cut healed ({healed:?}): {results:?}");
    for (r, _) in &results {
        assert!(
            matches!(r, Err(StoreError::Overloaded { .. } | StoreError::Superseded { .. } | StoreError::NotLeader { .. })),
            "nothing commits without a quorum: {r:?}"
        );
    }
}

/// The node id of `name` in the root, read on `h`.
fn lookup_batch_out(h: &StoreHandle, name: &str) -> Option<u64> {
    match &h.batch_blocking(lookup_batch(name)).ok()?.applied.results[0] {
        Ok(OpOutput::Object { attrs, .. }) => Some(attrs.id),
        _ => None,
    }
}

/// A single node executes read-only batches on the caller's thread
/// (`StoreHandle::read_here`): a read begun after a change's answer sees
/// it at once; a change, a flush, a directory listing, or a member of a
/// multi-voter group go to the metadata thread instead (None); once the
/// store is shut down the database is closed and nothing is read here.
#[test]
fn a_single_node_reads_on_the_callers_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), 1).unwrap();
    let h = s.handle();
    h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    let found = |name: &str| match h.read_here(&lookup_batch(name)) {
        Some(Ok(out)) => matches!(out.applied.results[0], Ok(OpOutput::Object { .. })),
        other => panic!("a single node's lookup not read here: {:?}", other.map(|r| r.map(|o| o.applied.results))),
    };
    let batches = h.counters().batches.load(Ordering::Relaxed);
    for i in 0..200 {
        let name = format!("d{i}");
        assert!(!found(&name));
        h.batch_blocking(mkdir_batch(&name)).unwrap();
        assert!(found(&name), "{name} not seen right after its answer");
    }
    assert!(h.counters().batches.load(Ordering::Relaxed) >= batches + 600, "reads here are counted");
    assert!(h.counters().reads_here.load(Ordering::Relaxed) >= 400, "all in memory: read here");
    assert!(h.read_here(&mkdir_batch("x")).is_none(), "a change goes to the metadata thread");
    let mut flush = lookup_batch("d1");
    flush.flush = true;
    assert!(h.read_here(&flush).is_none(), "a flush goes to the metadata thread");
    let mut list = Batch::new(Credentials::root(), 3_000);
    list.push(Op::ReadDir { dir: ObjRef::Id(ROOT_ID), after: None, max_entries: 10, with_attrs: false });
    assert!(h.read_here(&list).is_none(), "a listing goes to the metadata thread");
    let wired = tempfile::tempdir().unwrap();
    let w = Wired::open(wired.path());
    assert!(w.h(1).read_here(&lookup_batch("d1")).is_none(), "a member of three reads at a read index");
    drop(w);
    s.shutdown();
    assert!(h.read_here(&lookup_batch("d1")).is_none(), "read here after shutdown");
    // The database was closed: it opens again. A read the block cache
    // cannot answer goes to the metadata thread (None, counted); once
    // that thread has read the blocks, the same read is served here.
    let s = Store::open(tmp.path(), 1).unwrap();
    let h = s.handle();
    let first = h.read_here(&lookup_batch("d199"));
    let c = h.counters();
    assert_eq!(c.reads_here.load(Ordering::Relaxed) + c.reads_from_disk.load(Ordering::Relaxed), 1);
    assert_eq!(first.is_none(), c.reads_from_disk.load(Ordering::Relaxed) == 1);
    assert!(lookup(&h, "d199").unwrap());
    assert!(matches!(h.read_here(&lookup_batch("d199")), Some(Ok(out)) if matches!(out.applied.results[0], Ok(OpOutput::Object { .. }))));
}
