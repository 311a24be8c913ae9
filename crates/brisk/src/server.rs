//! The server builders: what to listen on, how many workers, which limits, which callbacks.
//!
//! A [`Server`] is a stream listener (`tcp`, `text`, `frame`, `unix`) with Workerman-style
//! callbacks; a [`UdpServer`] answers datagrams. Both turn into a [`Service`] for
//! [`App::server`](crate::App::server) or [`run_all`](crate::run_all).
//!
//! ```no_run
//! use brisk::Server;
//! let echo = Server::new("text://127.0.0.1:7000")
//!     .unwrap()
//!     .workers(2)
//!     .on_message(|conn, line| async move {
//!         conn.send(line)?;
//!         Ok::<_, brisk::SendError>(())
//!     });
//! ```

use std::future::Future;
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;

use crate::address::{Address, Scheme};
use crate::error::{Error, Result};
use crate::limits::LimitOverrides;
use crate::listen::ListenConfig;
use crate::protocol::{Builtin, Protocol};
use crate::runtime::accept::{accept_tcp, accept_unix};
use crate::runtime::connection::{Callbacks, Connection, ServerShared};
use crate::runtime::handler::{boxed, HandlerOutput};
use crate::runtime::listener::Listener;
use crate::runtime::sweep::{enforce_send_timeouts, sweep_handshakes, sweep_idle};
use crate::runtime::udp::{self, DatagramCallback, UdpPeer};
use crate::runtime::{Service, WorkerCallbacks};

/// The setters every server builder shares: process count, SO_REUSEPORT, backlog, and the
/// worker callbacks. For builders with `listen: ListenConfig` and `worker_callbacks` fields.
macro_rules! builder_setters {
    () => {
        /// Number of worker processes (default: the number of CPUs).
        pub fn workers(mut self, n: usize) -> Self {
            self.listen.workers = Some(n);
            self
        }

        /// `true` (default): every worker binds its own SO_REUSEPORT socket and the kernel
        /// spreads connections. `false`: the master binds once and the workers share that
        /// socket, which also keeps queued connections across reloads and allows privileged
        /// ports with `App::user`.
        pub fn reuse_port(mut self, on: bool) -> Self {
            self.listen.reuse_port = on;
            self
        }

        /// Connections one worker holds at most (default 65,536), like nginx's
        /// `worker_connections`: at the limit the worker stops accepting (the kernel queues
        /// new connections, up to the backlog) until one of its connections closes; `status`
        /// counts each pause (`accept_paused`).
        pub fn max_connections(mut self, n: usize) -> Self {
            self.listen.max_connections = n.max(1);
            self
        }

        /// The listen backlog (default 1024; ignored for UDP).
        pub fn backlog(mut self, n: u32) -> Self {
            self.listen.backlog = n;
            self
        }

        /// Replaces a worker by a fresh one once it has served `n` requests (HTTP requests,
        /// stream and datagram messages, WebSocket messages), like Swoole's `max_request`:
        /// a guard against slow leaks. Each worker draws a share of the jitter on top (see
        /// [`max_requests_jitter`](Self::max_requests_jitter)), so workers started together
        /// do not recycle together. The master starts the new worker, waits until it is
        /// ready, then retires the old one as a graceful `reload` does; `status` and
        /// `/metrics` count recycles by cause. A worker checks its count at most every 10 ms,
        /// so a busy one serves a few more. `n` must be at least 1.
        ///
        /// ```no_run
        /// let api = brisk::http::HttpServer::new("http://0.0.0.0:8080")
        ///     .unwrap()
        ///     .max_requests(100_000)
        ///     .max_memory_mib(512);
        /// ```
        pub fn max_requests(mut self, n: u64) -> Self {
            self.listen.recycle.max_requests = Some(n);
            self
        }

        /// The most requests a worker draws to serve past [`max_requests`](Self::max_requests)
        /// before it is replaced (default: a tenth of `max_requests`; 0 for none).
        pub fn max_requests_jitter(mut self, n: u64) -> Self {
            self.listen.recycle.jitter = Some(n);
            self
        }

        /// Replaces a worker whose private memory (its anonymous resident memory: heap and
        /// stacks, not the shared program or files) has grown past `mib` MiB, like webman's
        /// memory monitor. The master looks once a second, and replaces the worker as
        /// [`max_requests`](Self::max_requests) does. `mib` must be at least 1.
        pub fn max_memory_mib(mut self, mib: u64) -> Self {
            self.listen.recycle.max_memory = Some(mib.saturating_mul(1 << 20));
            self
        }

        $crate::server::worker_callback_setters!();
    };
}
pub(crate) use builder_setters;

