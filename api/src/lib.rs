//! The duet admin API, shared by the daemon (duetd) and the CLI (duetctl).
//!
//! Transport: HTTP/1.1 over TCP (default [`DEFAULT_ADDR`], 127.0.0.1:7445),
//! one request per connection, JSON bodies. Every request carries
//! `Authorization: Bearer <token>` (the API token duetd writes to
//! `<data-dir>/admin.token`) or `Authorization: Basic base64(user:password)`
//! (the admin user).
//!
//! This crate does no I/O:
//! - [`types`]: the request/response bodies and their validation;
//! - [`net`]: IPv4/IPv6 CIDR parsing and matching for NFS client lists;
//! - [`http`]: an incremental request parser, a response encoder, and the
//!   client-side request encoder and response parser;
//! - [`session`]: the web console's browser sessions, CSRF tokens and the
//!   sign-in throttle;
//! - [`router`]: endpoints ([`route`], [`encode_response`], [`credentials`],
//!   and for clients [`AdminRequest::to_http`] and [`decode_response`]).
//!
//! A server loop, roughly:
//! ```
//! use duet_admin_api::*;
//! fn serve(bytes: &[u8], token: &str) -> Vec<u8> {
//!     let mut parser = RequestParser::new();
//!     let req = match parser.feed(bytes) {
//!         Parsed::Complete(req) => req,
//!         Parsed::Incomplete => return Vec::new(), // read more
//!         Parsed::Error(e) => return encode_response(&Err(e.into())),
//!     };
//!     let ok = matches!(credentials(&req),
//!         Some(Credentials::Bearer(t)) if constant_time_eq(t.as_bytes(), token.as_bytes()));
//!     let result = if !ok {
//!         Err(ApiError::unauthorized("missing or invalid credentials"))
//!     } else {
//!         route(&req).and_then(|r| match r {
//!             AdminRequest::Fsck => Ok(AdminResponse::Fsck(FsckReport::default())),
//!             _ => Err(ApiError::internal("not implemented")),
//!         })
//!     };
//!     encode_response(&result)
//! }
//! let reply = serve(b"POST /v1/fsck HTTP/1.1\r\nAuthorization: Bearer t\r\n\r\n", "t");
//! assert!(reply.starts_with(b"HTTP/1.1 200 OK\r\n"));
//! ```

pub mod base64;
pub mod http;
pub mod net;
pub mod router;
pub mod session;
pub mod types;

pub use http::{
    encode_http_response, reason_phrase, HttpError, HttpRequest, HttpResponse, Parsed,
    RequestParser, ResponseParser, MAX_BODY, MAX_HEAD,
};
pub use net::{Cidr, CidrError, ClientMatch};
pub use router::{
    constant_time_eq, credentials, decode_response, encode_response, error_from_response, route,
    AdminRequest, AdminResponse, Credentials,
};
pub use types::*;
