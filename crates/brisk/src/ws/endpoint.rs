//! [`WsEndpoint`] (what to do with WebSocket connections), [`WsServer`] (a `websocket://`
//! listener for an endpoint) and [`WsConnection`] (the handle handlers get).

use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::Duration;

use http::{Request, Response, StatusCode};

use super::codec::{Attached, Handshake, WsCodec, WsFrame};
use super::connection::WsConnection;
use super::deflate::{self, Agreement};
use super::group::{self, Member};
use super::handshake::{self, Refused};
use super::origin::OriginPolicy;
use super::replay::{OpenWindow, Replay};
use super::{Message, Utf8Bytes};
use crate::error::Result;
use crate::http::{take_upgraded, Body};
use crate::limits::Limits;
use crate::runtime::connection::{serve_with, Callbacks, Connection, ServerShared};
use crate::runtime::context::{self as worker, WorkerCtx};
use crate::runtime::handler::{boxed, panic_message, BoxError, HandlerFuture, HandlerOutput};
use crate::runtime::sweep::close_stalled_handshakes;
use crate::stats::Stats;

type OpenFn = Rc<dyn Fn(WsConnection, Handshake) -> HandlerFuture>;
type ResumeFn = Rc<dyn Fn(WsConnection, Resumed) -> HandlerFuture>;

/// What [`WsEndpoint::on_resume`] is told of a connection handed over by a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumed {
    /// Its id in the worker it left (its id here is [`WsConnection::id`]).
    pub previous_id: u64,
}
type MessageFn = Rc<dyn Fn(WsConnection, Message) -> HandlerFuture>;
type CloseFn = Rc<dyn Fn(WsConnection) -> HandlerFuture>;

/// What an endpoint does with a connection that cannot keep up: its send buffer (the limits'
/// `max_send_buffer`, 2 MiB by default) is full. Either way the other connections never wait
/// for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowConsumer {
    /// Drop further messages to it (sends fail with `BufferFull`, broadcasts skip it) until it
    /// catches up, each counted in `sends_dropped` (`status --json`, and `/metrics` as
    /// `brisk_errors_total{kind="send_dropped"}`). The default.
    Drop,
    /// Close it with this close code (1008: policy violation, 1013: try again later). The
    /// close frame goes after what is queued; a peer that has not read it all within
    /// [`SLOW_CLOSE_GRACE`] is disconnected.
    Close(u16),
}

/// How long a slow connection closed with [`SlowConsumer::Close`] has to read what was queued
/// and the close frame.
pub const SLOW_CLOSE_GRACE: Duration = Duration::from_secs(5);

struct EndpointInner {
    slow: SlowConsumer,
    on_open: Option<OpenFn>,
    on_resume: Option<ResumeFn>,
    on_message: Option<MessageFn>,
    on_close: Option<CloseFn>,
    max_message: usize,
    /// Its connections' send buffer, if not the server's (or the app's) `max_send_buffer`.
    send_buffer: Option<usize>,
    ping_interval: Duration,
    dead_peer_timeout: Duration,
    handshake_timeout: Duration,
    /// Whether permessage-deflate is offered.
    deflate: bool,
    /// Whether every agreement names `client_no_context_takeover`.
    client_no_context: bool,
    /// Whether its connections move to the new worker on a reload.
    survive_reload: bool,
    /// The key it is registered under for handovers, once it is.
    handover_key: Rc<RefCell<Option<Rc<str>>>>,
    /// How its connections' data moves with them, if it does.
    carry_data: Option<super::handover::DataCarrier>,
    /// Which pages' handshakes are accepted.
    origins: OriginPolicy,
    /// Per worker, made on first use: what this endpoint's connections share.
    shared: RefCell<Option<Rc<ServerShared<WsCodec>>>>,
}

/// What to do with WebSocket connections: callbacks and limits. Serve it on a `websocket://`
/// listener ([`WsServer`](super::WsServer)) or from an HTTP route ([`WsEndpoint::upgrade`]); cheap to clone.
///
/// `T` is the type of the data each connection carries ([`data`](Self::data),
/// [`WsConnection::set_data`]); `()` for none.
pub struct WsEndpoint<T = ()> {
    core: Endpoint,
    data: PhantomData<fn() -> T>,
}

