//! Allocation tracking (`Op::Allocated`): which ranges of a file hold data.
//! A chunked file's `k` records carry a map of 64 KiB blocks; writes set
//! the blocks they touch, a zeroed range frees the blocks it covers whole
//! (and drops wholly covered chunks), inline data is allocated up to its
//! stored length. The one rule that matters for data: a range reported as a
//! hole always reads as zeros (checked against a byte model under random
//! writes, zeroing, truncation and clones, with fsck clean after each
//! destage).

mod common;

use common::*;
use duet_cluster::keys;
use duet_cluster::kv::Txn;
use duet_cluster::machine::apply;
use duet_cluster::records::Command;
use duet_fs::{CreateKind, NodeId, ObjRef, Op, OpOutput, SetAttrs, ALLOC_BLOCK, CHUNK_SIZE, ROOT_ID};

const B: u64 = ALLOC_BLOCK;
const CS: u64 = CHUNK_SIZE;

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

fn allocated(kv: &Kv, id: NodeId, offset: u64, len: u64) -> Vec<(u64, u64)> {
    match ok(read_only(kv, vec![Op::Allocated { obj: ObjRef::Id(id), offset, len }]).results.remove(0)) {
        OpOutput::Ranges { ranges, .. } => ranges,
        other => panic!("{other:?}"),
    }
}

fn zero(kv: &mut Kv, id: NodeId, offset: u64, len: u64) {
    ok(run(kv, vec![Op::ZeroRange { obj: ObjRef::Id(id), offset, len }]).remove(0));
}

fn truncate(kv: &mut Kv, id: NodeId, size: u64) {
    let attrs = SetAttrs { size: Some(size), ..SetAttrs::default() };
    ok(run(kv, vec![Op::SetAttr { obj: ObjRef::Id(id), attrs }]).remove(0));
}

fn read(kv: &Kv, disk: &Disk, id: NodeId, size: u64) -> Vec<u8> {
    let n = duet_cluster::records::Node::decode(kv.get(&keys::node(id)).unwrap()).unwrap();
    if !n.chunked {
        let mut d = kv.get(&keys::data(id)).cloned().unwrap_or_default();
        d.resize(size as usize, 0);
        return d;
    }
    disk.read(id, 0, size)
}

#[test]
fn writes_allocate_their_blocks_and_zeroing_frees_whole_ones() {
    let mut kv = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, ROOT_ID, "f", CreateKind::File);
    write(&mut kv, f, 0, vec![1; 8192]);
    write(&mut kv, f, 1 << 20, vec![2; 8192]);
    let size = (1 << 20) + 8192;
    // Two ranges: the first block, and the block at 1 MiB cut at the end
    // of the file.
    assert_eq!(allocated(&kv, f, 0, u64::MAX), vec![(0, B), (1 << 20, 8192)]);
    // Clipped to the asked range.
    assert_eq!(allocated(&kv, f, 4096, 4096), vec![(4096, 4096)]);
    assert_eq!(allocated(&kv, f, B, (1 << 20) - B), vec![]);
    assert_eq!(allocated(&kv, f, size, 100), vec![]);
    // Zeroing part of a block frees nothing; the whole block frees it.
    zero(&mut kv, f, 0, 4096);
    assert_eq!(allocated(&kv, f, 0, u64::MAX), vec![(0, B), (1 << 20, 8192)]);
    zero(&mut kv, f, 0, B);
    assert_eq!(allocated(&kv, f, 0, u64::MAX), vec![(1 << 20, 8192)]);
    // The last block, cut by the end of file, is covered whole by a zeroed
    // range to the end.
    zero(&mut kv, f, 1 << 20, 8192);
    assert_eq!(allocated(&kv, f, 0, u64::MAX), vec![]);
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(read(&kv, &disk, f, size), vec![0; size as usize]);
    // Written again: allocated again.
    write(&mut kv, f, B + 10, vec![3; 10]);
    assert_eq!(allocated(&kv, f, 0, u64::MAX), vec![(B, B)]);
    disk.destage(&mut kv);
    clean(&kv, &disk);
}

#[test]
fn inline_data_is_allocated_to_its_stored_length() {
    let mut kv = init();
    let f = create(&mut kv, ROOT_ID, "small", CreateKind::File);
    write(&mut kv, f, 0, vec![7; 4096]);
    assert_eq!(allocated(&kv, f, 0, 4096), vec![(0, 4096)]);
    // Zeros in the middle stay allocated; zeros to the end shorten it.
    zero(&mut kv, f, 100, 100);
    assert_eq!(allocated(&kv, f, 0, 4096), vec![(0, 4096)]);
    zero(&mut kv, f, 2048, 2048);
    assert_eq!(allocated(&kv, f, 0, 4096), vec![(0, 2048)]);
    zero(&mut kv, f, 0, 4096);
    assert_eq!(allocated(&kv, f, 0, 4096), vec![]);
    let a = lookup(&mut kv, ROOT_ID, "small").unwrap();
    assert_eq!(a.size, 4096, "zeroing never changes the size");
    let disk = Disk::default();
    assert_eq!(read(&kv, &disk, f, 4096), vec![0; 4096]);
    // A file extended past what it stores has a hole at the end.
    let g = create(&mut kv, ROOT_ID, "g", CreateKind::File);
    write(&mut kv, g, 0, vec![1; 10]);
    truncate(&mut kv, g, 3000);
    assert_eq!(allocated(&kv, g, 0, u64::MAX), vec![(0, 10)]);
}

