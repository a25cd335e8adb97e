//! NFSv4.1 file-system operations (RFC 8881 section 18): arguments and
//! result bodies. The result of each is an [`Nfs4Res`] of its `resok`
//! unless noted.

use super::{
    Bitmap4, ChangeInfo4, Component4, Fattr4, LinkText4, LockOwner4, Nfs4Res, NfsAce4, NfsFh4,
    NfsFtype4, Nfsstat4, OpStatus, OpenOwner4, SecOid4, SpecData4, StableHow4, Stateid4, Verifier4,
    NFS4_MAX_DATA, NFS4_MAX_DIR_ENTRIES, NFS4_MAX_SECINFO,
};
use crate::nfs::rpc::RPCSEC_GSS;
use crate::nfs::xdr::{
    xdr_enum, xdr_struct, LinkedList, List, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader,
    XdrWriter,
};

// ---- 18.1 ACCESS ----

/// RFC 8881 18.1: ACCESS4_* bits.
pub mod access4 {
    pub const READ: u32 = 0x0001;
    pub const LOOKUP: u32 = 0x0002;
    pub const MODIFY: u32 = 0x0004;
    pub const EXTEND: u32 = 0x0008;
    pub const DELETE: u32 = 0x0010;
    pub const EXECUTE: u32 = 0x0020;
    /// RFC 8276 8.4.5: read, write and list extended attributes.
    pub const XAREAD: u32 = 0x0040;
    pub const XAWRITE: u32 = 0x0080;
    pub const XALIST: u32 = 0x0100;
    /// Every bit duet answers (RFC 8881 18.1.3's `supported`).
    pub const ALL: u32 = 0x01ff;
}

xdr_struct! {
    /// RFC 8881 18.1.1: ACCESS4args.
    pub struct Access4Args {
        pub access: u32,
    }
}
xdr_struct! {
    /// RFC 8881 18.1.2: ACCESS4resok.
    pub struct Access4ResOk {
        pub supported: u32,
        pub access: u32,
    }
}

// ---- 18.2 CLOSE ----

xdr_struct! {
    /// RFC 8881 18.2.1: CLOSE4args.
    pub struct Close4Args {
        pub seqid: u32,
        pub open_stateid: Stateid4,
    }
}

// ---- 18.3 COMMIT ----

xdr_struct! {
    /// RFC 8881 18.3.1: COMMIT4args.
    pub struct Commit4Args {
        pub offset: u64,
        pub count: u32,
    }
}
xdr_struct! {
    /// RFC 8881 18.3.2: COMMIT4resok.
    pub struct Commit4ResOk {
        pub writeverf: Verifier4,
    }
}

// ---- 18.4 CREATE ----

/// RFC 8881 18.4.1: createtype4, `union switch (nfs_ftype4 type)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateType4<'a> {
    Lnk(LinkText4<'a>),
    Blk(SpecData4),
    Chr(SpecData4),
    /// SOCK, FIFO, DIR, and (void, answered NFS4ERR_BADTYPE) REG and the
    /// named-attribute types.
    Other(NfsFtype4),
}

impl<'a> XdrDecode<'a> for CreateType4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match NfsFtype4::decode(r)? {
            NfsFtype4::Lnk => CreateType4::Lnk(r.get()?),
            NfsFtype4::Blk => CreateType4::Blk(r.get()?),
            NfsFtype4::Chr => CreateType4::Chr(r.get()?),
            other => CreateType4::Other(other),
        })
    }
}
impl XdrEncode for CreateType4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            CreateType4::Lnk(l) => {
                NfsFtype4::Lnk.encode(w);
                l.encode(w);
            }
            CreateType4::Blk(d) => {
                NfsFtype4::Blk.encode(w);
                d.encode(w);
            }
            CreateType4::Chr(d) => {
                NfsFtype4::Chr.encode(w);
                d.encode(w);
            }
            CreateType4::Other(t) => t.encode(w),
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.4.1: CREATE4args.
    pub struct Create4Args<'a> {
        pub objtype: CreateType4<'a>,
        pub objname: Component4<'a>,
        pub createattrs: Fattr4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.4.2: CREATE4resok.
    pub struct Create4ResOk {
        pub cinfo: ChangeInfo4,
        pub attrset: Bitmap4,
    }
}

