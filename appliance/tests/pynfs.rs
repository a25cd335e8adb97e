//! pynfs, the NFSv4 conformance suite NFS servers are measured with
//! (`../shared/conformance/pynfs-run`, upstream source in `pynfs-src/`),
//! against a real duetd: NFSv4.1, the tests flagged `all`. Every failure
//! must be listed, with its reason, in `conformance/pynfs.known-failures`;
//! a listed test that passes is reported ("xpass") so that the list
//! shrinks. pynfs-run builds its copy under `$PYNFS_DIR` (default
//! `/tmp/pynfs-build`) once; it needs python3 with ply
//! (`scripts/install-deps.sh`). Some tests sleep one or two lease periods,
//! so the daemon runs with a 15 s lease (`[nfs] lease_secs`).

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use common::{repo_root, Daemon};

/// `CODE # reason` lines of the known-failures file.
fn known_failures() -> BTreeMap<String, String> {
    let path = repo_root().join("conformance/pynfs.known-failures");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut known = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (code, reason) = line.split_once('#').unwrap_or((line, ""));
        let (code, reason) = (code.trim(), reason.trim());
        assert!(!reason.is_empty(), "{}: {code} has no reason", path.display());
        assert!(!code.contains(' '), "{}: one code a line: {line}", path.display());
        known.insert(code.to_string(), reason.to_string());
    }
    known
}

#[test]
fn pynfs_nfs41_all() {
    let harness = repo_root().join("../shared/conformance/pynfs-run");
    assert!(
        harness.exists(),
        "the conformance harness is missing: {} (CI clones shared/ beside the repository)",
        harness.display()
    );
    let known = known_failures();
    let tmp = tempfile::tempdir().unwrap();
    // The default share `public` is exported to everyone (root squashed:
    // pynfs sends uid 0, which works as nobody in the world-writable root).
    // A short lease: pynfs tests that wait out a lease (courtesy, expiry)
    // sleep its multiples, and 90 s ones made the run take ten minutes.
    let mut d = Daemon::start_config(tmp.path(), "", "portmap = false\nlease_secs = 15");
    let t0 = Instant::now();
    let out = Command::new("bash")
        .arg(&harness)
        .arg(format!("127.0.0.1:{}/public", d.nfs_port))
        .args(["1", "all"])
        .output()
        .expect("bash runs pynfs-run");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}\npynfs took {:.0} s", t0.elapsed().as_secs_f64());
    let summary = text
        .lines()
        .rev()
        .find(|l| l.ends_with(" failed") && l.contains(" passed, "))
        .unwrap_or_else(|| panic!("pynfs-run printed no summary:\n{text}"));
    let passed: usize = summary.split_whitespace().next().unwrap().parse().unwrap();
    // "CODE   st_file.testName   : FAILURE" per failed test.
    let failed: Vec<String> = text
        .lines()
        .filter(|l| l.trim_end().ends_with(": FAILURE"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(
        text.contains("Command line asked for"),
        "pynfs did not run to its end:\n{text}"
    );
    let unknown: Vec<&String> = failed.iter().filter(|c| !known.contains_key(*c)).collect();
    let xpass: Vec<&String> = known.keys().filter(|c| !failed.contains(*c)).collect();
    for c in &xpass {
        println!("xpass {c} (listed as a known failure: {})", known[*c]);
    }
    println!("pynfs: {passed} passed, {} failed ({} known), {} xpass", failed.len(), failed.len() - unknown.len(), xpass.len());
    assert!(
        unknown.is_empty(),
        "pynfs tests failed that conformance/pynfs.known-failures does not list: {unknown:?}\n{summary}"
    );
    assert!(d.alive(), "duetd exited during the run; log:\n{}", d.log_text());
    assert!(!d.log_text().contains("panicked"), "duetd panicked:\n{}", d.log_text());
}
