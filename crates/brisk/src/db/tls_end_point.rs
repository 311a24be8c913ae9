//! `tls-server-end-point` (RFC 5929): the hash of the server's certificate that SCRAM's
//! channel binding (`SCRAM-SHA-256-PLUS`) proves both ends saw, so that a man in the middle
//! who ended TLS with his own certificate cannot relay the password exchange.
//!
//! The hash is the certificate's own signature hash (for RSA-PSS, the one its parameters
//! name), SHA-256 where that is MD5 or SHA-1, as PostgreSQL computes it. A certificate signed
//! without a separate hash (Ed25519) has none, and cannot be bound to.

use sha2::Digest;

/// The hash of the DER certificate `cert` to bind to, or `None` when its signature
/// algorithm names no hash this knows.
pub(super) fn end_point(cert: &[u8]) -> Option<Vec<u8>> {
    let (oid, parameters) = signature_algorithm(cert)?;
    let hash = signature_hash(oid, parameters)?;
    Some(match hash {
        Hash::Sha224 => sha2::Sha224::digest(cert).to_vec(),
        Hash::Sha256 => sha2::Sha256::digest(cert).to_vec(),
        Hash::Sha384 => sha2::Sha384::digest(cert).to_vec(),
        Hash::Sha512 => sha2::Sha512::digest(cert).to_vec(),
    })
}

#[derive(Debug, PartialEq, Eq)]
enum Hash {
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// The hash to use for a signature algorithm, by its OID's DER contents and its parameters.
fn signature_hash(oid: &[u8], parameters: &[u8]) -> Option<Hash> {
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01]; // 1.2.840.113549.1.1
    const ECDSA_SHA2: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03]; // 1.2.840.10045.4.3
    const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01]; // 1.2.840.10045.4.1
    const RSA_PSS: u8 = 10;
    if oid == ECDSA_SHA1 {
        return Some(Hash::Sha256);
    }
    match oid.split_last()? {
        (&RSA_PSS, family) if family == RSA => pss_hash(parameters),
        // md5, sha1, sha256, sha384, sha512, sha224 WithRSAEncryption
        (4 | 5 | 11, family) if family == RSA => Some(Hash::Sha256),
        (12, family) if family == RSA => Some(Hash::Sha384),
        (13, family) if family == RSA => Some(Hash::Sha512),
        (14, family) if family == RSA => Some(Hash::Sha224),
        // ecdsa-with-SHA224, SHA256, SHA384, SHA512
        (1, family) if family == ECDSA_SHA2 => Some(Hash::Sha224),
        (2, family) if family == ECDSA_SHA2 => Some(Hash::Sha256),
        (3, family) if family == ECDSA_SHA2 => Some(Hash::Sha384),
        (4, family) if family == ECDSA_SHA2 => Some(Hash::Sha512),
        _ => None,
    }
}

/// The hash an RSA-PSS signature uses: `RSASSA-PSS-params ::= SEQUENCE { hashAlgorithm [0]
/// AlgorithmIdentifier DEFAULT sha1, … }` (SHA-1 counts as SHA-256 here).
fn pss_hash(parameters: &[u8]) -> Option<Hash> {
    const SHA1: &[u8] = &[0x2b, 0x0e, 0x03, 0x02, 0x1a]; // 1.3.14.3.2.26
    const SHA2: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02]; // 2.16.840.1.101.3.4.2
    const EXPLICIT_0: u8 = 0xa0;
    let (pss, _) = der(parameters, 0x30)?;
    if pss.first() != Some(&EXPLICIT_0) {
        return Some(Hash::Sha256);
    }
    let (hash_algorithm, _) = der(pss, EXPLICIT_0)?;
    let (identifier, _) = der(hash_algorithm, 0x30)?;
    let (oid, _) = der(identifier, 0x06)?;
    if oid == SHA1 {
        return Some(Hash::Sha256);
    }
    match oid.split_last()? {
        (1, family) if family == SHA2 => Some(Hash::Sha256),
        (2, family) if family == SHA2 => Some(Hash::Sha384),
        (3, family) if family == SHA2 => Some(Hash::Sha512),
        (4, family) if family == SHA2 => Some(Hash::Sha224),
        _ => None,
    }
}

/// The OID of a DER certificate's `signatureAlgorithm`, and what follows it (its
/// parameters): `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm
/// AlgorithmIdentifier, signature }`.
fn signature_algorithm(cert: &[u8]) -> Option<(&[u8], &[u8])> {
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    let (certificate, _) = der(cert, SEQUENCE)?;
    let (_, after_tbs) = der(certificate, SEQUENCE)?;
    let (algorithm, _) = der(after_tbs, SEQUENCE)?;
    der(algorithm, OID)
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

    fn hash_of(cert: &[u8]) -> Option<Hash> {
        let (oid, parameters) = signature_algorithm(cert)?;
        signature_hash(oid, parameters)
    }

    /// A certificate-shaped DER value whose signature algorithm is `algorithm` (OID and
    /// parameters, DER): what the hash choice reads.
    fn shaped(algorithm: &[u8]) -> Vec<u8> {
        let element = |tag: u8, body: &[u8]| [&[tag, body.len() as u8][..], body].concat();
        let body = [
            element(0x30, &[]),
            element(0x30, algorithm),
            element(0x03, &[0]),
        ]
        .concat();
        element(0x30, &body)
    }

    #[test]
    fn the_hash_follows_the_signature_algorithm() {
        let p256 = cert(&rcgen::PKCS_ECDSA_P256_SHA256);
        assert_eq!(hash_of(&p256), Some(Hash::Sha256));
        assert_eq!(
            end_point(&p256).unwrap(),
            sha2::Sha256::digest(&p256).to_vec()
        );
        let p384 = cert(&rcgen::PKCS_ECDSA_P384_SHA384);
        assert_eq!(hash_of(&p384), Some(Hash::Sha384));
        assert_eq!(end_point(&p384).unwrap().len(), 48);
        // Ed25519 names no hash: no binding.
        let ed = cert(&rcgen::PKCS_ED25519);
        assert!(signature_algorithm(&ed).is_some());
        assert_eq!(end_point(&ed), None);
    }

    #[test]
    fn rsa_names_its_hash_in_the_oid_and_pss_in_its_parameters() {
        let rsa = |last: u8| {
            let oid = [0x06, 9, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
            [&oid[..], &[last]].concat()
        };
        let null = [0x05, 0x00];
        for (last, hash) in [
            (5, Hash::Sha256),
            (11, Hash::Sha256),
            (12, Hash::Sha384),
            (13, Hash::Sha512),
            (14, Hash::Sha224),
        ] {
            let algorithm = [rsa(last), null.to_vec()].concat();
            assert_eq!(hash_of(&shaped(&algorithm)), Some(hash), "RSA {last}");
        }
        // RSASSA-PSS with SHA-384 named, and with no hash named (SHA-1, the default).
        let sha384 = [
            0x30, 11, 0x06, 9, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02,
        ];
        let explicit = [&[0xa0, sha384.len() as u8][..], &sha384].concat();
        let params = [&[0x30, explicit.len() as u8][..], &explicit].concat();
        let pss = [rsa(10), params].concat();
        assert_eq!(hash_of(&shaped(&pss)), Some(Hash::Sha384));
        let pss_default = [rsa(10), vec![0x30, 0]].concat();
        assert_eq!(hash_of(&shaped(&pss_default)), Some(Hash::Sha256));
        // An RSA algorithm this does not know.
        assert_eq!(hash_of(&shaped(&[rsa(99), null.to_vec()].concat())), None);
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
