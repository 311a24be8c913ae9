//! MySQL's and MariaDB's values, both ways, in the binary protocol of prepared statements:
//! dates, times and timestamps as the protocol's own (every session is in UTC, so a
//! `TIMESTAMP` column's instant is the same whatever the server's time zone), `TINYINT(1)` as
//! a boolean, DECIMAL as its exact text, JSON parsed (MySQL's `JSON` type; MariaDB's is text
//! it checks, read with [`Json`](super::Json) or `serde_json::Value`), UUIDs as their text
//! (a `CHAR(36)` or MariaDB's `UUID` column; 16 bytes from a `BINARY(16)` read as a UUID too).

use std::sync::Arc;

use mysql_async::consts::ColumnType;
use mysql_async::Value as M;

use super::error::DbError;
use super::row::Row;
use super::value::Value;
use crate::civil::{self, DAY_MICROS};

/// Parameter `$n` as MySQL takes it.
pub(super) fn to_mysql(n: usize, v: &Value) -> Result<M, DbError> {
    let out_of_range = || {
        DbError::Refused(format!(
            "parameter ${n}: {} is out of MySQL's range (years 0 to 9999)",
            v.to_text().unwrap_or_default()
        ))
    };
    Ok(match v {
        Value::Null => M::NULL,
        Value::Bool(b) => M::Int(i64::from(*b)),
        Value::Int(i) => M::Int(*i),
        Value::Float(f) => M::Double(*f),
        Value::Text(t) => M::Bytes(t.clone().into_bytes()),
        Value::Bytes(b) => M::Bytes(b.clone()),
        Value::Date(d) => {
            let (y, m, d) = civil::date_of(*d);
            let y = u16::try_from(y).map_err(|_| out_of_range())?;
            M::Date(y, m as u8, d as u8, 0, 0, 0, 0)
        }
        Value::Time(t) => {
            let micros = t.unsigned_abs();
            let seconds = micros / 1_000_000;
            M::Time(
                *t < 0,
                (seconds / 86_400) as u32,
                (seconds / 3600 % 24) as u8,
                (seconds / 60 % 60) as u8,
                (seconds % 60) as u8,
                (micros % 1_000_000) as u32,
            )
        }
        Value::Timestamp(t) | Value::TimestampTz(t) => {
            let days = t.div_euclid(DAY_MICROS);
            let (y, mo, d) = civil::date_of(i32::try_from(days).map_err(|_| out_of_range())?);
            let y = u16::try_from(y).map_err(|_| out_of_range())?;
            let micros = t.rem_euclid(DAY_MICROS);
            let s = micros / 1_000_000;
            M::Date(
                y,
                mo as u8,
                d as u8,
                (s / 3600) as u8,
                (s / 60 % 60) as u8,
                (s % 60) as u8,
                (micros % 1_000_000) as u32,
            )
        }
        Value::Array(_) => {
            return Err(DbError::Refused(format!(
                "parameter ${n}: MySQL has no arrays (store JSON instead)"
            )))
        }
        other => M::Bytes(other.to_text().unwrap_or_default().into_bytes()),
    })
}

/// Rows of `exec` as Brisk's.
pub(super) fn convert_rows(rows: Vec<mysql_async::Row>) -> Result<Vec<Row>, DbError> {
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let columns: Arc<[String]> = first
        .columns_ref()
        .iter()
        .map(|c| c.name_str().into_owned())
        .collect();
    let kinds: Arc<[Kind]> = first.columns_ref().iter().map(Kind::of).collect();
    rows.into_iter()
        .map(|row| {
            let values = row
                .unwrap()
                .into_iter()
                .zip(kinds.iter())
                .zip(columns.iter())
                .map(|((v, kind), column)| kind.read(v, column))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Row::new(columns.clone(), values))
        })
        .collect()
}

