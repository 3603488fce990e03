//! One catalogue request: how it is sent, with which credentials, and how
//! its answer is judged.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

use super::cases::{Case, Expect, text_value};
use super::fixture::Fixture;
use crate::browser::{Browser, hidden_in};

/// Everything but the unreserved characters is percent-encoded.
const STRICT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a path segment or a query key or value.
pub fn encode(text: &str) -> String {
    utf8_percent_encode(text, STRICT).to_string()
}

/// The browser session a page or form is used in.
#[derive(Clone, Copy, Debug)]
pub enum Session {
    /// alice, admin of acme/widgets.
    Alice,
    /// root, the site admin.
    Root,
    /// A fresh browser that has only opened the login page.
    Anonymous,
}

/// A form posted from a page, with that page's hidden fields.
pub struct FormPost {
    pub session: Session,
    /// Loaded first, for the form's nonce (and state_revision).
    pub page: String,
    /// The `action` of the form on that page.
    pub action: String,
    /// Where the form is posted (the action, or a path with junk in it).
    pub post: String,
    /// Field name and values; [`FROM_PAGE`] takes the page's hidden value.
    pub fields: Vec<(String, Vec<String>)>,
    /// The field that gets the junk.
    pub junk: Option<(String, Case)>,
    /// The grant the form acts on, when junk the contract allows may use
    /// it up (approve, withdraw, edit): such junk gets a fresh grant.
    pub grant: Option<(i64, Fresh)>,
}

/// The state of a fresh grant.
#[derive(Clone, Copy, Debug)]
pub enum Fresh {
    /// awaiting_agent
    Prepared,
    /// awaiting_human
    Confirmed,
}

impl FormPost {
    /// The same post aimed at grant `new` instead of `old`.
    fn for_grant(&self, old: i64, new: i64) -> FormPost {
        let swap = |path: &str| {
            let from = format!("/agent-work-grants/{old}");
            let to = format!("/agent-work-grants/{new}");
            match path.strip_suffix(&from) {
                Some(head) => format!("{head}{to}"),
                None => path.replace(&format!("{from}/"), &format!("{to}/")),
            }
        };
        FormPost {
            session: self.session,
            page: swap(&self.page),
            action: swap(&self.action),
            post: swap(&self.post),
            fields: self.fields.clone(),
            junk: self.junk.clone(),
            grant: None,
        }
    }
}

/// A field value taken from the loaded page's form.
pub const FROM_PAGE: &str = "@page";

/// How a probe is sent.
pub enum Send {
    /// A JSON API request, with a token or none and a raw JSON body.
    Api {
        method: Method,
        url: String,
        token: Option<String>,
        json: Option<Vec<u8>>,
    },
    /// `POST /mcp` with builder-bot's token.
    Mcp { body: Vec<u8> },
    /// A GET in a browser session.
    Page { url: String, session: Session },
    /// A form POST.
    Form(FormPost),
}

/// One request of the catalogue.
pub struct Probe {
    /// The route, e.g. `POST /api/v1/admin/users`.
    pub route: String,
    /// The field, e.g. `body /login`, `path owner`, `form task`.
    pub field: String,
    /// The junk, or `None` for the control request with valid input.
    pub case: Option<Case>,
    pub expect: Expect,
    pub send: Send,
}

/// An answer, read in full.
pub struct Answer {
    pub status: StatusCode,
    pub content_type: String,
    pub body: String,
}

impl Probe {
    pub fn label(&self) -> String {
        let case = self.case.map_or("valid input", Case::name);
        format!("{} | {} | {case}", self.route, self.field)
    }

    /// True for the probes of `POST /mcp`.
    fn is_mcp(&self) -> bool {
        matches!(self.send, Send::Mcp { .. })
    }

    fn is_api(&self) -> bool {
        matches!(self.send, Send::Api { .. })
    }

    /// Sends the probe and reads the answer.
    pub async fn send(&self, fx: &Fixture<'_>) -> Answer {
        let app = fx.app();
        let request = match &self.send {
            Send::Api {
                method,
                url,
                token,
                json,
            } => {
                let mut r = app.client.request(method.clone(), url);
                if let Some(token) = token {
                    r = r.header("Authorization", format!("token {token}"));
                }
                if let Some(json) = json {
                    r = r
                        .header("Content-Type", "application/json")
                        .body(json.clone());
                }
                r
            }
            Send::Mcp { body } => app
                .client
                .post(app.url("/mcp"))
                .header("Authorization", format!("Bearer {}", fx.world.bot))
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream")
                .body(body.clone()),
            Send::Page { url, session } => browser_client(fx, *session).await.get(url),
            Send::Form(form) => {
                let allowed = self.case.is_some() && self.expect == Expect::MayAccept;
                return match form.grant {
                    Some((old, fresh)) if allowed => {
                        let new = fx.fresh_grant(fresh).await;
                        post_form(fx, &form.for_grant(old, new)).await
                    }
                    _ => post_form(fx, form).await,
                };
            }
        };
        read(request).await
    }

    /// Why the answer breaks the contract, if it does.
    pub fn fault(&self, answer: &Answer) -> Option<String> {
        let status = answer.status.as_u16();
        if status >= 500 {
            return Some(format!("{status}: a server error"));
        }
        if self.case.is_none() {
            return self.control_fault(answer);
        }
        if self.is_mcp() {
            return self.mcp_fault(answer);
        }
        if self.expect == Expect::Refuse && !(400..500).contains(&status) {
            return Some(format!("{status}: junk was not refused"));
        }
        if (400..500).contains(&status) {
            return self.error_body_fault(answer);
        }
        None
    }

