//! The batch API against the real store: RocksDB, raft-rs, the commit thread.

use duet_cluster::records::Command;
use duet_cluster_store::{Query, QueryAnswer, Store};
use duet_fs::{
    Access, Batch, CreateKind, Credentials, FsError, IfExists, ObjRef, Op, OpOutput, SetAttrs, WriteData, ROOT_ID,
};

fn open(dir: &std::path::Path) -> Store {
    let s = Store::open(dir, 1).unwrap();
    let h = s.handle();
    if let QueryAnswer::Bool(false) = h.query_blocking(Query::Initialized).unwrap() {
        h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    }
    s
}

fn batch(ops: Vec<Op>) -> Batch {
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.ops = ops;
    b
}

fn small_file_chain(dir: u64, name: &str, data: &[u8]) -> Batch {
    let mut b = Batch::new(Credentials::user(1000, 1000), 5_000);
    let f = b.push(Op::Create {
        dir: ObjRef::Id(dir),
        name: name.into(),
        kind: CreateKind::File,
        attrs: SetAttrs { mode: Some(0o644), ..Default::default() },
        if_exists: IfExists::Fail,
    });
    b.push(Op::Write { obj: f, offset: 0, data: WriteData::Bytes(data.to_vec()), append: false });
    b.push(Op::Close { obj: f });
    b
}

fn mkdir(h: &duet_cluster_store::StoreHandle, parent: u64, name: &str, mode: u32) -> u64 {
    let out = h
        .batch_blocking(batch(vec![Op::Create {
            dir: ObjRef::Id(parent),
            name: name.into(),
            kind: CreateKind::Directory,
            attrs: SetAttrs { mode: Some(mode), ..Default::default() },
            if_exists: IfExists::Fail,
        }]))
        .unwrap();
    match &out.applied.results[0] {
        Ok(OpOutput::Object { attrs, created: true, .. }) => attrs.id,
        other => panic!("mkdir: {other:?}"),
    }
}

