//! NFS version 3 (RFC 1813), program 100003 version 3: the 22 procedures'
//! arguments and results and the types they share.
//!
//! Each procedure's result is a [`Nfs3Res`]: `resok` when the status is
//! NFS3_OK, otherwise the status and `resfail` (RFC 1813 section 3.3).

use super::xdr::{
    xdr_enum, xdr_status, xdr_struct, LinkedList, Name, Opaque, XdrDecode, XdrEncode, XdrError,
    XdrReader, XdrWriter,
};

pub const NFS_VERSION_3: u32 = 3;
/// RFC 1813 2.4: NFS3_FHSIZE, bound on nfs_fh3.
pub const NFS3_FHSIZE: u32 = 64;
/// Bound on filename3: NAME_MAX of the file systems duet serves; longer
/// names decode to NFS3ERR_NAMETOOLONG.
pub const NFS3_MAX_NAME: u32 = 255;
/// Bound on nfspath3 (symbolic link targets): PATH_MAX.
pub const NFS3_MAX_PATH: u32 = 4096;
/// Bound on READ/WRITE payloads: above any rtmax/wtmax duet advertises.
pub const NFS3_MAX_DATA: u32 = 4 << 20;
/// Bound on entries in one READDIR/READDIRPLUS reply.
pub const NFS3_MAX_DIR_ENTRIES: u32 = 1 << 16;

/// RFC 1813 section 3: procedure numbers.
pub mod proc3 {
    pub const NULL: u32 = 0;
    pub const GETATTR: u32 = 1;
    pub const SETATTR: u32 = 2;
    pub const LOOKUP: u32 = 3;
    pub const ACCESS: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const READ: u32 = 6;
    pub const WRITE: u32 = 7;
    pub const CREATE: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const SYMLINK: u32 = 10;
    pub const MKNOD: u32 = 11;
    pub const REMOVE: u32 = 12;
    pub const RMDIR: u32 = 13;
    pub const RENAME: u32 = 14;
    pub const LINK: u32 = 15;
    pub const READDIR: u32 = 16;
    pub const READDIRPLUS: u32 = 17;
    pub const FSSTAT: u32 = 18;
    pub const FSINFO: u32 = 19;
    pub const PATHCONF: u32 = 20;
    pub const COMMIT: u32 = 21;
}

/// RFC 1813 3.3.4: ACCESS3_* bits.
pub mod access3 {
    pub const READ: u32 = 0x0001;
    pub const LOOKUP: u32 = 0x0002;
    pub const MODIFY: u32 = 0x0004;
    pub const EXTEND: u32 = 0x0008;
    pub const DELETE: u32 = 0x0010;
    pub const EXECUTE: u32 = 0x0020;
}

/// RFC 1813 3.3.19: FSINFO properties bits.
pub mod fsf3 {
    pub const LINK: u32 = 0x0001;
    pub const SYMLINK: u32 = 0x0002;
    pub const HOMOGENEOUS: u32 = 0x0008;
    pub const CANSETTIME: u32 = 0x0010;
}

xdr_status! {
    /// RFC 1813 2.6: enum nfsstat3.
    pub struct Nfsstat3 {
        OK = 0,
        PERM = 1,
        NOENT = 2,
        IO = 5,
        NXIO = 6,
        ACCES = 13,
        EXIST = 17,
        XDEV = 18,
        NODEV = 19,
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
        REMOTE = 71,
        BADHANDLE = 10001,
        NOT_SYNC = 10002,
        BAD_COOKIE = 10003,
        NOTSUPP = 10004,
        TOOSMALL = 10005,
        SERVERFAULT = 10006,
        BADTYPE = 10007,
        JUKEBOX = 10008,
    }
}

xdr_enum! {
    /// RFC 1813 2.6: enum ftype3.
    pub enum Ftype3 {
        Reg = 1,
        Dir = 2,
        Blk = 3,
        Chr = 4,
        Lnk = 5,
        Sock = 6,
        Fifo = 7,
    }
}

xdr_enum! {
    /// RFC 1813 3.3.7: enum stable_how.
    pub enum StableHow {
        Unstable = 0,
        DataSync = 1,
        FileSync = 2,
    }
}

xdr_enum! {
    /// RFC 1813 2.6: enum time_how.
    pub enum TimeHow {
        DontChange = 0,
        SetToServerTime = 1,
        SetToClientTime = 2,
    }
}

xdr_enum! {
    /// RFC 1813 3.3.8: enum createmode3.
    pub enum CreateMode3 {
        Unchecked = 0,
        Guarded = 1,
        Exclusive = 2,
    }
}

