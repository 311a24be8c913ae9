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
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::LocalBoxFuture;

use crate::address::{Address, Scheme};
use crate::error::{Error, Result};
use crate::protocol::{Builtin, Protocol};
use crate::worker::connection::Connection;
use crate::worker::udp::UdpPeer;
use crate::worker::WorkerInfo;

/// What a handler's error turns into: logged and counted as `throw_exception`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a callback may return: `()` or `Result<(), E>`.
pub trait HandlerOutput {
    /// The error, if any.
    fn into_result(self) -> Result<(), BoxError>;
}

impl HandlerOutput for () {
    fn into_result(self) -> Result<(), BoxError> {
        Ok(())
    }
}

impl<E: Into<BoxError>> HandlerOutput for std::result::Result<(), E> {
    fn into_result(self) -> Result<(), BoxError> {
        self.map_err(Into::into)
    }
}

pub(crate) type HandlerFuture = LocalBoxFuture<'static, Result<(), BoxError>>;
pub(crate) type ConnCallback<P> = Rc<dyn Fn(Connection<P>) -> HandlerFuture>;
pub(crate) type MessageCallback<P> =
    Rc<dyn Fn(Connection<P>, <P as Protocol>::Message) -> HandlerFuture>;
pub(crate) type ErrorCallback<P> = Rc<dyn Fn(Connection<P>, std::io::Error) -> HandlerFuture>;
pub(crate) type WorkerCallback = Rc<dyn Fn(WorkerInfo) -> HandlerFuture>;
pub(crate) type DatagramCallback = Rc<dyn Fn(UdpPeer, Bytes) -> HandlerFuture>;

/// Boxes a callback's future, turning its output into a `Result`.
pub(crate) fn boxed<Fut>(fut: Fut) -> HandlerFuture
where
    Fut: Future + 'static,
    Fut::Output: HandlerOutput,
{
    Box::pin(async move { fut.await.into_result() })
}

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

        /// The listen backlog (default 1024; ignored for UDP).
        pub fn backlog(mut self, n: u32) -> Self {
            self.listen.backlog = n;
            self
        }

        /// Runs in each worker after its listener is open, before it reports ready.
        pub fn on_worker_start<F, Fut>(mut self, f: F) -> Self
        where
            F: Fn($crate::WorkerInfo) -> Fut + 'static,
            Fut: std::future::Future + 'static,
            Fut::Output: $crate::HandlerOutput,
        {
            self.worker_callbacks.on_worker_start =
                Some(std::rc::Rc::new(move |w| $crate::server::boxed(f(w))));
            self
        }

        /// Runs in each worker when it stops, after its connections are closed.
        pub fn on_worker_stop<F, Fut>(mut self, f: F) -> Self
        where
            F: Fn($crate::WorkerInfo) -> Fut + 'static,
            Fut: std::future::Future + 'static,
            Fut::Output: $crate::HandlerOutput,
        {
            self.worker_callbacks.on_worker_stop =
                Some(std::rc::Rc::new(move |w| $crate::server::boxed(f(w))));
            self
        }
    };
}
pub(crate) use builder_setters;

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
            F: Fn(Connection<P>) -> Fut + 'static,
            Fut: Future + 'static,
            Fut::Output: HandlerOutput,
        {
            self.callbacks.$name = Some(Rc::new(move |c| boxed(f(c))));
            self
        }
    };
}

/// Limits that protect a worker from slow or hostile peers. Set defaults on the
/// [`App`](crate::App) and override them per server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes queued for one connection before `send` fails and `on_buffer_full` fires.
    /// Default 2 MiB.
    pub max_send_buffer: usize,
    /// Largest message a peer may send; a larger one closes the connection. Default 10 MiB.
    pub max_package_size: usize,
    /// Close a connection after this long without receiving anything. Default: off.
    pub idle_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_send_buffer: 2 << 20,
            max_package_size: 10 << 20,
            idle_timeout: None,
        }
    }
}

/// Per-server overrides of the app's [`Limits`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LimitOverrides {
    pub(crate) max_send_buffer: Option<usize>,
    pub(crate) max_package_size: Option<usize>,
    pub(crate) idle_timeout: Option<Option<Duration>>,
}

impl LimitOverrides {
    pub(crate) fn apply(&self, defaults: Limits) -> Limits {
        Limits {
            max_send_buffer: self.max_send_buffer.unwrap_or(defaults.max_send_buffer),
            max_package_size: self.max_package_size.unwrap_or(defaults.max_package_size),
            idle_timeout: self.idle_timeout.unwrap_or(defaults.idle_timeout),
        }
    }
}

/// How a server's listeners are set up; shared by every kind of server.
#[derive(Debug, Clone)]
pub(crate) struct ListenConfig {
    pub address: Address,
    pub workers: Option<usize>,
    pub reuse_port: bool,
    pub backlog: u32,
    pub tls: Option<crate::tls::TlsConfig>,
}

