//! The lsarpc interface (MS-LSAT and MS-LSAD,
//! 12345778-1234-abcd-ef00-0123456789ab v0.0 over `\PIPE\lsarpc`, MS-LSAT
//! 2.1 / 1.9): what a client calls to turn the SIDs of a security
//! descriptor into names and back (Explorer's Security tab, `smbcacls`
//! without `--numeric`, `rpcclient lookupsids`).
//!
//! Served: LsarClose (opnum 0, MS-LSAD 3.1.4.9.4), LsarOpenPolicy (6,
//! MS-LSAD 3.1.4.4.2), LsarQueryInformationPolicy (7, MS-LSAD 3.1.4.4.4),
//! LsarLookupNames (14, MS-LSAT 3.1.4.8), LsarLookupSids (15, MS-LSAT
//! 3.1.4.11), LsarOpenPolicy2 (44, MS-LSAD 3.1.4.4.1), LsarGetUserName (45,
//! MS-LSAT 3.1.4.4), LsarQueryInformationPolicy2 (46, MS-LSAD 3.1.4.4.3),
//! LsarLookupSids2 (57, MS-LSAT 3.1.4.10), LsarLookupNames2 (58, MS-LSAT
//! 3.1.4.7), LsarLookupNames3 (68, MS-LSAT 3.1.4.6). LsarLookupSids3 (76)
//! and LsarLookupNames4 (77) are for RPC over TCP/IP with a Netlogon
//! secure channel only (MS-LSAT 2.1): on a pipe they fault with
//! nca_s_fault_access_denied, as Windows and Samba answer. Every other
//! opnum faults with nca_op_rng_error.
//!
//! Policy handles are stateless: every handle duet hands out is the same
//! 20 bytes ([`POLICY_HANDLE`]), which grants the lookups to whoever
//! holds an SMB session on IPC$ (the SMB layer authenticated it); a
//! handle that is not that one is STATUS_INVALID_HANDLE. LsarClose
//! answers a zeroed handle.
//!
//! Names (what duet shows for the SIDs it hands out, `duet_fs::acl::SidMap`):
//! - duet's users, `DOMAIN\name` (SidTypeUser) under the machine SID
//!   (RID 1000 + 2 * uid), where DOMAIN is the server's NetBIOS name
//!   (the account domain of a standalone server);
//! - their primary groups (RID 1001 + 2 * gid, SidTypeGroup), named after
//!   the user whose uid equals the gid and whose primary group it is (a
//!   user private group: `DOMAIN\alice`), else `DOMAIN\unix_group.GID`.
//!   A name lookup of a user's name finds the user; the group is always
//!   found as `unix_group.GID` too;
//! - `S-1-22-1-uid` as `Unix User\name` (a user's name, else the uid in
//!   decimal) and `S-1-22-2-gid` as `Unix Group\gid` (SidTypeUser and
//!   SidTypeGroup, the domains S-1-22-1 and S-1-22-2, as Samba shows them);
//! - the well-known SIDs duet's ACLs use, by their standard names
//!   (MS-DTYP 2.4.2.4): `Everyone`, `CREATOR OWNER`, `CREATOR GROUP`,
//!   `OWNER RIGHTS` (domain ""), `NT AUTHORITY\ANONYMOUS LOGON`,
//!   `NT AUTHORITY\Authenticated Users`, `NT AUTHORITY\SYSTEM`,
//!   `NT AUTHORITY\NETWORK` (SidTypeWellKnownGroup), and
//!   `BUILTIN\Administrators`, `BUILTIN\Users`, `BUILTIN\Guests`
//!   (SidTypeAlias);
//! - a domain SID (the machine SID, S-1-5-32, S-1-22-1, S-1-22-2) as its
//!   domain (SidTypeDomain).
//!
//! Anything else is not mapped, as Windows answers (MS-LSAT 3.1.4.11):
//! SidTypeUnknown, DomainIndex -1, the SID's string form as its name (a
//! name: RelativeId 0, no SID), and the call's status is
//! STATUS_SOME_NOT_MAPPED, or STATUS_NONE_MAPPED when nothing was.
//!
//! Wire types (MS-LSAT 2.2 / MS-LSAD 2.2, with MS-DTYP 2.3.10
//! RPC_UNICODE_STRING and 2.4.2.3 RPC_SID as NDR lays them out):
//! - `LSAPR_HANDLE` a 20-byte context handle (C706 / MS-RPCE 2.2.4.7);
//! - `RPC_UNICODE_STRING { u16 Length; u16 MaximumLength;
//!   [size_is(MaximumLength/2), length_is(Length/2)] WCHAR* Buffer; }`,
//!   the buffer a conformant varying array without a NUL;
//! - `RPC_SID { u8 Revision; u8 SubAuthorityCount; u8 Authority[6];
//!   [size_is(SubAuthorityCount)] u32 SubAuthority[]; }`, a conformant
//!   struct whose count leads it;
//! - `LSAPR_SID_ENUM_BUFFER { u32 Entries; [size_is(Entries)]
//!   LSAPR_SID_INFORMATION* SidInfo; }` (MS-LSAT 2.2.18, Entries at most
//!   20480) of `{ PRPC_SID Sid; }` (2.2.17);
//! - `LSAPR_REFERENCED_DOMAIN_LIST { u32 Entries; [size_is(Entries)]
//!   LSAPR_TRUST_INFORMATION* Domains; u32 MaxEntries; }` (2.2.12) of
//!   `{ RPC_UNICODE_STRING Name; PRPC_SID Sid; }` (2.2.11);
//! - `LSAPR_TRANSLATED_NAMES(_EX) { u32 Entries; [size_is(Entries)]
//!   LSAPR_TRANSLATED_NAME(_EX)* Names; }` (2.2.20 / 2.2.22) of `{
//!   SID_NAME_USE Use; RPC_UNICODE_STRING Name; i32 DomainIndex; [_EX:
//!   u32 Flags] }` (2.2.19 / 2.2.21);
//! - `LSAPR_TRANSLATED_SIDS(_EX, _EX2) { u32 Entries; [size_is(Entries)]
//!   ...* Sids; }` (2.2.15 / 2.2.24 / 2.2.26) of `LSA_TRANSLATED_SID {
//!   Use; u32 RelativeId; i32 DomainIndex; }` (2.2.14),
//!   `LSAPR_TRANSLATED_SID_EX { Use; RelativeId; DomainIndex; u32 Flags }`
//!   (2.2.23), `LSAPR_TRANSLATED_SID_EX2 { Use; PRPC_SID Sid;
//!   DomainIndex; Flags }` (2.2.25);
//! - SID_NAME_USE (2.2.13), LSAP_LOOKUP_LEVEL (2.2.16) and
//!   POLICY_INFORMATION_CLASS (MS-LSAD 2.2.4.1) are enums: 16 bits on the
//!   wire (C706 14.2.8);
//! - `LSAPR_POLICY_INFORMATION` (MS-LSAD 2.2.4.2) a union switched by its
//!   class: PolicyPrimaryDomainInformation (3, `LSAPR_POLICY_PRIMARY_DOM_INFO
//!   { RPC_UNICODE_STRING Name; PRPC_SID Sid; }`, 2.2.4.8),
//!   PolicyAccountDomainInformation (5, `LSAPR_POLICY_ACCOUNT_DOM_INFO {
//!   DomainName; DomainSid; }`, 2.2.4.9), PolicyDnsDomainInformation (12,
//!   `LSAPR_POLICY_DNS_DOMAIN_INFO { Name; DnsDomainName; DnsForestName;
//!   GUID DomainGuid; PRPC_SID Sid; }`, 2.2.4.14). A standalone server is
//!   in no domain: its primary domain is its workgroup with no SID.
//! - `LSAPR_OBJECT_ATTRIBUTES { u32 Length; u8* RootDirectory; PSTRING
//!   ObjectName; u32 Attributes; PSECURITY_DESCRIPTOR SecurityDescriptor;
//!   PSECURITY_QUALITY_OF_SERVICE SecurityQualityOfService; }` (MS-LSAD
//!   2.2.9), which the server ignores; clients send NULL pointers but
//!   for the QoS.

