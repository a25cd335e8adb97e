//! Stored DACLs (issue 17): `Op::SetAcl` stores one next to the node and
//! sets the mode from it (RFC 8881 6.4), the state machine's access checks
//! evaluate it (MS-DTYP 2.5.3.2) for every protocol, a new object inherits
//! from its directory's (MS-DTYP 2.5.3.4.2), a chmod drops it, and node
//! records stored before the flag existed still read.

use std::collections::BTreeMap;

use duet_cluster::kv::Txn;
use duet_cluster::machine::{apply, execute};
use duet_cluster::records::{encode, Command, Node};
use duet_cluster::{fsck, keys};
use duet_fs::acl::{ace_flags, rights, Ace, Acl, Sid, Stored};
use duet_fs::{
    Access, Attrs, Batch, CreateKind, Credentials, FsError, IfExists, NodeId, ObjRef, Op, OpOutput, OpResult, SetAttrs,
    ROOT_ID,
};
use serde::{Deserialize, Serialize};

type Kv = BTreeMap<Vec<u8>, Vec<u8>>;

const OWNER: u32 = 1000;
const GROUP: u32 = 100;
const OTHER: u32 = 2000;

fn run_as(kv: &mut Kv, cred: Credentials, ops: Vec<Op>) -> Vec<OpResult> {
    let mut b = Batch::new(cred, 1_000);
    b.ops = ops;
    let (results, writes) = {
        let mut t = Txn::new(&*kv);
        let out = execute(&mut t, &b);
        (out.results, t.into_writes())
    };
    for (k, v) in writes {
        match v {
            Some(v) => kv.insert(k, v),
            None => kv.remove(&k),
        };
    }
    results
}

fn init() -> Kv {
    let mut kv = Kv::new();
    let writes = {
        let mut t = Txn::new(&kv);
        apply(&mut t, &Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] });
        t.into_writes()
    };
    for (k, v) in writes {
        if let Some(v) = v {
            kv.insert(k, v);
        }
    }
    kv
}

fn owner() -> Credentials {
    Credentials::user(OWNER, GROUP)
}

fn other() -> Credentials {
    Credentials::user(OTHER, 200)
}

/// Creates `name` in `dir` as `cred` with `mode`.
fn create(kv: &mut Kv, cred: Credentials, dir: NodeId, name: &str, kind: CreateKind, mode: u32) -> NodeId {
    let r = run_as(
        kv,
        cred,
        vec![Op::Create {
            dir: ObjRef::Id(dir),
            name: name.into(),
            kind,
            attrs: SetAttrs { mode: Some(mode), ..Default::default() },
            if_exists: IfExists::Fail,
        }],
    );
    r[0].as_ref().unwrap().attrs().unwrap().id
}

/// A directory `d` (0777, root's) with a file and a directory of OWNER's.
fn tree(kv: &mut Kv) -> NodeId {
    let d = create(kv, Credentials::root(), ROOT_ID, "d", CreateKind::Directory, 0o777);
    let r = run_as(kv, Credentials::root(), vec![Op::SetAttr { obj: ObjRef::Id(ROOT_ID), attrs: SetAttrs { mode: Some(0o755), ..Default::default() } }]);
    assert!(r[0].is_ok());
    d
}

fn node(kv: &Kv, id: NodeId) -> Node {
    Node::decode(&kv[&keys::node(id)]).unwrap()
}

fn set_acl(kv: &mut Kv, cred: Credentials, id: NodeId, control: u16, acl: Option<&Acl>) -> OpResult {
    let acl = acl.map(|a| {
        let mut v = Vec::new();
        a.encode(&mut v);
        (control, v)
    });
    run_as(kv, cred, vec![Op::SetAcl { obj: ObjRef::Id(id), acl }]).remove(0)
}

fn get_acl(kv: &mut Kv, id: NodeId) -> Option<(u16, Acl)> {
    match run_as(kv, Credentials::root(), vec![Op::GetAcl { obj: ObjRef::Id(id) }]).remove(0) {
        Ok(OpOutput::Acl { acl, .. }) => acl.map(|(c, b)| (c, Acl::decode(&b).unwrap())),
        other => panic!("{other:?}"),
    }
}

