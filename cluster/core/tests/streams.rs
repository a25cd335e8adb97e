//! Named streams in the state machine (`machine/streams.rs`,
//! `docs/streams.md`): a stream is a node of its own under its file, its
//! data inline or chunked like any file's, read back byte-exact through
//! the chunk-store model; listed, renamed and deleted alone or with its
//! file, with nothing left behind (fsck, the model's chunk files); and
//! objects of a writable clone have none, so the clone never reaches its
//! source's streams.

mod common;

use common::*;
use duet_cluster::keys;
use duet_cluster::records::Command;
use duet_fs::{CreateKind, FsError, IfExists, NodeId, ObjRef, Op, OpOutput, SetAttrs, CHUNK_SIZE, ROOT_ID};

fn init() -> (Kv, NodeId) {
    let mut kv = Kv::new();
    let (r, _) = admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] });
    r.unwrap();
    let root = lookup(&mut kv, ROOT_ID, "data").unwrap().id;
    (kv, root)
}

fn open_stream(kv: &mut Kv, file: NodeId, name: &str, create: Option<IfExists>) -> Result<NodeId, FsError> {
    let r = run(kv, vec![Op::OpenStream { obj: ObjRef::Id(file), name: name.into(), attrs: SetAttrs::default(), create }]);
    r[0].clone().map(|o| o.attrs().unwrap().id)
}

fn streams(kv: &Kv, file: NodeId) -> Vec<(String, u64)> {
    let r = read_only(kv, vec![Op::ListStreams { obj: ObjRef::Id(file) }]);
    let OpOutput::Dir { entries, .. } = ok(r.results[0].clone()) else { panic!() };
    entries.iter().map(|e| (e.name.clone(), e.attrs.as_ref().unwrap().size)).collect()
}

fn read_all(kv: &mut Kv, disk: &mut Disk, id: NodeId) -> Vec<u8> {
    disk.destage(kv);
    let out = read_only(kv, vec![Op::Read { obj: ObjRef::Id(id), offset: 0, len: u64::MAX }]);
    let OpOutput::Read { data, attrs, .. } = ok(out.results[0].clone()) else { panic!() };
    match out.reads.first() {
        None => data,
        Some(plan) => {
            assert_eq!(plan.len, attrs.size);
            disk.read(plan.file, plan.offset, plan.len)
        }
    }
}

fn stream_records(kv: &Kv) -> usize {
    kv.keys().filter(|k| k.first() == Some(&keys::STREAM)).count()
}

#[test]
fn chunked_streams_round_trip_rename_and_go_with_their_file() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, root, "f", CreateKind::File);
    write(&mut kv, f, 0, b"the file's own data".to_vec());
    let big = pattern(7, (2 * CHUNK_SIZE + 4321) as usize);
    let s1 = open_stream(&mut kv, f, "Big", Some(IfExists::Fail)).unwrap();
    write(&mut kv, s1, 0, big.clone());
    let s2 = open_stream(&mut kv, f, "small", Some(IfExists::Open)).unwrap();
    write(&mut kv, s2, 0, b"inline".to_vec());
    assert_ne!(s1, f);
    // Byte-exact, apart from the file's own data; names case-insensitive.
    assert_eq!(read_all(&mut kv, &mut disk, s1), big);
    assert_eq!(read_all(&mut kv, &mut disk, f), b"the file's own data");
    assert_eq!(open_stream(&mut kv, f, "BIG", None), Ok(s1));
    assert_eq!(open_stream(&mut kv, f, "big", Some(IfExists::Fail)), Err(FsError::Exists));
    assert_eq!(open_stream(&mut kv, f, "none", None), Err(FsError::NotFound));
    for bad in ["", "a:b", "a/b", "a\\b", "a\0b"] {
        assert_eq!(open_stream(&mut kv, f, bad, Some(IfExists::Open)), Err(FsError::InvalidName), "{bad:?}");
    }
    assert_eq!(streams(&kv, f), vec![("Big".to_string(), big.len() as u64), ("small".to_string(), 6)]);
    // Not in the directory.
    let r = read_only(&kv, vec![Op::ReadDir { dir: ObjRef::Id(root), after: None, max_entries: 100, with_attrs: false }]);
    let OpOutput::Dir { entries, .. } = ok(r.results[0].clone()) else { panic!() };
    assert_eq!(names(&entries), vec!["f"]);
    clean(&kv, &disk);
    // Rename: onto a non-empty stream only... never; onto itself in
    // another case; to a new name.
    let ren = |kv: &mut Kv, from: &str, to: &str, replace: bool| {
        run(kv, vec![Op::RenameStream { obj: ObjRef::Id(f), name: from.into(), new_name: to.into(), replace }]).remove(0).map(|_| ())
    };
    assert_eq!(ren(&mut kv, "small", "big", false), Err(FsError::Exists));
    assert_eq!(ren(&mut kv, "small", "big", true), Err(FsError::Invalid), "a stream with data is not replaced");
    assert_eq!(ren(&mut kv, "small", "SMALL", false), Ok(()));
    assert_eq!(ren(&mut kv, "big", "moved", false), Ok(()));
    assert_eq!(streams(&kv, f), vec![("moved".to_string(), big.len() as u64), ("SMALL".to_string(), 6)]);
    assert_eq!(read_all(&mut kv, &mut disk, s1), big);
    // An empty stream is replaced.
    let e = open_stream(&mut kv, f, "empty", Some(IfExists::Open)).unwrap();
    assert_eq!(ren(&mut kv, "small", "empty", true), Ok(()));
    assert_eq!(run(&mut kv, vec![Op::GetAttr { obj: ObjRef::Id(e) }]).remove(0), Err(FsError::Stale));
    clean(&kv, &disk);
    // Remove one; then the file, and every stream goes with it.
    ok(run(&mut kv, vec![Op::RemoveStream { obj: ObjRef::Id(f), name: "EMPTY".into() }]).remove(0));
    assert_eq!(streams(&kv, f), vec![("moved".to_string(), big.len() as u64)]);
    ok(run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: "f".into(), dir_only: None }]).remove(0));
    disk.destage(&mut kv);
    assert_eq!(stream_records(&kv), 0);
    assert_eq!(run(&mut kv, vec![Op::GetAttr { obj: ObjRef::Id(s1) }]).remove(0), Err(FsError::Stale));
    assert!(disk.files().iter().all(|(id, _)| *id != s1), "the stream's chunks are reclaimed");
    clean(&kv, &disk);
}

