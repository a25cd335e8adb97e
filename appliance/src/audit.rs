//! The audit log: every admin change (who, from where, what, when, and
//! whether it worked) and every refused logon (admin API credentials, SMB
//! STATUS_LOGON_FAILURE), as JSON lines appended to `<data-dir>/audit.log`
//! (mode 0600) and sent to the journal (tracing target `audit`).
//! `duetctl audit` reads it back through `GET /v1/audit`. Passwords never
//! appear: requests are logged by their redacting Debug form.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use duet_admin_api::AuditEntry;

/// The file in the data directory.
pub const AUDIT_FILE: &str = "audit.log";
/// The most entries `GET /v1/audit` returns (the newest).
pub const AUDIT_TAIL: usize = 1000;
/// How much of the file's end is read for them.
const TAIL_BYTES: u64 = 1 << 20;

pub struct AuditLog {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

impl AuditLog {
    /// Opens (creating) `<data_dir>/audit.log` for appending.
    pub fn open(data_dir: &Path) -> AuditLog {
        use std::os::unix::fs::OpenOptionsExt;
        let path = data_dir.join(AUDIT_FILE);
        let file = std::fs::OpenOptions::new().append(true).create(true).mode(0o600).open(&path);
        if let Err(e) = &file {
            tracing::error!("cannot open the audit log {}: {e}; admin changes are logged to the journal only", path.display());
        }
        AuditLog { path, file: Mutex::new(file.ok()) }
    }

    /// Appends one entry (and logs it).
    pub fn record(&self, who: &str, from: &str, action: &str, outcome: &str) {
        let e = AuditEntry {
            time_ns: crate::admin::now_ns(),
            who: who.to_string(),
            from: from.to_string(),
            action: action.to_string(),
            outcome: outcome.to_string(),
        };
        tracing::info!(target: "audit", who, from, action, outcome, "audit");
        let mut line = serde_json::to_string(&e).unwrap_or_default();
        line.push('\n');
        let mut g = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = g.as_mut() {
            if let Err(err) = f.write_all(line.as_bytes()) {
                tracing::error!("cannot append to the audit log {}: {err}", self.path.display());
            }
        }
    }

    /// The newest entries (at most [`AUDIT_TAIL`]), oldest first; lines
    /// that do not decode (a torn last line) are skipped.
    pub fn tail(&self) -> std::io::Result<Vec<AuditEntry>> {
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        let start = len.saturating_sub(TAIL_BYTES);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        f.take(TAIL_BYTES).read_to_end(&mut buf)?;
        let text = String::from_utf8_lossy(&buf);
        let mut lines: Vec<&str> = text.lines().collect();
        if start > 0 && !lines.is_empty() {
            lines.remove(0); // cut in the middle
        }
        let entries: Vec<AuditEntry> = lines.iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let skip = entries.len().saturating_sub(AUDIT_TAIL);
        Ok(entries.into_iter().skip(skip).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_and_reads_back() {
        let d = tempfile::tempdir().unwrap();
        let log = AuditLog::open(d.path());
        log.record("token", "127.0.0.1:5", "ShareRemove(\"x\")", "ok");
        log.record("alice", "127.0.0.1:6", "logon", "refused");
        std::fs::OpenOptions::new().append(true).open(d.path().join(AUDIT_FILE)).unwrap().write_all(b"{torn").unwrap();
        let t = log.tail().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].who.as_str(), t[1].outcome.as_str()), ("token", "refused"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join(AUDIT_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
