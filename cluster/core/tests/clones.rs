//! Writable clones of a share in the state machine (`machine/clone.rs`,
//! `cluster/STORAGE-MODEL.md` "Clones"): a clone is one command writing
//! the same few records whatever the share's size; it reads the source's
//! files as they were at the snapshot, byte for byte; writes, deletions,
//! renames, links and directories made and removed in it never change the
//! source, and the source's later changes never reach it; data is shared
//! by reference (the first write copies only the chunks written); deleting
//! the clone drops every record it had and frees its chunks; fsck stays
//! clean throughout.
//!
//! Data records are applied by the chunk-store model of `tests/common`.

mod common;

use std::collections::BTreeMap;

use common::*;
use duet_cluster::keys;
use duet_cluster::machine::{is_clone_id, AdminError, CLONE_DEPTH_MAX};
use duet_cluster::records::Command;
use duet_fs::{
    view, Batch, CreateKind, Credentials, DirEntry, FileType, FsError, IfExists, NodeId, ObjRef, Op, OpOutput,
    OpResult, SetAttrs, CHUNK_SIZE, ROOT_ID,
};

const CS: u64 = CHUNK_SIZE;

fn init() -> (Kv, NodeId) {
    let mut kv = Kv::new();
    let (r, _) = admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] });
    r.unwrap();
    let root = lookup(&mut kv, ROOT_ID, "data").unwrap().id;
    (kv, root)
}

fn clone_cmd(source: &str, snapshot: Option<&str>, name: &str) -> Command {
    Command::Clone {
        source: source.into(),
        snapshot: snapshot.map(str::to_string),
        share: share(name, &format!("/clones/{name}")),
        now_ns: 7_000,
    }
}

/// Clones `source` (at `snapshot`) as share `name`; answers its root.
fn make_clone(kv: &mut Kv, source: &str, snapshot: Option<&str>, name: &str) -> NodeId {
    admin(kv, clone_cmd(source, snapshot, name)).0.unwrap_or_else(|e| panic!("clone {name}: {e}"));
    let clones = lookup(kv, ROOT_ID, "clones").unwrap().id;
    let root = lookup(kv, clones, name).unwrap().id;
    assert!(is_clone_id(root));
    root
}

fn remove_share(kv: &mut Kv, name: &str) -> Result<(), AdminError> {
    admin(kv, Command::RemoveShare { name: name.into() }).0
}

fn read_all(kv: &mut Kv, disk: &mut Disk, id: NodeId) -> Vec<u8> {
    disk.destage(kv);
    let out = read_only(kv, vec![Op::Read { obj: ObjRef::Id(id), offset: 0, len: u64::MAX }]);
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

fn list(kv: &Kv, dir: NodeId) -> Vec<DirEntry> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let r = read_only(kv, vec![Op::ReadDir { dir: ObjRef::Id(dir), after: after.clone(), max_entries: 3, with_attrs: true }]);
        let OpOutput::Dir { entries, eof, .. } = ok(r.results[0].clone()) else { panic!() };
        after = entries.last().map(|e| e.name.clone());
        out.extend(entries);
        if eof {
            return out;
        }
    }
}

/// What a tree holds: path -> (type, content, mode, nlink).
type Tree = BTreeMap<String, (FileType, Vec<u8>, u32, u32)>;

/// A whole tree through the machine (read-only batches).
fn tree(kv: &mut Kv, disk: &mut Disk, dir: NodeId) -> Tree {
    let mut out = Tree::new();
    let mut todo = vec![(String::new(), dir)];
    while let Some((path, d)) = todo.pop() {
        for e in list(kv, d) {
            let p = format!("{path}/{}", e.name);
            let attrs = e.attrs.clone().unwrap();
            let content = match e.ftype {
                FileType::Regular => {
                    let c = read_all(kv, disk, e.id);
                    assert_eq!(c.len() as u64, attrs.size, "{p}");
                    c
                }
                FileType::Directory => {
                    todo.push((p.clone(), e.id));
                    Vec::new()
                }
                _ => Vec::new(),
            };
            out.insert(p, (e.ftype, content, attrs.mode, attrs.nlink));
        }
    }
    out
}

/// The keys of clone number `c`'s id range, of every kind.
fn clone_keys(kv: &Kv) -> usize {
    kv.keys()
        .filter(|k| {
            matches!(k[0], keys::NODE | keys::EDGE | keys::DATA | keys::EA | keys::CHUNK | keys::CLONE_MARK | keys::CLONE)
                && (k[0] == keys::CLONE || keys::u64_at(k, 1).is_some_and(is_clone_id))
        })
        .count()
}

