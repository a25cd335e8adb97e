//! Real network partitions between three real duetd processes (issue 12),
//! and linearizability of real clients' histories.
//!
//! Three voters on 127.0.0.11/.12/.13 share one peer port; the test cuts
//! links between their addresses at the OS level with iptables rules
//! scoped to that port (`common::cluster::Cuts`: removed on drop, a
//! panicking test included). Clients reach every node on 127.0.0.1 ports
//! of their own, so no cut touches them. Cases:
//!
//! - **the leader isolated** from both followers: the majority elects a
//!   new leader (the time is printed and bounded); the old leader neither
//!   acknowledges a write nor answers a read (SMB
//!   STATUS_INSUFFICIENT_RESOURCES, NFSv3 NFS3ERR_JUKEBOX: docs/cluster.md);
//!   after healing it rejoins as a follower and every node holds the same
//!   data;
//! - **a follower isolated**: service goes on through the other two; the
//!   follower's own clients get the retry answer; it catches up after
//!   healing;
//! - **a one-way cut**: every packet to the leader on the peer port is
//!   dropped (it can send, not receive): check quorum deposes it, the
//!   followers elect another;
//! - **a follower cut from the leader only** (both still reach the third
//!   node): the leader keeps its place and term (the cut follower's
//!   pre-votes are refused by the node that hears the leader), service
//!   goes on, the follower catches up after healing.
//! - **a slow, lossy network** (no iptables: every peer link goes
//!   through a user-space forwarder, `common::lossy`, with delay, jitter,
//!   retransmission-like stalls and connection resets; there is no
//!   `sch_netem` here): service goes on, and after healing the checks
//!   below hold.
//!
//! In each, six real clients (the tests' raw SMB 2.1 and NFSv3 clients,
//! one of each per node) write unique values to and read three small
//! files (a register per file) during the cut, the leader change and the
//! healing, recording monotonic invocation and response times; a write
//! answered with an error is "outcome unknown" (it may have applied), a
//! failed read constrains nothing. Each file's history, plus a final read
//! through every node, goes to `duet_cluster::linearizable::check_register`
//! and the test fails on a violation. `the_checker_rejects_a_stale_read`
//! feeds a hand-made stale-read history through the same code path.
//! Afterwards every file written through smbclient (inline and chunked
//! sizes) reads back byte-exact over SMB (smbclient) and NFSv3 (nfs-cat)
//! on every node, and fsck is clean on each.
//!
//! Needs root (iptables). The cases run one at a time (a lock): nine
//! daemons on two cores at once would make elections slow.
//! `DUET_PARTITION_SECS=N` holds each cut N seconds (default 4) for a
//! longer run.

mod clients;
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clients::{results3, Nfs, Smb};
use common::cluster::{self, start_three, status, Cuts, Node, Three};
use common::lossy::{Faults, Lossy};
use duet_cluster::linearizable::{check_register, with_initial, RegOp};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::rpc::PROGRAM_NFS;
use duet_protocols::nfs::xdr::{Name, Opaque, XdrEncode, XdrWriter};
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::read::ReadRequest;
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::write::WriteRequest;
use duet_protocols::smb2::FileId;
use serde_json::Value;

const HOSTS: [&str; 3] = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];
/// Registers: small files every client writes and reads.
const REGS: usize = 3;
/// Every register value has this length (a write overwrites it whole at
/// offset 0: one WRITE, one batch).
const VLEN: usize = 16;
/// The uid and gid of the SMB user `bench`, which the NFS clients use.
const UID: u32 = 3100;
/// The most the majority may take to elect after the cut (the election
/// timeout is 2-4 s; the status polls and a loaded machine add to it).
const ELECTION_BOUND: Duration = Duration::from_secs(8);