/// RFC 1813 2.6: filename3, bounded by [`NFS3_MAX_NAME`].
pub type Filename3<'a> = Name<'a, NFS3_MAX_NAME>;
/// RFC 1813 2.6: nfspath3, bounded by [`NFS3_MAX_PATH`].
pub type NfsPath3<'a> = Opaque<'a, NFS3_MAX_PATH>;
/// RFC 1813 2.6: cookieverf3, createverf3 and writeverf3 are 8 opaque bytes.
pub type Verf3 = [u8; 8];

/// RFC 1813 2.6: nfs_fh3, `opaque data<NFS3_FHSIZE>`.
pub type NfsFh3<'a> = Opaque<'a, NFS3_FHSIZE>;

xdr_struct! {
    /// RFC 1813 2.6: specdata3.
    pub struct SpecData3 {
        pub specdata1: u32,
        pub specdata2: u32,
    }
}

xdr_struct! {
    /// RFC 1813 2.6: nfstime3.
    pub struct NfsTime3 {
        pub seconds: u32,
        pub nseconds: u32,
    }
}

/// RFC 1813 2.6: fattr3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fattr3 {
    pub type_: Ftype3,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub used: u64,
    pub rdev: SpecData3,
    pub fsid: u64,
    pub fileid: u64,
    pub atime: NfsTime3,
    pub mtime: NfsTime3,
    pub ctime: NfsTime3,
}

impl<'a> XdrDecode<'a> for Fattr3 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(Fattr3 {
            type_: r.get()?,
            mode: r.get()?,
            nlink: r.get()?,
            uid: r.get()?,
            gid: r.get()?,
            size: r.get()?,
            used: r.get()?,
            rdev: r.get()?,
            fsid: r.get()?,
            fileid: r.get()?,
            atime: r.get()?,
            mtime: r.get()?,
            ctime: r.get()?,
        })
    }
}
impl XdrEncode for Fattr3 {
    fn encode(&self, w: &mut XdrWriter) {
        w.put(&self.type_);
        w.put_u32(self.mode);
        w.put_u32(self.nlink);
        w.put_u32(self.uid);
        w.put_u32(self.gid);
        w.put_u64(self.size);
        w.put_u64(self.used);
        w.put(&self.rdev);
        w.put_u64(self.fsid);
        w.put_u64(self.fileid);
        w.put(&self.atime);
        w.put(&self.mtime);
        w.put(&self.ctime);
    }
}

/// RFC 1813 2.6: post_op_attr.
pub type PostOpAttr = Option<Fattr3>;

xdr_struct! {
    /// RFC 1813 2.6: wcc_attr.
    pub struct WccAttr {
        pub size: u64,
        pub mtime: NfsTime3,
        pub ctime: NfsTime3,
    }
}

/// RFC 1813 2.6: pre_op_attr.
pub type PreOpAttr = Option<WccAttr>;

/// RFC 1813 2.6: wcc_data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WccData {
    pub before: PreOpAttr,
    pub after: PostOpAttr,
}

impl<'a> XdrDecode<'a> for WccData {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(WccData {
            before: r.get()?,
            after: r.get()?,
        })
    }
}
impl XdrEncode for WccData {
    fn encode(&self, w: &mut XdrWriter) {
        w.put(&self.before);
        w.put(&self.after);
    }
}

/// RFC 1813 2.6: post_op_fh3.
pub type PostOpFh3<'a> = Option<NfsFh3<'a>>;

/// RFC 1813 2.6: set_atime and set_mtime, `union switch (time_how set_it)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    DontChange,
    SetToServerTime,
    SetToClientTime(NfsTime3),
}

impl<'a> XdrDecode<'a> for SetTime {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match TimeHow::decode(r)? {
            TimeHow::DontChange => SetTime::DontChange,
            TimeHow::SetToServerTime => SetTime::SetToServerTime,
            TimeHow::SetToClientTime => SetTime::SetToClientTime(r.get()?),
        })
    }
}
impl XdrEncode for SetTime {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            SetTime::DontChange => TimeHow::DontChange.encode(w),
            SetTime::SetToServerTime => TimeHow::SetToServerTime.encode(w),
            SetTime::SetToClientTime(t) => {
                TimeHow::SetToClientTime.encode(w);
                t.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 1813 2.6: sattr3; each field is a `union switch (bool set_it)`.
    pub struct Sattr3 {
        pub mode: Option<u32>,
        pub uid: Option<u32>,
        pub gid: Option<u32>,
        pub size: Option<u64>,
        pub atime: SetTime,
        pub mtime: SetTime,
    }
}

xdr_struct! {
    /// RFC 1813 2.6: diropargs3.
    pub struct DirOpArgs3<'a> {
        pub dir: NfsFh3<'a>,
        pub name: Filename3<'a>,
    }
}

