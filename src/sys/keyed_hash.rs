//! HMAC-SHA256, as the admission pass and the waiting room's tickets use it: a key set up once
//! and cloned for each tag.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// HMAC-SHA256 keyed with `key`, to be cloned for each tag.
pub(crate) fn keyed(key: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length, so this cannot fail; an empty key is still a key.
    <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()))
}

/// The full tag of `data` under `keyed`.
pub(crate) fn tag_of(keyed: &Hmac<Sha256>, data: &[u8]) -> [u8; 32] {
    let mut mac = keyed.clone();
    mac.update(data);
    mac.finalize().into_bytes().into()
}
