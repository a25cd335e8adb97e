//! Checks the metadata invariants: every edge points at a node, link counts
//! match the edges, directories have their parent, no orphan node, every
//! attached chunk exists (or has data queued), no chunk file is leaked,
//! and every shared chunk's blob counts exactly the chunk records naming it
//! (no count without a reference, no reference without its count).
//! Layers (snapshots): every snapshot's layer belongs to its zone, the
//! zone record names the newest, every before-image decodes and lies in a
//! known layer, and a layer's shadow files (which hold the frozen chunks
//! by reference) count as chunked files for the chunk and blob checks.
//! Clones: a clone's object not copied up has no node record of its own
//! (it reads through its source, checked as that source), so edges to one
//! are not dangling, and a clone's nodes are not held to link counts or
//! orphan checks (their other links may still read through); every clone
//! record names a snapshot that exists, and every record in a clone's id
//! range belongs to a clone that exists.

use std::collections::{BTreeMap, BTreeSet};

use duet_fs::{FileType, NodeId, ROOT_ID};

use crate::keys;
use crate::kv::KvRead;
use crate::machine::{clone_id, is_clone_id};
use crate::records::{decode, CloneRecord, DataRecord, Edge, Node, SnapshotRecord};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    pub nodes: u64,
    pub edges: u64,
    pub chunks: u64,
    /// Before-images and shadow records kept by snapshots' layers.
    pub layered: u64,
    pub problems: Vec<String>,
}

const PAGE: usize = 4096;

fn scan_all<R: KvRead + ?Sized>(kv: &R, prefix: u8, mut f: impl FnMut(&[u8], &[u8])) {
    let end = [prefix + 1];
    let mut from = vec![prefix];
    loop {
        let page = kv.scan(&from, &end, PAGE);
        let n = page.len();
        for (k, v) in &page {
            f(k, v);
        }
        if n < PAGE {
            return;
        }
        from = page.last().map(|(k, _)| k.clone()).unwrap_or_default();
        from.push(0);
    }
}

