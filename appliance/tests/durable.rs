//! SMB2 durable handles (MS-SMB2 3.3.5.9.6/.7/.10/.12, 3.3.7.1) against the
//! real daemon, with the raw test client over SMB 3.0: a DH2Q open with a
//! lease survives its TCP connection, is reconnected (DH2C) on a new one
//! with its FileId, data, lease and byte-range lock; another user cannot
//! take it, a wrong CreateGuid finds nothing; a kept handle closes at its
//! timeout (its delete-on-close file removed) or at once when another
//! client's open breaks it; malformed durable contexts are
//! STATUS_INVALID_PARAMETER and the connection goes on.

mod clients;
mod common;

use std::time::{Duration, Instant};

use clients::*;
use common::Daemon;
use duet_protocols::smb2::create::{create_action, create_disposition, create_options, oplock_level, CreateRequest};
use duet_protocols::smb2::create_context::{CreateContext, CreateContextRequest, CreateContextResponse, Lease, LeaseV2};
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::lock::{LockElement, LockRequest};
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::negotiate::dialect;
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::FileId;

const CLIENT: [u8; 16] = [0x51; 16];

fn start(limits: &str) -> (tempfile::TempDir, Daemon) {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(tmp.path(), limits, "", "portmap = false");
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    d.ok(&["user", "add", "eve", "--password", "evepw"]);
    (tmp, d)
}

/// An SMB 3.0 connection of client `guid`, logged on as `user` to public
/// (the first logon may wait for the user to reach the catalog).
fn smb3(d: &Daemon, guid: [u8; 16], user: &str, pw: &str) -> Smb {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = Smb::connect(d.smb_port);
        c.negotiate_as(dialect::SMB3_0, guid);
        if c.login(user, pw) == NtStatus::SUCCESS {
            assert_eq!(c.tree("public"), NtStatus::SUCCESS);
            return c;
        }
        assert!(Instant::now() < deadline, "{user} never logs on");
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct Created {
    status: NtStatus,
    file_id: FileId,
    oplock: u8,
    action: u32,
    contexts: Vec<String>,
    lease_state: Option<u32>,
    dh2q_timeout: Option<(u32, u32)>,
    dhnq: bool,
}

fn create(c: &mut Smb, req: CreateRequest<'_>) -> Created {
    let r = c.call(Request::Create(req), Cmd::CREATE);
    let mut out = Created {
        status: r.status(),
        file_id: FileId { persistent: 0, volatile: 0 },
        oplock: 0,
        action: 0,
        contexts: Vec::new(),
        lease_state: None,
        dh2q_timeout: None,
        dhnq: false,
    };
    if r.status() != NtStatus::SUCCESS {
        return out;
    }
    let Ok(Response::Create(cr)) = Response::decode(&r.header, &r.bytes) else { panic!("create reply decodes") };
    out.file_id = cr.file_id;
    out.oplock = cr.oplock_level;
    out.action = cr.create_action;
    for ctx in &cr.create_contexts {
        out.contexts.push(format!("{ctx:?}"));
        match ctx {
            CreateContextResponse::Lease(l) => out.lease_state = Some(l.lease_state),
            CreateContextResponse::DurableHandleV2 { timeout, flags } => out.dh2q_timeout = Some((*timeout, *flags)),
            CreateContextResponse::DurableHandle => out.dhnq = true,
            _ => {}
        }
    }
    out
}

fn lease_v2(key: [u8; 16], state: u32) -> CreateContextRequest<'static> {
    CreateContextRequest::RequestLease(Lease {
        lease_key: key,
        lease_state: state,
        lease_flags: 0,
        lease_duration: 0,
        v2: Some(LeaseV2 { parent_lease_key: [0; 16], epoch: 0 }),
    })
}

const RWH: u32 = Lease::READ_CACHING | Lease::WRITE_CACHING | Lease::HANDLE_CACHING;

fn file_req(name: &str, share: u32) -> CreateRequest<'_> {
    let mut req = open_req(name, create_disposition::OPEN_IF, create_options::NON_DIRECTORY_FILE, RW);
    req.share_access = share;
    req
}

/// DH2Q with a v2 lease asking RWH.
fn durable_lease_req(name: &str, key: [u8; 16], guid: [u8; 16], timeout: u32) -> CreateRequest<'_> {
    let mut req = file_req(name, 7);
    req.requested_oplock_level = oplock_level::LEASE;
    req.create_contexts =
        vec![lease_v2(key, RWH), CreateContextRequest::DurableHandleRequestV2 { timeout, flags: 0, create_guid: guid }];
    req
}

