//! [`FromValue`]: a [`Value`] as the app's Rust type, and [`Json`], any serde type in a JSON
//! column.
//!
//! A conversion takes what a backend may hand for the type and nothing that would lose or
//! invent meaning: an `i64` from an integer (or a decimal with no fraction, which is what
//! PostgreSQL's `SUM(bigint)` and MySQL's `SUM` answer), a date from a DATE or from the ISO
//! text SQLite keeps, a `String` from text or from a value that has an exact text (a decimal,
//! a UUID, JSON, a date) — never an `i64` from text. A mismatch says both types.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::error::DbError;
use super::value::{parse_uuid, Value};
use crate::civil;

/// A Rust type a [`Value`] converts into: see the module's list. `Option<T>` reads NULL as
/// `None`; every other type refuses NULL.
pub trait FromValue: Sized {
    /// The value as `Self`, or why not.
    fn from_value(v: &Value) -> Result<Self, DbError>;

    /// [`from_value`](Self::from_value), moving text and bytes out of `v` instead of copying
    /// them (see [`Row::take`](super::Row::take)); `v` is left as it was on an error.
    fn take_from(v: &mut Value) -> Result<Self, DbError> {
        Self::from_value(v)
    }
}

/// Why `v` cannot be read as `want`.
pub(crate) fn mismatch(v: &Value, want: &str) -> DbError {
    DbError::Decode(format!(
        "a {} value cannot be read as {want}",
        v.type_name()
    ))
}

macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: &Value) -> Result<Self, DbError> {
                let out_of_range = || DbError::Decode(format!(
                    "{} does not fit {}", v.to_text().unwrap_or_default(), stringify!($t)
                ));
                match v {
                    Value::Int(i) => <$t>::try_from(*i).map_err(|_| out_of_range()),
                    Value::Decimal(d) => match d.strip_suffix(".0").unwrap_or(d).parse::<i128>() {
                        Ok(i) => <$t>::try_from(i).map_err(|_| out_of_range()),
                        Err(_) => Err(out_of_range()),
                    },
                    _ => Err(mismatch(v, stringify!($t))),
                }
            }
        }
    )*};
}
int_from_value!(i8, i16, i32, i64, u8, u16, u32, u64, usize);

impl FromValue for f64 {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Float(f) => Ok(*f),
            Value::Int(i) => Ok(*i as f64),
            Value::Decimal(d) => d
                .parse()
                .map_err(|_| DbError::Decode(format!("decimal {d} is not a number"))),
            _ => Err(mismatch(v, "f64")),
        }
    }
}

impl FromValue for f32 {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        f64::from_value(v).map(|f| f as f32)
    }
}

impl FromValue for bool {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Bool(b) => Ok(*b),
            // MySQL's TINYINT(1) and SQLite's 0 / 1.
            Value::Int(0) => Ok(false),
            Value::Int(1) => Ok(true),
            _ => Err(mismatch(v, "bool")),
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Text(s) | Value::Decimal(s) => Ok(s.clone()),
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => {
                Err(mismatch(v, "String"))
            }
            Value::Bytes(_) | Value::Array(_) => Err(mismatch(v, "String")),
            other => other.to_text().ok_or_else(|| mismatch(v, "String")),
        }
    }

    fn take_from(v: &mut Value) -> Result<Self, DbError> {
        match v {
            Value::Text(s) | Value::Decimal(s) => Ok(std::mem::take(s)),
            other => Self::from_value(other),
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

    fn take_from(v: &mut Value) -> Result<Self, DbError> {
        match v {
            Value::Bytes(b) => Ok(std::mem::take(b)),
            Value::Text(s) => Ok(std::mem::take(s).into_bytes()),
            other => Self::from_value(other),
        }
    }
}

impl FromValue for serde_json::Value {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        let bad = |e: serde_json::Error| DbError::Decode(format!("not JSON: {e}"));
        match v {
            Value::Json(j) => Ok((**j).clone()),
            // SQLite keeps JSON as text, MariaDB as a text it checks.
            Value::Text(s) => serde_json::from_str(s).map_err(bad),
            Value::Bytes(b) => serde_json::from_slice(b).map_err(bad),
            _ => Err(mismatch(v, "JSON")),
        }
    }
}

/// Arrays (PostgreSQL): each element as `T` (`Vec<u8>` is bytes, not an array).
macro_rules! array_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for Vec<$t> {
            fn from_value(v: &Value) -> Result<Self, DbError> {
                match v {
                    Value::Array(items) => items.iter().map(<$t>::from_value).collect(),
                    _ => Err(mismatch(v, "an array")),
                }
            }
        }
    )*};
}
array_from_value!(
    bool,
    i16,
    i32,
    i64,
    f32,
    f64,
    String,
    serde_json::Value,
    Option<bool>,
    Option<i16>,
    Option<i32>,
    Option<i64>,
    Option<f64>,
    Option<String>
);
#[cfg(feature = "uuid")]
array_from_value!(uuid::Uuid);
#[cfg(feature = "chrono")]
array_from_value!(chrono::NaiveDate, chrono::DateTime<chrono::Utc>);

