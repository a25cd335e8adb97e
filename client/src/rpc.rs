//! ONC RPC over TCP (RFC 5531 section 11: record marking), AUTH_SYS
//! credentials (RFC 5531 appendix A), on `duet_protocols::nfs::rpc`.
//! Several calls may be in flight: `send` returns the xid, `wait` reads
//! replies until that xid's arrives (replies to other xids are kept until
//! asked for). Async over any connected byte stream ([`crate::Io`]).

use std::collections::HashMap;

use futures_lite::{AsyncReadExt, AsyncWriteExt};

use duet_protocols::nfs::rpc::{write_record, AcceptedReplyData, AuthSysParms, CallBody, OpaqueAuth, ReplyBody, ReplyHeader, AUTH_SYS};
use duet_protocols::nfs::xdr::{Opaque, XdrDecode, XdrEncode, XdrReader, XdrWriter};

use crate::{proto, Io, Result};

/// The largest reply record accepted (a READ of 1 MiB and its headers fit
/// many times over); a larger fragment length is an error, not an
/// allocation.
const MAX_RECORD: usize = 64 << 20;

pub struct RpcConn<S> {
    s: S,
    xid: u32,
    pub uid: u32,
    pub gid: u32,
    stash: HashMap<u32, Vec<u8>>,
}

impl<S: Io> RpcConn<S> {
    /// An RPC connection over `s`, already connected to the server.
    pub fn new(s: S) -> RpcConn<S> {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        RpcConn { s, xid: seed, uid: 0, gid: 0, stash: HashMap::new() }
    }

    /// Sends one call; returns its xid.
    pub async fn send(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Result<u32> {
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
        self.s.write_all(&out).await?;
        self.s.flush().await?;
        Ok(self.xid)
    }

    async fn read_record(&mut self) -> Result<Vec<u8>> {
        let mut rec = Vec::new();
        loop {
            let mut h = [0u8; 4];
            self.s.read_exact(&mut h).await?;
            let h = u32::from_be_bytes(h);
            let at = rec.len();
            let len = (h & 0x7fff_ffff) as usize;
            if at + len > MAX_RECORD {
                return proto(format!("RPC record over {MAX_RECORD} bytes"));
            }
            rec.resize(at + len, 0);
            self.s.read_exact(&mut rec[at..]).await?;
            if h & 0x8000_0000 != 0 {
                return Ok(rec);
            }
        }
    }

    /// Waits for the reply to `xid`; returns the whole reply record and
    /// the offset of the results (after the accepted-reply header).
    pub async fn wait(&mut self, xid: u32) -> Result<(Vec<u8>, usize)> {
        let rec = loop {
            if let Some(r) = self.stash.remove(&xid) {
                break r;
            }
            let r = self.read_record().await?;
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

    pub async fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Result<(Vec<u8>, usize)> {
        let x = self.send(prog, vers, proc_, args).await?;
        self.wait(x).await
    }
}
