//! The `/_concert/*` routes of a configured fast lane, the POST pipeline every wallet request
//! goes through, and the x402 payment exchange.
//!
//! POST pipeline, in order: origin → per-address rate → body cap (`/session` is answered
//! here) → session → CSRF → renewal window → global in-flight cap → one request per session.
//!
//! Two checks are stricter than the protocol demands, to close holes browsers leave open:
//! header sessions need the CSRF value too (a page script could otherwise read a token left in
//! storage and post it cross-origin through a proxy without the cookie), and a POST without
//! `Origin` is accepted only when `Sec-Fetch-Site` is absent as well — every current browser
//! sends one of the two, so only non-browser clients (which CSRF cannot target) get through.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::wire::intake::{IntakeError, IntakeLimits, collect};
use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::FutureExt as _;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use serde::Deserialize;

use super::clock::{self, format_rfc3339};
use super::files;
use super::fingerprint;
use super::journal::{Receipt, ReceiptKind, ReceiptState, RecordError};
use super::limits::{Busy, InFlightGuard};
use super::policy::{Action, Screening};
use super::session::{RENEWAL_WINDOW, SESSION_SECONDS, Session};
use super::{CSRF_HEADER, FastLane, SESSION_COOKIE, SettleOutcome, SharedSettle, session_token};
use crate::fastlane::facilitator::GatewayError;
use crate::fastlane::x402::{
    FacilitatorRequest, PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, PaymentPayload,
    PaymentRequired, PaymentRequirements, X402_VERSION,
};
use crate::paths::reserved::CONCERT_TREE;

/// Largest POST body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Largest `PAYMENT-SIGNATURE` header.
pub const MAX_PAYMENT_HEADER_BYTES: usize = 64 * 1024;
/// How long the gateway may take to verify.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(45);
/// Longest pause between two pieces of a request body.
const BODY_PROGRESS_LIMIT: Duration = Duration::from_secs(10);
/// The whole request body must arrive within this.
const BODY_OVERALL_LIMIT: Duration = Duration::from_secs(30);

/// How long past the offer's own timeout a client waits for the settlement.
pub const SETTLE_WAIT_GRACE: u64 = 90;
/// How long past the offer's timeout a detached settlement may run at all (the gateway
/// itself gives up after three minutes).
const SETTLE_RUN_GRACE: u64 = 300;
/// Settlements awaited at once. Waiting for one does not hold a verification place, so this
/// bounds the detached tasks instead.
pub const MAX_SETTLING: usize = 256;
/// How long a quote of a line-priced offer can start a payment: time enough to approve it in
/// a wallet.
pub const QUOTE_SECONDS: u64 = 600;
/// The 402's `error` when a quote ended before the payment made with it arrived.
const QUOTE_EXPIRED: &str = "quote_expired";
/// How long the gateway may take to prepare a Solana transfer.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(45);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PostRoute {
    Session,
    Payment,
    SolanaPrepare,
    NftChallenge,
    NftVerify,
    Deposit,
    DepositCheck,
}

impl FastLane {
    /// Answers a request for a path under `/_concert` from `client` (the canonical client
    /// address). Every answer carries `no-store`, `nosniff`, `no-referrer` and
    /// `Vary: Cookie, Concert-Session`.
    pub async fn handle(self: &Arc<Self>, req: Request<Body>, client: IpAddr) -> Response<Body> {
        let mut response = self.route(req, client).await;
        add_common_headers(response.headers_mut());
        response
    }

