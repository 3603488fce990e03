//! The junk every field gets, as text (path segments, query parameters,
//! form fields) and as JSON (body members), and whether the contract lets
//! the server accept it.

use serde_json::{Value, json};

use super::schema::Checker;

/// One kind of bad input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// The valid value followed by U+0000.
    Nul,
    /// The valid value followed by a byte that is not UTF-8.
    BadUtf8,
    /// The valid value followed by CR LF and a forged header line.
    Crlf,
    /// The valid value followed by 10 KiB.
    Long,
    /// A number where text is expected.
    Number,
    /// Text where a number is expected.
    Text,
    /// An array (a repeated key in URLs and forms).
    Array,
    /// An object (a bracketed key `name[a]` in URLs and forms).
    Object,
    Null,
    Bool,
    /// An integer beyond 64 bits.
    Huge,
    Negative,
    Float,
}

impl Case {
    /// The cases for a text field: all of them.
    pub const ALL: [Case; 13] = [
        Case::Nul,
        Case::BadUtf8,
        Case::Crlf,
        Case::Long,
        Case::Number,
        Case::Text,
        Case::Array,
        Case::Object,
        Case::Null,
        Case::Bool,
        Case::Huge,
        Case::Negative,
        Case::Float,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Case::Nul => "NUL",
            Case::BadUtf8 => "invalid UTF-8",
            Case::Crlf => "CRLF",
            Case::Long => "10 KiB",
            Case::Number => "number",
            Case::Text => "string",
            Case::Array => "array",
            Case::Object => "object",
            Case::Null => "null",
            Case::Bool => "boolean",
            Case::Huge => "huge integer",
            Case::Negative => "negative",
            Case::Float => "float",
        }
    }
}

/// What the contract says about one junk value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Invalid: the answer must be a 4xx and nothing may change.
    Refuse,
    /// Valid by the contract (e.g. CRLF in free text): any answer but a 5xx.
    MayAccept,
}

impl Expect {
    pub fn from_valid(valid: bool) -> Expect {
        if valid {
            Expect::MayAccept
        } else {
            Expect::Refuse
        }
    }
}

pub const HUGE: &str = "99999999999999999999999";
const CRLF_TAIL: &str = "\r\nX-Injected: 1";

/// The 10 KiB tail of [`Case::Long`].
pub fn long_tail() -> String {
    "a".repeat(10 * 1024)
}

/// A text field's value under a case (not for `BadUtf8`, `Array`,
/// `Object`, which each transport writes in its own way).
pub fn text_value(case: Case, base: &str) -> String {
    match case {
        Case::Nul => format!("{base}\0"),
        Case::Crlf => format!("{base}{CRLF_TAIL}"),
        Case::Long => format!("{base}{}", long_tail()),
        Case::Number => "12345".into(),
        Case::Text => "abc".into(),
        Case::Null => "null".into(),
        Case::Bool => "true".into(),
        Case::Huge => HUGE.into(),
        Case::Negative => "-1".into(),
        Case::Float => "1.5".into(),
        Case::Array => "[1,2]".into(),
        Case::Object => "{\"a\":1}".into(),
        Case::BadUtf8 => unreachable!("invalid UTF-8 is written by the transport"),
    }
}

/// What a text value means to a schema: a JSON number when the schema
/// takes numbers and the text is one, else the text.
pub fn text_as_json(checker: &Checker, schema: &Value, text: &str) -> Value {
    let types = checker.types(schema);
    let numeric = types.iter().any(|t| t == "integer" || t == "number");
    if numeric && let Ok(Value::Number(n)) = serde_json::from_str::<Value>(text) {
        return Value::Number(n);
    }
    Value::String(text.to_owned())
}

/// Where a text field travels.
#[derive(Clone, Copy, Debug)]
pub enum Slot {
    /// A path segment: arrays and objects are written as JSON text.
    Path,
    /// A query parameter or form field: an array is the key repeated, an
    /// object the key `name[a]` in place of `name`. `absent_ok`: whether
    /// leaving the field out is valid; `unknown_refused`: whether the
    /// bracketed key is itself refused (the JSON API's queries).
    Keyed {
        absent_ok: bool,
        unknown_refused: bool,
    },
}

