//! Length-prefixed binary messages, as Workerman's `frame` protocol.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{Protocol, ProtocolError};

const HEADER: usize = 4;

/// A 4-byte big-endian length that counts itself, then the payload.
///
/// A length under 4 is invalid; a length over the max package size is rejected as soon as the
/// header arrives, before any of the payload is buffered.
///
/// ```
/// use brisk::protocol::{Frame, Protocol};
/// let mut buf = bytes::BytesMut::from(&[0, 0, 0, 7, b'a', b'b', b'c'][..]);
/// assert_eq!(Frame.decode(&mut buf, 100).unwrap().unwrap(), "abc");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Frame;

impl Protocol for Frame {
    type Message = Bytes;

    fn decode(&mut self, buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>, ProtocolError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < HEADER {
            return Err(ProtocolError::Invalid(format!(
                "frame length {len} is less than its own 4-byte header"
            )));
        }
        if len > max {
            return Err(ProtocolError::TooLarge {
                size: len,
                limit: max,
            });
        }
        if buf.len() < len {
            buf.reserve(len - buf.len());
            return Ok(None);
        }
        let mut frame = buf.split_to(len);
        frame.advance(HEADER);
        Ok(Some(frame.freeze()))
    }

    fn encode(&mut self, msg: Bytes, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let len = msg.len() + HEADER;
        let len32 = u32::try_from(len).map_err(|_| ProtocolError::TooLarge {
            size: len,
            limit: u32::MAX as usize,
        })?;
        dst.reserve(len);
        dst.put_u32(len32);
        dst.extend_from_slice(&msg);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_partial_input() {
        let mut wire = BytesMut::new();
        Frame
            .encode(Bytes::from_static(b"hello"), &mut wire)
            .unwrap();
        Frame.encode(Bytes::new(), &mut wire).unwrap();
        assert_eq!(&wire[..4], &[0, 0, 0, 9]);
        let mut buf = BytesMut::new();
        let mut got = vec![];
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(m) = Frame.decode(&mut buf, 1 << 20).unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, [Bytes::from_static(b"hello"), Bytes::new()]);
    }

    #[test]
    fn rejects_short_and_oversized_lengths_from_the_header() {
        let mut buf = BytesMut::from(&[0, 0, 0, 3][..]);
        assert!(matches!(
            Frame.decode(&mut buf, 100),
            Err(ProtocolError::Invalid(_))
        ));
        let mut buf = BytesMut::from(&[0, 0, 1, 0][..]);
        assert_eq!(
            Frame.decode(&mut buf, 100),
            Err(ProtocolError::TooLarge {
                size: 256,
                limit: 100
            })
        );
    }
}
