//! The browser's part of the catalogue, listed route by route (pages have
//! no machine-readable contract): each page's path segments and query
//! parameters, each form's fields with the rule the form applies, and the
//! routes without fields (`/healthz`, `/metrics`, …).

use reqwest::Method;
use serde_json::{Value, json};

use super::cases::{Case, Expect, Slot, judge_text};
use super::fixture::{Fixture, LOGIN_PASSWORD, LOGIN_USER};
use super::probe::{FROM_PAGE, FormPost, Fresh, Probe, Send, Session};
use super::route::{Param, Url, stray_query};
use super::schema::Checker;
use crate::world::{BOT, OWNER, REPO};

/// A form field: the rule its handler applies, as a schema over the text
/// (or, for repeated fields, the list of texts), and its valid value.
struct Field {
    name: &'static str,
    schema: Value,
    /// The valid values (none: left out of the valid form).
    base: Vec<String>,
    required: bool,
}

fn field(name: &'static str, schema: Value, base: &[&str], required: bool) -> Field {
    Field {
        name,
        schema,
        base: base.iter().map(|s| (*s).to_owned()).collect(),
        required,
    }
}

/// A hidden field the page fills in (nonce, state_revision): nothing else
/// is valid.
fn hidden(name: &'static str) -> Field {
    field(name, Value::Bool(false), &[FROM_PAGE], true)
}

struct Form {
    page: String,
    action: String,
    fields: Vec<Field>,
    grant: Option<(i64, Fresh)>,
}

struct WebRoute {
    method: Method,
    url: Url,
    session: Session,
    form: Option<Form>,
}

fn url(template: &str, path: Vec<Param>, query: Vec<Param>) -> Url {
    Url {
        template: template.to_owned(),
        path,
        query,
        strict_query: false,
    }
}

fn page(template: &str, session: Session, path: Vec<Param>, query: Vec<Param>) -> WebRoute {
    WebRoute {
        method: Method::GET,
        url: url(template, path, query),
        session,
        form: None,
    }
}

fn form(template: &str, session: Session, path: Vec<Param>, form: Form) -> WebRoute {
    WebRoute {
        method: Method::POST,
        url: url(template, path, Vec::new()),
        session,
        form: Some(form),
    }
}

