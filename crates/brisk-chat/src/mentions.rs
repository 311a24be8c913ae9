//! The mention job: a posted message that names `@someone` is pushed on a Redis queue, and
//! the `mentions` process (a custom process, apart from the HTTP workers) records each
//! mention of a room member and tells their sockets, wherever they are connected.
//!
//! The queue delivers at least once, so the job is idempotent: a mention is recorded under
//! the primary key (message, user), and only a first record tells anyone.

use brisk::queue::{Job, Queue, QueueOptions};
use brisk::redis::{Redis, RedisError};
use brisk::Process;
use serde::{Deserialize, Serialize};

use crate::figures;
use crate::live;
use crate::store::{Mention, Message, Room, Store};

/// The queue's name in Redis.
const QUEUE: &str = "team-chat:mentions";
/// Jobs the process runs at once.
const CONCURRENCY: usize = 4;

/// What a job carries.
#[derive(Debug, Serialize, Deserialize)]
struct MentionJob {
    message_id: i64,
    room_id: i64,
    room: String,
    author: String,
    body: String,
    names: Vec<String>,
}

/// The `@names` in `body`, each once, but the author's.
pub(crate) fn mentioned(body: &str, author: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (at, _) in body.match_indices('@') {
        // A mention starts a word: `a@b` is an address, not a mention.
        if body[..at]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
        {
            continue;
        }
        let name: String = body[at + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if !name.is_empty() && name.len() <= 32 && name != author && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

fn queue(redis: Redis) -> Queue {
    let options = QueueOptions {
        max_attempts: 5,
        ..QueueOptions::default()
    };
    Queue::new(redis, QUEUE, options)
}

/// Pushes mention jobs; cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub(crate) struct Mentions {
    queue: Queue,
}

impl Mentions {
    pub(crate) fn new(redis: Redis) -> Self {
        Mentions {
            queue: queue(redis),
        }
    }

    /// Queues the mentions in `message` (nothing when it names no one).
    pub(crate) async fn push(&self, room: &Room, message: &Message) -> Result<(), RedisError> {
        let names = mentioned(&message.body, &message.author);
        if names.is_empty() {
            return Ok(());
        }
        let job = MentionJob {
            message_id: message.id,
            room_id: room.id,
            room: room.name.clone(),
            author: message.author.clone(),
            body: message.body.clone(),
            names,
        };
        let payload = serde_json::to_vec(&job).unwrap_or_default();
        self.queue.push(payload).await.map(drop)
    }
}

/// Runs one job: records each mention and tells the user the first time.
async fn run(store: &Store, job: Job) -> Result<(), brisk::BoxError> {
    let job: MentionJob = job.json()?;
    for name in &job.names {
        if store
            .record_mention(job.message_id, job.room_id, name)
            .await?
        {
            let mention = Mention {
                message_id: job.message_id,
                room: job.room.clone(),
                author: job.author.clone(),
                body: job.body.clone(),
            };
            live::notify_mention(name, &mention);
            figures::MENTIONS.inc();
        }
    }
    Ok(())
}

/// The `mentions` process: consumes the queue on `redis` until it stops.
pub(crate) fn process(store: Store, redis: Redis) -> Process {
    Process::new("mentions").run(move |_| {
        let (store, queue) = (store.clone(), queue(redis.clone()));
        async move {
            queue
                .consume(CONCURRENCY, move |job| {
                    let store = store.clone();
                    async move { run(&store, job).await }
                })
                .await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::mentioned;

    #[test]
    fn mentions_are_words_that_start_with_an_at() {
        assert_eq!(mentioned("hi @ann and @bob-2!", "cy"), ["ann", "bob-2"]);
        assert_eq!(
            mentioned("@ann @ann @cy", "cy"),
            ["ann"],
            "once each, not the author"
        );
        assert!(mentioned("mail ann@example.org", "cy").is_empty());
        assert!(mentioned("@ alone, @", "cy").is_empty());
        assert_eq!(mentioned("(@ann)", "cy"), ["ann"]);
    }
}
