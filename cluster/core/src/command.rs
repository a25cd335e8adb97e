//! The raft log's command format: what a raft entry's data holds.
//!
//! The format is the cluster's own, written and read by hand here, not a
//! serialisation of the in-memory types (`duet_fs::Batch` and friends are
//! protocol-facing and change with the protocols): every field is written
//! explicitly, in a fixed order, with [`crate::wire`]'s primitives.
//!
//! Layout: one version byte ([`COMMAND_V2`]), then the command: a one-byte
//! tag and its fields. Tags are numbered here, by hand, and a number is
//! never reused. There are no sentinel values on the wire: what the
//! in-memory types express with a magic value (`CTIME_KEEP`,
//! `ALLOC_TRUNCATES`, a copy length of `u64::MAX`, a uid or gid of
//! `u32::MAX` meaning "pick one") is a tag of its own here, and the decoder
//! refuses the magic value where it would be a plain number.
//!
//! Decoding is strict: an unknown version or tag, a truncated field, a
//! value out of range, invalid UTF-8 or a trailing byte is an error, and a
//! node that meets one stops ([`decode_entry`], [`UndecodableEntry`]):
//! a replica never skips an entry or applies what it cannot read.
//!
//! Entries written before this format (bincode of [`Command`], which starts
//! with its variant index as a little-endian u32: `[0..=6, 0, 0, 0]`) are
//! still read ([`decode_command`] tells them apart by the first byte, which
//! the versioned format never has below [`COMMAND_V1`]), so that a data
//! directory whose raft log holds old entries not yet applied recovers.
//! That reader is the only use of bincode for commands; it can go once no
//! data directory of a release before the versioned format remains.
//!
//! A new field or meaning is a new version: the encoder writes only the
//! newest, the decoder reads every version it knows.
//!
//! Versions:
//! - 1 ([`COMMAND_V1`]): logged write data is named by this node's log
//!   sequence number (`DATA_LOGGED`).
//! - 2 ([`COMMAND_V2`]): adds `DATA_EXTENT`, logged write data named by a
//!   cluster-wide extent (origin node, origin's sequence, both from 1,
//!   then the length). What the engine proposes. `DATA_LOGGED` stays
//!   readable (and is what a legacy `WriteData::Logged` encodes to); no
//!   other change.

use duet_fs::{
    Access, Batch, CreateKind, Credentials, ExtentId, IfExists, ObjRef, Op, SetAttrs, SetTime, TimeNs, WriteData, XattrHow,
    ALLOC_TRUNCATES, CTIME_KEEP,
};

use crate::records::{Command, Durability, ShareRecord, UserRecord};
use crate::wire::{Reader, WireError, Writer};

/// The first byte of every command in the versioned format, version 1.
/// Chosen above any first byte of a legacy (bincode) command.
pub const COMMAND_V1: u8 = 0xD1;
/// Version 2: write-log data named by [`duet_fs::ExtentId`]. What the
/// encoder writes.
pub const COMMAND_V2: u8 = 0xD2;

/// Why a command cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("empty command")]
    Empty,
    #[error("unknown command format version {0:#04x}")]
    UnknownVersion(u8),
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("legacy (bincode) command: {0}")]
    Legacy(String),
}

/// A raft entry whose command cannot be decoded: the node must stop (it
/// can neither apply it nor skip it without diverging from the others).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "raft entry at term {term} index {index} cannot be decoded ({error}): this node stops applying \
     the raft log; it needs a binary that reads this entry (or a rebuild from the other replicas)"
)]
pub struct UndecodableEntry {
    pub term: u64,
    pub index: u64,
    pub error: CommandError,
}

/// Decodes the command of the raft entry at (`term`, `index`).
pub fn decode_entry(term: u64, index: u64, data: &[u8]) -> Result<Command, UndecodableEntry> {
    decode_command(data).map_err(|error| UndecodableEntry { term, index, error })
}

// Command tags. Never renumber; a retired tag stays retired.
const CMD_INIT: u8 = 1;
const CMD_BATCH: u8 = 2;
const CMD_PUT_SHARE: u8 = 3;
const CMD_REMOVE_SHARE: u8 = 4;
const CMD_PUT_USER: u8 = 5;
const CMD_REMOVE_USER: u8 = 6;
const CMD_DESTAGED: u8 = 7;
const CMD_PUBLIC_ADDRESSES: u8 = 8;
/// A snapshot of a share (layers; `cluster/STORAGE-MODEL.md` "Layers"):
/// share name, snapshot name, time.
const CMD_SNAPSHOT: u8 = 9;
/// A snapshot deleted: share name, snapshot name, time.
const CMD_DROP_SNAPSHOT: u8 = 10;
/// Issue 15 (clones): a writable clone of a share or snapshot: source,
/// snapshot (optional), the new share's record and its durability tag, time.
const CMD_CLONE: u8 = 11;
/// `Init` whose share records are each followed by a durability tag
/// ([`DURABILITY_ALWAYS`], [`DURABILITY_PROTOCOL`]). What the encoder
/// writes when a share's durability is not `always`; otherwise `CMD_INIT`,
/// whose shares are `always`.
const CMD_INIT_DURABILITY: u8 = 12;
/// `PutShare` whose share record is followed by a durability tag (see
/// [`CMD_INIT_DURABILITY`]); a share of durability `always` is `CMD_PUT_SHARE`.
const CMD_PUT_SHARE_DURABILITY: u8 = 13;
/// Issue 15 (schedules): a share's snapshot schedule set or removed: share
/// name, then a bool, and when set the interval (seconds) and how many to
/// keep.
const CMD_SNAPSHOT_SCHEDULE: u8 = 14;
/// A client batch with an identity for exactly-once resend
/// ([`duet_fs::RequestId`]: origin node, the origin process's epoch, the
/// sequence number, each a varint from 1), then the batch as under
/// [`CMD_BATCH`]. What a `Command::Batch` whose `request` is set encodes
/// to; a batch without one stays `CMD_BATCH`, so entries written before
/// read exactly as they did. The state machine executes it at most once
/// and answers a resend with the stored results (`machine/sessions.rs`).
const CMD_BATCH_ID: u8 = 15;

