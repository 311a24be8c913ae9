//! [`Jwt`]: checks the JSON Web Token a client presents when it connects (feature `jwt`, on
//! the `jsonwebtoken` crate): its signature (HS256 with a shared secret, RS256 or ES256 with a
//! public key, or the key a JWKS document names by `kid`), its times (`exp` required, `nbf`
//! if present, with a leeway) and, when asked, its audience and issuer. A token that fails
//! says why ([`JwtError`]), with the HTTP status and the WebSocket close code that answer it.
//!
//! ```
//! use brisk::jwt::Jwt;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Claims { sub: String }
//!
//! let jwt = Jwt::hs256(b"a secret shared with the token issuer")
//!     .unwrap()
//!     .issuer("https://auth.example");
//! let headers = http::HeaderMap::new(); // a request's
//! let outcome = match brisk::jwt::bearer(&headers) {
//!     Some(token) => jwt.verify::<Claims>(token).map(|c| c.sub),
//!     None => Err(brisk::jwt::JwtError::Missing),
//! };
//! assert_eq!(outcome.unwrap_err().http_status(), 401);
//! ```
//!
//! The algorithm a token names must be its key's: an HS256 token is never checked against an
//! RSA public key used as a secret. Keys from a JWKS document need a `kid`; a token that
//! names a `kid` is checked against that key, or, when no key has it, against a key given
//! without one (identity providers set `kid` on every token); a token without `kid` against
//! the first key of its algorithm. With `.audience(..)` or `.issuer(..)`, a token must carry
//! that claim: one without it is refused, not let through.

use std::path::Path;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{errors::ErrorKind, Algorithm, DecodingKey, Validation};
use serde::de::DeserializeOwned;

/// The shortest HS256 secret [`Jwt::hs256`] takes, in bytes (the hash's own size).
pub const MIN_SECRET_LEN: usize = 32;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// No token came with the request.
    #[error("no token")]
    Missing,
    /// Not a JWT (three base64url parts, a JSON header and claims), or claims of the wrong
    /// shape.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// The signature does not match the key.
    #[error("the token's signature is not valid")]
    BadSignature,
    /// Past its `exp`.
    #[error("the token has expired")]
    Expired,
    /// Before its `nbf`.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// Its `aud` is not the one expected.
    #[error("the token is for another audience")]
    WrongAudience,
    /// Its `iss` is not the one expected.
    #[error("the token comes from another issuer")]
    WrongIssuer,
    /// No key for its `kid`, or for its algorithm.
    #[error("no key for this token: {0}")]
    UnknownKey(String),
    /// The keys given could not be read (a bad PEM, a JWKS without `kid`).
    #[error("bad JWT keys: {0}")]
    Keys(String),
}

impl JwtError {
    /// The HTTP status that answers it: 401, or 500 when the server's keys are at fault.
    pub fn http_status(&self) -> u16 {
        match self {
            JwtError::Keys(_) => 500,
            _ => 401,
        }
    }

    /// The WebSocket close code that answers it on an open connection (a token refreshed
    /// without reconnecting): 4002 for an expired token (get a new one and reconnect), 4001
    /// for every other refusal, 1011 when the server's keys are at fault.
    pub fn close_code(&self) -> u16 {
        match self {
            JwtError::Expired => 4002,
            JwtError::Keys(_) => 1011,
            _ => 4001,
        }
    }
}

/// One key a token may be signed with.
#[derive(Clone)]
struct Key {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

/// Checks tokens against a set of keys and the claims an app expects (see the module docs).
/// Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct Jwt {
    keys: Vec<Key>,
    audience: Option<String>,
    issuer: Option<String>,
    leeway: u64,
}

impl std::fmt::Debug for Jwt {
    /// The keys' ids and algorithms, never their material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<_> = self
            .keys
            .iter()
            .map(|k| (k.kid.as_deref(), k.algorithm))
            .collect();
        f.debug_struct("Jwt")
            .field("keys", &keys)
            .field("audience", &self.audience)
            .field("issuer", &self.issuer)
            .field("leeway", &self.leeway)
            .finish()
    }
}

impl Jwt {
    fn with(keys: Vec<Key>) -> Self {
        Jwt {
            keys,
            audience: None,
            issuer: None,
            leeway: 30,
        }
    }

