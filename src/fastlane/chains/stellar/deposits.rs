//! Stellar deposits: native transfers into the receiving address, newest first.
//!
//! Horizon's payments feed of the account (the 200 newest operations, with their transactions
//! joined for the memo) is read once per lookup. Three kinds of operation bring XLM in, and
//! all three are counted when they land native XLM on the account in a successful
//! transaction:
//! - `payment` of the native asset;
//! - `path_payment_strict_receive` and `path_payment_strict_send` whose destination asset is
//!   native (the payer may have sent another asset; `amount` is what arrived);
//! - `create_account` (a first payment that funds a new account: `starting_balance`).
//!
//! Memos are taken when they are text or id memos; hash and return memos carry no text a
//! visitor could have typed.

use serde_json::Value;

use super::lookups::StellarLookups;
use crate::fastlane::lookups::{ChainLookups as _, IncomingTransfer};
use crate::fastlane::mechanism::ChainError;
use crate::fastlane::service::clock::parse_rfc3339;

/// Operations read per lookup (Horizon's page limit).
pub const PAGE_SIZE: u32 = 200;

pub(super) async fn incoming(
    lookups: &StellarLookups,
    pay_to: &str,
    since: u64,
) -> Result<Vec<IncomingTransfer>, ChainError> {
    let unavailable = |message: String| ChainError::Unavailable {
        network: lookups.network().to_owned(),
        message,
    };
    let horizon = lookups
        .horizon()
        .ok_or_else(|| unavailable("deposits need a horizon endpoint in networks.json".into()))?;
    // A G… address is base32 letters and digits: nothing in it needs escaping, and anything
    // else is refused rather than sent.
    if pay_to.is_empty() || !pay_to.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(unavailable(format!("{pay_to:?} is not an account address")));
    }
    let path =
        format!("/accounts/{pay_to}/payments?order=desc&limit={PAGE_SIZE}&join=transactions");
    let answer: Option<Value> = horizon
        .get(&path)
        .await
        .map_err(|e| unavailable(format!("horizon payments: {e}")))?;
    // An account Horizon does not know has received nothing.
    Ok(answer.map_or_else(Vec::new, |page| read_payments(&page, pay_to, since)))
}