fn open(kv: &mut Kv, cred: Credentials, id: NodeId, read: bool, write: bool) -> Result<(), FsError> {
    let access = Access { read, write, execute: false };
    run_as(kv, cred, vec![Op::Open { obj: ObjRef::Id(id), access, truncate: false }]).remove(0).map(|_| ())
}

fn lookup(kv: &mut Kv, cred: Credentials, dir: NodeId, name: &str) -> Result<(), FsError> {
    run_as(kv, cred, vec![Op::Lookup { dir: ObjRef::Id(dir), name: name.into() }]).remove(0).map(|_| ())
}

#[test]
fn a_deny_ace_refuses_what_the_mode_would_allow() {
    let mut kv = init();
    let d = tree(&mut kv);
    let f = create(&mut kv, owner(), d, "f", CreateKind::File, 0o666);
    // The mode lets anyone read and write.
    assert_eq!(open(&mut kv, other(), f, true, true), Ok(()));
    assert!(!node(&kv, f).has_acl, "a new node has no DACL");

    // Deny OTHER writing; allow everyone read and write.
    let acl = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(OTHER), rights::WRITE_DATA | rights::APPEND_DATA, 0),
            Ace::allow(Sid::everyone(), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_WRITE, 0),
        ],
    };
    // Not the owner: refused (WRITE_DAC).
    assert_eq!(set_acl(&mut kv, other(), f, 0, Some(&acl)), Err(FsError::Perm));
    assert!(!node(&kv, f).has_acl);
    assert!(set_acl(&mut kv, owner(), f, 0x1000 | 0x8000, Some(&acl)).is_ok());
    let n = node(&kv, f);
    assert!(n.has_acl);
    // The mode follows the DACL (rw for everyone) and the special bits stay.
    assert_eq!(n.attrs.mode, 0o666);
    assert_eq!(get_acl(&mut kv, f), Some((0x1000, acl.clone())), "control kept to PROTECTED/AUTO_INHERITED");

    assert_eq!(open(&mut kv, other(), f, true, false), Ok(()));
    assert_eq!(open(&mut kv, other(), f, false, true), Err(FsError::Access));
    assert_eq!(open(&mut kv, Credentials::user(3000, 300), f, true, true), Ok(()));
    // SetAttr size (NFS SETATTR, SMB end of file) is a write too.
    let r = run_as(&mut kv, other(), vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: SetAttrs { size: Some(1), ..Default::default() } }]);
    assert_eq!(r[0], Err(FsError::Access));
    // Root keeps its bypass.
    assert_eq!(open(&mut kv, Credentials::root(), f, true, true), Ok(()));
    // A group SID of the caller is matched as well.
    let by_group = Acl { aces: vec![Ace::deny(Sid::unix_group(300), rights::READ_DATA, 0), Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0)] };
    assert!(set_acl(&mut kv, owner(), f, 0, Some(&by_group)).is_ok());
    let mut c = Credentials::user(3000, 1);
    c.groups = vec![300];
    assert_eq!(open(&mut kv, c, f, true, false), Err(FsError::Access));
    assert_eq!(open(&mut kv, other(), f, true, false), Ok(()));
    assert!(fsck::check(&kv, &[]).problems.is_empty(), "{:?}", fsck::check(&kv, &[]).problems);
}

#[test]
fn a_directory_dacl_decides_traverse_and_adding_entries() {
    let mut kv = init();
    let d = tree(&mut kv);
    let sub = create(&mut kv, owner(), d, "sub", CreateKind::Directory, 0o777);
    create(&mut kv, owner(), sub, "inner", CreateKind::File, 0o666);
    assert_eq!(lookup(&mut kv, other(), sub, "inner"), Ok(()));
    // OTHER may not traverse nor add files; everyone else may everything.
    let acl = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(OTHER), rights::EXECUTE | rights::WRITE_DATA, 0),
            Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert!(set_acl(&mut kv, owner(), sub, 0, Some(&acl)).is_ok());
    assert_eq!(lookup(&mut kv, other(), sub, "inner"), Err(FsError::Access));
    assert_eq!(lookup(&mut kv, Credentials::user(3000, 300), sub, "inner"), Ok(()));
    let r = run_as(
        &mut kv,
        other(),
        vec![Op::Create {
            dir: ObjRef::Id(sub),
            name: "new".into(),
            kind: CreateKind::File,
            attrs: SetAttrs::default(),
            if_exists: IfExists::Fail,
        }],
    );
    assert_eq!(r[0].as_ref().err(), Some(&FsError::Access));
    // The edge's copy of the mode follows the mode the DACL set.
    let e: duet_cluster::records::Edge = duet_cluster::records::decode(&kv[&keys::edge(d, "sub")]).unwrap();
    assert_eq!(e.dir_perm.map(|p| p.0), Some(node(&kv, sub).attrs.mode));
}

