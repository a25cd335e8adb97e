//! Snapshots of a clone share as views (`machine/layers.rs` `View`,
//! `machine/clone.rs` `Snap`, `cluster/STORAGE-MODEL.md` "Clones"): a
//! clone's `.snapshot/NAME/` in every directory and its `@GMT-` tokens
//! read the clone byte for byte as it was when the snapshot was taken,
//! whatever the clone and its source do afterwards (writes, truncations,
//! deletions, renames, hard links, a directory removed and made again);
//! every change through a view is `ReadOnly`; a clone of a clone's
//! snapshot reads the same state; dropping the snapshots in any order
//! keeps the others exact and fsck clean; object ids past `view::ID_MAX`
//! are refused, never aliased.
//!
//! Data records are applied by the chunk-store model of `tests/common`.

mod common;

use std::collections::BTreeMap;

use common::*;
use duet_cluster::keys;
use duet_cluster::machine::{is_clone_id, AdminError};
use duet_cluster::records::Command;
use duet_fs::{
    view, CreateKind, DirEntry, FileType, FsError, IfExists, NodeId, ObjRef, Op, OpOutput, OpResult, SetAttrs, WriteData,
    CHUNK_SIZE, ROOT_ID,
};

const CS: u64 = CHUNK_SIZE;

fn init() -> (Kv, NodeId) {
    let mut kv = Kv::new();
    let (r, _) = admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] });
    r.unwrap();
    let root = lookup(&mut kv, ROOT_ID, "data").unwrap().id;
    (kv, root)
}

fn make_clone(kv: &mut Kv, source: &str, snapshot: Option<&str>, name: &str) -> NodeId {
    let cmd = Command::Clone {
        source: source.into(),
        snapshot: snapshot.map(str::to_string),
        share: share(name, &format!("/clones/{name}")),
        now_ns: 7_000,
    };
    admin(kv, cmd).0.unwrap_or_else(|e| panic!("clone {name}: {e}"));
    let clones = lookup(kv, ROOT_ID, "clones").unwrap().id;
    let root = lookup(kv, clones, name).unwrap().id;
    assert!(is_clone_id(root));
    root
}

/// Snapshot `name` of share `share` taken at second `secs`.
fn snap(kv: &mut Kv, share: &str, name: &str, secs: i64) -> Result<(), AdminError> {
    admin(kv, Command::Snapshot { share: share.into(), name: name.into(), now_ns: secs * 1_000_000_000 }).0
}

