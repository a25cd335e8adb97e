//! One access-control model for SMB and NFS: Windows security descriptors
//! (owner, group, a DACL of allow and deny ACEs with inheritance flags) as
//! both protocols see them. SMB carries them as self-relative
//! SECURITY_DESCRIPTORs (MS-DTYP 2.4.6); NFSv4 ACEs (RFC 8881 6.2.1) map to
//! the same ACEs: their access-mask bits are the Windows file rights bit
//! for bit (RFC 8881 6.2.1.3.1), their flags differ only in where
//! INHERITED sits. Access is evaluated here (MS-DTYP 2.5.3.2), children
//! inherit here (MS-DTYP 2.5.3.4), and the POSIX mode is derived from and
//! into a DACL here (RFC 8881 6.4), so the protocols agree by construction.
//!
//! Sans-I/O: pure functions over bytes and values. Every decoder is strict
//! (lengths, counts, offsets inside the buffer, revisions) and never
//! panics on hostile input; see `fuzz/` target `acl_decode`.

use std::fmt;

/// Most sub-authorities a SID may have (MS-DTYP 2.4.2.2).
pub const SID_SUBS_MAX: usize = 15;
/// Most ACEs one ACL may hold here (a DACL is evaluated on every open).
pub const ACES_MAX: usize = 1024;
/// Largest encoded security descriptor accepted (the ACL size field is 16
/// bits, so two ACLs and two SIDs fit well within this).
pub const SD_MAX: usize = 160 * 1024;

/// The uid unauthenticated callers act as (nobody: SMB guest and anonymous
/// sessions, NFS root squash); see [`Token::unix`].
pub const ANONYMOUS_UID: u32 = 65534;

/// A security identifier (MS-DTYP 2.4.2.2): a 48-bit authority and up to
/// 15 sub-authorities.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sid {
    pub authority: u64,
    pub subs: Vec<u32>,
}

/// Why bytes are not a security descriptor, ACL, ACE or SID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AclError {
    Truncated(&'static str),
    Revision(&'static str, u8),
    TooMany(&'static str),
    Malformed(&'static str),
}

impl fmt::Display for AclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclError::Truncated(w) => write!(f, "{w}: truncated"),
            AclError::Revision(w, r) => write!(f, "{w}: unknown revision {r}"),
            AclError::TooMany(w) => write!(f, "{w}: too many"),
            AclError::Malformed(w) => write!(f, "{w}: malformed"),
        }
    }
}

impl std::error::Error for AclError {}

impl Sid {
    pub fn new(authority: u64, subs: &[u32]) -> Sid {
        Sid { authority, subs: subs.to_vec() }
    }

    /// Everyone, S-1-1-0 (MS-DTYP 2.4.2.4).
    pub fn everyone() -> Sid {
        Sid::new(1, &[0])
    }
    /// CREATOR OWNER, S-1-3-0: in an inheritable ACE, the new object's owner.
    pub fn creator_owner() -> Sid {
        Sid::new(3, &[0])
    }
    /// CREATOR GROUP, S-1-3-1.
    pub fn creator_group() -> Sid {
        Sid::new(3, &[1])
    }
    /// OWNER RIGHTS, S-1-3-4 (MS-DTYP 2.4.2.4): in a DACL, what the
    /// object's owner gets, in place of the owner's implicit READ_CONTROL
    /// and WRITE_DAC.
    pub fn owner_rights() -> Sid {
        Sid::new(3, &[4])
    }
    /// Authenticated Users, S-1-5-11.
    pub fn authenticated_users() -> Sid {
        Sid::new(5, &[11])
    }
    /// ANONYMOUS LOGON, S-1-5-7: the token of an unauthenticated caller.
    pub fn anonymous() -> Sid {
        Sid::new(5, &[7])
    }
    /// A Unix user with no other name, S-1-22-1-uid (the convention Samba
    /// and Windows Services for NFS share).
    pub fn unix_user(uid: u32) -> Sid {
        Sid::new(22, &[1, uid])
    }
    /// A Unix group, S-1-22-2-gid.
    pub fn unix_group(gid: u32) -> Sid {
        Sid::new(22, &[2, gid])
    }
    /// NFSv4's OWNER@ in a DACL on its way to the state machine
    /// (S-1-22-3-0, never stored): `Op::SetAcl` replaces it with the
    /// node's owner when it applies ([`resolve_owner_at`]), so an NFSv4 ACL
    /// names the owner the node has then.
    pub fn owner_at() -> Sid {
        Sid::new(22, &[3, 0])
    }
    /// NFSv4's GROUP@ on its way (S-1-22-3-1), as [`Sid::owner_at`].
    pub fn group_at() -> Sid {
        Sid::new(22, &[3, 1])
    }
    /// The uid of an S-1-22-1-uid SID.
    pub fn as_unix_user(&self) -> Option<u32> {
        match (self.authority, self.subs.as_slice()) {
            (22, [1, uid]) => Some(*uid),
            _ => None,
        }
    }
    /// The gid of an S-1-22-2-gid SID.
    pub fn as_unix_group(&self) -> Option<u32> {
        match (self.authority, self.subs.as_slice()) {
            (22, [2, gid]) => Some(*gid),
            _ => None,
        }
    }

    pub fn encoded_len(&self) -> usize {
        8 + 4 * self.subs.len()
    }

    /// Decodes a SID at the start of `b`; returns it and its length.
    pub fn decode(b: &[u8]) -> Result<(Sid, usize), AclError> {
        let head = b.get(..8).ok_or(AclError::Truncated("SID"))?;
        if head[0] != 1 {
            return Err(AclError::Revision("SID", head[0]));
        }
        let n = usize::from(head[1]);
        if n > SID_SUBS_MAX {
            return Err(AclError::TooMany("SID sub-authorities"));
        }
        let authority = head[2..8].iter().fold(0u64, |a, x| a << 8 | u64::from(*x));
        let body = b.get(8..8 + 4 * n).ok_or(AclError::Truncated("SID"))?;
        let subs = body.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok((Sid { authority, subs }, 8 + 4 * n))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.subs.len() <= SID_SUBS_MAX && self.authority < 1 << 48, "an encodable SID: {self}");
        out.push(1);
        out.push(self.subs.len() as u8);
        out.extend_from_slice(&self.authority.to_be_bytes()[2..]);
        for s in &self.subs {
            out.extend_from_slice(&s.to_le_bytes());
        }
    }

    /// Parses the string form `S-1-5-21-...` (MS-DTYP 2.4.2.1).
    pub fn parse(s: &str) -> Option<Sid> {
        let mut it = s.strip_prefix("S-1-").or_else(|| s.strip_prefix("s-1-"))?.split('-');
        let authority: u64 = it.next()?.parse().ok().filter(|a| *a < 1 << 48)?;
        let subs: Vec<u32> = it.map(|p| p.parse().ok()).collect::<Option<_>>()?;
        (subs.len() <= SID_SUBS_MAX).then_some(Sid { authority, subs })
    }
}

impl fmt::Display for Sid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S-1-{}", self.authority)?;
        for s in &self.subs {
            write!(f, "-{s}")?;
        }
        Ok(())
    }
}

/// File access rights (MS-DTYP 2.4.3, MS-SMB2 2.2.13.1.1); the same bits
/// as NFSv4's ACE4_* masks (RFC 8881 6.2.1.3.1).
pub mod rights {
    pub const READ_DATA: u32 = 0x0000_0001;
    pub const WRITE_DATA: u32 = 0x0000_0002;
    pub const APPEND_DATA: u32 = 0x0000_0004;
    pub const READ_EA: u32 = 0x0000_0008;
    pub const WRITE_EA: u32 = 0x0000_0010;
    pub const EXECUTE: u32 = 0x0000_0020;
    pub const DELETE_CHILD: u32 = 0x0000_0040;
    pub const READ_ATTRIBUTES: u32 = 0x0000_0080;
    pub const WRITE_ATTRIBUTES: u32 = 0x0000_0100;
    pub const DELETE: u32 = 0x0001_0000;
    pub const READ_CONTROL: u32 = 0x0002_0000;
    pub const WRITE_DAC: u32 = 0x0004_0000;
    pub const WRITE_OWNER: u32 = 0x0008_0000;
    pub const SYNCHRONIZE: u32 = 0x0010_0000;
    pub const ACCESS_SYSTEM_SECURITY: u32 = 0x0100_0000;
    pub const MAXIMUM_ALLOWED: u32 = 0x0200_0000;
    pub const GENERIC_ALL: u32 = 0x1000_0000;
    pub const GENERIC_EXECUTE: u32 = 0x2000_0000;
    pub const GENERIC_WRITE: u32 = 0x4000_0000;
    pub const GENERIC_READ: u32 = 0x8000_0000;

    /// The file rights the generic ones stand for (MS-SMB2 2.2.13.1.1,
    /// FILE_GENERIC_* of winnt.h as MS-FSA uses them).
    pub const FILE_GENERIC_READ: u32 = READ_CONTROL | READ_DATA | READ_ATTRIBUTES | READ_EA | SYNCHRONIZE;
    pub const FILE_GENERIC_WRITE: u32 =
        READ_CONTROL | WRITE_DATA | WRITE_ATTRIBUTES | WRITE_EA | APPEND_DATA | SYNCHRONIZE;
    pub const FILE_GENERIC_EXECUTE: u32 = READ_CONTROL | READ_ATTRIBUTES | EXECUTE | SYNCHRONIZE;
    pub const FILE_ALL_ACCESS: u32 = 0x001F_01FF;

