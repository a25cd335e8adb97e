//! Single-file clones by reference (reflink, `Op::Clone`) in the state
//! machine: whole aligned chunks share a blob (one `k` record naming it, a
//! count in `b`), partial chunks are copied, the first change to a shared
//! chunk gives that file its own copy (an `Unshare` record before it), and
//! truncation, DEALLOCATE and unlink drop references.
//!
//! The queued records are applied by a model of the destager with the
//! data path's semantics (a shared chunk is one inode linked from every
//! file's chunk path; `Unshare` breaks the link; `CloneFrom` reads every
//! source before it writes), and every file is compared byte for byte with
//! a plain model of what it must hold; fsck (refcounts included) must stay
//! clean throughout, and catches a wrong count.

mod common;

use duet_cluster::kv::Txn;
use duet_cluster::machine::{apply, execute};
use duet_cluster::records::{decode, Command, DataOp, DataRecord, Node};
use duet_cluster::{fsck, keys};
use common::*;
use duet_fs::{
    Batch, CreateKind, Credentials, FsError, IfExists, NodeId, ObjRef, Op, OpOutput, OpResult, SetAttrs,
    CHUNK_SIZE, ROOT_ID,
};

const CS: u64 = CHUNK_SIZE;


fn run(kv: &mut Kv, ops: Vec<Op>) -> Vec<OpResult> {
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.ops = ops;
    let (results, writes) = {
        let mut t = Txn::new(&*kv);
        let out = execute(&mut t, &b);
        (out.results, t.into_writes())
    };
    commit(kv, writes);
    results
}

fn init() -> Kv {
    let mut kv = Kv::new();
    let writes = {
        let mut t = Txn::new(&kv);
        apply(&mut t, &Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] });
        t.into_writes()
    };
    commit(&mut kv, writes);
    kv
}

fn create(kv: &mut Kv, name: &str) -> NodeId {
    let r = run(
        kv,
        vec![Op::Create {
            dir: ObjRef::Id(ROOT_ID),
            name: name.into(),
            kind: CreateKind::File,
            attrs: SetAttrs::default(),
            if_exists: IfExists::Fail,
        }],
    );
    r[0].as_ref().unwrap().attrs().unwrap().id
}

fn clone(kv: &mut Kv, src: NodeId, so: u64, dst: NodeId, d_o: u64, len: u64) -> OpResult {
    run(kv, vec![Op::Clone { src: ObjRef::Id(src), src_offset: so, dst: ObjRef::Id(dst), dst_offset: d_o, len, extend: true }])
        .remove(0)
}


fn content(kv: &Kv, disk: &Disk, id: NodeId) -> Vec<u8> {
    let n = Node::decode(kv.get(&keys::node(id)).unwrap()).unwrap();
    if !n.chunked {
        let mut d = kv.get(&keys::data(id)).cloned().unwrap_or_default();
        d.resize(n.attrs.size as usize, 0);
        return d;
    }
    disk.read(id, 0, n.attrs.size)
}

fn blob_count(kv: &Kv) -> usize {
    kv.range(vec![keys::BLOB]..vec![keys::BLOB + 1]).count()
}

#[test]
fn aligned_clone_shares_chunks_and_the_first_write_copies_one() {
    let mut kv = init();
    let mut disk = Disk::default();
    let a = create(&mut kv, "a");
    let data = pattern(7, (4 * CS + 1000) as usize);
    write(&mut kv, a, 0, data.clone());
    disk.destage(&mut kv);
    let b = create(&mut kv, "b");
    // Clone the whole file: four whole chunks shared, the last 1000 bytes
    // copied.
    let r = clone(&mut kv, a, 0, b, 0, u64::MAX);
    assert!(matches!(r, Ok(OpOutput::Copied { count, .. }) if count == data.len() as u64), "{r:?}");
    let q: Vec<DataRecord> = kv.range(keys::dq(0)..keys::dq(u64::MAX)).map(|(_, v)| decode(v).unwrap()).collect();
    assert_eq!(q.len(), 1, "one record for the clone: {q:?}");
    match &q[0].op {
        DataOp::CloneFrom { src, share, copy } => {
            assert_eq!(*src, a);
            assert_eq!(share, &vec![(0, 0), (1, 1), (2, 2), (3, 3)]);
            assert_eq!(copy, &vec![(4 * CS, 4 * CS, 1000)]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(blob_count(&kv), 4);
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(content(&kv, &disk, b), data);
    // Five chunks of a, four of them shared with b, b's own tail: six.
    assert_eq!(disk.inodes(), 6);
    // A write into b's chunk 1 gives b its own copy of that chunk only.
    write(&mut kv, b, CS + 10, vec![0xAB; 5000]);
    let q: Vec<DataRecord> = kv.range(keys::dq(0)..keys::dq(u64::MAX)).map(|(_, v)| decode(v).unwrap()).collect();
    assert_eq!(q[0].op, DataOp::Unshare { chunks: vec![1] }, "{q:?}");
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(disk.inodes(), 7);
    let mut want_b = data.clone();
    want_b[(CS + 10) as usize..(CS + 5010) as usize].fill(0xAB);
    assert_eq!(content(&kv, &disk, b), want_b);
    assert_eq!(content(&kv, &disk, a), data, "the source changed");
    // The blob of chunk 1 now has one reference (a's).
    let refs: Vec<u64> = kv
        .range(vec![keys::BLOB]..vec![keys::BLOB + 1])
        .map(|(_, v)| u64::from_be_bytes(v.as_slice().try_into().unwrap()))
        .collect();
    assert_eq!(refs.iter().filter(|n| **n == 1).count(), 1, "{refs:?}");
    // Deleting the source drops its references: b keeps its data.
    let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(ROOT_ID), name: "a".into(), dir_only: Some(false) }]);
    assert!(r[0].is_ok());
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(content(&kv, &disk, b), want_b);
    // Deleting the clone too: no blob, no chunk left.
    let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(ROOT_ID), name: "b".into(), dir_only: Some(false) }]);
    assert!(r[0].is_ok());
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(blob_count(&kv), 0);
    assert!(disk.chunks.is_empty());
}

