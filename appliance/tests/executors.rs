//! NFS on every executor (issue 13): with `executors = 2` both protocol
//! executors serve NFS connections of the one port (executor 0 accepts and
//! hands them out in turn), and
//! the NFSv4 state (clients, sessions, opens) is the daemon's one, not an
//! executor's: a session made on one TCP connection serves calls on 24
//! others, wherever the kernel placed them, with the stateid of an OPEN
//! made on the first; a share reservation holds across them; the bytes
//! each wrote read back. `duetctl --json stats` shows both executors
//! accepted NFS connections (`connections.by_executor`), so the test
//! fails if NFS listened on one executor only, or if a connection on the
//! other executor saw a state of its own (NFS4ERR_BADSESSION).

mod clients;
mod common;

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::{Name, Opaque};

/// OPEN of an existing `name` for writing (deny none), as another owner:
/// its status.
fn open_for_write(c: &mut Nfs, s: &mut Sess, dir: &[u8], owner: &[u8], name: &str) -> Nfsstat4 {
    let seq = s.sequence();
    let rep = c
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(dir) }),
            ArgOp4::Open(Open4Args {
                seqid: 0,
                share_access: share::ACCESS_WRITE,
                share_deny: share::DENY_NONE,
                owner: StateOwner4 { clientid: s.clientid, owner: Opaque(owner) },
                openhow: OpenFlag4::NoCreate,
                claim: OpenClaim4::Null(Name(name.as_bytes())),
            }),
        ])
        .expect("OPEN reply");
    res4(&rep).status
}

#[test]
fn nfs_connections_of_every_executor_share_one_nfsv4_state() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(tmp.path(), "executors = 2", "", "portmap = false");
    let mut first = Nfs::connect(d.nfs_port).as_user(0, 0);
    let root = first.mount("/public").expect("MOUNT /public");
    let mut s = session(&mut first, b"executors-test", 1 << 20, 64);
    let (sid, fh) = open4_fh(&mut first, &mut s, &root, b"writer", "spread.bin").expect("NFSv4.1 OPEN");
    // A reservation that denies writers, by a second owner of the client.
    let seq = s.sequence();
    let rep = first
        .v4(vec![
            seq,
            ArgOp4::PutFh(PutFh4Args { object: Opaque(&root) }),
            ArgOp4::Open(Open4Args {
                seqid: 0,
                share_access: share::ACCESS_READ,
                share_deny: share::DENY_WRITE,
                owner: StateOwner4 { clientid: s.clientid, owner: Opaque(b"reader") },
                openhow: OpenFlag4::Create(CreateHow4::Unchecked(Fattr4 { attrmask: Bitmap4::new(), attr_vals: Opaque(b"") })),
                claim: OpenClaim4::Null(Name(b"guarded")),
            }),
        ])
        .unwrap();
    assert_eq!(res4(&rep).status, Nfsstat4::OK, "OPEN deny WRITE");
    const CONNS: usize = 24;
    let mut others: Vec<Nfs> = (0..CONNS).map(|_| Nfs::connect(d.nfs_port).as_user(0, 0)).collect();
    for (k, c) in others.iter_mut().enumerate() {
        // The first connection's session and stateid, on this one.
        let seq = s.sequence();
        let data = [k as u8; 8];
        let rep = c
            .v4(vec![
                seq,
                ArgOp4::PutFh(PutFh4Args { object: Opaque(&fh) }),
                ArgOp4::Write(Write4Args { stateid: sid, offset: 8 * k as u64, stable: StableHow4::FileSync, data: Opaque(&data) }),
            ])
            .expect("WRITE reply");
        let r = res4(&rep);
        assert_eq!(r.status, Nfsstat4::OK, "connection {k}: WRITE with the session and stateid of another connection: {r:?}");
        // The reservation made on the first connection holds here.
        assert_eq!(open_for_write(c, &mut s, &root, b"intruder", "guarded"), Nfsstat4::SHARE_DENIED, "connection {k}");
    }
    let seq = s.sequence();
    let rep = first
        .v4(vec![seq, ArgOp4::PutFh(PutFh4Args { object: Opaque(&fh) }), duet_client::nfs4::read(sid, 0, (8 * CONNS) as u32)])
        .unwrap();
    let r = res4(&rep);
    let (data, _) = duet_client::nfs4::read_data(&r.results).expect("READ");
    let want: Vec<u8> = (0..CONNS).flat_map(|k| [k as u8; 8]).collect();
    assert_eq!(data, want, "every connection's bytes, in place");
    // Both executors took NFS connections (25 of them, and the harness's
    // probe): the state above was shared, not one executor's.
    let v: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "stats"])).unwrap();
    let by: Vec<u64> = v["connections"]["by_executor"]
        .as_array()
        .unwrap_or_else(|| panic!("no by_executor in {v}"))
        .iter()
        .map(|e| e["accepted_nfs"].as_u64().unwrap())
        .collect();
    assert_eq!(by.len(), 2, "two executors: {by:?}");
    assert!(by.iter().all(|n| *n > 0), "NFS connections accepted by each executor: {by:?}");
    assert_eq!(by.iter().sum::<u64>(), v["connections"]["accepted_nfs"].as_u64().unwrap());
}

