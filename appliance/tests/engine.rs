//! The engine end to end (write log, chunk store, destager, metadata) through
//! the batch API.

mod common;

use duet_appliance::engine::{EngineHandle, RequestTag};
use duet_appliance::server;
use duet_fs::{Batch, CreateKind, Credentials, FsError, IfExists, ObjRef, Op, OpOutput, SetAttrs, WriteData, CHUNK_SIZE, ROOT_ID};

use common::inproc::local_cfg as cfg;

fn tag() -> RequestTag {
    RequestTag::new("test", "batch")
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect()
}

fn run(e: &EngineHandle, ops: Vec<Op>) -> Vec<Result<OpOutput, FsError>> {
    let mut b = Batch::new(Credentials::root(), 1);
    b.ops = ops;
    e.submit_blocking(b, tag()).unwrap().results
}

fn create(e: &EngineHandle, dir: u64, name: &str, data: &[u8]) -> u64 {
    let r = run(e, vec![
        Op::Create { dir: ObjRef::Id(dir), name: name.into(), kind: CreateKind::File, attrs: SetAttrs::default(), if_exists: IfExists::Fail },
        Op::Write { obj: ObjRef::Result(0), offset: 0, data: WriteData::Bytes(data.to_vec()), append: false },
        Op::Close { obj: ObjRef::Result(0) },
    ]);
    match &r[0] { Ok(OpOutput::Object { attrs, .. }) => attrs.id, o => panic!("{o:?} {r:?}") }
}

fn read(e: &EngineHandle, id: u64, offset: u64, len: u64) -> Vec<u8> {
    match run(e, vec![Op::Read { obj: ObjRef::Id(id), offset, len }]).remove(0) {
        Ok(OpOutput::Read { data, .. }) => data,
        o => panic!("{o:?}"),
    }
}

fn write(e: &EngineHandle, id: u64, offset: u64, data: &[u8]) {
    let r = run(e, vec![Op::Write { obj: ObjRef::Id(id), offset, data: WriteData::Bytes(data.to_vec()), append: false }]);
    assert!(r[0].is_ok(), "{r:?}");
}

fn settle(e: &EngineHandle) {
    // Wait for the destager to empty the data queue.
    for _ in 0..500 {
        if let Ok(duet_cluster_store::QueryAnswer::DataQueue(q)) = e.store.query_blocking(duet_cluster_store::Query::DataQueue { after: 0, limit: 1 }) {
            if q.is_empty() { return; }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("destager did not settle");
}

#[test]
fn large_files_round_trip_through_log_and_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let r = server::start(&cfg(tmp.path())).unwrap();
    let e = r.engine().clone();
    // Spans chunk boundaries; read before and after destaging.
    let len = (CHUNK_SIZE as usize) * 2 + 12_345;
    let big = pattern(7, len);
    let id = create(&e, ROOT_ID, "big", &big);
    assert_eq!(read(&e, id, 0, len as u64 + 10), big);
    settle(&e);
    assert_eq!(read(&e, id, 0, len as u64), big);
    // Overwrite across a chunk boundary, unaligned; small writes to a large file.
    let mut want = big.clone();
    let at = CHUNK_SIZE as usize - 777;
    let patch = pattern(9, 50_001);
    want[at..at + patch.len()].copy_from_slice(&patch);
    write(&e, id, at as u64, &patch);
    write(&e, id, 3, b"xyz");
    want[3..6].copy_from_slice(b"xyz");
    assert_eq!(read(&e, id, 0, len as u64), want);
    settle(&e);
    assert_eq!(read(&e, id, 0, len as u64), want);
    assert_eq!(read(&e, id, at as u64 - 5, 10), want[at - 5..at + 5].to_vec());
    // Truncate into the middle, then extend: the tail reads as zeros.
    let cut = CHUNK_SIZE + 100;
    let r1 = run(&e, vec![Op::SetAttr { obj: ObjRef::Id(id), attrs: SetAttrs { size: Some(cut), ..Default::default() } }]);
    assert!(r1[0].is_ok());
    write(&e, id, cut + 5000, b"end");
    want.truncate(cut as usize);
    want.resize(cut as usize + 5000, 0);
    want.extend_from_slice(b"end");
    assert_eq!(read(&e, id, 0, 1 << 30), want);
    settle(&e);
    assert_eq!(read(&e, id, 0, 1 << 30), want);
    // A small file grows past the inline limit and becomes chunked.
    let sid = create(&e, ROOT_ID, "grow", b"small start");
    let more = pattern(3, 9000);
    write(&e, sid, 11, &more);
    let mut sw = b"small start".to_vec();
    sw.extend_from_slice(&more);
    assert_eq!(read(&e, sid, 0, 1 << 20), sw);
    settle(&e);
    assert_eq!(read(&e, sid, 0, 1 << 20), sw);
    // Remove reclaims the chunks; fsck sees no leak.
    let r2 = run(&e, vec![Op::Remove { dir: ObjRef::Id(ROOT_ID), name: "big".into(), dir_only: None }]);
    assert!(r2[0].is_ok());
    settle(&e);
    let admin = common::inproc::fsck(&r);
    assert!(admin.is_empty(), "{admin:?}");
    r.shutdown();
    // Everything is still there after a restart.
    let r = server::start(&cfg(tmp.path())).unwrap();
    let e = r.engine().clone();
    let look = run(&e, vec![Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: "grow".into() }, Op::Read { obj: ObjRef::Result(0), offset: 0, len: 1 << 20 }]);
    match &look[1] { Ok(OpOutput::Read { data, .. }) => assert_eq!(data, &sw), o => panic!("{o:?}") }
    assert_eq!(run(&e, vec![Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: "big".into() }])[0], Err(FsError::NotFound));
    r.shutdown();
}

