//! [`AccessLog`]: one line per request (common, combined or JSON lines), written off the
//! request path.
//!
//! Each worker opens the file on start and appends lines to a buffer in memory that a thread
//! of its own writes out (every 100 ms, or sooner when 64 KiB are waiting). When the disk
//! falls behind and the buffer is full, lines are dropped and counted (`log_lines_dropped`
//! in `status --json`), never the requests slowed. `reopen-logs` on the command line (or
//! `SIGHUP` to the master) makes every worker open the file again, for logrotate:
//!
//! ```text
//! /var/log/app/access.log {
//!     daily
//!     rotate 14
//!     postrotate
//!         /usr/local/bin/app reopen-logs
//!     endscript
//! }
//! ```
//!
//! The values of query parameters that carry credentials (`?token=` of a WebSocket or an event
//! stream, `api_key`, `password`, an OAuth `code`…) are written as `***`; a new file is made
//! readable by its owner and group only.
//!
//! Lines carry the worker and connection ids, so they can be matched with the app's own log
//! (whose lines from a request carry the same ids):
//!
//! ```text
//! 127.0.0.1 - - [23/Nov/2026:13:55:36 +0000] "GET /tpl/page HTTP/1.1" 200 4211 "-" "curl/8.5" w0 c17 0.412ms
//! {"time":"2026-11-23T13:55:36Z","remote":"127.0.0.1","method":"GET","path":"/tpl/page","version":"HTTP/1.1","status":200,"bytes":4211,"referer":null,"user_agent":"curl/8.5","worker":0,"conn":17,"duration_us":412}
//! ```
//!
//! ```no_run
//! use brisk::http::access_log::{AccessLog, LogFormat};
//! use brisk::http::HttpServer;
//!
//! let server = HttpServer::new("http://127.0.0.1:8080")
//!     .unwrap()
//!     .access_log(AccessLog::new("logs/access.log", LogFormat::Combined));
//! ```

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode, Uri, Version};

use super::Body;
use crate::log_file::LogFile;

/// The layout of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// NCSA common log format, then worker, connection and duration.
    Common,
    /// Common, with the referer and user agent (Apache's and nginx's "combined").
    Combined,
    /// One JSON object per line.
    Json,
}

/// Where and how a server logs its requests; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct AccessLog {
    path: PathBuf,
    format: LogFormat,
    max_buffer: usize,
}

impl AccessLog {
    /// Requests logged to `path` (created if missing, appended to) in `format`.
    pub fn new(path: impl Into<PathBuf>, format: LogFormat) -> Self {
        AccessLog {
            path: path.into(),
            format,
            max_buffer: 4 << 20,
        }
    }

    /// Bytes of lines that may wait in memory for the disk (default 4 MiB); past it, lines
    /// are dropped and counted.
    pub fn max_buffer(mut self, bytes: usize) -> Self {
        self.max_buffer = bytes;
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the file for this worker.
    pub(crate) fn open(&self) -> std::io::Result<AccessLogWriter> {
        Ok(AccessLogWriter {
            file: LogFile::open(&self.path, self.max_buffer)?,
            format: self.format,
            clock: std::cell::RefCell::new(Clock::default()),
        })
    }
}

/// A worker's open access log.
pub(crate) struct AccessLogWriter {
    file: LogFile,
    format: LogFormat,
    clock: std::cell::RefCell<Clock>,
}

/// What the log needs of a request, taken before the handler gets it.
pub(crate) struct RequestLine {
    method: Method,
    uri: Uri,
    version: Version,
    referer: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
    started: std::time::Instant,
}

impl RequestLine {
    /// The parts of a request the log line shows; `started` is when it arrived.
    pub(crate) fn of<B>(req: &http::Request<B>, started: std::time::Instant) -> Self {
        RequestLine {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            referer: req.headers().get(header::REFERER).cloned(),
            user_agent: req.headers().get(header::USER_AGENT).cloned(),
            started,
        }
    }
}

impl AccessLogWriter {
    /// Logs `req`, answered with `resp`, on connection `conn` from `remote` of worker
    /// `worker`.
    pub(crate) fn log(
        &self,
        req: &RequestLine,
        resp: &Response<Body>,
        remote: SocketAddr,
        worker: usize,
        conn: u64,
    ) {
        let took = req.started.elapsed();
        let bytes = body_bytes(resp.status(), resp.headers(), resp.body());
        let now = SystemTime::now();
        let mut clock = self.clock.borrow_mut();
        self.file.line(|out| match self.format {
            LogFormat::Common | LogFormat::Combined => {
                let _ = write!(
                    out,
                    "{} - - [{}] \"{} {} {}\" {} ",
                    remote.ip(),
                    clock.clf(now),
                    req.method,
                    Printable(&logged_target(&req.uri)),
                    version_text(req.version),
                    resp.status().as_u16(),
                );
                match bytes {
                    Some(n) => {
                        let _ = write!(out, "{n}");
                    }
                    None => out.push(b'-'),
                }
                if self.format == LogFormat::Combined {
                    let _ = write!(
                        out,
                        " \"{}\" \"{}\"",
                        Printable(header_text(&req.referer)),
                        Printable(header_text(&req.user_agent)),
                    );
                }
                let _ = write!(out, " w{worker} c{conn} {:.3}ms", millis(took));
            }
            LogFormat::Json => {
                let line = JsonLine {
                    time: clock.rfc3339(now),
                    remote: remote.ip(),
                    method: req.method.as_str(),
                    path: &logged_target(&req.uri),
                    version: version_text(req.version),
                    status: resp.status().as_u16(),
                    bytes,
                    referer: req.referer.as_ref().and_then(|v| v.to_str().ok()),
                    user_agent: req.user_agent.as_ref().and_then(|v| v.to_str().ok()),
                    worker,
                    conn,
                    duration_us: took.as_micros() as u64,
                };
                let _ = serde_json::to_writer(&mut *out, &line);
            }
        });
    }
}

/// One line of the JSON layout.
#[derive(serde::Serialize)]
struct JsonLine<'a> {
    time: &'a str,
    remote: std::net::IpAddr,
    method: &'a str,
    path: &'a str,
    version: &'static str,
    status: u16,
    bytes: Option<u64>,
    referer: Option<&'a str>,
    user_agent: Option<&'a str>,
    worker: usize,
    conn: u64,
    duration_us: u64,
}

