//! [`Channels`]: the namespaces, how clients authenticate, and what the server does to
//! channels on its own (publish, disconnect a user, presence, history, the active channels),
//! which the protocol's commands and the server API both use.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;

use super::auth::{AuthFn, Authenticator, CheckFn, KeySource, Refusal, Subject};
use super::namespace::{namespace_of, valid_name, Namespace};
use super::wire::{self, Data, ErrorCode, Format, Publication};
use crate::jwks_url::JwksUrl;
use crate::jwt::{Jwt, JwtError};
use crate::redis::RedisError;
use crate::runtime::context::running;
use crate::ws::group_key::{ChannelFormat, GroupKey, Space};
use crate::ws::{self, HistoryError, Kept, Message, Position};

/// The group of `channel`'s JSON subscribers (sockets and event streams).
pub(crate) fn group_of(channel: &str) -> GroupKey {
    group_in(Format::Json, channel)
}

/// The group of `channel`'s subscribers that speak `format`: each gets pushes encoded once
/// for all of them. A group of the channel protocol's own: no group the app joins by name is
/// one of them.
pub(crate) fn group_in(format: Format, channel: &str) -> GroupKey {
    GroupKey::channel(channel_format(format), channel)
}

/// The space of a format's subscriber groups.
fn channel_format(format: Format) -> ChannelFormat {
    match format {
        Format::Json => ChannelFormat::Json,
        Format::MsgPack => ChannelFormat::MsgPack,
    }
}

/// The group of a user's connections (its sockets and streams are tagged with it).
pub(crate) fn user_key(user: &str) -> GroupKey {
    GroupKey::channel_user(user)
}

/// A command or server call that failed: its code and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (code {})", *.code as u16)]
pub struct ChannelError {
    /// The protocol's error code.
    pub code: ErrorCode,
    /// What was wrong, for the client.
    pub message: String,
}

impl ChannelError {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ChannelError {
            code,
            message: message.into(),
        }
    }

    fn unavailable(what: &str, e: &RedisError) -> Self {
        tracing::warn!("channels: {what}: {e}");
        ChannelError::new(
            ErrorCode::Unavailable,
            format!("{what}: {}", e.client_message()),
        )
    }
}

/// Who is subscribed to a channel, on every instance (with `App::cluster`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PresenceInfo {
    /// Subscribed connections (sockets and event streams).
    pub clients: u64,
    /// Their users, each once, sorted.
    pub users: Vec<String>,
}

/// A channel's kept publications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelHistory {
    /// The position of the channel's newest publication (offset 0: none yet in this epoch).
    pub position: Position,
    /// The kept publications, oldest first.
    pub publications: Vec<Kept>,
}

pub(crate) struct Inner {
    pub(crate) auth: Authenticator,
    pub(crate) subscription_jwt: Option<KeySource>,
    pub(crate) check: Option<CheckFn>,
    pub(crate) namespaces: HashMap<String, Namespace>,
    pub(crate) max_subscriptions: usize,
    pub(crate) connect_timeout: Duration,
    /// Whether clients may speak MessagePack (`?format=msgpack`).
    pub(crate) msgpack: bool,
}

/// Channels that clients subscribe to through the channel protocol
/// ([`endpoint`](Channels::endpoint)), and what the server does to them. `Send + Sync`,
/// cheap to clone: configure it, then make the endpoint in each worker.
///
/// ```no_run
/// use brisk::channels::{Access, Channels, Namespace};
/// use brisk::jwt::Jwt;
/// # fn f() -> Result<(), brisk::jwt::JwtError> {
/// let channels = Channels::jwt(Jwt::hs256(b"a secret of at least thirty-two bytes")?)
///     .namespace("news", Namespace::new().subscribe(Access::Connected));
/// let endpoint = channels.endpoint(); // serve it from a route, or a WsServer
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Channels {
    pub(crate) inner: Arc<Inner>,
}

