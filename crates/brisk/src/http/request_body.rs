//! [`RequestBody`]: the body of a request as handlers receive it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::Limited;
use hyper::body::Incoming;

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
        }
    }

    /// A body received whole.
    pub(crate) fn full(bytes: Bytes) -> Self {
        RequestBody {
            kind: Kind::Full(Some(bytes).filter(|b| !b.is_empty())),
        }
    }

    /// A body read by hyper, cut off at `limit` bytes.
    pub(crate) fn limited(body: Incoming, limit: usize) -> Self {
        RequestBody {
            kind: Kind::Incoming(Limited::new(body, limit)),
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
        match &mut self.get_mut().kind {
            Kind::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Kind::Incoming(b) => Pin::new(b).poll_frame(cx),
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