fn version_text(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The body's length in bytes when it is known before sending.
fn body_bytes(status: StatusCode, headers: &HeaderMap, body: &Body) -> Option<u64> {
    if status == StatusCode::NOT_MODIFIED || status == StatusCode::NO_CONTENT {
        return Some(0);
    }
    if let Some(n) =
        (headers.get(header::CONTENT_LENGTH)).and_then(|v| v.to_str().ok()?.parse().ok())
    {
        return Some(n);
    }
    http_body::Body::size_hint(body).exact()
}

/// Query parameters whose values are credentials (a WebSocket's or an event stream's
/// `?token=`, an API key, an OAuth code…): the log shows `name=***` for them.
const SECRET_PARAMS: [&str; 13] = [
    "token",
    "access_token",
    "id_token",
    "refresh_token",
    "jwt",
    "password",
    "secret",
    "api_key",
    "apikey",
    "key",
    "auth",
    "signature",
    "code",
];

/// The request target as the log writes it: the path and query, the values of
/// [`SECRET_PARAMS`] replaced by `***` (borrowed as it is when there is no query).
fn logged_target(uri: &Uri) -> std::borrow::Cow<'_, str> {
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let Some(query) = uri.query() else {
        return target.into();
    };
    let is_secret = |name: &str| {
        let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
        SECRET_PARAMS.iter().any(|s| name.eq_ignore_ascii_case(s))
    };
    if !query
        .split('&')
        .any(|p| is_secret(p.split('=').next().unwrap_or("")))
    {
        return target.into();
    }
    let mut out = String::with_capacity(target.len());
    out.push_str(uri.path());
    for (i, param) in query.split('&').enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        match param.split_once('=') {
            Some((name, _)) if is_secret(name) => {
                out.push_str(name);
                out.push_str("=***");
            }
            _ => out.push_str(param),
        }
    }
    out.into()
}

fn header_text(v: &Option<HeaderValue>) -> &str {
    v.as_ref().and_then(|v| v.to_str().ok()).unwrap_or("-")
}

/// Text for a quoted field: `"` and `\` escaped, control characters as `\xNN`, so a client
/// cannot forge a line.
struct Printable<'a>(&'a str);

impl std::fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                c if c.is_control() => write!(f, "\\x{:02x}", c as u32)?,
                c => write!(f, "{c}")?,
            }
        }
        Ok(())
    }
}

/// The time of the current second, formatted once per second.
#[derive(Default)]
struct Clock {
    second: u64,
    clf: String,
    rfc3339: String,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

impl Clock {
    fn at(&mut self, now: SystemTime) {
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if secs == self.second && !self.clf.is_empty() {
            return;
        }
        self.second = secs;
        let (y, m, d) = crate::civil::date_of((secs / 86_400) as i32);
        let (hh, mm, ss) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
        self.clf = format!(
            "{d:02}/{}/{y}:{hh:02}:{mm:02}:{ss:02} +0000",
            MONTHS[m as usize - 1]
        );
        self.rfc3339 = format!("{y}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z");
    }

    fn clf(&mut self, now: SystemTime) -> &str {
        self.at(now);
        &self.clf
    }

    fn rfc3339(&mut self, now: SystemTime) -> &str {
        self.at(now);
        &self.rfc3339
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_gregorian() {
        assert_eq!(crate::civil::date_of(11_016), (2000, 2, 29));
        let mut c = Clock::default();
        let t = UNIX_EPOCH + Duration::from_secs(1_795_441_536);
        assert_eq!(c.clf(t), "23/Nov/2026:13:45:36 +0000");
        assert_eq!(c.rfc3339(t), "2026-11-23T13:45:36Z");
    }

    #[test]
    fn credentials_in_the_query_are_not_logged() {
        let target = |t: &str| logged_target(&t.parse::<Uri>().unwrap()).into_owned();
        assert_eq!(target("/a?x=1&y"), "/a?x=1&y");
        assert_eq!(target("/a"), "/a");
        assert_eq!(
            target("/connection/sse?channel=c&token=eyJ.x.y&Api%5Fkey=k&x="),
            "/connection/sse?channel=c&token=***&Api%5Fkey=***&x="
        );
        assert_eq!(target("/cb?code=abc&state=s"), "/cb?code=***&state=s");
    }

    #[test]
    fn quotes_and_control_characters_cannot_forge_a_line() {
        let text = Printable("a\"b\\c\nd\u{1b}").to_string();
        assert_eq!(text, "a\\\"b\\\\c\\x0ad\\x1b");
    }
}
