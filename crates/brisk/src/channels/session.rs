//! A connection speaking the channel protocol: its state (who it is, what it subscribed to,
//! when its credentials expire) and the handling of each command.

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use super::auth::{now_seconds, subscription_allows, Subject};
use super::close;
use super::hub::{group_in, no_history, user_key, ChannelError, Channels};
use super::namespace::{namespace_of, Access, PublishBucket, Publishers};
use super::replay::Replay;
use super::wire::PROTOCOL_VERSION;
use super::wire::{self, BadFormat, Command, Encoded, ErrorCode, Format, Payload, Subscribe};
use crate::timer::{self, TimerId};
use crate::ws::{Handshake, Message, Position, WsConnection, WsEndpoint};

/// A channel connection's state: the data of every connection of
/// [`Channels::endpoint`], which only the channel protocol reads and writes.
pub struct Session {
    /// How its messages are encoded.
    format: Format,
    /// Who it is, once connected (shared: every command reads it, none copies it).
    subject: Option<Rc<Subject>>,
    /// Its id in join and leave pushes: unique across workers and instances.
    client: String,
    /// The channels it subscribed to (and whose join was announced, where announced).
    subscriptions: BTreeSet<String>,
    /// The timer that closes it: no `connect` in time, or expired credentials.
    deadline: Option<TimerId>,
    /// The timers that end subscriptions a subscription token allowed, at its `exp`.
    subscription_deadlines: HashMap<String, TimerId>,
    /// Its publications by namespace, against the namespace's rate.
    publishing: HashMap<String, PublishBucket>,
}

/// A connection of the channel endpoint.
type Ws = WsConnection<Session>;

impl Session {
    /// `channel`'s subscription no longer ends at a token's expiry.
    fn forget_deadline(&mut self, channel: &str) {
        if let Some(t) = self.subscription_deadlines.remove(channel) {
            timer::del(t);
        }
    }
}

/// A command's result, encoded in the connection's format; `None` when the command closed
/// the connection.
type Answer = Result<Option<Encoded>, ChannelError>;

/// `value` as a command's result on `ws`.
fn answer(ws: &Ws, value: &impl Serialize) -> Answer {
    Ok(Some(wire::encode(format_of(ws), value)))
}

/// The largest message a client may send on a channel connection unless its endpoint says
/// otherwise ([`WsEndpoint::max_message_size`]): a command with a publication of up to
/// [`DEFAULT_MAX_PUBLICATION`](super::DEFAULT_MAX_PUBLICATION) and room to spare.
pub const MAX_CLIENT_MESSAGE: usize = 64 << 10;

impl Channels {
    /// The WebSocket endpoint that speaks the channel protocol (make one per worker: serve
    /// it from an HTTP route with [`WsEndpoint::upgrade`] or on a `websocket://` listener).
    /// Clients' messages are at most [`MAX_CLIENT_MESSAGE`] bytes (1009 closes a larger
    /// one). Its options (origins, compression, limits) can still be set.
    pub fn endpoint(&self) -> WsEndpoint<Session> {
        let (open, message, closed) = (self.clone(), self.clone(), self.clone());
        WsEndpoint::new()
            .data::<Session>()
            .max_message_size(MAX_CLIENT_MESSAGE)
            .on_open(move |ws, handshake| {
                let channels = open.clone();
                async move { channels.opened(&ws, &handshake) }
            })
            .on_message(move |ws, msg| {
                let channels = message.clone();
                async move { channels.received(&ws, msg).await }
            })
            .on_close(move |ws| {
                let channels = closed.clone();
                async move { channels.closed(&ws) }
            })
    }

    fn opened(&self, ws: &Ws, handshake: &Handshake) {
        let format = Format::of_path(&handshake.path).and_then(|f| {
            if self.formats().contains(&f) {
                Ok(f)
            } else {
                Err(BadFormat::JsonOnly)
            }
        });
        let deadline = close_after(
            ws,
            self.inner.connect_timeout,
            close::CONNECT_TIMEOUT,
            "no connect in time",
        );
        ws.set_data(Session {
            format: *format.as_ref().unwrap_or(&Format::Json),
            subject: None,
            client: client_id(ws.id()),
            subscriptions: BTreeSet::new(),
            deadline: Some(deadline),
            subscription_deadlines: HashMap::new(),
            publishing: HashMap::new(),
        });
        if let Err(why) = format {
            ws.close(close::BAD_REQUEST, &why.to_string());
        }
    }