#[test]
fn concurrent_large_and_small_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let r = server::start(&cfg(tmp.path())).unwrap();
    let e = r.engine().clone();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let e = e.clone();
            s.spawn(move || {
                for i in 0..20u64 {
                    let len = if i % 3 == 0 { 70_000 + (i as usize) * 1000 } else { 100 + i as usize };
                    let data = pattern(t * 100 + i, len);
                    let id = create(&e, ROOT_ID, &format!("t{t}-{i}"), &data);
                    assert_eq!(read(&e, id, 0, 1 << 20), data);
                }
            });
        }
    });
    settle(&e);
    for t in 0..8u64 {
        for i in 0..20u64 {
            let len = if i % 3 == 0 { 70_000 + (i as usize) * 1000 } else { 100 + i as usize };
            let res = run(&e, vec![Op::Lookup { dir: ObjRef::Id(ROOT_ID), name: format!("t{t}-{i}") }, Op::Read { obj: ObjRef::Result(0), offset: 0, len: 1 << 20 }]);
            match &res[1] { Ok(OpOutput::Read { data, .. }) => assert_eq!(data, &pattern(t * 100 + i, len)), o => panic!("{o:?}") }
        }
    }
    assert!(common::inproc::fsck(&r).is_empty());
    r.shutdown();
}

/// The extents (origin, sequence) of every record in the write log's segments.
fn logged_extents(dir: &std::path::Path) -> Vec<duet_fs::ExtentId> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir.join("wal")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("log") {
            continue;
        }
        let seq = u64::from_str_radix(p.file_stem().unwrap().to_str().unwrap(), 16).unwrap();
        let b = std::fs::read(&p).unwrap();
        let mut pos = 0;
        while pos < b.len() {
            if let Some(h) = duet_cache::decode_header(&b[pos..], u64::MAX) {
                assert_eq!(h.header_len, duet_cache::HEADER_LEN, "new records are version 3");
                // A reused file's earlier lives' records are not this segment's.
                if h.bound.is_some_and(|b| b.segment == seq) {
                    out.push(h.extent);
                }
            }
            pos += duet_cache::ALIGN as usize;
        }
    }
    out.sort();
    out
}

fn floor(dir: &std::path::Path) -> u64 {
    duet_cache::decode_floor(&std::fs::read(dir.join("wal").join("extent-seq")).unwrap()).expect("floor decodes")
}

