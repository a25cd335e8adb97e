//! duet-torture: a crash-test workload for the engine.
//!
//! `duet-torture load DIR RUN` starts the appliance on DIR and runs workers
//! that each submit one batch at a time (small files, large files, renames,
//! removes, overwrites), printing `BEGIN` before and `ACK` after every batch,
//! flushed, until it is killed.
//!
//! With `DUET_TORTURE_LAZY=1` the batches are those of a share of
//! durability `protocol` (`Batch::lazy`: answered once applied, made
//! durable by the group commit within `[durability] window_ms`), every
//! fifth one a synced batch that also carries `flush` (an SMB FLUSH / NFS
//! COMMIT after it): the same checks must hold (a SIGKILL leaves the
//! kernel's page cache, so even unsynced acknowledged batches survive it;
//! what the test checks is that lazy groups, their syncs and the destager
//! never leave a half-applied batch, a record naming missing data, or an
//! fsck problem).
//!
//! `duet-torture verify DIR LOG` restarts on DIR and checks that every
//! acknowledged batch is present, that a batch that was in flight at the
//! kill is either wholly applied or not at all, that file contents are
//! byte-exact, and that fsck finds nothing.
//!
//! Layers (issue 15): the workers' directories live in the default share
//! `public`. Every third run (2, 5, 8, ...) starts, before any worker, by
//! taking snapshot `sG` of it and the writable clone `cG` of that snapshot
//! (`G` = the run; lines `SNAP sG` and `CLONE cG sG`), and records the
//! clone in `DIR.layers` once its line is out. While a clone is recorded,
//! CLONE_WORKERS more workers change the clone's copies of `w0..w3`:
//! patches, renames and removes of the files the clone inherited (copy-up
//! of metadata, copy-on-write of the chunks written, whiteouts) and files
//! of their own; their log lines carry worker ids `1000 + G*100 + k`.
//! From run G+6 on, a thread beside the workers deletes clone `cG` and
//! then snapshot `sG` (line `DROP G` first), so kills land during the
//! reclaim too. `verify` then also checks, byte for byte, every snapshot
//! and clone not dropped: a snapshot holds exactly the state of its run's
//! start, a clone that state plus its workers' acknowledged steps (the
//! step in flight whole or absent), and fsck is clean.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use duet_appliance::config::Config;
use duet_appliance::engine::{EngineHandle, RequestTag};
use duet_appliance::server;
use duet_fs::{Batch, CreateKind, Credentials, IfExists, ObjRef, Op, OpOutput, SetAttrs, WriteData, ROOT_ID};

const WORKERS: u32 = 12;
/// Workers that change a clone, on its copies of `w0..w{CLONE_WORKERS-1}`.
const CLONE_WORKERS: u32 = 4;
/// A snapshot and a clone are taken at runs 2, 5, 8, ... (run % GEN_EVERY == 2)
/// and deleted from run G + DROP_AFTER on.
const GEN_EVERY: u64 = 3;
const DROP_AFTER: u64 = 6;

/// The log's worker id of clone worker `k` of the clone taken at run `g`.
fn clone_worker(g: u64, k: u32) -> u32 {
    1000 + (g as u32) * 100 + k
}

/// The file recording the newest clone whose `CLONE` line is out.
fn layers_file(dir: &std::path::Path) -> PathBuf {
    let mut p = dir.as_os_str().to_owned();
    p.push(".layers");
    PathBuf::from(p)
}

