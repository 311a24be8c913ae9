//! Following a redirect: where it points, and what the next request keeps.

use http::{header, Method, StatusCode, Uri};

/// Whether `status` is a redirect the client follows.
pub(super) fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Whether `a` and `b` have the same scheme, host and port: a redirect that changes any of
/// them does not take the request's credentials along.
pub(super) fn same_origin(a: &Uri, b: &Uri) -> bool {
    let port = |u: &Uri| {
        u.port_u16().unwrap_or(if u.scheme_str() == Some("https") {
            443
        } else {
            80
        })
    };
    a.scheme_str() == b.scheme_str()
        && a.host().map(str::to_ascii_lowercase) == b.host().map(str::to_ascii_lowercase)
        && port(a) == port(b)
}

/// The method of the request that follows a `status` redirect of a `method` request: 303
/// turns anything but HEAD into GET, 301 and 302 turn POST into GET (as browsers do), 307 and
/// 308 keep method and body.
pub(super) fn next_method(status: StatusCode, method: &Method) -> Method {
    match status.as_u16() {
        303 if method != Method::HEAD => Method::GET,
        301 | 302 if method == Method::POST => Method::GET,
        _ => method.clone(),
    }
}

/// The target of a `Location` value seen on a response to `base`: an absolute URL, an
/// absolute path, or a path relative to `base`'s directory. `None` if it is none of these.
pub(super) fn resolve(base: &Uri, location: &header::HeaderValue) -> Option<Uri> {
    let location = location.to_str().ok()?;
    let target: Uri = location.parse().ok()?;
    if target.scheme().is_some() {
        return target.authority().is_some().then_some(target);
    }
    let path = if location.starts_with('/') {
        location.to_string()
    } else if location
        .split('/')
        .next()
        .is_some_and(|first| first.contains(':'))
    {
        // A scheme without a host (`http:x`): nothing to go to.
        return None;
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(dir, _)| dir);
        format!("{dir}/{location}")
    };
    Uri::builder()
        .scheme(base.scheme()?.clone())
        .authority(base.authority()?.clone())
        .path_and_query(path)
        .build()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: &str, location: &str) -> Option<String> {
        let base: Uri = base.parse().unwrap();
        resolve(&base, &header::HeaderValue::from_str(location).unwrap()).map(|u| u.to_string())
    }

    #[test]
    fn locations_resolve_against_the_request() {
        assert_eq!(
            at("http://a:1/x/y?q", "https://b/z").as_deref(),
            Some("https://b/z")
        );
        assert_eq!(
            at("http://a:1/x/y?q", "/z?k=v").as_deref(),
            Some("http://a:1/z?k=v")
        );
        assert_eq!(at("http://a:1/x/y", "z").as_deref(), Some("http://a:1/x/z"));
        assert_eq!(at("http://a:1/x/y", "http:nohost"), None);
        assert_eq!(at("http://a:1/x/y", "a b"), None);
    }

    #[test]
    fn origins_differ_by_scheme_host_or_port() {
        let same = |a: &str, b: &str| same_origin(&a.parse().unwrap(), &b.parse().unwrap());
        assert!(same("http://a/x", "http://A:80/y"));
        assert!(same("https://a/x", "https://a:443/y"));
        assert!(!same("https://a/x", "http://a/x"));
        assert!(!same("http://a/x", "http://b/x"));
        assert!(!same("http://a:1/x", "http://a:2/x"));
    }

    #[test]
    fn see_other_turns_into_get_and_307_keeps_the_method() {
        let see_other = StatusCode::SEE_OTHER;
        assert_eq!(next_method(see_other, &Method::POST), Method::GET);
        assert_eq!(next_method(see_other, &Method::HEAD), Method::HEAD);
        assert_eq!(next_method(StatusCode::FOUND, &Method::POST), Method::GET);
        assert_eq!(next_method(StatusCode::FOUND, &Method::PUT), Method::PUT);
        let temporary = StatusCode::TEMPORARY_REDIRECT;
        assert_eq!(next_method(temporary, &Method::POST), Method::POST);
    }
}
