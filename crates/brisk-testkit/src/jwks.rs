//! [`SigningKey`]: an identity provider's ES256 key for tests of token checks against a JWKS
//! document: the JWK it publishes and the tokens it signs.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

/// A fresh P-256 key named `kid`.
pub struct SigningKey {
    kid: String,
    pair: rcgen::KeyPair,
    encoding: EncodingKey,
}

impl SigningKey {
    /// A new key with this `kid`.
    pub fn new(kid: &str) -> SigningKey {
        let pair = rcgen::KeyPair::generate().expect("a P-256 key");
        let encoding = EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).expect("PEM");
        SigningKey {
            kid: kid.to_string(),
            pair,
            encoding,
        }
    }

    /// Its public part as a JWK (`kty` EC, `crv` P-256, `kid`, `x`, `y`).
    pub fn jwk(&self) -> Value {
        let point = self.pair.public_key_raw(); // 0x04 || X || Y
        json!({
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        })
    }

    /// `claims` signed with ES256, the header naming this key's `kid`.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("signed")
    }
}

/// A JWKS document listing `keys`.
pub fn jwks(keys: &[&SigningKey]) -> String {
    json!({ "keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>() }).to_string()
}
