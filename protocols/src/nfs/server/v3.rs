//! NFSv3 (RFC 1813): every call is one batch. Post-op attributes and wcc
//! data come from the same batch's results (`OpOutput` carries attributes
//! before and after), never from an extra batch. The batch does not stop
//! on error, so a failed operation still gets the directory attributes
//! its reply carries.
//!
//! WRITE answers FILE_SYNC whatever `stable` asked (a duet reply means
//! durable), except an UNSTABLE write to an export of `protocol`
//! durability (`ExportEntry::protocol_durability`): it is answered
//! UNSTABLE once applied, and COMMIT (RFC 1813 3.3.21) makes it durable.
//! Every other call, metadata included, is durable before its reply. The
//! write verifier changes at every daemon start (a client whose unstable
//! writes a crash may have lost then sends them again).
//!
//! Changes SMB clients may cache against (issue 13, shared with NFSv4 in
//! `server::breaks`): WRITE and SETATTR of the size break other holders'
//! read and write caching; REMOVE and RENAME (the source and a target it
//! replaces) break handle caching. While a break the holder must
//! acknowledge (of W or H) is outstanding the call answers
//! NFS3ERR_JUKEBOX (RFC 1813 2.6) and the client retries; a break of read
//! caching alone needs no wait. WRITE and SETATTR name the node by handle
//! and ask the lock table before the batch; REMOVE and RENAME name a
//! directory and a name (as does an UNCHECKED CREATE setting the size of
//! a file that may exist: a write), so when any grant exists their batch
//! is first a
//! hidden lookup ([`Kind::Gate`]), and the real batch runs only once the
//! nodes found need no wait. Without grants nothing changes.

use duet_fs::{
    Batch, CreateKind, Credentials, FileType, IfExists, NodeId, ObjRef, Op, OpOutput, OpResult,
    SetAttrs, SetTime, WriteData,
};

use super::attr::{fattr3, rdev_of, sattr3, time3, wcc_attr};
use super::breaks::{any_delete_pending, any_grants, break_found, break_node, delete_pending_found, BreakKind};
use super::cookies::{make_cookie, Resume, MAX_POSITION};
use super::errors::nfs3_status;
use super::{
    accepted, reply_with, squash, CallCtx, Event, ExportEntry, Exports, FileHandle, NfsServer,
    Pending,
};
use crate::nfs::nfs3::*;
use crate::nfs::rpc::AcceptedReplyData;
use crate::nfs::xdr::{LinkedList, Name, Opaque, XdrEncode, XdrReader, XdrWriter};

pub(crate) struct V3Pending {
    conn: super::ConnId,
    xid: u32,
    fsid: u64,
    cred: Credentials,
    read_only: bool,
    kind: Kind,
}

enum Kind {
    GetAttr,
    SetAttrGuard {
        guard: NfsTime3,
        batch: Batch,
    },
    SetAttr,
    Lookup,
    Access(u32),
    ReadLink,
    Read,
    /// `unstable`: answered before durable (UNSTABLE, a `protocol` export).
    Write { unstable: bool },
    Create {
        excl: Option<[u8; 8]>,
    },
    Remove,
    Rename,
    Link,
    ReadDir {
        plus: bool,
        skip: u64,
        base: u64,
        dir: NodeId,
        budget: usize,
        dirbudget: usize,
        dots: Dots,
    },
    FsStat,
    FsInfo,
    PathConf,
    Commit,
    /// The hidden lookups (batch op indices) of the files a REMOVE,
    /// RENAME or size-setting CREATE of `proc_` affects, and what it does
    /// to them; `then` is the call's own batch and kind, run once no break
    /// must be waited for.
    Gate {
        proc_: u32,
        ops: Vec<usize>,
        kind: BreakKind,
        then: Box<(Batch, Kind)>,
    },
}

/// The lock-table holder an NFSv3 call breaks as. NFSv3 keeps no client
/// state and holds no grant, so every NFSv3 caller is one holder of the
/// NFSv3-side protocol (NLM's, the table's name for NFSv3); SMB grants are
/// never its own.
fn opener() -> duet_locks::Holder {
    duet_locks::Holder::new(duet_locks::Protocol::Nlm, 0, 0)
}

fn tag(proc_: u32) -> &'static str {
    const TAGS: [&str; 22] = [
        "nfs3.null",
        "nfs3.getattr",
        "nfs3.setattr",
        "nfs3.lookup",
        "nfs3.access",
        "nfs3.readlink",
        "nfs3.read",
        "nfs3.write",
        "nfs3.create",
        "nfs3.mkdir",
        "nfs3.symlink",
        "nfs3.mknod",
        "nfs3.remove",
        "nfs3.rmdir",
        "nfs3.rename",
        "nfs3.link",
        "nfs3.readdir",
        "nfs3.readdirplus",
        "nfs3.fsstat",
        "nfs3.fsinfo",
        "nfs3.pathconf",
        "nfs3.commit",
    ];
    TAGS.get(proc_ as usize).copied().unwrap_or("nfs3")
}

