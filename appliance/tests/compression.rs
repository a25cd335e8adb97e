//! Compressed files (issue 15; FILE_ATTRIBUTE_COMPRESSED, MS-FSCC 2.6,
//! set by FSCTL_SET_COMPRESSION): the destager stores their chunks
//! LZ4-compressed (`<file>.<index>.z`, `duet_cache::chunkz`), and every
//! read stays byte-exact through rewrites, truncations, zeroed ranges,
//! clones by reference, compression set and cleared, and restarts; a
//! damaged compressed chunk is a read error, never other bytes. Then the
//! same through real clients against a real duetd: Samba's smbclient puts
//! files into a directory whose compression was set with
//! FSCTL_SET_COMPRESSION (they inherit it), gets them back, libnfs reads
//! them over NFS, and the chunk store holds a fraction of their size.

mod clients;
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use clients::*;
use common::inproc::*;
use common::cluster::smbclient;
use common::{settle_chunks, Daemon};
use duet_appliance::engine::EngineHandle;
use duet_appliance::server;
use duet_fs::{dos, ObjRef, Op, SetAttrs, CHUNK_SIZE};
use duet_protocols::smb2::create::{create_disposition, create_options};
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::ioctl::{ctl_code, IoctlRequest};
use duet_protocols::smb2::message::Request;
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::FileId;

/// Text-like bytes (compress several times over), different per seed.
fn text(rng: &mut Rng, len: usize) -> Vec<u8> {
    let words: [&[u8]; 8] = [b"replicated ", b"durable ", b"chunk ", b"share ", b"lease ", b"commit ", b"extent ", b"node\n"];
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(words[rng.below(8) as usize]);
        if rng.below(400) == 0 {
            out.extend_from_slice(&rng.next().to_le_bytes());
        }
    }
    out.truncate(len);
    out
}

fn noise(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

/// What FSCTL_SET_COMPRESSION does to a file's node.
fn set_compressed(e: &EngineHandle, id: u64, on: bool) {
    let bits = dos::ONLY_COMPRESSED | if on { dos::COMPRESSED } else { 0 };
    ok(e, Op::SetAttr { obj: ObjRef::Id(id), attrs: SetAttrs { dos_attrs: Some(bits), ..Default::default() } });
}

/// The chunk files of `file` under `data`: (index, compressed, bytes).
fn chunk_files(data: &Path, file: u64) -> Vec<(u64, bool, u64)> {
    let d = data.join("chunks").join(format!("{:02x}", file % 256));
    let mut out: Vec<(u64, bool, u64)> = std::fs::read_dir(&d)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(&format!("{file}."))?;
            let (idx, z) = match rest.strip_suffix(".z") {
                Some(i) => (i, true),
                None => (rest, false),
            };
            Some((idx.parse().ok()?, z, e.metadata().ok()?.len()))
        })
        .collect();
    out.sort();
    out
}