/// DH2C of `fid` with `guid`, and the lease context when `key` is given.
fn reconnect_req(name: &str, fid: FileId, guid: [u8; 16], key: Option<[u8; 16]>) -> CreateRequest<'_> {
    let mut req = file_req(name, 7);
    req.create_contexts = vec![CreateContextRequest::DurableHandleReconnectV2 { file_id: fid, create_guid: guid, flags: 0 }];
    if let Some(k) = key {
        req.requested_oplock_level = oplock_level::LEASE;
        req.create_contexts.push(lease_v2(k, 0));
    }
    req
}

fn lock(c: &mut Smb, fid: FileId, offset: u64, length: u64, flags: u32) -> NtStatus {
    let mut storage = Vec::new();
    let l = LockRequest::new(0, fid, &[LockElement { offset, length, flags }], &mut storage);
    c.call(Request::Lock(l), Cmd::LOCK).status()
}

/// Drops the TCP connection without CLOSE or LOGOFF.
fn cut(c: Smb) {
    let _ = c.tcp.shutdown(std::net::Shutdown::Both);
    drop(c);
}

#[test]
fn a_durable_handle_survives_a_lost_connection_with_its_data_lease_and_lock() {
    let (_tmp, d) = start("");
    let key = [0x4b; 16];
    let guid = [0xc1; 16];
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let got = create(&mut a, durable_lease_req("kept.txt", key, guid, 0));
    assert_eq!(got.status, NtStatus::SUCCESS);
    assert_eq!(got.oplock, oplock_level::LEASE);
    assert_eq!(got.lease_state, Some(RWH), "contexts {:?}", got.contexts);
    assert_eq!(got.dh2q_timeout, Some((60_000, 0)), "a timeout of 0 is the default; contexts {:?}", got.contexts);
    let fid = got.file_id;
    assert_eq!(a.write(fid, 0, b"bytes written before the cut", false), NtStatus::SUCCESS);
    assert_eq!(lock(&mut a, fid, 0, 4, LockElement::EXCLUSIVE_LOCK | LockElement::FAIL_IMMEDIATELY), NtStatus::SUCCESS);
    cut(a);
    // Give the daemon a moment to see the connection gone.
    std::thread::sleep(Duration::from_millis(300));

    let mut b = smb3(&d, CLIENT, "bench", "benchpw");
    // The old handle means nothing on the new connection before it is
    // reconnected.
    assert_eq!(b.read(fid, 0, 4).err(), Some(NtStatus::FILE_CLOSED));
    // Without its lease context, a leased handle is not found.
    assert_eq!(create(&mut b, reconnect_req("kept.txt", fid, guid, None)).status, NtStatus::OBJECT_NAME_NOT_FOUND);
    // With the lease key under another name: INVALID_PARAMETER.
    assert_eq!(create(&mut b, reconnect_req("other.txt", fid, guid, Some(key))).status, NtStatus::INVALID_PARAMETER);
    let back = create(&mut b, reconnect_req("kept.txt", fid, guid, Some(key)));
    assert_eq!(back.status, NtStatus::SUCCESS);
    assert_eq!(back.file_id, fid, "the FileId stays");
    assert_eq!(back.action, create_action::OPENED);
    assert_eq!(back.oplock, oplock_level::LEASE);
    assert_eq!(back.lease_state, Some(RWH), "the lease is still held: {:?}", back.contexts);
    assert_eq!(back.dh2q_timeout, None, "a reconnect answers no DH2Q context");
    assert_eq!(b.read_all(fid, 64).unwrap(), b"bytes written before the cut");
    // The byte-range lock came along: it unlocks once, then is gone.
    assert_eq!(lock(&mut b, fid, 0, 4, LockElement::UNLOCK), NtStatus::SUCCESS);
    assert_eq!(lock(&mut b, fid, 0, 4, LockElement::UNLOCK), NtStatus::RANGE_NOT_LOCKED);
    // Still durable: cut again, reconnect again.
    cut(b);
    std::thread::sleep(Duration::from_millis(300));
    let mut c = smb3(&d, CLIENT, "bench", "benchpw");
    let again = create(&mut c, reconnect_req("kept.txt", fid, guid, Some(key)));
    assert_eq!(again.status, NtStatus::SUCCESS, "a second reconnect");
    assert_eq!(c.write(fid, 0, b"BYTES", false), NtStatus::SUCCESS);
    assert_eq!(c.close(fid), NtStatus::SUCCESS);
    // Closed for good: nothing to reconnect, and anyone may open it.
    assert_eq!(create(&mut c, reconnect_req("kept.txt", fid, guid, Some(key))).status, NtStatus::OBJECT_NAME_NOT_FOUND);
    let mut other = smb3(&d, [0x77; 16], "bench", "benchpw");
    let f = other.create_req(file_req("kept.txt", 0)).expect("open after close");
    assert_eq!(other.read_all(f, 64).unwrap(), b"BYTES written before the cut");
}

