//! I/O errors other than a full volume. This machine has no device-mapper
//! (no dm-error / dm-flakey) and a read-only loop device still takes
//! writes, so the errors are injected inside duetd: with `[testing]
//! fault_injection = true`, `duetctl fault POINT --count N` makes the next
//! N operations at that point fail with EIO exactly where the real call
//! would have failed (the write log's append and fdatasync, data reads,
//! the destager's chunk writes and syncs, the metadata store's synced raft
//! write).
//!
//! What must hold at each point: the request that met the error is
//! answered with the protocol's I/O error (STATUS_UNEXPECTED_IO_ERROR,
//! NFS3ERR_IO), never acknowledged; nothing stored before is damaged; the
//! next request works (data path) or, after a metadata write error, every
//! change is refused while reads go on until a restart recovers; fsck is
//! clean and everything acknowledged survives a SIGKILL.

mod clients;
mod common;

use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs3::Nfsstat3;
use duet_protocols::smb2::status::NtStatus;

const MIB: usize = 1 << 20;
/// STATUS_UNEXPECTED_IO_ERROR (MS-ERREF 2.3.1).
const IO_ERROR: NtStatus = NtStatus(0xC000_00E9);

fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|p| ((p / 5) as u8) ^ (i as u8).wrapping_mul(37) ^ ((p >> 11) as u8)).collect()
}

fn stat(d: &Daemon, key: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "stats"])).unwrap();
    v[key].as_u64().unwrap_or_else(|| panic!("stats has no {key}: {v}"))
}

/// Waits until the destager has nothing left: chunk writes stop growing.
fn settle(d: &Daemon) {
    let mut last = stat(d, "chunk_writes");
    loop {
        std::thread::sleep(Duration::from_millis(400));
        let now = stat(d, "chunk_writes");
        if now == last {
            return;
        }
        last = now;
    }
}

fn smb_put(c: &mut Smb, name: &str, data: &[u8]) -> NtStatus {
    let f = match c.create(name) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let mut st = NtStatus::SUCCESS;
    for (k, piece) in data.chunks(MIB).enumerate() {
        st = c.write(f, (k * MIB) as u64, piece, true);
        if st != NtStatus::SUCCESS {
            break;
        }
    }
    c.close(f);
    st
}

fn smb_get(c: &mut Smb, name: &str, len: usize) -> Result<Vec<u8>, NtStatus> {
    let f = c.open_read(name)?;
    let r = c.read_all(f, len + 1);
    c.close(f);
    r
}

/// New SMB (bench on `public`) and NFSv3 clients, and the share's root
/// handle.
fn connect(d: &Daemon) -> (Smb, Nfs, Vec<u8>) {
    let c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    let mut n = Nfs::connect(d.nfs_port);
    let root = n.mount("/public").unwrap();
    (c, n, root)
}

/// SIGTERM and start again; the metadata store is healthy after it.
fn restart_and_reconnect(d: &mut Daemon) -> (Smb, Nfs, Vec<u8>) {
    d.restart();
    assert!(!d.ok(&["status"]).contains("FAILED"), "a restart recovers the metadata store");
    connect(d)
}