/// One test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn hold() -> Duration {
    Duration::from_secs(std::env::var("DUET_PARTITION_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(4))
}

fn reg_name(r: usize) -> String {
    format!("reg{r}.txt")
}

fn initial(r: usize) -> Vec<u8> {
    format!("initial-value-{r:02}").into_bytes()
}

// ------------------------------------------------------------ histories

/// One client operation as recorded: which register, a write or a read,
/// the value written or read, call and return in µs since the test's
/// start (monotonic); `ret: None` = the outcome is unknown.
#[derive(Clone, Debug)]
struct Op {
    reg: usize,
    client: String,
    op: RegOp,
}

/// Figures of one checked history.
#[derive(Debug, Default)]
struct Checked {
    ops: usize,
    writes_ok: usize,
    writes_unknown: usize,
    reads_ok: usize,
    reads_failed: usize,
}

/// Checks every register's history (starting from its initial value)
/// with the library's checker: the code path of every test here.
fn check_histories(ops: &[Op], failed_reads: usize) -> Result<Checked, String> {
    let mut per: BTreeMap<usize, Vec<RegOp>> = BTreeMap::new();
    for o in ops {
        per.entry(o.reg).or_default().push(o.op.clone());
    }
    let mut c = Checked { reads_failed: failed_reads, ..Default::default() };
    for o in ops {
        c.ops += 1;
        match (o.op.write, o.op.ret.is_some()) {
            (true, true) => c.writes_ok += 1,
            (true, false) => c.writes_unknown += 1,
            (false, _) => c.reads_ok += 1,
        }
    }
    for (reg, h) in per {
        let h = with_initial(Some(initial(reg)), &h);
        check_register(&h).map_err(|e| format!("register {reg} ({} operations): {e}", h.len()))?;
    }
    Ok(c)
}

#[derive(Default)]
struct History {
    ops: Vec<Op>,
    failed_reads: usize,
    /// Error statuses seen, by client and kind, for the report.
    errors: BTreeMap<String, usize>,
}

struct Clock(Instant);

impl Clock {
    fn us(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
}

/// A tiny xorshift per client (which register, read or write).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

// ------------------------------------------------------------ raw clients, never panicking on a lost reply

/// SMB WRITE (write-through) of a whole register value.
fn smb_write(c: &mut Smb, fid: FileId, data: &[u8]) -> Option<NtStatus> {
    let w = WriteRequest {
        offset: 0,
        file_id: fid,
        channel: 0,
        remaining_bytes: 0,
        flags: WriteRequest::WRITE_THROUGH,
        write_channel_info: &[],
        data,
    };
    c.charge = 1;
    c.try_call(Request::Write(w), Cmd::WRITE).map(|r| r.status())
}

/// SMB READ of a register: the bytes, or the error status; None = no reply.
fn smb_read(c: &mut Smb, fid: FileId) -> Option<Result<Vec<u8>, NtStatus>> {
    let rr = ReadRequest {
        padding: 0,
        flags: 0,
        length: VLEN as u32,
        offset: 0,
        file_id: fid,
        minimum_count: 0,
        channel: 0,
        remaining_bytes: 0,
        read_channel_info: &[],
    };
    c.charge = 1;
    let r = c.try_call(Request::Read(rr), Cmd::READ)?;
    if r.status() != NtStatus::SUCCESS {
        return Some(Err(r.status()));
    }
    match Response::decode(&r.header, &r.bytes) {
        Ok(Response::Read(rd)) => Some(Ok(rd.data.to_vec())),
        _ => Some(Err(NtStatus(0xFFFF_FFFF))),
    }
}

fn nfs_call(c: &mut Nfs, args: &Nfs3Args<'_>) -> Option<Vec<u8>> {
    let mut w = XdrWriter::new();
    args.encode(&mut w);
    c.try_call(PROGRAM_NFS, 3, args.proc_(), &w.into_inner())
}

/// NFSv3 WRITE (FILE_SYNC) of a register value: Ok, or the status.
fn nfs_write(c: &mut Nfs, fh: &[u8], data: &[u8]) -> Option<Result<(), Nfsstat3>> {
    let rep = nfs_call(
        c,
        &Nfs3Args::Write(Write3Args { file: Opaque(fh), offset: 0, count: data.len() as u32, stable: StableHow::FileSync, data: Opaque(data) }),
    )?;
    Some(match results3(proc3::WRITE, &rep) {
        Nfs3Results::Write(Nfs3Res::Ok(ok)) if ok.count as usize == data.len() => Ok(()),
        Nfs3Results::Write(Nfs3Res::Fail(s, _)) => Err(s),
        _ => Err(Nfsstat3::IO),
    })
}

fn nfs_read(c: &mut Nfs, fh: &[u8]) -> Option<Result<Vec<u8>, Nfsstat3>> {
    let rep = nfs_call(c, &Nfs3Args::Read(Read3Args { file: Opaque(fh), offset: 0, count: VLEN as u32 }))?;
    Some(match results3(proc3::READ, &rep) {
        Nfs3Results::Read(Nfs3Res::Ok(ok)) => Ok(ok.data.0.to_vec()),
        Nfs3Results::Read(Nfs3Res::Fail(s, _)) => Err(s),
        _ => Err(Nfsstat3::IO),
    })
}

/// A connected client of either protocol with a handle on every register.
enum Client {
    Smb(Smb, Vec<FileId>),
    Nfs(Nfs, Vec<Vec<u8>>),
}

impl Client {
    fn smb(n: &Node) -> Client {
        let mut c = Smb::logged_on(n.smb, "bench", "benchpw", "public");
        c.tcp.set_read_timeout(Some(Duration::from_secs(25))).unwrap();
        let fids = (0..REGS).map(|r| c.create(&reg_name(r)).unwrap_or_else(|e| panic!("open {} on node {}: {e:?}", reg_name(r), n.id))).collect();
        Client::Smb(c, fids)
    }

    fn nfs(n: &Node) -> Client {
        let mut c = Nfs::connect(n.d.nfs_port).as_user(UID, UID);
        c.s.set_read_timeout(Some(Duration::from_secs(25))).unwrap();
        let root = c.mount("/public").unwrap_or_else(|e| panic!("mount /public on node {}: {e:?}", n.id));
        let fhs = (0..REGS).map(|r| c.lookup3(&root, reg_name(r).as_bytes()).unwrap_or_else(|e| panic!("lookup {} on node {}: {e:?}", reg_name(r), n.id))).collect();
        Client::Nfs(c, fhs)
    }

    /// Writes `v` to register `r`: Some(true) acknowledged, Some(false) an
    /// error (unknown outcome), None no reply (connection lost).
    fn write(&mut self, r: usize, v: &[u8]) -> (Option<bool>, String) {
        match self {
            Client::Smb(c, f) => match smb_write(c, f[r], v) {
                Some(NtStatus::SUCCESS) => (Some(true), String::new()),
                Some(s) => (Some(false), format!("smb write {s:?}")),
                None => (None, "smb write: no reply".into()),
            },
            Client::Nfs(c, f) => match nfs_write(c, &f[r], v) {
                Some(Ok(())) => (Some(true), String::new()),
                Some(Err(s)) => (Some(false), format!("nfs write {s:?}")),
                None => (None, "nfs write: no reply".into()),
            },
        }
    }

    /// Reads register `r`: Ok(value), Err(what failed); `None`: no reply.
    fn read(&mut self, r: usize) -> Option<Result<Vec<u8>, String>> {
        match self {
            Client::Smb(c, f) => smb_read(c, f[r]).map(|x| x.map_err(|s| format!("smb read {s:?}"))),
            Client::Nfs(c, f) => nfs_read(c, &f[r]).map(|x| x.map_err(|s| format!("nfs read {s:?}"))),
        }
    }
}

/// Runs `client` until `stop`, recording into `hist`.
fn run_client(name: String, mut client: Client, seed: u64, clock: Arc<Clock>, stop: Arc<AtomicBool>, hist: Arc<Mutex<History>>) {
    let mut rng = Rng(seed | 1);
    let mut seq = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let r = (rng.next() % REGS as u64) as usize;
        if rng.next() % 2 == 0 {
            seq += 1;
            let v = format!("{name:>6}-{seq:09}");
            assert_eq!(v.len(), VLEN);
            let call = clock.us();
            let (res, err) = client.write(r, v.as_bytes());
            let ret = clock.us();
            let mut h = hist.lock().unwrap();
            let ok = res == Some(true);
            h.ops.push(Op { reg: r, client: name.clone(), op: RegOp { write: true, value: Some(v.into_bytes()), call, ret: ok.then_some(ret) } });
            if !ok {
                *h.errors.entry(format!("{name}: {err}")).or_default() += 1;
            }
            if res.is_none() {
                return;
            }
        } else {
            let call = clock.us();
            let res = client.read(r);
            let ret = clock.us();
            let mut h = hist.lock().unwrap();
            match res {
                Some(Ok(v)) => h.ops.push(Op { reg: r, client: name.clone(), op: RegOp { write: false, value: Some(v), call, ret: Some(ret) } }),
                Some(Err(e)) => {
                    h.failed_reads += 1;
                    *h.errors.entry(format!("{name}: {e}")).or_default() += 1;
                }
                None => {
                    h.failed_reads += 1;
                    *h.errors.entry(format!("{name}: read: no reply")).or_default() += 1;
                    return;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Six clients (SMB and NFSv3 on each node) running on threads.
struct Workload {
    clock: Arc<Clock>,
    stop: Arc<AtomicBool>,
    hist: Arc<Mutex<History>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// (node id, from, to): no client of that node may see an operation
    /// called after `from` succeed before `to` (it is cut off then).
    silent: Vec<(u64, u64, u64)>,
}

impl Workload {
    /// Creates the registers with their initial values (through the
    /// leader), then starts the clients.
    fn start(t: &Three) -> Workload {
        let leader = t.s[0]["leader"].as_u64().unwrap();
        let ln = &t.nodes[leader as usize - 1];
        let mut c = Smb::logged_on(ln.smb, "bench", "benchpw", "public");
        for r in 0..REGS {
            let fid = c.create(&reg_name(r)).unwrap();
            assert_eq!(c.write(fid, 0, &initial(r), true), NtStatus::SUCCESS);
            c.close(fid);
        }
        let clock = Arc::new(Clock(Instant::now()));
        let stop = Arc::new(AtomicBool::new(false));
        let hist = Arc::new(Mutex::new(History::default()));
        let mut clients = Vec::new();
        for n in &t.nodes {
            clients.push((format!("smb-n{}", n.id), Client::smb(n)));
            clients.push((format!("nfs-n{}", n.id), Client::nfs(n)));
        }
        let threads = clients
            .into_iter()
            .enumerate()
            .map(|(i, (name, client))| {
                let (clock, stop, hist) = (clock.clone(), stop.clone(), hist.clone());
                std::thread::spawn(move || run_client(name, client, 0x9E37_79B9 * (i as u64 + 7), clock, stop, hist))
            })
            .collect();
        Workload { clock, stop, hist, threads, silent: Vec::new() }
    }

    /// Now, on the clients' clock.
    fn now(&self) -> u64 {
        self.clock.us()
    }

    /// Node `id` was cut off from `from` to `to` (clock times): none of
    /// its clients' operations called in between may succeed before `to`.
    fn silent(&mut self, id: u64, from: u64, to: u64) {
        self.silent.push((id, from, to));
    }

    /// Stops the clients, adds a final read of every register through
    /// every node, and checks each register's history.
    fn finish(self, t: &Three) -> Checked {
        self.stop.store(true, Ordering::Relaxed);
        for th in self.threads {
            th.join().expect("a client thread panicked");
        }
        let mut h = self.hist.lock().unwrap();
        for n in &t.nodes {
            let mut c = Client::nfs(n);
            for r in 0..REGS {
                let call = self.clock.us();
                let v = c.read(r).expect("a reply").unwrap_or_else(|e| panic!("final read of register {r} on node {}: {e}", n.id));
                let ret = self.clock.us();
                h.ops.push(Op { reg: r, client: format!("final-n{}", n.id), op: RegOp { write: false, value: Some(v), call, ret: Some(ret) } });
            }
        }
        for &(id, from, to) in &self.silent {
            let tail = format!("-n{id}");
            let answered: Vec<&Op> = h.ops.iter().filter(|o| o.client.ends_with(&tail) && o.op.call > from && o.op.ret.is_some_and(|r| r < to)).collect();
            assert!(answered.is_empty(), "node {id}, cut off, answered {} operations, e.g. {:?}", answered.len(), &answered[..answered.len().min(3)]);
            let tried = h.ops.iter().filter(|o| o.client.ends_with(&tail) && o.op.call > from && o.op.call < to).count();
            eprintln!("node {id} answered none of its clients' operations while cut off ({tried} writes tried then; failed reads are not in the history)");
        }
        for (e, k) in &h.errors {
            eprintln!("  {k:4} x {e}");
        }
        let by_client = h.ops.iter().fold(BTreeMap::<&str, usize>::new(), |mut m, o| {
            *m.entry(o.client.as_str()).or_default() += 1;
            m
        });
        eprintln!("history by client: {by_client:?}");
        let c = check_histories(&h.ops, h.failed_reads).unwrap_or_else(|e| panic!("not linearizable: {e}"));
        eprintln!(
            "linearizable: {} operations checked over {REGS} registers ({} writes acknowledged, {} of unknown outcome, {} reads; {} reads failed and constrain nothing)",
            c.ops, c.writes_ok, c.writes_unknown, c.reads_ok, c.reads_failed
        );
        c
    }
}

// ------------------------------------------------------------ the cluster


/// `duetctl cluster status --json` of `n`, or `Null` while its admin
/// port is closed (a node re-executing itself to install a snapshot).
fn try_status(n: &Node) -> Value {
    let o = n.d.ctl(&["cluster", "status", "--json"]);
    serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
}

fn applied_of(s: &Value, id: u64) -> Option<u64> {
    s["nodes"].as_array()?.iter().find(|n| n["id"] == id)?["applied"].as_u64()
}

/// Polls every node's status until `f` holds (at most 60 s).
fn wait_all(t: &Three, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s: Vec<Value> = t.nodes.iter().map(try_status).collect();
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: not within 60 s; statuses: {s:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn leader_of(s: &Value) -> Option<u64> {
    s["leader"].as_u64()
}

/// Polls `nodes` (indexes into `t.nodes`) until they agree on a leader
/// other than `not`, in a term above `above`: (leader, when).
fn wait_new_leader(t: &Three, nodes: &[usize], not: u64, above: u64, bound: Duration) -> (u64, Instant) {
    let deadline = Instant::now() + bound + Duration::from_secs(20);
    loop {
        let s: Vec<Value> = nodes.iter().map(|&i| status(&t.nodes[i].d)).collect();
        let l = leader_of(&s[0]);
        if let Some(l) = l {
            if l != not && s.iter().all(|v| leader_of(v) == Some(l) && v["term"].as_u64().unwrap_or(0) > above) {
                return (l, Instant::now());
            }
        }
        assert!(Instant::now() < deadline, "no new leader among {nodes:?}: {s:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls node `i` until it no longer names itself the leader.
fn wait_deposed(t: &Three, i: usize) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    let me = t.nodes[i].id;
    loop {
        let s = status(&t.nodes[i].d);
        if leader_of(&s) != Some(me) {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "node {me} still leads: {s:#}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// After healing, while clients still write: waits until all three name
/// one leader in one term and node `healed` applied at least what the
/// leader had applied when this was called (it caught up).
fn wait_rejoined(t: &Three, healed: usize) -> Vec<Value> {
    let s = status(&t.nodes[(healed + 1) % 3].d);
    let l = leader_of(&s).expect("a leader among the majority");
    let target = cluster::applied(&status(&t.nodes[l as usize - 1].d), l);
    let id = t.nodes[healed].id;
    wait_all(t, "the healed node rejoins and catches up", |s| {
        let l = leader_of(&s[0]);
        l.is_some() && s.iter().all(|v| leader_of(v) == l && v["term"] == s[0]["term"]) && applied_of(&s[healed], id).is_some_and(|a| a >= target)
    })
}

/// Waits until all three agree (one leader, one term, one applied index).
fn wait_agreed(t: &Three) -> Vec<Value> {
    wait_all(t, "three nodes agree", |s| {
        let l = leader_of(&s[0]);
        let a: Vec<Option<u64>> = t.nodes.iter().zip(s).map(|(n, v)| applied_of(v, n.id)).collect();
        l.is_some() && s.iter().all(|v| leader_of(v) == l && v["term"] == s[0]["term"]) && a.iter().all(|x| x.is_some() && *x == a[0])
    })
}

/// Puts `files` through smbclient on node `i`, retrying what got the
/// retry answer (as a client would) for up to 30 s.
fn put_retrying(n: &Node, local: &Path, files: &[(String, Vec<u8>)]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut left: Vec<&(String, Vec<u8>)> = files.iter().collect();
    while !left.is_empty() {
        let mut next = Vec::new();
        for f in left {
            std::fs::write(local.join(&f.0), &f.1).unwrap();
            if let Err(e) = cluster::smbclient(n.smb, local, &format!("put {}", f.0)) {
                assert!(e.contains("NT_STATUS_INSUFFICIENT_RESOURCES") || e.contains("NT_STATUS_IO_TIMEOUT"), "put {} on node {}: {e}", f.0, n.id);
                next.push(f);
            }
        }
        left = next;
        assert!(left.is_empty() || Instant::now() < deadline, "puts on node {} not done in 30 s", n.id);
    }
}

/// Every file byte-exact through every node: SMB (smbclient) and NFSv3
/// (nfs-cat); then fsck on each.
fn check_everywhere(t: &Three, local: &Path, files: &[(String, Vec<u8>)]) {
    let t0 = Instant::now();
    for n in &t.nodes {
        cluster::check_all(n.smb, local, files, n.id);
        for (name, want) in files {
            let url = format!("nfs://127.0.0.1/public/{name}?version=3&nfsport={p}&mountport={p}", p = n.d.nfs_port);
            let o = Command::new("nfs-cat").arg(&url).output().expect("nfs-cat (libnfs-utils) runs");
            assert!(o.status.success(), "nfs-cat {url}: {}", String::from_utf8_lossy(&o.stderr));
            assert!(o.stdout == *want, "{name} through node {} over NFS: {} bytes, differ from the {} written", n.id, o.stdout.len(), want.len());
        }
    }
    for n in &t.nodes {
        let out = n.d.ok(&["fsck"]);
        assert!(out.contains("file system is consistent"), "fsck on node {}: {out}", n.id);
    }
    eprintln!("{} files byte-exact through every node over SMB and NFSv3, fsck clean, in {:?}", files.len(), t0.elapsed());
}

/// A write (even `clients` index) or a read (odd) from each of `clients`
/// of node `id` (connected before the cut; in parallel) must all fail with the retry answer:
/// SMB STATUS_INSUFFICIENT_RESOURCES, NFSv3 NFS3ERR_JUKEBOX. The writes go
/// into the history as of unknown outcome (they must never appear).
fn refuses(w: &Workload, clients: Vec<Client>, id: u64) {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for (k, mut c) in clients.into_iter().enumerate() {
            let (clock, hist) = (w.clock.clone(), w.hist.clone());
            s.spawn(move || {
                let want = if matches!(c, Client::Smb(..)) { "INSUFFICIENT_RESOURCES" } else { "JUKEBOX" };
                if k % 2 == 0 {
                    let v = format!("cut-n{id}-{k}-refused");
                    assert_eq!(v.len(), VLEN);
                    let call = clock.us();
                    let (res, e) = c.write(k % REGS, v.as_bytes());
                    hist.lock().unwrap().ops.push(Op { reg: k % REGS, client: format!("cut-n{id}"), op: RegOp { write: true, value: Some(v.into_bytes()), call, ret: None } });
                    assert_eq!(res, Some(false), "node {id} acknowledged a write while cut off ({e})");
                    assert!(e.contains(want), "node {id}'s write while cut off: {e}");
                } else {
                    match c.read(k % REGS) {
                        Some(Err(e)) => assert!(e.contains(want), "node {id}'s read while cut off: {e}"),
                        other => panic!("node {id} answered a read while cut off: {other:?}"),
                    }
                }
            });
        }
    });
    eprintln!("node {id} refused SMB and NFS writes and reads with the retry answer (all within {:?})", t0.elapsed());
}

fn term(s: &Value) -> u64 {
    s["term"].as_u64().unwrap()
}

struct Setup {
    t: Three,
    local: std::path::PathBuf,
    files: Vec<(String, Vec<u8>)>,
    leader: usize,
    /// The forwarders between the nodes ([`setup_lossy`]), dropped
    /// before the nodes.
    lossy: Option<Lossy>,
    _tmp: tempfile::TempDir,
}

/// Three nodes (`cluster_extra` in their `[cluster]`), the bench user on
/// every node, and four files (inline and chunked sizes) written through
/// the leader.
fn setup(cluster_extra: &str) -> Setup {
    setup_with(cluster_extra, None)
}

/// The node addresses' stand-ins the peers reach each other through
/// ([`setup_lossy`]).
const VIA: [&str; 3] = ["127.0.0.21", "127.0.0.22", "127.0.0.23"];

/// [`setup`], the nodes reaching each other only through forwarders
/// (`common::lossy`, no faults until the test sets them): node N listens
/// for peers on 127.0.0.1N and every node's `peers` names 127.0.0.2N for
/// it.
fn setup_lossy() -> Setup {
    setup_with("", Some(Faults::default()))
}

fn setup_with(cluster_extra: &str, faults: Option<Faults>) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    // SMB requests wait for a leader as long as NFS ones (by default
    // they wait 60 s, answered STATUS_PENDING), so that a cut-off node's
    // refusals come within the cut.
    let cluster_extra = format!("smb_leader_wait_ms = 5000\n{cluster_extra}");
    let lossy: std::cell::OnceCell<Lossy> = std::cell::OnceCell::new();
    let also: &[&str] = if faults.is_some() { &VIA } else { &[] };
    let t = start_three(&root, also, |root, id, host, port, peers, secret| match faults {
        None => cluster::spawn_node(root, id, host, port, peers, secret, &cluster_extra, ""),
        Some(f) => {
            lossy.get_or_init(|| {
                let links: Vec<_> = (0..3).map(|i| (format!("{}:{port}", VIA[i]).parse().unwrap(), format!("{}:{port}", HOSTS[i]).parse().unwrap())).collect();
                Lossy::start(&links, f)
            });
            let via: Vec<String> = VIA.iter().enumerate().map(|(i, h)| format!("\"{}@{h}:{port}\"", i + 1)).collect();
            cluster::spawn_node(root, id, host, port, &format!("[{}]", via.join(", ")), secret, &cluster_extra, "")
        }
    });
    let lossy = lossy.into_inner();
    let leader = leader_of(&t.s[0]).unwrap() as usize - 1;
    let local = root.join("local");
    std::fs::create_dir_all(&local).unwrap();
    // The SMB user owns the registers; the NFS clients use its uid.
    t.nodes[leader].d.ok(&["user", "add", "bench", "--password", "benchpw", "--uid", &UID.to_string(), "--gid", &UID.to_string()]);
    for n in &t.nodes {
        let deadline = Instant::now() + cluster::WAIT;
        while let Err(e) = cluster::smbclient(n.smb, &local, "ls") {
            assert!(Instant::now() < deadline, "no SMB login on node {}: {e}", n.id);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let files = cluster::random_files("before", &[100, 4096, 70_000, 1 << 20]);
    cluster::put_all(t.nodes[leader].smb, &local, &files);
    eprintln!("leader: node {}", leader + 1);
    Setup { _tmp: tmp, t, local, files, leader, lossy }
}

// ------------------------------------------------------------ the cases

#[test]
fn the_leader_cut_off_from_both_followers() {
    let _g = serial();
    let t_all = Instant::now();
    let Setup { _tmp, t, local, mut files, leader: li, lossy: _ } = setup("");
    let others: Vec<usize> = (0..3).filter(|&i| i != li).collect();
    let old = t.nodes[li].id;
    let term0 = term(&t.s[0]);
    let cut_clients = vec![Client::smb(&t.nodes[li]), Client::smb(&t.nodes[li]), Client::nfs(&t.nodes[li]), Client::nfs(&t.nodes[li])];
    let mut w = Workload::start(&t);
    std::thread::sleep(Duration::from_secs(2));

    let mut cuts = Cuts::new(t.port);
    let at = Instant::now();
    cuts.isolate(HOSTS[li], &[HOSTS[others[0]], HOSTS[others[1]]]);
    let cut_us = w.now();
    eprintln!("cut node {old} off ({} rules)", cuts.len());
    let (new, elected) = wait_new_leader(&t, &others, old, term0, ELECTION_BOUND);
    let election = elected - at;
    eprintln!("node {new} elected {election:?} after the cut");
    assert!(election < ELECTION_BOUND, "the majority took {election:?} to elect");
    let deposed = wait_deposed(&t, li) - at;
    eprintln!("node {old} stopped naming itself the leader {deposed:?} after the cut (check quorum)");
    // The old leader neither acknowledges nor answers.
    refuses(&w, cut_clients, old);
    // The majority serves: files through both of its nodes.
    let during = cluster::random_files("during", &[10, 3000, 9000, 200_000]);
    put_retrying(&t.nodes[others[0]], &local, &during[..2]);
    put_retrying(&t.nodes[others[1]], &local, &during[2..]);
    files.extend(during);
    std::thread::sleep(hold().saturating_sub(at.elapsed().saturating_sub(election)));

    w.silent(old, cut_us, w.now());
    cuts.heal();
    let healed = Instant::now();
    let s = wait_rejoined(&t, li);
    eprintln!("healed; node {old} follows and caught up {:?} later: leader {}, term {}", healed.elapsed(), s[0]["leader"], s[0]["term"]);
    assert_ne!(leader_of(&s[0]), Some(old), "the old leader leads again after healing");
    assert!(term(&s[0]) > term0);
    std::thread::sleep(Duration::from_secs(2));
    let c = w.finish(&t);
    wait_agreed(&t);
    assert!(c.writes_ok > 20 && c.reads_ok > 20, "too few operations: {c:?}");
    assert!(c.writes_unknown + c.reads_failed > 0, "no client saw the cut: {c:?}");
    check_everywhere(&t, &local, &files);
    eprintln!("whole test {:?}", t_all.elapsed());
}

#[test]
fn a_follower_cut_off_catches_up() {
    let _g = serial();
    let t_all = Instant::now();
    let Setup { _tmp, t, local, mut files, leader: li, lossy: _ } = setup("log_retain = 256\n");
    let fi = (li + 1) % 3;
    let oi = (li + 2) % 3;
    let fid = t.nodes[fi].id;
    let term0 = term(&t.s[0]);
    let cut_clients = vec![Client::smb(&t.nodes[fi]), Client::smb(&t.nodes[fi]), Client::nfs(&t.nodes[fi]), Client::nfs(&t.nodes[fi])];
    let mut w = Workload::start(&t);
    std::thread::sleep(Duration::from_secs(1));

    let mut cuts = Cuts::new(t.port);
    cuts.isolate(HOSTS[fi], &[HOSTS[li], HOSTS[oi]]);
    let cut_us = w.now();
    let at = Instant::now();
    eprintln!("cut follower {fid} off");
    // Service goes on through the leader and the other follower.
    let during = cluster::random_files("during", &[10, 3000, 9000, 200_000, 5, 600_000]);
    put_retrying(&t.nodes[li], &local, &during[..3]);
    put_retrying(&t.nodes[oi], &local, &during[3..]);
    files.extend(during);
    eprintln!("6 files put through nodes {} and {} {:?} after the cut", li + 1, oi + 1, at.elapsed());
    let s = status(&t.nodes[li].d);
    assert_eq!(leader_of(&s), Some(t.nodes[li].id), "the leader kept its place: {s:#}");
    assert_eq!(term(&s), term0, "the term moved while a follower was cut off: {s:#}");
    // The cut-off follower's clients get the retry answer.
    refuses(&w, cut_clients, fid);
    std::thread::sleep(hold().saturating_sub(at.elapsed()));
    // Held until it is well past `log_retain` (256) behind, however slow
    // the machine.
    let behind = loop {
        let b = cluster::applied(&status(&t.nodes[li].d), t.nodes[li].id) - cluster::applied(&status(&t.nodes[fi].d), fid);
        if b > 600 {
            break b;
        }
        assert!(at.elapsed() < Duration::from_secs(40), "follower {fid} only {b} entries behind after {:?}", at.elapsed());
        std::thread::sleep(Duration::from_millis(200));
    };

    w.silent(fid, cut_us, w.now());
    cuts.heal();
    let healed = Instant::now();
    let s = wait_rejoined(&t, fi);
    // More than `log_retain` behind: it catches up by snapshot (and
    // re-executes itself to install it).
    assert!(behind > 256, "the follower fell only {behind} entries behind");
    assert!(cluster::log(&t.nodes[fi].d).contains("raft snapshot: installed the image of index"), "follower {fid} did not install a snapshot");
    cluster::wait_serving_again(&t.nodes[fi]);
    cluster::wait_smb(&t.nodes[fi]);
    eprintln!("healed; follower {fid}, {behind} entries behind, caught up by snapshot {:?} later (leader {}, term {})", healed.elapsed(), s[0]["leader"], s[0]["term"]);
    assert_eq!(leader_of(&s[0]), Some(t.nodes[li].id), "the healed follower disrupted the leader: {:#}", s[0]);
    std::thread::sleep(Duration::from_secs(1));
    let c = w.finish(&t);
    wait_agreed(&t);
    assert!(c.writes_ok > 20 && c.reads_ok > 20, "too few operations: {c:?}");
    check_everywhere(&t, &local, &files);
    eprintln!("whole test {:?}", t_all.elapsed());
}

#[test]
fn a_leader_that_cannot_hear_is_deposed() {
    let _g = serial();
    let t_all = Instant::now();
    let Setup { _tmp, t, local, mut files, leader: li, lossy: _ } = setup("");
    let others: Vec<usize> = (0..3).filter(|&i| i != li).collect();
    let old = t.nodes[li].id;
    let term0 = term(&t.s[0]);
    let mut w = Workload::start(&t);
    std::thread::sleep(Duration::from_secs(1));

    // Every packet to the leader on the peer port is dropped; what it
    // sends still arrives.
    let mut cuts = Cuts::new(t.port);
    let at = Instant::now();
    for &o in &others {
        cuts.one_way(HOSTS[o], HOSTS[li]);
    }
    let cut_us = w.now();
    eprintln!("node {old} (the leader) hears nothing from now on; it still sends");
    let deposed = wait_deposed(&t, li) - at;
    eprintln!("node {old} deposed itself {deposed:?} after the cut (check quorum)");
    let (new, elected) = wait_new_leader(&t, &others, old, term0, ELECTION_BOUND);
    let election = elected - at;
    eprintln!("node {new} elected {election:?} after the cut");
    assert!(election < ELECTION_BOUND + Duration::from_secs(4), "the majority took {election:?} to elect");
    let during = cluster::random_files("during", &[77, 5000, 123_456]);
    put_retrying(&t.nodes[new as usize - 1], &local, &during);
    files.extend(during);
    std::thread::sleep(hold().saturating_sub(at.elapsed().saturating_sub(election)));

    w.silent(old, cut_us, w.now());
    cuts.heal();
    let healed = Instant::now();
    let s = wait_rejoined(&t, li);
    eprintln!("healed; node {old} follows and caught up {:?} later: leader {}, term {}", healed.elapsed(), s[0]["leader"], s[0]["term"]);
    assert_ne!(leader_of(&s[0]), Some(old), "the deaf leader leads again");
    std::thread::sleep(Duration::from_secs(1));
    let c = w.finish(&t);
    wait_agreed(&t);
    assert!(c.writes_ok > 20 && c.reads_ok > 20, "too few operations: {c:?}");
    check_everywhere(&t, &local, &files);
    eprintln!("whole test {:?}", t_all.elapsed());
}

#[test]
fn a_follower_cut_from_the_leader_only() {
    let _g = serial();
    let t_all = Instant::now();
    let Setup { _tmp, t, local, mut files, leader: li, lossy: _ } = setup("");
    let fi = (li + 1) % 3;
    let oi = (li + 2) % 3;
    let (lid, fid) = (t.nodes[li].id, t.nodes[fi].id);
    let term0 = term(&t.s[0]);
    let w = Workload::start(&t);
    std::thread::sleep(Duration::from_secs(1));

    // Only the link between the leader and one follower is cut: that
    // follower still reaches the other, which still hears the leader.
    let mut cuts = Cuts::new(t.port);
    cuts.both(HOSTS[li], HOSTS[fi]);
    let at = Instant::now();
    eprintln!("cut the link between leader {lid} and follower {fid}; both still reach node {}", oi + 1);
    let during = cluster::random_files("during", &[10, 3000, 9000, 200_000]);
    put_retrying(&t.nodes[li], &local, &during[..2]);
    put_retrying(&t.nodes[oi], &local, &during[2..]);
    files.extend(during);
    // Longer than an election timeout: the cut follower's pre-votes are
    // refused by the node that still hears the leader (check quorum), so
    // the leader keeps its place and its term.
    std::thread::sleep(hold().max(Duration::from_secs(5)).saturating_sub(at.elapsed()));
    let s = status(&t.nodes[li].d);
    let o = status(&t.nodes[oi].d);
    assert_eq!(leader_of(&s), Some(lid), "the leader lost its place: {s:#}");
    assert_eq!((term(&s), leader_of(&o)), (term0, Some(lid)), "a follower cut from the leader only disrupted it: {o:#}");
    let behind = cluster::applied(&s, lid).saturating_sub(applied_of(&try_status(&t.nodes[fi]), fid).unwrap_or(0));
    eprintln!("{:?} after the cut: node {lid} still leads in term {term0}; follower {fid} is {behind} entries behind", at.elapsed());

    cuts.heal();
    let healed = Instant::now();
    let s = wait_rejoined(&t, fi);
    eprintln!("healed; follower {fid} caught up {:?} later (leader {}, term {})", healed.elapsed(), s[0]["leader"], s[0]["term"]);
    assert_eq!(leader_of(&s[0]), Some(lid), "the leader changed after healing: {:#}", s[0]);
    std::thread::sleep(Duration::from_secs(1));
    let c = w.finish(&t);
    wait_agreed(&t);
    assert!(c.writes_ok > 20 && c.reads_ok > 20, "too few operations: {c:?}");
    check_everywhere(&t, &local, &files);
    eprintln!("whole test {:?}", t_all.elapsed());
}

/// No cut, a bad network: every peer link goes through `common::lossy`
/// (one-way delay 5-25 ms, 2% of the chunks held 200 ms more as a lost
/// segment waits for its retransmission, each connection reset after 3 s
/// on average, so raft messages, write-cache pushes, forwarded batches
/// and their answers are lost with it). For at least 10 s the six
/// clients and smbclient puts through every node go on; then the links
/// heal. The histories are linearizable, the three agree, every file
/// reads back byte-exact through every node, fsck is clean.
#[test]
fn a_slow_lossy_network_between_the_nodes() {
    let _g = serial();
    let t_all = Instant::now();
    let faults = Faults {
        delay: Duration::from_millis(5),
        jitter: Duration::from_millis(20),
        stall_per_mille: 20,
        stall: Duration::from_millis(200),
        reset_mean: Some(Duration::from_secs(3)),
    };
    let Setup { _tmp, t, local, mut files, leader: li, lossy } = setup_lossy();
    let lossy = lossy.expect("the forwarders");
    let term0 = term(&t.s[0]);
    let w = Workload::start(&t);
    lossy.set(faults);
    let at = Instant::now();
    eprintln!("peer links from now on: {faults:?}");
    let during = cluster::random_files("lossy", &[10, 3000, 9000, 200_000, 5, 70_000]);
    for (k, part) in during.chunks(2).enumerate() {
        put_retrying(&t.nodes[(li + k) % 3], &local, part);
    }
    files.extend(during);
    eprintln!("6 files put through the three nodes {:?} after the faults began", at.elapsed());
    std::thread::sleep(hold().max(Duration::from_secs(10)).saturating_sub(at.elapsed()));
    let st = lossy.stats();
    lossy.set(Faults::default());
    eprintln!("healed after {:?}: {st:?}", at.elapsed());
    assert!(st.resets >= 3 && st.stalls >= 3 && st.chunks > 500, "the faults did not happen: {st:?}");
    std::thread::sleep(Duration::from_secs(1));
    let c = w.finish(&t);
    assert!(c.writes_ok > 20 && c.reads_ok > 20, "too few operations: {c:?}");
    // Exactly-once resend: a change whose forwarded answer was lost (a
    // reset link) is sent again with its id until an answer comes, so
    // such losses no longer reach the clients as unknown outcomes (before
    // it, 9 to 14 writes a run were answered the retry answer).
    let f = forwarded(&t);
    eprintln!(
        "forwarded batches: {} answers lost, {} resent with their id, {} given up (the retry answer); {} writes of unknown outcome",
        f.unknown, f.resent, f.gave_up, c.writes_unknown
    );
    assert!(f.gave_up <= 1, "changes given up after lost answers: {f:?}");
    assert!(c.writes_unknown <= 2 + f.gave_up as usize, "writes of unknown outcome: {c:?}, {f:?}");
    let s = wait_agreed(&t);
    eprintln!("the three agree: leader {}, term {} (was {term0} with node {} leading)", s[0]["leader"], s[0]["term"], li + 1);
    check_everywhere(&t, &local, &files);
    eprintln!("whole test {:?}", t_all.elapsed());
}

/// NFSv3 CREATE GUARDED (fails with NFS3ERR_EXIST when the name exists).
fn create_guarded(c: &mut Nfs, dir: &[u8], name: &str) -> Result<(), Nfsstat3> {
    let rep = c.v3(&Nfs3Args::Create(Create3Args {
        where_: DirOpArgs3 { dir: Opaque(dir), name: Name(name.as_bytes()) },
        how: CreateHow3::Guarded(Sattr3 { mode: Some(0o644), ..Default::default() }),
    }));
    match results3(proc3::CREATE, &rep) {
        Nfs3Results::Create(Nfs3Res::Ok(_)) => Ok(()),
        Nfs3Results::Create(Nfs3Res::Fail(s, _)) => Err(s),
        other => panic!("{other:?}"),
    }
}

/// Exactly-once resend, deterministically: a follower forwards a
/// non-idempotent change (an exclusive create, then a remove) while
/// every packet from the leader to it is dropped, so the leader commits
/// the change (with the other follower) and its answer is lost. The
/// follower's forward times out (`forward_timeout_ms = 1000`), it sends
/// the same batch with the same id again, and once the link heals (1.5 s
/// after the call) the leader answers the stored result: the client gets
/// success once, never NFS3ERR_EXIST or NFS3ERR_NOENT (before the resend,
/// it got NFS3ERR_JUKEBOX, and its retry then EXIST or NOENT).
#[test]
fn a_change_through_a_follower_whose_answer_is_lost_is_answered_once() {
    let _g = serial();
    let t_all = Instant::now();
    let Setup { _tmp, t, leader: li, .. } = setup("forward_timeout_ms = 1000\nleader_wait_ms = 10000");
    let fi = (li + 1) % 3;
    let (lid, fid) = (t.nodes[li].id, t.nodes[fi].id);
    let mut c = Nfs::connect(t.nodes[fi].d.nfs_port).as_user(UID, UID);
    c.s.set_read_timeout(Some(Duration::from_secs(25))).unwrap();
    let root = c.mount("/public").unwrap();
    let mut on_leader = Nfs::connect(t.nodes[li].d.nfs_port).as_user(UID, UID);
    let lroot = on_leader.mount("/public").unwrap();
    let gauge = |o: &str| cluster::metric(&t.nodes[fi].d, &format!("duet_forwarded_batches_total{{outcome=\"{o}\"}}"));
    let resent0 = gauge("resent");
    let heal_after = Duration::from_millis(1500);
    let name = "exactly-once";

    // The answer of every try is lost until the link heals.
    let lost = |c: &mut Nfs, what: &str, change: &mut dyn FnMut(&mut Nfs) -> Nfsstat3| {
        let mut cuts = Cuts::new(t.port);
        cuts.one_way(HOSTS[li], HOSTS[fi]);
        let healer = std::thread::spawn(move || {
            std::thread::sleep(heal_after);
            cuts.heal();
        });
        let at = Instant::now();
        let status = change(c);
        let took = at.elapsed();
        healer.join().unwrap();
        eprintln!("{what} through follower {fid}, leader {lid}'s answers cut for {heal_after:?}: {status:?} after {took:?}");
        assert_eq!(status, Nfsstat3::OK, "{what}: the client must get the first execution's success");
        assert!(took >= Duration::from_secs(1), "{what} was answered before its first forward timed out ({took:?}): nothing was lost");
    };
    lost(&mut c, "an exclusive create", &mut |c: &mut Nfs| create_guarded(c, &root, name).err().unwrap_or(Nfsstat3::OK));
    assert!(on_leader.lookup3(&lroot, name.as_bytes()).is_ok(), "created once");
    // The change ran once: a new exclusive create of the name fails.
    assert_eq!(create_guarded(&mut c, &root, name), Err(Nfsstat3::EXIST));
    lost(&mut c, "a remove", &mut |c: &mut Nfs| c.remove3(&root, name));
    assert_eq!(on_leader.lookup3(&lroot, name.as_bytes()).err(), Some(Nfsstat3::NOENT), "removed");

    let resent = gauge("resent") - resent0;
    eprintln!("follower {fid}: {resent} resends, {} given up", gauge("gave_up"));
    assert!(resent >= 2, "each change was sent again at least once: {resent}");
    assert_eq!(gauge("gave_up"), 0);
    assert_eq!(term(&status(&t.nodes[li].d)), term(&t.s[0]), "the leader kept its place");
    wait_agreed(&t);
    eprintln!("whole test {:?}", t_all.elapsed());
}

/// The forwarding counters summed over the three nodes (`/metrics`).
#[derive(Debug, Default)]
struct Forwarded {
    unknown: u64,
    resent: u64,
    gave_up: u64,
}

fn forwarded(t: &Three) -> Forwarded {
    let m = |n: &Node, o: &str| cluster::metric(&n.d, &format!("duet_forwarded_batches_total{{outcome=\"{o}\"}}"));
    t.nodes.iter().fold(Forwarded::default(), |f, n| Forwarded {
        unknown: f.unknown + m(n, "unknown"),
        resent: f.resent + m(n, "resent"),
        gave_up: f.gave_up + m(n, "gave_up"),
    })
}

/// `Cuts` removes its rules on drop, a panic included, and a new `Cuts`
/// removes those of test processes that no longer exist.
#[test]
fn cut_rules_are_removed() {
    let _g = serial();
    let port = common::free_port();
    let rules = || -> Vec<String> {
        let o = Command::new("iptables").args(["-w", "-S", "INPUT"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.contains(&format!("-{port} "))).map(String::from).collect()
    };
    // A process id that does not exist now.
    let dead = (4_000_000u32..).find(|p| !Path::new(&format!("/proc/{p}")).exists()).unwrap();
    let tag = format!("duet-part-{dead}-{port}");
    let o = Command::new("iptables")
        .args(["-w", "-I", "INPUT", "-s", "127.0.0.11", "-d", "127.0.0.12", "-p", "tcp", "--dport", &port.to_string(), "-m", "comment", "--comment", &tag, "-j", "DROP"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(rules().len(), 1);
    let mut c = Cuts::new(port);
    assert!(rules().is_empty(), "the dead process's rule stays: {:?}", rules());
    c.both(HOSTS[0], HOSTS[1]);
    assert_eq!((c.len(), rules().len()), (4, 4));
    // A connection across the cut does not get through; one beside it does.
    let l = std::net::TcpListener::bind((HOSTS[1], port)).unwrap();
    let across = cluster_dial(HOSTS[0], HOSTS[1], port);
    let beside = cluster_dial(HOSTS[2], HOSTS[1], port);
    assert!(across.is_err() && beside.is_ok(), "across {across:?}, beside {beside:?}");
    drop(l);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _c = c;
        panic!("a test failing with rules in place");
    }));
    assert!(r.is_err());
    assert!(rules().is_empty(), "rules left after a panic: {:?}", rules());
}

/// A TCP connection from `from` to `to:port`, given up after 1 s.
fn cluster_dial(from: &str, to: &str, port: u16) -> std::io::Result<()> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    sock.bind(&std::net::SocketAddr::new(from.parse().unwrap(), 0).into())?;
    sock.connect_timeout(&std::net::SocketAddr::new(to.parse().unwrap(), port).into(), Duration::from_secs(1))
}

/// The checker path of the cases above rejects a stale read: a value
/// acknowledged through one node, then the older value read through
/// another after that acknowledgment (what a deposed leader answering
/// from its own state would give).
#[test]
fn the_checker_rejects_a_stale_read() {
    let op = |reg: usize, write: bool, v: &str, call: u64, ret: Option<u64>| Op {
        reg,
        client: "hand".into(),
        op: RegOp { write, value: Some(v.as_bytes().to_vec()), call, ret },
    };
    let init = String::from_utf8(initial(0)).unwrap();
    let good = [op(0, true, "a", 10, Some(20)), op(0, false, "a", 30, Some(40)), op(1, true, "b", 5, None), op(1, false, "b", 50, Some(60))];
    let c = check_histories(&good, 0).expect("a linearizable history");
    assert_eq!((c.ops, c.writes_ok, c.writes_unknown, c.reads_ok), (4, 1, 1, 2));
    // The stale read: "a" acknowledged at 20, the initial value read 30-40.
    let stale = [op(0, true, "a", 10, Some(20)), op(0, false, &init, 30, Some(40))];
    let e = check_histories(&stale, 0).expect_err("a stale read passed");
    assert!(e.contains("no linearization"), "{e}");
    // A write of unknown outcome seen, then the value before it again.
    let flip = [op(2, true, "x", 10, None), op(2, false, "x", 20, Some(30)), op(2, false, &String::from_utf8(initial(2)).unwrap(), 40, Some(50))];
    assert!(check_histories(&flip, 0).is_err(), "a value went back in time");
}
