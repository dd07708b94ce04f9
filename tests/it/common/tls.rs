//! Certificates for TLS tests, made with rcgen: a test CA and server certificates it signs for
//! 127.0.0.1 and `localhost`, written as PEM files; HTTPS clients that trust the CA.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SerialNumber};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A certificate authority of a test.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// Its certificate as PEM, in `ca.pem` of the directory it was made in.
    pub path: PathBuf,
}

/// A server certificate and its key, written to files.
pub(crate) struct ServerCert {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The certificate as DER, to compare with what a server presents.
    pub der: Vec<u8>,
}

impl TestCa {
    /// A new CA whose certificate is written to `<dir>/ca.pem`.
    pub(crate) fn new(dir: &Path, name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        let path = dir.join("ca.pem");
        std::fs::write(&path, cert.pem()).expect("write CA");
        TestCa { issuer: Issuer::new(params, key), path }
    }

    /// A server certificate for 127.0.0.1 and `localhost` with common name `cn` and serial
    /// `serial`, written to `<dir>/<stem>.crt` and `<dir>/<stem>.key` (replacing what is there).
    pub(crate) fn issue(&self, dir: &Path, stem: &str, cn: &str, serial: u64) -> ServerCert {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("server params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.serial_number = Some(SerialNumber::from(serial));
        let key = KeyPair::generate().expect("server key");
        let cert = params.signed_by(&key, &self.issuer).expect("server certificate");
        let out = ServerCert {
            cert: dir.join(format!("{stem}.crt")),
            key: dir.join(format!("{stem}.key")),
            der: cert.der().to_vec(),
        };
        // The key first: a reload between the two writes then fails (mismatch) and keeps the old pair.
        std::fs::write(&out.key, key.serialize_pem()).expect("write key");
        std::fs::write(&out.cert, cert.pem()).expect("write certificate");
        out
    }
}

impl ServerCert {
    /// The `[tls]` section serving this certificate, trusting `ca` for peers.
    pub(crate) fn section(&self, ca: &Path) -> String {
        format!(
            "[tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
            self.cert.display(),
            self.key.display(),
            ca.display()
        )
    }
}

/// An HTTPS client that trusts only the CA in `ca` and records the server's certificate
/// (`reqwest::tls::TlsInfo` in each response's extensions).
pub(crate) fn client(ca: &Path) -> reqwest::Client {
    builder(ca).build().expect("client")
}

/// [`client`]'s builder, to change more settings.
pub(crate) fn builder(ca: &Path) -> reqwest::ClientBuilder {
    super::install_crypto();
    let pem = std::fs::read(ca).expect("read CA");
    let roots = reqwest::Certificate::from_pem_bundle(&pem).expect("CA certificates");
    reqwest::Client::builder().timeout(Duration::from_secs(60)).tls_certs_only(roots).tls_info(true)
}

/// The certificate the server presented on the connection that answered `response`.
pub(crate) fn peer_certificate(response: &reqwest::Response) -> Vec<u8> {
    response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("a TLS connection with a peer certificate")
        .to_vec()
}

/// An error with its causes, on one line (reqwest's own message hides the TLS cause).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