    async fn route(self: &Arc<Self>, req: Request<Body>, client: IpAddr) -> Response<Body> {
        let path = req.uri().path();
        let relative = path.strip_prefix(CONCERT_TREE).unwrap_or(path);
        let readable = matches!(*req.method(), Method::GET | Method::HEAD);
        if let Some((content_type, body)) = files::static_file(relative) {
            if !readable {
                return method_not_allowed("GET, HEAD");
            }
            return static_response(content_type, body);
        }
        let relative = relative.strip_suffix('/').unwrap_or(relative);
        if relative == "/config" {
            return if readable {
                json(StatusCode::OK, self.config_json.clone())
            } else {
                method_not_allowed("GET, HEAD")
            };
        }
        if !self.settings.enabled {
            return error(StatusCode::NOT_FOUND, "fast_lane_disabled");
        }
        let post = match relative {
            "/status" if readable => return self.status(req.headers(), clock::now_unix()),
            "/status" => return method_not_allowed("GET, HEAD"),
            "/session" => PostRoute::Session,
            "/payment" => PostRoute::Payment,
            "/solana/prepare" => PostRoute::SolanaPrepare,
            "/shop" if readable => return self.shop(req.headers(), clock::now_unix()),
            "/market" if readable => return self.market(req.uri().query()).await,
            "/shop" | "/market" => return method_not_allowed("GET, HEAD"),
            // A lane without collections offers no NFT admission at all.
            "/nft/challenge" | "/nft/verify"
                if self.settings.collections.is_empty() && *req.method() == Method::POST =>
            {
                return error(StatusCode::NOT_FOUND, "not_found");
            }
            "/nft/challenge" => PostRoute::NftChallenge,
            "/nft/verify" => PostRoute::NftVerify,
            "/deposit" => PostRoute::Deposit,
            "/deposit/check" => PostRoute::DepositCheck,
            _ => return error(StatusCode::NOT_FOUND, "not_found"),
        };
        if *req.method() != Method::POST {
            return method_not_allowed("POST");
        }
        self.post(post, req, client).await
    }

    fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let fetch_site = headers.get("sec-fetch-site");
        if fetch_site.is_some_and(|site| site.as_bytes().eq_ignore_ascii_case(b"cross-site")) {
            return false;
        }
        match headers.get(header::ORIGIN) {
            Some(origin) => origin
                .as_bytes()
                .eq_ignore_ascii_case(self.origin.as_bytes()),
            None => fetch_site.is_none(),
        }
    }

    async fn post(
        self: &Arc<Self>,
        route: PostRoute,
        req: Request<Body>,
        client: IpAddr,
    ) -> Response<Body> {
        let now = clock::now_unix();
        if !self.origin_allowed(req.headers()) {
            return error(StatusCode::FORBIDDEN, "origin_rejected");
        }
        if !self.rate.allow(client, now) {
            return with_retry_after(
                error(StatusCode::TOO_MANY_REQUESTS, "too_many_wallet_requests"),
                60,
            );
        }
        let (parts, body) = req.into_parts();
        // A wallet request is small: a client that sends it slowly is cut off rather than
        // allowed to hold a place among the requests in flight.
        let limits = IntakeLimits::starting_now(
            MAX_BODY_BYTES as u64,
            BODY_PROGRESS_LIMIT,
            BODY_OVERALL_LIMIT,
        );
        let body = match collect(body, limits).await {
            Ok(bytes) => bytes,
            Err(IntakeError::TooLarge) => {
                return error(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large");
            }
            Err(IntakeError::TimedOut) => {
                return error(StatusCode::REQUEST_TIMEOUT, "request_timeout");
            }
            Err(_) => return error(StatusCode::BAD_REQUEST, "invalid_request"),
        };
        let headers = parts.headers;
        if route == PostRoute::Session {
            return self.session(&headers, &body, now);
        }
        let Some(token) = session_token(&headers) else {
            return error(StatusCode::UNAUTHORIZED, "session_required");
        };
        let Some(session) = self.keys.verify(token, now) else {
            return error(StatusCode::UNAUTHORIZED, "session_required");
        };
        let csrf = headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !self.keys.csrf_matches(token, csrf) {
            return error(StatusCode::FORBIDDEN, "csrf_required");
        }
        if session.expires.saturating_sub(now) < RENEWAL_WINDOW {
            return error(StatusCode::CONFLICT, "session_renewal_required");
        }
        let mut running = match self.in_flight.enter(session.id) {
            Ok(guard) => guard,
            Err(Busy::Global) => {
                return with_retry_after(
                    error(StatusCode::SERVICE_UNAVAILABLE, "verification_busy"),
                    3,
                );
            }
            Err(Busy::Session) => return error(StatusCode::CONFLICT, "request_in_progress"),
        };
        match route {
            PostRoute::Payment => {
                self.payment(&headers, &body, session, client, now, &mut running)
                    .await
            }
            PostRoute::SolanaPrepare => self.solana_prepare(&body, &session, now).await,
            PostRoute::NftChallenge => self.nft_challenge(&body, &session, now),
            PostRoute::NftVerify => self.nft_verify(&body, &session, client, now).await,
            PostRoute::Deposit => self.deposit(&body, &session, now),
            PostRoute::DepositCheck => self.deposit_check(&body, &session, client, now).await,
            PostRoute::Session => error(StatusCode::NOT_FOUND, "not_found"),
        }
    }

    /// `POST /session`: a new session, or the presented one renewed (same id).
    fn session(&self, headers: &HeaderMap, body: &[u8], now: u64) -> Response<Body> {
        if let Err(refused) = empty_body(body) {
            return *refused;
        }
        let existing =
            session_token(headers).filter(|token| self.keys.verify(token, now).is_some());
        let (token, session) = self.keys.issue(existing, now);
        let body = serde_json::json!({
            "session": token,
            "csrf": self.keys.csrf(&token),
            "expires": format_rfc3339(session.expires),
        });
        let mut response = json(StatusCode::OK, body.to_string());
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        let cookie = format!(
            "{SESSION_COOKIE}={token}; Path=/; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict{secure}"
        );
        if let Ok(value) = HeaderValue::try_from(cookie) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
        response
    }

    /// `GET /status`: what the presented session holds. Never opens an entry window.
    fn status(&self, headers: &HeaderMap, now: u64) -> Response<Body> {
        let mut answer = self.status_value(headers, now);
        if self.policy.skips()
            && let Some(object) = answer.as_object_mut()
        {
            object.insert("test_mode".into(), true.into());
        }
        json(StatusCode::OK, answer.to_string())
    }

    fn status_value(&self, headers: &HeaderMap, now: u64) -> serde_json::Value {
        let not_eligible = serde_json::json!({ "eligible": false });
        let Some(session) = self.session_of(headers, now) else {
            return not_eligible;
        };
        if !self.journal.is_healthy() {
            return not_eligible;
        }
        let best = self.journal.best_settled(&session.id);
        if let Some((fingerprint, pass_end)) = &best
            && *pass_end > now
            && let Some(receipt) = self.journal.get(fingerprint)
        {
            return serde_json::json!({
                "eligible": true,
                "state": receipt.state.as_str(),
                "kind": "payment",
                "expires": format_rfc3339(*pass_end),
                "receipt": public_receipt(&receipt),
            });
        }
        let lease = self.nft.lease(&session.id);
        if let Some(lease) = &lease
            && lease.expires > now
        {
            return serde_json::json!({
                "eligible": true,
                "kind": "nft",
                "expires": format_rfc3339(lease.expires),
            });
        }
        let paid_window = best
            .as_ref()
            .and_then(|(fingerprint, _)| self.windows.get(fingerprint));
        let nft_window = lease.and_then(|lease| self.windows.get(&lease.window_key));
        if let Some(window_end) = paid_window.max(nft_window)
            && window_end > now
        {
            return serde_json::json!({
                "eligible": true,
                "kind": "window",
                "expires": format_rfc3339(window_end),
            });
        }
        let latest = self
            .journal
            .unsettled(&session.id)
            .or_else(|| best.and_then(|(fingerprint, _)| self.journal.get(&fingerprint)));
        match latest {
            Some(receipt) => serde_json::json!({
                "eligible": false,
                "state": receipt.state.as_str(),
                "kind": receipt.kind.as_str(),
                "expires": format_rfc3339(receipt.expires),
                "receipt": public_receipt(&receipt),
            }),
            None => not_eligible,
        }
    }

    /// `POST /payment`.
    async fn payment(
        self: &Arc<Self>,
        headers: &HeaderMap,
        body: &[u8],
        session: Session,
        client: IpAddr,
        now: u64,
        running: &mut InFlightGuard,
    ) -> Response<Body> {
        if let Err(refused) = empty_body(body) {
            return *refused;
        }
        if !self.journal.is_healthy() {
            return error(StatusCode::SERVICE_UNAVAILABLE, "fast_lane_unavailable");
        }
        if let Some((fingerprint, pass_end)) = self.journal.best_settled(&session.id)
            && pass_end > now
            && let Some(receipt) = self.journal.get(&fingerprint)
        {
            return receipt_answer(&receipt, now);
        }
        if self.payable.is_empty() {
            return error(StatusCode::NOT_FOUND, "payments_disabled");
        }
        let me = session.id_hex();
        let Some(header_value) = headers.get(PAYMENT_SIGNATURE) else {
            return self.payment_required(headers, &me, now, None);
        };
        let decoded = match decode_payment_header(header_value.as_bytes()) {
            Ok(decoded) => decoded,
            Err(refusal) => return error(refusal.status(), refusal.code()),
        };
        let payment = decoded.payment;
        if let Some(resource) = &payment.resource
            && resource.url != format!("{}/_concert/payment", self.origin)
        {
            return error(StatusCode::BAD_REQUEST, "wrong_resource");
        }
        let Ok(quote_expires) = self.terms_offered(&payment.accepted, &me) else {
            return error(StatusCode::BAD_REQUEST, "payment_terms_mismatch");
        };
        let terms = payment.accepted.clone();
        let fingerprint = fingerprint::fingerprint(&terms.network, &terms.scheme, &payment.payload);
        let request = FacilitatorRequest {
            x402_version: X402_VERSION,
            payment_payload: payment,
            payment_requirements: terms.clone(),
        };
        match self.journal.get(&fingerprint) {
            Some(known) if known.session != me => {
                error(StatusCode::CONFLICT, "payment_already_redeemed")
            }
            Some(known) if known.state == ReceiptState::Settled => receipt_answer(&known, now),
            Some(unresolved) => {
                // An identical retry of a payment whose outcome is open: verified before, so
                // only screened again, then settled (or joined to the settlement under way).
                let screening = Screening {
                    network: &unresolved.network,
                    payer: &unresolved.payer,
                    action: Action::PaymentRetry,
                    requirements: &unresolved.requirements,
                    client_ip: client.to_string(),
                    merchant: &self.settings.merchant,
                };
                if self.policy.screen(&screening, now).await.is_err() {
                    return error(StatusCode::FORBIDDEN, "policy_not_approved");
                }
                self.settle_and_answer(request, unresolved, running).await
            }
            None => {
                // Only a new payment needs a live quote: a journaled one keeps its terms.
                if quote_expires.is_some_and(|expires| expires < now) {
                    return self.payment_required(headers, &me, now, Some(QUOTE_EXPIRED));
                }
                if self.journal.unsettled(&session.id).is_some() {
                    return error(
                        StatusCode::CONFLICT,
                        "previous_payment_unresolved_do_not_pay_again",
                    );
                }
                if self.settling.lock().len() >= MAX_SETTLING {
                    return with_retry_after(
                        error(StatusCode::SERVICE_UNAVAILABLE, "verification_busy"),
                        3,
                    );
                }
                self.new_payment(request, fingerprint, me, client, now, running)
                    .await
            }
        }
    }

    async fn new_payment(
        self: &Arc<Self>,
        request: FacilitatorRequest,
        fingerprint: String,
        session: String,
        client: IpAddr,
        now: u64,
        running: &mut InFlightGuard,
    ) -> Response<Body> {
        let verdict =
            match tokio::time::timeout(VERIFY_TIMEOUT, self.facilitator.verify(&request)).await {
                Ok(Ok(verdict)) => verdict,
                // The gateway judged the request itself wrong: the payment is not acceptable.
                Ok(Err(GatewayError::Rejected(reason))) => {
                    tracing::info!(%reason, "fast lane: gateway rejected a payment");
                    return error(StatusCode::PAYMENT_REQUIRED, "payment_not_verified");
                }
                Ok(Err(failure)) => {
                    tracing::warn!(%failure, "fast lane: verification unavailable");
                    return error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "payment_verification_unavailable",
                    );
                }
                Err(_) => {
                    return error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "payment_verification_unavailable",
                    );
                }
            };
        if !verdict.is_valid || verdict.payer.is_empty() {
            return error(StatusCode::PAYMENT_REQUIRED, "payment_not_verified");
        }
        let terms = &request.payment_requirements;
        let screening = Screening {
            network: &terms.network,
            payer: &verdict.payer,
            action: Action::Payment,
            requirements: terms,
            client_ip: client.to_string(),
            merchant: &self.settings.merchant,
        };
        let policy_id = match self.policy.screen(&screening, now).await {
            Ok(id) => id,
            Err(refusal) => {
                tracing::info!(%refusal, payer = %verdict.payer, "fast lane: payment not approved");
                return error(StatusCode::FORBIDDEN, "policy_not_approved");
            }
        };
        let pending = Receipt {
            session,
            fingerprint,
            state: ReceiptState::Pending,
            kind: ReceiptKind::Payment,
            network: terms.network.clone(),
            payer: verdict.payer,
            requirements: terms.clone(),
            transaction: String::new(),
            policy_id,
            started: now,
            settled: 0,
            expires: 0,
            response: None,
            listing: String::new(),
            delivered: false,
        };
        match self.record(pending.clone()).await {
            Ok(()) => self.settle_and_answer(request, pending, running).await,
            Err(RecordError::OtherSession) => {
                error(StatusCode::CONFLICT, "payment_already_redeemed")
            }
            Err(RecordError::Unresolved) => error(
                StatusCode::CONFLICT,
                "previous_payment_unresolved_do_not_pay_again",
            ),
            Err(RecordError::Unavailable) => {
                error(StatusCode::SERVICE_UNAVAILABLE, "fast_lane_unavailable")
            }
            Err(failure) => {
                tracing::warn!(%failure, "fast lane: payment not reserved");
                error(StatusCode::CONFLICT, "payment_reservation_failed")
            }
        }
    }

    async fn settle_and_answer(
        self: &Arc<Self>,
        request: FacilitatorRequest,
        pending: Receipt,
        running: &mut InFlightGuard,
    ) -> Response<Body> {
        let wait = Duration::from_secs(
            pending
                .requirements
                .max_timeout_seconds
                .saturating_add(SETTLE_WAIT_GRACE),
        );
        let settlement = self.start_settle(request, pending);
        // The wait can last minutes; it keeps the session busy but frees the shared place.
        running.release_global();
        match tokio::time::timeout(wait, settlement).await {
            Ok(SettleOutcome::Settled(receipt)) => receipt_answer(&receipt, clock::now_unix()),
            Ok(SettleOutcome::NotSaved) => error(
                StatusCode::SERVICE_UNAVAILABLE,
                "receipt_not_saved_contact_merchant_do_not_pay_again",
            ),
            Ok(SettleOutcome::Unresolved) | Err(_) => error(
                StatusCode::SERVICE_UNAVAILABLE,
                "settlement_unresolved_retry_identical_payment_do_not_pay_again",
            ),
        }
    }

    /// The settlement of `pending`, started in a task of its own unless one is under way: a
    /// client that leaves does not stop it, and its outcome is journaled either way.
    fn start_settle(
        self: &Arc<Self>,
        request: FacilitatorRequest,
        pending: Receipt,
    ) -> SharedSettle {
        let mut settling = self.settling.lock();
        if let Some(running) = settling.get(&pending.fingerprint) {
            return running.clone();
        }
        let fingerprint = pending.fingerprint.clone();
        let lane = Arc::clone(self);
        let key = fingerprint.clone();
        let task = tokio::spawn(async move {
            let outcome = lane.run_settle(request, pending).await;
            lane.settling.lock().remove(&key);
            outcome
        });
        let shared = async move { task.await.unwrap_or(SettleOutcome::Unresolved) }
            .boxed()
            .shared();
        settling.insert(fingerprint, shared.clone());
        shared
    }

    async fn run_settle(&self, request: FacilitatorRequest, pending: Receipt) -> SettleOutcome {
        let limit = Duration::from_secs(
            pending
                .requirements
                .max_timeout_seconds
                .saturating_add(SETTLE_RUN_GRACE),
        );
        let result = tokio::time::timeout(limit, self.facilitator.settle(request)).await;
        let now = clock::now_unix();
        let response = match result {
            Ok(Ok(response)) => response,
            Ok(Err(failure)) => {
                tracing::warn!(fingerprint = %pending.fingerprint, %failure, "fast lane: settlement unresolved");
                return self.unresolved(pending, None).await;
            }
            Err(_) => {
                tracing::warn!(fingerprint = %pending.fingerprint, "fast lane: settlement timed out");
                return self.unresolved(pending, None).await;
            }
        };
        let payer_matches = response
            .payer
            .as_deref()
            .is_none_or(|payer| payer.is_empty() || payer == pending.payer);
        if !response.success
            || response.transaction.is_empty()
            || response.network != pending.network
            || !payer_matches
        {
            tracing::warn!(
                fingerprint = %pending.fingerprint,
                reason = response.error_reason.as_deref().unwrap_or(""),
                "fast lane: settlement did not confirm this payment"
            );
            return self.unresolved(pending, Some(response)).await;
        }
        let mut settled = pending;
        settled.state = ReceiptState::Settled;
        settled.transaction = response.transaction.clone();
        settled.settled = now;
        settled.expires = now.saturating_add(self.settings.pass_seconds);
        settled.response = Some(response);
        match self.record(settled.clone()).await {
            Ok(()) => SettleOutcome::Settled(Box::new(settled)),
            Err(failure) => {
                tracing::error!(fingerprint = %settled.fingerprint, %failure, "fast lane: settled payment not recorded");
                SettleOutcome::NotSaved
            }
        }
    }

    async fn unresolved(
        &self,
        pending: Receipt,
        response: Option<crate::fastlane::x402::SettleResponse>,
    ) -> SettleOutcome {
        let mut unknown = pending;
        unknown.state = ReceiptState::Unknown;
        unknown.response = response;
        if let Err(failure) = self.record(unknown).await {
            tracing::error!(%failure, "fast lane: unresolved payment not recorded");
        }
        SettleOutcome::Unresolved
    }

    /// Writes a journal line off the async workers (it fsyncs).
    pub(super) async fn record(&self, receipt: Receipt) -> Result<(), RecordError> {
        let journal = Arc::clone(&self.journal);
        tokio::task::spawn_blocking(move || journal.record(receipt))
            .await
            .unwrap_or_else(|failure| Err(RecordError::Io(failure.to_string())))
    }

    /// Whether `accepted` is an offer this session may pay: one as configured (`Ok(None)`), or
    /// a quote made for this session (`Ok(Some(end of the quote))`).
    fn terms_offered(
        &self,
        accepted: &PaymentRequirements,
        session: &str,
    ) -> Result<Option<u64>, ()> {
        let accepted_bytes = serde_json::to_vec(accepted).unwrap_or_default();
        if self.payable_bytes.contains(&accepted_bytes) {
            return Ok(None);
        }
        match self.quotes.check(accepted, &self.payable) {
            Some(claims) if claims.session == session => Ok(Some(claims.expires)),
            _ => Err(()),
        }
    }

    /// The 402: the offers as configured, or, when the line prices skipping it, each offer
    /// quoted for this session's place in the line.
    fn payment_required(
        &self,
        headers: &HeaderMap,
        session: &str,
        now: u64,
        why: Option<&str>,
    ) -> Response<Body> {
        let skip_cost = self
            .line
            .as_ref()
            .map_or(0.0, |line| line.skip_cost(headers));
        let priced = skip_cost.is_finite() && skip_cost > 0.0;
        let (body, header_b64) = if priced || why.is_some() {
            let required = PaymentRequired {
                x402_version: X402_VERSION,
                resource: self.resource.clone(),
                accepts: self
                    .payable
                    .iter()
                    .map(|offer| {
                        self.quotes.quote(
                            offer,
                            skip_cost,
                            session,
                            now.saturating_add(QUOTE_SECONDS),
                        )
                    })
                    .collect(),
                error: why.map(str::to_owned),
            };
            let body = serde_json::to_string(&required).unwrap_or_default();
            let header = STANDARD.encode(body.as_bytes());
            (body, header)
        } else {
            self.payment_required.clone()
        };
        let mut response = json(StatusCode::PAYMENT_REQUIRED, body);
        if let Ok(value) = HeaderValue::try_from(header_b64) {
            response.headers_mut().insert(PAYMENT_REQUIRED, value);
        }
        response
    }

    /// `POST /solana/prepare {network, from, accepted?}`: an unsigned transfer for the page's
    /// wallet, of the offer's amount, or of `accepted`'s when that is this session's quote.
    async fn solana_prepare(&self, body: &[u8], session: &Session, now: u64) -> Response<Body> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Prepare {
            network: String,
            from: String,
            #[serde(default)]
            accepted: Option<PaymentRequirements>,
        }
        let Ok(prepare) = serde_json::from_slice::<Prepare>(body) else {
            return error(StatusCode::BAD_REQUEST, "invalid_request");
        };
        let offered = self
            .payable
            .iter()
            .any(|terms| terms.network == prepare.network && terms.network.starts_with("solana:"));
        if !offered || prepare.from.is_empty() || prepare.from.len() > 64 {
            return error(StatusCode::BAD_REQUEST, "invalid_request");
        }
        let mut request = serde_json::json!({ "network": prepare.network, "from": prepare.from });
        if let Some(accepted) = &prepare.accepted {
            match self.terms_offered(accepted, &session.id_hex()) {
                Ok(quote_expires) if accepted.network == prepare.network => {
                    if quote_expires.is_some_and(|expires| expires < now) {
                        return error(StatusCode::BAD_REQUEST, QUOTE_EXPIRED);
                    }
                    request["amount"] = serde_json::Value::String(accepted.amount.clone());
                }
                _ => return error(StatusCode::BAD_REQUEST, "payment_terms_mismatch"),
            }
        }
        match tokio::time::timeout(PREPARE_TIMEOUT, self.facilitator.solana_prepare(&request)).await
        {
            Ok(Ok(prepared)) => json(StatusCode::OK, prepared.to_string()),
            Ok(Err(GatewayError::Rejected(_))) => error(StatusCode::BAD_REQUEST, "invalid_request"),
            Ok(Err(_)) | Err(_) => error(
                StatusCode::SERVICE_UNAVAILABLE,
                "solana_prepare_unavailable",
            ),
        }
    }
}

