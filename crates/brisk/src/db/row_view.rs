//! [`RowView`]: one result row read where it lies, for
//! [`Db::query_map`](crate::db::Db::query_map): on PostgreSQL, each value is decoded from
//! the bytes of the server's answer straight into the type asked for, with no [`Row`] built
//! in between (no list of values per row, no copy of the column names' handle).

#[cfg(feature = "postgres")]
use std::ops::Range;

#[cfg(feature = "postgres")]
use tokio_postgres::types::Type;

use super::error::DbError;
use super::from_value::FromValue;
#[cfg(feature = "postgres")]
use super::postgres_types;
#[cfg(feature = "postgres")]
use super::row::{in_column, no_column};
use super::row::{index_of, Row};

/// One result row, lent to the closure of [`Db::query_map`](crate::db::Db::query_map):
/// its values read by index or column name into the app's types ([`FromValue`]), as
/// [`Row::get`] and [`Row::by_name`] read them, with the same errors.
///
/// ```no_run
/// # async fn f(db: brisk::db::Db) -> Result<(), brisk::db::DbError> {
/// struct Fortune { id: i32, message: String }
/// let fortunes = db
///     .query_map("SELECT id, message FROM fortune", vec![], |row| {
///         Ok(Fortune { id: row.get(0)?, message: row.by_name("message")? })
///     })
///     .await?;
/// # Ok(()) }
/// ```
pub struct RowView<'a> {
    inner: Inner<'a>,
}

enum Inner<'a> {
    /// A PostgreSQL `DataRow`: its bytes, each column's range in them (`None` for NULL),
    /// and the statement's column types and names.
    #[cfg(feature = "postgres")]
    Wire {
        bytes: &'a [u8],
        ranges: &'a [Option<Range<usize>>],
        types: &'a [Type],
        columns: &'a [String],
    },
    /// A row the backend has already read into values (SQLite, MySQL).
    Row(&'a Row),
}

impl<'a> RowView<'a> {
    /// A PostgreSQL row: `bytes` of its `DataRow` message, the `ranges` of its columns in
    /// them, and the statement's column `types` and names.
    #[cfg(feature = "postgres")]
    pub(super) fn wire(
        bytes: &'a [u8],
        ranges: &'a [Option<Range<usize>>],
        types: &'a [Type],
        columns: &'a [String],
    ) -> Self {
        let inner = Inner::Wire {
            bytes,
            ranges,
            types,
            columns,
        };
        RowView { inner }
    }

    /// The value of column `index` (from 0) as `T`; a value that is not a `T` is an error
    /// that names the column and both types, as [`Row::get`] says.
    pub fn get<T: FromValue>(&self, index: usize) -> Result<T, DbError> {
        match &self.inner {
            #[cfg(feature = "postgres")]
            Inner::Wire {
                bytes,
                ranges,
                types,
                columns,
            } => {
                let (Some(range), Some(ty), Some(column)) =
                    (ranges.get(index), types.get(index), columns.get(index))
                else {
                    return Err(no_column(index, ranges.len()));
                };
                let raw = range.as_ref().map(|r| &bytes[r.clone()]);
                let mut value = postgres_types::decode_column(ty, raw, column)?;
                // The value is this call's own: its text or bytes move into `T`.
                T::take_from(&mut value).map_err(|e| in_column(columns, index, e))
            }
            Inner::Row(row) => row.get(index),
        }
    }

    /// The value of the column called `name` (ASCII case aside) as `T`.
    pub fn by_name<T: FromValue>(&self, name: &str) -> Result<T, DbError> {
        self.get(index_of(self.columns(), name)?)
    }

    /// The column names, in order.
    pub fn columns(&self) -> &[String] {
        match &self.inner {
            #[cfg(feature = "postgres")]
            Inner::Wire { columns, .. } => columns,
            Inner::Row(row) => row.columns(),
        }
    }

    /// How many values the row has.
    pub fn len(&self) -> usize {
        match &self.inner {
            #[cfg(feature = "postgres")]
            Inner::Wire { ranges, .. } => ranges.len(),
            Inner::Row(row) => row.values().len(),
        }
    }

    /// Whether the row has no values (a `SELECT` of no columns).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A [`Row`] already read, seen as a view: a function that reads views reads rows too.
///
/// ```
/// use brisk::db::{Row, RowView, Value};
/// let row = Row::new(vec!["id".to_string()].into(), vec![Value::Int(7)]);
/// assert_eq!(RowView::from(&row).by_name::<i64>("ID").unwrap(), 7);
/// ```
impl<'a> From<&'a Row> for RowView<'a> {
    fn from(row: &'a Row) -> Self {
        RowView {
            inner: Inner::Row(row),
        }
    }
}

/// Each of `rows` through `f`, in order; the first error stops it.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(super) fn map_each<T>(
    rows: &[Row],
    mut f: impl FnMut(&RowView<'_>) -> Result<T, DbError>,
) -> Result<Vec<T>, DbError> {
    rows.iter().map(|row| f(&RowView::from(row))).collect()
}