/// What a column's type says of its values.
#[derive(Debug, Clone, Copy)]
struct Kind {
    ty: ColumnType,
    binary: bool,
    /// `TINYINT(1)`: MySQL's BOOLEAN.
    boolean: bool,
}

impl Kind {
    fn of(c: &mysql_async::Column) -> Kind {
        let ty = c.column_type();
        Kind {
            ty,
            // The binary character set (63): BINARY, VARBINARY, BLOB. (The BINARY flag is
            // also set on text with a binary collation, as MariaDB's JSON.)
            binary: c.character_set() == 63,
            boolean: ty == ColumnType::MYSQL_TYPE_TINY && c.column_length() == 1,
        }
    }

    fn read(self, v: M, column: &str) -> Result<Value, DbError> {
        use ColumnType as T;
        Ok(match v {
            M::NULL => Value::Null,
            M::Int(i @ (0 | 1)) if self.boolean => Value::Bool(i == 1),
            M::Int(i) => Value::Int(i),
            M::UInt(u) => Value::Int(i64::try_from(u).map_err(|_| {
                DbError::Decode(format!("column {column:?}: {u} does not fit an i64"))
            })?),
            M::Float(f) => Value::Float(f.into()),
            M::Double(f) => Value::Float(f),
            M::Date(y, mo, d, h, mi, s, us) => {
                let Some(days) = civil::days_of(y.into(), mo.into(), d.into()) else {
                    // MySQL's zero date (`0000-00-00`) and its dates with a zero month or day
                    // are no calendar's: their text, which a date type refuses by name.
                    return Ok(Value::Text(format!(
                        "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}"
                    )));
                };
                let micros = i64::from(days) * DAY_MICROS
                    + (i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s)) * 1_000_000
                    + i64::from(us);
                match self.ty {
                    T::MYSQL_TYPE_DATE | T::MYSQL_TYPE_NEWDATE => Value::Date(days),
                    T::MYSQL_TYPE_TIMESTAMP | T::MYSQL_TYPE_TIMESTAMP2 => {
                        Value::TimestampTz(micros)
                    }
                    _ => Value::Timestamp(micros),
                }
            }
            M::Time(negative, days, h, m, s, us) => {
                let micros = ((i64::from(days) * 24 + i64::from(h)) * 3600
                    + i64::from(m) * 60
                    + i64::from(s))
                    * 1_000_000
                    + i64::from(us);
                Value::Time(if negative { -micros } else { micros })
            }
            M::Bytes(b) => self.read_bytes(b),
        })
    }

    /// Bytes (the text protocol's every value, the binary protocol's strings) as the
    /// column's kind.
    fn read_bytes(self, b: Vec<u8>) -> Value {
        use ColumnType as T;
        let text = std::str::from_utf8(&b).ok();
        let parsed = match self.ty {
            T::MYSQL_TYPE_TINY
            | T::MYSQL_TYPE_SHORT
            | T::MYSQL_TYPE_LONG
            | T::MYSQL_TYPE_LONGLONG
            | T::MYSQL_TYPE_INT24
            | T::MYSQL_TYPE_YEAR => text.and_then(|s| s.parse().ok()).map(Value::Int),
            T::MYSQL_TYPE_FLOAT | T::MYSQL_TYPE_DOUBLE => {
                text.and_then(|s| s.parse().ok()).map(Value::Float)
            }
            T::MYSQL_TYPE_DECIMAL | T::MYSQL_TYPE_NEWDECIMAL => {
                text.map(|s| Value::Decimal(s.to_string()))
            }
            T::MYSQL_TYPE_JSON => text
                .and_then(|s| serde_json::from_str(s).ok())
                .map(|j| Value::Json(Box::new(j))),
            _ => None,
        };
        if let Some(v) = parsed {
            return v;
        }
        if self.binary {
            return Value::Bytes(b);
        }
        match String::from_utf8(b) {
            Ok(s) => Value::Text(s),
            Err(e) => Value::Bytes(e.into_bytes()),
        }
    }
}