/// A decoded `PAYMENT-SIGNATURE` (its numbers kept as written, so the fingerprint hashes
/// them verbatim).
#[derive(Debug)]
pub(crate) struct DecodedPayment {
    pub payment: PaymentPayload,
}

/// Why a `PAYMENT-SIGNATURE` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderRefusal {
    TooLarge,
    Encoding,
    Payload,
}

impl HeaderRefusal {
    fn status(self) -> StatusCode {
        match self {
            HeaderRefusal::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            HeaderRefusal::Encoding | HeaderRefusal::Payload => StatusCode::BAD_REQUEST,
        }
    }

    fn code(self) -> &'static str {
        match self {
            HeaderRefusal::TooLarge => "payment_header_too_large",
            HeaderRefusal::Encoding => "invalid_payment_encoding",
            HeaderRefusal::Payload => "invalid_payment_payload",
        }
    }
}

/// Strict standard base64 (padding required, no stray bits) of one x402 v2 payment whose
/// `payload` is a non-empty object.
pub(crate) fn decode_payment_header(raw: &[u8]) -> Result<DecodedPayment, HeaderRefusal> {
    if raw.len() > MAX_PAYMENT_HEADER_BYTES {
        return Err(HeaderRefusal::TooLarge);
    }
    let bytes = STANDARD.decode(raw).map_err(|_| HeaderRefusal::Encoding)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| HeaderRefusal::Payload)?;
    let payment: PaymentPayload = serde_json::from_str(text).map_err(|_| HeaderRefusal::Payload)?;
    if payment.x402_version != X402_VERSION || payment.payload.is_empty() {
        return Err(HeaderRefusal::Payload);
    }
    Ok(DecodedPayment { payment })
}

