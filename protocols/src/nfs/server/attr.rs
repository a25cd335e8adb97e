//! Attribute conversions between duet's [`Attrs`] and the wire: fattr3,
//! wcc_attr, sattr3, fattr4 (encode, and decode into [`SetAttrs`]), and
//! the ACCESS computation both versions share.

use duet_fs::{Attrs, Credentials, FileType, SetAttrs, SetTime, TimeNs};

use crate::nfs::nfs3::{self, Fattr3, Ftype3, NfsTime3, Sattr3, SpecData3, WccAttr};
use crate::nfs::nfs4::attrs::{fattr4 as fa, fh4, Attrs as A4, Fsid4, ModeUmask4, OpenArguments4, SetTime4};
use crate::nfs::nfs4::{Bitmap4, Fattr4, NfsAce4, NfsFtype4, NfsTime4, Nfsstat4, SpecData4};
use crate::nfs::xdr::{List, Opaque, XdrWriter};

const NS: i64 = 1_000_000_000;

pub fn time3(ns: TimeNs) -> NfsTime3 {
    let secs = ns.div_euclid(NS).clamp(0, u32::MAX as i64);
    NfsTime3 {
        seconds: secs as u32,
        nseconds: ns.rem_euclid(NS) as u32,
    }
}

pub fn time4(ns: TimeNs) -> NfsTime4 {
    NfsTime4 {
        seconds: ns.div_euclid(NS),
        nseconds: ns.rem_euclid(NS) as u32,
    }
}

pub fn ns3(t: NfsTime3) -> TimeNs {
    i64::from(t.seconds) * NS + i64::from(t.nseconds.min(999_999_999))
}

/// nfstime4 to ns; None when out of duet's range or nseconds invalid.
pub fn ns4(t: NfsTime4) -> Option<TimeNs> {
    if t.nseconds >= 1_000_000_000 {
        return None;
    }
    t.seconds
        .checked_mul(NS)?
        .checked_add(i64::from(t.nseconds))
}

/// rdev as NFS major/minor: high and low 32 bits.
pub fn spec3(rdev: u64) -> SpecData3 {
    SpecData3 {
        specdata1: (rdev >> 32) as u32,
        specdata2: rdev as u32,
    }
}

pub fn rdev_of(major: u32, minor: u32) -> u64 {
    (u64::from(major) << 32) | u64::from(minor)
}

pub fn ftype3(t: FileType) -> Ftype3 {
    match t {
        FileType::Regular => Ftype3::Reg,
        FileType::Directory => Ftype3::Dir,
        FileType::Symlink => Ftype3::Lnk,
        FileType::CharDevice => Ftype3::Chr,
        FileType::BlockDevice => Ftype3::Blk,
        FileType::Fifo => Ftype3::Fifo,
        FileType::Socket => Ftype3::Sock,
    }
}

pub fn ftype4(t: FileType) -> NfsFtype4 {
    match t {
        FileType::Regular => NfsFtype4::Reg,
        FileType::Directory => NfsFtype4::Dir,
        FileType::Symlink => NfsFtype4::Lnk,
        FileType::CharDevice => NfsFtype4::Chr,
        FileType::BlockDevice => NfsFtype4::Blk,
        FileType::Fifo => NfsFtype4::Fifo,
        FileType::Socket => NfsFtype4::Sock,
    }
}

/// RFC 1813 2.6 fattr3.
pub fn fattr3(a: &Attrs, fsid: u64) -> Fattr3 {
    Fattr3 {
        type_: ftype3(a.ftype),
        mode: a.mode & 0o7777,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.alloc_size,
        rdev: spec3(a.rdev),
        fsid,
        fileid: a.id,
        atime: time3(a.atime),
        mtime: time3(a.mtime),
        ctime: time3(a.ctime),
    }
}

pub fn wcc_attr(a: &Attrs) -> WccAttr {
    WccAttr {
        size: a.size,
        mtime: time3(a.mtime),
        ctime: time3(a.ctime),
    }
}

