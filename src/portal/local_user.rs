//! The local account behind a connection from this host: the kernel lists every TCP socket
//! with its owner in `/proc/net/tcp` and `/proc/net/tcp6`, and the client end of a loopback
//! connection is one of them. Read only when a sign-in needs it (its address has failures on
//! record, or it adds one), off the async workers: those tables grow with every open
//! connection on the host.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

const TABLES: [&str; 2] = ["/proc/net/tcp", "/proc/net/tcp6"];

/// Set once the tables could not be read, so that is said once, not per sign-in.
static UNREADABLE_REPORTED: AtomicBool = AtomicBool::new(false);

/// Whether a connection comes from this host, so its local account can be asked for.
pub(crate) fn on_this_host(peer: SocketAddr, local: SocketAddr) -> bool {
    peer.ip().is_loopback() || peer.ip() == local.ip()
}

/// The uid owning the socket at `peer` connected to `local`, when both are on this host and the
/// system says; `None` otherwise. The tables are read on the blocking pool.
pub(crate) async fn owner_of(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    if !on_this_host(peer, local) {
        return None;
    }
    match tokio::task::spawn_blocking(move || owner_in_tables(peer, local)).await {
        Ok(Ok(owner)) => owner,
        Ok(Err(error)) => {
            if !UNREADABLE_REPORTED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "portal: cannot read {} ({error}), so local accounts cannot be told apart: failed sign-ins from this host count against its address, shared by every local user",
                    TABLES.join(" or ")
                );
            }
            None
        }
        Err(_) => None,
    }
}

/// Looks in both tables; an error only when neither could be read.
fn owner_in_tables(peer: SocketAddr, local: SocketAddr) -> std::io::Result<Option<u32>> {
    let mut last_error = None;
    let mut read_any = false;
    for table in TABLES {
        match std::fs::read_to_string(table) {
            Ok(text) => {
                read_any = true;
                if let Some(owner) = owner_in_table(&text, peer, local) {
                    return Ok(Some(owner));
                }
            }
            Err(error) => last_error = Some(error),
        }
    }
    match last_error {
        Some(error) if !read_any => Err(error),
        _ => Ok(None),
    }
}

/// Finds the row whose local end is `peer` and remote end `local` (the client's socket) in one
/// of those tables.
fn owner_in_table(table: &str, peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|row| {
        let mut fields = row.split_whitespace();
        let _slot = fields.next()?;
        let near = parse_endpoint(fields.next()?)?;
        let far = parse_endpoint(fields.next()?)?;
        if !same_endpoint(near, peer) || !same_endpoint(far, local) {
            return None;
        }
        // state, tx:rx queues, timer, retransmits, then the uid.
        fields.nth(4)?.parse().ok()
    })
}

/// Compares endpoints, an IPv4 address and its IPv4-mapped IPv6 form being the same.
fn same_endpoint(listed: SocketAddr, wanted: SocketAddr) -> bool {
    listed.port() == wanted.port() && canonical(listed.ip()) == canonical(wanted.ip())
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): the address is written as 32-bit
/// words in the machine's byte order.
fn parse_endpoint(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match address.len() {
        8 => {
            let word = u32::from_str_radix(address, 16).ok()?;
            IpAddr::V4(Ipv4Addr::from(word.to_ne_bytes()))
        }
        32 => {
            let mut octets = [0u8; 16];
            for (index, chunk) in octets.chunks_exact_mut(4).enumerate() {
                let digits = address.get(index * 8..index * 8 + 8)?;
                let word = u32::from_str_radix(digits, 16).ok()?;
                chunk.copy_from_slice(&word.to_ne_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_endian = "little")]
    fn rows_of_both_tables_are_read() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                  0: 0100007F:1F91 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 1 1\n\
                  1: 0100007F:D431 0100007F:1F91 01 00000000:00000000 00:00000000 00000000  1002        0 2 1\n";
        let portal: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(owner_in_table(v4, client, portal), Some(1002));
        assert_eq!(owner_in_table(v4, portal, client), Some(1000));
        let elsewhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(owner_in_table(v4, elsewhere, portal), None);

        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                  0: 00000000000000000000000001000000:D431 00000000000000000000000001000000:1F91 01 00000000:00000000 00:00000000 00000000  1003        0 3 1\n";
        let client: SocketAddr = "[::1]:54321".parse().unwrap();
        let portal: SocketAddr = "[::1]:8081".parse().unwrap();
        assert_eq!(owner_in_table(v6, client, portal), Some(1003));
    }

    #[tokio::test]
    async fn a_real_loopback_connection_is_owned_by_this_process_user() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(server).await.unwrap();
        let (_accepted, peer) = listener.accept().await.unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let uid = std::fs::metadata("/proc/self").map(|meta| {
            use std::os::unix::fs::MetadataExt as _;
            meta.uid()
        });
        if let Ok(uid) = uid {
            assert_eq!(owner_of(peer, server).await, Some(uid));
        }
    }

    #[tokio::test]
    async fn remote_peers_are_not_looked_up() {
        let peer: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let local: SocketAddr = "192.0.2.2:8081".parse().unwrap();
        assert!(!on_this_host(peer, local));
        assert_eq!(owner_of(peer, local).await, None);
    }
}