use duet_fs::acl::{Sid, SidMap, ANONYMOUS_UID};

use super::endpoint::Service;
use super::fault::status as fault;
use super::ndr::{Reader, Writer};
use super::{DecodeError, SyntaxId, LSARPC};

/// Operation numbers (MS-LSAT 3.1.4, MS-LSAD 3.1.4).
pub mod opnum {
    pub const CLOSE: u16 = 0;
    pub const OPEN_POLICY: u16 = 6;
    pub const QUERY_INFORMATION_POLICY: u16 = 7;
    pub const LOOKUP_NAMES: u16 = 14;
    pub const LOOKUP_SIDS: u16 = 15;
    pub const OPEN_POLICY2: u16 = 44;
    pub const GET_USER_NAME: u16 = 45;
    pub const QUERY_INFORMATION_POLICY2: u16 = 46;
    pub const LOOKUP_SIDS2: u16 = 57;
    pub const LOOKUP_NAMES2: u16 = 58;
    pub const LOOKUP_NAMES3: u16 = 68;
    pub const LOOKUP_SIDS3: u16 = 76;
    pub const LOOKUP_NAMES4: u16 = 77;
}

/// The NTSTATUS results (MS-ERREF 2.3.1).
pub mod ntstatus {
    pub const SUCCESS: u32 = 0;
    pub const SOME_NOT_MAPPED: u32 = 0x0000_0107;
    pub const INVALID_INFO_CLASS: u32 = 0xC000_0003;
    pub const INVALID_HANDLE: u32 = 0xC000_0008;
    pub const INVALID_PARAMETER: u32 = 0xC000_000D;
    pub const NONE_MAPPED: u32 = 0xC000_0073;
}

/// SID_NAME_USE (MS-LSAT 2.2.13).
pub mod sid_type {
    pub const USER: u16 = 1;
    pub const GROUP: u16 = 2;
    pub const DOMAIN: u16 = 3;
    pub const ALIAS: u16 = 4;
    pub const WELL_KNOWN_GROUP: u16 = 5;
    pub const UNKNOWN: u16 = 8;
}

/// POLICY_INFORMATION_CLASS values served (MS-LSAD 2.2.4.1).
pub mod info_class {
    pub const PRIMARY_DOMAIN: u16 = 3;
    pub const ACCOUNT_DOMAIN: u16 = 5;
    pub const DNS_DOMAIN: u16 = 12;
}

/// The one policy handle duet hands out (see the module comment): a
/// context handle's attributes (0) and a UUID-sized tag.
pub const POLICY_HANDLE: [u8; 20] = *b"\0\0\0\0duet-lsa-policy1";

/// The most SIDs one LookupSids takes (MS-LSAT 2.2.18: range(0, 20480)).
pub const MAX_SIDS: u32 = 20480;
/// The most names one LookupNames takes (MS-LSAT 3.1.4.8: range(0, 1000)).
pub const MAX_NAMES: u32 = 1000;
/// The most UTF-16 units of a name duet reads (a name longer than any
/// account name can be is simply not mapped).
const MAX_NAME_UNITS: usize = 1024;

/// One of duet's users, as the LSA names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// A domain a translated name refers to (LSAPR_TRUST_INFORMATION, MS-LSAT
/// 2.2.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    pub name: String,
    pub sid: Sid,
}

/// What a SID or a name translates to: its kind (SID_NAME_USE), its
/// name within its domain, the SID, and the domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translation {
    pub kind: u16,
    pub name: String,
    pub sid: Sid,
    pub domain: Domain,
}

/// The well-known SIDs duet names (MS-DTYP 2.4.2.4): authority, sub
/// authorities, domain name, name, SID_NAME_USE.
const WELL_KNOWN: &[(u64, &[u32], &str, &str, u16)] = &[
    (1, &[0], "", "Everyone", sid_type::WELL_KNOWN_GROUP),
    (3, &[0], "", "CREATOR OWNER", sid_type::WELL_KNOWN_GROUP),
    (3, &[1], "", "CREATOR GROUP", sid_type::WELL_KNOWN_GROUP),
    (3, &[4], "", "OWNER RIGHTS", sid_type::WELL_KNOWN_GROUP),
    (5, &[2], "NT AUTHORITY", "NETWORK", sid_type::WELL_KNOWN_GROUP),
    (5, &[7], "NT AUTHORITY", "ANONYMOUS LOGON", sid_type::WELL_KNOWN_GROUP),
    (5, &[11], "NT AUTHORITY", "Authenticated Users", sid_type::WELL_KNOWN_GROUP),
    (5, &[18], "NT AUTHORITY", "SYSTEM", sid_type::WELL_KNOWN_GROUP),
    (5, &[32, 544], "BUILTIN", "Administrators", sid_type::ALIAS),
    (5, &[32, 545], "BUILTIN", "Users", sid_type::ALIAS),
    (5, &[32, 546], "BUILTIN", "Guests", sid_type::ALIAS),
];

/// The domains that are not the machine's (name, authority, subs).
const BUILTIN: (&str, u64, &[u32]) = ("BUILTIN", 5, &[32]);
const UNIX_USER: (&str, u64, &[u32]) = ("Unix User", 22, &[1]);
const UNIX_GROUP: (&str, u64, &[u32]) = ("Unix Group", 22, &[2]);

fn domain_of(d: (&str, u64, &[u32])) -> Domain {
    Domain { name: d.0.to_string(), sid: Sid::new(d.1, d.2) }
}

/// A SID without its last sub-authority (its domain), and that RID.
fn split_rid(s: &Sid) -> Option<(Sid, u32)> {
    let (&rid, prefix) = s.subs.split_last()?;
    Some((Sid::new(s.authority, prefix), rid))
}

/// The lsarpc manager: duet's accounts and how SMB shows their SIDs.
#[derive(Debug, Clone, Default)]
pub struct Lsarpc {
    /// The account domain's name: the server's NetBIOS name.
    pub domain: String,
    /// The workgroup (the primary domain a standalone server reports).
    pub workgroup: String,
    pub map: SidMap,
    /// duet's users.
    pub accounts: Vec<Account>,
    /// The uid of the SMB session's user (LsarGetUserName).
    pub caller_uid: Option<u32>,
}

impl Lsarpc {
    fn machine_domain(&self) -> Option<Domain> {
        self.map.machine.clone().map(|sid| Domain { name: self.domain.clone(), sid })
    }

    fn account_by_uid(&self, uid: u32) -> Option<&Account> {
        self.accounts.iter().find(|a| a.uid == uid)
    }

    fn account_by_name(&self, name: &str) -> Option<&Account> {
        self.accounts.iter().find(|a| a.name.eq_ignore_ascii_case(name))
    }

    /// A machine-domain group's name (see the module comment).
    fn group_name(&self, gid: u32) -> String {
        match self.accounts.iter().find(|a| a.uid == gid && a.gid == gid) {
            Some(a) => a.name.clone(),
            None => format!("unix_group.{gid}"),
        }
    }

    /// The SID translated to its name, None when it has none here.
    pub fn lookup_sid(&self, s: &Sid) -> Option<Translation> {
        let t = |kind, name: String, domain: Domain| Some(Translation { kind, name, sid: s.clone(), domain });
        for &(auth, subs, dom, name, kind) in WELL_KNOWN {
            if s.authority == auth && s.subs == subs {
                let (dsid, _) = split_rid(s)?;
                return t(kind, name.to_string(), Domain { name: dom.to_string(), sid: dsid });
            }
        }
        for d in [BUILTIN, UNIX_USER, UNIX_GROUP] {
            if s.authority == d.1 && s.subs == d.2 {
                return t(sid_type::DOMAIN, d.0.to_string(), domain_of(d));
            }
        }
        if let Some(m) = self.machine_domain() {
            if *s == m.sid {
                return t(sid_type::DOMAIN, m.name.clone(), m);
            }
            if split_rid(s).is_some_and(|(d, _)| d == m.sid) {
                let unix = self.map.from_wire(s);
                if let Some(uid) = unix.as_unix_user() {
                    let a = self.account_by_uid(uid).filter(|_| self.map.users.contains(&uid))?;
                    return t(sid_type::USER, a.name.clone(), m);
                }
                if let Some(gid) = unix.as_unix_group().filter(|g| self.map.groups.contains(g)) {
                    return t(sid_type::GROUP, self.group_name(gid), m);
                }
                return None;
            }
        }
        if let Some(uid) = s.as_unix_user() {
            let name = self.account_by_uid(uid).map_or_else(|| uid.to_string(), |a| a.name.clone());
            return t(sid_type::USER, name, domain_of(UNIX_USER));
        }
        if let Some(gid) = s.as_unix_group() {
            return t(sid_type::GROUP, gid.to_string(), domain_of(UNIX_GROUP));
        }
        None
    }

