//! Layers (snapshots of a share) in the state machine: a snapshot is one
//! command writing the same few records whatever the share's size; after
//! it, writes, deletions, renames and directory re-creation change only the
//! live view, while the snapshot's view (read through `duet_fs::view` ids)
//! stays byte for byte what it was; data is shared by reference (a shadow
//! file's chunks name the live file's blobs) and only written chunks are
//! copied; deleting snapshots drops every before-image and reclaims the
//! shadows; fsck stays clean throughout.
//!
//! The queued data records are applied by a model of the destager with
//! the data path's semantics (the same model as `tests/reflink.rs`: one
//! inode per shared chunk, linked from every file's chunk path).

mod common;

use duet_cluster::keys;
use duet_cluster::machine::AdminError;
use duet_cluster::records::Command;
use common::*;
use duet_fs::{
    view, Access, Attrs, Batch, CreateKind, Credentials, DirEntry, FileType, FsError, IfExists, NodeId, ObjRef, Op,
    OpOutput, SetAttrs, WriteData, CHUNK_SIZE, ROOT_ID,
};

const CS: u64 = CHUNK_SIZE;


/// A fresh namespace with share `data` at `/data`; answers its directory.
fn init() -> (Kv, NodeId) {
    let mut kv = Kv::new();
    let (r, _) = admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] });
    r.unwrap();
    let root = lookup(&mut kv, ROOT_ID, "data").unwrap().id;
    (kv, root)
}

fn snap(kv: &mut Kv, name: &str) -> Result<(), AdminError> {
    admin(kv, Command::Snapshot { share: "data".into(), name: name.into(), now_ns: 5_000 }).0
}

fn drop_snap(kv: &mut Kv, name: &str) -> Result<(), AdminError> {
    admin(kv, Command::DropSnapshot { share: "data".into(), name: name.into(), now_ns: 6_000 }).0
}


/// Reads a whole file (live or view) through the machine; chunked data
/// from the model disk (everything destaged first).
fn read_all(kv: &mut Kv, disk: &mut Disk, id: NodeId) -> Vec<u8> {
    disk.destage(kv);
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.ops = vec![Op::Read { obj: ObjRef::Id(id), offset: 0, len: u64::MAX }];
    let out = run_batch(kv, &b);
    let OpOutput::Read { data, attrs, .. } = ok(out.results[0].clone()) else { panic!() };
    match out.reads.first() {
        None => data,
        Some(plan) => {
            assert!(plan.overlay.is_empty(), "destaged");
            assert_eq!(plan.len, attrs.size);
            disk.read(plan.file, plan.offset, plan.len)
        }
    }
}

fn list(kv: &mut Kv, dir: NodeId) -> Vec<DirEntry> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let r = run(kv, vec![Op::ReadDir { dir: ObjRef::Id(dir), after: after.clone(), max_entries: 3, with_attrs: true }]);
        let OpOutput::Dir { entries, eof, .. } = ok(r[0].clone()) else { panic!() };
        after = entries.last().map(|e| e.name.clone());
        out.extend(entries);
        if eof {
            return out;
        }
    }
}

/// A whole tree as (path, type, content, attributes, stored DACL) through
/// the machine.
type Tree = Vec<(String, FileType, Vec<u8>, Attrs, Option<(u16, Vec<u8>)>)>;