#[test]
fn injected_io_errors_fail_the_request_and_damage_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let smb_extra = "[testing]\nfault_injection = true\n[cache]\nlog_segment_mib = 8\n";
    let mut d = Daemon::start_with(tmp.path(), smb_extra);
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));
    let (mut c, mut n, root) = connect(&d);

    // What is stored before any error: a chunked file, a small file, an
    // NFSv3 file, all destaged.
    let mut stored: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, len) in [(1, 2 * MIB + 4321), (2, 3000)] {
        let name = format!("before-{i}.bin");
        let data = pattern(i, len);
        assert_eq!(smb_put(&mut c, &name, &data), NtStatus::SUCCESS, "{name}");
        stored.push((name, data));
    }
    let nfs_fh = n.create3(&root, "nfs-before").unwrap();
    let mut nfs_bytes = pattern(9, 300 << 10);
    assert_eq!(n.write3(&nfs_fh, 0, &nfs_bytes), Ok(300 << 10));
    settle(&d);
    let check = |c: &mut Smb, n: &mut Nfs, stored: &[(String, Vec<u8>)], nfs_bytes: &[u8], what: &str| {
        for (name, data) in stored {
            let got = smb_get(c, name, data.len()).unwrap_or_else(|e| panic!("{what}: read {name}: {e:?}"));
            assert!(got == *data, "{what}: {name} came back different ({} bytes)", got.len());
        }
        let root = n.mount("/public").unwrap();
        let fh = n.lookup3(&root, b"nfs-before").unwrap();
        assert!(n.read3_all(&fh).unwrap() == nfs_bytes, "{what}: nfs-before");
    };

    // Fault injection needs no restart to disarm: count 0 cancels.
    assert!(d.ok(&["fault", "wal-write", "--count", "0"]).contains("0 operation"));
    let o = d.ctl(&["fault", "no-such-point"]);
    assert_eq!(o.status.code(), Some(2), "an unknown fault point is a usage error");

    // 1. The write log's append fails: the SMB WRITE gets the I/O error,
    //    the file stays as it was, the next WRITE works.
    d.ok(&["fault", "wal-write"]);
    let f = c.create("wal-write.bin").unwrap();
    assert_eq!(c.write(f, 0, &pattern(3, MIB), true), IO_ERROR, "WRITE when the log append fails");
    assert_eq!(c.write(f, 0, &pattern(3, MIB), true), NtStatus::SUCCESS, "the next WRITE");
    c.close(f);
    stored.push(("wal-write.bin".into(), pattern(3, MIB)));

    // 2. The log's fdatasync fails: an NFSv3 FILE_SYNC WRITE gets NFS3ERR_IO
    //    (not acknowledged, even though a later sync succeeds), the bytes
    //    written before it are intact, and the retry is acknowledged.
    d.ok(&["fault", "wal-sync"]);
    let big = pattern(4, MIB);
    assert_eq!(n.write3(&nfs_fh, 300 << 10, &big), Err(Nfsstat3::IO), "FILE_SYNC WRITE when fdatasync fails");
    let (got, _) = n.read3(&nfs_fh, 0, 400 << 10).unwrap();
    assert!(got == nfs_bytes, "the file is as it was before the failed WRITE ({} bytes)", got.len());
    assert_eq!(n.write3(&nfs_fh, 300 << 10, &big), Ok(MIB as u32), "the next WRITE");
    nfs_bytes.extend_from_slice(&big);
    settle(&d);

    // 3. A data read fails: READ gets the I/O error, the next READ works.
    d.ok(&["fault", "data-read"]);
    let (name, data) = stored[0].clone();
    assert_eq!(smb_get(&mut c, &name, data.len()), Err(IO_ERROR), "READ when the data read fails");
    assert!(smb_get(&mut c, &name, data.len()).unwrap() == data, "the next READ");

    // 4. The destager's chunk writes and syncs fail: the WRITE was already
    //    durable in the log and is acknowledged; reads serve it from the
    //    log meanwhile; the destager retries until it gets through.
    for (point, i) in [("chunk-write", 5), ("chunk-sync", 6)] {
        let before = stat(&d, "chunk_writes");
        let errors_before = d.log_text().matches(&format!("{point}: Input/output error")).count();
        d.ok(&["fault", point, "--count", "3"]);
        let name = format!("{point}.bin");
        let data = pattern(i, 2 * MIB + 17);
        assert_eq!(smb_put(&mut c, &name, &data), NtStatus::SUCCESS, "{name}: acknowledged from the log");
        assert!(smb_get(&mut c, &name, data.len()).unwrap() == data, "{name} read while destaging fails");
        stored.push((name.clone(), data));
        let deadline = Instant::now() + Duration::from_secs(60);
        while d.log_text().matches(&format!("{point}: Input/output error")).count() < errors_before + 3
            || stat(&d, "chunk_writes") == before
        {
            assert!(Instant::now() < deadline, "{point}: the destager never got through; log:\n{}", d.log_text());
            std::thread::sleep(Duration::from_millis(200));
        }
        settle(&d);
        check(&mut c, &mut n, &stored, &nfs_bytes, point);
    }
    assert!(d.ok(&["fsck"]).contains("file system is consistent"), "fsck after data-path errors");

    // 4b. While the destager cannot get through, what it still has to do
    //     shows as the queue (stats and /metrics); it empties once the
    //     chunk writes work again.
    assert_eq!(stat(&d, "destage_queue"), 0, "settled");
    d.ok(&["fault", "chunk-write", "--count", "1000000"]);
    let data = pattern(7, 300_000);
    assert_eq!(smb_put(&mut c, "queued.bin", &data), NtStatus::SUCCESS);
    std::thread::sleep(Duration::from_millis(500));
    let queued = stat(&d, "destage_queue");
    assert!(queued > 0, "the file's records wait in the queue");
    assert_eq!(common::cluster::metric(&d, "duet_destage_queue_records"), queued, "/metrics shows the queue");
    assert!(d.ok(&["stats"]).contains(&format!("{queued} queued")), "duetctl stats shows the queue");
    d.ok(&["fault", "chunk-write", "--count", "0"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while stat(&d, "destage_queue") > 0 {
        assert!(Instant::now() < deadline, "the queue never emptied");
        std::thread::sleep(Duration::from_millis(200));
    }
    stored.push(("queued.bin".into(), data));
    check(&mut c, &mut n, &stored, &nfs_bytes, "after the queue emptied");

    // 5a. Metadata reads fail: a request that only reads gets the I/O
    //     error, never "not found"; a change whose apply meets a read
    //     error is not applied from a wrong view: the store stops changes
    //     until a restart, which applies it again from the raft log.
    d.ok(&["fault", "meta-read", "--count", "100000"]);
    let (name, data) = stored[1].clone();
    assert_eq!(smb_get(&mut c, &name, data.len()), Err(IO_ERROR), "open while metadata reads fail");
    assert_eq!(n.lookup3(&root, b"nfs-before"), Err(Nfsstat3::IO), "LOOKUP while metadata reads fail");
    assert_eq!(n.create3(&root, "meta-read-nfs"), Err(Nfsstat3::IO), "CREATE while metadata reads fail");
    d.ok(&["fault", "meta-read", "--count", "0"]);
    assert_unhealthy(&d, "a read error while applying stops changes");
    assert_eq!(c.create("refused.bin").err(), Some(IO_ERROR), "changes refused after a read error while applying");
    check(&mut c, &mut n, &stored, &nfs_bytes, "reads after a metadata read error");
    drop((c, n));
    let (mut c, mut n, root) = restart_and_reconnect(&mut d);
    check(&mut c, &mut n, &stored, &nfs_bytes, "after a restart from a read error");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"), "fsck after a metadata read error");

    // 5. The metadata store's synced write fails: that CREATE gets the
    //    I/O error, then every change is refused (status says so), reads
    //    go on; a restart recovers and keeps everything acknowledged.
    d.ok(&["fault", "meta-sync"]);
    assert_eq!(smb_put(&mut c, "meta.bin", &pattern(7, 1000)), IO_ERROR, "CREATE when the raft log write fails");
    assert_unhealthy(&d, "status shows the failed metadata store");
    assert_eq!(c.create("refused.bin").err(), Some(IO_ERROR), "changes refused after a metadata write error");
    assert_eq!(n.create3(&root, "refused-nfs"), Err(Nfsstat3::IO));
    check(&mut c, &mut n, &stored, &nfs_bytes, "reads after a metadata write error");
    assert!(d.log_text().contains("restart duetd"), "the log tells the admin what to do");
    drop((c, n));
    let (mut c, mut n, _) = restart_and_reconnect(&mut d);
    check(&mut c, &mut n, &stored, &nfs_bytes, "after restart");
    assert_eq!(smb_put(&mut c, "after.bin", &pattern(8, MIB)), NtStatus::SUCCESS, "changes work again");
    stored.push(("after.bin".into(), pattern(8, MIB)));
    assert!(d.ok(&["fsck"]).contains("file system is consistent"), "fsck after restart");

    // Everything acknowledged survives a SIGKILL.
    drop((c, n));
    d.kill_and_restart();
    let (mut c, mut n, _) = connect(&d);
    check(&mut c, &mut n, &stored, &nfs_bytes, "after SIGKILL");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"), "fsck after SIGKILL");
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")), "{}", d.log_text());
}

/// `duetctl status` says FAILED and exits 7 (unhealthy), for health checks.
fn assert_unhealthy(d: &Daemon, why: &str) {
    let o = d.ctl(&["status"]);
    assert_eq!(o.status.code(), Some(7), "{why}: duetctl status exits 7 when unhealthy");
    assert!(String::from_utf8_lossy(&o.stdout).contains("FAILED"), "{why}");
}