/// What a client learns about a receipt.
pub(super) fn public_receipt(receipt: &Receipt) -> serde_json::Value {
    serde_json::json!({
        "fingerprint": receipt.fingerprint,
        "state": receipt.state.as_str(),
        "kind": receipt.kind.as_str(),
        "network": receipt.network,
        "payer": receipt.payer,
        "amount": receipt.requirements.amount,
        "asset": receipt.requirements.asset,
        "transaction": receipt.transaction,
        "settled": format_rfc3339(receipt.settled),
        "expires": format_rfc3339(receipt.expires),
    })
}

/// 200 `{eligible, expires, receipt}` and, when the settlement answer is known,
/// `PAYMENT-RESPONSE`.
pub(super) fn receipt_answer(receipt: &Receipt, now: u64) -> Response<Body> {
    let body = serde_json::json!({
        "eligible": receipt.is_live(now),
        "expires": format_rfc3339(receipt.expires),
        "receipt": public_receipt(receipt),
    });
    let mut response = json(StatusCode::OK, body.to_string());
    if let Some(settle) = &receipt.response
        && let Some(encoded) = super::settle_response_header(settle)
        && let Ok(value) = HeaderValue::try_from(encoded)
    {
        response.headers_mut().insert(PAYMENT_RESPONSE, value);
    }
    response
}

