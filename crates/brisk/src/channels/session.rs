//! A connection speaking the channel protocol: its state (who it is, what it subscribed to,
//! when its credentials expire) and the handling of each command.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::auth::{subscription_allows, Subject};
use super::close;
use super::hub::{group_of, user_key, ChannelError, Channels};
use super::namespace::{Access, Publishers};
use super::wire::{self, Command, ErrorCode, Publication, Subscribe, PROTOCOL_VERSION};
use crate::timer::{self, TimerId};
use crate::ws::{self, History, Message, Position, Recovery, WsConnection, WsEndpoint};

/// A connection's state (its data).
struct Session {
    /// Who it is, once connected.
    subject: Option<Subject>,
    /// Its id in join and leave pushes: unique across workers and instances.
    client: String,
    subscriptions: BTreeSet<String>,
    /// The timer that closes it: no `connect` in time, or expired credentials.
    deadline: Option<TimerId>,
}

impl Channels {
    /// The WebSocket endpoint that speaks the channel protocol (make one per worker: serve
    /// it from an HTTP route with [`WsEndpoint::upgrade`] or on a `websocket://` listener).
    /// Its options (origins, compression, limits) can still be set.
    pub fn endpoint(&self) -> WsEndpoint {
        let (open, message, closed) = (self.clone(), self.clone(), self.clone());
        WsEndpoint::new()
            .on_open(move |ws, _| {
                let channels = open.clone();
                async move { channels.opened(&ws) }
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

    fn opened(&self, ws: &WsConnection) {
        let deadline = close_after(
            ws,
            self.inner.connect_timeout,
            close::CONNECT_TIMEOUT,
            "no connect in time",
        );
        ws.set_data(Session {
            subject: None,
            client: client_id(ws.id()),
            subscriptions: BTreeSet::new(),
            deadline: Some(deadline),
        });
    }

    fn closed(&self, ws: &WsConnection) {
        let left = ws.with_data(|s: &mut Session| {
            if let Some(t) = s.deadline.take() {
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

    async fn received(&self, ws: &WsConnection, msg: Message) {
        let Message::Text(text) = msg else {
            ws.close(close::BAD_REQUEST, "protocol v1 speaks JSON text messages");
            return;
        };
        let (id, command) = match wire::parse(&text) {
            Ok(c) => c,
            Err(bad) => {
                match bad.id {
                    Some(id) => reply(ws, wire::error(id, ErrorCode::BadRequest, &bad.why)),
                    None => ws.close(close::BAD_REQUEST, &bad.why),
                }
                return;
            }
        };
        let answer = match command {
            Command::Connect { token } => self.connect(ws, token).await,
            Command::Ping => Ok(json!({})),
            command => match subject_of(ws) {
                None => Err(ChannelError::new(ErrorCode::NotConnected, "connect first")),
                Some(subject) => self.command(ws, &subject, command).await,
            },
        };
        match answer {
            Ok(Value::Null) => {} // closed: no reply
            Ok(result) => reply(ws, wire::result(id, &result)),
            Err(e) => reply(ws, wire::error(id, e.code, &e.message)),
        }
    }

    async fn command(
        &self,
        ws: &WsConnection,
        subject: &Subject,
        command: Command,
    ) -> Result<Value, ChannelError> {
        match command {
            Command::Subscribe(s) => self.subscribe(ws, subject, s).await,
            Command::Unsubscribe { channel } => {
                let (was, client) =
                    edit(ws, |s| (s.subscriptions.remove(&channel), s.client.clone()));
                if !was {
                    return Err(not_subscribed(&channel));
                }
                ws.leave(&group_of(&channel));
                self.announce(&channel, false, &subject.user, &client);
                Ok(json!({}))
            }
            Command::Publish { channel, data } => self.publish_as(ws, &channel, &data).await,
            Command::Presence { channel } => {
                subscribed(ws, &channel)?;
                to_value(&self.presence(&channel).await?)
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
                let mut answer = json!({});
                recovery(history, &channel, Some(&since), &mut answer).await?;
                Ok(answer)
            }
            Command::History { channel, limit, .. } => {
                subscribed(ws, &channel)?;
                let h = self.history(&channel, limit.unwrap_or(usize::MAX)).await?;
                let publications: Vec<Value> = (h.publications.iter())
                    .map(|k| publication(&k.position, &k.payload))
                    .collect();
                Ok(json!({ "position": h.position.to_string(), "publications": publications }))
            }
            Command::Refresh { token } => self.refresh(ws, subject, token).await,
            Command::Connect { .. } | Command::Ping => unreachable!("handled before"),
        }
    }

    async fn connect(
        &self,
        ws: &WsConnection,
        token: Option<String>,
    ) -> Result<Value, ChannelError> {
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
                return Ok(Value::Null);
            }
        };
        ws.set_presence_id(&subject.user);
        ws.tag(&user_key(&subject.user));
        let client = edit(ws, |s| {
            s.subject = Some(subject.clone());
            s.client.clone()
        });
        self.arm_expiry(ws, subject.expires);
        Ok(json!({
            "client": client,
            "user": subject.user,
            "version": PROTOCOL_VERSION,
            "expires": subject.expires,
        }))
    }

    async fn refresh(
        &self,
        ws: &WsConnection,
        subject: &Subject,
        token: String,
    ) -> Result<Value, ChannelError> {
        let fresh = (self.authenticate_token(Some(token)).await).map_err(|r| {
            ChannelError::new(
                ErrorCode::PermissionDenied,
                format!("refresh: {}", r.reason),
            )
        })?;
        if fresh.user != subject.user {
            return Err(ChannelError::new(
                ErrorCode::PermissionDenied,
                "refresh: the token is for another user",
            ));
        }
        edit(ws, |s| s.subject = Some(fresh.clone()));
        self.arm_expiry(ws, fresh.expires);
        Ok(json!({ "expires": fresh.expires }))
    }

    /// Closes the connection when its credentials expire (none: never).
    fn arm_expiry(&self, ws: &WsConnection, expires: Option<u64>) {
        let deadline = expires.map(|at| {
            let left = Duration::from_secs(at.saturating_sub(now_seconds()));
            close_after(ws, left, close::TOKEN_EXPIRED, "token expired")
        });
        if let Some(old) = edit(ws, |s| std::mem::replace(&mut s.deadline, deadline)) {
            timer::del(old);
        }
    }

    async fn subscribe(
        &self,
        ws: &WsConnection,
        subject: &Subject,
        s: Subscribe,
    ) -> Result<Value, ChannelError> {
        let channel = s.channel;
        let ns = self.namespace_for(&channel)?.clone();
        let since = s.since.as_deref().map(parse_position).transpose()?;
        let (already, count) = edit(ws, |s| {
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
        self.may_subscribe(subject, &channel, ns.access, s.token.as_deref())
            .await?;
        // Join before reading the history, so that no publication falls between the two.
        let group = group_of(&channel);
        ws.join(&group);
        let client = edit(ws, |s| {
            s.subscriptions.insert(channel.clone());
            s.client.clone()
        });
        let mut answer = json!({ "channel": channel });
        if let Some(history) = &ns.history {
            if let Err(e) = recovery(history, &channel, since.as_ref(), &mut answer).await {
                edit(ws, |s| s.subscriptions.remove(&channel));
                ws.leave(&group);
                return Err(e);
            }
        } else if since.is_some() {
            answer["recovered"] = json!(false);
            answer["reason"] = json!("the channel's namespace keeps no history");
        }
        if ns.join_leave {
            self.announce(&channel, true, &subject.user, &client);
        }
        Ok(answer)
    }

    /// Whether `subject` may subscribe to `channel`, or why not.
    async fn may_subscribe(
        &self,
        subject: &Subject,
        channel: &str,
        access: Access,
        token: Option<&str>,
    ) -> Result<(), ChannelError> {
        if access == Access::Connected || subject.channels.iter().any(|c| c == channel) {
            return Ok(());
        }
        if let Some(token) = token {
            let Some(jwt) = &self.inner.subscription_jwt else {
                return Err(ChannelError::new(
                    ErrorCode::PermissionDenied,
                    "this server takes no subscription tokens",
                ));
            };
            return subscription_allows(jwt, token, &subject.user, channel)
                .map_err(|(code, why)| ChannelError::new(code, why));
        }
        if access == Access::Check {
            if let Some(check) = &self.inner.check {
                if check(subject.user.clone(), channel.to_owned()).await {
                    return Ok(());
                }
                return Err(ChannelError::new(
                    ErrorCode::PermissionDenied,
                    format!("not allowed to subscribe to {channel:?}"),
                ));
            }
        }
        Err(ChannelError::new(
            ErrorCode::PermissionDenied,
            format!("{channel:?} needs a subscription token"),
        ))
    }

    async fn publish_as(
        &self,
        ws: &WsConnection,
        channel: &str,
        data: &RawValue,
    ) -> Result<Value, ChannelError> {
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
        let position = self.publish(channel, data).await?;
        Ok(json!({ "offset": position.map(|p| p.to_string()) }))
    }

    /// Tells `channel`'s subscribers that `user` joined or left, if its namespace says so.
    fn announce(&self, channel: &str, joined: bool, user: &str, client: &str) {
        if self.namespace_for(channel).is_ok_and(|ns| ns.join_leave) {
            let push = wire::presence_push(channel, joined, user, client);
            ws::broadcast(&group_of(channel), Message::text(push));
        }
    }
}

/// Sets `answer`'s `position` (the channel's newest) and, with `since`, `recovered` and the
/// `publications` after it or the `reason` they are lost.
async fn recovery(
    history: &History,
    channel: &str,
    since: Option<&Position>,
    answer: &mut Value,
) -> Result<(), ChannelError> {
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
    answer["position"] = json!(position.to_string());
    match recovered {
        Some(Recovery::Recovered(missed)) => {
            answer["recovered"] = json!(true);
            answer["publications"] = (missed.iter())
                .map(|k| publication(&k.position, &k.payload))
                .collect();
        }
        Some(Recovery::Lost(why)) => {
            answer["recovered"] = json!(false);
            answer["reason"] = json!(why.to_string());
        }
        None => {}
    }
    Ok(())
}

fn parse_position(text: &str) -> Result<Position, ChannelError> {
    text.parse().map_err(|e: crate::ws::BadPosition| {
        ChannelError::new(ErrorCode::BadRequest, e.to_string())
    })
}

/// The error for history on a namespace that keeps none.
pub(crate) fn no_history(channel: &str) -> ChannelError {
    ChannelError::new(
        ErrorCode::NotAvailable,
        format!("{channel:?}'s namespace keeps no history"),
    )
}

/// Runs `f` on the connection's session.
fn edit<R>(ws: &WsConnection, f: impl FnOnce(&mut Session) -> R) -> R {
    ws.with_data(f).expect("a channel connection has a session")
}

fn subject_of(ws: &WsConnection) -> Option<Subject> {
    ws.with_data(|s: &mut Session| s.subject.clone()).flatten()
}

fn subscribed(ws: &WsConnection, channel: &str) -> Result<(), ChannelError> {
    if edit(ws, |s| s.subscriptions.contains(channel)) {
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

fn reply(ws: &WsConnection, text: String) {
    // A connection that is gone has nobody to answer.
    let _ = ws.send_text(text);
}

/// A kept publication as clients get it.
fn publication(at: &Position, payload: &[u8]) -> Value {
    let data = std::str::from_utf8(payload)
        .ok()
        .and_then(|s| serde_json::from_str::<&RawValue>(s).ok());
    let publication = Publication {
        offset: Some(at.to_string()),
        data: data.unwrap_or_else(|| serde_json::from_str("null").expect("null")),
    };
    serde_json::to_value(&publication).expect("publications serialize")
}

fn to_value(v: &impl Serialize) -> Result<Value, ChannelError> {
    Ok(serde_json::to_value(v).expect("answers serialize"))
}

/// Closes `ws` with `code` after `delay`.
fn close_after(ws: &WsConnection, delay: Duration, code: u16, reason: &'static str) -> TimerId {
    let ws = ws.clone();
    timer::add(delay, false, move || ws.close(code, reason))
}

/// A connection id unique across workers and instances: a random prefix per worker and the
/// connection's id.
fn client_id(conn: u64) -> String {
    thread_local! {
        static PREFIX: String = {
            let mut bytes = [0u8; 6];
            getrandom::fill(&mut bytes).expect("the operating system's random source");
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        };
    }
    PREFIX.with(|p| format!("{p}-{conn:x}"))
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
