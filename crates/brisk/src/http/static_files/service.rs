//! [`StaticFiles`] as a `tower::Service`, so that it nests in a router (an axum `Router`,
//! `nest_service("/static", files)`), and [`StaticBody`], the `Send` body it answers with.
//!
//! A router boxes every response body into a type of its own, which Brisk's HTTP/1.1 writer
//! cannot look into; yet a file body should still go out with `sendfile(2)`. So each file
//! body is answered with a claim on its range in the response's extensions, which pass
//! through routers untouched, and `HttpServer::service` takes the range back from the claim
//! when the body it gets is evidently the same one, unread (see `FileClaim` in
//! `file_body.rs` for what "evidently" checks).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Frame, SizeHint};

use super::StaticFiles;
use crate::http::file_body::FileBody;
use crate::http::Body;

/// The body of a [`StaticFiles`] response as a `tower::Service`: the file's bytes from
/// memory, a range of the open file, or nothing (`HEAD`, `304`, errors). Unlike [`Body`] it
/// is `Send`, as an axum `Router` requires of the services nested in it.
///
/// Served through [`HttpServer::service`](crate::http::HttpServer::service), a file range
/// is sent with `sendfile(2)` on Brisk's own HTTP/1.1 path, router or not, as long as no
/// layer in between read, replaced or re-encoded the body. Elsewhere (TLS, HTTP/2, another
/// server) it is read in chunks like any body. It converts into a [`Body`] without a copy.
pub struct StaticBody {
    kind: Kind,
}

enum Kind {
    Empty,
    Full(Option<Bytes>),
    File(Box<FileBody>),
}

impl StaticBody {
    /// No body.
    pub(super) fn empty() -> Self {
        StaticBody { kind: Kind::Empty }
    }

    /// Bytes from memory.
    pub(super) fn full(bytes: Bytes) -> Self {
        StaticBody {
            kind: Kind::Full(Some(bytes)),
        }
    }

    /// A range of an open file.
    pub(super) fn file(body: FileBody) -> Self {
        StaticBody {
            kind: Kind::File(Box::new(body)),
        }
    }

    /// Whether the body is a range of an open file (rather than bytes in memory, or
    /// nothing).
    pub fn is_file(&self) -> bool {
        matches!(self.kind, Kind::File(_))
    }
}

impl std::fmt::Debug for StaticBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Empty => "empty",
            Kind::Full(_) => "bytes",
            Kind::File(_) => "file range",
        };
        f.debug_struct("StaticBody")
            .field("kind", &kind)
            .field("len", &http_body::Body::size_hint(self).exact())
            .finish()
    }
}

impl From<StaticBody> for Body {
    fn from(body: StaticBody) -> Body {
        match body.kind {
            Kind::Empty | Kind::Full(None) => Body::empty(),
            Kind::Full(Some(bytes)) => Body::full(bytes),
            Kind::File(file) => Body::from_file_body(*file),
        }
    }
}

impl http_body::Body for StaticBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(bytes) => Poll::Ready(
                bytes
                    .take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            Kind::File(file) => Pin::new(&mut **file).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(bytes) => bytes.as_ref().is_none_or(Bytes::is_empty),
            Kind::File(file) => file.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::File(file) => file.size_hint(),
        }
    }
}

