//! What a client gets back from a channel's history: the channel's position and kept
//! publications, after a position (recovery) or the last ones (a listing), with each
//! publication's data as it was published (not parsed and printed again).

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use super::hub::{ChannelError, ChannelHistory};
use super::wire::{Data, ErrorCode, Publication};
use crate::ws::{History, Kept, Position, Recovery};

/// A channel's position and, when recovering from a position, whether that worked.
pub(crate) struct Replay {
    pub position: Position,
    /// `Some` when recovering: what came after the position (one page of it), or why it is
    /// lost.
    pub recovered: Option<Recovery>,
}

impl Replay {
    /// The kept publications after `since` (recovery), or just the position.
    pub(crate) async fn read(
        history: &History,
        channel: &str,
        since: Option<&Position>,
    ) -> Result<Replay, ChannelError> {
        let unavailable = |e: crate::redis::RedisError| {
            tracing::warn!("channels: history of {channel}: {e}");
            ChannelError::new(
                ErrorCode::Unavailable,
                format!("history: {}", e.client_message()),
            )
        };
        let recovered = match since {
            Some(since) => Some(history.since(channel, since).await.map_err(unavailable)?),
            None => None,
        };
        let position = history.position(channel).await.map_err(unavailable)?;
        Ok(Replay {
            position,
            recovered,
        })
    }

    /// Where the next page of a recovery starts: the last recovered publication's position,
    /// when more follow.
    pub(crate) fn continues_from(&self) -> Option<&Position> {
        self.recovered.as_ref()?.continues_from()
    }
}

/// `{"position":…}`, then `"recovered":true,"publications":[…]` (and `"more":true` when the
/// page did not hold them all: the client asks `history` again from the last one's offset) or
/// `"recovered":false,"reason":…` when recovering.
impl Serialize for Replay {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("position", &self.position.to_string())?;
        match &self.recovered {
            Some(Recovery::Recovered { missed, more }) => {
                map.serialize_entry("recovered", &true)?;
                map.serialize_entry("publications", &Kepts(missed))?;
                if *more {
                    map.serialize_entry("more", &true)?;
                }
            }
            Some(Recovery::Lost(why)) => {
                map.serialize_entry("recovered", &false)?;
                map.serialize_entry("reason", &why.to_string())?;
            }
            None => {}
        }
        map.end()
    }
}

/// `{"position":…,"publications":[…]}`.
impl Serialize for ChannelHistory {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("position", &self.position.to_string())?;
        map.serialize_entry("publications", &Kepts(&self.publications))?;
        map.end()
    }
}

/// Kept publications as clients get them: `[{"offset":…,"data":…}…]`.
pub(crate) struct Kepts<'a>(pub &'a [Kept]);

impl Serialize for Kepts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for kept in self.0 {
            seq.serialize_element(&Publication {
                offset: Some(kept.position.to_string()),
                data: Data::of(&kept.payload),
            })?;
        }
        seq.end()
    }
}