/// Routes without a body accept none, `{}`, or whitespace; anything else is refused.
pub(super) fn empty_body(body: &[u8]) -> Result<(), Box<Response<Body>>> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Nothing {}
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_none() || (first == Some(&b'{') && serde_json::from_slice::<Nothing>(body).is_ok())
    {
        Ok(())
    } else {
        Err(Box::new(error(StatusCode::BAD_REQUEST, "invalid_request")))
    }
}

fn add_common_headers(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::VARY,
        HeaderValue::from_static("Cookie, Concert-Session"),
    );
}

pub(super) fn json(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}

/// `{"error": code}` with `status`.
pub(crate) fn error(status: StatusCode, code: &str) -> Response<Body> {
    json(status, serde_json::json!({ "error": code }).to_string())
}

/// What a wallet request gets while the operator swaps the lane for a new configuration:
/// nothing is verified or charged, and the client is told when to come back.
pub fn reloading_answer() -> Response<Body> {
    let mut response = with_retry_after(
        error(StatusCode::SERVICE_UNAVAILABLE, "fast_lane_reloading"),
        RELOAD_RETRY_SECONDS,
    );
    add_common_headers(response.headers_mut());
    response
}

/// The `Retry-After` of [`reloading_answer`].
const RELOAD_RETRY_SECONDS: u32 = 5;

