//! Snapshot and clone administration against a real duetd (issue 15): the
//! space used exclusively by each snapshot and clone, measured against the
//! chunk store on disk (files written over NFSv3, `duetctl snapshot list`,
//! `share list`/`share show`, the API's JSON through `duetctl --json`),
//! and snapshot schedules with retention (`duetctl snapshot schedule`,
//! a 2-second interval: snapshots appear, the oldest go, manual ones and
//! one a clone stands on stay, the schedule survives a restart, `--off`
//! stops it; bad values refused with their exit statuses).

mod clients;
mod common;

use std::time::{Duration, Instant};

use clients::*;
use common::{chunk_bytes, settle_chunks, Daemon};

const MIB: u64 = 1 << 20;

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64 / 8).flat_map(|i| (i * 8 + (seed << 40)).to_le_bytes()).collect()
}

fn write_all(c: &mut Nfs, fh: &[u8], data: &[u8]) {
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        assert_eq!(c.write3(fh, (i << 20) as u64, piece), Ok(piece.len() as u32));
    }
}

fn exit_code(d: &Daemon, args: &[&str]) -> i32 {
    d.ctl(args).status.code().unwrap_or(-1)
}

fn json(d: &Daemon, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let out = d.ok(&a);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// (name, exclusive bytes) of each snapshot of `share`, oldest first.
fn snaps(d: &Daemon, share: &str) -> Vec<(String, u64, serde_json::Value)> {
    let v = json(d, &["snapshot", "list", share]);
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s["exclusive"]["bytes"].as_u64().unwrap(), s.clone()))
        .collect()
}

fn share_json(d: &Daemon, name: &str) -> serde_json::Value {
    json(d, &["share", "show", name])
}