/// The value as it is.
impl FromValue for Value {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        Ok(v.clone())
    }

    fn take_from(v: &mut Value) -> Result<Self, DbError> {
        Ok(std::mem::replace(v, Value::Null))
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }

    fn take_from(v: &mut Value) -> Result<Self, DbError> {
        match v {
            Value::Null => Ok(None),
            other => T::take_from(other).map(Some),
        }
    }
}

/// Days since 1970-01-01 of a DATE, or of ISO text (`2026-11-26`).
#[cfg_attr(not(any(feature = "chrono", feature = "time")), allow(dead_code))]
pub(crate) fn date_of(v: &Value, want: &str) -> Result<i32, DbError> {
    match v {
        Value::Date(d) => Ok(*d),
        Value::Text(t) => civil::parse_date(t)
            .ok_or_else(|| DbError::Decode(format!("{t:?} is not a date as {want}"))),
        _ => Err(mismatch(v, want)),
    }
}

/// Microseconds since midnight of a TIME, or of ISO text (`12:30:00`).
#[cfg_attr(not(any(feature = "chrono", feature = "time")), allow(dead_code))]
pub(crate) fn time_of(v: &Value, want: &str) -> Result<i64, DbError> {
    match v {
        Value::Time(t) => Ok(*t),
        Value::Text(t) => civil::parse_time(t)
            .ok_or_else(|| DbError::Decode(format!("{t:?} is not a time as {want}"))),
        _ => Err(mismatch(v, want)),
    }
}

/// Microseconds since 1970-01-01 00:00 of a TIMESTAMP (or of a TIMESTAMPTZ, as UTC), or of
/// ISO text without an offset (or with `Z`).
#[cfg_attr(not(any(feature = "chrono", feature = "time")), allow(dead_code))]
pub(crate) fn timestamp_of(v: &Value, want: &str) -> Result<i64, DbError> {
    match v {
        Value::Timestamp(t) | Value::TimestampTz(t) => Ok(*t),
        Value::Text(t) => match civil::parse_timestamp(t) {
            Some((micros, None | Some(0))) => Ok(micros),
            _ => Err(DbError::Decode(format!(
                "{t:?} is not a timestamp without an offset as {want}"
            ))),
        },
        _ => Err(mismatch(v, want)),
    }
}

/// Microseconds since 1970-01-01 00:00 UTC of a TIMESTAMPTZ (or of a TIMESTAMP, taken as
/// UTC, which is how MySQL's DATETIME and SQLite's text without an offset are written), or of
/// ISO text (its offset applied).
#[cfg_attr(not(any(feature = "chrono", feature = "time")), allow(dead_code))]
pub(crate) fn instant_of(v: &Value, want: &str) -> Result<i64, DbError> {
    match v {
        Value::TimestampTz(t) | Value::Timestamp(t) => Ok(*t),
        Value::Text(t) => match civil::parse_timestamp(t) {
            Some((micros, offset)) => micros
                .checked_sub(i64::from(offset.unwrap_or(0)) * 1_000_000)
                .ok_or_else(|| DbError::Decode(format!("{t:?} is out of range as {want}"))),
            None => Err(DbError::Decode(format!(
                "{t:?} is not a timestamp as {want}"
            ))),
        },
        _ => Err(mismatch(v, want)),
    }
}

/// The 16 bytes of a UUID, of 16 bytes (MySQL's `BINARY(16)`), or of its text.
#[cfg_attr(not(feature = "uuid"), allow(dead_code))]
pub(crate) fn uuid_of(v: &Value) -> Result<[u8; 16], DbError> {
    match v {
        Value::Uuid(u) => Ok(*u),
        Value::Bytes(b) if b.len() == 16 => Ok(b[..].try_into().expect("16 bytes")),
        Value::Text(t) => {
            parse_uuid(t).ok_or_else(|| DbError::Decode(format!("{t:?} is not a UUID")))
        }
        Value::Bytes(b) => std::str::from_utf8(b)
            .ok()
            .and_then(parse_uuid)
            .ok_or_else(|| DbError::Decode("bytes that are not a UUID".into())),
        _ => Err(mismatch(v, "a UUID")),
    }
}