    /// Tokens signed with HS256 and `secret`, of at least [`MIN_SECRET_LEN`] bytes (a shorter
    /// one, an empty file read as a secret, is refused: tokens could be forged).
    pub fn hs256(secret: &[u8]) -> Result<Self, JwtError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(JwtError::Keys(format!(
                "an HS256 secret of {} bytes; it needs at least {MIN_SECRET_LEN}",
                secret.len()
            )));
        }
        Ok(Jwt::with(vec![Key {
            kid: None,
            algorithm: Algorithm::HS256,
            key: DecodingKey::from_secret(secret),
        }]))
    }

    /// Tokens signed with RS256 by the private key whose public key is `pem` (PKCS#1 or
    /// SubjectPublicKeyInfo PEM).
    pub fn rs256_pem(pem: &[u8]) -> Result<Self, JwtError> {
        let key = DecodingKey::from_rsa_pem(pem).map_err(|e| JwtError::Keys(e.to_string()))?;
        Ok(Jwt::with(vec![Key {
            kid: None,
            algorithm: Algorithm::RS256,
            key,
        }]))
    }

    /// Tokens signed with ES256 (P-256) by the private key whose public key is `pem`.
    pub fn es256_pem(pem: &[u8]) -> Result<Self, JwtError> {
        let key = DecodingKey::from_ec_pem(pem).map_err(|e| JwtError::Keys(e.to_string()))?;
        Ok(Jwt::with(vec![Key {
            kid: None,
            algorithm: Algorithm::ES256,
            key,
        }]))
    }

    /// Tokens signed with any key of a JWKS document (`{"keys": [...]}`: RSA keys for RS256,
    /// P-256 keys for ES256, `oct` keys for HS256), each named by its `kid`.
    pub fn jwks(json: &str) -> Result<Self, JwtError> {
        let set: JwkSet = serde_json::from_str(json)
            .map_err(|e| JwtError::Keys(format!("not a JWKS document: {e}")))?;
        let mut keys = Vec::with_capacity(set.keys.len());
        for jwk in &set.keys {
            let kid = jwk.common.key_id.clone().ok_or_else(|| {
                JwtError::Keys("a JWKS key without a kid: tokens could not name it".into())
            })?;
            let algorithm = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Algorithm::RS256,
                AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
                    Algorithm::ES256
                }
                AlgorithmParameters::OctetKey(oct) => {
                    // base64url: 4 characters per 3 bytes, padding aside.
                    let bytes = oct.value.trim_end_matches('=').len() * 3 / 4;
                    if bytes < MIN_SECRET_LEN {
                        return Err(JwtError::Keys(format!(
                            "key {kid}: an oct key of {bytes} bytes; HS256 keys need at least \
                             {MIN_SECRET_LEN}"
                        )));
                    }
                    Algorithm::HS256
                }
                _ => {
                    return Err(JwtError::Keys(format!(
                        "key {kid}: only RSA, P-256 and oct keys are taken"
                    )))
                }
            };
            let key = DecodingKey::from_jwk(jwk)
                .map_err(|e| JwtError::Keys(format!("key {kid}: {e}")))?;
            keys.push(Key {
                kid: Some(kid),
                algorithm,
                key,
            });
        }
        if keys.is_empty() {
            return Err(JwtError::Keys("the JWKS document has no keys".into()));
        }
        Ok(Jwt::with(keys))
    }

    /// [`jwks`](Self::jwks) from a file.
    pub fn jwks_file(path: impl AsRef<Path>) -> Result<Self, JwtError> {
        let path = path.as_ref();
        let json = std::fs::read_to_string(path)
            .map_err(|e| JwtError::Keys(format!("{}: {e}", path.display())))?;
        Jwt::jwks(&json)
    }

    /// Tokens must carry `audience` in their `aud` (a string or a list).
    pub fn audience(mut self, audience: &str) -> Self {
        self.audience = Some(audience.to_string());
        self
    }

    /// Tokens must carry `issuer` as their `iss`.
    pub fn issuer(mut self, issuer: &str) -> Self {
        self.issuer = Some(issuer.to_string());
        self
    }

    /// How many seconds of clock difference `exp` and `nbf` allow (default 30).
    pub fn leeway(mut self, seconds: u64) -> Self {
        self.leeway = seconds;
        self
    }

    /// The claims of `token` if it passes every check, read as `C` (a struct of the claims
    /// the app needs; the registered ones it does not name are checked all the same).
    pub fn verify<C: DeserializeOwned>(&self, token: &str) -> Result<C, JwtError> {
        let header = jsonwebtoken::decode_header(token).map_err(refusal)?;
        let named = header
            .kid
            .as_ref()
            .and_then(|kid| self.keys.iter().find(|k| k.kid.as_ref() == Some(kid)));
        let key = match (named, &header.kid) {
            (Some(key), _) => key,
            // A kid no key has: a key given without one, of the token's algorithm.
            (None, Some(kid)) => self
                .keys
                .iter()
                .find(|k| k.kid.is_none() && k.algorithm == header.alg)
                .ok_or_else(|| JwtError::UnknownKey(format!("no key has kid {kid:?}")))?,
            (None, None) => self
                .keys
                .iter()
                .find(|k| k.algorithm == header.alg)
                .ok_or_else(|| JwtError::UnknownKey(format!("no {:?} key", header.alg)))?,
        };
        if key.algorithm != header.alg {
            return Err(JwtError::UnknownKey(format!(
                "the token says {:?}, its key is {:?}",
                header.alg, key.algorithm
            )));
        }
        let mut validation = Validation::new(key.algorithm);
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        // jsonwebtoken compares aud and iss only when a token has them: asked for, they are
        // required too.
        match &self.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                validation.required_spec_claims.insert("aud".into());
            }
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &self.issuer {
            validation.set_issuer(&[iss]);
            validation.required_spec_claims.insert("iss".into());
        }
        jsonwebtoken::decode::<C>(token, &key.key, &validation)
            .map(|data| data.claims)
            .map_err(refusal)
    }
}

