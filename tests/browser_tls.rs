//! A real browser over Concert's own HTTPS: headless Chromium, told to accept the test
//! certificate (by its key's hash, for this browser only, in a fresh profile), waits in line on
//! the waiting page, is let in, and holds only `Secure` cookies, as its own cookie list shows.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::time::Duration;

use browser::Browser;
use support::origins;
use support::tls::{TestCa, https_get};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_page_over_https_gets_secure_cookies() {
    let origin = origins::held_origin();
    let ca = TestCa::new();
    let leaf = ca.leaf(&["127.0.0.1"]);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = leaf.write(dir.path(), "site", &[&ca.pem]);
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-cap",
        "1",
        "-tls-cert",
        cert.to_str().unwrap(),
        "-tls-key",
        key.to_str().unwrap(),
        "-hsts",
        "5m",
    ])
    .await;
    let addr = concert.addr;
    let holder = {
        let ca = ca.der.clone();
        tokio::spawn(async move { https_get(addr, "127.0.0.1", &[&ca], "/busy", &[]).await })
    };
    assert!(eventually(Duration::from_secs(5), || origin.in_flight() == 1).await);

    let browser = Browser::launch_with(&[format!(
        "--ignore-certificate-errors-spki-list={}",
        leaf.spki_pin
    )])
    .await
    .expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    let shop = format!("https://127.0.0.1:{}/shop?item=7", addr.port());
    page.goto(&shop).await.unwrap();
    let position = page
        .wait_for(
            "document.getElementById('position') && document.getElementById('position').textContent.trim()",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(position, "001", "the waiting page, over HTTPS");
    assert_eq!(page.eval("location.protocol").await.unwrap(), "https:");
    let cookies = page.cookies().await.unwrap();
    for name in ["room_ticket", "room_probe"] {
        let cookie = cookies
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name} set: {cookies:?}"));
        assert!(cookie.secure, "{name} is Secure: {cookie:?}");
    }

    // Let in: the page reloads into the origin's answer and holds a Secure admission pass.
    origin.release(10);
    holder.await.unwrap().unwrap();
    page.wait_for(
        "document.body && document.body.innerText.trim() === 'ok'",
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    let cookies = page.cookies().await.unwrap();
    let pass = cookies
        .iter()
        .find(|c| c.name == "concert_admit")
        .unwrap_or_else(|| panic!("a pass: {cookies:?}"));
    assert!(pass.secure && pass.http_only, "{pass:?}");
    assert!(
        cookies.iter().all(|c| c.secure),
        "every cookie is Secure: {cookies:?}"
    );
    assert!(page.problems().is_empty(), "{:?}", page.problems());
}
