//! Access control against a real duetd, over both protocols: read-only
//! shares, file permissions across users, NFS export client networks and
//! root squash, hostile names ('/', NUL, '..', over 255 bytes, invalid
//! UTF-16 / UTF-8), symlinks that point outside the share, a session after
//! LOGOFF, a replayed signed message, and logon failures logged without
//! the password. (A wrong password, an unknown user and a tampered
//! signature are in smb_hostile.rs; forged handles and stale stateids in
//! nfs_hostile.rs.)

mod clients;
mod common;

use std::time::Duration;

use clients::*;
use common::Daemon;
use duet_protocols::nfs::mount::MountStat3;
use duet_protocols::nfs::nfs3::*;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::{Name, Opaque};
use duet_protocols::smb2::create::{create_disposition, create_options};
use duet_protocols::smb2::cursor::Utf16;
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::logoff::LogoffRequest;
use duet_protocols::smb2::message::Request;
use duet_protocols::smb2::status::NtStatus;

fn getattr3(n: &mut Nfs, fh: &[u8]) -> Fattr3 {
    let rep = n.v3(&Nfs3Args::GetAttr(GetAttr3Args { object: Opaque(fh) }));
    match results3(proc3::GETATTR, &rep) {
        Nfs3Results::GetAttr(Nfs3Res::Ok(a)) => a,
        other => panic!("{other:?}"),
    }
}

fn create3_raw(n: &mut Nfs, dir: &[u8], name: &[u8]) -> Nfsstat3 {
    let rep = n.v3(&Nfs3Args::Create(Create3Args {
        where_: DirOpArgs3 {
            dir: Opaque(dir),
            name: Name(name),
        },
        how: CreateHow3::Unchecked(Sattr3 {
            mode: Some(0o644),
            ..Default::default()
        }),
    }));
    match results3(proc3::CREATE, &rep) {
        Nfs3Results::Create(Nfs3Res::Ok(_)) => Nfsstat3::OK,
        Nfs3Results::Create(Nfs3Res::Fail(s, _)) => s,
        other => panic!("{other:?}"),
    }
}

fn smb_create_status(c: &mut Smb, name: Utf16<'_>) -> NtStatus {
    let mut req = open_req(
        "",
        create_disposition::OPEN_IF,
        create_options::NON_DIRECTORY_FILE,
        RW,
    );
    req.name = name;
    match c.create_req(req) {
        Ok(f) => {
            c.close(f);
            NtStatus::SUCCESS
        }
        Err(e) => e,
    }
}