/// `on_worker_start` and `on_worker_stop`, for builders with a `worker_callbacks` field.
macro_rules! worker_callback_setters {
    () => {
        /// Runs in each worker after its listener (if any) is open, before it reports ready.
        pub fn on_worker_start<F, Fut>(mut self, f: F) -> Self
        where
            F: Fn($crate::WorkerInfo) -> Fut + 'static,
            Fut: std::future::Future + 'static,
            Fut::Output: $crate::HandlerOutput,
        {
            self.worker_callbacks.on_worker_start = Some(std::rc::Rc::new(move |w| {
                $crate::runtime::handler::boxed(f(w))
            }));
            self
        }

        /// Runs in each worker when it stops, after its connections are closed; the worker
        /// exits when it returns (or is killed when the drain time and 3 s more have passed).
        pub fn on_worker_stop<F, Fut>(mut self, f: F) -> Self
        where
            F: Fn($crate::WorkerInfo) -> Fut + 'static,
            Fut: std::future::Future + 'static,
            Fut::Output: $crate::HandlerOutput,
        {
            self.worker_callbacks.on_worker_stop = Some(std::rc::Rc::new(move |w| {
                $crate::runtime::handler::boxed(f(w))
            }));
            self
        }
    };
}
pub(crate) use worker_callback_setters;

/// The `tls` setter of the TCP-based server builders.
macro_rules! tls_setter {
    ($required:literal) => {
        #[doc = concat!("Serves TLS with this certificate; ", $required, ".")]
        ///
        /// Workers load the certificate when they start: `reload` picks up a renewed one.
        pub fn tls(mut self, config: $crate::tls::TlsConfig) -> Self {
            self.listen.tls = Some(config);
            self
        }
    };
}
pub(crate) use tls_setter;

/// A setter for a callback that takes the connection only.
macro_rules! connection_callback_setter {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub fn $name<F, Fut>(mut self, f: F) -> Self
        where
            F: Fn(Connection<P, D>) -> Fut + 'static,
            Fut: Future + 'static,
            Fut::Output: HandlerOutput,
        {
            self.callbacks.$name = Some(Rc::new(move |c: Connection<P>| boxed(f(c.typed()))));
            self
        }
    };
}

/// A stream listener with a protocol and Workerman-style callbacks.
///
/// Callbacks are async closures; they run on the worker's single thread, so they may capture
/// `Rc` and `RefCell` state. Messages of one connection are handled one at a time, in order.
/// A callback returns `()` or a `Result`; an `Err` is logged and counted as `throw_exception`,
/// and a panic is too, and also closes that connection (the worker keeps serving).
///
/// `D` is the type of the data each connection may carry ([`data`](Self::data)); `()` for
/// none.
pub struct Server<P: Protocol = Builtin, D = ()> {
    pub(crate) listen: ListenConfig,
    pub(crate) protocol: P,
    pub(crate) limits: LimitOverrides,
    pub(crate) worker_callbacks: WorkerCallbacks,
    pub(crate) callbacks: Callbacks<P>,
    data: PhantomData<fn() -> D>,
}

impl Server<Builtin> {
    /// A server for `tcp://`, `text://`, `frame://` or `unix://`, with the scheme's protocol.
    ///
    /// ```
    /// let s = brisk::Server::new("frame://127.0.0.1:7001").unwrap();
    /// assert!(brisk::Server::new("udp://127.0.0.1:9").is_err()); // use UdpServer
    /// ```
    pub fn new(address: &str) -> Result<Self> {
        let address: Address = address.parse()?;
        let other = match address.scheme() {
            Scheme::Udp => Some("UdpServer"),
            Scheme::Http | Scheme::Https => Some("brisk::http::HttpServer"),
            Scheme::Websocket | Scheme::Wss => Some("brisk::ws::WsServer"),
            _ => None,
        };
        if let Some(other) = other {
            return Err(Error::Config(format!(
                "{address}: serve this scheme with {other}, not Server"
            )));
        }
        let protocol = Builtin::for_scheme(address.scheme());
        Ok(Self::build(address, protocol))
    }
}

