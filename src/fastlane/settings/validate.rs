//! Reading and checking `fastlane.json` and `networks.json`. Both are read whole and strictly
//! (unknown keys refused), then every rule is checked and every broken one reported, each
//! naming the file, the key path (`offers[1].requirements.payTo`) and the value found. Secrets
//! are only ever named by their variable, never printed.

use std::fmt::{self, Debug};
use std::net::IpAddr;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::addresses::{
    StrKey, is_hedera_der_secret, is_hedera_id, is_solana_key, is_strkey, is_xrpl_address,
};
use super::{FastlaneSettings, NetworkSettings, NetworksSettings, Offer};
use crate::config::EnvSource;

pub const FASTLANE_FILE: &str = "fastlane.json";
pub const NETWORKS_FILE: &str = "networks.json";
/// Neither file may be larger than this.
pub const MAX_FILE_BYTES: usize = 1 << 20;

const SOLANA_MAINNET: &str = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";
const SOLANA_DEVNET: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

/// Every network an offer, collection or listing may name.
pub const KNOWN_NETWORKS: &[&str] = &[
    "xrpl:0",
    "xrpl:1",
    "xrpl:2",
    "stellar:pubnet",
    "stellar:testnet",
    "hedera:mainnet",
    "hedera:testnet",
    SOLANA_MAINNET,
    SOLANA_DEVNET,
];

/// The networks where payments are real money; test mode refuses them.
pub fn is_mainnet(network: &str) -> bool {
    matches!(
        network,
        "xrpl:0" | "stellar:pubnet" | "hedera:mainnet" | SOLANA_MAINNET
    )
}

const MAX_OFFERS: usize = 8;
const MAX_COLLECTIONS: usize = 32;
const MAX_LISTINGS: usize = 64;
const MAX_MERCHANT_CHARS: usize = 120;
const MAX_COLLECTION_ID_CHARS: usize = 64;
const XRPL_MAX_FEE_DROPS: u64 = 1_000;
const STELLAR_MAX_FEE_STROOPS: u64 = 50_000;
const HEDERA_MAX_FEE_TINYBARS: u64 = 100_000_000;
const STELLAR_FEE_SECRET: &str = "CONCERT_STELLAR_FEE_SECRET";
const HEDERA_FEE_SECRET: &str = "CONCERT_HEDERA_FEE_SECRET";

/// Native XLM as a Stellar asset contract, per network.
fn stellar_native_asset(network: &str) -> Option<&'static str> {
    match network {
        "stellar:pubnet" => Some("CAS3J7GYLGXMF6TDJBBYYSE3HQ6BBSMLNUQ34T6TZMYMW2EVH34XOWMA"),
        "stellar:testnet" => Some("CDLZFC3SYJYDZT7K67VZ75HPJVIEUVNIXF47ZG2FB2RMQQVU2HHGCYSC"),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chain {
    Xrpl,
    Stellar,
    Hedera,
    Solana,
}

fn chain_of(network: &str) -> Option<Chain> {
    if !KNOWN_NETWORKS.contains(&network) {
        return None;
    }
    Some(match network.split(':').next() {
        Some("xrpl") => Chain::Xrpl,
        Some("stellar") => Chain::Stellar,
        Some("hedera") => Chain::Hedera,
        _ => Chain::Solana,
    })
}

/// The broken rules of one file.
struct Problems {
    file: String,
    found: Vec<String>,
}

impl Problems {
    fn new(file: &Path) -> Problems {
        Problems {
            file: file.display().to_string(),
            found: Vec::new(),
        }
    }

    fn add(&mut self, key: impl fmt::Display, value: impl Debug, rule: impl fmt::Display) {
        self.found
            .push(format!("{}: {key} = {value:?}: {rule}", self.file));
    }

    /// A problem whose value must not be shown (a secret).
    fn add_hidden(&mut self, key: impl fmt::Display, rule: impl fmt::Display) {
        self.found.push(format!("{}: {key}: {rule}", self.file));
    }
}

fn joined(problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Decodes a whole file strictly: an object at the top, no trailing data, no duplicate or
/// unknown keys; errors name the key path.
fn parse_file<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, String> {
    let shown = path.display();
    if bytes.len() > MAX_FILE_BYTES {
        return Err(format!(
            "{shown}: {} bytes is larger than the 1 MiB a settings file may be",
            bytes.len()
        ));
    }
    // serde's derived decoders would also take a struct written as an array of its fields.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(format!("{shown}: expected a JSON object"));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let key = error.path().to_string();
        let inner = error.into_inner();
        if key == "." || key.is_empty() {
            format!("{shown}: {inner}")
        } else {
            format!("{shown}: {key}: {inner}")
        }
    })?;
    deserializer
        .end()
        .map_err(|e| format!("{shown}: data after the JSON object: {e}"))?;
    Ok(parsed)
}

