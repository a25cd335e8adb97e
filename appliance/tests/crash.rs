//! Crash consistency: a process running many concurrent batches is killed
//! with SIGKILL at random moments, 20 times; after each kill the engine
//! restarts and every acknowledged batch must be there, the batch in flight
//! either wholly applied or not at all, and fsck clean.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const KILLS: u64 = 20;

#[test]
fn sigkill_at_random_points_loses_nothing_acknowledged() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log = tmp.path().join("acks.log");
    let bin = env!("CARGO_BIN_EXE_duet-torture");
    let mut seed = std::env::var("DUET_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_u64);
    eprintln!("crash test seed {seed}");
    let mut total_acks = 0;
    for run in 1..=KILLS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut child = Command::new(bin)
            .args(["load", data.to_str().unwrap(), &run.to_string()])
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
    assert!(total_acks > 100, "the workload hardly ran: {total_acks} acknowledged batches");
}
