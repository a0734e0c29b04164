//! The Monitor's Cluster card in a real browser: two in-process instances share a real
//! redis-server; signed in to one's portal, the card shows mode shared and both instances with
//! their share of the cap and of the line, under the portal's self-only content policy. Screenshots at desktop
//! and phone width go to the build's temp directory.

#[path = "support/browser.rs"]
mod browser;
#[path = "support/redis.rs"]
mod redis_server;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use browser::Browser;
use redis_server::RedisServer;
use support::*;

const PASS: &str = "a portal pass for the cluster card";

fn artefact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("portal-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

async fn instance(upstream: &str, redis: &str) -> concert::Running {
    concert_with_env(
        &[
            "-upstream",
            upstream,
            "-portal-listen",
            "127.0.0.1:0",
            "-cap",
            "8",
            "-cluster",
            redis,
            "-cluster-name",
            "browsercard",
        ],
        &[("CONCERT_PORTAL_PASS", PASS)],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_both_instances_on_the_cluster_card() {
    let redis = RedisServer::start();
    let origin = origins::fast_origin();
    let a = instance(&origin.url(), &redis.url()).await;
    let b = instance(&origin.url(), &redis.url()).await;
    let a_id = a.app.cluster.as_ref().unwrap().id.clone();
    let b_id = b.app.cluster.as_ref().unwrap().id.clone();
    let base = format!("http://{}", a.portal_addr.expect("the portal listens"));
    // B's share of the shared line as the line script keeps it (two visitors joined there).
    redis::cmd("HSET")
        .arg("concert:{browsercard}:joined_at")
        .arg(&b_id)
        .arg(2)
        .query::<()>(&mut redis.connection())
        .unwrap();

    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.set_viewport(1280, 1000, false).await.unwrap();
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
    // The page's scripts have hooked up the tabs before one is clicked.
    page.wait_for(
        "document.readyState === 'complete' && !!window.ConcertPortal",
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    page.eval("document.querySelector('[data-tab=\"monitor\"]').click(); true")
        .await
        .unwrap();

    // The card fills from /api/cluster with the Monitor's polling: both instances, sharing.
    let card = "document.getElementById('monitor-cluster')";
    page.wait_for(
        &format!(
            "{card}.dataset.loaded === 'true' && {card}.querySelectorAll('tbody tr[data-instance]').length === 2 && {card}.dataset.mode === 'shared'"
        ),
        Duration::from_secs(20),
    )
    .await
    .unwrap_or_else(|problem| {
        panic!("{problem}; page problems: {:?}", page.problems());
    });
    let badge = page
        .eval(&format!(
            "{card}.querySelector('[data-cluster=\"mode\"]').textContent"
        ))
        .await
        .unwrap();
    assert_eq!(badge, "shared");
    let rows = page
        .eval(&format!(
            "Array.from({card}.querySelectorAll('tbody tr[data-instance]')).map(r => [r.dataset.instance, r.dataset.this === 'true', r.querySelector('[data-col=\"address\"]').textContent, r.querySelector('[data-col=\"share\"]').textContent, r.querySelector('[data-col=\"waiting\"]').textContent])"
        ))
        .await
        .unwrap();
    let rows = rows.as_array().unwrap();
    let row_of = |id: &str| {
        rows.iter()
            .find(|row| row[0] == id)
            .unwrap_or_else(|| panic!("{id} not on the card: {rows:?}"))
    };
    assert_eq!(row_of(&a_id)[1], true, "this instance is marked");
    assert_eq!(row_of(&b_id)[1], false);
    assert_eq!(row_of(&a_id)[2], a.addr.to_string());
    assert_eq!(row_of(&b_id)[2], b.addr.to_string());
    assert_eq!(row_of(&a_id)[4], "0", "nobody joined through A");
    assert_eq!(row_of(&b_id)[4], "2", "B's share of the line");
    for row in rows {
        let share = row[3].as_str().unwrap();
        assert!(share.ends_with(" %"), "share of the cap: {share}");
    }
    let instances = page
        .eval(&format!(
            "{card}.querySelector('[data-cluster=\"instances\"]').textContent"
        ))
        .await
        .unwrap();
    assert_eq!(instances, "2");
    let latency = page
        .eval(&format!(
            "{card}.querySelector('[data-cluster=\"latency\"]').textContent"
        ))
        .await
        .unwrap();
    assert!(latency.as_str().unwrap().ends_with(" ms"), "{latency}");

    page.eval(&format!("{card}.scrollIntoView(); true"))
        .await
        .unwrap();
    page.screenshot(artefact("cluster-dark.png")).await.unwrap();
    page.eval("document.getElementById('theme-toggle').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.documentElement.getAttribute('data-bs-theme') === 'light'",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.eval(&format!("{card}.scrollIntoView(); true"))
        .await
        .unwrap();
    page.screenshot(artefact("cluster-light.png"))
        .await
        .unwrap();

    // Phone width: the table scrolls inside its card, the page does not.
    page.set_viewport(390, 844, true).await.unwrap();
    page.wait_for(
        "document.documentElement.scrollWidth <= window.innerWidth + 1",
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    // Scrolled so the card starts just under the sticky bar.
    let scroll = format!(
        "window.scrollTo(0, {card}.getBoundingClientRect().top + window.scrollY - 70); true"
    );
    page.eval(&scroll).await.unwrap();
    page.wait_for(
        &format!("Math.abs({card}.getBoundingClientRect().top - 70) < 4"),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    page.screenshot(artefact("cluster-phone.png"))
        .await
        .unwrap();

    assert!(page.problems().is_empty(), "{:?}", page.problems());
}