/// RFC 1813 sattr3 to duet's SetAttrs.
pub fn sattr3(s: &Sattr3) -> SetAttrs {
    let t = |t: nfs3::SetTime| match t {
        nfs3::SetTime::DontChange => None,
        nfs3::SetTime::SetToServerTime => Some(SetTime::ServerNow),
        nfs3::SetTime::SetToClientTime(t) => Some(SetTime::At(ns3(t))),
    };
    SetAttrs {
        mode: s.mode.map(|m| m & 0o7777),
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime: t(s.atime),
        mtime: t(s.mtime),
        ..Default::default()
    }
}

/// Permission bits a credential has on an object (4 r, 2 w, 1 x), as the
/// engine computes them.
pub fn perm_bits(cred: &Credentials, a: &Attrs) -> u32 {
    if cred.uid == 0 {
        let x = a.ftype == FileType::Directory || a.mode & 0o111 != 0;
        return 6 | u32::from(x);
    }
    (if cred.uid == a.uid {
        a.mode >> 6
    } else if cred.in_group(a.gid) {
        a.mode >> 3
    } else {
        a.mode
    }) & 7
}

/// ACCESS (RFC 1813 3.3.4, RFC 8881 18.1): the requested bits granted.
/// The bit values are the same in both versions.
pub fn access_bits(cred: &Credentials, a: &Attrs, requested: u32, read_only: bool) -> u32 {
    use crate::nfs::nfs3::access3 as b;
    // Snapshot objects (and `.snapshot` directories) are read-only.
    let read_only = read_only || duet_fs::view::is_view(a.id);
    let p = perm_bits(cred, a);
    let dir = a.ftype == FileType::Directory;
    let mut g = 0;
    if p & 4 != 0 {
        g |= b::READ;
    }
    if p & 2 != 0 && !read_only {
        g |= b::MODIFY | b::EXTEND;
        if dir {
            g |= b::DELETE;
        }
    }
    if p & 1 != 0 {
        g |= if dir { b::LOOKUP } else { b::EXECUTE };
    }
    g & requested
}

/// [`access_bits`] for an object that may have a stored DACL (issue 17):
/// with one, the access check of MS-DTYP 2.5.3.2 decides each bit (READ:
/// READ_DATA; MODIFY: WRITE_DATA; EXTEND: APPEND_DATA; DELETE on a
/// directory: DELETE_CHILD; LOOKUP / EXECUTE: EXECUTE), as the state
/// machine decides the operations themselves; root keeps its bypass.
pub fn access_bits_with_acl(
    cred: &Credentials,
    a: &Attrs,
    stored: Result<Option<duet_fs::acl::Stored>, duet_fs::acl::AclError>,
    requested: u32,
    read_only: bool,
) -> u32 {
    use crate::nfs::nfs3::access3 as b;
    use duet_fs::acl::{granted, rights, Token};
    // Kept security that does not decode grants nothing (never the mode's).
    let Ok(stored) = stored else { return 0 };
    let Some((s, dacl)) = stored.as_ref().and_then(|s| Some((s, s.effective_dacl()?))).filter(|_| cred.uid != 0) else {
        return access_bits(cred, a, requested, read_only);
    };
    let read_only = read_only || duet_fs::view::is_view(a.id);
    // The owner OWNER RIGHTS and the implicit rights go to: a stored
    // owner SID (set over SMB), else the uid's.
    let token = Token::unix(cred.uid, cred.gid, &cred.groups);
    let m = granted(&token, Some(&s.owner_or(a.uid)), Some(dacl));
    let dir = a.ftype == FileType::Directory;
    // Removing names (ACCESS3_DELETE on a directory): DELETE_CHILD, or
    // where the DACL says nothing of it, write and search, as the engine
    // decides a removal of a file without a DACL (`machine.rs`
    // `may_unlink`; a file's own DELETE may allow more, per name).
    let delete_child = m & rights::DELETE_CHILD != 0
        || duet_fs::acl::named(&token, Some(&s.owner_or(a.uid)), dacl) & rights::DELETE_CHILD == 0
            && m & (rights::WRITE_DATA | rights::EXECUTE) == rights::WRITE_DATA | rights::EXECUTE;
    let mut g = 0;
    if m & rights::READ_DATA != 0 {
        g |= b::READ;
    }
    if !read_only {
        if m & rights::WRITE_DATA != 0 {
            g |= b::MODIFY;
        }
        if m & rights::APPEND_DATA != 0 {
            g |= b::EXTEND;
        }
        if dir && delete_child {
            g |= b::DELETE;
        }
    }
    if m & rights::EXECUTE != 0 {
        g |= if dir { b::LOOKUP } else { b::EXECUTE };
    }
    g & requested
}