    /// The SID a user shows as, with its domain.
    fn user_translation(&self, a: &Account) -> Translation {
        let sid = self.map.to_wire(&Sid::unix_user(a.uid));
        match self.machine_domain().filter(|m| split_rid(&sid).is_some_and(|(d, _)| d == m.sid)) {
            Some(m) => Translation { kind: sid_type::USER, name: a.name.clone(), sid, domain: m },
            None => Translation { kind: sid_type::USER, name: a.name.clone(), sid, domain: domain_of(UNIX_USER) },
        }
    }

    /// A name (`name` or `DOMAIN\name`, case-insensitive) translated to
    /// its SID, None when nothing here has it.
    pub fn lookup_name(&self, full: &str) -> Option<Translation> {
        let (dom, name) = match full.split_once('\\') {
            Some((d, n)) => (Some(d), n),
            None => (None, full),
        };
        let dom_is = |d: &str| dom.is_none_or(|x| x.eq_ignore_ascii_case(d));
        let by_sid = |s: Sid| self.lookup_sid(&s);
        // Well-known names first, as Windows resolves isolated names.
        for &(auth, subs, d, n, _) in WELL_KNOWN {
            if dom_is(d) && name.eq_ignore_ascii_case(n) {
                return by_sid(Sid::new(auth, subs));
            }
        }
        if let Some(m) = self.machine_domain() {
            if dom_is(&m.name) {
                if let Some(a) = self.account_by_name(name) {
                    return Some(self.user_translation(a));
                }
                let gid = name
                    .get(..11)
                    .filter(|p| p.eq_ignore_ascii_case("unix_group."))
                    .and_then(|_| name[11..].parse::<u32>().ok());
                if let Some(g) = gid.filter(|g| self.map.groups.contains(g)) {
                    return by_sid(self.map.to_wire(&Sid::unix_group(g)));
                }
                if dom.is_none() && name.eq_ignore_ascii_case(&m.name) {
                    return by_sid(m.sid);
                }
            }
        } else if let Some(a) = self.account_by_name(name).filter(|_| dom.is_none()) {
            return Some(self.user_translation(a));
        }
        if dom.is_some_and(|d| d.eq_ignore_ascii_case(UNIX_USER.0)) {
            let uid = self.account_by_name(name).map(|a| a.uid).or_else(|| name.parse().ok())?;
            return by_sid(Sid::unix_user(uid));
        }
        if dom.is_some_and(|d| d.eq_ignore_ascii_case(UNIX_GROUP.0)) {
            return by_sid(Sid::unix_group(name.parse().ok()?));
        }
        if dom.is_none() {
            for d in [BUILTIN, UNIX_USER, UNIX_GROUP] {
                if name.eq_ignore_ascii_case(d.0) {
                    return by_sid(Sid::new(d.1, d.2));
                }
            }
        }
        None
    }
}

/// Why a stub could not be taken: the fault status to answer with.
fn ndr(_: DecodeError) -> u32 {
    fault::FAULT_NDR
}

/// An LSAPR_HANDLE (MS-LSAD 2.2.2.1): 20 bytes, 4-aligned.
fn read_handle(r: &mut Reader<'_>) -> Result<[u8; 20], u32> {
    r.align(4).map_err(ndr)?;
    let b = r.bytes(20, "PolicyHandle").map_err(ndr)?;
    let mut h = [0u8; 20];
    h.copy_from_slice(b);
    Ok(h)
}

/// An RPC_SID pointee (MS-DTYP 2.4.2.3): its conformance, then the struct.
pub fn read_sid(r: &mut Reader<'_>) -> Result<Sid, u32> {
    let count = r.u32("RPC_SID conformance").map_err(ndr)?;
    let rev = r.u8("Revision").map_err(ndr)?;
    let n = r.u8("SubAuthorityCount").map_err(ndr)?;
    if u32::from(n) != count || n > 15 || rev != 1 {
        return Err(fault::FAULT_NDR);
    }
    let auth = r.bytes(6, "IdentifierAuthority").map_err(ndr)?;
    let authority = auth.iter().fold(0u64, |a, x| a << 8 | u64::from(*x));
    let mut subs = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        subs.push(r.u32("SubAuthority").map_err(ndr)?);
    }
    Ok(Sid { authority, subs })
}

/// Writes an RPC_SID pointee.
pub fn write_sid(w: &mut Writer, s: &Sid) {
    let n = s.subs.len().min(15);
    w.u32(n as u32);
    w.u8(1);
    w.u8(n as u8);
    w.out.extend_from_slice(&s.authority.to_be_bytes()[2..]);
    for v in &s.subs[..n] {
        w.u32(*v);
    }
}

/// The fixed part of an RPC_UNICODE_STRING (MS-DTYP 2.3.10); the buffer
/// is NULL for an empty string.
pub fn write_ustr_fixed(w: &mut Writer, s: &str) {
    let bytes = (s.encode_utf16().count() * 2).min(0xFFFE) as u16;
    w.align(4);
    w.u16(bytes);
    w.u16(bytes);
    w.unique_ptr(bytes > 0);
}

/// The deferred buffer of an RPC_UNICODE_STRING (none for "").
pub fn write_ustr_deferred(w: &mut Writer, s: &str) {
    let units: Vec<u16> = s.encode_utf16().take(0x7FFF).collect();
    if units.is_empty() {
        return;
    }
    let n = units.len() as u32;
    w.u32(n);
    w.u32(0);
    w.u32(n);
    for u in units {
        w.out.extend_from_slice(&u.to_le_bytes());
    }
}

/// The fixed part of an RPC_UNICODE_STRING: Length, MaximumLength and
/// whether the buffer follows.
fn read_ustr_fixed(r: &mut Reader<'_>) -> Result<(u16, u16, bool), u32> {
    r.align(4).map_err(ndr)?;
    let len = r.u16("Length").map_err(ndr)?;
    let max = r.u16("MaximumLength").map_err(ndr)?;
    let present = r.unique_ptr("Buffer").map_err(ndr)?;
    if len > max || len % 2 != 0 {
        return Err(fault::FAULT_NDR);
    }
    Ok((len, max, present))
}

/// The deferred buffer of an RPC_UNICODE_STRING whose fixed part said
/// `len` bytes.
fn read_ustr_deferred(r: &mut Reader<'_>, len: u16, max: u16) -> Result<String, u32> {
    let m = r.u32("Buffer max").map_err(ndr)?;
    let off = r.u32("Buffer offset").map_err(ndr)?;
    let actual = r.u32("Buffer actual").map_err(ndr)?;
    if off != 0 || actual > m || actual != u32::from(len / 2) || m > u32::from(max / 2).max(actual) {
        return Err(fault::FAULT_NDR);
    }
    let raw = r.bytes(actual as usize * 2, "Buffer").map_err(ndr)?;
    let le = r.little_endian();
    let units: Vec<u16> = raw
        .chunks_exact(2)
        .take(MAX_NAME_UNITS)
        .map(|c| if le { u16::from_le_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], c[1]]) })
        .collect();
    Ok(String::from_utf16_lossy(&units))
}

/// The SID_NAME_USE of a translation, its name and its domain's index in
/// the referenced domain list (-1: none).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    kind: u16,
    name: String,
    sid: Option<Sid>,
    rid: u32,
    index: i32,
}

