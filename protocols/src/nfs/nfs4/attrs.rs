//! The fattr4 value codec (RFC 8881 sections 5.6-5.8, RFC 7862 section
//! 12.2, RFC 8275 mode_umask, RFC 8276 xattr_support): [`Attrs`] holds one optional value per attribute; it decodes the
//! `attr_vals` of an [`Fattr4`] by walking the bitmap in ascending order
//! and encodes in the same order.
//!
//! Architecture Invariant: a bitmap naming an attribute this codec cannot
//! parse is rejected with [`XdrError::AttrNotSupported`]
//! (NFS4ERR_ATTRNOTSUPP), never skipped: values are not self-delimiting,
//! so guessing would misparse everything after it.

use super::{Bitmap4, Fattr4, NfsAce4, NfsFh4, NfsFtype4, NfsTime4, Nfsstat4, SpecData4, Utf8Str};
use crate::nfs::xdr::{
    xdr_struct, List, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter,
};

/// Bound on the ACEs of one ACL.
pub const NFS4_MAX_ACES: u32 = 1024;
/// Bound on the components of a pathname4 and the entries of other
/// attribute arrays.
pub const NFS4_MAX_ATTR_ARRAY: u32 = 256;

/// RFC 8881 5.6 / 5.7 / 5.8 and RFC 7862 12.2: attribute numbers.
pub mod fattr4 {
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const ACL: u32 = 12;
    pub const ACLSUPPORT: u32 = 13;
    pub const ARCHIVE: u32 = 14;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const FS_LOCATIONS: u32 = 24;
    pub const HIDDEN: u32 = 25;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MIMETYPE: u32 = 32;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const QUOTA_AVAIL_HARD: u32 = 38;
    pub const QUOTA_AVAIL_SOFT: u32 = 39;
    pub const QUOTA_USED: u32 = 40;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const SYSTEM: u32 = 46;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_BACKUP: u32 = 49;
    pub const TIME_CREATE: u32 = 50;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const DIR_NOTIF_DELAY: u32 = 56;
    pub const DIRENT_NOTIF_DELAY: u32 = 57;
    pub const DACL: u32 = 58;
    pub const SACL: u32 = 59;
    pub const CHANGE_POLICY: u32 = 60;
    pub const FS_STATUS: u32 = 61;
    pub const FS_LAYOUT_TYPE: u32 = 62;
    pub const LAYOUT_HINT: u32 = 63;
    pub const LAYOUT_TYPE: u32 = 64;
    pub const LAYOUT_BLKSIZE: u32 = 65;
    pub const LAYOUT_ALIGNMENT: u32 = 66;
    pub const FS_LOCATIONS_INFO: u32 = 67;
    pub const MDSTHRESHOLD: u32 = 68;
    pub const RETENTION_GET: u32 = 69;
    pub const RETENTION_SET: u32 = 70;
    pub const RETENTEVT_GET: u32 = 71;
    pub const RETENTEVT_SET: u32 = 72;
    pub const RETENTION_HOLD: u32 = 73;
    pub const MODE_SET_MASKED: u32 = 74;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
    pub const FS_CHARSET_CAP: u32 = 76;
    pub const CLONE_BLKSIZE: u32 = 77;
    pub const SPACE_FREED: u32 = 78;
    pub const CHANGE_ATTR_TYPE: u32 = 79;
    pub const SEC_LABEL: u32 = 80;
    /// RFC 8275 section 3.
    pub const MODE_UMASK: u32 = 81;
    /// RFC 8276 section 8.1.
    pub const XATTR_SUPPORT: u32 = 82;
    /// RFC 9754 section 5: what OPEN supports.
    pub const OPEN_ARGUMENTS: u32 = 86;
}

/// RFC 8881 section 4.2 and 5.8.1.3: fh_expire_type bits.
pub mod fh4 {
    pub const PERSISTENT: u32 = 0x0000_0000;
    pub const NOEXPIRE_WITH_OPEN: u32 = 0x0000_0001;
    pub const VOLATILE_ANY: u32 = 0x0000_0002;
    pub const VOL_MIGRATION: u32 = 0x0000_0004;
    pub const VOL_RENAME: u32 = 0x0000_0008;
}