/// A compressed three-chunk file of text under random logged and small
/// writes, truncations, extensions and zeroed ranges, the destager (every
/// 1 ms) rewriting its chunks under the reads: every read equals the model;
/// settled, every chunk is stored compressed and the three hold a fraction
/// of their size. Compression cleared, the chunks are plain again; set,
/// compressed again. A clone by reference of the compressed file into a
/// plain one shares the compressed chunks; a write to the clone leaves the
/// source alone. After a restart (nothing cached) the same bytes, fsck
/// clean; a damaged compressed chunk then fails the read.
#[test]
fn compressed_chunks_read_back_exact_through_every_change() {
    let only: Option<u64> = std::env::var("DUET_COMPRESSION_READ_MIB").ok().and_then(|v| v.parse().ok());
    for read_mib in [64, 0].into_iter().filter(|m| only.is_none_or(|o| o == *m)) {
        let tmp = tempfile::tempdir().unwrap();
        let r = server::start(&cfg(tmp.path(), read_mib)).unwrap();
        let e = r.engine().clone();
        let id = create(&e, "z");
        set_compressed(&e, id, true);
        let mut rng = Rng(0x2ee5_0001 + read_mib);
        let mut model = text(&mut rng, (CHUNK_SIZE * 3) as usize);
        write(&e, id, 0, &model);
        settle(&e);
        check(&e, id, &model, 0, model.len() as u64, "after the first destage");
        let files = chunk_files(tmp.path(), id);
        let stored: u64 = files.iter().map(|c| c.2).sum();
        println!("read_mib {read_mib}: 12 MiB of text stored in {stored} bytes: {files:?}");
        assert!(files.len() == 3 && files.iter().all(|c| c.1), "{files:?}");
        assert!(stored * 2 < CHUNK_SIZE * 3, "{stored} bytes stored for 12 MiB of text");
        for round in 0..120u64 {
            let size = model.len() as u64;
            match rng.below(10) {
                k @ 0..=5 => {
                    let len = if k <= 3 { 4097 + rng.below(300_000) } else { 1 + rng.below(4000) };
                    let at = rng.below(size);
                    let data = if k == 0 { noise(&mut rng, len as usize) } else { text(&mut rng, len as usize) };
                    write_model(&e, id, &mut model, at, &data);
                }
                6 => {
                    let cut = CHUNK_SIZE + rng.below(CHUNK_SIZE * 2);
                    ok(&e, Op::SetAttr { obj: ObjRef::Id(id), attrs: SetAttrs { size: Some(cut), ..Default::default() } });
                    model.resize(cut as usize, 0);
                }
                7 => {
                    let at = rng.below(size);
                    let len = 1 + rng.below(CHUNK_SIZE + CHUNK_SIZE / 2);
                    ok(&e, Op::ZeroRange { obj: ObjRef::Id(id), offset: at, len });
                    let end = ((at + len) as usize).min(model.len());
                    model[at as usize..end].fill(0);
                }
                8 => {
                    // Compression off and on again: each time every chunk
                    // is rewritten (`DataOp::Recompress`).
                    set_compressed(&e, id, false);
                    if rng.below(2) == 0 {
                        settle(&e);
                        assert!(chunk_files(tmp.path(), id).iter().all(|c| !c.1), "round {round}: a .z chunk after clearing");
                    }
                    set_compressed(&e, id, true);
                }
                _ => {
                    let at = size + rng.below(100_000);
                    let n = 1 + rng.below(200_000) as usize;
                    let data = text(&mut rng, n);
                    write(&e, id, at, &data);
                    model.resize(at as usize, 0);
                    model.extend_from_slice(&data);
                }
            }
            let size = model.len() as u64;
            for _ in 0..3 {
                let at = rng.below(size);
                check(&e, id, &model, at, 1 + rng.below(300_000), &format!("round {round}"));
            }
            if round % 15 == 0 {
                check(&e, id, &model, 0, size, &format!("round {round}, whole"));
            }
        }
        // Rewritten with text throughout: every chunk compresses.
        let text_all = text(&mut rng, model.len());
        write(&e, id, 0, &text_all);
        model = text_all;
        settle(&e);
        check(&e, id, &model, 0, model.len() as u64, "settled");
        let files = chunk_files(tmp.path(), id);
        assert!(files.iter().all(|c| c.1), "settled: a plain chunk of a compressed file of text: {files:?}");
        // Cleared: plain chunks, same bytes.
        set_compressed(&e, id, false);
        settle(&e);
        assert!(chunk_files(tmp.path(), id).iter().all(|c| !c.1), "cleared: {:?}", chunk_files(tmp.path(), id));
        check(&e, id, &model, 0, model.len() as u64, "compression cleared");
        set_compressed(&e, id, true);
        settle(&e);
        assert!(chunk_files(tmp.path(), id).iter().all(|c| c.1), "set again: {:?}", chunk_files(tmp.path(), id));
        check(&e, id, &model, 0, model.len() as u64, "compression set again");
        // A clone by reference into a plain file shares the compressed
        // chunks (the same inodes); a write into the clone rewrites only
        // its own chunk, plain.
        let c = create(&e, "clone");
        ok(&e, Op::Clone { src: ObjRef::Id(id), src_offset: 0, dst: ObjRef::Id(c), dst_offset: 0, len: model.len() as u64, extend: true });
        settle(&e);
        check(&e, c, &model, 0, model.len() as u64, "clone");
        // Its first chunk (whole in the source: shared, not copied).
        assert!(chunk_files(tmp.path(), c)[0].1, "{:?}", chunk_files(tmp.path(), c));
        let patch = text(&mut rng, 70_000);
        write(&e, c, 1000, &patch);
        let mut cm = model.clone();
        cm[1000..71_000].copy_from_slice(&patch);
        settle(&e);
        check(&e, c, &cm, 0, cm.len() as u64, "clone after a write");
        check(&e, id, &model, 0, model.len() as u64, "source after the clone's write");
        assert!(!chunk_files(tmp.path(), c)[0].1, "the clone's written chunk is its own, plain");
        let problems = fsck(&r);
        assert!(problems.is_empty(), "{problems:?}");
        r.shutdown();
        // After a restart: nothing cached, every chunk decoded again.
        let r = server::start(&cfg(tmp.path(), read_mib)).unwrap();
        let e = r.engine().clone();
        check(&e, id, &model, 0, model.len() as u64, "after a restart");
        check(&e, c, &cm, 0, cm.len() as u64, "clone after a restart");
        let problems = fsck(&r);
        assert!(problems.is_empty(), "{problems:?}");
        r.shutdown();
        // A damaged compressed chunk: the read fails, it never gives bytes.
        let zpath = tmp.path().join("chunks").join(format!("{:02x}", id % 256)).join(format!("{id}.1.z"));
        let mut raw = std::fs::read(&zpath).unwrap();
        raw[100] ^= 0x5a;
        std::fs::write(&zpath, &raw).unwrap();
        let r = server::start(&cfg(tmp.path(), read_mib)).unwrap();
        let e = r.engine().clone();
        let got = try_read(&e, id, CHUNK_SIZE + 10, 1000);
        println!("read_mib {read_mib}: a damaged compressed chunk: {got:?}");
        assert!(got.as_ref().is_err_and(|e| e.contains("damaged")), "a damaged chunk read as {:?}", got.map(|d| d.len()));
        // The other chunks still read.
        check(&e, id, &model, 0, 1000, "an undamaged chunk beside a damaged one");
        r.shutdown();
    }
}

