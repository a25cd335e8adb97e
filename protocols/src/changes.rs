//! What a committed batch changed in the namespace, as (directory, name,
//! action) records, whichever protocol made the batch: the source of SMB2
//! CHANGE_NOTIFY (MS-SMB2 3.3.5.19; actions of FILE_NOTIFY_INFORMATION,
//! MS-FSCC 2.7.1; completion filter bits, MS-SMB2 2.2.35). Sans-I/O: the
//! appliance takes [`Intents`] of a batch before it runs (names and
//! references only, never write data), then derives the changes once from
//! them and the batch's results ([`derive`]).
//!
//! Operations that name a file by node only (a WRITE, a SETATTR) are
//! reported under the name the node was last seen with: a bounded
//! [`NameCache`] learns (parent, name) from every lookup, create and
//! rename it is shown. It also gives the path of a directory below a
//! watched one (SMB2_WATCH_TREE).

use std::collections::HashMap;

use duet_fs::{Batch, CreateKind, FileType, NodeId, ObjRef, Op, OpOutput, OpResult, SetAttrs};

/// MS-FSCC 2.7.1 FILE_NOTIFY_INFORMATION Action values.
pub mod action {
    pub const ADDED: u32 = 1;
    pub const REMOVED: u32 = 2;
    pub const MODIFIED: u32 = 3;
    pub const RENAMED_OLD_NAME: u32 = 4;
    pub const RENAMED_NEW_NAME: u32 = 5;
}

/// MS-SMB2 2.2.35 CompletionFilter bits (FILE_NOTIFY_CHANGE_*).
pub mod filter {
    pub const FILE_NAME: u32 = 0x0001;
    pub const DIR_NAME: u32 = 0x0002;
    pub const ATTRIBUTES: u32 = 0x0004;
    pub const SIZE: u32 = 0x0008;
    pub const LAST_WRITE: u32 = 0x0010;
    pub const LAST_ACCESS: u32 = 0x0020;
    pub const CREATION: u32 = 0x0040;
    pub const EA: u32 = 0x0080;
    pub const SECURITY: u32 = 0x0100;
}

/// One change: `name` in directory `dir` got `action`; `filter` holds the
/// completion-filter bits it satisfies (a watch whose filter shares none
/// does not see it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub dir: NodeId,
    pub name: String,
    pub action: u32,
    pub filter: u32,
}

/// What one operation of a batch may change, kept without its data.
#[derive(Debug, Clone)]
enum Intent {
    /// Teaches the cache only.
    Lookup { dir: ObjRef, name: String },
    Create { dir: ObjRef, name: String, is_dir: bool },
    Remove { dir: ObjRef, name: String, dir_only: Option<bool> },
    Rename { src_dir: ObjRef, src_name: String, dst_dir: ObjRef, dst_name: String },
    Link { dir: ObjRef, name: String },
    /// A change of the object's data or attributes.
    Modify { obj: ObjRef, filter: u32 },
    Other,
}

/// The parts of a batch [`derive`] needs, taken before it runs.
#[derive(Debug, Clone)]
pub struct Intents {
    ops: Vec<Intent>,
}

impl Intents {
    /// None when the batch can change nothing and teaches no name.
    pub fn of(batch: &Batch) -> Option<Intents> {
        let mut any = false;
        let ops = batch
            .ops
            .iter()
            .map(|op| {
                let i = intent(op);
                any |= !matches!(i, Intent::Other);
                i
            })
            .collect();
        any.then_some(Intents { ops })
    }
}

fn setattr_filter(a: &SetAttrs) -> u32 {
    let mut f = 0;
    if a.size.is_some() || a.alloc_size.is_some() {
        f |= filter::SIZE;
    }
    if a.dos_attrs.is_some() {
        f |= filter::ATTRIBUTES;
    }
    if a.mode.is_some() || a.uid.is_some() || a.gid.is_some() {
        f |= filter::SECURITY;
    }
    if a.mtime.is_some() {
        f |= filter::LAST_WRITE;
    }
    if a.atime.is_some() {
        f |= filter::LAST_ACCESS;
    }
    if a.btime.is_some() {
        f |= filter::CREATION;
    }
    f
}

