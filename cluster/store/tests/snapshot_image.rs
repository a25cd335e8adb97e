//! Raft snapshot images (`duet_cluster_store::snapshot`) on real RocksDB
//! and real files: an image made from a checkpoint holds the replicated
//! keys and the chunk files, never the raft log, the hard state or
//! node-local records; a truncated, corrupt or padded image is refused;
//! an install keeps the installing node's own records; a crash (abort of
//! a child process) at each step of an install, then a start, gives the
//! whole new state; an image refused at install leaves the old state.

use std::path::{Path, PathBuf};
use std::process::Command;

use duet_cluster::keys;
use duet_cluster_store::snapshot::{self, ImageHeader};
use rocksdb::{Options, DB};

fn open(p: &Path) -> DB {
    let mut o = Options::default();
    o.create_if_missing(true);
    DB::open(&o, p).unwrap()
}

/// The leader's data directory: state at index 100, a chunk file; returns
/// the image bytes made from a checkpoint of it.
fn leader_image(root: &Path) -> Vec<u8> {
    leader_image_with(root, "leader", &[])
}

/// [`leader_image`] from a directory `name`, with `extra` keys.
fn leader_image_with(root: &Path, name: &str, extra: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let dir = root.join(name);
    let db = open(&dir.join("metadata"));
    for (k, v) in extra {
        db.put(k, v).unwrap();
    }
    db.put(keys::meta("applied_index"), 100u64.to_be_bytes()).unwrap();
    db.put(keys::meta("applied_term"), 2u64.to_be_bytes()).unwrap();
    db.put(keys::meta("next_id"), 77u64.to_be_bytes()).unwrap();
    db.put(keys::node(5), b"new node 5").unwrap();
    db.put(keys::local("destaged_upto"), 7u64.to_be_bytes()).unwrap();
    db.put(keys::local("node_id"), 1u64.to_be_bytes()).unwrap();
    db.put(keys::raft_log(99), b"leader log entry").unwrap();
    db.put(keys::RAFT_HARD_STATE, b"leader hard state").unwrap();
    let chunks = dir.join("chunks");
    std::fs::create_dir_all(chunks.join("05")).unwrap();
    let big: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(chunks.join("05/5.0"), &big).unwrap();
    std::fs::create_dir_all(chunks.join("06")).unwrap();
    let cp = dir.join("cp");
    rocksdb::checkpoint::Checkpoint::new(&db).unwrap().create_checkpoint(&cp).unwrap();
    drop(db);
    let mut out = Vec::new();
    let mut pieces = 0;
    let h = snapshot::write_image(&cp, &chunks, &mut |p: &[u8]| {
        assert!(p.len() <= snapshot::PIECE + (64 << 10), "a piece of {} bytes", p.len());
        pieces += 1;
        out.extend_from_slice(p);
        Ok(())
    })
    .unwrap();
    assert_eq!(h, ImageHeader { index: 100, term: 2, destaged_upto: 7 });
    assert!(pieces >= 3, "streamed in pieces ({pieces})");
    out
}

/// A follower's data directory with old state and its own records.
fn follower(root: &Path, name: &str, image: &[u8]) -> PathBuf {
    let dir = root.join(name);
    let db = open(&dir.join("metadata"));
    db.put(keys::meta("applied_index"), 4u64.to_be_bytes()).unwrap();
    db.put(keys::node(5), b"old node 5").unwrap();
    db.put(keys::node(9), b"old node 9, deleted since").unwrap();
    db.put(keys::local("node_id"), 3u64.to_be_bytes()).unwrap();
    db.put(keys::local("destaged_upto"), 2u64.to_be_bytes()).unwrap();
    db.put(keys::raft_log(4), b"old log entry").unwrap();
    db.put(keys::RAFT_HARD_STATE, b"follower hard state").unwrap();
    drop(db);
    std::fs::create_dir_all(dir.join("chunks/09")).unwrap();
    std::fs::write(dir.join("chunks/09/9.0"), b"old chunk").unwrap();
    std::fs::create_dir_all(dir.join("wal")).unwrap();
    std::fs::write(dir.join("wal/0000000000000001.log"), b"own write log").unwrap();
    let snap = snapshot::staging_dir(&dir);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(snap.join("image.partial"), image).unwrap();
    dir
}

fn get(db: &DB, k: &[u8]) -> Option<Vec<u8>> {
    db.get(k).unwrap()
}

