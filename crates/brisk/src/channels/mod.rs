//! Channels (feature `channels`): a documented, versioned protocol over WebSocket that lets
//! browsers and apps connect with a token, subscribe to channels they are allowed, publish
//! where a namespace allows, ask who is there, and recover what they missed after a
//! reconnect; and a [server API](ServerApi) that lets any backend publish, disconnect users
//! and read presence and history over HTTP. Publications reach subscribers on every worker
//! and, with `App::cluster`, every instance.
//!
//! The protocol (version 1) is described in the guide's "Channels" chapter: one JSON object
//! per text message, or with `?format=msgpack` in the URL one MessagePack map per binary
//! message ([`Format`]); commands carry an `id` and get a reply with it, pushes carry none.
//!
//! ```text
//! → {"id":1,"connect":{"token":"eyJ…"}}
//! ← {"id":1,"result":{"client":"9f…-2a","user":"alice","version":1,"expires":1900000000}}
//! → {"id":2,"subscribe":{"channel":"chat:lobby","since":"1732412345000123:41"}}
//! ← {"id":2,"result":{"channel":"chat:lobby","position":"1732412345000123:42",
//!                     "recovered":true,"publications":[{"offset":"1732412345000123:42","data":…}]}}
//! ← {"channel":"chat:lobby","pub":{"offset":"1732412345000123:43","data":{"text":"hi"}}}
//! ```
//!
//! ```no_run
//! use brisk::channels::{Access, Channels, Namespace, Publishers};
//! use brisk::jwt::Jwt;
//! # fn f() -> Result<(), brisk::jwt::JwtError> {
//! let channels = Channels::jwt(Jwt::hs256(b"a secret of at least thirty-two bytes")?)
//!     .namespace("chat", Namespace::new()
//!         .subscribe(Access::Connected)
//!         .publishers(Publishers::Subscribers)
//!         .presence(true));
//! let endpoint = channels.endpoint(); // in each worker: GET /connection/websocket
//! # Ok(()) }
//! ```

mod api;
mod auth;
mod http_stream;
mod hub;
mod namespace;
mod replay;
mod session;
mod sse;
mod wire;

pub use api::{ServerApi, ShortApiKey, MIN_API_KEY_LEN};
pub use auth::{Refusal, Subject};
pub use hub::{ChannelError, ChannelHistory, Channels, PresenceInfo};
pub use namespace::{
    Access, Namespace, PublishRate, Publishers, DEFAULT_MAX_PUBLICATION, DEFAULT_PUBLISH_RATE,
    MAX_CHANNEL_LEN,
};
pub use session::{Session, MAX_CLIENT_MESSAGE};
pub use wire::{ErrorCode, Format, PROTOCOL_VERSION};

/// The close codes a channel connection can end with (besides WebSocket's own, such as 1001
/// when the server stops and 1008/1013 for a slow consumer).
pub mod close {
    /// The token is not valid: malformed, a bad signature, another audience or issuer, no
    /// user. Reconnecting with the same token will fail again.
    pub const INVALID_TOKEN: u16 = 4001;
    /// The token has expired, at `connect` or later without a `refresh`: get a new one, then
    /// reconnect.
    pub const TOKEN_EXPIRED: u16 = 4002;
    /// The server disconnected the user (the server API's `disconnect`, by default).
    pub const DISCONNECTED: u16 = 4003;
    /// The client broke the protocol: a message that is not a command, one of the other
    /// format (binary in JSON, text in MessagePack), or an unknown `format` in the URL.
    pub const BAD_REQUEST: u16 = 4004;
    /// No `connect` came in time after the WebSocket opened.
    pub const CONNECT_TIMEOUT: u16 = 4005;
    /// The server could not check the token now (its keys could not be loaded): try again
    /// later.
    pub const SERVER_ERROR: u16 = 1011;
}
