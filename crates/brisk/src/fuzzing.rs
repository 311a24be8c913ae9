//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): each runs one parser or
//! decoder of Brisk's on arbitrary bytes and panics when a property fails, beyond "no panic":
//! what is encoded decodes back to itself, and a normalised path never leaves the root.
//! Not part of the API.

use bytes::{Bytes, BytesMut};

use crate::http::h1_head::{parse, Parsed};
use crate::http::static_files::path::parse_path;
use crate::http::HttpLimits;
use crate::protocol::{Frame, Protocol, Text};
use crate::ws::codec::{WsCodec, WsFrame};
use crate::ws::deflate::{deflate_message, inflate_message, ClientContext, InflateError};
use crate::Address;

/// The framing guard under hyper (`http/framing/guard.rs`), on a stream cut in pieces of a
/// size the first byte gives: what hyper reads is the same however the stream is cut, and it
/// is the stream itself, or a prefix of it (a head cut short at the end is dropped), or a
/// prefix followed by the refused request line.
pub fn framing_guard(data: &[u8]) {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let (max_head, max_headers) = (2048, 16);
    let whole = crate::http::framing_guard_pass(stream, stream.len(), max_head, max_headers);
    let cut =
        crate::http::framing_guard_pass(stream, usize::from(step % 64) + 1, max_head, max_headers);
    assert_eq!(
        cut, whole,
        "the same stream, cut differently, read differently"
    );
    let refused = crate::http::REFUSED_LINE;
    let kept = whole.strip_suffix(refused).unwrap_or(&whole);
    assert!(
        stream.starts_with(kept),
        "the guard changed bytes it passed on"
    );
}

/// The HTTP/1.1 head parser of Brisk's own path: a request it takes is no longer than the
/// input, and parsing exactly its bytes again gives the same request.
pub fn http1_head(data: &[u8]) {
    let limits = HttpLimits::default();
    let data = Bytes::copy_from_slice(data);
    if let Parsed::Request { req, len, .. } = parse(&data, &limits, 1 << 20) {
        assert!(
            len > 0 && len <= data.len(),
            "length {len} of {}",
            data.len()
        );
        match parse(&data.slice(..len), &limits, 1 << 20) {
            Parsed::Request {
                req: again, len: l, ..
            } => {
                assert_eq!(l, len);
                assert_eq!(again.method(), req.method());
                assert_eq!(again.uri(), req.uri());
                assert_eq!(again.headers(), req.headers());
            }
            _ => panic!("a request parsed alone is not the same request"),
        }
    }
}

/// The WebSocket frame decoder (server side, after the handshake; with permessage-deflate
/// if the first byte is odd) on arbitrary bytes: it decodes or fails with a close code, and
/// never takes a message over its limit.
pub fn websocket_frames(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let max = 64 << 10;
    let mut codec = WsCodec::new(false, max);
    codec.open((first & 1 == 1).then(Default::default));
    let mut buf = BytesMut::from(rest);
    while let Ok(Some(frame)) = codec.decode(&mut buf, max) {
        match frame {
            WsFrame::Text(t) => assert!(t.len() <= max),
            WsFrame::Binary(b) => assert!(b.len() <= max),
            WsFrame::Fail(code, _) => {
                assert!((1002..=1009).contains(&code), "close code {code}");
                break;
            }
            _ => {}
        }
    }
}

