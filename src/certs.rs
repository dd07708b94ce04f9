//! Certificates and keys from PEM files, shared by the server's TLS listener
//! ([`crate::server::tls`]) and by Convoy's HTTPS clients: the peer RPC client, the agent and the
//! CLI.
//!
//! Trust of the clients, the same everywhere: with a CA file (`[tls] ca` for peers, `ca` in the
//! agent's config, `--ca`/`CONVOY_CA` for the CLI) only the certificates in that file are trusted
//! ([`https_client`]); without one, the operating system's trust store, as reqwest does by
//! default.

use rustls::RootCertStore;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What is wrong with a PEM file.
#[derive(Debug, thiserror::Error)]
pub enum PemProblem {
    /// The file could not be read.
    #[error("cannot read the file: {0}")]
    Read(std::io::Error),
    /// The file holds no PEM section at all (a DER file, or something else).
    #[error("not a PEM file (expected sections such as -----BEGIN CERTIFICATE-----)")]
    NotPem,
    /// A PEM section is malformed.
    #[error("malformed PEM: {0}")]
    Malformed(String),
    /// The file holds no `CERTIFICATE` section.
    #[error("no certificate in the file (expected -----BEGIN CERTIFICATE-----)")]
    NoCertificate,
    /// The file holds no private key section.
    #[error("no private key in the file (expected a PKCS#8, PKCS#1 or SEC1 PEM key)")]
    NoKey,
    /// A certificate could not be used to verify servers.
    #[error("not a usable certificate: {0}")]
    Unusable(String),
}

/// A PEM file that could not be used: the file and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct PemFileError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: PemProblem,
}

impl PemFileError {
    fn new(path: &Path, problem: PemProblem) -> Self {
        PemFileError { path: path.to_path_buf(), problem }
    }
}

/// Reads a PEM file, refusing files that hold no PEM section at all.
fn read_pem(path: &Path) -> Result<Vec<u8>, PemFileError> {
    let bytes = std::fs::read(path).map_err(|e| PemFileError::new(path, PemProblem::Read(e)))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(PemFileError::new(path, PemProblem::NotPem));
    }
    Ok(bytes)
}

fn malformed(e: pem::Error) -> PemProblem {
    PemProblem::Malformed(match e {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".to_string(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".to_string(),
        pem::Error::Base64Decode(m) => format!("a section is not valid base64 ({m})"),
        other => other.to_string(),
    })
}

/// The certificates of a PEM file, in order (at least one). Other sections (a key) are skipped.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemFileError> {
    let bytes = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PemFileError::new(path, malformed(e)))?;
    if certs.is_empty() {
        return Err(PemFileError::new(path, PemProblem::NoCertificate));
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemFileError> {
    let bytes = read_pem(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        let problem = match e {
            pem::Error::NoItemsFound => PemProblem::NoKey,
            other => malformed(other),
        };
        PemFileError::new(path, problem)
    })
}

/// The CA certificates of a PEM file, for an HTTPS client to trust.
pub fn client_roots(path: &Path) -> Result<Vec<reqwest::Certificate>, PemFileError> {
    read_certificates(path)?
        .iter()
        .map(|der| {
            reqwest::Certificate::from_der(der)
                .map_err(|e| PemFileError::new(path, PemProblem::Unusable(e.to_string())))
        })
        .collect()
}

/// `builder` trusting only the certificates of the PEM file `ca` when there is one, else the
/// operating system's trust store (reqwest's default).
pub fn https_client(
    builder: reqwest::ClientBuilder,
    ca: Option<&Path>,
) -> Result<reqwest::ClientBuilder, PemFileError> {
    Ok(match ca {
        Some(path) => builder.tls_certs_only(client_roots(path)?),
        None => builder,
    })
}

/// The certificate problem behind a failed request, when the server's certificate was refused
/// (not signed by a trusted CA, expired, issued for another name).
pub fn certificate_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(r) = rustls_error(err)
            && matches!(r, rustls::Error::InvalidCertificate(_))
        {
            return Some(r);
        }
        cur = err.source();
    }
    None
}

/// `e` as a rustls error, looking inside io::Errors (which may nest, and whose `source` skips
/// the error they wrap).
fn rustls_error<'a>(mut e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    loop {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        e = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    }
}