/// Server-wide values some fattr4 attributes report.
#[derive(Clone, Debug)]
pub struct FsInfo {
    pub lease_time: u32,
    pub max_read: u32,
    pub max_write: u32,
    pub space_total: u64,
    pub space_free: u64,
    pub space_avail: u64,
    pub files_total: u64,
    pub files_free: u64,
}

/// The attributes duet answers in GETATTR / READDIR (RFC 8881 5.6-5.8).
pub const GETTABLE: &[u32] = &[
    fa::SUPPORTED_ATTRS,
    fa::TYPE,
    fa::FH_EXPIRE_TYPE,
    fa::CHANGE,
    fa::SIZE,
    fa::LINK_SUPPORT,
    fa::SYMLINK_SUPPORT,
    fa::NAMED_ATTR,
    fa::FSID,
    fa::UNIQUE_HANDLES,
    fa::LEASE_TIME,
    fa::RDATTR_ERROR,
    fa::ACL,
    fa::ACLSUPPORT,
    fa::ARCHIVE,
    fa::CANSETTIME,
    fa::CASE_INSENSITIVE,
    fa::CASE_PRESERVING,
    fa::CHOWN_RESTRICTED,
    fa::FILEHANDLE,
    fa::FILEID,
    fa::FILES_AVAIL,
    fa::FILES_FREE,
    fa::FILES_TOTAL,
    fa::HIDDEN,
    fa::HOMOGENEOUS,
    fa::MAXFILESIZE,
    fa::MAXLINK,
    fa::MAXNAME,
    fa::MAXREAD,
    fa::MAXWRITE,
    fa::MODE,
    fa::NO_TRUNC,
    fa::NUMLINKS,
    fa::OWNER,
    fa::OWNER_GROUP,
    fa::RAWDEV,
    fa::SPACE_AVAIL,
    fa::SPACE_FREE,
    fa::SPACE_TOTAL,
    fa::SPACE_USED,
    fa::SYSTEM,
    fa::TIME_ACCESS,
    fa::TIME_CREATE,
    fa::TIME_DELTA,
    fa::TIME_METADATA,
    fa::TIME_MODIFY,
    fa::MOUNTED_ON_FILEID,
    fa::SUPPATTR_EXCLCREAT,
    fa::XATTR_SUPPORT,
    fa::OPEN_ARGUMENTS,
];

/// Attributes SETATTR / CREATE / OPEN may set.
pub const SETTABLE: &[u32] = &[
    fa::SIZE,
    fa::MODE,
    fa::OWNER,
    fa::OWNER_GROUP,
    fa::TIME_ACCESS_SET,
    fa::TIME_CREATE,
    fa::TIME_MODIFY_SET,
    fa::MODE_UMASK,
];

/// Attributes SETATTR may set: [`SETTABLE`] and the ACL (RFC 8881
/// 6.2.1; [`acl_to_set`]), which CREATE and OPEN do not take.
pub const SETATTR_SETTABLE: &[u32] = &[
    fa::SIZE,
    fa::MODE,
    fa::OWNER,
    fa::OWNER_GROUP,
    fa::TIME_ACCESS_SET,
    fa::TIME_CREATE,
    fa::TIME_MODIFY_SET,
    fa::MODE_UMASK,
    fa::ACL,
];