#[test]
fn new_objects_inherit_the_directory_dacl() {
    let mut kv = init();
    let d = tree(&mut kv);
    let sub = create(&mut kv, owner(), d, "sub", CreateKind::Directory, 0o777);
    let inh = ace_flags::OBJECT_INHERIT | ace_flags::CONTAINER_INHERIT;
    let acl = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(OTHER), rights::READ_DATA, inh),
            Ace::allow(Sid::creator_owner(), rights::FILE_ALL_ACCESS, inh),
            Ace::allow(Sid::everyone(), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_EXECUTE | rights::WRITE_DATA, inh),
        ],
    };
    assert!(set_acl(&mut kv, owner(), sub, 0x0400, Some(&acl)).is_ok());
    let f = create(&mut kv, Credentials::user(3000, 300), sub, "f", CreateKind::File, 0o600);
    let n = node(&kv, f);
    assert!(n.has_acl, "the file inherited a DACL");
    let (control, got) = get_acl(&mut kv, f).unwrap();
    assert_eq!(control, 0x0400, "AUTO_INHERITED carried");
    let inherited = ace_flags::INHERITED;
    assert_eq!(
        got.aces,
        vec![
            Ace::deny(Sid::unix_user(OTHER), rights::READ_DATA, inherited),
            Ace::allow(Sid::unix_user(3000), rights::FILE_ALL_ACCESS, inherited),
            Ace::allow(Sid::everyone(), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_EXECUTE | rights::WRITE_DATA, inherited),
        ]
    );
    // The inherited DACL, not the 0600 asked for, decides.
    assert_eq!(open(&mut kv, other(), f, true, false), Err(FsError::Access));
    assert_eq!(open(&mut kv, Credentials::user(4000, 400), f, true, true), Ok(()));
    assert_eq!(n.attrs.mode & 0o777, 0o777, "mode from the inherited DACL, not the 0600 asked for");
    // A subdirectory inherits too, and passes it on.
    let s2 = create(&mut kv, owner(), sub, "s2", CreateKind::Directory, 0o700);
    assert!(node(&kv, s2).has_acl);
    let g = create(&mut kv, owner(), s2, "g", CreateKind::File, 0o600);
    assert_eq!(open(&mut kv, other(), g, true, false), Err(FsError::Access));
    // A directory without inheritable ACEs passes nothing on.
    let plain = create(&mut kv, owner(), d, "plain", CreateKind::Directory, 0o777);
    let flat = Acl { aces: vec![Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0)] };
    assert!(set_acl(&mut kv, owner(), plain, 0, Some(&flat)).is_ok());
    let h = create(&mut kv, owner(), plain, "h", CreateKind::File, 0o644);
    assert!(!node(&kv, h).has_acl);
    assert!(fsck::check(&kv, &[]).problems.is_empty(), "{:?}", fsck::check(&kv, &[]).problems);
}