/// A whole tree as (path, type, content, attributes, DACL) through the
/// machine.
fn tree(kv: &mut Kv, disk: &mut Disk, dir: NodeId) -> Tree {
    let mut out = Vec::new();
    let mut todo = vec![(String::new(), dir)];
    while let Some((path, d)) = todo.pop() {
        for e in list(kv, d) {
            let p = format!("{path}/{}", e.name);
            let mut attrs = e.attrs.clone().unwrap();
            // Compare views with the live objects they froze.
            attrs.id = view::split(attrs.id).map_or(attrs.id, |v| v.1);
            let content = match e.ftype {
                FileType::Regular => read_all(kv, disk, e.id),
                FileType::Directory => {
                    todo.push((p.clone(), e.id));
                    Vec::new()
                }
                _ => Vec::new(),
            };
            let acl = match &run(kv, vec![Op::GetAcl { obj: ObjRef::Id(e.id) }])[0] {
                Ok(OpOutput::Acl { acl, .. }) => acl.clone(),
                other => panic!("GetAcl of {p}: {other:?}"),
            };
            out.push((p, e.ftype, content, attrs, acl));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn snapshot_root(kv: &mut Kv, share_dir: NodeId, name: &str) -> NodeId {
    let sd = lookup(kv, share_dir, view::SNAPSHOT_DIR).expect(".snapshot");
    assert!(view::is_view(sd.id));
    lookup(kv, sd.id, name).expect("snapshot by name").id
}

/// Every object of the tree: the live share and its snapshot after
/// changes of every kind.
#[test]
fn a_snapshot_keeps_its_view_while_the_share_changes() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let small = create(&mut kv, root, "small", CreateKind::File);
    write(&mut kv, small, 0, b"old small".to_vec());
    let big = create(&mut kv, root, "big", CreateKind::File);
    let big_old = pattern(1, (2 * CS + 1000) as usize);
    write(&mut kv, big, 0, big_old.clone());
    let d = create(&mut kv, root, "d", CreateKind::Directory);
    let x = create(&mut kv, d, "x", CreateKind::File);
    write(&mut kv, x, 0, b"x in d".to_vec());
    let gone = create(&mut kv, root, "gone", CreateKind::File);
    write(&mut kv, gone, 0, pattern(2, (CS + 7) as usize));
    let moved = create(&mut kv, root, "moved", CreateKind::File);
    write(&mut kv, moved, 0, b"moving".to_vec());
    let linked = create(&mut kv, root, "linked", CreateKind::File);
    write(&mut kv, linked, 0, b"one name".to_vec());
    disk.destage(&mut kv);
    let before = tree(&mut kv, &mut disk, root);
    let inodes_before = disk.inodes();

    snap(&mut kv, "s1").unwrap();
    clean(&kv, &disk);
    let s1 = snapshot_root(&mut kv, root, "s1");
    assert_eq!(tree(&mut kv, &mut disk, s1), before, "the snapshot at once");

    // Changes of every kind.
    write(&mut kv, small, 0, b"NEW".to_vec());
    write(&mut kv, big, CS + 5, b"one chunk changes".to_vec());
    let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(d), name: "x".into(), dir_only: None }]);
    ok(r[0].clone());
    let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: "d".into(), dir_only: Some(true) }]);
    ok(r[0].clone());
    let d2 = create(&mut kv, root, "d", CreateKind::Directory);
    assert_ne!(d2, d);
    let y = create(&mut kv, d2, "y", CreateKind::File);
    write(&mut kv, y, 0, b"new in the new d".to_vec());
    let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: "gone".into(), dir_only: None }]);
    ok(r[0].clone());
    let r = run(
        &mut kv,
        vec![Op::Rename {
            src_dir: ObjRef::Id(root),
            src_name: "moved".into(),
            dst_dir: ObjRef::Id(d2),
            dst_name: "here".into(),
            replace: false,
        }],
    );
    ok(r[0].clone());
    let r = run(&mut kv, vec![Op::Link { obj: ObjRef::Id(linked), dir: ObjRef::Id(d2), name: "second".into() }]);
    ok(r[0].clone());
    let r = run(
        &mut kv,
        vec![Op::SetAttr { obj: ObjRef::Id(linked), attrs: SetAttrs { mode: Some(0o600), ..Default::default() } }],
    );
    ok(r[0].clone());
    let fresh = create(&mut kv, root, "fresh", CreateKind::File);
    write(&mut kv, fresh, 0, pattern(3, 3000));
    disk.destage(&mut kv);
    clean(&kv, &disk);

    // The snapshot: byte for byte as before, attributes included.
    assert_eq!(tree(&mut kv, &mut disk, s1), before, "the snapshot after the changes");
    // The live share: the changes.
    let live = tree(&mut kv, &mut disk, root);
    let paths: Vec<&str> = live.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(paths, ["/big", "/d", "/d/here", "/d/second", "/d/y", "/fresh", "/linked", "/small"]);
    let get = |p: &str| live.iter().find(|t| t.0 == p).unwrap().2.clone();
    assert_eq!(get("/small"), b"NEW small");
    let mut big_new = big_old.clone();
    big_new[(CS + 5) as usize..(CS + 22) as usize].copy_from_slice(b"one chunk changes");
    assert_eq!(get("/big"), big_new);
    assert_eq!(get("/d/here"), b"moving");
    assert_eq!(get("/d/second"), b"one name");
    // Node ids stay: the live file keeps its id across the copy-up.
    assert_eq!(lookup(&mut kv, root, "big").unwrap().id, big);
    // Data by reference: the big file's write copied one chunk; the
    // deleted file's chunks live on in the snapshot only. (`fresh` is
    // inline.)
    assert_eq!(disk.inodes(), inodes_before + 1, "one chunk copied");

    // A snapshot object is distinct from the live one and read-only.
    let sbig = lookup(&mut kv, s1, "big").unwrap();
    assert_ne!(sbig.id, big);
    assert_eq!(view::split(sbig.id).map(|v| v.1), Some(big));
    let refused = run(
        &mut kv,
        vec![
            Op::Write { obj: ObjRef::Id(sbig.id), offset: 0, data: WriteData::Bytes(b"no".to_vec()), append: false },
            Op::Create {
                dir: ObjRef::Id(s1),
                name: "new".into(),
                kind: CreateKind::File,
                attrs: SetAttrs::default(),
                if_exists: IfExists::Fail,
            },
            Op::Remove { dir: ObjRef::Id(s1), name: "big".into(), dir_only: None },
            Op::SetAttr { obj: ObjRef::Id(sbig.id), attrs: SetAttrs { mode: Some(0o777), ..Default::default() } },
            Op::Open { obj: ObjRef::Id(sbig.id), access: Access { read: true, write: true, execute: false }, truncate: false },
            Op::Rename {
                src_dir: ObjRef::Id(s1),
                src_name: "big".into(),
                dst_dir: ObjRef::Id(root),
                dst_name: "stolen".into(),
                replace: false,
            },
            Op::Link { obj: ObjRef::Id(sbig.id), dir: ObjRef::Id(root), name: "l".into() },
            Op::Create {
                dir: ObjRef::Id(view::id(0, root)),
                name: "s9".into(),
                kind: CreateKind::Directory,
                attrs: SetAttrs::default(),
                if_exists: IfExists::Fail,
            },
        ],
    );
    // The batch stops at the first error; run them one by one instead.
    assert_eq!(refused[0], Err(FsError::ReadOnly));
    for op in [
        Op::Create {
            dir: ObjRef::Id(s1),
            name: "new".into(),
            kind: CreateKind::File,
            attrs: SetAttrs::default(),
            if_exists: IfExists::Open,
        },
        Op::Remove { dir: ObjRef::Id(s1), name: "big".into(), dir_only: None },
        Op::SetAttr { obj: ObjRef::Id(sbig.id), attrs: SetAttrs { mode: Some(0o777), ..Default::default() } },
        Op::Open { obj: ObjRef::Id(sbig.id), access: Access { read: true, write: true, execute: false }, truncate: false },
        Op::Rename {
            src_dir: ObjRef::Id(s1),
            src_name: "big".into(),
            dst_dir: ObjRef::Id(root),
            dst_name: "stolen".into(),
            replace: false,
        },
        Op::Link { obj: ObjRef::Id(sbig.id), dir: ObjRef::Id(root), name: "l".into() },
        Op::ZeroRange { obj: ObjRef::Id(sbig.id), offset: 0, len: 10 },
        Op::SetAcl { obj: ObjRef::Id(sbig.id), acl: None },
        Op::Create {
            dir: ObjRef::Id(view::id(0, root)),
            name: "s9".into(),
            kind: CreateKind::Directory,
            attrs: SetAttrs::default(),
            if_exists: IfExists::Fail,
        },
    ] {
        assert_eq!(run(&mut kv, vec![op.clone()])[0], Err(FsError::ReadOnly), "{op:?}");
    }
    // A snapshot object answers GetAcl (NFS ACCESS, SMB QUERY_INFO
    // security) with no stored DACL: its mode decides.
    match &run(&mut kv, vec![Op::GetAcl { obj: ObjRef::Id(sbig.id) }])[0] {
        Ok(OpOutput::Acl { acl: None, attrs }) => assert_eq!(attrs.id, sbig.id),
        other => panic!("{other:?}"),
    }
    // Reading still works after the refusals, and nothing changed.
    let r = run(&mut kv, vec![Op::Open { obj: ObjRef::Id(sbig.id), access: Access { read: true, ..Default::default() }, truncate: false }]);
    ok(r[0].clone());
    assert_eq!(tree(&mut kv, &mut disk, s1), before);
    // `..` of the snapshot's root is the `.snapshot` directory, whose `..`
    // is the share.
    let up = lookup(&mut kv, s1, "..").unwrap();
    assert_eq!(up.id, view::id(0, root));
    assert_eq!(lookup(&mut kv, up.id, "..").unwrap().id, root);
    // `.snapshot` is not listed, and works in every directory.
    assert!(!names(&list(&mut kv, root)).contains(&".snapshot".to_string()));
    let sd = lookup(&mut kv, d2, view::SNAPSHOT_DIR).unwrap();
    // The new `d` did not exist at s1: the old `d` is another node.
    assert_eq!(lookup(&mut kv, sd.id, "s1"), Err(FsError::NotFound));
    let snapdir = list(&mut kv, view::id(0, root));
    assert_eq!(names(&snapdir), ["s1"]);
    clean(&kv, &disk);

    // Deleting the snapshot drops every before-image and shadow; the
    // reclaim frees the chunks only the snapshot held.
    drop_snap(&mut kv, "s1").unwrap();
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(kv.range(vec![keys::LAYER]..vec![keys::LAYER + 1]).count(), 0);
    assert_eq!(kv.range(vec![keys::DETACHED]..vec![keys::DETACHED + 1]).count(), 0);
    assert_eq!(lookup(&mut kv, s1, "big"), Err(FsError::Stale));
    assert_eq!(tree(&mut kv, &mut disk, root), live);
    // What is left on disk is the live files' chunks: big's 3 (one its own
    // copy now, the other two no longer shared).
    assert_eq!(disk.inodes(), 3, "{:?}", disk.files());
}

