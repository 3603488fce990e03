//! Routes as text fields: path parameters and query parameters, each with
//! its schema and valid value, written into URLs with one field's junk.

use serde_json::Value;

use super::cases::{Case, Expect, Slot, judge_text, text_value};
use super::probe::encode;
use super::schema::Checker;

/// A path or query parameter.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub schema: Value,
    /// The valid value; `None` leaves an optional query parameter out.
    pub base: Option<String>,
    pub required: bool,
}

impl Param {
    pub fn new(name: &str, schema: Value, base: impl Into<Option<String>>) -> Param {
        Param {
            name: name.to_owned(),
            schema,
            base: base.into(),
            required: false,
        }
    }

    fn base_value(&self) -> Value {
        Value::String(self.base.clone().unwrap_or_default())
    }
}

/// A route's URL parts: `template` with `{name}` segments.
#[derive(Clone, Debug)]
pub struct Url {
    pub template: String,
    pub path: Vec<Param>,
    pub query: Vec<Param>,
    /// Whether unknown query parameters are refused (the JSON API).
    pub strict_query: bool,
}

/// Where a URL's junk goes.
#[derive(Clone, Copy, Debug)]
pub enum Place {
    Path(usize),
    Query(usize),
}

impl Url {
    /// Every (place, field label) of the URL.
    pub fn places(&self) -> Vec<(Place, String)> {
        let path = self.path.iter().enumerate();
        let query = self.query.iter().enumerate();
        path.map(|(i, p)| (Place::Path(i), format!("path {}", p.name)))
            .chain(query.map(|(i, p)| (Place::Query(i), format!("query {}", p.name))))
            .collect()
    }

    /// What the contract says about `case` at `place`.
    pub fn judge(&self, checker: &Checker, place: Place, case: Case) -> Expect {
        match place {
            Place::Path(i) => {
                let p = &self.path[i];
                judge_text(checker, &p.schema, &p.base_value(), case, Slot::Path)
            }
            Place::Query(i) => {
                let p = &self.query[i];
                let slot = Slot::Keyed {
                    absent_ok: !p.required,
                    unknown_refused: self.strict_query,
                };
                judge_text(checker, &p.schema, &p.base_value(), case, slot)
            }
        }
    }

    /// The path and query with `junk` written at its place.
    pub fn render(&self, junk: Option<(Place, Case)>) -> String {
        let mut path = self.template.clone();
        for (i, p) in self.path.iter().enumerate() {
            let base = p
                .base
                .clone()
                .unwrap_or_else(|| panic!("no value for {}", p.name));
            let value = match junk {
                Some((Place::Path(j), case)) if i == j => match case {
                    Case::BadUtf8 => format!("{}%FF", encode(&base)),
                    case => encode(&text_value(case, &base)),
                },
                _ => encode(&base),
            };
            path = path.replace(&format!("{{{}}}", p.name), &value);
        }
        let mut pairs: Vec<String> = Vec::new();
        for (i, p) in self.query.iter().enumerate() {
            let key = encode(&p.name);
            let case = match junk {
                Some((Place::Query(j), case)) if i == j => Some(case),
                _ => None,
            };
            let base = p.base.clone().unwrap_or_default();
            match case {
                None if p.base.is_none() => {}
                None => pairs.push(format!("{key}={}", encode(&base))),
                Some(Case::BadUtf8) => pairs.push(format!("{key}={}%FF", encode(&base))),
                Some(Case::Array) => {
                    pairs.push(format!("{key}={}", encode(&base)));
                    pairs.push(format!("{key}=12345"));
                }
                Some(Case::Object) => pairs.push(format!(
                    "{}={}",
                    encode(&format!("{}[a]", p.name)),
                    encode(&base)
                )),
                Some(case) => pairs.push(format!("{key}={}", encode(&text_value(case, &base)))),
            }
        }
        if pairs.is_empty() {
            path
        } else {
            format!("{path}?{}", pairs.join("&"))
        }
    }
}

/// The stand-in query parameter of a route that has no fields: junk in an
/// unknown parameter, which may be ignored but never let through when it
/// is not text.
pub fn stray_query() -> Param {
    Param::new("x", Value::Bool(true), None)
}
