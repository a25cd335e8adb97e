//! File data on local storage: the write log and the chunk store, both
//! O_DIRECT files driven by io_uring (glommio DMA files), and the destager
//! that moves logged data into chunks.
//!
//! Write path: data that will not live inline is appended to the write log
//! and made durable (one fdatasync shared by every append of the group)
//! before its metadata commit is proposed. The commit queues a data record
//! naming the extent (this node's id and its next extent sequence, see
//! `duet_cache::SeqAlloc`); the destager applies queued records in order
//! to the chunk files, syncs them, and only then records (node-locally)
//! that they are destaged, which drops them. A crash anywhere replays the
//! queue: applying a record again gives the same bytes.
//!
//! Log records that no commit names (the batch failed, or the process died
//! before committing) are never applied and their segment is released.
//!
//! Segment files are reused: a released segment is renamed to
//! `wal/<seq>.spare` (at most [`SPARE_SEGMENTS`] are kept, the others
//! deleted), and a new segment takes a spare and renames it to its own
//! name, then syncs the `wal` directory before any record in it is
//! written. Overwriting a file's blocks makes a record's fdatasync commit
//! no file-size or extent metadata, which a growing new file needs on
//! every group commit. A reused file still holds its earlier lives'
//! records after the new life's last one: records are bound to their
//! segment's sequence and salt (`duet_cache::SegmentBinding`), and
//! recovery ends a segment at the first record of another life.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use duet_cluster::machine::ReadPlan;
use duet_cluster::records::DataOp;
use duet_cluster_store::{Query, QueryAnswer, StoreHandle};
use duet_fs::{ExtentId, NodeId, CHUNK_SIZE};
use glommio::io::{DmaFile, OpenOptions};

use duet_cache::log::{AppendStep, Durable, LogCore, LogIoError, LogRecovery, Ticket};
use duet_cache::{
    align_up, cut, decode_floor, encode_floor, encode_record, patch, SegmentBinding, ALIGN,
};
use duet_cache::chunkz;
use duet_cache::replica::{FetchRange, Unclaimed};

use crate::replica::Replica;

/// The durable floor of this node's extent sequences, in `wal/`.
pub(crate) const SEQ_FLOOR_FILE: &str = "extent-seq";

/// Released write-log segment files kept for reuse (`wal/<seq>.spare`);
/// more are deleted. Two cover a destager that releases segments one or
/// two at a time while appends roll over.
pub const SPARE_SEGMENTS: usize = 2;

/// Most data records one destage round takes.
const DESTAGE_BATCH: usize = 256;

/// Counters of data-path operations.
#[derive(Debug, Default)]
pub struct DataCounters {
    pub log_writes: AtomicU64,
    pub log_fsyncs: AtomicU64,
    /// Write-log segments made from a spare (released) file rather than a
    /// new one.
    pub log_segments_reused: AtomicU64,
    pub chunk_reads: AtomicU64,
    pub chunk_writes: AtomicU64,
    pub chunk_fsyncs: AtomicU64,
    pub destaged_records: AtomicU64,
    /// Fetches from peers answered from this node's chunk store (the
    /// extent no longer in its log).
    pub fetch_from_chunks: AtomicU64,
    /// Mirrors of the read cache's counters (it lives on the data executor).
    pub read_cache_hits: AtomicU64,
    pub read_cache_misses: AtomicU64,
    pub read_cache_bytes: AtomicU64,
    /// Reads served from the read cache on a protocol executor
    /// ([`SharedReads::read_cached`]).
    pub read_cache_direct: AtomicU64,
    /// Write-log extent reads served from memory (`duet_cache::logmem`)
    /// and from the device.
    pub log_reads_memory: AtomicU64,
    pub log_reads_device: AtomicU64,
    /// Bytes of write-log extents held in memory.
    pub log_memory_bytes: AtomicU64,
    /// Gather intervals the destager waited for a stream of log appends
    /// to pause (`duet_cache::defer`).
    pub destage_deferrals: AtomicU64,
}

/// Where a test can make the data path fail (`[testing] fault_injection`,
/// `duetctl fault`): each point fails its next N operations with EIO, as a
/// failing disk would. Off (zero everywhere) unless asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    /// Appending a record to the write log.
    WalWrite,
    /// The write log's group fdatasync.
    WalSync,
    /// Reading file data (chunk files and not yet destaged log records).
    DataRead,
    /// The destager's writes into chunk files.
    ChunkWrite,
    /// The destager's fdatasync of chunk files.
    ChunkSync,
}

impl FaultPoint {
    pub const ALL: [FaultPoint; 5] =
        [FaultPoint::WalWrite, FaultPoint::WalSync, FaultPoint::DataRead, FaultPoint::ChunkWrite, FaultPoint::ChunkSync];

    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::WalWrite => "wal-write",
            FaultPoint::WalSync => "wal-sync",
            FaultPoint::DataRead => "data-read",
            FaultPoint::ChunkWrite => "chunk-write",
            FaultPoint::ChunkSync => "chunk-sync",
        }
    }

    pub fn parse(s: &str) -> Option<FaultPoint> {
        FaultPoint::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// Free bytes for unprivileged writers on the file system holding `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs with a NUL-terminated path and a local out struct.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }
}

/// An error that says the same as `e`, keeping ENOSPC recognisable.
fn keep_kind(e: &dyn std::fmt::Display, text: String) -> io::Error {
    if is_enospc_text(&e.to_string()) {
        io::Error::new(io::ErrorKind::StorageFull, text)
    } else {
        io::Error::other(text)
    }
}

fn is_enospc_text(t: &str) -> bool {
    t.contains("No space left on device") || t.contains("os error 28") || t.contains("NoSpace")
}

/// Whether an error from the write log, the chunk store or the metadata
/// store means the volume is full.
pub fn is_enospc(e: &dyn std::fmt::Display) -> bool {
    is_enospc_text(&e.to_string())
}

/// Whether writing `need` more bytes under `data_dir` would eat into
/// `reserve`: the smaller free space of the data directory and its
/// metadata directory counts. Callable from any thread.
pub fn space_low_at(data_dir: &Path, reserve: u64, need: u64) -> bool {
    if reserve == 0 {
        return false;
    }
    let meta = duet_cluster_store::metadata_dir(data_dir);
    let free = [data_dir, meta.as_path()].iter().filter_map(|p| free_bytes(p)).min();
    match free {
        Some(f) => f < reserve.saturating_add(need),
        None => false,
    }
}

/// How much a batch may add to the volumes, or None when it only reads,
/// removes, renames or changes attributes (those must work on a full
/// volume, so that space can be freed).
pub fn growth(batch: &duet_fs::Batch) -> Option<u64> {
    use duet_fs::{Op, WriteData};
    let mut grow = None::<u64>;
    let mut add = |n: u64| grow = Some(grow.unwrap_or(0).saturating_add(n));
    for op in &batch.ops {
        match op {
            Op::Write { data: WriteData::Bytes(b), .. } if !b.is_empty() => add(b.len() as u64),
            Op::Write { data: WriteData::Logged { len, .. }, .. } if *len > 0 => add(*len),
            Op::Create { .. } | Op::CreateCaseless { .. } | Op::Link { .. } => add(4096),
            Op::SetEas { eas, .. } if eas.iter().any(|(_, v)| !v.is_empty()) => add(4096),
            Op::SetXattr { how, .. } if *how != duet_fs::XattrHow::Remove => add(4096),
            // A COPY's length may be "to the end" (NFSv4.2 count 0 arrives
            // as u64::MAX) and its source size is not known here: count at
            // most 16 MiB; a larger copy that meets a full volume still gets
            // NoSpace from the write path (`is_enospc`).
            Op::Copy { len, .. } => add((*len).min(16 << 20)),
            // A clone shares whole chunks; it copies at most its two
            // partial ones (or a misaligned range, which the state machine
            // bounds).
            Op::Clone { len, .. } => add((*len).min(8 << 20)),
            _ => {}
        }
    }
    grow
}

/// The result of a batch refused for want of space: nothing ran; every
/// operation says NoSpace (the protocols answer STATUS_DISK_FULL,
/// NFS3ERR_NOSPC, NFS4ERR_NOSPC).
pub fn no_space(ops: usize) -> duet_fs::BatchResult {
    duet_fs::BatchResult { results: vec![Err(duet_fs::FsError::NoSpace); ops], cost: Default::default() }
}

fn io_err(what: &str, path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what} {}: {e}", path.display()))
}

/// A write-log segment file (its state is in the [`LogCore`]).
struct Segment {
    file: Rc<DmaFile>,
    path: PathBuf,
    /// The life its records are bound to: segments made in this run.
    /// `None` for segments found at open (they get no appends).
    bound: Option<SegmentBinding>,
}

/// The name of segment `seq`.
fn segment_path(wal: &Path, seq: u64) -> PathBuf {
    wal.join(format!("{seq:016x}.log"))
}

/// The name of a spare file last used as segment `seq`.
fn spare_path(wal: &Path, seq: u64) -> PathBuf {
    wal.join(format!("{seq:016x}.spare"))
}

/// fsyncs a directory: the names made or changed in it are durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err("cannot sync", dir, e))
}

/// Makes the file of segment `seq`: from `spare` (a file last used under a
/// lower sequence) renamed to its name, else a new file; then syncs the
/// directory, so that no record in it is acknowledged while a crash could
/// still leave it under another name (an overwrite's fdatasync commits no
/// names). Returns it and whether a spare was used; a spare that cannot be
/// renamed or opened is deleted.
async fn make_segment(wal: &Path, seq: u64, spare: Option<(u64, PathBuf)>) -> io::Result<(Segment, bool)> {
    let path = segment_path(wal, seq);
    let bound = Some(SegmentBinding { segment: seq, salt: rand::random::<u64>() });
    if let Some((old, from)) = spare {
        assert!(old < seq, "a file's lives have increasing segment sequences ({old} then {seq})");
        match std::fs::rename(&from, &path) {
            Ok(()) => match OpenOptions::new().read(true).write(true).dma_open(&path).await {
                Ok(file) => {
                    sync_dir(wal)?;
                    return Ok((Segment { file: Rc::new(file), path, bound }, true));
                }
                Err(e) => {
                    tracing::warn!("cannot open reused write-log segment {}: {e}; making a new one", path.display());
                    let _ = std::fs::remove_file(&path);
                }
            },
            Err(e) => {
                tracing::warn!("cannot reuse write-log segment file {}: {e}; making a new one", from.display());
                let _ = std::fs::remove_file(&from);
            }
        }
    }
    // A file left under this name (a failed earlier try) is overwritten:
    // its records are of another life.
    let file = OpenOptions::new().read(true).write(true).create(true).dma_open(&path).await
        .map_err(|e| io_err("cannot create", &path, e))?;
    sync_dir(wal)?;
    Ok((Segment { file: Rc::new(file), path, bound }, false))
}

/// What the log core is told of a failed log write or fdatasync.
fn log_io_error(e: &io::Error) -> LogIoError {
    if e.kind() == io::ErrorKind::StorageFull {
        LogIoError::NoSpace
    } else {
        LogIoError::Io
    }
}

/// What a writer whose group's fdatasync failed (run by another writer) gets.
fn sync_failed(e: LogIoError) -> io::Error {
    match e {
        LogIoError::NoSpace => {
            io::Error::new(io::ErrorKind::StorageFull, "write log fdatasync failed: No space left on device")
        }
        LogIoError::Io => io::Error::other("write log fdatasync failed"),
    }
}

/// The data path of one node. Lives on one executor (`Rc`, not `Send`).
pub struct DataPath {
    dir: PathBuf,
    /// This node's id: the origin of the extents it appends, and what
    /// legacy names (`ExtentId::LEGACY_LOCAL`) resolve to.
    node_id: u64,
    /// The write log's decisions: placement, rollover, sequence floor,
    /// group commit, the live extents, which segments may go.
    log: RefCell<LogCore>,
    /// The log's segment files, by sequence.
    segments: RefCell<BTreeMap<u64, Segment>>,
    /// Released segment files kept for reuse: the sequence each was last
    /// used under, and its name (at most [`SPARE_SEGMENTS`]).
    spares: RefCell<Vec<(u64, PathBuf)>>,
    /// Writers waiting for the running fdatasync round to end.
    waiters: RefCell<Vec<flume::Sender<()>>>,
    reserve: glommio::sync::Semaphore,
    destaged_upto: Cell<u64>,
    /// Bytes kept free on the data and metadata volumes
    /// (`[limits] disk_reserve_mib`): below it, batches that grow the file
    /// system get FsError::NoSpace before anything is written.
    space_reserve: Arc<AtomicU64>,
    /// Injected failures left per [`FaultPoint`] (indexed by the variant: `point as usize`, the order of `ALL`).
    faults: [Cell<u32>; 5],
    pub counters: Arc<DataCounters>,
    /// The other voters' copies of the write cache (multi-node only; a
    /// single node has none and makes no network traffic).
    replica: OnceCell<Rc<Replica>>,
    /// Copies of other origins' extents no queued record names yet.
    unclaimed: RefCell<Unclaimed>,
    /// The monotonic clock [`Unclaimed`] reads.
    started: std::time::Instant,
    /// Blocks of chunk files in memory (`[cache] read_mib`; chunk files
    /// are read with O_DIRECT, so nothing else caches them). The destager
    /// forgets a file's blocks before and after it changes its chunks.
    /// Shared with the protocol executors, which serve reads whose every
    /// block is cached themselves ([`SharedReads::read_cached`]).
    reads: Arc<SharedReads>,
    /// Chunk files open for reading (with the read cache on), at most
    /// `READ_FILES_MAX`; dropped with the file's blocks, by the same rule.
    read_files: RefCell<HashMap<(NodeId, u64), Rc<DmaFile>>>,
    /// Chunk files being opened for reads right now. glommio's
    /// `DmaFile::open` looks the path up again after the open (statfs) and
    /// panics if it is gone by then, so the destager removes no chunk name
    /// while one is in flight ([`Self::quiesce_opens`]).
    opening: Cell<u32>,
    /// When the newest write-log append became durable (ms of `started`),
    /// and how long the destager waits for a stream of them to pause
    /// (`duet_cache::defer`, `[cache] destage_defer_mib`).
    last_append_ms: Cell<Option<u64>>,
    defer: Cell<duet_cache::defer::DeferPolicy>,
}

