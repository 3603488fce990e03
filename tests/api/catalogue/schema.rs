//! A JSON Schema checker for the keywords Writ's OpenAPI document, its MCP
//! tool schemas and the catalogue's form schemas use. It decides which
//! junk values the contract allows (the server may then accept them) and
//! which it forbids (the server must refuse them).

use std::collections::HashMap;
use std::sync::Mutex;

use regex::Regex;
use serde_json::Value;

/// Checks values against schemas, resolving `$ref`s in `doc`.
pub struct Checker {
    doc: Value,
    patterns: Mutex<HashMap<String, Regex>>,
}

impl Checker {
    pub fn new(doc: Value) -> Checker {
        Checker {
            doc,
            patterns: Mutex::new(HashMap::new()),
        }
    }

    /// The schema a `$ref` names, or the schema itself.
    pub fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let name = r.rsplit('/').next().unwrap_or_default();
                let target = &self.doc["components"]["schemas"][name];
                assert!(!target.is_null(), "unresolved $ref {r}");
                self.resolve(target)
            }
            None => schema,
        }
    }

    /// The types a schema admits (through `$ref` and `oneOf`/`anyOf`).
    pub fn types(&self, schema: &Value) -> Vec<String> {
        let schema = self.resolve(schema);
        let mut out: Vec<String> = match &schema["type"] {
            Value::String(t) => vec![t.clone()],
            Value::Array(ts) => ts
                .iter()
                .filter_map(|t| t.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };
        for key in ["oneOf", "anyOf"] {
            for sub in schema[key].as_array().into_iter().flatten() {
                out.extend(self.types(sub));
            }
        }
        out
    }

    /// True when `value` satisfies `schema`.
    pub fn valid(&self, schema: &Value, value: &Value) -> bool {
        let schema = self.resolve(schema);
        let map = match schema {
            Value::Bool(b) => return *b,
            Value::Object(map) => map,
            _ => panic!("not a schema: {schema}"),
        };
        if let Some(subs) = map.get("oneOf").and_then(Value::as_array)
            && subs.iter().filter(|s| self.valid(s, value)).count() != 1
        {
            return false;
        }
        if let Some(subs) = map.get("anyOf").and_then(Value::as_array)
            && !subs.iter().any(|s| self.valid(s, value))
        {
            return false;
        }
        if let Some(subs) = map.get("allOf").and_then(Value::as_array)
            && !subs.iter().all(|s| self.valid(s, value))
        {
            return false;
        }
        if let Some(types) = map.get("type") {
            let ok = match types {
                Value::String(t) => has_type(value, t),
                Value::Array(ts) => ts.iter().any(|t| has_type(value, t.as_str().unwrap_or(""))),
                _ => true,
            };
            if !ok {
                return false;
            }
        }
        if let Some(values) = map.get("enum").and_then(Value::as_array)
            && !values.iter().any(|v| same(v, value))
        {
            return false;
        }
        if let Some(c) = map.get("const")
            && !same(c, value)
        {
            return false;
        }
        match value {
            Value::String(s) => self.valid_string(map, s),
            Value::Number(_) => valid_number(map, value),
            Value::Array(items) => self.valid_array(map, items),
            Value::Object(members) => self.valid_object(map, members),
            _ => true,
        }
    }

    fn valid_string(&self, map: &serde_json::Map<String, Value>, s: &str) -> bool {
        let chars = s.chars().count() as u64;
        if map
            .get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|n| chars < n)
            || map
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|n| chars > n)
        {
            return false;
        }
        if map.get("format").and_then(Value::as_str) == Some("date-time") {
            use time::format_description::well_known::Rfc3339;
            if time::OffsetDateTime::parse(s, &Rfc3339).is_err() {
                return false;
            }
        }
        match map.get("pattern").and_then(Value::as_str) {
            Some(pattern) => self.matches(pattern, s),
            None => true,
        }
    }

    fn valid_array(&self, map: &serde_json::Map<String, Value>, items: &[Value]) -> bool {
        let n = items.len() as u64;
        if map
            .get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| n < m)
            || map
                .get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
        {
            return false;
        }
        if map.get("uniqueItems") == Some(&Value::Bool(true))
            && items
                .iter()
                .enumerate()
                .any(|(i, a)| items[..i].contains(a))
        {
            return false;
        }
        let prefix = map.get("prefixItems").and_then(Value::as_array);
        let skip = prefix.map_or(0, Vec::len);
        if let Some(prefix) = prefix
            && !prefix.iter().zip(items).all(|(s, v)| self.valid(s, v))
        {
            return false;
        }
        match map.get("items") {
            Some(schema) => items.iter().skip(skip).all(|v| self.valid(schema, v)),
            None => true,
        }
    }

    fn valid_object(
        &self,
        map: &serde_json::Map<String, Value>,
        members: &serde_json::Map<String, Value>,
    ) -> bool {
        let required = map.get("required").and_then(Value::as_array);
        if required
            .into_iter()
            .flatten()
            .any(|r| !members.contains_key(r.as_str().unwrap_or_default()))
        {
            return false;
        }
        let properties = map.get("properties").and_then(Value::as_object);
        members
            .iter()
            .all(|(name, v)| match properties.and_then(|p| p.get(name)) {
                Some(schema) => self.valid(schema, v),
                None => match map.get("additionalProperties") {
                    Some(extra) => self.valid(extra, v),
                    None => true,
                },
            })
    }

    /// An ECMA-262 pattern, unanchored, with negative lookaheads dropped
    /// (they refuse reserved names, which no junk value spells).
    fn matches(&self, pattern: &str, text: &str) -> bool {
        let mut cache = self.patterns.lock().unwrap_or_else(|e| e.into_inner());
        let re = cache.entry(pattern.to_owned()).or_insert_with(|| {
            Regex::new(&without_lookaheads(pattern))
                .unwrap_or_else(|e| panic!("pattern {pattern}: {e}"))
        });
        re.is_match(text)
    }
}

