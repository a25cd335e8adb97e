//! duet's lock manager, protocol-neutral and sans-I/O: who holds what on
//! which file, for SMB and NFS together.
//!
//! * **Share reservations** ([`Share`]): the opens of a file with the
//!   access they use and the access they deny others (SMB ShareAccess,
//!   MS-SMB2 2.2.13 and the share check of MS-FSA 2.1.5.1.2; NFSv4
//!   share_access / share_deny, RFC 8881 9.7).
//! * **Byte-range locks** ([`Range`]): shared or exclusive, SMB
//!   (stacking, exact unlock, MS-FSA 2.1.5.8 / 2.1.5.9) and POSIX (NFSv4:
//!   an owner's new lock replaces its overlapping ranges, unlock splits,
//!   RFC 8881 9.2 and 18.10), conflicts tested for I/O ([`Table::check_io`]:
//!   SMB locks are mandatory, MS-FSA 2.1.4.10; NFS locks are advisory to
//!   NFS I/O and binding on SMB I/O), blocking waiters queued with an
//!   optional deadline and granted in order when what blocked them goes.
//! * **Caching grants** ([`grant`]): SMB oplocks and leases, NFSv4
//!   delegations, as levels of read / write / handle caching that move
//!   granted -> breaking -> lowered or revoked, with break deadlines out of
//!   [`Table::poll_timeout`] / [`Table::handle_timeout`].
//!
//! Files are keyed by [`FileId`] (duet's `NodeId`), holders by
//! [`Holder`]: (protocol, client or connection, owner or open).
//!
//! Architecture Invariant: no I/O, no clock, no threads of its own: time
//! comes in as a monotonic `now` (nanoseconds) and what the table decides
//! comes back as values. [`LockManager`] is the one table of a daemon
//! behind a mutex, shared by every connection of every protocol.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

pub mod grant;
mod range;

pub use grant::{AckError, Break, Conflict, GrantId, Level, Scope};
pub use range::Range;

/// A file (duet's `NodeId`).
pub type FileId = u64;

/// The protocol a holder speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Smb,
    Nfs4,
    /// NLM (NFSv3 locks and shares, `nfs/server/nlm.rs`: client = an NLM
    /// host, never 0; client 0 is the NFSv3 server's break holder): POSIX
    /// and advisory like NFSv4.
    Nlm,
}

impl Protocol {
    /// Whether this protocol's locks bind I/O (SMB: MS-FSA 2.1.4.10) or
    /// are advisory (POSIX locks of NFS clients).
    pub fn mandatory(self) -> bool {
        matches!(self, Protocol::Smb)
    }

    /// Whether an owner's locks replace and split (POSIX, RFC 8881 9.2)
    /// instead of stacking (SMB).
    pub fn posix(self) -> bool {
        !matches!(self, Protocol::Smb)
    }
}

/// Who holds an open, a lock or a grant: the protocol, the client (an SMB
/// connection key, an NFSv4 client id) and the owner within it (an SMB
/// open's file id; an NFSv4 open or lock stateid's counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Holder {
    pub proto: Protocol,
    pub client: u64,
    pub owner: u64,
}

impl Holder {
    pub fn new(proto: Protocol, client: u64, owner: u64) -> Holder {
        Holder { proto, client, owner }
    }

    fn client_key(&self) -> (Protocol, u64) {
        (self.proto, self.client)
    }
}

/// Bounds on every kind of state (docs/limits.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Share reservations (opens) in the whole table.
    pub opens: usize,
    /// Byte-range locks on one file.
    pub locks_per_file: usize,
    /// Byte-range locks of one holder (one SMB open, one NFS lock owner
    /// on one file).
    pub locks_per_holder: usize,
    /// Byte-range locks in the whole table.
    pub locks: usize,
    /// Blocked lock requests waiting on one file.
    pub waiters_per_file: usize,
    /// Blocked lock requests in the whole table.
    pub waiters: usize,
    /// Caching grants (oplocks, leases, delegations) in the whole table.
    pub grants: usize,
    /// How long a holder has to acknowledge a break (ns) before its grant
    /// is revoked (MS-SMB2 3.3.2.1 oplock break timer: 35 s on Windows;
    /// an NFSv4 client gets its lease period).
    pub break_timeout_ns: i64,
    /// How long after a recall a file is granted nothing new (ns), so that
    /// a recalled right does not bounce straight back.
    pub recall_backoff_ns: i64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            opens: 1 << 20,
            locks_per_file: 4096,
            locks_per_holder: 4096,
            locks: 1 << 18,
            waiters_per_file: 256,
            waiters: 4096,
            grants: 1 << 16,
            break_timeout_ns: 35_000_000_000,
            recall_backoff_ns: 1_000_000_000,
        }
    }
}

