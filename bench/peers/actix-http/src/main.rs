//! The lab's actix-http peer: TechEmpower's database tests on actix-http + tokio-postgres.
//!
//! Environment: `PORT` (default 8080), `WORKERS` (worker threads, default 1), `DATABASE_URL`
//! (without it the database routes answer 503). Each worker thread opens one PostgreSQL
//! connection when it starts, prepares its statements once, and pipelines the queries of every
//! request it serves on that connection (tokio-postgres sends the queries of futures polled
//! together without waiting for each answer), as TechEmpower's actix-http entry does.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use actix_http::header::{HeaderValue, CONTENT_TYPE, SERVER};
use actix_http::{HttpService, KeepAlive, Request, Response, StatusCode};
use actix_server::Server;
use actix_service::{Service, ServiceFactory};
use bytes::Bytes;
use futures_util::future::try_join_all;
use sailfish::TemplateSimple;
use serde::Serialize;
use tokio_postgres::{Client, NoTls, Statement};

const WORLD_ROWS: u32 = 10_000;
const MAX_QUERIES: usize = 500;

#[derive(Serialize, Clone, Copy)]
struct World {
    id: i32,
    #[serde(rename = "randomNumber")]
    random_number: i32,
}

struct Fortune {
    id: i32,
    message: String,
}

/// Sailfish escapes `message` for HTML.
#[derive(TemplateSimple)]
#[template(path = "fortunes.stpl")]
struct FortunesPage<'a> {
    fortunes: &'a [Fortune],
}

/// One worker thread's connection and its prepared statements.
struct Database {
    client: Client,
    world: Statement,
    fortunes: Statement,
    update: Statement,
    top: Statement,
    /// The World table by id - 1, read on the first `/cached-queries`.
    cache: RefCell<Option<Rc<Vec<World>>>>,
}

