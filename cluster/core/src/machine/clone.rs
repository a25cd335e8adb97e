//! Writable clones of a share (`cluster/STORAGE-MODEL.md`, "Clones").
//!
//! A clone is a share whose objects read through a frozen layer (a
//! snapshot) of its source until they are first changed. Its objects have
//! ids of their own, [`clone_id`]`(number, base)`: bit 62, the clone's
//! number, and the object's *base* id (its id in the original share, or a
//! fresh id for an object made in a clone), so an object's id never
//! changes when it is copied up and a hard link's names all lead to one id.
//!
//! - An object with no node record of its own reads its node from the
//!   source's frozen layer ([`lower_node`]), its ids mapped into the clone.
//! - Its contents (a directory's edges, a file's inline data, chunks and
//!   extended attributes) are its own once its mark `M` says so
//!   ([`keys::CLONE_OWN`]) or when it was made in the clone (base at least
//!   the clone's `floor`); else they read through ([`through`]).
//! - Before an operation changes an object, [`prepare`] copies it up
//!   ([`materialise`]): its node record, and its contents: a directory's
//!   own entries (never its subtree), a file's inline data and attributes,
//!   a chunked file's chunk records naming the lower chunks by reference
//!   (blobs, one `DataOp::CloneFrom`, as a reflink), so the first write
//!   copies only the chunks written.
//! - A deleted object gets the mark [`keys::CLONE_GONE`] (a whiteout of its
//!   id): it never reads through again.
//! - A clone of a clone reads through a chain of frozen layers (at most
//!   [`DEPTH_MAX`]): its source's frozen state, where an object of the
//!   source not yet copied up at the freeze reads on through the source's
//!   own source.
//!
//! Creating a clone writes a constant number of keys (the clone record, its
//! root's node and edge, the share record, and the snapshot when one is
//! taken for it); deleting one drops every key in its id range and detaches
//! its chunked files for reclaim, as unlinks do.

use duet_fs::view;

use super::layers::{share_chunks, share_dir, zone_snapshots, Frozen};
use super::*;
use crate::records::CloneRecord;

/// Bit 62: a clone's object (bit 63 is a snapshot view's).
pub const CLONE_BIT: u64 = 1 << 62;
/// The largest clone number (bits 40..62).
pub const CLONE_MAX: u64 = (1 << 22) - 1;
/// Most clones in a chain (a clone of a clone of ...).
pub const DEPTH_MAX: u32 = 8;

/// The id of object `base` in clone `c`.
pub fn clone_id(c: u64, base: NodeId) -> NodeId {
    CLONE_BIT | (c & CLONE_MAX) << view::LAYER_SHIFT | (base & view::ID_MAX)
}

/// (clone number, base id) of a clone's object id.
pub fn split(id: NodeId) -> Option<(u64, NodeId)> {
    is_clone_id(id).then_some(((id & !CLONE_BIT) >> view::LAYER_SHIFT, id & view::ID_MAX))
}

pub fn is_clone_id(id: NodeId) -> bool {
    id & view::VIEW_BIT == 0 && id & CLONE_BIT != 0
}

/// The id an object made in zone `zone` gets from counter value `id`.
pub(super) fn new_id(zone: NodeId, id: NodeId) -> Result<NodeId, FsError> {
    match split(zone) {
        Some((c, _)) if id <= view::ID_MAX => Ok(clone_id(c, id)),
        Some(_) => Err(FsError::NoSpace),
        None => Ok(id),
    }
}

/// The zone of clone object `id` (its clone's root), 0 for other ids.
pub(super) fn zone_of_id<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> NodeId {
    match split(id) {
        Some((c, _)) => record(txn, c).map_or(0, |r| clone_id(c, r.root_base)),
        None => 0,
    }
}

fn record<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, c: u64) -> Option<CloneRecord> {
    txn.get(&keys::clone(c)).and_then(|v| decode(&v))
}

/// Every clone, by number.
fn all<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>) -> Vec<(u64, CloneRecord)> {
    let p = [keys::CLONE];
    txn.scan(&p, &keys::prefix_end(&p), usize::MAX)
        .into_iter()
        .filter_map(|(k, v)| Some((keys::u64_at(&k, 1)?, decode(&v)?)))
        .collect()
}

/// A clone that stands on frozen layer `layer`.
pub(super) fn standing_on<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, layer: u64) -> Option<CloneRecord> {
    if !txn.scan(&[keys::CLONE], &[keys::CLONE + 1], 1).is_empty() {
        return all(txn).into_iter().map(|(_, r)| r).find(|r| r.layer == layer);
    }
    None
}

