//! The deterministic state machine: applies one committed [`Command`] to a
//! transaction. Every replica applying the same entries in the same order
//! reaches the same state and computes the same per-operation results.
//!
//! Architecture Invariant: `apply` reads nothing but the transaction and the
//! command: times, ids and data all come in the command or from counters in
//! the store.

use duet_fs::{
    check_name, Access, Attrs, Batch, CreateKind, DirEntry, ExtentId, FileType, FsError, IfExists, NodeId,
    ObjRef, Op, OpOutput, OpResult, SetAttrs, SetTime, TimeNs, WriteData, XattrHow, CHUNK_SIZE,
    FILE_SIZE_MAX, INLINE_MAX, ROOT_ID,
};

use crate::keys;
use duet_fs::acl;
use crate::kv::{KvRead, Txn};
use crate::records::{decode, encode, Command, DataOp, DataRecord, Edge, Node, ShareRecord, SnapshotRecord, UserRecord};

mod clone;
mod layers;
pub mod sessions;
mod space;
mod streams;
pub use clone::{clone_id, is_clone_id, list_clones, CLONE_BIT, DEPTH_MAX as CLONE_DEPTH_MAX};
pub use layers::{check_snapshot_name, list_snapshots, SNAPSHOT_MAX};
pub use space::{clone_space, clone_space_within, snapshot_space, snapshot_space_within, Exclusive, SCAN_MAX as SPACE_SCAN_MAX};

/// Most links one node may have.
pub const LINK_MAX: u32 = 65_000;
/// First uid handed to users created without one.
pub const FIRST_AUTO_UID: u32 = 2000;

/// `m public_addresses`: the committed table of who holds the public
/// service addresses (`Command::PublicAddresses`; `crate::addresses`).
pub const PUBLIC_ADDRESSES: &str = "public_addresses";

/// The committed public-address table (empty before the first).
pub fn public_addresses(kv: &impl KvRead) -> Vec<(String, u64)> {
    kv.get(&keys::meta(PUBLIC_ADDRESSES)).and_then(|v| crate::records::decode(&v)).unwrap_or_default()
}

/// What applying a command produced.
#[derive(Debug, Default)]
pub struct Applied {
    pub results: Vec<OpResult>,
    /// Reads whose bytes are in the chunk store: the engine fills them in.
    pub reads: Vec<ReadPlan>,
    /// Data records this command queued, for the destager.
    pub queued: Vec<(u64, DataRecord)>,
    /// Admin commands: their outcome.
    pub admin: Option<Result<(), AdminError>>,
}

/// A read of a chunked file: the range, and the data records not yet in the
/// chunk store that lie over it, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    pub op: usize,
    pub file: NodeId,
    pub offset: u64,
    pub len: u64,
    pub overlay: Vec<(u64, DataRecord)>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("{0} already exists")]
    Exists(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
}

/// Applies `cmd`. `index` is the raft index (for nothing but assertions today).
pub fn apply<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, cmd: &Command) -> Applied {
    match cmd {
        Command::Init { now_ns, admin_secrets, shares } => {
            let mut out = Applied::default();
            if txn.get(&keys::node(ROOT_ID)).is_none() {
                let root = new_attrs(ROOT_ID, FileType::Directory, 0o755, 0, 0, *now_ns);
                put_node(
                    txn,
                    &Node { attrs: root, parent: ROOT_ID, target: None, chunked: false, may_have_eas: false, zone: 0, has_acl: false },
                );
                put_counter(txn, "next_id", ROOT_ID + 1);
            }
            for (name, secret) in admin_secrets {
                txn.put(keys::admin(name), secret.clone());
            }
            for s in shares {
                if let Err(e) = put_share(txn, s, false, *now_ns) {
                    out.admin = Some(Err(e));
                    return out;
                }
            }
            out.admin = Some(Ok(()));
            out
        }
        // Exactly-once resend (`sessions.rs`, raft thesis §6.3): an
        // identified batch runs at most once; a resend gets its results.
        Command::Batch(batch) => match batch.request {
            Some(id) if sessions::applies(batch) => sessions::execute_once(txn, id, batch),
            _ => execute(txn, batch),
        },
        Command::PutShare { share, replace, now_ns } => {
            Applied { admin: Some(put_share(txn, share, *replace, *now_ns)), ..Default::default() }
        }
        Command::RemoveShare { name } => {
            let key = keys::share(name);
            if txn.get(&key).is_none() {
                return Applied { admin: Some(Err(AdminError::NotFound(format!("share {name}")))), ..Default::default() };
            }
            // A clone share goes with all its records; a share a clone
            // stands on stays.
            let batch = Batch::new(duet_fs::Credentials::root(), 0);
            let mut ex = Exec { batch: &batch, produced: Vec::new(), out: Applied::default() };
            let r = clone::remove_share(txn, &mut ex, name).map(|_| {
                txn.delete(key);
                // Its snapshot schedule goes with it (a share added again
                // under the name starts without one).
                txn.delete(keys::schedule(name));
            });
            if r.is_err() {
                return Applied { admin: Some(r), ..Default::default() };
            }
            ex.out.admin = Some(r);
            ex.out
        }
        Command::PutUser { user, replace } => {
            let key = keys::user(&user.name);
            let exists = txn.get(&key).is_some();
            let r = if exists && !replace {
                Err(AdminError::Exists(format!("user {}", user.name)))
            } else if !exists && *replace {
                Err(AdminError::NotFound(format!("user {}", user.name)))
            } else {
                let mut u = user.clone();
                if u.uid == u32::MAX {
                    let uid = counter(txn, "next_uid").max(FIRST_AUTO_UID as u64) as u32;
                    put_counter(txn, "next_uid", uid as u64 + 1);
                    u.uid = uid;
                    if u.gid == u32::MAX {
                        u.gid = uid;
                    }
                }
                txn.put_record(key, &u);
                Ok(())
            };
            Applied { admin: Some(r), ..Default::default() }
        }
        Command::RemoveUser { name } => {
            let key = keys::user(name);
            let r = if txn.get(&key).is_some() {
                txn.delete(key);
                Ok(())
            } else {
                Err(AdminError::NotFound(format!("user {name}")))
            };
            Applied { admin: Some(r), ..Default::default() }
        }
        // To be retired for the node-local `drop_destaged` (see
        // `Command::Destaged`).
        Command::Destaged { upto, reclaimed } => {
            drop_destaged(txn, 0, *upto, reclaimed);
            Applied { admin: Some(Ok(())), ..Default::default() }
        }
        Command::PublicAddresses { assignment } => {
            txn.put_record(keys::meta(PUBLIC_ADDRESSES), assignment);
            Applied { admin: Some(Ok(())), ..Default::default() }
        }
        Command::Snapshot { share, name, now_ns } => {
            Applied { admin: Some(layers::snapshot(txn, share, name, *now_ns)), ..Default::default() }
        }
        Command::DropSnapshot { share, name, now_ns } => {
            let batch = Batch::new(duet_fs::Credentials::root(), *now_ns);
            let mut ex = Exec { batch: &batch, produced: Vec::new(), out: Applied::default() };
            let r = layers::drop_snapshot(txn, &mut ex, share, name);
            ex.out.admin = Some(r);
            ex.out
        }
        Command::SnapshotSchedule { share, schedule } => {
            Applied { admin: Some(set_schedule(txn, share, schedule.as_ref())), ..Default::default() }
        }
        Command::Clone { source, snapshot, share, now_ns } => Applied {
            admin: Some(clone::create(txn, source, snapshot.as_deref(), share, *now_ns)),
            ..Default::default()
        },
    }
}

/// `Command::SnapshotSchedule`: share `share`'s snapshot schedule (`None`:
/// none). Refused, writing nothing, for an unknown share or values outside
/// [`crate::schedule::check`]'s bounds.
fn set_schedule<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    share: &str,
    schedule: Option<&crate::records::ScheduleRecord>,
) -> Result<(), AdminError> {
    if txn.get(&keys::share(share)).is_none() {
        return Err(AdminError::NotFound(format!("share {share}")));
    }
    match schedule {
        Some(s) => {
            crate::schedule::check(s.every_s, s.keep).map_err(AdminError::Invalid)?;
            txn.put_record(keys::schedule(share), s);
        }
        None => txn.delete(keys::schedule(share)),
    }
    Ok(())
}

/// Every share's snapshot schedule, by share name.
pub fn schedules<R: KvRead + ?Sized>(kv: &R) -> Vec<(String, crate::records::ScheduleRecord)> {
    let p = [keys::SCHEDULE];
    let mut txn = Txn::new(kv);
    txn.scan(&p, &keys::prefix_end(&p), usize::MAX)
        .into_iter()
        .filter_map(|(k, v)| Some((String::from_utf8(k[1..].to_vec()).ok()?, decode(&v)?)))
        .collect()
}

/// This node's destager has applied every data record up to `upto`
/// (inclusive) to its chunk store and deleted the chunks of `reclaimed`
/// files: drops those records (`q`, `Q`) and detach marks (`x`). Every
/// record up to `after` was dropped before (the node's `l destaged_upto`):
/// the scan starts past them, not over their deletion marks (RocksDB keeps
/// those until a compaction, and skipping thousands per round cost more
/// than the round's own work).
///
/// Node-local, not a raft command: every replica destages into its own
/// chunk store at its own pace, so the queue of data not yet destaged
/// (`q`, `Q`, `x`) is the node's own (each replica's apply queues the same
/// records; each drops them when it has destaged them). The store writes
/// these deletions directly (`StoreHandle::destaged`), with the progress
/// record `l destaged_upto`.
pub fn drop_destaged<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, after: u64, upto: u64, reclaimed: &[NodeId]) {
    let recs = txn.scan(&keys::dq(after.saturating_add(1)), &keys::dq(upto.saturating_add(1)), usize::MAX);
    for (k, v) in recs {
        if let (Some(dseq), Some(rec)) = (keys::u64_at(&k, 1), decode::<DataRecord>(&v)) {
            txn.delete(keys::dq_by_file(rec.file, dseq));
        }
        txn.delete(k);
    }
    for f in reclaimed {
        txn.delete(keys::detached(*f));
    }
}

/// Runs a batch that changes nothing (reads only) against committed state.
pub fn execute_read_only<R: KvRead + ?Sized>(base: &R, batch: &Batch) -> (Applied, u64) {
    let mut txn = Txn::new(base);
    let out = execute(&mut txn, batch);
    debug_assert!(txn.is_empty() || !out.results.is_empty());
    (out, txn.reads)
}

fn put_share<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    share: &ShareRecord,
    replace: bool,
    now_ns: TimeNs,
) -> Result<(), AdminError> {
    let key = keys::share(&share.name);
    if txn.get(&key).is_some() && !replace {
        return Err(AdminError::Exists(format!("share {}", share.name)));
    }
    // Create the share's directory (mkdir -p, mode 0777 for the leaf).
    let mut dir = ROOT_ID;
    let comps: Vec<&str> = share.path.split('/').filter(|c| !c.is_empty()).collect();
    for (i, comp) in comps.iter().enumerate() {
        check_name(comp).map_err(|_| AdminError::Invalid(format!("bad path component {comp:?}")))?;
        match get_edge(txn, dir, comp) {
            Some(e) if e.ftype == FileType::Directory => dir = e.child,
            Some(_) => return Err(AdminError::Invalid(format!("{} is not a directory", share.path))),
            None => {
                let mode = if i + 1 == comps.len() { 0o777 } else { 0o755 };
                let mut b = Batch::new(duet_fs::Credentials::root(), now_ns);
                b.push(Op::Create {
                    dir: ObjRef::Id(dir),
                    name: comp.to_string(),
                    kind: CreateKind::Directory,
                    attrs: SetAttrs { mode: Some(mode), ..Default::default() },
                    if_exists: IfExists::Open,
                });
                let out = execute(txn, &b);
                match out.results.into_iter().next() {
                    Some(Ok(OpOutput::Object { attrs, .. })) => dir = attrs.id,
                    _ => return Err(AdminError::Invalid(format!("cannot create {}", share.path))),
                }
                if i + 1 == comps.len() {
                    // A share's own directory is its own zone: its layers
                    // (snapshots) hold every node created below it.
                    if let Ok(mut n) = get_node(txn, dir) {
                        n.zone = dir;
                        put_node(txn, &n);
                    }
                }
            }
        }
    }
    txn.put_record(key, share);
    Ok(())
}

fn counter<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, name: &str) -> u64 {
    txn.get(&keys::meta(name))
        .and_then(|v| v.as_slice().try_into().ok().map(u64::from_be_bytes))
        .unwrap_or(0)
}

