//! Single-file clones by reference (reflink) against a real duetd:
//! NFSv4.2 CLONE (RFC 7862 15.13) of a 64 MiB file shares its chunks
//! (the chunk store does not grow by the file's size), reads of both files
//! are byte-exact at once (the source's data still queued included), a
//! write to either side copies one chunk only, deletion frees the space,
//! and SIGKILLs during clone, write and delete loops leave fsck clean. SMB
//! FSCTL_DUPLICATE_EXTENTS_TO_FILE (MS-FSCC 2.3.8) through the tests' own
//! SMB client shares the same way, and so does a named stream renamed
//! onto its file's unnamed stream (`::$DATA`, docs/streams.md).

mod clients;
mod common;

use std::path::Path;
use std::time::Duration;

use clients::*;
use common::{settle_chunks, Daemon};
use duet_protocols::nfs::nfs3::Nfsstat3;
use duet_protocols::nfs::nfs4::v42::*;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::Opaque;
use duet_protocols::smb2::header::Command as Cmd;
use duet_protocols::smb2::ioctl::{ctl_code, IoctlRequest};
use duet_protocols::smb2::message::Request;
use duet_protocols::smb2::status::NtStatus;
use duet_protocols::smb2::cursor::Utf16;
use duet_protocols::smb2::fscc;
use duet_protocols::smb2::query_info::info_type;
use duet_protocols::smb2::set_info::SetInfoRequest;
use duet_protocols::smb2::FileId;

const MIB: u64 = 1 << 20;

/// What `du -s --block-size=1` of the chunk store says.
fn du(data: &Path) -> String {
    let o = std::process::Command::new("du").args(["-s", "--block-size=1"]).arg(data.join("chunks")).output().unwrap();
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap_or("?").to_string()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64 / 8).flat_map(|i| (i * 8 + (seed << 40)).to_le_bytes()).collect()
}

/// NFSv4.2 CLONE of `src` into `dst` (PUTFH SAVEFH PUTFH CLONE).
fn clone4(c: &mut Nfs, s: &mut Sess, src: &[u8], dst: &[u8], src_offset: u64, dst_offset: u64, count: u64) -> Nfsstat4 {
    let rep = c
        .v4_minor(
            2,
            vec![
                s.sequence(),
                ArgOp4::PutFh(PutFh4Args { object: Opaque(src) }),
                ArgOp4::SaveFh(()),
                ArgOp4::PutFh(PutFh4Args { object: Opaque(dst) }),
                ArgOp4::Clone(Clone4Args {
                    src_stateid: Stateid4::ANONYMOUS,
                    dst_stateid: Stateid4::ANONYMOUS,
                    src_offset,
                    dst_offset,
                    count,
                }),
            ],
        )
        .expect("a CLONE reply");
    res4(&rep).status
}

fn write_all(c: &mut Nfs, fh: &[u8], offset: u64, data: &[u8]) {
    for (i, piece) in data.chunks(MIB as usize).enumerate() {
        assert_eq!(c.write3(fh, offset + i as u64 * MIB, piece), Ok(piece.len() as u32));
    }
}

