//! Compressing and inflating whole messages with raw deflate (zlib-rs through flate2).
//!
//! Compressors are per worker (thread-local), one per window size in use, reset before every
//! message. Inflating uses a worker-wide inflater reset per message, or the connection's own
//! [`ClientContext`] when the client takes over context between messages.

use std::cell::RefCell;

use bytes::BytesMut;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::offer::MAX_WINDOW_BITS;

/// Compression level: speed first. Level 1 is several times faster than zlib's default 6 and
/// still shrinks text and JSON well; data it does not shrink goes in stored blocks.
const LEVEL: u32 = 1;

/// Messages shorter than this go in a stored block without zlib: resetting a compressor for
/// every message costs several microseconds, more than the few bytes it could save are worth.
const MIN_DEFLATE: usize = 64;

/// Larger messages are deflated this far first, and sent as stored blocks if that did not
/// shrink them by at least 1/32.
const PROBE: usize = 8 * 1024;

/// Largest stored block.
const MAX_STORED: usize = 65_535;

/// What a sync flush ends with, stripped by the sender and appended again by the receiver.
const TAIL: [u8; 4] = [0, 0, 0xff, 0xff];

/// The compression scratch buffer is dropped after a message made it larger than this.
const MAX_KEPT_SCRATCH: usize = 256 * 1024;

// Caches of zlib state reset before each use, kept per thread as buffer pools are: no
// connection's or worker's state lives in them between two messages.
thread_local! {
    /// One compressor per window size (9 to 15 bits), made on first use.
    static COMPRESSORS: RefCell<[Option<Compress>; 7]> = const { RefCell::new([const { None }; 7]) };
    /// Where messages are compressed before they are framed.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The inflater of clients that reset their compressor for every message.
    static SHARED_INFLATER: RefCell<Option<Decompress>> = const { RefCell::new(None) };
}

/// Compresses `data` as one message with no context takeover and a window of at most
/// `2^window_bits` bytes (9 to 15), and runs `f` on the result: the payload of a frame with
/// RSV1 set (without the trailing `00 00 ff ff`).
///
/// Every message comes out compressed, short or incompressible ones as stored blocks (5 bytes
/// more): RFC 7692 lets a sender send any message uncompressed instead, but some clients do not
/// cope with that (kosoku, the Autobahn driver of scripts/autobahn, fails cases 12.* and 13.*).
pub(crate) fn deflate_message<R>(data: &[u8], window_bits: u8, f: impl FnOnce(&[u8]) -> R) -> R {
    SCRATCH.with(|scratch| {
        let mut out = scratch.borrow_mut();
        out.clear();
        if data.len() < MIN_DEFLATE || !deflate_into(data, window_bits, &mut out) {
            out.clear();
            stored_blocks(data, &mut out);
        }
        let result = f(&out);
        if out.capacity() > MAX_KEPT_SCRATCH {
            *out = Vec::new();
        }
        result
    })
}

/// Deflates `data` into `out` with the worker's compressor for `window_bits`, reset first, and
/// a sync flush whose tail is stripped. False if that is not shorter than `data`, if its first
/// [`PROBE`] bytes hardly shrink (already compressed data: deflating it all would cost
/// milliseconds for nothing), or if zlib fails.
///
/// The compressor is taken out of its slot while it works and put back only if its stream
/// ended on a completed flush: one that failed (or panicked) is dropped, and the next message
/// gets a new one. (zlib-rs 0.6 at level 1 panics on the next message after a run stopped
/// half-way, so runs are never stopped half-way.)
fn deflate_into(data: &[u8], window_bits: u8, out: &mut Vec<u8>) -> bool {
    let bits = window_bits.clamp(9, MAX_WINDOW_BITS);
    let slot = (bits - 9) as usize;
    let kept = COMPRESSORS.with(|c| c.borrow_mut()[slot].take());
    let mut c = kept
        .unwrap_or_else(|| Compress::new_with_window_bits(Compression::new(LEVEL), false, bits));
    c.reset();
    // Fixed Huffman codes can grow incompressible data by up to an eighth.
    out.reserve(data.len() + data.len() / 8 + 64);
    let probe = data.len() > 2 * PROBE;
    let (head, rest) = data.split_at(if probe { PROBE } else { 0 });
    if !flush_into(&mut c, head, out) {
        return false;
    }
    let worth_it = !probe || out.len() < PROBE * 31 / 32;
    if worth_it && !flush_into(&mut c, rest, out) {
        return false;
    }
    COMPRESSORS.with(|cs| cs.borrow_mut()[slot] = Some(c));
    if !worth_it || !out.ends_with(&TAIL) || out.len() - TAIL.len() >= data.len() {
        return false;
    }
    out.truncate(out.len() - TAIL.len());
    true
}

