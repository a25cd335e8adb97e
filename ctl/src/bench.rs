//! `duetctl bench`: a multi-connection load generator for SMB and NFS
//! servers (duet or any other), on duet-client.
//!
//! I/O model: async. `--clients N` is N connections, each driven by its
//! own task; the tasks are spread over a small pool of glommio executors
//! (one thread each, by default one per core, [`crate::rt::Pool`]), so
//! many connections share a thread and a client waiting for a reply
//! costs no thread. A client's connection is made on the executor that
//! runs its tasks and stays there for all its phases. SMB chains go as
//! one related compound and NFSv4 chains as one COMPOUND; streaming I/O
//! keeps several requests in flight per connection. Latencies are timed
//! inside the tasks (request chain sent to reply decoded, including any
//! wait for the executor). Every byte written is read back and compared
//! (smallfile/mdtest read phases, sequential read, random-read phase
//! plus a final pass over every block written at random).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bench_conn::{BResult, Conn, Proto, Target};
use crate::rt::Pool;

/// Options of one bench run.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    pub targets: Vec<Target>,
    pub workloads: Vec<String>,
    pub clients: Vec<usize>,
    /// Files per client (smallfile, mdtest).
    pub files: usize,
    pub file_size: usize,
    pub ls_entries: usize,
    pub ls_repeat: usize,
    pub seq_size: u64,
    pub io_size: usize,
    pub rand_size: u64,
    pub rand_ops: usize,
    /// Directory (under each target's root) the run works in.
    pub dir: String,
    pub quiet: bool,
    /// Executor threads the client tasks run on.
    pub threads: usize,
}

/// One measured row.
#[derive(Debug, Clone)]
pub struct Row {
    pub target: String,
    pub url: String,
    pub proto: Proto,
    pub workload: String,
    pub clients: usize,
    pub ops: u64,
    pub bytes: u64,
    pub secs: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub verified: bool,
    pub error: Option<String>,
}

impl Row {
    pub fn ops_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }
    pub fn mb_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 / self.secs / 1e6
        } else {
            0.0
        }
    }
    /// Sequential rows are compared by MB/s, the rest by ops/s.
    pub fn figure(&self) -> f64 {
        if self.workload.starts_with("seq-") {
            self.mb_s()
        } else {
            self.ops_s()
        }
    }
    pub fn json(&self) -> Value {
        json!({
            "target": self.target, "url": self.url, "protocol": self.proto.as_str(),
            "workload": self.workload, "clients": self.clients, "ops": self.ops, "bytes": self.bytes,
            "seconds": self.secs, "ops_per_s": self.ops_s(), "mb_per_s": self.mb_s(),
            "p50_us": self.p50_us, "p99_us": self.p99_us, "verified": self.verified, "error": self.error,
        })
    }
}

// ---- data pattern ----

const BLK: usize = 4096;

/// The bytes of block `block` of a file written with `seed`: the seed and
/// block number, then a byte derived from both (cheap to make and compare
/// even in a debug build).
fn pattern_block(seed: u64, block: u64, out: &mut [u8; BLK]) {
    let b = (seed as u8) ^ (block as u8).rotate_left(3) ^ 0x5a;
    out.fill(b);
    out[..8].copy_from_slice(&seed.to_le_bytes());
    out[8..16].copy_from_slice(&block.to_le_bytes());
}

pub fn fill(seed: u64, off: u64, buf: &mut [u8]) {
    let mut tmp = [0u8; BLK];
    let mut at = 0usize;
    while at < buf.len() {
        let pos = off + at as u64;
        let block = pos / BLK as u64;
        let inb = (pos % BLK as u64) as usize;
        pattern_block(seed, block, &mut tmp);
        let n = (BLK - inb).min(buf.len() - at);
        buf[at..at + n].copy_from_slice(&tmp[inb..inb + n]);
        at += n;
    }
}

pub fn check(seed: u64, off: u64, data: &[u8]) -> bool {
    let mut tmp = [0u8; BLK];
    let mut at = 0usize;
    while at < data.len() {
        let pos = off + at as u64;
        let block = pos / BLK as u64;
        let inb = (pos % BLK as u64) as usize;
        pattern_block(seed, block, &mut tmp);
        let n = (BLK - inb).min(data.len() - at);
        if data[at..at + n] != tmp[inb..inb + n] {
            return false;
        }
        at += n;
    }
    true
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(seed, 0, &mut v);
    v
}