#[test]
fn clone_of_data_not_yet_destaged_orders_after_it() {
    let mut kv = init();
    let mut disk = Disk::default();
    let a = create(&mut kv, "a");
    let b = create(&mut kv, "b");
    let first = pattern(1, (2 * CS) as usize);
    write(&mut kv, a, 0, first.clone());
    // Cloned before the destager ran; a then written again (after the
    // clone: b must not see it).
    assert!(clone(&mut kv, a, 0, b, 0, 2 * CS).is_ok());
    write(&mut kv, a, 100, vec![9; 100]);
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(content(&kv, &disk, b), first);
    let mut want = first.clone();
    want[100..200].fill(9);
    assert_eq!(content(&kv, &disk, a), want);
}

#[test]
fn truncate_and_deallocate_of_shared_chunks() {
    let mut kv = init();
    let mut disk = Disk::default();
    let a = create(&mut kv, "a");
    let b = create(&mut kv, "b");
    let data = pattern(3, (3 * CS) as usize);
    write(&mut kv, a, 0, data.clone());
    assert!(clone(&mut kv, a, 0, b, 0, 3 * CS).is_ok());
    disk.destage(&mut kv);
    assert_eq!(blob_count(&kv), 3);
    // b cut in the middle of chunk 1: chunk 2 dropped, chunk 1 copied.
    let r = run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(b), attrs: SetAttrs { size: Some(CS + 7), ..Default::default() } }]);
    assert!(r[0].is_ok());
    // a: DEALLOCATE all of chunk 0 and part of chunk 1.
    let r = run(&mut kv, vec![Op::ZeroRange { obj: ObjRef::Id(a), offset: 0, len: CS + 50 }]);
    assert!(r[0].is_ok());
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(content(&kv, &disk, b), data[..(CS + 7) as usize].to_vec());
    let mut want = data.clone();
    want[..(CS + 50) as usize].fill(0);
    assert_eq!(content(&kv, &disk, a), want);
    // Chunk 0 is b's alone now (a punched it), chunk 2 a's alone.
    assert_eq!(blob_count(&kv), 2);
}

#[test]
fn small_and_misaligned_clones_copy_and_bad_ranges_are_refused() {
    let mut kv = init();
    let mut disk = Disk::default();
    let a = create(&mut kv, "a");
    let b = create(&mut kv, "b");
    // Inline source: a byte copy.
    write(&mut kv, a, 0, b"hello, world".to_vec());
    assert!(clone(&mut kv, a, 7, b, 2, 5).is_ok());
    disk.destage(&mut kv);
    assert_eq!(content(&kv, &disk, b), b"\0\0world".to_vec());
    // Past the source's end: invalid, nothing changed.
    assert_eq!(clone(&mut kv, a, 10, b, 0, 5), Err(FsError::Invalid));
    // Chunked, offsets not aligned alike: all copied, no blob.
    let data = pattern(5, (CS + 999) as usize);
    write(&mut kv, a, 0, data.clone());
    assert!(clone(&mut kv, a, 3, b, 0, CS).is_ok());
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(blob_count(&kv), 0);
    assert_eq!(content(&kv, &disk, b), data[3..(CS + 3) as usize].to_vec());
}

