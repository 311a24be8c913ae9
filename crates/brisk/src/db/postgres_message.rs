//! Server messages read within limits: a message's length is checked from its header before
//! any of it is buffered, so a hostile or broken server that announces a message of gigabytes
//! gets an error, not the memory (`postgres-protocol` would reserve the whole length first).

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{ErrorResponseBody, Message};
use tokio::io::AsyncReadExt;

use super::postgres_connect_error::{ConnectError, MessageError};
use super::postgres_tls::Socket;

/// The largest message start-up takes: authentication requests, settings, errors and the
/// one-row answer of `SHOW` are a few hundred bytes.
pub(super) const MAX_STARTUP_MESSAGE: usize = 64 * 1024;

/// The next whole message at the start of `input` and its size on the wire (type byte,
/// length and body), `None` when more bytes are needed; an error when its header announces
/// more than `max` bytes, or it cannot be read.
pub(super) fn next_message(
    input: &mut BytesMut,
    max: usize,
) -> Result<Option<(Message, usize)>, MessageError> {
    let Some(header) = input.get(..5) else {
        return Ok(None);
    };
    // The length counts itself (4 bytes), not the type byte.
    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    let size = length + 1;
    if size > max {
        return Err(MessageError::TooLarge {
            size,
            kind: char::from(header[0]),
            max,
        });
    }
    match Message::parse(input) {
        Ok(Some(message)) => Ok(Some((message, size))),
        Ok(None) => Ok(None),
        Err(e) => Err(MessageError::Unreadable(e)),
    }
}

/// Reads from `socket` into `input` until a whole message (of at most `max` bytes) is there.
pub(super) async fn read_message(
    socket: &mut Box<dyn Socket>,
    input: &mut BytesMut,
    max: usize,
) -> Result<Message, ConnectError> {
    loop {
        if let Some((message, _)) = next_message(input, max)? {
            return Ok(message);
        }
        match socket.read_buf(input).await {
            Ok(0) => return Err(ConnectError::Closed),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// An error's code and message, as `CODE: message`.
pub(super) fn error_text(body: &ErrorResponseBody) -> String {
    let (mut code, mut message) = (String::new(), String::new());
    let mut fields = body.fields();
    while let Ok(Some(field)) = fields.next() {
        match field.type_() {
            b'C' => code = String::from_utf8_lossy(field.value_bytes()).into_owned(),
            b'M' => message = String::from_utf8_lossy(field.value_bytes()).into_owned(),
            _ => {}
        }
    }
    format!("{code}: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_over_the_limit_fails_from_its_header_alone() {
        // 'D' announcing 2 GiB, with 3 bytes of body so far.
        let mut input = BytesMut::from(&[b'D', 0x80, 0, 0, 0, 1, 2, 3][..]);
        let before = input.capacity();
        let e = next_message(&mut input, 1 << 20).err().unwrap();
        assert!(e.to_string().contains("over the limit of 1048576"), "{e}");
        assert_eq!(input.capacity(), before, "nothing reserved for it");
    }

    #[test]
    fn messages_within_the_limit_come_whole_with_their_size() {
        // ReadyForQuery (idle), cut after its header.
        let mut input = BytesMut::from(&[b'Z', 0, 0, 0, 5][..]);
        assert!(next_message(&mut input, 64).unwrap().is_none());
        input.extend_from_slice(b"I");
        let (message, size) = next_message(&mut input, 64).unwrap().unwrap();
        assert!(matches!(message, Message::ReadyForQuery(_)));
        assert_eq!(size, 6);
        assert!(input.is_empty());
        // A length below 4 is unreadable, not a panic.
        let mut input = BytesMut::from(&[b'Z', 0, 0, 0, 1][..]);
        assert!(next_message(&mut input, 64).is_err());
    }
}