// A share's durability (`ShareRecord::durability`).
const DURABILITY_ALWAYS: u8 = 0;
const DURABILITY_PROTOCOL: u8 = 1;

// Op tags.
const OP_LOOKUP: u8 = 1;
const OP_CREATE: u8 = 2;
const OP_OPEN: u8 = 3;
const OP_GETATTR: u8 = 4;
const OP_SETATTR: u8 = 5;
const OP_WRITE: u8 = 6;
const OP_READ: u8 = 7;
const OP_CLOSE: u8 = 8;
const OP_REMOVE: u8 = 9;
const OP_RENAME: u8 = 10;
const OP_LINK: u8 = 11;
const OP_READLINK: u8 = 12;
const OP_READDIR: u8 = 13;
const OP_COPY: u8 = 14;
const OP_LOOKUP_CASELESS: u8 = 15;
const OP_SET_EAS: u8 = 16;
const OP_GET_EAS: u8 = 17;
const OP_ZERO_RANGE: u8 = 18;
const OP_CREATE_CASELESS: u8 = 19;
const OP_SET_XATTR: u8 = 20;
const OP_CLONE: u8 = 21;
/// The snapshots of an object's share (read-only; layers).
const OP_LIST_SNAPSHOTS: u8 = 22;
/// The allocated ranges of a file (read-only; sparse files).
const OP_ALLOCATED: u8 = 23;
/// Named streams (SMB alternate data streams): open or create one.
const OP_OPEN_STREAM: u8 = 24;
/// Named streams: list a file's (read-only).
const OP_LIST_STREAMS: u8 = 25;
/// Named streams: delete one.
const OP_REMOVE_STREAM: u8 = 26;
/// Named streams: rename one.
const OP_RENAME_STREAM: u8 = 27;
/// Store or drop an object's DACL (issue 17; 28-29 unused).
const OP_SET_ACL: u8 = 30;
/// An object's stored DACL (read-only).
const OP_GET_ACL: u8 = 31;
/// Named streams: rename one onto its file's unnamed data stream.
const OP_RENAME_STREAM_TO_DATA: u8 = 32;

// XattrHow of OP_SET_XATTR.
const XATTR_EITHER: u8 = 0;
const XATTR_CREATE: u8 = 1;
const XATTR_REPLACE: u8 = 2;
const XATTR_REMOVE: u8 = 3;

/// Encodes `cmd` in the newest format. Cannot fail.
pub fn encode_command(cmd: &Command) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(COMMAND_V2);
    put_command(&mut w, cmd);
    w.buf
}

/// Decodes a command of any known format; every byte must be part of it.
pub fn decode_command(b: &[u8]) -> Result<Command, CommandError> {
    match b.first() {
        None => Err(CommandError::Empty),
        Some(&v @ (COMMAND_V1 | COMMAND_V2)) => {
            let mut r = Reader::new(b);
            r.u8("version")?;
            let cmd = get_command(&mut r, v)?;
            r.finish()?;
            Ok(cmd)
        }
        Some(_) if is_legacy(b) => decode_legacy(b),
        Some(&v) => Err(CommandError::UnknownVersion(v)),
    }
}

/// Variants `Command` had when its entries were bincode (Init ..= Destaged).
const LEGACY_VARIANTS: u8 = 7;

/// Whether `b` starts like a bincode `Command` (a little-endian u32
/// variant index below [`LEGACY_VARIANTS`]).
fn is_legacy(b: &[u8]) -> bool {
    b.len() >= 4 && b[0] < LEGACY_VARIANTS && b[1..4] == [0, 0, 0]
}

fn decode_legacy(b: &[u8]) -> Result<Command, CommandError> {
    use bincode::Options;
    // bincode 1's default layout (what `bincode::serialize` wrote), but
    // strict: no trailing bytes, no length longer than the input.
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .reject_trailing_bytes()
        .with_limit(b.len() as u64)
        .deserialize(b)
        .map_err(|e| CommandError::Legacy(e.to_string()))
}

// ---- encoding ----

fn put_command(w: &mut Writer, cmd: &Command) {
    match cmd {
        Command::Init { now_ns, admin_secrets, shares } => {
            let tagged = shares.iter().any(|s| s.durability != Durability::Always);
            w.u8(if tagged { CMD_INIT_DURABILITY } else { CMD_INIT });
            w.i64(*now_ns);
            w.u64(admin_secrets.len() as u64);
            for (name, secret) in admin_secrets {
                w.str(name);
                w.bytes(secret);
            }
            w.u64(shares.len() as u64);
            for s in shares {
                put_share(w, s);
                if tagged {
                    put_durability(w, s.durability);
                }
            }
        }
        // An id with a part 0 is no id (the decoder would refuse it, and an
        // entry no node can decode stops the group): such a batch goes as
        // a plain batch, executed as one without id.
        Command::Batch(b) => match b.request.filter(|id| id.origin != 0 && id.epoch != 0 && id.seq != 0) {
            None => {
                w.u8(CMD_BATCH);
                put_batch(w, b);
            }
            Some(id) => {
                w.u8(CMD_BATCH_ID);
                w.u64(id.origin);
                w.u64(id.epoch);
                w.u64(id.seq);
                put_batch(w, b);
            }
        },
        Command::PutShare { share, replace, now_ns } => {
            let tagged = share.durability != Durability::Always;
            w.u8(if tagged { CMD_PUT_SHARE_DURABILITY } else { CMD_PUT_SHARE });
            put_share(w, share);
            if tagged {
                put_durability(w, share.durability);
            }
            w.bool(*replace);
            w.i64(*now_ns);
        }
        Command::RemoveShare { name } => {
            w.u8(CMD_REMOVE_SHARE);
            w.str(name);
        }
        Command::PutUser { user, replace } => {
            w.u8(CMD_PUT_USER);
            put_user(w, user);
            w.bool(*replace);
        }
        Command::RemoveUser { name } => {
            w.u8(CMD_REMOVE_USER);
            w.str(name);
        }
        Command::Destaged { upto, reclaimed } => {
            w.u8(CMD_DESTAGED);
            w.u64(*upto);
            w.u64(reclaimed.len() as u64);
            for id in reclaimed {
                w.u64(*id);
            }
        }
        Command::PublicAddresses { assignment } => {
            w.u8(CMD_PUBLIC_ADDRESSES);
            w.u64(assignment.len() as u64);
            for (addr, node) in assignment {
                w.str(addr);
                w.u64(*node);
            }
        }
        Command::Snapshot { share, name, now_ns } => {
            w.u8(CMD_SNAPSHOT);
            w.str(share);
            w.str(name);
            w.i64(*now_ns);
        }
        Command::DropSnapshot { share, name, now_ns } => {
            w.u8(CMD_DROP_SNAPSHOT);
            w.str(share);
            w.str(name);
            w.i64(*now_ns);
        }
        Command::Clone { source, snapshot, share, now_ns } => {
            w.u8(CMD_CLONE);
            w.str(source);
            w.bool(snapshot.is_some());
            if let Some(s) = snapshot {
                w.str(s);
            }
            put_share(w, share);
            put_durability(w, share.durability);
            w.i64(*now_ns);
        }
        Command::SnapshotSchedule { share, schedule } => {
            w.u8(CMD_SNAPSHOT_SCHEDULE);
            w.str(share);
            w.bool(schedule.is_some());
            if let Some(s) = schedule {
                w.u64(s.every_s);
                w.u32(s.keep);
            }
        }
    }
}

