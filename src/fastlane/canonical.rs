//! The one canonical JSON form of a payment, and the settlement id hashed from it.
//!
//! Canonical: object keys sorted by their UTF-8 bytes, no whitespace, number literals as parsed
//! (serde_json keeps them verbatim with `arbitrary_precision`), and strings escaped as Go's
//! `encoding/json` does with HTML escaping off: `"` and `\` backslashed, `\b \f \n \r \t`
//! short, other control characters and U+2028/U+2029 as `\u00XX`/`\u2028`/`\u2029`, everything
//! else (including `<`, `>`, `&` and non-ASCII) as is. The receipt journal and the settlement
//! journal both key payments by the same id, so they must hash the same bytes.
//!
//! Journals written by the original service hashed with HTML escaping on; [`legacy_settlement_id`]
//! gives that form so old entries are still found.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// How `<`, `>` and `&` are written inside strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HtmlEscaping {
    Off,
    /// `\u003c`, `\u003e`, `\u0026`: what older journals hashed.
    On,
}

/// The canonical JSON text of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, HtmlEscaping::Off);
    out
}

/// The canonical JSON text of an object (a payment's `payload`).
pub fn canonical_object(object: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_object(&mut out, object, HtmlEscaping::Off);
    out
}

/// The id under which a payment is journaled: hex SHA-256 of
/// `"<network>/<scheme>/" + canonical(payload)`.
pub fn settlement_id(network: &str, scheme: &str, payload: &Map<String, Value>) -> String {
    let mut text = String::new();
    write_object(&mut text, payload, HtmlEscaping::Off);
    hash_id(network, scheme, &text)
}

/// The id the original service computed for the same payment (HTML escaping on). Equal to
/// [`settlement_id`] unless a string of the payload holds `<`, `>` or `&`.
pub fn legacy_settlement_id(network: &str, scheme: &str, payload: &Map<String, Value>) -> String {
    let mut text = String::new();
    write_object(&mut text, payload, HtmlEscaping::On);
    hash_id(network, scheme, &text)
}

/// True for a 64-character lowercase hex id.
pub fn is_settlement_id(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn hash_id(network: &str, scheme: &str, canonical: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(network.as_bytes());
    hasher.update(b"/");
    hasher.update(scheme.as_bytes());
    hasher.update(b"/");
    hasher.update(canonical.as_bytes());
    hex::encode(hasher.finalize())
}

fn write_value(out: &mut String, value: &Value, html: HtmlEscaping) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        // With `arbitrary_precision` this is the literal as it was read.
        Value::Number(number) => out.push_str(&number.to_string()),
        Value::String(text) => write_string(out, text, html),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(out, item, html);
            }
            out.push(']');
        }
        Value::Object(object) => write_object(out, object, html),
    }
}

fn write_object(out: &mut String, object: &Map<String, Value>, html: HtmlEscaping) {
    // Sorted here rather than trusting the map's order: `str` ordering is bytewise.
    let mut entries: Vec<(&String, &Value)> = object.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (index, (key, value)) in entries.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        write_string(out, key, html);
        out.push(':');
        write_value(out, value, html);
    }
    out.push('}');
}

