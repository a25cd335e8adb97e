use super::*;

const F: FileId = 42;

fn smb(conn: u64, open: u64) -> Holder {
    Holder::new(Protocol::Smb, conn, open)
}

fn nfs(client: u64, owner: u64) -> Holder {
    Holder::new(Protocol::Nfs4, client, owner)
}

fn r(o: u64, l: u64) -> Range {
    Range::smb(o, l).unwrap()
}

fn n(o: u64, l: u64) -> Range {
    Range::nfs(o, l).unwrap()
}

// MS-SMB2 access bits.
const READ_DATA: u32 = 0x1;
const WRITE_DATA: u32 = 0x2;
const DELETE: u32 = 0x1_0000;
const READ_ATTRS: u32 = 0x80;

#[test]
fn smb_share_modes_follow_ms_fsa() {
    let mut t = Table::default();
    assert_eq!(t.open(F, smb(1, 1), Share::smb(READ_DATA, 1)), Ok(()));
    // Reading is shared; writing is not.
    assert_eq!(t.open(F, smb(1, 2), Share::smb(READ_DATA, 3)), Ok(()));
    assert_eq!(t.open(F, smb(2, 1), Share::smb(WRITE_DATA, 3)), Err(false));
    // The new open must share what the old ones use.
    assert_eq!(t.open(F, smb(2, 2), Share::smb(READ_DATA, 2)), Err(false));
    // Attribute-only opens never conflict, whatever they share.
    assert_eq!(t.open(F, smb(2, 3), Share::smb(READ_ATTRS, 0)), Ok(()));
    assert_eq!(t.open(F, smb(2, 4), Share::smb(DELETE, 3)), Err(false));
    t.close(F, &smb(1, 1));
    t.close(F, &smb(1, 2));
    assert_eq!(t.open(F, smb(2, 5), Share::smb(WRITE_DATA | DELETE, 0)), Ok(()));
    assert_eq!(t.other_opens(F, &smb(2, 5)), 1);
    t.release_client(Protocol::Smb, 2);
    assert_eq!(t.counts(), Counts::default());
}

#[test]
fn nfs_share_reservations_follow_rfc_8881() {
    let mut t = Table::default();
    // RFC 8881 9.7: OPEN4_SHARE_ACCESS_READ with DENY_WRITE.
    assert_eq!(t.open(F, nfs(1, 1), Share::nfs(1, 2)), Ok(()));
    assert_eq!(t.open(F, nfs(2, 1), Share::nfs(2, 0)), Err(false));
    assert_eq!(t.open(F, nfs(2, 1), Share::nfs(1, 0)), Ok(()));
    // The second opener reads: nobody may now deny reads.
    assert_eq!(t.open(F, nfs(3, 1), Share::nfs(1, 1)), Err(false));
    // An upgrade by the same owner is checked against the others only,
    // with the union of its modes.
    assert_eq!(t.open(F, nfs(1, 1), Share::nfs(2, 0)), Ok(()), "the other opener only reads");
    assert_eq!(t.open(F, nfs(2, 1), Share::nfs(1, 1)), Err(false), "owner 1 now reads and writes");
}

#[test]
fn nfs_upgrade_and_downgrade() {
    let mut t = Table::default();
    assert_eq!(t.open(F, nfs(1, 1), Share::nfs(1, 0)), Ok(()));
    assert_eq!(t.open(F, nfs(1, 1), Share::nfs(2, 2)), Ok(()), "upgrade to read+write deny write");
    assert_eq!(t.open(F, nfs(2, 1), Share::nfs(2, 0)), Err(false));
    t.set_share(F, &nfs(1, 1), Share::nfs(1, 0));
    assert_eq!(t.open(F, nfs(2, 1), Share::nfs(2, 0)), Ok(()));
    assert_eq!(t.counts().opens, 2);
}

#[test]
fn share_modes_hold_across_protocols() {
    let mut t = Table::default();
    // SMB read with FILE_SHARE_READ only: NFS writers are refused.
    assert_eq!(t.open(F, smb(1, 1), Share::smb(READ_DATA, 1)), Ok(()));
    assert_eq!(t.open(F, nfs(7, 1), Share::nfs(2, 0)), Err(false));
    assert_eq!(t.open(F, nfs(7, 1), Share::nfs(1, 0)), Ok(()));
    t.release_client(Protocol::Smb, 1);
    // NFS deny-write: SMB writers get a sharing violation, readers not.
    assert_eq!(t.open(F, nfs(7, 2), Share::nfs(1, 2)), Ok(()));
    assert_eq!(t.open(F, smb(1, 2), Share::smb(WRITE_DATA, 7)), Err(false));
    assert_eq!(t.open(F, smb(1, 3), Share::smb(READ_DATA, 7)), Ok(()));
    // An SMB DELETE open is not refused by NFS (no delete access there).
    assert_eq!(t.open(F, smb(1, 4), Share::smb(DELETE, 7)), Ok(()));
}

#[test]
fn open_limit() {
    let mut t = Table::new(Limits { opens: 2, ..Limits::default() });
    assert!(t.open(1, smb(1, 1), Share::smb(READ_DATA, 7)).is_ok());
    assert!(t.open(2, smb(1, 2), Share::smb(READ_DATA, 7)).is_ok());
    assert_eq!(t.open(3, smb(1, 3), Share::smb(READ_DATA, 7)), Err(true));
    // An upgrade of an existing open is not a new one.
    assert!(t.open(2, smb(1, 2), Share::smb(READ_DATA, 3)).is_ok());
    t.close(1, &smb(1, 1));
    assert!(t.open(3, smb(1, 3), Share::smb(READ_DATA, 7)).is_ok());
}

