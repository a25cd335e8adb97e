//! MOUNT v3 (RFC 1813 appendix I): MNT hands out the export root's handle
//! to allowed clients; EXPORT lists the exports. No batch is needed: the
//! export roots are known, and a vanished root shows as STALE at the first
//! NFS call.

use super::{accepted, reply_with, CallCtx, Event, Exports, FileHandle, NfsServer};
use crate::nfs::mount::{
    mountproc3, DirPath, ExportNode, MountBody, MountRes3, MountRes3Ok, MountStat3,
};
use crate::nfs::rpc::{AcceptedReplyData, AUTH_SYS};
use crate::nfs::xdr::{LinkedList, List, Opaque, XdrDecode, XdrEncode, XdrReader};

fn norm(p: &[u8]) -> String {
    let s = String::from_utf8_lossy(p);
    let t = s.trim_end_matches('/');
    if t.is_empty() {
        "/".to_string()
    } else {
        t.to_string()
    }
}

pub(super) fn call(
    srv: &mut NfsServer,
    ctx: &CallCtx,
    proc_: u32,
    mut r: XdrReader<'_>,
    exports: &dyn Exports,
) -> Vec<Event> {
    let (conn, xid) = (ctx.conn, ctx.xid);
    let garbage = || vec![accepted(conn, xid, AcceptedReplyData::GarbageArgs)];
    match proc_ {
        mountproc3::NULL => vec![reply_with(conn, xid, |_| {})],
        mountproc3::MNT => {
            let Ok(path) = DirPath::decode(&mut r) else {
                return garbage();
            };
            let want = norm(path.0);
            let list = exports.exports();
            let found = list
                .iter()
                .find(|e| norm(e.path.as_bytes()) == want || format!("/{}", e.name) == want);
            let res = match found {
                None => Err(MountStat3::ERR_NOENT),
                Some(e) if !e.allows(ctx.peer) => Err(MountStat3::ERR_ACCES),
                Some(e) => Ok(srv.handle(FileHandle::Object {
                    fsid: e.fsid,
                    id: e.root,
                })),
            };
            match res {
                Ok(fh) => {
                    if srv.mounts.len() < srv.cfg.max_mounts {
                        let entry = (ctx.peer.to_string(), want);
                        if !srv.mounts.contains(&entry) {
                            srv.mounts.push(entry);
                        }
                    }
                    let ok = MountRes3::Ok(MountRes3Ok {
                        fhandle: Opaque(&fh),
                        auth_flavors: List(vec![AUTH_SYS]),
                    });
                    vec![reply_with(conn, xid, |w| ok.encode(w))]
                }
                Err(s) => vec![reply_with(conn, xid, |w| MountRes3::Err(s).encode(w))],
            }
        }
        mountproc3::DUMP => {
            let list: crate::nfs::mount::MountList<'_> = LinkedList(
                srv.mounts
                    .iter()
                    .map(|(h, d)| MountBody {
                        hostname: Opaque(h.as_bytes()),
                        directory: Opaque(d.as_bytes()),
                    })
                    .collect(),
            );
            vec![reply_with(conn, xid, |w| list.encode(w))]
        }
        mountproc3::UMNT => {
            let Ok(path) = DirPath::decode(&mut r) else {
                return garbage();
            };
            let want = norm(path.0);
            let host = ctx.peer.to_string();
            srv.mounts.retain(|(h, d)| !(h == &host && d == &want));
            vec![reply_with(conn, xid, |_| {})]
        }
        mountproc3::UMNTALL => {
            let host = ctx.peer.to_string();
            srv.mounts.retain(|(h, _)| h != &host);
            vec![reply_with(conn, xid, |_| {})]
        }
        mountproc3::EXPORT => {
            let list = exports.exports();
            let paths: Vec<String> = list.iter().map(|e| norm(e.path.as_bytes())).collect();
            let nodes: crate::nfs::mount::Exports<'_> = LinkedList(
                list.iter()
                    .zip(&paths)
                    .map(|(e, p)| ExportNode {
                        dir: Opaque(p.as_bytes()),
                        groups: LinkedList(
                            e.clients.iter().map(|c| Opaque(c.as_bytes())).collect(),
                        ),
                    })
                    .collect(),
            );
            vec![reply_with(conn, xid, |w| nodes.encode(w))]
        }
        _ => vec![accepted(conn, xid, AcceptedReplyData::ProcUnavail)],
    }
}
