//! The certificates a TLS handshake may get, and the choice among them.
//!
//! A static pair (`-tls-cert`/`-tls-key`) serves every name and clients without SNI. Names
//! whose certificates come at run time (`-tls-domains`) are expected first and served once
//! [`CertStore::install`] has a certificate for them; until then the store is *pending* and a
//! handshake for such a name fails (the client sees an alert, never a wrong certificate).
//! Every part is swapped whole ([`arc_swap`]): a handshake reads the store without a lock, and a
//! new certificate applies to the next handshake while open connections keep theirs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::{ArcSwap, ArcSwapOption};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::pair::{FileStamp, PairError, StaticPair, load_pair};
use super::{ACME_TLS_ALPN, AnswerSource};

/// Every certificate a listener may serve.
#[derive(Default)]
pub struct CertStore {
    static_pair: ArcSwapOption<StaticPair>,
    /// Certificates obtained at run time, by lower-case name (`*.example.com` for a wildcard).
    issued: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
    /// Names HTTPS is asked for whose certificates come at run time, in the order given.
    expected: ArcSwap<Vec<String>>,
    /// Files that failed to load, so the same failure is reported once, not every poll.
    refused: parking_lot::Mutex<Option<FileStamp>>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("static_pair", &self.static_pair.load().as_deref())
            .field("issued", &self.issued.load().keys().collect::<Vec<_>>())
            .field("expected", &self.expected.load())
            .finish()
    }
}

/// What a reload of the static pair's files did.
#[derive(Debug)]
pub enum Reloaded {
    /// No static pair, or its files have not changed (or failed already as they are).
    Unchanged,
    /// The new files are served from the next handshake on.
    Replaced(Arc<StaticPair>),
    /// The new files cannot be served; the pair loaded before stays.
    Refused(PairError),
}

impl CertStore {
    /// Serves `certified` for `name` from the next handshake on, replacing any certificate it
    /// had (a renewal). A certificate covering several names is installed once per name.
    pub fn install(&self, name: &str, certified: Arc<CertifiedKey>) {
        let name = normalise(name);
        self.issued.rcu(|issued| {
            let mut issued = HashMap::clone(issued);
            issued.insert(name.clone(), Arc::clone(&certified));
            issued
        });
    }

    /// Says that HTTPS is asked for `names`, whose certificates come through
    /// [`CertStore::install`]: the store is pending until each has one. Certificates of names
    /// no longer asked for are dropped.
    pub fn expect(&self, names: &[String]) {
        let names: Vec<String> = names.iter().map(|name| normalise(name)).collect();
        self.issued.rcu(|issued| {
            issued
                .iter()
                .filter(|(name, _)| names.contains(name))
                .map(|(name, certified)| (name.clone(), Arc::clone(certified)))
                .collect::<HashMap<_, _>>()
        });
        self.expected.store(Arc::new(names));
    }

    /// The names asked for that have no certificate yet.
    pub fn pending_names(&self) -> Vec<String> {
        let issued = self.issued.load();
        self.expected
            .load()
            .iter()
            .filter(|name| !issued.contains_key(*name))
            .cloned()
            .collect()
    }

    /// Whether some name asked for has no certificate yet.
    pub fn is_pending(&self) -> bool {
        if self.static_pair.load().is_some() {
            return false;
        }
        let issued = self.issued.load();
        self.expected
            .load()
            .iter()
            .any(|name| !issued.contains_key(name))
    }

    /// The certificate installed for `name`, if any (an ACME engine checks what it holds).
    pub fn installed(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.issued.load().get(&normalise(name)).cloned()
    }

    /// The static pair served now.
    pub fn static_pair(&self) -> Option<Arc<StaticPair>> {
        self.static_pair.load_full()
    }

    pub(crate) fn set_static(&self, pair: Option<Arc<StaticPair>>) {
        *self.refused.lock() = None;
        self.static_pair.store(pair);
    }

