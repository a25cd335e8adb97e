//! SMB2 CHANGE_NOTIFY on the server (MS-SMB2 3.3.5.19) and its CANCEL
//! (3.3.5.16). The first CHANGE_NOTIFY on a directory open sets up its
//! watch: completion filter, WATCH_TREE and a buffer the size of that
//! request's OutputBufferLength, all fixed until the open closes (as
//! Windows does; smbtorture smb2.notify.mask-change). A request that finds
//! changes buffered is answered at once; otherwise it is answered
//! STATUS_PENDING in the ASYNC form (3.3.4.2) and completed by the next
//! matching change, by CANCEL (STATUS_CANCELLED), or by the close of its
//! open, LOGOFF or TREE_DISCONNECT (STATUS_NOTIFY_CLEANUP). Changes that
//! do not fit the buffer make the next answer STATUS_NOTIFY_ENUM_DIR with
//! no data. The changes come from the appliance, whichever protocol made
//! them (`crate::changes`), as [`Notified`] records through
//! [`Connection::on_changes`].

use duet_fs::NodeId;

use super::conn::Connection;
use super::plan::*;
use super::info::access;
use crate::smb2::change_notify::ChangeNotifyRequest;
use crate::smb2::header::{Header, HeaderIds};
use crate::smb2::query_directory::OutputBufferResponse;
use crate::smb2::status::NtStatus;
use crate::smb2::server::Event;
use super::state::*;

/// A change as one connection receives it: seen from its watched
/// directory `watch`, `name` relative to it ('\'-separated below it;
/// `direct` when `name` is an entry of `watch` itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notified {
    pub watch: NodeId,
    pub name: String,
    pub direct: bool,
    pub action: u32,
    pub filter: u32,
}

/// The [`Notified::action`] that says the watched directory itself was
/// removed (by another open or protocol): its waiting requests complete
/// with STATUS_DELETE_PENDING (smbtorture smb2.notify.rmdir*).
pub const DIR_REMOVED: u32 = 0;

/// A directory one connection watches, for the registry: the node, with
/// WATCH_TREE or not, and the name it was opened by (its removal is
/// reported as [`DIR_REMOVED`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WatchedDir {
    pub node: NodeId,
    pub tree: bool,
    pub parent: NodeId,
    pub name: String,
}

/// The default of `ServerConfig::max_watches` (`[limits]
/// smb_notify_watches`): the most directory watches, and CHANGE_NOTIFYs
/// waiting, one connection may hold (over it: STATUS_INSUFFICIENT_RESOURCES).
pub const MAX_WATCHES: usize = 1024;

/// The most one watch buffers between requests, whatever its first
/// request asked (more: STATUS_NOTIFY_ENUM_DIR, the client lists the
/// directory again).
pub const MAX_WATCH_BUFFER: u32 = 64 << 10;

/// The most all watches of one connection buffer together.
pub const MAX_CONNECTION_BUFFER: usize = 1 << 20;

/// Size of one FILE_NOTIFY_INFORMATION entry (MS-FSCC 2.7.1) before the
/// padding that aligns the next on 4 bytes.
fn entry_len(name: &str) -> usize {
    12 + name.encode_utf16().count() * 2
}

