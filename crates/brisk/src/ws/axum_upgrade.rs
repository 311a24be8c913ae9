//! [`WebSocketUpgrade`]: a WebSocket route in an axum `Router`, served by a named
//! [`WsEndpoint`](super::WsEndpoint) with all its features (groups, broadcast across workers
//! and instances, permessage-deflate, limits, the slow-consumer policy). The extractor is
//! `Send`, so the route compiles in an ordinary `Router<S>`; the endpoint, which is not, stays
//! on the worker's thread and is found by its [`EndpointName`] when the request comes. The
//! name carries the type of the endpoint's connection data, so the route attaches that type.
//!
//! ```no_run
//! use axum::{extract::Path, routing::get, Router};
//! use brisk::http::HttpServer;
//! use brisk::ws::{EndpointName, WebSocketUpgrade, WsEndpoint};
//!
//! /// Who a socket is, attached by the route: every callback reads it.
//! struct Member { user: String, room: String }
//! const CHAT: EndpointName<Member> = EndpointName::new("chat");
//!
//! let chat = WsEndpoint::new()
//!     .data::<Member>()
//!     .on_open(|ws, _| async move {
//!         let room = ws.with_data(|m| m.room.clone()).unwrap_or_default();
//!         ws.join(&room);
//!     })
//!     .on_message(|ws, msg| async move {
//!         let room = ws.with_data(|m| m.room.clone()).unwrap_or_default();
//!         brisk::ws::broadcast(&room, msg);
//!     });
//! let router: Router = Router::new().route(
//!     "/rooms/{room}/ws",
//!     get(|Path(room): Path<String>, ws: WebSocketUpgrade| async move {
//!         let user = "ada".to_string(); // the app's authentication, from the request
//!         ws.key(format!("user:{user}")).on_with(CHAT, Member { user, room })
//!     }),
//! );
//! let server = HttpServer::new("http://127.0.0.1:8080")
//!     .unwrap()
//!     .ws_endpoint(CHAT, chat)
//!     .service(router);
//! ```

use std::any::Any;
use std::convert::Infallible;

use axum_core::body::Body;
use axum_core::extract::FromRequestParts;
use axum_core::response::{IntoResponse, Response};
use http::request::Parts;
use http::StatusCode;

use super::codec::Attached;
use super::named::{self, EndpointName};

/// An axum extractor for a WebSocket upgrade request; [`on`](Self::on) answers it with the
/// handshake and hands the connection to the endpoint of that name (see the module docs).
/// A request that is not a valid upgrade is answered 400 (426 for another WebSocket version,
/// 403 for an origin the endpoint refuses) by `on`, as [`WsEndpoint::upgrade`] does.
///
/// [`WsEndpoint::upgrade`]: super::WsEndpoint::upgrade
pub struct WebSocketUpgrade {
    head: Parts,
    on_upgrade: Option<hyper::upgrade::OnUpgrade>,
    keys: Vec<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for WebSocketUpgrade {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Infallible> {
        let on_upgrade = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
        let mut head = http::Request::new(()).into_parts().0;
        head.method = parts.method.clone();
        head.uri = parts.uri.clone();
        head.version = parts.version;
        head.headers = parts.headers.clone();
        Ok(WebSocketUpgrade {
            head,
            on_upgrade,
            keys: Vec::new(),
        })
    }
}

impl WebSocketUpgrade {
    /// Tags the connection with `key` (a user id): [`send_to`](super::send_to) reaches every
    /// socket with that key, on every worker and every instance. Several keys may be given.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.keys.push(key.into());
        self
    }

    /// Answers the request with the opening handshake and serves the connection with the
    /// endpoint registered as `endpoint` on this server
    /// ([`HttpServer::ws_endpoint`](crate::http::HttpServer::ws_endpoint)), with no data
    /// attached; an unknown name is a 500 that says so.
    pub fn on<T: 'static>(self, endpoint: EndpointName<T>) -> Response {
        self.open(endpoint, None)
    }

    /// As [`on`](Self::on), with `data` attached to the connection before `on_open` runs:
    /// the user, the claims, the room. Every callback reads it with
    /// [`WsConnection::with_data`]; its type is the endpoint's, and another does not
    /// compile:
    ///
    /// ```compile_fail
    /// use brisk::ws::{EndpointName, WebSocketUpgrade};
    /// struct Member { user: String }
    /// const CHAT: EndpointName<Member> = EndpointName::new("chat");
    /// fn route(ws: WebSocketUpgrade) -> axum_core::response::Response {
    ///     ws.on_with(CHAT, "ada".to_string())
    /// }
    /// ```
    ///
    /// [`WsConnection::with_data`]: super::WsConnection::with_data
    pub fn on_with<T: Send + 'static>(self, endpoint: EndpointName<T>, data: T) -> Response {
        self.open(endpoint, Some(Box::new(data)))
    }

    fn open<T: 'static>(self, endpoint: EndpointName<T>, data: Option<Box<dyn Any>>) -> Response {
        let worker = crate::runtime::context::running("brisk::ws::WebSocketUpgrade::on");
        let ep = match named::get(&worker, endpoint) {
            Ok(ep) => ep,
            Err(not_found) => {
                tracing::error!("{not_found}");
                let why = format!("{not_found}\n");
                return (StatusCode::INTERNAL_SERVER_ERROR, why).into_response();
            }
        };
        let attached = Attached {
            data,
            keys: self.keys,
            window: None,
        };
        ep.accept(&self.head, self.on_upgrade, attached)
            .map(Body::from)
    }
}
