//! Crash safety end to end, through the protocols: an SMB client writing
//! with WRITE_THROUGH and an NFSv3 client writing FILE_SYNC, while duetd is
//! killed with SIGKILL at a random moment, 30 times. After each restart the
//! clients reconnect (new TCP connection, logon / MNT), every write that was
//! acknowledged reads back byte for byte, and `duetctl fsck` is clean.
//!
//! Each write has its own region (file, offset), so what is expected is
//! exact; a write in flight at the kill may or may not be there. Writes are
//! a mix of small ones (inline in the raft entry) and 8 KiB ones (through
//! the write log). `DUET_CRASH_SEED` picks other moments.
//!
//! A third client speaks NFSv4.1: it holds an open of its own file across
//! every kill; after each restart it must reclaim that open within the
//! grace period (OPEN CLAIM_PREVIOUS, then RECLAIM_COMPLETE, RFC 8881
//! 8.4.2) before anything else runs, and then writes FILE_SYNC with the
//! reclaimed stateid, acknowledged writes checked like the others.

mod clients;
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::Opaque;
use duet_protocols::smb2::status::NtStatus;

const V4_OWNER: &[u8] = b"crash-clients-v41";
const V4_FILE: &str = "v41.bin";

/// The NFSv4.1 client after a restart: a new session for the same owner,
/// the open reclaimed (CLAIM_PREVIOUS), RECLAIM_COMPLETE.
fn v41_reclaim(port: u16, fh: &[u8], run: u64) -> (Nfs, Sess, Stateid4) {
    let mut c = Nfs::connect(port).as_user(2000, 2000);
    let mut s = session_to_reclaim(&mut c, V4_OWNER, 1 << 20, 64);
    let seq = s.sequence();
    let rep = c
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
            ArgOp4::Open(Open4Args {
                seqid: 0,
                share_access: share::ACCESS_BOTH,
                share_deny: share::DENY_NONE,
                owner: StateOwner4 { clientid: s.clientid, owner: Opaque(b"writer") },
                openhow: OpenFlag4::NoCreate,
                claim: OpenClaim4::Previous(OpenDelegationType4::None),
            }),
        ])
        .expect("reclaim reply");
    let r = res4(&rep);
    let sid = match r.results.get(2) {
        Some(ResOp4::Open(Nfs4Res::Ok(o))) => o.stateid,
        _ => panic!("run {run}: the NFSv4.1 client could not reclaim its open: {:?}", r.status),
    };
    let seq = s.sequence();
    let rep = c.v4(vec![seq, ArgOp4::ReclaimComplete(ReclaimComplete4Args { one_fs: false })]).unwrap();
    assert_eq!(res4(&rep).status, Nfsstat4::OK, "run {run}: RECLAIM_COMPLETE");
    (c, s, sid)
}

const KILLS: u64 = 30;
const SLOT: u64 = 8192;

