//! The connection's state machine in process: a connection task of a test worker served on one
//! end of a Unix socket pair, the test speaking on the other, both on one current-thread
//! runtime, as a worker runs them. Each test drives one transition of `lifecycle.rs` through
//! the task and checks what the peer sees and which callbacks ran.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::protocol::Text;
use crate::runtime::context::test_worker;
use crate::runtime::handler::boxed;

/// What the callbacks saw, in order.
type Seen = Rc<RefCell<Vec<String>>>;

/// A text server's connection whose `on_message` does what each line says (`echo X`,
/// `close X` sends X then closes, `flood N` sends N lines of 1 KiB, `big N` one line of N
/// bytes (and says how that went: `big sent`, `big full`, `big too large`), `pause`,
/// `destroy`, and nothing for anything else),
/// served on one end of a socket pair; the other end, the handle and what was seen.
fn served(
    limits: Limits,
) -> (
    tokio::net::UnixStream,
    Seen,
    Rc<RefCell<Option<Connection>>>,
) {
    let worker = test_worker();
    let seen: Seen = Rc::default();
    let handle: Rc<RefCell<Option<Connection>>> = Rc::default();
    let mut callbacks = Callbacks::<Builtin>::default();
    let (log, kept) = (seen.clone(), handle.clone());
    callbacks.on_connect = Some(Rc::new(move |c: Connection| {
        *kept.borrow_mut() = Some(c);
        log.borrow_mut().push("connect".into());
        boxed(async {})
    }));
    let log = seen.clone();
    callbacks.on_message = Some(Rc::new(move |c: Connection, line: Bytes| {
        let line = String::from_utf8_lossy(&line).into_owned();
        log.borrow_mut().push(format!("message {line}"));
        let (word, rest) = line.split_once(' ').unwrap_or((&line, ""));
        match word {
            "echo" => drop(c.send(rest.to_owned())),
            "close" => {
                let _ = c.send(rest.to_owned());
                c.close();
            }
            "flood" => {
                let line = "x".repeat(1023);
                for _ in 0..rest.parse::<usize>().unwrap_or(0) {
                    if c.send(line.clone()).is_err() {
                        break;
                    }
                }
            }
            "big" => {
                let line = "y".repeat(rest.parse::<usize>().unwrap_or(1).saturating_sub(1));
                let outcome = match c.send(line) {
                    Ok(()) => "big sent",
                    Err(SendError::BufferFull) => "big full",
                    Err(SendError::TooLarge { .. }) => "big too large",
                    Err(_) => "big failed",
                };
                log.borrow_mut().push(outcome.into());
            }
            "pause" => c.pause_recv(),
            "destroy" => c.destroy(),
            _ => {}
        }
        boxed(async {})
    }));
    for (name, slot) in [
        ("full", &mut callbacks.on_buffer_full),
        ("drain", &mut callbacks.on_buffer_drain),
        ("close", &mut callbacks.on_close),
    ] {
        let log = seen.clone();
        *slot = Some(Rc::new(move |_c: Connection| {
            log.borrow_mut().push(name.into());
            boxed(async {})
        }));
    }
    let server = Rc::new(ServerShared {
        worker,
        callbacks,
        limits,
        protocol: Builtin::Text(Text::default()),
    });
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    theirs.set_nonblocking(true).unwrap();
    let ours = tokio::net::UnixStream::from_std(ours).unwrap();
    let theirs = tokio::net::UnixStream::from_std(theirs).unwrap();
    tokio::task::spawn_local(serve(server, Stream::Unix(ours), PeerAddr::Unix(None)));
    (theirs, seen, handle)
}

/// Runs `test` on a worker-like runtime: one thread, a local set, time paused only when the
/// test says so.
fn on_a_worker(test: impl std::future::Future<Output = ()>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, test);
}

/// Everything the peer reads until the connection's end.
async fn read_to_end(peer: &mut tokio::net::UnixStream) -> String {
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), peer.read_to_end(&mut all))
        .await
        .expect("the connection ends")
        .unwrap();
    String::from_utf8(all).unwrap()
}

