//! What the fuzz targets run of the PostgreSQL client (feature `fuzzing`): start-up against a
//! server that sends arbitrary bytes, and an answer's messages read within limits and
//! decoded (as one run, and as several).

use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::Message;
use tokio::io::AsyncWriteExt;
use tokio_postgres::types::Type;

use super::postgres_answer::{convert_row, outcomes, rows_of_runs, Prepared};
use super::postgres_message::next_message;
use super::postgres_startup::start_session;
use super::postgres_tls::Opened;
use super::postgres_types::decode;
use super::postgres_wire::Answer;

/// Start-up (authentication, settings) against a server whose bytes are `data`, then the
/// end of the stream: it fails or succeeds without a panic or a hang, and succeeds only if
/// the server said `AuthenticationOk` and then `ReadyForQuery`.
pub(crate) fn startup(data: &[u8]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        // Room for everything the client may write back (a few dozen bytes per message).
        let (client, mut server) = tokio::io::duplex(32 * data.len() + 64 * 1024);
        server.write_all(data).await.expect("the server's bytes");
        server.shutdown().await.expect("the server's end of stream");
        let config: tokio_postgres::Config = "postgres://u:pw@h/db".parse().expect("a URL");
        let started = start_session(Opened::plain(client), &config, Duration::ZERO).await;
        if started.is_ok() {
            let ok = [b'R', 0, 0, 0, 8, 0, 0, 0, 0];
            let at = data
                .windows(ok.len())
                .position(|w| w == ok)
                .expect("a session started without AuthenticationOk");
            assert!(
                data[at..].contains(&b'Z'),
                "a session started without ReadyForQuery"
            );
        }
        drop(server);
    });
}

/// The column types the fuzzer picks from to decode a row's values.
const TYPES: [Type; 16] = [
    Type::BOOL,
    Type::INT2,
    Type::INT4,
    Type::INT8,
    Type::FLOAT4,
    Type::FLOAT8,
    Type::NUMERIC,
    Type::TEXT,
    Type::BYTEA,
    Type::UUID,
    Type::JSONB,
    Type::DATE,
    Type::TIMESTAMP,
    Type::TIMESTAMPTZ,
    Type::INT4_ARRAY,
    Type::TEXT_ARRAY,
];

/// An answer's bytes (`data` after its first byte) read in pieces of a size the first byte
/// gives, with a limit of 4 KiB per message: the messages read are the same however the
/// stream is cut, the buffer never grows far past the limit (a header announcing more
/// fails at once), and every row's values decode or fail without a panic, as do the
/// answer's outcomes, read as one run and as several.
pub(crate) fn answer(data: &[u8]) {
    let Some((&pick, stream)) = data.split_first() else {
        return;
    };
    const MAX: usize = 4096;
    let whole = read(stream, stream.len().max(1), MAX);
    let cut = read(stream, usize::from(pick % 64) + 1, MAX);
    let kinds = |r: &Read| r.messages.iter().map(|(_, size)| *size).collect::<Vec<_>>();
    assert_eq!(
        kinds(&cut),
        kinds(&whole),
        "cut differently, read differently"
    );
    assert_eq!(
        cut.failed, whole.failed,
        "cut differently, failed differently"
    );
    assert!(
        cut.largest_buffer <= 4 * MAX + 64,
        "the buffer grew to {} bytes under a limit of {MAX}",
        cut.largest_buffer
    );
    let mut messages = Vec::new();
    for (message, _) in whole.messages {
        if let Message::DataRow(row) = &message {
            let mut ranges = row.ranges();
            let mut column = usize::from(pick);
            while let Ok(Some(range)) = ranges.next() {
                column += 1;
                if let Some(range) = range {
                    let ty = &TYPES[column % TYPES.len()];
                    let _ = decode(ty, &row.buffer()[range], "c");
                }
            }
        }
        messages.push(message);
    }
    let _ = outcomes(
        Answer {
            messages,
            status: b'I',
            ends: Vec::new(),
        },
        Duration::from_secs(1),
    );
    // The same messages as the answer of several runs, one ending every few messages.
    let messages: Vec<Message> = cut.messages.into_iter().map(|(m, _)| m).collect();
    let every = usize::from(pick % 5) + 1;
    let ends: Vec<usize> = (every..messages.len()).step_by(every).collect();
    let runs = ends.len() + 1;
    let answer = Answer {
        messages,
        status: b'I',
        ends,
    };
    // Rows of two columns whose types the first byte picks.
    let types: Vec<Type> = (0..2)
        .map(|i| TYPES[(usize::from(pick) + i) % TYPES.len()].clone())
        .collect();
    let prepared = Prepared::of_columns(types);
    assert_eq!(
        rows_of_runs(&answer, &prepared, Duration::from_secs(1), &mut convert_row)
            .0
            .len(),
        runs
    );
}

/// What reading a stream gave.
struct Read {
    messages: Vec<(Message, usize)>,
    failed: bool,
    largest_buffer: usize,
}

/// `stream` read `piece` bytes at a time with a limit of `max` bytes per message.
fn read(stream: &[u8], piece: usize, max: usize) -> Read {
    let mut input = BytesMut::new();
    let mut read = Read {
        messages: Vec::new(),
        failed: false,
        largest_buffer: 0,
    };
    for chunk in stream.chunks(piece) {
        input.extend_from_slice(chunk);
        loop {
            read.largest_buffer = read.largest_buffer.max(input.capacity());
            match next_message(&mut input, max) {
                Ok(Some(m)) => read.messages.push(m),
                Ok(None) => break,
                Err(_) => {
                    read.failed = true;
                    return read;
                }
            }
        }
    }
    read.largest_buffer = read.largest_buffer.max(input.capacity());
    read
}
