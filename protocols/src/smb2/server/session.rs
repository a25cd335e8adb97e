//! NEGOTIATE (MS-SMB2 3.3.5.3/3.3.5.4), SESSION_SETUP (3.3.5.5) with
//! NTLM in SPNEGO, re-authentication and PreviousSessionId, LOGOFF
//! (3.3.5.6), TREE_CONNECT / TREE_DISCONNECT (3.3.5.7/3.3.5.8) and the
//! end of a connection (3.3.7.1): the handlers of sessions and trees.

use std::collections::HashMap;

use duet_fs::{Credentials, ObjRef};

use super::crypto::{derive_keys, preauth_update, SigningKey};
use super::info::{access, extra_status, to_filetime};
use super::{Directory, Event, GlobalSession, MovedSession, ShareEntry};

/// How long a lost connection's opens wait for a channel of their session
/// to take them over (ms); then they close as a lost connection's do.
pub const HANDOVER_MS: i64 = 5_000;
use crate::auth::ntlm::{self, NtlmError, ServerContext};
use crate::auth::spnego::{self, ClientToken, NegState};
use crate::smb2::header::Header;
use crate::smb2::message::Response;
use crate::smb2::negotiate::{
    algorithm, capabilities, dialect, security_mode, NegotiateContext, NegotiateRequest,
    NegotiateResponse,
};
use crate::smb2::session_setup::{SessionSetupRequest, SessionSetupResponse};
use crate::smb2::status::NtStatus;
use crate::smb2::tree_connect::{TreeConnectRequest, TreeConnectResponse};
use super::plan::*;
use super::state::*;
use super::conn::Connection;