fn put_durability(w: &mut Writer, d: Durability) {
    w.u8(match d {
        Durability::Always => DURABILITY_ALWAYS,
        Durability::Protocol => DURABILITY_PROTOCOL,
    });
}

fn get_durability(r: &mut Reader<'_>) -> R<Durability> {
    match r.tag("share durability")? {
        DURABILITY_ALWAYS => Ok(Durability::Always),
        DURABILITY_PROTOCOL => Ok(Durability::Protocol),
        t => r.unknown("share durability", t),
    }
}

/// A share record without its durability (written after it by the tagged
/// commands only).
fn put_share(w: &mut Writer, s: &ShareRecord) {
    let ShareRecord { name, path, smb, nfs, read_only, guest_ok, nfs_clients, root_squash, append_extension, durability: _ } =
        s;
    w.str(name);
    w.str(path);
    w.bool(*smb);
    w.bool(*nfs);
    w.bool(*read_only);
    w.bool(*guest_ok);
    w.u64(nfs_clients.len() as u64);
    for c in nfs_clients {
        w.str(c);
    }
    w.bool(*root_squash);
    w.bool(*append_extension);
}

// A user's uid and gid: 0 = the store picks one (the next free uid; for
// the gid, the uid), 1 = this value.
const ID_AUTO: u8 = 0;
const ID_GIVEN: u8 = 1;

fn put_auto_id(w: &mut Writer, v: u32) {
    if v == u32::MAX {
        w.u8(ID_AUTO);
    } else {
        w.u8(ID_GIVEN);
        w.u32(v);
    }
}

fn put_user(w: &mut Writer, u: &UserRecord) {
    let UserRecord { name, uid, gid, nt_hash, enabled } = u;
    w.str(name);
    put_auto_id(w, *uid);
    put_auto_id(w, *gid);
    w.raw(nt_hash);
    w.bool(*enabled);
}

fn put_batch(w: &mut Writer, b: &Batch) {
    // `lazy` and `flush` say how to answer the batch, not what it changes:
    // they are not in the entry.
    // `request` is written before the batch, under its own command tag.
    let Batch { cred, ops, stop_on_error, read_only, now_ns, lazy: _, flush: _, request: _ } = b;
    put_cred(w, cred);
    w.bool(*stop_on_error);
    w.bool(*read_only);
    w.i64(*now_ns);
    w.u64(ops.len() as u64);
    for op in ops {
        put_op(w, op);
    }
}

fn put_cred(w: &mut Writer, c: &Credentials) {
    let Credentials { uid, gid, groups } = c;
    w.u32(*uid);
    w.u32(*gid);
    w.u64(groups.len() as u64);
    for g in groups {
        w.u32(*g);
    }
}

const REF_ID: u8 = 0;
const REF_RESULT: u8 = 1;

fn put_ref(w: &mut Writer, r: &ObjRef) {
    match r {
        ObjRef::Id(id) => {
            w.u8(REF_ID);
            w.u64(*id);
        }
        ObjRef::Result(i) => {
            w.u8(REF_RESULT);
            w.u64(*i as u64);
        }
    }
}

const KIND_FILE: u8 = 0;
const KIND_DIRECTORY: u8 = 1;
const KIND_SYMLINK: u8 = 2;
const KIND_CHAR: u8 = 3;
const KIND_BLOCK: u8 = 4;
const KIND_FIFO: u8 = 5;
const KIND_SOCKET: u8 = 6;

fn put_kind(w: &mut Writer, k: &CreateKind) {
    match k {
        CreateKind::File => w.u8(KIND_FILE),
        CreateKind::Directory => w.u8(KIND_DIRECTORY),
        CreateKind::Symlink { target } => {
            w.u8(KIND_SYMLINK);
            w.str(target);
        }
        CreateKind::CharDevice { rdev } => {
            w.u8(KIND_CHAR);
            w.u64(*rdev);
        }
        CreateKind::BlockDevice { rdev } => {
            w.u8(KIND_BLOCK);
            w.u64(*rdev);
        }
        CreateKind::Fifo => w.u8(KIND_FIFO),
        CreateKind::Socket => w.u8(KIND_SOCKET),
    }
}

const IF_EXISTS_FAIL: u8 = 0;
const IF_EXISTS_OPEN: u8 = 1;
const IF_EXISTS_TRUNCATE: u8 = 2;