/// Bytes of a write-log extent ([`DataPath::log_read`]): shared with the
/// log memory (no copy), or read from the device.
enum LogBytes {
    Shared(Arc<Vec<u8>>, std::ops::Range<usize>),
    Owned(Vec<u8>),
}

impl std::ops::Deref for LogBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            LogBytes::Shared(d, r) => &d[r.clone()],
            LogBytes::Owned(v) => v,
        }
    }
}

impl LogBytes {
    fn into_vec(self) -> Vec<u8> {
        match self {
            LogBytes::Shared(d, r) => d[r].to_vec(),
            LogBytes::Owned(v) => v,
        }
    }
}

/// A destager's wait for a stream of appends to pause
/// ([`DataPath::defer_begin`]).
pub struct DeferWait {
    since_ms: u64,
    queued_reads: u64,
}

/// The size of an open file (fstat of its descriptor).
fn fd_size(f: &DmaFile) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    // SAFETY: fstat on a descriptor the DmaFile keeps open, into a local.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(f.as_raw_fd(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.st_size as u64)
    }
}

/// Counts one open in [`DataPath::opening`] while it lives.
struct Opening<'a>(&'a Cell<u32>);

impl<'a> Opening<'a> {
    fn new(c: &'a Cell<u32>) -> Opening<'a> {
        c.set(c.get() + 1);
        Opening(c)
    }
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Chunk files kept open for reads.
const READ_FILES_MAX: usize = 256;

/// How one chunk is stored on this node (`duet_cache::chunkz`: the name
/// says the format).
enum Stored {
    None,
    Plain(PathBuf),
    /// Compressed (`<file>.<index>.z`).
    Z(PathBuf),
}

/// A chunk opened for a read.
enum ReadSrc {
    /// No chunk: a hole, or data not destaged yet (zeros).
    None,
    Plain(DmaFile),
    /// A compressed chunk, decoded.
    Z(Vec<u8>),
}

/// What one destage round changes, kept until its end: plain chunk files
/// written in place (synced at the end), and chunks rewritten whole (the
/// chunks of compressed files, and compressed chunks of any file), held as
/// their bytes until [`DataPath::flush_edits`] writes each under a side
/// name, syncs it and renames it over.
#[derive(Default)]
struct Round {
    open: HashMap<(NodeId, u64), Rc<DmaFile>>,
    edits: BTreeMap<(NodeId, u64), Vec<u8>>,
    /// The round's files with FILE_ATTRIBUTE_COMPRESSED
    /// (`Query::Compressed`, asked once at the round's start).
    compressed: HashSet<NodeId>,
    /// Whole 64 KiB blocks as this round leaves them in the chunks, for
    /// the read cache (kept once the round's last forget is done, so a
    /// file just written reads from memory as from a page cache); at most
    /// `fill_max` blocks. Empty when the read cache is off.
    fill: BTreeMap<(NodeId, u64, u64), Vec<u8>>,
    fill_max: usize,
    /// What the round's records changed so far ([`Self::take_bases`]):
    /// 64 KiB blocks, whole chunks, whole files; the cache forgets exactly
    /// these after the round's syncs ([`DataPath::forget_changed`]).
    seen: HashSet<(NodeId, u64, u64)>,
    seen_chunks: HashSet<(NodeId, u64)>,
    seen_files: HashSet<NodeId>,
    /// Blocks of plain chunks this round writes in place, by (file,
    /// chunk, 4 KiB block), as they will be: written together
    /// ([`DataPath::flush_pending`]) before anything else reads or
    /// rewrites a chunk, before a record that is not a write, past
    /// [`PENDING_MAX`] bytes, and at the round's end, so a round of many
    /// small writes waits for the device once rather than once per write.
    pending: BTreeMap<(NodeId, u64, u64), Vec<u8>>,
    pending_bytes: usize,
}

/// Most bytes of in-place chunk writes a destage round holds before it
/// writes them out.
const PENDING_MAX: usize = 16 << 20;

impl Round {
    /// Notes the bytes `data` written at `co` of chunk `idx` of `file`:
    /// the blocks it covers whole are kept for the read cache; one it
    /// covers in part is patched when the round holds its other bytes
    /// ([`Self::take_bases`]), else dropped.
    fn keep_written(&mut self, file: NodeId, idx: u64, co: u64, data: &[u8]) {
        use duet_cache::read::BLOCK;
        if self.fill_max == 0 || data.is_empty() {
            return;
        }
        let end = co + data.len() as u64;
        for b in co / BLOCK..=(end - 1) / BLOCK {
            let (s, e) = (b * BLOCK, (b + 1) * BLOCK);
            if s >= co && e <= end && (self.fill.len() < self.fill_max || self.fill.contains_key(&(file, idx, b))) {
                self.fill.insert((file, idx, b), data[(s - co) as usize..(e - co) as usize].to_vec());
            } else if let Some(block) = self.fill.get_mut(&(file, idx, b)) {
                // As the chunk will hold it: in-place writes go out in
                // whole 4 KiB blocks, so a block that grows ends on one
                // (zeros before the write, as in the chunk).
                let (ws, we) = ((co.max(s) - s) as usize, (end.min(e) - s) as usize);
                let len = block.len().max((align_up(we as u64).min(BLOCK)) as usize);
                block.resize(len, 0);
                block[ws..we].copy_from_slice(&data[(s.max(co) - co) as usize..(e.min(end) - co) as usize]);
            }
        }
    }

    /// Before a record changes `scope` of `file` (see [`record_chunks`];
    /// `None`: the whole file), and before the cache forgets it: a write
    /// record takes each cached 64 KiB block it is the round's first to
    /// change as the base its bytes are laid on ([`Self::keep_written`]),
    /// so a block written in part reads from memory afterwards rather than
    /// from the device. Only a block no earlier record of the round
    /// changed: a read may have cached the chunk's old bytes of one since.
    fn take_bases(
        &mut self,
        cache: &duet_cache::read::ReadCache,
        file: NodeId,
        scope: Option<&BTreeMap<u64, (u64, u64)>>,
        write: bool,
    ) {
        use duet_cache::read::BLOCK;
        let Some(scope) = scope else {
            self.seen_files.insert(file);
            return;
        };
        let per_chunk = CHUNK_SIZE / BLOCK;
        for (&idx, &(b0, b1)) in scope {
            if b1.saturating_sub(b0) >= per_chunk {
                self.seen_chunks.insert((file, idx));
                continue;
            }
            for b in b0..=b1 {
                let key = (file, idx, b);
                let first = self.seen.insert(key);
                if write
                    && first
                    && self.fill_max > 0
                    && self.fill.len() < self.fill_max
                    && !self.seen_files.contains(&file)
                    && !self.seen_chunks.contains(&(file, idx))
                    && !self.fill.contains_key(&key)
                {
                    if let Some(d) = cache.peek(key) {
                        self.fill.insert(key, d.to_vec());
                    }
                }
            }
        }
    }

    /// Forgets what [`Self::keep_written`] kept of `file` (a change this
    /// round does not follow block by block: truncation, zeroing, a
    /// clone, a reclaim).
    fn drop_fill(&mut self, file: NodeId) {
        self.fill.retain(|&(f, _, _), _| f != file);
    }
}

/// Most blocks one destage round keeps for the read cache (64 MiB).
const FILL_BLOCKS_MAX: usize = 1024;

impl DataPath {
    /// Opens the write log and chunk store under `dir`, recovering the log.
    /// `store` tells which logged records are still queued.
    pub async fn open(dir: &Path, segment_max: u64, store: &StoreHandle) -> io::Result<Rc<DataPath>> {
        let node_id = store.node_id();
        probe_iopoll(dir).await?;
        let wal = dir.join("wal");
        let chunks = dir.join("chunks");
        std::fs::create_dir_all(&wal).map_err(|e| io_err("cannot create", &wal, e))?;
        for i in 0..256 {
            let d = chunks.join(format!("{i:02x}"));
            std::fs::create_dir_all(&d).map_err(|e| io_err("cannot create", &d, e))?;
            // Side names a clone, an unshare or a whole-chunk rewrite left
            // when the process died (`<id>.<i>.lnk`, `.cow`, `.new`): the record that made one is
            // replayed, and makes it again from the start, so none is
            // needed; a stale link would keep a shared chunk's bytes alive.
            for e in std::fs::read_dir(&d).map_err(|e| io_err("cannot list", &d, e))?.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".lnk") || name.ends_with(".cow") || name.ends_with(".new") {
                    let p = e.path();
                    std::fs::remove_file(&p).map_err(|e| io_err("cannot delete", &p, e))?;
                }
            }
        }
        let mut names: Vec<(u64, PathBuf)> = Vec::new();
        let mut spares: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&wal).map_err(|e| io_err("cannot list", &wal, e))?.flatten() {
            let p = e.path();
            let Some(seq) = p.file_stem().and_then(|s| s.to_str()).and_then(|s| u64::from_str_radix(s, 16).ok()) else {
                continue;
            };
            match p.extension().and_then(|x| x.to_str()) {
                Some("log") => names.push((seq, p)),
                // A spare is never read: what it holds is an earlier life's.
                Some("spare") => spares.push((seq, p)),
                _ => {}
            }
        }
        names.sort();
        // Two names for one sequence (hex digits in another case): the first is read.
        names.dedup_by_key(|(seq, _)| *seq);
        let mut recovery = LogRecovery::new(node_id, segment_max);
        // The newest spares are kept; the others, and names no segment
        // could follow (a sequence near the end of the range), deleted.
        spares.sort();
        let extra = spares.len().saturating_sub(SPARE_SEGMENTS);
        for (i, (seq, p)) in std::mem::take(&mut spares).into_iter().enumerate() {
            if i < extra || seq == 0 || seq >= u64::MAX / 2 {
                std::fs::remove_file(&p).map_err(|e| io_err("cannot delete", &p, e))?;
            } else {
                recovery.spare(seq);
                spares.push((seq, p));
            }
        }
        let mut segments = BTreeMap::new();
        for (seq, path) in names {
            let file = OpenOptions::new().read(true).write(true).dma_open(&path).await
                .map_err(|e| io_err("cannot open", &path, e))?;
            let size = file.file_size().await.map_err(|e| io_err("cannot stat", &path, e))?;
            recovery.begin(seq, size);
            while let Some((pos, len)) = recovery.next_read() {
                let b = file.read_at(pos, len as usize).await.map_err(|e| io_err("cannot read", &path, e))?;
                recovery.got(&b);
            }
            segments.insert(seq, Segment { file: Rc::new(file), path, bound: None });
        }
        let mut core = recovery.finish(read_floor(&wal)?);
        if let Some(floor) = core.floor_wanted() {
            write_floor(&wal, floor)?;
            core.floor_persisted(floor);
        }
        // Always start a new segment: never append after a torn tail.
        let seq = core.next_segment();
        let (segment, reused) = make_segment(&wal, seq, spares.pop()).await?;
        segments.insert(seq, segment);
        core.segment_created(seq);
        let dp = Rc::new(DataPath {
            dir: dir.to_path_buf(),
            node_id,
            log: RefCell::new(core),
            segments: RefCell::new(segments),
            spares: RefCell::new(spares),
            waiters: RefCell::new(Vec::new()),
            reserve: glommio::sync::Semaphore::new(1),
            destaged_upto: Cell::new(0),
            space_reserve: Arc::new(AtomicU64::new(0)),
            faults: Default::default(),
            counters: Arc::new(DataCounters::default()),
            replica: OnceCell::new(),
            unclaimed: RefCell::new(Unclaimed::default()),
            started: std::time::Instant::now(),
            reads: Arc::new(SharedReads {
                cache: std::sync::Mutex::new(duet_cache::read::ReadCache::new(0)),
                log_mem: std::sync::Mutex::new(duet_cache::logmem::LogMem::new(0)),
                node_id,
                fault_armed: std::sync::atomic::AtomicBool::new(false),
                queued_reads: AtomicU64::new(0),
            }),
            read_files: RefCell::new(HashMap::new()),
            opening: Cell::new(0),
            last_append_ms: Cell::new(None),
            defer: Cell::new(duet_cache::defer::DeferPolicy { max_bytes: 0, max_wait_ms: duet_cache::defer::MAX_WAIT_MS }),
        });
        if reused {
            dp.counters.log_segments_reused.fetch_add(1, Ordering::Relaxed);
        }
        // Records still queued keep their log data alive.
        let mut after = 0;
        loop {
            let QueryAnswer::DataQueue(recs) = store
                .query(Query::DataQueue { after, limit: 4096 })
                .await
                .map_err(ge)?
            else {
                break;
            };
            let Some(last) = recs.last().map(|(d, _)| *d) else { break };
            for (_, r) in &recs {
                if let Some((_, extent, _)) = r.op.logged() {
                    dp.log.borrow_mut().keep(extent);
                }
            }
            after = last;
        }
        // Copies of other origins' extents that nothing queued names yet:
        // a committed entry this node has not applied may name them, so
        // they stay until proven unnamed (`Unclaimed`).
        {
            let mut log = dp.log.borrow_mut();
            let mut unclaimed = dp.unclaimed.borrow_mut();
            for e in log.names() {
                if e.origin != node_id && !log.is_live(e) {
                    log.keep(e);
                    unclaimed.add(e, 0);
                }
            }
        }
        dp.release_segments().await;
        Ok(dp)
    }

    /// Joins this node's write log to the other voters' (multi-node).
    /// Sizes the read cache (`[cache] read_mib`) and the write log's
    /// extents in memory (a quarter of it); 0 turns both off. Drops what
    /// they held.
    pub fn set_read_cache_bytes(&self, bytes: u64) {
        *self.cache() = duet_cache::read::ReadCache::new(bytes);
        *self.log_mem() = duet_cache::logmem::LogMem::new(bytes / 4);
        self.counters.log_memory_bytes.store(0, Ordering::Relaxed);
    }

    /// How much the write log may hold while the destager waits for a
    /// stream of appends to pause (`[cache] destage_defer_mib`; 0: never).
    pub fn set_destage_defer_bytes(&self, bytes: u64) {
        self.defer.set(duet_cache::defer::DeferPolicy { max_bytes: bytes, max_wait_ms: duet_cache::defer::MAX_WAIT_MS });
    }

    /// Milliseconds since the data path opened: the monotonic clock of
    /// [`Self::defer_destage`] and of [`Unclaimed`].
    pub fn clock_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The start of a destager's wait for a stream to pause: now, and the
    /// client reads of queued data so far.
    pub fn defer_begin(&self) -> DeferWait {
        DeferWait { since_ms: self.clock_ms(), queued_reads: self.reads.queued_reads.load(Ordering::Relaxed) }
    }

    /// Whether the destager, in the wait `w`, gathers another `gather`
    /// rather than run a round: log appends still complete, the log holds
    /// less than the bound and no client has read queued data since the
    /// wait began (`duet_cache::defer`). Counted in `destage_deferrals`.
    pub fn defer_destage(&self, w: &DeferWait, gather: std::time::Duration) -> bool {
        let held: u64 = self.log.borrow().segments().values().sum();
        let read = self.reads.queued_reads.load(Ordering::Relaxed) != w.queued_reads;
        let wait = self.defer.get().keep_waiting(self.clock_ms(), w.since_ms, self.last_append_ms.get(), gather.as_millis() as u64, held, read);
        if wait {
            self.counters.destage_deferrals.fetch_add(1, Ordering::Relaxed);
        }
        wait
    }

    fn mem_name(&self, extent: ExtentId) -> duet_cache::logmem::Name {
        mem_name(extent, self.node_id)
    }

    /// The write log's newest extents in memory. Never held across an
    /// await: the protocol executors take it too.
    fn log_mem(&self) -> std::sync::MutexGuard<'_, duet_cache::logmem::LogMem> {
        self.reads.log_mem.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The read cache. Never held across an await: the protocol executors
    /// take it too.
    fn cache(&self) -> std::sync::MutexGuard<'_, duet_cache::read::ReadCache> {
        self.reads.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The read cache as the protocol executors share it.
    pub fn shared_reads(&self) -> Arc<SharedReads> {
        self.reads.clone()
    }

    /// The read cache's counters.
    pub fn read_cache_stats(&self) -> duet_cache::read::ReadCacheStats {
        self.cache().stats()
    }

    pub fn set_replica(&self, r: Rc<Replica>) {
        let _ = self.replica.set(r);
    }

    pub fn replica(&self) -> Option<&Rc<Replica>> {
        self.replica.get()
    }

    /// Appends `data` to the write log as a new extent of this node and
    /// waits until it is durable. Returns the extent's name.
    pub async fn log_append(&self, data: &[u8]) -> io::Result<ExtentId> {
        let (extent, _) = self.append(None, Cow::Borrowed(data), |_, _| {}).await?;
        Ok(extent)
    }

    /// [`DataPath::log_append`] of bytes the caller gives up (kept in the
    /// log memory without a copy once durable), calling `named` with the
    /// extent's name and bytes as soon as it has a name (before the local
    /// write): the engine pushes the extent to the other voters while this
    /// node writes and syncs it.
    pub async fn log_append_then(&self, data: Vec<u8>, named: impl FnOnce(ExtentId, &[u8])) -> io::Result<ExtentId> {
        let (extent, _) = self.append(None, Cow::Owned(data), named).await?;
        Ok(extent)
    }

    /// Appends a copy of another node's extent (pushed by the leader, or
    /// fetched from a peer) and waits until it is durable. A name the log
    /// already holds is not written again (the first copy is kept).
    pub async fn replica_append(&self, extent: ExtentId, data: &[u8]) -> io::Result<()> {
        if extent.origin == ExtentId::LEGACY_LOCAL || extent.origin == self.node_id {
            return Err(io::Error::other(format!("a copy of extent {}:{} names this node or none", extent.origin, extent.seq)));
        }
        let (_, fresh) = self.append(Some(extent), Cow::Borrowed(data), |_, _| {}).await?;
        if fresh {
            self.unclaimed.borrow_mut().add(extent, self.clock_ms());
        }
        Ok(())
    }

    /// Appends a record: `name` for a copy of another node's extent,
    /// `None` for a new extent of this node. Returns the name and whether
    /// it was written (false: the log held it already). The log core
    /// decides where the record goes and what must come first; this does
    /// the I/O it asks for.
    async fn append(&self, name: Option<ExtentId>, data: Cow<'_, [u8]>, named: impl FnOnce(ExtentId, &[u8])) -> io::Result<(ExtentId, bool)> {
        if let Some(e) = name {
            if self.log.borrow().locate(e).is_some() {
                return Ok((e, false));
            }
        }
        let (w, file) = {
            let _permit = self.reserve.acquire_permit(1).await.map_err(ge)?;
            loop {
                let step = self.log.borrow_mut().append(name, data.len() as u64);
                match step {
                    AppendStep::Held(e) => return Ok((e, false)),
                    AppendStep::CreateSegment(seq) => {
                        let spare = self.spares.borrow_mut().pop();
                        let (segment, reused) = make_segment(&self.dir.join("wal"), seq, spare).await?;
                        if reused {
                            self.counters.log_segments_reused.fetch_add(1, Ordering::Relaxed);
                        }
                        self.segments.borrow_mut().insert(seq, segment);
                        self.log.borrow_mut().segment_created(seq);
                    }
                    AppendStep::PersistFloor(floor) => {
                        // The reserved range is used up (once per SEQ_RESERVE
                        // appends): a higher durable floor first.
                        write_floor(&self.dir.join("wal"), floor)?;
                        self.log.borrow_mut().floor_persisted(floor);
                    }
                    AppendStep::Write(w) => {
                        let seg = self.segments.borrow().get(&w.segment).map(|g| (g.file.clone(), g.bound));
                        let (file, bound) = seg.expect("the log core places records in segments whose files exist");
                        let bound = bound.expect("appends go to segments made in this run");
                        assert_eq!(bound.segment, w.segment, "a segment's records are bound to its sequence");
                        break (w, (file, bound));
                    }
                }
            }
        };
        let (file, bound) = file;
        let extent = w.extent;
        named(extent, &data);
        let mut buf = file.alloc_dma_buffer(w.record_len as usize);
        encode_record(buf.as_bytes_mut(), bound, extent, &data);
        let written = match self.fault(FaultPoint::WalWrite) {
            Err(e) => Err(e),
            Ok(()) => file.write_at(buf, w.pos).await.map(|_| ()).map_err(|e| keep_kind(&e, e.to_string())),
        };
        let ticket = self.log.borrow_mut().write_done(w, written.as_ref().map(|_| ()).map_err(log_io_error));
        let ticket = match (ticket, written) {
            (Some(t), _) => t,
            (None, Err(e)) => {
                self.unclaimed.borrow_mut().remove(&extent.resolved(self.node_id));
                // Writers placed after this record in its segment wait on
                // it (`LogCore::waits_on_earlier`): now they fail.
                self.wake_waiters();
                return Err(keep_kind(&e, format!("write log append: {e}")));
            }
            (None, Ok(())) => unreachable!("the log core gives a completed write a ticket"),
        };
        self.counters.log_writes.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.wait_durable(ticket).await {
            self.unclaimed.borrow_mut().remove(&extent.resolved(self.node_id));
            return Err(e);
        }
        self.last_append_ms.set(Some(self.clock_ms()));
        // The record is durable: its bytes may answer reads from memory
        // while the log holds it (`log_read` asks the log first).
        if self.faults[FaultPoint::DataRead as usize].get() == 0 {
            let name = self.mem_name(extent);
            let mut mem = self.log_mem();
            match data {
                Cow::Owned(v) => mem.insert_vec(name, v),
                Cow::Borrowed(b) => mem.insert(name, b),
            }
            self.counters.log_memory_bytes.store(mem.stats().bytes, Ordering::Relaxed);
        }
        Ok((extent, true))
    }

    /// Group commit of the log: waits for the answer to `ticket`, running
    /// the fdatasync round the log core hands out when none runs; one round
    /// serves every writer whose write completed before it started
    /// (`duet_cache::log`). The writer that ran a failed round gets its
    /// error; the others of the round get the core's typed one.
    async fn wait_durable(&self, mut ticket: Ticket) -> io::Result<()> {
        let mut own: Option<io::Error> = None;
        loop {
            let answer = self.log.borrow_mut().durable(ticket);
            match answer {
                Durable::Done(Ok(())) => return Ok(()),
                Durable::Done(Err(e)) => return Err(own.take().unwrap_or_else(|| sync_failed(e))),
                Durable::Pending(t) => ticket = t,
            }
            let round = self.log.borrow_mut().start_sync();
            let Some(round) = round else {
                // A round runs, or a record placed before this one is still
                // unsettled: its writer's round (or failure) wakes us.
                assert!(
                    self.log.borrow().syncing() || self.log.borrow().waits_on_earlier(&ticket),
                    "a pending write with no round running and nothing before it gets a round"
                );
                let (tx, rx) = flume::bounded(1);
                self.waiters.borrow_mut().push(tx);
                let _ = rx.recv_async().await;
                continue;
            };
            let files: Vec<Rc<DmaFile>> = {
                let segs = self.segments.borrow();
                round.segments.iter().filter_map(|seq| segs.get(seq).map(|g| g.file.clone())).collect()
            };
            let mut result = Ok(());
            for f in files {
                let synced = match self.fault(FaultPoint::WalSync) {
                    Err(e) => Err(e),
                    Ok(()) => f.fdatasync().await.map_err(|e| keep_kind(&e, e.to_string())),
                };
                if let Err(e) = synced {
                    result = Err(keep_kind(&e, format!("write log fdatasync: {e}")));
                }
                self.counters.log_fsyncs.fetch_add(1, Ordering::Relaxed);
            }
            self.log.borrow_mut().sync_done(round, result.as_ref().map(|_| ()).map_err(log_io_error));
            self.wake_waiters();
            if let Err(e) = result {
                own = Some(e);
            }
        }
    }

    /// Wakes every writer waiting in [`DataPath::wait_durable`] to ask
    /// the log core again.
    fn wake_waiters(&self) {
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
            let _ = w.send(());
        }
    }

    /// Test-only: the next `n` operations at `point` fail with EIO (0
    /// cancels).
    pub fn inject_fault(&self, point: FaultPoint, n: u32) {
        if point == FaultPoint::DataRead && n > 0 {
            // Reads must meet it on the device path, from now on.
            self.reads.fault_armed.store(true, Ordering::Relaxed);
        }
        self.faults[point as usize].set(n);
    }

    /// The failures still to inject, per point.
    pub fn faults_pending(&self) -> Vec<(FaultPoint, u32)> {
        FaultPoint::ALL.into_iter().zip(self.faults.iter().map(Cell::get)).filter(|(_, n)| *n > 0).collect()
    }

    /// EIO if a failure is to be injected at `point` now.
    fn fault(&self, point: FaultPoint) -> io::Result<()> {
        let c = &self.faults[point as usize];
        if c.get() == 0 {
            return Ok(());
        }
        c.set(c.get() - 1);
        let e = io::Error::from_raw_os_error(libc::EIO);
        Err(io::Error::new(e.kind(), format!("{}: {e} (injected)", point.name())))
    }

    /// Sets the free space kept on the data and metadata volumes.
    pub fn set_space_reserve(&self, bytes: u64) {
        self.space_reserve.store(bytes, Ordering::Relaxed);
    }

    /// The reserve as the other executors see it (the engine's direct path).
    pub fn space_reserve_handle(&self) -> Arc<AtomicU64> {
        self.space_reserve.clone()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether writing `need` more bytes would eat into the reserve: the
    /// smaller free space (statvfs f_bavail) of the data directory and the
    /// metadata directory counts.
    pub fn space_low(&self, need: u64) -> bool {
        space_low_at(&self.dir, self.space_reserve.load(Ordering::Relaxed), need)
    }

    /// These extents will never be applied (their batch failed), or are
    /// destaged.
    pub fn forget(&self, extents: &[ExtentId]) {
        let mut log = self.log.borrow_mut();
        let mut unclaimed = self.unclaimed.borrow_mut();
        let mut mem = self.log_mem();
        for e in extents {
            log.forget(*e);
            unclaimed.remove(&e.resolved(self.node_id));
            mem.remove(self.mem_name(*e));
        }
        self.counters.log_memory_bytes.store(mem.stats().bytes, Ordering::Relaxed);
    }

    /// What this node answers a peer's Fetch: the extent from its log, or,
    /// once it has destaged the record that names it, the record's range
    /// as its chunks hold it (see `duet_cache::replica::Message::Have`);
    /// `None` when it has neither.
    pub async fn answer_fetch(&self, extent: ExtentId, range: FetchRange) -> io::Result<Option<Vec<u8>>> {
        if let Some(d) = self.log_read(extent, 0, range.len).await? {
            if d.len() as u64 == range.len {
                return Ok(Some(d.into_vec()));
            }
        }
        if self.destaged_upto.get() >= range.dseq {
            let (d, _) = self.read_chunks(range.file, range.offset, range.len).await?;
            self.counters.fetch_from_chunks.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                origin = extent.origin,
                seq = extent.seq,
                file = range.file,
                "write cache: answered a fetch from the chunk store (the extent is destaged and out of the log)"
            );
            return Ok(Some(d));
        }
        Ok(None)
    }

    /// An extent a queued record names is not in this node's log (it was
    /// down or cut off when the leader pushed it): fetched from a peer and
    /// appended here. Fails (retryably) when no peer has it; never reads
    /// as zeros.
    async fn fetch_into_log(&self, extent: ExtentId, range: FetchRange) -> io::Result<()> {
        let Some(r) = self.replica.get() else {
            return Err(io::Error::other(format!("extent {}:{} is missing from the write log", extent.origin, extent.seq)));
        };
        let data = r.fetch(extent, range).await?;
        self.replica_append(extent, &data).await?;
        // Live until destaged: its record is queued.
        self.unclaimed.borrow_mut().remove(&extent);
        Ok(())
    }

    /// Drops copies of other origins' extents proven unnamed (see
    /// `duet_cache::replica::Unclaimed`); at most about once a second.
    /// What bounds the index of any raft entry that may still commit, as
    /// this node knows it now (`duet_cache::replica::LogView`): its own
    /// last index if it leads; else the larger of its own and the last
    /// index its leader of this term reported in its newest status frame,
    /// as of that frame's arrival. None when it knows no leader or has no
    /// such frame (cut off: its own log may lack the entry that names a
    /// copy it holds).
    fn log_view(&self, raft: &duet_cluster_store::RaftStatus) -> Option<duet_cache::replica::LogView> {
        let now = self.clock_ms();
        if raft.leader {
            return Some(duet_cache::replica::LogView { last_index: raft.last_index, as_of_ms: now });
        }
        if raft.leader_id == 0 {
            return None;
        }
        let (status, at) = self.replica()?.peer_status(raft.leader_id)?;
        if status.term != raft.term {
            return None;
        }
        let age = at.elapsed().as_millis() as u64;
        Some(duet_cache::replica::LogView { last_index: status.last_index?.max(raft.last_index), as_of_ms: now.saturating_sub(age) })
    }

    pub async fn sweep_unclaimed(&self, store: &StoreHandle) -> io::Result<()> {
        if self.unclaimed.borrow().is_empty() {
            return Ok(());
        }
        let QueryAnswer::Raft(raft) = store.query(Query::RaftStatus).await.map_err(ge)? else { return Ok(()) };
        let candidates = self.unclaimed.borrow_mut().step(self.log_view(&raft), raft.applied_index);
        if candidates.is_empty() {
            return Ok(());
        }
        let mut queued = BTreeSet::new();
        let mut after = self.destaged_upto.get();
        loop {
            let QueryAnswer::DataQueue(recs) = store.query(Query::DataQueue { after, limit: 4096 }).await.map_err(ge)? else {
                break;
            };
            let Some(last) = recs.last().map(|(d, _)| *d) else { break };
            for (_, r) in &recs {
                if let Some((_, e, _)) = r.op.logged() {
                    queued.insert(e.resolved(self.node_id));
                }
            }
            after = last;
        }
        let unnamed: Vec<ExtentId> = candidates.into_iter().filter(|e| !queued.contains(e)).collect();
        if !unnamed.is_empty() {
            tracing::info!(extents = unnamed.len(), "write log: dropping copies of extents no entry named");
            self.forget(&unnamed);
            self.release_segments().await;
        }
        Ok(())
    }

    /// Reads `n` bytes at `skip` of the data of `extent`; `None` if the log
    /// no longer holds it.
    async fn log_read(&self, extent: ExtentId, skip: u64, n: u64) -> io::Result<Option<LogBytes>> {
        let (file, pos, len, loc_segment) = {
            let Some(loc) = self.log.borrow().locate(extent) else { return Ok(None) };
            let segs = self.segments.borrow();
            let Some(seg) = segs.get(&loc.segment) else { return Ok(None) };
            (seg.file.clone(), loc.data_pos, loc.len, loc.segment)
        };
        let skip = skip.min(len);
        let n = n.min(len - skip);
        if n == 0 {
            return Ok(Some(LogBytes::Owned(Vec::new())));
        }
        self.fault(FaultPoint::DataRead)?;
        // The log holds the record (located above), so its bytes in
        // memory are the record's.
        let held = self.log_mem().read_shared(self.mem_name(extent), skip, n);
        if let Some((d, r)) = held {
            if r.len() as u64 == n {
                self.counters.log_reads_memory.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(LogBytes::Shared(d, r)));
            }
        }
        self.counters.log_reads_device.fetch_add(1, Ordering::Relaxed);
        let r = file.read_at(pos + skip, n as usize).await.map_err(|e| io::Error::other(format!("write log read: {e}")))?;
        // Released while the read ran: the file may be reused and hold
        // another segment's records by now. A released segment's sequence
        // never comes back, so still present means not released.
        if !self.segments.borrow().contains_key(&loc_segment) {
            return Ok(None);
        }
        Ok(Some(LogBytes::Owned(r.to_vec())))
    }

    /// Releases the log segments the log core releases (no live extent,
    /// not the current one): kept as spares (renamed to `<seq>.spare`, up
    /// to [`SPARE_SEGMENTS`]) or deleted. The rename needs no directory
    /// sync: a crash that undoes it leaves a segment whose extents nothing
    /// needs, released again at open.
    async fn release_segments(&self) {
        let doomed = self.log.borrow().releasable();
        for seq in doomed {
            self.log.borrow_mut().released(seq);
            let Some(seg) = self.segments.borrow_mut().remove(&seq) else { continue };
            if self.spares.borrow().len() < SPARE_SEGMENTS {
                let to = spare_path(&self.dir.join("wal"), seq);
                match std::fs::rename(&seg.path, &to) {
                    Ok(()) => {
                        self.spares.borrow_mut().push((seq, to));
                        continue;
                    }
                    Err(e) => tracing::warn!("cannot keep write-log segment {} as a spare: {e}", seg.path.display()),
                }
            }
            if let Err(e) = std::fs::remove_file(&seg.path) {
                tracing::warn!("cannot delete write-log segment {}: {e}", seg.path.display());
            }
        }
    }

    fn chunk_path(&self, file: NodeId, idx: u64) -> PathBuf {
        self.dir.join("chunks").join(format!("{:02x}", file % 256)).join(format!("{file}.{idx}"))
    }

    /// The name of chunk `idx` of `file` stored compressed.
    fn z_path(&self, file: NodeId, idx: u64) -> PathBuf {
        self.dir.join("chunks").join(format!("{:02x}", file % 256)).join(format!("{file}.{idx}{}", chunkz::SUFFIX))
    }

    /// How chunk `idx` of `file` is stored here. Where a crash left both
    /// names, the compressed one is the chunk (see [`Self::flush_edits`]).
    fn stored(&self, file: NodeId, idx: u64) -> Stored {
        let z = self.z_path(file, idx);
        if std::fs::symlink_metadata(&z).is_ok() {
            return Stored::Z(z);
        }
        let p = self.chunk_path(file, idx);
        if std::fs::symlink_metadata(&p).is_ok() {
            return Stored::Plain(p);
        }
        Stored::None
    }

    /// Removes both names of a chunk (each where present).
    async fn remove_chunk(&self, file: NodeId, idx: u64) -> io::Result<()> {
        self.quiesce_opens().await;
        for p in [self.chunk_path(file, idx), self.z_path(file, idx)] {
            if std::fs::symlink_metadata(&p).is_ok() {
                std::fs::remove_file(&p).map_err(|e| io_err("cannot delete", &p, e))?;
            }
        }
        Ok(())
    }

    /// (file id, index) of a chunk file name: `<file>.<index>` (plain) or
    /// `<file>.<index>.z` (compressed); side names are not chunks.
    fn parse_chunk_name(name: &str) -> Option<(NodeId, u64)> {
        let name = name.strip_suffix(chunkz::SUFFIX).unwrap_or(name);
        let (f, x) = name.split_once('.')?;
        Some((f.parse().ok()?, x.parse().ok()?))
    }

    /// Every chunk present, as (file id, index), for fsck.
    pub fn list_chunks(&self) -> Vec<(NodeId, u64)> {
        let mut out = BTreeSet::new();
        for i in 0..256 {
            let d = self.dir.join("chunks").join(format!("{i:02x}"));
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                if let Some(c) = Self::parse_chunk_name(name) {
                    out.insert(c);
                }
            }
        }
        out.into_iter().collect()
    }

    /// Opens a chunk file for reading (counted in [`Self::opening`]).
    async fn open_chunk_file(&self, path: &Path) -> glommio::Result<DmaFile, ()> {
        let _opening = Opening::new(&self.opening);
        DmaFile::open(path).await
    }

    /// Waits until no chunk file is being opened for a read; the caller
    /// then removes names without awaiting anything in between (one
    /// executor: no open starts meanwhile).
    async fn quiesce_opens(&self) {
        while self.opening.get() > 0 {
            glommio::timer::sleep(std::time::Duration::from_micros(200)).await;
        }
    }

    /// The whole of a file as stored (O_DIRECT, like every chunk read).
    async fn read_whole(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.open_chunk_file(path).await.map_err(|e| io_err("cannot open", path, e))?;
        // The size of the open file, not of the path: glommio's
        // `file_size` stats the path, which the destager may have renamed
        // another file over since the open.
        let size = fd_size(&f).map_err(|e| io_err("cannot stat", path, e))?;
        // A large O_DIRECT read may come back short: read on to the end.
        let mut r = Vec::with_capacity(size as usize);
        while (r.len() as u64) < size {
            let got = f.read_at(r.len() as u64, (size - r.len() as u64) as usize).await;
            let got = got.map_err(|e| io_err("cannot read", path, e))?;
            if got.is_empty() {
                break;
            }
            r.extend_from_slice(&got);
        }
        let _ = f.close().await;
        Ok(r)
    }

    /// Chunk `idx` of `file` for a read. The destager may rename a
    /// rewritten chunk over its name or remove its other format's name
    /// between the look and the open: a name gone by then is looked up
    /// again (the chunk's other name holds the same or later bytes).
    async fn open_for_read(&self, file: NodeId, idx: u64) -> io::Result<ReadSrc> {
        let gone = |p: &Path| std::fs::symlink_metadata(p).is_err();
        let mut tries = 0;
        loop {
            tries += 1;
            match self.stored(file, idx) {
                Stored::None => return Ok(ReadSrc::None),
                Stored::Plain(path) => {
                    self.fault(FaultPoint::DataRead)?;
                    match self.open_chunk_file(&path).await {
                        Ok(f) => return Ok(ReadSrc::Plain(f)),
                        Err(_) if tries < 5 && gone(&path) => continue,
                        Err(e) => return Err(io_err("cannot open", &path, e)),
                    }
                }
                Stored::Z(path) => match self.read_z(&path).await {
                    Ok(d) => return Ok(ReadSrc::Z(d)),
                    Err(_) if tries < 5 && gone(&path) => continue,
                    Err(e) => return Err(e),
                },
            }
        }
    }

    /// The bytes of a compressed chunk. One that does not decode is an
    /// error (logged), never bytes: the read fails, the destager stops.
    async fn read_z(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.fault(FaultPoint::DataRead)?;
        let raw = self.read_whole(path).await?;
        self.counters.chunk_reads.fetch_add(1, Ordering::Relaxed);
        chunkz::decode(&raw).map_err(|e| {
            tracing::error!(path = %path.display(), "compressed chunk does not decode: {e}");
            io::Error::new(io::ErrorKind::InvalidData, format!("compressed chunk {} is damaged: {e}", path.display()))
        })
    }

    /// Bytes `[offset, offset+len)` of a file as the chunk store has them
    /// (zeros where there is no chunk), through the read cache when it is
    /// on (and no read fault is pending: an injected failure must reach
    /// the device path).
    async fn read_chunks(&self, file: NodeId, offset: u64, len: u64) -> io::Result<(Vec<u8>, u64)> {
        let mut out = vec![0u8; len as usize];
        let mut reads = 0;
        let cached = self.cache().capacity() > 0 && self.faults[FaultPoint::DataRead as usize].get() == 0;
        let ahead = if cached && len > 0 { self.cache().read_ahead(file, offset, len) } else { 0 };
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let idx = pos / CHUNK_SIZE;
            let co = pos % CHUNK_SIZE;
            let n = (CHUNK_SIZE - co).min(end - pos);
            let at = (pos - offset) as usize;
            if cached {
                reads += self.read_chunk_cached(file, idx, co, &mut out[at..at + n as usize], ahead).await?;
                pos += n;
                continue;
            }
            // A missing chunk reads as zeros (a hole, or data not destaged yet).
            match self.open_for_read(file, idx).await? {
                ReadSrc::None => {}
                ReadSrc::Plain(f) => {
                    let r = f.read_at(co, n as usize).await.map_err(|e| io_err("cannot read", &self.chunk_path(file, idx), e))?;
                    out[at..at + r.len()].copy_from_slice(&r);
                    self.counters.chunk_reads.fetch_add(1, Ordering::Relaxed);
                    reads += 1;
                    let _ = f.close().await;
                }
                ReadSrc::Z(d) => {
                    // Past the chunk's logical end: zeros (as past a plain file's end).
                    let have = d.len().saturating_sub(co as usize).min(n as usize);
                    if have > 0 {
                        out[at..at + have].copy_from_slice(&d[co as usize..co as usize + have]);
                    }
                    reads += 1;
                }
            }
            pos += n;
        }
        if cached {
            let st = self.cache().stats();
            self.counters.read_cache_hits.store(st.hits, Ordering::Relaxed);
            self.counters.read_cache_misses.store(st.misses, Ordering::Relaxed);
            self.counters.read_cache_bytes.store(st.bytes, Ordering::Relaxed);
        }
        Ok((out, reads))
    }

    /// `dst.len()` bytes at `co` of chunk `idx` of `file`, from cached
    /// blocks where it can; the missing blocks (and `ahead` bytes more,
    /// within the chunk) in one device read, kept in the cache unless the
    /// destager changed the file meanwhile. Returns the device reads made.
    async fn read_chunk_cached(&self, file: NodeId, idx: u64, co: u64, dst: &mut [u8], ahead: u64) -> io::Result<u64> {
        use duet_cache::read::BLOCK;
        let n = dst.len() as u64;
        let (b0, b1) = (co / BLOCK, (co + n - 1) / BLOCK);
        // Copies the part of block `b` (bytes `data`, zeros past them) that `dst` wants.
        let place = |dst: &mut [u8], b: u64, data: &[u8]| {
            let from = (b * BLOCK).max(co);
            let to = ((b + 1) * BLOCK).min(co + n);
            let src_at = (from - b * BLOCK) as usize;
            let dst_at = (from - co) as usize;
            let len = (to - from) as usize;
            let have = data.len().saturating_sub(src_at).min(len);
            if have > 0 {
                dst[dst_at..dst_at + have].copy_from_slice(&data[src_at..src_at + have]);
            }
            dst[dst_at + have..dst_at + len].fill(0);
        };
        let mut missing = Vec::new();
        {
            let mut cache = self.cache();
            for b in b0..=b1 {
                match cache.get((file, idx, b)) {
                    Some(data) => place(dst, b, &data),
                    None => missing.push(b),
                }
            }
        }
        let (Some(&m0), Some(&m1)) = (missing.first(), missing.last()) else { return Ok(0) };
        let ticket = self.cache().begin();
        let cached_file = self.read_files.borrow().get(&(file, idx)).cloned();
        let f = match cached_file {
            Some(f) => f,
            None => {
                let f = match self.open_for_read(file, idx).await {
                    Ok(ReadSrc::Plain(f)) => f,
                    Ok(ReadSrc::None) => {
                        // A hole, or data not destaged yet: zeros, and nothing kept.
                        for &b in &missing {
                            place(dst, b, &[]);
                        }
                        return Ok(0);
                    }
                    Err(e) => return Err(e),
                    Ok(ReadSrc::Z(d)) => {
                        // Decoded whole: every block of the chunk is kept
                        // (the rest of the chunk is read ahead for free).
                        let block = |b: u64| {
                            let s = ((b * BLOCK) as usize).min(d.len());
                            let e = (((b + 1) * BLOCK) as usize).min(d.len());
                            &d[s..e]
                        };
                        for &b in &missing {
                            place(dst, b, block(b));
                        }
                        let mut cache = self.cache();
                        for b in 0..(d.len() as u64).div_ceil(BLOCK) {
                            cache.insert(ticket, (file, idx, b), block(b));
                        }
                        return Ok(1);
                    }
                };
                let f = Rc::new(f);
                // Kept only if the destager did not touch the file meanwhile
                // (an unshare renames a new inode over the path).
                if self.cache().still_valid_chunk(ticket, file, idx) {
                    let mut open = self.read_files.borrow_mut();
                    if open.len() >= READ_FILES_MAX {
                        open.clear();
                    }
                    open.insert((file, idx), f.clone());
                }
                f
            }
        };
        let end_block = self.cache().ahead_end(file, idx, m1, ahead, CHUNK_SIZE.div_ceil(BLOCK));
        let span_end = end_block * BLOCK;
        self.fault(FaultPoint::DataRead)?;
        self.cache().start_reading(file, idx, m0, end_block);
        let r = f.read_at(m0 * BLOCK, (span_end - m0 * BLOCK) as usize).await;
        self.cache().done_reading(file, idx, m0, end_block);
        let r = r.map_err(|e| io_err("cannot read", &self.chunk_path(file, idx), e))?;
        self.counters.chunk_reads.fetch_add(1, Ordering::Relaxed);
        let mut cache = self.cache();
        let mut b = m0;
        while b * BLOCK < span_end {
            let s = (((b - m0) * BLOCK) as usize).min(r.len());
            let e = (((b - m0 + 1) * BLOCK) as usize).min(r.len());
            let data = &r[s..e];
            if b <= m1 && b >= b0 {
                place(dst, b, data);
            }
            cache.insert(ticket, (file, idx, b), data);
            b += 1;
        }
        Ok(1)
    }

    /// Drops `file`'s cached blocks and refuses blocks read before now
    /// (the destager calls it before and after changing a file's chunks).
    fn forget_cached(&self, file: NodeId) {
        self.cache().forget_file(file);
        self.read_files.borrow_mut().retain(|(f, _), _| *f != file);
    }

    /// [`Self::forget_cached`] for what a round's records changed
    /// ([`Round::take_bases`] noted it): whole files, whole chunks, and
    /// single 64 KiB blocks.
    fn forget_changed(&self, round: &Round) {
        for &file in &round.seen_files {
            self.forget_cached(file);
        }
        let mut cache = self.cache();
        let mut open = self.read_files.borrow_mut();
        for &(file, idx) in &round.seen_chunks {
            cache.forget_chunk(file, idx);
            open.remove(&(file, idx));
        }
        for &(file, idx, b) in &round.seen {
            cache.forget_blocks(file, idx, b, b);
            open.remove(&(file, idx));
        }
    }

    /// Before a record changes `chunks` of `file` (`None`: the whole
    /// file): reads of them begun before now keep nothing they saw. Blocks
    /// a record changes in place stay cached until the round's end (a read
    /// lays the still-queued record over them, see [`lay_over`]); a change
    /// of the whole file forgets them at once.
    fn fence_scope(&self, file: NodeId, chunks: Option<&BTreeMap<u64, (u64, u64)>>) {
        match chunks {
            None => self.forget_cached(file),
            Some(chunks) => {
                let mut cache = self.cache();
                let mut open = self.read_files.borrow_mut();
                for &idx in chunks.keys() {
                    cache.fence_chunk(file, idx);
                    open.remove(&(file, idx));
                }
            }
        }
    }

    async fn open_chunk(
        &self,
        open: &mut HashMap<(NodeId, u64), Rc<DmaFile>>,
        file: NodeId,
        idx: u64,
    ) -> io::Result<Rc<DmaFile>> {
        if let Some(f) = open.get(&(file, idx)) {
            return Ok(f.clone());
        }
        let path = self.chunk_path(file, idx);
        let f = OpenOptions::new().read(true).write(true).create(true).dma_open(&path).await
            .map_err(|e| io_err("cannot open", &path, e))?;
        let f = Rc::new(f);
        open.insert((file, idx), f.clone());
        Ok(f)
    }

    /// Whether this round changes chunk `idx` of `file` by rewriting it
    /// whole ([`Round::edits`]) rather than in place: a compressed file's
    /// chunks, and a chunk stored compressed whatever its file.
    fn rewrites(&self, round: &Round, file: NodeId, idx: u64) -> bool {
        round.edits.contains_key(&(file, idx))
            || round.compressed.contains(&file)
            || std::fs::symlink_metadata(self.z_path(file, idx)).is_ok()
    }

    /// The bytes of chunk `idx` of `file` this round rewrites, read from
    /// the chunk store the first time (empty where there is no chunk).
    async fn edit<'r>(&self, round: &'r mut Round, file: NodeId, idx: u64) -> io::Result<&'r mut Vec<u8>> {
        if !round.edits.contains_key(&(file, idx)) {
            let bytes = match self.stored(file, idx) {
                Stored::None => Vec::new(),
                Stored::Z(path) => self.read_z(&path).await?,
                Stored::Plain(path) => {
                    // Written in place earlier in this round: those bytes
                    // are in the file (O_DIRECT); the rewrite replaces it.
                    round.open.remove(&(file, idx));
                    self.fault(FaultPoint::DataRead)?;
                    let b = self.read_whole(&path).await?;
                    self.counters.chunk_reads.fetch_add(1, Ordering::Relaxed);
                    b
                }
            };
            round.edits.insert((file, idx), bytes);
        }
        Ok(round.edits.get_mut(&(file, idx)).expect("inserted above"))
    }

    /// Writes each chunk this round rewrote ([`Round::edits`]): compressed
    /// when its file is (and compression saves a block), plain otherwise;
    /// under a side name (`.new`), synced, renamed over the chunk's name
    /// for that format, and the other format's name removed. A crash
    /// between the rename and the removal leaves both names: readers take
    /// the compressed one, and the round (not yet recorded as destaged) is
    /// replayed over it, which writes the chunk again and removes the
    /// other. The directories are synced by the caller before the round is
    /// recorded.
    async fn flush_edits(&self, round: &mut Round) -> io::Result<BTreeSet<NodeId>> {
        let mut files = BTreeSet::new();
        for ((file, idx), data) in std::mem::take(&mut round.edits) {
            files.insert(file);
            let z = if round.compressed.contains(&file) { chunkz::encode(&data) } else { None };
            let (bytes, path, other) = match z {
                Some(z) => (z, self.z_path(file, idx), self.chunk_path(file, idx)),
                None => {
                    let mut d = data.clone();
                    d.resize(align_up(d.len() as u64) as usize, 0);
                    (d, self.chunk_path(file, idx), self.z_path(file, idx))
                }
            };
            let side = self.side_path(file, idx, "new");
            let _ = std::fs::remove_file(&side);
            self.fault(FaultPoint::ChunkWrite)?;
            let f = OpenOptions::new().write(true).create(true).truncate(true).dma_open(&side).await
                .map_err(|e| io_err("cannot create", &side, e))?;
            // An O_DIRECT write may be short: write on until all is out.
            let mut done = 0usize;
            while done < bytes.len() {
                let mut buf = f.alloc_dma_buffer(bytes.len() - done);
                buf.as_bytes_mut().copy_from_slice(&bytes[done..]);
                let n = f.write_at(buf, done as u64).await.map_err(|e| io::Error::other(format!("chunk write: {e}")))?;
                if n == 0 || n % ALIGN as usize != 0 && done + n < bytes.len() {
                    return Err(io::Error::other(format!("chunk write: {n} of {} bytes written to {}", bytes.len() - done, side.display())));
                }
                done += n;
            }
            self.fault(FaultPoint::ChunkSync)?;
            f.fdatasync().await.map_err(|e| io::Error::other(format!("chunk fdatasync: {e}")))?;
            let _ = f.close().await;
            self.counters.chunk_writes.fetch_add(1, Ordering::Relaxed);
            self.counters.chunk_fsyncs.fetch_add(1, Ordering::Relaxed);
            self.quiesce_opens().await;
            std::fs::rename(&side, &path).map_err(|e| io_err("cannot rename", &side, e))?;
            if std::fs::symlink_metadata(&other).is_ok() {
                std::fs::remove_file(&other).map_err(|e| io_err("cannot delete", &other, e))?;
            }
            // The chunk's bytes as a read would find them, for the cache.
            round.fill.retain(|&(f, i, _), _| (f, i) != (file, idx));
            if round.fill_max > 0 {
                use duet_cache::read::BLOCK;
                for b in 0..(data.len() as u64).div_ceil(BLOCK) {
                    if round.fill.len() >= round.fill_max {
                        break;
                    }
                    let s = (b * BLOCK) as usize;
                    let e = (((b + 1) * BLOCK) as usize).min(data.len());
                    round.fill.insert((file, idx, b), data[s..e].to_vec());
                }
            }
        }
        Ok(files)
    }

    /// Writes the round's pending blocks ([`Round::pending`]) into their
    /// chunks: each run of adjacent blocks of one chunk is one O_DIRECT
    /// write, and all of them are in flight together. Synced with the rest
    /// of the round's chunks at its end.
    async fn flush_pending(&self, round: &mut Round) -> io::Result<()> {
        if round.pending.is_empty() {
            return Ok(());
        }
        round.pending_bytes = 0;
        // Runs of consecutive blocks of one chunk, each copied once, into
        // the buffer its write takes.
        let mut runs: Vec<(NodeId, u64, u64, Vec<Vec<u8>>)> = Vec::new();
        for ((file, idx, blk), b) in std::mem::take(&mut round.pending) {
            assert_eq!(b.len() as u64, ALIGN, "a pending block is one whole block");
            match runs.last_mut() {
                Some((f, i, first, blocks)) if *f == file && *i == idx && *first + blocks.len() as u64 == blk => blocks.push(b),
                _ => runs.push((file, idx, blk, vec![b])),
            }
        }
        let mut writes = Vec::with_capacity(runs.len());
        for (file, idx, blk, blocks) in runs {
            let f = self.open_chunk(&mut round.open, file, idx).await?;
            self.fault(FaultPoint::ChunkWrite)?;
            let want = blocks.len() * ALIGN as usize;
            let mut buf = f.alloc_dma_buffer(want);
            for (to, b) in buf.as_bytes_mut().chunks_exact_mut(ALIGN as usize).zip(&blocks) {
                to.copy_from_slice(b);
            }
            drop(blocks);
            writes.push(glommio::spawn_local(async move {
                let wrote = f.write_at(buf, blk * ALIGN).await.map_err(|e| io::Error::other(format!("chunk write: {e}")))?;
                if wrote != want {
                    // Never seen for these sizes; a short write must not be
                    // taken for a whole one (the round fails and is retried).
                    return Err(io::Error::other(format!("chunk write: {wrote} of {want} bytes written")));
                }
                Ok(())
            }));
        }
        for w in writes {
            w.await?;
            self.counters.chunk_writes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Writes `data` at `offset` of a file's chunks: in place
    /// (read-modify-write of partial blocks, held in the round's pending
    /// blocks), or into the round's copy of a chunk it rewrites whole.
    async fn write_chunks(&self, round: &mut Round, file: NodeId, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut pos = offset;
        let end = offset + data.len() as u64;
        while pos < end {
            let idx = pos / CHUNK_SIZE;
            let co = pos % CHUNK_SIZE;
            let n = (CHUNK_SIZE - co).min(end - pos);
            let src = (pos - offset) as usize;
            if self.rewrites(round, file, idx) {
                // The rewrite reads the chunk as it is on disk.
                self.flush_pending(round).await?;
                let e = self.edit(round, file, idx).await?;
                // As long as the plain file would be: to the end of the
                // last block written.
                let need = (align_up(co + n).min(CHUNK_SIZE)) as usize;
                if e.len() < need {
                    e.resize(need, 0);
                }
                e[co as usize..(co + n) as usize].copy_from_slice(&data[src..src + n as usize]);
                pos += n;
                continue;
            }
            // Into the round's pending blocks; a block the write covers in
            // part starts as the chunk holds it (or as an earlier write
            // of this round left it).
            let mut size = None;
            for blk in co / ALIGN..align_up(co + n) / ALIGN {
                let (bs, be) = (blk * ALIGN, (blk + 1) * ALIGN);
                let (ws, we) = (co.max(bs), (co + n).min(be));
                let from = src + (ws - co) as usize;
                if !round.pending.contains_key(&(file, idx, blk)) {
                    if ws == bs && we == be {
                        // Wholly written: its bytes are the write's.
                        round.pending.insert((file, idx, blk), data[from..from + ALIGN as usize].to_vec());
                        round.pending_bytes += ALIGN as usize;
                        continue;
                    }
                    let mut b = vec![0u8; ALIGN as usize];
                    if ws != bs || we != be {
                        let f = self.open_chunk(&mut round.open, file, idx).await?;
                        let sz = match size {
                            Some(sz) => sz,
                            None => *size.insert(f.file_size().await.map_err(ge)?),
                        };
                        if bs < sz {
                            let old = f.read_at_aligned(bs, ALIGN as usize).await.map_err(ge)?;
                            let m = old.len().min(b.len());
                            b[..m].copy_from_slice(&old[..m]);
                        }
                    }
                    round.pending.insert((file, idx, blk), b);
                    round.pending_bytes += ALIGN as usize;
                }
                let b = round.pending.get_mut(&(file, idx, blk)).expect("inserted above");
                b[(ws - bs) as usize..(we - bs) as usize].copy_from_slice(&data[from..from + (we - ws) as usize]);
            }
            round.keep_written(file, idx, co, &data[src..src + n as usize]);
            if round.pending_bytes >= PENDING_MAX {
                self.flush_pending(round).await?;
            }
            pos += n;
        }
        Ok(())
    }

    /// Applies a truncation to `size` to a file's chunks.
    async fn truncate_chunks(&self, round: &mut Round, file: NodeId, size: u64) -> io::Result<()> {
        let keep = size.div_ceil(CHUNK_SIZE);
        for (f, idx) in self.chunks_of(file) {
            if idx >= keep {
                round.open.remove(&(f, idx));
                self.remove_chunk(f, idx).await?;
            }
        }
        round.edits.retain(|&(f, idx), _| f != file || idx < keep);
        let co = size % CHUNK_SIZE;
        if co != 0 {
            let idx = size / CHUNK_SIZE;
            if round.edits.contains_key(&(file, idx)) || !matches!(self.stored(file, idx), Stored::None) {
                if self.rewrites(round, file, idx) {
                    let e = self.edit(round, file, idx).await?;
                    if e.len() as u64 > co {
                        // Zero the tail of the last block, then cut.
                        e.truncate(co as usize);
                        e.resize(align_up(co) as usize, 0);
                    }
                    return Ok(());
                }
                let f = self.open_chunk(&mut round.open, file, idx).await?;
                let cur = f.file_size().await.map_err(ge)?;
                if cur > co {
                    // Zero the tail of the last block, then cut the file.
                    let a0 = co / ALIGN * ALIGN;
                    let mut buf = f.alloc_dma_buffer(ALIGN as usize);
                    let old = f.read_at_aligned(a0, ALIGN as usize).await.map_err(ge)?;
                    let b = buf.as_bytes_mut();
                    b.fill(0);
                    let keep_n = (co - a0) as usize;
                    b[..keep_n.min(old.len())].copy_from_slice(&old[..keep_n.min(old.len())]);
                    f.write_at(buf, a0).await.map_err(ge)?;
                    f.truncate(align_up(co)).await.map_err(ge)?;
                    self.counters.chunk_writes.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Zeros `[offset, offset+len)` of a file's chunks: chunks wholly
    /// inside the range are deleted (holes read as zeros), the partial
    /// ones at its ends are overwritten with zeros.
    async fn zero_chunks(&self, round: &mut Round, file: NodeId, offset: u64, len: u64) -> io::Result<()> {
        let end = offset.saturating_add(len);
        let mut pos = offset;
        while pos < end {
            let idx = pos / CHUNK_SIZE;
            let co = pos % CHUNK_SIZE;
            let n = (CHUNK_SIZE - co).min(end - pos);
            let pending = round.edits.contains_key(&(file, idx));
            if pending || !matches!(self.stored(file, idx), Stored::None) {
                if n == CHUNK_SIZE {
                    round.open.remove(&(file, idx));
                    round.edits.remove(&(file, idx));
                    self.remove_chunk(file, idx).await?;
                    // The removal must be durable before `Destaged` drops the
                    // record, or a crash could bring the old bytes back.
                    self.sync_chunk_dir(file)?;
                } else {
                    self.write_chunks(round, file, pos, &vec![0u8; n as usize]).await?;
                }
            }
            pos += n;
        }
        Ok(())
    }

    /// Every chunk of `file` present here (either format), by index.
    fn chunks_of(&self, file: NodeId) -> Vec<(NodeId, u64)> {
        let d = self.dir.join("chunks").join(format!("{:02x}", file % 256));
        let Ok(rd) = std::fs::read_dir(&d) else { return Vec::new() };
        let found: BTreeSet<(NodeId, u64)> = rd
            .flatten()
            .filter_map(|e| Self::parse_chunk_name(&e.file_name().into_string().ok()?))
            .filter(|&(f, _)| f == file)
            .collect();
        found.into_iter().collect()
    }

    /// Fills in a read whose data is in chunks: the chunk store's bytes with
    /// the queued records laid over them in order.
    /// Returns the bytes and the number of chunk reads it took.
    ///
    /// A clone (`CloneFrom`) among the records is not laid over: the read
    /// waits until the destager has applied it (it reads the source's
    /// chunks as they were when it was queued), then reads the chunks and
    /// lays over only the records after it.
    pub async fn read(&self, plan: &ReadPlan) -> io::Result<(Vec<u8>, u64)> {
        let (offset, len) = (plan.offset, plan.len);
        if !plan.overlay.is_empty() {
            self.reads.queued_reads.fetch_add(1, Ordering::Relaxed);
        }
        let barrier = plan.overlay.iter().filter(|(_, r)| r.op.cross_file()).map(|(d, _)| *d).max();
        if let Some(d) = barrier {
            self.wait_destaged(d).await?;
        }
        let end = offset + len;
        // The chunks are read only where no queued record overwrites the
        // range (data just written and not destaged yet is laid over
        // whole).
        let gaps = overlay_gaps(&plan.overlay, offset, end);
        let (mut buf, mut reads) = if gaps == [(offset, end)] {
            self.read_chunks(plan.file, offset, len).await?
        } else {
            let mut buf = vec![0u8; len as usize];
            let mut reads = 0;
            for (from, to) in gaps {
                let (d, r) = self.read_chunks(plan.file, from, to - from).await?;
                reads += r;
                patch(&mut buf, offset, from, &d);
            }
            (buf, reads)
        };
        for (dseq, rec) in &plan.overlay {
            if barrier.is_some_and(|b| *dseq <= b) {
                continue; // in the chunks already
            }
            if lay_over(&mut buf, offset, &rec.op) {
                continue;
            }
            match &rec.op {
                // A clone is at or before the barrier, so in the chunks
                // already (skipped above).
                DataOp::CloneFrom { .. } => {}
                DataOp::WriteLogged { .. } | DataOp::WriteExtent { .. } => {
                    let Some((o, extent, l)) = rec.op.logged() else { continue };
                    let from = offset.max(o);
                    let to = end.min(o + l);
                    if from < to {
                        let mut found = self.log_read(extent, from - o, to - from).await?;
                        if found.is_none() && self.replica.get().is_some() && *dseq > self.destaged_upto.get() {
                            // Not destaged here and not in this log: a copy
                            // this node missed. Fetched, or the read fails
                            // (retryably), never zeros.
                            let range = FetchRange { file: plan.file, offset: o, len: l, dseq: *dseq };
                            self.fetch_into_log(extent, range).await?;
                            found = self.log_read(extent, from - o, to - from).await?;
                        }
                        match found {
                            Some(d) => {
                                reads += 1;
                                patch(&mut buf, offset, from, &d);
                            }
                            // Gone from the log: the destager wrote it into the
                            // chunks (synced before the log record is dropped),
                            // possibly after `buf` was read from them. Records
                            // destage in order, so the chunks now hold this
                            // record and every earlier one for the range.
                            None => {
                                let (d, r) = self.read_chunks(plan.file, from, to - from).await?;
                                reads += r;
                                patch(&mut buf, offset, from, &d);
                            }
                        }
                    }
                }
                _ => unreachable!("laid over in memory above"),
            }
        }
        Ok((buf, reads))
    }

    /// Waits until this node's destager has applied every record up to
    /// `dseq` (a read over a clone). The commit that queued the clone woke
    /// the destager (its idle timer backs off to 1 s, so on a node whose
    /// queue fills by replication alone this can wait that long); one that cannot
    /// make progress fails the read after a minute (retryably), never
    /// gives wrong bytes.
    async fn wait_destaged(&self, dseq: u64) -> io::Result<()> {
        let started = std::time::Instant::now();
        while self.destaged_upto.get() < dseq {
            if started.elapsed() > std::time::Duration::from_secs(60) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("data record {dseq} (a clone) is not destaged after 60 s"),
                ));
            }
            glommio::timer::sleep(std::time::Duration::from_millis(2)).await;
        }
        Ok(())
    }

    fn side_path(&self, file: NodeId, idx: u64, what: &str) -> PathBuf {
        self.dir.join("chunks").join(format!("{:02x}", file % 256)).join(format!("{file}.{idx}.{what}"))
    }

    /// Gives chunk `idx` of `file` its own inode when it shares one with
    /// other chunk paths (hard links: how this node stores a shared chunk):
    /// a copy, synced, renamed over the path. Content-preserving, so a
    /// replay after a crash changes nothing (a half-made copy under the
    /// side name is made again).
    /// A chunk this round rewrites whole, or stored compressed, is never
    /// changed in place (its rewrite is a new inode): nothing to do.
    async fn unshare_chunk(&self, round: &mut Round, file: NodeId, idx: u64) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        if round.edits.contains_key(&(file, idx)) {
            return Ok(());
        }
        let Stored::Plain(path) = self.stored(file, idx) else { return Ok(()) };
        let Ok(meta) = std::fs::metadata(&path) else { return Ok(()) };
        if meta.nlink() <= 1 {
            return Ok(());
        }
        if let Some(f) = round.open.remove(&(file, idx)) {
            f.fdatasync().await.map_err(|e| io::Error::other(format!("chunk fdatasync: {e}")))?;
        }
        self.fault(FaultPoint::ChunkWrite)?;
        let side = self.side_path(file, idx, "cow");
        let _ = std::fs::remove_file(&side);
        std::fs::copy(&path, &side).map_err(|e| io_err("cannot copy", &path, e))?;
        std::fs::File::open(&side).and_then(|f| f.sync_all()).map_err(|e| io_err("cannot sync", &side, e))?;
        std::fs::rename(&side, &path).map_err(|e| io_err("cannot rename", &side, e))?;
        self.counters.chunk_writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Applies a `CloneFrom` record to `file`: reads every copied range of
    /// `src` first, links each shared source chunk under a side name, then
    /// renames the links over the destination chunks (a source hole removes
    /// the destination chunk), then writes the copied bytes (into chunks of
    /// the destination's own). Runs in a destage round of its own, so the
    /// source's chunks hold exactly the records before it, also on a replay.
    async fn clone_from(
        &self,
        round: &mut Round,
        file: NodeId,
        src: NodeId,
        share: &[(u64, u64)],
        copy: &[(u64, u64, u64)],
    ) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(copy.len());
        for &(so, _, n) in copy {
            bytes.push(self.read_chunks(src, so, n).await?.0);
        }
        // A shared chunk keeps its format (the link is the same inode);
        // `.z` of the link says which name it takes.
        let mut links = Vec::with_capacity(share.len());
        for &(i, j) in share {
            let (from, z) = match self.stored(src, i) {
                Stored::None => {
                    links.push(None);
                    continue;
                }
                Stored::Plain(p) => (p, false),
                Stored::Z(p) => (p, true),
            };
            let side = self.side_path(file, j, "lnk");
            let _ = std::fs::remove_file(&side);
            self.fault(FaultPoint::ChunkWrite)?;
            std::fs::hard_link(&from, &side).map_err(|e| io_err("cannot link", &from, e))?;
            links.push(Some((side, z)));
        }
        for (&(_, j), side) in share.iter().zip(links) {
            round.open.remove(&(file, j));
            round.edits.remove(&(file, j));
            let (plain, zname) = (self.chunk_path(file, j), self.z_path(file, j));
            match side {
                Some((side, z)) => {
                    let (to, other) = if z { (zname, plain) } else { (plain, zname) };
                    self.quiesce_opens().await;
                    std::fs::rename(&side, &to).map_err(|e| io_err("cannot rename", &side, e))?;
                    // On a replay the destination may be that inode already:
                    // rename(2) then leaves both names, and the side one
                    // would keep the chunk alive after its last real name.
                    if std::fs::symlink_metadata(&side).is_ok() {
                        std::fs::remove_file(&side).map_err(|e| io_err("cannot delete", &side, e))?;
                    }
                    if std::fs::symlink_metadata(&other).is_ok() {
                        std::fs::remove_file(&other).map_err(|e| io_err("cannot delete", &other, e))?;
                    }
                }
                None => self.remove_chunk(file, j).await?,
            }
        }
        for (&(_, at, n), b) in copy.iter().zip(bytes) {
            if n == 0 {
                continue;
            }
            for idx in at / CHUNK_SIZE..=(at + n - 1) / CHUNK_SIZE {
                self.unshare_chunk(round, file, idx).await?;
            }
            self.write_chunks(round, file, at, &b).await?;
        }
        self.sync_chunk_dir(file)
    }

    /// Makes the renames, links and deletions in a file's chunk directory
    /// durable (before the records that made them are dropped).
    fn sync_chunk_dir(&self, file: NodeId) -> io::Result<()> {
        let dir = self.dir.join("chunks").join(format!("{:02x}", file % 256));
        std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| io_err("cannot sync", &dir, e))
    }

    /// One destage round: applies up to [`DESTAGE_BATCH`] queued records to
    /// the chunk store, syncs the chunks, commits. Returns how many records
    /// it applied, and whether more records were queued behind them (a
    /// full round, or one cut short of a clone). A clone record
    /// (`DataOp::cross_file`) is a round of its
    /// own: the round before it stops short of it, so that every earlier
    /// record is destaged (and committed) when it reads its source, and a
    /// replay after a crash reads the same source bytes.
    pub async fn destage_once(&self, store: &StoreHandle) -> io::Result<(usize, bool)> {
        let QueryAnswer::DataQueue(recs) = store
            .query(Query::DataQueue { after: self.destaged_upto.get(), limit: DESTAGE_BATCH })
            .await
            .map_err(ge)?
        else {
            return Ok((0, false));
        };
        let mut recs = recs;
        let queued = recs.len();
        match recs.iter().position(|(_, r)| r.op.cross_file()) {
            Some(0) => recs.truncate(1),
            Some(p) => recs.truncate(p),
            None => {}
        }
        let more = queued == DESTAGE_BATCH || recs.len() < queued;
        let Some(upto) = recs.last().map(|(d, _)| *d) else { return Ok((0, false)) };
        let mut round = Round::default();
        if self.cache().capacity() > 0 && self.faults[FaultPoint::DataRead as usize].get() == 0 {
            round.fill_max = FILL_BLOCKS_MAX;
        }
        // Which of the round's files are compressed now: their chunks are
        // written compressed (what a file's attribute says when its
        // records are destaged; `Recompress` converts the rest).
        let files: BTreeSet<NodeId> =
            recs.iter().filter(|(_, r)| !matches!(r.op, DataOp::Reclaim)).map(|(_, r)| r.file).collect();
        if !files.is_empty() {
            match store.query(Query::Compressed(files.into_iter().collect())).await.map_err(ge)? {
                QueryAnswer::Nodes(ids) => round.compressed = ids.into_iter().collect(),
                _ => return Err(io::Error::other("the store answered Compressed with something else")),
            }
        }
        let mut reclaimed = Vec::new();
        let mut extents = Vec::new();
        for (dseq, rec) in &recs {
            if rec.op.logged().is_none() && !matches!(rec.op, DataOp::WriteInline { .. }) {
                // Anything but a write works on the chunk files as they
                // are: the writes before it go out first.
                self.flush_pending(&mut round).await?;
            }
            let scope = record_chunks(&rec.op);
            let write = matches!(rec.op, DataOp::WriteInline { .. } | DataOp::WriteLogged { .. } | DataOp::WriteExtent { .. });
            round.take_bases(&self.cache(), rec.file, scope.as_ref(), write);
            self.fence_scope(rec.file, scope.as_ref());
            match &rec.op {
                DataOp::WriteInline { offset, data } => self.write_chunks(&mut round, rec.file, *offset, data).await?,
                DataOp::WriteLogged { .. } | DataOp::WriteExtent { .. } => {
                    let Some((offset, extent, len)) = rec.op.logged() else { continue };
                    let mut found = self.log_read(extent, 0, len).await?;
                    if found.is_none() && self.replica.get().is_some() {
                        // A copy this node never got: fetched before it is
                        // destaged, never skipped (the round fails and is
                        // retried while no peer has it).
                        let range = FetchRange { file: rec.file, offset, len, dseq: *dseq };
                        if let Err(e) = self.fetch_into_log(extent, range).await {
                            tracing::error!(
                                dseq,
                                origin = extent.origin,
                                seq = extent.seq,
                                file = rec.file,
                                "queued write's log extent is missing here and no peer sent it; destage waits: {e}"
                            );
                            return Err(e);
                        }
                        found = self.log_read(extent, 0, len).await?;
                    }
                    match found {
                        Some(d) => self.write_chunks(&mut round, rec.file, offset, &d).await?,
                        None => tracing::error!(
                            dseq,
                            origin = extent.origin,
                            seq = extent.seq,
                            file = rec.file,
                            "queued write's log extent is missing"
                        ),
                    }
                    extents.push(extent);
                }
                DataOp::Truncate { size } => {
                    round.drop_fill(rec.file);
                    self.truncate_chunks(&mut round, rec.file, *size).await?
                }
                DataOp::Zero { offset, len } => {
                    round.drop_fill(rec.file);
                    self.zero_chunks(&mut round, rec.file, *offset, *len).await?
                }
                DataOp::Unshare { chunks } => {
                    for &idx in chunks {
                        self.unshare_chunk(&mut round, rec.file, idx).await?;
                    }
                    self.sync_chunk_dir(rec.file)?;
                }
                DataOp::CloneFrom { src, share, copy } => {
                    round.drop_fill(rec.file);
                    self.clone_from(&mut round, rec.file, *src, share, copy).await?
                }
                DataOp::Recompress => {
                    round.drop_fill(rec.file);
                    // Every chunk not in the format the file's attribute
                    // asks for is rewritten (content-preserving).
                    let want_z = round.compressed.contains(&rec.file);
                    for (f, idx) in self.chunks_of(rec.file) {
                        let is_z = matches!(self.stored(f, idx), Stored::Z(_));
                        if is_z != want_z {
                            self.edit(&mut round, f, idx).await?;
                        }
                    }
                }
                DataOp::Reclaim => {
                    round.drop_fill(rec.file);
                    round.open.retain(|(f, _), _| *f != rec.file);
                    round.edits.retain(|(f, _), _| *f != rec.file);
                    for (f, idx) in self.chunks_of(rec.file) {
                        self.remove_chunk(f, idx).await?;
                    }
                    reclaimed.push(rec.file);
                }
            }
        }
        self.flush_pending(&mut round).await?;
        for file in self.flush_edits(&mut round).await? {
            self.sync_chunk_dir(file)?;
        }
        // The chunks' syncs go to the ring together (one journal commit
        // can carry them all), not one after another.
        let mut syncs = Vec::with_capacity(round.open.len());
        for (_, f) in round.open.drain() {
            self.fault(FaultPoint::ChunkSync)?;
            syncs.push(glommio::spawn_local(async move {
                f.fdatasync().await.map_err(|e| io::Error::other(format!("chunk fdatasync: {e}")))
            }));
        }
        for sync in syncs {
            sync.await?;
            self.counters.chunk_fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        // Reads that began while the chunks changed keep nothing they saw;
        // this is before the log records go, so a read that then finds its
        // record gone and re-reads the chunks never meets an old block.
        // Exactly the blocks the round changed: a cached block between two
        // written ones is the chunk as it still is, and the next round
        // lays its writes on it.
        self.forget_changed(&round);
        // What this round wrote, as the chunks now hold it: a file just
        // written then reads from memory.
        if !round.fill.is_empty() {
            let mut cache = self.cache();
            let ticket = cache.begin();
            for ((f, i, b), d) in std::mem::take(&mut round.fill) {
                cache.insert(ticket, (f, i, b), &d);
            }
        }
        // Node-local progress: each node destages into its own chunks.
        store.destaged(upto, reclaimed).await.map_err(ge)?;
        self.destaged_upto.set(upto);
        self.counters.destaged_records.fetch_add(recs.len() as u64, Ordering::Relaxed);
        self.forget(&extents);
        self.release_segments().await;
        Ok((recs.len(), more))
    }

    /// Extents still needed (for tests and status).
    pub fn live_records(&self) -> usize {
        self.log.borrow().live_len()
    }
}

/// Lays a queued record that needs no device over `buf` (the bytes at
/// `offset` of its file): a write carried in the entry, a truncation, a
/// reclaim, zeroing; records that change no byte. False for a logged write
/// (its bytes are in the write log) and a clone (it waits for the
/// destager): those are the caller's.
fn lay_over(buf: &mut [u8], offset: u64, op: &DataOp) -> bool {
    let end = offset + buf.len() as u64;
    match op {
        DataOp::Unshare { .. } | DataOp::Recompress => {}
        DataOp::WriteInline { offset: o, data } => patch(buf, offset, *o, data),
        DataOp::Truncate { size } => cut(buf, offset, *size),
        DataOp::Reclaim => buf.fill(0),
        DataOp::Zero { offset: o, len: l } => {
            let from = offset.max(*o);
            let to = end.min(o.saturating_add(*l));
            if from < to {
                buf[(from - offset) as usize..(to - offset) as usize].fill(0);
            }
        }
        DataOp::WriteLogged { .. } | DataOp::WriteExtent { .. } | DataOp::CloneFrom { .. } => return false,
    }
    true
}

/// The parts of `[offset, end)` that no queued record overwrites whatever
/// the chunks hold (writes, zeroing, truncation past the new size,
/// reclaim), in order: where a read needs the chunks' bytes. A clone reads
/// its source: with one queued, the whole range.
fn overlay_gaps(overlay: &[(u64, duet_cluster::records::DataRecord)], offset: u64, end: u64) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(overlay.len());
    for (_, r) in overlay {
        let span = match &r.op {
            DataOp::WriteInline { offset: o, data } => (*o, o.saturating_add(data.len() as u64)),
            DataOp::WriteLogged { .. } | DataOp::WriteExtent { .. } => match r.op.logged() {
                Some((o, _, l)) => (o, o.saturating_add(l)),
                None => continue,
            },
            DataOp::Zero { offset: o, len: l } => (*o, o.saturating_add(*l)),
            DataOp::Truncate { size } => (*size, u64::MAX),
            DataOp::Reclaim => (0, u64::MAX),
            DataOp::CloneFrom { .. } => return vec![(offset, end)],
            DataOp::Unshare { .. } | DataOp::Recompress => continue,
        };
        if span.0 < end && span.1 > offset {
            spans.push(span);
        }
    }
    spans.sort_unstable();
    let mut gaps = Vec::new();
    let mut at = offset;
    for (s, e) in spans {
        if s > at {
            gaps.push((at, s.min(end)));
        }
        at = at.max(e);
        if at >= end {
            return gaps;
        }
    }
    if at < end {
        gaps.push((at, end));
    }
    gaps
}

