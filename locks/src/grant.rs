//! Caching grants: SMB oplocks and leases, NFSv4 delegations, one model.
//!
//! A grant lets one client cache: reads ([`Level::R`]), writes
//! ([`Level::W`]) or open handles ([`Level::H`]). The bits are those of
//! the SMB2 lease state (MS-SMB2 2.2.13.2.8: READ_CACHING 0x1,
//! HANDLE_CACHING 0x2, WRITE_CACHING 0x4); an oplock is a lease of one
//! open (level II = R, exclusive = RW, batch = RWH, MS-SMB2 3.3.5.9.8 /
//! MS-FSA 2.1.5.17), an NFSv4 read delegation R and a write delegation RW
//! (RFC 8881 10.4).
//!
//! Life of a grant: granted at a level -> another client's open (or
//! write) conflicts -> breaking towards a lower level with a deadline ->
//! the holder acknowledges (granted at the lower level, or gone at none)
//! or the deadline passes and it is revoked ([`super::Table::handle_timeout`]).
//! A break that only takes away read caching needs no acknowledgement
//! (MS-SMB2 3.3.4.7: a level II oplock break to none is not acknowledged;
//! RFC 8881 10.4.1 read delegations do not cover writes): the grant is
//! lowered at once and the opener does not wait. The holder's own opens
//! (same protocol and client) never break its grant; a file that was just
//! recalled is granted nothing new for `recall_backoff_ns`.
//!
//! SMB oplocks ([`Table::request_open_grant`]) and leases
//! ([`Table::request_lease`]) are granted through it
//! (`duet_protocols::smb2::server`), and so are NFSv4 delegations (read R,
//! write RW: [`Table::request_grant`] with an NFSv4 holder, `Scope::Client`). A
//! delegation is all or nothing (RFC 8881 10.4: a recall takes the whole
//! delegation back, DELEGRETURN): any conflicting open, write, truncation,
//! rename or remove by another client breaks it to none, and the break
//! always waits for the holder (CB_RECALL, then DELEGRETURN or revocation
//! at the deadline, RFC 8881 10.4.6), read delegations included.

use std::collections::HashMap;

use super::{FileId, Holder, Protocol, Share, Table};

/// Caching rights, as SMB2 lease state bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Level(pub u8);

impl Level {
    pub const NONE: Level = Level(0);
    pub const R: Level = Level(0x1);
    pub const H: Level = Level(0x2);
    pub const W: Level = Level(0x4);
    pub const RH: Level = Level(0x3);
    pub const RW: Level = Level(0x5);
    pub const RWH: Level = Level(0x7);

    pub fn has(self, o: Level) -> bool {
        self.0 & o.0 == o.0 && o.0 != 0
    }

    pub fn is_none(self) -> bool {
        self.0 == 0
    }

    fn and(self, o: Level) -> Level {
        Level(self.0 & o.0)
    }

    fn without(self, o: Level) -> Level {
        Level(self.0 & !o.0)
    }

    /// Whether `self` asks for nothing `o` lacks.
    pub fn within(self, o: Level) -> bool {
        self.0 & !o.0 == 0
    }

    /// A valid level: handle or write caching only with read caching
    /// (MS-SMB2 2.2.13.2.8 lists R, RH, RW, RWH).
    fn normal(self) -> Level {
        if self.0 & 0x1 == 0 {
            Level::NONE
        } else {
            Level(self.0 & 0x7)
        }
    }
}

/// What contradicts others' caching (see [`Table::break_for`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// An open as NFSv4 sees it (RFC 8881 10.4.1): one for writing leaves
    /// others handle caching at most, one for reading takes write caching.
    Open,
    /// An SMB open that does not truncate (MS-FSA 2.1.4.12): write caching
    /// goes; read caching stays until data actually changes. An open that
    /// uses nothing (attributes only) breaks nothing.
    SmbOpen,
    /// An open that replaces the data (SUPERSEDE, OVERWRITE), or a write
    /// (MS-FSA 2.1.5.4): only handle caching may stay.
    Write,
    /// A rename or a delete of the file (MS-FSA 2.1.5.14.2 rename,
    /// 2.1.5.14.3 disposition, as the lease rules of 2.1.4.12 take them):
    /// handle caching of other holders' SMB leases goes (RWH -> RW,
    /// RH -> R). With access bits (an SMB CREATE asking delete-on-close)
    /// it is an [`Conflict::SmbOpen`] too; oplocks and delegations see
    /// only that part.
    Namespace,
    /// A change inside a directory (a name created, removed or renamed
    /// there, or a file of it written and closed): the directory's SMB
    /// leases lose all caching (MS-FSA 2.1.4.13, breaking the parent's
    /// oplock; MS-SMB2 3.3.4.7 for directory leases). The changing
    /// operation never waits for the acknowledgement.
    Child,
}