impl Connection {
    pub(super) fn negotiate_response<'a>(
        &mut self,
        chosen: u16,
        hint: &'a [u8],
        contexts: Vec<NegotiateContext<'a>>,
        now_ns: i64,
    ) -> NegotiateResponse<'a> {
        let mut caps = 0;
        if chosen != dialect::SMB2_0_2 {
            // Leases from 2.1 on (MS-SMB2 3.3.5.4, `lease.rs`).
            caps |= capabilities::LARGE_MTU | capabilities::LEASING;
        }
        if chosen >= dialect::SMB3_0 {
            // v2 leases on directories (`lease.rs`), broken by any change
            // inside them, from either protocol.
            caps |= capabilities::DIRECTORY_LEASING;
            if self.cfg.multichannel {
                // Channels bind to sessions (MS-SMB2 3.3.5.5).
                caps |= capabilities::MULTI_CHANNEL;
            }
        }
        let small = chosen == dialect::SMB2_0_2;
        let cap = |v: u32| if small { v.min(65536) } else { v };
        NegotiateResponse {
            security_mode: security_mode::SIGNING_ENABLED
                | if self.cfg.require_signing {
                    security_mode::SIGNING_REQUIRED
                } else {
                    0
                },
            dialect_revision: chosen,
            server_guid: self.cfg.server_guid,
            capabilities: caps,
            max_transact_size: cap(self.cfg.max_transact_size),
            max_read_size: cap(self.cfg.max_read_size),
            max_write_size: cap(self.cfg.max_write_size),
            system_time: to_filetime(now_ns),
            server_start_time: 0,
            security_buffer: hint,
            negotiate_contexts: contexts,
        }
    }

    pub(super) fn negotiate(&mut self, msg: &[u8], now_ns: i64) -> Plan {
        if self.negotiated.is_some() {
            // 3.3.5.3: a second NEGOTIATE ends the connection.
            self.closed = true;
            return done(NtStatus::INVALID_PARAMETER);
        }
        let req = match NegotiateRequest::decode(msg) {
            Ok(r) => r,
            Err(e) => return done(e.status()),
        };
        let Some(&chosen) = req
            .dialects
            .iter()
            .filter(|d| self.cfg.dialects.contains(d) && **d != dialect::SMB2_WILDCARD)
            .max()
        else {
            return done(NtStatus::NOT_SUPPORTED);
        };
        let salt: [u8; 32] = self.rng.bytes();
        let mut contexts = Vec::new();
        let mut cipher = None;
        let mut cmac = true;
        let mut gmac = false;
        if chosen == dialect::SMB3_1_1 {
            let mut preauth_ok = false;
            let mut signing_offer: Option<Vec<u16>> = None;
            for c in &req.negotiate_contexts {
                match c {
                    NegotiateContext::PreauthIntegrity {
                        hash_algorithms, ..
                    } => {
                        preauth_ok = hash_algorithms.contains(&algorithm::SHA_512);
                        if !preauth_ok {
                            return done(extra_status::NO_PREAUTH_INTEGRITY_HASH_OVERLAP);
                        }
                    }
                    NegotiateContext::Encryption { ciphers } => {
                        cipher = [
                            algorithm::AES_128_GCM,
                            algorithm::AES_128_CCM,
                            algorithm::AES_256_GCM,
                            algorithm::AES_256_CCM,
                        ]
                        .into_iter()
                        .find(|c| ciphers.contains(c));
                    }
                    NegotiateContext::Signing { algorithms } => {
                        signing_offer = Some(algorithms.clone())
                    }
                    _ => {}
                }
            }
            if !preauth_ok {
                return done(NtStatus::INVALID_PARAMETER);
            }
            contexts.push(NegotiateContext::PreauthIntegrity {
                hash_algorithms: vec![algorithm::SHA_512],
                salt: &[],
            });
            if req
                .negotiate_contexts
                .iter()
                .any(|c| matches!(c, NegotiateContext::Encryption { .. }))
            {
                contexts.push(NegotiateContext::Encryption {
                    ciphers: vec![cipher.unwrap_or(0)],
                });
            }
            if let Some(algs) = signing_offer {
                // The client's first algorithm that duet also signs with
                // (3.3.5.4: the server picks from the client's order).
                let pick = algs
                    .iter()
                    .copied()
                    .find(|a| {
                        matches!(*a, algorithm::AES_GMAC | algorithm::AES_CMAC | algorithm::HMAC_SHA256)
                    })
                    .unwrap_or(algorithm::AES_CMAC);
                match pick {
                    algorithm::AES_GMAC => gmac = true,
                    algorithm::HMAC_SHA256 => cmac = false,
                    _ => {}
                }
                contexts.push(NegotiateContext::Signing {
                    algorithms: vec![pick],
                });
            }
        } else if chosen >= dialect::SMB3_0 && req.capabilities & capabilities::ENCRYPTION != 0 {
            cipher = Some(algorithm::AES_128_CCM);
        }
        let hint = spnego::server_hint();
        // The salt must live as long as the response: encode right here.
        let mut resp = self.negotiate_response(chosen, &hint, Vec::new(), now_ns);
        let salted: Vec<NegotiateContext<'_>> = contexts
            .into_iter()
            .map(|c| match c {
                NegotiateContext::PreauthIntegrity {
                    hash_algorithms, ..
                } => NegotiateContext::PreauthIntegrity {
                    hash_algorithms,
                    salt: &salt,
                },
                c => c,
            })
            .collect();
        resp.negotiate_contexts = salted;
        if chosen >= dialect::SMB3_0 && chosen != dialect::SMB3_1_1 && cipher.is_some() {
            resp.capabilities |= capabilities::ENCRYPTION;
        }
        let body = body_of(&Response::Negotiate(resp.clone()));
        self.negotiated = Some(Negotiated {
            dialect: chosen,
            client_guid: req.client_guid,
            client_caps: req.capabilities,
            client_security_mode: req.security_mode,
            server_caps: resp.capabilities,
            server_security_mode: resp.security_mode,
            cipher,
            cmac,
            gmac,
        });
        if chosen == dialect::SMB3_1_1 {
            self.preauth = preauth_update(&[0; 64], msg);
        }
        Plan::Done {
            status: NtStatus::SUCCESS,
            body,
        }
    }

    // ---- SESSION_SETUP -------------------------------------------------

    pub(super) fn session_setup(
        &mut self,
        hdr: &Header,
        msg: &[u8],
        req: &SessionSetupRequest<'_>,
        dir: &dyn Directory,
        fp: &mut FramePlan,
    ) -> (Plan, Option<SigningKey>) {
        self.last_new_session = 0;
        let Some(neg) = self.negotiated.clone() else {
            return (done(NtStatus::INVALID_PARAMETER), None);
        };
        let binding = req.flags & SessionSetupRequest::BINDING != 0;
        if binding && hdr.session_id == 0 {
            return (done(NtStatus::INVALID_PARAMETER), None);
        }
        if hdr.session_id != 0 && !self.sessions.contains_key(&hdr.session_id) {
            return self.session_elsewhere(hdr, msg, req, &neg, dir);
        }
        if binding {
            // A channel of this connection exists already (3.3.5.5).
            let key = self.sessions.get(&hdr.session_id).and_then(|s| s.own_signing());
            return (done(NtStatus::REQUEST_NOT_ACCEPTED), key.filter(|_| hdr.flags.is_signed()));
        }
        let sid = if hdr.session_id == 0 {
            if self.sessions.len() >= self.cfg.max_sessions {
                return (done(NtStatus::REQUEST_NOT_ACCEPTED), None);
            }
            // 32 random bits: clients (smbtorture among them) keep session
            // ids in 32-bit variables, and Samba and Windows hand out ids
            // that fit. Unique daemon-wide (the session table).
            let reserved = GlobalSession {
                conn: self.conn_key,
                dialect: neg.dialect,
                cipher: neg.cipher,
                signing: None,
                decrypt: None,
                channels: 0,
                valid: false,
                guest: false,
                uid: self.cfg.guest_uid,
            };
            let mut id = self.rng.u64() & 0xFFFF_FFFF;
            while id == 0 || self.sessions.contains_key(&id) || !self.cfg.sessions.reserve(id, reserved.clone()) {
                id = self.rng.u64() & 0xFFFF_FFFF;
            }
            self.sessions.insert(
                id,
                Session {
                    valid: false,
                    auth: AuthState::None,
                    preauth: self.preauth,
                    cred: Credentials::user(self.cfg.guest_uid, self.cfg.guest_gid),
                    guest: false,
                    keys: None,
                    signing_required: false,
                    encrypt: false,
                    trees: HashMap::new(),
                    channels: HashMap::new(),
                    own_key: None,
                },
            );
            self.last_new_session = id;
            id
        } else {
            match self.sessions.get_mut(&hdr.session_id) {
                Some(s) => {
                    if s.valid && matches!(s.auth, AuthState::None) {
                        // Re-authentication starts a fresh preauth chain.
                        s.preauth = self.preauth;
                    }
                    hdr.session_id
                }
                None => return (done(NtStatus::USER_SESSION_DELETED), None),
            }
        };
        let is_311 = neg.dialect == dialect::SMB3_1_1;
        // A failed authentication ends the session: a new one, and a valid
        // one whose re-authentication failed (its opens closed as by
        // LOGOFF; smbtorture smb2.session.reauth6, as Windows does).
        let fail = |me: &mut Self, fp: &mut FramePlan, status: NtStatus| {
            match me.sessions.get(&sid).map(|s| s.valid) {
                Some(false) => {
                    me.forget_session(sid);
                }
                Some(true) => {
                    me.drop_opens(fp, sid, None);
                    me.forget_session(sid);
                }
                None => {}
            }
            (done(status), None)
        };
        let (ntlm_msg, spnego_used, mech_list, client_mic) = match client_ntlm(req.security_buffer) {
            Ok(t) => t,
            Err(status) => return fail(self, fp, status),
        };
        if is_311 {
            if let Some(s) = self.sessions.get_mut(&sid) {
                s.preauth = preauth_update(&s.preauth, msg);
            }
        }
        let kind = ntlm_msg
            .get(8..12)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        match kind {
            Some(1) => {
                let mut ctx = ServerContext::new(self.rng.bytes());
                let chal =
                    match ctx.challenge(ntlm_msg, &self.cfg.domain, &self.cfg.server_name, None) {
                        Ok(c) => c,
                        Err(_) => return fail(self, fp, NtStatus::INVALID_PARAMETER),
                    };
                let Some(s) = self.sessions.get_mut(&sid) else {
                    return fail(self, fp, NtStatus::USER_SESSION_DELETED);
                };
                s.auth = AuthState::Ntlm {
                    ctx,
                    spnego: spnego_used,
                    mech_list,
                };
                let out = if spnego_used {
                    spnego::server_response(NegState::AcceptIncomplete, true, Some(&chal), None)
                } else {
                    chal
                };
                let body = body_of(&Response::SessionSetup(SessionSetupResponse {
                    session_flags: 0,
                    security_buffer: &out,
                }));
                (
                    Plan::Done {
                        status: NtStatus::MORE_PROCESSING_REQUIRED,
                        body,
                    },
                    None,
                )
            }
            Some(3) => {
                let Some(s) = self.sessions.get_mut(&sid) else {
                    return fail(self, fp, NtStatus::USER_SESSION_DELETED);
                };
                let AuthState::Ntlm {
                    mut ctx,
                    spnego: sp,
                    mech_list,
                } = std::mem::replace(&mut s.auth, AuthState::None)
                else {
                    return fail(self, fp, NtStatus::INVALID_PARAMETER);
                };
                // Re-authentication of a valid session (MS-SMB2 3.3.5.5.2):
                // the existing Session.SessionKey is retained, so its
                // signing and encryption keys stay what the client holds.
                let reauth = s.valid;
                let lookup = |u: &str| dir.user(u).filter(|e| e.enabled).map(|e| e.nt_hash);
                let who = match ctx.authenticate(ntlm_msg, &lookup) {
                    Ok(w) => w,
                    Err(NtlmError::Malformed(_)) => return fail(self, fp, NtStatus::INVALID_PARAMETER),
                    Err(_) => return fail(self, fp, NtStatus::LOGON_FAILURE),
                };
                let mut flags = 0u16;
                let (cred, guest, keys) = if who.anonymous {
                    if !dir.shares().iter().any(|s| s.guest_ok) {
                        return fail(self, fp, NtStatus::LOGON_FAILURE);
                    }
                    flags |= SessionSetupResponse::IS_NULL;
                    (
                        Credentials::user(self.cfg.guest_uid, self.cfg.guest_gid),
                        true,
                        None,
                    )
                } else {
                    let Some(u) = dir.user(&who.user).filter(|u| u.enabled) else {
                        return fail(self, fp, NtStatus::LOGON_FAILURE);
                    };
                    let preauth = s.preauth;
                    let mut keys = derive_keys(
                        neg.dialect,
                        &who.session_key,
                        neg.cipher,
                        &preauth,
                        neg.cmac,
                    );
                    if neg.gmac {
                        keys.signing = keys.signing.into_gmac();
                    }
                    (Credentials::user(u.uid, u.gid), false, Some(keys))
                };
                let signing_required = keys.is_some()
                    && (self.cfg.require_signing
                        || req.security_mode & security_mode::SIGNING_REQUIRED as u8 != 0);
                let encrypt =
                    keys.as_ref().is_some_and(|k| k.encrypt.is_some()) && self.cfg.encrypt;
                if encrypt {
                    flags |= SessionSetupResponse::ENCRYPT_DATA;
                }
                let out = completed_token(sp, client_mic.filter(|_| keys.is_some()), &mech_list, &who);
                if reauth {
                    // The keys (and what they decided) stay; the identity
                    // is the new one.
                    self.cfg.sessions.update(sid, self.conn_key, |g| {
                        g.uid = cred.uid;
                        g.guest = guest;
                    });
                    let Some(s) = self.sessions.get_mut(&sid) else {
                        return fail(self, fp, NtStatus::USER_SESSION_DELETED);
                    };
                    s.cred = cred;
                    s.guest = guest;
                    if s.encrypt {
                        flags |= SessionSetupResponse::ENCRYPT_DATA;
                    } else {
                        flags &= !SessionSetupResponse::ENCRYPT_DATA;
                    }
                    // Through a channel: signed with its Channel.SigningKey.
                    let key = match &self.via {
                        Some(v) => s.channels.get(&v.channel).cloned(),
                        None => s.own_signing(),
                    };
                    let sign = key.filter(|_| neg.dialect >= dialect::SMB3_0 || s.signing_required);
                    let body = body_of(&Response::SessionSetup(SessionSetupResponse {
                        session_flags: flags,
                        security_buffer: &out,
                    }));
                    return (Plan::Done { status: NtStatus::SUCCESS, body }, sign);
                }
                // A reconnecting client names its session of the lost
                // connection (MS-SMB2 3.3.5.5.3): that one ends, here or
                // on whichever connection holds it, so its opens no longer
                // stand in the way of the new ones.
                let previous = req.previous_session_id;
                if previous != 0 && previous != sid && !guest {
                    self.outbox.push(Event::EndSession { previous, uid: cred.uid, from: self.conn_key });
                    let uid = cred.uid;
                    let ended = self.end_previous_session(previous, uid, fp.now_ns);
                    self.outbox.extend(ended);
                }
                self.cfg.sessions.update(sid, self.conn_key, |g| {
                    g.valid = true;
                    g.guest = guest;
                    g.uid = cred.uid;
                    g.signing = keys.as_ref().map(|k| k.signing.clone());
                    g.decrypt = keys.as_ref().and_then(|k| k.decrypt.clone());
                });
                let Some(s) = self.sessions.get_mut(&sid) else {
                    return fail(self, fp, NtStatus::USER_SESSION_DELETED);
                };
                s.valid = true;
                s.cred = cred;
                s.guest = guest;
                s.signing_required = signing_required;
                s.encrypt = encrypt;
                let sign = keys.as_ref().and_then(|k| {
                    (neg.dialect >= dialect::SMB3_0 || signing_required).then(|| k.signing.clone())
                });
                s.keys = keys;
                let body = body_of(&Response::SessionSetup(SessionSetupResponse {
                    session_flags: flags,
                    security_buffer: &out,
                }));
                (
                    Plan::Done {
                        status: NtStatus::SUCCESS,
                        body,
                    },
                    sign,
                )
            }
            _ => fail(self, fp, NtStatus::INVALID_PARAMETER),
        }
    }

    /// Ends session `previous` of this connection if it is a valid session
    /// of user `uid` (a client reconnected elsewhere and named it as its
    /// PreviousSessionId, MS-SMB2 3.3.5.5.3): its opens close as by LOGOFF
    /// (share reservations, byte-range locks and lease membership released,
    /// delete-on-close files removed by the returned batch), and later
    /// requests on it get STATUS_USER_SESSION_DELETED.
    pub fn end_previous_session(&mut self, previous: u64, uid: u32, now_ns: i64) -> Vec<Event> {
        let Some(s) = self.sessions.get(&previous) else { return Vec::new() };
        if !s.valid || s.guest || s.cred.uid != uid {
            return Vec::new();
        }
        let ended = self.close_session(previous, now_ns, "end-session");
        // Its waiting CHANGE_NOTIFYs were answered STATUS_NOTIFY_CLEANUP.
        let mut out = std::mem::take(&mut self.outbox);
        out.extend(ended);
        out
    }

    /// Closes every open of session `sid` as LOGOFF does and forgets the
    /// session; the batch removing its delete-on-close files, if any, for
    /// the driver to run (its result is not waited for).
    pub(super) fn close_session(&mut self, sid: u64, now_ns: i64, tag: &'static str) -> Option<Event> {
        let mut fp = FramePlan::new(now_ns, tag);
        self.drop_opens(&mut fp, sid, None);
        self.forget_session(sid);
        let Some(batch) = fp.batch.take().filter(|b| !b.ops.is_empty()) else {
            self.end_removals(&mut fp.removals);
            return None;
        };
        let token = self.next_token;
        self.next_token += 1;
        if !fp.removals.is_empty() {
            self.side_removals.insert(token, fp.removals);
        }
        Some(Event::Run { token, batch, tag, exempt: None })
    }

    /// The transport connection is gone (MS-SMB2 3.3.7.1): every open of
    /// every session closes as by LOGOFF, and the batches that remove the
    /// delete-on-close ones (one per session, its credentials) are returned
    /// as [`Event::Run`] for the driver to run; their results are not
    /// waited for. The connection is closed afterwards.
    pub fn on_disconnect(&mut self, now_ns: i64) -> Vec<Event> {
        let mut ids: Vec<u64> = self.sessions.keys().copied().collect();
        ids.sort_unstable();
        let mut ended: Vec<Event> = Vec::new();
        for sid in ids {
            if let Some(m) = self.hand_over(sid, now_ns) {
                ended.push(Event::Adopt(Box::new(m)));
            }
            ended.extend(self.close_session(sid, now_ns, "disconnect"));
        }
        let _ = self.close();
        // Notices for other connections (a file left delete-pending); its
        // own sends are moot now.
        let mut out: Vec<Event> = std::mem::take(&mut self.outbox)
            .into_iter()
            .filter(|e| matches!(e, Event::DeletePending { .. }))
            .collect();
        out.extend(ended);
        out
    }

    /// A lost connection's session that has channels (multichannel) lives
    /// on (MS-SMB2 3.3.7.1): its opens are kept in the daemon-wide durable
    /// table, to be taken over by a channel ([`Event::Adopt`],
    /// [`Connection::adopt_session`]) within [`HANDOVER_MS`]; the rest (an
    /// open the table would not keep, named pipes) closes as usual.
    fn hand_over(&mut self, sid: u64, now_ns: i64) -> Option<MovedSession> {
        let neg = self.negotiated.clone()?;
        let s = self.sessions.get(&sid).filter(|s| s.valid && !s.guest && !s.channels.is_empty())?;
        if !self.cfg.multichannel {
            return None;
        }
        let (cred, trees) = (s.cred.clone(), s.trees.clone());
        let client_guid = self.lease_client();
        let mut ids: Vec<u64> = self.opens.iter().filter(|(_, o)| o.session_id == sid).map(|(id, _)| *id).collect();
        ids.sort_unstable();
        let mut files = Vec::new();
        for id in ids {
            let Some(root) = self.opens.get(&id).and_then(|o| trees.get(&o.tree_id)).map(|t| t.share.root) else { continue };
            let Some(open) = self.opens.remove(&id) else { continue };
            let kept = Kept {
                open,
                cred: cred.clone(),
                client_guid,
                root,
                deadline: now_ns.saturating_add(HANDOVER_MS * 1_000_000),
            };
            match self.cfg.share_modes.keep_durable(self.conn_key, id, kept, usize::MAX) {
                Ok(()) => files.push(id),
                Err(k) => {
                    self.opens.insert(id, k.open);
                }
            }
        }
        let s = self.sessions.get(&sid)?;
        Some(MovedSession {
            id: sid,
            dialect: neg.dialect,
            cipher: neg.cipher,
            cred,
            guest: s.guest,
            keys: s.keys.clone(),
            signing_required: s.signing_required,
            encrypt: s.encrypt,
            trees,
            channels: s.channels.clone(),
            files,
        })
    }

    /// Takes over session `m` handed over by its lost connection
    /// ([`Event::Adopt`]), if this connection is one of its channels: the
    /// session is this connection's from now on (its key for this
    /// connection's traffic is the channel's), its opens are reattached
    /// with their file ids, and the daemon-wide table names this
    /// connection, so that the other channels forward here.
    pub fn adopt_session(&mut self, m: MovedSession, now_ns: i64) -> Vec<Event> {
        let Some(own) = m.channels.get(&self.conn_key).cloned() else { return Vec::new() };
        if self.sessions.contains_key(&m.id) {
            return Vec::new();
        }
        self.bound.remove(&m.id);
        let mut channels = m.channels.clone();
        channels.remove(&self.conn_key);
        self.cfg.sessions.adopt(
            m.id,
            GlobalSession {
                conn: self.conn_key,
                dialect: m.dialect,
                cipher: m.cipher,
                signing: m.keys.as_ref().map(|k| k.signing.clone()),
                decrypt: m.keys.as_ref().and_then(|k| k.decrypt.clone()),
                channels: channels.len() as u32,
                valid: true,
                guest: m.guest,
                uid: m.cred.uid,
            },
        );
        self.sessions.insert(
            m.id,
            Session {
                valid: true,
                auth: AuthState::None,
                preauth: [0; 64],
                cred: m.cred.clone(),
                guest: m.guest,
                keys: m.keys.clone(),
                signing_required: m.signing_required,
                encrypt: m.encrypt,
                trees: m.trees.clone(),
                channels,
                own_key: Some(own),
            },
        );
        for id in &m.files {
            if let Ok(k) = self.cfg.share_modes.reclaim_durable(*id, |_| Ok(()), self.conn_key, m.id, now_ns) {
                self.opens.insert(*id, k.open);
            }
        }
        // Trees keep their ids: new ones must not collide.
        if let Some(max) = m.trees.keys().max() {
            self.next_tree_id = self.next_tree_id.max(max.wrapping_add(1)).max(1);
        }
        Vec::new()
    }

    // ---- LOGOFF, TREE_CONNECT, TREE_DISCONNECT -------------------------

    /// Drops the opens of a session (or of one of its trees), removing the
    /// delete-on-close ones in the frame's batch.
    pub(super) fn drop_opens(&mut self, fp: &mut FramePlan, session_id: u64, tree: Option<u32>) {
        let ids: Vec<u64> = self
            .opens
            .iter()
            .filter(|(_, o)| o.session_id == session_id && tree.iter().all(|t| o.tree_id == *t))
            .map(|(id, _)| *id)
            .collect();
        self.pipes
            .retain(|_, p| p.session_id != session_id || tree.iter().any(|t| p.tree_id != *t));
        let cred = self.sessions.get(&session_id).map(|s| s.cred.clone());
        for id in ids {
            // A lost connection, a LOGOFF or an ended session keeps its
            // durable opens (MS-SMB2 3.3.7.1; `durable.rs`); a
            // TREE_DISCONNECT closes them.
            if tree.is_none() && self.keep_durable(id, fp.now_ns) {
                continue;
            }
            let path = self.cfg.share_modes.path_of((self.conn_key, id));
            let Some(o) = self.forget_open(id) else {
                continue;
            };
            let here = self.opens.values().any(|x| x.node == o.node);
            let remove = if o.delete_on_close && !o.name.is_empty() && !here {
                if self.cfg.share_modes.open_anywhere_or_stream(o.node, path.as_deref().unwrap_or("")) {
                    // Another connection still has it open: it is
                    // delete-pending until that open closes.
                    let d = super::sharemode::PendingDelete {
                        parent: o.parent,
                        name: o.name.clone(),
                        is_dir: o.is_dir,
                        path: path.unwrap_or_default(),
                    };
                    self.cfg.share_modes.defer_delete(o.node, d);
                    self.outbox.push(Event::DeletePending { node: o.node, from: self.conn_key });
                    None
                } else {
                    self.cfg.share_modes.forget_pending_delete(o.node);
                    Some((o.parent, o.name.clone(), o.is_dir, path.unwrap_or_default()))
                }
            } else if !here {
                // A named stream's open may have kept its file.
                let file = o.name.starts_with(':').then_some(o.parent);
                self.cfg.share_modes.take_pending_delete(o.node)
                    .or_else(|| file.and_then(|f| self.cfg.share_modes.take_pending_delete(f)))
                    .map(|d| (d.parent, d.name, d.is_dir, d.path))
            } else {
                None
            };
            if let (Some((parent, name, is_dir, path)), Some(c)) = (remove, &cred) {
                if fp.batch_for(session_id, c, false).is_some() {
                    fp.push(super::plan::removal(ObjRef::Id(parent), &name, Some(is_dir)));
                    // A CREATE of the name waits until the batch is over.
                    if !path.is_empty() {
                        self.cfg.share_modes.begin_removal(&path);
                        fp.removals.push(path);
                    }
                }
            }
        }
    }

    pub(super) fn logoff(&mut self, fp: &mut FramePlan, session_id: u64) -> Plan {
        self.drop_opens(fp, session_id, None);
        self.forget_session(session_id);
        ok(Response::Logoff(Default::default()))
    }

    /// Forgets session `sid` here and in the daemon-wide table.
    pub(super) fn forget_session(&mut self, sid: u64) {
        self.sessions.remove(&sid);
        self.cfg.sessions.remove(sid, self.conn_key);
    }

    /// A SESSION_SETUP naming a session this connection does not hold
    /// (MS-SMB2 3.3.5.5): found in the daemon-wide table, a signed request
    /// is verified with that Session.SigningKey and answered signed with it
    /// (3.3.5.2.4), so that a client requiring signing gets the status
    /// itself. Without SMB2_SESSION_FLAG_BINDING the session is not this
    /// connection's: USER_SESSION_DELETED. A binding is checked in the
    /// order Windows answers (smbtorture smb2.session.bind_negative_*):
    /// GMAC on one side only, a 2.x connection, an unsigned request, another
    /// dialect or cipher, a session not yet valid, a guest one. A binding
    /// that passes them is still refused with REQUEST_NOT_ACCEPTED: duet
    /// does not bind channels (multichannel) yet and does not offer
    /// SMB2_GLOBAL_CAP_MULTI_CHANNEL.
    fn session_elsewhere(
        &mut self,
        hdr: &Header,
        msg: &[u8],
        req: &SessionSetupRequest<'_>,
        neg: &Negotiated,
        dir: &dyn Directory,
    ) -> (Plan, Option<SigningKey>) {
        let Some(g) = self.cfg.sessions.get(hdr.session_id) else {
            return (done(NtStatus::USER_SESSION_DELETED), None);
        };
        let signed = hdr.flags.is_signed();
        let key = match (&g.signing, signed) {
            (Some(k), true) => {
                if !k.verify(msg) {
                    return (done(NtStatus::ACCESS_DENIED), None);
                }
                Some(k.clone())
            }
            _ => None,
        };
        let status = if req.flags & SessionSetupRequest::BINDING == 0 {
            NtStatus::USER_SESSION_DELETED
        } else {
            let session_gmac = matches!(g.signing, Some(SigningKey::AesGmac(_)));
            if session_gmac && !neg.gmac {
                NtStatus::REQUEST_OUT_OF_SEQUENCE
            } else if neg.gmac && !session_gmac {
                NtStatus::NOT_SUPPORTED
            } else if neg.dialect < dialect::SMB3_0 {
                NtStatus::REQUEST_NOT_ACCEPTED
            } else if !signed || g.dialect != neg.dialect || g.cipher != neg.cipher {
                NtStatus::INVALID_PARAMETER
            } else if !g.valid {
                NtStatus::USER_SESSION_DELETED
            } else if g.guest {
                NtStatus::NOT_SUPPORTED
            } else if !self.cfg.multichannel {
                NtStatus::REQUEST_NOT_ACCEPTED
            } else {
                return self.bind_channel(hdr, msg, req, neg, &g, key, dir);
            }
        };
        (done(status), key)
    }

    /// The NTLM exchange of a channel binding (MS-SMB2 3.3.5.5.2/3): the
    /// same user authenticates again on this connection; the channel's
    /// signing key comes from that authentication's session key (3.1.1:
    /// with the channel's own preauth hash, 3.3.5.5.3). Its answers are
    /// signed with Session.SigningKey (`key`), the last one with the new
    /// Channel.SigningKey. Bound, this connection forwards the session's
    /// frames to the one holding it, which learns the key first
    /// ([`Event::Bound`]).
    #[allow(clippy::too_many_arguments)]
    fn bind_channel(
        &mut self,
        hdr: &Header,
        msg: &[u8],
        req: &SessionSetupRequest<'_>,
        neg: &Negotiated,
        g: &GlobalSession,
        key: Option<SigningKey>,
        dir: &dyn Directory,
    ) -> (Plan, Option<SigningKey>) {
        let sid = hdr.session_id;
        let is_311 = neg.dialect == dialect::SMB3_1_1;
        let refuse = |me: &mut Self, status: NtStatus| {
            me.binding.remove(&sid);
            (done(status), key.clone())
        };
        let (ntlm_msg, spnego_used, mech_list, client_mic) = match client_ntlm(req.security_buffer) {
            Ok(t) => t,
            Err(status) => return refuse(self, status),
        };
        let kind = ntlm_msg.get(8..12).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        match kind {
            Some(1) => {
                if g.channels + 1 >= super::registry::MAX_CHANNELS {
                    return refuse(self, NtStatus::INSUFFICIENT_RESOURCES);
                }
                let mut ctx = ServerContext::new(self.rng.bytes());
                let chal = match ctx.challenge(ntlm_msg, &self.cfg.domain, &self.cfg.server_name, None) {
                    Ok(c) => c,
                    Err(_) => return refuse(self, NtStatus::INVALID_PARAMETER),
                };
                let preauth = if is_311 { preauth_update(&self.preauth, msg) } else { self.preauth };
                self.binding.insert(
                    sid,
                    Binding { owner: g.conn, auth: AuthState::Ntlm { ctx, spnego: spnego_used, mech_list }, preauth },
                );
                let out = if spnego_used {
                    spnego::server_response(NegState::AcceptIncomplete, true, Some(&chal), None)
                } else {
                    chal
                };
                let body = body_of(&Response::SessionSetup(SessionSetupResponse { session_flags: 0, security_buffer: &out }));
                (Plan::Done { status: NtStatus::MORE_PROCESSING_REQUIRED, body }, key)
            }
            Some(3) => {
                let Some(b) = self.binding.remove(&sid) else {
                    return refuse(self, NtStatus::INVALID_PARAMETER);
                };
                let AuthState::Ntlm { mut ctx, spnego: sp, mech_list } = b.auth else {
                    return refuse(self, NtStatus::INVALID_PARAMETER);
                };
                let preauth = if is_311 { preauth_update(&b.preauth, msg) } else { b.preauth };
                let lookup = |u: &str| dir.user(u).filter(|e| e.enabled).map(|e| e.nt_hash);
                let who = match ctx.authenticate(ntlm_msg, &lookup) {
                    Ok(w) => w,
                    Err(NtlmError::Malformed(_)) => return refuse(self, NtStatus::INVALID_PARAMETER),
                    Err(_) => return refuse(self, NtStatus::LOGON_FAILURE),
                };
                // 3.3.5.5.2: the channel belongs to the session's user.
                let same = !who.anonymous && dir.user(&who.user).filter(|u| u.enabled).is_some_and(|u| u.uid == g.uid);
                if !same || b.owner != g.conn {
                    return refuse(self, NtStatus::ACCESS_DENIED);
                }
                let mut chan = derive_keys(neg.dialect, &who.session_key, neg.cipher, &preauth, neg.cmac).signing;
                if neg.gmac {
                    chan = chan.into_gmac();
                }
                let out = completed_token(sp, client_mic, &mech_list, &who);
                if !self.cfg.sessions.join_channel(sid, g.conn) {
                    return refuse(self, NtStatus::INSUFFICIENT_RESOURCES);
                }
                self.bound.insert(sid, g.conn);
                self.outbox.push(Event::Bound { owner: g.conn, session: sid, channel: self.conn_key, key: chan.clone() });
                let body = body_of(&Response::SessionSetup(SessionSetupResponse { session_flags: 0, security_buffer: &out }));
                (Plan::Done { status: NtStatus::SUCCESS, body }, Some(chan))
            }
            _ => refuse(self, NtStatus::INVALID_PARAMETER),
        }
    }

    /// A SESSION_SETUP that came through a channel bound to one of this
    /// connection's sessions (MS-SMB2 3.3.5.5, 3.3.5.2.4): it must be
    /// signed with that Channel.SigningKey, else ACCESS_DENIED (signed with
    /// it all the same, as Windows and Samba answer: a client requiring
    /// signing drops a connection that answers unsigned; a channel carries
    /// the session's traffic signed, its binding was). A second binding of
    /// the channel is REQUEST_NOT_ACCEPTED; anything else is a
    /// re-authentication of the session, served as on its own connection
    /// (a failed one ends the session on every channel) and answered with
    /// the channel's key.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn channel_session_setup(
        &mut self,
        hdr: &Header,
        msg: &[u8],
        req: &SessionSetupRequest<'_>,
        channel: u64,
        dir: &dyn Directory,
        fp: &mut FramePlan,
    ) -> (Plan, Option<SigningKey>) {
        let Some(k) = self.channel_key(hdr.session_id, Some(channel)) else {
            return (done(NtStatus::USER_SESSION_DELETED), None);
        };
        if !hdr.flags.is_signed() || !k.verify(msg) {
            return (done(NtStatus::ACCESS_DENIED), Some(k));
        }
        if req.flags & SessionSetupRequest::BINDING != 0 {
            return (done(NtStatus::REQUEST_NOT_ACCEPTED), Some(k));
        }
        self.session_setup(hdr, msg, req, dir, fp)
    }

    pub(super) fn tree_connect(
        &mut self,
        session_id: u64,
        req: &TreeConnectRequest<'_>,
        dir: &dyn Directory,
    ) -> Plan {
        self.last_new_tree = 0;
        let path = req.path.to_string_lossy();
        let name = path
            .trim_start_matches('\\')
            .split('\\')
            .nth(1)
            .unwrap_or("")
            .to_string();
        let Some(neg) = self.negotiated.clone() else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        let Some(s) = self.sessions.get(&session_id) else {
            return done(NtStatus::USER_SESSION_DELETED);
        };
        if s.trees.len() >= self.cfg.max_trees_per_session {
            return done(NtStatus::INSUFFICIENT_RESOURCES);
        }
        let ipc = name.eq_ignore_ascii_case("IPC$");
        let share = if ipc {
            ShareEntry {
                name: "IPC$".into(),
                root: 0,
                read_only: true,
                guest_ok: true,
                encrypt: false,
                protocol_durability: false,
            }
        } else {
            match dir.share(&name) {
                Some(sh) => sh,
                None => return done(NtStatus::BAD_NETWORK_NAME),
            }
        };
        if s.guest && !share.guest_ok {
            return done(NtStatus::ACCESS_DENIED);
        }
        // MS-SMB2 3.3.5.7: a user the share does not admit is ACCESS_DENIED.
        if !ipc && !dir.may_connect(&share.name, s.cred.uid) {
            return done(NtStatus::ACCESS_DENIED);
        }
        let mut share_flags = 0u32;
        if share.encrypt && !ipc {
            let can = neg.dialect >= dialect::SMB3_0
                && s.keys.as_ref().is_some_and(|k| k.encrypt.is_some());
            if !can {
                return done(NtStatus::ACCESS_DENIED);
            }
            share_flags |= 0x0000_8000; // SMB2_SHAREFLAG_ENCRYPT_DATA
        }
        let maximal_access = if share.read_only {
            access::FILE_GENERIC_READ | access::FILE_GENERIC_EXECUTE
        } else {
            access::FILE_ALL_ACCESS
        };
        let tid = self.next_tree_id;
        self.next_tree_id = self.next_tree_id.wrapping_add(1).max(1);
        let encrypt_share = share.encrypt && !ipc;
        let Some(s) = self.sessions.get_mut(&session_id) else {
            return done(NtStatus::USER_SESSION_DELETED);
        };
        if encrypt_share {
            s.encrypt = true;
        }
        s.trees.insert(tid, Tree { share, ipc });
        self.last_new_tree = tid;
        ok(Response::TreeConnect(TreeConnectResponse {
            share_type: if ipc {
                TreeConnectResponse::SHARE_TYPE_PIPE
            } else {
                TreeConnectResponse::SHARE_TYPE_DISK
            },
            share_flags,
            capabilities: 0,
            maximal_access,
        }))
    }

    pub(super) fn tree_disconnect(&mut self, fp: &mut FramePlan, hdr: &Header) -> Plan {
        let Some(tid) = hdr.tree_id() else {
            return done(NtStatus::INVALID_PARAMETER);
        };
        if !self
            .sessions
            .get(&hdr.session_id)
            .is_some_and(|s| s.trees.contains_key(&tid))
        {
            return done(NtStatus::NETWORK_NAME_DELETED);
        }
        self.drop_opens(fp, hdr.session_id, Some(tid));
        if let Some(s) = self.sessions.get_mut(&hdr.session_id) {
            s.trees.remove(&tid);
        }
        ok(Response::TreeDisconnect(Default::default()))
    }

    // ---- LOCK ----------------------------------------------------------
}