#[test]
fn records_without_a_map_and_shared_chunks_count_whole() {
    let mut kv = init();
    let mut disk = Disk::default();
    let f = create(&mut kv, ROOT_ID, "f", CreateKind::File);
    write(&mut kv, f, CS - 10, vec![1; 20]);
    assert_eq!(allocated(&kv, f, 0, u64::MAX), vec![(CS - B, B + 10)]);
    // A record written before maps existed (an empty value): every block.
    kv.insert(keys::chunk(f, 0), Vec::new());
    assert_eq!(allocated(&kv, f, 0, u64::MAX), vec![(0, CS + 10)]);
    // A value nothing decodes counts whole too (fsck reports it).
    kv.insert(keys::chunk(f, 0), vec![9, 9, 9]);
    assert_eq!(allocated(&kv, f, 0, u64::MAX), vec![(0, CS + 10)]);
    kv.insert(keys::chunk(f, 0), keys::own_chunk(1 << 63));
    disk.destage(&mut kv);
    clean(&kv, &disk);

    // A reflink shares whole chunks (every block allocated) and copies the
    // partial ones (every block of the destination chunk allocated).
    let src = create(&mut kv, ROOT_ID, "src", CreateKind::File);
    write(&mut kv, src, 0, vec![5; 100]);
    write(&mut kv, src, CS + B, vec![6; 100]);
    let dst = create(&mut kv, ROOT_ID, "dst", CreateKind::File);
    ok(run(
        &mut kv,
        vec![Op::Clone { src: ObjRef::Id(src), src_offset: 0, dst: ObjRef::Id(dst), dst_offset: 0, len: u64::MAX, extend: true }],
    )
    .remove(0));
    let size = CS + B + 100;
    assert_eq!(allocated(&kv, dst, 0, u64::MAX), vec![(0, size)]);
    assert_eq!(allocated(&kv, src, 0, u64::MAX), vec![(0, CS), (CS + B, 100)], "the shared chunk counts whole");
    disk.destage(&mut kv);
    clean(&kv, &disk);
    assert_eq!(read(&kv, &disk, dst, size), read(&kv, &disk, src, size));
}

#[test]
fn holes_always_read_as_zeros() {
    for seed in 1..=40u64 {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut kv = init();
        let mut disk = Disk::default();
        let f = create(&mut kv, ROOT_ID, "f", CreateKind::File);
        let mut model: Vec<u8> = Vec::new();
        let span = 3 * CS;
        for step in 0..30 {
            match next(&mut x) % 6 {
                0 | 1 | 2 => {
                    let len = 1 + next(&mut x) % (3 * B);
                    let at = next(&mut x) % span;
                    let data = pattern(next(&mut x), len as usize);
                    let end = (at + len) as usize;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[at as usize..end].copy_from_slice(&data);
                    write(&mut kv, f, at, data);
                }
                3 | 4 => {
                    let at = next(&mut x) % span;
                    let len = next(&mut x) % (2 * CS);
                    zero(&mut kv, f, at, len);
                    let (s, e) = ((at as usize).min(model.len()), ((at + len) as usize).min(model.len()));
                    model[s..e].fill(0);
                }
                _ => {
                    let size = next(&mut x) % span;
                    truncate(&mut kv, f, size);
                    model.resize(size as usize, 0);
                }
            }
            let size = model.len() as u64;
            let ranges = allocated(&kv, f, 0, u64::MAX);
            // In order, merged, inside the file.
            for w in ranges.windows(2) {
                assert!(w[0].0 + w[0].1 < w[1].0, "seed {seed} step {step}: {ranges:?}");
            }
            assert!(ranges.iter().all(|&(o, l)| l > 0 && o + l <= size), "seed {seed} step {step}: {ranges:?}");
            // Every byte with data lies in a reported range.
            let mut at = 0usize;
            for &(o, l) in ranges.iter().chain(std::iter::once(&(size, 0))) {
                assert!(
                    model[at..o as usize].iter().all(|&b| b == 0),
                    "seed {seed} step {step}: data in the hole {at}..{o}: {ranges:?}"
                );
                at = (o + l) as usize;
            }
            if step % 7 == 6 {
                disk.destage(&mut kv);
                clean(&kv, &disk);
                assert!(read(&kv, &disk, f, size) == model, "seed {seed} step {step}: contents");
            }
        }
        disk.destage(&mut kv);
        clean(&kv, &disk);
        assert!(read(&kv, &disk, f, model.len() as u64) == model, "seed {seed}: contents");
    }
}
