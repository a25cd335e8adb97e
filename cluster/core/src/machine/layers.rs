//! Layers: read-only snapshots of a share (`cluster/STORAGE-MODEL.md`,
//! "Layers").
//!
//! The live records (`n`, `e`, `d`, `E`, `k`) always hold the share's
//! current state, so live operations never fall through anything. Taking a
//! snapshot writes three small records (`Y`, `Z`, `z`): the zone's newest
//! frozen layer. From then on the first change of a live record of the
//! zone keeps its before-image under the newest layer (`y` layer key:
//! absent, or the old value) — done once per key per layer, after each
//! batch ([`preserve`]), from the transaction's base. File data is kept by
//! reference: the first data change of a chunked file makes a *shadow*
//! file whose chunk records name the same blobs (one `CloneFrom` record,
//! no bytes copied), so only the chunks later written are copied
//! ([`cow`]). A view of layer L reads a key from the first of the zone's
//! layers L, L+1, ..., newest that holds a before-image of it, else from
//! the live record ([`Frozen::get`]); listings merge one ordered scan per
//! layer with the live scan, lowest layer first, absent marks hiding
//! names (whiteouts).
//!
//! Views are addressed by ids with [`duet_fs::view`]'s bit set, so every
//! read-only operation works on them and every mutation is refused
//! (`ReadOnly`) before it runs.

use std::collections::BTreeMap;

use duet_fs::view;

use super::*;

/// Most snapshots one share may have.
pub const SNAPSHOT_MAX: usize = 256;

/// The zone record (`z` zone): the newest frozen layer (0: none left), a
/// generation bumped by every snapshot taken or deleted, and the time of
/// the last one (the `.snapshot` directory's change and mtime).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ZoneRec {
    pub newest: u64,
    pub gen: u64,
    pub time: TimeNs,
}

impl ZoneRec {
    fn decode(b: &[u8]) -> Option<ZoneRec> {
        if b.len() != 24 {
            return None;
        }
        Some(ZoneRec {
            newest: keys::u64_at(b, 0)?,
            gen: keys::u64_at(b, 8)?,
            time: keys::u64_at(b, 16)? as i64,
        })
    }
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24);
        v.extend_from_slice(&self.newest.to_be_bytes());
        v.extend_from_slice(&self.gen.to_be_bytes());
        v.extend_from_slice(&self.time.to_be_bytes());
        v
    }
}

/// Whether any layer was ever made (the counter is absent before): until
/// then nothing of this module costs a read.
fn any_layers<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>) -> bool {
    counter(txn, "next_layer") > 0
}

fn zone_rec<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, zone: NodeId) -> Option<ZoneRec> {
    if zone == 0 {
        return None;
    }
    txn.get(&keys::zone(zone)).and_then(|v| ZoneRec::decode(&v))
}

/// The newest frozen layer of `zone`, if it has one.
fn newest<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, zone: NodeId) -> Option<u64> {
    zone_rec(txn, zone).map(|z| z.newest).filter(|l| *l != 0)
}

/// The zone of node `id`, as this transaction or its base has it.
fn zone_of<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> NodeId {
    let k = keys::node(id);
    txn.get(&k)
        .or_else(|| txn.base_get(&k))
        .and_then(|v| Node::decode(&v))
        .map(|n| n.zone)
        // A clone's object made and deleted in this one command (copied up
        // to be deleted) has no node record either side: its clone's zone.
        .unwrap_or_else(|| super::clone::zone_of_id(txn, id))
}

/// Keeps the before-image of every node, edge, inline-data, extended
/// attribute and DACL record this transaction wrote, under its zone's newest layer,
/// unless that layer holds one already. The before-image is the base's
/// value: what the record was before this command (a snapshot is a command
/// of its own, so no layer froze in between).
pub(super) fn preserve<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>) {
    if txn.is_empty() || !any_layers(txn) {
        return;
    }
    let written = txn.written_keys(keys::LAYERED);
    let mut layer_of: BTreeMap<NodeId, Option<u64>> = BTreeMap::new();
    for key in written {
        // Every one of these keys holds its owner's id at byte 1 (the node,
        // the edge's directory, the data's or attribute's node); a
        // directory and its entries are in one zone.
        let Some(owner) = keys::u64_at(&key, 1) else { continue };
        let layer = match layer_of.get(&owner) {
            Some(l) => *l,
            None => {
                let zone = zone_of(txn, owner);
                let l = newest(txn, zone);
                layer_of.insert(owner, l);
                l
            }
        };
        let Some(layer) = layer else { continue };
        let yk = keys::layered(layer, &key);
        if txn.get(&yk).is_some() {
            continue;
        }
        let before = txn.base_get(&key);
        if before.is_none() && txn.get(&key).is_none() {
            // A deletion of what never was: no change to keep.
            continue;
        }
        txn.put(yk, keys::preserved(before.as_deref()));
    }
}

