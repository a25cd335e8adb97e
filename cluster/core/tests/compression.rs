//! FILE_ATTRIBUTE_COMPRESSED (`dos::COMPRESSED`, MS-FSCC 2.6) in the state
//! machine: only a `dos::ONLY_COMPRESSED` SetAttr (FSCTL_SET_COMPRESSION)
//! changes it, attribute writes keep it; new files and directories inherit
//! it from their directory unless the create carries `dos::NO_COMPRESSION`
//! (FILE_NO_COMPRESSION, MS-FSA 2.1.5.1.2.1); a change of the bit of a
//! chunked file queues exactly one `DataOp::Recompress`, an inline file or a
//! directory queues nothing; renames, links and clones keep each file's bit.

mod common;

use common::*;
use duet_cluster::command::{decode_command, encode_command};
use duet_cluster::kv::Txn;
use duet_cluster::machine::{apply, execute};
use duet_cluster::records::{Command, DataOp};
use duet_fs::dos;
use duet_fs::{
    Attrs, Batch, CreateKind, Credentials, IfExists, NodeId, ObjRef, Op, OpOutput, SetAttrs, INLINE_MAX, ROOT_ID,
};

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

fn attrs(kv: &Kv, id: NodeId) -> Attrs {
    match ok(read_only(kv, vec![Op::GetAttr { obj: ObjRef::Id(id) }]).results.remove(0)) {
        OpOutput::Attrs { attrs, .. } => attrs,
        other => panic!("{other:?}"),
    }
}

fn compressed(kv: &Kv, id: NodeId) -> bool {
    attrs(kv, id).dos_attrs & dos::COMPRESSED != 0
}

/// A SetAttr of `dos_attrs` on `id`; the data ops it queued.
fn set_dos(kv: &mut Kv, id: NodeId, dos_attrs: u32) -> Vec<DataOp> {
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.ops = vec![Op::SetAttr { obj: ObjRef::Id(id), attrs: SetAttrs { dos_attrs: Some(dos_attrs), ..Default::default() } }];
    let out = run_batch(kv, &b);
    assert!(out.results[0].is_ok(), "{:?}", out.results[0]);
    out.queued.into_iter().map(|(_, r)| {
        assert_eq!(r.file, id);
        r.op
    }).collect()
}

/// FSCTL_SET_COMPRESSION: set (`on`) or clear the bit.
fn set_compression(kv: &mut Kv, id: NodeId, on: bool) -> Vec<DataOp> {
    set_dos(kv, id, dos::ONLY_COMPRESSED | if on { dos::COMPRESSED } else { 0 })
}

fn create_with(kv: &mut Kv, dir: NodeId, name: &str, kind: CreateKind, dos_attrs: Option<u32>) -> NodeId {
    let r = run(
        kv,
        vec![Op::Create {
            dir: ObjRef::Id(dir),
            name: name.into(),
            kind,
            attrs: SetAttrs { dos_attrs, ..Default::default() },
            if_exists: IfExists::Fail,
        }],
    );
    r[0].as_ref().unwrap_or_else(|e| panic!("create {name}: {e:?}")).attrs().unwrap().id
}

fn recompresses(ops: &[DataOp]) -> usize {
    ops.iter().filter(|o| matches!(o, DataOp::Recompress)).count()
}

#[test]
fn new_files_and_directories_inherit_unless_no_compression() {
    let mut kv = init();
    let d = create(&mut kv, ROOT_ID, "d", CreateKind::Directory);
    assert!(!compressed(&kv, d));
    // A directory keeps the bit and queues nothing.
    assert_eq!(set_compression(&mut kv, d, true), vec![]);
    assert!(compressed(&kv, d));
    // SMB-like (attributes given) and NFS-like (none given) creates inherit.
    let f = create_with(&mut kv, d, "f", CreateKind::File, Some(dos::ARCHIVE));
    let g = create(&mut kv, d, "g", CreateKind::File);
    let sub = create(&mut kv, d, "sub", CreateKind::Directory);
    assert!(compressed(&kv, f) && compressed(&kv, g) && compressed(&kv, sub));
    assert_eq!(attrs(&kv, f).dos_attrs, dos::ARCHIVE | dos::COMPRESSED);
    // ... and so on down: the subdirectory passes it on.
    let deep = create(&mut kv, sub, "deep", CreateKind::File);
    assert!(compressed(&kv, deep));
    // Neither a symlink nor a special file takes it.
    let l = create(&mut kv, d, "l", CreateKind::Symlink { target: "f".into() });
    let p = create(&mut kv, d, "p", CreateKind::Fifo);
    assert!(!compressed(&kv, l) && !compressed(&kv, p));
    // FILE_NO_COMPRESSION: neither a file nor a directory inherits; the
    // marker itself is never stored.
    let n = create_with(&mut kv, d, "n", CreateKind::File, Some(dos::NO_COMPRESSION | dos::ARCHIVE));
    let nd = create_with(&mut kv, d, "nd", CreateKind::Directory, Some(dos::NO_COMPRESSION));
    assert_eq!(attrs(&kv, n).dos_attrs, dos::ARCHIVE);
    assert_eq!(attrs(&kv, nd).dos_attrs, 0);
    // Clearing the directory's bit keeps its children's; new ones no longer
    // inherit.
    assert_eq!(set_compression(&mut kv, d, false), vec![]);
    assert!(!compressed(&kv, d) && compressed(&kv, f) && compressed(&kv, sub));
    let h = create(&mut kv, d, "h", CreateKind::File);
    assert!(!compressed(&kv, h));
    // Outside a compressed directory nothing inherits, NO_COMPRESSION or not.
    let r = create_with(&mut kv, ROOT_ID, "r", CreateKind::File, Some(dos::NO_COMPRESSION));
    assert!(!compressed(&kv, r));
}

