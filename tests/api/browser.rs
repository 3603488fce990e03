//! A browser stand-in: a cookie-keeping client that never follows redirects,
//! plus just enough HTML reading to find a form's hidden inputs.
#![allow(dead_code)]

use reqwest::Client;
use serde::Serialize;

use crate::helpers::{Resp, plain_client};

/// One person's browser, with its own cookie jar.
pub struct Browser {
    pub client: Client,
    /// The public base URL, e.g. `http://127.0.0.1:4000`.
    pub base: String,
    /// `name=value` of every cookie the successful login set.
    pub session_cookies: Vec<String>,
}

impl Browser {
    pub fn new(base: &str) -> Browser {
        Browser {
            client: plain_client(true),
            base: base.to_owned(),
            session_cookies: Vec::new(),
        }
    }

    /// The configured public origin (the base has no path here).
    pub fn origin(&self) -> String {
        self.base.clone()
    }

    /// A new browser that has logged in; panics unless the login answers 303.
    pub async fn logged_in(base: &str, login: &str, password: &str) -> Browser {
        let mut browser = Browser::new(base);
        browser.login(login, password).await.assert_status(303);
        browser
    }

    /// Loads the login page, then posts its form with the page's nonce.
    pub async fn login(&mut self, login: &str, password: &str) -> Resp {
        let page = self.get_page("/user/login").await;
        page.assert_status(200);
        let nonce = nonce_in(&page.body, "/user/login")
            .or_else(|| any_hidden(&page.body, "nonce"))
            .expect("the login page has a nonce");
        let fields = [("login", login), ("password", password), ("nonce", &nonce)];
        let origin = self.origin();
        let resp = self.post_form("/user/login", &fields, Some(&origin)).await;
        if resp.status.as_u16() == 303 {
            self.session_cookies = resp
                .headers
                .get_all("set-cookie")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(|v| v.split(';').next().unwrap_or_default().trim().to_owned())
                .collect();
        }
        resp
    }

    /// Logs out with the nonce of the logout form on the home page.
    pub async fn logout(&self) -> Resp {
        let home = self.get_page("/").await;
        let nonce = nonce_in(&home.body, "/user/logout").unwrap_or_default();
        let origin = self.origin();
        self.post_form("/user/logout", &[("nonce", nonce)], Some(&origin))
            .await
    }

    pub async fn get_page(&self, path: &str) -> Resp {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET page");
        Resp::read(response).await
    }

    /// Posts a form-urlencoded body, with `Origin` when given.
    pub async fn post_form<T: Serialize + ?Sized>(
        &self,
        path: &str,
        fields: &T,
        origin: Option<&str>,
    ) -> Resp {
        let headers: Vec<(&str, &str)> = origin.map(|o| ("Origin", o)).into_iter().collect();
        self.post_form_with(path, fields, &headers).await
    }

    /// Posts a form-urlencoded body with exactly these extra headers.
    pub async fn post_form_with<T: Serialize + ?Sized>(
        &self,
        path: &str,
        fields: &T,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .form(fields);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        Resp::read(request.send().await.expect("POST form")).await
    }
}

/// The `Location` of a redirect, with the public base stripped.
pub fn location_path(resp: &Resp, base: &str) -> String {
    let location = resp.header("location").expect("Location header");
    location
        .strip_prefix(base)
        .map(str::to_owned)
        .unwrap_or(location)
}

/// The forms of a page: `(action, inner html)` for each `<form>`.
pub fn forms(html: &str) -> Vec<(String, &str)> {
    let lower = html.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut pos = 0;
    while let Some(found) = lower[pos..].find("<form") {
        let start = pos + found;
        let Some(tag_len) = lower[start..].find('>') else {
            break;
        };
        let tag_end = start + tag_len;
        let end = lower[tag_end..]
            .find("</form>")
            .map_or(html.len(), |e| tag_end + e);
        let action = attr(&html[start..tag_end], "action").unwrap_or_default();
        out.push((action, &html[tag_end + 1..end]));
        pos = end;
    }
    out
}

