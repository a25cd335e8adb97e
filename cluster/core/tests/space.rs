//! Space used exclusively by each snapshot and clone
//! (`machine::snapshot_space`, `machine::clone_space`): the figure must be
//! exactly what deleting that snapshot or clone frees in the chunk store.
//! Each scenario is built from a seed, measured, then built again and the
//! snapshot (or clone) deleted and the destager run over a model of the
//! chunk store with the data path's semantics (shared chunks are one inode
//! under several names; bytes go with the last name): the bytes freed on
//! that model must equal the figure, for every snapshot and clone in turn.

mod common;

use common::*;
use duet_cluster::machine::{clone_space, clone_space_within, snapshot_space, snapshot_space_within, Exclusive};
use duet_cluster::machine::{schedules, AdminError};
use duet_cluster::records::{Command, ScheduleRecord};
use duet_fs::{CreateKind, NodeId, ObjRef, Op, SetAttrs, CHUNK_SIZE, ROOT_ID};

const CS: u64 = CHUNK_SIZE;

/// Bytes the model chunk store holds (each inode once).
fn stored(disk: &Disk) -> u64 {
    let mut seen: Vec<_> = disk.chunks.values().map(|c| (std::rc::Rc::as_ptr(c), c.borrow().len() as u64)).collect();
    seen.sort();
    seen.dedup();
    seen.iter().map(|(_, n)| n).sum()
}

fn snap(kv: &mut Kv, share: &str, name: &str) {
    admin(kv, Command::Snapshot { share: share.into(), name: name.into(), now_ns: 5_000 }).0.unwrap();
}

struct Built {
    kv: Kv,
    disk: Disk,
    snaps: Vec<&'static str>,
}

/// A share `data` with files, three snapshots `s1`..`s3` with changes in
/// between (overwrites, partial writes, appends, truncations, deletions, a
/// reflink inside the share), a clone `c` of `s2` written to, and, for odd
/// seeds, a snapshot `cs` of the clone with changes after it.
fn build(seed: u64) -> Built {
    let mut kv = Kv::new();
    let mut disk = Disk::default();
    admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] }).0.unwrap();
    let root = lookup(&mut kv, ROOT_ID, "data").unwrap().id;
    let sizes = [3_000, 1 << 20, CS + 100, 2 * CS + 7, 3 * CS, CS / 2];
    let mut files: Vec<NodeId> = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let f = create(&mut kv, root, &format!("f{i}"), CreateKind::File);
        write(&mut kv, f, 0, pattern(seed + i as u64, *size as usize));
        files.push(f);
    }
    disk.destage(&mut kv);
    let mut x = seed;
    let snaps = vec!["s1", "s2", "s3"];
    for (round, s) in snaps.iter().enumerate() {
        snap(&mut kv, "data", s);
        for _ in 0..4 {
            let i = (next(&mut x) % files.len() as u64) as usize;
            let f = files[i];
            let name = format!("f{i}");
            match next(&mut x) % 7 {
                // Overwrite all of it.
                0 => {
                    let size = lookup(&mut kv, root, &name).map(|a| a.size).unwrap_or(0).max(1);
                    write(&mut kv, f, 0, pattern(next(&mut x), size as usize));
                }
                // 1 MiB somewhere inside.
                1 => {
                    let size = lookup(&mut kv, root, &name).map(|a| a.size).unwrap_or(0);
                    let at = next(&mut x) % size.max(1);
                    write(&mut kv, f, at, pattern(next(&mut x), 1 << 20));
                }
                // Append.
                2 => {
                    let size = lookup(&mut kv, root, &name).map(|a| a.size).unwrap_or(0);
                    write(&mut kv, f, size, pattern(next(&mut x), 70_000));
                }
                // Truncate.
                3 => {
                    let size = lookup(&mut kv, root, &name).map(|a| a.size).unwrap_or(0);
                    let to = next(&mut x) % size.max(1);
                    let r = run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: SetAttrs { size: Some(to), ..Default::default() } }]);
                    assert!(r[0].is_ok(), "{:?}", r[0]);
                }
                // Delete, and make it again.
                4 => {
                    let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: name.clone(), dir_only: None }]);
                    assert!(r[0].is_ok(), "{:?}", r[0]);
                    let n = create(&mut kv, root, &name, CreateKind::File);
                    write(&mut kv, n, 0, pattern(next(&mut x), (next(&mut x) % (2 * CS)) as usize + 1));
                    files[i] = n;
                }
                // A reflink of another file's chunks into this one.
                5 => {
                    let src = files[(i + 1) % files.len()];
                    let r = run(
                        &mut kv,
                        vec![Op::Clone { src: ObjRef::Id(src), src_offset: 0, dst: ObjRef::Id(f), dst_offset: 0, len: CS, extend: true }],
                    );
                    let _ = r; // a source shorter than a chunk is refused: fine either way
                }
                // Nothing changes in this file.
                _ => {}
            }
            disk.destage(&mut kv);
        }
        if round == 1 {
            // The clone of s2, written to.
            let (r, _) = admin(
                &mut kv,
                Command::Clone { source: "data".into(), snapshot: Some("s2".into()), share: share("c", "/clones/c"), now_ns: 7_000 },
            );
            r.unwrap();
            let clones = lookup(&mut kv, ROOT_ID, "clones").unwrap().id;
            let croot = lookup(&mut kv, clones, "c").unwrap().id;
            let fresh = create(&mut kv, croot, "new", CreateKind::File);
            write(&mut kv, fresh, 0, pattern(seed ^ 77, 1 << 20));
            if let Ok(a) = lookup(&mut kv, croot, "f3") {
                write(&mut kv, a.id, CS / 3, pattern(seed ^ 78, 1 << 20));
            }
            disk.destage(&mut kv);
            if seed % 2 == 1 {
                snap(&mut kv, "c", "cs");
                if let Ok(a) = lookup(&mut kv, croot, "new") {
                    write(&mut kv, a.id, 0, pattern(seed ^ 79, 1 << 20));
                }
                let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(croot), name: "f2".into(), dir_only: None }]);
                let _ = r;
                disk.destage(&mut kv);
            }
        }
    }
    clean(&kv, &disk);
    Built { kv, disk, snaps }
}