#[test]
fn extent_names_are_never_reused_across_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let first = pattern(11, 100_000);
    let r = server::start(&cfg(dir)).unwrap();
    let e = r.engine().clone();
    let id1 = create(&e, ROOT_ID, "one", &first);
    let logged = logged_extents(dir);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0].origin, 1, "named by this node's id");
    let f1 = floor(dir);
    assert!(f1 > logged[0].seq, "the floor {f1} is above every sequence handed out ({logged:?})");
    settle(&e);
    r.shutdown();

    // Restart: the destaged segment is deleted, so the log no longer
    // remembers sequence 1; the floor does.
    let r = server::start(&cfg(dir)).unwrap();
    let e = r.engine().clone();
    assert!(logged_extents(dir).is_empty(), "the destaged record's segment is released at start");
    let f2 = floor(dir);
    assert!(f2 > f1, "a new floor is made durable at start: {f1} -> {f2}");
    let second = pattern(12, 100_000);
    let id2 = create(&e, ROOT_ID, "two", &second);
    let logged = logged_extents(dir);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].seq >= f1, "sequence {} reused below the old floor {f1}", logged[0].seq);
    assert_eq!(read(&e, id1, 0, 200_000), first);
    assert_eq!(read(&e, id2, 0, 200_000), second);
    r.shutdown();

    // A damaged floor stops the start with the file named, rather than
    // risk naming two extents alike.
    let path = dir.join("wal").join("extent-seq");
    let mut b = std::fs::read(&path).unwrap();
    b[0] ^= 0xFF;
    std::fs::write(&path, &b).unwrap();
    let err = match server::start(&cfg(dir)) {
        Ok(r) => {
            r.shutdown();
            panic!("duetd started with a damaged extent-seq")
        }
        Err(e) => e.to_string(),
    };
    assert!(err.contains("extent-seq") && err.contains("damaged"), "{err}");
}

/// One batch of many small writes queues them all before the destager
/// wakes, so one round applies them: the round gathers them as 4 KiB blocks
/// (overlapping writes, the same block again, writes across block and chunk
/// boundaries, a truncation in between that must see the writes before
/// it) and writes the blocks at once. The chunks must hold exactly what the
/// writes say, in order: read back after the round and after a restart
/// (an empty read cache: the bytes come from the chunk files).
#[test]
fn a_round_of_many_small_overlapping_writes_destages_byte_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let r = server::start(&cfg(tmp.path())).unwrap();
    let e = r.engine().clone();
    let len = CHUNK_SIZE as usize * 2 + 40_000;
    let mut model = pattern(21, len);
    let id = create(&e, ROOT_ID, "f", &model);
    settle(&e);
    let mut x = 0x5eed_u64;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut ops = Vec::new();
    let put = |model: &mut Vec<u8>, ops: &mut Vec<Op>, at: usize, data: Vec<u8>| {
        if model.len() < at + data.len() {
            model.resize(at + data.len(), 0);
        }
        model[at..at + data.len()].copy_from_slice(&data);
        ops.push(Op::Write { obj: ObjRef::Id(id), offset: at as u64, data: WriteData::Bytes(data), append: false });
    };
    for i in 0..120u64 {
        let at = match i % 4 {
            // A few hot blocks, written again and again.
            0 => 4096 * next(4) as usize + next(4096) as usize,
            // Across the first chunk boundary.
            1 => CHUNK_SIZE as usize - 3000 + next(6000) as usize,
            // Anywhere.
            _ => next(len as u64 - 5000) as usize,
        };
        let n = 1 + next(4096) as usize;
        put(&mut model, &mut ops, at, pattern(1000 + i, n));
        if i == 70 {
            // A truncation into the second chunk and back out.
            let cut = CHUNK_SIZE as usize + 12_345;
            ops.push(Op::SetAttr { obj: ObjRef::Id(id), attrs: SetAttrs { size: Some(cut as u64), ..Default::default() } });
            model.truncate(cut);
            put(&mut model, &mut ops, len - 100, pattern(77, 100));
        }
    }
    let r1 = run(&e, ops);
    assert!(r1.iter().all(|r| r.is_ok()), "{r1:?}");
    assert_eq!(read(&e, id, 0, 1 << 30), model, "before the destage");
    settle(&e);
    assert_eq!(read(&e, id, 0, 1 << 30), model, "after the destage");
    assert!(common::inproc::fsck(&r).is_empty());
    r.shutdown();
    let r = server::start(&cfg(tmp.path())).unwrap();
    let e = r.engine().clone();
    assert_eq!(read(&e, id, 0, 1 << 30), model, "from the chunk files after a restart");
    r.shutdown();
}

