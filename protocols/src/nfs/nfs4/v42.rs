//! NFSv4.2 operations (RFC 7862 section 15): ALLOCATE, COPY, DEALLOCATE,
//! READ_PLUS, SEEK, and CLONE (RFC 7862 section 15.13).

use super::{Nfsstat4, OpStatus, StableHow4, Stateid4, Utf8Str, Verifier4, NFS4_MAX_DATA};
use crate::nfs::xdr::{
    xdr_enum, xdr_struct, List, Opaque, XdrDecode, XdrEncode, XdrError, XdrReader, XdrWriter,
};

/// Bound on COPY's source servers (inter-server copy, which duet does not
/// do, but must parse).
pub const NFS4_MAX_COPY_SOURCES: u32 = 16;
/// Bound on READ_PLUS result segments.
pub const NFS4_MAX_READ_PLUS_SEGMENTS: u32 = 1024;
/// Bound on netaddr4 strings (RFC 5665 netids and universal addresses).
pub const NFS4_MAX_NETADDR_STRING: u32 = 255;

// ---- 15.1 ALLOCATE, 15.4 DEALLOCATE ----

xdr_struct! {
    /// RFC 7862 15.1.1: ALLOCATE4args (and 15.4.1 DEALLOCATE4args).
    pub struct Allocate4Args {
        pub stateid: Stateid4,
        pub offset: u64,
        pub length: u64,
    }
}
/// RFC 7862 15.4.1: DEALLOCATE4args.
pub type Deallocate4Args = Allocate4Args;

// ---- 15.2 COPY ----

xdr_struct! {
    /// RFC 8881 3.3.9 / RFC 5665: netaddr4.
    pub struct NetAddr4<'a> {
        pub netid: Opaque<'a, NFS4_MAX_NETADDR_STRING>,
        pub addr: Opaque<'a, NFS4_MAX_NETADDR_STRING>,
    }
}

/// RFC 7862 section 3.3 (inter-server copy): netloc4, `union switch (netloc_type4 nl_type)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetLoc4<'a> {
    Name(Utf8Str<'a>),
    Url(Utf8Str<'a>),
    NetAddr(NetAddr4<'a>),
}

impl<'a> XdrDecode<'a> for NetLoc4<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match r.get_u32()? {
            1 => NetLoc4::Name(r.get()?),
            2 => NetLoc4::Url(r.get()?),
            3 => NetLoc4::NetAddr(r.get()?),
            v => {
                return Err(XdrError::BadDiscriminant {
                    what: "netloc_type4",
                    value: v,
                })
            }
        })
    }
}
impl XdrEncode for NetLoc4<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            NetLoc4::Name(n) => {
                w.put_u32(1);
                n.encode(w);
            }
            NetLoc4::Url(u) => {
                w.put_u32(2);
                u.encode(w);
            }
            NetLoc4::NetAddr(a) => {
                w.put_u32(3);
                a.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 7862 15.2.1: COPY4args (saved filehandle: source; current:
    /// destination).
    pub struct Copy4Args<'a> {
        pub src_stateid: Stateid4,
        pub dst_stateid: Stateid4,
        pub src_offset: u64,
        pub dst_offset: u64,
        pub count: u64,
        pub consecutive: bool,
        pub synchronous: bool,
        pub source_server: List<NetLoc4<'a>, NFS4_MAX_COPY_SOURCES>,
    }
}

xdr_struct! {
    /// RFC 7862 15.2.2: write_response4.
    pub struct WriteResponse4 {
        /// `stateid4 wr_callback_id<1>`: present for an asynchronous copy.
        pub callback_id: List<Stateid4, 1>,
        pub count: u64,
        pub committed: StableHow4,
        pub writeverf: Verifier4,
    }
}
xdr_struct! {
    /// RFC 7862 15.2.2: copy_requirements4.
    pub struct CopyRequirements4 {
        pub consecutive: bool,
        pub synchronous: bool,
    }
}
xdr_struct! {
    /// RFC 7862 15.2.2: COPY4resok.
    pub struct Copy4ResOk {
        pub response: WriteResponse4,
        pub requirements: CopyRequirements4,
    }
}

