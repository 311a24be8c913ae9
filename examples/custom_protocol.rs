//! A user-defined protocol with typed messages: a 1-byte tag, a 4-byte big-endian payload
//! length, then the payload.
//!
//! ```text
//! cargo run -p brisk --example custom_protocol -- start
//! ```
//!
//! Tag 1 is `Ping(u64)` (answered with `Pong` of the same number), tag 3 is `Say(String)`
//! (answered with the text reversed). Anything else is rejected, which closes the connection.

use std::process::ExitCode;

use brisk::protocol::{Protocol, ProtocolError};
use brisk::{App, Server};
use bytes::{Buf, BufMut, BytesMut};

/// The messages this protocol speaks, in both directions.
#[derive(Debug, Clone, PartialEq)]
enum Msg {
    Ping(u64),
    Pong(u64),
    Say(String),
}

/// Tag + length + payload.
#[derive(Debug, Clone, Default)]
struct Tagged;

const HEADER: usize = 5;

impl Protocol for Tagged {
    type Message = Msg;

    fn decode(&mut self, buf: &mut BytesMut, max: usize) -> Result<Option<Msg>, ProtocolError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        let tag = buf[0];
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len + HEADER > max {
            return Err(ProtocolError::TooLarge {
                size: len + HEADER,
                limit: max,
            });
        }
        if buf.len() < HEADER + len {
            return Ok(None);
        }
        buf.advance(HEADER);
        let mut payload = buf.split_to(len);
        let msg = match (tag, len) {
            (1, 8) => Msg::Ping(payload.get_u64()),
            (2, 8) => Msg::Pong(payload.get_u64()),
            (3, _) => Msg::Say(
                String::from_utf8(payload.to_vec())
                    .map_err(|_| ProtocolError::Invalid("Say is not UTF-8".into()))?,
            ),
            _ => {
                return Err(ProtocolError::Invalid(format!(
                    "unknown tag {tag} with {len} bytes"
                )))
            }
        };
        Ok(Some(msg))
    }

    fn encode(&mut self, msg: Msg, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        match msg {
            Msg::Ping(n) | Msg::Pong(n) => {
                dst.put_u8(if matches!(msg, Msg::Ping(_)) { 1 } else { 2 });
                dst.put_u32(8);
                dst.put_u64(n);
            }
            Msg::Say(text) => {
                dst.put_u8(3);
                dst.put_u32(text.len() as u32);
                dst.extend_from_slice(text.as_bytes());
            }
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let server = Server::with_protocol("tcp://127.0.0.1:7010", Tagged)
        .expect("valid address")
        .workers(1)
        .on_message(|conn, msg| async move {
            match msg {
                Msg::Ping(n) => conn.send(Msg::Pong(n)),
                Msg::Say(text) => conn.send(Msg::Say(text.chars().rev().collect())),
                Msg::Pong(_) => Ok(()),
            }
        });
    App::new("custom_protocol").server(server).run()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_message_and_rejects_unknown_tags() {
        let mut wire = BytesMut::new();
        for m in [Msg::Ping(7), Msg::Pong(9), Msg::Say("héllo".into())] {
            Tagged.encode(m, &mut wire).unwrap();
        }
        let mut got = Vec::new();
        while let Some(m) = Tagged.decode(&mut wire, 1024).unwrap() {
            got.push(m);
        }
        assert_eq!(got, [Msg::Ping(7), Msg::Pong(9), Msg::Say("héllo".into())]);
        let mut bad = BytesMut::from(&[9u8, 0, 0, 0, 0][..]);
        assert!(Tagged.decode(&mut bad, 1024).is_err());
    }
}