#[test]
fn chmod_drops_the_dacl_and_remove_deletes_it() {
    let mut kv = init();
    let d = tree(&mut kv);
    let f = create(&mut kv, owner(), d, "f", CreateKind::File, 0o666);
    let acl = Acl { aces: vec![Ace::deny(Sid::unix_user(OTHER), rights::READ_DATA, 0), Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0)] };
    assert!(set_acl(&mut kv, owner(), f, 0, Some(&acl)).is_ok());
    assert_eq!(open(&mut kv, other(), f, true, false), Err(FsError::Access));
    let r = run_as(&mut kv, owner(), vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: SetAttrs { mode: Some(0o644), ..Default::default() } }]);
    assert!(r[0].is_ok());
    assert!(!node(&kv, f).has_acl);
    assert!(!kv.contains_key(&keys::acl(f)));
    assert_eq!(get_acl(&mut kv, f), None);
    assert_eq!(open(&mut kv, other(), f, true, false), Ok(()), "the mode decides again");
    assert_eq!(open(&mut kv, other(), f, false, true), Err(FsError::Access));
    // SetAcl None drops it too.
    assert!(set_acl(&mut kv, owner(), f, 0, Some(&acl)).is_ok());
    assert!(set_acl(&mut kv, owner(), f, 0, None).is_ok());
    assert!(!node(&kv, f).has_acl && !kv.contains_key(&keys::acl(f)));
    // Removing the file removes its DACL.
    assert!(set_acl(&mut kv, owner(), f, 0, Some(&acl)).is_ok());
    let r = run_as(&mut kv, owner(), vec![Op::Remove { dir: ObjRef::Id(d), name: "f".into(), dir_only: Some(false) }]);
    assert!(r[0].is_ok());
    assert!(!kv.contains_key(&keys::acl(f)));
    // Undecodable ACL bytes are refused; nothing stored.
    let g = create(&mut kv, owner(), d, "g", CreateKind::File, 0o644);
    let r = run_as(&mut kv, owner(), vec![Op::SetAcl { obj: ObjRef::Id(g), acl: Some((0, vec![2, 0, 9])) }]);
    assert_eq!(r[0], Err(FsError::Invalid));
    assert!(!node(&kv, g).has_acl);
    assert!(fsck::check(&kv, &[]).problems.is_empty());
    // A holder of WRITE_DAC by the DACL may set it, though not the owner.
    let wdac = Acl { aces: vec![Ace::allow(Sid::unix_user(OTHER), rights::WRITE_DAC | rights::READ_DATA, 0)] };
    assert!(set_acl(&mut kv, owner(), g, 0, Some(&wdac)).is_ok());
    let ro = Acl { aces: vec![Ace::allow(Sid::everyone(), rights::FILE_GENERIC_READ, 0)] };
    assert!(set_acl(&mut kv, other(), g, 0, Some(&ro)).is_ok());
    assert_eq!(set_acl(&mut kv, other(), g, 0, Some(&wdac)), Err(FsError::Perm), "the new DACL grants OTHER no WRITE_DAC");
}

/// A node record as versions before `has_acl` stored it.
#[derive(Serialize, Deserialize)]
struct NodeV3 {
    attrs: Attrs,
    parent: NodeId,
    target: Option<String>,
    chunked: bool,
    may_have_eas: bool,
    zone: NodeId,
}

#[test]
fn nodes_stored_before_the_flag_read_without_a_dacl() {
    let mut kv = init();
    let d = tree(&mut kv);
    let f = create(&mut kv, owner(), d, "f", CreateKind::File, 0o640);
    let n = node(&kv, f);
    let old = NodeV3 { attrs: n.attrs.clone(), parent: n.parent, target: n.target.clone(), chunked: n.chunked, may_have_eas: true, zone: 7 };
    kv.insert(keys::node(f), encode(&old).unwrap());
    let back = node(&kv, f);
    assert!(!back.has_acl);
    assert_eq!((back.zone, back.may_have_eas, back.attrs), (7, true, n.attrs));
    // An older binary reads a new record, ignoring the flag.
    let new = encode(&node(&kv, d)).unwrap();
    assert_eq!(duet_cluster::records::decode::<NodeV3>(&new).map(|o| o.attrs.id), Some(d));
}

