//! The access page and its scripts, embedded. They run under a self-only CSP, so they hold no
//! inline script or style; wallets plug in through `/_concert/wallet-adapters.js`.

use crate::room::page::{WAITING_CSS, WAITING_JS};

pub const ACCESS_HTML: &str = include_str!("../../../static/fastlane/access.html");
pub const ACCESS_JS: &str = include_str!("../../../static/fastlane/access.js");
pub const WALLET_ADAPTERS_JS: &str = include_str!("../../../static/fastlane/wallet-adapters.js");

pub const HTML_TYPE: &str = "text/html; charset=utf-8";
pub const JS_TYPE: &str = "text/javascript; charset=utf-8";
pub const CSS_TYPE: &str = "text/css; charset=utf-8";

/// The Content-Security-Policy of every page and script under `/_concert`.
pub const CSP: &str = "default-src 'self'; img-src 'self' data: https:; frame-ancestors 'none'";

/// The embedded file for `path` relative to `/_concert` (`""`, `/`, `/access`, …), as
/// `(content type, body)`.
pub fn static_file(relative: &str) -> Option<(&'static str, &'static str)> {
    match relative {
        "" | "/" | "/access" | "/access/" => Some((HTML_TYPE, ACCESS_HTML)),
        "/access.js" => Some((JS_TYPE, ACCESS_JS)),
        "/wallet-adapters.js" => Some((JS_TYPE, WALLET_ADAPTERS_JS)),
        "/waiting.js" => Some((JS_TYPE, WAITING_JS)),
        "/waiting.css" => Some((CSS_TYPE, WAITING_CSS)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_page_has_no_inline_code_and_loads_its_scripts() {
        let lower = ACCESS_HTML.to_ascii_lowercase();
        assert!(!lower.contains("style="));
        assert!(!lower.contains("<style"));
        assert!(!has_event_handler(&lower), "inline event handler");
        for script in lower.split("<script").skip(1) {
            let end = script.find('>').unwrap();
            assert!(script[..end].contains("src="), "inline <script>");
            assert!(script[end + 1..].starts_with("</script>"));
        }
        assert!(ACCESS_HTML.contains("/_concert/wallet-adapters.js"));
        assert!(ACCESS_HTML.contains("/_concert/access.js"));
        assert!(ACCESS_JS.contains("concert.pending-payment"));
    }

    /// An attribute like ` onclick=`: " on", letters, then `=`.
    fn has_event_handler(html: &str) -> bool {
        html.match_indices(" on").any(|(at, _)| {
            let rest = &html[at + 3..];
            let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            letters > 0 && rest[letters..].trim_start().starts_with('=')
        })
    }
}
