//! The Fast lane tab's API: the lane's health, capacity and receipts; its two files to edit,
//! checked (dry run) or saved and swapped in through [`crate::lifecycle::save_files`]; and
//! sales marked as delivered in the receipt journal.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use http::{HeaderValue, Response, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Portal, peer_of, read_body, respond};
use crate::app::App;
use crate::fastlane::live::LaneFiles;
use crate::fastlane::service::clock;
use crate::fastlane::service::journal::{Receipt, ReceiptState};
use crate::fastlane::service::{FastLane, MAX_SETTLING};
use crate::fastlane::settings::{
    example_fastlane, example_networks, parse_fastlane, parse_networks,
};
use crate::lifecycle::{LaneDocuments, SaveError, save_files};

/// Receipts listed, newest first.
const RECEIPTS_LISTED: usize = 50;
/// Sales listed, newest first.
const SALES_LISTED: usize = 50;
/// `Retry-After` when the lane's settlements did not drain in time for a save.
const SETTLING_RETRY_SECONDS: u32 = 10;

/// Unix milliseconds for the browser, or null for "never".
fn millis(unix_seconds: u64) -> Value {
    if unix_seconds == 0 {
        Value::Null
    } else {
        Value::from(unix_seconds.saturating_mul(1000))
    }
}

fn receipt_view(receipt: &Receipt, now: u64) -> Value {
    json!({
        "fingerprint": receipt.fingerprint,
        "kind": receipt.kind.as_str(),
        "state": receipt.state.as_str(),
        "network": receipt.network,
        "payer": receipt.payer,
        "amount": receipt.requirements.amount,
        "asset": receipt.requirements.asset,
        "pay_to": receipt.requirements.pay_to,
        "transaction": receipt.transaction,
        "started": millis(receipt.started),
        "settled": millis(receipt.settled),
        "expires": millis(receipt.expires),
        "live": receipt.is_live(now),
        "sale": receipt.is_sale(),
        "listing": receipt.listing,
        "delivered": receipt.delivered,
    })
}

/// What the tab shows of a running lane.
fn lane_view(app: &App, lane: &FastLane) -> Value {
    let now = clock::now_unix();
    let journal = lane.journal();
    let states: serde_json::Map<String, Value> = journal
        .counts()
        .iter()
        .map(|(state, count)| (state.as_str().to_owned(), Value::from(*count)))
        .collect();
    let (receipts, total) = journal.latest(RECEIPTS_LISTED);
    let (sales, sales_total) = journal.latest_where(SALES_LISTED, Receipt::is_sale);
    let (in_flight, max_in_flight) = lane.in_flight();
    let gateway_healthy = app
        .fastlane
        .with_running(|running| running.is_some_and(|running| running.gateway.is_healthy()));
    let settings = lane.settings();
    let offers: Vec<Value> = settings
        .offers
        .iter()
        .map(|offer| {
            let terms = &offer.requirements;
            json!({
                "label": offer.label,
                "scheme": terms.scheme,
                "network": terms.network,
                "amount": terms.amount,
                "asset": terms.asset,
                "pay_to": terms.pay_to,
                "deposit_only": offer.deposit_only,
            })
        })
        .collect();
    json!({
        "enabled": true,
        "healthy": journal.is_healthy() && gateway_healthy,
        "journal_healthy": journal.is_healthy(),
        "gateway_healthy": gateway_healthy,
        "journal": journal.path().display().to_string(),
        "test_mode": settings.test_mode,
        "screening": !lane.test_mode_unscreened(),
        "reloading": app.fastlane.is_reloading(),
        "states": states,
        "capacity": {
            "in_flight": in_flight,
            "max_in_flight": max_in_flight,
            "settling": lane.settling(),
            "max_settling": MAX_SETTLING,
        },
        "receipts": receipts.iter().map(|r| receipt_view(r, now)).collect::<Vec<_>>(),
        "receipts_total": total,
        "sales": sales.iter().map(|r| receipt_view(r, now)).collect::<Vec<_>>(),
        "sales_total": sales_total,
        "config": {
            "origin": settings.origin,
            "merchant": settings.merchant,
            "pass_seconds": settings.pass_seconds,
            "policy_url": settings.policy_url,
            "offers": offers,
        },
    })
}

