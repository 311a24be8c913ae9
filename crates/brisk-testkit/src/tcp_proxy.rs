//! A TCP proxy on loopback that a test can cut: every connection through it closed at once,
//! and new ones refused until restored, as when a client's network goes away. It keeps a
//! handle of every connection until cut or dropped: for tests, not for long runs.
//!
//! ```no_run
//! let proxy = brisk_testkit::TcpProxy::start(8080);
//! // clients connect to proxy.port …
//! proxy.cut();
//! proxy.restore();
//! ```

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// A proxy from a free loopback port to `127.0.0.1:target`; it stops when dropped.
pub struct TcpProxy {
    /// The port clients connect to.
    pub port: u16,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    down: AtomicBool,
    stopped: AtomicBool,
    /// Both ends of every open connection.
    open: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn close_all(&self) {
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl TcpProxy {
    /// Starts proxying to `target` on 127.0.0.1.
    pub fn start(target: u16) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        thread::spawn(move || {
            for inbound in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(inbound) = inbound else { continue };
                // Checked and registered under the lock `cut` takes: no connection slips
                // between its check and the cut.
                let mut open = accepting.open.lock().unwrap();
                let outbound = match accepting.down.load(Ordering::SeqCst) {
                    true => None,
                    false => TcpStream::connect(("127.0.0.1", target)).ok(),
                };
                let Some(outbound) = outbound else {
                    let _ = inbound.shutdown(Shutdown::Both);
                    continue;
                };
                open.push(inbound.try_clone().unwrap());
                open.push(outbound.try_clone().unwrap());
                drop(open);
                pipe(inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
                pipe(outbound, inbound);
            }
        });
        TcpProxy { port, shared }
    }

    /// Closes every connection through the proxy, and refuses new ones until [`restore`](Self::restore).
    pub fn cut(&self) {
        let mut open = self.shared.open.lock().unwrap();
        self.shared.down.store(true, Ordering::SeqCst);
        for s in open.drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Takes new connections again.
    pub fn restore(&self) {
        self.shared.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.close_all();
        // Wakes the accepting thread so that it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` on a thread until either side closes.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
