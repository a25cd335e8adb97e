//! One ACL model for both protocols (issue 17), against a real duetd: a
//! DACL set over SMB (SET_INFO, MS-SMB2 3.3.5.21.3) refuses an NFS user
//! what the mode would allow, and a chmod over NFS replaces it by the
//! mode's, as SMB's QUERY_INFO then shows (RFC 8881 6.4).

mod clients;
mod common;

use std::time::Duration;

use clients::*;
use common::Daemon;
use duet_fs::acl::{rights, Ace, Acl, SecurityDescriptor, Sid};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::xdr::Opaque;
use duet_protocols::smb2::create::create_disposition;
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::message::{Request, Response};
use duet_protocols::smb2::query_info::{info_type, QueryInfoRequest};
use duet_protocols::smb2::set_info::SetInfoRequest;
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::FileId;

const ALICE: u32 = 3001;
const BOB: u32 = 3002;

fn set_dacl(c: &mut Smb, fid: FileId, dacl: &Acl) -> NtStatus {
    let sd = SecurityDescriptor { dacl: Some(dacl.clone()), ..Default::default() }.encode();
    let r = c.call(
        Request::SetInfo(SetInfoRequest {
            info_type: info_type::SECURITY,
            file_info_class: 0,
            buffer: &sd,
            additional_information: 4,
            file_id: fid,
        }),
        Cmd::SET_INFO,
    );
    r.status()
}

fn dacl_of(c: &mut Smb, fid: FileId) -> Acl {
    let r = c.call(
        Request::QueryInfo(QueryInfoRequest {
            info_type: info_type::SECURITY,
            file_info_class: 0,
            output_buffer_length: 4096,
            input_buffer: &[],
            additional_information: 4,
            flags: 0,
            file_id: fid,
        }),
        Cmd::QUERY_INFO,
    );
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let Ok(Response::QueryInfo(q)) = Response::decode(&r.header, &r.bytes) else { panic!("query info reply") };
    SecurityDescriptor::decode(q.output_buffer).unwrap().dacl.expect("a DACL")
}

fn chmod3(n: &mut Nfs, fh: &[u8], mode: u32) -> Nfsstat3 {
    let rep = n.v3(&Nfs3Args::SetAttr(SetAttr3Args {
        object: Opaque(fh),
        new_attributes: Sattr3 { mode: Some(mode), ..Default::default() },
        guard: None,
    }));
    match results3(proc3::SETATTR, &rep) {
        Nfs3Results::SetAttr(Nfs3Res::Ok(_)) => Nfsstat3::OK,
        Nfs3Results::SetAttr(Nfs3Res::Fail(s, _)) => s,
        other => panic!("{other:?}"),
    }
}

/// NFSv3 ACCESS (RFC 1813 3.3.4): the bits granted of READ|LOOKUP|MODIFY|EXTEND|DELETE|EXECUTE.
fn access3(n: &mut Nfs, fh: &[u8]) -> u32 {
    let rep = n.v3(&Nfs3Args::Access(Access3Args { object: Opaque(fh), access: 0x3f }));
    match results3(proc3::ACCESS, &rep) {
        Nfs3Results::Access(Nfs3Res::Ok(r)) => r.access,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_dacl_set_over_smb_denies_an_nfs_user_and_chmod_over_nfs_shows_in_smb() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    for (name, id) in [("alice", ALICE), ("bob", BOB)] {
        let id = id.to_string();
        d.ok(&["user", "add", name, "--password", &format!("{name}pw"), "--uid", &id, "--gid", &id]);
    }
    d.ok(&["share", "add", "acl", "--path", "/acl", "--no-root-squash"]);
    std::thread::sleep(Duration::from_millis(2500));
    let (smb, nfs) = (d.smb_port, d.nfs_port);

    // Root opens the share directory to everyone, alice makes a file over
    // SMB with a mode anyone may read.
    let mut r = Nfs::connect(nfs).as_user(0, 0);
    let root_fh = r.mount("/acl").unwrap();
    assert_eq!(chmod3(&mut r, &root_fh, 0o777), Nfsstat3::OK);
    let mut c = Smb::logged_on(smb, "alice", "alicepw", "acl");
    // FILE_GENERIC_READ | FILE_GENERIC_WRITE | WRITE_DAC.
    let fid = c.create_req(open_req("f.txt", create_disposition::CREATE, 0, 0x0012_019f | 0x0004_0000)).unwrap();
    assert_eq!(c.write(fid, 0, b"secret", true), NtStatus::SUCCESS);

    let mut bob = Nfs::connect(nfs).as_user(BOB, BOB);
    let root_b = bob.mount("/acl").unwrap();
    let f_b = bob.lookup3(&root_b, b"f.txt").unwrap();
    assert_eq!(bob.read3_all(&f_b).as_deref(), Ok(&b"secret"[..]), "the mode lets bob read");
    assert_ne!(access3(&mut bob, &f_b) & access3::READ, 0);

    // A DACL that denies bob reading, and allows everyone everything.
    let dacl = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(BOB), rights::READ_DATA, 0),
            Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert_eq!(set_dacl(&mut c, fid, &dacl), NtStatus::SUCCESS);
    assert_eq!(dacl_of(&mut c, fid), dacl);
    // Bob over NFS: refused, though the mode (now 0777, from the DACL) allows.
    assert_eq!(bob.read3_all(&f_b), Err(Nfsstat3::ACCES));
    // ACCESS says so too (the kernel client trusts it at open).
    let granted = access3(&mut bob, &f_b);
    assert_eq!(granted & access3::READ, 0, "ACCESS follows the DACL");
    assert_ne!(granted & access3::MODIFY, 0, "what the DACL allows stays");
    let mut carl = Nfs::connect(nfs).as_user(3003, 3003);
    let root_c = carl.mount("/acl").unwrap();
    let f_c = carl.lookup3(&root_c, b"f.txt").unwrap();
    assert_eq!(carl.read3_all(&f_c).as_deref(), Ok(&b"secret"[..]), "everyone else may read");
    assert_ne!(access3(&mut carl, &f_c) & access3::READ, 0);

    // chmod over NFS (alice owns it): the DACL becomes the mode's.
    let mut a = Nfs::connect(nfs).as_user(ALICE, ALICE);
    let root_a = a.mount("/acl").unwrap();
    let f_a = a.lookup3(&root_a, b"f.txt").unwrap();
    assert_eq!(chmod3(&mut a, &f_a, 0o640), Nfsstat3::OK);
    let shown = dacl_of(&mut c, fid);
    assert!(!shown.aces.iter().any(|e| e.sid == Sid::unix_user(BOB)), "the deny ACE is gone: {shown:?}");
    let everyone = shown.aces.iter().find(|e| e.sid == Sid::everyone()).expect("an Everyone ACE");
    assert_eq!(everyone.mask & rights::READ_DATA, 0, "others may not read under 0640: {shown:?}");
    assert_eq!(bob.read3_all(&f_b), Err(Nfsstat3::ACCES), "the mode refuses bob now");
    assert_eq!(carl.read3_all(&f_c), Err(Nfsstat3::ACCES));
    assert_eq!(chmod3(&mut a, &f_a, 0o644), Nfsstat3::OK);
    assert_eq!(bob.read3_all(&f_b).as_deref(), Ok(&b"secret"[..]), "the mode alone decides");
    c.close(fid);
}
