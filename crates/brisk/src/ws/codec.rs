//! RFC 6455 on Brisk's connection runtime: the opening handshake and the frame state machine.
//!
//! Decoding yields [`WsFrame`]s: the handshake request, complete data messages (fragments
//! reassembled, text validated as UTF-8 as it arrives, so invalid text fails fast), control
//! frames, or `Fail` with the close code the connection must end with. The codec keeps bytes
//! only while a frame or fragmented message is incomplete, so an idle connection holds none.
//!
//! With permessage-deflate negotiated, a message whose first frame has RSV1 set is gathered
//! compressed and inflated (up to the size limit) once complete; outgoing messages are
//! compressed (see [`super::deflate`]).

use bytes::{Buf, Bytes, BytesMut};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::Utf8Bytes;

use super::deflate::{self, Agreement, ClientContext, InflateError};
use super::handshake::Refused;
use crate::protocol::{Protocol, ProtocolError};

mod carry;
pub(crate) use carry::CodecState;

/// Close codes Brisk sends.
pub(crate) mod close {
    pub(crate) const PROTOCOL: u16 = 1002;
    pub(crate) const INVALID_DATA: u16 = 1007;
    pub(crate) const TOO_BIG: u16 = 1009;
}

pub(crate) use super::frame_write::{cut_close_reason, encode_frame, encode_message, RSV1};

/// Largest request head accepted in the opening handshake.
const MAX_HANDSHAKE: usize = 16 * 1024;

/// What the opening handshake asked for.
#[derive(Debug, Clone)]
pub struct Handshake {
    /// The request path with its query.
    pub path: String,
    /// Whether it is a GET (over HTTP/1.1, for a listener's).
    pub(crate) get: bool,
    /// The request headers (names lower-case).
    pub headers: Vec<(String, String)>,
}

/// A frame-level event or output of a WebSocket connection.
#[derive(Debug, Clone)]
pub(crate) enum WsFrame {
    /// A valid opening handshake (server side, `websocket://` listeners).
    Handshake(Handshake),
    /// A request head a listener cannot read as a handshake.
    BadHandshake(Refused),
    /// A complete text message.
    Text(Utf8Bytes),
    /// A complete binary message.
    Binary(Bytes),
    Ping(Bytes),
    Pong(Bytes),
    /// A close frame (code and reason), or none.
    Close(Option<(u16, Utf8Bytes)>),
    /// The peer broke the protocol: close with this code.
    Fail(u16, &'static str),
    /// Bytes written as they are (a handshake reply, or a frame encoded once for many).
    Raw(Bytes),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Handshake,
    Open,
    /// After a failure: everything further is ignored.
    Failed,
}

#[derive(Debug, Clone)]
struct Fragments {
    text: bool,
    /// RSV1 was set on the first frame: `data` is deflated (and its UTF-8 checked once
    /// inflated).
    compressed: bool,
    data: BytesMut,
    /// How many leading bytes of `data` are known to be valid UTF-8.
    valid: usize,
}

/// The WebSocket protocol for Brisk connections (server role).
#[derive(Debug, Clone)]
pub(crate) struct WsCodec {
    state: State,
    /// A close frame was sent: the next close from the peer is its answer.
    close_sent: bool,
    /// permessage-deflate, if negotiated.
    deflate: Option<Agreement>,
    /// Largest message; u32 keeps the codec, and so every connection, small.
    max_message: u32,
    /// A fragmented message in progress, or (after an HTTP upgrade) the handshake `on_open`
    /// has yet to see. Boxed: idle connections have neither.
    pending: Option<Box<Pending>>,
    /// The inflater of a client that takes over context between compressed messages; empty
    /// until its first one.
    client_context: ClientContext,
}

#[derive(Debug, Clone)]
enum Pending {
    Fragments(Fragments),
    Open(Handshake, AttachedSlot),
}

/// What an upgrade route puts on the connection before `on_open` runs: a value (read with
/// `WsConnection::with_data`) and the keys it is tagged with (`ws::send_to`).
#[derive(Default)]
pub(crate) struct Attached {
    /// The connection's data.
    pub(crate) data: Option<Box<dyn std::any::Any>>,
    /// Its keys.
    pub(crate) keys: Vec<String>,
    /// Open from its handshake's answer until its `on_open` ends.
    pub(crate) window: Option<super::replay::OpenWindow>,
}

/// What an upgrade route attached to the connection, until `on_connect` takes it (a codec is
/// `Clone`; an upgraded connection's is never cloned).
#[derive(Clone, Default)]
pub(crate) struct AttachedSlot(std::rc::Rc<std::cell::Cell<Option<Attached>>>);

impl std::fmt::Debug for AttachedSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AttachedSlot")
    }
}

