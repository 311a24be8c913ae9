//! [`Row`]: one result row, its values read by index or column name into the app's Rust
//! types ([`FromValue`]), or as a whole into the app's struct ([`Row::decode`]).

use std::sync::Arc;

use super::error::DbError;
use super::from_value::FromValue;
use super::value::Value;

/// One result row: its values in column order, and the column names (shared by every row of
/// one query).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    columns: Arc<[String]>,
    values: Vec<Value>,
}

impl Row {
    /// A row of `values` under `columns`.
    pub fn new(columns: Arc<[String]>, values: Vec<Value>) -> Self {
        Row { columns, values }
    }

    /// The value of column `index` (from 0) as `T`; a value that is not a `T` is an error
    /// that names the column and both types.
    ///
    /// ```
    /// use brisk::db::{Row, Value};
    /// let row = Row::new(vec!["id".to_string(), "name".to_string()].into(), vec![Value::Int(7), Value::Text("ann".into())]);
    /// assert_eq!(row.get::<i32>(0).unwrap(), 7);
    /// assert_eq!(row.by_name::<String>("name").unwrap(), "ann");
    /// let err = row.by_name::<i64>("name").unwrap_err().to_string();
    /// assert!(err.contains("\"name\"") && err.contains("text") && err.contains("i64"), "{err}");
    /// ```
    pub fn get<T: FromValue>(&self, index: usize) -> Result<T, DbError> {
        let v = self
            .values
            .get(index)
            .ok_or_else(|| no_column(index, self.values.len()))?;
        T::from_value(v).map_err(|e| in_column(&self.columns, index, e))
    }

    /// [`get`](Self::get), taking the value out of the row (NULL is left in its place): text
    /// and bytes move into `T` instead of being copied. On an error the value stays.
    ///
    /// ```
    /// use brisk::db::{Row, Value};
    /// let mut row = Row::new(vec!["id".to_string(), "name".to_string()].into(), vec![Value::Int(7), Value::Text("ann".into())]);
    /// assert_eq!(row.take::<String>(1).unwrap(), "ann");
    /// assert_eq!(row.get::<Option<String>>(1).unwrap(), None);
    /// assert!(row.take::<i64>(1).is_err(), "NULL is not an i64");
    /// assert!(row.take::<i64>(0).is_ok() && row.take::<i64>(0).is_err(), "taken once");
    /// ```
    pub fn take<T: FromValue>(&mut self, index: usize) -> Result<T, DbError> {
        let Some(slot) = self.values.get_mut(index) else {
            return self.get(index);
        };
        match T::take_from(slot) {
            Ok(v) => {
                *slot = Value::Null;
                Ok(v)
            }
            Err(e) => Err(in_column(&self.columns, index, e)),
        }
    }

    /// The value of the column called `name` (ASCII case aside) as `T`.
    pub fn by_name<T: FromValue>(&self, name: &str) -> Result<T, DbError> {
        self.get(index_of(&self.columns, name)?)
    }

    /// The row as a `T`, its fields filled from the columns of the same name (serde's names:
    /// `#[serde(rename)]` and `#[serde(default)]` apply); columns without a field are left.
    ///
    /// ```
    /// use brisk::db::{Row, Value};
    /// #[derive(serde::Deserialize, Debug, PartialEq)]
    /// struct Room { id: i64, name: String, topic: Option<String> }
    /// let columns: Vec<String> = ["id", "name", "topic"].map(String::from).to_vec();
    /// let row = Row::new(columns.into(), vec![Value::Int(1), Value::Text("ops".into()), Value::Null]);
    /// assert_eq!(row.decode::<Room>().unwrap(), Room { id: 1, name: "ops".into(), topic: None });
    /// ```
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, DbError> {
        super::row_decode::decode(&self.columns, &self.values)
    }

    /// The values, in column order.
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// The column names.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }
}

/// `e`, naming column `index` of `columns` if it is a decoding error.
pub(super) fn in_column(columns: &[String], index: usize, e: DbError) -> DbError {
    match e {
        DbError::Decode(why) => {
            let name = columns.get(index).map_or("?", |c| c.as_str());
            DbError::Decode(format!("column {name:?}: {why}"))
        }
        other => other,
    }
}

/// The index of the column of `columns` called `name` (ASCII case aside).
pub(super) fn index_of(columns: &[String], name: &str) -> Result<usize, DbError> {
    columns
        .iter()
        .position(|c| c.eq_ignore_ascii_case(name))
        .ok_or_else(|| DbError::Decode(format!("no column {name:?}")))
}

/// The error for column `index` of a row of `len` columns, which has no such column.
pub(super) fn no_column(index: usize, len: usize) -> DbError {
    DbError::Decode(format!("column {index} of a row of {len} columns"))
}

/// Each of `rows` as a `T` ([`Row::decode`]).
pub(super) fn decode_all<T: serde::de::DeserializeOwned>(
    rows: Vec<Row>,
) -> Result<Vec<T>, DbError> {
    rows.iter().map(Row::decode).collect()
}

/// `row` as a `T`, if there is one.
pub(super) fn decode_first<T: serde::de::DeserializeOwned>(
    row: Option<Row>,
) -> Result<Option<T>, DbError> {
    row.map(|r| r.decode()).transpose()
}

/// The first column of `row` as a `T`, if there is a row.
pub(super) fn first_column<T: FromValue>(row: Option<Row>) -> Result<Option<T>, DbError> {
    row.map(|r| r.get(0)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_convert_or_say_why_not() {
        let row = Row::new(
            vec!["a".to_string(), "b".to_string(), "c".to_string()].into(),
            vec![Value::Int(300), Value::Null, Value::Text("x".into())],
        );
        assert_eq!(row.get::<i64>(0).unwrap(), 300);
        assert!(row.get::<i16>(0).is_ok());
        assert_eq!(row.get::<Option<i32>>(1).unwrap(), None);
        assert_eq!(row.by_name::<String>("C").unwrap(), "x");
        assert!(matches!(row.get::<i32>(2), Err(DbError::Decode(m)) if m.contains("\"c\"")));
        assert!(matches!(row.get::<i32>(9), Err(DbError::Decode(_))));
        assert!(matches!(row.by_name::<i32>("zz"), Err(DbError::Decode(_))));
    }
}