impl Database {
    async fn connect(url: &str) -> Result<Database, tokio_postgres::Error> {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
        actix_rt::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("peer-actix-http: database connection: {e}");
            }
        });
        let world = client
            .prepare("SELECT id, randomnumber FROM world WHERE id = $1")
            .await?;
        let fortunes = client.prepare("SELECT id, message FROM fortune").await?;
        // All pairs in one statement; the ids are sorted so that concurrent updates take the
        // rows' locks in one order.
        let update = client
            .prepare(
                "UPDATE world SET randomnumber = v.r \
                 FROM unnest($1::int[], $2::int[]) AS v(id, r) WHERE world.id = v.id",
            )
            .await?;
        let top = client
            .prepare("SELECT id, randomnumber FROM world ORDER BY id LIMIT 5")
            .await?;
        Ok(Database {
            client,
            world,
            fortunes,
            update,
            top,
            cache: RefCell::new(None),
        })
    }

    async fn world(&self, id: i32) -> Result<World, tokio_postgres::Error> {
        let row = self.client.query_one(&self.world, &[&id]).await?;
        Ok(World {
            id: row.get(0),
            random_number: row.get(1),
        })
    }

    /// `n` random rows, one SELECT each, all sent before the first answer is read.
    async fn worlds(&self, n: usize) -> Result<Vec<World>, tokio_postgres::Error> {
        try_join_all((0..n).map(|_| self.world(random_id()))).await
    }

    async fn updates(&self, n: usize) -> Result<Vec<World>, tokio_postgres::Error> {
        let mut worlds = self.worlds(n).await?;
        // A row drawn twice keeps its last number, in the answer too.
        let mut last = std::collections::HashMap::with_capacity(worlds.len());
        for w in &worlds {
            last.insert(w.id, random_id());
        }
        for w in &mut worlds {
            w.random_number = last[&w.id];
        }
        let mut pairs: Vec<(i32, i32)> = last.into_iter().collect();
        pairs.sort_unstable();
        let ids: Vec<i32> = pairs.iter().map(|p| p.0).collect();
        let numbers: Vec<i32> = pairs.iter().map(|p| p.1).collect();
        self.client.execute(&self.update, &[&ids, &numbers]).await?;
        Ok(worlds)
    }

    /// `n` random rows from the in-memory copy of the table.
    async fn cached(&self, n: usize) -> Result<Vec<World>, tokio_postgres::Error> {
        let table = self.cache.borrow().clone();
        let table = match table {
            Some(t) => t,
            None => {
                let rows = self
                    .client
                    .query("SELECT id, randomnumber FROM world ORDER BY id", &[])
                    .await?;
                let t: Rc<Vec<World>> = Rc::new(
                    rows.iter()
                        .map(|r| World {
                            id: r.get(0),
                            random_number: r.get(1),
                        })
                        .collect(),
                );
                *self.cache.borrow_mut() = Some(t.clone());
                t
            }
        };
        Ok((0..n)
            .filter_map(|_| table.get(random_id() as usize - 1).copied())
            .collect())
    }

    /// Report R5's request: two rows by id, then the first five rows, one after another.
    async fn r5(&self) -> Result<serde_json::Value, tokio_postgres::Error> {
        let first = self.world(random_id()).await?;
        let second = self.world(random_id()).await?;
        let top: Vec<World> = self
            .client
            .query(&self.top, &[])
            .await?
            .iter()
            .map(|r| World {
                id: r.get(0),
                random_number: r.get(1),
            })
            .collect();
        Ok(serde_json::json!({ "first": first, "second": second, "top": top }))
    }

    async fn fortunes(&self) -> Result<String, String> {
        let rows = self
            .client
            .query(&self.fortunes, &[])
            .await
            .map_err(|e| e.to_string())?;
        let mut fortunes: Vec<Fortune> = rows
            .iter()
            .map(|r| Fortune {
                id: r.get(0),
                message: r.get(1),
            })
            .collect();
        fortunes.push(Fortune {
            id: 0,
            message: "Additional fortune added at request time.".into(),
        });
        fortunes.sort_by(|a, b| a.message.cmp(&b.message));
        FortunesPage {
            fortunes: &fortunes,
        }
        .render_once()
        .map_err(|e| e.to_string())
    }
}

thread_local! {
    static RANDOM: Cell<u64> = Cell::new(0x9E37_79B9_7F4A_7C15 ^ std::process::id() as u64);
}

/// A random id in 1..=10,000 (xorshift64*, one state per thread).
fn random_id() -> i32 {
    RANDOM.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32;
        (1 + (r % WORLD_ROWS as u64)) as i32
    })
}

/// The row count a request asks for in `name`: missing, empty, not a number or under 1 → 1;
/// over 500 → 500.
fn count(query: Option<&str>, name: &str) -> usize {
    let value = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='));
    match value.and_then(|v| v.parse::<i64>().ok()) {
        Some(n) if n > MAX_QUERIES as i64 => MAX_QUERIES,
        Some(n) if n >= 1 => n as usize,
        _ => 1,
    }
}

