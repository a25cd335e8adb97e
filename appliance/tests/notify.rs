//! SMB2 CHANGE_NOTIFY against a real duetd, fed by another protocol: a raw
//! SMB client watches a directory (WATCH_TREE) while an NFSv3 client
//! (and then an NFSv4.1 client) creates, writes, renames and removes
//! files in it and below it; the SMB
//! side gets the interim STATUS_PENDING (ASYNC form, MS-SMB2 3.3.4.2), then
//! FILE_NOTIFY_INFORMATION records (MS-FSCC 2.7.1) with the right actions
//! and names relative to the watched directory. Changes made between two
//! requests are buffered on the open; CANCEL completes a waiting request
//! with STATUS_CANCELLED, CLOSE with STATUS_NOTIFY_CLEANUP. A few seconds.

mod clients;
mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::changes::{action, filter};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::nfs4::{ArgOp4, Nfsstat4, PutFh4Args, Remove4Args, Rename4Args};
use duet_protocols::nfs::xdr::{Name, Opaque};
use duet_protocols::smb2::change_notify::ChangeNotifyRequest;
use duet_protocols::smb2::compound::Compound;
use duet_protocols::smb2::create::{create_disposition, create_options};
use duet_protocols::smb2::header::{Command as Cmd, Header, HeaderFlags};
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::FileId;

/// The next message from the server, interim answers included.
fn next_msg(c: &mut Smb, wait: Duration) -> Option<(Header, Vec<u8>)> {
    c.tcp.set_read_timeout(Some(wait)).unwrap();
    let mut len = [0u8; 4];
    let got = c.tcp.read_exact(&mut len);
    c.tcp.set_read_timeout(None).unwrap();
    got.ok()?;
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    c.tcp.read_exact(&mut buf).unwrap();
    let m = Compound::new(&buf).next().unwrap().unwrap();
    Some((m.header, m.bytes.to_vec()))
}

/// Sends CHANGE_NOTIFY on `dir`; returns its MessageId.
fn notify(c: &mut Smb, dir: FileId, tree: bool, len: u32) -> u64 {
    let req = ChangeNotifyRequest {
        flags: if tree { ChangeNotifyRequest::WATCH_TREE } else { 0 },
        output_buffer_length: len,
        file_id: dir,
        completion_filter: filter::FILE_NAME | filter::DIR_NAME | filter::SIZE | filter::LAST_WRITE,
    };
    let mid = c.next_id;
    let m = c.message(Request::ChangeNotify(req), Cmd::CHANGE_NOTIFY, true);
    c.send(&m).unwrap();
    mid
}

/// The (action, name) records of a CHANGE_NOTIFY response.
fn records(h: &Header, bytes: &[u8]) -> Vec<(u32, String)> {
    let Response::ChangeNotify(o) = Response::decode(h, bytes).expect("a CHANGE_NOTIFY response") else {
        panic!("not a CHANGE_NOTIFY response");
    };
    let b = o.output_buffer;
    let mut out = Vec::new();
    let mut at = 0usize;
    loop {
        let u = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) as usize;
        let (next, act, len) = (u(at), u(at + 4) as u32, u(at + 8));
        let units: Vec<u16> = b[at + 12..at + 12 + len].chunks(2).map(|p| u16::from_le_bytes([p[0], p[1]])).collect();
        out.push((act, String::from_utf16(&units).unwrap()));
        if next == 0 {
            return out;
        }
        assert_eq!(next % 4, 0, "entries are 4-byte aligned");
        at += next;
    }
}

/// The final answer to the request `mid`: its header and body.
fn final_answer(c: &mut Smb, mid: u64) -> (Header, Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no final answer to CHANGE_NOTIFY {mid} within 10 s");
        let (h, b) = next_msg(c, left).expect("an answer to CHANGE_NOTIFY");
        if h.message_id == mid && h.status != NtStatus::PENDING {
            return (h, b);
        }
    }
}

/// Requests and collects records until `want` of them arrived.
fn collect(c: &mut Smb, dir: FileId, want: usize) -> Vec<(u32, String)> {
    let mut got = Vec::new();
    while got.len() < want {
        let mid = notify(c, dir, true, 4096);
        let (h, b) = final_answer(c, mid);
        assert_eq!(h.status, NtStatus::SUCCESS, "records so far: {got:?}");
        got.extend(records(&h, &b));
    }
    got
}

