//! Payment fingerprints: hex SHA-256 of `network/scheme/` + the canonical JSON of the signed
//! payload. The same payment always gets the same fingerprint however its JSON was spaced or
//! ordered, so a replay is recognised. It is the gateway's settlement id of the same payment,
//! computed by the one canonical encoder both halves use, so a receipt and its settlement
//! always name each other.

use serde_json::{Map, Value};

/// The fingerprint of a payment's `payload` on `network` with `scheme`.
pub fn fingerprint(network: &str, scheme: &str, payload: &Map<String, Value>) -> String {
    crate::fastlane::canonical::settlement_id(network, scheme, payload)
}

#[cfg(test)]
mod tests {
    use sha2::{Digest as _, Sha256};

    use super::*;

    fn object(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).expect("an object")
    }

    #[test]
    fn fingerprint_ignores_layout_and_order() {
        let a = fingerprint("xrpl:1", "exact", &object(r#"{"signedTxBlob":"AB","x":1}"#));
        let b = fingerprint(
            "xrpl:1",
            "exact",
            &object("{ \"x\":1,\n\"signedTxBlob\" : \"AB\" }"),
        );
        assert_eq!(a, b);
        let expected = Sha256::digest(br#"xrpl:1/exact/{"signedTxBlob":"AB","x":1}"#);
        assert_eq!(a, hex::encode(expected));
        assert_ne!(
            a,
            fingerprint("xrpl:0", "exact", &object(r#"{"signedTxBlob":"AB","x":1}"#))
        );
    }

    #[test]
    fn numbers_are_hashed_as_written() {
        let a = fingerprint(
            "solana:x",
            "s",
            &object(r#"{"n":1.50,"big":18446744073709551616}"#),
        );
        let expected = Sha256::digest(br#"solana:x/s/{"big":18446744073709551616,"n":1.50}"#);
        assert_eq!(a, hex::encode(expected));
    }
}