#[test]
fn small_file_chain_costs_one_proposal_and_one_fsync() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let h = s.handle();
    let dir = mkdir(&h, ROOT_ID, "d", 0o777);
    let c = h.counters();
    let (p0, f0) = (c.proposals.load(std::sync::atomic::Ordering::SeqCst), c.fsyncs.load(std::sync::atomic::Ordering::SeqCst));
    let out = h.batch_blocking(small_file_chain(dir, "a.txt", b"hello world")).unwrap();
    let (p1, f1) = (c.proposals.load(std::sync::atomic::Ordering::SeqCst), c.fsyncs.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(p1 - p0, 1, "one proposal");
    assert_eq!(f1 - f0, 1, "one fsync");
    assert_eq!(out.cost.proposals, 1);
    assert_eq!(out.cost.fsyncs, 1);
    assert!(out.applied.results.iter().all(|r| r.is_ok()), "{:?}", out.applied.results);
    match &out.applied.results[2] {
        Ok(OpOutput::Attrs { attrs, .. }) => {
            assert_eq!(attrs.size, 11);
            assert_eq!(attrs.uid, 1000);
        }
        other => panic!("{other:?}"),
    }
    // Reading it back is a read-only batch: no proposal, no fsync.
    let mut b = Batch::new(Credentials::user(1000, 1000), 6_000);
    let f = b.push(Op::Lookup { dir: ObjRef::Id(dir), name: "a.txt".into() });
    b.push(Op::Read { obj: f, offset: 0, len: 100 });
    let out = h.batch_blocking(b).unwrap();
    assert_eq!(c.proposals.load(std::sync::atomic::Ordering::SeqCst), p1);
    assert_eq!(c.fsyncs.load(std::sync::atomic::Ordering::SeqCst), f1);
    match &out.applied.results[1] {
        Ok(OpOutput::Read { data, eof: true, .. }) => assert_eq!(data, b"hello world"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn thousands_of_files_create_read_rename_readdir_remove() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let h = s.handle();
    let dir = mkdir(&h, ROOT_ID, "many", 0o777);
    let n = 3000;
    // Concurrent committers: several threads create files in parallel.
    std::thread::scope(|sc| {
        for t in 0..4 {
            let h = h.clone();
            sc.spawn(move || {
                for i in (t..n).step_by(4) {
                    let data = format!("file {i} contents").into_bytes();
                    let out = h.batch_blocking(small_file_chain(dir, &format!("f{i:05}"), &data)).unwrap();
                    assert!(out.applied.results.iter().all(|r| r.is_ok()), "{:?}", out.applied.results);
                }
            });
        }
    });
    let c = h.counters();
    let fsyncs = c.fsyncs.load(std::sync::atomic::Ordering::SeqCst);
    let proposals = c.proposals.load(std::sync::atomic::Ordering::SeqCst);
    assert!(proposals >= n as u64);
    eprintln!("{n} creates from 4 committers: {proposals} proposals, {fsyncs} fsyncs");

    // Readdir in pages of 500: all names, in order, with attributes.
    let mut names = Vec::new();
    let mut after = None;
    loop {
        let out = h
            .batch_blocking(batch(vec![Op::ReadDir { dir: ObjRef::Id(dir), after: after.clone(), max_entries: 500, with_attrs: true }]))
            .unwrap();
        let Ok(OpOutput::Dir { entries, eof, .. }) = &out.applied.results[0] else { panic!() };
        for e in entries {
            assert_eq!(e.attrs.as_ref().unwrap().size as usize, format!("file {} contents", &e.name[1..].parse::<u32>().unwrap()).len());
            names.push(e.name.clone());
        }
        after = names.last().cloned();
        if *eof {
            break;
        }
    }
    let want: Vec<String> = (0..n).map(|i| format!("f{i:05}")).collect();
    assert_eq!(names, want);

    // Read every file back.
    for i in (0..n).step_by(7) {
        let mut b = batch(vec![]);
        let f = b.push(Op::Lookup { dir: ObjRef::Id(dir), name: format!("f{i:05}") });
        b.push(Op::Read { obj: f, offset: 0, len: 1 << 20 });
        let out = h.batch_blocking(b).unwrap();
        let Ok(OpOutput::Read { data, .. }) = &out.applied.results[1] else { panic!("{:?}", out.applied.results) };
        assert_eq!(data, format!("file {i} contents").as_bytes());
    }

    // Rename half into a second directory, in batches of 100 renames.
    let other = mkdir(&h, ROOT_ID, "other", 0o777);
    for chunk in (0..n).filter(|i| i % 2 == 0).collect::<Vec<_>>().chunks(100) {
        let ops = chunk
            .iter()
            .map(|i| Op::Rename {
                src_dir: ObjRef::Id(dir),
                src_name: format!("f{i:05}"),
                dst_dir: ObjRef::Id(other),
                dst_name: format!("g{i:05}"),
                replace: false,
            })
            .collect();
        let out = h.batch_blocking(batch(ops)).unwrap();
        assert!(out.applied.results.iter().all(|r| r.is_ok()));
        assert_eq!(out.cost.proposals, 1);
    }
    let count = |d: u64| {
        let out = h
            .batch_blocking(batch(vec![Op::ReadDir { dir: ObjRef::Id(d), after: None, max_entries: 100_000, with_attrs: false }]))
            .unwrap();
        let Ok(OpOutput::Dir { entries, .. }) = &out.applied.results[0] else { panic!() };
        entries.len()
    };
    assert_eq!(count(dir), n / 2);
    assert_eq!(count(other), n / 2);

    // Remove everything; the directories then go too.
    for (d, prefix) in [(dir, "f"), (other, "g")] {
        let ops: Vec<Op> = (0..n)
            .filter(|i| (i % 2 == 0) == (prefix == "g"))
            .map(|i| Op::Remove { dir: ObjRef::Id(d), name: format!("{prefix}{i:05}"), dir_only: Some(false) })
            .collect();
        let out = h.batch_blocking(batch(ops)).unwrap();
        assert!(out.applied.results.iter().all(|r| r.is_ok()));
    }
    let out = h
        .batch_blocking(batch(vec![
            Op::Remove { dir: ObjRef::Id(ROOT_ID), name: "many".into(), dir_only: Some(true) },
            Op::Remove { dir: ObjRef::Id(ROOT_ID), name: "other".into(), dir_only: Some(true) },
        ]))
        .unwrap();
    assert!(out.applied.results.iter().all(|r| r.is_ok()), "{:?}", out.applied.results);
    let QueryAnswer::Fsck(r) = h.query_blocking(Query::Fsck { chunk_files: vec![] }).unwrap() else { panic!() };
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.nodes, 1);
}

#[test]
fn errors_and_permissions() {
    let tmp = tempfile::tempdir().unwrap();
    let s = open(tmp.path());
    let h = s.handle();
    let dir = mkdir(&h, ROOT_ID, "private", 0o700);
    let user = Credentials::user(1000, 1000);
    let mut b = Batch::new(user.clone(), 9);
    b.push(Op::Create {
        dir: ObjRef::Id(dir),
        name: "x".into(),
        kind: CreateKind::File,
        attrs: SetAttrs::default(),
        if_exists: IfExists::Fail,
    });
    let out = h.batch_blocking(b).unwrap();
    assert_eq!(out.applied.results[0], Err(FsError::Access));

    // Stop on error: later operations are skipped, earlier ones stay applied.
    let pub_dir = mkdir(&h, ROOT_ID, "pub", 0o777);
    let mut b = Batch::new(user.clone(), 10);
    b.push(Op::Create { dir: ObjRef::Id(pub_dir), name: "a".into(), kind: CreateKind::File, attrs: SetAttrs::default(), if_exists: IfExists::Fail });
    b.push(Op::Create { dir: ObjRef::Id(pub_dir), name: "a".into(), kind: CreateKind::File, attrs: SetAttrs::default(), if_exists: IfExists::Fail });
    b.push(Op::Remove { dir: ObjRef::Id(pub_dir), name: "a".into(), dir_only: None });
    let out = h.batch_blocking(b).unwrap();
    assert!(out.applied.results[0].is_ok());
    assert_eq!(out.applied.results[1], Err(FsError::Exists));
    assert_eq!(out.applied.results[2], Err(FsError::Skipped));

    // Names, types, references.
    let mut b = Batch::new(user.clone(), 11);
    b.stop_on_error = false;
    b.push(Op::Create { dir: ObjRef::Id(pub_dir), name: "a/b".into(), kind: CreateKind::File, attrs: SetAttrs::default(), if_exists: IfExists::Fail });
    b.push(Op::Create { dir: ObjRef::Id(pub_dir), name: "..".into(), kind: CreateKind::File, attrs: SetAttrs::default(), if_exists: IfExists::Fail });
    b.push(Op::Lookup { dir: ObjRef::Id(pub_dir), name: "missing".into() });
    b.push(Op::Read { obj: ObjRef::Result(2), offset: 0, len: 1 });
    b.push(Op::Remove { dir: ObjRef::Id(ROOT_ID), name: "pub".into(), dir_only: None });
    b.push(Op::Open { obj: ObjRef::Id(pub_dir), access: Access { write: true, ..Default::default() }, truncate: false });
    b.push(Op::GetAttr { obj: ObjRef::Id(999_999) });
    let out = h.batch_blocking(b).unwrap();
    let errs: Vec<_> = out.applied.results.iter().map(|r| r.as_ref().err().copied()).collect();
    assert_eq!(
        errs,
        vec![
            Some(FsError::InvalidName),
            Some(FsError::InvalidName),
            Some(FsError::NotFound),
            Some(FsError::BadRef),
            Some(FsError::Access),
            Some(FsError::IsDir),
            Some(FsError::Stale)
        ]
    );

    // A directory may not move into itself.
    let a = mkdir(&h, pub_dir, "da", 0o777);
    mkdir(&h, a, "db", 0o777);
    let out = h
        .batch_blocking(batch(vec![Op::Rename {
            src_dir: ObjRef::Id(pub_dir),
            src_name: "da".into(),
            dst_dir: ObjRef::Id(a),
            dst_name: "moved".into(),
            replace: true,
        }]))
        .unwrap();
    assert_eq!(out.applied.results[0], Err(FsError::RenameIntoSelf));
    let QueryAnswer::Fsck(r) = h.query_blocking(Query::Fsck { chunk_files: vec![] }).unwrap() else { panic!() };
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

#[test]
fn state_survives_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let s = open(tmp.path());
        let h = s.handle();
        let d = mkdir(&h, ROOT_ID, "keep", 0o777);
        for i in 0..50 {
            h.batch_blocking(small_file_chain(d, &format!("k{i}"), format!("v{i}").as_bytes())).unwrap();
        }
        // Hard link and symlink.
        let out = h
            .batch_blocking(batch(vec![
                Op::Lookup { dir: ObjRef::Id(d), name: "k1".into() },
                Op::Link { obj: ObjRef::Result(0), dir: ObjRef::Id(d), name: "k1-link".into() },
                Op::Create { dir: ObjRef::Id(d), name: "sym".into(), kind: CreateKind::Symlink { target: "k2".into() }, attrs: SetAttrs::default(), if_exists: IfExists::Fail },
            ]))
            .unwrap();
        assert!(out.applied.results.iter().all(|r| r.is_ok()), "{:?}", out.applied.results);
        s.shutdown();
    }
    let s = open(tmp.path());
    let h = s.handle();
    let out = h
        .batch_blocking(batch(vec![
            Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: "keep".into() },
            Op::Lookup { dir: ObjRef::Result(0), name: "k49".into() },
            Op::Read { obj: ObjRef::Result(1), offset: 0, len: 10 },
            Op::Lookup { dir: ObjRef::Result(0), name: "k1-link".into() },
            Op::Lookup { dir: ObjRef::Result(0), name: "sym".into() },
            Op::ReadLink { obj: ObjRef::Result(4) },
        ]))
        .unwrap();
    let Ok(OpOutput::Read { data, .. }) = &out.applied.results[2] else { panic!("{:?}", out.applied.results) };
    assert_eq!(data, b"v49");
    let Ok(OpOutput::Object { attrs, .. }) = &out.applied.results[3] else { panic!() };
    assert_eq!(attrs.nlink, 2);
    let Ok(OpOutput::Link { target, .. }) = &out.applied.results[5] else { panic!() };
    assert_eq!(target, "k2");
    let QueryAnswer::Fsck(r) = h.query_blocking(Query::Fsck { chunk_files: vec![] }).unwrap() else { panic!() };
    assert!(r.problems.is_empty(), "{:?}", r.problems);
}

