//! Helpers shared by the store's tests: a single node's store opened and
//! initialized, the batch that creates a file with its data, and the wiring
//! of several real stores in one process (`outbox`: each store's raft
//! messages go to the others' `step` through a protobuf round trip, as the
//! transport does; one node id can be cut off).

#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use duet_cluster::records::Command;
use duet_cluster::raft_node::RaftMessage;
use duet_cluster_store::{Outbox, Query, QueryAnswer, RaftStatus, Store, StoreHandle, StoreOptions};
use protobuf::Message as _;
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

/// The stores' handles by node id - 1 (None: stopped).
pub type Handles = Arc<Mutex<Vec<Option<StoreHandle>>>>;

/// An outbox that delivers to `handles`, dropping what goes to or comes
/// from the node id in `cut` (0: none).
pub fn outbox(handles: &Handles, cut: &Arc<AtomicU64>) -> Outbox {
    let (tx, rx) = flume::unbounded::<Vec<RaftMessage>>();
    let (hs, cut) = (handles.clone(), cut.clone());
    std::thread::spawn(move || {
        for msgs in rx.iter() {
            for m in msgs {
                let m = RaftMessage::parse_from_bytes(&m.write_to_bytes().unwrap()).unwrap();
                let c = cut.load(Ordering::Relaxed);
                if c != 0 && (m.to == c || m.from == c) {
                    continue;
                }
                let h = hs.lock().unwrap().get(m.to as usize - 1).cloned().flatten();
                if let Some(h) = h {
                    h.step(m);
                }
            }
        }
    });
    Box::new(move |m| {
        let _ = tx.send(m);
    })
}

pub fn status(h: &StoreHandle) -> RaftStatus {
    match h.query_blocking(Query::RaftStatus).expect("the store answers (its metadata thread is alive)") {
        QueryAnswer::Raft(r) => r,
        _ => unreachable!(),
    }
}

/// Waits up to 20 s for `f`.
pub fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Makes directory `name` in the root.
pub fn mkdir(name: &str) -> Batch {
    let mut b = Batch::new(Credentials::root(), 1_000);
    b.push(Op::Create {
        dir: ObjRef::Id(ROOT_ID),
        name: name.into(),
        kind: CreateKind::Directory,
        attrs: SetAttrs { mode: Some(0o755), ..Default::default() },
        if_exists: IfExists::Fail,
    });
    b
}
