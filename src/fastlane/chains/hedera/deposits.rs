//! Hedera deposits: HBAR transfers into the receiving account, newest first.
//!
//! The mirror node's 100 newest successful crypto transfers touching the account since the
//! lookback are read once per lookup. A transfer counts when it credits the account on net;
//! the payer is the account debited the most (so the node and fee accounts, which are
//! credited, are never taken for it) — a guess when several accounts paid in one
//! transaction. The memo is the transaction's, base64-decoded.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use super::lookups::HederaLookups;
use crate::fastlane::lookups::{ChainLookups as _, IncomingTransfer};
use crate::fastlane::mechanism::ChainError;

/// Transactions read per lookup.
pub const PAGE_SIZE: u32 = 100;
/// Longest memo Hedera allows, in bytes.
const MAX_MEMO_BYTES: usize = 100;

pub(super) async fn incoming(
    lookups: &HederaLookups,
    pay_to: &str,
    since: u64,
) -> Result<Vec<IncomingTransfer>, ChainError> {
    let unavailable = |message: String| ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    };
    if !is_account_id(pay_to) {
        return Err(unavailable(format!("{pay_to:?} is not an account id")));
    }
    let path = format!(
        "/api/v1/transactions?account.id={pay_to}&transactiontype=cryptotransfer&result=success&order=desc&limit={PAGE_SIZE}&timestamp=gte:{since}"
    );
    let answer: Option<Value> = lookups
        .mirror()
        .get(&path)
        .await
        .map_err(|e| unavailable(format!("mirror transactions: {e}")))?;
    Ok(answer.map_or_else(Vec::new, |page| read_transactions(&page, pay_to, since)))
}

/// `shard.realm.num`, digits only.
fn is_account_id(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

/// The transfers that credited `pay_to` at or after `since` on a mirror transactions page.
pub fn read_transactions(page: &Value, pay_to: &str, since: u64) -> Vec<IncomingTransfer> {
    let Some(transactions) = page.get("transactions").and_then(Value::as_array) else {
        return Vec::new();
    };
    transactions
        .iter()
        .filter_map(|transaction| read_transaction(transaction, pay_to, since))
        .collect()
}

fn read_transaction(transaction: &Value, pay_to: &str, since: u64) -> Option<IncomingTransfer> {
    let text = |key: &str| transaction.get(key).and_then(Value::as_str);
    if text("result")? != "SUCCESS" {
        return None;
    }
    let id = text("transaction_id")?;
    let seconds = text("consensus_timestamp")?.split('.').next()?;
    let time: u64 = seconds.parse().ok()?;
    if id.is_empty() || time < since {
        return None;
    }
    let mut credited: i128 = 0;
    let mut most_debited: Option<(&str, i64)> = None;
    for transfer in transaction.get("transfers")?.as_array()? {
        let account = transfer.get("account")?.as_str()?;
        let amount = transfer.get("amount")?.as_i64()?;
        if account == pay_to {
            credited += i128::from(amount);
        }
        if amount < most_debited.map_or(0, |(_, worst)| worst) {
            most_debited = Some((account, amount));
        }
    }
    let (payer, _) = most_debited?;
    let amount = u64::try_from(credited).ok().filter(|amount| *amount > 0)?;
    if payer == pay_to {
        return None;
    }
    let memos = text("memo_base64")
        .and_then(|encoded| STANDARD.decode(encoded).ok())
        .filter(|bytes| !bytes.is_empty() && bytes.len() <= MAX_MEMO_BYTES)
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .map(|memo| vec![memo])
        .unwrap_or_default();
    Some(IncomingTransfer {
        transaction: id.to_owned(),
        payer: payer.to_owned(),
        amount,
        tag: None,
        memos,
        time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SHOP: &str = "0.0.5005";

    fn transaction(id: &str, transfers: Value, memo: &str) -> Value {
        json!({
            "transaction_id": id,
            "consensus_timestamp": "1796637600.123456789",
            "memo_base64": STANDARD.encode(memo),
            "result": "SUCCESS",
            "name": "CRYPTOTRANSFER",
            "transfers": transfers,
        })
    }

    #[test]
    fn the_net_credit_and_the_most_debited_payer_are_read() {
        let page = json!({"transactions": [transaction(
            "0.0.1234-1796637590-000000001",
            json!([
                {"account": "0.0.3", "amount": 4_000, "is_approval": false},
                {"account": "0.0.98", "amount": 80_000, "is_approval": false},
                {"account": "0.0.1234", "amount": -100_084_000, "is_approval": false},
                {"account": SHOP, "amount": 100_000_000, "is_approval": false},
            ]),
            "CT4142434445",
        )]});
        let found = read_transactions(&page, SHOP, 0);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].transaction, "0.0.1234-1796637590-000000001");
        assert_eq!(found[0].payer, "0.0.1234");
        assert_eq!(found[0].amount, 100_000_000);
        assert_eq!(found[0].memos, ["CT4142434445"]);
        assert_eq!(found[0].time, 1_796_637_600);
    }

    #[test]
    fn outgoing_failed_old_and_malformed_transactions_are_skipped() {
        let outgoing = transaction(
            "out",
            json!([{"account": SHOP, "amount": -10}, {"account": "0.0.7", "amount": 10}]),
            "",
        );
        let mut failed = transaction(
            "failed",
            json!([{"account": "0.0.7", "amount": -10}, {"account": SHOP, "amount": 10}]),
            "",
        );
        failed["result"] = json!("INSUFFICIENT_PAYER_BALANCE");
        let overflowing = transaction(
            "huge",
            json!([{"account": "0.0.7", "amount": -1}, {"account": SHOP, "amount": 1e30}]),
            "",
        );
        let page =
            json!({"transactions": [outgoing, failed, overflowing, null, {"result": "SUCCESS"}]});
        assert!(read_transactions(&page, SHOP, 0).is_empty());
        let recent = transaction(
            "recent",
            json!([{"account": "0.0.7", "amount": -10}, {"account": SHOP, "amount": 10}]),
            "",
        );
        assert!(
            read_transactions(&json!({"transactions": [recent]}), SHOP, 1_796_637_601).is_empty()
        );
    }

    #[test]
    fn a_memo_that_is_not_base64_text_is_ignored() {
        let mut page = json!({"transactions": [transaction(
            "m",
            json!([{"account": "0.0.7", "amount": -10}, {"account": SHOP, "amount": 10}]),
            "",
        )]});
        page["transactions"][0]["memo_base64"] = json!("%%%");
        let found = read_transactions(&page, SHOP, 0);
        assert!(found[0].memos.is_empty());
        assert!(read_transactions(&json!({"transactions": "x"}), SHOP, 0).is_empty());
    }

    #[test]
    fn only_account_ids_are_asked_about() {
        assert!(is_account_id("0.0.5005"));
        assert!(!is_account_id("0.0"));
        assert!(!is_account_id("0.0.5&limit=1"));
        assert!(!is_account_id("0..5"));
    }
}
