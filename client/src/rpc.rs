//! ONC RPC over TCP (RFC 5531 section 11: record marking), AUTH_SYS
//! credentials (RFC 5531 appendix A), on `duet_protocols::nfs::rpc`.
//! Several calls may be in flight: `send` returns the xid, `wait` reads
//! replies until that xid's arrives.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use duet_protocols::nfs::rpc::{write_record, AcceptedReplyData, AuthSysParms, CallBody, OpaqueAuth, ReplyBody, ReplyHeader, AUTH_SYS};
use duet_protocols::nfs::xdr::{Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};

use crate::{proto, Result};

pub struct RpcConn {
    s: TcpStream,
    xid: u32,
    pub uid: u32,
    pub gid: u32,
    stash: HashMap<u32, Vec<u8>>,
}

impl RpcConn {
    pub fn connect(addr: &str) -> Result<RpcConn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        Ok(RpcConn { s, xid: seed, uid: 0, gid: 0, stash: HashMap::new() })
    }

    /// Sends one call; returns its xid.
    pub fn send(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Result<u32> {
        self.xid = self.xid.wrapping_add(1);
        let cred = AuthSysParms { stamp: 0, machine_name: Opaque(b"duet-bench"), uid: self.uid, gid: self.gid, gids: vec![] };
        let mut cw = XdrWriter::new();
        cred.encode(&mut cw);
        let cred = cw.into_inner();
        let call = CallBody {
            xid: self.xid,
            rpcvers: 2,
            prog,
            vers,
            proc_,
            cred: OpaqueAuth { flavor: AUTH_SYS, body: &cred },
            verf: OpaqueAuth::NONE,
        };
        let mut w = XdrWriter::with_buffer(Vec::with_capacity(args.len() + 128));
        call.encode(&mut w);
        w.put_raw(args);
        let rec = w.into_inner();
        let mut out = Vec::with_capacity(rec.len() + 8);
        write_record(&rec, &mut out);
        self.s.write_all(&out)?;
        Ok(self.xid)
    }

    fn read_record(&mut self) -> Result<Vec<u8>> {
        let mut rec = Vec::new();
        loop {
            let mut h = [0u8; 4];
            self.s.read_exact(&mut h)?;
            let h = u32::from_be_bytes(h);
            let at = rec.len();
            rec.resize(at + (h & 0x7fff_ffff) as usize, 0);
            self.s.read_exact(&mut rec[at..])?;
            if h & 0x8000_0000 != 0 {
                return Ok(rec);
            }
        }
    }

    /// Waits for the reply to `xid`; returns the whole reply record and
    /// the offset of the results (after the accepted-reply header).
    pub fn wait(&mut self, xid: u32) -> Result<(Vec<u8>, usize)> {
        let rec = loop {
            if let Some(r) = self.stash.remove(&xid) {
                break r;
            }
            let r = self.read_record()?;
            if r.len() < 4 {
                return proto("short RPC reply");
            }
            let x = u32::from_be_bytes(r[..4].try_into().unwrap());
            self.stash.insert(x, r);
        };
        let mut r = XdrReader::new(&rec);
        let h = ReplyHeader::decode(&mut r).map_err(|e| crate::Error::Protocol(format!("RPC reply: {e:?}")))?;
        match h.body {
            ReplyBody::Accepted { data: AcceptedReplyData::Success, .. } => {}
            other => return proto(format!("RPC call not accepted: {other:?}")),
        }
        let at = rec.len() - r.remaining();
        Ok((rec, at))
    }

    pub fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Result<(Vec<u8>, usize)> {
        let x = self.send(prog, vers, proc_, args)?;
        self.wait(x)
    }
}
