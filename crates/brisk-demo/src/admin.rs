//! Report R4's admin area: a login page (`GET /admin`, a run-time template, so the template
//! cache on/off matrix applies), the sign-in form's target (`POST /admin/login`), a dashboard
//! behind the login (`GET /admin/dashboard`: authentication, a redirect when anonymous,
//! queries through `brisk::db`, a template) and `POST /admin/logout`.
//!
//! The one account, `admin`, has the password whose argon2id hash the operator gives
//! (`--admin-password-hash-file` or `BRISK_ADMIN_PASSWORD_HASH`); without one the sign-in is
//! off (there is no published default password).
//!
//! Sessions are Brisk's signed cookies; forms carry the session's CSRF token. Passwords are
//! argon2id hashes checked off the event loop, at most [`VERIFY_SLOTS`] at a time per worker.
//! An unknown user is checked against a dummy hash of the same cost, so a wrong user and a
//! wrong password take the same time and get the same 401 page; failures are counted per
//! worker (shown on the dashboard) and logged, and Brisk's [`LoginThrottle`] answers 429 to an
//! account or an address that failed too often. When every password-check slot stays busy,
//! the answer is 503 (try again), not a wrong password.

use std::cell::Cell;
use std::rc::Rc;

use argon2::{Argon2, PasswordHash, PasswordVerifier};
use brisk::db::{Db, DbError, Value};
use brisk::http::login_throttle::{LoginThrottle, ThrottleOptions};
use brisk::http::session::{login_redirect, safe_next, Session, Sessions};
use brisk::http::{Body, RequestBody};
use brisk::template::Templates;

use crate::session_key::SessionKey;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// The demo's one account's name.
const ADMIN: &str = "admin";

/// What the login page says when no password hash was given.
const SIGN_IN_OFF: &str = "The admin sign-in is off: start the demo with \
    --admin-password-hash-file (an argon2id hash) to turn it on.";

/// The hash an unknown user's password is checked against: same algorithm and cost as the real
/// ones, of a random password nobody knows.
const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$+i98h9iajBkfkZg4HOYCBg$LJ/TYYMoWbGXo65Vh15ayvESemlbMBLvx3pbSLRSmsw";

/// Password checks running at once per worker (each takes ~19 MiB and a core for tens of ms).
pub(crate) const VERIFY_SLOTS: usize = 2;

/// How long a sign-in waits for a password-check slot before it fails.
const VERIFY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The largest sign-in or sign-out form accepted, in bytes.
const MAX_FORM: usize = 16 * 1024;

/// Where anonymous visitors are sent.
const LOGIN_PAGE: &str = "/admin";

/// Where a sign-in goes without a `next`.
const DASHBOARD: &str = "/admin/dashboard";

/// The first World rows the dashboard lists.
const DASHBOARD_ROWS: i32 = 10;

/// The admin area of one worker; cheap to clone.
#[derive(Clone)]
pub(crate) struct Admin {
    key: SessionKey,
    templates: Templates,
    db: Db,
    /// The admin's password hash (PHC string); `None`: sign-in is off.
    password_hash: Option<Rc<str>>,
    verify_slots: Rc<Semaphore>,
    failed_logins: Rc<Cell<u64>>,
    throttle: LoginThrottle,
}

/// What a password check found.
enum Verdict {
    Match,
    NoMatch,
    /// Every password-check slot stayed busy: nothing was checked.
    Busy,
}

/// The fields of the sign-in form.
#[derive(Deserialize)]
struct LoginForm {
    user: String,
    password: String,
    csrf: String,
    #[serde(default)]
    next: String,
}

/// The field of the sign-out form.
#[derive(Deserialize)]
struct LogoutForm {
    csrf: String,
}

/// What the login page shows.
#[derive(Serialize)]
struct LoginPage<'a> {
    csrf: &'a str,
    next: &'a str,
    name: &'a str,
    error: Option<&'a str>,
    worker: u32,
}

#[derive(Serialize)]
struct WorldRow {
    id: i32,
    random_number: i32,
}

/// What the dashboard shows.
#[derive(Serialize)]
struct DashboardPage<'a> {
    user: &'a str,
    csrf: &'a str,
    worlds: i64,
    fortunes: i64,
    rows: Vec<WorldRow>,
    failed_logins: u64,
    worker: u32,
}

