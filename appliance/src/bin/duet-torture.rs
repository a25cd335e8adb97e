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

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use duet_appliance::config::Config;
use duet_appliance::engine::{EngineHandle, RequestTag};
use duet_appliance::server;
use duet_fs::{Batch, CreateKind, Credentials, IfExists, ObjRef, Op, OpOutput, SetAttrs, WriteData, ROOT_ID};

const WORKERS: u32 = 12;

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
    c
}

fn tag() -> RequestTag {
    RequestTag::new("torture", "batch")
}

fn dir_id(e: &EngineHandle, name: &str, create: bool) -> Option<u64> {
    let mut b = Batch::new(Credentials::root(), now());
    if create {
        b.push(Op::Create {
            dir: ObjRef::Id(ROOT_ID),
            name: name.into(),
            kind: CreateKind::Directory,
            attrs: SetAttrs::default(),
            if_exists: IfExists::Open,
        });
    } else {
        b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: name.into() });
    }
    match e.submit_blocking(b, tag()).ok()?.results.into_iter().next()? {
        Ok(OpOutput::Object { attrs, .. }) => Some(attrs.id),
        _ => None,
    }
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
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    std::thread::scope(|sc| {
        for w in 0..WORKERS {
            let engine = engine.clone();
            let out = out.clone();
            sc.spawn(move || {
                let Some(dir) = dir_id(&engine, &format!("w{w}"), true) else { return };
                let mut mine: Vec<String> = Vec::new();
                let mut rng = run.wrapping_mul(1_000_003) ^ (w as u64 + 1).wrapping_mul(0x2545F4914F6CDD1D);
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                for i in 0u64.. {
                    let r = next();
                    let key = (run << 32) | ((w as u64) << 24) | i;
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
                    {
                        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                        let _ = writeln!(o, "BEGIN {line}");
                        let _ = o.flush();
                    }
                    let mut batch = step.batch(dir);
                    if lazy {
                        batch.lazy = i % 5 != 4;
                        batch.flush = i % 5 == 4;
                    }
                    match engine.submit_blocking(batch, tag()) {
                        Ok(r) if r.results.iter().all(|x| x.is_ok()) => {
                            let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                            let _ = writeln!(o, "ACK {line}");
                            let _ = o.flush();
                        }
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
    for w in 0..WORKERS {
        let Some(did) = dir_id(&e, &format!("w{w}"), false) else {
            if state.get(&w).is_some_and(|s| !s.is_empty()) {
                bad.push(format!("worker {w}: directory missing"));
            }
            continue;
        };
        let before = state.remove(&w).unwrap_or_default();
        let mut after = before.clone();
        if let Some(p) = pending.get(&w) {
            apply(&mut after, p);
        }
        let mut actual: State = State::new();
        for name in list(&e, did) {
            match read_file(&e, did, &name) {
                Some(d) => {
                    actual.insert(name, d);
                }
                None => bad.push(format!("worker {w}: {name} listed but unreadable")),
            }
        }
        if actual != before && actual == after {
            if let Some(p) = pending.get(&w) {
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
                "worker {w}: state matches neither before nor after the in-flight step {:?}: {}\n  actual: {}",
                pending.get(&w),
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
        println!("verify: {acks} acknowledged batches present, {} in-flight batches found applied whole, fsck clean", applied_lines.len());
        ExitCode::SUCCESS
    } else {
        for b in &bad {
            println!("verify: {b}");
        }
        ExitCode::from(1)
    }
}

fn fsck(dir: &std::path::Path, running: &server::Running) -> Result<Vec<String>, String> {
    let token = std::fs::read_to_string(dir.join("admin.token")).map_err(|e| e.to_string())?;
    let req = duet_admin_api::AdminRequest::Fsck;
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
            _ => return Err("bad fsck response".into()),
        },
    };
    match duet_admin_api::decode_response(&req, &resp) {
        Ok(duet_admin_api::AdminResponse::Fsck(r)) => Ok(r.problems),
        Ok(_) => Err("unexpected response".into()),
        Err(e) => Err(e.message),
    }
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