/// Parses `fastlane.json` (≤ 1 MiB, unknown keys refused). Rules are checked by
/// [`validate_fastlane`].
pub fn parse_fastlane(path: &Path, bytes: &[u8]) -> Result<FastlaneSettings, String> {
    parse_file(path, bytes)
}

/// Parses `networks.json`: a map of network to its settings; numbers may be quoted.
pub fn parse_networks(path: &Path, bytes: &[u8]) -> Result<NetworksSettings, String> {
    parse_file(path, bytes)
}

/// Reads, parses and checks both files. `env` supplies the fee secrets the networks need.
pub fn load_files(
    fastlane_path: &Path,
    networks_path: &Path,
    env: &dyn EnvSource,
) -> Result<(FastlaneSettings, NetworksSettings), String> {
    let read = |path: &Path| -> Result<Vec<u8>, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut bytes = Vec::new();
        // One byte past the limit is enough to know it is too large.
        std::io::Read::read_to_end(
            &mut std::io::Read::take(file, MAX_FILE_BYTES as u64 + 1),
            &mut bytes,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(bytes)
    };
    let fastlane = parse_fastlane(fastlane_path, &read(fastlane_path)?)?;
    let networks = parse_networks(networks_path, &read(networks_path)?)?;
    validate_networks(networks_path, &networks, fastlane.test_mode, Some(env))?;
    validate_fastlane(fastlane_path, &fastlane, networks_path, &networks)?;
    Ok((fastlane, networks))
}

fn is_loopback_host(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(name) => name.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => IpAddr::V4(*ip).is_loopback(),
        url::Host::Ipv6(ip) => IpAddr::V6(*ip).is_loopback(),
    }
}

/// Why `text` is not an https URL (loopback http allowed when `loopback_http`), or `None`.
fn url_problem(text: &str, loopback_http: bool, origin_only: bool) -> Option<String> {
    let parsed = match url::Url::parse(text) {
        Ok(parsed) => parsed,
        Err(e) => return Some(format!("not a URL ({e})")),
    };
    let Some(host) = parsed.host() else {
        return Some("has no host".to_string());
    };
    match parsed.scheme() {
        "https" => {}
        "http" if loopback_http && is_loopback_host(&host) => {}
        "http" if loopback_http => return Some("http is allowed only on a loopback host".into()),
        _ => return Some("must be an https URL".into()),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Some("must not carry credentials".into());
    }
    if origin_only
        && (parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some())
    {
        return Some("must be an origin (scheme, host and port) with no path".into());
    }
    None
}

/// Checks `networks.json`. `test_mode` allows http endpoints on loopback hosts (fake ledgers);
/// `secrets`, when given, is where the fee secrets of Stellar and Hedera must be set.
pub fn validate_networks(
    path: &Path,
    networks: &NetworksSettings,
    test_mode: bool,
    secrets: Option<&dyn EnvSource>,
) -> Result<(), String> {
    joined(networks_problems(path, networks, test_mode, secrets))
}

