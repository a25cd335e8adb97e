//! One ACL model for both protocols (issue 17), against a real duetd: a
//! DACL set over SMB (SET_INFO, MS-SMB2 3.3.5.21.3) refuses an NFS user
//! what the mode would allow, and a chmod over NFS replaces it by the
//! mode's, as SMB's QUERY_INFO then shows (RFC 8881 6.4).

mod clients;
mod common;

use std::time::Duration;

use clients::*;
use common::{port_445_to, smbcacls, Daemon};
use duet_fs::acl::{rights, Ace, Acl, SecurityDescriptor, Sid, SidMap};
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::xdr::{Name, Opaque};
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

/// The security descriptor of `fid` (the parts `addl` names: 1 owner, 4
/// DACL), by QUERY_INFO (MS-SMB2 3.3.5.20.3).
fn sd_of(c: &mut Smb, fid: FileId, addl: u32) -> SecurityDescriptor {
    let r = c.call(
        Request::QueryInfo(QueryInfoRequest {
            info_type: info_type::SECURITY,
            file_info_class: 0,
            output_buffer_length: 4096,
            input_buffer: &[],
            additional_information: addl,
            flags: 0,
            file_id: fid,
        }),
        Cmd::QUERY_INFO,
    );
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let Ok(Response::QueryInfo(q)) = Response::decode(&r.header, &r.bytes) else { panic!("query info reply") };
    SecurityDescriptor::decode(q.output_buffer).unwrap()
}

fn dacl_of(c: &mut Smb, fid: FileId) -> Acl {
    sd_of(c, fid, 4).dacl.expect("a DACL")
}

/// How duetd shows SIDs over SMB: its users (alice, bob) and their
/// primary groups under its machine SID, learned from the owner of a file
/// alice owns, which must be `S-1-5-21-a-b-c-RID` with RID 1000 + 2 * uid.
fn sid_map_of(c: &mut Smb, fid: FileId) -> SidMap {
    let owner = sd_of(c, fid, 1).owner.expect("an owner");
    sid_map_from(&owner)
}

fn sid_map_from(alice: &Sid) -> SidMap {
    let (rid, machine) = alice.subs.split_last().expect("sub-authorities");
    assert_eq!(*rid, 1000 + 2 * ALICE, "alice's SID: {alice}");
    let machine = Sid { authority: alice.authority, subs: machine.to_vec() };
    assert!(SidMap::is_machine_sid(&machine), "{alice}");
    SidMap { machine: Some(machine), users: [ALICE, BOB].into(), groups: [ALICE, BOB].into() }
}

