//! The demo's admin area over HTTP (report R4): sign in with the README's account through the
//! form and its CSRF token, the dashboard's queries and template, sign out; and the bad input:
//! anonymous visitors redirected, tampered and foreign cookies treated as signed out, wrong
//! credentials answered 401 and counted, an unknown user and a wrong password taking the same
//! time, forms without their token refused.

use std::time::{Duration, Instant};

use brisk_testkit::*;

mod common;
use common::{demo_with, get, request, Demo};

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// `name=value` of a response's `Set-Cookie`.
fn cookie_of(r: &HttpResponse) -> String {
    let set = r
        .header("set-cookie")
        .unwrap_or_else(|| panic!("no Set-Cookie in {}", r.head));
    set.split(';').next().unwrap().to_string()
}

/// The value of the hidden `csrf` field of a page.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {page}"));
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// The login page's session cookie and CSRF token.
fn login_form(d: &Demo) -> (String, String) {
    let page = get(d.http, "/admin");
    assert_eq!(page.status, 200, "{}", page.text());
    assert_eq!(page.header("cache-control"), Some("no-store"));
    (cookie_of(&page), csrf_of(&page.text()))
}

fn post_form(d: &Demo, path: &str, cookie: &str, body: &str) -> HttpResponse {
    request(d.http, "POST", path, &[FORM, ("Cookie", cookie)], body)
}

fn sign_in(d: &Demo, user: &str, password: &str) -> HttpResponse {
    let (cookie, csrf) = login_form(d);
    let body = format!("user={user}&password={password}&csrf={csrf}&next=%2Fadmin%2Fdashboard");
    post_form(d, "/admin/login", &cookie, &body)
}

fn dashboard(d: &Demo, cookie: &str) -> HttpResponse {
    request(d.http, "GET", "/admin/dashboard", &[("Cookie", cookie)], "")
}

#[test]
fn sign_in_see_the_dashboard_and_sign_out() {
    let d = demo_with(1, &[]);
    // Anonymous: sent to the login page, which brings the visitor back.
    let r = get(d.http, "/admin/dashboard?tab=1");
    assert_eq!(r.status, 303, "{}", r.head);
    assert_eq!(
        r.header("location"),
        Some("/admin?next=%2Fadmin%2Fdashboard%3Ftab%3D1")
    );
    // minijinja's HTML escaping writes '/' as "&#x2f;".
    let page = get(d.http, "/admin?next=%2Fadmin%2Fdashboard%3Ftab%3D1").text();
    let page = page.replace("&#x2f;", "/");
    assert!(
        page.contains("name=\"next\" value=\"/admin/dashboard?tab=1\""),
        "{page}"
    );

    let r = sign_in(&d, "admin", "brisk-demo-admin");
    assert_eq!(r.status, 303, "{}{}", r.head, r.text());
    assert_eq!(r.header("location"), Some("/admin/dashboard"));
    let set = r.header("set-cookie").unwrap();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Lax"),
        "{set}"
    );
    let cookie = cookie_of(&r);

    let page = dashboard(&d, &cookie);
    assert_eq!(page.status, 200, "{}", page.text());
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let html = page.text();
    assert!(
        html.contains("signed in as <span class=\"user\">admin</span>"),
        "{html}"
    );
    // The dashboard's numbers come from the database the TechEmpower routes seeded.
    assert!(html.contains("<span id=\"worlds\">10000</span>"), "{html}");
    assert!(html.contains("<span id=\"fortunes\">12</span>"), "{html}");
    assert_eq!(html.matches("<tr><td>").count(), 10, "{html}");
    assert!(html.contains("<tr><td>1</td><td>"), "{html}");
    // A signed-in visitor of the login page goes on to the dashboard.
    let r = request(d.http, "GET", "/admin", &[("Cookie", &cookie)], "");
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/admin/dashboard"));

    // Sign out: the token is required, then the cookie is deleted.
    let csrf = csrf_of(&html);
    let r = post_form(&d, "/admin/logout", &cookie, "csrf=wrong");
    assert_eq!(r.status, 403, "{}", r.text());
    let r = post_form(&d, "/admin/logout", &cookie, &format!("csrf={csrf}"));
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(r.header("location"), Some("/admin"));
    let cleared = r.header("set-cookie").unwrap();
    assert!(cleared.starts_with("brisk_session=;"), "{cleared}");
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
}

#[test]
fn a_session_from_one_worker_is_accepted_by_the_others() {
    // Four workers share the secret in the run directory's session.key.
    let d = demo_with(4, &[]);
    let cookie = cookie_of(&sign_in(&d, "admin", "brisk-demo-admin"));
    let mut workers = std::collections::HashSet::new();
    for _ in 0..40 {
        let page = dashboard(&d, &cookie);
        assert_eq!(page.status, 200, "{}", page.text());
        let html = page.text();
        let at = html.find("<footer>worker ").unwrap();
        workers.insert(html[at..].lines().next().unwrap().to_string());
    }
    // SO_REUSEPORT spreads new connections; more than one worker answered.
    assert!(workers.len() > 1, "one worker answered all: {workers:?}");
}

