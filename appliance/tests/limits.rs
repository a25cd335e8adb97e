//! Every `[limits]` key against a real duetd (docs/limits.md): a client
//! that goes over one gets the protocol's error or loses its connection;
//! other clients keep their service. Each test "machine" is its own
//! loopback address (127.0.0.x).

mod clients;
mod common;

use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::rpc::*;
use duet_protocols::nfs::xdr::{Opaque, XdrEncode};
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::negotiate::{dialect, NegotiateRequest};
use duet_protocols::smb2::status::NtStatus;

const SMALL: &str =
    "\n[limits]\nconnections = 40\nconnections_per_client = 8\nsmb_message_max = 262144\n\
nfs_record_max = 262144\nnfs_compound_ops = 16\nsmb_credits = 64\nsmb_open_files_per_session = 10\n\
nfs_open_files_per_client = 10\nsmb_transact_max = 65536\nnfs_readdir_max = 8192\n";

fn start(dir: &std::path::Path, limits: &str) -> Daemon {
    let d = Daemon::start_with(dir, limits);
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    // The executors' catalog refreshes every second.
    std::thread::sleep(Duration::from_millis(2500));
    d
}

/// NFS NULL on a new connection from `src` answers.
fn nfs_serves(port: u16, src: Ipv4Addr) -> bool {
    let Ok(s) = connect_from(src, port) else {
        return false;
    };
    let mut c = Nfs {
        s,
        xid: 1,
        uid: 0,
        gid: 0,
    };
    c.null() == Some(AcceptedReplyData::Success)
}

