//! Deposits, listings, the shop and the market: `POST /deposit` derives a session's payment
//! intent (amount with dust, XRPL tag or memo), `POST /deposit/check` asks the gateway for the
//! transfers that pay it and records each once as a settled receipt, `GET /shop` lists what is
//! for sale and `GET /market` the XRPL sell offers of a collection.
//!
//! An intent is computed, not stored: every value comes from a MAC over the session, so the
//! same session sees the same instructions after a restart. Only the reservations that keep
//! amounts and tags apart among sessions waiting at the same time live in memory; after a
//! restart the first derivation is free again, which is the one the session was shown.
//!
//! What was paid is decided by the journal alone: a transfer's fingerprint is
//! SHA-256(`deposit/<network>/<tx>`), so it is credited once, to one session, across restarts.
//! Which payment bought a listing is read back from the journal at start.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use parking_lot::Mutex;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::FastLane;
use super::journal::{Journal, Receipt, ReceiptKind, ReceiptState, RecordError};
use super::policy::{Action, Screening};
use super::routes::{error, json, receipt_answer, with_retry_after};
use super::session::Session;
use crate::fastlane::facilitator::{DepositHit, DepositQuery, DepositReference, GatewayError};
use crate::fastlane::gateway::takes_deposits;
use crate::fastlane::settings::{Listing, Offer};
use crate::fastlane::x402::{PaymentRequirements, SettleResponse};

/// How far back a check looks for the session's transfer: long enough for a payment sent
/// before the visitor came back to the page.
pub(super) const LOOKBACK_SECONDS: u64 = 2 * 3600;
/// One chain lookup per session in this many seconds; the page polls no faster.
pub(super) const CHECK_GAP_SECONDS: u64 = 4;
/// How long the market of a collection is served from memory.
pub(super) const MARKET_TTL: Duration = Duration::from_secs(60);
/// How long the gateway may take to answer a check or a market question.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(45);
/// Amounts and tags reserved at once (each session holds one amount and one tag per intent).
const MAX_RESERVATIONS: usize = 100_000;
/// Sessions whose last check time is remembered.
const MAX_CHECK_TIMES: usize = 100_000;
/// Derivations tried for a free amount, and for a free XRPL tag.
const AMOUNT_TRIES: u32 = 256;
const TAG_TRIES: u32 = 64;
/// Width of the QR code picture.
const QR_PIXELS: usize = 320;
/// The header a late payer of a sold listing gets with its (still valid) pass.
pub(super) const LISTING_CONFLICT_HEADER: &str = "concert-listing-conflict";

/// Per-session check pacing, amount and tag reservations, listing sales and the market cache.
#[derive(Debug, Default)]
pub(super) struct DepositState {
    /// `amount/<network>/<amount>` and `tag/<network>/<tag>` → (session, until).
    reserved: Mutex<HashMap<String, (String, u64)>>,
    /// Session → unix second of its last chain lookup.
    checked: Mutex<HashMap<String, u64>>,
    /// Listing id → fingerprint of the payment that bought it.
    sold: Mutex<HashMap<String, String>>,
    /// Collection rule → (when fetched, answer body).
    market: Mutex<HashMap<String, (Instant, String)>>,
}

impl DepositState {
    /// The state of a lane whose journal is `journal`: the listings it records as sold.
    pub(super) fn from_journal(journal: &Journal) -> DepositState {
        let (sales, _) = journal.latest_where(usize::MAX, |receipt| {
            receipt.kind == ReceiptKind::NftSale
                && receipt.state == ReceiptState::Settled
                && !receipt.listing.is_empty()
        });
        let mut sold = HashMap::new();
        // Oldest first, so the first sale of a listing wins should an old file hold two.
        for sale in sales.into_iter().rev() {
            sold.entry(sale.listing).or_insert(sale.fingerprint);
        }
        DepositState {
            sold: Mutex::new(sold),
            ..DepositState::default()
        }
    }
}

/// What one session must send: its amount and the reference that also names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Intent {
    pub amount: u64,
    /// XRPL destination tag; 0 elsewhere.
    pub tag: u32,
    /// Memo text on the other chains; empty on XRPL.
    pub memo: String,
}