    /// A 4xx body: JSON `{message, code, url}` on the API, HTML on pages.
    fn error_body_fault(&self, answer: &Answer) -> Option<String> {
        let status = answer.status.as_u16();
        if self.is_api() {
            let json: Value = serde_json::from_str(&answer.body).unwrap_or_default();
            let ok = ["message", "code", "url"]
                .iter()
                .all(|k| json[k].is_string());
            return (!ok || !answer.content_type.starts_with("application/json"))
                .then(|| format!("{status}: not a JSON error body"));
        }
        (!answer.content_type.starts_with("text/html"))
            .then(|| format!("{status}: not an HTML page ({})", answer.content_type))
    }

    /// `/mcp` answers are JSON-RPC; junk is refused with a JSON-RPC error
    /// or a tool result flagged `isError`.
    fn mcp_fault(&self, answer: &Answer) -> Option<String> {
        let status = answer.status.as_u16();
        let json: Value = serde_json::from_str(&answer.body).unwrap_or_default();
        if json["jsonrpc"] != "2.0" {
            return Some(format!("{status}: not a JSON-RPC answer"));
        }
        let refused = json["error"]["code"].is_i64() || json["result"]["isError"] == true;
        if self.expect == Expect::Refuse && !refused {
            return Some(format!("{status}: junk was not refused"));
        }
        if refused && status != 200 && !(400..500).contains(&status) {
            return Some(format!("{status}: a JSON-RPC error with this status"));
        }
        if let Some(native) = json["result"]["structuredContent"]["native_status"].as_u64()
            && json["result"]["isError"] == true
            && !(400..500).contains(&native)
        {
            return Some(format!("native_status {native} on a refused call"));
        }
        None
    }

    /// The valid request must succeed, or the refusals prove nothing.
    fn control_fault(&self, answer: &Answer) -> Option<String> {
        let status = answer.status.as_u16();
        if self.is_mcp() {
            let json: Value = serde_json::from_str(&answer.body).unwrap_or_default();
            let ok =
                status == 200 && json["result"].is_object() && json["result"]["isError"] != true;
            return (!ok).then(|| format!("{status}: the valid call failed"));
        }
        let ok = match &self.send {
            Send::Form(_) => status == 303,
            _ => (200..300).contains(&status),
        };
        (!ok).then(|| format!("{status}: the valid request failed"))
    }
}

async fn read(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.expect("send a catalogue request");
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = response.bytes().await.expect("read the answer");
    Answer {
        status,
        content_type,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// The cookie-keeping client of a session (an anonymous one is new and
/// has loaded the login page).
async fn browser_client(fx: &Fixture<'_>, session: Session) -> Client {
    match session {
        Session::Alice => fx.world.alice.client.clone(),
        Session::Root => fx.root.client.clone(),
        Session::Anonymous => {
            let browser = Browser::new(&fx.app().base);
            browser.get_page("/user/login").await.assert_status(200);
            browser.client
        }
    }
}

/// Loads the form's page, fills in its hidden fields, writes the junk and
/// posts it from Writ's own origin.
async fn post_form(fx: &Fixture<'_>, form: &FormPost) -> Answer {
    let client = browser_client(fx, form.session).await;
    let page = read(client.get(fx.app().url(&form.page))).await;
    assert_eq!(page.status, 200, "{}: {}", form.page, page.body);
    let mut body: Vec<u8> = Vec::new();
    for (name, values) in &form.fields {
        let mut filled = Vec::new();
        for v in values {
            if v != FROM_PAGE {
                filled.push(v.clone());
                continue;
            }
            let hidden = hidden_in(&page.body, &form.action, name);
            filled.push(hidden.unwrap_or_else(|| {
                panic!("no {name} in the form {} of {}", form.action, form.page)
            }));
        }
        let values = filled;
        let junk = form
            .junk
            .as_ref()
            .filter(|(field, _)| field == name)
            .map(|(_, case)| *case);
        write_field(&mut body, name, &values, junk);
    }
    let request = client
        .post(fx.app().url(&form.post))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Origin", fx.app().base.clone())
        .body(body);
    read(request).await
}

/// Appends `name=value` pairs for one field, with its junk.
fn write_field(body: &mut Vec<u8>, name: &str, values: &[String], junk: Option<Case>) {
    let mut pair = |key: &str, value: &[u8]| {
        if !body.is_empty() {
            body.push(b'&');
        }
        body.extend_from_slice(encode(key).as_bytes());
        body.push(b'=');
        body.extend_from_slice(value);
    };
    // Junk in a field the valid form leaves out: the field with that junk.
    let present = [String::new()];
    let values = if values.is_empty() && junk.is_some() {
        &present[..]
    } else {
        values
    };
    let first = values.first().cloned().unwrap_or_default();
    let rest = values.iter().skip(1);
    match junk {
        None => values.iter().for_each(|v| pair(name, encode(v).as_bytes())),
        Some(Case::Object) => values
            .iter()
            .for_each(|v| pair(&format!("{name}[a]"), encode(v).as_bytes())),
        Some(Case::Array) => {
            values.iter().for_each(|v| pair(name, encode(v).as_bytes()));
            pair(name, b"12345");
        }
        Some(Case::BadUtf8) => {
            // Raw bytes in the body, not a percent-encoded escape.
            let mut raw = encode(&first).into_bytes();
            raw.push(0xff);
            pair(name, &raw);
            rest.for_each(|v| pair(name, encode(v).as_bytes()));
        }
        Some(case) => {
            pair(name, encode(&text_value(case, &first)).as_bytes());
            rest.for_each(|v| pair(name, encode(v).as_bytes()));
        }
    }
}
