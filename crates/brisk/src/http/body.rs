//! [`Body`]: the response body type of Brisk's HTTP handlers.

use std::any::Any;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;

use super::file_body::{Chunks, FileBody};
use crate::runtime::handler::BoxError;

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

    /// `len` bytes of an open file from `offset`: on Brisk's own HTTP/1.1 path (plaintext
    /// `http://`) sent with `sendfile(2)` straight from the page cache to the socket,
    /// elsewhere (TLS, HTTP/2, connections handed to hyper) read in chunks, on the worker
    /// thread when the pages are in memory and on the blocking pool when they are not (see
    /// [`static_files`](super::static_files) for the details, which are the same).
    ///
    /// The response gets a `content-length` of `len` unless it has one. The file should be
    /// a regular file; one that turns out shorter than `offset + len` when it is sent ends
    /// the response early and closes the connection. Takes a `File`, or an
    /// `Arc<File>` to send from one open file several times.
    ///
    /// ```no_run
    /// use brisk::http::{Body, HttpServer};
    ///
    /// let server = HttpServer::new("http://127.0.0.1:8080").unwrap().try_handler(|_req| async {
    ///     let file = std::fs::File::open("video.mp4")?;
    ///     let len = file.metadata()?.len();
    ///     // The first mebibyte, or the whole file if it is smaller.
    ///     Ok::<_, std::io::Error>(http::Response::new(Body::file(file, 0, len.min(1 << 20))))
    /// });
    /// ```
    ///
    /// (Opening and `stat`ing a file block the worker thread for as long as the disk takes;
    /// [`StaticFiles`](super::static_files::StaticFiles) does both on the blocking pool and
    /// keeps small files in memory.)
    pub fn file(file: impl Into<Arc<std::fs::File>>, offset: u64, len: u64) -> Self {
        Body::from_file_body(FileBody::new(file.into(), offset, len, Chunks::DEFAULT))
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

    /// The bytes of a body held in memory in one piece (`None` for streams, files and an
    /// empty body).
    pub(crate) fn into_full(self) -> Option<Bytes> {
        match self.kind {
            Kind::Full(b) => b,
            _ => None,
        }
    }

    /// The bytes of a body held in memory in one piece (`None` for streams, files and no
    /// body).
    #[cfg(feature = "compression")]
    pub(crate) fn as_full(&self) -> Option<&Bytes> {
        match &self.kind {
            Kind::Full(bytes) => bytes.as_ref(),
            _ => None,
        }
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

#[cfg(test)]
mod tests {
    use http_body::Body as _;
    use http_body_util::BodyExt;

    use super::*;
    use crate::http::server::brisk_response;
    use crate::http::testing::{noise, run, ScratchDir};

    #[test]
    fn a_file_body_is_the_range_and_stays_a_file_through_a_service() {
        let dir = ScratchDir::new("body-file");
        let contents = noise(70_000);
        let path = dir.write("f.bin", &contents);
        run(async {
            let file = Arc::new(std::fs::File::open(&path).unwrap());
            let body = Body::file(file.clone(), 10, 65_536);
            assert!(body.is_file());
            assert_eq!(body.size_hint().exact(), Some(65_536));
            let got = body.collect().await.unwrap().to_bytes();
            assert!(got[..] == contents[10..65_546]);
            // What a `tower::Service` answers with goes through `Body::new`: a `Body` is
            // kept as it is, so a file is still sent with sendfile.
            let resp = brisk_response(http::Response::new(Body::file(file, 0, 70_000)));
            assert!(resp.body().is_file());
            let kept = Body::new(Body::from("x"));
            assert!(!kept.is_streaming(), "boxed again");
        });
    }
}