/// Before the first data change of file `id` since its zone's newest layer
/// froze: when the file was chunked then, its chunks get a shadow file
/// that shares every one of them by reference (blobs, as a clone), so the
/// layer keeps the data while the live file copies only the chunks it
/// changes. Called before anything changes the file's chunk records or
/// queues data for it.
pub(super) fn cow<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, id: NodeId) {
    if !any_layers(txn) {
        return;
    }
    let zone = zone_of(txn, id);
    let Some(layer) = newest(txn, zone) else { return };
    let yd = keys::layered(layer, &keys::shadow(id));
    if txn.get(&yd).is_some() {
        return;
    }
    // The file as the layer froze it: its before-image when it has one,
    // else the base (unchanged since the freeze until this command).
    let frozen = match txn.get(&keys::layered(layer, &keys::node(id))) {
        Some(v) => keys::unpreserved(&v).flatten().and_then(Node::decode),
        None => txn.base_get(&keys::node(id)).and_then(|v| Node::decode(&v)),
    };
    if !frozen.is_some_and(|n| n.chunked) {
        // Created since, or inline then: the `d` before-image keeps it.
        return;
    }
    let sid = counter(txn, "next_id").max(ROOT_ID + 1);
    put_counter(txn, "next_id", sid + 1);
    share_chunks(txn, ex, id, sid);
    txn.put(yd, sid.to_be_bytes().to_vec());
}

/// Gives file `dst` chunk records naming every chunk of file `src` by
/// reference, and queues one `DataOp::CloneFrom` on `dst` (its chunk files
/// hard-linked on each node, no bytes copied). A chunk `src` owns outright
/// becomes a blob first (its bytes do not change, so frozen views and
/// clones reading through still read it). Used by `cow` (a layer's shadow)
/// and by a clone's copy-up (`clone::materialise`).
pub(super) fn share_chunks<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, src: NodeId, dst: NodeId) {
    let prefix = keys::chunk_prefix(src);
    let mut share = Vec::new();
    for (k, v) in txn.scan(&prefix, &keys::prefix_end(&prefix), usize::MAX) {
        let Some(idx) = keys::u64_at(&k, 9) else { continue };
        let b = match keys::chunk_blob(&v) {
            Some(b) => b,
            None => {
                let b = counter(txn, "next_blob").max(1);
                put_counter(txn, "next_blob", b + 1);
                txn.put(k, b.to_be_bytes().to_vec());
                set_refs(txn, b, 1);
                b
            }
        };
        txn.put(keys::chunk(dst, idx), b.to_be_bytes().to_vec());
        let n = blob_refs(txn, b);
        set_refs(txn, b, n + 1);
        share.push((idx, idx));
    }
    if !share.is_empty() {
        queue(txn, ex, dst, DataOp::CloneFrom { src, share, copy: Vec::new() });
    }
}

// ---- snapshot commands ----

/// Checks a snapshot name: 1..=255 bytes, not `.`/`..`, no `/`, `@`, `\`
/// or control character.
pub fn check_snapshot_name(name: &str) -> Result<(), AdminError> {
    if name.is_empty() || name.len() > duet_fs::NAME_MAX || name == "." || name == ".." {
        return Err(AdminError::Invalid(format!("bad snapshot name {name:?}: 1 to 255 bytes, not . or ..")));
    }
    if name.chars().any(|c| c == '/' || c == '@' || c == '\\' || c.is_control()) {
        return Err(AdminError::Invalid(format!(
            "bad snapshot name {name:?}: no '/', '@', '\\' or control characters"
        )));
    }
    Ok(())
}

/// The directory node of a share's path.
pub(super) fn share_dir<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, share: &str) -> Result<NodeId, AdminError> {
    let rec: ShareRecord = txn
        .get(&keys::share(share))
        .and_then(|v| ShareRecord::decode(&v))
        .ok_or_else(|| AdminError::NotFound(format!("share {share}")))?;
    let mut dir = ROOT_ID;
    for comp in rec.path.split('/').filter(|c| !c.is_empty()) {
        match get_edge(txn, dir, comp) {
            Some(e) if e.ftype == FileType::Directory => dir = e.child,
            _ => return Err(AdminError::Invalid(format!("share {share}: its directory {} is gone", rec.path))),
        }
    }
    Ok(dir)
}

/// The snapshots of zone `zone`, oldest first.
pub(super) fn zone_snapshots<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, zone: NodeId) -> Vec<SnapshotRecord> {
    let p = keys::snapshot_prefix(zone);
    txn.scan(&p, &keys::prefix_end(&p), usize::MAX).into_iter().filter_map(|(_, v)| decode(&v)).collect()
}

/// `Command::Snapshot`: freezes the share's zone as a new layer.
pub(super) fn snapshot<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    share: &str,
    name: &str,
    now: TimeNs,
) -> Result<(), AdminError> {
    check_snapshot_name(name)?;
    let root = share_dir(txn, share)?;
    let zone = get_node(txn, root).map_err(|_| AdminError::Invalid(format!("share {share}: no directory")))?.zone;
    if zone != root {
        return Err(AdminError::Invalid(format!(
            "share {share}: its directory was not made by a share of this version (or lies inside another \
             share's), so it has no layers; snapshots need a share created since"
        )));
    }
    let existing = zone_snapshots(txn, zone);
    if existing.iter().any(|s| s.name == name) {
        return Err(AdminError::Exists(format!("snapshot {name} of share {share}")));
    }
    if existing.len() >= SNAPSHOT_MAX {
        return Err(AdminError::Invalid(format!(
            "share {share} has {} snapshots, the most it may have: delete one first",
            existing.len()
        )));
    }
    let layer = counter(txn, "next_layer").max(1);
    if layer > view::LAYER_MAX {
        return Err(AdminError::Invalid("no layer ids left".into()));
    }
    put_counter(txn, "next_layer", layer + 1);
    txn.put_record(keys::snapshot(zone, layer), &SnapshotRecord { name: name.into(), layer, root, created_ns: now });
    txn.put(keys::layer_zone(layer), zone.to_be_bytes().to_vec());
    let mut z = zone_rec(txn, zone).unwrap_or_default();
    z.newest = layer;
    z.gen += 1;
    z.time = now;
    txn.put(keys::zone(zone), z.encode());
    Ok(())
}

