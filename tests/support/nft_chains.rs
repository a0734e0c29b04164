//! Loopback stand-ins for the four chains' read APIs, as NFT admission reads them: rippled's
//! `account_info` and paged `account_nfts`; a Stellar RPC server (`getNetwork`, a
//! `simulateTransaction` that decodes the `balance(addr)` call it is given) with Horizon's
//! root and account documents on the same port; a Hedera mirror's account, token and NFT
//! resources; and Solana's `getAccountInfo` and `getTokenAccountsByOwner`. Each answers from
//! a small table a test fills, in the shapes the real services use, and counts its calls.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use parking_lot::Mutex;
use serde_json::{Value, json};

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn rpc_answer(request: &Value, result: Value) -> axum::Json<Value> {
    axum::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
}

// ---------------------------------------------------------------- XRPL

/// One account root and the NFTs it holds.
#[derive(Clone, Default)]
pub struct XrplAccount {
    pub flags: u32,
    pub regular_key: Option<String>,
    /// `(NFTokenID, Issuer, NFTokenTaxon)`.
    pub nfts: Vec<(String, String, u32)>,
}

#[derive(Default)]
pub struct Xrpl {
    pub accounts: Mutex<HashMap<String, XrplAccount>>,
    /// NFTs per `account_nfts` page (rippled's are up to 400; small here to exercise paging).
    pub page_size: AtomicUsize,
    pub nft_pages: AtomicUsize,
}

