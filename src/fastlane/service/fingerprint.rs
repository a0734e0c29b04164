//! Payment fingerprints: hex SHA-256 of `network/scheme/` + the canonical JSON of the signed
//! payload. The same payment always gets the same fingerprint however its JSON was spaced or
//! ordered, so a replay is recognised; the gateway's settlement ids use the same rule.
//!
//! Canonical JSON here: object keys sorted bytewise (a repeated key keeps its last value), no
//! whitespace, number literals copied verbatim, strings re-escaped as Go's encoder does with
//! HTML escaping off (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other controls as `\u00XX`,
//! U+2028/U+2029 escaped, everything else literal; lone surrogates become U+FFFD).

use sha2::{Digest as _, Sha256};

/// Deeper nesting than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not canonicalisable JSON at byte {at}")]
pub struct CanonicalError {
    pub at: usize,
}

/// The fingerprint of `payload` (raw JSON text of the payment's `payload` member).
pub fn fingerprint(
    network: &str,
    scheme: &str,
    payload_json: &str,
) -> Result<String, CanonicalError> {
    let canonical = canonical_json(payload_json)?;
    let mut hash = Sha256::new();
    hash.update(network.as_bytes());
    hash.update(b"/");
    hash.update(scheme.as_bytes());
    hash.update(b"/");
    hash.update(canonical.as_bytes());
    Ok(hex::encode(hash.finalize()))
}

/// The raw text of the top-level member `name` of a JSON object (last occurrence wins), or
/// `None` when the text is not an object or lacks it.
pub fn member_text<'a>(json: &'a str, name: &str) -> Option<&'a str> {
    let mut parser = Parser::new(json);
    parser.skip_ws();
    if parser.peek() != Some(b'{') {
        return None;
    }
    parser.pos += 1;
    let mut found = None;
    parser.skip_ws();
    if parser.peek() == Some(b'}') {
        return None;
    }
    loop {
        parser.skip_ws();
        let key = parser.string().ok()?;
        parser.skip_ws();
        parser.expect(b':').ok()?;
        parser.skip_ws();
        let start = parser.pos;
        parser.value(1).ok()?;
        if key == name {
            found = Some(&json[start..parser.pos]);
        }
        parser.skip_ws();
        match parser.next() {
            Some(b',') => continue,
            Some(b'}') => break,
            _ => return None,
        }
    }
    parser.skip_ws();
    (parser.pos == json.len()).then_some(found).flatten()
}

/// Canonical JSON of one JSON document (see the module documentation).
pub fn canonical_json(json: &str) -> Result<String, CanonicalError> {
    let mut parser = Parser::new(json);
    parser.skip_ws();
    let value = parser.value(1)?;
    parser.skip_ws();
    if parser.pos != json.len() {
        return Err(parser.error());
    }
    let mut out = String::with_capacity(json.len());
    write_value(&value, &mut out);
    Ok(out)
}

enum Node<'a> {
    Literal(&'a str),
    Text(String),
    List(Vec<Node<'a>>),
    Object(Vec<(String, Node<'a>)>),
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Parser<'a> {
        Parser { text, pos: 0 }
    }

    fn error(&self) -> CanonicalError {
        CanonicalError { at: self.pos }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Result<(), CanonicalError> {
        if self.next() == Some(byte) {
            Ok(())
        } else {
            Err(self.error())
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node<'a>, CanonicalError> {
        if depth > MAX_DEPTH {
            return Err(self.error());
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.list(depth),
            Some(b'"') => Ok(Node::Text(self.string()?)),
            Some(b't') => self.word("true"),
            Some(b'f') => self.word("false"),
            Some(b'n') => self.word("null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error()),
        }
    }

    fn word(&mut self, word: &'static str) -> Result<Node<'a>, CanonicalError> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(Node::Literal(word))
        } else {
            Err(self.error())
        }
    }

    /// A number as JSON's grammar allows it, returned as its literal text.
    fn number(&mut self) -> Result<Node<'a>, CanonicalError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.next() {
            Some(b'0') => {}
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error()),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.require_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.require_digits()?;
        }
        let text: &'a str = self.text;
        Ok(Node::Literal(&text[start..self.pos]))
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn require_digits(&mut self) -> Result<(), CanonicalError> {
        let start = self.pos;
        self.digits();
        if self.pos == start {
            Err(self.error())
        } else {
            Ok(())
        }
    }

    fn list(&mut self, depth: usize) -> Result<Node<'a>, CanonicalError> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Node::List(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.next() {
                Some(b',') => continue,
                Some(b']') => return Ok(Node::List(items)),
                _ => return Err(self.error()),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Node<'a>, CanonicalError> {
        self.expect(b'{')?;
        let mut members: Vec<(String, Node<'a>)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Node::Object(members));
        }
        loop {
            self.skip_ws();
            let key = self.string()?;
            self.skip_ws();
            self.expect(b':')?;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            members.push((key, value));
            self.skip_ws();
            match self.next() {
                Some(b',') => continue,
                Some(b'}') => break,
                _ => return Err(self.error()),
            }
        }
        // A decoder into a map keeps the last of repeated keys; a stable sort followed by
        // keeping the last of each run does the same.
        members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut unique: Vec<(String, Node<'a>)> = Vec::with_capacity(members.len());
        for member in members {
            match unique.last_mut() {
                Some(last) if last.0 == member.0 => *last = member,
                _ => unique.push(member),
            }
        }
        Ok(Node::Object(unique))
    }

    /// A JSON string, unescaped.
    fn string(&mut self) -> Result<String, CanonicalError> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let text: &'a str = self.text;
            let rest = &text[self.pos..];
            let stop = rest
                .bytes()
                .position(|b| b == b'"' || b == b'\\' || b < 0x20)
                .ok_or_else(|| self.error())?;
            out.push_str(&rest[..stop]);
            self.pos += stop;
            match self.next() {
                Some(b'"') => return Ok(out),
                Some(b'\\') => self.escape(&mut out)?,
                _ => return Err(self.error()),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), CanonicalError> {
        let simple = match self.next() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let first = self.hex4()?;
                let decoded = if (0xD800..0xDC00).contains(&first) {
                    // A high surrogate counts only when a low one follows at once.
                    let rest = &self.text.as_bytes()[self.pos..];
                    if rest.starts_with(b"\\u") {
                        let saved = self.pos;
                        self.pos += 2;
                        let second = self.hex4()?;
                        if (0xDC00..0xE000).contains(&second) {
                            char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
                        } else {
                            self.pos = saved;
                            None
                        }
                    } else {
                        None
                    }
                } else {
                    char::from_u32(first)
                };
                decoded.unwrap_or('\u{FFFD}')
            }
            _ => return Err(self.error()),
        };
        out.push(simple);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, CanonicalError> {
        let digits = self
            .text
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error())?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.error());
        }
        self.pos += 4;
        u32::from_str_radix(digits, 16).map_err(|_| self.error())
    }
}

