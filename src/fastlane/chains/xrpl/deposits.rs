//! XRPL deposits: native transfers into the receiving address, newest first.
//!
//! `account_tx` is read backwards from the newest validated ledger, 200 transactions a page,
//! at most five pages, and stops at the first transaction older than the lookback. Only
//! validated, successful Payments to the address count, for the XRP actually delivered
//! (`delivered_amount`, so a partial payment is never credited for more than arrived);
//! issued currencies are skipped. Both the API v1 (`tx`) and v2 (`tx_json` + `hash`) shapes
//! are read.

use serde_json::{Value, json};

use super::ledger::parse_drops;
use super::lookups::XrplLookups;
use crate::fastlane::lookups::{ChainLookups as _, IncomingTransfer};
use crate::fastlane::mechanism::ChainError;

/// Transactions asked for per page.
pub const PAGE_SIZE: u32 = 200;
/// Pages read at most per lookup.
pub const MAX_PAGES: usize = 5;
/// Seconds between the unix epoch and the XRPL epoch (2000-01-01T00:00:00Z).
pub const RIPPLE_EPOCH: u64 = 946_684_800;

pub(super) async fn incoming(
    lookups: &XrplLookups,
    pay_to: &str,
    since: u64,
) -> Result<Vec<IncomingTransfer>, ChainError> {
    let unavailable = |message: String| ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    };
    let mut found = Vec::new();
    let mut marker: Option<Value> = None;
    for _ in 0..MAX_PAGES {
        let mut params = json!({
            "account": pay_to,
            "ledger_index_min": -1,
            "ledger_index_max": -1,
            "limit": PAGE_SIZE,
            "forward": false,
        });
        if let Some(marker) = marker.take() {
            params["marker"] = marker;
        }
        let result: Value = lookups
            .rpc()
            .call("account_tx", json!([params]))
            .await
            .map_err(|e| unavailable(format!("account_tx: {e}")))?;
        if let Some(code) = result.get("error").and_then(Value::as_str) {
            // An account that has never been funded has received nothing.
            if code == "actNotFound" {
                return Ok(found);
            }
            return Err(unavailable(format!("account_tx: {code}")));
        }
        let page = read_page(&result, pay_to, since);
        found.extend(page.transfers);
        match result.get("marker") {
            Some(next) if !page.reached_older && !next.is_null() => marker = Some(next.clone()),
            _ => return Ok(found),
        }
    }
    // The lookback is bounded by design: what five pages hold is what was found.
    Ok(found)
}

/// What one `account_tx` page says.
#[derive(Debug, Default, PartialEq)]
pub struct Page {
    pub transfers: Vec<IncomingTransfer>,
    /// A transaction older than `since` was seen: later pages are older still.
    pub reached_older: bool,
}

/// The transfers to `pay_to` at or after `since` on an `account_tx` result. Anything that is
/// not a well-formed, validated, successful XRP Payment to `pay_to` is passed over.
pub fn read_page(result: &Value, pay_to: &str, since: u64) -> Page {
    let mut page = Page::default();
    let Some(entries) = result.get("transactions").and_then(Value::as_array) else {
        return page;
    };
    for entry in entries {
        let tx = entry
            .get("tx")
            .or_else(|| entry.get("tx_json"))
            .unwrap_or(&Value::Null);
        let Some(date) = tx.get("date").and_then(Value::as_u64) else {
            continue;
        };
        let time = date.saturating_add(RIPPLE_EPOCH);
        if time < since {
            page.reached_older = true;
            continue;
        }
        if let Some(transfer) = read_entry(entry, tx, pay_to, time) {
            page.transfers.push(transfer);
        }
    }
    page
}