fn write_string(out: &mut String, text: &str, html: HtmlEscaping) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            '<' | '>' | '&' if html == HtmlEscaping::On => {
                let byte = ch as u8;
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
            control if (control as u32) < 0x20 => {
                let byte = control as u8;
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
            other => out.push(other),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn object(text: &str) -> Map<String, Value> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            other => panic!("not an object: {other:?}"),
        }
    }

    #[test]
    fn keys_are_sorted_bytewise_and_whitespace_dropped() {
        let payload = object(r#"{ "b": 1, "a": {"z": [1, 2], "Z": null}, "é": true, "B": "x" }"#);
        assert_eq!(
            canonical_object(&payload),
            r#"{"B":"x","a":{"Z":null,"z":[1,2]},"b":1,"é":true}"#
        );
    }

    #[test]
    fn number_literals_are_kept_as_written() {
        let payload = object(
            r#"{"big":123456789012345678901234567890,"frac":1.50,"neg":-0,"tag":18446744073709551615}"#,
        );
        assert_eq!(
            canonical_object(&payload),
            r#"{"big":123456789012345678901234567890,"frac":1.50,"neg":-0,"tag":18446744073709551615}"#
        );
    }

    #[test]
    fn strings_are_escaped_as_go_does_without_html_escaping() {
        let payload =
            json!({"s": "q\" b\\ \u{8}\u{c}\n\r\t \u{1} \u{1f} <>& \u{2028}\u{2029} é ☃ \u{7f}"});
        assert_eq!(
            canonical_json(&payload),
            "{\"s\":\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0001 \\u001f <>& \\u2028\\u2029 é ☃ \u{7f}\"}"
        );
    }

    #[test]
    fn the_id_hashes_network_scheme_and_payload() {
        let payload = object(r#"{"signedTxBlob":"ABCD"}"#);
        let expected = hex::encode(Sha256::digest(br#"xrpl:1/exact/{"signedTxBlob":"ABCD"}"#));
        assert_eq!(settlement_id("xrpl:1", "exact", &payload), expected);
        assert!(is_settlement_id(&expected));
        assert_ne!(settlement_id("xrpl:0", "exact", &payload), expected);
    }

    #[test]
    fn reordered_keys_give_the_same_id() {
        let one = object(r#"{"transaction":"AAA","memo":{"b":2,"a":1}}"#);
        let two = object(r#"{ "memo" : { "a":1, "b":2 }, "transaction" : "AAA" }"#);
        assert_eq!(
            settlement_id("stellar:testnet", "exact", &one),
            settlement_id("stellar:testnet", "exact", &two)
        );
    }

    #[test]
    fn the_legacy_id_differs_only_where_html_escaping_changes_the_text() {
        let plain = object(r#"{"transaction":"AAA+/="}"#);
        assert_eq!(
            settlement_id("hedera:testnet", "exact", &plain),
            legacy_settlement_id("hedera:testnet", "exact", &plain)
        );
        let html = object(r#"{"memo":"a<b>&c"}"#);
        assert_ne!(
            settlement_id("hedera:testnet", "exact", &html),
            legacy_settlement_id("hedera:testnet", "exact", &html)
        );
        let legacy = hex::encode(Sha256::digest(
            br#"hedera:testnet/exact/{"memo":"a\u003cb\u003e\u0026c"}"#,
        ));
        assert_eq!(
            legacy_settlement_id("hedera:testnet", "exact", &html),
            legacy
        );
    }

    #[test]
    fn only_lowercase_sixty_four_hex_is_an_id() {
        assert!(is_settlement_id(&"0".repeat(64)));
        assert!(!is_settlement_id(&"0".repeat(63)));
        assert!(!is_settlement_id(&"A".repeat(64)));
        assert!(!is_settlement_id(&"g".repeat(64)));
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            "\\PC{0,12}".prop_map(Value::String),
            proptest::collection::vec(any::<char>(), 0..8)
                .prop_map(|chars| Value::String(chars.into_iter().collect())),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_text_parses_back_to_the_same_value_and_is_stable(value in any_json()) {
            let text = canonical_json(&value);
            let parsed: Value = serde_json::from_str(&text).expect("canonical text is JSON");
            prop_assert_eq!(&parsed, &value);
            prop_assert_eq!(canonical_json(&parsed), text.clone());
            let raw_line_breaks = text.contains('\n') || text.contains('\u{2028}');
            prop_assert!(!raw_line_breaks, "raw line break in {}", text);
        }

        #[test]
        fn legacy_text_parses_to_the_same_value(value in any_json()) {
            let mut text = String::new();
            write_value(&mut text, &value, HtmlEscaping::On);
            prop_assert!(!text.contains(['<', '>', '&']));
            let parsed: Value = serde_json::from_str(&text).expect("legacy text is JSON");
            prop_assert_eq!(parsed, value);
        }

        #[test]
        fn pretty_printed_input_hashes_the_same(value in any_json()) {
            if let Value::Object(map) = &value {
                let pretty = serde_json::to_string_pretty(&value).expect("serialisable");
                let reparsed = object(&pretty);
                prop_assert_eq!(
                    settlement_id("xrpl:1", "exact", map),
                    settlement_id("xrpl:1", "exact", &reparsed)
                );
            }
        }
    }
}