fn put_counter<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, name: &str, v: u64) {
    txn.put(keys::meta(name), v.to_be_bytes().to_vec());
}

fn new_attrs(id: NodeId, ftype: FileType, mode: u32, uid: u32, gid: u32, now: TimeNs) -> Attrs {
    Attrs {
        id,
        ftype,
        mode: mode & 0o7777,
        uid,
        gid,
        nlink: if ftype == FileType::Directory { 2 } else { 1 },
        rdev: 0,
        size: 0,
        alloc_size: 0,
        dos_attrs: 0,
        btime: now,
        atime: now,
        mtime: now,
        ctime: now,
        change: 1,
    }
}

fn get_node<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Result<Node, FsError> {
    match txn.get(&keys::node(id)) {
        Some(v) => Node::decode(&v).ok_or(FsError::Io),
        // A clone's object not yet copied up reads through its source.
        None if clone::is_clone_id(id) => clone::lower_node(txn, id),
        None => Err(FsError::Stale),
    }
}

fn put_node<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, n: &Node) {
    txn.put_record(keys::node(n.attrs.id), n);
}

fn get_edge<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, dir: NodeId, name: &str) -> Option<Edge> {
    if let Some(e) = clone::edge(txn, dir, name) {
        return e;
    }
    txn.get(&keys::edge(dir, name)).and_then(|v| decode(&v))
}

fn edge_for(n: &Node) -> Edge {
    let a = &n.attrs;
    Edge {
        child: a.id,
        ftype: a.ftype,
        dir_perm: (a.ftype == FileType::Directory).then_some((a.mode, a.uid, a.gid)),
    }
}

/// The token an access check matches a DACL's ACEs against (MS-DTYP
/// 2.5.3.2): the caller's Unix SIDs (S-1-22-1-uid, S-1-22-2-gid and its
/// groups, as SMB shows owners), Everyone and Authenticated Users.
pub(crate) fn token_of(cred: &duet_fs::Credentials) -> acl::Token {
    acl::Token::unix(cred.uid, cred.gid, &cred.groups)
}

/// A node's kept security (its `A` record, `acl::Stored`: the DACL and
/// any owner / group SID SMB set). `Ok(None)`: the node has none. A record
/// that does not decode is an I/O error: never acted on, never read as
/// "no DACL" (which would let the mode grant what the DACL refused).
pub(crate) fn stored_sec<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, n: &Node) -> Result<Option<acl::Stored>, FsError> {
    if !n.has_acl {
        return Ok(None);
    }
    let v = acl_bytes(txn, n.attrs.id).ok_or(FsError::Io)?;
    acl::Stored::decode_record(&v).map(Some).map_err(|_| FsError::Io)
}

/// The stored record as `Op::GetAcl` answers it: the control word and the
/// bytes (`acl::Stored::decode` reads them), after checking they decode.
fn stored_acl_record<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, n: &Node) -> Result<Option<(u16, Vec<u8>)>, FsError> {
    if !n.has_acl {
        return Ok(None);
    }
    let v = acl_bytes(txn, n.attrs.id).ok_or(FsError::Io)?;
    acl_record(&v).map(Some).ok_or(FsError::Io)
}

/// Node `id`'s `A` record: its own, or for a clone's object not copied up
/// yet, its source's (`clone::Through::acl`).
fn acl_bytes<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Option<Vec<u8>> {
    match txn.get(&keys::acl(id)) {
        Some(v) => Some(v),
        None => clone::through(txn, id).ok()??.acl(txn).ok()?,
    }
}

/// An `A` record as [`stored_acl_record`] answers it (None: it does not
/// decode as `acl::Stored`).
pub(crate) fn acl_record(v: &[u8]) -> Option<(u16, Vec<u8>)> {
    acl::Stored::decode_record(v).ok()?;
    Some((u16::from_le_bytes([v[0], v[1]]), v[2..].to_vec()))
}

/// Writes node `id`'s kept security; an empty one (no DACL, no SIDs) is no
/// record. Returns whether a record is kept (`Node::has_acl`).
fn put_sec<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId, s: &acl::Stored) -> bool {
    if s.is_empty() {
        txn.delete(keys::acl(id));
        return false;
    }
    txn.put(keys::acl(id), s.encode_record());
    true
}

/// The access rights `cred` holds on `n` (MS-DTYP 2.5.3.2) from its stored
/// DACL, its owner being the stored owner SID if any; `None` when it has
/// no DACL (the mode decides); an unreadable record grants nothing.
pub(crate) fn acl_granted<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, cred: &duet_fs::Credentials, n: &Node) -> Option<u32> {
    let s = match stored_sec(txn, n) {
        Ok(s) => s?,
        Err(_) => return Some(0),
    };
    let a = s.effective_dacl()?;
    Some(acl::granted(&token_of(cred), Some(&s.owner_or(n.attrs.uid)), Some(a)))
}

/// Whether `cred` holds `n`'s stored owner SID (a SID SMB set that is not
/// its uid's, e.g. Everyone): such an owner may change the DACL as the
/// uid owner may (MS-DTYP 2.5.3.2: the owner holds WRITE_DAC).
fn holds_owner_sid<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, cred: &duet_fs::Credentials, n: &Node) -> bool {
    matches!(stored_sec(txn, n), Ok(Some(acl::Stored { owner: Some(o), .. })) if token_of(cred).has(&o))
}

/// [`may`] for a node that may carry a DACL: with one, the rights the
/// wanted bits stand for must all be granted by it (4: READ_DATA, which on
/// a directory is list; 2: WRITE_DATA, on a directory add a file; 1:
/// EXECUTE, on a directory traverse; MS-DTYP 2.4.3 / RFC 8881 6.2.1.3.1).
/// Root keeps its bypass; a node without a record costs no read; a record
/// that does not decode grants nothing.
pub(crate) fn may_node<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, cred: &duet_fs::Credentials, n: &Node, want: u32) -> bool {
    if cred.uid == 0 || !n.has_acl {
        return may(cred, &n.attrs, want);
    }
    match stored_sec(txn, n) {
        Ok(s) => may_by(cred, n, s.as_ref(), want),
        Err(_) => false,
    }
}

/// Whether `cred` may remove `child`'s name from `dir` (REMOVE, RMDIR, the
/// source and a replaced target of RENAME, for both protocols): where
/// either has a DACL, DELETE on the child or DELETE_CHILD on the directory
/// allows it whatever the other says, and a DACL naming the bit for this
/// caller without granting it refuses (`acl::may_remove`, RFC 8881
/// 6.2.1.3.2, Windows' rule); otherwise write and search on the directory
/// decide, by its DACL or mode (POSIX). Root may; a record that does not
/// decode allows nothing. The sticky bit is checked apart
/// (`sticky_denies`).
pub(crate) fn may_unlink<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, cred: &duet_fs::Credentials, dir: &Node, child: &Node) -> bool {
    if cred.uid != 0 && (dir.has_acl || child.has_acl) {
        let (Ok(ds), Ok(cs)) = (stored_sec(txn, dir), stored_sec(txn, child)) else {
            return false;
        };
        let d = ds.as_ref().map(|s| (s, dir.attrs.uid));
        let c = cs.as_ref().map(|s| (s, child.attrs.uid));
        if let Some(v) = acl::may_remove(&token_of(cred), c, d) {
            return v;
        }
    }
    may_node(txn, cred, dir, 3)
}

/// [`may_node`] with the kept security given (None, or one without a
/// DACL: the mode decides), for a snapshot's object whose record is the
/// snapshot's (`layers.rs`). The owner the DACL's OWNER RIGHTS and the
/// owner's implicit rights go to is the stored owner SID, else the uid's.
pub(crate) fn may_by(cred: &duet_fs::Credentials, n: &Node, sec: Option<&acl::Stored>, want: u32) -> bool {
    let Some((sec, dacl)) = sec.and_then(|s| Some((s, s.effective_dacl()?))).filter(|_| cred.uid != 0) else {
        return may(cred, &n.attrs, want);
    };
    let owner = sec.owner_or(n.attrs.uid);
    let g = acl::granted(&token_of(cred), Some(&owner), Some(dacl));
    let mut need = 0;
    if want & 4 != 0 {
        need |= acl::rights::READ_DATA;
    }
    if want & 2 != 0 {
        need |= acl::rights::WRITE_DATA;
    }
    if want & 1 != 0 {
        need |= acl::rights::EXECUTE;
    }
    g & need == need
}

/// `n` if it is a regular file the caller may read (the owner always may):
/// what READ and the allocated-ranges query both need.
fn readable_file<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, cred: &duet_fs::Credentials, n: Node) -> Result<Node, FsError> {
    match n.attrs.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(FsError::IsDir),
        _ => return Err(FsError::Invalid),
    }
    if !may_node(txn, cred, &n, 4) && cred.uid != n.attrs.uid {
        return Err(FsError::Access);
    }
    Ok(n)
}

/// Permission bits wanted: 4 read, 2 write, 1 execute/search.
fn may(cred: &duet_fs::Credentials, a: &Attrs, want: u32) -> bool {
    if cred.uid == 0 {
        // root: everything but executing a file nobody may execute.
        return want & 1 == 0 || a.ftype == FileType::Directory || a.mode & 0o111 != 0;
    }
    let bits = if cred.uid == a.uid {
        a.mode >> 6
    } else if cred.in_group(a.gid) {
        a.mode >> 3
    } else {
        a.mode
    } & 7;
    bits & want == want
}

fn touch(a: &mut Attrs, now: TimeNs, mtime: bool) {
    if mtime {
        a.mtime = now;
    }
    a.ctime = now;
    a.change += 1;
}

/// Per-batch execution state.
struct Exec<'b> {
    batch: &'b Batch,
    produced: Vec<Option<NodeId>>,
    out: Applied,
}

/// Executes a batch: each operation in order, each atomic, all in one
/// transaction.
pub fn execute<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, batch: &Batch) -> Applied {
    let mut ex = Exec { batch, produced: Vec::with_capacity(batch.ops.len()), out: Applied::default() };
    let mut failed = false;
    for (i, op) in batch.ops.iter().enumerate() {
        let r = if failed && batch.stop_on_error {
            Err(FsError::Skipped)
        } else if batch.read_only && op.mutates() {
            Err(FsError::ReadOnly)
        } else if layers::changes_view(op, |r| resolve(&ex, r).ok()) {
            // Snapshots are read-only.
            Err(FsError::ReadOnly)
        } else if let Err(e) = if op.mutates() { clone::prepare(txn, &mut ex, op) } else { Ok(()) } {
            // Copying up a clone's objects failed: nothing ran.
            Err(e)
        } else {
            match layers::run_view_op(txn, &mut ex, i, op) {
                Some(r) => r,
                None => run_op(txn, &mut ex, i, op),
            }
        };
        let produced = match (&r, op) {
            (Ok(OpOutput::Object { attrs, .. }), _) | (Ok(OpOutput::Found { attrs, .. }), _) => Some(attrs.id),
            (Ok(_), Op::Open { .. }) => None,
            _ => None,
        };
        failed |= r.is_err();
        ex.produced.push(produced);
        ex.out.results.push(r);
    }
    layers::preserve(txn);
    ex.out
}

fn resolve(ex: &Exec<'_>, r: ObjRef) -> Result<NodeId, FsError> {
    match r {
        ObjRef::Id(id) => Ok(id),
        ObjRef::Result(i) => ex.produced.get(i).copied().flatten().ok_or(FsError::BadRef),
    }
}

fn load_dir<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &Exec<'_>, r: ObjRef) -> Result<Node, FsError> {
    let n = get_node(txn, resolve(ex, r)?)?;
    if n.attrs.ftype != FileType::Directory {
        return Err(FsError::NotDir);
    }
    Ok(n)
}