    /// `mask` with its generic bits replaced by the file rights they map
    /// to (MS-DTYP 2.5.3.2 MapGenericBits).
    pub fn map_generic(mask: u32) -> u32 {
        let mut m = mask & !(GENERIC_ALL | GENERIC_EXECUTE | GENERIC_WRITE | GENERIC_READ);
        if mask & GENERIC_READ != 0 {
            m |= FILE_GENERIC_READ;
        }
        if mask & GENERIC_WRITE != 0 {
            m |= FILE_GENERIC_WRITE;
        }
        if mask & GENERIC_EXECUTE != 0 {
            m |= FILE_GENERIC_EXECUTE;
        }
        if mask & GENERIC_ALL != 0 {
            m |= FILE_ALL_ACCESS;
        }
        m
    }
}

/// ACE_HEADER AceFlags (MS-DTYP 2.4.4.1).
pub mod ace_flags {
    pub const OBJECT_INHERIT: u8 = 0x01;
    pub const CONTAINER_INHERIT: u8 = 0x02;
    pub const NO_PROPAGATE_INHERIT: u8 = 0x04;
    pub const INHERIT_ONLY: u8 = 0x08;
    pub const INHERITED: u8 = 0x10;
    pub const SUCCESSFUL_ACCESS: u8 = 0x40;
    pub const FAILED_ACCESS: u8 = 0x80;
    pub const INHERITANCE: u8 = OBJECT_INHERIT | CONTAINER_INHERIT | NO_PROPAGATE_INHERIT | INHERIT_ONLY;
}

/// What an ACE does (MS-DTYP 2.4.4.1 AceType).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AceKind {
    /// ACCESS_ALLOWED_ACE_TYPE (0x00, MS-DTYP 2.4.4.2).
    Allow,
    /// ACCESS_DENIED_ACE_TYPE (0x01, MS-DTYP 2.4.4.4).
    Deny,
    /// SYSTEM_AUDIT_ACE_TYPE (0x02, MS-DTYP 2.4.4.10): kept, never
    /// evaluated (duet does not audit).
    Audit,
}

/// One ACE with a mask and a SID (the three types above share the layout
/// header, Mask, Sid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ace {
    pub kind: AceKind,
    pub flags: u8,
    pub mask: u32,
    pub sid: Sid,
}

impl Ace {
    pub fn allow(sid: Sid, mask: u32, flags: u8) -> Ace {
        Ace { kind: AceKind::Allow, flags, mask, sid }
    }
    pub fn deny(sid: Sid, mask: u32, flags: u8) -> Ace {
        Ace { kind: AceKind::Deny, flags, mask, sid }
    }

    fn type_byte(&self) -> u8 {
        match self.kind {
            AceKind::Allow => 0,
            AceKind::Deny => 1,
            AceKind::Audit => 2,
        }
    }

    pub fn encoded_len(&self) -> usize {
        8 + self.sid.encoded_len()
    }

    /// Decodes one ACE at the start of `b`; returns it and its AceSize.
    /// Object, callback and conditional ACE types are refused (files
    /// carry none in practice, and an ACE duet cannot evaluate must not
    /// silently grant or fail to deny).
    pub fn decode(b: &[u8]) -> Result<(Ace, usize), AclError> {
        let head = b.get(..8).ok_or(AclError::Truncated("ACE"))?;
        let size = usize::from(u16::from_le_bytes([head[2], head[3]]));
        let kind = match head[0] {
            0 => AceKind::Allow,
            1 => AceKind::Deny,
            2 => AceKind::Audit,
            _ => return Err(AclError::Malformed("ACE type")),
        };
        if size < 16 || size % 4 != 0 {
            return Err(AclError::Malformed("ACE size"));
        }
        let body = b.get(..size).ok_or(AclError::Truncated("ACE"))?;
        let mask = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let (sid, n) = Sid::decode(&body[8..])?;
        if 8 + n > size {
            return Err(AclError::Malformed("ACE size"));
        }
        Ok((Ace { kind, flags: head[1], mask, sid }, size))
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.type_byte());
        out.push(self.flags);
        out.extend_from_slice(&(self.encoded_len() as u16).to_le_bytes());
        out.extend_from_slice(&self.mask.to_le_bytes());
        self.sid.encode(out);
    }

    /// Whether the ACE applies to the object it is on (not only to
    /// children it passes on).
    pub fn effective(&self) -> bool {
        self.flags & ace_flags::INHERIT_ONLY == 0
    }
}

/// An ACL (MS-DTYP 2.4.5): its ACEs in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acl {
    pub aces: Vec<Ace>,
}

impl Acl {
    pub fn encoded_len(&self) -> usize {
        8 + self.aces.iter().map(Ace::encoded_len).sum::<usize>()
    }

    /// Decodes an ACL at the start of `b`: revision 2 or 4, AclSize
    /// covering every ACE, at most [`ACES_MAX`] ACEs.
    pub fn decode(b: &[u8]) -> Result<Acl, AclError> {
        let head = b.get(..8).ok_or(AclError::Truncated("ACL"))?;
        if head[0] != 2 && head[0] != 4 {
            return Err(AclError::Revision("ACL", head[0]));
        }
        let size = usize::from(u16::from_le_bytes([head[2], head[3]]));
        let count = usize::from(u16::from_le_bytes([head[4], head[5]]));
        if count > ACES_MAX {
            return Err(AclError::TooMany("ACEs"));
        }
        if size < 8 {
            return Err(AclError::Malformed("ACL size"));
        }
        let body = b.get(..size).ok_or(AclError::Truncated("ACL"))?;
        let mut at = 8;
        let mut aces = Vec::with_capacity(count);
        for _ in 0..count {
            let (ace, n) = Ace::decode(&body[at..])?;
            aces.push(ace);
            at += n;
        }
        Ok(Acl { aces })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let size = self.encoded_len();
        assert!(size <= u16::MAX as usize, "an encodable ACL ({size} bytes)");
        out.push(2);
        out.push(0);
        out.extend_from_slice(&(size as u16).to_le_bytes());
        out.extend_from_slice(&(self.aces.len() as u16).to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        for a in &self.aces {
            a.encode(out);
        }
    }
}

/// SECURITY_DESCRIPTOR Control bits (MS-DTYP 2.4.6).
pub mod control {
    pub const DACL_PRESENT: u16 = 0x0004;
    pub const SACL_PRESENT: u16 = 0x0010;
    pub const DACL_AUTO_INHERITED: u16 = 0x0400;
    pub const DACL_PROTECTED: u16 = 0x1000;
    pub const SELF_RELATIVE: u16 = 0x8000;
}

/// A security descriptor (MS-DTYP 2.4.6). `dacl: None` with DACL_PRESENT
/// is a NULL DACL (everyone gets everything); without DACL_PRESENT there is
/// no DACL information.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityDescriptor {
    pub control: u16,
    pub owner: Option<Sid>,
    pub group: Option<Sid>,
    pub sacl: Option<Acl>,
    pub dacl: Option<Acl>,
}

impl SecurityDescriptor {
    /// Decodes a self-relative descriptor: revision 1, every offset inside
    /// `b` (0 = absent), at most [`SD_MAX`] bytes.
    pub fn decode(b: &[u8]) -> Result<SecurityDescriptor, AclError> {
        if b.len() > SD_MAX {
            return Err(AclError::TooMany("security descriptor bytes"));
        }
        let head = b.get(..20).ok_or(AclError::Truncated("security descriptor"))?;
        if head[0] != 1 {
            return Err(AclError::Revision("security descriptor", head[0]));
        }
        let control = u16::from_le_bytes([head[2], head[3]]);
        let off = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]) as usize;
        let at = |o: usize, what: &'static str| -> Result<Option<&[u8]>, AclError> {
            match o {
                0 => Ok(None),
                o if o < 20 => Err(AclError::Malformed(what)),
                o => b.get(o..).filter(|r| !r.is_empty()).map(Some).ok_or(AclError::Truncated(what)),
            }
        };
        let owner = at(off(4), "owner offset")?.map(|r| Sid::decode(r).map(|(s, _)| s)).transpose()?;
        let group = at(off(8), "group offset")?.map(|r| Sid::decode(r).map(|(s, _)| s)).transpose()?;
        let sacl = match at(off(12), "SACL offset")? {
            Some(r) if control & control::SACL_PRESENT != 0 => Some(Acl::decode(r)?),
            _ => None,
        };
        let dacl = match at(off(16), "DACL offset")? {
            Some(r) if control & control::DACL_PRESENT != 0 => Some(Acl::decode(r)?),
            _ => None,
        };
        Ok(SecurityDescriptor { control, owner, group, sacl, dacl })
    }

    /// Encodes self-relative: header, owner, group, SACL, DACL.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        let mut offs = [0u32; 4];
        let mut control = self.control | control::SELF_RELATIVE;
        if let Some(s) = &self.owner {
            offs[0] = 20 + body.len() as u32;
            s.encode(&mut body);
        }
        if let Some(s) = &self.group {
            offs[1] = 20 + body.len() as u32;
            s.encode(&mut body);
        }
        if let Some(a) = &self.sacl {
            control |= control::SACL_PRESENT;
            offs[2] = 20 + body.len() as u32;
            a.encode(&mut body);
        }
        if let Some(a) = &self.dacl {
            control |= control::DACL_PRESENT;
            offs[3] = 20 + body.len() as u32;
            a.encode(&mut body);
        }
        let mut out = Vec::with_capacity(20 + body.len());
        out.push(1);
        out.push(0);
        out.extend_from_slice(&control.to_le_bytes());
        for o in offs {
            out.extend_from_slice(&o.to_le_bytes());
        }
        out.extend_from_slice(&body);
        out
    }

    /// Whether the descriptor says anything about the DACL (a NULL DACL
    /// included).
    pub fn has_dacl_info(&self) -> bool {
        self.control & control::DACL_PRESENT != 0 || self.dacl.is_some()
    }
}