/// Why a TLS file could not be used: the config key (`tls.cert`, `tls.key`, `tls.ca`), its file
/// and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {}: {problem}", path.display())]
pub struct TlsError {
    /// The config key naming the file.
    pub key: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: TlsProblem,
}

/// What is wrong with a TLS file.
#[derive(Debug, thiserror::Error)]
pub enum TlsProblem {
    /// The file cannot be read as PEM, or holds nothing of the kind expected.
    #[error(transparent)]
    Pem(PemProblem),
    /// The key is not the one of the certificate.
    #[error("the key does not match the certificate in {}", .0.display())]
    KeyMismatch(PathBuf),
    /// A certificate could not be used as a trust anchor.
    #[error("not a usable CA certificate: {0}")]
    BadCa(rustls::Error),
    /// rustls refused the certificate or the key (e.g. an unsupported key type).
    #[error("refused by rustls: {0}")]
    Rustls(rustls::Error),
}

impl TlsError {
    pub(crate) fn new(key: &'static str, path: &Path, problem: TlsProblem) -> Self {
        TlsError { key, path: path.to_path_buf(), problem }
    }

    pub(crate) fn pem(key: &'static str, e: PemFileError) -> Self {
        TlsError { key, path: e.path, problem: TlsProblem::Pem(e.problem) }
    }
}

/// The CA certificates of a PEM file as trust anchors (`key` names the file in errors).
pub fn load_ca(key: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(path).map_err(|e| TlsError::pem(key, e))? {
        roots.add(cert).map_err(|e| TlsError::new(key, path, TlsProblem::BadCa(e)))?;
    }
    Ok(roots)
}

/// The rustls server configuration of a certificate chain and its key: ring's algorithms, safe
/// protocol versions, HTTP/2 then HTTP/1.1 offered through ALPN.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let chain = read_certificates(cert).map_err(|e| TlsError::pem("tls.cert", e))?;
    let private = read_private_key(key).map_err(|e| TlsError::pem("tls.key", e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new("tls.cert", cert, TlsProblem::Rustls(e)))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => {
                TlsError::new("tls.key", key, TlsProblem::KeyMismatch(cert.to_path_buf()))
            }
            // An unreadable certificate shows as a bad end-entity certificate, anything else is
            // about the key (its type or encoding).
            rustls::Error::InvalidCertificate(_) => TlsError::new("tls.cert", cert, TlsProblem::Rustls(e)),
            other => TlsError::new("tls.key", key, TlsProblem::Rustls(other)),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Checks that a server's TLS files load: the certificate chain, its key (and that they match),
/// and the CA if there is one.
pub fn check_server_files(cert: &Path, key: &Path, ca: Option<&Path>) -> Result<(), TlsError> {
    server_config(cert, key)?;
    if let Some(ca) = ca {
        load_ca("tls.ca", ca)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("missing.pem");
        let e = read_certificates(&missing).unwrap_err();
        assert!(matches!(e.problem, PemProblem::Read(_)));
        assert!(e.to_string().starts_with(&format!("{}: cannot read the file", missing.display())), "{e}");

        let der = dir.path().join("cert.der");
        std::fs::write(&der, [0x30, 0x82, 0x01, 0x00]).expect("write");
        assert!(matches!(read_certificates(&der).unwrap_err().problem, PemProblem::NotPem));

        let cut = dir.path().join("cut.pem");
        std::fs::write(&cut, "-----BEGIN CERTIFICATE-----\nMIIB\n").expect("write");
        let e = read_certificates(&cut).unwrap_err();
        assert!(matches!(e.problem, PemProblem::Malformed(_)), "{e}");

        let key = rcgen::KeyPair::generate().expect("key");
        let key_only = dir.path().join("key.pem");
        std::fs::write(&key_only, key.serialize_pem()).expect("write");
        assert!(matches!(read_certificates(&key_only).unwrap_err().problem, PemProblem::NoCertificate));
        assert!(read_private_key(&key_only).is_ok());

        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let cert_only = dir.path().join("cert.pem");
        std::fs::write(&cert_only, cert.pem()).expect("write");
        assert!(matches!(read_private_key(&cert_only).unwrap_err().problem, PemProblem::NoKey));
        assert_eq!(read_certificates(&cert_only).expect("certificate").len(), 1);
        assert_eq!(client_roots(&cert_only).expect("roots").len(), 1);
    }
}