/// A source share with a little of everything.
fn populate(kv: &mut Kv, root: NodeId) -> NodeId {
    let small = create(kv, root, "small", CreateKind::File);
    write(kv, small, 0, b"small and inline".to_vec());
    let big = create(kv, root, "big", CreateKind::File);
    write(kv, big, 0, pattern(1, (2 * CS + 1000) as usize));
    let d = create(kv, root, "d", CreateKind::Directory);
    let x = create(kv, d, "x", CreateKind::File);
    write(kv, x, 0, b"x in d".to_vec());
    let e = create(kv, d, "e", CreateKind::Directory);
    let deep = create(kv, e, "deep", CreateKind::File);
    write(kv, deep, 0, pattern(2, 5000));
    let linked = create(kv, root, "linked", CreateKind::File);
    write(kv, linked, 0, b"two names".to_vec());
    ok(run(kv, vec![Op::Link { obj: ObjRef::Id(linked), dir: ObjRef::Id(d), name: "link2".into() }]).remove(0));
    create(kv, root, "sym", CreateKind::Symlink { target: "small".into() });
    big
}

fn rm(kv: &mut Kv, dir: NodeId, name: &str) -> OpResult {
    run(kv, vec![Op::Remove { dir: ObjRef::Id(dir), name: name.into(), dir_only: None }]).remove(0)
}

fn mv(kv: &mut Kv, sd: NodeId, sn: &str, dd: NodeId, dn: &str) -> OpResult {
    run(
        kv,
        vec![Op::Rename { src_dir: ObjRef::Id(sd), src_name: sn.into(), dst_dir: ObjRef::Id(dd), dst_name: dn.into(), replace: true }],
    )
    .remove(0)
}

