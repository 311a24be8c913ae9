//! The load message format: sequence number and send timestamp, padded.

/// Smallest payload: 8 bytes of sequence and 8 bytes of timestamp.
pub const MIN_SIZE: usize = 16;

/// Highest sequence number tracked by a [`SeenSet`].
const MAX_TRACKED_SEQ: u64 = 1 << 24;

/// Builds a payload of `size` bytes (at least [`MIN_SIZE`]) carrying `seq`
/// and `sent_ns` (nanoseconds since the run's common clock origin).
pub fn encode(seq: u64, sent_ns: u64, size: usize) -> Vec<u8> {
    let mut out = vec![0u8; size.max(MIN_SIZE)];
    out[..8].copy_from_slice(&seq.to_le_bytes());
    out[8..16].copy_from_slice(&sent_ns.to_le_bytes());
    out
}

/// Reads `(seq, sent_ns)` back; `None` for foreign messages.
pub fn decode(data: &[u8]) -> Option<(u64, u64)> {
    if data.len() < MIN_SIZE {
        return None;
    }
    let seq = u64::from_le_bytes(data[..8].try_into().ok()?);
    let sent = u64::from_le_bytes(data[8..16].try_into().ok()?);
    Some((seq, sent))
}

/// A growable bit set of the sequence numbers one connection has received, and the highest.
#[derive(Default, Debug)]
pub struct SeenSet {
    words: Vec<u64>,
    highest: Option<u64>,
}

/// What [`SeenSet::insert`] learned about a sequence number.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// First time, after every number received before it.
    New,
    /// First time, after a higher number (out of the order it was sent in, with one sender).
    Late,
    /// Already received.
    Duplicate,
    /// Beyond the tracked range: not a message of this run.
    Invalid,
}

impl SeenSet {
    /// Marks `seq` as received.
    pub fn insert(&mut self, seq: u64) -> Seen {
        if seq >= MAX_TRACKED_SEQ {
            return Seen::Invalid;
        }
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        let mask = 1u64 << bit;
        if self.words[word] & mask != 0 {
            return Seen::Duplicate;
        }
        self.words[word] |= mask;
        match self
            .highest
            .replace(self.highest.map_or(seq, |h| h.max(seq)))
        {
            Some(h) if h > seq => Seen::Late,
            _ => Seen::New,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_seen() {
        let p = encode(7, 123_456, 64);
        assert_eq!(p.len(), 64);
        assert_eq!(decode(&p), Some((7, 123_456)));
        assert_eq!(decode(&p[..10]), None);
        let mut s = SeenSet::default();
        assert_eq!(s.insert(200), Seen::New);
        assert_eq!(s.insert(200), Seen::Duplicate);
        assert_eq!(s.insert(150), Seen::Late);
        assert_eq!(s.insert(201), Seen::New);
        assert_eq!(s.insert(1 << 40), Seen::Invalid);
    }
}