/// `GET /api/fastlane`: the running lane, or `{enabled:false}`.
pub(super) async fn show(State(portal): State<Arc<Portal>>) -> Response<Body> {
    let view = match portal.app.fast_lane() {
        Some(lane) => lane_view(&portal.app, &lane),
        None => json!({ "enabled": false }),
    };
    respond::json(StatusCode::OK, &view)
}

/// A file's text, or `None` when it does not exist (or cannot be read: said in `problem`).
fn read_text(path: &std::path::Path, problem: &mut Vec<String>) -> Option<String> {
    match std::fs::read(path) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            problem.push(format!("{}: {e}", path.display()));
            None
        }
    }
}

/// Whether the files on disk say what the running lane was built from (a lane that is off
/// matches files that switch it off, or no file at all).
fn in_sync(app: &App, files: &LaneFiles, fastlane: Option<&str>, networks: Option<&str>) -> bool {
    let on_disk = fastlane.map(|text| parse_fastlane(&files.fastlane, text.as_bytes()));
    let networks_on_disk = networks.map(|text| parse_networks(&files.networks, text.as_bytes()));
    app.fastlane.with_running(|running| match (running, on_disk) {
        (Some(running), Some(Ok(settings))) => {
            settings == running.fastlane
                && matches!(networks_on_disk, Some(Ok(networks)) if networks == running.networks)
        }
        (Some(_), _) => false,
        (None, None) => true,
        (None, Some(Ok(settings))) => !settings.enabled,
        (None, Some(Err(_))) => false,
    })
}

/// `GET /api/fastlane/config`: both files as text (the examples when a file does not exist
/// yet), their paths, and whether they are saved, running and writable here.
pub(super) async fn config(State(portal): State<Arc<Portal>>) -> Response<Body> {
    let app = &portal.app;
    let Some(files) = app.fastlane.files() else {
        return respond::json(
            StatusCode::OK,
            &json!({
                "fastlane": example_fastlane(),
                "networks": example_networks(),
                "fastlane_path": "",
                "networks_path": "",
                "saved": false,
                "running": false,
                "in_sync": false,
                "writable": false,
                "reloading": false,
                "problems": ["no data directory: the fast lane needs -data-dir for its journals"],
            }),
        );
    };
    let mut problems = Vec::new();
    let fastlane = read_text(&files.fastlane, &mut problems);
    let networks = read_text(&files.networks, &mut problems);
    let synced = in_sync(app, &files, fastlane.as_deref(), networks.as_deref());
    let view = json!({
        "saved": fastlane.is_some() && networks.is_some(),
        "running": app.fast_lane().is_some(),
        "in_sync": synced,
        "writable": files.writable,
        "reloading": app.fastlane.is_reloading(),
        "fastlane": fastlane.unwrap_or_else(|| example_fastlane().to_owned()),
        "networks": networks.unwrap_or_else(|| example_networks().to_owned()),
        "fastlane_path": files.fastlane.display().to_string(),
        "networks_path": files.networks.display().to_string(),
        "problems": problems,
    });
    respond::json(StatusCode::OK, &view)
}

/// `POST /api/fastlane/config`: each document as its text (kept as typed) or as a JSON value.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveRequest {
    fastlane: Value,
    networks: Value,
    #[serde(default)]
    dry_run: bool,
}

/// The bytes a document is checked and saved as: text as typed, a JSON value pretty-printed.
fn document_bytes(document: &Value) -> Vec<u8> {
    match document {
        Value::String(text) => text.clone().into_bytes(),
        other => {
            let mut bytes = serde_json::to_vec_pretty(other).unwrap_or_default();
            bytes.push(b'\n');
            bytes
        }
    }
}