/// A client that notices its connection is gone before the server does
/// reconnects at once (smbtorture's `durable-v2-open.reopen2b` does, and
/// failed now and then with OBJECT_NAME_NOT_FOUND): the reconnect waits
/// for the old connection's end (answered STATUS_PENDING) and then takes
/// the kept open over. While the old connection really lives, the wait
/// is bounded: NOT_FOUND after about a second.
#[test]
fn a_reconnect_that_races_the_old_connections_end_waits_for_it() {
    let (_tmp, d) = start("");
    let guid = [0xc3; 16];
    let durable_req = |name| {
        let mut req = file_req(name, 0);
        req.requested_oplock_level = oplock_level::BATCH;
        req.create_contexts = vec![CreateContextRequest::DurableHandleRequestV2 { timeout: 0, flags: 0, create_guid: guid }];
        req
    };
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let got = create(&mut a, durable_req("race.txt"));
    assert_eq!(got.status, NtStatus::SUCCESS);
    let fid = got.file_id;
    assert_eq!(a.write(fid, 0, b"before the race", false), NtStatus::SUCCESS);
    // The old connection still lives: the reconnect waits, then is refused.
    let mut b = smb3(&d, CLIENT, "bench", "benchpw");
    let t = std::time::Instant::now();
    assert_eq!(create(&mut b, reconnect_req("race.txt", fid, guid, None)).status, NtStatus::OBJECT_NAME_NOT_FOUND);
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(4), "waited {waited:?}");
    // The old connection ends while the reconnect waits: it succeeds.
    let cutter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        cut(a);
    });
    let t = std::time::Instant::now();
    let back = create(&mut b, reconnect_req("race.txt", fid, guid, None));
    let waited = t.elapsed();
    cutter.join().unwrap();
    assert_eq!(back.status, NtStatus::SUCCESS, "the reconnect after the old connection's end");
    assert!(waited >= Duration::from_millis(250), "it did not wait: {waited:?}");
    assert_eq!(back.file_id, fid);
    assert_eq!(b.read_all(fid, 64).unwrap(), b"before the race");
    assert_eq!(b.close(fid), NtStatus::SUCCESS);
}

#[test]
fn another_user_or_a_wrong_create_guid_cannot_reconnect() {
    let (_tmp, d) = start("");
    let guid = [0xc2; 16];
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let mut req = file_req("batch.txt", 0);
    req.requested_oplock_level = oplock_level::BATCH;
    // PERSISTENT is asked for: not granted (no continuously available
    // shares), durability is.
    req.create_contexts = vec![CreateContextRequest::DurableHandleRequestV2 { timeout: 1000, flags: 0x2, create_guid: guid }];
    let got = create(&mut a, req);
    assert_eq!(got.status, NtStatus::SUCCESS);
    assert_eq!(got.oplock, oplock_level::BATCH);
    assert_eq!(got.dh2q_timeout, Some((1000, 0)), "the asked timeout, no persistent flag: {:?}", got.contexts);
    let fid = got.file_id;
    cut(a);
    std::thread::sleep(Duration::from_millis(300));
    let mut eve = smb3(&d, CLIENT, "eve", "evepw");
    assert_eq!(create(&mut eve, reconnect_req("batch.txt", fid, guid, None)).status, NtStatus::ACCESS_DENIED);
    let mut b = smb3(&d, CLIENT, "bench", "benchpw");
    assert_eq!(create(&mut b, reconnect_req("batch.txt", fid, [0xdd; 16], None)).status, NtStatus::OBJECT_NAME_NOT_FOUND);
    assert_eq!(create(&mut b, reconnect_req("batch.txt", fid, [0; 16], None)).status, NtStatus::OBJECT_NAME_NOT_FOUND);
    let back = create(&mut b, reconnect_req("batch.txt", fid, guid, None));
    assert_eq!(back.status, NtStatus::SUCCESS, "the owner with the CreateGuid reconnects");
    assert_eq!(back.oplock, oplock_level::BATCH);
    assert_eq!(b.close(fid), NtStatus::SUCCESS);
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}