// ---- 18.6 DELEGRETURN ----

xdr_struct! {
    /// RFC 8881 18.6.1: DELEGRETURN4args.
    pub struct DelegReturn4Args {
        pub deleg_stateid: Stateid4,
    }
}

// ---- 18.7 GETATTR ----

xdr_struct! {
    /// RFC 8881 18.7.1: GETATTR4args.
    pub struct GetAttr4Args {
        pub attr_request: Bitmap4,
    }
}
xdr_struct! {
    /// RFC 8881 18.7.2: GETATTR4resok.
    pub struct GetAttr4ResOk<'a> {
        pub obj_attributes: Fattr4<'a>,
    }
}

// ---- 18.8 GETFH ----

xdr_struct! {
    /// RFC 8881 18.8.2: GETFH4resok.
    pub struct GetFh4ResOk<'a> {
        pub object: NfsFh4<'a>,
    }
}

// ---- 18.9 LINK ----

xdr_struct! {
    /// RFC 8881 18.9.1: LINK4args (the saved filehandle is the source, the
    /// current one the target directory).
    pub struct Link4Args<'a> {
        pub newname: Component4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.9.2: LINK4resok.
    pub struct Link4ResOk {
        pub cinfo: ChangeInfo4,
    }
}

// ---- 18.10-18.12 LOCK, LOCKT, LOCKU ----

xdr_enum! {
    /// RFC 8881 18.10.1: nfs_lock_type4.
    pub enum NfsLockType4 {
        Read = 1,
        Write = 2,
        ReadW = 3,
        WriteW = 4,
    }
}

xdr_struct! {
    /// RFC 8881 18.10.1: open_to_lock_owner4.
    pub struct OpenToLockOwner4<'a> {
        pub open_seqid: u32,
        pub open_stateid: Stateid4,
        pub lock_seqid: u32,
        pub lock_owner: LockOwner4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.10.1: exist_lock_owner4.
    pub struct ExistLockOwner4 {
        pub lock_stateid: Stateid4,
        pub lock_seqid: u32,
    }
}

/// RFC 8881 18.10.1: locker4, `union switch (bool new_lock_owner)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locker4<'a> {
    New(OpenToLockOwner4<'a>),
    Existing(ExistLockOwner4),
}

impl<'a> XdrDecode<'a> for Locker4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        if r.get_bool()? {
            Ok(Locker4::New(r.get()?))
        } else {
            Ok(Locker4::Existing(r.get()?))
        }
    }
}
impl XdrEncode for Locker4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            Locker4::New(o) => {
                w.put_bool(true);
                o.encode(w);
            }
            Locker4::Existing(e) => {
                w.put_bool(false);
                e.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.10.1: LOCK4args.
    pub struct Lock4Args<'a> {
        pub locktype: NfsLockType4,
        pub reclaim: bool,
        pub offset: u64,
        pub length: u64,
        pub locker: Locker4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.10.2: LOCK4denied, the conflicting lock.
    pub struct Lock4Denied<'a> {
        pub offset: u64,
        pub length: u64,
        pub locktype: NfsLockType4,
        pub owner: LockOwner4<'a>,
    }
}

/// RFC 8881 18.10.2: LOCK4res; NFS4ERR_DENIED carries the conflict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lock4Res<'a> {
    Ok(Stateid4),
    Denied(Lock4Denied<'a>),
    Err(Nfsstat4),
}