/// Runs `c` over all of `data` with a sync flush, growing `out` as needed; false if zlib
/// fails. (An empty `data` adds nothing.)
fn flush_into(c: &mut Compress, data: &[u8], out: &mut Vec<u8>) -> bool {
    if data.is_empty() {
        return true;
    }
    let mut pos = 0;
    loop {
        let (in0, out0) = (c.total_in(), out.len());
        if c.compress_vec(&data[pos..], out, FlushCompress::Sync)
            .is_err()
        {
            return false;
        }
        let taken = (c.total_in() - in0) as usize;
        pos += taken;
        // A sync flush is complete once all input is taken and output room is left.
        if pos == data.len() && out.len() < out.capacity() {
            return true;
        }
        if out.len() == out.capacity() {
            out.reserve(out.capacity());
        } else if taken == 0 && out.len() == out0 {
            return false;
        }
    }
}

/// Appends `data` as stored deflate blocks (not final, byte-aligned, at most 65,535 bytes
/// each), then the first byte of the empty stored block a sync flush ends with (its other
/// four, `00 00 ff ff`, are the tail RFC 7692 strips, 7.2.1). Without that byte, a client
/// that keeps one inflater across messages (undici, browsers) reads the tail it appends as
/// the start of a block that swallows the next message. An empty message is that byte alone
/// (7.2.3.6).
fn stored_blocks(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        out.push(0);
        return;
    }
    out.reserve(data.len() + 5 * data.len().div_ceil(MAX_STORED) + 1);
    for chunk in data.chunks(MAX_STORED) {
        let len = chunk.len() as u16;
        // BFINAL 0, BTYPE 00 (stored); the rest of the byte is padding.
        out.push(0);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.push(0);
}

/// Why a compressed message could not be inflated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InflateError {
    /// It inflates to more than the limit.
    TooBig,
    /// It is not valid deflate data.
    Corrupt,
}

/// The inflater of a connection whose client takes over context between messages; empty
/// until its first compressed message.
#[derive(Debug, Default)]
pub(crate) struct ClientContext(Option<Box<Decompress>>);

impl ClientContext {
    /// Whether it holds no inflater (and so no window of earlier messages).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl Clone for ClientContext {
    /// Codecs are cloned from a server's template, which never holds a window: a clone
    /// starts empty.
    fn clone(&self) -> Self {
        ClientContext(None)
    }
}

/// Inflates one message: `data` is the payload of all its frames, to which the `00 00 ff ff`
/// tail is appended here. With `context`, the connection's own inflater carries the window
/// over from earlier messages; without, the worker's shared one starts afresh.
///
/// Never holds more than `limit` inflated bytes: a message that would inflate past it is
/// [`InflateError::TooBig`].
pub(crate) fn inflate_message(
    data: &mut BytesMut,
    context: Option<&mut ClientContext>,
    limit: usize,
) -> Result<Vec<u8>, InflateError> {
    data.extend_from_slice(&TAIL);
    match context {
        Some(ClientContext(d)) => {
            let d = d.get_or_insert_with(|| Box::new(Decompress::new(false)));
            inflate_into(d, data, limit)
        }
        None => SHARED_INFLATER.with(|d| {
            let mut d = d.borrow_mut();
            let d = d.get_or_insert_with(|| Decompress::new(false));
            d.reset(false);
            inflate_into(d, data, limit)
        }),
    }
}

