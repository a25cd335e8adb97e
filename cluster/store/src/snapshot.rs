//! Raft snapshot images: the replicated state of a node as of one applied
//! index, made on the leader from a RocksDB checkpoint plus its chunk
//! files, streamed to a follower that lags past the retained log (or has
//! nothing), checked there, and installed at the follower's next start.
//!
//! Image layout (version 1), one byte stream:
//!
//! ```text
//! "DUETSNAP" version:u8=1 index:u64 term:u64 destaged_upto:u64     (header)
//! then records, each a tag byte:
//!   1 KV    klen:u32 vlen:u32 key value        (a state-machine key)
//!   2 FILE  plen:u16 path len:u64 data         (a chunk file, "xx/name")
//!   3 END   total:u64 sha256:[32]              (bytes before END, their hash)
//! ```
//!
//! All integers big-endian. The state is every key of the checkpoint but
//! the raft log (`r`), the hard state (`h`) and node-local records (`l`):
//! the `m` counters and `applied_index`/`applied_term` come with it (they
//! are the image's index). The leader's destage progress is carried in the
//! header: its chunk files hold every record it destaged, and its queue
//! (in the image) every record it has not; chunk files copied while the
//! destager runs may already hold some queued records, which is harmless
//! because applying queued records again, in order, over chunks that hold
//! some of them gives the same bytes (STORAGE-MODEL.md, "Fetch what is
//! missing").
//!
//! A node refuses an image that its own state covers, or whose queue
//! still holds write-cache records this node destaged already (the
//! install would drop its copy of those extents): [`refuse_if_covered`],
//! [`refuse_if_drops_copies`]; raft sends another later.
//!
//! Install ([`install_pending`]) is crash-atomic: the image is verified
//! (length, SHA-256, structure) before anything else; a new metadata
//! database and chunk directory are built under `snapshot/`, a `COMPLETE`
//! marker is written and synced last, and only then are the live
//! directories swapped by renames. A restart before the marker discards
//! the build (the old state stays); after it, it finishes the renames.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use duet_cluster::keys;
use duet_cluster::records::decode;
use duet_cluster::{DataOp, DataRecord};
use rocksdb::{Options, WriteBatch, WriteOptions, DB};
use sha2::{Digest, Sha256};

pub const MAGIC: &[u8; 8] = b"DUETSNAP";
pub const VERSION: u8 = 1;
const HEADER_LEN: usize = 8 + 1 + 8 + 8 + 8;
const TAG_KV: u8 = 1;
const TAG_FILE: u8 = 2;
const TAG_END: u8 = 3;
/// Bytes handed to the sink at a time (and the largest read of a chunk).
pub const PIECE: usize = 1 << 20;
/// The longest key or value an image may hold (RocksDB records here are
/// far smaller).
const KV_MAX: u32 = 64 << 20;
/// The largest chunk file (chunks are 4 MiB).
const FILE_MAX: u64 = 64 << 20;

/// Under a data directory: where a follower stages and installs images.
pub fn staging_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("snapshot")
}

/// What an image is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ImageHeader {
    /// The applied index (and its term) of the state.
    pub index: u64,
    pub term: u64,
    /// The maker's destage progress (its chunks hold every record up to it).
    pub destaged_upto: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot image: {0}")]
    Io(#[from] io::Error),
    #[error("snapshot image: rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// The image is not a whole, intact image (truncated, corrupt,
    /// malformed): refused, nothing installed.
    #[error("snapshot image refused: {0}")]
    Bad(String),
}

fn bad(s: impl Into<String>) -> SnapshotError {
    SnapshotError::Bad(s.into())
}