    fn closed(&self, ws: &Ws) {
        let left = ws.with_data(|s: &mut Session| {
            if let Some(t) = s.deadline.take() {
                timer::del(t);
            }
            for (_, t) in s.subscription_deadlines.drain() {
                timer::del(t);
            }
            let user = s.subject.as_ref().map(|s| s.user.clone());
            (user, s.client.clone(), std::mem::take(&mut s.subscriptions))
        });
        if let Some((Some(user), client, subscriptions)) = left {
            for channel in subscriptions {
                self.announce(&channel, false, &user, &client);
            }
        }
    }

    async fn received(&self, ws: &Ws, msg: Message) {
        let format = format_of(ws);
        let bytes = match (format, &msg) {
            (Format::Json, Message::Text(text)) => text.as_bytes(),
            (Format::MsgPack, Message::Binary(bytes)) => &bytes[..],
            (Format::Json, _) => {
                ws.close(close::BAD_REQUEST, "JSON commands come in text messages");
                return;
            }
            (Format::MsgPack, _) => {
                ws.close(
                    close::BAD_REQUEST,
                    "MessagePack commands come in binary messages",
                );
                return;
            }
        };
        let (id, command) = match wire::parse(format, bytes) {
            Ok(c) => c,
            Err(bad) => {
                match bad.id {
                    Some(id) => reply(ws, wire::error(format, id, ErrorCode::BadRequest, &bad.why)),
                    // Not echoed: the reason of a close frame is short, and not the client's.
                    None => ws.close(
                        close::BAD_REQUEST,
                        match format {
                            Format::Json => "not a command: a JSON object with an id",
                            Format::MsgPack => "not a command: a MessagePack map with an id",
                        },
                    ),
                }
                return;
            }
        };
        let result = match command {
            Command::Connect { token } => self.connect(ws, token).await,
            Command::Ping => answer(ws, &json!({})),
            command => match subject_of(ws) {
                None => Err(ChannelError::new(ErrorCode::NotConnected, "connect first")),
                Some(subject) => self.command(ws, &subject, command).await,
            },
        };
        match result {
            Ok(Some(result)) => reply(ws, wire::result(id, &result)),
            Ok(None) => {}
            Err(e) => reply(ws, wire::error(format, id, e.code, &e.message)),
        }
    }

    async fn command(&self, ws: &Ws, subject: &Subject, command: Command) -> Answer {
        match command {
            Command::Subscribe(s) => self.subscribe(ws, subject, s).await,
            Command::Unsubscribe { channel } => {
                let (was, client) = with_session(ws, |s| {
                    s.forget_deadline(&channel);
                    (s.subscriptions.remove(&channel), s.client.clone())
                });
                if !was {
                    return Err(not_subscribed(&channel));
                }
                ws.leave_group(&group_in(format_of(ws), &channel));
                self.announce(&channel, false, &subject.user, &client);
                answer(ws, &json!({}))
            }
            Command::Publish { channel, data } => self.publish_as(ws, &channel, &data).await,
            Command::Presence { channel } => {
                subscribed(ws, &channel)?;
                answer(ws, &self.presence(&channel).await?)
            }
            Command::History {
                channel,
                since: Some(since),
                ..
            } => {
                subscribed(ws, &channel)?;
                let since = parse_position(&since)?;
                let ns = self.namespace_for(&channel)?;
                let Some(history) = &ns.history else {
                    return Err(no_history(&channel));
                };
                answer(ws, &Replay::read(history, &channel, Some(&since)).await?)
            }
            Command::History { channel, limit, .. } => {
                subscribed(ws, &channel)?;
                answer(
                    ws,
                    &self.history(&channel, limit.unwrap_or(usize::MAX)).await?,
                )
            }
            Command::Refresh {
                token,
                channel: Some(channel),
            } => {
                self.refresh_subscription(ws, subject, &channel, &token)
                    .await
            }
            Command::Refresh {
                token,
                channel: None,
            } => self.refresh(ws, subject, token).await,
            Command::Connect { .. } | Command::Ping => unreachable!("handled before"),
        }
    }