/// `acl` with each SID as SMB shows it.
fn wire(m: &SidMap, acl: &Acl) -> Acl {
    Acl { aces: acl.aces.iter().map(|a| Ace { sid: m.to_wire(&a.sid), ..a.clone() }).collect() }
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

/// A daemon with users alice and bob and the share `acl` (no root squash)
/// whose root directory anyone may write.
fn serve_acl_share(dir: &std::path::Path) -> Daemon {
    let d = Daemon::start(dir);
    for (name, id) in [("alice", ALICE), ("bob", BOB)] {
        let id = id.to_string();
        d.ok(&["user", "add", name, "--password", &format!("{name}pw"), "--uid", &id, "--gid", &id]);
    }
    d.ok(&["share", "add", "acl", "--path", "/acl", "--no-root-squash"]);
    std::thread::sleep(Duration::from_millis(2500));
    let mut r = Nfs::connect(d.nfs_port).as_user(0, 0);
    let root_fh = r.mount("/acl").unwrap();
    assert_eq!(chmod3(&mut r, &root_fh, 0o777), Nfsstat3::OK);
    d
}

#[test]
fn a_dacl_set_over_smb_denies_an_nfs_user_and_chmod_over_nfs_shows_in_smb() {
    let tmp = tempfile::tempdir().unwrap();
    let d = serve_acl_share(tmp.path());
    let (smb, nfs) = (d.smb_port, d.nfs_port);

    // Alice makes a file over SMB with a mode anyone may read.
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
    let m = sid_map_of(&mut c, fid);
    assert_eq!(dacl_of(&mut c, fid), wire(&m, &dacl), "bob shown under the machine SID");
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
    assert!(!shown.aces.iter().any(|e| e.sid == m.to_wire(&Sid::unix_user(BOB))), "the deny ACE is gone: {shown:?}");
    let everyone = shown.aces.iter().find(|e| e.sid == Sid::everyone()).expect("an Everyone ACE");
    assert_eq!(everyone.mask & rights::READ_DATA, 0, "others may not read under 0640: {shown:?}");
    assert_eq!(bob.read3_all(&f_b), Err(Nfsstat3::ACCES), "the mode refuses bob now");
    assert_eq!(carl.read3_all(&f_c), Err(Nfsstat3::ACCES));
    assert_eq!(chmod3(&mut a, &f_a, 0o644), Nfsstat3::OK);
    assert_eq!(bob.read3_all(&f_b).as_deref(), Ok(&b"secret"[..]), "the mode alone decides");
    c.close(fid);
}

mod v4acl {
    use super::*;
    use duet_fs::acl::nfs4::*;
    use duet_protocols::nfs::nfs4::attrs::{fattr4 as fa, Attrs as A4};
    use duet_protocols::nfs::nfs4::*;
    use duet_protocols::nfs::xdr::{List, XdrWriter};

    /// (type, flag, mask, who) of each ACE, as a client sees them.
    pub type Aces = Vec<(u32, u32, u32, String)>;

    pub fn get(n: &mut Nfs, s: &mut Sess, fh: &[u8]) -> Result<Aces, Nfsstat4> {
        let rep = n
            .v4(vec![
                s.sequence(),
                ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
                ArgOp4::GetAttr(GetAttr4Args { attr_request: Bitmap4::from_bits(&[fa::ACL, fa::ACLSUPPORT, fa::MODE]) }),
            ])
            .expect("GETATTR reply");
        let r = res4(&rep);
        if r.status != Nfsstat4::OK {
            return Err(r.status);
        }
        let ResOp4::GetAttr(Nfs4Res::Ok(g)) = &r.results[2] else { panic!("{r:?}") };
        let a = A4::from_fattr4(&g.obj_attributes).expect("fattr4 decodes");
        assert_eq!(a.aclsupport, Some(3), "allow and deny ACEs (ACL4_SUPPORT_ALLOW_ACL | DENY)");
        let List(aces) = a.acl.expect("the acl attribute is answered");
        Ok(aces.iter().map(|e| (e.type_, e.flag, e.access_mask, String::from_utf8_lossy(e.who.0).into_owned())).collect())
    }

    pub fn set(n: &mut Nfs, s: &mut Sess, fh: &[u8], aces: &[(u32, u32, u32, &str)]) -> Nfsstat4 {
        let wire: Vec<NfsAce4<'_>> =
            aces.iter().map(|(t, f, m, w)| NfsAce4 { type_: *t, flag: *f, access_mask: *m, who: Opaque(w.as_bytes()) }).collect();
        let attrs = A4 { acl: Some(List(wire)), ..Default::default() };
        let mut w = XdrWriter::with_buffer(Vec::new());
        let mask = attrs.encode_vals(None, &mut w);
        let vals = w.into_inner();
        let rep = n
            .v4(vec![
                s.sequence(),
                ArgOp4::PutFh(PutFh4Args { object: Opaque(fh) }),
                ArgOp4::SetAttr(SetAttr4Args {
                    stateid: Stateid4::ANONYMOUS,
                    obj_attributes: Fattr4 { attrmask: mask, attr_vals: Opaque(&vals) },
                }),
            ])
            .expect("SETATTR reply");
        res4(&rep).status
    }

    pub const ALLOW: u32 = ACE4_ACCESS_ALLOWED_ACE_TYPE;
    pub const DENY: u32 = ACE4_ACCESS_DENIED_ACE_TYPE;
}

#[test]
fn an_nfs4_acl_set_over_nfs_is_what_smbcacls_shows_and_binds_both_protocols() {
    use duet_fs::acl::nfs4::*;
    use duet_protocols::nfs::nfs4::Nfsstat4;
    use v4acl::{ALLOW, DENY};
    let tmp = tempfile::tempdir().unwrap();
    let d = serve_acl_share(tmp.path());
    let (smb, nfs) = (d.smb_port, d.nfs_port);
    let host = port_445_to(smb);

    // Alice makes a file over NFSv3 (mode 0644) and writes it.
    let mut a3 = Nfs::connect(nfs).as_user(ALICE, ALICE);
    let root_a = a3.mount("/acl").unwrap();
    let f = a3.create3(&root_a, "g.txt").unwrap();
    assert_eq!(chmod3(&mut a3, &f, 0o644), Nfsstat3::OK);
    a3.write3(&f, 0, b"secret").unwrap();

    // Over NFSv4.1: with no stored DACL, the ACL is the mode's.
    let mut a4 = Nfs::connect(nfs).as_user(ALICE, ALICE);
    let mut s = session(&mut a4, b"acl-alice", 1 << 20, 16);
    let shown = v4acl::get(&mut a4, &mut s, &f).unwrap();
    let find = |aces: &v4acl::Aces, t: u32, who: &str| aces.iter().find(|e| e.0 == t && e.3 == who).map(|e| e.2);
    assert_ne!(find(&shown, ALLOW, "OWNER@").unwrap_or(0) & rights::WRITE_DATA, 0, "0644: the owner writes: {shown:?}");
    assert_ne!(find(&shown, ALLOW, "EVERYONE@").unwrap_or(0) & rights::READ_DATA, 0, "0644: everyone reads: {shown:?}");
    assert_eq!(find(&shown, ALLOW, "EVERYONE@").unwrap_or(0) & rights::WRITE_DATA, 0, "{shown:?}");

    // nfs4_setfacl's kind of ACL: bob denied reading, the owner all,
    // everyone reading and writing.
    let full = rights::FILE_ALL_ACCESS & ACE4_MASK_DEFINED;
    let rw = rights::READ_DATA | rights::WRITE_DATA | rights::APPEND_DATA | rights::READ_ATTRIBUTES | rights::READ_CONTROL | rights::SYNCHRONIZE;
    let bob = BOB.to_string();
    let acl = [(DENY, 0, rights::READ_DATA, bob.as_str()), (ALLOW, 0, full, "OWNER@"), (ALLOW, 0, rw, "EVERYONE@")];
    assert_eq!(v4acl::set(&mut a4, &mut s, &f, &acl), Nfsstat4::OK);
    let back = v4acl::get(&mut a4, &mut s, &f).unwrap();
    assert_eq!(
        back,
        acl.iter().map(|(t, fl, m, w)| (*t, *fl, *m, w.to_string())).collect::<Vec<_>>(),
        "read back as set, OWNER@ and all"
    );

    // Samba's smbcacls sees it as a DACL (with --numeric, type 1 is deny
    // and 0 allow): bob's SID denied READ_DATA, alice's (the owner,
    // OWNER@) allowed all, Everyone read and write.
    // duet's users show under its machine SID.
    let text = smbcacls(&host, "acl", "g.txt", "alice%alicepw");
    let owner = text.lines().find_map(|l| l.strip_prefix("OWNER:")).and_then(Sid::parse).expect("an OWNER line");
    let m = sid_map_from(&owner);
    let sid = |s: Sid| m.to_wire(&s).to_string();
    assert!(text.contains(&format!("GROUP:{}", sid(Sid::unix_group(ALICE)))), "{text}");
    assert!(text.contains(&format!("ACL:{}:1/0x0/0x00000001", sid(Sid::unix_user(BOB)))), "{text}");
    assert!(text.contains(&format!("ACL:{}:0/0x0/0x{full:08x}", sid(Sid::unix_user(ALICE)))), "{text}");
    assert!(text.contains(&format!("ACL:S-1-1-0:0/0x0/0x{rw:08x}")), "{text}");

    // It binds both protocols: bob reads nothing over NFSv3 or SMB, though
    // the mode the ACL amounts to (0766) would let him.
    let mut b3 = Nfs::connect(nfs).as_user(BOB, BOB);
    let root_b = b3.mount("/acl").unwrap();
    let f_b = b3.lookup3(&root_b, b"g.txt").unwrap();
    assert_eq!(b3.read3_all(&f_b), Err(Nfsstat3::ACCES));
    let mut bs = Smb::logged_on(smb, "bob", "bobpw", "acl");
    assert_eq!(bs.open_read("g.txt").err(), Some(NtStatus::ACCESS_DENIED));
    let mut carl = Nfs::connect(nfs).as_user(3003, 3003);
    let root_c = carl.mount("/acl").unwrap();
    let f_c = carl.lookup3(&root_c, b"g.txt").unwrap();
    assert_eq!(carl.read3_all(&f_c).as_deref(), Ok(&b"secret"[..]), "everyone else reads");

    // Bob may not set an ACL on alice's file (RFC 8881 6.2.1: WRITE_ACL).
    let mut b4 = Nfs::connect(nfs).as_user(BOB, BOB);
    let mut sb = session(&mut b4, b"acl-bob", 1 << 20, 16);
    assert_eq!(v4acl::set(&mut b4, &mut sb, &f, &[(ALLOW, 0, full, "EVERYONE@")]), Nfsstat4::PERM);
    // Refused: an AUDIT ACE, a name that is no id, undefined mask bits.
    assert_eq!(v4acl::set(&mut a4, &mut s, &f, &[(ACE4_SYSTEM_AUDIT_ACE_TYPE, 0, 1, "OWNER@")]), Nfsstat4::ATTRNOTSUPP);
    assert_eq!(v4acl::set(&mut a4, &mut s, &f, &[(ALLOW, 0, 1, "nosuchuser@example.com")]), Nfsstat4::BADOWNER);
    assert_eq!(v4acl::set(&mut a4, &mut s, &f, &[(ALLOW, 0, 0x8000_0000, "OWNER@")]), Nfsstat4::INVAL);
    assert_eq!(v4acl::get(&mut a4, &mut s, &f).unwrap(), back, "a refused SETATTR changes nothing");

    // A DACL set over SMB shows in the NFSv4 ACL (bob allowed by name, a
    // group named with ACE4_IDENTIFIER_GROUP).
    let mut c = Smb::logged_on(smb, "alice", "alicepw", "acl");
    let fid = c.create_req(open_req("g.txt", create_disposition::OPEN, 0, 0x0012_019f | 0x0004_0000)).unwrap();
    let dacl = Acl {
        aces: vec![
            Ace::allow(Sid::unix_user(BOB), rights::READ_DATA, 0),
            Ace::allow(Sid::unix_group(77), rights::READ_DATA, 0),
            Ace::allow(Sid::unix_user(ALICE), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert_eq!(set_dacl(&mut c, fid, &dacl), NtStatus::SUCCESS);
    let shown = v4acl::get(&mut a4, &mut s, &f).unwrap();
    assert_eq!(shown[0], (ALLOW, 0, rights::READ_DATA, bob.clone()), "{shown:?}");
    assert_eq!(shown[1], (ALLOW, ACE4_IDENTIFIER_GROUP, rights::READ_DATA, "77".to_string()), "{shown:?}");
    assert_eq!((shown[2].0, shown[2].3.as_str()), (ALLOW, "OWNER@"), "{shown:?}");
    assert_eq!(b3.read3_all(&f_b).as_deref(), Ok(&b"secret"[..]), "bob may read now");

    // chmod over NFS: the ACL is the mode's again (RFC 8881 6.4.1.1).
    assert_eq!(chmod3(&mut a3, &f, 0o600), Nfsstat3::OK);
    let shown = v4acl::get(&mut a4, &mut s, &f).unwrap();
    assert!(!shown.iter().any(|e| e.3 == bob), "bob's ACE went with the chmod: {shown:?}");
    assert_eq!(find(&shown, ALLOW, "EVERYONE@").unwrap_or(0) & rights::READ_DATA, 0, "{shown:?}");
    let text = smbcacls(&host, "acl", "g.txt", "alice%alicepw");
    assert!(!text.contains(&format!("S-1-22-1-{BOB}")), "{text}");
    c.close(fid);
}

/// A CREATE's SMB2_CREATE_SD_BUFFER (MS-SMB2 2.2.13.2.2) is the new
/// file's DACL, for both protocols; a NULL DACL reads back as NULL and
/// lets everyone in; an owner outside the creator's token is refused.
#[test]
fn a_create_security_descriptor_is_the_new_files_dacl() {
    use duet_fs::acl::control;
    use duet_protocols::smb2::create_context::CreateContextRequest;
    let tmp = tempfile::tempdir().unwrap();
    let d = serve_acl_share(tmp.path());
    let (smb, nfs) = (d.smb_port, d.nfs_port);
    let mut c = Smb::logged_on(smb, "alice", "alicepw", "acl");
    let create_with = |c: &mut Smb, name: &str, sd: &SecurityDescriptor| {
        let bytes = sd.encode();
        let mut req = open_req(name, create_disposition::CREATE, 0, 0x0012_019f | 0x0004_0000);
        req.create_contexts.push(CreateContextRequest::SecurityDescriptor(&bytes));
        c.create_req(req)
    };
    let dacl = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(BOB), rights::READ_DATA, 0),
            Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    let sd = SecurityDescriptor { control: control::DACL_PRESENT, owner: Some(Sid::unix_user(ALICE)), dacl: Some(dacl.clone()), ..Default::default() };
    let fid = create_with(&mut c, "sd.txt", &sd).expect("CREATE with an SD_BUFFER");
    assert_eq!(c.write(fid, 0, b"secret", true), NtStatus::SUCCESS);
    let m = sid_map_of(&mut c, fid);
    assert_eq!(dacl_of(&mut c, fid), wire(&m, &dacl), "the DACL of the SD_BUFFER is the file's");
    let mut bob = Nfs::connect(nfs).as_user(BOB, BOB);
    let root_b = bob.mount("/acl").unwrap();
    let f_b = bob.lookup3(&root_b, b"sd.txt").unwrap();
    assert_eq!(bob.read3_all(&f_b), Err(Nfsstat3::ACCES), "it binds NFS too");
    c.close(fid);

    // A NULL DACL: read back as none, everyone may read and write.
    let null = SecurityDescriptor { control: control::DACL_PRESENT, ..Default::default() };
    let fid = create_with(&mut c, "null.txt", &null).expect("CREATE with a NULL DACL");
    let got = sd_of(&mut c, fid, 4);
    assert!(got.control & control::DACL_PRESENT != 0 && got.dacl.is_none(), "a NULL DACL reads back as NULL: {got:?}");
    c.close(fid);
    let f_b = bob.lookup3(&root_b, b"null.txt").unwrap();
    assert_eq!(bob.write3(&f_b, 0, b"bob was here").map(|_| ()), Ok(()), "a NULL DACL lets everyone write");

    // An owner outside the creator's token: refused, nothing made.
    let other = SecurityDescriptor { control: control::DACL_PRESENT, owner: Some(Sid::new(5, &[32, 544])), dacl: Some(dacl), ..Default::default() };
    assert_eq!(create_with(&mut c, "given.txt", &other).err(), Some(NtStatus(0xC000_005A)), "STATUS_INVALID_OWNER");
    assert_eq!(bob.lookup3(&root_b, b"given.txt").err(), Some(Nfsstat3::NOENT));
}

/// Removing a name follows Windows' rule, for SMB and NFS alike (RFC 8881
/// 6.2.1.3.2; `machine.rs` `may_unlink`): DELETE on the file or
/// DELETE_CHILD on its directory allows it, a DACL that names the bit for
/// the caller without granting it refuses; where neither says, write and
/// search on the directory decide. An SMB open asking for DELETE (or
/// delete-on-close) that the rule refuses is ACCESS_DENIED up front, since
/// the removal at CLOSE could not report a failure; one it allows deletes.
#[test]
fn delete_access_follows_the_files_and_the_directorys_dacls() {
    use duet_protocols::smb2::create::create_options;
    let tmp = tempfile::tempdir().unwrap();
    let d = serve_acl_share(tmp.path());
    let (smb, nfs) = (d.smb_port, d.nfs_port);
    let mut a = Smb::logged_on(smb, "alice", "alicepw", "acl");
    // Alice's directory d whose DACL lets bob read and traverse but not add
    // or remove names; in it her file f, which anyone may do anything to
    // but delete, g, which anyone may delete, and h, which anyone may do
    // anything to.
    let dir = a.create_req(open_req("d", create_disposition::CREATE, create_options::DIRECTORY_FILE, 0x001f_01ff)).unwrap();
    for (name, mask) in [("d\\f", rights::FILE_ALL_ACCESS & !rights::DELETE), ("d\\g", rights::DELETE | rights::FILE_GENERIC_READ), ("d\\h", rights::FILE_ALL_ACCESS)] {
        let f = a.create_req(open_req(name, create_disposition::CREATE, 0, 0x001f_01ff)).unwrap();
        let acl = Acl { aces: vec![Ace::allow(Sid::everyone(), mask, 0)] };
        assert_eq!(set_dacl(&mut a, f, &acl), NtStatus::SUCCESS);
        a.close(f);
    }
    // The mode this amounts to is 0777 (Everyone may do all), which alone
    // would let bob remove names; the deny is what refuses him.
    let read_only = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(BOB), rights::WRITE_DATA | rights::APPEND_DATA | rights::DELETE_CHILD, 0),
            Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert_eq!(set_dacl(&mut a, dir, &read_only), NtStatus::SUCCESS);
    a.close(dir);
    let mut b = Smb::logged_on(smb, "bob", "bobpw", "acl");
    let delete = |b: &mut Smb, name: &str| {
        b.create_req(open_req(name, create_disposition::OPEN, create_options::DELETE_ON_CLOSE, 0x0001_0000 | 0x0012_0089)).map(|f| b.close(f))
    };
    assert_eq!(delete(&mut b, "d\\f").err(), Some(NtStatus::ACCESS_DENIED), "neither the file nor the directory lets bob delete f");
    let mut rb = Nfs::connect(nfs).as_user(BOB, BOB);
    let root_b = rb.mount("/acl").unwrap();
    let d_b = rb.lookup3(&root_b, b"d").unwrap();
    assert!(rb.lookup3(&d_b, b"f").is_ok(), "f is still there");
    assert_eq!(remove3(&mut rb, &d_b, "f"), Nfsstat3::ACCES, "NFS asks the same rule");
    // g grants DELETE: bob removes it over SMB, h over NFS, though the
    // directory is read-only to him.
    assert_eq!(delete(&mut b, "d\\g"), Ok(NtStatus::SUCCESS));
    assert_eq!(rb.lookup3(&d_b, b"g").err(), Some(Nfsstat3::NOENT), "bob's delete-on-close removed g");
    assert_eq!(remove3(&mut rb, &d_b, "h"), Nfsstat3::OK);
    // Alice may change d: her open deletes f at its close.
    let f = a.create_req(open_req("d\\f", create_disposition::OPEN, create_options::DELETE_ON_CLOSE, 0x0001_0000 | 0x0012_0089)).unwrap();
    a.close(f);
    assert_eq!(rb.lookup3(&d_b, b"f").err(), Some(Nfsstat3::NOENT), "alice's delete-on-close removed it");
}

/// NFSv3 REMOVE.
fn remove3(c: &mut Nfs, dir: &[u8], name: &str) -> Nfsstat3 {
    let rep = c.v3(&Nfs3Args::Remove(Remove3Args { object: DirOpArgs3 { dir: Opaque(dir), name: Name(name.as_bytes()) } }));
    match results3(proc3::REMOVE, &rep) {
        Nfs3Results::Remove(Nfs3Res::Ok(_)) => Nfsstat3::OK,
        Nfs3Results::Remove(Nfs3Res::Fail(s, _)) => s,
        other => panic!("{other:?}"),
    }
}

/// A named stream has its file's security: what an SMB open of
/// `file:stream` is granted comes from the file's DACL (MS-FSA 2.1.5.1).
#[test]
fn a_streams_open_is_granted_by_its_files_dacl() {
    let tmp = tempfile::tempdir().unwrap();
    let d = serve_acl_share(tmp.path());
    let smb = d.smb_port;
    let mut a = Smb::logged_on(smb, "alice", "alicepw", "acl");
    let f = a.create_req(open_req("s.txt", create_disposition::CREATE, 0, 0x001f_01ff)).unwrap();
    let s = a.create_req(open_req("s.txt:alt", create_disposition::CREATE, 0, 0x0012_019f)).unwrap();
    assert_eq!(a.write(s, 0, b"hidden", true), NtStatus::SUCCESS);
    a.close(s);
    // Bob may write the file and its streams, not read them.
    let dacl = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(BOB), rights::READ_DATA, 0),
            Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert_eq!(set_dacl(&mut a, f, &dacl), NtStatus::SUCCESS);
    a.close(f);
    let mut b = Smb::logged_on(smb, "bob", "bobpw", "acl");
    assert_eq!(b.open_read("s.txt:alt").err(), Some(NtStatus::ACCESS_DENIED), "the file's DACL denies reading its stream");
    let w = b.create_req(open_req("s.txt:alt", create_disposition::OPEN, 0, 0x0012_0116)).expect("writing is allowed");
    b.close(w);
    let r = a.open_read("s.txt:alt").expect("alice reads");
    assert_eq!(a.read(r, 0, 6).as_deref(), Ok(&b"hidden"[..]));
}

fn setattr3(n: &mut Nfs, fh: &[u8], attrs: Sattr3) -> Nfsstat3 {
    let rep = n.v3(&Nfs3Args::SetAttr(SetAttr3Args { object: Opaque(fh), new_attributes: attrs, guard: None }));
    match results3(proc3::SETATTR, &rep) {
        Nfs3Results::SetAttr(Nfs3Res::Ok(_)) => Nfsstat3::OK,
        Nfs3Results::SetAttr(Nfs3Res::Fail(s, _)) => s,
        other => panic!("{other:?}"),
    }
}

/// An owner SID other than S-1-22-1-uid (issue 17): one the caller's token
/// holds (Everyone) is kept, smbcacls shows it, and it is the owner both
/// protocols' access checks use (an OWNER RIGHTS ACE then applies to bob
/// over NFS ACCESS and SMB); one outside the token is
/// STATUS_INVALID_OWNER. Naming alice's Unix SID gives the file back to
/// her uid; a chmod over NFS keeps the owner SID, a chown takes it.
#[test]
fn an_owner_sid_in_the_callers_token_is_kept_and_binds_both_protocols() {
    let tmp = tempfile::tempdir().unwrap();
    let d = serve_acl_share(tmp.path());
    let host = port_445_to(d.smb_port);
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "acl");
    // FILE_ALL_ACCESS | WRITE_OWNER.
    let f = a.create_req(open_req("o.txt", create_disposition::CREATE, 0, 0x001f_01ff)).unwrap();
    let set_owner = |a: &mut Smb, sid: Sid| {
        let sd = SecurityDescriptor { owner: Some(sid), ..Default::default() }.encode();
        a.call(
            Request::SetInfo(SetInfoRequest { info_type: info_type::SECURITY, file_info_class: 0, buffer: &sd, additional_information: 1, file_id: f }),
            Cmd::SET_INFO,
        )
        .status()
    };
    let admins = Sid::new(5, &[32, 544]);
    let m = sid_map_of(&mut a, f);
    assert_eq!(set_owner(&mut a, admins), NtStatus(0xC000_005A), "STATUS_INVALID_OWNER: not in alice's token");
    assert_eq!(sd_of(&mut a, f, 1).owner, Some(m.to_wire(&Sid::unix_user(ALICE))), "the owner stayed");
    assert_eq!(set_owner(&mut a, Sid::everyone()), NtStatus::SUCCESS, "Everyone is in every token");
    assert_eq!(sd_of(&mut a, f, 1).owner, Some(Sid::everyone()));
    let text = smbcacls(&host, "acl", "o.txt", "alice%alicepw");
    assert!(text.contains("OWNER:S-1-1-0"), "{text}");
    assert!(text.contains(&format!("GROUP:{}", m.to_wire(&Sid::unix_group(ALICE)))), "{text}");

    // A DACL whose only grant is OWNER RIGHTS read: with Everyone the
    // owner, bob reads; NFS still shows alice's uid as the owner.
    let dacl = Acl { aces: vec![Ace::allow(Sid::owner_rights(), rights::FILE_GENERIC_READ, 0)] };
    assert_eq!(set_dacl(&mut a, f, &dacl), NtStatus::SUCCESS);
    assert_eq!(sd_of(&mut a, f, 1).owner, Some(Sid::everyone()), "a DACL set alone keeps the owner");
    let mut bob = Nfs::connect(d.nfs_port).as_user(BOB, BOB);
    let root_b = bob.mount("/acl").unwrap();
    let f_b = bob.lookup3(&root_b, b"o.txt").unwrap();
    assert_ne!(access3(&mut bob, &f_b) & 0x1, 0, "bob holds the owner SID: READ");
    assert_eq!(access3(&mut bob, &f_b) & 0x4, 0, "no MODIFY");
    let mut b = Smb::logged_on(d.smb_port, "bob", "bobpw", "acl");
    let rb = b.open_read("o.txt").expect("bob opens for read as an owner");
    b.close(rb);

    // Alice's own SID: her uid owns it again and bob loses the read.
    assert_eq!(set_owner(&mut a, Sid::unix_user(ALICE)), NtStatus::SUCCESS);
    assert_eq!(sd_of(&mut a, f, 1).owner, Some(m.to_wire(&Sid::unix_user(ALICE))));
    // Her machine SID names her as well.
    assert_eq!(set_owner(&mut a, m.to_wire(&Sid::unix_user(ALICE))), NtStatus::SUCCESS);
    assert_eq!(access3(&mut bob, &f_b) & 0x1, 0, "bob is no owner now");
    assert!(b.open_read("o.txt").is_err());

    // A chmod over NFS drops the DACL, not the owner SID; root's chown
    // over NFS replaces it by the new uid's.
    assert_eq!(set_owner(&mut a, Sid::everyone()), NtStatus::SUCCESS);
    let mut al = Nfs::connect(d.nfs_port).as_user(ALICE, ALICE);
    let root_a = al.mount("/acl").unwrap();
    let f_a = al.lookup3(&root_a, b"o.txt").unwrap();
    assert_eq!(chmod3(&mut al, &f_a, 0o640), Nfsstat3::OK);
    let got = sd_of(&mut a, f, 5);
    assert_eq!(got.owner, Some(Sid::everyone()), "chmod keeps the owner SID");
    assert_eq!(got.dacl.map(|d| d.aces.last().map(|x| x.sid.clone())), Some(Some(Sid::everyone())), "the mode's DACL");
    let mut r = Nfs::connect(d.nfs_port).as_user(0, 0);
    let root_r = r.mount("/acl").unwrap();
    let f_r = r.lookup3(&root_r, b"o.txt").unwrap();
    assert_eq!(setattr3(&mut r, &f_r, Sattr3 { uid: Some(BOB), ..Default::default() }), Nfsstat3::OK);
    assert_eq!(sd_of(&mut a, f, 1).owner, Some(m.to_wire(&Sid::unix_user(BOB))), "a chown takes the owner SID");
    a.close(f);
}

