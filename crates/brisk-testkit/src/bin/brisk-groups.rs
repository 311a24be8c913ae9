//! A Brisk app for the tests of group spaces (`tests/group_spaces.rs`): an app that trusts its
//! clients with names, beside the channel protocol.
//!
//! `--http ADDR` serves:
//! - `GET /room?group=NAME&key=KEY` (a WebSocket): the socket joins the app's group `NAME`
//!   and is tagged with the app's key `KEY`, each as the client wrote it (either may be left
//!   out), then is sent `joined`; each text message it sends is broadcast to `NAME`.
//! - `/connection/websocket`: the channel protocol; every client connects as user `guest`, and
//!   the namespace `secret` lets no connected user subscribe (a token is needed).
//! - `POST /publish?channel=C`: publishes `{"secret":true}` to channel `C` (`published`, or
//!   the channel error with 400).
//! - `POST /disconnect?user=U`: disconnects channel user `U` with 4001 (`disconnected N`).

use std::process::ExitCode;

use brisk::channels::Session;
use brisk::channels::{Access, Channels, Namespace, Subject};
use brisk::http::{Body, HttpServer, RequestBody};
use brisk::ws::WsEndpoint;
use brisk::App;

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// The value of `name` in `query`, percent-decoded.
fn param(query: &str, name: &str) -> Option<String> {
    let value = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)?
        .1;
    let decoded = percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .ok()?;
    Some(decoded.into_owned())
}

/// What a socket of `/room` asked for.
struct Asked {
    group: Option<String>,
    key: Option<String>,
}

/// The app's room endpoint: joins and tags as its client says.
fn rooms() -> WsEndpoint<Asked> {
    WsEndpoint::new()
        .data::<Asked>()
        .on_open(|ws, handshake| async move {
            let query = handshake.path.split_once('?').map_or("", |(_, q)| q);
            let asked = Asked {
                group: param(query, "group"),
                key: param(query, "key"),
            };
            if let Some(group) = &asked.group {
                ws.join(group);
            }
            if let Some(key) = &asked.key {
                ws.tag(key);
            }
            ws.set_data(asked);
            ws.send_text("joined")
        })
        .on_message(|ws, msg| async move {
            if let Some(Some(group)) = ws.with_data(|a| a.group.clone()) {
                brisk::ws::broadcast(&group, msg);
            }
        })
}

fn channels() -> Channels {
    Channels::authenticate(|_token| async move { Ok(Subject::new("guest")) })
        .namespace("secret", Namespace::new().subscribe(Access::Token))
}

/// Answers `status` with `text`.
fn answer(status: u16, text: String) -> http::Response<Body> {
    let mut r = http::Response::new(Body::from(text));
    *r.status_mut() = http::StatusCode::from_u16(status).expect("a status");
    r
}

async fn route(
    req: http::Request<RequestBody>,
    rooms: WsEndpoint<Asked>,
    channels: Channels,
    protocol: WsEndpoint<Session>,
) -> http::Response<Body> {
    let query = req.uri().query().unwrap_or("").to_owned();
    match req.uri().path() {
        "/room" => rooms.upgrade(req),
        "/connection/websocket" => protocol.upgrade(req),
        "/publish" => {
            let channel = param(&query, "channel").unwrap_or_default();
            let data = serde_json::value::RawValue::from_string(r#"{"secret":true}"#.into())
                .expect("JSON");
            match channels.publish(&channel, &data).await {
                Ok(_) => answer(200, "published".into()),
                Err(e) => answer(400, e.to_string()),
            }
        }
        "/disconnect" => {
            let user = param(&query, "user").unwrap_or_default();
            match channels.disconnect(&user, 4001, "disconnected") {
                Ok(n) => answer(200, format!("disconnected {n}")),
                Err(e) => answer(400, e.to_string()),
            }
        }
        _ => answer(404, "no such route".into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let command = match args.last().map(String::as_str) {
        Some("start") => brisk::Command::Start { daemon: false },
        Some("stop") => brisk::Command::Stop { graceful: false },
        Some("status") => brisk::Command::Status { json: false },
        Some("--json") => brisk::Command::Status { json: true },
        _ => {
            eprintln!("usage: brisk-groups --http ADDR [--run-dir D] start|stop|status [--json]");
            return ExitCode::from(2);
        }
    };
    let address = flag(&args, "--http").unwrap_or_else(|| "http://127.0.0.1:8095".into());
    let run_dir = flag(&args, "--run-dir").unwrap_or_else(|| "run".into());
    // Made once in each worker (where the app is built), as an app makes its endpoints.
    let (rooms, channels) = (rooms(), channels());
    let protocol = channels.endpoint();
    let server = HttpServer::new(&address)
        .expect("an http:// address")
        .workers(1)
        .handler(move |req| route(req, rooms.clone(), channels.clone(), protocol.clone()));
    App::new("brisk-groups")
        .run_dir(run_dir)
        .server(server)
        .run_command(command)
}