#[test]
fn several_snapshots_each_keep_their_own_state_and_deletes_in_any_order() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, root, "f", CreateKind::File);
    let mut states = Vec::new();
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        // Each round changes the file (chunked, inline, truncated), the
        // names (one added, one removed) and takes a snapshot.
        let content = match i {
            0 => pattern(10, (CS + 3) as usize),
            1 => b"inline again? no: once chunked, chunked".to_vec(),
            _ => pattern(10 + i as u64, (2 * CS) as usize),
        };
        let r = run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: SetAttrs { size: Some(0), ..Default::default() } }]);
        ok(r[0].clone());
        write(&mut kv, f, 0, content);
        create(&mut kv, root, &format!("n{i}"), CreateKind::File);
        if i > 0 {
            let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: format!("n{}", i - 1), dir_only: None }]);
            ok(r[0].clone());
        }
        disk.destage(&mut kv);
        states.push((name.to_string(), tree(&mut kv, &mut disk, root)));
        snap(&mut kv, name).unwrap();
        clean(&kv, &disk);
    }
    // Change once more after the last.
    write(&mut kv, f, 5, b"after all".to_vec());
    disk.destage(&mut kv);
    let check = |kv: &mut Kv, disk: &mut Disk, states: &[(String, Tree)]| {
        for (name, want) in states {
            let s = snapshot_root(kv, root, name);
            assert_eq!(&tree(kv, disk, s), want, "snapshot {name}");
        }
        clean(kv, disk);
    };
    check(&mut kv, &mut disk, &states);
    // Middle first, then the oldest, then the newest: the others stay.
    for gone in ["b", "a", "d"] {
        drop_snap(&mut kv, gone).unwrap();
        disk.destage(&mut kv);
        states.retain(|s| s.0 != gone);
        check(&mut kv, &mut disk, &states);
        // A change between deletions goes to the newest layer left.
        write(&mut kv, f, 0, pattern(99, 100));
    }
    drop_snap(&mut kv, "c").unwrap();
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(kv.range(vec![keys::LAYER]..vec![keys::LAYER + 1]).count(), 0);
    assert_eq!(disk.inodes(), 2, "f's two chunks and nothing else");
}

