//! A certificate and its private key from PEM files (`-tls-cert`/`-tls-key`, and the portal's
//! pair): read, checked (a certificate, a key that signs for it, not expired) and turned into
//! what rustls serves, with the names the certificate covers and the files' stamps, so a change
//! on disk is noticed cheaply.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::sys::walltime::push_rfc3339;

/// Largest PEM file read: a long chain is a few kilobytes; anything near this is no
/// certificate file, and reading it whole would only cost memory.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Which settings name a pair's files, for messages the operator can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairFlags {
    pub cert: &'static str,
    pub key: &'static str,
}

/// The pair of the public listener.
pub const SITE_PAIR: PairFlags = PairFlags {
    cert: "-tls-cert",
    key: "-tls-key",
};

/// The portal listener's own pair.
pub const PORTAL_PAIR: PairFlags = PairFlags {
    cert: "-portal-tls-cert",
    key: "-portal-tls-key",
};

/// Where a pair comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub flags: PairFlags,
}

/// Modification time and size of both files: what the watcher compares. A rewrite that keeps
/// both is not noticed, which no tool that renews certificates does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    cert: (Option<SystemTime>, u64),
    key: (Option<SystemTime>, u64),
}

impl FileStamp {
    /// The files' stamps now; a file that cannot be read stamps as missing.
    pub fn of(files: &PairFiles) -> FileStamp {
        let stamp = |path: &Path| match std::fs::metadata(path) {
            Ok(meta) => (meta.modified().ok(), meta.len()),
            Err(_) => (None, u64::MAX),
        };
        FileStamp {
            cert: stamp(&files.cert),
            key: stamp(&files.key),
        }
    }
}

/// A loaded, checked pair.
pub struct StaticPair {
    pub certified: Arc<CertifiedKey>,
    /// DNS names of the certificate's subject alternative names (wildcards as `*.example.com`).
    pub names: Vec<String>,
    /// End of validity, seconds since the Unix epoch.
    pub not_after: i64,
    pub files: PairFiles,
    /// The files as they were just before they were read.
    pub stamp: FileStamp,
}

impl std::fmt::Debug for StaticPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticPair")
            .field("names", &self.names)
            .field("not_after", &self.not_after)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl StaticPair {
    /// When the certificate stops being valid, as RFC 3339 text.
    pub fn expires(&self) -> String {
        rfc3339(self.not_after)
    }

    /// The names for a log line: all of them, or "no DNS names".
    pub fn names_shown(&self) -> String {
        if self.names.is_empty() {
            "no DNS names".to_string()
        } else {
            self.names.join(",")
        }
    }
}

/// Why a pair cannot be served, as one line naming the setting and the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PairError(pub String);

/// Reads and checks the pair in `files`, as of `now`.
pub fn load_pair(files: &PairFiles, now: SystemTime) -> Result<StaticPair, PairError> {
    let stamp = FileStamp::of(files);
    let cert_err = |reason: String| {
        PairError(format!(
            "{} {}: {reason}",
            files.flags.cert,
            files.cert.display()
        ))
    };
    let key_err = |reason: String| {
        PairError(format!(
            "{} {}: {reason}",
            files.flags.key,
            files.key.display()
        ))
    };
    let cert_pem = read_pem(&files.cert).map_err(cert_err)?;
    let key_pem = read_pem(&files.key).map_err(key_err)?;
    let chain = parse_chain(&cert_pem).map_err(cert_err)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        key_err(match e {
            rustls::pki_types::pem::Error::NoItemsFound => "holds no PEM private key".to_string(),
            other => format!("cannot read a private key from it: {other}"),
        })
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_err(format!("unusable private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => {
            return Err(PairError(format!(
                "{} {} does not match the certificate in {} {}: give the key that was made with it",
                files.flags.key,
                files.key.display(),
                files.flags.cert,
                files.cert.display()
            )));
        }
    }
    let leaf = certified
        .end_entity_cert()
        .map_err(|_| cert_err("holds no certificate".to_string()))?;
    let not_after = not_after(leaf.as_ref())
        .ok_or_else(|| cert_err("the certificate's validity cannot be read".to_string()))?;
    let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
    });
    if not_after < now_secs {
        return Err(cert_err(format!(
            "the certificate expired at {}; renew it",
            rfc3339(not_after)
        )));
    }
    let names = dns_names(leaf).map_err(cert_err)?;
    Ok(StaticPair {
        certified: Arc::new(certified),
        names,
        not_after,
        files: files.clone(),
        stamp,
    })
}

fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(format!(
            "larger than {} KiB, which no certificate file is",
            MAX_PEM_BYTES >> 10
        ));
    }
    Ok(bytes)
}

