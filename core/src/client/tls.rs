//! The rustls configuration of a TLS connection ([`TlsOptions`]): reading the CA bundle,
//! the client certificate and key, and the server name check. Kept apart from the URL and
//! environment parsing of [`super::options`], which only records file names.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::protocol::errors::Error;

/// TLS settings (rustls, with the `ring` crypto provider).
///
/// Without a CA file the platform's trusted roots are used.
///
/// ```
/// use mqstate::TlsOptions;
///
/// let tls = TlsOptions::default().with_ca_file("/etc/ssl/broker-ca.pem");
/// assert!(tls.ca_file.is_some());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsOptions {
    /// PEM file with the CA certificate(s) that signed the broker's certificate.
    pub ca_file: Option<PathBuf>,
    /// PEM file with the client certificate chain (mutual TLS); needs `client_key_file`.
    pub client_cert_file: Option<PathBuf>,
    /// PEM file with the client's private key (PKCS#8, PKCS#1 or SEC1).
    pub client_key_file: Option<PathBuf>,
    /// The name the broker's certificate must be valid for, when it is not the host the client
    /// connects to (for example connecting to `127.0.0.1` through a tunnel to a broker whose
    /// certificate names `aio-broker`). Used for certificate verification only.
    pub server_name: Option<String>,
}

impl TlsOptions {
    /// Sets the CA file (builder style).
    ///
    /// ```
    /// # use mqstate::TlsOptions;
    /// let tls = TlsOptions::default().with_ca_file("ca.pem");
    /// assert_eq!(tls.ca_file.unwrap().to_str(), Some("ca.pem"));
    /// ```
    #[must_use]
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Sets the client certificate chain and key files for mutual TLS (builder style).
    ///
    /// ```
    /// # use mqstate::TlsOptions;
    /// let tls = TlsOptions::default().with_client_cert("client.pem", "client.key");
    /// assert!(tls.client_cert_file.is_some() && tls.client_key_file.is_some());
    /// ```
    #[must_use]
    pub fn with_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert_file = Some(cert.into());
        self.client_key_file = Some(key.into());
        self
    }

    /// Sets the name the broker's certificate is verified against (builder style).
    ///
    /// ```
    /// # use mqstate::TlsOptions;
    /// let tls = TlsOptions::default().with_server_name("aio-broker");
    /// assert_eq!(tls.server_name.as_deref(), Some("aio-broker"));
    /// ```
    #[must_use]
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Builds the rustls configuration, reading the files now. Errors name the file and say
    /// what was wrong with it.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                let certs = read_certs(path, "CA file")?;
                for cert in certs {
                    roots.add(cert).map_err(|e| {
                        Error::connection_caused_by(
                            format!("CA file {}: certificate rejected: {e}", path.display()),
                            e,
                        )
                    })?;
                }
            }
            None => {
                // The platform's roots; certificates it cannot parse are skipped, as every
                // TLS client does, and an empty store is reported at handshake time.
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
        }
        let roots = Arc::new(roots);
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::connection_caused_by(format!("TLS setup: {e}"), e))?;
        let builder = match &self.server_name {
            None => builder.with_root_certificates(roots),
            Some(name) => {
                let name = ServerName::try_from(name.clone()).map_err(|e| {
                    Error::InvalidArgument(format!("TLS server name {name:?}: {e}"))
                })?;
                let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    roots,
                    provider.clone(),
                )
                .build()
                .map_err(|e| Error::connection_caused_by(format!("TLS setup: {e}"), e))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(FixedNameVerifier { inner, name }))
            }
        };
        let config = match (&self.client_cert_file, &self.client_key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "client certificate file")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    Error::connection_caused_by(
                        format!(
                            "client key file {}: no usable private key: {e}",
                            key.display()
                        ),
                        e,
                    )
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    Error::connection_caused_by(format!("client certificate: {e}"), e)
                })?
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::InvalidArgument(
                    "mutual TLS needs both a client certificate file and a client key file".into(),
                ));
            }
        };
        Ok(Arc::new(config))
    }
}

fn read_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::connection_caused_by(format!("{what} {}: {e}", path.display()), e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::connection_caused_by(format!("{what} {}: {e}", path.display()), e))?;
    if certs.is_empty() {
        return Err(Error::connection(format!(
            "{what} {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// Verifies the broker's certificate against a configured name instead of the host connected
/// to; everything else (chain, signatures, expiry) is the standard WebPKI verification.
#[derive(Debug)]
struct FixedNameVerifier {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for FixedNameVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_missing_ca_file_is_a_connection_error_with_the_io_error_underneath() {
        let options = TlsOptions {
            ca_file: Some(PathBuf::from("/nonexistent/mqstate-test-ca.pem")),
            ..TlsOptions::default()
        };
        let Err(err) = options.client_config() else {
            panic!("a missing CA file was accepted");
        };
        assert_eq!(err.kind(), ErrorKind::Connection);
        assert!(
            err.to_string()
                .starts_with("connection error: CA file /nonexistent/mqstate-test-ca.pem: "),
            "{err}"
        );
        let pem = err
            .source()
            .and_then(|s| s.downcast_ref::<rustls::pki_types::pem::Error>());
        assert!(
            matches!(pem, Some(rustls::pki_types::pem::Error::Io(io)) if io.kind() == std::io::ErrorKind::NotFound),
            "{:?}",
            err.source()
        );
    }
}
