//! The demo's HTTP routes: the endpoints the benchmarks use.

use brisk::http::{Body, RequestBody};
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError};

const JSON: &str = r#"{"message":"Hello, World!"}"#;

fn with_type(body: &'static str, content_type: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn status(code: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = with_type(text, "text/plain; charset=utf-8");
    *r.status_mut() = code;
    r
}

/// Routes one request.
pub async fn route(req: Request<RequestBody>) -> Response<Body> {
    let get = matches!(*req.method(), Method::GET | Method::HEAD);
    match req.uri().path() {
        "/" if get => with_type("Hello World", "text/plain"),
        "/json" if get => with_type(JSON, "application/json"),
        // Reads the whole body (so `Expect: 100-continue` is answered), then echoes it.
        "/echo" if req.method() == Method::POST => match req.into_body().collect().await {
            Ok(body) => Response::new(Body::from(body.to_bytes())),
            Err(e) if e.is::<LengthLimitError>() => {
                status(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n")
            }
            Err(_) => status(StatusCode::BAD_REQUEST, "bad request body\n"),
        },
        // Streams the request body back as it arrives: chunked in, chunked out.
        "/stream" if req.method() == Method::POST => Response::new(Body::new(req.into_body())),
        "/" | "/json" => {
            let mut r = status(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
        _ => status(StatusCode::NOT_FOUND, "not found\n"),
    }
}
