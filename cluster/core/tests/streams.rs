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

fn to_data(kv: &mut Kv, f: NodeId, name: &str, replace: bool) -> Result<OpOutput, FsError> {
    run(kv, vec![Op::RenameStreamToData { obj: ObjRef::Id(f), name: name.into(), replace }]).remove(0)
}

fn blob_records(kv: &Kv) -> usize {
    kv.keys().filter(|k| k.first() == Some(&keys::BLOB)).count()
}

/// A named stream renamed onto its file's unnamed stream (`::$DATA`,
/// smbtorture smb2.streams.rename2): a file with data refuses it without
/// ReplaceIfExists; with it the stream's data becomes the file's, its whole
/// chunks shared by reference (the same chunk files, not copies), the
/// stream is gone, the file keeps its id, and fsck stays clean before and
/// after the destager runs, and after the file is written and removed.
#[test]
fn a_stream_renamed_onto_the_unnamed_stream_becomes_the_files_data() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, root, "f", CreateKind::File);
    write(&mut kv, f, 0, pattern(1, (CHUNK_SIZE + 99) as usize));
    let big = pattern(7, (3 * CHUNK_SIZE + 4321) as usize);
    let s = open_stream(&mut kv, f, "Big", Some(IfExists::Fail)).unwrap();
    write(&mut kv, s, 0, big.clone());
    open_stream(&mut kv, f, "other", Some(IfExists::Fail)).unwrap();
    disk.destage(&mut kv);
    let inodes = disk.inodes();
    // The file holds data: a collision without ReplaceIfExists.
    assert_eq!(to_data(&mut kv, f, "big", false), Err(FsError::Exists));
    assert_eq!(to_data(&mut kv, f, "none", true), Err(FsError::NotFound));
    assert_eq!(to_data(&mut kv, f, "a:b", true), Err(FsError::InvalidName));
    let OpOutput::Attrs { attrs, .. } = ok(to_data(&mut kv, f, "BIG", true)) else { panic!() };
    assert_eq!((attrs.id, attrs.size), (f, big.len() as u64));
    // One command: the stream is gone, and fsck is clean with its records
    // still queued, and once they are destaged.
    assert_eq!(streams(&kv, f), vec![("other".to_string(), 0)]);
    assert_eq!(run(&mut kv, vec![Op::GetAttr { obj: ObjRef::Id(s) }]).remove(0), Err(FsError::Stale));
    clean(&kv, &disk);
    assert_eq!(read_all(&mut kv, &mut disk, f), big);
    clean(&kv, &disk);
    // Shared by reference: the three whole chunks are the stream's chunk
    // files (now linked by the file alone), only the partial one copied;
    // the file's old chunks and the stream's names are gone.
    assert!(disk.files().iter().all(|(id, _)| *id != s), "the stream's chunk names are reclaimed");
    assert_eq!(disk.inodes(), inodes - 2, "the file's two old chunks and the stream's partial one went, its copy came");
    assert_eq!(blob_records(&kv), 3);
    // The file is an ordinary file again: written (copy-on-write of a
    // shared chunk), truncated, removed; nothing is left behind.
    write(&mut kv, f, CHUNK_SIZE + 5, b"after".to_vec());
    let mut want = big.clone();
    want[(CHUNK_SIZE + 5) as usize..(CHUNK_SIZE + 10) as usize].copy_from_slice(b"after");
    assert_eq!(read_all(&mut kv, &mut disk, f), want);
    clean(&kv, &disk);
    ok(run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: "f".into(), dir_only: None }]).remove(0));
    disk.destage(&mut kv);
    assert_eq!((stream_records(&kv), blob_records(&kv), disk.files().len()), (0, 0, 0));
    clean(&kv, &disk);
}

/// Inline streams and files, empty files without ReplaceIfExists, a
/// chunked file replaced by an inline stream, directories (which have no
/// unnamed stream), and the same under a snapshot, whose file keeps its
/// data.
#[test]
fn renaming_onto_the_unnamed_stream_inline_empty_directories_and_snapshots() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    // An empty inline file takes an inline stream without ReplaceIfExists.
    let f = create(&mut kv, root, "f", CreateKind::File);
    let s = open_stream(&mut kv, f, "s", Some(IfExists::Open)).unwrap();
    write(&mut kv, s, 0, b"stream bytes".to_vec());
    ok(to_data(&mut kv, f, "s", false));
    assert_eq!(read_all(&mut kv, &mut disk, f), b"stream bytes");
    assert_eq!(streams(&kv, f), vec![]);
    clean(&kv, &disk);
    // An empty stream onto an empty file (what rename2 does).
    open_stream(&mut kv, f, "empty", Some(IfExists::Open)).unwrap();
    assert_eq!(to_data(&mut kv, f, "empty", false), Err(FsError::Exists));
    let g = create(&mut kv, root, "g", CreateKind::File);
    open_stream(&mut kv, g, "empty", Some(IfExists::Open)).unwrap();
    ok(to_data(&mut kv, g, "empty", false));
    assert_eq!(read_all(&mut kv, &mut disk, g), b"");
    // A chunked file replaced by an inline stream.
    let h = create(&mut kv, root, "h", CreateKind::File);
    write(&mut kv, h, 0, pattern(2, (CHUNK_SIZE + 1) as usize));
    let t = open_stream(&mut kv, h, "t", Some(IfExists::Open)).unwrap();
    write(&mut kv, t, 0, b"small".to_vec());
    ok(run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(t), attrs: SetAttrs { size: Some(100), ..Default::default() } }])
        .remove(0));
    ok(to_data(&mut kv, h, "t", true));
    let mut want = b"small".to_vec();
    want.resize(100, 0);
    assert_eq!(read_all(&mut kv, &mut disk, h), want);
    clean(&kv, &disk);
    // A directory has no unnamed stream.
    let d = create(&mut kv, root, "d", CreateKind::Directory);
    open_stream(&mut kv, d, "s", Some(IfExists::Open)).unwrap();
    assert_eq!(to_data(&mut kv, d, "s", true), Err(FsError::Invalid));
    // Under a snapshot: the snapshot's file keeps its data.
    let k = create(&mut kv, root, "k", CreateKind::File);
    let before = pattern(4, (2 * CHUNK_SIZE + 3) as usize);
    write(&mut kv, k, 0, before.clone());
    let u = open_stream(&mut kv, k, "u", Some(IfExists::Open)).unwrap();
    let after = pattern(5, (CHUNK_SIZE + 17) as usize);
    write(&mut kv, u, 0, after.clone());
    admin(&mut kv, Command::Snapshot { share: "data".into(), name: "t0".into(), now_ns: 5_000 }).0.unwrap();
    ok(to_data(&mut kv, k, "u", true));
    assert_eq!(read_all(&mut kv, &mut disk, k), after);
    clean(&kv, &disk);
    let snap = lookup(&mut kv, root, ".snapshot").unwrap().id;
    let t0 = lookup(&mut kv, snap, "t0").unwrap().id;
    let vk = lookup(&mut kv, t0, "k").unwrap().id;
    assert_eq!(read_all(&mut kv, &mut disk, vk), before);
    admin(&mut kv, Command::DropSnapshot { share: "data".into(), name: "t0".into(), now_ns: 6_000 }).0.unwrap();
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(read_all(&mut kv, &mut disk, k), after);
}