#[test]
fn a_snapshot_writes_the_same_records_for_10_files_and_for_10000() {
    let mut written = Vec::new();
    for files in [10usize, 10_000] {
        let (mut kv, root) = init();
        let mut ops = Vec::new();
        for i in 0..files {
            ops.push(Op::Create {
                dir: ObjRef::Id(root),
                name: format!("f{i:05}"),
                kind: CreateKind::File,
                attrs: SetAttrs::default(),
                if_exists: IfExists::Fail,
            });
        }
        for chunk in ops.chunks(1000) {
            for r in run(&mut kv, chunk.to_vec()) {
                ok(r);
            }
        }
        let keys_before = kv.len();
        let (r, n) = admin(&mut kv, Command::Snapshot { share: "data".into(), name: "s".into(), now_ns: 9 });
        r.unwrap();
        written.push((n, kv.len() - keys_before));
        // And the first change after it copies up one node and one edge.
        let before = kv.len();
        let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: "f00003".into(), dir_only: None }]);
        ok(r[0].clone());
        let layered = kv.range(vec![keys::LAYER]..vec![keys::LAYER + 1]).count();
        // The removed file's node and edge, the directory's node.
        assert_eq!(layered, 3, "{files} files");
        assert_eq!(kv.len(), before - 2 + layered, "node and edge gone, three before-images");
    }
    println!("keys written by a snapshot: 10 files {:?}, 10,000 files {:?}", written[0], written[1]);
    assert_eq!(written[0], written[1]);
    assert!(written[0].0 <= 5, "{:?}", written[0]);
}

