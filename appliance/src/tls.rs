//! TLS for the admin listener (the API, `/metrics` and the web console),
//! with rustls (ring provider).
//!
//! `[admin] tls = "auto"` (the default) serves TLS when the listener is not
//! on a loopback address, "on" always, "off" never. A TLS listener still
//! answers plain HTTP from loopback peers (duetctl on the appliance, a
//! container's health check) and refuses it from everyone else (`admin.rs`
//! tells the two apart by the first byte). The certificate is
//! `[admin] tls_cert` / `tls_key` (PEM) when configured; otherwise duetd
//! makes its own on first start in `<data_dir>/admin-tls/`: a private CA
//! (`ca.pem`, what clients trust: `duetctl --tls-ca`, a browser's
//! certificate store) and a server certificate it signed (`cert.pem`, the
//! chain, and `key.pem`, 0600) for `localhost`, 127.0.0.1, ::1, the host
//! name and the listener's address. The CA's key is not kept: nothing else
//! is ever signed with it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Where the generated certificate lives.
pub const TLS_DIR: &str = "admin-tls";

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// TLS unless the listener is on a loopback address.
    #[default]
    Auto,
    On,
    Off,
}

/// Whether the admin listener at `addr` serves TLS in `mode`.
pub fn wanted(mode: TlsMode, addr: SocketAddr) -> bool {
    match mode {
        TlsMode::On => true,
        TlsMode::Off => false,
        TlsMode::Auto => !addr.ip().is_loopback(),
    }
}

fn err(what: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("admin TLS: {what}"))
}

/// The server configuration: the configured certificate and key, or the
/// generated ones (made now if missing).
pub fn server_config(data_dir: &Path, addr: SocketAddr, cert: Option<&Path>, key: Option<&Path>) -> std::io::Result<Arc<rustls::ServerConfig>> {
    let (cert_path, key_path) = match (cert, key) {
        (Some(c), Some(k)) => (c.to_path_buf(), k.to_path_buf()),
        (None, None) => generated(data_dir, addr)?,
        _ => return Err(err("give both [admin] tls_cert and tls_key, or neither (duetd then makes its own)")),
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .map_err(|e| err(format!("{}: {e}", cert_path.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| err(format!("{}: {e}", cert_path.display())))?;
    if chain.is_empty() {
        return Err(err(format!("{}: no certificate in it", cert_path.display())));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| err(format!("{}: {e}", key_path.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(err)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| err(format!("{} and {}: {e}", cert_path.display(), key_path.display())))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The generated certificate's paths, made on first use.
fn generated(data_dir: &Path, addr: SocketAddr) -> std::io::Result<(PathBuf, PathBuf)> {
    let dir = data_dir.join(TLS_DIR);
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    std::fs::create_dir_all(&dir)?;
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    if let Some(h) = hostname() {
        names.push(h);
    }
    if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
        names.push(addr.ip().to_string());
    }
    let (ca_pem, chain_pem, key_pem) = make_certificate(names).map_err(err)?;
    write_private(&key, key_pem.as_bytes())?;
    std::fs::write(dir.join("ca.pem"), &ca_pem)?;
    std::fs::write(&cert, chain_pem)?;
    tracing::info!("admin TLS: made a certificate in {} (clients trust {})", dir.display(), dir.join("ca.pem").display());
    Ok((cert, key))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}

fn hostname() -> Option<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let h = h.trim();
    (!h.is_empty()).then(|| h.to_string())
}

/// A private CA and a server certificate it signed for `names` (DNS names
/// or IP addresses): (CA PEM, server chain PEM, server key PEM).
pub fn make_certificate(names: Vec<String>) -> Result<(String, String, String), rcgen::Error> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(DnType::CommonName, "duet admin CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(names)?;
    leaf.distinguished_name.push(DnType::CommonName, "duet admin");
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = leaf.signed_by(&key, &ca, &ca_key)?;
    Ok((ca.pem(), format!("{}{}", leaf.pem(), ca.pem()), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_means_tls_off_loopback_only() {
        let lo: SocketAddr = "127.0.0.1:7445".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7445".parse().unwrap();
        assert!(!wanted(TlsMode::Auto, lo));
        assert!(wanted(TlsMode::Auto, any));
        assert!(wanted(TlsMode::On, lo));
        assert!(!wanted(TlsMode::Off, any));
    }

    #[test]
    fn a_generated_certificate_loads_and_is_kept() {
        let dir = std::env::temp_dir().join(format!("duet-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let addr: SocketAddr = "0.0.0.0:7445".parse().unwrap();
        server_config(&dir, addr, None, None).unwrap();
        let first = std::fs::read(dir.join(TLS_DIR).join("cert.pem")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join(TLS_DIR).join("key.pem")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        server_config(&dir, addr, None, None).unwrap();
        assert_eq!(std::fs::read(dir.join(TLS_DIR).join("cert.pem")).unwrap(), first, "made once");
        let c = dir.join(TLS_DIR).join("cert.pem");
        assert!(server_config(&dir, addr, Some(&c), None).is_err(), "a cert without its key is refused");
        let bad = dir.join("bad.pem");
        std::fs::write(&bad, "not pem").unwrap();
        assert!(server_config(&dir, addr, Some(&bad), Some(&bad)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
