//! `tls-server-end-point` (RFC 5929): the hash of the server's certificate that SCRAM's
//! channel binding (`SCRAM-SHA-256-PLUS`) proves both ends saw, so that a man in the middle
//! who ended TLS with his own certificate cannot relay the password exchange.
//!
//! The hash is the certificate's own signature hash, SHA-256 where that is MD5 or SHA-1; a
//! certificate signed some other way (RSA-PSS, Ed25519) has none here, as with PostgreSQL's
//! OpenSSL code, and the client then does not bind.

use sha2::Digest;

/// The hash of the DER certificate `cert` to bind to, or `None` when its signature
/// algorithm names no hash this knows.
pub(super) fn end_point(cert: &[u8]) -> Option<Vec<u8>> {
    let hash = signature_hash(signature_algorithm(cert)?)?;
    Some(match hash {
        Hash::Sha256 => sha2::Sha256::digest(cert).to_vec(),
        Hash::Sha384 => sha2::Sha384::digest(cert).to_vec(),
        Hash::Sha512 => sha2::Sha512::digest(cert).to_vec(),
    })
}

#[derive(Debug, PartialEq, Eq)]
enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

/// The hash to use for a signature algorithm, by its OID's DER contents.
fn signature_hash(oid: &[u8]) -> Option<Hash> {
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01]; // 1.2.840.113549.1.1
    const ECDSA_SHA2: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03]; // 1.2.840.10045.4.3
    const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01]; // 1.2.840.10045.4.1
    if oid == ECDSA_SHA1 {
        return Some(Hash::Sha256);
    }
    match oid.split_last()? {
        // md5, sha1, sha256, sha384, sha512 WithRSAEncryption
        (4 | 5 | 11, family) if family == RSA => Some(Hash::Sha256),
        (12, family) if family == RSA => Some(Hash::Sha384),
        (13, family) if family == RSA => Some(Hash::Sha512),
        // ecdsa-with-SHA256, SHA384, SHA512
        (2, family) if family == ECDSA_SHA2 => Some(Hash::Sha256),
        (3, family) if family == ECDSA_SHA2 => Some(Hash::Sha384),
        (4, family) if family == ECDSA_SHA2 => Some(Hash::Sha512),
        _ => None,
    }
}

/// The OID of a DER certificate's `signatureAlgorithm`: `Certificate ::= SEQUENCE {
/// tbsCertificate, signatureAlgorithm AlgorithmIdentifier, signature }`.
fn signature_algorithm(cert: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    let (certificate, _) = der(cert, SEQUENCE)?;
    let (_, after_tbs) = der(certificate, SEQUENCE)?;
    let (algorithm, _) = der(after_tbs, SEQUENCE)?;
    let (oid, _) = der(algorithm, OID)?;
    Some(oid)
}

/// One DER element of type `tag` at the start of `input`: (its contents, what follows it).
fn der(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, mut rest) = rest.split_first()?;
    let len = if len < 0x80 {
        usize::from(len)
    } else {
        let octets = usize::from(len & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (bytes, tail) = rest.split_at(octets);
        rest = tail;
        bytes.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b))
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(alg: &'static rcgen::SignatureAlgorithm) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(alg).unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_hash_follows_the_signature_algorithm() {
        let p256 = cert(&rcgen::PKCS_ECDSA_P256_SHA256);
        assert_eq!(
            signature_hash(signature_algorithm(&p256).unwrap()),
            Some(Hash::Sha256)
        );
        assert_eq!(
            end_point(&p256).unwrap(),
            sha2::Sha256::digest(&p256).to_vec()
        );
        let p384 = cert(&rcgen::PKCS_ECDSA_P384_SHA384);
        assert_eq!(
            signature_hash(signature_algorithm(&p384).unwrap()),
            Some(Hash::Sha384)
        );
        assert_eq!(end_point(&p384).unwrap().len(), 48);
        // Ed25519 names no hash: no binding.
        let ed = cert(&rcgen::PKCS_ED25519);
        assert!(signature_algorithm(&ed).is_some());
        assert_eq!(end_point(&ed), None);
    }

    #[test]
    fn truncated_or_foreign_input_has_no_end_point() {
        let p256 = cert(&rcgen::PKCS_ECDSA_P256_SHA256);
        for cut in [0, 1, 2, 10, p256.len() / 2] {
            assert_eq!(end_point(&p256[..cut]), None, "cut at {cut}");
        }
        assert_eq!(end_point(b"not a certificate"), None);
    }
}
