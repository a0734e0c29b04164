//! A certificate as the cache keeps it (PEM chain, then the PEM private key) and the dates that
//! decide when it is renewed.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::crypto::ring::default_provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Renewal starts this long before expiry, or earlier in the life of a short-lived certificate
/// (see [`renewal_time`]).
pub(crate) const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// A certificate chain with its key, ready for rustls, and the leaf's validity.
#[derive(Clone)]
pub(crate) struct Issued {
    pub(crate) certified: Arc<CertifiedKey>,
    pub(crate) not_before: SystemTime,
    pub(crate) not_after: SystemTime,
}

impl Issued {
    /// Reads a PEM file's worth of text: the certificates in chain order (leaf first) and one
    /// private key, in any order. The key must belong to the leaf.
    pub(crate) fn from_pem(pem: &[u8]) -> Result<Issued, String> {
        let chain = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| format!("unreadable certificate: {error}"))?;
        let Some(leaf) = chain.first() else {
            return Err("no certificate in the file".to_string());
        };
        let (not_before, not_after) = validity(leaf)?;
        let key = PrivateKeyDer::from_pem_slice(pem)
            .map_err(|error| format!("unreadable private key: {error}"))?;
        let certified = CertifiedKey::from_der(chain, key, &default_provider())
            .map_err(|error| format!("certificate and key do not go together: {error}"))?;
        Ok(Issued {
            certified: Arc::new(certified),
            not_before,
            not_after,
        })
    }

    /// When renewal of this certificate should start.
    pub(crate) fn renew_at(&self) -> SystemTime {
        renewal_time(self.not_before, self.not_after)
    }
}

/// Thirty days before expiry, or, for a certificate that lives less than ninety days, when a
/// third of its life is left: a CA that issues short-lived certificates expects them renewed
/// well before the end, and a thirty-day margin would renew them without pause.
pub(crate) fn renewal_time(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let lifetime = not_after
        .duration_since(not_before)
        .unwrap_or(Duration::ZERO);
    not_after
        .checked_sub(RENEW_BEFORE.min(lifetime / 3))
        .unwrap_or(not_before)
}

/// The notBefore and notAfter of an X.509 certificate (RFC 5280 §4.1).
pub(crate) fn validity(der: &[u8]) -> Result<(SystemTime, SystemTime), String> {
    yasna::parse_der(der, |reader| {
        reader.read_sequence(|certificate| {
            let validity = certificate.next().read_sequence(|tbs| {
                // The version is optional and explicitly tagged [0].
                tbs.read_optional(|version| {
                    version.read_tagged(yasna::Tag::context(0), |inner| inner.read_der())
                })?;
                let _serial = tbs.next().read_der()?;
                let _signature = tbs.next().read_der()?;
                let _issuer = tbs.next().read_der()?;
                let validity = tbs.next().read_sequence(|times| {
                    let not_before = read_time(times.next())?;
                    let not_after = read_time(times.next())?;
                    Ok((not_before, not_after))
                })?;
                // Subject, key and the optional unique ids and extensions are not needed.
                while tbs.read_optional(|rest| rest.read_der())?.is_some() {}
                Ok(validity)
            })?;
            let _algorithm = certificate.next().read_der()?;
            let _signature = certificate.next().read_der()?;
            Ok(validity)
        })
    })
    .map_err(|error| format!("unreadable certificate validity: {error}"))
}

/// RFC 5280 allows either form, UTCTime up to 2049 and GeneralizedTime after.
fn read_time(reader: yasna::BERReader<'_, '_>) -> yasna::ASN1Result<SystemTime> {
    if reader.lookahead_tag()? == yasna::tags::TAG_UTCTIME {
        Ok((*reader.read_utctime()?.datetime()).into())
    } else {
        Ok((*reader.read_generalized_time()?.datetime()).into())
    }
}
