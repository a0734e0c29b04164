//! Solana deposits: native transfers into the receiving address, newest first.
//!
//! `getSignaturesForAddress` lists the address's 40 newest finalized signatures; each one
//! without an error and inside the lookback is read once with `getTransaction` (jsonParsed)
//! for System Program transfers to the address. A finalized transaction never changes, so
//! what was read is kept (bounded) and a page that polls every few seconds costs one
//! `getSignaturesForAddress` plus one `getTransaction` per new signature.
//!
//! Memos: the signature list reports them decorated, `"[<bytes>] <text>"`, several joined by
//! `"; "`, so a plain comparison with the visitor's memo never matched. The text is taken
//! from the transaction's parsed memo instructions instead, and the signature list's memo is
//! also read back to its texts by the byte counts it carries.

use std::collections::HashMap;
use std::sync::LazyLock;

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::lookups::SolanaLookups;
use crate::fastlane::lookups::{ChainLookups as _, IncomingTransfer};
use crate::fastlane::mechanism::ChainError;

/// Signatures read per lookup.
pub const SIGNATURES: u32 = 40;
/// Transactions remembered, across addresses and networks.
const MAX_REMEMBERED: usize = 5_000;
/// The memo programs (v1 and v3), whose instructions carry a memo's text.
const MEMO_PROGRAMS: [&str; 2] = [
    "Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo",
    "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr",
];

/// Finalized transactions already read: `network/address/signature` → the transfer it made
/// to the address, or none.
static READ: LazyLock<Mutex<HashMap<String, Option<IncomingTransfer>>>> =
    LazyLock::new(Mutex::default);

pub(super) async fn incoming(
    lookups: &SolanaLookups,
    pay_to: &str,
    since: u64,
) -> Result<Vec<IncomingTransfer>, ChainError> {
    let unavailable = |message: String| ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    };
    let signatures: Value = lookups
        .rpc()
        .call(
            "getSignaturesForAddress",
            json!([pay_to, {"limit": SIGNATURES, "commitment": "finalized"}]),
        )
        .await
        .map_err(|e| unavailable(format!("getSignaturesForAddress: {e}")))?;
    let mut found = Vec::new();
    for listed in read_signatures(&signatures, since) {
        let key = format!("{}/{pay_to}/{}", lookups.network(), listed.signature);
        let remembered = READ.lock().get(&key).cloned();
        let transfer = match remembered {
            Some(transfer) => transfer,
            None => {
                let transaction: Value = lookups
                    .rpc()
                    .call(
                        "getTransaction",
                        json!([listed.signature, {
                            "encoding": "jsonParsed",
                            "maxSupportedTransactionVersion": 0,
                            "commitment": "finalized",
                        }]),
                    )
                    .await
                    .map_err(|e| unavailable(format!("getTransaction: {e}")))?;
                // Not yet available (null): asked again next time rather than remembered.
                if transaction.is_null() {
                    continue;
                }
                let transfer = read_transaction(&transaction, &listed.signature, pay_to);
                let mut read = READ.lock();
                if read.len() >= MAX_REMEMBERED {
                    read.clear();
                }
                read.insert(key, transfer.clone());
                transfer
            }
        };
        if let Some(mut transfer) = transfer {
            transfer.time = listed.time;
            for memo in listed.memos {
                if !transfer.memos.contains(&memo) {
                    transfer.memos.push(memo);
                }
            }
            found.push(transfer);
        }
    }
    Ok(found)
}

/// One entry of `getSignaturesForAddress` worth reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub signature: String,
    pub time: u64,
    pub memos: Vec<String>,
}

