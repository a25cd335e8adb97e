//! NFS version 4.1 (RFC 8881) and 4.2 (RFC 7862), program 100003 version 4:
//! COMPOUND and the operations duet serves, with the shared types of RFC
//! 8881 section 3 and the attribute codec of section 5.
//!
//! Layout: this file holds the shared types and status codes;
//! [`compound`] the COMPOUND envelope and the per-operation dispatch;
//! [`ops`] the file-system operations; [`session`] the session and client
//! operations of 4.1; [`v42`] the 4.2 additions; [`attrs`] the fattr4
//! value codec.

pub mod attrs;
pub mod compound;
pub mod ops;
pub mod session;
pub mod v42;
pub mod xattr;
pub mod callback;

pub use attrs::Attrs;
pub use compound::{ArgOp4, Compound4Args, Compound4Res, CompoundLimits, CompoundStop, ResOp4};
pub use ops::*;
pub use session::*;
pub use v42::*;
pub use xattr::*;

use super::xdr::{
    xdr_enum, xdr_status, xdr_struct, Name, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader,
    XdrWriter,
};

pub const NFS_VERSION_4: u32 = 4;
/// RFC 8881 section 2: procedure numbers of program 100003 version 4.
pub const NFSPROC4_NULL: u32 = 0;
pub const NFSPROC4_COMPOUND: u32 = 1;

/// RFC 8881 section 3.2: NFS4_FHSIZE, bound on nfs_fh4.
pub const NFS4_FHSIZE: u32 = 128;
/// RFC 8881 section 3.2: NFS4_OPAQUE_LIMIT, bound on owners and ids.
pub const NFS4_OPAQUE_LIMIT: u32 = 1024;
/// Bound on component4: NAME_MAX of what duet serves. Longer names
/// decode to NFS4ERR_NAMETOOLONG.
pub const NFS4_MAX_NAME: u32 = 255;
/// Bound on linktext4 (symbolic link targets): PATH_MAX.
pub const NFS4_MAX_LINKTEXT: u32 = 4096;
/// Bound on the COMPOUND tag and other utf8 strings without their own bound.
pub const NFS4_MAX_UTF8STR: u32 = 1024;
/// Bound on the words of a bitmap4: 8 words name attributes 0..255, well
/// past the last one defined (80).
pub const NFS4_MAX_BITMAP_WORDS: usize = 8;
/// Bound on fattr4 attr_vals (ACLs make it the largest attribute payload).
pub const NFS4_MAX_ATTRLIST: u32 = 1 << 20;
/// Bound on READ/WRITE payloads: above any maxread/maxwrite duet advertises.
pub const NFS4_MAX_DATA: u32 = 4 << 20;
/// Bound on directory entries in one READDIR reply.
pub const NFS4_MAX_DIR_ENTRIES: u32 = 1 << 16;
/// Bound on the flavours in a SECINFO reply.
pub const NFS4_MAX_SECINFO: u32 = 16;