/// The security a node keeps (issue 17; the `A` record and `Op::SetAcl`
/// carry it): its DACL and, where SMB named one that is not a Unix SID, an
/// owner and a group SID. `owner: None` means the node's owner is its uid
/// (S-1-22-1-uid), likewise `group` and its gid.
///
/// Two encodings of the bytes, told apart by their first byte (each
/// structure's revision, so no control bit is needed and every command
/// committed before owner SIDs existed still means what it meant):
/// - nothing (a NULL DACL, with DACL_PRESENT) or an ACL (AclRevision 2 or
///   4, MS-DTYP 2.4.5): the DACL alone, as every record and `Op::SetAcl`
///   before owner SIDs (whose control word may carry SELF_RELATIVE, copied
///   from the SMB descriptor: ignored, as it always was);
/// - a SECURITY_DESCRIPTOR (Revision 1, MS-DTYP 2.4.6, self-relative):
///   an owner and/or a group and the DACL when DACL_PRESENT (none without
///   it: the mode decides), its control word equal to the one outside,
///   canonical (the layout [`SecurityDescriptor::encode`] writes), no SACL.
///
/// [`Stored::encode`] writes the first form whenever no owner or group SID
/// is kept, so nodes without one store the bytes they always did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// DACL_PRESENT (a DACL or a NULL DACL is kept), DACL_PROTECTED,
    /// DACL_AUTO_INHERITED.
    pub control: u16,
    pub owner: Option<Sid>,
    pub group: Option<Sid>,
    /// With DACL_PRESENT: `None` is a NULL DACL.
    pub dacl: Option<Acl>,
}

impl Stored {
    /// The control bits a stored descriptor keeps.
    pub const CONTROL: u16 = control::DACL_PRESENT | control::DACL_PROTECTED | control::DACL_AUTO_INHERITED;

    /// A DACL (or, `dacl: None`, a NULL DACL) with no owner or group SID.
    pub fn of_dacl(control: u16, dacl: Option<Acl>) -> Stored {
        Stored { control: control & Self::CONTROL | control::DACL_PRESENT, owner: None, group: None, dacl }
    }

    /// Decodes the control word and bytes of either form (see [`Stored`]);
    /// strict: a DACL must fill the bytes exactly, a descriptor must be
    /// canonical, carry no SACL and name an owner or a group.
    pub fn decode(ctl: u16, b: &[u8]) -> Result<Stored, AclError> {
        match b.first() {
            None => {
                if ctl & control::DACL_PRESENT == 0 {
                    return Err(AclError::Malformed("stored NULL DACL without DACL_PRESENT"));
                }
                Ok(Stored::of_dacl(ctl, None))
            }
            Some(1) => {
                if ctl & !(Self::CONTROL | control::SELF_RELATIVE) != 0 {
                    return Err(AclError::Malformed("stored descriptor control"));
                }
                let sd = SecurityDescriptor::decode(b)?;
                if sd.control != ctl || sd.sacl.is_some() || (sd.owner.is_none() && sd.group.is_none()) || sd.encode() != b {
                    return Err(AclError::Malformed("stored descriptor"));
                }
                Ok(Stored { control: ctl & Self::CONTROL, owner: sd.owner, group: sd.group, dacl: sd.dacl })
            }
            Some(_) => Ok(Stored::of_dacl(ctl, Some(Acl::decode(b)?))),
        }
    }

    /// The control word and bytes [`Stored::decode`] reads back (an
    /// [`Stored::is_empty`] value, which is no record at all, comes out
    /// as a NULL DACL).
    pub fn encode(&self) -> (u16, Vec<u8>) {
        let ctl = self.control & Self::CONTROL;
        if self.owner.is_none() && self.group.is_none() {
            // As records were always written: an ACL's control word
            // without DACL_PRESENT, a NULL DACL's with it.
            let mut b = Vec::new();
            return match &self.dacl {
                Some(a) => {
                    a.encode(&mut b);
                    (ctl & !control::DACL_PRESENT, b)
                }
                None => (ctl | control::DACL_PRESENT, b),
            };
        }
        let dacl = if ctl & control::DACL_PRESENT != 0 { self.dacl.clone() } else { None };
        let sd = SecurityDescriptor { control: ctl, owner: self.owner.clone(), group: self.group.clone(), sacl: None, dacl };
        let b = sd.encode();
        (u16::from_le_bytes([b[2], b[3]]), b)
    }

    /// An `A` record (the control word, u16 LE, then the bytes). Stricter
    /// than [`Stored::decode`] (which reads commands as they were always
    /// read): records were always written re-encoded, so a DACL fills its
    /// bytes exactly.
    pub fn decode_record(v: &[u8]) -> Result<Stored, AclError> {
        let head = v.get(..2).ok_or(AclError::Truncated("stored security"))?;
        let s = Stored::decode(u16::from_le_bytes([head[0], head[1]]), &v[2..])?;
        match (&s.owner, &s.group, &s.dacl) {
            (None, None, Some(a)) if a.encoded_len() != v.len() - 2 => Err(AclError::Malformed("stored DACL length")),
            _ => Ok(s),
        }
    }

    pub fn encode_record(&self) -> Vec<u8> {
        let (ctl, b) = self.encode();
        let mut v = ctl.to_le_bytes().to_vec();
        v.extend_from_slice(&b);
        v
    }

    /// The DACL that decides access: None without one (the mode decides)
    /// and for a NULL DACL (everything granted, as the mode 0777 says).
    pub fn effective_dacl(&self) -> Option<&Acl> {
        self.dacl.as_ref().filter(|_| self.control & control::DACL_PRESENT != 0)
    }

    /// Whether a DACL (a NULL DACL included) is kept.
    pub fn has_dacl(&self) -> bool {
        self.control & control::DACL_PRESENT != 0
    }

    /// The owner SID: the stored one, else the uid's.
    pub fn owner_or(&self, uid: u32) -> Sid {
        self.owner.clone().unwrap_or_else(|| Sid::unix_user(uid))
    }

    /// The group SID: the stored one, else the gid's.
    pub fn group_or(&self, gid: u32) -> Sid {
        self.group.clone().unwrap_or_else(|| Sid::unix_group(gid))
    }

    /// Nothing left to keep (no DACL, no SIDs): the record goes.
    pub fn is_empty(&self) -> bool {
        !self.has_dacl() && self.owner.is_none() && self.group.is_none()
    }
}

/// Who asks: the SIDs an access check matches ACEs against (the user, its
/// groups, Everyone, Authenticated Users...) and the owner SID of the
/// object, if the caller is its owner.
#[derive(Clone, Debug, Default)]
pub struct Token {
    pub sids: Vec<Sid>,
}

impl Token {
    /// The token of a Unix caller (as SMB and NFS both present duet's
    /// users): S-1-22-1-uid, S-1-22-2-gid and of each group, Everyone and
    /// Authenticated Users. The anonymous uid ([`ANONYMOUS_UID`]: SMB
    /// guests and anonymous sessions, NFS callers squashed to nobody) is
    /// no authenticated user: its token has ANONYMOUS LOGON in its place,
    /// so a DACL granting Authenticated Users grants it nothing.
    pub fn unix(uid: u32, gid: u32, groups: &[u32]) -> Token {
        let mut sids = vec![Sid::unix_user(uid), Sid::unix_group(gid)];
        sids.extend(groups.iter().map(|g| Sid::unix_group(*g)));
        sids.push(Sid::everyone());
        sids.push(if uid == ANONYMOUS_UID { Sid::anonymous() } else { Sid::authenticated_users() });
        Token { sids }
    }

    pub fn has(&self, s: &Sid) -> bool {
        self.sids.iter().any(|x| x == s)
    }
}

