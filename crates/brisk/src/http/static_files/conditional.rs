//! Conditional requests (RFC 9110 §13): `If-None-Match` and `If-Modified-Since` against a
//! file's validators, for a `304 Not Modified`. (`If-Range` goes with ranges, in `range`.)
//!
//! These two headers could be parsed with the `headers` crate without allocating
//! (`IfNoneMatch` keeps the header value, `IfModifiedSince` is an `httpdate` date, as here),
//! but each would need an `ETag` decoded from the cached header value for the comparison,
//! and the whole of what it would replace is the dozen lines below; `range` has the reasons
//! the crate was not taken for ranges, which decided the question for both.

use http::header::{self, HeaderMap};
use http::StatusCode;

use super::validators::Validators;

/// `304` when the request's validators match the file, per RFC 9110 §13.2.2:
/// `If-None-Match` first, `If-Modified-Since` only without it.
pub(super) fn check_not_modified(
    headers: &HeaderMap,
    validators: &Validators,
) -> Option<StatusCode> {
    if let Some(value) = headers.get(header::IF_NONE_MATCH) {
        let value = value.to_str().ok()?;
        let etag = validators.etag();
        let matched = value.trim() == "*" || value.split(',').any(|tag| weak_eq(tag.trim(), etag));
        return matched.then_some(StatusCode::NOT_MODIFIED);
    }
    let since = headers.get(header::IF_MODIFIED_SINCE)?.to_str().ok()?;
    let since = httpdate::parse_http_date(since).ok()?;
    (validators.info.modified() <= since).then_some(StatusCode::NOT_MODIFIED)
}

/// Weak comparison: equal opaque tags, ignoring `W/`.
fn weak_eq(a: &str, b: &str) -> bool {
    let a = a.strip_prefix("W/").unwrap_or(a);
    let b = b.strip_prefix("W/").unwrap_or(b);
    a.len() >= 2 && a.starts_with('"') && a.ends_with('"') && a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::static_files::testing::*;

    #[test]
    fn conditional_requests() {
        let dir = TempDir::new();
        dir.write("a.txt", b"hello");
        run(async {
            let files = dir.files();
            let resp = files.serve(&get(&[]), "/a.txt").await;
            let etag = header(&resp, "etag").to_owned();
            let last_modified = header(&resp, "last-modified").to_owned();

            for inm in [
                etag.clone(),
                format!("W/{etag}"),
                format!("\"other\", {etag}"),
                "*".to_owned(),
            ] {
                let resp = files
                    .serve(&get(&[("if-none-match", &inm)]), "/a.txt")
                    .await;
                assert_eq!(resp.status(), StatusCode::NOT_MODIFIED, "{inm}");
                assert_eq!(header(&resp, "etag"), etag);
                assert_eq!(body(resp).await, b"");
            }
            let resp = files
                .serve(&get(&[("if-none-match", "\"other\"")]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::OK);

            let resp = files
                .serve(&get(&[("if-modified-since", &last_modified)]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
            assert_eq!(body(resp).await, b"");
            let resp = files
                .serve(
                    &get(&[("if-modified-since", "Sun, 06 Nov 1994 08:49:37 GMT")]),
                    "/a.txt",
                )
                .await;
            assert_eq!(resp.status(), StatusCode::OK);
            // If-None-Match wins over If-Modified-Since.
            let resp = files
                .serve(
                    &get(&[
                        ("if-none-match", "\"other\""),
                        ("if-modified-since", &last_modified),
                    ]),
                    "/a.txt",
                )
                .await;
            assert_eq!(resp.status(), StatusCode::OK);
            // A garbage date is ignored.
            let resp = files
                .serve(&get(&[("if-modified-since", "yesterday")]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::OK);
        });
    }
}
