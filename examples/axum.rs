//! An axum `Router`, unchanged, on Brisk's process model: `HttpServer::service(router)` hands
//! every request to the router inside a worker process, so the master, the workers, the limits
//! and the control CLI are Brisk's while the routes, extractors and rejections are axum's.
//!
//! ```text
//! cargo run -p brisk --features axum,jwt --example axum -- start          # http://127.0.0.1:8090, 2 workers
//! cargo run -p brisk --features axum,jwt --example axum -- --listen http://127.0.0.1:9000 --workers 4 start -d
//! cargo run -p brisk --features axum,jwt --example axum -- status
//! cargo run -p brisk --features axum,jwt --example axum -- stop
//!
//! curl http://127.0.0.1:8090/                       # Hello from axum on Brisk
//! curl http://127.0.0.1:8090/users/42               # {"id":42,"worker":<worker pid>}
//! curl -d '{"a":1}' -H 'content-type: application/json' http://127.0.0.1:8090/echo
//! curl 'http://127.0.0.1:8090/query?name=Ada'       # Hello, Ada!
//! curl http://127.0.0.1:8090/whoami                 # 127.0.0.1:PORT (axum's ConnectInfo)
//! websocat -H 'x-user: ada' ws://127.0.0.1:8090/rooms/ops/ws   # a chat room (see chat())
//! curl -d 'ping' http://127.0.0.1:8090/users/ada/notify        # to ada's sockets, any worker
//! curl -N -H 'x-user: ada' http://127.0.0.1:8090/rooms/ops/events  # the room as server-sent events
//! websocat ws://127.0.0.1:8090/echo/ws                          # an echo
//! websocat ws://127.0.0.1:8090/fanout/ws                        # what anyone sends, to all
//! curl -X POST http://127.0.0.1:8090/users/ada/kick            # closes ada's sockets (4003)
//!
//! cargo run -p brisk --features axum,jwt --example axum -- --static-dir ./public start
//! curl http://127.0.0.1:8090/static/index.html      # ./public/index.html
//! ```
//!
//! Malformed input gets axum's own rejection (a bad JSON body 400, a missing `name` 400, a
//! non-numeric user id 400). A body over `--max-body-size` (default 1 MiB) gets 413: from Brisk
//! before the handler runs when Content-Length says so, from axum's `Json` extractor when a
//! chunked body runs past the limit.
//!
//! With `--static-dir`, Brisk's [`StaticFiles`] is nested in the router at `/static`: a
//! `tower::Service` like any other to axum, with validators, ranges and a cache of small
//! files, and its larger files still sent with `sendfile(2)` on plain `http://`.
//!
//! `/rooms/{room}/ws` is a WebSocket route of the router: the `WebSocketUpgrade` extractor
//! (feature `axum`) hands the connection to the endpoint named `chat`, with who the socket
//! is (the `x-user` header here, an app's session in earnest) attached before `on_open` and a
//! `user:NAME` key that `brisk::ws::send_to` reaches on every worker.

use std::path::PathBuf;
use std::process::ExitCode;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use brisk::http::static_files::StaticFiles;
use brisk::http::HttpServer;
use brisk::jwt::Jwt;
use brisk::ws::{EndpointName, Message, WebSocketUpgrade, WsEndpoint};
use brisk::App;
use clap::Parser;
use serde::{Deserialize, Serialize};

/// Command line: the example's settings, then a control command (`start`, `stop`, `status`, …).
#[derive(Debug, Parser)]
#[command(
    name = "axum",
    about = "An axum Router served by Brisk's master and workers"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8090")]
    listen: String,
    /// Worker processes.
    #[arg(long, global = true, default_value_t = 2)]
    workers: usize,
    /// Largest request body in bytes; over it: 413.
    #[arg(long, global = true, default_value_t = 1024 * 1024)]
    max_body_size: usize,
    /// Serve the files under this directory at `/static/`.
    #[arg(long, global = true)]
    static_dir: Option<PathBuf>,
    /// Also serve the echo endpoint on its own `websocket://` listener (the plain way, to
    /// compare with the router's `/echo/ws`).
    #[arg(long, global = true)]
    echo_listen: Option<String>,
    /// Also serve the fan-out endpoint on its own `websocket://` listener (to compare with
    /// the router's `/fanout/ws`).
    #[arg(long, global = true)]
    fanout_listen: Option<String>,
    /// The chat's users prove who they are with an HS256 token signed with the secret in
    /// this file (`Authorization: Bearer`; its `sub` is the user) instead of `x-user`.
    #[arg(long, global = true)]
    jwt_secret_file: Option<PathBuf>,
    /// Directory for the pid file, control socket and daemon log.
    #[arg(long, global = true, default_value = "run")]
    run_dir: PathBuf,
    #[command(subcommand)]
    command: brisk::Command,
}