/// The schema of an API path parameter (the pages share its rules).
fn api_param(doc: &Value, template: &str, name: &str) -> Value {
    doc["paths"][template]["get"]["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .map(|p| p["schema"].clone())
        .unwrap_or_else(|| panic!("no parameter {name} of GET {template}"))
}

/// The fields of the prepare and edit forms.
fn grant_fields() -> Vec<Field> {
    let text = |max: usize| json!({"type": "string", "maxLength": max});
    let nonblank = |max: usize| json!({"type": "string", "pattern": "\\S", "maxLength": max});
    let blank = json!({"type": "string", "pattern": "^\\s*$"});
    let row = |items: Value| json!({"type": "array", "minItems": 1, "maxItems": 1, "items": items});
    // A second value of these makes a second, blank-but-for-it row.
    let first_of = |pattern: &str| json!({"type": "array", "minItems": 1, "prefixItems": [{"type": "string", "pattern": pattern}]});
    let optional_row = json!({"type": "array", "maxItems": 1, "items": text(64 * 1024)});
    vec![
        field("agent", json!({"const": BOT}), &[BOT], true),
        field("task", nonblank(64 * 1024), &["Catalogue task"], true),
        field("summary", text(64 * 1024), &["Catalogue summary"], false),
        field(
            "max_submissions",
            json!({"type": "string", "pattern": "^\\s*([1-9][0-9]{0,5}|1000000)?\\s*$"}),
            &["10"],
            false,
        ),
        // No junk value is a future RFC 3339 time or a requirement array.
        field("expires_at", blank.clone(), &[""], false),
        field("mcp_requirements", blank, &[""], false),
        field("req_mcp_id", row(nonblank(64)), &["filesystem"], true),
        field("req_agent", row(nonblank(64)), &["explorer"], true),
        field(
            "req_requirement",
            first_of("^\\s*(required|optional)\\s*$"),
            &["optional"],
            true,
        ),
        field(
            "req_capabilities",
            optional_row.clone(),
            &["filesystem.project.read"],
            false,
        ),
        field(
            "req_fallback",
            first_of("^\\s*(continue_without_mcp|ask_user|block)\\s*$"),
            &["continue_without_mcp"],
            true,
        ),
        field("req_prohibited", optional_row.clone(), &[""], false),
        field("req_prompt_context", optional_row, &[""], false),
    ]
}

fn routes(doc: &Value, fx: &Fixture<'_>) -> Vec<WebRoute> {
    const GRANT: &str = "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}";
    let owner = || Param::new("owner", api_param(doc, GRANT, "owner"), OWNER.to_owned());
    let repo = || Param::new("repo", api_param(doc, GRANT, "repo"), REPO.to_owned());
    let id = |name: &str, value: i64| {
        Param::new(name, api_param(doc, GRANT, "grant_id"), value.to_string())
    };
    let grants = format!("/{OWNER}/{REPO}/agent-work-grants");
    let grant_page = |id: i64| format!("{grants}/{id}");
    let action = |id: i64, what: &str| format!("{grants}/{id}/{what}");
    let fs = format!("/{OWNER}/{REPO}/settings/filesystem-context");
    let states =
        json!({"enum": ["open", "all", "awaiting_agent", "awaiting_human", "active", "revoked"]});
    let mut edit = vec![hidden("nonce"), hidden("state_revision")];
    edit.extend(grant_fields());
    let mut prepare = vec![hidden("nonce")];
    prepare.extend(grant_fields());
    let bare = |template: &str, session| page(template, session, Vec::new(), vec![stray_query()]);
    vec![
        bare("/", Session::Alice),
        bare("/user/login", Session::Anonymous),
        bare("/static/writ.css", Session::Alice),
        bare("/healthz", Session::Alice),
        bare("/readyz", Session::Alice),
        bare("/metrics", Session::Alice),
        bare("/docs/errors", Session::Alice),
        bare("/admin/mcp", Session::Root),
        bare("/admin", Session::Root),
        bare("/admin/tool-grants", Session::Root),
        bare("/admin/webhooks", Session::Root),
        bare("/repositories", Session::Alice),
        page(
            "/{owner}/{repo}",
            Session::Alice,
            vec![owner(), repo()],
            vec![
                Param::new("state", states.clone(), "all".to_owned()),
                Param::new("page", json!({"type": "string"}), "1".to_owned()),
            ],
        ),
        page(
            "/{owner}/{repo}/agent-work-grants",
            Session::Alice,
            vec![owner(), repo()],
            vec![
                Param::new("state", states, "all".to_owned()),
                // The page number is lenient: anything but a page is page 1.
                Param::new("page", json!({"type": "string"}), "1".to_owned()),
            ],
        ),
        page(
            "/{owner}/{repo}/agent-work-grants/new",
            Session::Alice,
            vec![owner(), repo()],
            Vec::new(),
        ),
        page(
            "/{owner}/{repo}/agent-work-grants/{id}",
            Session::Alice,
            vec![owner(), repo(), id("id", fx.active_grant)],
            Vec::new(),
        ),
        page(
            "/{owner}/{repo}/settings/filesystem-context",
            Session::Alice,
            vec![owner(), repo()],
            Vec::new(),
        ),
        page(
            "/{owner}/{repo}/issues/{index}",
            Session::Alice,
            vec![owner(), repo(), id("index", fx.issue)],
            Vec::new(),
        ),
        form(
            "/user/login",
            Session::Anonymous,
            Vec::new(),
            Form {
                page: "/user/login".into(),
                action: "/user/login".into(),
                fields: vec![
                    field("login", json!({"const": LOGIN_USER}), &[LOGIN_USER], true),
                    field(
                        "password",
                        json!({"const": LOGIN_PASSWORD}),
                        &[LOGIN_PASSWORD],
                        true,
                    ),
                    hidden("nonce"),
                ],
                grant: None,
            },
        ),
        form(
            "/{owner}/{repo}/agent-work-grants",
            Session::Alice,
            vec![owner(), repo()],
            Form {
                page: format!("{grants}/new"),
                action: grants.clone(),
                fields: prepare,
                grant: None,
            },
        ),
        form(
            "/{owner}/{repo}/agent-work-grants/{id}/edit",
            Session::Alice,
            vec![owner(), repo(), id("id", fx.edit_grant)],
            Form {
                page: grant_page(fx.edit_grant),
                action: action(fx.edit_grant, "edit"),
                fields: edit,
                grant: Some((fx.edit_grant, Fresh::Prepared)),
            },
        ),
        form(
            "/{owner}/{repo}/agent-work-grants/{id}/approve",
            Session::Alice,
            vec![owner(), repo(), id("id", fx.approve_grant)],
            Form {
                page: grant_page(fx.approve_grant),
                action: action(fx.approve_grant, "approve"),
                fields: vec![
                    hidden("nonce"),
                    hidden("state_revision"),
                    // A checkbox: anything but "on" is unticked.
                    field(
                        "acknowledge_warnings",
                        json!({"type": "string"}),
                        &[],
                        false,
                    ),
                ],
                grant: Some((fx.approve_grant, Fresh::Confirmed)),
            },
        ),
        form(
            "/{owner}/{repo}/agent-work-grants/{id}/withdraw",
            Session::Alice,
            vec![owner(), repo(), id("id", fx.withdraw_grant)],
            Form {
                page: grant_page(fx.withdraw_grant),
                action: action(fx.withdraw_grant, "withdraw"),
                fields: vec![
                    hidden("nonce"),
                    hidden("state_revision"),
                    field(
                        "reason",
                        json!({"type": "string", "maxLength": 4096}),
                        &["Catalogue"],
                        false,
                    ),
                ],
                grant: Some((fx.withdraw_grant, Fresh::Confirmed)),
            },
        ),
        form(
            "/{owner}/{repo}/settings/filesystem-context",
            Session::Alice,
            vec![owner(), repo()],
            Form {
                page: fs.clone(),
                action: fs,
                fields: vec![
                    hidden("nonce"),
                    field(
                        "action",
                        json!({"enum": ["approve", "deny", "remove"]}),
                        &["approve"],
                        true,
                    ),
                    field(
                        "capabilities",
                        json!({"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^\\s*(read|list|search)\\s*$"}}),
                        &["read"],
                        true,
                    ),
                ],
                grant: None,
            },
        ),
        // Last among the controls: it ends alice's session.
        form(
            "/user/logout",
            Session::Alice,
            Vec::new(),
            Form {
                page: "/".into(),
                action: "/user/logout".into(),
                fields: vec![hidden("nonce")],
                grant: None,
            },
        ),
    ]
}