#[test]
fn smb_locks_stack_and_conflict() {
    let mut t = Table::default();
    let (a, b) = (smb(1, 1), smb(2, 1));
    t.lock(F, a, r(0, 10), false).unwrap();
    // Shared locks stack, from anyone.
    t.lock(F, a, r(5, 10), false).unwrap();
    t.lock(F, b, r(0, 10), false).unwrap();
    // No exclusive lock over a shared one, not even the holder's own.
    assert!(matches!(t.lock(F, a, r(9, 1), true), Err(LockError::Conflict(_))));
    t.lock(F, a, r(100, 10), true).unwrap();
    // A shared lock stacks on the same open's exclusive lock, not on
    // another's; an exclusive one overlaps nothing, own locks included.
    t.lock(F, a, r(105, 1), false).unwrap();
    assert!(matches!(t.lock(F, a, r(105, 1), true), Err(LockError::Conflict(_))));
    let Err(LockError::Conflict(c)) = t.lock(F, b, r(109, 5), false) else { panic!() };
    assert_eq!((c.holder, c.range, c.exclusive), (a, r(100, 10), true));
    // Adjacent ranges do not conflict.
    t.lock(F, b, r(110, 1), true).unwrap();
    assert_eq!(t.counts().locks, 6);
}

#[test]
fn smb_unlock_is_exact() {
    let mut t = Table::default();
    let a = smb(1, 1);
    t.lock(F, a, r(0, 10), false).unwrap();
    t.lock(F, a, r(0, 10), false).unwrap();
    assert!(t.unlock_exact(F, &a, &r(0, 5)).is_err());
    assert!(t.unlock_exact(F, &smb(1, 2), &r(0, 10)).is_err(), "another open's unlock");
    assert!(t.unlock_exact(F, &a, &r(0, 10)).is_ok());
    assert!(t.holds_exact(F, &a, &r(0, 10)), "one of the stacked pair stays");
    assert!(t.unlock_exact(F, &a, &r(0, 10)).is_ok());
    assert!(t.unlock_exact(F, &a, &r(0, 10)).is_err());
    assert_eq!(t.counts(), Counts::default());
}

#[test]
fn smb_zero_length_locks() {
    let mut t = Table::default();
    let (a, b) = (smb(1, 1), smb(2, 1));
    t.lock(F, a, r(0, 0), true).unwrap();
    t.lock(F, b, r(0, 0), true).unwrap();
    t.lock(F, a, r(10, 0), true).unwrap();
    // {10, 0} meets a range over bytes 9 and 10.
    assert!(t.lock(F, b, r(5, 10), true).is_err());
    assert!(t.lock(F, b, r(10, 5), true).is_ok());
}

#[test]
fn io_checks_follow_ms_fsa_2_1_4_10() {
    let mut t = Table::default();
    let (a, b) = (smb(1, 1), smb(2, 1));
    t.lock(F, a, r(0, 10), true).unwrap();
    t.lock(F, a, r(100, 10), false).unwrap();
    // The holder of an exclusive lock reads and writes it.
    assert!(t.check_io(F, &a, &Range::io(0, 10), false).is_none());
    assert!(t.check_io(F, &a, &Range::io(0, 10), true).is_none());
    // Others do neither.
    assert!(t.check_io(F, &b, &Range::io(5, 1), false).is_some());
    assert!(t.check_io(F, &b, &Range::io(9, 100), true).is_some());
    // A shared lock lets everyone read and nobody write, its holder too.
    assert!(t.check_io(F, &b, &Range::io(100, 10), false).is_none());
    assert!(t.check_io(F, &a, &Range::io(100, 1), true).is_some());
    assert!(t.check_io(F, &b, &Range::io(105, 1), true).is_some());
    // Outside and zero bytes: free.
    assert!(t.check_io(F, &b, &Range::io(10, 90), true).is_none());
    assert!(t.check_io(F, &b, &Range::io(5, 0), true).is_none());
}

#[test]
fn nfs_locks_are_posix() {
    let mut t = Table::default();
    let o = nfs(1, 1);
    t.lock(F, o, n(0, 100), false).unwrap();
    // The owner's own lock is replaced: upgrade of the middle.
    t.lock(F, o, n(10, 10), true).unwrap();
    assert_eq!(t.locks(F).len(), 3);
    let other = nfs(2, 1);
    assert!(t.test_lock(F, &other, &n(0, 5), false).is_none());
    let c = t.test_lock(F, &other, &n(15, 1), false).unwrap();
    assert_eq!((c.range.first(), c.range.last(), c.exclusive), (10, 19, true));
    assert!(t.test_lock(F, &other, &n(50, 1), true).is_some());
    // Unlock splits.
    t.unlock_range(F, &o, &n(40, 20));
    assert!(t.test_lock(F, &other, &n(45, 10), true).is_none());
    assert!(t.test_lock(F, &other, &n(39, 2), true).is_some());
    // To EOF.
    t.lock(F, o, Range::nfs(1000, u64::MAX).unwrap(), true).unwrap();
    let c = t.test_lock(F, &other, &n(u64::MAX - 1, 1), false).unwrap();
    assert_eq!(c.range.nfs_length(), u64::MAX);
    t.unlock_range(F, &o, &Range::from(0));
    assert!(!t.has_locks(F, &o));
    assert_eq!(t.counts(), Counts::default());
}

#[test]
fn nfs_io_is_advisory_among_nfs_but_bound_by_smb() {
    let mut t = Table::default();
    let (s, o1, o2) = (smb(1, 1), nfs(1, 1), nfs(2, 1));
    t.lock(F, o1, n(0, 10), true).unwrap();
    // NFS I/O ignores NFS locks (advisory, RFC 8881 9.1.1 leaves it to
    // the server; POSIX clients expect advisory locks).
    assert!(t.check_io(F, &o2, &Range::io(0, 10), true).is_none());
    // SMB I/O honours them (mandatory semantics across protocols).
    assert!(t.check_io(F, &s, &Range::io(0, 10), false).is_some());
    t.lock(F, s, r(100, 10), false).unwrap();
    // NFS I/O honours SMB locks: NFS4ERR_LOCKED.
    assert!(t.check_io(F, &o2, &Range::io(100, 1), true).is_some());
    assert!(t.check_io(F, &o2, &Range::io(100, 1), false).is_none());
}