xdr_status! {
    /// RFC 8881 section 15.1 (and RFC 7862 section 11.1): enum nfsstat4.
    pub struct Nfsstat4 {
        OK = 0,
        PERM = 1,
        NOENT = 2,
        IO = 5,
        NXIO = 6,
        ACCESS = 13,
        EXIST = 17,
        XDEV = 18,
        NOTDIR = 20,
        ISDIR = 21,
        INVAL = 22,
        FBIG = 27,
        NOSPC = 28,
        ROFS = 30,
        MLINK = 31,
        NAMETOOLONG = 63,
        NOTEMPTY = 66,
        DQUOT = 69,
        STALE = 70,
        BADHANDLE = 10001,
        BAD_COOKIE = 10003,
        NOTSUPP = 10004,
        TOOSMALL = 10005,
        SERVERFAULT = 10006,
        BADTYPE = 10007,
        DELAY = 10008,
        SAME = 10009,
        DENIED = 10010,
        EXPIRED = 10011,
        LOCKED = 10012,
        GRACE = 10013,
        FHEXPIRED = 10014,
        SHARE_DENIED = 10015,
        WRONGSEC = 10016,
        CLID_INUSE = 10017,
        RESOURCE = 10018,
        MOVED = 10019,
        NOFILEHANDLE = 10020,
        MINOR_VERS_MISMATCH = 10021,
        STALE_CLIENTID = 10022,
        STALE_STATEID = 10023,
        OLD_STATEID = 10024,
        BAD_STATEID = 10025,
        BAD_SEQID = 10026,
        NOT_SAME = 10027,
        LOCK_RANGE = 10028,
        SYMLINK = 10029,
        RESTOREFH = 10030,
        LEASE_MOVED = 10031,
        ATTRNOTSUPP = 10032,
        NO_GRACE = 10033,
        RECLAIM_BAD = 10034,
        RECLAIM_CONFLICT = 10035,
        BADXDR = 10036,
        LOCKS_HELD = 10037,
        OPENMODE = 10038,
        BADOWNER = 10039,
        BADCHAR = 10040,
        BADNAME = 10041,
        BAD_RANGE = 10042,
        LOCK_NOTSUPP = 10043,
        OP_ILLEGAL = 10044,
        DEADLOCK = 10045,
        FILE_OPEN = 10046,
        ADMIN_REVOKED = 10047,
        CB_PATH_DOWN = 10048,
        BADIOMODE = 10049,
        BADLAYOUT = 10050,
        BAD_SESSION_DIGEST = 10051,
        BADSESSION = 10052,
        BADSLOT = 10053,
        COMPLETE_ALREADY = 10054,
        CONN_NOT_BOUND_TO_SESSION = 10055,
        DELEG_ALREADY_WANTED = 10056,
        BACK_CHAN_BUSY = 10057,
        LAYOUTTRYLATER = 10058,
        LAYOUTUNAVAILABLE = 10059,
        NOMATCHING_LAYOUT = 10060,
        RECALLCONFLICT = 10061,
        UNKNOWN_LAYOUTTYPE = 10062,
        SEQ_MISORDERED = 10063,
        SEQUENCE_POS = 10064,
        REQ_TOO_BIG = 10065,
        REP_TOO_BIG = 10066,
        REP_TOO_BIG_TO_CACHE = 10067,
        RETRY_UNCACHED_REP = 10068,
        UNSAFE_COMPOUND = 10069,
        TOO_MANY_OPS = 10070,
        OP_NOT_IN_SESSION = 10071,
        HASH_ALG_UNSUPP = 10072,
        CLIENTID_BUSY = 10074,
        PNFS_IO_HOLE = 10075,
        SEQ_FALSE_RETRY = 10076,
        BAD_HIGH_SLOT = 10077,
        DEADSESSION = 10078,
        ENCR_ALG_UNSUPP = 10079,
        PNFS_NO_LAYOUT = 10080,
        NOT_ONLY_OP = 10081,
        WRONG_CRED = 10082,
        WRONG_TYPE = 10083,
        DIRDELEG_UNAVAIL = 10084,
        REJECT_DELEG = 10085,
        RETURNCONFLICT = 10086,
        DELEG_REVOKED = 10087,
        PARTNER_NOTSUPP = 10088,
        PARTNER_NO_AUTH = 10089,
        UNION_NOTSUPP = 10090,
        OFFLOAD_DENIED = 10091,
        WRONG_LFS = 10092,
        BADLABEL = 10093,
        OFFLOAD_NO_REQS = 10094,
        /// RFC 8276 8.5.
        NOXATTR = 10095,
        XATTR2BIG = 10096,
    }
}

