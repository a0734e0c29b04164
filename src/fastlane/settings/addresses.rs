//! Account and asset identifiers of the four networks, checked down to their checksums so a
//! mistyped receiving address is caught when the file is loaded, not after a visitor paid.

use sha2::{Digest, Sha256};

/// An XRPL classic address: `r…`, base58 in the Ripple alphabet of version byte 0, a 20-byte
/// account id and a 4-byte double-SHA-256 checksum.
pub fn is_xrpl_address(text: &str) -> bool {
    if !text.starts_with('r') || !(25..=35).contains(&text.len()) {
        return false;
    }
    let Ok(bytes) = bs58::decode(text)
        .with_alphabet(bs58::Alphabet::RIPPLE)
        .into_vec()
    else {
        return false;
    };
    if bytes.len() != 25 || bytes[0] != 0 {
        return false;
    }
    let (body, checksum) = bytes.split_at(21);
    let digest = Sha256::digest(Sha256::digest(body));
    digest[..4] == *checksum
}

/// Stellar strkey version bytes (the first base32 character: G, C, S).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrKey {
    /// `G…`: an account's ed25519 public key.
    Account,
    /// `C…`: a contract.
    Contract,
    /// `S…`: an ed25519 secret seed.
    Seed,
}

impl StrKey {
    fn version(self) -> u8 {
        match self {
            StrKey::Account => 6 << 3,
            StrKey::Contract => 2 << 3,
            StrKey::Seed => 18 << 3,
        }
    }
}

/// A 56-character Stellar strkey of `kind` with a valid CRC16-XModem checksum.
pub fn is_strkey(text: &str, kind: StrKey) -> bool {
    if text.len() != 56 {
        return false;
    }
    let Some(bytes) = base32_decode(text) else {
        return false;
    };
    if bytes.len() != 35 || bytes[0] != kind.version() {
        return false;
    }
    let crc = crc16_xmodem(&bytes[..33]);
    bytes[33..] == crc.to_le_bytes()
}

/// RFC 4648 base32 without padding; `None` on any other character or leftover bits.
fn base32_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let mut buffer: u32 = 0;
    let mut bits = 0u32;
    for byte in text.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'2'..=b'7' => byte - b'2' + 26,
            _ => return None,
        };
        buffer = (buffer << 5) | u32::from(value);
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    // 56 characters carry exactly 35 bytes; anything left over must be zero padding bits.
    (buffer == 0).then_some(out)
}

/// The checksum strkeys carry (a CRC, not a cryptographic hash).
fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A Hedera entity id `0.0.N` (shard and realm 0), N fitting an int64. `allow_zero` admits
/// `0.0.0`, the id of HBAR itself.
pub fn is_hedera_id(text: &str, allow_zero: bool) -> bool {
    let Some(number) = text.strip_prefix("0.0.") else {
        return false;
    };
    if number.is_empty()
        || !number.bytes().all(|b| b.is_ascii_digit())
        || (number.len() > 1 && number.starts_with('0'))
    {
        return false;
    }
    match number.parse::<i64>() {
        Ok(0) => allow_zero,
        Ok(_) => true,
        Err(_) => false,
    }
}

/// A Solana public key: base58 (Bitcoin alphabet) of exactly 32 bytes.
pub fn is_solana_key(text: &str) -> bool {
    (32..=44).contains(&text.len())
        && bs58::decode(text)
            .into_vec()
            .is_ok_and(|bytes| bytes.len() == 32)
}

/// A Hedera fee secret as the SDKs print it: DER hex of an ed25519 (`302e…`, 48 bytes) or a
/// secp256k1 (`3030…`, 50 bytes) private key.
pub fn is_hedera_der_secret(text: &str) -> bool {
    let Ok(bytes) = hex::decode(text) else {
        return false;
    };
    matches!(
        (bytes.first(), bytes.get(1), bytes.len()),
        (Some(0x30), Some(0x2e), 48) | (Some(0x30), Some(0x30), 50)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn xrpl_addresses_need_their_checksum() {
        assert!(is_xrpl_address("rHb9CJAWyB4rj91VRWn96DkukG4bwdtyTh"));
        assert!(is_xrpl_address("rrrrrrrrrrrrrrrrrrrrrhoLvTp"));
        assert!(is_xrpl_address("r3moe1n4xiQBEbJRPpymiK7svnvRwcXDG6"));
        // One character changed.
        assert!(!is_xrpl_address("rHb9CJAWyB4rj91VRWn96DkukG4bwdtyTj"));
        assert!(!is_xrpl_address("xHb9CJAWyB4rj91VRWn96DkukG4bwdtyTh"));
        assert!(!is_xrpl_address("r0000000000000000000000000"));
        assert!(!is_xrpl_address(""));
    }

    #[test]
    fn strkeys_need_the_right_version_and_checksum() {
        let account = "GCFIRY65OQE7DFP5KLNS2PF2LVZMUZYJX4OZIEQ36N2IQANUB5XVYOJR";
        assert!(is_strkey(account, StrKey::Account));
        assert!(!is_strkey(account, StrKey::Contract));
        let sac = "CDLZFC3SYJYDZT7K67VZ75HPJVIEUVNIXF47ZG2FB2RMQQVU2HHGCYSC";
        assert!(is_strkey(sac, StrKey::Contract));
        assert!(is_strkey(
            "CAS3J7GYLGXMF6TDJBBYYSE3HQ6BBSMLNUQ34T6TZMYMW2EVH34XOWMA",
            StrKey::Contract
        ));
        let mut broken = account.to_string();
        broken.replace_range(10..11, "A");
        assert!(!is_strkey(&broken, StrKey::Account));
        assert!(!is_strkey(&account.to_lowercase(), StrKey::Account));
        assert!(is_strkey(
            "SABAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAFNE7",
            StrKey::Seed
        ));
    }

    #[test]
    fn hedera_ids_are_shard_and_realm_zero() {
        assert!(is_hedera_id("0.0.1234", false));
        assert!(is_hedera_id("0.0.0", true));
        assert!(!is_hedera_id("0.0.0", false));
        assert!(!is_hedera_id("0.1.5", false));
        assert!(!is_hedera_id("0.0.01", false));
        assert!(!is_hedera_id("0.0.99999999999999999999", false));
        assert!(!is_hedera_id("0.0.-1", false));
    }

    #[test]
    fn solana_keys_are_thirty_two_bytes() {
        assert!(is_solana_key("11111111111111111111111111111111"));
        assert!(is_solana_key(
            "GyfFHe77pcZtdgGnWGw4T1VxCPB6JJyGLfjzMagDdsz3"
        ));
        assert!(is_solana_key("metaqbxxUerdq28cj1RbAWkYQm3ybzjb6a8bt518x1s"));
        assert!(!is_solana_key("1111111111111111111111111111111l"));
        assert!(!is_solana_key("abc"));
    }

    #[test]
    fn hedera_secrets_are_der_hex() {
        let ed25519 = format!("302e020100300506032b657004220420{}", "11".repeat(32));
        assert!(is_hedera_der_secret(&ed25519));
        assert!(!is_hedera_der_secret(&ed25519[..94]));
        assert!(!is_hedera_der_secret("zz"));
    }

    proptest! {
        #[test]
        fn address_checks_never_panic(text in "\\PC{0,80}") {
            let _ = is_xrpl_address(&text);
            let _ = is_strkey(&text, StrKey::Account);
            let _ = is_hedera_id(&text, true);
            let _ = is_solana_key(&text);
            let _ = is_hedera_der_secret(&text);
        }
    }
}
