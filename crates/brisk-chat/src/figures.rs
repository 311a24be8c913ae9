//! The chat's own metrics, exported on `/metrics` beside Brisk's (summed over workers).

use brisk::metrics::{Counter, Histogram};

/// Messages committed.
pub(crate) static POSTED: Counter = Counter::new(
    "chat_messages_posted_total",
    "Messages posted and committed.",
);

/// Mentions recorded and told to their user.
pub(crate) static MENTIONS: Counter = Counter::new(
    "chat_mentions_delivered_total",
    "Mentions recorded by the mention job and sent to the user's sockets.",
);

/// Sign-ins refused for a wrong name or password.
pub(crate) static LOGINS_FAILED: Counter = Counter::new(
    "chat_logins_failed_total",
    "Sign-ins with a wrong name or password.",
);

/// How long posting took: the membership check and the transaction.
pub(crate) static POST_SECONDS: Histogram<6> = Histogram::new(
    "chat_post_seconds",
    "Time to check and commit a posted message, in seconds.",
    [0.001, 0.0025, 0.005, 0.01, 0.05, 0.25],
);

/// Every metric above, for `App::metric`.
pub(crate) fn all() -> [&'static dyn brisk::metrics::Metric; 4] {
    [&POSTED, &MENTIONS, &LOGINS_FAILED, &POST_SECONDS]
}