xdr_struct! {
    /// RFC 8881 3.3.5: fsid4.
    pub struct Fsid4 {
        pub major: u64,
        pub minor: u64,
    }
}
impl Copy for Fsid4 {}

/// RFC 8881 3.3.3: settime4, `union switch (time_how4 set_it)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime4 {
    ServerTime,
    ClientTime(NfsTime4),
}

impl<'a> XdrDecode<'a> for SetTime4 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            0 => SetTime4::ServerTime,
            1 => SetTime4::ClientTime(r.get()?),
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "time_how4",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for SetTime4 {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            SetTime4::ServerTime => w.put_u32(0),
            SetTime4::ClientTime(t) => {
                w.put_u32(1);
                t.encode(w);
            }
        }
    }
}

/// RFC 8881 3.2: pathname4, `component4 pathname4<>` (components as
/// plain utf8 strings: they name remote paths, not local lookups).
pub type Pathname4<'a> = List<Utf8Str<'a>, NFS4_MAX_ATTR_ARRAY>;

xdr_struct! {
    /// RFC 8881 section 11 (fs_locations): fs_location4.
    pub struct FsLocation4<'a> {
        pub server: List<Utf8Str<'a>, NFS4_MAX_ATTR_ARRAY>,
        pub rootpath: Pathname4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 section 11 (fs_locations): fs_locations4.
    pub struct FsLocations4<'a> {
        pub fs_root: Pathname4<'a>,
        pub locations: List<FsLocation4<'a>, NFS4_MAX_ATTR_ARRAY>,
    }
}

/// RFC 8881 6.2.1: an ACL, `nfsace4 fattr4_acl<>`.
pub type Acl4<'a> = List<NfsAce4<'a>, NFS4_MAX_ACES>;

xdr_struct! {
    /// RFC 8881 section 6.2: nfsacl41 (dacl, sacl).
    pub struct NfsAcl41<'a> {
        pub flag: u32,
        pub aces: Acl4<'a>,
    }
}
xdr_struct! {
    /// RFC 8881 3.3.6: change_policy4.
    pub struct ChangePolicy4 {
        pub major: u64,
        pub minor: u64,
    }
}
xdr_struct! {
    /// RFC 8881 section 11 (fs_status): fs4_status.
    pub struct FsStatus4<'a> {
        pub absent: bool,
        pub type_: u32,
        pub source: Utf8Str<'a>,
        pub current: Utf8Str<'a>,
        pub age: i32,
        pub version: NfsTime4,
    }
}
xdr_struct! {
    /// RFC 8881 3.3.21: layouthint4.
    pub struct LayoutHint4<'a> {
        pub type_: u32,
        pub body: Opaque<'a, { crate::nfs::nfs4::NFS4_OPAQUE_LIMIT }>,
    }
}
xdr_struct! {
    /// RFC 8881 3.3.24: threshold_item4.
    pub struct ThresholdItem4<'a> {
        pub layout_type: u32,
        pub hintset: Bitmap4,
        pub hintlist: Opaque<'a, { crate::nfs::nfs4::NFS4_OPAQUE_LIMIT }>,
    }
}
xdr_struct! {
    /// RFC 8881 3.3.25: mdsthreshold4.
    pub struct MdsThreshold4<'a> {
        pub hints: List<ThresholdItem4<'a>, NFS4_MAX_ATTR_ARRAY>,
    }
}
xdr_struct! {
    /// RFC 8881 3.3.26: retention_get4.
    pub struct RetentionGet4 {
        pub duration: u64,
        pub begin_time: List<NfsTime4, 1>,
    }
}
xdr_struct! {
    /// RFC 8881 3.3.27: retention_set4.
    pub struct RetentionSet4 {
        pub enable: bool,
        pub duration: List<u64, 1>,
    }
}
xdr_struct! {
    /// RFC 8881 section 6.2 (mode_set_masked): mode_masked4.
    pub struct ModeMasked4 {
        pub mode: u32,
        pub mask: u32,
    }
}
xdr_struct! {
    /// RFC 7862 section 12.2 (sec_label): sec_label4 with its labelformat_spec4.
    pub struct SecLabel4<'a> {
        pub lfs: u32,
        pub pi: u32,
        pub data: Opaque<'a, { crate::nfs::nfs4::NFS4_OPAQUE_LIMIT }>,
    }
}

