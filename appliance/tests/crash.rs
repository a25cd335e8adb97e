//! Crash consistency: a process running many concurrent batches is killed
//! with SIGKILL at random moments, 20 times; after each kill the engine
//! restarts and every acknowledged batch must be there, the batch in flight
//! either wholly applied or not at all, and fsck clean.
//!
//! The same for batches of a `protocol` share (`DUET_TORTURE_LAZY=1`:
//! lazy groups, a synced flush every fifth batch), 6 kills
//! (`DUET_CRASH_LAZY_KILLS=N` for a longer run); with 1 MiB write-log
//! segments whose files are reused, 5 kills; and a real duetd with a
//! `protocol` share under smbclient `mput`, SIGKILLed while it writes:
//! every file a finished `mput` put is whole, the others whole or absent,
//! fsck clean (docs/durability.md).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const KILLS: u64 = 20;

#[test]
fn sigkill_at_random_points_loses_nothing_acknowledged() {
    torture(KILLS, false);
}

#[test]
fn sigkill_with_lazy_protocol_batches_leaves_whole_batches_and_fsck_clean() {
    let kills = std::env::var("DUET_CRASH_LAZY_KILLS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    torture(kills, true);
}

/// The same with a 64 KiB memtable: the metadata store switches its
/// write-ahead log every few hundred batches and, with `[durability]
/// wal_recycle` (the default), writes into recycled WAL files whose old
/// records lie past the new ones; recovery after each kill must stop at
/// the live records and lose nothing acknowledged. Fails unless RocksDB's
/// log says it reused a file.
#[test]
fn sigkill_with_recycled_wal_files_loses_nothing_acknowledged() {
    let (data, _) = torture_with(8, false, Some(64), None);
    let mut reused = 0;
    for e in std::fs::read_dir(data.path().join("data/metadata")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("LOG") {
            reused += std::fs::read_to_string(e.path()).unwrap_or_default().matches("from recycle list").count();
        }
    }
    eprintln!("RocksDB reused a recycled WAL file {reused} times");
    assert!(reused > 0, "no recycled WAL file was used: the test did not test recycling");
}

/// The same with 1 MiB write-log segments: they roll over, are released
/// and their files reused (a spare renamed to the new sequence, holding
/// an earlier life's records after the new ones) while the kills come;
/// recovery must end each reused segment at its own records and lose
/// nothing acknowledged. Fails unless some kill left a segment file
/// holding an earlier life's records (a reused file was being written).
#[test]
fn sigkill_while_writing_into_reused_log_segments_loses_nothing_acknowledged() {
    let (_, reused) = torture_with(5, false, None, Some(1));
    eprintln!("{reused} kills found a reused write-log segment");
    assert!(reused > 0, "no kill met a reused segment file: the test did not test segment reuse");
}

fn torture(kills: u64, lazy: bool) {
    torture_with(kills, lazy, None, None);
}

/// Whether a write-log segment file in `wal` holds a record of an earlier
/// life (bound to a lower segment sequence than its name): it was reused.
fn holds_an_earlier_life(wal: &std::path::Path) -> bool {
    std::fs::read_dir(wal).into_iter().flatten().flatten().any(|e| {
        let p = e.path();
        let Some(seq) = p
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|_| p.extension().is_some_and(|x| x == "log"))
            .and_then(|s| u64::from_str_radix(s, 16).ok())
        else {
            return false;
        };
        let b = std::fs::read(&p).unwrap_or_default();
        b.chunks(duet_cache::ALIGN as usize)
            .filter_map(|c| duet_cache::decode_header(c, u64::MAX))
            .any(|h| h.bound.is_some_and(|b| b.segment < seq))
    })
}