fn has_type(value: &Value, t: &str) -> bool {
    match t {
        "string" => value.is_string(),
        "integer" => value.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        other => panic!("unknown schema type {other}"),
    }
}

/// JSON equality where `1` and `1.0` are the same number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn valid_number(map: &serde_json::Map<String, Value>, value: &Value) -> bool {
    let f = value.as_f64().unwrap_or(f64::NAN);
    if map
        .get("minimum")
        .and_then(Value::as_f64)
        .is_some_and(|m| f < m)
        || map
            .get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|m| f > m)
    {
        return false;
    }
    match map.get("format").and_then(Value::as_str) {
        Some("int64") => value.is_i64() || value.as_u64().is_some_and(|u| u <= i64::MAX as u64),
        Some("int32") => value.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
        _ => true,
    }
}

/// Removes every `(?!...)` group from a pattern.
fn without_lookaheads(pattern: &str) -> String {
    let mut out = String::new();
    let mut rest = pattern;
    while let Some(start) = rest.find("(?!") {
        out.push_str(&rest[..start]);
        let bytes = rest.as_bytes();
        let (mut depth, mut i, mut in_class) = (0usize, start, false);
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 1,
                b'[' => in_class = true,
                b']' => in_class = false,
                b'(' if !in_class => depth += 1,
                b')' if !in_class => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        rest = &rest[(i + 1).min(rest.len())..];
    }
    out.push_str(rest);
    out
}

#[test]
fn lookaheads_are_dropped() {
    assert_eq!(without_lookaheads("^(?!(?:a|b)$)[a-z]+$"), "^[a-z]+$");
    assert_eq!(without_lookaheads("^x$"), "^x$");
    let checker = Checker::new(Value::Null);
    let login =
        serde_json::json!({"type": "string", "pattern": "^(?!(?:[aA][pP][iI])$)[a-z]{1,3}$"});
    assert!(checker.valid(&login, &Value::from("abc")));
    assert!(!checker.valid(&login, &Value::from("abcd")));
    let no_nul = serde_json::json!({"pattern": "^[^\\u0000]*$"});
    assert!(!checker.valid(&no_nul, &Value::from("a\0")));
    assert!(checker.valid(&no_nul, &Value::from("a\r\n")));
}
