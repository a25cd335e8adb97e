//! IPv4/IPv6 CIDR blocks and NFS client matching.
//!
//! Accepted forms: `10.0.0.0/8`, `192.168.1.7` (one host, /32), `::1/128`,
//! `fe80::/10`, `::1` (one host, /128), and `*` (everyone, [`ClientMatch`]
//! only). Host bits after the prefix are cleared (`10.1.2.3/8` is
//! `10.0.0.0/8`). Zone ids (`fe80::1%eth0`) are not accepted.
//!
//! Matching treats an IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, what a
//! dual-stack socket reports for an IPv4 peer) as the IPv4 address it maps,
//! so IPv4 rules apply to it; and an IPv4 address matches an IPv6 block
//! containing its mapped form (`::ffff:0:0/96`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

/// Longest input accepted by the parsers.
const MAX_INPUT: usize = 64;

/// Why a CIDR or client entry did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR {input:?}: {reason}")]
pub struct CidrError {
    pub input: String,
    pub reason: &'static str,
}

fn err(input: &str, reason: &'static str) -> CidrError {
    let mut input = input.to_string();
    if input.len() > MAX_INPUT {
        let mut cut = MAX_INPUT;
        while !input.is_char_boundary(cut) {
            cut -= 1;
        }
        input.truncate(cut);
        input.push_str("...");
    }
    CidrError { input, reason }
}

/// An IPv4 or IPv6 network: an address with its host bits cleared, and a
/// prefix length (0-32 or 0-128); the `ipnet` crate's [`ipnet::IpNet`] with
/// this module's parsing and IPv4-mapped matching around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    net: ipnet::IpNet,
}

impl Cidr {
    /// The network of `addr` with `prefix_len` bits; host bits are cleared.
    /// None if the prefix is longer than the address.
    pub fn new(addr: IpAddr, prefix_len: u8) -> Option<Cidr> {
        let net = ipnet::IpNet::new(addr, prefix_len).ok()?.trunc();
        Some(Cidr { net })
    }

    /// One host (/32 or /128).
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr { net: ipnet::IpNet::from(addr) }
    }

    /// The network address (host bits cleared).
    pub fn addr(&self) -> IpAddr {
        self.net.network()
    }

    pub fn prefix_len(&self) -> u8 {
        self.net.prefix_len()
    }

    /// Whether `ip` lies in this network (see the module doc for IPv4-mapped
    /// IPv6 addresses).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (ipnet::IpNet::V4(net), IpAddr::V6(ip)) => ip.to_ipv4_mapped().is_some_and(|v4| net.contains(&v4)),
            (ipnet::IpNet::V6(net), IpAddr::V4(ip)) => net.contains(&ip.to_ipv6_mapped()),
            (net, ip) => net.contains(&ip),
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        if s.is_empty() {
            return Err(err(s, "empty"));
        }
        if s.len() > MAX_INPUT {
            return Err(err(s, "too long"));
        }
        let (addr_part, prefix_part) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = if addr_part.contains(':') {
            IpAddr::V6(
                addr_part
                    .parse()
                    .map_err(|_| err(s, "not an IPv6 address"))?,
            )
        } else {
            IpAddr::V4(parse_v4(addr_part).ok_or_else(|| err(s, "not an IPv4 address"))?)
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = match prefix_part {
            None => max,
            Some(p) => parse_prefix(p).ok_or_else(|| err(s, "prefix length is not a number"))?,
        };
        if prefix_len > max {
            return Err(err(
                s,
                if max == 32 {
                    "prefix length over 32"
                } else {
                    "prefix length over 128"
                },
            ));
        }
        // prefix_len <= 128 here, so it fits u8 and `new` succeeds.
        Cidr::new(addr, prefix_len as u8).ok_or_else(|| err(s, "prefix length too long"))
    }
}

/// Dotted quad, exactly four decimal octets 0-255, no leading zeros (which
/// some parsers read as octal).
fn parse_v4(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut n = 0;
    for part in s.split('.') {
        if n == 4 || part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        if part.len() > 1 && part.starts_with('0') {
            return None;
        }
        octets[n] = part.parse::<u8>().ok()?;
        n += 1;
    }
    if n != 4 {
        return None;
    }
    Some(Ipv4Addr::from(octets))
}

/// Decimal, 1-3 digits, no sign, no leading zeros.
fn parse_prefix(p: &str) -> Option<u32> {
    if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if p.len() > 1 && p.starts_with('0') {
        return None;
    }
    p.parse().ok()
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.prefix_len())
    }
}

/// One entry of an NFS export's client list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientMatch {
    /// `*`: every client.
    Any,
    Net(Cidr),
}

impl ClientMatch {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match self {
            ClientMatch::Any => true,
            ClientMatch::Net(c) => c.contains(ip),
        }
    }
}

impl FromStr for ClientMatch {
    type Err = CidrError;
    fn from_str(s: &str) -> Result<ClientMatch, CidrError> {
        if s == "*" {
            Ok(ClientMatch::Any)
        } else {
            s.parse().map(ClientMatch::Net)
        }
    }
}