#[test]
fn tampered_foreign_and_garbage_cookies_are_signed_out_not_errors() {
    let d = demo_with(1, &[]);
    let cookie = cookie_of(&sign_in(&d, "admin", "brisk-demo-admin"));
    let (name, value) = cookie.split_once('=').unwrap();
    let last = value.chars().last().unwrap();
    let flipped = if last == 'A' { 'B' } else { 'A' };
    let tampered = format!("{name}={}{flipped}", &value[..value.len() - 1]);
    let foreign = {
        // Another demo, another run directory, another secret.
        let other = demo_with(1, &[]);
        cookie_of(&sign_in(&other, "admin", "brisk-demo-admin"))
    };
    let forged = format!("{name}=v1.99999999999.{}.admin", "a".repeat(32));
    for bad in [tampered, foreign, forged, format!("{name}=%%%")] {
        let r = dashboard(&d, &bad);
        assert_eq!(r.status, 303, "{bad}: {}", r.text());
        assert!(r.header("location").unwrap().starts_with("/admin?next="));
        let r = request(d.http, "GET", "/admin", &[("Cookie", &bad)], "");
        assert_eq!(r.status, 200, "{bad}: the login page, not an error");
    }
    // The real cookie still works.
    assert_eq!(dashboard(&d, &cookie).status, 200);
}

#[test]
fn wrong_credentials_get_401_are_counted_and_keep_the_same_time() {
    let d = demo_with(1, &[]);
    let r = sign_in(&d, "admin", "not-the-password");
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.text().contains("Wrong user name or password."));
    let r = sign_in(&d, "nobody", "brisk-demo-admin");
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.text().contains("Wrong user name or password."));
    // The two failures are counted on this (the only) worker.
    let cookie = cookie_of(&sign_in(&d, "admin", "brisk-demo-admin"));
    let html = dashboard(&d, &cookie).text();
    assert!(
        html.contains("<span id=\"failed-logins\">2</span>"),
        "{html}"
    );
    assert!(
        d.server.log().contains("failed sign-in"),
        "{}",
        d.server.log()
    );

    // An unknown user costs a password check too: without the dummy hash it would answer in
    // well under a millisecond, a wrong password in tens of milliseconds.
    let median = |user: &str| {
        let mut times: Vec<Duration> = (0..7)
            .map(|_| {
                let (cookie, csrf) = login_form(&d);
                let body = format!("user={user}&password=guess&csrf={csrf}");
                let started = Instant::now();
                let r = post_form(&d, "/admin/login", &cookie, &body);
                let took = started.elapsed();
                assert_eq!(r.status, 401);
                took
            })
            .collect();
        times.sort();
        times[3]
    };
    let unknown = median("nobody");
    let wrong = median("admin");
    let ratio = unknown.as_secs_f64() / wrong.as_secs_f64();
    assert!(
        (0.33..3.0).contains(&ratio),
        "unknown user {unknown:?} against wrong password {wrong:?}"
    );
}

#[test]
fn forms_without_their_token_or_session_are_refused() {
    let d = demo_with(1, &[]);
    let (cookie, csrf) = login_form(&d);
    // The right password with a wrong token: 403, no session.
    let r = post_form(
        &d,
        "/admin/login",
        &cookie,
        "user=admin&password=brisk-demo-admin&csrf=00000000000000000000000000000000",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.header("set-cookie").is_none());
    // No cookie at all (a cross-site post): 403 with a fresh form.
    let r = request(
        d.http,
        "POST",
        "/admin/login",
        &[FORM],
        &format!("user=admin&password=brisk-demo-admin&csrf={csrf}"),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("name=\"csrf\""));
    // A form that is not one: 400 naming the problem.
    let r = post_form(&d, "/admin/login", &cookie, "user=admin");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().starts_with("bad form: missing field"),
        "{}",
        r.text()
    );
    // An oversized form: 413.
    let big = format!("user={}&password=x&csrf={csrf}", "a".repeat(20_000));
    assert_eq!(post_form(&d, "/admin/login", &cookie, &big).status, 413);
    // An open redirect in `next` is ignored.
    let r = post_form(
        &d,
        "/admin/login",
        &cookie,
        &format!("user=admin&password=brisk-demo-admin&csrf={csrf}&next=%2F%2Fevil.example%2F"),
    );
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(r.header("location"), Some("/admin/dashboard"));
    // Wrong methods.
    assert_eq!(get(d.http, "/admin/login").status, 405);
    assert_eq!(get(d.http, "/admin/nothing").status, 404);
}
