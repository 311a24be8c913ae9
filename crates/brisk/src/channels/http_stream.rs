//! Channels over HTTP streaming: the [event stream](Channels::event_stream)'s events as
//! newline-delimited JSON (`application/x-ndjson`), one push per line, for clients that read
//! lines rather than server-sent events (`curl -N … | jq`, Python's `iter_lines`, a mobile
//! app's HTTP client).
//!
//! The same query, token, permissions, refusals and events: first
//! `{"connected":{…}}`, then each channel's `{"channel":C,"subscribed":{…}}`, then its pushes;
//! at the end `{"close":{"code":N,"reason":"…"}}` (token expired, disconnected). An empty line
//! is a keep-alive.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;

use super::hub::Channels;
use crate::http::Body;
use crate::runtime::handler::BoxError;

impl Channels {
    /// The channels the request names as newline-delimited JSON (see the module docs); a
    /// refusal as [`event_stream`](Channels::event_stream) answers it.
    ///
    /// ```no_run
    /// # async fn f(channels: brisk::channels::Channels, req: http::Request<()>) {
    /// let response = channels.http_stream(&req).await; // GET /connection/stream
    /// # }
    /// ```
    pub async fn http_stream<B>(&self, req: &Request<B>) -> Response<Body> {
        let response = self.event_stream(req).await;
        if response.status() != StatusCode::OK {
            return response;
        }
        let (mut parts, events) = response.into_parts();
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        Response::from_parts(parts, Body::new(Lines { events }))
    }
}

/// An event stream's body, each event (Brisk sends one per frame) made a line.
struct Lines {
    events: Body,
}

impl http_body::Body for Lines {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let frame = ready!(Pin::new(&mut self.events).poll_frame(cx));
        Poll::Ready(frame.map(|frame| {
            frame.map(|frame| match frame.into_data() {
                Ok(event) => Frame::data(line_of(&event)),
                Err(other) => other,
            })
        }))
    }
}

/// One encoded event as one line: its data (a push of the protocol: JSON without newlines),
/// a close event's as `{"close":…}`, a comment (keep-alive) as an empty line.
fn line_of(event: &[u8]) -> Bytes {
    let text = String::from_utf8_lossy(event);
    let mut close = false;
    let mut data = Vec::new();
    for line in text.lines() {
        if line == "event: close" {
            close = true;
        } else if let Some(d) = line.strip_prefix("data: ") {
            data.push(d);
        }
    }
    let data = data.join("\n");
    match (close, data.is_empty()) {
        (_, true) => Bytes::from_static(b"\n"),
        (true, false) => Bytes::from(format!("{{\"close\":{data}}}\n")),
        (false, false) => Bytes::from(data + "\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::line_of;
    use crate::http::sse::Event;

    #[test]
    fn each_event_is_one_line() {
        let push = Event::new(r#"{"channel":"a","pub":{"data":1}}"#).encode();
        assert_eq!(
            &line_of(&push)[..],
            b"{\"channel\":\"a\",\"pub\":{\"data\":1}}\n"
        );
        let close = Event::new(r#"{"code":4003,"reason":"bye"}"#)
            .event("close")
            .encode();
        assert_eq!(
            &line_of(&close)[..],
            b"{\"close\":{\"code\":4003,\"reason\":\"bye\"}}\n"
        );
        assert_eq!(&line_of(b": keep-alive\n\n")[..], b"\n");
    }
}