fn drop_snap(kv: &mut Kv, share: &str, name: &str) -> Result<(), AdminError> {
    admin(kv, Command::DropSnapshot { share: share.into(), name: name.into(), now_ns: 9_000 }).0
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

/// Path -> content (None: a directory), with each entry's id checked to
/// be a view id exactly when `views`, and what a lookup by name answers.
type Flat = BTreeMap<String, Option<Vec<u8>>>;

fn tree(kv: &mut Kv, disk: &mut Disk, dir: NodeId, views: bool) -> Flat {
    let mut out = Flat::new();
    let mut todo = vec![(String::new(), dir)];
    while let Some((path, d)) = todo.pop() {
        for e in list(kv, d) {
            let p = format!("{path}/{}", e.name);
            let attrs = e.attrs.clone().unwrap();
            assert_eq!(view::is_view(e.id), views, "{p}");
            assert_eq!(attrs.id, e.id, "{p}");
            assert_eq!(lookup(kv, d, &e.name).map(|a| a.id), Ok(e.id), "{p}: lookup");
            let content = match e.ftype {
                FileType::Regular => {
                    let c = read_all(kv, disk, e.id);
                    assert_eq!(c.len() as u64, attrs.size, "{p}");
                    Some(c)
                }
                FileType::Directory => {
                    todo.push((p.clone(), e.id));
                    None
                }
                _ => Some(Vec::new()),
            };
            out.insert(p, content);
        }
    }
    out
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

/// A model of one tree: each path names a directory or a file (by an
/// index into `files`, so that hard links share their content).
#[derive(Clone, Default)]
struct Model {
    paths: BTreeMap<String, Option<usize>>,
    files: Vec<Vec<u8>>,
}

impl Model {
    fn flat(&self) -> Flat {
        self.paths.iter().map(|(p, v)| (p.clone(), v.map(|i| self.files[i].clone()))).collect()
    }
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

/// The part of a flat tree under `/sub`, re-rooted.
fn under_sub(t: &Flat) -> Flat {
    t.iter().filter_map(|(p, v)| Some((p.strip_prefix("/sub")?.strip_prefix('/').map(|r| format!("/{r}"))?, v.clone()))).collect()
}

/// Every change through a view answers `ReadOnly`.
fn refuses_changes(kv: &mut Kv, dir: NodeId) {
    let ops = vec![
        Op::Create {
            dir: ObjRef::Id(dir),
            name: "new".into(),
            kind: CreateKind::File,
            attrs: SetAttrs::default(),
            if_exists: IfExists::Fail,
        },
        Op::Remove { dir: ObjRef::Id(dir), name: "f0".into(), dir_only: None },
        Op::SetAttr { obj: ObjRef::Id(dir), attrs: SetAttrs { mode: Some(0o700), ..Default::default() } },
    ];
    for op in ops {
        assert_eq!(run(kv, vec![op.clone()]).remove(0).err(), Some(FsError::ReadOnly), "{op:?}");
    }
    for e in list(kv, dir).into_iter().filter(|e| e.ftype == FileType::Regular) {
        let w = Op::Write { obj: ObjRef::Id(e.id), offset: 0, data: WriteData::Bytes(b"no".to_vec()), append: false };
        assert_eq!(run(kv, vec![w]).remove(0).err(), Some(FsError::ReadOnly), "write {}", e.name);
    }
}

/// Random changes on a clone and on its source, snapshots of the clone
/// taken along the way: every snapshot, read through `.snapshot` of the
/// clone's root, of its `sub` directory and by its `@GMT-` token, stays
/// its recorded tree byte for byte; a clone made from one of them reads
/// it too; deleting them in a random order keeps the rest exact; fsck
/// stays clean.
#[test]
fn random_changes_keep_every_snapshot_of_a_clone_exact() {
    for seed in 1..=4u64 {
        let mut x = seed * 7919;
        let (mut kv, root) = init();
        let mut disk = Disk::default();
        let mut src_model = Model::default();
        create(&mut kv, root, "sub", CreateKind::Directory);
        src_model.paths.insert("/sub".into(), None);
        for step in 0..20 {
            random_change(&mut kv, &mut x, root, &mut src_model, step);
        }
        let c = make_clone(&mut kv, "data", None, "c");
        let mut model = src_model.clone();
        // (name, second taken, tree then)
        let mut snaps: Vec<(String, i64, Flat)> = Vec::new();
        for step in 20..100 {
            if next(&mut x) % 3 == 0 {
                random_change(&mut kv, &mut x, root, &mut src_model, step);
            } else {
                random_change(&mut kv, &mut x, c, &mut model, step);
            }
            if step % 16 == 3 {
                let name = format!("s{step}");
                let secs = 1_800_000_000 + step as i64;
                snap(&mut kv, "c", &name, secs).unwrap();
                disk.destage(&mut kv);
                let t = tree(&mut kv, &mut disk, c, false);
                assert_eq!(t, model.flat(), "seed {seed} step {step}: the clone");
                snaps.push((name, secs, t));
            }
            if step % 16 == 11 && !snaps.is_empty() {
                disk.destage(&mut kv);
                check_snapshots(&mut kv, &mut disk, c, &snaps, &format!("seed {seed} step {step}"));
                assert_eq!(tree(&mut kv, &mut disk, c, false), model.flat(), "seed {seed} step {step}: the clone");
                assert_eq!(tree(&mut kv, &mut disk, root, false), src_model.flat(), "seed {seed} step {step}: the source");
                clean(&kv, &disk);
            }
        }
        // The snapshots are not the live clone (else the checks above
        // could pass by reading it).
        let live = model.flat();
        assert!(snaps.iter().any(|s| s.2 != live), "seed {seed}: every snapshot equals the clone now");
        // A clone of the clone's first snapshot reads that snapshot.
        let first = snaps[0].clone();
        let cc = make_clone(&mut kv, "c", Some(&first.0), "cc");
        assert_eq!(tree(&mut kv, &mut disk, cc, false), first.2, "seed {seed}: clone of {}", first.0);
        assert!(matches!(drop_snap(&mut kv, "c", &first.0), Err(AdminError::Invalid(_))), "pinned");
        // Changes in the clone of the clone reach none of the snapshots.
        let f = create(&mut kv, cc, "only-in-cc", CreateKind::File);
        write(&mut kv, f, 0, b"cc".to_vec());
        if let Ok(s) = lookup(&mut kv, cc, "sub") {
            let _ = rm(&mut kv, s.id, "f0");
        }
        // Dropped in a random order (the pinned one last, after its clone).
        let mut order: Vec<usize> = (1..snaps.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, (next(&mut x) % (i as u64 + 1)) as usize);
        }
        for i in order {
            drop_snap(&mut kv, "c", &snaps[i].0).unwrap();
            snaps[i].0.clear();
            let left: Vec<_> = snaps.iter().filter(|s| !s.0.is_empty()).cloned().collect();
            disk.destage(&mut kv);
            check_snapshots(&mut kv, &mut disk, c, &left, &format!("seed {seed} after dropping one"));
            clean(&kv, &disk);
        }
        admin(&mut kv, Command::RemoveShare { name: "cc".into() }).0.unwrap();
        drop_snap(&mut kv, "c", &first.0).unwrap();
        assert_eq!(lookup(&mut kv, c, view::SNAPSHOT_DIR).map(|a| list(&kv, a.id).len()), Ok(0));
        assert_eq!(tree(&mut kv, &mut disk, c, false), model.flat(), "seed {seed}: the clone at the end");
        admin(&mut kv, Command::RemoveShare { name: "c".into() }).0.unwrap();
        disk.destage(&mut kv);
        clean(&kv, &disk);
        assert_eq!(tree(&mut kv, &mut disk, root, false), src_model.flat(), "seed {seed}: the source at the end");
    }
}

fn check_snapshots(kv: &mut Kv, disk: &mut Disk, c: NodeId, snaps: &[(String, i64, Flat)], what: &str) {
    let sd = lookup(kv, c, view::SNAPSHOT_DIR).expect(".snapshot in a clone");
    assert!(view::is_view(sd.id));
    let mut listed = names(&list(kv, sd.id));
    listed.sort();
    let mut want: Vec<String> = snaps.iter().map(|s| s.0.clone()).collect();
    want.sort();
    assert_eq!(listed, want, "{what}: .snapshot lists the clone's snapshots");
    // Previous Versions: newest first, one token each, naming the roots.
    let tokens = match ok(read_only(kv, vec![Op::ListSnapshots { obj: ObjRef::Id(c) }]).results.remove(0)) {
        OpOutput::Dir { entries, .. } => entries,
        other => panic!("{other:?}"),
    };
    assert_eq!(tokens.len(), snaps.len(), "{what}");
    for (name, secs, t) in snaps {
        let r = lookup(kv, sd.id, name).unwrap().id;
        assert!(view::is_view(r));
        assert_eq!(tree(kv, disk, r, true), *t, "{what}: .snapshot/{name}");
        let token = view::gmt_token(secs * 1_000_000_000);
        assert_eq!(lookup(kv, sd.id, &token).map(|a| a.id), Ok(r), "{what}: {token}");
        assert!(tokens.iter().any(|e| e.name == token && e.id == r), "{what}: {token} listed");
        // `..` of the snapshot's root is the `.snapshot` directory, whose
        // `..` is the clone's root.
        assert_eq!(lookup(kv, r, "..").map(|a| a.id), Ok(sd.id));
        assert_eq!(lookup(kv, sd.id, "..").map(|a| a.id), Ok(c));
        refuses_changes(kv, r);
        // `.snapshot` in a subdirectory: that directory as it was.
        if let (Ok(sub), true) = (lookup(kv, c, "sub"), t.get("/sub") == Some(&None)) {
            let ssd = lookup(kv, sub.id, view::SNAPSHOT_DIR).unwrap();
            assert_ne!(ssd.id, sd.id);
            let sr = lookup(kv, ssd.id, name).unwrap().id;
            assert_eq!(tree(kv, disk, sr, true), under_sub(t), "{what}: sub/.snapshot/{name}");
            assert_eq!(lookup(kv, r, "sub").map(|a| a.id), Ok(sr), "{what}: one id for one frozen object");
        }
    }
}

/// Objects past `view::ID_MAX` are refused (`NoSpace`), in a share, a clone
/// and outside both: no view id or clone id could name them.
#[test]
fn ids_past_the_view_range_are_refused_never_aliased() {
    let (mut kv, root) = init();
    let c = make_clone(&mut kv, "data", None, "c");
    snap(&mut kv, "c", "s", 1_800_000_000).unwrap();
    kv.insert(keys::meta("next_id"), view::ID_MAX.to_be_bytes().to_vec());
    let last = create(&mut kv, root, "last", CreateKind::File);
    assert_eq!(last, view::ID_MAX);
    for dir in [root, c, ROOT_ID] {
        let r = run(
            &mut kv,
            vec![Op::Create {
                dir: ObjRef::Id(dir),
                name: "past".into(),
                kind: CreateKind::File,
                attrs: SetAttrs::default(),
                if_exists: IfExists::Fail,
            }],
        );
        assert_eq!(r[0].clone().err(), Some(FsError::NoSpace), "in {dir:#x}");
        assert_eq!(lookup(&mut kv, dir, "past").err(), Some(FsError::NotFound));
    }
    // The last one a view can name is named, and the snapshot, taken
    // before, does not hold it.
    snap(&mut kv, "data", "d", 1_800_000_001).unwrap();
    let sd = lookup(&mut kv, root, view::SNAPSHOT_DIR).unwrap().id;
    let sr = lookup(&mut kv, sd, "d").unwrap().id;
    let v = lookup(&mut kv, sr, "last").unwrap().id;
    assert_eq!(view::split(v).map(|s| s.1), Some(view::ID_MAX));
    let csd = lookup(&mut kv, c, view::SNAPSHOT_DIR).unwrap().id;
    let cs = lookup(&mut kv, csd, "s").unwrap().id;
    assert_eq!(lookup(&mut kv, cs, "last").err(), Some(FsError::NotFound));
    clean(&kv, &Disk::default());
}

/// `.snapshot` ids of a clone's directories carry the clone's number, so
/// they never meet an ordinary directory's, and stay stable.
#[test]
fn a_clones_snapshot_directories_have_ids_of_their_own() {
    let (mut kv, root) = init();
    let d = create(&mut kv, root, "d", CreateKind::Directory);
    let f = create(&mut kv, d, "f", CreateKind::File);
    write(&mut kv, f, 0, b"source".to_vec());
    let c = make_clone(&mut kv, "data", None, "c");
    let cd = lookup(&mut kv, c, "d").unwrap().id;
    snap(&mut kv, "c", "one", 1_800_000_000).unwrap();
    snap(&mut kv, "data", "src", 1_800_000_001).unwrap();
    let sd_src = lookup(&mut kv, d, view::SNAPSHOT_DIR).unwrap().id;
    let sd_clone = lookup(&mut kv, cd, view::SNAPSHOT_DIR).unwrap().id;
    assert_ne!(sd_src, sd_clone);
    assert_eq!(view::split(sd_src), Some((0, d)));
    assert_eq!(view::split(sd_clone).map(|s| s.1), Some(d & view::ID_MAX));
    assert_eq!(lookup(&mut kv, cd, view::SNAPSHOT_DIR).unwrap().id, sd_clone, "stable");
    assert_eq!(names(&list(&kv, sd_clone)), vec!["one"]);
    assert_eq!(names(&list(&kv, sd_src)), vec!["clone.c", "src"]);
    // The clone's file, changed after its snapshot, reads old contents in it.
    let cf = lookup(&mut kv, cd, "f").unwrap().id;
    write(&mut kv, cf, 0, b"CHANGED".to_vec());
    let mut disk = Disk::default();
    let old = lookup(&mut kv, sd_clone, "one").unwrap().id;
    let of = lookup(&mut kv, old, "f").unwrap().id;
    assert_eq!(read_all(&mut kv, &mut disk, of), b"source");
    assert_eq!(read_all(&mut kv, &mut disk, cf), b"CHANGED");
    // `..` of `d` as frozen is the clone's root as frozen.
    let croot_sd = lookup(&mut kv, c, view::SNAPSHOT_DIR).unwrap().id;
    let froot = lookup(&mut kv, croot_sd, "one").unwrap().id;
    assert_eq!(lookup(&mut kv, old, "..").unwrap().id, froot);
    assert_eq!(lookup(&mut kv, froot, "d").unwrap().id, old);
    // A stale `.snapshot` id (its clone gone) answers Stale.
    drop_snap(&mut kv, "c", "one").unwrap();
    admin(&mut kv, Command::RemoveShare { name: "c".into() }).0.unwrap();
    let r = read_only(&kv, vec![Op::GetAttr { obj: ObjRef::Id(sd_clone) }]).results.remove(0);
    assert_eq!(r.err(), Some(FsError::Stale));
    let r = read_only(&kv, vec![Op::GetAttr { obj: ObjRef::Id(of) }]).results.remove(0);
    assert_eq!(r.err(), Some(FsError::Stale));
    clean(&kv, &disk);
}
