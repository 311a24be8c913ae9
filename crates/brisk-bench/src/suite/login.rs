//! Signing in to a target before a scenario loads pages that need a session: a plain
//! HTTP/1.1 exchange over one loopback connection per request, as a browser does it (get the
//! form and its cookie, post the form with its CSRF token, keep the cookie the answer sets).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::suite::config::LoginConfig;

/// The `Cookie` header value of a session signed in on the target at `port`.
pub(super) fn sign_in(port: u16, login: &LoginConfig) -> Result<String, String> {
    let form_page = exchange(port, &format!("GET {} HTTP/1.1\r\n", login.form_path), "")?;
    let cookie =
        set_cookie(&form_page).ok_or_else(|| format!("GET {} set no cookie", login.form_path))?;
    let csrf = hidden_field(&form_page, "csrf")
        .ok_or_else(|| format!("GET {}: no csrf field in the form", login.form_path))?;
    let body = format!("{}&csrf={csrf}", login.form);
    let head = format!(
        "POST {} HTTP/1.1\r\nCookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
        login.post_path,
        body.len()
    );
    let answer = exchange(port, &head, &body)?;
    let status = answer.split(' ').nth(1).unwrap_or_default();
    if !status.starts_with('2') && !status.starts_with('3') {
        let first = answer.lines().next().unwrap_or_default();
        return Err(format!("POST {} answered {first}", login.post_path));
    }
    set_cookie(&answer).ok_or_else(|| format!("POST {} set no cookie", login.post_path))
}

/// Sends `head` (request line and headers, without Host and the blank line) and `body` on a
/// new connection; returns the whole answer as text.
fn exchange(port: u16, head: &str, body: &str) -> Result<String, String> {
    let fail = |e: std::io::Error| format!("sign-in on port {port}: {e}");
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(fail)?;
    let request = format!("{head}Host: 127.0.0.1\r\nConnection: close\r\n\r\n{body}");
    s.write_all(request.as_bytes()).map_err(fail)?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).map_err(fail)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// The `name=value` of the first `Set-Cookie` of an answer.
fn set_cookie(answer: &str) -> Option<String> {
    let head = answer.split("\r\n\r\n").next()?;
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("set-cookie").then(|| {
            value
                .trim()
                .split(';')
                .next()
                .unwrap_or_default()
                .to_string()
        })
    })
}

/// The value of the hidden input `name` in an HTML page.
fn hidden_field(page: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let at = page.find(&marker)? + marker.len();
    let rest = &page[at..];
    Some(rest[..rest.find('"')?].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_and_the_token_are_read_from_an_answer() {
        let answer = "HTTP/1.1 200 OK\r\nset-cookie: s=abc; Path=/; HttpOnly\r\n\r\n\
                      <input type=\"hidden\" name=\"csrf\" value=\"00ff\">";
        assert_eq!(set_cookie(answer).as_deref(), Some("s=abc"));
        assert_eq!(hidden_field(answer, "csrf").as_deref(), Some("00ff"));
        assert_eq!(hidden_field(answer, "next"), None);
        assert_eq!(set_cookie("HTTP/1.1 200 OK\r\n\r\nset-cookie: no"), None);
    }
}
