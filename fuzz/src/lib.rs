//! What the fuzz targets share: a walk over JSON text that sees every
//! string (object keys and repeated members too), the shape every error
//! message Writ writes must have, and the split of a text input into fields.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// What [`scan`] saw in one JSON text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scan {
    /// Some string or key, at any depth, holds U+0000.
    pub nul: bool,
    /// The top-level value is an object that names one member twice.
    pub repeated_member: bool,
    /// The top-level value is an object.
    pub object: bool,
}

/// Walks one JSON text with serde_json's parser (same grammar, same depth
/// limit as `serde_json::from_slice::<Value>`); `None` when it is not JSON.
pub fn scan(bytes: &[u8]) -> Option<Scan> {
    let mut found = Scan::default();
    let mut parser = serde_json::Deserializer::from_slice(bytes);
    Walk {
        found: &mut found,
        top: true,
    }
    .deserialize(&mut parser)
    .ok()?;
    parser.end().ok()?;
    Some(found)
}

struct Walk<'a> {
    found: &'a mut Scan,
    top: bool,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.found.nul |= v.contains('\0');
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let found = self.found;
        while seq
            .next_element_seed(Walk {
                found: &mut *found,
                top: false,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let found = self.found;
        found.object |= self.top;
        let mut names = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            found.nul |= name.contains('\0');
            if self.top && !names.insert(name) {
                found.repeated_member = true;
            }
            map.next_value_seed(Walk {
                found: &mut *found,
                top: false,
            })?;
        }
        Ok(())
    }
}

/// Panics unless `message` is one Writ may show a client: 1 to 512 bytes,
/// no control character (it cannot forge a log line or a header).
pub fn assert_shown(message: &str, context: &str) {
    assert!(
        !message.is_empty() && message.len() <= 512,
        "{context}: message of {} bytes",
        message.len()
    );
    assert!(
        !message.chars().any(char::is_control),
        "{context}: control character in message {message:?}"
    );
}

/// Splits a text input into at most `n` fields at U+001F (the ASCII unit
/// separator), the format of the seed files of the text targets; missing
/// fields are empty.
pub fn fields(text: &str, n: usize) -> Vec<&str> {
    let mut out: Vec<&str> = text.splitn(n, '\u{1f}').collect();
    out.resize(n, "");
    out
}
