//! The fast lane's resource server: everything under `/_concert/*` that sells and checks
//! passes, and the eligibility question the request path asks of every gated request.
//!
//! - `session`: signed session tokens and CSRF values;
//! - `routes`: the routes, the POST pipeline (origin, rate, body cap, session, CSRF, renewal,
//!   in-flight limits) and the x402 exchange;
//! - `journal`: `fastlane.jsonl`, the receipts;
//! - `policy`: screening payers with the operator's policy service;
//! - `window`: entry windows; `limits`: rate and concurrency limits;
//! - `fingerprint`: payment fingerprints; `files`: the access page; `clock`: instants.
//!
//! [`FastLane`] owns all of it. Construct it once per configured lane and share it by `Arc`.

pub mod clock;
mod deposit;
pub mod files;
pub mod fingerprint;
pub mod journal;
pub mod limits;
mod nft;
pub mod policy;
mod routes;
pub mod session;
pub mod window;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::future::Shared;
use http::{HeaderMap, HeaderName};
use parking_lot::Mutex;

pub use self::nft::{CHALLENGE_SECONDS, MAX_CHALLENGES, MAX_LEASES, NFT_VERIFY_TIMEOUT};
pub use self::routes::{
    MAX_BODY_BYTES, MAX_PAYMENT_HEADER_BYTES, MAX_SETTLING, QUOTE_SECONDS, SETTLE_WAIT_GRACE,
    VERIFY_TIMEOUT, reloading_answer,
};

use self::journal::{Journal, Receipt};
use self::limits::{InFlight, RateTable};
use self::policy::Policy;
use self::session::{Session, SessionId, SessionKeys};
use self::window::EntryWindows;
use super::facilitator::Facilitator;
use super::mechanism::BoxFuture;
use super::quote::QuoteKey;
use super::settings::FastlaneSettings;
use super::x402::{
    PaymentRequired, PaymentRequirements, ResourceInfo, SettleResponse, X402_VERSION,
};
use crate::admission::cookies::{FASTLANE, read_cookie};

/// The request header carrying a session token (for clients without cookies).
pub const SESSION_HEADER: &str = "concert-session";
/// The same, as a name a header map looks up without parsing it first.
const SESSION_HEADER_NAME: HeaderName = HeaderName::from_static(SESSION_HEADER);
/// The request header carrying the CSRF value of the session.
pub const CSRF_HEADER: &str = "x-concert-csrf";
/// The session cookie.
pub const SESSION_COOKIE: &str = FASTLANE;
/// Headers that belong to the fast lane and must never reach the origin. Together with the
/// cookie [`STRIPPED_COOKIE`], the request path removes them before proxying.
pub const STRIPPED_HEADERS: [&str; 5] = [
    "payment-signature",
    "payment-required",
    "payment-response",
    SESSION_HEADER,
    CSRF_HEADER,
];
/// The cookie to remove from proxied requests.
pub const STRIPPED_COOKIE: &str = FASTLANE;

/// Why a request is eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    /// A settled payment whose pass is running.
    Payment,
    /// A verified NFT holder's lease is running.
    Nft,
    /// The pass ended but its entry window is still open.
    Window,
}

/// An eligible request's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub kind: GrantKind,
    pub session: SessionId,
    /// Access lasts until here (unix seconds): the later of pass end and window end.
    pub expires: u64,
}

/// What [`FastLane::new`] needs.
pub struct FastLaneOptions<'a> {
    pub settings: FastlaneSettings,
    /// Where `fastlane.jsonl` and its lock live.
    pub data_dir: &'a Path,
    /// `CONCERT_ADMIT_SECRET`: signs sessions.
    pub admit_secret: &'a [u8],
    pub facilitator: Arc<dyn Facilitator>,
    /// `CONCERT_POLICY_TOKEN` (unused in test mode without a policy service).
    pub policy_token: &'a str,
    /// `-fastlane-entry-ttl`; zero turns entry windows off.
    pub entry_ttl: Duration,
    /// `-skip-url`, reported as `legacy_skip_url`.
    pub skip_url: &'a str,
    /// Prices offers by the visitor's place in the line (`-rate`, `-surge`); none: offers
    /// cost what `fastlane.json` says.
    pub line: Option<Arc<dyn LinePrice>>,
}