/// RFC 8881 section 16.2.1 (and RFC 7862 section 14): nfs_opnum4.
pub mod opnum {
    pub const ACCESS: u32 = 3;
    pub const CLOSE: u32 = 4;
    pub const COMMIT: u32 = 5;
    pub const CREATE: u32 = 6;
    pub const DELEGPURGE: u32 = 7;
    pub const DELEGRETURN: u32 = 8;
    pub const GETATTR: u32 = 9;
    pub const GETFH: u32 = 10;
    pub const LINK: u32 = 11;
    pub const LOCK: u32 = 12;
    pub const LOCKT: u32 = 13;
    pub const LOCKU: u32 = 14;
    pub const LOOKUP: u32 = 15;
    pub const LOOKUPP: u32 = 16;
    pub const NVERIFY: u32 = 17;
    pub const OPEN: u32 = 18;
    pub const OPENATTR: u32 = 19;
    /// NFSv4.0 only.
    pub const OPEN_CONFIRM: u32 = 20;
    pub const OPEN_DOWNGRADE: u32 = 21;
    pub const PUTFH: u32 = 22;
    pub const PUTPUBFH: u32 = 23;
    pub const PUTROOTFH: u32 = 24;
    pub const READ: u32 = 25;
    pub const READDIR: u32 = 26;
    pub const READLINK: u32 = 27;
    pub const REMOVE: u32 = 28;
    pub const RENAME: u32 = 29;
    /// NFSv4.0 only.
    pub const RENEW: u32 = 30;
    pub const RESTOREFH: u32 = 31;
    pub const SAVEFH: u32 = 32;
    pub const SECINFO: u32 = 33;
    pub const SETATTR: u32 = 34;
    /// NFSv4.0 only.
    pub const SETCLIENTID: u32 = 35;
    /// NFSv4.0 only.
    pub const SETCLIENTID_CONFIRM: u32 = 36;
    pub const VERIFY: u32 = 37;
    pub const WRITE: u32 = 38;
    /// NFSv4.0 only.
    pub const RELEASE_LOCKOWNER: u32 = 39;
    pub const BACKCHANNEL_CTL: u32 = 40;
    pub const BIND_CONN_TO_SESSION: u32 = 41;
    pub const EXCHANGE_ID: u32 = 42;
    pub const CREATE_SESSION: u32 = 43;
    pub const DESTROY_SESSION: u32 = 44;
    pub const FREE_STATEID: u32 = 45;
    pub const GET_DIR_DELEGATION: u32 = 46;
    pub const GETDEVICEINFO: u32 = 47;
    pub const GETDEVICELIST: u32 = 48;
    pub const LAYOUTCOMMIT: u32 = 49;
    pub const LAYOUTGET: u32 = 50;
    pub const LAYOUTRETURN: u32 = 51;
    pub const SECINFO_NO_NAME: u32 = 52;
    pub const SEQUENCE: u32 = 53;
    pub const SET_SSV: u32 = 54;
    pub const TEST_STATEID: u32 = 55;
    pub const WANT_DELEGATION: u32 = 56;
    pub const DESTROY_CLIENTID: u32 = 57;
    pub const RECLAIM_COMPLETE: u32 = 58;
    /// RFC 7862 (NFSv4.2) from here on.
    pub const ALLOCATE: u32 = 59;
    pub const COPY: u32 = 60;
    pub const COPY_NOTIFY: u32 = 61;
    pub const DEALLOCATE: u32 = 62;
    pub const IO_ADVISE: u32 = 63;
    pub const LAYOUTERROR: u32 = 64;
    pub const LAYOUTSTATS: u32 = 65;
    pub const OFFLOAD_CANCEL: u32 = 66;
    pub const OFFLOAD_STATUS: u32 = 67;
    pub const READ_PLUS: u32 = 68;
    pub const SEEK: u32 = 69;
    pub const WRITE_SAME: u32 = 70;
    pub const CLONE: u32 = 71;
    /// RFC 8276 section 8 (extended attributes, minor version 2).
    pub const GETXATTR: u32 = 72;
    pub const SETXATTR: u32 = 73;
    pub const LISTXATTRS: u32 = 74;
    pub const REMOVEXATTR: u32 = 75;
    /// RFC 8881 18.52: the result opcode for an unknown operation.
    pub const ILLEGAL: u32 = 10044;
}

