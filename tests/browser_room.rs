//! A real browser in front of the real server: it lands in the waiting room, sees its position,
//! and is let in automatically when the slot frees.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::time::Duration;

use browser::Browser;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_waits_in_line_and_is_let_in_when_a_slot_frees() {
    let origin = origins::held_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "1"]).await;
    // Someone else holds the only slot.
    let holder_url = url(&concert, "/busy");
    let holder = tokio::spawn(async move {
        let _ = plain_client().get(holder_url).send().await;
    });
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);

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
    page.wait_for(
        "document.body && document.body.innerText.trim() === 'ok'",
        Duration::from_secs(20),
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "not let in: {e}; origin paths {:?}; stats {}",
            origin.paths(),
            concert::ops::stats_json(&concert.app)
        )
    });
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