/// The clones, with the share each is a clone of (for listings).
pub fn list_clones<R: KvRead + ?Sized>(kv: &R) -> Vec<CloneRecord> {
    let mut txn = Txn::new(kv);
    all(&mut txn).into_iter().map(|(_, r)| r).collect()
}

/// One frozen layer an object reads through: the source's layer, and the
/// clone number of that source (0: an ordinary share) with its floor.
#[derive(Clone)]
pub(super) struct Level {
    f: Frozen,
    clone: u64,
    floor: NodeId,
}

impl Level {
    fn id(&self, base: NodeId) -> NodeId {
        if self.clone == 0 {
            base
        } else {
            clone_id(self.clone, base)
        }
    }
}

/// Clone `c`'s record and the layers its objects read through, nearest first.
fn chain<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, c: u64) -> Result<(CloneRecord, Vec<Level>), FsError> {
    let first = record(txn, c).ok_or(FsError::Stale)?;
    let mut levels = Vec::new();
    let mut rec = first.clone();
    loop {
        let f = Frozen::open(txn, rec.layer)?;
        let src = rec.source_clone;
        let next = if src == 0 { None } else { Some(record(txn, src).ok_or(FsError::Io)?) };
        levels.push(Level { f, clone: src, floor: next.as_ref().map_or(0, |r| r.floor) });
        match next {
            Some(r) if levels.len() <= DEPTH_MAX as usize => rec = r,
            Some(_) => return Err(FsError::Io),
            None => return Ok((first, levels)),
        }
    }
}

fn mark<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Option<u8> {
    txn.get(&keys::clone_mark(id)).and_then(|v| v.first().copied())
}

fn remap_node(n: &mut Node, c: u64, x: NodeId, rec: &CloneRecord) {
    n.attrs.id = x;
    n.parent = clone_id(c, n.parent & view::ID_MAX);
    n.zone = clone_id(c, rec.root_base);
}

/// Node `x` (a clone's object with no node record of its own) as its
/// source's frozen layer has it, its ids mapped into the clone.
pub(super) fn lower_node<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, x: NodeId) -> Result<Node, FsError> {
    let (c, b) = split(x).ok_or(FsError::Stale)?;
    if mark(txn, x) == Some(keys::CLONE_GONE) {
        return Err(FsError::Stale);
    }
    let (rec, levels) = chain(txn, c)?;
    if b >= rec.floor {
        return Err(FsError::Stale);
    }
    let (mut n, _) = lower_in(txn, &levels, b)?;
    remap_node(&mut n, c, x, &rec);
    Ok(n)
}

/// The node record of base id `b` at the first of `levels` that has one
/// (unmapped) and that level's index; `Stale` when a level says it is not
/// there (made later, or deleted).
fn lower_in<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, levels: &[Level], b: NodeId) -> Result<(Node, usize), FsError> {
    for (i, lvl) in levels.iter().enumerate() {
        let id = lvl.id(b);
        if let Some(v) = lvl.f.get(txn, &keys::node(id))? {
            let n = Node::decode(&v).ok_or(FsError::Io)?;
            if n.zone != lvl.f.zone {
                // A share nested in the source: not part of the clone.
                return Err(FsError::Stale);
            }
            return Ok((n, i));
        }
        if lvl.clone == 0 || b >= lvl.floor {
            break;
        }
        if lvl.f.get(txn, &keys::clone_mark(id))?.and_then(|v| v.first().copied()) == Some(keys::CLONE_GONE) {
            break;
        }
    }
    Err(FsError::Stale)
}

/// Where clone object `x`'s contents are read when they are not its own:
/// the frozen layer and the id there.
pub(super) struct Through {
    level: Level,
    id: NodeId,
}

/// `None`: `id`'s contents are its own records (a live id, an object copied
/// up or made in its clone).
pub(super) fn through<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, x: NodeId) -> Result<Option<Through>, FsError> {
    let Some((c, b)) = split(x) else { return Ok(None) };
    match mark(txn, x) {
        Some(keys::CLONE_OWN) | Some(keys::CLONE_MERGED) => return Ok(None),
        Some(_) => return Err(FsError::Stale),
        None => {}
    }
    let (rec, levels) = chain(txn, c)?;
    if b >= rec.floor {
        return Ok(None);
    }
    through_in(txn, levels, b).map(Some)
}