    async fn connect(&self, ws: &Ws, token: Option<String>) -> Answer {
        if subject_of(ws).is_some() {
            return Err(ChannelError::new(
                ErrorCode::AlreadyConnected,
                "already connected",
            ));
        }
        let subject = match self.authenticate_token(token).await {
            Ok(s) => s,
            Err(refusal) => {
                ws.close(refusal.code, &refusal.reason);
                return Ok(None);
            }
        };
        ws.set_presence_id(&subject.user);
        ws.join_group(&user_key(&subject.user));
        let client = with_session(ws, |s| {
            s.subject = Some(Rc::new(subject.clone()));
            s.client.clone()
        });
        self.arm_expiry(ws, subject.expires);
        answer(
            ws,
            &json!({
                "client": client,
                "user": subject.user,
                "version": PROTOCOL_VERSION,
                "expires": subject.expires,
            }),
        )
    }

    async fn refresh(&self, ws: &Ws, subject: &Subject, token: String) -> Answer {
        let fresh = (self.authenticate_token(Some(token)).await).map_err(|r| {
            let code = match r.code {
                close::TOKEN_EXPIRED => ErrorCode::TokenExpired,
                close::SERVER_ERROR => ErrorCode::Unavailable,
                _ => ErrorCode::PermissionDenied,
            };
            ChannelError::new(code, format!("refresh: {}", r.reason))
        })?;
        if fresh.user != subject.user {
            return Err(ChannelError::new(
                ErrorCode::PermissionDenied,
                "refresh: the token is for another user",
            ));
        }
        with_session(ws, |s| s.subject = Some(Rc::new(fresh.clone())));
        self.arm_expiry(ws, fresh.expires);
        answer(ws, &json!({ "expires": fresh.expires }))
    }

    /// A new subscription token for a subscribed `channel`: the subscription lasts until its
    /// `exp`.
    async fn refresh_subscription(
        &self,
        ws: &Ws,
        subject: &Subject,
        channel: &str,
        token: &str,
    ) -> Answer {
        subscribed(ws, channel)?;
        let Some(keys) = &self.inner.subscription_jwt else {
            return Err(ChannelError::new(
                ErrorCode::PermissionDenied,
                "this server takes no subscription tokens",
            ));
        };
        let expires = subscription_allows(keys, token, &subject.user, channel)
            .await
            .map_err(|(code, why)| ChannelError::new(code, format!("refresh: {why}")))?;
        // It may have ended while the token was checked.
        subscribed(ws, channel)?;
        // Only a subscription a token allowed ends with one; another (allowed by the
        // namespace, the connect token or the app's check) is left as it is.
        let token_allowed = with_session(ws, |s| s.subscription_deadlines.contains_key(channel));
        if !token_allowed {
            return answer(ws, &json!({ "channel": channel, "expires": null }));
        }
        match expires {
            Some(at) => self.arm_subscription_expiry(ws, channel, at),
            None => with_session(ws, |s| s.forget_deadline(channel)),
        }
        answer(ws, &json!({ "channel": channel, "expires": expires }))
    }

    /// Ends the subscription to `channel` at `at` (Unix seconds), unless refreshed first.
    fn arm_subscription_expiry(&self, ws: &Ws, channel: &str, at: u64) {
        let left = Duration::from_secs(at.saturating_sub(now_seconds()));
        let (channels, conn, name) = (self.clone(), ws.clone(), channel.to_owned());
        let timer = timer::add(left, false, move || {
            channels.subscription_expired(&conn, &name)
        });
        with_session(ws, |s| {
            s.forget_deadline(channel);
            s.subscription_deadlines.insert(channel.to_owned(), timer);
        });
    }

    /// A subscription's token expired: it ends (an `unsubscribe` push says why), the
    /// connection stays.
    fn subscription_expired(&self, ws: &Ws, channel: &str) {
        let ended = ws.with_data(|s: &mut Session| {
            s.subscription_deadlines.remove(channel);
            let was = s.subscriptions.remove(channel);
            let user = s.subject.as_ref().map(|u| u.user.clone());
            (was, user, s.client.clone())
        });
        if let Some((true, Some(user), client)) = ended {
            let format = format_of(ws);
            ws.leave_group(&group_in(format, channel));
            reply(
                ws,
                wire::unsubscribe_push(
                    format,
                    channel,
                    ErrorCode::TokenExpired,
                    "the subscription token expired",
                ),
            );
            self.announce(channel, false, &user, &client);
        }
    }

