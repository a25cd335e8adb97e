//! A small sans-I/O HTTP/1.1 codec: an incremental request parser (server
//! side), a response encoder, a request encoder and an incremental response
//! parser (client side).
//!
//! Scope: one request per connection (`Connection: close`), bodies framed by
//! `Content-Length` (requests without it have an empty body; responses
//! without it run to end of stream). `Transfer-Encoding` is refused. Lines
//! must end in CRLF. Nothing here panics on any input.

use std::fmt;

use crate::types::ApiError;

/// Longest request head (request line + headers + final CRLF CRLF).
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request body.
pub const MAX_BODY: usize = 1024 * 1024;
/// Most header fields in a head.
pub const MAX_HEADERS: usize = 100;
/// Longest response body the client parser accepts.
pub const MAX_RESPONSE_BODY: usize = 64 * 1024 * 1024;

/// A parsed HTTP request.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct HttpRequest {
    /// "GET", "POST", ... (case-sensitive, as sent).
    pub method: String,
    /// The request target as sent, e.g. "/v1/shares/public?x=1".
    pub path: String,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl fmt::Debug for HttpRequest {
    /// Redacts the Authorization header and elides the body.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(n, v)| {
                let v = if n.eq_ignore_ascii_case("authorization") {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (n.as_str(), v)
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("headers", &headers)
            .field("body_len", &self.body.len())
            .finish()
    }
}

fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

impl HttpRequest {
    pub fn new(method: impl Into<String>, path: impl Into<String>) -> Self {
        HttpRequest {
            method: method.into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// Every value of the header `name` (case-insensitive).
    pub fn header_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without its query string.
    pub fn path_only(&self) -> &str {
        self.path
            .split_once('?')
            .map_or(self.path.as_str(), |(p, _)| p)
    }

    /// Serialises the request (client side). Adds `Content-Length` when the
    /// body is non-empty or the method is POST/PUT, unless already present.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + self.body.len());
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        for (n, v) in &self.headers {
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        let wants_length = !self.body.is_empty() || self.method == "POST" || self.method == "PUT" || self.method == "PATCH";
        if wants_length && self.header("content-length").is_none() {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// A parsed HTTP response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpResponse {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Why a message could not be parsed. A server answers with
/// `encode_response(&Err(e.into()))` (413 for the size limits, else 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("request head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("body larger than the limit")]
    BodyTooLarge,
    #[error("more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    #[error("malformed HTTP: {0}")]
    Malformed(&'static str),
    #[error("unsupported HTTP: {0}")]
    Unsupported(&'static str),
    #[error("connection closed before the message was complete")]
    Truncated,
}

impl From<HttpError> for ApiError {
    fn from(e: HttpError) -> ApiError {
        match e {
            HttpError::HeadTooLarge | HttpError::BodyTooLarge | HttpError::TooManyHeaders => {
                ApiError::too_large(e.to_string())
            }
            _ => ApiError::invalid_argument(e.to_string()),
        }
    }
}

/// Result of feeding bytes to a parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<T> {
    /// More bytes are needed.
    Incomplete,
    Complete(T),
    /// The input is not acceptable; the parser stays failed.
    Error(HttpError),
}

impl<T> Parsed<T> {
    pub fn is_incomplete(&self) -> bool {
        matches!(self, Parsed::Incomplete)
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Index of the first CRLF CRLF in `buf[from..]`.
fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    let from = from.min(buf.len());
    buf[from..]
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| from + p)
}

/// Splits a head (without the final CRLF CRLF) into lines; a bare CR or LF
/// is an error.
fn head_lines(head: &[u8]) -> Result<Vec<&[u8]>, HttpError> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < head.len() {
        match head[i] {
            b'\r' if head.get(i + 1) == Some(&b'\n') => {
                lines.push(&head[start..i]);
                i += 2;
                start = i;
            }
            b'\r' | b'\n' => return Err(HttpError::Malformed("bare CR or LF")),
            _ => i += 1,
        }
    }
    lines.push(&head[start..]);
    Ok(lines)
}

fn parse_header_line(line: &[u8]) -> Result<(String, String), HttpError> {
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return Err(HttpError::Malformed("obsolete header line folding"));
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(HttpError::Malformed("header without ':'"))?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::Malformed("invalid header name"));
    }
    let mut value = &line[colon + 1..];
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(HttpError::Malformed("control character in header value"));
    }
    let value = std::str::from_utf8(value)
        .map_err(|_| HttpError::Malformed("header value is not UTF-8"))?;
    // name is ASCII (tchar), so this cannot fail.
    let name = String::from_utf8_lossy(name).into_owned();
    Ok((name, value.to_string()))
}

fn parse_headers(lines: &[&[u8]]) -> Result<Vec<(String, String)>, HttpError> {
    if lines.len() > MAX_HEADERS {
        return Err(HttpError::TooManyHeaders);
    }
    lines.iter().map(|l| parse_header_line(l)).collect()
}

/// Content-Length of a message: None if absent; an error if malformed, if
/// copies disagree, or if over `limit`. Transfer-Encoding is refused.
fn content_length(headers: &[(String, String)], limit: usize) -> Result<Option<usize>, HttpError> {
    if find_header(headers, "transfer-encoding").is_some() {
        return Err(HttpError::Unsupported("Transfer-Encoding"));
    }
    let mut len: Option<u64> = None;
    for (_, v) in headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(HttpError::Malformed("invalid Content-Length"));
        }
        let n: u64 = v
            .parse()
            .map_err(|_| HttpError::Malformed("invalid Content-Length"))?;
        if len.is_some_and(|l| l != n) {
            return Err(HttpError::Malformed("conflicting Content-Length"));
        }
        len = Some(n);
    }
    match len {
        Some(n) if n > limit as u64 => Err(HttpError::BodyTooLarge),
        Some(n) => Ok(Some(n as usize)),
        None => Ok(None),
    }
}