/// SMB's caseless lookup: an exact name wins; otherwise the first entry
/// that matches ignoring case, with its real name; a later op can use it;
/// nothing matching is NotFound. Exact Lookup stays case-sensitive.
#[test]
fn caseless_lookup_finds_the_stored_name() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let h = s.handle();
    let d = mkdir(&h, ROOT_ID, "Docs", 0o777);
    for (name, data) in [("Report.TXT", &b"q3"[..]), ("report.txt", b"other")] {
        let out = h.batch_blocking(small_file_chain(d, name, data)).unwrap();
        assert!(out.applied.results.iter().all(|r| r.is_ok()), "{:?}", out.applied.results);
    }
    let out = h
        .batch_blocking(batch(vec![
            Op::LookupCaseless { dir: ObjRef::Id(ROOT_ID), name: "DOCS".into() },
            Op::LookupCaseless { dir: ObjRef::Result(0), name: "REPORT.txt".into() },
            Op::LookupCaseless { dir: ObjRef::Result(0), name: "report.txt".into() },
            Op::Read { obj: ObjRef::Result(1), offset: 0, len: 10 },
        ]))
        .unwrap();
    let r = &out.applied.results;
    assert!(matches!(&r[0], Ok(OpOutput::Found { name, .. }) if name == "Docs"), "{:?}", r[0]);
    // No exact "REPORT.txt": the first caseless match in name order.
    assert!(matches!(&r[1], Ok(OpOutput::Found { name, .. }) if name == "Report.TXT"), "{:?}", r[1]);
    assert!(matches!(&r[2], Ok(OpOutput::Found { name, .. }) if name == "report.txt"), "{:?}", r[2]);
    assert!(matches!(&r[3], Ok(OpOutput::Read { data, .. }) if data == b"q3"), "{:?}", r[3]);
    let out = h
        .batch_blocking(batch(vec![
            Op::LookupCaseless { dir: ObjRef::Id(d), name: "missing.txt".into() },
        ]))
        .unwrap();
    assert_eq!(out.applied.results[0], Err(FsError::NotFound));
    let out = h.batch_blocking(batch(vec![Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: "docs".into() }])).unwrap();
    assert_eq!(out.applied.results[0], Err(FsError::NotFound));
}