#[test]
fn fsck_catches_a_wrong_reference_count() {
    let mut kv = init();
    let mut disk = Disk::default();
    let a = create(&mut kv, "a");
    let b = create(&mut kv, "b");
    write(&mut kv, a, 0, pattern(2, CS as usize));
    assert!(clone(&mut kv, a, 0, b, 0, CS).is_ok());
    disk.destage(&mut kv);
    clean(&kv, &disk);
    let (k, _) = kv.range(vec![keys::BLOB]..vec![keys::BLOB + 1]).next().map(|(k, v)| (k.clone(), v.clone())).unwrap();
    kv.insert(k.clone(), 3u64.to_be_bytes().to_vec());
    let r = fsck::check(&kv, &disk.files());
    assert!(r.problems.iter().any(|p| p.contains("counts 3 references but 2 chunks")), "{:?}", r.problems);
    // A count with no reference left is a leak.
    kv.insert(keys::blob(999), 1u64.to_be_bytes().to_vec());
    let r = fsck::check(&kv, &disk.files());
    assert!(r.problems.iter().any(|p| p.contains("blob 999") && p.contains("leaked")), "{:?}", r.problems);
    // A reference with no count.
    kv.remove(&k);
    let r = fsck::check(&kv, &disk.files());
    assert!(r.problems.iter().any(|p| p.contains("has no reference count")), "{:?}", r.problems);
}

/// Random writes, clones (aligned, misaligned, within one file,
/// overlapping), truncations, DEALLOCATEs and deletions, destaged at random
/// points: every file always reads as the plain model says, fsck clean.
#[test]
fn random_clone_and_write_sequences_match_a_byte_model() {
    for seed in 0..4u64 {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n.max(1)
        };
        let mut kv = init();
        let mut disk = Disk::default();
        let names = ["f0", "f1", "f2"];
        let mut ids = Vec::new();
        let mut model: Vec<Vec<u8>> = Vec::new();
        for n in names {
            ids.push(create(&mut kv, n));
            model.push(Vec::new());
        }
        for step in 0..30 {
            let f = next(3) as usize;
            match next(6) {
                0 | 1 => {
                    let off = next(3 * CS);
                    let most = if next(2) == 0 { 6000 } else { CS + 10 };
                    let len = 1 + next(most);
                    let data = pattern(seed * 1000 + step, len as usize);
                    write(&mut kv, ids[f], off, data.clone());
                    let m = &mut model[f];
                    if m.len() < (off + len) as usize {
                        m.resize((off + len) as usize, 0);
                    }
                    m[off as usize..(off + len) as usize].copy_from_slice(&data);
                }
                2 | 3 => {
                    let g = next(3) as usize;
                    let src_len = model[g].len() as u64;
                    if src_len == 0 {
                        continue;
                    }
                    let (so, d_o, len) = if next(3) > 0 {
                        let so = next(src_len.div_ceil(CS)) * CS;
                        let len = next(src_len - so + 1);
                        (so, next(3) * CS, len)
                    } else {
                        let so = next(src_len);
                        (so, next(3 * CS), next(src_len - so + 1))
                    };
                    let r = clone(&mut kv, ids[g], so, ids[f], d_o, len);
                    if f == g && len > 0 && so < d_o + len && d_o < so + len {
                        assert_eq!(r, Err(FsError::Invalid), "seed {seed} step {step}: overlapping ranges of one file");
                        continue;
                    }
                    assert!(r.is_ok(), "seed {seed} step {step}: {r:?}");
                    let bytes = model[g][so as usize..(so + len) as usize].to_vec();
                    let m = &mut model[f];
                    if len > 0 && m.len() < (d_o + len) as usize {
                        m.resize((d_o + len) as usize, 0);
                    }
                    m[d_o as usize..(d_o + len) as usize].copy_from_slice(&bytes);
                }
                4 => {
                    let size = next(3 * CS);
                    let r = run(
                        &mut kv,
                        vec![Op::SetAttr { obj: ObjRef::Id(ids[f]), attrs: SetAttrs { size: Some(size), ..Default::default() } }],
                    );
                    assert!(r[0].is_ok());
                    model[f].resize(size as usize, 0);
                }
                _ => {
                    if next(3) == 0 {
                        let r = run(
                            &mut kv,
                            vec![Op::Remove { dir: ObjRef::Id(ROOT_ID), name: names[f].into(), dir_only: Some(false) }],
                        );
                        assert!(r[0].is_ok());
                        ids[f] = create(&mut kv, names[f]);
                        model[f].clear();
                    } else {
                        let off = next(3 * CS);
                        let len = next(2 * CS);
                        let r = run(&mut kv, vec![Op::ZeroRange { obj: ObjRef::Id(ids[f]), offset: off, len }]);
                        assert!(r[0].is_ok());
                        let m = &mut model[f];
                        let end = ((off + len) as usize).min(m.len());
                        if (off as usize) < end {
                            m[off as usize..end].fill(0);
                        }
                    }
                }
            }
            if next(3) == 0 {
                disk.destage(&mut kv);
                clean(&kv, &disk);
                for (i, id) in ids.iter().enumerate() {
                    assert!(content(&kv, &disk, *id) == model[i], "seed {seed} step {step}: file {i} differs");
                }
            }
        }
        disk.destage(&mut kv);
        clean(&kv, &disk);
        for (i, id) in ids.iter().enumerate() {
            assert!(content(&kv, &disk, *id) == model[i], "seed {seed} end: file {i} differs");
        }
    }
}