/// Every certificate in a PEM file, the served one first.
pub fn parse_chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot read a certificate from it: {e}"))?;
    if chain.is_empty() {
        return Err("holds no PEM certificate".to_string());
    }
    Ok(chain)
}

/// The DNS names in the certificate's subject alternative names.
fn dns_names(leaf: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let parsed = webpki::EndEntityCert::try_from(leaf)
        .map_err(|e| format!("not a certificate that can be served: {e}"))?;
    Ok(parsed
        .valid_dns_names()
        .map(|name| name.to_ascii_lowercase())
        .collect())
}

/// Seconds since the Unix epoch as RFC 3339 text.
pub(crate) fn rfc3339(secs: i64) -> String {
    let mut out = Vec::with_capacity(20);
    push_rfc3339(&mut out, secs, 0);
    String::from_utf8(out).unwrap_or_default()
}

/// The end of a certificate's validity (`notAfter`), in seconds since the Unix epoch: read
/// from the DER itself, as neither rustls nor webpki hands it out.
///
/// `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber
/// INTEGER, signature SEQUENCE, issuer SEQUENCE, validity SEQUENCE { notBefore, notAfter }, … } … }`
pub(crate) fn not_after(der: &[u8]) -> Option<i64> {
    const SEQUENCE: u8 = 0x30;
    const INTEGER: u8 = 0x02;
    const VERSION: u8 = 0xa0;
    let (certificate, _) = Der(der).element(SEQUENCE)?;
    let (tbs, _) = Der(certificate).element(SEQUENCE)?;
    let mut fields = Der(tbs);
    if fields.0.first() == Some(&VERSION) {
        fields = Der(fields.element(VERSION)?.1);
    }
    let after_serial = fields.element(INTEGER)?.1;
    let after_signature = Der(after_serial).element(SEQUENCE)?.1;
    let after_issuer = Der(after_signature).element(SEQUENCE)?.1;
    let (validity, _) = Der(after_issuer).element(SEQUENCE)?;
    let (_, _not_before, rest) = Der(validity).any()?;
    let (tag, not_after, _) = Der(rest).any()?;
    x509_time(tag, not_after)
}