/// Checks `kv`. `chunk_files` lists the chunk files present in the chunk
/// store, as (file id, chunk index).
pub fn check<R: KvRead + ?Sized>(kv: &R, chunk_files: &[(NodeId, u64)]) -> FsckReport {
    let mut r = FsckReport::default();
    let mut nodes: BTreeMap<NodeId, Node> = BTreeMap::new();
    scan_all(kv, keys::NODE, |k, v| match (keys::u64_at(k, 1), Node::decode(v)) {
        (Some(id), Some(n)) if n.attrs.id == id => {
            nodes.insert(id, n);
        }
        _ => r.problems.push(format!("undecodable node record {}", hex(k))),
    });
    r.nodes = nodes.len() as u64;
    let mut links: BTreeMap<NodeId, u32> = BTreeMap::new();
    let mut subdirs: BTreeMap<NodeId, u32> = BTreeMap::new();
    let mut parents: BTreeMap<NodeId, NodeId> = BTreeMap::new();
    scan_all(kv, keys::EDGE, |k, v| {
        r.edges += 1;
        let (Some(parent), Some(e)) = (keys::u64_at(k, 1), decode::<Edge>(v)) else {
            r.problems.push(format!("undecodable edge record {}", hex(k)));
            return;
        };
        let name = String::from_utf8_lossy(&k[9..]);
        match nodes.get(&parent) {
            Some(p) if p.attrs.ftype == FileType::Directory => {}
            Some(_) => r.problems.push(format!("edge {parent}/{name}: parent is not a directory")),
            None => r.problems.push(format!("edge {parent}/{name}: parent node missing")),
        }
        match nodes.get(&e.child) {
            None if is_clone_id(e.child) => {}
            None => r.problems.push(format!("edge {parent}/{name} points at missing node {}", e.child)),
            Some(c) => {
                if c.attrs.ftype != e.ftype {
                    r.problems.push(format!("edge {parent}/{name}: type differs from node {}", e.child));
                }
                if c.attrs.ftype == FileType::Directory {
                    *subdirs.entry(parent).or_default() += 1;
                    if c.parent != parent {
                        r.problems.push(format!("directory {} lists parent {} but is linked from {parent}", e.child, c.parent));
                    }
                    parents.insert(e.child, parent);
                }
            }
        }
        *links.entry(e.child).or_default() += 1;
    });
    // Named streams: each `T` record is its stream node's one link.
    scan_all(kv, keys::STREAM, |k, v| {
        let (Some(file), Some((sid, name))) = (keys::u64_at(k, 1), keys::stream_entry(v)) else {
            r.problems.push(format!("undecodable stream record {}", hex(k)));
            return;
        };
        if !nodes.contains_key(&file) {
            r.problems.push(format!("stream {file}:{name}: file node missing"));
        }
        match nodes.get(&sid) {
            None => r.problems.push(format!("stream {file}:{name} points at missing node {sid}")),
            Some(s) if s.parent != file || s.attrs.ftype != FileType::Regular => {
                r.problems.push(format!("stream {file}:{name}: node {sid} is not a stream of it"))
            }
            Some(_) => {}
        }
        *links.entry(sid).or_default() += 1;
    });
    for (id, n) in &nodes {
        if is_clone_id(*id) {
            if n.chunked && kv.get(&keys::data(*id)).is_some() {
                r.problems.push(format!("node {id}: chunked but has inline data"));
            }
            continue;
        }
        let edges = links.get(id).copied().unwrap_or(0);
        if *id == ROOT_ID {
            if edges != 0 {
                r.problems.push("the root is linked from a directory".into());
            }
        } else if edges == 0 {
            r.problems.push(format!("node {id} is an orphan (no edge points at it)"));
        }
        let want = if n.attrs.ftype == FileType::Directory {
            2 + subdirs.get(id).copied().unwrap_or(0)
        } else {
            edges
        };
        if n.attrs.nlink != want {
            r.problems.push(format!("node {id}: nlink {} but {want} expected", n.attrs.nlink));
        }
        if n.chunked && kv.get(&keys::data(*id)).is_some() {
            r.problems.push(format!("node {id}: chunked but has inline data"));
        }
    }
    // Layers: snapshot records, their zones, before-images, shadows.
    let mut layers: BTreeMap<u64, NodeId> = BTreeMap::new();
    let mut newest: BTreeMap<NodeId, u64> = BTreeMap::new();
    scan_all(kv, keys::SNAPSHOT, |k, v| match (keys::u64_at(k, 1), keys::u64_at(k, 9), decode::<SnapshotRecord>(v)) {
        (Some(zone), Some(layer), Some(s)) if s.layer == layer && s.root == zone && k.len() == 17 => {
            layers.insert(layer, zone);
            let n = newest.entry(zone).or_default();
            *n = (*n).max(layer);
            match nodes.get(&zone) {
                Some(z) if z.zone == zone && z.attrs.ftype == FileType::Directory => {}
                _ => r.problems.push(format!("snapshot {} (layer {layer}) of a zone {zone} that is no share directory", s.name)),
            }
        }
        _ => r.problems.push(format!("undecodable snapshot record {}", hex(k))),
    });
    scan_all(kv, keys::LAYER_ZONE, |k, v| {
        let (Some(layer), Some(zone)) = (keys::u64_at(k, 1), keys::u64_at(v, 0)) else {
            r.problems.push(format!("undecodable layer record {}", hex(k)));
            return;
        };
        if layers.get(&layer) != Some(&zone) {
            r.problems.push(format!("layer {layer} names zone {zone} but no snapshot of that zone has it"));
        }
    });
    for (layer, zone) in &layers {
        if kv.get(&keys::layer_zone(*layer)).is_none() {
            r.problems.push(format!("layer {layer} of zone {zone} has no zone record"));
        }
    }
    scan_all(kv, keys::ZONE, |k, v| {
        let (Some(zone), Some(top)) = (keys::u64_at(k, 1), keys::u64_at(v, 0)) else {
            r.problems.push(format!("undecodable zone record {}", hex(k)));
            return;
        };
        let want = newest.get(&zone).copied().unwrap_or(0);
        if top != want {
            r.problems.push(format!("zone {zone} names layer {top} as its newest, but its newest snapshot is layer {want}"));
        }
    });
    for zone in newest.keys() {
        if kv.get(&keys::zone(*zone)).is_none() {
            r.problems.push(format!("zone {zone} has snapshots but no zone record"));
        }
    }
    let mut shadows: BTreeSet<NodeId> = BTreeSet::new();
    scan_all(kv, keys::LAYER, |k, v| {
        r.layered += 1;
        let Some(layer) = keys::u64_at(k, 1) else {
            r.problems.push(format!("bad layer key {}", hex(k)));
            return;
        };
        if !layers.contains_key(&layer) {
            r.problems.push(format!("before-image {} of layer {layer}, which no snapshot has", hex(k)));
        }
        let key = &k[9..];
        if key.first() == Some(&keys::SHADOW) {
            match (keys::u64_at(key, 1), <[u8; 8]>::try_from(v)) {
                (Some(_), Ok(sid)) => {
                    let sid = u64::from_be_bytes(sid);
                    if nodes.contains_key(&sid) || !shadows.insert(sid) {
                        r.problems.push(format!("shadow file {sid} of layer {layer} is also another file"));
                    }
                }
                _ => r.problems.push(format!("undecodable shadow record {}", hex(k))),
            }
            return;
        }
        match keys::unpreserved(v) {
            None => r.problems.push(format!("undecodable before-image {}", hex(k))),
            Some(Some(b)) if key.first() == Some(&keys::NODE) && Node::decode(b).is_none() => {
                r.problems.push(format!("undecodable frozen node {}", hex(k)))
            }
            Some(Some(b)) if key.first() == Some(&keys::EDGE) && decode::<Edge>(b).is_none() => {
                r.problems.push(format!("undecodable frozen edge {}", hex(k)))
            }
            _ => {}
        }
    });
    let chunked = |id: &NodeId| nodes.get(id).is_some_and(|n| n.chunked) || shadows.contains(id);
    // Data queue: records must name live, shadow or detached files.
    let mut pending: BTreeSet<NodeId> = BTreeSet::new();
    let mut detached: BTreeSet<NodeId> = BTreeSet::new();
    scan_all(kv, keys::DETACHED, |k, _| {
        if let Some(id) = keys::u64_at(k, 1) {
            if nodes.contains_key(&id) {
                r.problems.push(format!("node {id} is both live and detached"));
            }
            if shadows.contains(&id) {
                r.problems.push(format!("shadow file {id} is both held by a layer and detached"));
            }
            detached.insert(id);
        }
    });
    // dseq -> (file, the bytes it can change), to check the `Q` index.
    let mut queued: BTreeMap<u64, (NodeId, Option<(u64, u64)>)> = BTreeMap::new();
    scan_all(kv, keys::DQ, |k, v| match decode::<DataRecord>(v) {
        Some(rec) => {
            if !nodes.contains_key(&rec.file) && !detached.contains(&rec.file) && !shadows.contains(&rec.file) {
                r.problems.push(format!("queued data {} for file {} that is neither live nor detached", hex(k), rec.file));
            }
            pending.insert(rec.file);
            if let Some(dseq) = keys::u64_at(k, 1) {
                queued.insert(dseq, (rec.file, rec.op.span()));
            }
        }
        None => r.problems.push(format!("undecodable data record {}", hex(k))),
    });
    // The per-file index: one `Q` for each `q`, naming its file, with the
    // record's span (or the empty value of nodes before spans).
    let mut indexed: BTreeSet<u64> = BTreeSet::new();
    scan_all(kv, keys::DQ_BY_FILE, |k, v| {
        let (Some(file), Some(dseq)) = (keys::u64_at(k, 1), keys::u64_at(k, 9)) else {
            r.problems.push(format!("bad queue index key {}", hex(k)));
            return;
        };
        indexed.insert(dseq);
        match queued.get(&dseq) {
            None => r.problems.push(format!("queue index {} names data record {dseq}, which is not queued", hex(k))),
            Some((f, _)) if *f != file => {
                r.problems.push(format!("queue index {} names file {file}; data record {dseq} is file {f}'s", hex(k)))
            }
            Some((_, span)) => {
                if !v.is_empty() && keys::dq_span_decode(v) != Some(*span) {
                    r.problems.push(format!("queue index {} says {} for data record {dseq}, which changes {span:?}", hex(k), hex(v)));
                }
            }
        }
    });
    for (dseq, (file, _)) in &queued {
        if !indexed.contains(dseq) {
            r.problems.push(format!("data record {dseq} of file {file} is missing from the queue index"));
        }
    }
    // Attached chunks.
    let files: BTreeSet<(NodeId, u64)> = chunk_files.iter().copied().collect();
    let mut attached: BTreeSet<(NodeId, u64)> = BTreeSet::new();
    let mut refs: BTreeMap<u64, u64> = BTreeMap::new();
    scan_all(kv, keys::CHUNK, |k, v| {
        let (Some(id), Some(idx)) = (keys::u64_at(k, 1), keys::u64_at(k, 9)) else {
            r.problems.push(format!("bad chunk key {}", hex(k)));
            return;
        };
        r.chunks += 1;
        match keys::chunk_value(v) {
            Some(keys::ChunkValue::Shared(b)) => *refs.entry(b).or_default() += 1,
            Some(keys::ChunkValue::Own(_)) => {}
            None => r.problems.push(format!("chunk {id}.{idx}: undecodable chunk record {}", hex(v))),
        }
        attached.insert((id, idx));
        if !chunked(&id) {
            r.problems.push(format!("chunk {id}.{idx} attached to a missing or inline file"));
        }
        if !files.contains(&(id, idx)) && !pending.contains(&id) {
            r.problems.push(format!("file {id} points at missing chunk {idx}"));
        }
    });
    for (id, idx) in &files {
        if !attached.contains(&(*id, *idx)) && !detached.contains(id) && !pending.contains(id) {
            r.problems.push(format!("chunk file {id}.{idx} is leaked (not attached, not detached)"));
        }
    }
    // Shared chunks: each blob's count is the number of chunk records
    // naming it.
    let mut counted: BTreeSet<u64> = BTreeSet::new();
    scan_all(kv, keys::BLOB, |k, v| {
        let (Some(b), Ok(n)) = (keys::u64_at(k, 1), <[u8; 8]>::try_from(v)) else {
            r.problems.push(format!("undecodable blob record {}", hex(k)));
            return;
        };
        let n = u64::from_be_bytes(n);
        counted.insert(b);
        let have = refs.get(&b).copied().unwrap_or(0);
        if have == 0 {
            r.problems.push(format!("blob {b} counts {n} references but no chunk names it (leaked)"));
        } else if have != n {
            r.problems.push(format!("blob {b} counts {n} references but {have} chunks name it"));
        }
    });
    for (b, have) in &refs {
        if !counted.contains(b) {
            r.problems.push(format!("blob {b} is named by {have} chunks but has no reference count"));
        }
    }
    // Extended attributes belong to live nodes.
    scan_all(kv, keys::EA, |k, _| match keys::u64_at(k, 1) {
        Some(id) => match nodes.get(&id) {
            Some(n) if n.may_have_eas => {}
            Some(_) => r.problems.push(format!("extended attribute {} of node {id} marked as having none", hex(k))),
            None => r.problems.push(format!("extended attribute {} of missing node {id}", hex(k))),
        },
        None => r.problems.push(format!("bad extended attribute key {}", hex(k))),
    });
    // Stored DACLs belong to live nodes marked with one, and decode.
    scan_all(kv, keys::ACL, |k, v| match keys::u64_at(k, 1) {
        Some(id) => {
            match nodes.get(&id) {
                Some(n) if n.has_acl => {}
                Some(_) => r.problems.push(format!("DACL {} of node {id} marked as having none", hex(k))),
                None => r.problems.push(format!("DACL {} of missing node {id}", hex(k))),
            }
            // A control word, then the DACL or a whole descriptor with an
            // owner / group SID (`acl::Stored`, the one decoder).
            if duet_fs::acl::Stored::decode_record(v).is_err() {
                r.problems.push(format!("undecodable DACL {}", hex(k)));
            }
        }
        None => r.problems.push(format!("bad DACL key {}", hex(k))),
    });
    for (id, n) in &nodes {
        if n.has_acl && kv.get(&keys::acl(*id)).is_none() {
            r.problems.push(format!("node {id} is marked with a DACL but has none"));
        }
    }
    // Clones: their records, and every key in a clone's id range.
    let mut clones: BTreeSet<u64> = BTreeSet::new();
    scan_all(kv, keys::CLONE, |k, v| match (keys::u64_at(k, 1), decode::<CloneRecord>(v)) {
        (Some(c), Some(rec)) => {
            clones.insert(c);
            if layers.get(&rec.layer) != Some(&rec.source_zone) {
                r.problems.push(format!("clone {} stands on layer {}, which no snapshot of its source has", rec.name, rec.layer));
            }
            if !nodes.contains_key(&clone_id(c, rec.root_base)) {
                r.problems.push(format!("clone {} has no root directory", rec.name));
            }
        }
        _ => r.problems.push(format!("undecodable clone record {}", hex(k))),
    });
    for p in [keys::NODE, keys::EDGE, keys::DATA, keys::EA, keys::CHUNK, keys::CLONE_MARK, keys::WHITEOUT] {
        scan_all(kv, p, |k, v| {
            let Some(id) = keys::u64_at(k, 1).filter(|id| is_clone_id(*id)) else { return };
            let c = (id & !crate::machine::CLONE_BIT) >> 40;
            if !clones.contains(&c) {
                r.problems.push(format!("record {} of clone {c}, which does not exist", hex(k)));
            }
            if p == keys::CLONE_MARK && !matches!(v, [keys::CLONE_OWN] | [keys::CLONE_GONE] | [keys::CLONE_MERGED]) {
                r.problems.push(format!("undecodable clone mark {}", hex(k)));
            }
        });
    }
    // Snapshot schedules: each decodes, within bounds, of a share that
    // exists (removing a share removes its schedule).
    scan_all(kv, keys::SCHEDULE, |k, v| {
        let name = String::from_utf8_lossy(&k[1..]).into_owned();
        match decode::<crate::records::ScheduleRecord>(v) {
            Some(s) => {
                if let Err(e) = crate::schedule::check(s.every_s, s.keep) {
                    r.problems.push(format!("snapshot schedule of share {name}: {e}"));
                }
                if kv.get(&keys::share(&name)).is_none() {
                    r.problems.push(format!("snapshot schedule of share {name}, which does not exist"));
                }
            }
            None => r.problems.push(format!("undecodable snapshot schedule {}", hex(k))),
        }
    });
    if !nodes.contains_key(&ROOT_ID) {
        r.problems.push("the root directory is missing".into());
    }
    r
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
