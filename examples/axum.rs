//! An axum `Router`, unchanged, on Brisk's process model: `HttpServer::service(router)` hands
//! every request to the router inside a worker process, so the master, the workers, the limits
//! and the control CLI are Brisk's while the routes, extractors and rejections are axum's.
//!
//! ```text
//! cargo run -p brisk --example axum -- start          # http://127.0.0.1:8090, 2 workers
//! cargo run -p brisk --example axum -- --listen http://127.0.0.1:9000 --workers 4 start -d
//! cargo run -p brisk --example axum -- status
//! cargo run -p brisk --example axum -- stop
//!
//! curl http://127.0.0.1:8090/                       # Hello from axum on Brisk
//! curl http://127.0.0.1:8090/users/42               # {"id":42,"worker":<worker pid>}
//! curl -d '{"a":1}' -H 'content-type: application/json' http://127.0.0.1:8090/echo
//! curl 'http://127.0.0.1:8090/query?name=Ada'       # Hello, Ada!
//!
//! cargo run -p brisk --example axum -- --static-dir ./public start
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

use std::path::PathBuf;
use std::process::ExitCode;

use axum::extract::{Path, Query};
use axum::routing::{get, post};
use axum::{Json, Router};
use brisk::http::static_files::StaticFiles;
use brisk::http::HttpServer;
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

/// A plain axum router (nothing in it knows about Brisk), with `files` at `/static/`.
fn router(files: Option<StaticFiles>) -> Router {
    let router = Router::new()
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
        );
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
    let server = match HttpServer::new(&args.listen) {
        Ok(server) => server
            .workers(args.workers)
            .max_body_size(args.max_body_size)
            .service(router(files)),
        Err(e) => {
            eprintln!("axum: {e}");
            return ExitCode::FAILURE;
        }
    };
    App::new("axum")
        .run_dir(args.run_dir)
        .server(server)
        .run_command(args.command)
}
