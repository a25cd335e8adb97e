//! What the state-machine tests of data sharing have in common
//! (`reflink.rs`, `layers.rs`, `clones.rs`): the in-memory store, a model of
//! the chunk store as the data path keeps it, and helpers that run batches
//! and admin commands through the machine.

#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use duet_cluster::keys;
use duet_cluster::kv::Txn;
use duet_cluster::machine::{apply, drop_destaged, execute, AdminError, Applied};
use duet_cluster::records::{decode, Command, DataOp, DataRecord, ShareRecord};
use duet_cluster::fsck;
use duet_fs::{
    Attrs, Batch, CreateKind, Credentials, DirEntry, FsError, IfExists, NodeId, ObjRef, Op, OpOutput, OpResult, SetAttrs,
    WriteData, CHUNK_SIZE,
};

/// The metadata store: RocksDB's keys and values, in memory.
pub type Kv = BTreeMap<Vec<u8>, Vec<u8>>;
const CS: u64 = CHUNK_SIZE;

/// Writes a transaction's writes into the in-memory store; how many.
pub fn commit(kv: &mut Kv, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> usize {
    let n = writes.len();
    for (k, v) in writes {
        match v {
            Some(v) => kv.insert(k, v),
            None => kv.remove(&k),
        };
    }
    n
}

/// The chunk store as the data path keeps it: a chunk file per (file,
/// index), shared chunks one inode (an `Rc`) under several names.
#[derive(Default)]
pub struct Disk {
    pub chunks: HashMap<(NodeId, u64), Rc<RefCell<Vec<u8>>>>,
}

impl Disk {
    pub fn read(&self, file: NodeId, offset: u64, len: u64) -> Vec<u8> {
        let mut out = vec![0u8; len as usize];
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let co = (pos % CS) as usize;
            let n = ((CS - pos % CS).min(end - pos)) as usize;
            if let Some(c) = self.chunks.get(&(file, pos / CS)) {
                let v = c.borrow();
                if co < v.len() {
                    let m = n.min(v.len() - co);
                    let at = (pos - offset) as usize;
                    out[at..at + m].copy_from_slice(&v[co..co + m]);
                }
            }
            pos += n as u64;
        }
        out
    }

    pub fn own(&mut self, file: NodeId, idx: u64) {
        if let Some(c) = self.chunks.get(&(file, idx)) {
            if Rc::strong_count(c) > 1 {
                let copy = c.borrow().clone();
                self.chunks.insert((file, idx), Rc::new(RefCell::new(copy)));
            }
        }
    }

    /// Writes in place: whatever else links the chunk sees it (the state
    /// machine must have unshared it first).
    pub fn write(&mut self, file: NodeId, offset: u64, data: &[u8]) {
        let mut pos = offset;
        let end = offset + data.len() as u64;
        while pos < end {
            let co = (pos % CS) as usize;
            let n = ((CS - pos % CS).min(end - pos)) as usize;
            let c = self.chunks.entry((file, pos / CS)).or_default();
            let mut v = c.borrow_mut();
            if v.len() < co + n {
                v.resize(co + n, 0);
            }
            let at = (pos - offset) as usize;
            v[co..co + n].copy_from_slice(&data[at..at + n]);
            pos += n as u64;
        }
    }

    pub fn apply(&mut self, rec: &DataRecord) {
        let f = rec.file;
        match &rec.op {
            DataOp::WriteInline { offset, data } => self.write(f, *offset, data),
            DataOp::Truncate { size } => {
                let keep = size.div_ceil(CS);
                self.chunks.retain(|(g, i), _| *g != f || *i < keep);
                if size % CS != 0 {
                    if let Some(c) = self.chunks.get(&(f, size / CS)) {
                        c.borrow_mut().truncate((size % CS) as usize);
                    }
                }
            }
            DataOp::Reclaim => self.chunks.retain(|(g, _), _| *g != f),
            DataOp::Zero { offset, len } => {
                let end = offset + len;
                let mut pos = *offset;
                while pos < end {
                    let idx = pos / CS;
                    let n = (CS - pos % CS).min(end - pos);
                    if self.chunks.contains_key(&(f, idx)) {
                        if n == CS {
                            self.chunks.remove(&(f, idx));
                        } else {
                            self.write(f, pos, &vec![0u8; n as usize]);
                        }
                    }
                    pos += n;
                }
            }
            DataOp::Recompress => {}
            DataOp::Unshare { chunks } => {
                for &i in chunks {
                    self.own(f, i);
                }
            }
            DataOp::CloneFrom { src, share, copy } => {
                let bytes: Vec<Vec<u8>> = copy.iter().map(|&(so, _, n)| self.read(*src, so, n)).collect();
                let links: Vec<Option<Rc<RefCell<Vec<u8>>>>> =
                    share.iter().map(|&(i, _)| self.chunks.get(&(*src, i)).cloned()).collect();
                for (&(_, j), l) in share.iter().zip(links) {
                    match l {
                        Some(c) => self.chunks.insert((f, j), c),
                        None => self.chunks.remove(&(f, j)),
                    };
                }
                for (&(_, at, n), b) in copy.iter().zip(bytes) {
                    for idx in at / CS..=(at + n - 1) / CS {
                        self.own(f, idx);
                    }
                    self.write(f, at, &b);
                }
            }
            other => panic!("unexpected record {other:?}"),
        }
    }

    /// Applies every queued record in order and drops them, as a destage
    /// round does (a cross-file record in a round of its own changes no
    /// outcome here: the model applies one record at a time).
    pub fn destage(&mut self, kv: &mut Kv) {
        let recs: Vec<(u64, DataRecord)> = kv
            .range(keys::dq(0)..keys::dq(u64::MAX))
            .map(|(k, v)| (keys::u64_at(k, 1).unwrap(), decode::<DataRecord>(v).unwrap()))
            .collect();
        let Some(upto) = recs.last().map(|r| r.0) else { return };
        let mut reclaimed = Vec::new();
        for (_, rec) in &recs {
            self.apply(rec);
            if rec.op == DataOp::Reclaim {
                reclaimed.push(rec.file);
            }
        }
        let writes = {
            let mut t = Txn::new(&*kv);
            drop_destaged(&mut t, 0, upto, &reclaimed);
            t.into_writes()
        };
        commit(kv, writes);
    }

    pub fn files(&self) -> Vec<(NodeId, u64)> {
        self.chunks.keys().copied().collect()
    }

    pub fn inodes(&self) -> usize {
        let mut seen: Vec<*const RefCell<Vec<u8>>> = self.chunks.values().map(Rc::as_ptr).collect();
        seen.sort();
        seen.dedup();
        seen.len()
    }
}