#[test]
fn smb_and_nfs_locks_conflict() {
    let mut t = Table::default();
    let (s, o) = (smb(1, 1), nfs(9, 3));
    t.lock(F, s, r(0, 10), true).unwrap();
    let Err(LockError::Conflict(c)) = t.lock(F, o, n(5, 1), false) else { panic!() };
    assert_eq!(c.holder, s);
    t.lock(F, o, n(10, u64::MAX), false).unwrap();
    let Err(LockError::Conflict(c)) = t.lock(F, s, r(1 << 40, 1), true) else { panic!() };
    assert_eq!(c.holder, o);
    // Shared with shared is fine across protocols.
    t.lock(F, s, r(20, 1), false).unwrap();
}

#[test]
fn lock_limits() {
    let mut t = Table::new(Limits { locks_per_file: 3, locks_per_holder: 2, locks: 4, ..Limits::default() });
    let (a, b, c) = (smb(1, 1), smb(1, 2), smb(1, 3));
    t.lock(1, a, r(0, 1), false).unwrap();
    t.lock(1, a, r(1, 1), false).unwrap();
    assert_eq!(t.lock(1, a, r(2, 1), false), Err(LockError::Limit), "per holder");
    t.lock(1, b, r(2, 1), false).unwrap();
    assert_eq!(t.lock(1, c, r(3, 1), false), Err(LockError::Limit), "per file");
    t.lock(2, c, r(3, 1), false).unwrap();
    assert_eq!(t.lock(3, c, r(3, 1), false), Err(LockError::Limit), "in all");
    t.release_client(Protocol::Smb, 1);
    assert_eq!(t.counts(), Counts::default());
}

#[test]
fn waiters_are_granted_in_order_on_unlock() {
    let mut t = Table::default();
    let (a, b, c) = (smb(1, 1), smb(2, 1), smb(3, 1));
    t.lock(F, a, r(0, 10), true).unwrap();
    let wb = t.lock_or_wait(F, b, r(0, 10), true, None, 77).unwrap().unwrap();
    let wc = t.lock_or_wait(F, c, r(5, 1), false, None, 78).unwrap().unwrap();
    assert_eq!(t.counts().waiters, 2);
    // Free now: granted at once.
    assert_eq!(t.lock_or_wait(F, c, r(50, 1), false, None, 79), Ok(None));
    let woke = t.unlock_exact(F, &a, &r(0, 10)).unwrap();
    // b first; c conflicts with b's new exclusive lock and keeps waiting.
    assert_eq!(woke, vec![Outcome::Granted { id: wb, file: F, holder: b, tag: 77 }]);
    assert!(t.is_waiting(wc));
    assert_eq!(t.take_outcomes(Protocol::Smb, 2), woke);
    assert!(t.take_outcomes(Protocol::Smb, 2).is_empty());
    assert!(t.check_io(F, &a, &Range::io(0, 1), false).is_some(), "b holds it now");
    // b's connection drops: c gets its lock.
    let woke = t.release_client(Protocol::Smb, 2);
    assert_eq!(woke, vec![Outcome::Granted { id: wc, file: F, holder: c, tag: 78 }]);
    assert!(t.has_outcomes(Protocol::Smb, 3));
}

#[test]
fn waiters_cancel_expire_and_drop() {
    let mut t = Table::new(Limits { waiters_per_file: 2, ..Limits::default() });
    let (a, b, c, d) = (smb(1, 1), smb(2, 1), smb(3, 1), smb(4, 1));
    t.lock(F, a, r(0, 10), true).unwrap();
    let wb = t.lock_or_wait(F, b, r(0, 1), true, Some(1_000), 1).unwrap().unwrap();
    let wc = t.lock_or_wait(F, c, r(0, 1), true, Some(500), 2).unwrap().unwrap();
    assert_eq!(t.lock_or_wait(F, d, r(0, 1), true, None, 3), Err(LockError::Limit));
    assert_eq!(t.poll_timeout(), Some(500));
    let out = t.handle_timeout(499);
    assert!(out.expired.is_empty());
    let out = t.handle_timeout(500);
    assert_eq!(out.expired, vec![Outcome::Expired { id: wc, file: F, holder: c, tag: 2 }]);
    assert_eq!(t.take_outcomes(Protocol::Smb, 3), out.expired);
    assert_eq!(t.poll_timeout(), Some(1_000));
    assert!(t.cancel(wb));
    assert!(!t.cancel(wb));
    assert!(t.take_outcomes(Protocol::Smb, 2).is_empty(), "a cancel is answered by its caller");
    assert_eq!(t.poll_timeout(), None);
    // A waiter whose open closes is dropped.
    let wd = t.lock_or_wait(F, d, r(0, 1), true, None, 4).unwrap().unwrap();
    let out = t.release(F, &d);
    assert_eq!(out, vec![Outcome::Dropped { id: wd, file: F, holder: d, tag: 4 }]);
    assert_eq!(t.counts().waiters, 0);
}

#[test]
fn nfs_waiter_is_granted_when_smb_unlocks() {
    let mut t = Table::default();
    let (s, o) = (smb(1, 1), nfs(5, 5));
    t.lock(F, s, r(0, 100), false).unwrap();
    let w = t.lock_or_wait(F, o, n(50, u64::MAX), true, Some(10), 9).unwrap().unwrap();
    t.unlock_exact(F, &s, &r(0, 100)).unwrap();
    assert_eq!(t.take_outcomes(Protocol::Nfs4, 5), vec![Outcome::Granted { id: w, file: F, holder: o, tag: 9 }]);
    assert!(t.check_io(F, &s, &Range::io(60, 1), false).is_some());
}