/// A grant's name in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GrantId(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Granted,
    Breaking { to: Level, deadline: i64 },
}

/// Whose opens a grant covers: every open of its client (an SMB lease
/// key, an NFSv4 client's delegation) or the one open it was granted with
/// (an SMB oplock belongs to one open, MS-SMB2 3.3.5.9.8: a second open of
/// the same connection breaks it like anyone's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Client,
    Open,
    /// An SMB lease (MS-SMB2 3.3.1.12/3.3.1.13): the holder names the lease
    /// (its lease key), and the opens made with that key are its members
    /// (Lease.LeaseOpens); an open by the lease's own key (the opener
    /// being the lease's holder) or by a member never breaks it.
    Lease,
}

#[derive(Clone, Debug)]
struct GrantRec {
    file: FileId,
    holder: Holder,
    level: Level,
    state: State,
    scope: Scope,
    /// The opens of a lease ([`Scope::Lease`]); empty otherwise.
    members: Vec<Holder>,
}

impl GrantRec {
    /// Whether `h`'s opens are this grant's own (they never break it).
    fn owns(&self, h: &Holder) -> bool {
        match self.scope {
            Scope::Client => same_client(&self.holder, h),
            Scope::Open => self.holder == *h,
            Scope::Lease => self.holder == *h || self.members.contains(h),
        }
    }

    fn breaking(&self) -> bool {
        matches!(self.state, State::Breaking { .. })
    }
}

/// A break to tell a holder about (SMB OPLOCK_BREAK / LEASE_BREAK
/// notification, NFSv4 CB_RECALL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Break {
    pub grant: GrantId,
    pub holder: Holder,
    pub from: Level,
    pub to: Level,
    /// Whether the holder must acknowledge (the opener waits for it).
    pub ack_needed: bool,
}

/// Why an acknowledgement was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckError {
    /// No such grant (revoked already, or never granted).
    Unknown,
    /// The grant is not being broken (MS-SMB2 3.3.5.22.1:
    /// STATUS_INVALID_OPLOCK_PROTOCOL / 3.3.5.22.2
    /// STATUS_UNSUCCESSFUL).
    NotBreaking,
    /// The holder kept more than the break left it (MS-SMB2 3.3.5.22.2:
    /// STATUS_INVALID_PARAMETER).
    TooHigh,
}

/// The grants of the table.
#[derive(Debug, Default)]
pub(crate) struct Grants {
    by_id: HashMap<GrantId, GrantRec>,
    next: u64,
    /// Grants per (protocol, client): whether anyone else caches anything.
    per_client: HashMap<(Protocol, u64), usize>,
}

impl Grants {
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn breaking(&self) -> usize {
        self.by_id.values().filter(|g| matches!(g.state, State::Breaking { .. })).count()
    }

    pub(crate) fn next_deadline(&self) -> Option<i64> {
        self.by_id
            .values()
            .filter_map(|g| match g.state {
                State::Breaking { deadline, .. } => Some(deadline),
                State::Granted => None,
            })
            .min()
    }

    pub(crate) fn overdue(&self, now: i64) -> Vec<(GrantId, Holder)> {
        let mut v: Vec<(GrantId, Holder)> = self
            .by_id
            .iter()
            .filter(|(_, g)| matches!(g.state, State::Breaking { deadline, .. } if deadline <= now))
            .map(|(id, g)| (*id, g.holder))
            .collect();
        v.sort();
        v
    }

    /// `old` becomes `new` in grant `id`: as its holder, or as a member
    /// of a lease (see [`Table::rekey`]).
    pub(crate) fn holder_of(&self, id: GrantId) -> Option<Holder> {
        self.by_id.get(&id).map(|g| g.holder)
    }

