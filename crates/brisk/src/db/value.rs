//! [`Value`]: a parameter or a column's value, as every backend hands it over. Each backend
//! converts to and from its own types, in binary where its protocol has it;
//! [`FromValue`](super::FromValue) turns a value into the app's Rust type.
//!
//! Dates and times are numbers here (days since 1970-01-01, microseconds since midnight or
//! since 1970-01-01 00:00 UTC), so nothing depends on a server's `DateStyle` or `TimeZone`;
//! the app's calendar crate converts from them (features `chrono` and `time`).

use crate::civil;

/// A parameter or column value.
///
/// ```
/// use brisk::db::Value;
/// let params: Vec<Value> = vec![7.into(), "ann".into(), true.into(), None::<i64>.into()];
/// assert_eq!(params[2], Value::Bool(true));
/// assert_eq!(params[3], Value::Null);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// BOOLEAN (MySQL's `TINYINT(1)`; SQLite stores it as 0 / 1).
    Bool(bool),
    /// Any integer column (SMALLINT, INT, BIGINT).
    Int(i64),
    /// REAL, DOUBLE PRECISION, FLOAT.
    Float(f64),
    /// TEXT, VARCHAR, CHAR, and a type Brisk does not read, as the server writes it.
    Text(String),
    /// BYTEA, BLOB, BINARY.
    Bytes(Vec<u8>),
    /// DATE: days since 1970-01-01.
    Date(i32),
    /// TIME (without time zone): microseconds since midnight.
    Time(i64),
    /// TIMESTAMP, DATETIME (without time zone): microseconds since 1970-01-01 00:00.
    Timestamp(i64),
    /// TIMESTAMPTZ, MySQL's TIMESTAMP: an instant, microseconds since 1970-01-01 00:00 UTC.
    TimestampTz(i64),
    /// UUID: its 16 bytes.
    Uuid([u8; 16]),
    /// JSON, JSONB.
    Json(Box<serde_json::Value>),
    /// NUMERIC, DECIMAL, exactly, as its text (`-12.50`, `NaN`).
    Decimal(String),
    /// An array (PostgreSQL): its elements, an array of arrays for more dimensions.
    Array(Vec<Value>),
}

impl Value {
    /// What kind of value this is, in SQL's words: `integer`, `text`, `timestamptz`…
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "float",
            Value::Text(_) => "text",
            Value::Bytes(_) => "bytes",
            Value::Date(_) => "date",
            Value::Time(_) => "time",
            Value::Timestamp(_) => "timestamp",
            Value::TimestampTz(_) => "timestamptz",
            Value::Uuid(_) => "uuid",
            Value::Json(_) => "json",
            Value::Decimal(_) => "decimal",
            Value::Array(_) => "array",
        }
    }

    /// The value as text a server parses whatever its settings (ISO 8601 dates, `true`,
    /// hyphenated UUIDs, JSON), or `None` for NULL, bytes and arrays, which have no such text.
    pub(crate) fn to_text(&self) -> Option<String> {
        Some(match self {
            Value::Null | Value::Bytes(_) | Value::Array(_) => return None,
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) if f.is_nan() => "NaN".into(),
            Value::Float(f) if f.is_infinite() => {
                if *f > 0.0 { "Infinity" } else { "-Infinity" }.into()
            }
            Value::Float(f) => f.to_string(),
            Value::Text(t) => t.clone(),
            Value::Date(d) => civil::date_text(*d),
            Value::Time(t) => civil::time_text(*t),
            Value::Timestamp(t) => civil::timestamp_text(*t, false),
            Value::TimestampTz(t) => civil::timestamp_text(*t, true),
            Value::Uuid(u) => uuid_text(u),
            Value::Json(j) => j.to_string(),
            Value::Decimal(d) => d.clone(),
        })
    }

    /// An array of `items`.
    ///
    /// ```
    /// use brisk::db::Value;
    /// assert_eq!(Value::array([1, 2]), Value::Array(vec![Value::Int(1), Value::Int(2)]));
    /// ```
    pub fn array<T: Into<Value>>(items: impl IntoIterator<Item = T>) -> Value {
        Value::Array(items.into_iter().map(Into::into).collect())
    }
}

/// A UUID's hyphenated text (`67e55044-10b1-426f-9247-bb680e5fe0c8`).
pub(crate) fn uuid_text(bytes: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

/// A UUID's 16 bytes from its text, hyphenated or not, in braces or not.
pub(crate) fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .bytes()
        .filter(|b| *b != b'-')
        .collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let pair = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

macro_rules! value_from {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from($v: $t) -> Self {
                $e
            }
        }
    )*};
}

value_from! {
    bool => |v| Value::Bool(v),
    i8 => |v| Value::Int(v.into()),
    i16 => |v| Value::Int(v.into()),
    i32 => |v| Value::Int(v.into()),
    i64 => |v| Value::Int(v),
    u8 => |v| Value::Int(v.into()),
    u16 => |v| Value::Int(v.into()),
    u32 => |v| Value::Int(v.into()),
    f32 => |v| Value::Float(v.into()),
    f64 => |v| Value::Float(v),
    &str => |v| Value::Text(v.to_string()),
    &String => |v| Value::Text(v.clone()),
    String => |v| Value::Text(v),
    Vec<u8> => |v| Value::Bytes(v),
    &[u8] => |v| Value::Bytes(v.to_vec()),
    serde_json::Value => |v| Value::Json(Box::new(v)),
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// Arrays of the scalars (PostgreSQL's `int[]`, `text[]`…); `Vec<u8>` is bytes.
macro_rules! array_from {
    ($($t:ty),*) => {$(
        impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Self {
                Value::array(v)
            }
        }

        impl From<&[$t]> for Value {
            fn from(v: &[$t]) -> Self {
                Value::array(v.iter().cloned())
            }
        }
    )*};
}
array_from!(bool, i16, i32, i64, f32, f64, String, &str);

/// Parameters as [`Value`]s: `params![id, name, at]` is `vec![id.into(), name.into(),
/// at.into()]`.
///
/// ```
/// use brisk::db::{params, Value};
/// let p = brisk::db::params![7, "ann", Some(1.5)];
/// assert_eq!(p, vec![Value::Int(7), Value::Text("ann".into()), Value::Float(1.5)]);
/// ```
#[macro_export]
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        vec![$($crate::db::Value::from($value)),*]
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_written_and_read_back() {
        let u = [
            0x67, 0xe5, 0x50, 0x44, 0x10, 0xb1, 0x42, 0x6f, 0x92, 0x47, 0xbb, 0x68, 0x0e, 0x5f,
            0xe0, 0xc8,
        ];
        assert_eq!(uuid_text(&u), "67e55044-10b1-426f-9247-bb680e5fe0c8");
        assert_eq!(
            parse_uuid("{67E55044-10B1-426F-9247-BB680E5FE0C8}"),
            Some(u)
        );
        assert_eq!(parse_uuid("67e5504410b1426f9247bb680e5fe0c8"), Some(u));
        assert_eq!(parse_uuid("67e55044"), None);
        assert_eq!(parse_uuid("zze55044-10b1-426f-9247-bb680e5fe0c8"), None);
    }
}
