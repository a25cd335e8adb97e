//! Secrets: the admin password and API token (stored as salted PBKDF2
//! hashes), and the NT one-way function that NTLMv2 needs for SMB users.

use md4::{Digest as _, Md4};
use rand::RngCore;
use sha2::Sha256;

const PBKDF2_ROUNDS: u32 = 20_000;

/// A random secret of `bytes` bytes, as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// A readable random password: 20 characters from an unambiguous alphabet.
pub fn random_password() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::thread_rng();
    (0..20).map(|_| ALPHABET[(rng.next_u32() as usize) % ALPHABET.len()] as char).collect()
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// PBKDF2-HMAC-SHA256 (RFC 8018 5.2), one block.
fn pbkdf2(password: &[u8], salt: &[u8], rounds: u32) -> [u8; 32] {
    let mut msg = salt.to_vec();
    msg.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac_sha256(password, &msg);
    let mut out = u;
    for _ in 1..rounds {
        u = hmac_sha256(password, &u);
        for (o, x) in out.iter_mut().zip(u.iter()) {
            *o ^= x;
        }
    }
    out
}

/// Stored form of a secret: salt (16) || rounds (4) || hash (32).
pub fn hash_secret(secret: &str) -> Vec<u8> {
    let mut salt = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut salt);
    let mut out = salt.to_vec();
    out.extend_from_slice(&PBKDF2_ROUNDS.to_be_bytes());
    out.extend_from_slice(&pbkdf2(secret.as_bytes(), &salt, PBKDF2_ROUNDS));
    out
}

/// Checks `secret` against a stored hash, in constant time.
pub fn verify_secret(secret: &str, stored: &[u8]) -> bool {
    if stored.len() != 52 {
        return false;
    }
    let salt = &stored[..16];
    let rounds = u32::from_be_bytes([stored[16], stored[17], stored[18], stored[19]]);
    if rounds == 0 || rounds > 1_000_000 {
        return false;
    }
    let h = pbkdf2(secret.as_bytes(), salt, rounds);
    duet_admin_api::constant_time_eq(&h, &stored[20..])
}

/// NTOWFv2's input: MD4 of the UTF-16LE password (MS-NLMP 3.3.1, NTOWFv1).
pub fn nt_hash(password: &str) -> [u8; 16] {
    let utf16: Vec<u8> = password.encode_utf16().flat_map(|c| c.to_le_bytes()).collect();
    Md4::digest(&utf16).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nt_hash_matches_ms_nlmp_example() {
        // MS-NLMP 4.2.2.1.2: NTOWFv1("Password").
        assert_eq!(hex::encode(nt_hash("Password")), "a4f49c406510bdcab6824ee7c30fd852");
    }

    #[test]
    fn pbkdf2_matches_rfc7914_vector() {
        // RFC 7914 11: PBKDF2-HMAC-SHA256("passwd", "salt", 1, 64): first block.
        let h = pbkdf2(b"passwd", b"salt", 1);
        assert_eq!(hex::encode(h), "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc");
    }

    #[test]
    fn secrets_verify() {
        let s = hash_secret("correct horse");
        assert!(verify_secret("correct horse", &s));
        assert!(!verify_secret("correct horsf", &s));
        assert!(!verify_secret("x", &[0; 3]));
    }
}
