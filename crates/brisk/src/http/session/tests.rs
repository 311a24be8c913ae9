use std::time::Duration;

use http::{header, HeaderMap, HeaderValue};

use super::*;

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

/// The `name=value` pair a browser would send back for a `Set-Cookie` value.
fn sent_back(set_cookie: &HeaderValue) -> HeaderMap {
    let pair = set_cookie.to_str().unwrap().split(';').next().unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(header::COOKIE, pair.parse().unwrap());
    headers
}

#[test]
fn a_login_cookie_reads_back_as_the_same_session() {
    let sessions = Sessions::new(SECRET).unwrap();
    let session = sessions.login("ada.lovelace; admin=1");
    let cookie = sessions.set_cookie(&session);
    let text = cookie.to_str().unwrap();
    assert!(text.starts_with("brisk_session="), "{text}");
    for attribute in [
        "HttpOnly",
        "Secure",
        "SameSite=Lax",
        "Path=/",
        "Max-Age=3600",
    ] {
        assert!(text.contains(attribute), "{attribute} missing in {text}");
    }
    let back = sessions.read(&sent_back(&cookie)).expect("a session");
    assert_eq!(back, session);
    assert_eq!(back.user(), Some("ada.lovelace; admin=1"));
    assert!(back.check_csrf(session.csrf_token()));
    assert!(!back.check_csrf(&"0".repeat(32)));
    assert!(!back.check_csrf(""));
}

#[test]
fn two_session_types_with_one_secret_refuse_each_others_cookies() {
    let admin = Sessions::with_options(
        SECRET,
        SessionOptions {
            cookie_name: "admin".into(),
            ..SessionOptions::default()
        },
    )
    .unwrap();
    let shop = Sessions::with_options(
        SECRET,
        SessionOptions {
            cookie_name: "shop".into(),
            ..SessionOptions::default()
        },
    )
    .unwrap();
    // The shop's cookie, its value presented under the admin's name.
    let cookie = shop.set_cookie(&shop.login("ada"));
    let pair = cookie.to_str().unwrap().split(';').next().unwrap();
    let (_, value) = pair.split_once('=').unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(header::COOKIE, format!("admin={value}").parse().unwrap());
    assert!(admin.read(&headers).is_none(), "signed for the shop only");
    assert!(shop.read(&sent_back(&cookie)).is_some());
}

#[test]
fn same_site_none_needs_secure_and_secure_is_the_default() {
    assert!(SessionOptions::default().secure);
    let insecure_none = SessionOptions {
        secure: false,
        same_site: SameSite::None,
        ..SessionOptions::default()
    };
    let err = Sessions::with_options(SECRET, insecure_none).unwrap_err();
    assert!(err.to_string().contains("SameSite=None"), "{err}");
    let plain = SessionOptions {
        secure: false,
        ..SessionOptions::default()
    };
    let sessions = Sessions::with_options(SECRET, plain).unwrap();
    let cookie = sessions.set_cookie(&sessions.login("ada"));
    assert!(
        !cookie.to_str().unwrap().contains("Secure"),
        "off when asked"
    );
}