async fn xrpl_answer(State(ledger): State<Arc<Xrpl>>, body: String) -> axum::Json<Value> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let params = &request["params"][0];
    let account = params["account"].as_str().unwrap_or_default().to_owned();
    let known = ledger.accounts.lock().get(&account).cloned();
    let result = match (request["method"].as_str().unwrap_or_default(), known) {
        ("account_info", Some(root)) => {
            let mut data = json!({"Account": account, "Sequence": 9, "Flags": root.flags, "Balance": "50000000"});
            if let Some(regular) = root.regular_key {
                data["RegularKey"] = regular.into();
            }
            json!({"account_data": data, "validated": true, "status": "success"})
        }
        ("account_info" | "account_nfts", None) => json!({
            "error": "actNotFound", "error_message": "Account not found.", "status": "error"
        }),
        ("account_nfts", Some(root)) => {
            ledger.nft_pages.fetch_add(1, Ordering::SeqCst);
            let size = ledger.page_size.load(Ordering::SeqCst).max(1);
            let start: usize = params["marker"]
                .as_str()
                .and_then(|marker| marker.strip_prefix("page-"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let page: Vec<Value> = root
                .nfts
                .iter()
                .skip(start)
                .take(size)
                .map(|(id, issuer, taxon)| {
                    json!({"NFTokenID": id, "Issuer": issuer, "NFTokenTaxon": taxon, "Flags": 8, "nft_serial": 1})
                })
                .collect();
            let mut answer = json!({
                "account": account, "account_nfts": page, "limit": size,
                "validated": true, "status": "success"
            });
            if start + size < root.nfts.len() {
                answer["marker"] = format!("page-{}", start + size).into();
            }
            answer
        }
        _ => json!({"error": "unknownCmd", "status": "error"}),
    };
    rpc_answer(&request, result)
}

pub async fn start_xrpl() -> (String, Arc<Xrpl>) {
    let ledger = Arc::new(Xrpl::default());
    ledger.page_size.store(2, Ordering::SeqCst);
    let app = Router::new()
        .route("/", post(xrpl_answer))
        .with_state(ledger.clone());
    (serve(app).await, ledger)
}

// ---------------------------------------------------------------- Stellar

pub const TESTNET_PASSPHRASE: &str = "Test SDF Network ; September 2015";

#[derive(Default)]
pub struct Stellar {
    /// `G…` → (master weight, medium threshold).
    pub accounts: Mutex<HashMap<String, (u32, u32)>>,
    /// (contract `C…`, holder `G…`) → balance.
    pub balances: Mutex<HashMap<(String, String), i128>>,
    /// The passphrase Horizon reports (the RPC server always reports testnet's).
    pub horizon_passphrase: Mutex<String>,
    pub simulations: AtomicUsize,
}

/// The contract and holder of a simulated `balance(holder)` call.
fn balance_call(envelope: &str) -> Option<(String, String)> {
    use stellar_xdr::{
        HostFunction, Limits, OperationBody, ReadXdr as _, ScAddress, ScVal, TransactionEnvelope,
    };
    let bytes = STANDARD.decode(envelope).ok()?;
    let TransactionEnvelope::Tx(v1) =
        TransactionEnvelope::from_xdr(bytes, Limits::len(100_000)).ok()?
    else {
        return None;
    };
    let OperationBody::InvokeHostFunction(op) = &v1.tx.operations.first()?.body else {
        return None;
    };
    let HostFunction::InvokeContract(call) = &op.host_function else {
        return None;
    };
    if call.function_name.0.to_string() != "balance" {
        return None;
    }
    let ScAddress::Contract(contract) = &call.contract_address else {
        return None;
    };
    let ScVal::Address(ScAddress::Account(holder)) = call.args.first()? else {
        return None;
    };
    let stellar_xdr::PublicKey::PublicKeyTypeEd25519(key) = &holder.0;
    Some((
        stellar_strkey::Contract((contract.0).0)
            .to_string()
            .as_str()
            .to_owned(),
        stellar_strkey::ed25519::PublicKey(key.0)
            .to_string()
            .as_str()
            .to_owned(),
    ))
}

async fn stellar_rpc(State(chain): State<Arc<Stellar>>, body: String) -> axum::Json<Value> {
    use stellar_xdr::{Int128Parts, Limits, ScVal, WriteXdr as _};
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let result = match request["method"].as_str().unwrap_or_default() {
        "getNetwork" => json!({"passphrase": TESTNET_PASSPHRASE, "protocolVersion": 23}),
        "simulateTransaction" => {
            chain.simulations.fetch_add(1, Ordering::SeqCst);
            let envelope = request["params"]["transaction"]
                .as_str()
                .unwrap_or_default();
            match balance_call(envelope) {
                Some(key) => match chain.balances.lock().get(&key).copied() {
                    Some(balance) => {
                        let value = ScVal::I128(Int128Parts {
                            hi: (balance >> 64) as i64,
                            lo: balance as u64,
                        });
                        let xdr = STANDARD.encode(value.to_xdr(Limits::none()).unwrap());
                        json!({"results": [{"xdr": xdr, "auth": []}], "latestLedger": 100})
                    }
                    None => {
                        json!({"error": "HostError: Error(Storage, MissingValue)", "latestLedger": 100})
                    }
                },
                None => json!({"error": "transaction malformed", "latestLedger": 100}),
            }
        }
        _ => {
            return axum::Json(json!({
                "jsonrpc": "2.0", "id": request["id"],
                "error": {"code": -32601, "message": "method not found"}
            }));
        }
    };
    rpc_answer(&request, result)
}

async fn horizon_root(State(chain): State<Arc<Stellar>>) -> axum::Json<Value> {
    axum::Json(json!({
        "horizon_version": "23.0.0",
        "network_passphrase": chain.horizon_passphrase.lock().clone(),
    }))
}

async fn horizon_account(
    State(chain): State<Arc<Stellar>>,
    Path(id): Path<String>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let Some((weight, medium)) = chain.accounts.lock().get(&id).copied() else {
        return (
            http::StatusCode::NOT_FOUND,
            axum::Json(json!({"status": 404, "title": "Resource Missing"})),
        )
            .into_response();
    };
    axum::Json(json!({
        "id": id, "account_id": id, "sequence": "4294967296",
        "thresholds": {"low_threshold": 0, "med_threshold": medium, "high_threshold": medium},
        "signers": [{"weight": weight, "key": id, "type": "ed25519_public_key"}],
    }))
    .into_response()
}

/// Returns (rpc URL, horizon URL, state).
pub async fn start_stellar() -> (String, String, Arc<Stellar>) {
    let chain = Arc::new(Stellar::default());
    *chain.horizon_passphrase.lock() = TESTNET_PASSPHRASE.to_owned();
    let app = Router::new()
        .route("/rpc", post(stellar_rpc))
        .route("/horizon/", get(horizon_root))
        .route("/horizon/accounts/{id}", get(horizon_account))
        .with_state(chain.clone());
    let base = serve(app).await;
    (format!("{base}/rpc"), format!("{base}/horizon"), chain)
}

// ---------------------------------------------------------------- Hedera

#[derive(Default)]
pub struct Hedera {
    /// Account id → mirror key record.
    pub accounts: Mutex<HashMap<String, Value>>,
    /// Token id → type.
    pub tokens: Mutex<HashMap<String, String>>,
    /// (token id, serial) → owner account.
    pub nfts: Mutex<HashMap<(String, u64), String>>,
}

fn not_found() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        http::StatusCode::NOT_FOUND,
        axum::Json(json!({"_status": {"messages": [{"message": "Not found"}]}})),
    )
        .into_response()
}

