//! URLs (and libpq `key=value` strings) with their passwords hidden, for error messages and
//! logs.
#![cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "mail"
    )),
    allow(dead_code) // only the alert webhook's `origin_only` is used then
)]

use std::borrow::Cow;
use std::ops::Range;

use crate::conninfo;

/// Parameters whose values are secrets: libpq's `password` and `sslpassword`, and the
/// `pass` of redis-rs's Unix-socket URLs.
const SECRET_PARAMS: [&str; 3] = ["password", "sslpassword", "pass"];

fn is_secret(name: &str) -> bool {
    let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
    SECRET_PARAMS.iter().any(|s| name.eq_ignore_ascii_case(s))
}

/// `url` with its secrets replaced by `***`: the password of a URL's user info and the values
/// of its `password` parameters, or in a libpq `key=value` string the `password` values.
/// Unchanged (and not copied) when it holds none.
///
/// A URL's user info is taken to end at its last `@`, wherever that is, so a password with
/// unescaped `@`, `/`, `?` or `#` in it is hidden too (at worst more is hidden with it).
pub(crate) fn redacted(url: &str) -> Cow<'_, str> {
    let lead = url.len() - url.trim_start().len();
    let mut secrets = match scheme_end(&url[lead..]) {
        Some(start) => url_secrets(url, lead + start),
        // Neither a URL nor surely key=value words (`postgres:/u:pw@h`, `unix:/s?pass=pw`):
        // hide what either reading would call a secret.
        None => {
            let mut both = word_secrets(url);
            both.extend(url_secrets(url, 0));
            both
        }
    };
    if secrets.is_empty() {
        return Cow::Borrowed(url);
    }
    secrets.sort_by_key(|r| r.start);
    let mut out = String::with_capacity(url.len());
    let mut copied = 0;
    for secret in secrets {
        if secret.start < copied {
            // Overlaps the one before: hide the two as one.
            copied = copied.max(secret.end);
            continue;
        }
        out.push_str(&url[copied..secret.start]);
        out.push_str("***");
        copied = secret.end;
    }
    out.push_str(&url[copied..]);
    Cow::Owned(out)
}

/// Where a URL's authority starts: after `scheme://` at its very beginning (a scheme is a
/// letter, then letters, digits, `+`, `-` or `.`).
fn scheme_end(url: &str) -> Option<usize> {
    let colon = url.find("://")?;
    let scheme = &url.as_bytes()[..colon];
    let first_is_letter = scheme.first().is_some_and(u8::is_ascii_alphabetic);
    let rest_fits = scheme
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b));
    (first_is_letter && rest_fits).then_some(colon + 3)
}

/// Where the secrets of a URL whose authority starts at `start` are (not in order).
fn url_secrets(url: &str, start: usize) -> Vec<Range<usize>> {
    let mut secrets = Vec::new();
    if let Some(at) = url[start..].rfind('@').map(|i| start + i) {
        if let Some(colon) = url[start..at].find(':') {
            secrets.push(start + colon + 1..at);
        }
    }
    // Parameters from the first `?` on, also one inside a password: [`redacted`] merges
    // what overlaps.
    let mut pos = url[start..].find('?').map_or(url.len(), |i| start + i);
    while pos < url.len() {
        let end = url[pos + 1..].find('&').map_or(url.len(), |i| pos + 1 + i);
        if let Some((name, _)) = url[pos + 1..end].split_once('=') {
            if is_secret(name) {
                secrets.push(pos + 1 + name.len() + 1..end);
            }
        }
        pos = end;
    }
    secrets
}

/// `url` cut to its scheme and host (no user info, path or query: a webhook's path often
/// holds its token), with `/…` after it when something was cut.
pub(crate) fn origin_only(url: &str) -> Cow<'_, str> {
    let Some(start) = scheme_end(url) else {
        return Cow::Borrowed("(not a URL)");
    };
    // The host starts after the last `@` anywhere: a password may hold `/`, `?` or `#`.
    let host_start = url[start..].rfind('@').map_or(start, |i| start + i + 1);
    let authority_end = url[host_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| host_start + i);
    if host_start == start && authority_end == url.len() {
        return Cow::Borrowed(url);
    }
    Cow::Owned(format!(
        "{}{}/…",
        &url[..start],
        &url[host_start..authority_end]
    ))
}

/// Where the secret values of a libpq `key = value` string are, in order.
/// A value whose quote never closes is hidden whatever its keyword: the rest of the string,
/// a password among it, is inside it.
fn word_secrets(words: &str) -> Vec<Range<usize>> {
    conninfo::words(words)
        .into_iter()
        .filter(|w| {
            let secret = is_secret(&words[w.keyword.clone()]) && !w.value.is_empty();
            secret || w.unterminated
        })
        .map(|w| w.value)
        .collect()
}

/// Each URL of a comma-separated list (Redis Cluster seeds), [`redacted`].
#[cfg_attr(not(feature = "redis"), allow(dead_code))] // the sharded cluster bus needs `redis`
pub(crate) fn redacted_each(urls: &str) -> String {
    let shown: Vec<_> = urls.split(',').map(redacted).collect();
    shown.join(",")
}

