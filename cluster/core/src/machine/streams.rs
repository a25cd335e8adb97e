//! Named streams (SMB alternate data streams, MS-FSCC 2.1.5 and MS-FSA
//! 2.1.5.1): [`Op::OpenStream`], [`Op::ListStreams`], [`Op::RemoveStream`],
//! [`Op::RenameStream`], [`Op::RenameStreamToData`].
//!
//! A stream is an ordinary regular-file node (`n`, its data in `d` or
//! `k` like any file's) whose `parent` is the file; it is named only by a
//! `T` record under the file's id ([`keys::stream`]), never by an `e`
//! edge, so directory listings, path walks and NFS never meet it. Reads,
//! writes and size changes reach it by its node id, unchanged. Deleting
//! the file's last link deletes its streams ([`drop_all`]).
//!
//! Objects of a writable clone (clone ids) and of snapshot views have no
//! streams: opening or creating one is `NotSupported`, listing one lists
//! none. A clone reads its source's files through, never their `T`
//! records, so a clone can never reach (nor change) its source's streams.

use super::*;

/// The longest stream name, in bytes (NTFS: 255 UTF-16 units).
const STREAM_NAME_MAX: usize = 255 * 3;

fn check_stream_name(name: &str) -> Result<(), FsError> {
    if name.is_empty() || name.contains(['\0', ':', '/', '\\']) {
        return Err(FsError::InvalidName);
    }
    if name.len() > STREAM_NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

/// Clone objects and snapshot views have no streams.
fn layered(id: NodeId) -> bool {
    clone::is_clone_id(id) || duet_fs::view::is_view(id)
}

fn find<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, file: NodeId, name: &str) -> Option<(NodeId, String)> {
    txn.get(&keys::stream(file, name)).and_then(|v| keys::stream_entry(&v))
}

/// Whether `cred` may change `file`'s streams: write permission on the
/// file, by its stored DACL when it has one (a stream shares its file's
/// security, MS-FSA 2.1.5.1), else the owner or the mode.
fn may_change<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, cred: &duet_fs::Credentials, file: &Node) -> bool {
    if file.has_acl {
        return crate::machine::may_node(txn, cred, file, 2);
    }
    cred.uid == 0 || cred.uid == file.attrs.uid || may(cred, &file.attrs, 2)
}

/// [`Op::OpenStream`].
pub(super) fn open<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    obj: ObjRef,
    name: &str,
    set: &SetAttrs,
    create: Option<IfExists>,
) -> OpResult {
    let cred = ex.batch.cred.clone();
    let now = ex.batch.now_ns;
    let id = resolve(ex, obj)?;
    check_stream_name(name)?;
    if layered(id) {
        return Err(FsError::NotSupported);
    }
    let file = get_node(txn, id)?;
    if !matches!(file.attrs.ftype, FileType::Regular | FileType::Directory) {
        return Err(FsError::NotSupported);
    }
    if let Some((sid, real)) = find(txn, id, name) {
        // A file whose DACL grants the caller neither reading nor writing
        // keeps its streams closed to them too.
        if file.has_acl
            && !crate::machine::may_node(txn, &cred, &file, 4)
            && !crate::machine::may_node(txn, &cred, &file, 2)
        {
            return Err(FsError::Access);
        }
        let mut s = get_node(txn, sid)?;
        match create {
            None | Some(IfExists::Open) => {}
            Some(IfExists::Fail) => return Err(FsError::Exists),
            Some(IfExists::Truncate) => {
                if !may_change(txn, &cred, &file) {
                    return Err(FsError::Access);
                }
                set_size(txn, ex, &mut s, 0)?;
                if let Some(a) = set.alloc_size {
                    s.attrs.alloc_size = a & !duet_fs::ALLOC_TRUNCATES;
                }
                touch(&mut s.attrs, now, true);
                put_node(txn, &s);
            }
        }
        // The stream's name as created: it may differ in case from `name`.
        return Ok(OpOutput::Found { name: real, attrs: s.attrs });
    }
    if create.is_none() {
        return Err(FsError::NotFound);
    }
    if !may_change(txn, &cred, &file) {
        return Err(FsError::Access);
    }
    let sid = counter(txn, "next_id").max(ROOT_ID + 1);
    if sid > duet_fs::view::ID_MAX {
        return Err(FsError::NoSpace);
    }
    put_counter(txn, "next_id", sid + 1);
    let a = &file.attrs;
    let mut attrs = new_attrs(sid, FileType::Regular, a.mode & 0o777, a.uid, a.gid, now);
    if let Some(al) = set.alloc_size {
        attrs.alloc_size = al & !duet_fs::ALLOC_TRUNCATES;
    }
    let mut s = Node { attrs, parent: id, target: None, chunked: false, may_have_eas: false, zone: file.zone, has_acl: false };
    if let Some(size) = set.size.filter(|s| *s > 0) {
        set_size(txn, ex, &mut s, size)?;
    }
    put_node(txn, &s);
    txn.put(keys::stream(id, name), keys::stream_value(sid, name));
    Ok(OpOutput::Object { attrs: s.attrs, created: true, dir_before: None, dir_after: None })
}

