//! Samba's `smbclient` against a real duetd: put, get (byte-exact), ls,
//! mkdir, rename, del and deltree, over SMB 3.1.1 and SMB 2.1.

mod common;

use std::process::Command;
use std::time::Duration;

use common::Daemon;

fn smbclient(port: u16, proto: &str, dir: &std::path::Path, cmds: &str) -> String {
    let out = Command::new("smbclient")
        .args(["//127.0.0.1/public", "-p", &port.to_string(), "-U", "bench%benchpw", "-m", proto, "-c", cmds])
        .current_dir(dir)
        .output()
        .expect("smbclient runs (scripts/install-deps.sh installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "smbclient -c {cmds:?}:\n{text}");
    assert!(!text.contains("NT_STATUS_"), "smbclient -c {cmds:?} reported an error:\n{text}");
    text
}

#[test]
fn smbclient_put_get_ls_mkdir_rename_del_deltree() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(2500));
    let port = d.smb_port;
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    // 3 MB that spans chunks, and a small file.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    std::fs::write(local.join("big.bin"), &big).unwrap();
    std::fs::write(local.join("small.txt"), b"hello from smbclient\n").unwrap();
    for proto in ["SMB3", "SMB2_10"] {
        let top = format!("t-{proto}");
        smbclient(
            port,
            proto,
            &local,
            &format!(
                "mkdir {top}; cd {top}; put big.bin; put small.txt; mkdir sub; cd sub; put small.txt deep.txt; cd ..; \
                 rename small.txt renamed.txt"
            ),
        );
        let ls = smbclient(port, proto, &local, &format!("cd {top}; ls"));
        assert!(ls.contains("big.bin") && ls.contains("3000000"), "{ls}");
        assert!(ls.contains("renamed.txt") && !ls.contains("small.txt") && ls.contains("sub"), "{ls}");
        let back = local.join(format!("back-{proto}.bin"));
        smbclient(port, proto, &local, &format!("cd {top}; get big.bin {}", back.display()));
        assert!(std::fs::read(&back).unwrap() == big, "big.bin came back different over {proto}");
        smbclient(port, proto, &local, &format!("cd {top}; del renamed.txt; deltree sub"));
        let ls = smbclient(port, proto, &local, &format!("cd {top}; ls"));
        assert!(!ls.contains("renamed.txt") && !ls.contains("sub"), "{ls}");
        smbclient(port, proto, &local, &format!("deltree {top}"));
        let ls = smbclient(port, proto, &local, "ls");
        assert!(!ls.contains(&top), "{ls}");
    }
    // Signed SMB 3.1.1: Samba's client offers AES-GMAC first, so this
    // round trip is signed with GMAC (and verified by both sides).
    let out = Command::new("smbclient")
        .args(["//127.0.0.1/public", "-p", &port.to_string(), "-U", "bench%benchpw", "-m", "SMB3"])
        .args(["--client-protection=sign", "-d", "3", "-c", "put big.bin signed.bin; get signed.bin signed-back.bin; del signed.bin"])
        .current_dir(&local)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("NT_STATUS_"), "signed smbclient:\n{text}");
    assert!(std::fs::read(local.join("signed-back.bin")).unwrap() == big, "signed round trip differs");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}