fn run_op<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, i: usize, op: &Op) -> OpResult {
    let cred = &ex.batch.cred;
    let now = ex.batch.now_ns;
    match op {
        Op::Lookup { dir, name } => {
            let d = load_dir(txn, ex, *dir)?;
            if !may_node(txn, cred, &d, 1) {
                return Err(FsError::Access);
            }
            let child = if name == ".." {
                d.parent
            } else if name == "." {
                d.attrs.id
            } else {
                check_name(name)?;
                get_edge(txn, d.attrs.id, name).ok_or(FsError::NotFound)?.child
            };
            let n = get_node(txn, child)?;
            Ok(OpOutput::Object { attrs: n.attrs, created: false, dir_before: None, dir_after: None })
        }
        Op::LookupCaseless { dir, name } => {
            let d = load_dir(txn, ex, *dir)?;
            if !may_node(txn, cred, &d, 1) {
                return Err(FsError::Access);
            }
            if name == "." || name == ".." {
                let child = if name == ".." { d.parent } else { d.attrs.id };
                let n = get_node(txn, child)?;
                return Ok(OpOutput::Found { name: name.clone(), attrs: n.attrs });
            }
            check_name(name)?;
            let (real, e) = match get_edge(txn, d.attrs.id, name) {
                Some(e) => (name.clone(), e),
                None => find_caseless(txn, d.attrs.id, name).ok_or(FsError::NotFound)?,
            };
            let n = get_node(txn, e.child)?;
            Ok(OpOutput::Found { name: real, attrs: n.attrs })
        }
        Op::SetEas { obj, eas } => {
            let mut n = get_node(txn, resolve(ex, *obj)?)?;
            let owner = cred.uid == 0 || cred.uid == n.attrs.uid;
            if !owner && !may_node(txn, cred, &n, 2) {
                return Err(FsError::Access);
            }
            let id = n.attrs.id;
            // Work out the new set first: a refused change writes nothing.
            let mut set: std::collections::BTreeMap<String, Vec<u8>> = node_eas(txn, &n).into_iter().collect();
            let mut gone = Vec::new();
            for (name, value) in eas {
                // MS-FSCC 2.4.15: names of 1..255 bytes, values up to 64 KiB.
                if name.is_empty() || name.len() > 255 || name.contains('\0') || value.len() > 65535 {
                    return Err(FsError::Invalid);
                }
                let upper = name.to_uppercase();
                // SMB names are case-insensitive: a twin in another case
                // (set over NFS, where names are exact) is the same name.
                let twins: Vec<String> = set.keys().filter(|k| **k != upper && k.to_uppercase() == upper).cloned().collect();
                for t in twins {
                    set.remove(&t);
                    gone.push(t);
                }
                if value.is_empty() {
                    if set.remove(&upper).is_some() {
                        gone.push(upper);
                    }
                } else {
                    gone.retain(|g| *g != upper);
                    set.insert(upper, value.clone());
                }
            }
            if set.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > EA_TOTAL_MAX {
                return Err(FsError::NoSpace);
            }
            for name in gone {
                txn.delete(keys::ea(id, &name));
            }
            for (name, value) in &set {
                txn.put(keys::ea(id, name), value.clone());
            }
            n.attrs.ctime = now;
            n.attrs.change += 1;
            n.may_have_eas = !set.is_empty();
            put_node(txn, &n);
            Ok(OpOutput::Attrs { before: None, attrs: n.attrs })
        }
        Op::GetEas { obj } => {
            let n = get_node(txn, resolve(ex, *obj)?)?;
            let eas = node_eas(txn, &n);
            Ok(OpOutput::Eas { eas, attrs: n.attrs })
        }
        Op::SetXattr { obj, name, value, how } => {
            let mut n = get_node(txn, resolve(ex, *obj)?)?;
            let owner = cred.uid == 0 || cred.uid == n.attrs.uid;
            if !owner && !may_node(txn, cred, &n, 2) {
                return Err(FsError::Access);
            }
            // RFC 8276 8.4.2: names are component4s; the store's bounds
            // are SMB's (MS-FSCC 2.4.15): names of 1..255 bytes, values up
            // to 64 KiB, 64 KiB in all.
            if name.is_empty() || name.len() > 255 || name.contains('\0') || value.len() > 65535 {
                return Err(FsError::Invalid);
            }
            let before = n.attrs.clone();
            let id = n.attrs.id;
            let mut set: std::collections::BTreeMap<String, Vec<u8>> = node_eas(txn, &n).into_iter().collect();
            let exists = set.contains_key(name.as_str());
            match how {
                XattrHow::Create if exists => return Err(FsError::Exists),
                XattrHow::Replace | XattrHow::Remove if !exists => return Err(FsError::NotFound),
                _ => {}
            }
            if *how == XattrHow::Remove {
                set.remove(name.as_str());
                txn.delete(keys::ea(id, name));
            } else {
                set.insert(name.clone(), value.clone());
                if set.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > EA_TOTAL_MAX {
                    return Err(FsError::NoSpace);
                }
                txn.put(keys::ea(id, name), value.clone());
            }
            n.attrs.ctime = now;
            n.attrs.change += 1;
            n.may_have_eas = !set.is_empty();
            put_node(txn, &n);
            Ok(OpOutput::Attrs { before: Some(before), attrs: n.attrs })
        }
        Op::ZeroRange { obj, offset, len } => {
            let mut n = get_node(txn, resolve(ex, *obj)?)?;
            match n.attrs.ftype {
                FileType::Regular => {}
                FileType::Directory => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid),
            }
            if !may_node(txn, cred, &n, 2) && cred.uid != n.attrs.uid {
                return Err(FsError::Access);
            }
            let before = n.attrs.clone();
            let start = (*offset).min(n.attrs.size);
            let end = offset.saturating_add(*len).min(n.attrs.size);
            if start >= end {
                return Ok(OpOutput::Attrs { before: Some(before), attrs: n.attrs });
            }
            let id = n.attrs.id;
            if n.chunked {
                layers::cow(txn, ex, id);
                // Chunks wholly inside the range become holes (the destager
                // deletes their files): they are no longer attached, and a
                // shared one drops its reference. A shared chunk zeroed in
                // part gets its own copy first.
                let mut partial = Vec::new();
                for idx in start / CHUNK_SIZE..=(end - 1) / CHUNK_SIZE {
                    if start <= idx * CHUNK_SIZE && (idx + 1) * CHUNK_SIZE <= end {
                        let k = keys::chunk(id, idx);
                        if let Some(v) = txn.get(&k) {
                            if let Some(b) = keys::chunk_blob(&v) {
                                drop_ref(txn, b);
                            }
                            txn.delete(k);
                        }
                    } else {
                        partial.push(idx);
                    }
                }
                unshare(txn, ex, id, &partial);
                // The blocks of a partly zeroed chunk that the range covers
                // whole are holes from now on (its record stays: the chunk
                // file still exists). A range reaching the end of file
                // covers the rest of its last block too.
                let to_eof = end >= n.attrs.size;
                for &idx in &partial {
                    let base = idx * CHUNK_SIZE;
                    let hi = if to_eof { base + CHUNK_SIZE } else { end.min(base + CHUNK_SIZE) };
                    let freed = keys::chunk_blocks(start.max(base) - base, hi - base, true);
                    let k = keys::chunk(id, idx);
                    if let Some(Some(keys::ChunkValue::Own(had))) = txn.get(&k).map(|v| keys::chunk_value(&v)) {
                        if had & freed != 0 {
                            txn.put(k, keys::own_chunk(had & !freed));
                        }
                    }
                }
                queue(txn, ex, id, DataOp::Zero { offset: start, len: end - start });
            } else {
                let mut data = txn.get(&keys::data(id)).unwrap_or_default();
                // Inline data may be shorter than the size (the rest reads
                // as zeros already): zeros reaching its end shorten it, so
                // the range becomes a hole.
                let to = (end as usize).min(data.len());
                if (start as usize) < to {
                    if to == data.len() {
                        data.truncate(start as usize);
                    } else {
                        data[start as usize..to].fill(0);
                    }
                    if data.is_empty() {
                        txn.delete(keys::data(id));
                    } else {
                        txn.put(keys::data(id), data);
                    }
                }
            }
            touch(&mut n.attrs, ex.batch.now_ns, true);
            put_node(txn, &n);
            Ok(OpOutput::Attrs { before: Some(before), attrs: n.attrs })
        }
        Op::Create { dir, name, kind, attrs, if_exists } => create(txn, ex, *dir, name, kind, attrs, *if_exists, false),
        Op::CreateCaseless { dir, name, kind, attrs, if_exists } => {
            create(txn, ex, *dir, name, kind, attrs, *if_exists, true)
        }
        Op::Open { obj, access, truncate } => {
            let mut n = get_node(txn, resolve(ex, *obj)?)?;
            check_access(txn, cred, &n, *access)?;
            if *truncate {
                if n.attrs.ftype != FileType::Regular {
                    return Err(FsError::IsDir);
                }
                if !may_node(txn, cred, &n, 2) {
                    return Err(FsError::Access);
                }
                set_size(txn, ex, &mut n, 0)?;
                // Only SMB truncates by Open (FILE_OVERWRITE): the file's
                // named streams go too (MS-FSA 2.1.5.1.2.2).
                streams::drop_all(txn, ex, n.attrs.id);
                touch(&mut n.attrs, now, true);
                put_node(txn, &n);
            }
            Ok(OpOutput::Object { attrs: n.attrs, created: false, dir_before: None, dir_after: None })
        }
        Op::GetAttr { obj } | Op::Close { obj } => {
            let n = get_node(txn, resolve(ex, *obj)?)?;
            Ok(OpOutput::Attrs { before: None, attrs: n.attrs })
        }
        Op::SetAttr { obj, attrs } => setattr(txn, ex, *obj, attrs),
        Op::Write { obj, offset, data, append } => write(txn, ex, *obj, *offset, data, *append),
        Op::Read { obj, offset, len } => {
            let n = get_node(txn, resolve(ex, *obj)?)?;
            let n = readable_file(txn, cred, n)?;
            let size = n.attrs.size;
            let start = (*offset).min(size);
            let len = (*len).min(size - start);
            let eof = start + len >= size;
            if !n.chunked {
                let data = clone::inline_data(txn, n.attrs.id)?;
                let mut buf = vec![0u8; len as usize];
                let s = start as usize;
                if s < data.len() {
                    let e = (s + len as usize).min(data.len());
                    buf[..e - s].copy_from_slice(&data[s..e]);
                }
                return Ok(OpOutput::Read { data: buf, eof, attrs: n.attrs });
            }
            // A clone's file not yet copied up reads its source's chunks.
            let file = clone::chunk_file(txn, n.attrs.id)?;
            // Only the queued records that can change these bytes travel
            // to the data path (a file with thousands of small writes
            // queued is read 4 KiB at a time).
            let mut overlay = overlay(txn, file, start, start + len);
            overlay.retain(|(_, r)| r.op.touches(start, start + len));
            ex.out.reads.push(ReadPlan { op: i, file, offset: start, len, overlay });
            Ok(OpOutput::Read { data: Vec::new(), eof, attrs: n.attrs })
        }
        Op::Remove { dir, name, dir_only } => remove(txn, ex, *dir, name, *dir_only),
        Op::Rename { src_dir, src_name, dst_dir, dst_name, replace } => {
            rename(txn, ex, *src_dir, src_name, *dst_dir, dst_name, *replace)
        }
        Op::Link { obj, dir, name } => {
            let mut n = get_node(txn, resolve(ex, *obj)?)?;
            let mut d = load_dir(txn, ex, *dir)?;
            check_name(name)?;
            if n.attrs.ftype == FileType::Directory {
                return Err(FsError::IsDir);
            }
            if n.zone != d.zone {
                // Each share's layers hold their own nodes only.
                return Err(FsError::CrossDevice);
            }
            if !may_node(txn, cred, &d, 3) {
                return Err(FsError::Access);
            }
            if n.attrs.nlink >= LINK_MAX {
                return Err(FsError::TooManyLinks);
            }
            if get_edge(txn, d.attrs.id, name).is_some() {
                return Err(FsError::Exists);
            }
            let before = d.attrs.clone();
            n.attrs.nlink += 1;
            touch(&mut n.attrs, now, false);
            put_node(txn, &n);
            txn.put_record(keys::edge(d.attrs.id, name), &edge_for(&n));
            clone::linked(txn, d.attrs.id, name);
            touch(&mut d.attrs, now, true);
            put_node(txn, &d);
            Ok(OpOutput::Dirs { changed: vec![(before, d.attrs)], target: Some(n.attrs) })
        }
        Op::ReadLink { obj } => {
            let n = get_node(txn, resolve(ex, *obj)?)?;
            match n.target {
                Some(t) => Ok(OpOutput::Link { target: t, attrs: n.attrs }),
                None => Err(FsError::NotSymlink),
            }
        }
        Op::ReadDir { dir, after, max_entries, with_attrs } => {
            let d = load_dir(txn, ex, *dir)?;
            if !may_node(txn, cred, &d, 4) {
                return Err(FsError::Access);
            }
            let prefix = keys::edge_prefix(d.attrs.id);
            let start = match after {
                Some(name) => {
                    let mut k = keys::edge(d.attrs.id, name);
                    k.push(0);
                    k
                }
                None => prefix.clone(),
            };
            let max = (*max_entries).clamp(1, 1 << 20) as usize;
            let mut rows = match clone::edge_rows(txn, d.attrs.id, &start, max + 1) {
                Some(rows) => rows,
                None => txn.scan(&start, &keys::prefix_end(&prefix), max + 1),
            };
            let eof = rows.len() <= max;
            rows.truncate(max);
            let mut entries = Vec::with_capacity(rows.len());
            for (k, v) in rows {
                let e: Edge = decode(&v).ok_or(FsError::Io)?;
                let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                entries.push(DirEntry { name, id: e.child, ftype: e.ftype, attrs: None, eas: Vec::new() });
            }
            if *with_attrs {
                // The children's nodes in one read; the extended-attribute
                // scan only for nodes that may have some.
                let ids: Vec<NodeId> = entries.iter().map(|e| e.id).collect();
                for (e, v) in entries.iter_mut().zip(get_nodes(txn, &ids)) {
                    let n = match v {
                        Some(v) => Node::decode(&v).ok_or(FsError::Io)?,
                        None => get_node(txn, e.id)?,
                    };
                    e.eas = node_eas(txn, &n);
                    e.attrs = Some(n.attrs);
                }
            }
            Ok(OpOutput::Dir { entries, eof, attrs: d.attrs })
        }
        Op::ListSnapshots { obj } => layers::list_op(txn, resolve(ex, *obj)?),
        Op::SetAcl { obj, acl: new } => {
            let mut n = get_node(txn, resolve(ex, *obj)?)?;
            if n.attrs.ftype == FileType::Symlink {
                return Err(FsError::Invalid);
            }
            let before = n.attrs.clone();
            let id = n.attrs.id;
            let o = acl::Sid::unix_user(n.attrs.uid);
            let g = acl::Sid::unix_group(n.attrs.gid);
            let old = stored_sec(txn, &n)?.unwrap_or_default();
            // What is asked (`acl::Stored::decode`, strict): the old form
            // replaces the DACL alone; a whole descriptor also sets the
            // owner and group it names, and the DACL only with
            // DACL_PRESENT.
            let (ask, whole) = match new {
                None => (None, false),
                Some((control, bytes)) => {
                    let s = acl::Stored::decode(*control, bytes).map_err(|_| FsError::Invalid)?;
                    (Some(s), control & acl::control::SELF_RELATIVE != 0)
                }
            };
            let mut sec = old.clone();
            let mut need = 0;
            let dacl_asked = ask.as_ref().map_or(true, |a| !whole || a.has_dacl());
            if dacl_asked {
                need |= acl::rights::WRITE_DAC;
                sec.control = ask.as_ref().map_or(0, |a| a.control);
                sec.dacl = ask.as_ref().and_then(|a| a.dacl.clone());
            }
            if let Some(a) = ask.as_ref().filter(|_| whole) {
                // The owner (MS-DTYP 2.4.6; who may name which is the
                // protocol's rule, MS-FSA 2.1.5.17, checked again here:
                // root any SID, others one their token holds). A Unix
                // user SID names the uid owner: the node's uid clears a
                // stored owner SID; another uid is a chown, SetAttr's, and
                // leaves the owner as it is.
                if let Some(so) = &a.owner {
                    need |= acl::rights::WRITE_OWNER;
                    match so.as_unix_user() {
                        Some(u) if u == n.attrs.uid => sec.owner = None,
                        Some(_) => {}
                        None if cred.uid == 0 || token_of(cred).has(so) => sec.owner = Some(so.clone()),
                        None => return Err(FsError::Perm),
                    }
                }
                // The group: any SID but a Unix one (a Unix group SID is
                // the gid, which SetAttr changes; the node's own clears a
                // stored group SID). A primary group carries no rights of
                // its own in an access check (MS-DTYP 2.5.3.2).
                if let Some(sg) = &a.group {
                    need |= acl::rights::WRITE_OWNER;
                    match sg.as_unix_group() {
                        Some(x) if x == n.attrs.gid => sec.group = None,
                        Some(_) => {}
                        None if sg.as_unix_user().is_some() => return Err(FsError::Invalid),
                        None => sec.group = Some(sg.clone()),
                    }
                }
            }
            // WRITE_DAC / WRITE_OWNER (MS-SMB2 3.3.5.21.3, MS-DTYP
            // 2.5.3.2): root, the uid owner, or a holder of them by the
            // stored DACL; the holder of a stored owner SID has WRITE_DAC
            // as an owner does.
            let uid_owner = cred.uid == 0 || cred.uid == n.attrs.uid;
            if !uid_owner {
                let granted = match acl_granted(txn, cred, &n) {
                    Some(x) => x,
                    None if holds_owner_sid(txn, cred, &n) => acl::rights::WRITE_DAC,
                    None => 0,
                };
                if granted & need != need {
                    return Err(FsError::Perm);
                }
            }
            if let Some(a) = sec.dacl.as_mut() {
                // An NFSv4 ACL's OWNER@ / GROUP@ (RFC 8881 6.2.1.5): the
                // uid and gid, the owner and group NFS shows.
                acl::resolve_owner_at(a, &o, &g);
            }
            if dacl_asked && sec.has_dacl() {
                // The mode follows a DACL set (RFC 8881 6.4.3); a NULL
                // DACL is 0777.
                n.attrs.mode = match sec.effective_dacl() {
                    Some(d) => acl::mode_from_dacl(Some(d), &o, &g, n.attrs.mode),
                    None => (n.attrs.mode & 0o7000) | 0o777,
                };
            }
            n.has_acl = put_sec(txn, id, &sec);
            touch(&mut n.attrs, now, false);
            put_node(txn, &n);
            if n.attrs.ftype == FileType::Directory {
                // The mode changed: keep the edge's copy in step.
                if let Some(name) = find_name(txn, n.parent, n.attrs.id) {
                    txn.put_record(keys::edge(n.parent, &name), &edge_for(&n));
                }
            }
            Ok(OpOutput::Attrs { before: Some(before), attrs: n.attrs })
        }
        Op::GetAcl { obj } => {
            let n = get_node(txn, resolve(ex, *obj)?)?;
            let acl = stored_acl_record(txn, &n)?;
            Ok(OpOutput::Acl { acl, attrs: n.attrs })
        }
        Op::Allocated { obj, offset, len } => {
            let n = get_node(txn, resolve(ex, *obj)?)?;
            let n = readable_file(txn, cred, n)?;
            let end = offset.saturating_add(*len).min(n.attrs.size);
            let ranges = allocated(txn, &n, (*offset).min(end), end)?;
            Ok(OpOutput::Ranges { ranges, attrs: n.attrs })
        }
        Op::OpenStream { obj, name, attrs, create } => streams::open(txn, ex, *obj, name, attrs, *create),
        Op::ListStreams { obj } => streams::list(txn, ex, *obj),
        Op::RemoveStream { obj, name } => streams::remove(txn, ex, *obj, name),
        Op::RenameStream { obj, name, new_name, replace } => streams::rename(txn, ex, *obj, name, new_name, *replace),
        Op::RenameStreamToData { obj, name, replace } => streams::to_data(txn, ex, *obj, name, *replace),
        Op::Clone { src, src_offset, dst, dst_offset, len, extend } => {
            clone(txn, ex, (*src, *src_offset), (*dst, *dst_offset), *len, *extend)
        }
        Op::Copy { src, src_offset, dst, dst_offset, len } => {
            let s = get_node(txn, resolve(ex, *src)?)?;
            if s.attrs.ftype != FileType::Regular {
                return Err(FsError::Invalid);
            }
            if !may_node(txn, cred, &s, 4) && cred.uid != s.attrs.uid {
                return Err(FsError::Access);
            }
            // A range past the source's end is invalid (RFC 7862 15.2.3;
            // SMB copychunk answers STATUS_INVALID_VIEW_SIZE); u64::MAX
            // means "to the end".
            if *len != u64::MAX && src_offset.checked_add(*len).map_or(true, |e| e > s.attrs.size) {
                return Err(FsError::Invalid);
            }
            if s.chunked {
                // The engine resolves copies from chunked files into writes
                // before proposing; a copy reaching here has inline data only.
                return Err(FsError::NotSupported);
            }
            let data = txn.get(&keys::data(s.attrs.id)).unwrap_or_default();
            let from = (*src_offset).min(s.attrs.size) as usize;
            let to = (s.attrs.size.min(src_offset.saturating_add(*len))) as usize;
            let mut bytes = vec![0u8; to.saturating_sub(from)];
            if from < data.len() {
                let e = to.min(data.len());
                bytes[..e - from].copy_from_slice(&data[from..e]);
            }
            let r = write(txn, ex, *dst, *dst_offset, &WriteData::Bytes(bytes), false)?;
            match r {
                OpOutput::Written { count, attrs, .. } => Ok(OpOutput::Copied { count, attrs }),
                other => Ok(other),
            }
        }
    }
}