fn put_if_exists(w: &mut Writer, e: IfExists) {
    w.u8(match e {
        IfExists::Fail => IF_EXISTS_FAIL,
        IfExists::Open => IF_EXISTS_OPEN,
        IfExists::Truncate => IF_EXISTS_TRUNCATE,
    });
}

// Option tags.
const NONE: u8 = 0;
const SOME: u8 = 1;

fn put_opt_u32(w: &mut Writer, v: Option<u32>) {
    match v {
        None => w.u8(NONE),
        Some(v) => {
            w.u8(SOME);
            w.u32(v);
        }
    }
}

fn put_opt_u64(w: &mut Writer, v: Option<u64>) {
    match v {
        None => w.u8(NONE),
        Some(v) => {
            w.u8(SOME);
            w.u64(v);
        }
    }
}

fn put_opt_i64(w: &mut Writer, v: Option<i64>) {
    match v {
        None => w.u8(NONE),
        Some(v) => {
            w.u8(SOME);
            w.i64(v);
        }
    }
}

// An allocation size: none, a reservation that never shrinks the file, or
// one that also cuts the file at it (in memory: `ALLOC_TRUNCATES` set).
const ALLOC_NONE: u8 = 0;
const ALLOC_RESERVE: u8 = 1;
const ALLOC_RESERVE_AND_CUT: u8 = 2;

// A time to set: none, the batch's time, this time.
const TIME_NONE: u8 = 0;
const TIME_SERVER_NOW: u8 = 1;
const TIME_AT: u8 = 2;

// The change time: the batch's time (POSIX: `None`), this time, or left
// alone (in memory: `CTIME_KEEP`).
const CTIME_NOW: u8 = 0;
const CTIME_AT: u8 = 1;
const CTIME_UNCHANGED: u8 = 2;

fn put_set_time(w: &mut Writer, t: Option<SetTime>) {
    match t {
        None => w.u8(TIME_NONE),
        Some(SetTime::ServerNow) => w.u8(TIME_SERVER_NOW),
        Some(SetTime::At(t)) => {
            w.u8(TIME_AT);
            w.i64(t);
        }
    }
}

fn put_set_attrs(w: &mut Writer, a: &SetAttrs) {
    let SetAttrs { mode, uid, gid, size, alloc_size, dos_attrs, btime, atime, mtime, ctime } = a;
    put_opt_u32(w, *mode);
    put_opt_u32(w, *uid);
    put_opt_u32(w, *gid);
    put_opt_u64(w, *size);
    match alloc_size {
        None => w.u8(ALLOC_NONE),
        Some(a) if a & ALLOC_TRUNCATES != 0 => {
            w.u8(ALLOC_RESERVE_AND_CUT);
            w.u64(a & !ALLOC_TRUNCATES);
        }
        Some(a) => {
            w.u8(ALLOC_RESERVE);
            w.u64(*a);
        }
    }
    put_opt_u32(w, *dos_attrs);
    put_opt_i64(w, *btime);
    put_set_time(w, *atime);
    put_set_time(w, *mtime);
    match ctime {
        None => w.u8(CTIME_NOW),
        Some(CTIME_KEEP) => w.u8(CTIME_UNCHANGED),
        Some(t) => {
            w.u8(CTIME_AT);
            w.i64(*t);
        }
    }
}

const DATA_BYTES: u8 = 0;
/// This node's log sequence number, length (what version 1 wrote).
const DATA_LOGGED: u8 = 1;
/// Version 2 on: extent origin, extent sequence, length.
const DATA_EXTENT: u8 = 2;

// Remove: what may be removed.
const REMOVE_ANY: u8 = 0;
const REMOVE_NON_DIRECTORY: u8 = 1;
const REMOVE_DIRECTORY: u8 = 2;

// Copy length: to the end of the source (in memory: `u64::MAX`), or this many.
const COPY_TO_END: u8 = 0;
const COPY_LEN: u8 = 1;