/// RFC 7862 15.2.2: COPY4res; NFS4ERR_OFFLOAD_NO_REQS carries the
/// requirements the server could meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copy4Res {
    Ok(Copy4ResOk),
    OffloadNoReqs(CopyRequirements4),
    Err(Nfsstat4),
}

impl<'a> XdrDecode<'a> for Copy4Res {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match Nfsstat4::decode(r)? {
            Nfsstat4::OK => Copy4Res::Ok(r.get()?),
            Nfsstat4::OFFLOAD_NO_REQS => Copy4Res::OffloadNoReqs(r.get()?),
            s => Copy4Res::Err(s),
        })
    }
}
impl XdrEncode for Copy4Res {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            Copy4Res::Ok(ok) => {
                Nfsstat4::OK.encode(w);
                ok.encode(w);
            }
            Copy4Res::OffloadNoReqs(req) => {
                Nfsstat4::OFFLOAD_NO_REQS.encode(w);
                req.encode(w);
            }
            Copy4Res::Err(s) => s.encode(w),
        }
    }
}
impl OpStatus for Copy4Res {
    fn status(&self) -> Nfsstat4 {
        match self {
            Copy4Res::Ok(_) => Nfsstat4::OK,
            Copy4Res::OffloadNoReqs(_) => Nfsstat4::OFFLOAD_NO_REQS,
            Copy4Res::Err(s) => *s,
        }
    }
}

// ---- 15.10 READ_PLUS ----

xdr_enum! {
    /// RFC 7862 15.10.1 / 15.11.1: data_content4.
    pub enum DataContent4 {
        Data = 0,
        Hole = 1,
    }
}

xdr_struct! {
    /// RFC 7862 15.10.1: READ_PLUS4args.
    pub struct ReadPlus4Args {
        pub stateid: Stateid4,
        pub offset: u64,
        pub count: u32,
    }
}

xdr_struct! {
    /// RFC 7862 15.10 (READ_PLUS): data4, a data segment; `data` borrows the payload.
    pub struct Data4<'a> {
        pub offset: u64,
        pub data: Opaque<'a, NFS4_MAX_DATA>,
    }
}
xdr_struct! {
    /// RFC 7862 15.10 (READ_PLUS): data_info4, a hole.
    pub struct DataInfo4 {
        pub offset: u64,
        pub length: u64,
    }
}

/// RFC 7862 15.10.2: read_plus_content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadPlusContent<'a> {
    Data(Data4<'a>),
    Hole(DataInfo4),
}

impl<'a> XdrDecode<'a> for ReadPlusContent<'a> {
    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XdrError> {
        Ok(match DataContent4::decode(r)? {
            DataContent4::Data => ReadPlusContent::Data(r.get()?),
            DataContent4::Hole => ReadPlusContent::Hole(r.get()?),
        })
    }
}
impl XdrEncode for ReadPlusContent<'_> {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            ReadPlusContent::Data(d) => {
                DataContent4::Data.encode(w);
                d.encode(w);
            }
            ReadPlusContent::Hole(h) => {
                DataContent4::Hole.encode(w);
                h.encode(w);
            }
        }
    }
}

xdr_struct! {
    /// RFC 7862 15.10.2: read_plus_res4 (the READ_PLUS4res resok).
    pub struct ReadPlus4ResOk<'a> {
        pub eof: bool,
        pub contents: List<ReadPlusContent<'a>, NFS4_MAX_READ_PLUS_SEGMENTS>,
    }
}

// ---- 15.11 SEEK ----

xdr_struct! {
    /// RFC 7862 15.11.1: SEEK4args.
    pub struct Seek4Args {
        pub stateid: Stateid4,
        pub offset: u64,
        pub what: DataContent4,
    }
}
xdr_struct! {
    /// RFC 7862 15.11.2: seek_res4.
    pub struct Seek4ResOk {
        pub eof: bool,
        pub offset: u64,
    }
}

// ---- 15.13 CLONE ----

xdr_struct! {
    /// RFC 7862 15.13.1: CLONE4args (saved filehandle: source; current:
    /// destination).
    pub struct Clone4Args {
        pub src_stateid: Stateid4,
        pub dst_stateid: Stateid4,
        pub src_offset: u64,
        pub dst_offset: u64,
        pub count: u64,
    }
}
