//! The cache directory: one folder per CA directory URL, holding that CA's account key and one
//! PEM file (chain, then key) per name. Folders are 0700 and files 0600: they hold private keys.
//!
//! ```text
//! <cache>/                                   0700
//!   acme-v02.api.letsencrypt.org-1a2b3c4d/   0700, one per directory URL
//!     account.key                            0600, PKCS#8 P-256
//!     shop.example.com.pem                   0600, chain then key
//! ```
//!
//! Keeping each CA apart means switching between staging and production never serves the
//! other's certificates, and switching back finds its account and certificates again.

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use rustls::pki_types::PrivatePkcs8KeyDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest as _, Sha256};

use super::AcmeError;

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;
const ACCOUNT_KEY: &str = "account.key";

/// The folder for one CA; created (with its parent) by [`CaCache::open`].
#[derive(Clone, Debug)]
pub(crate) struct CaCache {
    dir: PathBuf,
}

impl CaCache {
    /// Creates `root` and the CA's folder under it if missing and makes both private. Refuses a
    /// path that exists and is not a directory, or one that cannot be created.
    pub(crate) fn open(root: &Path, directory_url: &str) -> Result<CaCache, AcmeError> {
        let dir = root.join(ca_folder(directory_url));
        for path in [root, dir.as_path()] {
            private_dir(path).map_err(|reason| AcmeError::Cache {
                path: path.to_path_buf(),
                reason,
            })?;
        }
        Ok(CaCache { dir })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn certificate_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pem"))
    }

    /// The cached certificate file for `name`, or `None` when there is none yet.
    pub(crate) fn read_certificate(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.certificate_path(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    pub(crate) fn write_certificate(&self, name: &str, pem: &[u8]) -> io::Result<()> {
        write_private(&self.dir, &self.certificate_path(name), pem)
    }

    /// The account key, created on first use and reused after that: the CA knows the account by
    /// this key.
    pub(crate) fn account_key(&self) -> Result<PrivatePkcs8KeyDer<'static>, String> {
        let path = self.dir.join(ACCOUNT_KEY);
        match fs::read(&path) {
            Ok(pem) => PrivatePkcs8KeyDer::from_pem_slice(&pem)
                .map_err(|error| format!("{}: unreadable account key: {error}", path.display())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let (_, pkcs8) = instant_acme::Key::generate_pkcs8()
                    .map_err(|error| format!("cannot make an account key: {error}"))?;
                let pem = pem_block("PRIVATE KEY", pkcs8.secret_pkcs8_der());
                write_private(&self.dir, &path, pem.as_bytes())
                    .map_err(|error| format!("{}: {error}", path.display()))?;
                Ok(pkcs8)
            }
            Err(error) => Err(format!("{}: {error}", path.display())),
        }
    }
}

/// `<host>-<8 hex digits of the URL's SHA-256>`: readable, and distinct for two directories on
/// one host.
fn ca_folder(directory_url: &str) -> String {
    let host = directory_url
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| uri.host().map(str::to_ascii_lowercase))
        .unwrap_or_default();
    let host: String = host
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '-' => c,
            _ => '_',
        })
        .collect();
    let digest = Sha256::digest(directory_url.as_bytes());
    let host = host.trim_start_matches('.');
    let host = if host.is_empty() { "ca" } else { host };
    format!("{host}-{}", hex::encode(&digest[..4]))
}

fn private_dir(path: &Path) -> Result<(), String> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err("exists and is not a directory".to_string()),
        Err(_) => {
            fs::create_dir_all(path).map_err(|error| format!("cannot be created: {error}"))?;
        }
    }
    fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))
        .map_err(|error| format!("cannot be made private (0700): {error}"))
}

/// Writes through a 0600 temporary file in the same folder and renames it over `path`, so a
/// crash never leaves half a key and readers see the old or the new file whole.
fn write_private(dir: &Path, path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut file = tempfile::Builder::new()
        .prefix(".new-")
        .permissions(fs::Permissions::from_mode(FILE_MODE))
        .tempfile_in(dir)?;
    file.write_all(contents)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|error| error.error)?;
    Ok(())
}

/// RFC 7468 text encoding, 64 characters a line.
pub(crate) fn pem_block(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}