/// The successful signatures at or after `since`, with their memos undecorated.
pub fn read_signatures(result: &Value, since: u64) -> Vec<Listed> {
    let Some(entries) = result.as_array() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let signature = entry.get("signature")?.as_str()?;
            if signature.is_empty() || entry.get("err").is_some_and(|err| !err.is_null()) {
                return None;
            }
            let time = entry.get("blockTime")?.as_u64()?;
            if time < since {
                return None;
            }
            let memos = entry
                .get("memo")
                .and_then(Value::as_str)
                .map(undecorate_memos)
                .unwrap_or_default();
            Some(Listed {
                signature: signature.to_owned(),
                time,
                memos,
            })
        })
        .collect()
}

/// The memo texts in the RPC's `"[n] text; [m] other"` form. Each `[n]` gives the memo's
/// length in bytes, so a memo that itself contains `"; "` is read whole; text that does not
/// follow the form is kept as it is.
pub fn undecorate_memos(decorated: &str) -> Vec<String> {
    let mut memos = Vec::new();
    let mut rest = decorated;
    while !rest.is_empty() {
        let Some((length, text)) = rest
            .strip_prefix('[')
            .and_then(|inner| inner.split_once("] "))
            .and_then(|(digits, text)| Some((digits.parse::<usize>().ok()?, text)))
        else {
            memos.push(rest.to_owned());
            break;
        };
        // The count is of the memo's bytes; an unparseable memo is reported with another text.
        match text.get(..length) {
            Some(memo) if text[length..].is_empty() || text[length..].starts_with("; ") => {
                memos.push(memo.to_owned());
                rest = text[length..].strip_prefix("; ").unwrap_or_default();
            }
            _ => {
                // Lengths that do not fit: split on the separator as a last resort.
                let (memo, next) = text.split_once("; ").unwrap_or((text, ""));
                memos.push(memo.to_owned());
                rest = next;
            }
        }
    }
    memos
}