/// How many zero words the resfail of `proc_` takes when nothing is known
/// (post_op_attr: 1, wcc_data: 2).
fn fail_words(proc_: u32) -> usize {
    match proc_ {
        proc3::GETATTR => 0,
        proc3::SETATTR
        | proc3::WRITE
        | proc3::CREATE
        | proc3::MKDIR
        | proc3::SYMLINK
        | proc3::MKNOD => 2,
        proc3::REMOVE | proc3::RMDIR | proc3::COMMIT => 2,
        proc3::RENAME => 4,
        proc3::LINK => 3,
        _ => 1,
    }
}

fn fail(ctx: &CallCtx, proc_: u32, status: Nfsstat3) -> Event {
    reply_with(ctx.conn, ctx.xid, |w| {
        status.encode(w);
        for _ in 0..fail_words(proc_) {
            w.put_u32(0);
        }
    })
}

fn name_of(n: &Name<'_, NFS3_MAX_NAME>) -> Result<String, Nfsstat3> {
    let s = std::str::from_utf8(n.0).map_err(|_| Nfsstat3::INVAL)?;
    if s.is_empty() {
        return Err(Nfsstat3::ACCES);
    }
    Ok(s.to_string())
}

/// A client handle to (export, node).
fn resolve(
    srv: &NfsServer,
    list: &[ExportEntry],
    ctx: &CallCtx,
    fh: &[u8],
) -> Result<(ExportEntry, NodeId), Nfsstat3> {
    match FileHandle::decode(srv.cfg.handle_key, fh) {
        Err(_) | Ok(FileHandle::Pseudo) => Err(Nfsstat3::BADHANDLE),
        Ok(FileHandle::Object { fsid, id }) => {
            let e = list
                .iter()
                .find(|e| e.fsid == fsid)
                .ok_or(Nfsstat3::STALE)?;
            if !e.allows(ctx.peer) || !e.allows_uid(ctx.cred.uid) {
                return Err(Nfsstat3::ACCES);
            }
            Ok((e.clone(), id))
        }
    }
}

pub(super) fn call(
    srv: &mut NfsServer,
    ctx: &CallCtx,
    proc_: u32,
    mut r: XdrReader<'_>,
    exports: &dyn Exports,
) -> Vec<Event> {
    let args = match Nfs3Args::decode(proc_, &mut r) {
        Ok(a) => a,
        Err(Nfs3ArgsError::ProcUnavail(_)) => {
            return vec![accepted(ctx.conn, ctx.xid, AcceptedReplyData::ProcUnavail)]
        }
        Err(Nfs3ArgsError::Garbage(e)) => {
            if !e.rpc_garbage_args() {
                return vec![fail(ctx, proc_, e.nfs3_status())];
            }
            return vec![accepted(ctx.conn, ctx.xid, AcceptedReplyData::GarbageArgs)];
        }
    };
    if let Nfs3Args::Null = args {
        return vec![reply_with(ctx.conn, ctx.xid, |_| {})];
    }
    let list = exports.exports();
    match build(srv, ctx, &list, &args) {
        Ok((batch, p)) => vec![srv.submit(batch, tag(proc_), Pending::V3(p))],
        Err(status) => vec![fail(ctx, proc_, status)],
    }
}

/// Which of "." and ".." a READDIR reply starts with. Like other NFSv3
/// servers duet lists them (cookies 1 and 2; the listing's own cookies
/// are at least 2^32): clients show what the server returns, and `ls -a`
/// expects them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dots {
    None,
    /// ".." only (resuming after cookie 1).
    DotDot {
        parent_op: bool,
    },
    /// "." and "..". `parent_op`: the batch's second operation looks the
    /// parent up; otherwise the directory is the export root, its own "..".
    Both {
        parent_op: bool,
    },
}

