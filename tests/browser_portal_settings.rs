//! The Settings tab in a real browser: an operator changes the cap, the poll leaves the unsaved
//! edit alone, saving reaches the public listener, a refused value is shown beside its field,
//! and a reset brings back the flag's value. All under the portal's self-only content policy;
//! screenshots go beside the other portal views.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::path::PathBuf;
use std::time::Duration;

use browser::{Browser, Page};
use support::*;

const PASS: &str = "a portal pass for the settings tab";
const WAIT: Duration = Duration::from_secs(10);

fn artefact(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("portal-screens");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Types `text` into the input of setting `key` as a person would: the page hears an input
/// event.
async fn type_into(page: &Page, key: &str, text: &str) {
    page.eval(&format!(
        "(() => {{ const input = document.getElementById('setting-{key}'); input.value = {text:?}; input.dispatchEvent(new Event('input', {{ bubbles: true }})); return true; }})()"
    ))
    .await
    .unwrap();
}

async fn cap_seen_by_visitors(concert: &concert::Running, cap: u64) -> bool {
    for _ in 0..100 {
        if room_stats(concert).await["cap"] == cap {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_changes_the_cap_in_the_settings_tab() {
    let origin = origins::fast_origin();
    let concert = concert_with_env(
        &[
            "-upstream",
            &origin.url(),
            "-cap",
            "4",
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
    page.wait_for("document.title === 'Sign in · Concert'", WAIT)
        .await
        .unwrap();
    page.eval(&format!(
        "document.getElementById('pass').value = {PASS:?}; document.querySelector('form').submit(); true"
    ))
    .await
    .unwrap();
    // The title comes with the page's head; the tabs answer clicks once its scripts have run.
    page.wait_for(
        "document.title === 'Dashboard · Concert' && document.readyState === 'complete'",
        WAIT,
    )
    .await
    .unwrap();

    page.eval("document.querySelector('[data-tab=\"settings\"]').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "(() => { const cap = document.getElementById('setting-cap'); return !!cap && cap.value === '4'; })()",
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval("location.hash").await.unwrap(),
        "#settings",
        "the open tab is kept in the address"
    );
    // Restart-only settings are shown but cannot be edited; the fixed facts are listed.
    let restart_disabled = page
        .eval("document.getElementById('setting-listen').disabled")
        .await
        .unwrap();
    assert_eq!(restart_disabled, serde_json::Value::Bool(true));
    page.wait_for(
        "document.getElementById('settings-fixed').textContent.includes('Portal listener')",
        WAIT,
    )
    .await
    .unwrap();
    // The tab pills fade between colours; the picture waits for them to settle.
    page.wait_for("document.getAnimations().length === 0", WAIT)
        .await
        .unwrap();
    page.screenshot(artefact("settings-dark.png"))
        .await
        .unwrap();

    // A group's pill shows that group alone: here lists, a switch and restart-only rows.
    let pick = |group: &str| {
        format!(
            "Array.from(document.querySelectorAll('#settings-groups .nav-link')).find(b => b.firstChild.textContent === {group:?}).click(); true"
        )
    };
    page.eval(&pick("Portal")).await.unwrap();
    let cards = page
        .eval("Array.from(document.querySelectorAll('.settings-card')).filter(c => !c.hidden).map(c => c.dataset.group)")
        .await
        .unwrap();
    assert_eq!(cards, serde_json::json!(["Portal"]));
    page.wait_for("document.getAnimations().length === 0", WAIT)
        .await
        .unwrap();
    page.screenshot(artefact("settings-portal-group.png"))
        .await
        .unwrap();
    page.eval(&pick("All")).await.unwrap();

    // An unsaved edit: counted on the Save button, dotted on its group's pill.
    type_into(&page, "cap", "9").await;
    let label = page
        .eval("document.getElementById('settings-save-label').textContent")
        .await
        .unwrap();
    assert_eq!(label, "Save 1 change");
    let dotted = page
        .eval("Array.from(document.querySelectorAll('#settings-groups .nav-link')).filter(b => !b.querySelector('.settings-dot').hidden).map(b => b.firstChild.textContent)")
        .await
        .unwrap();
    assert_eq!(dotted, serde_json::json!(["All", "Room"]));

    // A change made elsewhere arrives with the next poll, and the edit stays as typed.
    concert
        .app
        .apply_change(serde_json::json!({"rate": 1.5}).as_object().unwrap(), &[])
        .unwrap();
    page.wait_for(
        "document.getElementById('setting-rate').value === '1.5'",
        WAIT,
    )
    .await
    .unwrap();
    assert_eq!(
        page.eval("document.getElementById('setting-cap').value")
            .await
            .unwrap(),
        "9"
    );

    // The filter narrows the cards to matching rows.
    page.eval("(() => { const f = document.getElementById('settings-filter'); f.value = 'capacity'; f.dispatchEvent(new Event('input')); return true; })()")
        .await
        .unwrap();
    let visible = page
        .eval("Array.from(document.querySelectorAll('.setting-row')).filter(r => r.offsetParent !== null).map(r => r.dataset.key)")
        .await
        .unwrap();
    assert!(
        visible.as_array().unwrap().iter().any(|key| key == "cap"),
        "{visible}"
    );
    assert!(visible.as_array().unwrap().len() < 6, "{visible}");
    page.eval("(() => { const f = document.getElementById('settings-filter'); f.value = ''; f.dispatchEvent(new Event('input')); return true; })()")
        .await
        .unwrap();

    page.eval("document.getElementById('settings-save').click(); true")
        .await
        .unwrap();
    assert!(
        cap_seen_by_visitors(&concert, 9).await,
        "the public listener's stats show the new cap"
    );
    page.wait_for(
        "document.getElementById('settings-save-label').textContent === 'Save 0 changes' && document.querySelector('[data-key=\"cap\"] .badge').textContent === 'saved'",
        WAIT,
    )
    .await
    .unwrap();
    page.screenshot(artefact("settings-saved.png"))
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
    page.screenshot(artefact("settings-light.png"))
        .await
        .unwrap();

    // Phone width: nothing overflows sideways.
    page.set_viewport(390, 844, true).await.unwrap();
    let fits = page
        .eval("document.documentElement.scrollWidth <= window.innerWidth + 1")
        .await
        .unwrap();
    assert_eq!(fits, serde_json::Value::Bool(true));
    page.screenshot(artefact("settings-phone.png"))
        .await
        .unwrap();
    page.set_viewport(1280, 900, false).await.unwrap();
    assert!(page.problems().is_empty(), "{:?}", page.problems());

    // A refused value: the server's words beside the field and in a toast; nothing applied.
    type_into(&page, "cap", "0").await;
    page.eval("document.getElementById('settings-save').click(); true")
        .await
        .unwrap();
    page.wait_for(
        "(() => { const row = document.querySelector('[data-key=\"cap\"]'); const problem = row.querySelector('.invalid-feedback'); return !problem.hidden && problem.textContent.includes('for cap') && row.querySelector('.is-invalid') !== null && document.querySelector('#toasts .text-bg-danger') !== null; })()",
        WAIT,
    )
    .await
    .unwrap();
    page.screenshot(artefact("settings-problem.png"))
        .await
        .unwrap();
    assert_eq!(room_stats(&concert).await["cap"], 9);

    // Reset drops the edit and the saved value: the flag's 4 again.
    page.eval("document.querySelector('[data-key=\"cap\"] .setting-reset').click(); true")
        .await
        .unwrap();
    assert!(cap_seen_by_visitors(&concert, 4).await);
    page.wait_for(
        "document.getElementById('setting-cap').value === '4' && document.querySelector('[data-key=\"cap\"] .badge').textContent === 'flag'",
        WAIT,
    )
    .await
    .unwrap();

    // The refused save is the browser's only complaint: its 400 answer.
    let problems: Vec<String> = page
        .problems()
        .into_iter()
        .filter(|problem| !problem.contains("status of 400"))
        .collect();
    assert!(problems.is_empty(), "{problems:?}");
}
