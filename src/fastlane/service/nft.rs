//! NFT admission: `POST /nft/challenge` issues a message for the wallet to sign, `POST
//! /nft/verify` has the gateway check the signature and the holding, and a verified holder
//! gets a lease of `nft_pass_seconds`. Challenges and leases live in memory only.
//!
//! Both tables are bounded. The request path asks [`NftState::lease`] on every gated
//! request of a session that holds no pass, so a lane that granted no lease answers from a
//! counter without taking the lock, and otherwise it is one hash lookup.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http::{Response, StatusCode};
use parking_lot::Mutex;
use rand::RngCore as _;
use serde::Deserialize;

use super::FastLane;
use super::clock::format_rfc3339;
use super::policy::{Action, Screening};
use super::routes::{error, json};
use super::session::{Session, SessionId};
use crate::fastlane::facilitator::GatewayError;
use crate::fastlane::gateway::nft::MESSAGE_PREFIX;
use crate::fastlane::lookups::{NftClaim, NftVerdict};
use crate::fastlane::settings::Collection;
use crate::fastlane::x402::PaymentRequirements;

/// How long a challenge may be answered.
pub const CHALLENGE_SECONDS: u64 = 120;
/// Open challenges held at once, across all sessions.
pub const MAX_CHALLENGES: usize = 10_000;
/// Leases (with their entry windows' keys) held at once.
pub const MAX_LEASES: usize = 10_000;
/// Wallet addresses are 3 to 100 characters on every chain.
const ADDRESS_CHARS: std::ops::RangeInclusive<usize> = 3..=100;
/// Longest token id taken (an XRPL NFTokenID is 64 hex digits, a Solana mint 44 characters).
const MAX_TOKEN_CHARS: usize = 128;
/// Longest public key taken (hex of a 65-byte uncompressed key is 130).
const MAX_PUBLIC_KEY_CHARS: usize = 256;
/// Longest signature taken, base64 (DER ECDSA is at most 72 bytes; room for wallets that
/// wrap theirs).
const MAX_SIGNATURE_CHARS: usize = 1024;
/// How long the gateway may take for a verdict.
pub const NFT_VERIFY_TIMEOUT: Duration = Duration::from_secs(45);

/// One open challenge.
#[derive(Debug, Clone)]
struct Challenge {
    session: SessionId,
    expires: u64,
    message: String,
    network: String,
    wallet: String,
    collection: String,
    token: String,
}

/// A verified holder's lease. Kept past its end while its entry window may still be open.
#[derive(Debug, Clone)]
struct Lease {
    expires: u64,
    /// `nft/<expiry>` qualified by the session, the key of the lease's entry window.
    window_key: Arc<str>,
}

/// Open challenges and granted leases.
#[derive(Debug, Default)]
pub(super) struct NftState {
    /// Nonce → challenge, and each session's open nonce (one per session).
    challenges: Mutex<Challenges>,
    leases: Mutex<HashMap<SessionId, Lease>>,
    /// Leases in the table, read without the lock on the request path.
    lease_count: AtomicUsize,
}

#[derive(Debug, Default)]
struct Challenges {
    by_nonce: HashMap<String, Challenge>,
    by_session: HashMap<SessionId, String>,
}

/// What [`NftState::lease`] found for a session.
#[derive(Debug, Clone)]
pub(super) struct LeaseView {
    pub expires: u64,
    pub window_key: Arc<str>,
}

impl NftState {
    /// The session's lease, running or ended; `None` without a lock when no lease exists.
    pub(super) fn lease(&self, session: &SessionId) -> Option<LeaseView> {
        if self.lease_count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.leases.lock().get(session).map(|lease| LeaseView {
            expires: lease.expires,
            window_key: lease.window_key.clone(),
        })
    }

