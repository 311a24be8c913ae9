//! **team-chat**: a whole app on Brisk, the team chat a new user would build. Accounts with
//! hashed passwords and signed cookie sessions, rooms with members, messages in PostgreSQL
//! (or SQLite) posted in a transaction each, live updates over WebSocket to every worker and
//! machine, a mention job on a Redis queue run by a custom process, settings loaded once by
//! the master, and the app's own metrics. The routes are an ordinary axum `Router`.
//!
//! ```text
//! export CHAT_SESSION_SECRET=$(head -c 32 /dev/urandom | base64)
//! cargo run -p brisk-chat -- start                    # http://127.0.0.1:8070, SQLite in run/
//! export CHAT_CLUSTER_SECRET=$(head -c 16 /dev/urandom | base64)
//! CHAT_DATABASE_URL=postgres://chat:pw@127.0.0.1/chat CHAT_REDIS_URL=redis://127.0.0.1/ \
//!   CHAT_METRICS_LISTEN=http://127.0.0.1:9070 cargo run -p brisk-chat -- start -d
//! cargo run -p brisk-chat -- status
//! cargo run -p brisk-chat -- stop
//! ```
//!
//! Settings (each also `CHAT_<KEY>` in the environment, or a key of `team-chat.toml`, or the
//! file `--config` names): `listen`, `workers`, `database_url`, `redis_url`,
//! `session_secret` (required, 32 bytes or more), `cluster_secret` (with `redis_url`, 16
//! bytes or more), `metrics_listen`, `run_dir`,
//! `max_message_bytes`. A wrong one fails `start` with its key and why.
//!
//! The API (JSON; `x-csrf-token` from `/api/me` on every request that changes something):
//! `POST /api/signup`, `POST /api/login`, `POST /api/logout`, `GET /api/me`,
//! `GET|POST /api/rooms`, `POST /api/rooms/{room}/join`,
//! `DELETE|PUT /api/rooms/{room}/members/{user}` (the owner: a member taken out cannot join
//! again until the owner adds them back), `GET|POST
//! /api/rooms/{room}/messages`, `GET /api/rooms/{room}/live` (WebSocket, see [`live`]) and `/events` (SSE),
//! `GET /api/mentions`. `/` is the one page that uses them.

mod auth;
mod figures;
mod live;
mod mentions;
mod routes;
mod settings;
mod store;

use std::path::PathBuf;
use std::process::ExitCode;

use brisk::config::Config;
use brisk::db::{Db, DbKind, DbOptions, Migrations};
use brisk::http::login_throttle::{LoginThrottle, ThrottleOptions};
use brisk::http::session::Sessions;
use brisk::http::HttpServer;
use brisk::redis::{Redis, RedisOptions};
use brisk::App;
use clap::Parser;

use settings::Settings;

/// Command line: where the settings file is, then a control command.
#[derive(Debug, Parser)]
#[command(name = "team-chat", about = "A team chat on Brisk")]
struct Args {
    /// The settings file (TOML; skipped if it does not exist).
    #[arg(long, global = true, default_value = "team-chat.toml")]
    config: PathBuf,
    /// The run directory (over the `run_dir` setting): control commands find the app there.
    #[arg(long, global = true)]
    run_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: brisk::Command,
}

/// The schema for the database's kind, embedded at build time.
fn migrations(kind: DbKind) -> Migrations {
    match kind {
        DbKind::Postgres => brisk::migrations!("migrations/postgres"),
        _ => brisk::migrations!("migrations/sqlite"),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut config = Config::new().file(&args.config).env_prefix("CHAT_");
    if let Some(dir) = &args.run_dir {
        config = config.set("run_dir", dir);
    }
    let settings: Settings = config.load_checked(Settings::check);
    let starts = matches!(
        args.command,
        brisk::Command::Start { .. } | brisk::Command::Restart { .. }
    );
    match app(&settings) {
        Ok(app) => app.run_command(args.command),
        Err(e) if starts && settings.check().is_ok() => {
            eprintln!("team-chat: {e}");
            ExitCode::FAILURE
        }
        // Wrong settings: `start` refuses them with the key and why (load_checked kept it),
        // and the control commands, which talk to the running master, need none of them.
        Err(_) => App::new("team-chat")
            .run_dir(&settings.run_dir)
            .run_command(args.command),
    }
}

/// The app the settings describe: nothing connects until a worker runs.
fn app(settings: &Settings) -> Result<App, brisk::BoxError> {
    let db = Db::open(&settings.database_url, DbOptions::default())
        .map_err(|e| format!("database_url: {e}"))?;
    let store = store::Store::new(db.clone());
    let sessions = Sessions::new(settings.session_secret.as_bytes())?;
    let redis = match &settings.redis_url {
        Some(url) => {
            Some(Redis::new(url, RedisOptions::default()).map_err(|e| format!("redis_url: {e}"))?)
        }
        None => None,
    };
    let chat = routes::Chat {
        store: store.clone(),
        sessions,
        throttle: LoginThrottle::new(ThrottleOptions::default()),
        hashing: auth::hashing_slots(),
        mentions: redis.clone().map(mentions::Mentions::new),
        max_message_bytes: settings.max_message_bytes,
    };
    let server = HttpServer::new(&settings.listen)?
        .workers(settings.workers)
        // JSON escapes may take six bytes for one (`\u0001`): the app's own limit answers first.
        .max_body_size(6 * settings.max_message_bytes + 1024)
        .ws_endpoint(live::ENDPOINT, live::endpoint())
        .service(routes::router(chat));
    let ready_db = db.clone();
    let mut app = App::new("team-chat")
        .run_dir(&settings.run_dir)
        .server(server)
        .migrate(db.clone(), migrations(db.kind()))
        .readiness("database", move || {
            let db = ready_db.clone();
            async move { db.query_one("SELECT 1", vec![]).await.map(drop) }
        });
    for metric in figures::all() {
        app = app.metric(metric);
    }
    if let Some(address) = &settings.metrics_listen {
        app = app.metrics(address.clone());
    }
    // Without Redis: one machine, and no mention job (posting says nothing of mentions).
    if let (Some(redis), Some(url)) = (redis, &settings.redis_url) {
        app = app
            .process(mentions::process(store, redis))
            .cluster(url.clone())
            .cluster_secret(settings.cluster_secret.as_bytes());
    }
    Ok(app)
}
