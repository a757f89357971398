//! TLS for the hub's endpoints: a certificate and key from PEM files, or a self-signed pair
//! generated at start (rcgen) for local use. The device endpoint uses it when configured
//! with TLS; the HTTPS and AMQP service endpoints always do (IoT Hub's SDKs only speak TLS
//! there), so without device TLS a certificate is generated for them. Every endpoint asks
//! for a client certificate (X.509 devices, docs/iothub.md) without requiring one.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::client_cert::OptionalClientCert;
use super::config::DeviceTls;
use super::domain::error::IotHubError;

/// The acceptor and, for a generated certificate, its PEM (what devices must trust).
pub(crate) fn acceptor(
    tls: &DeviceTls,
    hostname: &str,
) -> Result<Option<(TlsAcceptor, Option<String>)>, IotHubError> {
    let (certs, key, pem) = match tls {
        DeviceTls::None => return Ok(None),
        DeviceTls::Files { cert, key } => {
            let certs = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    IotHubError::io(format_args!("TLS certificate {}", cert.display()), e)
                })?;
            if certs.is_empty() {
                return Err(IotHubError::io_message(format!(
                    "TLS certificate {}: no certificate in the file",
                    cert.display()
                )));
            }
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| IotHubError::io(format_args!("TLS key {}", key.display()), e))?;
            (certs, key, None)
        }
        DeviceTls::SelfSigned => {
            let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
            if !names.iter().any(|n| n == hostname) {
                names.insert(0, hostname.to_owned());
            }
            let generated = rcgen::generate_simple_self_signed(names)
                .map_err(|e| IotHubError::io("generating a TLS certificate", e))?;
            let pem = generated.cert.pem();
            let key = PrivateKeyDer::try_from(generated.signing_key.serialize_der())
                .map_err(|e| IotHubError::io("generated TLS key", e))?;
            (vec![generated.cert.der().clone()], key, Some(pem))
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // Every endpoint asks for a client certificate and none requires one: X.509 devices
    // authenticate with it, SAS devices and back ends send none (client_cert.rs).
    let verifier = OptionalClientCert::new(&provider);
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)
        })
        .map_err(|e| IotHubError::io("TLS configuration", e))?;
    Ok(Some((TlsAcceptor::from(Arc::new(config)), pem)))
}

/// How long a client of the hub's HTTPS and AMQP listeners has for its TLS handshake: what
/// the broker's TLS listener allows.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = crate::broker::tls::HANDSHAKE_TIMEOUT;

/// The TLS handshake of one accepted connection, given at most `limit`. Each listener runs it
/// on the connection's own task, so a silent peer delays only itself (docs/security.md,
/// threat model). The error says whether it failed or timed out.
pub(crate) async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    acceptor: &TlsAcceptor,
    stream: S,
    limit: Duration,
) -> Result<TlsStream<S>, String> {
    match tokio::time::timeout(limit, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
        Err(_) => Err(format!("TLS handshake timed out after {limit:?}")),
    }
}
