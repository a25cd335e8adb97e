//! Durable handles, v1 and v2: an open that survives the loss of its
//! connection for a while and is reattached by the client on a new one.
//!
//! * **Granting** (MS-SMB2 3.3.5.9.6 SMB2_CREATE_DURABLE_HANDLE_REQUEST,
//!   2.2.13.2.3 / response 2.2.14.2.3; 3.3.5.9.10 _REQUEST_V2, 2.2.13.2.11 /
//!   response 2.2.14.2.12): a file open that holds a batch oplock or a lease
//!   with handle caching when its CREATE completes is made durable. v2
//!   carries a CreateGuid and a timeout (0: `[limits]
//!   smb_durable_timeout_ms`; at most [`MAX_TIMEOUT_MS`]). Persistent
//!   handles (SMB2_DHANDLE_FLAG_PERSISTENT) need a continuously available
//!   share, which duet does not offer: the flag is not granted.
//! * **Keeping** (3.3.7.1 Handling Loss of a Connection; LOGOFF and a
//!   session ended by PreviousSessionId keep them too, as Windows and
//!   Samba do): a durable open whose batch oplock or H lease is held (not
//!   breaking) is not closed. Its lock-table state (share reservation,
//!   byte-range locks, oplock grant, lease membership) moves to the holder
//!   ([`KEPT`], file id) so that the dead connection's cleanup does not
//!   touch it, and the open record goes to [`DurableTable`] in the shared
//!   [`super::ShareModes`], reachable from every connection of every
//!   executor, until its deadline (3.3.2.2 Durable Open Scavenger Timer).
//! * **Reconnecting** (3.3.5.9.7 DHnC, 2.2.13.2.4; 3.3.5.9.12 DH2C,
//!   2.2.13.2.12): looked up by FileId.Persistent; a v2 reconnect must
//!   name the CreateGuid; a leased open needs the same ClientGuid and
//!   LeaseKey (else STATUS_OBJECT_NAME_NOT_FOUND) and its file name (else
//!   STATUS_INVALID_PARAMETER); another user is STATUS_ACCESS_DENIED. The
//!   open moves to the new connection with its FileId, position, oplock,
//!   lease and locks.
//! * **Breaks** (3.3.4.6 / 3.3.4.7, 3.3.2.2: the handle need not be kept
//!   past an oplock break): a break that reaches a kept open (another
//!   client opens the file, an NFS client writes it) closes it at once
//!   instead of being waited for, as Windows and Samba do.
//! * **AppInstanceId** (2.2.13.2.13, 3.3.5.9.13): a DH2Q CREATE with one
//!   closes the same user's open that has it, without a break (3.3.4.17):
//!   here, kept, or on another connection through
//!   [`super::Event::CloseOpen`] while the CREATE waits.
//! * **Expiry**: past its deadline a kept open closes as a CLOSE would; a
//!   delete-on-close file is removed by a batch under the open's
//!   credentials, which the driver runs ([`super::ShareModes::expire_durable`]).
//!
//! Architecture Invariant: sans-I/O like the rest of the server: time
//! comes in as `now_ns`; the table only decides, the driver runs the
//! batches it returns.


use duet_fs::{Batch, ObjRef};

use super::state::*;
use super::plan::*;

/// The longest durable v2 timeout granted (MS-SMB2 3.3.5.9.10 lets the
/// server choose; Windows Server 2012 and Samba cap at 300 s).
pub const MAX_TIMEOUT_MS: u32 = 300_000;

impl Kept {
    /// The lock-table key of the kept open.
    pub fn key(&self, id: u64) -> (u64, u64) {
        (KEPT, id)
    }

    /// The batch that removes its file when it was delete-on-close.
    pub fn removal(&self, now_ns: i64) -> Option<Batch> {
        if !self.open.delete_on_close || self.open.name.is_empty() {
            return None;
        }
        let mut b = Batch::new(self.cred.clone(), now_ns);
        b.stop_on_error = false;
        b.ops.push(super::plan::removal(ObjRef::Id(self.open.parent), &self.open.name, Some(self.open.is_dir)));
        Some(b)
    }
}

impl DurableTable {
    /// Kept durable opens now.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The earliest deadline of a kept open.
    pub fn poll_timeout(&self) -> Option<i64> {
        self.kept.values().map(|k| k.deadline).min()
    }
}

/// What a DH2Q timeout of `asked` ms gives, with `default_ms` for 0.
pub(super) fn v2_timeout(asked: u32, default_ms: u32) -> u32 {
    match asked {
        0 => default_ms.min(MAX_TIMEOUT_MS),
        t => t.min(MAX_TIMEOUT_MS),
    }
}

