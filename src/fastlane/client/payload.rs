//! The signed payment for one offer, built per chain from the crate's own codecs so that it
//! is the shape the server's verification takes.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::site::Site;
use super::wallet::Wallet;
use crate::fastlane::chains::hedera::payment::{self as hedera_payment, EntityId};
use crate::fastlane::chains::hedera::proto as hedera_proto;
use crate::fastlane::chains::hedera::{self as hedera_chain};
use crate::fastlane::chains::rest::RestClient;
use crate::fastlane::chains::rpc::JsonRpcClient;
use crate::fastlane::chains::solana::transfer::{
    PAYLOAD_FIELD, TransferTerms, inspect, unsigned_transfer,
};
use crate::fastlane::chains::solana::wire::Transaction as SolanaTransaction;
use crate::fastlane::chains::xrpl::codec::field;
use crate::fastlane::chains::xrpl::exact::{FEE_CAP_DROPS, invoice_id_field, network_number};
use crate::fastlane::chains::xrpl::keys::{PaymentDraft, decode_address};
use crate::fastlane::chains::xrpl::{Ledger as _, RpcLedger};
use crate::fastlane::settings::NetworkSettings;
use crate::fastlane::x402::PaymentRequirements;
use prost::Message as _;

/// The fee an XRPL payment offers, in drops: a little above the 10-drop base, well under
/// every cap a site may set.
const XRPL_FEE_DROPS: u64 = 12;
/// Seconds per XRPL ledger, for the `LastLedgerSequence` window.
const XRPL_LEDGER_SECONDS: u64 = 5;
/// Network ids up to this are implied; above it the transaction must name its network.
const XRPL_IMPLIED_NETWORK_MAX: u32 = 1024;

/// The most network fee a Hedera payment lets the sponsor pay, in tinybars (0.1 HBAR; a
/// transfer costs a small fraction of that), unless networks.json sets a lower cap.
const HEDERA_MAX_FEE_TINYBARS: u64 = 10_000_000;
/// How long a Hedera payment stays valid, in seconds (the network's maximum).
const HEDERA_VALID_SECONDS: i64 = 180;
/// How far before now the transaction's valid start is put.
const HEDERA_START_LEAD_SECONDS: u64 = 5;
/// Node copies signed, and mirror pages read to find them.
const HEDERA_NODES: usize = 5;
const HEDERA_NODE_PAGES: usize = 4;

/// What the chain needs of `networks.json`, and the site for Solana's prepare step.
pub struct Chain<'a> {
    pub network: &'a str,
    pub settings: Option<&'a NetworkSettings>,
    /// The site, for chains whose payment it prepares (Solana).
    pub site: Option<&'a Site>,
    pub session_headers: &'a [(&'a str, &'a str)],
}

impl Chain<'_> {
    pub(super) fn endpoint(
        &self,
        which: &str,
        pick: fn(&NetworkSettings) -> &str,
    ) -> Result<String, String> {
        self.settings
            .map(pick)
            .filter(|url| !url.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| {
                format!(
                    "CONCERT_NETWORKS_CONFIG has no {which} for {}; the client needs it to fill in the payment",
                    self.network
                )
            })
    }
}

/// The `payload` object of a payment of `terms` signed by `wallet`.
pub async fn build(
    wallet: &Wallet,
    terms: &PaymentRequirements,
    chain: &Chain<'_>,
) -> Result<Map<String, Value>, String> {
    match wallet {
        Wallet::Xrpl(_) => xrpl(wallet, terms, chain).await,
        Wallet::Solana(_) => solana(wallet, terms, chain).await,
        Wallet::Hedera { .. } => hedera(wallet, terms, chain).await,
        Wallet::Stellar(key) => super::stellar::build(key, terms, chain).await,
    }
}

