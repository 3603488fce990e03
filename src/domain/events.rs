//! The events' vocabulary (docs/events.md): their types, the feed's type
//! filter and its cursor.

/// Every event type, in the order of the spec's table.
pub const TYPES: [&str; 13] = [
    "grant.prepared",
    "grant.edited",
    "grant.confirmed",
    "grant.approved",
    "grant.approval_refused",
    "grant.withdrawn",
    "submission.created",
    "submission.admission_blocked",
    "receipt.changed",
    "filesystem_context.changed",
    "tool_grants.changed",
    "mcp_health.changed",
    "webhook.disabled",
];

/// The most digits of each half of a cursor (any such number fits an i64).
pub const CURSOR_DIGITS: usize = 18;

/// The event's schema version, in every event's JSON.
pub const SCHEMA_VERSION: u32 = 1;

/// The types a `type` filter names: a comma-separated list of types and
/// `prefix.*` patterns (`grant.*`). `None` when a part names no type.
pub fn parse_type_filter(raw: &str) -> Option<Vec<&'static str>> {
    let mut types = Vec::new();
    for part in raw.split(',') {
        let matched: Vec<&'static str> = match part.strip_suffix('*') {
            Some(prefix) if prefix.ends_with('.') => TYPES
                .iter()
                .copied()
                .filter(|t| t.starts_with(prefix))
                .collect(),
            Some(_) => Vec::new(),
            None => TYPES.iter().copied().filter(|t| *t == part).collect(),
        };
        if matched.is_empty() {
            return None;
        }
        for t in matched {
            if !types.contains(&t) {
                types.push(t);
            }
        }
    }
    Some(types)
}

/// A place in the feed: after the event of transaction `xact` (0 on SQLite)
/// and id `id`; the default is the beginning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Cursor {
    pub xact: i64,
    pub id: i64,
}

impl Cursor {
    /// The opaque text clients pass back.
    pub fn encode(self) -> String {
        format!("{}.{}", self.xact, self.id)
    }

    /// Parses what [`Cursor::encode`] wrote; `None` for anything else.
    pub fn decode(raw: &str) -> Option<Cursor> {
        let (xact, id) = raw.split_once('.')?;
        let number = |s: &str| -> Option<i64> {
            if s.is_empty() || s.len() > CURSOR_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        Some(Cursor {
            xact: number(xact)?,
            id: number(id)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_filters_name_known_types_only() {
        assert_eq!(
            parse_type_filter("grant.*").unwrap(),
            TYPES[..6].to_vec(),
            "a prefix names every type under it"
        );
        assert_eq!(
            parse_type_filter("submission.created,grant.approved").unwrap(),
            vec!["submission.created", "grant.approved"]
        );
        assert_eq!(
            parse_type_filter("grant.approved,grant.*").unwrap().len(),
            6,
            "each type once"
        );
        for bad in [
            "",
            "grant",
            "grant*",
            "*",
            "grant.approve",
            "nope.*",
            "grant.*,",
            "GRANT.*",
            "grant.*, submission.created",
            " grant.*",
        ] {
            assert_eq!(parse_type_filter(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let c = Cursor { xact: 812, id: 17 };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        assert_eq!(Cursor::decode("0.0"), Some(Cursor::default()));
        for bad in [
            "",
            ".",
            "1.",
            ".1",
            "-1.2",
            "1.-2",
            "1.2.3",
            "a.1",
            "1 .2",
            "+1.2",
            "99999999999999999999.1",
            "1234567890123456789.1",
            "1.2\0",
        ] {
            assert_eq!(Cursor::decode(bad), None, "{bad:?}");
        }
    }
}
