//! The admin portal: a second listener (`-portal-listen`, loopback by default) with a sign-in
//! page, a dashboard of tabs and the JSON API they are built on. It exists only while
//! `CONCERT_PORTAL_PASS` is set.
//!
//! Every request first passes the allow-list check on the socket peer (`-portal-allow`;
//! forwarded headers mean nothing here), then gets the security headers. The API wants a
//! session; anything that changes state also wants the session's CSRF token.

mod api;
mod assets;
mod auth;
mod banlog;
mod bans;
mod cluster;
mod fastlane;
mod fragments;
mod local_user;
mod monitor;
mod pages;
mod queue;
mod respond;
mod settings;
mod visitors;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::routing::{get, post};
use http::{HeaderValue, Method, Response, StatusCode, header};

use crate::admission::cookies::{PORTAL, PORTAL_DEVICE, PORTAL_SIGN_IN, read_cookie, read_cookies};
use crate::app::App;
use crate::ipinfo::IpInfo;
use crate::server::SideConn;
use crate::wire::intake::{IntakeLimits, collect};

use auth::{Attempt, Auth, KnownBrowser, Session, SignIn, SignInSource};

/// How often expired sessions and old failure records are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(10);
/// Largest body the portal reads (a settings change is the biggest).
const BODY_LIMIT: u64 = 1024 * 1024;
/// The longest pause while a body arrives, and the whole body's deadline.
const BODY_PROGRESS: Duration = Duration::from_secs(10);
const BODY_DEADLINE: Duration = Duration::from_secs(30);

/// The portal's state: the app it shows and changes, and who is signed in.
pub struct Portal {
    app: Arc<App>,
    auth: Auth,
    samples: Arc<api::Samples>,
    /// The Monitor tab's samples.
    monitor: Arc<monitor::Monitor>,
    /// The Monitor's Cluster card: the last listing of the instances (`-cluster` only).
    cluster: cluster::ClusterView,
    /// Country, network and ASN beside client addresses.
    ip_details: Arc<IpInfo>,
}

impl Portal {
    /// The portal for `app`, when `CONCERT_PORTAL_PASS` is set.
    pub fn new(app: Arc<App>) -> Option<Arc<Portal>> {
        let generation = app.generation();
        let config = &generation.config;
        if config.portal_pass.is_empty() {
            return None;
        }
        let env = &config.ip_details_env;
        let ip_details = IpInfo::from_env(&|key| {
            env.iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value.clone())
        });
        // The Queue tab shows each visitor's first path and browser; without a portal nobody
        // would read them, so they are kept only from here on.
        app.room.enable_notes();
        Some(Arc::new(Portal {
            auth: Auth::new(&config.portal_pass),
            samples: Arc::default(),
            monitor: Arc::new(monitor::Monitor::new(&app)),
            cluster: cluster::ClusterView::default(),
            ip_details,
            app,
        }))
    }

    /// The portal's background work: the samplers of the Overview's charts and of the
    /// Monitor, and the janitor that forgets expired sessions and failure records.
    pub(crate) fn spawn_tasks(self: &Arc<Self>) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            self.samples.spawn_sampler(&self.app),
            self.monitor.spawn_sampler(&self.app),
            self.spawn_janitor(),
        ]
    }

    fn spawn_janitor(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let portal = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(PRUNE_EVERY);
            loop {
                every.tick().await;
                let Some(portal) = portal.upgrade() else {
                    return;
                };
                portal.auth.prune();
                portal.app.room.prune_removed();
                portal.app.room.prune_notes();
            }
        })
    }

    fn session(&self, request: &Request) -> Option<(String, Session)> {
        let cookie = read_cookie(request.headers(), PORTAL)?;
        let session = self.auth.session(cookie)?;
        Some((cookie.to_owned(), session))
    }

    fn session_cookie(&self, value: &str, max_age: Duration) -> Option<HeaderValue> {
        self.cookie_line(PORTAL, value, "/", max_age)
    }

    /// A `Set-Cookie` line for one of the portal's cookies: never readable by scripts, never
    /// sent by another site's page, `Secure` when the portal is reached over HTTPS.
    fn cookie_line(
        &self,
        name: &str,
        value: &str,
        path: &str,
        max_age: Duration,
    ) -> Option<HeaderValue> {
        // Served over the portal's own TLS, the cookies are Secure whatever the setting says.
        let secure = if self.app.generation().config.portal_secure_cookie
            || self.app.tls.portal_acceptor().is_some()
        {
            "; Secure"
        } else {
            ""
        };
        HeaderValue::from_str(&format!(
            "{name}={value}; Path={path}; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
            max_age.as_secs()
        ))
        .ok()
    }

    /// The sign-in page with `status` and what went wrong, its form tied to the form cookie
    /// the browser holds (`held`) or to a new one set with it.
    fn sign_in_page(
        &self,
        held: Option<&str>,
        status: StatusCode,
        problem: Option<&str>,
    ) -> Response<Body> {
        let form = self.auth.sign_in_form(held, unix_now());
        let mut response = pages::sign_in_page(status, problem, &form.token);
        if let Some(value) = form.new_cookie
            && let Some(line) =
                self.cookie_line(PORTAL_SIGN_IN, &value, "/", auth::SIGN_IN_FORM_TTL)
        {
            response.headers_mut().append(header::SET_COOKIE, line);
        }
        response
    }
}

