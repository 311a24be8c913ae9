//! permessage-deflate (RFC 7692): what a connection agreed to in its opening handshake
//! ([`offer`]) and the compression of its messages ([`zlib`]).
//!
//! Memory is the design constraint: an idle WebSocket connection costs well under 1 KiB, and
//! zlib state is tens (inflate) to hundreds (deflate) of KiB. So:
//!
//! - A connection that did not negotiate the extension holds no zlib state at all.
//! - The server never takes over context: every response says `server_no_context_takeover`,
//!   so each outgoing message is compressed on its own by one compressor per window size for
//!   the whole worker, reset per message. This also lets a broadcast compress a message once
//!   for every member that negotiated the extension.
//! - For the client's direction, a client that offers `client_no_context_takeover` is held to
//!   it and its messages are inflated by one inflater for the whole worker, reset per message.
//!   A client that keeps its LZ77 window across messages (the default) needs its own inflater,
//!   made on its first compressed message and kept for the connection's life (up to about
//!   40 KiB: zlib's state and the 32 KiB window; about 20 KiB of RSS after one short message).
//!   That is the price of the better compression context takeover gives that client's
//!   messages. A connection that negotiated but sent nothing compressed costs what any other
//!   does.

mod offer;
mod zlib;

pub(crate) use offer::{negotiate, Agreement, MAX_WINDOW_BITS};
pub(crate) use zlib::{deflate_message, inflate_message, ClientContext, InflateError};

/// Largest compressed message accepted for messages of at most `max` bytes once inflated:
/// incompressible data grows when deflated, by up to an eighth with fixed Huffman codes.
pub(crate) fn compressed_limit(max: u64) -> u64 {
    max + max / 8 + 64
}
