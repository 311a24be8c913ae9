//! A codec's state as its connection moves to another worker (a reload hands it over): the
//! permessage-deflate agreement and a fragmented message in progress. A connection still in
//! its opening handshake, closing, failed, or whose client keeps a compression context (a
//! window that cannot be read back out of zlib) is not carried.

use serde::{Deserialize, Serialize};

use super::*;

/// What a [`WsCodec`] carries, besides the bytes of a fragmented message in progress.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct CodecState {
    deflate: Option<Agreement>,
    fragments: Option<FragmentsState>,
}

/// A fragmented message in progress, but for its bytes.
#[derive(Debug, Serialize, Deserialize)]
struct FragmentsState {
    text: bool,
    compressed: bool,
    valid: usize,
}

impl WsCodec {
    /// Whether this codec's state can move to another worker.
    pub(crate) fn can_carry(&self) -> bool {
        self.state == State::Open
            && !self.close_sent
            && self.client_context.is_empty()
            && !matches!(self.pending.as_deref(), Some(Pending::Open(..)))
    }

    /// The state to carry (see [`can_carry`](Self::can_carry)) and the bytes of the
    /// fragmented message in progress.
    pub(crate) fn into_carried(mut self) -> (CodecState, BytesMut) {
        let (fragments, data) = match self.take_fragments() {
            Some(Fragments {
                text,
                compressed,
                data,
                valid,
            }) => (
                Some(FragmentsState {
                    text,
                    compressed,
                    valid,
                }),
                data,
            ),
            None => (None, BytesMut::new()),
        };
        let state = CodecState {
            deflate: self.deflate,
            fragments,
        };
        (state, data)
    }

    /// A codec that goes on where a carried one stopped, with this worker's `max_message`.
    /// Fails if the carried state does not hold together (`valid` past the bytes).
    pub(crate) fn resumed(
        state: CodecState,
        data: BytesMut,
        max_message: usize,
    ) -> Result<Self, &'static str> {
        let pending = match state.fragments {
            Some(f) if f.valid > data.len() => {
                return Err("a carried fragmented message says more is valid than it holds")
            }
            Some(f) => Some(Box::new(Pending::Fragments(Fragments {
                text: f.text,
                compressed: f.compressed,
                data,
                valid: f.valid,
            }))),
            None if !data.is_empty() => {
                return Err("carried message bytes without a message in progress")
            }
            None => None,
        };
        Ok(WsCodec {
            deflate: state.deflate,
            pending,
            ..Self::new(false, max_message)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame (mask 0: the payload as it is).
    fn frame(b0: u8, payload: &[u8]) -> BytesMut {
        assert!(payload.len() < 126);
        let mut f = BytesMut::from(&[b0, 0x80 | payload.len() as u8, 0, 0, 0, 0][..]);
        f.extend_from_slice(payload);
        f
    }

    fn decode(codec: &mut WsCodec, buf: &mut BytesMut) -> Option<WsFrame> {
        codec.decode(buf, 1 << 20).unwrap()
    }

    #[test]
    fn a_message_split_across_workers_arrives_whole() {
        // "héllo" in two fragments that cut the é in half.
        let text = "héllo".as_bytes();
        let mut codec = WsCodec::new(false, 1 << 20);
        let mut buf = frame(0x01, &text[..2]);
        assert!(decode(&mut codec, &mut buf).is_none());
        assert!(codec.can_carry());
        let (state, data) = codec.into_carried();
        let json = serde_json::to_vec(&state).unwrap();

        let state: CodecState = serde_json::from_slice(&json).unwrap();
        let mut codec = WsCodec::resumed(state, data, 1 << 20).unwrap();
        let mut buf = frame(0x80, &text[2..]);
        match decode(&mut codec, &mut buf) {
            Some(WsFrame::Text(t)) => assert_eq!(t.as_str(), "héllo"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_deflate_agreement_moves_with_it() {
        let agreed = Agreement {
            server_max_window_bits: std::num::NonZeroU8::new(10),
            client_no_context_takeover: true,
        };
        let mut codec = WsCodec::new(false, 100);
        codec.open(Some(agreed));
        let (state, data) = codec.into_carried();
        let state: CodecState =
            serde_json::from_slice(&serde_json::to_vec(&state).unwrap()).unwrap();
        assert_eq!(
            WsCodec::resumed(state, data, 100).unwrap().deflate(),
            Some(agreed)
        );
    }

    #[test]
    fn handshaking_closing_or_inconsistent_codecs_are_not_carried() {
        assert!(!WsCodec::new(true, 100).can_carry());
        let mut closing = WsCodec::new(false, 100);
        closing.close_sent = true;
        assert!(!closing.can_carry());
        let bad = CodecState {
            deflate: None,
            fragments: Some(FragmentsState {
                text: true,
                compressed: false,
                valid: 5,
            }),
        };
        assert!(WsCodec::resumed(bad, BytesMut::from(&b"ab"[..]), 100).is_err());
        let stray = CodecState {
            deflate: None,
            fragments: None,
        };
        assert!(WsCodec::resumed(stray, BytesMut::from(&b"ab"[..]), 100).is_err());
    }
}
