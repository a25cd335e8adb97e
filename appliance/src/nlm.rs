//! The I/O side of NLM (issue 13; the protocol is
//! `duet_protocols::nfs::server::nlm`, sans-I/O): the calls the server
//! decides for clients' lock managers (NLMPROC4_GRANTED for a blocked lock
//! now granted) are made here, and the hosts that hold NLM state are kept
//! in the data directory so that the next start gives them a grace period
//! to reclaim.
//!
//! At start, when the last run left hosts listed, each host's status
//! monitor is sent SM_NOTIFY the same way (program 100024 version 1).
//!
//! A callback goes to the client's portmapper (TCP port 111 at the address
//! its LOCK came from: PMAPPROC_GETPORT for NLM version 4 over TCP, RFC
//! 1833 3.2), then to that port: one call, one reply read (and ignored),
//! 3 s for each step. One thread makes them in turn from a bounded queue;
//! a callback that fails or finds the queue full is dropped (counted in
//! the log): a Linux client polls its blocked lock again every 30 s, and
//! that LOCK is granted.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use duet_protocols::nfs::portmap::{pmap_proc, Mapping, IPPROTO_TCP, PMAP_PORT, PMAP_VERSION};
use duet_protocols::nfs::rpc::{
    begin_record, end_record, AcceptedReplyData, CallBody, OpaqueAuth, ReplyBody, ReplyHeader, PROGRAM_PORTMAP,
    RPC_VERSION,
};
use duet_protocols::nfs::server::nlm::{NlmCallback, NlmHost};
use duet_protocols::nfs::xdr::{XdrDecode, XdrEncode, XdrReader, XdrWriter};

/// The file in the data directory listing the NLM hosts that hold state
/// ("name address" per line).
pub const NLM_HOSTS_FILE: &str = "nlm-hosts";

const QUEUE: usize = 1024;
const STEP: Duration = Duration::from_secs(3);

fn queue() -> &'static flume::Sender<NlmCallback> {
    static TX: OnceLock<flume::Sender<NlmCallback>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = flume::bounded::<NlmCallback>(QUEUE);
        let spawned = std::thread::Builder::new().name("nlm-callbacks".into()).spawn(move || {
            while let Ok(cb) = rx.recv() {
                match send(&cb) {
                    Ok(()) => tracing::debug!(addr = %cb.addr, prog = cb.prog, xid = cb.xid, "NLM callback sent"),
                    Err(e) => tracing::info!(addr = %cb.addr, prog = cb.prog, xid = cb.xid, "NLM callback not delivered: {e}"),
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the NLM callback thread: {e}");
        }
        tx
    })
}

/// Queues the server's callbacks (never blocks).
pub fn deliver(cbs: Vec<NlmCallback>) {
    for cb in cbs {
        if queue().try_send(cb).is_err() {
            tracing::info!("NLM callback queue full: a GRANTED callback is dropped (the client polls)");
        }
    }
}

fn read_record(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut rec = Vec::new();
    loop {
        let mut h = [0u8; 4];
        s.read_exact(&mut h)?;
        let h = u32::from_be_bytes(h);
        let len = (h & 0x7fff_ffff) as usize;
        if rec.len() + len > 64 << 10 {
            return Err(std::io::Error::other("reply too long"));
        }
        let at = rec.len();
        rec.resize(at + len, 0);
        s.read_exact(&mut rec[at..])?;
        if h & 0x8000_0000 != 0 {
            return Ok(rec);
        }
    }
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, STEP)?;
    s.set_read_timeout(Some(STEP))?;
    s.set_write_timeout(Some(STEP))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// The port the portmapper at `addr` names for (prog, vers, TCP).
fn getport(addr: IpAddr, prog: u32, vers: u32, xid: u32) -> std::io::Result<u16> {
    let mut s = connect(SocketAddr::new(addr, PMAP_PORT))?;
    let mut w = XdrWriter::new();
    let at = begin_record(&mut w);
    CallBody {
        xid,
        rpcvers: RPC_VERSION,
        prog: PROGRAM_PORTMAP,
        vers: PMAP_VERSION,
        proc_: pmap_proc::GETPORT,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    }
    .encode(&mut w);
    Mapping { prog, vers, prot: IPPROTO_TCP, port: 0 }.encode(&mut w);
    end_record(&mut w, at);
    s.write_all(w.as_bytes())?;
    let rec = read_record(&mut s)?;
    let mut r = XdrReader::new(&rec);
    let bad = || std::io::Error::other("bad portmap reply");
    let h = ReplyHeader::decode(&mut r).map_err(|_| bad())?;
    if h.xid != xid || !matches!(h.body, ReplyBody::Accepted { data: AcceptedReplyData::Success, .. }) {
        return Err(bad());
    }
    let port = r.get_u32().map_err(|_| bad())?;
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(std::io::Error::other("the program is not registered")),
    }
}

fn send(cb: &NlmCallback) -> std::io::Result<()> {
    let port = getport(cb.addr, cb.prog, cb.vers, cb.xid ^ 0x5a5a_5a5a)?;
    let mut s = connect(SocketAddr::new(cb.addr, port))?;
    s.write_all(&cb.record)?;
    // The answer (an nlm4_res) changes nothing here.
    let _ = read_record(&mut s)?;
    Ok(())
}

/// This machine's host name (the NSM `mon_name` of SM_NOTIFY when NFS
/// listens on every address).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "duet".into())
}

/// The hosts listed by the last run.
pub fn load_hosts(path: &Path) -> Vec<NlmHost> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (name, addr) = l.trim().rsplit_once(' ')?;
            let addr: IpAddr = addr.parse().ok()?;
            let name = hex::decode(name).ok().and_then(|b| String::from_utf8(b).ok())?;
            Some(NlmHost { name, addr })
        })
        .collect()
}

/// Replaces the list atomically (temporary file, fsync, rename).
pub fn store_hosts(path: &Path, hosts: &[NlmHost]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    for h in hosts {
        writeln!(f, "{} {}", hex::encode(h.name.as_bytes()), h.addr)?;
    }
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
