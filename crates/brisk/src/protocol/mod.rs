//! Protocols turn bytes into messages and messages into bytes.
//!
//! A [`Protocol`] value lives with one connection (it is cloned from the server's template when
//! the connection opens), so it may keep decoding state, such as how far it already scanned.
//! Brisk calls [`Protocol::decode`] whenever new bytes arrive, as many times as it returns a
//! message, and closes the connection when it returns an error.
//!
//! Built in: [`Raw`] (`tcp://`, `unix://`), [`Text`] (`text://`) and [`Frame`] (`frame://`);
//! [`Builtin`] picks one of them from the address scheme.
//!
//! A user-defined protocol, here messages prefixed by one length byte:
//!
//! ```
//! use brisk::protocol::{Protocol, ProtocolError};
//! use bytes::{Buf, BufMut, Bytes, BytesMut};
//!
//! #[derive(Clone, Default)]
//! struct ShortFrame;
//!
//! impl Protocol for ShortFrame {
//!     type Message = Bytes;
//!     fn decode(&mut self, buf: &mut BytesMut, _max: usize) -> Result<Option<Bytes>, ProtocolError> {
//!         let Some(&len) = buf.first() else { return Ok(None) };
//!         if buf.len() < 1 + len as usize { return Ok(None) }
//!         buf.advance(1);
//!         Ok(Some(buf.split_to(len as usize).freeze()))
//!     }
//!     fn encode(&mut self, msg: Bytes, dst: &mut BytesMut) -> Result<(), ProtocolError> {
//!         let len = u8::try_from(msg.len()).map_err(|_| ProtocolError::TooLarge { size: msg.len(), limit: 255 })?;
//!         dst.put_u8(len);
//!         dst.extend_from_slice(&msg);
//!         Ok(())
//!     }
//! }
//! ```

mod frame;
mod raw;
mod text;

pub use frame::Frame;
pub use raw::Raw;
pub use text::Text;

use bytes::{Bytes, BytesMut};

use crate::address::Scheme;

/// Why a protocol refused some bytes or a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A message is longer than the limit (the server's max package size when decoding).
    #[error("message of {size} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// The size of the message, as far as it is known.
        size: usize,
        /// The limit it broke.
        limit: usize,
    },
    /// The bytes do not follow the protocol.
    #[error("invalid input: {0}")]
    Invalid(String),
}

/// Turns a byte stream into messages and messages into bytes.
///
/// `decode` gets the bytes received and not yet consumed. It either takes one complete
/// message off the front of `buf` and returns it, returns `Ok(None)` when more bytes are needed
/// (Brisk keeps `buf` and calls again after the next read), or returns an error, which closes
/// the connection. `max_package_size` is the server's limit: a protocol should reject a message
/// as soon as it knows it will be larger, rather than buffering it first.
pub trait Protocol: Clone + 'static {
    /// What one decoded message is.
    type Message: 'static;

    /// Takes one complete message off the front of `buf`, if there is one.
    fn decode(
        &mut self,
        buf: &mut BytesMut,
        max_package_size: usize,
    ) -> Result<Option<Self::Message>, ProtocolError>;

    /// Appends the wire form of `msg` to `dst`.
    fn encode(&mut self, msg: Self::Message, dst: &mut BytesMut) -> Result<(), ProtocolError>;

    /// A message that asks the peer for a sign of life (WebSocket: a ping), sent by servers
    /// with a heartbeat to connections that have been quiet. None: the protocol has none.
    fn heartbeat(&self) -> Option<Self::Message> {
        None
    }

    /// What a connection says before a stopping worker closes it between messages
    /// (WebSocket: a close frame with 1001, "going away"). None: it is just closed.
    fn farewell(&self) -> Option<Self::Message> {
        None
    }

    /// Whether the connection is still in the protocol's opening handshake (WebSocket:
    /// before the upgrade request). Servers with a handshake timeout close connections that
    /// stay here too long.
    fn handshaking(&self) -> bool {
        false
    }
}

/// The protocol an address scheme names: [`Raw`], [`Text`] or [`Frame`], with [`Bytes`] messages.
#[derive(Debug, Clone)]
pub enum Builtin {
    /// `tcp://`, `unix://`.
    Raw(Raw),
    /// `text://`.
    Text(Text),
    /// `frame://`.
    Frame(Frame),
}

impl Builtin {
    /// The protocol for `scheme`.
    pub fn for_scheme(scheme: Scheme) -> Self {
        match scheme {
            Scheme::Text => Builtin::Text(Text::default()),
            Scheme::Frame => Builtin::Frame(Frame),
            Scheme::Tcp
            | Scheme::Udp
            | Scheme::Unix
            | Scheme::Http
            | Scheme::Https
            | Scheme::Websocket
            | Scheme::Wss => Builtin::Raw(Raw),
        }
    }
}

impl Protocol for Builtin {
    type Message = Bytes;

    fn decode(&mut self, buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>, ProtocolError> {
        match self {
            Builtin::Raw(p) => p.decode(buf, max),
            Builtin::Text(p) => p.decode(buf, max),
            Builtin::Frame(p) => p.decode(buf, max),
        }
    }

    fn encode(&mut self, msg: Bytes, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        match self {
            Builtin::Raw(p) => p.encode(msg, dst),
            Builtin::Text(p) => p.encode(msg, dst),
            Builtin::Frame(p) => p.encode(msg, dst),
        }
    }
}