impl<P: Protocol> Server<P> {
    /// A server with your own protocol on a `tcp://` or `unix://` address.
    pub fn with_protocol(address: &str, protocol: P) -> Result<Self> {
        let address: Address = address.parse()?;
        if !matches!(address.scheme(), Scheme::Tcp | Scheme::Unix) {
            return Err(Error::Config(format!(
                "{address}: a custom protocol needs a tcp:// or unix:// address"
            )));
        }
        Ok(Self::build(address, protocol))
    }

    fn build(address: Address, protocol: P) -> Self {
        Server {
            listen: ListenConfig::new(address),
            protocol,
            limits: LimitOverrides::default(),
            worker_callbacks: WorkerCallbacks::default(),
            callbacks: Callbacks::default(),
            data: PhantomData,
        }
    }

    /// Names the type of the data each connection carries: every callback's
    /// [`Connection`] sets and reads a `D` ([`Connection::set_data`],
    /// [`Connection::with_data`]), so reading it as another type does not compile. Call it
    /// before the connection callbacks: it panics, naming the mistake, after one.
    ///
    /// ```no_run
    /// struct Login { user: String }
    /// let server = brisk::Server::new("text://127.0.0.1:7000")
    ///     .unwrap()
    ///     .data::<Login>()
    ///     .on_message(|conn, line| async move {
    ///         match conn.with_data(|login| login.user.clone()) {
    ///             Some(user) => conn.send(format!("{user}: {}", String::from_utf8_lossy(&line))),
    ///             None => {
    ///                 conn.set_data(Login { user: String::from_utf8_lossy(&line).into() });
    ///                 conn.send("welcome")
    ///             }
    ///         }
    ///     });
    /// ```
    pub fn data<D2: 'static>(self) -> Server<P, D2> {
        let c = &self.callbacks;
        let set = c.on_connect.is_some()
            || c.on_message.is_some()
            || c.on_close.is_some()
            || c.on_error.is_some()
            || c.on_buffer_full.is_some()
            || c.on_buffer_drain.is_some();
        assert!(
            !set,
            "Server::data::<{}>() must come before the connection callbacks (on_connect, \
             on_message, …), which take a connection of that data type",
            std::any::type_name::<D2>()
        );
        Server {
            listen: self.listen,
            protocol: self.protocol,
            limits: self.limits,
            worker_callbacks: self.worker_callbacks,
            callbacks: self.callbacks,
            data: PhantomData,
        }
    }
}

impl<P: Protocol, D: 'static> Server<P, D> {
    builder_setters!();
    tls_setter!("optional, for `tcp://`, `text://` and `frame://` listeners");

    /// Overrides [`Limits::max_send_buffer`](crate::Limits::max_send_buffer) for this server.
    pub fn max_send_buffer(mut self, bytes: usize) -> Self {
        self.limits.max_send_buffer = Some(bytes);
        self
    }

    /// Overrides [`Limits::max_package_size`](crate::Limits::max_package_size) for this server.
    pub fn max_package_size(mut self, bytes: usize) -> Self {
        self.limits.max_package_size = Some(bytes);
        self
    }

    /// Overrides [`Limits::idle_timeout`](crate::Limits::idle_timeout) for this server (`None`
    /// turns it off).
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.limits.idle_timeout = Some(timeout);
        self
    }

    /// Overrides [`Limits::send_timeout`](crate::Limits::send_timeout) for this server (`None`
    /// turns it off).
    pub fn send_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.limits.send_timeout = Some(timeout);
        self
    }

    connection_callback_setter!(
        /// Runs when a connection opens, before any of its messages.
        on_connect
    );

    /// Runs for every decoded message, one at a time per connection.
    pub fn on_message<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Connection<P, D>, P::Message) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.callbacks.on_message =
            Some(Rc::new(move |c: Connection<P>, m| boxed(f(c.typed(), m))));
        self
    }

    connection_callback_setter!(
        /// Runs once when a connection is gone, however it ended.
        on_close
    );

    /// Runs when a connection fails with an I/O error (reset, broken pipe, …), before `on_close`.
    pub fn on_error<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Connection<P, D>, std::io::Error) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.callbacks.on_error = Some(Rc::new(move |c: Connection<P>, e| boxed(f(c.typed(), e))));
        self
    }

    connection_callback_setter!(
        /// Runs when the connection's send buffer reaches the max send buffer: until it drains,
        /// `send` returns [`SendError::BufferFull`](crate::SendError::BufferFull).
        on_buffer_full
    );

    connection_callback_setter!(
        /// Runs when a send buffer that was full has been written out completely.
        on_buffer_drain
    );
}