/// The rights `token` holds on an object under `owner` and `dacl` (MS-DTYP
/// 2.5.3.2 AccessCheck, without privileges and object types): no DACL
/// information or a NULL DACL grants everything; otherwise the effective
/// ACEs are walked in order, a bit is granted by the first allow and
/// refused by the first deny that names one of the token's SIDs and the
/// bit. The owner holds READ_CONTROL and WRITE_DAC, unless the DACL has an
/// effective OWNER RIGHTS ACE (S-1-3-4), which then says what the owner
/// gets (MS-DTYP 2.5.3.2).
pub fn granted(token: &Token, owner: Option<&Sid>, dacl: Option<&Acl>) -> u32 {
    let Some(dacl) = dacl else {
        return rights::FILE_ALL_ACCESS | rights::ACCESS_SYSTEM_SECURITY;
    };
    let mut granted = 0u32;
    let mut denied = 0u32;
    let is_owner = owner.is_some_and(|o| token.has(o));
    let owner_rights = Sid::owner_rights();
    if is_owner && !dacl.aces.iter().any(|a| a.effective() && a.sid == owner_rights) {
        granted |= rights::READ_CONTROL | rights::WRITE_DAC;
    }
    for ace in dacl.aces.iter().filter(|a| a.effective()) {
        if !(token.has(&ace.sid) || is_owner && ace.sid == owner_rights) {
            continue;
        }
        let mask = rights::map_generic(ace.mask);
        match ace.kind {
            AceKind::Allow => granted |= mask & !denied,
            AceKind::Deny => denied |= mask & !granted,
            AceKind::Audit => {}
        }
    }
    granted
}

/// How SMB shows the ids duet knows (issue 17's identity mapping): the
/// users of duet get SIDs under the machine SID (`S-1-5-21-a-b-c`, random
/// per installation, kept with the cluster's secrets), as a Windows
/// server's local accounts do, and so do their primary groups; every other
/// id keeps its Unix SID (`S-1-22-1-uid`, `S-1-22-2-gid`). What duet stores
/// and checks is always the Unix SID: [`SidMap::to_wire`] turns it into
/// what a client sees, [`SidMap::from_wire`] turns what a client sends back
/// into it. RIDs are algorithmic and never collide: a user's is
/// `1000 + 2 * uid`, a group's `1001 + 2 * gid` (the rule Samba's
/// algorithmic mapping uses), so any machine SID RID from 1000 up maps back
/// to one id, known or not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SidMap {
    pub machine: Option<Sid>,
    pub users: std::collections::BTreeSet<u32>,
    pub groups: std::collections::BTreeSet<u32>,
}

impl SidMap {
    const FIRST_RID: u32 = 1000;

    /// A machine SID from 12 random bytes: `S-1-5-21-a-b-c`.
    pub fn machine_sid(random: [u8; 12]) -> Sid {
        let w = |i: usize| u32::from_le_bytes([random[i], random[i + 1], random[i + 2], random[i + 3]]);
        Sid::new(5, &[21, w(0), w(4), w(8)])
    }

    /// Whether `s` has the form of a machine SID (`S-1-5-21-a-b-c`).
    pub fn is_machine_sid(s: &Sid) -> bool {
        s.authority == 5 && s.subs.len() == 4 && s.subs[0] == 21
    }

    fn rid_sid(&self, rid: u64) -> Option<Sid> {
        let m = self.machine.as_ref()?;
        let rid = u32::try_from(rid).ok()?;
        let mut subs = m.subs.clone();
        subs.push(rid);
        Some(Sid { authority: m.authority, subs })
    }

    /// The SID a client sees for the stored `s`.
    pub fn to_wire(&self, s: &Sid) -> Sid {
        let mapped = if let Some(uid) = s.as_unix_user().filter(|u| self.users.contains(u)) {
            self.rid_sid(u64::from(Self::FIRST_RID) + 2 * u64::from(uid))
        } else if let Some(gid) = s.as_unix_group().filter(|g| self.groups.contains(g)) {
            self.rid_sid(u64::from(Self::FIRST_RID) + 1 + 2 * u64::from(gid))
        } else {
            None
        };
        mapped.unwrap_or_else(|| s.clone())
    }

    /// The SID duet stores for `s`, as a client sent it.
    pub fn from_wire(&self, s: &Sid) -> Sid {
        let Some(m) = &self.machine else { return s.clone() };
        match s.subs.split_last() {
            Some((&rid, prefix)) if s.authority == m.authority && prefix == m.subs.as_slice() && rid >= Self::FIRST_RID => {
                let n = rid - Self::FIRST_RID;
                if n % 2 == 0 {
                    Sid::unix_user(n / 2)
                } else {
                    Sid::unix_group(n / 2)
                }
            }
            _ => s.clone(),
        }
    }

    fn map_sd(&self, sd: &mut SecurityDescriptor, f: impl Fn(&Self, &Sid) -> Sid) {
        for sid in sd.owner.iter_mut().chain(sd.group.iter_mut()) {
            *sid = f(self, sid);
        }
        for acl in sd.dacl.iter_mut().chain(sd.sacl.iter_mut()) {
            for ace in &mut acl.aces {
                ace.sid = f(self, &ace.sid);
            }
        }
    }

    /// A descriptor as a client sees it: each SID through [`Self::to_wire`].
    /// A descriptor whose longer SIDs would not fit in an ACL (64 KiB) or
    /// a descriptor ([`SD_MAX`]) is shown with its Unix SIDs, never cut.
    pub fn sd_to_wire(&self, sd: &SecurityDescriptor) -> SecurityDescriptor {
        let mut out = sd.clone();
        self.map_sd(&mut out, Self::to_wire);
        let fits = out.dacl.iter().chain(out.sacl.iter()).all(|a| a.encoded_len() <= usize::from(u16::MAX))
            && 20 + out.owner.as_ref().map_or(0, Sid::encoded_len) + out.group.as_ref().map_or(0, Sid::encoded_len)
                + out.dacl.as_ref().map_or(0, Acl::encoded_len) + out.sacl.as_ref().map_or(0, Acl::encoded_len)
                <= SD_MAX;
        if fits {
            out
        } else {
            sd.clone()
        }
    }

    /// A descriptor a client sent, as duet stores it: each SID through
    /// [`Self::from_wire`] (SIDs only get shorter).
    pub fn sd_from_wire(&self, sd: &mut SecurityDescriptor) {
        self.map_sd(sd, Self::from_wire);
    }
}

/// The rights some effective ACE of `dacl` that applies to `token` names,
/// allowed or denied (generic bits mapped): what the DACL decides for this
/// caller, as opposed to what it leaves to a default.
pub fn named(token: &Token, owner: Option<&Sid>, dacl: &Acl) -> u32 {
    let is_owner = owner.is_some_and(|o| token.has(o));
    let owner_rights = Sid::owner_rights();
    dacl.aces
        .iter()
        .filter(|a| a.effective() && a.kind != AceKind::Audit)
        .filter(|a| token.has(&a.sid) || is_owner && a.sid == owner_rights)
        .fold(0, |m, a| m | rights::map_generic(a.mask))
}

/// Whether `token` may remove a name, by the kept security of the object
/// it names and of its directory (each with its uid, the owner when no
/// owner SID is kept; None, or no DACL or a NULL one: nothing said): DELETE
/// on the object or DELETE_CHILD on the directory allows it, even where
/// the other refuses its bit (RFC 8881 6.2.1.3.2, the rule Windows
/// applies, MS-FSA 2.1.5.1.2.1). `None` when neither DACL names its bit
/// for this caller, allowed or denied: then the directory's add-file and
/// search rights decide (RFC 8881 6.2.1.3.2's fallback, POSIX's write and
/// execute on the directory).
pub fn may_remove(token: &Token, object: Option<(&Stored, u32)>, dir: Option<(&Stored, u32)>) -> Option<bool> {
    let by = |on: Option<(&Stored, u32)>, bit: u32| {
        let (s, uid) = on?;
        let dacl = s.effective_dacl()?;
        let owner = s.owner_or(uid);
        Some((granted(token, Some(&owner), Some(dacl)) & bit != 0, named(token, Some(&owner), dacl) & bit != 0))
    };
    let obj = by(object, rights::DELETE);
    let parent = by(dir, rights::DELETE_CHILD);
    if obj.is_some_and(|(g, _)| g) || parent.is_some_and(|(g, _)| g) {
        return Some(true);
    }
    if obj.is_some_and(|(_, n)| n) || parent.is_some_and(|(_, n)| n) {
        return Some(false);
    }
    None
}

/// Whether `desired` (generic bits mapped, MAXIMUM_ALLOWED meaning "what
/// there is") is granted in full.
pub fn allows(token: &Token, owner: Option<&Sid>, dacl: Option<&Acl>, desired: u32) -> bool {
    let want = rights::map_generic(desired) & !rights::MAXIMUM_ALLOWED;
    granted(token, owner, dacl) & want == want
}