#[test]
fn a_files_streams_follow_its_dacl() {
    let mut kv = init();
    let d = tree(&mut kv);
    let f = create(&mut kv, owner(), d, "f", CreateKind::File, 0o666);
    let stream = |kv: &mut Kv, cred: Credentials, create: Option<IfExists>| {
        run_as(kv, cred, vec![Op::OpenStream { obj: ObjRef::Id(f), name: "s".into(), attrs: SetAttrs::default(), create }])
            .remove(0)
            .map(|_| ())
    };
    assert_eq!(stream(&mut kv, owner(), Some(IfExists::Open)), Ok(()));
    // OTHER may neither read nor write the file by its DACL, though the
    // mode (rw for everyone, from the Everyone ACE) would let them.
    let acl = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(OTHER), rights::READ_DATA | rights::WRITE_DATA | rights::APPEND_DATA, 0),
            Ace::allow(Sid::everyone(), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_WRITE, 0),
        ],
    };
    assert!(set_acl(&mut kv, owner(), f, 0, Some(&acl)).is_ok());
    assert_eq!(node(&kv, f).attrs.mode & 0o006, 0o006, "the mode alone would allow");
    assert_eq!(stream(&mut kv, other(), None), Err(FsError::Access), "an existing stream");
    assert_eq!(stream(&mut kv, other(), Some(IfExists::Open)), Err(FsError::Access));
    let r = run_as(&mut kv, other(), vec![Op::OpenStream { obj: ObjRef::Id(f), name: "t".into(), attrs: SetAttrs::default(), create: Some(IfExists::Fail) }]);
    assert_eq!(r[0].as_ref().map(|_| ()), Err(&FsError::Access), "a new stream");
    assert_eq!(stream(&mut kv, Credentials::user(3000, 300), None), Ok(()), "others still may");
}

#[test]
fn a_null_dacl_is_kept_as_such_and_lets_everyone_in() {
    use duet_fs::acl::control::DACL_PRESENT;
    let mut kv = init();
    let d = tree(&mut kv);
    let f = create(&mut kv, owner(), d, "f", CreateKind::File, 0o600);
    assert_eq!(open(&mut kv, other(), f, true, false), Err(FsError::Access));
    let null = |kv: &mut Kv, control: u16| run_as(kv, owner(), vec![Op::SetAcl { obj: ObjRef::Id(f), acl: Some((control, Vec::new())) }]).remove(0);
    // Empty bytes without DACL_PRESENT say nothing: refused.
    assert_eq!(null(&mut kv, 0), Err(FsError::Invalid));
    assert!(null(&mut kv, DACL_PRESENT).is_ok());
    let n = node(&kv, f);
    assert!(n.has_acl);
    assert_eq!(n.attrs.mode & 0o777, 0o777, "a NULL DACL is mode 0777");
    match run_as(&mut kv, Credentials::root(), vec![Op::GetAcl { obj: ObjRef::Id(f) }]).remove(0) {
        Ok(OpOutput::Acl { acl: Some((c, b)), .. }) => assert!(c & DACL_PRESENT != 0 && b.is_empty(), "read back as NULL"),
        other => panic!("{other:?}"),
    }
    assert_eq!(open(&mut kv, other(), f, true, true), Ok(()), "everyone may read and write");
    assert!(fsck::check(&kv, &[]).problems.is_empty(), "{:?}", fsck::check(&kv, &[]).problems);
    // A chmod drops it like any DACL.
    let r = run_as(&mut kv, owner(), vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: SetAttrs { mode: Some(0o600), ..Default::default() } }]);
    assert!(r[0].is_ok());
    assert!(!node(&kv, f).has_acl && !kv.contains_key(&keys::acl(f)));
    assert_eq!(open(&mut kv, other(), f, true, false), Err(FsError::Access));
}

/// `Op::SetAcl` with a whole self-relative descriptor (`acl::Stored`)
/// sets the owner and group SIDs it names, keeping the DACL when it has
/// none.
fn set_sd(kv: &mut Kv, cred: Credentials, id: NodeId, s: &Stored) -> OpResult {
    let (c, b) = s.encode();
    run_as(kv, cred, vec![Op::SetAcl { obj: ObjRef::Id(id), acl: Some((c, b)) }]).remove(0)
}

fn get_sec(kv: &mut Kv, id: NodeId) -> Option<Stored> {
    match run_as(kv, Credentials::root(), vec![Op::GetAcl { obj: ObjRef::Id(id) }]).remove(0) {
        Ok(OpOutput::Acl { acl, .. }) => acl.map(|(c, b)| Stored::decode(c, &b).unwrap()),
        other => panic!("{other:?}"),
    }
}

fn owned_by(sid: Sid) -> Stored {
    Stored { owner: Some(sid), ..Default::default() }
}