#[test]
fn snapshot_names_limits_and_unknowns_are_refused_with_nothing_changed() {
    let (mut kv, root) = init();
    for bad in ["", "a/b", "a@b", "x\u{1}y", ".", "..", "tab\there", &"n".repeat(256)] {
        let before = kv.clone();
        assert!(matches!(snap(&mut kv, bad), Err(AdminError::Invalid(_))), "{bad:?}");
        assert_eq!(kv, before);
    }
    assert!(matches!(
        admin(&mut kv, Command::Snapshot { share: "nope".into(), name: "s".into(), now_ns: 1 }).0,
        Err(AdminError::NotFound(_))
    ));
    assert!(matches!(drop_snap(&mut kv, "nope"), Err(AdminError::NotFound(_))));
    snap(&mut kv, "s").unwrap();
    assert!(matches!(snap(&mut kv, "s"), Err(AdminError::Exists(_))));
    for i in 1..duet_cluster::machine::SNAPSHOT_MAX {
        snap(&mut kv, &format!("s{i}")).unwrap();
    }
    let before = kv.clone();
    assert!(matches!(snap(&mut kv, "one too many"), Err(AdminError::Invalid(_))));
    assert_eq!(kv, before);
    let listed = duet_cluster::machine::list_snapshots(&kv, "data").unwrap();
    assert_eq!(listed.len(), duet_cluster::machine::SNAPSHOT_MAX);
    assert_eq!(listed[0].name, "s");
    assert_eq!(duet_cluster::machine::list_snapshots(&kv, "nope"), None);
    // A directory made by a client (not a share's) has no layers: a share
    // on it cannot be snapshotted; renames across zones are refused.
    create(&mut kv, ROOT_ID, "plain", CreateKind::Directory);
    admin(&mut kv, Command::PutShare { share: share("plain", "/plain"), replace: false, now_ns: 1 }).0.unwrap();
    assert!(matches!(
        admin(&mut kv, Command::Snapshot { share: "plain".into(), name: "s".into(), now_ns: 1 }).0,
        Err(AdminError::Invalid(_))
    ));
    let f = create(&mut kv, root, "f", CreateKind::File);
    let plain = lookup(&mut kv, ROOT_ID, "plain").unwrap().id;
    let r = run(
        &mut kv,
        vec![Op::Rename { src_dir: ObjRef::Id(root), src_name: "f".into(), dst_dir: ObjRef::Id(plain), dst_name: "f".into(), replace: false }],
    );
    assert_eq!(r[0], Err(FsError::CrossDevice));
    let r = run(&mut kv, vec![Op::Link { obj: ObjRef::Id(f), dir: ObjRef::Id(plain), name: "f".into() }]);
    assert_eq!(r[0], Err(FsError::CrossDevice));
    clean(&kv, &Disk::default());
}

