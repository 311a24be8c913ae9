//! Values in and out of the common surface: [`Value`] (a parameter or a column's value) and
//! [`Row`] (one result row, by index or column name). Each backend converts to and from its
//! own types; an application that wants a backend's typed API uses that backend directly.

use std::sync::Arc;

use super::error::DbError;

/// A parameter or column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// Any integer column (SMALLINT, INT, BIGINT, BOOLEAN as 0/1).
    Int(i64),
    /// REAL, DOUBLE PRECISION, FLOAT.
    Float(f64),
    /// TEXT, VARCHAR, CHAR.
    Text(String),
    /// BYTEA, BLOB.
    Bytes(Vec<u8>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int(v.into())
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// A Rust type a [`Value`] converts into: integers, floats, `String`, `Vec<u8>`, `bool` and
/// `Option` of those (NULL is `None`).
pub trait FromValue: Sized {
    /// The value as `Self`, or why not.
    fn from_value(v: &Value) -> Result<Self, DbError>;
}

fn mismatch(v: &Value, want: &str) -> DbError {
    DbError::Decode(format!("{v:?} is not {want}"))
}

macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: &Value) -> Result<Self, DbError> {
                match v {
                    Value::Int(i) => <$t>::try_from(*i).map_err(|_| mismatch(v, stringify!($t))),
                    _ => Err(mismatch(v, stringify!($t))),
                }
            }
        }
    )*};
}
int_from_value!(i64, i32, i16, u32, u64, usize);

impl FromValue for f64 {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Float(f) => Ok(*f),
            Value::Int(i) => Ok(*i as f64),
            _ => Err(mismatch(v, "f64")),
        }
    }
}

impl FromValue for bool {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Int(i) => Ok(*i != 0),
            _ => Err(mismatch(v, "bool")),
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            _ => Err(mismatch(v, "String")),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Bytes(b) => Ok(b.clone()),
            Value::Text(s) => Ok(s.clone().into_bytes()),
            _ => Err(mismatch(v, "Vec<u8>")),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

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

    /// The value of column `index` (from 0) as `T`.
    ///
    /// ```
    /// use brisk::db::{Row, Value};
    /// let row = Row::new(vec!["id".to_string()].into(), vec![Value::Int(7)]);
    /// assert_eq!(row.get::<i32>(0).unwrap(), 7);
    /// assert_eq!(row.by_name::<i64>("id").unwrap(), 7);
    /// ```
    pub fn get<T: FromValue>(&self, index: usize) -> Result<T, DbError> {
        let v = self.values.get(index).ok_or_else(|| {
            DbError::Decode(format!(
                "column {index} of a row of {} columns",
                self.values.len()
            ))
        })?;
        T::from_value(v)
    }

    /// The value of the column called `name` as `T`.
    pub fn by_name<T: FromValue>(&self, name: &str) -> Result<T, DbError> {
        let index = self
            .columns
            .iter()
            .position(|c| c.eq_ignore_ascii_case(name))
            .ok_or_else(|| DbError::Decode(format!("no column {name:?}")))?;
        self.get(index)
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

/// Rewrites `$1`, `$2`… placeholders (outside quoted strings) with `to(n)`: how a backend
/// that does not number its parameters the PostgreSQL way (SQLite's `?N`, MySQL's `?`) runs
/// the same SQL. Returns the SQL and the parameter numbers in the order they appear.
#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))]
pub(crate) fn rewrite_placeholders(
    sql: &str,
    to: impl Fn(usize) -> String,
) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut quote: Option<char> = None;
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        match quote {
            Some(q) => {
                out.push(c);
                if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '$' && chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) => {
                let mut n = 0usize;
                while let Some((_, d)) = chars.peek().copied().filter(|(_, d)| d.is_ascii_digit()) {
                    n = n * 10 + d.to_digit(10).unwrap_or(0) as usize;
                    chars.next();
                }
                order.push(n);
                out.push_str(&to(n));
            }
            None => out.push(c),
        }
    }
    (out, order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_rewritten_outside_quotes_only() {
        let (sql, order) =
            rewrite_placeholders("SELECT '$1', a FROM t WHERE b = $2 AND c = $10", |_| {
                "?".into()
            });
        assert_eq!(sql, "SELECT '$1', a FROM t WHERE b = ? AND c = ?");
        assert_eq!(order, vec![2, 10]);
        let (sql, _) = rewrite_placeholders("x = $1 or y = $1", |n| format!("?{n}"));
        assert_eq!(sql, "x = ?1 or y = ?1");
    }

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
        assert!(matches!(row.get::<i32>(2), Err(DbError::Decode(_))));
        assert!(matches!(row.get::<i32>(9), Err(DbError::Decode(_))));
        assert!(matches!(row.by_name::<i32>("zz"), Err(DbError::Decode(_))));
    }
}