#[test]
fn grants_follow_the_model() {
    let mut t = Table::new(Limits { break_timeout_ns: 100, recall_backoff_ns: 1_000, ..Limits::default() });
    let (a, a2, b) = (smb(1, 1), smb(1, 2), smb(2, 1));
    t.open(F, a, Share::smb(READ_DATA, 7)).unwrap();
    let (g, l) = t.request_grant(F, a, Level::RWH, 0).unwrap();
    assert_eq!(l, Level::RWH);
    // The holder's own second open breaks nothing.
    let (breaks, wait) = t.break_for_open(F, &a2, Share::smb(READ_DATA, 7), 5);
    assert!(breaks.is_empty() && wait.is_none());
    // Another client's reader: write caching goes, with an ack awaited.
    let (breaks, wait) = t.break_for_open(F, &b, Share::smb(READ_DATA, 7), 10);
    assert_eq!(breaks, vec![Break { grant: g, holder: a, from: Level::RWH, to: Level::RH, ack_needed: true }]);
    assert_eq!(wait, Some(110));
    assert_eq!(t.grant(g), Some((Level::RWH, true)));
    assert_eq!(t.counts().breaking, 1);
    assert_eq!(t.poll_timeout(), Some(110));
    // Nothing new while the break runs or just after.
    assert!(t.request_grant(F, b, Level::R, 20).is_none());
    assert_eq!(t.ack(g, Level::RWH), Err(AckError::TooHigh));
    assert_eq!(t.ack(g, Level::RH), Ok(()));
    assert_eq!(t.ack(g, Level::RH), Err(AckError::NotBreaking));
    assert_eq!(t.grant(g), Some((Level::RH, false)));
    assert!(t.break_deadline(F, &b).is_none());
    assert!(t.request_grant(F, b, Level::R, 500).is_none(), "recalled a moment ago");
    // After the backoff, a reader may share read caching.
    t.open(F, b, Share::smb(READ_DATA, 7)).unwrap();
    let (gb, lb) = t.request_grant(F, b, Level::RW, 2_000).unwrap();
    assert_eq!(lb, Level::R, "write caching needs the file to itself");
    // A writer of a third client: R goes from both. b's R-only grant
    // lowers to nothing at once; a's RH breaks to H... which is no lease
    // state, so to none, acknowledged.
    let c = nfs(3, 1);
    let (breaks, wait) = t.break_for_open(F, &c, Share::nfs(2, 0), 3_000);
    assert_eq!(breaks.len(), 2);
    let bb = breaks.iter().find(|x| x.grant == gb).unwrap();
    assert!(!bb.ack_needed && bb.to.is_none());
    assert!(t.grant(gb).is_none(), "gone without an ack");
    assert_eq!(wait, Some(3_100));
    // a never answers: revoked at the deadline.
    assert!(t.handle_timeout(3_099).revoked.is_empty());
    let out = t.handle_timeout(3_100);
    assert_eq!(out.revoked, vec![(g, a)]);
    assert!(t.grant(g).is_none());
    assert_eq!(t.ack(g, Level::NONE), Err(AckError::Unknown));
    assert_eq!(t.counts().grants, 0);
}

#[test]
fn grants_respect_other_opens_and_limits() {
    let mut t = Table::new(Limits { grants: 1, ..Limits::default() });
    let (a, b) = (nfs(1, 1), nfs(2, 1));
    t.open(F, b, Share::nfs(2, 0)).unwrap();
    // Someone else writes: no read caching (no read delegation).
    assert!(t.request_grant(F, a, Level::R, 0).is_none());
    t.close(F, &b);
    t.open(F, b, Share::nfs(1, 0)).unwrap();
    assert_eq!(t.request_grant(F, a, Level::RW, 0).map(|x| x.1), Some(Level::R));
    // Asking again raises, and the limit counts grants, not requests.
    assert_eq!(t.request_grant(F, a, Level::R, 0).map(|x| x.1), Some(Level::R));
    assert!(t.request_grant(F + 1, a, Level::R, 0).is_none(), "over the limit");
    // H or W without R is no level.
    assert!(t.request_grant(F + 2, b, Level::H, 0).is_none());
    // Releasing the holder releases its grants.
    t.release(F, &a);
    assert_eq!(t.counts().grants, 0);
}

#[test]
fn deny_mode_conflict_breaks_handle_caching() {
    let mut t = Table::default();
    let (a, b) = (smb(1, 1), smb(2, 1));
    t.open(F, a, Share::smb(READ_DATA, 1)).unwrap();
    let (g, _) = t.request_grant(F, a, Level::RH, 0).unwrap();
    // b wants to write; a's open does not share writes: a is asked to
    // give up its handle so the open may go through.
    let (breaks, wait) = t.break_for_open(F, &b, Share::smb(WRITE_DATA, 7), 0);
    assert_eq!(breaks.len(), 1);
    assert_eq!(breaks[0].to, Level::NONE);
    assert!(wait.is_some());
    t.ack(g, Level::NONE).unwrap();
    assert!(t.grant(g).is_none());
    assert!(t.break_deadline(F, &b).is_none());
}

#[test]
fn release_client_clears_everything() {
    let mut t = Table::default();
    for f in 0..10 {
        let h = nfs(4, f);
        t.open(f, h, Share::nfs(3, 0)).unwrap();
        t.lock(f, h, n(0, 10), true).unwrap();
        t.request_grant(f, h, Level::RW, 0).unwrap();
    }
    t.lock(3, smb(1, 1), r(20, 1), true).unwrap();
    let w = t.lock_or_wait(3, smb(1, 1), r(0, 1), true, None, 0).unwrap().unwrap();
    let out = t.release_client(Protocol::Nfs4, 4);
    assert_eq!(out, vec![Outcome::Granted { id: w, file: 3, holder: smb(1, 1), tag: 0 }]);
    let c = t.counts();
    assert_eq!((c.opens, c.locks, c.waiters, c.grants, c.files), (0, 2, 0, 0, 1));
}

#[test]
fn manager_is_shared() {
    let m = std::sync::Arc::new(LockManager::default());
    let m2 = m.clone();
    std::thread::spawn(move || {
        m2.table().lock(F, smb(1, 1), r(0, 1), true).unwrap();
    })
    .join()
    .unwrap();
    assert!(m.table().lock(F, nfs(1, 1), n(0, 1), false).is_err());
}