/// Signs `claims` with HS256 and `secret` (at least [`MIN_SECRET_LEN`] bytes): how an app
/// that checks tokens with [`Jwt::hs256`] issues them, e.g. a connect token for
/// `brisk::channels` (claims `sub` and `exp`).
///
/// ```
/// # fn main() -> Result<(), brisk::jwt::JwtError> {
/// use brisk::jwt::{hs256_token, Jwt};
/// let secret = b"a secret of at least thirty-two bytes";
/// let claims = serde_json::json!({ "sub": "alice", "exp": 4_000_000_000u64 });
/// let token = hs256_token(secret, &claims)?;
/// let back: serde_json::Value = Jwt::hs256(secret)?.verify(&token)?;
/// assert_eq!(back["sub"], "alice");
/// # Ok(()) }
/// ```
pub fn hs256_token<C: serde::Serialize>(secret: &[u8], claims: &C) -> Result<String, JwtError> {
    if secret.len() < MIN_SECRET_LEN {
        return Err(JwtError::Keys(format!(
            "an HS256 secret has at least {MIN_SECRET_LEN} bytes"
        )));
    }
    let key = jsonwebtoken::EncodingKey::from_secret(secret);
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), claims, &key)
        .map_err(|e| JwtError::Malformed(e.to_string()))
}

/// The token of an `Authorization: Bearer TOKEN` header, if there is one.
pub fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

