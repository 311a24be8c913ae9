//! Negotiation: the client's `Sec-WebSocket-Extensions` offers in, the accepted parameters
//! (and the response header that names them) out.

use std::fmt::Write;
use std::num::NonZeroU8;

/// The extension's name.
const NAME: &str = "permessage-deflate";

/// Smallest window zlib's raw deflate can be held to (an offer of
/// `server_max_window_bits=8` is declined).
const MIN_SERVER_WINDOW_BITS: u8 = 9;

/// Largest LZ77 window, and the default.
pub(crate) const MAX_WINDOW_BITS: u8 = 15;

/// What a connection agreed to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Agreement {
    /// The client offered `server_max_window_bits`: the server's messages use at most this
    /// window, and the response names it. (NonZero: every connection's codec holds an
    /// agreement, so it is kept to two bytes.)
    pub server_max_window_bits: Option<NonZeroU8>,
    /// The client offered `client_no_context_takeover`: the response names it too, so the
    /// client resets its compressor for every message.
    pub client_no_context_takeover: bool,
}

impl Agreement {
    /// log2 of the largest window the server's messages may use.
    pub(crate) fn server_window_bits(&self) -> u8 {
        self.server_max_window_bits
            .map_or(MAX_WINDOW_BITS, NonZeroU8::get)
    }

    /// The value of the `Sec-WebSocket-Extensions` response header.
    pub(crate) fn response(&self) -> String {
        let mut r = format!("{NAME}; server_no_context_takeover");
        if self.client_no_context_takeover {
            r += "; client_no_context_takeover";
        }
        if let Some(bits) = self.server_max_window_bits {
            let _ = write!(r, "; server_max_window_bits={bits}");
        }
        r
    }
}

/// The first permessage-deflate offer Brisk can honour, from the values of every
/// `Sec-WebSocket-Extensions` request header in order; None declines the extension.
///
/// An offer is declined (and the next one tried) when it has an unknown parameter, one twice,
/// a value where none belongs or a missing or invalid window size, or asks for an 8-bit server
/// window. Other extensions are skipped.
pub(crate) fn negotiate<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<Agreement> {
    values
        .into_iter()
        .flat_map(|v| split_unquoted(v, b','))
        .find_map(accept)
}

/// The agreement for one offer (`name; param; param=value`), if it is permessage-deflate and
/// valid.
fn accept(offer: &str) -> Option<Agreement> {
    let mut parts = split_unquoted(offer, b';').into_iter();
    if !parts.next()?.trim().eq_ignore_ascii_case(NAME) {
        return None;
    }
    let mut agreed = Agreement::default();
    let mut seen = [false; 4];
    for param in parts {
        let (key, value) = match param.split_once('=') {
            Some((k, v)) => (k.trim(), Some(unquote(v.trim())?)),
            None => (param.trim(), None),
        };
        let index = match key {
            "server_no_context_takeover" => 0,
            "client_no_context_takeover" => 1,
            "server_max_window_bits" => 2,
            "client_max_window_bits" => 3,
            _ => return None,
        };
        if std::mem::replace(&mut seen[index], true) {
            return None;
        }
        match (index, value) {
            // The server resets its compressor for every message whatever the client asks.
            (0, None) => {}
            (1, None) => agreed.client_no_context_takeover = true,
            (2, Some(v)) => {
                let bits = window_bits(v).filter(|&b| b >= MIN_SERVER_WINDOW_BITS)?;
                agreed.server_max_window_bits = NonZeroU8::new(bits);
            }
            // The client may limit its own window: inflating with the full one reads any.
            (3, None) => {}
            (3, Some(v)) => {
                window_bits(v)?;
            }
            _ => return None,
        }
    }
    Some(agreed)
}

/// A window size value: 8 to 15, in decimal without leading zeros.
fn window_bits(v: &str) -> Option<u8> {
    if v.is_empty() || v.len() > 2 || v.starts_with('0') || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().filter(|b| (8..=MAX_WINDOW_BITS).contains(b))
}

/// A parameter value without its quotes (a quoted-string); None if a quote is unmatched.
fn unquote(v: &str) -> Option<&str> {
    match v.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"'),
        None => (!v.contains('"')).then_some(v),
    }
}

/// `s` split at every `sep` that is not inside a quoted-string.
fn split_unquoted(s: &str, sep: u8) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ if b == sep && !quoted => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agreed(server_bits: Option<u8>, client_no_context: bool) -> Option<Agreement> {
        Some(Agreement {
            server_max_window_bits: server_bits.and_then(NonZeroU8::new),
            client_no_context_takeover: client_no_context,
        })
    }

    #[test]
    fn plain_offer_is_accepted_with_server_no_context_takeover() {
        let a = negotiate(["permessage-deflate"]).unwrap();
        assert_eq!(Some(a), agreed(None, false));
        assert_eq!(
            a.response(),
            "permessage-deflate; server_no_context_takeover"
        );
        assert_eq!(a.server_window_bits(), 15);
    }

    #[test]
    fn parameters_are_echoed() {
        let a = negotiate([
            "permessage-deflate; client_no_context_takeover; client_max_window_bits; \
             server_no_context_takeover; server_max_window_bits=10",
        ])
        .unwrap();
        assert_eq!(Some(a), agreed(Some(10), true));
        assert_eq!(
            a.response(),
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover; \
             server_max_window_bits=10"
        );
        assert_eq!(
            negotiate([
                r#"permessage-deflate; server_max_window_bits="12"; client_max_window_bits=9"#
            ]),
            agreed(Some(12), false)
        );
    }

    #[test]
    fn first_acceptable_offer_wins_across_lists_and_headers() {
        // The 8-bit server window is declined, the next offer taken.
        let offers = [
            "x-webkit-deflate-frame, permessage-deflate; server_max_window_bits=8",
            "permessage-deflate; client_no_context_takeover, permessage-deflate",
        ];
        assert_eq!(negotiate(offers), agreed(None, true));
        assert_eq!(
            negotiate(["foo; bar=\"a,b\", permessage-deflate"]),
            agreed(None, false)
        );
    }

    #[test]
    fn invalid_offers_are_declined() {
        for offer in [
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=16",
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; server_max_window_bits=010",
            "permessage-deflate; server_max_window_bits=1a",
            "permessage-deflate; client_max_window_bits=20",
            "permessage-deflate; client_max_window_bits=\"9",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
            "permessage-deflate; unknown_param",
            "permessage-deflate;",
            "deflate-frame",
            "",
        ] {
            assert_eq!(negotiate([offer]), None, "{offer}");
        }
        assert_eq!(negotiate([]), None);
    }

    #[test]
    fn splitting_respects_quotes_and_escapes() {
        assert_eq!(
            split_unquoted(r#"a; b="x;y"; c"#, b';'),
            ["a", r#" b="x;y""#, " c"]
        );
        assert_eq!(split_unquoted(r#"a="\";", b"#, b','), [r#"a="\";""#, " b"]);
    }
}
