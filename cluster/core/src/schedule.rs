//! Snapshot schedules with retention (issue 15): the sans-I/O planner.
//!
//! A share's schedule (`records::ScheduleRecord`, stored under `S` by
//! `Command::SnapshotSchedule`) asks for a snapshot every `every_s`
//! seconds, keeping the newest `keep` scheduled ones. Time is cut into
//! slots of `every_s` seconds from the epoch (UTC); the snapshot of a slot
//! is named after the slot's start, `auto-YYYYMMDDTHHMMSSZ`, so every
//! leader, before or after a restart or a failover, plans the same name
//! (a second proposal of it is refused as existing and changes nothing).
//!
//! [`plan`] is given the wall-clock time and the share's snapshots (in the
//! order they were taken: layer ids only grow, whatever the clocks did)
//! and says which snapshot to take and which scheduled ones to delete:
//!
//! - one snapshot for the current slot when none of the scheduled ones
//!   has its stamp in it: ticks missed while no leader ran are not made
//!   up (one snapshot, not one per missed slot), and a clock stepped back
//!   plans the slots it now lies in (a stamp in the future, left by a
//!   clock that was ahead, does not stop it);
//! - the scheduled snapshots past the newest `keep` (counting the one to
//!   take), by order of taking, not by stamp, so a clock step never makes
//!   it delete the snapshot it just took; never a manual snapshot (any
//!   name that is not exactly a stamp), never one a clone stands on.
//!
//! The appliance runs it on the raft leader only, once a second, and
//! proposes the existing `Command::Snapshot` / `Command::DropSnapshot`.

use duet_fs::TimeNs;

/// The names scheduled snapshots have, and that manual ones may not take.
pub const PREFIX: &str = "auto-";
/// The longest interval: a year.
pub const EVERY_MAX_S: u64 = 366 * 86_400;
/// The shortest interval the admin API takes unless the daemon is
/// configured for tests (`[testing] snapshot_schedule_min_s`).
pub const EVERY_MIN_S: u64 = 60;

/// Checks a schedule's values (what the state machine refuses): an
/// interval of 1 s to a year (the admin API applies its own minimum on
/// top), 1 to [`crate::machine::SNAPSHOT_MAX`] kept.
pub fn check(every_s: u64, keep: u32) -> Result<(), String> {
    if every_s == 0 || every_s > EVERY_MAX_S {
        return Err(format!("bad snapshot interval {every_s} s: 1 s to {EVERY_MAX_S} s (a year)"));
    }
    if keep == 0 || keep as usize > crate::machine::SNAPSHOT_MAX {
        return Err(format!(
            "bad snapshot retention {keep}: keep 1 to {} snapshots",
            crate::machine::SNAPSHOT_MAX
        ));
    }
    Ok(())
}