/// A deposit request with the offer that takes it, the price and the listing it names.
struct Resolved<'a> {
    request: DepositRequest,
    offer: &'a Offer,
    price: u64,
    listing: Option<&'a Listing>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DepositRequest {
    network: String,
    #[serde(default)]
    listing: String,
}

/// Digits after the point of each chain's native unit.
fn decimals(network: &str) -> usize {
    match network.split(':').next().unwrap_or_default() {
        "xrpl" => 6,
        "stellar" => 7,
        "hedera" => 8,
        "solana" => 9,
        _ => 0,
    }
}

/// Atomic units as a decimal of the chain's unit: `5000000` drops → `5.000000`.
pub(super) fn shown(network: &str, atomic: u64) -> String {
    let places = decimals(network);
    let digits = format!("{atomic:0>width$}", width = places + 1);
    if places == 0 {
        return digits;
    }
    let (whole, fraction) = digits.split_at(digits.len() - places);
    format!("{whole}.{fraction}")
}

/// What the QR code holds: the address, or for Solana a payment request wallets read.
fn qr_content(network: &str, pay_to: &str, intent: &Intent) -> String {
    if network.starts_with("solana:") {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("amount", &shown(network, intent.amount))
            .append_pair("memo", &intent.memo)
            .finish();
        return format!("solana:{pay_to}?{query}");
    }
    pay_to.to_owned()
}

/// `content` as a QR code in a grey PNG, as a data URI.
pub(super) fn qr_data_uri(content: &str) -> Option<String> {
    let code =
        qrcode::QrCode::with_error_correction_level(content.as_bytes(), qrcode::EcLevel::M).ok()?;
    let modules = code.width();
    let colors = code.to_colors();
    // Four light modules of quiet zone on each side, as readers expect.
    let side = modules + 8;
    let scale = (QR_PIXELS / side).max(1);
    let pixels = side * scale;
    let mut image = vec![255u8; pixels * pixels];
    for (index, color) in colors.iter().enumerate() {
        if *color != qrcode::Color::Dark {
            continue;
        }
        let (x, y) = (index % modules + 4, index / modules + 4);
        for row in y * scale..(y + 1) * scale {
            let start = row * pixels + x * scale;
            if let Some(span) = image.get_mut(start..start + scale) {
                span.fill(0);
            }
        }
    }
    let mut png = Vec::new();
    {
        let side_u32 = u32::try_from(pixels).ok()?;
        let mut encoder = png::Encoder::new(&mut png, side_u32, side_u32);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().ok()?;
        writer.write_image_data(&image).ok()?;
        writer.finish().ok()?;
    }
    Some(format!("data:image/png;base64,{}", STANDARD.encode(png)))
}

/// The fingerprint of a transfer as a deposit: one per network and transaction.
pub(super) fn deposit_fingerprint(network: &str, transaction: &str) -> String {
    hex::encode(Sha256::digest(format!("deposit/{network}/{transaction}")))
}

/// A listing's price: its own, or the deposit offer's when it names none.
fn listing_price(listing: &Listing, offer: &Offer) -> Option<u64> {
    let text = if listing.price.is_empty() {
        &offer.requirements.amount
    } else {
        &listing.price
    };
    text.parse().ok()
}

impl FastLane {
    /// The first offer on `network` that takes deposits.
    fn deposit_offer(&self, network: &str) -> Option<&Offer> {
        self.settings
            .offers
            .iter()
            .find(|offer| offer.requirements.network == network && takes_deposits(offer))
    }

    /// `derive(p)`: the first four bytes, big-endian, of `mac("deposit/" + p.join("/"))`.
    fn derive(&self, parts: &[&str]) -> u32 {
        let text = format!("deposit/{}", parts.join("/"));
        let mac = self.keys.mac_raw(&[text.as_bytes()]);
        u32::from_be_bytes([mac[0], mac[1], mac[2], mac[3]])
    }