/// The NTLM message a SESSION_SETUP carries, raw or in SPNEGO (RFC 4178):
/// (message, SPNEGO used, the mechanism list to sign, the client's MIC).
#[allow(clippy::type_complexity)]
fn client_ntlm(buf: &[u8]) -> Result<(&[u8], bool, Vec<u8>, Option<&[u8]>), NtStatus> {
    let token = spnego::parse_client_token(buf).map_err(|_| NtStatus::LOGON_FAILURE)?;
    match token {
        ClientToken::Raw(m) => Ok((m, false, Vec::new(), None)),
        ClientToken::Init { mech_list, ntlm_offered: true, mech_token: Some(m) } => Ok((m, true, mech_list.to_vec(), None)),
        ClientToken::Init { .. } => Err(NtStatus::NOT_SUPPORTED),
        ClientToken::Resp { response_token: Some(m), mech_list_mic } => Ok((m, true, Vec::new(), mech_list_mic)),
        ClientToken::Resp { response_token: None, .. } => Err(NtStatus::LOGON_FAILURE),
    }
}

/// The security buffer of a completed authentication: nothing for raw
/// NTLM; in SPNEGO, accept-completed with the server's mechListMIC when
/// the client sent one (RFC 4178 5, MS-SPNG 3.3.5.1).
fn completed_token(spnego_used: bool, client_mic: Option<&[u8]>, mech_list: &[u8], who: &ntlm::Authenticated) -> Vec<u8> {
    if !spnego_used {
        return Vec::new();
    }
    let mic = client_mic
        .filter(|_| !mech_list.is_empty())
        .map(|_| ntlm::sign(&who.session_key, who.flags, ntlm::Direction::ServerToClient, 0, mech_list));
    spnego::server_response(NegState::AcceptCompleted, false, None, mic.as_ref().map(|m| &m[..]))
}