    /// The certificate for a handshake naming `server_name` (none: a client without SNI).
    pub(crate) fn choose(&self, server_name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let Some(pair) = self.static_pair.load().as_ref() {
            return Some(Arc::clone(&pair.certified));
        }
        let issued = self.issued.load();
        let Some(name) = server_name else {
            // The first name given that has its certificate.
            return self
                .expected
                .load()
                .iter()
                .find_map(|name| issued.get(name).cloned());
        };
        let lower;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = name.to_ascii_lowercase();
            lower.as_str()
        } else {
            name
        };
        if let Some(certified) = issued.get(name) {
            return Some(Arc::clone(certified));
        }
        let (_, parent) = name.split_once('.')?;
        issued.get(&format!("*.{parent}")).cloned()
    }

    /// Reads the static pair's files again when they changed (or always, when `forced`), and
    /// serves the new pair if it loads. A pair swapped meanwhile by a settings change is left
    /// alone: the change read its own files.
    pub(crate) fn reload_static(&self, forced: bool, now: SystemTime) -> Reloaded {
        let Some(current) = self.static_pair.load_full() else {
            return Reloaded::Unchanged;
        };
        let stamp = FileStamp::of(&current.files);
        if !forced && (stamp == current.stamp || *self.refused.lock() == Some(stamp)) {
            return Reloaded::Unchanged;
        }
        match load_pair(&current.files, now) {
            Ok(pair) => {
                let pair = Arc::new(pair);
                let before = self
                    .static_pair
                    .compare_and_swap(&current, Some(Arc::clone(&pair)));
                if !before
                    .as_ref()
                    .is_some_and(|was| Arc::ptr_eq(was, &current))
                {
                    return Reloaded::Unchanged;
                }
                *self.refused.lock() = None;
                Reloaded::Replaced(pair)
            }
            Err(error) => {
                *self.refused.lock() = Some(stamp);
                Reloaded::Refused(error)
            }
        }
    }
}

fn normalise(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// rustls' view of a [`CertStore`]: a handshake asking for `acme-tls/1` alone is a TLS-ALPN-01
/// validation and gets the challenge certificate (never the site's); any other gets the
/// store's choice.
pub(crate) struct Resolver {
    pub(crate) store: Arc<CertStore>,
    pub(crate) answers: Arc<ArcSwapOption<AnswerSource>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("store", &self.store)
            .field("answering", &self.answers.load().is_some())
            .finish()
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if asks_for_acme_only(&hello) {
            let answers = self.answers.load();
            return answers.as_ref()?.0.tls_alpn01(hello.server_name()?);
        }
        self.store.choose(hello.server_name())
    }
}

/// The ClientHello offers exactly one protocol, `acme-tls/1`, as RFC 8737 validators do.
fn asks_for_acme_only(hello: &ClientHello<'_>) -> bool {
    let Some(mut offered) = hello.alpn() else {
        return false;
    };
    offered.next() == Some(ACME_TLS_ALPN) && offered.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certified(name: &str) -> Arc<CertifiedKey> {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let signing = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(der)
            .unwrap();
        Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing))
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn expected_names_are_pending_until_each_has_a_certificate() {
        let store = CertStore::default();
        assert!(!store.is_pending(), "nothing asked for");
        store.expect(&names(&["a.example", "B.example."]));
        assert!(store.is_pending());
        assert_eq!(store.pending_names(), ["a.example", "b.example"]);
        assert!(store.choose(Some("a.example")).is_none());
        assert!(store.choose(None).is_none());

        let a = certified("a.example");
        store.install("a.example", a.clone());
        assert_eq!(store.pending_names(), ["b.example"]);
        store.install("b.example", certified("b.example"));
        assert!(!store.is_pending());
        assert!(Arc::ptr_eq(&store.choose(Some("A.Example")).unwrap(), &a));
        assert!(
            Arc::ptr_eq(&store.choose(None).unwrap(), &a),
            "first name by default"
        );
        assert!(store.choose(Some("c.example")).is_none());

        // A renewal replaces; names dropped from the list lose their certificates.
        let renewed = certified("a.example");
        store.install("a.example", renewed.clone());
        assert!(Arc::ptr_eq(
            &store.installed("a.example").unwrap(),
            &renewed
        ));
        store.expect(&names(&["b.example"]));
        assert!(store.installed("a.example").is_none());
        assert!(!store.is_pending());
    }

    #[test]
    fn a_wildcard_covers_one_level() {
        let store = CertStore::default();
        store.expect(&names(&["*.example.com"]));
        let wild = certified("*.example.com");
        store.install("*.example.com", wild.clone());
        assert!(Arc::ptr_eq(
            &store.choose(Some("www.example.com")).unwrap(),
            &wild
        ));
        assert!(store.choose(Some("a.b.example.com")).is_none());
        assert!(store.choose(Some("example.com")).is_none());
    }
}