#[test]
fn nfs_clone_of_64_mib_shares_chunks_and_a_write_copies_one() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    let size = 64 * MIB;
    let src_data = pattern(1, size as usize);
    let src = c.create3(&root, "vm-image").unwrap();
    write_all(&mut c, &src, 0, &src_data);
    // Cloned at once: most of the source's data is still queued.
    let dst = c.create3(&root, "vm-image.clone").unwrap();
    let mut s = session(&mut c, b"cloner", 1 << 20, 64);
    let started = std::time::Instant::now();
    assert_eq!(clone4(&mut c, &mut s, &src, &dst, 0, 0, 0), Nfsstat4::OK);
    let clone_ms = started.elapsed().as_millis();
    assert!(c.read3_all(&dst).unwrap() == src_data, "the clone differs from its source right after CLONE");
    let after_clone = settle_chunks(&d.data);
    eprintln!("reflink: 64 MiB CLONE took {clone_ms} ms; chunk store after it: {after_clone} bytes (du: {})", du(&d.data));
    // Both files together: about one file's worth, not two.
    assert!(after_clone < size + 4 * MIB, "the chunk store holds {after_clone} bytes for a 64 MiB file and its clone");
    assert!(after_clone >= size - MIB, "the chunk store holds only {after_clone} bytes");
    // 1 MiB written into the clone: the clone's chunk 2 becomes its own.
    let at = 10 * MIB + 12345;
    let patch = vec![0xC5u8; MIB as usize];
    assert_eq!(c.write3(&dst, at, &patch), Ok(MIB as u32));
    let mut dst_data = src_data.clone();
    dst_data[at as usize..(at + MIB) as usize].copy_from_slice(&patch);
    assert!(c.read3_all(&dst).unwrap() == dst_data, "the clone after a write");
    assert!(c.read3_all(&src).unwrap() == src_data, "the source changed when its clone was written");
    let after_write = settle_chunks(&d.data);
    let grew = after_write - after_clone;
    eprintln!(
        "reflink: 1 MiB written into the clone: chunk store grew by {grew} bytes ({:.2} chunks of 4 MiB; du: {})",
        grew as f64 / (4 * MIB) as f64,
        du(&d.data)
    );
    assert!(grew <= 5 * MIB, "1 MiB into a clone grew the chunk store by {grew} bytes");
    assert!(grew >= 3 * MIB, "the written chunk was not copied ({grew} bytes)");
    // The source written too, in its chunk 7: its own copy of that one.
    let at2 = 30 * MIB;
    let patch2 = vec![0x5Au8; 200_000];
    assert_eq!(c.write3(&src, at2, &patch2), Ok(patch2.len() as u32));
    let mut src_new = src_data.clone();
    src_new[at2 as usize..at2 as usize + patch2.len()].copy_from_slice(&patch2);
    assert!(c.read3_all(&src).unwrap() == src_new, "the source after its own write");
    assert!(c.read3_all(&dst).unwrap() == dst_data, "the clone changed when its source was written");
    // A clone of a range into the middle of another file, offsets aligned
    // alike (chunks 4..6 of the source over chunks 1..3 of the clone, and
    // a partial chunk copied at each end).
    assert_eq!(clone4(&mut c, &mut s, &src, &dst, 12 * MIB + 4096, 4 * MIB + 4096, 12 * MIB), Nfsstat4::OK);
    dst_data[(4 * MIB + 4096) as usize..(16 * MIB + 4096) as usize]
        .copy_from_slice(&src_new[(12 * MIB + 4096) as usize..(24 * MIB + 4096) as usize]);
    assert!(c.read3_all(&dst).unwrap() == dst_data, "a range clone");
    // Past the source's end: invalid, nothing changed.
    assert_eq!(clone4(&mut c, &mut s, &src, &dst, 60 * MIB, 0, 8 * MIB), Nfsstat4::INVAL);
    // The same bytes after the destager ran and the daemon restarted.
    settle_chunks(&d.data);
    d.restart();
    let mut c = Nfs::connect(d.nfs_port);
    assert!(c.read3_all(&src).unwrap() == src_new, "the source across a restart");
    assert!(c.read3_all(&dst).unwrap() == dst_data, "the clone across a restart");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
    // Deleting the source keeps the clone whole; deleting both frees all.
    assert_eq!(c.remove3(&root, "vm-image"), Nfsstat3::OK);
    assert!(c.read3_all(&dst).unwrap() == dst_data, "the clone after its source was deleted");
    let one = settle_chunks(&d.data);
    assert_eq!(c.remove3(&root, "vm-image.clone"), Nfsstat3::OK);
    let none = settle_chunks(&d.data);
    eprintln!("reflink: after deleting the source {one} bytes, after deleting the clone too {none} bytes");
    // The clone alone: 16 chunks, two of which (3 and 5, both the
    // source's chunk 5 once) are still one inode: 15 chunks' worth.
    assert!(one >= 15 * 4 * MIB && one < 16 * 4 * MIB, "{one} bytes for the clone alone");
    assert_eq!(none, 0, "chunks left after both files were deleted");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}