impl fmt::Display for ClientMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientMatch::Any => f.write_str("*"),
            ClientMatch::Net(c) => c.fmt(f),
        }
    }
}

/// Parses a whole client list.
pub fn parse_client_list<S: AsRef<str>>(list: &[S]) -> Result<Vec<ClientMatch>, CidrError> {
    list.iter().map(|s| s.as_ref().parse()).collect()
}

/// Whether any entry of `list` matches `ip`.
pub fn client_allowed(list: &[ClientMatch], ip: IpAddr) -> bool {
    list.iter().any(|m| m.contains(ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_v4_forms() {
        assert_eq!(cidr("10.0.0.0/8").to_string(), "10.0.0.0/8");
        assert_eq!(cidr("10.1.2.3/8").to_string(), "10.0.0.0/8");
        assert_eq!(cidr("192.168.1.7").to_string(), "192.168.1.7/32");
        assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(cidr("255.255.255.255/32").prefix_len(), 32);
        assert_eq!(cidr("1.2.3.4/0").addr(), ip("0.0.0.0"));
    }

    #[test]
    fn parse_v6_forms() {
        assert_eq!(cidr("::1/128").to_string(), "::1/128");
        assert_eq!(cidr("::1").to_string(), "::1/128");
        assert_eq!(cidr("fe80::1234/10").to_string(), "fe80::/10");
        assert_eq!(cidr("::/0").to_string(), "::/0");
        assert_eq!(cidr("2001:db8::/32").prefix_len(), 32);
        assert_eq!(
            cidr("::ffff:10.0.0.0/104").to_string(),
            "::ffff:10.0.0.0/104"
        );
    }

    #[test]
    fn parse_rejects() {
        for bad in [
            "",
            "/",
            "10.0.0.0/",
            "10.0.0.0/33",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/08",
            "10.0.0/8",
            "10.0.0.0.0/8",
            "256.0.0.0/8",
            "010.0.0.0/8",
            "10.0.0.0/8/8",
            "a.b.c.d",
            "::1/129",
            "::1/",
            "fe80::1%eth0/64",
            ":::/8",
            "10.0.0.0 /8",
            " 10.0.0.0/8",
            "*",
            "10.0.0.0/1000",
            "1.2.3.4/8x",
            "..../8",
            "2001:db8::/0032",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} parsed");
        }
        let long = "1".repeat(200);
        let e = long.parse::<Cidr>().unwrap_err();
        assert!(e.to_string().len() < 120);
    }

    #[test]
    fn contains_v4() {
        let c = cidr("10.1.0.0/16");
        assert!(c.contains(ip("10.1.0.0")));
        assert!(c.contains(ip("10.1.255.255")));
        assert!(!c.contains(ip("10.2.0.0")));
        assert!(!c.contains(ip("9.255.255.255")));
        assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(cidr("1.2.3.4").contains(ip("1.2.3.4")));
        assert!(!cidr("1.2.3.4").contains(ip("1.2.3.5")));
        assert!(!c.contains(ip("::1")));
        // IPv4-mapped peer on a dual-stack socket.
        assert!(c.contains(ip("::ffff:10.1.2.3")));
        assert!(!c.contains(ip("::ffff:10.3.2.3")));
    }

    #[test]
    fn contains_v6() {
        let c = cidr("2001:db8::/32");
        assert!(c.contains(ip("2001:db8::1")));
        assert!(c.contains(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")));
        assert!(!c.contains(ip("2001:db9::")));
        assert!(!c.contains(ip("10.0.0.1")));
        assert!(cidr("::1/128").contains(ip("::1")));
        assert!(!cidr("::1/128").contains(ip("::2")));
        assert!(cidr("::/0").contains(ip("fe80::1")));
        assert!(cidr("::ffff:0:0/96").contains(ip("10.0.0.1")));
        assert!(cidr("fe80::/10").contains(ip("febf::1")));
        assert!(!cidr("fe80::/10").contains(ip("fec0::1")));
    }

    #[test]
    fn client_match() {
        let list = parse_client_list(&["10.0.0.0/8", "::1"]).unwrap();
        assert!(client_allowed(&list, ip("10.9.9.9")));
        assert!(client_allowed(&list, ip("::1")));
        assert!(!client_allowed(&list, ip("127.0.0.1")));
        let any = parse_client_list(&["*"]).unwrap();
        assert_eq!(any, vec![ClientMatch::Any]);
        assert!(client_allowed(&any, ip("127.0.0.1")));
        assert!(!client_allowed(&[], ip("127.0.0.1")));
        assert!(parse_client_list(&["10.0.0.0/8", "bogus"]).is_err());
        assert_eq!(ClientMatch::Any.to_string(), "*");
    }

    #[test]
    fn no_panic_on_junk() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let alphabet = b"0123456789abcdef:./*%x ";
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 24) as usize;
            let s: String = (0..len)
                .map(|i| alphabet[((x >> (i % 60)) as usize + i * 7) % alphabet.len()] as char)
                .collect();
            let _ = s.parse::<ClientMatch>();
        }
    }
}
