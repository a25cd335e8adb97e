//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`) and the
//! crash regressions (`fuzz/regressions/<target>/`) through the same
//! harness functions the cargo-fuzz targets call, on the stable toolchain,
//! so CI exercises them on every run. The harness is `fuzz/src/lib.rs`,
//! included here as a module (it uses only duet crates and std).
//!
//! Each regression also has a named test below that says what the input
//! used to do and what the protocol answers now.

#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    out.sort();
    out
}

fn replay(kind: &str, target: &str) -> usize {
    let dir = fuzz_dir().join(kind).join(target);
    let inputs = files(&dir);
    for p in &inputs {
        // A running fuzzer may have just reduced this entry away.
        let Ok(data) = std::fs::read(p) else { continue };
        let r = std::panic::catch_unwind(|| harness::run(target, &data));
        assert!(r.is_ok(), "{target}: {} panics", p.display());
    }
    inputs.len()
}

#[test]
fn every_corpus_input_runs_clean() {
    for target in harness::TARGETS {
        let n = replay("corpus", target);
        assert!(n >= 10, "{target}: only {n} corpus inputs committed");
    }
}

#[test]
fn every_regression_input_runs_clean() {
    // regressions/<target>/<input>: every directory names a target.
    let Ok(rd) = std::fs::read_dir(fuzz_dir().join("regressions")) else {
        return;
    };
    for d in rd {
        let d = d.unwrap().path();
        if !d.is_dir() {
            continue;
        }
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        assert!(harness::TARGETS.contains(&name.as_str()), "regressions/{name}: no such target");
        assert!(replay("regressions", &name) > 0, "regressions/{name} is empty");
    }
}

#[test]
fn harness_setups_reach_the_command_handlers() {
    // The stateful harnesses' own logons and sessions must work, or the
    // fuzzers spend their time on a connection that refuses everything.
    use harness::{smb_mode, nfs_mode};
    for setup in [smb_mode::SETUP_NEGOTIATED, smb_mode::SETUP_TREE, smb_mode::SETUP_TREE_21] {
        harness::smb2_conn(&[setup | smb_mode::REWRITE_IDS | smb_mode::SIGN]);
        // With signing and encryption required, the harness's own
        // TREE_CONNECT must be sealed (regressions/smb2_conn/harness-strict-setup).
        harness::smb2_conn(&[setup | smb_mode::STRICT]);
    }
    harness::nfs4_session(&[nfs_mode::SESSION]);
    let mut h = harness::NfsHarness::new();
    let (records, id) = h.session();
    assert_eq!(records.len(), 2);
    assert!(id.is_some());
}

// ---- named regressions ---------------------------------------------------

fn regression(target: &str, name: &str) -> Vec<u8> {
    std::fs::read(fuzz_dir().join("regressions").join(target).join(name)).unwrap()
}

#[test]
fn deferred_multi_batch_compound_is_answered() {
    // nfs_mode SESSION|DEFER: a COMPOUND whose first batch's result submits
    // a second batch. The harness used to complete deferred batches once,
    // leaving the second one pending ("every batch answered" failed). The
    // server answers once both ran.
    let data = regression("nfs4_session", "harness-deferred-second-batch");
    assert_eq!(data[0], harness::nfs_mode::SESSION | harness::nfs_mode::DEFER);
    harness::nfs4_session(&data);
}

#[test]
fn strict_server_setup_is_sealed() {
    // smb_mode STRICT|SETUP_TREE: with encryption required, an unsealed
    // TREE_CONNECT is refused; the harness now seals its own.
    let data = regression("smb2_conn", "harness-strict-setup");
    assert_eq!(data[0] & (harness::smb_mode::STRICT | harness::smb_mode::SETUP_MASK), harness::smb_mode::STRICT | harness::smb_mode::SETUP_TREE);
    harness::smb2_conn(&data);
}