    pub(crate) fn rekey(&mut self, id: GrantId, old: &Holder, new: Holder) {
        let Some(g) = self.by_id.get_mut(&id) else { return };
        for m in g.members.iter_mut().filter(|m| **m == *old) {
            *m = new;
        }
        if g.holder == *old {
            g.holder = new;
            let k = (old.proto, old.client);
            if let Some(n) = self.per_client.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.per_client.remove(&k);
                }
            }
            *self.per_client.entry((new.proto, new.client)).or_default() += 1;
        }
    }

    pub(crate) fn of_holder_on(&self, file: FileId, holder: &Holder) -> Vec<GrantId> {
        self.by_id
            .iter()
            .filter(|(_, g)| g.file == file && g.holder == *holder)
            .map(|(id, _)| *id)
            .collect()
    }

    pub(crate) fn of_client_on(&self, file: FileId, proto: Protocol, client: u64) -> Vec<GrantId> {
        self.by_id
            .iter()
            .filter(|(_, g)| g.file == file && g.holder.proto == proto && g.holder.client == client)
            .map(|(id, _)| *id)
            .collect()
    }
}

fn same_client(a: &Holder, b: &Holder) -> bool {
    a.proto == b.proto && a.client == b.client
}

impl Table {
    /// Asks for caching rights on `file` (an SMB CREATE with an oplock or
    /// lease request, an NFSv4 OPEN that could get a delegation). Grants
    /// what does not conflict with other clients' opens and grants:
    /// read caching only while nobody else writes or caches writes, write
    /// caching only while nobody else has the file open or cached, handle
    /// caching only with read caching. Nothing while the file was just
    /// recalled, while a break on it is in progress, or over the limit.
    /// A holder asking again gets its grant raised, never lowered.
    /// Returns the grant and its level, or None for no grant.
    pub fn request_grant(&mut self, file: FileId, holder: Holder, want: Level, now: i64) -> Option<(GrantId, Level)> {
        self.request_scoped(file, holder, want, now, Scope::Client, &[])
    }

    /// As [`Table::request_grant`], for a grant of one open (an SMB
    /// oplock): the holder's other opens count as anyone's.
    pub fn request_open_grant(&mut self, file: FileId, holder: Holder, want: Level, now: i64) -> Option<(GrantId, Level)> {
        self.request_scoped(file, holder, want, now, Scope::Open, &[])
    }

    /// An SMB lease (MS-SMB2 3.3.5.9.8 / 3.3.5.9.11): `lease` names it (by
    /// client and lease key), `opens` are its opens of `file` (the new one
    /// included), which join it. A new lease gets what the others' opens
    /// and grants allow (possibly less than asked, or nothing: None). A
    /// held lease is upgraded only to exactly what is asked, when that is
    /// more than it holds and all of it can be granted; otherwise, and
    /// while any break on the file is in progress, it stays as it is.
    /// Returns the grant, its level and whether a break of it is in
    /// progress.
    pub fn request_lease(
        &mut self,
        file: FileId,
        lease: Holder,
        opens: &[Holder],
        want: Level,
        now: i64,
    ) -> Option<(GrantId, Level, bool)> {
        let own = self.files.get(&file).and_then(|f| {
            f.grants
                .iter()
                .find(|g| self.grants.by_id.get(g).is_some_and(|r| r.holder == lease && r.scope == Scope::Lease))
                .copied()
        });
        let want = want.normal();
        if let Some(id) = own {
            let r = self.grants.by_id.get_mut(&id)?;
            for o in opens {
                if !r.members.contains(o) {
                    r.members.push(*o);
                }
            }
            let (current, breaking) = (r.level, r.breaking());
            if breaking || want == current || !current.within(want) {
                return Some((id, current, breaking));
            }
            let any_breaking = self.files.get(&file).is_some_and(|f| {
                f.grants.iter().any(|g| self.grants.by_id.get(g).is_some_and(|r| r.breaking()))
            });
            if any_breaking || self.allowed(file, &lease, want, Scope::Lease, opens) != want {
                return Some((id, current, false));
            }
            if let Some(r) = self.grants.by_id.get_mut(&id) {
                r.level = want;
            }
            return Some((id, want, false));
        }
        self.request_scoped(file, lease, want, now, Scope::Lease, opens).map(|(id, l)| (id, l, false))
    }