fn put_op(w: &mut Writer, op: &Op) {
    match op {
        Op::Lookup { dir, name } => {
            w.u8(OP_LOOKUP);
            put_ref(w, dir);
            w.str(name);
        }
        Op::Create { dir, name, kind, attrs, if_exists } | Op::CreateCaseless { dir, name, kind, attrs, if_exists } => {
            w.u8(if matches!(op, Op::Create { .. }) { OP_CREATE } else { OP_CREATE_CASELESS });
            put_ref(w, dir);
            w.str(name);
            put_kind(w, kind);
            put_set_attrs(w, attrs);
            put_if_exists(w, *if_exists);
        }
        Op::Open { obj, access, truncate } => {
            w.u8(OP_OPEN);
            put_ref(w, obj);
            let Access { read, write, execute } = access;
            w.bool(*read);
            w.bool(*write);
            w.bool(*execute);
            w.bool(*truncate);
        }
        Op::GetAttr { obj } => {
            w.u8(OP_GETATTR);
            put_ref(w, obj);
        }
        Op::SetAttr { obj, attrs } => {
            w.u8(OP_SETATTR);
            put_ref(w, obj);
            put_set_attrs(w, attrs);
        }
        Op::Write { obj, offset, data, append } => {
            w.u8(OP_WRITE);
            put_ref(w, obj);
            w.u64(*offset);
            match data {
                WriteData::Bytes(b) => {
                    w.u8(DATA_BYTES);
                    w.bytes(b);
                }
                WriteData::Logged { lsn, len } => {
                    w.u8(DATA_LOGGED);
                    w.u64(*lsn);
                    w.u64(*len);
                }
                WriteData::Extent { extent, len } => {
                    w.u8(DATA_EXTENT);
                    w.u64(extent.origin);
                    w.u64(extent.seq);
                    w.u64(*len);
                }
            }
            w.bool(*append);
        }
        Op::Read { obj, offset, len } => {
            w.u8(OP_READ);
            put_ref(w, obj);
            w.u64(*offset);
            w.u64(*len);
        }
        Op::Close { obj } => {
            w.u8(OP_CLOSE);
            put_ref(w, obj);
        }
        Op::Remove { dir, name, dir_only } => {
            w.u8(OP_REMOVE);
            put_ref(w, dir);
            w.str(name);
            w.u8(match dir_only {
                None => REMOVE_ANY,
                Some(false) => REMOVE_NON_DIRECTORY,
                Some(true) => REMOVE_DIRECTORY,
            });
        }
        Op::Rename { src_dir, src_name, dst_dir, dst_name, replace } => {
            w.u8(OP_RENAME);
            put_ref(w, src_dir);
            w.str(src_name);
            put_ref(w, dst_dir);
            w.str(dst_name);
            w.bool(*replace);
        }
        Op::Link { obj, dir, name } => {
            w.u8(OP_LINK);
            put_ref(w, obj);
            put_ref(w, dir);
            w.str(name);
        }
        Op::ReadLink { obj } => {
            w.u8(OP_READLINK);
            put_ref(w, obj);
        }
        Op::ReadDir { dir, after, max_entries, with_attrs } => {
            w.u8(OP_READDIR);
            put_ref(w, dir);
            match after {
                None => w.u8(NONE),
                Some(a) => {
                    w.u8(SOME);
                    w.str(a);
                }
            }
            w.u32(*max_entries);
            w.bool(*with_attrs);
        }
        Op::Copy { src, src_offset, dst, dst_offset, len } => {
            w.u8(OP_COPY);
            put_ref(w, src);
            w.u64(*src_offset);
            put_ref(w, dst);
            w.u64(*dst_offset);
            put_range_len(w, *len);
        }
        Op::Clone { src, src_offset, dst, dst_offset, len, extend } => {
            w.u8(OP_CLONE);
            put_ref(w, src);
            w.u64(*src_offset);
            put_ref(w, dst);
            w.u64(*dst_offset);
            put_range_len(w, *len);
            w.bool(*extend);
        }
        Op::ListSnapshots { obj } => {
            w.u8(OP_LIST_SNAPSHOTS);
            put_ref(w, obj);
        }
        Op::Allocated { obj, offset, len } => {
            w.u8(OP_ALLOCATED);
            put_ref(w, obj);
            w.u64(*offset);
            w.u64(*len);
        }
        Op::SetAcl { obj, acl } => {
            w.u8(OP_SET_ACL);
            put_ref(w, obj);
            match acl {
                None => w.bool(false),
                Some((control, bytes)) => {
                    w.bool(true);
                    w.u64(u64::from(*control));
                    w.bytes(bytes);
                }
            }
        }
        Op::GetAcl { obj } => {
            w.u8(OP_GET_ACL);
            put_ref(w, obj);
        }
        Op::LookupCaseless { dir, name } => {
            w.u8(OP_LOOKUP_CASELESS);
            put_ref(w, dir);
            w.str(name);
        }
        Op::SetEas { obj, eas } => {
            w.u8(OP_SET_EAS);
            put_ref(w, obj);
            w.u64(eas.len() as u64);
            for (name, value) in eas {
                w.str(name);
                w.bytes(value);
            }
        }
        Op::GetEas { obj } => {
            w.u8(OP_GET_EAS);
            put_ref(w, obj);
        }
        Op::ZeroRange { obj, offset, len } => {
            w.u8(OP_ZERO_RANGE);
            put_ref(w, obj);
            w.u64(*offset);
            w.u64(*len);
        }
        Op::OpenStream { obj, name, attrs, create } => {
            w.u8(OP_OPEN_STREAM);
            put_ref(w, obj);
            w.str(name);
            put_set_attrs(w, attrs);
            match create {
                None => w.u8(NONE),
                Some(how) => {
                    w.u8(SOME);
                    put_if_exists(w, *how);
                }
            }
        }
        Op::ListStreams { obj } => {
            w.u8(OP_LIST_STREAMS);
            put_ref(w, obj);
        }
        Op::RemoveStream { obj, name } => {
            w.u8(OP_REMOVE_STREAM);
            put_ref(w, obj);
            w.str(name);
        }
        Op::RenameStream { obj, name, new_name, replace } => {
            w.u8(OP_RENAME_STREAM);
            put_ref(w, obj);
            w.str(name);
            w.str(new_name);
            w.bool(*replace);
        }
        Op::RenameStreamToData { obj, name, replace } => {
            w.u8(OP_RENAME_STREAM_TO_DATA);
            put_ref(w, obj);
            w.str(name);
            w.bool(*replace);
        }
        Op::SetXattr { obj, name, value, how } => {
            w.u8(OP_SET_XATTR);
            put_ref(w, obj);
            w.str(name);
            w.bytes(value);
            w.u8(match how {
                XattrHow::Either => XATTR_EITHER,
                XattrHow::Create => XATTR_CREATE,
                XattrHow::Replace => XATTR_REPLACE,
                XattrHow::Remove => XATTR_REMOVE,
            });
        }
    }
}

// ---- decoding ----

type R<T> = Result<T, WireError>;