#[test]
fn shares_exports_permissions_names_symlinks_and_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&[
        "user",
        "add",
        "alice",
        "--password",
        "alicepw",
        "--uid",
        "3001",
        "--gid",
        "3001",
    ]);
    d.ok(&[
        "user",
        "add",
        "bob",
        "--password",
        "bobpw",
        "--uid",
        "3002",
        "--gid",
        "3002",
    ]);
    d.ok(&["share", "add", "ro", "--path", "/ro", "--read-only"]);
    d.ok(&[
        "share",
        "add",
        "netonly",
        "--path",
        "/netonly",
        "--nfs-clients",
        "127.0.0.5/32",
    ]);
    d.ok(&[
        "share",
        "add",
        "rootok",
        "--path",
        "/rootok",
        "--no-root-squash",
    ]);
    d.ok(&["share", "add", "team", "--path", "/team", "--users", "alice"]);
    assert!(d.ok(&["share", "show", "team"]).contains("alice"), "share show lists the allowed users");
    std::thread::sleep(Duration::from_millis(2500));
    let (smb, nfs) = (d.smb_port, d.nfs_port);

    // ---- Read-only share: reads work, every change is refused.
    let mut c = Smb::logged_on(smb, "alice", "alicepw", "ro");
    let st = smb_create_status(&mut c, Utf16::Str("new.txt"));
    assert!(
        st == NtStatus::ACCESS_DENIED || st == NtStatus::MEDIA_WRITE_PROTECTED,
        "SMB create on a read-only share: {st:?}"
    );
    let dir = c.open_dir("").expect("a read-only share opens for reading");
    assert_eq!(c.query_dir(dir, 4096, true).0, NtStatus::SUCCESS);
    c.close(dir);
    let mut n = Nfs::connect(nfs).as_user(3001, 3001);
    let ro = n.mount("/ro").expect("a read-only export mounts");
    assert_eq!(
        n.create3(&ro, "new.txt"),
        Err(Nfsstat3::ROFS),
        "NFSv3 CREATE on a read-only export"
    );
    let rep = n.v3(&Nfs3Args::Mkdir(Mkdir3Args {
        where_: DirOpArgs3 {
            dir: Opaque(&ro),
            name: Name(b"d"),
        },
        attributes: Sattr3::default(),
    }));
    assert!(matches!(
        results3(proc3::MKDIR, &rep),
        Nfs3Results::Mkdir(Nfs3Res::Fail(Nfsstat3::ROFS, _))
    ));
    let mut s = session(&mut n, b"access-1", 1 << 20, 64);
    assert_eq!(
        open4(&mut n, &mut s, &ro, b"o", "new4.txt"),
        Err(Nfsstat4::ROFS),
        "NFSv4.1 OPEN/create read-only"
    );

    // ---- Allowed users: alice may connect to "team", bob may not
    // (MS-SMB2 3.3.5.7: ACCESS_DENIED); other shares admit both.
    let mut t = Smb::connect(smb);
    t.negotiate();
    assert_eq!(t.login("alice", "alicepw"), NtStatus::SUCCESS);
    assert_eq!(t.tree("team"), NtStatus::SUCCESS, "an allowed user connects");
    let mut t = Smb::connect(smb);
    t.negotiate();
    assert_eq!(t.login("bob", "bobpw"), NtStatus::SUCCESS);
    assert_eq!(t.tree("team"), NtStatus::ACCESS_DENIED, "a user not on the share's list");
    assert_eq!(t.tree("public"), NtStatus::SUCCESS, "the same user on a share for everyone");
    // Over NFS the list goes by uid (AUTH_SYS): alice's uid uses "team",
    // bob's gets NFS3ERR_ACCES on every call (MOUNT itself goes by address).
    let mut na = Nfs::connect(nfs).as_user(3001, 3001);
    let team = na.mount("/team").expect("team mounts");
    let _ = getattr3(&mut na, &team);
    let mut nb = Nfs::connect(nfs).as_user(3002, 3002);
    let team_b = nb.mount("/team").expect("MOUNT goes by address");
    let rep = nb.v3(&Nfs3Args::GetAttr(GetAttr3Args { object: Opaque(&team_b) }));
    assert!(
        matches!(results3(proc3::GETATTR, &rep), Nfs3Results::GetAttr(Nfs3Res::Fail(Nfsstat3::ACCES, _))),
        "bob's uid on team over NFS"
    );
    let e = d.ctl(&["share", "add", "bad", "--path", "/bad", "--users", "no body"]);
    assert!(!e.status.success(), "an invalid user name in --users is refused");

    // ---- File permissions across users (both protocols).
    let mut a = Smb::logged_on(smb, "alice", "alicepw", "public");
    let f = a.create("alice.txt").unwrap();
    assert_eq!(a.write(f, 0, b"alice's", true), NtStatus::SUCCESS);
    a.close(f);
    let mut pub_n = Nfs::connect(nfs).as_user(3002, 3002);
    let public = pub_n.mount("/public").unwrap();
    let fh = pub_n.lookup3(&public, b"alice.txt").unwrap();
    let attrs = getattr3(&mut pub_n, &fh);
    assert_eq!(
        (attrs.uid, attrs.gid),
        (3001, 3001),
        "an SMB user's file belongs to its uid"
    );
    assert_eq!(
        attrs.mode & 0o022,
        0,
        "mode {:o}: others may not write",
        attrs.mode
    );
    assert_eq!(
        pub_n.write3(&fh, 0, b"bob was here"),
        Err(Nfsstat3::ACCES),
        "NFS uid 3002 writes uid 3001's file"
    );
    let mut b = Smb::logged_on(smb, "bob", "bobpw", "public");
    assert_eq!(
        b.create("alice.txt"),
        Err(NtStatus::ACCESS_DENIED),
        "SMB bob opens alice's file for writing"
    );
    // /public is 0777 (anyone may unlink there, as POSIX says); in a
    // directory of alice's, bob may neither create nor delete.
    let dreq = open_req(
        "alice-dir",
        create_disposition::CREATE,
        create_options::DIRECTORY_FILE,
        RW,
    );
    let dfid = a.create_req(dreq).expect("alice makes a directory");
    a.close(dfid);
    let f = a.create("alice-dir\\secret.txt").unwrap();
    a.close(f);
    let dh = pub_n.lookup3(&public, b"alice-dir").unwrap();
    let dattrs = getattr3(&mut pub_n, &dh);
    assert_eq!(
        (dattrs.uid, dattrs.mode & 0o022),
        (3001, 0),
        "alice's directory, mode {:o}",
        dattrs.mode
    );
    let st = b.delete("alice-dir\\secret.txt");
    assert!(
        pub_n.lookup3(&dh, b"secret.txt").is_ok(),
        "SMB bob deleted a file in alice's directory ({st:?})"
    );
    assert_eq!(
        st,
        NtStatus::ACCESS_DENIED,
        "SMB bob deletes in alice's directory"
    );
    assert_eq!(
        b.create("alice-dir\\bob.txt"),
        Err(NtStatus::ACCESS_DENIED),
        "SMB bob creates in alice's directory"
    );
    assert_eq!(
        pub_n.remove3(&dh, "secret.txt"),
        Nfsstat3::ACCES,
        "NFS uid 3002 removes in alice's directory"
    );
    // The same for a name directly in a share root bob may not write.
    d.ok(&["share", "add", "alices", "--path", "/public/alice-dir"]);
    std::thread::sleep(Duration::from_millis(2500));
    let mut ba = Smb::logged_on(smb, "bob", "bobpw", "alices");
    assert_eq!(ba.delete("secret.txt"), NtStatus::ACCESS_DENIED, "SMB bob deletes in a share root of alice's");
    assert!(pub_n.lookup3(&dh, b"secret.txt").is_ok(), "the file is still there");
    let mut aa = Smb::logged_on(smb, "alice", "alicepw", "alices");
    let f = aa.create("mine.txt").unwrap();
    aa.close(f);
    assert_eq!(aa.delete("mine.txt"), NtStatus::SUCCESS, "the owner deletes in her share root");
    assert!(pub_n.lookup3(&dh, b"mine.txt").is_err(), "and the file is gone");
    let mut alice_n = Nfs::connect(nfs).as_user(3001, 3001);
    assert_eq!(
        alice_n.write3(&fh, 0, b"ALICE"),
        Ok(5),
        "the owner writes over NFS"
    );
    let fa = a.open_read("alice.txt").unwrap();
    assert_eq!(a.read(fa, 0, 100).unwrap(), b"ALICE's", "and SMB sees it");
    a.close(fa);

    // ---- NFS export rules: client networks, root squash.
    let mut wrong = Nfs::connect_from(ip(1), nfs);
    assert_eq!(
        wrong.mount("/netonly"),
        Err(MountStat3::ERR_ACCES),
        "MNT from outside --nfs-clients"
    );
    let mut right = Nfs::connect_from(ip(5), nfs);
    let net = right
        .mount("/netonly")
        .expect("MNT from inside --nfs-clients");
    // A handle learnt by an allowed client is no key for another one.
    let rep = wrong.v3(&Nfs3Args::GetAttr(GetAttr3Args {
        object: Opaque(&net),
    }));
    let st = match results3(proc3::GETATTR, &rep) {
        Nfs3Results::GetAttr(Nfs3Res::Fail(s, _)) => s,
        other => panic!("GETATTR of a handle of an export not open to this client: {other:?}"),
    };
    assert!(
        st == Nfsstat3::ACCES || st == Nfsstat3::PERM || st == Nfsstat3::STALE,
        "{st:?}"
    );
    let mut root = Nfs::connect(nfs).as_user(0, 0);
    let public = root.mount("/public").unwrap();
    let fh = root.create3(&public, "by-root-squashed").unwrap();
    assert_eq!(
        getattr3(&mut root, &fh).uid,
        65534,
        "root is squashed to 65534 on a root_squash export"
    );
    let rootok = root.mount("/rootok").unwrap();
    let rootok_attrs = getattr3(&mut root, &rootok);
    if rootok_attrs.mode & 0o002 != 0 || rootok_attrs.uid == 0 {
        let fh = root.create3(&rootok, "by-root").unwrap();
        assert_eq!(
            getattr3(&mut root, &fh).uid,
            0,
            "root stays root with --no-root-squash"
        );
    }

    // ---- Names: '/', NUL, '..', over 255 bytes, invalid UTF-16 / UTF-8.
    let long = "x".repeat(256);
    for (what, name) in [("slash", "a/b"), ("NUL", "a\0b"), ("long", long.as_str())] {
        let st = smb_create_status(&mut a, Utf16::Str(name));
        assert_eq!(
            st,
            NtStatus::OBJECT_NAME_INVALID,
            "SMB CREATE of a {what} name"
        );
    }
    for name in ["..\\..\\etc\\passwd", "sub\\..\\..\\x", ".."] {
        let st = smb_create_status(&mut a, Utf16::Str(name));
        assert!(
            matches!(
                st,
                NtStatus::OBJECT_PATH_SYNTAX_BAD
                    | NtStatus::OBJECT_NAME_INVALID
                    | NtStatus::INVALID_PARAMETER
            ),
            "SMB CREATE of {name:?}: {st:?}"
        );
    }
    let lone_surrogate = [0x61, 0x00, 0x00, 0xD8, 0x62, 0x00]; // "a\u{D800}b"
    assert_eq!(
        smb_create_status(&mut a, Utf16::Wire(&lone_surrogate)),
        NtStatus::OBJECT_NAME_INVALID,
        "invalid UTF-16"
    );
    let mut n = Nfs::connect(nfs).as_user(3001, 3001);
    let public = n.mount("/public").unwrap();
    for (what, name, want) in [
        (
            "slash",
            &b"a/b"[..],
            &[Nfsstat3::INVAL, Nfsstat3::ACCES][..],
        ),
        ("NUL", &b"a\0b"[..], &[Nfsstat3::INVAL, Nfsstat3::ACCES][..]),
        (
            "dot-dot",
            &b".."[..],
            &[Nfsstat3::EXIST, Nfsstat3::INVAL, Nfsstat3::ACCES][..],
        ),
        (
            "over 255 bytes",
            long.as_bytes(),
            &[Nfsstat3::NAMETOOLONG][..],
        ),
        (
            "invalid UTF-8",
            &b"a\xff\xfeb"[..],
            &[Nfsstat3::INVAL, Nfsstat3::ACCES][..],
        ),
    ] {
        let st = create3_raw(&mut n, &public, name);
        assert!(want.contains(&st), "NFSv3 CREATE of a {what} name: {st:?}");
    }
    // LOOKUP ".." at the export root stays in the export.
    let up = n.lookup3(&public, b"..");
    if let Ok(up) = up {
        assert_eq!(
            getattr3(&mut n, &up).fileid,
            getattr3(&mut n, &public).fileid,
            "'..' of the export root"
        );
    }
    let mut s4 = session(&mut n, b"access-names", 1 << 20, 64);
    for (what, name, want) in [
        (
            "slash",
            &b"a/b"[..],
            &[Nfsstat4::BADCHAR, Nfsstat4::INVAL, Nfsstat4::BADNAME][..],
        ),
        (
            "NUL",
            &b"a\0b"[..],
            &[Nfsstat4::BADCHAR, Nfsstat4::INVAL, Nfsstat4::BADNAME][..],
        ),
        ("dot-dot", &b".."[..], &[Nfsstat4::BADNAME][..]),
        ("empty", &b""[..], &[Nfsstat4::INVAL][..]),
        (
            "over 255 bytes",
            long.as_bytes(),
            &[Nfsstat4::NAMETOOLONG][..],
        ),
        (
            "invalid UTF-8",
            &b"a\xff\xfeb"[..],
            &[Nfsstat4::INVAL, Nfsstat4::BADCHAR][..],
        ),
    ] {
        let seq = s4.sequence();
        let rep = n
            .v4(vec![
                seq,
                ArgOp4::PutFh(PutFh4Args {
                    object: Opaque(&public),
                }),
                ArgOp4::Lookup(Lookup4Args {
                    objname: Name(name),
                }),
            ])
            .unwrap();
        let st = res4(&rep).status;
        assert!(want.contains(&st), "NFSv4 LOOKUP of a {what} name: {st:?}");
    }

    // ---- Symlinks never lead outside the share: duet keeps its own
    // namespace; NFS READLINK returns the text, SMB follows nothing.
    for (name, target) in [
        ("escape-rel", "../../../../etc/passwd"),
        ("escape-abs", "/etc/passwd"),
    ] {
        let rep = n.v3(&Nfs3Args::Symlink(Symlink3Args {
            where_: DirOpArgs3 {
                dir: Opaque(&public),
                name: Name(name.as_bytes()),
            },
            symlink: SymlinkData3 {
                symlink_attributes: Sattr3::default(),
                symlink_data: Opaque(target.as_bytes()),
            },
        }));
        let link = match results3(proc3::SYMLINK, &rep) {
            Nfs3Results::Symlink(Nfs3Res::Ok(ok)) => ok.obj.unwrap().0.to_vec(),
            other => panic!("SYMLINK {name}: {other:?}"),
        };
        let rep = n.v3(&Nfs3Args::ReadLink(ReadLink3Args {
            symlink: Opaque(&link),
        }));
        match results3(proc3::READLINK, &rep) {
            Nfs3Results::ReadLink(Nfs3Res::Ok(ok)) => assert_eq!(ok.data.0, target.as_bytes()),
            other => panic!("READLINK: {other:?}"),
        }
        // READ of the link is not a READ of its target (RFC 1813 3.3.6: INVAL).
        assert!(n.read3(&link, 0, 100).is_err(), "READ through a symlink");
        // Over SMB the link is not followed: opening it or through it never
        // yields the host's /etc/passwd.
        for path in [name.to_string(), format!("{name}\\x")] {
            if let Ok(f) = a.open_read(&path) {
                let got = a.read(f, 0, 4096).unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&got).contains("root:"),
                    "{path} read the host's /etc/passwd"
                );
                a.close(f);
            }
        }
    }

    // ---- Sessions: after LOGOFF the session id is dead; a replayed signed
    // message (same message id) closes the connection (MS-SMB2 3.3.5.2.3).
    let mut c = Smb::logged_on(smb, "alice", "alicepw", "public");
    let r = c.call(Request::Logoff(LogoffRequest), Cmd::LOGOFF);
    assert_eq!(r.status(), NtStatus::SUCCESS);
    let st = smb_create_status(&mut c, Utf16::Str("after-logoff.txt"));
    assert_eq!(
        st,
        NtStatus::USER_SESSION_DELETED,
        "a request on a logged-off session"
    );
    let mut c = Smb::logged_on(smb, "alice", "alicepw", "public");
    let m = c.message(Request::Echo(Default::default()), Cmd::ECHO, true);
    c.send(&m).unwrap();
    assert_eq!(c.recv().expect("echo").status(), NtStatus::SUCCESS);
    c.send(&m).unwrap();
    assert!(closed_by_server(&mut c.tcp), "a replayed signed message");
    // NFSv4.1: a destroyed session is BADSESSION.
    let mut s = session(&mut n, b"access-2", 1 << 20, 64);
    let rep = n
        .v4(vec![ArgOp4::DestroySession(DestroySession4Args {
            sessionid: s.id,
        })])
        .unwrap();
    assert_eq!(res4(&rep).status, Nfsstat4::OK);
    let seq = s.sequence();
    let rep = n.v4(vec![seq, ArgOp4::PutRootFh(())]).unwrap();
    assert_eq!(
        res4(&rep).status,
        Nfsstat4::BADSESSION,
        "SEQUENCE on a destroyed session"
    );

    // ---- Logon failures are logged, the password never is; a removed
    // user can no longer log on.
    let mut c = Smb::connect(smb);
    c.negotiate();
    assert_eq!(c.login("alice", "Sekrit-Wrong-Pw"), NtStatus::LOGON_FAILURE);
    d.ok(&["user", "remove", "bob"]);
    std::thread::sleep(Duration::from_millis(2500));
    let mut c = Smb::connect(smb);
    c.negotiate();
    assert_eq!(
        c.login("bob", "bobpw"),
        NtStatus::LOGON_FAILURE,
        "a removed user"
    );
    let log = d.log_text();
    assert!(
        log.matches("SMB logon failed").count() >= 2,
        "logon failures are logged:\n{log}"
    );
    for secret in ["Sekrit-Wrong-Pw", "alicepw", "bobpw"] {
        assert!(!log.contains(secret), "the log holds a password");
    }
    assert!(log.lines().all(|l| !l.contains("panicked")));
}