/// Runs `kills` load runs, each SIGKILLed at a random moment and verified;
/// returns the data directory and how many kills left a reused write-log
/// segment file.
fn torture_with(kills: u64, lazy: bool, memtable_kib: Option<u64>, segment_mib: Option<u64>) -> (tempfile::TempDir, u64) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log = tmp.path().join("acks.log");
    let bin = env!("CARGO_BIN_EXE_duet-torture");
    let mut seed = std::env::var("DUET_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_u64);
    eprintln!("crash test seed {seed}");
    let mut total_acks = 0;
    let mut reused = 0;
    for run in 1..=kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut child = Command::new(bin)
            .args(["load", data.to_str().unwrap(), &run.to_string()])
            .env("DUET_TORTURE_LAZY", if lazy { "1" } else { "0" })
            .env("DUET_TORTURE_MEMTABLE_KIB", memtable_kib.map(|k| k.to_string()).unwrap_or_default())
            .env("DUET_TORTURE_SEGMENT_MIB", segment_mib.map(|k| k.to_string()).unwrap_or_default())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = std::io::Read::read_to_end(&mut out, &mut buf);
            buf
        });
        // Kill after 300..1800 ms: startup, recovery, the log, destaging and
        // commits are all reached at different runs.
        let delay = 300 + seed % 1500;
        std::thread::sleep(Duration::from_millis(delay));
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGKILL);
        }
        let status = child.wait().unwrap();
        assert!(!status.success(), "load exited by itself: {status:?}");
        if holds_an_earlier_life(&data.join("wal")) {
            reused += 1;
        }
        let bytes = reader.join().unwrap();
        let acks = bytes.split(|b| *b == b'\n').filter(|l| l.starts_with(b"ACK ")).count();
        total_acks += acks;
        {
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
            writeln!(f, "RUN {run}").unwrap();
            // Only whole lines: the last one may be torn by the kill.
            let end = bytes.iter().rposition(|b| *b == b'\n').map(|p| p + 1).unwrap_or(0);
            f.write_all(&bytes[..end]).unwrap();
        }
        let v = Command::new(bin).args(["verify", data.to_str().unwrap(), log.to_str().unwrap()]).output().unwrap();
        let text = String::from_utf8_lossy(&v.stdout);
        assert!(v.status.success(), "run {run}: verification failed:\n{text}\n{}", String::from_utf8_lossy(&v.stderr));
        // In-flight batches that landed become part of the expected state.
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        for l in text.lines().filter(|l| l.starts_with("APPLIED ")) {
            writeln!(f, "{l}").unwrap();
        }
        let summary = text.lines().find(|l| l.starts_with("verify: ")).unwrap_or("");
        eprintln!("run {run}: killed after {delay} ms, {acks} batches acknowledged; {summary}");
    }
    assert!(total_acks > 30 * kills as usize, "the workload hardly ran: {total_acks} acknowledged batches");
    (tmp, reused)
}

mod common;

/// smbclient in a directory of `local`, as user bench on `share`.
fn smbclient(port: u16, share: &str, local: &std::path::Path, cmds: &str) -> (bool, String) {
    let out = Command::new("smbclient")
        .arg(format!("//127.0.0.1/{share}"))
        .args(["-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3", "-c", cmds])
        .current_dir(local)
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && !text.contains("NT_STATUS_"), text)
}

