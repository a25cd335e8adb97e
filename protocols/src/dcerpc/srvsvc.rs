//! The srvsvc interface (MS-SRVS, 4b324fc8-1670-01d3-1278-5a47bf6ee188
//! v3.0), the calls a share browser makes: NetrShareEnum (opnum 15,
//! 3.1.4.8) at levels 0, 1 and 2, NetrShareGetInfo (opnum 16, 3.1.4.10)
//! at levels 0, 1, 2 and 1005, and NetrServerGetInfo (opnum 21, 3.1.4.17)
//! at levels 100 and 101, and NetrShareEnumSticky (opnum 36, 3.1.4.9: the
//! same call over the permanent, non-special shares). Every other opnum
//! faults with nca_op_rng_error.
//!
//! The IDL shapes (MS-SRVS 2.2.4.x / 6, as NDR lays them out):
//! - `SHARE_ENUM_STRUCT { DWORD Level; [switch_is(Level)]
//!   SHARE_ENUM_UNION ShareInfo; }` whose arms (0, 1, 2, 501, 502, 503)
//!   are unique pointers to `{ DWORD EntriesRead; [size_is(EntriesRead)]
//!   SHARE_INFO_n* Buffer; }`;
//! - `SHARE_INFO_0 { [string] wchar_t* shi0_netname; }`,
//!   `SHARE_INFO_1 { netname; DWORD shi1_type; [string] remark; }`,
//!   `SHARE_INFO_2 { netname; type; remark; DWORD permissions, max_uses,
//!   current_uses; [string] path; [string] passwd; }` (2.2.4.22-24),
//!   `SHARE_INFO_1005 { DWORD shi1005_flags; }` (2.2.4.29);
//! - `SERVER_INFO_100 { DWORD platform_id; [string] name; }`,
//!   `SERVER_INFO_101 { platform_id; name; DWORD version_major,
//!   version_minor, type; [string] comment; }` (2.2.4.40-41).

use super::endpoint::Service;
use super::fault::status as fault;
use super::ndr::{Reader, Writer};
use super::{DecodeError, SyntaxId, SRVSVC};

/// Operation numbers (MS-SRVS 3.1.4).
pub mod opnum {
    pub const NETR_SHARE_ENUM: u16 = 15;
    pub const NETR_SHARE_GET_INFO: u16 = 16;
    pub const NETR_SERVER_GET_INFO: u16 = 21;
    pub const NETR_SHARE_ENUM_STICKY: u16 = 36;
}

/// Share types (MS-SRVS 2.2.2.4).
pub mod stype {
    pub const DISKTREE: u32 = 0x0000_0000;
    pub const PRINTQ: u32 = 0x0000_0001;
    pub const DEVICE: u32 = 0x0000_0002;
    pub const IPC: u32 = 0x0000_0003;
    pub const SPECIAL: u32 = 0x8000_0000;
    pub const TEMPORARY: u32 = 0x4000_0000;
}

/// The NET_API_STATUS / WERROR results (MS-ERREF 2.2).
pub mod werror {
    pub const SUCCESS: u32 = 0;
    pub const ACCESS_DENIED: u32 = 5;
    pub const INVALID_LEVEL: u32 = 124;
    pub const MORE_DATA: u32 = 234;
    /// NERR_NetNameNotFound.
    pub const NET_NAME_NOT_FOUND: u32 = 2310;
}

/// One share as srvsvc describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareInfo {
    pub name: String,
    pub share_type: u32,
    pub remark: String,
    /// The local path (level 2), as Windows shows it.
    pub path: String,
}

/// SHARE_ENUM_UNION / SHARE_INFO arms that are pointers (MS-SRVS 2.2.3.x).
fn enum_arm_known(level: u32) -> bool {
    matches!(level, 0 | 1 | 2 | 501 | 502 | 503)
}

fn info_arm_known(level: u32) -> bool {
    matches!(
        level,
        0 | 1 | 2 | 501 | 502 | 503 | 1004 | 1005 | 1006 | 1501
    )
}

/// The [in] part of NetrShareEnum (opnum 15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareEnumRequest {
    pub server_name: Option<String>,
    pub level: u32,
    pub prefered_maximum_length: u32,
    pub resume_handle: Option<u32>,
}

