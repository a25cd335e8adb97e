//! When the destager waits for a stream of write-log appends to pause
//! (sans-I/O: times are milliseconds of a monotonic clock, passed in).
//!
//! A destage round's chunk writes compete with the log appends of large
//! client writes for the data executor (copies, checksums) and for the
//! device. While a client streams a large file, moving its data into
//! chunks at once took about a third of what the stream got (smbclient
//! `put` of 256 MiB: 350-530 MB/s, 510-785 MB/s with the rounds held
//! back). So a destager woken by a commit keeps gathering while appends
//! keep completing, as a page cache holds dirty pages: until one gather
//! interval passes without an append, the log holds
//! [`DeferPolicy::max_bytes`], it has waited [`DeferPolicy::max_wait_ms`],
//! or a client read data not destaged yet (a reader of what was just
//! written is served sooner from the chunks and the read cache than by
//! laying many queued records over them). Nothing about durability changes: the
//! data is durable in the log from its commit on, and reads lay the
//! queued records over the chunks (from memory while the log memory,
//! [`crate::logmem`], holds them).

/// The bounds of one wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeferPolicy {
    /// The most bytes the write log may hold before a round runs anyway
    /// (0: never wait).
    pub max_bytes: u64,
    /// The longest one wait lasts, however busy the stream.
    pub max_wait_ms: u64,
}

/// The longest a destager waits for a stream to pause, by default.
pub const MAX_WAIT_MS: u64 = 2_000;

impl DeferPolicy {
    /// Whether the destager gathers for another interval rather than run a
    /// round now. `since_ms`: when this wait began; `last_append_ms`: when
    /// the newest log append became durable (`None`: never);
    /// `gather_ms`: the destager's gather interval; `held_bytes`: what the
    /// write log's segments hold; `queued_read`: a client read data not
    /// destaged yet since the wait began.
    pub fn keep_waiting(&self, now_ms: u64, since_ms: u64, last_append_ms: Option<u64>, gather_ms: u64, held_bytes: u64, queued_read: bool) -> bool {
        if self.max_bytes == 0 || held_bytes >= self.max_bytes || queued_read {
            return false;
        }
        if now_ms.saturating_sub(since_ms) >= self.max_wait_ms {
            return false;
        }
        match last_append_ms {
            // Appends still arrive: the stream has not paused.
            Some(t) => now_ms.saturating_sub(t) < gather_ms,
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: DeferPolicy = DeferPolicy { max_bytes: 1 << 30, max_wait_ms: 2_000 };

    #[test]
    fn waits_while_appends_keep_coming() {
        assert!(P.keep_waiting(1_000, 990, Some(995), 20, 64 << 20, false));
        assert!(P.keep_waiting(1_000, 500, Some(981), 20, 0, false));
    }

    #[test]
    fn runs_once_the_stream_pauses_or_never_appended() {
        assert!(!P.keep_waiting(1_000, 900, Some(980), 20, 64 << 20, false));
        assert!(!P.keep_waiting(1_000, 900, Some(100), 20, 64 << 20, false));
        assert!(!P.keep_waiting(1_000, 900, None, 20, 64 << 20, false));
    }

    #[test]
    fn the_bounds_end_the_wait() {
        // The log holds the most it may.
        assert!(!P.keep_waiting(1_000, 990, Some(999), 20, 1 << 30, false));
        // Waited the longest a wait lasts, appends or not.
        assert!(!P.keep_waiting(3_000, 1_000, Some(2_999), 20, 0, false));
        assert!(P.keep_waiting(2_999, 1_000, Some(2_998), 20, 0, false));
        // A reader of data not destaged yet.
        assert!(!P.keep_waiting(1_000, 990, Some(999), 20, 0, true));
        // Off.
        let off = DeferPolicy { max_bytes: 0, ..P };
        assert!(!off.keep_waiting(1_000, 990, Some(999), 20, 0, false));
    }

    #[test]
    fn a_clock_that_reads_earlier_never_panics() {
        // Times from different sources may be a little out of order.
        assert!(P.keep_waiting(100, 200, Some(300), 20, 0, false));
        assert!(!P.keep_waiting(0, 0, Some(0), 0, 0, false));
    }
}