impl<'a> XdrDecode<'a> for Lock4Res<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let status = Nfsstat4::decode(r)?;
        Ok(match status {
            Nfsstat4::OK => Lock4Res::Ok(r.get()?),
            Nfsstat4::DENIED => Lock4Res::Denied(r.get()?),
            s => Lock4Res::Err(s),
        })
    }
}
impl XdrEncode for Lock4Res<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            Lock4Res::Ok(s) => {
                Nfsstat4::OK.encode(w);
                s.encode(w);
            }
            Lock4Res::Denied(d) => {
                Nfsstat4::DENIED.encode(w);
                d.encode(w);
            }
            Lock4Res::Err(s) => s.encode(w),
        }
    }
}
impl OpStatus for Lock4Res<'_> {
    fn status(&self) -> Nfsstat4 {
        match self {
            Lock4Res::Ok(_) => Nfsstat4::OK,
            Lock4Res::Denied(_) => Nfsstat4::DENIED,
            Lock4Res::Err(s) => *s,
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.11.1: LOCKT4args.
    pub struct LockT4Args<'a> {
        pub locktype: NfsLockType4,
        pub offset: u64,
        pub length: u64,
        pub owner: LockOwner4<'a>,
    }
}

/// RFC 8881 18.11.2: LOCKT4res; NFS4ERR_DENIED carries the conflict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockT4Res<'a> {
    Ok,
    Denied(Lock4Denied<'a>),
    Err(Nfsstat4),
}

impl<'a> XdrDecode<'a> for LockT4Res<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match Nfsstat4::decode(r)? {
            Nfsstat4::OK => LockT4Res::Ok,
            Nfsstat4::DENIED => LockT4Res::Denied(r.get()?),
            s => LockT4Res::Err(s),
        })
    }
}
impl XdrEncode for LockT4Res<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            LockT4Res::Ok => Nfsstat4::OK.encode(w),
            LockT4Res::Denied(d) => {
                Nfsstat4::DENIED.encode(w);
                d.encode(w);
            }
            LockT4Res::Err(s) => s.encode(w),
        }
    }
}
impl OpStatus for LockT4Res<'_> {
    fn status(&self) -> Nfsstat4 {
        match self {
            LockT4Res::Ok => Nfsstat4::OK,
            LockT4Res::Denied(_) => Nfsstat4::DENIED,
            LockT4Res::Err(s) => *s,
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.12.1: LOCKU4args.
    pub struct LockU4Args {
        pub locktype: NfsLockType4,
        pub seqid: u32,
        pub lock_stateid: Stateid4,
        pub offset: u64,
        pub length: u64,
    }
}

// ---- 18.13 LOOKUP ----

xdr_struct! {
    /// RFC 8881 18.13.1: LOOKUP4args.
    pub struct Lookup4Args<'a> {
        pub objname: Component4<'a>,
    }
}

// ---- 18.15 NVERIFY, 18.31 VERIFY ----

xdr_struct! {
    /// RFC 8881 18.15.1: NVERIFY4args (and 18.31.1 VERIFY4args).
    pub struct Verify4Args<'a> {
        pub obj_attributes: Fattr4<'a>,
    }
}

// ---- 18.16 OPEN ----

/// RFC 8881 18.16.1: OPEN4_SHARE_ACCESS_* and OPEN4_SHARE_DENY_* values
/// and the WANT flags of share_access.
pub mod share {
    pub const ACCESS_READ: u32 = 0x0001;
    pub const ACCESS_WRITE: u32 = 0x0002;
    pub const ACCESS_BOTH: u32 = 0x0003;
    pub const DENY_NONE: u32 = 0x0000;
    pub const DENY_READ: u32 = 0x0001;
    pub const DENY_WRITE: u32 = 0x0002;
    pub const DENY_BOTH: u32 = 0x0003;
    pub const WANT_DELEG_MASK: u32 = 0xFF00;
    pub const WANT_NO_PREFERENCE: u32 = 0x0000;
    pub const WANT_READ_DELEG: u32 = 0x0100;
    pub const WANT_WRITE_DELEG: u32 = 0x0200;
    pub const WANT_ANY_DELEG: u32 = 0x0300;
    pub const WANT_NO_DELEG: u32 = 0x0400;
    pub const WANT_CANCEL: u32 = 0x0500;
}

