//! The web console on the admin listener: the page (`/console/`, embedded
//! HTML, CSS and JavaScript that use the admin API), browser sign-in
//! (`/console/session`), the sessions' CSRF check and the sign-in
//! throttle. The session table and the throttle are `duet_admin_api::session`
//! (sans-I/O); this module gives them the clock and the randomness.

use std::cell::RefCell;
use std::time::Instant;

use duet_admin_api::session::{self, Session, SessionLimits, Sessions, Throttle, ThrottleLimits};
use duet_admin_api::{encode_http_response, ApiError, HttpRequest};
use rand::RngCore;

const INDEX_HTML: &[u8] = include_bytes!("console/index.html");
const APP_JS: &[u8] = include_bytes!("console/app.js");
const APP_CSS: &[u8] = include_bytes!("console/app.css");

/// Headers on every console answer: no framing (clickjacking), no sniffing,
/// only the page's own scripts (the page loads nothing from elsewhere).
const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-store"),
];

pub struct Console {
    sessions: RefCell<Sessions>,
    throttle: RefCell<Throttle>,
    epoch: Instant,
}

impl Default for Console {
    fn default() -> Self {
        Console::new(SessionLimits::default(), ThrottleLimits::default())
    }
}

/// How a request authenticated.
pub enum Who {
    /// Authorization header (duetctl, scripts): no CSRF check.
    Header,
    /// The console's session cookie.
    Session(Session),
}

impl Console {
    pub fn new(sessions: SessionLimits, throttle: ThrottleLimits) -> Self {
        Console { sessions: RefCell::new(Sessions::new(sessions)), throttle: RefCell::new(Throttle::new(throttle)), epoch: Instant::now() }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Err(too_many_attempts) while `source` is locked out.
    pub fn check_throttle(&self, source: &str) -> Result<(), ApiError> {
        self.throttle.borrow().check(source, self.now_ms()).map_err(|ms| {
            ApiError::too_many_attempts(format!(
                "too many failed sign-ins from this address: try again in {} s",
                ms.div_ceil(1000)
            ))
        })
    }

    pub fn sign_in_failed(&self, source: &str) {
        if let Some(ms) = self.throttle.borrow_mut().failed(source, self.now_ms()) {
            tracing::warn!(%source, "admin sign-in: locked out for {} ms after repeated failures", ms);
        }
    }

    pub fn sign_in_ok(&self, source: &str) {
        self.throttle.borrow_mut().succeeded(source);
    }

    /// The session a request's cookie names, if live.
    pub fn session_of(&self, req: &HttpRequest) -> Option<(String, Session)> {
        let id = req.header_all("Cookie").find_map(|h| session::cookie(h, session::SESSION_COOKIE))?.to_string();
        let s = self.sessions.borrow_mut().get(&id, self.now_ms())?;
        Some((id, s))
    }

    /// Whether the request carries a session cookie at all (live or not).
    pub fn has_cookie(req: &HttpRequest) -> bool {
        req.header_all("Cookie").any(|h| session::cookie(h, session::SESSION_COOKIE).is_some())
    }

    /// A session for `user`, whose stored secret has the fingerprint
    /// `secret_tag` (see [`secret_tag`]).
    pub fn new_session(&self, user: &str, secret_tag: u64) -> (String, String) {
        let (mut id, mut csrf) = ([0u8; 32], [0u8; 32]);
        rand::rngs::OsRng.fill_bytes(&mut id);
        rand::rngs::OsRng.fill_bytes(&mut csrf);
        self.sessions.borrow_mut().create(user, secret_tag, id, csrf, self.now_ms())
    }

    pub fn end_session(&self, id: &str) {
        self.sessions.borrow_mut().remove(id);
    }
}

/// A fingerprint of a stored admin secret (its hash string): a session
/// made while one secret was stored ends when another is, so changing the
/// admin password signs every console out, on every node (the secret is
/// the cluster's). 0 = no secret.
pub fn secret_tag(stored: Option<&[u8]>) -> u64 {
    use sha2::Digest;
    match stored {
        None => 0,
        Some(s) => {
            let d = sha2::Sha256::digest(s);
            u64::from_le_bytes(d[..8].try_into().unwrap_or([0; 8])) | 1
        }
    }
}

/// The embedded file for a console path, with its content type.
pub fn asset(path: &str) -> Option<(&'static str, &'static [u8])> {
    match path {
        "/console/" | "/console/index.html" => Some(("text/html; charset=utf-8", INDEX_HTML)),
        "/console/app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "/console/app.css" => Some(("text/css; charset=utf-8", APP_CSS)),
        _ => None,
    }
}

/// An HTTP answer with the console's security headers and `extra`.
pub fn answer(status: u16, content_type: &str, body: &[u8], extra: &[(&str, &str)]) -> Vec<u8> {
    let mut h: Vec<(&str, &str)> = SECURITY_HEADERS.to_vec();
    h.push(("Content-Type", content_type));
    h.extend_from_slice(extra);
    encode_http_response(status, &h, body)
}

/// A JSON error answer with the console's headers.
pub fn error_answer(e: &ApiError, extra: &[(&str, &str)]) -> Vec<u8> {
    let body = serde_json::to_vec(e).unwrap_or_default();
    answer(e.http_status(), "application/json", &body, extra)
}

/// A redirect to the console's page.
pub fn redirect() -> Vec<u8> {
    let mut h: Vec<(&str, &str)> = SECURITY_HEADERS.to_vec();
    h.push(("Location", "/console/"));
    encode_http_response(302, &h, b"")
}

/// The body of `POST /console/session`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    pub user: String,
    pub password: String,
}

/// The answer to a sign-in or `GET /console/session`.
#[derive(serde::Serialize)]
pub struct SessionInfo<'a> {
    pub user: &'a str,
    pub csrf: &'a str,
}

/// A change from a session needs its CSRF token (GET and HEAD do not).
pub fn csrf_check(req: &HttpRequest, s: &Session) -> Result<(), ApiError> {
    if req.method == "GET" || req.method == "HEAD" || session::csrf_matches(s, req.header(session::CSRF_HEADER)) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "a change from the console needs the session's {} header (missing or wrong): reload the page",
            session::CSRF_HEADER
        )))
    }
}