impl Admin {
    /// The admin area over `db` (the TechEmpower tables), rendering with `templates`,
    /// signing sessions with `key`, with the admin's argon2id `password_hash` (`None`: the
    /// sign-in is off). A hash that does not parse is an error.
    pub(crate) fn new(
        key: SessionKey,
        templates: Templates,
        db: Db,
        password_hash: Option<String>,
    ) -> anyhow::Result<Self> {
        if let Some(phc) = &password_hash {
            PasswordHash::new(phc).map_err(|e| {
                anyhow::anyhow!("the admin password hash is not an argon2 PHC string: {e}")
            })?;
        }
        Ok(Admin {
            key,
            templates,
            db,
            password_hash: password_hash.map(Rc::from),
            verify_slots: Rc::new(Semaphore::new(VERIFY_SLOTS)),
            failed_logins: Rc::new(Cell::new(0)),
            throttle: LoginThrottle::new(ThrottleOptions::default()),
        })
    }

    /// This admin area with these sign-in limits.
    pub(crate) fn throttled(mut self, options: ThrottleOptions) -> Self {
        self.throttle = LoginThrottle::new(options);
        self
    }

    /// Answers `/admin` and `/admin/*`; `Err(req)` hands any other request back.
    pub(crate) async fn route(
        &self,
        req: Request<RequestBody>,
    ) -> Result<Response<Body>, Request<RequestBody>> {
        let path = req.uri().path();
        if path != LOGIN_PAGE && !path.starts_with("/admin/") {
            return Err(req);
        }
        let get = matches!(*req.method(), Method::GET | Method::HEAD);
        let post = req.method() == Method::POST;
        let sessions = match self.key.sessions() {
            Ok(sessions) => sessions,
            Err(e) => {
                tracing::error!("sessions: {e}");
                let message = "sessions are unavailable: the session key cannot be read\n";
                return Ok(text(StatusCode::INTERNAL_SERVER_ERROR, message));
            }
        };
        Ok(match path {
            LOGIN_PAGE if get => self.login_page(sessions, &req),
            "/admin/login" if post => self.login(sessions, req).await,
            DASHBOARD if get => self.dashboard(sessions, &req).await,
            "/admin/logout" if post => self.logout(sessions, req).await,
            LOGIN_PAGE | DASHBOARD => method_not_allowed("GET, HEAD"),
            "/admin/login" | "/admin/logout" => method_not_allowed("POST"),
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        })
    }

    /// The sign-in form; a visitor who is signed in already goes on to the dashboard.
    fn login_page(&self, sessions: &Sessions, req: &Request<RequestBody>) -> Response<Body> {
        let next = query_param(req.uri().query(), "next");
        let next = safe_next(next.as_deref(), DASHBOARD);
        match sessions.read(req.headers()) {
            Some(s) if s.user().is_some() => see_other(next),
            Some(s) => self.form(&s, next, "", self.off_notice(), StatusCode::OK),
            None => {
                let s = sessions.anonymous();
                let page = self.form(&s, next, "", self.off_notice(), StatusCode::OK);
                with_session(sessions, &s, page)
            }
        }
    }

