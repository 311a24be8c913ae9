//! The app's secret (`App::cluster_secret`) as keys: the cluster bus's messages and the
//! values kept in Redis are sealed with HMAC-SHA256 keys made here, from one rule on its
//! length.

/// The shortest secret accepted, in bytes.
pub(crate) const MIN_SECRET: usize = 16;

/// A secret shorter than [`MIN_SECRET`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("App::cluster_secret is {0} bytes; it must be at least {MIN_SECRET}")]
pub(crate) struct ShortSecret(pub(crate) usize);

/// `Ok` if `secret` is long enough to be a key.
pub(crate) fn check(secret: &[u8]) -> Result<(), ShortSecret> {
    match secret.len() {
        n if n < MIN_SECRET => Err(ShortSecret(n)),
        _ => Ok(()),
    }
}

/// The HMAC-SHA256 key of `secret`, which must be at least [`MIN_SECRET`] bytes.
#[cfg(feature = "redis")]
pub(crate) fn hmac_key(secret: &[u8]) -> Result<hmac::Hmac<sha2::Sha256>, ShortSecret> {
    use hmac::Mac;
    check(secret)?;
    Ok(hmac::Hmac::new_from_slice(secret).expect("HMAC takes a key of any length"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_short_secret_is_refused_and_says_how_short() {
        let why = super::check(b"short").unwrap_err();
        assert_eq!(
            why.to_string(),
            "App::cluster_secret is 5 bytes; it must be at least 16"
        );
        assert!(super::check(b"0123456789abcdef").is_ok());
    }
}