/// A UDP listener: every datagram goes to `on_message` with a [`UdpPeer`] to answer it.
///
/// ```no_run
/// let echo = brisk::UdpServer::new("udp://127.0.0.1:7002").unwrap().on_message(
///     |peer, datagram| async move { peer.send(&datagram).await },
/// );
/// ```
pub struct UdpServer {
    pub(crate) listen: ListenConfig,
    pub(crate) worker_callbacks: WorkerCallbacks,
    pub(crate) on_message: Option<DatagramCallback>,
}

impl UdpServer {
    /// A server for a `udp://host:port` address.
    pub fn new(address: &str) -> Result<Self> {
        let address: Address = address.parse()?;
        if address.scheme() != Scheme::Udp {
            return Err(Error::Config(format!(
                "{address}: UdpServer needs a udp:// address"
            )));
        }
        Ok(UdpServer {
            listen: ListenConfig::new(address),
            worker_callbacks: WorkerCallbacks::default(),
            on_message: None,
        })
    }

    builder_setters!();

    /// Runs for every datagram; each runs as its own task, so a slow one blocks no other.
    pub fn on_message<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(UdpPeer, Bytes) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.on_message = Some(Rc::new(move |p, d| boxed(f(p, d))));
        self
    }
}

impl<P: Protocol, D> From<Server<P, D>> for Service {
    fn from(server: Server<P, D>) -> Self {
        let Server {
            listen,
            protocol,
            limits,
            worker_callbacks,
            callbacks,
            data: _,
        } = server;
        let tls = listen.tls_config(&[]);
        let tls_handshake = listen.tls.as_ref().map(|t| t.handshake_deadline());
        Service::listening(
            listen,
            worker_callbacks,
            limits,
            Box::new(move |worker, listener, limits| {
                let shared = Rc::new(ServerShared {
                    worker: worker.clone(),
                    callbacks,
                    limits,
                    protocol,
                });
                if let Some(timeout) = tls_handshake {
                    tokio::task::spawn_local(sweep_handshakes(worker.clone(), timeout));
                }
                enforce_send_timeouts(&worker);
                if let Some(timeout) = limits.idle_timeout {
                    tokio::task::spawn_local(sweep_idle(worker, timeout));
                }
                match listener {
                    Listener::Tcp(l) => {
                        let l = tokio::net::TcpListener::from_std(l)?;
                        tokio::task::spawn_local(accept_tcp(shared, l, tls));
                    }
                    Listener::Unix(l) => {
                        let l = tokio::net::UnixListener::from_std(l)?;
                        tokio::task::spawn_local(accept_unix(shared, l));
                    }
                    Listener::Udp(_) => unreachable!("Server never takes a udp:// address"),
                }
                Ok(())
            }),
        )
    }
}

impl From<UdpServer> for Service {
    fn from(server: UdpServer) -> Self {
        let UdpServer {
            listen,
            worker_callbacks,
            on_message,
        } = server;
        Service::listening(
            listen,
            worker_callbacks,
            LimitOverrides::default(),
            Box::new(move |worker, listener, _limits| {
                let Listener::Udp(s) = listener else {
                    unreachable!("UdpServer only takes udp:// addresses")
                };
                let s = tokio::net::UdpSocket::from_std(s)?;
                tokio::task::spawn_local(udp::serve(worker, s, on_message));
                Ok(())
            }),
        )
    }
}
