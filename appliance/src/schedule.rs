//! Snapshot schedules (issue 15): the leader's timer. Once a second, on
//! the raft leader only, every share with a schedule (`Command::
//! SnapshotSchedule`, replicated, so whichever node leads uses the same
//! one) is planned by the sans-I/O `duet_cluster::schedule::plan` against
//! the wall clock, and the plan is carried out with the ordinary
//! `Command::Snapshot` and `Command::DropSnapshot` (one raft command each).
//! A snapshot is taken first; the deletions are planned again from the
//! share's snapshots after it, so retention counts what exists. Each
//! action goes to the audit log as `schedule`.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use duet_cluster::records::Command;
use duet_cluster::schedule::{self, Existing};
use duet_cluster_store::{Query, QueryAnswer};

use crate::admin::{now_ns, Admin};

/// How often the schedules are looked at.
pub const TICK: Duration = Duration::from_secs(1);

/// Runs for the life of the data executor.
pub async fn run(admin: Rc<Admin>) {
    // The last error per share, logged once until it changes.
    let mut failing: BTreeMap<String, String> = BTreeMap::new();
    loop {
        glommio::timer::sleep(TICK).await;
        tick(&admin, &mut failing).await;
    }
}

async fn query(admin: &Admin, q: Query) -> Option<QueryAnswer> {
    admin.engine.store.query(q).await.ok()
}

async fn existing(admin: &Admin, share: &str) -> Option<Vec<Existing>> {
    let Some(QueryAnswer::Clones(clones)) = query(admin, Query::Clones).await else { return None };
    let Some(QueryAnswer::Snapshots(Some(snaps))) = query(admin, Query::Snapshots(share.to_string())).await else {
        return None;
    };
    Some(
        snaps
            .into_iter()
            .map(|s| Existing { pinned: clones.iter().any(|c| c.layer == s.layer), name: s.name, layer: s.layer })
            .collect(),
    )
}

async fn tick(admin: &Admin, failing: &mut BTreeMap<String, String>) {
    if admin.engine.store.failed() {
        return;
    }
    match query(admin, Query::RaftStatus).await {
        Some(QueryAnswer::Raft(r)) if r.leader => {}
        _ => return,
    }
    let Some(QueryAnswer::Schedules(list)) = query(admin, Query::Schedules).await else { return };
    failing.retain(|share, _| list.iter().any(|(s, _)| s == share));
    for (share, sched) in list {
        let mut outcome = Ok(());
        let Some(have) = existing(admin, &share).await else { continue };
        let plan = schedule::plan(sched.every_s, sched.keep, now_ns(), &have);
        if let Some(name) = plan.create {
            let r = admin.command(Command::Snapshot { share: share.clone(), name: name.clone(), now_ns: now_ns() }).await;
            audit(admin, &format!("scheduled snapshot create {share} {name}"), &r);
            match r {
                Ok(()) => tracing::info!(%share, snapshot = %name, "scheduled snapshot taken"),
                Err(e) => outcome = Err(format!("cannot take scheduled snapshot {name}: {}", e.message)),
            }
        }
        let Some(have) = existing(admin, &share).await else { continue };
        for name in schedule::plan(sched.every_s, sched.keep, now_ns(), &have).delete {
            let r = admin.command(Command::DropSnapshot { share: share.clone(), name: name.clone(), now_ns: now_ns() }).await;
            audit(admin, &format!("scheduled snapshot delete {share} {name}"), &r);
            match r {
                Ok(()) => tracing::info!(%share, snapshot = %name, "scheduled snapshot deleted (retention)"),
                Err(e) => outcome = Err(format!("cannot delete scheduled snapshot {name}: {}", e.message)),
            }
        }
        match outcome {
            Ok(()) => {
                failing.remove(&share);
            }
            Err(e) => {
                if failing.get(&share) != Some(&e) {
                    tracing::warn!(%share, "snapshot schedule: {e}");
                    failing.insert(share, e);
                }
            }
        }
    }
}

fn audit(admin: &Admin, action: &str, r: &Result<(), duet_admin_api::ApiError>) {
    let outcome = match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("refused: {}", e.message),
    };
    admin.audit.record("schedule", "duetd", action, &outcome);
}
