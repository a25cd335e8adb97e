//! `\PIPE\lsarpc` (MS-LSAT) against a real duetd with Samba's clients
//! (issue 17): `rpcclient lookupnames` / `lookupsids` turn duet's users,
//! their groups, the Unix SIDs and the well-known SIDs into names and
//! back, and `smbcacls` without `--numeric` shows a file's owner as
//! `DUET\alice`.

mod clients;
mod common;

use std::process::Command;
use std::time::Duration;

use clients::*;
use common::{port_445_to, Daemon};
use duet_protocols::smb2::create::create_disposition;
use duet_protocols::smb2::status::NtStatus;

const ALICE: u32 = 3001;
const BOB: u32 = 3002;

/// `rpcclient -c CMD` as alice; its stdout (the command must succeed).
fn rpcclient(port: u16, cmd: &str) -> String {
    let out = Command::new("rpcclient")
        .args(["-p", &port.to_string(), "-U", "alice%alicepw", "127.0.0.1", "-c", cmd])
        .output()
        .expect("rpcclient runs (scripts/install-deps.sh installs samba-common-bin)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("rpcclient -c '{cmd}':\n{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "rpcclient -c '{cmd}': {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The SID rpcclient's lookupnames printed for `name` ("NAME SID (TYPE: n)").
fn sid_of(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no SID for {name} in {text}"))
        .to_string()
}

#[test]
fn rpcclient_and_smbcacls_name_duets_sids() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    for (name, id) in [("alice", ALICE), ("bob", BOB)] {
        let id = id.to_string();
        d.ok(&["user", "add", name, "--password", &format!("{name}pw"), "--uid", &id, "--gid", &id]);
    }
    d.ok(&["share", "add", "acl", "--path", "/acl", "--no-root-squash"]);
    std::thread::sleep(Duration::from_millis(2500));
    let port = d.smb_port;

    // Names to SIDs: duet's users under the machine SID (RID 1000 + 2 *
    // uid), the well-known names, an unknown name not mapped.
    let text = rpcclient(port, "lookupnames alice bob Everyone");
    let alice = sid_of(&text, "alice");
    let bob = sid_of(&text, "bob");
    assert!(alice.starts_with("S-1-5-21-") && alice.ends_with(&format!("-{}", 1000 + 2 * ALICE)), "{text}");
    assert!(bob.ends_with(&format!("-{}", 1000 + 2 * BOB)), "{text}");
    assert!(text.contains("(User: 1)"), "{text}");
    assert!(text.contains("Everyone S-1-1-0 (Well-known Group: 5)"), "{text}");
    let machine = alice.rsplit_once('-').unwrap().0.to_string();

    // SIDs to names.
    let group = format!("{machine}-{}", 1001 + 2 * ALICE);
    let unknown = format!("{machine}-{}", 1000 + 2 * 77);
    let text = rpcclient(
        port,
        &format!("lookupsids {alice} {bob} {group} S-1-22-1-{BOB} S-1-22-1-4242 S-1-22-2-4242 S-1-1-0 S-1-3-0 S-1-5-11 S-1-5-32-544 {unknown}"),
    );
    for want in [
        format!("{alice} DUET\\alice (1)"),
        format!("{bob} DUET\\bob (1)"),
        format!("{group} DUET\\alice (2)"),
        format!("S-1-22-1-{BOB} Unix User\\bob (1)"),
        "S-1-22-1-4242 Unix User\\4242 (1)".to_string(),
        "S-1-22-2-4242 Unix Group\\4242 (2)".to_string(),
        "S-1-1-0 \\Everyone (5)".to_string(),
        "S-1-3-0 \\CREATOR OWNER (5)".to_string(),
        "S-1-5-11 NT AUTHORITY\\Authenticated Users (5)".to_string(),
        "S-1-5-32-544 BUILTIN\\Administrators (4)".to_string(),
    ] {
        assert!(text.contains(&want), "{want:?} in {text}");
    }
    assert!(text.contains(&format!("{unknown} *unknown*")), "{text}");

    // The policy queries: the primary domain is the workgroup with no SID
    // (a standalone server), the account domain DUET with the machine
    // SID; the caller is alice.
    let text = rpcclient(port, "lsaquery");
    assert!(text.contains("Domain Name: WORKGROUP") && text.contains("Domain Sid: (NULL SID)"), "{text}");
    let text = rpcclient(port, "lsaquery 5");
    assert!(text.contains("Domain Name: DUET") && text.contains(&format!("Domain Sid: {machine}")), "{text}");
    let text = rpcclient(port, "getusername");
    assert!(text.contains("alice"), "{text}");

    // smbcacls without --numeric: the owner and the ACEs by name.
    let mut c = Smb::logged_on(port, "alice", "alicepw", "acl");
    let fid = c.create_req(open_req("o.txt", create_disposition::CREATE, 0, 0x0012_019f)).unwrap();
    assert_eq!(c.close(fid), NtStatus::SUCCESS);
    let host = port_445_to(port);
    let out = Command::new("smbcacls")
        .args([&format!("//{host}/acl"), "o.txt", "-U", "alice%alicepw", "-m", "SMB3"])
        .output()
        .expect("smbcacls runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("smbcacls:\n{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("OWNER:DUET\\alice"), "{text}");
    assert!(text.contains("GROUP:DUET\\alice"), "{text}");
    assert!(text.contains("ACL:DUET\\alice:ALLOWED"), "{text}");

    // Names to SIDs in smbcacls: an ACE added for DUET\bob lands under
    // bob's SID.
    let ok = Command::new("smbcacls")
        .args([&format!("//{host}/acl"), "o.txt", "-U", "alice%alicepw", "-m", "SMB3", "-a", "ACL:DUET\\bob:ALLOWED/0x0/R"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "smbcacls -a by name");
    let text = common::smbcacls(&host, "acl", "o.txt", "alice%alicepw");
    assert!(text.contains(&format!("ACL:{bob}:0/0x0/")), "{text}");
}