/// Clone, write and delete loops over NFS; the daemon is SIGKILLed at
/// varied moments (during the clone's destage, the copy-on-write, the
/// reclaim); after each restart the source reads unchanged, the clones
/// that exist read as the source (with the write when it was
/// acknowledged), and fsck is clean (reference counts included).
#[test]
fn sigkill_during_clone_and_delete_loops_leaves_fsck_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());
    let base_data = pattern(2, (12 * MIB + 4096) as usize);
    {
        let mut c = Nfs::connect(d.nfs_port);
        let root = c.mount("/public").unwrap();
        let base = c.create3(&root, "base").unwrap();
        write_all(&mut c, &base, 0, &base_data);
    }
    // The loop threads die by panic when the daemon is killed under them
    // (the raw clients panic on a closed connection): keep those quiet.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() != Some("clone-loop") {
            default_hook(info);
        }
    }));
    let mut seed = 0x5eed_u64;
    for round in 0..6u64 {
        let port = d.nfs_port;
        let worker = std::thread::Builder::new().name("clone-loop".into()).spawn(move || {
            let mut c = Nfs::connect(port);
            let root = c.mount("/public").unwrap();
            let base = c.lookup3(&root, b"base").unwrap();
            let mut s = session(&mut c, format!("loop{round}").as_bytes(), 1 << 20, 64);
            let mut n = 0u64;
            loop {
                let name = format!("c{round}-{n}");
                let Ok(fh) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.create3(&root, &name)))
                else {
                    return n;
                };
                let Ok(fh) = fh else { return n };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    clone4(&mut c, &mut s, &base, &fh, 0, 0, 0);
                    c.write3(&fh, 4 * MIB + 7, &[0xEE; 10_000]).ok();
                    if n > 0 {
                        c.remove3(&root, &format!("c{round}-{}", n - 1));
                    }
                }));
                if r.is_err() {
                    return n;
                }
                n += 1;
            }
        }).unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(400 + seed % 1600));
        d.kill9();
        let loops = worker.join().unwrap();
        d.start_again();
        let mut c = Nfs::connect(d.nfs_port);
        let root = c.mount("/public").unwrap();
        let base = c.lookup3(&root, b"base").unwrap();
        assert!(c.read3_all(&base).unwrap() == base_data, "round {round}: the source changed");
        // Every clone left reads as the source, with the write or without.
        let mut checked = 0;
        for r in 0..=round {
            for i in 0..=loops + 1 {
                let name = format!("c{r}-{i}");
                let Ok(fh) = c.lookup3(&root, name.as_bytes()) else { continue };
                let got = c.read3_all(&fh).unwrap();
                if got.is_empty() {
                    continue; // created, killed before the clone
                }
                let mut written = base_data.clone();
                written[(4 * MIB + 7) as usize..(4 * MIB + 10_007) as usize].fill(0xEE);
                assert!(got == base_data || got == written, "round {round}: clone {name} reads neither");
                checked += 1;
            }
        }
        settle_chunks(&d.data);
        let side: Vec<String> = std::fs::read_dir(d.data.join("chunks"))
            .unwrap()
            .flatten()
            .flat_map(|dir| std::fs::read_dir(dir.path()).unwrap().flatten())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".lnk") || n.ends_with(".cow"))
            .collect();
        assert!(side.is_empty(), "round {round}: side names left in the chunk store: {side:?}");
        let out = d.ok(&["fsck"]);
        eprintln!("reflink crash round {round}: {loops} loops before the kill, {checked} clones checked");
        assert!(out.contains("file system is consistent"), "round {round}: {out}");
    }
}

/// FSCTL_DUPLICATE_EXTENTS_TO_FILE on `dst` from `src` (DUPLICATE_EXTENTS_DATA:
/// the source's SMB2_FILEID, source offset, target offset, byte count).
fn dup_extents(c: &mut Smb, src: FileId, dst: FileId, src_offset: u64, dst_offset: u64, count: u64) -> NtStatus {
    let mut input = Vec::with_capacity(40);
    for v in [src.persistent, src.volatile, src_offset, dst_offset, count] {
        input.extend_from_slice(&v.to_le_bytes());
    }
    let req = IoctlRequest {
        ctl_code: ctl_code::FSCTL_DUPLICATE_EXTENTS_TO_FILE,
        file_id: dst,
        input: &input,
        max_input_response: 0,
        output: &[],
        max_output_response: 0,
        flags: 1,
    };
    c.call(Request::Ioctl(req), Cmd::IOCTL).status()
}