/// Why a stub could not be taken: the fault status to answer with.
fn ndr(_: DecodeError) -> u32 {
    fault::FAULT_NDR
}

fn server_name(r: &mut Reader<'_>) -> Result<Option<String>, u32> {
    if r.unique_ptr("ServerName").map_err(ndr)? {
        Ok(Some(r.wstring("ServerName").map_err(ndr)?))
    } else {
        Ok(None)
    }
}

impl ShareEnumRequest {
    pub fn decode(stub: &[u8], le: bool) -> Result<ShareEnumRequest, u32> {
        let mut r = Reader::new(stub, le);
        let server_name = server_name(&mut r)?;
        let level = r.u32("Level").map_err(ndr)?;
        let switch = r.u32("ShareInfo switch").map_err(ndr)?;
        if switch != level {
            return Err(fault::FAULT_NDR);
        }
        if !enum_arm_known(switch) {
            return Err(fault::INVALID_TAG);
        }
        if r.unique_ptr("ShareInfo container").map_err(ndr)? {
            let _entries = r.u32("EntriesRead").map_err(ndr)?;
            // A client hands an empty container in; a filled one would be
            // pointless, and duet does not unmarshal it.
            if r.unique_ptr("Buffer").map_err(ndr)? {
                return Err(fault::FAULT_NDR);
            }
        }
        let prefered_maximum_length = r.u32("PreferedMaximumLength").map_err(ndr)?;
        let resume_handle = if r.unique_ptr("ResumeHandle").map_err(ndr)? {
            Some(r.u32("ResumeHandle").map_err(ndr)?)
        } else {
            None
        };
        Ok(ShareEnumRequest {
            server_name,
            level,
            prefered_maximum_length,
            resume_handle,
        })
    }

    /// Encodes the [in] part (client side; tests).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.unique_ptr(self.server_name.is_some());
        if let Some(s) = &self.server_name {
            w.wstring(s);
        }
        w.u32(self.level);
        w.u32(self.level);
        w.unique_ptr(true);
        w.u32(0);
        w.unique_ptr(false);
        w.u32(self.prefered_maximum_length);
        w.unique_ptr(self.resume_handle.is_some());
        if let Some(h) = self.resume_handle {
            w.u32(h);
        }
        w.out
    }
}

/// Roughly what one entry costs the client (fixed part and strings), for
/// PreferedMaximumLength (MS-SRVS 3.1.4.8).
fn entry_cost(level: u32, s: &ShareInfo) -> usize {
    let strings = match level {
        0 => s.name.len() + 1,
        1 => s.name.len() + s.remark.len() + 2,
        _ => s.name.len() + s.remark.len() + s.path.len() + 3,
    };
    let fixed = match level {
        0 => 8,
        1 => 12,
        _ => 32,
    };
    fixed + 2 * strings
}

/// Writes one SHARE_INFO_n fixed part (pointers as referents).
fn info_fixed(w: &mut Writer, level: u32, s: &ShareInfo) {
    w.unique_ptr(true);
    if level >= 1 {
        w.u32(s.share_type);
        w.unique_ptr(true);
    }
    if level == 2 {
        w.u32(0); // permissions (share-level security is not used)
        w.u32(u32::MAX); // max_uses: unlimited
        w.u32(0); // current_uses
        w.unique_ptr(true); // path
        w.unique_ptr(false); // passwd
    }
}

/// Writes the deferred strings of one SHARE_INFO_n.
fn info_deferred(w: &mut Writer, level: u32, s: &ShareInfo) {
    w.wstring(&s.name);
    if level >= 1 {
        w.wstring(&s.remark);
    }
    if level == 2 {
        w.wstring(&s.path);
    }
}