/// The referenced domain list being built (MS-LSAT 2.2.12).
#[derive(Default)]
struct Refs(Vec<Domain>);

impl Refs {
    fn index(&mut self, d: &Domain) -> i32 {
        if let Some(i) = self.0.iter().position(|x| x == d) {
            return i as i32;
        }
        self.0.push(d.clone());
        self.0.len() as i32 - 1
    }

    /// A PLSAPR_REFERENCED_DOMAIN_LIST (the [out] pointer and pointee).
    fn write(&self, w: &mut Writer) {
        w.unique_ptr(true);
        w.u32(self.0.len() as u32);
        w.unique_ptr(!self.0.is_empty());
        // MaxEntries: ignored by clients (2.2.12); what Windows sends.
        w.u32(32);
        if !self.0.is_empty() {
            w.u32(self.0.len() as u32);
            for d in &self.0 {
                write_ustr_fixed(w, &d.name);
                w.unique_ptr(true);
            }
            for d in &self.0 {
                write_ustr_deferred(w, &d.name);
                write_sid(w, &d.sid);
            }
        }
    }
}

/// The status of a lookup that mapped `mapped` of `n` (MS-LSAT 3.1.4.11).
fn lookup_status(mapped: usize, n: usize) -> u32 {
    if mapped == n {
        ntstatus::SUCCESS
    } else if mapped == 0 {
        ntstatus::NONE_MAPPED
    } else {
        ntstatus::SOME_NOT_MAPPED
    }
}

/// The [in] part of LsarLookupSids / LsarLookupSids2 / LsarLookupSids3
/// that matters: the handle (none for LookupSids3) and the SIDs (None: a
/// NULL entry, which is STATUS_INVALID_PARAMETER).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupSidsRequest {
    pub handle: Option<[u8; 20]>,
    pub sids: Vec<Option<Sid>>,
}

impl LookupSidsRequest {
    /// `version` 1, 2 or 3 (opnums 15, 57, 76).
    pub fn decode(stub: &[u8], le: bool, version: u8) -> Result<LookupSidsRequest, u32> {
        let mut r = Reader::new(stub, le);
        let handle = if version == 3 { None } else { Some(read_handle(&mut r)?) };
        // [in] PLSAPR_SID_ENUM_BUFFER: a reference pointer, the struct.
        let entries = r.u32("Entries").map_err(ndr)?;
        let present = r.unique_ptr("SidInfo").map_err(ndr)?;
        if entries > MAX_SIDS {
            return Err(fault::FAULT_NDR);
        }
        let mut sids = Vec::new();
        if present {
            if r.u32("SidInfo conformance").map_err(ndr)? != entries {
                return Err(fault::FAULT_NDR);
            }
            let mut ptrs = Vec::new();
            for _ in 0..entries {
                ptrs.push(r.unique_ptr("Sid").map_err(ndr)?);
            }
            for p in ptrs {
                sids.push(if p { Some(read_sid(&mut r)?) } else { None });
            }
        } else if entries > 0 {
            return Err(fault::FAULT_NDR);
        }
        // TranslatedNames, LookupLevel, MappedCount (and for 2 and 3
        // LookupOptions, ClientRevision) are ignored on input (MS-LSAT
        // 3.1.4.11); what a client sends for them is not read.
        Ok(LookupSidsRequest { handle, sids })
    }

    /// The [in] stub (client side; tests): `version` as for decode.
    pub fn encode(&self, version: u8) -> Vec<u8> {
        let mut w = Writer::new();
        if version != 3 {
            w.out.extend_from_slice(&self.handle.unwrap_or([0; 20]));
        }
        w.u32(self.sids.len() as u32);
        w.unique_ptr(!self.sids.is_empty());
        if !self.sids.is_empty() {
            w.u32(self.sids.len() as u32);
            for s in &self.sids {
                w.unique_ptr(s.is_some());
            }
            for s in self.sids.iter().flatten() {
                write_sid(&mut w, s);
            }
        }
        // TranslatedNames { 0, NULL }, LookupLevel 1, MappedCount 0.
        w.u32(0);
        w.unique_ptr(false);
        w.u16(1);
        w.u32(0);
        if version != 1 {
            w.u32(0); // LookupOptions
            w.u32(2); // ClientRevision
        }
        w.out
    }
}

/// The [in] part of LsarLookupNames / 2 / 3 that matters: the handle and
/// the names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupNamesRequest {
    pub handle: [u8; 20],
    pub names: Vec<String>,
}

impl LookupNamesRequest {
    pub fn decode(stub: &[u8], le: bool) -> Result<LookupNamesRequest, u32> {
        let mut r = Reader::new(stub, le);
        let handle = read_handle(&mut r)?;
        let count = r.u32("Count").map_err(ndr)?;
        if count > MAX_NAMES {
            return Err(fault::FAULT_NDR);
        }
        // [in, size_is(Count)] PRPC_UNICODE_STRING Names: a conformant
        // array of the fixed parts, then the buffers.
        if r.u32("Names conformance").map_err(ndr)? != count {
            return Err(fault::FAULT_NDR);
        }
        let mut fixed = Vec::new();
        for _ in 0..count {
            fixed.push(read_ustr_fixed(&mut r)?);
        }
        let mut names = Vec::new();
        for (len, max, present) in fixed {
            names.push(if present { read_ustr_deferred(&mut r, len, max)? } else { String::new() });
        }
        // TranslatedSids, LookupLevel, MappedCount (and for 2 and 3
        // LookupOptions, ClientRevision): ignored on input (MS-LSAT
        // 3.1.4.8), not read.
        Ok(LookupNamesRequest { handle, names })
    }

    /// The [in] stub (client side; tests).
    pub fn encode(&self, version: u8) -> Vec<u8> {
        let mut w = Writer::new();
        w.out.extend_from_slice(&self.handle);
        w.u32(self.names.len() as u32);
        w.u32(self.names.len() as u32);
        for n in &self.names {
            write_ustr_fixed(&mut w, n);
        }
        for n in &self.names {
            write_ustr_deferred(&mut w, n);
        }
        w.u32(0);
        w.unique_ptr(false);
        w.u16(1);
        w.u32(0);
        if version != 1 {
            w.u32(0);
            w.u32(2);
        }
        w.out
    }
}

/// The handle of a call, checked: the [in] bytes, or None when it is not
/// duet's.
fn valid(h: &[u8; 20]) -> bool {
    *h == POLICY_HANDLE
}

impl Lsarpc {
    /// The rows of the SIDs (the NULL entries, refused by the caller,
    /// skipped).
    fn sid_rows(&self, sids: &[Option<Sid>], refs: &mut Refs) -> (Vec<Row>, usize) {
        let mut mapped = 0;
        let rows = sids
            .iter()
            .flatten()
            .map(|s| {
                match self.lookup_sid(s) {
                    Some(t) => {
                        mapped += 1;
                        let index = refs.index(&t.domain);
                        Row { kind: t.kind, name: t.name, sid: Some(t.sid), rid: 0, index }
                    }
                    None => Row { kind: sid_type::UNKNOWN, name: s.to_string(), sid: None, rid: 0, index: -1 },
                }
            })
            .collect();
        (rows, mapped)
    }

    /// LsarLookupSids (1), LsarLookupSids2 (2): the [out] stub.
    fn lookup_sids(&self, req: &LookupSidsRequest, version: u8, w: &mut Writer) {
        let bad = req.handle.is_some_and(|h| !valid(&h)) || req.sids.iter().any(Option::is_none);
        if bad {
            w.unique_ptr(false); // ReferencedDomains
            w.u32(0);
            w.unique_ptr(false); // TranslatedNames
            w.u32(0); // MappedCount
            let invalid_handle = req.handle.is_some_and(|h| !valid(&h));
            w.u32(if invalid_handle { ntstatus::INVALID_HANDLE } else { ntstatus::INVALID_PARAMETER });
            return;
        }
        let mut refs = Refs::default();
        let (rows, mapped) = self.sid_rows(&req.sids, &mut refs);
        refs.write(w);
        w.u32(rows.len() as u32);
        w.unique_ptr(!rows.is_empty());
        if !rows.is_empty() {
            w.u32(rows.len() as u32);
            for row in &rows {
                w.u16(row.kind);
                write_ustr_fixed(w, &row.name);
                w.u32(row.index as u32);
                if version != 1 {
                    w.u32(0); // Flags
                }
            }
            for row in &rows {
                write_ustr_deferred(w, &row.name);
            }
        }
        w.u32(mapped as u32);
        w.u32(lookup_status(mapped, rows.len()));
    }

