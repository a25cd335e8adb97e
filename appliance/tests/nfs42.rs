//! The NFSv4.2 data operations on files large enough to live in chunks,
//! against a real duetd: COPY (whole file, from the middle of a chunk, past
//! the end of the source) and DEALLOCATE (across a chunk boundary, past the
//! end of file), read back over NFSv3, again after the destager ran and the
//! daemon restarted, then fsck.

mod clients;
mod common;

use clients::*;
use common::Daemon;
use duet_protocols::nfs::nfs4::v42::*;
use duet_protocols::nfs::nfs4::*;
use duet_protocols::nfs::xdr::{List, Opaque};

#[test]
fn nfs42_copy_and_deallocate_of_chunked_files() {
    const MIB: usize = 1 << 20;
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path());
    let mut c = Nfs::connect(d.nfs_port);
    let root = c.mount("/public").unwrap();
    // A 10 MiB source (three 4 MiB chunks), every 8 bytes their offset.
    let src = c.create3(&root, "copy-src").unwrap();
    let pattern: Vec<u8> = (0..10 * MIB as u64 / 8)
        .flat_map(|i| (i * 8).to_le_bytes())
        .collect();
    for (i, piece) in pattern.chunks(MIB).enumerate() {
        assert_eq!(
            c.write3(&src, (i * MIB) as u64, piece),
            Ok(piece.len() as u32)
        );
    }
    let dst = c.create3(&root, "copy-dst").unwrap();
    let mut s = session(&mut c, b"copier", 1 << 20, 64);
    let copy = |s: &mut Sess, c: &mut Nfs, src_offset: u64, dst_offset: u64, count: u64| {
        let rep = c
            .v4_minor(
                2,
                vec![
                    s.sequence(),
                    ArgOp4::PutFh(PutFh4Args {
                        object: Opaque(&src),
                    }),
                    ArgOp4::SaveFh(()),
                    ArgOp4::PutFh(PutFh4Args {
                        object: Opaque(&dst),
                    }),
                    ArgOp4::Copy(Copy4Args {
                        src_stateid: Stateid4::ANONYMOUS,
                        dst_stateid: Stateid4::ANONYMOUS,
                        src_offset,
                        dst_offset,
                        count,
                        consecutive: true,
                        synchronous: true,
                        source_server: List(vec![]),
                    }),
                ],
            )
            .expect("a COPY reply");
        let r = res4(&rep);
        match r.results.last() {
            Some(ResOp4::Copy(Copy4Res::Ok(ok))) => Ok(ok.response.count),
            Some(ResOp4::Copy(Copy4Res::Err(e))) => Err(*e),
            other => panic!("COPY: {:?} {other:?}", r.status),
        }
    };
    // The whole source, one server-side COPY; then 1 MiB more, from the
    // middle of a chunk, appended.
    assert_eq!(
        copy(&mut s, &mut c, 0, 0, 10 * MIB as u64),
        Ok(10 * MIB as u64)
    );
    assert_eq!(
        copy(
            &mut s,
            &mut c,
            3 * MIB as u64 + 5,
            10 * MIB as u64,
            MIB as u64
        ),
        Ok(MIB as u64)
    );
    let mut want = pattern.clone();
    want.extend_from_slice(&pattern[3 * MIB + 5..4 * MIB + 5]);
    assert!(
        c.read3_all(&dst).unwrap() == want,
        "the copy differs from its source"
    );
    // A range past the source's end is invalid (RFC 7862 15.2.3).
    assert_eq!(
        copy(&mut s, &mut c, 9 * MIB as u64, 0, 2 * MIB as u64),
        Err(Nfsstat4::INVAL)
    );
    // DEALLOCATE across the first chunk boundary, and past the end of file:
    // zeros there, the size unchanged.
    let dealloc = |s: &mut Sess, c: &mut Nfs, offset: u64, length: u64| {
        let rep = c
            .v4_minor(
                2,
                vec![
                    s.sequence(),
                    ArgOp4::PutFh(PutFh4Args {
                        object: Opaque(&dst),
                    }),
                    ArgOp4::Deallocate(Allocate4Args {
                        stateid: Stateid4::ANONYMOUS,
                        offset,
                        length,
                    }),
                ],
            )
            .expect("a DEALLOCATE reply");
        res4(&rep).status
    };
    assert_eq!(
        dealloc(&mut s, &mut c, 3 * MIB as u64 + 100, 2 * MIB as u64),
        Nfsstat4::OK
    );
    assert_eq!(
        dealloc(&mut s, &mut c, 10 * MIB as u64 + 7, 10 * MIB as u64),
        Nfsstat4::OK
    );
    want[3 * MIB + 100..5 * MIB + 100].fill(0);
    want[10 * MIB + 7..].fill(0);
    assert!(
        c.read3_all(&dst).unwrap() == want,
        "DEALLOCATE did not zero exactly its range"
    );
    // After the destager has run and the daemon restarted, the same bytes.
    std::thread::sleep(std::time::Duration::from_secs(3));
    d.restart();
    let mut c = Nfs::connect(d.nfs_port);
    assert!(
        c.read3_all(&dst).unwrap() == want,
        "the copy or the zeroed range changed across a restart"
    );
    assert!(c.read3_all(&src).unwrap() == pattern, "the source changed");
    assert!(d.ok(&["fsck"]).contains("file system is consistent"));
}