#[cfg(test)]
mod tests {
    use super::{origin_only, redacted, redacted_each};

    #[test]
    fn hides_the_password_of_the_user_info() {
        assert_eq!(
            redacted("postgres://brisk:s3cret@db:5432/app"),
            "postgres://brisk:***@db:5432/app"
        );
        assert_eq!(
            redacted("redis://:s3cret@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redacted("mysql://root:p@ss/w:rd@127.0.0.1/db?x=1"),
            "mysql://root:***@127.0.0.1/db?x=1"
        );
    }

    #[test]
    fn hides_password_parameters() {
        assert_eq!(
            redacted("postgres://db/app?user=brisk&Password=s3cret&sslmode=require"),
            "postgres://db/app?user=brisk&Password=***&sslmode=require"
        );
        assert_eq!(
            redacted("postgres://u:a@h1,h2/app?sslpassword=k"),
            "postgres://u:***@h1,h2/app?sslpassword=***"
        );
    }

    #[test]
    fn hides_passwords_with_unescaped_separators_in_them() {
        assert_eq!(redacted("postgres://u:ab#cd@h/db"), "postgres://u:***@h/db");
        assert_eq!(redacted("redis://:a?b@h:6379"), "redis://:***@h:6379");
        assert_eq!(
            redacted("postgres://h/db?password=ab#cd&x=1"),
            "postgres://h/db?password=***&x=1"
        );
        assert_eq!(
            redacted("postgres://h/db?pass%77ord=s3cret"),
            "postgres://h/db?pass%77ord=***"
        );
        assert_eq!(
            redacted("redis+unix:///run/redis.sock?db=1&pass=s3cret"),
            "redis+unix:///run/redis.sock?db=1&pass=***"
        );
    }

    #[test]
    fn an_at_sign_in_the_query_hides_more_but_never_less() {
        assert_eq!(
            redacted("postgres://h:5432/db?user=a@b&password=s3cret"),
            "postgres://h:***@b&password=***"
        );
        assert_eq!(
            redacted("postgres://h/db?password=s3cret&x=a:b@c"),
            "postgres://h/db?password=***&x=a:***@c"
        );
    }

    #[test]
    fn a_key_value_string_with_a_url_in_a_value_is_read_as_words() {
        assert_eq!(
            redacted("host=h password=s3cret options=http://x"),
            "host=h password=*** options=http://x"
        );
    }

    #[test]
    fn strings_that_are_neither_urls_nor_words_hide_both_readings() {
        assert_eq!(
            redacted("  postgres://u:s3cret@h/db"),
            "  postgres://u:***@h/db"
        );
        assert_eq!(redacted("postgres:/u:s3cret@h"), "postgres:***@h");
        assert_eq!(
            redacted("unix:/run/r.sock?pass=s3cret"),
            "unix:/run/r.sock?pass=***"
        );
        assert_eq!(redacted("host='h password=s3cret"), "host=***");
        assert_eq!(
            redacted("host=h bogus password=s3cret"),
            "host=h bogus password=***"
        );
        assert_eq!(
            redacted("host=h\u{0B}password=s3cret\u{0B}x"),
            "host=h\u{0B}password=***\u{0B}x"
        );
    }

    #[test]
    fn origin_only_keeps_scheme_and_host() {
        assert_eq!(origin_only("https://user:pa/ss@h/x"), "https://h/…");
        assert_eq!(
            origin_only("https://hooks.example.com/services/T0/B0/s3cret"),
            "https://hooks.example.com/…"
        );
        assert_eq!(
            origin_only("http://user:pw@127.0.0.1:9/hook?token=t"),
            "http://127.0.0.1:9/…"
        );
        assert_eq!(origin_only("http://127.0.0.1:9"), "http://127.0.0.1:9");
        assert_eq!(origin_only("hooks.example.com/x"), "(not a URL)");
    }

    #[test]
    fn hides_passwords_of_key_value_strings() {
        assert_eq!(
            redacted("host=db user=brisk password=s3cret dbname=app"),
            "host=db user=brisk password=*** dbname=app"
        );
        assert_eq!(
            redacted("host=db password = 'a b\\' c' sslpassword=k"),
            "host=db password = *** sslpassword=***"
        );
        assert_eq!(redacted("password=x\\ y port=1"), "password=*** port=1");
        assert_eq!(redacted("host=db password="), "host=db password=");
        assert_eq!(
            redacted("host=db password='unterminated"),
            "host=db password=***"
        );
    }

    #[test]
    fn hides_each_password_of_a_list() {
        assert_eq!(
            redacted_each("redis://:a@n1:7000, redis://:c@n2:7001,redis://u:b@n3:7002"),
            "redis://:***@n1:7000, redis://:***@n2:7001,redis://u:***@n3:7002"
        );
    }

    #[test]
    fn leaves_urls_without_secrets_alone() {
        for url in [
            "postgres://brisk@db/app?sslmode=disable",
            "sqlite:/var/run/app.db",
            "redis://127.0.0.1:6379",
            "postgres://db/app?passwordless=1",
        ] {
            assert_eq!(redacted(url), url);
        }
    }
}