/// Waits (bounded) until a connection from `src` is served again, after
/// the server has seen other connections close.
fn wait_served(port: u16, src: Ipv4Addr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !nfs_serves(port, src) {
        assert!(
            Instant::now() < deadline,
            "connections from {src} never served again"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn connection_limits_per_client_and_in_total() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(tmp.path(), SMALL);
    let (smb, nfs) = (d.smb_port, d.nfs_port);

    // Eight from 127.0.0.2 (both protocols count), each served.
    let mut held: Vec<Nfs> = Vec::new();
    for _ in 0..6 {
        let mut c = Nfs::connect_from(ip(2), nfs);
        assert_eq!(c.null(), Some(AcceptedReplyData::Success));
        held.push(c);
    }
    let mut smbs: Vec<Smb> = (0..2).map(|_| Smb::connect_from(ip(2), smb)).collect();
    for s in &mut smbs {
        s.negotiate();
    }
    // The ninth from that address is closed at once, on either port.
    let mut ninth = connect_from(ip(2), nfs).unwrap();
    assert!(
        closed_by_server(&mut ninth),
        "a 9th NFS connection from one address is closed"
    );
    let mut ninth = connect_from(ip(2), smb).unwrap();
    assert!(
        closed_by_server(&mut ninth),
        "a 9th SMB connection from one address is closed"
    );
    // Another address is served meanwhile.
    assert!(nfs_serves(nfs, ip(3)), "another client keeps its service");

    // Total: 8 (127.0.0.2) + 4 x 8 = 40 connections; the 41st is closed
    // whatever its address.
    for a in 4..8 {
        for _ in 0..8 {
            let mut c = Nfs::connect_from(ip(a), nfs);
            assert_eq!(
                c.null(),
                Some(AcceptedReplyData::Success),
                "connection from 127.0.0.{a}"
            );
            held.push(c);
        }
    }
    let mut over = connect_from(ip(9), nfs).unwrap();
    assert!(closed_by_server(&mut over), "the 41st connection is closed");
    // One closes: a place is free again.
    held.pop();
    wait_served(nfs, ip(9));
    drop(held);
    drop(smbs);
    wait_served(nfs, ip(2));
    assert!(
        d.log_text()
            .contains("limits.connections_per_client reached"),
        "refusals are logged"
    );
    assert!(
        d.log_text().contains("limits.connections reached"),
        "refusals are logged"
    );
}

#[test]
fn message_record_compound_credit_open_and_enumeration_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = start(tmp.path(), SMALL);
    let (smb, nfs) = (d.smb_port, d.nfs_port);

    // SMB: MaxWriteSize/MaxReadSize fit in smb_message_max (256 KiB less
    // 64 KiB) and MaxTransactSize is smb_transact_max.
    let mut c = Smb::connect(smb);
    let neg = NegotiateRequest {
        security_mode: 1,
        capabilities: 0,
        client_guid: [0x44; 16],
        client_start_time: 0,
        dialects: vec![dialect::SMB2_1],
        negotiate_contexts: Vec::new(),
    };
    let r = c.call(Request::Negotiate(neg), Cmd::NEGOTIATE);
    let Ok(Response::Negotiate(n)) = Response::decode(&r.header, &r.bytes) else {
        panic!("negotiate")
    };
    assert_eq!(
        (n.max_write_size, n.max_read_size, n.max_transact_size),
        (192 << 10, 192 << 10, 64 << 10)
    );

    // A message over smb_message_max: the connection is dropped unread.
    let mut raw = connect_from(ip(1), smb).unwrap();
    raw.write_all(&((256u32 << 10) + 1).to_be_bytes()).unwrap();
    let _ = raw.write_all(&[0xFE, b'S', b'M', b'B']);
    assert!(closed_by_server(&mut raw), "an SMB message over 256 KiB");

    // A record over nfs_record_max (announced in one fragment): closed.
    let mut raw = connect_from(ip(1), nfs).unwrap();
    raw.write_all(&(LAST_FRAGMENT | ((256u32 << 10) + 1)).to_be_bytes())
        .unwrap();
    assert!(closed_by_server(&mut raw), "an RPC record over 256 KiB");

    // SMB credits: asking for 1000 in every request never leaves more than
    // smb_credits outstanding; a message id past the granted window closes
    // the connection (MS-SMB2 3.3.5.2.3).
    let mut c = Smb::connect(smb);
    c.credit_request = 1000;
    c.negotiate();
    assert_eq!(c.login("bench", "benchpw"), NtStatus::SUCCESS);
    assert_eq!(c.tree("public"), NtStatus::SUCCESS);
    let outstanding = c.granted + 1 - c.next_id; // ids 0..next_id used, id 0 free
    assert!(
        outstanding <= 64,
        "{outstanding} credits outstanding with smb_credits = 64"
    );
    assert!(
        outstanding >= 32,
        "the client did get credits: {outstanding}"
    );
    c.next_id = c.granted + 1 + 4 * 64 + 10;
    let m = c.raw(Cmd::ECHO, &[4, 0, 0, 0], true);
    let _ = c.send(&m);
    assert!(
        closed_by_server(&mut c.tcp),
        "a message id outside the credit window"
    );

    // Open files per SMB session: ten, then STATUS_TOO_MANY_OPENED_FILES;
    // a CLOSE makes room again.
    let mut c = Smb::logged_on(smb, "bench", "benchpw", "public");
    let mut fids = Vec::new();
    for i in 0..10 {
        fids.push(
            c.create(&format!("open-{i}.txt"))
                .unwrap_or_else(|e| panic!("open {i}: {e:?}")),
        );
    }
    assert_eq!(
        c.create("open-10.txt"),
        Err(NtStatus::TOO_MANY_OPENED_FILES),
        "the 11th open"
    );
    assert_eq!(c.close(fids.pop().unwrap()), NtStatus::SUCCESS);
    let f = c.create("open-10.txt").expect("an open after a close");
    fids.push(f);
    // Another session (connection) has its own allowance.
    let mut other = Smb::logged_on(smb, "bench", "benchpw", "public");
    let f2 = other.create("open-0.txt").expect("another session opens");
    other.close(f2);

    // QUERY_DIRECTORY: an output buffer over smb_transact_max is
    // STATUS_INVALID_PARAMETER (MS-SMB2 3.3.5.18); at the limit it works.
    for f in fids {
        c.close(f);
    }
    let dir = c.open_dir("").expect("open the share root");
    assert_eq!(
        c.query_dir(dir, (64 << 10) + 1, true).0,
        NtStatus::INVALID_PARAMETER
    );
    let (st, n) = c.query_dir(dir, 64 << 10, true);
    assert_eq!(st, NtStatus::SUCCESS);
    assert!(n > 0 && n <= 64 << 10, "{n} bytes of entries");
    c.close(dir);

    // NFSv4.1: ca_maxoperations is capped to nfs_compound_ops (16); 17
    // operations get NFS4ERR_TOO_MANY_OPS (RFC 8881 18.36.3, 18.46.3).
    let mut n4 = Nfs::connect(nfs);
    let root = n4.mount("/public").unwrap();
    let mut s = session(&mut n4, b"limits-1", 1 << 20, 1000);
    assert_eq!(s.max_ops, 16, "negotiated ca_maxoperations");
    assert!(
        s.max_req <= 256 << 10,
        "ca_maxrequestsize {} fits in a record",
        s.max_req
    );
    let mut ops = vec![s.sequence()];
    for _ in 0..16 {
        ops.push(ArgOp4::PutRootFh(()));
    }
    let r = n4.v4(ops).unwrap();
    assert_eq!(res4(&r).status, Nfsstat4::TOO_MANY_OPS);
    s.seq -= 1;

    // Open stateids per NFSv4 client: ten, then NFS4ERR_RESOURCE; another
    // client may still open.
    for i in 0..10 {
        open4(&mut n4, &mut s, &root, b"owner", &format!("v4open-{i}"))
            .unwrap_or_else(|e| panic!("OPEN {i}: {e:?}"));
    }
    assert_eq!(
        open4(&mut n4, &mut s, &root, b"owner", "v4open-10"),
        Err(Nfsstat4::RESOURCE),
        "the 11th open state"
    );
    let mut s2 = session(&mut n4, b"limits-2", 1 << 20, 16);
    open4(&mut n4, &mut s2, &root, b"owner", "v4open-10").expect("another client opens");

    // READDIR: a 1 MiB count is capped to nfs_readdir_max (8 KiB); the
    // listing continues by cookie and finds every entry.
    let mut c3 = Nfs::connect(nfs).as_user(0, 0);
    let dirh = {
        let rep = c3.v3(&Nfs3Args::Mkdir(Mkdir3Args {
            where_: DirOpArgs3 {
                dir: Opaque(&root),
                name: duet_protocols::nfs::xdr::Name(b"many"),
            },
            attributes: Sattr3 {
                mode: Some(0o777),
                ..Default::default()
            },
        }));
        match results3(proc3::MKDIR, &rep) {
            Nfs3Results::Mkdir(Nfs3Res::Ok(ok)) => ok.obj.unwrap().0.to_vec(),
            other => panic!("{other:?}"),
        }
    };
    let names: Vec<String> = (0..300)
        .map(|i| format!("entry-with-a-longish-name-{i:04}"))
        .collect();
    for n in &names {
        c3.create3(&dirh, n).unwrap();
    }
    let (mut cookie, mut verf, mut seen, mut replies) = (0u64, [0u8; 8], 0usize, 0);
    loop {
        let rep = c3.v3(&Nfs3Args::ReadDir(ReadDir3Args {
            dir: Opaque(&dirh),
            cookie,
            cookieverf: verf,
            count: 1 << 20,
        }));
        assert!(
            rep.len() <= 8192 + 512,
            "a READDIR reply of {} bytes with nfs_readdir_max = 8192",
            rep.len()
        );
        replies += 1;
        let Nfs3Results::ReadDir(Nfs3Res::Ok(ok)) = results3(proc3::READDIR, &rep) else {
            panic!("READDIR")
        };
        verf = ok.cookieverf;
        let entries = &ok.reply.entries.0;
        seen += entries
            .iter()
            .filter(|e| e.name.0.starts_with(b"entry-"))
            .count();
        if ok.reply.eof {
            break;
        }
        cookie = entries.last().expect("entries before eof").cookie;
        assert!(replies < 1000);
    }
    assert_eq!(seen, names.len(), "every entry listed");
    assert!(replies > 1, "the listing took {replies} replies");

    assert!(d.alive());
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

/// Pipelines `n` NFS NULL calls on a connection from `src` without reading
/// a reply, then drops it.
fn pipeline_flood(port: u16, src: Ipv4Addr, n: usize) {
    let Ok(s) = connect_from(src, port) else {
        return;
    };
    let mut c = Nfs {
        s,
        xid: 1,
        uid: 0,
        gid: 0,
    };
    let mut out = Vec::new();
    for _ in 0..n {
        let rec = c.call_record(PROGRAM_NFS, 3, 0, &[]);
        write_record(&rec, &mut out);
    }
    let _ = c.s.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = c.s.write_all(&out);
}

#[test]
fn one_client_flooding_does_not_stop_another() {
    let tmp = tempfile::tempdir().unwrap();
    let d = start(tmp.path(), "\n[limits]\nconnections_per_client = 32\n");
    let (smb, nfs) = (d.smb_port, d.nfs_port);

    // The well-behaved client (127.0.0.3): SMB create/write/read/close and
    // an NFSv3 GETATTR, timed per round.
    let work = move |rounds: usize, tag: &str| -> Vec<Duration> {
        let mut c = Smb::logged_on(smb, "bench", "benchpw", "public");
        let mut n = Nfs::connect_from(ip(3), nfs);
        let root = n.mount("/public").unwrap();
        let mut times = Vec::new();
        for i in 0..rounds {
            let t = Instant::now();
            let name = format!("{tag}-{i}.txt");
            let f = c.create(&name).expect("create under flood");
            let body = format!("round {i} of {tag}").into_bytes();
            assert_eq!(c.write(f, 0, &body, true), NtStatus::SUCCESS);
            assert_eq!(c.read(f, 0, 100).unwrap(), body);
            assert_eq!(c.close(f), NtStatus::SUCCESS);
            let rep = n.v3(&Nfs3Args::GetAttr(GetAttr3Args {
                object: Opaque(&root),
            }));
            assert!(matches!(
                results3(proc3::GETATTR, &rep),
                Nfs3Results::GetAttr(Nfs3Res::Ok(_))
            ));
            times.push(t.elapsed());
        }
        times
    };
    let quiet = work(30, "quiet");

    // The flood, from 127.0.0.2: connection storms (beyond its 32),
    // oversize frames, pipelined calls nobody reads, garbage.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut flooders = Vec::new();
    for k in 0..4 {
        let stop = stop.clone();
        flooders.push(std::thread::spawn(move || {
            let mut made = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut conns = Vec::new();
                for _ in 0..50 {
                    if let Ok(s) = connect_from(ip(2), if k % 2 == 0 { smb } else { nfs }) {
                        conns.push(s);
                        made += 1;
                    }
                }
                for s in conns.iter_mut() {
                    let _ = s.write_all(&(64u32 << 20).to_be_bytes());
                    let _ = s.write_all(&[0xFE, b'S', b'M', b'B', 0xde, 0xad]);
                }
                drop(conns);
                pipeline_flood(nfs, ip(2), 5000);
            }
            made
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    let flooded = work(30, "flooded");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let made: u64 = flooders.into_iter().map(|t| t.join().unwrap()).sum();

    let stats = |v: &[Duration]| {
        let mut s = v.to_vec();
        s.sort();
        (s[s.len() / 2], s[s.len() - 1])
    };
    let (q50, qmax) = stats(&quiet);
    let (f50, fmax) = stats(&flooded);
    println!(
        "round (SMB create+write-through+read+close, NFS GETATTR): quiet p50 {q50:?} max {qmax:?}; \
         under flood ({made} flood connections from one address) p50 {f50:?} max {fmax:?}"
    );
    assert!(
        made > 32,
        "the flood made more connections than its address may hold"
    );
    assert!(nfs_serves(nfs, ip(4)));
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

/// Sends `n` NFSv3 FILE_SYNC WRITEs of 4 KiB on one connection without
/// waiting for replies, reads every reply, and checks the file. Returns
/// the metadata fsyncs the daemon made meanwhile.
fn pipelined_writes(d: &Daemon, name: &str, n: usize) -> u64 {
    let fsyncs = || {
        let v: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "stats"])).unwrap();
        v["fsyncs"].as_u64().unwrap()
    };
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    let fh = c.create3(&root, name).unwrap();
    let before = fsyncs();
    let mut out = Vec::new();
    let mut xids = std::collections::HashSet::new();
    let block = |i: usize| vec![(i % 251) as u8; 4096];
    for i in 0..n {
        let data = block(i);
        let mut w = duet_protocols::nfs::xdr::XdrWriter::new();
        Nfs3Args::Write(Write3Args {
            file: Opaque(&fh),
            offset: (i * 4096) as u64,
            count: 4096,
            stable: StableHow::FileSync,
            data: Opaque(&data),
        })
        .encode(&mut w);
        let rec = c.call_record(PROGRAM_NFS, 3, proc3::WRITE, &w.into_inner());
        xids.insert(c.xid);
        write_record(&rec, &mut out);
    }
    let mut tx = c.s.try_clone().unwrap();
    let sender = std::thread::spawn(move || tx.write_all(&out).unwrap());
    for _ in 0..n {
        let rep = c.read_reply().expect("a reply to every pipelined WRITE");
        let xid = u32::from_be_bytes(rep[..4].try_into().unwrap());
        assert!(xids.remove(&xid), "reply to an unknown or repeated xid {xid}");
        match results3(proc3::WRITE, &rep) {
            Nfs3Results::Write(Nfs3Res::Ok(ok)) => {
                assert_eq!((ok.count, ok.committed), (4096, StableHow::FileSync))
            }
            other => panic!("pipelined WRITE: {other:?}"),
        }
    }
    sender.join().unwrap();
    let spent = fsyncs() - before;
    let got = c.read3_all(&fh).unwrap();
    assert_eq!(got.len(), n * 4096);
    for i in 0..n {
        assert!(got[i * 4096..(i + 1) * 4096] == block(i)[..], "block {i} of {name}");
    }
    spent
}

/// `requests_per_connection`: requests of one connection run together up
/// to the limit. Pipelined FILE_SYNC WRITEs then share the metadata fsyncs
/// (group commit); with a limit of 1 each waits for the one before and
/// pays its own.
#[test]
fn requests_per_connection_bounds_what_runs_at_once() {
    const N: usize = 300;
    let tmp = tempfile::tempdir().unwrap();
    for sub in ["one", "many"] {
        std::fs::create_dir_all(tmp.path().join(sub)).unwrap();
    }
    let d = start(&tmp.path().join("one"), "\n[limits]\nrequests_per_connection = 1\n");
    let serial = pipelined_writes(&d, "serial.bin", N);
    drop(d);
    let d = start(&tmp.path().join("many"), "\n[limits]\nrequests_per_connection = 64\n");
    let together = pipelined_writes(&d, "together.bin", N);
    println!("{N} pipelined FILE_SYNC WRITEs: {serial} metadata fsyncs with requests_per_connection = 1, {together} with 64");
    assert!(serial >= N as u64, "one at a time: one commit, one fsync each ({serial})");
    assert!(together < N as u64 * 3 / 4, "64 at a time share fsyncs ({together} for {N} WRITEs)");
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}