/// The actions of every form on a page.
pub fn form_actions(html: &str) -> Vec<String> {
    forms(html).into_iter().map(|(action, _)| action).collect()
}

/// The value of the hidden input `name` inside the form posting to `action`.
pub fn hidden_in(html: &str, action: &str, name: &str) -> Option<String> {
    forms(html)
        .into_iter()
        .find(|(a, _)| a == action)
        .and_then(|(_, inner)| any_hidden(inner, name))
}

/// The nonce of the form posting to `action`.
pub fn nonce_in(html: &str, action: &str) -> Option<String> {
    hidden_in(html, action, "nonce")
}

/// The `state_revision` of the form posting to `action`.
pub fn state_revision_in(html: &str, action: &str) -> Option<String> {
    hidden_in(html, action, "state_revision")
}

/// The value of the first `<input name="{name}">` anywhere in `html`.
pub fn any_hidden(html: &str, name: &str) -> Option<String> {
    let lower = html.to_ascii_lowercase();
    let mut pos = 0;
    while let Some(found) = lower[pos..].find("<input") {
        let start = pos + found;
        let end = lower[start..].find('>').map_or(html.len(), |e| start + e);
        let tag = &html[start..end];
        if attr(tag, "name").as_deref() == Some(name) {
            return attr(tag, "value");
        }
        pos = end;
    }
    None
}

/// One attribute of a start tag (`<tag a="1" b='2' c=3`), entities decoded.
pub fn attr(tag: &str, wanted: &str) -> Option<String> {
    let bytes = tag.as_bytes();
    // Skip the tag name.
    let mut i = tag.find(|c: char| c.is_ascii_whitespace())?;
    while i < bytes.len() {
        while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b'/') {
            i += 1;
        }
        let name_start = i;
        while i < bytes.len() && !b"= \t\r\n/>".contains(&bytes[i]) {
            i += 1;
        }
        let name = tag[name_start..i].to_ascii_lowercase();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = None;
        if i < bytes.len() && bytes[i] == b'=' {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            let (start, end) = if i < bytes.len() && (bytes[i] == b'"' || bytes[i] == b'\'') {
                let quote = bytes[i];
                let close = tag[i + 1..]
                    .find(quote as char)
                    .map_or(tag.len(), |e| i + 1 + e);
                (i + 1, close)
            } else {
                let end = tag[i..]
                    .find(|c: char| c.is_ascii_whitespace() || c == '>')
                    .map_or(tag.len(), |e| i + e);
                (i, end)
            };
            value = Some(decode_entities(&tag[start..end]));
            i = end + 1;
        }
        if name.is_empty() {
            i += 1;
            continue;
        }
        if name == wanted {
            return Some(value.unwrap_or_default());
        }
    }
    None
}

/// Decodes the character references a template engine writes in attributes.
pub fn decode_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest.find(';').filter(|&s| s <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn reads_hidden_inputs_of_the_right_form() {
    let html = r#"<html><form method="post" action="/a/b/agent-work-grants/1/approve">
        <input type="hidden" name="nonce" value="n-approve">
        <input type="hidden" name="state_revision" value="2"></form>
        <FORM action='&#x2f;a/b/agent-work-grants/1/withdraw' method=post>
        <input value="n&amp;w" name="nonce" type="hidden"/>
        <input type=hidden name=state_revision value=2></FORM>"#;
    let approve = "/a/b/agent-work-grants/1/approve";
    let withdraw = "/a/b/agent-work-grants/1/withdraw";
    assert_eq!(nonce_in(html, approve).as_deref(), Some("n-approve"));
    assert_eq!(nonce_in(html, withdraw).as_deref(), Some("n&w"));
    assert_eq!(state_revision_in(html, withdraw).as_deref(), Some("2"));
    assert_eq!(nonce_in(html, "/a/b/agent-work-grants/1/edit"), None);
    assert_eq!(form_actions(html), vec![approve, withdraw]);
}