#[test]
fn an_oplock_belongs_to_one_open() {
    let mut t = Table::new(Limits { break_timeout_ns: 100, recall_backoff_ns: 0, ..Limits::default() });
    let (a, a2) = (smb(1, 1), smb(1, 2));
    t.open(F, a, Share::smb(READ_DATA, 7)).unwrap();
    let (g, l) = t.request_open_grant(F, a, Level::RWH, 0).unwrap();
    assert_eq!(l, Level::RWH, "its own open does not count against it");
    // A second open of the same connection breaks it (MS-SMB2 3.3.5.9.8).
    let (breaks, wait) = t.break_for_open(F, &a2, Share::smb(READ_DATA, 7), 5);
    assert_eq!(breaks, vec![Break { grant: g, holder: a, from: Level::RWH, to: Level::RH, ack_needed: true }]);
    assert_eq!(wait, Some(105));
    t.ack(g, Level::R).unwrap();
    t.open(F, a2, Share::smb(READ_DATA, 7)).unwrap();
    // The second open shares read caching with the first.
    let (g2, l2) = t.request_open_grant(F, a2, Level::RWH, 10).unwrap();
    assert_ne!(g2, g);
    assert_eq!(l2, Level::RH);
    // A write through a third open takes read caching from both at once.
    let (breaks, _) = t.break_for_open(F, &smb(1, 3), Share::smb(WRITE_DATA, 7), 20);
    assert_eq!(breaks.len(), 2);
}

#[test]
fn smb_opens_break_write_caching_and_writes_read_caching() {
    let mut t = Table::new(Limits { break_timeout_ns: 100, recall_backoff_ns: 0, ..Limits::default() });
    let (a, b, c) = (smb(1, 1), smb(2, 1), smb(3, 1));
    t.open(F, a, Share::smb(READ_DATA | WRITE_DATA, 7)).unwrap();
    let (g, _) = t.request_open_grant(F, a, Level::RWH, 0).unwrap();
    // An SMB open for writing leaves the holder read and handle caching.
    let (breaks, wait) = t.break_for(F, &b, Share::smb(READ_DATA | WRITE_DATA, 7), Conflict::SmbOpen, 1);
    assert_eq!(breaks[0].to, Level::RH);
    assert_eq!(wait, Some(101));
    t.ack(g, Level::R).unwrap();
    // Level II beside a writer's open (an oplock is one open's).
    t.open(F, b, Share::smb(READ_DATA | WRITE_DATA, 7)).unwrap();
    let (gb, lb) = t.request_open_grant(F, b, Level::RWH, 2).unwrap();
    assert_eq!(lb, Level::RH);
    // ... but not a lease or delegation (a client's).
    assert!(t.request_grant(F, c, Level::R, 2).is_none());
    // An attribute-only open breaks nothing.
    let (breaks, _) = t.break_for(F, &c, Share::smb(READ_ATTRS, 0), Conflict::SmbOpen, 3);
    assert!(breaks.is_empty());
    // A write through c: read caching goes from both, a's without an ack.
    let (breaks, _) = t.break_for(F, &c, Share::smb(WRITE_DATA, 7), Conflict::Write, 4);
    assert_eq!(breaks.len(), 2);
    let ba = breaks.iter().find(|x| x.grant == g).unwrap();
    assert!(!ba.ack_needed && ba.to.is_none());
    let bb = breaks.iter().find(|x| x.grant == gb).unwrap();
    assert!(bb.ack_needed && bb.to.is_none());
}

/// A lease's name in the table: connection 1, lease `k` (MS-SMB2 leases are
/// keyed by ClientGuid and LeaseKey).
fn lease(conn: u64, k: u64) -> Holder {
    smb(conn, (1 << 63) | k)
}

#[test]
fn leases_are_shared_by_their_opens_and_broken_by_others() {
    let mut t = Table::new(Limits { break_timeout_ns: 100, recall_backoff_ns: 0, ..Limits::default() });
    let all = READ_DATA | WRITE_DATA;
    let (l1, l2) = (lease(1, 1), lease(1, 2));
    let (o1, o2, o3) = (smb(1, 1), smb(1, 2), smb(1, 3));
    t.open(F, o1, Share::smb(all, 7)).unwrap();
    let (g1, l, breaking) = t.request_lease(F, l1, &[o1], Level::RWH, 0).unwrap();
    assert_eq!((l, breaking), (Level::RWH, false));
    // A second open by the same lease key breaks nothing and shares it
    // (MS-SMB2 3.3.5.9.8).
    let (breaks, wait) = t.break_for(F, &l1, Share::smb(all, 7), Conflict::SmbOpen, 5);
    assert!(breaks.is_empty() && wait.is_none());
    t.open(F, o2, Share::smb(all, 7)).unwrap();
    assert_eq!(t.request_lease(F, l1, &[o2], Level::RWH, 5), Some((g1, Level::RWH, false)));
    // Another lease key of the same connection: RWH breaks to RH, acked.
    let (breaks, wait) = t.break_for(F, &l2, Share::smb(all, 7), Conflict::SmbOpen, 10);
    assert_eq!(breaks, vec![Break { grant: g1, holder: l1, from: Level::RWH, to: Level::RH, ack_needed: true }]);
    assert_eq!(wait, Some(110));
    // An open by the lease's key meanwhile gets the lease as it is, breaking.
    assert_eq!(t.request_lease(F, l1, &[o2], Level::RWH, 20), Some((g1, Level::RWH, true)));
    assert_eq!(t.ack(g1, Level::RH), Ok(()));
    assert!(t.break_deadline(F, &l2).is_none());
    // The contender gets RH beside it (smbtorture smb2.lease.break: hold
    // RHW, ask RHW: broken to RH, granted RH).
    t.open(F, o3, Share::smb(all, 7)).unwrap();
    let (g2, l, _) = t.request_lease(F, l2, &[o3], Level::RWH, 30).unwrap();
    assert_eq!(l, Level::RH);
    // Asking for RWH again changes nothing now that another lease is held.
    assert_eq!(t.request_lease(F, l1, &[o1], Level::RWH, 40), Some((g1, Level::RH, false)));
    // A write through o3 (lease 2's own open) breaks lease 1's read
    // caching but not lease 2's.
    let (breaks, _) = t.break_for(F, &o3, Share::smb(WRITE_DATA, 0), Conflict::Write, 50);
    assert_eq!(breaks.len(), 1);
    assert_eq!((breaks[0].grant, breaks[0].to), (g1, Level::NONE));
    assert!(breaks[0].ack_needed, "RH holds handle caching: acknowledged");
    assert_eq!(t.ack(g1, Level::NONE), Ok(()));
    assert!(t.grant(g1).is_none());
    // The lease goes with the last of its opens.
    t.release(F, &o3);
    assert!(t.grant(g2).is_none());
    assert_eq!(t.counts().grants, 0);
}

