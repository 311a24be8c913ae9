//! What the PostgreSQL driver's tests share: their options, and a fake PostgreSQL server for
//! what a real one never does (each test file uses some of it).
#![allow(dead_code)]

use std::time::Duration;

use brisk::db::{DbError, Postgres as Pg, PostgresOptions};
use brisk_testkit::*;

/// A fake PostgreSQL server on a loopback port, for what a real one never does: it answers
/// the `SSLRequest` (TLS with `cert` and `key` if given, else `N`), reads the start-up
/// message, sends `script` (raw backend messages), then reads until the client closes.
/// It serves connections until dropped.
pub(crate) struct FakePostgres {
    pub(crate) port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakePostgres {
    pub(crate) fn start(
        tls: Option<(rcgen::Certificate, rcgen::KeyPair)>,
        script: Vec<u8>,
    ) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let tls = tls.map(|(cert, key)| {
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let key = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert.der().clone()], key)
                .unwrap();
            std::sync::Arc::new(config)
        });
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let serve = move |mut tcp: std::net::TcpStream| -> std::io::Result<()> {
            tcp.set_nonblocking(false)?;
            tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
            let mut ssl_request = [0u8; 8];
            tcp.read_exact(&mut ssl_request)?;
            let mut stream: Box<dyn ReadWrite> = match &tls {
                Some(config) => {
                    tcp.write_all(b"S")?;
                    let conn = rustls::ServerConnection::new(config.clone()).unwrap();
                    Box::new(rustls::StreamOwned::new(conn, tcp))
                }
                None => {
                    tcp.write_all(b"N")?;
                    Box::new(tcp)
                }
            };
            let mut len = [0u8; 4];
            stream.read_exact(&mut len)?;
            let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
            stream.read_exact(&mut startup)?;
            stream.write_all(&script)?;
            stream.flush()?;
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
            Ok(())
        };
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((tcp, _)) => {
                        let _ = serve(tcp);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        FakePostgres {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakePostgres {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub(crate) trait ReadWrite: std::io::Read + std::io::Write {}
impl<T: std::io::Read + std::io::Write> ReadWrite for T {}

/// A backend message: its type byte, its length, its body.
pub(crate) fn backend(kind: u8, body: &[u8]) -> Vec<u8> {
    let len = (body.len() + 4) as u32;
    [&[kind][..], &len.to_be_bytes(), body].concat()
}

/// The server's side of a new connection on `listener`: refuses TLS, takes the start-up
/// message and says the client is in (no password asked) and ready.
pub(crate) fn accept_unauthenticated(listener: &std::net::TcpListener) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let (mut tcp, _) = listener.accept().unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut ssl_request = [0u8; 8];
    tcp.read_exact(&mut ssl_request).unwrap();
    tcp.write_all(b"N").unwrap();
    let mut len = [0u8; 4];
    tcp.read_exact(&mut len).unwrap();
    let mut startup = vec![0u8; u32::from_be_bytes(len) as usize - 4];
    tcp.read_exact(&mut startup).unwrap();
    let ok = [backend(b'R', &0u32.to_be_bytes()), backend(b'Z', b"I")].concat();
    tcp.write_all(&ok).unwrap();
    tcp
}

/// Reads the client's messages up to its `syncs`-th `Sync`.
pub(crate) fn read_syncs(tcp: &mut std::net::TcpStream, syncs: usize) {
    use std::io::Read;
    let mut seen = 0;
    while seen < syncs {
        let mut head = [0u8; 5];
        tcp.read_exact(&mut head).unwrap();
        let size = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize - 4;
        tcp.read_exact(&mut vec![0u8; size]).unwrap();
        seen += usize::from(head[0] == b'S');
    }
}

/// Reads the client's next message, which must be a simple query.
pub(crate) fn read_simple_query(tcp: &mut std::net::TcpStream) {
    use std::io::Read;
    let mut head = [0u8; 5];
    tcp.read_exact(&mut head).unwrap();
    assert_eq!(head[0], b'Q', "a simple query");
    let size = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize - 4;
    tcp.read_exact(&mut vec![0u8; size]).unwrap();
}

/// The answer to preparing a statement of one int parameter and `columns` int columns
/// (none: it returns no rows).
pub(crate) fn prepared_int_statement(columns: i16) -> Vec<u8> {
    let params = [&1i16.to_be_bytes()[..], &23u32.to_be_bytes()].concat();
    let description = if columns == 0 {
        backend(b'n', b"")
    } else {
        let field = [
            &b"n\0"[..],
            &[0; 6],
            &23u32.to_be_bytes(),
            &4i16.to_be_bytes(),
            &[0; 6],
        ]
        .concat();
        let fields = (0..columns).flat_map(|_| field.iter().copied());
        let body: Vec<u8> = columns.to_be_bytes().into_iter().chain(fields).collect();
        backend(b'T', &body)
    };
    [
        backend(b'1', b""),
        backend(b't', &params),
        description,
        backend(b'Z', b"I"),
    ]
    .concat()
}

/// Waits until the fake server says it has read `what`.
pub(crate) async fn server_read(said: &mut tokio::sync::mpsc::UnboundedReceiver<()>, what: &str) {
    let read = tokio::time::timeout(Duration::from_secs(10), said.recv()).await;
    assert!(matches!(read, Ok(Some(()))), "{what} never came");
}

/// The connection error a query on a server at `port` fails with.
pub(crate) fn connect_error(port: u16) -> String {
    let url = format!("postgres://brisk:pw@127.0.0.1:{port}/brisk");
    let options = PostgresOptions {
        connect_timeout: Duration::from_secs(2),
        ..options()
    };
    let db = Pg::new(&url, options).unwrap();
    match worker_runtime().block_on(db.query("SELECT 1", vec![])) {
        Err(DbError::Unavailable(why)) => why,
        other => panic!("{other:?}"),
    }
}

pub(crate) fn options() -> PostgresOptions {
    PostgresOptions {
        query_timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Runs `sql` (statements separated by `;`) in one transaction on `db`.
pub(crate) async fn in_transaction(db: &Pg, sql: &str) -> Result<(), DbError> {
    let mut tx = brisk::db::Db::Postgres(db.clone()).begin().await?;
    tx.execute_batch(sql).await?;
    tx.commit().await
}