fn content(key: u64, len: usize) -> Vec<u8> {
    let mut x = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn now() -> i64 {
    duet_appliance::admin::now_ns()
}

fn config(dir: &std::path::Path) -> Config {
    let mut c = Config::default();
    c.data_dir = dir.to_path_buf();
    c.admin.listen = "127.0.0.1:0".into();
    c.smb.listen = "127.0.0.1:0".into();
    c.nfs.listen = "127.0.0.1:0".into();
    c.nfs.portmap = false;
    c.executors = 1;
    // A small memtable: the metadata store switches (recycled) WAL files
    // often, so the kills meet them (`crash.rs`).
    c.testing.memtable_kib = std::env::var("DUET_TORTURE_MEMTABLE_KIB").ok().and_then(|v| v.parse().ok());
    // Small write-log segments: they roll over, are released and their
    // files reused while the kills come (`crash.rs`).
    if let Some(mib) = std::env::var("DUET_TORTURE_SEGMENT_MIB").ok().and_then(|v| v.parse().ok()) {
        c.cache.log_segment_mib = mib;
        // And a destager that waits for the load's stream of appends only
        // until the log holds two segments: otherwise none would be
        // released, and none reused, before the kill.
        c.cache.destage_defer_mib = Some(2 * mib);
    }
    c
}

fn tag() -> RequestTag {
    RequestTag::new("torture", "batch")
}

/// Looks `name` up in directory `dir` (creating a directory when `create`).
fn child(e: &EngineHandle, dir: u64, name: &str, create: bool) -> Option<u64> {
    let mut b = Batch::new(Credentials::root(), now());
    if create {
        b.push(Op::Create {
            dir: ObjRef::Id(dir),
            name: name.into(),
            kind: CreateKind::Directory,
            attrs: SetAttrs::default(),
            if_exists: IfExists::Open,
        });
    } else {
        b.push(Op::Lookup { dir: ObjRef::Id(dir), name: name.into() });
    }
    match e.submit_blocking(b, tag()).ok()?.results.into_iter().next()? {
        Ok(OpOutput::Object { attrs, .. }) => Some(attrs.id),
        _ => None,
    }
}

/// Follows `path` (names) from the root.
fn walk(e: &EngineHandle, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(ROOT_ID, |d, n| child(e, d, n, false))
}

/// The default share's directory, where the workers' directories live.
const SHARE: &str = "public";

fn dir_id(e: &EngineHandle, name: &str, create: bool) -> Option<u64> {
    let share = walk(e, &[SHARE])?;
    child(e, share, name, create)
}

/// One worker's batch: what it does and what a reader must then find.
#[derive(Clone, Debug)]
enum Step {
    /// Create `name` with content(key, len).
    Create { name: String, key: u64, len: usize },
    /// Overwrite bytes at `at` of `name` with content(key, n) (name's content is then recomputed by verify).
    Patch { name: String, at: usize, key: u64, n: usize },
    Rename { from: String, to: String },
    Remove { name: String },
}

impl Step {
    fn line(&self, w: u32) -> String {
        match self {
            Step::Create { name, key, len } => format!("{w} C {name} {key} {len}"),
            Step::Patch { name, at, key, n } => format!("{w} P {name} {at} {key} {n}"),
            Step::Rename { from, to } => format!("{w} R {from} {to}"),
            Step::Remove { name } => format!("{w} D {name}"),
        }
    }

    fn parse(s: &str) -> Option<(u32, Step)> {
        let f: Vec<&str> = s.split_whitespace().collect();
        let w = f.first()?.parse().ok()?;
        let step = match *f.get(1)? {
            "C" => Step::Create { name: f.get(2)?.to_string(), key: f.get(3)?.parse().ok()?, len: f.get(4)?.parse().ok()? },
            "P" => Step::Patch {
                name: f.get(2)?.to_string(),
                at: f.get(3)?.parse().ok()?,
                key: f.get(4)?.parse().ok()?,
                n: f.get(5)?.parse().ok()?,
            },
            "R" => Step::Rename { from: f.get(2)?.to_string(), to: f.get(3)?.to_string() },
            "D" => Step::Remove { name: f.get(2)?.to_string() },
            _ => return None,
        };
        Some((w, step))
    }

    fn batch(&self, dir: u64) -> Batch {
        let mut b = Batch::new(Credentials::root(), now());
        let d = ObjRef::Id(dir);
        match self {
            Step::Create { name, key, len } => {
                let f = b.push(Op::Create {
                    dir: d,
                    name: name.clone(),
                    kind: CreateKind::File,
                    attrs: SetAttrs { mode: Some(0o644), ..Default::default() },
                    if_exists: IfExists::Fail,
                });
                b.push(Op::Write { obj: f, offset: 0, data: WriteData::Bytes(content(*key, *len)), append: false });
                b.push(Op::Close { obj: f });
            }
            Step::Patch { name, at, key, n } => {
                let f = b.push(Op::Lookup { dir: d, name: name.clone() });
                b.push(Op::Write { obj: f, offset: *at as u64, data: WriteData::Bytes(content(*key, *n)), append: false });
            }
            Step::Rename { from, to } => {
                b.push(Op::Rename { src_dir: d, src_name: from.clone(), dst_dir: d, dst_name: to.clone(), replace: false });
            }
            Step::Remove { name } => {
                b.push(Op::Remove { dir: d, name: name.clone(), dir_only: Some(false) });
            }
        }
        b
    }
}

/// The expected content of each file of one worker.
type State = BTreeMap<String, Vec<u8>>;

fn apply(state: &mut State, s: &Step) {
    match s {
        Step::Create { name, key, len } => {
            state.insert(name.clone(), content(*key, *len));
        }
        Step::Patch { name, at, key, n } => {
            if let Some(v) = state.get_mut(name) {
                let end = at + n;
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[*at..end].copy_from_slice(&content(*key, *n));
            }
        }
        Step::Rename { from, to } => {
            if let Some(v) = state.remove(from) {
                state.insert(to.clone(), v);
            }
        }
        Step::Remove { name } => {
            state.remove(name);
        }
    }
}

type Out = std::sync::Arc<std::sync::Mutex<std::io::Stdout>>;

/// Prints `line` and flushes it (the harness keeps whole lines only).
fn say(out: &Out, line: &str) {
    let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// One worker: batches in directory `dir` until the process is killed.
/// `w` is its id in the log, `kid` its part of the content keys, `mine`
/// the files it may patch, rename and remove.
fn work(engine: &EngineHandle, out: &Out, dir: u64, w: u32, kid: u64, run: u64, lazy: bool, mut mine: Vec<String>) {
    let mut rng = run.wrapping_mul(1_000_003) ^ (kid + 1).wrapping_mul(0x2545F4914F6CDD1D);
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0u64.. {
        let r = next();
        let key = (run << 32) | (kid << 24) | i;
        let step = match (r % 10, mine.is_empty()) {
            (0..=4, _) | (_, true) => {
                let len = if r % 7 == 0 { 20_000 + (next() % 300_000) as usize } else { (next() % 3000) as usize };
                Step::Create { name: format!("r{run}-{i}"), key, len }
            }
            (5 | 6, false) => {
                let name = mine[(next() as usize) % mine.len()].clone();
                Step::Patch { name, at: (next() % 200_000) as usize, key, n: 1 + (next() % 70_000) as usize }
            }
            (7 | 8, false) => {
                let k = (next() as usize) % mine.len();
                let from = mine.swap_remove(k);
                let to = format!("{from}-m{i}");
                mine.push(to.clone());
                Step::Rename { from, to }
            }
            _ => {
                let k = (next() as usize) % mine.len();
                Step::Remove { name: mine.swap_remove(k) }
            }
        };
        if let Step::Create { name, .. } = &step {
            mine.push(name.clone());
        }
        let line = step.line(w);
        say(out, &format!("BEGIN {line}"));
        let mut batch = step.batch(dir);
        if lazy {
            batch.lazy = i % 5 != 4;
            batch.flush = i % 5 == 4;
        }
        match engine.submit_blocking(batch, tag()) {
            Ok(r) if r.results.iter().all(|x| x.is_ok()) => say(out, &format!("ACK {line}")),
            Ok(r) => {
                eprintln!("duet-torture: batch failed: {line}: {:?}", r.results);
                std::process::exit(3);
            }
            Err(e) => {
                eprintln!("duet-torture: {e}");
                std::process::exit(3);
            }
        }
    }
}

/// Takes snapshot `sG` and clone `cG` at a generation's first run (before
/// any worker starts). Returns the newest clone recorded in `DIR.layers`
/// that is not yet old enough for [`drop_old`], if any.
fn layers_at_start(dir: &std::path::Path, running: &server::Running, run: u64, out: &Out) -> Result<Option<u64>, String> {
    let file = layers_file(dir);
    if run % GEN_EVERY == 2 {
        let snap = format!("s{run}");
        admin(
            dir,
            running,
            duet_admin_api::AdminRequest::SnapshotCreate {
                share: SHARE.into(),
                snapshot: duet_admin_api::NewSnapshot { name: Some(snap.clone()) },
            },
        )?;
        say(out, &format!("SNAP {snap}"));
        let clone = format!("c{run}");
        admin(
            dir,
            running,
            duet_admin_api::AdminRequest::ShareClone {
                source: SHARE.into(),
                clone: duet_admin_api::NewClone {
                    share: duet_admin_api::Share::new(clone.clone(), format!("/clones/{clone}")),
                    snapshot: Some(snap.clone()),
                },
            },
        )?;
        say(out, &format!("CLONE {clone} {snap}"));
        std::fs::write(&file, run.to_string()).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    let newest = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse::<u64>().ok());
    Ok(newest.filter(|g| g + DROP_AFTER > run))
}

/// Deletes every generation old enough (clone first: it pins its snapshot).
/// Unknown names are fine: an earlier run may have deleted them.
fn drop_old(dir: &std::path::Path, running: &server::Running, run: u64, out: &Out) {
    let mut g = 2;
    while g + DROP_AFTER <= run {
        say(out, &format!("DROP {g}"));
        for req in [
            duet_admin_api::AdminRequest::ShareRemove(format!("c{g}")),
            duet_admin_api::AdminRequest::SnapshotDelete { share: SHARE.into(), name: format!("s{g}") },
        ] {
            if let Err(e) = admin(dir, running, req) {
                // Typed: the API's error code, never the message text.
                if !e.starts_with(&format!("{}:", duet_admin_api::codes::NOT_FOUND)) {
                    eprintln!("duet-torture: drop of generation {g}: {e}");
                }
            }
        }
        g += GEN_EVERY;
    }
}

fn load(dir: PathBuf, run: u64) -> ExitCode {
    let running = match server::start(&config(&dir)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("duet-torture: {e}");
            return ExitCode::from(1);
        }
    };
    let engine = running.engine().clone();
    let lazy = std::env::var("DUET_TORTURE_LAZY").is_ok_and(|v| v == "1");
    let out: Out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let clone = match layers_at_start(&dir, &running, run, &out) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("duet-torture: snapshot or clone: {e}");
            return ExitCode::from(3);
        }
    };
    std::thread::scope(|sc| {
        let (dir, running, out2) = (&dir, &running, out.clone());
        sc.spawn(move || drop_old(dir, running, run, &out2));
        for w in 0..WORKERS {
            let engine = engine.clone();
            let out = out.clone();
            sc.spawn(move || {
                let Some(d) = dir_id(&engine, &format!("w{w}"), true) else { return };
                work(&engine, &out, d, w, w as u64, run, lazy, Vec::new());
            });
        }
        for k in 0..CLONE_WORKERS {
            let Some(g) = clone else { break };
            let engine = engine.clone();
            let out = out.clone();
            sc.spawn(move || {
                // The clone's copy of w{k}: absent when w{k} was not there yet at sG.
                let Some(d) = walk(&engine, &["clones", &format!("c{g}"), &format!("w{k}")]) else { return };
                let mine = list(&engine, d);
                work(&engine, &out, d, clone_worker(g, k), 200 + k as u64, run, lazy, mine);
            });
        }
    });
    ExitCode::SUCCESS
}