/// Share reservation bits, shared by both protocols.
pub mod share {
    pub const READ: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const DELETE: u8 = 4;
    pub const ALL: u8 = 7;
}

/// What an open uses of a file and what it denies other opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    pub access: u8,
    pub deny: u8,
}

impl Share {
    /// An SMB open: `granted` is its access mask (MS-SMB2 2.2.13.1, generic
    /// rights already mapped), `share_access` CREATE's ShareAccess.
    /// FILE_READ_DATA and FILE_EXECUTE read, FILE_WRITE_DATA and
    /// FILE_APPEND_DATA write, DELETE deletes (MS-FSA 2.1.5.1.2); an open
    /// with none of them takes no part in the check.
    pub fn smb(granted: u32, share_access: u32) -> Share {
        let mut access = 0;
        if granted & (0x1 | 0x20) != 0 {
            access |= share::READ;
        }
        if granted & (0x2 | 0x4) != 0 {
            access |= share::WRITE;
        }
        if granted & 0x1_0000 != 0 {
            access |= share::DELETE;
        }
        Share { access, deny: !(share_access as u8) & share::ALL }
    }

    /// An NFSv4 open (RFC 8881 18.16.3): OPEN4_SHARE_ACCESS_READ 1, _WRITE
    /// 2; OPEN4_SHARE_DENY_READ 1, _WRITE 2. NFS has no delete access; an
    /// SMB open asking for DELETE is not refused by an NFS open.
    pub fn nfs(share_access: u32, share_deny: u32) -> Share {
        Share {
            access: (share_access & 3) as u8,
            deny: (share_deny & 3) as u8,
        }
    }

    /// Whether two opens may coexist: neither uses what the other denies.
    /// An open that uses nothing (attributes only) conflicts with nobody
    /// (MS-FSA 2.1.5.1.2; RFC 8881 opens always use read or write).
    pub fn compatible(&self, o: &Share) -> bool {
        if self.access == 0 || o.access == 0 {
            return true;
        }
        self.access & o.deny == 0 && o.access & self.deny == 0
    }

    fn union(&self, o: &Share) -> Share {
        Share { access: self.access | o.access, deny: self.deny | o.deny }
    }
}

/// A byte-range lock as others see it (the conflicting lock of a denial).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub holder: Holder,
    pub range: Range,
    pub exclusive: bool,
}

/// Why a lock was not granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockError {
    /// Someone holds a conflicting lock (STATUS_LOCK_NOT_GRANTED,
    /// NFS4ERR_DENIED with this lock).
    Conflict(LockInfo),
    /// A limit of [`Limits`] was reached (STATUS_INSUFFICIENT_RESOURCES,
    /// NFS4ERR_DELAY / NFS4ERR_RESOURCE).
    Limit,
}

/// A queued (blocked) lock request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub u64);

/// What became of a queued request; kept for its client until it takes
/// it ([`Table::take_outcomes`]) and also returned by the call that
/// decided it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The lock is now held.
    Granted { id: WaiterId, file: FileId, holder: Holder, tag: u64 },
    /// The deadline passed first.
    Expired { id: WaiterId, file: FileId, holder: Holder, tag: u64 },
    /// The holder went away (its open closed, its client was dropped).
    Dropped { id: WaiterId, file: FileId, holder: Holder, tag: u64 },
}

impl Outcome {
    pub fn id(&self) -> WaiterId {
        match *self {
            Outcome::Granted { id, .. } | Outcome::Expired { id, .. } | Outcome::Dropped { id, .. } => id,
        }
    }

    fn holder(&self) -> Holder {
        match *self {
            Outcome::Granted { holder, .. }
            | Outcome::Expired { holder, .. }
            | Outcome::Dropped { holder, .. } => holder,
        }
    }
}

/// What a timer run decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    /// Waiters whose deadline passed.
    pub expired: Vec<Outcome>,
    /// Grants revoked because their break was not acknowledged in time.
    pub revoked: Vec<(GrantId, Holder)>,
    /// Waiters granted because a revocation freed what they waited on
    /// (none today: grants do not block locks).
    pub granted: Vec<Outcome>,
}

/// A file left delete-pending (MS-FSA 2.1.5.4): an SMB delete-on-close
/// open closed while other opens of the file (SMB, or NFSv4 OPENs: each
/// is a handle) remain; whichever of them closes last removes `name`
/// from directory `parent` (a name starting with `:` is a named stream
/// of `parent`). New opens of it are refused by either protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletePending {
    pub parent: FileId,
    pub name: String,
    pub is_dir: bool,
}