fn get_command(r: &mut Reader<'_>, v: u8) -> R<Command> {
    let tag = r.tag("command")?;
    Ok(match tag {
        CMD_INIT | CMD_INIT_DURABILITY => {
            let now_ns = r.i64("init time")?;
            let n = r.count("admin secrets")?;
            let mut admin_secrets = Vec::with_capacity(n);
            for _ in 0..n {
                admin_secrets.push((r.string("admin secret name")?, r.bytes("admin secret")?));
            }
            let n = r.count("shares")?;
            let mut shares = Vec::with_capacity(n);
            for _ in 0..n {
                let mut share = get_share(r)?;
                if tag == CMD_INIT_DURABILITY {
                    share.durability = get_durability(r)?;
                }
                shares.push(share);
            }
            Command::Init { now_ns, admin_secrets, shares }
        }
        CMD_BATCH => Command::Batch(get_batch(r, v)?),
        CMD_BATCH_ID => {
            let origin = get_id_part(r, "request origin")?;
            let epoch = get_id_part(r, "request epoch")?;
            let seq = get_id_part(r, "request seq")?;
            let mut batch = get_batch(r, v)?;
            batch.request = Some(duet_fs::RequestId { origin, epoch, seq });
            Command::Batch(batch)
        }
        CMD_PUT_SHARE | CMD_PUT_SHARE_DURABILITY => {
            let mut share = get_share(r)?;
            if tag == CMD_PUT_SHARE_DURABILITY {
                share.durability = get_durability(r)?;
            }
            let replace = r.bool("replace")?;
            let now_ns = r.i64("share time")?;
            Command::PutShare { share, replace, now_ns }
        }
        CMD_REMOVE_SHARE => Command::RemoveShare { name: r.string("share name")? },
        CMD_PUT_USER => {
            let user = get_user(r)?;
            let replace = r.bool("replace")?;
            Command::PutUser { user, replace }
        }
        CMD_REMOVE_USER => Command::RemoveUser { name: r.string("user name")? },
        CMD_DESTAGED => {
            let upto = r.u64("destaged upto")?;
            let n = r.count("reclaimed files")?;
            let mut reclaimed = Vec::with_capacity(n);
            for _ in 0..n {
                reclaimed.push(r.u64("reclaimed file")?);
            }
            Command::Destaged { upto, reclaimed }
        }
        CMD_PUBLIC_ADDRESSES => {
            let n = r.count("public addresses")?;
            let mut assignment = Vec::with_capacity(n);
            for _ in 0..n {
                assignment.push((r.string("public address")?, r.u64("public address holder")?));
            }
            Command::PublicAddresses { assignment }
        }
        CMD_SNAPSHOT => {
            let share = r.string("share name")?;
            let name = r.string("snapshot name")?;
            let now_ns = r.i64("snapshot time")?;
            Command::Snapshot { share, name, now_ns }
        }
        CMD_DROP_SNAPSHOT => {
            let share = r.string("share name")?;
            let name = r.string("snapshot name")?;
            let now_ns = r.i64("snapshot deletion time")?;
            Command::DropSnapshot { share, name, now_ns }
        }
        CMD_CLONE => {
            let source = r.string("clone source")?;
            let snapshot = if r.bool("clone of a snapshot")? { Some(r.string("clone snapshot")?) } else { None };
            let mut share = get_share(r)?;
            share.durability = get_durability(r)?;
            let now_ns = r.i64("clone time")?;
            Command::Clone { source, snapshot, share, now_ns }
        }
        CMD_SNAPSHOT_SCHEDULE => {
            let share = r.string("share name")?;
            let schedule = if r.bool("snapshot schedule set")? {
                let every_s = r.u64("snapshot schedule interval")?;
                let keep = r.u32("snapshot schedule keep")?;
                Some(crate::records::ScheduleRecord { every_s, keep })
            } else {
                None
            };
            Command::SnapshotSchedule { share, schedule }
        }
        t => return r.unknown("command", t),
    })
}

fn get_share(r: &mut Reader<'_>) -> R<ShareRecord> {
    let name = r.string("share name")?;
    let path = r.string("share path")?;
    let smb = r.bool("share smb")?;
    let nfs = r.bool("share nfs")?;
    let read_only = r.bool("share read_only")?;
    let guest_ok = r.bool("share guest_ok")?;
    let n = r.count("share nfs_clients")?;
    let mut nfs_clients = Vec::with_capacity(n);
    for _ in 0..n {
        nfs_clients.push(r.string("share nfs client")?);
    }
    let root_squash = r.bool("share root_squash")?;
    let append_extension = r.bool("share append_extension")?;
    Ok(ShareRecord {
        name,
        path,
        smb,
        nfs,
        read_only,
        guest_ok,
        nfs_clients,
        root_squash,
        append_extension,
        durability: Durability::Always,
    })
}

fn get_auto_id(r: &mut Reader<'_>, what: &'static str) -> R<u32> {
    match r.tag(what)? {
        ID_AUTO => Ok(u32::MAX),
        ID_GIVEN => {
            let at = r.pos();
            match r.u32(what)? {
                u32::MAX => r.invalid(at, what), // the in-memory "pick one"
                v => Ok(v),
            }
        }
        t => r.unknown(what, t),
    }
}

fn get_user(r: &mut Reader<'_>) -> R<UserRecord> {
    let name = r.string("user name")?;
    let uid = get_auto_id(r, "user uid")?;
    let gid = get_auto_id(r, "user gid")?;
    let mut nt_hash = [0u8; 16];
    nt_hash.copy_from_slice(r.raw(16, "user nt hash")?);
    let enabled = r.bool("user enabled")?;
    Ok(UserRecord { name, uid, gid, nt_hash, enabled })
}

fn get_batch(r: &mut Reader<'_>, v: u8) -> R<Batch> {
    let cred = get_cred(r)?;
    let stop_on_error = r.bool("batch stop_on_error")?;
    let read_only = r.bool("batch read_only")?;
    let now_ns = r.i64("batch time")?;
    let n = r.count("batch ops")?;
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        ops.push(get_op(r, v)?);
    }
    Ok(Batch { cred, ops, stop_on_error, read_only, now_ns, lazy: false, flush: false, request: None })
}

/// A part of a request id: from 1 (0 is never written, and refused).
fn get_id_part(r: &mut Reader<'_>, what: &'static str) -> R<u64> {
    let at = r.pos();
    match r.u64(what)? {
        0 => r.invalid(at, what),
        v => Ok(v),
    }
}

fn get_cred(r: &mut Reader<'_>) -> R<Credentials> {
    let uid = r.u32("cred uid")?;
    let gid = r.u32("cred gid")?;
    let n = r.count("cred groups")?;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        groups.push(r.u32("cred group")?);
    }
    Ok(Credentials { uid, gid, groups })
}