struct PendingRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body_start: usize,
    body_len: usize,
}

/// Incremental request parser: feed it what the socket gives.
///
/// ```
/// use duet_admin_api::{RequestParser, Parsed};
/// let mut p = RequestParser::new();
/// assert!(p.feed(b"GET /v1/status HTTP/1.1\r\n").is_incomplete());
/// match p.feed(b"Host: x\r\n\r\n") {
///     Parsed::Complete(req) => assert_eq!(req.path, "/v1/status"),
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Default)]
pub struct RequestParser {
    buf: Vec<u8>,
    scanned: usize,
    pending: Option<PendingRequest>,
    failed: Option<HttpError>,
}

impl RequestParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `data` and tries to complete a request. After `Complete`, bytes
    /// past the request stay buffered (see [`RequestParser::buffered`]) and
    /// the parser starts on the next request. After `Error` it stays failed.
    pub fn feed(&mut self, data: &[u8]) -> Parsed<HttpRequest> {
        if let Some(e) = &self.failed {
            return Parsed::Error(e.clone());
        }
        self.buf.extend_from_slice(data);
        match self.poll() {
            Ok(Some(r)) => Parsed::Complete(r),
            Ok(None) => Parsed::Incomplete,
            Err(e) => {
                self.failed = Some(e.clone());
                self.buf = Vec::new();
                self.pending = None;
                Parsed::Error(e)
            }
        }
    }

    /// Call at end of stream: `Error(Truncated)` if a request was started,
    /// `Incomplete` if nothing at all was received.
    pub fn finish(&mut self) -> Parsed<HttpRequest> {
        if let Some(e) = &self.failed {
            return Parsed::Error(e.clone());
        }
        if self.buf.is_empty() && self.pending.is_none() {
            Parsed::Incomplete
        } else {
            Parsed::Error(HttpError::Truncated)
        }
    }

    /// Bytes received but not yet part of a returned request.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    fn poll(&mut self) -> Result<Option<HttpRequest>, HttpError> {
        if self.pending.is_none() {
            let limit = self.buf.len().min(MAX_HEAD);
            let Some(end) = find_head_end(&self.buf[..limit], self.scanned.saturating_sub(3))
            else {
                if self.buf.len() >= MAX_HEAD {
                    return Err(HttpError::HeadTooLarge);
                }
                self.scanned = limit;
                return Ok(None);
            };
            let lines = head_lines(&self.buf[..end])?;
            let (method, path) = parse_request_line(lines[0])?;
            let headers = parse_headers(&lines[1..])?;
            let body_len = content_length(&headers, MAX_BODY)?.unwrap_or(0);
            self.pending = Some(PendingRequest {
                method,
                path,
                headers,
                body_start: end + 4,
                body_len,
            });
        }
        let Some(p) = &self.pending else {
            return Ok(None);
        };
        let end = p.body_start + p.body_len;
        if self.buf.len() < end {
            return Ok(None);
        }
        let Some(p) = self.pending.take() else {
            return Ok(None);
        };
        let body = self.buf[p.body_start..end].to_vec();
        self.buf.drain(..end);
        self.scanned = 0;
        Ok(Some(HttpRequest {
            method: p.method,
            path: p.path,
            headers: p.headers,
            body,
        }))
    }
}

