//! A socket standing in for systemd's notification socket (`NOTIFY_SOCKET`), for tests of
//! what a master tells systemd.

use std::os::unix::net::UnixDatagram;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// What a socket standing in for systemd's hears, read as it comes (systemd reads at once;
/// a full queue would make the master drop messages).
pub fn systemd_at(path: &std::path::Path) -> Receiver<String> {
    let socket = UnixDatagram::bind(path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok(n) = socket.recv(&mut buf) {
            if tx
                .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                .is_err()
            {
                return;
            }
        }
    });
    rx
}

/// The next message that is not a watchdog ping, within 10 s.
pub fn next_state(heard: &Receiver<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let text = heard.recv_timeout(left).expect("a message from the master");
        if text != "WATCHDOG=1" {
            return text;
        }
    }
}
