//! Raw bytes: every read is one message, every message is written as is.

use bytes::{Bytes, BytesMut};

use super::{Protocol, ProtocolError};

/// No framing: a message is whatever bytes one read returned.
///
/// ```
/// use brisk::protocol::{Protocol, Raw};
/// let mut buf = bytes::BytesMut::from(&b"abc"[..]);
/// assert_eq!(Raw.decode(&mut buf, 10).unwrap().unwrap(), "abc");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl Protocol for Raw {
    type Message = Bytes;

    fn decode(&mut self, buf: &mut BytesMut, _max: usize) -> Result<Option<Bytes>, ProtocolError> {
        if buf.is_empty() {
            return Ok(None);
        }
        Ok(Some(buf.split().freeze()))
    }

    fn encode(&mut self, msg: Bytes, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        dst.extend_from_slice(&msg);
        Ok(())
    }
}
