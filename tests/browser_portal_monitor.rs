//! The portal's Monitor tab in a real browser: sign in, open the tab, see the health verdicts,
//! the figures, the sparklines and the latency histogram filled from the running Concert under
//! the portal's self-only content policy; it asks for figures only while it is open. Screenshots
//! go to the build's temp directory.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use browser::Browser;
use support::*;

const PASS: &str = "a portal pass for the monitor tab";

fn artefact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("portal-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// How many times the page has asked for `/api/monitor` so far.
const MONITOR_FETCHES: &str =
    "performance.getEntriesByType('resource').filter(e => e.name.endsWith('/api/monitor')).length";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_opens_the_monitor_and_sees_it_filled() {
    let origin = origins::slow_origin(Duration::from_millis(30));
    let concert = concert_with_env(
        &["-upstream", &origin.url(), "-portal-listen", "127.0.0.1:0"],
        &[("CONCERT_PORTAL_PASS", PASS)],
    )
    .await;
    let base = format!(
        "http://{}",
        concert.portal_addr.expect("the portal listens")
    );
    // Traffic for the histogram: every answer takes the origin's 30 ms and a little more.
    for i in 0..20 {
        let answer = plain_client()
            .get(url(&concert, &format!("/page{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), reqwest::StatusCode::OK);
    }

    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.set_viewport(1280, 1300, false).await.unwrap();
    page.goto(&format!("{base}/")).await.unwrap();
    page.wait_for(
        "document.title === 'Sign in · Concert'",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
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
    // Closed, the tab asks for nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(page.eval(MONITOR_FETCHES).await.unwrap(), 0);

    page.eval("document.querySelector('[data-tab=\"monitor\"]').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "!document.getElementById('tab-monitor').hidden && location.hash === '#monitor' && document.getElementById('tab-monitor').dataset.loaded === 'true'",
        Duration::from_secs(10),
    )
    .await
    .unwrap();

    // Six verdicts, all well: nothing failed, nobody waits.
    let verdicts = page
        .wait_for(
            "(() => { const items = document.querySelectorAll('#monitor-health .health-item'); return items.length === 6 && Array.from(items).map(i => (i.classList.contains('health-ok') ? 'ok ' : 'bad ') + i.dataset.health).join(', '); })()",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(
        verdicts,
        "ok Origin, ok Waiting room, ok Abuse registry, ok History log, ok Data directory, ok Open files"
    );
    let origin_detail = page
        .eval("document.querySelector('[data-health=\"Origin\"] .health-detail').textContent")
        .await
        .unwrap();
    assert!(
        origin_detail
            .as_str()
            .unwrap()
            .starts_with("0 of 20 requests failed or answered 5xx"),
        "{origin_detail}"
    );

    // The cards: figures from the process and its traffic.
    let text_of =
        |key: &str| format!("document.querySelector('[data-monitor=\"{key}\"]').textContent");
    assert_eq!(page.eval(&text_of("inflight")).await.unwrap(), "0");
    assert_eq!(page.eval(&text_of("queue")).await.unwrap(), "0");
    let memory = page.eval(&text_of("memory")).await.unwrap();
    assert!(memory.as_str().unwrap().ends_with(" MB"), "memory {memory}");
    let threads = page.eval(&text_of("threads")).await.unwrap();
    assert!(
        threads.as_str().unwrap().parse::<u64>().unwrap() >= 1,
        "threads {threads}"
    );
    let inflight_note = page.eval(&text_of("inflight_note")).await.unwrap();
    assert!(
        inflight_note.as_str().unwrap().starts_with("peak "),
        "{inflight_note}"
    );
    let p50 = page.eval(&text_of("total_p50")).await.unwrap();
    assert!(p50.as_str().unwrap().ends_with(" ms"), "p50 {p50}");

    // The histogram holds the twenty answers, all slower than the origin's 30 ms.
    let columns = page
        .eval("Array.from(document.querySelectorAll('#monitor-histogram .histogram-bar')).map(b => Number(b.dataset.count))")
        .await
        .unwrap();
    let columns: Vec<u64> = columns
        .as_array()
        .unwrap()
        .iter()
        .map(|count| count.as_u64().unwrap())
        .collect();
    assert_eq!(columns.len(), 14);
    assert_eq!(columns.iter().sum::<u64>(), 20, "{columns:?}");
    assert_eq!(
        columns[..5].iter().sum::<u64>(),
        0,
        "none under 25 ms: {columns:?}"
    );
    let drawn = page
        .eval("Array.from(document.querySelectorAll('#monitor-histogram .histogram-bar')).filter(b => parseFloat(b.style.height) > 0).length")
        .await
        .unwrap();
    assert!(drawn.as_u64().unwrap() >= 1);

    // A sparkline in each of the eight cards, drawn by the vendored chart library.
    page.wait_for(
        "document.querySelectorAll('#tab-monitor .sparkline .uplot canvas').length === 8",
        Duration::from_secs(10),
    )
    .await
    .unwrap();

    // Open, it asks again every five seconds.
    let fetched = page.eval(MONITOR_FETCHES).await.unwrap().as_u64().unwrap();
    page.wait_for(
        &format!("{MONITOR_FETCHES} > {fetched}"),
        Duration::from_secs(8),
    )
    .await
    .unwrap();
    page.screenshot(artefact("monitor-dark.png")).await.unwrap();

    page.eval("document.getElementById('theme-toggle').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.documentElement.getAttribute('data-bs-theme') === 'light'",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.screenshot(artefact("monitor-light.png"))
        .await
        .unwrap();

    // Phone width: the cards stack, the histogram scrolls inside its card, the page does not.
    page.set_viewport(390, 844, true).await.unwrap();
    page.wait_for(
        "document.documentElement.scrollWidth <= window.innerWidth + 1",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.screenshot(artefact("monitor-phone.png"))
        .await
        .unwrap();

    // Another tab: the Monitor stops asking.
    page.eval("document.querySelector('[data-tab=\"overview\"]').click(); true")
        .await
        .unwrap();
    // A request already on its way still lands.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let when_left = page.eval(MONITOR_FETCHES).await.unwrap().as_u64().unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        page.eval(MONITOR_FETCHES).await.unwrap().as_u64().unwrap(),
        when_left,
        "asked for figures while closed"
    );

    assert!(page.problems().is_empty(), "{:?}", page.problems());
}
