//! The daemon-wide session table (MS-SMB2 3.3.1.5 GlobalSessionTable):
//! what a connection must know of a session that lives on another one.
//! A SESSION_SETUP naming a session of another connection — a client
//! binding a channel (3.3.5.5, SMB2_SESSION_FLAG_BINDING), or one that
//! lost track of which connection holds it — is checked against it, and
//! its error response is signed with that session's key (3.3.5.2.4), so
//! that a client requiring signing sees the real status. It also keeps
//! session ids unique across connections, which PreviousSessionId relies
//! on. Plain data behind one mutex, held for a lookup or an update only.

use std::collections::HashMap;
use std::sync::Mutex;

use super::crypto::{CipherKey, SigningKey};

/// What other connections may see of one session.
#[derive(Debug, Clone)]
pub struct GlobalSession {
    /// The connection the session was made on ([`super::Connection::key`]).
    pub conn: u64,
    /// That connection's dialect (Session.Connection.Dialect).
    pub dialect: u16,
    /// That connection's encryption cipher, if any.
    pub cipher: Option<u16>,
    /// Session.SigningKey, once authenticated (None for a guest or an
    /// anonymous session, and while the authentication is in progress).
    pub signing: Option<SigningKey>,
    /// The session's client-to-server key (3.x encryption): a channel
    /// decrypts with it what it forwards (MS-SMB2 3.3.5.2.1.1).
    pub decrypt: Option<CipherKey>,
    /// Authenticated (Session.State Valid).
    pub valid: bool,
    /// A guest or anonymous session (3.3.5.5: never bound).
    pub guest: bool,
    /// The user it is authenticated as.
    pub uid: u32,
    /// Other connections bound to it as channels (multichannel).
    pub channels: u32,
}

/// Channels one session may have, its own connection included (what
/// Windows allows; smbtorture smb2.multichannel.generic.num_channels): a
/// binding past it is STATUS_INSUFFICIENT_RESOURCES.
pub const MAX_CHANNELS: u32 = 32;

/// The table, shared by every SMB connection of the daemon
/// ([`super::ServerConfig::sessions`]).
#[derive(Debug, Default)]
pub struct SessionRegistry {
    table: Mutex<HashMap<u64, GlobalSession>>,
}

impl SessionRegistry {
    pub fn new() -> SessionRegistry {
        SessionRegistry::default()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, GlobalSession>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `id` for a new session of connection `s.conn`; false when
    /// another session has it (the caller draws another id).
    pub fn reserve(&self, id: u64, s: GlobalSession) -> bool {
        let mut t = self.table();
        if t.contains_key(&id) {
            return false;
        }
        t.insert(id, s);
        true
    }

    /// Replaces what the table says of session `id` of connection `conn`
    /// (after its authentication or re-authentication).
    pub fn update(&self, id: u64, conn: u64, f: impl FnOnce(&mut GlobalSession)) {
        if let Some(s) = self.table().get_mut(&id).filter(|s| s.conn == conn) {
            f(s);
        }
    }

    /// Counts one more channel of session `id` (held by `owner`); false
    /// when it has [`MAX_CHANNELS`] already or is not `owner`'s.
    pub fn join_channel(&self, id: u64, owner: u64) -> bool {
        match self.table().get_mut(&id) {
            Some(s) if s.conn == owner && s.channels + 1 < MAX_CHANNELS => {
                s.channels += 1;
                true
            }
            _ => false,
        }
    }

    /// A channel of session `id` (held by `owner`) is gone.
    pub fn leave_channel(&self, id: u64, owner: u64) {
        if let Some(s) = self.table().get_mut(&id).filter(|s| s.conn == owner) {
            s.channels = s.channels.saturating_sub(1);
        }
    }

    /// Session `id` is now held by connection `s.conn` (handed over by
    /// its lost connection to a channel).
    pub fn adopt(&self, id: u64, s: GlobalSession) {
        self.table().insert(id, s);
    }

    /// Forgets session `id` if connection `conn` holds it.
    pub fn remove(&self, id: u64, conn: u64) {
        let mut t = self.table();
        if t.get(&id).is_some_and(|s| s.conn == conn) {
            t.remove(&id);
        }
    }

    /// Forgets every session of connection `conn` (it is gone).
    pub fn remove_connection(&self, conn: u64) {
        self.table().retain(|_, s| s.conn != conn);
    }

    pub fn get(&self, id: u64) -> Option<GlobalSession> {
        self.table().get(&id).cloned()
    }

    /// Sessions in the table.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