/// A client streaming large writes (each through the write log): with
/// `[cache] destage_defer_mib` the destager waits for the stream to
/// pause before it moves the data into chunks (`duet_cache::defer`: its
/// chunk writes competed with the appends), then destages all of it,
/// byte-exact; with 0 it never waits, and with a bound smaller than the
/// stream it runs while the stream goes on.
#[test]
fn a_stream_of_large_writes_is_destaged_once_it_pauses() {
    use std::sync::atomic::Ordering;
    for defer_mib in [256u64, 0, 4] {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = cfg(tmp.path());
        c.cache.destage_interval_ms = 50;
        c.cache.destage_defer_mib = Some(defer_mib);
        let r = server::start(&c).unwrap();
        let e = r.engine().clone();
        let data = pattern(defer_mib + 7, 48 << 20);
        let id = create(&e, ROOT_ID, "stream", &[]);
        let counters = &e.data_counters;
        let started = std::time::Instant::now();
        for (i, piece) in data.chunks(1 << 20).enumerate() {
            write(&e, id, (i as u64) << 20, piece);
        }
        let took = started.elapsed();
        let during = counters.destaged_records.load(Ordering::Relaxed);
        let waited = counters.destage_deferrals.load(Ordering::Relaxed);
        println!("destage_defer_mib {defer_mib}: 48 writes of 1 MiB in {took:?}; records destaged meanwhile {during}, intervals waited {waited}");
        match defer_mib {
            0 => assert_eq!(waited, 0, "the destager waited with destage_defer_mib = 0"),
            4 => assert!(during > 0, "a 4 MiB bound did not make the destager run during a 48 MiB stream"),
            _ => {
                assert!(waited > 0, "the destager never waited for the stream to pause");
                // The longest wait is 2 s: a slower stream may see a round.
                if took < std::time::Duration::from_millis(1500) {
                    assert_eq!(during, 0, "records were destaged while the stream went on");
                }
            }
        }
        settle(&e);
        // The counter moves just after the queue empties.
        let n = (0..500)
            .map(|_| counters.destaged_records.load(Ordering::Relaxed))
            .find(|&n| n >= 48 || { std::thread::sleep(std::time::Duration::from_millis(10)); false })
            .unwrap_or_else(|| counters.destaged_records.load(Ordering::Relaxed));
        assert!(n >= 48, "the stream was not destaged once it paused: {n} records");
        assert_eq!(read(&e, id, 0, data.len() as u64), data, "destaged data differs");
        r.shutdown();
    }
}

/// A client that reads data of a stream not destaged yet ends the
/// destager's wait for the stream to pause: rounds run while the stream
/// goes on (without the read they would wait up to 2 s).
#[test]
fn a_read_of_data_not_destaged_ends_the_destagers_wait() {
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cfg(tmp.path());
    c.cache.destage_interval_ms = 50;
    c.cache.destage_defer_mib = Some(1024);
    let r = server::start(&c).unwrap();
    let e = r.engine().clone();
    let data = pattern(3, 16 << 20);
    let id = create(&e, ROOT_ID, "stream", &[]);
    let counters = &e.data_counters;
    let piece = |i: usize| &data[(i % 16) << 20..((i % 16) + 1) << 20];
    for i in 0..4 {
        write(&e, id, (i as u64) << 20, piece(i));
    }
    assert_eq!(read(&e, id, 0, 1 << 20), piece(0), "data just written");
    let t = std::time::Instant::now();
    let mut i = 4;
    while counters.destaged_records.load(Ordering::Relaxed) == 0 && t.elapsed() < std::time::Duration::from_secs(5) {
        write(&e, id, ((i % 16) as u64) << 20, piece(i));
        i += 1;
    }
    let took = t.elapsed();
    println!("first records destaged {took:?} after the read, {} writes later; intervals waited {}", i - 4, counters.destage_deferrals.load(Ordering::Relaxed));
    assert!(took < std::time::Duration::from_millis(1500), "the destager kept waiting after a read of queued data: {took:?}");
    // The pieces not written yet, so that the file is whole.
    for j in i..16 {
        write(&e, id, (j as u64) << 20, piece(j));
    }
    settle(&e);
    let got = read(&e, id, 0, data.len() as u64);
    let first = got.iter().zip(&data).position(|(a, b)| a != b);
    assert!(got.len() == data.len() && first.is_none(), "destaged data differs: {} bytes, first difference at {first:?}", got.len());
    r.shutdown();
}