/// Whether the contract accepts a text field under `case`.
pub fn judge_text(
    checker: &Checker,
    schema: &Value,
    base: &Value,
    case: Case,
    slot: Slot,
) -> Expect {
    let valid = match (case, slot) {
        // U+0000 and bytes that are not UTF-8 are never text Writ keeps.
        (Case::Nul | Case::BadUtf8, _) => false,
        (
            Case::Object,
            Slot::Keyed {
                absent_ok,
                unknown_refused,
            },
        ) => absent_ok && !unknown_refused,
        (Case::Array, Slot::Keyed { .. }) => {
            let mut items = match base {
                Value::Array(items) => items.clone(),
                other => vec![other.clone()],
            };
            items.push(text_as_json(
                checker,
                schema_items(checker, schema),
                "12345",
            ));
            checker.valid(schema, &Value::Array(items))
        }
        _ => {
            let value = match base {
                Value::Array(items) => {
                    let first = items.first().and_then(Value::as_str).unwrap_or_default();
                    let text = text_value(case, first);
                    let mut items = items.clone();
                    let one = text_as_json(checker, schema_items(checker, schema), &text);
                    match items.first_mut() {
                        Some(slot) => *slot = one,
                        None => items.push(one),
                    }
                    Value::Array(items)
                }
                other => {
                    let text = text_value(case, other.as_str().unwrap_or_default());
                    text_as_json(checker, schema, &text)
                }
            };
            checker.valid(schema, &value)
        }
    };
    Expect::from_valid(valid)
}

/// The item schema of an array schema (the schema itself otherwise).
fn schema_items<'a>(checker: &'a Checker, schema: &'a Value) -> &'a Value {
    let resolved = checker.resolve(schema);
    resolved
        .get("prefixItems")
        .and_then(|p| p.get(0))
        .or_else(|| resolved.get("items"))
        .unwrap_or(schema)
}

/// A JSON member's replacement under a case: the value the server sees
/// (for judging) and, where JSON text cannot hold it as a value, the raw
/// bytes to write in its place.
pub struct JsonJunk {
    pub value: Value,
    pub raw: Option<Vec<u8>>,
}

/// The replacement of `base` under `case`, or `None` when the case does
/// not apply (string cases on members that are not strings).
pub fn json_junk(case: Case, base: &Value) -> Option<JsonJunk> {
    let text = base.as_str();
    let plain = |value: Value| {
        Some(JsonJunk {
            value: value.clone(),
            raw: None,
        })
    };
    match case {
        Case::Nul | Case::Crlf | Case::Long => plain(Value::String(text_value(case, text?))),
        Case::BadUtf8 => {
            let mut raw = serde_json::to_vec(text?).expect("a string");
            raw.pop();
            raw.extend_from_slice(b"\xff\xfe\"");
            Some(JsonJunk {
                value: Value::Null,
                raw: Some(raw),
            })
        }
        Case::Number => plain(json!(12345)),
        Case::Text => plain(json!("abc")),
        Case::Array => plain(json!([base])),
        Case::Object => plain(json!({"value": base})),
        Case::Null => plain(Value::Null),
        Case::Bool => plain(json!(true)),
        Case::Huge => Some(JsonJunk {
            value: json!(1e23),
            raw: Some(HUGE.as_bytes().to_vec()),
        }),
        Case::Negative => plain(json!(-1)),
        Case::Float => plain(json!(1.5)),
    }
}

/// Every member of a JSON value as a JSON pointer (the root is `""`),
/// containers before their members.
pub fn pointers(value: &Value) -> Vec<String> {
    fn walk(value: &Value, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    let escaped = k.replace('~', "~0").replace('/', "~1");
                    walk(v, format!("{at}/{escaped}"), out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

const PLACEHOLDER: &str = "catalogue-placeholder-5e1f9a";

/// `base` with the member at `pointer` replaced: the bytes to send and the
/// value to judge (`None` when the bytes are not JSON at all).
pub fn replaced(base: &Value, pointer: &str, junk: &JsonJunk) -> (Vec<u8>, Option<Value>) {
    let mut judged = base.clone();
    *slot(&mut judged, pointer) = junk.value.clone();
    let Some(raw) = &junk.raw else {
        return (serde_json::to_vec(&judged).expect("JSON"), Some(judged));
    };
    let mut marked = base.clone();
    *slot(&mut marked, pointer) = Value::String(PLACEHOLDER.into());
    let text = serde_json::to_vec(&marked).expect("JSON");
    let quoted = format!("\"{PLACEHOLDER}\"");
    let at = text
        .windows(quoted.len())
        .position(|w| w == quoted.as_bytes())
        .expect("placeholder in the body");
    let mut bytes = text[..at].to_vec();
    bytes.extend_from_slice(raw);
    bytes.extend_from_slice(&text[at + quoted.len()..]);
    let judged = std::str::from_utf8(&bytes).is_ok().then_some(judged);
    (bytes, judged)
}

fn slot<'a>(value: &'a mut Value, pointer: &str) -> &'a mut Value {
    if pointer.is_empty() {
        return value;
    }
    value
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no member at {pointer}"))
}