/// Attributes EXCLUSIVE4_1 may carry (the times hold the verifier).
pub const EXCLCREAT: &[u32] = &[
    fa::SIZE,
    fa::MODE,
    fa::OWNER,
    fa::OWNER_GROUP,
    fa::MODE_UMASK,
];

/// RFC 9754 section 5: the OPEN arguments `v4.rs` handles. Access READ,
/// WRITE, BOTH; every deny; the wants of RFC 8881 18.16.3 it answers (no
/// preference, read, write, any, none, cancel; not the signal/push wants
/// nor delegated timestamps); the claims NULL, PREVIOUS, DELEGATE_CUR, FH,
/// DELEG_CUR_FH (DELEGATE_PREV and DELEG_PREV_FH answer NO_GRACE); every
/// create mode.
fn open_arguments() -> OpenArguments4 {
    OpenArguments4 {
        share_access: Bitmap4::from_bits(&[1, 2, 3]),
        share_deny: Bitmap4::from_bits(&[0, 1, 2, 3]),
        share_access_want: Bitmap4::from_bits(&[0, 1, 2, 3, 4, 5]),
        open_claim: Bitmap4::from_bits(&[0, 1, 2, 4, 5]),
        create_mode: Bitmap4::from_bits(&[0, 1, 2, 3]),
    }
}

pub fn supported_bitmap() -> Bitmap4 {
    let mut b = Bitmap4::from_bits(GETTABLE);
    for s in SETTABLE {
        b.set(*s);
    }
    b
}

/// The object context of one fattr4: what is not in duet's Attrs.
pub struct ObjCtx<'a> {
    pub fsid: Fsid4,
    pub fh: &'a [u8],
    pub mounted_on: u64,
    /// The ACL (fattr4 12), where the batch read it (GETATTR asking for
    /// it runs `Op::GetAcl`, [`nfs4_acl`]); None leaves the attribute out.
    pub acl: Option<&'a [NfsAce4<'a>]>,
    /// Owner strings (`owner`, `owner_group`).
    pub ids: &'a super::IdMap,
}

/// Encodes the requested attributes of `a`: (bitmap, attr_vals).
pub fn fattr4_vals(
    a: &Attrs,
    ctx: &ObjCtx<'_>,
    info: &FsInfo,
    req: &Bitmap4,
) -> (Bitmap4, Vec<u8>) {
    let mut w = XdrWriter::with_buffer(Vec::with_capacity(256));
    let mask = fattr4_vals_into(a, ctx, info, req, &mut w);
    (mask, w.into_inner())
}

