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

use crate::admission::cookies::{PORTAL, read_cookie};
use crate::app::App;
use crate::ipinfo::IpInfo;
use crate::server::SideConn;
use crate::wire::intake::{IntakeLimits, collect};

use auth::{Auth, Session, SignIn, SignInSource};

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
        let secure = if self.app.generation().config.portal_secure_cookie {
            "; Secure"
        } else {
            ""
        };
        HeaderValue::from_str(&format!(
            "{PORTAL}={value}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
            max_age.as_secs()
        ))
        .ok()
    }
}

/// The portal's routes and layers.
pub fn router(portal: Arc<Portal>) -> Router {
    let api = Router::new()
        .route("/api/overview", get(api::overview))
        .route("/api/series", get(api::series))
        .route("/api/monitor", get(monitor::show))
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
/// 401, or 429 while the source is locked.
async fn sign_in(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let conn = request.extensions().get::<SideConn>().copied();
    let form = match read_body(request).await {
        Ok(form) => form,
        Err(refusal) => return refusal,
    };
    let presented = form_field(&form, "pass").unwrap_or_default();
    let Some(conn) = conn else {
        return respond::forbidden();
    };
    let source = SignInSource {
        peer: conn.peer.ip(),
        local_user: local_user::owner_of(conn.peer, conn.local),
    };
    let ttl = portal.app.generation().config.portal_session_ttl;
    match portal.auth.sign_in(source, &presented, ttl) {
        SignIn::Opened { cookie } => {
            tracing::info!("portal: {} signed in", conn.peer.ip());
            let mut response = respond::see_other("/");
            if let Some(cookie) = portal.session_cookie(&cookie, ttl) {
                response.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            response
        }
        SignIn::Wrong => {
            tracing::warn!("portal: failed sign-in from {}", conn.peer.ip());
            pages::sign_in_page(
                StatusCode::UNAUTHORIZED,
                Some("That portal pass is not correct."),
            )
        }
        SignIn::Locked(left) => {
            let seconds = left.as_secs() + 1;
            let mut response = pages::sign_in_page(
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
