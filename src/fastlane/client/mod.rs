//! `concert client`: buys a fast-lane pass from a Concert site from the command line, or proves
//! an NFT for one (`--nft`).
//!
//! A payment goes: `/config` (the merchant's terms, which must be accepted) → `/session` (a
//! header session, kept in the state file) → `/payment` without a header (the 402 and its
//! offers) → the offer for the network, checked against the amount and payee limits → the
//! signed payment, written to the state file and fsynced → `/payment` with it. An answer that
//! leaves the outcome open (a 503, a lost connection) is retried with the very same header,
//! never with a new payment; a later run picks the saved payment up again. A session that
//! expired while a payment was open cannot retry it, so the client stops and says so.

pub mod payload;
pub mod site;
mod state;
mod stellar;
mod wallet;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

pub use self::payload::parse_amount;
pub use self::site::check_origin;
pub use self::state::{ClientState, StateFile};
pub use self::wallet::{Family, Wallet};
use super::commands::CommandOutput;
use super::settings::{NetworkSettings, NetworksSettings, parse_networks};
use super::x402::{PAYMENT_REQUIRED, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired};
use crate::config::EnvSource;
use site::{Answer, Site};

pub const USAGE: &str = "\
usage: concert client [--nft RULE [--token ID]]

Buys a fast-lane pass from a Concert site (or, with --nft, proves an NFT of the collection
RULE, optionally the token ID) and prints the pass as JSON, with the session token to send as
the Concert-Session header.

Environment:
  CONCERT_CLIENT_NETWORK     the network to pay on (xrpl:1, stellar:testnet, hedera:testnet,
                             solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1, ...)
  CONCERT_ORIGIN             the site (https://shop.example; http only to loopback)
  CONCERT_ACCEPT_TERMS=yes   you accept the merchant's terms, privacy and refund policies
                             (without it the client shows them and stops)
  CONCERT_MAX_ATOMIC_AMOUNT  the most you pay, in atomic units (drops, stroops, tinybars,
                             lamports); a dearer offer is refused before anything is signed
  CONCERT_EXPECT_PAY_TO      optional: refuse an offer paying any other account
  CONCERT_NETWORKS_CONFIG    networks.json with the chain endpoints (rpc, mirror) the
                             client reads the account's sequence and the ledger from
  CONCERT_CLIENT_STATE       the state file (default: one per site and network under
                             $XDG_STATE_HOME/concert or ~/.local/state/concert)
  one key:                   CONCERT_CLIENT_XRP_SEED, CONCERT_CLIENT_XLM_SECRET,
                             CONCERT_CLIENT_HBAR_ACCOUNT + CONCERT_CLIENT_HBAR_KEY,
                             CONCERT_CLIENT_SOL_KEY

The signed payment is saved in the state file before it is sent. When its outcome is not
known (a 503, a lost answer), run the client again: it sends the same payment, never a new
one. Do not pay by other means while a payment is open.";

/// Variables read here (the key variables live in `wallet`).
const NETWORK: &str = "CONCERT_CLIENT_NETWORK";
const ORIGIN: &str = "CONCERT_ORIGIN";
const NETWORKS_CONFIG: &str = "CONCERT_NETWORKS_CONFIG";
const STATE: &str = "CONCERT_CLIENT_STATE";
const MAX_AMOUNT: &str = "CONCERT_MAX_ATOMIC_AMOUNT";
const EXPECT_PAY_TO: &str = "CONCERT_EXPECT_PAY_TO";
const ACCEPT_TERMS: &str = "CONCERT_ACCEPT_TERMS";

/// Largest networks.json read.
const MAX_NETWORKS_BYTES: u64 = 1024 * 1024;
/// The first line of every NFT admission challenge.
const NFT_MESSAGE_FIRST_LINE: &str = "Concert NFT admission v1";

/// How often, and how patiently, an open payment is sent again within one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Sends of the saved payment in one run, the first included.
    pub attempts: u32,
    pub first_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 8,
            first_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// What `concert client` was asked on its command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientArgs {
    /// `--nft RULE`: prove an NFT instead of paying.
    pub nft_rule: Option<String>,
    /// `--token ID`: the token to prove (with `--nft`).
    pub token: Option<String>,
}