#[derive(Clone, Copy, Debug)]
struct OpenRec {
    holder: Holder,
    share: Share,
}

#[derive(Clone, Copy, Debug)]
struct LockRec {
    holder: Holder,
    range: Range,
    exclusive: bool,
}

#[derive(Clone, Copy, Debug)]
struct Waiter {
    id: WaiterId,
    holder: Holder,
    range: Range,
    exclusive: bool,
    deadline: Option<i64>,
    tag: u64,
}

#[derive(Debug, Default)]
struct FileState {
    opens: Vec<OpenRec>,
    locks: Vec<LockRec>,
    waiters: VecDeque<Waiter>,
    grants: Vec<GrantId>,
    /// No new grant before this time (a recall happened).
    no_grant_until: Option<i64>,
}

impl FileState {
    fn is_empty(&self) -> bool {
        self.opens.is_empty() && self.locks.is_empty() && self.waiters.is_empty() && self.grants.is_empty()
    }

    /// The first lock that a new lock request conflicts with. POSIX owners
    /// never conflict with their own locks (those are replaced); SMB
    /// locks stack: an exclusive request overlaps no lock, and a shared
    /// one overlaps only shared locks and the same open's exclusive ones
    /// (MS-FSA 2.1.4.10 with LockIntent; what smbtorture smb2.lock.stacking
    /// expects of Windows).
    fn lock_conflict(&self, holder: &Holder, range: &Range, exclusive: bool) -> Option<LockInfo> {
        self.locks
            .iter()
            .find(|l| {
                let own = l.holder == *holder;
                !(holder.proto.posix() && own)
                    && l.range.overlaps(range)
                    && (l.exclusive || exclusive)
                    && !(own && l.exclusive && !exclusive)
            })
            .map(|l| LockInfo { holder: l.holder, range: l.range, exclusive: l.exclusive })
    }
}

/// The lock table. All state is here; every method is a plain state
/// transition.
#[derive(Debug)]
pub struct Table {
    limits: Limits,
    files: HashMap<FileId, FileState>,
    /// Files a client has anything on (an index for releasing it).
    by_client: HashMap<(Protocol, u64), HashSet<FileId>>,
    n_opens: usize,
    n_locks: usize,
    locks_of: HashMap<(Holder, FileId), usize>,
    n_waiters: usize,
    next_waiter: u64,
    outcomes: HashMap<(Protocol, u64), Vec<Outcome>>,
    grants: grant::Grants,
    /// Files delete-pending (one entry per file, set only while an open
    /// of it remains, so bounded by `limits.opens`).
    pending: HashMap<FileId, DeletePending>,
}

/// Table sizes, for statistics and limit tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub files: usize,
    pub opens: usize,
    pub locks: usize,
    pub waiters: usize,
    pub grants: usize,
    pub breaking: usize,
}

impl Default for Table {
    fn default() -> Table {
        Table::new(Limits::default())
    }
}