/// The DACL a new object inherits from its parent's DACL (MS-DTYP
/// 2.5.3.4.2 ComputeInheritedACLfromParent): a file takes the
/// OBJECT_INHERIT ACEs, a directory the CONTAINER_INHERIT ones (and the
/// OBJECT_INHERIT-only ones as inherit-only, to pass on to its files),
/// NO_PROPAGATE_INHERIT stops at this generation, CREATOR OWNER and
/// CREATOR GROUP become `owner` and `group` (a directory keeps the
/// creator ACE as inherit-only too). Every inherited ACE is marked
/// INHERITED. `Ok(None)`: nothing is inheritable (the object gets the
/// default, its mode's DACL). An inherited ACL too large to encode (a
/// parent of many creator ACEs doubles them) is refused whole, never cut:
/// dropping a deny would grant.
pub fn inherit(parent: &Acl, is_dir: bool, owner: &Sid, group: &Sid) -> Result<Option<Acl>, AclError> {
    use ace_flags::*;
    let mut out = Vec::new();
    for ace in &parent.aces {
        if ace.kind == AceKind::Audit {
            continue;
        }
        let oi = ace.flags & OBJECT_INHERIT != 0;
        let ci = ace.flags & CONTAINER_INHERIT != 0;
        let np = ace.flags & NO_PROPAGATE_INHERIT != 0;
        let keep = ace.flags & !(INHERITANCE | INHERITED);
        let creator = if ace.sid == Sid::creator_owner() {
            Some(owner)
        } else if ace.sid == Sid::creator_group() {
            Some(group)
        } else {
            None
        };
        if !is_dir {
            if oi {
                let sid = creator.cloned().unwrap_or_else(|| ace.sid.clone());
                out.push(Ace { kind: ace.kind.clone(), flags: keep | INHERITED, mask: ace.mask, sid });
            }
            continue;
        }
        if ci {
            if np {
                let sid = creator.cloned().unwrap_or_else(|| ace.sid.clone());
                out.push(Ace { kind: ace.kind.clone(), flags: keep | INHERITED, mask: ace.mask, sid });
            } else if let Some(c) = creator {
                // Effective for this directory under the creator's name,
                // and passed on as the creator ACE itself.
                out.push(Ace { kind: ace.kind.clone(), flags: keep | INHERITED, mask: ace.mask, sid: c.clone() });
                out.push(Ace {
                    kind: ace.kind.clone(),
                    flags: keep | INHERITED | INHERIT_ONLY | (ace.flags & (OBJECT_INHERIT | CONTAINER_INHERIT)),
                    mask: ace.mask,
                    sid: ace.sid.clone(),
                });
            } else {
                out.push(Ace {
                    kind: ace.kind.clone(),
                    flags: keep | INHERITED | (ace.flags & (OBJECT_INHERIT | CONTAINER_INHERIT)),
                    mask: ace.mask,
                    sid: ace.sid.clone(),
                });
            }
        } else if oi && !np {
            out.push(Ace {
                kind: ace.kind.clone(),
                flags: keep | INHERITED | INHERIT_ONLY | OBJECT_INHERIT,
                mask: ace.mask,
                sid: ace.sid.clone(),
            });
        }
    }
    let acl = Acl { aces: out };
    if acl.encoded_len() > usize::from(u16::MAX) {
        return Err(AclError::TooMany("inherited ACE bytes"));
    }
    Ok((!acl.aces.is_empty()).then_some(acl))
}

/// The rights one POSIX permission triplet stands for: r = read data, EAs
/// and attributes; w = write and append data, EAs, attributes, delete
/// children of a directory; x = execute / traverse. Everyone may read
/// attributes and the descriptor and synchronize (POSIX stat and a mode
/// that any user may read).
pub fn rights_of_bits(bits: u32, is_dir: bool) -> u32 {
    use rights::*;
    let mut m = READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE;
    if bits & 4 != 0 {
        m |= READ_DATA | READ_EA;
    }
    if bits & 2 != 0 {
        m |= WRITE_DATA | APPEND_DATA | WRITE_EA | WRITE_ATTRIBUTES;
        if is_dir {
            m |= DELETE_CHILD;
        }
    }
    if bits & 1 != 0 {
        m |= EXECUTE;
    }
    m
}

/// The permission triplet a set of rights amounts to: r needs READ_DATA,
/// w WRITE_DATA (or APPEND_DATA), x EXECUTE.
pub fn bits_of_rights(mask: u32) -> u32 {
    use rights::*;
    let m = map_generic(mask);
    let mut b = 0;
    if m & READ_DATA != 0 {
        b |= 4;
    }
    if m & (WRITE_DATA | APPEND_DATA) != 0 {
        b |= 2;
    }
    if m & EXECUTE != 0 {
        b |= 1;
    }
    b
}

/// The DACL of a POSIX mode (RFC 8881 6.4.1.1, as servers without a stored
/// ACL answer): allow the owner, the group and Everyone their triplets;
/// the owner also WRITE_DAC, WRITE_OWNER and DELETE. Where the group or
/// Everyone holds a bit the owner lacks, a deny for the owner comes first,
/// so the owner gets exactly its triplet (as POSIX checks the owner class
/// alone).
pub fn dacl_from_mode(mode: u32, is_dir: bool, owner: &Sid, group: &Sid) -> Acl {
    use rights::*;
    let (u, g, o) = (mode >> 6 & 7, mode >> 3 & 7, mode & 7);
    let mut aces = Vec::new();
    let owner_lacks = (g | o) & !u;
    if owner_lacks != 0 {
        aces.push(Ace::deny(owner.clone(), rights_of_bits(owner_lacks, is_dir) & !(READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE), 0));
    }
    let group_lacks = o & !g;
    if group_lacks != 0 && group != owner {
        aces.push(Ace::deny(group.clone(), rights_of_bits(group_lacks, is_dir) & !(READ_ATTRIBUTES | READ_CONTROL | SYNCHRONIZE), 0));
    }
    aces.push(Ace::allow(owner.clone(), rights_of_bits(u, is_dir) | WRITE_DAC | WRITE_OWNER | DELETE | WRITE_ATTRIBUTES, 0));
    aces.push(Ace::allow(group.clone(), rights_of_bits(g, is_dir), 0));
    aces.push(Ace::allow(Sid::everyone(), rights_of_bits(o, is_dir), 0));
    Acl { aces }
}

/// The POSIX mode a DACL amounts to (RFC 8881 6.4.3, the mode attribute of
/// an object with an ACL): for the owner, the group and others, the bits
/// an access check grants to a token of just that principal (the owner:
/// its SID and Everyone; the group: its SID and Everyone; others:
/// Everyone). The special bits (set-uid, set-gid, sticky) are not in a
/// DACL: `keep` carries them over.
pub fn mode_from_dacl(dacl: Option<&Acl>, owner: &Sid, group: &Sid, keep: u32) -> u32 {
    let as_token = |sids: &[&Sid]| Token { sids: sids.iter().map(|s| (*s).clone()).collect() };
    let everyone = Sid::everyone();
    let u = bits_of_rights(granted(&as_token(&[owner, &everyone]), Some(owner), dacl));
    let g = bits_of_rights(granted(&as_token(&[group, &everyone]), None, dacl));
    let o = bits_of_rights(granted(&as_token(&[&everyone]), None, dacl));
    (keep & 0o7000) | u << 6 | g << 3 | o
}

/// Replaces [`Sid::owner_at`] and [`Sid::group_at`] in `dacl` with the
/// object's `owner` and `group` (RFC 8881 6.2.1.5: OWNER@ and GROUP@ are
/// the object's owner and group).
pub fn resolve_owner_at(dacl: &mut Acl, owner: &Sid, group: &Sid) {
    let (o, g) = (Sid::owner_at(), Sid::group_at());
    for a in &mut dacl.aces {
        if a.sid == o {
            a.sid = owner.clone();
        } else if a.sid == g {
            a.sid = group.clone();
        }
    }
}

/// NFSv4 ACE types and flags (RFC 8881 6.2.1.1, 6.2.1.4).
pub mod nfs4 {
    pub const ACE4_ACCESS_ALLOWED_ACE_TYPE: u32 = 0;
    pub const ACE4_ACCESS_DENIED_ACE_TYPE: u32 = 1;
    pub const ACE4_SYSTEM_AUDIT_ACE_TYPE: u32 = 2;
    pub const ACE4_FILE_INHERIT_ACE: u32 = 0x01;
    pub const ACE4_DIRECTORY_INHERIT_ACE: u32 = 0x02;
    pub const ACE4_NO_PROPAGATE_INHERIT_ACE: u32 = 0x04;
    pub const ACE4_INHERIT_ONLY_ACE: u32 = 0x08;
    pub const ACE4_IDENTIFIER_GROUP: u32 = 0x40;
    pub const ACE4_INHERITED_ACE: u32 = 0x80;
    /// The mask bits RFC 8881 defines (6.2.1.3.1), the same positions as
    /// the Windows file rights.
    pub const ACE4_MASK_DEFINED: u32 = 0x001F_07FF;
}

/// Who an NFSv4 ACE names (RFC 8881 6.2.1.5): one of the special
/// principals, or a user or group name as the protocol carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    Owner,
    Group,
    Everyone,
    User(String),
    GroupName(String),
}

/// An NFSv4 ACE (nfsace4, RFC 8881 6.2.1) in decoded form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nfs4Ace {
    pub kind: u32,
    pub flags: u32,
    pub mask: u32,
    pub who: Who,
}

impl Nfs4Ace {
    /// The `who` string as NFSv4 carries it, with IDENTIFIER_GROUP set
    /// for a group name.
    pub fn who_string(&self) -> &str {
        match &self.who {
            Who::Owner => "OWNER@",
            Who::Group => "GROUP@",
            Who::Everyone => "EVERYONE@",
            Who::User(s) | Who::GroupName(s) => s,
        }
    }

