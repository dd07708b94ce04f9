//! Loading, checking and reloading the server's certificate and key.

use super::*;
use std::path::Path;

/// A self-signed certificate for `name` and its key, written as PEM to `<stem>.crt`/`<stem>.key`
/// in `dir`.
fn write_pair(dir: &Path, stem: &str, name: &str) -> TlsConfig {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert =
        rcgen::CertificateParams::new(vec![name.to_string()]).expect("params").self_signed(&key).expect("certificate");
    let config = TlsConfig { cert: dir.join(format!("{stem}.crt")), key: dir.join(format!("{stem}.key")), ca: None };
    std::fs::write(&config.cert, cert.pem()).expect("write certificate");
    std::fs::write(&config.key, key.serialize_pem()).expect("write key");
    config
}

#[test]
fn files_that_do_not_load_name_their_key_and_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = write_pair(dir.path(), "a", "a.example");
    let b = write_pair(dir.path(), "b", "b.example");
    check(&a).expect("a matching pair loads");

    let mismatched = TlsConfig { key: b.key.clone(), ..a.clone() };
    let e = check(&mismatched).unwrap_err();
    assert_eq!((e.key, &e.path), ("tls.key", &b.key));
    assert!(e.to_string().contains("does not match the certificate in"), "{e}");

    let missing = TlsConfig { cert: dir.path().join("nope.crt"), ..a.clone() };
    let e = check(&missing).unwrap_err();
    assert_eq!(e.key, "tls.cert");
    assert!(e.to_string().starts_with(&format!("tls.cert: {}: cannot read the file", missing.cert.display())), "{e}");

    let swapped = TlsConfig { cert: a.key.clone(), key: a.cert.clone(), ca: None };
    let e = check(&swapped).unwrap_err();
    assert_eq!(e.key, "tls.cert");
    assert!(e.to_string().contains("no certificate in the file"), "{e}");

    let not_pem = dir.path().join("ca.der");
    std::fs::write(&not_pem, b"\x30\x82\x01\x0a").expect("write");
    let e = check(&TlsConfig { ca: Some(not_pem), ..a }).unwrap_err();
    assert_eq!(e.key, "tls.ca");
    assert!(e.to_string().contains("not a PEM file"), "{e}");
}

#[test]
fn a_reload_takes_a_good_pair_and_keeps_the_old_one_otherwise() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_pair(dir.path(), "server", "first.example");
    let tls = ServerTls::load(&config).expect("loads");
    let first = tls.current();

    std::fs::write(&config.cert, "garbage").expect("write");
    let e = tls.reload().unwrap_err();
    assert_eq!((e.key, &e.path), ("tls.cert", &config.cert));
    assert!(Arc::ptr_eq(&first, &tls.current()), "a failed reload keeps the old pair");

    write_pair(dir.path(), "server", "second.example");
    tls.reload().expect("a good pair reloads");
    assert!(!Arc::ptr_eq(&first, &tls.current()), "new connections get the new pair");
    assert_eq!(tls.current().alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
}