/// The first of `levels` that holds base id `b`'s contents: one where it
/// is the object's own (marked, made there, or an ordinary share).
fn through_in<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, levels: Vec<Level>, b: NodeId) -> Result<Through, FsError> {
    for level in levels {
        let id = level.id(b);
        if level.clone == 0 || b >= level.floor {
            return Ok(Through { level, id });
        }
        match level.f.get(txn, &keys::clone_mark(id))?.and_then(|v| v.first().copied()) {
            Some(keys::CLONE_OWN) | Some(keys::CLONE_MERGED) => return Ok(Through { level, id }),
            Some(_) => return Err(FsError::Stale),
            None => {}
        }
    }
    Err(FsError::Stale)
}

impl Through {
    pub(super) fn inline<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>) -> Result<Option<Vec<u8>>, FsError> {
        self.level.f.get(txn, &keys::data(self.id))
    }

    pub(super) fn eas<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>) -> Result<Vec<(Vec<u8>, Vec<u8>)>, FsError> {
        self.level.f.scan(txn, &keys::ea_prefix(self.id), &[])
    }

    /// The lower object's stored DACL record, as its level holds it.
    pub(super) fn acl<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>) -> Result<Option<Vec<u8>>, FsError> {
        self.level.f.get(txn, &keys::acl(self.id))
    }

    /// The file whose chunk records hold the lower file's data.
    pub(super) fn chunks<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>) -> Result<NodeId, FsError> {
        self.level.f.shadow_of(txn, self.id)
    }
}

// ---- hooks of the ordinary paths (machine.rs) ----

/// Where a clone directory's entries come from when they are not all its
/// own records, nearest first: `x`'s own live edges and whiteouts (when it
/// is merged), then frozen levels (`Some(index)`) with the directory's id
/// there. Each source but the last lies over the next: its edges and
/// whiteouts win.
pub(super) struct Sources {
    levels: Vec<Level>,
    list: Vec<(Option<usize>, NodeId)>,
    c: u64,
}

fn sources<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, x: NodeId) -> Result<Option<Sources>, FsError> {
    let Some((c, b)) = split(x) else { return Ok(None) };
    let mut list = Vec::new();
    match mark(txn, x) {
        Some(keys::CLONE_OWN) => return Ok(None),
        Some(keys::CLONE_MERGED) => list.push((None, x)),
        Some(_) => return Err(FsError::Stale),
        None => {}
    }
    let (rec, levels) = chain(txn, c)?;
    if b >= rec.floor {
        return Ok(None);
    }
    sources_in(txn, levels, c, b, list).map(Some)
}

/// The frozen sources of base id `b`'s entries among `levels`, after those
/// in `list` already: every level where it is merged, down to one where its
/// entries are its own.
fn sources_in<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    levels: Vec<Level>,
    c: u64,
    b: NodeId,
    mut list: Vec<(Option<usize>, NodeId)>,
) -> Result<Sources, FsError> {
    for i in 0..levels.len() {
        let id = levels[i].id(b);
        if levels[i].clone == 0 || b >= levels[i].floor {
            list.push((Some(i), id));
            return Ok(Sources { levels, list, c });
        }
        match levels[i].f.get(txn, &keys::clone_mark(id))?.and_then(|v| v.first().copied()) {
            Some(keys::CLONE_OWN) => {
                list.push((Some(i), id));
                return Ok(Sources { levels, list, c });
            }
            Some(keys::CLONE_MERGED) => list.push((Some(i), id)),
            Some(_) => return Err(FsError::Stale),
            None => {}
        }
    }
    Err(FsError::Stale)
}

/// A snapshot of a clone as its views read it: the clone's own frozen
/// layer first (its records as they were when the snapshot was taken:
/// what it had copied up, made, marked and whited out), then the layers
/// the clone reads through, as a clone made from that snapshot would (an
/// object with no record and no mark at the freeze reads on through the
/// clone's sources). Ids are the clone's (`clone_id(c, base)`).
pub(super) struct Snap {
    c: u64,
    rec: CloneRecord,
    levels: Vec<Level>,
}