/// NetrShareEnum's [out] stub: InfoStruct, TotalEntries, ResumeHandle,
/// the status (MS-SRVS 3.1.4.8).
pub fn share_enum_response(req: &ShareEnumRequest, shares: &[ShareInfo], w: &mut Writer) {
    w.u32(req.level);
    w.u32(req.level);
    if !matches!(req.level, 0..=2) {
        w.unique_ptr(false);
        w.u32(0); // TotalEntries
        w.unique_ptr(req.resume_handle.is_some());
        if let Some(h) = req.resume_handle {
            w.u32(h);
        }
        w.u32(werror::INVALID_LEVEL);
        return;
    }
    let start = (req.resume_handle.unwrap_or(0) as usize).min(shares.len());
    let budget = req.prefered_maximum_length as usize;
    let mut end = start;
    let mut used = 0usize;
    while end < shares.len() {
        let c = entry_cost(req.level, &shares[end]);
        // At least one entry per call, so that a small buffer still moves.
        if end > start && used + c > budget {
            break;
        }
        used += c;
        end += 1;
    }
    let page = &shares[start..end];
    w.unique_ptr(true); // the container
    w.u32(page.len() as u32); // EntriesRead
    w.unique_ptr(!page.is_empty()); // Buffer
    if !page.is_empty() {
        w.u32(page.len() as u32); // conformance (max_count)
        for s in page {
            info_fixed(w, req.level, s);
        }
        for s in page {
            info_deferred(w, req.level, s);
        }
    }
    w.u32(shares.len() as u32); // TotalEntries
    let more = end < shares.len();
    w.unique_ptr(req.resume_handle.is_some());
    if req.resume_handle.is_some() {
        w.u32(if more { end as u32 } else { 0 });
    }
    w.u32(if more {
        werror::MORE_DATA
    } else {
        werror::SUCCESS
    });
}

/// The [in] part of NetrShareGetInfo (opnum 16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGetInfoRequest {
    pub server_name: Option<String>,
    pub net_name: String,
    pub level: u32,
}

impl ShareGetInfoRequest {
    pub fn decode(stub: &[u8], le: bool) -> Result<ShareGetInfoRequest, u32> {
        let mut r = Reader::new(stub, le);
        let server_name = server_name(&mut r)?;
        // [in, string] WCHAR* NetName: a top-level reference pointer has
        // no referent id on the wire (C706 14.3.11.1).
        let net_name = r.wstring("NetName").map_err(ndr)?;
        let level = r.u32("Level").map_err(ndr)?;
        Ok(ShareGetInfoRequest {
            server_name,
            net_name,
            level,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.unique_ptr(self.server_name.is_some());
        if let Some(s) = &self.server_name {
            w.wstring(s);
        }
        w.wstring(&self.net_name);
        w.u32(self.level);
        w.out
    }
}

/// NetrShareGetInfo's [out] stub: the SHARE_INFO union and the status.
pub fn share_get_info_response(req: &ShareGetInfoRequest, shares: &[ShareInfo], w: &mut Writer) {
    w.u32(req.level);
    let arm = info_arm_known(req.level);
    let share = shares
        .iter()
        .find(|s| s.name.eq_ignore_ascii_case(&req.net_name));
    let status = match (share, req.level) {
        (None, _) => werror::NET_NAME_NOT_FOUND,
        (Some(_), 0..=2 | 1005) => werror::SUCCESS,
        (Some(_), _) => werror::INVALID_LEVEL,
    };
    if arm {
        match share.filter(|_| status == werror::SUCCESS) {
            Some(_) if req.level == 1005 => {
                w.unique_ptr(true);
                w.u32(0); // shi1005_flags: no DFS, manual caching
            }
            Some(s) => {
                w.unique_ptr(true);
                info_fixed(w, req.level, s);
                info_deferred(w, req.level, s);
            }
            None => w.unique_ptr(false),
        }
    }
    w.u32(status);
}

/// The [in] part of NetrServerGetInfo (opnum 21).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerGetInfoRequest {
    pub server_name: Option<String>,
    pub level: u32,
}

impl ServerGetInfoRequest {
    pub fn decode(stub: &[u8], le: bool) -> Result<ServerGetInfoRequest, u32> {
        let mut r = Reader::new(stub, le);
        let server_name = server_name(&mut r)?;
        let level = r.u32("Level").map_err(ndr)?;
        Ok(ServerGetInfoRequest { server_name, level })
    }
}

/// SV_TYPE_WORKSTATION | SV_TYPE_SERVER | SV_TYPE_SERVER_NT (MS-SRVS
/// 2.2.2.7): what a file server announces.
pub const SERVER_TYPE: u32 = 0x0000_0001 | 0x0000_0002 | 0x0000_8000;
/// PLATFORM_ID_NT (MS-SRVS 2.2.2.6).
pub const PLATFORM_ID_NT: u32 = 500;

/// The srvsvc manager over a share list.
#[derive(Debug, Clone)]
pub struct Srvsvc {
    pub server_name: String,
    pub comment: String,
    pub shares: Vec<ShareInfo>,
}

impl Srvsvc {
    fn server_get_info(&self, req: &ServerGetInfoRequest, w: &mut Writer) {
        w.u32(req.level);
        match req.level {
            100 | 101 => {
                w.unique_ptr(true);
                w.u32(PLATFORM_ID_NT);
                w.unique_ptr(true);
                if req.level == 101 {
                    w.u32(10); // version_major
                    w.u32(0); // version_minor
                    w.u32(SERVER_TYPE);
                    w.unique_ptr(true);
                }
                w.wstring(&self.server_name);
                if req.level == 101 {
                    w.wstring(&self.comment);
                }
                w.u32(werror::SUCCESS);
            }
            _ => {
                w.unique_ptr(false);
                w.u32(werror::INVALID_LEVEL);
            }
        }
    }
}

impl Service for Srvsvc {
    fn interface(&self) -> SyntaxId {
        SRVSVC
    }