/// SMB extended attributes: set (case-insensitive names, stored upper-case),
/// replace, remove with an empty value, listed in name order, size limit,
/// and gone with the file (fsck finds nothing left).
#[test]
fn extended_attributes_live_and_die_with_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let h = s.handle();
    let d = mkdir(&h, ROOT_ID, "eas", 0o777);
    let out = h.batch_blocking(small_file_chain(d, "f", b"x")).unwrap();
    let f = out.applied.results[0].as_ref().unwrap().attrs().unwrap().id;
    let set = |eas: Vec<(&str, &[u8])>| {
        let eas = eas.into_iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect();
        h.batch_blocking(batch(vec![Op::SetEas { obj: ObjRef::Id(f), eas }])).unwrap().applied.results[0].clone()
    };
    let get = || match &h.batch_blocking(batch(vec![Op::GetEas { obj: ObjRef::Id(f) }])).unwrap().applied.results[0] {
        Ok(OpOutput::Eas { eas, .. }) => eas.clone(),
        other => panic!("{other:?}"),
    };
    assert!(set(vec![("user.b", b"2"), ("Alpha", b"1")]).is_ok());
    assert_eq!(get(), vec![("ALPHA".to_string(), b"1".to_vec()), ("USER.B".to_string(), b"2".to_vec())]);
    assert!(set(vec![("alpha", b"one"), ("USER.B", b"")]).is_ok());
    assert_eq!(get(), vec![("ALPHA".to_string(), b"one".to_vec())]);
    let big = vec![7u8; 65535];
    assert_eq!(set(vec![("a1", &big), ("a2", &big)]), Err(FsError::NoSpace));
    let names: Vec<String> = get().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["ALPHA".to_string()], "a refused change writes nothing");
    let out = h
        .batch_blocking(batch(vec![Op::Remove { dir: ObjRef::Id(d), name: "f".into(), dir_only: Some(false) }]))
        .unwrap();
    assert!(out.applied.results[0].is_ok());
    let QueryAnswer::Fsck(r) = h.query_blocking(Query::Fsck { chunk_files: vec![] }).unwrap() else { panic!() };
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    // ... and fsck would see EAs left behind (checked on the raw keys).
    let db: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
        [(duet_cluster::keys::ea(999_999, "X"), b"v".to_vec())].into_iter().collect();
    let report = duet_cluster::fsck::check(&db, &[]);
    assert!(report.problems.iter().any(|p| p.contains("missing node 999999")), "{:?}", report.problems);
}

