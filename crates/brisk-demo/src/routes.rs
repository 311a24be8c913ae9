//! The demo's HTTP routes: the endpoints the benchmarks use.

use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use futures_util::future::LocalBoxFuture;

use brisk::http::sse::{Event, Hub};
use brisk::http::static_files::StaticFiles;
use brisk::http::{Body, RequestBody};
use brisk::ws::{EndpointName, WsEndpoint};

/// The send buffer of the `/ws` echoes: one message of their 16 MiB limit, and its header.
const ECHO_SEND_BUFFER: usize = (16 << 20) + 64;

use crate::admin::Admin;
use crate::blocks::Blocks;
use crate::chat::Chat;
use crate::httpc::{Call, Httpc};
use crate::orm::Orm;
use crate::techempower::{Techempower, Test};
use crate::views::Views;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError};

/// How many times a `/ws/durable` connection moved to a new worker (its data, counted by
/// `on_resume` and carried along; the message `/moves` answers it). `/busy MS` keeps its
/// handler busy for MS milliseconds (at most a minute) before it answers `done`: a
/// connection whose handler is still busy when a reload's drain time ends is not moved.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Moves(u32);

/// The name of `/ws/durable`'s endpoint, under which a reload's new worker finds it.
pub(crate) const DURABLE_ECHO: EndpointName<Moves> = EndpointName::new("durable-echo");

/// Everything the routes need, cloned into each request.
#[derive(Clone)]
pub(crate) struct Routes {
    files: StaticFiles,
    echo: WsEndpoint,
    /// `/ws/durable`: the echo, its connections kept through reloads.
    durable_echo: WsEndpoint<Moves>,
    chat: Chat,
    live: crate::live::Live,
    apps: Apps,
    /// Who the try-out endpoints answer.
    try_out: crate::try_out::TryOut,
    /// `/events` subscribers of this worker.
    pub events: Hub,
}

/// The parts of the demo that answer the published reports' routes.
#[derive(Clone)]
pub(crate) struct Apps {
    /// The TechEmpower test set.
    pub techempower: Rc<Techempower>,
    /// Report R3's ORM and query-builder legs (`/orm/db`, `/qb/db`).
    pub orm: Orm,
    /// Report R2's template jobs and R4's view (`/tpl/*`, `/view`).
    pub views: Views,
    /// Report R4's HTTP client modes and their upstream (`/httpc/*`, `/upstream`).
    pub httpc: Httpc,
    /// Report R2.3's cached blocks merged into JSON (`/blocks`).
    pub blocks: Blocks,
    /// Report R4's admin area (`/admin`, `/admin/*`).
    pub admin: Admin,
    /// Background jobs through the Redis queue (`/jobs`, `/jobs/ID`).
    pub jobs: crate::jobs::Jobs,
    /// Mail through `--smtp` (`POST /mail`).
    pub mail: crate::mail::Mail,
    /// The demo's database, for `/heartbeat`.
    pub db: brisk::db::Db,
    /// The team chat's rooms and messages (`/api/rooms…`).
    pub api: crate::api::Api,
}

