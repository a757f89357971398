//! TLS clients for tests of the local IoT Hub's TLS endpoints (devices, HTTPS, AMQP): a
//! connector that trusts the hub's generated certificate
//! (`IotHub::ca_certificate_pem`), with the ring provider the server uses.
//!
//! ```no_run
//! # async fn demo(pem: &str, addr: std::net::SocketAddr) -> std::io::Result<()> {
//! let tls = mqstate_testing::tls::connect(pem, addr).await?;
//! # drop(tls); Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A connector that trusts the certificates of `pem` (and nothing else).
///
/// # Panics
/// When `pem` holds no valid certificate: a test setup error.
pub fn connector(pem: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        #[allow(clippy::expect_used)]
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a certificate rustls accepts");
    }
    assert!(!roots.is_empty(), "no certificate in the PEM text");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    #[allow(clippy::expect_used)]
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS 1.2 and 1.3 with ring")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to `addr` for the server name `localhost` (the name the hub's generated
/// certificate has), trusting `pem`.
pub async fn connect(pem: &str, addr: SocketAddr) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    connector(pem).connect(localhost(), tcp).await
}

/// The server name `localhost`.
pub fn localhost() -> ServerName<'static> {
    ServerName::from(
        rustls::pki_types::DnsName::try_from_str("localhost")
            .unwrap_or_else(|_| unreachable!("localhost is a DNS name")),
    )
}

/// A client config that trusts the certificates of `pem` and presents `cert_pem` (a chain,
/// leaf first) with its `key_pem` as the TLS client certificate: an X.509 device.
///
/// # Panics
/// When a PEM text holds no valid certificate or key: a test setup error.
pub fn client_config_with_cert(pem: &str, cert_pem: &str, key_pem: &str) -> rustls::ClientConfig {
    use rustls::pki_types::PrivateKeyDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        #[allow(clippy::expect_used)]
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a certificate rustls accepts");
    }
    #[allow(clippy::expect_used)]
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("PEM client certificates");
    #[allow(clippy::expect_used)]
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("a PEM private key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    #[allow(clippy::expect_used)]
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS 1.2 and 1.3 with ring")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("a client certificate and key rustls accepts")
}
