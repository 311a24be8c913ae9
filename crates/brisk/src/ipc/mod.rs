//! The control channels: master ↔ worker over a socketpair, CLI → master over the control
//! socket. [`wire`] says what travels; [`codec`] how it is framed; [`fds`] carries
//! descriptors between processes, and [`memfd`] bytes too large for one of its messages;
//! [`clock`] is the time they share.

pub(crate) mod clock;
pub(crate) mod codec;
pub(crate) mod fds;
mod legacy_frames;
pub(crate) mod memfd;
mod packet_head;
pub(crate) mod wire;

pub(crate) use codec::{reader, writer};
pub(crate) use wire::{
    Answer, Broadcast, BroadcastKind, ControlReply, ControlRequest, Packet, Question, Stamp,
    ToMaster, ToWorker, IPC_VERSION,
};
pub use wire::{MasterStatus, ScheduleStatus};