    /// LsarLookupNames (1), LsarLookupNames2 (2), LsarLookupNames3 (3).
    fn lookup_names(&self, req: &LookupNamesRequest, version: u8, w: &mut Writer) {
        if !valid(&req.handle) {
            w.unique_ptr(false);
            w.u32(0);
            w.unique_ptr(false);
            w.u32(0);
            w.u32(ntstatus::INVALID_HANDLE);
            return;
        }
        let mut refs = Refs::default();
        let mut mapped = 0;
        let rows: Vec<Row> = req
            .names
            .iter()
            .map(|n| match self.lookup_name(n) {
                Some(t) => {
                    mapped += 1;
                    let index = refs.index(&t.domain);
                    let rid = if t.kind == sid_type::DOMAIN { 0 } else { split_rid(&t.sid).map_or(0, |(_, r)| r) };
                    Row { kind: t.kind, name: String::new(), sid: Some(t.sid), rid, index }
                }
                None => Row { kind: sid_type::UNKNOWN, name: String::new(), sid: None, rid: 0, index: -1 },
            })
            .collect();
        refs.write(w);
        w.u32(rows.len() as u32);
        w.unique_ptr(!rows.is_empty());
        if !rows.is_empty() {
            w.u32(rows.len() as u32);
            for row in &rows {
                w.u16(row.kind);
                if version == 3 {
                    w.unique_ptr(row.sid.is_some());
                } else {
                    w.u32(row.rid);
                }
                w.u32(row.index as u32);
                if version != 1 {
                    w.u32(0); // Flags
                }
            }
            if version == 3 {
                for s in rows.iter().filter_map(|r| r.sid.as_ref()) {
                    write_sid(w, s);
                }
            }
        }
        w.u32(mapped as u32);
        w.u32(lookup_status(mapped, rows.len()));
    }

    /// LsarQueryInformationPolicy(2): the [out] union and the status.
    fn query_info(&self, stub: &[u8], le: bool, w: &mut Writer) -> Result<(), u32> {
        let mut r = Reader::new(stub, le);
        let h = read_handle(&mut r)?;
        let class = r.u16("InformationClass").map_err(ndr)?;
        if !valid(&h) {
            w.unique_ptr(false);
            w.u32(ntstatus::INVALID_HANDLE);
            return Ok(());
        }
        let account = self.machine_domain();
        match class {
            info_class::PRIMARY_DOMAIN | info_class::ACCOUNT_DOMAIN => {
                let (name, sid) = if class == info_class::PRIMARY_DOMAIN {
                    // A standalone server: in its workgroup, no domain SID.
                    (self.workgroup.clone(), None)
                } else {
                    (self.domain.clone(), account.map(|d| d.sid))
                };
                w.unique_ptr(true);
                w.u16(class);
                write_ustr_fixed(w, &name);
                w.unique_ptr(sid.is_some());
                write_ustr_deferred(w, &name);
                if let Some(s) = &sid {
                    write_sid(w, s);
                }
            }
            info_class::DNS_DOMAIN => {
                w.unique_ptr(true);
                w.u16(class);
                write_ustr_fixed(w, &self.workgroup);
                write_ustr_fixed(w, "");
                write_ustr_fixed(w, "");
                w.out.extend_from_slice(&[0; 16]); // DomainGuid
                w.unique_ptr(false); // Sid
                write_ustr_deferred(w, &self.workgroup);
            }
            _ => {
                w.unique_ptr(false);
                w.u32(ntstatus::INVALID_PARAMETER);
                return Ok(());
            }
        }
        w.u32(ntstatus::SUCCESS);
        Ok(())
    }

    /// LsarOpenPolicy (2 = false) / LsarOpenPolicy2: checks the [in]
    /// stub, answers the handle.
    fn open_policy(&self, stub: &[u8], le: bool, v2: bool, w: &mut Writer) -> Result<(), u32> {
        let mut r = Reader::new(stub, le);
        // SystemName: a unique pointer to one wchar_t (OpenPolicy) or to a
        // string (OpenPolicy2); the server ignores it (MS-LSAD 3.1.4.4.1).
        if r.unique_ptr("SystemName").map_err(ndr)? {
            if v2 {
                r.wstring("SystemName").map_err(ndr)?;
            } else {
                r.u16("SystemName").map_err(ndr)?;
            }
        }
        // ObjectAttributes (a reference pointer): the fixed part.
        r.align(4).map_err(ndr)?;
        let _len = r.u32("Length").map_err(ndr)?;
        let root = r.unique_ptr("RootDirectory").map_err(ndr)?;
        let name = r.unique_ptr("ObjectName").map_err(ndr)?;
        let _attrs = r.u32("Attributes").map_err(ndr)?;
        let sd = r.unique_ptr("SecurityDescriptor").map_err(ndr)?;
        let qos = r.unique_ptr("SecurityQualityOfService").map_err(ndr)?;
        if root || name || sd {
            // MS-LSAD 3.1.4.4.1: RootDirectory MUST be NULL; duet reads no
            // object name or descriptor (no client sends one).
            w.out.extend_from_slice(&[0; 20]);
            w.u32(ntstatus::INVALID_PARAMETER);
            return Ok(());
        }
        if qos {
            // SECURITY_QUALITY_OF_SERVICE { u32 Length; u16
            // ImpersonationLevel; u8 ContextTrackingMode; u8 EffectiveOnly }.
            r.u32("QoS Length").map_err(ndr)?;
            r.u16("ImpersonationLevel").map_err(ndr)?;
            r.u8("ContextTrackingMode").map_err(ndr)?;
            r.u8("EffectiveOnly").map_err(ndr)?;
        }
        let _access = r.u32("DesiredAccess").map_err(ndr)?;
        w.out.extend_from_slice(&POLICY_HANDLE);
        w.u32(ntstatus::SUCCESS);
        Ok(())
    }

    /// LsarGetUserName: the caller's name and domain (MS-LSAT 3.1.4.4).
    fn get_user_name(&self, stub: &[u8], le: bool, w: &mut Writer) -> Result<(), u32> {
        let mut r = Reader::new(stub, le);
        if r.unique_ptr("SystemName").map_err(ndr)? {
            r.wstring("SystemName").map_err(ndr)?;
        }
        // [in, out] PRPC_UNICODE_STRING* UserName: the unique pointer a
        // client sends NULL (its pointee ignored on input).
        let user_in = r.unique_ptr("UserName").map_err(ndr)?;
        if user_in {
            let (len, max, p) = read_ustr_fixed(&mut r)?;
            if p {
                read_ustr_deferred(&mut r, len, max)?;
            }
        }
        // [in, out, unique] PRPC_UNICODE_STRING* DomainName.
        let want_domain = r.unique_ptr("DomainName").map_err(ndr)?;
        if want_domain && r.unique_ptr("*DomainName").map_err(ndr)? {
            let (len, max, p) = read_ustr_fixed(&mut r)?;
            if p {
                read_ustr_deferred(&mut r, len, max)?;
            }
        }
        let sid = match self.caller_uid {
            None | Some(ANONYMOUS_UID) => Sid::anonymous(),
            Some(uid) => self.map.to_wire(&Sid::unix_user(uid)),
        };
        let t = self.lookup_sid(&sid);
        let (name, domain) = match &t {
            Some(t) => (t.name.clone(), t.domain.name.clone()),
            None => (sid.to_string(), String::new()),
        };
        w.unique_ptr(true);
        write_ustr_fixed(w, &name);
        write_ustr_deferred(w, &name);
        w.unique_ptr(want_domain);
        if want_domain {
            w.unique_ptr(true);
            write_ustr_fixed(w, &domain);
            write_ustr_deferred(w, &domain);
        }
        w.u32(ntstatus::SUCCESS);
        Ok(())
    }
}

