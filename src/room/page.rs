//! The waiting page: the built-in template (or an operator's `-html` file) and the
//! script/stylesheet Concert serves for it under `/_concert/`.
//!
//! Templates keep the contract operators' pages are written to: the literal placeholders
//! `{{.Position}}` and `{{.SkipURL}}` are replaced textually, wherever and however often they
//! appear. The template is split once at load time so each render is a single exact-size
//! allocation. An operator's page gets the position as a plain number, as those pages expect;
//! only the built-in page pads it to three digits, for its own display.

use crate::paths::reserved::{WAITING_SCRIPT, WAITING_STYLESHEET};
use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

/// Placeholder replaced by the visitor's position (zero-padded to three digits on the built-in
/// page only).
const POSITION_PLACEHOLDER: &str = "{{.Position}}";
/// Placeholder replaced by the HTML-escaped skip-the-line URL.
const SKIP_URL_PLACEHOLDER: &str = "{{.SkipURL}}";

const BUILTIN_TEMPLATE: &str = include_str!("../../templates/waiting.html");
/// Built-in page only: the seconds between its reloads without JavaScript, filled in once when
/// the page is built (operators' templates never see it).
const RELOAD_PLACEHOLDER: &str = "{{.ReloadSeconds}}";
/// The no-script reload interval is half the deadline, but never longer than this.
const MAX_RELOAD: Duration = Duration::from_secs(60);

/// Script of the built-in page, served at `/_concert/waiting.js`.
pub(crate) const WAITING_JS: &str = include_str!("../../static/waiting.js");
/// Stylesheet of the built-in page, served at `/_concert/waiting.css`.
pub(crate) const WAITING_CSS: &str = include_str!("../../static/waiting.css");

const JS_CONTENT_TYPE: &str = "text/javascript; charset=utf-8";
const CSS_CONTENT_TYPE: &str = "text/css; charset=utf-8";

/// The embedded asset for a `/_concert/…` request path, as `(content type, body)`.
/// Only the waiting page's own files are known here; anything else is `None`.
pub fn concert_asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        WAITING_SCRIPT => Some((JS_CONTENT_TYPE, WAITING_JS)),
        WAITING_STYLESHEET => Some((CSS_CONTENT_TYPE, WAITING_CSS)),
        _ => None,
    }
}

/// What fills a gap between two literal stretches of the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Position,
    SkipUrl,
}

/// One literal stretch of the template (a byte range) followed by an optional slot.
#[derive(Debug, Clone)]
struct Piece {
    start: usize,
    end: usize,
    slot: Option<Slot>,
}

/// How the position is written into the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PositionStyle {
    /// At least three digits (`007`): the built-in page's display.
    Padded,
    /// Plain decimal (`7`): what an operator's template receives.
    Plain,
}

/// A parsed waiting-page template, ready to render many times.
#[derive(Debug, Clone)]
pub struct WaitingPage {
    source: Cow<'static, str>,
    style: PositionStyle,
    pieces: Vec<Piece>,
    literal_len: usize,
    position_slots: usize,
    skip_url_slots: usize,
}

impl WaitingPage {
    /// The page compiled into the binary, for the room's default grace and token lifetime.
    pub fn builtin() -> WaitingPage {
        let defaults = super::RoomSettings::default();
        WaitingPage::builtin_for(
            defaults.first_poll_grace,
            defaults.ready_grace,
            defaults.token_ttl,
        )
    }

    /// The page compiled into the binary for these room settings: without JavaScript it
    /// reloads itself every [`no_script_reload`] seconds, and says so.
    pub fn builtin_for(
        first_poll_grace: Duration,
        ready_grace: Duration,
        token_ttl: Duration,
    ) -> WaitingPage {
        let every = no_script_reload(first_poll_grace, ready_grace, token_ttl).as_secs();
        let source = BUILTIN_TEMPLATE.replace(RELOAD_PLACEHOLDER, &every.to_string());
        WaitingPage::parse(Cow::Owned(source), PositionStyle::Padded)
    }

    /// An operator's custom page (`-html`). The file must be UTF-8.
    pub fn from_file(path: &Path) -> Result<WaitingPage, std::io::Error> {
        let source = std::fs::read_to_string(path)?;
        Ok(WaitingPage::from_template(source))
    }

    /// An operator's page from template text already in memory.
    pub fn from_template(source: String) -> WaitingPage {
        WaitingPage::parse(Cow::Owned(source), PositionStyle::Plain)
    }