fn build(
    srv: &mut NfsServer,
    ctx: &CallCtx,
    list: &[ExportEntry],
    args: &Nfs3Args<'_>,
) -> Result<(Batch, V3Pending), Nfsstat3> {
    use Nfs3Args as A;
    let fh: &[u8] = match args {
        A::Null => return Err(Nfsstat3::SERVERFAULT),
        A::GetAttr(a) => a.object.0,
        A::SetAttr(a) => a.object.0,
        A::Lookup(a) => a.what.dir.0,
        A::Access(a) => a.object.0,
        A::ReadLink(a) => a.symlink.0,
        A::Read(a) => a.file.0,
        A::Write(a) => a.file.0,
        A::Create(a) => a.where_.dir.0,
        A::Mkdir(a) => a.where_.dir.0,
        A::Symlink(a) => a.where_.dir.0,
        A::Mknod(a) => a.where_.dir.0,
        A::Remove(a) | A::Rmdir(a) => a.object.dir.0,
        A::Rename(a) => a.from.dir.0,
        A::Link(a) => a.file.0,
        A::ReadDir(a) => a.dir.0,
        A::ReadDirPlus(a) => a.dir.0,
        A::FsStat(a) | A::FsInfo(a) | A::PathConf(a) => a.fsroot.0,
        A::Commit(a) => a.file.0,
    };
    let (export, id) = resolve(srv, list, ctx, fh)?;
    let cred = squash(&ctx.cred, &export);
    let mut b = Batch::new(cred.clone(), ctx.now_ns);
    b.stop_on_error = false;
    b.read_only = export.read_only;
    let obj = ObjRef::Id(id);
    // A change of the data breaks others' read and write caching; write
    // caching must be flushed first (RFC 1813 2.6: JUKEBOX, try again).
    let changes_data = match args {
        A::Write(_) => true,
        A::SetAttr(a) => a.new_attributes.size.is_some(),
        _ => false,
    };
    if changes_data && break_node(srv, id, &opener(), BreakKind::write(), ctx.now_ns) {
        return Err(Nfsstat3::JUKEBOX);
    }
    // Hidden lookups of the files (and directories: RMDIR) a REMOVE,
    // RMDIR or RENAME takes away.
    let gated = matches!(args, A::Remove(_) | A::Rmdir(_) | A::Rename(_) | A::Create(_)) && any_grants(srv);
    let mut looks = Vec::new();
    let mut gate_kind = BreakKind::namespace();
    let kind = match args {
        A::Null => return Err(Nfsstat3::SERVERFAULT),
        A::GetAttr(_) => {
            b.push(Op::GetAttr { obj });
            Kind::GetAttr
        }
        A::SetAttr(a) => {
            let set = sattr3(&a.new_attributes);
            match a.guard {
                Some(guard) => {
                    // The guard needs the ctime before the change: a first
                    // batch reads it, the second sets (RFC 1813 3.3.2).
                    let mut second = b.clone();
                    second.push(Op::SetAttr { obj, attrs: set });
                    b.push(Op::GetAttr { obj });
                    Kind::SetAttrGuard {
                        guard,
                        batch: second,
                    }
                }
                None => {
                    b.push(Op::SetAttr { obj, attrs: set });
                    Kind::SetAttr
                }
            }
        }
        A::Lookup(a) => {
            let mut name = name_of(&a.what.name)?;
            if name == ".." && id == export.root {
                name = ".".into();
            }
            b.push(Op::Lookup { dir: obj, name });
            b.push(Op::GetAttr { obj });
            Kind::Lookup
        }
        A::Access(a) => {
            // With the stored DACL, if any (issue 17).
            b.push(Op::GetAcl { obj });
            Kind::Access(a.access)
        }
        A::ReadLink(_) => {
            b.push(Op::ReadLink { obj });
            Kind::ReadLink
        }
        A::Read(a) => {
            b.push(Op::Read {
                obj,
                offset: a.offset,
                len: u64::from(a.count.min(srv.cfg.max_io)),
            });
            Kind::Read
        }
        A::Write(a) => {
            let n = (a.count as usize).min(a.data.0.len());
            if n > srv.cfg.max_io as usize {
                return Err(Nfsstat3::FBIG);
            }
            let append = a.offset == u64::MAX && export.append_extension;
            b.push(Op::Write {
                obj,
                offset: a.offset,
                data: WriteData::Bytes(a.data.0[..n].to_vec()),
                append,
            });
            let unstable = a.stable == StableHow::Unstable && export.protocol_durability;
            b.lazy = unstable;
            Kind::Write { unstable }
        }
        A::Create(a) => {
            let name = name_of(&a.where_.name)?;
            let (attrs, if_exists, excl) = match &a.how {
                CreateHow3::Unchecked(s) => {
                    let s = sattr3(s);
                    let ie = if s.size == Some(0) {
                        IfExists::Truncate
                    } else {
                        IfExists::Open
                    };
                    (s, ie, None)
                }
                CreateHow3::Guarded(s) => (sattr3(s), IfExists::Fail, None),
                CreateHow3::Exclusive(v) => (verf_attrs(v), IfExists::Open, Some(*v)),
            };
            // An UNCHECKED create of an existing file that sets its size
            // changes its data as a SETATTR of the size does.
            if gated && excl.is_none() && attrs.size.is_some() && if_exists != IfExists::Fail {
                looks.push(Op::Lookup {
                    dir: obj,
                    name: name.clone(),
                });
                gate_kind = BreakKind::write();
            } else if any_delete_pending(srv) {
                // A create of a delete-pending name is refused (the gate's
                // lookup finds it), and a lookup that breaks nothing.
                looks.push(Op::Lookup {
                    dir: obj,
                    name: name.clone(),
                });
                gate_kind = BreakKind::none();
            }
            b.push(Op::Create {
                dir: obj,
                name,
                kind: CreateKind::File,
                attrs,
                if_exists,
            });
            b.push(Op::GetAttr { obj });
            Kind::Create { excl }
        }
        A::Mkdir(a) => {
            let name = name_of(&a.where_.name)?;
            b.push(Op::Create {
                dir: obj,
                name,
                kind: CreateKind::Directory,
                attrs: sattr3(&a.attributes),
                if_exists: IfExists::Fail,
            });
            b.push(Op::GetAttr { obj });
            Kind::Create { excl: None }
        }
        A::Symlink(a) => {
            let name = name_of(&a.where_.name)?;
            let target = String::from_utf8(a.symlink.symlink_data.0.to_vec())
                .map_err(|_| Nfsstat3::INVAL)?;
            let kind = CreateKind::Symlink { target };
            b.push(Op::Create {
                dir: obj,
                name,
                kind,
                attrs: sattr3(&a.symlink.symlink_attributes),
                if_exists: IfExists::Fail,
            });
            b.push(Op::GetAttr { obj });
            Kind::Create { excl: None }
        }
        A::Mknod(a) => {
            let name = name_of(&a.where_.name)?;
            let (kind, s) = match &a.what {
                MknodData3::Chr(d) => (
                    CreateKind::CharDevice {
                        rdev: rdev_of(d.spec.specdata1, d.spec.specdata2),
                    },
                    &d.dev_attributes,
                ),
                MknodData3::Blk(d) => (
                    CreateKind::BlockDevice {
                        rdev: rdev_of(d.spec.specdata1, d.spec.specdata2),
                    },
                    &d.dev_attributes,
                ),
                MknodData3::Sock(s) => (CreateKind::Socket, s),
                MknodData3::Fifo(s) => (CreateKind::Fifo, s),
                MknodData3::Other(_) => return Err(Nfsstat3::BADTYPE),
            };
            b.push(Op::Create {
                dir: obj,
                name,
                kind,
                attrs: sattr3(s),
                if_exists: IfExists::Fail,
            });
            b.push(Op::GetAttr { obj });
            Kind::Create { excl: None }
        }
        A::Remove(a) | A::Rmdir(a) => {
            let name = name_of(&a.object.name)?;
            let dir_only = Some(matches!(args, A::Rmdir(_)));
            if gated {
                looks.push(Op::Lookup {
                    dir: obj,
                    name: name.clone(),
                });
            }
            b.push(Op::Remove {
                dir: obj,
                name,
                dir_only,
            });
            b.push(Op::GetAttr { obj });
            Kind::Remove
        }
        A::Rename(a) => {
            let (to_export, to_id) = resolve(srv, list, ctx, a.to.dir.0)?;
            if to_export.fsid != export.fsid {
                return Err(Nfsstat3::XDEV);
            }
            let src_name = name_of(&a.from.name)?;
            let dst_name = name_of(&a.to.name)?;
            if gated {
                looks.push(Op::Lookup {
                    dir: obj,
                    name: src_name.clone(),
                });
                looks.push(Op::Lookup {
                    dir: ObjRef::Id(to_id),
                    name: dst_name.clone(),
                });
            }
            b.push(Op::Rename {
                src_dir: obj,
                src_name,
                dst_dir: ObjRef::Id(to_id),
                dst_name,
                replace: true,
            });
            b.push(Op::GetAttr { obj });
            b.push(Op::GetAttr {
                obj: ObjRef::Id(to_id),
            });
            Kind::Rename
        }
        A::Link(a) => {
            let (dir_export, dir_id) = resolve(srv, list, ctx, a.link.dir.0)?;
            if dir_export.fsid != export.fsid {
                return Err(Nfsstat3::XDEV);
            }
            let name = name_of(&a.link.name)?;
            b.push(Op::Link {
                obj,
                dir: ObjRef::Id(dir_id),
                name,
            });
            b.push(Op::GetAttr { obj });
            b.push(Op::GetAttr {
                obj: ObjRef::Id(dir_id),
            });
            Kind::Link
        }
        A::ReadDir(a) => readdir(
            srv,
            &mut b,
            id,
            id == export.root,
            a.cookie,
            &a.cookieverf,
            a.count as usize,
            a.count as usize,
            false,
        )?,
        A::ReadDirPlus(a) => readdir(
            srv,
            &mut b,
            id,
            id == export.root,
            a.cookie,
            &a.cookieverf,
            a.maxcount as usize,
            a.dircount as usize,
            true,
        )?,
        A::FsStat(_) => {
            b.push(Op::GetAttr { obj });
            Kind::FsStat
        }
        A::FsInfo(_) => {
            b.push(Op::GetAttr { obj });
            Kind::FsInfo
        }
        A::PathConf(_) => {
            b.push(Op::GetAttr { obj });
            Kind::PathConf
        }
        A::Commit(_) => {
            b.push(Op::GetAttr { obj });
            b.flush = true;
            Kind::Commit
        }
    };
    let (b, kind) = if looks.is_empty() {
        (b, kind)
    } else {
        let mut g = Batch::new(cred.clone(), ctx.now_ns);
        g.stop_on_error = false;
        g.read_only = true;
        let ops = (0..looks.len()).collect();
        g.ops.extend(looks);
        let proc_ = args.proc_();
        (
            g,
            Kind::Gate {
                proc_,
                ops,
                kind: gate_kind,
                then: Box::new((b, kind)),
            },
        )
    };
    let p = V3Pending {
        conn: ctx.conn,
        xid: ctx.xid,
        fsid: export.fsid,
        cred,
        read_only: export.read_only,
        kind,
    };
    Ok((b, p))
}

