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
    // The directory is committed; its absence is a broken checkout, not a pass.
    let rd = std::fs::read_dir(fuzz_dir().join("regressions"))
        .unwrap_or_else(|e| panic!("fuzz/regressions is missing: {e}"));
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
    // nfs4_callback starts from a read delegation being recalled: the
    // CB_RECALL sent on the holder's back connection, in every mode.
    for mode in 0..16u8 {
        let s = harness::CbSetup::new(mode).unwrap_or_else(|| panic!("nfs4_callback setup, mode {mode}"));
        assert_eq!(s.h.callbacks.len(), 1, "one CB_RECALL in flight, mode {mode}");
        assert_eq!(s.h.callbacks[0].0, harness::CB_CONN);
        assert_eq!(s.delegations.len(), if mode & harness::cb_mode::TWO_RECALLS != 0 { 2 } else { 1 });
    }
    // No input: the holder never answers, the recall revokes the
    // delegation after the lease period and the rival's OPEN goes through.
    harness::nfs4_callback(&[0]);
    let mut h = harness::NfsHarness::new();
    let (records, id) = h.session();
    assert_eq!(records.len(), 2);
    assert!(id.is_some());
}

// ---- a short fuzzing run on stable ----------------------------------------

/// xorshift64*: the mutator's randomness (no dependency, reproducible).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One libFuzzer-style mutation of `input`, sometimes spliced with `other`.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let n = v.len();
        match rng.below(8) {
            0 if n > 0 => {
                let i = rng.below(n);
                v[i] ^= 1 << rng.below(8);
            }
            1 if n > 0 => {
                let i = rng.below(n);
                v[i] = [0, 0xff, 0x7f, 0x80, 1][rng.below(5)];
            }
            2 if n > 0 => v.truncate(rng.below(n)),
            3 if n > 0 => {
                let i = rng.below(n);
                let len = rng.below(n - i).min(64);
                let chunk = v[i..i + len].to_vec();
                let at = rng.below(n);
                v.splice(at..at, chunk);
            }
            4 if n >= 4 => {
                // An interesting 32-bit value (lengths, counts, offsets).
                let i = rng.below(n - 3);
                let x: u32 = [0, 1, 0xffff_ffff, 0x8000_0000, 0x7fff_ffff, 0x10000, 4096][rng.below(7)];
                let b = if rng.below(2) == 0 { x.to_le_bytes() } else { x.to_be_bytes() };
                v[i..i + 4].copy_from_slice(&b);
            }
            5 if !other.is_empty() => {
                let cut = rng.below(v.len());
                let from = rng.below(other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            6 if n > 1 => {
                let i = rng.below(n);
                let len = rng.below(n - i).min(16);
                v.drain(i..i + len);
            }
            _ => {
                let at = rng.below(v.len() + 1);
                v.insert(at, rng.next() as u8);
            }
        }
    }
    v
}

/// What CI runs of the fuzzers: every target's corpus inputs, mutated, for
/// a few seconds each on the stable toolchain (the long runs use
/// cargo-fuzz: `scripts/fuzz.sh SECONDS`). The seed is printed;
/// `DUET_FUZZ_SEED` chooses another, and a failing input is written to the
/// temporary directory for `fuzz/regressions/`.
#[test]
fn short_mutation_run_of_every_target() {
    // A fixed seed by default, so that CI stays reproducible; set
    // DUET_FUZZ_SEED (any non-zero number) to explore other inputs.
    let seed = std::env::var("DUET_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).filter(|s| *s != 0).unwrap_or(0x5eed_d0e7_u64);
    let secs: f64 = std::env::var("DUET_FUZZ_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(3.0);
    println!("mutation run: seed {seed} (DUET_FUZZ_SEED), {secs} s per target (DUET_FUZZ_SECS)");
    let mut rng = Rng(seed);
    for target in harness::TARGETS {
        let inputs: Vec<Vec<u8>> = files(&fuzz_dir().join("corpus").join(target))
            .iter()
            .filter_map(|p| std::fs::read(p).ok())
            .collect();
        assert!(!inputs.is_empty(), "{target}: no corpus");
        let t0 = std::time::Instant::now();
        let mut runs = 0u64;
        while t0.elapsed().as_secs_f64() < secs {
            let a = &inputs[rng.below(inputs.len())];
            let b = &inputs[rng.below(inputs.len())];
            let data = mutate(&mut rng, a, b);
            let r = std::panic::catch_unwind(|| harness::run(target, &data));
            if r.is_err() {
                let path = std::env::temp_dir().join(format!("fuzz-{target}-{seed}-{runs}"));
                std::fs::write(&path, &data).unwrap();
                panic!("{target}: a mutated input panics (seed {seed}); it is in {}", path.display());
            }
            runs += 1;
        }
        println!("{target}: {runs} mutated inputs, no panic");
        assert!(runs > 0);
    }
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
