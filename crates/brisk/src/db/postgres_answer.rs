//! What the PostgreSQL driver makes of an answer: a prepared statement's shape
//! ([`Prepared`]), the `Bind`/`Execute` of a run's parameters, each query's rows and count
//! ([`Outcome`]), rows read in place, and the server's errors as [`DbError`]s.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{DataRowBody, ErrorResponseBody, Message};
use postgres_protocol::message::frontend::{self, BindError};
use tokio_postgres::types::Type;

use super::error::DbError;
use super::postgres_types;
use super::postgres_wire::{self, Answer};
use super::row::Row;
use super::row_view::RowView;
use super::value::Value;

/// A statement prepared on one connection: its name there, how many parameters it takes,
/// its columns' names and types.
#[derive(Clone)]
pub(super) struct Prepared {
    pub(super) name: Arc<str>,
    /// The type the server gave each parameter (`$1`, `$2`…).
    pub(super) params: Arc<[Type]>,
    pub(super) columns: Arc<[String]>,
    pub(super) types: Arc<[Type]>,
}

impl Prepared {
    /// A statement of no parameters whose rows have `types` as columns (`c0`, `c1`…), for
    /// the fuzz targets.
    #[cfg(feature = "fuzzing")]
    pub(super) fn of_columns(types: Vec<Type>) -> Prepared {
        Prepared {
            name: "f".into(),
            params: Vec::new().into(),
            columns: (0..types.len()).map(|i| format!("c{i}")).collect(),
            types: types.into(),
        }
    }
}

/// One query's answer: its rows and the count its command tag gives.
pub(super) struct Outcome {
    pub(super) rows: Vec<DataRowBody>,
    pub(super) changed: u64,
    /// Its command tag is `ROLLBACK` (what PostgreSQL answers a COMMIT of a failed
    /// transaction with).
    pub(super) rolled_back: bool,
}

/// Appends `Bind` and `Execute` for one run: each parameter in binary where its value fits
/// the type the server gave it, else as text ([`postgres_types`](super::postgres_types));
/// results come back in the formats the statement's column types call for.
pub(super) fn bind(
    prepared: &Prepared,
    params: &[Value],
    out: &mut BytesMut,
) -> Result<(), DbError> {
    if params.len() != prepared.params.len() {
        return Err(DbError::Refused(format!(
            "the statement takes {} parameters, {} given",
            prepared.params.len(),
            params.len()
        )));
    }
    let typed = || params.iter().zip(prepared.params.iter()).enumerate();
    let formats = typed().map(|(_, (v, ty))| i16::from(postgres_types::binary_param(v, ty)));
    let values = typed().map(|(i, (v, ty))| (i + 1, v, ty));
    let results = prepared
        .types
        .iter()
        .map(|ty| i16::from(postgres_types::is_binary(ty)));
    frontend::bind(
        "",
        &prepared.name,
        formats,
        values,
        postgres_types::encode_param,
        results,
        out,
    )
    .map_err(|e| match e {
        BindError::Conversion(e) => DbError::Refused(format!("a parameter does not fit: {e}")),
        BindError::Serialization(e) => encode_error(e),
    })?;
    frontend::execute("", 0, out).map_err(encode_error)
}

/// Each query's rows and count in an answer, or the error the server gave.
pub(super) fn outcomes(answer: Answer, timeout: Duration) -> Result<Vec<Outcome>, DbError> {
    let mut outcomes = Vec::new();
    let mut rows = Vec::new();
    let mut messages = answer.messages.into_iter();
    while let Some(message) = messages.next() {
        match message {
            Message::DataRow(row) => {
                if rows.capacity() == 0 {
                    // Room for the rest of this result's rows at once, not grown row by row.
                    let rest = messages.as_slice().iter();
                    let more = rest
                        .take_while(|m| matches!(m, Message::DataRow(_)))
                        .count();
                    rows.reserve_exact(more + 1);
                }
                rows.push(row);
            }
            Message::CommandComplete(body) => {
                let tag = body.tag().unwrap_or_default();
                let changed = tag.rsplit(' ').next().and_then(|n| n.parse().ok());
                outcomes.push(Outcome {
                    rows: std::mem::take(&mut rows),
                    changed: changed.unwrap_or(0),
                    rolled_back: tag == "ROLLBACK",
                });
            }
            Message::EmptyQueryResponse => outcomes.push(Outcome {
                rows: std::mem::take(&mut rows),
                changed: 0,
                rolled_back: false,
            }),
            Message::ErrorResponse(body) => return Err(db_error(&body, timeout)),
            _ => {}
        }
    }
    Ok(outcomes)
}

/// What `Postgres::run_apart_on` gives back: each run's rows or error, the runs to run again
/// (the statement was gone or reshaped), the statement's name.
pub(super) type RunsApart<T> = (Vec<Result<Vec<T>, DbError>>, Vec<usize>, Arc<str>);