/// The native XLM that reached `pay_to` at or after `since`, from a Horizon payments page.
pub fn read_payments(page: &Value, pay_to: &str, since: u64) -> Vec<IncomingTransfer> {
    let Some(records) = page
        .get("_embedded")
        .and_then(|embedded| embedded.get("records"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    records
        .iter()
        .filter_map(|record| read_record(record, pay_to, since))
        .collect()
}

fn read_record(record: &Value, pay_to: &str, since: u64) -> Option<IncomingTransfer> {
    let text = |key: &str| record.get(key).and_then(Value::as_str);
    if record
        .get("transaction_successful")
        .and_then(Value::as_bool)
        != Some(true)
    {
        return None;
    }
    let time = parse_rfc3339(text("created_at")?)?;
    if time < since {
        return None;
    }
    let (payer, receiver, amount) = match text("type")? {
        "payment" | "path_payment_strict_receive" | "path_payment_strict_send" => {
            if text("asset_type")? != "native" {
                return None;
            }
            (text("from")?, text("to")?, text("amount")?)
        }
        "create_account" => (text("funder")?, text("account")?, text("starting_balance")?),
        _ => return None,
    };
    if receiver != pay_to || payer.is_empty() {
        return None;
    }
    let amount = stroops(amount)?;
    let hash = text("transaction_hash")?;
    if hash.is_empty() || amount == 0 {
        return None;
    }
    let transaction = record.get("transaction");
    let memo_type = transaction
        .and_then(|tx| tx.get("memo_type"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let memos = match (
        memo_type,
        transaction
            .and_then(|tx| tx.get("memo"))
            .and_then(Value::as_str),
    ) {
        ("text" | "id", Some(memo)) => vec![memo.to_owned()],
        _ => Vec::new(),
    };
    Some(IncomingTransfer {
        transaction: hash.to_owned(),
        payer: payer.to_owned(),
        amount,
        tag: None,
        memos,
        time,
    })
}

/// Horizon's seven-decimal amount (`"12.3400000"`) in stroops, exactly.
pub fn stroops(amount: &str) -> Option<u64> {
    let (whole, fraction) = amount.split_once('.').unwrap_or((amount, ""));
    if whole.is_empty()
        || fraction.len() > 7
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let fraction: u64 = format!("{fraction:0<7}").parse().ok()?;
    whole.checked_mul(10_000_000)?.checked_add(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SHOP: &str = "GSHOPADDRESS";

    fn record(kind: &str, fields: Value, memo: Option<(&str, &str)>) -> Value {
        let mut record = json!({
            "type": kind,
            "created_at": "2026-12-07T10:00:00Z",
            "transaction_hash": format!("hash-{kind}"),
            "transaction_successful": true,
        });
        for (key, value) in fields.as_object().unwrap() {
            record[key] = value.clone();
        }
        if let Some((kind, text)) = memo {
            record["transaction"] = json!({"memo_type": kind, "memo": text});
        } else {
            record["transaction"] = json!({"memo_type": "none"});
        }
        record
    }

    fn page(records: Vec<Value>) -> Value {
        json!({"_embedded": {"records": records}})
    }

    #[test]
    fn amounts_read_in_stroops_exactly() {
        assert_eq!(stroops("12.3400000"), Some(123_400_000));
        assert_eq!(stroops("0.0000001"), Some(1));
        assert_eq!(stroops("5"), Some(50_000_000));
        assert_eq!(stroops("5."), Some(50_000_000));
        for bad in [
            "",
            ".5",
            "1.00000001",
            "-1",
            "1e3",
            "x",
            "99999999999999999999",
        ] {
            assert_eq!(stroops(bad), None, "{bad}");
        }
    }

    #[test]
    fn native_payments_path_payments_and_account_creations_count() {
        let records = vec![
            record(
                "payment",
                json!({"asset_type": "native", "from": "GPAYER", "to": SHOP, "amount": "10.0000123"}),
                Some(("text", "CT4142434445")),
            ),
            record(
                "path_payment_strict_send",
                json!({"asset_type": "native", "source_asset_type": "credit_alphanum4", "from": "GPATH", "to": SHOP, "amount": "2.0000000"}),
                Some(("id", "77")),
            ),
            record(
                "create_account",
                json!({"funder": "GFUNDER", "account": SHOP, "starting_balance": "1.5000000"}),
                Some(("hash", "AAAA")),
            ),
        ];
        let found = read_payments(&page(records), SHOP, 0);
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].payer, "GPAYER");
        assert_eq!(found[0].amount, 100_000_123);
        assert_eq!(found[0].memos, ["CT4142434445"]);
        assert_eq!(found[0].transaction, "hash-payment");
        assert_eq!(found[1].payer, "GPATH");
        assert_eq!(found[1].memos, ["77"]);
        assert_eq!(found[2].payer, "GFUNDER");
        assert_eq!(found[2].amount, 15_000_000);
        assert!(found[2].memos.is_empty());
    }

    #[test]
    fn other_assets_outgoing_failed_and_old_operations_do_not() {
        let mut failed = record(
            "payment",
            json!({"asset_type": "native", "from": "GP", "to": SHOP, "amount": "1"}),
            None,
        );
        failed["transaction_successful"] = json!(false);
        let mut old = record(
            "payment",
            json!({"asset_type": "native", "from": "GP", "to": SHOP, "amount": "1"}),
            None,
        );
        old["created_at"] = json!("2020-01-01T00:00:00Z");
        let records = vec![
            record(
                "payment",
                json!({"asset_type": "credit_alphanum4", "from": "GP", "to": SHOP, "amount": "1"}),
                None,
            ),
            record(
                "payment",
                json!({"asset_type": "native", "from": SHOP, "to": "GOTHER", "amount": "1"}),
                None,
            ),
            record(
                "account_merge",
                json!({"account": "GP", "into": SHOP}),
                None,
            ),
            failed,
            old,
        ];
        let since = parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        assert!(read_payments(&page(records), SHOP, since).is_empty());
    }

    #[test]
    fn malformed_pages_give_nothing_rather_than_a_panic() {
        for bad in [
            json!(null),
            json!({"_embedded": 1}),
            json!({"_embedded": {"records": [null, 1, {"type": 5}, {"type": "payment", "transaction_successful": true, "created_at": "x"}]}}),
        ] {
            assert!(read_payments(&bad, SHOP, 0).is_empty());
        }
    }
}
