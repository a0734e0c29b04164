//! The admin portal on its own listener: who may reach it, signing in and out, the lockout,
//! the CSRF rule, its files, and the Overview's API. Real sockets throughout.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE, RETRY_AFTER, SET_COOKIE};
use support::origins::echo_origin;
use support::{
    PortalForm, concert_with_env, cookie_client, plain_client, portal_sign_in, set_cookies,
};

const PASS: &str = "a portal pass of some length";

struct PortalUnderTest {
    running: concert::Running,
    base: String,
}

async fn portal(args: &[&str]) -> PortalUnderTest {
    let mut argv = vec!["-portal-listen", "127.0.0.1:0"];
    argv.extend_from_slice(args);
    let running = concert_with_env(&argv, &[("CONCERT_PORTAL_PASS", PASS)]).await;
    let addr = running.portal_addr.expect("the portal listens");
    PortalUnderTest {
        running,
        base: format!("http://{addr}"),
    }
}

impl PortalUnderTest {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Signs `client` in and returns the session cookie's value and the page's CSRF token.
    async fn sign_in(&self, client: &reqwest::Client) -> (String, String) {
        let answer = portal_sign_in(client, &self.base, PASS).await;
        assert_eq!(answer.status(), StatusCode::SEE_OTHER);
        let cookie = session_cookie(&answer).expect("a session cookie");
        let page = client
            .get(self.url("/"))
            .header("Cookie", format!("concert_portal={cookie}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        (
            cookie,
            csrf_of(&page).expect("a CSRF token on the dashboard"),
        )
    }
}

/// `reqwest` here is built without its form support; this is all of it the tests need.
trait FormBody {
    fn form_body(self, pairs: &[(&str, &str)]) -> Self;
}

impl FormBody for reqwest::RequestBuilder {
    fn form_body(self, pairs: &[(&str, &str)]) -> Self {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        self.header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
    }
}

fn session_cookie(answer: &reqwest::Response) -> Option<String> {
    answer
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find_map(|line| line.strip_prefix("concert_portal="))
        .and_then(|rest| rest.split(';').next())
        .map(str::to_owned)
}

fn csrf_of(page: &str) -> Option<String> {
    let at = page.find(r#"<meta name="csrf-token" content=""#)?;
    let rest = &page[at + r#"<meta name="csrf-token" content=""#.len()..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// The headers every portal answer carries, whatever its status.
fn assert_security_headers(answer: &reqwest::Response, what: &str) {
    let headers = answer.headers();
    let policy = headers
        .get(CONTENT_SECURITY_POLICY)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    assert!(
        policy.contains("default-src 'self'")
            && policy.contains("script-src 'self'")
            && policy.contains("frame-ancestors 'none'"),
        "{what}: {policy:?}"
    );
    for (name, value) in [
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
    ] {
        assert_eq!(
            headers.get(name).and_then(|v| v.to_str().ok()),
            Some(value),
            "{what}: {name}"
        );
    }
    assert!(headers.contains_key("cache-control"), "{what}");
}

fn asset_links(page: &str) -> Vec<String> {
    page.match_indices("/assets/")
        .filter_map(|(at, _)| {
            let rest = &page[at..];
            rest.find('"').map(|end| rest[..end].to_owned())
        })
        .collect()
}

#[tokio::test]
async fn without_a_pass_there_is_no_portal_and_the_site_is_unchanged() {
    let origin = echo_origin();
    let running = concert_with_env(
        &["-upstream", &origin.url(), "-portal-listen", "127.0.0.1:0"],
        &[],
    )
    .await;
    assert!(running.portal_addr.is_none());
    let answer = plain_client()
        .get(support::url(&running, "/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
}

/// The start-up error for `args` with `pass` as the portal pass.
async fn start_error(args: &[&str], pass: &str) -> String {
    let mut argv: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    argv.push("-data-dir=".into());
    let env =
        std::collections::HashMap::from([("CONCERT_PORTAL_PASS".to_string(), pass.to_string())]);
    let config = match concert::config::load(&argv, &env) {
        Ok(concert::config::Loaded::Run(config)) => *config,
        Ok(_) => return "not runnable".into(),
        Err(e) => return e.to_string(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    match concert::start(config, Some(listener)).await {
        Ok(_) => "started".into(),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_pass_too_short_or_a_bad_allow_list_stops_the_start() {
    let refused = start_error(&["-portal-listen", "127.0.0.1:0"], "short").await;
    assert!(refused.contains("CONCERT_PORTAL_PASS"), "{refused}");
    for bad in [
        ["-portal-allow", "nope"],
        ["-portal-allow", ""],
        ["-portal-session-ttl", "1m"],
    ] {
        let args = ["-portal-listen", "127.0.0.1:0", bad[0], bad[1]];
        let refused = start_error(&args, PASS).await;
        assert!(refused.contains(bad[0]), "{bad:?}: {refused}");
    }
    // A busy portal address stops the start too, naming the flag.
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let refused = start_error(&["-portal-listen", &addr], PASS).await;
    assert!(refused.contains("-portal-listen"), "{refused}");
}

#[tokio::test]
async fn a_peer_outside_the_allow_list_gets_a_bare_403_everywhere() {
    let portal = portal(&["-portal-allow", "10.0.0.0/8"]).await;
    let client = plain_client();
    for path in [
        "/",
        "/assets/css/portal-light.css",
        "/api/overview",
        "/no-such-page",
    ] {
        let answer = client.get(portal.url(path)).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::FORBIDDEN, "{path}");
        assert_security_headers(&answer, path);
        assert_eq!(answer.headers()["cache-control"], "no-store", "{path}");
        assert_eq!(answer.text().await.unwrap(), "forbidden", "{path}");
    }
    let posted = client
        .post(portal.url("/login"))
        .form_body(&[("pass", PASS)])
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), StatusCode::FORBIDDEN);
    assert_security_headers(&posted, "/login");
    // Forwarded headers mean nothing: only the socket peer counts.
    let answer = client
        .get(portal.url("/"))
        .header("X-Forwarded-For", "10.1.2.3")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn signing_in_opens_a_session_with_a_csrf_token_and_every_linked_file_loads() {
    let portal = portal(&[]).await;
    let client = plain_client();
    let signed_out = client.get(portal.url("/")).send().await.unwrap();
    assert_eq!(signed_out.status(), StatusCode::OK);
    let policy = signed_out.headers()[CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert_eq!(signed_out.headers()["cache-control"], "no-store");
    assert_eq!(signed_out.headers()["x-frame-options"], "DENY");
    let sign_in_page = signed_out.text().await.unwrap();
    assert!(sign_in_page.contains(r#"name="pass""#));
    assert!(sign_in_page.contains("<title>Sign in · Concert</title>"));
    // No inline script or style: the policy would block them.
    assert!(!sign_in_page.contains("<script>") && !sign_in_page.contains("style="));

    let form = PortalForm::fetch(&client, &portal.base).await;
    assert_eq!(form.token.len(), 32);
    let wrong = form
        .post(&client, &portal.base, "not the pass at all")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(
        wrong
            .text()
            .await
            .unwrap()
            .contains("That portal pass is not correct.")
    );

    // The form stays good for another try.
    let right = form.post(&client, &portal.base, PASS).send().await.unwrap();
    assert_eq!(right.status(), StatusCode::SEE_OTHER);
    assert_eq!(right.headers()["location"], "/");
    let line = right.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(line.starts_with("concert_portal="), "{line}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"] {
        assert!(line.contains(attribute), "{attribute} missing: {line}");
    }
    assert!(!line.contains("Secure"), "{line}");
    // The browser is known from now on, for a year.
    let known = set_cookies(&right, "concert_portal_device");
    assert_eq!(known.len(), 1, "{known:?}");
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/login",
        "Max-Age=31536000",
    ] {
        assert!(
            known[0].contains(attribute),
            "{attribute} missing: {known:?}"
        );
    }
    assert!(!known[0].contains("Secure"), "{known:?}");

    let (cookie, csrf) = portal.sign_in(&client).await;
    assert_eq!(csrf.len(), 32);
    assert!(csrf.bytes().all(|b| b.is_ascii_hexdigit()));
    let dashboard = client
        .get(portal.url("/"))
        .header("Cookie", format!("concert_portal={cookie}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(dashboard.contains("<title>Dashboard · Concert</title>"));
    assert!(!dashboard.contains("<script>") && !dashboard.contains("style="));
    for page in [&sign_in_page, &dashboard] {
        let links = asset_links(page);
        assert!(links.len() >= 6, "{links:?}");
        for link in links {
            let answer = client.get(portal.url(&link)).send().await.unwrap();
            assert_eq!(answer.status(), StatusCode::OK, "{link}");
            assert_eq!(answer.headers()["cache-control"], "private, max-age=300");
        }
    }
}

#[tokio::test]
async fn a_secure_cookie_is_marked_secure_when_asked() {
    let portal = portal(&["-portal-secure-cookie"]).await;
    let client = plain_client();
    let page = client.get(portal.url("/")).send().await.unwrap();
    let form_line = set_cookies(&page, "concert_portal_signin").join("\n");
    assert!(form_line.contains("; Secure"), "{form_line}");
    let right = portal_sign_in(&client, &portal.base, PASS).await;
    for name in ["concert_portal", "concert_portal_device"] {
        let line = set_cookies(&right, name).join("\n");
        assert!(line.contains("; Secure"), "{name}: {line}");
    }
}

#[tokio::test]
async fn five_wrong_passes_lock_the_sign_in_even_for_the_right_pass() {
    let portal = portal(&[]).await;
    let client = plain_client();
    let form = PortalForm::fetch(&client, &portal.base).await;
    for _ in 0..5 {
        let wrong = form
            .post(&client, &portal.base, "guess")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    }
    let locked = form.post(&client, &portal.base, PASS).send().await.unwrap();
    assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = locked.headers()[RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((890..=901).contains(&retry), "{retry}");
    assert!(session_cookie(&locked).is_none());
    assert!(
        locked
            .text()
            .await
            .unwrap()
            .contains("Too many failed attempts. Try again in")
    );
}

#[tokio::test]
async fn the_api_wants_a_real_session_and_sign_out_revokes_it() {
    let portal = portal(&[]).await;
    let client = plain_client();
    let overview = portal.url("/api/overview");
    let anonymous = client.get(&overview).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        anonymous.json::<serde_json::Value>().await.unwrap()["error"],
        "sign in required"
    );

    let (cookie, csrf) = portal.sign_in(&client).await;
    let with = |value: &str| {
        client
            .get(&overview)
            .header("Cookie", format!("concert_portal={value}"))
            .send()
    };
    let answer = with(&cookie).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.headers()[CONTENT_TYPE], "application/json");
    // One character changed anywhere in the cookie opens nothing.
    for at in [0, 16, 24, cookie.len() - 1] {
        let mut altered = cookie.clone().into_bytes();
        altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        assert_eq!(
            with(&altered).await.unwrap().status(),
            StatusCode::UNAUTHORIZED,
            "{at}"
        );
    }

    // Signing out needs the session's token in the form.
    let without_token = client
        .post(portal.url("/logout"))
        .header("Cookie", format!("concert_portal={cookie}"))
        .form_body(&[("csrf", "0000")])
        .send()
        .await
        .unwrap();
    assert_eq!(without_token.status(), StatusCode::FORBIDDEN);
    assert_eq!(with(&cookie).await.unwrap().status(), StatusCode::OK);

    let signed_out = client
        .post(portal.url("/logout"))
        .header("Cookie", format!("concert_portal={cookie}"))
        .form_body(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
    assert!(
        signed_out.headers()[SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    // The old cookie, kept by someone, opens nothing any more.
    assert_eq!(
        with(&cookie).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn changes_through_the_api_need_the_csrf_token() {
    let portal = portal(&[]).await;
    let client = plain_client();
    let (cookie, csrf) = portal.sign_in(&client).await;
    for token in [None, Some("0000"), Some("0123456789abcdef0123456789abcdef")] {
        let mut request = client
            .post(portal.url("/api/overview"))
            .header("Cookie", format!("concert_portal={cookie}"));
        if let Some(token) = token {
            request = request.header("X-CSRF-Token", token);
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::FORBIDDEN, "{token:?}");
        assert_eq!(
            answer.json::<serde_json::Value>().await.unwrap()["error"],
            "missing or invalid CSRF token; reload the page"
        );
    }
    // With the token the request passes the gate (and the route answers it: GET only).
    let answer = client
        .post(portal.url("/api/overview"))
        .header("Cookie", format!("concert_portal={cookie}"))
        .header("X-CSRF-Token", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn only_the_portals_own_files_are_served_under_assets() {
    let portal = portal(&[]).await;
    let client = plain_client();
    let css = client
        .get(portal.url("/assets/css/portal-light.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(css.status(), StatusCode::OK);
    assert!(
        css.headers()[CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    let font = client
        .get(portal.url("/assets/lib/css/fonts/bootstrap-icons.woff2"))
        .send()
        .await
        .unwrap();
    assert_eq!(font.headers()[CONTENT_TYPE], "font/woff2");
    for path in [
        "/assets/index.tpl",
        "/assets/header.tpl",
        "/assets/css/../index.tpl",
        "/assets/css/%2e%2e/portal/dashboard.html",
        "/assets/js/nope.js",
        "/assets/../Cargo.toml",
    ] {
        let answer = client.get(portal.url(path)).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::NOT_FOUND, "{path}");
    }
}

#[tokio::test]
async fn the_overview_reports_the_rooms_figures() {
    let portal = portal(&["-cap", "4"]).await;
    let client = plain_client();
    let (cookie, _) = portal.sign_in(&client).await;
    let overview: serde_json::Value = client
        .get(portal.url("/api/overview"))
        .header("Cookie", format!("concert_portal={cookie}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for key in [
        "cap",
        "occupancy",
        "live_queue_depth",
        "asset_cap",
        "asset_in_flight",
        "active_bans",
        "removed_total",
        "kicked_active",
        "notes_tracked",
        "notes_dropped",
        "history_clients",
        "stream_cap",
        "stream_active",
        "first_poll_grace",
        "rate",
        "surge",
        "abuse_enabled",
        "priority_requests_guest",
    ] {
        assert!(overview.get(key).is_some(), "{key} missing: {overview}");
    }
    assert_eq!(overview["cap"], 4);
    let series: serde_json::Value = client
        .get(portal.url("/api/series"))
        .header("Cookie", format!("concert_portal={cookie}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(series["interval"], 5);
    assert!(series["samples"].is_array());
}

#[tokio::test]
async fn the_charts_get_the_origins_latency_and_answers_by_status() {
    let origin = echo_origin();
    let portal = portal(&["-upstream", &origin.url()]).await;
    let client = plain_client();
    let (cookie, _) = portal.sign_in(&client).await;
    let site = plain_client();
    // A sample covers the 5 s before it: keep asking until one holds the pages asked for.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let sample = loop {
        for _ in 0..5 {
            let page = site
                .get(support::url(&portal.running, "/page"))
                .send()
                .await
                .unwrap();
            assert_eq!(page.status(), StatusCode::OK);
        }
        let series: serde_json::Value = client
            .get(portal.url("/api/series"))
            .header("Cookie", format!("concert_portal={cookie}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let found = series["samples"].as_array().and_then(|samples| {
            samples
                .iter()
                .find(|s| s["origin_p50_ms"].is_number())
                .cloned()
        });
        if let Some(sample) = found {
            break sample;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no sample with latency: {series}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let p50 = sample["origin_p50_ms"].as_f64().unwrap();
    let p99 = sample["origin_p99_ms"].as_f64().unwrap();
    assert!(p50 > 0.0 && p50 <= p99 && p99 < 1000.0, "{sample}");
    assert!(sample["answers_2xx"].as_f64().unwrap() > 0.0, "{sample}");
    assert_eq!(sample["answers_5xx"], 0.0);
}

#[tokio::test]
async fn the_portal_cookie_never_reaches_the_origin() {
    let origin = echo_origin();
    let portal = portal(&["-upstream", &origin.url()]).await;
    let seen: serde_json::Value = cookie_client()
        .get(support::url(&portal.running, "/page"))
        .header("Cookie", "concert_portal=secret; theme=dark")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cookies = seen["headers"]["cookie"].to_string();
    assert!(!cookies.contains("concert_portal"), "{cookies}");
    assert!(cookies.contains("theme=dark"), "{cookies}");

    // Nor do the sign-in form's cookie and the known-browser mark, real ones included.
    let client = plain_client();
    let signed_in = portal_sign_in(&client, &portal.base, PASS).await;
    let known = support::cookie_value(&signed_in, "concert_portal_device").unwrap();
    let form = PortalForm::fetch(&client, &portal.base).await;
    let seen: serde_json::Value = plain_client()
        .get(support::url(&portal.running, "/login"))
        .header(
            "Cookie",
            format!(
                "{}; concert_portal_device={known}; theme=dark; concert_portal=x",
                form.cookie
            ),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cookies = seen["headers"]["cookie"].to_string();
    assert!(!cookies.contains("concert_portal"), "{cookies}");
    assert!(!cookies.contains(&known), "{cookies}");
    assert!(cookies.contains("theme=dark"), "{cookies}");
}

#[tokio::test]
async fn the_portal_stops_with_the_main_listener() {
    let portal = portal(&[]).await;
    let addr = portal.running.portal_addr.unwrap();
    tokio::time::timeout(Duration::from_secs(20), portal.running.shutdown())
        .await
        .expect("stops in time")
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn the_dashboard_names_where_ip_details_come_from() {
    let portal_without = portal(&[]).await;
    let client = plain_client();
    let (cookie, _) = portal_without.sign_in(&client).await;
    let page = client
        .get(portal_without.url("/"))
        .header("Cookie", format!("concert_portal={cookie}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("IP details: off"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ip2asn-combined.tsv");
    std::fs::write(
        &file,
        "45.138.12.0\t45.138.12.255\t218785\tLT\tUAB Cherry Servers\n",
    )
    .unwrap();
    let running = concert_with_env(
        &["-portal-listen", "127.0.0.1:0"],
        &[
            ("CONCERT_PORTAL_PASS", PASS),
            ("NADDR_DATA", file.to_str().unwrap()),
        ],
    )
    .await;
    let with_file = PortalUnderTest {
        base: format!("http://{}", running.portal_addr.unwrap()),
        running,
    };
    let (cookie, _) = with_file.sign_in(&client).await;
    // The file is loaded off the async workers, shortly after the start.
    let mut page = String::new();
    for _ in 0..50 {
        page = client
            .get(with_file.url("/"))
            .header("Cookie", format!("concert_portal={cookie}"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if page.contains("ip2asn-combined.tsv (1 IPv4") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(page.contains("ip2asn-combined.tsv (1 IPv4"), "{page}");
}

impl PortalUnderTest {
    /// Sends `method` to the API with the session and its CSRF token.
    async fn api(
        &self,
        client: &reqwest::Client,
        session: &(String, String),
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (StatusCode, serde_json::Value) {
        let mut request = client
            .request(method, self.url(path))
            .header("Cookie", format!("concert_portal={}", session.0))
            .header("X-CSRF-Token", &session.1);
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let answer = request.send().await.unwrap();
        let status = answer.status();
        (
            status,
            answer.json().await.unwrap_or(serde_json::Value::Null),
        )
    }
}

#[tokio::test]
async fn bans_are_made_replaced_listed_and_lifted_from_the_portal() {
    let origin = echo_origin();
    let portal = portal(&["-upstream", &origin.url()]).await;
    let client = plain_client();
    let session = portal.sign_in(&client).await;
    let post = reqwest::Method::POST;

    let (status, made) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.9", "duration": "1h"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{made}");
    assert_eq!(made["client"], "203.0.113.9");
    assert_eq!(made["permanent"], false);
    let (_, listed) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/bans", None)
        .await;
    let bans = listed["bans"].as_array().unwrap();
    assert_eq!(bans.len(), 1);
    assert!(bans[0]["remaining_seconds"].as_u64().unwrap() >= 59 * 60);
    assert_eq!(listed["enabled"], true);
    assert_eq!(listed["persisted"], false);

    // Replacing a ban is not a new offense.
    let (status, _) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.9", "duration": "10m"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, listed) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/bans", None)
        .await;
    assert!(listed["bans"][0]["remaining_seconds"].as_u64().unwrap() <= 600);
    assert_eq!(
        concert::endpoints::figures::stats_json(&portal.running.app)["abuse_bans_total"],
        1
    );

    for (body, expected) in [
        (
            serde_json::json!({"client": "nope", "duration": "1h"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            serde_json::json!({"client": "203.0.113.10", "duration": "forever"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            serde_json::json!({"client": "203.0.113.10", "duration": "5s"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            serde_json::json!({"duration": "1h"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            serde_json::json!({"client": "10.0.0.0/4", "duration": "1h"}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (status, answer) = portal
            .api(
                &client,
                &session,
                post.clone(),
                "/api/bans",
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, expected, "{body}: {answer}");
    }
    let (_, bad) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.10", "duration": "5s"})),
        )
        .await;
    assert_eq!(
        bad["error"],
        "duration must be between 1m and 8760h, for example 30m or 24h, or the ban must be permanent"
    );

    // A range, then the fragment: rows with IP cells and the table's flags.
    let (status, range) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/bans",
            Some(
                serde_json::json!({"client": "198.51.7.9/16", "duration": "1h", "permanent": true}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{range}");
    assert_eq!(range["client"], "198.51.0.0/16");
    assert_eq!(range["range"], true);
    assert!(range["until"].is_null());
    let (_, fragment) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/frag/bans?keys=203.0.113.9,192.0.2.1",
            None,
        )
        .await;
    let html = fragment["html"].as_str().unwrap();
    assert!(html.contains(r#"class="table-warning""#), "{html}");
    assert!(html.contains(r#"class="table-danger""#), "{html}");
    assert!(html.contains(r#"data-key="198.51.0.0/16""#), "{html}");
    assert!(
        html.contains("ip-badge-v4") && html.contains(">range<"),
        "{html}"
    );
    assert_eq!(fragment["flags"]["enabled"], true);
    assert_eq!(fragment["total"], 2);
    assert_eq!(fragment["where"]["203.0.113.9"], 1);
    assert_eq!(fragment["where"]["192.0.2.1"], 0);
    assert!(
        fragment["summary"]
            .as_str()
            .unwrap()
            .starts_with("1–2 of 2 active bans")
    );

    // Lifting: unknown 404, bad 400, known 200 and gone.
    let delete = reqwest::Method::DELETE;
    let (status, _) = portal
        .api(
            &client,
            &session,
            delete.clone(),
            "/api/bans?client=192.0.2.1",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = portal
        .api(
            &client,
            &session,
            delete.clone(),
            "/api/bans?client=nope",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, lifted) = portal
        .api(
            &client,
            &session,
            delete.clone(),
            "/api/bans?client=203.0.113.9",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(lifted["unbanned"], "203.0.113.9");
    let (_, listed) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/bans", None)
        .await;
    assert_eq!(listed["bans"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_ban_from_the_portal_refuses_the_client_on_the_site_and_is_saved() {
    let origin = echo_origin();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap().to_owned();
    let portal = portal(&["-upstream", &origin.url(), "-data-dir", &data_dir]).await;
    let client = plain_client();
    let session = portal.sign_in(&client).await;
    // Loopback is a trusted proxy by default (and so never banned): the visitor is the client
    // it names.
    let site = support::url(&portal.running, "/page");
    let visit = || {
        client
            .get(&site)
            .header("X-Forwarded-For", "203.0.113.50")
            .send()
    };
    assert_eq!(visit().await.unwrap().status(), StatusCode::OK);
    let (status, refused) = portal
        .api(
            &client,
            &session,
            reqwest::Method::POST,
            "/api/bans",
            Some(serde_json::json!({"client": "127.0.0.1", "duration": "30m"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("exempt"),
        "{refused}"
    );

    let (status, _) = portal
        .api(
            &client,
            &session,
            reqwest::Method::POST,
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.50", "duration": "30m"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // A timed ban answers 429 with the time left.
    let banned = visit().await.unwrap();
    assert_eq!(banned.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(banned.headers().contains_key(RETRY_AFTER));
    let saved = std::fs::read_to_string(data.path().join("bans.json")).unwrap();
    assert!(saved.contains("203.0.113.50"), "{saved}");
    let (status, _) = portal
        .api(
            &client,
            &session,
            reqwest::Method::DELETE,
            "/api/bans?client=203.0.113.50",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(visit().await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn with_the_registry_off_bans_are_refused_with_409() {
    let portal = portal(&["-abuse=false"]).await;
    let client = plain_client();
    let session = portal.sign_in(&client).await;
    let (status, _) = portal
        .api(
            &client,
            &session,
            reqwest::Method::POST,
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.9", "duration": "1h"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = portal
        .api(
            &client,
            &session,
            reqwest::Method::DELETE,
            "/api/bans?client=203.0.113.9",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (_, fragment) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/frag/bans",
            None,
        )
        .await;
    assert_eq!(fragment["flags"]["enabled"], false);
}

#[tokio::test]
async fn the_queue_lists_the_line_moves_a_visitor_up_and_a_ban_clears_its_place() {
    let origin = support::origins::held_origin();
    let portal = portal(&["-upstream", &origin.url(), "-cap", "1"]).await;
    let holder = support::hold_the_only_slot(&portal.running, &origin, "/busy").await;
    // Two visitors behind a trusted proxy (loopback), so each has an address of its own.
    let mut visitors = Vec::new();
    for (n, address) in ["203.0.113.1", "203.0.113.2"].into_iter().enumerate() {
        let browser = cookie_client();
        let mut request = browser
            .get(support::url(&portal.running, &format!("/api/wait?n={n}")))
            .header("X-Forwarded-For", address);
        if n == 0 {
            request = request.header("User-Agent", "Probe/1.0 (line test)");
        }
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
        visitors.push(browser);
    }
    let client = plain_client();
    let session = portal.sign_in(&client).await;
    let (status, line) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/queue", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(line["listed"], 2);
    assert_eq!(line["limit"], 500);
    assert_eq!(line["kicked"], 0);
    assert_eq!(line["live_queue_depth"], 2);
    let occupants = line["occupants"].as_array().unwrap().clone();
    assert_eq!(occupants[0]["client"], "203.0.113.1");
    assert_eq!(occupants[0]["position"], 1);
    assert_eq!(occupants[1]["position"], 2);
    // What each asked for first, and with which browser (the second sent none).
    assert_eq!(occupants[0]["path"], "/api/wait?n=0");
    assert_eq!(occupants[0]["user_agent"], "Probe/1.0 (line test)");
    assert_eq!(occupants[1]["path"], "/api/wait?n=1");
    assert_eq!(occupants[1]["user_agent"], "");
    let (_, overview) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/overview",
            None,
        )
        .await;
    assert_eq!(overview["notes_tracked"], 2, "{overview}");
    assert_eq!(overview["notes_dropped"], 0);
    // Tickets never leave Concert: the id is a short hash.
    let second = occupants[1]["id"].as_str().unwrap().to_owned();
    assert_eq!(second.len(), 16);

    let (_, fragment) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/frag/queue",
            None,
        )
        .await;
    let html = fragment["html"].as_str().unwrap();
    assert!(html.contains(r#"data-action="promote""#), "{html}");
    assert!(html.contains(&format!(r#"data-key="{second}""#)), "{html}");
    assert_eq!(fragment["total"], 2);
    assert!(
        html.contains("/api/wait?n=0") && html.contains("Probe/1.0"),
        "{html}"
    );
    assert!(html.contains("(none sent)"), "{html}");
    assert_eq!(
        fragment["summary"],
        "1–2 of 2 listed · 2 waiting · 0 removed"
    );
    let (_, by_browser) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/frag/queue?q=probe",
            None,
        )
        .await;
    assert_eq!(by_browser["total"], 1);
    let (_, by_path) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/frag/queue?q=N%3D1",
            None,
        )
        .await;
    assert_eq!(by_path["total"], 1);
    let (_, none) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/frag/queue?q=198.51",
            None,
        )
        .await;
    assert_eq!(none["total"], 0);

    let post = reqwest::Method::POST;
    let (status, answer) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/queue/promote",
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("id is required"))
    );
    let (status, _) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/queue/promote",
            Some(serde_json::json!({"id": "nope"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, promoted) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/queue/promote",
            Some(serde_json::json!({"id": second})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{promoted}");
    assert_eq!(promoted["promoted"], second.as_str());
    let (_, line) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/queue", None)
        .await;
    assert_eq!(line["occupants"][0]["client"], "203.0.113.2");
    assert_eq!(line["occupants"][0]["promoted"], true);

    // Banning the first visitor's address removes it from the line.
    let (status, banned) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.1", "duration": "1h"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(banned["dropped"], 1);
    let (_, line) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/queue", None)
        .await;
    assert_eq!(line["listed"], 1);
    assert_eq!(line["occupants"][0]["client"], "203.0.113.2");

    origin.release(10);
    let _ = holder.await;
}

#[tokio::test]
async fn a_removed_visitor_is_told_so_and_may_join_again_and_remove_and_ban_blocks_it() {
    let origin = support::origins::held_origin();
    let portal = portal(&["-upstream", &origin.url(), "-cap", "1"]).await;
    let holder = support::hold_the_only_slot(&portal.running, &origin, "/busy").await;
    let visitor = cookie_client();
    let wait = || {
        visitor
            .get(support::url(&portal.running, "/api/wait"))
            .header("X-Forwarded-For", "203.0.113.7")
            .send()
    };
    assert_eq!(
        wait().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let client = plain_client();
    let session = portal.sign_in(&client).await;
    let (_, line) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/queue", None)
        .await;
    let id = line["occupants"][0]["id"].as_str().unwrap().to_owned();
    let post = reqwest::Method::POST;
    let (status, kicked) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/queue/kick",
            Some(serde_json::json!({"id": id})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{kicked}");
    assert_eq!(kicked["banned"], false);
    let (_, line) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/queue", None)
        .await;
    assert_eq!(line["listed"], 0);
    // Remembered, so its next request is told it was removed.
    assert_eq!(line["kicked"], 1, "{line}");
    let (_, overview) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/overview",
            None,
        )
        .await;
    assert_eq!(overview["kicked_active"], 1);

    // The waiting page's poll sends it in, to be told; the answer clears the ticket.
    let poll: serde_json::Value = visitor
        .get(support::url(&portal.running, "/queue/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(poll["ready"], true);
    let page = visitor
        .get(support::url(&portal.running, "/shop"))
        .header("Accept", support::HTML_ACCEPT)
        .header("X-Forwarded-For", "203.0.113.7")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::FORBIDDEN);
    let cleared = support::set_cookies(&page, "room_ticket").join(" ");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    let text = page.text().await.unwrap();
    assert!(
        text.contains("<title>Removed from the line</title>"),
        "{text}"
    );
    assert!(text.contains("You were removed from the line") && text.contains("Rejoin the line"));
    // Joining again puts it at the back of the line.
    assert_eq!(
        wait().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let (_, line) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/queue", None)
        .await;
    assert_eq!(line["listed"], 1);

    // Removed and banned: out of the line, refused on the next request.
    let id = line["occupants"][0]["id"].as_str().unwrap().to_owned();
    let (status, kicked) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/queue/kick",
            Some(serde_json::json!({"id": id, "ban": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{kicked}");
    assert_eq!(kicked["banned"], true);
    assert!(kicked["ban_seconds"].as_u64().unwrap() > 0);
    let (_, line) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/queue", None)
        .await;
    assert_eq!(line["listed"], 0);
    let blocked = wait().await.unwrap();
    assert_eq!(blocked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(!blocked.text().await.unwrap().contains("queued"));
    let (status, _) = portal
        .api(
            &client,
            &session,
            post.clone(),
            "/api/queue/kick",
            Some(serde_json::json!({"id": "nope"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    origin.release(10);
    let _ = holder.await;
}

#[tokio::test]
async fn a_settings_change_with_several_problems_lists_every_one_and_changes_nothing() {
    let portal = portal(&["-cap", "4"]).await;
    let client = plain_client();
    let session = portal.sign_in(&client).await;
    // A cap out of range is refused on its own; a longer retry interval makes both graces too
    // short for it, and ban paths need the abuse registry that is being turned off: those are
    // found only in the settings as a whole.
    let (status, refused) = portal
        .api(
            &client,
            &session,
            reqwest::Method::POST,
            "/api/settings",
            Some(serde_json::json!({
                "cap": 0,
                "retry_after": 20,
                "abuse": false,
                "ban_paths": "/.env",
            })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let keys: Vec<&str> = refused["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|problem| problem["key"].as_str())
        .collect();
    assert_eq!(
        keys,
        ["cap", "first_poll_grace", "ready_grace", "ban_paths"],
        "{refused}"
    );
    let error = refused["error"].as_str().unwrap();
    assert_eq!(error.split("; ").count(), 4, "{error}");
    for named in [
        "for cap:",
        "-first-poll-grace",
        "-ready-grace",
        "ban_paths requires",
    ] {
        assert!(error.contains(named), "{named} missing: {error}");
    }
    let config = &portal.running.app.generation().config;
    assert_eq!(
        (
            config.cap,
            config.retry_after,
            config.abuse,
            config.ban_paths.len()
        ),
        (4, 5, true, 0)
    );
}

#[tokio::test]
async fn a_sign_in_from_another_sites_page_is_refused_and_does_not_lock_the_operator_out() {
    let portal = portal(&[]).await;
    let client = plain_client();
    // A page elsewhere posting wrong passes through the operator's browser: refused before the
    // pass is looked at, even with a form token it could not have had.
    let form = PortalForm::fetch(&client, &portal.base).await;
    let cross_site: [&[(&str, &str)]; 4] = [
        &[("Origin", "http://evil.example")],
        &[("Sec-Fetch-Site", "cross-site")],
        &[
            ("Origin", "http://evil.example"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        &[("Origin", "null"), ("Sec-Fetch-Site", "same-site")],
    ];
    for headers in cross_site {
        for _ in 0..3 {
            let mut request = form.post(&client, &portal.base, "guess");
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let answer = request.send().await.unwrap();
            assert_eq!(answer.status(), StatusCode::FORBIDDEN, "{headers:?}");
            assert!(support::set_cookies(&answer, "concert_portal").is_empty());
            assert_eq!(answer.text().await.unwrap(), "forbidden", "{headers:?}");
        }
    }
    // A client sending neither header is held to the form's token: none, a wrong one, or one
    // without its cookie is refused the same way, with a fresh form to try again.
    let no_token = client
        .post(portal.url("/login"))
        .form_body(&[("pass", "guess")])
        .send()
        .await
        .unwrap();
    let wrong_token = client
        .post(portal.url("/login"))
        .header("Cookie", &form.cookie)
        .form_body(&[
            ("csrf", "0123456789abcdef0123456789abcdef"),
            ("pass", "guess"),
        ])
        .send()
        .await
        .unwrap();
    let no_cookie = client
        .post(portal.url("/login"))
        .form_body(&[("csrf", form.token.as_str()), ("pass", "guess")])
        .send()
        .await
        .unwrap();
    for answer in [no_token, wrong_token, no_cookie] {
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            support::set_cookies(&answer, "concert_portal_signin").len(),
            1
        );
        let page = answer.text().await.unwrap();
        assert!(page.contains("The sign-in form had expired"), "{page}");
        assert!(page.contains(r#"name="csrf""#), "{page}");
    }
    for _ in 0..5 {
        let answer = client
            .post(portal.url("/login"))
            .form_body(&[("pass", "guess")])
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);
    }

    // None of that counted: the operator's own page signs in, as a browser sends it (with its
    // origin hidden, as the portal's pages ask for no referrer, or named).
    for origin in ["null", portal.base.as_str()] {
        let signed_in = form
            .post(&client, &portal.base, PASS)
            .header("Origin", origin)
            .header("Sec-Fetch-Site", "same-origin")
            .send()
            .await
            .unwrap();
        assert_eq!(signed_in.status(), StatusCode::SEE_OTHER, "{origin}");
    }
    let signed_in = form.post(&client, &portal.base, PASS).send().await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert!(support::cookie_value(&signed_in, "concert_portal").is_some());
}

#[tokio::test]
async fn a_known_browser_signs_in_while_its_address_is_locked_and_a_forged_mark_counts_as_none() {
    let portal = portal(&[]).await;
    let client = plain_client();
    let operator = portal_sign_in(&client, &portal.base, PASS).await;
    assert_eq!(operator.status(), StatusCode::SEE_OTHER);
    let known = support::cookie_value(&operator, "concert_portal_device").unwrap();
    let with_mark = |mark: String, pass: &'static str| {
        let client = client.clone();
        let base = portal.base.clone();
        async move {
            let form = PortalForm::fetch(&client, &base).await;
            form.post(&client, &base, pass)
                .header("Cookie", format!("concert_portal_device={mark}"))
                .send()
                .await
                .unwrap()
        }
    };

    // Someone else at the same address (the same NAT, tunnel or proxy) locks that address.
    let form = PortalForm::fetch(&client, &portal.base).await;
    for _ in 0..5 {
        let wrong = form
            .post(&client, &portal.base, "guess")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    }
    let locked = form.post(&client, &portal.base, PASS).send().await.unwrap();
    assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS);

    // The operator's browser is known, so the address's lock does not stop it, and its mark
    // is renewed as it was.
    let again = with_mark(known.clone(), PASS).await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        support::cookie_value(&again, "concert_portal_device").as_deref(),
        Some(known.as_str())
    );

    // A made-up or altered mark is no mark: that attempt is the locked address's.
    let mut altered = known.clone().into_bytes();
    altered[3] = if altered[3] == b'A' { b'B' } else { b'A' };
    for forged in [
        String::from_utf8(altered).unwrap(),
        "A".repeat(known.len()),
        "made-up".to_owned(),
    ] {
        let answer = with_mark(forged.clone(), PASS).await;
        assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS, "{forged}");
    }
}

#[tokio::test]
async fn a_known_browsers_wrong_passes_lock_that_browser_not_its_address() {
    let first = portal(&[]).await;
    let client = plain_client();
    let operator = portal_sign_in(&client, &first.base, PASS).await;
    let known = support::cookie_value(&operator, "concert_portal_device").unwrap();
    let form = PortalForm::fetch(&client, &first.base).await;
    let post = |pass: &str, mark: Option<&str>| {
        let mut request = form.post(&client, &first.base, pass);
        if let Some(mark) = mark {
            request = request.header("Cookie", format!("concert_portal_device={mark}"));
        }
        request.send()
    };
    for _ in 0..5 {
        let wrong = post("typo", Some(&known)).await.unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    }
    assert_eq!(
        post(PASS, Some(&known)).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // The address itself has nothing on record: an unknown browser there signs in.
    assert_eq!(
        post(PASS, None).await.unwrap().status(),
        StatusCode::SEE_OTHER
    );

    // Forged marks are counted against the address like no mark at all.
    let other = portal(&[]).await;
    let form = PortalForm::fetch(&client, &other.base).await;
    for _ in 0..5 {
        let wrong = form
            .post(&client, &other.base, "guess")
            .header(
                "Cookie",
                "concert_portal_device=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            )
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    }
    let locked = form.post(&client, &other.base, PASS).send().await.unwrap();
    assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// Inline script or style in a page or fragment: the content policy would block it, so
/// there must be none.
fn inline_code(html: &str) -> Vec<String> {
    let lower = html.to_ascii_lowercase();
    let mut found = Vec::new();
    for marker in ["<style", "style="] {
        if lower.contains(marker) {
            found.push(marker.to_owned());
        }
    }
    for (at, _) in lower.match_indices("<script") {
        let tag = &lower[at..];
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        if !tag.contains(" src=") {
            found.push(tag.to_owned());
        }
    }
    // Event handler attributes: ` on` and letters, then `=`.
    for (at, _) in lower.match_indices(" on") {
        let rest = &lower[at + 3..];
        let letters = rest.bytes().take_while(u8::is_ascii_lowercase).count();
        if letters > 0 && rest[letters..].starts_with('=') {
            found.push(lower[at..at + 3 + letters + 1].to_owned());
        }
    }
    found
}

#[tokio::test]
async fn no_portal_page_or_fragment_carries_inline_script_or_style() {
    let origin = support::origins::held_origin();
    let portal = portal(&["-upstream", &origin.url(), "-cap", "1"]).await;
    let holder = support::hold_the_only_slot(&portal.running, &origin, "/busy").await;
    // One visitor in line (behind a trusted proxy, so with an address of its own) and one ban,
    // so every table has rows.
    let visitor = cookie_client();
    let queued = visitor
        .get(support::url(&portal.running, "/api/wait"))
        .header("X-Forwarded-For", "203.0.113.1")
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), StatusCode::TOO_MANY_REQUESTS);
    let client = plain_client();
    let sign_in_page = client
        .get(portal.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let session = portal.sign_in(&client).await;
    let (status, _) = portal
        .api(
            &client,
            &session,
            reqwest::Method::POST,
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.9", "duration": "1h"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let dashboard = client
        .get(portal.url("/"))
        .header("Cookie", format!("concert_portal={}", session.0))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(dashboard.contains("<title>Dashboard · Concert</title>"));
    let mut checked = vec![
        ("/".to_owned(), sign_in_page),
        ("/ (signed in)".to_owned(), dashboard),
    ];
    let fragment = |path: String| {
        let client = client.clone();
        let session = session.clone();
        let portal = &portal;
        async move {
            let (status, answer) = portal
                .api(&client, &session, reqwest::Method::GET, &path, None)
                .await;
            assert_eq!(status, StatusCode::OK, "{path}: {answer}");
            let html = answer["html"].as_str().unwrap_or_default().to_owned();
            assert!(html.contains("<"), "{path}: {answer}");
            (path, html)
        }
    };
    for path in [
        "/api/frag/queue",
        "/api/frag/bans",
        "/api/frag/visitors",
        "/api/frag/visitor?client=203.0.113.1",
        "/api/frag/banlog",
    ] {
        checked.push(fragment(path.to_owned()).await);
    }
    let banlog = &checked.last().unwrap().1;
    let window = banlog
        .split("data-key=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a ban window in the log")
        .to_owned();
    checked.push(fragment(format!("/api/frag/ban?id={window}")).await);
    for (path, html) in &checked {
        assert_eq!(inline_code(html), Vec::<String>::new(), "{path}");
    }
    // The check itself finds what it looks for.
    assert_eq!(
        inline_code(
            r#"<p style="x" onclick="y()"><script>z()</script><script src="/a.js"></script>"#
        )
        .len(),
        3
    );

    origin.release(10);
    let _ = holder.await;
}

#[tokio::test]
async fn every_route_that_changes_state_wants_the_csrf_token() {
    let portal = portal(&["-cap", "4"]).await;
    let client = plain_client();
    let session = portal.sign_in(&client).await;
    let (cookie, csrf) = session.clone();
    let post = reqwest::Method::POST;
    let delete = reqwest::Method::DELETE;
    // With the token: a ban to lift and a cap of 6 to reset, for the attempts below.
    for (method, path, body) in [
        (
            post.clone(),
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.8", "duration": "1h"})),
        ),
        (
            post.clone(),
            "/api/settings",
            Some(serde_json::json!({"cap": 6})),
        ),
    ] {
        let (status, answer) = portal.api(&client, &session, method, path, body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
    }
    let routes = [
        (
            post.clone(),
            "/api/queue/promote",
            Some(serde_json::json!({"id": "nope"})),
        ),
        (
            post.clone(),
            "/api/queue/kick",
            Some(serde_json::json!({"id": "nope", "ban": true})),
        ),
        (
            post.clone(),
            "/api/bans",
            Some(serde_json::json!({"client": "203.0.113.9", "duration": "1h"})),
        ),
        (delete.clone(), "/api/bans?client=203.0.113.8", None),
        (
            post.clone(),
            "/api/settings",
            Some(serde_json::json!({"cap": 7})),
        ),
        (delete.clone(), "/api/settings?key=cap", None),
    ];
    for (method, path, body) in routes {
        for token in [None, Some("0000"), Some("0123456789abcdef0123456789abcdef")] {
            let mut request = client
                .request(method.clone(), portal.url(path))
                .header("Cookie", format!("concert_portal={cookie}"));
            if let Some(token) = token {
                request = request.header("X-CSRF-Token", token);
            }
            if let Some(body) = &body {
                request = request
                    .header(CONTENT_TYPE, "application/json")
                    .body(body.to_string());
            }
            let answer = request.send().await.unwrap();
            assert_eq!(
                answer.status(),
                StatusCode::FORBIDDEN,
                "{method} {path} {token:?}"
            );
            assert_eq!(
                answer.json::<serde_json::Value>().await.unwrap()["error"],
                "missing or invalid CSRF token; reload the page",
                "{method} {path}"
            );
        }
    }
    for form in [
        vec![],
        vec![("csrf", "0000")],
        vec![("csrf", "0123456789abcdef0123456789abcdef")],
    ] {
        let answer = client
            .post(portal.url("/logout"))
            .header("Cookie", format!("concert_portal={cookie}"))
            .form_body(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::FORBIDDEN, "{form:?}");
        assert_eq!(answer.text().await.unwrap(), "forbidden");
    }
    // Nothing was done: the ban stands, no other was made, the cap is still 6, and the
    // session is still open.
    let (_, bans) = portal
        .api(&client, &session, reqwest::Method::GET, "/api/bans", None)
        .await;
    let clients: Vec<&str> = bans["bans"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|ban| ban["client"].as_str())
        .collect();
    assert_eq!(clients, ["203.0.113.8"]);
    assert_eq!(portal.running.app.generation().config.cap, 6);
    let (status, _) = portal
        .api(
            &client,
            &session,
            reqwest::Method::GET,
            "/api/overview",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let signed_out = client
        .post(portal.url("/logout"))
        .header("Cookie", format!("concert_portal={cookie}"))
        .form_body(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
}
