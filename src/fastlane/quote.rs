//! Offers priced by the line. With `-rate` or `-surge` set, skipping the line has a cost that
//! grows with the visitor's place and the line's length; with a fast lane configured that cost
//! is counted in multiples of each offer's own price, so one setting prices every chain's offer
//! alike. A visitor's price is the offer's amount plus that multiple of it, rounded up to a
//! whole atomic unit.
//!
//! A priced offer is a quote: the offer with the new amount and, in `extra`, a field holding
//! the session it was made for, when it ends, and a MAC over both, the amount and the offer it
//! was priced from. The service and the gateway can then tell a quote Concert made from an
//! amount a client made up, without keeping any state, and across restarts. Whether a quote has
//! ended matters only for a new payment: the identical retry of a payment under way keeps the
//! terms it was journaled with.

use hmac::Hmac;
use serde_json::{Map, Value};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::x402::PaymentRequirements;
use crate::sys::keyed_hash::{keyed, tag_of};

/// The `extra` field a quote travels in.
pub const QUOTE_FIELD: &str = "concertQuote";

/// Bytes of MAC a quote carries (128 bits).
const TAG_BYTES: usize = 16;

/// The largest atomic amount an offer may have (it must fit a signed 64-bit integer).
const MAX_AMOUNT: u64 = i64::MAX as u64;

/// The key quotes are signed with, derived from `CONCERT_ADMIT_SECRET` so that every Concert
/// sharing the secret (and a restarted one) recognises the quotes of the others.
#[derive(Clone)]
pub struct QuoteKey {
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for QuoteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuoteKey(..)")
    }
}

/// What a verified quote says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuoteClaims {
    /// Index into the offers the quote was checked against.
    pub offer: usize,
    /// The session (hex id) the quote was made for.
    pub session: String,
    /// Unix seconds after which it no longer starts a new payment.
    pub expires: u64,
}

impl QuoteKey {
    pub fn from_admit_secret(secret: &[u8]) -> QuoteKey {
        let derived = tag_of(&keyed(secret), b"concert fast lane quotes v1");
        QuoteKey {
            keyed: keyed(&derived),
        }
    }

    /// `base` priced for a visitor whose skip costs `skip_cost` times its amount, bound to
    /// `session` until `expires`. A skip that costs nothing (or a cost that is not a positive
    /// number) leaves the offer exactly as configured.
    pub fn quote(
        &self,
        base: &PaymentRequirements,
        skip_cost: f64,
        session: &str,
        expires: u64,
    ) -> PaymentRequirements {
        let Some(amount) = priced_amount(&base.amount, skip_cost) else {
            return base.clone();
        };
        if amount == base.amount {
            return base.clone();
        }
        let tag = self.tag(base, &amount, session, expires);
        let mut quoted = base.clone();
        quoted.amount = amount;
        quoted.extra.get_or_insert_with(Map::new).insert(
            QUOTE_FIELD.into(),
            Value::String(format!("{session}.{expires}.{}", hex::encode(tag))),
        );
        quoted
    }

    /// When `terms` is a quote this key made from one of `offers`, what it says. Expiry is not
    /// checked here: the caller decides whether an ended quote still counts.
    pub fn check(
        &self,
        terms: &PaymentRequirements,
        offers: &[PaymentRequirements],
    ) -> Option<QuoteClaims> {
        let extra = terms.extra.as_ref()?;
        let field = extra.get(QUOTE_FIELD)?.as_str()?;
        let mut parts = field.split('.');
        let (session, expires, tag) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || session.is_empty() || session.len() > 64 {
            return None;
        }
        let expires: u64 = expires.parse().ok()?;
        let tag = hex::decode(tag).ok()?;
        let unquoted = without_quote(terms);
        let offer = offers
            .iter()
            .position(|offer| same_offer(offer, &unquoted))?;
        let base = &offers[offer];
        if !is_higher(&terms.amount, &base.amount) {
            return None;
        }
        let expected = self.tag(base, &terms.amount, session, expires);
        bool::from(expected.ct_eq(tag.as_slice())).then(|| QuoteClaims {
            offer,
            session: session.to_owned(),
            expires,
        })
    }

    fn tag(
        &self,
        base: &PaymentRequirements,
        amount: &str,
        session: &str,
        expires: u64,
    ) -> [u8; TAG_BYTES] {
        let base_bytes = serde_json::to_vec(base).unwrap_or_default();
        let mut message = Vec::with_capacity(base_bytes.len() + 96);
        message.extend_from_slice(&base_bytes);
        for part in [
            amount.as_bytes(),
            session.as_bytes(),
            expires.to_string().as_bytes(),
        ] {
            message.push(0);
            message.extend_from_slice(part);
        }
        let full = tag_of(&self.keyed, &message);
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&full[..TAG_BYTES]);
        tag
    }
}

/// `base` plus `skip_cost` times `base`, rounded up, capped at the largest amount an offer may
/// have. `None` for an amount that is not a decimal count of atomic units.
pub fn priced_amount(base: &str, skip_cost: f64) -> Option<String> {
    let base_units: u64 = base.parse().ok()?;
    if !(skip_cost.is_finite() && skip_cost > 0.0) {
        return Some(base.to_owned());
    }
    // The base is kept exact; only the addition goes through floating point.
    let extra = (base_units as f64 * skip_cost).ceil();
    let extra = if extra >= MAX_AMOUNT as f64 {
        MAX_AMOUNT
    } else {
        extra as u64
    };
    Some(base_units.saturating_add(extra).min(MAX_AMOUNT).to_string())
}

/// `terms` with the quote field removed (and `extra` gone if that was all it held).
fn without_quote(terms: &PaymentRequirements) -> PaymentRequirements {
    let mut plain = terms.clone();
    if let Some(extra) = plain.extra.as_mut() {
        extra.remove(QUOTE_FIELD);
        if extra.is_empty() {
            plain.extra = None;
        }
    }
    plain
}

