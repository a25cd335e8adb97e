//! Secrets: the admin password and API token (stored as Argon2id hashes,
//! the `argon2` crate; the PBKDF2 hashes of older data directories are
//! still checked, with the `pbkdf2` crate, and replaced on the next logon),
//! and the NT one-way function that NTLMv2 needs for SMB users.

use md4::{Digest as _, Md4};
use rand::RngCore;
use sha2::Sha256;


/// A random secret of `bytes` bytes, as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// A new machine SID (`S-1-5-21-a-b-c`, random), in its string form: what
/// SMB shows duet's users under (`duet_fs::acl::SidMap`).
pub fn random_machine_sid() -> String {
    let mut b = [0u8; 12];
    rand::thread_rng().fill_bytes(&mut b);
    duet_fs::acl::SidMap::machine_sid(b).to_string()
}

/// A readable random password: 20 characters from an unambiguous alphabet.
pub fn random_password() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::thread_rng();
    (0..20).map(|_| ALPHABET[(rng.next_u32() as usize) % ALPHABET.len()] as char).collect()
}

/// Argon2id with OWASP's recommended minimum (19 MiB, 2 passes, 1 lane).
fn argon2() -> argon2::Argon2<'static> {
    let params = argon2::Params::new(19 * 1024, 2, 1, None).expect("valid Argon2 parameters");
    argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
}

/// Stored form of a secret: its Argon2id hash as a PHC string
/// (`$argon2id$v=19$m=19456,t=2,p=1$salt$hash`).
pub fn hash_secret(secret: &str) -> Vec<u8> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    argon2().hash_password(secret.as_bytes(), &salt).expect("Argon2 hashes any password").to_string().into_bytes()
}

/// The stored form duet wrote before Argon2id: salt (16) || rounds (4, big
/// endian) || PBKDF2-HMAC-SHA256 (32).
const LEGACY_LEN: usize = 52;

/// Whether `stored` is the old PBKDF2 form, to be replaced by
/// [`hash_secret`]'s after the next successful logon.
pub fn needs_upgrade(stored: &[u8]) -> bool {
    stored.len() == LEGACY_LEN && !stored.starts_with(b"$argon2")
}

/// Checks `secret` against a stored hash (Argon2id, or the old PBKDF2
/// form), in constant time. Slow by design (tens of milliseconds): call it
/// off the data path (`admin.rs` runs it on glommio's blocking pool).
pub fn verify_secret(secret: &str, stored: &[u8]) -> bool {
    if stored.starts_with(b"$argon2") {
        use argon2::password_hash::{PasswordHash, PasswordVerifier};
        let Ok(text) = std::str::from_utf8(stored) else { return false };
        let Ok(hash) = PasswordHash::new(text) else { return false };
        return argon2::Argon2::default().verify_password(secret.as_bytes(), &hash).is_ok();
    }
    if stored.len() != LEGACY_LEN {
        return false;
    }
    let salt = &stored[..16];
    let rounds = u32::from_be_bytes([stored[16], stored[17], stored[18], stored[19]]);
    if rounds == 0 || rounds > 1_000_000 {
        return false;
    }
    let mut h = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(secret.as_bytes(), salt, rounds, &mut h);
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
        let mut h = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(b"passwd", b"salt", 1, &mut h);
        assert_eq!(hex::encode(h), "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc");
    }

    #[test]
    fn secrets_verify() {
        let s = hash_secret("correct horse");
        assert!(s.starts_with(b"$argon2id$v=19$m=19456,t=2,p=1$"), "{}", String::from_utf8_lossy(&s));
        assert!(verify_secret("correct horse", &s));
        assert!(!verify_secret("correct horsf", &s));
        assert!(!needs_upgrade(&s));
        assert!(!verify_secret("x", &[0; 3]));
        assert!(!verify_secret("x", b"$argon2id$garbage"));
    }

    #[test]
    fn legacy_pbkdf2_hashes_still_verify_and_ask_for_an_upgrade() {
        // The form sessions 1-9 stored: salt || 20,000 (BE) || PBKDF2.
        let salt = [7u8; 16];
        let mut legacy = salt.to_vec();
        legacy.extend_from_slice(&20_000u32.to_be_bytes());
        let mut h = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(b"old password", &salt, 20_000, &mut h);
        legacy.extend_from_slice(&h);
        assert!(verify_secret("old password", &legacy));
        assert!(!verify_secret("old passwore", &legacy));
        assert!(needs_upgrade(&legacy));
        let mut zero_rounds = legacy.clone();
        zero_rounds[16..20].copy_from_slice(&0u32.to_be_bytes());
        assert!(!verify_secret("old password", &zero_rounds));
    }
}