impl Snap {
    /// The snapshot `f` of clone zone `f.zone`.
    pub(super) fn open<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, f: Frozen) -> Result<Snap, FsError> {
        let (c, _) = split(f.zone).ok_or(FsError::Stale)?;
        let (rec, rest) = chain(txn, c)?;
        let mut levels = vec![Level { f, clone: c, floor: rec.floor }];
        levels.extend(rest);
        Ok(Snap { c, rec, levels })
    }

    /// The clone number.
    pub(super) fn clone_no(&self) -> u64 {
        self.c
    }

    /// Clone object `x` as the snapshot holds it (ids the clone's).
    pub(super) fn node<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, x: NodeId) -> Result<Node, FsError> {
        let (c, b) = split(x).ok_or(FsError::Stale)?;
        if c != self.c {
            return Err(FsError::Stale);
        }
        let (mut n, i) = lower_in(txn, &self.levels, b)?;
        if i > 0 {
            remap_node(&mut n, c, x, &self.rec);
        }
        Ok(n)
    }

    /// Where object `x`'s contents are read.
    pub(super) fn through<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, x: NodeId) -> Result<Through, FsError> {
        through_in(txn, self.levels.clone(), x & view::ID_MAX)
    }

    /// The entries of directory `x` (children's ids the clone's).
    pub(super) fn sources<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, x: NodeId) -> Result<Sources, FsError> {
        sources_in(txn, self.levels.clone(), self.c, x & view::ID_MAX, Vec::new())
    }
}

impl Sources {
    fn get<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, src: Option<usize>, key: &[u8]) -> Result<Option<Vec<u8>>, FsError> {
        match src {
            None => Ok(txn.get(key)),
            Some(i) => self.levels[i].f.get(txn, key),
        }
    }

    /// Up to `per` (suffix, value) pairs under `prefix` from suffix `from`.
    fn scan<R: KvRead + ?Sized>(
        &self,
        txn: &mut Txn<'_, R>,
        src: Option<usize>,
        prefix: &[u8],
        from: &[u8],
        per: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, FsError> {
        match src {
            None => {
                let mut start = prefix.to_vec();
                start.extend_from_slice(from);
                Ok(txn
                    .scan(&start, &keys::prefix_end(prefix), per)
                    .into_iter()
                    .map(|(k, v)| (k[prefix.len()..].to_vec(), v))
                    .collect())
            }
            Some(i) => self.levels[i].f.scan_limit(txn, prefix, from, per),
        }
    }

    fn map(&self, v: &[u8]) -> Result<Edge, FsError> {
        let mut e: Edge = decode(v).ok_or(FsError::Io)?;
        e.child = clone_id(self.c, e.child & view::ID_MAX);
        Ok(e)
    }

    /// Entry `name`, its child's id mapped into the clone.
    pub(super) fn edge<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, name: &str) -> Result<Option<Edge>, FsError> {
        for &(src, id) in &self.list {
            if let Some(v) = self.get(txn, src, &keys::edge(id, name))? {
                return self.map(&v).map(Some);
            }
            if self.get(txn, src, &keys::whiteout(id, name))?.is_some() {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// The entries from suffix `from` on, at most `limit`, merged (a page
    /// reads about a page of each source per round, as `scan_limit`).
    pub(super) fn edges<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, from: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Edge)>, FsError> {
        let per = limit.max(16).saturating_add(1);
        let mut out = Vec::new();
        let mut from = from.to_vec();
        loop {
            let mut merged: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> = std::collections::BTreeMap::new();
            let mut cut: Option<Vec<u8>> = None;
            for &(src, id) in &self.list {
                for (prefix, edges) in [(keys::edge_prefix(id), true), (keys::whiteout_prefix(id), false)] {
                    let rows = self.scan(txn, src, &prefix, &from, per)?;
                    if rows.len() >= per {
                        let last = rows[rows.len() - 1].0.clone();
                        if cut.as_ref().map_or(true, |c| last < *c) {
                            cut = Some(last);
                        }
                    }
                    for (k, v) in rows {
                        merged.entry(k).or_insert(if edges { Some(v) } else { None });
                    }
                }
            }
            for (k, v) in merged {
                if cut.as_ref().is_some_and(|c| k > *c) {
                    break;
                }
                if let Some(v) = v {
                    out.push((k, self.map(&v)?));
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
            match cut {
                None => return Ok(out),
                Some(mut c) => {
                    c.push(0);
                    from = c;
                }
            }
        }
    }
}

// ---- hooks of the ordinary paths (machine.rs) ----

/// Edge `name` of clone directory `dir` when its entries are not all its
/// own records (`None`: read its own).
pub(super) fn edge<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, dir: NodeId, name: &str) -> Option<Option<Edge>> {
    if !is_clone_id(dir) {
        return None;
    }
    match sources(txn, dir) {
        Ok(None) => None,
        Err(_) => Some(None),
        Ok(Some(s)) => Some(s.edge(txn, name).ok().flatten()),
    }
}

/// The edge rows (`e` dir name -> Edge, as a scan returns them) of clone
/// directory `dir` from key `start` on, at most `limit`, merged from its
/// sources (`None`: scan its own).
pub(super) fn edge_rows<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    dir: NodeId,
    start: &[u8],
    limit: usize,
) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    if !is_clone_id(dir) {
        return None;
    }
    let s = match sources(txn, dir) {
        Ok(None) => return None,
        Err(_) => return Some(Vec::new()),
        Ok(Some(s)) => s,
    };
    let prefix = keys::edge_prefix(dir);
    let from = start.get(prefix.len()..).unwrap_or(&[]);
    let rows = s.edges(txn, from, limit).unwrap_or_default();
    Some(
        rows.into_iter()
            .filter_map(|(name, e)| {
                let mut k = prefix.clone();
                k.extend_from_slice(&name);
                Some((k, encode(&e).ok()?))
            })
            .collect(),
    )
}

