//! Listening sockets that one daemon holds alone.
//!
//! glommio's `TcpListener::bind` sets SO_REUSEPORT, so a second duetd
//! started on the same port (another data directory, a stale unit) would
//! bind beside the first without an error, and the kernel would hand each
//! new connection to either daemon: clients and `duetctl` would reach the
//! wrong one now and then. Instead the daemon binds each address once, on
//! the starting thread, without SO_REUSEPORT (a second daemon then fails
//! with "address in use"), and every executor accepts on a duplicate of
//! that one socket.

use std::net::SocketAddr;
use std::os::fd::IntoRawFd;

/// The backlog of every listener (glommio's own bind uses the same).
const BACKLOG: i32 = 1024;

/// Binds and listens on `addr`, alone: SO_REUSEADDR (a restart may bind
/// while the last run's connections are in TIME_WAIT) but not
/// SO_REUSEPORT, so a second process fails to bind the same address.
pub fn exclusive(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv6() { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(BACKLOG)?;
    Ok(s.into())
}

/// A glommio listener on this executor over a duplicate of `l`'s socket
/// (several executors accept on one socket). Call it on the executor that
/// accepts.
pub fn on_executor(l: &std::net::TcpListener) -> std::io::Result<glommio::net::TcpListener> {
    use std::os::fd::FromRawFd;
    let fd = l.try_clone()?.into_raw_fd();
    // SAFETY: `fd` is a fresh duplicate of a bound, listening TCP socket
    // that nothing else owns; the glommio listener takes it over.
    Ok(unsafe { glommio::net::TcpListener::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_bind_of_the_same_address_fails() {
        let first = exclusive("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = first.local_addr().unwrap();
        let e = exclusive(addr).expect_err("a second listener on the same address");
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
        // Nor can a SO_REUSEPORT socket (what glommio's bind makes) join it.
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_reuse_port(true).unwrap();
        assert!(s.bind(&addr.into()).is_err(), "a SO_REUSEPORT socket joined an exclusive listener");
        drop(first);
        exclusive(addr).expect("the address is free again once the first listener is gone");
    }
}