/// The read cache, shared by the data executor (which fills it and makes
/// the destager's forgets) and the protocol executors (which read from it).
pub struct SharedReads {
    cache: std::sync::Mutex<duet_cache::read::ReadCache>,
    /// The newest write-log extents' bytes (a quarter of the read cache's
    /// bound, `duet_cache::logmem`): reads of data not destaged yet, and
    /// the destager's own reads of the extents it moves, come from memory.
    /// An extent's bytes never change, so a copy here is right for any
    /// plan that names it; the data executor inserts an extent once its
    /// record is durable and drops it when the log forgets it.
    log_mem: std::sync::Mutex<duet_cache::logmem::LogMem>,
    /// This node's id (extents named before names had an origin are its).
    node_id: u64,
    /// A data-read failure was injected ([`DataPath::inject_fault`]): the
    /// executors leave every read to the device path from then on.
    fault_armed: std::sync::atomic::AtomicBool,
    /// Client reads that laid queued records (data not destaged yet) over
    /// the chunks: one ends the destager's wait for a stream to pause
    /// ([`DataPath::defer_destage`]).
    queued_reads: AtomicU64,
}

impl SharedReads {
    /// A read the state machine planned, served from the cache alone on
    /// the calling thread, saving the trip to the data executor and back:
    /// `Some` (the bytes, and the cache's counters after) only when the
    /// cache is on, no data-read failure was ever injected, every 64 KiB
    /// block of the parts no queued record overwrites is cached
    /// ([`overlay_gaps`]), and every queued record over the range is laid
    /// over in memory: [`lay_over`], or a logged write whose extent is in
    /// the write log's memory. Otherwise the data executor serves it. The
    /// same rules as [`DataPath::read`]: a block in the cache is the chunk
    /// as the destager last left it, or as it was before a record still in
    /// the plan changed it, and the plan's records are those not destaged
    /// when it was made, laid over in order.
    pub fn read_cached(&self, plan: &ReadPlan) -> Option<(Vec<u8>, duet_cache::read::ReadCacheStats)> {
        use duet_cache::read::BLOCK;
        if !plan.overlay.is_empty() {
            self.queued_reads.fetch_add(1, Ordering::Relaxed);
        }
        if self.fault_armed.load(Ordering::Relaxed) {
            return None;
        }
        if plan.overlay.iter().any(|(_, r)| r.op.cross_file()) {
            return None;
        }
        let (file, offset, len) = (plan.file, plan.offset, plan.len);
        let end = offset.checked_add(len)?;
        // Logged writes over the range: their bytes from memory, or the
        // data executor serves the read.
        let mut logged: Vec<Option<(u64, Vec<u8>)>> = Vec::with_capacity(plan.overlay.len());
        {
            let mut mem = None;
            for (_, rec) in &plan.overlay {
                let Some((o, extent, l)) = rec.op.logged() else {
                    logged.push(None);
                    continue;
                };
                let (from, to) = (offset.max(o), end.min(o.saturating_add(l)));
                if from >= to {
                    logged.push(None);
                    continue;
                }
                let m = mem.get_or_insert_with(|| self.log_mem.lock().unwrap_or_else(|e| e.into_inner()));
                let d = m.read(mem_name(extent, self.node_id), from - o, to - from)?;
                if d.len() as u64 != to - from {
                    return None;
                }
                logged.push(Some((from, d)));
            }
        }
        // The blocks of the parts no queued record overwrites: (chunk,
        // block, first byte wanted, end).
        let mut blocks = Vec::new();
        for (gs, ge) in overlay_gaps(&plan.overlay, offset, end) {
            let mut pos = gs;
            while pos < ge {
                let (idx, co) = (pos / CHUNK_SIZE, pos % CHUNK_SIZE);
                let b = co / BLOCK;
                let next = (idx * CHUNK_SIZE + ((b + 1) * BLOCK).min(CHUNK_SIZE)).min(ge);
                blocks.push((idx, b, pos, next));
                pos = next;
            }
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.capacity() == 0 || !blocks.iter().all(|&(idx, b, _, _)| cache.has((file, idx, b))) {
            return None;
        }
        let mut buf = vec![0u8; len as usize];
        for (idx, b, from, to) in blocks {
            let data = cache.get((file, idx, b))?;
            // Zeros past the block's bytes (the end of a chunk file).
            let at = (from - (idx * CHUNK_SIZE + b * BLOCK)) as usize;
            let have = data.len().saturating_sub(at).min((to - from) as usize);
            if have > 0 {
                let dst = (from - offset) as usize;
                buf[dst..dst + have].copy_from_slice(&data[at..at + have]);
            }
        }
        // A sequential reader served here is still one to the read-ahead.
        cache.read_ahead(file, offset, len);
        let stats = cache.stats();
        drop(cache);
        for ((_, rec), mem) in plan.overlay.iter().zip(logged) {
            match mem {
                Some((from, d)) => patch(&mut buf, offset, from, &d),
                None if rec.op.logged().is_some() => {} // outside the range
                None => {
                    let laid = lay_over(&mut buf, offset, &rec.op);
                    assert!(laid, "a record needing the device passed the checks above");
                }
            }
        }
        Some((buf, stats))
    }
}

/// The name an extent has in [`duet_cache::logmem`]: extents named
/// before names had an origin are this node's.
fn mem_name(extent: ExtentId, node_id: u64) -> duet_cache::logmem::Name {
    let e = extent.resolved(node_id);
    (e.origin, e.seq)
}

/// What a queued record changes: per chunk, its first and last 64 KiB
/// block; or `None` for the whole file (truncation, clone, reclaim,
/// recompression, and ranges over 64 chunks).
fn record_chunks(op: &DataOp) -> Option<BTreeMap<u64, (u64, u64)>> {
    use duet_cache::read::BLOCK;
    let range = |offset: u64, len: u64| -> Option<BTreeMap<u64, (u64, u64)>> {
        if len == 0 {
            return Some(BTreeMap::new());
        }
        let end = offset.saturating_add(len - 1);
        let (first, last) = (offset / CHUNK_SIZE, end / CHUNK_SIZE);
        (last - first < 64).then(|| {
            (first..=last)
                .map(|idx| {
                    let lo = if idx == first { offset % CHUNK_SIZE / BLOCK } else { 0 };
                    let hi = if idx == last { end % CHUNK_SIZE / BLOCK } else { (CHUNK_SIZE - 1) / BLOCK };
                    (idx, (lo, hi))
                })
                .collect()
        })
    };
    match op {
        DataOp::WriteInline { offset, data } => range(*offset, data.len() as u64),
        DataOp::WriteLogged { .. } | DataOp::WriteExtent { .. } => {
            let (offset, _, len) = op.logged()?;
            range(offset, len)
        }
        DataOp::Zero { offset, len } => range(*offset, *len),
        DataOp::Unshare { chunks } => Some(chunks.iter().map(|&c| (c, (0, u64::MAX))).collect()),
        DataOp::Truncate { .. } | DataOp::CloneFrom { .. } | DataOp::Recompress | DataOp::Reclaim => None,
    }
}

/// The durable floor of this node's extent sequences (0 when the file
/// does not exist: a data directory from before extents had names, or a
/// new one). A damaged file stops the start: reading it as a lower floor
/// could name two extents alike.
fn read_floor(wal: &Path) -> io::Result<u64> {
    let path = wal.join(SEQ_FLOOR_FILE);
    match std::fs::read(&path) {
        Ok(b) => decode_floor(&b).ok_or_else(|| {
            io::Error::other(format!(
                "{} is damaged ({} bytes, checksum mismatch); refusing to name new write-log extents. \
                 It holds this node's extent sequence floor: restore it, or replace it with a floor above \
                 every sequence this node ever used",
                path.display(),
                b.len()
            ))
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(io_err("cannot read", &path, e)),
    }
}

/// Makes `floor` the durable floor: written aside, synced, renamed over
/// the old one, and the directory synced.
pub(crate) fn write_floor(wal: &Path, floor: u64) -> io::Result<()> {
    use std::io::Write;
    let tmp = wal.join(format!("{SEQ_FLOOR_FILE}.tmp"));
    let path = wal.join(SEQ_FLOOR_FILE);
    let mut f = std::fs::File::create(&tmp).map_err(|e| io_err("cannot create", &tmp, e))?;
    f.write_all(&encode_floor(floor)).map_err(|e| io_err("cannot write", &tmp, e))?;
    f.sync_all().map_err(|e| io_err("cannot sync", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io_err("cannot rename", &tmp, e))?;
    std::fs::File::open(wal).and_then(|d| d.sync_all()).map_err(|e| io_err("cannot sync", wal, e))?;
    Ok(())
}

/// glommio decides once per device whether reads may use the io_uring poll
/// ring (IORING_SETUP_IOPOLL), by reading the first DMA file it opens
/// there, and any read error but ENOTSUP... keeps polling off. Its probe
/// is not to be trusted:
/// - an empty file reads "successfully" and wrongly enables polling, after
///   which every read fails with EOPNOTSUPP on devices without poll queues
///   (hence a file with data);
/// - on Debian's 6.1.0-57 kernel with virtio-blk (no poll queues,
///   `queue/io_poll` 0) a real read succeeds too, and later reads on the
///   poll ring spin in the kernel without completing: the disk image's
///   duetd burned its one CPU in io-wq and never answered an SMB READ.
///
/// So the block layer is asked first: only a device whose
/// `/sys/dev/block/MAJOR:0/queue/io_poll` says 1 gets glommio's probe;
/// for any other the first DMA file glommio sees is opened write-only, its
/// probe read fails (EBADF) and glommio keeps that device off the poll
/// ring. Either way a real O_DIRECT read is checked after.
async fn probe_iopoll(dir: &Path) -> io::Result<()> {
    let p = dir.join(".io-probe");
    std::fs::create_dir_all(dir).map_err(|e| io_err("cannot create", dir, e))?;
    std::fs::write(&p, vec![0u8; 64 << 10]).map_err(|e| io_err("cannot write", &p, e))?;
    let (poll, sysfs) = device_polls(dir);
    if !poll {
        let w = OpenOptions::new().write(true).dma_open(&p).await.map_err(|e| io_err("cannot open", &p, e))?;
        let _ = w.close().await;
        tracing::info!("{}: the io_uring poll ring stays off ({sysfs} is not 1)", dir.display());
    }
    let f = DmaFile::open(&p).await.map_err(|e| io_err("cannot open", &p, e))?;
    let r = f.read_at(0, 4096).await;
    let _ = f.close().await;
    r.map_err(|e| io_err("cannot read", &p, e))?;
    Ok(())
}

/// Whether the block device under `dir` polls for completions (it has
/// poll queues), from sysfs as glommio would find it (the whole disk,
/// minor 0), and the attribute's path. Unknown = no.
fn device_polls(dir: &Path) -> (bool, String) {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::metadata(dir) else { return (false, "the data directory's device".into()) };
    let major = libc::major(md.dev());
    let attr = format!("/sys/dev/block/{major}:0/queue/io_poll");
    let on = std::fs::read_to_string(&attr).map(|v| v.trim() == "1").unwrap_or(false);
    (on, attr)
}

/// An I/O error from any displayable error (glommio's are not `Sync`).
fn ge(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use duet_cluster::records::DataRecord;

    fn rec(op: DataOp) -> (u64, DataRecord) {
        (1, DataRecord { file: 9, op })
    }

    #[test]
    fn overlay_gaps_are_what_no_record_overwrites() {
        let w = |o: u64, n: usize| rec(DataOp::WriteInline { offset: o, data: vec![1; n] });
        assert_eq!(overlay_gaps(&[w(0, 100)], 10, 100), vec![]);
        assert_eq!(overlay_gaps(&[w(0, 100)], 10, 101), vec![(100, 101)]);
        assert_eq!(overlay_gaps(&[w(50, 50), w(0, 50)], 0, 100), vec![], "adjacent spans in any order");
        assert_eq!(overlay_gaps(&[w(0, 40), w(50, 10), w(70, 100)], 0, 100), vec![(40, 50), (60, 70)]);
        assert_eq!(overlay_gaps(&[w(0, 10), rec(DataOp::Zero { offset: 10, len: 5 }), rec(DataOp::Truncate { size: 15 })], 0, 1 << 30), vec![]);
        assert_eq!(overlay_gaps(&[rec(DataOp::Reclaim)], 5, 6), vec![]);
        assert_eq!(overlay_gaps(&[w(0, 10), rec(DataOp::Recompress)], 0, 20), vec![(10, 20)]);
        assert_eq!(overlay_gaps(&[w(500, 10)], 0, 20), vec![(0, 20)], "a record outside the range");
        assert_eq!(overlay_gaps(&[], 0, 1), vec![(0, 1)]);
    }
}