/// An edge `name` was made in directory `dir`: a whiteout of it goes.
pub(super) fn linked<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, dir: NodeId, name: &str) {
    if is_clone_id(dir) && txn.get(&keys::whiteout(dir, name)).is_some() {
        txn.delete(keys::whiteout(dir, name));
    }
}

/// Edge `name` of directory `dir` was removed: in a merged directory a
/// whiteout hides its source's entry of that name.
pub(super) fn unlinked<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, dir: NodeId, name: &str) {
    if is_clone_id(dir) && mark(txn, dir) == Some(keys::CLONE_MERGED) {
        txn.put(keys::whiteout(dir, name), Vec::new());
    }
}

/// The extended attributes of `id` when they read through.
pub(super) fn eas<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Option<Vec<(String, Vec<u8>)>> {
    if !is_clone_id(id) {
        return None;
    }
    match through(txn, id) {
        Ok(None) => None,
        Err(_) => Some(Vec::new()),
        Ok(Some(t)) => Some(
            t.eas(txn)
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v))
                .collect(),
        ),
    }
}

/// File `id`'s inline data, read through when it is not its own.
pub(super) fn inline_data<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Result<Vec<u8>, FsError> {
    match through(txn, id)? {
        None => Ok(txn.get(&keys::data(id)).unwrap_or_default()),
        Some(t) => Ok(t.inline(txn)?.unwrap_or_default()),
    }
}

/// The file whose chunks a read of chunked file `id` plans on.
pub(super) fn chunk_file<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Result<NodeId, FsError> {
    match through(txn, id)? {
        None => Ok(id),
        Some(t) => t.chunks(txn),
    }
}

/// Marks a clone object deleted (its node record is gone).
pub(super) fn gone<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) {
    if is_clone_id(id) {
        txn.put(keys::clone_mark(id), vec![keys::CLONE_GONE]);
        let p = keys::whiteout_prefix(id);
        for (k, _) in txn.scan(&p, &keys::prefix_end(&p), usize::MAX) {
            txn.delete(k);
        }
    }
}

/// Copies up object `x` of a clone: its node record and its own contents
/// (a directory's entries, not its subtree; a file's inline data, extended
/// attributes, and chunk records sharing the lower chunks by reference).
pub(super) fn materialise<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, x: NodeId) -> Result<(), FsError> {
    let Some(t) = through(txn, x)? else { return Ok(()) };
    let mut n = get_node(txn, x)?;
    // The lower object's DACL comes up with it (a node marked with one
    // has its record).
    if n.has_acl {
        match t.acl(txn)? {
            Some(v) => txn.put(keys::acl(x), v),
            None => {
                n.has_acl = false;
                put_node(txn, &n);
            }
        }
    }
    if txn.get(&keys::node(x)).is_none() {
        put_node(txn, &n);
    }
    let mut own = keys::CLONE_OWN;
    match n.attrs.ftype {
        // A directory's entries stay where they are: its own edges and
        // whiteouts lie over them from now on.
        FileType::Directory => own = keys::CLONE_MERGED,
        FileType::Regular if n.chunked => {
            let src = t.chunks(txn)?;
            share_chunks(txn, ex, src, x);
        }
        FileType::Regular => {
            if let Some(d) = t.inline(txn)? {
                txn.put(keys::data(x), d);
            }
        }
        _ => {}
    }
    if n.may_have_eas {
        for (name, v) in t.eas(txn)? {
            let mut k = keys::ea_prefix(x);
            k.extend_from_slice(&name);
            txn.put(k, v);
        }
    }
    txn.put(keys::clone_mark(x), vec![own]);
    Ok(())
}