/// The length of a COPY or CLONE: "to the end" is its own tag, never
/// u64::MAX on the wire.
fn put_range_len(w: &mut Writer, len: u64) {
    if len == u64::MAX {
        w.u8(COPY_TO_END);
    } else {
        w.u8(COPY_LEN);
        w.u64(len);
    }
}

fn get_range_len(r: &mut Reader<'_>, what: &'static str) -> R<u64> {
    match r.tag(what)? {
        COPY_TO_END => Ok(u64::MAX),
        COPY_LEN => {
            let at = r.pos();
            match r.u64(what)? {
                u64::MAX => r.invalid(at, what),
                n => Ok(n),
            }
        }
        t => r.unknown(what, t),
    }
}

fn get_ref(r: &mut Reader<'_>) -> R<ObjRef> {
    match r.tag("object ref")? {
        REF_ID => Ok(ObjRef::Id(r.u64("object id")?)),
        REF_RESULT => {
            let at = r.pos();
            let i = r.u64("result ref")?;
            usize::try_from(i).map(ObjRef::Result).or_else(|_| r.invalid(at, "result ref"))
        }
        t => r.unknown("object ref", t),
    }
}

fn get_kind(r: &mut Reader<'_>) -> R<CreateKind> {
    Ok(match r.tag("create kind")? {
        KIND_FILE => CreateKind::File,
        KIND_DIRECTORY => CreateKind::Directory,
        KIND_SYMLINK => CreateKind::Symlink { target: r.string("symlink target")? },
        KIND_CHAR => CreateKind::CharDevice { rdev: r.u64("rdev")? },
        KIND_BLOCK => CreateKind::BlockDevice { rdev: r.u64("rdev")? },
        KIND_FIFO => CreateKind::Fifo,
        KIND_SOCKET => CreateKind::Socket,
        t => return r.unknown("create kind", t),
    })
}

fn get_if_exists(r: &mut Reader<'_>) -> R<IfExists> {
    Ok(match r.tag("if_exists")? {
        IF_EXISTS_FAIL => IfExists::Fail,
        IF_EXISTS_OPEN => IfExists::Open,
        IF_EXISTS_TRUNCATE => IfExists::Truncate,
        t => return r.unknown("if_exists", t),
    })
}