    /// What of `want` the other opens and grants of `file` leave to
    /// `holder` (whose own opens, for a lease, are `members`).
    fn allowed(&self, file: FileId, holder: &Holder, want: Level, scope: Scope, members: &[Holder]) -> Level {
        let mine = |h: &Holder| match scope {
            Scope::Client => same_client(h, holder),
            Scope::Open => h == holder,
            Scope::Lease => h == holder || members.contains(h),
        };
        let f = self.files.get(&file);
        let grants: Vec<&GrantRec> =
            f.map(|f| f.grants.iter().filter_map(|g| self.grants.by_id.get(g)).collect()).unwrap_or_default();
        let mut level = want.normal();
        let others_open: Vec<Share> =
            f.map_or(Vec::new(), |f| f.opens.iter().filter(|o| !mine(&o.holder)).map(|o| o.share).collect());
        let others_grant: Vec<Level> =
            grants.iter().filter(|g| !g.owns(holder) && !mine(&g.holder)).map(|g| g.level).collect();
        // An oplock or lease may share read caching with writers' opens:
        // their writes break it (MS-FSA 2.1.5.17.2 grants level II beside
        // other opens); an NFS delegation may not.
        let writer_open =
            scope == Scope::Client && others_open.iter().any(|s| s.access & super::share::WRITE != 0);
        if writer_open || others_grant.iter().any(|l| l.has(Level::W)) {
            level = Level::NONE;
        }
        // An oplock is no level II beside another's handle caching lease
        // (MS-FSA 2.1.5.17.2: level II only beside level II / read
        // caching).
        if scope == Scope::Open && others_grant.iter().any(|l| l.has(Level::H)) {
            level = Level::NONE;
        }
        // And a lease gets no handle caching beside another open's oplock
        // (smbtorture smb2.lease.oplock, as Windows: level II beside R).
        let oplock_beside = grants
            .iter()
            .any(|g| g.scope == Scope::Open && !g.owns(holder) && !mine(&g.holder) && !g.level.is_none());
        if scope == Scope::Lease && oplock_beside {
            level = level.without(Level::H);
        }
        if others_open.iter().any(|s| s.access != 0) || others_grant.iter().any(|l| !l.is_none()) {
            level = level.without(Level::W);
        }
        level.normal()
    }

    fn request_scoped(
        &mut self,
        file: FileId,
        holder: Holder,
        want: Level,
        now: i64,
        scope: Scope,
        members: &[Holder],
    ) -> Option<(GrantId, Level)> {
        let f = self.files.get(&file);
        if f.and_then(|f| f.no_grant_until).is_some_and(|t| now < t) {
            return None;
        }
        let grants: Vec<(GrantId, GrantRec)> = f
            .map(|f| f.grants.iter().filter_map(|g| self.grants.by_id.get(g).map(|r| (*g, r.clone()))).collect())
            .unwrap_or_default();
        if grants.iter().any(|(_, g)| g.breaking()) {
            return None;
        }
        let level = self.allowed(file, &holder, want, scope, members);
        if let Some((id, g)) = grants.iter().find(|(_, g)| g.holder == holder) {
            let raised = Level(g.level.0 | level.0).normal();
            if let Some(r) = self.grants.by_id.get_mut(id) {
                r.level = raised;
            }
            return Some((*id, raised));
        }
        if level.is_none() || self.grants.len() >= self.limits.grants {
            return None;
        }
        self.grants.next += 1;
        let id = GrantId(self.grants.next);
        self.grants.by_id.insert(id, GrantRec { file, holder, level, state: State::Granted, scope, members: members.to_vec() });
        *self.grants.per_client.entry((holder.proto, holder.client)).or_default() += 1;
        self.touch(file, &holder).grants.push(id);
        Some((id, level))
    }

    /// An open of `file` by `opener` with `share` is about to happen:
    /// breaks what other clients cache that it contradicts. A writing open
    /// leaves them handle caching at most, a reading one takes away write
    /// caching, and one whose share mode the holders' own opens refuse
    /// takes away handle caching too (so that the holder closes what it
    /// kept open and the open can succeed). Returns the breaks to send
    /// and, if the opener must wait for acknowledgements, until when.
    pub fn break_for_open(&mut self, file: FileId, opener: &Holder, share: Share, now: i64) -> (Vec<Break>, Option<i64>) {
        self.break_for(file, opener, share, Conflict::Open, now)
    }

    /// As [`Table::break_for_open`], for what `why` says `opener` does: an
    /// NFS open, an SMB open, or a change of the data (an overwriting
    /// open, a write: `share` is then the writer's open).
    pub fn break_for(
        &mut self,
        file: FileId,
        opener: &Holder,
        share: Share,
        why: Conflict,
        now: i64,
    ) -> (Vec<Break>, Option<i64>) {
        self.break_which(file, opener, share, why, now, false)
    }