/// `Command::DropSnapshot`: the layer's before-images move to the next
/// older snapshot of the zone where it has none of its own (an older view
/// falls through to them), the rest are dropped; a dropped shadow's
/// chunks lose their references and the shadow is detached and queued
/// for reclaim, as an unlinked file's (`x`, `DataOp::Reclaim`).
pub(super) fn drop_snapshot<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    share: &str,
    name: &str,
) -> Result<(), AdminError> {
    let root = share_dir(txn, share)?;
    let zone = get_node(txn, root).map(|n| n.zone).unwrap_or(0);
    let snaps = if zone == root { zone_snapshots(txn, zone) } else { Vec::new() };
    let Some(at) = snaps.iter().position(|s| s.name == name) else {
        return Err(AdminError::NotFound(format!("snapshot {name} of share {share}")));
    };
    let layer = snaps[at].layer;
    if let Some(c) = super::clone::standing_on(txn, layer) {
        return Err(AdminError::Invalid(format!(
            "snapshot {name} of share {share} is the origin of clone share {}: delete that share first",
            c.name
        )));
    }
    let older = at.checked_sub(1).map(|i| snaps[i].layer);
    let p = keys::layer_prefix(layer);
    for (k, v) in txn.scan(&p, &keys::prefix_end(&p), usize::MAX) {
        let key = &k[p.len()..];
        txn.delete(k.clone());
        if let Some(o) = older {
            let ok = keys::layered(o, key);
            if txn.get(&ok).is_none() {
                txn.put(ok, v);
                continue;
            }
        }
        if key.first() == Some(&keys::SHADOW) {
            if let Ok(b) = <[u8; 8]>::try_from(v.as_slice()) {
                reclaim_shadow(txn, ex, u64::from_be_bytes(b));
            }
        }
    }
    txn.delete(keys::snapshot(zone, layer));
    txn.delete(keys::layer_zone(layer));
    let mut z = zone_rec(txn, zone).unwrap_or_default();
    if z.newest == layer {
        z.newest = older.unwrap_or(0);
    }
    z.gen += 1;
    z.time = ex.batch.now_ns;
    txn.put(keys::zone(zone), z.encode());
    Ok(())
}

/// Drops a shadow file's chunk references and queues its reclaim.
fn reclaim_shadow<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, sid: NodeId) {
    let prefix = keys::chunk_prefix(sid);
    let rows = txn.scan(&prefix, &keys::prefix_end(&prefix), usize::MAX);
    for (k, v) in &rows {
        if let Some(b) = keys::chunk_blob(v) {
            drop_ref(txn, b);
        }
        txn.delete(k.clone());
    }
    txn.put(keys::detached(sid), Vec::new());
    queue(txn, ex, sid, DataOp::Reclaim);
}

/// The snapshots of a share, oldest first (`None`: no such share).
pub fn list_snapshots<R: KvRead + ?Sized>(kv: &R, share: &str) -> Option<Vec<SnapshotRecord>> {
    let mut txn = Txn::new(kv);
    let root = match share_dir(&mut txn, share) {
        Ok(r) => r,
        Err(AdminError::NotFound(_)) => return None,
        Err(_) => return Some(Vec::new()),
    };
    Some(zone_snapshots(&mut txn, root))
}

// ---- views ----

/// A frozen layer as a view reads it: the zone and the zone's layers from
/// it to the newest, oldest first.
#[derive(Clone)]
pub(super) struct Frozen {
    layer: u64,
    pub(super) zone: NodeId,
    layers: Vec<u64>,
}

