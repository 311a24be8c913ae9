//! Building the responses: the `200` or `206` around a body with all of a file's headers,
//! the `304` and `416` that conditional and range headers end in, redirects, and the status
//! codes for errors.

use std::io;
use std::ops::ControlFlow;
use std::path::Path;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode};

use super::cache::Entry;
use super::conditional::check_not_modified;
use super::lookup::is_not_found;
use super::range::{requested_range, RangeDecision};
use super::validators::Validators;
use super::StaticBody;
use crate::http::file_body::Chunks;

/// The response for a cached entry: the same status and headers as for the
/// file on disk, with the body sliced from the cached bytes or sent from the
/// cached open file.
pub(super) fn respond_from<B>(
    entry: &Entry,
    req: &Request<B>,
    head: bool,
    chunks: Chunks,
) -> Response<StaticBody> {
    let range = match decide(req.headers(), &entry.validators) {
        ControlFlow::Continue(range) => range,
        ControlFlow::Break(resp) => return resp,
    };
    let body = if head {
        StaticBody::empty()
    } else {
        let len = entry.validators.info.len;
        entry.content.body(range, len, chunks)
    };
    finish(
        &entry.validators,
        entry.content_type.clone(),
        body,
        range,
        Some(&entry.content_length),
    )
}

/// `Content-Type` for a file name.
pub(super) fn content_type(name: &Path) -> HeaderValue {
    let Some(mime) = mime_guess::from_path(name).first() else {
        return HeaderValue::from_static("application/octet-stream");
    };
    let value = if mime.type_() == mime_guess::mime::TEXT && mime.get_param("charset").is_none() {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_string()
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("application/octet-stream"))
}
/// What the validators and `Range` headers ask for: `Continue` with the
/// range to send (`None`: all of it), or `Break` with the finished `304` or
/// `416`.
pub(super) fn decide(
    headers: &HeaderMap,
    validators: &Validators,
) -> ControlFlow<Response<StaticBody>, Option<(u64, u64)>> {
    if let Some(code) = check_not_modified(headers, validators) {
        let mut resp = status(code);
        validators.insert_into(resp.headers_mut());
        return ControlFlow::Break(resp);
    }
    match requested_range(headers, validators) {
        RangeDecision::Full => ControlFlow::Continue(None),
        RangeDecision::Partial(start, end) => ControlFlow::Continue(Some((start, end))),
        RangeDecision::Unsatisfiable => {
            let mut resp = status(StatusCode::RANGE_NOT_SATISFIABLE);
            set(
                resp.headers_mut(),
                header::CONTENT_RANGE,
                format!("bytes */{}", validators.info.len),
            );
            resp.headers_mut()
                .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            ControlFlow::Break(resp)
        }
    }
}

/// The `200`, or `206` for `range`, around `body`. `full_length` is the
/// whole file's `Content-Length` when already at hand.
pub(super) fn finish(
    validators: &Validators,
    content_type: HeaderValue,
    body: StaticBody,
    range: Option<(u64, u64)>,
    full_length: Option<&HeaderValue>,
) -> Response<StaticBody> {
    let len = validators.info.len;
    let Some((start, end)) = range else {
        let length = full_length
            .cloned()
            .unwrap_or_else(|| HeaderValue::from(len));
        return full_response(validators, content_type, body, length);
    };
    let length = HeaderValue::from(end - start + 1);
    let mut resp = full_response(validators, content_type, body, length);
    *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    set(
        resp.headers_mut(),
        header::CONTENT_RANGE,
        format!("bytes {start}-{end}/{len}"),
    );
    resp
}

/// A `200` (the caller may change the status) with all the file's headers.
fn full_response(
    validators: &Validators,
    content_type: HeaderValue,
    body: StaticBody,
    content_length: HeaderValue,
) -> Response<StaticBody> {
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CONTENT_LENGTH, content_length);
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    validators.insert_into(headers);
    resp
}

/// `301` to the request's own path plus `/` (query kept).
///
/// With `relative`, the location is relative to the path (`./name/`): right whatever the
/// mount point, which a `tower::Service` nested in a router does not see (the router strips
/// it from the request's path).
pub(super) fn redirect_with_slash<B>(req: &Request<B>, relative: bool) -> Response<StaticBody> {
    let path = req.uri().path();
    let mut location = if relative {
        // `./` keeps a last segment with a `:` from reading as a scheme.
        let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        format!("./{last}/")
    } else {
        // Collapse leading slashes: "//evil.example" must not become a
        // protocol-relative redirect to another host.
        format!("/{}/", path.trim_start_matches('/'))
    };
    if let Some(query) = req.uri().query() {
        location.push('?');
        location.push_str(query);
    }
    let mut resp = status(StatusCode::MOVED_PERMANENTLY);
    set(resp.headers_mut(), header::LOCATION, location);
    resp
}

/// The status for an I/O error, logged.
pub(super) fn io_error(e: &io::Error, path: &str) -> Response<StaticBody> {
    if is_not_found(e) {
        return status(StatusCode::NOT_FOUND);
    }
    if e.kind() == io::ErrorKind::PermissionDenied {
        tracing::debug!(path, error = %e, "static file: permission denied");
        return status(StatusCode::FORBIDDEN);
    }
    tracing::warn!(path, error = %e, "static file: I/O error");
    status(StatusCode::INTERNAL_SERVER_ERROR)
}

/// An empty response with `code`.
pub(super) fn status(code: StatusCode) -> Response<StaticBody> {
    let mut resp = Response::new(StaticBody::empty());
    *resp.status_mut() = code;
    resp
}

/// Inserts a header built from a string; a value that is not a valid header
/// (cannot happen for the values built here) is left out rather than panicking.
fn set(headers: &mut HeaderMap, name: header::HeaderName, value: String) {
    if let Ok(value) = HeaderValue::try_from(value) {
        headers.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::static_files::testing::*;

    #[test]
    fn mime_types() {
        let dir = TempDir::new();
        for name in [
            "a.html",
            "a.css",
            "a.js",
            "a.json",
            "a.png",
            "a.unknownext",
            "noext",
        ] {
            dir.write(name, b"x");
        }
        run(async {
            let files = dir.files();
            for (name, expected) in [
                ("/a.html", "text/html; charset=utf-8"),
                ("/a.css", "text/css; charset=utf-8"),
                ("/a.js", "text/javascript; charset=utf-8"),
                ("/a.json", "application/json"),
                ("/a.png", "image/png"),
                ("/a.unknownext", "application/octet-stream"),
                ("/noext", "application/octet-stream"),
            ] {
                let resp = files.serve(&get(&[]), name).await;
                assert_eq!(resp.status(), StatusCode::OK, "{name}");
                assert_eq!(header(&resp, "content-type"), expected, "{name}");
            }
        });
    }
}