/// Before a mutating operation runs: copies up every clone object it may
/// change (the objects it names, and the entries it removes, replaces or
/// truncates by name).
pub(super) fn prepare<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, op: &Op) -> Result<(), FsError> {
    let r = |ex: &Exec<'_>, o: &ObjRef| resolve(ex, *o).ok();
    let mut objs: Vec<Option<NodeId>> = Vec::new();
    let mut named: Vec<(Option<NodeId>, &str, bool)> = Vec::new();
    match op {
        Op::Create { dir, name, if_exists, .. } | Op::CreateCaseless { dir, name, if_exists, .. } => {
            objs.push(r(ex, dir));
            if *if_exists == IfExists::Truncate {
                named.push((r(ex, dir), name, matches!(op, Op::CreateCaseless { .. })));
            }
        }
        Op::Remove { dir, name, .. } => {
            objs.push(r(ex, dir));
            named.push((r(ex, dir), name, false));
        }
        Op::Rename { src_dir, src_name, dst_dir, dst_name, .. } => {
            objs.push(r(ex, src_dir));
            objs.push(r(ex, dst_dir));
            named.push((r(ex, src_dir), src_name, false));
            named.push((r(ex, dst_dir), dst_name, false));
        }
        Op::Link { obj, dir, .. } => {
            objs.push(r(ex, obj));
            objs.push(r(ex, dir));
        }
        Op::SetEas { obj, .. }
        | Op::SetXattr { obj, .. }
        | Op::ZeroRange { obj, .. }
        | Op::Open { obj, .. }
        | Op::SetAttr { obj, .. }
        | Op::Write { obj, .. } => objs.push(r(ex, obj)),
        Op::Clone { src, dst, .. } | Op::Copy { src, dst, .. } => {
            objs.push(r(ex, src));
            objs.push(r(ex, dst));
        }
        _ => {}
    }
    if !objs.iter().flatten().any(|id| is_clone_id(*id)) {
        return Ok(());
    }
    for id in objs.into_iter().flatten() {
        if is_clone_id(id) {
            materialise(txn, ex, id)?;
            if matches!(op, Op::SetAttr { .. }) {
                // A directory's mode and owner are kept in its edge too.
                if let Ok(n) = get_node(txn, id) {
                    if n.attrs.ftype == FileType::Directory && is_clone_id(n.parent) {
                        materialise(txn, ex, n.parent)?;
                    }
                }
            }
        }
    }
    for (dir, name, caseless) in named {
        let Some(dir) = dir else { continue };
        let child = match get_edge(txn, dir, name) {
            Some(e) => Some(e.child),
            None if caseless => find_caseless(txn, dir, name).map(|(_, e)| e.child),
            None => None,
        };
        if let Some(c) = child.filter(|c| is_clone_id(*c)) {
            materialise(txn, ex, c)?;
        }
    }
    Ok(())
}

// ---- admin commands ----

/// Checks a clone share's name: as a snapshot's (no `/`, `@`, `\` or
/// control characters, not `.`/`..`).
fn check_clone_name(name: &str) -> Result<(), AdminError> {
    super::layers::check_snapshot_name(name).map_err(|_| {
        AdminError::Invalid(format!("bad share name {name:?}: 1 to 255 bytes, no '/', '@', '\\' or control characters"))
    })
}

