//! Browser sessions of the web console and the sign-in throttle, sans-I/O:
//! time comes in as a monotonic millisecond count, randomness as bytes.
//!
//! - [`Sessions`]: a signed-in browser holds a session id in an `HttpOnly`,
//!   `SameSite=Strict` cookie (RFC 6265 section 4.1) and a CSRF token that
//!   the page sends back in the `X-CSRF-Token` header of every change (the
//!   synchronizer-token pattern: a cross-site form can make the browser send
//!   the cookie, never read the token). Sessions end after
//!   [`SessionLimits::idle_ms`] without use or [`SessionLimits::max_ms`] in all.
//! - [`Throttle`]: failed sign-ins per source address; after
//!   [`ThrottleLimits::free_failures`] failures within a window, every further
//!   failure locks the source out for a doubling time up to a bound. A success
//!   clears the source's count.

use std::collections::HashMap;

use crate::router::constant_time_eq;

/// The cookie that carries a console session id.
pub const SESSION_COOKIE: &str = "duet_session";
/// The header that carries a console session's CSRF token.
pub const CSRF_HEADER: &str = "X-CSRF-Token";

#[derive(Clone, Copy, Debug)]
pub struct SessionLimits {
    pub idle_ms: u64,
    pub max_ms: u64,
    pub max_sessions: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits { idle_ms: 30 * 60_000, max_ms: 12 * 3_600_000, max_sessions: 256 }
    }
}

#[derive(Clone, Debug)]
pub struct Session {
    pub user: String,
    pub csrf: String,
    /// What the server recorded of the user's stored secret at sign-in
    /// (a fingerprint): the session ends when that secret changes.
    pub secret_tag: u64,
    created_ms: u64,
    used_ms: u64,
}

/// The console's signed-in sessions, by id (hex of 32 random bytes).
#[derive(Debug, Default)]
pub struct Sessions {
    limits: SessionLimits,
    by_id: HashMap<String, Session>,
}

fn hex32(b: &[u8; 32]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Sessions {
    pub fn new(limits: SessionLimits) -> Self {
        Sessions { limits, by_id: HashMap::new() }
    }

    fn expired(&self, s: &Session, now_ms: u64) -> bool {
        now_ms.saturating_sub(s.used_ms) > self.limits.idle_ms || now_ms.saturating_sub(s.created_ms) > self.limits.max_ms
    }

    /// A new session for `user`; returns (session id, CSRF token). When the
    /// table is full, expired sessions go first, then the least recently
    /// used one.
    pub fn create(&mut self, user: &str, secret_tag: u64, id_random: [u8; 32], csrf_random: [u8; 32], now_ms: u64) -> (String, String) {
        self.by_id.retain(|_, s| !(now_ms.saturating_sub(s.used_ms) > self.limits.idle_ms || now_ms.saturating_sub(s.created_ms) > self.limits.max_ms));
        while self.by_id.len() >= self.limits.max_sessions.max(1) {
            let oldest = self.by_id.iter().min_by_key(|(_, s)| s.used_ms).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.by_id.remove(&k);
                }
                None => break,
            }
        }
        let (id, csrf) = (hex32(&id_random), hex32(&csrf_random));
        self.by_id.insert(id.clone(), Session { user: user.to_string(), csrf: csrf.clone(), secret_tag, created_ms: now_ms, used_ms: now_ms });
        (id, csrf)
    }

    /// The live session with this id (its use time refreshed), or None.
    pub fn get(&mut self, id: &str, now_ms: u64) -> Option<Session> {
        let s = self.by_id.get(id)?;
        if self.expired(s, now_ms) {
            self.by_id.remove(id);
            return None;
        }
        let s = self.by_id.get_mut(id)?;
        s.used_ms = now_ms;
        Some(s.clone())
    }

    pub fn remove(&mut self, id: &str) {
        self.by_id.remove(id);
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// Whether `sent` (the request's CSRF header) is the session's token.
pub fn csrf_matches(session: &Session, sent: Option<&str>) -> bool {
    match sent {
        Some(t) => constant_time_eq(t.trim().as_bytes(), session.csrf.as_bytes()),
        None => false,
    }
}

/// The value of cookie `name` in a `Cookie` header (RFC 6265 section 5.4:
/// `name=value` pairs separated by `; `).
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').map(str::trim).find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == name).then(|| v.trim().trim_matches('"'))
    })
}

/// The `Set-Cookie` value that hands a browser its session (`secure`: only
/// over TLS).
pub fn session_cookie(id: &str, secure: bool) -> String {
    format!("{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{}", if secure { "; Secure" } else { "" })
}

/// The `Set-Cookie` value that ends a session in the browser.
pub fn cleared_cookie(secure: bool) -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}", if secure { "; Secure" } else { "" })
}

#[derive(Clone, Copy, Debug)]
pub struct ThrottleLimits {
    /// Failures allowed per source within `window_ms` before lockouts start.
    pub free_failures: u32,
    pub window_ms: u64,
    /// The first lockout; each further failure doubles it, up to `max_lock_ms`.
    pub first_lock_ms: u64,
    pub max_lock_ms: u64,
    /// Sources tracked at most (the oldest is forgotten first).
    pub max_sources: usize,
}

impl Default for ThrottleLimits {
    fn default() -> Self {
        ThrottleLimits { free_failures: 5, window_ms: 15 * 60_000, first_lock_ms: 2_000, max_lock_ms: 300_000, max_sources: 4096 }
    }
}

#[derive(Clone, Copy, Debug)]
struct Failures {
    count: u32,
    first_ms: u64,
    locked_until_ms: u64,
}

/// Failed sign-ins by source address.
#[derive(Debug, Default)]
pub struct Throttle {
    limits: ThrottleLimits,
    by_source: HashMap<String, Failures>,
}

