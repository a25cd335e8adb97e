//! Architecture Invariant checks over `cargo metadata`: glommio and RocksDB
//! stay out of the protocol crates, the file-system model, and the cores of
//! cluster and cache; and out of duet-client, which is async but runs on
//! whatever stream its caller hands it.

use std::collections::{BTreeSet, HashMap};

const SANS_IO: &[&str] = &["duet-protocols", "duet-fs", "duet-locks", "duet-cluster", "duet-cache", "duet-admin-api"];
/// Crates that do I/O only on streams they are given: no runtime either.
const RUNTIME_FREE: &[&str] = &["duet-client"];
const FORBIDDEN: &[&str] = &["glommio", "rocksdb", "librocksdb-sys", "tokio", "mio"];

/// The host's target triple, from `rustc -vV` (the rustc cargo uses).
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc).arg("-vV").output().expect("rustc -vV runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .trim()
        .to_string()
}

#[test]
fn sans_io_crates_do_not_reach_runtime_or_storage() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    // Only the packages this platform builds: a machine that has built the
    // workspace holds exactly those in its cargo cache (a Windows-only
    // dependency of clap never is), so `--offline` resolves without the
    // network on a fresh machine too.
    let host = host_triple();
    let out = std::process::Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--filter-platform", &host])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: HashMap<String, String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().to_string(), p["name"].as_str().unwrap().to_string()))
        .collect();
    // Normal (non-dev, non-build) edges of the resolved graph.
    let mut deps: HashMap<String, Vec<String>> = HashMap::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let id = node["id"].as_str().unwrap().to_string();
        let mut v = Vec::new();
        for d in node["deps"].as_array().unwrap() {
            let normal = d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null());
            if normal {
                v.push(d["pkg"].as_str().unwrap().to_string());
            }
        }
        deps.insert(id, v);
    }
    let mut checked = 0;
    for (id, name) in &names {
        if !SANS_IO.contains(&name.as_str()) && !RUNTIME_FREE.contains(&name.as_str()) {
            continue;
        }
        checked += 1;
        let mut seen = BTreeSet::new();
        let mut stack = vec![id.clone()];
        while let Some(x) = stack.pop() {
            for d in deps.get(&x).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
        let bad: Vec<&String> = seen.iter().filter_map(|d| names.get(d)).filter(|n| FORBIDDEN.contains(&n.as_str())).collect();
        assert!(bad.is_empty(), "{name} depends (transitively) on {bad:?}: see ARCHITECTURE.md");
    }
    assert_eq!(checked, SANS_IO.len() + RUNTIME_FREE.len(), "every checked crate was found in the workspace");
}