#[test]
fn space_of_each_snapshot_and_clone_is_what_deleting_it_frees() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    // 8 MiB (two chunks) and a small file.
    let big = c.create3(&root, "big").unwrap();
    write_all(&mut c, &big, &pattern(1, 8 << 20));
    let small = c.create3(&root, "small").unwrap();
    write_all(&mut c, &small, b"small");
    let base = settle_chunks(&d.data);
    assert_eq!(base, 8 * MIB, "two chunks on disk");

    d.ok(&["snapshot", "create", "public", "s1"]);
    let s = snaps(&d, "public");
    assert_eq!((s[0].0.as_str(), s[0].1), ("s1", 0), "nothing changed since it froze: {:?}", s[0].2);
    assert_eq!(s[0].2["scheduled"], false);

    // Overwrite it all: the old 8 MiB are the snapshot's alone.
    write_all(&mut c, &big, &pattern(2, 8 << 20));
    write_all(&mut c, &small, b"SMALL");
    let with_snapshot = settle_chunks(&d.data);
    assert_eq!(with_snapshot, 16 * MIB);
    let s = snaps(&d, "public");
    assert_eq!(s[0].1, 8 * MIB, "{:?}", s[0].2);
    assert_eq!(s[0].2["exclusive"]["chunks"], 2);
    assert!(s[0].2["exclusive"]["records"].as_u64().unwrap() >= 3, "{:?}", s[0].2);
    let table = d.ok(&["snapshot", "list", "public"]);
    assert!(table.contains("EXCLUSIVE") && table.contains("8.0 MiB") && table.contains("manual"), "{table}");

    // A second snapshot, then 1 MiB rewritten: one chunk is its alone.
    d.ok(&["snapshot", "create", "public", "s2"]);
    assert_eq!(c.write3(&big, 5 * MIB, &pattern(3, 1 << 20)), Ok(1 << 20));
    settle_chunks(&d.data);
    let s = snaps(&d, "public");
    assert_eq!((s[0].1, s[1].1), (8 * MIB, 4 * MIB), "{s:?}");

    // Deleting s1 frees its 8 MiB on disk.
    let before = settle_chunks(&d.data);
    d.ok(&["--yes", "snapshot", "delete", "public", "s1"]);
    let after = settle_chunks(&d.data);
    assert_eq!(before - after, 8 * MIB, "freed what the list said");
    assert_eq!(snaps(&d, "public")[0].1, 4 * MIB);

    // A clone: nothing of its own at first; 1 MiB written into a new
    // file of it is 1 MiB; 1 MiB into its copy of big copies one chunk.
    d.ok(&["share", "clone", "public", "c1"]);
    let v = share_json(&d, "c1");
    assert_eq!(v["origin"], "public@clone.c1", "{v}");
    assert_eq!(v["exclusive"]["bytes"], 0, "{v}");
    // The protocol executors pick the new share up at their next refresh.
    std::thread::sleep(Duration::from_millis(1500));
    let mut k = Nfs::connect(d.nfs_port);
    let croot = k.mount("/clones/c1").unwrap();
    let mine = k.create3(&croot, "mine").unwrap();
    write_all(&mut k, &mine, &pattern(4, 1 << 20));
    settle_chunks(&d.data);
    assert_eq!(share_json(&d, "c1")["exclusive"]["bytes"], MIB);
    let cbig = k.lookup3(&croot, b"big").unwrap();
    assert_eq!(k.write3(&cbig, 100, &pattern(5, 1 << 20)), Ok(1 << 20));
    let before = settle_chunks(&d.data);
    let v = share_json(&d, "c1");
    assert_eq!(v["exclusive"]["bytes"], MIB + 4 * MIB, "{v}");
    let list = d.ok(&["share", "list"]);
    assert!(list.contains("EXCLUSIVE") && list.contains("5.0 MiB"), "{list}");
    let show = d.ok(&["share", "show", "c1"]);
    assert!(show.contains("exclusive space") && show.contains("5.0 MiB in 2 chunks"), "{show}");
    // The snapshot the clone stands on is shown as such.
    let s = snaps(&d, "public");
    let pinned = s.iter().find(|x| x.0 == "clone.c1").unwrap();
    assert_eq!(pinned.2["clone"], "c1", "{:?}", pinned.2);
    // Removing the clone frees what its figure said.
    d.ok(&["--yes", "share", "remove", "c1"]);
    let after = settle_chunks(&d.data);
    assert_eq!(before - after, 5 * MIB);
    let r = d.ok(&["fsck"]);
    assert!(r.contains("file system is consistent"), "{r}");
    // This daemon keeps the default minimum interval (1 min).
    let o = d.ctl(&["snapshot", "schedule", "public", "--every", "30s", "--keep", "2"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("at least 1m"), "{o:?}");
    assert_eq!(chunk_bytes(&d.data), after);
}

/// The scheduled snapshots of `public` (names), oldest first.
fn autos(d: &Daemon) -> Vec<String> {
    snaps(d, "public").into_iter().filter(|s| s.2["scheduled"] == true).map(|s| s.0).collect()
}