impl Frozen {
    pub(super) fn open<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, layer: u64) -> Result<Frozen, FsError> {
        let zone = txn.get(&keys::layer_zone(layer)).and_then(|v| keys::u64_at(&v, 0)).ok_or(FsError::Stale)?;
        let layers = zone_snapshots(txn, zone).into_iter().map(|s| s.layer).filter(|l| *l >= layer).collect();
        Ok(Frozen { layer, zone, layers })
    }

    /// Live key `key` as this layer froze it.
    pub(super) fn get<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, key: &[u8]) -> Result<Option<Vec<u8>>, FsError> {
        for &l in &self.layers {
            if let Some(v) = txn.get(&keys::layered(l, key)) {
                return Ok(keys::unpreserved(&v).ok_or(FsError::Io)?.map(|b| b.to_vec()));
            }
        }
        Ok(txn.get(key))
    }

    /// The pairs under live prefix `prefix` (suffix, value) as this layer
    /// froze them, in suffix order, from `from` (a suffix) on: one ordered
    /// scan per layer and one of the live records, the lowest layer's
    /// before-image winning, absent marks hiding the live name.
    pub(super) fn scan<R: KvRead + ?Sized>(
        &self,
        txn: &mut Txn<'_, R>,
        prefix: &[u8],
        from: &[u8],
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, FsError> {
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for &l in &self.layers {
            let lp = keys::layered(l, prefix);
            let mut start = lp.clone();
            start.extend_from_slice(from);
            for (k, v) in txn.scan(&start, &keys::prefix_end(&lp), usize::MAX) {
                let value = keys::unpreserved(&v).ok_or(FsError::Io)?.map(|b| b.to_vec());
                merged.entry(k[lp.len()..].to_vec()).or_insert(value);
            }
        }
        let mut start = prefix.to_vec();
        start.extend_from_slice(from);
        for (k, v) in txn.scan(&start, &keys::prefix_end(prefix), usize::MAX) {
            merged.entry(k[prefix.len()..].to_vec()).or_insert(Some(v));
        }
        Ok(merged.into_iter().filter_map(|(k, v)| Some((k, v?))).collect())
    }

    /// As [`Frozen::scan`], at most `limit` pairs, reading at most about
    /// `limit` records of each layer per round (a page of a large frozen
    /// directory costs its page, not the rest of the directory): pairs up
    /// to the smallest last key of a source cut short are exact; past it,
    /// another round.
    pub(super) fn scan_limit<R: KvRead + ?Sized>(
        &self,
        txn: &mut Txn<'_, R>,
        prefix: &[u8],
        from: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, FsError> {
        let per = limit.max(16).saturating_add(1);
        let mut out = Vec::new();
        let mut from = from.to_vec();
        loop {
            let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            let mut cut: Option<Vec<u8>> = None;
            let mut sources: Vec<(Vec<u8>, bool)> = self.layers.iter().map(|&l| (keys::layered(l, prefix), true)).collect();
            sources.push((prefix.to_vec(), false));
            for (p, layered) in sources {
                let mut start = p.clone();
                start.extend_from_slice(&from);
                let rows = txn.scan(&start, &keys::prefix_end(&p), per);
                if rows.len() == per {
                    let last = rows[rows.len() - 1].0[p.len()..].to_vec();
                    if cut.as_ref().map_or(true, |c| last < *c) {
                        cut = Some(last);
                    }
                }
                for (k, v) in rows {
                    let value = if layered { keys::unpreserved(&v).ok_or(FsError::Io)?.map(|b| b.to_vec()) } else { Some(v) };
                    merged.entry(k[p.len()..].to_vec()).or_insert(value);
                }
            }
            for (k, v) in merged {
                if cut.as_ref().is_some_and(|c| k > *c) {
                    break;
                }
                if let Some(v) = v {
                    out.push((k, v));
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

    /// The file whose chunks hold chunked file `id` as this layer froze
    /// it: a shadow, or (unchanged since) `id` itself.
    pub(super) fn shadow_of<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, id: NodeId) -> Result<NodeId, FsError> {
        for &l in &self.layers {
            if let Some(v) = txn.get(&keys::layered(l, &keys::shadow(id))) {
                return keys::u64_at(&v, 0).ok_or(FsError::Io);
            }
        }
        Ok(id)
    }
}

/// Whether operation `op`, with its objects resolved by `resolve`, would
/// change a view (a snapshot object or a `.snapshot` directory): such an
/// operation is refused with `ReadOnly` before it runs.
pub(super) fn changes_view(op: &Op, resolve: impl Fn(ObjRef) -> Option<NodeId>) -> bool {
    let v = |r: &ObjRef| resolve(*r).is_some_and(view::is_view);
    match op {
        Op::Create { dir, .. } | Op::CreateCaseless { dir, .. } | Op::Remove { dir, .. } => v(dir),
        Op::SetAttr { obj, attrs } => !attrs.is_empty() && v(obj),
        Op::Write { obj, .. } | Op::SetEas { obj, .. } | Op::ZeroRange { obj, .. } | Op::SetXattr { obj, .. } => v(obj),
        Op::SetAcl { obj, .. } => v(obj),
        Op::Rename { src_dir, dst_dir, .. } => v(src_dir) || v(dst_dir),
        Op::Link { obj, dir, .. } => v(obj) || v(dir),
        Op::Copy { dst, .. } | Op::Clone { dst, .. } => v(dst),
        Op::Open { obj, access, truncate } => (*truncate || access.write) && v(obj),
        _ => false,
    }
}

/// The attributes of directory `d`'s virtual `.snapshot` directory.
fn snapdir_attrs<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, d: &Node) -> Attrs {
    let z = zone_rec(txn, d.zone).unwrap_or_default();
    let mut a = d.attrs.clone();
    a.id = snapdir_id(d.attrs.id);
    a.mode = 0o555;
    a.nlink = 2;
    a.size = 0;
    a.alloc_size = 0;
    a.dos_attrs = duet_fs::dos::READONLY;
    if z.time != 0 {
        a.mtime = z.time;
        a.ctime = z.time;
    }
    a.change = z.gen + 1;
    a
}

fn object(attrs: Attrs) -> OpResult {
    Ok(OpOutput::Object { attrs, created: false, dir_before: None, dir_after: None })
}

/// The id of directory `dir`'s `.snapshot` directory: layer 0 with the
/// directory's id for an ordinary share's; for a clone's directory
/// `clone_id(c, base)`, the clone's number `c` in the layer field with
/// `base` (layer ids and clone numbers come from one counter, so a number
/// names a layer or a clone, never both).
fn snapdir_id(dir: NodeId) -> NodeId {
    match super::clone::split(dir) {
        Some((c, b)) => view::id(c, b),
        None => view::id(0, dir),
    }
}

/// What an object id names for reading.
enum Obj {
    Live,
    /// The `.snapshot` directory of live directory `dir`.
    SnapDir { dir: NodeId },
    /// Object `low` (the low bits of its id) frozen in `layer`.
    Frozen { layer: u64, low: NodeId },
}

fn classify<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Result<Obj, FsError> {
    Ok(match view::split(id) {
        None => Obj::Live,
        Some((0, dir)) => Obj::SnapDir { dir },
        Some((n, low)) => {
            if txn.get(&keys::layer_zone(n)).is_some() {
                Obj::Frozen { layer: n, low }
            } else if txn.get(&keys::clone(n)).is_some() {
                Obj::SnapDir { dir: super::clone::clone_id(n, low) }
            } else {
                return Err(FsError::Stale);
            }
        }
    })
}

/// A snapshot as views read it: an ordinary share's frozen layer, or a
/// clone's (its frozen records over the layers the clone reads through).
/// Objects are named by their *real* ids: a live id, or a clone's id.
pub(super) struct View {
    f: Frozen,
    clone: Option<super::clone::Snap>,
}

impl View {
    pub(super) fn open<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, layer: u64) -> Result<View, FsError> {
        let f = Frozen::open(txn, layer)?;
        let clone = if super::clone::is_clone_id(f.zone) { Some(super::clone::Snap::open(txn, f.clone())?) } else { None };
        Ok(View { f, clone })
    }

    fn zone(&self) -> NodeId {
        self.f.zone
    }

    /// The real id of the object whose view id has low bits `low`.
    fn real(&self, low: NodeId) -> NodeId {
        match &self.clone {
            Some(s) => super::clone::clone_id(s.clone_no(), low),
            None => low,
        }
    }

    /// The view id of real id `real`. An id a view cannot name (a live id
    /// past `view::ID_MAX`; the allocator makes none) is refused, never
    /// aliased.
    fn vid(&self, real: NodeId) -> Result<NodeId, FsError> {
        let low = match (&self.clone, super::clone::split(real)) {
            (Some(s), Some((c, b))) if c == s.clone_no() => b,
            (None, None) => real,
            _ => return Err(FsError::Io),
        };
        view::checked(self.f.layer, low).ok_or(FsError::Io)
    }

    /// Node `real` as the snapshot holds it, with its view id.
    fn node<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, real: NodeId) -> Result<Node, FsError> {
        let mut n = match &self.clone {
            None => {
                let v = self.f.get(txn, &keys::node(real))?.ok_or(FsError::Stale)?;
                Node::decode(&v).ok_or(FsError::Io)?
            }
            Some(s) => s.node(txn, real)?,
        };
        if n.zone != self.f.zone {
            // Another share's node (a share nested inside this one): not
            // part of this share's snapshots.
            return Err(FsError::Stale);
        }
        n.attrs.id = self.vid(real)?;
        Ok(n)
    }

    /// File `real`'s inline data as the snapshot holds it.
    fn inline<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, real: NodeId) -> Result<Vec<u8>, FsError> {
        Ok(match &self.clone {
            None => self.f.get(txn, &keys::data(real))?,
            Some(s) => s.through(txn, real)?.inline(txn)?,
        }
        .unwrap_or_default())
    }

    /// The file whose chunks hold chunked file `real` as the snapshot has it.
    fn chunk_file<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, real: NodeId) -> Result<NodeId, FsError> {
        match &self.clone {
            None => self.f.shadow_of(txn, real),
            Some(s) => s.through(txn, real)?.chunks(txn),
        }
    }

    fn eas<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, real: NodeId) -> Result<Vec<(String, Vec<u8>)>, FsError> {
        let rows = match &self.clone {
            None => self.f.scan(txn, &keys::ea_prefix(real), &[])?,
            Some(s) => s.through(txn, real)?.eas(txn)?,
        };
        Ok(rows.into_iter().map(|(k, v)| (String::from_utf8_lossy(&k).into_owned(), v)).collect())
    }

    /// Node `real`'s stored DACL record as the snapshot holds it.
    fn acl<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, real: NodeId) -> Result<Option<Vec<u8>>, FsError> {
        match &self.clone {
            None => self.f.get(txn, &keys::acl(real)),
            Some(s) => s.through(txn, real)?.acl(txn),
        }
    }

    /// Entry `name` of directory `dir` (the child's real id).
    fn edge<R: KvRead + ?Sized>(&self, txn: &mut Txn<'_, R>, dir: NodeId, name: &str) -> Result<Option<Edge>, FsError> {
        match &self.clone {
            None => match self.f.get(txn, &keys::edge(dir, name))? {
                Some(v) => Ok(Some(decode::<Edge>(&v).ok_or(FsError::Io)?)),
                None => Ok(None),
            },
            Some(s) => s.sources(txn, dir)?.edge(txn, name),
        }
    }

    /// At most `limit` entries of directory `dir` from name suffix `from`.
    fn edges<R: KvRead + ?Sized>(
        &self,
        txn: &mut Txn<'_, R>,
        dir: NodeId,
        from: &[u8],
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Edge)>, FsError> {
        match &self.clone {
            None => self
                .f
                .scan_limit(txn, &keys::edge_prefix(dir), from, limit)?
                .into_iter()
                .map(|(k, v)| Ok((k, decode::<Edge>(&v).ok_or(FsError::Io)?)))
                .collect(),
            Some(s) => s.sources(txn, dir)?.edges(txn, from, limit),
        }
    }
}

