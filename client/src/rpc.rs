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

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use duet_protocols::nfs::rpc::{AcceptedReplyData, ReplyHeader};
    use duet_protocols::nfs::xdr::{XdrEncode, XdrWriter};
    use futures_lite::future::block_on;

    use super::RpcConn;
    use crate::Error;

    /// A scripted peer: reads come from `input` at most `chunk` bytes at a
    /// time, every other poll answering Pending first (so the client's
    /// reads cross await points mid-record); writes are kept in `output`.
    struct Script {
        input: Vec<u8>,
        at: usize,
        chunk: usize,
        stall: bool,
        output: Vec<u8>,
    }

    impl Script {
        fn new(chunk: usize) -> Script {
            Script { input: Vec::new(), at: 0, chunk, stall: false, output: Vec::new() }
        }
    }

    impl futures_lite::AsyncRead for Script {
        fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
            self.stall = !self.stall;
            if self.stall {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let n = buf.len().min(self.chunk).min(self.input.len() - self.at);
            let at = self.at;
            buf[..n].copy_from_slice(&self.input[at..at + n]);
            self.at += n;
            Poll::Ready(Ok(n))
        }
    }

    impl futures_lite::AsyncWrite for Script {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            self.output.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// An accepted SUCCESS reply to `xid` (RFC 5531 9) whose results are
    /// `body`, record-marked; split in two fragments when `split`.
    fn reply(xid: u32, body: &[u8], split: bool, out: &mut Vec<u8>) {
        let mut w = XdrWriter::new();
        ReplyHeader::success(xid).encode(&mut w);
        w.put_raw(body);
        let rec = w.into_inner();
        if split {
            let (a, b) = rec.split_at(10);
            out.extend_from_slice(&(a.len() as u32).to_be_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(&(0x8000_0000 | b.len() as u32).to_be_bytes());
            out.extend_from_slice(b);
        } else {
            out.extend_from_slice(&(0x8000_0000 | rec.len() as u32).to_be_bytes());
            out.extend_from_slice(&rec);
        }
    }

    #[test]
    fn replies_out_of_order_are_matched_by_xid() {
        block_on(async {
            let mut c = RpcConn::new(Script::new(7));
            let x1 = c.send(100003, 4, 1, b"one.").await.unwrap();
            let x2 = c.send(100003, 4, 1, b"two.").await.unwrap();
            let x3 = c.send(100003, 4, 1, b"3333").await.unwrap();
            assert!(x1 != x2 && x2 != x3);
            // Three record-marked calls went out, each with its arguments last.
            let out = &c.s.output;
            let mut at = 0;
            let mut calls = Vec::new();
            while at < out.len() {
                let h = u32::from_be_bytes(out[at..at + 4].try_into().unwrap());
                assert!(h & 0x8000_0000 != 0, "one fragment per call");
                let len = (h & 0x7fff_ffff) as usize;
                calls.push(out[at + 4..at + 4 + len].to_vec());
                at += 4 + len;
            }
            assert_eq!(calls.len(), 3);
            assert_eq!(u32::from_be_bytes(calls[1][..4].try_into().unwrap()), x2);
            assert!(calls[2].ends_with(b"3333"));
            // The server answers 3, 1 (in two fragments), 2.
            let mut input = Vec::new();
            reply(x3, b"res3", false, &mut input);
            reply(x1, b"res1", true, &mut input);
            reply(x2, b"res2", false, &mut input);
            c.s.input = input;
            for (x, want) in [(x2, b"res2"), (x1, b"res1"), (x3, b"res3")] {
                let (rec, at) = c.wait(x).await.unwrap();
                assert_eq!(&rec[at..], want);
            }
            assert_eq!(c.s.at, c.s.input.len(), "every byte was read");
        });
    }

    #[test]
    fn hostile_replies_are_errors() {
        block_on(async {
            // A fragment claiming 2 GiB: refused before allocating.
            let mut c = RpcConn::new(Script::new(4096));
            let x = c.send(100003, 3, 0, &[]).await.unwrap();
            c.s.input = 0xffff_ffffu32.to_be_bytes().to_vec();
            assert!(matches!(c.wait(x).await, Err(Error::Protocol(_))));
            // A reply shorter than an xid.
            let mut c = RpcConn::new(Script::new(4096));
            let x = c.send(100003, 3, 0, &[]).await.unwrap();
            c.s.input = [0x8000_0002u32.to_be_bytes().as_slice(), &[1, 2]].concat();
            assert!(matches!(c.wait(x).await, Err(Error::Protocol(_))));
            // A call that was not accepted (PROC_UNAVAIL).
            let mut c = RpcConn::new(Script::new(4096));
            let x = c.send(100003, 3, 99, &[]).await.unwrap();
            let mut w = XdrWriter::new();
            ReplyHeader::accepted(x, AcceptedReplyData::ProcUnavail).encode(&mut w);
            let rec = w.into_inner();
            c.s.input = [(0x8000_0000 | rec.len() as u32).to_be_bytes().as_slice(), &rec].concat();
            assert!(matches!(c.wait(x).await, Err(Error::Protocol(_))));
            // The connection closing mid-record.
            let mut c = RpcConn::new(Script::new(4096));
            let x = c.send(100003, 3, 0, &[]).await.unwrap();
            c.s.input = [0x8000_0010u32.to_be_bytes().as_slice(), &[0; 5]].concat();
            assert!(matches!(c.wait(x).await, Err(Error::Io(_))));
        });
    }
}
