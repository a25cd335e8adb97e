//! The data volume's capacity, as clients and admins see it: statvfs of
//! the data directory, less `[limits] disk_reserve_mib` (the space the
//! engine keeps free so that RocksDB and the write log never meet ENOSPC,
//! see `datapath::growth`). Measured about once a second into the shared
//! [`Space`] the SMB and NFS state machines read (FS_SIZE / FS_FULL_SIZE
//! information, FSSTAT, space_* attributes), and by `duetctl status`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use duet_protocols::space::{Space, SpaceFigures};

/// How often [`refresh`] measures.
pub const REFRESH: Duration = Duration::from_secs(1);

/// One statvfs of the volume holding `path`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statvfs {
    pub total: u64,
    /// Free blocks (f_bfree).
    pub free: u64,
    /// Free blocks for unprivileged users (f_bavail).
    pub avail: u64,
}

pub fn statvfs(path: &Path) -> Option<Statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs with a NUL-terminated path and a local out struct.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return None;
        }
        let unit = st.f_frsize as u64;
        Some(Statvfs {
            total: (st.f_blocks as u64).saturating_mul(unit),
            free: (st.f_bfree as u64).saturating_mul(unit),
            avail: (st.f_bavail as u64).saturating_mul(unit),
        })
    }
}

/// What duet reports for a volume reading: the real size, and free and
/// available space less the reserve (never below zero).
pub fn figures(v: Statvfs, reserve: u64) -> SpaceFigures {
    SpaceFigures { total: v.total, free: v.free.saturating_sub(reserve), avail: v.avail.saturating_sub(reserve) }
}

/// Measures the data directory's volume now.
pub fn measure(data_dir: &Path, reserve: u64) -> Option<SpaceFigures> {
    statvfs(data_dir).map(|v| figures(v, reserve))
}

/// The shared capacity, measured once now (so that the first client sees
/// real figures).
pub fn initial(data_dir: &Path, reserve: u64) -> Arc<Space> {
    let space = Arc::new(Space::default());
    if let Some(f) = measure(data_dir, reserve) {
        space.set(f);
    }
    space
}

/// Keeps `space` current; runs on a glommio executor until it stops.
pub async fn refresh(space: Arc<Space>, data_dir: PathBuf, reserve: u64) {
    loop {
        glommio::timer::sleep(REFRESH).await;
        match measure(&data_dir, reserve) {
            Some(f) => space.set(f),
            None => tracing::debug!("statvfs {} failed", data_dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_is_taken_off_free_and_avail() {
        let v = Statvfs { total: 1000, free: 600, avail: 500 };
        assert_eq!(figures(v, 100), SpaceFigures { total: 1000, free: 500, avail: 400 });
        assert_eq!(figures(v, 700), SpaceFigures { total: 1000, free: 0, avail: 0 });
    }

    #[test]
    fn measures_a_real_directory() {
        let d = tempfile::tempdir().unwrap();
        let v = statvfs(d.path()).unwrap();
        assert!(v.total > 0 && v.free <= v.total && v.avail <= v.free);
        assert!(statvfs(Path::new("/nonexistent/duet")).is_none());
    }
}