xdr_struct! {
    /// RFC 9754 section 5: open_arguments4, the OPEN arguments a server
    /// supports, each a bitmap of the values of its enum
    /// (open_args_share_access4, open_args_share_deny4,
    /// open_args_share_access_want4, open_args_open_claim4,
    /// open_args_createmode4).
    pub struct OpenArguments4 {
        pub share_access: Bitmap4,
        pub share_deny: Bitmap4,
        pub share_access_want: Bitmap4,
        pub open_claim: Bitmap4,
        pub create_mode: Bitmap4,
    }
}

xdr_struct! {
    /// RFC 8275 section 3: mode_umask4, the mode and the umask to apply to
    /// it at creation.
    pub struct ModeUmask4 {
        pub mode: u32,
        pub umask: u32,
    }
}

/// A list of layout types (fs_layout_type, layout_type).
pub type LayoutTypes = List<u32, NFS4_MAX_ATTR_ARRAY>;

macro_rules! attrs_table {
    ($lt:lifetime; $( $num:literal $field:ident : $ty:ty ),* $(,)?) => {
        /// Attribute values by attribute number (RFC 8881 5.6-5.8, RFC 7862
        /// 12.2); `None` where absent. Field order is attribute order.
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct Attrs<$lt> {
            $( pub $field: Option<$ty>, )*
        }

        impl<$lt> Attrs<$lt> {
            /// The attribute numbers this codec parses, ascending.
            pub const PARSED: &'static [u32] = &[$($num),*];

            /// Parses `attr_vals` according to `mask`. Fails with
            /// [`XdrError::AttrNotSupported`] on a bit this codec cannot
            /// parse, and on values shorter or longer than the bitmap says.
            pub fn decode(mask: &Bitmap4, vals: &$lt [u8]) -> Result<Self, XdrError> {
                let mut attrs = Attrs::default();
                let mut r = XdrReader::new(vals);
                for bit in mask.iter() {
                    match bit {
                        $( $num => attrs.$field = Some(<$ty>::decode(&mut r)?), )*
                        other => return Err(XdrError::AttrNotSupported(other)),
                    }
                }
                r.finish()?;
                Ok(attrs)
            }

            /// The bitmap of the attributes that have values.
            pub fn bitmap(&self) -> Bitmap4 {
                let mut b = Bitmap4::new();
                $( if self.$field.is_some() { b.set($num); } )*
                b
            }

            /// Appends the values present (and, if `request` is given, also
            /// requested) to `w` in attribute order, returning their bitmap.
            pub fn encode_vals(&self, request: Option<&Bitmap4>, w: &mut XdrWriter) -> Bitmap4 {
                let mut b = Bitmap4::new();
                $(
                    if let Some(v) = &self.$field {
                        if request.map_or(true, |m| m.is_set($num)) {
                            b.set($num);
                            v.encode(w);
                        }
                    }
                )*
                b
            }
        }
    };
}

