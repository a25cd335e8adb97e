//! The node's "may have extended attributes" marker: listings read EAs only
//! of nodes marked with them, `SetEas` keeps the marker exact, and node
//! records stored before the marker existed still read (as "may have EAs").

use std::collections::BTreeMap;

use duet_cluster::kv::Txn;
use duet_cluster::machine::{apply, execute, execute_read_only};
use duet_cluster::records::{encode, Command, Node};
use duet_cluster::{fsck, keys};
use duet_fs::{
    Attrs, Batch, CreateKind, Credentials, DirEntry, IfExists, NodeId, ObjRef, Op, OpOutput, OpResult, SetAttrs,
    ROOT_ID,
};
use serde::{Deserialize, Serialize};

type Kv = BTreeMap<Vec<u8>, Vec<u8>>;

fn commit(kv: &mut Kv, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
    for (k, v) in writes {
        match v {
            Some(v) => kv.insert(k, v),
            None => kv.remove(&k),
        };
    }
}

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

fn create(kv: &mut Kv, dir: NodeId, name: &str, kind: CreateKind) -> NodeId {
    let r = run(
        kv,
        vec![Op::Create {
            dir: ObjRef::Id(dir),
            name: name.into(),
            kind,
            attrs: SetAttrs { mode: Some(0o755), ..Default::default() },
            if_exists: IfExists::Fail,
        }],
    );
    r[0].as_ref().unwrap().attrs().unwrap().id
}

fn set_eas(kv: &mut Kv, id: NodeId, eas: &[(&str, &str)]) {
    let eas = eas.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect();
    let r = run(kv, vec![Op::SetEas { obj: ObjRef::Id(id), eas }]);
    assert!(r[0].is_ok(), "{:?}", r[0]);
}

/// READDIR with attributes, and the store reads it cost.
fn list(kv: &Kv, dir: NodeId) -> (Vec<DirEntry>, u64) {
    let mut b = Batch::new(Credentials::root(), 2_000);
    b.push(Op::ReadDir { dir: ObjRef::Id(dir), after: None, max_entries: 1000, with_attrs: true });
    let (out, reads) = execute_read_only(kv, &b);
    match out.results.into_iter().next() {
        Some(Ok(OpOutput::Dir { entries, eof: true, .. })) => (entries, reads),
        other => panic!("{other:?}"),
    }
}

fn eas_of(entries: &[DirEntry], name: &str) -> Vec<(String, Vec<u8>)> {
    entries.iter().find(|e| e.name == name).unwrap().eas.clone()
}

fn node(kv: &Kv, id: NodeId) -> Node {
    Node::decode(&kv[&keys::node(id)]).unwrap()
}