impl Service for Lsarpc {
    fn interface(&self) -> SyntaxId {
        LSARPC
    }

    fn call(&self, opnum: u16, stub: &[u8], le: bool) -> Result<Vec<u8>, u32> {
        let mut w = Writer::new();
        match opnum {
            opnum::CLOSE => {
                let mut r = Reader::new(stub, le);
                let h = read_handle(&mut r)?;
                if valid(&h) {
                    w.out.extend_from_slice(&[0; 20]);
                    w.u32(ntstatus::SUCCESS);
                } else {
                    w.out.extend_from_slice(&h);
                    w.u32(ntstatus::INVALID_HANDLE);
                }
            }
            opnum::OPEN_POLICY | opnum::OPEN_POLICY2 => {
                self.open_policy(stub, le, opnum == opnum::OPEN_POLICY2, &mut w)?
            }
            opnum::QUERY_INFORMATION_POLICY | opnum::QUERY_INFORMATION_POLICY2 => self.query_info(stub, le, &mut w)?,
            opnum::LOOKUP_SIDS | opnum::LOOKUP_SIDS2 => {
                let v = if opnum == opnum::LOOKUP_SIDS { 1 } else { 2 };
                let req = LookupSidsRequest::decode(stub, le, v)?;
                self.lookup_sids(&req, v, &mut w);
            }
            opnum::LOOKUP_NAMES | opnum::LOOKUP_NAMES2 | opnum::LOOKUP_NAMES3 => {
                let v = match opnum {
                    opnum::LOOKUP_NAMES => 1,
                    opnum::LOOKUP_NAMES2 => 2,
                    _ => 3,
                };
                let req = LookupNamesRequest::decode(stub, le)?;
                self.lookup_names(&req, v, &mut w);
            }
            opnum::GET_USER_NAME => self.get_user_name(stub, le, &mut w)?,
            // RPC over TCP/IP with a Netlogon secure channel only (MS-LSAT
            // 2.1, 3.1.4.9 / 3.1.4.5): refused on a pipe.
            opnum::LOOKUP_SIDS3 | opnum::LOOKUP_NAMES4 => return Err(fault::ACCESS_DENIED),
            _ => return Err(fault::OP_RNG_ERROR),
        }
        Ok(w.out)
    }
}

/// A client-side view of a LookupSids(2) response (tests and tools): the
/// referenced domains, each name's (use, name, domain index), MappedCount
/// and the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupSidsReply {
    pub domains: Vec<Domain>,
    pub names: Vec<(u16, String, i32)>,
    pub mapped: u32,
    pub status: u32,
}

fn read_domains(r: &mut Reader<'_>) -> Result<Vec<Domain>, DecodeError> {
    let mut out = Vec::new();
    if !r.unique_ptr("ReferencedDomains")? {
        return Ok(out);
    }
    let n = r.u32("Entries")?;
    let p = r.unique_ptr("Domains")?;
    let _max = r.u32("MaxEntries")?;
    if p {
        if r.u32("conformance")? != n || n > 1000 {
            return Err(DecodeError("domain count"));
        }
        let mut fixed = Vec::new();
        for _ in 0..n {
            let f = read_ustr_fixed(r).map_err(|_| DecodeError("Name"))?;
            let s = r.unique_ptr("Sid")?;
            fixed.push((f, s));
        }
        for ((len, max, p), s) in fixed {
            let name = if p { read_ustr_deferred(r, len, max).map_err(|_| DecodeError("Name"))? } else { String::new() };
            let sid = if s { read_sid(r).map_err(|_| DecodeError("Sid"))? } else { Sid::new(0, &[]) };
            out.push(Domain { name, sid });
        }
    }
    Ok(out)
}

impl LookupSidsReply {
    pub fn decode(stub: &[u8], version: u8) -> Result<LookupSidsReply, DecodeError> {
        let mut r = Reader::new(stub, true);
        let domains = read_domains(&mut r)?;
        let n = r.u32("Entries")?;
        let mut names = Vec::new();
        if r.unique_ptr("Names")? {
            if r.u32("conformance")? != n || n > MAX_SIDS {
                return Err(DecodeError("name count"));
            }
            let mut fixed = Vec::new();
            for _ in 0..n {
                let kind = r.u16("Use")?;
                let f = read_ustr_fixed(&mut r).map_err(|_| DecodeError("Name"))?;
                let idx = r.u32("DomainIndex")? as i32;
                if version != 1 {
                    r.u32("Flags")?;
                }
                fixed.push((kind, f, idx));
            }
            for (kind, (len, max, p), idx) in fixed {
                let name = if p { read_ustr_deferred(&mut r, len, max).map_err(|_| DecodeError("Name"))? } else { String::new() };
                names.push((kind, name, idx));
            }
        }
        let mapped = r.u32("MappedCount")?;
        let status = r.u32("status")?;
        Ok(LookupSidsReply { domains, names, mapped, status })
    }
}

/// A client-side view of a LookupNames(2, 3) response: the referenced
/// domains, each SID's (use, SID or None, domain index), MappedCount and
/// the status. Versions 1 and 2 give a RID: the SID is the domain's plus
/// the RID (the domain's own for SidTypeDomain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupNamesReply {
    pub domains: Vec<Domain>,
    pub sids: Vec<(u16, Option<Sid>, i32)>,
    pub mapped: u32,
    pub status: u32,
}