impl<T> Clone for WsEndpoint<T> {
    fn clone(&self) -> Self {
        WsEndpoint {
            core: self.core.clone(),
            data: PhantomData,
        }
    }
}

/// An endpoint whatever its connections' data: what listeners, routes and handovers hold.
#[derive(Clone)]
pub(crate) struct Endpoint {
    inner: Rc<EndpointInner>,
}

impl Default for WsEndpoint {
    fn default() -> Self {
        Self::new()
    }
}

impl WsEndpoint {
    /// An endpoint with no callbacks, 16 MiB messages, a ping after 25 s of silence and a
    /// close after 60 s, 10 s to complete the opening handshake, and no compression.
    pub fn new() -> Self {
        WsEndpoint {
            data: PhantomData,
            core: Endpoint {
                inner: Rc::new(EndpointInner {
                    slow: SlowConsumer::Drop,
                    on_open: None,
                    on_resume: None,
                    on_message: None,
                    on_close: None,
                    max_message: 16 << 20,
                    send_buffer: None,
                    ping_interval: Duration::from_secs(25),
                    dead_peer_timeout: Duration::from_secs(60),
                    handshake_timeout: Duration::from_secs(10),
                    deflate: false,
                    client_no_context: false,
                    survive_reload: false,
                    handover_key: Rc::default(),
                    carry_data: None,
                    origins: OriginPolicy::default(),
                    shared: RefCell::new(None),
                }),
            },
        }
    }

    /// Names the type of the data each connection carries: every callback's
    /// [`WsConnection`] sets and reads a `T` ([`WsConnection::set_data`],
    /// [`WsConnection::with_data`]), and an upgrade route attaches one
    /// ([`WebSocketUpgrade::on_with`](super::WebSocketUpgrade::on_with)), so reading it as
    /// another type does not compile. Call it before the callbacks: it panics, naming the
    /// mistake, after one.
    ///
    /// ```
    /// use brisk::ws::WsEndpoint;
    /// struct Room(String);
    /// let chat = WsEndpoint::new()
    ///     .data::<Room>()
    ///     .on_open(|ws, _| async move { ws.set_data(Room("lobby".into())) })
    ///     .on_message(|ws, msg| async move {
    ///         if let Some(room) = ws.with_data(|room| room.0.clone()) {
    ///             brisk::ws::broadcast(&room, msg);
    ///         }
    ///     });
    /// ```
    ///
    /// Reading it as another type is a compile error, not a `None` at run time:
    ///
    /// ```compile_fail
    /// # use brisk::ws::WsEndpoint;
    /// struct Room(String);
    /// let chat = WsEndpoint::new()
    ///     .data::<Room>()
    ///     .on_message(|ws, _| async move { ws.with_data(|n: &mut u32| *n += 1); });
    /// ```
    pub fn data<T: 'static>(self) -> WsEndpoint<T> {
        let e = &self.core.inner;
        let set = e.on_open.is_some()
            || e.on_resume.is_some()
            || e.on_message.is_some()
            || e.on_close.is_some()
            || e.carry_data.is_some();
        assert!(
            !set,
            "WsEndpoint::data::<{}>() must come before on_open, on_message, on_close, \
             on_resume and carry_data, which take a connection of that data type",
            std::any::type_name::<T>()
        );
        WsEndpoint {
            core: self.core,
            data: PhantomData,
        }
    }
}