    fn call(&self, opnum: u16, stub: &[u8], little_endian: bool) -> Result<Vec<u8>, u32> {
        let mut w = Writer::new();
        match opnum {
            opnum::NETR_SHARE_ENUM => {
                let req = ShareEnumRequest::decode(stub, little_endian)?;
                share_enum_response(&req, &self.shares, &mut w);
            }
            opnum::NETR_SHARE_ENUM_STICKY => {
                let req = ShareEnumRequest::decode(stub, little_endian)?;
                let sticky: Vec<ShareInfo> = self
                    .shares
                    .iter()
                    .filter(|s| s.share_type & stype::SPECIAL == 0)
                    .cloned()
                    .collect();
                share_enum_response(&req, &sticky, &mut w);
            }
            opnum::NETR_SHARE_GET_INFO => {
                let req = ShareGetInfoRequest::decode(stub, little_endian)?;
                share_get_info_response(&req, &self.shares, &mut w);
            }
            opnum::NETR_SERVER_GET_INFO => {
                let req = ServerGetInfoRequest::decode(stub, little_endian)?;
                self.server_get_info(&req, &mut w);
            }
            _ => return Err(fault::OP_RNG_ERROR),
        }
        Ok(w.out)
    }
}

/// A client-side view of a NetrShareEnum response (tests and tools): the
/// level, the entries (name, type, remark), TotalEntries, the resume
/// handle and the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareEnumReply {
    pub level: u32,
    pub entries: Vec<(String, u32, String)>,
    pub total: u32,
    pub resume_handle: Option<u32>,
    pub status: u32,
}