/// What a `jsonwebtoken` error means for the client.
fn refusal(e: jsonwebtoken::errors::Error) -> JwtError {
    match e.kind() {
        ErrorKind::InvalidSignature => JwtError::BadSignature,
        ErrorKind::ExpiredSignature => JwtError::Expired,
        ErrorKind::ImmatureSignature => JwtError::NotYetValid,
        ErrorKind::InvalidAudience => JwtError::WrongAudience,
        ErrorKind::InvalidIssuer => JwtError::WrongIssuer,
        ErrorKind::MissingRequiredClaim(claim) if claim == "exp" => {
            JwtError::Malformed("no exp claim: tokens must say when they expire".into())
        }
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => JwtError::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) if claim == "iss" => JwtError::WrongIssuer,
        ErrorKind::MissingRequiredClaim(claim) => JwtError::Malformed(format!("no {claim} claim")),
        ErrorKind::InvalidAlgorithm => JwtError::UnknownKey("another algorithm".into()),
        _ => JwtError::Malformed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct Claims {
        sub: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        exp: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        nbf: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        aud: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        iss: Option<String>,
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn claims() -> Claims {
        Claims {
            sub: "ada".into(),
            exp: Some(now() + 600),
            nbf: None,
            aud: Some("chat".into()),
            iss: Some("https://auth.example".into()),
        }
    }

    fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Claims) -> String {
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_string);
        encode(&header, claims, key).unwrap()
    }

    fn base64url(bytes: &[u8]) -> String {
        const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    #[test]
    fn hs256_tokens_are_checked_for_signature_times_audience_and_issuer() {
        let secret = b"a secret shared with the token issuer";
        let key = EncodingKey::from_secret(secret);
        let jwt = Jwt::hs256(secret)
            .unwrap()
            .audience("chat")
            .issuer("https://auth.example");
        let good = sign(Algorithm::HS256, None, &key, &claims());
        assert_eq!(jwt.verify::<Claims>(&good).unwrap(), claims());

        let other = sign(
            Algorithm::HS256,
            None,
            &EncodingKey::from_secret(b"x"),
            &claims(),
        );
        assert_eq!(jwt.verify::<Claims>(&other), Err(JwtError::BadSignature));
        let expired = Claims {
            exp: Some(now() - 120),
            ..claims()
        };
        let e = jwt
            .verify::<Claims>(&sign(Algorithm::HS256, None, &key, &expired))
            .unwrap_err();
        assert_eq!(
            (e.clone(), e.http_status(), e.close_code()),
            (JwtError::Expired, 401, 4002)
        );
        // Within the leeway an expired token still passes.
        let just = Claims {
            exp: Some(now() - 5),
            ..claims()
        };
        assert!(jwt
            .verify::<Claims>(&sign(Algorithm::HS256, None, &key, &just))
            .is_ok());
        let early = Claims {
            nbf: Some(now() + 600),
            ..claims()
        };
        let early = sign(Algorithm::HS256, None, &key, &early);
        assert_eq!(jwt.verify::<Claims>(&early), Err(JwtError::NotYetValid));
        let elsewhere = Claims {
            aud: Some("billing".into()),
            ..claims()
        };
        let elsewhere = sign(Algorithm::HS256, None, &key, &elsewhere);
        assert_eq!(
            jwt.verify::<Claims>(&elsewhere),
            Err(JwtError::WrongAudience)
        );
        let forged = Claims {
            iss: Some("https://evil.example".into()),
            ..claims()
        };
        let forged = sign(Algorithm::HS256, None, &key, &forged);
        assert_eq!(jwt.verify::<Claims>(&forged), Err(JwtError::WrongIssuer));
        let forever = Claims {
            exp: None,
            ..claims()
        };
        let forever = sign(Algorithm::HS256, None, &key, &forever);
        assert!(
            matches!(jwt.verify::<Claims>(&forever), Err(JwtError::Malformed(m)) if m.contains("exp"))
        );
        for junk in ["", "abc", "a.b.c", "eyJhbGciOiJIUzI1NiJ9.e30"] {
            let e = jwt.verify::<Claims>(junk).unwrap_err();
            assert!(matches!(e, JwtError::Malformed(_)), "{junk:?}: {e:?}");
            assert_eq!(e.close_code(), 4001);
        }
        // Without an audience or issuer asked for, neither is checked.
        assert!(Jwt::hs256(secret)
            .unwrap()
            .verify::<Claims>(&elsewhere)
            .is_ok());
        // Asked for, aud and iss must be there: a token without them is refused.
        let no_aud = Claims {
            aud: None,
            ..claims()
        };
        let no_aud = sign(Algorithm::HS256, None, &key, &no_aud);
        assert_eq!(jwt.verify::<Claims>(&no_aud), Err(JwtError::WrongAudience));
        let no_iss = Claims {
            iss: None,
            ..claims()
        };
        let no_iss = sign(Algorithm::HS256, None, &key, &no_iss);
        assert_eq!(jwt.verify::<Claims>(&no_iss), Err(JwtError::WrongIssuer));
        // A kid no key has is checked against the key given without one.
        let with_kid = sign(Algorithm::HS256, Some("2026-11"), &key, &claims());
        assert!(jwt.verify::<Claims>(&with_kid).is_ok());
        // Secrets too short to sign with are refused.
        assert!(matches!(Jwt::hs256(b""), Err(JwtError::Keys(_))));
        assert!(matches!(Jwt::hs256(b"short"), Err(JwtError::Keys(_))));
    }

    #[test]
    fn es256_and_rs256_tokens_need_their_own_algorithm() {
        let ec = rcgen::KeyPair::generate().unwrap();
        let jwt = Jwt::es256_pem(ec.public_key_pem().as_bytes()).unwrap();
        let signing = EncodingKey::from_ec_pem(ec.serialize_pem().as_bytes()).unwrap();
        let token = sign(Algorithm::ES256, None, &signing, &claims());
        assert_eq!(jwt.verify::<Claims>(&token).unwrap().sub, "ada");
        let stranger = rcgen::KeyPair::generate().unwrap();
        let stranger = EncodingKey::from_ec_pem(stranger.serialize_pem().as_bytes()).unwrap();
        let token = sign(Algorithm::ES256, None, &stranger, &claims());
        assert_eq!(jwt.verify::<Claims>(&token), Err(JwtError::BadSignature));
        // An HS256 token "signed" with the public key as a secret is not checked at all.
        let confused = EncodingKey::from_secret(ec.public_key_pem().as_bytes());
        let token = sign(Algorithm::HS256, None, &confused, &claims());
        assert!(matches!(
            jwt.verify::<Claims>(&token),
            Err(JwtError::UnknownKey(_))
        ));
        assert!(matches!(
            Jwt::es256_pem(b"not a key"),
            Err(JwtError::Keys(_))
        ));

        // RS256 with a key openssl makes (rcgen's ring backend makes no RSA keys).
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("rsa.pem");
        let public = dir.path().join("rsa.pub.pem");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            private.to_str().unwrap(),
        ]);
        run(&[
            "pkey",
            "-in",
            private.to_str().unwrap(),
            "-pubout",
            "-out",
            public.to_str().unwrap(),
        ]);
        let jwt = Jwt::rs256_pem(&std::fs::read(&public).unwrap()).unwrap();
        let signing = EncodingKey::from_rsa_pem(&std::fs::read(&private).unwrap()).unwrap();
        let token = sign(Algorithm::RS256, None, &signing, &claims());
        assert_eq!(jwt.verify::<Claims>(&token).unwrap().sub, "ada");
        let mut tampered = token.clone();
        tampered.insert(tampered.find('.').unwrap() + 1, 'x');
        assert!(jwt.verify::<Claims>(&tampered).is_err());
    }

    #[test]
    fn a_jwks_document_names_its_keys_by_kid() {
        let ec = rcgen::KeyPair::generate().unwrap();
        let point = ec.public_key_raw(); // 0x04 || X || Y
        let secret = b"the oct key's secret bytes, 32 or more";
        let jwks = format!(
            r#"{{"keys": [
                {{"kty": "EC", "crv": "P-256", "kid": "ec-1", "x": "{}", "y": "{}"}},
                {{"kty": "oct", "kid": "hs-1", "k": "{}"}}
            ]}}"#,
            base64url(&point[1..33]),
            base64url(&point[33..65]),
            base64url(secret)
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jwks.json");
        std::fs::write(&file, &jwks).unwrap();
        let jwt = Jwt::jwks_file(&file).unwrap();
        let ec_key = EncodingKey::from_ec_pem(ec.serialize_pem().as_bytes()).unwrap();
        let hs_key = EncodingKey::from_secret(secret);
        let by_ec = sign(Algorithm::ES256, Some("ec-1"), &ec_key, &claims());
        let by_hs = sign(Algorithm::HS256, Some("hs-1"), &hs_key, &claims());
        assert_eq!(jwt.verify::<Claims>(&by_ec).unwrap().sub, "ada");
        assert_eq!(jwt.verify::<Claims>(&by_hs).unwrap().sub, "ada");
        // A kid the document lacks; the right kid with the other key's algorithm.
        let unknown = sign(Algorithm::HS256, Some("hs-2"), &hs_key, &claims());
        assert!(
            matches!(jwt.verify::<Claims>(&unknown), Err(JwtError::UnknownKey(m)) if m.contains("hs-2"))
        );
        let crossed = sign(Algorithm::HS256, Some("ec-1"), &hs_key, &claims());
        assert!(matches!(
            jwt.verify::<Claims>(&crossed),
            Err(JwtError::UnknownKey(_))
        ));
        // Documents that cannot be used say why.
        let no_kid = r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#;
        assert!(matches!(Jwt::jwks(no_kid), Err(JwtError::Keys(m)) if m.contains("kid")));
        let short = r#"{"keys": [{"kty": "oct", "kid": "k", "k": "c2VjcmV0"}]}"#;
        assert!(
            matches!(Jwt::jwks(short), Err(JwtError::Keys(m)) if m.contains("6 bytes")),
            "a 6-byte HS256 key taken"
        );
        assert!(matches!(
            Jwt::jwks(r#"{"keys": []}"#),
            Err(JwtError::Keys(_))
        ));
        assert!(matches!(Jwt::jwks("{"), Err(JwtError::Keys(_))));
        let e = Jwt::jwks_file(dir.path().join("missing.json")).unwrap_err();
        assert_eq!(e.http_status(), 500);
    }

    #[test]
    fn a_bearer_token_is_read_from_the_authorization_header() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert(
            http::header::AUTHORIZATION,
            "Bearer abc.def.ghi".parse().unwrap(),
        );
        assert_eq!(bearer(&headers), Some("abc.def.ghi"));
        headers.insert(http::header::AUTHORIZATION, "bearer  xyz ".parse().unwrap());
        assert_eq!(bearer(&headers), Some("xyz"));
        headers.insert(http::header::AUTHORIZATION, "Basic YTpi".parse().unwrap());
        assert_eq!(bearer(&headers), None);
        headers.insert(http::header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer(&headers), None);
    }
}
