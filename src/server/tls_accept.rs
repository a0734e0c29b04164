//! A new connection on the public listener while it speaks TLS: the first byte tells a TLS
//! handshake (a record of type 22) from anything else. A handshake is completed within the
//! handshake limit (the 10 s a request head may take, counted from the accept) and the
//! connection served over it; a client speaking plain HTTP to this port gets a short `400`
//! saying to use https, and the connection closes. Nothing waits without a limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::activity::ConnectionActivity;
use super::connection::serve_connection;
use super::send_limit::StreamExecutor;
use crate::app::App;
use crate::sys::workers::OpenConnection;
use crate::tls::ACME_TLS_ALPN;

/// The first byte of a TLS record carrying a handshake message.
const TLS_HANDSHAKE: u8 = 0x16;
/// How much of a plain-HTTP request is read to name the address in the answer.
const PLAIN_HEAD_LIMIT: usize = 8 * 1024;
/// How long a plain-HTTP client's head may keep coming in before the answer goes out, and how
/// long the closing connection is kept so the answer is read before the socket closes.
const PLAIN_LINGER: Duration = Duration::from_secs(1);

/// Serves a connection accepted while the listener speaks TLS with `config`.
pub(super) async fn serve_tls(
    builder: Arc<auto::Builder<StreamExecutor>>,
    mut stop_signal: tokio::sync::watch::Receiver<bool>,
    stream: TcpStream,
    peer: SocketAddr,
    app: Arc<App>,
    held: OpenConnection,
    config: Arc<ServerConfig>,
) {
    let _ = stream.set_nodelay(true);
    // Made now, so the first request's deadline counts from the accept.
    let activity = Arc::new(ConnectionActivity::default());
    let limit = app.generation().config.tls_handshake_timeout;
    let deadline = Instant::now() + limit;
    let stopping = stop_signal.clone();
    let accepted = tokio::select! {
        accepted = tokio::time::timeout_at(deadline, handshake(stream, &app, config)) => accepted,
        _ = stop_signal.wait_for(|stop| *stop) => return,
    };
    let tls = match accepted {
        Ok(Some(tls)) => tls,
        Ok(None) => return,
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake not done within {limit:?}; closed");
            return;
        }
    };
    if tls.get_ref().1.alpn_protocol() == Some(ACME_TLS_ALPN) {
        // A TLS-ALPN-01 validation: the handshake was the answer; no HTTP follows.
        let mut tls = tls;
        let _ = tokio::time::timeout(PLAIN_LINGER, tls.shutdown()).await;
        return;
    }
    serve_connection(&builder, stopping, tls, peer, activity, app, held).await;
}

/// The TLS stream once the handshake is done; `None` when the client closed, failed the
/// handshake, or spoke plain HTTP (then answered here).
async fn handshake(
    stream: TcpStream,
    app: &App,
    config: Arc<ServerConfig>,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(1) => {}
        _ => return None,
    }
    if first[0] != TLS_HANDSHAKE {
        refuse_plain_http(stream, app).await;
        return None;
    }
    match tokio_rustls::TlsAcceptor::from(config).accept(stream).await {
        Ok(tls) => Some(tls),
        Err(error) => {
            tracing::debug!(%error, "TLS handshake failed");
            None
        }
    }
}

/// Tells a client that spoke plain HTTP to the TLS port to use https, and closes. Its head is
/// read first (bounded) so the answer can name the address, and so the close does not reset
/// bytes it sent and the answer with them.
async fn refuse_plain_http(mut stream: TcpStream, app: &App) {
    app.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    let mut head = Vec::with_capacity(1024);
    let read_head = async {
        let mut chunk = [0u8; 2048];
        while head.len() < PLAIN_HEAD_LIMIT && memchr::memmem::find(&head, b"\r\n\r\n").is_none() {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(read) => head.extend_from_slice(&chunk[..read]),
            }
        }
    };
    let _ = tokio::time::timeout(PLAIN_LINGER, read_head).await;
    let body = match https_address(&head) {
        Some(address) => format!("this port speaks HTTPS; use {address}\n"),
        None => "this port speaks HTTPS; use https:// to reach it\n".to_string(),
    };
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let linger = async {
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        let _ = stream.shutdown().await;
        // Whatever else the client sends is read and dropped until it closes.
        let mut sink = [0u8; 2048];
        while let Ok(read) = stream.read(&mut sink).await {
            if read == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(PLAIN_LINGER, linger).await;
}

/// `https://host/path` from a plain HTTP/1 request head, when its target and `Host` are plain
/// enough to repeat (visible ASCII, a host of name characters).
fn https_address(head: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (_method, target) = (request_line.next()?, request_line.next()?);
    if !target.starts_with('/')
        || target.len() > 2048
        || !target.bytes().all(|b| b.is_ascii_graphic())
    {
        return None;
    }
    let host = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("host")
            .then(|| value.trim())
    })?;
    let host_ok = !host.is_empty()
        && host.len() <= 261
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    host_ok.then(|| format!("https://{host}{target}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_names_the_https_address_when_it_can() {
        assert_eq!(
            https_address(b"GET /shop?x=1 HTTP/1.1\r\nHost: example.com:8443\r\n\r\n").as_deref(),
            Some("https://example.com:8443/shop?x=1")
        );
        assert_eq!(
            https_address(b"GET / HTTP/1.1\r\nhost: [::1]:8443\r\n\r\n").as_deref(),
            Some("https://[::1]:8443/")
        );
        for head in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: evil\"<x>\r\n\r\n",
            b"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
            b"\xff\xfe",
            b"SSH-2.0-OpenSSH_9.6\r\n",
        ] {
            assert_eq!(https_address(head), None, "{head:?}");
        }
    }
}