/// RFC 1813 3.3: the `union switch (nfsstat3 status)` of every procedure's
/// result: `Ok` for NFS3_OK, otherwise the status and the failure body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs3Res<T, F> {
    Ok(T),
    Fail(Nfsstat3, F),
}

impl<T, F> Nfs3Res<T, F> {
    pub fn status(&self) -> Nfsstat3 {
        match self {
            Nfs3Res::Ok(_) => Nfsstat3::OK,
            Nfs3Res::Fail(s, _) => *s,
        }
    }
}

impl<'a, T: XdrDecode<'a>, F: XdrDecode<'a>> XdrDecode<'a> for Nfs3Res<T, F> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        let status = Nfsstat3::decode(r)?;
        if status == Nfsstat3::OK {
            Ok(Nfs3Res::Ok(T::decode(r)?))
        } else {
            Ok(Nfs3Res::Fail(status, F::decode(r)?))
        }
    }
}
impl<T: XdrEncode, F: XdrEncode> XdrEncode for Nfs3Res<T, F> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            Nfs3Res::Ok(ok) => {
                Nfsstat3::OK.encode(w);
                ok.encode(w);
            }
            Nfs3Res::Fail(status, fail) => {
                status.encode(w);
                fail.encode(w);
            }
        }
    }
}

// ---- 3.3.1 GETATTR ----

xdr_struct! {
    /// RFC 1813 3.3.1: GETATTR3args.
    pub struct GetAttr3Args<'a> {
        pub object: NfsFh3<'a>,
    }
}
/// RFC 1813 3.3.1: GETATTR3res (resok is the fattr3, resfail void).
pub type GetAttr3Res = Nfs3Res<Fattr3, ()>;

// ---- 3.3.2 SETATTR ----

xdr_struct! {
    /// RFC 1813 3.3.2: SETATTR3args; `guard` is sattrguard3, the ctime the
    /// object must still have.
    pub struct SetAttr3Args<'a> {
        pub object: NfsFh3<'a>,
        pub new_attributes: Sattr3,
        pub guard: Option<NfsTime3>,
    }
}
/// RFC 1813 3.3.2: SETATTR3res; both arms carry obj_wcc.
pub type SetAttr3Res = Nfs3Res<WccData, WccData>;

// ---- 3.3.3 LOOKUP ----

xdr_struct! {
    /// RFC 1813 3.3.3: LOOKUP3args.
    pub struct Lookup3Args<'a> {
        pub what: DirOpArgs3<'a>,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.3: LOOKUP3resok.
    pub struct Lookup3ResOk<'a> {
        pub object: NfsFh3<'a>,
        pub obj_attributes: PostOpAttr,
        pub dir_attributes: PostOpAttr,
    }
}
/// RFC 1813 3.3.3: LOOKUP3res; resfail is dir_attributes.
pub type Lookup3Res<'a> = Nfs3Res<Lookup3ResOk<'a>, PostOpAttr>;

// ---- 3.3.4 ACCESS ----

xdr_struct! {
    /// RFC 1813 3.3.4: ACCESS3args.
    pub struct Access3Args<'a> {
        pub object: NfsFh3<'a>,
        pub access: u32,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.4: ACCESS3resok.
    pub struct Access3ResOk {
        pub obj_attributes: PostOpAttr,
        pub access: u32,
    }
}
/// RFC 1813 3.3.4: ACCESS3res.
pub type Access3Res = Nfs3Res<Access3ResOk, PostOpAttr>;

// ---- 3.3.5 READLINK ----

xdr_struct! {
    /// RFC 1813 3.3.5: READLINK3args.
    pub struct ReadLink3Args<'a> {
        pub symlink: NfsFh3<'a>,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.5: READLINK3resok.
    pub struct ReadLink3ResOk<'a> {
        pub symlink_attributes: PostOpAttr,
        pub data: NfsPath3<'a>,
    }
}
/// RFC 1813 3.3.5: READLINK3res.
pub type ReadLink3Res<'a> = Nfs3Res<ReadLink3ResOk<'a>, PostOpAttr>;

// ---- 3.3.6 READ ----

xdr_struct! {
    /// RFC 1813 3.3.6: READ3args.
    pub struct Read3Args<'a> {
        pub file: NfsFh3<'a>,
        pub offset: u64,
        pub count: u32,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.6: READ3resok; `data` borrows the payload.
    pub struct Read3ResOk<'a> {
        pub file_attributes: PostOpAttr,
        pub count: u32,
        pub eof: bool,
        pub data: Opaque<'a, NFS3_MAX_DATA>,
    }
}
/// RFC 1813 3.3.6: READ3res.
pub type Read3Res<'a> = Nfs3Res<Read3ResOk<'a>, PostOpAttr>;

// ---- 3.3.7 WRITE ----