#[test]
fn lease_upgrades_are_all_or_nothing() {
    let mut t = Table::new(Limits { recall_backoff_ns: 0, ..Limits::default() });
    let all = READ_DATA | WRITE_DATA;
    let (l1, l2) = (lease(1, 1), lease(2, 1));
    let (o1, o2) = (smb(1, 1), smb(2, 1));
    t.open(F, o1, Share::smb(all, 7)).unwrap();
    let (g, l, _) = t.request_lease(F, l1, &[o1], Level::RH, 0).unwrap();
    assert_eq!(l, Level::RH);
    // RW is no superset of RH: RH stays (smbtorture smb2.lease.upgrade).
    assert_eq!(t.request_lease(F, l1, &[o1], Level::RW, 1), Some((g, Level::RH, false)));
    // Asking for less keeps what is held.
    assert_eq!(t.request_lease(F, l1, &[o1], Level::R, 2), Some((g, Level::RH, false)));
    assert_eq!(t.request_lease(F, l1, &[o1], Level::RWH, 3), Some((g, Level::RWH, false)));
    // H or W without R is no lease state: nothing.
    t.open(F, o2, Share::smb(READ_DATA, 7)).unwrap();
    assert!(t.request_lease(F, l2, &[o2], Level::H, 4).is_none());
    assert!(t.request_lease(F, l2, &[o2], Level::W, 4).is_none());
    // A stat open (no data access) of another lease leaves W alone.
    let (breaks, _) = t.break_for(F, &l2, Share::smb(READ_ATTRS, 7), Conflict::SmbOpen, 5);
    assert!(breaks.is_empty());
    t.release(F, &o1);
    assert!(t.grant(g).is_none(), "its only open closed");
}

#[test]
fn share_conflicts_break_handle_caching_only_and_oplocks_yield_to_handle_leases() {
    let mut t = Table::new(Limits { break_timeout_ns: 100, recall_backoff_ns: 0, ..Limits::default() });
    let all = READ_DATA | WRITE_DATA;
    let (l1, l2) = (lease(1, 1), lease(1, 2));
    let (o1, o2) = (smb(1, 1), smb(1, 2));
    t.open(F, o1, Share::smb(all, 7)).unwrap();
    let (g1, _, _) = t.request_lease(F, l1, &[o1], Level::RWH, 0).unwrap();
    // An open that denies the holder's writing (share READ only): only
    // handle caching goes (smbtorture smb2.lease.break_twice: RWH to RW).
    let (breaks, _) = t.break_for(F, &l2, Share::smb(all, 1), Conflict::SmbOpen, 1);
    assert_eq!((breaks.len(), breaks[0].to), (1, Level::RW));
    assert_eq!(t.ack(g1, Level::RW), Ok(()));
    // Still refused: nothing more to break (the open fails on its share mode).
    assert!(t.break_for(F, &l2, Share::smb(all, 1), Conflict::SmbOpen, 2).0.is_empty());
    // A compatible one takes write caching.
    let (breaks, _) = t.break_for(F, &l2, Share::smb(all, 7), Conflict::SmbOpen, 3);
    assert_eq!(breaks[0].to, Level::R);
    assert_eq!(t.ack(g1, Level::R), Ok(()));
    // An oplock beside an R lease keeps no write caching (RH, which the
    // SMB layer answers as level II); beside an RH lease it gets nothing.
    t.open(F, o2, Share::smb(all, 7)).unwrap();
    assert_eq!(t.request_open_grant(F, o2, Level::RWH, 4).map(|x| x.1), Some(Level::RH));
    t.release(F, &o2);
    assert_eq!(t.request_lease(F, l1, &[o1], Level::RH, 5).map(|x| x.1), Some(Level::RH));
    t.open(F, o2, Share::smb(all, 7)).unwrap();
    assert!(t.request_open_grant(F, o2, Level::R, 6).is_none());
}