impl ClientArgs {
    /// `Ok(None)`: help was asked.
    pub fn parse(args: &[String]) -> Result<Option<ClientArgs>, String> {
        let mut parsed = ClientArgs::default();
        let mut index = 0;
        while let Some(arg) = args.get(index) {
            index += 1;
            let (name, inline) = match arg.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (arg.as_str(), None),
            };
            let slot = match name {
                "-h" | "-help" | "--help" => return Ok(None),
                "--nft" | "-nft" => &mut parsed.nft_rule,
                "--token" | "-token" => &mut parsed.token,
                _ => return Err(format!("unknown argument {arg:?}")),
            };
            let value = match inline {
                Some(value) => value,
                None => {
                    let value = args
                        .get(index)
                        .ok_or_else(|| format!("{name} needs a value"))?;
                    index += 1;
                    value.clone()
                }
            };
            if value.is_empty() {
                return Err(format!("{name} needs a value"));
            }
            *slot = Some(value);
        }
        if parsed.token.is_some() && parsed.nft_rule.is_none() {
            return Err("--token goes with --nft".into());
        }
        Ok(Some(parsed))
    }
}

/// The client's settings, from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    pub network: String,
    pub family: Family,
    pub origin: String,
    pub networks_config: Option<PathBuf>,
    pub state_path: PathBuf,
    pub max_amount: Option<u64>,
    pub expect_pay_to: Option<String>,
    pub accept_terms: bool,
}

