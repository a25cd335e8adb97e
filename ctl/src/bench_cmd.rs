//! The `duetctl bench`, `duetctl cp` and `duetctl rm` commands: argument
//! handling, the amplification report, the vectorised-copy comparison and
//! the latency mode (network namespace + veth + netem). The protocol work
//! is async on glommio ([`crate::rt`]): the bench's clients on a pool of
//! executors, cp and rm on one executor on the calling thread.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command as Proc;
use std::time::Instant;

use clap::Args;
use duet_admin_api::{AdminRequest, AdminResponse, Credentials, Stats};
use duet_client::nfs3::Nfs3Client;
use duet_client::nfs4::Nfs4Client;
use duet_client::smb::SmbClient;
use duet_client::vec4::{self, VecClient};
use serde_json::{json, Value};

use crate::bench::{self, check, pattern, BenchOpts, Row};
use crate::bench_conn::{BResult, Proto, Target};
use crate::client::Client;
use crate::progress::Progress;
use crate::rt::{self, Stream};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Targets: [NAME=]smb://USER:PASS@HOST:PORT/SHARE, [NAME=]nfs4://HOST:PORT/EXPORT,
    /// [NAME=]nfs3://HOST:PORT/EXPORT. Names starting with "duet" are compared with the others.
    #[arg(required = true)]
    pub targets: Vec<String>,
    /// Workloads: smallfile, mdtest, ls, seq, rand, vcopy
    #[arg(long, default_value = "smallfile,mdtest,ls,seq,rand", value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Client counts to run each workload with (one connection and one task per client)
    #[arg(long, default_value = "1,16", value_delimiter = ',')]
    pub clients: Vec<usize>,
    /// Executor threads the client tasks are spread over (0: one per core)
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Files per client (smallfile, mdtest) and files of vcopy
    #[arg(long, default_value_t = 200)]
    pub files: usize,
    /// Size of a small file
    #[arg(long, default_value_t = 4096)]
    pub file_size: usize,
    /// Entries of the `ls -l` directory
    #[arg(long, default_value_t = 10000)]
    pub ls_entries: usize,
    /// Listings per client
    #[arg(long, default_value_t = 3)]
    pub ls_repeat: usize,
    /// Size of the sequential file (bytes; suffixes K, M, G)
    #[arg(long, default_value = "1G")]
    pub seq_size: String,
    /// I/O size of sequential transfers
    #[arg(long, default_value = "1M")]
    pub io_size: String,
    /// Size of each client's random-I/O file
    #[arg(long, default_value = "64M")]
    pub rand_size: String,
    /// Random 4 KiB operations per client (each of write and read)
    #[arg(long, default_value_t = 2000)]
    pub rand_ops: usize,
    /// Working directory under each target's root
    #[arg(long, default_value = "duet-bench")]
    pub dir: String,
    /// Write the results as JSON (`--json` is duetctl's global raw-JSON flag)
    #[arg(long = "json-out", value_name = "FILE")]
    pub json_out: Option<std::path::PathBuf>,
    /// Draw a chart of the results (SVG)
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,
    /// Write the results as a Markdown table
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<std::path::PathBuf>,
    /// Add this many ms of round-trip delay (netns + veth + tc netem; needs root)
    #[arg(long, value_name = "MS")]
    pub latency: Option<u32>,
    /// Measure back-end operations per client chain on duet (uses the admin API:
    /// --addr/--data-dir/--token) and print the table
    #[arg(long)]
    pub report_amplification: bool,
    /// Chains per amplification measurement
    #[arg(long, default_value_t = 100)]
    pub amp_chains: usize,
    /// No progress and per-row lines on stderr
    #[arg(long)]
    pub quiet: bool,
    /// Do not write back this machine's dirty pages (sync) before each
    /// target: its figures then carry the writeback of whatever ran before
    #[arg(long)]
    pub no_flush: bool,
}

pub fn parse_size(s: &str) -> BResult<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().map(|n| n * mul).map_err(|_| format!("bad size {s}"))
}