#[test]
fn attribute_writes_neither_set_nor_clear_it() {
    let mut kv = init();
    // A create asking for COMPRESSED does not get it (Windows does not keep
    // it either).
    let f = create_with(&mut kv, ROOT_ID, "f", CreateKind::File, Some(dos::COMPRESSED | dos::ARCHIVE));
    assert_eq!(attrs(&kv, f).dos_attrs, dos::ARCHIVE);
    // Nor a SetAttr of the attributes (SMB FileBasicInformation).
    assert_eq!(set_dos(&mut kv, f, dos::COMPRESSED | dos::HIDDEN), vec![]);
    assert_eq!(attrs(&kv, f).dos_attrs, dos::HIDDEN);
    let d = create(&mut kv, ROOT_ID, "d", CreateKind::Directory);
    set_dos(&mut kv, d, dos::COMPRESSED);
    assert!(!compressed(&kv, d));
    // Set through the FSCTL's marker, an attribute write keeps it.
    set_compression(&mut kv, f, true);
    assert_eq!(set_dos(&mut kv, f, dos::READONLY), vec![]);
    assert_eq!(attrs(&kv, f).dos_attrs, dos::READONLY | dos::COMPRESSED);
    assert_eq!(attrs(&kv, f).smb_attributes(), dos::READONLY | dos::COMPRESSED);
    // An overwrite (create of an existing name, truncating) with new
    // attributes keeps it too.
    let r = run(
        &mut kv,
        vec![Op::Create {
            dir: ObjRef::Id(ROOT_ID),
            name: "f".into(),
            kind: CreateKind::File,
            attrs: SetAttrs { dos_attrs: Some(dos::ARCHIVE | dos::NO_COMPRESSION), ..Default::default() },
            if_exists: IfExists::Truncate,
        }],
    );
    assert!(r[0].is_ok(), "{:?}", r[0]);
    assert_eq!(attrs(&kv, f).dos_attrs, dos::ARCHIVE | dos::COMPRESSED);
    // The sparse marker leaves it alone, and it leaves SPARSE_FILE alone.
    set_dos(&mut kv, f, dos::ONLY_SPARSE | dos::SPARSE_FILE);
    assert_eq!(attrs(&kv, f).dos_attrs, dos::ARCHIVE | dos::COMPRESSED | dos::SPARSE_FILE);
    set_compression(&mut kv, f, false);
    assert_eq!(attrs(&kv, f).dos_attrs, dos::ARCHIVE | dos::SPARSE_FILE);
}

#[test]
fn a_change_queues_recompress_only_for_a_chunked_file() {
    let mut kv = init();
    let mut disk = Disk::default();
    // Inline: the bit changes, nothing is queued.
    let small = create(&mut kv, ROOT_ID, "small", CreateKind::File);
    write(&mut kv, small, 0, vec![5; 100]);
    assert_eq!(set_compression(&mut kv, small, true), vec![]);
    assert!(compressed(&kv, small));
    assert_eq!(set_compression(&mut kv, small, false), vec![]);
    // Empty: nothing either.
    let empty = create(&mut kv, ROOT_ID, "empty", CreateKind::File);
    assert_eq!(set_compression(&mut kv, empty, true), vec![]);
    // Chunked: one Recompress per change of the bit, none when it stays.
    let big = create(&mut kv, ROOT_ID, "big", CreateKind::File);
    let data = pattern(7, 3 * INLINE_MAX as usize);
    write(&mut kv, big, 0, data.clone());
    disk.destage(&mut kv);
    assert_eq!(set_compression(&mut kv, big, true), vec![DataOp::Recompress]);
    assert!(compressed(&kv, big));
    assert_eq!(recompresses(&set_compression(&mut kv, big, true)), 0, "already compressed");
    assert_eq!(recompresses(&set_dos(&mut kv, big, dos::HIDDEN)), 0, "attribute write");
    assert_eq!(set_compression(&mut kv, big, false), vec![DataOp::Recompress]);
    assert_eq!(recompresses(&set_compression(&mut kv, big, false)), 0, "already plain");
    assert_eq!(set_compression(&mut kv, big, true), vec![DataOp::Recompress]);
    // The record destages and changes no byte.
    disk.destage(&mut kv);
    assert_eq!(disk.read(big, 0, data.len() as u64), data);
    clean(&kv, &disk);
    // An inline file that grows past the inline limit afterwards is chunked
    // with its bit already set: no Recompress is needed (the destager
    // writes the new chunks in the file's format).
    write(&mut kv, small, 0, vec![6; 2 * INLINE_MAX as usize]);
    disk.destage(&mut kv);
    clean(&kv, &disk);
}