#[test]
fn a_clone_reads_its_source_and_its_changes_never_reach_the_source() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let big = populate(&mut kv, root);
    disk.destage(&mut kv);
    let source = tree(&mut kv, &mut disk, root);
    let inodes = disk.inodes();

    let c = make_clone(&mut kv, "data", None, "c");
    clean(&kv, &disk);
    assert_eq!(tree(&mut kv, &mut disk, c), source, "the clone at once");
    // The implicit snapshot is listed with the source's.
    let snaps = duet_cluster::machine::list_snapshots(&kv, "data").unwrap();
    assert_eq!(snaps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["clone.c"]);
    // `..` of the clone's root is the directory holding it.
    let clones = lookup(&mut kv, ROOT_ID, "clones").unwrap().id;
    assert_eq!(lookup(&mut kv, c, "..").unwrap().id, clones);

    // Changes of every kind in the clone.
    let cbig = lookup(&mut kv, c, "big").unwrap().id;
    assert!(is_clone_id(cbig) && cbig != big);
    let csmall = lookup(&mut kv, c, "small").unwrap().id;
    write(&mut kv, csmall, 0, b"SMALL".to_vec());
    write(&mut kv, cbig, CS + 5, b"one chunk changes".to_vec());
    assert_eq!(lookup(&mut kv, c, "big").unwrap().id, cbig, "an id stays across copy-up");
    let cd = lookup(&mut kv, c, "d").unwrap().id;
    let cx = lookup(&mut kv, cd, "x").unwrap().id;
    ok(rm(&mut kv, cd, "x"));
    // A deleted object is gone for a handle too (it never reads through
    // to the source again).
    assert_eq!(run(&mut kv, vec![Op::GetAttr { obj: ObjRef::Id(cx) }]).remove(0), Err(FsError::Stale));
    let ce = lookup(&mut kv, cd, "e").unwrap().id;
    ok(mv(&mut kv, ce, "deep", c, "deep-moved"));
    ok(rm(&mut kv, cd, "e"));
    let e2 = create(&mut kv, cd, "e", CreateKind::Directory);
    assert_ne!(e2, ce, "a directory made again is another (opaque) one");
    let y = create(&mut kv, e2, "y", CreateKind::File);
    assert!(is_clone_id(y));
    write(&mut kv, y, 0, b"new in the clone".to_vec());
    // A hard link's other name sees the change; it had one id from the start.
    let l1 = lookup(&mut kv, c, "linked").unwrap().id;
    assert_eq!(lookup(&mut kv, cd, "link2").unwrap().id, l1);
    write(&mut kv, l1, 0, b"TWO".to_vec());
    ok(run(&mut kv, vec![Op::Link { obj: ObjRef::Id(l1), dir: ObjRef::Id(e2), name: "third".into() }]).remove(0));
    ok(run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(cd), attrs: SetAttrs { mode: Some(0o700), ..Default::default() } }])
        .remove(0));
    // A directory not copied up moves as one entry.
    let d_sub = create(&mut kv, root, "later", CreateKind::File);
    let _ = d_sub;
    disk.destage(&mut kv);
    clean(&kv, &disk);

    let mut want = source.clone();
    want.get_mut("/small").unwrap().1[..5].copy_from_slice(b"SMALL");
    let b = &mut want.get_mut("/big").unwrap().1;
    b[(CS + 5) as usize..(CS + 22) as usize].copy_from_slice(b"one chunk changes");
    want.remove("/d/x");
    let deep = want.remove("/d/e/deep").unwrap();
    want.insert("/deep-moved".into(), deep);
    want.get_mut("/d/e").unwrap().2 = 0o755;
    want.insert("/d/e/y".into(), (FileType::Regular, b"new in the clone".to_vec(), 0o644, 1));
    for p in ["/linked", "/d/link2"] {
        let l = want.get_mut(p).unwrap();
        l.1[..3].copy_from_slice(b"TWO");
        l.3 = 3;
    }
    let third = want["/linked"].clone();
    want.insert("/d/e/third".into(), third);
    want.get_mut("/d").unwrap().2 = 0o700;
    assert_eq!(tree(&mut kv, &mut disk, c), want, "the clone after its changes");
    let mut src_now = source.clone();
    src_now.insert("/later".into(), (FileType::Regular, Vec::new(), 0o644, 1));
    assert_eq!(tree(&mut kv, &mut disk, root), src_now, "the source is unchanged by the clone");
    // Data by reference: the big file's write copied one chunk (the clone's
    // other files are inline).
    assert_eq!(disk.inodes(), inodes + 1, "one chunk copied");

    // The source's later changes never reach the clone.
    write(&mut kv, big, 0, b"source changes".to_vec());
    ok(rm(&mut kv, root, "small"));
    let sd = lookup(&mut kv, root, "d").unwrap().id;
    ok(rm(&mut kv, sd, "x"));
    create(&mut kv, sd, "new-in-source", CreateKind::File);
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(tree(&mut kv, &mut disk, c), want, "the clone after the source changed");

    // Its snapshot is pinned while the clone stands on it.
    assert!(matches!(
        admin(&mut kv, Command::DropSnapshot { share: "data".into(), name: "clone.c".into(), now_ns: 9 }).0,
        Err(AdminError::Invalid(_))
    ));
    assert!(matches!(remove_share(&mut kv, "data"), Err(AdminError::Invalid(_))));

    // Deleting the clone drops all its records and frees its chunks.
    remove_share(&mut kv, "c").unwrap();
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(clone_keys(&kv), 0);
    assert_eq!(kv.range(vec![keys::LAYER]..vec![keys::LAYER + 1]).count(), 0, "its snapshot went with it");
    assert_eq!(kv.range(vec![keys::DETACHED]..vec![keys::DETACHED + 1]).count(), 0);
    assert_eq!(lookup(&mut kv, c, "big"), Err(FsError::Stale));
    assert!(names(&list(&kv, clones)).is_empty());
    // Only the source's chunks are left: big's three (one of them the
    // source's own copy of its changed chunk 0) and deep's one.
    for (f, _) in disk.files() {
        assert!(!is_clone_id(f), "a clone chunk left: {f}");
    }
    assert_eq!(disk.inodes(), inodes, "{:?}", disk.files());
}

