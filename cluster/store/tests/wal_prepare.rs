//! A fresh store writes its first synced commits into a recycled
//! write-ahead log (`[durability] wal_recycle`, issue 16): at open the
//! store writes a filler of `wal_prepare` bytes and makes RocksDB switch
//! WAL files twice (`prepare_recycled_wal`), so the WAL being written is
//! a reused file already that long, and a synced commit overwrites
//! allocated blocks instead of growing the file (no size for fdatasync to
//! commit). Checked on the files: RocksDB's LOG says it took a file from
//! its recycle list, the live WAL keeps its length through a hundred
//! synced commits, and everything committed reads back after a reopen
//! (a reused file's stale records from its earlier life end the replay).
//! With recycling off, none of it: the WAL grows.

use std::path::{Path, PathBuf};

use duet_cluster_store::{Store, StoreOptions};
use duet_fs::{Batch, Credentials, ObjRef, Op, OpOutput, ROOT_ID};

const PREPARE: usize = 1 << 20;

mod common;

fn open(dir: &Path, recycle: bool) -> Store {
    common::open_initialized(dir, StoreOptions { wal_recycle: recycle, wal_prepare: PREPARE, ..Default::default() })
}

/// Creates `name` holding its own name.
fn create(name: &str) -> Batch {
    common::create_file(name, name.as_bytes(), false)
}

/// The WAL RocksDB writes now: the highest-numbered `*.log`, and its length.
fn live_wal(dir: &Path) -> (PathBuf, u64) {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let p = logs.pop().expect("a WAL file");
    let len = std::fs::metadata(&p).unwrap().len();
    (p, len)
}

fn reused(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("LOG")).unwrap().matches("from recycle list").count()
}

fn commit_hundred(s: &Store) {
    let h = s.handle();
    for i in 0..100 {
        let o = h.batch_blocking(create(&format!("f{i:03}"))).unwrap();
        assert!(o.applied.results.iter().all(|r| r.is_ok()), "{:?}", o.applied.results);
        assert_eq!(o.cost.fsyncs, 1, "a synced commit");
    }
}

/// Every `PREFIX000`..`PREFIX099` reads back with its own name as content.
fn all_present(s: &Store, prefix: &str) {
    let h = s.handle();
    let mut b = Batch::new(Credentials::root(), 5_000);
    for i in 0..100 {
        let f = b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: format!("{prefix}{i:03}") });
        b.push(Op::Read { obj: f, offset: 0, len: 100 });
    }
    let o = h.batch_blocking(b).unwrap();
    for i in 0..100 {
        let name = format!("{prefix}{i:03}");
        match &o.applied.results[2 * i + 1] {
            Ok(OpOutput::Read { data, .. }) => assert_eq!(data, name.as_bytes(), "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn a_fresh_store_commits_into_a_recycled_wal_that_does_not_grow() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), true);
    assert!(reused(tmp.path()) >= 1, "RocksDB took no WAL file from its recycle list at open");
    let (wal, len) = live_wal(tmp.path());
    assert!(len >= PREPARE as u64, "the live WAL {} is {len} bytes, not a prepared one", wal.display());
    commit_hundred(&s);
    let (wal2, len2) = live_wal(tmp.path());
    assert_eq!((&wal2, len2), (&wal, len), "a hundred synced commits changed the live WAL or its length");
    drop(s);

    // Reopen: the records of the reused file's new life replay, its stale
    // tail does not; open prepares recycled files again.
    let s = open(tmp.path(), true);
    all_present(&s, "f");
    assert!(reused(tmp.path()) >= 1);
    commit_hundred_more(&s);
    drop(s);
    let s = open(tmp.path(), true);
    all_present(&s, "f");
    all_present(&s, "g");
}

fn commit_hundred_more(s: &Store) {
    let h = s.handle();
    for i in 0..100 {
        let o = h.batch_blocking(create(&format!("g{i:03}"))).unwrap();
        assert!(o.applied.results.iter().all(|r| r.is_ok()), "{:?}", o.applied.results);
    }
}

#[test]
fn without_recycling_the_wal_grows_with_each_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path(), false);
    let (wal, len) = live_wal(tmp.path());
    commit_hundred(&s);
    let (wal2, len2) = live_wal(tmp.path());
    assert_eq!(wal2, wal);
    assert!(len2 > len, "the live WAL did not grow ({len} -> {len2})");
    assert_eq!(reused(tmp.path()), 0);
    drop(s);
    let s = open(tmp.path(), false);
    all_present(&s, "f");
}