#[test]
fn renames_links_and_clones_keep_each_files_bit() {
    let mut kv = init();
    let cdir = create(&mut kv, ROOT_ID, "c", CreateKind::Directory);
    set_compression(&mut kv, cdir, true);
    let plain = create(&mut kv, ROOT_ID, "p", CreateKind::Directory);
    let a = create(&mut kv, cdir, "a", CreateKind::File);
    let b = create(&mut kv, plain, "b", CreateKind::File);
    assert!(compressed(&kv, a) && !compressed(&kv, b));
    let rn = |kv: &mut Kv, sd: NodeId, sn: &str, dd: NodeId, dn: &str| {
        let r = run(
            kv,
            vec![Op::Rename {
                src_dir: ObjRef::Id(sd),
                src_name: sn.into(),
                dst_dir: ObjRef::Id(dd),
                dst_name: dn.into(),
                replace: false,
            }],
        );
        assert!(r[0].is_ok(), "{:?}", r[0]);
    };
    rn(&mut kv, cdir, "a", plain, "a");
    rn(&mut kv, plain, "b", cdir, "b");
    assert!(compressed(&kv, a) && !compressed(&kv, b));
    let r = run(&mut kv, vec![Op::Link { obj: ObjRef::Id(b), dir: ObjRef::Id(cdir), name: "b2".into() }]);
    assert!(r[0].is_ok(), "{:?}", r[0]);
    assert!(!compressed(&kv, b));
    // A clone of a plain source into a compressed target (and back) keeps
    // each side's bit.
    write(&mut kv, a, 0, pattern(1, 3 * INLINE_MAX as usize));
    write(&mut kv, b, 0, vec![0; 3 * INLINE_MAX as usize]);
    for (src, dst) in [(b, a), (a, b)] {
        let r = run(
            &mut kv,
            vec![Op::Clone {
                src: ObjRef::Id(src),
                src_offset: 0,
                dst: ObjRef::Id(dst),
                dst_offset: 0,
                len: INLINE_MAX,
                extend: false,
            }],
        );
        assert!(r[0].is_ok(), "{:?}", r[0]);
    }
    assert!(compressed(&kv, a) && !compressed(&kv, b));
}

#[test]
fn old_commands_apply_as_before() {
    // A create with no marker in a directory that is not compressed (all a
    // log written before this change could hold: nothing could set the
    // bit) gives exactly the attributes it gave before.
    let mut kv = init();
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.ops = vec![Op::Create {
        dir: ObjRef::Id(ROOT_ID),
        name: "f".into(),
        kind: CreateKind::File,
        attrs: SetAttrs { dos_attrs: Some(dos::ARCHIVE | dos::HIDDEN), ..Default::default() },
        if_exists: IfExists::Fail,
    }];
    let writes = {
        let mut t = Txn::new(&kv);
        let out = execute(&mut t, &b);
        assert!(out.results[0].is_ok());
        t.into_writes()
    };
    commit(&mut kv, writes);
    let f = lookup(&mut kv, ROOT_ID, "f").unwrap();
    assert_eq!(f.dos_attrs, dos::ARCHIVE | dos::HIDDEN);
}

#[test]
fn the_markers_travel_in_the_log() {
    // The create's NO_COMPRESSION and the FSCTL's ONLY_COMPRESSED ride in
    // `SetAttrs::dos_attrs` (a u32 the command codec carries whole): a
    // command decodes to itself, so a follower applies what the leader did.
    let mut b = Batch::new(Credentials::user(1000, 100), 5);
    b.ops = vec![
        Op::Create {
            dir: ObjRef::Id(ROOT_ID),
            name: "n".into(),
            kind: CreateKind::Directory,
            attrs: SetAttrs { dos_attrs: Some(dos::NO_COMPRESSION | dos::HIDDEN), ..Default::default() },
            if_exists: IfExists::Fail,
        },
        Op::SetAttr {
            obj: ObjRef::Id(9),
            attrs: SetAttrs { dos_attrs: Some(dos::ONLY_COMPRESSED | dos::COMPRESSED), ..Default::default() },
        },
    ];
    let cmd = Command::Batch(b);
    assert_eq!(decode_command(&encode_command(&cmd)).unwrap(), cmd);
}
