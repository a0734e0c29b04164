//! The training run behind the profile-guided `dist` build (`scripts/pgo.sh`): drives an
//! instrumented `concert` through the paths a deployment spends its time on, so the optimiser
//! lays those out as hot and leaves no common path marked cold.
//!
//! Usage: `pgo-train CONCERT_BINARY`. Starts a fast origin on loopback, then runs the binary
//! twice, each time stopped with SIGINT so the profile is written:
//! 1. the gate open: pages without cookies (a new pass each) and with them (the pass verified),
//!    assets under a pass, 32 KB pages, uploads, an event stream, HTTP/2, the ops endpoints;
//! 2. the gate shut (`-cap 1`, the slot held): browsers on the waiting page polling
//!    `/queue/status`, API clients refused with 429, then everyone let in as the slot frees.
//!
//! Answers are not checked beyond being HTTP: the run only has to pass through the code.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{ACCEPT, CONTENT_TYPE, COOKIE, HOST};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

#[path = "support/jar.rs"]
mod jar;
use jar::Jar;

type Fallible<T> = Result<T, String>;

const BIG_PAGE: usize = 32 * 1024;

/// The origin: `ok` for any page, a 32 KB page, a stylesheet, a short event stream, an upload
/// sink, and `/hold`, which answers only once `release` is notified.
async fn origin(listener: TcpListener, release: Arc<Notify>) {
    let big = Bytes::from(vec![b'x'; BIG_PAGE]);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (big, release) = (big.clone(), release.clone());
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let (big, release) = (big.clone(), release.clone());
            async move {
                let path = request.uri().path().to_owned();
                // Read any upload to its end, as an application would.
                let _ = request.into_body().collect().await;
                let response = match path.as_str() {
                    "/hold" => {
                        release.notified().await;
                        text("text/html", Bytes::from_static(b"held"))
                    }
                    "/big" => text("text/html", big),
                    "/static/app.css" => text("text/css", Bytes::from_static(b"body{margin:0}")),
                    "/events" => event_stream(),
                    _ => text("text/html", Bytes::from_static(b"ok")),
                };
                Ok::<_, Infallible>(response)
            }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

type OriginBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn text(content_type: &'static str, body: Bytes) -> Response<OriginBody> {
    let mut response = Response::new(Full::new(body).boxed());
    response
        .headers_mut()
        .insert(CONTENT_TYPE, content_type.parse().expect("a valid type"));
    response
}

fn event_stream() -> Response<OriginBody> {
    let events = futures_util::stream::iter(
        (0..20).map(|n| Ok::<_, Infallible>(Frame::data(Bytes::from(format!("data: {n}\n\n"))))),
    );
    let mut response = Response::new(StreamBody::new(events).boxed());
    response.headers_mut().insert(
        CONTENT_TYPE,
        "text/event-stream".parse().expect("a valid type"),
    );
    response
}

/// A keep-alive HTTP/1.1 client that may keep the cookies it is given, as a browser does.
struct Visitor {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    authority: String,
    jar: Option<Jar>,
    html: bool,
}

impl Visitor {
    async fn connect(address: SocketAddr, keep_cookies: bool, html: bool) -> Fallible<Self> {
        let stream = TcpStream::connect(address)
            .await
            .map_err(|e| format!("connect {address}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        Ok(Self {
            sender,
            authority: address.to_string(),
            jar: keep_cookies.then(Jar::default),
            html,
        })
    }

    /// Sends one request and reads the whole answer; returns its status.
    async fn send(&mut self, method: &str, path: &str, body: Bytes) -> Fallible<u16> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.authority.as_str());
        if self.html {
            request = request.header(ACCEPT, "text/html,application/xhtml+xml,*/*;q=0.8");
        }
        if let Some(line) = self.jar.as_ref().and_then(Jar::line) {
            request = request.header(COOKIE, line);
        }
        let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = response.status().as_u16();
        if let Some(jar) = self.jar.as_mut() {
            jar.keep(response.headers());
        }
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {path} body: {e}"))?;
        Ok(status)
    }
}

/// Runs `rounds` of `requests` (method, path, body) on each of `connections` visitors at once,
/// and prints how many answers had each status, to show which paths the run went through.
async fn load(
    address: SocketAddr,
    connections: usize,
    rounds: usize,
    requests: &[(&'static str, &'static str, Bytes)],
    keep_cookies: bool,
    html: bool,
) -> Fallible<()> {
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let requests = requests.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut visitor = Visitor::connect(address, keep_cookies, html).await?;
            let mut statuses = BTreeMap::<u16, u64>::new();
            for _ in 0..rounds {
                for (method, path, body) in &requests {
                    let status = visitor.send(method, path, body.clone()).await?;
                    *statuses.entry(status).or_default() += 1;
                }
            }
            Ok::<_, String>(statuses)
        }));
    }
    let mut statuses = BTreeMap::<u16, u64>::new();
    for task in tasks {
        for (status, count) in task.await.map_err(|e| e.to_string())?? {
            *statuses.entry(status).or_default() += count;
        }
    }
    let paths: Vec<&str> = requests.iter().map(|(_, path, _)| *path).collect();
    let answers: Vec<String> = statuses
        .iter()
        .map(|(status, count)| format!("{count} x {status}"))
        .collect();
    println!(
        "pgo-train: {} ({}{}): {}",
        paths.join(" "),
        if html { "browser" } else { "API client" },
        if keep_cookies { ", cookies kept" } else { "" },
        answers.join(", ")
    );
    Ok(())
}