xdr_struct! {
    /// RFC 1813 3.3.7: WRITE3args; `data` borrows the payload from the
    /// record (no copy).
    pub struct Write3Args<'a> {
        pub file: NfsFh3<'a>,
        pub offset: u64,
        pub count: u32,
        pub stable: StableHow,
        pub data: Opaque<'a, NFS3_MAX_DATA>,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.7: WRITE3resok.
    pub struct Write3ResOk {
        pub file_wcc: WccData,
        pub count: u32,
        pub committed: StableHow,
        pub verf: Verf3,
    }
}
/// RFC 1813 3.3.7: WRITE3res.
pub type Write3Res = Nfs3Res<Write3ResOk, WccData>;

// ---- 3.3.8 CREATE ----

/// RFC 1813 3.3.8: createhow3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateHow3 {
    Unchecked(Sattr3),
    Guarded(Sattr3),
    Exclusive(Verf3),
}

impl<'a> XdrDecode<'a> for CreateHow3 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match CreateMode3::decode(r)? {
            CreateMode3::Unchecked => CreateHow3::Unchecked(r.get()?),
            CreateMode3::Guarded => CreateHow3::Guarded(r.get()?),
            CreateMode3::Exclusive => CreateHow3::Exclusive(r.get()?),
        })
    }
}
impl XdrEncode for CreateHow3 {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            CreateHow3::Unchecked(a) => {
                CreateMode3::Unchecked.encode(w);
                a.encode(w);
            }
            CreateHow3::Guarded(a) => {
                CreateMode3::Guarded.encode(w);
                a.encode(w);
            }
            CreateHow3::Exclusive(v) => {
                CreateMode3::Exclusive.encode(w);
                v.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 1813 3.3.8: CREATE3args.
    pub struct Create3Args<'a> {
        pub where_: DirOpArgs3<'a>,
        pub how: CreateHow3,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.8: CREATE3resok, also the resok of MKDIR, SYMLINK and
    /// MKNOD.
    pub struct Create3ResOk<'a> {
        pub obj: PostOpFh3<'a>,
        pub obj_attributes: PostOpAttr,
        pub dir_wcc: WccData,
    }
}
/// RFC 1813 3.3.8: CREATE3res (and MKDIR3res, SYMLINK3res, MKNOD3res).
pub type Create3Res<'a> = Nfs3Res<Create3ResOk<'a>, WccData>;

// ---- 3.3.9 MKDIR ----

xdr_struct! {
    /// RFC 1813 3.3.9: MKDIR3args.
    pub struct Mkdir3Args<'a> {
        pub where_: DirOpArgs3<'a>,
        pub attributes: Sattr3,
    }
}
/// RFC 1813 3.3.9: MKDIR3res.
pub type Mkdir3Res<'a> = Create3Res<'a>;

// ---- 3.3.10 SYMLINK ----

xdr_struct! {
    /// RFC 1813 3.3.10: symlinkdata3.
    pub struct SymlinkData3<'a> {
        pub symlink_attributes: Sattr3,
        pub symlink_data: NfsPath3<'a>,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.10: SYMLINK3args.
    pub struct Symlink3Args<'a> {
        pub where_: DirOpArgs3<'a>,
        pub symlink: SymlinkData3<'a>,
    }
}
/// RFC 1813 3.3.10: SYMLINK3res.
pub type Symlink3Res<'a> = Create3Res<'a>;

// ---- 3.3.11 MKNOD ----

xdr_struct! {
    /// RFC 1813 3.3.11: devicedata3.
    pub struct DeviceData3 {
        pub dev_attributes: Sattr3,
        pub spec: SpecData3,
    }
}

/// RFC 1813 3.3.11: mknoddata3, `union switch (ftype3 type)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MknodData3 {
    Chr(DeviceData3),
    Blk(DeviceData3),
    Sock(Sattr3),
    Fifo(Sattr3),
    /// REG, DIR or LNK: void; the server answers NFS3ERR_BADTYPE.
    Other(Ftype3),
}

impl<'a> XdrDecode<'a> for MknodData3 {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match Ftype3::decode(r)? {
            Ftype3::Chr => MknodData3::Chr(r.get()?),
            Ftype3::Blk => MknodData3::Blk(r.get()?),
            Ftype3::Sock => MknodData3::Sock(r.get()?),
            Ftype3::Fifo => MknodData3::Fifo(r.get()?),
            other => MknodData3::Other(other),
        })
    }
}
impl XdrEncode for MknodData3 {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            MknodData3::Chr(d) => {
                Ftype3::Chr.encode(w);
                d.encode(w);
            }
            MknodData3::Blk(d) => {
                Ftype3::Blk.encode(w);
                d.encode(w);
            }
            MknodData3::Sock(a) => {
                Ftype3::Sock.encode(w);
                a.encode(w);
            }
            MknodData3::Fifo(a) => {
                Ftype3::Fifo.encode(w);
                a.encode(w);
            }
            MknodData3::Other(t) => t.encode(w),
        }
    }
}