impl ShareEnumReply {
    /// Decodes a level 0 or 1 reply.
    pub fn decode(stub: &[u8]) -> Result<ShareEnumReply, DecodeError> {
        let mut r = Reader::new(stub, true);
        let level = r.u32("Level")?;
        if r.u32("switch")? != level || level > 1 {
            return Err(DecodeError("level"));
        }
        let mut entries = Vec::new();
        if r.unique_ptr("container")? {
            let n = r.u32("EntriesRead")?;
            if r.unique_ptr("Buffer")? {
                if r.u32("max_count")? != n {
                    return Err(DecodeError("max_count"));
                }
                let mut fixed = Vec::new();
                for _ in 0..n {
                    let name = r.unique_ptr("netname")?;
                    let (t, remark) = if level == 1 {
                        (r.u32("type")?, r.unique_ptr("remark")?)
                    } else {
                        (0, false)
                    };
                    fixed.push((name, t, remark));
                }
                for (name, t, remark) in fixed {
                    let n = if name {
                        r.wstring("netname")?
                    } else {
                        String::new()
                    };
                    let m = if remark {
                        r.wstring("remark")?
                    } else {
                        String::new()
                    };
                    entries.push((n, t, m));
                }
            }
        }
        let total = r.u32("TotalEntries")?;
        let resume_handle = if r.unique_ptr("ResumeHandle")? {
            Some(r.u32("ResumeHandle")?)
        } else {
            None
        };
        let status = r.u32("status")?;
        if r.remaining() != 0 {
            return Err(DecodeError("trailing bytes"));
        }
        Ok(ShareEnumReply {
            level,
            entries,
            total,
            resume_handle,
            status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The stub of smbclient 4.17's NetrShareEnum (frame 23 of
    /// smbclient-vs-samba.pcapng, after the 24-byte REQUEST header).
    const REQ_STUB: &str = "00000200 0a000000 00000000 0a000000 3100320037002e0030002e0030002e0031000000 01000000 01000000 04000200 00000000 00000000 ffffffff 08000200 00000000";
    /// The stub of Samba 4.17's RESPONSE (frame 24, after its header).
    const SAMBA_RESP_STUB: &str = "01000000010000000c0002000200000010000200020000001400020000000000180002001c0002000300008020000200060000000000000006000000730068006100720065000000010000000000000001000000000000000500000000000000050000004900500043002400000000002300000000000000230000004900500043002000530065007200760069006300650020002800530061006d0062006100200034002e00310037002e00310032002d00440065006200690061006e0029000000000002000000240002000000000000000000";

    fn samba_shares() -> Vec<ShareInfo> {
        vec![
            ShareInfo {
                name: "share".into(),
                share_type: stype::DISKTREE,
                remark: String::new(),
                path: "C:\\share".into(),
            },
            ShareInfo {
                name: "IPC$".into(),
                share_type: stype::IPC | stype::SPECIAL,
                remark: "IPC Service (Samba 4.17.12-Debian)".into(),
                path: String::new(),
            },
        ]
    }

    #[test]
    fn captured_share_enum_request_decodes() {
        let stub = hex(&REQ_STUB.replace(' ', ""));
        let req = ShareEnumRequest::decode(&stub, true).unwrap();
        assert_eq!(
            req,
            ShareEnumRequest {
                server_name: Some("127.0.0.1".into()),
                level: 1,
                prefered_maximum_length: u32::MAX,
                resume_handle: Some(0),
            }
        );
        assert_eq!(req.encode(), stub);
        for n in 0..stub.len() {
            assert!(ShareEnumRequest::decode(&stub[..n], true).is_err(), "{n}");
        }
    }

    #[test]
    fn share_enum_level1_matches_samba_bytes() {
        let stub = hex(&REQ_STUB.replace(' ', ""));
        let req = ShareEnumRequest::decode(&stub, true).unwrap();
        // Samba happened to number its referents from 0x0002000c.
        let mut w = Writer::with_referents(0x0002_000c);
        share_enum_response(&req, &samba_shares(), &mut w);
        assert_eq!(w.out, hex(SAMBA_RESP_STUB));
        let reply = ShareEnumReply::decode(&w.out).unwrap();
        assert_eq!(reply.entries.len(), 2);
        assert_eq!(reply.entries[1].1, 0x8000_0003);
        assert_eq!((reply.total, reply.status), (2, 0));
    }

    #[test]
    fn share_enum_pages_with_a_small_buffer() {
        let shares: Vec<ShareInfo> = (0..50)
            .map(|i| ShareInfo {
                name: format!("share{i:02}"),
                share_type: stype::DISKTREE,
                remark: String::new(),
                path: String::new(),
            })
            .collect();
        let mut got = Vec::new();
        let mut resume = 0;
        for _ in 0..50 {
            let req = ShareEnumRequest {
                server_name: None,
                level: 1,
                prefered_maximum_length: 200,
                resume_handle: Some(resume),
            };
            let mut w = Writer::new();
            share_enum_response(&req, &shares, &mut w);
            let r = ShareEnumReply::decode(&w.out).unwrap();
            assert_eq!(r.total, 50);
            got.extend(r.entries.into_iter().map(|e| e.0));
            if r.status == werror::SUCCESS {
                break;
            }
            assert_eq!(r.status, werror::MORE_DATA);
            resume = r.resume_handle.unwrap();
        }
        let want: Vec<String> = shares.iter().map(|s| s.name.clone()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn levels_0_2_and_bad_levels() {
        let svc = Srvsvc {
            server_name: "DUET".into(),
            comment: "duet".into(),
            shares: samba_shares(),
        };
        for level in [0u32, 2] {
            let req = ShareEnumRequest {
                server_name: None,
                level,
                prefered_maximum_length: u32::MAX,
                resume_handle: None,
            };
            let out = svc.call(15, &req.encode(), true).unwrap();
            // Level, switch, container ptr, count 2, array ptr, max 2.
            assert_eq!(&out[12..16], &2u32.to_le_bytes());
            assert_eq!(&out[out.len() - 4..], &0u32.to_le_bytes());
            if level == 0 {
                let r = ShareEnumReply::decode(&out).unwrap();
                assert_eq!(r.entries[0].0, "share");
            }
        }
        let req = ShareEnumRequest {
            server_name: None,
            level: 502,
            prefered_maximum_length: u32::MAX,
            resume_handle: None,
        };
        let out = svc.call(15, &req.encode(), true).unwrap();
        assert_eq!(&out[out.len() - 4..], &werror::INVALID_LEVEL.to_le_bytes());
        let mut bad = req.encode();
        bad[4..8].copy_from_slice(&7u32.to_le_bytes());
        bad[8..12].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(svc.call(15, &bad, true), Err(fault::INVALID_TAG));
        assert_eq!(svc.call(99, &[], true), Err(fault::OP_RNG_ERROR));
        let req = ShareEnumRequest {
            server_name: None,
            level: 1,
            prefered_maximum_length: u32::MAX,
            resume_handle: None,
        };
        let sticky = svc.call(36, &req.encode(), true).unwrap();
        let names: Vec<String> = ShareEnumReply::decode(&sticky)
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(names, ["share"]);
        assert_eq!(svc.call(15, &[1, 2, 3], true), Err(fault::FAULT_NDR));
    }

    #[test]
    fn share_get_info() {
        let svc = Srvsvc {
            server_name: "DUET".into(),
            comment: "duet".into(),
            shares: samba_shares(),
        };
        let call = |name: &str, level: u32| {
            let req = ShareGetInfoRequest {
                server_name: Some("DUET".into()),
                net_name: name.into(),
                level,
            };
            svc.call(16, &req.encode(), true).unwrap()
        };
        let out = call("SHARE", 1);
        // switch 1, ptr, netname ptr, type 0, remark ptr, "share", "".
        assert_eq!(&out[..4], &1u32.to_le_bytes());
        assert_eq!(&out[12..16], &0u32.to_le_bytes());
        let mut r = Reader::new(&out[20..], true);
        assert_eq!(r.wstring("n").unwrap(), "share");
        assert_eq!(r.wstring("r").unwrap(), "");
        assert_eq!(&out[out.len() - 4..], &0u32.to_le_bytes());
        let out = call("nope", 1);
        assert_eq!(out, [1, 0, 0, 0, 0, 0, 0, 0, 0x06, 0x09, 0, 0]);
        let out = call("IPC$", 7);
        assert_eq!(out, [7, 0, 0, 0, 124, 0, 0, 0]);
        let out = call("IPC$", 2);
        assert_eq!(&out[out.len() - 4..], &0u32.to_le_bytes());
        let out = call("share", 1005);
        assert_eq!(out.len(), 16);
    }

    #[test]
    fn server_get_info_101() {
        let svc = Srvsvc {
            server_name: "DUET".into(),
            comment: "duet".into(),
            shares: Vec::new(),
        };
        let mut w = Writer::new();
        w.unique_ptr(false);
        w.u32(101);
        let out = svc.call(21, &w.out, true).unwrap();
        assert_eq!(&out[..4], &101u32.to_le_bytes());
        assert_eq!(&out[8..12], &500u32.to_le_bytes());
        assert_eq!(&out[out.len() - 4..], &0u32.to_le_bytes());
    }
}