/// Seconds since the Unix epoch, for the sign-in form's cookie (it outlives a restart).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// The portal's routes and layers.
pub fn router(portal: Arc<Portal>) -> Router {
    let api = Router::new()
        .route("/api/overview", get(api::overview))
        .route("/api/series", get(api::series))
        .route("/api/monitor", get(monitor::show))
        .route("/api/cluster", get(cluster::show))
        .route(
            "/api/bans",
            get(bans::list).post(bans::ban).delete(bans::unban),
        )
        .route("/api/frag/bans", get(bans::fragment))
        .route("/api/queue", get(queue::list))
        .route("/api/queue/promote", post(queue::promote))
        .route("/api/queue/kick", post(queue::kick))
        .route("/api/frag/queue", get(queue::fragment))
        .route("/api/history", get(visitors::overview))
        .route("/api/history/client", get(visitors::client))
        .route("/api/history/ban", get(banlog::ban))
        .route("/api/frag/visitors", get(visitors::fragment))
        .route("/api/frag/visitor", get(visitors::detail))
        .route("/api/frag/banlog", get(banlog::fragment))
        .route("/api/frag/ban", get(banlog::detail))
        .route("/api/fastlane", get(fastlane::show))
        .route(
            "/api/fastlane/config",
            get(fastlane::config).post(fastlane::save),
        )
        .route("/api/fastlane/sales/delivered", post(fastlane::delivered))
        .route(
            "/api/settings",
            get(settings::show)
                .post(settings::change)
                .delete(settings::reset),
        )
        .layer(middleware::from_fn_with_state(
            portal.clone(),
            require_session,
        ));
    Router::new()
        .route("/", get(pages::index))
        .route("/login", post(sign_in))
        .route("/logout", post(sign_out))
        .route("/assets/{*path}", get(assets::serve))
        .merge(api)
        .fallback(|| async { respond::not_found() })
        // Before any route: a peer outside the list learns nothing, not even whether a path
        // exists.
        .layer(middleware::from_fn_with_state(portal.clone(), allow_list))
        // Outermost, so every answer carries them, the allow list's refusal too.
        .layer(middleware::from_fn(respond::security_headers))
        .with_state(portal)
}

/// Refuses peers outside `-portal-allow` with a bare 403.
async fn allow_list(
    State(portal): State<Arc<Portal>>,
    request: Request,
    next: Next,
) -> Response<Body> {
    let allowed = request.extensions().get::<SideConn>().is_some_and(|conn| {
        portal
            .app
            .generation()
            .config
            .portal_allow
            .contains(conn.peer.ip())
    });
    if !allowed {
        return respond::forbidden();
    }
    next.run(request).await
}

/// The API's gate: a session (else 401 JSON), and for anything but GET and HEAD the session's
/// CSRF token in `X-CSRF-Token` (else 403 JSON).
async fn require_session(
    State(portal): State<Arc<Portal>>,
    mut request: Request,
    next: Next,
) -> Response<Body> {
    let Some((_, session)) = portal.session(&request) else {
        return respond::error(StatusCode::UNAUTHORIZED, "sign in required");
    };
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        let presented = request
            .headers()
            .get("x-csrf-token")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if !auth::csrf_matches(&session, presented) {
            return respond::error(
                StatusCode::FORBIDDEN,
                "missing or invalid CSRF token; reload the page",
            );
        }
    }
    request.extensions_mut().insert(session);
    next.run(request).await
}

/// The peer's address, for log lines about who did what.
fn peer_of(request: &Request) -> String {
    request.extensions().get::<SideConn>().map_or_else(
        || "an unknown peer".to_owned(),
        |conn| conn.peer.ip().to_string(),
    )
}

/// Reads a form or JSON body within the portal's limits.
async fn read_body(request: Request) -> Result<axum::body::Bytes, Response<Body>> {
    let limits = IntakeLimits::starting_now(BODY_LIMIT, BODY_PROGRESS, BODY_DEADLINE);
    collect(request.into_body(), limits).await.map_err(|error| {
        use crate::wire::intake::IntakeError;
        match error {
            IntakeError::TooLarge => {
                respond::text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
            }
            IntakeError::TimedOut => respond::text(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            ),
            _ => respond::text(StatusCode::BAD_REQUEST, "the request body broke off"),
        }
    })
}

