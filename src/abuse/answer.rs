//! What a banned client is told: 429 with `Retry-After` for a timed ban, 403 for a permanent
//! one, as the blocked page for browsers or JSON for everyone else.

use std::time::Duration;

use http::StatusCode;

use super::BanLength;
use crate::config::format_go_duration;

/// The body `/queue/status` gets from a banned client, so the waiting page reloads into the
/// block notice.
pub const QUEUE_STATUS_READY: &str = r#"{"ready":true}"#;

/// The answer to a banned request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BanAnswer {
    pub length: BanLength,
}

impl BanAnswer {
    pub fn new(length: BanLength) -> Self {
        BanAnswer { length }
    }

    pub fn status(&self) -> StatusCode {
        match self.length {
            BanLength::Permanent => StatusCode::FORBIDDEN,
            BanLength::Timed(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// `Retry-After` seconds; none for a permanent ban.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.length.retry_after_secs()
    }

    /// The body for a browser (`html`) or an API client.
    pub fn body(&self, html: bool) -> String {
        match (self.retry_after_secs(), html) {
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
    fn timed_ban_is_429_with_retry_after_and_go_duration_text() {
        let answer = BanAnswer::new(BanLength::Timed(Duration::from_millis(299_500)));
        assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(answer.retry_after_secs(), Some(300));
        assert_eq!(
            answer.body(false),
            r#"{"error":"temporarily blocked","retry_after_seconds":300}"#
        );
        let page = answer.body(true);
        assert!(page.contains("<title>Access blocked</title>"));
        assert!(page.contains("<h1>Access blocked</h1>"));
        assert!(
            page.contains("Requests from your network are temporarily blocked. Try again in 5m0s.")
        );
        assert!(page.contains("lang=\"en\""));
        assert!(page.contains("name=\"viewport\""));
    }

    #[test]
    fn short_and_long_bans_name_their_length_like_go() {
        let page = BanAnswer::new(BanLength::Timed(Duration::from_secs(45))).body(true);
        assert!(page.contains("Try again in 45s."));
        let page = BanAnswer::new(BanLength::Timed(Duration::from_secs(86_400))).body(true);
        assert!(page.contains("Try again in 24h0m0s."));
    }

    #[test]
    fn permanent_ban_is_403_without_retry_after() {
        let answer = BanAnswer::new(BanLength::Permanent);
        assert_eq!(answer.status(), StatusCode::FORBIDDEN);
        assert_eq!(answer.retry_after_secs(), None);
        assert_eq!(
            answer.body(false),
            r#"{"error":"blocked","permanent":true}"#
        );
        assert!(
            answer
                .body(true)
                .contains("<p>Requests from your network are blocked.</p>")
        );
    }
}