pub(super) fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

pub(super) fn with_retry_after(mut response: Response<Body>, seconds: u32) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

fn static_response(content_type: &'static str, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(files::CSP),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn payment_json(payload: &str) -> String {
        format!(
            r#"{{"x402Version":2,"accepted":{{"scheme":"exact","network":"xrpl:1","amount":"1","asset":"XRP","payTo":"r","maxTimeoutSeconds":60}},"payload":{payload}}}"#
        )
    }

    #[test]
    fn header_decoding_refuses_each_kind_of_bad_input() {
        let good = STANDARD.encode(payment_json(r#"{"signedTxBlob":"AA"}"#));
        let decoded = decode_payment_header(good.as_bytes()).unwrap();
        assert_eq!(
            serde_json::Value::Object(decoded.payment.payload),
            serde_json::json!({"signedTxBlob": "AA"})
        );
        assert_eq!(
            decode_payment_header(&vec![b'A'; MAX_PAYMENT_HEADER_BYTES + 4]).unwrap_err(),
            HeaderRefusal::TooLarge
        );
        assert_eq!(
            decode_payment_header(b"not base64!").unwrap_err(),
            HeaderRefusal::Encoding
        );
        // Unpadded, and padded with stray bits, are not strict base64.
        assert_eq!(
            decode_payment_header(good.trim_end_matches('=').as_bytes()).unwrap_err(),
            HeaderRefusal::Encoding
        );
        assert_eq!(
            decode_payment_header(b"QR==").unwrap_err(),
            HeaderRefusal::Encoding
        );
        for bad in [
            payment_json("{}"),
            payment_json("[]"),
            payment_json(r#"{"a":1}"#).replace("\"x402Version\":2", "\"x402Version\":1"),
            payment_json(r#"{"a":1}"#) + "{}",
            "{".to_owned(),
        ] {
            let encoded = STANDARD.encode(&bad);
            assert_eq!(
                decode_payment_header(encoded.as_bytes()).unwrap_err(),
                HeaderRefusal::Payload,
                "{bad}"
            );
        }
    }

    #[test]
    fn empty_bodies_accept_nothing_but_nothing() {
        assert!(empty_body(b"").is_ok());
        assert!(empty_body(b" {} ").is_ok());
        assert!(empty_body(br#"{"x":1}"#).is_err());
        assert!(empty_body(b"{} {}").is_err());
        assert!(empty_body(b"[]").is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_header_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..2048)) {
            let _ = decode_payment_header(&raw);
        }

        #[test]
        fn arbitrary_base64_of_arbitrary_bytes_never_panics(raw in prop::collection::vec(any::<u8>(), 0..2048)) {
            let _ = decode_payment_header(STANDARD.encode(&raw).as_bytes());
        }

        #[test]
        fn mangled_payments_never_panic(cut in 0usize..200, junk in ".{0,20}") {
            let json = payment_json(r#"{"signedTxBlob":"AA","n":1.0e5}"#);
            let cut = cut.min(json.len());
            let mangled = format!("{}{}", &json[..cut], junk);
            let _ = decode_payment_header(STANDARD.encode(mangled).as_bytes());
        }
    }
}