/// The value of field `name` in a urlencoded form.
fn form_field(form: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(form)
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// `POST /login`: the pass from the form; a session and 303 to `/`, the sign-in page again with
/// 401, or 429 while the attempt's browser or source is locked. A post from another site, or
/// one without the token of the form the portal gave out, is refused before its pass is looked
/// at, so it cannot count towards a lockout.
async fn sign_in(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let Some(conn) = request.extensions().get::<SideConn>().copied() else {
        return respond::forbidden();
    };
    if auth::cross_site(request.headers()) {
        tracing::info!(
            "portal: refused a sign-in from another site's page ({})",
            conn.peer.ip()
        );
        return respond::forbidden();
    }
    let [form_cookie, browser_cookie] =
        read_cookies(request.headers(), [PORTAL_SIGN_IN, PORTAL_DEVICE])
            .map(|value| value.map(str::to_owned));
    let form = match read_body(request).await {
        Ok(form) => form,
        Err(refusal) => return refusal,
    };
    let token = form_field(&form, "csrf").unwrap_or_default();
    if !portal
        .auth
        .sign_in_form_matches(form_cookie.as_deref(), &token, unix_now())
    {
        return portal.sign_in_page(
            None,
            StatusCode::FORBIDDEN,
            Some("The sign-in form had expired, or the browser did not send its cookie. Enter the pass again."),
        );
    }
    let presented = form_field(&form, "pass").unwrap_or_default();
    let ttl = portal.app.generation().config.portal_session_ttl;
    let browser = browser_cookie
        .as_deref()
        .and_then(|cookie| portal.auth.known_browser(cookie));
    let outcome = match browser {
        Some(browser) => portal
            .auth
            .sign_in(Attempt::Browser(browser), &presented, ttl),
        None => sign_in_from_source(&portal, conn, &presented, ttl).await,
    };
    match outcome {
        SignIn::Opened { cookie } => {
            tracing::info!("portal: {} signed in", conn.peer.ip());
            let mut response = respond::see_other("/");
            opened(&portal, &mut response, &cookie, ttl, browser);
            response
        }
        SignIn::Wrong => {
            tracing::warn!("portal: failed sign-in from {}", conn.peer.ip());
            portal.sign_in_page(
                form_cookie.as_deref(),
                StatusCode::UNAUTHORIZED,
                Some("That portal pass is not correct."),
            )
        }
        SignIn::Locked(left) => {
            let seconds = left.as_secs() + 1;
            let mut response = portal.sign_in_page(
                form_cookie.as_deref(),
                StatusCode::TOO_MANY_REQUESTS,
                Some(&format!(
                    "Too many failed attempts. Try again in {}.",
                    crate::config::duration::format_go_duration(Duration::from_secs(seconds))
                )),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            response
        }
    }
}

/// A sign-in from a browser the portal does not know, counted against its source. For a peer
/// on this host the source includes the local account, which costs a read of the kernel's
/// socket tables: it is made only when the address has failures to tell apart (the lock check
/// needs it) or this attempt adds one.
async fn sign_in_from_source(
    portal: &Portal,
    conn: SideConn,
    presented: &str,
    ttl: Duration,
) -> SignIn {
    let peer = conn.peer.ip();
    let source = |local_user| Attempt::Source(SignInSource { peer, local_user });
    if !local_user::on_this_host(conn.peer, conn.local) {
        return portal.auth.sign_in(source(None), presented, ttl);
    }
    if portal.auth.address_has_failures(peer) {
        let account = local_user::owner_of(conn.peer, conn.local).await;
        return portal.auth.sign_in(source(account), presented, ttl);
    }
    if portal.auth.pass_matches(presented) {
        return SignIn::Opened {
            cookie: portal.auth.open_session(ttl),
        };
    }
    let account = local_user::owner_of(conn.peer, conn.local).await;
    portal.auth.count_failure(source(account));
    SignIn::Wrong
}

/// Sets the new session's cookie and marks the browser as known (or renews its mark), so its
/// later failures count against it alone; the sign-in form's cookie is done with.
fn opened(
    portal: &Portal,
    response: &mut Response<Body>,
    session: &str,
    ttl: Duration,
    browser: Option<KnownBrowser>,
) {
    let known = portal.auth.known_browser_cookie(browser);
    let lines = [
        portal.session_cookie(session, ttl),
        portal.cookie_line(PORTAL_DEVICE, &known, "/login", auth::KNOWN_BROWSER_TTL),
        portal.cookie_line(PORTAL_SIGN_IN, "", "/", Duration::ZERO),
    ];
    for line in lines.into_iter().flatten() {
        response.headers_mut().append(header::SET_COOKIE, line);
    }
}

/// `POST /logout`: needs the session (401 JSON otherwise) and its CSRF token in the form (bare
/// 403 otherwise); ends the session, clears the cookie, 303 to `/`.
async fn sign_out(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let Some((cookie, session)) = portal.session(&request) else {
        return respond::error(StatusCode::UNAUTHORIZED, "sign in required");
    };
    let peer = request
        .extensions()
        .get::<SideConn>()
        .map(|conn| conn.peer.ip());
    let form = match read_body(request).await {
        Ok(form) => form,
        Err(refusal) => return refusal,
    };
    let presented = form_field(&form, "csrf").unwrap_or_default();
    if !auth::csrf_matches(&session, &presented) {
        return respond::forbidden();
    }
    portal.auth.sign_out(&cookie);
    if let Some(peer) = peer {
        tracing::info!("portal: {peer} signed out");
    }
    let mut response = respond::see_other("/");
    if let Some(cleared) = portal.session_cookie("", Duration::ZERO) {
        response.headers_mut().insert(header::SET_COOKIE, cleared);
    }
    response
}