/// RFC 8881 18.16.2: OPEN4_RESULT_* flags of rflags.
pub mod open4_result {
    pub const CONFIRM: u32 = 0x0002;
    pub const LOCKTYPE_POSIX: u32 = 0x0004;
    pub const PRESERVE_UNLINKED: u32 = 0x0008;
    pub const MAY_NOTIFY_LOCK: u32 = 0x0020;
}

xdr_struct! {
    /// RFC 8881 18.16.1: creatverfattr (EXCLUSIVE4_1).
    pub struct CreatVerfAttr<'a> {
        pub cva_verf: Verifier4,
        pub cva_attrs: Fattr4<'a>,
    }
}

/// RFC 8881 18.16.1: createhow4, `union switch (createmode4 mode)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow4<'a> {
    Unchecked(Fattr4<'a>),
    Guarded(Fattr4<'a>),
    Exclusive(Verifier4),
    Exclusive41(CreatVerfAttr<'a>),
}

impl<'a> XdrDecode<'a> for CreateHow4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            0 => CreateHow4::Unchecked(r.get()?),
            1 => CreateHow4::Guarded(r.get()?),
            2 => CreateHow4::Exclusive(r.get()?),
            3 => CreateHow4::Exclusive41(r.get()?),
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "createmode4",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for CreateHow4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            CreateHow4::Unchecked(a) => {
                w.put_u32(0);
                a.encode(w);
            }
            CreateHow4::Guarded(a) => {
                w.put_u32(1);
                a.encode(w);
            }
            CreateHow4::Exclusive(v) => {
                w.put_u32(2);
                v.encode(w);
            }
            CreateHow4::Exclusive41(c) => {
                w.put_u32(3);
                c.encode(w);
            }
        }
    }
}

/// RFC 8881 18.16.1: openflag4, `union switch (opentype4 opentype)`;
/// `None` is OPEN4_NOCREATE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenFlag4<'a> {
    NoCreate,
    Create(CreateHow4<'a>),
}

impl<'a> XdrDecode<'a> for OpenFlag4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            0 => OpenFlag4::NoCreate,
            1 => OpenFlag4::Create(r.get()?),
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "opentype4",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for OpenFlag4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            OpenFlag4::NoCreate => w.put_u32(0),
            OpenFlag4::Create(how) => {
                w.put_u32(1);
                how.encode(w);
            }
        }
    }
}

xdr_enum! {
    /// RFC 8881 18.16.1: open_delegation_type4.
    pub enum OpenDelegationType4 {
        None = 0,
        Read = 1,
        Write = 2,
        NoneExt = 3,
    }
}

xdr_struct! {
    /// RFC 8881 18.16.1: open_claim_delegate_cur4.
    pub struct OpenClaimDelegateCur4<'a> {
        pub delegate_stateid: Stateid4,
        pub file: Component4<'a>,
    }
}