/// The bytes of `entries` as chained FILE_NOTIFY_INFORMATION (MS-FSCC
/// 2.7.1): NextEntryOffset (0 on the last), Action, FileNameLength, the
/// name in UTF-16LE; each entry starts on a 4-byte boundary.
pub fn encode_entries(entries: &[(u32, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (action, name)) in entries.iter().enumerate() {
        let start = out.len();
        let units: Vec<u16> = name.encode_utf16().collect();
        let len = entry_len(name);
        let next = if i + 1 < entries.len() { (len + 3) & !3 } else { 0 };
        out.extend_from_slice(&(next as u32).to_le_bytes());
        out.extend_from_slice(&action.to_le_bytes());
        out.extend_from_slice(&((units.len() * 2) as u32).to_le_bytes());
        for u in units {
            out.extend_from_slice(&u.to_le_bytes());
        }
        if next != 0 {
            out.resize(start + next, 0);
        }
    }
    out
}

/// The length [`encode_entries`] gives.
fn encoded_len(entries: &[(u32, String)]) -> usize {
    let n = entries.len();
    entries.iter().enumerate().map(|(i, (_, name))| if i + 1 < n { (entry_len(name) + 3) & !3 } else { entry_len(name) }).sum()
}

impl Watch {
    /// Adds a change to the buffer, or marks it overflowed when the buffer
    /// (the first request's size) cannot hold it. A change equal to the
    /// last one buffered is not repeated.
    /// `room` is what the connection may still buffer in all.
    pub fn push(&mut self, action: u32, name: &str, room: usize) {
        if self.overflow {
            return;
        }
        if self.buffered.last().is_some_and(|(a, n)| *a == action && n == name) {
            return;
        }
        let len = entry_len(name);
        let padded = (len + 3) & !3;
        // Encoded, the new last entry is not padded.
        if self.padded + len > self.capacity as usize || padded > room {
            self.drop_buffer();
            self.overflow = true;
            return;
        }
        self.buffered.push((action, name.to_string()));
        self.padded += padded;
    }

    /// Empties the buffer (answered, or overflowed).
    pub fn drop_buffer(&mut self) -> Vec<(u32, String)> {
        self.padded = 0;
        std::mem::take(&mut self.buffered)
    }

    /// Whether this watch sees `n` (its directory, its filter, its depth).
    pub fn sees(&self, n: &Notified) -> bool {
        n.action != DIR_REMOVED && n.watch == self.node && self.filter & n.filter != 0 && (n.direct || self.tree)
    }
}

/// The body of a CHANGE_NOTIFY response carrying `data` (MS-SMB2 2.2.36).
fn notify_body(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + data.len());
    OutputBufferResponse::encode_fixed(data.len(), &mut out);
    out.extend_from_slice(data);
    out
}

/// The answer to a request of `output_len` bytes with `entries` (or the
/// overflow): its status and body.
fn answer(entries: &[(u32, String)], overflow: bool, output_len: u32) -> (NtStatus, Vec<u8>) {
    if overflow || encoded_len(entries) > output_len as usize {
        return (NtStatus::NOTIFY_ENUM_DIR, error_body());
    }
    (NtStatus::SUCCESS, notify_body(&encode_entries(entries)))
}

impl Connection {
    /// CHANGE_NOTIFY (MS-SMB2 3.3.5.19) on open `t`.
    pub(super) fn plan_change_notify(
        &mut self,
        fp: &mut FramePlan,
        hdr: &Header,
        t: Target,
        req: &ChangeNotifyRequest,
    ) -> Plan {
        let id = match t {
            Target::Table(id) => id,
            // A directory a CREATE of this compound opens. Last in the
            // compound, it waits once the CREATE made the open (`finish`
            // answers the interim); elsewhere a request that would go
            // async fails STATUS_INTERNAL_ERROR, as Windows answers
            // (smbtorture smb2.compound.interim1/interim2).
            Target::Pending(_) if hdr.next_command != 0 => return done(NtStatus::INTERNAL_ERROR),
            Target::Pending(_) => {
                let d = Deferred::Notify {
                    target: t,
                    flags: req.flags,
                    filter: req.completion_filter,
                    output_len: req.output_buffer_length,
                };
                fp.deferred.insert(fp.slots.len(), d);
                // A placeholder: `finish` answers the slot.
                return done(NtStatus::UNSUCCESSFUL);
            }
        };
        let Some(o) = self.opens.get(&id) else {
            return done(NtStatus::FILE_CLOSED);
        };
        if !o.is_dir {
            return done(NtStatus::INVALID_PARAMETER);
        }
        // FILE_LIST_DIRECTORY is FILE_READ_DATA on a directory (MS-SMB2 2.2.13.1.2).
        if o.granted & access::FILE_READ_DATA == 0 {
            return done(NtStatus::ACCESS_DENIED);
        }
        if req.output_buffer_length > self.cfg.max_transact_size {
            return done(NtStatus::INVALID_PARAMETER);
        }
        let (node, parent, name) = (o.node, o.parent, o.name.clone());
        // A directory already delete-pending (another connection's
        // delete-on-close open closed before this request came) answers
        // at once, as the waiting requests were (smbtorture
        // smb2.notify.rmdir3/rmdir4 when the two connections race).
        if self.cfg.share_modes.is_delete_pending(node) {
            return done(NtStatus::DELETE_PENDING);
        }
        if !self.watches.contains_key(&id) {
            if self.watches.len() >= self.cfg.max_watches {
                return done(NtStatus::INSUFFICIENT_RESOURCES);
            }
            self.watches.insert(
                id,
                Watch {
                    node,
                    parent,
                    name,
                    filter: req.completion_filter,
                    tree: req.flags & ChangeNotifyRequest::WATCH_TREE != 0,
                    capacity: req.output_buffer_length.min(MAX_WATCH_BUFFER),
                    buffered: Vec::new(),
                    padded: 0,
                    overflow: false,
                },
            );
            self.watches_changed = true;
        }
        let Some(w) = self.watches.get_mut(&id) else {
            return done(NtStatus::INSUFFICIENT_RESOURCES);
        };
        if w.overflow || !w.buffered.is_empty() {
            let entries = w.drop_buffer();
            let overflow = std::mem::replace(&mut w.overflow, false);
            let (status, body) = answer(&entries, overflow, req.output_buffer_length);
            return Plan::Done { status, body };
        }
        if self.notifies.len() >= self.cfg.max_watches {
            return done(NtStatus::INSUFFICIENT_RESOURCES);
        }
        let async_id = self.new_async_id();
        let mut h = *hdr;
        h.ids = HeaderIds::Async { async_id };
        self.last_notify = Some(WaitingNotify {
            file: id,
            output_len: req.output_buffer_length,
            reply: AsyncReply { hdr: h, sign: None, encrypt: None, channel: None },
        });
        done(NtStatus::PENDING)
    }

