//! Shared pieces of the integration tests: a real Concert on 127.0.0.1:0, HTTP clients that behave
//! like browsers or API clients, and raw-socket helpers for malformed traffic.
#![allow(dead_code)]

pub mod origins;
pub mod rippled;
pub mod tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use concert::config::{self, Loaded};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Starts Concert in-process with Go-style `args` (plus `-data-dir ""`) and an explicit env.
pub async fn concert_with_env(args: &[&str], env: &[(&str, &str)]) -> concert::Running {
    concert_adjusted(args, env, |_| {}).await
}

/// Like [`concert_with_env`], with `adjust` applied to the loaded configuration (for settings
/// that are not flags, such as the keep-alive idle limit).
pub async fn concert_adjusted(
    args: &[&str],
    env: &[(&str, &str)],
    adjust: impl FnOnce(&mut config::Config),
) -> concert::Running {
    let mut argv: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    if !args
        .iter()
        .any(|a| a.trim_start_matches('-').starts_with("data-dir"))
    {
        argv.push("-data-dir=".into());
    }
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut config = match config::load(&argv, &env) {
        Ok(Loaded::Run(config)) => *config,
        Ok(_) => panic!("expected a runnable config for {argv:?}"),
        Err(e) => panic!("config {argv:?} refused: {e}"),
    };
    adjust(&mut config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    concert::start(config, Some(listener)).await.unwrap()
}

/// Like [`concert_with_env`], but returns the start-up error instead of panicking.
pub async fn try_concert(args: &[&str]) -> Result<concert::Running, String> {
    let argv: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: HashMap<String, String> = HashMap::new();
    let config = match config::load(&argv, &env) {
        Ok(Loaded::Run(config)) => *config,
        Ok(_) => return Err("not runnable".into()),
        Err(e) => return Err(e.to_string()),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    concert::start(config, Some(listener))
        .await
        .map_err(|e| e.to_string())
}

pub async fn concert(args: &[&str]) -> concert::Running {
    concert_with_env(args, &[]).await
}

pub fn url(running: &concert::Running, path: &str) -> String {
    format!("http://{}{}", running.addr, path)
}

/// A client that keeps cookies, like a browser tab (no redirects, bounded timeouts).
pub fn cookie_client() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// A client that never keeps cookies (a script hammering an API).
pub fn plain_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

pub const HTML_ACCEPT: &str = "text/html,application/xhtml+xml,*/*;q=0.8";

/// `Set-Cookie` lines of a response whose name is `name`.
pub fn set_cookies<'a>(response: &'a reqwest::Response, name: &str) -> Vec<&'a str> {
    response
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter(|line| line.starts_with(&format!("{name}=")))
        .collect()
}

/// Sends `request` and returns its JSON body (any status).
pub async fn json_of(request: reqwest::RequestBuilder) -> serde_json::Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// The `/_room/stats` JSON of `running`.
pub async fn room_stats(running: &concert::Running) -> serde_json::Value {
    json_of(plain_client().get(url(running, "/_room/stats"))).await
}

/// Sends raw bytes and returns whatever the server answered before closing or `wait` elapsed.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Polls `check` every 20 ms until it is true or `limit` passes.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

/// Sends a request to `path` that `origin` holds (a held origin), so it takes the only page
/// slot of a cap-1 room; returns once the origin has it. The task ends when the origin answers.
pub async fn hold_the_only_slot(
    running: &concert::Running,
    origin: &origins::Origin,
    path: &str,
) -> tokio::task::JoinHandle<()> {
    let holder_url = url(running, path);
    let holder = tokio::spawn(async move {
        let _ = plain_client().get(holder_url).send().await;
    });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);
    holder
}

/// Whether every page slot comes back within two seconds (the room's occupancy reaches 0).
pub async fn room_empties(running: &concert::Running) -> bool {
    eventually(Duration::from_secs(2), || {
        running.app.room.stats().occupancy == 0
    })
    .await
}

/// Sends `request` (a whole request head) on a keep-alive connection and reads one answer framed
/// by `Content-Length`; returns its head (status line and headers) and its body.
pub async fn keep_alive_exchange(stream: &mut TcpStream, request: &str) -> (String, Vec<u8>) {
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).await.expect("read");
        assert!(read > 0, "connection closed mid-answer");
        received.extend_from_slice(&chunk[..read]);
        let Some(head_end) = received.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&received[..head_end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .expect("a content-length");
        let body_start = head_end + 4;
        if received.len() >= body_start + length {
            let body = received[body_start..body_start + length].to_vec();
            return (head, body);
        }
    }
}

/// The portal's sign-in form as a browser gets it: the form cookie the page sets and the token
/// of its hidden field, which a sign-in must send back together.
pub struct PortalForm {
    /// `concert_portal_signin=<value>`, ready for a `Cookie` header.
    pub cookie: String,
    pub token: String,
}

impl PortalForm {
    /// Loads the sign-in page at `base` (the portal's `http://host:port`).
    pub async fn fetch(client: &reqwest::Client, base: &str) -> PortalForm {
        let page = client.get(format!("{base}/")).send().await.unwrap();
        let value = cookie_value(&page, "concert_portal_signin").expect("a sign-in form cookie");
        let html = page.text().await.unwrap();
        let marker = r#"name="csrf" value=""#;
        let at = html.find(marker).expect("a token in the sign-in form") + marker.len();
        let token = html[at..].split('"').next().unwrap_or_default().to_owned();
        PortalForm {
            cookie: format!("concert_portal_signin={value}"),
            token,
        }
    }

    /// A post of this form with `pass`; more cookies may be added to it.
    pub fn post(
        &self,
        client: &reqwest::Client,
        base: &str,
        pass: &str,
    ) -> reqwest::RequestBuilder {
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("csrf", &self.token)
            .append_pair("pass", pass)
            .finish();
        client
            .post(format!("{base}/login"))
            .header("Cookie", &self.cookie)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
    }
}

/// Signs in to the portal at `base` as its sign-in page does, and returns the answer.
pub async fn portal_sign_in(client: &reqwest::Client, base: &str, pass: &str) -> reqwest::Response {
    PortalForm::fetch(client, base)
        .await
        .post(client, base, pass)
        .send()
        .await
        .unwrap()
}

/// The value a response sets for cookie `name`, if it sets one.
pub fn cookie_value(response: &reqwest::Response, name: &str) -> Option<String> {
    set_cookies(response, name)
        .first()
        .and_then(|line| line.split(';').next())
        .and_then(|pair| pair.split_once('='))
        .map(|(_, value)| value.to_owned())
}
