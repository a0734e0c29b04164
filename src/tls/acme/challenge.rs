//! The answers the CA checks while it validates a name: a key authorization served over plain
//! HTTP (HTTP-01, RFC 8555 §8.3) or a self-signed certificate offered to `acme-tls/1` clients
//! (TLS-ALPN-01, RFC 8737). Each answer lives only while its validation is under way.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use rcgen::{CertificateParams, CustomExtension, DistinguishedName, KeyPair};
use rustls::crypto::ring::default_provider;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use sha2::{Digest as _, Sha256};

use crate::tls::ChallengeAnswers;

/// The answers currently offered, read by the listeners. Lookups happen only when the CA (or a
/// stray client) asks, so a lock held for a map lookup is plenty.
#[derive(Default)]
pub(crate) struct Answers {
    http01: RwLock<HashMap<String, String>>,
    tls_alpn01: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl ChallengeAnswers for Answers {
    fn http01(&self, token: &str) -> Option<String> {
        self.http01.read().get(token).cloned()
    }

    fn tls_alpn01(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.tls_alpn01
            .read()
            .get(&name.to_ascii_lowercase())
            .cloned()
    }
}

impl Answers {
    /// Offers one answer until the returned guard is dropped, so an attempt that fails or is
    /// cancelled half-way leaves nothing behind.
    pub(crate) fn offer(self: &Arc<Self>, answer: Answer) -> Offered {
        match &answer {
            Answer::Http01 {
                token,
                key_authorization,
            } => {
                self.http01
                    .write()
                    .insert(token.clone(), key_authorization.clone());
            }
            Answer::TlsAlpn01 { name, certified } => {
                self.tls_alpn01
                    .write()
                    .insert(name.clone(), Arc::clone(certified));
            }
        }
        Offered {
            answers: Arc::clone(self),
            answer,
        }
    }
}

pub(crate) enum Answer {
    Http01 {
        token: String,
        key_authorization: String,
    },
    TlsAlpn01 {
        name: String,
        certified: Arc<CertifiedKey>,
    },
}

/// Withdraws its answer when dropped.
pub(crate) struct Offered {
    answers: Arc<Answers>,
    answer: Answer,
}

impl Drop for Offered {
    fn drop(&mut self) {
        match &self.answer {
            Answer::Http01 { token, .. } => {
                self.answers.http01.write().remove(token);
            }
            Answer::TlsAlpn01 { name, .. } => {
                self.answers.tls_alpn01.write().remove(name);
            }
        }
    }
}

/// The TLS-ALPN-01 certificate for `name` (RFC 8737 §3): self-signed, the name as its only
/// subjectAltName, and the critical id-pe-acmeIdentifier extension holding the SHA-256 of the
/// key authorization.
pub(crate) fn tls_alpn01_certificate(
    name: &str,
    key_authorization: &str,
) -> Result<Arc<CertifiedKey>, String> {
    let digest: [u8; 32] = Sha256::digest(key_authorization.as_bytes()).into();
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|error| format!("cannot make a challenge key: {error}"))?;
    let mut params = CertificateParams::new(vec![name.to_string()])
        .map_err(|error| format!("challenge certificate for {name}: {error}"))?;
    params.distinguished_name = DistinguishedName::new();
    params
        .custom_extensions
        .push(CustomExtension::new_acme_identifier(&digest));
    let certificate = params
        .self_signed(&key)
        .map_err(|error| format!("challenge certificate for {name}: {error}"))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    // Not `CertifiedKey::from_der`: its check that key and certificate match parses the
    // certificate as a server's would be, and refuses the critical extension this one must have.
    let signing_key = default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|error| format!("challenge key for {name}: {error}"))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![certificate.der().clone()],
        signing_key,
    )))
}