/// Any serde type as a JSON column: `Json(value)` as a parameter, `Json<T>` read from JSON
/// (or from the text of JSON, as SQLite and MariaDB keep it), and as a field of a typed row.
///
/// ```
/// use brisk::db::{FromValue, Json, Value};
/// #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
/// struct Prefs { theme: String }
/// let v: Value = Json(Prefs { theme: "dark".into() }).into();
/// let back = Json::<Prefs>::from_value(&v).unwrap();
/// assert_eq!(back.0.theme, "dark");
/// let from_text = Json::<Prefs>::from_value(&Value::Text(r#"{"theme":"light"}"#.into())).unwrap();
/// assert_eq!(from_text.0.theme, "light");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

impl<T: Serialize> From<Json<T>> for Value {
    fn from(v: Json<T>) -> Self {
        match serde_json::to_value(&v.0) {
            Ok(json) => Value::Json(Box::new(json)),
            // A type that does not serialize to JSON (a map with non-string keys): the
            // statement fails on a NULL it did not expect rather than on garbage.
            Err(e) => {
                tracing::warn!("a Json parameter does not serialize: {e}");
                Value::Null
            }
        }
    }
}

impl<T: DeserializeOwned> FromValue for Json<T> {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        let bad = |e: serde_json::Error| DbError::Decode(format!("JSON of another shape: {e}"));
        match v {
            Value::Json(j) => T::deserialize(&**j).map(Json).map_err(bad),
            Value::Text(s) => serde_json::from_str(s).map(Json).map_err(bad),
            Value::Bytes(b) => serde_json::from_slice(b).map(Json).map_err(bad),
            _ => Err(mismatch(v, "JSON")),
        }
    }
}

impl<T: Serialize> Serialize for Json<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// As a field of a typed row: from the JSON value, or from its text.
impl<'de, T: DeserializeOwned> Deserialize<'de> for Json<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => serde_json::from_str(&text)
                .map(Json)
                .map_err(D::Error::custom),
            json => T::deserialize(json).map(Json).map_err(D::Error::custom),
        }
    }
}

#[cfg(feature = "uuid")]
impl From<uuid::Uuid> for Value {
    fn from(v: uuid::Uuid) -> Self {
        Value::Uuid(v.into_bytes())
    }
}

#[cfg(feature = "uuid")]
impl FromValue for uuid::Uuid {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        uuid_of(v).map(uuid::Uuid::from_bytes)
    }
}

#[cfg(feature = "decimal")]
impl From<rust_decimal::Decimal> for Value {
    fn from(v: rust_decimal::Decimal) -> Self {
        Value::Decimal(v.to_string())
    }
}

#[cfg(feature = "decimal")]
impl FromValue for rust_decimal::Decimal {
    fn from_value(v: &Value) -> Result<Self, DbError> {
        let parse = |s: &str| {
            s.parse::<rust_decimal::Decimal>()
                .map_err(|e| DbError::Decode(format!("{s:?} as a Decimal: {e}")))
        };
        match v {
            Value::Decimal(d) | Value::Text(d) => parse(d),
            Value::Int(i) => Ok((*i).into()),
            _ => Err(mismatch(v, "Decimal")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_take_what_a_backend_hands_and_refuse_the_rest() {
        assert_eq!(i64::from_value(&Value::Decimal("42".into())).unwrap(), 42);
        assert!(i64::from_value(&Value::Decimal("4.2".into())).is_err());
        assert!(i64::from_value(&Value::Text("42".into())).is_err());
        assert!(i8::from_value(&Value::Int(300)).is_err());
        assert!(bool::from_value(&Value::Int(1)).unwrap());
        assert!(bool::from_value(&Value::Int(2)).is_err());
        assert_eq!(
            f64::from_value(&Value::Decimal("1.25".into())).unwrap(),
            1.25
        );
        assert_eq!(String::from_value(&Value::Date(0)).unwrap(), "1970-01-01");
        assert!(String::from_value(&Value::Int(1)).is_err());
        let json: serde_json::Value = FromValue::from_value(&Value::Text("[1,2]".into())).unwrap();
        assert_eq!(json, serde_json::json!([1, 2]));
        let ints: Vec<i32> = FromValue::from_value(&Value::array([1, 2])).unwrap();
        assert_eq!(ints, [1, 2]);
        assert_eq!(
            instant_of(&Value::Text("1970-01-01T01:00:00+01:00".into()), "t").unwrap(),
            0
        );
        assert!(timestamp_of(&Value::Text("1970-01-01T01:00:00+01:00".into()), "t").is_err());
        let u = [7u8; 16];
        assert_eq!(
            uuid_of(&Value::Text(super::super::value::uuid_text(&u))).unwrap(),
            u
        );
        assert_eq!(uuid_of(&Value::Bytes(u.to_vec())).unwrap(), u);
        let e = i64::from_value(&Value::Text("x".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("text") && e.contains("i64"), "{e}");
    }
}