async fn xrpl(
    wallet: &Wallet,
    terms: &PaymentRequirements,
    chain: &Chain<'_>,
) -> Result<Map<String, Value>, String> {
    let Wallet::Xrpl(pair) = wallet else {
        return Err("not an XRPL key".into());
    };
    if terms.scheme != "exact" || terms.asset != "XRP" {
        return Err(format!(
            "the offer on {} is {} {}; only exact XRP is paid",
            terms.network, terms.scheme, terms.asset
        ));
    }
    let number = network_number(&terms.network)
        .ok_or_else(|| format!("{} is not an XRPL network", terms.network))?;
    let drops: u64 = parse_amount(&terms.amount)?;
    let destination = decode_address(&terms.pay_to).ok_or_else(|| {
        format!(
            "the offer's payTo {:?} is not an XRPL address",
            terms.pay_to
        )
    })?;
    let extra = terms.extra.clone().unwrap_or_default();
    let destination_tag = match extra.get("destinationTag") {
        None => None,
        Some(tag) => Some(
            tag.as_u64()
                .and_then(|tag| u32::try_from(tag).ok())
                .ok_or_else(|| format!("the offer's destinationTag {tag} is not a 32-bit tag"))?,
        ),
    };
    let invoice_id = match extra.get("invoiceId") {
        None => None,
        Some(Value::String(invoice)) if !invoice.is_empty() => Some(invoice_id_field(invoice)),
        Some(other) => return Err(format!("the offer's invoiceId {other} is not a string")),
    };
    let cap = chain
        .settings
        .map(|settings| settings.max_fee)
        .filter(|cap| *cap > 0)
        .unwrap_or(FEE_CAP_DROPS);
    let fee_drops = XRPL_FEE_DROPS.min(cap);

    let rpc = chain.endpoint("rpc", |settings| &settings.rpc)?;
    let client = JsonRpcClient::new(&rpc).map_err(|e| format!("{}: {e}", terms.network))?;
    let ledger = RpcLedger::new(&terms.network, client);
    let server = ledger.server_state().await.map_err(|e| e.to_string())?;
    if server.network_id.unwrap_or(0) != number {
        return Err(format!(
            "the rpc endpoint for {} follows network {}; nothing was signed",
            terms.network,
            server.network_id.unwrap_or(0)
        ));
    }
    let address = pair.address();
    let account = ledger
        .account_state(&address)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{address} does not exist on {}", terms.network))?;
    let window = terms
        .max_timeout_seconds
        .div_ceil(XRPL_LEDGER_SECONDS)
        .max(1);
    let last_ledger = u32::try_from(u64::from(server.validated_ledger) + window)
        .map_err(|_| "the ledger index is out of range".to_string())?;
    let account_id = decode_address(&address).ok_or("the wallet address does not decode")?;
    let draft = PaymentDraft {
        account: account_id,
        destination,
        drops,
        fee_drops,
        sequence: account.sequence,
        last_ledger_sequence: last_ledger,
        destination_tag,
        ticket_sequence: None,
        invoice_id,
    };
    let mut tx = draft.to_transaction();
    if number > XRPL_IMPLIED_NETWORK_MAX {
        tx.set(field::NETWORK_ID, number.to_be_bytes().to_vec());
    }
    pair.sign_transaction(&mut tx);
    let mut payload = Map::new();
    payload.insert(
        "signedTxBlob".into(),
        Value::String(hex::encode_upper(tx.encode())),
    );
    Ok(payload)
}