pub(crate) fn check_access<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    cred: &duet_fs::Credentials,
    n: &Node,
    access: Access,
) -> Result<(), FsError> {
    let want = (access.read as u32) * 4 + (access.write as u32) * 2 + (access.execute as u32);
    if access.write && n.attrs.ftype == FileType::Directory {
        return Err(FsError::IsDir);
    }
    if want != 0 && !may_node(txn, cred, n, want) {
        return Err(FsError::Access);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn create<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    dir: ObjRef,
    name: &str,
    kind: &CreateKind,
    set: &SetAttrs,
    if_exists: IfExists,
    caseless: bool,
) -> OpResult {
    let cred = &ex.batch.cred;
    let now = ex.batch.now_ns;
    let mut d = load_dir(txn, ex, dir)?;
    check_name(name)?;
    let existing = match get_edge(txn, d.attrs.id, name) {
        Some(e) => Some((name.to_string(), e)),
        None if caseless => find_caseless(txn, d.attrs.id, name),
        None => None,
    };
    if let Some((real, e)) = existing {
        if !may_node(txn, cred, &d, 1) {
            return Err(FsError::Access);
        }
        let mut n = get_node(txn, e.child)?;
        match if_exists {
            IfExists::Fail => return Err(FsError::Exists),
            IfExists::Open => {}
            IfExists::Truncate => {
                if n.attrs.ftype == FileType::Regular {
                    if !may_node(txn, cred, &n, 2) {
                        return Err(FsError::Access);
                    }
                    set_size(txn, ex, &mut n, 0)?;
                    if caseless {
                        // An SMB overwrite or supersede of a file drops its
                        // named streams (MS-FSA 2.1.5.1.2.2).
                        streams::drop_all(txn, ex, n.attrs.id);
                    }
                    // Overwrite (MS-FSA 2.1.5.1.2.2) also takes the new
                    // attributes and allocation the creator asked for.
                    if let Some(a) = set.dos_attrs {
                        n.attrs.dos_attrs = duet_fs::dos::apply(n.attrs.dos_attrs, a);
                    }
                    if let Some(a) = set.alloc_size {
                        n.attrs.alloc_size = a & !duet_fs::ALLOC_TRUNCATES;
                    }
                    touch(&mut n.attrs, now, true);
                    put_node(txn, &n);
                }
            }
        }
        if caseless {
            // The entry's real name: it may differ in case from `name`.
            return Ok(OpOutput::Found { name: real, attrs: n.attrs });
        }
        return Ok(OpOutput::Object { attrs: n.attrs, created: false, dir_before: None, dir_after: None });
    }
    if !may_node(txn, cred, &d, 3) {
        return Err(FsError::Access);
    }
    let ftype = kind.file_type();
    if ftype == FileType::Directory && d.attrs.nlink >= LINK_MAX {
        return Err(FsError::TooManyLinks);
    }
    let id = counter(txn, "next_id").max(ROOT_ID + 1);
    if id > duet_fs::view::ID_MAX {
        // Past 2^40 - 1 neither snapshot views nor clones could name the
        // object (their ids hold 40 bits of it): refused, never aliased.
        return Err(FsError::NoSpace);
    }
    put_counter(txn, "next_id", id + 1);
    // In a clone, new objects get the clone's ids.
    let id = clone::new_id(d.zone, id)?;
    let default_mode = match ftype {
        FileType::Directory => 0o755,
        FileType::Symlink => 0o777,
        _ => 0o644,
    };
    // A non-root creator owns what it creates; root may give it away.
    let uid = if cred.uid == 0 { set.uid.unwrap_or(0) } else { cred.uid };
    let gid = if cred.uid == 0 { set.gid.unwrap_or(cred.gid) } else { cred.gid };
    let mut attrs = new_attrs(id, ftype, set.mode.unwrap_or(default_mode), uid, gid, now);
    let mut target = None;
    match kind {
        CreateKind::Symlink { target: t } => {
            if t.is_empty() || t.len() > 4096 || t.contains('\0') {
                return Err(FsError::Invalid);
            }
            attrs.size = t.len() as u64;
            target = Some(t.clone());
        }
        CreateKind::CharDevice { rdev } | CreateKind::BlockDevice { rdev } => attrs.rdev = *rdev,
        _ => {}
    }
    if let Some(a) = set.dos_attrs {
        attrs.dos_attrs = duet_fs::dos::apply(0, a);
    }
    // A new file or directory inherits FILE_ATTRIBUTE_COMPRESSED from its
    // directory unless the creator asked not to (MS-FSA 2.1.5.1.2.1,
    // FILE_NO_COMPRESSION as `dos::NO_COMPRESSION`).
    if matches!(ftype, FileType::Regular | FileType::Directory)
        && duet_fs::dos::inherits_compression(d.attrs.dos_attrs, set.dos_attrs)
    {
        attrs.dos_attrs |= duet_fs::dos::COMPRESSED;
    }
    if let Some(t) = set.btime {
        attrs.btime = t;
    }
    if let Some(SetTime::At(t)) = set.atime {
        attrs.atime = t;
    }
    if let Some(SetTime::At(t)) = set.mtime {
        attrs.mtime = t;
    }
    if let Some(a) = set.alloc_size {
        attrs.alloc_size = a & !duet_fs::ALLOC_TRUNCATES;
    }
    let mut n = Node { attrs, parent: d.attrs.id, target, chunked: false, may_have_eas: false, zone: d.zone, has_acl: false };
    // Inheritance on create (MS-DTYP 2.5.3.4.2): a parent DACL with
    // inheritable ACEs gives the child its inherited DACL, owned by the
    // creator; the mode follows it (RFC 8881 6.4.3).
    // The creator (its uid and gid) owns the child, whatever owner SID
    // the parent has.
    let parent = stored_sec(txn, &d)?;
    if let Some(pacl) = parent.as_ref().and_then(|p| p.effective_dacl()) {
        let control = parent.as_ref().map_or(0, |p| p.control);
        let owner = acl::Sid::unix_user(n.attrs.uid);
        let group = acl::Sid::unix_group(n.attrs.gid);
        let is_dir = ftype == FileType::Directory;
        if ftype != FileType::Symlink {
            if let Ok(Some(child)) = acl::inherit(pacl, is_dir, &owner, &group) {
                let ctl = if control & acl::control::DACL_AUTO_INHERITED != 0 { acl::control::DACL_AUTO_INHERITED } else { 0 };
                n.attrs.mode = acl::mode_from_dacl(Some(&child), &owner, &group, n.attrs.mode);
                n.has_acl = put_sec(txn, n.attrs.id, &acl::Stored::of_dacl(ctl, Some(child)));
            }
        }
    }
    if let (Some(size), FileType::Regular) = (set.size, ftype) {
        if size > 0 {
            set_size(txn, ex, &mut n, size)?;
        }
    }
    put_node(txn, &n);
    txn.put_record(keys::edge(d.attrs.id, name), &edge_for(&n));
    clone::linked(txn, d.attrs.id, name);
    let before = d.attrs.clone();
    if ftype == FileType::Directory {
        d.attrs.nlink += 1;
    }
    touch(&mut d.attrs, now, true);
    put_node(txn, &d);
    Ok(OpOutput::Object { attrs: n.attrs, created: true, dir_before: Some(before), dir_after: Some(d.attrs) })
}

fn setattr<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, obj: ObjRef, s: &SetAttrs) -> OpResult {
    let cred = ex.batch.cred.clone();
    let now = ex.batch.now_ns;
    let mut n = get_node(txn, resolve(ex, obj)?)?;
    let before = n.attrs.clone();
    if s.is_empty() {
        return Ok(OpOutput::Attrs { before: Some(before), attrs: n.attrs });
    }
    let owner = cred.uid == 0 || cred.uid == n.attrs.uid;
    let writable = may_node(txn, &cred, &n, 2);
    if let Some(uid) = s.uid {
        if cred.uid != 0 && uid != n.attrs.uid {
            return Err(FsError::Perm);
        }
    }
    if let Some(gid) = s.gid {
        if cred.uid != 0 && gid != n.attrs.gid && !(owner && cred.in_group(gid)) {
            return Err(FsError::Perm);
        }
    }
    if (s.mode.is_some() || s.btime.is_some() || s.ctime.is_some()) && !owner {
        return Err(FsError::Perm);
    }
    for t in [s.atime, s.mtime].into_iter().flatten() {
        match t {
            SetTime::ServerNow if !owner && !writable => return Err(FsError::Access),
            SetTime::At(_) if !owner => return Err(FsError::Perm),
            _ => {}
        }
    }
    if (s.dos_attrs.is_some() || s.alloc_size.is_some()) && !owner && !writable {
        return Err(FsError::Access);
    }
    if let Some(size) = s.size {
        match n.attrs.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Invalid),
        }
        if !writable && !owner {
            return Err(FsError::Access);
        }
        if size > FILE_SIZE_MAX {
            return Err(FsError::FileTooBig);
        }
        if size != n.attrs.size {
            set_size(txn, ex, &mut n, size)?;
            n.attrs.mtime = now;
        }
    }
    if let Some(m) = s.mode {
        n.attrs.mode = m & 0o7777;
        // A chmod replaces a stored DACL by the mode's (RFC 8881 6.4.1.1
        // lets the server rewrite the ACL from the mode; duet keeps no
        // ACEs beyond what the mode says): the DACL is dropped and access
        // goes back to the bits just set. A stored owner or group SID is
        // not in the mode and stays.
        if let Some(mut sec) = stored_sec(txn, &n)? {
            sec.control = 0;
            sec.dacl = None;
            n.has_acl = put_sec(txn, n.attrs.id, &sec);
        }
    }
    // A chown or chgrp by root or the uid owner (NFS SETATTR, SMB naming a
    // Unix SID) makes the uid or gid the owner or group again: a stored SID
    // for it goes.
    if (s.uid.is_some() || s.gid.is_some()) && owner {
        if let Some(mut sec) = stored_sec(txn, &n)? {
            if s.uid.is_some() {
                sec.owner = None;
            }
            if s.gid.is_some() {
                sec.group = None;
            }
            n.has_acl = put_sec(txn, n.attrs.id, &sec);
        }
    }
    if let Some(u) = s.uid {
        if u != n.attrs.uid {
            n.attrs.mode &= !0o4000;
        }
        n.attrs.uid = u;
    }
    if let Some(g) = s.gid {
        n.attrs.gid = g;
    }
    if let Some(a) = s.dos_attrs {
        let was = n.attrs.dos_attrs;
        n.attrs.dos_attrs = duet_fs::dos::apply(was, a);
        // FSCTL_SET_COMPRESSION changed the bit of a file whose data is in
        // chunks: the destager rewrites them in the new format. An inline
        // file's bytes are stored whichever way its chunks will be once it
        // grows; a directory only keeps the bit for its new children.
        if (was ^ n.attrs.dos_attrs) & duet_fs::dos::COMPRESSED != 0
            && n.attrs.ftype == FileType::Regular
            && n.chunked
        {
            queue(txn, ex, n.attrs.id, DataOp::Recompress);
        }
    }
    if let Some(a) = s.alloc_size {
        let truncates = a & duet_fs::ALLOC_TRUNCATES != 0;
        let a = a & !duet_fs::ALLOC_TRUNCATES;
        // With ALLOC_TRUNCATES, an allocation below the end of file cuts the
        // file there (MS-FSA 2.1.5.14.1, FileAllocationInformation).
        if truncates && a < n.attrs.size && n.attrs.ftype == FileType::Regular && s.size.is_none() {
            if !writable && !owner {
                return Err(FsError::Access);
            }
            set_size(txn, ex, &mut n, a)?;
            n.attrs.mtime = now;
        }
        n.attrs.alloc_size = a.max(n.attrs.size);
    }
    if let Some(t) = s.btime {
        n.attrs.btime = t;
    }
    match s.atime {
        Some(SetTime::At(t)) => n.attrs.atime = t,
        Some(SetTime::ServerNow) => n.attrs.atime = now,
        None => {}
    }
    match s.mtime {
        Some(SetTime::At(t)) => n.attrs.mtime = t,
        Some(SetTime::ServerNow) => n.attrs.mtime = now,
        None => {}
    }
    n.attrs.ctime = match s.ctime {
        Some(duet_fs::CTIME_KEEP) => n.attrs.ctime,
        Some(t) => t,
        None => now,
    };
    n.attrs.change += 1;
    put_node(txn, &n);
    if n.attrs.ftype == FileType::Directory && (s.mode.is_some() || s.uid.is_some() || s.gid.is_some()) {
        // Keep the directory's edge in step for path-walk permission checks.
        let name = find_name(txn, n.parent, n.attrs.id);
        if let Some(name) = name {
            txn.put_record(keys::edge(n.parent, &name), &edge_for(&n));
        }
    }
    Ok(OpOutput::Attrs { before: Some(before), attrs: n.attrs })
}