fn rename3(n: &mut Nfs, from_dir: &[u8], from: &str, to_dir: &[u8], to: &str) -> Nfsstat3 {
    let rep = n.v3(&Nfs3Args::Rename(Rename3Args {
        from: DirOpArgs3 { dir: Opaque(from_dir), name: Name(from.as_bytes()) },
        to: DirOpArgs3 { dir: Opaque(to_dir), name: Name(to.as_bytes()) },
    }));
    match results3(proc3::RENAME, &rep) {
        Nfs3Results::Rename(Nfs3Res::Ok(_)) => Nfsstat3::OK,
        Nfs3Results::Rename(Nfs3Res::Fail(s, _)) => s,
        other => panic!("{other:?}"),
    }
}

/// NFSv4.1 PUTFH dir SAVEFH then RENAME `name` to `to`, or REMOVE it.
fn v4_remove_or_rename(n: &mut Nfs, s: &mut Sess, dir: &[u8], name: &str, to: Option<&str>) -> Nfsstat4 {
    let seq = s.sequence();
    let op = match to {
        Some(t) => ArgOp4::Rename(Rename4Args { oldname: Name(name.as_bytes()), newname: Name(t.as_bytes()) }),
        None => ArgOp4::Remove(Remove4Args { target: Name(name.as_bytes()) }),
    };
    let rep = n.v4(vec![seq, ArgOp4::PutFh(PutFh4Args { object: Opaque(dir) }), ArgOp4::SaveFh(()), op]).expect("a reply");
    res4(&rep).status
}