/// `Command::Clone`: share `share` becomes a writable clone of `source`
/// at snapshot `snapshot` (none: one taken now, named `clone.NEW`).
pub(super) fn create<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    source: &str,
    snapshot: Option<&str>,
    share: &ShareRecord,
    now: TimeNs,
) -> Result<(), AdminError> {
    check_clone_name(&share.name)?;
    if txn.get(&keys::share(&share.name)).is_some() {
        return Err(AdminError::Exists(format!("share {}", share.name)));
    }
    let src_root = share_dir(txn, source)?;
    let zone = get_node(txn, src_root).map(|n| n.zone).unwrap_or(0);
    if zone != src_root {
        return Err(AdminError::Invalid(format!(
            "share {source}: its directory was not made by a share of this version (or lies inside another \
             share's), so it has no layers and cannot be cloned"
        )));
    }
    let (source_clone, depth, root_base) = match split(zone) {
        Some((c, b)) => {
            let r = record(txn, c).ok_or_else(|| AdminError::Invalid(format!("share {source}: clone record missing")))?;
            (c, r.depth + 1, b)
        }
        None => (0, 1, zone),
    };
    if depth > DEPTH_MAX {
        return Err(AdminError::Invalid(format!(
            "share {source} is a clone {} deep: a clone may be at most {DEPTH_MAX} deep",
            depth - 1
        )));
    }
    let comps: Vec<&str> = share.path.split('/').filter(|c| !c.is_empty()).collect();
    let Some((leaf, parents)) = comps.split_last() else {
        return Err(AdminError::Invalid(format!("clone share {}: path {:?} names no directory", share.name, share.path)));
    };
    for comp in &comps {
        check_name(comp).map_err(|_| AdminError::Invalid(format!("bad path component {comp:?}")))?;
    }
    // Every check before the first write (a refused command's writes
    // would be applied all the same): the parents that exist, the zone
    // the clone's directory would lie in, the snapshot, the numbers.
    let mut parent = ROOT_ID;
    let mut missing = parents.len();
    for (i, comp) in parents.iter().enumerate() {
        match get_edge(txn, parent, comp) {
            Some(e) if e.ftype == FileType::Directory => parent = e.child,
            Some(_) => return Err(AdminError::Invalid(format!("{} is not a directory", share.path))),
            None => {
                missing = i;
                break;
            }
        }
    }
    let pnode = get_node(txn, parent).map_err(|_| AdminError::Invalid(format!("cannot create {}", share.path)))?;
    if pnode.zone != 0 {
        return Err(AdminError::Invalid(format!(
            "clone share {}: its directory {} would lie inside a share's; put it outside every share",
            share.name, share.path
        )));
    }
    if missing == parents.len() && get_edge(txn, parent, leaf).is_some() {
        return Err(AdminError::Exists(format!("path {}", share.path)));
    }
    let (snap_name, implicit) = match snapshot {
        Some(s) => (s.to_string(), false),
        None => (format!("clone.{}", share.name), true),
    };
    // The root as the frozen layer has it (taken now: as it is now).
    let frozen_root = if implicit {
        get_node(txn, src_root).map_err(|_| AdminError::Invalid(format!("share {source}: no directory")))?
    } else {
        let layer = zone_snapshots(txn, zone)
            .into_iter()
            .find(|s| s.name == snap_name)
            .map(|s| s.layer)
            .ok_or_else(|| AdminError::NotFound(format!("snapshot {snap_name} of share {source}")))?;
        let f = Frozen::open(txn, layer).map_err(|e| AdminError::Invalid(format!("snapshot {snap_name}: {e:?}")))?;
        f.get(txn, &keys::node(src_root))
            .ok()
            .flatten()
            .and_then(|v| Node::decode(&v))
            .ok_or_else(|| AdminError::Invalid(format!("snapshot {snap_name} of share {source}: no root")))?
    };
    let c = counter(txn, "next_layer").max(1) + u64::from(implicit);
    if c > CLONE_MAX {
        return Err(AdminError::Invalid("no clone numbers left".into()));
    }
    // The writes: the parents (mkdir -p, as a share's), the snapshot when
    // one is taken (it checks its own name and limits before writing).
    if implicit {
        super::layers::snapshot(txn, source, &snap_name, now)?;
    }
    let layer = zone_snapshots(txn, zone)
        .into_iter()
        .find(|s| s.name == snap_name)
        .map(|s| s.layer)
        .ok_or_else(|| AdminError::NotFound(format!("snapshot {snap_name} of share {source}")))?;
    for comp in &parents[missing..] {
        let mut b = Batch::new(duet_fs::Credentials::root(), now);
        b.push(Op::Create {
            dir: ObjRef::Id(parent),
            name: comp.to_string(),
            kind: CreateKind::Directory,
            attrs: SetAttrs { mode: Some(0o755), ..Default::default() },
            if_exists: IfExists::Open,
        });
        parent = match execute(txn, &b).results.into_iter().next() {
            Some(Ok(OpOutput::Object { attrs, .. })) => attrs.id,
            _ => return Err(AdminError::Invalid(format!("cannot create {}", share.path))),
        };
    }
    let mut pnode = get_node(txn, parent).map_err(|_| AdminError::Invalid(format!("cannot create {}", share.path)))?;
    let c = counter(txn, "next_layer").max(1);
    put_counter(txn, "next_layer", c + 1);
    let x = clone_id(c, root_base);
    let rec = CloneRecord {
        name: share.name.clone(),
        source: source.to_string(),
        snapshot: snap_name,
        implicit,
        layer,
        source_zone: zone,
        source_clone,
        root_base,
        parent,
        leaf: leaf.to_string(),
        floor: counter(txn, "next_id").max(ROOT_ID + 1),
        depth,
        created_ns: now,
    };
    txn.put_record(keys::clone(c), &rec);
    // The root: a node record of its own (its parent is live), its
    // entries read through.
    let mut root = frozen_root;
    root.attrs.id = x;
    root.parent = parent;
    root.zone = x;
    root.attrs.ctime = now;
    put_node(txn, &root);
    txn.put_record(keys::edge(parent, leaf), &edge_for(&root));
    pnode.attrs.nlink += 1;
    touch(&mut pnode.attrs, now, true);
    put_node(txn, &pnode);
    txn.put_record(keys::share(&share.name), share);
    Ok(())
}