/// The name under which `parent` links `child` (directories have one).
fn find_name<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, parent: NodeId, child: NodeId) -> Option<String> {
    if parent == child {
        return None;
    }
    let prefix = keys::edge_prefix(parent);
    let rows = match clone::edge_rows(txn, parent, &prefix, usize::MAX) {
        Some(rows) => rows,
        None => txn.scan(&prefix, &keys::prefix_end(&prefix), usize::MAX),
    };
    for (k, v) in rows {
        if decode::<Edge>(&v).map(|e| e.child) == Some(child) {
            return Some(String::from_utf8_lossy(&k[prefix.len()..]).into_owned());
        }
    }
    None
}

/// Queues a data record for a chunked file.
fn queue<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, file: NodeId, op: DataOp) {
    let dseq = counter(txn, "next_dseq").max(1);
    put_counter(txn, "next_dseq", dseq + 1);
    let rec = DataRecord { file, op };
    txn.put(keys::dq_by_file(file, dseq), keys::dq_span(rec.op.span()));
    txn.put_record(keys::dq(dseq), &rec);
    ex.out.queued.push((dseq, rec));
}

/// Marks the chunks covering `[offset, offset+len)` attached, as the
/// file's own, with the blocks the range touches allocated in their maps: a
/// shared one gets its own copy first (an `Unshare` record queued before
/// the record that writes it; its map is then all blocks).
fn attach_chunks<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, file: NodeId, offset: u64, len: u64) {
    if len == 0 {
        return;
    }
    let end = offset + len;
    let first = offset / CHUNK_SIZE;
    let last = (end - 1) / CHUNK_SIZE;
    let mut shared = Vec::new();
    for idx in first..=last {
        let base = idx * CHUNK_SIZE;
        let touched = keys::chunk_blocks(offset.max(base) - base, end.min(base + CHUNK_SIZE) - base, false);
        let k = keys::chunk(file, idx);
        match txn.get(&k).map(|v| keys::chunk_value(&v)) {
            None => txn.put(k, keys::own_chunk(touched)),
            Some(Some(keys::ChunkValue::Shared(_))) => shared.push(idx),
            Some(Some(keys::ChunkValue::Own(had))) if had & touched != touched => {
                txn.put(k, keys::own_chunk(had | touched))
            }
            // Already allocated there, or a value no map decodes from
            // (counted as wholly allocated).
            Some(_) => {}
        }
    }
    unshare(txn, ex, file, &shared);
}

/// Gives `file` its own copy of each of `chunks` that it shares: the `k`
/// record becomes its own, the blob loses a reference, and an `Unshare`
/// record tells the destager to copy the chunk before later records change
/// it in place. Chunks not shared are left alone.
fn unshare<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, file: NodeId, chunks: &[u64]) {
    let mut gone = Vec::new();
    for &idx in chunks {
        let k = keys::chunk(file, idx);
        if let Some(b) = txn.get(&k).and_then(|v| keys::chunk_blob(&v)) {
            txn.put(k, Vec::new());
            drop_ref(txn, b);
            gone.push(idx);
        }
    }
    if !gone.is_empty() {
        queue(txn, ex, file, DataOp::Unshare { chunks: gone });
    }
}

/// Most ranges [`allocated`] lists one by one; past them, the rest of the
/// asked range is reported as one allocated range (never a hole where data
/// may lie).
const ALLOCATED_RANGES_MAX: usize = 65_536;