xdr_struct! {
    /// RFC 1813 3.3.11: MKNOD3args.
    pub struct Mknod3Args<'a> {
        pub where_: DirOpArgs3<'a>,
        pub what: MknodData3,
    }
}
/// RFC 1813 3.3.11: MKNOD3res.
pub type Mknod3Res<'a> = Create3Res<'a>;

// ---- 3.3.12 REMOVE, 3.3.13 RMDIR ----

xdr_struct! {
    /// RFC 1813 3.3.12: REMOVE3args (and 3.3.13 RMDIR3args).
    pub struct Remove3Args<'a> {
        pub object: DirOpArgs3<'a>,
    }
}
/// RFC 1813 3.3.12: REMOVE3res; both arms carry dir_wcc.
pub type Remove3Res = Nfs3Res<WccData, WccData>;
/// RFC 1813 3.3.13: RMDIR3args.
pub type Rmdir3Args<'a> = Remove3Args<'a>;
/// RFC 1813 3.3.13: RMDIR3res.
pub type Rmdir3Res = Remove3Res;

// ---- 3.3.14 RENAME ----

xdr_struct! {
    /// RFC 1813 3.3.14: RENAME3args.
    pub struct Rename3Args<'a> {
        pub from: DirOpArgs3<'a>,
        pub to: DirOpArgs3<'a>,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.14: RENAME3resok and RENAME3resfail (same fields).
    pub struct Rename3Wcc {
        pub fromdir_wcc: WccData,
        pub todir_wcc: WccData,
    }
}
/// RFC 1813 3.3.14: RENAME3res.
pub type Rename3Res = Nfs3Res<Rename3Wcc, Rename3Wcc>;

// ---- 3.3.15 LINK ----

xdr_struct! {
    /// RFC 1813 3.3.15: LINK3args.
    pub struct Link3Args<'a> {
        pub file: NfsFh3<'a>,
        pub link: DirOpArgs3<'a>,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.15: LINK3resok and LINK3resfail (same fields).
    pub struct Link3Wcc {
        pub file_attributes: PostOpAttr,
        pub linkdir_wcc: WccData,
    }
}
/// RFC 1813 3.3.15: LINK3res.
pub type Link3Res = Nfs3Res<Link3Wcc, Link3Wcc>;

// ---- 3.3.16 READDIR ----

xdr_struct! {
    /// RFC 1813 3.3.16: READDIR3args.
    pub struct ReadDir3Args<'a> {
        pub dir: NfsFh3<'a>,
        pub cookie: u64,
        pub cookieverf: Verf3,
        pub count: u32,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.16: entry3 without its `nextentry` link.
    pub struct Entry3<'a> {
        pub fileid: u64,
        pub name: Filename3<'a>,
        pub cookie: u64,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.16: dirlist3.
    pub struct DirList3<'a> {
        pub entries: LinkedList<Entry3<'a>, NFS3_MAX_DIR_ENTRIES>,
        pub eof: bool,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.16: READDIR3resok.
    pub struct ReadDir3ResOk<'a> {
        pub dir_attributes: PostOpAttr,
        pub cookieverf: Verf3,
        pub reply: DirList3<'a>,
    }
}
/// RFC 1813 3.3.16: READDIR3res.
pub type ReadDir3Res<'a> = Nfs3Res<ReadDir3ResOk<'a>, PostOpAttr>;

// ---- 3.3.17 READDIRPLUS ----

xdr_struct! {
    /// RFC 1813 3.3.17: READDIRPLUS3args.
    pub struct ReadDirPlus3Args<'a> {
        pub dir: NfsFh3<'a>,
        pub cookie: u64,
        pub cookieverf: Verf3,
        pub dircount: u32,
        pub maxcount: u32,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.17: entryplus3 without its `nextentry` link.
    pub struct EntryPlus3<'a> {
        pub fileid: u64,
        pub name: Filename3<'a>,
        pub cookie: u64,
        pub name_attributes: PostOpAttr,
        pub name_handle: PostOpFh3<'a>,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.17: dirlistplus3.
    pub struct DirListPlus3<'a> {
        pub entries: LinkedList<EntryPlus3<'a>, NFS3_MAX_DIR_ENTRIES>,
        pub eof: bool,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.17: READDIRPLUS3resok.
    pub struct ReadDirPlus3ResOk<'a> {
        pub dir_attributes: PostOpAttr,
        pub cookieverf: Verf3,
        pub reply: DirListPlus3<'a>,
    }
}
/// RFC 1813 3.3.17: READDIRPLUS3res.
pub type ReadDirPlus3Res<'a> = Nfs3Res<ReadDirPlus3ResOk<'a>, PostOpAttr>;

