//! NFS on every executor (issue 13): with `executors = 2` both protocol
//! executors accept NFS connections on the one port (SO_REUSEPORT), and
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