/// A few hundred requests over one HTTP/2 (prior knowledge) connection, many streams at once.
async fn http2(address: SocketAddr) -> Fallible<()> {
    let stream = TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut sender = sender.clone();
        let authority = address.to_string();
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let request = Request::get(format!("http://{authority}/h2"))
                    .body(Full::new(Bytes::new()))
                    .map_err(|e| e.to_string())?;
                sender.ready().await.map_err(|e| e.to_string())?;
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = response.into_body().collect().await;
            }
            Ok::<_, String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// A loopback port free at the time of asking, for the proxy to listen on.
fn free_port() -> Fallible<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.local_addr().map_err(|e| e.to_string())
}

/// The proxy under training, stopped with SIGINT (so it writes its profile) when dropped.
struct Proxy {
    child: Child,
    address: SocketAddr,
}

impl Proxy {
    async fn start(binary: &str, upstream: SocketAddr, extra: &[&str]) -> Fallible<Self> {
        let address = free_port()?;
        let child = Command::new(binary)
            .args(["-listen", &address.to_string()])
            .args(["-upstream", &format!("http://{upstream}")])
            .args(["-access-log=false", "-data-dir", "", "-workers", "1"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {binary}: {e}"))?;
        let proxy = Self { child, address };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(address).await.is_err() {
            if Instant::now() > deadline {
                return Err(format!("{binary} did not open {address}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(proxy)
    }

    fn stop(mut self) -> Fallible<()> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .map_err(|e| e.to_string())?;
        if !sent.success() {
            return Err(format!("could not signal process {pid}"));
        }
        let status = self.child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("the proxy exited with {status}"));
        }
        Ok(())
    }
}

async fn gate_open(binary: &str, upstream: SocketAddr) -> Fallible<()> {
    let proxy = Proxy::start(
        binary,
        upstream,
        &[
            "-cap",
            "1000000",
            "-max-queue",
            "0",
            "-assets",
            "/static/*",
            "-admit-ttl",
            "1h",
        ],
    )
    .await?;
    let at = proxy.address;
    let upload = Bytes::from(vec![b'u'; 4096]);
    let none = Bytes::new();
    let page = [("GET", "/page", none.clone())];
    load(at, 8, 5000, &page, false, false).await?;
    load(at, 8, 5000, &page, false, true).await?;
    let browsing = [
        ("GET", "/page", none.clone()),
        ("GET", "/static/app.css", none.clone()),
        ("GET", "/page?q=1", none.clone()),
    ];
    load(at, 8, 2000, &browsing, true, true).await?;
    load(at, 4, 500, &[("GET", "/big", none.clone())], false, true).await?;
    load(at, 4, 500, &[("POST", "/form", upload)], true, false).await?;
    load(at, 4, 20, &[("GET", "/events", none.clone())], true, true).await?;
    let ops = [
        ("GET", "/_room/healthz", none.clone()),
        ("GET", "/_room/stats", none.clone()),
        ("GET", "/metrics", none.clone()),
    ];
    load(at, 2, 200, &ops, false, false).await?;
    http2(at).await?;
    proxy.stop()
}

async fn gate_shut(binary: &str, upstream: SocketAddr, release: &Notify) -> Fallible<()> {
    let proxy = Proxy::start(binary, upstream, &["-cap", "1"]).await?;
    let at = proxy.address;
    let mut holder = Visitor::connect(at, true, true).await?;
    let held = tokio::spawn(async move { holder.send("GET", "/hold", Bytes::new()).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let none = Bytes::new();
    let waiting = [
        ("GET", "/page", none.clone()),
        ("GET", "/queue/status", none.clone()),
        ("GET", "/queue/status", none.clone()),
    ];
    load(at, 8, 300, &waiting, true, true).await?;
    load(at, 8, 300, &[("GET", "/api", none.clone())], true, false).await?;
    load(at, 4, 300, &[("GET", "/page", none.clone())], false, true).await?;
    release.notify_one();
    held.await.map_err(|e| e.to_string())??;
    load(at, 8, 300, &waiting, true, true).await?;
    proxy.stop()
}

fn main() -> Fallible<()> {
    let binary = std::env::args()
        .nth(1)
        .ok_or("usage: pgo-train CONCERT_BINARY")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let upstream = listener.local_addr().map_err(|e| e.to_string())?;
        let release = Arc::new(Notify::new());
        tokio::spawn(origin(listener, release.clone()));
        let started = Instant::now();
        gate_open(&binary, upstream).await?;
        gate_shut(&binary, upstream, &release).await?;
        println!(
            "pgo-train: done in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
}