/// [`Op::ListStreams`]: the file's named streams in (lower-case) name
/// order, each with its node's attributes.
pub(super) fn list<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, obj: ObjRef) -> OpResult {
    let id = resolve(ex, obj)?;
    let file = if duet_fs::view::is_view(id) {
        None
    } else {
        Some(get_node(txn, id)?)
    };
    let mut entries = Vec::new();
    if !layered(id) {
        let prefix = keys::stream_prefix(id);
        for (_, v) in txn.scan(&prefix, &keys::prefix_end(&prefix), usize::MAX) {
            let Some((sid, name)) = keys::stream_entry(&v) else { return Err(FsError::Io) };
            let s = get_node(txn, sid)?;
            entries.push(DirEntry { name, id: sid, ftype: FileType::Regular, attrs: Some(s.attrs), eas: Vec::new() });
        }
    }
    let attrs = match file {
        Some(f) => f.attrs,
        None => get_node(txn, id).map(|n| n.attrs).unwrap_or_else(|_| new_attrs(id, FileType::Regular, 0, 0, 0, 0)),
    };
    Ok(OpOutput::Dir { entries, eof: true, attrs })
}

/// The file `obj` and its existing stream `name`, which the caller may
/// change (remove, rename): (file id, stream id).
fn changeable<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &Exec<'_>,
    obj: ObjRef,
    name: &str,
) -> Result<(NodeId, NodeId), FsError> {
    let id = resolve(ex, obj)?;
    check_stream_name(name)?;
    if layered(id) {
        return Err(FsError::NotSupported);
    }
    let file = get_node(txn, id)?;
    let (sid, _) = find(txn, id, name).ok_or(FsError::NotFound)?;
    if !may_change(txn, &ex.batch.cred, &file) {
        return Err(FsError::Access);
    }
    Ok((id, sid))
}

/// [`Op::RemoveStream`].
pub(super) fn remove<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, obj: ObjRef, name: &str) -> OpResult {
    let (id, sid) = changeable(txn, ex, obj, name)?;
    let s = get_node(txn, sid)?;
    let attrs = s.attrs.clone();
    txn.delete(keys::stream(id, name));
    unlink_node(txn, ex, s);
    Ok(OpOutput::Attrs { before: None, attrs })
}

/// Deletes every stream of `file` (its last link is gone).
pub(super) fn drop_all<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, file: NodeId) {
    if layered(file) {
        return;
    }
    let prefix = keys::stream_prefix(file);
    for (k, v) in txn.scan(&prefix, &keys::prefix_end(&prefix), usize::MAX) {
        txn.delete(k);
        if let Some(s) = keys::stream_entry(&v).and_then(|(sid, _)| get_node(txn, sid).ok()) {
            unlink_node(txn, ex, s);
        }
    }
}