impl ClientSettings {
    pub fn from_env(env: &dyn EnvSource) -> Result<ClientSettings, String> {
        let given = |name: &str| {
            env.var(name)
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        let network = given(NETWORK).ok_or_else(|| {
            format!("{NETWORK} is not set: name the network to pay on (xrpl:1, stellar:testnet, …)")
        })?;
        let family = Family::of(&network)
            .ok_or_else(|| format!("{NETWORK} {network:?} is not a network Concert sells on"))?;
        let origin = given(ORIGIN)
            .ok_or_else(|| format!("{ORIGIN} is not set: name the site (https://shop.example)"))?;
        let origin = check_origin(&origin)?;
        let max_amount = match given(MAX_AMOUNT) {
            None => None,
            Some(text) => Some(parse_amount(&text).map_err(|_| {
                format!("{MAX_AMOUNT} {text:?} is not a positive whole number of atomic units")
            })?),
        };
        let state_path = match given(STATE) {
            Some(path) => PathBuf::from(path),
            None => default_state_path(env, &origin, &network)?,
        };
        Ok(ClientSettings {
            network,
            family,
            origin,
            networks_config: given(NETWORKS_CONFIG).map(PathBuf::from),
            state_path,
            max_amount,
            expect_pay_to: given(EXPECT_PAY_TO),
            accept_terms: env
                .var(ACCEPT_TERMS)
                .is_some_and(|value| value.trim().eq_ignore_ascii_case("yes")),
        })
    }
}

/// One state file per site and network, so paying two sites never mixes their payments.
fn default_state_path(env: &dyn EnvSource, origin: &str, network: &str) -> Result<PathBuf, String> {
    let base = env
        .var("XDG_STATE_HOME")
        .filter(|dir| dir.starts_with('/'))
        .map(PathBuf::from)
        .or_else(|| {
            env.var("HOME")
                .filter(|home| !home.is_empty())
                .map(|home| Path::new(&home).join(".local/state"))
        })
        .ok_or_else(|| format!("{STATE} is not set and there is no HOME to keep the state in"))?;
    let digest = Sha256::digest(format!("{origin} {network}").as_bytes());
    let name = format!("client-{}.json", hex::encode(&digest[..8]));
    Ok(base.join("concert").join(name))
}

/// `concert client …`: runs the client and reports what it did.
pub fn run(args: &[String], env: &dyn EnvSource) -> CommandOutput {
    let parsed = match ClientArgs::parse(args) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => return CommandOutput::done(format!("{USAGE}\n"), ""),
        Err(message) => return CommandOutput::usage(format!("{message}\n{USAGE}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return CommandOutput::failed(format!("async runtime: {e}")),
    };
    match runtime.block_on(run_client(&parsed, env, RetryPolicy::default())) {
        Ok(report) => CommandOutput::done(format!("{report}\n"), ""),
        Err(message) => CommandOutput::failed(message),
    }
}

/// The whole run; `Ok` carries the JSON printed on success.
pub async fn run_client(
    args: &ClientArgs,
    env: &dyn EnvSource,
    retry: RetryPolicy,
) -> Result<String, String> {
    let settings = ClientSettings::from_env(env)?;
    let wallet = Wallet::from_env(env, settings.family)?;
    if args.nft_rule.is_none() && settings.max_amount.is_none() {
        return Err(format!(
            "{MAX_AMOUNT} is not set: set the most you will pay, in atomic units (drops, stroops, tinybars or lamports)"
        ));
    }
    let networks = read_networks(settings.networks_config.as_deref())?;
    let mut state = StateFile::open(&settings.state_path, &settings.origin, &settings.network)?;
    let site = Site::new(&settings.origin)?;
    let config = site.get("/config").await?;
    if config.status != 200 {
        return Err(format!(
            "{}: the fast lane's configuration is not available ({})",
            settings.origin,
            config.error_code()
        ));
    }
    let config = config.json();
    if config.get("enabled") != Some(&Value::Bool(true)) {
        return Err(format!("{}: this site has no fast lane", settings.origin));
    }
    let terms = describe_terms(&config);
    eprintln!("{terms}");
    if !settings.accept_terms {
        return Err(format!(
            "{ACCEPT_TERMS} is not yes: read the terms above and set {ACCEPT_TERMS}=yes to accept them"
        ));
    }
    let mut session = Session::open(&site, &mut state).await?;
    match &args.nft_rule {
        Some(rule) => {
            nft(
                &site,
                &settings,
                &wallet,
                &session,
                rule,
                args.token.as_deref(),
            )
            .await
        }
        None => {
            let network_settings = networks
                .as_ref()
                .and_then(|networks| networks.get(&settings.network));
            buy(
                &site,
                &settings,
                &wallet,
                &mut session,
                &mut state,
                network_settings,
                retry,
            )
            .await
        }
    }
}

fn read_networks(path: Option<&Path>) -> Result<Option<NetworksSettings>, String> {
    let Some(path) = path else {
        return Ok(None);
    };
    let file = std::fs::File::open(path)
        .map_err(|e| format!("{NETWORKS_CONFIG} {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    use std::io::Read as _;
    file.take(MAX_NETWORKS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{NETWORKS_CONFIG} {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_NETWORKS_BYTES {
        return Err(format!("{NETWORKS_CONFIG} {}: too large", path.display()));
    }
    let networks = parse_networks(path, &bytes)?;
    for (network, settings) in &networks {
        for endpoint in [&settings.rpc, &settings.horizon, &settings.mirror] {
            if !endpoint.is_empty() {
                check_origin_like(endpoint).map_err(|why| {
                    format!("{NETWORKS_CONFIG} {}: {network}: {why}", path.display())
                })?;
            }
        }
    }
    Ok(Some(networks))
}

/// A chain endpoint is reached like the site: https, or http only to a loopback address.
fn check_origin_like(endpoint: &str) -> Result<(), String> {
    let parsed = url::Url::parse(endpoint).map_err(|_| format!("{endpoint:?} is not a URL"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    if parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback) {
        Ok(())
    } else {
        Err(format!(
            "{endpoint:?} must be https (plain http only to a loopback address)"
        ))
    }
}

/// The merchant and the policies a buyer accepts, as the site publishes them.
fn describe_terms(config: &Value) -> String {
    let text = |key: &str| {
        config
            .get(key)
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
            .unwrap_or("(not given)")
            .to_owned()
    };
    format!(
        "Merchant: {}\nTerms:    {}\nPrivacy:  {}\nRefunds:  {}",
        text("merchant"),
        text("terms_url"),
        text("privacy_url"),
        text("refund_url")
    )
}

/// The header session the client works in.
struct Session {
    token: String,
    csrf: String,
}

impl Session {
    /// Renews the saved session (or starts one) and saves its token. A saved session that has
    /// expired comes back as a new one; with a payment open that is the end of the road,
    /// because only the session that made a payment can retry it.
    async fn open(site: &Site, state: &mut StateFile) -> Result<Session, String> {
        let saved = state.state.session.clone();
        let mut headers = Vec::new();
        if !saved.is_empty() {
            headers.push(("concert-session", saved.as_str()));
        }
        let answer = site.post("/session", &headers, "{}").await?;
        if answer.status != 200 {
            return Err(format!(
                "{}: no session ({})",
                site.origin(),
                answer.error_code()
            ));
        }
        let body = answer.json();
        let (Some(token), Some(csrf)) = (
            body.get("session").and_then(Value::as_str),
            body.get("csrf").and_then(Value::as_str),
        ) else {
            return Err(format!(
                "{}: the session answer is malformed",
                site.origin()
            ));
        };
        let renewed = !saved.is_empty() && session_nonce(&saved) == session_nonce(token);
        if !saved.is_empty() && !renewed && !state.state.payment.is_empty() {
            return Err(format!(
                "the session in {} expired while its payment's outcome was still open, and only that session can retry it. \
                 Nothing was sent. Do not pay again: keep the state file and contact the merchant about the payment",
                state.path().display()
            ));
        }
        state.state.session = token.to_owned();
        state.save()?;
        Ok(Session {
            token: token.to_owned(),
            csrf: csrf.to_owned(),
        })
    }

    fn headers(&self) -> [(&str, &str); 2] {
        [
            ("concert-session", self.token.as_str()),
            ("x-concert-csrf", self.csrf.as_str()),
        ]
    }
}

/// The part of a session token that names the session (`nonce.expiry.mac`).
fn session_nonce(token: &str) -> &str {
    token.split('.').next().unwrap_or_default()
}

async fn buy(
    site: &Site,
    settings: &ClientSettings,
    wallet: &Wallet,
    session: &mut Session,
    state: &mut StateFile,
    network_settings: Option<&NetworkSettings>,
    retry: RetryPolicy,
) -> Result<String, String> {
    let fresh = state.state.payment.is_empty();
    if fresh {
        let probe = site.post("/payment", &session.headers(), "").await?;
        if probe.status == 200 {
            eprintln!("This session already holds a pass; nothing was paid.");
            return Ok(pass_report(&probe.json(), &session.token));
        }
        if probe.status != 402 {
            return Err(format!(
                "{}: the fast lane takes no payment now ({})",
                site.origin(),
                probe.error_code()
            ));
        }
        let required = payment_required(&probe)?;
        let accepted = required
            .accepts
            .iter()
            .find(|offer| offer.network == settings.network)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "{} sells no pass on {} (offers: {})",
                    site.origin(),
                    settings.network,
                    required
                        .accepts
                        .iter()
                        .map(|offer| offer.network.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        let amount = parse_amount(&accepted.amount)?;
        if let Some(most) = settings.max_amount
            && amount > most
        {
            return Err(format!(
                "the offer asks {amount} atomic units on {}, more than {MAX_AMOUNT} ({most}); nothing was signed",
                settings.network
            ));
        }
        if let Some(expected) = &settings.expect_pay_to
            && *expected != accepted.pay_to
        {
            return Err(format!(
                "the offer pays {}, not {EXPECT_PAY_TO} ({expected}); nothing was signed",
                accepted.pay_to
            ));
        }
        eprintln!(
            "Paying {amount} atomic units of {} on {} to {} from {}.",
            accepted.asset,
            accepted.network,
            accepted.pay_to,
            wallet.address()
        );
        let headers = session.headers();
        let chain = payload::Chain {
            network: &settings.network,
            settings: network_settings,
            site: Some(site),
            session_headers: &headers,
        };
        let signed = payload::build(wallet, &accepted, &chain).await?;
        let payment = PaymentPayload {
            x402_version: super::x402::X402_VERSION,
            resource: Some(required.resource.clone()),
            accepted,
            payload: signed,
            extensions: None,
        };
        let json = serde_json::to_vec(&payment).map_err(|e| e.to_string())?;
        // Saved before it is sent: whatever happens next, this exact payment is what is
        // retried, and no second one is made.
        state.state.payment = STANDARD.encode(json);
        state.save()?;
    } else {
        eprintln!(
            "A payment saved in {} has no known outcome yet; sending that same payment again.",
            state.path().display()
        );
    }
    send_saved(site, session, state, retry, fresh).await
}

/// Sends the saved payment until its outcome is known or the attempts run out. `fresh`: the
/// payment was signed in this run, so before the first answer no site has seen it.
async fn send_saved(
    site: &Site,
    session: &mut Session,
    state: &mut StateFile,
    retry: RetryPolicy,
    fresh: bool,
) -> Result<String, String> {
    let header = state.state.payment.clone();
    let mut delay = retry.first_delay;
    let mut last = String::new();
    for attempt in 1..=retry.attempts.max(1) {
        if attempt > 1 {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(retry.max_delay);
        }
        let mut headers = session.headers().to_vec();
        headers.push((PAYMENT_SIGNATURE, header.as_str()));
        let answer = match site.post("/payment", &headers, "").await {
            Ok(answer) => answer,
            Err(lost) => {
                // The payment may have arrived: only the same payment is ever sent again.
                eprintln!("No answer ({lost}); retrying the same payment.");
                last = lost;
                continue;
            }
        };
        let code = answer.error_code();
        match (answer.status, code.as_str()) {
            (200, _) => {
                state.state.payment.clear();
                state.save()?;
                return Ok(pass_report(&answer.json(), &session.token));
            }
            (409, "session_renewal_required") | (401, _) => {
                *session = Session::open(site, state).await?;
            }
            (403, "csrf_required" | "origin_rejected") => {
                *session = Session::open(site, state).await?;
            }
            (503, _) | (409, "request_in_progress") | (429, _) => {
                if let Some(seconds) = answer.retry_after() {
                    delay = Duration::from_secs(seconds).min(retry.max_delay);
                }
                eprintln!("The payment's outcome is open ({code}); retrying the same payment.");
            }
            (409, "previous_payment_unresolved_do_not_pay_again")
            | (409, "payment_already_redeemed") => {
                return Err(format!(
                    "the site refuses this payment ({code}). Do not pay again: keep {} and contact the merchant",
                    state.path().display()
                ));
            }
            (400 | 402 | 403 | 404 | 413, _) if fresh && attempt == 1 => {
                // Refused on its first arrival, before the site kept any record of it: it was
                // not taken and never will be, so the saved copy is dropped and the next run
                // starts afresh.
                state.state.payment.clear();
                state.save()?;
                let why = if code == "quote_expired" {
                    "the price quoted for this session's place in the line ended before the payment arrived".to_owned()
                } else {
                    format!("the site refused the payment ({code})")
                };
                return Err(format!(
                    "{why}; it was not taken. Run the client again to pay afresh"
                ));
            }
            (400 | 402 | 403 | 404 | 413, _) => {
                // The site may have seen this payment before and now refuses it (its offers
                // changed, say): whether it was charged is for the merchant to say.
                return Err(format!(
                    "the site now refuses this payment ({code}), which it may already have received. Do not pay again: \
                     contact the merchant. The signed payment stays in {}; remove the file only once the merchant confirms it was not charged",
                    state.path().display()
                ));
            }
            _ => {
                eprintln!("Unexpected answer ({code}); retrying the same payment.");
            }
        }
        last = code;
    }
    Err(format!(
        "the payment's outcome is still open after {} attempts (last: {last}). Do not pay again: run the client later to retry the same payment, saved in {}",
        retry.attempts.max(1),
        state.path().display()
    ))
}

/// The offers of a 402: `PAYMENT-REQUIRED` when present, else the body.
fn payment_required(answer: &Answer) -> Result<PaymentRequired, String> {
    let from_header = answer
        .headers
        .get(PAYMENT_REQUIRED)
        .and_then(|value| STANDARD.decode(value.as_bytes()).ok());
    let bytes = from_header.unwrap_or_else(|| answer.body.clone());
    serde_json::from_slice(&bytes).map_err(|e| format!("the 402 does not read as x402 v2: {e}"))
}

/// What is printed for a pass: the site's answer and the session that holds it.
fn pass_report(answer: &Value, session: &str) -> String {
    let mut report = json!({ "session": session });
    for key in ["eligible", "expires", "receipt", "kind"] {
        if let Some(value) = answer.get(key) {
            report[key] = value.clone();
        }
    }
    report.to_string()
}

/// `--nft RULE [--token ID]`: asks for a challenge, signs it with the wallet key, and has the
/// site verify it.
async fn nft(
    site: &Site,
    settings: &ClientSettings,
    wallet: &Wallet,
    session: &Session,
    rule: &str,
    token: Option<&str>,
) -> Result<String, String> {
    let address = wallet.address();
    let request = json!({
        "rule": rule,
        "address": address,
        "token_id": token.unwrap_or_default(),
    });
    let answer = site
        .post("/nft/challenge", &session.headers(), &request.to_string())
        .await?;
    if answer.status != 200 {
        return Err(format!(
            "{}: no NFT challenge for {rule:?} ({})",
            site.origin(),
            answer.error_code()
        ));
    }
    let challenge = answer.json();
    let (Some(nonce), Some(message)) = (
        challenge.get("nonce").and_then(Value::as_str),
        challenge.get("message").and_then(Value::as_str),
    ) else {
        return Err("the NFT challenge is malformed".into());
    };
    check_challenge(message, &settings.origin, &settings.network, &address)?;
    let signature = wallet.sign_message(message.as_bytes())?;
    let proof = json!({
        "nonce": nonce,
        "signature": STANDARD.encode(signature),
        "public_key": wallet.nft_public_key(),
    });
    let answer = site
        .post("/nft/verify", &session.headers(), &proof.to_string())
        .await?;
    if answer.status != 200 {
        return Err(format!(
            "{}: the NFT was not accepted ({})",
            site.origin(),
            answer.error_code()
        ));
    }
    Ok(pass_report(&answer.json(), &session.token))
}

/// Signs only an admission challenge for this site, network and wallet: a message that could
/// be anything else (a transaction, another site's challenge) is refused.
pub fn check_challenge(
    message: &str,
    origin: &str,
    network: &str,
    address: &str,
) -> Result<(), String> {
    let mut lines = message.lines();
    let wanted = [
        format!("Origin: {origin}"),
        format!("Network: {network}"),
        format!("Wallet: {address}"),
    ];
    let is_challenge = lines.next() == Some(NFT_MESSAGE_FIRST_LINE)
        && wanted
            .iter()
            .all(|line| message.lines().any(|have| have == line))
        && message.len() <= 4096;
    if is_challenge {
        Ok(())
    } else {
        Err(format!(
            "the site's challenge is not an NFT admission challenge for {origin}, {network} and {address}; nothing was signed"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn arguments_name_an_nft_rule_and_token_or_nothing() {
        assert_eq!(ClientArgs::parse(&[]), Ok(Some(ClientArgs::default())));
        assert_eq!(ClientArgs::parse(&args(&["--help"])), Ok(None));
        let parsed = ClientArgs::parse(&args(&["--nft", "punks", "--token=7"]))
            .expect("parses")
            .expect("not help");
        assert_eq!(parsed.nft_rule.as_deref(), Some("punks"));
        assert_eq!(parsed.token.as_deref(), Some("7"));
        for wrong in [&["--token", "7"][..], &["--nft"], &["--nft="], &["pay"]] {
            assert!(ClientArgs::parse(&args(wrong)).is_err(), "{wrong:?}");
        }
    }

    #[test]
    fn only_an_admission_challenge_for_this_site_network_and_wallet_is_signed() {
        let message = "Concert NFT admission v1\nOrigin: https://shop.example\nNetwork: xrpl:1\nWallet: rAbc\nNonce: n";
        assert!(check_challenge(message, "https://shop.example", "xrpl:1", "rAbc").is_ok());
        assert!(check_challenge(message, "https://other.example", "xrpl:1", "rAbc").is_err());
        assert!(check_challenge(message, "https://shop.example", "xrpl:0", "rAbc").is_err());
        assert!(check_challenge(message, "https://shop.example", "xrpl:1", "rXyz").is_err());
        let not_a_challenge = message.replacen("Concert NFT admission v1", "Payment", 1);
        assert!(
            check_challenge(&not_a_challenge, "https://shop.example", "xrpl:1", "rAbc").is_err()
        );
    }

    #[test]
    fn a_renewed_token_keeps_its_nonce() {
        assert_eq!(session_nonce("abc.1700000000.mac"), "abc");
        assert_ne!(session_nonce("abc.1.m"), session_nonce("abd.1.m"));
    }

    #[test]
    fn origins_must_be_https_or_loopback_http_without_a_path() {
        assert_eq!(
            check_origin("https://shop.example/").as_deref(),
            Ok("https://shop.example")
        );
        assert!(check_origin("http://127.0.0.1:8080").is_ok());
        assert!(check_origin("http://localhost:8080").is_ok());
        for wrong in [
            "http://shop.example",
            "https://shop.example/pay",
            "https://user:pw@shop.example",
            "ftp://shop.example",
            "shop.example",
        ] {
            assert!(check_origin(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn the_default_state_is_one_file_per_site_and_network() {
        let env: std::collections::HashMap<String, String> =
            std::collections::HashMap::from([("HOME".to_owned(), "/home/buyer".to_owned())]);
        let a = default_state_path(&env, "https://a.example", "xrpl:1").expect("path");
        let b = default_state_path(&env, "https://b.example", "xrpl:1").expect("path");
        let c = default_state_path(&env, "https://a.example", "xrpl:0").expect("path");
        assert!(a.starts_with("/home/buyer/.local/state/concert"));
        assert!(a != b && a != c);
    }
}
