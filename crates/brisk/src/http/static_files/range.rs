//! Byte ranges (RFC 9110 §14): one `Range` of `bytes` honoured (`206`), an unsatisfiable one
//! refused (`416`), several or a malformed one ignored (the whole file, `200`), and
//! `If-Range` checked against the current validators.
//!
//! # Why not the `headers` crate
//!
//! `headers` (hyperium) was weighed for this parsing and not taken. Its `Range` as released
//! (0.4) keeps the header value and iterates the specs without allocating, which would fit
//! the hot path, but it decides less than this module must: it skips a malformed spec where
//! this module ignores the whole header, passes on specs that start past the end for the
//! caller to refuse, drops a suffix longer than the file (`bytes=-1000` of a 36-byte file,
//! which RFC 9110 §14.1.2 says is the whole file, as `check_ranges` below tests) and turns
//! `bytes=-0` into an empty range rather than a `416`. The rewrite in its repository parses into a `Vec` of specs, an allocation per
//! ranged request. Either way it would replace a few dozen lines of splitting and digit
//! parsing and leave the policy (one range honoured, several ignored, `If-Range` compared
//! strongly) here, at the price of a dependency; `conditional` says the same for the
//! validators.

use http::header::{self, HeaderMap};

use super::validators::Validators;

pub(super) enum RangeDecision {
    Full,
    /// Inclusive byte positions, `start <= end < len`.
    Partial(u64, u64),
    Unsatisfiable,
}

/// What to send given `Range` and `If-Range`.
pub(super) fn requested_range(headers: &HeaderMap, validators: &Validators) -> RangeDecision {
    let info = &validators.info;
    let Some(range) = headers.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return RangeDecision::Full;
    };
    if let Some(if_range) = headers.get(header::IF_RANGE) {
        let Ok(if_range) = if_range.to_str() else {
            return RangeDecision::Full;
        };
        let if_range = if_range.trim();
        let current = if if_range.starts_with('"') || if_range.starts_with("W/") {
            // Strong comparison: a weak tag never matches.
            if_range == validators.etag()
        } else {
            httpdate::parse_http_date(if_range).is_ok_and(|date| date == info.modified())
        };
        if !current {
            return RangeDecision::Full;
        }
    }
    parse_range(range, info.len)
}

/// Parses a `Range` header for a representation of `len` bytes. Malformed
/// headers and several ranges mean "send it all".
fn parse_range(value: &str, len: u64) -> RangeDecision {
    let value = value.trim();
    let Some((unit, specs)) = value.split_once('=') else {
        return RangeDecision::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return RangeDecision::Full;
    }
    let mut specs = specs.split(',').map(str::trim).filter(|s| !s.is_empty());
    let (Some(spec), None) = (specs.next(), specs.next()) else {
        return RangeDecision::Full;
    };
    let Some((first, last)) = spec.split_once('-') else {
        return RangeDecision::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    match (number(first), number(last)) {
        // bytes=-n: the last n bytes.
        (None, Some(suffix)) if first.is_empty() => {
            if suffix == 0 || len == 0 {
                RangeDecision::Unsatisfiable
            } else {
                RangeDecision::Partial(len.saturating_sub(suffix), len - 1)
            }
        }
        // bytes=a-
        (Some(start), None) if last.is_empty() => {
            if start < len {
                RangeDecision::Partial(start, len - 1)
            } else {
                RangeDecision::Unsatisfiable
            }
        }
        // bytes=a-b
        (Some(start), Some(end)) if start <= end => {
            if start < len {
                RangeDecision::Partial(start, end.min(len - 1))
            } else {
                RangeDecision::Unsatisfiable
            }
        }
        _ => RangeDecision::Full,
    }
}

/// A non-empty run of ASCII digits (no sign, no overflow).
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use crate::http::static_files::testing::*;

    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

    async fn range(
        files: &StaticFiles,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, String, Vec<u8>) {
        let resp = files.serve(&get(headers), path).await;
        let status = resp.status();
        let content_range = header(&resp, "content-range").to_owned();
        let length = header(&resp, "content-length").to_owned();
        let bytes = body(resp).await;
        if status == StatusCode::OK || status == StatusCode::PARTIAL_CONTENT {
            assert_eq!(length, bytes.len().to_string());
        }
        (status, content_range, bytes)
    }

    fn check_ranges(files: StaticFiles) {
        run(async {
            let r = |h: &'static str| [("range", h)];
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=0-9")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 0-9/36".into(),
                    DIGITS[..10].to_vec()
                )
            );
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=10-")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 10-35/36".into(),
                    DIGITS[10..].to_vec()
                )
            );
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=-5")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 31-35/36".into(),
                    DIGITS[31..].to_vec()
                )
            );
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=30-1000")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 30-35/36".into(),
                    DIGITS[30..].to_vec()
                )
            );
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=-1000")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 0-35/36".into(),
                    DIGITS.to_vec()
                )
            );
            for unsatisfiable in ["bytes=1000-", "bytes=36-40", "bytes=-0"] {
                let (status, content_range, bytes) =
                    range(&files, "/d.txt", &r(unsatisfiable)).await;
                assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "{unsatisfiable}");
                assert_eq!(content_range, "bytes */36");
                assert_eq!(bytes, b"");
            }
            for full in [
                "bytes=0-1,5-6",
                "bytes=0-1, -3",
                "bytes=5-1",
                "bytes=abc",
                "bytes=+1-2",
                "bytes=-",
                "items=0-1",
                "0-1",
                "bytes=99999999999999999999999-",
            ] {
                assert_eq!(
                    range(&files, "/d.txt", &r(full)).await,
                    (StatusCode::OK, String::new(), DIGITS.to_vec()),
                    "{full}"
                );
            }

            // If-Range.
            let resp = files.serve(&get(&[]), "/d.txt").await;
            let etag = header(&resp, "etag").to_owned();
            let date = header(&resp, "last-modified").to_owned();
            for (if_range, honoured) in [
                (etag.as_str(), true),
                (date.as_str(), true),
                ("\"stale\"", false),
                (&format!("W/{etag}"), false),
                ("Sun, 06 Nov 1994 08:49:37 GMT", false),
                ("garbage", false),
            ] {
                let (status, _, bytes) = range(
                    &files,
                    "/d.txt",
                    &[("range", "bytes=0-9"), ("if-range", if_range)],
                )
                .await;
                if honoured {
                    assert_eq!(
                        (status, bytes),
                        (StatusCode::PARTIAL_CONTENT, DIGITS[..10].to_vec()),
                        "{if_range}"
                    );
                } else {
                    assert_eq!(
                        (status, bytes),
                        (StatusCode::OK, DIGITS.to_vec()),
                        "{if_range}"
                    );
                }
            }
        });
    }

    #[test]
    fn ranges_cached() {
        let dir = TempDir::new();
        dir.write("d.txt", DIGITS);
        check_ranges(dir.files());
    }

    #[test]
    fn ranges_streamed() {
        let dir = TempDir::new();
        dir.write("d.txt", DIGITS);
        check_ranges(dir.files().cache_max_file_size(4).chunk_size(7));
    }
}