/// A second duetd given a port the first serves (its SMB, NFS or admin
/// address) does not start beside it: it exits naming the address. Before
/// duet bound its listeners itself, glommio's SO_REUSEPORT let the second
/// bind too, and the kernel split new connections between the two daemons
/// (duetctl reached the wrong one and its token was refused). The first
/// daemon, with two executors, goes on serving every connection.
#[test]
fn a_second_daemon_on_a_served_port_fails_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first");
    std::fs::create_dir_all(&first).unwrap();
    let d = Daemon::start_top(&first, "executors = 2", "", "portmap = false");
    let admin_port: u16 = d.admin.rsplit(':').next().unwrap().parse().unwrap();
    for (what, smb, nfs, admin) in [
        ("SMB", d.smb_port, common::free_port(), common::free_port()),
        ("NFS", common::free_port(), d.nfs_port, common::free_port()),
        ("admin API", common::free_port(), common::free_port(), admin_port),
    ] {
        let dir = tmp.path().join(format!("second-{}", what.replace(' ', "-")));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("duetd.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = {:?}\nexecutors = 2\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
                 [smb]\nlisten = \"127.0.0.1:{smb}\"\n[nfs]\nlisten = \"127.0.0.1:{nfs}\"\nportmap = false\n",
                dir.join("data")
            ),
        )
        .unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_duetd"))
            .args(["--config", config.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("a second duetd on the first one's {what} port kept running");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(!status.success(), "{what}: {status:?}\n{err}");
        let port = match what {
            "SMB" => d.smb_port,
            "NFS" => d.nfs_port,
            _ => admin_port,
        };
        let want = format!("cannot listen on 127.0.0.1:{port} ({what})");
        assert!(err.contains(&want) && err.to_lowercase().contains("in use"), "{what}: wanted {want:?}:\n{err}");
    }
    // Every connection still reaches the first daemon, on either executor.
    for _ in 0..20 {
        d.ok(&["stats"]);
    }
    let mut conns: Vec<Nfs> = (0..8).map(|_| Nfs::connect(d.nfs_port).as_user(0, 0)).collect();
    for c in conns.iter_mut() {
        c.mount("/public").expect("MOUNT /public through the first daemon");
    }
    let v: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "stats"])).unwrap();
    let by: Vec<u64> = v["connections"]["by_executor"].as_array().unwrap().iter().map(|e| e["accepted_nfs"].as_u64().unwrap()).collect();
    assert!(by.len() == 2 && by.iter().all(|n| *n > 0), "connections handed to both executors: {by:?}");
}