async fn solana(
    wallet: &Wallet,
    terms: &PaymentRequirements,
    chain: &Chain<'_>,
) -> Result<Map<String, Value>, String> {
    let Wallet::Solana(key) = wallet else {
        return Err("not a Solana key".into());
    };
    let expected = TransferTerms::parse(terms).ok_or_else(|| {
        format!(
            "the offer on {} is not a readable concert-native-sol offer",
            terms.network
        )
    })?;
    let from = key.verifying_key().to_bytes();
    let request = serde_json::json!({
        "network": terms.network,
        "from": wallet.address(),
        "accepted": terms,
    });
    let site = chain
        .site
        .ok_or("paying on Solana needs the site to prepare the transfer")?;
    let answer = site
        .post(
            "/solana/prepare",
            chain.session_headers,
            &request.to_string(),
        )
        .await?;
    if answer.status != 200 {
        return Err(format!(
            "the site did not prepare the transfer ({}); nothing was signed",
            answer.error_code()
        ));
    }
    let prepared = answer.json();
    let wire = prepared
        .get(PAYLOAD_FIELD)
        .and_then(Value::as_str)
        .and_then(|text| STANDARD.decode(text).ok())
        .ok_or("the site's prepared transfer is not base64; nothing was signed")?;
    let mut transaction = SolanaTransaction::decode(&wire)
        .map_err(|_| "the site's prepared transfer does not decode; nothing was signed")?;
    // The only thing taken from the site is the blockhash: the transfer rebuilt around it
    // must be byte for byte what the site sent, or the site asked for something else.
    let rebuilt = unsigned_transfer(
        from,
        expected.pay_to,
        expected.lamports,
        transaction.message.recent_blockhash,
    );
    if rebuilt.encode() != wire {
        return Err(format!(
            "the site's prepared transfer is not exactly {} lamports from {} to {}; nothing was signed",
            expected.lamports,
            wallet.address(),
            terms.pay_to
        ));
    }
    use ed25519_dalek::Signer as _;
    let signature = key.sign(&transaction.message.encode()).to_bytes();
    transaction.signatures = vec![signature];
    let signed = transaction.encode();
    inspect(signed.clone(), &expected)
        .map_err(|refusal| format!("the signed transfer fails its own check: {}", refusal.why))?;
    let mut payload = Map::new();
    payload.insert(PAYLOAD_FIELD.into(), Value::String(STANDARD.encode(signed)));
    Ok(payload)
}

async fn hedera(
    wallet: &Wallet,
    terms: &PaymentRequirements,
    chain: &Chain<'_>,
) -> Result<Map<String, Value>, String> {
    let Wallet::Hedera { account, key } = wallet else {
        return Err("not a Hedera key".into());
    };
    if terms.scheme != "exact" || terms.asset != hedera_chain::ASSET {
        return Err(format!(
            "the offer on {} is {} {}; only exact HBAR is paid",
            terms.network, terms.scheme, terms.asset
        ));
    }
    let amount = i64::try_from(parse_amount(&terms.amount)?)
        .map_err(|_| "the offer's amount is out of range".to_string())?;
    let payer = EntityId::parse(account).ok_or("the paying account does not parse")?;
    let pay_to = EntityId::parse(&terms.pay_to)
        .ok_or_else(|| format!("the offer's payTo {:?} is not an account id", terms.pay_to))?;
    let fee_payer = terms
        .extra
        .as_ref()
        .and_then(|extra| extra.get("feePayer"))
        .and_then(Value::as_str)
        .and_then(EntityId::parse)
        .ok_or("the offer names no feePayer account; nothing was signed")?;
    if fee_payer == payer || pay_to == payer {
        return Err(
            "the offer's feePayer or payTo is the paying account; nothing was signed".into(),
        );
    }
    let max_fee = chain
        .settings
        .map(|settings| settings.max_fee_tinybars)
        .filter(|cap| *cap > 0)
        .unwrap_or(HEDERA_MAX_FEE_TINYBARS)
        .min(hedera_chain::FEE_CAP_TINYBARS);
    let mirror = chain.endpoint("mirror", |settings| &settings.mirror)?;
    let nodes = hedera_nodes(&mirror, &terms.network).await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "the clock is before 1970".to_string())?;
    // A little in the past, so a node whose clock is slightly behind still takes it.
    let start = now.saturating_sub(std::time::Duration::from_secs(HEDERA_START_LEAD_SECONDS));
    let start_seconds =
        i64::try_from(start.as_secs()).map_err(|_| "the clock is out of range".to_string())?;
    let start_nanos = i32::try_from(start.subsec_nanos()).unwrap_or(0);
    let account_id = |id: EntityId| hedera_proto::AccountId {
        shard_num: Some(id.shard),
        realm_num: Some(id.realm),
        account_num: Some(id.num),
    };
    let mut list = hedera_proto::TransactionList::default();
    for node in nodes {
        let body = hedera_proto::TransactionBody {
            transaction_id: Some(hedera_proto::TransactionId {
                transaction_valid_start: Some(hedera_proto::Timestamp {
                    seconds: Some(start_seconds),
                    nanos: Some(start_nanos),
                }),
                account_id: Some(account_id(fee_payer)),
                scheduled: None,
                nonce: None,
            }),
            node_account_id: Some(account_id(node)),
            transaction_fee: Some(max_fee),
            transaction_valid_duration: Some(hedera_proto::Duration {
                seconds: Some(HEDERA_VALID_SECONDS),
            }),
            memo: None,
            crypto_transfer: Some(hedera_proto::CryptoTransfer {
                transfers: Some(hedera_proto::TransferList {
                    account_amounts: vec![
                        hedera_proto::AccountAmount {
                            account_id: Some(account_id(payer)),
                            amount: Some(-amount),
                            is_approval: None,
                        },
                        hedera_proto::AccountAmount {
                            account_id: Some(account_id(pay_to)),
                            amount: Some(amount),
                            is_approval: None,
                        },
                    ],
                }),
                token_transfers: Vec::new(),
            }),
        };
        let body_bytes = body.encode_to_vec();
        let pair = key
            .sign(&body_bytes)
            .ok_or("the Hedera key could not sign")?;
        let signed = hedera_proto::SignedTransaction {
            body_bytes: Some(body_bytes),
            sig_map: Some(hedera_proto::SignatureMap {
                sig_pair: vec![pair],
            }),
        };
        list.transaction_list.push(hedera_proto::Transaction {
            signed_transaction_bytes: Some(signed.encode_to_vec()),
        });
    }
    let text = STANDARD.encode(list.encode_to_vec());
    // The same reading the server does, so a payload it would refuse is never sent.
    let decoded = hedera_payment::decode_payload(&text)
        .map_err(|_| "the built Hedera payment does not decode; nothing was sent".to_string())?;
    hedera_payment::check_transfer(
        &decoded,
        &hedera_payment::TransferTerms {
            fee_payer,
            pay_to,
            amount: amount.unsigned_abs(),
            max_fee,
        },
    )
    .map_err(|refused| {
        format!(
            "the built Hedera payment fails its own check: {}",
            refused.reason
        )
    })?;
    let mut payload = Map::new();
    payload.insert("transaction".into(), Value::String(text));
    Ok(payload)
}