fn intent(op: &Op) -> Intent {
    match op {
        Op::Lookup { dir, name } | Op::LookupCaseless { dir, name } => Intent::Lookup { dir: *dir, name: name.clone() },
        Op::Create { dir, name, kind, .. } | Op::CreateCaseless { dir, name, kind, .. } => {
            Intent::Create { dir: *dir, name: name.clone(), is_dir: matches!(kind, CreateKind::Directory) }
        }
        Op::Remove { dir, name, dir_only } => Intent::Remove { dir: *dir, name: name.clone(), dir_only: *dir_only },
        Op::Rename { src_dir, src_name, dst_dir, dst_name, .. } => Intent::Rename {
            src_dir: *src_dir,
            src_name: src_name.clone(),
            dst_dir: *dst_dir,
            dst_name: dst_name.clone(),
        },
        Op::Link { dir, name, .. } => Intent::Link { dir: *dir, name: name.clone() },
        Op::Open { obj, truncate: true, .. } => Intent::Modify { obj: *obj, filter: filter::SIZE | filter::LAST_WRITE },
        Op::SetAttr { obj, attrs } if !attrs.is_empty() => match setattr_filter(attrs) {
            0 => Intent::Other,
            f => Intent::Modify { obj: *obj, filter: f },
        },
        Op::Write { obj, .. } | Op::ZeroRange { obj, .. } => {
            Intent::Modify { obj: *obj, filter: filter::SIZE | filter::LAST_WRITE }
        }
        Op::Copy { dst, .. } | Op::Clone { dst, .. } => Intent::Modify { obj: *dst, filter: filter::SIZE | filter::LAST_WRITE },
        Op::SetEas { obj, .. } | Op::SetXattr { obj, .. } => Intent::Modify { obj: *obj, filter: filter::EA },
        _ => Intent::Other,
    }
}

/// node -> (parent, name, is a directory), as last seen, and the way
/// back; bounded.
#[derive(Debug)]
pub struct NameCache {
    names: HashMap<NodeId, (NodeId, String, bool)>,
    by_name: HashMap<(NodeId, String), NodeId>,
    max: usize,
}

/// How many directory levels a WATCH_TREE path may go down.
pub const MAX_DEPTH: usize = 64;

