//! Host lists (`tls_domains`): bare DNS names for certificate issuance, normalised to lower case
//! without a trailing dot.

use std::fmt;
use std::net::IpAddr;

/// Longest DNS name (RFC 1035) and label.
const MAX_NAME_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

/// A parsed host list; `as_str` is the canonical comma-joined form.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HostList {
    canonical: String,
    hosts: Vec<String>,
}

impl HostList {
    /// Strict form (settings file, API): a duplicate after normalisation is an error.
    pub fn parse_strict(raw: &str) -> Result<Self, String> {
        Self::parse(raw, true)
    }

    /// Command-line form: duplicates are merged; every other rule still applies.
    pub fn parse_lenient(raw: &str) -> Result<Self, String> {
        Self::parse(raw, false)
    }

    fn parse(raw: &str, reject_duplicates: bool) -> Result<Self, String> {
        let mut hosts: Vec<String> = Vec::new();
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let host = normalise_host(entry)?;
            if hosts.contains(&host) {
                if reject_duplicates {
                    return Err(format!("duplicate host {entry:?}"));
                }
                continue;
            }
            hosts.push(host);
        }
        Ok(HostList {
            canonical: hosts.join(","),
            hosts,
        })
    }

    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    pub fn as_str(&self) -> &str {
        &self.canonical
    }
}

fn normalise_host(entry: &str) -> Result<String, String> {
    if entry.contains("://") {
        return Err(format!(
            "{entry:?}: give the bare host name, without a scheme"
        ));
    }
    if let Some(bad) = entry
        .chars()
        .find(|c| matches!(c, ':' | '*' | '@' | '/') || c.is_whitespace())
    {
        return Err(format!("{entry:?}: a host name may not contain {bad:?}"));
    }
    let host = entry
        .strip_suffix('.')
        .unwrap_or(entry)
        .to_ascii_lowercase();
    if host.parse::<IpAddr>().is_ok() {
        return Err(format!("{entry:?}: an IP address cannot get a certificate"));
    }
    if !host.contains('.') {
        return Err(format!("{entry:?}: a public host name contains a dot"));
    }
    if host.len() > MAX_NAME_LEN {
        return Err(format!("{entry:?}: host name is too long"));
    }
    for label in host.split('.') {
        let valid_chars = label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if label.is_empty() || label.len() > MAX_LABEL_LEN || !valid_chars {
            return Err(format!("{entry:?} is not a valid host name"));
        }
    }
    Ok(host)
}

impl fmt::Debug for HostList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HostList").field(&self.canonical).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_the_check_list_examples() {
        for ok in [
            "",
            "example.com",
            " example.com , www.example.com ",
            "Example.com.",
            "a.example.com,,b.example.com,",
        ] {
            assert!(
                HostList::parse_strict(ok).is_ok(),
                "{ok:?} should be accepted"
            );
        }
    }

    #[test]
    fn rejects_the_check_list_examples() {
        for bad in [
            "https://example.com",
            "localhost",
            "203.0.113.9",
            "*.example.com",
            "example.com:443",
            "example.com,EXAMPLE.com",
            "user@example.com",
            "a..example.com",
            "exa mple.com",
        ] {
            assert!(
                HostList::parse_strict(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn normalises_case_and_trailing_dot() {
        let list = HostList::parse_strict("Example.COM., www.example.com").unwrap();
        assert_eq!(list.hosts(), ["example.com", "www.example.com"]);
        assert_eq!(list.as_str(), "example.com,www.example.com");
    }

    #[test]
    fn lenient_form_merges_duplicates() {
        let list = HostList::parse_lenient("example.com,EXAMPLE.com.").unwrap();
        assert_eq!(list.hosts(), ["example.com"]);
        assert!(HostList::parse_lenient("localhost").is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(text in "\\PC*") {
            let _ = HostList::parse_strict(&text);
            let _ = HostList::parse_lenient(&text);
        }
    }
}
