//! `-demo`: a built-in slow origin and a small simulated crowd on loopback, so a newcomer can see the
//! waiting room work with one command and a browser.
//!
//! The origin answers pages after about a second (like a busy PHP worker), serves a stylesheet and
//! an SSE clock. The crowd is a bounded set of simulated visitors that behave like browsers
//! (keep the ticket cookie, poll `/queue/status`, reload when told), keeping the line non-empty.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long a demo page takes, like an origin worker rendering it.
pub(crate) const PAGE_DELAY: Duration = Duration::from_millis(1000);

/// Marks every answer of the demo origin, so the simulated crowd tells a page that came through
/// from the waiting room's own page without depending on the waiting page's markup.
const FROM_ORIGIN_HEADER: &str = "x-demo-origin";

/// The demo origin's static files and event stream, which an admitted visitor's page loads. The
/// demo routes them through the asset tier and the stream guard, so they come with the admission
/// pass instead of queueing behind the page.
pub(crate) const ASSET_PATHS: &str = "/style.css,/app.js";
pub(crate) const STREAM_PATHS: &str = "/clock";

/// A running demo origin.
pub(crate) struct DemoOrigin {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
}

impl DemoOrigin {
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for DemoOrigin {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Starts the demo origin on a free loopback port.
pub(crate) async fn start_origin() -> std::io::Result<DemoOrigin> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, mut stopped) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stopped.changed() => break,
            };
            let Ok((stream, _)) = accepted else { continue };
            tokio::spawn(async move {
                let service = service_fn(|req: Request<Incoming>| async move {
                    Ok::<_, Infallible>(demo_response(req).await)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(DemoOrigin { addr, stop })
}

type DemoBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn demo_response(req: Request<Incoming>) -> Response<DemoBody> {
    let mut response = demo_answer(req).await;
    response
        .headers_mut()
        .insert(FROM_ORIGIN_HEADER, header::HeaderValue::from_static("1"));
    response
}

async fn demo_answer(req: Request<Incoming>) -> Response<DemoBody> {
    match req.uri().path() {
        "/style.css" => static_response("text/css; charset=utf-8", DEMO_CSS),
        "/app.js" => static_response("text/javascript; charset=utf-8", DEMO_JS),
        "/clock" => clock_stream(),
        "/favicon.ico" => {
            let mut response = Response::new(Full::new(Bytes::new()).boxed());
            *response.status_mut() = StatusCode::NO_CONTENT;
            response
        }
        path => {
            tokio::time::sleep(PAGE_DELAY).await;
            let page = DEMO_PAGE.replace("{path}", &html_escape(path));
            static_response_owned("text/html; charset=utf-8", page)
        }
    }
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn static_response(content_type: &'static str, body: &'static str) -> Response<DemoBody> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

fn static_response_owned(content_type: &'static str, body: String) -> Response<DemoBody> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// Server-sent events: the origin's clock once a second, for up to ten minutes per connection.
fn clock_stream() -> Response<DemoBody> {
    let ticks = futures_util::stream::unfold(0u32, |count| async move {
        if count >= 600 {
            return None;
        }
        if count > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let event = format!("data: {now}\n\n");
        Some((
            Ok::<_, Infallible>(Frame::data(Bytes::from(event))),
            count + 1,
        ))
    });
    let mut response = Response::new(StreamBody::new(ticks).boxed());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    response
}

/// Simulated visitors that keep the line busy while a person explores the demo. Each behaves like
/// a browser tab; the crowd stops when `stop` turns true.
pub(crate) fn spawn_crowd(concert: SocketAddr, visitors: usize, stop: watch::Receiver<bool>) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    for visitor in 0..visitors {
        let client = client.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            // Stagger arrivals so the line forms gradually.
            tokio::time::sleep(Duration::from_millis(300 * visitor as u64)).await;
            loop {
                tokio::select! {
                    () = visit(&client, concert, visitor) => {}
                    _ = stop.changed() => return,
                }
                if *stop.borrow() {
                    return;
                }
            }
        });
    }
}

/// One simulated page view: arrive, wait in line if asked to, get the page, then idle a while.
async fn visit(client: &Client<HttpConnector, Full<Bytes>>, concert: SocketAddr, visitor: usize) {
    let page = format!("http://{concert}/products/{visitor}");
    let mut ticket: Option<String> = None;
    // Bounded: at most ten minutes of polling per visit.
    for _ in 0..300 {
        let Some(response) = get(client, &page, ticket.as_deref(), true).await else {
            tokio::time::sleep(Duration::from_secs(2)).await;
            return;
        };
        if let Some(new_ticket) = room_ticket(response.headers()) {
            ticket = Some(new_ticket);
        }
        // The waiting page, not the origin's: wait in line.
        let queued = response.status() == StatusCode::OK
            && ticket.is_some()
            && !response.headers().contains_key(FROM_ORIGIN_HEADER);
        // Read to the end, as a browser does, so the connection is reused.
        let _ = response.into_body().collect().await;
        if !queued {
            break;
        }
        // Poll like the waiting page does until it is our turn.
        let status = format!("http://{concert}/queue/status");
        for _ in 0..300 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let Some(poll) = get(client, &status, ticket.as_deref(), false).await else {
                continue;
            };
            let body = poll
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            if body.starts_with(b"{\"ready\":true") {
                break;
            }
        }
    }
    let idle = 1500 + (rand::random::<u64>() % 2500);
    tokio::time::sleep(Duration::from_millis(idle)).await;
}

async fn get(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    ticket: Option<&str>,
    html: bool,
) -> Option<Response<Incoming>> {
    let mut request = Request::get(url);
    if html {
        request = request.header(header::ACCEPT, "text/html");
    }
    if let Some(ticket) = ticket {
        request = request.header(
            header::COOKIE,
            format!("room_ticket={ticket}; room_probe=1"),
        );
    }
    let request = request.body(Full::new(Bytes::new())).ok()?;
    tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .ok()?
        .ok()
}

fn room_ticket(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|line| {
            let value = line.strip_prefix("room_ticket=")?;
            let value = value.split(';').next()?;
            (!value.is_empty()).then(|| value.to_string())
        })
}