fn assert_old(dir: &Path) {
    let db = DB::open_for_read_only(&Options::default(), dir.join("metadata"), false).unwrap();
    assert_eq!(get(&db, &keys::node(5)).as_deref(), Some(&b"old node 5"[..]));
    assert_eq!(get(&db, &keys::meta("applied_index")), Some(4u64.to_be_bytes().to_vec()));
    assert!(dir.join("chunks/09/9.0").exists());
    assert!(!dir.join("chunks/05/5.0").exists());
}

fn assert_new(dir: &Path) {
    let db = DB::open_for_read_only(&Options::default(), dir.join("metadata"), false).unwrap();
    assert_eq!(get(&db, &keys::node(5)).as_deref(), Some(&b"new node 5"[..]));
    assert_eq!(get(&db, &keys::node(9)), None, "old state is gone");
    assert_eq!(get(&db, &keys::meta("applied_index")), Some(100u64.to_be_bytes().to_vec()));
    assert_eq!(get(&db, &keys::meta("next_id")), Some(77u64.to_be_bytes().to_vec()));
    // This node's own records, not the leader's.
    assert_eq!(get(&db, &keys::local("node_id")), Some(3u64.to_be_bytes().to_vec()));
    assert_eq!(get(&db, keys::RAFT_HARD_STATE).as_deref(), Some(&b"follower hard state"[..]));
    // The leader's destage progress (its chunks hold what it destaged).
    assert_eq!(get(&db, &keys::local("destaged_upto")), Some(7u64.to_be_bytes().to_vec()));
    assert_eq!(get(&db, &keys::raft_log(99)), None, "no raft log in an image");
    assert_eq!(get(&db, &keys::raft_log(4)), None, "the old log is gone");
    let big = std::fs::read(dir.join("chunks/05/5.0")).unwrap();
    assert_eq!(big.len(), (3 << 20) + 17);
    assert!(big.iter().enumerate().all(|(i, b)| *b == (i * 7 % 251) as u8));
    assert!(!dir.join("chunks/09/9.0").exists(), "old chunks are gone");
    assert_eq!(std::fs::read(dir.join("wal/0000000000000001.log")).unwrap(), b"own write log", "the write log is the node's own");
    assert!(!snapshot::staging_dir(dir).exists(), "staging removed");
}

#[test]
fn image_round_trip_and_install_keeps_own_records() {
    let tmp = tempfile::tempdir().unwrap();
    let image = leader_image(tmp.path());
    let dir = follower(tmp.path(), "f", &image);
    let snap = snapshot::staging_dir(&dir);
    let h = snapshot::stage_verified(&dir, &snap.join("image.partial"), 0).unwrap();
    assert_eq!(h.index, 100);
    assert_old(&dir);
    assert_eq!(snapshot::install_pending(&dir).unwrap(), Some(h));
    assert_new(&dir);
    assert_eq!(snapshot::install_pending(&dir).unwrap(), None, "nothing left to install");
}

#[test]
fn truncated_corrupt_or_padded_images_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let image = leader_image(tmp.path());
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated in the data", image[..image.len() / 2].to_vec()),
        ("without its end", image[..image.len() - 41].to_vec()),
        ("end cut", image[..image.len() - 5].to_vec()),
        ("a byte flipped", {
            let mut b = image.clone();
            b[70] ^= 1;
            b
        }),
        ("a chunk byte flipped", {
            let mut b = image.clone();
            let n = b.len();
            b[n - 1000] ^= 0x80;
            b
        }),
        ("padded", {
            let mut b = image.clone();
            b.push(0);
            b
        }),
        ("empty", Vec::new()),
        ("another magic", {
            let mut b = image.clone();
            b[0] = b'X';
            b
        }),
    ];
    for (i, (what, bytes)) in cases.into_iter().enumerate() {
        let dir = follower(tmp.path(), &format!("bad{i}"), &bytes);
        let partial = snapshot::staging_dir(&dir).join("image.partial");
        match snapshot::stage_verified(&dir, &partial, 0) {
            Err(snapshot::SnapshotError::Bad(why)) => eprintln!("{what}: refused: {why}"),
            other => panic!("{what}: {other:?}"),
        }
        assert!(!snapshot::staging_dir(&dir).join("image").exists(), "{what}: staged");
        // A start finds only the partial transfer: nothing installed.
        assert_eq!(snapshot::install_pending(&dir).unwrap(), None);
        assert_old(&dir);
        assert!(!snapshot::staging_dir(&dir).exists());
    }
    // An image damaged on disk after it was staged is refused at install.
    let dir = follower(tmp.path(), "rot", &image);
    let snap = snapshot::staging_dir(&dir);
    snapshot::stage_verified(&dir, &snap.join("image.partial"), 0).unwrap();
    let mut b = std::fs::read(snap.join("image")).unwrap();
    b[100] ^= 4;
    std::fs::write(snap.join("image"), b).unwrap();
    assert_eq!(snapshot::install_pending(&dir).unwrap(), None);
    assert_old(&dir);
}