impl Channels {
    fn with(auth: Authenticator) -> Self {
        let subscription_jwt = match &auth {
            Authenticator::Jwt(keys) => Some(keys.clone()),
            Authenticator::App(_) => None,
        };
        Channels {
            inner: Arc::new(Inner {
                auth,
                subscription_jwt,
                check: None,
                namespaces: HashMap::new(),
                max_subscriptions: 128,
                connect_timeout: Duration::from_secs(10),
                msgpack: false,
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        f(Arc::get_mut(&mut self.inner).expect("configure Channels before cloning it"));
        self
    }

    /// Clients connect with a JWT checked by `jwt` (claims: `sub` the user, `exp`, and
    /// optionally `channels`, the channels the user may subscribe to); subscription tokens
    /// are checked by it too.
    pub fn jwt(jwt: Jwt) -> Self {
        Self::with(Authenticator::Jwt(KeySource::ready(jwt)))
    }

    /// As [`jwt`](Channels::jwt), with keys made by `load` on first use in each worker (from
    /// a key file that the first worker creates, say). While `load` fails, clients are
    /// closed with [`close::SERVER_ERROR`](super::close::SERVER_ERROR) and it is tried again
    /// on the next connect.
    pub fn jwt_from(load: impl Fn() -> Result<Jwt, JwtError> + Send + Sync + 'static) -> Self {
        Self::with(Authenticator::Jwt(KeySource::lazy(load)))
    }

    /// As [`jwt`](Channels::jwt), with the keys an identity provider publishes at a JWKS URL
    /// (fetched in each worker, refreshed in the background, fetched again when a token
    /// names a key not seen yet). While no keys could be fetched, clients are closed with
    /// [`close::SERVER_ERROR`](super::close::SERVER_ERROR); once fetched, keys stay in use
    /// while the provider is unreachable.
    ///
    /// ```no_run
    /// use brisk::channels::Channels;
    /// use brisk::jwks_url::JwksUrl;
    /// let keys = JwksUrl::new("https://auth.example/.well-known/jwks.json")
    ///     .unwrap()
    ///     .audience("chat");
    /// let channels = Channels::jwks_url(keys);
    /// ```
    pub fn jwks_url(keys: JwksUrl) -> Self {
        Self::with(Authenticator::Jwt(KeySource::Url(keys)))
    }

    /// Clients connect with whatever token the app's `check` understands (or none): it
    /// answers who the client is, or refuses it with a close code.
    ///
    /// ```no_run
    /// use brisk::channels::{close, Channels, Refusal, Subject};
    /// let channels = Channels::authenticate(|token| async move {
    ///     match token.as_deref() {
    ///         Some("let-me-in") => Ok(Subject::new("guest")),
    ///         _ => Err(Refusal::new(close::INVALID_TOKEN, "unknown token")),
    ///     }
    /// });
    /// ```
    pub fn authenticate<F, Fut>(check: F) -> Self
    where
        F: Fn(Option<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Subject, Refusal>> + 'static,
    {
        let check: AuthFn = Arc::new(move |token| Box::pin(check(token)));
        Self::with(Authenticator::App(check))
    }

    /// Adds a namespace: the channels named `name:…` (`""`: the channels without `:`).
    /// Channels of no namespace are refused. Panics if `name` holds a `:` or is not a valid
    /// channel name.
    pub fn namespace(self, name: &str, namespace: Namespace) -> Self {
        assert!(
            name.is_empty() || (valid_name(name) && !name.contains(':')),
            "a namespace is named with letters, digits and -_.@/= (no ':'), not {name:?}"
        );
        self.edit(|i| {
            i.namespaces.insert(name.to_owned(), namespace);
        })
    }

    /// Checks subscription tokens with `jwt` (by default, the connect tokens' `Jwt`).
    pub fn subscription_tokens(self, jwt: Jwt) -> Self {
        self.edit(|i| i.subscription_jwt = Some(KeySource::ready(jwt)))
    }

    /// The app's check for namespaces with [`Access::Check`](super::Access::Check): may
    /// `user` subscribe to `channel`?
    pub fn check_subscribe<F, Fut>(self, check: F) -> Self
    where
        F: Fn(String, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + 'static,
    {
        let check: CheckFn = Arc::new(move |user, channel| Box::pin(check(user, channel)));
        self.edit(|i| i.check = Some(check))
    }

    /// The most channels one connection may subscribe to (default 128).
    pub fn max_subscriptions(self, n: usize) -> Self {
        self.edit(|i| i.max_subscriptions = n)
    }

    /// How long a client has to send `connect` after the WebSocket opens (default 10 s).
    pub fn connect_timeout(self, d: Duration) -> Self {
        self.edit(|i| i.connect_timeout = d)
    }

    /// Whether clients may speak the protocol's binary format, MessagePack, by opening the
    /// endpoint's URL with `?format=msgpack` (default: no, and such clients are closed with
    /// 4004 saying so). With it, every publication and join/leave push is encoded and
    /// broadcast once per format, whoever listens: a second broadcast per publication, which
    /// channels with few subscribers each (a channel per user) feel most.
    pub fn msgpack(self, on: bool) -> Self {
        self.edit(|i| i.msgpack = on)
    }

    /// The formats this server's clients may speak.
    pub(crate) fn formats(&self) -> &'static [Format] {
        if self.inner.msgpack {
            &[Format::Json, Format::MsgPack]
        } else {
            &[Format::Json]
        }
    }

    /// Sends `push` (made in each format) to `channel`'s subscribers of every format, on
    /// every worker and instance.
    pub(crate) fn broadcast_push(&self, channel: &str, push: impl Fn(Format) -> Message) {
        let w = running("brisk::channels::Channels (a publication)");
        for &format in self.formats() {
            ws::broadcast_to(&w, &group_in(format, channel), push(format));
        }
    }

    /// The namespace of `channel`, or why there is none.
    pub(crate) fn namespace_for(&self, channel: &str) -> Result<&Namespace, ChannelError> {
        if !valid_name(channel) {
            return Err(ChannelError::new(
                ErrorCode::UnknownChannel,
                "a channel is named with 1 to 255 letters, digits and -_.:@/=",
            ));
        }
        let ns = namespace_of(channel);
        self.inner.namespaces.get(ns).ok_or_else(|| {
            ChannelError::new(
                ErrorCode::UnknownChannel,
                format!("no namespace {ns:?} for channel {channel:?}"),
            )
        })
    }

    /// Publishes `data` (JSON) to `channel`'s subscribers on every worker and instance; with
    /// history, keeps it first and answers its position. If the history cannot keep it
    /// (Redis down: `Unavailable`; larger than [`HistoryOptions::max_message`]:
    /// `LimitExceeded`), nobody gets it and the error says so.
    ///
    /// [`HistoryOptions::max_message`]: crate::ws::HistoryOptions::max_message
    ///
    /// ```no_run
    /// # async fn f(channels: brisk::channels::Channels) -> Result<(), brisk::channels::ChannelError> {
    /// let data = serde_json::value::RawValue::from_string(r#"{"text":"hi"}"#.into()).unwrap();
    /// channels.publish("news", &data).await?;
    /// # Ok(()) }
    /// ```
    pub async fn publish(
        &self,
        channel: &str,
        data: &RawValue,
    ) -> Result<Option<Position>, ChannelError> {
        self.publish_data(channel, Data::Json(data)).await
    }

    /// Publishes bytes to `channel`'s subscribers, as [`publish`](Channels::publish) does:
    /// MessagePack clients get them as they are (`bin`); JSON clients get them as `data` if
    /// they are JSON text, else in base64 as `b64`.
    ///
    /// ```no_run
    /// # async fn f(channels: brisk::channels::Channels) -> Result<(), brisk::channels::ChannelError> {
    /// channels.publish_bytes("game:7", &[1, 0, 42]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn publish_bytes(
        &self,
        channel: &str,
        data: &[u8],
    ) -> Result<Option<Position>, ChannelError> {
        self.publish_data(channel, Data::of(data)).await
    }

    pub(crate) async fn publish_data(
        &self,
        channel: &str,
        data: Data<'_>,
    ) -> Result<Option<Position>, ChannelError> {
        let ns = self.namespace_for(channel)?;
        let position = match &ns.history {
            Some(history) => Some((history.append(channel, data.bytes()).await).map_err(
                |e| match e {
                    HistoryError::Redis(e) => ChannelError::unavailable("history", &e),
                    too_large => ChannelError::new(ErrorCode::LimitExceeded, too_large.to_string()),
                },
            )?),
            None => None,
        };
        let publication = Publication {
            offset: position.as_ref().map(Position::to_string),
            data,
        };
        self.broadcast_push(channel, |format| {
            wire::publication_push(format, channel, &publication)
        });
        Ok(position)
    }

    /// Closes every connection of `user` on every worker and instance with `code`
    /// (4000–4999) and `reason`; answers how many of this worker it closed.
    pub fn disconnect(&self, user: &str, code: u16, reason: &str) -> Result<usize, ChannelError> {
        if !(4000..=4999).contains(&code) {
            return Err(ChannelError::new(
                ErrorCode::BadRequest,
                format!("a disconnect code is 4000 to 4999, not {code}"),
            ));
        }
        let w = running("brisk::channels::Channels::disconnect");
        Ok(ws::close_members(&w, &user_key(user), code, reason))
    }

    /// Who is subscribed to `channel` (a namespace with presence on).
    pub async fn presence(&self, channel: &str) -> Result<PresenceInfo, ChannelError> {
        let ns = self.namespace_for(channel)?;
        if !ns.presence {
            return Err(ChannelError::new(
                ErrorCode::NotAvailable,
                format!("presence is off for {:?}'s namespace", channel),
            ));
        }
        let w = running("brisk::channels::Channels::presence");
        let (mut clients, mut users) = (0, Vec::new());
        for &format in self.formats() {
            let group = group_in(format, channel);
            clients += (ws::members_of(&w, &group).await)
                .map_err(|e| ChannelError::unavailable("presence", &e))?;
            users.extend(
                (ws::ids_of(&w, &group).await)
                    .map_err(|e| ChannelError::unavailable("presence", &e))?,
            );
        }
        users.sort_unstable();
        users.dedup();
        Ok(PresenceInfo { clients, users })
    }

    /// The last `limit` kept publications of `channel` (at most what its history keeps).
    pub async fn history(
        &self,
        channel: &str,
        limit: usize,
    ) -> Result<ChannelHistory, ChannelError> {
        let ns = self.namespace_for(channel)?;
        let Some(history) = &ns.history else {
            return Err(no_history(channel));
        };
        let (position, publications) = (history.latest(channel, limit).await)
            .map_err(|e| ChannelError::unavailable("history", &e))?;
        Ok(ChannelHistory {
            position,
            publications,
        })
    }

    /// The channels with subscribers, and how many each has: on every instance with
    /// `App::cluster`, else in this worker.
    pub async fn active(&self) -> Result<Vec<(String, u64)>, ChannelError> {
        let w = running("brisk::channels::Channels::active");
        let mut active = std::collections::BTreeMap::new();
        for &format in self.formats() {
            let space = Space::Channel(channel_format(format));
            let groups = (ws::groups_in(&w, space, "").await)
                .map_err(|e| ChannelError::unavailable("channels", &e))?;
            for (channel, n) in groups {
                *active.entry(channel).or_insert(0) += n;
            }
        }
        Ok(active.into_iter().collect())
    }

    /// The subject of a connect or refresh token.
    pub(crate) async fn authenticate_token(
        &self,
        token: Option<String>,
    ) -> Result<Subject, Refusal> {
        self.inner.auth.subject(token).await
    }
}

/// The error for history on a namespace that keeps none.
pub(crate) fn no_history(channel: &str) -> ChannelError {
    ChannelError::new(
        ErrorCode::NotAvailable,
        format!("{channel:?}'s namespace keeps no history"),
    )
}