#[test]
fn a_clone_writes_the_same_records_for_10_files_and_for_10000() {
    let mut written = Vec::new();
    for files in [10usize, 10_000] {
        let (mut kv, root) = init();
        let ops: Vec<Op> = (0..files)
            .map(|i| Op::Create {
                dir: ObjRef::Id(root),
                name: format!("f{i:05}"),
                kind: CreateKind::File,
                attrs: SetAttrs::default(),
                if_exists: IfExists::Fail,
            })
            .collect();
        for chunk in ops.chunks(1000) {
            for r in run(&mut kv, chunk.to_vec()) {
                ok(r);
            }
        }
        // The clones directory exists already (its creation is not counted).
        admin(&mut kv, Command::PutShare { share: share("other", "/clones/other"), replace: false, now_ns: 1 }).0.unwrap();
        let (r, from_share) = admin(&mut kv, clone_cmd("data", None, "c"));
        r.unwrap();
        admin(&mut kv, Command::Snapshot { share: "data".into(), name: "s".into(), now_ns: 9 }).0.unwrap();
        let (r, from_snapshot) = admin(&mut kv, clone_cmd("data", Some("s"), "c2"));
        r.unwrap();
        written.push((from_share, from_snapshot));
        let cl = lookup(&mut kv, ROOT_ID, "clones").unwrap().id;
        let c = lookup(&mut kv, cl, "c").unwrap().id;
        let r = read_only(&kv, vec![Op::ReadDir { dir: ObjRef::Id(c), after: None, max_entries: 20_000, with_attrs: false }]);
        let OpOutput::Dir { entries, eof: true, .. } = ok(r.results[0].clone()) else { panic!() };
        assert_eq!(entries.len(), files);
        // A page of the clone's (read-through) root costs its page, not
        // the rest of the directory.
        let mut b = Batch::new(Credentials::root(), 1_000);
        b.ops = vec![Op::ReadDir { dir: ObjRef::Id(c), after: Some("f00004".into()), max_entries: 5, with_attrs: true }];
        let counting = Counting { kv: &kv, rows: std::cell::Cell::new(0) };
        let (out, _) = duet_cluster::machine::execute_read_only(&counting, &b);
        let OpOutput::Dir { entries, eof, .. } = ok(out.results[0].clone()) else { panic!() };
        assert_eq!(names(&entries), ["f00005", "f00006", "f00007", "f00008", "f00009"]);
        assert_eq!(eof, files == 10);
        let rows = counting.rows.get();
        assert!(rows < 200, "{files} files: a page of 5 read {rows} records");
        // The first changes in the clone's root copy it up without its
        // entries: a create, a removal (a whiteout), a rename.
        let before = kv.len();
        create(&mut kv, c, "new", CreateKind::File);
        ok(rm(&mut kv, c, "f00003"));
        ok(mv(&mut kv, c, "f00004", c, "moved"));
        let added = kv.len() - before;
        assert!(added < 20, "{files} files: the first changes added {added} keys");
        let r = read_only(&kv, vec![Op::ReadDir { dir: ObjRef::Id(c), after: None, max_entries: 20_000, with_attrs: false }]);
        let OpOutput::Dir { entries, .. } = ok(r.results[0].clone()) else { panic!() };
        assert_eq!(entries.len(), files);
        let n = names(&entries);
        assert!(n.contains(&"new".to_string()) && n.contains(&"moved".to_string()));
        assert!(!n.contains(&"f00003".to_string()) && !n.contains(&"f00004".to_string()));
    }
    println!("keys written by a clone: 10 files {:?}, 10,000 files {:?} (of a share, of a snapshot)", written[0], written[1]);
    assert_eq!(written[0], written[1]);
    assert!(written[0].0 <= 12 && written[0].1 <= 8, "{:?}", written[0]);
}

#[test]
fn writing_one_mib_into_a_large_clone_file_copies_one_chunk() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, root, "large", CreateKind::File);
    let chunks = 8u64;
    let content = pattern(5, (chunks * CS) as usize);
    write(&mut kv, f, 0, content.clone());
    disk.destage(&mut kv);
    let inodes = disk.inodes();
    assert_eq!(inodes, chunks as usize);
    let c = make_clone(&mut kv, "data", None, "c");
    let cf = lookup(&mut kv, c, "large").unwrap().id;
    let keys_before = kv.len();
    let mib = pattern(6, 1 << 20);
    write(&mut kv, cf, 3 * CS + 4096, mib.clone());
    let keys_written = kv.len() - keys_before;
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(disk.inodes(), inodes + 1, "1 MiB written: one chunk more");
    let mut want = content.clone();
    want[(3 * CS + 4096) as usize..(3 * CS + 4096) as usize + mib.len()].copy_from_slice(&mib);
    assert_eq!(read_all(&mut kv, &mut disk, cf), want);
    assert_eq!(read_all(&mut kv, &mut disk, f), content, "the source's file unchanged");
    println!("1 MiB into a {} MiB clone file: {} chunk files more, {keys_written} keys more", chunks * CS >> 20, disk.inodes() - inodes);
    remove_share(&mut kv, "c").unwrap();
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(disk.inodes(), inodes);
    assert_eq!(read_all(&mut kv, &mut disk, f), content);
}