/// `n` in decimal, in `buf`.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// [`fattr4_vals`] appending the values to `w` (a READDIR encodes all its
/// entries' values into one buffer); the values nobody asked for are not
/// worked out. `ctx.fh` is read only when FILEHANDLE is requested.
pub fn fattr4_vals_into(
    a: &Attrs,
    ctx: &ObjCtx<'_>,
    info: &FsInfo,
    req: &Bitmap4,
    w: &mut XdrWriter,
) -> Bitmap4 {
    let (mut ob, mut gb) = ([0u8; 10], [0u8; 10]);
    // Names only with an NFSv4 domain configured; else decimal ids, with
    // no allocation per READDIR entry.
    let named = ctx.ids.has_domain().then(|| (ctx.ids.owner(a.uid), ctx.ids.group(a.gid)));
    let (owner, group) = match &named {
        Some((o, g)) => (o.as_bytes(), g.as_bytes()),
        None => (decimal(a.uid, &mut ob), decimal(a.gid, &mut gb)),
    };
    let dos = a.dos_attrs;
    let v = A4 {
        supported_attrs: req.is_set(fa::SUPPORTED_ATTRS).then(supported_bitmap),
        type_: Some(ftype4(a.ftype)),
        fh_expire_type: Some(fh4::PERSISTENT),
        change: Some(a.change),
        size: Some(a.size),
        link_support: Some(true),
        symlink_support: Some(true),
        named_attr: Some(false),
        xattr_support: Some(true),
        fsid: Some(ctx.fsid),
        unique_handles: Some(true),
        lease_time: Some(info.lease_time),
        rdattr_error: Some(Nfsstat4::OK),
        aclsupport: Some(ACL4_SUPPORT_ALLOW_ACL | ACL4_SUPPORT_DENY_ACL),
        acl: ctx.acl.map(|a| List(a.to_vec())),
        archive: Some(dos & duet_fs::dos::ARCHIVE != 0),
        cansettime: Some(true),
        case_insensitive: Some(false),
        case_preserving: Some(true),
        chown_restricted: Some(true),
        filehandle: Some(Opaque(ctx.fh)),
        fileid: Some(a.id),
        files_avail: Some(info.files_free),
        files_free: Some(info.files_free),
        files_total: Some(info.files_total),
        hidden: Some(dos & duet_fs::dos::HIDDEN != 0),
        homogeneous: Some(true),
        maxfilesize: Some(duet_fs::FILE_SIZE_MAX),
        maxlink: Some(65_000),
        maxname: Some(duet_fs::NAME_MAX as u32),
        maxread: Some(u64::from(info.max_read)),
        maxwrite: Some(u64::from(info.max_write)),
        mode: Some(a.mode & 0o7777),
        no_trunc: Some(true),
        numlinks: Some(a.nlink),
        owner: Some(Opaque(owner)),
        owner_group: Some(Opaque(group)),
        rawdev: Some(SpecData4 {
            specdata1: (a.rdev >> 32) as u32,
            specdata2: a.rdev as u32,
        }),
        space_avail: Some(info.space_avail),
        space_free: Some(info.space_free),
        space_total: Some(info.space_total),
        space_used: Some(a.alloc_size),
        system: Some(dos & duet_fs::dos::SYSTEM != 0),
        time_access: Some(time4(a.atime)),
        time_create: Some(time4(a.btime)),
        time_delta: Some(NfsTime4 {
            seconds: 0,
            nseconds: 1,
        }),
        time_metadata: Some(time4(a.ctime)),
        time_modify: Some(time4(a.mtime)),
        mounted_on_fileid: Some(ctx.mounted_on),
        suppattr_exclcreat: req
            .is_set(fa::SUPPATTR_EXCLCREAT)
            .then(|| Bitmap4::from_bits(EXCLCREAT)),
        open_arguments: req.is_set(fa::OPEN_ARGUMENTS).then(open_arguments),
        ..Default::default()
    };
    v.encode_vals(Some(req), w)
}

/// RFC 8881 6.2.1.2: aclsupport bits (duet stores allow and deny ACEs).
pub const ACL4_SUPPORT_ALLOW_ACL: u32 = 0x1;
pub const ACL4_SUPPORT_DENY_ACL: u32 = 0x2;

/// The NFSv4 ACL (RFC 8881 6.2.1) of an object with attributes `a` and
/// the kept security `stored` (`Op::GetAcl`'s control word and bytes,
/// `acl::Stored`; None, or none kept: the DACL its mode amounts to, as SMB
/// shows it). OWNER@ and GROUP@ are the uid and gid NFS shows as `owner`
/// and `owner_group`, also for a file whose owner SMB set to another SID
/// (an ACE for that SID shows under its own name). Err: bytes that do not
/// decode.
pub fn nfs4_acl(a: &Attrs, stored: Option<&(u16, Vec<u8>)>, ids: &super::IdMap) -> Result<Vec<duet_fs::acl::Nfs4Ace>, Nfsstat4> {
    use duet_fs::acl::{dacl_from_mode, nfs4_from_dacl, Sid, Stored};
    let (owner, group) = (Sid::unix_user(a.uid), Sid::unix_group(a.gid));
    let s = stored.map(|(c, b)| Stored::decode(*c, b)).transpose().map_err(|_| Nfsstat4::SERVERFAULT)?;
    if s.as_ref().is_some_and(|s| s.has_dacl() && s.dacl.is_none()) {
        // A NULL DACL: everyone may do everything.
        let all = duet_fs::acl::rights::FILE_ALL_ACCESS & duet_fs::acl::nfs4::ACE4_MASK_DEFINED;
        return Ok(vec![duet_fs::acl::Nfs4Ace { kind: duet_fs::acl::nfs4::ACE4_ACCESS_ALLOWED_ACE_TYPE, flags: 0, mask: all, who: duet_fs::acl::Who::Everyone }]);
    }
    let dacl = s
        .and_then(|s| s.effective_dacl().cloned())
        .unwrap_or_else(|| dacl_from_mode(a.mode, a.ftype == FileType::Directory, &owner, &group));
    Ok(nfs4_from_dacl(&dacl, &owner, &group, ids))
}

