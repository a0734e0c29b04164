//! Concert's own TLS: certificates obtained and renewed over ACME ([`acme`]), and the two seams
//! between whatever obtains certificates and whatever serves them.

use std::sync::Arc;

pub mod acme;

pub trait ChallengeAnswers: Send + Sync + 'static {
    /// The key authorization to answer at /.well-known/acme-challenge/<token> (HTTP-01).
    fn http01(&self, token: &str) -> Option<String>;
    /// The acme-tls/1 certificate for `name` (TLS-ALPN-01), while a validation is pending.
    fn tls_alpn01(&self, name: &str) -> Option<Arc<rustls::sign::CertifiedKey>>;
}

pub trait CertificateSink: Send + Sync + 'static {
    fn install(&self, name: &str, certified: Arc<rustls::sign::CertifiedKey>);
}