fn write_value(node: &Node<'_>, out: &mut String) {
    match node {
        Node::Literal(text) => out.push_str(text),
        Node::Text(text) => write_string(text, out),
        Node::List(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Node::Object(members) => {
            out.push('{');
            for (index, (key, value)) in members.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(value, out);
            }
            out.push('}');
        }
    }
}

fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => {
                out.push_str("\\u00");
                out.push(char::from(b"0123456789abcdef"[(c as usize) >> 4]));
                out.push(char::from(b"0123456789abcdef"[(c as usize) & 0xF]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_sorted_whitespace_dropped_numbers_verbatim() {
        let json = r#" { "b" : [1.50, -0, 2e10, {"z":1,"a":null}], "a":"x", "A": true } "#;
        assert_eq!(
            canonical_json(json).unwrap(),
            r#"{"A":true,"a":"x","b":[1.50,-0,2e10,{"a":null,"z":1}]}"#
        );
    }

    #[test]
    fn strings_are_escaped_like_go_without_html_escaping() {
        let json =
            r#"["<&>", "\u2028\u2029", "\u0001\b\f\n\r\t\"\\\/", "\ud83d\ude00", "\ud800x", "é"]"#;
        assert_eq!(
            canonical_json(json).unwrap(),
            "[\"<&>\",\"\\u2028\\u2029\",\"\\u0001\\b\\f\\n\\r\\t\\\"\\\\/\",\"\u{1F600}\",\"\u{FFFD}x\",\"é\"]"
        );
    }

    #[test]
    fn repeated_keys_keep_the_last_value() {
        assert_eq!(
            canonical_json(r#"{"a":1,"b":2,"a":3}"#).unwrap(),
            r#"{"a":3,"b":2}"#
        );
    }

    #[test]
    fn malformed_documents_are_refused() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\"}",
            "01",
            "1.",
            "-",
            "\"\u{1}\"",
            "[1] x",
            "tru",
        ] {
            assert!(canonical_json(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(canonical_json(&deep).is_err());
    }

    #[test]
    fn fingerprint_ignores_layout_and_order() {
        let a = fingerprint("xrpl:1", "exact", r#"{"signedTxBlob":"AB","x":1}"#).unwrap();
        let b = fingerprint("xrpl:1", "exact", "{ \"x\":1,\n\"signedTxBlob\" : \"AB\" }").unwrap();
        assert_eq!(a, b);
        let expected = Sha256::digest(br#"xrpl:1/exact/{"signedTxBlob":"AB","x":1}"#);
        assert_eq!(a, hex::encode(expected));
        assert_ne!(
            a,
            fingerprint("xrpl:0", "exact", r#"{"signedTxBlob":"AB","x":1}"#).unwrap()
        );
    }

    #[test]
    fn member_text_finds_the_raw_member() {
        let json = r#"{"x402Version":2,"payload": {"b":1, "a":[2]} ,"accepted":{}}"#;
        assert_eq!(member_text(json, "payload"), Some(r#"{"b":1, "a":[2]}"#));
        assert_eq!(member_text(json, "missing"), None);
        assert_eq!(member_text("[1]", "payload"), None);
        assert_eq!(member_text(r#"{"payload":1} x"#, "payload"), None);
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,300}") {
            let _ = canonical_json(&text);
            let _ = member_text(&text, "payload");
        }

        #[test]
        fn agrees_with_serde_on_what_is_json(value in json_value()) {
            let spaced = serde_json::to_string_pretty(&value).unwrap();
            let compact = serde_json::to_string(&value).unwrap();
            prop_assert_eq!(canonical_json(&spaced).unwrap(), canonical_json(&compact).unwrap());
            let reparsed: serde_json::Value = serde_json::from_str(&canonical_json(&compact).unwrap()).unwrap();
            prop_assert_eq!(reparsed, value);
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