/// The ranges of `[start, end)` of file `n` that hold data ([`Op::Allocated`]):
/// an inline file's stored bytes; a chunked file's allocated blocks (a
/// shared chunk, or a record without a map, counts whole). A clone object
/// not yet copied up answers for the chunks it reads.
fn allocated<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, n: &Node, start: u64, end: u64) -> Result<Vec<(u64, u64)>, FsError> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    if start >= end {
        return Ok(out);
    }
    let add = |from: u64, to: u64, out: &mut Vec<(u64, u64)>| {
        let (from, to) = (from.max(start), to.min(end));
        if from >= to {
            return;
        }
        match out.last_mut() {
            Some((o, l)) if *o + *l == from => *l += to - from,
            _ => out.push((from, to - from)),
        }
    };
    if !n.chunked {
        let data = clone::inline_data(txn, n.attrs.id)?;
        add(0, data.len() as u64, &mut out);
        return Ok(out);
    }
    let file = clone::chunk_file(txn, n.attrs.id)?;
    let from = keys::chunk(file, start / CHUNK_SIZE);
    let to = keys::chunk(file, (end - 1) / CHUNK_SIZE + 1);
    for (k, v) in txn.scan(&from, &to, usize::MAX) {
        let Some(idx) = keys::u64_at(&k, 9) else { continue };
        let base = idx * CHUNK_SIZE;
        let map = match keys::chunk_value(&v) {
            Some(keys::ChunkValue::Own(m)) => m,
            Some(keys::ChunkValue::Shared(_)) | None => keys::ALL_BLOCKS,
        };
        let mut i = 0u64;
        while i < 64 {
            if map & (1 << i) == 0 {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < 64 && map & (1 << j) != 0 {
                j += 1;
            }
            add(base + i * duet_fs::ALLOC_BLOCK, base + j * duet_fs::ALLOC_BLOCK, &mut out);
            i = j;
        }
        if out.len() >= ALLOCATED_RANGES_MAX {
            let (o, l) = out[out.len() - 1];
            add(o + l, end, &mut out);
            break;
        }
    }
    Ok(out)
}

/// How many chunk records name blob `b`.
fn blob_refs<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, b: u64) -> u64 {
    txn.get(&keys::blob(b)).and_then(|v| v.as_slice().try_into().ok().map(u64::from_be_bytes)).unwrap_or(0)
}

fn set_refs<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, b: u64, n: u64) {
    if n == 0 {
        txn.delete(keys::blob(b));
    } else {
        txn.put(keys::blob(b), n.to_be_bytes().to_vec());
    }
}

/// One chunk record less names blob `b`; the last one deletes its count
/// (the chunk's bytes go with the last chunk file linking them).
fn drop_ref<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, b: u64) {
    let n = blob_refs(txn, b);
    set_refs(txn, b, n.saturating_sub(1));
}

/// Most bytes one clone copies (rather than shares): its partial chunks,
/// or the whole range when the two offsets are not aligned alike.
pub const CLONE_COPY_MAX: u64 = 64 << 20;

/// Clones a range by reference (reflink, [`Op::Clone`]): whole chunks
/// aligned alike on both sides are shared (one `k` record naming a blob
/// each, no bytes copied); the partial chunks at the ends are copied. One
/// `CloneFrom` record carries both to the destager, which applies it after
/// every earlier record (so the source's data not yet destaged is in it).
fn clone<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    (src, src_offset): (ObjRef, u64),
    (dst, dst_offset): (ObjRef, u64),
    len: u64,
    extend: bool,
) -> OpResult {
    let cred = ex.batch.cred.clone();
    let s = get_node(txn, resolve(ex, src)?)?;
    let d = get_node(txn, resolve(ex, dst)?)?;
    for n in [&s, &d] {
        match n.attrs.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Invalid),
        }
    }
    if !may_node(txn, &cred, &s, 4) && cred.uid != s.attrs.uid {
        return Err(FsError::Access);
    }
    if !may_node(txn, &cred, &d, 2) && cred.uid != d.attrs.uid {
        return Err(FsError::Access);
    }
    // RFC 7862 15.13.3 / MS-FSA 2.1.5.10.8: the source range must lie in
    // the source; u64::MAX means "to the end".
    if src_offset > s.attrs.size {
        return Err(FsError::Invalid);
    }
    let len = if len == u64::MAX { s.attrs.size - src_offset } else { len };
    if src_offset.checked_add(len).map_or(true, |e| e > s.attrs.size) {
        return Err(FsError::Invalid);
    }
    let dst_end = dst_offset.checked_add(len).ok_or(FsError::FileTooBig)?;
    if dst_end > FILE_SIZE_MAX {
        return Err(FsError::FileTooBig);
    }
    // MS-FSCC 2.3.8: a sparse source into a target that is not sparse is
    // STATUS_NOT_SUPPORTED.
    let sparse = |n: &Node| n.attrs.dos_attrs & duet_fs::dos::SPARSE_FILE != 0;
    if sparse(&s) && !sparse(&d) {
        return Err(FsError::NotSupported);
    }
    let same = s.attrs.id == d.attrs.id;
    if len == 0 {
        return Ok(OpOutput::Copied { count: 0, attrs: d.attrs });
    }
    // RFC 7862 15.13.3; MS-FSCC 2.3.8 (STATUS_NOT_SUPPORTED): the two
    // ranges of one file may not overlap.
    if same && src_offset < dst_end && dst_offset < src_offset + len {
        return Err(FsError::Invalid);
    }
    if !extend && dst_end > d.attrs.size {
        return Ok(OpOutput::Copied { count: 0, attrs: d.attrs });
    }
    if !s.chunked {
        // Inline source (at most 4 KiB): a byte copy.
        let data = txn.get(&keys::data(s.attrs.id)).unwrap_or_default();
        let mut bytes = vec![0u8; len as usize];
        let from = src_offset as usize;
        if from < data.len() {
            let e = (from + len as usize).min(data.len());
            bytes[..e - from].copy_from_slice(&data[from..e]);
        }
        return match write(txn, ex, ObjRef::Id(d.attrs.id), dst_offset, &WriteData::Bytes(bytes), false)? {
            OpOutput::Written { count, attrs, .. } => Ok(OpOutput::Copied { count, attrs }),
            other => Ok(other),
        };
    }
    clone_chunks(txn, ex, s, d, src_offset, dst_offset, len)
}

/// The chunked half of [`clone`], its checks done: `len` bytes of chunked
/// file `s` from `src_offset` into `d` at `dst_offset`, whole chunks
/// aligned alike shared (one blob reference each), the partial ends
/// copied, `d` grown to cover the range. Also what
/// [`Op::RenameStreamToData`] moves a stream's data with.
fn clone_chunks<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    s: Node,
    d: Node,
    src_offset: u64,
    dst_offset: u64,
    len: u64,
) -> OpResult {
    let cred = ex.batch.cred.clone();
    let now = ex.batch.now_ns;
    let dst_end = dst_offset + len;
    // Which destination chunks are shared whole, and which bytes copied.
    let (j0, j1) = if src_offset % CHUNK_SIZE == dst_offset % CHUNK_SIZE {
        (dst_offset.div_ceil(CHUNK_SIZE), dst_end / CHUNK_SIZE)
    } else {
        (0, 0)
    };
    let mut copy = Vec::new();
    if j0 < j1 {
        if dst_offset < j0 * CHUNK_SIZE {
            copy.push((src_offset, dst_offset, j0 * CHUNK_SIZE - dst_offset));
        }
        if j1 * CHUNK_SIZE < dst_end {
            let at = j1 * CHUNK_SIZE;
            copy.push((src_offset + (at - dst_offset), at, dst_end - at));
        }
    } else {
        copy.push((src_offset, dst_offset, len));
    }
    if copy.iter().map(|c| c.2).sum::<u64>() > CLONE_COPY_MAX {
        return Err(FsError::NotSupported);
    }
    let src_id = s.attrs.id;
    let dst_id = d.attrs.id;
    let mut d = d;
    if d.chunked {
        layers::cow(txn, ex, dst_id);
    }
    make_chunked(txn, ex, &mut d);
    put_node(txn, &d);
    let pairs: Vec<(u64, u64)> = (j0..j1.max(j0))
        .map(|j| ((j * CHUNK_SIZE - dst_offset + src_offset) / CHUNK_SIZE, j))
        .collect();
    // Phase 1: the blob each source chunk is (as it is now: every source
    // is read before anything is written, as the destager does).
    let mut src_blob: std::collections::BTreeMap<u64, Option<u64>> = std::collections::BTreeMap::new();
    for &(i, _) in &pairs {
        if src_blob.contains_key(&i) {
            continue;
        }
        let k = keys::chunk(src_id, i);
        let b = match txn.get(&k) {
            None => None, // a hole
            Some(v) => match keys::chunk_blob(&v) {
                Some(b) => Some(b),
                None => {
                    let b = counter(txn, "next_blob").max(1);
                    put_counter(txn, "next_blob", b + 1);
                    txn.put(k, b.to_be_bytes().to_vec());
                    set_refs(txn, b, 1);
                    Some(b)
                }
            },
        };
        src_blob.insert(i, b);
    }
    // Phase 2: each destination chunk becomes its source's blob.
    for &(i, j) in &pairs {
        let k = keys::chunk(dst_id, j);
        if let Some(old) = txn.get(&k).and_then(|v| keys::chunk_blob(&v)) {
            drop_ref(txn, old);
        }
        match src_blob[&i] {
            Some(b) => {
                txn.put(k, b.to_be_bytes().to_vec());
                let n = blob_refs(txn, b);
                set_refs(txn, b, n + 1);
            }
            None => txn.delete(k),
        }
    }
    // The copied chunks are the destination's own (the destager breaks a
    // shared one's link before writing it), all their blocks counted
    // allocated: the copy may bring data into any of them.
    for &(_, at, n) in &copy {
        for idx in at / CHUNK_SIZE..=(at + n - 1) / CHUNK_SIZE {
            let k = keys::chunk(dst_id, idx);
            if let Some(b) = txn.get(&k).and_then(|v| keys::chunk_blob(&v)) {
                drop_ref(txn, b);
            }
            txn.put(k, keys::own_chunk(keys::ALL_BLOCKS));
        }
    }
    queue(txn, ex, dst_id, DataOp::CloneFrom { src: src_id, share: pairs, copy });
    let mut d = get_node(txn, dst_id)?;
    written_to(&mut d.attrs, dst_end, &cred, now);
    put_node(txn, &d);
    Ok(OpOutput::Copied { count: len, attrs: d.attrs })
}

/// Moves an inline file's data to the chunk path.
fn make_chunked<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, n: &mut Node) {
    if n.chunked {
        return;
    }
    let id = n.attrs.id;
    let data = txn.get(&keys::data(id)).unwrap_or_default();
    txn.delete(keys::data(id));
    n.chunked = true;
    if !data.is_empty() {
        attach_chunks(txn, ex, id, 0, data.len() as u64);
        queue(txn, ex, id, DataOp::WriteInline { offset: 0, data });
    }
}

fn set_size<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, n: &mut Node, size: u64) -> Result<(), FsError> {
    if size > FILE_SIZE_MAX {
        return Err(FsError::FileTooBig);
    }
    let id = n.attrs.id;
    let old = n.attrs.size;
    if n.chunked {
        layers::cow(txn, ex, id);
    }
    if !n.chunked && size <= INLINE_MAX {
        // Cut, never padded: inline data shorter than the size reads as
        // zeros past its end, and stays a hole there (`Op::Allocated`).
        let mut data = txn.get(&keys::data(id)).unwrap_or_default();
        data.truncate(size as usize);
        if data.is_empty() {
            txn.delete(keys::data(id));
        } else {
            txn.put(keys::data(id), data);
        }
    } else {
        make_chunked(txn, ex, n);
        if size < old {
            // A shared chunk cut in part gets its own copy first; the
            // chunks past the end drop their references.
            if size % CHUNK_SIZE != 0 {
                unshare(txn, ex, id, &[size / CHUNK_SIZE]);
            }
            queue(txn, ex, id, DataOp::Truncate { size });
            let first_gone = size.div_ceil(CHUNK_SIZE);
            let prefix = keys::chunk_prefix(id);
            let from = keys::chunk(id, first_gone);
            for (k, v) in txn.scan(&from, &keys::prefix_end(&prefix), usize::MAX) {
                if let Some(b) = keys::chunk_blob(&v) {
                    drop_ref(txn, b);
                }
                txn.delete(k);
            }
        }
    }
    n.attrs.size = size;
    n.attrs.alloc_size = alloc_for(size).max(if size >= old { n.attrs.alloc_size } else { 0 });
    Ok(())
}

fn alloc_for(size: u64) -> u64 {
    size.div_ceil(4096) * 4096
}