#[test]
fn clones_of_clones_each_keep_their_own_state_up_to_the_depth_limit() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    populate(&mut kv, root);
    for i in 1..=CLONE_DEPTH_MAX {
        let p = create(&mut kv, root, &format!("p{i}"), CreateKind::File);
        write(&mut kv, p, 0, format!("p{i} of the share").into_bytes());
    }
    disk.destage(&mut kv);
    let mut states: Vec<(String, NodeId, Tree)> = vec![("data".into(), root, tree(&mut kv, &mut disk, root))];
    for depth in 1..=CLONE_DEPTH_MAX {
        let (src, _, _) = states.last().unwrap().clone();
        let name = format!("c{depth}");
        let c = make_clone(&mut kv, &src, None, &name);
        // Each clone changes a file, removes one, makes one.
        let small = lookup(&mut kv, c, "small").unwrap().id;
        let mut want = read_all(&mut kv, &mut disk, small);
        let mark = format!("<{depth}>").into_bytes();
        write(&mut kv, small, depth as u64, mark.clone());
        let at = depth as usize;
        if want.len() < at + mark.len() {
            want.resize(at + mark.len(), 0);
        }
        want[at..at + mark.len()].copy_from_slice(&mark);
        assert_eq!(read_all(&mut kv, &mut disk, small), want, "depth {depth}: the clone's write");
        let _ = rm(&mut kv, c, &format!("made{}", depth - 1));
        create(&mut kv, c, &format!("made{depth}"), CreateKind::File);
        let cbig = lookup(&mut kv, c, "big").unwrap().id;
        write(&mut kv, cbig, depth as u64 * 100, vec![depth as u8; 10]);
        disk.destage(&mut kv);
        states.push((name, c, tree(&mut kv, &mut disk, c)));
        // The source changes after: it deletes a file it never copied up
        // (and another it did), which its clone still has.
        let (_, src_root, _) = states[depth as usize - 1].clone();
        ok(rm(&mut kv, src_root, &format!("p{depth}")));
        let linked = lookup(&mut kv, src_root, "linked").unwrap().id;
        write(&mut kv, linked, 0, format!("[{depth}]").into_bytes());
        disk.destage(&mut kv);
        states[depth as usize - 1].2 = tree(&mut kv, &mut disk, src_root);
        for (n, r, want) in &states {
            assert_eq!(&tree(&mut kv, &mut disk, *r), want, "depth {depth}: {n}");
        }
        clean(&kv, &disk);
    }
    let before = kv.clone();
    let last = states.last().unwrap().0.clone();
    let r = admin(&mut kv, clone_cmd(&last, None, "too-deep")).0;
    assert!(matches!(r, Err(AdminError::Invalid(ref m)) if m.contains("deep")), "{r:?}");
    assert_eq!(kv, before);
    // The middle one cannot go while another stands on it; from the top
    // down they all go, each leaving the others exact.
    assert!(matches!(remove_share(&mut kv, "c3"), Err(AdminError::Invalid(_))));
    while states.len() > 1 {
        let (n, _, _) = states.pop().unwrap();
        remove_share(&mut kv, &n).unwrap();
        disk.destage(&mut kv);
        clean(&kv, &disk);
        for (n, r, want) in &states {
            assert_eq!(&tree(&mut kv, &mut disk, *r), want, "after removals: {n}");
        }
    }
    assert_eq!(clone_keys(&kv), 0);
    assert_eq!(kv.range(vec![keys::LAYER]..vec![keys::LAYER + 1]).count(), 0);
}