/// Every broken rule of `networks.json`, one message each (see [`validate_networks`]).
pub fn networks_problems(
    path: &Path,
    networks: &NetworksSettings,
    test_mode: bool,
    secrets: Option<&dyn EnvSource>,
) -> Vec<String> {
    let mut problems = Problems::new(path);
    for (network, settings) in networks {
        let Some(chain) = chain_of(network) else {
            problems.add(
                network,
                network,
                format!("unknown network (known: {})", KNOWN_NETWORKS.join(", ")),
            );
            continue;
        };
        check_network(&mut problems, network, chain, settings, test_mode, secrets);
    }
    problems.found
}

fn check_network(
    problems: &mut Problems,
    network: &str,
    chain: Chain,
    settings: &NetworkSettings,
    test_mode: bool,
    secrets: Option<&dyn EnvSource>,
) {
    if !settings.ws.is_empty() {
        problems.add(
            format!("{network}.ws"),
            &settings.ws,
            "websocket endpoints are not supported; use rpc",
        );
    }
    for (key, value) in [
        ("rpc", &settings.rpc),
        ("horizon", &settings.horizon),
        ("mirror", &settings.mirror),
    ] {
        if !value.is_empty()
            && let Some(why) = url_problem(value, test_mode, false)
        {
            problems.add(format!("{network}.{key}"), value, why);
        }
    }
    let required = |problems: &mut Problems, key: &str, value: &str| {
        if value.is_empty() {
            problems.add(
                format!("{network}.{key}"),
                value,
                format!("is required for {network}"),
            );
        }
    };
    let fee_cap = |problems: &mut Problems, key: &str, value: u64, cap: u64, unit: &str| {
        if value > cap {
            problems.add(
                format!("{network}.{key}"),
                value,
                format!("at most {cap} {unit}"),
            );
        }
    };
    if !settings.secret_env.is_empty() && !is_env_name(&settings.secret_env) {
        problems.add(
            format!("{network}.secret_env"),
            &settings.secret_env,
            "must be an environment variable name (A-Z, 0-9, _)",
        );
    }
    match chain {
        Chain::Xrpl => {
            required(problems, "rpc", &settings.rpc);
            fee_cap(
                problems,
                "max_fee",
                settings.max_fee,
                XRPL_MAX_FEE_DROPS,
                "drops",
            );
        }
        Chain::Solana => required(problems, "rpc", &settings.rpc),
        Chain::Stellar => {
            required(problems, "rpc", &settings.rpc);
            fee_cap(
                problems,
                "max_fee",
                settings.max_fee,
                STELLAR_MAX_FEE_STROOPS,
                "stroops",
            );
            check_secret(
                problems,
                network,
                settings,
                STELLAR_FEE_SECRET,
                secrets,
                |s| is_strkey(s, StrKey::Seed),
            );
        }
        Chain::Hedera => {
            required(problems, "mirror", &settings.mirror);
            if !is_hedera_id(&settings.fee_payer, false) {
                problems.add(
                    format!("{network}.fee_payer"),
                    &settings.fee_payer,
                    "the sponsoring account 0.0.N is required",
                );
            }
            fee_cap(
                problems,
                "max_fee_tinybars",
                settings.max_fee_tinybars,
                HEDERA_MAX_FEE_TINYBARS,
                "tinybars",
            );
            check_secret(
                problems,
                network,
                settings,
                HEDERA_FEE_SECRET,
                secrets,
                is_hedera_der_secret,
            );
        }
    }
}

fn is_env_name(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && name.bytes().next().is_some_and(|b| !b.is_ascii_digit())
}

/// The fee secret a sponsoring network signs with: set, and of the chain's form.
fn check_secret(
    problems: &mut Problems,
    network: &str,
    settings: &NetworkSettings,
    default_env: &str,
    secrets: Option<&dyn EnvSource>,
    well_formed: impl Fn(&str) -> bool,
) {
    let Some(env) = secrets else { return };
    let name = if settings.secret_env.is_empty() {
        default_env
    } else {
        settings.secret_env.as_str()
    };
    match env.var(name).map(|value| value.trim().to_string()) {
        Some(value) if !value.is_empty() => {
            if !well_formed(&value) {
                problems.add_hidden(
                    format!("{network} fee secret ${name}"),
                    "is set but not a valid key for this network",
                );
            }
        }
        _ => problems.add_hidden(
            format!("{network} fee secret ${name}"),
            "must be set: this network's fees are paid by a sponsoring account",
        ),
    }
}