/// One acknowledged write.
#[derive(Clone)]
struct Ack {
    file: String,
    offset: u64,
    data: Vec<u8>,
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn sigkill_under_smb_and_nfs_clients_loses_no_acknowledged_write() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());
    d.ok(&[
        "user",
        "add",
        "bench",
        "--password",
        "benchpw",
        "--uid",
        "2000",
        "--gid",
        "2000",
    ]);
    std::thread::sleep(Duration::from_millis(2500));
    let mut seed = std::env::var("DUET_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xc0ffee_u64);
    eprintln!("crash_clients seed {seed}");
    let acks: Arc<Mutex<Vec<Ack>>> = Arc::new(Mutex::new(Vec::new()));
    // The NFSv4.1 client opens its file, and duetd records it as a client
    // holding state (the list it reads back after a restart).
    let mut v4 = Nfs::connect(d.nfs_port).as_user(2000, 2000);
    let root = v4.mount("/public").unwrap();
    let mut s4 = session(&mut v4, V4_OWNER, 1 << 20, 64);
    let (mut sid4, v4_fh) = open4_fh(&mut v4, &mut s4, &root, b"writer", V4_FILE).expect("NFSv4.1 OPEN");
    let clients_file = d.data.join("nfs4-clients");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&clients_file).map_or(true, |t| t.trim().is_empty()) {
        assert!(Instant::now() < deadline, "duetd never recorded the NFSv4.1 client ({})", clients_file.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut v4_client = Some((v4, s4));
    let v4_slots = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    for run in 1..=KILLS {
        // After a restart the v4.1 client reclaims first (new opens would
        // get NFS4ERR_GRACE until it has).
        let (mut v4, mut s4) = match v4_client.take() {
            Some(x) => x,
            None => {
                let (c, s, sid) = v41_reclaim(d.nfs_port, &v4_fh, run);
                sid4 = sid;
                (c, s)
            }
        };
        let delay = 150 + next(&mut seed) % 900;
        let (smb, nfs) = (d.smb_port, d.nfs_port);
        // SMB writer: WRITE_THROUGH, acknowledged = STATUS_SUCCESS.
        let a = acks.clone();
        let run_seed = next(&mut seed);
        // A writer ends when the kill cuts it off, wherever that happens (the
        // helpers panic on a closed connection): only acks count.
        let smb_writer = std::thread::spawn(move || {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut c = Smb::logged_on(smb, "bench", "benchpw", "public");
                let name = format!("smb-{run:02}.bin");
                let Ok(f) = c.create(&name) else { return };
                for i in 0u64.. {
                    let len = if i % 3 == 0 {
                        8192
                    } else {
                        1 + (run_seed.wrapping_mul(i + 1) % 3000) as usize
                    };
                    let data = bytes(run_seed ^ (i << 20), len);
                    let off = i * SLOT;
                    let Some(r) = ({
                        let w = duet_protocols::smb2::write::WriteRequest {
                            offset: off,
                            file_id: f,
                            channel: 0,
                            remaining_bytes: 0,
                            flags: duet_protocols::smb2::write::WriteRequest::WRITE_THROUGH,
                            write_channel_info: &[],
                            data: &data,
                        };
                        c.try_call(
                            duet_protocols::smb2::message::Request::Write(w),
                            duet_protocols::smb2::header::Command::WRITE,
                        )
                    }) else {
                        return; // killed
                    };
                    if r.status() != NtStatus::SUCCESS {
                        return;
                    }
                    a.lock().unwrap().push(Ack {
                        file: name.clone(),
                        offset: off,
                        data,
                    });
                }
            }));
        });
        // NFSv3 writer: FILE_SYNC, acknowledged = NFS3_OK with committed
        // FILE_SYNC (checked in write3).
        let a = acks.clone();
        let run_seed = next(&mut seed);
        let nfs_writer = std::thread::spawn(move || {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut n = Nfs::connect(nfs).as_user(2000, 2000);
                let Ok(root) = n.mount("/public") else { return };
                let name = format!("nfs-{run:02}.bin");
                let Ok(fh) = n.create3(&root, &name) else {
                    return;
                };
                for i in 0u64.. {
                    let len = if i % 3 == 1 {
                        8192
                    } else {
                        1 + (run_seed.wrapping_mul(i + 1) % 3000) as usize
                    };
                    let data = bytes(run_seed ^ (i << 20), len);
                    let off = i * SLOT;
                    let Some(rep) = ({
                        let args = duet_protocols::nfs::nfs3::Nfs3Args::Write(
                            duet_protocols::nfs::nfs3::Write3Args {
                                file: duet_protocols::nfs::xdr::Opaque(&fh),
                                offset: off,
                                count: data.len() as u32,
                                stable: duet_protocols::nfs::nfs3::StableHow::FileSync,
                                data: duet_protocols::nfs::xdr::Opaque(&data),
                            },
                        );
                        let mut w = duet_protocols::nfs::xdr::XdrWriter::new();
                        duet_protocols::nfs::xdr::XdrEncode::encode(&args, &mut w);
                        n.try_call(
                            duet_protocols::nfs::rpc::PROGRAM_NFS,
                            3,
                            args.proc_(),
                            &w.into_inner(),
                        )
                    }) else {
                        return; // killed
                    };
                    use duet_protocols::nfs::nfs3::{Nfs3Res, Nfs3Results, StableHow};
                    match results3(duet_protocols::nfs::nfs3::proc3::WRITE, &rep) {
                        Nfs3Results::Write(Nfs3Res::Ok(ok))
                            if ok.count as usize == data.len()
                                && ok.committed == StableHow::FileSync => {}
                        _ => return,
                    }
                    a.lock().unwrap().push(Ack {
                        file: name.clone(),
                        offset: off,
                        data,
                    });
                }
            }));
        });
        // NFSv4.1 writer: WRITE FILE_SYNC with the (reclaimed) open stateid.
        let a = acks.clone();
        let run_seed = next(&mut seed);
        let (fh, sid, slots) = (v4_fh.clone(), sid4, v4_slots.clone());
        let v4_before = acks.lock().unwrap().iter().filter(|a| a.file == V4_FILE).count();
        let v4_writer = std::thread::spawn(move || {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                for i in 0u64.. {
                    let len = if i % 3 == 2 { 8192 } else { 1 + (run_seed.wrapping_mul(i + 1) % 3000) as usize };
                    let data = bytes(run_seed ^ (i << 20), len);
                    // One growing file, each write in a slot of its own
                    // (a write cut off by the kill just leaves its slot).
                    let off = slots.fetch_add(1, std::sync::atomic::Ordering::Relaxed) * SLOT;
                    let seq = s4.sequence();
                    let Some(rep) = v4.v4(vec![
                        seq,
                        ArgOp4::PutFh(PutFh4Args { object: Opaque(&fh) }),
                        ArgOp4::Write(Write4Args { stateid: sid, offset: off, stable: StableHow4::FileSync, data: Opaque(&data) }),
                    ]) else {
                        return; // killed
                    };
                    let r = res4(&rep);
                    match r.results.get(2) {
                        Some(ResOp4::Write(Nfs4Res::Ok(w))) if w.count as usize == data.len() && w.committed == StableHow4::FileSync => {}
                        _ => return,
                    }
                    a.lock().unwrap().push(Ack { file: V4_FILE.to_string(), offset: off, data });
                }
            }));
        });
        std::thread::sleep(Duration::from_millis(delay));
        d.kill_and_restart();
        smb_writer.join().unwrap();
        nfs_writer.join().unwrap();
        v4_writer.join().unwrap();

        // Clients reconnect; every acknowledged write is there.
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            d.alive(),
            "run {run}: duetd died after the restart:\n{}",
            d.log_text()
        );
        let acks_now = acks.lock().unwrap().clone();
        let s = connect_from(ip(1), d.nfs_port).unwrap_or_else(|e| {
            panic!(
                "run {run}: NFS connect after the restart: {e} (alive: {}); log:\n{}",
                d.alive(),
                d.log_text()
            )
        });
        let mut n = Nfs {
            s,
            xid: 1,
            uid: 2000,
            gid: 2000,
        };
        let root = n
            .mount("/public")
            .expect("NFS clients mount again after the restart");
        let mut files: std::collections::BTreeMap<&str, Vec<u8>> = Default::default();
        for a in &acks_now {
            if !files.contains_key(a.file.as_str()) {
                let fh = n
                    .lookup3(&root, a.file.as_bytes())
                    .unwrap_or_else(|e| panic!("run {run}: {} lost: {e:?}", a.file));
                files.insert(&a.file, n.read3_all(&fh).unwrap());
            }
            let f = &files[a.file.as_str()];
            let (o, l) = (a.offset as usize, a.data.len());
            assert!(
                f.len() >= o + l && f[o..o + l] == a.data[..],
                "run {run}: an acknowledged write of {l} bytes at {o} in {} is not there (file has {} bytes)",
                a.file,
                f.len()
            );
        }
        let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
        let last = format!("smb-{run:02}.bin");
        if let Some(a) = acks_now.iter().rev().find(|a| a.file == last) {
            let f = c
                .open_read(&last)
                .expect("SMB clients open again after the restart");
            let got = c.read(f, a.offset, a.data.len() as u32).unwrap();
            assert_eq!(
                got, a.data,
                "run {run}: the last acknowledged SMB write, read over SMB"
            );
            c.close(f);
        }
        let fsck = d.ok(&["fsck"]);
        assert!(
            fsck.contains("file system is consistent"),
            "run {run}: fsck:\n{fsck}"
        );
        let smb_acks = acks_now.iter().filter(|a| a.file == last).count();
        let nfs_acks = acks_now.iter().filter(|a| a.file == format!("nfs-{run:02}.bin")).count();
        let v4_acks = acks_now.iter().filter(|a| a.file == V4_FILE).count() - v4_before;
        eprintln!(
            "run {run}: killed after {delay} ms; acknowledged {smb_acks} SMB + {nfs_acks} NFSv3 + {v4_acks} NFSv4.1 writes; {} verified in all",
            acks_now.len()
        );
    }
    let total = acks.lock().unwrap().len();
    eprintln!(
        "{KILLS} kills, {total} acknowledged writes verified after each, {:?}",
        started.elapsed()
    );
    assert!(
        total > 300,
        "the clients hardly wrote: {total} acknowledged writes"
    );
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}