/// RFC 8881 18.16.1: open_claim4, `union switch (open_claim_type4 claim)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenClaim4<'a> {
    /// CLAIM_NULL: open `file` in the current (directory) filehandle.
    Null(Component4<'a>),
    /// CLAIM_PREVIOUS: reclaim after a server restart.
    Previous(OpenDelegationType4),
    DelegateCur(OpenClaimDelegateCur4<'a>),
    DelegatePrev(Component4<'a>),
    /// CLAIM_FH: open the current filehandle itself.
    Fh,
    DelegCurFh(Stateid4),
    DelegPrevFh,
}

impl<'a> XdrDecode<'a> for OpenClaim4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            0 => OpenClaim4::Null(r.get()?),
            1 => OpenClaim4::Previous(r.get()?),
            2 => OpenClaim4::DelegateCur(r.get()?),
            3 => OpenClaim4::DelegatePrev(r.get()?),
            4 => OpenClaim4::Fh,
            5 => OpenClaim4::DelegCurFh(r.get()?),
            6 => OpenClaim4::DelegPrevFh,
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "open_claim_type4",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for OpenClaim4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            OpenClaim4::Null(f) => {
                w.put_u32(0);
                f.encode(w);
            }
            OpenClaim4::Previous(t) => {
                w.put_u32(1);
                t.encode(w);
            }
            OpenClaim4::DelegateCur(c) => {
                w.put_u32(2);
                c.encode(w);
            }
            OpenClaim4::DelegatePrev(f) => {
                w.put_u32(3);
                f.encode(w);
            }
            OpenClaim4::Fh => w.put_u32(4),
            OpenClaim4::DelegCurFh(s) => {
                w.put_u32(5);
                s.encode(w);
            }
            OpenClaim4::DelegPrevFh => w.put_u32(6),
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.16.1: OPEN4args.
    pub struct Open4Args<'a> {
        pub seqid: u32,
        pub share_access: u32,
        pub share_deny: u32,
        pub owner: OpenOwner4<'a>,
        pub openhow: OpenFlag4<'a>,
        pub claim: OpenClaim4<'a>,
    }
}

/// RFC 8881 18.16.2: nfs_space_limit4, `union switch (limit_by4 limitby)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceLimit4 {
    Size(u64),
    Blocks {
        num_blocks: u32,
        bytes_per_block: u32,
    },
}

impl<'a> XdrDecode<'a> for SpaceLimit4 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            1 => SpaceLimit4::Size(r.get_u64()?),
            2 => SpaceLimit4::Blocks {
                num_blocks: r.get_u32()?,
                bytes_per_block: r.get_u32()?,
            },
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "limit_by4",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for SpaceLimit4 {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            SpaceLimit4::Size(s) => {
                w.put_u32(1);
                w.put_u64(*s);
            }
            SpaceLimit4::Blocks {
                num_blocks,
                bytes_per_block,
            } => {
                w.put_u32(2);
                w.put_u32(*num_blocks);
                w.put_u32(*bytes_per_block);
            }
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.16.2: open_read_delegation4.
    pub struct OpenReadDelegation4<'a> {
        pub stateid: Stateid4,
        pub recall: bool,
        pub permissions: NfsAce4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.16.2: open_write_delegation4.
    pub struct OpenWriteDelegation4<'a> {
        pub stateid: Stateid4,
        pub recall: bool,
        pub space_limit: SpaceLimit4,
        pub permissions: NfsAce4<'a>,
    }
}

/// RFC 8881 18.16.2: open_none_delegation4, why no delegation was given
/// (`union switch (why_no_delegation4 ond_why)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenNoneDelegation4 {
    /// WND4_CONTENTION (1) with ond_server_will_push_deleg.
    Contention(bool),
    /// WND4_RESOURCE (2) with ond_server_will_signal_avail.
    Resource(bool),
    /// Any other why_no_delegation4 value (void arm).
    Other(u32),
}

impl<'a> XdrDecode<'a> for OpenNoneDelegation4 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            1 => OpenNoneDelegation4::Contention(r.get_bool()?),
            2 => OpenNoneDelegation4::Resource(r.get_bool()?),
            v => OpenNoneDelegation4::Other(v),
        })
    }
}
impl XdrEncode for OpenNoneDelegation4 {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            OpenNoneDelegation4::Contention(b) => {
                w.put_u32(1);
                w.put_bool(*b);
            }
            OpenNoneDelegation4::Resource(b) => {
                w.put_u32(2);
                w.put_bool(*b);
            }
            OpenNoneDelegation4::Other(v) => w.put_u32(*v),
        }
    }
}