#[test]
fn an_owner_sid_in_the_callers_token_is_kept_and_is_the_owner_access_checks_use() {
    let mut kv = init();
    let d = tree(&mut kv);
    let f = create(&mut kv, owner(), d, "f", CreateKind::File, 0o600);
    // Only a SID of the caller's token (or anything, for root).
    let admins = Sid::new(5, &[32, 544]);
    assert_eq!(set_sd(&mut kv, owner(), f, &owned_by(admins.clone())), Err(FsError::Perm));
    assert_eq!(set_sd(&mut kv, other(), f, &owned_by(Sid::everyone())), Err(FsError::Perm), "not the owner: no WRITE_OWNER");
    assert!(get_sec(&mut kv, f).is_none());
    assert!(set_sd(&mut kv, owner(), f, &owned_by(Sid::everyone())).is_ok());
    let n = node(&kv, f);
    assert!(n.has_acl, "an owner SID alone is a record");
    assert_eq!((n.attrs.uid, n.attrs.mode), (OWNER, 0o600), "the uid and the mode stay");
    assert_eq!(get_sec(&mut kv, f), Some(owned_by(Sid::everyone())));
    // No DACL: the mode still decides.
    assert_eq!(open(&mut kv, other(), f, true, false), Err(FsError::Access));
    // A group SID: any but a Unix one (MS-DTYP 2.5.3.2 gives a group no
    // rights of its own), here BUILTIN\Users.
    let users = Sid::new(5, &[32, 545]);
    assert!(set_sd(&mut kv, owner(), f, &Stored { group: Some(users.clone()), ..Default::default() }).is_ok());
    assert_eq!(get_sec(&mut kv, f), Some(Stored { owner: Some(Sid::everyone()), group: Some(users.clone()), ..Default::default() }));
    assert_eq!(set_sd(&mut kv, owner(), f, &Stored { group: Some(Sid::unix_user(5)), ..Default::default() }), Err(FsError::Invalid));

    // A DACL granting only OWNER RIGHTS read: the owner is now Everyone,
    // so OTHER (in Everyone) reads, and holds WRITE_DAC as owners do.
    let dacl = Acl { aces: vec![Ace::allow(Sid::owner_rights(), rights::READ_DATA | rights::WRITE_DAC, 0)] };
    assert!(set_acl(&mut kv, owner(), f, 0, Some(&dacl)).is_ok());
    let s = get_sec(&mut kv, f).unwrap();
    assert_eq!((s.owner.as_ref(), s.effective_dacl()), (Some(&Sid::everyone()), Some(&dacl)), "a DACL set alone keeps the owner SID");
    assert_eq!(open(&mut kv, other(), f, true, false), Ok(()));
    assert_eq!(open(&mut kv, other(), f, false, true), Err(FsError::Access));
    let open_dacl = Acl { aces: vec![Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0)] };
    assert!(set_acl(&mut kv, other(), f, 0, Some(&open_dacl)).is_ok(), "the owner SID's holder has WRITE_DAC");
    assert!(set_acl(&mut kv, other(), f, 0, Some(&dacl)).is_ok());

    // Back to the uid owner: its S-1-22-1 SID clears the stored one, and
    // OTHER is no owner any more.
    assert!(set_sd(&mut kv, owner(), f, &owned_by(Sid::unix_user(OWNER))).is_ok());
    assert_eq!(get_sec(&mut kv, f).unwrap().owner, None);
    assert_eq!(open(&mut kv, other(), f, true, false), Err(FsError::Access));
    assert_eq!(set_acl(&mut kv, other(), f, 0, Some(&open_dacl)), Err(FsError::Perm));

    // A chmod drops the DACL, not the owner SID; a chown drops that.
    assert!(set_sd(&mut kv, owner(), f, &owned_by(Sid::everyone())).is_ok());
    let chmod = SetAttrs { mode: Some(0o640), ..Default::default() };
    assert!(run_as(&mut kv, owner(), vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: chmod }])[0].is_ok());
    let s = get_sec(&mut kv, f).unwrap();
    assert!(!s.has_dacl() && s.owner == Some(Sid::everyone()) && s.group == Some(users.clone()), "{s:?}");
    assert!(fsck::check(&kv, &[]).problems.is_empty(), "{:?}", fsck::check(&kv, &[]).problems);
    let chown = SetAttrs { uid: Some(OTHER), ..Default::default() };
    assert!(run_as(&mut kv, Credentials::root(), vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: chown }])[0].is_ok());
    assert_eq!(get_sec(&mut kv, f), Some(Stored { group: Some(users), ..Default::default() }), "the chown took the owner SID");
    let chgrp = SetAttrs { gid: Some(GROUP), ..Default::default() };
    assert!(run_as(&mut kv, Credentials::root(), vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: chgrp }])[0].is_ok());
    assert!(get_sec(&mut kv, f).is_none());
    assert!(!node(&kv, f).has_acl, "nothing left: no record");
    // Root may name any SID.
    assert!(set_sd(&mut kv, Credentials::root(), f, &owned_by(admins.clone())).is_ok());
    assert_eq!(get_sec(&mut kv, f).unwrap().owner, Some(admins));
    assert!(fsck::check(&kv, &[]).problems.is_empty(), "{:?}", fsck::check(&kv, &[]).problems);
}