#[test]
fn crash_at_each_step_then_start_installs_whole() {
    // In the child this test starts (below): install the image staged in
    // DUET_TEST_DIR, aborting at DUET_TEST_SNAPSHOT_CRASH.
    if let Ok(dir) = std::env::var("DUET_TEST_DIR") {
        let _ = snapshot::install_pending(Path::new(&dir));
        panic!("not crashed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let image = leader_image(tmp.path());
    for point in ["built", "metadata", "chunks"] {
        let dir = follower(tmp.path(), &format!("crash-{point}"), &image);
        let snap = snapshot::staging_dir(&dir);
        snapshot::stage_verified(&dir, &snap.join("image.partial"), 0).unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_at_each_step_then_start_installs_whole", "--nocapture"])
            .env("DUET_TEST_DIR", &dir)
            .env("DUET_TEST_SNAPSHOT_CRASH", point)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{point}: the child did not crash: {out:?}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("not crashed")
                && !String::from_utf8_lossy(&out.stderr).contains("not crashed"),
            "{point}: {out:?}"
        );
        if point == "built" {
            // The marker is written, nothing swapped yet: the old state is live.
            assert_old(&dir);
        }
        // The next start finishes the install.
        assert!(snapshot::install_pending(&dir).unwrap().is_some(), "{point}");
        assert_new(&dir);
    }
}

/// An image this node's own state already covers is refused at install
/// and the old state kept: one not past its applied index, or one whose
/// last entry (same index and term) its raft log holds: installing would
/// drop the log after it, which the node may have acknowledged to a
/// leader while it fetched the image (found by `cluster/core/tests/sim.rs`,
/// `an_image_behind_the_acknowledged_log_breaks_raft`). An entry of
/// another term at that index does not stop the install.
#[test]
fn an_image_the_node_already_covers_is_refused() {
    use protobuf::Message as _;
    let entry = |term: u64| {
        let mut e = raft::eraftpb::Entry::default();
        e.index = 100;
        e.term = term;
        e.write_to_bytes().unwrap()
    };
    let tmp = tempfile::tempdir().unwrap();
    let image = leader_image(tmp.path());
    for (name, applied, log_term, installed) in
        [("applied", 100u64, None, false), ("logged", 4, Some(2u64), false), ("diverged", 4, Some(1u64), true)]
    {
        let dir = follower(tmp.path(), name, &image);
        {
            let db = open(&dir.join("metadata"));
            db.put(keys::meta("applied_index"), applied.to_be_bytes()).unwrap();
            if let Some(t) = log_term {
                db.put(keys::raft_log(100), entry(t)).unwrap();
            }
        }
        let snap = snapshot::staging_dir(&dir);
        snapshot::stage_verified(&dir, &snap.join("image.partial"), 0).unwrap();
        let got = snapshot::install_pending(&dir).unwrap();
        assert_eq!(got.is_some(), installed, "{name}");
        assert!(!snap.exists(), "{name}: the staged image is gone either way");
        let db = DB::open_for_read_only(&Options::default(), dir.join("metadata"), false).unwrap();
        let node5 = get(&db, &keys::node(5));
        if installed {
            assert_eq!(node5.as_deref(), Some(&b"new node 5"[..]), "{name}");
        } else {
            assert_eq!(node5.as_deref(), Some(&b"old node 5"[..]), "{name}: old state kept");
            assert_eq!(get(&db, &keys::meta("applied_index")), Some(applied.to_be_bytes().to_vec()), "{name}");
        }
    }
}

/// An image whose queue still holds a record of write-cache bytes (an
/// extent) that this node has destaged already is refused, when it is
/// staged (against the node's live destage progress) and again at the
/// install (against the progress the node recorded, which may have grown
/// since): the install would replace the chunk files that hold this
/// node's copy with the image's, which lack it. Records that carry no
/// cached bytes (a truncation) do not count, nor does a node that has
/// not destaged that far.
#[test]
fn an_image_that_would_drop_this_nodes_copies_is_refused() {
    use duet_cluster::records::encode;
    use duet_cluster::{DataOp, DataRecord};
    let rec = |op: DataOp| encode(&DataRecord { file: 5, op }).unwrap();
    let extent = DataOp::WriteExtent { offset: 0, extent: duet_fs::ExtentId { origin: 2, seq: 5 }, len: 4096 };
    let tmp = tempfile::tempdir().unwrap();
    // The maker destaged up to 7; its queue holds 8 (a truncation) and 9
    // (an extent).
    let image = leader_image_with(
        tmp.path(),
        "leader-q",
        &[(keys::dq(8), rec(DataOp::Truncate { size: 0 })), (keys::dq(9), rec(extent.clone()))],
    );
    for (name, destaged_here, installed) in [("behind", 7u64, true), ("truncation only", 8, true), ("extent", 9, false), ("past it", 12, false)] {
        let dir = follower(tmp.path(), name, &image);
        {
            let db = open(&dir.join("metadata"));
            db.put(keys::local("destaged_upto"), destaged_here.to_be_bytes()).unwrap();
        }
        let snap = snapshot::staging_dir(&dir);
        let partial = snap.join("image.partial");
        match snapshot::stage_verified(&dir, &partial, destaged_here) {
            Ok(h) => assert!(installed, "{name}: staged {h:?}"),
            Err(snapshot::SnapshotError::Bad(why)) => {
                assert!(!installed, "{name}: refused: {why}");
                assert!(why.contains("data record 9") && why.contains("destaged already"), "{name}: {why}");
                assert!(!snap.join("image").exists(), "{name}: staged");
                // Staged while this node's progress was lower: refused at
                // the install.
                std::fs::write(&partial, &image).unwrap();
                snapshot::stage_verified(&dir, &partial, 0).unwrap();
            }
            Err(e) => panic!("{name}: {e}"),
        }
        assert_eq!(snapshot::install_pending(&dir).unwrap().is_some(), installed, "{name}");
        assert!(!snap.exists(), "{name}: the staged image is gone either way");
        if installed {
            let db = DB::open_for_read_only(&Options::default(), dir.join("metadata"), false).unwrap();
            assert_eq!(get(&db, &keys::node(5)).as_deref(), Some(&b"new node 5"[..]), "{name}");
            assert_eq!(get(&db, &keys::dq(9)), Some(rec(extent.clone())), "{name}: the queue comes with the image");
            assert_eq!(get(&db, &keys::local("destaged_upto")), Some(7u64.to_be_bytes().to_vec()), "{name}");
        } else {
            assert_old(&dir);
            let db = DB::open_for_read_only(&Options::default(), dir.join("metadata"), false).unwrap();
            assert_eq!(get(&db, &keys::local("destaged_upto")), Some(destaged_here.to_be_bytes().to_vec()), "{name}");
        }
    }
}

/// The sender makes the follower's check before it streams anything: a
/// checkpoint whose queue holds an extent record the follower reported
/// destaged is not sent (the same verdicts as the follower's own check
/// of the whole image, above).
#[test]
fn the_sender_withholds_an_image_the_follower_would_refuse() {
    use duet_cluster::records::encode;
    use duet_cluster::{DataOp, DataRecord};
    let rec = |op: DataOp| encode(&DataRecord { file: 5, op }).unwrap();
    let extent = DataOp::WriteExtent { offset: 0, extent: duet_fs::ExtentId { origin: 2, seq: 5 }, len: 4096 };
    let tmp = tempfile::tempdir().unwrap();
    let image = leader_image_with(
        tmp.path(),
        "leader-w",
        &[
            (keys::dq(8), rec(DataOp::Truncate { size: 0 })),
            (keys::dq(9), rec(extent.clone())),
            (keys::dq(10), rec(DataOp::Truncate { size: 0 })),
        ],
    );
    let cp = tmp.path().join("leader-w/cp");
    for (destaged_there, sent) in [(0u64, true), (7, true), (8, true), (9, false), (10, false), (40, false)] {
        match snapshot::refuse_checkpoint_for(&cp, destaged_there) {
            Ok(h) => {
                assert!(sent, "{destaged_there}: sent");
                assert_eq!(h, ImageHeader { index: 100, term: 2, destaged_upto: 7 });
            }
            Err(snapshot::SnapshotError::Bad(why)) => {
                assert!(!sent, "{destaged_there}: withheld: {why}");
                assert!(why.contains("data record 9") && why.contains("destaged already"), "{why}");
            }
            Err(e) => panic!("{destaged_there}: {e}"),
        }
        // The follower's own check of the whole image agrees.
        let dir = follower(tmp.path(), &format!("f{destaged_there}"), &image);
        let partial = snapshot::staging_dir(&dir).join("image.partial");
        assert_eq!(snapshot::stage_verified(&dir, &partial, destaged_there).is_ok(), sent, "{destaged_there}");
    }
}