/// Checks `fastlane.json` against its rules and the networks it may use. Nothing is checked
/// while the lane is off.
pub fn validate_fastlane(
    path: &Path,
    settings: &FastlaneSettings,
    networks_path: &Path,
    networks: &NetworksSettings,
) -> Result<(), String> {
    joined(fastlane_problems(path, settings, networks_path, networks))
}

/// Every broken rule of `fastlane.json`, one message each (see [`validate_fastlane`]).
pub fn fastlane_problems(
    path: &Path,
    settings: &FastlaneSettings,
    networks_path: &Path,
    networks: &NetworksSettings,
) -> Vec<String> {
    let mut problems = Problems::new(path);
    if !settings.enabled {
        return Vec::new();
    }
    let test_mode = settings.test_mode;
    if let Some(why) = url_problem(&settings.origin, test_mode, true) {
        problems.add("origin", &settings.origin, why);
    }
    if settings.policy_url.is_empty() {
        if !test_mode {
            problems.add(
                "policy_url",
                &settings.policy_url,
                "is required outside test mode (every payment is screened)",
            );
        }
    } else if let Some(why) = url_problem(&settings.policy_url, true, false) {
        problems.add("policy_url", &settings.policy_url, why);
    }
    for (key, value, range) in [
        ("pass_seconds", settings.pass_seconds, 30..=3600),
        ("nft_pass_seconds", settings.nft_pass_seconds, 5..=60),
        ("max_records", settings.max_records, 100..=1_000_000),
    ] {
        if !range.contains(&value) {
            problems.add(
                key,
                value,
                format!("must be {} to {}", range.start(), range.end()),
            );
        }
    }
    let merchant_chars = settings.merchant.trim().chars().count();
    if !(1..=MAX_MERCHANT_CHARS).contains(&merchant_chars)
        || settings.merchant.chars().any(char::is_control)
    {
        problems.add(
            "merchant",
            &settings.merchant,
            format!("1 to {MAX_MERCHANT_CHARS} characters, no control characters"),
        );
    }
    for (key, value) in [
        ("terms_url", &settings.terms_url),
        ("privacy_url", &settings.privacy_url),
        ("refund_url", &settings.refund_url),
    ] {
        if value.is_empty() {
            problems.add(key, value, "is required: visitors see it before they pay");
        } else if !value.starts_with('/') || value.starts_with("//") {
            if let Some(why) = url_problem(value, true, false) {
                problems.add(key, value, format!("{why} (or a path starting with /)"));
            }
        } else if value.chars().any(|c| c.is_control() || c.is_whitespace()) {
            problems.add(key, value, "a path without spaces or control characters");
        }
    }
    if settings.offers.len() > MAX_OFFERS {
        problems.add(
            "offers",
            settings.offers.len(),
            format!("at most {MAX_OFFERS} offers"),
        );
    }
    if settings.collections.len() > MAX_COLLECTIONS {
        problems.add(
            "collections",
            settings.collections.len(),
            format!("at most {MAX_COLLECTIONS} collections"),
        );
    }
    if settings.offers.is_empty() && settings.collections.is_empty() {
        problems.add(
            "offers",
            0,
            "an enabled fast lane needs at least one offer or collection",
        );
    }
    let network_ok = |problems: &mut Problems, key: &str, network: &str| -> Option<Chain> {
        let Some(chain) = chain_of(network) else {
            problems.add(
                key,
                network,
                format!("unknown network (known: {})", KNOWN_NETWORKS.join(", ")),
            );
            return None;
        };
        if test_mode && is_mainnet(network) {
            problems.add(key, network, "test mode refuses mainnet networks");
        }
        if !networks.contains_key(network) {
            problems.add(
                key,
                network,
                format!("has no entry in {}", networks_path.display()),
            );
        }
        Some(chain)
    };
    let mut kinds: Vec<(&str, &str, &str)> = Vec::new();
    for (index, offer) in settings.offers.iter().enumerate() {
        let at = format!("offers[{index}]");
        let terms = &offer.requirements;
        if offer.label.trim().is_empty() {
            problems.add(format!("{at}.label"), &offer.label, "is required");
        }
        let chain = network_ok(
            &mut problems,
            &format!("{at}.requirements.network"),
            &terms.network,
        );
        if !is_amount(&terms.amount) {
            problems.add(
                format!("{at}.requirements.amount"),
                &terms.amount,
                "atomic units: digits without a leading zero, at most 9223372036854775807",
            );
        }
        if !(30..=300).contains(&terms.max_timeout_seconds) {
            problems.add(
                format!("{at}.requirements.maxTimeoutSeconds"),
                terms.max_timeout_seconds,
                "must be 30 to 300",
            );
        }
        let kind = (
            terms.scheme.as_str(),
            terms.network.as_str(),
            terms.asset.as_str(),
        );
        if kinds.contains(&kind) {
            problems.add(
                format!("{at}.requirements"),
                kind,
                "another offer has the same scheme, network and asset",
            );
        }
        kinds.push(kind);
        if let Some(chain) = chain {
            check_offer_terms(&mut problems, &at, chain, offer, networks);
        }
    }
    let mut collection_ids: Vec<&str> = Vec::new();
    for (index, collection) in settings.collections.iter().enumerate() {
        let at = format!("collections[{index}]");
        let id_chars = collection.id.chars().count();
        if !(1..=MAX_COLLECTION_ID_CHARS).contains(&id_chars)
            || collection
                .id
                .chars()
                .any(|c| c.is_control() || c.is_whitespace())
        {
            problems.add(
                format!("{at}.id"),
                &collection.id,
                format!("1 to {MAX_COLLECTION_ID_CHARS} characters without spaces"),
            );
        } else if collection_ids.contains(&collection.id.as_str()) {
            problems.add(format!("{at}.id"), &collection.id, "is used twice");
        }
        collection_ids.push(&collection.id);
        if collection.label.trim().is_empty() {
            problems.add(format!("{at}.label"), &collection.label, "is required");
        }
        let Some(chain) = network_ok(&mut problems, &format!("{at}.network"), &collection.network)
        else {
            continue;
        };
        let (valid, form) = match chain {
            Chain::Xrpl => (is_xrpl_collection(&collection.collection), "issuer:taxon"),
            Chain::Stellar => (
                is_strkey(&collection.collection, StrKey::Contract),
                "a C… contract",
            ),
            Chain::Hedera => (is_hedera_id(&collection.collection, false), "a 0.0.N token"),
            Chain::Solana => (is_solana_key(&collection.collection), "a mint address"),
        };
        if !valid {
            problems.add(
                format!("{at}.collection"),
                &collection.collection,
                format!("must be {form} on {}", collection.network),
            );
        }
    }
    if settings.listings.len() > MAX_LISTINGS {
        problems.add(
            "listings",
            settings.listings.len(),
            format!("at most {MAX_LISTINGS} listings"),
        );
    }
    let mut listing_ids: Vec<&str> = Vec::new();
    for (index, listing) in settings.listings.iter().enumerate() {
        let at = format!("listings[{index}]");
        if listing.id.trim().is_empty() || listing.id.chars().any(|c| c.is_control() || c == '/') {
            problems.add(
                format!("{at}.id"),
                &listing.id,
                "is required (no control characters or /)",
            );
        } else if listing_ids.contains(&listing.id.as_str()) {
            problems.add(format!("{at}.id"), &listing.id, "is used twice");
        }
        listing_ids.push(&listing.id);
        if listing.label.trim().is_empty() {
            problems.add(format!("{at}.label"), &listing.label, "is required");
        }
        if !listing.price.is_empty() && !is_amount(&listing.price) {
            problems.add(
                format!("{at}.price"),
                &listing.price,
                "atomic units: digits without a leading zero",
            );
        }
        if network_ok(&mut problems, &format!("{at}.network"), &listing.network).is_some()
            && !settings
                .offers
                .iter()
                .any(|offer| offer.requirements.network == listing.network && takes_deposits(offer))
        {
            problems.add(
                format!("{at}.network"),
                &listing.network,
                "needs an offer on this network that takes deposits (no fixed destinationTag; on Stellar a G… payTo)",
            );
        }
    }
    // NFT admission and deposits on Stellar read accounts and payments from Horizon, which
    // payments alone do without: say so at start-up rather than answer 503 to visitors.
    let reads_horizon = settings
        .collections
        .iter()
        .map(|collection| collection.network.as_str())
        .chain(
            settings
                .offers
                .iter()
                .filter(|offer| takes_deposits(offer))
                .map(|offer| offer.requirements.network.as_str()),
        );
    let mut named: Vec<&str> = Vec::new();
    for network in reads_horizon {
        if chain_of(network) == Some(Chain::Stellar)
            && !named.contains(&network)
            && networks
                .get(network)
                .is_some_and(|entry| entry.horizon.trim().is_empty())
        {
            named.push(network);
            problems.add(
                network,
                network,
                format!(
                    "needs \"horizon\" in {}: NFT admission and deposits on Stellar read Horizon",
                    networks_path.display()
                ),
            );
        }
    }
    problems.found
}