fn file_bytes(name: &str, len: usize) -> Vec<u8> {
    let mut x = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Reads directory `dir` of `share` back (mget) and checks each file:
/// whole, or (unless `must_be_whole`) empty or absent. Returns how many
/// are whole.
fn check(port: u16, share: &str, tmp: &std::path::Path, files: &[(String, usize)], dir: &str, must_be_whole: bool) -> usize {
    let back = tmp.join(format!("back-{share}-{dir}"));
    std::fs::create_dir_all(&back).unwrap();
    let (ok, text) = smbclient(port, share, &back, &format!("cd {dir}; prompt; mget *"));
    assert!(ok || !must_be_whole, "mget {share}/{dir}:\n{text}");
    let mut whole = 0;
    for (name, len) in files {
        match std::fs::read(back.join(name)) {
            Ok(b) if b == file_bytes(name, *len) => whole += 1,
            Ok(b) if b.is_empty() && !must_be_whole => {}
            Ok(b) => panic!("{share}/{dir}/{name}: {} bytes that are not the file's {len} (neither whole nor empty)", b.len()),
            Err(_) => assert!(!must_be_whole, "{share}/{dir}/{name} is missing after a finished mput"),
        }
    }
    std::fs::remove_dir_all(&back).unwrap();
    whole
}

/// A real duetd whose share is of durability `protocol`, SIGKILLed while
/// smbclient `mput`s (CREATE, WRITE, CLOSE per file, none written
/// through: every change is answered before it is durable). After each
/// restart: every file of the `mput`s that finished before is whole;
/// of the one cut by the kill, each file is absent, empty (its CREATE
/// without its WRITE: a prefix of what the client did) or whole, never
/// anything else; `duetctl fsck` is clean.
///
/// With a snapshot and a writable clone present throughout (issue 15:
/// "the crash test keeps passing with a snapshot and a clone present"):
/// `base` is written, snapshot `s0` taken and cloned to `crashclone`;
/// every cut `mput` overwrites `base` (so the frozen layer keeps
/// before-images and shadows while the daemon is killed) and a finished
/// one writes into the clone. After each restart the clone's `base` (read
/// through the snapshot) and its own directories are whole, and fsck,
/// which checks layers, clones and their chunk references, is clean.
#[test]
fn protocol_share_sigkilled_under_smbclient_mput_keeps_files_whole_or_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = common::Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    d.ok(&["share", "modify", "public", "--durability", "protocol"]);
    let show = d.ok(&["share", "show", "public"]);
    assert!(show.contains("durability:           protocol"), "{show}");
    std::thread::sleep(Duration::from_millis(2500));
    let rounds: u64 = std::env::var("DUET_CRASH_SMB_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    // 150 files of 4 KiB (inline data) and 10 of 24 KiB (the write log).
    let mut files = Vec::new();
    for i in 0..160 {
        let name = format!("f{i:03}.bin");
        let len = if i % 16 == 15 { 24 * 1024 } else { 4096 };
        std::fs::write(local.join(&name), file_bytes(&name, len)).unwrap();
        files.push((name, len));
    }
    // The layers present throughout: `base`, its snapshot and a clone.
    let (ok, text) = smbclient(d.smb_port, "public", &local, "mkdir base; cd base; prompt; mput f*");
    assert!(ok, "mput base:\n{text}");
    d.ok(&["snapshot", "create", "public", "s0"]);
    d.ok(&["share", "clone", "public@s0", "crashclone"]);
    // The protocol executors see the new share at their next refresh (1 s).
    std::thread::sleep(Duration::from_millis(2500));
    let mut seed = std::env::var("DUET_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_u64);
    for round in 0..rounds {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let done = format!("done{round}");
        let (ok, text) = smbclient(d.smb_port, "public", &local, &format!("mkdir {done}; cd {done}; prompt; mput f*"));
        assert!(ok, "mput {done}:\n{text}");
        let (ok, text) = smbclient(d.smb_port, "crashclone", &local, &format!("mkdir {done}; cd {done}; prompt; mput f*"));
        assert!(ok, "mput crashclone/{done}:\n{text}");
        // A second mput, cut by SIGKILL after 100..700 ms: a new directory
        // in even rounds, over `base` (which the snapshot holds) in odd ones.
        let cut = if round % 2 == 0 { format!("cut{round}") } else { "base".to_string() };
        let child = Command::new("smbclient")
            .args(["//127.0.0.1/public", "-p", &d.smb_port.to_string(), "-U", "bench%benchpw", "-m", "SMB3"])
            .args(["-c", &if cut == "base" { "cd base; prompt; mput f*".to_string() } else { format!("mkdir {cut}; cd {cut}; prompt; mput f*") }])
            .current_dir(&local)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let delay = 100 + seed % 600;
        std::thread::sleep(Duration::from_millis(delay));
        d.kill_and_restart();
        let mut child = child;
        let _ = child.wait();
        for r in 0..=round {
            let dir = format!("done{r}");
            assert_eq!(check(d.smb_port, "public", tmp.path(), &files, &dir, true), files.len(), "round {round}: {dir}");
            assert_eq!(check(d.smb_port, "crashclone", tmp.path(), &files, &dir, true), files.len(), "round {round}: crashclone/{dir}");
        }
        // What the snapshot froze, read through the clone.
        assert_eq!(check(d.smb_port, "crashclone", tmp.path(), &files, "base", true), files.len(), "round {round}: crashclone/base");
        let whole = check(d.smb_port, "public", tmp.path(), &files, &cut, false);
        let fsck = d.ok(&["fsck"]);
        assert!(fsck.contains("file system is consistent"), "round {round}: fsck:\n{fsck}");
        eprintln!("round {round}: killed {delay} ms into an mput: {whole} of {} files whole, the rest empty or absent", files.len());
    }
}