/// FSCTL_SET_COMPRESSION (MS-FSCC 2.3.67) with the tests' SMB client.
fn set_compression(c: &mut Smb, fid: FileId, format: u16) -> NtStatus {
    let input = format.to_le_bytes();
    let req = IoctlRequest {
        ctl_code: ctl_code::FSCTL_SET_COMPRESSION,
        file_id: fid,
        input: &input,
        max_input_response: 0,
        output: &[],
        max_output_response: 0,
        flags: 1,
    };
    c.call(Request::Ioctl(req), Cmd::IOCTL).status()
}

fn du(path: &Path) -> u64 {
    let out = Command::new("du").args(["-s", "--block-size=1"]).arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().parse().unwrap()
}

/// Real clients: a directory made compressed with FSCTL_SET_COMPRESSION;
/// smbclient puts a 16 MiB text file and a 4 MiB random one into it (both
/// inherit the attribute) and moves them to the share's root (they keep
/// it; libnfs mounts the share, not a directory in it); the text is stored in a fraction of its size,
/// the random file plain (incompressible chunks are not compressed);
/// smbclient and libnfs's nfs-cat read both back byte-exact, also after a
/// restart; compression cleared on the text file with the FSCTL makes its
/// chunks plain, same bytes; fsck is clean.
#[test]
fn smbclient_and_nfs_read_files_stored_compressed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start_config(tmp.path(), "", "portmap = false");
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    let dir = c.create_req(open_req("cz", create_disposition::OPEN_IF, create_options::DIRECTORY_FILE, RW)).unwrap();
    assert_eq!(set_compression(&mut c, dir, 1), NtStatus::SUCCESS);
    assert_eq!(c.close(dir), NtStatus::SUCCESS);
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let mut rng = Rng(77);
    let txt = text(&mut rng, 16 << 20);
    let rnd = noise(&mut rng, 4 << 20);
    std::fs::write(local.join("text.txt"), &txt).unwrap();
    std::fs::write(local.join("noise.bin"), &rnd).unwrap();
    let before = du(&d.data.join("chunks"));
    smbclient(d.smb_port, &local, "cd cz; put text.txt; put noise.bin; cd ..; rename cz\\text.txt text.txt; rename cz\\noise.bin noise.bin").unwrap();
    settle_chunks(&d.data);
    let grew = du(&d.data.join("chunks")) - before;
    println!("smbclient put 16 MiB of text + 4 MiB of noise into a compressed directory: chunk store grew by {grew} bytes");
    assert!(grew < (4 << 20) + (16 << 20) / 2, "the chunk store grew by {grew} bytes (20 MiB written)");
    let back = |port: u16, name: &str| {
        let to = local.join(format!("back-{name}"));
        smbclient(port, &local, &format!("get {name} {}", to.display())).unwrap();
        std::fs::read(&to).unwrap()
    };
    let nfs = |name: &str, port: u16| {
        let out = Command::new("nfs-cat")
            .arg(format!("nfs://127.0.0.1/public/{name}?nfsport={port}&mountport={port}&version=3"))
            .output()
            .expect("nfs-cat (libnfs-utils) runs");
        assert!(out.status.success(), "nfs-cat {name}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    for round in ["first", "after a restart"] {
        assert!(back(d.smb_port, "text.txt") == txt, "{round}: text.txt came back different over SMB");
        assert!(back(d.smb_port, "noise.bin") == rnd, "{round}: noise.bin came back different over SMB");
        assert!(nfs("text.txt", d.nfs_port) == txt, "{round}: text.txt came back different over NFS");
        assert!(nfs("noise.bin", d.nfs_port) == rnd, "{round}: noise.bin came back different over NFS");
        d.restart();
    }
    // FSCTL_SET_COMPRESSION NONE on the text file: plain chunks, same bytes.
    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    let f = c.create("text.txt").unwrap();
    assert_eq!(set_compression(&mut c, f, 0), NtStatus::SUCCESS);
    assert_eq!(c.close(f), NtStatus::SUCCESS);
    let z_before = count_z(&d.data);
    settle_chunks(&d.data);
    let z_after = count_z(&d.data);
    println!("compressed chunk files: {z_before} before clearing, {z_after} after");
    assert_eq!(z_after, 0, "compressed chunks left after clearing the only compressed file's attribute");
    assert!(back(d.smb_port, "text.txt") == txt, "text.txt after clearing compression");
    let out = d.ok(&["fsck"]);
    assert!(out.contains("file system is consistent"), "{out}");
}

