//! Helpers shared by the store's tests: a single node's store opened and
//! initialized, and the batch that creates a file with its data.

#![allow(dead_code)]

use std::path::Path;

use duet_cluster::records::Command;
use duet_cluster_store::{Query, QueryAnswer, Store, StoreOptions};
use duet_fs::{Batch, CreateKind, Credentials, IfExists, ObjRef, Op, SetAttrs, WriteData, ROOT_ID};

/// The store of node 1 at `dir` with `options`, initialized (once).
pub fn open_initialized(dir: &Path, options: StoreOptions) -> Store {
    let s = Store::open_with(dir, 1, options).unwrap();
    let h = s.handle();
    if let QueryAnswer::Bool(false) = h.query_blocking(Query::Initialized).unwrap() {
        h.command_blocking(Command::Init { now_ns: 1, admin_secrets: vec![], shares: vec![] }).unwrap();
    }
    s
}

/// Creates `name` in the root as a 0644 file holding `data`; `lazy` marks
/// the batch answerable before it is durable.
pub fn create_file(name: &str, data: &[u8], lazy: bool) -> Batch {
    let mut b = Batch::new(Credentials::root(), 5_000);
    let f = b.push(Op::Create {
        dir: ObjRef::Id(ROOT_ID),
        name: name.into(),
        kind: CreateKind::File,
        attrs: SetAttrs { mode: Some(0o644), ..Default::default() },
        if_exists: IfExists::Fail,
    });
    b.push(Op::Write { obj: f, offset: 0, data: WriteData::Bytes(data.to_vec()), append: false });
    b.lazy = lazy;
    b
}