    /// As [`Table::break_for`] for the NFSv4 delegations of `file` alone
    /// (an SMB open that learnt the file's node only from its own batch:
    /// other SMB grants were asked about before it, by path).
    pub fn break_delegations(
        &mut self,
        file: FileId,
        opener: &Holder,
        share: Share,
        why: Conflict,
        now: i64,
    ) -> (Vec<Break>, Option<i64>) {
        self.break_which(file, opener, share, why, now, true)
    }

    fn break_which(
        &mut self,
        file: FileId,
        opener: &Holder,
        share: Share,
        why: Conflict,
        now: i64,
        delegations_only: bool,
    ) -> (Vec<Break>, Option<i64>) {
        let mut out = Vec::new();
        let Some(f) = self.files.get(&file) else { return (out, None) };
        let ids: Vec<GrantId> = f.grants.clone();
        // Whose opens refuse this one's share mode.
        let refused: Vec<Holder> = f
            .opens
            .iter()
            .filter(|o| !o.share.compatible(&share))
            .map(|o| o.holder)
            .collect();
        let timeout = self.limits.break_timeout_ns;
        for id in ids {
            let Some(g) = self.grants.by_id.get_mut(&id) else { continue };
            if g.owns(opener) {
                continue;
            }
            if delegations_only && !(g.scope == Scope::Client && g.holder.proto == Protocol::Nfs4) {
                continue;
            }
            let current = match g.state {
                State::Granted => g.level,
                State::Breaking { to, .. } => to,
            };
            let lease = g.scope == Scope::Lease;
            let mut to = match why {
                Conflict::Child if lease => Level::NONE,
                Conflict::Child => current,
                Conflict::Namespace if lease && share.access != 0 => current.without(Level::H).without(Level::W),
                Conflict::Namespace if lease => current.without(Level::H),
                Conflict::Open if share.access & super::share::WRITE != 0 => current.and(Level::H),
                Conflict::Open | Conflict::SmbOpen | Conflict::Namespace if share.access != 0 => {
                    current.without(Level::W)
                }
                Conflict::Open | Conflict::SmbOpen | Conflict::Namespace => current,
                Conflict::Write => current.and(Level::H),
            };
            if refused.iter().any(|h| g.owns(h)) {
                // An SMB open the holder's share modes refuse breaks
                // handle caching only (MS-FSA 2.1.5.1.2.1: the holder may
                // close what it kept open; if it does not, the open fails
                // with a sharing violation and takes nothing else).
                to = if matches!(why, Conflict::SmbOpen | Conflict::Namespace) {
                    current.without(Level::H)
                } else {
                    to.without(Level::H)
                };
            }
            // An NFSv4 delegation (RFC 8881 10.4.1-10.4.4): what conflicts
            // recalls all of it. A read delegation stands beside other
            // readers; a write, a truncation, a rename or a remove, or an
            // open for writing, recalls it; beside a write delegation any
            // open of another client does.
            let deleg = g.scope == Scope::Client && g.holder.proto == Protocol::Nfs4;
            if deleg {
                let conflict = match why {
                    Conflict::Write | Conflict::Namespace => true,
                    Conflict::Child => false,
                    Conflict::Open | Conflict::SmbOpen => {
                        share.access & super::share::WRITE != 0 || (current.has(Level::W) && share.access != 0)
                    }
                };
                to = if conflict { Level::NONE } else { current };
            }
            // H alone is no SMB lease state; a writer leaves the holder H
            // only where it keeps read caching too, so H alone goes.
            let to = to.normal();
            if to == current {
                continue;
            }
            let ack_needed = current.has(Level::W) || current.has(Level::H) || deleg;
            let from = g.level;
            if ack_needed {
                let deadline = match g.state {
                    State::Breaking { deadline, .. } => deadline,
                    State::Granted => now.saturating_add(timeout),
                };
                g.state = State::Breaking { to, deadline };
            } else {
                g.level = to;
            }
            out.push(Break { grant: id, holder: g.holder, from, to, ack_needed });
        }
        // A directory's change does not keep its next opener from caching
        // (the backoff is for opens contending over a file).
        if !out.is_empty() && why != Conflict::Child {
            let until = now.saturating_add(self.limits.recall_backoff_ns);
            if let Some(f) = self.files.get_mut(&file) {
                f.no_grant_until = Some(until);
            }
        }
        // Lowered to nothing without an acknowledgement: gone.
        for b in &out {
            if !b.ack_needed && b.to.is_none() {
                self.release_grant(b.grant);
            }
        }
        let wait = self.break_deadline(file, opener);
        (out, wait)
    }