async fn mirror_account(
    State(mirror): State<Arc<Hedera>>,
    Path(id): Path<String>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match mirror.accounts.lock().get(&id) {
        Some(key) => axum::Json(json!({
            "account": id, "key": key, "deleted": false,
            "balance": {"balance": 100_000_000, "timestamp": "1700000000.000000000", "tokens": []},
        }))
        .into_response(),
        None => not_found(),
    }
}

async fn mirror_account_nfts(
    State(mirror): State<Arc<Hedera>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> axum::Json<Value> {
    let token = query.get("token.id").cloned().unwrap_or_default();
    let nfts: Vec<Value> = mirror
        .nfts
        .lock()
        .iter()
        .filter(|((held_token, _), owner)| **owner == id && (token.is_empty() || *held_token == token))
        .map(|((held_token, serial), owner)| {
            json!({"account_id": owner, "deleted": false, "serial_number": serial, "token_id": held_token})
        })
        .collect();
    axum::Json(json!({"nfts": nfts, "links": {"next": null}}))
}

async fn mirror_token(
    State(mirror): State<Arc<Hedera>>,
    Path(id): Path<String>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match mirror.tokens.lock().get(&id) {
        Some(kind) => {
            axum::Json(json!({"token_id": id, "type": kind, "decimals": "0"})).into_response()
        }
        None => not_found(),
    }
}

async fn mirror_nft(
    State(mirror): State<Arc<Hedera>>,
    Path((token, serial)): Path<(String, u64)>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match mirror.nfts.lock().get(&(token.clone(), serial)) {
        Some(owner) => axum::Json(json!({
            "account_id": owner, "deleted": false, "serial_number": serial, "token_id": token,
        }))
        .into_response(),
        None => not_found(),
    }
}

pub async fn start_hedera() -> (String, Arc<Hedera>) {
    let mirror = Arc::new(Hedera::default());
    let app = Router::new()
        .route("/api/v1/accounts/{id}", get(mirror_account))
        .route("/api/v1/accounts/{id}/nfts", get(mirror_account_nfts))
        .route("/api/v1/tokens/{id}", get(mirror_token))
        .route("/api/v1/tokens/{id}/nfts/{serial}", get(mirror_nft))
        .with_state(mirror.clone());
    (serve(app).await, mirror)
}

// ---------------------------------------------------------------- Solana

pub const TOKEN_PROGRAM: &str = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
pub const METADATA_PROGRAM: &str = "metaqbxxUerdq28cj1RbAWkYQm3ybzjb6a8bt518x1s";

#[derive(Default)]
pub struct Solana {
    /// Address → (owner program, data).
    pub accounts: Mutex<HashMap<String, (String, Vec<u8>)>>,
    /// (owner, mint) → amount held.
    pub holdings: Mutex<HashMap<(String, String), u64>>,
}

impl Solana {
    /// A one-of-one mint (supply 1, 0 decimals) at `mint`.
    pub fn add_mint(&self, mint: &str, supply: u64, decimals: u8) {
        let mut data = vec![0u8; 82];
        data[36..44].copy_from_slice(&supply.to_le_bytes());
        data[44] = decimals;
        data[45] = 1;
        self.accounts
            .lock()
            .insert(mint.to_owned(), (TOKEN_PROGRAM.to_owned(), data));
    }

    /// The metadata account of `mint` at `pda`, naming `collection` (verified or not).
    pub fn add_metadata(&self, pda: &str, mint: &[u8; 32], collection: Option<(bool, [u8; 32])>) {
        let mut data = vec![4u8];
        data.extend([9u8; 32]);
        data.extend(mint);
        for text in ["Member", "CLUB", "https://example.com/m.json"] {
            data.extend((text.len() as u32).to_le_bytes());
            data.extend(text.as_bytes());
        }
        data.extend(0u16.to_le_bytes());
        data.push(0);
        data.extend([0, 1, 0, 1, 0]);
        match collection {
            Some((verified, key)) => {
                data.extend([1, u8::from(verified)]);
                data.extend(key);
            }
            None => data.push(0),
        }
        data.extend([0u8; 64]);
        self.accounts
            .lock()
            .insert(pda.to_owned(), (METADATA_PROGRAM.to_owned(), data));
    }
}

async fn solana_rpc(State(chain): State<Arc<Solana>>, body: String) -> axum::Json<Value> {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let params = &request["params"];
    let context = json!({"slot": 4242, "apiVersion": "2.2.0"});
    let result = match request["method"].as_str().unwrap_or_default() {
        "getAccountInfo" => {
            let address = params[0].as_str().unwrap_or_default();
            let value = chain.accounts.lock().get(address).map(|(owner, data)| {
                json!({
                    "data": [STANDARD.encode(data), "base64"],
                    "executable": false, "lamports": 1_461_600, "owner": owner,
                    "rentEpoch": 18_446_744_073_709_551_615u64, "space": data.len(),
                })
            });
            json!({"context": context, "value": value})
        }
        "getTokenAccountsByOwner" => {
            let owner = params[0].as_str().unwrap_or_default().to_owned();
            let mint = params[1]["mint"].as_str().unwrap_or_default().to_owned();
            let amount = chain
                .holdings
                .lock()
                .get(&(owner.clone(), mint.clone()))
                .copied();
            let value: Vec<Value> = amount
                .map(|amount| {
                    json!({
                        "pubkey": "8nPBnf2jZ5N1Rg3eVTP1Wxyvxh8sM5FaPtSAc5MFgE2x",
                        "account": {
                            "data": {"parsed": {"info": {
                                "isNative": false, "mint": mint, "owner": owner, "state": "initialized",
                                "tokenAmount": {"amount": amount.to_string(), "decimals": 0,
                                                "uiAmount": amount as f64, "uiAmountString": amount.to_string()}
                            }, "type": "account"}, "program": "spl-token", "space": 165},
                            "executable": false, "lamports": 2_039_280, "owner": TOKEN_PROGRAM,
                            "rentEpoch": 18_446_744_073_709_551_615u64, "space": 165
                        }
                    })
                })
                .into_iter()
                .collect();
            json!({"context": context, "value": value})
        }
        _ => {
            return axum::Json(json!({
                "jsonrpc": "2.0", "id": request["id"],
                "error": {"code": -32601, "message": "Method not found"}
            }));
        }
    };
    rpc_answer(&request, result)
}

pub async fn start_solana() -> (String, Arc<Solana>) {
    let chain = Arc::new(Solana::default());
    let app = Router::new()
        .route("/", post(solana_rpc))
        .with_state(chain.clone());
    (serve(app).await, chain)
}
