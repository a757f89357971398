//! TLS client certificates on the hub's device endpoints (MQTT, AMQP, HTTPS): the rustls
//! verifier that asks for one without requiring it, the operator's CA file, and reading the
//! certificate a connection presented into the domain's [`ClientCert`]. Whether that
//! certificate is a given device's is the domain's decision ([`ClientCert::authenticates`]);
//! docs/security.md, "X.509 devices", says what is checked where.

use std::path::Path;
use std::sync::Arc;

use ring::digest;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::domain::error::IotHubError;
use super::domain::x509::ClientCert;

/// Asks every client for a certificate and accepts a connection without one (SAS devices and
/// back ends send none). A certificate sent must parse as X.509, and the handshake signature
/// must verify with its key (rustls's webpki check): a peer cannot present a certificate
/// whose private key it does not hold. Which device it identifies, and whether it chains to a
/// CA, is decided after the handshake, when the device id is known.
#[derive(Debug)]
pub(crate) struct OptionalClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl OptionalClientCert {
    pub(crate) fn new(provider: &rustls::crypto::CryptoProvider) -> Arc<OptionalClientCert> {
        Arc::new(OptionalClientCert {
            algorithms: provider.signature_verification_algorithms,
        })
    }
}

impl ClientCertVerifier for OptionalClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No hints: a client that filters its certificates by the hinted CAs would otherwise
    /// withhold a self-signed device certificate.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        x509_parser::parse_x509_certificate(end_entity)
            .map(|_| ClientCertVerified::assertion())
            .map_err(|_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The CAs device certificates of `certificateAuthority` devices must chain to: webpki's
/// client verifier over the operator's CA file (signatures, validity periods, the client-auth
/// usage), run after the handshake.
#[derive(Clone)]
pub(crate) struct CaTrust {
    verifier: Option<Arc<dyn ClientCertVerifier>>,
}

impl std::fmt::Debug for CaTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaTrust")
            .field("configured", &self.verifier.is_some())
            .finish()
    }
}

impl CaTrust {
    /// No CA: `certificateAuthority` devices cannot connect.
    pub(crate) fn none() -> CaTrust {
        CaTrust { verifier: None }
    }

    /// The CA certificates of a PEM file (one or more).
    pub(crate) fn from_file(path: &Path) -> Result<CaTrust, IotHubError> {
        let what = || format!("CA file {}", path.display());
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| IotHubError::io(what(), e))?;
        if certs.is_empty() {
            return Err(IotHubError::io_message(format!(
                "{}: no certificate in the file",
                what()
            )));
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| IotHubError::io_message(format!("{}: {e}", what())))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| IotHubError::io_message(format!("{}: {e}", what())))?;
        Ok(CaTrust {
            verifier: Some(verifier),
        })
    }

    /// What the certificate chain a client presented says (`None` when it sent none).
    pub(crate) fn read(&self, chain: Option<&[CertificateDer<'static>]>) -> Option<ClientCert> {
        let (leaf, intermediates) = chain?.split_first()?;
        let hex = |alg| {
            digest::digest(alg, leaf.as_ref())
                .as_ref()
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<String>()
        };
        let (common_name, valid_now) = match x509_parser::parse_x509_certificate(leaf) {
            Ok((_, cert)) => {
                let cn = cert
                    .subject()
                    .iter_common_name()
                    .next()
                    .and_then(|cn| cn.as_str().ok())
                    .map(str::to_owned);
                let valid = if cert.validity().is_valid() {
                    Ok(())
                } else {
                    Err(format!(
                        "not valid now (valid from {} to {})",
                        cert.validity().not_before,
                        cert.validity().not_after
                    ))
                };
                (cn, valid)
            }
            Err(e) => (None, Err(format!("not a valid X.509 certificate: {e}"))),
        };
        let chains_to_ca = match &self.verifier {
            None => Err("no CA certificates were given to the hub (--iothub-ca-file)".to_owned()),
            Some(v) => v
                .verify_client_cert(leaf, intermediates, UnixTime::now())
                .map(|_| ())
                .map_err(|e| format!("does not chain to a CA of the hub: {e}")),
        };
        Some(ClientCert {
            sha1: hex(&digest::SHA1_FOR_LEGACY_USE_ONLY),
            sha256: hex(&digest::SHA256),
            common_name,
            valid_now,
            chains_to_ca,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_ca_file_that_is_missing_or_holds_no_certificate_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = CaTrust::from_file(&missing).unwrap_err().to_string();
        assert!(e.contains("missing.pem"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no PEM here\n").unwrap();
        let e = CaTrust::from_file(&empty).unwrap_err().to_string();
        assert!(e.contains("no certificate in the file"), "{e}");
    }

    #[test]
    fn a_presented_certificate_reads_as_its_digests_cn_and_validity() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "dev1");
        let cert = params.self_signed(&key).unwrap();
        let chain = [cert.der().clone()];
        let read = CaTrust::none().read(Some(&chain)).unwrap();
        assert_eq!((read.sha1.len(), read.sha256.len()), (40, 64));
        assert_eq!(read.common_name.as_deref(), Some("dev1"));
        assert_eq!(read.valid_now, Ok(()));
        assert!(read.chains_to_ca.unwrap_err().contains("--iothub-ca-file"));
        assert_eq!(CaTrust::none().read(None), None);
        assert_eq!(CaTrust::none().read(Some(&[])), None);
    }
}