pub fn seed_pub(s: &str) -> u64 {
    seed_of(s)
}

fn seed_of(s: &str) -> u64 {
    // FNV-1a.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

// ---- phases ----

/// One operation of a metadata/small-file phase.
#[derive(Debug, Clone)]
pub enum Op {
    Put(String, usize),
    Stat(String, usize),
    Get(String, usize),
    Remove(String),
    Mkdir(String),
    StatDir(String),
    Rmdir(String),
    List(String, usize),
}

struct PhaseOut {
    ops: u64,
    bytes: u64,
    secs: f64,
    lat_us: Vec<u64>,
    verify_failures: u64,
    error: Option<String>,
}

async fn do_op(c: &mut Conn, op: &Op) -> BResult<(u64, bool)> {
    Ok(match op {
        Op::Put(p, n) => {
            c.put(p, &pattern(seed_of(p), *n)).await?;
            (*n as u64, true)
        }
        Op::Stat(p, n) => {
            let (size, _) = c.stat(p).await?;
            (0, size == *n as u64)
        }
        Op::Get(p, n) => {
            let d = c.get(p, (*n as u32).max(1)).await?;
            (d.len() as u64, d.len() == *n && check(seed_of(p), 0, &d))
        }
        Op::Remove(p) => {
            c.remove(p).await?;
            (0, true)
        }
        Op::Mkdir(p) => {
            c.mkdir(p).await?;
            (0, true)
        }
        Op::StatDir(p) => {
            let (_, dir) = c.stat(p).await?;
            (0, dir || true)
        }
        Op::Rmdir(p) => {
            c.rmdir(p).await?;
            (0, true)
        }
        Op::List(p, n) => {
            let got = c.list(p).await?;
            (0, got == *n)
        }
    })
}

/// Progress on stderr while a phase runs (a plain thread: it only reads
/// the counter the client tasks bump).
struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(label: String, total: u64, done: Arc<AtomicU64>, quiet: bool) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = (!quiet).then(|| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    let d = done.load(Ordering::Relaxed);
                    let s = t0.elapsed().as_secs_f64();
                    eprint!("\r\x1b[K{label}: {d}/{total} ops, {:.0} ops/s, {s:.1} s", d as f64 / s.max(1e-9));
                }
                eprint!("\r\x1b[K");
            })
        });
        Progress { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The connections of the clients: client `k`'s lives in slot `k` of
/// executor `k % threads`.
pub type ConnPool = Pool<Conn>;

/// Runs `f` with client `k`'s connection on its executor, as one task.
fn with_conn<R, F, Fut>(pool: &ConnPool, k: usize, f: F) -> flume::Receiver<BResult<R>>
where
    R: Send + 'static,
    F: FnOnce(Conn) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (Conn, BResult<R>)> + 'static,
{
    pool.submit(k, move |slots| async move {
        let Some(c) = slots.borrow_mut().remove(&k) else { return Err(format!("client {k} has no connection")) };
        let (c, r) = f(c).await;
        slots.borrow_mut().insert(k, c);
        r
    })
}

async fn recv<R>(rx: flume::Receiver<BResult<R>>) -> BResult<R> {
    rx.recv_async().await.unwrap_or_else(|_| Err("client task panicked".into()))
}

/// One task per client: client `k` runs `ops[k]` in order on its
/// connection; the phase lasts until the last client is done.
async fn run_phase(pool: &ConnPool, ops: &[Vec<Op>], label: &str, quiet: bool) -> PhaseOut {
    let total: u64 = ops.iter().map(|v| v.len() as u64).sum();
    let done = Arc::new(AtomicU64::new(0));
    let prog = Progress::start(label.to_string(), total, done.clone(), quiet);
    let t0 = Instant::now();
    let rxs: Vec<_> = ops
        .iter()
        .enumerate()
        .map(|(k, list)| {
            let list = list.clone();
            let done = done.clone();
            with_conn(pool, k, move |mut c| async move {
                let mut lat = Vec::with_capacity(list.len());
                let (mut bytes, mut bad) = (0u64, 0u64);
                for op in &list {
                    let t = Instant::now();
                    match do_op(&mut c, op).await {
                        Ok((b, ok)) => {
                            bytes += b;
                            bad += u64::from(!ok);
                        }
                        Err(m) => return (c, Ok((bytes, lat, bad, Some(m)))),
                    }
                    lat.push(t.elapsed().as_micros() as u64);
                    done.fetch_add(1, Ordering::Relaxed);
                }
                (c, Ok((bytes, lat, bad, None)))
            })
        })
        .collect();
    let mut outs = Vec::with_capacity(rxs.len());
    for rx in rxs {
        outs.push(recv(rx).await.unwrap_or_else(|m| (0, vec![], 0, Some(m))));
    }
    let secs = t0.elapsed().as_secs_f64();
    drop(prog);
    let mut out = PhaseOut { ops: 0, bytes: 0, secs, lat_us: Vec::new(), verify_failures: 0, error: None };
    for (b, lat, bad, err) in outs {
        out.bytes += b;
        out.ops += lat.len() as u64;
        out.lat_us.extend(lat);
        out.verify_failures += bad;
        if out.error.is_none() {
            out.error = err;
        }
    }
    out
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn row_of(t: &Target, workload: &str, clients: usize, mut p: PhaseOut) -> Row {
    p.lat_us.sort_unstable();
    let error = match (&p.error, p.verify_failures) {
        (Some(e), _) => Some(e.clone()),
        (None, 0) => None,
        (None, n) => Some(format!("{n} operations read back wrong data or sizes")),
    };
    Row {
        target: t.name.clone(),
        url: t.display_url(),
        proto: t.proto,
        workload: workload.to_string(),
        clients,
        ops: p.ops,
        bytes: p.bytes,
        secs: p.secs,
        p50_us: percentile(&p.lat_us, 0.5),
        p99_us: percentile(&p.lat_us, 0.99),
        verified: error.is_none(),
        error,
    }
}

/// Replaces the pool's connections with `n` new ones (client `k` on
/// executor `k % threads`), connected concurrently.
async fn connect_all(pool: &ConnPool, t: &Target, n: usize, via: Option<&str>) -> BResult<()> {
    pool.on_all(|slots| async move { slots.borrow_mut().clear() }).await;
    let addr = via.map(str::to_string).unwrap_or_else(|| t.addr());
    let rxs: Vec<_> = (0..n)
        .map(|k| {
            let (t, addr) = (t.clone(), addr.clone());
            pool.submit(k, move |slots| async move {
                let c = t.connect_via(&addr).await?;
                slots.borrow_mut().insert(k, c);
                Ok(())
            })
        })
        .collect();
    for rx in rxs {
        recv(rx).await?;
    }
    Ok(())
}

/// mdtest's tree: depth 4, branching 2 below the client's directory.
fn tree_dirs(base: &str, depth: usize, branch: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut level = vec![base.to_string()];
    for d in 0..depth {
        let mut next = Vec::new();
        for p in &level {
            for b in 0..branch {
                let q = format!("{p}/d{d}.{b}");
                out.push(q.clone());
                next.push(q);
            }
        }
        level = next;
    }
    out
}

/// Runs every workload against one target; `via` replaces the address
/// (latency mode). The setup connection and the single-stream workload
/// (seq) run here, on the caller's executor; the clients run on a pool of
/// `o.threads` executors (fewer when there are fewer clients).
pub async fn run_target(o: &BenchOpts, t: &Target, via: Option<&str>, rows: &mut Vec<Row>) -> BResult<()> {
    let maxc = *o.clients.iter().max().unwrap_or(&1);
    let pool = ConnPool::new(o.threads.clamp(1, maxc.max(1)))?;
    let mut setup = t.connect_via(via.unwrap_or(&t.addr())).await?;
    let base = o.dir.trim_matches('/').to_string();
    // `dir/run-...`: the parent may exist from earlier runs.
    if let Some((parent, _)) = base.rsplit_once('/') {
        let _ = setup.mkdir(parent).await;
    }
    setup.mkdir(&base).await?;
    let mut push = |r: Row| {
        if !o.quiet {
            eprintln!("{}", text_row(&r));
        }
        rows.push(r);
    };
    for w in &o.workloads {
        match w.as_str() {
            "smallfile" | "mdtest" => {
                for &n in &o.clients {
                    connect_all(&pool, t, n, via).await?;
                    let run = format!("{base}/{w}-c{n}");
                    setup.mkdir(&run).await?;
                    let cdirs: Vec<String> = (0..n).map(|k| format!("{run}/c{k}")).collect();
                    for d in &cdirs {
                        setup.mkdir(d).await?;
                    }
                    let mut phases: Vec<(&str, Vec<Vec<Op>>)> = Vec::new();
                    if w == "smallfile" {
                        let files: Vec<Vec<String>> = cdirs.iter().map(|d| (0..o.files).map(|i| format!("{d}/f{i}")).collect()).collect();
                        let sz = o.file_size;
                        let mk = |f: &dyn Fn(&String) -> Op| files.iter().map(|v| v.iter().map(f).collect()).collect::<Vec<Vec<Op>>>();
                        phases.push(("smallfile-create", mk(&|p| Op::Put(p.clone(), sz))));
                        phases.push(("smallfile-stat", mk(&|p| Op::Stat(p.clone(), sz))));
                        phases.push(("smallfile-read", mk(&|p| Op::Get(p.clone(), sz))));
                        phases.push(("smallfile-remove", mk(&|p| Op::Remove(p.clone()))));
                    } else {
                        let trees: Vec<Vec<String>> = cdirs.iter().map(|d| tree_dirs(d, 4, 2)).collect();
                        let leaves: Vec<Vec<String>> = trees.iter().map(|t| t.iter().filter(|p| p.matches('/').count() == t.last().unwrap().matches('/').count()).cloned().collect()).collect();
                        let files: Vec<Vec<String>> = leaves.iter().map(|l| (0..o.files).map(|i| format!("{}/f{i}", l[i % l.len()])).collect()).collect();
                        let sz = 3901; // mdtest-hard's file size (IO500)
                        let dops = |f: &dyn Fn(&String) -> Op| trees.iter().map(|v| v.iter().map(f).collect()).collect::<Vec<Vec<Op>>>();
                        let fops = |f: &dyn Fn(&String) -> Op| files.iter().map(|v| v.iter().map(f).collect()).collect::<Vec<Vec<Op>>>();
                        phases.push(("mdtest-dir-create", dops(&|p| Op::Mkdir(p.clone()))));
                        phases.push(("mdtest-dir-stat", dops(&|p| Op::StatDir(p.clone()))));
                        phases.push(("mdtest-file-create", fops(&|p| Op::Put(p.clone(), sz))));
                        phases.push(("mdtest-file-stat", fops(&|p| Op::Stat(p.clone(), sz))));
                        phases.push(("mdtest-file-read", fops(&|p| Op::Get(p.clone(), sz))));
                        phases.push(("mdtest-file-remove", fops(&|p| Op::Remove(p.clone()))));
                        let rm: Vec<Vec<Op>> = trees.iter().map(|v| v.iter().rev().map(|p| Op::Rmdir(p.clone())).collect()).collect();
                        phases.push(("mdtest-dir-remove", rm));
                    }
                    for (name, ops) in phases {
                        let p = run_phase(&pool, &ops, &format!("{} {name} c={n}", t.name), o.quiet).await;
                        push(row_of(t, name, n, p));
                    }
                    for d in &cdirs {
                        let _ = setup.rmdir(d).await;
                    }
                    let _ = setup.rmdir(&run).await;
                }
            }
            "ls" => {
                let dir = format!("{base}/ls-{}", o.ls_entries);
                setup.mkdir(&dir).await?;
                connect_all(&pool, t, maxc, via).await?;
                let names: Vec<String> = (0..o.ls_entries).map(|i| format!("{dir}/entry-{i:06}")).collect();
                let chunks: Vec<Vec<Op>> = (0..maxc).map(|k| names.iter().skip(k).step_by(maxc).map(|p| Op::Put(p.clone(), 0)).collect()).collect();
                let p = run_phase(&pool, &chunks, &format!("{} ls setup", t.name), o.quiet).await;
                if let Some(e) = p.error {
                    return Err(e);
                }
                for &n in &o.clients {
                    let ops: Vec<Vec<Op>> = (0..n).map(|_| (0..o.ls_repeat).map(|_| Op::List(dir.clone(), o.ls_entries)).collect()).collect();
                    let p = run_phase(&pool, &ops, &format!("{} ls-l c={n}", t.name), o.quiet).await;
                    push(row_of(t, &format!("ls-l-{}", o.ls_entries), n, p));
                }
                let rm: Vec<Vec<Op>> = (0..maxc).map(|k| names.iter().skip(k).step_by(maxc).map(|p| Op::Remove(p.clone())).collect()).collect();
                run_phase(&pool, &rm, &format!("{} ls cleanup", t.name), o.quiet).await;
                let _ = setup.rmdir(&dir).await;
            }
            "seq" => {
                let path = format!("{base}/seq-file");
                let seed = seed_of(&path);
                let mut c = t.connect_via(via.unwrap_or(&t.addr())).await?;
                let h = c.open(&path, true).await?;
                let t0 = Instant::now();
                let r = c.write_stream(h, o.seq_size, o.io_size, &mut |off, buf| fill(seed, off, buf)).await;
                let secs = t0.elapsed().as_secs_f64();
                push(stream_row(t, "seq-write", o.seq_size, secs, r.err()));
                c.close(h).await?;
                let h = c.open(&path, false).await?;
                let mut bad = 0u64;
                let t0 = Instant::now();
                let r = c
                    .read_stream(h, o.seq_size, o.io_size, &mut |off, d| {
                        bad += u64::from(!check(seed, off, d));
                        Ok(())
                    })
                    .await;
                let secs = t0.elapsed().as_secs_f64();
                let err = r.err().or((bad > 0).then(|| format!("{bad} reads returned wrong data")));
                push(stream_row(t, "seq-read", o.seq_size, secs, err));
                c.close(h).await?;
                c.remove(&path).await?;
            }
            "rand" => {
                for &n in &o.clients {
                    connect_all(&pool, t, n, via).await?;
                    let (wrow, rrow) = rand_phase(o, t, &pool, n, &base).await?;
                    push(wrow);
                    push(rrow);
                }
            }
            other => return Err(format!("unknown workload {other} (smallfile, mdtest, ls, seq, rand)")),
        }
    }
    let _ = setup.rmdir(&base).await;
    if let Some((parent, _)) = base.rsplit_once('/') {
        let _ = setup.rmdir(parent).await;
    }
    Ok(())
}

fn stream_row(t: &Target, w: &str, bytes: u64, secs: f64, err: Option<String>) -> Row {
    Row {
        target: t.name.clone(),
        url: t.display_url(),
        proto: t.proto,
        workload: w.to_string(),
        clients: 1,
        ops: 1,
        bytes,
        secs,
        p50_us: (secs * 1e6) as u64,
        p99_us: (secs * 1e6) as u64,
        verified: err.is_none(),
        error: err,
    }
}

/// Random 4 KiB writes then reads on one file per client (one task per
/// client, each on its own connection); every block written is verified
/// at the end.
async fn rand_phase(o: &BenchOpts, t: &Target, pool: &ConnPool, n: usize, base: &str) -> BResult<(Row, Row)> {
    let blocks = (o.rand_size / BLK as u64).max(1);
    let (io_size, rand_ops) = (o.io_size, o.rand_ops);
    let rxs: Vec<_> = (0..n)
        .map(|k| {
            let path = format!("{base}/rand-c{n}-{k}");
            with_conn(pool, k, move |mut c| async move {
                let r = rand_client(&mut c, &path, blocks, io_size, rand_ops).await;
                (c, r)
            })
        })
        .collect();
    let mut w = PhaseOut { ops: 0, bytes: 0, secs: 0.0, lat_us: vec![], verify_failures: 0, error: None };
    let mut r = PhaseOut { ops: 0, bytes: 0, secs: 0.0, lat_us: vec![], verify_failures: 0, error: None };
    for rx in rxs {
        let (wl, rl, ws, rs, bad) = recv(rx).await?;
        w.ops += wl.len() as u64;
        r.ops += rl.len() as u64;
        w.bytes += (wl.len() * BLK) as u64;
        r.bytes += (rl.len() * BLK) as u64;
        w.lat_us.extend(wl);
        r.lat_us.extend(rl);
        w.secs = w.secs.max(ws);
        r.secs = r.secs.max(rs);
        r.verify_failures += bad;
    }
    Ok((row_of(t, "rand-write-4k", n, w), row_of(t, "rand-read-4k", n, r)))
}

/// One client of the random phase: write latencies, read latencies, the
/// seconds of each half, and the count of blocks that read back wrong.
async fn rand_client(c: &mut Conn, path: &str, blocks: u64, io_size: usize, rand_ops: usize) -> BResult<(Vec<u64>, Vec<u64>, f64, f64, u64)> {
    let seed0 = seed_of(path);
    let h = c.open(path, true).await?;
    c.write_stream(h, blocks * BLK as u64, io_size, &mut |off, b| fill(seed0, off, b)).await?;
    let mut x = seed0 | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Last seed written per block (absent: the initial fill).
    let mut written: std::collections::HashMap<u64, u64> = Default::default();
    let mut wl = Vec::with_capacity(rand_ops);
    let mut buf = vec![0u8; BLK];
    let t0 = Instant::now();
    for i in 0..rand_ops {
        let b = next() % blocks;
        let seed = seed0 ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9);
        fill(seed, b * BLK as u64, &mut buf);
        let t = Instant::now();
        c.pwrite(h, b * BLK as u64, &buf).await?;
        wl.push(t.elapsed().as_micros() as u64);
        written.insert(b, seed);
    }
    let wsecs = t0.elapsed().as_secs_f64();
    let mut rl = Vec::with_capacity(rand_ops);
    let mut bad = 0u64;
    let t0 = Instant::now();
    for _ in 0..rand_ops {
        let b = next() % blocks;
        let t = Instant::now();
        let d = c.pread(h, b * BLK as u64, BLK as u32).await?;
        rl.push(t.elapsed().as_micros() as u64);
        let seed = written.get(&b).copied().unwrap_or(seed0);
        bad += u64::from(!check(seed, b * BLK as u64, &d));
    }
    let rsecs = t0.elapsed().as_secs_f64();
    // Read back every block written at random.
    for (&b, &seed) in &written {
        let d = c.pread(h, b * BLK as u64, BLK as u32).await?;
        bad += u64::from(!check(seed, b * BLK as u64, &d));
    }
    c.close(h).await?;
    c.remove(path).await?;
    Ok((wl, rl, wsecs, rsecs, bad))
}

// ---- output ----

pub fn text_header() -> String {
    format!(
        "{:<14} {:<20} {:>3} {:>8} {:>8} {:>11} {:>9} {:>9} {:>9}  {}",
        "TARGET", "WORKLOAD", "CL", "OPS", "SECS", "OPS/S", "MB/S", "P50 ms", "P99 ms", "VERIFIED"
    )
}

pub fn text_row(r: &Row) -> String {
    format!(
        "{:<14} {:<20} {:>3} {:>8} {:>8.2} {:>11.1} {:>9.1} {:>9.3} {:>9.3}  {}",
        r.target,
        r.workload,
        r.clients,
        r.ops,
        r.secs,
        r.ops_s(),
        r.mb_s(),
        r.p50_us as f64 / 1000.0,
        r.p99_us as f64 / 1000.0,
        match &r.error {
            None => "ok".to_string(),
            Some(e) => format!("FAILED: {e}"),
        }
    )
}

/// duet targets (name starting with "duet") against the others of the
/// same protocol: (workload, clients, duet, peer, ratio).
pub fn ratios(rows: &[Row]) -> Vec<(String, usize, String, String, f64)> {
    let mut out = Vec::new();
    for d in rows.iter().filter(|r| r.target.starts_with("duet")) {
        for p in rows.iter().filter(|r| !r.target.starts_with("duet") && r.proto == d.proto && r.workload == d.workload && r.clients == d.clients) {
            if p.figure() > 0.0 {
                out.push((d.workload.clone(), d.clients, d.target.clone(), p.target.clone(), d.figure() / p.figure()));
            }
        }
    }
    out
}

pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::from("| target | workload | clients | ops | ops/s | MB/s | p50 ms | p99 ms | verified |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.3} | {:.3} | {} |\n",
            r.target,
            r.workload,
            r.clients,
            r.ops,
            r.ops_s(),
            r.mb_s(),
            r.p50_us as f64 / 1000.0,
            r.p99_us as f64 / 1000.0,
            if r.verified { "yes".to_string() } else { format!("NO: {}", r.error.clone().unwrap_or_default()) }
        );
    }
    let rt = ratios(rows);
    if !rt.is_empty() {
        s += "\n| workload | clients | duet target | peer | ratio (ops/s; MB/s for seq) |\n|---|---:|---|---|---:|\n";
        for (w, c, d, p, x) in rt {
            s += &format!("| {w} | {c} | {d} | {p} | {x:.2}x |\n");
        }
    }
    s
}