/// [`nfs4_acl`]'s ACEs as the wire carries them (borrowing their names).
pub fn nfs4_acl_wire(aces: &[duet_fs::acl::Nfs4Ace]) -> Vec<NfsAce4<'_>> {
    aces.iter()
        .map(|a| NfsAce4 { type_: a.kind, flag: a.flags, access_mask: a.mask, who: Opaque(a.who_string().as_bytes()) })
        .collect()
}

/// The ACL of a SETATTR (RFC 8881 6.2.1) as the DACL `Op::SetAcl`
/// stores: OWNER@ and GROUP@ as the placeholders the state machine
/// resolves against the object (`duet_fs::acl::resolve_owner_at`), ids as
/// S-1-22 SIDs. None when the fattr4 has no ACL. Errors (RFC 8881 6.2.1,
/// 18.30.4): an ACE type other than allow and deny ATTRNOTSUPP, a name
/// that is no id BADOWNER, undefined mask bits INVAL.
pub fn acl_to_set(f: &Fattr4<'_>, ids: &super::IdMap) -> Result<Option<(u16, Vec<u8>)>, Nfsstat4> {
    use duet_fs::acl::{dacl_from_nfs4, nfs4 as n4, Nfs4Ace, Sid};
    if !f.attrmask.is_set(fa::ACL) {
        return Ok(None);
    }
    let a = A4::from_fattr4(f).map_err(|e| e.nfs4_status())?;
    let Some(List(aces)) = a.acl else { return Err(Nfsstat4::INVAL) };
    let mut v = Vec::with_capacity(aces.len());
    for ace in &aces {
        if !matches!(ace.type_, n4::ACE4_ACCESS_ALLOWED_ACE_TYPE | n4::ACE4_ACCESS_DENIED_ACE_TYPE) {
            return Err(Nfsstat4::ATTRNOTSUPP);
        }
        let who = std::str::from_utf8(ace.who.0).map_err(|_| Nfsstat4::INVAL)?;
        v.push(Nfs4Ace::from_wire(ace.type_, ace.flag, ace.access_mask, who));
    }
    let dacl = dacl_from_nfs4(&v, &Sid::owner_at(), &Sid::group_at(), ids).map_err(|e| match e {
        "unknown user" | "unknown group" => Nfsstat4::BADOWNER,
        _ => Nfsstat4::INVAL,
    })?;
    let mut bytes = Vec::new();
    dacl.encode(&mut bytes);
    Ok(Some((duet_fs::acl::control::DACL_PRESENT, bytes)))
}

