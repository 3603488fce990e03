//! A JSON shape serde does not enforce by itself: a derived struct reads
//! from an array of its fields as well as from an object (`["acme/x"]` for
//! `{"to": "acme/x"}`). Lists of structs that clients write use [`objects`],
//! which reads each element only from an object, still with the struct's own
//! checks (unknown, missing and repeated members).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};

/// Deserializes a list whose every element is a struct written as a JSON
/// object; for `#[serde(deserialize_with = "objects")]`.
pub fn objects<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: de::Deserialize<'de>,
{
    d.deserialize_seq(List(PhantomData))
}

struct List<T>(PhantomData<T>);

impl<'de, T: de::Deserialize<'de>> Visitor<'de> for List<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(Object(PhantomData))? {
            out.push(item);
        }
        Ok(out)
    }
}

/// One element: the struct from an object only.
struct Object<T>(PhantomData<T>);

impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for Object<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        T::deserialize(MapOnly(d))
    }
}

/// Asks the underlying deserializer for a map where a struct is expected.
struct MapOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        a: String,
        #[serde(default)]
        b: Option<i64>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct List {
        #[serde(deserialize_with = "objects")]
        items: Vec<Pair>,
    }

    fn parse(text: &str) -> Result<List, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn elements_are_objects() {
        let list = parse(r#"{"items":[{"a":"x"},{"a":"y","b":2}]}"#).unwrap();
        assert_eq!(
            list.items[1],
            Pair {
                a: "y".into(),
                b: Some(2)
            }
        );
        assert!(parse(r#"{"items":[]}"#).unwrap().items.is_empty());
        assert!(
            parse(r#"{"items":[["x", 1]]}"#)
                .unwrap_err()
                .starts_with("invalid type")
        );
        assert!(parse(r#"{"items":{"a":"x"}}"#).is_err());
    }

    #[test]
    fn struct_checks_still_apply() {
        let unknown = parse(r#"{"items":[{"a":"x","c":1}]}"#).unwrap_err();
        assert!(unknown.starts_with("unknown field `c`"), "{unknown}");
        let repeated = parse(r#"{"items":[{"a":"x","a":"y"}]}"#).unwrap_err();
        assert!(repeated.starts_with("duplicate field `a`"), "{repeated}");
        let missing = parse(r#"{"items":[{"b":1}]}"#).unwrap_err();
        assert!(missing.starts_with("missing field `a`"), "{missing}");
    }
}