/// Random writes (inline and chunked), truncations, deletions, renames,
/// links, directories made and removed, snapshots taken and deleted in
/// random order: every live snapshot's tree stays what it was when taken,
/// byte for byte, and fsck stays clean; once all are deleted no
/// before-image, shadow or extra chunk is left.
#[test]
fn random_changes_and_snapshots_keep_every_snapshot_exact() {
    for seed in 1..=16u64 {
        let mut x = seed;
        let (mut kv, root) = init();
        let mut disk = Disk::default();
        let sub = create(&mut kv, root, "sub", CreateKind::Directory);
        let dirs = [root, sub];
        let mut snaps: Vec<(String, Tree)> = Vec::new();
        let mut taken = 0;
        for step in 0..60 {
            let dir = dirs[(next(&mut x) % 2) as usize];
            let name = format!("f{}", next(&mut x) % 6);
            match next(&mut x) % 10 {
                0..=3 => {
                    let id = match lookup(&mut kv, dir, &name) {
                        Ok(a) if a.ftype == FileType::Regular => a.id,
                        Ok(_) => continue,
                        Err(_) => create(&mut kv, dir, &name, CreateKind::File),
                    };
                    let big = next(&mut x) % 2 == 0;
                    // Big: past the inline limit, often across a chunk
                    // boundary (kept small: a debug build hashes slowly).
                    let len = if big { (next(&mut x) % 200_000) as usize + 5000 } else { (next(&mut x) % 3000) as usize + 1 };
                    let off = if big { (next(&mut x) % 2 + 1) * CS - next(&mut x) % 150_000 } else { next(&mut x) % 1000 };
                    write(&mut kv, id, off, pattern(next(&mut x), len));
                }
                4 => {
                    if let Ok(a) = lookup(&mut kv, dir, &name) {
                        // A truncation, a DACL (denying some uid) or a
                        // chmod (which drops the DACL): snapshots keep
                        // the DACL each object had.
                        match next(&mut x) % 3 {
                            0 if a.ftype == FileType::Regular => {
                                let size = next(&mut x) % (a.size + 1);
                                let r = run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(a.id), attrs: SetAttrs { size: Some(size), ..Default::default() } }]);
                                ok(r[0].clone());
                            }
                            1 => {
                                let acl = deny_read_acl(3000 + (next(&mut x) % 5) as u32);
                                ok(run(&mut kv, vec![Op::SetAcl { obj: ObjRef::Id(a.id), acl: Some(acl) }])[0].clone());
                            }
                            _ => {
                                let mode = 0o600 + (next(&mut x) % 0o100) as u32;
                                ok(run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(a.id), attrs: SetAttrs { mode: Some(mode), ..Default::default() } }])[0].clone());
                            }
                        }
                    }
                }
                5 => {
                    let _ = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(dir), name: name.clone(), dir_only: Some(false) }]);
                }
                6 => {
                    let to = dirs[(next(&mut x) % 2) as usize];
                    let dst = format!("f{}", next(&mut x) % 6);
                    let _ = run(
                        &mut kv,
                        vec![Op::Rename { src_dir: ObjRef::Id(dir), src_name: name.clone(), dst_dir: ObjRef::Id(to), dst_name: dst, replace: true }],
                    );
                }
                7 => {
                    if let Ok(a) = lookup(&mut kv, dir, &name) {
                        let to = dirs[(next(&mut x) % 2) as usize];
                        let _ = run(&mut kv, vec![Op::Link { obj: ObjRef::Id(a.id), dir: ObjRef::Id(to), name: format!("l{step}") }]);
                    }
                }
                8 => {
                    if snaps.len() < 4 {
                        disk.destage(&mut kv);
                        let s = format!("s{taken}");
                        taken += 1;
                        let t = tree(&mut kv, &mut disk, root);
                        snap(&mut kv, &s).unwrap();
                        snaps.push((s, t));
                    }
                }
                _ => {
                    if !snaps.is_empty() {
                        let i = (next(&mut x) % snaps.len() as u64) as usize;
                        let (s, _) = snaps.remove(i);
                        drop_snap(&mut kv, &s).unwrap();
                    }
                }
            }
            if step % 10 == 9 {
                disk.destage(&mut kv);
                for (s, want) in &snaps {
                    let r = snapshot_root(&mut kv, root, s);
                    assert_eq!(&tree(&mut kv, &mut disk, r), want, "seed {seed} step {step}: snapshot {s}");
                }
                clean(&kv, &disk);
            }
        }
        for (s, _) in std::mem::take(&mut snaps) {
            drop_snap(&mut kv, &s).unwrap();
        }
        disk.destage(&mut kv);
        clean(&kv, &disk);
        assert_eq!(kv.range(vec![keys::LAYER]..vec![keys::LAYER + 1]).count(), 0, "seed {seed}");
        // Every chunk file left belongs to a live file.
        for (f, _) in disk.files() {
            assert!(kv.contains_key(&keys::node(f)), "seed {seed}: chunk of {f}, which is no live file");
        }
    }
}