/// `Command::RemoveShare` of share `name`: refused while a clone stands on
/// it; a clone share's records are all dropped (`Ok(true)`), its chunked
/// files detached and queued for reclaim, its snapshot dropped when it was
/// taken for it. `Ok(false)`: not a clone.
pub(super) fn remove_share<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    name: &str,
) -> Result<bool, AdminError> {
    if txn.scan(&[keys::CLONE], &[keys::CLONE + 1], 1).is_empty() {
        return Ok(false);
    }
    let clones = all(txn);
    if let Some((_, r)) = clones.iter().find(|(_, r)| r.source == name) {
        return Err(AdminError::Invalid(format!("share {name} is the origin of clone share {}: delete that share first", r.name)));
    }
    let Some((c, rec)) = clones.into_iter().find(|(_, r)| r.name == name) else { return Ok(false) };
    // The clone's own snapshots go first (no clone stands on them: checked
    // above), then every record in its id range.
    let zone = clone_id(c, rec.root_base);
    for s in zone_snapshots(txn, zone) {
        super::layers::drop_snapshot(txn, ex, name, &s.name)?;
    }
    let lo = clone_id(c, 0);
    let hi = clone_id(c, view::ID_MAX);
    let range = |p: u8| {
        let mut a = vec![p];
        a.extend_from_slice(&lo.to_be_bytes());
        let mut b = vec![p];
        b.extend_from_slice(&hi.to_be_bytes());
        (a, keys::prefix_end(&b))
    };
    let mut chunked = std::collections::BTreeSet::new();
    let (a, b) = range(keys::CHUNK);
    for (k, v) in txn.scan(&a, &b, usize::MAX) {
        if let Some(blob) = keys::chunk_blob(&v) {
            drop_ref(txn, blob);
        }
        if let Some(id) = keys::u64_at(&k, 1) {
            chunked.insert(id);
        }
        txn.delete(k);
    }
    let (a, b) = range(keys::NODE);
    for (k, v) in txn.scan(&a, &b, usize::MAX) {
        if let (Some(id), Some(n)) = (keys::u64_at(&k, 1), Node::decode(&v)) {
            if n.chunked {
                chunked.insert(id);
            }
        }
        txn.delete(k);
    }
    for p in [keys::EDGE, keys::DATA, keys::EA, keys::CLONE_MARK, keys::WHITEOUT] {
        let (a, b) = range(p);
        for (k, _) in txn.scan(&a, &b, usize::MAX) {
            txn.delete(k);
        }
    }
    // A chunked file may have data queued for it without chunk records of
    // its own yet (a `CloneFrom` not yet applied): detach it all the same.
    for id in chunked {
        txn.put(keys::detached(id), Vec::new());
        queue(txn, ex, id, DataOp::Reclaim);
    }
    txn.delete(keys::edge(rec.parent, &rec.leaf));
    if let Ok(mut p) = get_node(txn, rec.parent) {
        p.attrs.nlink = p.attrs.nlink.saturating_sub(1);
        p.attrs.change += 1;
        put_node(txn, &p);
    }
    txn.delete(keys::clone(c));
    // The snapshot taken for it goes too, unless another clone was made
    // from it since (it stays then, an ordinary snapshot).
    if rec.implicit && standing_on(txn, rec.layer).is_none() {
        super::layers::drop_snapshot(txn, ex, &rec.source, &rec.snapshot)?;
    }
    Ok(true)
}