    /// The directories this connection watches, with WATCH_TREE, for the
    /// appliance's registry. Call after [`Connection::watches_changed`].
    pub fn watched(&self) -> Vec<WatchedDir> {
        let mut v: Vec<WatchedDir> = self
            .watches
            .values()
            .map(|w| WatchedDir { node: w.node, tree: w.tree, parent: w.parent, name: w.name.clone() })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether the watched directories changed since the last call (the
    /// driver then hands [`Connection::watched`] to its registry).
    pub fn watches_changed(&mut self) -> bool {
        std::mem::replace(&mut self.watches_changed, false)
    }

    /// Changes seen from directories this connection watches: each watch
    /// that sees one completes its oldest waiting CHANGE_NOTIFY with all it
    /// sees of them, or buffers them.
    pub fn on_changes(&mut self, changes: &[Notified]) -> Vec<Event> {
        let mut out = Vec::new();
        let mut files: Vec<u64> = self.watches.keys().copied().collect();
        files.sort_unstable();
        let mut used: usize = self.watches.values().map(|w| w.padded).sum();
        for file in files {
            let Some(w) = self.watches.get_mut(&file) else { continue };
            if changes.iter().any(|n| n.action == DIR_REMOVED && n.watch == w.node) {
                let mut ids: Vec<u64> =
                    self.notifies.iter().filter(|(_, n)| n.file == file).map(|(k, _)| *k).collect();
                ids.sort_unstable();
                for id in ids {
                    if let Some(n) = self.notifies.remove(&id) {
                        out.extend(self.send_reply(&n.reply, NtStatus::DELETE_PENDING, &error_body()));
                    }
                }
                continue;
            }
            let mut seen = false;
            for n in changes {
                if w.sees(n) {
                    let before = w.padded;
                    w.push(n.action, &n.name, MAX_CONNECTION_BUFFER.saturating_sub(used));
                    used = (used + w.padded).saturating_sub(before);
                    seen = true;
                }
            }
            if !seen {
                continue;
            }
            let waiting = self
                .notifies
                .iter()
                .filter(|(_, n)| n.file == file)
                .map(|(k, _)| *k)
                .min();
            let Some(async_id) = waiting else { continue };
            let Some(n) = self.notifies.remove(&async_id) else { continue };
            let Some(w) = self.watches.get_mut(&file) else { continue };
            used = used.saturating_sub(w.padded);
            let entries = w.drop_buffer();
            let overflow = std::mem::replace(&mut w.overflow, false);
            let (status, body) = answer(&entries, overflow, n.output_len);
            out.extend(self.send_reply(&n.reply, status, &body));
        }
        out
    }

    /// CANCEL of a waiting CHANGE_NOTIFY (by AsyncId, or MessageId in the
    /// SYNC form): answered STATUS_CANCELLED. None when none matches.
    pub(super) fn cancel_notify(&mut self, hdr: &Header) -> Option<Vec<Event>> {
        let key = self
            .notifies
            .iter()
            .find(|(id, n)| match hdr.ids {
                HeaderIds::Async { async_id } => **id == async_id,
                HeaderIds::Sync { .. } => n.reply.hdr.message_id == hdr.message_id,
            })
            .map(|(k, _)| *k)?;
        let n = self.notifies.remove(&key)?;
        Some(self.send_reply(&n.reply, NtStatus::CANCELLED, &error_body()))
    }

    /// The open `file` closes (CLOSE, LOGOFF, TREE_DISCONNECT, a session
    /// ended): its waiting CHANGE_NOTIFYs complete with
    /// STATUS_NOTIFY_CLEANUP and no data, and its watch goes.
    pub(super) fn notify_cleanup(&mut self, file: u64) {
        if self.watches.remove(&file).is_some() {
            self.watches_changed = true;
        }
        let mut ids: Vec<u64> = self.notifies.iter().filter(|(_, n)| n.file == file).map(|(k, _)| *k).collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(n) = self.notifies.remove(&id) {
                let ev = self.send_reply(&n.reply, NtStatus::NOTIFY_CLEANUP, &notify_body(&[]));
                self.outbox.extend(ev);
            }
        }
    }

    /// Directory `node` is to be deleted when its last open here closes:
    /// the CHANGE_NOTIFYs waiting on watches of it complete with
    /// STATUS_DELETE_PENDING (sent ahead of the frame's answers).
    pub(super) fn notify_delete_pending(&mut self, node: NodeId) {
        let files: Vec<u64> = self.watches.iter().filter(|(_, w)| w.node == node).map(|(f, _)| *f).collect();
        let mut ids: Vec<u64> = self.notifies.iter().filter(|(_, n)| files.contains(&n.file)).map(|(k, _)| *k).collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(n) = self.notifies.remove(&id) {
                let ev = self.send_reply(&n.reply, NtStatus::DELETE_PENDING, &error_body());
                self.outbox.extend(ev);
            }
        }
    }