/// The consensus nodes the mirror lists, the first few of them: the payment is signed once
/// per node so that any of them can take it.
async fn hedera_nodes(mirror: &str, network: &str) -> Result<Vec<EntityId>, String> {
    let client = RestClient::new(mirror).map_err(|e| format!("{network} mirror: {e}"))?;
    let mut nodes = Vec::new();
    let mut next = Some("/api/v1/network/nodes?limit=25".to_owned());
    for _ in 0..HEDERA_NODE_PAGES {
        let Some(path) = next.take() else { break };
        let page: Option<Value> = client
            .get(&path)
            .await
            .map_err(|e| format!("{network} mirror {path}: {e}"))?;
        let Some(page) = page else { break };
        let listed = page
            .get("nodes")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for node in listed {
            let id = node
                .get("node_account_id")
                .and_then(Value::as_str)
                .and_then(EntityId::parse);
            if let Some(id) = id
                && !nodes.contains(&id)
            {
                nodes.push(id);
            }
            if nodes.len() >= HEDERA_NODES {
                return Ok(nodes);
            }
        }
        next = page
            .pointer("/links/next")
            .and_then(Value::as_str)
            .filter(|next| next.starts_with("/api/v1/network/nodes"))
            .map(str::to_owned);
    }
    if nodes.is_empty() {
        return Err(format!("the {network} mirror lists no consensus node"));
    }
    Ok(nodes)
}

/// An atomic amount as the offers write it.
pub fn parse_amount(text: &str) -> Result<u64, String> {
    let canonical = !text.is_empty()
        && text.len() <= 19
        && text.bytes().all(|b| b.is_ascii_digit())
        && !text.starts_with('0');
    if !canonical {
        return Err(format!(
            "the offer's amount {text:?} is not an atomic amount"
        ));
    }
    text.parse::<u64>()
        .ok()
        .filter(|amount| *amount <= i64::MAX as u64)
        .ok_or_else(|| format!("the offer's amount {text:?} is out of range"))
}