/// Runs `d` over all of `input`, growing the output up to `limit` bytes.
fn inflate_into(d: &mut Decompress, input: &[u8], limit: usize) -> Result<Vec<u8>, InflateError> {
    let mut out = Vec::with_capacity(limit.min(input.len().saturating_mul(4).max(1024)));
    let mut pos = 0;
    loop {
        if out.len() == out.capacity() {
            if out.len() >= limit {
                return at_limit(d, &input[pos..]).map(|()| out);
            }
            let grow = out.capacity().max(1024).min(limit - out.len());
            out.reserve_exact(grow);
        }
        let (in0, out0) = (d.total_in(), out.len());
        let status = d
            .decompress_vec(&input[pos..], &mut out, FlushDecompress::Sync)
            .map_err(|_| InflateError::Corrupt)?;
        pos += (d.total_in() - in0) as usize;
        if status == Status::StreamEnd {
            // A final block ends the stream: the next message starts a new one.
            d.reset(false);
            return Ok(out);
        }
        if pos == input.len() && out.len() < out.capacity() {
            return Ok(out);
        }
        if (d.total_in() - in0) == 0 && out.len() == out0 && out.len() < out.capacity() {
            return Err(InflateError::Corrupt);
        }
    }
}

/// With the output at its limit: Ok if the rest of the input yields no byte more.
fn at_limit(d: &mut Decompress, mut rest: &[u8]) -> Result<(), InflateError> {
    let mut probe = [0u8; 1];
    loop {
        let (in0, out0) = (d.total_in(), d.total_out());
        let status = d
            .decompress(rest, &mut probe, FlushDecompress::Sync)
            .map_err(|_| InflateError::Corrupt)?;
        if d.total_out() > out0 {
            return Err(InflateError::TooBig);
        }
        rest = &rest[(d.total_in() - in0) as usize..];
        if status == Status::StreamEnd {
            d.reset(false);
            return Ok(());
        }
        if rest.is_empty() {
            return Ok(());
        }
        if d.total_in() == in0 {
            return Err(InflateError::Corrupt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a client sends: raw deflate with a sync flush, tail stripped.
    fn client_deflate(c: &mut Compress, data: &[u8]) -> BytesMut {
        let mut out = Vec::with_capacity(data.len() + 64);
        c.compress_vec(data, &mut out, FlushCompress::Sync).unwrap();
        assert!(out.ends_with(&TAIL));
        out.truncate(out.len() - 4);
        BytesMut::from(&out[..])
    }

    fn inflate_one(compressed: &[u8]) -> Vec<u8> {
        let mut d = Decompress::new(false);
        let mut data = compressed.to_vec();
        data.extend_from_slice(&TAIL);
        inflate_into(&mut d, &data, 4 << 20).unwrap()
    }

    #[test]
    fn deflates_every_message_without_context() {
        let msg = "hello hello hello hello hello hello hello".repeat(20);
        for bits in [9, 15] {
            let a = deflate_message(msg.as_bytes(), bits, <[u8]>::to_vec);
            assert!(a.len() < msg.len() / 4);
            assert_eq!(inflate_one(&a), msg.as_bytes());
            // No context: the same message compresses to the same bytes again.
            let b = deflate_message(msg.as_bytes(), bits, <[u8]>::to_vec);
            assert_eq!(a, b);
        }
    }

    /// zlib-rs 0.6 at level 1 panics on the message after one it was stopped half-way
    /// through (as it was when its output outgrew the input): every run must complete.
    #[test]
    fn incompressible_messages_one_after_another() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..4 {
            let data: Vec<u8> = (0..131_072)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let out = deflate_message(&data, 15, <[u8]>::to_vec);
            let stored = data.len() + 5 * data.len().div_ceil(MAX_STORED) + 1;
            assert_eq!(out.len(), stored, "round {round}: stored blocks");
            assert_eq!(inflate_one(&out), data);
        }
    }

    #[test]
    fn large_messages_are_probed_then_deflated_whole() {
        let json: String = (0..3000)
            .map(|i| format!(r#"{{"id":{i},"name":"user {}","online":true}}"#, i % 97))
            .collect();
        let out = deflate_message(json.as_bytes(), 15, <[u8]>::to_vec);
        assert!(
            out.len() < json.len() / 5,
            "{} of {}",
            out.len(),
            json.len()
        );
        assert_eq!(inflate_one(&out), json.as_bytes());
    }

    #[test]
    fn short_and_incompressible_messages_go_in_stored_blocks() {
        let short = deflate_message(b"short", 15, <[u8]>::to_vec);
        assert_eq!(short, b"\x00\x05\x00\xfa\xffshort\x00");
        assert_eq!(inflate_one(&short), b"short");
        assert_eq!(deflate_message(b"", 15, <[u8]>::to_vec), [0]);
        assert_eq!(inflate_one(&[0]), b"");
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..150_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        let stored = deflate_message(&noise, 15, <[u8]>::to_vec);
        assert_eq!(stored.len(), noise.len() + 3 * 5 + 1);
        assert_eq!(inflate_one(&stored), noise);
    }

    /// As undici and browsers read them: one inflater for every message, the tail appended
    /// to each. Stored and deflated messages, one after another, each read whole and alone.
    #[test]
    fn a_client_keeping_one_inflater_reads_every_message() {
        let long = "a message long enough to be deflated, deflated, deflated".repeat(3);
        let messages = [
            &b"short"[..],
            b"",
            long.as_bytes(),
            b"{\"id\":2}",
            long.as_bytes(),
        ];
        let mut d = Decompress::new(false);
        for m in messages {
            let mut data = deflate_message(m, 15, <[u8]>::to_vec);
            data.extend_from_slice(&TAIL);
            assert_eq!(inflate_into(&mut d, &data, 4 << 20).unwrap(), m);
        }
    }

    #[test]
    fn inflates_with_and_without_context_takeover() {
        let mut client = Compress::new(Compression::default(), false);
        let mut ctx = ClientContext::default();
        for i in 0..3 {
            let msg = format!("message {i}: the same words again and again and again");
            let mut data = client_deflate(&mut client, msg.as_bytes());
            let got = inflate_message(&mut data, Some(&mut ctx), 1024).unwrap();
            assert_eq!(got, msg.as_bytes());
        }
        let mut fresh = Compress::new(Compression::default(), false);
        let mut data = client_deflate(&mut fresh, b"no context here, no context there");
        let got = inflate_message(&mut data, None, 1024).unwrap();
        assert_eq!(got, b"no context here, no context there");
    }

    #[test]
    fn a_zip_bomb_stops_at_the_limit() {
        let mut c = Compress::new(Compression::best(), false);
        let zeros = vec![0u8; 4 << 20];
        let mut bomb = client_deflate(&mut c, &zeros);
        assert!(bomb.len() < 8 << 10);
        let limit = 64 * 1024;
        assert_eq!(
            inflate_message(&mut bomb, None, limit),
            Err(InflateError::TooBig)
        );
        // Exactly at the limit is fine.
        let mut c = Compress::new(Compression::best(), false);
        let mut exact = client_deflate(&mut c, &zeros[..limit]);
        assert_eq!(
            inflate_message(&mut exact, None, limit).unwrap().len(),
            limit
        );
    }

    #[test]
    fn garbage_is_corrupt() {
        let mut data = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0x12][..]);
        assert_eq!(
            inflate_message(&mut data, None, 1024),
            Err(InflateError::Corrupt)
        );
    }
}