impl WsCodec {
    /// A codec that starts with the opening handshake (`websocket://` listeners) or, after an
    /// HTTP upgrade, with frames.
    pub(crate) fn new(handshake: bool, max_message: usize) -> Self {
        WsCodec {
            state: if handshake {
                State::Handshake
            } else {
                State::Open
            },
            close_sent: false,
            deflate: None,
            max_message: max_message.min(u32::MAX as usize) as u32,
            pending: None,
            client_context: ClientContext::default(),
        }
    }

    /// A codec for a connection upgraded from HTTP, whose handshake (with permessage-deflate
    /// if `deflate`) is done.
    pub(crate) fn upgraded(
        max_message: usize,
        handshake: Handshake,
        deflate: Option<Agreement>,
        attached: Attached,
    ) -> Self {
        let slot = AttachedSlot(std::rc::Rc::new(std::cell::Cell::new(Some(attached))));
        WsCodec {
            pending: Some(Box::new(Pending::Open(handshake, slot))),
            deflate,
            ..Self::new(false, max_message)
        }
    }

    /// The permessage-deflate agreement, if any.
    pub(crate) fn deflate(&self) -> Option<Agreement> {
        self.deflate
    }

    /// The handshake of an upgraded connection and what its route attached, once.
    pub(crate) fn take_pending_open(&mut self) -> Option<(Handshake, Attached)> {
        match self.pending.take().map(|p| *p) {
            Some(Pending::Open(h, slot)) => Some((h, slot.0.take().unwrap_or_default())),
            other => {
                self.pending = other.map(Box::new);
                None
            }
        }
    }

    /// The fragmented message in progress, taken out.
    fn take_fragments(&mut self) -> Option<Fragments> {
        match self.pending.take().map(|p| *p) {
            Some(Pending::Fragments(f)) => Some(f),
            other => {
                self.pending = other.map(Box::new);
                None
            }
        }
    }

    fn in_fragmented_message(&self) -> bool {
        matches!(self.pending.as_deref(), Some(Pending::Fragments(_)))
    }

    /// Bytes of the fragmented message in progress, and whether it is compressed.
    fn fragments_len(&self) -> (usize, bool) {
        match self.pending.as_deref() {
            Some(Pending::Fragments(f)) => (f.data.len(), f.compressed),
            _ => (0, false),
        }
    }

    /// Whether a close frame was sent on this connection.
    pub(crate) fn close_sent(&self) -> bool {
        self.close_sent
    }

    fn fail(&mut self, code: u16, why: &'static str) -> Result<Option<WsFrame>, ProtocolError> {
        self.state = State::Failed;
        self.pending = None;
        Ok(Some(WsFrame::Fail(code, why)))
    }