    /// Closes the connection when its credentials expire (none: never).
    fn arm_expiry(&self, ws: &Ws, expires: Option<u64>) {
        let deadline = expires.map(|at| {
            let left = Duration::from_secs(at.saturating_sub(now_seconds()));
            close_after(ws, left, close::TOKEN_EXPIRED, "token expired")
        });
        if let Some(old) = with_session(ws, |s| std::mem::replace(&mut s.deadline, deadline)) {
            timer::del(old);
        }
    }

    async fn subscribe(&self, ws: &Ws, subject: &Subject, s: Subscribe) -> Answer {
        let channel = s.channel;
        let ns = self.namespace_for(&channel)?.clone();
        let since = s.since.as_deref().map(parse_position).transpose()?;
        let (already, count) = with_session(ws, |s| {
            (s.subscriptions.contains(&channel), s.subscriptions.len())
        });
        if already {
            return Err(ChannelError::new(
                ErrorCode::AlreadySubscribed,
                format!("{channel:?} is subscribed"),
            ));
        }
        if count >= self.inner.max_subscriptions {
            return Err(ChannelError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "at most {} subscriptions per connection",
                    self.inner.max_subscriptions
                ),
            ));
        }
        let expires =
            (self.may_subscribe(subject, &channel, ns.access, s.token.as_deref())).await?;
        // Join before reading the history, so that no publication falls between the two.
        let group = group_in(format_of(ws), &channel);
        ws.join_group(&group);
        let replay = match &ns.history {
            Some(history) => match Replay::read(history, &channel, since.as_ref()).await {
                Ok(r) => Some(r),
                Err(e) => {
                    ws.leave_group(&group);
                    return Err(e);
                }
            },
            None => None,
        };
        // Counted only now: a connection that closed while the history was read left no
        // subscription behind, and announces no leave for a join it never announced.
        let client = with_session(ws, |s| {
            s.subscriptions.insert(channel.clone());
            s.client.clone()
        });
        if let Some(at) = expires {
            self.arm_subscription_expiry(ws, &channel, at);
        }
        self.announce(&channel, true, &subject.user, &client);
        #[derive(Serialize)]
        struct Reply<'a> {
            channel: &'a str,
            /// When a subscription token allowed it: its `exp`.
            #[serde(skip_serializing_if = "Option::is_none")]
            expires: Option<u64>,
            #[serde(flatten)]
            subscribed: Subscribed<'a>,
        }
        answer(
            ws,
            &Reply {
                channel: &channel,
                expires,
                subscribed: Subscribed::new(replay.as_ref(), since.is_some()),
            },
        )
    }

    /// Whether `subject` may subscribe to `channel` (with a subscription `token` if it gave
    /// one), or why not; when the token allowed it, until the token's `exp`.
    pub(crate) async fn may_subscribe(
        &self,
        subject: &Subject,
        channel: &str,
        access: Access,
        token: Option<&str>,
    ) -> Result<Option<u64>, ChannelError> {
        if access == Access::Connected || subject.channels.iter().any(|c| c == channel) {
            return Ok(None);
        }
        let by_token = match (token, &self.inner.subscription_jwt) {
            (Some(token), Some(keys)) => Some(
                subscription_allows(keys, token, &subject.user, channel)
                    .await
                    .map_err(|(code, why)| ChannelError::new(code, why)),
            ),
            (Some(_), None) => Some(Err(ChannelError::new(
                ErrorCode::PermissionDenied,
                "this server takes no subscription tokens",
            ))),
            (None, _) => None,
        };
        if let Some(Ok(expires)) = by_token {
            return Ok(expires);
        }
        if let (Access::Check, Some(check)) = (access, &self.inner.check) {
            if check(subject.user.clone(), channel.to_owned()).await {
                return Ok(None);
            }
            return Err(by_token.and_then(Result::err).unwrap_or_else(|| {
                ChannelError::new(
                    ErrorCode::PermissionDenied,
                    format!("not allowed to subscribe to {channel:?}"),
                )
            }));
        }
        Err(by_token.and_then(Result::err).unwrap_or_else(|| {
            ChannelError::new(
                ErrorCode::PermissionDenied,
                format!("{channel:?} needs a subscription token"),
            )
        }))
    }

    async fn publish_as(&self, ws: &Ws, channel: &str, data: &Payload) -> Answer {
        let ns = self.namespace_for(channel)?;
        match ns.publishers {
            Publishers::Server => {
                return Err(ChannelError::new(
                    ErrorCode::PermissionDenied,
                    format!("only the server publishes to {channel:?}"),
                ))
            }
            Publishers::Subscribers => subscribed(ws, channel)?,
        }
        let size = data.len();
        if size > ns.max_publication {
            return Err(ChannelError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "the publication is {size} bytes; {channel:?} takes at most {}",
                    ns.max_publication
                ),
            ));
        }
        let rate = ns.publish_rate;
        let namespace = namespace_of(channel);
        let refused = with_session(ws, |s| {
            let bucket = s
                .publishing
                .entry(namespace.to_owned())
                .or_insert_with(|| PublishBucket::new(rate));
            (!bucket.take(rate)).then(|| bucket.wait(rate))
        });
        if let Some(wait) = refused {
            return Err(ChannelError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "publishing faster than {} a second to {namespace:?}'s channels: try again in {} ms",
                    rate.per_second,
                    wait.as_millis().max(1)
                ),
            ));
        }
        let position = self.publish_data(channel, data.data()).await?;
        answer(ws, &json!({ "offset": position.map(|p| p.to_string()) }))
    }

    /// Tells `channel`'s subscribers that `user` joined or left, if its namespace says so.
    fn announce(&self, channel: &str, joined: bool, user: &str, client: &str) {
        if self.namespace_for(channel).is_ok_and(|ns| ns.join_leave) {
            self.broadcast_push(channel, |format| {
                wire::presence_push(format, channel, joined, user, client)
            });
        }
    }
}

