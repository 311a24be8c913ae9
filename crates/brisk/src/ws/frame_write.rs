//! Server frames as Brisk writes them: final, unmasked, compressed for a member that
//! negotiated permessage-deflate. Reading clients' frames is the codec's; this is the one
//! place a frame is built, for a connection's own messages and a broadcast's alike.

use bytes::{BufMut, BytesMut};

use super::deflate;

/// RSV1: set on the first frame of a compressed message.
pub(crate) const RSV1: u8 = 0x40;

/// Appends a data message as a server frame to `dst`: compressed (RSV1 set) with the
/// server window `deflate_bits` of a negotiated permessage-deflate, else as it is.
pub(crate) fn encode_message(
    opcode: u8,
    payload: &[u8],
    deflate_bits: Option<u8>,
    dst: &mut BytesMut,
) {
    match deflate_bits {
        Some(bits) => {
            deflate::deflate_message(payload, bits, |c| encode_frame(RSV1 | opcode, c, dst))
        }
        None => encode_frame(opcode, payload, dst),
    }
}

/// The most bytes of a close frame's reason (125 bytes of payload, less the code).
pub(crate) const MAX_CLOSE_REASON: usize = 123;

/// `reason` cut to [`MAX_CLOSE_REASON`] bytes on a character boundary.
pub(crate) fn cut_close_reason(reason: &str) -> &str {
    let mut cut = reason.len().min(MAX_CLOSE_REASON);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    &reason[..cut]
}

/// Appends a server frame (unmasked, final) with `opcode` (which may carry [`RSV1`]) and
/// `payload` to `dst`.
pub(crate) fn encode_frame(opcode: u8, payload: &[u8], dst: &mut BytesMut) {
    let len = payload.len();
    dst.reserve(len + 10);
    dst.put_u8(0x80 | opcode);
    match len {
        0..=125 => dst.put_u8(len as u8),
        126..=65535 => {
            dst.put_u8(126);
            dst.put_u16(len as u16);
        }
        _ => {
            dst.put_u8(127);
            dst.put_u64(len as u64);
        }
    }
    dst.extend_from_slice(payload);
}
