//! Byte ranges as SMB and NFS name them.
//!
//! SMB (MS-FSA 2.1.5.8, 2.1.4.10): (offset, length) with the last byte at
//! `offset + length - 1`; that must not overflow when length is not zero
//! (STATUS_INVALID_LOCK_RANGE). A zero-length range is kept as it is: the
//! range {0, 0} overlaps nothing, and {o, 0} with o > 0 has its "last byte"
//! at o - 1, so by the overlap formula of 2.1.4.10 it conflicts with a
//! range that covers both byte o - 1 and byte o.
//!
//! NFSv4 (RFC 8881 18.10.4): length all ones means "to the end of the
//! file and beyond"; length zero is NFS4ERR_INVAL, and so is an offset +
//! length that overflows 64 bits.

/// A locked (or accessed) byte range, inclusive at both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Range {
    /// The offset as the client gave it.
    pub offset: u64,
    /// The length as the client gave it (u64::MAX from NFS: to EOF).
    pub length: u64,
    first: u64,
    last: u64,
    /// The {0, 0} range: overlaps nothing (MS-FSA 2.1.4.10).
    null: bool,
}

impl Range {
    /// An SMB lock range (MS-FSA 2.1.5.8); None: STATUS_INVALID_LOCK_RANGE.
    pub fn smb(offset: u64, length: u64) -> Option<Range> {
        if length == 0 {
            return Some(Range {
                offset,
                length,
                first: offset,
                last: offset.wrapping_sub(1),
                null: offset == 0,
            });
        }
        let last = offset.checked_add(length - 1)?;
        Some(Range { offset, length, first: offset, last, null: false })
    }

    /// An NFSv4 lock range (RFC 8881 18.10.4); None: NFS4ERR_INVAL.
    pub fn nfs(offset: u64, length: u64) -> Option<Range> {
        if length == 0 {
            return None;
        }
        let last = if length == u64::MAX {
            u64::MAX
        } else {
            offset.checked_add(length)? - 1
        };
        Some(Range { offset, length, first: offset, last, null: false })
    }

    /// The bytes a READ or WRITE touches. Zero bytes touch nothing; a
    /// range running past 2^64 - 1 is cut there.
    pub fn io(offset: u64, length: u64) -> Range {
        if length == 0 {
            return Range { offset, length, first: 1, last: 0, null: true };
        }
        let last = offset.saturating_add(length - 1);
        Range { offset, length, first: offset, last, null: false }
    }

    /// Everything from `offset` on (an NFS range to EOF).
    pub fn from(offset: u64) -> Range {
        Range { offset, length: u64::MAX, first: offset, last: u64::MAX, null: false }
    }

    pub fn first(&self) -> u64 {
        self.first
    }

    /// The last byte (inclusive); u64::MAX for a range to EOF.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The overlap test of MS-FSA 2.1.4.10 (it is also plain interval
    /// overlap for NFS ranges).
    pub fn overlaps(&self, o: &Range) -> bool {
        !self.null && !o.null && self.first <= o.last && o.first <= self.last
    }

    /// Whether `self` covers every byte of `o` (both non-empty).
    fn covers(&self, o: &Range) -> bool {
        self.first <= o.first && o.last <= self.last
    }

    /// An inclusive range [first, last] in NFS terms.
    fn span(first: u64, last: u64) -> Range {
        let length = if last == u64::MAX { u64::MAX } else { last - first + 1 };
        Range { offset: first, length, first, last, null: false }
    }

    /// What is left of `self` once `cut` is taken out (POSIX unlock
    /// splitting): up to two pieces.
    pub(crate) fn minus(&self, cut: &Range) -> Vec<Range> {
        if !self.overlaps(cut) || self.first > self.last {
            return vec![*self];
        }
        if cut.covers(self) {
            return Vec::new();
        }
        let mut out = Vec::new();
        if self.first < cut.first {
            out.push(Range::span(self.first, cut.first - 1));
        }
        if cut.last < self.last {
            out.push(Range::span(cut.last + 1, self.last));
        }
        out
    }

    /// The length to report in an NFS LOCK4denied (all ones: to EOF).
    pub fn nfs_length(&self) -> u64 {
        if self.last == u64::MAX {
            u64::MAX
        } else {
            self.length
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smb_ranges_follow_ms_fsa() {
        assert!(Range::smb(u64::MAX, 1).is_some());
        assert!(Range::smb(u64::MAX, 2).is_none());
        assert!(Range::smb(1, u64::MAX).is_some());
        assert!(Range::smb(2, u64::MAX).is_none());
        let a = Range::smb(0, 10).unwrap();
        let zero5 = Range::smb(5, 0).unwrap();
        let zero0 = Range::smb(0, 0).unwrap();
        // {5, 0} "ends" at 4: it meets a range across bytes 4 and 5 only.
        assert!(zero5.overlaps(&a));
        assert!(!zero5.overlaps(&Range::smb(5, 5).unwrap()));
        assert!(!zero5.overlaps(&Range::smb(4, 1).unwrap()));
        assert!(!zero5.overlaps(&zero5));
        assert!(!zero0.overlaps(&a) && !a.overlaps(&zero0));
        assert!(a.overlaps(&Range::smb(9, 1).unwrap()));
        assert!(!a.overlaps(&Range::smb(10, 1).unwrap()));
    }

    #[test]
    fn nfs_ranges_follow_rfc_8881() {
        assert!(Range::nfs(0, 0).is_none());
        assert!(Range::nfs(u64::MAX, 1).is_none(), "offset + length overflows");
        assert!(Range::nfs(2, u64::MAX - 1).is_none());
        assert_eq!(Range::nfs(1, u64::MAX - 1).unwrap().last(), u64::MAX - 1);
        let eof = Range::nfs(100, u64::MAX).unwrap();
        assert_eq!(eof.last(), u64::MAX);
        assert_eq!(eof.nfs_length(), u64::MAX);
        assert!(eof.overlaps(&Range::nfs(u64::MAX - 1, 1).unwrap()));
        assert!(!eof.overlaps(&Range::nfs(0, 100).unwrap()));
        assert!(Range::nfs(0, 101).unwrap().overlaps(&eof));
    }

    #[test]
    fn io_ranges() {
        assert!(!Range::io(5, 0).overlaps(&Range::smb(0, 10).unwrap()));
        assert!(Range::io(u64::MAX - 1, 100).overlaps(&Range::from(u64::MAX)));
    }

    #[test]
    fn minus_splits() {
        let r = Range::nfs(0, 100).unwrap();
        let cut = Range::nfs(10, 10).unwrap();
        let p = r.minus(&cut);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].first(), p[0].last()), (0, 9));
        assert_eq!((p[1].first(), p[1].last()), (20, 99));
        assert!(r.minus(&Range::from(0)).is_empty());
        let eof = Range::from(50);
        let p = eof.minus(&cut);
        assert_eq!(p, vec![eof]);
        let p = eof.minus(&Range::nfs(60, 1).unwrap());
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].last(), u64::MAX);
        assert_eq!(p[1].nfs_length(), u64::MAX);
        assert_eq!(p[0].length, 10);
    }
}