/// What the waiting room tells the fast lane when it prices an offer.
pub trait LinePrice: Send + Sync {
    /// What skipping the line costs the visitor presenting `headers` now, in multiples of an
    /// offer's price; 0 when it costs nothing.
    fn skip_cost(&self, headers: &HeaderMap) -> f64;
}

#[derive(Debug, thiserror::Error)]
pub enum FastLaneError {
    #[error("fast lane journal: {0}")]
    Journal(#[from] journal::OpenError),
    #[error("fast lane policy: {0}")]
    Policy(#[from] policy::PolicyError),
    #[error("fast lane: the gateway cannot settle offer {label:?} ({scheme} on {network})")]
    Unsupported {
        label: String,
        scheme: String,
        network: String,
    },
    #[error("fast lane: {0}")]
    Invalid(String),
}

/// How a settlement ended, as the waiting clients see it.
#[derive(Debug, Clone)]
pub(crate) enum SettleOutcome {
    Settled(Box<Receipt>),
    /// Settled, but the receipt could not be written.
    NotSaved,
    /// No final answer: the payment may or may not have moved.
    Unresolved,
}

type SharedSettle = Shared<BoxFuture<'static, SettleOutcome>>;

/// The fast lane's service.
pub struct FastLane {
    settings: FastlaneSettings,
    data_dir: std::path::PathBuf,
    /// `settings.origin` without a trailing slash.
    origin: String,
    keys: SessionKeys,
    journal: Arc<Journal>,
    policy: Policy,
    facilitator: Arc<dyn Facilitator>,
    windows: EntryWindows,
    rate: RateTable,
    in_flight: InFlight,
    /// Settlements under way by fingerprint: an identical retry waits on the same one.
    settling: Arc<Mutex<HashMap<String, SharedSettle>>>,
    /// The offers payable through x402 (those not reserved for deposits).
    payable: Vec<PaymentRequirements>,
    /// Their serialised form, compared byte for byte with a payment's `accepted`.
    payable_bytes: Vec<Vec<u8>>,
    /// Signs and recognises offers priced by the line.
    quotes: QuoteKey,
    line: Option<Arc<dyn LinePrice>>,
    /// The 402's resource, the same for every quote.
    resource: ResourceInfo,
    /// The 402 body and its base64 for `PAYMENT-REQUIRED`.
    payment_required: (String, String),
    config_json: String,
    secure_cookie: bool,
    /// NFT challenges and leases (memory only).
    nft: nft::NftState,
    /// Deposit intents' check pacing and the market cache.
    deposits: deposit::DepositState,
}

impl std::fmt::Debug for FastLane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastLane")
            .field("origin", &self.origin)
            .field("journal", &self.journal)
            .finish_non_exhaustive()
    }
}