/// [`Op::RenameStream`] (MS-FSA 2.1.5.14.11.1).
pub(super) fn rename<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    obj: ObjRef,
    name: &str,
    new_name: &str,
    replace: bool,
) -> OpResult {
    let now = ex.batch.now_ns;
    check_stream_name(new_name)?;
    let (id, sid) = changeable(txn, ex, obj, name)?;
    match find(txn, id, new_name) {
        // The same stream (perhaps another case): only its name changes.
        Some((tid, _)) if tid == sid => {}
        Some(_) if !replace => return Err(FsError::Exists),
        Some((tid, _)) => {
            let t = get_node(txn, tid)?;
            if t.attrs.size != 0 {
                return Err(FsError::Invalid);
            }
            txn.delete(keys::stream(id, new_name));
            unlink_node(txn, ex, t);
        }
        None => {}
    }
    txn.delete(keys::stream(id, name));
    txn.put(keys::stream(id, new_name), keys::stream_value(sid, new_name));
    let mut s = get_node(txn, sid)?;
    s.attrs.ctime = now;
    s.attrs.change += 1;
    put_node(txn, &s);
    Ok(OpOutput::Attrs { before: None, attrs: s.attrs })
}

/// [`Op::RenameStreamToData`] (MS-FSA 2.1.5.14.11.1, a stream renamed onto
/// the unnamed data stream): the file's own data goes (a file holding data
/// is `Exists` without `replace`), the stream's becomes the file's, and
/// the stream is deleted, all in this one command. The file keeps its id
/// (handles, FileId); the data moves by reference: a chunked stream's
/// whole chunks are shared with the file as [`Op::Clone`] shares them
/// (blob references, chunk files hard-linked by the destager's
/// `CloneFrom`), only its partial last chunk copied, and the stream's
/// unlink then drops its references and queues its `Reclaim` after that
/// `CloneFrom`, so the chunk files the file links to outlive the stream's
/// names for them. An inline stream (at most 4 KiB) is copied.
pub(super) fn to_data<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    obj: ObjRef,
    name: &str,
    replace: bool,
) -> OpResult {
    let now = ex.batch.now_ns;
    let (id, sid) = changeable(txn, ex, obj, name)?;
    let mut f = get_node(txn, id)?;
    if f.attrs.ftype != FileType::Regular {
        // A directory has no unnamed data stream.
        return Err(FsError::Invalid);
    }
    if f.attrs.size != 0 && !replace {
        return Err(FsError::Exists);
    }
    let s = get_node(txn, sid)?;
    // The file's data goes (its chunks' references dropped, a snapshot's
    // copy kept by `set_size`'s copy-aside).
    set_size(txn, ex, &mut f, 0)?;
    if f.chunked {
        // Chunk records past a size of 0 (none are expected) go too.
        let prefix = keys::chunk_prefix(id);
        let left = txn.scan(&prefix, &keys::prefix_end(&prefix), usize::MAX);
        if !left.is_empty() {
            for (k, v) in left {
                if let Some(b) = keys::chunk_blob(&v) {
                    drop_ref(txn, b);
                }
                txn.delete(k);
            }
            queue(txn, ex, id, DataOp::Truncate { size: 0 });
        }
    }
    touch(&mut f.attrs, now, true);
    put_node(txn, &f);
    let size = s.attrs.size;
    if s.chunked {
        if size > 0 {
            clone_chunks(txn, ex, s, f, 0, 0, size)?;
        }
    } else {
        let data = txn.get(&keys::data(sid)).unwrap_or_default();
        if !data.is_empty() {
            if f.chunked {
                attach_chunks(txn, ex, id, 0, data.len() as u64);
                queue(txn, ex, id, DataOp::WriteInline { offset: 0, data });
            } else {
                txn.put(keys::data(id), data);
            }
        }
        let mut f = get_node(txn, id)?;
        f.attrs.size = size;
        f.attrs.alloc_size = alloc_for(size);
        put_node(txn, &f);
    }
    txn.delete(keys::stream(id, name));
    let s = get_node(txn, sid)?;
    unlink_node(txn, ex, s);
    let f = get_node(txn, id)?;
    Ok(OpOutput::Attrs { before: None, attrs: f.attrs })
}