fn write<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    obj: ObjRef,
    offset: u64,
    data: &WriteData,
    append: bool,
) -> OpResult {
    let cred = ex.batch.cred.clone();
    let now = ex.batch.now_ns;
    let mut n = get_node(txn, resolve(ex, obj)?)?;
    match n.attrs.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(FsError::IsDir),
        _ => return Err(FsError::Invalid),
    }
    if !may_node(txn, &cred, &n, 2) && cred.uid != n.attrs.uid {
        return Err(FsError::Access);
    }
    let before = n.attrs.clone();
    let offset = if append { n.attrs.size } else { offset };
    let len = data.len();
    let end = offset.checked_add(len).ok_or(FsError::FileTooBig)?;
    if end > FILE_SIZE_MAX {
        return Err(FsError::FileTooBig);
    }
    let id = n.attrs.id;
    match data {
        WriteData::Bytes(bytes) if !n.chunked && end <= INLINE_MAX => {
            let mut cur = txn.get(&keys::data(id)).unwrap_or_default();
            cur.resize(cur.len().max(end as usize), 0);
            cur[offset as usize..end as usize].copy_from_slice(bytes);
            txn.put(keys::data(id), cur);
        }
        _ => {
            if n.chunked {
                layers::cow(txn, ex, id);
            }
            make_chunked(txn, ex, &mut n);
            if len > 0 {
                attach_chunks(txn, ex, id, offset, len);
                let op = match data {
                    WriteData::Bytes(b) => DataOp::WriteInline { offset, data: b.clone() },
                    WriteData::Logged { lsn, len } => DataOp::WriteExtent {
                        offset,
                        extent: ExtentId { origin: ExtentId::LEGACY_LOCAL, seq: *lsn },
                        len: *len,
                    },
                    WriteData::Extent { extent, len } => DataOp::WriteExtent { offset, extent: *extent, len: *len },
                };
                queue(txn, ex, id, op);
            }
        }
    }
    written_to(&mut n.attrs, end, &cred, now);
    put_node(txn, &n);
    Ok(OpOutput::Written { count: len, offset, before, attrs: n.attrs })
}

/// What data written up to `end` does to a file's attributes: the size
/// grows to it, the allocation follows, a writer other than root clears
/// set-uid/set-gid (POSIX write(2)), mtime and ctime move.
fn written_to(attrs: &mut Attrs, end: u64, cred: &duet_fs::Credentials, now: TimeNs) {
    if end > attrs.size {
        attrs.size = end;
    }
    attrs.alloc_size = attrs.alloc_size.max(alloc_for(attrs.size));
    if cred.uid != 0 && attrs.mode & 0o6000 != 0 {
        attrs.mode &= !0o6000;
    }
    touch(attrs, now, true);
}

/// Drops one link to `n` (already unlinked from its directory).
fn unlink_node<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, mut n: Node) -> Option<Attrs> {
    let now = ex.batch.now_ns;
    let is_dir = n.attrs.ftype == FileType::Directory;
    n.attrs.nlink = if is_dir { 0 } else { n.attrs.nlink.saturating_sub(1) };
    if n.attrs.nlink > 0 {
        touch(&mut n.attrs, now, false);
        put_node(txn, &n);
        return Some(n.attrs);
    }
    let id = n.attrs.id;
    txn.delete(keys::node(id));
    txn.delete(keys::data(id));
    if n.has_acl {
        txn.delete(keys::acl(id));
    }
    clone::gone(txn, id);
    streams::drop_all(txn, ex, id);
    if n.may_have_eas {
        let eas = keys::ea_prefix(id);
        for (k, _) in txn.scan(&eas, &keys::prefix_end(&eas), usize::MAX) {
            txn.delete(k);
        }
    }
    if n.chunked {
        layers::cow(txn, ex, id);
        let prefix = keys::chunk_prefix(id);
        for (k, v) in txn.scan(&prefix, &keys::prefix_end(&prefix), usize::MAX) {
            if let Some(b) = keys::chunk_blob(&v) {
                drop_ref(txn, b);
            }
            txn.delete(k);
        }
        // RUFS-style: the chunks are detached in the same transaction that
        // unlinks the file; the destager reclaims them in data order.
        txn.put(keys::detached(id), Vec::new());
        queue(txn, ex, id, DataOp::Reclaim);
    }
    None
}

fn remove<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    dir: ObjRef,
    name: &str,
    dir_only: Option<bool>,
) -> OpResult {
    let cred = ex.batch.cred.clone();
    let now = ex.batch.now_ns;
    let mut d = load_dir(txn, ex, dir)?;
    check_name(name)?;
    let Some(e) = get_edge(txn, d.attrs.id, name) else {
        // Whoever may not change the directory learns nothing about its
        // names.
        return Err(if may_node(txn, &cred, &d, 3) { FsError::NotFound } else { FsError::Access });
    };
    let n = get_node(txn, e.child)?;
    if !may_unlink(txn, &cred, &d, &n) {
        return Err(FsError::Access);
    }
    let is_dir = n.attrs.ftype == FileType::Directory;
    match dir_only {
        Some(true) if !is_dir => return Err(FsError::NotDir),
        Some(false) if is_dir => return Err(FsError::IsDir),
        _ => {}
    }
    if sticky_denies(&cred, &d.attrs, &n.attrs) {
        return Err(FsError::Perm);
    }
    if is_dir && !dir_is_empty(txn, n.attrs.id) {
        return Err(FsError::NotEmpty);
    }
    let before = d.attrs.clone();
    txn.delete(keys::edge(d.attrs.id, name));
    clone::unlinked(txn, d.attrs.id, name);
    let target = unlink_node(txn, ex, n);
    if is_dir {
        d.attrs.nlink = d.attrs.nlink.saturating_sub(1);
    }
    touch(&mut d.attrs, now, true);
    put_node(txn, &d);
    Ok(OpOutput::Dirs { changed: vec![(before, d.attrs)], target })
}

fn sticky_denies(cred: &duet_fs::Credentials, dir: &Attrs, child: &Attrs) -> bool {
    dir.mode & 0o1000 != 0 && cred.uid != 0 && cred.uid != dir.uid && cred.uid != child.uid
}

/// The node records of `ids`, in their order, in one read: a range scan
/// when the ids are dense (a directory's files made one after another: one
/// seek and a step per node instead of a lookup each), else one MultiGet.
fn get_nodes<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ids: &[NodeId]) -> Vec<Option<Vec<u8>>> {
    let (Some(&lo), Some(&hi)) = (ids.iter().min(), ids.iter().max()) else {
        return Vec::new();
    };
    if ids.len() >= 8 && hi - lo < 2 * ids.len() as u64 {
        let mut end = keys::node(hi);
        end.push(0);
        // Node keys are the prefix and the id, big-endian: in id order.
        let rows: Vec<(NodeId, Vec<u8>)> = txn
            .scan(&keys::node(lo), &end, usize::MAX)
            .into_iter()
            .filter_map(|(k, v)| Some((keys::u64_at(&k, 1)?, v)))
            .collect();
        let at = |id: NodeId| rows.binary_search_by_key(&id, |(i, _)| *i).ok();
        return ids.iter().map(|&id| at(id).map(|i| rows[i].1.clone())).collect();
    }
    let keys: Vec<Vec<u8>> = ids.iter().map(|&id| keys::node(id)).collect();
    txn.get_many(&keys)
}

/// The extended attributes of a node, in name order; none without a read
/// when its marker says it has none.
fn node_eas<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, n: &Node) -> Vec<(String, Vec<u8>)> {
    if n.may_have_eas {
        list_eas(txn, n.attrs.id)
    } else {
        Vec::new()
    }
}

/// The extended attributes of a node, in name order.
fn list_eas<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Vec<(String, Vec<u8>)> {
    if let Some(eas) = clone::eas(txn, id) {
        return eas;
    }
    let prefix = keys::ea_prefix(id);
    txn.scan(&prefix, &keys::prefix_end(&prefix), usize::MAX)
        .into_iter()
        .map(|(k, v)| (String::from_utf8_lossy(&k[prefix.len()..]).into_owned(), v))
        .collect()
}

/// The most extended-attribute bytes (names and values) one file holds, as
/// NTFS's 64 KiB.
const EA_TOTAL_MAX: usize = 65536;

/// The first entry of `dir` (in name order) whose name equals `name`
/// ignoring case (`str::to_lowercase`). A plain directory is read only in
/// the few key ranges that can hold such a name ([`caseless_ranges`]), so
/// an SMB CREATE of a new name costs a few seeks whatever the directory
/// holds (it read every entry: O(n) per CREATE, O(n^2) to fill a
/// directory). A clone's directory, whose entries merge its origin's
/// layers, is still read a page at a time.
fn find_caseless<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, dir: NodeId, name: &str) -> Option<(String, Edge)> {
    let want = name.to_lowercase();
    let prefix = keys::edge_prefix(dir);
    if clone::is_clone_id(dir) {
        return find_caseless_paged(txn, dir, &prefix, &want);
    }
    let mut best: Option<(Vec<u8>, Vec<u8>)> = None;
    let ranges = caseless_ranges(&prefix, name);
    let firsts = txn.scan_ranges(&ranges, 1024);
    for ((_, end), mut rows) in ranges.iter().zip(firsts) {
        loop {
            let full = rows.len() == 1024;
            let last = rows.last().map(|(k, _)| k.clone());
            if let Some(hit) = rows
                .into_iter()
                .find(|(k, _)| String::from_utf8_lossy(&k[prefix.len()..]).to_lowercase() == want)
            {
                // The ranges are disjoint but not in key order: keep the
                // first match in name order, as a whole scan would.
                if best.as_ref().is_none_or(|(b, _)| hit.0 < *b) {
                    best = Some(hit);
                }
                break;
            }
            match last {
                Some(mut k) if full => {
                    k.push(0);
                    rows = txn.scan(&k, end, 1024);
                }
                _ => break,
            }
        }
    }
    let (k, v) = best?;
    Some((String::from_utf8_lossy(&k[prefix.len()..]).into_owned(), decode(&v)?))
}

/// [`find_caseless`] by reading every entry of `dir`, a page at a time.
fn find_caseless_paged<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, dir: NodeId, prefix: &[u8], want: &str) -> Option<(String, Edge)> {
    let end = keys::prefix_end(prefix);
    let mut start = prefix.to_vec();
    loop {
        let rows = match clone::edge_rows(txn, dir, &start, usize::MAX) {
            Some(rows) => rows,
            None => txn.scan(&start, &end, 1024),
        };
        let full = rows.len() == 1024;
        for (k, v) in &rows {
            let entry = String::from_utf8_lossy(&k[prefix.len()..]);
            if entry.to_lowercase() == want {
                return Some((entry.into_owned(), decode(v)?));
            }
        }
        if !full {
            return None;
        }
        let (last, _) = rows.last()?;
        start = last.clone();
        start.push(0);
    }
}

/// How many spellings of a name's leading letters [`caseless_ranges`]
/// follows before it reads whole ranges.
const CASELESS_SPELLINGS: usize = 8;

/// Key ranges `[start, end)` under a directory's edge `prefix` that hold
/// every entry whose name equals `name` ignoring case (`str::to_lowercase`).
///
/// Along `name`'s leading ASCII characters, an entry that matches has at
/// each position either an ASCII character, which lower-cases to the same
/// one only as one of its two spellings (one for a non-letter), or a
/// non-ASCII one (first byte 0x80 or more). Outside ASCII only KELVIN SIGN
/// (U+212A, to `k`) and LATIN CAPITAL LETTER I WITH DOT ABOVE (U+0130, to
/// `i` and U+0307) lower-case to something that starts with an ASCII
/// character (`caseless_tests::only_two_non_ascii_lower_to_ascii` checks
/// all of Unicode), so the non-ASCII range after a spelling is read only
/// where `name` has a `k` or an `i`. Every character's lower case is at
/// least one character, so a name followed to its end matches only its
/// spellings exactly; where following stops (a non-ASCII character, or
/// more than [`CASELESS_SPELLINGS`] spellings) every entry under each
/// spelling so far is read.
fn caseless_ranges(prefix: &[u8], name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut ranges = Vec::new();
    let mut spellings = vec![prefix.to_vec()];
    let mut followed = 0;
    for c in name.chars() {
        if !c.is_ascii() {
            break;
        }
        let (lower, upper) = (c.to_ascii_lowercase() as u8, c.to_ascii_uppercase() as u8);
        let both = [lower, upper];
        let forms = &both[..if lower == upper { 1 } else { 2 }];
        if spellings.len() * forms.len() > CASELESS_SPELLINGS {
            break;
        }
        if lower == b'k' || lower == b'i' {
            for s in &spellings {
                let mut from = s.clone();
                from.push(0x80);
                ranges.push((from, keys::prefix_end(s)));
            }
        }
        spellings = spellings
            .iter()
            .flat_map(|s| {
                forms.iter().map(move |&b| {
                    let mut t = s.clone();
                    t.push(b);
                    t
                })
            })
            .collect();
        followed += 1;
    }
    let whole = followed == name.chars().count();
    for s in spellings {
        let end = if whole {
            let mut e = s.clone();
            e.push(0);
            e
        } else {
            keys::prefix_end(&s)
        };
        ranges.push((s, end));
    }
    ranges
}

