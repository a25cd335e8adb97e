//! A lost SMB connection closes its opens (MS-SMB2 3.3.7.1): against the
//! real daemon, the raw test client creates a file with
//! FILE_DELETE_ON_CLOSE and another without, writes both, and drops its
//! TCP connection without a CLOSE. The delete-on-close file is gone for
//! the next connection, the other one is there with its bytes, and a
//! sharing mode the lost connection held no longer stands in the way.

mod clients;
mod common;

use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::smb2::create::{create_disposition, create_options};
use duet_protocols::smb2::status::NtStatus;

#[test]
fn a_lost_connection_closes_its_opens_and_deletes_its_delete_on_close_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut a = loop {
        let mut c = Smb::connect(d.smb_port);
        c.negotiate();
        if c.login("bench", "benchpw") == NtStatus::SUCCESS {
            assert_eq!(c.tree("public"), NtStatus::SUCCESS);
            break c;
        }
        assert!(Instant::now() < deadline, "bench never logs on");
        std::thread::sleep(Duration::from_millis(200));
    };
    let tmpfile = a
        .create_req(open_req(
            "scratch.tmp",
            create_disposition::CREATE,
            create_options::NON_DIRECTORY_FILE | create_options::DELETE_ON_CLOSE,
            RW,
        ))
        .expect("create with delete-on-close");
    assert_eq!(a.write(tmpfile, 0, b"temporary", false), NtStatus::SUCCESS);
    // Kept: no delete-on-close; opened without sharing, so a second open
    // fails while this connection lives.
    let mut req = open_req("kept.txt", create_disposition::CREATE, create_options::NON_DIRECTORY_FILE, RW);
    req.share_access = 0;
    let kept = a.create_req(req).expect("create kept.txt");
    assert_eq!(a.write(kept, 0, b"these bytes stay", true), NtStatus::SUCCESS);
    let mut b = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    assert_eq!(b.open_read("kept.txt").err(), Some(NtStatus::SHARING_VIOLATION), "held without sharing by the first connection");
    // The connection is lost: no CLOSE, no LOGOFF.
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let gone = b.open_read("scratch.tmp").err() == Some(NtStatus::OBJECT_NAME_NOT_FOUND);
        let free = b.open_read("kept.txt");
        if gone {
            if let Ok(fid) = free {
                assert_eq!(b.read_all(fid, 64).unwrap(), b"these bytes stay");
                assert_eq!(b.close(fid), NtStatus::SUCCESS);
                break;
            }
        } else if let Ok(fid) = free {
            b.close(fid);
        }
        assert!(
            Instant::now() < deadline,
            "10 s after the connection was lost: scratch.tmp gone {gone}, kept.txt opens {:?}; log:\n{}",
            b.open_read("kept.txt").err(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