/// The longest ResiliencyTimeout a client may ask (MS-SMB2 3.3.5.15.9
/// MaxResiliencyTimeout; Windows allows five minutes).
pub(super) const MAX_RESILIENCY_MS: u32 = 300_000;

impl super::Connection {
    /// FSCTL_LMR_REQUEST_RESILIENCY (MS-SMB2 2.2.31.3 NETWORK_RESILIENCY_REQUEST,
    /// 3.3.5.15.9): the open becomes resilient, kept for its timeout after
    /// its connection is lost like a durable open (whatever its oplock or
    /// lease) and reconnected by DHnC; its LOCKs get sequence verification
    /// (3.3.5.14). Not on 2.0.2 (INVALID_DEVICE_REQUEST); input shorter than
    /// 8 bytes or a timeout past [`MAX_RESILIENCY_MS`] is
    /// INVALID_PARAMETER; a timeout of 0 takes the durable default.
    pub(super) fn plan_resiliency(&mut self, t: super::plan::Target, io: &crate::smb2::ioctl::IoctlRequest<'_>) -> super::plan::Plan {
        use super::plan::done;
        use crate::smb2::status::NtStatus;
        if self.dialect().unwrap_or(0) < crate::smb2::negotiate::dialect::SMB2_1 {
            return done(NtStatus::INVALID_DEVICE_REQUEST);
        }
        let super::plan::Target::Table(id) = t else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        let Some(raw) = io.input.get(..4) else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        if io.input.len() < 8 {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let timeout = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        if timeout > MAX_RESILIENCY_MS {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let default_ms = self.cfg.durable_timeout_ms.min(MAX_RESILIENCY_MS);
        let Some(o) = self.opens.get_mut(&id) else {
            return done(NtStatus::FILE_CLOSED);
        };
        o.resilient_ms = Some(if timeout == 0 { default_ms } else { timeout });
        super::plan::ok(crate::smb2::message::Response::Ioctl(crate::smb2::ioctl::IoctlResponse {
            ctl_code: io.ctl_code,
            file_id: io.file_id,
            input: &[],
            output: &[],
            flags: 0,
        }))
    }

    /// A lost connection, LOGOFF or ended session: keeps open `id` when it
    /// is durable and still holds its batch oplock or handle-caching lease,
    /// or is resilient (MS-SMB2 3.3.7.1). False: close it as usual.
    pub(super) fn keep_durable(&mut self, id: u64, now_ns: i64) -> bool {
        let Some(o) = self.opens.get(&id) else { return false };
        let client_guid = self.lease_client();
        let timeout_ms = match (o.durable, o.resilient_ms) {
            (_, Some(ms)) => ms,
            (Some(d), None) => {
                let held = o.breaking_to.is_none()
                    && match o.lease {
                        Some(k) => self.cfg.share_modes.leases().handle_held((client_guid, k)),
                        None => o.oplock == crate::smb2::create::oplock_level::BATCH,
                    };
                if !held {
                    return false;
                }
                d.timeout_ms
            }
            (None, None) => return false,
        };
        let Some(s) = self.sessions.get(&o.session_id) else { return false };
        let Some(t) = s.trees.get(&o.tree_id) else { return false };
        let (cred, root) = (s.cred.clone(), t.share.root);
        let Some(open) = self.opens.remove(&id) else { return false };
        let kept = Kept {
            open,
            cred,
            client_guid,
            root,
            deadline: now_ns.saturating_add(i64::from(timeout_ms) * 1_000_000),
        };
        match self.cfg.share_modes.keep_durable(self.conn_key, id, kept, self.cfg.max_durable) {
            Ok(()) => true,
            Err(k) => {
                self.opens.insert(id, k.open);
                false
            }
        }
    }

    /// DHnC / DH2C (MS-SMB2 3.3.5.9.7, 3.3.5.9.12): takes the kept open
    /// over for this connection, or says why not. `lease`: the lease
    /// context of the request, whatever its oplock level (only its key is
    /// looked at); `path`: the request's name as a share-mode path key.
    pub(super) fn reclaim(
        &mut self,
        hdr: &crate::smb2::header::Header,
        r: Reconnect,
        lease: Option<[u8; 16]>,
        path: Result<String, crate::smb2::status::NtStatus>,
        now_ns: i64,
    ) -> Result<u64, crate::smb2::status::NtStatus> {
        use crate::smb2::status::NtStatus;
        let (s, t) = self.tree_of(hdr)?;
        let (uid, root) = (s.cred.uid, t.share.root);
        let client = self.lease_client();
        let conn = self.conn_key;
        let id = r.persistent;
        let k = self.cfg.share_modes.reclaim_durable(
            id,
            |k| {
                // A resilient open that is not durable is reconnected by
                // DHnC (MS-SMB2 3.3.5.9.7: Open.IsResilient).
                match (k.open.durable, k.open.resilient_ms) {
                    (Some(d), _) if r.v2.is_some_and(|g| g != d.create_guid) => {
                        return Err(NtStatus::OBJECT_NAME_NOT_FOUND)
                    }
                    (Some(_), _) => {}
                    (None, Some(_)) if r.v2.is_none() => {}
                    (None, _) => return Err(NtStatus::OBJECT_NAME_NOT_FOUND),
                }
                if k.root != root {
                    return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
                }
                match (k.open.lease, lease) {
                    (Some(held), Some(asked)) => {
                        if held != asked || k.client_guid != client {
                            return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
                        }
                        // A leased open is reconnected by its name too.
                        if path.as_deref().ok() != Some(super::sharemode::path_key(k.root, &k.open.path).as_str()) {
                            return Err(NtStatus::INVALID_PARAMETER);
                        }
                    }
                    (None, None) => {}
                    _ => return Err(NtStatus::OBJECT_NAME_NOT_FOUND),
                }
                // Open.DurableOwner.
                if k.cred.uid != uid {
                    return Err(NtStatus::ACCESS_DENIED);
                }
                Ok(())
            },
            conn,
            hdr.session_id,
            now_ns,
        )?;
        let mut open = k.open;
        open.session_id = hdr.session_id;
        open.tree_id = hdr.tree_id().unwrap_or(0);
        self.opens.insert(id, open);
        Ok(id)
    }
}

impl super::Connection {
    /// MS-SMB2 3.3.5.9.13: a DH2Q CREATE with AppInstanceId `app` closes
    /// the open of the same user that has it (3.3.4.17 Server Application Requests Closing
    /// an Open: no response, no break). An open of this connection or a
    /// kept one closes here; one of another connection is asked to close
    /// ([`super::Event::CloseOpen`]). None: nothing to wait for; Some:
    /// the CREATE waits for the side batches queued (`park_after`) and,
    /// when given, for that open to be gone.
    pub(super) fn close_app_instance(
        &mut self,
        app: [u8; 16],
        hdr: &crate::smb2::header::Header,
        now_ns: i64,
    ) -> Option<Option<(u64, u64)>> {
        let (key, owner) = self.cfg.share_modes.app_instance(app)?;
        // Only the same user's application instance takes an open over.
        let (s, _) = self.tree_of(hdr).ok()?;
        if s.cred.uid != owner {
            return None;
        }
        if key.0 == self.conn_key {
            self.close_open_quietly(key.1, now_ns);
        } else if key.0 == KEPT {
            for b in self.cfg.share_modes.close_kept_id(key.1, now_ns) {
                let token = self.side_run(b, "app-instance-close");
                self.park_after.push(token);
            }
        } else {
            // Asked once; run again (resumed), the CREATE goes on whatever
            // became of it.
            if self.resuming.is_some() {
                return None;
            }
            self.outbox.push(super::Event::CloseOpen { conn: key.0, file: key.1 });
            return Some(Some(key));
        }
        (!self.park_after.is_empty()).then_some(None)
    }

    /// Closes open `file` as a CLOSE would, without a response (3.3.4.17);
    /// a delete-on-close file is removed by a side batch.
    fn close_open_quietly(&mut self, file: u64, now_ns: i64) {
        let Some(sid) = self.opens.get(&file).map(|o| o.session_id) else { return };
        let cred = self.sessions.get(&sid).map(|s| s.cred.clone());
        let Some(o) = self.forget_open(file) else { return };
        if o.delete_on_close && !o.name.is_empty() && !self.opens.values().any(|x| x.node == o.node) {
            if let Some(c) = cred {
                let mut b = Batch::new(c, now_ns);
                b.stop_on_error = false;
                b.ops.push(super::plan::removal(ObjRef::Id(o.parent), &o.name, Some(o.is_dir)));
                let token = self.side_run(b, "app-instance-close");
                self.park_after.push(token);
            }
        }
    }

    /// Another connection's CREATE took over this connection's open
    /// `file` by its AppInstanceId ([`super::Event::CloseOpen`]): it
    /// closes without a response; later requests on it get
    /// STATUS_FILE_CLOSED. Returns the events (its delete-on-close batch).
    pub fn close_open(&mut self, file: u64, now_ns: i64) -> Vec<super::Event> {
        self.close_open_quietly(file, now_ns);
        self.park_after.clear();
        std::mem::take(&mut self.outbox)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smb2::server::info::access;
    use crate::smb2::server::sharemode::holder;
    use crate::smb2::server::ShareModes;
    use crate::smb2::status::NtStatus;
    use duet_fs::{Credentials, NodeId};
    use duet_locks::{Break, Level};

    const NODE: NodeId = 5;

    fn kept(doc: bool, deadline: i64) -> Kept {
        Kept {
            open: Open {
                session_id: 1,
                tree_id: 1,
                node: NODE,
                parent: 1,
                name: "f".into(),
                path: "f".into(),
                is_dir: false,
                granted: access::FILE_READ_DATA | access::FILE_WRITE_DATA,
                options: 0,
                delete_on_close: doc,
                position: 0,
                dir: None,
                oplock: crate::smb2::create::oplock_level::BATCH,
                grant: None,
                breaking_to: None,
                lease: None,
                durable: Some(Durable { v2: true, create_guid: [7; 16], timeout_ms: 1000 }),
                app_instance: None,
                written: false,
                resilient_ms: None,
                lock_seq: [crate::smb2::server::state::NO_LOCK_SEQ; 64],
            },
            cred: Credentials { uid: 1000, gid: 1000, groups: Vec::new() },
            client_guid: [1; 16],
            root: 1,
            deadline,
        }
    }

    fn open_with_batch(t: &ShareModes, key: (u64, u64)) -> duet_locks::GrantId {
        let rw = access::FILE_READ_DATA | access::FILE_WRITE_DATA;
        assert!(t.acquire(NODE, key, rw, 0, "1:f".into(), 1));
        t.locks().table().request_open_grant(NODE, holder(key), Level::RWH, 0).unwrap().0
    }

    /// Kept: the dead connection's cleanup leaves it; the scavenger and a
    /// break close it (with the delete-on-close batch); a reclaim moves it
    /// to the new connection, whose cleanup then releases it.
    #[test]
    fn kept_opens_outlive_their_connection_until_reclaimed_broken_or_expired() {
        let t = ShareModes::new();
        let rw = access::FILE_READ_DATA | access::FILE_WRITE_DATA;
        let g = open_with_batch(&t, (1, 10));
        t.keep_durable(1, 10, kept(true, 1_000), 8).unwrap();
        t.release_connection(1);
        assert!(t.conflicts(NODE, rw, 7), "the kept open's reservation stands");
        assert!(t.expire_durable(999).is_empty(), "not yet");
        // A check that fails leaves it kept.
        assert_eq!(
            t.reclaim_durable(10, |_| Err(NtStatus::ACCESS_DENIED), 2, 1, 0).err(),
            Some(NtStatus::ACCESS_DENIED)
        );
        assert_eq!(t.durable().len(), 1);
        // A break of its oplock closes it, its delete-on-close batch out.
        let b = Break { grant: g, holder: holder((KEPT, 10)), from: Level::RWH, to: Level::R, ack_needed: true };
        let batches = t.break_kept(&b, 5).expect("a kept holder");
        assert_eq!(batches.len(), 1, "delete-on-close removal");
        assert!(!t.conflicts(NODE, rw, 7), "released");
        assert!(t.durable().is_empty());
        // A break for a live open is none of the table's business.
        let live = Break { grant: g, holder: holder((3, 10)), from: Level::RWH, to: Level::R, ack_needed: true };
        assert!(t.break_kept(&live, 5).is_none());

        // Expiry.
        open_with_batch(&t, (1, 11));
        t.keep_durable(1, 11, kept(false, 2_000), 8).unwrap();
        assert!(t.expire_durable(2_000).is_empty(), "closed, no delete-on-close");
        assert!(!t.conflicts(NODE, rw, 7) && t.durable().is_empty());

        // Reclaimed by connection 2, then released by its cleanup.
        open_with_batch(&t, (1, 12));
        t.keep_durable(1, 12, kept(false, 9_000), 8).unwrap();
        let k = t.reclaim_durable(12, |_| Ok(()), 2, 4, 0).unwrap();
        assert_eq!(k.open.node, NODE);
        assert!(t.conflicts(NODE, rw, 7));
        t.release_connection(2);
        assert!(!t.conflicts(NODE, rw, 7));
        assert_eq!(t.locks().table().counts().files, 0);

        // The limit: nothing kept past it.
        open_with_batch(&t, (1, 13));
        assert!(t.keep_durable(1, 13, kept(false, 9_000), 0).is_err());
        t.release_connection(1);
        assert!(!t.conflicts(NODE, rw, 7));
        assert_eq!(v2_timeout(0, 60_000), 60_000);
        assert_eq!(v2_timeout(u32::MAX, 60_000), MAX_TIMEOUT_MS);
    }
}