#[test]
fn bad_names_and_unknown_sources_are_refused_with_nothing_changed() {
    let (mut kv, root) = init();
    populate(&mut kv, root);
    let refuse = |kv: &mut Kv, cmd: Command| {
        let before = kv.clone();
        let r = admin(kv, cmd).0;
        assert_eq!(*kv, before);
        r
    };
    for bad in ["a/b", "a@b", "x\u{1}y", "", "..", "tab\there"] {
        let mut cmd = clone_cmd("data", None, "ok");
        if let Command::Clone { share, .. } = &mut cmd {
            share.name = bad.into();
        }
        assert!(matches!(refuse(&mut kv, cmd), Err(AdminError::Invalid(_))), "{bad:?}");
    }
    assert!(matches!(refuse(&mut kv, clone_cmd("nope", None, "c")), Err(AdminError::NotFound(_))));
    assert!(matches!(refuse(&mut kv, clone_cmd("data", Some("nope"), "c")), Err(AdminError::NotFound(_))));
    assert!(matches!(refuse(&mut kv, clone_cmd("data", None, "data")), Err(AdminError::Exists(_))));
    // A clone's directory may not lie inside a share (its parents are not
    // made either); an unknown snapshot makes no parent directory.
    for (path, snap) in [("/data/inside", None), ("/data/not/yet/inside", None), ("/fresh/parents/c", Some("nope"))] {
        let mut cmd = clone_cmd("data", snap, "inside");
        if let Command::Clone { share, .. } = &mut cmd {
            share.path = path.into();
        }
        let r = refuse(&mut kv, cmd);
        assert!(matches!(r, Err(AdminError::Invalid(_)) | Err(AdminError::NotFound(_))), "{path}: {r:?}");
    }
    // A clone made from another clone's snapshot keeps that snapshot when
    // the first clone goes.
    make_clone(&mut kv, "data", None, "first");
    make_clone(&mut kv, "data", Some("clone.first"), "second");
    remove_share(&mut kv, "first").unwrap();
    let snaps = duet_cluster::machine::list_snapshots(&kv, "data").unwrap();
    assert_eq!(snaps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["clone.first"]);
    let clones = lookup(&mut kv, ROOT_ID, "clones").unwrap().id;
    let second = lookup(&mut kv, clones, "second");
    assert!(second.is_ok());
    remove_share(&mut kv, "second").unwrap();
    admin(&mut kv, Command::DropSnapshot { share: "data".into(), name: "clone.first".into(), now_ns: 9 }).0.unwrap();
    make_clone(&mut kv, "data", None, "c");
    assert!(matches!(refuse(&mut kv, clone_cmd("data", None, "c")), Err(AdminError::Exists(_))));
    // Snapshots of a clone are views like any share's (`tests/clone_snapshots.rs`).
    let cl = lookup(&mut kv, ROOT_ID, "clones").unwrap().id;
    let c = lookup(&mut kv, cl, "c").unwrap().id;
    admin(&mut kv, Command::Snapshot { share: "c".into(), name: "s".into(), now_ns: 8 }).0.unwrap();
    let sd = lookup(&mut kv, c, view::SNAPSHOT_DIR).unwrap();
    assert!(view::is_view(sd.id));
    assert!(view::is_view(lookup(&mut kv, sd.id, "s").unwrap().id));
    clean(&kv, &Disk::default());
}

/// The store, counting the records its reads return.
struct Counting<'a> {
    kv: &'a Kv,
    rows: std::cell::Cell<usize>,
}

impl duet_cluster::kv::KvRead for Counting<'_> {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.rows.set(self.rows.get() + 1);
        self.kv.get(key).cloned()
    }
    fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let out = duet_cluster::kv::KvRead::scan(self.kv, start, end, limit);
        self.rows.set(self.rows.get() + out.len().max(1));
        out
    }
}

/// A model of one tree: each path names a directory or a file (by an
/// index into `files`, so that hard links share their content).
#[derive(Clone, Default)]
struct Model {
    paths: BTreeMap<String, Option<usize>>,
    files: Vec<Vec<u8>>,
}

impl Model {
    /// Path -> content (None: a directory).
    fn flat(&self) -> BTreeMap<String, Option<Vec<u8>>> {
        self.paths.iter().map(|(p, v)| (p.clone(), v.map(|i| self.files[i].clone()))).collect()
    }
}

fn flat(t: &Tree) -> BTreeMap<String, Option<Vec<u8>>> {
    t.iter().map(|(p, (ty, c, _, _))| (p.clone(), (*ty == FileType::Regular).then(|| c.clone()))).collect()
}

