//! The per-file index of queued data records (`Q` file dseq): its value
//! says which bytes each record can change, so a read plans with only the
//! records over its range, fetched from `q`; the scan starts past this
//! node's destage progress (`l destaged_upto`), not over the deletion marks
//! of records already destaged; fsck checks the index against the queue.

mod common;

use common::*;
use duet_cluster::keys;
use duet_cluster::kv::Txn;
use duet_cluster::machine::drop_destaged;
use duet_cluster::records::{decode, Command, DataOp, DataRecord};
use duet_cluster::fsck;
use duet_fs::{Batch, CreateKind, Credentials, NodeId, ObjRef, Op, OpOutput, SetAttrs, ROOT_ID};

const BLK: u64 = 4096;

/// A share and a chunked file of 64 blocks, everything destaged; then one
/// queued 4 KiB write at each block of `blocks`.
fn setup(blocks: &[u64]) -> (Kv, Disk, NodeId) {
    let mut kv = Kv::new();
    let (r, _) = admin(&mut kv, Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![share("data", "/data")] });
    r.unwrap();
    let dir = lookup(&mut kv, ROOT_ID, "data").unwrap().id;
    let f = create(&mut kv, dir, "f", CreateKind::File);
    write(&mut kv, f, 0, pattern(1, (64 * BLK) as usize));
    let mut disk = Disk::default();
    disk.destage(&mut kv);
    for &b in blocks {
        write(&mut kv, f, b * BLK, pattern(100 + b, BLK as usize));
    }
    (kv, disk, f)
}

/// The dseqs a read of `[offset, offset+len)` lays over the chunks.
fn planned(kv: &mut Kv, f: NodeId, offset: u64, len: u64) -> Vec<u64> {
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.ops = vec![Op::Read { obj: ObjRef::Id(f), offset, len }];
    let out = run_batch(kv, &b);
    assert!(matches!(out.results[0], Ok(OpOutput::Read { .. })), "{:?}", out.results[0]);
    out.reads[0].overlay.iter().map(|(d, _)| *d).collect()
}

fn queued(kv: &Kv) -> Vec<(u64, DataRecord)> {
    kv.range(keys::dq(0)..keys::dq(u64::MAX)).map(|(k, v)| (keys::u64_at(k, 1).unwrap(), decode(v).unwrap())).collect()
}