attrs_table! { 'a;
    0 supported_attrs: Bitmap4,
    1 type_: NfsFtype4,
    2 fh_expire_type: u32,
    3 change: u64,
    4 size: u64,
    5 link_support: bool,
    6 symlink_support: bool,
    7 named_attr: bool,
    8 fsid: Fsid4,
    9 unique_handles: bool,
    10 lease_time: u32,
    11 rdattr_error: Nfsstat4,
    12 acl: Acl4<'a>,
    13 aclsupport: u32,
    14 archive: bool,
    15 cansettime: bool,
    16 case_insensitive: bool,
    17 case_preserving: bool,
    18 chown_restricted: bool,
    19 filehandle: NfsFh4<'a>,
    20 fileid: u64,
    21 files_avail: u64,
    22 files_free: u64,
    23 files_total: u64,
    24 fs_locations: FsLocations4<'a>,
    25 hidden: bool,
    26 homogeneous: bool,
    27 maxfilesize: u64,
    28 maxlink: u32,
    29 maxname: u32,
    30 maxread: u64,
    31 maxwrite: u64,
    32 mimetype: Utf8Str<'a>,
    33 mode: u32,
    34 no_trunc: bool,
    35 numlinks: u32,
    36 owner: Utf8Str<'a>,
    37 owner_group: Utf8Str<'a>,
    38 quota_avail_hard: u64,
    39 quota_avail_soft: u64,
    40 quota_used: u64,
    41 rawdev: SpecData4,
    42 space_avail: u64,
    43 space_free: u64,
    44 space_total: u64,
    45 space_used: u64,
    46 system: bool,
    47 time_access: NfsTime4,
    48 time_access_set: SetTime4,
    49 time_backup: NfsTime4,
    50 time_create: NfsTime4,
    51 time_delta: NfsTime4,
    52 time_metadata: NfsTime4,
    53 time_modify: NfsTime4,
    54 time_modify_set: SetTime4,
    55 mounted_on_fileid: u64,
    56 dir_notif_delay: NfsTime4,
    57 dirent_notif_delay: NfsTime4,
    58 dacl: NfsAcl41<'a>,
    59 sacl: NfsAcl41<'a>,
    60 change_policy: ChangePolicy4,
    61 fs_status: FsStatus4<'a>,
    62 fs_layout_type: LayoutTypes,
    63 layout_hint: LayoutHint4<'a>,
    64 layout_type: LayoutTypes,
    65 layout_blksize: u32,
    66 layout_alignment: u32,
    68 mdsthreshold: MdsThreshold4<'a>,
    69 retention_get: RetentionGet4,
    70 retention_set: RetentionSet4,
    71 retentevt_get: RetentionGet4,
    72 retentevt_set: RetentionSet4,
    73 retention_hold: u64,
    74 mode_set_masked: ModeMasked4,
    75 suppattr_exclcreat: Bitmap4,
    76 fs_charset_cap: u32,
    77 clone_blksize: u32,
    78 space_freed: u64,
    79 change_attr_type: u32,
    80 sec_label: SecLabel4<'a>,
    81 mode_umask: ModeUmask4,
    82 xattr_support: bool,
    86 open_arguments: OpenArguments4,
}

impl<'a> Attrs<'a> {
    /// Parses an [`Fattr4`]'s values.
    pub fn from_fattr4(fattr: &Fattr4<'a>) -> Result<Self, XdrError> {
        Attrs::decode(&fattr.attrmask, fattr.attr_vals.0)
    }

    /// Encodes a whole fattr4 (bitmap, then the values as opaque) into
    /// `w`, limited to `request` when given (GETATTR, READDIR). The values
    /// are written in place; their length is filled in afterwards.
    pub fn encode_fattr4(&self, request: Option<&Bitmap4>, w: &mut XdrWriter) {
        // The bitmap precedes the values but depends on which are present;
        // compute it first without encoding.
        let mask = match request {
            Some(req) => self.bitmap().intersect(req),
            None => self.bitmap(),
        };
        mask.encode(w);
        let at = w.reserve_u32();
        let start = w.len();
        self.encode_vals(Some(&mask), w);
        // Every XDR item is a multiple of 4 bytes, so no padding follows.
        let len = w.len() - start;
        w.patch_u32(at, len as u32);
    }

    /// The bitmap of attribute numbers this codec parses (for
    /// supported_attrs, once intersected with what the server keeps).
    pub fn parsed_bitmap() -> Bitmap4 {
        Bitmap4::from_bits(Self::PARSED)
    }
}