/// Parses an owner or owner_group string: a number, optionally followed by
/// `@domain` (AUTH_SYS clients send numeric ids); "nobody" is 65534.
pub fn parse_id(s: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(s).ok()?;
    let s = s.split('@').next()?;
    if s == "nobody" {
        return Some(super::exports::NOBODY);
    }
    if s == "root" {
        return Some(0);
    }
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Decodes a client fattr4 into SetAttrs; also returns the attributes set
/// (attrsset). `allowed` bounds which attributes are accepted.
pub fn fattr4_to_set(f: &Fattr4<'_>, allowed: &[u32], ids: &super::IdMap) -> Result<(SetAttrs, Bitmap4), Nfsstat4> {
    let a = A4::from_fattr4(f).map_err(|e| e.nfs4_status())?;
    for bit in f.attrmask.iter() {
        if !allowed.contains(&bit) {
            // A supported attribute that may not be set is INVAL
            // (RFC 8881 18.30.4); an unknown one ATTRNOTSUPP.
            return Err(if GETTABLE.contains(&bit) || SETTABLE.contains(&bit) {
                Nfsstat4::INVAL
            } else {
                Nfsstat4::ATTRNOTSUPP
            });
        }
    }
    let mut s = SetAttrs {
        size: a.size,
        ..Default::default()
    };
    if let Some(m) = a.mode {
        s.mode = Some(m & 0o7777);
    }
    if let Some(ModeUmask4 { mode, umask }) = a.mode_umask {
        s.mode = Some(mode & !umask & 0o7777);
    }
    if let Some(o) = a.owner {
        s.uid = Some(ids.parse_owner(o.0).ok_or(Nfsstat4::BADOWNER)?);
    }
    if let Some(g) = a.owner_group {
        s.gid = Some(ids.parse_group(g.0).ok_or(Nfsstat4::BADOWNER)?);
    }
    let t = |t: SetTime4| -> Result<SetTime, Nfsstat4> {
        match t {
            SetTime4::ServerTime => Ok(SetTime::ServerNow),
            SetTime4::ClientTime(t) => ns4(t).map(SetTime::At).ok_or(Nfsstat4::INVAL),
        }
    };
    if let Some(x) = a.time_access_set {
        s.atime = Some(t(x)?);
    }
    if let Some(x) = a.time_modify_set {
        s.mtime = Some(t(x)?);
    }
    if let Some(x) = a.time_create {
        s.btime = Some(ns4(x).ok_or(Nfsstat4::INVAL)?);
    }
    Ok((s, f.attrmask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use duet_fs::acl::{rights, Ace, Acl, Sid, Stored};

    /// ACCESS3_DELETE on a directory with a DACL answers what the engine's
    /// removal rule allows for a file without one (`machine.rs`
    /// `may_unlink`): DELETE_CHILD, or write and search where the DACL
    /// says nothing of DELETE_CHILD; a deny of it refuses.
    #[test]
    fn access_delete_on_a_directory_follows_the_removal_rule() {
        use crate::nfs::nfs3::access3 as b;
        let dir = Attrs {
            id: 9,
            ftype: FileType::Directory,
            mode: 0o777,
            uid: 1,
            gid: 1,
            nlink: 2,
            rdev: 0,
            size: 0,
            alloc_size: 0,
            dos_attrs: 0,
            btime: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            change: 1,
        };
        let cred = Credentials::user(1000, 1000);
        let me = Sid::unix_user(1000);
        let with = |aces: Vec<Ace>| Ok(Some(Stored::of_dacl(duet_fs::acl::control::DACL_PRESENT, Some(Acl { aces }))));
        let ask = |aces| access_bits_with_acl(&cred, &dir, with(aces), b::DELETE, false);
        let rwx = rights::FILE_GENERIC_READ | rights::FILE_GENERIC_WRITE | rights::FILE_GENERIC_EXECUTE;
        assert_eq!(ask(vec![Ace::allow(me.clone(), rwx, 0)]), b::DELETE, "write and search, DELETE_CHILD not named");
        assert_eq!(ask(vec![Ace::allow(me.clone(), rights::DELETE_CHILD, 0)]), b::DELETE);
        assert_eq!(ask(vec![Ace::deny(me.clone(), rights::DELETE_CHILD, 0), Ace::allow(me.clone(), rwx, 0)]), 0);
        assert_eq!(ask(vec![Ace::allow(me, rights::FILE_GENERIC_READ | rights::FILE_GENERIC_EXECUTE, 0)]), 0);
    }
}
