//! [`PostgresOptions`]: how a worker uses a PostgreSQL database, and what Brisk reads from a
//! URL itself (libpq's `sslrootcert`, and the `sslmode`s that check certificates) before
//! tokio-postgres's parser takes the rest.

use std::path::PathBuf;
use std::time::Duration;

use super::postgres_tls::Verify;
use crate::conninfo;

/// How a worker uses a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Connections per worker. Default 1: queries pipeline on it.
    pub pool_size: usize,
    /// Queries in flight on one connection before more wait for a free place.
    pub max_pipeline: usize,
    /// How long a query waits for a place before failing with [`DbError::PoolTimeout`](super::DbError::PoolTimeout).
    pub acquire_timeout: Duration,
    /// How long a query may run before it is cancelled ([`DbError::Timeout`](super::DbError::Timeout)).
    pub query_timeout: Duration,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// The longest pause between reconnection attempts.
    pub max_backoff: Duration,
    /// A PEM file of root certificates: TLS becomes required, and the server's certificate
    /// must chain to one of them and name the host (libpq's `verify-full`; with
    /// `sslmode=verify-ca` in the URL the host name is not checked). `sslrootcert=PATH` in
    /// the URL sets it too. `system` takes the system's root certificates (`SSL_CERT_FILE`
    /// or `SSL_CERT_DIR` if set, else the ca-certificates bundle), for a managed server
    /// whose certificate a public CA signed. Without it, `sslmode=prefer` (the default) and
    /// `require` encrypt without checking the certificate, as libpq does.
    pub tls_root_certs: Option<PathBuf>,
    /// Statements kept prepared per connection, by their SQL. Past it, preparing a new one
    /// closes the least recently used on the server, so SQL built per request cannot grow
    /// the worker's and the server's memory without bound.
    pub statement_cache: usize,
    /// Connections per worker that transactions hold, one each, beside the shared ones:
    /// opened as transactions need them and kept for the next. A transaction that finds them
    /// all taken waits up to `acquire_timeout` ([`DbError::PoolTimeout`](super::DbError::PoolTimeout)). Default 4.
    pub max_transactions: usize,
    /// The most bytes one answer (its rows and the messages around them, as the server
    /// sends them) may take; default 128 MiB. A larger answer is read to its end without
    /// being kept and fails with [`DbError::Refused`](super::DbError::Refused) (the connection goes on); a single
    /// message announcing more ends the connection before any of it is buffered. A broken or
    /// hostile server cannot make a worker allocate more.
    pub max_result_bytes: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            pool_size: 1,
            max_pipeline: 256,
            acquire_timeout: Duration::from_secs(2),
            query_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            max_backoff: Duration::from_secs(1),
            tls_root_certs: None,
            statement_cache: 256,
            max_transactions: 4,
            max_result_bytes: 128 << 20,
        }
    }
}

/// What Brisk reads from a URL itself because the tokio-postgres parser does not take it:
/// libpq's `sslrootcert`, and `sslmode` when it is `verify-ca` or `verify-full`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct OwnParams {
    pub(super) root_certs: Option<PathBuf>,
    pub(super) verify: Option<Verify>,
}

/// `url` without the parameters of [`OwnParams`], and their values: in a URL's query
/// (`?sslmode=verify-full&sslrootcert=ca.pem`) or among `key=value` words.
pub(super) fn take_own_params(url: &str) -> (String, OwnParams) {
    let mut own = OwnParams::default();
    // Takes the pair if it is one of ours.
    let mut take = |keyword: &str, value: &str| {
        match (keyword, value) {
            ("sslrootcert", path) => own.root_certs = Some(PathBuf::from(path)),
            ("sslmode", "verify-ca") => own.verify = Some(Verify::Chain),
            ("sslmode", "verify-full") => own.verify = Some(Verify::ChainAndHost),
            _ => return false,
        }
        true
    };
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        let kept: Vec<&str> = conninfo::words(url)
            .into_iter()
            .filter(|w| {
                let value = conninfo::unquoted(&url[w.value.clone()]);
                !take(&url[w.keyword.clone()], &value)
            })
            .map(|w| &url[w.whole])
            .collect();
        return (kept.join(" "), own);
    }
    // The query starts at the first `?` after the first `@`, if any: tokio-postgres reads the
    // credentials up to the first `@`, so a `?` before it is in the password.
    let credentials_end = url.find('@').unwrap_or(0);
    let Some((head, query)) = url[credentials_end..]
        .find('?')
        .map(|i| (&url[..credentials_end + i], &url[credentials_end + i + 1..]))
    else {
        return (url.to_owned(), own);
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| match p.split_once('=') {
            Some((name, value)) => {
                let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
                !take(name, &value)
            }
            None => true,
        })
        .collect();
    if kept.is_empty() {
        // The query held nothing else: no `?` left hanging.
        return (head.to_owned(), own);
    }
    (format!("{head}?{}", kept.join("&")), own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslrootcert_and_the_verify_modes_are_taken_out_of_urls_and_key_value_strings() {
        let roots = |path: &str| OwnParams {
            root_certs: Some(PathBuf::from(path)),
            verify: None,
        };
        let url = "postgres://u@h/db?sslmode=require&sslrootcert=%2Ftmp%2Fca.pem&x=1";
        assert_eq!(
            take_own_params(url),
            (
                "postgres://u@h/db?sslmode=require&x=1".to_owned(),
                roots("/tmp/ca.pem")
            )
        );
        assert_eq!(
            take_own_params("postgresql://u@h/db?sslrootcert=/a.pem"),
            ("postgresql://u@h/db".to_owned(), roots("/a.pem"))
        );
        assert_eq!(
            take_own_params("host=h sslrootcert=/a.pem user=u"),
            ("host=h user=u".to_owned(), roots("/a.pem"))
        );
        assert_eq!(
            take_own_params("postgres://u@h/db?sslmode=verify-full&sslrootcert=/a.pem"),
            (
                "postgres://u@h/db".to_owned(),
                OwnParams {
                    root_certs: Some(PathBuf::from("/a.pem")),
                    verify: Some(Verify::ChainAndHost)
                }
            )
        );
        assert_eq!(
            take_own_params("host=h sslmode=verify-ca"),
            (
                "host=h".to_owned(),
                OwnParams {
                    root_certs: None,
                    verify: Some(Verify::Chain)
                }
            )
        );
        // A quoted value with spaces stays whole, and a quoted path is read unquoted.
        assert_eq!(
            take_own_params(r"host=h password='a sslrootcert=b' sslrootcert='/x y.pem'"),
            (
                "host=h password='a sslrootcert=b'".to_owned(),
                roots("/x y.pem")
            )
        );
        // A `?` in the password is not the query's.
        assert_eq!(
            take_own_params("postgres://u:p?w@h/db?sslmode=verify-full&sslrootcert=/a.pem"),
            (
                "postgres://u:p?w@h/db".to_owned(),
                OwnParams {
                    root_certs: Some(PathBuf::from("/a.pem")),
                    verify: Some(Verify::ChainAndHost)
                }
            )
        );
        for plain in [
            "postgres://u@h/db",
            "postgres://u@h/db?sslmode=disable",
            "postgres://u:p?sslrootcert=x@h/db",
            "host=h sslmode=require",
        ] {
            assert_eq!(
                take_own_params(plain),
                (plain.to_owned(), OwnParams::default())
            );
        }
    }
}