fn save_refused(error: &SaveError) -> Response<Body> {
    let message = error.to_string();
    match error {
        SaveError::Invalid(problems) => respond::json(
            StatusCode::BAD_REQUEST,
            &json!({ "ok": false, "error": message, "problems": problems }),
        ),
        SaveError::NotWritable | SaveError::Busy => respond::error(StatusCode::CONFLICT, &message),
        SaveError::StillSettling => {
            let mut response = respond::error(StatusCode::SERVICE_UNAVAILABLE, &message);
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(SETTLING_RETRY_SECONDS),
            );
            response
        }
        SaveError::NotSaved(_) => respond::error(StatusCode::INTERNAL_SERVER_ERROR, &message),
        SaveError::NotBuilt { restored, .. } => respond::json(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({ "ok": false, "error": message, "restored": restored }),
        ),
    }
}

/// `POST /api/fastlane/config {fastlane, networks, dry_run}`: checks both documents (dry run),
/// or saves them and swaps the lane; every problem is listed, and nothing changes on any.
pub(super) async fn save(State(portal): State<Arc<Portal>>, request: Request) -> Response<Body> {
    let peer = peer_of(&request);
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let Ok(wanted) = crate::store::json_object::<SaveRequest>(&body) else {
        return respond::error(
            StatusCode::BAD_REQUEST,
            "send a JSON object {\"fastlane\", \"networks\", \"dry_run\"}",
        );
    };
    let fastlane = document_bytes(&wanted.fastlane);
    let networks = document_bytes(&wanted.networks);
    let outcome = save_files(
        &portal.app,
        LaneDocuments {
            fastlane: &fastlane,
            networks: &networks,
            dry_run: wanted.dry_run,
        },
    )
    .await;
    match outcome {
        Ok(saved) => {
            if !saved.dry_run {
                tracing::info!(
                    "portal: {peer} saved the fast lane files ({} offers, lane {})",
                    saved.offers,
                    if saved.running { "running" } else { "off" }
                );
            }
            respond::json(
                StatusCode::OK,
                &json!({
                    "ok": true,
                    "problems": [],
                    "dry_run": saved.dry_run,
                    "running": saved.running,
                    "offers": saved.offers,
                    "pay_to_changes": saved.pay_to_changes,
                }),
            )
        }
        Err(error) => {
            if !matches!(error, SaveError::Invalid(_)) {
                tracing::warn!("portal: {peer} could not save the fast lane files: {error}");
            }
            save_refused(&error)
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveredRequest {
    fingerprint: String,
}

/// `POST /api/fastlane/sales/delivered {fingerprint}`: records in the journal that a settled
/// sale was handed over; marking it again changes nothing.
pub(super) async fn delivered(
    State(portal): State<Arc<Portal>>,
    request: Request,
) -> Response<Body> {
    let peer = peer_of(&request);
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let Ok(wanted) = crate::store::json_object::<DeliveredRequest>(&body) else {
        return respond::error(StatusCode::BAD_REQUEST, "fingerprint is required");
    };
    let Some(lane) = portal.app.fast_lane() else {
        return respond::error(StatusCode::CONFLICT, "the fast lane is off");
    };
    let Some(receipt) = lane.journal().get(wanted.fingerprint.trim()) else {
        return respond::error(StatusCode::NOT_FOUND, "no receipt has that fingerprint");
    };
    if !receipt.is_sale() {
        return respond::error(
            StatusCode::CONFLICT,
            "that receipt is a pass, not a sale: there is nothing to deliver",
        );
    }
    if receipt.state != ReceiptState::Settled {
        return respond::error(
            StatusCode::CONFLICT,
            "only a settled sale can be marked delivered",
        );
    }
    let now = clock::now_unix();
    if receipt.delivered {
        return respond::json(
            StatusCode::OK,
            &json!({ "delivered": receipt_view(&receipt, now) }),
        );
    }
    let mut marked = receipt;
    marked.delivered = true;
    let written = {
        let lane = lane.clone();
        let marked = marked.clone();
        // The journal fsyncs each line: off the async workers.
        tokio::task::spawn_blocking(move || lane.journal().record(marked)).await
    };
    match written {
        Ok(Ok(())) => {
            tracing::info!(
                "portal: {peer} marked sale {} delivered",
                marked.fingerprint
            );
            respond::json(
                StatusCode::OK,
                &json!({ "delivered": receipt_view(&marked, now) }),
            )
        }
        Ok(Err(error)) => respond::error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("the journal did not take it: {error}"),
        ),
        Err(_) => respond::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the journal write stopped",
        ),
    }
}