fn parse_request_line(line: &[u8]) -> Result<(String, String), HttpError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed("request line"));
    };
    if method.is_empty() || method.len() > 16 || !method.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::Malformed("invalid method"));
    }
    if target.first() != Some(&b'/') || !target.iter().all(|&b| (0x21..=0x7e).contains(&b)) {
        return Err(HttpError::Malformed("invalid request target"));
    }
    match version {
        b"HTTP/1.1" | b"HTTP/1.0" => {}
        v if v.starts_with(b"HTTP/") => return Err(HttpError::Unsupported("HTTP version")),
        _ => return Err(HttpError::Malformed("request line")),
    }
    // Both are ASCII by the checks above.
    Ok((
        String::from_utf8_lossy(method).into_owned(),
        String::from_utf8_lossy(target).into_owned(),
    ))
}

/// Reason phrase for the status codes the API uses.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

fn status_has_body(status: u16) -> bool {
    !(matches!(status, 100..=199 | 204 | 304))
}

/// Serialises a response with `Connection: close` and, for statuses that
/// carry a body, `Content-Length`. `headers` are added as given.
pub fn encode_http_response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(format!("HTTP/1.1 {} {}\r\n", status, reason_phrase(status)).as_bytes());
    for (n, v) in headers {
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if status_has_body(status) {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    if status_has_body(status) {
        out.extend_from_slice(body);
    }
    out
}

enum BodyFraming {
    None,
    Length(usize),
    UntilEof,
}

struct PendingResponse {
    status: u16,
    reason: String,
    headers: Vec<(String, String)>,
    body_start: usize,
    framing: BodyFraming,
}

/// Incremental response parser (client side). Feed bytes as they arrive and
/// call [`ResponseParser::finish`] at end of stream (needed for responses
/// without Content-Length).
#[derive(Default)]
pub struct ResponseParser {
    buf: Vec<u8>,
    scanned: usize,
    pending: Option<PendingResponse>,
    failed: Option<HttpError>,
}

impl ResponseParser {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, data: &[u8]) -> Parsed<HttpResponse> {
        if let Some(e) = &self.failed {
            return Parsed::Error(e.clone());
        }
        self.buf.extend_from_slice(data);
        let r = self.poll(false);
        self.settle(r)
    }

    /// End of stream.
    pub fn finish(&mut self) -> Parsed<HttpResponse> {
        if let Some(e) = &self.failed {
            return Parsed::Error(e.clone());
        }
        let r = match self.poll(true) {
            Ok(None) => Err(HttpError::Truncated),
            other => other,
        };
        self.settle(r)
    }

    fn settle(&mut self, r: Result<Option<HttpResponse>, HttpError>) -> Parsed<HttpResponse> {
        match r {
            Ok(Some(r)) => Parsed::Complete(r),
            Ok(None) => Parsed::Incomplete,
            Err(e) => {
                self.failed = Some(e.clone());
                self.buf = Vec::new();
                self.pending = None;
                Parsed::Error(e)
            }
        }
    }

    fn poll(&mut self, eof: bool) -> Result<Option<HttpResponse>, HttpError> {
        if self.pending.is_none() {
            let limit = self.buf.len().min(MAX_HEAD);
            let Some(end) = find_head_end(&self.buf[..limit], self.scanned.saturating_sub(3))
            else {
                if self.buf.len() >= MAX_HEAD {
                    return Err(HttpError::HeadTooLarge);
                }
                self.scanned = limit;
                return Ok(None);
            };
            let lines = head_lines(&self.buf[..end])?;
            let (status, reason) = parse_status_line(lines[0])?;
            let headers = parse_headers(&lines[1..])?;
            let framing = if !status_has_body(status) {
                BodyFraming::None
            } else {
                match content_length(&headers, MAX_RESPONSE_BODY)? {
                    Some(n) => BodyFraming::Length(n),
                    None => BodyFraming::UntilEof,
                }
            };
            self.pending = Some(PendingResponse {
                status,
                reason,
                headers,
                body_start: end + 4,
                framing,
            });
        }
        let Some(p) = &self.pending else {
            return Ok(None);
        };
        let available = self.buf.len() - p.body_start;
        let body_len = match p.framing {
            BodyFraming::None => 0,
            BodyFraming::Length(n) if available >= n => n,
            BodyFraming::Length(_) => return Ok(None),
            BodyFraming::UntilEof if available > MAX_RESPONSE_BODY => {
                return Err(HttpError::BodyTooLarge)
            }
            BodyFraming::UntilEof if eof => available,
            BodyFraming::UntilEof => return Ok(None),
        };
        let Some(p) = self.pending.take() else {
            return Ok(None);
        };
        let body = self.buf[p.body_start..p.body_start + body_len].to_vec();
        self.buf.clear();
        Ok(Some(HttpResponse {
            status: p.status,
            reason: p.reason,
            headers: p.headers,
            body,
        }))
    }
}