/// Deletes with `cmd`, runs the destager; the bytes the chunk store freed.
fn freed(b: &mut Built, cmd: Command) -> u64 {
    let before = stored(&b.disk);
    admin(&mut b.kv, cmd).0.unwrap();
    b.disk.destage(&mut b.kv);
    clean(&b.kv, &b.disk);
    before - stored(&b.disk)
}

#[test]
fn each_figure_is_what_its_deletion_frees() {
    let mut nonzero = 0;
    for seed in 1..=4u64 {
        let b = build(seed);
        let space = snapshot_space(&b.kv, "data").unwrap();
        assert_eq!(space.iter().map(|(s, _)| s.name.as_str()).collect::<Vec<_>>(), b.snaps);
        for (s, x) in &space {
            if s.name == "s2" {
                continue; // the clone stands on it
            }
            let mut again = build(seed);
            let got = freed(&mut again, Command::DropSnapshot { share: "data".into(), name: s.name.clone(), now_ns: 9_000 });
            assert_eq!(x.bytes, got, "seed {seed}: snapshot {}: {x:?}", s.name);
            nonzero += usize::from(got > 0);
        }
        // Bounded: a figure read within a small budget is a lower bound,
        // marked partial; within a budget large enough, the same.
        for (full, cut) in space.iter().zip(snapshot_space_within(&b.kv, "data", 5).unwrap()) {
            assert!(cut.1.bytes <= full.1.bytes && cut.1.records <= full.1.records, "{full:?} {cut:?}");
            if !cut.1.partial {
                assert_eq!(cut.1, full.1);
            }
            assert!(full.1.records <= 5 || cut.1.partial, "{full:?} {cut:?}");
            assert!(!full.1.partial);
        }
        assert_eq!(snapshot_space_within(&b.kv, "data", 1 << 20).unwrap(), space);
        let cut = clone_space_within(&b.kv, 3)[0].1;
        assert!(cut.partial, "{cut:?}");
        let clones = clone_space(&b.kv);
        assert!(cut.bytes <= clones[0].1.bytes && cut.records <= clones[0].1.records);
        assert_eq!(clones.len(), 1);
        let (rec, x) = &clones[0];
        assert_eq!(rec.name, "c");
        let mut again = build(seed);
        let got = freed(&mut again, Command::RemoveShare { name: "c".into() });
        assert_eq!(x.bytes, got, "seed {seed}: clone: {x:?}");
        // Its own 1 MiB file at least (and the chunk it wrote into f3).
        assert!(x.bytes >= 1 << 20, "seed {seed}: {x:?}");
        // Then the snapshot it stood on, alone now.
        let s2 = snapshot_space(&again.kv, "data").unwrap().into_iter().find(|(s, _)| s.name == "s2").unwrap().1;
        let got = freed(&mut again, Command::DropSnapshot { share: "data".into(), name: "s2".into(), now_ns: 9_500 });
        assert_eq!(s2.bytes, got, "seed {seed}: s2 after the clone went: {s2:?}");
    }
    assert!(nonzero >= 3, "the scenarios free something: {nonzero}");
}

