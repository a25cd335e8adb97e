//! Lazy groups against the real store (RocksDB, raft-rs, the commit
//! thread): a batch marked `lazy` is answered before its write is synced
//! and made durable within the commit window; a synced batch, a `flush`
//! batch and the window each sync; the data queue hands the destager only
//! records from before the first unsynced write.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use duet_cluster_store::{Query, QueryAnswer, Store, StoreOptions};
use duet_fs::{Batch, Credentials, ObjRef, Op, OpOutput, ROOT_ID};

mod common;

use common::create_file as create;

fn open(dir: &std::path::Path, window: Duration) -> Store {
    common::open_initialized(dir, StoreOptions { commit_window: window, ..Default::default() })
}

fn queue_len(h: &duet_cluster_store::StoreHandle) -> usize {
    match h.query_blocking(Query::DataQueue { after: 0, limit: 1000 }).unwrap() {
        QueryAnswer::DataQueue(q) => q.len(),
        _ => panic!("not a queue"),
    }
}

#[test]
fn lazy_batches_are_answered_unsynced_and_synced_within_the_window() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), Duration::from_millis(300));
    let h = s.handle();
    let c = h.counters();

    // Synced: the answer waited for one fsync.
    let o = h.batch_blocking(create("synced", b"x", false)).unwrap();
    assert_eq!(o.cost.fsyncs, 1);

    // Lazy: answered with no fsync; the window syncs it later.
    let (f0, w0) = (c.fsyncs.load(Ordering::Relaxed), c.wal_syncs.load(Ordering::Relaxed));
    let t = Instant::now();
    let o = h.batch_blocking(create("lazy1", b"y", true)).unwrap();
    assert!(o.applied.results.iter().all(|r| r.is_ok()), "{:?}", o.applied.results);
    assert_eq!(o.cost.fsyncs, 0, "a lazy batch waited for a sync");
    assert_eq!(c.fsyncs.load(Ordering::Relaxed), f0, "synced before the answer");
    assert!(c.lazy_groups.load(Ordering::Relaxed) >= 1);
    while c.wal_syncs.load(Ordering::Relaxed) == w0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the window never synced");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(t.elapsed() >= Duration::from_millis(250), "synced after {:?}, before the window", t.elapsed());

    // A flush (read-only) batch syncs what was answered before it.
    let w1 = c.wal_syncs.load(Ordering::Relaxed);
    h.batch_blocking(create("lazy2", b"z", true)).unwrap();
    let mut flush = Batch::new(Credentials::root(), 6_000);
    flush.push(Op::GetAttr { obj: ObjRef::Id(ROOT_ID) });
    flush.flush = true;
    h.batch_blocking(flush).unwrap();
    assert_eq!(c.wal_syncs.load(Ordering::Relaxed), w1 + 1, "the flush did not sync before its answer");

    // A synced batch after a lazy one makes both durable with its own sync.
    let f2 = c.fsyncs.load(Ordering::Relaxed);
    h.batch_blocking(create("lazy3", b"w", true)).unwrap();
    let o = h.batch_blocking(create("synced2", b"v", false)).unwrap();
    assert_eq!(o.cost.fsyncs, 1);
    assert_eq!(c.fsyncs.load(Ordering::Relaxed), f2 + 1);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(c.fsyncs.load(Ordering::Relaxed), f2 + 1, "the window synced again with nothing unsynced");

    // Everything is there after a restart.
    drop(h);
    s.shutdown();
    let s = open(tmp.path(), Duration::from_millis(300));
    let h = s.handle();
    for name in ["synced", "lazy1", "lazy2", "lazy3", "synced2"] {
        let mut b = Batch::new(Credentials::root(), 7_000);
        b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: name.into() });
        let o = h.batch_blocking(b).unwrap();
        assert!(matches!(o.applied.results[0], Ok(OpOutput::Object { .. })), "{name}: {:?}", o.applied.results);
    }
}

#[test]
fn the_destager_sees_only_records_from_before_the_first_unsynced_write() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), Duration::from_millis(400));
    let h = s.handle();
    // A file of more than 4 KiB is chunked: its data is queued for the
    // destager (ridden inline in the entry here, as the store sees it).
    let big = vec![5u8; 6000];
    h.batch_blocking(create("durable", &big, false)).unwrap();
    assert_eq!(queue_len(&h), 1);
    let t = Instant::now();
    h.batch_blocking(create("unsynced", &big, true)).unwrap();
    if t.elapsed() < Duration::from_millis(300) {
        assert_eq!(queue_len(&h), 1, "the destager was shown a record a crash could still take back");
    }
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(queue_len(&h), 2, "once synced, the record is handed out");
}
