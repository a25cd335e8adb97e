//! Destage progress is node-local: recording it is a synced write of this
//! node's store, never a raft proposal, and it survives a restart.

use std::sync::atomic::Ordering;

use duet_cluster::keys;
use duet_cluster::records::{Command, DataOp};
use duet_cluster_store::{Query, QueryAnswer, Store};
use duet_fs::{Batch, CreateKind, Credentials, IfExists, ObjRef, Op, OpOutput, SetAttrs, WriteData, ROOT_ID};

fn queue(s: &Store) -> Vec<(u64, DataOp)> {
    match s.handle().query_blocking(Query::DataQueue { after: 0, limit: 100 }).unwrap() {
        QueryAnswer::DataQueue(q) => q.into_iter().map(|(d, r)| (d, r.op)).collect(),
        _ => unreachable!(),
    }
}

fn raft(s: &Store) -> duet_cluster_store::RaftStatus {
    match s.handle().query_blocking(Query::RaftStatus).unwrap() {
        QueryAnswer::Raft(r) => r,
        _ => unreachable!(),
    }
}

#[test]
fn destage_progress_is_a_local_write_not_a_proposal() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(tmp.path(), 1).unwrap();
    let h = s.handle();
    h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    // A write too large to live inline queues a data record.
    let mut b = Batch::new(Credentials::root(), 1_000);
    let f = b.push(Op::Create {
        dir: ObjRef::Id(ROOT_ID),
        name: "big".into(),
        kind: CreateKind::File,
        attrs: SetAttrs { mode: Some(0o644), ..Default::default() },
        if_exists: IfExists::Fail,
    });
    b.push(Op::Write { obj: f, offset: 0, data: WriteData::Bytes(vec![7u8; 8192]), append: false });
    let out = h.batch_blocking(b).unwrap();
    assert!(matches!(out.applied.results[0], Ok(OpOutput::Object { .. })));
    let q = queue(&s);
    assert!(q.iter().any(|(_, op)| matches!(op, DataOp::WriteInline { data, .. } if data.len() == 8192)), "{q:?}");
    let upto = q.last().unwrap().0;

    let before = raft(&s);
    let proposals = h.counters().proposals.load(Ordering::SeqCst);
    h.destaged_blocking(upto, vec![]).unwrap();
    let after = raft(&s);
    assert_eq!(h.counters().proposals.load(Ordering::SeqCst), proposals, "no proposal");
    assert_eq!((after.commit_index, after.applied_index), (before.commit_index, before.applied_index), "no raft entry");
    assert!(queue(&s).is_empty());
    s.shutdown();

    // Durable, and recorded as this node's progress.
    let db = rocksdb::DB::open_default(tmp.path()).unwrap();
    let v = db.get(keys::local("destaged_upto")).unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(v.as_slice().try_into().unwrap()), upto);
    drop(db);
    let s = Store::open(tmp.path(), 1).unwrap();
    assert!(queue(&s).is_empty());
    // Progress never goes back.
    s.handle().destaged_blocking(0, vec![]).unwrap();
    s.shutdown();
    let db = rocksdb::DB::open_default(tmp.path()).unwrap();
    let v = db.get(keys::local("destaged_upto")).unwrap().unwrap();
    assert_eq!(u64::from_be_bytes(v.as_slice().try_into().unwrap()), upto);
}