/// A grouped horizontal bar chart: one group per (workload, clients), one
/// bar per target, bars scaled to the best of the group, labelled with
/// the figure. Hand-written SVG 1.1.
pub fn svg(rows: &[Row], title: &str) -> String {
    let mut groups: Vec<(String, usize)> = Vec::new();
    for r in rows {
        let k = (r.workload.clone(), r.clients);
        if !groups.contains(&k) {
            groups.push(k);
        }
    }
    let mut targets: Vec<String> = Vec::new();
    for r in rows {
        if !targets.contains(&r.target) {
            targets.push(r.target.clone());
        }
    }
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
    let bar = 14.0;
    let gap = 10.0;
    let left = 230.0;
    let width = 900.0;
    let plot = width - left - 140.0;
    let mut y = 50.0;
    let mut body = String::new();
    for (w, c) in &groups {
        let g: Vec<&Row> = rows.iter().filter(|r| &r.workload == w && r.clients == *c).collect();
        let max = g.iter().map(|r| r.figure()).fold(0.0f64, f64::max).max(1e-9);
        let unit = if w.starts_with("seq-") { "MB/s" } else { "ops/s" };
        let gh = g.len() as f64 * bar;
        body += &format!(
            "<text x=\"{:.0}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"end\">{} ({} cl)</text>\n",
            left - 8.0,
            y + gh / 2.0 + 4.0,
            esc(w),
            c
        );
        for r in g {
            let i = targets.iter().position(|t| t == &r.target).unwrap_or(0);
            let len = plot * r.figure() / max;
            body += &format!(
                "<rect x=\"{left}\" y=\"{y:.1}\" width=\"{len:.1}\" height=\"{:.1}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{:.0} {unit}{}</text>\n",
                bar - 2.0,
                colors[i % colors.len()],
                left + len + 4.0,
                y + bar - 4.0,
                r.figure(),
                if r.verified { "" } else { " (FAILED)" }
            );
            y += bar;
        }
        y += gap;
    }
    let mut legend = String::new();
    for (i, t) in targets.iter().enumerate() {
        let x = left + i as f64 * 130.0;
        legend += &format!(
            "<rect x=\"{x}\" y=\"30\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.0}\" y=\"39\" font-size=\"11\">{}</text>\n",
            colors[i % colors.len()],
            x + 14.0,
            esc(t)
        );
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{:.0}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{}</text>\n{legend}{body}</svg>\n",
        y + 20.0,
        esc(title)
    )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

pub fn json_doc(o: &BenchOpts, rows: &[Row], extra: Value) -> Value {
    json!({
        "duetctl_bench": 1,
        "options": {
            "workloads": o.workloads, "clients": o.clients, "files": o.files, "file_size": o.file_size,
            "ls_entries": o.ls_entries, "ls_repeat": o.ls_repeat, "seq_size": o.seq_size, "io_size": o.io_size,
            "rand_size": o.rand_size, "rand_ops": o.rand_ops, "threads": o.threads,
        },
        "targets": o.targets.iter().map(|t| json!({"name": t.name, "url": t.display_url(), "protocol": t.proto.as_str()})).collect::<Vec<_>>(),
        "results": rows.iter().map(Row::json).collect::<Vec<_>>(),
        "ratios": ratios(rows).into_iter().map(|(w, c, d, p, x)| json!({"workload": w, "clients": c, "duet": d, "peer": p, "ratio": x})).collect::<Vec<_>>(),
        "extra": extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_checks_any_slice() {
        let seed = seed_of("x/y");
        let whole = pattern(seed, 3 * BLK + 100);
        assert!(check(seed, 0, &whole));
        assert!(check(seed, 4000, &whole[4000..9000]));
        let mut part = vec![0u8; 777];
        fill(seed, 5000, &mut part);
        assert_eq!(part, whole[5000..5777]);
        let mut bad = whole.clone();
        bad[BLK + 20] ^= 1;
        assert!(!check(seed, 0, &bad));
        assert!(!check(seed ^ 1, 0, &whole));
    }

    #[test]
    fn percentiles_and_tree() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!((percentile(&v, 0.5), percentile(&v, 0.99)), (51, 99));
        assert_eq!(percentile(&[], 0.5), 0);
        let t = tree_dirs("c0", 4, 2);
        assert_eq!(t.len(), 2 + 4 + 8 + 16);
        assert_eq!(t[0], "c0/d0.0");
        assert!(t.contains(&"c0/d0.1/d1.0/d2.1/d3.1".to_string()));
    }
}