    fn decode_handshake(&mut self, buf: &mut BytesMut) -> Result<Option<WsFrame>, ProtocolError> {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            if buf.len() > MAX_HANDSHAKE {
                self.state = State::Failed;
                return Ok(Some(WsFrame::BadHandshake(Refused::HeadTooLarge)));
            }
            return Ok(None);
        };
        let head = buf.split_to(end + 4);
        self.state = State::Failed; // until the reply switches it to Open
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return Ok(Some(WsFrame::BadHandshake(Refused::Malformed))),
        }
        // A WebSocket handshake is a GET over HTTP/1.1: `handshake::check` decides the rest,
        // as it does for an HTTP route's.
        let get = req.method == Some("GET") && req.version == Some(1);
        let headers: Vec<(String, String)> = req
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        Ok(Some(WsFrame::Handshake(Handshake {
            path: req.path.unwrap_or("/").to_string(),
            get,
            headers,
        })))
    }

    /// Decodes frames until one yields something for the connection, or more bytes are
    /// needed. A non-final fragment yields nothing, so the next frame, possibly already in
    /// `buf`, is decoded in the same call.
    fn decode_frames(&mut self, buf: &mut BytesMut) -> Result<Option<WsFrame>, ProtocolError> {
        loop {
            let before = buf.len();
            match self.decode_frame(buf)? {
                Some(f) => return Ok(Some(f)),
                None if buf.len() < before && self.state == State::Open => continue,
                None => return Ok(None),
            }
        }
    }

    fn decode_frame(&mut self, buf: &mut BytesMut) -> Result<Option<WsFrame>, ProtocolError> {
        if buf.len() < 2 {
            return Ok(None);
        }
        let (b0, b1) = (buf[0], buf[1]);
        let fin = b0 & 0x80 != 0;
        let opcode = b0 & 0x0f;
        let rsv1 = b0 & RSV1 != 0;
        if b0 & 0x30 != 0 || (rsv1 && self.deflate.is_none()) {
            return self.fail(close::PROTOCOL, "reserved bits set without an extension");
        }
        if rsv1 && !matches!(opcode, 0x1 | 0x2) {
            return self.fail(
                close::PROTOCOL,
                "RSV1 is only for the first frame of a data message",
            );
        }
        if b1 & 0x80 == 0 {
            return self.fail(close::PROTOCOL, "client frames must be masked");
        }
        let (len, header) = match b1 & 0x7f {
            126 if buf.len() < 4 => return Ok(None),
            126 => (u16::from_be_bytes([buf[2], buf[3]]) as u64, 4),
            127 if buf.len() < 10 => return Ok(None),
            127 => (
                u64::from_be_bytes(buf[2..10].try_into().expect("8 bytes")),
                10,
            ),
            n => (n as u64, 2),
        };
        let control = opcode & 0x08 != 0;
        if control && (len > 125 || !fin) {
            return self.fail(
                close::PROTOCOL,
                "control frames must be final and at most 125 bytes",
            );
        }
        let (so_far, compressed) = self.fragments_len();
        let limit = match compressed || rsv1 {
            true => deflate::compressed_limit(self.max_message as u64),
            false => self.max_message as u64,
        };
        // Saturating: a 64-bit length near its maximum must not wrap past the check.
        if !control && (so_far as u64).saturating_add(len) > limit {
            return self.fail(close::TOO_BIG, "message over the size limit");
        }
        let total = header + 4 + len as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let mask: [u8; 4] = buf[header..header + 4].try_into().expect("4 bytes");
        buf.advance(header + 4);
        let mut payload = buf.split_to(len as usize);
        unmask(&mut payload, mask);
        match opcode {
            0x8 => self.decode_close(payload.freeze()),
            0x9 => Ok(Some(WsFrame::Ping(payload.freeze()))),
            0xA => Ok(Some(WsFrame::Pong(payload.freeze()))),
            0x1 | 0x2 => {
                if self.in_fragmented_message() {
                    return self.fail(
                        close::PROTOCOL,
                        "a new message started inside a fragmented one",
                    );
                }
                let text = opcode == 0x1;
                if fin {
                    return self.complete(text, rsv1, payload, 0);
                }
                let mut f = Fragments {
                    text,
                    compressed: rsv1,
                    data: payload,
                    valid: 0,
                };
                if text && !rsv1 && !advance_utf8(&mut f) {
                    return self.fail(close::INVALID_DATA, "invalid UTF-8 in a text message");
                }
                self.pending = Some(Box::new(Pending::Fragments(f)));
                Ok(None)
            }
            0x0 => {
                let Some(mut f) = self.take_fragments() else {
                    return self.fail(close::PROTOCOL, "continuation frame without a message");
                };
                f.data.unsplit(payload);
                if f.text && !f.compressed && !advance_utf8(&mut f) {
                    return self.fail(close::INVALID_DATA, "invalid UTF-8 in a text message");
                }
                if fin {
                    let Fragments {
                        text,
                        compressed,
                        data,
                        valid,
                    } = f;
                    return self.complete(text, compressed, data, valid);
                }
                self.pending = Some(Box::new(Pending::Fragments(f)));
                Ok(None)
            }
            _ => self.fail(close::PROTOCOL, "unknown opcode"),
        }
    }

    /// A whole message: inflated if `compressed`, text validated from byte `valid` on.
    fn complete(
        &mut self,
        text: bool,
        compressed: bool,
        mut data: BytesMut,
        valid: usize,
    ) -> Result<Option<WsFrame>, ProtocolError> {
        let data = if compressed {
            match self.inflate(&mut data) {
                Ok(inflated) => Bytes::from(inflated),
                Err(InflateError::TooBig) => {
                    return self.fail(close::TOO_BIG, "message over the size limit once inflated")
                }
                Err(InflateError::Corrupt) => {
                    return self.fail(close::INVALID_DATA, "invalid compressed data")
                }
            }
        } else {
            data.freeze()
        };
        if !text {
            return Ok(Some(WsFrame::Binary(data)));
        }
        if std::str::from_utf8(&data[valid..]).is_err() {
            return self.fail(close::INVALID_DATA, "invalid UTF-8 in a text message");
        }
        // SAFETY: every byte was just validated as UTF-8.
        Ok(Some(WsFrame::Text(unsafe {
            Utf8Bytes::from_bytes_unchecked(data)
        })))
    }

    /// Inflates a compressed message with the connection's own window if the client takes
    /// over context, else with the worker's shared inflater.
    fn inflate(&mut self, data: &mut BytesMut) -> Result<Vec<u8>, InflateError> {
        let takeover = !self.deflate.is_some_and(|a| a.client_no_context_takeover);
        let context = takeover.then_some(&mut self.client_context);
        deflate::inflate_message(data, context, self.max_message as usize)
    }

    fn decode_close(&mut self, payload: Bytes) -> Result<Option<WsFrame>, ProtocolError> {
        match payload.len() {
            0 => Ok(Some(WsFrame::Close(None))),
            1 => self.fail(close::PROTOCOL, "close frame with a 1-byte payload"),
            _ => {
                let code = u16::from_be_bytes([payload[0], payload[1]]);
                if !CloseCode::from(code).is_allowed() {
                    return self.fail(close::PROTOCOL, "invalid close code");
                }
                match Utf8Bytes::try_from(payload.slice(2..)) {
                    Ok(reason) => Ok(Some(WsFrame::Close(Some((code, reason))))),
                    Err(_) => self.fail(close::INVALID_DATA, "close reason is not UTF-8"),
                }
            }
        }
    }
}