impl Table {
    pub fn new(limits: Limits) -> Table {
        Table {
            limits,
            files: HashMap::new(),
            by_client: HashMap::new(),
            n_opens: 0,
            n_locks: 0,
            locks_of: HashMap::new(),
            n_waiters: 0,
            next_waiter: 1,
            outcomes: HashMap::new(),
            grants: grant::Grants::default(),
            pending: HashMap::new(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn counts(&self) -> Counts {
        Counts {
            files: self.files.len(),
            opens: self.n_opens,
            locks: self.n_locks,
            waiters: self.n_waiters,
            grants: self.grants.len(),
            breaking: self.grants.breaking(),
        }
    }

    fn touch(&mut self, file: FileId, holder: &Holder) -> &mut FileState {
        self.by_client.entry(holder.client_key()).or_default().insert(file);
        self.files.entry(file).or_default()
    }

    fn tidy(&mut self, file: FileId) {
        if self.files.get(&file).is_some_and(FileState::is_empty) {
            self.files.remove(&file);
        }
    }

    // ---- share reservations ---------------------------------------------

    /// Whether an open of `file` with `share` by `holder` conflicts with
    /// the other holders' opens (the holder's own reservation is its to
    /// change).
    pub fn share_conflict(&self, file: FileId, holder: Option<&Holder>, share: Share) -> bool {
        self.files.get(&file).is_some_and(|f| {
            f.opens
                .iter()
                .any(|o| Some(&o.holder) != holder && !o.share.compatible(&share))
        })
    }

    /// Records an open with its share reservation, or refuses it
    /// (STATUS_SHARING_VIOLATION, NFS4ERR_SHARE_DENIED: Err(false);
    /// over the limit: Err(true)). A holder that already has an open of
    /// the file gets the union of both (an NFSv4 OPEN upgrade, RFC 8881
    /// 18.16.3).
    pub fn open(&mut self, file: FileId, holder: Holder, share: Share) -> Result<(), bool> {
        let existing = self
            .files
            .get(&file)
            .and_then(|f| f.opens.iter().find(|o| o.holder == holder))
            .map(|o| o.share);
        let want = existing.map_or(share, |e| e.union(&share));
        if self.share_conflict(file, Some(&holder), want) {
            return Err(false);
        }
        if existing.is_none() && self.n_opens >= self.limits.opens {
            return Err(true);
        }
        let f = self.touch(file, &holder);
        match f.opens.iter_mut().find(|o| o.holder == holder) {
            Some(o) => o.share = want,
            None => {
                f.opens.push(OpenRec { holder, share: want });
                self.n_opens += 1;
            }
        }
        Ok(())
    }

    /// Sets a holder's reservation to `share` exactly (NFSv4
    /// OPEN_DOWNGRADE, RFC 8881 18.18: a subset, so it never conflicts).
    pub fn set_share(&mut self, file: FileId, holder: &Holder, share: Share) {
        if let Some(o) = self
            .files
            .get_mut(&file)
            .and_then(|f| f.opens.iter_mut().find(|o| o.holder == *holder))
        {
            o.share = share;
        }
    }

    /// The share reservation `holder` has on `file`, if it has an open.
    pub fn share_of(&self, file: FileId, holder: &Holder) -> Option<Share> {
        self.files.get(&file).and_then(|f| f.opens.iter().find(|o| o.holder == *holder)).map(|o| o.share)
    }

    /// The opens of `file` by holders other than `holder`.
    pub fn other_opens(&self, file: FileId, holder: &Holder) -> usize {
        self.files
            .get(&file)
            .map_or(0, |f| f.opens.iter().filter(|o| o.holder != *holder).count())
    }

    /// Drops a holder's open of `file` (its reservation only).
    pub fn close(&mut self, file: FileId, holder: &Holder) {
        if let Some(f) = self.files.get_mut(&file) {
            let before = f.opens.len();
            f.opens.retain(|o| o.holder != *holder);
            self.n_opens -= before - f.opens.len();
        }
        self.tidy(file);
    }

    /// Whether `proto` holds an open of `file`.
    pub fn opened_by(&self, file: FileId, proto: Protocol) -> bool {
        self.files.get(&file).is_some_and(|f| f.opens.iter().any(|o| o.holder.proto == proto))
    }

    // ---- delete-pending files (MS-FSA 2.1.5.4) ------------------------------

    /// `file` is delete-pending until its last open closes.
    pub fn mark_delete_pending(&mut self, file: FileId, d: DeletePending) {
        self.pending.insert(file, d);
    }

    /// Whether `file` is delete-pending: a new open of it is refused
    /// (SMB STATUS_DELETE_PENDING; NFS: docs/locks.md).
    pub fn is_delete_pending(&self, file: FileId) -> bool {
        self.pending.contains_key(&file)
    }

    /// Whether any file is delete-pending (only then does an NFS open by
    /// name need a lookup first).
    pub fn any_delete_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// `file` is no longer delete-pending; its removal, if it was: whoever
    /// takes it runs it (so it runs once).
    pub fn take_delete_pending(&mut self, file: FileId) -> Option<DeletePending> {
        self.pending.remove(&file)
    }

    /// An open of `file` closed: when the file is delete-pending and no
    /// open of it is left (by any protocol), its removal (taken, as by
    /// [`Table::take_delete_pending`]).
    pub fn take_delete_pending_if_unopened(&mut self, file: FileId) -> Option<DeletePending> {
        if self.files.get(&file).is_some_and(|f| !f.opens.is_empty()) {
            return None;
        }
        self.pending.remove(&file)
    }

    // ---- byte-range locks ---------------------------------------------------

    /// The lock a request would conflict with (NFSv4 LOCKT, RFC 8881
    /// 18.11), or None.
    pub fn test_lock(&self, file: FileId, holder: &Holder, range: &Range, exclusive: bool) -> Option<LockInfo> {
        self.files.get(&file)?.lock_conflict(holder, range, exclusive)
    }

    /// Takes a lock now or says why not (SMB with FAIL_IMMEDIATELY, NFSv4
    /// LOCK).
    pub fn lock(&mut self, file: FileId, holder: Holder, range: Range, exclusive: bool) -> Result<(), LockError> {
        if let Some(c) = self.test_lock(file, &holder, &range, exclusive) {
            return Err(LockError::Conflict(c));
        }
        self.grant_lock(file, holder, range, exclusive)
    }

    /// Takes a lock now, or queues the request until what blocks it goes
    /// (or `deadline` passes: [`Table::handle_timeout`]). Ok(None):
    /// granted; Ok(Some(id)): queued, its [`Outcome`] comes later. `tag`
    /// is the caller's (an SMB async id).
    pub fn lock_or_wait(
        &mut self,
        file: FileId,
        holder: Holder,
        range: Range,
        exclusive: bool,
        deadline: Option<i64>,
        tag: u64,
    ) -> Result<Option<WaiterId>, LockError> {
        if self.test_lock(file, &holder, &range, exclusive).is_none() {
            return self.grant_lock(file, holder, range, exclusive).map(|()| None);
        }
        let per_file = self.files.get(&file).map_or(0, |f| f.waiters.len());
        if self.n_waiters >= self.limits.waiters || per_file >= self.limits.waiters_per_file {
            return Err(LockError::Limit);
        }
        let id = WaiterId(self.next_waiter);
        self.next_waiter += 1;
        self.touch(file, &holder).waiters.push_back(Waiter { id, holder, range, exclusive, deadline, tag });
        self.n_waiters += 1;
        Ok(Some(id))
    }

    fn grant_lock(&mut self, file: FileId, holder: Holder, range: Range, exclusive: bool) -> Result<(), LockError> {
        let mine = self.locks_of.get(&(holder, file)).copied().unwrap_or(0);
        let on_file = self.files.get(&file).map_or(0, |f| f.locks.len());
        // A POSIX lock may split one of the owner's ranges in two.
        if self.n_locks >= self.limits.locks
            || on_file >= self.limits.locks_per_file
            || mine >= self.limits.locks_per_holder
        {
            return Err(LockError::Limit);
        }
        if holder.proto.posix() {
            self.cut(file, &holder, &range);
        }
        self.touch(file, &holder).locks.push(LockRec { holder, range, exclusive });
        self.recount(file, &holder);
        Ok(())
    }

    /// Removes `range` from a POSIX owner's locks on `file`.
    fn cut(&mut self, file: FileId, holder: &Holder, range: &Range) {
        let Some(f) = self.files.get_mut(&file) else { return };
        let mut out = Vec::with_capacity(f.locks.len() + 1);
        for l in f.locks.drain(..) {
            if l.holder != *holder || !l.range.overlaps(range) {
                out.push(l);
                continue;
            }
            out.extend(l.range.minus(range).into_iter().map(|r| LockRec { range: r, ..l }));
        }
        f.locks = out;
    }

    fn recount(&mut self, file: FileId, holder: &Holder) {
        let n = self
            .files
            .get(&file)
            .map_or(0, |f| f.locks.iter().filter(|l| l.holder == *holder).count());
        let old = if n == 0 {
            self.locks_of.remove(&(*holder, file)).unwrap_or(0)
        } else {
            self.locks_of.insert((*holder, file), n).unwrap_or(0)
        };
        self.n_locks = self.n_locks + n - old;
    }

    /// SMB unlock (MS-FSA 2.1.5.9): removes the holder's lock of exactly
    /// this offset and length (an exclusive one first). Err(()):
    /// STATUS_RANGE_NOT_LOCKED. Returns the waiters now granted.
    pub fn unlock_exact(&mut self, file: FileId, holder: &Holder, range: &Range) -> Result<Vec<Outcome>, ()> {
        let f = self.files.get_mut(&file).ok_or(())?;
        let mut pick = None;
        for (i, l) in f.locks.iter().enumerate() {
            if l.holder == *holder && l.range.offset == range.offset && l.range.length == range.length {
                pick = Some(i);
                if l.exclusive {
                    break;
                }
            }
        }
        f.locks.remove(pick.ok_or(())?);
        self.recount(file, holder);
        Ok(self.wake(file))
    }

    /// Whether the holder has a lock of exactly this offset and length.
    pub fn holds_exact(&self, file: FileId, holder: &Holder, range: &Range) -> bool {
        self.files.get(&file).is_some_and(|f| {
            f.locks
                .iter()
                .any(|l| l.holder == *holder && l.range.offset == range.offset && l.range.length == range.length)
        })
    }

    /// POSIX unlock (NFSv4 LOCKU, RFC 8881 18.12): takes `range` out of
    /// the holder's locks, splitting them. Returns the waiters now granted.
    pub fn unlock_range(&mut self, file: FileId, holder: &Holder, range: &Range) -> Vec<Outcome> {
        self.cut(file, holder, range);
        self.recount(file, holder);
        self.wake(file)
    }

    /// How many locks the holder holds on `file`.
    pub fn lock_count(&self, file: FileId, holder: &Holder) -> usize {
        self.locks_of.get(&(*holder, file)).copied().unwrap_or(0)
    }

    /// Whether the holder holds any lock on `file`.
    pub fn has_locks(&self, file: FileId, holder: &Holder) -> bool {
        self.locks_of.contains_key(&(*holder, file))
    }

    /// The locks on `file`, for tests and statistics.
    pub fn locks(&self, file: FileId) -> Vec<LockInfo> {
        self.files.get(&file).map_or_else(Vec::new, |f| {
            f.locks
                .iter()
                .map(|l| LockInfo { holder: l.holder, range: l.range, exclusive: l.exclusive })
                .collect()
        })
    }

    /// Drops every lock of the holder on `file` (an SMB CLOSE, an NFSv4
    /// lock state freed). Returns the waiters now granted.
    pub fn unlock_all(&mut self, file: FileId, holder: &Holder) -> Vec<Outcome> {
        if let Some(f) = self.files.get_mut(&file) {
            f.locks.retain(|l| l.holder != *holder);
        }
        self.recount(file, holder);
        self.wake(file)
    }

    /// The holder is gone from `file`: its open, locks and waiters go.
    /// Returns what that decided (granted waiters of others, its own
    /// waiters dropped).
    pub fn release(&mut self, file: FileId, holder: &Holder) -> Vec<Outcome> {
        let mut out = self.drop_waiters(file, |w| w.holder == *holder);
        self.close(file, holder);
        out.extend(self.unlock_all(file, holder));
        for g in self.grants.of_holder_on(file, holder) {
            self.release_grant(g);
        }
        self.leave_leases(file, holder);
        self.tidy(file);
        self.untrack(file, holder.client_key());
        out
    }

    /// Moves everything `old` holds on `file` to `new`: its open and share
    /// reservation, its byte-range locks, the grants it holds and its
    /// membership of leases (an SMB durable open kept after its connection
    /// was lost, MS-SMB2 3.3.7.1, and taken over by the connection that
    /// reconnects it, 3.3.5.9.7). Its queued lock requests are dropped
    /// without an outcome (their requester is gone). False when `new`
    /// already holds anything on `file` (nothing is moved then).
    pub fn rekey(&mut self, file: FileId, old: &Holder, new: Holder) -> bool {
        if *old == new {
            return true;
        }
        let Some(f) = self.files.get_mut(&file) else { return false };
        if f.opens.iter().any(|o| o.holder == new) || f.locks.iter().any(|l| l.holder == new) {
            return false;
        }
        let before = f.waiters.len();
        f.waiters.retain(|w| w.holder != *old);
        let dropped = before - f.waiters.len();
        for o in f.opens.iter_mut().filter(|o| o.holder == *old) {
            o.holder = new;
        }
        for l in f.locks.iter_mut().filter(|l| l.holder == *old) {
            l.holder = new;
        }
        let grants = f.grants.clone();
        self.n_waiters -= dropped;
        if let Some(n) = self.locks_of.remove(&(*old, file)) {
            self.locks_of.insert((new, file), n);
        }
        for id in grants {
            self.grants.rekey(id, old, new);
        }
        self.by_client.entry(new.client_key()).or_default().insert(file);
        self.untrack(file, old.client_key());
        true
    }

    /// Drops `file` from a client's index when it holds nothing there any
    /// more.
    fn untrack(&mut self, file: FileId, client: (Protocol, u64)) {
        let used = self.files.get(&file).is_some_and(|f| {
            f.opens.iter().any(|o| o.holder.client_key() == client)
                || f.locks.iter().any(|l| l.holder.client_key() == client)
                || f.waiters.iter().any(|w| w.holder.client_key() == client)
                || f.grants.iter().any(|g| self.grants.holder_of(*g).is_some_and(|h| h.client_key() == client))
        });
        if !used {
            if let Some(s) = self.by_client.get_mut(&client) {
                s.remove(&file);
                if s.is_empty() {
                    self.by_client.remove(&client);
                }
            }
        }
    }

    /// Whether a client holds anything (an open, a lock, a queued
    /// request, a grant) on any file.
    pub fn holds_anything(&self, proto: Protocol, client: u64) -> bool {
        self.by_client.contains_key(&(proto, client))
    }

    /// A client (an SMB connection, an NFSv4 client id) is gone:
    /// everything it holds goes.
    pub fn release_client(&mut self, proto: Protocol, client: u64) -> Vec<Outcome> {
        let files = self.by_client.remove(&(proto, client)).unwrap_or_default();
        let mut out = Vec::new();
        for file in files {
            let holders: Vec<Holder> = match self.files.get(&file) {
                Some(f) => {
                    let mut h: Vec<Holder> = f
                        .opens
                        .iter()
                        .map(|o| o.holder)
                        .chain(f.locks.iter().map(|l| l.holder))
                        .chain(f.waiters.iter().map(|w| w.holder))
                        .filter(|h| h.proto == proto && h.client == client)
                        .collect();
                    h.sort();
                    h.dedup();
                    h
                }
                None => continue,
            };
            for h in holders {
                out.extend(self.release(file, &h));
            }
            for g in self.grants.of_client_on(file, proto, client) {
                self.release_grant(g);
            }
        }
        self.outcomes.remove(&(proto, client));
        // Outcomes of this client's waiters are of no use to anyone.
        out.retain(|o| o.holder().client_key() != (proto, client));
        out
    }

    /// The first lock that forbids this I/O, or None (MS-FSA 2.1.4.10 with
    /// LockIntent false). A holder's own exclusive lock lets it read and
    /// write; its own shared lock lets it read only. Locks of advisory
    /// protocols (NFS) bind only I/O of mandatory ones (SMB): an NFS
    /// READ or WRITE is checked against SMB locks alone.
    pub fn check_io(&self, file: FileId, holder: &Holder, range: &Range, write: bool) -> Option<LockInfo> {
        let f = self.files.get(&file)?;
        f.locks
            .iter()
            .find(|l| {
                if !holder.proto.mandatory() && !l.holder.proto.mandatory() {
                    return false;
                }
                if !l.range.overlaps(range) {
                    return false;
                }
                if l.holder == *holder {
                    write && !l.exclusive
                } else {
                    write || l.exclusive
                }
            })
            .map(|l| LockInfo { holder: l.holder, range: l.range, exclusive: l.exclusive })
    }

    // ---- waiters -----------------------------------------------------------

    /// Grants the queued requests of `file` that no longer conflict, in
    /// the order they came.
    fn wake(&mut self, file: FileId) -> Vec<Outcome> {
        let mut out = Vec::new();
        let Some(f) = self.files.get_mut(&file) else { return out };
        if f.waiters.is_empty() {
            self.tidy(file);
            return out;
        }
        let waiters: Vec<Waiter> = f.waiters.drain(..).collect();
        let mut keep = VecDeque::new();
        for w in waiters {
            let free = self.test_lock(file, &w.holder, &w.range, w.exclusive).is_none();
            if free && self.grant_lock(file, w.holder, w.range, w.exclusive).is_ok() {
                self.n_waiters -= 1;
                let o = Outcome::Granted { id: w.id, file, holder: w.holder, tag: w.tag };
                self.post(o);
                out.push(o);
            } else {
                keep.push_back(w);
            }
        }
        if let Some(f) = self.files.get_mut(&file) {
            // Waiters queued meanwhile cannot exist (one call at a time).
            f.waiters = keep;
        }
        self.tidy(file);
        out
    }

    fn post(&mut self, o: Outcome) {
        self.outcomes.entry(o.holder().client_key()).or_default().push(o);
    }

    fn drop_waiters(&mut self, file: FileId, pred: impl Fn(&Waiter) -> bool) -> Vec<Outcome> {
        let mut out = Vec::new();
        if let Some(f) = self.files.get_mut(&file) {
            let (gone, keep): (Vec<Waiter>, Vec<Waiter>) = f.waiters.drain(..).partition(|w| pred(w));
            f.waiters = keep.into();
            for w in gone {
                out.push(Outcome::Dropped { id: w.id, file, holder: w.holder, tag: w.tag });
            }
        }
        self.n_waiters -= out.len();
        for o in &out {
            self.post(*o);
        }
        self.tidy(file);
        out
    }

    /// Withdraws a queued request (SMB CANCEL, MS-SMB2 3.3.5.16). True if
    /// it was still queued (its outcome is then `Dropped`, returned and
    /// not posted).
    pub fn cancel(&mut self, id: WaiterId) -> bool {
        let file = self
            .files
            .iter()
            .find(|(_, f)| f.waiters.iter().any(|w| w.id == id))
            .map(|(k, _)| *k);
        let Some(file) = file else { return false };
        let gone = self.drop_waiters(file, |w| w.id == id);
        for o in &gone {
            if let Some(v) = self.outcomes.get_mut(&o.holder().client_key()) {
                v.retain(|x| x.id() != id);
                if v.is_empty() {
                    self.outcomes.remove(&o.holder().client_key());
                }
            }
        }
        !gone.is_empty()
    }

    /// Whether a request is still queued.
    pub fn is_waiting(&self, id: WaiterId) -> bool {
        self.files.values().any(|f| f.waiters.iter().any(|w| w.id == id))
    }

    /// The outcomes of a client's queued requests decided since it last
    /// asked (by unlocks of other clients, timeouts, releases).
    pub fn take_outcomes(&mut self, proto: Protocol, client: u64) -> Vec<Outcome> {
        self.outcomes.remove(&(proto, client)).unwrap_or_default()
    }

    /// Whether the client has outcomes to take.
    pub fn has_outcomes(&self, proto: Protocol, client: u64) -> bool {
        self.outcomes.contains_key(&(proto, client))
    }

    // ---- timers ---------------------------------------------------------------

    /// The next time [`Table::handle_timeout`] has something to do: the
    /// earliest waiter deadline or break deadline.
    pub fn poll_timeout(&self) -> Option<i64> {
        let w = self
            .files
            .values()
            .flat_map(|f| f.waiters.iter().filter_map(|w| w.deadline))
            .min();
        match (w, self.grants.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expires waiters and revokes grants whose time is up.
    pub fn handle_timeout(&mut self, now: i64) -> Timeouts {
        let mut t = Timeouts::default();
        let files: Vec<FileId> = self
            .files
            .iter()
            .filter(|(_, f)| f.waiters.iter().any(|w| w.deadline.is_some_and(|d| d <= now)))
            .map(|(k, _)| *k)
            .collect();
        for file in files {
            let gone = self.drop_waiters(file, |w| w.deadline.is_some_and(|d| d <= now));
            for o in gone {
                let e = match o {
                    Outcome::Dropped { id, file, holder, tag } => Outcome::Expired { id, file, holder, tag },
                    x => x,
                };
                // Replace the posted Dropped by Expired.
                if let Some(v) = self.outcomes.get_mut(&holder_key(&e)) {
                    for x in v.iter_mut() {
                        if x.id() == e.id() {
                            *x = e;
                        }
                    }
                }
                t.expired.push(e);
            }
        }
        for (g, holder) in self.grants.overdue(now) {
            self.release_grant(g);
            t.revoked.push((g, holder));
        }
        t
    }
}

fn holder_key(o: &Outcome) -> (Protocol, u64) {
    o.holder().client_key()
}

/// The daemon's one lock table, shared by every connection on every
/// executor (SMB and NFS): plain memory behind a mutex. A panic elsewhere
/// never leaves the table half-updated in a way that breaks its
/// invariants worse than a lost update, so a poisoned mutex is used as is.
#[derive(Default)]
pub struct LockManager {
    table: Mutex<Table>,
    on_change: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager").field("table", &self.table).field("on_change", &self.on_change.get().is_some()).finish()
    }
}

impl LockManager {
    pub fn new(limits: Limits) -> LockManager {
        LockManager { table: Mutex::new(Table::new(limits)), on_change: std::sync::OnceLock::new() }
    }

    /// The table, locked for one decision. Hold it briefly: never across
    /// an await or a batch.
    pub fn table(&self) -> TableGuard<'_> {
        TableGuard {
            guard: self.table.lock().unwrap_or_else(|e| e.into_inner()),
            on_change: self.on_change.get().map(|f| &**f),
            changed: false,
        }
    }

    /// Calls `f` after each use of the table that could change it (a
    /// mutable borrow), once that use ends: the driver wakes what waits on
    /// a grant, a release or a break's end with it, instead of polling.
    /// Set once; a second call is ignored.
    pub fn on_change(&self, f: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_change.set(f);
    }

    /// Reports a change the table does not see but its waiters depend on
    /// (a removal that a parked open waits for is over) to `on_change`.
    pub fn changed(&self) {
        if let Some(f) = self.on_change.get() {
            f();
        }
    }
}

/// [`LockManager::table`]: the locked table, which reports a mutable use
/// to the manager's `on_change` when dropped.
pub struct TableGuard<'a> {
    guard: MutexGuard<'a, Table>,
    on_change: Option<&'a (dyn Fn() + Send + Sync)>,
    changed: bool,
}

impl std::ops::Deref for TableGuard<'_> {
    type Target = Table;
    fn deref(&self) -> &Table {
        &self.guard
    }
}

impl std::ops::DerefMut for TableGuard<'_> {
    fn deref_mut(&mut self) -> &mut Table {
        self.changed = true;
        &mut self.guard
    }
}

impl Drop for TableGuard<'_> {
    fn drop(&mut self) {
        if let (true, Some(f)) = (self.changed, self.on_change) {
            f();
        }
    }
}

#[cfg(test)]
mod tests;
