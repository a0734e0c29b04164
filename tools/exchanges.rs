//! Sends an exact number of keep-alive GET requests, for `benches/instructions.sh`.
//!
//! Instruction counts are compared between two request counts, so the number of requests must
//! be exact and every one must succeed. With `--keep-cookies` each connection sends back the
//! cookies it was given, as a browser does, so requests after the first carry an admission pass.
//!
//! Usage: `exchanges URL COUNT [CONNECTIONS] [--keep-cookies]`; exits non-zero on any answer
//! that is not a success.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper::header::{COOKIE, HOST};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

#[path = "support/jar.rs"]
mod jar;
#[path = "support/url.rs"]
mod url;
use jar::Jar;
use url::{Target, parse_url};

async fn one_connection(
    authority: String,
    path: String,
    count: u64,
    keep_cookies: bool,
) -> Result<(), String> {
    let stream = TcpStream::connect(&authority)
        .await
        .map_err(|e| format!("connect {authority}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (mut sender, conn) = http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut jar = Jar::default();
    for sent in 0..count {
        let mut request = hyper::Request::get(path.as_str()).header(HOST, authority.as_str());
        if let Some(line) = jar.line() {
            request = request.header(COOKIE, line);
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        sender.ready().await.map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request {sent}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("request {sent}: status {}", response.status()));
        }
        if keep_cookies {
            jar.keep(response.headers());
        }
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("request {sent} body: {e}"))?;
    }
    Ok(())
}

fn main() -> Result<(), String> {
    let usage = "usage: exchanges URL COUNT [CONNECTIONS] [--keep-cookies]";
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let keep_cookies = args.iter().any(|a| a == "--keep-cookies");
    args.retain(|a| a != "--keep-cookies");
    let url = args.first().ok_or(usage)?;
    let count: u64 = args.get(1).and_then(|a| a.parse().ok()).ok_or(usage)?;
    let connections: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(4);
    if connections == 0 || !count.is_multiple_of(connections) || count > 10_000_000 {
        return Err(format!(
            "{usage}: COUNT must be a multiple of CONNECTIONS (at most 10,000,000)"
        ));
    }
    let Target { authority, path } = parse_url(url)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let tasks: Vec<_> = (0..connections)
            .map(|_| {
                tokio::spawn(one_connection(
                    authority.clone(),
                    path.clone(),
                    count / connections,
                    keep_cookies,
                ))
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
        Ok::<_, String>(())
    })?;
    println!("{count} requests answered");
    Ok(())
}
