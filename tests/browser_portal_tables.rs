//! The portal's tables in a real browser, under the portal's self-only content policy: the
//! pager and the page size kept per table, the Live switch, the pause while the pointer is over
//! a table, chips on rows that arrive or leave, times that tick between refreshes, copying an
//! address with and without the clipboard API, confirmations that survive a row's refresh,
//! and a session that ends under an open page. Screenshots go to the build's temp directory.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use browser::{Browser, Page};
use serde_json::Value;
use support::*;

const PASS: &str = "a portal pass for the table tests";
const PATIENCE: Duration = Duration::from_secs(10);
/// Longer than one 3-second refresh round, with room to spare.
const MORE_THAN_A_ROUND: Duration = Duration::from_millis(4500);

fn artefact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("portal-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

async fn sign_in(page: &Page, base: &str) {
    page.goto(&format!("{base}/")).await.unwrap();
    page.wait_for("document.title === 'Sign in · Concert'", PATIENCE)
        .await
        .unwrap();
    page.eval(&format!(
        "document.getElementById('pass').value = {PASS:?}; document.querySelector('form').submit(); true"
    ))
    .await
    .unwrap();
    // Loaded, scripts and all: a tab clicked before its script ran would stay shut.
    page.wait_for(
        "document.title === 'Dashboard · Concert' && document.readyState === 'complete'",
        PATIENCE,
    )
    .await
    .unwrap();
    count_fragment_fetches(page).await;
}

/// Counts, per table, the fragment requests the page makes from now on (`window.fetched`),
/// and notes every chip put on a row as `<table> <key> <chip>` (`window.chips`): chips are
/// shown for a few seconds only, and a busy machine could look too late.
async fn count_fragment_fetches(page: &Page) {
    page.eval(
        "window.fetched = {}; const plain = window.fetch; window.fetch = function (url) { const m = /\\/api\\/frag\\/(\\w+)\\?/.exec(String(url)); if (m) window.fetched[m[1]] = (window.fetched[m[1]] || 0) + 1; return plain.apply(this, arguments); }; true",
    )
    .await
    .unwrap();
    page.eval(
        "window.chips = []; new MutationObserver(changes => changes.forEach(change => change.addedNodes.forEach(node => { if (node.nodeType !== 1) return; const chips = node.matches('.row-chip') ? [node] : Array.from(node.querySelectorAll('.row-chip')); chips.forEach(chip => { const row = chip.closest('tr[data-key]'); const table = chip.closest('[data-table]'); if (row && table) window.chips.push(table.dataset.table + ' ' + row.dataset.key + ' ' + chip.textContent); }); }))).observe(document.body, { childList: true, subtree: true }); true",
    )
    .await
    .unwrap();
}

/// Reloads the page (the same address: navigating to it would only move to its fragment).
async fn reload(page: &Page) {
    page.eval("window.unloaded = false; location.reload(); true")
        .await
        .unwrap();
    page.wait_for(
        "window.unloaded === undefined && document.readyState === 'complete' && window.ConcertPortal !== undefined",
        PATIENCE,
    )
    .await
    .unwrap();
    count_fragment_fetches(page).await;
}

async fn fetched(page: &Page, table: &str) -> u64 {
    page.eval(&format!("window.fetched[{table:?}] || 0"))
        .await
        .unwrap()
        .as_u64()
        .unwrap()
}

async fn open_tab(page: &Page, tab: &str) {
    page.eval(&format!(
        "document.querySelector('[data-tab=\"{tab}\"]').click(); true"
    ))
    .await
    .unwrap();
    page.wait_for(
        &format!("!document.getElementById('tab-{tab}').hidden"),
        PATIENCE,
    )
    .await
    .unwrap();
}

/// Sends a change through the page's own `sendJSON` (sign-in cookie and CSRF token included).
async fn send(page: &Page, method: &str, path: &str, body: &str) -> Value {
    page.eval(&format!(
        "ConcertPortal.sendJSON({method:?}, {path:?}, {body}).then(answer => answer.ok ? true : answer.status + ' ' + JSON.stringify(answer.body))"
    ))
    .await
    .unwrap()
}

async fn ban(page: &Page, client: &str, duration: &str) {
    let answer = send(
        page,
        "POST",
        "/api/bans",
        &format!("{{ client: {client:?}, duration: {duration:?} }}"),
    )
    .await;
    assert_eq!(answer, true, "banning {client}: {answer}");
}

async fn lift(page: &Page, client: &str) {
    let answer = send(
        page,
        "DELETE",
        &format!("/api/bans?client={client}"),
        "undefined",
    )
    .await;
    assert_eq!(answer, true, "lifting {client}: {answer}");
}

/// The centre of the first element matching `selector`, scrolled into view at once (the page
/// scrolls smoothly otherwise, and the centre would be read mid-way).
async fn centre_of(page: &Page, selector: &str) -> (f64, f64) {
    let point = page
        .wait_for(
            &format!(
                "(() => {{ const e = document.querySelector({selector:?}); if (!e) return null; e.scrollIntoView({{ block: 'center', behavior: 'instant' }}); const r = e.getBoundingClientRect(); return r.width > 0 ? [r.left + r.width / 2, r.top + r.height / 2] : null; }})()"
            ),
            PATIENCE,
        )
        .await
        .unwrap_or_else(|e| panic!("no {selector} to point at: {e}"));
    (point[0].as_f64().unwrap(), point[1].as_f64().unwrap())
}

fn row(table: &str, key: &str) -> String {
    format!("[data-table=\"{table}\"] tbody tr[data-key=\"{key}\"]")
}

/// A condition: the row of `key` was given the chip `text`.
fn chip_shows(table: &str, key: &str, text: &str) -> String {
    format!(
        "window.chips.includes({:?})",
        format!("{table} {key} {text}")
    )
}

fn page_text(table: &str) -> String {
    format!("document.querySelector('[data-table-pager=\"{table}\"] [data-page-text]').textContent")
}

/// The pager's buttons, `first,prev,next,last`, each `on` or `off`.
fn pager_buttons(table: &str) -> String {
    format!(
        "['first', 'prev', 'next', 'last'].map(p => document.querySelector('[data-table-pager=\"{table}\"] [data-page=\"' + p + '\"]').disabled ? 'off' : 'on').join(',')"
    )
}

async fn turn_page(page: &Page, table: &str, to: &str, expect: &str) {
    page.eval(&format!(
        "document.querySelector('[data-table-pager=\"{table}\"] [data-page=\"{to}\"]').click(); true"
    ))
    .await
    .unwrap();
    page.wait_for(&format!("{} === {expect:?}", page_text(table)), PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("{to} did not lead to {expect}: {e}"));
}

fn rows_shown(table: &str) -> String {
    format!(
        "document.querySelectorAll('[data-table=\"{table}\"] tbody tr[data-key]:not(.row-leaving)').length"
    )
}

fn toast_says(text: &str) -> String {
    format!(
        "Array.from(document.querySelectorAll('#toasts .toast-body')).some(t => t.textContent === {text:?})"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bans_table_pages_goes_live_marks_its_changes_and_copies() {
    let origin = origins::fast_origin();
    let concert = concert_with_env(
        &["-upstream", &origin.url(), "-portal-listen", "127.0.0.1:0"],
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
    sign_in(&page, &base).await;

    // Thirty bans of an hour, the latest ending last: it is listed first (latest end first).
    let address = |n: u32| format!("203.0.113.{n}");
    for n in 100..130 {
        ban(&page, &address(n), "1h").await;
    }

    // The server renders a ban's end from the registry, not from the seconds left, so a
    // second look at an unchanged table is the same markup.
    let same = page
        .eval(
            "(async () => { const a = await ConcertPortal.getJSON('/api/frag/bans?page=1&size=25'); await new Promise(r => setTimeout(r, 1200)); const b = await ConcertPortal.getJSON('/api/frag/bans?page=1&size=25'); if (a.html === b.html) return true; let at = 0; while (a.html[at] === b.html[at]) at += 1; return a.html.slice(Math.max(0, at - 120), at + 40) + ' … then … ' + b.html.slice(Math.max(0, at - 120), at + 40); })()",
        )
        .await
        .unwrap();
    assert_eq!(same, true, "the bans fragment changed by itself: {same}");

    // The pager: two pages of 25, its buttons off where they lead nowhere.
    open_tab(&page, "bans").await;
    page.wait_for(
        &format!(
            "{} === 'Page 1 of 2' && {} === 25",
            page_text("bans"),
            rows_shown("bans")
        ),
        PATIENCE,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval(&pager_buttons("bans")).await.unwrap(),
        "off,off,on,on"
    );
    turn_page(&page, "bans", "next", "Page 2 of 2").await;
    page.wait_for(&format!("{} === 5", rows_shown("bans")), PATIENCE)
        .await
        .unwrap();
    assert_eq!(
        page.eval(&pager_buttons("bans")).await.unwrap(),
        "on,on,off,off"
    );
    turn_page(&page, "bans", "prev", "Page 1 of 2").await;
    turn_page(&page, "bans", "last", "Page 2 of 2").await;
    turn_page(&page, "bans", "first", "Page 1 of 2").await;
    assert_eq!(
        page.eval(&pager_buttons("bans")).await.unwrap(),
        "off,off,on,on"
    );

    // Refreshes of an unchanged table keep each row as it is (nothing is replaced).
    let top = row("bans", &address(129));
    page.eval(&format!(
        "document.querySelector('{top}').kept = true; true"
    ))
    .await
    .unwrap();
    let before = fetched(&page, "bans").await;
    page.wait_for(
        &format!("(window.fetched.bans || 0) >= {}", before + 2),
        PATIENCE,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval(&format!("document.querySelector('{top}').kept === true"))
            .await
            .unwrap(),
        true,
        "an unchanged ban's row was replaced"
    );

    // Arrivals and departures: a longer ban comes first, pushing the last row of page 1 to
    // page 2; a lifted ban ends; seen from page 2, a row that moves up says so.
    ban(&page, &address(200), "2h").await;
    page.wait_for(&chip_shows("bans", &address(200), "new"), PATIENCE)
        .await
        .unwrap();
    page.wait_for(&chip_shows("bans", &address(105), "↓ page 2"), PATIENCE)
        .await
        .unwrap();
    page.screenshot(artefact("bans-chips.png")).await.unwrap();
    // It goes once it has said where.
    page.wait_for(
        &format!(
            "document.querySelector('{}') === null",
            row("bans", &address(105))
        ),
        PATIENCE,
    )
    .await
    .unwrap();
    lift(&page, &address(129)).await;
    page.wait_for(&chip_shows("bans", &address(129), "ended"), PATIENCE)
        .await
        .unwrap();
    page.wait_for(&chip_shows("bans", &address(105), "new"), PATIENCE)
        .await
        .unwrap();
    turn_page(&page, "bans", "next", "Page 2 of 2").await;
    page.wait_for(
        &format!(
            "document.querySelector('{}') !== null",
            row("bans", &address(104))
        ),
        PATIENCE,
    )
    .await
    .unwrap();
    lift(&page, &address(128)).await;
    page.wait_for(&chip_shows("bans", &address(104), "↑ page 1"), PATIENCE)
        .await
        .unwrap();
    turn_page(&page, "bans", "first", "Page 1 of 2").await;

    // The page size is kept for the table.
    let size_select = "document.querySelector('[data-table-pager=\"bans\"] [data-page-size]')";
    page.eval(&format!(
        "(() => {{ const s = {size_select}; s.value = '50'; s.dispatchEvent(new Event('change')); return true; }})()"
    ))
    .await
    .unwrap();
    page.wait_for(
        &format!(
            "{} === 'Page 1 of 1' && {} === 29",
            page_text("bans"),
            rows_shown("bans")
        ),
        PATIENCE,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval("localStorage.getItem('concert.portal.size.bans')")
            .await
            .unwrap(),
        "50"
    );

    // Live off: the table is not refreshed (a new ban does not show), though its times still
    // tick each second in the browser.
    ban(&page, &address(203), "2m").await;
    let left = format!("{} .js-left", row("bans", &address(203)));
    page.wait_for(
        &format!("document.querySelector('{left}') !== null"),
        PATIENCE,
    )
    .await
    .unwrap();
    let live = "document.querySelector('[data-table-pager=\"bans\"] [data-live]')";
    page.eval(&format!("{live}.click(); true")).await.unwrap();
    assert_eq!(
        page.eval("localStorage.getItem('concert.portal.live.bans')")
            .await
            .unwrap(),
        "false"
    );
    let left_before = page
        .eval(&format!("document.querySelector('{left}').textContent"))
        .await
        .unwrap();
    let quiet_from = fetched(&page, "bans").await;
    ban(&page, &address(201), "3h").await;
    tokio::time::sleep(MORE_THAN_A_ROUND).await;
    assert_eq!(
        fetched(&page, "bans").await,
        quiet_from,
        "refreshed while not live"
    );
    assert_eq!(
        page.eval(&format!(
            "document.querySelector('{}') === null",
            row("bans", &address(201))
        ))
        .await
        .unwrap(),
        true
    );
    let left_after = page
        .eval(&format!("document.querySelector('{left}').textContent"))
        .await
        .unwrap();
    assert_ne!(left_before, left_after, "the countdown stood still");

    // Both choices outlive a reload; a table that is not live still shows its rows once.
    reload(&page).await;
    page.wait_for(
        &format!(
            "{live}.checked === false && {size_select}.value === '50' && {} === 'Page 1 of 1' && {} === 31",
            page_text("bans"),
            rows_shown("bans")
        ),
        PATIENCE,
    )
    .await
    .unwrap();
    // A size the page does not offer falls back to 25.
    page.eval("localStorage.setItem('concert.portal.size.bans', '7'); true")
        .await
        .unwrap();
    reload(&page).await;
    page.wait_for(
        &format!(
            "{size_select}.value === '25' && {} === 'Page 1 of 2' && {} === 25",
            page_text("bans"),
            rows_shown("bans")
        ),
        PATIENCE,
    )
    .await
    .unwrap();
    ban(&page, &address(202), "4h").await;
    tokio::time::sleep(MORE_THAN_A_ROUND).await;
    assert_eq!(
        page.eval(&format!(
            "document.querySelector('{}') === null",
            row("bans", &address(202))
        ))
        .await
        .unwrap(),
        true,
        "a table that is not live showed a new ban"
    );
    // Live again: refreshed at once, the new ban marked.
    page.eval(&format!("{live}.click(); true")).await.unwrap();
    page.wait_for(&chip_shows("bans", &address(202), "new"), PATIENCE)
        .await
        .unwrap();
    assert_eq!(
        page.eval("localStorage.getItem('concert.portal.live.bans')")
            .await
            .unwrap(),
        "true"
    );

    // The pointer over the table pauses it, and the pager says so.
    let paused = "!document.querySelector('[data-table-pager=\"bans\"] [data-paused]').hidden";
    let (x, y) = centre_of(&page, "[data-table=\"bans\"] tbody").await;
    page.move_mouse(x, y).await.unwrap();
    page.wait_for(paused, PATIENCE).await.unwrap();
    let hovered_from = fetched(&page, "bans").await;
    tokio::time::sleep(MORE_THAN_A_ROUND).await;
    assert_eq!(
        fetched(&page, "bans").await,
        hovered_from,
        "refreshed while paused"
    );
    page.screenshot(artefact("bans-paused.png")).await.unwrap();
    page.move_mouse(5.0, 5.0).await.unwrap();
    page.wait_for(&format!("!({paused})"), PATIENCE)
        .await
        .unwrap();
    page.wait_for(
        &format!("(window.fetched.bans || 0) > {hovered_from}"),
        PATIENCE,
    )
    .await
    .unwrap();

    // Copying an address: with the clipboard API, then without it (as over plain HTTP to an
    // address other than loopback) through a selection, then with no way to copy at all.
    page.eval(
        "window.copies = []; document.addEventListener('copy', e => { const t = e.target; window.copies.push(t && t.value !== undefined ? t.value.substring(t.selectionStart, t.selectionEnd) : String(document.getSelection())); }); true",
    )
    .await
    .unwrap();
    let badge = |n: u32| format!("{} .ip-badge-v4", row("bans", &address(n)));
    let (x, y) = centre_of(&page, &badge(200)).await;
    page.click_at(x, y).await.unwrap();
    page.wait_for(&toast_says("Copied 203.0.113.200"), PATIENCE)
        .await
        .unwrap();
    page.eval(
        "Object.defineProperty(Navigator.prototype, 'clipboard', { get: () => undefined, configurable: true }); navigator.clipboard === undefined",
    )
    .await
    .unwrap();
    let (x, y) = centre_of(&page, &badge(201)).await;
    page.click_at(x, y).await.unwrap();
    page.wait_for(&toast_says("Copied 203.0.113.201"), PATIENCE)
        .await
        .unwrap();
    assert_eq!(
        page.eval("window.copies.includes('203.0.113.201')")
            .await
            .unwrap(),
        true,
        "the selection copied something else: {:?}",
        page.eval("window.copies").await
    );
    page.eval("document.execCommand = () => false; true")
        .await
        .unwrap();
    let (x, y) = centre_of(&page, &badge(202)).await;
    page.click_at(x, y).await.unwrap();
    page.wait_for(&toast_says("Could not copy 203.0.113.202"), PATIENCE)
        .await
        .unwrap();
    page.screenshot(artefact("bans-copy.png")).await.unwrap();
    assert!(page.problems().is_empty(), "{:?}", page.problems());

    // The session ends while the page is open: its next refresh is refused, and the page
    // reloads to the sign-in form.
    let signed_out = page
        .eval(
            "fetch('/logout', { method: 'POST', credentials: 'same-origin', redirect: 'manual', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'csrf=' + encodeURIComponent(document.querySelector('meta[name=\"csrf-token\"]').content) }).then(r => r.type === 'opaqueredirect' || r.ok)",
        )
        .await
        .unwrap();
    assert_eq!(signed_out, true);
    page.wait_for("document.title === 'Sign in · Concert'", PATIENCE)
        .await
        .unwrap();
    let problems: Vec<String> = page
        .problems()
        .into_iter()
        .filter(|problem| !problem.contains("status of 401"))
        .collect();
    assert!(problems.is_empty(), "{problems:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_confirmations_outlive_row_changes_and_leavers_are_marked() {
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
    // Someone holds the only slot; two visitors wait, each with its own ticket.
    let holder = hold_the_only_slot(&concert, &origin, "/busy").await;
    let join = |address: &'static str| {
        let concert_url = url(&concert, "/api/wait");
        async move {
            let visitor = cookie_client();
            let answer = visitor
                .get(concert_url)
                .header("X-Forwarded-For", address)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
            visitor
        }
    };
    let first = join("203.0.113.71").await;
    let _second = join("203.0.113.72").await;

    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.set_viewport(1280, 900, false).await.unwrap();
    sign_in(&page, &base).await;
    open_tab(&page, "queue").await;
    let key_of = |address: &str| {
        format!(
            "(() => {{ const r = Array.from(document.querySelectorAll('[data-table=\"queue\"] tbody tr[data-key]:not(.row-leaving)')).find(r => r.querySelector('.ip-text') && r.querySelector('.ip-text').textContent === {address:?}); return r ? r.dataset.key : null; }})()"
        )
    };
    let first_key = page
        .wait_for(&key_of("203.0.113.71"), PATIENCE)
        .await
        .unwrap();
    let first_key = first_key.as_str().unwrap().to_owned();
    let second_key = page
        .wait_for(&key_of("203.0.113.72"), PATIENCE)
        .await
        .unwrap();
    let second_key = second_key.as_str().unwrap().to_owned();

    // A third visitor joins while the operator watches: its row says it is new.
    let _third = join("203.0.113.73").await;
    let third_key = page
        .wait_for(&key_of("203.0.113.73"), PATIENCE)
        .await
        .unwrap();
    let third_key = third_key.as_str().unwrap().to_owned();
    page.wait_for(&chip_shows("queue", &third_key, "new"), PATIENCE)
        .await
        .unwrap();

    // Remove and ban asks for a second tap. Between the taps the visitor's page polls, so its
    // row is replaced; the question stays.
    let first_row = row("queue", &first_key);
    let kick_ban = format!("{first_row} [data-action=\"kick-ban\"]");
    page.eval(&format!("document.querySelector('{kick_ban}').click(); document.querySelector('{first_row}').before = true; true"))
        .await
        .unwrap();
    let asking = format!(
        "(() => {{ const b = document.querySelector('{kick_ban}'); return b !== null && b.classList.contains('confirming') && b.textContent === 'Remove and ban?'; }})()"
    );
    assert_eq!(page.eval(&asking).await.unwrap(), true);
    page.screenshot(artefact("queue-confirm.png"))
        .await
        .unwrap();
    let polled = first
        .get(url(&concert, "/queue/status"))
        .header("X-Forwarded-For", "203.0.113.71")
        .send()
        .await
        .unwrap();
    assert_eq!(polled.status(), reqwest::StatusCode::OK);
    page.wait_for(
        &format!(
            "(() => {{ const r = document.querySelector('{first_row}'); return r !== null && r.before !== true; }})()"
        ),
        PATIENCE,
    )
    .await
    .expect("the visitor's poll changes its row");
    assert_eq!(
        page.eval(&asking).await.unwrap(),
        true,
        "the question was lost when the row changed"
    );
    page.eval(&format!(
        "document.querySelector('{kick_ban}').click(); true"
    ))
    .await
    .unwrap();
    page.wait_for(&toast_says("Removed from the line and banned"), PATIENCE)
        .await
        .unwrap();
    page.wait_for(&chip_shows("queue", &first_key, "left the line"), PATIENCE)
        .await
        .unwrap();
    // The visitor's next request on the main listener is refused as banned, not queued.
    let refused = plain_client()
        .get(url(&concert, "/page"))
        .header("X-Forwarded-For", "203.0.113.71")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(!refused.text().await.unwrap().contains("queued"));

    // A first tap that is not followed up is forgotten after a few seconds.
    let second_row = row("queue", &second_key);
    let kick = format!("{second_row} [data-action=\"kick\"]");
    page.eval(&format!("document.querySelector('{kick}').click(); true"))
        .await
        .unwrap();
    assert_eq!(
        page.eval(&format!("document.querySelector('{kick}').textContent"))
            .await
            .unwrap(),
        "Remove?"
    );
    page.wait_for(
        &format!(
            "(() => {{ const b = document.querySelector('{kick}'); return b !== null && !b.classList.contains('confirming') && b.querySelector('.bi-person-dash') !== null; }})()"
        ),
        PATIENCE,
    )
    .await
    .unwrap();

    // A visitor removed elsewhere (here, through the API) shows it left before its row goes.
    let removed = send(
        &page,
        "POST",
        "/api/queue/kick",
        &format!("{{ id: {second_key:?}, ban: false }}"),
    )
    .await;
    assert_eq!(removed, true, "{removed}");
    page.wait_for(&chip_shows("queue", &second_key, "left the line"), PATIENCE)
        .await
        .unwrap();
    page.screenshot(artefact("queue-left.png")).await.unwrap();
    page.wait_for(
        &format!("document.querySelector('{second_row}') === null"),
        PATIENCE,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval(&format!(
            "document.querySelector('{}') !== null",
            row("queue", &third_key)
        ))
        .await
        .unwrap(),
        true
    );
    assert!(page.problems().is_empty(), "{:?}", page.problems());

    origin.release(100);
    holder.await.unwrap();
}