/// Streams an image into `sink` in pieces of at most [`PIECE`] bytes
/// (plus one record): the state of the RocksDB checkpoint at `checkpoint`
/// (opened read-only) and the chunk files under `chunks`.
pub fn write_image(
    checkpoint: &Path,
    chunks: &Path,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<ImageHeader, SnapshotError> {
    let db = DB::open_for_read_only(&Options::default(), checkpoint, false)?;
    let header = checkpoint_header(&db)?;
    let mut w = ImageWriter { buf: Vec::with_capacity(PIECE + 4096), hash: Sha256::new(), total: 0, sink };
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(MAGIC);
    h.push(VERSION);
    h.extend_from_slice(&header.index.to_be_bytes());
    h.extend_from_slice(&header.term.to_be_bytes());
    h.extend_from_slice(&header.destaged_upto.to_be_bytes());
    w.put(&h)?;
    for kv in db.iterator(rocksdb::IteratorMode::Start) {
        let (k, v) = kv?;
        if !replicated_key(&k) {
            continue;
        }
        let mut rec = Vec::with_capacity(9 + k.len() + v.len());
        rec.push(TAG_KV);
        rec.extend_from_slice(&(k.len() as u32).to_be_bytes());
        rec.extend_from_slice(&(v.len() as u32).to_be_bytes());
        rec.extend_from_slice(&k);
        rec.extend_from_slice(&v);
        w.put(&rec)?;
    }
    drop(db);
    let mut files = Vec::new();
    if chunks.exists() {
        for d in fs::read_dir(chunks)? {
            let d = d?;
            if !d.file_type()?.is_dir() {
                continue;
            }
            let dname = d.file_name().to_string_lossy().into_owned();
            for f in fs::read_dir(d.path())? {
                let f = f?;
                if f.file_type()?.is_file() {
                    files.push((format!("{dname}/{}", f.file_name().to_string_lossy()), f.path()));
                }
            }
        }
    }
    files.sort();
    let mut piece = vec![0u8; PIECE];
    for (rel, path) in files {
        if !valid_chunk_path(&rel) {
            continue;
        }
        // Deleted since it was listed (a reclaim): nothing to send.
        let Ok(mut f) = File::open(&path) else { continue };
        let len = f.metadata()?.len().min(FILE_MAX);
        let mut rec = Vec::with_capacity(11 + rel.len());
        rec.push(TAG_FILE);
        rec.extend_from_slice(&(rel.len() as u16).to_be_bytes());
        rec.extend_from_slice(rel.as_bytes());
        rec.extend_from_slice(&len.to_be_bytes());
        w.put(&rec)?;
        let mut left = len;
        while left > 0 {
            let n = (left as usize).min(PIECE);
            let got = read_full(&mut f, &mut piece[..n])?;
            // Shortened while being read (the destager zeroes or truncates
            // it for a queued record, which the follower applies again):
            // the declared length is kept, zeros after.
            piece[got..n].fill(0);
            w.put(&piece[..n])?;
            left -= n as u64;
        }
    }
    w.finish()?;
    Ok(header)
}

/// The header of the image a checkpoint makes.
fn checkpoint_header(db: &DB) -> Result<ImageHeader, SnapshotError> {
    let get_u64 = |k: &[u8]| -> Result<u64, SnapshotError> {
        Ok(db.get(k)?.and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok()).map(u64::from_be_bytes).unwrap_or(0))
    };
    Ok(ImageHeader {
        index: get_u64(&keys::meta("applied_index"))?,
        term: get_u64(&keys::meta("applied_term"))?,
        destaged_upto: get_u64(&keys::local("destaged_upto"))?,
    })
}

/// On the sending side, before an image of `checkpoint` is streamed: the
/// refusal [`refuse_if_drops_copies`] a follower that reported its destage
/// progress `destaged_there` would make once the whole image (chunk files
/// included) had arrived. Only the queued records after the maker's own
/// progress are read.
pub fn refuse_checkpoint_for(checkpoint: &Path, destaged_there: u64) -> Result<ImageHeader, SnapshotError> {
    let db = DB::open_for_read_only(&Options::default(), checkpoint, false)?;
    let header = checkpoint_header(&db)?;
    if destaged_there <= header.destaged_upto {
        return Ok(header);
    }
    let from = keys::dq(header.destaged_upto.saturating_add(1));
    for kv in db.iterator(rocksdb::IteratorMode::From(&from, rocksdb::Direction::Forward)) {
        let (k, v) = kv?;
        if k.first() != Some(&keys::DQ) {
            break;
        }
        if keys::u64_at(&k, 1).is_some_and(|dseq| dseq > destaged_there) {
            break;
        }
        refuse_if_drops_copies(&header, destaged_there, &k, &v)?;
    }
    Ok(header)
}

fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// Whether a key of the metadata database is replicated state (goes into
/// an image): not the raft log, the hard state or node-local records.
pub fn replicated_key(k: &[u8]) -> bool {
    match k.first() {
        None => false,
        Some(&keys::RAFT_LOG) | Some(&keys::LOCAL) => false,
        _ => k != keys::RAFT_HARD_STATE,
    }
}