/// Validates the newly arrived part of a fragmented text message; an incomplete character at
/// the end is fine (its next bytes may come in the next fragment).
fn advance_utf8(f: &mut Fragments) -> bool {
    match std::str::from_utf8(&f.data[f.valid..]) {
        Ok(_) => {
            f.valid = f.data.len();
            true
        }
        Err(e) if e.error_len().is_none() => {
            f.valid += e.valid_up_to();
            true
        }
        Err(_) => false,
    }
}

/// XORs the payload with the client's mask, eight bytes at a time.
fn unmask(data: &mut [u8], mask: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes((&*c).try_into().expect("8 bytes")) ^ wide;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
}

impl Protocol for WsCodec {
    type Message = WsFrame;

    fn decode(
        &mut self,
        buf: &mut BytesMut,
        _max: usize,
    ) -> Result<Option<WsFrame>, ProtocolError> {
        match self.state {
            State::Handshake => self.decode_handshake(buf),
            State::Open => self.decode_frames(buf),
            State::Failed => {
                buf.clear();
                Ok(None)
            }
        }
    }

    fn encode(&mut self, msg: WsFrame, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        if matches!(msg, WsFrame::Close(_) | WsFrame::Fail(..)) {
            self.close_sent = true;
        }
        let bits = self.deflate.map(|a| a.server_window_bits());
        match msg {
            WsFrame::Text(t) => encode_message(0x1, t.as_bytes(), bits, dst),
            WsFrame::Binary(b) => encode_message(0x2, &b, bits, dst),
            WsFrame::Ping(b) => encode_frame(0x9, &b, dst),
            WsFrame::Pong(b) => encode_frame(0xA, &b, dst),
            WsFrame::Close(None) => encode_frame(0x8, &[], dst),
            WsFrame::Close(Some((code, reason))) => {
                let mut p = Vec::with_capacity(2 + reason.len());
                p.extend_from_slice(&code.to_be_bytes());
                p.extend_from_slice(reason.as_bytes());
                encode_frame(0x8, &p, dst);
            }
            WsFrame::Fail(code, why) => {
                let mut p = Vec::with_capacity(2 + why.len());
                p.extend_from_slice(&code.to_be_bytes());
                p.extend_from_slice(why.as_bytes());
                encode_frame(0x8, &p, dst);
            }
            WsFrame::Raw(b) => dst.extend_from_slice(&b),
            WsFrame::Handshake(_) | WsFrame::BadHandshake(..) => {
                return Err(ProtocolError::Invalid("handshakes are not encoded".into()))
            }
        }
        Ok(())
    }

    fn heartbeat(&self) -> Option<WsFrame> {
        (self.state == State::Open).then(|| WsFrame::Ping(Bytes::new()))
    }

