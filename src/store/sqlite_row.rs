//! Rows of rusqlite decoded through serde, by column name, without copying.
//!
//! A row is a map from its column names to its values, as `sqlx::FromRow`
//! reads it on PostgreSQL (a tuple takes the columns in order, a scalar the
//! first one). Names and text are lent from SQLite's own buffers
//! (`Statement::column_name`, `ValueRef`), so a column costs an allocation
//! only where the struct keeps a `String`, a skipped column costs nothing,
//! and a `#[serde(flatten)]`ed struct buffers borrowed strings rather than
//! copies. `serde_rusqlite` copies every column name into a new
//! `Vec<String>` per statement and every text value into a `String`: with
//! the flattened route row that is a fifth of a grant read's instructions
//! (ADR 0015 in docs/adr/).

use rusqlite::Row;
use rusqlite::types::ValueRef;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;

/// Why a column could not be decoded.
#[derive(Debug)]
pub struct DecodeError(String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

impl de::Error for DecodeError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        DecodeError(msg.to_string())
    }
}

/// Decodes `row` into `T` (a struct whose fields are named as the columns;
/// columns it does not name are skipped).
pub fn decode<T: de::DeserializeOwned>(row: &Row<'_>) -> Result<T, DecodeError> {
    T::deserialize(RowDeserializer { row })
}

/// The whole row, as a map of column name to value.
struct RowDeserializer<'a, 'stmt> {
    row: &'a Row<'stmt>,
}

impl<'de> RowDeserializer<'de, '_> {
    fn first(&self) -> Result<Column<'de>, DecodeError> {
        let value = self
            .row
            .get_ref(0)
            .map_err(|e| DecodeError(e.to_string()))?;
        Ok(Column { value })
    }
}

