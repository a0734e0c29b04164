//! Binding the public listener from a Go-style address.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use tokio::net::TcpListener;

/// Why serving could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("listen {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("{flag} {addr}: {source}")]
    SideListen {
        flag: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("server task failed: {0}")]
    Task(String),
}

impl ServeError {
    /// The same failure, said of the listener `flag` sets (the main one is `listen`).
    pub(crate) fn named(self, flag: &'static str) -> ServeError {
        match self {
            ServeError::Listen { addr, source } => ServeError::SideListen { flag, addr, source },
            other => other,
        }
    }
}

/// Parses a listen address the way Go does: `:8080` means every interface, `host:port` a host.
pub(crate) fn parse_listen(addr: &str) -> Result<Vec<SocketAddr>, String> {
    let addr = addr.trim();
    if let Some(port) = addr.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| format!("bad port in {addr:?}"))?;
        // Both families, IPv6 first: on a dual-stack host one socket serves both.
        return Ok(vec![
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
            SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), port),
        ]);
    }
    if let Ok(socket) = addr.parse::<SocketAddr>() {
        return Ok(vec![socket]);
    }
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("missing port in {addr:?}"))?;
    let port: u16 = port.parse().map_err(|_| format!("bad port in {addr:?}"))?;
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => Ok(vec![SocketAddr::new(ip, port)]),
        Err(_) => Err(format!(
            "host in {addr:?} must be an IP address or localhost"
        )),
    }
}

/// Binds the main listener. Errors name the address, as operators grep for `listen`.
pub(crate) async fn bind(addr: &str) -> Result<TcpListener, ServeError> {
    let candidates = parse_listen(addr).map_err(|msg| ServeError::Listen {
        addr: addr.to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, msg),
    })?;
    let mut last_error = None;
    for candidate in candidates {
        match bind_socket(candidate) {
            Ok(listener) => return Ok(listener),
            Err(e) => last_error = Some(e),
        }
    }
    Err(ServeError::Listen {
        addr: addr.to_string(),
        source: last_error.unwrap_or_else(|| std::io::Error::other("no address to bind")),
    })
}

fn bind_socket(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // Accept IPv4 too on `[::]`, as Go's `:port` does.
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_listen_addresses() {
        let all = parse_listen(":8080").unwrap();
        assert_eq!(all[0].port(), 8080);
        assert!(all[0].ip().is_unspecified());
        assert_eq!(
            parse_listen("127.0.0.1:9000").unwrap(),
            vec!["127.0.0.1:9000".parse().unwrap()]
        );
        assert_eq!(
            parse_listen("localhost:9000").unwrap(),
            vec!["127.0.0.1:9000".parse().unwrap()]
        );
        assert_eq!(parse_listen("[::1]:80").unwrap()[0].port(), 80);
        assert!(parse_listen("nope").is_err());
        assert!(parse_listen(":http").is_err());
        assert!(parse_listen("example.com:80").is_err());
    }

    #[tokio::test]
    async fn binding_a_busy_port_names_listen() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let err = bind(&addr).await.unwrap_err();
        assert!(err.to_string().starts_with("listen "), "{err}");
        assert!(err.to_string().contains(&addr));
    }
}
