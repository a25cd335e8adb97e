//! Batch commit throughput for 1, 8 and 64 concurrent committers, to show
//! group commit: with more committers, more proposals share one fsync.
//!
//! Run: `cargo bench -p duet-cluster-store --bench group_commit`
//! (DUET_BENCH_SECS sets the seconds per point, default 3; DUET_BENCH_DIR
//! the directory, default a temporary one — put it on the disk you care about;
//! DUET_BENCH_LAZY=1 marks the batches lazy, as a `protocol` share's are:
//! answered before their sync, which the store makes within its commit
//! window).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use duet_cluster::records::Command;
use duet_cluster_store::Store;
use duet_fs::{Batch, CreateKind, Credentials, IfExists, ObjRef, Op, OpOutput, SetAttrs, WriteData, ROOT_ID};

fn main() {
    let secs: u64 = std::env::var("DUET_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let base = std::env::var("DUET_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
    println!("group commit: small-file create+write+close batches, {secs} s per point, store under {}", base.display());
    println!("{:>11} {:>12} {:>12} {:>14} {:>12}", "committers", "batches/s", "fsyncs/s", "batches/fsync", "p50 ms");
    let lazy = std::env::var("DUET_BENCH_LAZY").is_ok_and(|v| v == "1");
    if lazy {
        println!("lazy batches (answered before their sync)");
    }
    let mut first = 0.0;
    for committers in [1usize, 8, 64] {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let store = Store::open(dir.path(), 1).unwrap();
        let h = store.handle();
        h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let f0 = h.counters().fsyncs.load(Ordering::Relaxed);
        let start = Instant::now();
        let mut lat = Vec::new();
        std::thread::scope(|s| {
            let mut joins = Vec::new();
            for c in 0..committers {
                let h = h.clone();
                let stop = stop.clone();
                let done = done.clone();
                joins.push(s.spawn(move || {
                    let mut lat = Vec::new();
                    let mut b = Batch::new(Credentials::root(), 1);
                    b.push(Op::Create { dir: ObjRef::Id(ROOT_ID), name: format!("d{c}"), kind: CreateKind::Directory, attrs: SetAttrs::default(), if_exists: IfExists::Open });
                    let dir = match &h.batch_blocking(b).unwrap().applied.results[0] {
                        Ok(OpOutput::Object { attrs, .. }) => attrs.id,
                        o => panic!("{o:?}"),
                    };
                    let data = vec![7u8; 4096];
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let mut b = Batch::new(Credentials::root(), 2);
                        let f = b.push(Op::Create { dir: ObjRef::Id(dir), name: format!("f{i}"), kind: CreateKind::File, attrs: SetAttrs::default(), if_exists: IfExists::Fail });
                        b.push(Op::Write { obj: f, offset: 0, data: WriteData::Bytes(data.clone()), append: false });
                        b.push(Op::Close { obj: f });
                        b.lazy = lazy;
                        let t = Instant::now();
                        let out = h.batch_blocking(b).unwrap();
                        lat.push(t.elapsed());
                        assert!(out.applied.results.iter().all(|r| r.is_ok()));
                        done.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                    lat
                }));
            }
            std::thread::sleep(Duration::from_secs(secs));
            stop.store(true, Ordering::Relaxed);
            for j in joins {
                lat.extend(j.join().unwrap());
            }
        });
        let el = start.elapsed().as_secs_f64();
        let n = done.load(Ordering::Relaxed) as f64;
        let fsyncs = (h.counters().fsyncs.load(Ordering::Relaxed) - f0) as f64;
        lat.sort();
        let p50 = lat.get(lat.len() / 2).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0);
        if committers == 1 {
            first = n / el;
        }
        println!(
            "{:>11} {:>12.0} {:>12.0} {:>14.2} {:>12.2}   ({:.1}x one committer)",
            committers,
            n / el,
            fsyncs / el,
            n / fsyncs.max(1.0),
            p50,
            (n / el) / first.max(1e-9)
        );
        store.shutdown();
    }
}