fn dir_is_empty<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> bool {
    let prefix = keys::edge_prefix(id);
    if let Some(rows) = clone::edge_rows(txn, id, &prefix, 1) {
        return rows.is_empty();
    }
    txn.scan(&prefix, &keys::prefix_end(&prefix), 1).is_empty()
}

#[allow(clippy::too_many_arguments)]
fn rename<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    src_dir: ObjRef,
    src_name: &str,
    dst_dir: ObjRef,
    dst_name: &str,
    replace: bool,
) -> OpResult {
    let cred = ex.batch.cred.clone();
    let now = ex.batch.now_ns;
    check_name(src_name)?;
    check_name(dst_name)?;
    let sd = load_dir(txn, ex, src_dir)?;
    let dd = load_dir(txn, ex, dst_dir)?;
    if !may_node(txn, &cred, &dd, 3) {
        return Err(FsError::Access);
    }
    let Some(se) = get_edge(txn, sd.attrs.id, src_name) else {
        return Err(if may_node(txn, &cred, &sd, 3) { FsError::NotFound } else { FsError::Access });
    };
    let mut moving = get_node(txn, se.child)?;
    // Moving a name away removes it from its directory.
    if !may_unlink(txn, &cred, &sd, &moving) {
        return Err(FsError::Access);
    }
    if sticky_denies(&cred, &sd.attrs, &moving.attrs) {
        return Err(FsError::Perm);
    }
    let is_dir = moving.attrs.ftype == FileType::Directory;
    if moving.zone != dd.zone {
        // Each share's layers hold their own nodes only.
        return Err(FsError::CrossDevice);
    }
    if let Some(de) = get_edge(txn, dd.attrs.id, dst_name) {
        if de.child == se.child {
            // Both names are links to the same object: nothing to do.
            return Ok(OpOutput::Dirs { changed: Vec::new(), target: Some(moving.attrs) });
        }
        if !replace {
            return Err(FsError::Exists);
        }
        let victim = get_node(txn, de.child)?;
        let victim_dir = victim.attrs.ftype == FileType::Directory;
        if is_dir && !victim_dir {
            return Err(FsError::NotDir);
        }
        if !is_dir && victim_dir {
            return Err(FsError::IsDir);
        }
        if victim_dir && !dir_is_empty(txn, victim.attrs.id) {
            return Err(FsError::NotEmpty);
        }
        if !may_unlink(txn, &cred, &dd, &victim) {
            return Err(FsError::Access);
        }
        if sticky_denies(&cred, &dd.attrs, &victim.attrs) {
            return Err(FsError::Perm);
        }
    }
    if is_dir {
        // A directory may not move below itself.
        let mut cur = dd.attrs.id;
        let mut hops = 0;
        while cur != ROOT_ID && hops < 100_000 {
            if cur == moving.attrs.id {
                return Err(FsError::RenameIntoSelf);
            }
            cur = get_node(txn, cur)?.parent;
            hops += 1;
        }
        if dd.attrs.id == moving.attrs.id {
            return Err(FsError::RenameIntoSelf);
        }
    }
    // Now apply: everything below is infallible.
    let mut changed = Vec::new();
    if let Some(de) = get_edge(txn, dd.attrs.id, dst_name) {
        let victim = get_node(txn, de.child)?;
        let victim_dir = victim.attrs.ftype == FileType::Directory;
        unlink_node(txn, ex, victim);
        if victim_dir {
            let mut d = get_node(txn, dd.attrs.id)?;
            d.attrs.nlink = d.attrs.nlink.saturating_sub(1);
            put_node(txn, &d);
        }
    }
    txn.delete(keys::edge(sd.attrs.id, src_name));
    clone::unlinked(txn, sd.attrs.id, src_name);
    if is_dir {
        moving.parent = dd.attrs.id;
    }
    touch(&mut moving.attrs, now, false);
    put_node(txn, &moving);
    txn.put_record(keys::edge(dd.attrs.id, dst_name), &edge_for(&moving));
    clone::linked(txn, dd.attrs.id, dst_name);
    let same = sd.attrs.id == dd.attrs.id;
    let mut s = get_node(txn, sd.attrs.id)?;
    let s_before = sd.attrs.clone();
    if is_dir && !same {
        s.attrs.nlink = s.attrs.nlink.saturating_sub(1);
    }
    touch(&mut s.attrs, now, true);
    put_node(txn, &s);
    changed.push((s_before, s.attrs.clone()));
    if !same {
        let mut d = get_node(txn, dd.attrs.id)?;
        if is_dir {
            d.attrs.nlink += 1;
        }
        touch(&mut d.attrs, now, true);
        put_node(txn, &d);
        changed.push((dd.attrs.clone(), d.attrs));
    }
    Ok(OpOutput::Dirs { changed, target: Some(moving.attrs) })
}

/// The data records of `file` not yet destaged that can change a byte of
/// `[start, end)`, oldest first (and, where the index does not say, others:
/// the caller filters with [`DataOp::touches`]). The scan starts past this
/// node's destage progress (`l destaged_upto`): below it there are only
/// deletion marks.
pub fn overlay<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, file: NodeId, start: u64, end: u64) -> Vec<(u64, DataRecord)> {
    let prefix = keys::dq_by_file_prefix(file);
    let first = txn
        .get(&keys::local("destaged_upto"))
        .and_then(|v| v.as_slice().try_into().ok().map(u64::from_be_bytes))
        .unwrap_or(0)
        .saturating_add(1);
    let mut out = Vec::new();
    for (k, span) in txn.scan(&keys::dq_by_file(file, first), &keys::prefix_end(&prefix), usize::MAX) {
        if !keys::dq_span_touches(&span, start, end) {
            continue;
        }
        if let Some(dseq) = keys::u64_at(&k, 9) {
            if let Some(rec) = txn.get(&keys::dq(dseq)).and_then(|v| decode::<DataRecord>(&v)) {
                out.push((dseq, rec));
            }
        }
    }
    out
}

/// Looks up a share record.
pub fn get_share<R: KvRead + ?Sized>(kv: &R, name: &str) -> Option<ShareRecord> {
    kv.get(&keys::share(name)).and_then(|v| ShareRecord::decode(&v))
}

/// Looks up a user record.
pub fn get_user<R: KvRead + ?Sized>(kv: &R, name: &str) -> Option<UserRecord> {
    kv.get(&keys::user(name)).and_then(|v| decode(&v))
}

#[cfg(test)]
mod caseless_tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn caseless_lookup_in_memory() {
        let db: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut txn = Txn::new(&db);
        apply(&mut txn, &Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] });
        let mut b = Batch::new(duet_fs::Credentials::root(), 5);
        b.push(Op::Create {
            dir: ObjRef::Id(ROOT_ID),
            name: "Docs".into(),
            kind: CreateKind::Directory,
            attrs: Default::default(),
            if_exists: IfExists::Fail,
        });
        b.push(Op::LookupCaseless { dir: ObjRef::Id(ROOT_ID), name: "DOCS".into() });
        b.push(Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: "Docs".into() });
        let out = execute(&mut txn, &b);
        assert!(matches!(&out.results[1], Ok(OpOutput::Found { name, .. }) if name == "Docs"), "{:?}", out.results);
    }

    /// A store of `names` in the root directory (and nothing else of
    /// interest), made through the machine.
    fn root_with(names: &[String]) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut db: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let writes = {
            let mut txn = Txn::new(&db);
            apply(&mut txn, &Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] });
            let mut b = Batch::new(duet_fs::Credentials::root(), 5);
            for n in names {
                b.push(Op::Create {
                    dir: ObjRef::Id(ROOT_ID),
                    name: n.clone(),
                    kind: CreateKind::File,
                    attrs: Default::default(),
                    if_exists: IfExists::Fail,
                });
            }
            let out = execute(&mut txn, &b);
            assert!(out.results.iter().all(|r| r.is_ok()), "{:?}", out.results);
            txn.into_writes()
        };
        for (k, v) in writes {
            match v {
                Some(v) => db.insert(k, v),
                None => db.remove(&k),
            };
        }
        db
    }

    /// The lookup by ranges finds what reading the whole directory finds,
    /// for names whose case folds across ASCII and non-ASCII characters.
    #[test]
    fn caseless_ranges_find_what_a_whole_scan_finds() {
        let names: Vec<String> = [
            "Docs", "docs", "kelvin", "\u{212A}ELVIN2", "\u{130}stanbul", "istanbul2", "i\u{307}x", "f00001.bin",
            "F00002.BIN", "IMG_0001.JPG", "img_0002.jpg", "straße", "STRASSE", "ΣΊΣΥΦΟΣ", "a", "ab", "aBc",
            "abcdefghijklmnop", "ABCDEFGHIJKLMNOPQ", "k", "\u{212A}", "zz\u{212A}", "Ωmega", "x\u{212A}y",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let db = root_with(&names);
        let mut queries: Vec<String> = Vec::new();
        for n in &names {
            queries.extend([n.clone(), n.to_lowercase(), n.to_uppercase()]);
        }
        queries.extend(
            ["KELVIN2", "kelvin2", "İSTANBUL", "i\u{307}stanbul", "I\u{307}X", "ABCDEFGHIJKLMNOPq", "K", "ZZk", "XKY", "nope", "sísyφος"]
                .iter()
                .map(|s| s.to_string()),
        );
        let prefix = keys::edge_prefix(ROOT_ID);
        for q in &queries {
            let mut txn = Txn::new(&db);
            let got = find_caseless(&mut txn, ROOT_ID, q).map(|(n, e)| (n, e.child));
            let want = find_caseless_paged(&mut txn, ROOT_ID, &prefix, &q.to_lowercase()).map(|(n, e)| (n, e.child));
            assert_eq!(got, want, "lookup of {q:?}");
        }
        // Some of them do match across scripts.
        let mut txn = Txn::new(&db);
        assert_eq!(find_caseless(&mut txn, ROOT_ID, "kelvin2").map(|(n, _)| n).as_deref(), Some("\u{212A}ELVIN2"));
        assert_eq!(find_caseless(&mut txn, ROOT_ID, "I\u{307}STANBUL").map(|(n, _)| n).as_deref(), Some("\u{130}stanbul"));
    }

    /// `caseless_ranges` rests on this: outside ASCII, only these two
    /// characters lower-case to something that starts with ASCII.
    #[test]
    fn only_two_non_ascii_lower_to_ascii() {
        let found: Vec<char> = (0x80..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| c.to_lowercase().next().is_some_and(|l| l.is_ascii()))
            .collect();
        assert_eq!(found, vec!['\u{130}', '\u{212A}']);
        // str::to_lowercase differs from char::to_lowercase only for a
        // final capital sigma, which is not ASCII either way.
    }

    /// Counts the pairs a scan hands out.
    struct Counting(BTreeMap<Vec<u8>, Vec<u8>>, std::cell::Cell<usize>);

    impl KvRead for Counting {
        fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
            self.0.get(key).cloned()
        }
        fn scan(&self, start: &[u8], end: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
            let rows = self.0.scan(start, end, limit);
            self.1.set(self.1.get() + rows.len());
            rows
        }
    }

    /// A caseless lookup (every SMB CREATE of a new name makes one) reads
    /// a few entries, not the whole directory: smbclient's mput of 1,000
    /// files read half a million entries.
    #[test]
    fn caseless_lookup_reads_few_entries_of_a_big_directory() {
        let names: Vec<String> = (0..2000).map(|i| format!("f{i:05}.bin")).collect();
        let db = Counting(root_with(&names), std::cell::Cell::new(0));
        for (q, hit) in [("f02000.bin", None), ("F00500.BIN", Some("f00500.bin")), ("IMG_0001.JPG", None)] {
            db.1.set(0);
            let mut txn = Txn::new(&db);
            assert_eq!(find_caseless(&mut txn, ROOT_ID, q).map(|(n, _)| n).as_deref(), hit, "{q}");
            assert!(db.1.get() <= 4, "{q}: {} entries read", db.1.get());
        }
        // A new name through the machine's create, in the same directory.
        db.1.set(0);
        let mut txn = Txn::new(&db);
        let mut b = Batch::new(duet_fs::Credentials::root(), 5);
        b.push(Op::LookupCaseless { dir: ObjRef::Id(ROOT_ID), name: "F01999.BIN".into() });
        let out = execute(&mut txn, &b);
        assert!(matches!(&out.results[0], Ok(OpOutput::Found { name, .. }) if name == "f01999.bin"), "{:?}", out.results);
        assert!(db.1.get() <= 4, "{} entries read", db.1.get());
    }
}