#[test]
fn a_kept_handle_closes_at_its_timeout_and_removes_its_delete_on_close_file() {
    let (_tmp, d) = start("[limits]\nsmb_durable_timeout_ms = 1500\n");
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let mut fids = Vec::new();
    for name in ["early.tmp", "late.tmp"] {
        let mut req = open_req(name, create_disposition::CREATE, create_options::NON_DIRECTORY_FILE | create_options::DELETE_ON_CLOSE, RW);
        req.share_access = 0;
        req.requested_oplock_level = oplock_level::BATCH;
        req.create_contexts = vec![CreateContextRequest::DurableHandleRequest];
        let got = create(&mut a, req);
        assert_eq!(got.status, NtStatus::SUCCESS);
        assert!(got.dhnq, "DHnQ granted with a batch oplock: {:?}", got.contexts);
        assert_eq!(a.write(got.file_id, 0, name.as_bytes(), false), NtStatus::SUCCESS);
        fids.push(got.file_id);
    }
    let cut_at = Instant::now();
    cut(a);
    std::thread::sleep(Duration::from_millis(400));
    let mut b = smb3(&d, CLIENT, "bench", "benchpw");
    let mut v1 = file_req("early.tmp", 7);
    v1.create_contexts = vec![CreateContextRequest::DurableHandleReconnect { file_id: fids[0] }];
    let early = create(&mut b, v1);
    assert_eq!(early.status, NtStatus::SUCCESS, "within the timeout ({:?} after the cut)", cut_at.elapsed());
    // The other one is left past its 1.5 s.
    std::thread::sleep(Duration::from_millis(2500));
    let mut v1 = file_req("late.tmp", 7);
    v1.create_contexts = vec![CreateContextRequest::DurableHandleReconnect { file_id: fids[1] }];
    assert_eq!(create(&mut b, v1).status, NtStatus::OBJECT_NAME_NOT_FOUND, "expired");
    assert_eq!(b.open_read("late.tmp").err(), Some(NtStatus::OBJECT_NAME_NOT_FOUND), "its delete-on-close ran");
    assert_eq!(b.read_all(early.file_id, 64).unwrap(), b"early.tmp");
    // Closing the reconnected one deletes it.
    assert_eq!(b.close(early.file_id), NtStatus::SUCCESS);
    assert_eq!(b.open_read("early.tmp").err(), Some(NtStatus::OBJECT_NAME_NOT_FOUND));
}

#[test]
fn another_clients_open_closes_a_kept_handle_instead_of_waiting() {
    let (_tmp, d) = start("");
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let mut req = file_req("shared.txt", 0);
    req.requested_oplock_level = oplock_level::BATCH;
    req.create_contexts = vec![CreateContextRequest::DurableHandleRequest];
    let got = create(&mut a, req);
    assert!(got.dhnq);
    assert_eq!(a.write(got.file_id, 0, b"first", false), NtStatus::SUCCESS);
    cut(a);
    std::thread::sleep(Duration::from_millis(300));
    // Another client opens it without sharing: the kept handle's batch
    // oplock is broken, which closes it (no 35 s wait for an ack that
    // cannot come, no sharing violation).
    let mut b = smb3(&d, [0x62; 16], "bench", "benchpw");
    let t0 = Instant::now();
    let f = b.create_req(file_req("shared.txt", 0)).expect("opens");
    assert!(t0.elapsed() < Duration::from_secs(3), "took {:?}", t0.elapsed());
    assert_eq!(b.read_all(f, 16).unwrap(), b"first");
    let mut c = smb3(&d, CLIENT, "bench", "benchpw");
    let mut v1 = file_req("shared.txt", 7);
    v1.create_contexts = vec![CreateContextRequest::DurableHandleReconnect { file_id: got.file_id }];
    assert_eq!(create(&mut c, v1).status, NtStatus::OBJECT_NAME_NOT_FOUND);
}