#[test]
fn an_undecodable_record_grants_nothing_and_reads_as_an_error() {
    let mut kv = init();
    let d = tree(&mut kv);
    let f = create(&mut kv, owner(), d, "f", CreateKind::File, 0o666);
    assert!(set_sd(&mut kv, owner(), f, &owned_by(Sid::everyone())).is_ok());
    // A descriptor with a byte more than its canonical layout.
    kv.get_mut(&keys::acl(f)).unwrap().push(0);
    assert_eq!(open(&mut kv, other(), f, true, false), Err(FsError::Access), "never the mode's grant");
    let r = run_as(&mut kv, Credentials::root(), vec![Op::GetAcl { obj: ObjRef::Id(f) }]).remove(0);
    assert_eq!(r.err(), Some(FsError::Io));
    assert!(!fsck::check(&kv, &[]).problems.is_empty(), "fsck reports it");
}

fn remove(kv: &mut Kv, cred: Credentials, dir: NodeId, name: &str) -> Result<(), FsError> {
    run_as(kv, cred, vec![Op::Remove { dir: ObjRef::Id(dir), name: name.into(), dir_only: None }]).remove(0).map(|_| ())
}

fn rename(kv: &mut Kv, cred: Credentials, dir: NodeId, from: &str, to: &str, replace: bool) -> Result<(), FsError> {
    let op = Op::Rename {
        src_dir: ObjRef::Id(dir),
        src_name: from.into(),
        dst_dir: ObjRef::Id(dir),
        dst_name: to.into(),
        replace,
    };
    run_as(kv, cred, vec![op]).remove(0).map(|_| ())
}

