//! An engine in this process (`server::start`) for data-path tests:
//! batches submitted directly, a seeded generator, waiting for the
//! destager, byte-exact checks against a model, fsck through the admin API.

use duet_appliance::config::Config;
use duet_appliance::engine::{EngineHandle, RequestTag};
use duet_appliance::server;
use duet_fs::{Batch, CreateKind, Credentials, FsError, IfExists, ObjRef, Op, OpOutput, SetAttrs, WriteData, ROOT_ID};

/// A single-executor configuration under `dir` on free ports.
pub fn local_cfg(dir: &std::path::Path) -> Config {
    let mut c = Config::default();
    c.data_dir = dir.to_path_buf();
    c.admin.listen = "127.0.0.1:0".into();
    c.smb.listen = "127.0.0.1:0".into();
    c.nfs.listen = "127.0.0.1:0".into();
    c.nfs.portmap = false;
    c.executors = 1;
    c
}

/// [`local_cfg`] that destages every millisecond, with a read cache of
/// `read_mib`.
pub fn cfg(dir: &std::path::Path, read_mib: u64) -> Config {
    let mut c = local_cfg(dir);
    // Destage as soon as possible: chunks change under the reads.
    c.cache.destage_interval_ms = 1;
    c.cache.read_mib = Some(read_mib);
    c
}

/// xorshift64: the same bytes for the same seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub fn bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

pub fn run(e: &EngineHandle, ops: Vec<Op>) -> Vec<Result<OpOutput, FsError>> {
    let mut b = Batch::new(Credentials::root(), 1);
    b.ops = ops;
    e.submit_blocking(b, RequestTag::new("test", "batch")).unwrap().results
}

pub fn ok(e: &EngineHandle, op: Op) -> OpOutput {
    run(e, vec![op]).remove(0).unwrap_or_else(|err| panic!("{err:?}"))
}

/// A new empty file in the root directory.
pub fn create(e: &EngineHandle, name: &str) -> u64 {
    let op = Op::Create {
        dir: ObjRef::Id(ROOT_ID),
        name: name.into(),
        kind: CreateKind::File,
        attrs: SetAttrs::default(),
        if_exists: IfExists::Fail,
    };
    match ok(e, op) {
        OpOutput::Object { attrs, .. } => attrs.id,
        o => panic!("{o:?}"),
    }
}

/// A read's bytes, or what failed (the op, or the whole batch: an I/O
/// error fails the batch). Submitted as the protocol executors submit
/// (`EngineHandle::submit`: a read the read cache covers is served on the
/// calling thread, the rest by the data executor).
pub fn try_read(e: &EngineHandle, id: u64, offset: u64, len: u64) -> Result<Vec<u8>, String> {
    let mut b = Batch::new(Credentials::root(), 1);
    b.ops = vec![Op::Read { obj: ObjRef::Id(id), offset, len }];
    let mut out = futures_lite::future::block_on(e.submit(b, RequestTag::new("test", "batch"))).map_err(|e| format!("{e:?}"))?;
    match out.results.remove(0).map_err(|e| format!("{e:?}"))? {
        OpOutput::Read { data, .. } => Ok(data),
        o => panic!("{o:?}"),
    }
}

pub fn write(e: &EngineHandle, id: u64, offset: u64, data: &[u8]) {
    ok(e, Op::Write { obj: ObjRef::Id(id), offset, data: WriteData::Bytes(data.to_vec()), append: false });
}

/// Writes `data` at `at` and lays it over `model` (extended with zeros
/// as the file is).
pub fn write_model(e: &EngineHandle, id: u64, model: &mut Vec<u8>, at: u64, data: &[u8]) {
    write(e, id, at, data);
    let end = at as usize + data.len();
    if end > model.len() {
        model.resize(end, 0);
    }
    model[at as usize..end].copy_from_slice(data);
}

/// Waits (at most 30 s) until the destager's queue is empty.
pub fn settle(e: &EngineHandle) {
    for _ in 0..3000 {
        if let Ok(duet_cluster_store::QueryAnswer::DataQueue(q)) =
            e.store.query_blocking(duet_cluster_store::Query::DataQueue { after: 0, limit: 1 })
        {
            if q.is_empty() {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("destager did not settle");
}

/// `[offset, offset+len)` of the file reads as that range of `model`
/// (shorter past its end), or the test fails naming the first difference.
pub fn check(e: &EngineHandle, id: u64, model: &[u8], offset: u64, len: u64, what: &str) {
    let got = try_read(e, id, offset, len).unwrap_or_else(|err| panic!("{what}: read failed: {err}"));
    let end = (offset + len).min(model.len() as u64);
    let want: &[u8] = if offset >= model.len() as u64 { &[] } else { &model[offset as usize..end as usize] };
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: read [{offset}, +{len}) gave {} bytes, wanted {}; first difference at {:?}",
            got.len(),
            want.len(),
            first.map(|p| p as u64 + offset)
        );
    }
}

/// One admin API request to the engine's own admin listener, with its token.
pub fn admin_call(r: &server::Running, req: duet_admin_api::AdminRequest) -> duet_admin_api::AdminResponse {
    use std::io::{Read, Write};
    let token = std::fs::read_to_string(r.data_dir().join("admin.token")).unwrap();
    let creds = duet_admin_api::Credentials::Bearer(token.trim().into());
    let http = req.to_http(&r.admin_addr.to_string(), Some(&creds)).encode();
    let mut s = std::net::TcpStream::connect(r.admin_addr).unwrap();
    s.write_all(&http).unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let mut p = duet_admin_api::http::ResponseParser::new();
    let resp = match p.feed(&buf) {
        duet_admin_api::http::Parsed::Complete(x) => x,
        _ => match p.finish() {
            duet_admin_api::http::Parsed::Complete(x) => x,
            _ => panic!("bad response"),
        },
    };
    duet_admin_api::decode_response(&req, &resp).unwrap()
}

/// What fsck (through the admin API) finds wrong: empty when consistent.
pub fn fsck(r: &server::Running) -> Vec<String> {
    match admin_call(r, duet_admin_api::AdminRequest::Fsck) {
        duet_admin_api::AdminResponse::Fsck(f) => f.problems,
        o => panic!("{o:?}"),
    }
}