fn read_file(e: &EngineHandle, dir: u64, name: &str) -> Option<Vec<u8>> {
    let mut b = Batch::new(Credentials::root(), now());
    let f = b.push(Op::Lookup { dir: ObjRef::Id(dir), name: name.into() });
    b.push(Op::Read { obj: f, offset: 0, len: 1 << 30 });
    let r = e.submit_blocking(b, tag()).ok()?;
    match r.results.into_iter().nth(1)? {
        Ok(OpOutput::Read { data, .. }) => Some(data),
        _ => None,
    }
}

fn list(e: &EngineHandle, dir: u64) -> Vec<String> {
    let mut b = Batch::new(Credentials::root(), now());
    b.push(Op::ReadDir { dir: ObjRef::Id(dir), after: None, max_entries: 1 << 20, with_attrs: false });
    match e.submit_blocking(b, tag()).ok().and_then(|r| r.results.into_iter().next()) {
        Some(Ok(OpOutput::Dir { entries, .. })) => entries.into_iter().map(|e| e.name).collect(),
        _ => Vec::new(),
    }
}

fn verify(dir: PathBuf, log: PathBuf) -> ExitCode {
    let text = match std::fs::File::open(&log) {
        Ok(f) => std::io::BufReader::new(f).lines().map_while(Result::ok).collect::<Vec<_>>(),
        Err(e) => {
            eprintln!("duet-torture: cannot read {}: {e}", log.display());
            return ExitCode::from(2);
        }
    };
    // Per worker: the state after every acknowledged step, and the step in
    // flight at each kill (a BEGIN without its ACK before the next run).
    let mut state: BTreeMap<u32, State> = BTreeMap::new();
    let mut pending: BTreeMap<u32, Step> = BTreeMap::new();
    // Per generation: the workers' states when its snapshot was taken;
    // the generations cloned, and those whose deletion began.
    let mut snapshots: BTreeMap<u64, BTreeMap<u32, State>> = BTreeMap::new();
    let mut clones: Vec<u64> = Vec::new();
    let mut dropped: std::collections::BTreeSet<u64> = Default::default();
    let mut acks = 0u64;
    for line in &text {
        if let Some(rest) = line.strip_prefix("BEGIN ") {
            if let Some((w, s)) = Step::parse(rest) {
                pending.insert(w, s);
            }
        } else if let Some(rest) = line.strip_prefix("ACK ").or_else(|| line.strip_prefix("APPLIED ")) {
            if let Some((w, s)) = Step::parse(rest) {
                apply(state.entry(w).or_default(), &s);
                pending.remove(&w);
                acks += 1;
            }
        } else if line.starts_with("RUN ") {
            // A new run. The last run's unacknowledged steps were resolved
            // by its verification (an `APPLIED` line for each that landed).
            pending.clear();
        } else if let Some(g) = line.strip_prefix("SNAP s").and_then(|g| g.parse::<u64>().ok()) {
            // Taken before the run's workers start: the state is exact.
            snapshots.insert(g, (0..WORKERS).map(|k| (k, state.get(&k).cloned().unwrap_or_default())).collect());
        } else if let Some(g) = line.strip_prefix("CLONE c").and_then(|r| r.split_whitespace().next()).and_then(|g| g.parse::<u64>().ok()) {
            let Some(snap) = snapshots.get(&g) else {
                eprintln!("duet-torture: {line}: no SNAP line before it");
                return ExitCode::from(2);
            };
            for (k, st) in snap {
                state.insert(clone_worker(g, *k), st.clone());
            }
            clones.push(g);
        } else if let Some(g) = line.strip_prefix("DROP ").and_then(|g| g.parse::<u64>().ok()) {
            dropped.insert(g);
        }
    }
    let running = match server::start(&config(&dir)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("duet-torture: {e}");
            return ExitCode::from(1);
        }
    };
    let e = running.engine().clone();
    let mut bad = Vec::new();
    let mut applied_lines = Vec::new();
    // (log id, path of the directory, whether a step may be in flight).
    let mut dirs: Vec<(u32, Vec<String>, Option<u64>)> = (0..WORKERS).map(|w| (w, vec![SHARE.to_string(), format!("w{w}")], None)).collect();
    for g in clones.iter().filter(|g| !dropped.contains(g)) {
        for k in 0..WORKERS {
            dirs.push((clone_worker(*g, k), vec!["clones".into(), format!("c{g}"), format!("w{k}")], None));
        }
    }
    for g in snapshots.keys().filter(|g| !dropped.contains(g)) {
        for k in 0..WORKERS {
            let path = vec![SHARE.to_string(), duet_fs::view::SNAPSHOT_DIR.to_string(), format!("s{g}"), format!("w{k}")];
            dirs.push((k, path, Some(*g)));
        }
    }
    let mut checked = (0usize, 0usize);
    for (w, path, snap) in dirs {
        let what = path.join("/");
        // A snapshot holds exactly its run's starting state; a live or
        // clone directory the acknowledged state, the step in flight whole or absent.
        let (before, step) = match snap {
            Some(g) => (snapshots[&g].get(&w).cloned().unwrap_or_default(), None),
            None => (state.get(&w).cloned().unwrap_or_default(), pending.get(&w)),
        };
        if snap.is_some() {
            checked.0 += 1;
        } else if w >= 1000 {
            checked.1 += 1;
        }
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        let Some(did) = walk(&e, &names) else {
            if !before.is_empty() {
                bad.push(format!("{what}: directory missing"));
            }
            continue;
        };
        let mut after = before.clone();
        if let Some(p) = step {
            apply(&mut after, p);
        }
        let mut actual: State = State::new();
        for name in list(&e, did) {
            match read_file(&e, did, &name) {
                Some(d) => {
                    actual.insert(name, d);
                }
                None => bad.push(format!("{what}: {name} listed but unreadable")),
            }
        }
        if actual != before && actual == after {
            if let Some(p) = step {
                applied_lines.push(format!("APPLIED {}", p.line(w)));
            }
        }
        if actual != before && actual != after {
            let show = |s: &State| s.iter().map(|(k, v)| format!("{k}:{}", v.len())).collect::<Vec<_>>().join(" ");
            let diff: Vec<String> = before
                .iter()
                .filter(|(k, v)| actual.get(*k) != Some(v))
                .map(|(k, v)| format!("{k} expected {} bytes, found {:?}", v.len(), actual.get(k).map(|x| x.len())))
                .chain(actual.keys().filter(|k| !before.contains_key(*k)).map(|k| format!("{k} unexpected")))
                .collect();
            bad.push(format!(
                "{what} (worker {w}): state matches neither before nor after the in-flight step {step:?}: {}\n  actual: {}",
                diff.join("; "),
                show(&actual)
            ));
        }
    }
    // fsck through the admin handler's path: the store with the chunk list.
    let report = fsck(&dir, &running);
    running.shutdown();
    match report {
        Ok(problems) => bad.extend(problems),
        Err(e) => bad.push(format!("fsck: {e}")),
    }
    if bad.is_empty() {
        for l in &applied_lines {
            println!("{l}");
        }
        println!(
            "verify: {acks} acknowledged batches present, {} in-flight batches found applied whole, \
             {} snapshot and {} clone directories byte-exact, fsck clean",
            applied_lines.len(),
            checked.0,
            checked.1
        );
        ExitCode::SUCCESS
    } else {
        for b in &bad {
            println!("verify: {b}");
        }
        ExitCode::from(1)
    }
}