impl FastLane {
    /// Opens the journal (taking its lock), builds the policy client and checks that the
    /// gateway can settle every offer.
    pub fn new(options: FastLaneOptions<'_>) -> Result<Arc<FastLane>, FastLaneError> {
        let settings = options.settings;
        let origin = settings.origin.trim_end_matches('/').to_owned();
        if settings.enabled && origin.is_empty() {
            return Err(FastLaneError::Invalid("origin is required".into()));
        }
        let supported = options.facilitator.supported();
        let payable: Vec<PaymentRequirements> = settings
            .offers
            .iter()
            .filter(|offer| !offer.deposit_only)
            .map(|offer| offer.requirements.clone())
            .collect();
        if settings.enabled {
            for offer in &settings.offers {
                let terms = &offer.requirements;
                let known = supported.iter().any(|kind| {
                    kind.x402_version == X402_VERSION
                        && kind.scheme == terms.scheme
                        && kind.network == terms.network
                });
                if !known {
                    return Err(FastLaneError::Unsupported {
                        label: offer.label.clone(),
                        scheme: terms.scheme.clone(),
                        network: terms.network.clone(),
                    });
                }
            }
        }
        let payable_bytes = payable
            .iter()
            .map(serde_json::to_vec)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| FastLaneError::Invalid(e.to_string()))?;
        let resource = ResourceInfo {
            url: format!("{origin}/_concert/payment"),
            description: Some(format!(
                "{} seconds of Concert fast-lane eligibility; capacity limits apply",
                settings.pass_seconds
            )),
            mime_type: Some("application/json".into()),
        };
        let required = PaymentRequired {
            x402_version: X402_VERSION,
            resource: resource.clone(),
            accepts: payable.clone(),
            error: None,
        };
        let required_json =
            serde_json::to_string(&required).map_err(|e| FastLaneError::Invalid(e.to_string()))?;
        let required_header = STANDARD.encode(required_json.as_bytes());
        // A lane that is off screens nothing, so it needs no policy service.
        let policy = Policy::new(
            &settings.policy_url,
            options.policy_token,
            settings.test_mode || !settings.enabled,
        )?;
        if settings.enabled && policy.skips() {
            tracing::warn!(
                "fast lane: test mode without policy_url, payers are not screened \
                 (the public config and status say test_mode)"
            );
        }
        let max_records = usize::try_from(settings.max_records).unwrap_or(usize::MAX);
        let journal = Arc::new(Journal::open(options.data_dir, max_records)?);
        let deposits = deposit::DepositState::from_journal(&journal);
        let windows = EntryWindows::new(options.entry_ttl.as_secs());
        windows.restore(options.data_dir, clock::now_unix());
        let config_json = if settings.enabled {
            public_config(&settings, &origin, options.skip_url)
        } else {
            disabled_config(options.skip_url)
        };
        Ok(Arc::new(FastLane {
            secure_cookie: origin.starts_with("https:"),
            origin,
            keys: SessionKeys::new(options.admit_secret),
            journal,
            policy,
            facilitator: options.facilitator,
            windows,
            data_dir: options.data_dir.to_owned(),
            rate: RateTable::default(),
            in_flight: InFlight::default(),
            settling: Arc::default(),
            payable,
            payable_bytes,
            quotes: QuoteKey::from_admit_secret(options.admit_secret),
            line: options.line,
            resource,
            payment_required: (required_json, required_header),
            config_json,
            nft: nft::NftState::default(),
            deposits,
            settings,
        }))
    }

    pub fn settings(&self) -> &FastlaneSettings {
        &self.settings
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// True when payers are not screened (test mode without a policy service).
    pub fn test_mode_unscreened(&self) -> bool {
        self.policy.skips()
    }

    /// Applies a new `-fastlane-entry-ttl` (live setting); zero turns windows off.
    pub fn set_entry_ttl(&self, ttl: Duration) {
        self.windows.set_ttl(ttl.as_secs());
    }

    /// Waits (at most `limit`) for the settlements under way to be journaled, then closes.
    pub async fn close_after_settlements(&self, limit: Duration) {
        if !self.wait_for_settlements(limit).await {
            tracing::warn!(
                "fast lane: closing with settlements still running; the gateway's journal has them"
            );
        }
        self.close();
    }

    /// Waits (at most `limit`) for the settlements under way now to be journaled; false when
    /// some were still running at the limit.
    pub async fn wait_for_settlements(&self, limit: Duration) -> bool {
        let running: Vec<SharedSettle> = self.settling.lock().values().cloned().collect();
        let all = futures_util::future::join_all(running);
        tokio::time::timeout(limit, all).await.is_ok()
    }

    /// Payments being settled now.
    pub fn settling(&self) -> usize {
        self.settling.lock().len()
    }

    /// Wallet requests being worked on now, and the most there may be at once.
    pub fn in_flight(&self) -> (usize, usize) {
        (self.in_flight.running(), limits::MAX_IN_FLIGHT)
    }

    /// Stops taking payments (shutdown): closes the journal, releasing its lock, and saves the
    /// open entry windows. A settlement finishing later is not journaled here (the gateway's
    /// own journal still has it), so prefer [`FastLane::close_after_settlements`].
    pub fn close(&self) {
        self.journal.close();
        if let Err(error) = self.windows.save(&self.data_dir, clock::now_unix()) {
            tracing::warn!(%error, "fast lane: entry windows not saved");
        }
    }

    /// The session a request presents (header first, then cookie), if its token verifies.
    pub fn session_of(&self, headers: &HeaderMap, now_unix: u64) -> Option<Session> {
        let token = session_token(headers)?;
        self.keys.verify(token, now_unix)
    }

    /// Whether the request may use the fast lane now: the journal is healthy, the request
    /// carries a valid session, and that session holds a running pass or an open entry
    /// window. The first eligible use of a pass opens its entry window.
    pub fn eligible(&self, headers: &HeaderMap, now_unix: u64) -> Option<Grant> {
        self.eligible_with_cookie(headers, read_cookie(headers, FASTLANE), now_unix)
    }

    /// [`FastLane::eligible`] for a caller that has read the session cookie already (the
    /// request path reads all its cookies in one pass).
    pub fn eligible_with_cookie(
        &self,
        headers: &HeaderMap,
        session_cookie: Option<&str>,
        now_unix: u64,
    ) -> Option<Grant> {
        // Most requests carry no session at all: settle that before anything else.
        let token = match headers.get(&SESSION_HEADER_NAME) {
            Some(value) => value.to_str().ok(),
            None => session_cookie,
        }
        .filter(|token| !token.is_empty())?;
        if !self.journal.is_healthy() || !self.settings.enabled {
            return None;
        }
        let session = self.keys.verify(token, now_unix)?;
        let paid = self.journal.best_settled(&session.id);
        if let Some((fingerprint, pass_end)) = &paid
            && *pass_end > now_unix
        {
            let window_end = self.windows.open_or_get(fingerprint, now_unix).unwrap_or(0);
            return Some(Grant {
                kind: GrantKind::Payment,
                session: session.id,
                expires: (*pass_end).max(window_end),
            });
        }
        // A session that never verified an NFT pays one counter read here.
        let lease = self.nft.lease(&session.id);
        if let Some(lease) = &lease
            && lease.expires > now_unix
        {
            let window_end = self
                .windows
                .open_or_get(&lease.window_key, now_unix)
                .unwrap_or(0);
            return Some(Grant {
                kind: GrantKind::Nft,
                session: session.id,
                expires: lease.expires.max(window_end),
            });
        }
        let paid_window = paid.and_then(|(fingerprint, _)| self.windows.get(&fingerprint));
        let nft_window = lease.and_then(|lease| self.windows.get(&lease.window_key));
        let window_end = paid_window.max(nft_window)?;
        (window_end > now_unix).then_some(Grant {
            kind: GrantKind::Window,
            session: session.id,
            expires: window_end,
        })
    }
}

