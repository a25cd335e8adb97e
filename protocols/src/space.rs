//! The capacity the file protocols report (SMB FileFsSizeInformation and
//! FileFsFullSizeInformation, NFSv3 FSSTAT, NFSv4 space_* attributes).
//!
//! Plain shared memory: the appliance measures the data volume (statvfs,
//! refreshed about once a second) and stores the figures here; every
//! connection reads the latest ones. This crate does no I/O.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the volume: its size, what is free, and what clients may still
/// use. Handed to the SMB and NFS server configs as an `Arc<Space>`.
#[derive(Debug)]
pub struct Space {
    total: AtomicU64,
    free: AtomicU64,
    avail: AtomicU64,
}

/// One reading of [`Space`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceFigures {
    /// Size of the volume in bytes.
    pub total: u64,
    /// Free bytes.
    pub free: u64,
    /// Free bytes an unprivileged client may use (at most `free`).
    pub avail: u64,
}

impl Space {
    pub fn new(total: u64, free: u64, avail: u64) -> Space {
        let s = Space { total: AtomicU64::new(0), free: AtomicU64::new(0), avail: AtomicU64::new(0) };
        s.set(SpaceFigures { total, free, avail });
        s
    }

    /// Stores a new reading; `free` is capped at `total` and `avail` at
    /// `free`, so replies never claim more free than total space.
    pub fn set(&self, f: SpaceFigures) {
        let free = f.free.min(f.total);
        let avail = f.avail.min(free);
        self.total.store(f.total, Ordering::Relaxed);
        self.free.store(free, Ordering::Relaxed);
        self.avail.store(avail, Ordering::Relaxed);
    }

    pub fn get(&self) -> SpaceFigures {
        let total = self.total.load(Ordering::Relaxed);
        let free = self.free.load(Ordering::Relaxed).min(total);
        let avail = self.avail.load(Ordering::Relaxed).min(free);
        SpaceFigures { total, free, avail }
    }
}

impl Default for Space {
    /// Fixed figures for tests and tools that measure nothing: 1 PiB with
    /// half of it free.
    fn default() -> Space {
        Space::new(1 << 50, 1 << 49, 1 << 49)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped() {
        let s = Space::new(100, 200, 300);
        assert_eq!(s.get(), SpaceFigures { total: 100, free: 100, avail: 100 });
        s.set(SpaceFigures { total: 100, free: 50, avail: 60 });
        assert_eq!(s.get(), SpaceFigures { total: 100, free: 50, avail: 50 });
        s.set(SpaceFigures { total: 100, free: 50, avail: 10 });
        assert_eq!(s.get().avail, 10);
    }
}