/// Polls until `f` holds, at most `secs`.
fn until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "not within {secs} s: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_schedule_takes_snapshots_and_retires_the_oldest() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_config(tmp.path(), "", "portmap = false\n[testing]\nsnapshot_schedule_min_s = 1");
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    let f = c.create3(&root, "f").unwrap();
    write_all(&mut c, &f, &pattern(1, 5 << 20));
    d.ok(&["snapshot", "create", "public", "manual"]);

    // Refusals, nothing changed.
    assert_eq!(exit_code(&d, &["snapshot", "schedule", "public", "--every", "0s", "--keep", "2"]), 2);
    assert_eq!(exit_code(&d, &["snapshot", "schedule", "public", "--every", "2s", "--keep", "0"]), 2);
    assert_eq!(exit_code(&d, &["snapshot", "schedule", "public", "--every", "2s", "--keep", "257"]), 2);
    assert_eq!(exit_code(&d, &["snapshot", "schedule", "public", "--every", "400d", "--keep", "2"]), 2);
    assert_eq!(exit_code(&d, &["snapshot", "schedule", "public", "--every", "soon", "--keep", "2"]), 2);
    assert_eq!(exit_code(&d, &["snapshot", "schedule", "public", "--every", "2s"]), 2);
    assert_eq!(exit_code(&d, &["snapshot", "schedule", "nosuch", "--every", "2s", "--keep", "2"]), 3);
    assert_eq!(exit_code(&d, &["snapshot", "create", "public", "auto-20261203T200000Z"]), 2);
    assert!(share_json(&d, "public").get("snapshot_schedule").is_none());

    let out = d.ok(&["snapshot", "schedule", "public", "--every", "2s", "--keep", "2"]);
    assert!(out.contains("every 2s, keep 2"), "{out}");
    assert_eq!(share_json(&d, "public")["snapshot_schedule"], serde_json::json!({"every_s": 2, "keep": 2}));
    assert!(d.ok(&["share", "show", "public"]).contains("every 2s, keep 2"));

    // Snapshots appear, one per 2-second slot, and the oldest go.
    until(15, "two scheduled snapshots", || autos(&d).len() == 2);
    let first = autos(&d)[0].clone();
    until(15, "the oldest retired", || !autos(&d).contains(&first));
    let now = autos(&d);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(now.iter().all(|n| n.starts_with("auto-") && n.ends_with('Z') && n.len() == 21), "{now:?}");
    assert!(snaps(&d, "public").iter().any(|s| s.0 == "manual"), "a manual snapshot is never retired");
    // Each is a real snapshot: `.snapshot/NAME/f` reads the file.
    let snapdir = c.lookup3(&root, b".snapshot").unwrap();
    let s = c.lookup3(&snapdir, now[1].as_bytes()).unwrap_or_else(|e| panic!("{}: {e:?}", now[1]));
    let sf = c.lookup3(&s, b"f").unwrap();
    assert!(c.read3_all(&sf).unwrap() == pattern(1, 5 << 20));

    // A clone standing on a scheduled snapshot pins it: retention passes it by.
    let pinned = now[1].clone();
    d.ok(&["share", "clone", &format!("public@{pinned}"), "pc"]);
    until(15, "two newer ones after the pinned one", || {
        let a = autos(&d);
        a.iter().position(|n| *n == pinned).is_some_and(|i| a.len() - i - 1 == 2)
    });
    let a = autos(&d);
    assert_eq!(a.len(), 3, "the pinned one and the newest two: {a:?}");

    // The schedule is replicated state: it survives a restart.
    d.restart();
    let newest = autos(&d).last().cloned().unwrap();
    until(15, "a snapshot after the restart", || autos(&d).last() != Some(&newest));
    assert!(autos(&d).contains(&pinned));
    assert!(d.ok(&["fsck"]).contains("file system is consistent"), "with a schedule stored");

    // Off: no more are taken, and those there stay.
    let out = d.ok(&["snapshot", "schedule", "public", "--off"]);
    assert!(out.contains("no snapshot schedule"), "{out}");
    std::thread::sleep(Duration::from_millis(1500));
    let stay = autos(&d);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(autos(&d), stay, "nothing taken or deleted after --off");
    assert!(share_json(&d, "public").get("snapshot_schedule").is_none());
    // The audit log names the schedule's actions.
    let audit = d.ok(&["audit", "--last", "200"]);
    assert!(audit.contains("scheduled snapshot create public auto-"), "{audit}");
    assert!(audit.contains("scheduled snapshot delete public auto-"), "{audit}");
    // Removing the clone, then the share's snapshots: fsck clean.
    d.ok(&["--yes", "share", "remove", "pc"]);
    for s in snaps(&d, "public") {
        d.ok(&["--yes", "snapshot", "delete", "public", &s.0]);
    }
    let r = d.ok(&["fsck"]);
    assert!(r.contains("file system is consistent"), "{r}");
}
