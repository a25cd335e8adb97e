//! READDIR cookies (NFSv3 and NFSv4).
//!
//! duet's `Op::ReadDir` resumes after a *name*; NFS resumes from a 64-bit
//! cookie. A cookie here is `(position << 32) | fnv32(name)`: `position`
//! counts the entries consumed so far (>= 1, so every cookie is at least
//! 2^32 and never one of the reserved values 0, 1, 2), the low half hashes
//! the last name returned. The server also keeps a bounded table
//! `(directory, cookie) -> name`; with a hit the listing resumes by name
//! (exact, one range scan). Without one (evicted, or the server
//! restarted) the listing resumes by position: it reads from the start
//! and skips `position` entries, so cookies stay valid across restarts at
//! some cost for huge directories. The cookie verifier is a constant
//! derived from the handle key, so it too survives restarts; a client
//! presenting another verifier gets BAD_COOKIE.

use std::collections::{HashMap, VecDeque};

use duet_fs::NodeId;

/// Where to resume a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resume {
    Start,
    /// After this name; `pos` entries were consumed before.
    After {
        name: String,
        pos: u64,
    },
    /// Skip this many entries from the start.
    Skip(u64),
}

/// Largest position a cookie may carry (the engine reads at most 2^20
/// entries in one scan).
pub const MAX_POSITION: u64 = 1 << 20;

pub fn fnv32(b: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for x in b {
        h ^= u32::from(*x);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

pub fn make_cookie(pos: u64, name: &str) -> u64 {
    (pos << 32) | u64::from(fnv32(name.as_bytes()))
}

/// The bounded cookie table.
#[derive(Debug)]
pub struct CookieTable {
    map: HashMap<(NodeId, u64), String>,
    order: VecDeque<(NodeId, u64)>,
    max: usize,
}

impl CookieTable {
    pub fn new(max: usize) -> Self {
        CookieTable {
            map: HashMap::new(),
            order: VecDeque::new(),
            max: max.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Remembers the name a cookie resumes after (only the last entry of
    /// each reply needs it).
    pub fn remember(&mut self, dir: NodeId, cookie: u64, name: &str) {
        if self.map.contains_key(&(dir, cookie)) {
            return;
        }
        while self.map.len() >= self.max {
            match self.order.pop_front() {
                Some(k) => {
                    self.map.remove(&k);
                }
                None => break,
            }
        }
        self.map.insert((dir, cookie), name.to_string());
        self.order.push_back((dir, cookie));
    }

    /// Where `cookie` resumes; `None` if it cannot be a cookie of ours.
    /// `dir` is None when the directory is not known before the batch runs.
    pub fn resume(&self, dir: Option<NodeId>, cookie: u64) -> Option<Resume> {
        if cookie == 0 {
            return Some(Resume::Start);
        }
        let pos = cookie >> 32;
        if pos == 0 || pos > MAX_POSITION {
            return None;
        }
        if let Some(d) = dir {
            if let Some(name) = self.map.get(&(d, cookie)) {
                return Some(Resume::After {
                    name: name.clone(),
                    pos,
                });
            }
        }
        Some(Resume::Skip(pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_resume_by_name_or_position() {
        let mut t = CookieTable::new(2);
        let c = make_cookie(3, "c");
        assert!(c > 2);
        t.remember(5, c, "c");
        assert_eq!(
            t.resume(Some(5), c),
            Some(Resume::After {
                name: "c".into(),
                pos: 3
            })
        );
        assert_eq!(t.resume(Some(6), c), Some(Resume::Skip(3)));
        assert_eq!(t.resume(None, c), Some(Resume::Skip(3)));
        assert_eq!(t.resume(Some(5), 0), Some(Resume::Start));
        assert_eq!(t.resume(Some(5), 1), None);
        t.remember(5, make_cookie(4, "d"), "d");
        t.remember(5, make_cookie(5, "e"), "e");
        assert_eq!(t.len(), 2);
        assert_eq!(t.resume(Some(5), c), Some(Resume::Skip(3)));
    }
}