/// Atomic units: `^[1-9][0-9]{0,18}$` and within int64.
fn is_amount(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 19
        && bytes[0] != b'0'
        && bytes.iter().all(u8::is_ascii_digit)
        && text.parse::<i64>().is_ok()
}

/// XRPL NFT collections are `issuer:taxon`.
fn is_xrpl_collection(text: &str) -> bool {
    text.split_once(':').is_some_and(|(issuer, taxon)| {
        is_xrpl_address(issuer)
            && !taxon.is_empty()
            && taxon.bytes().all(|b| b.is_ascii_digit())
            && taxon.parse::<u32>().is_ok()
    })
}

/// An offer takes deposits when visitors can be told apart by amount or memo: no fixed
/// destination tag, and on Stellar an account (a contract cannot carry a memo).
pub fn takes_deposits(offer: &Offer) -> bool {
    let terms = &offer.requirements;
    let fixed_tag = terms
        .extra
        .as_ref()
        .is_some_and(|extra| extra.contains_key("destinationTag"));
    let account_on_stellar =
        chain_of(&terms.network) != Some(Chain::Stellar) || terms.pay_to.starts_with('G');
    !fixed_tag && account_on_stellar
}

fn check_offer_terms(
    problems: &mut Problems,
    at: &str,
    chain: Chain,
    offer: &Offer,
    networks: &NetworksSettings,
) {
    let terms = &offer.requirements;
    let empty = Map::new();
    let extra = terms.extra.as_ref().unwrap_or(&empty);
    let (scheme, allowed_extra): (&str, &[&str]) = match chain {
        Chain::Xrpl => (
            "exact",
            &[
                "areFeesSponsored",
                "assetTransferMethod",
                "invoiceId",
                "destinationTag",
            ],
        ),
        Chain::Stellar => ("exact", &["areFeesSponsored"]),
        Chain::Hedera => ("exact", &["feePayer"]),
        Chain::Solana => ("concert-native-sol", &["areFeesSponsored"]),
    };
    if terms.scheme != scheme {
        problems.add(
            format!("{at}.requirements.scheme"),
            &terms.scheme,
            format!("must be {scheme:?} on {}", terms.network),
        );
    }
    for key in extra.keys() {
        if !allowed_extra.contains(&key.as_str()) {
            problems.add(
                format!("{at}.requirements.extra.{key}"),
                &extra[key],
                format!(
                    "is not a term of {} payments (allowed: {})",
                    terms.network,
                    allowed_extra.join(", ")
                ),
            );
        }
    }
    let sponsored = |problems: &mut Problems, wanted: bool| {
        if extra.get("areFeesSponsored") != Some(&Value::Bool(wanted)) {
            problems.add(
                format!("{at}.requirements.extra.areFeesSponsored"),
                extra.get("areFeesSponsored"),
                format!("must be {wanted} on {}", terms.network),
            );
        }
    };
    let asset = |problems: &mut Problems, wanted: &str| {
        if terms.asset != wanted {
            problems.add(
                format!("{at}.requirements.asset"),
                &terms.asset,
                format!("must be {wanted} on {}", terms.network),
            );
        }
    };
    let pay_to = |problems: &mut Problems, valid: bool, form: &str| {
        if !valid {
            problems.add(
                format!("{at}.requirements.payTo"),
                &terms.pay_to,
                format!("must be {form}"),
            );
        }
    };
    match chain {
        Chain::Xrpl => {
            asset(problems, "XRP");
            sponsored(problems, false);
            pay_to(
                problems,
                is_xrpl_address(&terms.pay_to),
                "an XRPL address (r…, with a valid checksum)",
            );
            if let Some(tag) = extra.get("destinationTag")
                && !is_destination_tag(tag)
            {
                problems.add(
                    format!("{at}.requirements.extra.destinationTag"),
                    tag,
                    "a whole number from 0 to 4294967295",
                );
            }
            for key in ["invoiceId", "assetTransferMethod"] {
                if let Some(value) = extra.get(key)
                    && value.as_str().is_none_or(str::is_empty)
                {
                    problems.add(
                        format!("{at}.requirements.extra.{key}"),
                        value,
                        "must be a non-empty string",
                    );
                }
            }
        }
        Chain::Stellar => {
            if let Some(native) = stellar_native_asset(&terms.network) {
                asset(problems, native);
            }
            sponsored(problems, true);
            pay_to(
                problems,
                is_strkey(&terms.pay_to, StrKey::Account)
                    || is_strkey(&terms.pay_to, StrKey::Contract),
                "a Stellar account (G…) or contract (C…)",
            );
        }
        Chain::Hedera => {
            asset(problems, "0.0.0");
            pay_to(
                problems,
                is_hedera_id(&terms.pay_to, false),
                "a Hedera account 0.0.N",
            );
            match extra.get("feePayer").and_then(Value::as_str) {
                Some(fee_payer) if is_hedera_id(fee_payer, false) => {
                    if fee_payer == terms.pay_to {
                        problems.add(
                            format!("{at}.requirements.extra.feePayer"),
                            fee_payer,
                            "must differ from payTo",
                        );
                    }
                    if let Some(network) = networks.get(&terms.network)
                        && network.fee_payer != fee_payer
                    {
                        problems.add(
                            format!("{at}.requirements.extra.feePayer"),
                            fee_payer,
                            format!(
                                "must equal {}.fee_payer of networks.json ({:?})",
                                terms.network, network.fee_payer
                            ),
                        );
                    }
                }
                _ => problems.add(
                    format!("{at}.requirements.extra.feePayer"),
                    extra.get("feePayer"),
                    "the sponsoring account 0.0.N is required",
                ),
            }
        }
        Chain::Solana => {
            asset(problems, "SOL");
            sponsored(problems, false);
            pay_to(
                problems,
                is_solana_key(&terms.pay_to),
                "a Solana address (base58, 32 bytes)",
            );
        }
    }
}

/// A destination tag kept exact: the literal must be a whole number within `u32`.
fn is_destination_tag(value: &Value) -> bool {
    match value {
        Value::Number(number) => {
            let text = number.to_string();
            text.bytes().all(|b| b.is_ascii_digit()) && text.parse::<u32>().is_ok()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
