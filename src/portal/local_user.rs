//! The local account behind a connection from this host: the kernel lists every TCP socket
//! with its owner in `/proc/net/tcp` and `/proc/net/tcp6`, and the client end of a loopback
//! connection is one of them. Used only when a sign-in fails, so its cost (reading those
//! tables) never touches the portal's other requests.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The uid owning the socket at `peer` connected to `local`, when both are on this host and the
/// system says; `None` otherwise.
pub(crate) fn owner_of(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    if !peer.ip().is_loopback() && peer.ip() != local.ip() {
        return None;
    }
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            owner_in_table(&text, peer, local)
        })
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
            assert_eq!(owner_of(peer, server), Some(uid));
        }
    }

    #[test]
    fn remote_peers_are_not_looked_up() {
        let peer: SocketAddr = "192.0.2.1:4000".parse().unwrap();
        let local: SocketAddr = "192.0.2.2:8081".parse().unwrap();
        assert_eq!(owner_of(peer, local), None);
    }
}
