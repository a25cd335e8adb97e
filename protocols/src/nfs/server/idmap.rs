//! NFSv4 owner strings (RFC 8881 5.9): `owner`, `owner_group` and the
//! `who` of ACEs are `name@domain` or, for AUTH_SYS clients, decimal ids.
//!
//! Without a domain configured (`[nfs] id_domain`, the default) duet
//! writes decimal ids, which every Linux client takes as they are, and
//! reads decimal ids, `nobody` and `root`. With a domain, a uid of one of
//! duet's users is written `name@domain`, and a gid equal to the uid of a
//! user (a user private group) `name@domain`; other ids stay decimal.
//! Names are read with or without `@domain`; with a domain configured
//! another domain is refused (NFS4ERR_BADOWNER), as an idmapd of another
//! domain would map it to nobody. Sans-I/O: the appliance hands the users
//! in ([`IdMap::new`]) whenever its catalog changes.

use std::collections::HashMap;

use duet_fs::acl::{Names, Sid};

/// The users' names and ids, and the NFSv4 domain, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdMap {
    domain: Option<String>,
    by_uid: HashMap<u32, String>,
    /// Lower-cased name -> (uid, gid).
    by_name: HashMap<String, (u32, u32)>,
}

impl IdMap {
    /// The map of `users` (name, uid, gid) for NFSv4 domain `domain`
    /// (None or empty: decimal ids only on output).
    pub fn new(domain: Option<&str>, users: impl IntoIterator<Item = (String, u32, u32)>) -> IdMap {
        let mut m = IdMap {
            domain: domain.map(|d| d.trim().to_ascii_lowercase()).filter(|d| !d.is_empty()),
            ..IdMap::default()
        };
        for (name, uid, gid) in users {
            m.by_uid.entry(uid).or_insert_with(|| name.clone());
            m.by_name.insert(name.to_lowercase(), (uid, gid));
        }
        m
    }

    /// Whether names are written (an NFSv4 domain is configured).
    pub fn has_domain(&self) -> bool {
        self.domain.is_some()
    }

    /// The `owner` string of `uid`.
    pub fn owner(&self, uid: u32) -> String {
        match (&self.domain, self.by_uid.get(&uid)) {
            (Some(d), Some(n)) => format!("{n}@{d}"),
            _ => uid.to_string(),
        }
    }

    /// The `owner_group` string of `gid`: a user private group (a user
    /// whose uid is `gid`) by that user's name.
    pub fn group(&self, gid: u32) -> String {
        match (&self.domain, self.by_uid.get(&gid)) {
            (Some(d), Some(n)) if self.by_name.get(&n.to_lowercase()).is_some_and(|(_, g)| *g == gid) => {
                format!("{n}@{d}")
            }
            _ => gid.to_string(),
        }
    }

    /// The name part of `s`, when its domain (if any) is acceptable.
    fn name<'a>(&self, s: &'a str) -> Option<&'a str> {
        match s.split_once('@') {
            None => Some(s),
            Some((n, d)) => match &self.domain {
                Some(ours) if !d.eq_ignore_ascii_case(ours) => None,
                _ => Some(n),
            },
        }
    }

    /// The uid an `owner` string names: a decimal id (with or without a
    /// domain), `nobody`, `root`, or a user's name.
    pub fn parse_owner(&self, s: &[u8]) -> Option<u32> {
        if let Some(id) = super::attr::parse_id(s) {
            return Some(id);
        }
        let name = self.name(std::str::from_utf8(s).ok()?)?;
        self.by_name.get(&name.to_lowercase()).map(|(uid, _)| *uid)
    }

    /// The gid an `owner_group` string names: a decimal id, `nobody`,
    /// `root`, or the name of a user with a private group (uid = gid).
    pub fn parse_group(&self, s: &[u8]) -> Option<u32> {
        if let Some(id) = super::attr::parse_id(s) {
            return Some(id);
        }
        let name = self.name(std::str::from_utf8(s).ok()?)?;
        self.by_name.get(&name.to_lowercase()).filter(|(u, g)| u == g).map(|(_, g)| *g)
    }
}

/// The `who` of NFSv4 ACEs to and from the Unix SIDs the ACL store keeps.
impl Names for IdMap {
    fn user_sid(&self, name: &str) -> Option<Sid> {
        self.parse_owner(name.as_bytes()).map(Sid::unix_user)
    }
    fn group_sid(&self, name: &str) -> Option<Sid> {
        self.parse_group(name.as_bytes()).map(Sid::unix_group)
    }
    fn user_name(&self, sid: &Sid) -> Option<String> {
        sid.as_unix_user().map(|u| self.owner(u))
    }
    fn group_name(&self, sid: &Sid) -> Option<String> {
        sid.as_unix_group().map(|g| self.group(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Vec<(String, u32, u32)> {
        vec![("Alice".into(), 1500, 1500), ("bob".into(), 1600, 100)]
    }

    #[test]
    fn without_a_domain_ids_are_decimal_and_names_are_still_read() {
        let m = IdMap::new(None, users());
        assert_eq!((m.owner(1500), m.group(1500)), ("1500".to_string(), "1500".to_string()));
        assert_eq!(m.parse_owner(b"1500@anything"), Some(1500));
        assert_eq!(m.parse_owner(b"alice@any.where"), Some(1500));
        assert_eq!(m.parse_owner(b"alice"), Some(1500));
        assert_eq!(m.parse_owner(b"nobody"), Some(65534));
        assert_eq!(m.parse_owner(b"carol"), None);
        assert_eq!(m.parse_group(b"alice"), Some(1500));
        assert_eq!(m.parse_group(b"bob"), None, "bob's gid is no private group");
    }

    #[test]
    fn with_a_domain_users_are_written_by_name_and_other_domains_refused() {
        let m = IdMap::new(Some("Example.COM"), users());
        assert_eq!(m.owner(1500), "Alice@example.com");
        assert_eq!(m.group(1500), "Alice@example.com");
        assert_eq!(m.owner(1600), "bob@example.com");
        assert_eq!(m.group(100), "100", "no user private group");
        assert_eq!(m.owner(42), "42");
        assert_eq!(m.parse_owner(b"alice@example.com"), Some(1500));
        assert_eq!(m.parse_owner(b"ALICE@EXAMPLE.com"), Some(1500));
        assert_eq!(m.parse_owner(b"alice@other.org"), None);
        assert_eq!(m.parse_owner(b"42@example.com"), Some(42));
        assert_eq!(m.user_name(&Sid::unix_user(1600)).as_deref(), Some("bob@example.com"));
        assert_eq!(m.group_sid("alice@example.com"), Some(Sid::unix_group(1500)));
    }
}
