//! A small headless-Chromium driver for end-to-end page tests.
//!
//! It speaks the Chrome DevTools Protocol directly over one WebSocket (flattened target
//! sessions), so no chromedriver is needed. Chromium must be installed: tests that use it
//! fail, rather than skip, when it is missing, because CI installs it.
#![allow(dead_code)] // Each test binary uses a different subset of the driver.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

const DEFAULT_BINARY: &str = "/usr/bin/chromium";
/// How long Chromium may take to write its DevTools port file.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Upper bound for any single protocol call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound for a navigation to reach its load event.
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
const WINDOW_SIZE: (u32, u32) = (1280, 900);

/// A protocol event, tagged with the target session it belongs to.
#[derive(Debug, Clone)]
struct Event {
    method: String,
    session_id: Option<String>,
    params: Value,
}

type Reply = Result<Value, String>;

/// The shared WebSocket: requests go out through `outgoing`, replies are matched by id.
struct Connection {
    outgoing: mpsc::UnboundedSender<Message>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    next_id: AtomicU64,
    events: broadcast::Sender<Event>,
}

impl Connection {
    async fn call(&self, method: &str, params: Value, session_id: Option<&str>) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut request = json!({ "id": id, "method": method, "params": params });
        if let Some(session_id) = session_id {
            request["sessionId"] = json!(session_id);
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        self.pending_map().insert(id, reply_tx);
        if self
            .outgoing
            .send(Message::text(request.to_string()))
            .is_err()
        {
            self.pending_map().remove(&id);
            return Err(format!("{method}: DevTools connection is closed"));
        }
        match tokio::time::timeout(CALL_TIMEOUT, reply_rx).await {
            Ok(Ok(reply)) => reply.map_err(|err| format!("{method}: {err}")),
            Ok(Err(_)) => Err(format!("{method}: DevTools connection closed before reply")),
            Err(_) => {
                self.pending_map().remove(&id);
                Err(format!("{method}: no reply within {CALL_TIMEOUT:?}"))
            }
        }
    }

    fn pending_map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Reply>>> {
        // A panic elsewhere while holding the lock must not hide the real failure.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Routes one message from Chromium: a reply to its caller, an event to subscribers.
    fn dispatch(&self, text: &str) {
        let Ok(message) = serde_json::from_str::<Value>(text) else {
            return;
        };
        if let Some(id) = message.get("id").and_then(Value::as_u64) {
            let Some(reply_tx) = self.pending_map().remove(&id) else {
                return;
            };
            let reply = match message.get("error") {
                Some(error) => Err(error
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_owned)),
                None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
            };
            let _ = reply_tx.send(reply);
        } else if let Some(method) = message.get("method").and_then(Value::as_str) {
            // No subscribers is normal; events are only awaited around navigations.
            let _ = self.events.send(Event {
                method: method.to_owned(),
                session_id: message
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                params: message.get("params").cloned().unwrap_or(Value::Null),
            });
        }
    }
}

/// A running headless Chromium. The process is killed when this is dropped.
pub struct Browser {
    child: Child,
    connection: Arc<Connection>,
    tasks: Vec<JoinHandle<()>>,
    /// Removed by hand in `Drop`, after the process is gone.
    profile: Option<tempfile::TempDir>,
}

impl Browser {
    /// Starts Chromium (`$CHROMIUM`, else `/usr/bin/chromium`) with a fresh profile.
    pub async fn launch() -> Result<Browser, String> {
        Browser::launch_with(&[]).await
    }