impl Throttle {
    pub fn new(limits: ThrottleLimits) -> Self {
        Throttle { limits, by_source: HashMap::new() }
    }

    /// Ok if `source` may try now; Err(milliseconds until it may) if it is
    /// locked out.
    pub fn check(&self, source: &str, now_ms: u64) -> Result<(), u64> {
        match self.by_source.get(source) {
            Some(f) if f.locked_until_ms > now_ms => Err(f.locked_until_ms - now_ms),
            _ => Ok(()),
        }
    }

    /// A failed attempt from `source`; returns the lockout it starts, if any.
    pub fn failed(&mut self, source: &str, now_ms: u64) -> Option<u64> {
        let l = self.limits;
        if !self.by_source.contains_key(source) && self.by_source.len() >= l.max_sources.max(1) {
            let oldest = self.by_source.iter().min_by_key(|(_, f)| f.first_ms).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.by_source.remove(&k);
            }
        }
        let f = self.by_source.entry(source.to_string()).or_insert(Failures { count: 0, first_ms: now_ms, locked_until_ms: 0 });
        if now_ms.saturating_sub(f.first_ms) > l.window_ms && f.locked_until_ms <= now_ms {
            *f = Failures { count: 0, first_ms: now_ms, locked_until_ms: 0 };
        }
        f.count += 1;
        if f.count <= l.free_failures {
            return None;
        }
        let doublings = (f.count - l.free_failures - 1).min(20);
        let lock = l.first_lock_ms.saturating_mul(1u64 << doublings).min(l.max_lock_ms);
        f.locked_until_ms = now_ms + lock;
        Some(lock)
    }

    /// A successful sign-in from `source` clears its failures.
    pub fn succeeded(&mut self, source: &str) {
        self.by_source.remove(source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_when_idle_and_in_all() {
        let mut s = Sessions::new(SessionLimits { idle_ms: 1_000, max_ms: 5_000, max_sessions: 2 });
        let (id, csrf) = s.create("admin", 7, [1; 32], [2; 32], 0);
        assert_eq!(id.len(), 64);
        assert_ne!(id, csrf);
        let got = s.get(&id, 900).unwrap();
        assert_eq!(got.user, "admin");
        assert!(csrf_matches(&got, Some(&csrf)));
        assert!(!csrf_matches(&got, Some(&id)));
        assert!(!csrf_matches(&got, None));
        // Used every 900 ms it lives until max_ms, then ends.
        for t in (1_800..=4_500).step_by(900) {
            assert!(s.get(&id, t).is_some(), "at {t}");
        }
        assert!(s.get(&id, 5_001).is_none());
        let (id2, _) = s.create("admin", 7, [3; 32], [4; 32], 10_000);
        assert!(s.get(&id2, 11_001).is_none(), "idle for over 1 s");
        assert!(s.get("nope", 0).is_none());
    }

    #[test]
    fn a_full_table_forgets_the_least_recently_used() {
        let mut s = Sessions::new(SessionLimits { idle_ms: 100_000, max_ms: 100_000, max_sessions: 2 });
        let (a, _) = s.create("a", 7, [1; 32], [1; 32], 0);
        let (b, _) = s.create("b", 7, [2; 32], [2; 32], 1);
        s.get(&a, 2);
        let (c, _) = s.create("c", 7, [3; 32], [3; 32], 3);
        assert_eq!(s.len(), 2);
        assert!(s.get(&a, 4).is_some() && s.get(&c, 4).is_some() && s.get(&b, 4).is_none());
        s.remove(&a);
        assert!(s.get(&a, 5).is_none());
    }

    #[test]
    fn cookies_parse_and_are_strict() {
        assert_eq!(cookie("a=1; duet_session=abc; b=2", SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie("duet_session=\"x\"", SESSION_COOKIE), Some("x"));
        assert_eq!(cookie("duet_sessionx=1", SESSION_COOKIE), None);
        assert_eq!(cookie("", SESSION_COOKIE), None);
        let c = session_cookie("id", true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.ends_with("Secure"));
        assert!(!session_cookie("id", false).contains("Secure"));
        assert!(cleared_cookie(false).contains("Max-Age=0"));
    }

    #[test]
    fn failures_lock_a_source_out_for_doubling_times() {
        let mut t = Throttle::new(ThrottleLimits { free_failures: 3, window_ms: 60_000, first_lock_ms: 1_000, max_lock_ms: 4_000, max_sources: 2 });
        for i in 0..3 {
            assert_eq!(t.check("10.0.0.1", i), Ok(()));
            assert_eq!(t.failed("10.0.0.1", i), None);
        }
        assert_eq!(t.failed("10.0.0.1", 10), Some(1_000));
        assert_eq!(t.check("10.0.0.1", 500), Err(510));
        assert_eq!(t.check("10.0.0.2", 500), Ok(()), "another source is not locked out");
        assert_eq!(t.check("10.0.0.1", 1_010), Ok(()));
        assert_eq!(t.failed("10.0.0.1", 1_100), Some(2_000));
        assert_eq!(t.failed("10.0.0.1", 3_200), Some(4_000));
        assert_eq!(t.failed("10.0.0.1", 7_300), Some(4_000), "bounded");
        t.succeeded("10.0.0.1");
        assert_eq!(t.check("10.0.0.1", 7_400), Ok(()));
        // A window without failures starts the count again.
        for i in 0..3 {
            assert_eq!(t.failed("10.0.0.3", i), None);
        }
        assert_eq!(t.failed("10.0.0.3", 70_000), None);
        // At most max_sources are tracked.
        t.failed("10.0.0.4", 70_001);
        t.failed("10.0.0.5", 70_002);
        assert!(t.by_source.len() <= 2);
    }
}