/// An allocation below the end of file cuts the file only when asked
/// (SMB FileAllocationInformation); NFSv4.2 ALLOCATE never shrinks it.
#[test]
fn allocation_below_eof_truncates_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let h = s.handle();
    let d = mkdir(&h, ROOT_ID, "alloc", 0o777);
    let out = h.batch_blocking(small_file_chain(d, "f", b"0123456789")).unwrap();
    let f = out.applied.results[0].as_ref().unwrap().attrs().unwrap().id;
    let set = |alloc: u64| {
        let out = h
            .batch_blocking(batch(vec![Op::SetAttr {
                obj: ObjRef::Id(f),
                attrs: SetAttrs { alloc_size: Some(alloc), ..Default::default() },
            }]))
            .unwrap();
        out.applied.results[0].as_ref().unwrap().attrs().unwrap().clone()
    };
    let a = set(4);
    assert_eq!((a.size, a.alloc_size), (10, 10), "a plain allocation keeps the data");
    let a = set(4 | duet_fs::ALLOC_TRUNCATES);
    assert_eq!((a.size, a.alloc_size), (4, 4), "SMB's allocation cuts the file");
    let out = h.batch_blocking(batch(vec![Op::Read { obj: ObjRef::Id(f), offset: 0, len: 100 }])).unwrap();
    assert!(matches!(&out.applied.results[0], Ok(OpOutput::Read { data, .. }) if data == b"0123"));
}