/// `xx/name`: two hex digits, one plain file name.
fn valid_chunk_path(rel: &str) -> bool {
    let Some((d, f)) = rel.split_once('/') else { return false };
    d.len() == 2
        && d.bytes().all(|b| b.is_ascii_hexdigit())
        && !f.is_empty()
        && f.len() <= 128
        && f != "."
        && f != ".."
        && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

struct ImageWriter<'a> {
    buf: Vec<u8>,
    hash: Sha256,
    total: u64,
    sink: &'a mut dyn FnMut(&[u8]) -> io::Result<()>,
}

impl ImageWriter<'_> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.hash.update(b);
        self.total += b.len() as u64;
        self.buf.extend_from_slice(b);
        if self.buf.len() >= PIECE {
            (self.sink)(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<()> {
        let digest = std::mem::take(&mut self.hash).finalize();
        self.buf.push(TAG_END);
        self.buf.extend_from_slice(&self.total.to_be_bytes());
        self.buf.extend_from_slice(&digest);
        (self.sink)(&self.buf)?;
        Ok(())
    }
}

/// One record of an image, as read back.
enum Record {
    Kv(Vec<u8>, Vec<u8>),
    /// A chunk file: its relative path and length; the caller reads the
    /// data from the reader.
    File(String, u64),
}

/// Reads an image from the start, hashing what it reads.
struct ImageReader<R: Read> {
    r: R,
    hash: Sha256,
    total: u64,
}

impl<R: Read> ImageReader<R> {
    fn exact(&mut self, buf: &mut [u8]) -> Result<(), SnapshotError> {
        self.r.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => bad(format!("truncated at byte {} or after", self.total)),
            _ => SnapshotError::Io(e),
        })?;
        self.hash.update(&*buf);
        self.total += buf.len() as u64;
        Ok(())
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        let mut b = [0u8; 8];
        self.exact(&mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        let mut b = [0u8; 4];
        self.exact(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    fn header(&mut self) -> Result<ImageHeader, SnapshotError> {
        let mut m = [0u8; 9];
        self.exact(&mut m)?;
        if &m[..8] != MAGIC {
            return Err(bad("not a duet snapshot image (magic)"));
        }
        if m[8] != VERSION {
            return Err(bad(format!("image version {} is not supported (this node reads {VERSION})", m[8])));
        }
        let index = self.u64()?;
        let term = self.u64()?;
        let destaged_upto = self.u64()?;
        if index == 0 {
            return Err(bad("image of index 0"));
        }
        Ok(ImageHeader { index, term, destaged_upto })
    }

    /// The next record; None at a valid END (length and hash checked, and
    /// nothing after it).
    fn next(&mut self) -> Result<Option<Record>, SnapshotError> {
        let mut tag = [0u8; 1];
        self.r.read_exact(&mut tag).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => bad(format!("truncated at byte {} (no end record)", self.total)),
            _ => SnapshotError::Io(e),
        })?;
        match tag[0] {
            TAG_END => {
                let before = self.total;
                let expect = std::mem::take(&mut self.hash).finalize();
                let mut t = [0u8; 40];
                self.r.read_exact(&mut t).map_err(|_| bad("truncated end record"))?;
                let total = u64::from_be_bytes(t[..8].try_into().unwrap_or_default());
                if total != before {
                    return Err(bad(format!("length {before} bytes, the end record says {total}")));
                }
                if t[8..] != expect[..] {
                    return Err(bad("checksum (SHA-256) mismatch: the image is corrupt"));
                }
                let mut extra = [0u8; 1];
                if self.r.read(&mut extra)? != 0 {
                    return Err(bad("bytes after the end record"));
                }
                Ok(None)
            }
            TAG_KV => {
                self.hash.update(tag);
                self.total += 1;
                let kl = self.u32()?;
                let vl = self.u32()?;
                if kl == 0 || kl > KV_MAX || vl > KV_MAX {
                    return Err(bad(format!("a record of key length {kl}, value length {vl}")));
                }
                let mut k = vec![0u8; kl as usize];
                self.exact(&mut k)?;
                let mut v = vec![0u8; vl as usize];
                self.exact(&mut v)?;
                if !replicated_key(&k) {
                    return Err(bad("a node-local or raft-log key in the image"));
                }
                Ok(Some(Record::Kv(k, v)))
            }
            TAG_FILE => {
                self.hash.update(tag);
                self.total += 1;
                let mut pl = [0u8; 2];
                self.exact(&mut pl)?;
                let mut p = vec![0u8; u16::from_be_bytes(pl) as usize];
                self.exact(&mut p)?;
                let p = String::from_utf8(p).map_err(|_| bad("a chunk path that is not UTF-8"))?;
                if !valid_chunk_path(&p) {
                    return Err(bad(format!("chunk path {p:?} refused")));
                }
                let len = self.u64()?;
                if len > FILE_MAX {
                    return Err(bad(format!("chunk file {p} of {len} bytes")));
                }
                Ok(Some(Record::File(p, len)))
            }
            t => Err(bad(format!("unknown record tag {t} at byte {}", self.total))),
        }
    }

    /// Copies a file record's data into `out` (or discards it).
    fn data(&mut self, len: u64, mut out: Option<&mut File>) -> Result<(), SnapshotError> {
        let mut buf = vec![0u8; PIECE.min(len as usize).max(1)];
        let mut left = len;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            self.exact(&mut buf[..n])?;
            if let Some(f) = out.as_mut() {
                f.write_all(&buf[..n])?;
            }
            left -= n as u64;
        }
        Ok(())
    }
}