/// A snapshot keeps each object's DACL as it was (the `A` record is a
/// layered kind): changing or dropping the live DACL changes neither what
/// the snapshot's GetAcl answers nor whom it lets read.
#[test]
fn a_snapshot_keeps_the_dacl_its_objects_had() {
    let (mut kv, root) = init();
    let disk = Disk::default();
    let f = create(&mut kv, root, "f", CreateKind::File);
    write(&mut kv, f, 0, b"secret".to_vec());
    let (c, deny) = deny_read_acl(3002);
    ok(run(&mut kv, vec![Op::SetAcl { obj: ObjRef::Id(f), acl: Some((c, deny.clone())) }])[0].clone());
    let g = create(&mut kv, root, "g", CreateKind::File);
    let (_, deny_g) = deny_read_acl(3003);
    ok(run(&mut kv, vec![Op::SetAcl { obj: ObjRef::Id(g), acl: Some((c, deny_g.clone())) }])[0].clone());
    snap(&mut kv, "s1").unwrap();
    // Live: f's DACL now denies 3003 instead; g's is dropped (chmod).
    let (_, deny3) = deny_read_acl(3003);
    ok(run(&mut kv, vec![Op::SetAcl { obj: ObjRef::Id(f), acl: Some((c, deny3)) }])[0].clone());
    ok(run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(g), attrs: SetAttrs { mode: Some(0o644), ..Default::default() } }])[0].clone());
    assert!(!may_read(&mut kv, 3003, f) && may_read(&mut kv, 3002, f));
    assert!(may_read(&mut kv, 3003, g));
    let s1 = snapshot_root(&mut kv, root, "s1");
    let sf = lookup(&mut kv, s1, "f").unwrap().id;
    let sg = lookup(&mut kv, s1, "g").unwrap().id;
    match &run(&mut kv, vec![Op::GetAcl { obj: ObjRef::Id(sf) }])[0] {
        Ok(OpOutput::Acl { acl: Some((_, b)), .. }) => assert_eq!(b, &deny, "the snapshot's DACL"),
        other => panic!("{other:?}"),
    }
    assert!(!may_read(&mut kv, 3002, sf), "the snapshot's DACL denies 3002");
    assert!(may_read(&mut kv, 3003, sf), "and not 3003, whom the live one denies");
    assert!(!may_read(&mut kv, 3003, sg), "g's DACL, since dropped live, still holds in the snapshot");
    clean(&kv, &disk);
    // Dropping the snapshot drops the before-images.
    drop_snap(&mut kv, "s1").unwrap();
    clean(&kv, &disk);
    assert_eq!(kv.range(vec![keys::LAYER]..vec![keys::LAYER + 1]).count(), 0);
}