/// RFC 8881 5.9 with `[nfs] id_domain = "example.com"`: the NFSv4 owner
/// strings of duet's users are `name@example.com` (owner, owner_group of
/// a user private group, and the `who` of ACEs), other ids stay decimal;
/// SETATTR takes names of that domain, names without a domain and decimal
/// ids, and refuses another domain (NFS4ERR_BADOWNER).
#[test]
fn nfsv4_owner_strings_name_users_in_the_configured_domain() {
    use duet_protocols::nfs::nfs4::attrs::{fattr4 as fa, Attrs as A4};
    use duet_protocols::nfs::nfs4::*;
    use duet_protocols::nfs::xdr::XdrWriter;
    use v4acl::{ALLOW, DENY};
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start_top(tmp.path(), "", "", "portmap = false\nid_domain = \"example.com\"");
    for (name, id) in [("alice", ALICE), ("bob", BOB)] {
        let id = id.to_string();
        d.ok(&["user", "add", name, "--password", &format!("{name}pw"), "--uid", &id, "--gid", &id]);
    }
    d.ok(&["share", "add", "acl", "--path", "/acl", "--no-root-squash"]);
    std::thread::sleep(Duration::from_millis(2500));
    let mut r3 = Nfs::connect(d.nfs_port).as_user(0, 0);
    let root = r3.mount("/acl").unwrap();
    assert_eq!(chmod3(&mut r3, &root, 0o777), Nfsstat3::OK);
    let mut a3 = Nfs::connect(d.nfs_port).as_user(ALICE, ALICE);
    let f = a3.create3(&root, "o.txt").unwrap();
    let mut n = Nfs::connect(d.nfs_port).as_user(0, 0);
    let mut s = session(&mut n, b"idmap-root", 1 << 20, 16);
    let owners = |n: &mut Nfs, s: &mut Sess| {
        let rep = n
            .v4(vec![
                s.sequence(),
                ArgOp4::PutFh(PutFh4Args { object: Opaque(&f) }),
                ArgOp4::GetAttr(GetAttr4Args { attr_request: Bitmap4::from_bits(&[fa::OWNER, fa::OWNER_GROUP]) }),
            ])
            .unwrap();
        let r = res4(&rep);
        let ResOp4::GetAttr(Nfs4Res::Ok(g)) = &r.results[2] else { panic!("{r:?}") };
        let a = A4::from_fattr4(&g.obj_attributes).unwrap();
        let text = |o: Option<&[u8]>| String::from_utf8_lossy(o.unwrap()).into_owned();
        (text(a.owner.as_ref().map(|o| o.0)), text(a.owner_group.as_ref().map(|o| o.0)))
    };
    let set_owner = |n: &mut Nfs, s: &mut Sess, owner: &str| {
        let attrs = A4 { owner: Some(Opaque(owner.as_bytes())), ..Default::default() };
        let mut w = XdrWriter::with_buffer(Vec::new());
        let mask = attrs.encode_vals(None, &mut w);
        let vals = w.into_inner();
        let rep = n
            .v4(vec![
                s.sequence(),
                ArgOp4::PutFh(PutFh4Args { object: Opaque(&f) }),
                ArgOp4::SetAttr(SetAttr4Args {
                    stateid: Stateid4::ANONYMOUS,
                    obj_attributes: Fattr4 { attrmask: mask, attr_vals: Opaque(&vals) },
                }),
            ])
            .unwrap();
        res4(&rep).status
    };
    assert_eq!(owners(&mut n, &mut s), ("alice@example.com".to_string(), "alice@example.com".to_string()));
    assert_eq!(set_owner(&mut n, &mut s, "bob@example.com"), Nfsstat4::OK);
    assert_eq!(owners(&mut n, &mut s).0, "bob@example.com");
    assert_eq!(set_owner(&mut n, &mut s, "alice@other.org"), Nfsstat4::BADOWNER, "another domain");
    assert_eq!(set_owner(&mut n, &mut s, "carol@example.com"), Nfsstat4::BADOWNER, "no such user");
    assert_eq!(set_owner(&mut n, &mut s, "alice"), Nfsstat4::OK, "a name without a domain");
    assert_eq!(owners(&mut n, &mut s).0, "alice@example.com");
    assert_eq!(set_owner(&mut n, &mut s, "4242"), Nfsstat4::OK);
    assert_eq!(owners(&mut n, &mut s).0, "4242", "an id of no user stays decimal");
    assert_eq!(set_owner(&mut n, &mut s, &ALICE.to_string()), Nfsstat4::OK);
    // ACEs name users the same way, both directions.
    let acl = [(DENY, 0, rights::READ_DATA, "bob@example.com"), (ALLOW, 0, rights::READ_DATA | rights::WRITE_DATA, "OWNER@")];
    assert_eq!(v4acl::set(&mut n, &mut s, &f, &acl), Nfsstat4::OK);
    let back = v4acl::get(&mut n, &mut s, &f).unwrap();
    assert!(back.iter().any(|e| e.0 == DENY && e.3 == "bob@example.com"), "{back:?}");
    assert_eq!(v4acl::set(&mut n, &mut s, &f, &[(DENY, 0, rights::READ_DATA, "bob@other.org")]), Nfsstat4::BADOWNER);
}