#[test]
fn smb_duplicate_extents_shares_chunks_and_each_side_writes_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "alice", "--password", "alicepw"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let size = 12 * MIB;
    let a = pattern(3, size as usize);
    let b = pattern(4, size as usize);
    let src = c.create("dup-src").unwrap();
    let dst = c.create("dup-dst").unwrap();
    for (fid, data) in [(src, &a), (dst, &b)] {
        for (i, piece) in data.chunks(MIB as usize).enumerate() {
            assert_eq!(c.write(fid, i as u64 * MIB, piece, false), NtStatus::SUCCESS);
        }
    }
    let before = settle_chunks(&d.data);
    // Not cluster-aligned: refused (MS-FSA 2.1.5.10.8).
    assert_eq!(dup_extents(&mut c, src, dst, 100, 0, 4096), NtStatus::INVALID_PARAMETER);
    // The whole file over the target (which is as large already).
    assert_eq!(dup_extents(&mut c, src, dst, 0, 0, size), NtStatus::SUCCESS);
    assert!(c.read_all(dst, size as usize).unwrap() == a, "the target after DUPLICATE_EXTENTS");
    let shared = settle_chunks(&d.data);
    eprintln!("reflink (SMB): two 12 MiB files {before} bytes, after duplicating one over the other {shared} bytes");
    assert!(shared <= size + MIB, "the chunk store holds {shared} bytes after the duplication");
    // Each side written: byte-exact, each keeps the other's data.
    let mut a2 = a.clone();
    let mut b2 = a.clone();
    assert_eq!(c.write(dst, 5 * MIB, &[0x11; 4096], false), NtStatus::SUCCESS);
    b2[(5 * MIB) as usize..(5 * MIB + 4096) as usize].fill(0x11);
    assert_eq!(c.write(src, 9 * MIB + 3, &[0x22; 777], false), NtStatus::SUCCESS);
    a2[(9 * MIB + 3) as usize..(9 * MIB + 780) as usize].fill(0x22);
    assert!(c.read_all(src, size as usize).unwrap() == a2, "the source after writes to both");
    assert!(c.read_all(dst, size as usize).unwrap() == b2, "the target after writes to both");
    let written = settle_chunks(&d.data);
    eprintln!("reflink (SMB): after a write to each side {written} bytes (+{})", written - shared);
    assert!(written - shared <= 2 * 4 * MIB + MIB, "two writes grew the chunk store by {}", written - shared);
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}

/// A 10 MiB named stream renamed onto its file's unnamed stream
/// (FileRenameInformation to `::$DATA` with ReplaceIfExists) over 12 MiB
/// of the file's own data: the file reads the stream's bytes, the stream
/// is gone, the chunk store holds about the stream's 10 MiB once (its
/// whole chunks linked to the file, not copied; the file's old data
/// freed), and fsck is clean.
#[test]
fn smb_stream_renamed_onto_its_file_moves_its_chunks_by_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let d = Daemon::start(tmp.path());
    d.ok(&["user", "add", "alice", "--password", "alicepw"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut c = Smb::logged_on(d.smb_port, "alice", "alicepw", "public");
    let a = pattern(5, (12 * MIB) as usize);
    let b = pattern(6, (10 * MIB) as usize);
    let f = c.create("sf").unwrap();
    let s = c.create("sf:big").unwrap();
    for (fid, data) in [(f, &a), (s, &b)] {
        for (i, piece) in data.chunks(MIB as usize).enumerate() {
            assert_eq!(c.write(fid, i as u64 * MIB, piece, false), NtStatus::SUCCESS);
        }
    }
    assert_eq!(c.close(f), NtStatus::SUCCESS);
    let before = settle_chunks(&d.data);
    let mut rinfo = Vec::new();
    fscc::FileRenameInformation { replace_if_exists: true, root_directory: 0, file_name: Utf16::Str("::$DATA") }
        .encode(&mut rinfo);
    let req = SetInfoRequest {
        info_type: info_type::FILE,
        file_info_class: fscc::info_class::RENAME,
        buffer: &rinfo,
        additional_information: 0,
        file_id: s,
    };
    assert_eq!(c.call(Request::SetInfo(req), Cmd::SET_INFO).status(), NtStatus::SUCCESS);
    assert!(c.read_all(s, b.len()).unwrap() == b, "the handle reads the file's new data");
    assert_eq!(c.close(s), NtStatus::SUCCESS);
    let f = c.open_read("sf").unwrap();
    assert!(c.read_all(f, a.len()).unwrap() == b, "the file holds the stream's data");
    assert_eq!(c.close(f), NtStatus::SUCCESS);
    assert_eq!(c.open_read("sf:big").err(), Some(NtStatus::OBJECT_NAME_NOT_FOUND));
    let after = settle_chunks(&d.data);
    eprintln!("stream onto ::$DATA: 12 MiB file + 10 MiB stream {before} bytes, after the rename {after} bytes");
    assert!(after <= 10 * MIB + MIB, "the chunk store holds {after} bytes after the rename");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}