    /// What the login page says when the sign-in is off.
    fn off_notice(&self) -> Option<&'static str> {
        self.password_hash.is_none().then_some(SIGN_IN_OFF)
    }

    /// Checks the sign-in form: its CSRF token, the throttle, then the password.
    async fn login(&self, sessions: &Sessions, req: Request<RequestBody>) -> Response<Body> {
        let Some(from) = req.body().remote_addr().map(|a| a.ip()) else {
            return text(StatusCode::INTERNAL_SERVER_ERROR, "no client address\n");
        };
        let Some(session) = sessions.read(req.headers()) else {
            // No session cookie (expired, tampered, or cookies off): a fresh form.
            let fresh = sessions.anonymous();
            let error = "Your sign-in form expired. Please try again.";
            let page = self.form(&fresh, DASHBOARD, "", Some(error), StatusCode::FORBIDDEN);
            return with_session(sessions, &fresh, page);
        };
        let form: LoginForm = match read_form(req).await {
            Ok(form) => form,
            Err(r) => return r,
        };
        let next = safe_next(Some(&form.next), DASHBOARD);
        if !session.check_csrf(&form.csrf) {
            let error = "Your sign-in form expired. Please try again.";
            return self.form(
                &session,
                next,
                &form.user,
                Some(error),
                StatusCode::FORBIDDEN,
            );
        }
        let Some(phc) = self.password_hash.clone() else {
            return self.form(
                &session,
                next,
                &form.user,
                Some(SIGN_IN_OFF),
                StatusCode::FORBIDDEN,
            );
        };
        let attempt = match self.throttle.attempt(&form.user, from) {
            Ok(attempt) => attempt,
            Err(throttled) => {
                tracing::warn!(user = ?form.user, %from, "sign-in refused: {throttled}");
                let refusal = throttled.to_string();
                let mut page = self.form(
                    &session,
                    next,
                    &form.user,
                    Some(&refusal),
                    StatusCode::TOO_MANY_REQUESTS,
                );
                let wait = throttled.retry_after.as_secs().max(1);
                page.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(wait));
                return page;
            }
        };
        // Every end of the attempt but a match counts as a failure (a busy check too: a
        // flood must not buy guesses that are never counted).
        match self.verify(&phc, &form.user, form.password).await {
            Verdict::Match => {
                attempt.succeeded();
                tracing::info!(user = %form.user, "signed in");
                let mut r = see_other(next);
                let cookie = sessions.set_cookie(&sessions.login(&form.user));
                r.headers_mut().insert(header::SET_COOKIE, cookie);
                return r;
            }
            Verdict::Busy => {
                let busy = "Too many sign-ins at once. Please try again in a moment.";
                let mut page = self.form(
                    &session,
                    next,
                    &form.user,
                    Some(busy),
                    StatusCode::SERVICE_UNAVAILABLE,
                );
                page.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return page;
            }
            Verdict::NoMatch => attempt.failed(),
        }
        let failures = self.failed_logins.get() + 1;
        self.failed_logins.set(failures);
        tracing::warn!(user = ?form.user, failures, "failed sign-in");
        let error = "Wrong user name or password.";
        self.form(
            &session,
            next,
            &form.user,
            Some(error),
            StatusCode::UNAUTHORIZED,
        )
    }

    /// Whether `password` is `user`'s (the admin's hash is `phc`). Unknown users are checked
    /// against [`DUMMY_HASH`], so both failures cost the same.
    async fn verify(&self, phc: &Rc<str>, user: &str, password: String) -> Verdict {
        let known = user == ADMIN;
        let phc: String = if known {
            phc.to_string()
        } else {
            DUMMY_HASH.into()
        };
        // A flood of sign-ins waits at most VERIFY_WAIT for a slot, then is told to try
        // again, so the queue behind the slots stays short.
        let slot = tokio::time::timeout(VERIFY_WAIT, self.verify_slots.acquire()).await;
        let Ok(Ok(_slot)) = slot else {
            tracing::warn!("sign-in refused: every password-check slot was busy");
            return Verdict::Busy;
        };
        let matches = tokio::task::spawn_blocking(move || {
            PasswordHash::new(&phc)
                .map(|hash| {
                    Argon2::default()
                        .verify_password(password.as_bytes(), &hash)
                        .is_ok()
                })
                .unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if matches && known {
            Verdict::Match
        } else {
            Verdict::NoMatch
        }
    }

    /// The dashboard: signed-in users only, then three queries, then the template.
    async fn dashboard(&self, sessions: &Sessions, req: &Request<RequestBody>) -> Response<Body> {
        let session = match sessions.read(req.headers()) {
            Some(s) if s.user().is_some() => s,
            _ => return login_redirect(LOGIN_PAGE, req.uri()),
        };
        // An active admin's cookie is renewed past half its life, as the layer does.
        let renewed = sessions.renewed(&session);
        let (worlds, fortunes, rows) = tokio::join!(
            self.count("SELECT COUNT(*) FROM world"),
            self.count("SELECT COUNT(*) FROM fortune"),
            self.db.query(
                "SELECT id, randomnumber FROM world WHERE id <= $1 ORDER BY id",
                vec![Value::from(DASHBOARD_ROWS)],
            ),
        );
        let page = (|| {
            let rows = rows?
                .iter()
                .map(|r| {
                    Ok(WorldRow {
                        id: r.get(0)?,
                        random_number: r.get(1)?,
                    })
                })
                .collect::<Result<Vec<_>, DbError>>()?;
            Ok::<_, DbError>(DashboardPage {
                user: session.user().unwrap_or_default(),
                csrf: session.csrf_token(),
                worlds: worlds?,
                fortunes: fortunes?,
                rows,
                failed_logins: self.failed_logins.get(),
                worker: std::process::id(),
            })
        })();
        match page {
            Ok(page) => {
                let r = no_store(self.templates.page("admin/dashboard.html", page));
                match &renewed {
                    Some(s) => with_session(sessions, s, r),
                    None => r,
                }
            }
            Err(e) => {
                tracing::warn!("dashboard: {e}");
                let status = StatusCode::from_u16(e.http_status())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                text(
                    status,
                    &format!("the dashboard's data is unavailable: {e}\n"),
                )
            }
        }
    }

    async fn count(&self, sql: &str) -> Result<i64, DbError> {
        match self.db.query_one(sql, vec![]).await? {
            Some(row) => row.get(0),
            None => Ok(0),
        }
    }

    /// Signs out: the cookie is deleted; back to the login page.
    async fn logout(&self, sessions: &Sessions, req: Request<RequestBody>) -> Response<Body> {
        let Some(session) = sessions.read(req.headers()) else {
            return see_other(LOGIN_PAGE);
        };
        let form: LogoutForm = match read_form(req).await {
            Ok(form) => form,
            Err(r) => return r,
        };
        if !session.check_csrf(&form.csrf) {
            return text(StatusCode::FORBIDDEN, "invalid or missing CSRF token\n");
        }
        tracing::info!(user = ?session.user(), "signed out");
        let mut r = see_other(LOGIN_PAGE);
        r.headers_mut()
            .insert(header::SET_COOKIE, sessions.clear_cookie());
        r
    }

    /// The login page for `session` with `status`.
    fn form(
        &self,
        session: &Session,
        next: &str,
        name: &str,
        error: Option<&str>,
        status: StatusCode,
    ) -> Response<Body> {
        let page = LoginPage {
            csrf: session.csrf_token(),
            next,
            name,
            error,
            worker: std::process::id(),
        };
        let mut r = self.templates.page("admin/login.html", page);
        if r.status() == StatusCode::OK {
            *r.status_mut() = status;
        }
        no_store(r)
    }
}

/// `brisk-demo hash-password`: reads a password (one line) and prints its argon2id hash with
/// the default cost, for `--admin-password-hash-file`.
pub(crate) fn hash_password_from_stdin() -> anyhow::Result<()> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']);
    anyhow::ensure!(!password.is_empty(), "no password on standard input");
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("{e}"))?;
    let hash = Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("{hash}");
    Ok(())
}