    /// Records a challenge as the session's only one. `false` when the table is full of
    /// live challenges.
    fn open_challenge(&self, nonce: String, challenge: Challenge, now: u64) -> bool {
        let mut table = self.challenges.lock();
        if let Some(previous) = table.by_session.remove(&challenge.session) {
            table.by_nonce.remove(&previous);
        }
        if table.by_nonce.len() >= MAX_CHALLENGES {
            let Challenges {
                by_nonce,
                by_session,
            } = &mut *table;
            by_nonce.retain(|_, open| open.expires > now);
            by_session.retain(|_, nonce| by_nonce.contains_key(nonce));
            if by_nonce.len() >= MAX_CHALLENGES {
                return false;
            }
        }
        table.by_session.insert(challenge.session, nonce.clone());
        table.by_nonce.insert(nonce, challenge);
        true
    }

    /// Takes the session's live challenge `nonce`: it is used up whatever the verdict. A
    /// nonce of another session is left alone (and not revealed to exist).
    fn take_challenge(&self, nonce: &str, session: &SessionId, now: u64) -> Option<Challenge> {
        let mut table = self.challenges.lock();
        let open = table.by_nonce.get(nonce)?;
        if open.session != *session {
            return None;
        }
        let challenge = table.by_nonce.remove(nonce)?;
        table.by_session.remove(session);
        (challenge.expires > now).then_some(challenge)
    }

    /// Grants (or renews) the session's lease until `expires`; `false` when the table is full
    /// of leases whose pass or window is still running.
    fn grant(&self, session: SessionId, expires: u64, window_ttl: u64, now: u64) -> bool {
        let mut leases = self.leases.lock();
        if !leases.contains_key(&session) && leases.len() >= MAX_LEASES {
            leases.retain(|_, lease| lease.expires.saturating_add(window_ttl) > now);
            if leases.len() >= MAX_LEASES {
                self.lease_count.store(leases.len(), Ordering::Relaxed);
                return false;
            }
        }
        let window_key: Arc<str> = Arc::from(format!("nft/{expires}/{}", hex::encode(session)));
        leases.insert(
            session,
            Lease {
                expires,
                window_key,
            },
        );
        self.lease_count.store(leases.len(), Ordering::Relaxed);
        true
    }

