//! A real browser in front of the real server: it lands in the waiting room, sees its position,
//! and is let in automatically when the slot frees.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::time::Duration;

use browser::Browser;
use support::*;

/// Waits (bounded) until the page has reloaded into the origin's answer, `ok`.
async fn page_shows_the_origin(
    page: &browser::Page,
    concert: &concert::Running,
    origin: &origins::Origin,
) {
    page.wait_for(
        "document.body && document.body.innerText.trim() === 'ok'",
        Duration::from_secs(20),
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "not let in: {e}; origin paths {:?}; stats {}",
            origin.paths(),
            concert::endpoints::figures::stats_json(&concert.app)
        )
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_waits_in_line_and_is_let_in_when_a_slot_frees() {
    let origin = origins::held_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "1"]).await;
    // Someone else holds the only slot.
    let holder = hold_the_only_slot(&concert, &origin, "/busy").await;

    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.goto(&url(&concert, "/shop?item=7")).await.unwrap();
    let position = page
        .wait_for(
            "document.getElementById('position') && document.getElementById('position').textContent.trim()",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(position, "001", "the page shows its place in line");
    let cookies = page.cookies().await.unwrap();
    let ticket = cookies
        .iter()
        .find(|c| c.name == "room_ticket")
        .expect("room_ticket set");
    assert!(ticket.http_only, "the ticket is not readable by script");
    assert!(cookies.iter().any(|c| c.name == "room_probe"));
    assert!(
        !origin.paths().iter().any(|p| p.starts_with("/shop")),
        "the page request has not reached the origin yet"
    );

    // The holder finishes; the page's next poll finds it ready, reloads, and gets the origin's page.
    // Permits for the holder, the admitted page and the browser's bypassed /favicon.ico.
    origin.release(10);
    holder.await.unwrap();
    page_shows_the_origin(&page, &concert, &origin).await;
    let paths = origin.paths();
    assert_eq!(
        paths
            .iter()
            .filter(|p| p.as_str() == "/shop?item=7")
            .count(),
        1,
        "the page reached the origin exactly once: {paths:?}"
    );
    assert!(page.problems().is_empty(), "{:?}", page.problems());
    assert_eq!(concert.app.room.stats().live_queue_depth, 0);
}

/// A visitor who leaves the waiting page before their turn does not hold the line up: once the
/// ready grace passes the next visitor goes in, and when the browser comes back to the page it is
/// first in line and let in automatically at the next free slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_that_left_before_its_turn_is_passed_and_then_rejoins_at_the_front() {
    let origin = origins::held_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "1",
        "-ready-grace",
        "10s",
        "-retry-after",
        "1",
        "-reaper",
        "5s",
    ])
    .await;
    let holder = hold_the_only_slot(&concert, &origin, "/busy").await;

    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    let shop = url(&concert, "/shop");
    let position_js = "document.getElementById('position') && document.getElementById('position').textContent.trim()";
    page.goto(&shop).await.unwrap();
    let position = page.wait_for(position_js, Duration::from_secs(10)).await;
    assert_eq!(position.unwrap(), "001");
    // A second visitor, behind the browser.
    let behind = cookie_client();
    let queued = behind
        .get(url(&concert, "/page"))
        .header(reqwest::header::ACCEPT, HTML_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), reqwest::StatusCode::OK);

    // The browser leaves; its turn comes while it is away.
    page.goto("about:blank").await.unwrap();
    origin.release(1);
    holder.await.unwrap();
    let mut ready = false;
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        let status = json_of(behind.get(url(&concert, "/queue/status"))).await;
        if status["ready"] == true {
            ready = true;
            break;
        }
    }
    assert!(
        ready,
        "the visitor behind was kept waiting for one who left"
    );
    let entering = tokio::spawn({
        let request = behind.get(url(&concert, "/page"));
        async move { request.send().await }
    });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);

    // Back on the page: first in line, and in as soon as the slot frees.
    page.goto(&shop).await.unwrap();
    let position = page.wait_for(position_js, Duration::from_secs(10)).await;
    assert_eq!(position.unwrap(), "001");
    origin.release(10);
    assert_eq!(entering.await.unwrap().unwrap().text().await.unwrap(), "ok");
    page_shows_the_origin(&page, &concert, &origin).await;
    let stats = concert.app.room.stats();
    assert_eq!((stats.lapsed_total, stats.rejoined_total), (1, 1));
    assert_eq!(stats.live_queue_depth, 0);
    assert!(page.problems().is_empty(), "{:?}", page.problems());
}