/// One random change on a tree rooted at `root`, applied to the model too.
fn random_change(kv: &mut Kv, x: &mut u64, root: NodeId, model: &mut Model, step: usize) {
    let sub = lookup(kv, root, "sub").map(|a| a.id).ok();
    let pick_dir = |x: &mut u64| match sub {
        Some(s) if next(x) % 2 == 0 => ("/sub".to_string(), s),
        _ => (String::new(), root),
    };
    let (dp, dir) = pick_dir(x);
    let name = format!("f{}", next(x) % 5);
    let path = format!("{dp}/{name}");
    match next(x) % 9 {
        0..=3 => {
            let id = match lookup(kv, dir, &name) {
                Ok(a) if a.ftype == FileType::Regular => a.id,
                Ok(_) => return,
                Err(_) => {
                    model.files.push(Vec::new());
                    model.paths.insert(path.clone(), Some(model.files.len() - 1));
                    create(kv, dir, &name, CreateKind::File)
                }
            };
            let big = next(x) % 3 == 0;
            let len = if big { (next(x) % 100_000) as usize + 5000 } else { (next(x) % 2000) as usize + 1 };
            let off = if big { CS - next(x) % 60_000 } else { next(x) % 500 };
            let data = pattern(next(x), len);
            write(kv, id, off, data.clone());
            let i = model.paths[&path].unwrap();
            let c = &mut model.files[i];
            let end = off as usize + len;
            if c.len() < end {
                c.resize(end, 0);
            }
            c[off as usize..end].copy_from_slice(&data);
        }
        4 => {
            if let Ok(a) = lookup(kv, dir, &name) {
                if a.ftype == FileType::Regular {
                    let size = next(x) % (a.size + 1);
                    ok(run(kv, vec![Op::SetAttr { obj: ObjRef::Id(a.id), attrs: SetAttrs { size: Some(size), ..Default::default() } }])
                        .remove(0));
                    let i = model.paths[&path].unwrap();
                    model.files[i].truncate(size as usize);
                }
            }
        }
        5 => {
            if rm(kv, dir, &name).is_ok() {
                model.paths.remove(&path);
            }
        }
        6 => {
            let (tp, to) = pick_dir(x);
            let dst = format!("f{}", next(x) % 5);
            let dpath = format!("{tp}/{dst}");
            let src = model.paths.get(&path).copied().flatten();
            let victim = model.paths.get(&dpath).copied();
            // Files only, onto a file or nothing, and never onto another
            // name of the same file (POSIX leaves both names then).
            let fine = src.is_some() && victim.map_or(true, |v| v.is_some() && v != src);
            if fine {
                ok(mv(kv, dir, &name, to, &dst));
                model.paths.remove(&path);
                model.paths.insert(dpath, src);
            }
        }
        7 => {
            if let Some(i) = model.paths.get(&path).copied().flatten() {
                let (tp, to) = pick_dir(x);
                let l = format!("l{step}");
                let a = lookup(kv, dir, &name).unwrap();
                ok(run(kv, vec![Op::Link { obj: ObjRef::Id(a.id), dir: ObjRef::Id(to), name: l.clone() }]).remove(0));
                model.paths.insert(format!("{tp}/{l}"), Some(i));
            }
        }
        _ => {
            // The directory removed (when empty) and made again later.
            if sub.is_some() {
                if rm(kv, root, "sub").is_ok() {
                    model.paths.remove("/sub");
                }
            } else {
                create(kv, root, "sub", CreateKind::Directory);
                model.paths.insert("/sub".into(), None);
            }
        }
    }
}

/// Random writes, truncations, deletions, renames, hard links and a
/// directory removed and made again, on the clone and on its source in
/// turn: each matches its own model byte for byte after every few steps,
/// and fsck stays clean; deleting the clone leaves the source as its model
/// and no record or chunk of the clone.
#[test]
fn random_changes_on_a_clone_and_its_source_match_their_models() {
    for seed in 1..=4u64 {
        let mut x = seed;
        let (mut kv, root) = init();
        let mut disk = Disk::default();
        let mut src_model = Model::default();
        create(&mut kv, root, "sub", CreateKind::Directory);
        src_model.paths.insert("/sub".into(), None);
        for step in 0..25 {
            random_change(&mut kv, &mut x, root, &mut src_model, step);
        }
        disk.destage(&mut kv);
        let at_clone = tree(&mut kv, &mut disk, root);
        assert_eq!(flat(&at_clone), src_model.flat(), "seed {seed}: the source before the clone");
        let c = make_clone(&mut kv, "data", None, "c");
        // The clone's model starts from the source's, links included.
        let mut clone_model = src_model.clone();
        for step in 25..90 {
            if next(&mut x) % 2 == 0 {
                random_change(&mut kv, &mut x, c, &mut clone_model, step);
            } else {
                random_change(&mut kv, &mut x, root, &mut src_model, step);
            }
            if step % 10 == 9 {
                disk.destage(&mut kv);
                let got = flat(&tree(&mut kv, &mut disk, c));
                assert_eq!(got, clone_model.flat(), "seed {seed} step {step}: the clone");
                let got = flat(&tree(&mut kv, &mut disk, root));
                assert_eq!(got, src_model.flat(), "seed {seed} step {step}: the source");
                clean(&kv, &disk);
            }
        }
        remove_share(&mut kv, "c").unwrap();
        disk.destage(&mut kv);
        clean(&kv, &disk);
        assert_eq!(clone_keys(&kv), 0, "seed {seed}");
        for (f, _) in disk.files() {
            assert!(kv.contains_key(&keys::node(f)), "seed {seed}: chunk of {f}, which is no live file");
        }
        assert_eq!(flat(&tree(&mut kv, &mut disk, root)), src_model.flat(), "seed {seed}: the source after the clone went");
    }
}

fn eas(kv: &Kv, id: NodeId) -> Vec<(String, Vec<u8>)> {
    match ok(read_only(kv, vec![Op::GetEas { obj: ObjRef::Id(id) }]).results.remove(0)) {
        OpOutput::Eas { eas, .. } => eas,
        other => panic!("{other:?}"),
    }
}