/// One line from the peer's side.
async fn read_line(peer: &mut tokio::net::UnixStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while tokio::time::timeout(Duration::from_secs(10), peer.read_exact(&mut byte))
        .await
        .expect("a line")
        .is_ok()
    {
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    String::from_utf8(line).unwrap()
}

#[test]
fn a_close_sends_what_is_queued_then_ends_and_its_handles_see_it_closed() {
    on_a_worker(async {
        let (mut peer, seen, handle) = served(Limits::default());
        peer.write_all(b"echo one\nclose two\necho three\n")
            .await
            .unwrap();
        // What was queued before the close goes out; nothing is handled after it.
        assert_eq!(read_to_end(&mut peer).await, "one\ntwo\n");
        let conn = handle.borrow().clone().expect("on_connect ran");
        // It lingers for the peer's end, which comes now.
        assert_eq!(conn.inner.state.lifecycle(), Lifecycle::Closing);
        peer.shutdown().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !seen.borrow().iter().any(|s| s == "close") && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(conn.inner.state.lifecycle(), Lifecycle::Destroyed);
        assert!(conn.is_closed());
        assert!(matches!(conn.send("late"), Err(SendError::Closed)));
        assert_eq!(
            *seen.borrow(),
            ["connect", "message echo one", "message close two", "close"]
        );
    });
}

#[test]
fn the_peers_end_of_stream_is_answered_then_the_connection_closes() {
    on_a_worker(async {
        let (mut peer, seen, _handle) = served(Limits::default());
        peer.write_all(b"echo a\necho b\n").await.unwrap();
        peer.shutdown().await.unwrap();
        assert_eq!(read_to_end(&mut peer).await, "a\nb\n");
        assert_eq!(seen.borrow().last().map(String::as_str), Some("close"));
    });
}

#[test]
fn a_destroy_ends_it_at_once_and_nothing_more_is_handled() {
    on_a_worker(async {
        let (mut peer, seen, handle) = served(Limits::default());
        peer.write_all(b"echo first\n").await.unwrap();
        assert_eq!(read_line(&mut peer).await, "first");
        peer.write_all(b"destroy\necho never\n").await.unwrap();
        assert_eq!(read_to_end(&mut peer).await, "");
        let conn = handle.borrow().clone().unwrap();
        assert_eq!(conn.inner.state.lifecycle(), Lifecycle::Destroyed);
        assert!(!seen.borrow().iter().any(|s| s == "message echo never"));
    });
}

#[test]
fn a_full_send_buffer_fires_on_buffer_full_once_and_on_buffer_drain_when_it_empties() {
    on_a_worker(async {
        let limits = Limits {
            max_send_buffer: 64 << 10,
            ..Limits::default()
        };
        let (mut peer, seen, handle) = served(limits);
        // Far more than the socket pair and the send buffer hold together.
        peer.write_all(b"flood 4096\n").await.unwrap();
        let conn = handle.clone();
        let full = || seen.borrow().iter().filter(|s| *s == "full").count();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while full() == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(full(), 1, "{:?}", seen.borrow());
        // Each line counted whole against the limit: full, and never past it.
        let queued = conn.borrow().as_ref().unwrap().send_buffer_len();
        assert!(queued <= 64 << 10, "{queued} bytes queued");
        assert!(queued > (64 << 10) - 1024, "{queued} bytes queued");
        // The peer reads it all: the queue empties, and the drain is told once.
        let mut sink = vec![0u8; 1 << 20];
        let drained = || seen.borrow().iter().any(|s| s == "drain");
        while !drained() && tokio::time::Instant::now() < deadline {
            let _ = tokio::time::timeout(Duration::from_millis(5), peer.read(&mut sink)).await;
        }
        let seen = seen.borrow();
        assert_eq!(seen.iter().filter(|s| *s == "full").count(), 1, "{seen:?}");
        assert_eq!(seen.iter().filter(|s| *s == "drain").count(), 1, "{seen:?}");
    });
}

#[test]
fn a_paused_connection_reads_nothing_until_it_resumes() {
    on_a_worker(async {
        let (mut peer, seen, handle) = served(Limits::default());
        peer.write_all(b"pause\n").await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while seen.borrow().len() < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        peer.write_all(b"echo later\n").await.unwrap();
        // Several turns of the loop with the line waiting in the socket: not read.
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*seen.borrow(), ["connect", "message pause"]);
        handle.borrow().as_ref().unwrap().resume_recv();
        assert_eq!(read_line(&mut peer).await, "later");
    });
}