fn get_opt<T>(r: &mut Reader<'_>, what: &'static str, f: impl FnOnce(&mut Reader<'_>) -> R<T>) -> R<Option<T>> {
    match r.tag(what)? {
        NONE => Ok(None),
        SOME => f(r).map(Some),
        t => r.unknown(what, t),
    }
}

fn get_set_time(r: &mut Reader<'_>, what: &'static str) -> R<Option<SetTime>> {
    Ok(match r.tag(what)? {
        TIME_NONE => None,
        TIME_SERVER_NOW => Some(SetTime::ServerNow),
        TIME_AT => Some(SetTime::At(r.i64(what)?)),
        t => return r.unknown(what, t),
    })
}

fn get_set_attrs(r: &mut Reader<'_>) -> R<SetAttrs> {
    let mode = get_opt(r, "mode", |r| r.u32("mode"))?;
    let uid = get_opt(r, "uid", |r| r.u32("uid"))?;
    let gid = get_opt(r, "gid", |r| r.u32("gid"))?;
    let size = get_opt(r, "size", |r| r.u64("size"))?;
    let alloc_size = match r.tag("alloc_size")? {
        ALLOC_NONE => None,
        t @ (ALLOC_RESERVE | ALLOC_RESERVE_AND_CUT) => {
            let at = r.pos();
            let a = r.u64("alloc_size")?;
            if a & ALLOC_TRUNCATES != 0 {
                return r.invalid(at, "alloc_size");
            }
            Some(if t == ALLOC_RESERVE_AND_CUT { a | ALLOC_TRUNCATES } else { a })
        }
        t => return r.unknown("alloc_size", t),
    };
    let dos_attrs = get_opt(r, "dos_attrs", |r| r.u32("dos_attrs"))?;
    let btime = get_opt(r, "btime", |r| r.i64("btime"))?;
    let atime = get_set_time(r, "atime")?;
    let mtime = get_set_time(r, "mtime")?;
    let ctime: Option<TimeNs> = match r.tag("ctime")? {
        CTIME_NOW => None,
        CTIME_AT => {
            let at = r.pos();
            match r.i64("ctime")? {
                CTIME_KEEP => return r.invalid(at, "ctime"),
                t => Some(t),
            }
        }
        CTIME_UNCHANGED => Some(CTIME_KEEP),
        t => return r.unknown("ctime", t),
    };
    Ok(SetAttrs { mode, uid, gid, size, alloc_size, dos_attrs, btime, atime, mtime, ctime })
}

/// An extent name: origin and sequence, both from 1 (origin 0, "this
/// node's lsn", is `DATA_LOGGED`'s meaning, never an extent's).
fn get_extent(r: &mut Reader<'_>) -> R<ExtentId> {
    let at = r.pos();
    let origin = r.u64("extent origin")?;
    if origin == ExtentId::LEGACY_LOCAL {
        return r.invalid(at, "extent origin (0)");
    }
    let at = r.pos();
    let seq = r.u64("extent sequence")?;
    if seq == 0 {
        return r.invalid(at, "extent sequence (0)");
    }
    Ok(ExtentId { origin, seq })
}

fn get_op(r: &mut Reader<'_>, v: u8) -> R<Op> {
    let tag = r.tag("op")?;
    Ok(match tag {
        OP_LOOKUP => Op::Lookup { dir: get_ref(r)?, name: r.string("name")? },
        OP_CREATE | OP_CREATE_CASELESS => {
            // The same fields, in the same order, for both.
            let (dir, name) = (get_ref(r)?, r.string("name")?);
            let (kind, attrs, if_exists) = (get_kind(r)?, get_set_attrs(r)?, get_if_exists(r)?);
            if tag == OP_CREATE {
                Op::Create { dir, name, kind, attrs, if_exists }
            } else {
                Op::CreateCaseless { dir, name, kind, attrs, if_exists }
            }
        }
        OP_OPEN => {
            let obj = get_ref(r)?;
            let access = Access { read: r.bool("read")?, write: r.bool("write")?, execute: r.bool("execute")? };
            Op::Open { obj, access, truncate: r.bool("truncate")? }
        }
        OP_GETATTR => Op::GetAttr { obj: get_ref(r)? },
        OP_SETATTR => Op::SetAttr { obj: get_ref(r)?, attrs: get_set_attrs(r)? },
        OP_WRITE => {
            let obj = get_ref(r)?;
            let offset = r.u64("offset")?;
            let data = match r.tag("write data")? {
                DATA_BYTES => WriteData::Bytes(r.bytes("write bytes")?),
                DATA_LOGGED => WriteData::Logged { lsn: r.u64("lsn")?, len: r.u64("len")? },
                DATA_EXTENT if v >= COMMAND_V2 => WriteData::Extent { extent: get_extent(r)?, len: r.u64("len")? },
                t => return r.unknown("write data", t),
            };
            Op::Write { obj, offset, data, append: r.bool("append")? }
        }
        OP_READ => Op::Read { obj: get_ref(r)?, offset: r.u64("offset")?, len: r.u64("len")? },
        OP_CLOSE => Op::Close { obj: get_ref(r)? },
        OP_REMOVE => {
            let dir = get_ref(r)?;
            let name = r.string("name")?;
            let dir_only = match r.tag("remove kind")? {
                REMOVE_ANY => None,
                REMOVE_NON_DIRECTORY => Some(false),
                REMOVE_DIRECTORY => Some(true),
                t => return r.unknown("remove kind", t),
            };
            Op::Remove { dir, name, dir_only }
        }
        OP_RENAME => Op::Rename {
            src_dir: get_ref(r)?,
            src_name: r.string("name")?,
            dst_dir: get_ref(r)?,
            dst_name: r.string("name")?,
            replace: r.bool("replace")?,
        },
        OP_LINK => Op::Link { obj: get_ref(r)?, dir: get_ref(r)?, name: r.string("name")? },
        OP_READLINK => Op::ReadLink { obj: get_ref(r)? },
        OP_READDIR => Op::ReadDir {
            dir: get_ref(r)?,
            after: get_opt(r, "after", |r| r.string("after"))?,
            max_entries: r.u32("max_entries")?,
            with_attrs: r.bool("with_attrs")?,
        },
        OP_COPY => {
            let src = get_ref(r)?;
            let src_offset = r.u64("src_offset")?;
            let dst = get_ref(r)?;
            let dst_offset = r.u64("dst_offset")?;
            let len = get_range_len(r, "copy len")?;
            Op::Copy { src, src_offset, dst, dst_offset, len }
        }
        OP_CLONE => {
            let src = get_ref(r)?;
            let src_offset = r.u64("src_offset")?;
            let dst = get_ref(r)?;
            let dst_offset = r.u64("dst_offset")?;
            let len = get_range_len(r, "clone len")?;
            Op::Clone { src, src_offset, dst, dst_offset, len, extend: r.bool("extend")? }
        }
        OP_LOOKUP_CASELESS => Op::LookupCaseless { dir: get_ref(r)?, name: r.string("name")? },
        OP_LIST_SNAPSHOTS => Op::ListSnapshots { obj: get_ref(r)? },
        OP_ALLOCATED => Op::Allocated { obj: get_ref(r)?, offset: r.u64("offset")?, len: r.u64("len")? },
        OP_SET_EAS => {
            let obj = get_ref(r)?;
            let n = r.count("eas")?;
            let mut eas = Vec::with_capacity(n);
            for _ in 0..n {
                eas.push((r.string("ea name")?, r.bytes("ea value")?));
            }
            Op::SetEas { obj, eas }
        }
        OP_GET_EAS => Op::GetEas { obj: get_ref(r)? },
        OP_SET_ACL => {
            let obj = get_ref(r)?;
            let acl = if r.bool("acl present")? {
                let at = r.pos();
                let control = r.u64("acl control")?;
                let Ok(control) = u16::try_from(control) else {
                    return r.invalid(at, "acl control");
                };
                Some((control, r.bytes("acl")?))
            } else {
                None
            };
            Op::SetAcl { obj, acl }
        }
        OP_GET_ACL => Op::GetAcl { obj: get_ref(r)? },
        OP_ZERO_RANGE => Op::ZeroRange { obj: get_ref(r)?, offset: r.u64("offset")?, len: r.u64("len")? },
        OP_SET_XATTR => {
            let obj = get_ref(r)?;
            let name = r.string("xattr name")?;
            let value = r.bytes("xattr value")?;
            let how = match r.tag("xattr how")? {
                XATTR_EITHER => XattrHow::Either,
                XATTR_CREATE => XattrHow::Create,
                XATTR_REPLACE => XattrHow::Replace,
                XATTR_REMOVE => XattrHow::Remove,
                t => return r.unknown("xattr how", t),
            };
            Op::SetXattr { obj, name, value, how }
        }
        OP_OPEN_STREAM => Op::OpenStream {
            obj: get_ref(r)?,
            name: r.string("stream name")?,
            attrs: get_set_attrs(r)?,
            create: get_opt(r, "stream create", get_if_exists)?,
        },
        OP_LIST_STREAMS => Op::ListStreams { obj: get_ref(r)? },
        OP_REMOVE_STREAM => Op::RemoveStream { obj: get_ref(r)?, name: r.string("stream name")? },
        OP_RENAME_STREAM => Op::RenameStream {
            obj: get_ref(r)?,
            name: r.string("stream name")?,
            new_name: r.string("new stream name")?,
            replace: r.bool("replace")?,
        },
        OP_RENAME_STREAM_TO_DATA => Op::RenameStreamToData {
            obj: get_ref(r)?,
            name: r.string("stream name")?,
            replace: r.bool("replace")?,
        },
        t => return r.unknown("op", t),
    })
}