fn respond(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Bytes> {
    let mut r = Response::with_body(status, body);
    let h = r.headers_mut();
    h.insert(SERVER, HeaderValue::from_static("actix-http"));
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json<T: Serialize>(value: &T) -> Response<Bytes> {
    match serde_json::to_vec(value) {
        Ok(body) => respond(StatusCode::OK, "application/json", body.into()),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn failure(status: StatusCode, message: &str) -> Response<Bytes> {
    let body = serde_json::json!({ "error": message }).to_string();
    respond(status, "application/json", body.into())
}

/// One worker thread's request handler.
struct App {
    db: Option<Rc<Database>>,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Bytes>, Infallible>>>>;

impl Service<Request> for App {
    type Response = Response<Bytes>;
    type Error = Infallible;
    type Future = Answer;

    actix_service::always_ready!();

    fn call(&self, req: Request) -> Answer {
        let path = req.path();
        let query = req.uri().query();
        let simple = match path {
            "/" => Some(respond(
                StatusCode::OK,
                "text/plain",
                Bytes::from_static(b"Hello, World!"),
            )),
            "/json" => Some(json(&serde_json::json!({ "message": "Hello, World!" }))),
            "/db" | "/queries" | "/fortunes" | "/updates" | "/cached-queries" | "/r5" => None,
            _ => Some(failure(StatusCode::NOT_FOUND, "not found")),
        };
        if let Some(r) = simple {
            return Box::pin(async move { Ok(r) });
        }
        let Some(db) = self.db.clone() else {
            return Box::pin(async {
                Ok(failure(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "DATABASE_URL is not set",
                ))
            });
        };
        let route = path.to_owned();
        let n = count(query, "queries");
        let cached = count(query, "count");
        Box::pin(async move {
            let answer = match route.as_str() {
                "/db" => db.world(random_id()).await.map(|w| json(&w)),
                "/queries" => db.worlds(n).await.map(|w| json(&w)),
                "/updates" => db.updates(n).await.map(|w| json(&w)),
                "/cached-queries" => db.cached(cached).await.map(|w| json(&w)),
                "/r5" => db.r5().await.map(|v| json(&v)),
                _ => {
                    return Ok(match db.fortunes().await {
                        Ok(html) => {
                            respond(StatusCode::OK, "text/html; charset=utf-8", html.into())
                        }
                        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, &e),
                    })
                }
            };
            Ok(answer
                .unwrap_or_else(|e| failure(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())))
        })
    }
}

/// Makes each worker thread's [`App`], connecting that thread's database first.
#[derive(Clone)]
struct AppFactory {
    database_url: Option<Rc<str>>,
}

impl ServiceFactory<Request> for AppFactory {
    type Response = Response<Bytes>;
    type Error = Infallible;
    type Config = ();
    type Service = App;
    type InitError = ();
    type Future = Pin<Box<dyn Future<Output = Result<App, ()>>>>;

    fn new_service(&self, _: ()) -> Self::Future {
        let url = self.database_url.clone();
        Box::pin(async move {
            let db = match url {
                None => None,
                Some(url) => match Database::connect(&url).await {
                    Ok(db) => Some(Rc::new(db)),
                    Err(e) => {
                        eprintln!("peer-actix-http: DATABASE_URL: {e:?}");
                        return Err(());
                    }
                },
            };
            Ok(App { db })
        })
    }
}

fn main() -> std::io::Result<()> {
    if std::env::args().any(|a| a == "--version") {
        println!("peer-actix-http ({})", env!("PEER_VERSIONS"));
        return Ok(());
    }
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(8080);
    let workers: usize = std::env::var("WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(1);
    let database_url = std::env::var("DATABASE_URL").ok();
    actix_rt::System::new().block_on(async move {
        Server::build()
            .backlog(1024)
            .workers(workers)
            .bind("peer", ("127.0.0.1", port), move || {
                let factory = AppFactory {
                    database_url: database_url.as_deref().map(Rc::from),
                };
                HttpService::build()
                    .keep_alive(KeepAlive::Os)
                    .client_request_timeout(std::time::Duration::ZERO)
                    .h1(factory)
                    .tcp()
            })?
            .run()
            .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_bounds() {
        assert_eq!(count(None, "queries"), 1);
        assert_eq!(count(Some("queries="), "queries"), 1);
        assert_eq!(count(Some("queries=foo"), "queries"), 1);
        assert_eq!(count(Some("queries=0"), "queries"), 1);
        assert_eq!(count(Some("queries=20"), "queries"), 20);
        assert_eq!(count(Some("queries=501"), "queries"), 500);
    }

    #[test]
    fn random_ids_in_range() {
        for _ in 0..100_000 {
            assert!((1..=10_000).contains(&random_id()));
        }
    }
}
