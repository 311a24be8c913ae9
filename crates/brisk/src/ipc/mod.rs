//! The control channels: master ↔ worker over a socketpair, CLI → master over the control
//! socket. [`wire`] says what travels; [`codec`] how it is framed.

pub(crate) mod codec;
pub(crate) mod wire;

pub(crate) use codec::{reader, writer};
pub(crate) use wire::{BroadcastFrames, ControlReply, ControlRequest, Packet, ToMaster, ToWorker};
pub use wire::{MasterStatus, ScheduleStatus};