/// RFC 8881 18.16.2: open_delegation4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenDelegation4<'a> {
    None,
    Read(OpenReadDelegation4<'a>),
    Write(OpenWriteDelegation4<'a>),
    NoneExt(OpenNoneDelegation4),
}

impl<'a> XdrDecode<'a> for OpenDelegation4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match OpenDelegationType4::decode(r)? {
            OpenDelegationType4::None => OpenDelegation4::None,
            OpenDelegationType4::Read => OpenDelegation4::Read(r.get()?),
            OpenDelegationType4::Write => OpenDelegation4::Write(r.get()?),
            OpenDelegationType4::NoneExt => OpenDelegation4::NoneExt(r.get()?),
        })
    }
}
impl XdrEncode for OpenDelegation4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            OpenDelegation4::None => OpenDelegationType4::None.encode(w),
            OpenDelegation4::Read(d) => {
                OpenDelegationType4::Read.encode(w);
                d.encode(w);
            }
            OpenDelegation4::Write(d) => {
                OpenDelegationType4::Write.encode(w);
                d.encode(w);
            }
            OpenDelegation4::NoneExt(n) => {
                OpenDelegationType4::NoneExt.encode(w);
                n.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 8881 18.16.2: OPEN4resok.
    pub struct Open4ResOk<'a> {
        pub stateid: Stateid4,
        pub cinfo: ChangeInfo4,
        pub rflags: u32,
        pub attrset: Bitmap4,
        pub delegation: OpenDelegation4<'a>,
    }
}

// ---- 18.18 OPEN_DOWNGRADE ----

xdr_struct! {
    /// RFC 8881 18.18.1: OPEN_DOWNGRADE4args.
    pub struct OpenDowngrade4Args {
        pub open_stateid: Stateid4,
        pub seqid: u32,
        pub share_access: u32,
        pub share_deny: u32,
    }
}

// ---- 18.19 PUTFH ----

xdr_struct! {
    /// RFC 8881 18.19.1: PUTFH4args.
    pub struct PutFh4Args<'a> {
        pub object: NfsFh4<'a>,
    }
}

// ---- 18.22 READ ----

xdr_struct! {
    /// RFC 8881 18.22.1: READ4args.
    pub struct Read4Args {
        pub stateid: Stateid4,
        pub offset: u64,
        pub count: u32,
    }
}
xdr_struct! {
    /// RFC 8881 18.22.2: READ4resok; `data` borrows the payload.
    pub struct Read4ResOk<'a> {
        pub eof: bool,
        pub data: Opaque<'a, NFS4_MAX_DATA>,
    }
}

// ---- 18.23 READDIR ----

xdr_struct! {
    /// RFC 8881 18.23.1: READDIR4args.
    pub struct ReadDir4Args {
        pub cookie: u64,
        pub cookieverf: Verifier4,
        pub dircount: u32,
        pub maxcount: u32,
        pub attr_request: Bitmap4,
    }
}
xdr_struct! {
    /// RFC 8881 18.23.2: entry4 without its `nextentry` link.
    pub struct Entry4<'a> {
        pub cookie: u64,
        pub name: Component4<'a>,
        pub attrs: Fattr4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.23.2: dirlist4.
    pub struct DirList4<'a> {
        pub entries: LinkedList<Entry4<'a>, NFS4_MAX_DIR_ENTRIES>,
        pub eof: bool,
    }
}
xdr_struct! {
    /// RFC 8881 18.23.2: READDIR4resok.
    pub struct ReadDir4ResOk<'a> {
        pub cookieverf: Verifier4,
        pub reply: DirList4<'a>,
    }
}

// ---- 18.24 READLINK ----

xdr_struct! {
    /// RFC 8881 18.24.2: READLINK4resok.
    pub struct ReadLink4ResOk<'a> {
        pub link: LinkText4<'a>,
    }
}

// ---- 18.25 REMOVE ----