    /// Builds from the wire fields: the special names, else a user or
    /// (with ACE4_IDENTIFIER_GROUP) a group.
    pub fn from_wire(kind: u32, flags: u32, mask: u32, who: &str) -> Nfs4Ace {
        let who = match who {
            "OWNER@" => Who::Owner,
            "GROUP@" => Who::Group,
            "EVERYONE@" => Who::Everyone,
            s if flags & nfs4::ACE4_IDENTIFIER_GROUP != 0 => Who::GroupName(s.to_string()),
            s => Who::User(s.to_string()),
        };
        Nfs4Ace { kind, flags, mask, who }
    }
}

/// Maps names to SIDs and back for the NFSv4 mapping (the appliance knows
/// its users; the model does not).
pub trait Names {
    fn user_sid(&self, name: &str) -> Option<Sid>;
    fn group_sid(&self, name: &str) -> Option<Sid>;
    fn user_name(&self, sid: &Sid) -> Option<String>;
    fn group_name(&self, sid: &Sid) -> Option<String>;
}

/// NFSv4 ACEs as a DACL of the object owned by `owner` and `group` (RFC
/// 8881 6.2.1): OWNER@ and GROUP@ become those SIDs, EVERYONE@ S-1-1-0;
/// names resolve through `names` (an unknown name is an error: RFC 8881
/// 6.2.1.5 has the server refuse what it cannot store, NFS4ERR_BADOWNER).
/// Types other than allow and deny, and mask bits RFC 8881 does not
/// define, are refused (`Err` with what is wrong).
pub fn dacl_from_nfs4(aces: &[Nfs4Ace], owner: &Sid, group: &Sid, names: &dyn Names) -> Result<Acl, &'static str> {
    use nfs4::*;
    if aces.len() > ACES_MAX {
        return Err("too many ACEs");
    }
    let mut out = Vec::with_capacity(aces.len());
    for a in aces {
        let kind = match a.kind {
            ACE4_ACCESS_ALLOWED_ACE_TYPE => AceKind::Allow,
            ACE4_ACCESS_DENIED_ACE_TYPE => AceKind::Deny,
            _ => return Err("ACE type"),
        };
        if a.mask & !ACE4_MASK_DEFINED != 0 {
            return Err("ACE mask");
        }
        let sid = match &a.who {
            Who::Owner => owner.clone(),
            Who::Group => group.clone(),
            Who::Everyone => Sid::everyone(),
            Who::User(n) => names.user_sid(n).ok_or("unknown user")?,
            Who::GroupName(n) => names.group_sid(n).ok_or("unknown group")?,
        };
        let mut flags = (a.flags & 0x0f) as u8;
        if a.flags & ACE4_INHERITED_ACE != 0 {
            flags |= ace_flags::INHERITED;
        }
        out.push(Ace { kind, flags, mask: a.mask, sid });
    }
    Ok(Acl { aces: out })
}

