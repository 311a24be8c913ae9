//! Request framing for HTTP/1.x: the defence against request smuggling, in one place. A
//! request that two servers in a chain could read differently (where it ends, which host it
//! is for) gets 400 and the connection closes, as nginx does, on both of the connection's
//! readers: Brisk's own path (`h1`, plaintext requests without a streamed body)
//! and hyper (TLS, and every connection the own path handed over).
//!
//! Where each check lives, and why there:
//!
//! | Check | Own path | hyper's path | Why there |
//! |---|---|---|---|
//! | Malformed bytes: request line, field names, a space before the colon, obsolete line folding, bare CR, NUL and other control bytes | `httparse` refuses; the connection is handed to hyper, which answers 400 | hyper's parser, 400 | Each parser refuses what it cannot read; the own path never guesses |
//! | A head over the limits | A request line alone over them: 414 (`h1::parse`); else handed over | 431 | hyper does not tell a long line from a long head |
//! | Both `Content-Length` and `Transfer-Encoding` | [`head::body_framing`] says `Refused`: 400 with the sentence | the [guard] reads the head with the same [`head::body_framing`] and replaces it with a line hyper refuses: 400 | hyper alone reads the body by `Transfer-Encoding` and drops `Content-Length` before any handler sees it (RFC 9112, 6.1 allows it), so only a reader under hyper can refuse it |
//! | An invalid or ambiguous `Content-Length`, a last coding other than `chunked`, HTTP/1.0 with `Transfer-Encoding`, bad chunk sizes | [`head::body_framing`] says `Unreadable` (or `Chunked`): handed over | hyper, 400; the guard stops following and passes the rest through | Bodies the own path does not take are hyper's to read and to refuse |
//! | `chunked` twice, HTTP/1.1 without `Host`, two `Host` fields, an absolute-form target whose host is not `Host`'s | both parsers accept them; [`rules::violation`], run by `respond::admit` on every request, answers 400 with the sentence | the same | One check after either parser, on the parsed request |
//!
//! The readers agree on where a request ends because both take its length from
//! [`head::body_framing`]. The test that sends every vector (a table modelled on the published
//! smuggling research) on both paths and asserts each status and the close is
//! `crates/brisk-testkit/tests/h1_framing.rs`; the fuzz targets `framing_guard` and
//! `http1_head` check that the guard reads a stream the same however it is cut and passes on
//! only the bytes it was given, and that the own path's parser is consistent.

pub(super) mod guard;
pub(super) mod head;
pub(super) mod rules;