    #[cfg(test)]
    fn challenge_count(&self) -> usize {
        self.challenges.lock().by_nonce.len()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChallengeRequest {
    rule: String,
    address: String,
    #[serde(default)]
    token_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VerifyRequest {
    nonce: String,
    signature: String,
    #[serde(default)]
    public_key: String,
}

/// Characters that would let a value forge a line of the signed message.
fn breaks_lines(text: &str) -> bool {
    text.contains(['\r', '\n', '\0'])
}

/// Why a challenge request is refused: the 400 code.
fn check_request(request: &ChallengeRequest, rule: &Collection) -> Result<(), &'static str> {
    let fields = [&request.rule, &request.address, &request.token_id];
    if fields.iter().any(|field| breaks_lines(field)) {
        return Err("invalid_wallet_request");
    }
    let address_chars = request.address.chars().count();
    let address_ok =
        ADDRESS_CHARS.contains(&address_chars) && !request.address.contains(char::is_whitespace);
    if !address_ok
        || request.token_id.chars().count() > MAX_TOKEN_CHARS
        || request.token_id.trim() != request.token_id
    {
        return Err("invalid_wallet_request");
    }
    let chain = rule.network.split(':').next().unwrap_or_default();
    if chain == "solana" && request.token_id.is_empty() {
        return Err("nft_mint_required");
    }
    if chain == "stellar" && !request.token_id.is_empty() {
        return Err("token_not_supported_for_collection");
    }
    Ok(())
}

/// The challenge text, one `Label: value` line each, in the order the gateway checks them.
#[allow(clippy::too_many_arguments)]
fn challenge_message(
    origin: &str,
    network: &str,
    wallet: &str,
    collection: &str,
    token: &str,
    session: &str,
    nonce: &str,
    issued: u64,
    expires: u64,
) -> String {
    let line = |label: &str, value: &str| {
        if value.is_empty() {
            format!("{label}:")
        } else {
            format!("{label}: {value}")
        }
    };
    [
        MESSAGE_PREFIX.to_owned(),
        line("Origin", origin),
        line("Network", network),
        line("Wallet", wallet),
        line("Collection", collection),
        line("Token", token),
        line("Session", session),
        line("Nonce", nonce),
        line("Issued", &format_rfc3339(issued)),
        line("Expires", &format_rfc3339(expires)),
        line(
            "Purpose",
            "Proves that this wallet holds the NFT, for fast-lane entry. It authorises no payment or transfer.",
        ),
    ]
    .join("\n")
}

impl FastLane {
    /// `POST /nft/challenge {rule, address, token_id}`.
    pub(super) fn nft_challenge(&self, body: &[u8], session: &Session, now: u64) -> Response<Body> {
        let Ok(request) = serde_json::from_slice::<ChallengeRequest>(body) else {
            return error(StatusCode::BAD_REQUEST, "invalid_wallet_request");
        };
        let Some(rule) = self
            .settings
            .collections
            .iter()
            .find(|collection| collection.id == request.rule)
        else {
            return error(StatusCode::BAD_REQUEST, "unknown_collection_rule");
        };
        if let Err(code) = check_request(&request, rule) {
            return error(StatusCode::BAD_REQUEST, code);
        }
        let mut raw = [0u8; 24];
        rand::rng().fill_bytes(&mut raw);
        let nonce = URL_SAFE_NO_PAD.encode(raw);
        let expires = now.saturating_add(CHALLENGE_SECONDS);
        let message = challenge_message(
            &self.origin,
            &rule.network,
            &request.address,
            &rule.collection,
            &request.token_id,
            &session.id_hex(),
            &nonce,
            now,
            expires,
        );
        let challenge = Challenge {
            session: session.id,
            expires,
            message: message.clone(),
            network: rule.network.clone(),
            wallet: request.address,
            collection: rule.collection.clone(),
            token: request.token_id,
        };
        if !self.nft.open_challenge(nonce.clone(), challenge, now) {
            return error(StatusCode::SERVICE_UNAVAILABLE, "challenge_capacity");
        }
        let body = serde_json::json!({
            "nonce": nonce,
            "message": message,
            "expires": format_rfc3339(expires),
            "network": rule.network,
            "rule": rule.id,
        });
        json(StatusCode::OK, body.to_string())
    }

    /// `POST /nft/verify {nonce, signature, public_key}`.
    pub(super) async fn nft_verify(
        &self,
        body: &[u8],
        session: &Session,
        client: IpAddr,
        now: u64,
    ) -> Response<Body> {
        let Ok(request) = serde_json::from_slice::<VerifyRequest>(body) else {
            return error(StatusCode::BAD_REQUEST, "invalid_wallet_request");
        };
        if request.nonce.len() > 64
            || request.public_key.len() > MAX_PUBLIC_KEY_CHARS
            || request.signature.len() > MAX_SIGNATURE_CHARS
        {
            return error(StatusCode::BAD_REQUEST, "invalid_wallet_request");
        }
        let Ok(signature) = STANDARD.decode(request.signature.trim()) else {
            return error(StatusCode::BAD_REQUEST, "invalid_wallet_request");
        };
        let Some(challenge) = self.nft.take_challenge(&request.nonce, &session.id, now) else {
            return error(StatusCode::UNAUTHORIZED, "challenge_expired_or_used");
        };
        let claim = NftClaim {
            network: challenge.network.clone(),
            message: challenge.message,
            signature,
            public_key: request.public_key,
            wallet: challenge.wallet.clone(),
            collection: challenge.collection.clone(),
            token: challenge.token.clone(),
        };
        let verdict =
            tokio::time::timeout(NFT_VERIFY_TIMEOUT, self.facilitator.nft_verify(&claim)).await;
        let owner = match verdict {
            Ok(Ok(NftVerdict::Owner { owner, token }))
                if owner == claim.wallet && (claim.token.is_empty() || token == claim.token) =>
            {
                owner
            }
            Ok(Ok(NftVerdict::Owner { owner, token })) => {
                tracing::info!(%owner, %token, wallet = %claim.wallet, "fast lane: NFT proof names another holder or token");
                return error(StatusCode::FORBIDDEN, "ownership_not_verified");
            }
            Ok(Ok(NftVerdict::Refused(reason))) => {
                tracing::info!(%reason, wallet = %claim.wallet, network = %claim.network, "fast lane: NFT ownership not verified");
                return error(StatusCode::FORBIDDEN, "ownership_not_verified");
            }
            Ok(Err(GatewayError::Rejected(reason))) => {
                tracing::info!(%reason, wallet = %claim.wallet, "fast lane: NFT claim rejected by the gateway");
                return error(StatusCode::FORBIDDEN, "ownership_not_verified");
            }
            Ok(Err(failure)) => {
                tracing::warn!(error = %failure, network = %claim.network, "fast lane: NFT verification unavailable");
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "nft_verification_unavailable",
                );
            }
            Err(_) => {
                tracing::warn!(network = %claim.network, "fast lane: NFT verification timed out");
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "nft_verification_unavailable",
                );
            }
        };
        // The policy service sees what is being admitted in the shape of a payment's terms: a
        // zero amount of the collection, to the site.
        let requirements = PaymentRequirements {
            scheme: "nft".into(),
            network: claim.network.clone(),
            amount: "0".into(),
            asset: claim.collection.clone(),
            pay_to: self.origin.clone(),
            max_timeout_seconds: CHALLENGE_SECONDS,
            extra: (!claim.token.is_empty()).then(|| {
                let mut extra = serde_json::Map::new();
                extra.insert("token".into(), claim.token.clone().into());
                extra
            }),
        };
        let screening = Screening {
            network: &claim.network,
            payer: &owner,
            action: Action::Nft,
            requirements: &requirements,
            client_ip: Screening::client_ip(client),
            merchant: &self.settings.merchant,
        };
        if let Err(refusal) = self.policy.screen(&screening, now).await {
            tracing::info!(%refusal, %owner, "fast lane: NFT holder not approved");
            return error(StatusCode::FORBIDDEN, "policy_not_approved");
        }
        let expires = now.saturating_add(self.settings.nft_pass_seconds);
        if !self.nft.grant(session.id, expires, self.windows.ttl(), now) {
            return error(StatusCode::SERVICE_UNAVAILABLE, "lease_capacity");
        }
        let body = serde_json::json!({
            "eligible": true,
            "kind": "nft",
            "expires": format_rfc3339(expires),
            "network": claim.network,
            "owner": owner,
        });
        json(StatusCode::OK, body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collection(network: &str) -> Collection {
        Collection {
            id: "club".into(),
            label: "Club".into(),
            network: network.into(),
            collection: "c".into(),
        }
    }

    fn request(address: &str, token: &str) -> ChallengeRequest {
        ChallengeRequest {
            rule: "club".into(),
            address: address.into(),
            token_id: token.into(),
        }
    }

    #[test]
    fn requests_that_could_forge_a_line_or_miss_a_mint_are_refused() {
        let xrpl = collection("xrpl:1");
        assert_eq!(check_request(&request("rAddr", ""), &xrpl), Ok(()));
        assert_eq!(
            check_request(&request("rAd\ndr", ""), &xrpl),
            Err("invalid_wallet_request")
        );
        assert_eq!(
            check_request(&request("rAddr", "a\rb"), &xrpl),
            Err("invalid_wallet_request")
        );
        assert_eq!(
            check_request(&request("rA\0ddr", ""), &xrpl),
            Err("invalid_wallet_request")
        );
        assert_eq!(
            check_request(&request("ab", ""), &xrpl),
            Err("invalid_wallet_request")
        );
        assert_eq!(
            check_request(&request(&"a".repeat(101), ""), &xrpl),
            Err("invalid_wallet_request")
        );
        assert_eq!(
            check_request(&request("rAddr", &"1".repeat(129)), &xrpl),
            Err("invalid_wallet_request")
        );
        let solana = collection("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1");
        assert_eq!(
            check_request(&request("Wallet", ""), &solana),
            Err("nft_mint_required")
        );
        let stellar = collection("stellar:testnet");
        assert_eq!(
            check_request(&request("GWallet", "7"), &stellar),
            Err("token_not_supported_for_collection")
        );
    }

    #[test]
    fn the_message_passes_the_gateways_check() {
        let message = challenge_message(
            "https://shop.example",
            "xrpl:1",
            "rWallet",
            "rIssuer:7",
            "",
            "ab",
            "n",
            1_800_000_000,
            1_800_000_120,
        );
        let claim = NftClaim {
            network: "xrpl:1".into(),
            message: message.clone(),
            signature: vec![],
            public_key: String::new(),
            wallet: "rWallet".into(),
            collection: "rIssuer:7".into(),
            token: String::new(),
        };
        assert_eq!(crate::fastlane::gateway::nft::check_message(&claim), Ok(()));
        let labels: Vec<&str> = message
            .lines()
            .skip(1)
            .map(|line| line.split(':').next().unwrap_or_default())
            .collect();
        assert_eq!(
            labels,
            [
                "Origin",
                "Network",
                "Wallet",
                "Collection",
                "Token",
                "Session",
                "Nonce",
                "Issued",
                "Expires",
                "Purpose"
            ]
        );
        let other = NftClaim {
            token: "5".into(),
            ..claim
        };
        assert!(crate::fastlane::gateway::nft::check_message(&other).is_err());
    }

    fn challenge(session: u8, expires: u64) -> Challenge {
        Challenge {
            session: [session; 32],
            expires,
            message: String::new(),
            network: String::new(),
            wallet: String::new(),
            collection: String::new(),
            token: String::new(),
        }
    }

    #[test]
    fn a_challenge_is_one_per_session_single_use_and_bounded() {
        let state = NftState::default();
        assert!(state.open_challenge("a".into(), challenge(1, 200), 100));
        assert!(state.open_challenge("b".into(), challenge(1, 200), 100));
        assert_eq!(
            state.challenge_count(),
            1,
            "a new challenge replaces the old"
        );
        assert!(state.take_challenge("a", &[1; 32], 100).is_none());
        assert!(
            state.take_challenge("b", &[2; 32], 100).is_none(),
            "foreign"
        );
        assert!(state.take_challenge("b", &[1; 32], 100).is_some());
        assert!(state.take_challenge("b", &[1; 32], 100).is_none(), "used");
        assert!(state.open_challenge("c".into(), challenge(1, 200), 100));
        assert!(
            state.take_challenge("c", &[1; 32], 200).is_none(),
            "expired"
        );

        for i in 0..MAX_CHALLENGES {
            let mut session = [0u8; 32];
            session[..8].copy_from_slice(&(i as u64).to_le_bytes());
            let mut open = challenge(0, 200);
            open.session = session;
            assert!(state.open_challenge(format!("n{i}"), open, 100));
        }
        assert!(!state.open_challenge("full".into(), challenge(9, 300), 150));
        // Once the old ones have expired they make room.
        assert!(state.open_challenge("later".into(), challenge(9, 400), 250));
        assert_eq!(state.challenge_count(), 1);
    }

    #[test]
    fn leases_are_bounded_and_free_when_none_exists() {
        let state = NftState::default();
        assert!(state.lease(&[1; 32]).is_none());
        assert!(state.grant([1; 32], 130, 300, 100));
        let lease = state.lease(&[1; 32]).unwrap();
        assert_eq!(lease.expires, 130);
        assert!(lease.window_key.starts_with("nft/130/"));
        for i in 1..MAX_LEASES {
            let mut session = [0u8; 32];
            session[..8].copy_from_slice(&(i as u64).to_le_bytes());
            session[31] = 7;
            assert!(state.grant(session, 130, 300, 100));
        }
        assert!(!state.grant([9; 32], 160, 300, 130), "full, windows open");
        assert!(
            state.grant([1; 32], 160, 300, 130),
            "a renewal needs no room"
        );
        assert!(
            state.grant([9; 32], 500, 300, 431),
            "ended leases make room"
        );
    }
}