/// [`may_node`] for a view's object `n` (real id `real`): by the DACL the
/// snapshot `v` holds for it, else its mode then. A DACL record the
/// snapshot cannot decode is an I/O error, never a grant.
fn view_may<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    cred: &duet_fs::Credentials,
    n: &Node,
    real: NodeId,
    v: Option<&View>,
    want: u32,
) -> Result<bool, FsError> {
    let sec = match v {
        Some(v) if n.has_acl && cred.uid != 0 => match v.acl(txn, real)? {
            None => None,
            Some(r) => Some(duet_fs::acl::Stored::decode_record(&r).map_err(|_| FsError::Io)?),
        },
        _ => None,
    };
    Ok(super::may_by(cred, n, sec.as_ref(), want))
}

/// A view object's node (a frozen one, or a `.snapshot` directory as a
/// synthetic node), its real id, and the snapshot it is read from.
fn view_node<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, id: NodeId) -> Result<(Node, NodeId, Option<View>), FsError> {
    match classify(txn, id)? {
        Obj::Live => Err(FsError::BadRef),
        Obj::SnapDir { dir } => {
            let d = get_node(txn, dir)?;
            if d.attrs.ftype != FileType::Directory || d.zone == 0 {
                return Err(FsError::Stale);
            }
            let attrs = snapdir_attrs(txn, &d);
            Ok((Node { attrs, parent: dir, target: None, chunked: false, may_have_eas: false, zone: d.zone, has_acl: false }, dir, None))
        }
        Obj::Frozen { layer, low } => {
            let v = View::open(txn, layer)?;
            let real = v.real(low);
            let n = v.node(txn, real)?;
            Ok((n, real, Some(v)))
        }
    }
}