/// The token a request presents: the `Concert-Session` header wins over the cookie.
fn session_token(headers: &HeaderMap) -> Option<&str> {
    match headers.get(SESSION_HEADER) {
        Some(value) => value.to_str().ok().filter(|t| !t.is_empty()),
        None => read_cookie(headers, FASTLANE).filter(|t| !t.is_empty()),
    }
}

/// `GET /_concert/config` when the lane is configured.
fn public_config(settings: &FastlaneSettings, origin: &str, skip_url: &str) -> String {
    let offers: Vec<serde_json::Value> = settings
        .offers
        .iter()
        .filter(|offer| !offer.deposit_only)
        .map(|offer| {
            serde_json::json!({
                "label": offer.label,
                "requirements": offer.requirements,
            })
        })
        .collect();
    serde_json::json!({
        "enabled": true,
        "origin": origin,
        "test_mode": settings.test_mode,
        "screening": !(settings.test_mode && settings.policy_url.is_empty()),
        "merchant": settings.merchant,
        "offers": offers,
        "collections": public_collections(settings),
        "pass_seconds": settings.pass_seconds,
        "nft_pass_seconds": settings.nft_pass_seconds,
        "terms_url": settings.terms_url,
        "privacy_url": settings.privacy_url,
        "refund_url": settings.refund_url,
        "deposit_networks": deposit::deposit_networks(&settings.offers),
        "legacy_skip_url": skip_url,
    })
    .to_string()
}

/// The collections whose holders are admitted, as the access page offers them.
fn public_collections(settings: &FastlaneSettings) -> Vec<serde_json::Value> {
    settings
        .collections
        .iter()
        .map(|collection| {
            let chain = collection.network.split(':').next().unwrap_or_default();
            serde_json::json!({
                "id": collection.id,
                "label": collection.label,
                "network": collection.network,
                "collection": collection.collection,
                // What the page must ask for: Solana needs the NFT's mint, Stellar takes
                // none, the others take an optional token id.
                "token": match chain {
                    "solana" => "required",
                    "stellar" => "none",
                    _ => "optional",
                },
            })
        })
        .collect()
}

/// `GET /_concert/config` when no lane is configured.
pub fn disabled_config(skip_url: &str) -> String {
    serde_json::json!({ "enabled": false, "legacy_skip_url": skip_url }).to_string()
}

pub(crate) fn settle_response_header(response: &SettleResponse) -> Option<String> {
    serde_json::to_vec(response)
        .ok()
        .map(|json| STANDARD.encode(json))
}