/// A guest is no authenticated user (`acl::Token::unix`): a DACL granting
/// Authenticated Users read lets alice read and refuses an anonymous
/// smbclient on a guest share over the same directory; one granting
/// ANONYMOUS LOGON (S-1-5-7) lets the guest read.
#[test]
fn a_guest_is_no_authenticated_user() {
    let tmp = tempfile::tempdir().unwrap();
    let d = serve_acl_share(tmp.path());
    d.ok(&["share", "add", "pub", "--path", "/acl", "--guest-ok"]);
    std::thread::sleep(Duration::from_millis(2500));
    let mut a = Smb::logged_on(d.smb_port, "alice", "alicepw", "acl");
    let f = a.create_req(open_req("pub.txt", create_disposition::CREATE, 0, 0x001f_01ff)).unwrap();
    assert_eq!(a.write(f, 0, b"public?", true), NtStatus::SUCCESS);
    let only = |who: Sid| Acl {
        aces: vec![Ace::allow(who, rights::FILE_GENERIC_READ, 0), Ace::allow(Sid::unix_user(ALICE), rights::FILE_ALL_ACCESS, 0)],
    };
    let out = tmp.path().join("got.txt");
    let guest_get = || {
        let _ = std::fs::remove_file(&out);
        let o = std::process::Command::new("smbclient")
            .args(["-N", "//127.0.0.1/pub", "-p", &d.smb_port.to_string(), "-c", &format!("get pub.txt {}", out.display())])
            .output()
            .expect("smbclient runs (scripts/install-deps.sh installs it)");
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        (std::fs::read(&out).ok(), text)
    };
    assert_eq!(set_dacl(&mut a, f, &only(Sid::authenticated_users())), NtStatus::SUCCESS);
    a.close(f);
    let (got, text) = guest_get();
    assert!(got.is_none() && text.contains("NT_STATUS_ACCESS_DENIED"), "the guest is refused: {text}");
    let r = a.open_read("pub.txt").expect("alice, an authenticated user, reads");
    a.close(r);
    let f = a.create_req(open_req("pub.txt", create_disposition::OPEN, 0, 0x0004_0000)).unwrap();
    assert_eq!(set_dacl(&mut a, f, &only(Sid::anonymous())), NtStatus::SUCCESS);
    a.close(f);
    let (got, text) = guest_get();
    assert_eq!(got.as_deref(), Some(&b"public?"[..]), "ANONYMOUS LOGON lets the guest read: {text}");
}