fn fsck(dir: &std::path::Path, running: &server::Running) -> Result<Vec<String>, String> {
    match admin(dir, running, duet_admin_api::AdminRequest::Fsck)? {
        duet_admin_api::AdminResponse::Fsck(r) => Ok(r.problems),
        _ => Err("unexpected response".into()),
    }
}

/// One admin request through the admin listener, with the daemon's token.
fn admin(
    dir: &std::path::Path,
    running: &server::Running,
    req: duet_admin_api::AdminRequest,
) -> Result<duet_admin_api::AdminResponse, String> {
    let token = std::fs::read_to_string(dir.join("admin.token")).map_err(|e| e.to_string())?;
    let creds = duet_admin_api::Credentials::Bearer(token.trim().to_string());
    let http = req.to_http(&running.admin_addr.to_string(), Some(&creds)).encode();
    let mut s = std::net::TcpStream::connect(running.admin_addr).map_err(|e| e.to_string())?;
    s.write_all(&http).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut s, &mut buf).map_err(|e| e.to_string())?;
    let mut p = duet_admin_api::http::ResponseParser::new();
    let resp = match p.feed(&buf) {
        duet_admin_api::http::Parsed::Complete(r) => r,
        _ => match p.finish() {
            duet_admin_api::http::Parsed::Complete(r) => r,
            _ => return Err("bad admin response".into()),
        },
    };
    duet_admin_api::decode_response(&req, &resp).map_err(|e| format!("{}: {}", e.code, e.message))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("load") if args.len() == 4 => load(PathBuf::from(&args[2]), args[3].parse().unwrap_or(0)),
        Some("verify") if args.len() == 4 => verify(PathBuf::from(&args[2]), PathBuf::from(&args[3])),
        _ => {
            eprintln!("usage: duet-torture load DIR RUN | duet-torture verify DIR LOG");
            ExitCode::from(2)
        }
    }
}