    /// When the breaks that `opener` waits for on `file` run out, if any
    /// are in progress.
    pub fn break_deadline(&self, file: FileId, opener: &Holder) -> Option<i64> {
        let f = self.files.get(&file)?;
        f.grants
            .iter()
            .filter_map(|g| self.grants.by_id.get(g))
            .filter(|g| !g.owns(opener))
            .filter_map(|g| match g.state {
                State::Breaking { deadline, .. } => Some(deadline),
                State::Granted => None,
            })
            .max()
    }

    /// The holder acknowledges a break keeping `level` (SMB OPLOCK_BREAK /
    /// LEASE_BREAK acknowledgement, NFSv4 DELEGRETURN as `Level::NONE`).
    pub fn ack(&mut self, id: GrantId, level: Level) -> Result<(), AckError> {
        let g = self.grants.by_id.get_mut(&id).ok_or(AckError::Unknown)?;
        let State::Breaking { to, .. } = g.state else {
            return Err(AckError::NotBreaking);
        };
        if !level.within(to) {
            return Err(AckError::TooHigh);
        }
        g.level = level.normal();
        g.state = State::Granted;
        if g.level.is_none() {
            self.release_grant(id);
        }
        Ok(())
    }

    /// Whether a grant of another client than (`proto`, `client`) exists:
    /// an operation of that client can break nothing otherwise (its own
    /// grants never break for it), so it needs no hidden lookup.
    pub fn has_grants_of_others(&self, proto: Protocol, client: u64) -> bool {
        let mine = self.grants.per_client.get(&(proto, client)).copied().unwrap_or(0);
        self.grants.len() > mine
    }

    /// Moves the deadline of a break in progress (an NFSv4 recall lasts a
    /// lease period, RFC 8881 10.4.6, not the SMB break timeout). False
    /// when the grant is gone or not being broken.
    pub fn set_break_deadline(&mut self, id: GrantId, deadline: i64) -> bool {
        match self.grants.by_id.get_mut(&id) {
            Some(g) => match &mut g.state {
                State::Breaking { deadline: d, .. } => {
                    *d = deadline;
                    true
                }
                State::Granted => false,
            },
            None => false,
        }
    }

    /// Whether any caching grant is held at all (a cheap test before an
    /// operation looks up the file it would have to ask [`Table::break_for`]
    /// about).
    pub fn has_grants(&self) -> bool {
        self.grants.len() > 0
    }

    /// Revokes the grants whose break deadline passed (and nothing else:
    /// waiters keep theirs for [`Table::handle_timeout`]); returns them so
    /// that their holders can be told. An NFS operation that waits for an
    /// SMB break calls this itself: no SMB connection may be polling.
    pub fn revoke_overdue(&mut self, now: i64) -> Vec<(GrantId, Holder)> {
        let overdue = self.grants.overdue(now);
        for (g, _) in &overdue {
            self.release_grant(*g);
        }
        overdue
    }

    /// A grant's level and whether a break of it is in progress.
    pub fn grant(&self, id: GrantId) -> Option<(Level, bool)> {
        self.grants
            .by_id
            .get(&id)
            .map(|g| (g.level, matches!(g.state, State::Breaking { .. })))
    }

    /// Open `open` of `file` is gone: it leaves the leases it belonged
    /// to, and a lease left without opens goes (MS-SMB2 3.3.5.10:
    /// the lease ends with the last of Lease.LeaseOpens).
    pub(crate) fn leave_leases(&mut self, file: FileId, open: &Holder) {
        let ids: Vec<GrantId> = self.files.get(&file).map(|f| f.grants.clone()).unwrap_or_default();
        for id in ids {
            let Some(g) = self.grants.by_id.get_mut(&id) else { continue };
            if g.scope != Scope::Lease || !g.members.contains(open) {
                continue;
            }
            g.members.retain(|m| m != open);
            if g.members.is_empty() {
                self.release_grant(id);
            }
        }
    }

    /// Gives a grant back (SMB close of the lease's last open, NFSv4
    /// DELEGRETURN outside a recall).
    pub fn release_grant(&mut self, id: GrantId) {
        if let Some(g) = self.grants.by_id.remove(&id) {
            let k = (g.holder.proto, g.holder.client);
            if let Some(n) = self.grants.per_client.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.grants.per_client.remove(&k);
                }
            }
            if let Some(f) = self.files.get_mut(&g.file) {
                f.grants.retain(|x| *x != id);
            }
            self.tidy(g.file);
        }
    }
}