impl Routes {
    /// Routes serving `/static/` from `static_root`, sending cached files from
    /// `sendfile_min_size` on with sendfile (`None`: the library's default), `chat`, and
    /// `apps`.
    pub(crate) fn new(
        static_root: &Path,
        sendfile_min_size: Option<u64>,
        chat: Chat,
        live: crate::live::Live,
        apps: Apps,
        try_out: crate::try_out::TryOut,
    ) -> anyhow::Result<Self> {
        let mut files = StaticFiles::new(static_root).map_err(|e| {
            anyhow::anyhow!(
                "cannot serve static files from {}: {e}",
                static_root.display()
            )
        })?;
        if let Some(bytes) = sendfile_min_size {
            files = files.sendfile_min_size(bytes);
        }
        // Echoes send back messages of up to 16 MiB: each connection's send buffer holds one.
        let echo = WsEndpoint::new()
            .permessage_deflate(true)
            .max_send_buffer(ECHO_SEND_BUFFER)
            .on_message(|ws, msg| async move { ws.send(msg) });
        let durable_echo = WsEndpoint::new()
            .data::<Moves>()
            .permessage_deflate(true)
            .max_send_buffer(ECHO_SEND_BUFFER)
            .survive_reload(true)
            .carry_data()
            .on_resume(|ws, _| async move {
                if ws.with_data(|m| m.0 += 1).is_none() {
                    ws.set_data(Moves(1));
                }
            })
            .on_message(|ws, msg| async move {
                let text = match &msg {
                    brisk::ws::Message::Text(t) => t.as_str(),
                    _ => "",
                };
                if text == "/moves" {
                    let n = ws.with_data(|m| m.0).unwrap_or(0);
                    return ws.send_text(format!("moves: {n}"));
                }
                if let Some(ms) = text.strip_prefix("/busy ").and_then(|ms| ms.parse().ok()) {
                    tokio::time::sleep(Duration::from_millis(ms).min(Duration::from_secs(60)))
                        .await;
                    return ws.send_text("done");
                }
                ws.send(msg)
            });
        let events = Hub::new(Some(Duration::from_secs(15)));
        Ok(Routes {
            files,
            echo,
            durable_echo,
            chat,
            live,
            apps,
            try_out,
            events,
        })
    }

    /// The endpoint of `/ws/durable`, for its server to name (so that a reload's new worker
    /// finds it).
    pub(crate) fn durable_echo(&self) -> WsEndpoint<Moves> {
        self.durable_echo.clone()
    }

    /// The endpoint of `/chat`, for its server to name.
    pub(crate) fn chat_endpoint(&self) -> WsEndpoint<crate::chat::Room> {
        self.chat.endpoint()
    }

    /// Publishes a `tick` event to every `/events` subscriber each second (call on a worker).
    pub(crate) fn start_ticking(&self) {
        let hub = self.events.clone();
        let mut n = 0u64;
        brisk::timer::add(Duration::from_secs(1), true, move || {
            n += 1;
            if !hub.is_empty() {
                let data = format!(r#"{{"tick":{n}}}"#);
                hub.publish(&Event::new(data).event("tick").id(n.to_string()));
            }
        });
    }

    /// Routes one request: `GET /` at once, a TechEmpower test straight to its own future
    /// ([`Techempower::answer`]), anything else through
    /// [`route_any`](Self::route_any). Not an `async fn`: one future of the size the route
    /// needs is boxed per request, not one as large as the largest route's.
    pub(crate) fn route(
        self: &Rc<Self>,
        req: Request<RequestBody>,
    ) -> LocalBoxFuture<'static, Response<Body>> {
        let get = matches!(*req.method(), Method::GET | Method::HEAD);
        // The site's root answers at once: no router future (hundreds of bytes, built on the
        // stack and copied into its box) is made for it.
        if get && req.uri().path() == "/" {
            return Box::pin(std::future::ready(hello()));
        }
        if let Some(test) = Test::of(req.uri().path()).filter(|_| get) {
            return self.apps.techempower.answer(test, req.uri().query());
        }
        let routes = self.clone();
        Box::pin(async move { routes.route_any(req).await })
    }

    /// Routes a request that is not a TechEmpower test.
    async fn route_any(&self, req: Request<RequestBody>) -> Response<Body> {
        if let Some(refused) = self.try_out.refusal(&req) {
            return refused;
        }
        // Each area's future boxed, as the HTTP-client calls below, and awaited in a statement
        // of its own: a temporary in a `match` scrutinee lives to the end of the `match`, so
        // the unboxed future would take space in every request's future.
        let path = req.uri().path();
        let answered = if path.starts_with("/admin") {
            Box::pin(self.apps.admin.route(req)).await
        } else if path.starts_with("/api/channels/") {
            Ok(Box::pin(self.live.api(req)).await)
        } else if path.starts_with("/api/") {
            Box::pin(self.apps.api.route(req)).await
        } else if path.starts_with("/jobs") {
            Box::pin(self.apps.jobs.route(req)).await
        } else {
            Err(req)
        };
        match answered {
            Ok(r) => r,
            Err(other) => self.route_other(other).await,
        }
    }