impl<T: 'static> WsEndpoint<T> {
    fn edit(mut self, f: impl FnOnce(&mut EndpointInner)) -> Self {
        let inner = Rc::get_mut(&mut self.core.inner);
        f(inner.expect("configure a WsEndpoint before cloning it"));
        self
    }

    /// The endpoint whatever its data type, as listeners, routes and handovers hold it.
    pub(crate) fn core(&self) -> &Endpoint {
        &self.core
    }

    /// Runs when a connection has completed the opening handshake.
    ///
    /// Its client may act on the handshake's answer before this runs (another client may
    /// broadcast to a room the moment it hears this one is in). So the groups it joins here
    /// ([`WsConnection::join`], [`WsConnection::tag`]) first send it their broadcasts made
    /// since the answer, even those made while it waited (a database read before the join):
    /// a client gets every broadcast to its `on_open`'s groups made after its handshake. A
    /// join more than 10 s after the answer gets none of those (logged, and counted in
    /// `broadcasts_dropped`).
    ///
    /// ```
    /// use brisk::ws::WsEndpoint;
    /// let chat = WsEndpoint::new().on_open(|ws, _handshake| async move { ws.join("lobby") });
    /// ```
    pub fn on_open<F, Fut>(self, f: F) -> Self
    where
        F: Fn(WsConnection<T>, Handshake) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.edit(|e| e.on_open = Some(Rc::new(move |c: WsConnection, h| boxed(f(c.typed(), h)))))
    }

    /// With [`survive_reload`](Self::survive_reload): runs in the new worker for each
    /// connection a reload handed to it, once its groups, keys, presence id and data are
    /// back and before any of its messages is handled (`on_open` does not run again). Its id
    /// changed: re-key what the app keeps by [`Resumed::previous_id`], re-arm its timers.
    /// An error is logged and counted; a panic closes the connection.
    ///
    /// ```
    /// use brisk::ws::WsEndpoint;
    /// let echo = WsEndpoint::new()
    ///     .survive_reload(true)
    ///     .on_resume(|ws, resumed| async move {
    ///         tracing::info!(was = resumed.previous_id, now = ws.id(), "moved");
    ///     });
    /// ```
    pub fn on_resume<F, Fut>(self, f: F) -> Self
    where
        F: Fn(WsConnection<T>, Resumed) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.edit(|e| e.on_resume = Some(Rc::new(move |c: WsConnection, r| boxed(f(c.typed(), r)))))
    }

    /// Runs for every complete text or binary message, one at a time per connection.
    pub fn on_message<F, Fut>(self, f: F) -> Self
    where
        F: Fn(WsConnection<T>, Message) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.edit(|e| {
            e.on_message = Some(Rc::new(move |c: WsConnection, m| boxed(f(c.typed(), m))))
        })
    }

    /// Runs once when a connection is gone.
    pub fn on_close<F, Fut>(self, f: F) -> Self
    where
        F: Fn(WsConnection<T>) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.edit(|e| e.on_close = Some(Rc::new(move |c: WsConnection| boxed(f(c.typed())))))
    }

    /// Largest message (all fragments together); over it the connection is closed with 1009.
    ///
    /// Every member of a group takes its own copy of a broadcast, up to its send buffer
    /// (`max_send_buffer`, 2 MiB by default): an endpoint whose messages are broadcast should
    /// take messages of the size its app needs (a chat line: 64 KiB, as channels do), not the
    /// 16 MiB default. A message larger than a member's send buffer never reaches it
    /// (`SendError::TooLarge`).
    pub fn max_message_size(self, bytes: usize) -> Self {
        self.edit(|e| e.max_message = bytes)
    }

    /// Its connections' send buffer (see [`Limits::max_send_buffer`](crate::Limits::max_send_buffer)),
    /// instead of the server's, or the app's for an HTTP route: an echo of messages larger
    /// than 2 MiB needs one that holds them.
    ///
    /// ```
    /// use brisk::ws::WsEndpoint;
    /// let echo = WsEndpoint::new()
    ///     .max_send_buffer((16 << 20) + 64)
    ///     .on_message(|ws, msg| async move { ws.send(msg) });
    /// ```
    pub fn max_send_buffer(self, bytes: usize) -> Self {
        self.edit(|e| e.send_buffer = Some(bytes))
    }

    /// Ping a connection that has been silent this long (keeps NAT entries alive and detects
    /// dead peers).
    pub fn ping_interval(self, d: Duration) -> Self {
        self.edit(|e| e.ping_interval = d)
    }

    /// Close a connection that has been silent this long (no pong either).
    pub fn dead_peer_timeout(self, d: Duration) -> Self {
        self.edit(|e| e.dead_peer_timeout = d)
    }

    /// Close a connection of a `websocket://` or `wss://` listener that has not completed
    /// the opening handshake (TLS included) this long after it connected (slowloris).
    pub fn handshake_timeout(self, d: Duration) -> Self {
        self.edit(|e| e.handshake_timeout = d)
    }

    /// Offers permessage-deflate (RFC 7692) compression to clients that ask for it (off by
    /// default). The first offer of the `Sec-WebSocket-Extensions` request header that can be
    /// honoured is accepted; a client that offers none gets no compression.
    ///
    /// Compressed messages are inflated up to [`max_message_size`](Self::max_message_size)
    /// (beyond it: close 1009). Every outgoing data message is compressed (short or
    /// incompressible ones into stored blocks: 5 bytes per 64 KiB and 1 more; some clients
    /// mishandle the uncompressed messages RFC 7692 allows); [`broadcast`](super::broadcast)
    /// compresses a message once for every member that negotiated the extension.
    ///
    /// Memory: connections that did not negotiate hold no zlib state. The server always
    /// answers `server_no_context_takeover`, so messages are compressed by one compressor per
    /// worker. A client that offers `client_no_context_takeover` is held to it and its messages
    /// are inflated by one inflater per worker as well; any other client's messages build on
    /// the previous ones (better compression), which costs its connection an inflater from its
    /// first compressed message on: up to about 40 KiB (zlib's state and a 32 KiB window; about
    /// 20 KiB of RSS was measured after one short message), unless the endpoint holds every
    /// client to [`client_no_context_takeover`](Self::client_no_context_takeover).
    pub fn permessage_deflate(self, on: bool) -> Self {
        self.edit(|e| e.deflate = on)
    }

    /// With [`permessage_deflate`](Self::permessage_deflate): holds every client that
    /// negotiates compression to `client_no_context_takeover`, whether it offered it or not
    /// (RFC 7692, section 7.1.1.2, lets a server do so). Each client message is then
    /// compressed on its own and inflated by the worker's one shared inflater, so no
    /// connection holds zlib state: up to about 40 KiB less per compressing client. The cost
    /// is a little compression on client messages that repeat earlier ones. Off by default.
    ///
    /// A client that refers back to an earlier message anyway is closed with 1007 (invalid
    /// data), as for any deflate stream that cannot be inflated.
    ///
    /// ```
    /// use brisk::ws::WsEndpoint;
    /// let chat = WsEndpoint::new()
    ///     .permessage_deflate(true)
    ///     .client_no_context_takeover(true);
    /// ```
    pub fn client_no_context_takeover(self, on: bool) -> Self {
        self.edit(|e| e.client_no_context = on)
    }

    /// Keeps this endpoint's connections open through `reload` (and a recycling worker's
    /// replacement): the stopping worker hands each one, between two messages, to the new
    /// worker, which serves it on. Nothing is lost or repeated: bytes received and not yet
    /// handled, bytes not yet sent and a fragmented message in progress move with it, and its
    /// data if the endpoint says how ([`carry_data`](Self::carry_data)). Off by default; with
    /// [`permessage_deflate`](Self::permessage_deflate) it holds clients to
    /// [`client_no_context_takeover`](Self::client_no_context_takeover), whose compression
    /// window could not be carried.
    ///
    /// The endpoint must be findable in the new worker: serve it on a `websocket://`
    /// listener ([`WsServer`](super::WsServer)), or name it on its HTTP server with
    /// [`HttpServer::ws_endpoint`](crate::http::HttpServer::ws_endpoint).
    ///
    /// What a moved connection sees: a new [`id`](WsConnection::id) (ids are per worker);
    /// `on_open` does not run again, and handles to it held in the old worker see it closed
    /// (`on_close` does not run there). Their groups, keys and presence id move with them,
    /// and they are sent the broadcasts of their groups they missed on the way, none twice.
    /// Not carried, and so closed with 1001 as without this (counted in `status --json` as
    /// `ws_handover.skipped`): `wss://` connections and connections with data the endpoint
    /// cannot carry; those whose `on_message` is still running when the drain time ends are
    /// closed then (without a close frame: their handler holds them). An `upgrade` moves them to the new master's workers the same way (from a
    /// master of this build or later), but for the group members of an app that spans
    /// machines ([`App::cluster`](crate::App::cluster)): the new master is another instance
    /// of its bus. `stop` and `restart` close every connection.
    ///
    /// ```
    /// use brisk::ws::{WsEndpoint, WsServer};
    /// let echo = WsEndpoint::new()
    ///     .survive_reload(true)
    ///     .on_message(|ws, msg| async move { ws.send(msg) });
    /// let server = WsServer::new("websocket://127.0.0.1:8081").unwrap().endpoint(echo);
    /// ```
    pub fn survive_reload(self, on: bool) -> Self {
        self.edit(|e| {
            e.survive_reload = on;
            e.client_no_context |= on;
        })
    }

    /// With [`survive_reload`](Self::survive_reload): each connection's data (see
    /// [`WsConnection::set_data`]), of type `T`, moves with it, as JSON. Without this, a
    /// connection with data attached cannot move and is closed on a reload; so is one whose
    /// data is of another type.
    ///
    /// ```
    /// use brisk::ws::WsEndpoint;
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Room(String);
    /// let chat = WsEndpoint::new()
    ///     .data::<Room>()
    ///     .survive_reload(true)
    ///     .carry_data()
    ///     .on_open(|ws, _| async move { ws.set_data(Room("lobby".into())) });
    /// ```
    pub fn carry_data(self) -> Self
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        self.edit(|e| e.carry_data = Some(super::handover::DataCarrier::of::<T>()))
    }

    /// Accepts handshakes from browser pages of `origins` only (`https://chat.example.com`;
    /// a default port may be written or not), besides those [`same_origin`](Self::same_origin)
    /// allows: another site's page that connects with the user's cookies gets 403. Clients
    /// that are not browsers send no `Origin` and are let through. Without this or
    /// `same_origin`, every page may connect.
    ///
    /// ```
    /// use brisk::ws::WsEndpoint;
    /// let chat = WsEndpoint::new().allowed_origins(["https://chat.example.com"]);
    /// ```
    pub fn allowed_origins<I, S>(self, origins: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.edit(|e| {
            for origin in origins {
                e.origins = std::mem::take(&mut e.origins).allow(origin.as_ref());
            }
        })
    }

    /// Accepts handshakes from browser pages of the host the client connected to (the
    /// page's origin names the request's `Host`), besides the
    /// [`allowed_origins`](Self::allowed_origins): the usual rule for a site that serves its
    /// own pages.
    ///
    /// ```
    /// use brisk::ws::WsEndpoint;
    /// let chat = WsEndpoint::new().same_origin();
    /// ```
    pub fn same_origin(self) -> Self {
        self.edit(|e| e.origins = std::mem::take(&mut e.origins).allow_same_host())
    }

    /// What to do with a connection whose send buffer is full (default
    /// [`SlowConsumer::Drop`]).
    ///
    /// ```
    /// use brisk::ws::{SlowConsumer, WsEndpoint};
    /// let chat = WsEndpoint::new().slow_consumer(SlowConsumer::Close(1013));
    /// ```
    pub fn slow_consumer(self, policy: SlowConsumer) -> Self {
        self.edit(|e| e.slow = policy)
    }

    /// Answers an HTTP request on a route with the WebSocket handshake and serves the
    /// connection with this endpoint. A request that is not a valid upgrade gets 400 (or 426
    /// for another WebSocket version).
    ///
    /// ```no_run
    /// use brisk::http::HttpServer;
    /// use brisk::ws::WsEndpoint;
    /// let echo = WsEndpoint::new().on_message(|ws, msg| async move { ws.send(msg) });
    /// let server = HttpServer::new("http://127.0.0.1:8080").unwrap().handler(move |req| {
    ///     let echo = echo.clone();
    ///     async move { echo.upgrade(req) }
    /// });
    /// ```
    pub fn upgrade<B>(&self, mut req: Request<B>) -> Response<Body> {
        let on_upgrade = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>();
        let (parts, _) = req.into_parts();
        self.core
            .accept(&parts, on_upgrade, Attached::default())
            .map(Body::from)
    }
}