#[test]
fn malformed_durable_contexts_are_invalid_parameter_and_the_connection_goes_on() {
    let (_tmp, d) = start("");
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let junk = [0xA5u8; 40];
    let app_name = duet_protocols::smb2::create_context::name::APP_INSTANCE_ID;
    let cases: [(&[u8], usize); 10] = [
        (app_name, 19),
        (app_name, 0),
        (b"DHnQ", 0),
        (b"DHnQ", 15),
        (b"DHnC", 8),
        (b"DHnC", 17),
        (b"DH2Q", 31),
        (b"DH2Q", 33),
        (b"DH2C", 35),
        (b"DH2C", 0),
    ];
    for (name, len) in cases {
        let mut req = file_req("hostile.txt", 7);
        req.requested_oplock_level = oplock_level::BATCH;
        req.create_contexts = vec![CreateContextRequest::Other(CreateContext { name, data: &junk[..len] })];
        let got = create(&mut a, req);
        assert_eq!(got.status, NtStatus::INVALID_PARAMETER, "{} of {len} bytes", String::from_utf8_lossy(name));
    }
    // Contexts that contradict each other (3.3.5.9.10 / 3.3.5.9.12).
    let fid = FileId { persistent: 12345, volatile: 12345 };
    let combos = [
        vec![CreateContextRequest::DurableHandleRequest, CreateContextRequest::DurableHandleRequestV2 { timeout: 0, flags: 0, create_guid: [1; 16] }],
        vec![
            CreateContextRequest::DurableHandleReconnectV2 { file_id: fid, create_guid: [1; 16], flags: 0 },
            CreateContextRequest::DurableHandleRequest,
        ],
        vec![
            CreateContextRequest::DurableHandleReconnect { file_id: fid },
            CreateContextRequest::DurableHandleRequestV2 { timeout: 0, flags: 0, create_guid: [1; 16] },
        ],
    ];
    for ctxs in combos {
        let mut req = file_req("hostile.txt", 7);
        req.create_contexts = ctxs;
        assert_eq!(create(&mut a, req).status, NtStatus::INVALID_PARAMETER);
    }
    // Nothing to reconnect: not found.
    let mut req = file_req("hostile.txt", 7);
    req.create_contexts = vec![CreateContextRequest::DurableHandleReconnect { file_id: fid }];
    assert_eq!(create(&mut a, req).status, NtStatus::OBJECT_NAME_NOT_FOUND);
    // The connection and the daemon serve on.
    let f = a.create("hostile.txt").expect("a plain create works");
    assert_eq!(a.write(f, 0, b"ok", false), NtStatus::SUCCESS);
    assert_eq!(a.close(f), NtStatus::SUCCESS);
    assert!(!d.log_text().contains("panicked"), "log:\n{}", d.log_text());
}

/// `[limits] smb_durable_handles`: at most that many durable opens are
/// kept for lost connections; the others close as if not durable.
#[test]
fn smb_durable_handles_bounds_what_is_kept() {
    let (_tmp, d) = start("[limits]\nsmb_durable_handles = 1\n");
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let mut fids = Vec::new();
    for name in ["one.txt", "two.txt"] {
        let mut req = file_req(name, 0);
        req.requested_oplock_level = oplock_level::BATCH;
        req.create_contexts = vec![CreateContextRequest::DurableHandleRequest];
        let got = create(&mut a, req);
        assert!(got.dhnq, "{name} durable: {:?}", got.contexts);
        fids.push((name, got.file_id));
    }
    cut(a);
    std::thread::sleep(Duration::from_millis(300));
    let mut b = smb3(&d, CLIENT, "bench", "benchpw");
    let mut back = 0;
    for (name, fid) in &fids {
        let mut req = file_req(name, 7);
        req.create_contexts = vec![CreateContextRequest::DurableHandleReconnect { file_id: *fid }];
        match create(&mut b, req).status {
            NtStatus::SUCCESS => back += 1,
            NtStatus::OBJECT_NAME_NOT_FOUND => {
                // Closed at the cut: its sharing mode no longer stands.
                let f = b.create_req(file_req(name, 0)).expect("the closed one opens");
                assert_eq!(b.close(f), NtStatus::SUCCESS);
            }
            s => panic!("{name}: {s:?}"),
        }
    }
    assert_eq!(back, 1, "one of the two was kept");
}

