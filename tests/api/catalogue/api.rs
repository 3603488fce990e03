//! The JSON API's part of the catalogue, derived from the served OpenAPI
//! document: every operation, every path and query parameter, every body
//! member at any depth. A new operation is covered as soon as it is in the
//! document; the fixture must then name its valid input, or the catalogue
//! stops and says which is missing.

use reqwest::Method;
use serde_json::Value;

use super::cases::{Case, Expect, json_junk, pointers, replaced};
use super::fixture::Fixture;
use super::probe::{Probe, Send};
use super::route::{Param, Url, stray_query};
use super::schema::Checker;

/// One operation of the document.
pub struct Operation {
    pub id: String,
    pub method: Method,
    pub url: Url,
    pub tag: String,
    pub body: Option<Value>,
}

impl Operation {
    pub fn route(&self) -> String {
        format!("{} {}", self.method, self.url.template)
    }
}

/// Every operation of the document, with the fixture's valid values.
pub fn operations(doc: &Value, fx: &Fixture<'_>) -> Vec<Operation> {
    let mut out = Vec::new();
    let paths = doc["paths"].as_object().expect("paths in the document");
    for (template, item) in paths {
        for (method, op) in item.as_object().expect("a path item") {
            let id = op["operationId"].as_str().expect("operationId").to_owned();
            let mut url = Url {
                template: template.clone(),
                path: Vec::new(),
                query: Vec::new(),
                strict_query: true,
            };
            for p in op["parameters"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().expect("parameter name");
                let mut param = Param::new(name, p["schema"].clone(), None);
                param.required = p["required"] == true;
                match p["in"].as_str() {
                    Some("path") => {
                        param.base = Some(fx.path_base(&id, name).unwrap_or_else(|| {
                            panic!(
                                "the catalogue has no valid {name} for {id}: add it to the fixture"
                            )
                        }));
                        url.path.push(param);
                    }
                    Some("query") => {
                        param.base = fx
                            .query_base(&id)
                            .into_iter()
                            .find(|(k, _)| *k == name)
                            .map(|(_, v)| v);
                        url.query.push(param);
                    }
                    other => panic!("{id}: parameter {name} in {other:?}"),
                }
            }
            let body = op["requestBody"]["content"]["application/json"]["schema"].clone();
            out.push(Operation {
                id,
                method: method.to_uppercase().parse().expect("an HTTP method"),
                url,
                tag: op["tags"][0].as_str().unwrap_or_default().to_owned(),
                body: (!body.is_null()).then_some(body),
            });
        }
    }
    out
}

/// The token that reaches an operation's handler, by its tag.
fn token(fx: &Fixture<'_>, op: &Operation) -> String {
    match op.tag.as_str() {
        "agent" => fx.world.bot.clone(),
        "issues" => fx.world.alice_token.clone(),
        "admin" | "audit" => fx.app().admin_token.clone(),
        "events" => fx.world.alice_token.clone(),
        other => panic!("{}: no credentials for tag {other:?}", op.id),
    }
}

fn body_base(fx: &Fixture<'_>, op: &Operation) -> Option<Value> {
    op.body.as_ref().map(|_| {
        fx.body_base(&op.id).unwrap_or_else(|| {
            panic!(
                "the catalogue has no valid body for {}: add it to the fixture",
                op.id
            )
        })
    })
}

/// Every probe of the API: junk in each field of each operation, and one
/// control request per operation.
pub fn probes(doc: &Value, checker: &Checker, fx: &Fixture<'_>) -> Vec<Probe> {
    let mut out = Vec::new();
    let mut ops = operations(doc, fx);
    // The document itself is a route of the API too.
    ops.push(Operation {
        id: "openapi".into(),
        method: Method::GET,
        url: Url {
            template: "/api/v1/openapi.json".into(),
            path: Vec::new(),
            query: Vec::new(),
            strict_query: false,
        },
        tag: "admin".into(),
        body: None,
    });
    for mut op in ops {
        if op.url.path.is_empty() && op.url.query.is_empty() && op.body.is_none() {
            op.url.query.push(stray_query());
            op.url.strict_query = false;
        }
        let token = token(fx, &op);
        let send = |url: String, json: Option<Vec<u8>>| Send::Api {
            method: op.method.clone(),
            url: fx.app().url(&url),
            token: Some(token.clone()),
            json,
        };
        let base_bytes =
            |fx: &Fixture<'_>| body_base(fx, &op).map(|b| serde_json::to_vec(&b).unwrap());
        for (place, field) in op.url.places() {
            for case in Case::ALL {
                out.push(Probe {
                    route: op.route(),
                    field: field.clone(),
                    case: Some(case),
                    expect: op.url.judge(checker, place, case),
                    send: send(op.url.render(Some((place, case))), base_bytes(fx)),
                });
            }
        }
        if let Some(schema) = &op.body {
            let shape = body_base(fx, &op).expect("a body");
            for pointer in pointers(&shape) {
                for case in Case::ALL {
                    let base = body_base(fx, &op).expect("a body");
                    let Some(junk) = json_junk(case, member(&base, &pointer)) else {
                        continue;
                    };
                    let (bytes, judged) = replaced(&base, &pointer, &junk);
                    let expect = match judged {
                        Some(v) if case != Case::Nul => {
                            Expect::from_valid(checker.valid(schema, &v))
                        }
                        _ => Expect::Refuse,
                    };
                    out.push(Probe {
                        route: op.route(),
                        field: format!(
                            "body {}",
                            if pointer.is_empty() {
                                "(whole)"
                            } else {
                                &pointer
                            }
                        ),
                        case: Some(case),
                        expect,
                        send: send(op.url.render(None), Some(bytes)),
                    });
                }
            }
        }
        out.push(Probe {
            route: op.route(),
            field: "-".into(),
            case: None,
            expect: Expect::MayAccept,
            send: send(op.url.render(None), base_bytes(fx)),
        });
    }
    out
}

/// The member of `value` at a JSON pointer.
pub fn member<'v>(value: &'v Value, pointer: &str) -> &'v Value {
    if pointer.is_empty() {
        return value;
    }
    value
        .pointer(pointer)
        .unwrap_or_else(|| panic!("no member at {pointer}"))
}