xdr_struct! {
    /// RFC 8881 18.25.1: REMOVE4args.
    pub struct Remove4Args<'a> {
        pub target: Component4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.25.2: REMOVE4resok.
    pub struct Remove4ResOk {
        pub cinfo: ChangeInfo4,
    }
}

// ---- 18.26 RENAME ----

xdr_struct! {
    /// RFC 8881 18.26.1: RENAME4args (saved filehandle: source directory;
    /// current: target directory).
    pub struct Rename4Args<'a> {
        pub oldname: Component4<'a>,
        pub newname: Component4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.26.2: RENAME4resok.
    pub struct Rename4ResOk {
        pub source_cinfo: ChangeInfo4,
        pub target_cinfo: ChangeInfo4,
    }
}

// ---- 18.29 SECINFO, 18.45 SECINFO_NO_NAME ----

xdr_struct! {
    /// RFC 8881 18.29.1: SECINFO4args.
    pub struct SecInfo4Args<'a> {
        pub name: Component4<'a>,
    }
}

xdr_enum! {
    /// RFC 2203 / RFC 8881 18.29.2: rpc_gss_svc_t.
    pub enum RpcGssSvc {
        None = 1,
        Integrity = 2,
        Privacy = 3,
    }
}

xdr_struct! {
    /// RFC 8881 18.29.2: rpcsec_gss_info.
    pub struct RpcSecGssInfo<'a> {
        pub oid: SecOid4<'a>,
        pub qop: u32,
        pub service: RpcGssSvc,
    }
}

/// RFC 8881 18.29.2: secinfo4, `union switch (uint32_t flavor)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecInfo4<'a> {
    RpcSecGss(RpcSecGssInfo<'a>),
    /// AUTH_NONE, AUTH_SYS or another flavour without parameters.
    Flavor(u32),
}

impl<'a> XdrDecode<'a> for SecInfo4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            RPCSEC_GSS => SecInfo4::RpcSecGss(r.get()?),
            f => SecInfo4::Flavor(f),
        })
    }
}
impl XdrEncode for SecInfo4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            SecInfo4::RpcSecGss(i) => {
                w.put_u32(RPCSEC_GSS);
                i.encode(w);
            }
            SecInfo4::Flavor(f) => w.put_u32(*f),
        }
    }
}

/// RFC 8881 18.29.2: SECINFO4resok, `secinfo4 SECINFO4resok<>`.
pub type SecInfo4ResOk<'a> = List<SecInfo4<'a>, NFS4_MAX_SECINFO>;

// ---- 18.30 SETATTR ----

xdr_struct! {
    /// RFC 8881 18.30.1: SETATTR4args.
    pub struct SetAttr4Args<'a> {
        pub stateid: Stateid4,
        pub obj_attributes: Fattr4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 18.30.2: SETATTR4res; `attrsset` is present whatever the
    /// status.
    pub struct SetAttr4Res {
        pub status: Nfsstat4,
        pub attrsset: Bitmap4,
    }
}
impl OpStatus for SetAttr4Res {
    fn status(&self) -> Nfsstat4 {
        self.status
    }
}

// ---- 18.32 WRITE ----

xdr_struct! {
    /// RFC 8881 18.32.1: WRITE4args; `data` borrows the payload from the
    /// record (no copy).
    pub struct Write4Args<'a> {
        pub stateid: Stateid4,
        pub offset: u64,
        pub stable: StableHow4,
        pub data: Opaque<'a, NFS4_MAX_DATA>,
    }
}
xdr_struct! {
    /// RFC 8881 18.32.2: WRITE4resok.
    pub struct Write4ResOk {
        pub count: u32,
        pub committed: StableHow4,
        pub writeverf: Verifier4,
    }
}

/// RFC 8881 18.2, 18.12, 18.18: results whose resok is a single stateid (CLOSE, LOCKU,
/// OPEN_DOWNGRADE).
pub type Stateid4Res = Nfs4Res<Stateid4>;