#[test]
fn overwrite_after_a_snapshot_then_delete() {
    let mut kv = Kv::new();
    let mut disk = Disk::default();
    admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] }).0.unwrap();
    let root = lookup(&mut kv, ROOT_ID, "data").unwrap().id;
    let f = create(&mut kv, root, "f", CreateKind::File);
    let size = 2 * CS + 1000;
    write(&mut kv, f, 0, pattern(1, size as usize));
    disk.destage(&mut kv);
    snap(&mut kv, "data", "before");
    // Nothing changed yet: the snapshot holds nothing of its own.
    let x = snapshot_space(&kv, "data").unwrap()[0].1;
    assert_eq!(x, Exclusive::default());
    // One chunk rewritten: that chunk's old bytes are the snapshot's alone.
    write(&mut kv, f, CS, pattern(2, CS as usize));
    disk.destage(&mut kv);
    let x = snapshot_space(&kv, "data").unwrap()[0].1;
    assert_eq!((x.bytes, x.chunks), (CS, 1), "{x:?}");
    // All of it rewritten: every old chunk.
    write(&mut kv, f, 0, pattern(3, size as usize));
    disk.destage(&mut kv);
    let x = snapshot_space(&kv, "data").unwrap()[0].1;
    assert_eq!((x.bytes, x.chunks), (size, 3), "{x:?}");
    assert!(x.records >= 2, "{x:?}");
    // A second snapshot after: it holds nothing, the first still all.
    snap(&mut kv, "data", "after");
    let s = snapshot_space(&kv, "data").unwrap();
    assert_eq!(s[0].1.bytes, size);
    assert_eq!(s[1].1, Exclusive::default());
    // The file deleted: its current chunks are the newer snapshot's alone.
    let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(root), name: "f".into(), dir_only: None }]);
    assert!(r[0].is_ok());
    disk.destage(&mut kv);
    let s = snapshot_space(&kv, "data").unwrap();
    assert_eq!((s[0].1.bytes, s[1].1.bytes), (size, size), "{s:?}");
    let before = stored(&disk);
    assert_eq!(before, 2 * size);
    admin(&mut kv, Command::DropSnapshot { share: "data".into(), name: "before".into(), now_ns: 9 }).0.unwrap();
    disk.destage(&mut kv);
    assert_eq!(stored(&disk), size);
    admin(&mut kv, Command::DropSnapshot { share: "data".into(), name: "after".into(), now_ns: 9 }).0.unwrap();
    disk.destage(&mut kv);
    assert_eq!(stored(&disk), 0);
    clean(&kv, &disk);
    assert_eq!(snapshot_space(&kv, "nope"), None);
}