#[test]
fn smb_watcher_sees_what_an_nfs_client_changes() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path());
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let mkdir = |c: &mut Smb, name: &str| {
        c.create_req(open_req(name, create_disposition::CREATE, create_options::DIRECTORY_FILE, R)).unwrap()
    };
    let w = mkdir(&mut c, "watched");
    let sub = mkdir(&mut c, "watched\\sub");
    assert_eq!(c.close(sub), NtStatus::SUCCESS);

    // The first request: answered STATUS_PENDING in the ASYNC form.
    let mid = notify(&mut c, w, true, 4096);
    let (h, _) = next_msg(&mut c, Duration::from_secs(5)).expect("an interim answer");
    assert_eq!((h.message_id, h.status), (mid, NtStatus::PENDING));
    assert!(h.flags.0 & HeaderFlags::ASYNC_COMMAND != 0 && h.async_id().is_some_and(|a| a != 0), "{h:?}");

    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let wfh = n.lookup3(&root, b"watched").unwrap();
    let f = n.create3(&wfh, "a.txt").unwrap();
    let (h, b) = final_answer(&mut c, mid);
    assert_eq!(h.status, NtStatus::SUCCESS);
    assert_eq!(records(&h, &b), vec![(action::ADDED, "a.txt".to_string())], "the NFS CREATE, seen over SMB");

    // Between requests the changes are buffered on the open.
    assert_eq!(n.write3(&f, 0, b"hello").unwrap(), 5);
    assert_eq!(rename3(&mut n, &wfh, "a.txt", &wfh, "b.txt"), Nfsstat3::OK);
    assert_eq!(n.remove3(&wfh, "b.txt"), Nfsstat3::OK);
    let sfh = n.lookup3(&wfh, b"sub").unwrap();
    n.create3(&sfh, "c.txt").unwrap();
    assert_eq!(rename3(&mut n, &sfh, "c.txt", &wfh, "d.txt"), Nfsstat3::OK);
    let got = collect(&mut c, w, 7);
    let want: Vec<(u32, String)> = [
        (action::MODIFIED, "a.txt"),
        (action::RENAMED_OLD_NAME, "a.txt"),
        (action::RENAMED_NEW_NAME, "b.txt"),
        (action::REMOVED, "b.txt"),
        (action::ADDED, "sub\\c.txt"),
        (action::REMOVED, "sub\\c.txt"),
        (action::ADDED, "d.txt"),
    ]
    .iter()
    .map(|(a, s)| (*a, s.to_string()))
    .collect();
    assert_eq!(got, want, "NFS WRITE, RENAME, REMOVE, a CREATE below (WATCH_TREE), a move up");

    // NFSv4.1: OPEN creating, RENAME, REMOVE.
    let mut s = session(&mut n, b"notify-v4", 1 << 20, 64);
    open4(&mut n, &mut s, &wfh, b"o1", "e.txt").unwrap();
    assert_eq!(v4_remove_or_rename(&mut n, &mut s, &wfh, "e.txt", Some("f.txt")), Nfsstat4::OK);
    assert_eq!(v4_remove_or_rename(&mut n, &mut s, &wfh, "f.txt", None), Nfsstat4::OK);
    let got = collect(&mut c, w, 4);
    let want: Vec<(u32, String)> =
        [(action::ADDED, "e.txt"), (action::RENAMED_OLD_NAME, "e.txt"), (action::RENAMED_NEW_NAME, "f.txt"), (action::REMOVED, "f.txt")]
            .iter()
            .map(|(a, s)| (*a, s.to_string()))
            .collect();
    assert_eq!(got, want, "NFSv4.1 OPEN (create), RENAME, REMOVE");

    // CANCEL by AsyncId: STATUS_CANCELLED.
    let mid = notify(&mut c, w, true, 4096);
    let (h, _) = next_msg(&mut c, Duration::from_secs(5)).expect("an interim answer");
    assert_eq!(h.status, NtStatus::PENDING);
    c.cancel(mid, h.async_id().unwrap());
    let (h, _) = final_answer(&mut c, mid);
    assert_eq!(h.status, NtStatus::CANCELLED);

    // CLOSE of the directory: STATUS_NOTIFY_CLEANUP for the waiting one.
    let mid = notify(&mut c, w, true, 4096);
    let (h, _) = next_msg(&mut c, Duration::from_secs(5)).expect("an interim answer");
    assert_eq!(h.status, NtStatus::PENDING);
    let cm = c.message(
        Request::Close(duet_protocols::smb2::close::CloseRequest { flags: 0, file_id: w }),
        Cmd::CLOSE,
        true,
    );
    c.send(&cm).unwrap();
    let mut statuses = Vec::new();
    while statuses.len() < 2 {
        let (h, _) = next_msg(&mut c, Duration::from_secs(5)).expect("the CLOSE and CHANGE_NOTIFY answers");
        statuses.push((h.command, h.status, h.message_id == mid));
    }
    assert!(statuses.contains(&(Cmd::CHANGE_NOTIFY, NtStatus::NOTIFY_CLEANUP, true)), "{statuses:?}");
    assert!(statuses.iter().any(|s| s.0 == Cmd::CLOSE && s.1 == NtStatus::SUCCESS), "{statuses:?}");
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

/// One connection holds at most `[limits] smb_notify_watches` directory
/// watches (each a CHANGE_NOTIFY waiting on its own open): the next is
/// refused with STATUS_INSUFFICIENT_RESOURCES, and the daemon serves on.
#[test]
fn watches_per_connection_are_bounded() {
    const MAX_WATCHES: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_with(dir.path(), &format!("\n[limits]\nsmb_notify_watches = {MAX_WATCHES}\n"));
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let first = c.create_req(open_req("many", create_disposition::CREATE, create_options::DIRECTORY_FILE, R)).unwrap();
    let mut opens = vec![first];
    for _ in 1..=MAX_WATCHES {
        opens.push(c.open_dir("many").unwrap());
    }
    for (i, fid) in opens.iter().enumerate() {
        let mid = notify(&mut c, *fid, false, 1024);
        let (h, _) = next_msg(&mut c, Duration::from_secs(5)).expect("an answer");
        assert_eq!(h.message_id, mid);
        if i < MAX_WATCHES {
            assert_eq!(h.status, NtStatus::PENDING, "watch {i}");
        } else {
            assert_eq!(h.status, NtStatus::INSUFFICIENT_RESOURCES, "watch {i}, over the bound");
        }
    }
    let mut other = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    assert!(other.create("still-serving").is_ok());
}