    fn parse(source: Cow<'static, str>, style: PositionStyle) -> WaitingPage {
        let text: &str = &source;
        let mut pieces = Vec::new();
        let mut literal_len = 0;
        let mut position_slots = 0;
        let mut skip_url_slots = 0;
        let mut cursor = 0;
        // Both placeholders start with "{{." so one search finds the next candidate of either.
        while let Some(offset) = text[cursor..].find("{{.") {
            let at = cursor + offset;
            let rest = &text[at..];
            let (slot, width) = if rest.starts_with(POSITION_PLACEHOLDER) {
                (Slot::Position, POSITION_PLACEHOLDER.len())
            } else if rest.starts_with(SKIP_URL_PLACEHOLDER) {
                (Slot::SkipUrl, SKIP_URL_PLACEHOLDER.len())
            } else {
                // Not ours (e.g. another template language's syntax): keep it as literal text.
                let next = at + "{{.".len();
                pieces.push(Piece {
                    start: cursor,
                    end: next,
                    slot: None,
                });
                literal_len += next - cursor;
                cursor = next;
                continue;
            };
            pieces.push(Piece {
                start: cursor,
                end: at,
                slot: Some(slot),
            });
            literal_len += at - cursor;
            match slot {
                Slot::Position => position_slots += 1,
                Slot::SkipUrl => skip_url_slots += 1,
            }
            cursor = at + width;
        }
        if cursor < text.len() {
            pieces.push(Piece {
                start: cursor,
                end: text.len(),
                slot: None,
            });
            literal_len += text.len() - cursor;
        }
        WaitingPage {
            source,
            style,
            pieces,
            literal_len,
            position_slots,
            skip_url_slots,
        }
    }

    /// The page for a visitor at `position` (on the built-in page zero-padded to three digits,
    /// longer numbers in full) with `skip_url` HTML-escaped so it is safe in text and quoted
    /// attributes.
    pub fn render(&self, position: u64, skip_url: &str) -> String {
        let mut digits_buf = [0u8; 20];
        let min_digits = match self.style {
            PositionStyle::Padded => 3,
            PositionStyle::Plain => 1,
        };
        let digits = position_digits(position, min_digits, &mut digits_buf);
        let escaped_len = escaped_html_len(skip_url);
        let total = self.literal_len
            + self.position_slots * digits.len()
            + self.skip_url_slots * escaped_len;

        let mut out = String::with_capacity(total);
        let text: &str = &self.source;
        for piece in &self.pieces {
            out.push_str(&text[piece.start..piece.end]);
            match piece.slot {
                Some(Slot::Position) => out.push_str(digits),
                Some(Slot::SkipUrl) => push_escaped_html(&mut out, skip_url),
                None => {}
            }
        }
        debug_assert_eq!(out.len(), total, "render size precomputation is off");
        out
    }
}

/// How often a visitor without JavaScript must reload the built-in page to keep their place.
///
/// A reload with the ticket cookie counts as being seen, for the first-poll grace, the ready
/// grace and the token lifetime alike, but only if it lands in time: the first one before the
/// first-poll grace runs out, later ones within the lifetime, and once the visitor's turn has
/// come, within the ready grace (a visitor who keeps missing it would lapse and rejoin at the
/// front without ever getting in). Half the tightest deadline that is on leaves room for a slow
/// page load; whole seconds, at least 1, at most a minute.
pub(crate) fn no_script_reload(
    first_poll_grace: Duration,
    ready_grace: Duration,
    token_ttl: Duration,
) -> Duration {
    let deadline = [first_poll_grace, ready_grace]
        .into_iter()
        .filter(|grace| !grace.is_zero())
        .fold(token_ttl, Duration::min);
    let half = Duration::from_secs(deadline.as_secs() / 2);
    half.clamp(Duration::from_secs(1), MAX_RELOAD)
}