/// Extended attributes read through and are copied up with their file; a
/// reflink (NFSv4.2 CLONE, SMB duplicate extents) from a file not yet
/// copied up shares its chunks; zeroing and truncating a clone's chunked
/// file leave the source's alone; fsck clean, nothing left after delete.
#[test]
fn attributes_reflinks_and_truncation_in_a_clone_leave_the_source_alone() {
    let (mut kv, root) = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, root, "f", CreateKind::File);
    let content = pattern(9, (3 * CS) as usize);
    write(&mut kv, f, 0, content.clone());
    let e = create(&mut kv, root, "e", CreateKind::File);
    let set = vec![("USER.ONE".to_string(), b"1".to_vec()), ("USER.TWO".to_string(), b"22".to_vec())];
    ok(run(&mut kv, vec![Op::SetEas { obj: ObjRef::Id(e), eas: set.clone() }]).remove(0));
    disk.destage(&mut kv);
    let inodes = disk.inodes();
    let c = make_clone(&mut kv, "data", None, "c");
    let ce = lookup(&mut kv, c, "e").unwrap().id;
    assert_eq!(eas(&kv, ce), set, "read through");
    ok(run(&mut kv, vec![Op::SetEas { obj: ObjRef::Id(ce), eas: vec![("USER.ONE".into(), Vec::new())] }]).remove(0));
    assert_eq!(eas(&kv, ce), set[1..].to_vec(), "copied up, then one removed");
    assert_eq!(eas(&kv, e), set, "the source's");

    // A reflink of the clone's file (not copied up) into a new clone file.
    let cf = lookup(&mut kv, c, "f").unwrap().id;
    let copy = create(&mut kv, c, "copy", CreateKind::File);
    let r = run(
        &mut kv,
        vec![Op::Clone { src: ObjRef::Id(cf), src_offset: 0, dst: ObjRef::Id(copy), dst_offset: 0, len: 3 * CS, extend: true }],
    );
    ok(r[0].clone());
    disk.destage(&mut kv);
    assert_eq!(disk.inodes(), inodes, "shared, nothing copied");
    assert!(read_all(&mut kv, &mut disk, copy) == content);
    // Zero a chunk of the clone's file and truncate it.
    ok(run(&mut kv, vec![Op::ZeroRange { obj: ObjRef::Id(cf), offset: CS, len: CS }]).remove(0));
    ok(run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(cf), attrs: SetAttrs { size: Some(CS + 10), ..Default::default() } }])
        .remove(0));
    disk.destage(&mut kv);
    clean(&kv, &disk);
    let mut want = content[..(CS + 10) as usize].to_vec();
    want[CS as usize..].fill(0);
    assert!(read_all(&mut kv, &mut disk, cf) == want, "the clone's file");
    assert!(read_all(&mut kv, &mut disk, f) == content, "the source's file");
    assert!(read_all(&mut kv, &mut disk, copy) == content, "the reflinked copy");
    remove_share(&mut kv, "c").unwrap();
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(clone_keys(&kv), 0);
    assert_eq!(disk.inodes(), inodes);
    assert!(read_all(&mut kv, &mut disk, f) == content);
}

/// A clone's file keeps its source's DACL, before and after its copy-up
/// (the `A` record comes up with the node), and fsck stays clean.
#[test]
fn a_clones_file_keeps_the_sources_dacl_through_copy_up() {
    let (mut kv, root) = init();
    let disk = Disk::default();
    let f = create(&mut kv, root, "f", CreateKind::File);
    write(&mut kv, f, 0, b"secret".to_vec());
    let (c, deny) = deny_read_acl(3002);
    ok(run(&mut kv, vec![Op::SetAcl { obj: ObjRef::Id(f), acl: Some((c, deny.clone())) }])[0].clone());
    let croot = make_clone(&mut kv, "data", None, "c");
    let cf = lookup(&mut kv, croot, "f").unwrap().id;
    assert!(!may_read(&mut kv, 3002, cf), "before its copy-up, the source's DACL decides");
    assert!(may_read(&mut kv, 3003, cf));
    // Copy-up by a write.
    write(&mut kv, cf, 0, b"SECRET".to_vec());
    match &run(&mut kv, vec![Op::GetAcl { obj: ObjRef::Id(cf) }])[0] {
        Ok(OpOutput::Acl { acl: Some((_, b)), .. }) => assert_eq!(b, &deny, "the clone's file has the DACL"),
        other => panic!("{other:?}"),
    }
    assert!(!may_read(&mut kv, 3002, cf), "the DACL still denies 3002 in the clone");
    assert!(may_read(&mut kv, 3003, cf));
    clean(&kv, &disk);
}