/// EXCLUSIVE create keeps the verifier in atime and mtime (as knfsd
/// does); the client sets the real times with a SETATTR afterwards.
pub(crate) fn verf_attrs(v: &[u8; 8]) -> SetAttrs {
    let hi = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
    let lo = u32::from_be_bytes([v[4], v[5], v[6], v[7]]);
    SetAttrs {
        atime: Some(SetTime::At(i64::from(hi))),
        mtime: Some(SetTime::At(i64::from(lo))),
        ..Default::default()
    }
}

pub(crate) fn verf_matches(a: &duet_fs::Attrs, v: &[u8; 8]) -> bool {
    let s = verf_attrs(v);
    s.atime == Some(SetTime::At(a.atime)) && s.mtime == Some(SetTime::At(a.mtime))
}

#[allow(clippy::too_many_arguments)]
fn readdir(
    srv: &NfsServer,
    b: &mut Batch,
    dir: NodeId,
    export_root: bool,
    cookie: u64,
    verf: &[u8; 8],
    budget: usize,
    dirbudget: usize,
    plus: bool,
) -> Result<Kind, Nfsstat3> {
    if cookie != 0 && *verf != [0; 8] && *verf != srv.cookieverf {
        return Err(Nfsstat3::BAD_COOKIE);
    }
    let budget = budget.min(srv.cfg.max_readdir as usize);
    let dirbudget = dirbudget.min(srv.cfg.max_readdir as usize);
    let per = if plus { 160 } else { 32 };
    let n = (budget / per).min(dirbudget / 24).clamp(1, 4096) as u64;
    let parent_op = !export_root;
    let (dots, resume) = match cookie {
        0 => (Dots::Both { parent_op }, Resume::Start),
        DOT_COOKIE => (Dots::DotDot { parent_op }, Resume::Start),
        DOTDOT_COOKIE => (Dots::None, Resume::Start),
        _ => (
            Dots::None,
            srv.cookies
                .resume(Some(dir), cookie)
                .ok_or(Nfsstat3::BAD_COOKIE)?,
        ),
    };
    let (after, max, skip, base) = match resume {
        Resume::Start => (None, n, 0, 0),
        Resume::After { name, pos } => (Some(name), n, 0, pos),
        Resume::Skip(pos) => (None, (pos + n).min(MAX_POSITION), pos, pos),
    };
    b.push(Op::ReadDir {
        dir: ObjRef::Id(dir),
        after,
        max_entries: max as u32,
        with_attrs: plus,
    });
    if dots != Dots::None && parent_op {
        b.push(Op::Lookup {
            dir: ObjRef::Id(dir),
            name: "..".into(),
        });
    }
    Ok(Kind::ReadDir {
        plus,
        skip,
        base,
        dir,
        budget,
        dirbudget,
        dots,
    })
}

