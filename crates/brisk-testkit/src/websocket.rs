//! Reading a WebSocket client's messages in a test.

use std::net::TcpStream;
use std::time::Duration;

use tungstenite::{Message, WebSocket};

/// The next text message on `ws`, or `None` if none comes within `limit`. Skips what is not
/// text: the pings a Brisk server sends to a connection that has been quiet for its ping
/// interval (tungstenite answers them), pongs, and binary messages. Panics on any other error.
///
/// ```no_run
/// # fn f(ws: &mut tungstenite::WebSocket<std::net::TcpStream>) {
/// use std::time::Duration;
/// let text = brisk_testkit::next_text(ws, Duration::from_secs(5)).expect("a message");
/// assert_eq!(brisk_testkit::next_text(ws, Duration::from_millis(300)), None, "nothing more");
/// # }
/// ```
pub fn next_text(ws: &mut WebSocket<TcpStream>, limit: Duration) -> Option<String> {
    ws.get_ref().set_read_timeout(Some(limit)).unwrap();
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => return Some(t.to_string()),
            Ok(_) => {}
            Err(e) if timed_out(&e) => return None,
            Err(e) => panic!("{e}"),
        }
    }
}

/// Whether a read on a socket with a read timeout failed because the timeout passed (the
/// kernel says `WouldBlock` or `TimedOut`), not because the connection failed.
pub fn timed_out(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(e)
        if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}