/// RFC 8881 section 3.2: verifier4.
pub type Verifier4 = [u8; 8];
/// RFC 8881 section 3.2: sessionid4.
pub type SessionId4 = [u8; 16];
/// RFC 8881 section 3.2 and 4: nfs_fh4, `opaque nfs_fh4<NFS4_FHSIZE>`.
pub type NfsFh4<'a> = Opaque<'a, NFS4_FHSIZE>;
/// RFC 8881 section 3.2: component4, bounded by [`NFS4_MAX_NAME`].
pub type Component4<'a> = Name<'a, NFS4_MAX_NAME>;
/// RFC 8881 section 3.2: linktext4.
pub type LinkText4<'a> = Opaque<'a, NFS4_MAX_LINKTEXT>;
/// RFC 8881 section 3.2: utf8str_cs / utf8str_cis / utf8str_mixed (the
/// server checks UTF-8 where it cares; on the wire they are opaque).
pub type Utf8Str<'a> = Opaque<'a, NFS4_MAX_UTF8STR>;
/// RFC 8881 section 3.2: sec_oid4.
pub type SecOid4<'a> = Opaque<'a, NFS4_OPAQUE_LIMIT>;

/// RFC 8881 section 3.2: bitmap4, `uint32_t bitmap4<>`, bounded by
/// [`NFS4_MAX_BITMAP_WORDS`] and held inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Bitmap4 {
    words: [u32; NFS4_MAX_BITMAP_WORDS],
    len: usize,
}

impl Bitmap4 {
    pub fn new() -> Self {
        Self::default()
    }

    /// From words, as on the wire; `None` if more than the bound.
    pub fn from_words(words: &[u32]) -> Option<Self> {
        if words.len() > NFS4_MAX_BITMAP_WORDS {
            return None;
        }
        let mut b = Bitmap4::default();
        b.words[..words.len()].copy_from_slice(words);
        b.len = words.len();
        Some(b)
    }

    /// From attribute numbers; numbers past the bound are ignored.
    pub fn from_bits(bits: &[u32]) -> Self {
        let mut b = Bitmap4::default();
        for &bit in bits {
            b.set(bit);
        }
        b
    }

    pub fn words(&self) -> &[u32] {
        &self.words[..self.len]
    }

    pub fn is_set(&self, bit: u32) -> bool {
        let word = (bit / 32) as usize;
        self.words()
            .get(word)
            .is_some_and(|w| w & (1 << (bit % 32)) != 0)
    }

    /// Sets `bit`, growing the word count as needed. Returns false (and
    /// changes nothing) for a bit past the bound.
    pub fn set(&mut self, bit: u32) -> bool {
        let word = (bit / 32) as usize;
        if word >= NFS4_MAX_BITMAP_WORDS {
            return false;
        }
        if self.len <= word {
            self.len = word + 1;
        }
        self.words[word] |= 1 << (bit % 32);
        true
    }

    pub fn clear(&mut self, bit: u32) {
        let word = (bit / 32) as usize;
        if let Some(w) = self.words.get_mut(word) {
            *w &= !(1 << (bit % 32));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.words().iter().all(|w| *w == 0)
    }

    /// The bits set, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words().iter().enumerate().flat_map(|(i, &w)| {
            (0..32u32)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u32 * 32 + b)
        })
    }

    /// Bits set in both.
    pub fn intersect(&self, other: &Bitmap4) -> Bitmap4 {
        let mut b = Bitmap4 {
            len: self.len.min(other.len),
            ..Default::default()
        };
        for i in 0..b.len {
            b.words[i] = self.words[i] & other.words[i];
        }
        b
    }
}

impl std::fmt::Debug for Bitmap4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> XdrDecode<'a> for Bitmap4 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let n = r.get_count(NFS4_MAX_BITMAP_WORDS as u32, 4, "bitmap4")?;
        let mut b = Bitmap4 {
            len: n,
            ..Default::default()
        };
        for i in 0..n {
            b.words[i] = r.get_u32()?;
        }
        Ok(b)
    }
}
impl XdrEncode for Bitmap4 {
    fn encode(&self, w: &mut XdrWriter) {
        w.put_array(self.words(), |w, v| w.put_u32(*v));
    }
}

xdr_struct! {
    /// RFC 8881 section 3.3.1: nfstime4.
    pub struct NfsTime4 {
        pub seconds: i64,
        pub nseconds: u32,
    }
}

xdr_struct! {
    /// RFC 8881 section 3.3.14: stateid4.
    pub struct Stateid4 {
        pub seqid: u32,
        pub other: [u8; 12],
    }
}

