//! [`WsConnection`]: the handle a WebSocket endpoint's callbacks get, typed by the data its
//! connections carry.

use std::marker::PhantomData;

use bytes::Bytes;

use super::codec::{WsCodec, WsFrame};
use super::group::{self, Member};
use super::group_key::GroupKey;
use super::{Message, Utf8Bytes};
use crate::runtime::connection::{Connection, SendError};
use crate::runtime::stream::PeerAddr;
use crate::stats::Stats;

/// A WebSocket connection, as handlers get it. Cheap to clone.
///
/// `T` is the type of the data it carries, named by its endpoint
/// ([`WsEndpoint::data`](super::WsEndpoint::data)); `()` for none.
pub struct WsConnection<T = ()> {
    conn: Connection<WsCodec>,
    data: PhantomData<fn() -> T>,
}

impl<T> Clone for WsConnection<T> {
    fn clone(&self) -> Self {
        WsConnection {
            conn: self.conn.clone(),
            data: PhantomData,
        }
    }
}

impl WsConnection {
    /// The handle of `conn`, a connection of an endpoint.
    pub(crate) fn of(conn: Connection<WsCodec>) -> Self {
        WsConnection {
            conn,
            data: PhantomData,
        }
    }

    /// The handle that callbacks of an endpoint whose connections carry `T` get. Only what
    /// the endpoint's typed setters wrap calls it, so a connection's data is always a `T`.
    pub(super) fn typed<T>(self) -> WsConnection<T> {
        WsConnection {
            conn: self.conn,
            data: PhantomData,
        }
    }
}

impl<T> WsConnection<T> {
    /// Id of the connection, unique within its worker.
    pub fn id(&self) -> u64 {
        self.conn.id()
    }

    /// The peer's address.
    pub fn remote_addr(&self) -> &PeerAddr {
        self.conn.remote_addr()
    }

    /// Sends a message.
    pub fn send(&self, msg: Message) -> Result<(), SendError> {
        match msg {
            Message::Text(t) => self.send_frame(WsFrame::Text(t)),
            Message::Binary(b) => self.send_frame(WsFrame::Binary(b)),
        }
    }

    /// Sends a text message.
    pub fn send_text(&self, text: impl Into<Utf8Bytes>) -> Result<(), SendError> {
        self.send_frame(WsFrame::Text(text.into()))
    }

    /// Sends a binary message.
    pub fn send_binary(&self, data: impl Into<Bytes>) -> Result<(), SendError> {
        self.send_frame(WsFrame::Binary(data.into()))
    }

    /// Sends a data frame and counts it in the worker's `ws_sent`.
    fn send_frame(&self, frame: WsFrame) -> Result<(), SendError> {
        self.conn.send(frame)?;
        Stats::add(&self.conn.worker_stats().ws_sent, 1);
        Ok(())
    }

    /// Starts the closing handshake with `code` (1000 is normal) and a short reason (cut to
    /// the 123 bytes a close frame holds).
    pub fn close(&self, code: u16, reason: &str) {
        let reason = super::codec::cut_close_reason(reason);
        let _ = self.conn.send(WsFrame::Close(Some((
            code,
            Utf8Bytes::from(reason.to_string()),
        ))));
        self.conn.close();
    }

    /// Closes at once, without the closing handshake.
    pub fn destroy(&self) {
        self.conn.destroy();
    }

    /// Joins the app's group `group` (see [`broadcast`](super::broadcast)); a connection that
    /// is closing joins nothing. Whatever the name (one its client chose, say), the group is
    /// the app's: never a key's ([`tag`](Self::tag)) nor one the channel protocol keeps.
    pub fn join(&self, group: &str) {
        self.join_group(&GroupKey::app(group));
    }

    /// Joins `group`, of any space; a connection that is closing joins nothing.
    pub(crate) fn join_group(&self, group: &GroupKey) {
        if self.conn.is_closed() {
            return;
        }
        let deflate = self.conn.protocol().deflate();
        group::join(
            self.conn.worker(),
            Member::Socket(self.id()),
            group,
            deflate,
        );
    }

    /// Names this member in the presence of its groups (`ws::presence_ids`, feature `redis`),
    /// e.g. with its user's name (a line break in it becomes a space); members without one
    /// are counted but not listed.
    pub fn set_presence_id(&self, id: &str) {
        if !self.conn.is_closed() {
            group::set_presence_id(self.conn.worker(), self.id(), id);
        }
    }

    /// Tags the connection with `key` (a user id), as an upgrade route's
    /// [`key`](super::WebSocketUpgrade::key) does: [`send_to`](super::send_to) and
    /// [`close_where`](super::close_where) reach it on every worker and instance.
    pub fn tag(&self, key: &str) {
        self.join_group(&GroupKey::key(key));
    }

    /// Leaves the app's group `group`.
    pub fn leave(&self, group: &str) {
        self.leave_group(&GroupKey::app(group));
    }

    /// Leaves `group`, of any space.
    pub(crate) fn leave_group(&self, group: &GroupKey) {
        group::leave(self.conn.worker(), Member::Socket(self.id()), group);
    }

    /// Attaches `value` to the connection, replacing any earlier one: its type is the one
    /// the endpoint named ([`WsEndpoint::data`](super::WsEndpoint::data)).
    pub fn set_data(&self, value: T)
    where
        T: 'static,
    {
        self.conn.set_data_boxed(Box::new(value));
    }

    /// Attaches a value already boxed (what an upgrade route attached).
    pub(crate) fn set_data_boxed(&self, value: Box<dyn std::any::Any>) {
        self.conn.set_data_boxed(value);
    }

    /// Runs `f` on the attached value; `None` if none is attached yet (see
    /// [`Connection::with_data`](crate::Connection::with_data)).
    pub fn with_data<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R>
    where
        T: 'static,
    {
        self.conn.with_data_as(f)
    }

    /// A clone of the attached value, if one is attached.
    pub fn data(&self) -> Option<T>
    where
        T: Clone + 'static,
    {
        self.with_data(|v| v.clone())
    }

    /// Bytes received and sent so far.
    pub fn bytes(&self) -> (u64, u64) {
        (self.conn.bytes_in(), self.conn.bytes_out())
    }
}