impl Endpoint {
    /// Serves a connection handed over by a reload (its id was `previous_id`): `on_resume`
    /// first, if there is one (an error is logged and counted, a panic counted and the
    /// connection closed), then `serving`, its task.
    pub(super) fn serve_resumed(
        &self,
        conn: Connection<WsCodec>,
        previous_id: u64,
        serving: impl Future<Output = ()> + 'static,
    ) {
        let Some(on_resume) = self.inner.on_resume.clone() else {
            tokio::task::spawn_local(serving);
            return;
        };
        tokio::task::spawn_local(async move {
            use futures_util::FutureExt;
            let ws = WsConnection::of(conn.clone());
            let outcome = std::panic::AssertUnwindSafe(on_resume(ws, Resumed { previous_id }))
                .catch_unwind()
                .await;
            let failed = |why: String| {
                Stats::add(&conn.worker_stats().throw_exception, 1);
                tracing::warn!(conn = conn.id(), "on_resume failed: {why}");
            };
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed(e.to_string()),
                Err(panic) => {
                    failed(format!("panicked: {}", panic_message(&panic)));
                    conn.destroy();
                }
            }
            serving.await
        });
    }

    /// How its connections' data moves with them, if it does.
    pub(super) fn data_carrier(&self) -> Option<super::handover::DataCarrier> {
        self.inner.carry_data
    }

    /// Whether its connections move to the new worker on a reload.
    pub(super) fn survives_reload(&self) -> bool {
        self.inner.survive_reload
    }

    /// Records the key the endpoint is registered under for handovers (the first one).
    pub(super) fn set_handover_key(&self, key: &str) {
        let mut k = self.inner.handover_key.borrow_mut();
        if k.is_none() {
            *k = Some(key.into());
        }
    }

    /// Largest message.
    pub(super) fn max_message(&self) -> usize {
        self.inner.max_message
    }

    /// The permessage-deflate agreement for a handshake's `Sec-WebSocket-Extensions` values:
    /// None when this endpoint does not offer it or no offer can be honoured.
    fn negotiate<'a>(&self, offers: impl IntoIterator<Item = &'a str>) -> Option<Agreement> {
        let mut agreed = self.inner.deflate.then(|| deflate::negotiate(offers))??;
        agreed.client_no_context_takeover |= self.inner.client_no_context;
        Some(agreed)
    }

    /// The per-worker state of this endpoint, made on first use.
    pub(super) fn shared(
        &self,
        worker: &Rc<WorkerCtx>,
        limits: Limits,
    ) -> Rc<ServerShared<WsCodec>> {
        if let Some(s) = self.inner.shared.borrow().as_ref() {
            return s.clone();
        }
        let shared = Rc::new(ServerShared {
            worker: worker.clone(),
            callbacks: self.callbacks(),
            // Room for a frame header beyond the largest message (compressed, it may be a
            // little larger).
            limits: Limits {
                max_package_size: match self.inner.deflate {
                    true => deflate::compressed_limit(self.inner.max_message as u64) as usize,
                    false => self.inner.max_message,
                } + 64,
                max_send_buffer: self.inner.send_buffer.unwrap_or(limits.max_send_buffer),
                ..limits
            },
            protocol: WsCodec::new(true, self.inner.max_message),
        });
        crate::runtime::sweep::enforce_send_timeouts(worker);
        tokio::task::spawn_local(heartbeat(
            worker.clone(),
            self.inner.ping_interval,
            self.inner.dead_peer_timeout,
            self.inner.handshake_timeout,
        ));
        *self.inner.shared.borrow_mut() = Some(shared.clone());
        shared
    }

    fn callbacks(&self) -> Callbacks<WsCodec> {
        let mut cb = Callbacks::default();
        if self.inner.survive_reload {
            cb.handover = Some(Rc::new(super::handover::Hook {
                key: self.inner.handover_key.clone(),
                carrier: self.inner.carry_data,
                staged: RefCell::new(None),
            }));
        }
        let ep = self.clone();
        cb.on_message = Some(Rc::new(move |conn, frame| {
            let ep = ep.clone();
            Box::pin(async move { ep.dispatch(conn, frame).await })
        }));
        let ep = self.clone();
        cb.on_connect = Some(Rc::new(move |conn: Connection<WsCodec>| {
            let ep = ep.clone();
            Box::pin(async move {
                let Some((h, mut attached)) = conn.protocol().take_pending_open() else {
                    return Ok(());
                };
                // Held until `on_open` ends: its joins catch up on what came meanwhile.
                let mut window = attached.window.take();
                if let Some(w) = &mut window {
                    w.attach(conn.id());
                }
                let ws = WsConnection::of(conn);
                if let Some(data) = attached.data {
                    ws.set_data_boxed(data);
                }
                for key in &attached.keys {
                    ws.tag(key);
                }
                let opened = match &ep.inner.on_open {
                    Some(f) => f(ws, h).await,
                    None => Ok(()),
                };
                drop(window);
                opened
            })
        }));
        if let SlowConsumer::Close(code) = self.inner.slow {
            cb.on_buffer_full = Some(Rc::new(move |conn: Connection<WsCodec>| {
                tracing::debug!(
                    conn = conn.id(),
                    code,
                    "closing a connection that cannot keep up"
                );
                let reason = Utf8Bytes::from_static("too slow: messages could not be delivered");
                let _ = conn.send_past_limit(WsFrame::Close(Some((code, reason))));
                conn.close();
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(SLOW_CLOSE_GRACE).await;
                    conn.destroy();
                });
                Box::pin(async { Ok(()) })
            }));
        }
        let ep = self.clone();
        cb.on_close = Some(Rc::new(move |conn: Connection<WsCodec>| {
            group::leave_all(conn.worker(), Member::Socket(conn.id()));
            let ep = ep.clone();
            Box::pin(async move {
                match &ep.inner.on_close {
                    Some(f) => f(WsConnection::of(conn)).await,
                    None => Ok(()),
                }
            })
        }));
        cb
    }

    /// Handles one decoded frame: protocol duties here, messages to the user.
    async fn dispatch(&self, conn: Connection<WsCodec>, frame: WsFrame) -> Result<(), BoxError> {
        match frame {
            WsFrame::Handshake(h) => {
                let origins = &self.inner.origins;
                let negotiate = |offers: Vec<&str>| self.negotiate(offers);
                let accepted = match handshake::check(h.get, &h.headers, origins, negotiate) {
                    Ok(a) => a,
                    Err(refused) => {
                        refuse(&conn, refused);
                        return Ok(());
                    }
                };
                // Until `on_open` ends: its joins catch up on what came meanwhile.
                let replay = || conn.worker().part::<Replay>();
                let mut window = (self.inner.on_open.as_ref()).map(|_| OpenWindow::begin(replay()));
                if let Some(w) = &mut window {
                    w.attach(conn.id());
                }
                conn.protocol().open(accepted.agreed);
                conn.send(WsFrame::Raw(accepted.bytes()))?;
                if let Some(f) = &self.inner.on_open {
                    return f(WsConnection::of(conn), h).await;
                }
            }
            WsFrame::BadHandshake(refused) => refuse(&conn, refused),
            WsFrame::Text(t) => return self.deliver(conn, Message::Text(t)).await,
            WsFrame::Binary(b) => return self.deliver(conn, Message::Binary(b)).await,
            WsFrame::Ping(p) => {
                let _ = conn.send(WsFrame::Pong(p));
            }
            WsFrame::Pong(_) => {}
            WsFrame::Close(frame) => {
                if !conn.protocol().close_sent() {
                    let _ = conn.send(WsFrame::Close(
                        frame.map(|(code, _)| (code, Utf8Bytes::from_static(""))),
                    ));
                }
                conn.close();
            }
            WsFrame::Fail(code, why) => {
                conn.count_rejected();
                tracing::debug!(
                    conn = conn.id(),
                    code,
                    why,
                    "closing WebSocket: protocol violation"
                );
                let _ = conn.send(WsFrame::Fail(code, why));
                conn.close();
            }
            WsFrame::Raw(_) => {}
        }
        Ok(())
    }

    async fn deliver(&self, conn: Connection<WsCodec>, msg: Message) -> Result<(), BoxError> {
        let Some(f) = &self.inner.on_message else {
            return Ok(());
        };
        let began = std::time::Instant::now();
        let traced = crate::otel::Op::WsMessage {
            conn: conn.id(),
            size: msg.as_bytes().len(),
            text: matches!(msg, Message::Text(_)),
        };
        let worker = conn.worker().clone();
        let result = crate::otel::root(f(WsConnection::of(conn), msg), traced).await;
        worker.record_latency(&worker.stats.ws_latency, began);
        result
    }

    /// The opening handshake of an HTTP upgrade request (its head `parts`, the connection's
    /// `on_upgrade`): the 101 response, with the connection served by this endpoint once
    /// upgraded (with `attached` on it before `on_open`), or the refusal (400, 403, 426, 500)
    /// whose body says why.
    pub(crate) fn accept(
        &self,
        parts: &http::request::Parts,
        on_upgrade: Option<hyper::upgrade::OnUpgrade>,
        mut attached: Attached,
    ) -> Response<&'static str> {
        let origins = &self.inner.origins;
        let negotiate = |offers: Vec<&str>| self.negotiate(offers);
        let get = parts.method == http::Method::GET;
        let accepted = match handshake::check(get, &parts.headers, origins, negotiate) {
            Ok(a) => a,
            Err(refused) => {
                if refused == Refused::Origin {
                    if let Some(w) = worker::current() {
                        Stats::add(&w.stats.rejected, 1);
                    }
                }
                return refused.response();
            }
        };
        let bad = |code: StatusCode, why: &'static str| {
            let mut r = Response::new(why);
            *r.status_mut() = code;
            r
        };
        let Some(on_upgrade) = on_upgrade else {
            return bad(
                StatusCode::INTERNAL_SERVER_ERROR,
                "this connection cannot be upgraded (HTTP/2, or the request was not the \
                 connection's own)\n",
            );
        };
        let h = &parts.headers;
        let agreed = accepted.agreed;
        let handshake = Handshake {
            path: parts
                .uri
                .path_and_query()
                .map_or("/".into(), |p| p.to_string()),
            get,
            headers: h
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
        };
        let (Some(worker), ep) = (worker::current(), self.clone()) else {
            return bad(StatusCode::INTERNAL_SERVER_ERROR, "not on a worker\n");
        };
        // The client may act on the answer before `on_open` (or the route's keys) has
        // joined its groups; without either, it joins none before its first message.
        if self.inner.on_open.is_some() || !attached.keys.is_empty() {
            attached.window = Some(OpenWindow::begin(worker.part::<Replay>()));
        }
        tokio::task::spawn_local(async move {
            let upgraded = match on_upgrade.await {
                Ok(u) => u,
                Err(e) => {
                    tracing::debug!(error = %e, "WebSocket upgrade failed");
                    return;
                }
            };
            let Some((stream, initial)) = take_upgraded(upgraded) else {
                tracing::warn!("WebSocket upgrade on an unexpected connection type");
                return;
            };
            let remote = stream.peer_addr();
            let shared = ep.shared(&worker, worker.default_limits());
            let codec = WsCodec::upgraded(ep.inner.max_message, handshake, agreed, attached);
            // A task of its own: this upgrade task's state is not kept for the connection's life.
            tokio::task::spawn_local(serve_with(shared, stream, remote, initial, Some(codec)));
        });
        accepted.response()
    }
}

/// Pings quiet WebSocket connections, closes dead ones and those stuck in the opening
/// handshake.
async fn heartbeat(worker: Rc<WorkerCtx>, ping: Duration, dead: Duration, handshake: Duration) {
    let ping_s = ping.as_secs().max(1) as u32;
    let dead_s = dead.as_secs().max(1) as u32;
    let handshake_s = handshake.as_secs().max(1) as u32;
    let mut tick = tokio::time::interval(Duration::from_secs(1).min(ping));
    loop {
        tick.tick().await;
        let now = worker.uptime_secs();
        close_stalled_handshakes(&worker, handshake_s);
        for c in worker.connections_where(|c| c.idle_secs(now) >= ping_s && c.has_heartbeat()) {
            if c.idle_secs(now) >= dead_s {
                tracing::debug!("closing a WebSocket connection that stopped answering pings");
                c.destroy();
            } else {
                c.keepalive();
            }
        }
    }
}

/// Refuses an opening handshake of a `websocket://` listener's connection as `refused`
/// says, and closes it.
fn refuse(conn: &Connection<WsCodec>, refused: Refused) {
    conn.count_rejected();
    let _ = conn.send(WsFrame::Raw(refused.bytes()));
    conn.close();
}