/// Checks a whole image file: structure, length and SHA-256. Nothing is
/// written.
pub fn verify_image(path: &Path) -> Result<ImageHeader, SnapshotError> {
    verify_image_for(path, 0)
}

/// [`verify_image`], and refuses an image that would drop this node's
/// copies of write-cache data ([`refuse_if_drops_copies`]): `destaged_here`
/// is the node's destage progress (`l destaged_upto`).
pub fn verify_image_for(path: &Path, destaged_here: u64) -> Result<ImageHeader, SnapshotError> {
    let mut r = ImageReader { r: BufReader::with_capacity(PIECE, File::open(path)?), hash: Sha256::new(), total: 0 };
    let h = r.header()?;
    while let Some(rec) = r.next()? {
        match rec {
            Record::File(_, len) => r.data(len, None)?,
            Record::Kv(k, v) => refuse_if_drops_copies(&h, destaged_here, &k, &v)?,
        }
    }
    Ok(h)
}

/// Refuses an image whose queue still holds a record of write-cache bytes
/// (an extent) that this node has destaged already: its write log may no
/// longer hold the extent, and its only copy here is in the chunk files
/// the install replaces with the image's, which lack it (the image's
/// maker has not destaged it; it may not even hold it: a push it did not
/// take and has not fetched, or a lost write-log device). Installing
/// would lose a copy that the majority behind the acknowledgement counted
/// on; with every such node installing one, the last (the simulation's
/// seed 305437). Refused, the node goes on from its own state and raft
/// sends another image later; by then the maker has destaged the record
/// (fetching the extent, from this node's chunks if need be), and its
/// chunk files carry the bytes. A node with nothing destaged (an emptied
/// node) never refuses.
pub fn refuse_if_drops_copies(header: &ImageHeader, destaged_here: u64, k: &[u8], v: &[u8]) -> Result<(), SnapshotError> {
    if k.first() != Some(&keys::DQ) || destaged_here <= header.destaged_upto {
        return Ok(());
    }
    let dseq = keys::u64_at(k, 1).ok_or_else(|| bad("a queued data record with a malformed key"))?;
    if dseq > destaged_here {
        return Ok(());
    }
    let rec: DataRecord = decode(v).ok_or_else(|| bad(format!("queued data record {dseq} does not decode")))?;
    if matches!(rec.op, DataOp::WriteExtent { .. } | DataOp::WriteLogged { .. }) {
        return Err(bad(format!(
            "its queue holds data record {dseq} (write-cache bytes of file {}), which this node destaged already (up to {destaged_here}; the image's maker up to {}): installing it would drop this node's copy",
            rec.file, header.destaged_upto
        )));
    }
    Ok(())
}