#[test]
fn a_clone_has_no_streams_and_never_reaches_its_sources() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, root, "f", CreateKind::File);
    write(&mut kv, f, 0, b"base".to_vec());
    let s = open_stream(&mut kv, f, "s", Some(IfExists::Open)).unwrap();
    write(&mut kv, s, 0, pattern(3, (CHUNK_SIZE + 10) as usize));
    admin(
        &mut kv,
        Command::Clone { source: "data".into(), snapshot: None, share: share("c", "/clones/c"), now_ns: 7_000 },
    )
    .0
    .unwrap();
    let clones = lookup(&mut kv, ROOT_ID, "clones").unwrap().id;
    let croot = lookup(&mut kv, clones, "c").unwrap().id;
    let cf = lookup(&mut kv, croot, "f").unwrap().id;
    assert_ne!(cf, f);
    // The inherited file has no streams; none can be made, opened or
    // removed through it.
    assert_eq!(streams(&kv, cf), vec![]);
    assert_eq!(open_stream(&mut kv, cf, "s", None), Err(FsError::NotSupported));
    assert_eq!(open_stream(&mut kv, cf, "s", Some(IfExists::Open)), Err(FsError::NotSupported));
    let r = run(&mut kv, vec![Op::RemoveStream { obj: ObjRef::Id(cf), name: "s".into() }]).remove(0);
    assert_eq!(r, Err(FsError::NotSupported));
    // Deleting the clone's file leaves the source's stream alone.
    ok(run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(croot), name: "f".into(), dir_only: None }]).remove(0));
    assert_eq!(streams(&kv, f), vec![("s".to_string(), CHUNK_SIZE + 10)]);
    assert_eq!(read_all(&mut kv, &mut disk, s), pattern(3, (CHUNK_SIZE + 10) as usize));
    clean(&kv, &disk);
}

/// Under a snapshot: a stream changed, renamed and deleted with its file
/// leaves the snapshot's file byte-exact (the snapshot keeps the stream
/// node's before-images; its views show no streams) and fsck clean, before
/// and after the snapshot is dropped.
#[test]
fn streams_under_a_snapshot_keep_fsck_clean() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, root, "f", CreateKind::File);
    write(&mut kv, f, 0, b"file data".to_vec());
    let s = open_stream(&mut kv, f, "s", Some(IfExists::Open)).unwrap();
    write(&mut kv, s, 0, pattern(5, (CHUNK_SIZE + 77) as usize));
    admin(&mut kv, Command::Snapshot { share: "data".into(), name: "t0".into(), now_ns: 5_000 }).0.unwrap();
    write(&mut kv, s, 10, b"changed after the snapshot".to_vec());
    let t = open_stream(&mut kv, f, "t", Some(IfExists::Open)).unwrap();
    write(&mut kv, t, 0, b"new".to_vec());
    ok(run(&mut kv, vec![Op::RenameStream { obj: ObjRef::Id(f), name: "t".into(), new_name: "u".into(), replace: false }])
        .remove(0));
    disk.destage(&mut kv);
    clean(&kv, &disk);
    ok(run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: "f".into(), dir_only: None }]).remove(0));
    disk.destage(&mut kv);
    assert_eq!(stream_records(&kv), 0);
    clean(&kv, &disk);
    // The snapshot's file is still there, with its data and no streams.
    let snap = lookup(&mut kv, root, ".snapshot").unwrap().id;
    let t0 = lookup(&mut kv, snap, "t0").unwrap().id;
    let vf = lookup(&mut kv, t0, "f").unwrap().id;
    assert_eq!(read_all(&mut kv, &mut disk, vf), b"file data");
    assert_eq!(streams(&kv, vf), vec![]);
    assert_eq!(open_stream(&mut kv, vf, "s", None), Err(FsError::NotSupported));
    admin(&mut kv, Command::DropSnapshot { share: "data".into(), name: "t0".into(), now_ns: 6_000 }).0.unwrap();
    disk.destage(&mut kv);
    clean(&kv, &disk);
}
