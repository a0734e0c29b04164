//! The admin portal in a real browser: sign in through the form, watch the Overview fill in
//! and draw its charts under the portal's self-only content policy, switch the theme, move a
//! visitor up and remove one, ban and unban from the Bans tab, open every other tab, change the
//! cap in Settings, see every tab fit a phone's width, sign out. A screenshot of each view is
//! left in the build's temp directory.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use browser::Browser;
use support::*;

const PASS: &str = "a portal pass for the browser";

fn artefact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("portal-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_sees_the_overview_and_signs_out() {
    let origin = origins::held_origin();
    let concert = concert_with_env(
        &[
            "-upstream",
            &origin.url(),
            "-cap",
            "1",
            "-portal-listen",
            "127.0.0.1:0",
        ],
        &[("CONCERT_PORTAL_PASS", PASS)],
    )
    .await;
    let base = format!(
        "http://{}",
        concert.portal_addr.expect("the portal listens")
    );

    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.set_viewport(1280, 900, false).await.unwrap();
    page.goto(&format!("{base}/")).await.unwrap();
    page.wait_for(
        "document.title === 'Sign in · Concert'",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    page.screenshot(artefact("sign-in.png")).await.unwrap();

    page.eval(&format!(
        "document.getElementById('pass').value = {PASS:?}; document.querySelector('form').submit(); true"
    ))
    .await
    .unwrap();
    page.wait_for(
        "document.title === 'Dashboard · Concert'",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let cookies = page.cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name == "concert_portal")
        .expect("a portal session");
    assert!(session.http_only, "scripts cannot read the session");

    // The figures come from the API; the charts are drawn by the vendored chart library.
    let cap = page
        .wait_for(
            "(() => { const e = document.querySelector('[data-stat=\"cap\"]'); return e && e.textContent === '1' && e.textContent; })()",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(cap, "1");
    page.wait_for(
        "document.querySelectorAll('.uplot canvas').length >= 5",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    page.screenshot(artefact("overview-dark.png"))
        .await
        .unwrap();

    page.eval("document.getElementById('theme-toggle').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.documentElement.getAttribute('data-bs-theme') === 'light' && localStorage.getItem('concert.portal.theme') === 'light'",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.screenshot(artefact("overview-light.png"))
        .await
        .unwrap();

    // Queue: someone holds the only slot and two visitors wait; move the second to the front.
    let holder = hold_the_only_slot(&concert, &origin, "/busy").await;
    let mut waiting = Vec::new();
    for address in ["203.0.113.61", "203.0.113.62"] {
        let visitor = cookie_client();
        let answer = visitor
            .get(url(&concert, "/api/wait"))
            .header("X-Forwarded-For", address)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
        waiting.push(visitor);
    }
    page.eval("document.querySelector('[data-tab=\"queue\"]').click(); true")
        .await
        .unwrap();
    let first_row = "document.querySelector('[data-table=\"queue\"] tbody tr .ip-text')";
    page.wait_for(
        &format!("{first_row} && {first_row}.textContent === '203.0.113.61'"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    page.screenshot(artefact("queue.png")).await.unwrap();
    page.eval("document.querySelectorAll('[data-table=\"queue\"] [data-action=\"promote\"]')[1].click(); true")
        .await
        .unwrap();
    page.wait_for(
        &format!("{first_row} && {first_row}.textContent === '203.0.113.62'"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    // A visitor waiting in a browser of its own is removed from the line: its waiting page
    // finds out by itself and shows why.
    let visitor = browser.new_window().await.unwrap();
    visitor.goto(&url(&concert, "/shop")).await.unwrap();
    visitor
        .wait_for(
            "document.getElementById('position') !== null",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let third_kick = "(() => { const rows = document.querySelectorAll('[data-table=\"queue\"] tbody tr'); const row = Array.from(rows).find(r => r.querySelector('.ip-text').textContent === '127.0.0.1'); if (!row) return false; row.querySelector('[data-action=\"kick\"]').click(); return true; })()";
    page.wait_for(third_kick, Duration::from_secs(10))
        .await
        .unwrap();
    page.eval(third_kick).await.unwrap();
    visitor
        .wait_for(
            "document.title === 'Removed from the line'",
            Duration::from_secs(15),
        )
        .await
        .unwrap();
    visitor.screenshot(artefact("removed.png")).await.unwrap();
    // The removal page itself comes with 403; nothing else may go wrong.
    let problems: Vec<String> = visitor
        .problems()
        .into_iter()
        .filter(|problem| !problem.contains("status of 403"))
        .collect();
    assert!(problems.is_empty(), "{problems:?}");

    origin.release(100);
    holder.await.unwrap();

    // Bans: ban a visitor through the dialog, see it refused on the site, lift the ban.
    page.eval("document.querySelector('[data-tab=\"bans\"]').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "!document.getElementById('tab-bans').hidden && location.hash === '#bans'",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.eval("document.querySelector('[data-action=\"new-ban\"]').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.getElementById('ban-dialog').classList.contains('show')",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.eval(
        "document.getElementById('ban-client').value = '203.0.113.50'; document.querySelector('[data-preset=\"6h\"]').click(); document.getElementById('ban-submit').click(); true",
    )
    .await
    .unwrap();
    page.wait_for(
        "document.querySelector('[data-table=\"bans\"] tr[data-key=\"203.0.113.50\"]') !== null",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let visit = || {
        plain_client()
            .get(url(&concert, "/page"))
            .header("X-Forwarded-For", "203.0.113.50")
            .send()
    };
    // Refused as banned (not queued: the line still holds the two visitors from above).
    let banned = visit().await.unwrap();
    assert_eq!(banned.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(!banned.text().await.unwrap().contains("queued"));
    page.wait_for(
        "(() => { const left = document.querySelector('tr[data-key=\"203.0.113.50\"] .js-left'); return left && /^5h 5\\dm$/.test(left.textContent); })()",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.wait_for(
        "!document.getElementById('ban-dialog').classList.contains('show') && !document.querySelector('.modal-backdrop')",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.screenshot(artefact("bans.png")).await.unwrap();
    // Lifting takes a second click on the same button.
    let unban = "document.querySelector('tr[data-key=\"203.0.113.50\"] [data-action=\"unban\"]').click(); true";
    page.eval(unban).await.unwrap();
    page.eval(unban).await.unwrap();
    page.wait_for(
        "document.querySelector('[data-table=\"bans\"] tr[data-key=\"203.0.113.50\"]') === null",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    // Let in, or given a place in line: no longer refused.
    let let_in = visit().await.unwrap();
    let status = let_in.status();
    let text = let_in.text().await.unwrap();
    assert!(
        status == reqwest::StatusCode::OK || text.contains("\"queued\":true"),
        "{status} {text}"
    );

    // Every other tab opens with its contents, each pictured: the request history's two
    // (203.0.113.50 made requests above, and its lifted ban is in the log), the Monitor, and
    // the Settings, where the cap changes for visitors at once.
    let open_tab =
        |tab: &'static str| format!("document.querySelector('[data-tab=\"{tab}\"]').click(); true");
    let tabs_and_contents: [(&str, &str); 3] = [
        (
            "visitors",
            "document.querySelector('[data-table=\"visitors\"] tr[data-key=\"203.0.113.50\"]') !== null",
        ),
        (
            "banlog",
            "Array.from(document.querySelectorAll('[data-table=\"banlog\"] tbody tr')).some(row => row.textContent.includes('203.0.113.50') && row.textContent.includes('lifted'))",
        ),
        (
            "monitor",
            "document.querySelectorAll('#monitor-health .health-item').length > 0 && document.querySelectorAll('#monitor-histogram .histogram-column').length === 14",
        ),
    ];
    for (tab, contents) in tabs_and_contents {
        page.eval(&open_tab(tab)).await.unwrap();
        page.wait_for(
            &format!("!document.getElementById('tab-{tab}').hidden && location.hash === '#{tab}'"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        page.wait_for(contents, Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("the {tab} tab never showed its contents: {e}"));
        page.screenshot(artefact(&format!("{tab}.png")))
            .await
            .unwrap();
    }
    page.eval(&open_tab("settings")).await.unwrap();
    page.wait_for(
        "(() => { const cap = document.getElementById('setting-cap'); return !!cap && cap.value === '1'; })()",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    page.eval(
        "(() => { const input = document.getElementById('setting-cap'); input.value = '3'; input.dispatchEvent(new Event('input', { bubbles: true })); document.getElementById('settings-save').click(); return true; })()",
    )
    .await
    .unwrap();
    page.wait_for(
        "document.querySelector('[data-key=\"cap\"] .badge') !== null && document.querySelector('[data-key=\"cap\"] .badge').textContent === 'saved'",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    page.screenshot(artefact("settings.png")).await.unwrap();
    assert_eq!(
        room_stats(&concert).await["cap"],
        3,
        "the public listener has the new cap"
    );

    // The Overview's charts were given the samples taken since the start, not only drawn
    // empty: each line of the room's charts holds points.
    page.eval(&open_tab("overview")).await.unwrap();
    page.wait_for(
        "(() => { const p = ConcertPortal.chartPoints(); return ['queue', 'occupancy', 'rates'].every(k => p[k] && p[k].length > 0 && p[k].every(n => n >= 2)); })()",
        Duration::from_secs(15),
    )
    .await
    .unwrap_or_else(|e| panic!("the charts have no points: {e}"));

    // Phone width: no tab scrolls sideways.
    page.set_viewport(390, 844, true).await.unwrap();
    for tab in [
        "overview", "queue", "bans", "visitors", "banlog", "monitor", "settings",
    ] {
        page.eval(&open_tab(tab)).await.unwrap();
        page.wait_for(
            &format!("!document.getElementById('tab-{tab}').hidden"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        // Tables have had their first answer (its summary), so their rows are laid out too.
        page.wait_for(
            &format!(
                "(() => {{ const s = document.querySelector('[data-table-summary=\"{tab}\"]'); return s === null || s.textContent !== ''; }})()"
            ),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        // Against the layout viewport: in a phone's emulation `innerWidth` grows with the
        // page (it is zoomed out to fit), so it would hide the very overflow sought here.
        let widths = page
            .eval("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
            .await
            .unwrap();
        assert!(
            widths[0].as_f64() <= widths[1].as_f64(),
            "the {tab} tab scrolls sideways on a phone (page, viewport): {widths}"
        );
        page.screenshot(artefact(&format!("phone-{tab}.png")))
            .await
            .unwrap();
    }
    page.set_viewport(1280, 900, false).await.unwrap();

    page.eval("document.querySelector('form[action=\"/logout\"]').submit(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.title === 'Sign in · Concert'",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert!(page.problems().is_empty(), "{:?}", page.problems());

    // The session the browser had is gone on the server, not only from the browser.
    let answer = plain_client()
        .get(format!("{base}/api/overview"))
        .header("Cookie", format!("concert_portal={}", session.value))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::UNAUTHORIZED);
}

/// Makes `docs/portal-overview.png`, the README's picture of the Overview: the real binary with
/// its demo origin and crowd, watched for a minute so the charts have something to show.
/// `cargo test --test browser_portal -- --ignored` makes it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "takes a minute; run by hand to refresh the README's screenshot"]
async fn docs_screenshot_of_the_overview() {
    let listen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let portal_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let main_addr = listen.local_addr().unwrap().to_string();
    drop(listen);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_concert"))
        .args([
            "-demo",
            "-listen",
            &main_addr,
            "-portal-listen",
            &format!("127.0.0.1:{portal_port}"),
            "-data-dir=",
        ])
        .env("CONCERT_PORTAL_PASS", PASS)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(65)).await;
    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.set_viewport(1280, 900, false).await.unwrap();
    page.goto(&format!("http://127.0.0.1:{portal_port}/"))
        .await
        .unwrap();
    page.eval(&format!(
        "document.getElementById('pass').value = {PASS:?}; document.querySelector('form').submit(); true"
    ))
    .await
    .unwrap();
    page.wait_for(
        "document.querySelectorAll('.uplot canvas').length >= 5 && document.querySelector('[data-stat=\"cap\"]').textContent !== '—'",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/portal-overview.png");
    page.screenshot(&path).await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
}