/// A struct or map reads the columns by name, a tuple in order; any other
/// type is the first column's value.
impl<'de> de::Deserializer<'de> for RowDeserializer<'de, '_> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.first()?.deserialize_any(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let columns = self.row.as_ref().column_count();
        visitor.visit_map(Columns {
            row: self.row,
            next: 0,
            columns,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        let columns = self.row.as_ref().column_count();
        visitor.visit_seq(Columns {
            row: self.row,
            next: 0,
            columns,
        })
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.first()?.deserialize_bool(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.first()?.deserialize_option(visitor)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        self.first()?.deserialize_unit(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        self.first()?.deserialize_enum(name, variants, visitor)
    }

    forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit_struct identifier ignored_any
    }
}

/// The columns of a row, one map entry each.
struct Columns<'a, 'stmt> {
    row: &'a Row<'stmt>,
    next: usize,
    columns: usize,
}

impl<'de> MapAccess<'de> for Columns<'de, '_> {
    type Error = DecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DecodeError> {
        if self.next >= self.columns {
            return Ok(None);
        }
        let name = self
            .row
            .as_ref()
            .column_name(self.next)
            .map_err(|e| DecodeError(e.to_string()))?;
        seed.deserialize(name.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DecodeError> {
        let index = self.next;
        self.next += 1;
        let value = self
            .row
            .get_ref(index)
            .map_err(|e| DecodeError(e.to_string()))?;
        seed.deserialize(Column { value }).map_err(|e| {
            let name = self.row.as_ref().column_name(index).unwrap_or("?");
            DecodeError(format!("column {name}: {e}"))
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.columns - self.next)
    }
}

impl<'de> de::SeqAccess<'de> for Columns<'de, '_> {
    type Error = DecodeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DecodeError> {
        if self.next >= self.columns {
            return Ok(None);
        }
        self.next_value_seed(seed).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.columns - self.next)
    }
}

/// One column's value, lent by SQLite.
struct Column<'a> {
    value: ValueRef<'a>,
}

impl<'de> de::Deserializer<'de> for Column<'de> {
    type Error = DecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value {
            ValueRef::Null => visitor.visit_none(),
            ValueRef::Integer(i) => visitor.visit_i64(i),
            ValueRef::Real(f) => visitor.visit_f64(f),
            ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => visitor.visit_borrowed_str(text),
                Err(e) => Err(DecodeError(format!("text is not UTF-8: {e}"))),
            },
            ValueRef::Blob(bytes) => visitor.visit_borrowed_bytes(bytes),
        }
    }

    /// SQLite stores booleans as integers.
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value {
            ValueRef::Integer(i) => visitor.visit_bool(i != 0),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value {
            ValueRef::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        match self.value {
            ValueRef::Null => visitor.visit_unit(),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        visitor.visit_newtype_struct(self)
    }

    /// A column the struct does not name is not read at all.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DecodeError> {
        visitor.visit_unit()
    }

    /// A unit variant stored as its name.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DecodeError> {
        match self.value {
            ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => visitor.visit_enum(text.into_deserializer()),
                Err(e) => Err(DecodeError(format!("text is not UTF-8: {e}"))),
            },
            _ => self.deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit_struct seq tuple tuple_struct map struct
        identifier
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;
    use serde::Deserialize;

    use super::decode;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Inner {
        id: i64,
        name: String,
        #[serde(deserialize_with = "crate::store::sqlite::boolean")]
        private: bool,
        note: Option<String>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Outer {
        #[serde(flatten)]
        inner: Inner,
        extra: Option<i64>,
        open: bool,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Bot,
        Human,
    }

    fn one<T: serde::de::DeserializeOwned>(sql: &str) -> Result<T, super::DecodeError> {
        let conn = Connection::open_in_memory().unwrap();
        let mut stmt = conn.prepare(sql).unwrap();
        let mut rows = stmt.query([]).unwrap();
        let row = rows.next().unwrap().unwrap();
        decode(row)
    }

    #[test]
    fn structs_read_columns_by_name_and_skip_the_others() {
        let got: Inner =
            one("SELECT 'x' AS skipped, 'alice' AS name, 7 AS id, NULL AS note, 1 AS private")
                .unwrap();
        assert_eq!(
            got,
            Inner {
                id: 7,
                name: "alice".into(),
                private: true,
                note: None,
            }
        );
    }

    #[test]
    fn a_flattened_struct_reads_the_same_row() {
        let got: Outer = one(
            "SELECT 3 AS id, 'repo' AS name, 0 AS private, 'n' AS note, NULL AS extra, 1 AS open",
        )
        .unwrap();
        assert_eq!(
            got,
            Outer {
                inner: Inner {
                    id: 3,
                    name: "repo".into(),
                    private: false,
                    note: Some("n".into()),
                },
                extra: None,
                open: true,
            }
        );
    }

    #[test]
    fn tuples_scalars_and_enums() {
        let pair: (i64, Option<String>) = one("SELECT 5, NULL").unwrap();
        assert_eq!(pair, (5, None));
        let single: (String,) = one("SELECT 'only'").unwrap();
        assert_eq!(single.0, "only");
        let count: i64 = one("SELECT 42, 'ignored'").unwrap();
        assert_eq!(count, 42);
        let kind: (Kind,) = one("SELECT 'human'").unwrap();
        assert_eq!(kind.0, Kind::Human);
        assert!(one::<(Kind,)>("SELECT 'robot'").is_err());
        assert_eq!(one::<(Kind,)>("SELECT 'bot'").unwrap().0, Kind::Bot);
    }

    #[test]
    fn wrong_types_and_bad_text_are_errors_that_name_the_column() {
        let err = one::<Inner>("SELECT 'seven' AS id, 'a' AS name, 0 AS private, NULL AS note")
            .unwrap_err();
        assert!(err.to_string().contains("column id"), "{err}");
        let err =
            one::<Inner>("SELECT 1 AS id, CAST(x'ff' AS TEXT) AS name, 0 AS private, NULL AS note")
                .unwrap_err();
        assert!(err.to_string().contains("UTF-8"), "{err}");
        assert!(one::<Inner>("SELECT 1 AS id").is_err(), "a missing column");
    }
}