/// `auto-YYYYMMDDTHHMMSSZ` of a time (UTC, seconds).
pub fn name(secs: i64) -> String {
    let (y, m, d, hh, mm, ss) = duet_fs::view::civil_utc(secs.saturating_mul(1_000_000_000));
    format!("{PREFIX}{y:04}{m:02}{d:02}T{hh:02}{mm:02}{ss:02}Z")
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The stamp (seconds since the epoch) of a scheduled snapshot's name;
/// `None` for any other name (a manual snapshot).
pub fn parse(name: &str) -> Option<i64> {
    let s = name.strip_prefix(PREFIX)?.as_bytes();
    if s.len() != 16 || s[8] != b'T' || s[15] != b'Z' {
        return None;
    }
    let num = |a: usize, b: usize| -> Option<i64> {
        let part = &s[a..b];
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let (y, m, d) = (num(0, 4)?, num(4, 6)?, num(6, 8)?);
    let (hh, mm, ss) = (num(9, 11)?, num(11, 13)?, num(13, 15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    let secs = days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss;
    // 2026-02-31 and the like: not a stamp this module writes.
    (self::name(secs) == name).then_some(secs)
}

/// One snapshot of the share, as the planner sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Existing {
    pub name: String,
    /// Its layer id: the order snapshots were taken in.
    pub layer: u64,
    /// A clone stands on it (it cannot be deleted).
    pub pinned: bool,
}

/// What to do now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The snapshot to take.
    pub create: Option<String>,
    /// Scheduled snapshots to delete, oldest first.
    pub delete: Vec<String>,
}

/// Plans share snapshots for schedule (`every_s`, `keep`) at wall-clock
/// time `now_ns`, given its snapshots (any order).
pub fn plan(every_s: u64, keep: u32, now_ns: TimeNs, snaps: &[Existing]) -> Plan {
    let every = every_s.clamp(1, EVERY_MAX_S) as i64;
    let now = now_ns.div_euclid(1_000_000_000);
    let slot = now - now.rem_euclid(every);
    let mut scheduled: Vec<(&Existing, i64)> = snaps.iter().filter_map(|e| Some((e, parse(&e.name)?))).collect();
    scheduled.sort_by_key(|(e, _)| e.layer);
    let in_slot = scheduled.iter().any(|(_, t)| (slot..slot.saturating_add(every)).contains(t));
    let want = name(slot);
    let create = (!in_slot && !snaps.iter().any(|e| e.name == want)).then_some(want);
    let mut kept = usize::from(create.is_some());
    let mut delete = Vec::new();
    for (e, _) in scheduled.iter().rev() {
        if kept < keep as usize {
            kept += 1;
        } else if !e.pinned {
            delete.push(e.name.clone());
        }
    }
    delete.reverse();
    Plan { create, delete }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;
    /// 2026-12-03T20:00:00Z.
    const T0: i64 = 1_796_328_000;

    fn snaps(names: &[&str]) -> Vec<Existing> {
        names.iter().enumerate().map(|(i, n)| Existing { name: n.to_string(), layer: i as u64 + 1, pinned: false }).collect()
    }

    /// Runs the planner as the leader's timer does (take, then delete, then
    /// plan again) and returns the snapshots after.
    fn tick(every: u64, keep: u32, now_s: i64, have: &mut Vec<Existing>) -> Plan {
        let p = plan(every, keep, now_s * S, have);
        if let Some(n) = &p.create {
            let layer = have.iter().map(|e| e.layer).max().unwrap_or(0) + 1;
            have.push(Existing { name: n.clone(), layer, pinned: false });
        }
        have.retain(|e| !p.delete.contains(&e.name));
        p
    }

    #[test]
    fn names_round_trip_and_others_are_manual() {
        assert_eq!(name(T0), "auto-20261203T200000Z");
        assert_eq!(parse("auto-20261203T200000Z"), Some(T0));
        assert_eq!(parse(&name(0)), Some(0));
        assert_eq!(parse(&name(951_782_400)), Some(951_782_400)); // 2000-02-29
        for bad in [
            "GMT-2026.12.03-20.00.00",
            "auto-20261203T200000",
            "auto-20261203T200000z",
            "auto-20260231T000000Z",
            "auto-20261203T246000Z",
            "auto-2026120XT200000Z",
            "xauto-20261203T200000Z",
            "auto-+0261203T200000Z",
            "auto-20261203T200000Z ",
            "clone.b",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn checks_bounds() {
        assert!(check(1, 1).is_ok());
        assert!(check(EVERY_MAX_S, 256).is_ok());
        assert!(check(0, 1).is_err());
        assert!(check(EVERY_MAX_S + 1, 1).is_err());
        assert!(check(60, 0).is_err());
        assert!(check(60, 257).is_err());
    }

    #[test]
    fn one_per_slot_then_retention() {
        let mut have = snaps(&["manual", "clone.x"]);
        // First tick in the slot takes one, named after the slot's start.
        let p = tick(3600, 3, T0 + 125, &mut have);
        assert_eq!(p, Plan { create: Some(name(T0)), delete: vec![] });
        // Again in the same slot: nothing.
        assert_eq!(tick(3600, 3, T0 + 3599, &mut have), Plan::default());
        for h in 1..=5 {
            tick(3600, 3, T0 + h * 3600 + 1, &mut have);
        }
        let names: Vec<&str> = have.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, vec!["manual", "clone.x", &name(T0 + 3 * 3600), &name(T0 + 4 * 3600), &name(T0 + 5 * 3600)]);
    }

    #[test]
    fn missed_ticks_are_not_made_up() {
        let mut have = snaps(&[&name(T0)]);
        // The daemon was down for ten slots: one snapshot now, not ten.
        let p = tick(60, 5, T0 + 60 * 10 + 7, &mut have);
        assert_eq!(p.create, Some(name(T0 + 600)));
        assert!(p.delete.is_empty());
        assert_eq!(have.len(), 2);
    }

    #[test]
    fn a_restart_plans_the_same() {
        // Stateless: the same snapshots and time give the same plan, and a
        // plan already carried out (its name exists) is not repeated.
        let have = snaps(&[&name(T0), &name(T0 + 60)]);
        let a = plan(60, 2, (T0 + 125) * S, &have);
        assert_eq!(a, plan(60, 2, (T0 + 125) * S, &have));
        assert_eq!(a.create, Some(name(T0 + 120)));
        assert_eq!(a.delete, vec![name(T0)]);
        let mut after = have.clone();
        after.push(Existing { name: name(T0 + 120), layer: 3, pinned: false });
        assert_eq!(plan(60, 2, (T0 + 125) * S, &after), Plan { create: None, delete: vec![name(T0)] });
    }

    #[test]
    fn retention_spares_manual_and_pinned() {
        let mut have = snaps(&[&name(T0), "before-upgrade", &name(T0 + 60), &name(T0 + 120)]);
        have[0].pinned = true;
        let p = plan(60, 1, (T0 + 180) * S, &have);
        assert_eq!(p.create, Some(name(T0 + 180)));
        // The pinned oldest stays, the manual one is never touched.
        assert_eq!(p.delete, vec![name(T0 + 60), name(T0 + 120)]);
    }

    #[test]
    fn clock_steps() {
        // Back by a day: the current slot has none, so one is taken, and
        // retention goes by order of taking, so it is kept over the stamps
        // "from the future" that a clock ahead left.
        let mut have = snaps(&[&name(T0), &name(T0 + 60), &name(T0 + 120)]);
        let p = tick(60, 2, T0 - 86_400 + 5, &mut have);
        assert_eq!(p.create, Some(name(T0 - 86_400)));
        assert_eq!(p.delete, vec![name(T0), name(T0 + 60)]);
        // Back by a few seconds across a slot boundary, into a slot that
        // has its snapshot: nothing.
        let mut have = snaps(&[&name(T0), &name(T0 + 60)]);
        assert_eq!(tick(60, 5, T0 + 58, &mut have), Plan::default());
        // Forward by a year: one snapshot, not one per slot skipped.
        let p = tick(60, 5, T0 + 366 * 86_400, &mut have);
        assert_eq!(p.create, Some(name(T0 + 366 * 86_400)));
        assert_eq!(have.len(), 3);
        // A time before the epoch still plans (no panic, a stamp it parses).
        let p = plan(3600, 2, -5 * S, &[]);
        assert_eq!(p.create.as_deref().and_then(parse), Some(-3600));
    }

    #[test]
    fn an_interval_change_keeps_one_per_new_slot() {
        // From hourly to daily: the hourly one of today's slot counts.
        let have = snaps(&[&name(T0 - 3600), &name(T0)]);
        let day = T0 - T0.rem_euclid(86_400);
        let p = plan(86_400, 5, (T0 + 10) * S, &have);
        assert_eq!(p.create, None, "{} lies in the day from {}", name(T0), name(day));
    }
}