impl ListenConfig {
    pub(crate) fn new(address: Address) -> Self {
        ListenConfig {
            address,
            workers: None,
            reuse_port: true,
            backlog: 1024,
            tls: None,
        }
    }

    /// TLS is configured exactly where the scheme needs it (or allows it: `tcp`, `text`,
    /// `frame`).
    pub(crate) fn check_tls(&self) -> Result<()> {
        let scheme = self.address.scheme();
        let problem: &str = match (scheme, self.tls.is_some()) {
            (Scheme::Https | Scheme::Wss, false) => {
                "needs a certificate: add .tls(brisk::tls::TlsConfig::from_pem_files(cert, key)?)"
            }
            (Scheme::Http, true) => "has a certificate: write https:// to serve TLS",
            (Scheme::Websocket, true) => "has a certificate: write wss:// to serve TLS",
            (Scheme::Udp | Scheme::Unix, true) => "cannot serve TLS (TCP listeners only)",
            _ => return Ok(()),
        };
        Err(Error::Config(format!("{}: {problem}", self.address)))
    }

    /// The rustls configuration for this listener, offering `alpn`.
    pub(crate) fn tls_config(
        &self,
        alpn: &[&[u8]],
    ) -> Option<std::sync::Arc<rustls::ServerConfig>> {
        self.tls.as_ref().map(|t| t.server_config(alpn))
    }

    /// Unix sockets cannot be shared with SO_REUSEPORT: the master always binds them.
    pub(crate) fn shared_by_master(&self) -> bool {
        !self.reuse_port || self.address.scheme() == Scheme::Unix
    }
}

/// The callbacks every worker-level service has.
#[derive(Clone, Default)]
pub(crate) struct WorkerCallbacks {
    pub on_worker_start: Option<WorkerCallback>,
    pub on_worker_stop: Option<WorkerCallback>,
}

/// The callbacks of a stream server.
pub(crate) struct Callbacks<P: Protocol> {
    pub on_connect: Option<ConnCallback<P>>,
    pub on_message: Option<MessageCallback<P>>,
    pub on_close: Option<ConnCallback<P>>,
    pub on_error: Option<ErrorCallback<P>>,
    pub on_buffer_full: Option<ConnCallback<P>>,
    pub on_buffer_drain: Option<ConnCallback<P>>,
}

impl<P: Protocol> Default for Callbacks<P> {
    fn default() -> Self {
        Callbacks {
            on_connect: None,
            on_message: None,
            on_close: None,
            on_error: None,
            on_buffer_full: None,
            on_buffer_drain: None,
        }
    }
}

/// A stream listener with a protocol and Workerman-style callbacks.
///
/// Callbacks are async closures; they run on the worker's single thread, so they may capture
/// `Rc` and `RefCell` state. Messages of one connection are handled one at a time, in order.
/// A callback returns `()` or a `Result`; an `Err` is logged and counted as `throw_exception`,
/// and a panic is too, and also closes that connection (the worker keeps serving).
pub struct Server<P: Protocol = Builtin> {
    pub(crate) listen: ListenConfig,
    pub(crate) protocol: P,
    pub(crate) limits: LimitOverrides,
    pub(crate) worker_callbacks: WorkerCallbacks,
    pub(crate) callbacks: Callbacks<P>,
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
        }
    }

    builder_setters!();
    tls_setter!("optional, for `tcp://`, `text://` and `frame://` listeners");

    /// Overrides [`Limits::max_send_buffer`] for this server.
    pub fn max_send_buffer(mut self, bytes: usize) -> Self {
        self.limits.max_send_buffer = Some(bytes);
        self
    }

    /// Overrides [`Limits::max_package_size`] for this server.
    pub fn max_package_size(mut self, bytes: usize) -> Self {
        self.limits.max_package_size = Some(bytes);
        self
    }

    /// Overrides [`Limits::idle_timeout`] for this server (`None` turns it off).
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.limits.idle_timeout = Some(timeout);
        self
    }

    connection_callback_setter!(
        /// Runs when a connection opens, before any of its messages.
        on_connect
    );

    /// Runs for every decoded message, one at a time per connection.
    pub fn on_message<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Connection<P>, P::Message) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.callbacks.on_message = Some(Rc::new(move |c, m| boxed(f(c, m))));
        self
    }

    connection_callback_setter!(
        /// Runs once when a connection is gone, however it ended.
        on_close
    );

    /// Runs when a connection fails with an I/O error (reset, broken pipe, …), before `on_close`.
    pub fn on_error<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Connection<P>, std::io::Error) -> Fut + 'static,
        Fut: Future + 'static,
        Fut::Output: HandlerOutput,
    {
        self.callbacks.on_error = Some(Rc::new(move |c, e| boxed(f(c, e))));
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
