//! Typed rows: a [`Row`](super::Row) read into the app's struct through serde, each field
//! from the column of its name (as sqlx's `FromRow` does, with serde's attributes), or into a
//! tuple by position.
//!
//! Values reach serde as what they are (an integer, text, a JSON document) and as the text
//! a calendar or UUID crate reads (`2026-11-26T12:00:00.000000Z`, a hyphenated UUID), so
//! chrono's, time's (with its `rfc3339` helper), uuid's and rust_decimal's own `Deserialize`
//! take them. A field given a value it cannot take fails with the column's name.

use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};

use super::error::DbError;
use super::value::{uuid_text, Value};

/// The row `columns`/`values` as a `T`.
pub(crate) fn decode<T: DeserializeOwned>(
    columns: &[String],
    values: &[Value],
) -> Result<T, DbError> {
    T::deserialize(RowDeserializer { columns, values }).map_err(|e| DbError::Decode(e.0))
}

/// Why a row did not decode.
#[derive(Debug)]
pub(crate) struct DecodeError(String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DecodeError(msg.to_string())
    }
}

/// A whole row: a map of column names to values, or a sequence of values.
struct RowDeserializer<'a> {
    columns: &'a [String],
    values: &'a [Value],
}

impl<'de> de::Deserializer<'de> for RowDeserializer<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(Columns {
            columns: self.columns,
            values: self.values,
            next: 0,
        })
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_seq(Items {
            items: self.values.iter(),
        })
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct map struct enum identifier ignored_any
    }
}

/// The columns of a row, as a map.
struct Columns<'a> {
    columns: &'a [String],
    values: &'a [Value],
    next: usize,
}

impl<'de> de::MapAccess<'de> for Columns<'de> {
    type Error = DecodeError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some(name) = self.columns.get(self.next) else {
            return Ok(None);
        };
        seed.deserialize(name.as_str().into_deserializer())
            .map(Some)
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let i = self.next;
        self.next += 1;
        let value = self.values.get(i).unwrap_or(&Value::Null);
        seed.deserialize(ValueDeserializer(value)).map_err(|e| {
            let name = self.columns.get(i).map_or("?", |c| c.as_str());
            DecodeError(format!("column {name:?} ({}): {e}", value.type_name()))
        })
    }
}

/// Values in order: an array's elements, or a row's columns.
struct Items<'a> {
    items: std::slice::Iter<'a, Value>,
}

impl<'de> de::SeqAccess<'de> for Items<'de> {
    type Error = DecodeError;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        match self.items.next() {
            Some(v) => seed.deserialize(ValueDeserializer(v)).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// One value.
struct ValueDeserializer<'a>(&'a Value);

fn json_error(e: serde_json::Error) -> DecodeError {
    DecodeError(e.to_string())
}

impl<'de> de::Deserializer<'de> for ValueDeserializer<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => visitor.visit_i64(*i),
            Value::Float(f) => visitor.visit_f64(*f),
            Value::Text(s) | Value::Decimal(s) => visitor.visit_str(s),
            Value::Bytes(b) => visitor.visit_bytes(b),
            Value::Uuid(u) => visitor.visit_string(uuid_text(u)),
            Value::Json(j) => de::Deserializer::deserialize_any(&**j, visitor).map_err(json_error),
            Value::Array(items) => visitor.visit_seq(Items {
                items: items.iter(),
            }),
            dated => visitor.visit_string(dated.to_text().unwrap_or_default()),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            // MySQL's TINYINT(1), SQLite's 0 / 1.
            Value::Int(i @ (0 | 1)) => visitor.visit_bool(*i == 1),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            // SUM(bigint), MySQL's SUM: a decimal without a fraction.
            Value::Decimal(d) => match d.parse::<i64>() {
                Ok(i) => visitor.visit_i64(i),
                Err(_) => self.deserialize_any(visitor),
            },
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Decimal(d) => match d.parse::<f64>() {
                Ok(f) => visitor.visit_f64(f),
                Err(_) => self.deserialize_any(visitor),
            },
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Uuid(u) => visitor.visit_bytes(u),
            Value::Text(s) => visitor.visit_bytes(s.as_bytes()),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            // A text column naming a unit variant (`'admin'` as `Role::Admin`).
            Value::Text(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Value::Json(j) => de::Deserializer::deserialize_enum(&**j, name, variants, visitor)
                .map_err(json_error),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        i128 u128 char str string unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;
    use crate::db::Json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Role {
        Admin,
        Member,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Member {
        id: i64,
        #[serde(rename = "display_name")]
        name: String,
        role: Role,
        active: bool,
        score: f64,
        tags: Vec<String>,
        prefs: Json<BTreeMap<String, i32>>,
        uuid: String,
        joined: String,
        note: Option<String>,
        #[serde(default)]
        missing_with_default: u32,
    }

    fn row(pairs: Vec<(&str, Value)>) -> (Vec<String>, Vec<Value>) {
        pairs.into_iter().map(|(c, v)| (c.to_string(), v)).unzip()
    }

    #[test]
    fn a_row_fills_a_struct_by_column_name() {
        let (columns, values) = row(vec![
            ("id", Value::Int(7)),
            ("display_name", Value::Text("ann".into())),
            ("role", Value::Text("admin".into())),
            ("active", Value::Int(1)),
            ("score", Value::Decimal("2.5".into())),
            ("tags", Value::array(["a", "b"])),
            ("prefs", Value::Text(r#"{"x": 1}"#.into())),
            ("uuid", Value::Uuid([0xab; 16])),
            ("joined", Value::TimestampTz(0)),
            ("note", Value::Null),
            ("unused", Value::Int(0)),
        ]);
        let m: Member = decode(&columns, &values).unwrap();
        assert_eq!(m.id, 7);
        assert_eq!(m.name, "ann");
        assert_eq!(m.role, Role::Admin);
        assert!(m.active);
        assert_eq!(m.score, 2.5);
        assert_eq!(m.tags, ["a", "b"]);
        assert_eq!(m.prefs.0["x"], 1);
        assert_eq!(m.uuid, "abababab-abab-abab-abab-abababababab");
        assert_eq!(m.joined, "1970-01-01T00:00:00.000000Z");
        assert_eq!(m.note, None);
        let _ = Role::Member;
        // A tuple takes the columns in order.
        let (id, name): (i64, String) = decode(&columns[..2], &values[..2]).unwrap();
        assert_eq!((id, name.as_str()), (7, "ann"));
    }

    #[test]
    fn a_field_that_cannot_take_its_column_names_it() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Wrong {
            id: i64,
        }
        let (columns, values) = row(vec![("id", Value::Text("seven".into()))]);
        let e = decode::<Wrong>(&columns, &values).unwrap_err().to_string();
        assert!(e.contains("\"id\"") && e.contains("text"), "{e}");
        let (columns, values) = row(vec![("other", Value::Int(1))]);
        let e = decode::<Wrong>(&columns, &values).unwrap_err().to_string();
        assert!(e.contains("missing field `id`"), "{e}");
    }
}