#[test]
fn tampered_foreign_malformed_and_expired_cookies_read_as_no_session() {
    let sessions = Sessions::new(SECRET).unwrap();
    let cookie = sessions.set_cookie(&sessions.login("ada"));
    let pair = cookie
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let (name, value) = pair.split_once('=').unwrap();

    let cases = [
        // One character of the signed value changed (the user, at the end).
        format!("{name}={}b", &value[..value.len() - 1]),
        // The signature changed (its first character, to one it is not: it was `A` in
        // one run of 64).
        format!(
            "{name}={}{}",
            if value.starts_with('A') { 'B' } else { 'A' },
            &value[1..]
        ),
        // No signature at all.
        format!("{name}=v1.99999999999.{}.ada", "a".repeat(32)),
        format!("{name}="),
        format!("{name}=%%%"),
    ];
    for case in &cases {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, case.parse().unwrap());
        assert_eq!(sessions.read(&headers), None, "{case}");
    }
    // Signed with another secret.
    let other = Sessions::new(&[9u8; 32]).unwrap();
    assert_eq!(other.read(&sent_back(&cookie)), None);
    // Expired: signed into the value, so an old cookie kept by the client does not work.
    let expired = sessions.login("ada").with_expiry(unix_now() - 1);
    assert_eq!(
        sessions.read(&sent_back(&sessions.set_cookie(&expired))),
        None
    );
    // No cookie, another cookie, a cookie header that is not text.
    assert_eq!(sessions.read(&HeaderMap::new()), None);
    let mut headers = HeaderMap::new();
    headers.insert(header::COOKIE, "theme=dark".parse().unwrap());
    assert_eq!(sessions.read(&headers), None);
    headers.insert(
        header::COOKIE,
        HeaderValue::from_bytes(b"\xff=\xfe").unwrap(),
    );
    assert_eq!(sessions.read(&headers), None);
}

#[test]
fn the_session_cookie_is_found_among_others() {
    let sessions = Sessions::new(SECRET).unwrap();
    let cookie = sessions.set_cookie(&sessions.anonymous());
    let pair = cookie.to_str().unwrap().split(';').next().unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(header::COOKIE, format!("a=1; {pair}; b=2").parse().unwrap());
    let back = sessions.read(&headers).expect("a session");
    assert_eq!(back.user(), None);
}

#[test]
fn each_session_gets_its_own_csrf_token() {
    let sessions = Sessions::new(SECRET).unwrap();
    let a = sessions.anonymous();
    let b = sessions.login("ada");
    assert_ne!(a.csrf_token(), b.csrf_token());
    assert_eq!(a.csrf_token().len(), 32);
}

#[test]
fn a_session_is_renewed_once_half_of_it_has_passed() {
    let sessions = Sessions::new(SECRET).unwrap();
    let fresh = sessions.login("ada");
    assert_eq!(sessions.renewed(&fresh), None);
    let old = fresh.with_expiry(unix_now() + 60);
    let renewed = sessions.renewed(&old).expect("renewed");
    assert_eq!(renewed.user(), Some("ada"));
    assert_eq!(renewed.csrf_token(), fresh.csrf_token());
    assert!(renewed.expires() >= unix_now() + 3599);
}

#[test]
fn the_clearing_cookie_expires_at_once() {
    let sessions = Sessions::new(SECRET).unwrap();
    let text = sessions.clear_cookie().to_str().unwrap().to_string();
    assert!(text.starts_with("brisk_session=;"), "{text}");
    assert!(text.contains("Max-Age=0"), "{text}");
    assert!(text.contains("1970"), "{text}");
}

#[test]
fn short_secrets_and_bad_options_are_refused() {
    let err = Sessions::new(b"short").unwrap_err();
    assert_eq!(
        err.to_string(),
        "the session secret is 5 bytes; it needs at least 32"
    );
    let bad = |options: SessionOptions| Sessions::with_options(SECRET, options).unwrap_err();
    let e = bad(SessionOptions {
        cookie_name: "my session".into(),
        ..Default::default()
    });
    assert!(e.to_string().contains("cookie name"), "{e}");
    let e = bad(SessionOptions {
        path: "admin".into(),
        ..Default::default()
    });
    assert!(e.to_string().contains("cookie path"), "{e}");
    let e = bad(SessionOptions {
        max_age: Duration::ZERO,
        ..Default::default()
    });
    assert!(e.to_string().contains("max_age"), "{e}");
}

mod layer {
    use axum::routing::get;
    use axum::{Extension, Router};
    use http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    fn app(sessions: &Sessions) -> Router {
        Router::new()
            .route(
                "/admin/page",
                get(|Extension(s): Extension<Session>| async move {
                    format!("hello {}", s.user().unwrap_or("?"))
                }),
            )
            .layer(sessions.require_login("/login"))
    }

