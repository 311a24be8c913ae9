//! [`RequestBody`]: the body of a request as handlers receive it.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
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
    /// The connection's activity, told when the handler waits for bytes that have not come
    /// and when it is done with the body (for the body timeout); HTTP/1.1 through hyper only.
    activity: Option<Arc<Activity>>,
    /// The client's address, set as the request reaches the handler.
    remote: Option<SocketAddr>,
}

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
            activity: None,
            remote: None,
        }
    }

    /// A body received whole.
    pub(crate) fn full(bytes: Bytes) -> Self {
        RequestBody {
            kind: Kind::Full(Some(bytes).filter(|b| !b.is_empty())),
            activity: None,
            remote: None,
        }
    }

    /// A body read by hyper, cut off at `limit` bytes; `activity` (HTTP/1.1) learns when the
    /// handler waits for it.
    pub(crate) fn limited(body: Incoming, limit: usize, activity: Option<Arc<Activity>>) -> Self {
        let activity = activity.filter(|_| !http_body::Body::is_end_stream(&body));
        RequestBody {
            kind: Kind::Incoming(Limited::new(body, limit)),
            activity,
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
        self.activity.as_ref()
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if let Some(a) = &self.activity {
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
                if let Some(a) = &this.activity {
                    match &polled {
                        Poll::Pending => a.waiting_for_body(true),
                        Poll::Ready(Some(Ok(_))) => a.waiting_for_body(false),
                        Poll::Ready(_) => {
                            a.body_done();
                            this.activity = None;
                        }
                    }
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