/// Windows' rule for removing a name (RFC 8881 6.2.1.3.2): DELETE on the
/// object or DELETE_CHILD on its directory allows it whatever the other
/// says; a DACL that names the bit for the caller without granting it
/// refuses; where neither says, write and search on the directory decide.
#[test]
fn delete_on_the_file_or_delete_child_on_the_directory_decides_a_removal() {
    let mut kv = init();
    let d = tree(&mut kv);
    let sub = create(&mut kv, owner(), d, "sub", CreateKind::Directory, 0o777);
    for n in ["a", "b", "c", "e", "r"] {
        create(&mut kv, owner(), sub, n, CreateKind::File, 0o666);
    }
    let id = |kv: &mut Kv, n: &str| match run_as(kv, Credentials::root(), vec![Op::Lookup { dir: ObjRef::Id(sub), name: n.into() }]).remove(0) {
        Ok(o) => o.attrs().unwrap().id,
        e => panic!("{e:?}"),
    };
    // The directory lets OTHER list and traverse only: no write.
    let read_only = Acl {
        aces: vec![
            Ace::allow(Sid::unix_user(OTHER), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_EXECUTE, 0),
            Ace::allow(Sid::unix_user(OWNER), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert!(set_acl(&mut kv, owner(), sub, 0, Some(&read_only)).is_ok());
    // Neither names DELETE / DELETE_CHILD for OTHER: no write, no removal.
    assert_eq!(remove(&mut kv, other(), sub, "a"), Err(FsError::Access));
    // A file whose DACL grants OTHER DELETE may be removed by OTHER
    // though the directory is read-only to it.
    let a = id(&mut kv, "a");
    let deletable = Acl {
        aces: vec![Ace::allow(Sid::unix_user(OTHER), rights::DELETE | rights::FILE_GENERIC_READ, 0)],
    };
    assert!(set_acl(&mut kv, owner(), a, 0, Some(&deletable)).is_ok());
    assert_eq!(remove(&mut kv, other(), sub, "a"), Ok(()));
    assert_eq!(lookup(&mut kv, owner(), sub, "a"), Err(FsError::NotFound));
    // A missing name in a directory OTHER may not change: Access, not
    // NotFound.
    assert_eq!(remove(&mut kv, other(), sub, "zz"), Err(FsError::Access));

    // The directory lets OTHER change it (Modify: write, search, no
    // DELETE_CHILD): a file with no DACL goes by that...
    let modify = Acl {
        aces: vec![
            Ace::allow(Sid::unix_user(OTHER), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_WRITE | rights::FILE_GENERIC_EXECUTE | rights::DELETE, 0),
            Ace::allow(Sid::unix_user(OWNER), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert!(set_acl(&mut kv, owner(), sub, 0, Some(&modify)).is_ok());
    assert_eq!(remove(&mut kv, other(), sub, "b"), Ok(()));
    // ...but a file whose DACL denies OTHER DELETE is kept, from removal
    // and from being renamed away or replaced.
    let c = id(&mut kv, "c");
    let keep = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(OTHER), rights::DELETE, 0),
            Ace::allow(Sid::everyone(), rights::FILE_GENERIC_READ | rights::FILE_GENERIC_WRITE, 0),
        ],
    };
    assert!(set_acl(&mut kv, owner(), c, 0, Some(&keep)).is_ok());
    assert_eq!(remove(&mut kv, other(), sub, "c"), Err(FsError::Access));
    assert_eq!(rename(&mut kv, other(), sub, "c", "c2", false), Err(FsError::Access));
    assert_eq!(rename(&mut kv, other(), sub, "e", "c", true), Err(FsError::Access));
    assert_eq!(lookup(&mut kv, owner(), sub, "c"), Ok(()));
    assert_eq!(lookup(&mut kv, owner(), sub, "e"), Ok(()));
    // Other users are not named by the deny: the directory's write decides.
    assert_eq!(rename(&mut kv, owner(), sub, "r", "r2", false), Ok(()));
    // DELETE_CHILD on the directory wins over the file's deny.
    let full = Acl {
        aces: vec![
            Ace::allow(Sid::unix_user(OTHER), rights::FILE_ALL_ACCESS, 0),
            Ace::allow(Sid::unix_user(OWNER), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert!(set_acl(&mut kv, owner(), sub, 0, Some(&full)).is_ok());
    assert_eq!(remove(&mut kv, other(), sub, "c"), Ok(()));
    // A directory denying OTHER DELETE_CHILD, with write allowed: a file
    // without a DACL is kept, one granting DELETE goes.
    let no_delete_child = Acl {
        aces: vec![
            Ace::deny(Sid::unix_user(OTHER), rights::DELETE_CHILD, 0),
            Ace::allow(Sid::unix_user(OTHER), rights::FILE_ALL_ACCESS, 0),
            Ace::allow(Sid::unix_user(OWNER), rights::FILE_ALL_ACCESS, 0),
        ],
    };
    assert!(set_acl(&mut kv, owner(), sub, 0, Some(&no_delete_child)).is_ok());
    assert_eq!(remove(&mut kv, other(), sub, "e"), Err(FsError::Access));
    let e = id(&mut kv, "e");
    assert!(set_acl(&mut kv, owner(), e, 0, Some(&deletable)).is_ok());
    assert_eq!(remove(&mut kv, other(), sub, "e"), Ok(()));
    // Root keeps its bypass.
    assert_eq!(remove(&mut kv, Credentials::root(), sub, "r2"), Ok(()));
    assert!(fsck::check(&kv, &[]).problems.is_empty(), "{:?}", fsck::check(&kv, &[]).problems);
}