/// Runs a read-only operation on a view, or a lookup of `.snapshot` in a
/// live directory. `None`: the operation involves no view (the ordinary
/// path runs it).
pub(super) fn run_view_op<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    i: usize,
    op: &Op,
) -> Option<OpResult> {
    let produced = ex.produced.clone();
    let id = |r: &ObjRef| match *r {
        ObjRef::Id(id) => Some(id),
        ObjRef::Result(i) => produced.get(i).copied().flatten(),
    };
    let is_view = |r: &ObjRef| id(r).is_some_and(view::is_view);
    Some(match op {
        Op::ListSnapshots { obj } => list_op(txn, id(obj)?),
        Op::Lookup { dir, name } | Op::LookupCaseless { dir, name } => {
            let caseless = matches!(op, Op::LookupCaseless { .. });
            if is_view(dir) {
                lookup(txn, ex, id(dir)?, name, caseless)
            } else if name == view::SNAPSHOT_DIR {
                let d = id(dir)?;
                if get_edge(txn, d, name).is_some() {
                    return None;
                }
                let n = match get_node(txn, d) {
                    Ok(n) => n,
                    Err(_) => return None,
                };
                if n.attrs.ftype != FileType::Directory || n.zone == 0 {
                    return None;
                }
                if !may_node(txn, &ex.batch.cred, &n, 1) {
                    return Some(Err(FsError::Access));
                }
                let attrs = snapdir_attrs(txn, &n);
                if caseless {
                    Ok(OpOutput::Found { name: name.clone(), attrs })
                } else {
                    object(attrs)
                }
            } else {
                return None;
            }
        }
        Op::GetAttr { obj } | Op::Close { obj } | Op::SetAttr { obj, .. } if is_view(obj) => {
            view_node(txn, id(obj)?).map(|(n, _, _)| OpOutput::Attrs { before: None, attrs: n.attrs })
        }
        Op::Open { obj, access, .. } if is_view(obj) => view_node(txn, id(obj)?).and_then(|(n, real, v)| {
            let want = (access.read as u32) * 4 + (access.write as u32) * 2 + (access.execute as u32);
            if access.write && n.attrs.ftype == FileType::Directory {
                return Err(FsError::IsDir);
            }
            if want != 0 && !view_may(txn, &ex.batch.cred, &n, real, v.as_ref(), want)? {
                return Err(FsError::Access);
            }
            object(n.attrs)
        }),
        // A snapshot's object shows the DACL it had then.
        Op::GetAcl { obj } if is_view(obj) => view_node(txn, id(obj)?).and_then(|(n, real, v)| {
            let acl = match v {
                Some(v) if n.has_acl => match v.acl(txn, real)? {
                    Some(r) => Some(super::acl_record(&r).ok_or(FsError::Io)?),
                    None => None,
                },
                _ => None,
            };
            Ok(OpOutput::Acl { acl, attrs: n.attrs })
        }),
        Op::ReadLink { obj } if is_view(obj) => view_node(txn, id(obj)?).and_then(|(n, _, _)| match n.target {
            Some(t) => Ok(OpOutput::Link { target: t, attrs: n.attrs }),
            None => Err(FsError::NotSymlink),
        }),
        Op::Read { obj, offset, len } if is_view(obj) => read(txn, ex, i, id(obj)?, *offset, *len),
        // A snapshot's file reports every byte below its size allocated.
        Op::Allocated { obj, offset, len } if is_view(obj) => view_node(txn, id(obj)?).map(|(n, _, _)| {
            let end = offset.saturating_add(*len).min(n.attrs.size);
            let start = (*offset).min(end);
            let ranges = if start < end { vec![(start, end - start)] } else { Vec::new() };
            OpOutput::Ranges { ranges, attrs: n.attrs }
        }),
        Op::ReadDir { dir, after, max_entries, with_attrs } if is_view(dir) => {
            readdir(txn, ex, id(dir)?, after.as_deref(), *max_entries, *with_attrs)
        }
        Op::GetEas { obj } if is_view(obj) => view_node(txn, id(obj)?).and_then(|(n, real, v)| {
            let eas = match v {
                Some(v) if n.may_have_eas => v.eas(txn, real)?,
                _ => Vec::new(),
            };
            Ok(OpOutput::Eas { eas, attrs: n.attrs })
        }),
        Op::Copy { src, dst, dst_offset, src_offset, len } if is_view(src) => {
            copy_from_view(txn, ex, id(src)?, *src_offset, *dst, *dst_offset, *len)
        }
        // A clone shares the source's chunks by reference: a snapshot's
        // are not the file's own (clients fall back to a copy).
        Op::Clone { src, .. } if is_view(src) => Err(FsError::NotSupported),
        _ => return None,
    })
}