/// The System Program transfers to `pay_to` in a jsonParsed transaction, summed, with the
/// first one's source as the payer, and the memo instructions' texts. None for a failed
/// transaction or one that sends nothing to the address.
pub fn read_transaction(
    transaction: &Value,
    signature: &str,
    pay_to: &str,
) -> Option<IncomingTransfer> {
    if transaction
        .get("meta")
        .and_then(|meta| meta.get("err"))
        .is_some_and(|err| !err.is_null())
    {
        return None;
    }
    let instructions = transaction
        .get("transaction")?
        .get("message")?
        .get("instructions")?
        .as_array()?;
    let mut payer: Option<&str> = None;
    let mut lamports: u64 = 0;
    let mut memos = Vec::new();
    for instruction in instructions {
        let program_id = instruction
            .get("programId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let program = instruction
            .get("program")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let parsed = instruction.get("parsed");
        if program == "spl-memo" || MEMO_PROGRAMS.contains(&program_id) {
            if let Some(text) = parsed.and_then(Value::as_str) {
                memos.push(text.to_owned());
            }
            continue;
        }
        if program != "system" {
            continue;
        }
        let Some(parsed) = parsed else { continue };
        if parsed.get("type").and_then(Value::as_str) != Some("transfer") {
            continue;
        }
        let Some(info) = parsed.get("info") else {
            continue;
        };
        let destination = info.get("destination").and_then(Value::as_str);
        let source = info.get("source").and_then(Value::as_str);
        let amount = info.get("lamports").and_then(Value::as_u64);
        if let (Some(destination), Some(source), Some(amount)) = (destination, source, amount)
            && destination == pay_to
            && source != pay_to
            && amount > 0
        {
            payer.get_or_insert(source);
            lamports = lamports.checked_add(amount)?;
        }
    }
    let payer = payer?;
    Some(IncomingTransfer {
        transaction: signature.to_owned(),
        payer: payer.to_owned(),
        amount: lamports,
        tag: None,
        memos,
        time: transaction
            .get("blockTime")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOP: &str = "ShopAddress1111111111111111111111111111111";

    #[test]
    fn decorated_memos_read_back_to_their_texts() {
        assert_eq!(undecorate_memos("[12] CT4142434445"), ["CT4142434445"]);
        assert_eq!(
            undecorate_memos("[12] CT4142434445; [5] hello"),
            ["CT4142434445", "hello"]
        );
        // A memo containing the separator is kept whole, by its byte count.
        assert_eq!(undecorate_memos("[4] a; b; [1] c"), ["a; b", "c"]);
        // Multi-byte text counts bytes.
        assert_eq!(undecorate_memos("[5] café"), ["café"]);
        // Counts that do not fit, and undecorated text, are kept as found.
        assert_eq!(undecorate_memos("[99] short"), ["short"]);
        assert_eq!(undecorate_memos("plain"), ["plain"]);
        assert_eq!(undecorate_memos(""), Vec::<String>::new());
        assert_eq!(undecorate_memos("[x] y"), ["[x] y"]);
        assert_eq!(undecorate_memos("[3] é"), ["é"]);
    }

    #[test]
    fn signatures_with_errors_or_before_the_lookback_are_skipped() {
        let result = json!([
            {"signature": "S1", "err": null, "blockTime": 2000, "memo": "[12] CT4142434445", "confirmationStatus": "finalized"},
            {"signature": "S2", "err": {"InstructionError": [0, "Custom"]}, "blockTime": 2000, "memo": null},
            {"signature": "S3", "err": null, "blockTime": 10, "memo": null},
            {"signature": "S4", "err": null, "blockTime": null},
            {"signature": 5},
            null,
        ]);
        let listed = read_signatures(&result, 1000);
        assert_eq!(
            listed,
            [Listed {
                signature: "S1".into(),
                time: 2000,
                memos: vec!["CT4142434445".into()],
            }]
        );
        assert!(read_signatures(&json!({"x": 1}), 0).is_empty());
    }

    fn transfer(source: &str, destination: &str, lamports: u64) -> Value {
        json!({
            "program": "system",
            "programId": "11111111111111111111111111111111",
            "parsed": {"type": "transfer", "info": {"source": source, "destination": destination, "lamports": lamports}},
        })
    }

    #[test]
    fn transfers_to_the_address_and_memo_instructions_are_read() {
        let transaction = json!({
            "blockTime": 2000,
            "meta": {"err": null},
            "transaction": {"message": {"instructions": [
                {"program": "spl-memo", "programId": MEMO_PROGRAMS[1], "parsed": "CT4142434445"},
                transfer("Payer1", SHOP, 10_000_123),
                transfer("Payer1", "Elsewhere", 5),
                {"program": "system", "parsed": {"type": "createAccount", "info": {}}},
            ]}},
        });
        let found = read_transaction(&transaction, "SIG", SHOP).unwrap();
        assert_eq!(found.transaction, "SIG");
        assert_eq!(found.payer, "Payer1");
        assert_eq!(found.amount, 10_000_123);
        assert_eq!(found.memos, ["CT4142434445"]);
        assert_eq!(found.time, 2000);
    }

    #[test]
    fn failed_unrelated_and_malformed_transactions_give_nothing() {
        let failed = json!({
            "meta": {"err": {"InstructionError": [0, "Custom"]}},
            "transaction": {"message": {"instructions": [transfer("P", SHOP, 10)]}},
        });
        assert_eq!(read_transaction(&failed, "S", SHOP), None);
        let outgoing = json!({
            "meta": {"err": null},
            "transaction": {"message": {"instructions": [transfer(SHOP, "P", 10)]}},
        });
        assert_eq!(read_transaction(&outgoing, "S", SHOP), None);
        for bad in [
            json!(null),
            json!({"transaction": 1}),
            json!({"transaction": {"message": {"instructions": [null, {"program": "system"}, {"program": "system", "parsed": {"type": "transfer", "info": {"lamports": "x"}}}]}}}),
        ] {
            assert_eq!(read_transaction(&bad, "S", SHOP), None);
        }
    }
}