// ---- machine helpers shared by `layers.rs` and `clones.rs` ----

pub fn run_batch(kv: &mut Kv, b: &Batch) -> Applied {
    let (out, writes) = {
        let mut t = Txn::new(&*kv);
        let out = execute(&mut t, b);
        (out, t.into_writes())
    };
    commit(kv, writes);
    out
}

pub fn run(kv: &mut Kv, ops: Vec<Op>) -> Vec<OpResult> {
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.ops = ops;
    run_batch(kv, &b).results
}

/// A read-only batch: its writes are thrown away (as the store does).
pub fn read_only(kv: &Kv, ops: Vec<Op>) -> Applied {
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.ops = ops;
    let mut t = Txn::new(kv);
    execute(&mut t, &b)
}

pub fn admin(kv: &mut Kv, cmd: Command) -> (Result<(), AdminError>, usize) {
    let (out, writes) = {
        let mut t = Txn::new(&*kv);
        let out = apply(&mut t, &cmd);
        (out, t.into_writes())
    };
    let r = out.admin.expect("an admin outcome");
    // As the store does: a refused command's writes are applied too (the
    // callers check that it wrote nothing).
    let n = commit(kv, writes);
    (r, n)
}

pub fn share(name: &str, path: &str) -> ShareRecord {
    ShareRecord {
        name: name.into(),
        path: path.into(),
        smb: true,
        nfs: true,
        read_only: false,
        guest_ok: false,
        nfs_clients: vec![],
        root_squash: false,
        append_extension: false,
        durability: Default::default(),
    }
}

pub fn lookup(kv: &mut Kv, dir: NodeId, name: &str) -> Result<Attrs, FsError> {
    match run(kv, vec![Op::Lookup { dir: ObjRef::Id(dir), name: name.into() }]).remove(0)? {
        OpOutput::Object { attrs, .. } => Ok(attrs),
        other => panic!("{other:?}"),
    }
}

pub fn create(kv: &mut Kv, dir: NodeId, name: &str, kind: CreateKind) -> NodeId {
    let r = run(
        kv,
        vec![Op::Create { dir: ObjRef::Id(dir), name: name.into(), kind, attrs: SetAttrs::default(), if_exists: IfExists::Fail }],
    );
    r[0].as_ref().unwrap_or_else(|e| panic!("create {name}: {e:?}")).attrs().unwrap().id
}

pub fn write(kv: &mut Kv, id: NodeId, offset: u64, data: Vec<u8>) {
    let r = run(kv, vec![Op::Write { obj: ObjRef::Id(id), offset, data: WriteData::Bytes(data), append: false }]);
    assert!(r[0].is_ok(), "{:?}", r[0]);
}

pub fn ok(r: OpResult) -> OpOutput {
    r.unwrap_or_else(|e| panic!("{e:?}"))
}

pub fn clean(kv: &Kv, disk: &Disk) {
    let r = fsck::check(kv, &disk.files());
    assert!(r.problems.is_empty(), "fsck: {:?}", r.problems);
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn names(entries: &[DirEntry]) -> Vec<String> {
    entries.iter().map(|e| e.name.clone()).collect()
}

/// A splitmix64 step.
pub fn next(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}


/// Runs `ops` as user `uid` (gid the same).
pub fn run_as_uid(kv: &mut Kv, uid: u32, ops: Vec<Op>) -> Vec<OpResult> {
    let mut b = Batch::new(Credentials { uid, gid: uid, groups: Vec::new() }, 1_000);
    b.ops = ops;
    run_batch(kv, &b).results
}

/// A DACL as `Op::SetAcl` takes it: denying `uid` READ_DATA, everyone
/// else allowed everything.
pub fn deny_read_acl(uid: u32) -> (u16, Vec<u8>) {
    use duet_fs::acl::{rights, Ace, Acl, Sid};
    let a = Acl { aces: vec![Ace::deny(Sid::unix_user(uid), rights::READ_DATA, 0), Ace::allow(Sid::everyone(), rights::FILE_ALL_ACCESS, 0)] };
    let mut v = Vec::new();
    a.encode(&mut v);
    (duet_fs::acl::control::DACL_PRESENT, v)
}

/// Whether `uid` may open `id` for reading.
pub fn may_read(kv: &mut Kv, uid: u32, id: NodeId) -> bool {
    let access = duet_fs::Access { read: true, write: false, execute: false };
    run_as_uid(kv, uid, vec![Op::Open { obj: ObjRef::Id(id), access, truncate: false }]).remove(0).is_ok()
}
