//! The read cache of chunk data (`[cache] read_mib`, `duet_cache::read`)
//! in the real engine: reads stay byte-exact while the destager rewrites,
//! truncates, zeroes, clones and reclaims the chunks under them (reads
//! submitted as the protocols submit them, so those the cache covers are
//! served on the caller's thread while the destager runs on its own), and
//! a sequential reader's second pass comes from memory.

mod common;

use std::sync::atomic::Ordering;

use common::inproc::*;
use duet_appliance::server;
use duet_fs::{ObjRef, Op, SetAttrs, CHUNK_SIZE, ROOT_ID};

/// Random writes (inline-sized and logged), truncates, extensions and
/// zeroed ranges of a three-chunk file, each followed at once by reads of
/// random ranges and of the whole file, while the destager (every 1 ms)
/// moves the same ranges into the chunks: every read equals the model.
/// Then a clone of the file by reference and a removal, both through the
/// destager, and fsck. Fails if a read ever serves a block older than the
/// chunk file (the staleness rule of `duet_cache::read`).
#[test]
fn reads_stay_exact_while_the_destager_changes_the_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let r = server::start(&cfg(tmp.path(), 64)).unwrap();
    let e = r.engine().clone();
    let id = create(&e, "f");
    let mut rng = Rng(0x5eed_cafe);
    let mut model = bytes(&mut rng, (CHUNK_SIZE * 3) as usize);
    write(&e, id, 0, &model);
    settle(&e);
    check(&e, id, &model, 0, model.len() as u64, "after the first destage");
    let rounds = std::env::var("DUET_READ_CACHE_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300u64);
    for round in 0..rounds {
        let size = model.len() as u64;
        match rng.below(10) {
            k @ 0..=6 => {
                // Logged writes (over 4 KiB, possibly across a chunk
                // boundary) and small writes into the chunked file (they
                // ride in the entry).
                let len = if k <= 3 { 4097 + rng.below(200_000) } else { 1 + rng.below(4000) };
                let at = rng.below(size);
                let data = bytes(&mut rng, len as usize);
                write_model(&e, id, &mut model, at, &data);
            }
            7 => {
                // A new size, shorter or longer (the tail reads as zeros).
                let cut = CHUNK_SIZE + rng.below(CHUNK_SIZE * 2);
                ok(&e, Op::SetAttr { obj: ObjRef::Id(id), attrs: SetAttrs { size: Some(cut), ..Default::default() } });
                model.resize(cut as usize, 0);
            }
            8 => {
                let at = rng.below(size);
                let len = 1 + rng.below(CHUNK_SIZE);
                ok(&e, Op::ZeroRange { obj: ObjRef::Id(id), offset: at, len });
                let end = ((at + len) as usize).min(model.len());
                model[at as usize..end].fill(0);
            }
            _ => {
                // Extend past the end: a hole, then data.
                let at = size + rng.below(100_000);
                let n = 1 + rng.below(100_000) as usize;
                let data = bytes(&mut rng, n);
                write(&e, id, at, &data);
                model.resize(at as usize, 0);
                model.extend_from_slice(&data);
            }
        }
        let size = model.len() as u64;
        for _ in 0..3 {
            let at = rng.below(size);
            let len = 1 + rng.below(300_000);
            check(&e, id, &model, at, len, &format!("round {round}"));
        }
        if round % 10 == 0 {
            // Sequential 64 KiB reads (read-ahead), racing the destager.
            let mut at = rng.below(size / 2);
            for _ in 0..20 {
                check(&e, id, &model, at, 65_536, &format!("round {round}, sequential"));
                at += 65_536;
            }
            check(&e, id, &model, 0, size, &format!("round {round}, whole"));
        }
    }
    settle(&e);
    check(&e, id, &model, 0, model.len() as u64, "settled");
    check(&e, id, &model, 0, model.len() as u64, "settled, from the cache");
    let hits = e.data_counters.read_cache_hits.load(Ordering::Relaxed);
    let misses = e.data_counters.read_cache_misses.load(Ordering::Relaxed);
    let direct = e.data_counters.read_cache_direct.load(Ordering::Relaxed);
    println!("read cache: {hits} block hits, {misses} misses, {direct} reads served on the caller's thread over {rounds} rounds");
    assert!(hits > 0 && misses > 0, "the cache was not exercised: {hits} hits, {misses} misses");
    assert!(direct > 0, "no read was served from the cache on the caller's thread");
    // A clone by reference shares the chunks; writes to either stay apart.
    let c = create(&e, "clone");
    ok(&e, Op::Clone { src: ObjRef::Id(id), src_offset: 0, dst: ObjRef::Id(c), dst_offset: 0, len: model.len() as u64, extend: true });
    check(&e, c, &model, 0, model.len() as u64, "clone");
    let patch = bytes(&mut rng, 70_000);
    write(&e, c, 1000, &patch);
    let mut cm = model.clone();
    cm[1000..71_000].copy_from_slice(&patch);
    settle(&e);
    check(&e, c, &cm, 0, cm.len() as u64, "clone after a write");
    check(&e, id, &model, 0, model.len() as u64, "source after the clone's write");
    // Removal reclaims the chunks; a new file never reads their blocks.
    ok(&e, Op::Remove { dir: ObjRef::Id(ROOT_ID), name: "f".into(), dir_only: None });
    settle(&e);
    check(&e, c, &cm, 0, cm.len() as u64, "clone after the source's removal");
    r.shutdown();
}