/// [`Op::ListSnapshots`]: the snapshots of `obj`'s zone, newest first,
/// named by their `@GMT-` tokens.
pub(super) fn list_op<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, obj: NodeId) -> OpResult {
    let n = if view::is_view(obj) { view_node(txn, obj)?.0 } else { get_node(txn, obj)? };
    let zone = n.zone;
    let mut entries = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let snaps = if zone == 0 { Vec::new() } else { zone_snapshots(txn, zone) };
    for s in snaps.into_iter().rev() {
        let token = view::gmt_token(s.created_ns);
        // Two snapshots taken in one second share a token: the newer one
        // answers to it.
        if seen.insert(token.clone()) {
            let v = View::open(txn, s.layer)?;
            entries.push(DirEntry {
                name: token,
                id: v.vid(s.root)?,
                ftype: FileType::Directory,
                attrs: None,
                eas: Vec::new(),
            });
        }
    }
    Ok(OpOutput::Dir { entries, eof: true, attrs: n.attrs })
}

fn lookup<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &Exec<'_>, dir: NodeId, name: &str, caseless: bool) -> OpResult {
    let (d, real, f) = view_node(txn, dir)?;
    if d.attrs.ftype != FileType::Directory {
        return Err(FsError::NotDir);
    }
    if !view_may(txn, &ex.batch.cred, &d, real, f.as_ref(), 1)? {
        return Err(FsError::Access);
    }
    let found = |name: &str, attrs: Attrs| {
        if caseless {
            Ok(OpOutput::Found { name: name.to_string(), attrs })
        } else {
            object(attrs)
        }
    };
    match f {
        None => {
            // The `.snapshot` directory of live directory `d.parent`.
            let live = d.parent;
            if name == "." {
                return found(name, d.attrs);
            }
            if name == ".." {
                return found(name, get_node(txn, live)?.attrs);
            }
            let snaps = zone_snapshots(txn, d.zone);
            let s = snaps
                .iter()
                .find(|s| s.name == name)
                // SMB Previous Versions name snapshots by their time.
                .or_else(|| {
                    if view::is_gmt_token(name) {
                        snaps.iter().rev().find(|s| view::gmt_token(s.created_ns) == name)
                    } else {
                        None
                    }
                })
                .or_else(|| if caseless { snaps.iter().find(|s| s.name.eq_ignore_ascii_case(name)) } else { None })
                .ok_or(FsError::NotFound)?;
            let v = View::open(txn, s.layer)?;
            let n = v.node(txn, live).map_err(|_| FsError::NotFound)?;
            found(&s.name, n.attrs)
        }
        Some(v) => {
            if name == "." {
                return found(name, d.attrs);
            }
            if name == ".." {
                // The share's root leads back to its `.snapshot` directory.
                let attrs = if real == v.zone() {
                    let root = get_node(txn, real)?;
                    snapdir_attrs(txn, &root)
                } else {
                    v.node(txn, d.parent)?.attrs
                };
                return found(name, attrs);
            }
            check_name(name)?;
            let (real_name, edge) = match v.edge(txn, real, name)? {
                Some(e) => (name.to_string(), e),
                None if caseless => {
                    let want = name.to_lowercase();
                    let rows = v.edges(txn, real, &[], usize::MAX)?;
                    let (k, e) = rows
                        .into_iter()
                        .find(|(k, _)| String::from_utf8_lossy(k).to_lowercase() == want)
                        .ok_or(FsError::NotFound)?;
                    (String::from_utf8_lossy(&k).into_owned(), e)
                }
                None => return Err(FsError::NotFound),
            };
            let n = v.node(txn, edge.child)?;
            found(&real_name, n.attrs)
        }
    }
}

