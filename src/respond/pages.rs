//! The bodies of Concert's own refusals: small pages for browsers that retry or explain by
//! themselves (no script needed), and the JSON the same refusals carry for API clients.

use std::time::Duration;

use crate::abuse::BanLength;
use crate::config::format_go_duration;
use crate::paths::reserved::WAITING_STYLESHEET;

/// The page a browser gets when even the line is full. It retries by itself (meta refresh, no
/// script needed) instead of leaving the visitor on a bare error.
pub(super) fn queue_full_page(retry_after: u32) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta http-equiv=\"refresh\" content=\"{retry_after}\">\
<title>The line is full</title><link rel=\"stylesheet\" href=\"{WAITING_STYLESHEET}\"></head>\
<body><main class=\"card\"><h1>The line is full right now</h1>\
<p>So many people are waiting that we cannot add you to the line yet. \
This page tries again by itself in {retry_after} seconds.</p></main></body></html>"
    )
}

pub(super) fn queue_full_json(retry_after: u32) -> String {
    format!(
        "{{\"error\":\"waiting room is full\",\"queued\":false,\"retry_after_seconds\":{retry_after}}}"
    )
}

/// The page a browser gets when its address already has as many visitors waiting as one address
/// may: people behind one shared address (an office, a campus, a mobile carrier) wait their turn
/// for a place. It retries by itself.
pub(super) fn address_line_full_page(retry_after: u32) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta http-equiv=\"refresh\" content=\"{retry_after}\">\
<title>Too many visitors from your network</title>\
<link rel=\"stylesheet\" href=\"{WAITING_STYLESHEET}\"></head>\
<body><main class=\"card\"><h1>Many people on your network are already waiting</h1>\
<p>Your network already has as many visitors in line as one network may. \
As they are let in, there is room for you: this page tries again by itself in \
{retry_after} seconds.</p></main></body></html>"
    )
}

pub(super) fn address_line_full_json(retry_after: u32) -> String {
    format!(
        "{{\"error\":\"too many visitors waiting from this address\",\"queued\":false,\"retry_after_seconds\":{retry_after}}}"
    )
}

/// For a visitor an operator removed from the line: what happened, and the way back in.
pub(super) fn removed_page() -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>Removed from the line</title>\
<link rel=\"stylesheet\" href=\"{WAITING_STYLESHEET}\"></head>\
<body><main class=\"card\"><h1>You were removed from the line</h1>\
<p>The site's operator took your place in the waiting line away. You can join the line \
again at the back.</p><p><a href=\"/\">Rejoin the line</a></p></main></body></html>"
    )
}

pub(super) const REMOVED_JSON: &str = r#"{"error":"removed from the queue","removed":true}"#;

/// The page for a form the priority lane could not take: it was not delivered, so the visitor
/// must know to send it again.
pub(super) fn busy_page(retry_after: u32) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>Your form was not sent</title><link rel=\"stylesheet\" href=\"{WAITING_STYLESHEET}\"></head>\
<body><main class=\"card\"><h1>Your form was not sent</h1>\
<p>The site is very busy right now, so your submission was not delivered and nothing was \
processed. Go back and send it again in about {retry_after} seconds.</p></main></body></html>"
    )
}

pub(super) fn busy_json(retry_after: u32) -> String {
    format!("{{\"error\":\"busy\",\"submitted\":false,\"retry_after_seconds\":{retry_after}}}")
}

pub(super) fn fast_lane_busy_page(retry_after: u32) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>Your form was not sent</title><link rel=\"stylesheet\" href=\"{WAITING_STYLESHEET}\"></head>\
<body><main class=\"card\"><h1>Your form was not sent</h1>\
<p>Even the fast lane is full right now, so your submission was not delivered and nothing was \
processed. Your fast-lane pass is still valid and you were not charged again. Go back and send \
it again in about {retry_after} seconds.</p></main></body></html>"
    )
}

pub(super) fn fast_lane_busy_json(retry_after: u32) -> String {
    format!(
        "{{\"error\":\"fast_lane_busy\",\"submitted\":false,\"charged_again\":false,\"retry_after_seconds\":{retry_after}}}"
    )
}

/// What a banned client is told: the blocked page for a browser (`html`), JSON otherwise.
pub(super) fn banned_body(length: BanLength, html: bool) -> String {
    match (length.retry_after_secs(), html) {
        (None, true) => blocked_page("Requests from your network are blocked."),
        (None, false) => r#"{"error":"blocked","permanent":true}"#.to_string(),
        (Some(secs), true) => blocked_page(&format!(
            "Requests from your network are temporarily blocked. Try again in {}.",
            format_go_duration(Duration::from_secs(secs))
        )),
        (Some(secs), false) => {
            format!(r#"{{"error":"temporarily blocked","retry_after_seconds":{secs}}}"#)
        }
    }
}

/// The "Access blocked" page: small, self-contained, no script or external files (a banned
/// client could not fetch them anyway).
fn blocked_page(message: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
<title>Access blocked</title>\n<style>\
body{{font-family:system-ui,-apple-system,\"Segoe UI\",Roboto,sans-serif;max-width:32rem;\
margin:15vh auto 0;padding:0 1rem;text-align:center;color:#222;line-height:1.5}}\
h1{{font-size:1.5rem}}</style>\n</head>\n<body>\n<h1>Access blocked</h1>\n<p>{message}</p>\n\
</body>\n</html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_ban_names_its_length_like_go() {
        let length = BanLength::Timed(Duration::from_millis(299_500));
        assert_eq!(
            banned_body(length, false),
            r#"{"error":"temporarily blocked","retry_after_seconds":300}"#
        );
        let page = banned_body(length, true);
        assert!(page.contains("<title>Access blocked</title>"));
        assert!(page.contains("<h1>Access blocked</h1>"));
        assert!(
            page.contains("Requests from your network are temporarily blocked. Try again in 5m0s.")
        );
        assert!(page.contains("lang=\"en\""));
        assert!(page.contains("name=\"viewport\""));
        let short = banned_body(BanLength::Timed(Duration::from_secs(45)), true);
        assert!(short.contains("Try again in 45s."));
        let long = banned_body(BanLength::Timed(Duration::from_secs(86_400)), true);
        assert!(long.contains("Try again in 24h0m0s."));
    }

    #[test]
    fn a_permanent_ban_says_so() {
        assert_eq!(
            banned_body(BanLength::Permanent, false),
            r#"{"error":"blocked","permanent":true}"#
        );
        assert!(
            banned_body(BanLength::Permanent, true)
                .contains("<p>Requests from your network are blocked.</p>")
        );
    }
}