// ---- 3.3.18 FSSTAT ----

xdr_struct! {
    /// RFC 1813 3.3.18: FSSTAT3args (also FSINFO3args, PATHCONF3args).
    pub struct FsRootArgs3<'a> {
        pub fsroot: NfsFh3<'a>,
    }
}
/// RFC 1813 3.3.18: FSSTAT3args.
pub type FsStat3Args<'a> = FsRootArgs3<'a>;
xdr_struct! {
    /// RFC 1813 3.3.18: FSSTAT3resok.
    pub struct FsStat3ResOk {
        pub obj_attributes: PostOpAttr,
        pub tbytes: u64,
        pub fbytes: u64,
        pub abytes: u64,
        pub tfiles: u64,
        pub ffiles: u64,
        pub afiles: u64,
        pub invarsec: u32,
    }
}
/// RFC 1813 3.3.18: FSSTAT3res.
pub type FsStat3Res = Nfs3Res<FsStat3ResOk, PostOpAttr>;

// ---- 3.3.19 FSINFO ----

/// RFC 1813 3.3.19: FSINFO3args.
pub type FsInfo3Args<'a> = FsRootArgs3<'a>;
xdr_struct! {
    /// RFC 1813 3.3.19: FSINFO3resok.
    pub struct FsInfo3ResOk {
        pub obj_attributes: PostOpAttr,
        pub rtmax: u32,
        pub rtpref: u32,
        pub rtmult: u32,
        pub wtmax: u32,
        pub wtpref: u32,
        pub wtmult: u32,
        pub dtpref: u32,
        pub maxfilesize: u64,
        pub time_delta: NfsTime3,
        pub properties: u32,
    }
}
/// RFC 1813 3.3.19: FSINFO3res.
pub type FsInfo3Res = Nfs3Res<FsInfo3ResOk, PostOpAttr>;

// ---- 3.3.20 PATHCONF ----

/// RFC 1813 3.3.20: PATHCONF3args (the field is `object`, same wire form).
pub type PathConf3Args<'a> = FsRootArgs3<'a>;
xdr_struct! {
    /// RFC 1813 3.3.20: PATHCONF3resok.
    pub struct PathConf3ResOk {
        pub obj_attributes: PostOpAttr,
        pub linkmax: u32,
        pub name_max: u32,
        pub no_trunc: bool,
        pub chown_restricted: bool,
        pub case_insensitive: bool,
        pub case_preserving: bool,
    }
}
/// RFC 1813 3.3.20: PATHCONF3res.
pub type PathConf3Res = Nfs3Res<PathConf3ResOk, PostOpAttr>;

// ---- 3.3.21 COMMIT ----

xdr_struct! {
    /// RFC 1813 3.3.21: COMMIT3args.
    pub struct Commit3Args<'a> {
        pub file: NfsFh3<'a>,
        pub offset: u64,
        pub count: u32,
    }
}
xdr_struct! {
    /// RFC 1813 3.3.21: COMMIT3resok.
    pub struct Commit3ResOk {
        pub file_wcc: WccData,
        pub verf: Verf3,
    }
}
/// RFC 1813 3.3.21: COMMIT3res.
pub type Commit3Res = Nfs3Res<Commit3ResOk, WccData>;

// ---- dispatch ----