/// A DACL as NFSv4 ACEs (RFC 8881 6.2.1): the owner's SID becomes OWNER@,
/// the group's GROUP@, S-1-1-0 EVERYONE@, others a name through `names`
/// (a SID without one: its string form, which clients show as is). Audit
/// ACEs are left out.
pub fn nfs4_from_dacl(dacl: &Acl, owner: &Sid, group: &Sid, names: &dyn Names) -> Vec<Nfs4Ace> {
    use nfs4::*;
    let mut out = Vec::with_capacity(dacl.aces.len());
    for a in &dacl.aces {
        let kind = match a.kind {
            AceKind::Allow => ACE4_ACCESS_ALLOWED_ACE_TYPE,
            AceKind::Deny => ACE4_ACCESS_DENIED_ACE_TYPE,
            AceKind::Audit => continue,
        };
        let mut flags = u32::from(a.flags & 0x0f);
        if a.flags & ace_flags::INHERITED != 0 {
            flags |= ACE4_INHERITED_ACE;
        }
        let who = if &a.sid == owner || a.sid == Sid::owner_rights() {
            Who::Owner
        } else if &a.sid == group {
            Who::Group
        } else if a.sid == Sid::everyone() {
            Who::Everyone
        } else if let Some(n) = names.user_name(&a.sid) {
            Who::User(n)
        } else if let Some(n) = names.group_name(&a.sid) {
            flags |= ACE4_IDENTIFIER_GROUP;
            Who::GroupName(n)
        } else {
            Who::User(a.sid.to_string())
        };
        out.push(Nfs4Ace { kind, flags, mask: rights::map_generic(a.mask) & ACE4_MASK_DEFINED, who });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rights::*;

    fn token(sids: &[Sid]) -> Token {
        Token { sids: sids.to_vec() }
    }

    #[test]
    fn sid_round_trips_and_strings() {
        let s = Sid::parse("S-1-5-21-1004336348-1177238915-682003330-512").unwrap();
        assert_eq!(s.to_string(), "S-1-5-21-1004336348-1177238915-682003330-512");
        let mut b = Vec::new();
        s.encode(&mut b);
        assert_eq!(b.len(), s.encoded_len());
        assert_eq!(Sid::decode(&b).unwrap(), (s, b.len()));
        // MS-DTYP 2.4.2.2's example: Everyone is 01 01 00 00 00 00 00 01 00 00 00 00.
        let mut e = Vec::new();
        Sid::everyone().encode(&mut e);
        assert_eq!(e, [1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(Sid::unix_user(1000).as_unix_user(), Some(1000));
        assert_eq!(Sid::unix_group(7).as_unix_group(), Some(7));
        assert!(Sid::parse("S-1-5-x").is_none());
        assert!(Sid::parse(&format!("S-1-{}", 1u64 << 48)).is_none());
    }

    #[test]
    fn descriptor_round_trips() {
        let sd = SecurityDescriptor {
            control: control::DACL_PRESENT | control::DACL_PROTECTED,
            owner: Some(Sid::unix_user(1000)),
            group: Some(Sid::unix_group(100)),
            sacl: None,
            dacl: Some(Acl {
                aces: vec![
                    Ace::deny(Sid::unix_user(2000), WRITE_DATA, 0),
                    Ace::allow(Sid::everyone(), GENERIC_READ, ace_flags::OBJECT_INHERIT | ace_flags::CONTAINER_INHERIT),
                ],
            }),
        };
        let b = sd.encode();
        let back = SecurityDescriptor::decode(&b).unwrap();
        assert_eq!(back.owner, sd.owner);
        assert_eq!(back.group, sd.group);
        assert_eq!(back.dacl, sd.dacl);
        assert_eq!(back.control & !control::SELF_RELATIVE, sd.control);
        assert_eq!(back.encode(), b);
        // A NULL DACL: present, no ACL.
        let null = SecurityDescriptor { control: control::DACL_PRESENT, ..Default::default() };
        let nb = SecurityDescriptor::decode(&null.encode()).unwrap();
        assert!(nb.has_dacl_info() && nb.dacl.is_none());
    }

    #[test]
    fn hostile_descriptors_are_refused_not_panicked_on() {
        let good = SecurityDescriptor {
            control: control::DACL_PRESENT,
            owner: Some(Sid::unix_user(1)),
            group: None,
            sacl: None,
            dacl: Some(Acl { aces: vec![Ace::allow(Sid::everyone(), READ_DATA, 0)] }),
        }
        .encode();
        // Every truncation and every single-byte change decodes or is
        // refused; none panics.
        for n in 0..good.len() {
            let _ = SecurityDescriptor::decode(&good[..n]);
        }
        for i in 0..good.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut b = good.clone();
                b[i] = v;
                let _ = SecurityDescriptor::decode(&b);
            }
        }
        assert!(SecurityDescriptor::decode(&good[..good.len() - 1]).is_err());
        // Offsets into the header, counts past ACES_MAX, oversized inputs.
        let mut b = good.clone();
        b[4] = 4;
        assert!(SecurityDescriptor::decode(&b).is_err());
        assert!(SecurityDescriptor::decode(&vec![1u8; SD_MAX + 1]).is_err());
        let mut acl = vec![2, 0, 8, 0, 0xff, 0xff, 0, 0];
        acl.extend_from_slice(&[0; 8]);
        assert_eq!(Acl::decode(&acl), Err(AclError::TooMany("ACEs")));
    }

    #[test]
    fn access_check_walks_aces_in_order() {
        let alice = Sid::unix_user(1000);
        let bob = Sid::unix_user(2000);
        let staff = Sid::unix_group(50);
        let dacl = Acl {
            aces: vec![
                Ace::deny(bob.clone(), WRITE_DATA, 0),
                Ace::allow(staff.clone(), GENERIC_READ | GENERIC_WRITE, 0),
                Ace::allow(Sid::everyone(), READ_ATTRIBUTES, 0),
                // Only for children: never evaluated here.
                Ace::allow(Sid::everyone(), FILE_ALL_ACCESS, ace_flags::INHERIT_ONLY | ace_flags::OBJECT_INHERIT),
            ],
        };
        let bob_t = token(&[bob.clone(), staff.clone(), Sid::everyone()]);
        assert!(allows(&bob_t, None, Some(&dacl), READ_DATA));
        assert!(!allows(&bob_t, None, Some(&dacl), WRITE_DATA), "the deny comes first");
        assert!(allows(&bob_t, None, Some(&dacl), APPEND_DATA));
        let carol = token(&[Sid::unix_user(3000), Sid::everyone()]);
        assert!(allows(&carol, None, Some(&dacl), READ_ATTRIBUTES));
        assert!(!allows(&carol, None, Some(&dacl), READ_DATA));
        assert!(!allows(&carol, None, Some(&dacl), DELETE), "inherit-only ACEs do not apply");
        // An allow before a deny wins for its bits.
        let d2 = Acl { aces: vec![Ace::allow(bob.clone(), WRITE_DATA, 0), Ace::deny(bob.clone(), WRITE_DATA | READ_DATA, 0)] };
        assert!(allows(&bob_t, None, Some(&d2), WRITE_DATA));
        assert!(!allows(&bob_t, None, Some(&d2), READ_DATA));
        // The owner can always read and change the DACL.
        let a = token(&[alice.clone()]);
        assert!(allows(&a, Some(&alice), Some(&Acl::default()), READ_CONTROL | WRITE_DAC));
        assert!(!allows(&a, Some(&alice), Some(&Acl::default()), READ_DATA), "an empty DACL grants nothing else");
        // No DACL (or a NULL one) grants everything.
        assert!(allows(&carol, None, None, GENERIC_ALL));
        // MAXIMUM_ALLOWED asks for what there is.
        assert!(allows(&carol, None, Some(&dacl), MAXIMUM_ALLOWED));
    }

    #[test]
    fn children_inherit_by_kind_and_generation() {
        use ace_flags::*;
        let owner = Sid::unix_user(1000);
        let group = Sid::unix_group(100);
        let parent = Acl {
            aces: vec![
                Ace::allow(Sid::everyone(), READ_DATA, OBJECT_INHERIT),
                Ace::allow(Sid::unix_group(7), WRITE_DATA, CONTAINER_INHERIT),
                Ace::deny(Sid::unix_user(9), DELETE, OBJECT_INHERIT | CONTAINER_INHERIT | NO_PROPAGATE_INHERIT),
                Ace::allow(Sid::creator_owner(), FILE_ALL_ACCESS, OBJECT_INHERIT | CONTAINER_INHERIT),
                Ace::allow(Sid::unix_user(5), EXECUTE, 0),
            ],
        };
        let file = inherit(&parent, false, &owner, &group).unwrap().unwrap();
        assert_eq!(
            file.aces,
            vec![
                Ace::allow(Sid::everyone(), READ_DATA, INHERITED),
                Ace::deny(Sid::unix_user(9), DELETE, INHERITED),
                Ace::allow(owner.clone(), FILE_ALL_ACCESS, INHERITED),
            ]
        );
        let dir = inherit(&parent, true, &owner, &group).unwrap().unwrap();
        assert_eq!(
            dir.aces,
            vec![
                Ace::allow(Sid::everyone(), READ_DATA, INHERITED | INHERIT_ONLY | OBJECT_INHERIT),
                Ace::allow(Sid::unix_group(7), WRITE_DATA, INHERITED | CONTAINER_INHERIT),
                Ace::deny(Sid::unix_user(9), DELETE, INHERITED),
                Ace::allow(owner.clone(), FILE_ALL_ACCESS, INHERITED),
                Ace::allow(Sid::creator_owner(), FILE_ALL_ACCESS, INHERITED | INHERIT_ONLY | OBJECT_INHERIT | CONTAINER_INHERIT),
            ]
        );
        // The grandchild file under the new directory: the chain goes on,
        // the no-propagate ACE stopped.
        let grand = inherit(&dir, false, &Sid::unix_user(1001), &group).unwrap().unwrap();
        assert_eq!(
            grand.aces,
            vec![
                Ace::allow(Sid::everyone(), READ_DATA, INHERITED),
                Ace::allow(Sid::unix_user(1001), FILE_ALL_ACCESS, INHERITED),
            ]
        );
        assert_eq!(inherit(&Acl { aces: vec![Ace::allow(Sid::everyone(), READ_DATA, 0)] }, false, &owner, &group), Ok(None));
        // Too many creator ACEs to double: refused, not cut.
        let long = Sid::new(5, &[21, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
        let mut many: Vec<Ace> = (0..700).map(|_| Ace::allow(Sid::creator_owner(), READ_DATA, CONTAINER_INHERIT)).collect();
        many.push(Ace::deny(long.clone(), WRITE_DATA, CONTAINER_INHERIT));
        assert!(inherit(&Acl { aces: many }, true, &long, &group).is_err());
    }

    #[test]
    fn mode_and_dacl_agree_both_ways() {
        let owner = Sid::unix_user(1000);
        let group = Sid::unix_group(100);
        for mode in 0..0o1000u32 {
            for dir in [false, true] {
                let d = dacl_from_mode(mode, dir, &owner, &group);
                assert_eq!(mode_from_dacl(Some(&d), &owner, &group, 0), mode, "mode {mode:o} dir {dir}");
                // The owner gets exactly its class, as POSIX checks it.
                let t = token(&[owner.clone(), Sid::everyone()]);
                assert_eq!(bits_of_rights(granted(&t, Some(&owner), Some(&d))), mode >> 6 & 7, "mode {mode:o}");
            }
        }
        assert_eq!(mode_from_dacl(None, &owner, &group, 0o4000), 0o4777);
    }

    struct Dir;
    impl Names for Dir {
        fn user_sid(&self, name: &str) -> Option<Sid> {
            (name == "alice@duet").then(|| Sid::unix_user(1000))
        }
        fn group_sid(&self, name: &str) -> Option<Sid> {
            (name == "staff@duet").then(|| Sid::unix_group(50))
        }
        fn user_name(&self, sid: &Sid) -> Option<String> {
            (sid.as_unix_user() == Some(1000)).then(|| "alice@duet".into())
        }
        fn group_name(&self, sid: &Sid) -> Option<String> {
            (sid.as_unix_group() == Some(50)).then(|| "staff@duet".into())
        }
    }

    #[test]
    fn nfs4_aces_map_to_the_same_dacl_and_back() {
        use nfs4::*;
        let owner = Sid::unix_user(2000);
        let group = Sid::unix_group(100);
        let aces = vec![
            Nfs4Ace::from_wire(ACE4_ACCESS_DENIED_ACE_TYPE, 0, WRITE_DATA, "alice@duet"),
            Nfs4Ace::from_wire(ACE4_ACCESS_ALLOWED_ACE_TYPE, ACE4_IDENTIFIER_GROUP, READ_DATA, "staff@duet"),
            Nfs4Ace::from_wire(ACE4_ACCESS_ALLOWED_ACE_TYPE, ACE4_FILE_INHERIT_ACE | ACE4_INHERITED_ACE, FILE_ALL_ACCESS, "OWNER@"),
            Nfs4Ace::from_wire(ACE4_ACCESS_ALLOWED_ACE_TYPE, 0, READ_DATA | EXECUTE, "EVERYONE@"),
        ];
        let dacl = dacl_from_nfs4(&aces, &owner, &group, &Dir).unwrap();
        assert_eq!(dacl.aces[0], Ace::deny(Sid::unix_user(1000), WRITE_DATA, 0));
        assert_eq!(dacl.aces[2], Ace::allow(owner.clone(), FILE_ALL_ACCESS, ace_flags::OBJECT_INHERIT | ace_flags::INHERITED));
        assert_eq!(nfs4_from_dacl(&dacl, &owner, &group, &Dir), aces);
        // An ACE the store cannot keep is refused, not dropped.
        let bad = [Nfs4Ace::from_wire(ACE4_ACCESS_ALLOWED_ACE_TYPE, 0, READ_DATA, "nobody@else")];
        assert!(dacl_from_nfs4(&bad, &owner, &group, &Dir).is_err());
        let audit = [Nfs4Ace::from_wire(ACE4_SYSTEM_AUDIT_ACE_TYPE, 0, READ_DATA, "EVERYONE@")];
        assert!(dacl_from_nfs4(&audit, &owner, &group, &Dir).is_err());
        // A SID with no name goes out in its string form.
        let d = Acl { aces: vec![Ace::allow(Sid::new(5, &[21, 1, 2, 3, 500]), READ_DATA, 0)] };
        assert_eq!(nfs4_from_dacl(&d, &owner, &group, &Dir)[0].who, Who::User("S-1-5-21-1-2-3-500".into()));
    }

    #[test]
    fn an_owner_rights_ace_replaces_the_owners_implicit_rights() {
        let alice = Sid::unix_user(1000);
        let t = token(&[alice.clone(), Sid::everyone()]);
        let plain = Acl { aces: vec![Ace::allow(Sid::everyone(), READ_DATA, 0)] };
        assert_eq!(granted(&t, Some(&alice), Some(&plain)), READ_DATA | READ_CONTROL | WRITE_DAC);
        // OWNER RIGHTS granting read only: the owner may no longer change
        // the DACL; others are not the owner and get nothing from it.
        let or = Acl { aces: vec![Ace::allow(Sid::owner_rights(), READ_DATA | READ_CONTROL, 0)] };
        assert_eq!(granted(&t, Some(&alice), Some(&or)), READ_DATA | READ_CONTROL);
        let bob = token(&[Sid::unix_user(2000), Sid::everyone()]);
        assert_eq!(granted(&bob, Some(&alice), Some(&or)), 0);
        // An inherit-only OWNER RIGHTS ACE is not effective here.
        let io = Acl { aces: vec![Ace::allow(Sid::owner_rights(), READ_DATA, ace_flags::INHERIT_ONLY | ace_flags::OBJECT_INHERIT)] };
        assert_eq!(granted(&t, Some(&alice), Some(&io)), READ_CONTROL | WRITE_DAC);
        // The mode a DACL amounts to counts OWNER RIGHTS for the owner class.
        let rw = Acl { aces: vec![Ace::allow(Sid::owner_rights(), READ_DATA | WRITE_DATA, 0)] };
        assert_eq!(mode_from_dacl(Some(&rw), &alice, &Sid::unix_group(1), 0) & 0o700, 0o600);
    }

    #[test]
    fn stored_security_reads_old_records_and_keeps_owner_sids() {
        let a = Acl { aces: vec![Ace::allow(Sid::everyone(), READ_DATA, 0), Ace::deny(Sid::unix_user(7), WRITE_DATA, 0)] };
        // A record as duet wrote it before owner SIDs: the control word
        // then the DACL's bytes, and a NULL DACL as the word alone.
        let mut old = (control::DACL_PROTECTED).to_le_bytes().to_vec();
        a.encode(&mut old);
        let s = Stored::decode_record(&old).unwrap();
        assert_eq!(s, Stored { control: control::DACL_PROTECTED | control::DACL_PRESENT, owner: None, group: None, dacl: Some(a.clone()) });
        assert_eq!(s.encode_record(), old, "a node without owner SIDs keeps its bytes");
        assert_eq!(s.effective_dacl(), Some(&a));
        let null = control::DACL_PRESENT.to_le_bytes().to_vec();
        let n = Stored::decode_record(&null).unwrap();
        assert!(n.has_dacl() && n.effective_dacl().is_none());
        assert_eq!(n.encode_record(), null);
        assert!(Stored::decode_record(&0u16.to_le_bytes()).is_err(), "no DACL and no SIDs is no record");
        let mut long = old.clone();
        long.push(0);
        assert!(Stored::decode_record(&long).is_err(), "a stored DACL fills its bytes");
        // A command written before owner SIDs: SMB's control word with
        // SELF_RELATIVE and the DACL's bytes still set that DACL.
        let mut dacl_bytes = Vec::new();
        a.encode(&mut dacl_bytes);
        let cmd = Stored::decode(control::SELF_RELATIVE | control::DACL_PRESENT | control::DACL_PROTECTED, &dacl_bytes).unwrap();
        assert_eq!(cmd, Stored::of_dacl(control::DACL_PROTECTED, Some(a.clone())));

        // With an owner and a group SID: a whole self-relative descriptor.
        let everyone = Stored { control: control::DACL_PRESENT, owner: Some(Sid::everyone()), group: Some(Sid::new(5, &[32, 545])), dacl: Some(a.clone()) };
        let (ctl, b) = everyone.encode();
        assert_ne!(ctl & control::SELF_RELATIVE, 0);
        assert_eq!(SecurityDescriptor::decode(&b).unwrap().owner, Some(Sid::everyone()));
        assert_eq!(Stored::decode(ctl, &b).unwrap(), everyone);
        assert_eq!(Stored::decode_record(&everyone.encode_record()).unwrap(), everyone);
        assert_eq!(everyone.owner_or(1000), Sid::everyone());
        assert_eq!(everyone.group_or(1000), Sid::new(5, &[32, 545]));
        // An owner alone, no DACL (the mode decides access).
        let bare = Stored { control: 0, owner: Some(Sid::everyone()), group: None, dacl: None };
        let back = Stored::decode_record(&bare.encode_record()).unwrap();
        assert_eq!(back, bare);
        assert!(!back.has_dacl() && back.effective_dacl().is_none() && !back.is_empty());
        assert_eq!(back.owner_or(5), Sid::everyone());
        assert_eq!(back.group_or(5), Sid::unix_group(5));

        // Strict: the two control words agree, nothing unknown, no SACL,
        // canonical layout, an owner or a group.
        assert!(Stored::decode(ctl | control::SACL_PRESENT, &b).is_err());
        assert!(Stored::decode(ctl & !control::DACL_PRESENT, &b).is_err());
        let mut padded = b.clone();
        padded.push(0);
        assert!(Stored::decode(ctl, &padded).is_err());
        let with_sacl = SecurityDescriptor { control: 0, owner: Some(Sid::everyone()), group: None, sacl: Some(Acl::default()), dacl: None }.encode();
        assert!(Stored::decode(u16::from_le_bytes([with_sacl[2], with_sacl[3]]), &with_sacl).is_err());
        let anonymous = SecurityDescriptor { control: control::DACL_PRESENT, owner: None, group: None, sacl: None, dacl: Some(a.clone()) }.encode();
        assert!(Stored::decode(u16::from_le_bytes([anonymous[2], anonymous[3]]), &anonymous).is_err());
        for n in 1..b.len() {
            assert!(Stored::decode(ctl, &b[..n]).is_err());
        }
    }

    #[test]
    fn the_sid_map_shows_known_ids_under_the_machine_sid_and_maps_them_back() {
        let machine = SidMap::machine_sid([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(machine.to_string(), "S-1-5-21-1-2-3");
        assert!(SidMap::is_machine_sid(&machine));
        let map = SidMap { machine: Some(machine), users: [1000].into(), groups: [100].into() };
        let alice = Sid::parse("S-1-5-21-1-2-3-3000").unwrap();
        let users = Sid::parse("S-1-5-21-1-2-3-1201").unwrap();
        assert_eq!(map.to_wire(&Sid::unix_user(1000)), alice);
        assert_eq!(map.to_wire(&Sid::unix_group(100)), users);
        // Unknown ids, other SIDs and ids whose RID would not fit keep theirs.
        for s in [Sid::unix_user(1001), Sid::unix_group(101), Sid::everyone(), Sid::unix_user(u32::MAX)] {
            assert_eq!(map.to_wire(&s), s);
        }
        assert_eq!(map.from_wire(&alice), Sid::unix_user(1000));
        assert_eq!(map.from_wire(&users), Sid::unix_group(100));
        // Any RID from 1000 up is one id, known or not; below, another
        // domain's SID or a well-known one stays as sent.
        assert_eq!(map.from_wire(&Sid::parse("S-1-5-21-1-2-3-3002").unwrap()), Sid::unix_user(1001));
        for s in ["S-1-5-21-1-2-3-500", "S-1-5-21-1-2-4-3000", "S-1-5-32-544", "S-1-22-1-7"] {
            let s = Sid::parse(s).unwrap();
            assert_eq!(map.from_wire(&s), s);
        }
        // Whole descriptors, and none without a machine SID.
        let sd = SecurityDescriptor {
            control: control::DACL_PRESENT,
            owner: Some(Sid::unix_user(1000)),
            group: Some(Sid::unix_group(100)),
            sacl: None,
            dacl: Some(Acl { aces: vec![Ace::allow(Sid::unix_user(1000), rights::FILE_ALL_ACCESS, 0), Ace::deny(Sid::unix_user(5), 1, 0)] }),
        };
        let wire = map.sd_to_wire(&sd);
        assert_eq!((wire.owner.as_ref(), wire.group.as_ref()), (Some(&alice), Some(&users)));
        assert_eq!(wire.dacl.as_ref().unwrap().aces[0].sid, alice);
        assert_eq!(wire.dacl.as_ref().unwrap().aces[1].sid, Sid::unix_user(5));
        let mut back = SecurityDescriptor::decode(&wire.encode()).unwrap();
        map.sd_from_wire(&mut back);
        back.control &= !control::SELF_RELATIVE;
        assert_eq!(back, sd);
        assert_eq!(SidMap::default().sd_to_wire(&sd), sd);
        // An ACL that the longer SIDs would push past 64 KiB is shown as stored.
        let big = SecurityDescriptor {
            control: control::DACL_PRESENT,
            dacl: Some(Acl { aces: vec![Ace::allow(Sid::unix_user(1000), 1, 0); 65_000 / 20] }),
            ..Default::default()
        };
        assert_eq!(map.sd_to_wire(&big), big);
    }

    #[test]
    fn the_anonymous_uid_is_no_authenticated_user() {
        let dacl = Acl { aces: vec![Ace::allow(Sid::authenticated_users(), rights::READ_DATA, 0), Ace::allow(Sid::anonymous(), rights::WRITE_DATA, 0)] };
        let user = Token::unix(1000, 1000, &[]);
        let anon = Token::unix(ANONYMOUS_UID, ANONYMOUS_UID, &[]);
        assert_eq!(granted(&user, None, Some(&dacl)), rights::READ_DATA);
        assert_eq!(granted(&anon, None, Some(&dacl)), rights::WRITE_DATA);
        assert!(anon.has(&Sid::everyone()) && !anon.has(&Sid::authenticated_users()));
    }
}
