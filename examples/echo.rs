//! The smallest Brisk app: a Text echo server with a greeting and a per-connection counter.
//!
//! ```text
//! cargo run -p brisk --example echo -- start
//! printf 'hello\n' | nc 127.0.0.1 7020
//! ```

use std::process::ExitCode;

use brisk::{App, Server};

fn main() -> ExitCode {
    let echo = Server::new("text://127.0.0.1:7020")
        .expect("valid address")
        .workers(2)
        .data::<u64>()
        .on_connect(|conn| async move {
            conn.set_data(0);
            conn.send(format!("welcome, you are connection {}", conn.id()))
        })
        .on_message(|conn, line| async move {
            let n = conn.with_data(|n| {
                *n += 1;
                *n
            });
            conn.send(format!(
                "{}: {}",
                n.unwrap_or(0),
                String::from_utf8_lossy(&line)
            ))
        });
    App::new("echo").server(echo).run()
}