/// A message a client sends in a masked frame (and, if `compress`, deflated) decodes back to
/// itself.
pub fn websocket_round_trip(data: &[u8]) {
    let Some((&first, payload)) = data.split_first() else {
        return;
    };
    let compress = first & 1 == 1;
    let mut codec = WsCodec::new(false, 1 << 20);
    codec.open(compress.then(Default::default));
    let wire_payload = if compress {
        deflate_message(payload, 15, |z| z.to_vec())
    } else {
        payload.to_vec()
    };
    let opcode = 0x2 | if compress { 0x40 } else { 0 };
    let mut wire = vec![0x80 | opcode];
    match wire_payload.len() {
        n @ 0..=125 => wire.push(0x80 | n as u8),
        n @ 126..=0xffff => {
            wire.push(0x80 | 126);
            wire.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            wire.push(0x80 | 127);
            wire.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let mask = [first, 0x5a, 0xc3, 0x17];
    wire.extend_from_slice(&mask);
    wire.extend(
        wire_payload
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ mask[i % 4]),
    );
    let mut buf = BytesMut::from(&wire[..]);
    match codec.decode(&mut buf, 1 << 20) {
        Ok(Some(WsFrame::Binary(got))) => assert!(got[..] == payload[..], "payload differs"),
        other => panic!(
            "a binary message of {} bytes came back as {other:?}",
            payload.len()
        ),
    }
    assert!(buf.is_empty(), "bytes left after the frame");
}

/// permessage-deflate: inflating arbitrary bytes never holds more than the limit, and what is
/// deflated inflates back to itself.
pub fn permessage_deflate(data: &[u8]) {
    let limit = 16 << 10;
    let mut input = BytesMut::from(data);
    match inflate_message(&mut input, None, limit) {
        Ok(out) => assert!(out.len() <= limit),
        Err(InflateError::TooBig | InflateError::Corrupt) => {}
    }
    let mut context = ClientContext::default();
    let mut deflated = deflate_message(data, 15, |z| BytesMut::from(z));
    match inflate_message(&mut deflated, Some(&mut context), data.len().max(1)) {
        Ok(out) => assert!(out == data, "deflate then inflate differs"),
        Err(e) => panic!("own deflate output does not inflate: {e:?}"),
    }
}

/// The Text (newline) and Frame (length-prefixed) decoders: arbitrary bytes decode into
/// messages or an error, and an encoded message decodes back to itself.
pub fn text_and_frame(data: &[u8]) {
    fn decode_all(mut p: impl Protocol<Message = Bytes>, data: &[u8]) {
        let mut buf = BytesMut::from(data);
        while let Ok(Some(msg)) = p.decode(&mut buf, 4096) {
            assert!(msg.len() <= 4096, "message of {} over the limit", msg.len());
        }
    }
    fn round_trip(mut p: impl Protocol<Message = Bytes>, msg: &[u8]) {
        let mut wire = BytesMut::new();
        if p.encode(Bytes::copy_from_slice(msg), &mut wire).is_err() {
            return;
        }
        let got = p.decode(&mut wire, 1 << 20).expect("own encoding decodes");
        assert_eq!(got.as_deref(), Some(msg), "encode then decode differs");
        assert!(wire.is_empty());
    }
    decode_all(Text::default(), data);
    decode_all(Frame, data);
    // A Text message is a line: without its newline.
    let line: Vec<u8> = data.iter().copied().filter(|&b| b != b'\n').collect();
    if !line.ends_with(b"\r") {
        round_trip(Text::default(), &line);
    }
    round_trip(Frame, data);
}

/// The listen-address parser: an address that parses prints as one that parses to itself.
pub fn address(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(a) = text.parse::<Address>() {
        let again: Address = a.to_string().parse().expect("a printed address parses");
        assert_eq!(again, a);
    }
}

/// Static-file path normalisation: a path that passes becomes a relative path below the
/// root, with no `..`, no hidden segment and nothing absolute.
pub fn static_path(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((relative, _)) = parse_path(text) {
        use std::path::Component;
        for c in relative.components() {
            match c {
                Component::Normal(s) => {
                    let s = s.as_encoded_bytes();
                    assert!(!s.starts_with(b"."), "hidden segment in {relative:?}");
                    assert!(!s.contains(&0), "NUL in {relative:?}");
                }
                other => panic!("{other:?} in {relative:?} from {text:?}"),
            }
        }
        let root = std::path::Path::new("/srv/root");
        assert!(root.join(&relative).starts_with(root));
    }
}

/// PostgreSQL start-up against a server that sends `data` and then ends its stream: no
/// panic, no hang, and a session only after `AuthenticationOk` and `ReadyForQuery`.
#[cfg(feature = "postgres")]
pub fn postgres_startup(data: &[u8]) {
    crate::db::postgres_fuzzing::startup(data)
}

/// A PostgreSQL answer's bytes read within a 4 KiB limit per message, however cut, and its
/// rows decoded as column types the first byte picks.
#[cfg(feature = "postgres")]
pub fn postgres_answer(data: &[u8]) {
    crate::db::postgres_fuzzing::answer(data)
}