impl NameCache {
    /// A cache of at most `max` nodes (over it, it starts again empty:
    /// what is forgotten is only a MODIFIED record or a subtree path).
    pub fn new(max: usize) -> NameCache {
        NameCache { names: HashMap::new(), by_name: HashMap::new(), max: max.max(1) }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn learn(&mut self, node: NodeId, parent: NodeId, name: &str, is_dir: bool) {
        if node == parent || name.is_empty() {
            return;
        }
        if self.names.len() >= self.max && !self.names.contains_key(&node) {
            self.names.clear();
            self.by_name.clear();
        }
        if let Some((p, n, _)) = self.names.insert(node, (parent, name.to_string(), is_dir)) {
            if self.by_name.get(&(p, n.clone())) == Some(&node) {
                self.by_name.remove(&(p, n));
            }
        }
        // A hard link's other name is forgotten: one name per node.
        if let Some(old) = self.by_name.insert((parent, name.to_string()), node) {
            if old != node {
                self.names.remove(&old);
            }
        }
    }

    /// The node last seen as `name` in `parent`.
    pub fn node_at(&self, parent: NodeId, name: &str) -> Option<(NodeId, bool)> {
        let n = *self.by_name.get(&(parent, name.to_string()))?;
        self.names.get(&n).map(|(_, _, d)| (n, *d))
    }

    pub fn forget(&mut self, parent: NodeId, name: &str) {
        if let Some(n) = self.by_name.remove(&(parent, name.to_string())) {
            self.names.remove(&n);
        }
    }

    /// Where `node` was last seen.
    pub fn name_of(&self, node: NodeId) -> Option<(NodeId, &str, bool)> {
        self.names.get(&node).map(|(p, n, d)| (*p, n.as_str(), *d))
    }

    /// The path of `name` in `dir` relative to `top` ('\'-separated), when
    /// `dir` is `top` or a directory below it as far as the cache knows.
    pub fn path_under(&self, top: NodeId, dir: NodeId, name: &str) -> Option<String> {
        let mut parts = vec![name];
        let mut cur = dir;
        for _ in 0..MAX_DEPTH {
            if cur == top {
                parts.reverse();
                return Some(parts.join("\\"));
            }
            let (p, n, _) = self.names.get(&cur)?;
            parts.push(n);
            cur = *p;
        }
        None
    }
}

fn resolve(r: ObjRef, results: &[OpResult]) -> Option<NodeId> {
    match r {
        ObjRef::Id(n) => Some(n),
        ObjRef::Result(i) => results.get(i)?.as_ref().ok()?.attrs().map(|a| a.id),
    }
}

fn name_filter(is_dir: bool) -> u32 {
    if is_dir {
        filter::DIR_NAME
    } else {
        filter::FILE_NAME
    }
}

/// The changes the batch of `intents` made, in operation order, given its
/// results; teaches `cache` the names it saw. A data or attribute change of
/// an object this batch created is part of its creation (one ADDED, as
/// Windows reports a CREATE with attributes and contents).
pub fn derive(intents: &Intents, results: &[OpResult], cache: &mut NameCache) -> Vec<Change> {
    let mut out = Vec::new();
    let mut created: Vec<NodeId> = Vec::new();
    for (i, intent) in intents.ops.iter().enumerate() {
        let Some(Ok(res)) = results.get(i) else { continue };
        match intent {
            Intent::Lookup { dir, name } => {
                let (Some(d), Some(a)) = (resolve(*dir, results), res.attrs()) else { continue };
                let name = match res {
                    OpOutput::Found { name, .. } => name.as_str(),
                    _ => name.as_str(),
                };
                cache.learn(a.id, d, name, a.ftype == FileType::Directory);
            }
            Intent::Create { dir, name, is_dir } => {
                let Some(d) = resolve(*dir, results) else { continue };
                match res {
                    OpOutput::Object { attrs, created: true, .. } => {
                        cache.learn(attrs.id, d, name, *is_dir);
                        created.push(attrs.id);
                        out.push(Change { dir: d, name: name.clone(), action: action::ADDED, filter: name_filter(*is_dir) });
                    }
                    OpOutput::Object { attrs, .. } => cache.learn(attrs.id, d, name, attrs.ftype == FileType::Directory),
                    OpOutput::Found { name, attrs } => cache.learn(attrs.id, d, name, attrs.ftype == FileType::Directory),
                    _ => {}
                }
            }
            Intent::Remove { dir, name, dir_only } => {
                let Some(d) = resolve(*dir, results) else { continue };
                let is_dir = match res {
                    OpOutput::Dirs { target: Some(t), .. } => t.ftype == FileType::Directory,
                    _ => dir_only.or_else(|| cache.node_at(d, name).map(|(_, is_dir)| is_dir)).unwrap_or(false),
                };
                cache.forget(d, name);
                out.push(Change { dir: d, name: name.clone(), action: action::REMOVED, filter: name_filter(is_dir) });
            }
            Intent::Rename { src_dir, src_name, dst_dir, dst_name } => {
                let (Some(s), Some(d)) = (resolve(*src_dir, results), resolve(*dst_dir, results)) else { continue };
                if s == d && src_name == dst_name {
                    continue;
                }
                let moved = cache.node_at(s, src_name);
                let is_dir = match (res, moved) {
                    (OpOutput::Dirs { target: Some(t), .. }, _) => t.ftype == FileType::Directory,
                    (_, Some((_, d))) => d,
                    _ => false,
                };
                cache.forget(d, dst_name);
                cache.forget(s, src_name);
                if let Some((node, _)) = moved {
                    cache.learn(node, d, dst_name, is_dir);
                }
                let f = name_filter(is_dir);
                if s == d {
                    out.push(Change { dir: s, name: src_name.clone(), action: action::RENAMED_OLD_NAME, filter: f });
                    out.push(Change { dir: d, name: dst_name.clone(), action: action::RENAMED_NEW_NAME, filter: f });
                } else {
                    // Between directories Windows reports a removal and an
                    // addition.
                    out.push(Change { dir: s, name: src_name.clone(), action: action::REMOVED, filter: f });
                    out.push(Change { dir: d, name: dst_name.clone(), action: action::ADDED, filter: f });
                }
            }
            Intent::Link { dir, name } => {
                let Some(d) = resolve(*dir, results) else { continue };
                out.push(Change { dir: d, name: name.clone(), action: action::ADDED, filter: filter::FILE_NAME });
            }
            Intent::Modify { obj, filter } => {
                let Some(n) = resolve(*obj, results) else { continue };
                if created.contains(&n) {
                    continue;
                }
                let Some((parent, name, _)) = cache.name_of(n) else { continue };
                let c = Change { dir: parent, name: name.to_string(), action: action::MODIFIED, filter: *filter };
                // One record for several changes of one file in a batch.
                match out.last_mut() {
                    Some(l) if l.dir == c.dir && l.name == c.name && l.action == c.action => l.filter |= c.filter,
                    _ => out.push(c),
                }
            }
            Intent::Other => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use duet_fs::{Attrs, Credentials, IfExists, SetAttrs, WriteData};

    fn attrs(id: NodeId, ftype: FileType) -> Attrs {
        Attrs {
            id,
            ftype,
            mode: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            rdev: 0,
            size: 0,
            alloc_size: 0,
            dos_attrs: 0,
            btime: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            change: 0,
        }
    }

    fn object(id: NodeId, ftype: FileType, created: bool) -> OpResult {
        Ok(OpOutput::Object { attrs: attrs(id, ftype), created, dir_before: None, dir_after: None })
    }

    fn batch(ops: Vec<Op>) -> Batch {
        let mut b = Batch::new(Credentials::root(), 0);
        b.ops = ops;
        b
    }

    #[test]
    fn create_in_a_looked_up_directory_is_added_there() {
        let b = batch(vec![
            Op::Lookup { dir: ObjRef::Id(1), name: "docs".into() },
            Op::Create {
                dir: ObjRef::Result(0),
                name: "a.txt".into(),
                kind: CreateKind::File,
                attrs: SetAttrs::default(),
                if_exists: IfExists::Fail,
            },
            Op::Write { obj: ObjRef::Result(1), offset: 0, data: WriteData::Bytes(vec![1]), append: false },
        ]);
        let results = vec![
            object(10, FileType::Directory, false),
            object(11, FileType::Regular, true),
            Ok(OpOutput::Written { count: 1, offset: 0, before: attrs(11, FileType::Regular), attrs: attrs(11, FileType::Regular) }),
        ];
        let mut cache = NameCache::new(100);
        let c = derive(&Intents::of(&b).unwrap(), &results, &mut cache);
        assert_eq!(c, vec![Change { dir: 10, name: "a.txt".into(), action: action::ADDED, filter: filter::FILE_NAME }]);
        assert_eq!(cache.path_under(1, 10, "a.txt").as_deref(), Some("docs\\a.txt"));
        assert_eq!(cache.path_under(10, 10, "a.txt").as_deref(), Some("a.txt"));
        assert_eq!(cache.path_under(7, 10, "a.txt"), None);
    }

    #[test]
    fn an_existing_file_opened_by_create_is_no_change() {
        let b = batch(vec![Op::Create {
            dir: ObjRef::Id(1),
            name: "a".into(),
            kind: CreateKind::File,
            attrs: SetAttrs::default(),
            if_exists: IfExists::Open,
        }]);
        let mut cache = NameCache::new(100);
        assert!(derive(&Intents::of(&b).unwrap(), &[object(5, FileType::Regular, false)], &mut cache).is_empty());
        assert_eq!(cache.name_of(5), Some((1, "a", false)));
    }

    #[test]
    fn write_by_node_is_modified_under_the_name_last_seen() {
        let mut cache = NameCache::new(100);
        cache.learn(5, 1, "f", false);
        let b = batch(vec![
            Op::Write { obj: ObjRef::Id(5), offset: 0, data: WriteData::Bytes(vec![1]), append: false },
            Op::SetAttr { obj: ObjRef::Id(5), attrs: SetAttrs { dos_attrs: Some(2), ..SetAttrs::default() } },
            Op::Write { obj: ObjRef::Id(6), offset: 0, data: WriteData::Bytes(vec![1]), append: false },
        ]);
        let w = Ok(OpOutput::Written { count: 1, offset: 0, before: attrs(5, FileType::Regular), attrs: attrs(5, FileType::Regular) });
        let s = Ok(OpOutput::Attrs { before: None, attrs: attrs(5, FileType::Regular) });
        let c = derive(&Intents::of(&b).unwrap(), &[w.clone(), s, w], &mut cache);
        assert_eq!(
            c,
            vec![Change {
                dir: 1,
                name: "f".into(),
                action: action::MODIFIED,
                filter: filter::SIZE | filter::LAST_WRITE | filter::ATTRIBUTES
            }],
            "one record for the file, none for the unknown node 6"
        );
    }

    #[test]
    fn rename_in_one_directory_is_old_then_new_and_between_two_removed_then_added() {
        let mut cache = NameCache::new(100);
        cache.learn(5, 1, "a", false);
        cache.learn(9, 1, "sub", true);
        let dirs = Ok(OpOutput::Dirs { changed: vec![], target: None });
        let b = batch(vec![Op::Rename {
            src_dir: ObjRef::Id(1),
            src_name: "a".into(),
            dst_dir: ObjRef::Id(1),
            dst_name: "b".into(),
            replace: false,
        }]);
        let c = derive(&Intents::of(&b).unwrap(), &[dirs.clone()], &mut cache);
        assert_eq!(c.iter().map(|c| (c.action, c.name.as_str())).collect::<Vec<_>>(), vec![(4, "a"), (5, "b")]);
        assert_eq!(cache.name_of(5), Some((1, "b", false)));
        let b = batch(vec![Op::Rename {
            src_dir: ObjRef::Id(1),
            src_name: "b".into(),
            dst_dir: ObjRef::Id(9),
            dst_name: "c".into(),
            replace: true,
        }]);
        let c = derive(&Intents::of(&b).unwrap(), &[dirs], &mut cache);
        assert_eq!(
            c,
            vec![
                Change { dir: 1, name: "b".into(), action: action::REMOVED, filter: filter::FILE_NAME },
                Change { dir: 9, name: "c".into(), action: action::ADDED, filter: filter::FILE_NAME },
            ]
        );
        assert_eq!(cache.path_under(1, 9, "c").as_deref(), Some("sub\\c"));
    }

    #[test]
    fn failed_operations_and_read_only_batches_change_nothing() {
        let b = batch(vec![
            Op::Remove { dir: ObjRef::Id(1), name: "x".into(), dir_only: Some(true) },
            Op::Remove { dir: ObjRef::Id(1), name: "y".into(), dir_only: Some(true) },
        ]);
        let mut cache = NameCache::new(100);
        let results = vec![Err(duet_fs::FsError::NotFound), Ok(OpOutput::Dirs { changed: vec![], target: None })];
        let c = derive(&Intents::of(&b).unwrap(), &results, &mut cache);
        assert_eq!(c, vec![Change { dir: 1, name: "y".into(), action: action::REMOVED, filter: filter::DIR_NAME }]);
        assert!(Intents::of(&batch(vec![Op::GetAttr { obj: ObjRef::Id(1) }])).is_none());
    }

    #[test]
    fn a_removed_directory_known_to_the_cache_is_a_directory_name_change() {
        let mut cache = NameCache::new(100);
        cache.learn(9, 1, "sub", true);
        let b = batch(vec![Op::Remove { dir: ObjRef::Id(1), name: "sub".into(), dir_only: None }]);
        let c = derive(&Intents::of(&b).unwrap(), &[Ok(OpOutput::Dirs { changed: vec![], target: None })], &mut cache);
        assert_eq!(c[0].filter, filter::DIR_NAME);
        assert_eq!(cache.name_of(9), None, "forgotten");
        assert_eq!(cache.node_at(1, "sub"), None);
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut cache = NameCache::new(3);
        for i in 0..10 {
            cache.learn(100 + i, 1, &format!("n{i}"), false);
            assert!(cache.len() <= 3);
        }
        assert_eq!(cache.name_of(109), Some((1, "n9", false)));
    }
}
