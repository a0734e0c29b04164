//! The Visitors and Ban log tabs in a real browser, under the portal's self-only content
//! policy: an operator finds a client that made requests, opens its detail, bans it from its
//! row through the ban dialog, then reads the ban log and a ban's panel. A screenshot of each
//! tab is left in the build's temp directory.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use browser::{Browser, Page};
use support::*;

const PASS: &str = "a portal pass for the history browser";
const PATIENCE: Duration = Duration::from_secs(10);

fn artefact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("portal-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Clicks `selector` once the page's scripts have all run: the title is set and the tab
/// buttons exist while the page is still being read, before their handlers are attached.
async fn click(page: &Page, selector: &str) {
    let clicked = page
        .wait_for(
            &format!(
                "(() => {{ if (document.readyState !== 'complete') return false; const e = document.querySelector({selector:?}); if (!e || e.disabled) return false; e.click(); return true; }})()"
            ),
            PATIENCE,
        )
        .await;
    assert!(clicked.is_ok(), "could not click {selector}: {clicked:?}");
}

async fn visit(concert: &concert::Running, path: &str, address: &str) -> reqwest::StatusCode {
    plain_client()
        .get(url(concert, path))
        .header("X-Forwarded-For", address)
        .header("User-Agent", "history-browser-visitor/2")
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_visitor_bans_it_from_its_row_and_reads_the_ban_log() {
    let origin = origins::fast_origin();
    let concert = concert_with_env(
        &[
            "-upstream",
            &origin.url(),
            "-portal-listen",
            "127.0.0.1:0",
            "-ban-paths",
            "/.env",
        ],
        &[("CONCERT_PORTAL_PASS", PASS)],
    )
    .await;
    let base = format!(
        "http://{}",
        concert.portal_addr.expect("the portal listens")
    );
    let visitor = "203.0.113.7";
    for path in ["/", "/shop?item=4", "/checkout"] {
        assert_eq!(
            visit(&concert, path, visitor).await,
            reqwest::StatusCode::OK
        );
    }
    // Another client asks for a ban path: a ban with a trigger.
    let prober = "198.51.100.23";
    visit(&concert, "/.env", prober).await;
    visit(&concert, "/wp-login.php", prober).await;

    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.set_viewport(1280, 900, false).await.unwrap();
    page.goto(&format!("{base}/")).await.unwrap();
    page.wait_for("document.title === 'Sign in · Concert'", PATIENCE)
        .await
        .unwrap();
    page.eval(&format!(
        "document.getElementById('pass').value = {PASS:?}; document.querySelector('form').submit(); true"
    ))
    .await
    .unwrap();
    page.wait_for("document.title === 'Dashboard · Concert'", PATIENCE)
        .await
        .unwrap();
    // Counts the detail fetches, to see that an open detail is fetched again only when its
    // row changed.
    page.eval(
        "window.detailFetches = 0; const plain = window.fetch; window.fetch = function (url) { if (String(url).indexOf('/api/frag/visitor?') >= 0) window.detailFetches += 1; return plain.apply(this, arguments); }; true",
    )
    .await
    .unwrap();

    click(&page, "[data-tab=\"visitors\"]").await;
    // The Bans table has rows keyed by address too.
    let row = format!("[data-table=\"visitors\"] tr[data-key=\"{visitor}\"]");
    page.wait_for(
        &format!("document.querySelector('{row} .ip-text') && document.querySelector('{row} .ip-text').textContent === '{visitor}'"),
        PATIENCE,
    )
    .await
    .unwrap();
    let pill = page
        .wait_for(
            "(() => { const e = document.querySelector('[data-stat=\"history_clients\"]'); return e && e.textContent === '2' && e.textContent; })()",
            PATIENCE,
        )
        .await
        .unwrap();
    assert_eq!(pill, "2");
    let summary = page
        .eval("document.querySelector('[data-table-summary=\"visitors\"]').textContent")
        .await
        .unwrap();
    assert!(
        summary.as_str().unwrap().starts_with("1–2 of 2 matching"),
        "{summary}"
    );
    let last = page
        .eval(&format!(
            "document.querySelector('{row} .last-request').textContent"
        ))
        .await
        .unwrap();
    assert!(last.as_str().unwrap().contains("GET /checkout"), "{last}");

    // The detail opens under the row, with the client's requests newest first.
    click(&page, &format!("{row} [data-action=\"expand\"]")).await;
    let detail = format!("tr.detail-row[data-detail-for=\"{visitor}\"]");
    page.wait_for(
        &format!("(() => {{ const d = document.querySelector('{detail}'); return d !== null && d.textContent.indexOf('1–3 of 3') >= 0; }})()"),
        PATIENCE,
    )
    .await
    .unwrap();
    let newest = page
        .eval(&format!(
            "document.querySelector('{detail} tbody tr td:nth-child(2)').textContent"
        ))
        .await
        .unwrap();
    assert_eq!(newest, "GET /checkout");
    let agent = page
        .eval(&format!(
            "document.querySelector('{detail} .browsers').textContent"
        ))
        .await
        .unwrap();
    assert!(
        agent
            .as_str()
            .unwrap()
            .contains("history-browser-visitor/2")
    );
    // Refreshes come and go; the row did not change, so neither does its detail.
    tokio::time::sleep(Duration::from_millis(6500)).await;
    let fetches = page.eval("window.detailFetches").await.unwrap();
    assert_eq!(fetches, 1, "an unchanged row's detail is not fetched again");
    assert_eq!(
        page.eval(&format!(
            "document.querySelector('{row} [data-action=\"expand\"]').getAttribute('aria-expanded')"
        ))
        .await
        .unwrap(),
        "true"
    );

    // Ban it from its row: the Bans tab's dialog, with the address filled in.
    click(&page, &format!("{row} [data-action=\"ban\"]")).await;
    page.wait_for(
        &format!("document.getElementById('ban-dialog').classList.contains('show') && document.getElementById('ban-client').value === '{visitor}'"),
        PATIENCE,
    )
    .await
    .unwrap();
    click(&page, "[data-preset=\"6h\"]").await;
    click(&page, "#ban-submit").await;
    page.wait_for(
        &format!("(() => {{ const r = document.querySelector('{row}'); return r !== null && r.classList.contains('table-warning') && r.textContent.indexOf('banned') >= 0 && r.querySelector('[data-action=\"ban\"]').disabled; }})()"),
        PATIENCE,
    )
    .await
    .unwrap();
    // The row changed, so the open detail was fetched again and shows the ban.
    page.wait_for(
        &format!("(() => {{ const d = document.querySelector('{detail}'); return d !== null && d.querySelector('.ban-panel') !== null && d.textContent.indexOf('banned in the portal by 127.0.0.1') >= 0; }})()"),
        PATIENCE,
    )
    .await
    .unwrap();
    assert!(
        page.eval("window.detailFetches")
            .await
            .unwrap()
            .as_u64()
            .unwrap()
            >= 2
    );
    assert_eq!(
        visit(&concert, "/again", visitor).await,
        reqwest::StatusCode::TOO_MANY_REQUESTS
    );
    page.wait_for(
        "!document.getElementById('ban-dialog').classList.contains('show') && !document.querySelector('.modal-backdrop')",
        PATIENCE,
    )
    .await
    .unwrap();
    page.screenshot(artefact("visitors.png")).await.unwrap();

    // The ban log: both bans, newest first; the ban path's trigger and its panel.
    click(&page, "[data-tab=\"banlog\"]").await;
    page.wait_for(
        "document.querySelectorAll('[data-table=\"banlog\"] tbody tr[data-key]').length === 2",
        PATIENCE,
    )
    .await
    .unwrap();
    let first_target = page
        .eval("document.querySelector('[data-table=\"banlog\"] tbody tr[data-key] .ip-text').textContent")
        .await
        .unwrap();
    assert_eq!(first_target, visitor, "newest first");
    let probe_row = "(() => Array.from(document.querySelectorAll('[data-table=\"banlog\"] tbody tr[data-key]')).find(r => r.querySelector('.ip-text').textContent === '198.51.100.23'))()";
    let started_by = page
        .eval(&format!(
            "{probe_row}.querySelector('.started-by').textContent"
        ))
        .await
        .unwrap();
    assert_eq!(started_by, "GET /.env");
    page.eval(&format!(
        "{probe_row}.querySelector('[data-action=\"expand\"]').click(); true"
    ))
    .await
    .unwrap();
    page.wait_for(
        "(() => { const p = document.querySelector('[data-table=\"banlog\"] tr.detail-row .ban-panel'); return p !== null && p.textContent.indexOf('Paths requested while banned') >= 0 && p.textContent.indexOf('/wp-login.php') >= 0 && p.textContent.indexOf('GET /.env') >= 0; })()",
        PATIENCE,
    )
    .await
    .unwrap();
    // Times are filled in by the page's script, in the browser's zone.
    page.wait_for(
        "Array.from(document.querySelectorAll('[data-table=\"banlog\"] .js-time')).every(e => /^\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d$/.test(e.textContent))",
        PATIENCE,
    )
    .await
    .unwrap();
    page.screenshot(artefact("banlog.png")).await.unwrap();

    assert!(page.problems().is_empty(), "{:?}", page.problems());
}
