//! The Fast lane tab in a real browser: an operator opens it, sees the lane healthy and its
//! offer, edits the offer's amount in fastlane.json, runs a dry run (nothing written), saves,
//! and the public `/_concert/config` sells the new amount; a broken file shows its problems
//! beside the editor. All under the portal's self-only content policy, at desktop and phone
//! width; screenshots go beside the other portal views.

#[path = "support/browser.rs"]
mod browser;
#[path = "support/lane.rs"]
mod lane;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use browser::{Browser, Page};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(15);

fn artefact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("portal-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Edits `fastlane.json` in the editor as JSON: `edit` is a script body given `doc`; the page
/// hears an input event, as from typing.
async fn edit_fastlane(page: &Page, edit: &str) {
    page.eval(&format!(
        "(() => {{ const area = document.getElementById('fastlane-doc-fastlane'); const doc = JSON.parse(area.value); {edit}; area.value = JSON.stringify(doc, null, 2) + '\\n'; area.dispatchEvent(new Event('input', {{ bubbles: true }})); return true; }})()"
    ))
    .await
    .unwrap();
}

async fn click(page: &Page, id: &str) {
    page.eval(&format!("document.getElementById('{id}').click(); true"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_changes_an_offer_in_the_fast_lane_tab() {
    let origin = support::origins::fast_origin();
    // A sale of a listed item is in the journal, waiting to be handed over.
    let requirements = lane::vector_case("valid secp256k1")["requirements"].clone();
    let sale = "5a1e".repeat(16);
    let journal = lane::sale_line(&requirements, &sale, "poster-1");
    let shop = lane::start_shop(&origin.url(), None, Some(&journal)).await;
    let saved_before = std::fs::read(&shop.fastlane_path).unwrap();

    let browser = Browser::launch().await.expect("headless Chromium");
    let page = browser.new_page().await.unwrap();
    page.set_viewport(1280, 900, false).await.unwrap();
    page.goto(&format!("{}/", shop.portal)).await.unwrap();
    page.wait_for("document.title === 'Sign in · Concert'", WAIT)
        .await
        .unwrap();
    page.eval(&format!(
        "document.getElementById('pass').value = {:?}; document.querySelector('form').submit(); true",
        lane::PORTAL_PASS
    ))
    .await
    .unwrap();
    page.wait_for(
        "document.title === 'Dashboard · Concert' && document.readyState === 'complete'",
        WAIT,
    )
    .await
    .unwrap();

    page.eval("document.querySelector('[data-tab=\"fastlane\"]').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.getElementById('fastlane-file-state').dataset.state === 'saved · running' && document.getElementById('fastlane-doc-fastlane').value.includes('Five minutes')",
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(page.eval("location.hash").await.unwrap(), "#fastlane");
    // Health, capacity and the offer as the lane serves them.
    page.wait_for(
        "document.querySelectorAll('#fastlane-health .health-item').length >= 4 && document.querySelector('#fastlane-offers [data-offer=\"xrpl:1\"]') !== null && document.querySelector('[data-fastlane=\"max_in_flight\"]').textContent === '32'",
        WAIT,
    )
    .await
    .unwrap();
    let health = page
        .eval("document.getElementById('fastlane-health').textContent")
        .await
        .unwrap();
    let health = health.as_str().unwrap_or_default();
    assert!(health.contains("Receipt journal"), "{health}");
    assert!(health.contains("test mode"), "{health}");

    // The sale is listed with its button; marking it delivered is journaled.
    page.wait_for(
        &format!("document.querySelector('#fastlane-receipts [data-key=\"{sale}\"] [data-action=\"delivered\"]') !== null"),
        WAIT,
    )
    .await
    .unwrap();
    page.eval(&format!(
        "document.querySelector('#fastlane-receipts [data-key=\"{sale}\"] [data-action=\"delivered\"]').click(); true"
    ))
    .await
    .unwrap();
    page.wait_for(
        &format!("(() => {{ const row = document.querySelector('#fastlane-receipts [data-key=\"{sale}\"]'); return !!row && row.textContent.includes('delivered') && row.querySelector('[data-action]') === null; }})()"),
        WAIT,
    )
    .await
    .unwrap();
    let journal = std::fs::read_to_string(shop.data.path().join("fastlane.jsonl")).unwrap();
    assert!(
        journal
            .lines()
            .last()
            .unwrap_or_default()
            .contains("\"delivered\":true"),
        "{journal}"
    );

    // A file that breaks a rule: its problem is listed beside the editor, nothing is written.
    edit_fastlane(&page, "doc.colour = 'blue'").await;
    page.wait_for(
        "document.getElementById('fastlane-file-state').dataset.state === 'edited, not saved'",
        WAIT,
    )
    .await
    .unwrap();
    click(&page, "fastlane-dry-run").await;
    page.wait_for(
        "(() => { const box = document.getElementById('fastlane-problems'); return !box.hidden && box.textContent.includes('colour') && document.getElementById('fastlane-doc-fastlane').classList.contains('is-invalid'); })()",
        WAIT,
    )
    .await
    .unwrap();
    page.screenshot(artefact("fastlane-problem.png"))
        .await
        .unwrap();

    // A new amount: the dry run finds it valid and writes nothing.
    edit_fastlane(
        &page,
        "delete doc.colour; doc.offers[0].requirements.amount = '123456'",
    )
    .await;
    click(&page, "fastlane-dry-run").await;
    page.wait_for(
        "(() => { const verdict = document.getElementById('fastlane-verdict'); return !verdict.hidden && verdict.textContent.includes('valid') && document.getElementById('fastlane-problems').hidden; })()",
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(&shop.fastlane_path).unwrap(), saved_before);
    // A poll in between leaves the edit alone.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let still = page
        .eval("document.getElementById('fastlane-doc-fastlane').value.includes('123456')")
        .await
        .unwrap();
    assert_eq!(still, Value::Bool(true));

    click(&page, "fastlane-save").await;
    page.wait_for(
        "(() => { const verdict = document.getElementById('fastlane-verdict'); return !verdict.hidden && verdict.textContent.startsWith('Saved.'); })()",
        WAIT,
    )
    .await
    .unwrap();
    let public = lane::public_config(&shop).await;
    assert_eq!(public["offers"][0]["requirements"]["amount"], "123456");
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(&shop.fastlane_path).unwrap()).unwrap();
    assert_eq!(
        on_disk["offers"][0]["requirements"]["amount"],
        json!("123456")
    );
    page.wait_for(
        "document.getElementById('fastlane-file-state').dataset.state === 'saved · running' && document.getElementById('fastlane-offers').textContent.includes('123456')",
        WAIT,
    )
    .await
    .unwrap();
    page.wait_for("document.getAnimations().length === 0", WAIT)
        .await
        .unwrap();
    page.screenshot(artefact("fastlane-dark.png"))
        .await
        .unwrap();

    page.eval("document.getElementById('theme-toggle').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "document.documentElement.getAttribute('data-bs-theme') === 'light' && document.getAnimations().length === 0",
        WAIT,
    )
    .await
    .unwrap();
    page.screenshot(artefact("fastlane-light.png"))
        .await
        .unwrap();

    // Phone width: nothing overflows sideways.
    page.set_viewport(390, 844, true).await.unwrap();
    let fits = page
        .eval("document.documentElement.scrollWidth <= window.innerWidth + 1")
        .await
        .unwrap();
    assert_eq!(fits, Value::Bool(true));
    page.screenshot(artefact("fastlane-phone.png"))
        .await
        .unwrap();

    // The dry run's 400 is the browser's only complaint: no policy violation, no script error.
    let problems: Vec<String> = page
        .problems()
        .into_iter()
        .filter(|problem| !problem.contains("status of 400"))
        .collect();
    assert!(problems.is_empty(), "{problems:?}");
    let _ = shop.concert.shutdown().await;
    drop(origin);
}