/// `GET /users/{id}`: the id, and which worker process answered.
#[derive(Debug, Serialize)]
struct User {
    id: u64,
    worker: u32,
}

/// `GET /query?name=…`
#[derive(Debug, Deserialize)]
struct Greeting {
    name: String,
}

/// Who a chat socket is: attached by the upgrade route, read by every callback.
struct Member {
    user: String,
    room: String,
}

/// The endpoints the routes open sockets into, with the data each socket carries.
const CHAT: EndpointName<Member> = EndpointName::new("chat");
const ECHO: EndpointName = EndpointName::new("echo");
const FANOUT: EndpointName = EndpointName::new("fanout");

/// The chat endpoint: a socket joins its room's group and says so; what it sends goes to
/// everyone in the room, on every worker, as `USER: TEXT`.
fn chat() -> WsEndpoint<Member> {
    let who =
        |ws: &brisk::ws::WsConnection<Member>| ws.with_data(|m| (m.user.clone(), m.room.clone()));
    WsEndpoint::new()
        .data::<Member>()
        .on_open(move |ws, _| async move {
            let Some((user, room)) = who(&ws) else { return };
            ws.join(&format!("room:{room}"));
            let _ = ws.send_text(format!(
                "welcome {user} to {room} (worker {})",
                std::process::id()
            ));
        })
        .on_message(move |ws, msg| async move {
            let (Some((user, room)), Message::Text(text)) = (who(&ws), msg) else {
                return;
            };
            let line = Message::text(format!("{user}: {}", text.as_str()));
            brisk::ws::broadcast(&format!("room:{room}"), line);
        })
}

/// An echo: what a socket sends comes back.
fn echo() -> WsEndpoint {
    WsEndpoint::new().on_message(|ws, msg| async move { ws.send(msg) })
}

/// A fan-out: every socket joins one group, and what any sends goes to all of them, on every
/// worker (`brisk-bench ws --mode broadcast`'s server).
fn fanout() -> WsEndpoint {
    WsEndpoint::new()
        .on_open(|ws, _| async move { ws.join("fanout") })
        .on_message(|_, msg| async move {
            brisk::ws::broadcast("fanout", msg);
        })
}

/// The claims the example reads from a token: who the user is.
#[derive(Deserialize)]
struct TokenClaims {
    sub: String,
}

/// Who is asking: with `--jwt-secret-file`, the `sub` of the HS256 token in
/// `Authorization: Bearer`; otherwise the `x-user` header. Or why not: the routes answer it
/// with 401.
fn who(headers: &HeaderMap, jwt: &Option<Jwt>) -> Result<String, String> {
    match jwt {
        Some(jwt) => {
            let token = brisk::jwt::bearer(headers)
                .ok_or_else(|| "a bearer token, please\n".to_string())?;
            jwt.verify::<TokenClaims>(token)
                .map(|claims| claims.sub)
                .map_err(|e| format!("{e}\n"))
        }
        None => headers
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| "who are you? (an x-user header)\n".to_string()),
    }
}