/// Answers each request for its whole URL path: nest it at its mount point (a router strips
/// the mount point from the path it passes on). The request's body is not read. A directory
/// without its trailing slash is redirected relative to the path (`./docs/`), which is right
/// whatever the mount point.
impl<B> tower_service::Service<Request<B>> for StaticFiles {
    type Response = Response<StaticBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<StaticBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let files = self.clone();
        // Without its body, which need not be `Sync` (nor is it needed).
        let req = req.map(drop);
        Box::pin(async move {
            let mut resp = files.answer(&req, req.uri().path(), true).await;
            if let Kind::File(file) = &mut resp.body_mut().kind {
                let claim = file.claim();
                resp.extensions_mut().insert(claim);
            }
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use tower_service::Service;

    use crate::http::server::brisk_response;
    use crate::http::static_files::testing::*;
    use crate::http::testing::noise;

    /// A router with the files nested at `/static`, as an axum user writes it.
    fn router(files: StaticFiles) -> axum::Router {
        axum::Router::new()
            .route("/", axum::routing::get(|| async { "home" }))
            .nest_service("/static", files)
    }

    async fn call(router: &axum::Router, uri: &str) -> Response<axum::body::Body> {
        let req = Request::get(uri).body(axum::body::Body::empty()).unwrap();
        let mut router = router.clone();
        Service::call(&mut router, req).await.unwrap()
    }

    #[test]
    fn a_file_nested_in_an_axum_router_is_still_a_file_body_for_sendfile() {
        let dir = TempDir::new();
        let big = noise(100_000);
        dir.write("big.bin", &big);
        dir.write("small.txt", b"small");
        run(async {
            let router = router(dir.files());
            // Through axum, then through the adapter of `HttpServer::service`.
            let resp = brisk_response(call(&router, "/static/big.bin").await);
            assert_eq!(resp.status(), StatusCode::OK);
            assert_eq!(header(&resp, "content-length"), "100000");
            assert!(
                resp.body().is_file(),
                "boxed by axum, not sent with sendfile"
            );
            assert_eq!(body(resp).await, big);
            // Ranges too.
            let req = Request::get("/static/big.bin")
                .header("range", "bytes=1000-69999")
                .body(axum::body::Body::empty())
                .unwrap();
            let resp = brisk_response(Service::call(&mut router.clone(), req).await.unwrap());
            assert_eq!(resp.status(), StatusCode::PARTIAL_CONTENT);
            assert!(resp.body().is_file());
            assert_eq!(body(resp).await, &big[1000..70_000]);
            // Small files are bytes from memory; the router's own routes still work.
            let resp = brisk_response(call(&router, "/static/small.txt").await);
            assert!(!resp.body().is_file());
            assert_eq!(body(resp).await, b"small");
            assert_eq!(
                body(brisk_response(call(&router, "/").await)).await,
                b"home"
            );
            let resp = brisk_response(call(&router, "/static/missing").await);
            assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        });
    }

    #[test]
    fn a_file_body_a_layer_touched_is_sent_as_that_layer_left_it() {
        let dir = TempDir::new();
        let big = noise(100_000);
        dir.write("big.bin", &big);
        run(async {
            let router = router(dir.files());
            // Re-encoded (a compression layer sets `content-encoding`).
            let mut resp = call(&router, "/static/big.bin").await;
            resp.headers_mut()
                .insert("content-encoding", http::HeaderValue::from_static("gzip"));
            assert!(!brisk_response(resp).body().is_file());
            // Replaced by a body of the same length.
            let (parts, _) = call(&router, "/static/big.bin").await.into_parts();
            let other = axum::body::Body::from(vec![b'x'; 100_000]);
            let resp = brisk_response(Response::from_parts(parts, other));
            assert!(!resp.body().is_file());
            assert_eq!(body(resp).await, vec![b'x'; 100_000]);
            // Read in part already.
            let mut resp = call(&router, "/static/big.bin").await;
            let first = resp.body_mut().frame().await.unwrap().unwrap();
            let first = first.into_data().unwrap();
            let resp = brisk_response(resp);
            assert!(!resp.body().is_file());
            let mut got = first.to_vec();
            got.extend(body(resp).await);
            assert_eq!(got, big);
        });
    }

    #[test]
    fn a_directory_is_redirected_relative_to_the_mount_point() {
        let dir = TempDir::new();
        dir.write("docs/index.html", b"<h1>docs</h1>");
        run(async {
            let router = router(dir.files());
            let resp = brisk_response(call(&router, "/static/docs?x=1").await);
            assert_eq!(resp.status(), StatusCode::MOVED_PERMANENTLY);
            assert_eq!(header(&resp, "location"), "./docs/?x=1");
            let resp = brisk_response(call(&router, "/static/docs/").await);
            assert_eq!(body(resp).await, b"<h1>docs</h1>");
        });
    }
}