impl LookupNamesReply {
    pub fn decode(stub: &[u8], version: u8) -> Result<LookupNamesReply, DecodeError> {
        let mut r = Reader::new(stub, true);
        let domains = read_domains(&mut r)?;
        let n = r.u32("Entries")?;
        let mut sids = Vec::new();
        if r.unique_ptr("Sids")? {
            if r.u32("conformance")? != n || n > MAX_NAMES {
                return Err(DecodeError("sid count"));
            }
            let mut fixed = Vec::new();
            for _ in 0..n {
                let kind = r.u16("Use")?;
                let (rid, p) = if version == 3 { (0, r.unique_ptr("Sid")?) } else { (r.u32("RelativeId")?, false) };
                let idx = r.u32("DomainIndex")? as i32;
                if version != 1 {
                    r.u32("Flags")?;
                }
                fixed.push((kind, rid, p, idx));
            }
            for (kind, rid, p, idx) in fixed {
                let sid = if version == 3 {
                    if p {
                        Some(read_sid(&mut r).map_err(|_| DecodeError("Sid"))?)
                    } else {
                        None
                    }
                } else {
                    usize::try_from(idx).ok().and_then(|i| domains.get(i)).map(|d| {
                        if kind == sid_type::DOMAIN {
                            d.sid.clone()
                        } else {
                            let mut s = d.sid.clone();
                            s.subs.push(rid);
                            s
                        }
                    })
                };
                sids.push((kind, sid, idx));
            }
        }
        let mapped = r.u32("MappedCount")?;
        let status = r.u32("status")?;
        Ok(LookupNamesReply { domains, sids, mapped, status })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcerpc::fault::status as fault;

    fn machine() -> Sid {
        Sid::new(5, &[21, 1, 2, 3])
    }

    fn lsa() -> Lsarpc {
        Lsarpc {
            domain: "DUET".into(),
            workgroup: "WORKGROUP".into(),
            map: SidMap { machine: Some(machine()), users: [1000, 1001].into(), groups: [1000, 100].into() },
            accounts: vec![
                Account { name: "alice".into(), uid: 1000, gid: 1000 },
                Account { name: "Bob".into(), uid: 1001, gid: 100 },
            ],
            caller_uid: Some(1000),
        }
    }

    fn m(rid: u32) -> Sid {
        let mut s = machine();
        s.subs.push(rid);
        s
    }

    fn lookup_sids(l: &Lsarpc, sids: Vec<Option<Sid>>, version: u8) -> LookupSidsReply {
        let op = if version == 1 { opnum::LOOKUP_SIDS } else { opnum::LOOKUP_SIDS2 };
        let req = LookupSidsRequest { handle: Some(POLICY_HANDLE), sids };
        let out = l.call(op, &req.encode(version), true).unwrap();
        LookupSidsReply::decode(&out, version).unwrap()
    }

    fn lookup_names(l: &Lsarpc, names: &[&str], version: u8) -> LookupNamesReply {
        let op = [0, opnum::LOOKUP_NAMES, opnum::LOOKUP_NAMES2, opnum::LOOKUP_NAMES3][usize::from(version)];
        let req = LookupNamesRequest { handle: POLICY_HANDLE, names: names.iter().map(|s| s.to_string()).collect() };
        let out = l.call(op, &req.encode(version), true).unwrap();
        LookupNamesReply::decode(&out, version).unwrap()
    }

    #[test]
    fn sids_translate_to_names() {
        let l = lsa();
        let sids = [
            m(3000),                         // alice
            m(3002),                         // Bob
            m(3001),                         // gid 1000: alice's private group
            m(1201),                         // gid 100
            Sid::unix_user(1001),            // Unix User\Bob
            Sid::unix_user(7),               // Unix User\7
            Sid::unix_group(7),              // Unix Group\7
            Sid::everyone(),
            Sid::creator_owner(),
            Sid::authenticated_users(),
            Sid::anonymous(),
            Sid::new(5, &[32, 544]),
            Sid::owner_rights(),
            machine(),
            m(5000),                         // uid 2000: no user
            Sid::new(5, &[21, 9, 9, 9, 1000]), // another domain
        ];
        for v in [1, 2] {
            let r = lookup_sids(&l, sids.iter().cloned().map(Some).collect(), v);
            assert_eq!(r.status, ntstatus::SOME_NOT_MAPPED);
            assert_eq!(r.mapped, 14);
            let shown: Vec<String> = r
                .names
                .iter()
                .map(|(k, n, i)| {
                    let d = usize::try_from(*i).ok().map_or("-", |i| r.domains[i].name.as_str());
                    format!("{d}\\{n} ({k})")
                })
                .collect();
            assert_eq!(
                shown,
                [
                    "DUET\\alice (1)",
                    "DUET\\Bob (1)",
                    "DUET\\alice (2)",
                    "DUET\\unix_group.100 (2)",
                    "Unix User\\Bob (1)",
                    "Unix User\\7 (1)",
                    "Unix Group\\7 (2)",
                    "\\Everyone (5)",
                    "\\CREATOR OWNER (5)",
                    "NT AUTHORITY\\Authenticated Users (5)",
                    "NT AUTHORITY\\ANONYMOUS LOGON (5)",
                    "BUILTIN\\Administrators (4)",
                    "\\OWNER RIGHTS (5)",
                    "DUET\\DUET (3)",
                    "-\\S-1-5-21-1-2-3-5000 (8)",
                    "-\\S-1-5-21-9-9-9-1000 (8)",
                ]
            );
            let duet = r.domains.iter().find(|d| d.name == "DUET").unwrap();
            assert_eq!(duet.sid, machine());
            let world = r.domains.iter().find(|d| d.name.is_empty() && d.sid.authority == 1).unwrap();
            assert_eq!(world.sid, Sid::new(1, &[]));
        }
        // Nothing mapped; nothing asked.
        let r = lookup_sids(&l, vec![Some(m(5000))], 1);
        assert_eq!((r.status, r.mapped), (ntstatus::NONE_MAPPED, 0));
        let r = lookup_sids(&l, vec![], 2);
        assert_eq!((r.status, r.names.len()), (ntstatus::SUCCESS, 0));
        // A NULL SID: invalid parameter.
        let r = lookup_sids(&l, vec![Some(m(3000)), None], 1);
        assert_eq!(r.status, ntstatus::INVALID_PARAMETER);
    }

    #[test]
    fn names_translate_to_sids() {
        let l = lsa();
        let names = [
            "alice",
            "DUET\\bob",
            "duet\\unix_group.100",
            "unix_group.1000",
            "Everyone",
            "NT AUTHORITY\\Authenticated Users",
            "BUILTIN\\Administrators",
            "Administrators",
            "Unix User\\7",
            "Unix User\\alice",
            "Unix Group\\5",
            "DUET",
            "nobody",
            "OTHER\\alice",
        ];
        for v in [1, 2, 3] {
            let r = lookup_names(&l, &names, v);
            assert_eq!((r.status, r.mapped), (ntstatus::SOME_NOT_MAPPED, 12), "v{v}");
            let got: Vec<(u16, Option<Sid>)> = r.sids.iter().map(|(k, s, _)| (*k, s.clone())).collect();
            assert_eq!(
                got,
                [
                    (sid_type::USER, Some(m(3000))),
                    (sid_type::USER, Some(m(3002))),
                    (sid_type::GROUP, Some(m(1201))),
                    (sid_type::GROUP, Some(m(3001))),
                    (sid_type::WELL_KNOWN_GROUP, Some(Sid::everyone())),
                    (sid_type::WELL_KNOWN_GROUP, Some(Sid::authenticated_users())),
                    (sid_type::ALIAS, Some(Sid::new(5, &[32, 544]))),
                    (sid_type::ALIAS, Some(Sid::new(5, &[32, 544]))),
                    (sid_type::USER, Some(Sid::unix_user(7))),
                    (sid_type::USER, Some(Sid::unix_user(1000))),
                    (sid_type::GROUP, Some(Sid::unix_group(5))),
                    (sid_type::DOMAIN, Some(machine())),
                    (sid_type::UNKNOWN, None),
                    (sid_type::UNKNOWN, None),
                ],
                "v{v}"
            );
            assert_eq!(r.sids[12].2, -1);
        }
        let r = lookup_names(&l, &["nobody"], 2);
        assert_eq!(r.status, ntstatus::NONE_MAPPED);
    }

    #[test]
    fn every_sid_that_names_translates_back() {
        let l = lsa();
        for s in [m(3000), m(3002), m(1201), Sid::unix_user(7), Sid::unix_group(9), Sid::everyone(), Sid::new(5, &[32, 545])] {
            let t = l.lookup_sid(&s).unwrap();
            let full = format!("{}\\{}", t.domain.name, t.name);
            let back = if t.domain.name.is_empty() { l.lookup_name(&t.name) } else { l.lookup_name(&full) };
            assert_eq!(back.map(|b| b.sid), Some(s), "{full}");
        }
    }

    #[test]
    fn no_machine_sid_users_are_unix_users() {
        let mut l = lsa();
        l.map = SidMap::default();
        let t = l.lookup_name("alice").unwrap();
        assert_eq!((t.sid, t.domain.name.as_str()), (Sid::unix_user(1000), "Unix User"));
        assert_eq!(l.lookup_sid(&Sid::unix_user(1000)).unwrap().name, "alice");
    }

    fn open_policy2() -> Vec<u8> {
        // SystemName "\\", ObjectAttributes { 24, NULL, NULL, 0, NULL,
        // QoS }, DesiredAccess MAXIMUM_ALLOWED (what rpcclient sends).
        let mut w = Writer::new();
        w.unique_ptr(true);
        w.wstring("\\");
        w.u32(24);
        w.unique_ptr(false);
        w.unique_ptr(false);
        w.u32(0);
        w.unique_ptr(false);
        w.unique_ptr(true);
        w.u32(12);
        w.u16(2);
        w.u8(1);
        w.u8(0);
        w.u32(0x0200_0000);
        w.out
    }

    #[test]
    fn open_query_close() {
        let l = lsa();
        let out = l.call(opnum::OPEN_POLICY2, &open_policy2(), true).unwrap();
        assert_eq!(&out[..20], &POLICY_HANDLE);
        assert_eq!(&out[20..], &[0; 4]);
        // OpenPolicy: SystemName is one wchar_t.
        let mut w = Writer::new();
        w.unique_ptr(true);
        w.u16(0x5c);
        w.u32(24);
        for _ in 0..2 {
            w.unique_ptr(false);
        }
        w.u32(0);
        w.unique_ptr(false);
        w.unique_ptr(false);
        w.u32(0x0000_0800);
        let out = l.call(opnum::OPEN_POLICY, &w.out, true).unwrap();
        assert_eq!(&out[..20], &POLICY_HANDLE);
        // Query the account domain: DUET, the machine SID.
        let q = |class: u16, handle: [u8; 20]| {
            let mut w = Writer::new();
            w.out.extend_from_slice(&handle);
            w.u16(class);
            w.out
        };
        let out = l.call(opnum::QUERY_INFORMATION_POLICY, &q(info_class::ACCOUNT_DOMAIN, POLICY_HANDLE), true).unwrap();
        let mut r = Reader::new(&out, true);
        assert!(r.unique_ptr("p").unwrap());
        assert_eq!(r.u16("level").unwrap(), 5);
        let (len, max, p) = read_ustr_fixed(&mut r).unwrap();
        assert!(p && r.unique_ptr("sid").unwrap());
        assert_eq!(read_ustr_deferred(&mut r, len, max).unwrap(), "DUET");
        assert_eq!(read_sid(&mut r).unwrap(), machine());
        assert_eq!(r.u32("status").unwrap(), 0);
        assert_eq!(r.remaining(), 0);
        // Primary domain: the workgroup, no SID.
        let out = l.call(opnum::QUERY_INFORMATION_POLICY2, &q(info_class::PRIMARY_DOMAIN, POLICY_HANDLE), true).unwrap();
        let mut r = Reader::new(&out, true);
        r.unique_ptr("p").unwrap();
        assert_eq!(r.u16("level").unwrap(), 3);
        let (len, max, _) = read_ustr_fixed(&mut r).unwrap();
        assert!(!r.unique_ptr("sid").unwrap());
        assert_eq!(read_ustr_deferred(&mut r, len, max).unwrap(), "WORKGROUP");
        assert_eq!(r.u32("status").unwrap(), 0);
        // DNS domain: decodes to the end.
        let out = l.call(opnum::QUERY_INFORMATION_POLICY2, &q(info_class::DNS_DOMAIN, POLICY_HANDLE), true).unwrap();
        assert_eq!(&out[out.len() - 4..], &[0; 4]);
        // Another class; a foreign handle.
        let out = l.call(opnum::QUERY_INFORMATION_POLICY, &q(2, POLICY_HANDLE), true).unwrap();
        assert_eq!(out, [0, 0, 0, 0, 0x0d, 0, 0, 0xc0]);
        let out = l.call(opnum::QUERY_INFORMATION_POLICY, &q(5, [1; 20]), true).unwrap();
        assert_eq!(out, [0, 0, 0, 0, 0x08, 0, 0, 0xc0]);
        // Close: a zeroed handle, then again (stateless handles).
        let out = l.call(opnum::CLOSE, &POLICY_HANDLE, true).unwrap();
        assert_eq!(out, [0; 24]);
        let out = l.call(opnum::CLOSE, &[7; 20], true).unwrap();
        assert_eq!(&out[20..], &ntstatus::INVALID_HANDLE.to_le_bytes());
        // Lookups on a foreign handle.
        let req = LookupSidsRequest { handle: Some([3; 20]), sids: vec![Some(m(3000))] };
        let out = l.call(opnum::LOOKUP_SIDS, &req.encode(1), true).unwrap();
        assert_eq!(LookupSidsReply::decode(&out, 1).unwrap().status, ntstatus::INVALID_HANDLE);
        let req = LookupNamesRequest { handle: [3; 20], names: vec!["alice".into()] };
        let out = l.call(opnum::LOOKUP_NAMES3, &req.encode(3), true).unwrap();
        assert_eq!(LookupNamesReply::decode(&out, 3).unwrap().status, ntstatus::INVALID_HANDLE);
    }

    #[test]
    fn get_user_name_and_secure_channel_only_calls() {
        let l = lsa();
        let mut w = Writer::new();
        w.unique_ptr(true);
        w.wstring("\\\\duet");
        w.unique_ptr(false); // *UserName
        w.unique_ptr(true); // DomainName
        w.unique_ptr(false); // *DomainName
        let out = l.call(opnum::GET_USER_NAME, &w.out, true).unwrap();
        let mut r = Reader::new(&out, true);
        assert!(r.unique_ptr("u").unwrap());
        let (len, max, _) = read_ustr_fixed(&mut r).unwrap();
        assert_eq!(read_ustr_deferred(&mut r, len, max).unwrap(), "alice");
        assert!(r.unique_ptr("d").unwrap() && r.unique_ptr("*d").unwrap());
        let (len, max, _) = read_ustr_fixed(&mut r).unwrap();
        assert_eq!(read_ustr_deferred(&mut r, len, max).unwrap(), "DUET");
        assert_eq!(r.u32("status").unwrap(), 0);
        assert_eq!(r.remaining(), 0);
        // An anonymous caller.
        let mut a = lsa();
        a.caller_uid = Some(ANONYMOUS_UID);
        let out = a.call(opnum::GET_USER_NAME, &w.out, true).unwrap();
        let mut r = Reader::new(&out, true);
        r.unique_ptr("u").unwrap();
        let (len, max, _) = read_ustr_fixed(&mut r).unwrap();
        assert_eq!(read_ustr_deferred(&mut r, len, max).unwrap(), "ANONYMOUS LOGON");
        // LookupSids3 / LookupNames4 need a secure channel over TCP.
        let req = LookupSidsRequest { handle: None, sids: vec![Some(m(3000))] };
        assert_eq!(l.call(opnum::LOOKUP_SIDS3, &req.encode(3), true), Err(fault::ACCESS_DENIED));
        assert_eq!(l.call(opnum::LOOKUP_NAMES4, &[], true), Err(fault::ACCESS_DENIED));
        assert_eq!(l.call(99, &[], true), Err(fault::OP_RNG_ERROR));
    }

    /// Every prefix and many one-byte corruptions of each call's stub get
    /// an answer or a fault, never a panic.
    #[test]
    fn hostile_stubs_never_panic() {
        let l = lsa();
        let sids = LookupSidsRequest { handle: Some(POLICY_HANDLE), sids: vec![Some(m(3000)), Some(Sid::everyone())] };
        let names = LookupNamesRequest { handle: POLICY_HANDLE, names: vec!["alice".into(), "Everyone".into()] };
        let mut q = POLICY_HANDLE.to_vec();
        q.extend_from_slice(&[5, 0]);
        let stubs: Vec<(u16, Vec<u8>)> = vec![
            (opnum::LOOKUP_SIDS, sids.encode(1)),
            (opnum::LOOKUP_SIDS2, sids.encode(2)),
            (opnum::LOOKUP_NAMES, names.encode(1)),
            (opnum::LOOKUP_NAMES3, names.encode(3)),
            (opnum::OPEN_POLICY2, open_policy2()),
            (opnum::QUERY_INFORMATION_POLICY, q),
            (opnum::CLOSE, POLICY_HANDLE.to_vec()),
            (opnum::GET_USER_NAME, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0]),
        ];
        for (op, stub) in &stubs {
            assert!(l.call(*op, stub, true).is_ok(), "opnum {op}");
            for i in 0..stub.len() {
                let _ = l.call(*op, &stub[..i], true);
                let _ = l.call(*op, &stub[..i], false);
                for v in [0u8, 1, 0x0f, 0x7f, 0xff] {
                    let mut s = stub.clone();
                    s[i] = v;
                    let _ = l.call(*op, &s, true);
                    let _ = l.call(*op, &s, false);
                }
            }
        }
        // Huge counts are refused before anything is allocated.
        let mut s = POLICY_HANDLE.to_vec();
        s.extend_from_slice(&u32::MAX.to_le_bytes());
        s.extend_from_slice(&1u32.to_le_bytes());
        assert_eq!(l.call(opnum::LOOKUP_SIDS, &s, true), Err(fault::FAULT_NDR));
        assert_eq!(l.call(opnum::LOOKUP_NAMES, &s, true), Err(fault::FAULT_NDR));
    }
}