const DOT_COOKIE: u64 = 1;
const DOTDOT_COOKIE: u64 = 2;

/// One entry of a READDIR reply before encoding.
struct Listed<'a> {
    id: NodeId,
    name: &'a str,
    cookie: u64,
    attrs: Option<&'a duet_fs::Attrs>,
}

fn post(r: Option<&OpResult>, fsid: u64) -> PostOpAttr {
    r.and_then(|r| r.as_ref().ok())
        .and_then(|o| o.attrs())
        .map(|a| fattr3(a, fsid))
}

fn attrs_of(r: Option<&OpResult>) -> Option<&duet_fs::Attrs> {
    r.and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs())
}

fn err_of(r: Option<&OpResult>) -> Option<Nfsstat3> {
    match r {
        Some(Ok(_)) => None,
        Some(Err(e)) => Some(nfs3_status(*e)),
        None => Some(Nfsstat3::SERVERFAULT),
    }
}

fn wcc(before: Option<&duet_fs::Attrs>, after: Option<&duet_fs::Attrs>, fsid: u64) -> WccData {
    WccData {
        before: before.map(wcc_attr),
        after: after.map(|a| fattr3(a, fsid)),
    }
}

/// Builds the reply from the batch result (or, for a guarded SETATTR,
/// the second batch).
pub(super) fn finish(srv: &mut NfsServer, p: V3Pending, res: Vec<OpResult>, now: i64) -> Event {
    let fsid = p.fsid;
    let (conn, xid) = (p.conn, p.xid);
    let r0 = res.first();
    let r1 = res.get(1);
    let r2 = res.get(2);
    let out = |body: &dyn Fn(&mut XdrWriter)| reply_with(conn, xid, body);
    match p.kind {
        Kind::Gate {
            proc_,
            ops,
            kind: why,
            then,
        } => {
            // A CREATE (of any kind) of a delete-pending name: refused as
            // Windows refuses a new opener, ERROR_ACCESS_DENIED
            // (docs/locks.md, "Delete-on-close and NFS").
            let refused = if proc_ == proc3::CREATE && delete_pending_found(srv, &res, &ops) {
                Some(Nfsstat3::ACCES)
            } else if break_found(srv, &res, &ops, &opener(), why, now) {
                Some(Nfsstat3::JUKEBOX)
            } else {
                None
            };
            if let Some(st) = refused {
                return reply_with(conn, xid, |w| {
                    st.encode(w);
                    for _ in 0..fail_words(proc_) {
                        w.put_u32(0);
                    }
                });
            }
            let (batch, kind) = *then;
            srv.submit(batch, tag(proc_), Pending::V3(V3Pending { kind, ..p }))
        }
        Kind::GetAttr => {
            let v: GetAttr3Res = match attrs_of(r0) {
                Some(a) => Nfs3Res::Ok(fattr3(a, fsid)),
                None => Nfs3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), ()),
            };
            out(&|w| v.encode(w))
        }
        Kind::SetAttrGuard { guard, batch } => match r0 {
            Some(Ok(o)) => {
                let Some(a) = o.attrs() else {
                    return out(&|w| {
                        Nfs3Res::<(), WccData>::Fail(Nfsstat3::SERVERFAULT, WccData::default())
                            .encode(w)
                    });
                };
                if time3(a.ctime) != guard {
                    let w0 = wcc(Some(a), Some(a), fsid);
                    return out(&|w| SetAttr3Res::Fail(Nfsstat3::NOT_SYNC, w0).encode(w));
                }
                let p2 = V3Pending {
                    kind: Kind::SetAttr,
                    ..p
                };
                srv.submit(batch, "nfs3.setattr", Pending::V3(p2))
            }
            _ => {
                let s = err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT);
                out(&|w| SetAttr3Res::Fail(s, WccData::default()).encode(w))
            }
        },
        Kind::SetAttr => {
            let v: SetAttr3Res = match r0 {
                Some(Ok(OpOutput::Attrs { before, attrs })) => {
                    Nfs3Res::Ok(wcc(before.as_ref(), Some(attrs), fsid))
                }
                _ => Nfs3Res::Fail(
                    err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT),
                    WccData::default(),
                ),
            };
            out(&|w| v.encode(w))
        }
        Kind::Lookup => {
            let dir = post(r1, fsid);
            match attrs_of(r0) {
                Some(a) => {
                    let fh = srv.handle(FileHandle::Object { fsid, id: a.id });
                    let v: Lookup3Res<'_> = Nfs3Res::Ok(Lookup3ResOk {
                        object: Opaque(&fh),
                        obj_attributes: Some(fattr3(a, fsid)),
                        dir_attributes: dir,
                    });
                    out(&|w| v.encode(w))
                }
                _ => {
                    let v: Lookup3Res<'_> =
                        Nfs3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), dir);
                    out(&|w| v.encode(w))
                }
            }
        }
        Kind::Access(req) => {
            let dacl_of = |r: Option<&OpResult>| match r {
                Some(Ok(o)) => o.stored_security(),
                _ => Ok(None),
            };
            let v: Access3Res = match r0.and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs()) {
                Some(a) => Nfs3Res::Ok(Access3ResOk {
                    obj_attributes: Some(fattr3(a, fsid)),
                    access: super::attr::access_bits_with_acl(&p.cred, a, dacl_of(r0), req, p.read_only),
                }),
                None => Nfs3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), None),
            };
            out(&|w| v.encode(w))
        }
        Kind::ReadLink => match r0 {
            Some(Ok(OpOutput::Link { target, attrs })) => {
                let v: ReadLink3Res<'_> = Nfs3Res::Ok(ReadLink3ResOk {
                    symlink_attributes: Some(fattr3(attrs, fsid)),
                    data: Opaque(target.as_bytes()),
                });
                out(&|w| v.encode(w))
            }
            _ => {
                let v: ReadLink3Res<'_> =
                    Nfs3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), None);
                out(&|w| v.encode(w))
            }
        },
        Kind::Read => match r0 {
            Some(Ok(OpOutput::Read { data, eof, attrs })) => {
                let v: Read3Res<'_> = Nfs3Res::Ok(Read3ResOk {
                    file_attributes: Some(fattr3(attrs, fsid)),
                    count: data.len() as u32,
                    eof: *eof,
                    data: Opaque(data),
                });
                out(&|w| v.encode(w))
            }
            _ => {
                let v: Read3Res<'_> =
                    Nfs3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), None);
                out(&|w| v.encode(w))
            }
        },
        Kind::Write { unstable } => {
            let v: Write3Res = match r0 {
                Some(Ok(OpOutput::Written {
                    count,
                    before,
                    attrs,
                    ..
                })) => Nfs3Res::Ok(Write3ResOk {
                    file_wcc: wcc(Some(before), Some(attrs), fsid),
                    count: *count as u32,
                    committed: if unstable { StableHow::Unstable } else { StableHow::FileSync },
                    verf: srv.write_verf,
                }),
                _ => Nfs3Res::Fail(
                    err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT),
                    WccData::default(),
                ),
            };
            out(&|w| v.encode(w))
        }
        Kind::Create { excl } => {
            let dir_after = r1.and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs());
            match r0 {
                Some(Ok(OpOutput::Object {
                    attrs,
                    created,
                    dir_before,
                    dir_after: da,
                })) => {
                    if let Some(v) = &excl {
                        if !created && !verf_matches(attrs, v) {
                            let w0 = wcc(None, dir_after, fsid);
                            return out(&|w| Create3Res::Fail(Nfsstat3::EXIST, w0).encode(w));
                        }
                    }
                    let fh = srv.handle(FileHandle::Object { fsid, id: attrs.id });
                    let dw = wcc(dir_before.as_ref(), da.as_ref().or(dir_after), fsid);
                    let v: Create3Res<'_> = Nfs3Res::Ok(Create3ResOk {
                        obj: Some(Opaque(&fh)),
                        obj_attributes: Some(fattr3(attrs, fsid)),
                        dir_wcc: dw,
                    });
                    out(&|w| v.encode(w))
                }
                _ => {
                    let v: Create3Res<'_> = Nfs3Res::Fail(
                        err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT),
                        wcc(None, dir_after, fsid),
                    );
                    out(&|w| v.encode(w))
                }
            }
        }
        Kind::Remove => {
            let dir_after = r1.and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs());
            let v: Remove3Res = match r0 {
                Some(Ok(OpOutput::Dirs { changed, .. })) => {
                    let (b, a) = changed
                        .first()
                        .map(|(b, a)| (Some(b), Some(a)))
                        .unwrap_or((None, dir_after));
                    Nfs3Res::Ok(wcc(b, a, fsid))
                }
                _ => Nfs3Res::Fail(
                    err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT),
                    wcc(None, dir_after, fsid),
                ),
            };
            out(&|w| v.encode(w))
        }
        Kind::Rename => {
            let from_after = r1.and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs());
            let to_after = r2.and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs());
            let v: Rename3Res = match r0 {
                Some(Ok(OpOutput::Dirs { changed, .. })) => {
                    let from = changed
                        .first()
                        .map(|(b, a)| wcc(Some(b), Some(a), fsid))
                        .unwrap_or_else(|| wcc(None, from_after, fsid));
                    let to = match changed.get(1) {
                        Some((b, a)) => wcc(Some(b), Some(a), fsid),
                        None if changed.len() == 1 => from,
                        None => wcc(None, to_after, fsid),
                    };
                    Nfs3Res::Ok(Rename3Wcc {
                        fromdir_wcc: from,
                        todir_wcc: to,
                    })
                }
                _ => Nfs3Res::Fail(
                    err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT),
                    Rename3Wcc {
                        fromdir_wcc: wcc(None, from_after, fsid),
                        todir_wcc: wcc(None, to_after, fsid),
                    },
                ),
            };
            out(&|w| v.encode(w))
        }
        Kind::Link => {
            let file_after = post(r1, fsid);
            let dir_after = r2.and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs());
            let v: Link3Res = match r0 {
                Some(Ok(OpOutput::Dirs { changed, target })) => {
                    let dw = changed
                        .first()
                        .map(|(b, a)| wcc(Some(b), Some(a), fsid))
                        .unwrap_or_else(|| wcc(None, dir_after, fsid));
                    Nfs3Res::Ok(Link3Wcc {
                        file_attributes: target.as_ref().map(|a| fattr3(a, fsid)).or(file_after),
                        linkdir_wcc: dw,
                    })
                }
                _ => Nfs3Res::Fail(
                    err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT),
                    Link3Wcc {
                        file_attributes: file_after,
                        linkdir_wcc: wcc(None, dir_after, fsid),
                    },
                ),
            };
            out(&|w| v.encode(w))
        }
        Kind::ReadDir {
            plus,
            skip,
            base,
            dir,
            budget,
            dirbudget,
            dots,
        } => match r0 {
            Some(Ok(OpOutput::Dir {
                entries,
                eof,
                attrs,
            })) => {
                let list: Vec<&duet_fs::DirEntry> = entries
                    .iter()
                    .skip(skip.min(usize::MAX as u64) as usize)
                    .collect();
                // "." and "..": the parent from the lookup, or the
                // directory itself at the export root.
                let parent = match dots {
                    Dots::Both { parent_op: true } | Dots::DotDot { parent_op: true } => {
                        attrs_of(r1)
                    }
                    _ => Some(attrs),
                };
                let mut shown: Vec<Listed<'_>> = Vec::new();
                if let Dots::Both { .. } = dots {
                    shown.push(Listed {
                        id: attrs.id,
                        name: ".",
                        cookie: DOT_COOKIE,
                        attrs: Some(attrs),
                    });
                }
                if dots != Dots::None {
                    shown.push(Listed {
                        id: parent.map(|a| a.id).unwrap_or(attrs.id),
                        name: "..",
                        cookie: DOTDOT_COOKIE,
                        attrs: parent,
                    });
                }
                let ndots = shown.len();
                let mut used = 200usize;
                let mut dirused = 0usize;
                let mut n = 0;
                let mut fit = 0;
                let names = shown
                    .iter()
                    .map(|d| d.name)
                    .chain(list.iter().map(|e| e.name.as_str()));
                for (k, name) in names.enumerate() {
                    let name_len = name.len().div_ceil(4) * 4;
                    let cost = 24 + name_len + if plus { 88 + 36 } else { 0 };
                    if used + cost > budget
                        || (plus && dirused + 24 + name_len > dirbudget && n > 0)
                    {
                        break;
                    }
                    used += cost;
                    dirused += 24 + name_len;
                    fit = k + 1;
                    if k >= ndots {
                        n += 1;
                    }
                }
                shown.truncate(fit.min(ndots));
                if fit == 0 && (ndots > 0 || !list.is_empty()) {
                    return out(&|w| {
                        ReadDir3Res::Fail(Nfsstat3::TOOSMALL, Some(fattr3(attrs, fsid))).encode(w)
                    });
                }
                let all = n == list.len() && *eof;
                shown.extend(list[..n].iter().enumerate().map(|(k, e)| Listed {
                    id: e.id,
                    name: e.name.as_str(),
                    cookie: make_cookie(base + k as u64 + 1, &e.name),
                    attrs: e.attrs.as_ref(),
                }));
                if let Some(last) = list[..n].last() {
                    srv.cookies
                        .remember(dir, make_cookie(base + n as u64, &last.name), &last.name);
                }
                let verf = srv.cookieverf;
                if plus {
                    let fhs: Vec<[u8; super::fh::FH_LEN]> = shown
                        .iter()
                        .map(|e| FileHandle::Object { fsid, id: e.id }.encode(srv.cfg.handle_key))
                        .collect();
                    let entries = shown
                        .iter()
                        .zip(&fhs)
                        .map(|(e, fh)| EntryPlus3 {
                            fileid: e.id,
                            name: Name(e.name.as_bytes()),
                            cookie: e.cookie,
                            name_attributes: e.attrs.map(|a| fattr3(a, fsid)),
                            name_handle: Some(Opaque(fh)),
                        })
                        .collect();
                    let v: ReadDirPlus3Res<'_> = Nfs3Res::Ok(ReadDirPlus3ResOk {
                        dir_attributes: Some(fattr3(attrs, fsid)),
                        cookieverf: verf,
                        reply: DirListPlus3 {
                            entries: LinkedList(entries),
                            eof: all,
                        },
                    });
                    out(&|w| v.encode(w))
                } else {
                    let entries = shown
                        .iter()
                        .map(|e| Entry3 {
                            fileid: e.id,
                            name: Name(e.name.as_bytes()),
                            cookie: e.cookie,
                        })
                        .collect();
                    let v: ReadDir3Res<'_> = Nfs3Res::Ok(ReadDir3ResOk {
                        dir_attributes: Some(fattr3(attrs, fsid)),
                        cookieverf: verf,
                        reply: DirList3 {
                            entries: LinkedList(entries),
                            eof: all,
                        },
                    });
                    out(&|w| v.encode(w))
                }
            }
            _ => out(&|w| {
                ReadDir3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), None).encode(w)
            }),
        },
        Kind::FsStat => {
            let c = &srv.cfg;
            let space = c.space.get();
            let v: FsStat3Res = match post(r0, fsid) {
                Some(a) => Nfs3Res::Ok(FsStat3ResOk {
                    obj_attributes: Some(a),
                    tbytes: space.total,
                    fbytes: space.free,
                    abytes: space.avail,
                    tfiles: c.files_total,
                    ffiles: c.files_free,
                    afiles: c.files_free,
                    invarsec: 0,
                }),
                None => Nfs3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), None),
            };
            out(&|w| v.encode(w))
        }
        Kind::FsInfo => {
            let io = srv.cfg.max_io;
            let v: FsInfo3Res = match post(r0, fsid) {
                Some(a) => Nfs3Res::Ok(FsInfo3ResOk {
                    obj_attributes: Some(a),
                    rtmax: io,
                    rtpref: io,
                    rtmult: 4096,
                    wtmax: io,
                    wtpref: io,
                    wtmult: 4096,
                    dtpref: 64 << 10,
                    maxfilesize: duet_fs::FILE_SIZE_MAX,
                    time_delta: NfsTime3 {
                        seconds: 0,
                        nseconds: 1,
                    },
                    properties: fsf3::LINK | fsf3::SYMLINK | fsf3::HOMOGENEOUS | fsf3::CANSETTIME,
                }),
                None => Nfs3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), None),
            };
            out(&|w| v.encode(w))
        }
        Kind::PathConf => {
            let v: PathConf3Res = match post(r0, fsid) {
                Some(a) => Nfs3Res::Ok(PathConf3ResOk {
                    obj_attributes: Some(a),
                    linkmax: 65_000,
                    name_max: duet_fs::NAME_MAX as u32,
                    no_trunc: true,
                    chown_restricted: true,
                    case_insensitive: false,
                    case_preserving: true,
                }),
                None => Nfs3Res::Fail(err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT), None),
            };
            out(&|w| v.encode(w))
        }
        Kind::Commit => {
            let a = r0.and_then(|r| r.as_ref().ok()).and_then(|o| o.attrs());
            let v: Commit3Res = match a {
                Some(a) if a.ftype == FileType::Directory => {
                    Nfs3Res::Fail(Nfsstat3::ISDIR, wcc(None, Some(a), fsid))
                }
                Some(a) => Nfs3Res::Ok(Commit3ResOk {
                    file_wcc: wcc(Some(a), Some(a), fsid),
                    verf: srv.write_verf,
                }),
                None => Nfs3Res::Fail(
                    err_of(r0).unwrap_or(Nfsstat3::SERVERFAULT),
                    WccData::default(),
                ),
            };
            out(&|w| v.encode(w))
        }
    }
}