/// What a subscription starts with: its channel's history's answer (the position, and with
/// recovery what was missed or why it is lost), or why there is nothing to recover.
#[derive(Serialize)]
pub(crate) struct Subscribed<'a> {
    #[serde(flatten)]
    replay: Option<&'a Replay>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recovered: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

impl<'a> Subscribed<'a> {
    /// From the history's answer, if the namespace keeps a history (`recovering`: the client
    /// gave a position).
    pub(crate) fn new(replay: Option<&'a Replay>, recovering: bool) -> Self {
        let no_history = replay.is_none() && recovering;
        Subscribed {
            replay,
            recovered: no_history.then_some(false),
            reason: no_history.then_some("the channel's namespace keeps no history"),
        }
    }
}

pub(crate) fn parse_position(text: &str) -> Result<Position, ChannelError> {
    text.parse().map_err(|e: crate::ws::BadPosition| {
        ChannelError::new(ErrorCode::BadRequest, e.to_string())
    })
}

/// Runs `f` on the connection's session.
fn with_session<R>(ws: &Ws, f: impl FnOnce(&mut Session) -> R) -> R {
    ws.with_data(f).expect("a channel connection has a session")
}

/// The format `ws` speaks (JSON for a connection without a session, which is closing).
fn format_of(ws: &Ws) -> Format {
    ws.with_data(|s: &mut Session| s.format).unwrap_or_default()
}

fn subject_of(ws: &Ws) -> Option<Rc<Subject>> {
    ws.with_data(|s: &mut Session| s.subject.clone()).flatten()
}

fn subscribed(ws: &Ws, channel: &str) -> Result<(), ChannelError> {
    if with_session(ws, |s| s.subscriptions.contains(channel)) {
        Ok(())
    } else {
        Err(not_subscribed(channel))
    }
}

fn not_subscribed(channel: &str) -> ChannelError {
    ChannelError::new(
        ErrorCode::NotSubscribed,
        format!("{channel:?} is not subscribed"),
    )
}

fn reply(ws: &Ws, message: Message) {
    // A connection that is gone has nobody to answer.
    let _ = ws.send(message);
}

/// Closes `ws` with `code` after `delay`.
fn close_after(ws: &Ws, delay: Duration, code: u16, reason: &'static str) -> TimerId {
    let ws = ws.clone();
    timer::add(delay, false, move || ws.close(code, reason))
}

/// A connection id unique across workers and instances: a random prefix per worker process
/// and the connection's id.
fn client_id(conn: u64) -> String {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 6];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    });
    format!("{prefix}-{conn:x}")
}