    async fn call(
        router: Router,
        cookie: Option<&HeaderValue>,
    ) -> http::Response<axum::body::Body> {
        call_accepting(router, cookie, "text/html,*/*").await
    }

    async fn call_accepting(
        router: Router,
        cookie: Option<&HeaderValue>,
        accept: &str,
    ) -> http::Response<axum::body::Body> {
        let mut req = Request::get("/admin/page?x=1").header(header::ACCEPT, accept);
        if let Some(c) = cookie {
            let pair = c.to_str().unwrap().split(';').next().unwrap().to_string();
            req = req.header(header::COOKIE, pair);
        }
        router
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_layer_lets_signed_in_users_through_with_their_session() {
        let sessions = Sessions::new(SECRET).unwrap();
        let cookie = sessions.set_cookie(&sessions.login("ada"));
        let r = call(app(&sessions), Some(&cookie)).await;
        assert_eq!(r.status(), StatusCode::OK);
        // Fresh: no renewal yet.
        assert!(r.headers().get(header::SET_COOKIE).is_none());
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello ada");
    }

    #[tokio::test]
    async fn the_layer_redirects_anonymous_and_tampered_visitors() {
        let sessions = Sessions::new(SECRET).unwrap();
        let anonymous = sessions.set_cookie(&sessions.anonymous());
        let foreign = Sessions::new(&[1u8; 32]).unwrap();
        let foreign = foreign.set_cookie(&foreign.login("ada"));
        for cookie in [None, Some(&anonymous), Some(&foreign)] {
            let r = call(app(&sessions), cookie).await;
            assert_eq!(r.status(), StatusCode::SEE_OTHER, "{cookie:?}");
            assert_eq!(
                r.headers()[header::LOCATION],
                "/login?next=%2Fadmin%2Fpage%3Fx%3D1"
            );
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
        }
    }

    #[tokio::test]
    async fn a_request_for_json_gets_401_json_instead_of_a_redirect() {
        let sessions = Sessions::new(SECRET).unwrap();
        let r = call_accepting(app(&sessions), None, "application/json").await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        assert!(r.headers().get(header::LOCATION).is_none());
        let body = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], br#"{"error":"login required"}"#);
        // A browser's Accept (HTML among others) is still sent to the login page.
        let r = call_accepting(app(&sessions), None, "text/html,application/json;q=0.9").await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
    }

    #[tokio::test]
    async fn a_renewal_never_undoes_a_logout_behind_the_layer() {
        let sessions = Sessions::new(SECRET).unwrap();
        let clearing = sessions.clear_cookie();
        let router = Router::new()
            .route(
                "/admin/page",
                get(move || {
                    let clearing = clearing.clone();
                    async move { ([(header::SET_COOKIE, clearing)], "bye") }
                }),
            )
            .layer(sessions.require_login("/login"));
        let old = sessions.login("ada").with_expiry(unix_now() + 60);
        let r = call(router, Some(&sessions.set_cookie(&old))).await;
        let set: Vec<_> = r.headers().get_all(header::SET_COOKIE).iter().collect();
        assert_eq!(set.len(), 1, "{set:?}");
        assert!(set[0].to_str().unwrap().contains("Max-Age=0"), "{set:?}");
    }

    #[tokio::test]
    async fn the_layer_renews_a_session_past_half_its_life() {
        let sessions = Sessions::new(SECRET).unwrap();
        let old = sessions.login("ada").with_expiry(unix_now() + 60);
        let r = call(app(&sessions), Some(&sessions.set_cookie(&old))).await;
        assert_eq!(r.status(), StatusCode::OK);
        let renewed = r
            .headers()
            .get(header::SET_COOKIE)
            .expect("a renewed cookie");
        let back = sessions.read(&sent_back(renewed)).unwrap();
        assert_eq!(back.user(), Some("ada"));
        assert!(back.expires() > unix_now() + 3000);
    }
}