/// A DER reader over the bytes still to read.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    /// The next element's tag, contents and what follows it.
    fn any(&self) -> Option<(u8, &'a [u8], &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let len = rest[..count]
                .iter()
                .fold(0usize, |len, &byte| (len << 8) | usize::from(byte));
            (len, &rest[count..])
        };
        if rest.len() < len {
            return None;
        }
        Some((tag, &rest[..len], &rest[len..]))
    }

    /// The next element's contents and what follows, if it has tag `tag`.
    fn element(&self, tag: u8) -> Option<(&'a [u8], &'a [u8])> {
        let (found, contents, rest) = self.any()?;
        (found == tag).then_some((contents, rest))
    }
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn x509_time(tag: u8, value: &[u8]) -> Option<i64> {
    const UTC_TIME: u8 = 0x17;
    const GENERALIZED_TIME: u8 = 0x18;
    let text = std::str::from_utf8(value).ok()?;
    let digits = text.strip_suffix('Z')?;
    let full = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let year: u32 = digits.get(..2)?.parse().ok()?;
            let century = if year < 50 { "20" } else { "19" };
            format!("{century}{digits}")
        }
        (GENERALIZED_TIME, 14) => digits.to_string(),
        _ => return None,
    };
    if !full.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let rfc = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &full[..4],
        &full[4..6],
        &full[6..8],
        &full[8..10],
        &full[10..12],
        &full[12..14]
    );
    crate::sys::walltime::parse_rfc3339(&rfc).map(|(secs, _)| secs)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A self-signed certificate for `names`, valid from `not_before` to `not_after` (Unix
    /// seconds), with its key, as PEM.
    fn made(names: &[&str], not_before: i64, not_after: i64) -> (String, String) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + time_offset(not_before);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + time_offset(not_after);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        (
            to_pem("CERTIFICATE", cert.der()),
            to_pem("PRIVATE KEY", &key.serialize_der()),
        )
    }

    /// PEM text of one DER item, as certificate tools write it.
    pub(crate) fn to_pem(label: &str, der: &[u8]) -> String {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(der);
        let mut pem = format!("-----BEGIN {label}-----\n");
        for line in encoded.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str(&format!("-----END {label}-----\n"));
        pem
    }

    fn time_offset(secs: i64) -> std::time::Duration {
        std::time::Duration::from_secs(u64::try_from(secs).unwrap())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn files(cert: PathBuf, key: PathBuf) -> PairFiles {
        PairFiles {
            cert,
            key,
            flags: SITE_PAIR,
        }
    }

    const NOW: i64 = 1_800_000_000;

    fn at(secs: i64) -> SystemTime {
        UNIX_EPOCH + time_offset(secs)
    }

    #[test]
    fn a_good_pair_loads_with_its_names_and_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = made(
            &["example.com", "*.example.com"],
            NOW - 86_400,
            NOW + 86_400,
        );
        let pair = load_pair(
            &files(
                write(dir.path(), "c.pem", &cert),
                write(dir.path(), "k.pem", &key),
            ),
            at(NOW),
        )
        .unwrap();
        assert_eq!(pair.names, ["example.com", "*.example.com"]);
        assert_eq!(pair.not_after, NOW + 86_400);
        assert_eq!(pair.expires(), "2027-01-16T08:00:00Z");
    }

    #[test]
    fn bad_pairs_say_which_setting_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = made(&["example.com"], NOW - 86_400, NOW + 86_400);
        let (_, other_key) = made(&["example.com"], NOW - 86_400, NOW + 86_400);
        let (old_cert, old_key) = made(&["example.com"], NOW - 10 * 86_400, NOW - 86_400);
        let cert_path = write(dir.path(), "c.pem", &cert);
        let key_path = write(dir.path(), "k.pem", &key);
        let missing = dir.path().join("missing.pem");
        let err = |files: PairFiles| load_pair(&files, at(NOW)).unwrap_err().0;

        let e = err(files(missing.clone(), key_path.clone()));
        assert!(
            e.starts_with("-tls-cert ") && e.contains("missing.pem"),
            "{e}"
        );
        let e = err(files(cert_path.clone(), missing));
        assert!(
            e.starts_with("-tls-key ") && e.contains("missing.pem"),
            "{e}"
        );
        let e = err(files(
            cert_path.clone(),
            write(dir.path(), "other.pem", &other_key),
        ));
        assert!(
            e.contains("-tls-key") && e.contains("other.pem") && e.contains("does not match"),
            "{e}"
        );
        let e = err(files(
            write(dir.path(), "old.pem", &old_cert),
            write(dir.path(), "oldk.pem", &old_key),
        ));
        assert!(
            e.contains("-tls-cert") && e.contains("old.pem") && e.contains("expired"),
            "{e}"
        );
        // A key where the certificate belongs, and garbage where the key belongs.
        let e = err(files(key_path.clone(), key_path.clone()));
        assert!(
            e.starts_with("-tls-cert ") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = err(files(cert_path, write(dir.path(), "junk.pem", "junk")));
        assert!(
            e.starts_with("-tls-key ") && e.contains("no PEM private key"),
            "{e}"
        );
    }

    #[test]
    fn a_chain_keeps_its_order() {
        let (leaf, _) = made(&["a.example"], NOW - 60, NOW + 60);
        let (issuer, _) = made(&["ca.example"], NOW - 60, NOW + 60);
        let chain = parse_chain(format!("{leaf}{issuer}").as_bytes()).unwrap();
        assert_eq!(chain.len(), 2);
        assert_eq!(
            not_after(chain[0].as_ref()),
            Some(NOW + 60),
            "the first certificate is the served one"
        );
    }

    #[test]
    fn validity_reads_both_time_forms_and_refuses_garbage() {
        assert_eq!(x509_time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(x509_time(0x17, b"500101000000Z"), Some(-631_152_000));
        assert_eq!(x509_time(0x18, b"20500101000000Z"), Some(2_524_608_000));
        assert_eq!(x509_time(0x18, b"2050010100000Z"), None);
        assert_eq!(x509_time(0x17, b"4912312359+0Z"), None);
        assert_eq!(not_after(b""), None);
        assert_eq!(not_after(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(not_after(&[0x30, 0x03, 0x30, 0x01, 0x00]), None);
        // Every truncation of a real certificate is refused, never read past its end.
        let (cert, _) = made(&["example.com"], NOW - 60, NOW + 60);
        let der = parse_chain(cert.as_bytes()).unwrap().remove(0);
        let bytes = der.as_ref();
        assert_eq!(not_after(bytes), Some(NOW + 60));
        for cut in 0..bytes.len() {
            let _ = not_after(&bytes[..cut]);
        }
    }

    #[test]
    fn stamps_change_with_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let pair = files(
            write(dir.path(), "c.pem", "one"),
            write(dir.path(), "k.pem", "two"),
        );
        let first = FileStamp::of(&pair);
        assert_eq!(first, FileStamp::of(&pair));
        std::fs::write(&pair.cert, "three!").unwrap();
        assert_ne!(first, FileStamp::of(&pair));
    }
}
