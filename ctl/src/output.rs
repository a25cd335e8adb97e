//! Human-readable output: aligned tables and `key: value` blocks.

use duet_admin_api::{AuditEntry, ClusterStatus, FsckReport, Share, Stats, StatusInfo, UserInfo};

/// Column alignment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// An aligned table: header row then rows, columns separated by two spaces,
/// no trailing spaces.
pub fn table(headers: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|(h, _)| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (i, ((_, align), width)) in headers.iter().zip(&widths).enumerate() {
            let cell = row.get(i).map(String::as_str).unwrap_or("");
            if i > 0 {
                line.push_str("  ");
            }
            let pad = width.saturating_sub(cell.chars().count());
            match align {
                Align::Left => {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
                Align::Right => {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `key: value` lines with the values aligned; continuation lines of a
/// multi-line value are indented to the value column.
pub fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0)
        + 1;
    let mut out = String::new();
    for (k, v) in pairs {
        let label = format!("{k}:");
        let mut lines = v.lines();
        let first = lines.next().unwrap_or("");
        out.push_str(format!("{label:<width$} {first}").trim_end());
        out.push('\n');
        for more in lines {
            out.push_str(&" ".repeat(width + 1));
            out.push_str(more);
            out.push('\n');
        }
    }
    out
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// "2d 3h 4m 5s".
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h}h {m}m {s}s")
    } else if h > 0 {
        format!("{h}h {m}m {s}s")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

fn protocols(share: &Share) -> String {
    share
        .protocols
        .iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

pub fn status(s: &StatusInfo) -> String {
    let listeners = if s.listeners.is_empty() {
        "none".to_string()
    } else {
        s.listeners
            .iter()
            .map(|l| format!("{} {}", l.protocol, l.addr))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let voters = s
        .raft
        .voters
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut pairs = vec![
        ("version", s.version.clone()),
        ("node id", s.node_id.to_string()),
        ("uptime", duration(s.uptime_s)),
        ("executors", s.executors.to_string()),
        ("data dir", s.data_dir.clone()),
        ("listeners", listeners),
        (
            "raft",
            format!(
                "term {}, commit {}, applied {}, voters [{}]",
                s.raft.term, s.raft.commit_index, s.raft.applied_index, voters
            ),
        ),
        ("shares", s.shares.to_string()),
        ("users", s.users.to_string()),
        ("files", s.files.to_string()),
        (
            "metadata",
            if s.metadata_failed {
                "FAILED: a metadata write failed; changes are refused until duetd restarts (see its log)".to_string()
            } else {
                "ok".to_string()
            },
        ),
    ];
    if let Some(c) = &s.capacity {
        pairs.push((
            "capacity",
            format!(
                "{} total, {} free, {} available{} (reserve {})",
                bytes(c.total_bytes),
                bytes(c.free_bytes),
                bytes(c.avail_bytes),
                if c.avail_bytes == 0 { " FULL" } else { "" },
                bytes(c.reserve_bytes)
            ),
        ));
    }
    key_values(&pairs)
}

/// `cluster status`: leader, term and voters, then a row per node.
pub fn cluster(c: &ClusterStatus) -> String {
    let voters = c.voters.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let leader = match c.leader {
        Some(id) => id.to_string(),
        None => "none (no leader: an election is on)".to_string(),
    };
    let mut out = key_values(&[("leader", leader), ("term", c.term.to_string()), ("voters", format!("[{voters}]"))]);
    out.push('\n');
    let rows: Vec<Vec<String>> = c
        .nodes
        .iter()
        .map(|n| {
            let role = if c.leader == Some(n.id) { "leader" } else if c.voters.contains(&n.id) { "voter" } else { "-" };
            // Unknown ("-") for a node on an older version or not heard yet.
            let queue = n.destage_queue.map(|q| q.to_string()).unwrap_or_else(|| "-".into());
            vec![n.id.to_string(), n.addr.clone(), role.to_string(), n.applied.to_string(), queue, yes_no(n.healthy)]
        })
        .collect();
    out.push_str(&table(
        &[
            ("ID", Align::Right),
            ("ADDRESS", Align::Left),
            ("ROLE", Align::Left),
            ("APPLIED", Align::Right),
            ("TO DESTAGE", Align::Right),
            ("HEALTHY", Align::Left),
        ],
        &rows,
    ));
    if !c.public_addresses.is_empty() {
        let rows: Vec<Vec<String>> = c
            .public_addresses
            .iter()
            .map(|a| vec![a.address.clone(), a.node.map(|n| n.to_string()).unwrap_or_else(|| "none".into())])
            .collect();
        out.push('\n');
        out.push_str(&table(&[("PUBLIC ADDRESS", Align::Left), ("NODE", Align::Right)], &rows));
    }
    if let Some(p) = &c.receiving_snapshot {
        out.push_str(&format!(
            "\nthis node is being rebuilt: {} of a snapshot image received from node {} in {} s \
             (it restarts in place to install it once the image is whole and checked)\n",
            bytes(p.bytes),
            p.from,
            p.seconds
        ));
    }
    out
}

/// "1.5 GiB", "512 MiB", "17 B": binary units, one decimal from KiB up.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

pub fn share_list(shares: &[Share]) -> String {
    if shares.is_empty() {
        return "no shares\n".to_string();
    }
    let rows: Vec<Vec<String>> = shares
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.path.clone(),
                protocols(s),
                if s.read_only { "ro" } else { "rw" }.to_string(),
                yes_no(s.guest_ok),
                durability(s),
                s.nfs.clients.join(","),
                s.exclusive.as_ref().map_or_else(|| "-".into(), space),
                s.origin.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let mut cols = vec![
        ("NAME", Align::Left),
        ("PATH", Align::Left),
        ("PROTOCOLS", Align::Left),
        ("ACCESS", Align::Left),
        ("GUEST", Align::Left),
        ("DURABILITY", Align::Left),
        ("NFS CLIENTS", Align::Left),
        // Clones' origins and the space only each clone holds (what
        // removing it would free), when there are clones.
        ("EXCLUSIVE", Align::Right),
        ("ORIGIN", Align::Left),
    ];
    let mut rows = rows;
    if shares.iter().all(|s| s.origin.is_none()) {
        cols.truncate(cols.len() - 2);
        for r in &mut rows {
            r.truncate(r.len() - 2);
        }
    }
    table(&cols, &rows)
}

pub fn share_show(s: &Share) -> String {
    let mut kv = vec![
        ("name", s.name.clone()),
        ("path", s.path.clone()),
        ("protocols", protocols(s)),
        ("read only", yes_no(s.read_only)),
        ("guest ok", yes_no(s.guest_ok)),
        ("nfs clients", s.nfs.clients.join(",")),
        ("nfs root squash", yes_no(s.nfs.root_squash)),
        ("nfs append extension", yes_no(s.nfs.append_extension)),
        ("users", if s.users.is_empty() { "everyone".to_string() } else { s.users.join(",") }),
        ("durability", durability(s)),
    ];
    if let Some(o) = &s.origin {
        kv.push(("clone of", o.clone()));
    }
    if let Some(x) = &s.exclusive {
        kv.push(("exclusive space", exclusive(x)));
    }
    kv.push(("snapshot schedule", schedule(s.snapshot_schedule.as_ref())));
    key_values(&kv)
}

/// "always", "protocol", or "protocol (applied: always)" where the node
/// serves it otherwise (a multi-voter cluster serves `protocol` as
/// `always`: docs/durability.md).
fn durability(s: &Share) -> String {
    match s.durability_applied {
        Some(a) if a != s.durability => format!("{} (applied: {}, multi-voter cluster)", s.durability.as_str(), a.as_str()),
        _ => s.durability.as_str().to_string(),
    }
}

pub fn user_list(users: &[UserInfo]) -> String {
    if users.is_empty() {
        return "no users\n".to_string();
    }
    let rows: Vec<Vec<String>> = users
        .iter()
        .map(|u| {
            vec![
                u.name.clone(),
                u.uid.to_string(),
                u.gid.to_string(),
                yes_no(u.enabled),
            ]
        })
        .collect();
    table(
        &[
            ("NAME", Align::Left),
            ("UID", Align::Right),
            ("GID", Align::Right),
            ("ENABLED", Align::Left),
        ],
        &rows,
    )
}

/// `n / batches` with two decimals, "-" when there were no batches.
pub fn per_batch(n: u64, batches: u64) -> String {
    if batches == 0 {
        "-".to_string()
    } else {
        format!("{:.2}", n as f64 / batches as f64)
    }
}

pub fn stats(s: &Stats) -> String {
    let total = |name: &str, n: u64, avg: bool| {
        vec![
            name.to_string(),
            n.to_string(),
            if avg {
                per_batch(n, s.batches)
            } else {
                String::new()
            },
        ]
    };
    let totals = vec![
        total("batches", s.batches, false),
        total("proposals", s.proposals, true),
        total("fsyncs", s.fsyncs, true),
        total("rocksdb reads", s.rocksdb_reads, true),
        total("rocksdb writes", s.rocksdb_writes, true),
        total("chunk reads", s.chunk_reads, true),
        total("chunk writes", s.chunk_writes, true),
        total("log writes", s.log_writes, true),
        total("lazy groups", s.lazy_groups, false),
        total("wal syncs", s.wal_syncs, false),
    ];
    let mut out = table(
        &[
            ("COUNTER", Align::Left),
            ("TOTAL", Align::Right),
            ("PER BATCH", Align::Right),
        ],
        &totals,
    );
    out.push_str(&format!(
        "destager: {} records destaged, {} queued, {} write-log records not yet destaged\n",
        s.destaged_records, s.destage_queue, s.destage_backlog
    ));
    out.push('\n');
    out.push_str(&connections(&s.connections));
    if s.by_request.is_empty() {
        out.push_str("no requests recorded\n");
        return out;
    }
    out.push_str("per request (averages per batch):\n");
    let rows: Vec<Vec<String>> = s
        .by_request
        .iter()
        .map(|r| {
            vec![
                r.protocol.clone(),
                r.request.clone(),
                r.count.to_string(),
                r.batches.to_string(),
                per_batch(r.proposals, r.batches),
                per_batch(r.fsyncs, r.batches),
                per_batch(r.rocksdb_reads, r.batches),
                per_batch(r.rocksdb_writes, r.batches),
                per_batch(r.chunk_reads, r.batches),
                per_batch(r.chunk_writes, r.batches),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            ("PROTOCOL", Align::Left),
            ("REQUEST", Align::Left),
            ("COUNT", Align::Right),
            ("BATCHES", Align::Right),
            ("PROPOSALS", Align::Right),
            ("FSYNCS", Align::Right),
            ("DB READS", Align::Right),
            ("DB WRITES", Align::Right),
            ("CHUNK READS", Align::Right),
            ("CHUNK WRITES", Align::Right),
        ],
        &rows,
    ));
    out
}

/// Client connections: open now and accepted since start, and with
/// several protocol executors how the kernel spread them.
fn connections(c: &duet_admin_api::ConnectionStats) -> String {
    let mut out = format!(
        "connections: {} open; accepted: SMB {}, NFS {}\n",
        c.open, c.accepted_smb, c.accepted_nfs
    );
    if c.by_executor.len() > 1 {
        for e in &c.by_executor {
            out.push_str(&format!("  executor {}: SMB {}, NFS {}\n", e.executor, e.accepted_smb, e.accepted_nfs));
        }
    }
    out.push('\n');
    out
}

/// The snapshots of a share: name, time, SMB token, the space only it
/// holds, who took it, the clone standing on it.
pub fn snapshot_list(snaps: &[duet_admin_api::Snapshot]) -> String {
    if snaps.is_empty() {
        return "no snapshots\n".to_string();
    }
    let rows: Vec<Vec<String>> = snaps
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                utc(s.created_ns),
                s.gmt.clone(),
                space(&s.exclusive),
                format!("{}{}", if s.exclusive.partial { ">=" } else { "" }, s.exclusive.records),
                if s.scheduled { "schedule" } else { "manual" }.to_string(),
                s.clone.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(
        &[
            ("NAME", Align::Left),
            ("TAKEN", Align::Left),
            ("SMB", Align::Left),
            ("EXCLUSIVE", Align::Right),
            ("RECORDS", Align::Right),
            ("BY", Align::Left),
            ("CLONE", Align::Left),
        ],
        &rows,
    )
}

/// "12.0 MiB in 3 chunks, 41 records" (">= ..." when the daemon stopped
/// at its bound).
pub fn exclusive(x: &duet_admin_api::Exclusive) -> String {
    let at_least = if x.partial { "at least " } else { "" };
    format!("{at_least}{} in {} chunks, {} records", bytes(x.bytes), x.chunks, x.records)
}

/// "8.0 MiB", or ">=8.0 MiB" for a lower bound.
fn space(x: &duet_admin_api::Exclusive) -> String {
    format!("{}{}", if x.partial { ">=" } else { "" }, bytes(x.bytes))
}

/// "every 1h, keep 24" or "none".
pub fn schedule(s: Option<&duet_admin_api::SnapshotSchedule>) -> String {
    match s {
        Some(s) => format!("every {}, keep {}", duet_admin_api::format_interval(s.every_s), s.keep),
        None => "none".into(),
    }
}

/// "2026-12-01T22:45:39Z" for nanoseconds since the epoch (UTC).
pub fn utc(ns: i64) -> String {
    let (y, m, d, hh, mm, ss) = duet_admin_api::civil_utc(ns);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

/// The newest `last` audit entries, oldest first.
pub fn audit(entries: &[AuditEntry], last: usize) -> String {
    if entries.is_empty() {
        return "no audit entries\n".to_string();
    }
    let skip = entries.len().saturating_sub(last);
    let rows: Vec<Vec<String>> = entries[skip..]
        .iter()
        .map(|e| vec![utc(e.time_ns), e.who.clone(), e.from.clone(), e.action.clone(), e.outcome.clone()])
        .collect();
    table(
        &[
            ("TIME", Align::Left),
            ("WHO", Align::Left),
            ("FROM", Align::Left),
            ("ACTION", Align::Left),
            ("OUTCOME", Align::Left),
        ],
        &rows,
    )
}

pub fn fsck(r: &FsckReport) -> String {
    let mut out = key_values(&[
        ("nodes", r.nodes.to_string()),
        ("edges", r.edges.to_string()),
        ("chunks", r.chunks.to_string()),
        ("problems", r.problems.len().to_string()),
    ]);
    if r.problems.is_empty() {
        out.push_str("file system is consistent\n");
    } else {
        for p in &r.problems {
            out.push_str("  - ");
            out.push_str(p);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_alignment() {
        let t = table(
            &[
                ("NAME", Align::Left),
                ("N", Align::Right),
                ("NOTE", Align::Left),
            ],
            &[
                vec!["a".into(), "100".into(), "".into()],
                vec!["longer".into(), "2".into(), "x".into()],
            ],
        );
        assert_eq!(t, "NAME      N  NOTE\na       100\nlonger    2  x\n");
    }

    #[test]
    fn kv_alignment() {
        let s = key_values(&[
            ("a", "1".into()),
            ("long key", "x\ny".into()),
            ("e", String::new()),
        ]);
        assert_eq!(s, "a:        1\nlong key: x\n          y\ne:\n");
    }

    #[test]
    fn connections_show_the_spread_over_executors_only_when_there_are_several() {
        use duet_admin_api::{ConnectionStats, ExecutorConnections};
        let mut c = ConnectionStats { open: 3, accepted_smb: 11, accepted_nfs: 17, ..Default::default() };
        c.by_executor = vec![ExecutorConnections { executor: 0, accepted_smb: 11, accepted_nfs: 17 }];
        assert_eq!(connections(&c), "connections: 3 open; accepted: SMB 11, NFS 17\n\n");
        c.by_executor = vec![
            ExecutorConnections { executor: 0, accepted_smb: 6, accepted_nfs: 10 },
            ExecutorConnections { executor: 1, accepted_smb: 5, accepted_nfs: 7 },
        ];
        assert_eq!(
            connections(&c),
            "connections: 3 open; accepted: SMB 11, NFS 17\n  executor 0: SMB 6, NFS 10\n  executor 1: SMB 5, NFS 7\n\n"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(61), "1m 1s");
        assert_eq!(duration(3600), "1h 0m 0s");
        assert_eq!(duration(93_784), "1d 2h 3m 4s");
    }

    #[test]
    fn byte_units() {
        assert_eq!(bytes(17), "17 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(256 << 20), "256.0 MiB");
        assert_eq!(bytes(252 << 30), "252.0 GiB");
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400 * 1_000_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_165_139 * 1_000_000_000 + 5), "2026-12-01T22:45:39Z");
    }

    #[test]
    fn averages() {
        assert_eq!(per_batch(3, 2), "1.50");
        assert_eq!(per_batch(3, 0), "-");
    }
}