fn count_z(data: &Path) -> usize {
    (0..256)
        .flat_map(|i| std::fs::read_dir(data.join("chunks").join(format!("{i:02x}"))).into_iter().flatten().flatten())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".z"))
        .count()
}

/// SIGKILL while the destager rewrites compressed chunks (writes, and
/// compression cleared and set again, each followed at once by a kill):
/// after every restart the file reads back byte-exact (every acknowledged
/// write), fsck is clean, and no side file or second name of a chunk is
/// left once the destager settles.
#[test]
fn sigkill_while_compressed_chunks_are_rewritten_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "bench", "--password", "benchpw"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
    let dir = c.create_req(open_req("cz", create_disposition::OPEN_IF, create_options::DIRECTORY_FILE, RW)).unwrap();
    assert_eq!(set_compression(&mut c, dir, 1), NtStatus::SUCCESS);
    assert_eq!(c.close(dir), NtStatus::SUCCESS);
    let mut rng = Rng(0x5167_0009);
    let size = 10 << 20;
    let mut model = text(&mut rng, size);
    let f = c.create("cz\\k.txt").unwrap();
    for (i, piece) in model.chunks(1 << 20).enumerate() {
        assert_eq!(c.write(f, (i << 20) as u64, piece, false), NtStatus::SUCCESS);
    }
    assert_eq!(c.close(f), NtStatus::SUCCESS);
    let rounds: u32 = std::env::var("DUET_COMPRESSION_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    for round in 0..rounds {
        let f = c.create("cz\\k.txt").unwrap();
        match round % 3 {
            // Compression cleared or set: every chunk is rewritten.
            0 => assert_eq!(set_compression(&mut c, f, 0), NtStatus::SUCCESS),
            1 => assert_eq!(set_compression(&mut c, f, 1), NtStatus::SUCCESS),
            _ => {}
        }
        for _ in 0..12 {
            let len = 1 + rng.below(400_000) as usize;
            let at = rng.below(size as u64 - len as u64);
            let data = text(&mut rng, len);
            assert_eq!(c.write(f, at, &data, false), NtStatus::SUCCESS);
            model[at as usize..at as usize + len].copy_from_slice(&data);
        }
        // Killed with the rewrite of the chunks under way.
        d.kill_and_restart();
        c = Smb::logged_on(d.smb_port, "bench", "benchpw", "public");
        let f = c.open_read("cz\\k.txt").unwrap();
        let got = c.read_all(f, size).unwrap();
        assert!(got == model, "round {round}: the file differs after a SIGKILL (first at {:?})", got.iter().zip(&model).position(|(a, b)| a != b));
        assert_eq!(c.close(f), NtStatus::SUCCESS);
    }
    settle_chunks(&d.data);
    let out = d.ok(&["fsck"]);
    assert!(out.contains("file system is consistent"), "{out}");
    // No side file, no chunk under both names.
    let mut names = Vec::new();
    for i in 0..256 {
        for e in std::fs::read_dir(d.data.join("chunks").join(format!("{i:02x}"))).unwrap().flatten() {
            names.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    assert!(!names.iter().any(|n| n.ends_with(".new") || n.ends_with(".lnk") || n.ends_with(".cow")), "{names:?}");
    for n in names.iter().filter(|n| n.ends_with(".z")) {
        assert!(!names.contains(&n.trim_end_matches(".z").to_string()), "{n} is there under both names");
    }
    println!("{rounds} kills: {} chunk files, {} compressed", names.len(), names.iter().filter(|n| n.ends_with(".z")).count());
}
