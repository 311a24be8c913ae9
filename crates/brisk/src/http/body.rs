//! [`Body`]: the response body type of Brisk's HTTP handlers.

use std::any::Any;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;

use super::file_body::FileBody;
use crate::server::BoxError;

/// A response body: empty, one buffer (no allocation beyond the bytes), or any
/// [`http_body::Body`] boxed (streams, files, SSE).
///
/// ```
/// use brisk::http::Body;
/// let hello = Body::from("Hello World");
/// let none = Body::empty();
/// ```
pub struct Body {
    kind: Kind,
}

enum Kind {
    Empty,
    Full(Option<Bytes>),
    /// Not `Send`: worker bodies may hold `Rc` state.
    Boxed(Pin<Box<dyn http_body::Body<Data = Bytes, Error = BoxError>>>),
    /// A range of an open file: read in chunks as a body, or sent with
    /// `sendfile(2)` by Brisk's own HTTP/1.1 path.
    File(Box<FileBody>),
}

impl Body {
    /// No body.
    pub fn empty() -> Self {
        Body { kind: Kind::Empty }
    }

    /// One buffer.
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        Body {
            kind: Kind::Full(Some(bytes.into())),
        }
    }

    /// Any body, for example a stream of frames. A `Body` given here is returned as it is
    /// (not boxed again), so that a file body from a `tower::Service` is still sent with
    /// `sendfile(2)`.
    pub fn new<B>(body: B) -> Self
    where
        B: http_body::Body<Data = Bytes> + 'static,
        B::Error: Into<BoxError>,
    {
        let mut body = Some(body);
        if let Some(same) = (&mut body as &mut dyn Any).downcast_mut::<Option<Body>>() {
            return same.take().unwrap_or_default();
        }
        let body = body.expect("taken only when it is a Body");
        Body {
            kind: Kind::Boxed(Box::pin(body.map_err(Into::into))),
        }
    }
}

impl Body {
    /// A range of an open file.
    pub(crate) fn from_file_body(body: FileBody) -> Self {
        Body {
            kind: Kind::File(Box::new(body)),
        }
    }

    /// Whether the body is produced as it is sent (not held in memory).
    pub(crate) fn is_streaming(&self) -> bool {
        matches!(self.kind, Kind::Boxed(_) | Kind::File(_))
    }

    /// Whether the body is a file range.
    pub(crate) fn is_file(&self) -> bool {
        matches!(self.kind, Kind::File(_))
    }

    /// The file range, when the body is one.
    pub(crate) fn as_file_mut(&mut self) -> Option<&mut FileBody> {
        match &mut self.kind {
            Kind::File(file) => Some(file),
            _ => None,
        }
    }
}

impl Default for Body {
    fn default() -> Self {
        Body::empty()
    }
}

macro_rules! body_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Body {
            fn from(v: $t) -> Self {
                Body::full(v)
            }
        }
    )*};
}
body_from!(Bytes, Vec<u8>, String, &'static str, &'static [u8]);

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.get_mut().kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            Kind::Boxed(b) => b.as_mut().poll_frame(cx),
            Kind::File(f) => Pin::new(&mut **f).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            Kind::Boxed(b) => b.is_end_stream(),
            Kind::File(f) => f.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Boxed(b) => b.size_hint(),
            Kind::File(f) => f.size_hint(),
        }
    }
}