const DEMO_PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Demo shop</title><link rel="stylesheet" href="/style.css"></head>
<body><main>
<h1>You are in.</h1>
<p>This page came from the demo origin at <code>{path}</code>. It took about a second to render,
like a busy application worker.</p>
<p>The origin's clock, streamed over server-sent events: <strong id="clock">…</strong></p>
<p>Open this address in a few more tabs or windows: once the origin is at its cap, new visitors
wait in line and are let in, in order, as pages finish.</p>
<p><a href="/products/42">Another page</a> · <a href="/_room/stats">Room stats</a></p>
</main><script src="/app.js"></script></body></html>
"#;

const DEMO_CSS: &str = "body{font-family:system-ui,sans-serif;margin:0;background:#f5f6f8;color:#1d2330}\
main{max-width:40rem;margin:4rem auto;padding:2rem;background:#fff;border-radius:12px;\
box-shadow:0 2px 12px rgba(0,0,0,.08)}h1{margin-top:0}code{background:#eef;padding:0 .3em}";

const DEMO_JS: &str = "const c=document.getElementById('clock');\
const s=new EventSource('/clock');\
s.onmessage=e=>{c.textContent=new Date(Number(e.data)*1000).toLocaleTimeString();};";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_ticket_from_set_cookie() {
        let mut headers = http::HeaderMap::new();
        headers.append(header::SET_COOKIE, "room_probe=1; Path=/".parse().unwrap());
        headers.append(
            header::SET_COOKIE,
            "room_ticket=abc; Path=/; HttpOnly".parse().unwrap(),
        );
        assert_eq!(room_ticket(&headers).as_deref(), Some("abc"));
        assert_eq!(room_ticket(&http::HeaderMap::new()), None);
    }

    #[test]
    fn escapes_paths_in_the_demo_page() {
        assert_eq!(html_escape("/<x>&\""), "/&lt;x&gt;&amp;&quot;");
    }
}