/// A snapshot keeps an owner SID with the DACL (one `A` record) and checks
/// its objects against it: with Everyone the owner and a DACL granting
/// only OWNER RIGHTS read, any user reads the snapshot's file, though the
/// live file has gone back to its uid owner.
#[test]
fn a_snapshot_checks_with_the_owner_sid_it_kept() {
    use duet_fs::acl::{rights, Ace, Acl, Sid, Stored};
    let (mut kv, root) = init();
    let f = create(&mut kv, root, "f", CreateKind::File);
    write(&mut kv, f, 0, b"secret".to_vec());
    let owned = Stored {
        control: duet_fs::acl::control::DACL_PRESENT,
        owner: Some(Sid::everyone()),
        group: None,
        dacl: Some(Acl { aces: vec![Ace::allow(Sid::owner_rights(), rights::FILE_GENERIC_READ, 0)] }),
    };
    ok(run(&mut kv, vec![Op::SetAcl { obj: ObjRef::Id(f), acl: Some(owned.encode()) }])[0].clone());
    assert!(may_read(&mut kv, 3002, f), "Everyone owns f: OWNER RIGHTS read");
    snap(&mut kv, "s1").unwrap();
    // Live: root (the uid owner) takes it back.
    let back = Stored { owner: Some(Sid::unix_user(0)), ..Default::default() };
    ok(run(&mut kv, vec![Op::SetAcl { obj: ObjRef::Id(f), acl: Some(back.encode()) }])[0].clone());
    assert!(!may_read(&mut kv, 3002, f), "live: no owner SID, 3002 is no owner");
    let s1 = snapshot_root(&mut kv, root, "s1");
    let sf = lookup(&mut kv, s1, "f").unwrap().id;
    match &run(&mut kv, vec![Op::GetAcl { obj: ObjRef::Id(sf) }])[0] {
        Ok(o) => assert_eq!(o.stored_security().unwrap(), Some(owned), "the snapshot's record"),
        other => panic!("{other:?}"),
    }
    assert!(may_read(&mut kv, 3002, sf), "the snapshot checks with the owner SID it kept");
    drop_snap(&mut kv, "s1").unwrap();
    assert_eq!(kv.range(vec![keys::LAYER]..vec![keys::LAYER + 1]).count(), 0);
}