fn parse_status_line(line: &[u8]) -> Result<(u16, String), HttpError> {
    let rest = line
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| line.strip_prefix(b"HTTP/1.0 "))
        .ok_or(HttpError::Malformed("status line"))?;
    let (code, reason) = match rest.get(3) {
        None => (rest, &b""[..]),
        Some(b' ') => (&rest[..3], &rest[4..]),
        Some(_) => return Err(HttpError::Malformed("status code")),
    };
    if code.len() != 3 || !code.iter().all(|b| b.is_ascii_digit()) || code[0] == b'0' {
        return Err(HttpError::Malformed("status code"));
    }
    let status = code.iter().fold(0u16, |n, &d| n * 10 + u16::from(d - b'0'));
    Ok((status, String::from_utf8_lossy(reason).into_owned()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn parse_all(bytes: &[u8]) -> Parsed<HttpRequest> {
        RequestParser::new().feed(bytes)
    }

    fn complete(bytes: &[u8]) -> HttpRequest {
        match parse_all(bytes) {
            Parsed::Complete(r) => r,
            other => panic!("{other:?}"),
        }
    }

    fn error(bytes: &[u8]) -> HttpError {
        match parse_all(bytes) {
            Parsed::Error(e) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn simple_get() {
        let r = complete(
            b"GET /v1/status HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer abc\r\n\r\n",
        );
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/v1/status");
        assert_eq!(r.header("host"), Some("localhost"));
        assert_eq!(r.header("AUTHORIZATION"), Some("Bearer abc"));
        assert!(r.body.is_empty());
        assert!(!format!("{r:?}").contains("abc"));
    }

    #[test]
    fn post_with_body_byte_by_byte() {
        let msg = b"POST /v1/shares HTTP/1.1\r\nContent-Length: 5\r\nX-Empty:\r\nX-Pad:  v  \r\n\r\nhelloEXTRA";
        let mut p = RequestParser::new();
        let mut got = None;
        for (i, b) in msg.iter().enumerate() {
            match p.feed(std::slice::from_ref(b)) {
                Parsed::Incomplete => {}
                Parsed::Complete(r) => {
                    got = Some((i, r));
                    break;
                }
                Parsed::Error(e) => panic!("{e}"),
            }
        }
        let (i, r) = got.unwrap();
        assert_eq!(i, msg.len() - 6);
        assert_eq!(r.body, b"hello");
        assert_eq!(r.header("x-empty"), Some(""));
        assert_eq!(r.header("x-pad"), Some("v"));
        assert_eq!(p.buffered(), 0);
        assert!(p.feed(b"EXTRA").is_incomplete());
        assert_eq!(p.buffered(), 5);
        assert_eq!(p.finish(), Parsed::Error(HttpError::Truncated));
    }

    #[test]
    fn two_requests_in_one_feed() {
        let mut p = RequestParser::new();
        let r = p.feed(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.0\r\n\r\n");
        assert!(matches!(r, Parsed::Complete(ref r) if r.path == "/a"));
        assert!(matches!(p.feed(b""), Parsed::Complete(ref r) if r.path == "/b"));
        assert_eq!(p.finish(), Parsed::Incomplete);
    }

    #[test]
    fn path_only() {
        assert_eq!(
            complete(b"GET /v1/shares?x=1 HTTP/1.1\r\n\r\n").path_only(),
            "/v1/shares"
        );
    }

    #[test]
    fn malformed() {
        for bad in [
            &b"GET /x HTTP/1.1\nHost: a\r\n\r\n"[..],
            b"GET /x\r\n\r\n",
            b"GET  /x HTTP/1.1\r\n\r\n",
            b"GET x HTTP/1.1\r\n\r\n",
            b"G(T /x HTTP/1.1\r\n\r\n",
            b"GET /x HTTP/1.1\r\nNo colon\r\n\r\n",
            b"GET /x HTTP/1.1\r\n: v\r\n\r\n",
            b"GET /x HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
            b"GET /x HTTP/1.1\r\nA: b\x01\r\n\r\n",
            b"GET /x HTTP/1.1\r\nA: \xff\r\n\r\n",
            b"GET /x HTTP/1.1\r\nA b: c\r\n\r\n",
            b"GET /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            b"GET /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx",
            b"GET /x HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
            b"GET /x FTP/1.1\r\n\r\n",
            b"\r\n\r\n",
        ] {
            assert!(
                matches!(error(bad), HttpError::Malformed(_)),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            error(b"GET /x HTTP/2.0\r\n\r\n"),
            HttpError::Unsupported("HTTP version")
        );
        assert_eq!(
            error(b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            HttpError::Unsupported("Transfer-Encoding")
        );
        // Identical duplicates are fine.
        let r = complete(b"POST /x HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nab");
        assert_eq!(r.body, b"ab");
    }

    #[test]
    fn limits() {
        let mut big = b"GET /x HTTP/1.1\r\nX: ".to_vec();
        big.extend(vec![b'a'; MAX_HEAD]);
        assert_eq!(error(&big), HttpError::HeadTooLarge);
        // Fed in small pieces, the error comes once the limit is passed.
        let mut p = RequestParser::new();
        let mut errored = false;
        for chunk in big.chunks(1000) {
            if let Parsed::Error(e) = p.feed(chunk) {
                assert_eq!(e, HttpError::HeadTooLarge);
                errored = true;
                break;
            }
        }
        assert!(errored);
        assert_eq!(p.feed(b"\r\n\r\n"), Parsed::Error(HttpError::HeadTooLarge));

        // A head of exactly MAX_HEAD bytes is fine.
        let mut exact = b"GET /x HTTP/1.1\r\nX: ".to_vec();
        exact.extend(vec![b'a'; MAX_HEAD - exact.len() - 4]);
        exact.extend_from_slice(b"\r\n\r\n");
        assert_eq!(exact.len(), MAX_HEAD);
        complete(&exact);

        let over = format!(
            "POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert_eq!(error(over.as_bytes()), HttpError::BodyTooLarge);
        assert_eq!(
            error(b"POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
            HttpError::Malformed("invalid Content-Length")
        );
        let mut ok = format!("POST /x HTTP/1.1\r\nContent-Length: {MAX_BODY}\r\n\r\n").into_bytes();
        ok.extend(vec![b'z'; MAX_BODY]);
        assert_eq!(complete(&ok).body.len(), MAX_BODY);

        let mut many = b"GET /x HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(error(&many), HttpError::TooManyHeaders);
    }

    #[test]
    fn request_encode_round_trip() {
        let mut r = HttpRequest::new("PUT", "/v1/users/a/password");
        r.headers.push(("Host".into(), "h".into()));
        r.body = b"{\"password\":\"x\"}".to_vec();
        let bytes = r.encode();
        let mut back = complete(&bytes);
        assert_eq!(back.header("content-length"), Some("16"));
        back.headers.retain(|(n, _)| n != "Content-Length");
        assert_eq!(back, r);
        let post = HttpRequest::new("POST", "/v1/fsck").encode();
        assert!(String::from_utf8(post)
            .unwrap()
            .contains("Content-Length: 0\r\n"));
        let get = HttpRequest::new("GET", "/v1/stats").encode();
        assert!(!String::from_utf8(get).unwrap().contains("Content-Length"));
    }

    fn response(bytes: &[u8]) -> HttpResponse {
        let mut p = ResponseParser::new();
        match p.feed(bytes) {
            Parsed::Complete(r) => r,
            Parsed::Incomplete => match p.finish() {
                Parsed::Complete(r) => r,
                other => panic!("{other:?}"),
            },
            Parsed::Error(e) => panic!("{e}"),
        }
    }

    #[test]
    fn response_round_trip() {
        let bytes = encode_http_response(201, &[("Content-Type", "application/json")], b"{}");
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("HTTP/1.1 201 Created\r\n"));
        assert!(text.contains("Connection: close\r\n"));
        let r = response(&bytes);
        assert_eq!(r.status, 201);
        assert_eq!(r.reason, "Created");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.body, b"{}");
        assert!(r.is_success());

        let bytes = encode_http_response(204, &[], b"ignored");
        assert!(!String::from_utf8_lossy(&bytes).contains("Content-Length"));
        // A 204 is complete at the end of the head, without waiting for EOF.
        let mut p = ResponseParser::new();
        assert!(
            matches!(p.feed(&bytes), Parsed::Complete(ref r) if r.status == 204 && r.body.is_empty())
        );
    }

    #[test]
    fn response_until_eof_and_truncation() {
        let mut p = ResponseParser::new();
        assert!(p.feed(b"HTTP/1.0 200\r\n\r\nabc").is_incomplete());
        assert!(p.feed(b"def").is_incomplete());
        match p.finish() {
            Parsed::Complete(r) => {
                assert_eq!(r.status, 200);
                assert_eq!(r.reason, "");
                assert_eq!(r.body, b"abcdef");
            }
            other => panic!("{other:?}"),
        }
        let mut p = ResponseParser::new();
        assert!(p
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            .is_incomplete());
        assert_eq!(p.finish(), Parsed::Error(HttpError::Truncated));
        let mut p = ResponseParser::new();
        assert_eq!(p.finish(), Parsed::Error(HttpError::Truncated));
        for bad in [
            &b"HTTP/1.1 20 OK\r\n\r\n"[..],
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"ICY 200 OK\r\n\r\n",
            b"HTTP/1.1 099 x\r\n\r\n",
        ] {
            assert!(matches!(ResponseParser::new().feed(bad), Parsed::Error(_)));
        }
    }

    /// xorshift; deterministic.
    pub(crate) struct Rng(pub u64);
    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn no_panic_on_random_bytes() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let seeds: [&[u8]; 4] = [
            b"GET /v1/status HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST /v1/shares HTTP/1.1\r\nContent-Length: 3\r\n\r\n{}x",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
            b"\r\n\r\n: \r\n",
        ];
        for round in 0..20_000 {
            let len = (rng.next() % 300) as usize;
            let mut data: Vec<u8> = if round % 2 == 0 {
                (0..len).map(|_| rng.next() as u8).collect()
            } else {
                // Mutate a valid message.
                let mut d = seeds[(rng.next() % 4) as usize].to_vec();
                for _ in 0..(rng.next() % 6) {
                    if d.is_empty() {
                        break;
                    }
                    let i = (rng.next() as usize) % d.len();
                    match rng.next() % 3 {
                        0 => d[i] = rng.next() as u8,
                        1 => {
                            d.remove(i);
                        }
                        _ => d.insert(i, b"\r\n: 0123456789"[(rng.next() % 14) as usize]),
                    }
                }
                d
            };
            if round % 7 == 0 {
                data.extend_from_slice(b"\r\n\r\n");
            }
            let mut rp = RequestParser::new();
            let mut sp = ResponseParser::new();
            for chunk in data.chunks(1 + (rng.next() % 17) as usize) {
                let _ = rp.feed(chunk);
                let _ = sp.feed(chunk);
            }
            let _ = rp.finish();
            let _ = sp.finish();
            let _ = parse_all(&data);
        }
    }
}