    /// [`Browser::launch`] with more command-line switches (for this browser only, e.g. a
    /// test certificate it should accept).
    pub async fn launch_with(extra_args: &[String]) -> Result<Browser, String> {
        let binary = std::env::var_os("CHROMIUM")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_BINARY));
        if !binary.exists() {
            return Err(missing_chromium(&binary));
        }
        let profile = tempfile::Builder::new()
            .prefix("concert-chromium-")
            .tempdir()
            .map_err(|err| format!("cannot create a Chromium profile directory: {err}"))?;
        let user_data_dir = profile.path().join("profile");
        let log_path = profile.path().join("chromium.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|err| format!("cannot create {}: {err}", log_path.display()))?;

        let mut child = Command::new(&binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--window-size={},{}", WINDOW_SIZE.0, WINDOW_SIZE.1))
            .arg(format!("--user-data-dir={}", user_data_dir.display()))
            .args(extra_args)
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|err| match err.kind() {
                std::io::ErrorKind::NotFound => missing_chromium(&binary),
                _ => format!("cannot start {}: {err}", binary.display()),
            })?;

        let endpoint = match wait_for_devtools_endpoint(&mut child, &user_data_dir).await {
            Ok(endpoint) => endpoint,
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{err}\n--- chromium log ---\n{}",
                    log_tail(&log_path)
                ));
            }
        };

        let socket = match tokio_tungstenite::connect_async(endpoint.as_str()).await {
            Ok((socket, _response)) => socket,
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("cannot connect to DevTools at {endpoint}: {err}"));
            }
        };
        let (mut sink, mut stream) = socket.split();
        let (outgoing, mut outgoing_rx) = mpsc::unbounded_channel::<Message>();
        let (events, _) = broadcast::channel(1024);
        let connection = Arc::new(Connection {
            outgoing,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            events,
        });

        let writer = tokio::spawn(async move {
            while let Some(message) = outgoing_rx.recv().await {
                if sink.send(message).await.is_err() {
                    break;
                }
            }
        });
        let reader_connection = Arc::clone(&connection);
        let reader = tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                if let Message::Text(text) = message {
                    reader_connection.dispatch(text.as_str());
                }
            }
            // Chromium is gone: wake every waiting caller with an error.
            reader_connection.pending_map().clear();
        });

        Ok(Browser {
            child,
            connection,
            tasks: vec![writer, reader],
            profile: Some(profile),
        })
    }

    /// Opens a new tab and attaches to it.
    pub async fn new_page(&self) -> Result<Page, String> {
        self.open_target(false).await
    }

    /// A page in a window of its own: pages that share a window are tabs, and only the front
    /// one counts as visible (a page that pauses while hidden would stop there).
    pub async fn new_window(&self) -> Result<Page, String> {
        self.open_target(true).await
    }

    async fn open_target(&self, new_window: bool) -> Result<Page, String> {
        let created = self
            .connection
            .call(
                "Target.createTarget",
                json!({ "url": "about:blank", "newWindow": new_window }),
                None,
            )
            .await?;
        let target_id = string_field(&created, "targetId")?;
        let attached = self
            .connection
            .call(
                "Target.attachToTarget",
                json!({ "targetId": target_id, "flatten": true }),
                None,
            )
            .await?;
        let session_id = string_field(&attached, "sessionId")?;

        let problems = Arc::new(Mutex::new(Vec::new()));
        let collector = spawn_problem_collector(
            self.connection.events.subscribe(),
            session_id.clone(),
            Arc::clone(&problems),
        );
        let page = Page {
            connection: Arc::clone(&self.connection),
            session_id,
            target_id,
            problems,
            collector,
        };
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            page.call(domain, json!({})).await?;
        }
        Ok(page)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        // `/usr/bin/chromium` execs the real binary, so this pid is the browser itself;
        // its child processes exit when it does.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(profile) = self.profile.take() {
            remove_profile(profile.keep());
        }
    }
}

/// Chromium child processes may still write into the profile for a moment after the browser
/// dies, which makes a single removal fail; retry briefly (bounded).
fn remove_profile(path: PathBuf) {
    for _ in 0..40 {
        match std::fs::remove_dir_all(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => return,
        }
    }
}

/// One tab, driven through its own protocol session.
pub struct Page {
    connection: Arc<Connection>,
    session_id: String,
    target_id: String,
    problems: Arc<Mutex<Vec<String>>>,
    collector: JoinHandle<()>,
}

/// A cookie as the browser holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cookie {
    pub name: String,
    pub value: String,
    pub domain: String,
    pub path: String,
    pub http_only: bool,
    pub secure: bool,
    pub same_site: Option<String>,
}

