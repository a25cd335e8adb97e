//! `duetctl share modify` and `user modify` against a real duetd with
//! clients connected: the change takes effect without cutting anyone off.
//! NFS sees a share's new options at its next request after the catalog
//! refresh (about a second); an SMB tree keeps the options it connected
//! with, and a new TREE_CONNECT gets the new ones. A disabled user's new
//! logons are refused; an enabled one logs on again.

mod clients;
mod common;

use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs3::Nfsstat3;
use duet_protocols::smb2::status::NtStatus;

/// Polls `f` until it is true or 10 s pass (the executors refresh their
/// catalog every second).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn share_and_user_modify_apply_in_place_without_disconnecting() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    d.ok(&["share", "add", "proj", "--path", "/proj", "--no-root-squash"]);
    std::thread::sleep(Duration::from_millis(2500));

    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "proj");
    let f = c.create("before.txt").unwrap();
    assert_eq!(c.write(f, 0, b"written before", false), NtStatus::SUCCESS);
    c.close(f);
    let mut n = Nfs::connect(d.nfs_port);
    let root = n.mount("/proj").unwrap();
    let fh = n.create3(&root, "nfs-before").unwrap();
    n.write3(&fh, 0, b"nfs data").unwrap();

    // Read-only, in place.
    let out = d.ok(&["share", "modify", "proj", "--read-only"]);
    assert!(out.contains("read only:            yes"), "{out}");
    eventually("NFS sees the share read-only", || n.create3(&root, "nfs-refused") == Err(Nfsstat3::ROFS));
    // The same NFS connection still reads.
    assert_eq!(n.read3_all(&fh).unwrap(), b"nfs data");
    // The SMB connection is still up: its tree reads; a new tree
    // connect is read-only.
    let f = c.open_read("before.txt").unwrap();
    assert_eq!(c.read_all(f, 14).unwrap(), b"written before");
    c.close(f);
    eventually("a new SMB tree connect is read-only", || {
        assert_eq!(c.tree("proj"), NtStatus::SUCCESS);
        c.create("smb-refused.txt").is_err()
    });
    let f = c.open_read("before.txt").unwrap();
    assert_eq!(c.read_all(f, 14).unwrap(), b"written before", "reads on the read-only tree");
    c.close(f);

    // And back: both write again, on the same connections.
    d.ok(&["share", "modify", "proj", "--read-write"]);
    eventually("NFS writes again", || n.create3(&root, "nfs-after").is_ok());
    eventually("a new SMB tree writes again", || {
        assert_eq!(c.tree("proj"), NtStatus::SUCCESS);
        c.create("smb-after.txt").map(|f| c.close(f)).is_ok()
    });

    // A disabled user cannot log on; the session it has stays.
    d.ok(&["user", "modify", "bench", "--disable"]);
    eventually("logons of a disabled user are refused", || {
        let mut s = Smb::connect(d.smb_port);
        s.negotiate();
        s.login("bench", "benchpw") == NtStatus::LOGON_FAILURE
    });
    let f = c.open_read("before.txt").unwrap();
    assert_eq!(c.read_all(f, 14).unwrap(), b"written before", "the open session is not cut off");
    c.close(f);
    d.ok(&["user", "modify", "bench", "--enable", "--uid", "2100"]);
    eventually("an enabled user logs on", || {
        let mut s = Smb::connect(d.smb_port);
        s.negotiate();
        s.login("bench", "benchpw") == NtStatus::SUCCESS
    });
    let users: serde_json::Value = serde_json::from_str(&d.ok(&["--json", "user", "list"])).unwrap();
    assert!(users.as_array().unwrap().iter().any(|u| u["name"] == "bench" && u["uid"] == 2100 && u["enabled"] == true));
}