    fn farewell(&self) -> Option<WsFrame> {
        let open = self.state == State::Open && !self.close_sent;
        open.then(|| WsFrame::Close(Some((1001, Utf8Bytes::from_static("server going away")))))
    }

    fn handshaking(&self) -> bool {
        self.state == State::Handshake
    }
}

impl WsCodec {
    /// After the handshake reply is sent: frames from now on, compressed as `deflate` agreed.
    pub(crate) fn open(&mut self, deflate: Option<Agreement>) {
        self.state = State::Open;
        self.deflate = deflate;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![(if fin { 0x80 } else { 0 }) | opcode];
        match payload.len() {
            n @ 0..=125 => f.push(0x80 | n as u8),
            n => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        let mask = [1, 2, 3, 4];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    #[test]
    fn fragments_and_interleaved_control_frames_in_one_buffer() {
        let mut c = WsCodec::new(false, 1 << 20);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&client_frame(false, 0x1, b"he"));
        buf.extend_from_slice(&client_frame(true, 0x9, b"p"));
        buf.extend_from_slice(&client_frame(true, 0x0, b"llo"));
        assert!(matches!(c.decode(&mut buf, 0).unwrap(), Some(WsFrame::Ping(p)) if &p[..] == b"p"));
        assert!(
            matches!(c.decode(&mut buf, 0).unwrap(), Some(WsFrame::Text(t)) if t.as_str() == "hello")
        );
        assert!(buf.is_empty());
        assert!(c.decode(&mut buf, 0).unwrap().is_none());
    }

    #[test]
    fn utf8_split_across_fragments_is_fine_and_invalid_fails_fast() {
        let mut c = WsCodec::new(false, 1 << 20);
        let mut buf = BytesMut::new();
        let e = "é".as_bytes();
        buf.extend_from_slice(&client_frame(false, 0x1, &e[..1]));
        buf.extend_from_slice(&client_frame(true, 0x0, &e[1..]));
        assert!(
            matches!(c.decode(&mut buf, 0).unwrap(), Some(WsFrame::Text(t)) if t.as_str() == "é")
        );
        // An invalid byte in the first fragment fails before the message ends.
        buf.extend_from_slice(&client_frame(false, 0x1, &[0xff]));
        assert!(matches!(
            c.decode(&mut buf, 0).unwrap(),
            Some(WsFrame::Fail(1007, _))
        ));
    }

    #[test]
    fn handshake_then_frames() {
        let mut c = WsCodec::new(true, 1024);
        let mut buf = BytesMut::from(&b"GET /chat?room=1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"[..]);
        let Some(WsFrame::Handshake(h)) = c.decode(&mut buf, 0).unwrap() else {
            panic!()
        };
        assert_eq!(h.path, "/chat?room=1");
        c.open(None);
        buf.extend_from_slice(&client_frame(true, 0x2, b"\x00\x01"));
        assert!(
            matches!(c.decode(&mut buf, 0).unwrap(), Some(WsFrame::Binary(b)) if &b[..] == b"\x00\x01")
        );
    }

    /// `data` deflated as a client would send it (sync flush, tail stripped).
    fn deflated(data: &[u8]) -> Vec<u8> {
        let mut c = flate2::Compress::new(flate2::Compression::default(), false);
        let mut out = Vec::with_capacity(data.len() + 64);
        c.compress_vec(data, &mut out, flate2::FlushCompress::Sync)
            .unwrap();
        out.truncate(out.len() - 4);
        out
    }

    fn negotiated(max: usize) -> WsCodec {
        let mut c = WsCodec::new(false, max);
        c.open(Some(Agreement::default()));
        c
    }

    fn decode_one(c: &mut WsCodec, bytes: &[u8]) -> Option<WsFrame> {
        let mut buf = BytesMut::from(bytes);
        c.decode(&mut buf, 0).unwrap()
    }

    #[test]
    fn compressed_messages_whole_and_fragmented() {
        let text = "compress me, compress me, compress me, compress me";
        let z = deflated(text.as_bytes());
        let mut c = negotiated(1024);
        let got = decode_one(&mut c, &client_frame(true, RSV1 | 0x1, &z));
        assert!(matches!(got, Some(WsFrame::Text(t)) if t.as_str() == text));
        // Fragmented: RSV1 on the first frame only, a ping in between.
        let mut bytes = client_frame(false, RSV1 | 0x2, &z[..3]);
        bytes.extend(client_frame(true, 0x9, b""));
        bytes.extend(client_frame(true, 0x0, &z[3..]));
        let mut buf = BytesMut::from(&bytes[..]);
        assert!(matches!(
            c.decode(&mut buf, 0).unwrap(),
            Some(WsFrame::Ping(_))
        ));
        let got = c.decode(&mut buf, 0).unwrap();
        assert!(matches!(got, Some(WsFrame::Binary(b)) if b == text.as_bytes()));
        // An uncompressed message is still fine.
        let got = decode_one(&mut c, &client_frame(true, 0x1, b"plain"));
        assert!(matches!(got, Some(WsFrame::Text(t)) if t.as_str() == "plain"));
    }

    #[test]
    fn rsv1_where_it_does_not_belong_is_a_protocol_error() {
        let z = deflated(b"hello");
        let cases = [
            (
                WsCodec::new(false, 1024),
                client_frame(true, RSV1 | 0x1, &z),
            ),
            (negotiated(1024), client_frame(true, RSV1 | 0x9, b"")),
            (negotiated(1024), {
                let mut b = client_frame(false, 0x1, b"a");
                b.extend(client_frame(true, RSV1, b"b"));
                b
            }),
            (negotiated(1024), client_frame(true, 0x20 | 0x1, b"x")),
        ];
        for (i, (mut c, bytes)) in cases.into_iter().enumerate() {
            let got = decode_one(&mut c, &bytes);
            assert!(
                matches!(got, Some(WsFrame::Fail(1002, _))),
                "case {i}: {got:?}"
            );
        }
    }

    #[test]
    fn a_64_bit_length_near_its_maximum_after_a_fragment_is_too_big_not_a_panic() {
        // Found by the websocket_frames fuzz target: the length added to the fragments so far
        // wrapped past the size check.
        let mut bytes = client_frame(false, 0x2, b"ab");
        bytes.extend([0x80, 0x80 | 127]);
        bytes.extend(u64::MAX.to_be_bytes());
        bytes.extend([1, 2, 3, 4]);
        let got = decode_one(&mut WsCodec::new(false, 1024), &bytes);
        assert!(matches!(got, Some(WsFrame::Fail(1009, _))), "{got:?}");
    }

    #[test]
    fn inflated_size_and_content_are_checked() {
        let bomb = deflated(&vec![b'a'; 100_000]);
        assert!(bomb.len() < 1024);
        let got = decode_one(
            &mut negotiated(1024),
            &client_frame(true, RSV1 | 0x2, &bomb),
        );
        assert!(matches!(got, Some(WsFrame::Fail(1009, _))), "{got:?}");
        let bad_utf8 = deflated(&[0xce, 0xba, 0xff, 0xfe]);
        let got = decode_one(
            &mut negotiated(1024),
            &client_frame(true, RSV1 | 0x1, &bad_utf8),
        );
        assert!(matches!(got, Some(WsFrame::Fail(1007, _))), "{got:?}");
        let got = decode_one(
            &mut negotiated(1024),
            &client_frame(true, RSV1 | 0x1, &[0xff; 8]),
        );
        assert!(matches!(got, Some(WsFrame::Fail(1007, _))), "{got:?}");
    }

    #[test]
    fn outgoing_messages_are_compressed_when_negotiated() {
        let long = "a message long enough to be worth compressing, compressing, compressing";
        let mut dst = BytesMut::new();
        negotiated(1024)
            .encode(WsFrame::Text(long.into()), &mut dst)
            .unwrap();
        assert_eq!(dst[0], 0x80 | RSV1 | 0x1);
        let mut d = flate2::Decompress::new(false);
        let mut payload = dst[2..].to_vec();
        payload.extend_from_slice(&[0, 0, 0xff, 0xff]);
        let mut out = Vec::with_capacity(256);
        d.decompress_vec(&payload, &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        assert_eq!(out, long.as_bytes());
        // Connections that did not negotiate get messages as they are.
        let mut dst = BytesMut::new();
        WsCodec::new(false, 1024)
            .encode(WsFrame::Text(long.into()), &mut dst)
            .unwrap();
        assert_eq!(dst[0], 0x81);
    }

    /// Connections of `websocket://` listeners keep their codec inline: it must stay small.
    #[test]
    fn the_codec_stays_small() {
        let size = std::mem::size_of::<WsCodec>();
        assert!(size <= 24, "{size} bytes");
    }
}