    /// Routes a request that is not for the admin area.
    async fn route_other(&self, req: Request<RequestBody>) -> Response<Body> {
        let get = matches!(*req.method(), Method::GET | Method::HEAD);
        let path = req.uri().path();
        if get {
            if let Some(r) = self.apps.views.route(path, req.uri().query()) {
                return r;
            }
            // Boxed: the calls' state would otherwise enlarge every request's future.
            if let Some(call) = Call::of(path) {
                return Box::pin(self.apps.httpc.answer(call, req.uri().query())).await;
            }
        }
        if let Some(rest) = path.strip_prefix("/static") {
            let rest = rest.to_string();
            // Boxed: the file server's state would otherwise enlarge every request's future.
            return Box::pin(self.files.serve(&req, &rest)).await;
        }
        match path {
            "/orm/db" if get => Box::pin(self.apps.orm.db()).await,
            "/qb/db" if get => Box::pin(self.apps.orm.builder_db()).await,
            "/blocks" if get => Box::pin(self.apps.blocks.page(req.uri().query())).await,
            "/heartbeat" if get => Box::pin(crate::heartbeat::page(&self.apps.db)).await,
            "/mail" if req.method() == Method::POST => Box::pin(self.apps.mail.send(req)).await,
            "/ws" => self.echo.upgrade(req),
            "/ws/durable" => self.durable_echo.upgrade(req),
            "/events" if get => self.events.subscribe(),
            "/chat" => self.chat.upgrade(req),
            "/connection/websocket" => self.live.upgrade(req),
            "/connection/token" if get => self.live.token(req.uri().query()),
            "/connection" if get => self.live.page(),
            "/connection/sse" if get => Box::pin(self.live.sse(req)).await,
            "/connection/stream" if get => Box::pin(self.live.http_stream(req)).await,
            "/connection/client.js" if get => self.live.client_js(crate::live::ClientModule::Index),
            "/connection/msgpack.js" if get => {
                self.live.client_js(crate::live::ClientModule::MsgPack)
            }
            "/chat/kick" if req.method() == Method::POST => {
                crate::chat::kick(req.uri().path_and_query().map_or("", |p| p.as_str()))
            }
            "/chat/say" if req.method() == Method::POST => {
                let path = req
                    .uri()
                    .path_and_query()
                    .map_or("", |p| p.as_str())
                    .to_string();
                match Box::pin(req.into_body().collect()).await {
                    Ok(body) => crate::chat::say(&path, &body.to_bytes()),
                    Err(e) if e.is::<LengthLimitError>() => {
                        status(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n")
                    }
                    Err(_) => status(StatusCode::BAD_REQUEST, "bad request body\n"),
                }
            }
            "/chat/online" if get => {
                let path = req.uri().path_and_query().map_or("", |p| p.as_str());
                Box::pin(crate::chat::online(path)).await
            }
            // Reads the whole body (so `Expect: 100-continue` is answered), then echoes it.
            "/echo" if req.method() == Method::POST => {
                match Box::pin(req.into_body().collect()).await {
                    Ok(body) => Response::new(Body::from(body.to_bytes())),
                    Err(e) if e.is::<LengthLimitError>() => {
                        status(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n")
                    }
                    Err(e) if e.is::<brisk::http::BodyTimedOut>() => status(
                        StatusCode::REQUEST_TIMEOUT,
                        "the request body stopped arriving\n",
                    ),
                    Err(_) => status(StatusCode::BAD_REQUEST, "bad request body\n"),
                }
            }
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
}

/// `GET /`'s answer.
fn hello() -> Response<Body> {
    with_type("Hello World", "text/plain")
}

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