/// Runs the whole bench; `admin` reads duet's counters when asked.
pub fn bench_main(a: &BenchArgs, admin: Option<(&str, Credentials)>) -> BResult<bool> {
    let targets = a.targets.iter().map(|t| Target::parse(t)).collect::<BResult<Vec<_>>>()?;
    let o = BenchOpts {
        targets: targets.clone(),
        workloads: a.workloads.iter().filter(|w| *w != "vcopy").cloned().collect(),
        clients: a.clients.clone(),
        files: a.files,
        file_size: a.file_size,
        ls_entries: a.ls_entries,
        ls_repeat: a.ls_repeat,
        seq_size: parse_size(&a.seq_size)?,
        io_size: parse_size(&a.io_size)? as usize,
        rand_size: parse_size(&a.rand_size)?,
        rand_ops: a.rand_ops,
        dir: format!(
            "{}/run-{}-{}",
            a.dir.trim_matches('/'),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            std::process::id()
        ),
        quiet: a.quiet,
        threads: match a.threads {
            0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            n => n,
        },
    };
    let mut net = None;
    if let Some(ms) = a.latency {
        net = Some(Netns::setup(ms, &targets)?);
    }
    if !a.quiet {
        eprintln!("{}", bench::text_header());
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut extra = serde_json::Map::new();
    for t in &targets {
        let via = net.as_ref().map(|n| n.via(t));
        if !o.workloads.is_empty() {
            if !a.no_flush {
                flush_dirty_pages(&t.name, a.quiet);
            }
            if let Err(e) = in_netns(net.as_ref(), || rt::block_on(bench::run_target(&o, t, via.as_deref(), &mut rows))) {
                eprintln!("duetctl bench: {}: {e}", t.name);
                rows.push(Row {
                    target: t.name.clone(),
                    url: t.display_url(),
                    proto: t.proto,
                    workload: "setup".into(),
                    clients: 0,
                    ops: 0,
                    bytes: 0,
                    secs: 0.0,
                    p50_us: 0,
                    p99_us: 0,
                    verified: false,
                    error: Some(e),
                });
            }
        }
    }
    if a.workloads.iter().any(|w| w == "vcopy") {
        let mut vc = Vec::new();
        for t in targets.iter().filter(|t| t.proto == Proto::Nfs4) {
            let via = net.as_ref().map(|n| n.via(t)).unwrap_or_else(|| t.addr());
            if !a.no_flush {
                flush_dirty_pages(&t.name, a.quiet);
            }
            match in_netns(net.as_ref(), || rt::block_on(vcopy(t, &via, a.files, a.file_size, a.latency.unwrap_or(0), &mut rows, a.quiet))) {
                Ok(v) => vc.push(v),
                Err(e) => eprintln!("duetctl bench: vcopy {}: {e}", t.name),
            }
        }
        extra.insert("vcopy".into(), Value::Array(vc));
    }
    if let Some(n) = &net {
        extra.insert("latency_ms".into(), json!(n.ms));
    }
    drop(net);
    let mut amp_text = String::new();
    if a.report_amplification {
        let Some((addr, creds)) = admin else { return Err("--report-amplification needs the admin API".into()) };
        let client = Client::new(addr, creds);
        let amp = rt::block_on(amplification(&client, &targets, a.amp_chains))?;
        amp_text = amp_markdown(&amp);
        println!("{amp_text}");
        extra.insert("amplification".into(), Value::Array(amp));
    }
    println!("{}", bench::text_header());
    for r in &rows {
        println!("{}", bench::text_row(r));
    }
    for (w, c, d, p, x) in bench::ratios(&rows) {
        println!("ratio {w} c={c}: {d} / {p} = {x:.2}x");
    }
    let doc = bench::json_doc(&o, &rows, Value::Object(extra));
    if let Some(p) = &a.json_out {
        std::fs::write(p, serde_json::to_string_pretty(&doc).unwrap() + "\n").map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(p) = &a.svg {
        let title = format!("duetctl bench{}", a.latency.map(|m| format!(" (+{m} ms RTT)")).unwrap_or_default());
        std::fs::write(p, bench::svg(&rows, &title)).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if let Some(p) = &a.markdown {
        let mut md = bench::markdown(&rows);
        if let Some(Value::Array(v)) = doc["extra"].get("vcopy") {
            md += "\n| vcopy target | files | latency ms | vectorised s | one-at-a-time s | speed-up | compounds | verified |\n|---|---:|---:|---:|---:|---:|---:|---|\n";
            for x in v {
                md += &format!(
                    "| {} | {} | {} | {:.3} | {:.3} | {:.1}x | {} | {} |\n",
                    x["target"].as_str().unwrap_or(""),
                    x["files"],
                    x["latency_ms"],
                    x["vectorised_s"].as_f64().unwrap_or(0.0),
                    x["one_at_a_time_s"].as_f64().unwrap_or(0.0),
                    x["speedup"].as_f64().unwrap_or(0.0),
                    x["compounds"],
                    x["verified"]
                );
            }
        }
        if !amp_text.is_empty() {
            md += "\n";
            md += &amp_text;
        }
        std::fs::write(p, md).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(rows.iter().all(|r| r.verified))
}

// ---- vectorised copy against one file at a time ----

async fn vcopy(t: &Target, addr: &str, files: usize, size: usize, latency: u32, rows: &mut Vec<Row>, quiet: bool) -> BResult<Value> {
    let mut v = VecClient::new(Nfs4Client::connect(rt::connect(addr).await?, &t.path, 2).await.map_err(|e| format!("connect: {e}"))?);
    let root = v.root();
    let base = v.mkdir_p(&root, "duet-bench/vcopy").await.map_err(|e| format!("mkdir -p: {e}"))?;
    let src = v.mkdir_p(&base, "src").await.map_err(|e| format!("mkdir: {e}"))?;
    let d1 = v.mkdir_p(&base, "dst-vec").await.map_err(|e| format!("mkdir: {e}"))?;
    let d2 = v.mkdir_p(&base, "dst-one").await.map_err(|e| format!("mkdir: {e}"))?;
    let names: Vec<String> = (0..files).map(|i| format!("f{i:05}")).collect();
    let data: Vec<(String, Vec<u8>)> = names.iter().map(|n| (n.clone(), pattern(bench::seed_pub(n), size))).collect();
    v.write_files(&src, &data).await.map_err(|e| format!("write_files: {e}"))?;
    if !quiet {
        eprintln!("{}: vcopy of {files} files, vectorised...", t.name);
    }
    let c0 = v.compounds;
    let t0 = Instant::now();
    let jobs: Vec<(Vec<u8>, String, Vec<u8>, String)> = names.iter().map(|n| (src.clone(), n.clone(), d1.clone(), n.clone())).collect();
    v.copy(&jobs).await.map_err(|e| format!("vectorised copy: {e}"))?;
    let vec_s = t0.elapsed().as_secs_f64();
    let compounds = v.compounds - c0;
    if !quiet {
        eprintln!("{}: vcopy vectorised {vec_s:.3} s; one file at a time...", t.name);
    }
    // One file at a time: OPEN+READ+CLOSE, then OPEN+WRITE+CLOSE (two
    // COMPOUNDs per file, the fewest a non-vectorised client sends).
    let mut one = Nfs4Client::connect(rt::connect(addr).await?, &t.path, 2).await.map_err(|e| format!("connect: {e}"))?;
    let t0 = Instant::now();
    for n in &names {
        let d = one.get_small(&src, n, size as u32 + 1).await.map_err(|e| format!("{n}: {e}"))?;
        one.put_small(&d2, n, &d).await.map_err(|e| format!("{n}: {e}"))?;
    }
    let one_s = t0.elapsed().as_secs_f64();
    // Verify both copies.
    let mut ok = true;
    for d in [&d1, &d2] {
        let got = v.read_files(d, &names, size as u32 + 1).await.map_err(|e| format!("read back: {e}"))?;
        ok &= got.len() == names.len() && got.iter().zip(&names).all(|(g, n)| g.len() == size && check(bench::seed_pub(n), 0, g));
    }
    for d in [&d1, &d2, &src] {
        v.remove(d, &names).await.map_err(|e| format!("cleanup: {e}"))?;
    }
    v.remove(&base, &["src".into(), "dst-vec".into(), "dst-one".into()]).await.map_err(|e| format!("cleanup: {e}"))?;
    if let Ok(db) = v.c.lookup_fh(&root, "duet-bench").await {
        let _ = v.remove(&db, &["vcopy".into()]).await;
        let _ = v.remove(&root, &["duet-bench".into()]).await;
    }
    for (w, s) in [("vcopy-vectorised", vec_s), ("vcopy-one-at-a-time", one_s)] {
        rows.push(Row {
            target: t.name.clone(),
            url: t.display_url(),
            proto: t.proto,
            workload: format!("{w}-{latency}ms"),
            clients: 1,
            ops: files as u64,
            bytes: (files * size) as u64,
            secs: s,
            p50_us: 0,
            p99_us: 0,
            verified: ok,
            error: (!ok).then(|| "copies read back wrong".to_string()),
        });
    }
    Ok(json!({
        "target": t.name, "files": files, "file_size": size, "latency_ms": latency,
        "vectorised_s": vec_s, "one_at_a_time_s": one_s, "speedup": one_s / vec_s.max(1e-9),
        "compounds": compounds, "verified": ok,
    }))
}

// ---- amplification ----

fn stats(c: &Client) -> BResult<Stats> {
    match c.call(&AdminRequest::Stats).map_err(|e| format!("admin API: {e}"))?.response {
        AdminResponse::Stats(s) => Ok(s),
        _ => Err("admin API: not a stats reply".into()),
    }
}

fn per_chain(name: &str, before: &Stats, after: &Stats, n: usize) -> Value {
    let d = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / n as f64;
    let mut tags = Vec::new();
    for r in &after.by_request {
        let prev = before.by_request.iter().find(|p| p.protocol == r.protocol && p.request == r.request);
        let count = r.count - prev.map_or(0, |p| p.count);
        if count > 0 {
            tags.push(json!({"protocol": r.protocol, "request": r.request, "count": count}));
        }
    }
    json!({
        "chain": name, "chains": n,
        "batches": d(before.batches, after.batches),
        "proposals": d(before.proposals, after.proposals),
        "fsyncs": d(before.fsyncs, after.fsyncs),
        "rocksdb_reads": d(before.rocksdb_reads, after.rocksdb_reads),
        "rocksdb_writes": d(before.rocksdb_writes, after.rocksdb_writes),
        "chunk_reads": d(before.chunk_reads, after.chunk_reads),
        "chunk_writes": d(before.chunk_writes, after.chunk_writes),
        "log_writes": d(before.log_writes, after.log_writes),
        "request_tags": tags,
    })
}

/// Runs each client chain `n` times alone against duet and divides the
/// change of duet's counters by `n`.
async fn amplification(admin: &Client, targets: &[Target], n: usize) -> BResult<Vec<Value>> {
    let duet: Vec<&Target> = targets.iter().filter(|t| t.name.starts_with("duet")).collect();
    let mut out = Vec::new();
    let data = pattern(7, 4096);
    // Reads the counters, runs `$body` for $i in 0..n (one chain each,
    // awaited in turn), reads them again.
    macro_rules! measure {
        ($name:expr, $i:ident => $body:expr) => {{
            let b = stats(admin)?;
            for $i in 0..n {
                $body?;
            }
            let a = stats(admin)?;
            out.push(per_chain(&$name, &b, &a, n));
        }};
    }
    let sz = data.len() as u32;
    if let Some(t) = duet.iter().find(|t| t.proto == Proto::Smb) {
        let mut c = t.connect().await?;
        let _ = c.mkdir("amp-smb").await;
        measure!("SMB CREATE+WRITE+CLOSE (4 KiB, one compound)", i => c.put(&format!("amp-smb/f{i}"), &data).await);
        measure!("SMB CREATE+QUERY_INFO+CLOSE (stat)", i => c.stat(&format!("amp-smb/f{i}")).await.map(|_| ()));
        measure!("SMB CREATE+READ+CLOSE (4 KiB)", i => c.get(&format!("amp-smb/f{i}"), sz).await.map(|_| ()));
        // The Windows copy chain: CREATE, SET_INFO(EOF), WRITE, SET_INFO(basic), QUERY_INFO, CLOSE (brief.md).
        let mut raw = smb_raw(t).await?;
        measure!("SMB CREATE+SET_INFO+WRITE+SET_INFO+QUERY_INFO+CLOSE (Windows copy)", i => win_copy(&mut raw, &format!("amp-smb\\w{i}"), &data).await);
        measure!("SMB CREATE(delete-on-close)+CLOSE (remove)", i => c.remove(&format!("amp-smb/f{i}")).await);
        for i in 0..n {
            let _ = c.remove(&format!("amp-smb/w{i}")).await;
        }
        let _ = c.rmdir("amp-smb").await;
    }
    if let Some(t) = duet.iter().find(|t| t.proto == Proto::Nfs4) {
        let mut c = t.connect().await?;
        let _ = c.mkdir("amp-nfs4").await;
        measure!("NFSv4.1 SEQUENCE+PUTFH+OPEN+WRITE+CLOSE (4 KiB, one COMPOUND)", i => c.put(&format!("amp-nfs4/f{i}"), &data).await);
        measure!("NFSv4.1 SEQUENCE+PUTFH+LOOKUP+GETATTR", i => c.stat(&format!("amp-nfs4/f{i}")).await.map(|_| ()));
        measure!("NFSv4.1 SEQUENCE+PUTFH+OPEN+READ+CLOSE", i => c.get(&format!("amp-nfs4/f{i}"), sz).await.map(|_| ()));
        measure!("NFSv4.1 READDIR (whole directory, attrs)", _i => c.list("amp-nfs4").await.map(|_| ()));
        measure!("NFSv4.1 SEQUENCE+PUTFH+REMOVE", i => c.remove(&format!("amp-nfs4/f{i}")).await);
        let _ = c.rmdir("amp-nfs4").await;
        // NFSv3 on the same server and export (MOUNT on the NFS port).
        let s = rt::connect(&t.addr()).await?;
        let mut v3 = Nfs3Client::connect(s, &t.path).await.map_err(|e| format!("nfs3 mount {}: {e}", t.path))?;
        let root = v3.root.clone();
        let dir = {
            let mut v4 = t.connect().await?;
            v4.mkdir("amp-nfs3").await?;
            v3.lookup(&root, "amp-nfs3").await.map_err(|e| e.to_string())?
        };
        let mut fhs: Vec<Vec<u8>> = Vec::with_capacity(n);
        for i in 0..n {
            fhs.push(v3.create(&dir, &format!("f{i}")).await.map_err(|e| e.to_string())?);
        }
        let e = |e: duet_client::Error| e.to_string();
        measure!("NFSv3 WRITE (4 KiB, FILE_SYNC)", i => v3.write(&fhs[i], 0, &data).await.map_err(e));
        measure!("NFSv3 READ (4 KiB)", i => v3.read(&fhs[i], 0, sz).await.map(|_| ()).map_err(e));
        measure!("NFSv3 GETATTR", i => v3.getattr(&fhs[i]).await.map(|_| ()).map_err(e));
        measure!(format!("NFSv3 READDIRPLUS (directory of {n})"), _i => v3.readdirplus(&dir).await.map(|_| ()).map_err(e));
        for i in 0..n {
            let _ = v3.remove(&dir, &format!("f{i}")).await;
        }
        let mut v4 = t.connect().await?;
        let _ = v4.rmdir("amp-nfs3").await;
    }
    Ok(out)
}

async fn smb_raw(t: &Target) -> BResult<SmbClient<Stream>> {
    let s = rt::connect(&t.addr()).await?;
    SmbClient::connect(s, &t.smb_target(&t.addr())).await.map_err(|e| e.to_string())
}

/// MS-SMB2 2.2.39 SET_INFO (FileEndOfFileInformation, FileBasicInformation)
/// inside the Windows small-file copy chain, one related compound.
async fn win_copy(c: &mut SmbClient<Stream>, name: &str, data: &[u8]) -> BResult<()> {
    use duet_client::smb::{self as s, Msg};
    use duet_protocols::smb2::message::Request;
    use duet_protocols::smb2::set_info::SetInfoRequest;
    use duet_protocols::smb2::FileId;
    let eof = (data.len() as u64).to_le_bytes();
    // FileBasicInformation (MS-FSCC 2.4.7): four times (0 = keep) and attributes.
    let mut basic = [0u8; 40];
    basic[32..36].copy_from_slice(&0x20u32.to_le_bytes());
    fn si(class: u8, buf: &[u8]) -> Request<'_> {
        Request::SetInfo(SetInfoRequest { info_type: 1, file_info_class: class, additional_information: 0, file_id: FileId::RELATED, buffer: buf })
    }
    let msgs = vec![
        Msg::new(s::create(name, s::access::GENERIC_READ | s::access::GENERIC_WRITE, s::disposition::OVERWRITE_IF, s::options::NON_DIRECTORY_FILE)),
        Msg::new(si(20, &eof)),
        Msg { req: s::write(FileId::RELATED, 0, data), charge: 1 },
        Msg::new(si(4, &basic)),
        Msg::new(s::query_standard(FileId::RELATED)),
        Msg::new(s::close(FileId::RELATED)),
    ];
    let r = c.call(&msgs, true).await.map_err(|e| e.to_string())?;
    s::check_all(&r, &["CREATE", "SET_INFO", "WRITE", "SET_INFO", "QUERY_INFO", "CLOSE"]).map_err(|e| e.to_string())
}

fn amp_markdown(v: &[Value]) -> String {
    let mut s = String::from(
        "| client chain (duet) | chains | batches | proposals | fsyncs | RocksDB reads | RocksDB writes | chunk reads | chunk writes | log writes | request tags |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for x in v {
        let f = |k: &str| x[k].as_f64().unwrap_or(0.0);
        let tags: Vec<String> = x["request_tags"]
            .as_array()
            .map(|a| a.iter().map(|t| format!("{} {} x{}", t["protocol"].as_str().unwrap_or(""), t["request"].as_str().unwrap_or(""), t["count"])).collect())
            .unwrap_or_default();
        s += &format!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |\n",
            x["chain"].as_str().unwrap_or(""),
            x["chains"],
            f("batches"),
            f("proposals"),
            f("fsyncs"),
            f("rocksdb_reads"),
            f("rocksdb_writes"),
            f("chunk_reads"),
            f("chunk_writes"),
            f("log_writes"),
            tags.join(", ")
        );
    }
    s + "\n(per chain: the change of duet's counters over all chains divided by their number)\n"
}

// ---- latency mode ----

/// A network namespace `duetbench` joined to the host by a veth pair
/// (10.77.0.1 host side, 10.77.0.2 inside) with `tc netem delay MS` on
/// the host side: the round trip from inside grows by MS. The servers
/// listen on loopback, so a forwarder thread per target listens on
/// 10.77.0.1 and relays to the target; the benchmark runs inside the
/// namespace: setns on the thread that runs the coordinating executor, and
/// the client executors it starts inherit the namespace.
pub struct Netns {
    pub ms: u32,
    ports: Vec<(String, u16)>,
    host_ns: Option<std::fs::File>,
}

const NS: &str = "duetbench";

fn sh(args: &[&str]) -> BResult<()> {
    let o = Proc::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !o.status.success() {
        return Err(format!("{}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()));
    }
    Ok(())
}

impl Netns {
    pub fn setup(ms: u32, targets: &[Target]) -> BResult<Netns> {
        let _ = sh(&["ip", "netns", "del", NS]);
        let _ = sh(&["ip", "link", "del", "duetb0"]);
        sh(&["ip", "netns", "add", NS])?;
        sh(&["ip", "link", "add", "duetb0", "type", "veth", "peer", "name", "duetb1"])?;
        sh(&["ip", "link", "set", "duetb1", "netns", NS])?;
        sh(&["ip", "addr", "add", "10.77.0.1/24", "dev", "duetb0"])?;
        sh(&["ip", "link", "set", "duetb0", "up"])?;
        sh(&["ip", "netns", "exec", NS, "ip", "addr", "add", "10.77.0.2/24", "dev", "duetb1"])?;
        sh(&["ip", "netns", "exec", NS, "ip", "link", "set", "duetb1", "up"])?;
        sh(&["ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up"])?;
        // netem where the kernel has it; else the forwarder delays every
        // client-to-server chunk by `ms` (a queue, so pipelining stays).
        let mut fwd_delay = 0;
        if ms > 0 {
            if let Err(e) = sh(&["tc", "qdisc", "add", "dev", "duetb0", "root", "netem", "delay", &format!("{ms}ms")]) {
                eprintln!("duetctl bench: {e}; the forwarder adds the {ms} ms instead");
                fwd_delay = ms;
            }
        }
        let mut ports = Vec::new();
        for t in targets {
            let l = TcpListener::bind("10.77.0.1:0").map_err(|e| format!("forwarder: {e}"))?;
            let port = l.local_addr().unwrap().port();
            let to = t.addr();
            std::thread::spawn(move || forward(l, to, fwd_delay));
            ports.push((t.name.clone(), port));
        }
        let host_ns = std::fs::File::open("/proc/self/ns/net").ok();
        Ok(Netns { ms, ports, host_ns })
    }

    pub fn via(&self, t: &Target) -> String {
        let p = self.ports.iter().find(|(n, _)| n == &t.name).map(|x| x.1).unwrap_or(t.port);
        format!("10.77.0.1:{p}")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh(&["ip", "link", "del", "duetb0"]);
        let _ = sh(&["ip", "netns", "del", NS]);
    }
}

/// Runs `f` on a thread that has joined the namespace (threads it spawns
/// inherit it); without a namespace, runs it here.
fn in_netns<T: Send>(n: Option<&Netns>, f: impl FnOnce() -> BResult<T> + Send) -> BResult<T> {
    let Some(n) = n else { return f() };
    let _ = &n.host_ns;
    std::thread::scope(|s| {
        s.spawn(|| {
            let fd = std::fs::File::open(format!("/run/netns/{NS}")).map_err(|e| format!("netns: {e}"))?;
            use std::os::fd::AsRawFd;
            // SAFETY: setns on this thread only, with a valid namespace fd.
            if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(format!("setns: {}", std::io::Error::last_os_error()));
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err("bench thread panicked".into()))
    })
}

fn forward(l: TcpListener, to: String, delay_ms: u32) {
    for s in l.incoming() {
        let Ok(a) = s else { continue };
        let to = to.clone();
        std::thread::spawn(move || {
            let Ok(b) = TcpStream::connect(&to) else { return };
            let _ = a.set_nodelay(true);
            let _ = b.set_nodelay(true);
            let (a2, b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
            let t = std::thread::spawn(move || {
                if delay_ms > 0 {
                    pump_delayed(a2, b2, std::time::Duration::from_millis(u64::from(delay_ms)))
                } else {
                    pump(a2, b2)
                }
            });
            pump(b, a);
            let _ = t.join();
        });
    }
}

/// Relays `from` to `to`, each chunk `delay` after it was read.
fn pump_delayed(mut from: TcpStream, mut to: TcpStream, delay: std::time::Duration) {
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let w = std::thread::spawn(move || {
        for (at, chunk) in rx {
            let due = at + delay;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = w.join();
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

// ---- cp / rm -r ----

#[derive(Args, Debug)]
pub struct CpArgs {
    /// The NFSv4.2 server and export: nfs4://HOST:PORT/EXPORT
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// Copy directories recursively
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Source path in the export
    pub src: String,
    /// Destination path in the export (must not exist)
    pub dst: String,
    /// No progress on stderr
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Args, Debug)]
pub struct RmArgs {
    /// The NFSv4.1 server and export: nfs4://HOST:PORT/EXPORT
    #[arg(long, value_name = "URL")]
    pub server: String,
    /// Remove directories and their contents (asks first unless --yes)
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// Paths in the export
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// No progress on stderr
    #[arg(short, long)]
    pub quiet: bool,
}

async fn vconnect(url: &str) -> BResult<VecClient<Stream>> {
    let t = Target::parse(url)?;
    if t.proto != Proto::Nfs4 {
        return Err(format!("{url}: cp and rm need an nfs4:// server"));
    }
    let s = rt::connect(&t.addr()).await?;
    VecClient::connect(s, &t.path).await.map_err(|e| format!("{url}: {e}"))
}

fn parent_and_name(p: &str) -> (String, String) {
    let p = p.trim_matches('/');
    match p.rsplit_once('/') {
        Some((d, n)) => (d.to_string(), n.to_string()),
        None => (String::new(), p.to_string()),
    }
}

/// Files per `VecClient::copy` call in `cp -r` (progress between calls).
const COPY_SLICE: usize = 1024;

fn human_bytes(n: u64) -> String {
    let u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut i) = (n as f64, 0);
    while v >= 1024.0 && i < u.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", u[i])
    }
}

/// Server-side copy (NFSv4.2 COPY) with the vectorised API: one round
/// trip per directory level for the listing and the mkdirs, and COMPOUNDs
/// of up to 256 operations for the copies.
pub fn cp_main(a: &CpArgs) -> BResult<String> {
    rt::block_on(cp(a))
}

async fn cp(a: &CpArgs) -> BResult<String> {
    let mut v = vconnect(&a.server).await?;
    let root = v.root();
    let (sp, sn) = parent_and_name(&a.src);
    let (dp, dn) = parent_and_name(&a.dst);
    let sdir = lookup_dir(&mut v, &root, &sp).await?;
    let ddir = v.mkdir_p(&root, &dp).await.map_err(|e| e.to_string())?;
    let st = v.getattrs(&sdir, &[sn.clone()]).await.map_err(|e| format!("{}: {e}", a.src))?;
    if !st[0].directory {
        let n = v.copy(&[(sdir, sn, ddir, dn)]).await.map_err(|e| e.to_string())?;
        return Ok(format!("copied 1 file ({n} bytes)\n"));
    }
    if !a.recursive {
        return Err(format!("{}: is a directory (use -r)", a.src));
    }
    let mut progress = Progress::new("cp", a.quiet);
    progress.update("listing the source tree");
    let sfh = v.c.lookup_fh(&sdir, &sn).await.map_err(|e| e.to_string())?;
    let entries = v.listdir_recursive(&sfh).await.map_err(|e| e.to_string())?;
    let top = v.mkdirs(&ddir, &[dn.clone()]).await.map_err(|e| e.to_string())?;
    let mut dfh: std::collections::HashMap<String, Vec<u8>> = Default::default();
    dfh.insert(String::new(), top[0].clone());
    let mut sfh_of: std::collections::HashMap<String, Vec<u8>> = Default::default();
    sfh_of.insert(String::new(), sfh.clone());
    // Directories level by level, batched.
    let mut dirs: Vec<&vec4::Entry> = entries.iter().filter(|e| e.stat.directory).collect();
    dirs.sort_by_key(|e| e.path.matches('/').count());
    let mut i = 0;
    while i < dirs.len() {
        let depth = dirs[i].path.matches('/').count();
        let level: Vec<&vec4::Entry> = dirs[i..].iter().take_while(|e| e.path.matches('/').count() == depth).copied().collect();
        i += level.len();
        let mut by_parent: std::collections::BTreeMap<String, Vec<&vec4::Entry>> = Default::default();
        for e in level {
            by_parent.entry(parent_and_name(&e.path).0).or_default().push(e);
        }
        for (p, es) in by_parent {
            let names: Vec<String> = es.iter().map(|e| parent_and_name(&e.path).1).collect();
            let fhs = v.mkdirs(&dfh[&p], &names).await.map_err(|e| e.to_string())?;
            for (e, fh) in es.iter().zip(fhs) {
                dfh.insert(e.path.clone(), fh);
                sfh_of.insert(e.path.clone(), e.fh.clone());
            }
        }
    }
    let jobs: Vec<(Vec<u8>, String, Vec<u8>, String)> = entries
        .iter()
        .filter(|e| !e.stat.directory)
        .map(|e| {
            let (p, n) = parent_and_name(&e.path);
            (sfh_of[&p].clone(), n.clone(), dfh[&p].clone(), n)
        })
        .collect();
    // In slices, so that progress is shown between them (each slice still
    // goes out as COMPOUNDs of up to 256 operations).
    let mut bytes = 0;
    for (k, slice) in jobs.chunks(COPY_SLICE).enumerate() {
        bytes += v.copy(slice).await.map_err(|e| e.to_string())?;
        let done = (k * COPY_SLICE + slice.len()).min(jobs.len());
        progress.update(&format!("{done} of {} files, {}", jobs.len(), human_bytes(bytes)));
    }
    progress.finish();
    Ok(format!(
        "copied {} files ({bytes} bytes) and {} directories in {} COMPOUNDs\n",
        jobs.len(),
        dirs.len() + 1,
        v.compounds
    ))
}

/// The handle of an existing directory (no creation, unlike mkdir_p).
async fn lookup_dir(v: &mut VecClient<Stream>, root: &[u8], path: &str) -> BResult<Vec<u8>> {
    let mut fh = root.to_vec();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        fh = v.c.lookup_fh(&fh, c).await.map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(fh)
}

pub fn rm_main(a: &RmArgs) -> BResult<String> {
    rt::block_on(rm(a))
}

async fn rm(a: &RmArgs) -> BResult<String> {
    let mut v = vconnect(&a.server).await?;
    let root = v.root();
    let mut n = 0;
    let mut progress = Progress::new("rm", a.quiet);
    for p in &a.paths {
        let (dp, name) = parent_and_name(p);
        let dir = lookup_dir(&mut v, &root, &dp).await?;
        if a.recursive {
            progress.update(&format!("{p}: listing"));
            let mut show = |done: usize, all: usize| progress.update(&format!("{p}: {done} of {all} entries removed"));
            n += vec4::remove_tree(&mut v, &dir, &name, &mut show).await.map_err(|e| format!("{p}: {e}"))?;
        } else {
            v.remove(&dir, &[name]).await.map_err(|e| format!("{p}: {e}"))?;
            n += 1;
        }
    }
    progress.finish();
    Ok(format!("removed {n} entries in {} COMPOUNDs\n", v.compounds))
}

/// Writes back every file system's dirty pages (sync(2)) before a
/// target runs. The servers compared usually share this machine's disk,
/// and one that answers writes from the page cache (the peers with their
/// defaults) leaves its writeback to land in whatever runs next: a 1 GiB
/// sequential write flushed in the middle of the next target's small-file
/// creates. Each target starts with nothing of the others' left to write.
fn flush_dirty_pages(next: &str, quiet: bool) {
    let t = Instant::now();
    // SAFETY: sync(2) takes no arguments and has no failure mode.
    unsafe { libc::sync() };
    let secs = t.elapsed().as_secs_f64();
    if !quiet && secs >= 0.1 {
        eprintln!("duetctl bench: {secs:.1} s writing back dirty pages before {next}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(super::parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(super::parse_size("4k").unwrap(), 4096);
        assert_eq!(super::parse_size("123").unwrap(), 123);
        assert!(super::parse_size("x").is_err());
    }
}