/// An NFSv3 WRITE to a file whose only SMB open is a kept durable handle
/// with a batch oplock: the break the write causes closes the kept handle
/// (no holder is there to acknowledge it), the write goes through well
/// before the oplock break timeout, and the handle cannot be reconnected.
#[test]
fn an_nfs_write_closes_a_kept_handle() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(tmp.path(), "", "", "portmap = false");
    d.ok(&["user", "add", "alice", "--password", "alicepw", "--uid", "1500"]);
    let mut a = smb3(&d, CLIENT, "alice", "alicepw");
    let mut req = file_req("nfs-write.txt", 7);
    req.requested_oplock_level = oplock_level::BATCH;
    req.create_contexts = vec![CreateContextRequest::DurableHandleRequest];
    let got = create(&mut a, req);
    assert!(got.dhnq && got.oplock == oplock_level::BATCH, "{:?}", got.contexts);
    assert_eq!(a.write(got.file_id, 0, b"from smb", true), NtStatus::SUCCESS);
    cut(a);
    std::thread::sleep(Duration::from_millis(300));
    let mut n = Nfs::connect(d.nfs_port).as_user(1500, 1500);
    let root = n.mount("/public").unwrap();
    let fh = n.lookup3(&root, b"nfs-write.txt").expect("lookup");
    let t0 = Instant::now();
    loop {
        match n.write3(&fh, 0, b"FROM") {
            Ok(4) => break,
            Err(duet_protocols::nfs::nfs3::Nfsstat3::JUKEBOX) => {}
            other => panic!("write3: {other:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "the NFS write still waits after {:?}", t0.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(n.read3_all(&fh).unwrap(), b"FROM smb");
    let mut b = smb3(&d, CLIENT, "alice", "alicepw");
    let mut v1 = file_req("nfs-write.txt", 7);
    v1.create_contexts = vec![CreateContextRequest::DurableHandleReconnect { file_id: got.file_id }];
    assert_eq!(create(&mut b, v1).status, NtStatus::OBJECT_NAME_NOT_FOUND, "closed by the break");
}

/// SMB2_CREATE_APP_INSTANCE_ID (MS-SMB2 3.3.5.9.13): a DH2Q open on a
/// second connection with the AppInstanceId of an open on the first takes
/// its place without an oplock break; the first connection's handle is
/// closed (STATUS_FILE_CLOSED) and the new open got the batch oplock.
#[test]
fn a_new_app_instance_closes_the_old_ones_open() {
    let (_tmp, d) = start("");
    let app = [0xa9; 16];
    let open = |c: &mut Smb, guid: [u8; 16]| {
        let mut req = file_req("app.txt", 0);
        req.requested_oplock_level = oplock_level::BATCH;
        req.create_contexts = vec![
            CreateContextRequest::DurableHandleRequestV2 { timeout: 0, flags: 0, create_guid: guid },
            CreateContextRequest::AppInstanceId(app),
        ];
        create(c, req)
    };
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let first = open(&mut a, [1; 16]);
    assert_eq!((first.status, first.oplock), (NtStatus::SUCCESS, oplock_level::BATCH));
    let mut b = smb3(&d, [0x63; 16], "bench", "benchpw");
    let t0 = Instant::now();
    let second = open(&mut b, [2; 16]);
    assert_eq!(second.status, NtStatus::SUCCESS, "no sharing violation: the first open was closed");
    assert_eq!(second.oplock, oplock_level::BATCH, "and broke nothing");
    assert!(t0.elapsed() < Duration::from_secs(3), "took {:?}", t0.elapsed());
    assert_eq!(a.close(first.file_id), NtStatus::FILE_CLOSED);
    assert_eq!(b.close(second.file_id), NtStatus::SUCCESS);
}

fn resiliency(c: &mut Smb, fid: FileId, input: &[u8]) -> NtStatus {
    use duet_protocols::smb2::ioctl::{ctl_code, IoctlRequest};
    let io = IoctlRequest {
        ctl_code: ctl_code::FSCTL_LMR_REQUEST_RESILIENCY,
        file_id: fid,
        input,
        max_input_response: 0,
        output: &[],
        max_output_response: 0,
        flags: IoctlRequest::IS_FSCTL,
    };
    c.call(Request::Ioctl(io), Cmd::IOCTL).status()
}

fn lock_seq(c: &mut Smb, fid: FileId, seq: u32, offset: u64, flags: u32) -> NtStatus {
    let mut storage = Vec::new();
    let l = LockRequest::new(seq, fid, &[LockElement { offset, length: 100, flags }], &mut storage);
    c.call(Request::Lock(l), Cmd::LOCK).status()
}

/// Resilient handles (MS-SMB2 3.3.5.15.9 FSCTL_LMR_REQUEST_RESILIENCY,
/// 3.3.5.14 lock sequences, 3.3.7.1): bad requests are
/// INVALID_PARAMETER; on a resilient open a LOCK repeated with the same
/// LockSequenceNumber at its index is a replay (success, nothing applied
/// twice), another number is applied; the open survives a cut connection
/// without any oplock or lease and is reconnected by DHnC with its data
/// and its lock.
#[test]
fn a_resilient_handle_replays_locks_and_survives_a_lost_connection() {
    // Without multichannel: offering it makes every 3.x open verify lock
    // sequences (MS-SMB2 3.3.5.14), resilient or not.
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(tmp.path(), "", "multichannel = false", "portmap = false");
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    let mut a = smb3(&d, CLIENT, "bench", "benchpw");
    let fid = a.create_req(file_req("resilient.txt", 7)).expect("open");
    assert_eq!(a.write(fid, 0, b"written before the cut", false), NtStatus::SUCCESS);
    assert_eq!(resiliency(&mut a, fid, &[0; 4]), NtStatus::INVALID_PARAMETER, "short input");
    let mut over = 400_000u32.to_le_bytes().to_vec();
    over.extend_from_slice(&[0; 4]);
    assert_eq!(resiliency(&mut a, fid, &over), NtStatus::INVALID_PARAMETER, "past the longest timeout");
    // Not resilient yet: a repeated lock is a second lock, refused.
    let x = LockElement::EXCLUSIVE_LOCK | LockElement::FAIL_IMMEDIATELY;
    assert_eq!(lock_seq(&mut a, fid, 0x11, 1000, x), NtStatus::SUCCESS);
    assert_eq!(lock_seq(&mut a, fid, 0x11, 1000, x), NtStatus::LOCK_NOT_GRANTED);
    assert_eq!(lock_seq(&mut a, fid, 0x11, 1000, LockElement::UNLOCK), NtStatus::SUCCESS);
    let mut ask = 5_000u32.to_le_bytes().to_vec();
    ask.extend_from_slice(&[0; 4]);
    assert_eq!(resiliency(&mut a, fid, &ask), NtStatus::SUCCESS);
    assert_eq!(lock_seq(&mut a, fid, 0x11, 0, x), NtStatus::SUCCESS);
    assert_eq!(lock_seq(&mut a, fid, 0x11, 0, x), NtStatus::SUCCESS, "a replay");
    assert_eq!(lock_seq(&mut a, fid, 0x11, 0, LockElement::UNLOCK), NtStatus::SUCCESS, "a replay: still locked");
    assert_eq!(lock_seq(&mut a, fid, 0x12, 0, x), NtStatus::LOCK_NOT_GRANTED, "a new number is applied");
    assert_eq!(lock_seq(&mut a, fid, 0x4_01, 0, x), NtStatus::LOCK_NOT_GRANTED, "index 64, refused");
    assert_eq!(lock_seq(&mut a, fid, 0x41_1, 0, x), NtStatus::LOCK_NOT_GRANTED, "index 65 is not verified");
    cut(a);
    std::thread::sleep(Duration::from_millis(300));

    let mut b = smb3(&d, CLIENT, "bench", "benchpw");
    let mut req = file_req("resilient.txt", 7);
    req.create_contexts = vec![CreateContextRequest::DurableHandleReconnect { file_id: fid }];
    let back = create(&mut b, req);
    assert_eq!(back.status, NtStatus::SUCCESS, "a resilient open is reconnected by DHnC");
    assert_eq!(back.file_id, fid);
    assert_eq!(b.read_all(fid, 64).unwrap(), b"written before the cut");
    assert_eq!(lock(&mut b, fid, 0, 100, LockElement::UNLOCK), NtStatus::SUCCESS, "its lock came along");
    assert_eq!(lock(&mut b, fid, 0, 100, LockElement::UNLOCK), NtStatus::RANGE_NOT_LOCKED);
    assert_eq!(b.close(fid), NtStatus::SUCCESS);
    assert!(d.log_text().lines().all(|l| !l.contains("panicked")));
}