    /// The session's intent for `price` on `network` (for `listing`, or none), reserving its
    /// amount and tag until `until` against other sessions. None when every derivation is
    /// taken or the reservation table is full.
    pub(super) fn intent(
        &self,
        network: &str,
        session: &str,
        listing: &str,
        price: u64,
        now: u64,
        until: u64,
    ) -> Option<Intent> {
        let dust_range = u64::from(
            u32::try_from(price / 20)
                .unwrap_or(u32::MAX)
                .clamp(99, 9999),
        );
        let mut reserved = self.deposits.reserved.lock();
        if reserved.len() >= MAX_RESERVATIONS {
            reserved.retain(|_, (_, ends)| *ends > now);
            if reserved.len() >= MAX_RESERVATIONS {
                return None;
            }
        }
        let free = |reserved: &HashMap<String, (String, u64)>, key: &str| match reserved.get(key) {
            Some((holder, ends)) => holder == session || *ends <= now,
            None => true,
        };
        let mut amount = None;
        for i in 0..AMOUNT_TRIES {
            let index = i.to_string();
            let dust = u64::from(self.derive(&[network, session, listing, "dust", &index]))
                % dust_range
                + 1;
            let candidate = price.checked_add(dust)?;
            let key = format!("amount/{network}/{candidate}");
            if free(&reserved, &key) {
                reserved.insert(key, (session.to_owned(), until));
                amount = Some(candidate);
                break;
            }
        }
        let amount = amount?;
        if network.starts_with("xrpl:") {
            for i in 0..TAG_TRIES {
                let index = i.to_string();
                let tag = self.derive(&[network, session, listing, "tag", &index]);
                let key = format!("tag/{network}/{tag}");
                if tag != 0 && free(&reserved, &key) {
                    reserved.insert(key, (session.to_owned(), until));
                    return Some(Intent {
                        amount,
                        tag,
                        memo: String::new(),
                    });
                }
            }
            return None;
        }
        let mac = self
            .keys
            .mac(&[format!("memo/{network}/{session}/{listing}").as_bytes()]);
        let head = mac.get(..5).unwrap_or(&mac);
        Some(Intent {
            amount,
            tag: 0,
            memo: format!("CT{}", hex::encode_upper(head)),
        })
    }