#[test]
fn listing_reads_eas_only_of_nodes_marked_with_them() {
    let mut kv = init();
    let d = create(&mut kv, ROOT_ID, "d", CreateKind::Directory);
    for n in ["a", "b", "c"] {
        create(&mut kv, d, n, CreateKind::File);
    }
    assert!(!node(&kv, d).may_have_eas, "a new node has no EAs");
    // No EAs anywhere: the directory, its edge scan, one read per node.
    let (entries, reads) = list(&kv, d);
    assert_eq!(entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
    assert!(entries.iter().all(|e| e.eas.is_empty() && e.attrs.is_some()));
    assert_eq!(reads, 1 + 1 + 3);

    // EAs on b: marked, listed, and read for b alone.
    let b = entries[1].id;
    set_eas(&mut kv, b, &[("User.One", "1"), ("two", "22")]);
    assert!(node(&kv, b).may_have_eas);
    let (entries, reads) = list(&kv, d);
    assert_eq!(eas_of(&entries, "b"), vec![("TWO".to_string(), b"22".to_vec()), ("USER.ONE".to_string(), b"1".to_vec())]);
    assert!(eas_of(&entries, "a").is_empty() && eas_of(&entries, "c").is_empty());
    assert_eq!(reads, 1 + 1 + 3 + 1);

    // Removing one keeps the marker; removing the last clears it.
    set_eas(&mut kv, b, &[("two", "")]);
    assert!(node(&kv, b).may_have_eas);
    assert_eq!(eas_of(&list(&kv, d).0, "b"), vec![("USER.ONE".to_string(), b"1".to_vec())]);
    set_eas(&mut kv, b, &[("user.one", "")]);
    assert!(!node(&kv, b).may_have_eas);
    let (entries, reads) = list(&kv, d);
    assert!(eas_of(&entries, "b").is_empty());
    assert_eq!(reads, 1 + 1 + 3);
    // A refused change (a bad name) leaves EAs and marker as they were.
    set_eas(&mut kv, b, &[("k", "v")]);
    let r = run(&mut kv, vec![Op::SetEas { obj: ObjRef::Id(b), eas: vec![(String::new(), b"x".to_vec())] }]);
    assert!(r[0].is_err());
    assert!(node(&kv, b).may_have_eas);
    assert_eq!(eas_of(&list(&kv, d).0, "b"), vec![("K".to_string(), b"v".to_vec())]);
    assert!(fsck::check(&kv, &[]).problems.is_empty());
}

/// A node record as versions before the marker wrote it.
#[derive(Serialize, Deserialize)]
struct OldNode {
    attrs: Attrs,
    parent: NodeId,
    target: Option<String>,
    chunked: bool,
}

#[test]
fn nodes_stored_before_the_marker_still_read_with_their_eas() {
    let mut kv = init();
    let d = create(&mut kv, ROOT_ID, "d", CreateKind::Directory);
    let f = create(&mut kv, d, "old", CreateKind::File);
    let g = create(&mut kv, d, "old-bare", CreateKind::File);
    // Rewrite both in the old layout; f has an EA record (as an old SetEas
    // left it), g none.
    for id in [f, g] {
        let n = node(&kv, id);
        let old = OldNode { attrs: n.attrs, parent: n.parent, target: n.target, chunked: n.chunked };
        kv.insert(keys::node(id), encode(&old).unwrap());
    }
    kv.insert(keys::ea(f, "LEGACY"), b"kept".to_vec());
    assert!(node(&kv, f).may_have_eas && node(&kv, g).may_have_eas, "old nodes may have EAs");
    // ... and an older binary reads a new record (ignoring the marker).
    let new = encode(&node(&kv, d)).unwrap();
    assert_eq!(duet_cluster::records::decode::<OldNode>(&new).map(|o| o.attrs.id), Some(d));
    assert_eq!(node(&kv, f).attrs.id, f);

    let (entries, reads) = list(&kv, d);
    assert_eq!(eas_of(&entries, "old"), vec![("LEGACY".to_string(), b"kept".to_vec())]);
    assert!(eas_of(&entries, "old-bare").is_empty());
    assert_eq!(entries.iter().find(|e| e.name == "old").unwrap().attrs.as_ref().unwrap().id, f);
    assert_eq!(reads, 1 + 1 + 2 + 2, "both old nodes are scanned for EAs");
    let r = run(&mut kv, vec![Op::GetEas { obj: ObjRef::Id(f) }]);
    match &r[0] {
        Ok(OpOutput::Eas { eas, .. }) => assert_eq!(eas, &vec![("LEGACY".to_string(), b"kept".to_vec())]),
        other => panic!("{other:?}"),
    }
    assert!(fsck::check(&kv, &[]).problems.is_empty());

    // The next SetEas writes the new layout with an exact marker.
    set_eas(&mut kv, f, &[("legacy", "")]);
    set_eas(&mut kv, g, &[("new", "1")]);
    assert!(!node(&kv, f).may_have_eas);
    assert!(node(&kv, g).may_have_eas);
    let (entries, reads) = list(&kv, d);
    assert!(eas_of(&entries, "old").is_empty());
    assert_eq!(eas_of(&entries, "old-bare"), vec![("NEW".to_string(), b"1".to_vec())]);
    assert_eq!(reads, 1 + 1 + 2 + 1);

    // Removing an old node with EAs deletes them (fsck: nothing left).
    let h = create(&mut kv, d, "old-gone", CreateKind::File);
    let n = node(&kv, h);
    kv.insert(keys::node(h), encode(&OldNode { attrs: n.attrs, parent: n.parent, target: n.target, chunked: n.chunked }).unwrap());
    kv.insert(keys::ea(h, "X"), b"y".to_vec());
    let r = run(&mut kv, vec![Op::Remove { dir: ObjRef::Id(d), name: "old-gone".into(), dir_only: Some(false) }]);
    assert!(r[0].is_ok());
    assert!(!kv.keys().any(|k| k.starts_with(&keys::ea_prefix(h))));
    assert!(fsck::check(&kv, &[]).problems.is_empty());
}

#[test]
fn fsck_reports_eas_of_a_node_marked_without_them() {
    let mut kv = init();
    let f = create(&mut kv, ROOT_ID, "f", CreateKind::File);
    kv.insert(keys::ea(f, "STRAY"), b"v".to_vec());
    let problems = fsck::check(&kv, &[]).problems;
    assert!(problems.iter().any(|p| p.contains("marked as having none")), "{problems:?}");
}

/// The children's nodes come from one range scan when their ids are dense
/// and from one MultiGet otherwise: either way each entry carries its own
/// node's attributes (as GETATTR reports them), hard links included.
#[test]
fn listing_reads_dense_and_sparse_children_alike() {
    let mut kv = init();
    let dirs: Vec<NodeId> = ["dense", "s1", "s2", "s3"].iter().map(|n| create(&mut kv, ROOT_ID, n, CreateKind::Directory)).collect();
    for i in 0..20 {
        create(&mut kv, dirs[0], &format!("f{i:02}"), CreateKind::File);
    }
    // Interleaved: each of s1..s3 gets every third id.
    for i in 0..12 {
        for d in &dirs[1..] {
            create(&mut kv, *d, &format!("g{i:02}"), CreateKind::File);
        }
    }
    // A hard link in the dense directory to one of its own files.
    let f03 = list(&kv, dirs[0]).0[3].id;
    let r = run(&mut kv, vec![Op::Link { obj: ObjRef::Id(f03), dir: ObjRef::Id(dirs[0]), name: "link".into() }]);
    assert!(r[0].is_ok(), "{:?}", r[0]);
    set_eas(&mut kv, f03, &[("k", "v")]);
    let getattr = |kv: &mut Kv, id: NodeId| match &run(kv, vec![Op::GetAttr { obj: ObjRef::Id(id) }])[0] {
        Ok(o) => o.attrs().unwrap().clone(),
        other => panic!("{other:?}"),
    };
    let (entries, reads) = list(&kv, dirs[0]);
    assert_eq!(entries.len(), 21);
    assert_eq!(reads, 1 + 1 + 1 + 2, "dense: one scan for the nodes (and f03's EAs, listed twice)");
    for e in &entries {
        assert_eq!(e.attrs.as_ref().unwrap(), &getattr(&mut kv, e.id), "{}", e.name);
    }
    assert_eq!(eas_of(&entries, "link"), eas_of(&entries, "f03"));
    assert_eq!(eas_of(&entries, "link"), vec![("K".to_string(), b"v".to_vec())]);
    let (entries, reads) = list(&kv, dirs[2]);
    assert_eq!(entries.len(), 12);
    assert_eq!(reads, 1 + 1 + 12, "sparse: one lookup per node");
    for e in &entries {
        assert_eq!(e.attrs.as_ref().unwrap(), &getattr(&mut kv, e.id), "{}", e.name);
    }
}