#[test]
fn a_message_larger_than_the_whole_send_buffer_is_refused_as_too_large() {
    on_a_worker(async {
        let limits = Limits {
            max_send_buffer: 64 << 10,
            ..Limits::default()
        };
        let (mut peer, seen, handle) = served(limits);
        peer.write_all(
            b"big 65537
big 65536
",
        )
        .await
        .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let outcomes = || {
            let seen = seen.borrow();
            seen.iter()
                .filter(|s| s.starts_with("big "))
                .cloned()
                .collect::<Vec<_>>()
        };
        while outcomes().len() < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(outcomes(), ["big too large", "big sent"]);
        // The one that fits arrives whole; the refused one left nothing on the wire.
        assert_eq!(read_line(&mut peer).await.len(), 65535);
        let conn = handle.borrow().clone().unwrap();
        assert_eq!(conn.worker_stats().sends_dropped.get(), 1);
        assert!(
            !seen.borrow().iter().any(|s| s == "full"),
            "too large is not full"
        );
    });
}

/// Waits until `done`, for at most 10 s.
async fn until(done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A connection with a 64 KiB send buffer and a 1 s send timeout whose queue is full, the
/// worker's send-timeout sweep running: its peer and its handle.
async fn flooded_with_a_send_timeout() -> (tokio::net::UnixStream, Connection) {
    let limits = Limits {
        max_send_buffer: 64 << 10,
        send_timeout: Some(Duration::from_secs(1)),
        ..Limits::default()
    };
    let (mut peer, seen, handle) = served(limits);
    peer.write_all(b"flood 4096\n").await.unwrap();
    until(|| seen.borrow().iter().any(|s| s == "full")).await;
    let conn = handle.borrow().clone().unwrap();
    crate::runtime::sweep::enforce_send_timeouts(conn.worker());
    (peer, conn)
}

#[test]
fn a_peer_that_stops_reading_is_closed_after_the_send_timeout_though_it_still_sends() {
    on_a_worker(async {
        let (mut peer, conn) = flooded_with_a_send_timeout().await;
        let worker = conn.worker().clone();
        let stalled = std::time::Instant::now();
        // It keeps talking (as a WebSocket client that pings), and never reads.
        while conn.inner.state.lifecycle() != Lifecycle::Destroyed
            && stalled.elapsed() < Duration::from_secs(10)
        {
            let _ = peer.write_all(b"noop\n").await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(conn.inner.state.lifecycle(), Lifecycle::Destroyed);
        assert!(
            stalled.elapsed() >= Duration::from_millis(900),
            "{:?}",
            stalled.elapsed()
        );
        assert_eq!(worker.stats.send_timeouts.get(), 1);
    });
}

#[test]
fn a_peer_that_reads_slowly_but_steadily_is_kept() {
    on_a_worker(async {
        let (mut peer, conn) = flooded_with_a_send_timeout().await;
        // Every 200 ms for 3 s, it reads what the kernel holds and is sent more than that:
        // three send timeouts, always behind, but the queue keeps moving.
        let mut sink = vec![0u8; 1 << 20];
        let began = std::time::Instant::now();
        let mut behind = 0;
        while began.elapsed() < Duration::from_secs(3) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            behind += usize::from(conn.send_buffer_len() > 0);
            peer.write_all(b"flood 512\n").await.unwrap();
            let read = tokio::time::timeout(Duration::from_secs(2), peer.read(&mut sink)).await;
            assert!(
                matches!(read, Ok(Ok(n)) if n > 0),
                "the connection ended: {read:?}"
            );
        }
        assert_eq!(conn.worker_stats().send_timeouts.get(), 0);
        assert!(conn.inner.state.is_open());
        assert!(behind >= 10, "behind at {behind} of its reads");
    });
}