    /// The offer, price and listing a deposit request names, or the refusal.
    fn resolve_deposit<'a>(&'a self, body: &[u8]) -> Result<Resolved<'a>, Box<Response<Body>>> {
        let request: DepositRequest = serde_json::from_slice(body)
            .map_err(|_| Box::new(error(StatusCode::BAD_REQUEST, "invalid_deposit_request")))?;
        let offer = self
            .deposit_offer(&request.network)
            .ok_or_else(|| Box::new(error(StatusCode::BAD_REQUEST, "deposit_not_offered")))?;
        if request.listing.is_empty() {
            let price = offer
                .requirements
                .amount
                .parse()
                .map_err(|_| Box::new(error(StatusCode::BAD_REQUEST, "deposit_not_offered")))?;
            return Ok(Resolved {
                request,
                offer,
                price,
                listing: None,
            });
        }
        let listing = self
            .settings
            .listings
            .iter()
            .find(|listing| listing.id == request.listing)
            .ok_or_else(|| Box::new(error(StatusCode::NOT_FOUND, "unknown_listing")))?;
        if listing.network != request.network {
            return Err(Box::new(error(
                StatusCode::CONFLICT,
                "listing_network_mismatch",
            )));
        }
        let price = listing_price(listing, offer)
            .ok_or_else(|| Box::new(error(StatusCode::BAD_REQUEST, "deposit_not_offered")))?;
        Ok(Resolved {
            request,
            offer,
            price,
            listing: Some(listing),
        })
    }

    /// `POST /deposit {network, listing?}`.
    pub(super) fn deposit(&self, body: &[u8], session: &Session, now: u64) -> Response<Body> {
        let Resolved {
            request,
            offer,
            price,
            listing,
        } = match self.resolve_deposit(body) {
            Ok(resolved) => resolved,
            Err(refusal) => return *refusal,
        };
        let listing_id = listing.map_or("", |listing| listing.id.as_str());
        if listing.is_some() && self.deposits.sold.lock().contains_key(listing_id) {
            return error(StatusCode::CONFLICT, "listing_already_sold");
        }
        let me = session.id_hex();
        let network = request.network.as_str();
        let Some(intent) = self.intent(network, &me, listing_id, price, now, session.expires)
        else {
            return with_retry_after(
                error(StatusCode::SERVICE_UNAVAILABLE, "deposit_capacity"),
                60,
            );
        };
        let pay_to = &offer.requirements.pay_to;
        let content = qr_content(network, pay_to, &intent);
        let Some(qr) = qr_data_uri(&content) else {
            return error(StatusCode::SERVICE_UNAVAILABLE, "qr_unavailable");
        };
        let body = serde_json::json!({
            "network": network,
            "address": pay_to,
            "amount": intent.amount.to_string(),
            "amount_display": shown(network, intent.amount),
            "price": price.to_string(),
            "listing": listing_id,
            "tag": intent.tag,
            "memo": intent.memo,
            "qr_content": content,
            "qr": qr,
            "lookback_seconds": LOOKBACK_SECONDS,
        });
        json(StatusCode::OK, body.to_string())
    }

    /// Takes the session's turn at a chain lookup; the seconds to wait when it is too soon.
    fn take_check_turn(&self, session: &str, now: u64) -> Result<(), u64> {
        let mut checked = self.deposits.checked.lock();
        if let Some(last) = checked.get(session)
            && now < last.saturating_add(CHECK_GAP_SECONDS)
        {
            return Err(last.saturating_add(CHECK_GAP_SECONDS) - now);
        }
        if checked.len() >= MAX_CHECK_TIMES {
            checked.retain(|_, last| now < last.saturating_add(CHECK_GAP_SECONDS));
            if checked.len() >= MAX_CHECK_TIMES {
                return Err(CHECK_GAP_SECONDS);
            }
        }
        checked.insert(session.to_owned(), now);
        Ok(())
    }

    /// `POST /deposit/check {network, listing?}`.
    pub(super) async fn deposit_check(
        &self,
        body: &[u8],
        session: &Session,
        client: IpAddr,
        now: u64,
    ) -> Response<Body> {
        let Resolved {
            request,
            offer,
            price,
            listing,
        } = match self.resolve_deposit(body) {
            Ok(resolved) => resolved,
            Err(refusal) => return *refusal,
        };
        if !self.journal.is_healthy() {
            return error(StatusCode::SERVICE_UNAVAILABLE, "fast_lane_unavailable");
        }
        let me = session.id_hex();
        let listing_id = listing.map_or("", |listing| listing.id.as_str());
        if listing.is_some() {
            // The buyer asking again gets its sale; anyone else is still looked up, since a
            // payment sent from an intent shown before the sale must be found and flagged.
            let sale = self.deposits.sold.lock().get(listing_id).cloned();
            if let Some(receipt) = sale.and_then(|fingerprint| self.journal.get(&fingerprint))
                && receipt.session == me
            {
                return receipt_answer(&receipt, now);
            }
        } else if let Some((fingerprint, pass_end)) = self.journal.best_settled(&session.id)
            && pass_end > now
            && let Some(receipt) = self.journal.get(&fingerprint)
        {
            return receipt_answer(&receipt, now);
        }
        let network = request.network.as_str();
        let Some(intent) = self.intent(network, &me, listing_id, price, now, session.expires)
        else {
            return with_retry_after(
                error(StatusCode::SERVICE_UNAVAILABLE, "deposit_capacity"),
                60,
            );
        };
        if let Err(wait) = self.take_check_turn(&me, now) {
            let wait = u32::try_from(wait).unwrap_or(u32::MAX);
            return with_retry_after(
                error(StatusCode::TOO_MANY_REQUESTS, "deposit_check_too_soon"),
                wait,
            );
        }
        let query = DepositQuery {
            network: network.to_owned(),
            pay_to: offer.requirements.pay_to.clone(),
            amount: intent.amount,
            reference: if network.starts_with("xrpl:") {
                DepositReference::Tag(intent.tag)
            } else {
                DepositReference::Memo(intent.memo.clone())
            },
            minimum: price,
            lookback_seconds: LOOKBACK_SECONDS,
        };
        let hits = match tokio::time::timeout(
            LOOKUP_TIMEOUT,
            self.facilitator.deposit_check(&query),
        )
        .await
        {
            Ok(Ok(hits)) => hits,
            Ok(Err(GatewayError::Rejected(reason))) => {
                tracing::warn!(%reason, network, "fast lane: deposit check refused");
                return error(StatusCode::SERVICE_UNAVAILABLE, "deposit_check_unavailable");
            }
            Ok(Err(failure)) => {
                tracing::warn!(%failure, network, "fast lane: deposit check failed");
                return error(StatusCode::SERVICE_UNAVAILABLE, "deposit_check_unavailable");
            }
            Err(_) => return error(StatusCode::SERVICE_UNAVAILABLE, "deposit_check_unavailable"),
        };
        let mut terms = offer.requirements.clone();
        if listing.is_some() {
            terms.amount = price.to_string();
        }
        self.credit(&hits, &terms, listing_id, &me, client, now)
            .await
    }

    /// Records each new hit as a settled receipt of this session, oldest first; answers with
    /// the first one recorded (or tells the page to keep waiting).
    async fn credit(
        &self,
        hits: &[DepositHit],
        terms: &PaymentRequirements,
        listing: &str,
        me: &str,
        client: IpAddr,
        now: u64,
    ) -> Response<Body> {
        let network = terms.network.as_str();
        let mut answered: Option<(Receipt, bool)> = None;
        let mut refused = false;
        let mut unsaved = false;
        // The chain lists newest first; the earliest payment is the one that buys a listing.
        for hit in hits.iter().rev() {
            if hit.transaction.is_empty() || hit.payer.is_empty() {
                continue;
            }
            let fingerprint = deposit_fingerprint(network, &hit.transaction);
            if self.journal.get(&fingerprint).is_some() {
                continue;
            }
            let screening = Screening {
                network,
                payer: &hit.payer,
                action: Action::Deposit,
                requirements: terms,
                client_ip: client.to_string(),
                merchant: &self.settings.merchant,
            };
            let policy_id = match self.policy.screen(&screening, now).await {
                Ok(id) => id,
                Err(refusal) => {
                    tracing::info!(%refusal, payer = %hit.payer, "fast lane: deposit not approved");
                    refused = true;
                    continue;
                }
            };
            let mut receipt = Receipt {
                session: me.to_owned(),
                fingerprint: fingerprint.clone(),
                state: ReceiptState::Settled,
                kind: ReceiptKind::Deposit,
                network: network.to_owned(),
                payer: hit.payer.clone(),
                requirements: terms.clone(),
                transaction: hit.transaction.clone(),
                policy_id,
                started: now,
                settled: now,
                expires: now.saturating_add(self.settings.pass_seconds),
                response: Some(SettleResponse {
                    success: true,
                    error_reason: None,
                    transaction: hit.transaction.clone(),
                    network: network.to_owned(),
                    payer: Some(hit.payer.clone()),
                }),
                listing: listing.to_owned(),
                delivered: false,
            };
            let mut claimed = false;
            if !listing.is_empty() {
                let mut sold = self.deposits.sold.lock();
                match sold.get(listing) {
                    Some(buyer) if *buyer != fingerprint => {
                        receipt.kind = ReceiptKind::NftSaleConflict;
                    }
                    _ => {
                        receipt.kind = ReceiptKind::NftSale;
                        sold.insert(listing.to_owned(), fingerprint.clone());
                        claimed = true;
                    }
                }
            }
            match self.record(receipt.clone()).await {
                Ok(()) => {
                    if receipt.kind == ReceiptKind::NftSaleConflict {
                        tracing::warn!(listing, fingerprint = %receipt.fingerprint, "fast lane: a sold listing was paid again; the payer keeps a pass, the merchant must make it right");
                    }
                    let conflict = receipt.kind == ReceiptKind::NftSaleConflict;
                    if answered.is_none() {
                        answered = Some((receipt, conflict));
                    }
                }
                Err(failure) => {
                    if claimed {
                        let mut sold = self.deposits.sold.lock();
                        if sold.get(listing) == Some(&fingerprint) {
                            sold.remove(listing);
                        }
                    }
                    match failure {
                        // Another session recorded this transfer first: it is theirs.
                        RecordError::OtherSession | RecordError::TransactionReused => {}
                        failure => {
                            tracing::error!(%failure, fingerprint, "fast lane: deposit not recorded");
                            unsaved = true;
                        }
                    }
                }
            }
        }
        if let Some((receipt, conflict)) = answered {
            let mut response = receipt_answer(&receipt, now);
            if conflict {
                response
                    .headers_mut()
                    .insert(LISTING_CONFLICT_HEADER, HeaderValue::from_static("1"));
            }
            return response;
        }
        if unsaved {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "receipt_not_saved_contact_merchant",
            );
        }
        if refused {
            return error(StatusCode::FORBIDDEN, "policy_not_approved");
        }
        json(
            StatusCode::OK,
            serde_json::json!({"eligible": false, "waiting": true}).to_string(),
        )
    }

    /// `GET /shop`: the listings, whether each is sold, and whether this session bought it.
    pub(super) fn shop(&self, headers: &HeaderMap, now: u64) -> Response<Body> {
        let me = self
            .session_of(headers, now)
            .map(|session| session.id_hex());
        let sold = self.deposits.sold.lock().clone();
        let listings: Vec<serde_json::Value> = self
            .settings
            .listings
            .iter()
            .filter_map(|listing| {
                let offer = self.deposit_offer(&listing.network)?;
                let price = listing_price(listing, offer)?;
                let sale = sold.get(&listing.id);
                let bought = match (sale, &me) {
                    (Some(fingerprint), Some(me)) => self
                        .journal
                        .get(fingerprint)
                        .is_some_and(|receipt| receipt.session == *me),
                    _ => false,
                };
                Some(serde_json::json!({
                    "id": listing.id,
                    "label": listing.label,
                    "network": listing.network,
                    "price": price.to_string(),
                    "price_display": shown(&listing.network, price),
                    "sold": sale.is_some(),
                    "bought": bought,
                }))
            })
            .collect();
        json(
            StatusCode::OK,
            serde_json::json!({ "listings": listings }).to_string(),
        )
    }

    /// `GET /market?rule=`: the open sell offers of an XRPL collection, from memory for a
    /// minute.
    pub(super) async fn market(&self, query: Option<&str>) -> Response<Body> {
        let rule = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .find(|(key, _)| key == "rule")
            .map(|(_, value)| value.into_owned())
            .unwrap_or_default();
        let Some(collection) =
            self.settings.collections.iter().find(|collection| {
                collection.id == rule && collection.network.starts_with("xrpl:")
            })
        else {
            return error(StatusCode::NOT_FOUND, "no_market_for_collection");
        };
        let cached = self.deposits.market.lock().get(&rule).cloned();
        if let Some((at, body)) = &cached
            && at.elapsed() < MARKET_TTL
        {
            return json(StatusCode::OK, body.clone());
        }
        let asked = tokio::time::timeout(
            LOOKUP_TIMEOUT,
            self.facilitator
                .market(&collection.network, &collection.collection),
        )
        .await;
        let offers = match asked {
            Ok(Ok(offers)) => offers,
            failed => {
                if let Ok(Err(failure)) = failed {
                    tracing::warn!(%failure, rule, "fast lane: market unavailable");
                }
                // An older list beats an empty one.
                return match cached {
                    Some((_, body)) => json(StatusCode::OK, body),
                    None => json(
                        StatusCode::OK,
                        serde_json::json!({"network": collection.network, "sales": [], "unavailable": true}).to_string(),
                    ),
                };
            }
        };
        let now = super::clock::now_unix();
        let network = collection.network.as_str();
        let mut sales: Vec<&crate::fastlane::lookups::SellOffer> = offers
            .iter()
            .filter(|offer| is_token_id(&offer.nft_id))
            .filter(|offer| offer.destination.is_none())
            .filter(|offer| offer.expiration.is_none_or(|ends| ends > now))
            .filter(|offer| offer.amount > 0)
            .collect();
        sales.sort_by(|a, b| a.amount.cmp(&b.amount).then(a.nft_id.cmp(&b.nft_id)));
        // The cheapest open offer of each token.
        let mut listed: Vec<&str> = Vec::new();
        sales.retain(|offer| {
            let first = !listed.contains(&offer.nft_id.as_str());
            listed.push(&offer.nft_id);
            first
        });
        let items: Vec<serde_json::Value> = sales
            .iter()
            .map(|offer| {
                serde_json::json!({
                    "token_id": offer.nft_id,
                    "offer": offer.offer_id,
                    "seller": offer.owner,
                    "price": offer.amount.to_string(),
                    "price_display": shown(network, offer.amount),
                    "buy_url": buy_url(network, &offer.nft_id),
                })
            })
            .collect();
        let body = serde_json::json!({"network": network, "sales": items}).to_string();
        self.deposits
            .market
            .lock()
            .insert(rule, (Instant::now(), body.clone()));
        json(StatusCode::OK, body)
    }
}

