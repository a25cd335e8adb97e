//! Server-initiated NFS traffic (issue 13). The NFSv4 server (sans-I/O,
//! on executor 0) decides callbacks: a CB_RECALL leaves as an
//! `Event::Reply` for the connection bound to the client's back channel,
//! which is often not the connection whose call decided it; [`NfsRoutes`]
//! maps every NFS connection id to a channel its task polls and writes
//! from (so one task alone writes each stream). Breaks of NFSv4
//! delegations decided by SMB connections (any executor) come through a
//! bounded channel to [`serve_recalls`] on the NFS executor, which hands
//! them to `NfsServer::on_recall`. The replies to callbacks arrive on the
//! connection's ordinary read loop, where the server tells them from calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use duet_locks::{Break, Protocol};
use duet_protocols::nfs::server::Event;

/// How many records may wait for one NFS connection's task, and how many
/// SMB-decided delegation breaks for the NFS server; over it one is
/// dropped (counted) and the delegation is revoked at its deadline.
const QUEUE: usize = 4096;

/// Every NFS connection's outgoing channel, and the delegation breaks
/// from SMB connections.
pub struct NfsRoutes {
    conns: Mutex<HashMap<u64, flume::Sender<Vec<u8>>>>,
    recall_tx: flume::Sender<Break>,
    recall_rx: flume::Receiver<Break>,
    /// Records or breaks dropped: a full queue or a connection gone.
    pub dropped: AtomicU64,
}

impl Default for NfsRoutes {
    fn default() -> Self {
        let (recall_tx, recall_rx) = flume::bounded(QUEUE);
        NfsRoutes { conns: Mutex::new(HashMap::new()), recall_tx, recall_rx, dropped: AtomicU64::new(0) }
    }
}

/// A connection's place in [`NfsRoutes`]; leaves it when dropped.
pub struct NfsRoute<'a> {
    routes: &'a NfsRoutes,
    id: u64,
    pub rx: flume::Receiver<Vec<u8>>,
}

impl Drop for NfsRoute<'_> {
    fn drop(&mut self) {
        self.routes.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
    }
}

impl NfsRoutes {
    /// Registers NFS connection `id`: records for it arrive on the route.
    pub fn register(&self, id: u64) -> NfsRoute<'_> {
        let (tx, rx) = flume::bounded(QUEUE);
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        NfsRoute { routes: self, id, rx }
    }

    /// Hands a record (record-marked) to connection `conn`'s task.
    pub fn send(&self, conn: u64, bytes: Vec<u8>) -> bool {
        let tx = self.conns.lock().unwrap_or_else(|e| e.into_inner()).get(&conn).cloned();
        let sent = tx.is_some_and(|tx| tx.try_send(bytes).is_ok());
        if !sent {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// A break of an NFSv4 delegation, for the NFS server.
    pub fn recall(&self, b: Break) {
        if self.recall_tx.try_send(b).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Routes a lock-table break to its holder: an NFSv4 delegation to the
/// NFS server, an SMB oplock or lease to its connection.
pub fn deliver(conns: &crate::frontend::ConnTable, b: Break) {
    if b.holder.proto == Protocol::Nfs4 {
        conns.nfs_routes.recall(b);
    } else if conns.share_modes.get().is_some_and(|s| s.break_kept_open(&b, crate::admin::now_ns())) {
        // A kept durable open (no connection): closed instead of broken;
        // the durable scavenger runs its delete-on-close batch.
    } else {
        conns.smb_routes.deliver(b);
    }
}

/// Carries out events the NFS server produced outside any connection's
/// call (the timer, an SMB-decided recall): records go to their
/// connections, breaks to their holders. Such events never start batches.
pub fn route(conns: &crate::frontend::ConnTable, events: Vec<Event>) {
    for ev in events {
        match ev {
            Event::Reply { conn, bytes } => {
                conns.nfs_routes.send(conn, bytes);
            }
            Event::Recall(b) => deliver(conns, b),
            Event::Run { tag, .. } => tracing::warn!("NFS server asked for batch {tag} outside a call; ignored"),
            Event::Close(_) => {}
        }
    }
}

/// On the NFS executor: delegation breaks decided by SMB connections go to
/// the NFS server, whose CB_RECALLs go to the back-channel connections.
pub async fn serve_recalls(server: crate::frontend::SharedNfs, conns: std::sync::Arc<crate::frontend::ConnTable>) {
    let rx = conns.nfs_routes.recall_rx.clone();
    while let Ok(b) = rx.recv_async().await {
        let ev = crate::frontend::nfs_lock(&server).on_recall(b, crate::admin::now_ns());
        route(&conns, ev);
    }
}
