//! [`RequestBody`]: the body of a request as handlers receive it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use std::future::Future;

use http_body::{Frame, SizeHint};
use http_body_util::Limited;
use hyper::body::Incoming;

use super::activity::Activity;
use crate::runtime::handler::BoxError;

/// A request body, limited to the server's max package size: reading past it fails with
/// [`http_body_util::LengthLimitError`] (axum turns that into 413).
///
/// Small bodies with a `Content-Length` arrive whole (no allocation of their own); others
/// stream in as the client sends them.
///
/// ```
/// use http_body_util::BodyExt;
/// # async fn f(req: http::Request<brisk::http::RequestBody>) -> Result<(), brisk::BoxError> {
/// let bytes = req.into_body().collect().await?.to_bytes();
/// # Ok(()) }
/// ```
pub struct RequestBody {
    kind: Kind,
    /// How the body timeout (`HttpLimits::body_read_timeout`) reaches it.
    timing: Timing,
    /// The client's address, set as the request reaches the handler.
    remote: Option<SocketAddr>,
}

/// How a body still to arrive is timed.
pub(crate) enum Timing {
    /// Not at all: it came whole, or has ended.
    Untimed,
    /// By its connection's sweep (HTTP/1.1 through hyper), which answers 408 and closes: the
    /// connection's activity is told when the handler waits for bytes that have not come,
    /// and when it is done with the body.
    Swept(Arc<Activity>),
    /// By itself (an HTTP/2 stream: streams share their connection, which stays open), with
    /// the error [`BodyTimedOut`].
    Own(Box<Deadline>),
}

/// The body timeout of an HTTP/2 stream's body.
pub(crate) struct Deadline {
    /// `HttpLimits::body_read_timeout`.
    limit: std::time::Duration,
    /// `HttpLimits::min_body_rate`: bytes a second that earn a second more.
    min_rate: u64,
    /// When the handler first waited for bytes that had not come.
    since: Option<tokio::time::Instant>,
    /// Bytes received so far.
    received: u64,
    /// Fires at the deadline (made at the first wait).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Timing {
    /// An HTTP/2 stream's timing: `limit`, extended a second per `min_rate` bytes received.
    pub(crate) fn own(limit: std::time::Duration, min_rate: u64) -> Self {
        Timing::Own(Box::new(Deadline {
            limit,
            min_rate,
            since: None,
            received: 0,
            sleep: None,
        }))
    }
}

impl Deadline {
    /// Whether the deadline passed, as the handler waits again (arming the timer for `cx`).
    fn passed(&mut self, cx: &mut Context<'_>) -> bool {
        let since = *self.since.get_or_insert_with(tokio::time::Instant::now);
        let earned_ms = (self.received.saturating_mul(1000))
            .checked_div(self.min_rate)
            .unwrap_or(0);
        let at = since + self.limit + std::time::Duration::from_millis(earned_ms);
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if sleep.deadline() != at {
            sleep.as_mut().reset(at);
        }
        sleep.as_mut().poll(cx).is_ready()
    }
}

/// An HTTP/2 request body that stopped arriving (or trickled in) past the server's
/// `HttpLimits::body_read_timeout`: reading it fails with this. (Over HTTP/1.1 the
/// connection is answered 408 and closed instead.) Answer 408:
///
/// ```
/// use http_body_util::BodyExt;
/// # async fn f(req: http::Request<brisk::http::RequestBody>) -> u16 {
/// match req.into_body().collect().await {
///     Ok(_) => 200,
///     Err(e) if e.is::<brisk::http::BodyTimedOut>() => 408,
///     Err(_) => 400,
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body did not arrive in time (HttpLimits::body_read_timeout)")]
pub struct BodyTimedOut;

enum Kind {
    /// Received whole (`None` once read, or when there is no body).
    Full(Option<Bytes>),
    /// Read by hyper as it arrives, cut off at the limit.
    Incoming(Limited<Incoming>),
}

impl RequestBody {
    /// No body.
    pub(crate) fn empty() -> Self {
        RequestBody {
            kind: Kind::Full(None),
            timing: Timing::Untimed,
            remote: None,
        }
    }

    /// A body received whole.
    pub(crate) fn full(bytes: Bytes) -> Self {
        RequestBody {
            kind: Kind::Full(Some(bytes).filter(|b| !b.is_empty())),
            timing: Timing::Untimed,
            remote: None,
        }
    }

    /// A body read by hyper, cut off at `limit` bytes, timed by `timing` (`Untimed` when it
    /// has ended already).
    pub(crate) fn limited(body: Incoming, limit: usize, timing: Timing) -> Self {
        RequestBody {
            kind: Kind::Incoming(Limited::new(body, limit)),
            timing,
            remote: None,
        }
    }

    /// The address of the client that sent the request: the connection's peer (behind a
    /// proxy, the proxy). Set for every request a Brisk HTTP server hands to a handler; it
    /// travels with the body, so keep it before replacing the body.
    ///
    /// ```
    /// # fn f(req: http::Request<brisk::http::RequestBody>) {
    /// let client = req.body().remote_addr().map(|a| a.ip());
    /// # }
    /// ```
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// Records the client's address.
    pub(crate) fn set_remote_addr(&mut self, remote: SocketAddr) {
        self.remote = Some(remote);
    }

    /// The connection's activity, if the body is still to arrive and is timed.
    pub(crate) fn timed_activity(&self) -> Option<&Arc<Activity>> {
        match &self.timing {
            Timing::Swept(a) => Some(a),
            _ => None,
        }
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if let Timing::Swept(a) = &self.timing {
            a.body_done();
        }
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Kind::Incoming(b) => {
                let polled = Pin::new(b).poll_frame(cx);
                match (&mut this.timing, &polled) {
                    (Timing::Untimed, _) => {}
                    (Timing::Swept(a), Poll::Pending) => a.waiting_for_body(true),
                    (Timing::Swept(a), Poll::Ready(Some(Ok(_)))) => a.waiting_for_body(false),
                    (Timing::Swept(a), Poll::Ready(_)) => {
                        a.body_done();
                        this.timing = Timing::Untimed;
                    }
                    (Timing::Own(d), Poll::Pending) => {
                        if d.passed(cx) {
                            this.timing = Timing::Untimed;
                            this.kind = Kind::Full(None);
                            return Poll::Ready(Some(Err(BodyTimedOut.into())));
                        }
                    }
                    (Timing::Own(d), Poll::Ready(Some(Ok(frame)))) => {
                        let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                        d.received = d.received.saturating_add(n);
                    }
                    (Timing::Own(_), Poll::Ready(_)) => this.timing = Timing::Untimed,
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_none(),
            Kind::Incoming(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Incoming(b) => b.size_hint(),
        }
    }
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBody")
            .field("size_hint", &http_body::Body::size_hint(self))
            .finish()
    }
}