/// MS-FSA 2.1.5.14.2 / 2.1.5.14.3: a rename or delete takes handle
/// caching from other holders' leases (acknowledged), not from the
/// renamer's own lease, and leaves oplocks alone.
#[test]
fn a_rename_or_delete_breaks_handle_caching_of_other_leases() {
    let mut t = Table::new(Limits { break_timeout_ns: 100, recall_backoff_ns: 0, ..Limits::default() });
    let all = READ_DATA | WRITE_DATA;
    let (l1, l2) = (lease(1, 1), lease(2, 2));
    let (o1, o2) = (smb(1, 1), smb(2, 2));
    t.open(F, o1, Share::smb(READ_DATA, 7)).unwrap();
    let (g1, l, _) = t.request_lease(F, l1, &[o1], Level::RH, 0).unwrap();
    assert_eq!(l, Level::RH);
    t.open(F, o2, Share::smb(all | 0x10000, 7)).unwrap();
    // Its own lease's open renames: nothing to break.
    let (breaks, wait) = t.break_for(F, &o1, Share { access: 0, deny: 0 }, Conflict::Namespace, 1);
    assert!(breaks.is_empty() && wait.is_none());
    // Another's: RH -> R, acknowledged, and the renamer waits for it.
    let (breaks, wait) = t.break_for(F, &o2, Share { access: 0, deny: 0 }, Conflict::Namespace, 2);
    assert_eq!(breaks, vec![Break { grant: g1, holder: l1, from: Level::RH, to: Level::R, ack_needed: true }]);
    assert_eq!(wait, Some(102));
    assert_eq!(t.ack(g1, Level::R), Ok(()));
    assert!(t.break_deadline(F, &o2).is_none());
    // R alone has no handle caching: nothing more.
    assert!(t.break_for(F, &o2, Share { access: 0, deny: 0 }, Conflict::Namespace, 3).0.is_empty());
    // An oplock (one open's grant) is not a lease: untouched.
    let mut t = Table::new(Limits { break_timeout_ns: 100, recall_backoff_ns: 0, ..Limits::default() });
    t.open(F, o1, Share::smb(READ_DATA, 7)).unwrap();
    assert!(t.request_open_grant(F, o1, Level::RWH, 0).is_some());
    t.open(F, o2, Share::smb(0x10000, 7)).unwrap();
    assert!(t.break_for(F, &o2, Share { access: 0, deny: 0 }, Conflict::Namespace, 1).0.is_empty());
    let _ = l2;
}

/// An NFSv4 opener (issue 13 across protocols): its OPEN for writing
/// breaks an SMB RWH lease to none and waits for the acknowledgment; a
/// byte-range lock breaks read caching of others without waiting; a break
/// nobody acknowledges is revoked by `revoke_overdue` alone (waiters keep
/// their deadlines for `handle_timeout`), so the NFS side can end it
/// without any SMB connection polling.
#[test]
fn nfs_openers_break_smb_leases_and_revoke_overdue_ones() {
    let mut t = Table::new(Limits { break_timeout_ns: 100, recall_backoff_ns: 0, ..Limits::default() });
    assert!(!t.has_grants());
    let (l1, o1) = (lease(1, 1), smb(1, 1));
    t.open(F, o1, Share::smb(READ_DATA | WRITE_DATA, 7)).unwrap();
    let (g1, l, _) = t.request_lease(F, l1, &[o1], Level::RWH, 0).unwrap();
    assert_eq!(l, Level::RWH);
    assert!(t.has_grants());
    let opener = nfs(9, 0);
    let (breaks, wait) = t.break_for(F, &opener, Share::nfs(3, 0), Conflict::Open, 10);
    assert_eq!(breaks, vec![Break { grant: g1, holder: l1, from: Level::RWH, to: Level::NONE, ack_needed: true }]);
    assert_eq!(wait, Some(110));
    // A waiter with a deadline of its own stays for handle_timeout.
    t.lock(F, o1, r(0, 10), true).unwrap();
    let w = t.lock_or_wait(F, smb(2, 2), r(0, 1), true, Some(50), 7).unwrap().unwrap();
    assert!(t.revoke_overdue(109).is_empty(), "not yet");
    assert_eq!(t.revoke_overdue(110), vec![(g1, l1)]);
    assert!(!t.has_grants() && t.break_deadline(F, &opener).is_none());
    assert!(t.is_waiting(w), "revoke_overdue leaves waiters alone");
    assert_eq!(t.handle_timeout(110).expired.len(), 1);
    // Read caching: a lock (as Conflict::Write) takes it, no ack.
    let (g2, l, _) = t.request_lease(F, l1, &[o1], Level::R, 200).unwrap();
    assert_eq!(l, Level::R);
    let (breaks, wait) = t.break_for(F, &opener, Share { access: share::WRITE, deny: 0 }, Conflict::Write, 201);
    assert_eq!(breaks, vec![Break { grant: g2, holder: l1, from: Level::R, to: Level::NONE, ack_needed: false }]);
    assert!(wait.is_none() && !t.has_grants());
}

/// NFSv4 delegations (RFC 8881 10.4) in the grant model: all or nothing,
/// the break always waits for the holder (DELEGRETURN), readers leave a
/// read delegation alone, writers and renames take it, a write delegation
/// goes for any other open; `break_delegations` touches delegations only.
#[test]
fn delegations_are_recalled_whole_and_waited_for() {
    use grant::{Conflict, Level};
    let mut t = Table::default();
    let holder = nfs(7, 100);
    assert!(!t.has_grants_of_others(Protocol::Nfs4, 7));
    let (g, l) = t.request_grant(F, holder, Level::R, 0).unwrap();
    assert_eq!(l, Level::R);
    assert!(!t.has_grants_of_others(Protocol::Nfs4, 7), "its own grant only");
    assert!(t.has_grants_of_others(Protocol::Nfs4, 8));
    // The holder's own write open and another client's read open: nothing.
    let (b, w) = t.break_for(F, &nfs(7, 0), Share::nfs(3, 0), Conflict::Open, 1);
    assert!(b.is_empty() && w.is_none());
    let (b, w) = t.break_for(F, &nfs(8, 0), Share::nfs(1, 0), Conflict::Open, 1);
    assert!(b.is_empty() && w.is_none());
    let (b, w) = t.break_for(F, &smb(1, 1), Share::smb(READ_DATA, 7), Conflict::SmbOpen, 1);
    assert!(b.is_empty() && w.is_none(), "an SMB reader leaves a read delegation");
    // An SMB lease beside it is not a delegation: break_delegations skips it.
    let lease = smb(2, 0x8000_0000_0000_0001);
    t.open(F, smb(2, 1), Share::smb(READ_DATA, 7)).unwrap();
    let (lg, ll, _) = t.request_lease(F, lease, &[smb(2, 1)], Level::RH, 2).unwrap();
    assert_eq!(ll, Level::RH);
    // An SMB open for writing: the delegation breaks to none, and waits.
    let (b, w) = t.break_delegations(F, &smb(1, 2), Share::smb(WRITE_DATA, 7), Conflict::SmbOpen, 3);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!((b[0].grant, b[0].from, b[0].to, b[0].ack_needed), (g, Level::R, Level::NONE, true));
    assert!(w.is_some());
    assert_eq!(t.grant(lg), Some((Level::RH, false)), "the lease was not asked about");
    // The recall lasts as long as the NFS side says; then it is revoked.
    assert!(t.set_break_deadline(g, 1_000));
    assert!(!t.set_break_deadline(lg, 1_000), "not breaking");
    assert!(t.revoke_overdue(999).is_empty());
    assert_eq!(t.revoke_overdue(1_000), vec![(g, holder)]);
    assert_eq!(t.grant(g), None);
    t.release_grant(lg);
    t.release(F, &smb(2, 1));

    // A write delegation: any other open, a reader's too, recalls it.
    let (g, l) = t.request_grant(F, nfs(9, 1), Level::RW, 5_000_000_000).unwrap();
    assert_eq!(l, Level::RW);
    let (b, w) = t.break_for(F, &nfs(10, 0), Share::nfs(1, 0), Conflict::Open, 5_000_000_001);
    assert_eq!((b.len(), b[0].to, w.is_some()), (1, Level::NONE, true));
    // DELEGRETURN: the grant goes, nobody waits any more.
    t.release_grant(g);
    assert_eq!(t.break_deadline(F, &nfs(10, 0)), None);
    assert!(!t.has_grants());
}

