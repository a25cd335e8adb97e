//! `duetctl bench` with tiny sizes against a real duetd (SMB and NFSv4.1):
//! every file it writes is read back and verified, the JSON has the
//! expected shape, the amplification report counts one proposal per
//! small-file chain; and a `duetctl cp -r` / `rm -r` round trip on the
//! vectorised NFSv4 API. No timing is asserted. The test drives
//! duet-client (async) on a glommio executor over glommio TCP streams, as
//! duetctl does.

mod common;

use common::Daemon;
use duet_client::vec4::VecClient;
use glommio::net::TcpStream;

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(256 << 10)
        .make()
        .expect("a glommio executor")
        .run(f)
}

async fn tcp(addr: &str) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn setup(d: &Daemon) {
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    d.ok(&["share", "add", "bench", "--path", "/bench", "--no-root-squash"]);
    // The protocol executors learn of new users and shares shortly after
    // the admin API answers: wait until both protocols see them.
    let addr = format!("127.0.0.1:{}", d.nfs_port);
    let smb = duet_client::smb::SmbTarget {
        addr: format!("127.0.0.1:{}", d.smb_port),
        user: "bench".into(),
        password: "benchpw".into(),
        domain: String::new(),
        share: "bench".into(),
        dialects: vec![0x311],
    };
    for i in 0.. {
        let (nfs_ok, smb_ok) = block_on(async {
            let nfs = match tcp(&addr).await {
                Ok(s) => duet_client::nfs4::Nfs4Client::connect(s, "/bench", 1).await.is_ok(),
                Err(_) => false,
            };
            let smb_ok = match tcp(&smb.addr).await {
                Ok(s) => duet_client::smb::SmbClient::connect(s, &smb).await.is_ok(),
                Err(_) => false,
            };
            (nfs, smb_ok)
        });
        if nfs_ok && smb_ok {
            break;
        }
        assert!(i < 200, "the new user and share never became visible (nfs {nfs_ok}, smb {smb_ok})");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn bench_tiny_verifies_and_writes_json() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    setup(&d);
    let json = tmp.path().join("out.json");
    let svg = tmp.path().join("out.svg");
    let smb = format!("duet-smb=smb://bench:benchpw@127.0.0.1:{}/bench", d.smb_port);
    let nfs = format!("duet-nfs=nfs4://127.0.0.1:{}/bench", d.nfs_port);
    let o = d.ctl(&[
        "bench",
        &smb,
        &nfs,
        "--workloads",
        "smallfile,mdtest,ls,seq,rand,vcopy",
        "--clients",
        "1,2",
        "--files",
        "6",
        "--ls-entries",
        "20",
        "--ls-repeat",
        "1",
        "--seq-size",
        "3M",
        "--io-size",
        "256K",
        "--rand-size",
        "256K",
        "--rand-ops",
        "10",
        "--report-amplification",
        "--amp-chains",
        "5",
        "--quiet",
        "--json-out",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "bench failed:\n{out}\n{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let results = v["results"].as_array().expect("results");
    for w in [
        "smallfile-create",
        "smallfile-stat",
        "smallfile-read",
        "smallfile-remove",
        "mdtest-dir-create",
        "mdtest-file-read",
        "mdtest-dir-remove",
        "ls-l-20",
        "seq-write",
        "seq-read",
        "rand-write-4k",
        "rand-read-4k",
        "vcopy-vectorised-0ms",
        "vcopy-one-at-a-time-0ms",
    ] {
        for t in ["duet-smb", "duet-nfs"] {
            if w.starts_with("vcopy") && t == "duet-smb" {
                continue;
            }
            let rows: Vec<&serde_json::Value> = results.iter().filter(|r| r["workload"] == w && r["target"] == t).collect();
            assert!(!rows.is_empty(), "no {w} row for {t}");
            for r in rows {
                assert_eq!(r["verified"], true, "{r}");
                assert!(r["ops"].as_u64().unwrap() > 0, "{r}");
                for k in ["ops_per_s", "mb_per_s", "p50_us", "p99_us", "seconds", "clients", "protocol", "url"] {
                    assert!(!r[k].is_null(), "{k} missing in {r}");
                }
            }
        }
    }
    // Client counts 1 and 2 both ran the small-file phases.
    let creates: Vec<u64> =
        results.iter().filter(|r| r["workload"] == "smallfile-create" && r["target"] == "duet-nfs").map(|r| r["ops"].as_u64().unwrap()).collect();
    assert_eq!(creates, vec![6, 12]);
    // One client chain, one proposal: the small-file chains of both protocols.
    let amp = v["extra"]["amplification"].as_array().expect("amplification");
    for chain in ["SMB CREATE+WRITE+CLOSE", "NFSv4.1 SEQUENCE+PUTFH+OPEN+WRITE+CLOSE", "NFSv3 WRITE"] {
        let a = amp.iter().find(|a| a["chain"].as_str().unwrap().starts_with(chain)).unwrap_or_else(|| panic!("{chain} missing"));
        assert_eq!(a["proposals"].as_f64(), Some(1.0), "{a}");
    }
    for chain in ["SMB CREATE+QUERY_INFO+CLOSE", "NFSv3 GETATTR", "NFSv3 READ"] {
        let a = amp.iter().find(|a| a["chain"].as_str().unwrap().starts_with(chain)).unwrap();
        assert_eq!(a["proposals"].as_f64(), Some(0.0), "{a}");
    }
    let vc = &v["extra"]["vcopy"][0];
    assert_eq!(vc["verified"], true, "{vc}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("smallfile-create") && svg.trim_end().ends_with("</svg>"));
}

#[test]
fn cp_and_rm_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    setup(&d);
    let url = format!("nfs4://127.0.0.1:{}/bench", d.nfs_port);
    let addr = format!("127.0.0.1:{}", d.nfs_port);
    block_on(async {
        let mut v = VecClient::connect(tcp(&addr).await.unwrap(), "/bench").await.unwrap();
        let root = v.root();
        // src/{f0..f39}, src/a/{g0..g9}, src/a/b/h: small files (stored
        // inline), and src/a/b/big: 70 MiB in chunks, more than one COPY moves
        // (64 MiB), so the client continues a short copy.
        let src = v.mkdir_p(&root, "src").await.unwrap();
        let a = v.mkdir_p(&root, "src/a/b").await.unwrap();
        let adir = v.c.lookup_fh(&src, "a").await.unwrap();
        let data = |i: usize| -> Vec<u8> { (0..400 + i * 7).map(|k| (k * 31 + i) as u8).collect() };
        let files: Vec<(String, Vec<u8>)> = (0..40).map(|i| (format!("f{i}"), data(i))).collect();
        v.write_files(&src, &files).await.unwrap();
        let g: Vec<(String, Vec<u8>)> = (0..10).map(|i| (format!("g{i}"), data(100 + i))).collect();
        v.write_files(&adir, &g).await.unwrap();
        v.write_files(&a, &[("h".to_string(), data(3))]).await.unwrap();
        const BIG: u64 = 70 << 20;
        let pat = |off: u64, b: &mut [u8]| {
            for (k, x) in b.iter_mut().enumerate() {
                *x = ((off + k as u64) * 2_654_435_761 >> 24) as u8;
            }
        };
        let (fh, st) = v.c.open_file(&a, "big", true).await.unwrap();
        v.c.write_stream(&fh, st, BIG, 1 << 20, &mut |o, b| pat(o, b)).await.unwrap();
        v.c.close_file(&fh, st).await.unwrap();

        let out = d.ok(&["cp", "-r", "--server", &url, "src", "dst/copy"]);
        assert!(out.contains("copied 52 files"), "{out}");
        assert!(!out.contains('\r'), "progress on stdout: {out:?}");
        let dst = v.mkdir_p(&root, "dst/copy").await.unwrap();
        let names: Vec<String> = files.iter().map(|f| f.0.clone()).collect();
        let got = v.read_files(&dst, &names, 1 << 16).await.unwrap();
        assert_eq!(got, files.iter().map(|f| f.1.clone()).collect::<Vec<_>>());
        let dst_a = v.c.lookup_fh(&dst, "a").await.unwrap();
        let gnames: Vec<String> = g.iter().map(|f| f.0.clone()).collect();
        assert_eq!(v.read_files(&dst_a, &gnames, 1 << 16).await.unwrap(), g.iter().map(|f| f.1.clone()).collect::<Vec<_>>());
        let dst_b = v.c.lookup_fh(&dst_a, "b").await.unwrap();
        assert_eq!(v.read_files(&dst_b, &["h".to_string()], 1 << 16).await.unwrap(), vec![data(3)]);
        let (fh, st) = v.c.open_file(&dst_b, "big", false).await.unwrap();
        let mut want = vec![0u8; 1 << 20];
        v.c.read_stream(&fh, st, BIG, 1 << 20, &mut |o, d| {
            pat(o, &mut want[..d.len()]);
            assert!(d == &want[..d.len()], "the copy of big differs at {o}");
            Ok(())
        })
        .await
        .unwrap();
        v.c.close_file(&fh, st).await.unwrap();
        // The listing sees the whole copied tree.
        let listed = v.listdir_recursive(&dst).await.unwrap();
        assert_eq!(listed.len(), 40 + 1 + 10 + 1 + 2);

        let out = d.ok(&["rm", "-r", "--yes", "--server", &url, "src", "dst"]);
        assert!(out.contains("removed"), "{out}");
        let left = v.listdir_recursive(&root).await.unwrap();
        assert!(left.iter().all(|e| !e.path.starts_with("src") && !e.path.starts_with("dst")), "{left:?}");
    });
}
