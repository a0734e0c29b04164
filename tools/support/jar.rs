//! The cookies a load helper keeps between requests, as a browser does.

use std::collections::BTreeMap;

use hyper::header::{HeaderMap, SET_COOKIE};

/// Name to value, so a cookie set again replaces the earlier one.
#[derive(Default)]
pub struct Jar(BTreeMap<String, String>);

impl Jar {
    /// Keeps every cookie an answer sets (attributes are not needed here).
    pub fn keep(&mut self, headers: &HeaderMap) {
        for value in headers.get_all(SET_COOKIE) {
            let Ok(text) = value.to_str() else { continue };
            let pair = text.split(';').next().unwrap_or_default();
            if let Some((name, value)) = pair.split_once('=') {
                self.0
                    .insert(name.trim().to_string(), value.trim().to_string());
            }
        }
    }

    /// The `Cookie` line to send, `None` while the jar is empty.
    pub fn line(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| {
            let pairs: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
            pairs.join("; ")
        })
    }
}