/// Writes `position` as decimal, zero-padded to `min_digits` (at most 20), into `buf` without
/// allocating.
fn position_digits(position: u64, min_digits: usize, buf: &mut [u8; 20]) -> &str {
    let mut value = position;
    let mut start = buf.len();
    loop {
        start -= 1;
        // `value % 10` is below 10, so the cast cannot truncate.
        buf[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    while buf.len() - start < min_digits.min(buf.len()) {
        start -= 1;
        buf[start] = b'0';
    }
    // Only ASCII digits were written, so this never fails; fall back to "…" rather than panic.
    std::str::from_utf8(&buf[start..]).unwrap_or("…")
}

fn html_entity(byte: u8) -> Option<&'static str> {
    match byte {
        b'&' => Some("&amp;"),
        b'<' => Some("&lt;"),
        b'>' => Some("&gt;"),
        b'"' => Some("&quot;"),
        b'\'' => Some("&#39;"),
        _ => None,
    }
}

fn escaped_html_len(text: &str) -> usize {
    text.bytes()
        .map(|byte| html_entity(byte).map_or(1, str::len))
        .sum()
}

fn push_escaped_html(out: &mut String, text: &str) {
    let mut clean_from = 0;
    for (index, byte) in text.bytes().enumerate() {
        if let Some(entity) = html_entity(byte) {
            // The escaped bytes are ASCII, so `index` is always a char boundary.
            out.push_str(&text[clean_from..index]);
            out.push_str(entity);
            clean_from = index + 1;
        }
    }
    out.push_str(&text[clean_from..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn padded(source: &str) -> WaitingPage {
        WaitingPage::parse(Cow::Owned(source.to_owned()), PositionStyle::Padded)
    }

    #[test]
    fn builtin_style_pads_the_position_to_three_digits() {
        let page = padded("[{{.Position}}]");
        assert_eq!(page.render(0, ""), "[000]");
        assert_eq!(page.render(7, ""), "[007]");
        assert_eq!(page.render(42, ""), "[042]");
        assert_eq!(page.render(999, ""), "[999]");
    }

    #[test]
    fn position_over_999_is_shown_in_full() {
        let page = padded("{{.Position}}");
        assert_eq!(page.render(1000, ""), "1000");
        assert_eq!(page.render(123_456, ""), "123456");
        assert_eq!(page.render(u64::MAX, ""), u64::MAX.to_string());
    }

    #[test]
    fn custom_pages_get_the_plain_decimal_position() {
        let page = WaitingPage::from_template("[{{.Position}}]".to_owned());
        assert_eq!(page.render(0, ""), "[0]");
        assert_eq!(page.render(1, ""), "[1]");
        assert_eq!(page.render(42, ""), "[42]");
        assert_eq!(page.render(1000, ""), "[1000]");
        assert_eq!(page.render(u64::MAX, ""), format!("[{}]", u64::MAX));
        let rendered = page.render(5, "");
        assert_eq!(rendered.capacity(), rendered.len());
    }

    #[test]
    fn every_placeholder_occurrence_is_replaced() {
        let page = WaitingPage::from_template(
            "a{{.Position}}b{{.SkipURL}}c{{.Position}}{{.SkipURL}}".to_owned(),
        );
        assert_eq!(page.render(12, "/skip"), "a12b/skipc12/skip");
    }

    #[test]
    fn skip_url_is_html_escaped() {
        let page = WaitingPage::from_template(r#"<a href="{{.SkipURL}}">skip</a>"#.to_owned());
        let rendered = page.render(1, r#"/pay?a=1&b="x"<script>'y'"#);
        assert_eq!(
            rendered,
            r#"<a href="/pay?a=1&amp;b=&quot;x&quot;&lt;script&gt;&#39;y&#39;">skip</a>"#
        );
    }

    #[test]
    fn non_ascii_skip_url_survives_escaping() {
        let page = WaitingPage::from_template("{{.SkipURL}}".to_owned());
        assert_eq!(page.render(1, "/café&ü"), "/café&amp;ü");
    }

    #[test]
    fn unknown_and_partial_placeholders_are_left_alone() {
        let source = "{{.Other}} {{.Position {{ .Position}} {{.Posi{{.Position}}";
        let page = WaitingPage::from_template(source.to_owned());
        assert_eq!(
            page.render(5, "/s"),
            "{{.Other}} {{.Position {{ .Position}} {{.Posi5"
        );
    }

    #[test]
    fn template_without_placeholders_renders_unchanged() {
        let page = WaitingPage::from_template("<p>plain</p>".to_owned());
        assert_eq!(page.render(3, "/skip"), "<p>plain</p>");
        let empty = WaitingPage::from_template(String::new());
        assert_eq!(empty.render(3, "/skip"), "");
    }

    #[test]
    fn no_script_reload_beats_both_graces_and_the_lifetime() {
        let secs = Duration::from_secs;
        let off = Duration::ZERO;
        assert_eq!(no_script_reload(secs(30), off, secs(300)), secs(15));
        assert_eq!(no_script_reload(secs(2), off, secs(300)), secs(1));
        assert_eq!(no_script_reload(secs(45), off, secs(20)), secs(10));
        assert_eq!(no_script_reload(off, off, secs(300)), MAX_RELOAD);
        assert_eq!(no_script_reload(off, off, secs(30)), secs(15));
        assert_eq!(no_script_reload(secs(3), off, secs(1)), secs(1));
        assert_eq!(no_script_reload(secs(60), secs(20), secs(300)), secs(10));
        assert_eq!(no_script_reload(off, secs(30), secs(300)), secs(15));
        assert_eq!(no_script_reload(secs(10), secs(30), secs(300)), secs(5));
    }

    #[test]
    fn builtin_page_without_script_reloads_itself_before_the_grace_ends() {
        let page = WaitingPage::builtin_for(
            Duration::from_secs(8),
            Duration::ZERO,
            Duration::from_secs(300),
        );
        let rendered = page.render(3, "");
        let noscript_meta = r#"<noscript><meta http-equiv="refresh" content="4"></noscript>"#;
        assert!(
            rendered.contains(noscript_meta),
            "no self-reload for no-script visitors"
        );
        assert!(
            rendered.contains("every 4 seconds"),
            "the advice names the interval"
        );
        assert!(
            !rendered.contains("every minute"),
            "advice the grace would break"
        );
        assert!(!rendered.contains(RELOAD_PLACEHOLDER));
        // The default page matches the default settings (30 s grace).
        let default = WaitingPage::builtin().render(3, "");
        assert!(default.contains(r#"content="15""#) && default.contains("every 15 seconds"));
    }

    #[test]
    fn custom_pages_keep_the_reload_placeholder_as_text() {
        let page = WaitingPage::from_template("{{.ReloadSeconds}}".to_owned());
        assert_eq!(page.render(1, ""), "{{.ReloadSeconds}}");
    }

    #[test]
    fn rendered_length_matches_allocation() {
        let page = WaitingPage::builtin();
        let rendered = page.render(12_345, "/skip?x=<&>");
        assert_eq!(rendered.capacity(), rendered.len());
    }

    #[test]
    fn builtin_page_uses_both_placeholders_and_concert_assets() {
        assert!(BUILTIN_TEMPLATE.contains(POSITION_PLACEHOLDER));
        assert!(BUILTIN_TEMPLATE.contains(SKIP_URL_PLACEHOLDER));
        let rendered = WaitingPage::builtin().render(7, "/skip&go");
        assert!(
            rendered.contains(r#"id="position">007<"#),
            "position not padded"
        );
        assert!(rendered.contains("/skip&amp;go"));
        assert!(!rendered.contains("{{."), "a placeholder was left behind");
        assert!(rendered.contains(r#"src="/_concert/waiting.js""#));
        assert!(rendered.contains(r#"href="/_concert/waiting.css""#));
    }

    #[test]
    fn builtin_page_has_no_inline_script_or_style() {
        // The page runs under a self-only CSP, so inline code would be blocked.
        let lower = BUILTIN_TEMPLATE.to_ascii_lowercase();
        assert!(!lower.contains("style="));
        assert!(!lower.contains("<style"));
        assert!(!has_event_handler_attribute(&lower), "inline event handler");
        for script in lower.split("<script").skip(1) {
            let tag_end = script.find('>').unwrap();
            assert!(script[..tag_end].contains("src="), "inline <script>");
            assert!(script[tag_end + 1..].starts_with("</script>"));
        }
    }

    /// True when the markup has something like ` onload=` (an inline handler).
    fn has_event_handler_attribute(markup: &str) -> bool {
        markup.match_indices(" on").any(|(at, _)| {
            let name_len = markup[at + 3..]
                .bytes()
                .take_while(u8::is_ascii_lowercase)
                .count();
            name_len > 0 && markup[at + 3 + name_len..].starts_with('=')
        })
    }

    #[test]
    fn event_handler_detector_finds_handlers_only() {
        assert!(has_event_handler_attribute("<body onload=x()>"));
        assert!(!has_event_handler_attribute(
            "<p>carry on = fine, stay online</p>"
        ));
    }

    #[test]
    fn custom_page_is_read_from_file() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        write!(
            file,
            "<p>#{{{{.Position}}}} <a href='{{{{.SkipURL}}}}'>go</a></p>"
        )
        .unwrap();
        let page = WaitingPage::from_file(file.path()).unwrap();
        assert_eq!(
            page.render(9, "/s'k"),
            "<p>#9 <a href='/s&#39;k'>go</a></p>"
        );
    }

    #[test]
    fn missing_custom_page_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = WaitingPage::from_file(&dir.path().join("absent.html")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn non_utf8_custom_page_is_rejected() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(b"<p>\xff\xfe {{.Position}}</p>").unwrap();
        let err = WaitingPage::from_file(file.path()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn concert_assets_are_served_by_exact_path() {
        let (js_type, js) = concert_asset("/_concert/waiting.js").unwrap();
        assert!(js_type.starts_with("text/javascript"));
        assert_eq!(js, WAITING_JS);
        let (css_type, css) = concert_asset("/_concert/waiting.css").unwrap();
        assert!(css_type.starts_with("text/css"));
        assert_eq!(css, WAITING_CSS);
        assert!(concert_asset("/_concert/waiting.js/").is_none());
        assert!(concert_asset("/_concert/access.js").is_none());
        assert!(concert_asset("/waiting.js").is_none());
    }
}