/// The same offer apart from its amount (an empty `extra` equals none).
fn same_offer(offer: &PaymentRequirements, unquoted: &PaymentRequirements) -> bool {
    let extra_of = |terms: &PaymentRequirements| terms.extra.clone().filter(|m| !m.is_empty());
    offer.scheme == unquoted.scheme
        && offer.network == unquoted.network
        && offer.asset == unquoted.asset
        && offer.pay_to == unquoted.pay_to
        && offer.max_timeout_seconds == unquoted.max_timeout_seconds
        && extra_of(offer) == extra_of(unquoted)
}

/// Whether decimal amount `a` is greater than `b`.
fn is_higher(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a > b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn offer(amount: &str, extra: Option<Value>) -> PaymentRequirements {
        PaymentRequirements {
            scheme: "exact".into(),
            network: "xrpl:1".into(),
            amount: amount.into(),
            asset: "XRP".into(),
            pay_to: "rMerchant".into(),
            max_timeout_seconds: 60,
            extra: extra.and_then(|v| v.as_object().cloned()),
        }
    }

    fn key() -> QuoteKey {
        QuoteKey::from_admit_secret(b"a secret of at least thirty-two bytes")
    }

    #[test]
    fn the_price_is_the_amount_plus_the_skip_in_multiples_of_it() {
        assert_eq!(priced_amount("100000", 0.0).as_deref(), Some("100000"));
        assert_eq!(priced_amount("100000", 2.5).as_deref(), Some("350000"));
        // Rounded up to a whole atomic unit.
        assert_eq!(priced_amount("3", 0.1).as_deref(), Some("4"));
        assert_eq!(priced_amount("100000", f64::NAN).as_deref(), Some("100000"));
        assert_eq!(priced_amount("100000", -1.0).as_deref(), Some("100000"));
        assert_eq!(
            priced_amount("9000000000000000000", 1e9).as_deref(),
            Some("9223372036854775807")
        );
        assert_eq!(priced_amount("12x", 1.0), None);
    }

    #[test]
    fn a_free_skip_leaves_the_offer_as_configured() {
        let base = offer("100000", None);
        assert_eq!(key().quote(&base, 0.0, "ab", 10), base);
    }

    #[test]
    fn a_quote_verifies_for_its_offer_and_says_what_it_was_made_for() {
        let offers = [
            offer("500", None),
            offer("100000", Some(serde_json::json!({"invoiceId": "x"}))),
        ];
        let quoted = key().quote(&offers[1], 1.5, "5e55", 1_000);
        assert_eq!(quoted.amount, "250000");
        assert_eq!(
            quoted.extra.as_ref().and_then(|m| m.get("invoiceId")),
            Some(&Value::String("x".into()))
        );
        assert_eq!(
            key().check(&quoted, &offers),
            Some(QuoteClaims {
                offer: 1,
                session: "5e55".into(),
                expires: 1_000
            })
        );
        // It survives the trip through JSON a client makes.
        let echoed: PaymentRequirements =
            serde_json::from_slice(&serde_json::to_vec(&quoted).unwrap()).unwrap();
        assert!(key().check(&echoed, &offers).is_some());
    }

    #[test]
    fn a_changed_or_foreign_quote_is_not_recognised() {
        let offers = [offer("100000", None)];
        let quoted = key().quote(&offers[0], 1.0, "5e55", 1_000);
        let edit = |change: &dyn Fn(&mut PaymentRequirements)| {
            let mut terms = quoted.clone();
            change(&mut terms);
            key().check(&terms, &offers)
        };
        assert!(edit(&|_| {}).is_some());
        assert!(edit(&|t| t.amount = "150000".into()).is_none());
        assert!(edit(&|t| t.amount = "100000".into()).is_none());
        assert!(edit(&|t| t.pay_to = "rSomeoneElse".into()).is_none());
        let field = |value: &str| {
            let value = value.to_owned();
            move |t: &mut PaymentRequirements| {
                t.extra
                    .get_or_insert_with(Map::new)
                    .insert(QUOTE_FIELD.into(), Value::String(value.clone()));
            }
        };
        let original = quoted.extra.as_ref().unwrap()[QUOTE_FIELD]
            .as_str()
            .unwrap()
            .to_owned();
        let other_session = original.replacen("5e55", "6e66", 1);
        let later = original.replacen(".1000.", ".9000.", 1);
        assert!(edit(&field(&other_session)).is_none());
        assert!(edit(&field(&later)).is_none());
        assert!(edit(&field("nonsense")).is_none());
        assert!(edit(&field("a.b.c.d")).is_none());
        let stranger = QuoteKey::from_admit_secret(b"another secret entirely, also long");
        assert!(stranger.check(&quoted, &offers).is_none());
        // A plain offer is not a quote.
        assert!(key().check(&offers[0], &offers).is_none());
    }

    proptest! {
        #[test]
        fn any_quote_field_is_handled_without_panicking(field in ".{0,200}", amount in "[0-9]{0,22}") {
            let offers = [offer("100000", None)];
            let mut terms = offers[0].clone();
            terms.amount = amount;
            terms.extra = Some(Map::from_iter([(QUOTE_FIELD.to_owned(), Value::String(field))]));
            let _ = key().check(&terms, &offers);
        }

        #[test]
        fn a_price_is_never_below_the_offer(base in 1u64..=MAX_AMOUNT, skip in 0.0f64..1e7) {
            let priced: u64 = priced_amount(&base.to_string(), skip).unwrap().parse().unwrap();
            prop_assert!(priced >= base && priced <= MAX_AMOUNT);
        }
    }
}