fn index(kv: &Kv, f: NodeId) -> Vec<(Vec<u8>, Vec<u8>)> {
    let p = keys::dq_by_file_prefix(f);
    kv.range(p.clone()..keys::prefix_end(&p)).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// This node's destager is done up to `upto`: the store's own step
/// (`StoreHandle::destaged`), on the in-memory store.
fn destaged(kv: &mut Kv, upto: u64) {
    let progress = keys::local("destaged_upto");
    let old = kv.get(&progress).map(|v| u64::from_be_bytes(v.as_slice().try_into().unwrap())).unwrap_or(0);
    let writes = {
        let mut t = Txn::new(&*kv);
        drop_destaged(&mut t, old, upto, &[]);
        t.into_writes()
    };
    commit(kv, writes);
    kv.insert(progress, upto.max(old).to_be_bytes().to_vec());
}

#[test]
fn the_index_carries_each_writes_span_and_a_read_plans_only_the_records_over_its_range() {
    let (mut kv, _disk, f) = setup(&[3, 10, 3, 40]);
    let q = queued(&kv);
    assert_eq!(q.len(), 4, "{q:?}");
    for (dseq, rec) in &q {
        let v = kv.get(&keys::dq_by_file(f, *dseq)).expect("indexed").clone();
        let (s, e) = rec.op.span().expect("a write");
        assert_eq!(v, keys::dq_span(Some((s, e))));
        assert_eq!(e - s, BLK);
    }
    let d: Vec<u64> = q.iter().map(|(d, _)| *d).collect();
    // Block 3 was written twice: both records, oldest first.
    assert_eq!(planned(&mut kv, f, 3 * BLK, BLK), vec![d[0], d[2]]);
    assert_eq!(planned(&mut kv, f, 10 * BLK, BLK), vec![d[1]]);
    assert_eq!(planned(&mut kv, f, 20 * BLK, BLK), Vec::<u64>::new());
    // A range across blocks 3..=10 and a byte of block 40.
    assert_eq!(planned(&mut kv, f, 3 * BLK + 100, 7 * BLK + 1), vec![d[0], d[1], d[2]]);
    assert_eq!(planned(&mut kv, f, 41 * BLK - 1, 1), vec![d[3]]);

    // A truncation can change any byte: its index value says so, and every
    // read carries it.
    let r = run(&mut kv, vec![Op::SetAttr { obj: ObjRef::Id(f), attrs: SetAttrs { size: Some(50 * BLK), ..Default::default() } }]);
    assert!(r[0].is_ok(), "{r:?}");
    let (t, rec) = queued(&kv).pop().unwrap();
    assert!(matches!(rec.op, DataOp::Truncate { .. }), "{rec:?}");
    assert_eq!(kv.get(&keys::dq_by_file(f, t)).unwrap(), &keys::dq_span(None));
    assert_eq!(planned(&mut kv, f, 20 * BLK, BLK), vec![t]);
    assert_eq!(planned(&mut kv, f, 10 * BLK, BLK), vec![d[1], t]);
}

#[test]
fn an_index_value_from_before_spans_is_read_as_touching_everything() {
    let (mut kv, _disk, f) = setup(&[3, 10]);
    let d: Vec<u64> = queued(&kv).iter().map(|(d, _)| *d).collect();
    // Nodes before the span wrote an empty value.
    for (k, _) in index(&kv, f) {
        kv.insert(k, Vec::new());
    }
    // The record is fetched and filtered by its own range.
    assert_eq!(planned(&mut kv, f, 3 * BLK, BLK), vec![d[0]]);
    assert_eq!(planned(&mut kv, f, 20 * BLK, BLK), Vec::<u64>::new());
    let r = fsck::check(&kv, &[]);
    assert!(!r.problems.iter().any(|p| p.contains("queue index")), "{:?}", r.problems);
}

#[test]
fn a_read_and_a_destage_round_start_past_the_nodes_destage_progress() {
    let (mut kv, _disk, f) = setup(&[3, 10, 3, 40]);
    let d: Vec<u64> = queued(&kv).iter().map(|(d, _)| *d).collect();
    destaged(&mut kv, d[1]);
    assert_eq!(queued(&kv).iter().map(|(x, _)| *x).collect::<Vec<_>>(), vec![d[2], d[3]]);
    assert_eq!(index(&kv, f).len(), 2);
    assert_eq!(planned(&mut kv, f, 3 * BLK, BLK), vec![d[2]]);
    assert_eq!(planned(&mut kv, f, 10 * BLK, BLK), Vec::<u64>::new());

    // An index entry at or below the progress is never read (there are
    // only deletion marks there on a real node): plant one to show it.
    kv.insert(keys::dq_by_file(f, d[0]), keys::dq_span(Some((3 * BLK, 4 * BLK))));
    kv.insert(keys::dq(d[0]), kv.get(&keys::dq(d[2])).unwrap().clone());
    assert_eq!(planned(&mut kv, f, 3 * BLK, BLK), vec![d[2]]);
    // A destage round drops from the progress on: the planted pair stays,
    // the rest goes.
    destaged(&mut kv, d[3]);
    assert_eq!(queued(&kv).iter().map(|(x, _)| *x).collect::<Vec<_>>(), vec![d[0]]);
    assert_eq!(index(&kv, f).len(), 1);
}

#[test]
fn fsck_checks_the_index_against_the_queue() {
    let (kv, disk, f) = setup(&[3, 10]);
    let files = disk.files();
    let clean = |kv: &Kv| fsck::check(kv, &files).problems;
    assert!(clean(&kv).is_empty(), "{:?}", clean(&kv));
    let d: Vec<u64> = queued(&kv).iter().map(|(d, _)| *d).collect();

    // A span that is not the record's.
    let mut bad = kv.clone();
    bad.insert(keys::dq_by_file(f, d[0]), keys::dq_span(Some((0, BLK))));
    let p = clean(&bad);
    assert!(p.iter().any(|p| p.contains("queue index") && p.contains(&format!("data record {}", d[0]))), "{p:?}");

    // A record missing from the index.
    let mut bad = kv.clone();
    bad.remove(&keys::dq_by_file(f, d[1]));
    let p = clean(&bad);
    assert!(p.iter().any(|p| p.contains("missing from the queue index")), "{p:?}");

    // An index entry with no record, and one naming another file.
    let mut bad = kv.clone();
    bad.insert(keys::dq_by_file(f, 999_999), keys::dq_span(None));
    bad.insert(keys::dq_by_file(f + 1, d[1]), keys::dq_span(Some((10 * BLK, 11 * BLK))));
    let p = clean(&bad);
    assert!(p.iter().any(|p| p.contains("999999") && p.contains("not queued")), "{p:?}");
    assert!(p.iter().any(|p| p.contains(&format!("names file {}", f + 1))), "{p:?}");

    // An undecodable value.
    let mut bad = kv.clone();
    bad.insert(keys::dq_by_file(f, d[0]), vec![7, 7]);
    assert!(clean(&bad).iter().any(|p| p.contains("queue index")));
}

#[test]
fn span_values_round_trip() {
    for span in [None, Some((0, 1)), Some((4096, 8192)), Some((u64::MAX - 1, u64::MAX))] {
        let v = keys::dq_span(span);
        assert_eq!(keys::dq_span_decode(&v), Some(span));
    }
    let v = keys::dq_span(Some((4096, 8192)));
    assert!(keys::dq_span_touches(&v, 8191, 8192));
    assert!(keys::dq_span_touches(&v, 0, 4097));
    assert!(!keys::dq_span_touches(&v, 8192, 9000));
    assert!(!keys::dq_span_touches(&v, 0, 4096));
    assert!(keys::dq_span_touches(&keys::dq_span(None), 0, 1));
    for unknown in [&[][..], &[1, 2, 3][..], &[9][..]] {
        assert!(keys::dq_span_touches(unknown, 0, 1));
        assert_eq!(keys::dq_span_decode(unknown), None);
    }
}
