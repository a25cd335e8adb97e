//! Write-log segment reuse (issue 16): with 1 MiB segments, released
//! segments' files are kept as spares (`wal/<seq>.spare`) and renamed to
//! new sequences; everything written reads back byte-exact while segments
//! come and go, and after restarts, and the files really were reused
//! (`DataCounters::log_segments_reused`, `duet_log_segments_reused_total`).
//! The SIGKILL case is in `crash.rs`
//! (`sigkill_while_writing_into_reused_log_segments_loses_nothing_acknowledged`).

mod common;

use std::sync::atomic::Ordering;

use common::inproc::*;
use duet_appliance::server;

/// A file: its name, id and what it must read as.
type Files = Vec<(String, u64, Vec<u8>)>;

/// Creates `n` files of 200-600 KB (log records: several per segment) and
/// overwrites parts of earlier ones, then checks every file.
fn write_round(e: &duet_appliance::engine::EngineHandle, rng: &mut Rng, files: &mut Files, tag: &str, n: usize) {
    for i in 0..n {
        let name = format!("{tag}-{i}");
        let id = create(e, &name);
        let len = 200_000 + rng.below(400_000) as usize;
        let data = bytes(rng, len);
        let mut model = Vec::new();
        write_model(e, id, &mut model, 0, &data);
        files.push((name, id, model));
    }
    for _ in 0..n / 2 {
        let j = rng.below(files.len() as u64) as usize;
        let at = rng.below(300_000);
        let len = 100_000 + rng.below(100_000) as usize;
        let data = bytes(rng, len);
        let (_, id, model) = &mut files[j];
        write_model(e, *id, model, at, &data);
    }
    check_all(e, files, tag);
}

fn check_all(e: &duet_appliance::engine::EngineHandle, files: &Files, what: &str) {
    for (name, id, model) in files {
        check(e, *id, model, 0, 1 << 30, &format!("{what}: {name}"));
    }
}

/// The `.spare` files in `wal/`.
fn spares(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "spare"))
        .count()
}

fn reused(r: &server::Running) -> u64 {
    r.engine().data_counters.log_segments_reused.load(Ordering::Relaxed)
}

#[test]
fn released_segments_are_reused_and_everything_reads_back_across_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut c = cfg(dir, 0);
    c.cache.log_segment_mib = 1;
    let mut rng = Rng(0x16);
    let mut files: Files = Vec::new();

    let r = server::start(&c).unwrap();
    let e = r.engine().clone();
    for round in 0..3 {
        write_round(&e, &mut rng, &mut files, &format!("a{round}"), 8);
        settle(&e);
        check_all(&e, &files, "settled");
    }
    let n = reused(&r);
    assert!(n > 0, "no segment file was reused after ~10 MiB through 1 MiB segments");
    assert!(spares(dir) <= duet_appliance::datapath::SPARE_SEGMENTS, "at most SPARE_SEGMENTS spares are kept");
    assert!(fsck(&r).is_empty());
    r.shutdown();
    assert!(spares(dir) > 0, "released segments were kept as spares");

    // Restart: the spares are found, never read as segments, and the new
    // segment of the start is made from one.
    let r = server::start(&c).unwrap();
    let e = r.engine().clone();
    assert!(reused(&r) >= 1, "the segment made at start reuses a spare");
    check_all(&e, &files, "after a restart");
    // Written without waiting for the destager, then a restart at once:
    // the records are read back from reused segments by recovery.
    write_round(&e, &mut rng, &mut files, "b", 8);
    assert!(reused(&r) >= 2, "segments made while writing reuse spares");
    r.shutdown();

    let r = server::start(&c).unwrap();
    let e = r.engine().clone();
    check_all(&e, &files, "after the second restart");
    settle(&e);
    check_all(&e, &files, "after the second restart, destaged");
    assert!(fsck(&r).is_empty());
    r.shutdown();
}