#[test]
fn a_clone_written_one_mib_holds_about_one_mib() {
    let mut kv = Kv::new();
    let mut disk = Disk::default();
    admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] }).0.unwrap();
    let root = lookup(&mut kv, ROOT_ID, "data").unwrap().id;
    let big = create(&mut kv, root, "big", CreateKind::File);
    write(&mut kv, big, 0, pattern(1, 3 * CS as usize));
    disk.destage(&mut kv);
    let (r, _) = admin(&mut kv, Command::Clone { source: "data".into(), snapshot: None, share: share("c", "/clones/c"), now_ns: 7 });
    r.unwrap();
    let x = clone_space(&kv)[0].1;
    assert_eq!(x.bytes, 0, "a new clone holds nothing of its own: {x:?}");
    let clones = lookup(&mut kv, ROOT_ID, "clones").unwrap().id;
    let croot = lookup(&mut kv, clones, "c").unwrap().id;
    let f = create(&mut kv, croot, "one-mib", CreateKind::File);
    write(&mut kv, f, 0, pattern(2, 1 << 20));
    disk.destage(&mut kv);
    let x = clone_space(&kv)[0].1;
    assert_eq!((x.bytes, x.chunks), (1 << 20, 1), "{x:?}");
    // 1 MiB into the big file: the one chunk it copied.
    let b = lookup(&mut kv, croot, "big").unwrap().id;
    write(&mut kv, b, CS + 10, pattern(3, 1 << 20));
    disk.destage(&mut kv);
    let x = clone_space(&kv)[0].1;
    assert_eq!((x.bytes, x.chunks), ((1 << 20) + CS, 2), "{x:?}");
    // The source changing after the clone: the implicit snapshot keeps the
    // old chunk, which removing the clone frees too.
    write(&mut kv, big, 0, pattern(4, CS as usize));
    disk.destage(&mut kv);
    let x = clone_space(&kv)[0].1;
    assert_eq!((x.bytes, x.chunks), ((1 << 20) + 2 * CS, 3), "{x:?}");
    let before = stored(&disk);
    admin(&mut kv, Command::RemoveShare { name: "c".into() }).0.unwrap();
    disk.destage(&mut kv);
    assert_eq!(before - stored(&disk), x.bytes);
    clean(&kv, &disk);
}

#[test]
fn a_schedule_is_stored_per_share_refused_when_bad_and_goes_with_its_share() {
    let mut kv = Kv::new();
    let disk = Disk::default();
    admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] }).0.unwrap();
    let set = |kv: &mut Kv, name: &str, s: Option<ScheduleRecord>| admin(kv, Command::SnapshotSchedule { share: name.into(), schedule: s });
    let hourly = ScheduleRecord { every_s: 3600, keep: 24 };
    assert!(matches!(set(&mut kv, "nosuch", Some(hourly)), (Err(AdminError::NotFound(_)), 0)));
    for bad in [ScheduleRecord { every_s: 0, keep: 1 }, ScheduleRecord { every_s: 60, keep: 0 }, ScheduleRecord { every_s: 60, keep: 257 }] {
        assert!(matches!(set(&mut kv, "data", Some(bad)), (Err(AdminError::Invalid(_)), 0)), "{bad:?}");
    }
    assert!(schedules(&kv).is_empty());
    assert_eq!(set(&mut kv, "data", Some(hourly)), (Ok(()), 1));
    assert_eq!(schedules(&kv), vec![("data".to_string(), hourly)]);
    clean(&kv, &disk);
    let daily = ScheduleRecord { every_s: 86_400, keep: 7 };
    set(&mut kv, "data", Some(daily)).0.unwrap();
    assert_eq!(schedules(&kv), vec![("data".to_string(), daily)]);
    set(&mut kv, "data", None).0.unwrap();
    assert!(schedules(&kv).is_empty());
    set(&mut kv, "data", Some(daily)).0.unwrap();
    admin(&mut kv, Command::RemoveShare { name: "data".into() }).0.unwrap();
    assert!(schedules(&kv).is_empty(), "removed with its share");
    clean(&kv, &disk);
    // fsck notices a schedule left without its share.
    kv.insert(duet_cluster::keys::schedule("gone"), duet_cluster::records::encode(&hourly).unwrap());
    let r = duet_cluster::fsck::check(&kv, &[]);
    assert!(r.problems.iter().any(|p| p.contains("share gone, which does not exist")), "{:?}", r.problems);
}
