//! WebSocket (RFC 6455) on Brisk's connection runtime: `websocket://` listeners, upgrades from
//! HTTP routes, groups and broadcast, and server-sent event streams of the same groups
//! ([`event_stream`]).
//!
//! The frame codec runs inside the same connection task as every Brisk protocol, so an idle
//! WebSocket connection holds no buffers. Ping/pong, the closing handshake, fragmentation,
//! UTF-8 validation and size limits are handled here; handlers see whole messages.
//! permessage-deflate (RFC 7692) is optional, per endpoint
//! ([`WsEndpoint::permessage_deflate`]).
//!
//! ```no_run
//! use brisk::ws::{WsEndpoint, WsServer};
//! let echo = WsEndpoint::new().on_message(|ws, msg| async move { ws.send(msg) });
//! let server = WsServer::new("websocket://127.0.0.1:9001").unwrap().endpoint(echo);
//! ```

#[cfg(feature = "axum")]
mod axum_upgrade;
pub(crate) mod codec;
mod connection;
pub(crate) mod deflate;
mod delivery;
mod endpoint;
mod event_stream;
mod frame_write;
mod group;
pub(crate) mod group_key;
pub(crate) mod handover;
mod handshake;
#[cfg(feature = "redis")]
mod history;
mod identity;
pub(crate) mod named;
mod origin;
#[cfg(feature = "redis")]
mod presence;
pub(crate) mod replay;
mod server;

#[cfg(feature = "axum")]
pub use axum_upgrade::WebSocketUpgrade;
pub use codec::Handshake;
pub use connection::WsConnection;
pub(crate) use endpoint::Endpoint;
pub use endpoint::{Resumed, SlowConsumer, WsEndpoint, SLOW_CLOSE_GRACE};
pub use event_stream::event_stream;
#[cfg(feature = "channels")]
pub(crate) use event_stream::{owned_event_stream, OwnedStream};
#[cfg(feature = "channels")]
pub(crate) use group::broadcast_to;
pub(crate) use group::deliver_relayed;
pub use group::{broadcast, local_members};
#[cfg(feature = "redis")]
pub use history::{
    BadPosition, History, HistoryError, HistoryOptions, Kept, Lost, Position, Recovery,
};
#[cfg(feature = "channels")]
pub(crate) use identity::close_members;
#[cfg(feature = "redis")]
pub use identity::sockets_of;
pub use identity::{close_where, send_to};
pub use named::EndpointName;
#[cfg(feature = "redis")]
pub(crate) use presence::start as start_presence;
#[cfg(feature = "channels")]
pub(crate) use presence::{groups_in, ids_of, members_of};
#[cfg(feature = "redis")]
pub use presence::{groups_with_prefix, presence, presence_ids};
pub use server::WsServer;
pub use tungstenite::Utf8Bytes;

use bytes::Bytes;

/// A complete WebSocket data message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Text (valid UTF-8).
    Text(Utf8Bytes),
    /// Binary data.
    Binary(Bytes),
}

impl Message {
    /// A text message.
    pub fn text(t: impl Into<Utf8Bytes>) -> Self {
        Message::Text(t.into())
    }

    /// A binary message.
    pub fn binary(b: impl Into<Bytes>) -> Self {
        Message::Binary(b.into())
    }

    /// The payload bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Message::Text(t) => t.as_bytes(),
            Message::Binary(b) => b,
        }
    }
}