fn read_entry(entry: &Value, tx: &Value, pay_to: &str, time: u64) -> Option<IncomingTransfer> {
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    if entry.get("validated").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let meta = entry.get("meta")?;
    if text(meta, "TransactionResult")?.as_str() != "tesSUCCESS"
        || text(tx, "TransactionType")?.as_str() != "Payment"
        || text(tx, "Destination")?.as_str() != pay_to
    {
        return None;
    }
    // An issued currency is an object; only a string is XRP, in drops.
    let amount = parse_drops(meta.get("delivered_amount")?.as_str()?)?;
    if amount == 0 {
        return None;
    }
    let hash = text(tx, "hash").or_else(|| text(entry, "hash"))?;
    let payer = text(tx, "Account")?;
    if hash.is_empty() || payer.is_empty() {
        return None;
    }
    let tag = tx
        .get("DestinationTag")
        .and_then(Value::as_u64)
        .and_then(|tag| u32::try_from(tag).ok());
    Some(IncomingTransfer {
        transaction: hash,
        payer,
        amount,
        tag,
        memos: Vec::new(),
        time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEST: &str = "rDestinationOfTheShop";

    fn payment(hash: &str, date: u64, delivered: Value, tag: Option<u64>) -> Value {
        let mut tx = json!({
            "Account": "rPayer",
            "Destination": DEST,
            "TransactionType": "Payment",
            "Amount": delivered.clone(),
            "hash": hash,
            "date": date,
        });
        if let Some(tag) = tag {
            tx["DestinationTag"] = json!(tag);
        }
        json!({
            "meta": {"TransactionResult": "tesSUCCESS", "delivered_amount": delivered},
            "tx": tx,
            "validated": true,
        })
    }

    #[test]
    fn validated_xrp_payments_are_read_with_their_tag() {
        let result = json!({"transactions": [
            payment("A1", 800_000_000, json!("5000123"), Some(42)),
            payment("A2", 800_000_000, json!("7"), None),
        ]});
        let page = read_page(&result, DEST, 0);
        assert_eq!(page.transfers.len(), 2);
        assert_eq!(page.transfers[0].transaction, "A1");
        assert_eq!(page.transfers[0].payer, "rPayer");
        assert_eq!(page.transfers[0].amount, 5_000_123);
        assert_eq!(page.transfers[0].tag, Some(42));
        assert_eq!(page.transfers[0].time, 800_000_000 + RIPPLE_EPOCH);
        assert_eq!(page.transfers[1].tag, None);
        assert!(!page.reached_older);
    }

    #[test]
    fn the_v2_shape_is_read_too() {
        let mut entry = payment("", 800_000_000, json!("10"), Some(1));
        let tx = entry["tx"].clone();
        entry.as_object_mut().unwrap().remove("tx");
        entry["tx_json"] = tx;
        entry["tx_json"].as_object_mut().unwrap().remove("hash");
        entry["hash"] = json!("B2");
        let page = read_page(&json!({"transactions": [entry]}), DEST, 0);
        assert_eq!(page.transfers[0].transaction, "B2");
    }

    #[test]
    fn everything_but_a_validated_successful_xrp_payment_to_the_address_is_skipped() {
        let mut unvalidated = payment("C1", 800_000_000, json!("10"), None);
        unvalidated["validated"] = json!(false);
        let mut failed = payment("C2", 800_000_000, json!("10"), None);
        failed["meta"]["TransactionResult"] = json!("tecPATH_PARTIAL");
        let issued = payment(
            "C3",
            800_000_000,
            json!({"currency": "USD", "issuer": "rIssuer", "value": "10"}),
            None,
        );
        let mut elsewhere = payment("C4", 800_000_000, json!("10"), None);
        elsewhere["tx"]["Destination"] = json!("rSomeoneElse");
        let mut offer = payment("C5", 800_000_000, json!("10"), None);
        offer["tx"]["TransactionType"] = json!("OfferCreate");
        let unavailable = payment("C6", 800_000_000, json!("unavailable"), None);
        let huge_tag = payment("C7", 800_000_000, json!("10"), Some(1 << 33));
        let result = json!({"transactions": [unvalidated, failed, issued, elsewhere, offer, unavailable, huge_tag]});
        let page = read_page(&result, DEST, 0);
        assert_eq!(page.transfers.len(), 1, "{:?}", page.transfers);
        assert_eq!(page.transfers[0].transaction, "C7");
        assert_eq!(page.transfers[0].tag, None);
    }

    #[test]
    fn older_transactions_end_the_search() {
        let result = json!({"transactions": [
            payment("D1", 900, json!("10"), None),
            payment("D2", 100, json!("10"), None),
        ]});
        let page = read_page(&result, DEST, 500 + RIPPLE_EPOCH);
        assert_eq!(page.transfers.len(), 1);
        assert!(page.reached_older);
    }

    #[test]
    fn malformed_answers_give_nothing_rather_than_a_panic() {
        for bad in [
            json!(null),
            json!({"transactions": 5}),
            json!({"transactions": [null, 1, "x", {"tx": 3}, {"tx": {"date": "x"}}]}),
            json!({"transactions": [{"tx": {"date": 1}, "meta": [], "validated": true}]}),
        ] {
            assert_eq!(read_page(&bad, DEST, 0), Page::default());
        }
    }
}