/// An XRPL NFT id: 64 hex digits.
fn is_token_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Where a token can be seen and bought, on the explorer of its network.
fn buy_url(network: &str, token: &str) -> String {
    let host = match network {
        "xrpl:0" => "bithomp.com",
        "xrpl:1" => "test.bithomp.com",
        "xrpl:2" => "dev.bithomp.com",
        _ => return String::new(),
    };
    format!("https://{host}/nft/{token}")
}

/// The networks whose offers take deposits, each once, for the public config.
pub(super) fn deposit_networks(offers: &[Offer]) -> Vec<String> {
    let mut networks: Vec<String> = Vec::new();
    for offer in offers {
        let network = &offer.requirements.network;
        if takes_deposits(offer) && !networks.contains(network) {
            networks.push(network.clone());
        }
    }
    networks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_show_in_the_chains_unit() {
        assert_eq!(shown("xrpl:1", 5_000_000), "5.000000");
        assert_eq!(shown("xrpl:1", 12), "0.000012");
        assert_eq!(shown("stellar:testnet", 10_000_001), "1.0000001");
        assert_eq!(shown("hedera:testnet", 1), "0.00000001");
        assert_eq!(shown("solana:x", 1_500_000_000), "1.500000000");
        assert_eq!(shown("xrpl:0", u64::MAX), "18446744073709.551615");
    }

    #[test]
    fn the_qr_code_is_a_png_of_the_content() {
        let uri = qr_data_uri("rHb9CJAWyB4rj91VRWn96DkukG4bwdtyTh").unwrap();
        let encoded = uri.strip_prefix("data:image/png;base64,").unwrap();
        let png = STANDARD.decode(encoded).unwrap();
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let reader = decoder.read_info().unwrap();
        let info = reader.info();
        assert_eq!(info.width, info.height);
        assert!(info.width >= 200 && info.width <= QR_PIXELS as u32);
    }

    #[test]
    fn solana_qr_content_is_a_payment_request() {
        let intent = Intent {
            amount: 10_000_123,
            tag: 0,
            memo: "CT4142434445".into(),
        };
        assert_eq!(
            qr_content("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", "PayTo1", &intent),
            "solana:PayTo1?amount=0.010000123&memo=CT4142434445"
        );
        assert_eq!(qr_content("xrpl:1", "rDest", &intent), "rDest");
    }

    #[test]
    fn token_ids_are_64_hex_digits() {
        assert!(is_token_id(&"0A".repeat(32)));
        assert!(!is_token_id(&"0A".repeat(31)));
        assert!(!is_token_id(&format!("{}ZZ", "0A".repeat(31))));
        assert_eq!(
            buy_url("xrpl:1", "AB"),
            "https://test.bithomp.com/nft/AB".to_owned()
        );
        assert_eq!(buy_url("stellar:testnet", "AB"), "");
    }
}