impl Page {
    async fn call(&self, method: &str, params: Value) -> Reply {
        self.connection
            .call(method, params, Some(&self.session_id))
            .await
    }

    /// Runs `source` in every document this page loads, before the page's own scripts. It is
    /// injected by DevTools, so the page's CSP does not apply to it: tests use it to stand in
    /// for what a browser extension (a wallet) would add to the page.
    pub async fn add_init_script(&self, source: &str) -> Result<(), String> {
        self.call(
            "Page.addScriptToEvaluateOnNewDocument",
            json!({ "source": source }),
        )
        .await?;
        Ok(())
    }

    /// Navigates and waits for the page's load event.
    pub async fn goto(&self, url: &str) -> Result<(), String> {
        let mut events = self.connection.events.subscribe();
        let navigated = self.call("Page.navigate", json!({ "url": url })).await?;
        if let Some(error) = navigated.get("errorText").and_then(Value::as_str) {
            return Err(format!("navigation to {url} failed: {error}"));
        }
        let session_id = self.session_id.as_str();
        let loaded = async {
            loop {
                match events.recv().await {
                    Ok(event)
                        if event.method == "Page.loadEventFired"
                            && event.session_id.as_deref() == Some(session_id) =>
                    {
                        return Ok(());
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => {
                        return Err("DevTools connection closed during navigation".to_owned());
                    }
                }
            }
        };
        tokio::time::timeout(LOAD_TIMEOUT, loaded)
            .await
            .map_err(|_| format!("{url} did not finish loading within {LOAD_TIMEOUT:?}"))?
    }

    /// Evaluates `js` in the page (awaiting a returned promise) and returns its JSON value;
    /// `undefined` comes back as `null`, a thrown exception as `Err`.
    pub async fn eval(&self, js: &str) -> Result<Value, String> {
        let evaluated = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": js, "returnByValue": true, "awaitPromise": true }),
            )
            .await?;
        if let Some(details) = evaluated.get("exceptionDetails") {
            let description = details
                .pointer("/exception/description")
                .and_then(Value::as_str)
                .or_else(|| details.get("text").and_then(Value::as_str))
                .unwrap_or("exception");
            return Err(format!("`{js}` threw: {description}"));
        }
        Ok(evaluated
            .pointer("/result/value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// Re-evaluates `js_condition` every 100 ms until it yields a truthy value, which is
    /// returned. Errors while the page is (re)loading count as "not yet".
    pub async fn wait_for(&self, js_condition: &str, timeout: Duration) -> Result<Value, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last;
        loop {
            match self.eval(js_condition).await {
                Ok(value) if is_truthy(&value) => return Ok(value),
                Ok(value) => last = format!("last value {value}"),
                Err(err) => last = err,
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "`{js_condition}` not true within {timeout:?} ({last})"
                ));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Saves a PNG of the visible viewport.
    pub async fn screenshot(&self, path: impl AsRef<Path>) -> Result<(), String> {
        let shot = self
            .call("Page.captureScreenshot", json!({ "format": "png" }))
            .await?;
        let data = string_field(&shot, "data")?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|err| format!("screenshot is not base64: {err}"))?;
        std::fs::write(path.as_ref(), png)
            .map_err(|err| format!("cannot write {}: {err}", path.as_ref().display()))
    }

    /// Cookies the browser would send to the current page's URL.
    pub async fn cookies(&self) -> Result<Vec<Cookie>, String> {
        let answer = self.call("Network.getCookies", json!({})).await?;
        let list = answer
            .get("cookies")
            .and_then(Value::as_array)
            .ok_or("Network.getCookies returned no cookie list")?;
        Ok(list
            .iter()
            .map(|cookie| {
                let text = |key: &str| {
                    cookie
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let flag = |key: &str| cookie.get(key).and_then(Value::as_bool) == Some(true);
                Cookie {
                    name: text("name"),
                    value: text("value"),
                    domain: text("domain"),
                    path: text("path"),
                    http_only: flag("httpOnly"),
                    secure: flag("secure"),
                    same_site: cookie
                        .get("sameSite")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                }
            })
            .collect())
    }

    /// Emulates a viewport (CSS pixels); `mobile` also turns on touch-style layout.
    pub async fn set_viewport(&self, width: u32, height: u32, mobile: bool) -> Result<(), String> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile }),
        )
        .await
        .map(drop)
    }

    /// Moves the pointer to (x, y) in CSS pixels, as a mouse would: hover events follow.
    pub async fn move_mouse(&self, x: f64, y: f64) -> Result<(), String> {
        self.call(
            "Input.dispatchMouseEvent",
            json!({ "type": "mouseMoved", "x": x, "y": y }),
        )
        .await
        .map(drop)
    }

    /// A left click at (x, y) in CSS pixels, pressed and released like a person's, so the page
    /// gets the user activation that a script's `click()` lacks (copying needs it).
    pub async fn click_at(&self, x: f64, y: f64) -> Result<(), String> {
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
            )
            .await?;
        }
        Ok(())
    }

    /// Emulates media features, e.g. `[("prefers-color-scheme", "dark")]`.
    pub async fn emulate_media(&self, features: &[(&str, &str)]) -> Result<(), String> {
        let features: Vec<Value> = features
            .iter()
            .map(|(name, value)| json!({ "name": name, "value": value }))
            .collect();
        self.call(
            "Emulation.setEmulatedMedia",
            json!({ "features": features }),
        )
        .await
        .map(drop)
    }

    /// Uncaught script exceptions and console/log errors seen so far, as
    /// `"<source>: <text>"` (sources: `javascript`, `network`, `security`, …).
    pub fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn target_id(&self) -> &str {
        &self.target_id
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.collector.abort();
    }
}