/// Where a verified image waits for the next start: moved (renamed) into
/// place from `partial` after [`verify_image_for`] accepted it (for this
/// node's destage progress `destaged_here`), and synced.
pub fn stage_verified(data_dir: &Path, partial: &Path, destaged_here: u64) -> Result<ImageHeader, SnapshotError> {
    let h = verify_image_for(partial, destaged_here)?;
    File::open(partial)?.sync_all()?;
    let dir = staging_dir(data_dir);
    fs::rename(partial, dir.join("image"))?;
    sync_dir(&dir)?;
    Ok(h)
}

fn sync_dir(p: &Path) -> io::Result<()> {
    File::open(p)?.sync_all()
}

/// At start, before the metadata store and the data path open: installs a
/// staged, verified image (or finishes an install a crash interrupted).
/// Returns the installed image's header, None when there was none. An
/// image that fails its check is refused (logged, deleted), and the old
/// state stays.
pub fn install_pending(data_dir: &Path) -> Result<Option<ImageHeader>, SnapshotError> {
    let snap = staging_dir(data_dir);
    if !snap.exists() {
        return Ok(None);
    }
    let complete = snap.join("COMPLETE");
    if !complete.exists() {
        let image = snap.join("image");
        if !image.exists() {
            // A transfer that never finished: nothing to install.
            fs::remove_dir_all(&snap)?;
            return Ok(None);
        }
        let header = match build(data_dir, &snap, &image) {
            Ok(h) => h,
            Err(SnapshotError::Bad(why)) => {
                tracing::error!("raft snapshot: the staged image is refused and deleted ({why}); starting from the old state");
                fs::remove_dir_all(&snap)?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        // The marker, last: from here on the install is finished by any start.
        let mut f = File::create(&complete)?;
        f.write_all(format!("{} {} {}\n", header.index, header.term, header.destaged_upto).as_bytes())?;
        f.sync_all()?;
        sync_dir(&snap)?;
        test_crash_point("built");
    }
    let text = fs::read_to_string(&complete)?;
    let mut it = text.split_whitespace().map(|w| w.parse::<u64>().unwrap_or(0));
    let header = ImageHeader {
        index: it.next().unwrap_or(0),
        term: it.next().unwrap_or(0),
        destaged_upto: it.next().unwrap_or(0),
    };
    for name in ["metadata", "chunks"] {
        let new = snap.join(name);
        let live = data_dir.join(name);
        let old = snap.join(format!("old-{name}"));
        if new.exists() {
            if live.exists() {
                if old.exists() {
                    fs::remove_dir_all(&old)?;
                }
                fs::rename(&live, &old)?;
            }
            fs::rename(&new, &live)?;
            sync_dir(data_dir)?;
            sync_dir(&snap)?;
        }
        test_crash_point(name);
    }
    let _ = fs::remove_file(snap.join("image"));
    for name in ["old-metadata", "old-chunks"] {
        let p = snap.join(name);
        if p.exists() {
            fs::remove_dir_all(&p)?;
        }
    }
    fs::remove_file(&complete)?;
    fs::remove_dir_all(&snap)?;
    sync_dir(data_dir)?;
    tracing::info!(
        index = header.index,
        term = header.term,
        "raft snapshot: installed the image of index {} (term {})",
        header.index,
        header.term
    );
    Ok(Some(header))
}

/// Test-only: `DUET_TEST_SNAPSHOT_CRASH=POINT` aborts the process there
/// (a crash in the middle of an install).
fn test_crash_point(point: &str) {
    if std::env::var("DUET_TEST_SNAPSHOT_CRASH").is_ok_and(|p| p == point) {
        tracing::error!("raft snapshot: crashing at {point} (DUET_TEST_SNAPSHOT_CRASH)");
        std::process::abort();
    }
}

/// Refuses an image this node's own state already covers: one not past
/// what it applied (raft refuses a snapshot older than its commit too),
/// or one whose last entry its raft log holds (same index and term). The
/// image replaces the raft log, so installing it would drop the entries
/// after that one, which this node may have acknowledged to a leader
/// while it fetched the image, and a commit may rest on them (the
/// simulation's seed 316053: raft-rs then panics, "to_commit 13 is out of
/// range [last_index 12]"). Such a node catches up from its own log.
fn refuse_if_covered(old: &DB, header: &ImageHeader) -> Result<(), SnapshotError> {
    use protobuf::Message as _;
    let applied = old.get(keys::meta("applied_index"))?.and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok()).map(u64::from_be_bytes).unwrap_or(0);
    if applied >= header.index {
        return Err(bad(format!("its index {} is not past this node's applied index {applied}", header.index)));
    }
    if let Some(v) = old.get(keys::raft_log(header.index))? {
        let e = raft::eraftpb::Entry::parse_from_bytes(&v).map_err(|e| bad(format!("this node's raft entry {}: {e}", header.index)))?;
        if e.term == header.term {
            return Err(bad(format!(
                "this node's raft log holds its last entry (index {}, term {}) and may have acknowledged entries after it",
                header.index, header.term
            )));
        }
    }
    Ok(())
}

/// Builds `snap/metadata` and `snap/chunks` from the verified image, with
/// this node's own records (its id, raft hard state) from the live
/// database.
/// Refuses (nothing built) an image its own state covers
/// ([`refuse_if_covered`]) or whose install would drop its copies of
/// write-cache data ([`refuse_if_drops_copies`]).
fn build(data_dir: &Path, snap: &Path, image: &Path) -> Result<ImageHeader, SnapshotError> {
    let new_meta = snap.join("metadata");
    let new_chunks = snap.join("chunks");
    for p in [&new_meta, &new_chunks] {
        if p.exists() {
            fs::remove_dir_all(p)?;
        }
    }
    // Checked whole before anything is built (the build reads it again).
    let header = verify_image(image)?;
    let live_meta = crate::metadata_dir(data_dir);
    let mut own: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut destaged_here = 0;
    if live_meta.exists() {
        let old = DB::open_for_read_only(&Options::default(), &live_meta, false)?;
        refuse_if_covered(&old, &header)?;
        destaged_here =
            old.get(keys::local("destaged_upto"))?.and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok()).map(u64::from_be_bytes).unwrap_or(0);
        // This node's own: its vote and id, and its rejoin guard (an
        // emptied node stays armed through the install until it caught up).
        for k in [keys::RAFT_HARD_STATE.to_vec(), keys::local("node_id"), keys::local(crate::REJOIN_GUARD)] {
            if let Some(v) = old.get(&k)? {
                own.push((k, v));
            }
        }
    }
    let mut opts = Options::default();
    opts.create_if_missing(true);
    let db = DB::open(&opts, &new_meta)?;
    fs::create_dir_all(&new_chunks)?;
    let mut r = ImageReader { r: BufReader::with_capacity(PIECE, File::open(image)?), hash: Sha256::new(), total: 0 };
    if r.header()? != header {
        return Err(bad("the image changed while it was installed"));
    }
    let mut wb = WriteBatch::default();
    while let Some(rec) = r.next()? {
        match rec {
            Record::Kv(k, v) => {
                refuse_if_drops_copies(&header, destaged_here, &k, &v)?;
                wb.put(k, v);
                if wb.len() >= 10_000 {
                    db.write(std::mem::take(&mut wb))?;
                }
            }
            Record::File(rel, len) => {
                let p = new_chunks.join(&rel);
                if let Some(d) = p.parent() {
                    fs::create_dir_all(d)?;
                }
                let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&p)?;
                r.data(len, Some(&mut f))?;
                f.sync_all()?;
            }
        }
    }
    for (k, v) in own {
        wb.put(k, v);
    }
    wb.put(keys::local("destaged_upto"), header.destaged_upto.to_be_bytes());
    let mut wo = WriteOptions::default();
    wo.set_sync(true);
    db.write_opt(wb, &wo)?;
    db.flush()?;
    drop(db);
    for d in fs::read_dir(&new_chunks)? {
        sync_dir(&d?.path())?;
    }
    sync_dir(&new_chunks)?;
    sync_dir(snap)?;
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_paths() {
        assert!(valid_chunk_path("0a/12.0"));
        assert!(!valid_chunk_path("../x"));
        assert!(!valid_chunk_path("0a/.."));
        assert!(!valid_chunk_path("0a/b/c"));
        assert!(!valid_chunk_path("zz/1"));
    }

    #[test]
    fn replicated_keys() {
        assert!(!replicated_key(b"h"));
        assert!(replicated_key(b"hx"));
        assert!(!replicated_key(&keys::local("destaged_upto")));
        assert!(!replicated_key(&keys::raft_log(3)));
        assert!(replicated_key(&keys::meta("next_id")));
    }
}