/// `GET /rooms/{room}/ws`: a chat socket for the user [`who`] finds.
async fn join_room(
    State(jwt): State<Option<Jwt>>,
    Path(room): Path<String>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> impl IntoResponse {
    let user = match who(&headers, &jwt) {
        Ok(user) => user,
        Err(why) => return (StatusCode::UNAUTHORIZED, why).into_response(),
    };
    ws.key(format!("user:{user}"))
        .on_with(CHAT, Member { user, room })
}

/// `GET /rooms/{room}/events`: what the room's sockets get, and what is sent to the user
/// [`who`] finds, as server-sent events; kicking the user ends it.
async fn room_events(
    State(jwt): State<Option<Jwt>>,
    Path(room): Path<String>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let user = match who(&headers, &jwt) {
        Ok(user) => user,
        Err(why) => return (StatusCode::UNAUTHORIZED, why).into_response(),
    };
    brisk::ws::event_stream(&[format!("room:{room}")], &[format!("user:{user}")]).into_response()
}

/// A plain axum router (nothing but its WebSocket routes knows about Brisk), with `files` at
/// `/static/`; `jwt` checks who the chat's users are.
fn router(files: Option<StaticFiles>, jwt: Option<Jwt>) -> Router {
    let router = Router::<Option<Jwt>>::new()
        .route("/", get(|| async { "Hello from axum on Brisk" }))
        .route(
            "/users/{id}",
            get(|Path(id): Path<u64>| async move {
                Json(User {
                    id,
                    worker: std::process::id(),
                })
            }),
        )
        .route(
            "/echo",
            post(|Json(body): Json<serde_json::Value>| async move { Json(body) }),
        )
        .route(
            "/query",
            get(|Query(q): Query<Greeting>| async move { format!("Hello, {}!", q.name) }),
        )
        .route(
            "/whoami",
            get(
                |ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>| async move {
                    format!("{peer}\n")
                },
            ),
        )
        .route("/rooms/{room}/ws", get(join_room))
        .route("/rooms/{room}/events", get(room_events))
        .route(
            "/echo/ws",
            get(|ws: WebSocketUpgrade| async move { ws.on(ECHO) }),
        )
        .route(
            "/fanout/ws",
            get(|ws: WebSocketUpgrade| async move { ws.on(FANOUT) }),
        )
        .route(
            "/users/{user}/kick",
            post(|Path(user): Path<String>| async move {
                brisk::ws::close_where(&format!("user:{user}"), 4003, "removed from the chat");
                "closed\n"
            }),
        )
        .route(
            "/users/{user}/notify",
            post(|Path(user): Path<String>, text: String| async move {
                brisk::ws::send_to(&format!("user:{user}"), Message::text(text));
                "sent\n"
            }),
        )
        .with_state(jwt);
    match files {
        Some(files) => router.nest_service("/static", files),
        None => router,
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let files = match args.static_dir.as_deref().map(StaticFiles::new).transpose() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("axum: --static-dir: {e}");
            return ExitCode::FAILURE;
        }
    };
    let jwt = match args
        .jwt_secret_file
        .as_deref()
        .map(std::fs::read)
        .transpose()
    {
        Ok(secret) => match secret.map(|s| Jwt::hs256(s.trim_ascii())).transpose() {
            Ok(jwt) => jwt,
            Err(e) => {
                eprintln!("axum: --jwt-secret-file: {e}");
                return ExitCode::FAILURE;
            }
        },
        Err(e) => {
            eprintln!("axum: --jwt-secret-file: {e}");
            return ExitCode::FAILURE;
        }
    };
    let server = match HttpServer::new(&args.listen) {
        Ok(server) => server
            .workers(args.workers)
            .max_body_size(args.max_body_size)
            .ws_endpoint(CHAT, chat())
            .ws_endpoint(ECHO, echo())
            .ws_endpoint(FANOUT, fanout())
            .service(router(files, jwt)),
        Err(e) => {
            eprintln!("axum: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut app = App::new("axum").run_dir(args.run_dir).server(server);
    if let Some(address) = &args.echo_listen {
        match brisk::ws::WsServer::new(address) {
            Ok(plain) => app = app.server(plain.workers(args.workers).endpoint(echo())),
            Err(e) => {
                eprintln!("axum: --echo-listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(address) = &args.fanout_listen {
        match brisk::ws::WsServer::new(address) {
            Ok(plain) => app = app.server(plain.workers(args.workers).endpoint(fanout())),
            Err(e) => {
                eprintln!("axum: --fanout-listen: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    app.run_command(args.command)
}