fn spawn_problem_collector(
    mut events: broadcast::Receiver<Event>,
    session_id: String,
    problems: Arc<Mutex<Vec<String>>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            };
            if event.session_id.as_deref() != Some(session_id.as_str()) {
                continue;
            }
            let problem = match event.method.as_str() {
                "Runtime.exceptionThrown" => {
                    let details = &event.params["exceptionDetails"];
                    let text = details
                        .pointer("/exception/description")
                        .and_then(Value::as_str)
                        .or_else(|| details.get("text").and_then(Value::as_str))
                        .unwrap_or("exception");
                    format!("javascript: {text}")
                }
                "Log.entryAdded" if event.params["entry"]["level"] == "error" => {
                    let entry = &event.params["entry"];
                    format!(
                        "{}: {}",
                        entry["source"].as_str().unwrap_or("other"),
                        entry["text"].as_str().unwrap_or_default()
                    )
                }
                _ => continue,
            };
            problems
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(problem);
        }
    })
}

/// Polls for `<user-data-dir>/DevToolsActivePort` (port, then browser path) and builds
/// the browser's WebSocket URL from it.
async fn wait_for_devtools_endpoint(
    child: &mut Child,
    user_data_dir: &Path,
) -> Result<String, String> {
    let port_file = user_data_dir.join("DevToolsActivePort");
    let deadline = tokio::time::Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Ok(contents) = std::fs::read_to_string(&port_file) {
            let mut lines = contents.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next())
                && let Ok(port) = port.trim().parse::<u16>()
                && path.starts_with('/')
            {
                return Ok(format!("ws://127.0.0.1:{port}{}", path.trim()));
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("Chromium exited during start-up ({status})"));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "Chromium did not write {} within {STARTUP_TIMEOUT:?}",
                port_file.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn missing_chromium(binary: &Path) -> String {
    format!(
        "Chromium is needed for browser tests but {} was not found; \
         install it with `apt-get install chromium` (or point $CHROMIUM at a Chromium binary)",
        binary.display()
    )
}

fn log_tail(path: &Path) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn string_field(value: &Value, key: &str) -> Result<String, String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("DevTools reply lacks `{key}`: {value}"))
}

/// JavaScript truthiness for a JSON value.
fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64().is_some_and(|n| n != 0.0 && !n.is_nan()),
        Value::String(text) => !text.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}