/// The arguments of any NFSv3 call, chosen by procedure number (RFC 1813
/// section 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs3Args<'a> {
    Null,
    GetAttr(GetAttr3Args<'a>),
    SetAttr(SetAttr3Args<'a>),
    Lookup(Lookup3Args<'a>),
    Access(Access3Args<'a>),
    ReadLink(ReadLink3Args<'a>),
    Read(Read3Args<'a>),
    Write(Write3Args<'a>),
    Create(Create3Args<'a>),
    Mkdir(Mkdir3Args<'a>),
    Symlink(Symlink3Args<'a>),
    Mknod(Mknod3Args<'a>),
    Remove(Remove3Args<'a>),
    Rmdir(Rmdir3Args<'a>),
    Rename(Rename3Args<'a>),
    Link(Link3Args<'a>),
    ReadDir(ReadDir3Args<'a>),
    ReadDirPlus(ReadDirPlus3Args<'a>),
    FsStat(FsStat3Args<'a>),
    FsInfo(FsInfo3Args<'a>),
    PathConf(PathConf3Args<'a>),
    Commit(Commit3Args<'a>),
}

/// Why an NFSv3 call's arguments could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs3ArgsError {
    /// RFC 5531 accept_stat PROC_UNAVAIL.
    ProcUnavail(u32),
    /// The arguments did not decode: RFC 5531 GARBAGE_ARGS, or the
    /// procedure's error from [`XdrError::nfs3_status`] (NAMETOOLONG).
    Garbage(XdrError),
}

impl<'a> Nfs3Args<'a> {
    /// Decodes the arguments of procedure `proc_`, requiring them to use
    /// the whole of `r`.
    pub fn decode(proc_: u32, r: &mut XdrReader<'a>) -> Result<Self, Nfs3ArgsError> {
        let args = Self::decode_inner(proc_, r)?;
        r.finish().map_err(Nfs3ArgsError::Garbage)?;
        Ok(args)
    }

    fn decode_inner(proc_: u32, r: &mut XdrReader<'a>) -> Result<Self, Nfs3ArgsError> {
        use Nfs3Args as A;
        let g = Nfs3ArgsError::Garbage;
        Ok(match proc_ {
            proc3::NULL => A::Null,
            proc3::GETATTR => A::GetAttr(r.get().map_err(g)?),
            proc3::SETATTR => A::SetAttr(r.get().map_err(g)?),
            proc3::LOOKUP => A::Lookup(r.get().map_err(g)?),
            proc3::ACCESS => A::Access(r.get().map_err(g)?),
            proc3::READLINK => A::ReadLink(r.get().map_err(g)?),
            proc3::READ => A::Read(r.get().map_err(g)?),
            proc3::WRITE => A::Write(r.get().map_err(g)?),
            proc3::CREATE => A::Create(r.get().map_err(g)?),
            proc3::MKDIR => A::Mkdir(r.get().map_err(g)?),
            proc3::SYMLINK => A::Symlink(r.get().map_err(g)?),
            proc3::MKNOD => A::Mknod(r.get().map_err(g)?),
            proc3::REMOVE => A::Remove(r.get().map_err(g)?),
            proc3::RMDIR => A::Rmdir(r.get().map_err(g)?),
            proc3::RENAME => A::Rename(r.get().map_err(g)?),
            proc3::LINK => A::Link(r.get().map_err(g)?),
            proc3::READDIR => A::ReadDir(r.get().map_err(g)?),
            proc3::READDIRPLUS => A::ReadDirPlus(r.get().map_err(g)?),
            proc3::FSSTAT => A::FsStat(r.get().map_err(g)?),
            proc3::FSINFO => A::FsInfo(r.get().map_err(g)?),
            proc3::PATHCONF => A::PathConf(r.get().map_err(g)?),
            proc3::COMMIT => A::Commit(r.get().map_err(g)?),
            other => return Err(Nfs3ArgsError::ProcUnavail(other)),
        })
    }

    pub fn proc_(&self) -> u32 {
        use Nfs3Args as A;
        match self {
            A::Null => proc3::NULL,
            A::GetAttr(_) => proc3::GETATTR,
            A::SetAttr(_) => proc3::SETATTR,
            A::Lookup(_) => proc3::LOOKUP,
            A::Access(_) => proc3::ACCESS,
            A::ReadLink(_) => proc3::READLINK,
            A::Read(_) => proc3::READ,
            A::Write(_) => proc3::WRITE,
            A::Create(_) => proc3::CREATE,
            A::Mkdir(_) => proc3::MKDIR,
            A::Symlink(_) => proc3::SYMLINK,
            A::Mknod(_) => proc3::MKNOD,
            A::Remove(_) => proc3::REMOVE,
            A::Rmdir(_) => proc3::RMDIR,
            A::Rename(_) => proc3::RENAME,
            A::Link(_) => proc3::LINK,
            A::ReadDir(_) => proc3::READDIR,
            A::ReadDirPlus(_) => proc3::READDIRPLUS,
            A::FsStat(_) => proc3::FSSTAT,
            A::FsInfo(_) => proc3::FSINFO,
            A::PathConf(_) => proc3::PATHCONF,
            A::Commit(_) => proc3::COMMIT,
        }
    }
}

impl XdrEncode for Nfs3Args<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        use Nfs3Args as A;
        match self {
            A::Null => {}
            A::GetAttr(a) => a.encode(w),
            A::SetAttr(a) => a.encode(w),
            A::Lookup(a) => a.encode(w),
            A::Access(a) => a.encode(w),
            A::ReadLink(a) => a.encode(w),
            A::Read(a) => a.encode(w),
            A::Write(a) => a.encode(w),
            A::Create(a) => a.encode(w),
            A::Mkdir(a) => a.encode(w),
            A::Symlink(a) => a.encode(w),
            A::Mknod(a) => a.encode(w),
            A::Remove(a) => a.encode(w),
            A::Rmdir(a) => a.encode(w),
            A::Rename(a) => a.encode(w),
            A::Link(a) => a.encode(w),
            A::ReadDir(a) => a.encode(w),
            A::ReadDirPlus(a) => a.encode(w),
            A::FsStat(a) => a.encode(w),
            A::FsInfo(a) => a.encode(w),
            A::PathConf(a) => a.encode(w),
            A::Commit(a) => a.encode(w),
        }
    }
}

/// The result of any NFSv3 call (RFC 1813 section 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs3Results<'a> {
    Null,
    GetAttr(GetAttr3Res),
    SetAttr(SetAttr3Res),
    Lookup(Lookup3Res<'a>),
    Access(Access3Res),
    ReadLink(ReadLink3Res<'a>),
    Read(Read3Res<'a>),
    Write(Write3Res),
    Create(Create3Res<'a>),
    Mkdir(Mkdir3Res<'a>),
    Symlink(Symlink3Res<'a>),
    Mknod(Mknod3Res<'a>),
    Remove(Remove3Res),
    Rmdir(Rmdir3Res),
    Rename(Rename3Res),
    Link(Link3Res),
    ReadDir(ReadDir3Res<'a>),
    ReadDirPlus(ReadDirPlus3Res<'a>),
    FsStat(FsStat3Res),
    FsInfo(FsInfo3Res),
    PathConf(PathConf3Res),
    Commit(Commit3Res),
}

impl<'a> Nfs3Results<'a> {
    /// Decodes the results of procedure `proc_` (a client, or a test).
    pub fn decode(proc_: u32, r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        use Nfs3Results as R;
        Ok(match proc_ {
            proc3::NULL => R::Null,
            proc3::GETATTR => R::GetAttr(r.get()?),
            proc3::SETATTR => R::SetAttr(r.get()?),
            proc3::LOOKUP => R::Lookup(r.get()?),
            proc3::ACCESS => R::Access(r.get()?),
            proc3::READLINK => R::ReadLink(r.get()?),
            proc3::READ => R::Read(r.get()?),
            proc3::WRITE => R::Write(r.get()?),
            proc3::CREATE => R::Create(r.get()?),
            proc3::MKDIR => R::Mkdir(r.get()?),
            proc3::SYMLINK => R::Symlink(r.get()?),
            proc3::MKNOD => R::Mknod(r.get()?),
            proc3::REMOVE => R::Remove(r.get()?),
            proc3::RMDIR => R::Rmdir(r.get()?),
            proc3::RENAME => R::Rename(r.get()?),
            proc3::LINK => R::Link(r.get()?),
            proc3::READDIR => R::ReadDir(r.get()?),
            proc3::READDIRPLUS => R::ReadDirPlus(r.get()?),
            proc3::FSSTAT => R::FsStat(r.get()?),
            proc3::FSINFO => R::FsInfo(r.get()?),
            proc3::PATHCONF => R::PathConf(r.get()?),
            proc3::COMMIT => R::Commit(r.get()?),
            other => {
                return Err(XdrError::BadDiscriminant {
                    what: "nfs3 procedure",
                    value: other,
                })
            }
        })
    }
}

impl XdrEncode for Nfs3Results<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        use Nfs3Results as R;
        match self {
            R::Null => {}
            R::GetAttr(x) => x.encode(w),
            R::SetAttr(x) => x.encode(w),
            R::Lookup(x) => x.encode(w),
            R::Access(x) => x.encode(w),
            R::ReadLink(x) => x.encode(w),
            R::Read(x) => x.encode(w),
            R::Write(x) => x.encode(w),
            R::Create(x) => x.encode(w),
            R::Mkdir(x) => x.encode(w),
            R::Symlink(x) => x.encode(w),
            R::Mknod(x) => x.encode(w),
            R::Remove(x) => x.encode(w),
            R::Rmdir(x) => x.encode(w),
            R::Rename(x) => x.encode(w),
            R::Link(x) => x.encode(w),
            R::ReadDir(x) => x.encode(w),
            R::ReadDirPlus(x) => x.encode(w),
            R::FsStat(x) => x.encode(w),
            R::FsInfo(x) => x.encode(w),
            R::PathConf(x) => x.encode(w),
            R::Commit(x) => x.encode(w),
        }
    }
}

// Small plain-data types are Copy (the declaring macro cannot know which).
impl Copy for SpecData3 {}
impl Copy for NfsTime3 {}
impl Copy for WccAttr {}
impl Copy for Sattr3 {}
impl Copy for DeviceData3 {}

impl Default for Sattr3 {
    /// Changes nothing.
    fn default() -> Self {
        Sattr3 {
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: SetTime::DontChange,
            mtime: SetTime::DontChange,
        }
    }
}