impl Stateid4 {
    /// RFC 8881 8.2.3: the anonymous stateid (all zeros).
    pub const ANONYMOUS: Stateid4 = Stateid4 {
        seqid: 0,
        other: [0; 12],
    };
    /// RFC 8881 8.2.3: the READ bypass stateid (all ones).
    pub const BYPASS: Stateid4 = Stateid4 {
        seqid: u32::MAX,
        other: [0xff; 12],
    };
    /// RFC 8881 8.2.3: the current stateid (seqid 1, other zero).
    pub const CURRENT: Stateid4 = Stateid4 {
        seqid: 1,
        other: [0; 12],
    };
}

impl Copy for Stateid4 {}
impl Copy for NfsTime4 {}

xdr_struct! {
    /// RFC 8881 section 3.3.7: fattr4, an attribute bitmap and the values
    /// of the attributes it names, in order; [`Attrs`] parses `attr_vals`.
    pub struct Fattr4<'a> {
        pub attrmask: Bitmap4,
        pub attr_vals: Opaque<'a, NFS4_MAX_ATTRLIST>,
    }
}

xdr_struct! {
    /// RFC 8881 section 3.3.8: change_info4.
    pub struct ChangeInfo4 {
        pub atomic: bool,
        pub before: u64,
        pub after: u64,
    }
}

xdr_struct! {
    /// RFC 8881 section 3.3.10: state_owner4 (open_owner4,
    /// lock_owner4).
    pub struct StateOwner4<'a> {
        pub clientid: u64,
        pub owner: Opaque<'a, NFS4_OPAQUE_LIMIT>,
    }
}

/// RFC 8881 section 3.3.11: open_owner4.
pub type OpenOwner4<'a> = StateOwner4<'a>;
/// RFC 8881 section 3.3.12: lock_owner4.
pub type LockOwner4<'a> = StateOwner4<'a>;

xdr_struct! {
    /// RFC 8881 section 3.3.4: specdata4.
    pub struct SpecData4 {
        pub specdata1: u32,
        pub specdata2: u32,
    }
}

xdr_enum! {
    /// RFC 8881 section 5.8.1.2: nfs_ftype4.
    pub enum NfsFtype4 {
        Reg = 1,
        Dir = 2,
        Blk = 3,
        Chr = 4,
        Lnk = 5,
        Sock = 6,
        Fifo = 7,
        AttrDir = 8,
        NamedAttr = 9,
    }
}

xdr_enum! {
    /// RFC 8881 section 18.32.1: stable_how4.
    pub enum StableHow4 {
        Unstable = 0,
        DataSync = 1,
        FileSync = 2,
    }
}

xdr_struct! {
    /// RFC 8881 section 6.2.1: nfsace4.
    pub struct NfsAce4<'a> {
        pub type_: u32,
        pub flag: u32,
        pub access_mask: u32,
        pub who: Utf8Str<'a>,
    }
}

/// RFC 8881 section 15.2: the `union switch (nfsstat4 status)` of most
/// operations' results: a body for NFS4_OK, nothing otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs4Res<T> {
    Ok(T),
    Err(Nfsstat4),
}

impl<T> Nfs4Res<T> {
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Nfs4Res::Ok(_) => Nfsstat4::OK,
            Nfs4Res::Err(s) => *s,
        }
    }
}

/// A result that is the status alone (PUTFH, LOOKUP, SAVEFH and others).
pub type Status4Res = Nfs4Res<()>;

impl<'a, T: XdrDecode<'a>> XdrDecode<'a> for Nfs4Res<T> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let status = Nfsstat4::decode(r)?;
        if status == Nfsstat4::OK {
            Ok(Nfs4Res::Ok(T::decode(r)?))
        } else {
            Ok(Nfs4Res::Err(status))
        }
    }
}
impl<T: XdrEncode> XdrEncode for Nfs4Res<T> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            Nfs4Res::Ok(v) => {
                Nfsstat4::OK.encode(w);
                v.encode(w);
            }
            Nfs4Res::Err(s) => s.encode(w),
        }
    }
}

/// The status of an operation's result, whatever its shape.
pub trait OpStatus {
    fn status(&self) -> Nfsstat4;
}

impl<T> OpStatus for Nfs4Res<T> {
    fn status(&self) -> Nfsstat4 {
        Nfs4Res::status(self)
    }
}