/// Reading an 8 MiB file 64 KiB at a time: the first pass reads the device
/// ahead of the reader (a read per megabyte or so, not per request), the
/// second comes from memory (no device read); with `read_mib = 0` every
/// request reads the device.
#[test]
fn a_sequential_reader_reads_ahead_and_rereads_from_memory() {
    for read_mib in [256, 0] {
        let tmp = tempfile::tempdir().unwrap();
        let r = server::start(&cfg(tmp.path(), read_mib)).unwrap();
        let e = r.engine().clone();
        let id = create(&e, "seq");
        let mut rng = Rng(42);
        let data = bytes(&mut rng, 8 << 20);
        write(&e, id, 0, &data);
        settle(&e);
        let device = || e.data_counters.chunk_reads.load(Ordering::Relaxed);
        let mut passes = Vec::new();
        for _ in 0..2 {
            let before = device();
            for at in (0..data.len() as u64).step_by(65_536) {
                check(&e, id, &data, at, 65_536, "sequential");
            }
            passes.push(device() - before);
        }
        println!("read_mib {read_mib}: device reads per pass of 128 requests: {passes:?}");
        if read_mib > 0 {
            assert!(passes[0] <= 24, "the first pass did not read ahead: {} device reads", passes[0]);
            assert_eq!(passes[1], 0, "the second pass went to the device");
        } else {
            assert_eq!(passes, vec![128, 128], "without a cache every request reads the device");
        }
        r.shutdown();
    }
}

/// What the destager writes stays in the read cache (whole 64 KiB blocks
/// as the chunks then hold them): an 8 MiB file written 1 MiB at a time
/// and destaged reads back without a device read, as a page cache would
/// serve it; a block then written in part stays too (the destager lays the
/// write on the cached block), and with `read_mib = 0` every read goes to
/// the device.
#[test]
fn a_file_just_written_and_destaged_reads_from_memory() {
    for read_mib in [256, 0] {
        let tmp = tempfile::tempdir().unwrap();
        let r = server::start(&cfg(tmp.path(), read_mib)).unwrap();
        let e = r.engine().clone();
        let id = create(&e, "w");
        let mut rng = Rng(7);
        let mut data = bytes(&mut rng, 8 << 20);
        for (i, piece) in data.chunks(1 << 20).enumerate() {
            write(&e, id, (i as u64) << 20, piece);
        }
        settle(&e);
        let device = || e.data_counters.chunk_reads.load(Ordering::Relaxed);
        let before = device();
        for at in (0..data.len() as u64).step_by(65_536) {
            check(&e, id, &data, at, 65_536, "just written");
        }
        let whole = device() - before;
        // 100 bytes into a cached block: the block is patched, not dropped.
        let patch = bytes(&mut rng, 100);
        write(&e, id, 3 * 65_536 + 10, &patch);
        data[3 * 65_536 + 10..3 * 65_536 + 110].copy_from_slice(&patch);
        settle(&e);
        let before = device();
        check(&e, id, &data, 0, data.len() as u64, "after a small write");
        let partial = device() - before;
        println!("read_mib {read_mib}: device reads for 8 MiB just destaged: {whole}; after a 100-byte write: {partial}");
        let direct = e.data_counters.read_cache_direct.load(Ordering::Relaxed);
        if read_mib > 0 {
            assert_eq!(whole, 0, "a file just destaged went to the device");
            assert_eq!(partial, 0, "the block written in part went to the device");
            assert!(direct >= 128, "{direct} reads served on the caller's thread, of 129 wholly cached");
        } else {
            assert_eq!(direct, 0, "no cache, no reads from it");
            assert!(whole >= 8, "no cache, yet {whole} device reads");
        }
        r.shutdown();
    }
}

/// The random-I/O benchmark's pattern: a 16 MiB file written 1 MiB at a
/// time, then 2,000 writes of 4 KiB at random blocks (they ride in the
/// entries and are destaged in place, several to a 64 KiB cache block),
/// then reads of every 4 KiB block: the destager lays each write on the
/// cached block rather than dropping it, so no read goes to the device,
/// as with a page cache.
#[test]
fn random_small_writes_keep_their_blocks_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let r = server::start(&cfg(tmp.path(), 256)).unwrap();
    let e = r.engine().clone();
    let id = create(&e, "r");
    let mut rng = Rng(11);
    let mut model = bytes(&mut rng, 16 << 20);
    for (i, piece) in model.chunks(1 << 20).enumerate() {
        write(&e, id, (i as u64) << 20, piece);
    }
    settle(&e);
    for _ in 0..2000 {
        let at = rng.below(model.len() as u64 / 4096) * 4096;
        let data = bytes(&mut rng, 4096);
        write_model(&e, id, &mut model, at, &data);
    }
    settle(&e);
    let device = || e.data_counters.chunk_reads.load(Ordering::Relaxed);
    let before = device();
    for at in (0..model.len() as u64).step_by(4096) {
        check(&e, id, &model, at, 4096, "after random writes");
    }
    let reads = device() - before;
    println!("device reads for 4,096 reads of 4 KiB after 2,000 random 4 KiB writes: {reads}");
    assert_eq!(reads, 0, "blocks written in part were dropped from the cache");
    r.shutdown();
}