fn read<R: KvRead + ?Sized>(txn: &mut Txn<'_, R>, ex: &mut Exec<'_>, i: usize, obj: NodeId, offset: u64, len: u64) -> OpResult {
    let (n, real, v) = view_node(txn, obj)?;
    let Some(v) = v else { return Err(FsError::IsDir) };
    match n.attrs.ftype {
        FileType::Regular => {}
        FileType::Directory => return Err(FsError::IsDir),
        _ => return Err(FsError::Invalid),
    }
    let cred = &ex.batch.cred;
    if !view_may(txn, cred, &n, real, Some(&v), 4)? && cred.uid != n.attrs.uid {
        return Err(FsError::Access);
    }
    let size = n.attrs.size;
    let start = offset.min(size);
    let len = len.min(size - start);
    let eof = start + len >= size;
    if !n.chunked {
        let data = v.inline(txn, real)?;
        let mut buf = vec![0u8; len as usize];
        let s = start as usize;
        if s < data.len() {
            let e = (s + len as usize).min(data.len());
            buf[..e - s].copy_from_slice(&data[s..e]);
        }
        return Ok(OpOutput::Read { data: buf, eof, attrs: n.attrs });
    }
    // The chunks are the shadow's (or, unchanged since the freeze, the
    // live file's own, with only records queued before it).
    let data_id = v.chunk_file(txn, real)?;
    let overlay = overlay(txn, data_id, start, start + len);
    ex.out.reads.push(ReadPlan { op: i, file: data_id, offset: start, len, overlay });
    Ok(OpOutput::Read { data: Vec::new(), eof, attrs: n.attrs })
}

fn readdir<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &Exec<'_>,
    dir: NodeId,
    after: Option<&str>,
    max_entries: u32,
    with_attrs: bool,
) -> OpResult {
    let (d, real, f) = view_node(txn, dir)?;
    if d.attrs.ftype != FileType::Directory {
        return Err(FsError::NotDir);
    }
    if !view_may(txn, &ex.batch.cred, &d, real, f.as_ref(), 4)? {
        return Err(FsError::Access);
    }
    let max = max_entries.clamp(1, 1 << 20) as usize;
    let mut entries = Vec::new();
    let mut eof = true;
    match f {
        None => {
            let live = d.parent;
            let mut snaps = zone_snapshots(txn, d.zone);
            snaps.sort_by(|a, b| a.name.cmp(&b.name));
            for s in snaps.into_iter().filter(|s| after.map_or(true, |a| s.name.as_str() > a)) {
                let v = View::open(txn, s.layer)?;
                let Ok(n) = v.node(txn, live) else { continue };
                if entries.len() == max {
                    eof = false;
                    break;
                }
                entries.push(DirEntry {
                    name: s.name,
                    id: n.attrs.id,
                    ftype: FileType::Directory,
                    attrs: with_attrs.then_some(n.attrs),
                    eas: Vec::new(),
                });
            }
        }
        Some(v) => {
            let from = match after {
                Some(a) => {
                    let mut v = a.as_bytes().to_vec();
                    v.push(0);
                    v
                }
                None => Vec::new(),
            };
            let rows = v.edges(txn, real, &from, max + 1)?;
            eof = rows.len() <= max;
            for (k, e) in rows.into_iter().take(max) {
                let name = String::from_utf8_lossy(&k).into_owned();
                let mut entry = DirEntry { name, id: v.vid(e.child)?, ftype: e.ftype, attrs: None, eas: Vec::new() };
                if with_attrs {
                    let Ok(n) = v.node(txn, e.child) else { continue };
                    if n.may_have_eas {
                        entry.eas = v.eas(txn, e.child)?;
                    }
                    entry.attrs = Some(n.attrs);
                }
                entries.push(entry);
            }
        }
    }
    Ok(OpOutput::Dir { entries, eof, attrs: d.attrs })
}

fn copy_from_view<R: KvRead + ?Sized>(
    txn: &mut Txn<'_, R>,
    ex: &mut Exec<'_>,
    src: NodeId,
    src_offset: u64,
    dst: ObjRef,
    dst_offset: u64,
    len: u64,
) -> OpResult {
    let (s, real, v) = view_node(txn, src)?;
    let Some(v) = v else { return Err(FsError::Invalid) };
    if s.attrs.ftype != FileType::Regular {
        return Err(FsError::Invalid);
    }
    let cred = &ex.batch.cred;
    if !view_may(txn, cred, &s, real, Some(&v), 4)? && cred.uid != s.attrs.uid {
        return Err(FsError::Access);
    }
    if len != u64::MAX && src_offset.checked_add(len).map_or(true, |e| e > s.attrs.size) {
        return Err(FsError::Invalid);
    }
    if s.chunked {
        // The engine resolves copies from chunked files before proposing.
        return Err(FsError::NotSupported);
    }
    let data = v.inline(txn, real)?;
    let from = src_offset.min(s.attrs.size) as usize;
    let to = (s.attrs.size.min(src_offset.saturating_add(len))) as usize;
    let mut bytes = vec![0u8; to.saturating_sub(from)];
    if from < data.len() {
        let e = to.min(data.len());
        bytes[..e - from].copy_from_slice(&data[from..e]);
    }
    match write(txn, ex, dst, dst_offset, &WriteData::Bytes(bytes), false)? {
        OpOutput::Written { count, attrs, .. } => Ok(OpOutput::Copied { count, attrs }),
        other => Ok(other),
    }
}