/// Each run's rows in an answer of several runs ([`Answer::runs`]), each read by `read`
/// with `prepared`'s columns, or the error the server (or `read`) gave that run; and the
/// runs the server said found the statement gone or reshaped (nothing of them ran: they run
/// again once it is prepared again), told apart from errors of `read`, which may say anything.
pub(super) fn rows_of_runs<T>(
    answer: &Answer,
    prepared: &Prepared,
    timeout: Duration,
    read: &mut impl FnMut(&DataRowBody, &Prepared) -> Result<T, DbError>,
) -> (Vec<Result<Vec<T>, DbError>>, Vec<usize>) {
    let mut runs = Vec::with_capacity(answer.ends.len() + 1);
    let mut again = Vec::new();
    'runs: for (i, run) in answer.runs().enumerate() {
        let mut rows = Vec::new();
        for message in run {
            match message {
                Message::DataRow(row) => match read(row, prepared) {
                    Ok(value) => rows.push(value),
                    Err(e) => {
                        runs.push(Err(e));
                        continue 'runs;
                    }
                },
                Message::ErrorResponse(body) => {
                    let e = db_error(body, timeout);
                    if is_reshaped(&e) {
                        again.push(i);
                    }
                    runs.push(Err(e));
                    continue 'runs;
                }
                _ => {}
            }
        }
        runs.push(Ok(rows));
    }
    (runs, again)
}

/// Whether `e` says a statement is gone or its result changed shape: nothing ran, and it
/// runs once prepared again.
pub(super) fn is_reshaped(e: &DbError) -> bool {
    matches!(e.code(), Some("26000" | "0A000"))
}

/// The type of `oid`; one this build does not know reads as text.
pub(super) fn type_of(oid: u32) -> Type {
    Type::from_oid(oid).unwrap_or(Type::UNKNOWN)
}

pub(super) fn encode_error(e: std::io::Error) -> DbError {
    DbError::Refused(format!("cannot encode the query: {e}"))
}

pub(super) fn decode_error(e: std::io::Error) -> DbError {
    DbError::Decode(format!("unreadable answer from PostgreSQL: {e}"))
}

/// The server's error as a [`DbError`]; 57014 (a statement past `statement_timeout`, which
/// is the query timeout) as [`DbError::Timeout`], connection and server failures as
/// [`DbError::Unavailable`].
pub(super) fn db_error(body: &ErrorResponseBody, timeout: Duration) -> DbError {
    let error = postgres_wire::server_error(body);
    if error.code == "57014" {
        return DbError::timed_out(timeout);
    }
    if error.kind == super::error::ErrorKind::Unavailable {
        return DbError::Unavailable(error.to_string());
    }
    DbError::Query(error)
}

/// Each of `rows` through `f`, read in place.
pub(super) fn map_rows<T>(
    rows: &[DataRowBody],
    prepared: &Prepared,
    f: impl FnMut(&RowView<'_>) -> Result<T, DbError>,
) -> Result<Vec<T>, DbError> {
    let mut read = in_place(f);
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(read(row, prepared)?);
    }
    Ok(out)
}

/// A reader of rows that hands `f` each row where it lies in the answer: one list of column
/// ranges serves every row.
pub(super) fn in_place<T>(
    mut f: impl FnMut(&RowView<'_>) -> Result<T, DbError>,
) -> impl FnMut(&DataRowBody, &Prepared) -> Result<T, DbError> {
    let mut ranges = Vec::new();
    move |row, prepared| {
        ranges.clear();
        ranges.reserve(prepared.types.len());
        each_column(row, prepared, |_, range| {
            ranges.push(range);
            Ok(())
        })?;
        f(&RowView::wire(
            row.buffer(),
            &ranges,
            &prepared.types,
            &prepared.columns,
        ))
    }
}

pub(super) fn convert_row(row: &DataRowBody, prepared: &Prepared) -> Result<Row, DbError> {
    let mut values = Vec::with_capacity(prepared.types.len());
    each_column(row, prepared, |i, range| {
        let raw = range.map(|r| &row.buffer()[r]);
        values.push(postgres_types::decode_column(
            &prepared.types[i],
            raw,
            &prepared.columns[i],
        )?);
        Ok(())
    })?;
    Ok(Row::new(prepared.columns.clone(), values))
}

/// Hands `column` each column of `row` in order: its index and its range in the row's
/// bytes (`None` for NULL). A row with more columns than the statement describes is an
/// error, so the index is always one of `prepared`'s columns.
pub(super) fn each_column(
    row: &DataRowBody,
    prepared: &Prepared,
    mut column: impl FnMut(usize, Option<Range<usize>>) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let width = prepared.types.len().min(prepared.columns.len());
    let mut ranges = row.ranges();
    let mut i = 0;
    while let Some(range) = ranges.next().map_err(decode_error)? {
        if i == width {
            return Err(DbError::Decode(format!(
                "a row with more than {width} columns"
            )));
        }
        column(i, range)?;
        i += 1;
    }
    Ok(())
}