/// The write log's newest extents stay in memory (a quarter of the read
/// cache's bound, `duet_cache::logmem`): a file written 1 MiB at a time
/// reads back at once, destaged or not, without a device read, and the
/// destager moves every extent into the chunks without reading the log
/// back from the device. With `read_mib = 0` the destager reads every
/// extent from the device.
#[test]
fn data_not_yet_destaged_reads_from_memory() {
    for read_mib in [256, 0] {
        let tmp = tempfile::tempdir().unwrap();
        let r = server::start(&cfg(tmp.path(), read_mib)).unwrap();
        let e = r.engine().clone();
        let id = create(&e, "fresh");
        let mut rng = Rng(99);
        let data = bytes(&mut rng, 8 << 20);
        let c = &e.data_counters;
        let device = || c.chunk_reads.load(Ordering::Relaxed) + c.log_reads_device.load(Ordering::Relaxed);
        let before = device();
        for (i, piece) in data.chunks(1 << 20).enumerate() {
            write(&e, id, (i as u64) << 20, piece);
            check(&e, id, &data[..(i + 1) << 20], 0, ((i + 1) << 20) as u64, "just written");
        }
        settle(&e);
        check(&e, id, &data, 0, data.len() as u64, "destaged");
        let (dev, mem) = (device() - before, c.log_reads_memory.load(Ordering::Relaxed));
        println!("read_mib {read_mib}: device reads {dev} (chunks {}, log {}), write-log reads from memory {mem}", c.chunk_reads.load(Ordering::Relaxed), c.log_reads_device.load(Ordering::Relaxed));
        if read_mib > 0 {
            assert_eq!(dev, 0, "data just written went to the device");
            assert!(mem >= 8, "the destager did not read the extents from memory: {mem}");
        } else {
            assert_eq!(mem, 0);
            assert!(c.log_reads_device.load(Ordering::Relaxed) >= 8, "no memory, yet the log was not read from the device");
        }
        r.shutdown();
    }
}

/// Data just written and not destaged yet is read on the protocol
/// executor itself when its write-log extents are in memory: with the
/// destager held back (every chunk write fails, `[testing]
/// fault_injection`), reads of 1 MiB pieces still queued are served
/// without a trip to the data executor and byte-exact; then the destager
/// goes on and the file reads the same.
#[test]
fn logged_writes_in_memory_are_read_on_the_callers_thread() {
    use duet_admin_api::{AdminRequest, FaultSpec};
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cfg(tmp.path(), 256);
    c.testing.fault_injection = true;
    let r = server::start(&c).unwrap();
    let e = r.engine().clone();
    let fault = |count| admin_call(&r, AdminRequest::Fault(FaultSpec { point: "chunk-write".into(), count }));
    fault(1_000_000);
    let id = create(&e, "direct");
    let mut rng = Rng(5);
    let data = bytes(&mut rng, 4 << 20);
    let c = &e.data_counters;
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        write(&e, id, (i as u64) << 20, piece);
    }
    let direct0 = c.read_cache_direct.load(Ordering::Relaxed);
    for _ in 0..5 {
        check(&e, id, &data, 0, data.len() as u64, "whole");
        for at in (0..data.len() as u64).step_by(300_000) {
            check(&e, id, &data, at, 200_000, "pieces");
        }
    }
    let direct = c.read_cache_direct.load(Ordering::Relaxed) - direct0;
    let device = c.chunk_reads.load(Ordering::Relaxed) + c.log_reads_device.load(Ordering::Relaxed);
    let destaged = c.destaged_records.load(Ordering::Relaxed);
    println!("{direct} of 75 reads on the caller's thread; device reads {device}; records destaged meanwhile {destaged}");
    assert_eq!(destaged, 0, "the destager was not held back");
    assert_eq!(direct, 75, "reads of logged data in memory went to the data executor");
    assert_eq!(device, 0);
    fault(0);
    settle(&e);
    // The destager counts its records after it drops them from the
    // queue, which is what `settle` waits for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while c.destaged_records.load(Ordering::Relaxed) < 4 {
        assert!(std::time::Instant::now() < deadline, "destaged {}", c.destaged_records.load(Ordering::Relaxed));
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    check(&e, id, &data, 0, data.len() as u64, "settled");
    r.shutdown();
}