impl Field {
    fn base_value(&self) -> Value {
        let is_list = self.schema["type"] == "array";
        if is_list {
            Value::Array(self.base.iter().cloned().map(Value::String).collect())
        } else {
            Value::String(self.base.first().cloned().unwrap_or_default())
        }
    }
}

/// Every probe of the pages and forms.
pub fn probes(doc: &Value, checker: &Checker, fx: &Fixture<'_>) -> Vec<Probe> {
    let mut out = Vec::new();
    for route in routes(doc, fx) {
        let label = format!("{} {}", route.method, route.url.template);
        let send = |post: String, junk: Option<(String, Case)>| match &route.form {
            None => Send::Page {
                url: fx.app().url(&post),
                session: route.session,
            },
            Some(form) => Send::Form(FormPost {
                session: route.session,
                page: form.page.clone(),
                action: form.action.clone(),
                post,
                fields: form
                    .fields
                    .iter()
                    .map(|f| (f.name.to_owned(), f.base.clone()))
                    .collect(),
                junk,
                grant: form.grant,
            }),
        };
        for (place, name) in route.url.places() {
            for case in Case::ALL {
                out.push(Probe {
                    route: label.clone(),
                    field: name.clone(),
                    case: Some(case),
                    expect: route.url.judge(checker, place, case),
                    send: send(route.url.render(Some((place, case))), None),
                });
            }
        }
        for f in route.form.iter().flat_map(|form| &form.fields) {
            let slot = Slot::Keyed {
                absent_ok: !f.required,
                unknown_refused: false,
            };
            for case in Case::ALL {
                out.push(Probe {
                    route: label.clone(),
                    field: format!("form {}", f.name),
                    case: Some(case),
                    expect: judge_text(checker, &f.schema, &f.base_value(), case, slot),
                    send: send(route.url.render(None), Some((f.name.to_owned(), case))),
                });
            }
        }
        out.push(Probe {
            route: label.clone(),
            field: "-".into(),
            case: None,
            expect: Expect::MayAccept,
            send: send(route.url.render(None), None),
        });
    }
    out
}
