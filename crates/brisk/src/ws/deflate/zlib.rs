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
/// still shrinks text and JSON well.
const LEVEL: u32 = 1;

/// Messages shorter than this are sent as they are (RSV1 clear): deflate would not pay.
const MIN_SIZE: usize = 32;

/// What a sync flush ends with, stripped by the sender and appended again by the receiver.
const TAIL: [u8; 4] = [0, 0, 0xff, 0xff];

/// The compression scratch buffer is dropped after a message made it larger than this.
const MAX_KEPT_SCRATCH: usize = 256 * 1024;

thread_local! {
    /// One compressor per window size (9 to 15 bits), made on first use.
    static COMPRESSORS: RefCell<[Option<Compress>; 7]> = const { RefCell::new([const { None }; 7]) };
    /// Where messages are compressed before they are framed.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The inflater of clients that reset their compressor for every message.
    static SHARED_INFLATER: RefCell<Option<Decompress>> = const { RefCell::new(None) };
}

/// Compresses `data` as one message with no context takeover and a window of at most
/// `2^window_bits` bytes, and runs `f` on the result (without the trailing `00 00 ff ff`).
///
/// None, and `f` is not run, when compression does not pay: `data` is short or does not shrink.
pub(crate) fn deflate_message<R>(
    data: &[u8],
    window_bits: u8,
    f: impl FnOnce(&[u8]) -> R,
) -> Option<R> {
    if data.len() < MIN_SIZE || !(9..=MAX_WINDOW_BITS).contains(&window_bits) {
        return None;
    }
    SCRATCH.with(|scratch| {
        let mut out = scratch.borrow_mut();
        out.clear();
        let compressed = COMPRESSORS.with(|c| {
            let mut c = c.borrow_mut();
            let c = c[(window_bits - 9) as usize].get_or_insert_with(|| {
                Compress::new_with_window_bits(Compression::new(LEVEL), false, window_bits)
            });
            c.reset();
            compress_into(c, data, &mut out)
        });
        let result = compressed.then(|| f(&out[..out.len() - TAIL.len()]));
        if out.capacity() > MAX_KEPT_SCRATCH {
            *out = Vec::new();
        }
        result
    })
}

/// Deflates `data` with a sync flush into `out`; false if the result, tail stripped, would not
/// be shorter than `data`.
fn compress_into(c: &mut Compress, data: &[u8], out: &mut Vec<u8>) -> bool {
    // Room for the data as it is: beyond that compression does not pay.
    out.reserve(data.len() + TAIL.len());
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
            return out.ends_with(&TAIL) && out.len() - TAIL.len() < data.len();
        }
        if out.len() == out.capacity() || (taken == 0 && out.len() == out0) {
            return false;
        }
    }
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
        inflate_into(&mut d, &data, 1 << 20).unwrap()
    }

    #[test]
    fn deflates_without_context_and_skips_what_does_not_pay() {
        let msg = "hello hello hello hello hello hello hello".repeat(20);
        for bits in [9, 15] {
            let a = deflate_message(msg.as_bytes(), bits, <[u8]>::to_vec).unwrap();
            assert!(a.len() < msg.len() / 4);
            assert_eq!(inflate_one(&a), msg.as_bytes());
            // No context: the same message compresses to the same bytes again.
            let b = deflate_message(msg.as_bytes(), bits, <[u8]>::to_vec).unwrap();
            assert_eq!(a, b);
        }
        assert!(deflate_message(b"short", 15, |_| ()).is_none());
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert!(deflate_message(&noise, 15, |_| ()).is_none());
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