/// A kept SMB durable open (MS-SMB2 3.3.7.1) moves to another holder with
/// its share reservation, locks and grants; its old client going away no
/// longer touches it, and the new holder releases it.
#[test]
fn rekey_moves_an_open_with_its_locks_and_grants() {
    let mut t = Table::default();
    let old = smb(1, 7);
    let kept = smb(u64::MAX - 1, 7);
    assert_eq!(t.open(F, old, Share::smb(READ_DATA | WRITE_DATA, 0)), Ok(()));
    t.lock(F, old, r(0, 10), true).unwrap();
    let (g, l) = t.request_open_grant(F, old, Level::RWH, 0).unwrap();
    assert_eq!(l, Level::RWH);
    let lease = smb(1, 1 << 62);
    let (lg, _, _) = t.request_lease(F, lease, &[old], Level::R, 0).unwrap();
    assert!(t.rekey(F, &old, kept));
    // The old connection is gone: nothing of the open goes with it.
    t.release_client(Protocol::Smb, 1);
    assert_eq!(t.open(F, smb(2, 1), Share::smb(READ_DATA, 7)), Err(false), "the reservation stands");
    assert!(t.check_io(F, &smb(2, 1), &Range::io(0, 1), false).is_some(), "the lock stands");
    assert!(t.check_io(F, &kept, &Range::io(0, 1), true).is_none(), "and is the new holder's own");
    assert_eq!(t.grant(g).map(|x| x.0), Some(Level::RWH));
    // A lease whose holder was the old client went with it; its membership
    // moved (the lease grant here belonged to client 1 and was released).
    assert_eq!(t.grant(lg), None);
    // Taken over again, then released by its new holder.
    assert!(t.rekey(F, &kept, smb(3, 7)));
    t.release(F, &smb(3, 7));
    assert_eq!(t.open(F, smb(2, 1), Share::smb(READ_DATA, 7)), Ok(()));
    assert_eq!(t.grant(g), None);
    t.release_client(Protocol::Smb, 2);
    assert_eq!(t.counts().files, 0);
    assert!(t.by_client.is_empty(), "no client index left: {:?}", t.by_client);
}

#[test]
fn a_mutable_use_of_the_table_calls_on_change_once_it_ends_and_a_look_does_not() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let m = LockManager::new(Limits::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    m.on_change(Box::new(move || {
        c.fetch_add(1, Ordering::SeqCst);
    }));
    {
        let t = m.table();
        let _ = t.has_outcomes(Protocol::Smb, 1);
        let _ = t.poll_timeout();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "looking is not a change");
    {
        let mut t = m.table();
        let _ = t.take_outcomes(Protocol::Smb, 1);
        assert_eq!(calls.load(Ordering::SeqCst), 0, "not while the table is held");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // A second hook is ignored.
    m.on_change(Box::new(|| panic!("replaced")));
    let _ = m.table().take_outcomes(Protocol::Smb, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// MS-FSA 2.1.5.4: a delete-pending file goes with its last open, by
/// either protocol; its removal is taken once.
#[test]
fn delete_pending_goes_with_the_last_open_of_any_protocol() {
    let mut t = Table::default();
    let all = 7;
    assert_eq!(t.open(F, smb(1, 1), Share::smb(READ_DATA, all)), Ok(()));
    assert_eq!(t.open(F, nfs(9, 1), Share::nfs(1, 0)), Ok(()));
    assert!(t.opened_by(F, Protocol::Nfs4) && t.opened_by(F, Protocol::Smb));
    assert!(!t.any_delete_pending());
    let d = DeletePending { parent: 1, name: "f".into(), is_dir: false };
    t.mark_delete_pending(F, d.clone());
    assert!(t.any_delete_pending() && t.is_delete_pending(F) && !t.is_delete_pending(F + 1));
    // The NFS open closes, the SMB one is left: nothing is taken.
    t.release(F, &nfs(9, 1));
    assert!(!t.opened_by(F, Protocol::Nfs4));
    assert_eq!(t.take_delete_pending_if_unopened(F), None);
    assert!(t.is_delete_pending(F));
    // The last one goes: the removal is handed out once.
    t.release(F, &smb(1, 1));
    assert_eq!(t.take_delete_pending_if_unopened(F), Some(d));
    assert_eq!(t.take_delete_pending_if_unopened(F), None);
    assert!(!t.is_delete_pending(F));
    assert_eq!(t.take_delete_pending(F), None);
    assert!(!t.any_delete_pending());
}