/// `page` with the cookie that stores a new `session`.
fn with_session(
    sessions: &Sessions,
    session: &Session,
    mut page: Response<Body>,
) -> Response<Body> {
    page.headers_mut()
        .insert(header::SET_COOKIE, sessions.set_cookie(session));
    page
}

/// A urlencoded form from the request body: 413 past [`MAX_FORM`], 400 if it does not parse.
async fn read_form<T: for<'de> Deserialize<'de>>(
    req: Request<RequestBody>,
) -> Result<T, Response<Body>> {
    let body = match Limited::new(req.into_body(), MAX_FORM).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            return Err(text(StatusCode::PAYLOAD_TOO_LARGE, "form too large\n"))
        }
        Err(_) => return Err(text(StatusCode::BAD_REQUEST, "bad request body\n")),
    };
    serde_urlencoded::from_bytes(&body)
        .map_err(|e| text(StatusCode::BAD_REQUEST, &format!("bad form: {e}\n")))
}

/// The value of `name` in a query string, decoded.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query?)
        .ok()?
        .into_iter()
        .find_map(|(k, v)| (k == name).then_some(v))
}

fn see_other(location: &str) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::try_from(location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    no_store(r)
}

/// Pages that carry a session's CSRF token or its data stay out of shared caches.
fn no_store(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut r = Response::new(Body::from(message.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
