//! [`RequestBody`]: the body of a request as handlers receive it.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::Limited;
use hyper::body::Incoming;

use crate::server::BoxError;

/// A request body, limited to the server's max package size: reading past it fails with
/// [`http_body_util::LengthLimitError`] (axum turns that into 413).
///
/// Requests without a body (most `GET`s) carry an empty one that costs nothing.
///
/// ```
/// use http_body_util::BodyExt;
/// # async fn f(req: http::Request<brisk::http::RequestBody>) -> Result<(), brisk::BoxError> {
/// let bytes = req.into_body().collect().await?.to_bytes();
/// # Ok(()) }
/// ```
pub struct RequestBody {
    /// `None`: the request has no body.
    incoming: Option<Limited<Incoming>>,
}

impl RequestBody {
    /// No body.
    pub(crate) fn empty() -> Self {
        RequestBody { incoming: None }
    }

    /// A body read by hyper, cut off at `limit` bytes.
    pub(crate) fn limited(body: Incoming, limit: usize) -> Self {
        RequestBody {
            incoming: Some(Limited::new(body, limit)),
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
        match &mut self.get_mut().incoming {
            None => Poll::Ready(None),
            Some(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBody")
            .field("empty", &self.incoming.is_none())
            .finish()
    }
}
