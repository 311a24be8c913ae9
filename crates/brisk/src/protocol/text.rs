//! Newline-delimited messages, as Workerman's `text` protocol.

use bytes::{Buf, Bytes, BytesMut};

use super::{Protocol, ProtocolError};

/// One message per line. Decoding strips the `\n` (and a `\r` before it); encoding appends `\n`.
///
/// The limit counts the line with its terminator. The decoder remembers how far it scanned, so
/// a long line arriving in many reads is scanned once.
///
/// ```
/// use brisk::protocol::{Protocol, Text};
/// let mut text = Text::default();
/// let mut buf = bytes::BytesMut::from(&b"hello\r\nwor"[..]);
/// assert_eq!(text.decode(&mut buf, 100).unwrap().unwrap(), "hello");
/// assert_eq!(text.decode(&mut buf, 100).unwrap(), None);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Text {
    scanned: usize,
}

impl Protocol for Text {
    type Message = Bytes;

    fn decode(&mut self, buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>, ProtocolError> {
        let start = self.scanned.min(buf.len());
        match buf[start..].iter().position(|&b| b == b'\n') {
            Some(offset) => {
                let end = start + offset;
                self.scanned = 0;
                if end + 1 > max {
                    return Err(ProtocolError::TooLarge {
                        size: end + 1,
                        limit: max,
                    });
                }
                let mut line = buf.split_to(end + 1);
                line.truncate(end);
                if line.last() == Some(&b'\r') {
                    line.truncate(end - 1);
                }
                Ok(Some(line.freeze()))
            }
            None => {
                if buf.len() >= max {
                    return Err(ProtocolError::TooLarge {
                        size: buf.len(),
                        limit: max,
                    });
                }
                self.scanned = buf.len();
                Ok(None)
            }
        }
    }

    fn encode(&mut self, msg: Bytes, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        dst.reserve(msg.len() + 1);
        dst.extend_from_slice(msg.chunk());
        dst.extend_from_slice(b"\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines_across_reads_and_in_one_read() {
        let mut t = Text::default();
        let mut buf = BytesMut::new();
        for piece in [&b"he"[..], b"ll", b"o\nsecond\nthi", b"rd\r\n"] {
            buf.extend_from_slice(piece);
        }
        let mut got = vec![];
        while let Some(m) = t.decode(&mut buf, 1024).unwrap() {
            got.push(m);
        }
        assert_eq!(got, ["hello", "second", "third"]);
        assert!(buf.is_empty());
    }

    #[test]
    fn rejects_a_line_over_the_limit_before_its_end_arrives() {
        let mut t = Text::default();
        let mut buf = BytesMut::from(&[b'x'; 16][..]);
        assert!(matches!(
            t.decode(&mut buf, 16),
            Err(ProtocolError::TooLarge { .. })
        ));
        let mut buf = BytesMut::from(&b"0123456789\n"[..]);
        assert!(Text::default().decode(&mut buf, 5).is_err());
    }

    #[test]
    fn encode_appends_newline() {
        let mut out = BytesMut::new();
        Text::default()
            .encode(Bytes::from_static(b"hi"), &mut out)
            .unwrap();
        assert_eq!(&out[..], b"hi\n");
    }
}