    /// CHANGE_NOTIFYs waiting now.
    pub fn waiting_notifies(&self) -> usize {
        self.notifies.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_chain_on_four_byte_boundaries() {
        let b = encode_entries(&[(1, "a".into()), (2, "bcd".into())]);
        // 12 + 2 = 14 -> next at 16; then 12 + 6 = 18.
        assert_eq!(b.len(), 16 + 18);
        assert_eq!(u32::from_le_bytes(b[0..4].try_into().unwrap()), 16);
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 2);
        assert_eq!(&b[12..14], &[b'a', 0]);
        assert_eq!(u32::from_le_bytes(b[16..20].try_into().unwrap()), 0, "the last entry's NextEntryOffset is 0");
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 2);
        assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), 6);
        assert_eq!(encoded_len(&[(1, "a".into()), (2, "bcd".into())]), b.len());
    }

    fn watch(capacity: u32) -> Watch {
        Watch { node: 7, parent: 1, name: "d".into(), filter: 3, tree: false, capacity, buffered: Vec::new(), padded: 0, overflow: false }
    }

    #[test]
    fn the_buffer_holds_what_the_first_request_allowed_then_overflows() {
        let mut w = watch(40);
        w.push(1, "one", usize::MAX);
        w.push(1, "one", usize::MAX);
        assert_eq!(w.buffered.len(), 1, "a repeated change is not buffered twice");
        w.push(2, "one", usize::MAX);
        assert_eq!(w.buffered.len(), 2);
        assert_eq!(w.padded, encoded_len(&w.buffered) + 2, "18 + 18 encoded, the first padded to 20");
        w.push(1, "three", usize::MAX);
        assert!(w.overflow && w.buffered.is_empty() && w.padded == 0, "over 40 bytes: the buffer is dropped");
        w.push(1, "x", usize::MAX);
        assert!(w.buffered.is_empty(), "nothing is buffered once overflowed");
        assert_eq!(answer(&[], true, 1000).0, NtStatus::NOTIFY_ENUM_DIR);
        assert_eq!(answer(&[(1, "abc".into())], false, 10).0, NtStatus::NOTIFY_ENUM_DIR);
        assert_eq!(answer(&[(1, "abc".into())], false, 18).0, NtStatus::SUCCESS);
        let mut zero = watch(0);
        zero.push(1, "a", usize::MAX);
        assert!(zero.overflow, "a zero-length buffer holds nothing");
        let mut tight = watch(1000);
        tight.push(1, "a", 15);
        assert!(tight.overflow, "no room left on the connection: overflowed");
    }

    #[test]
    fn a_watch_sees_its_directory_its_filter_and_its_subtree_only_with_watch_tree() {
        let mut w = watch(1000);
        let n = |watch, direct, filter| Notified { watch, name: "a".into(), direct, action: 1, filter };
        assert!(w.sees(&n(7, true, 1)));
        assert!(!w.sees(&n(8, true, 1)), "another directory");
        assert!(!w.sees(&n(7, true, 4)), "a filter bit not asked for");
        assert!(!w.sees(&n(7, false, 1)), "below the directory without WATCH_TREE");
        w.tree = true;
        assert!(w.sees(&n(7, false, 1)));
    }
}
