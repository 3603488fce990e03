//! The server-side fixture, built the way users build it: the first admin by
//! the CLI (in [`crate::server`]), repositories, bots, tokens and
//! collaborators by the admin API, each grant prepared and approved by a human
//! through the browser forms, and confirmed by its bot over the agent API.

use std::time::Instant;

use anyhow::Context;
use reqwest::{Client, StatusCode, header};
use serde_json::{Value, json};

use crate::load::BotClient;
use crate::server::{OWNER, OWNER_PASSWORD, Server};

/// The proposal schema and version every grant route takes.
pub const PROPOSAL_SCHEMA: &str = "agent_work_grant.v1";

/// One bot, its token and its active grant.
#[derive(Debug, Clone)]
pub struct BotGrant {
    /// Bot login.
    pub login: String,
    /// `writ_…` token with read:repository, write:issue, read:issue.
    pub token: String,
    /// Repository name (owner is [`OWNER`]).
    pub repo: String,
    /// The active grant the bot submits under.
    pub grant_id: i64,
    /// Its proposal digest.
    pub digest: String,
}

/// All bots of the run, with their HTTP clients.
pub struct World {
    /// One client per bot, in bot order; row N uses the first N.
    pub bots: Vec<BotClient>,
}

/// Builds `bots` bots with one active grant each, over `repos` repositories.
pub async fn build(
    server: &Server,
    bots: usize,
    repos: usize,
    extra_grants: usize,
) -> anyhow::Result<World> {
    let began = Instant::now();
    let http = Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let admin = Api {
        http: http.clone(),
        base: server.base().to_owned(),
        token: server.admin_token.clone(),
    };
    for r in 0..repos {
        let body = json!({"owner": OWNER, "name": repo_name(r), "private": true});
        admin
            .send(
                admin.post("/api/v1/admin/repos", &body),
                StatusCode::CREATED,
            )
            .await?;
    }
    let mut grants = Vec::with_capacity(bots);
    for i in 0..bots {
        let login = format!("bench-bot-{i}");
        let repo = repo_name(i % repos);
        admin
            .send(
                admin.post(
                    "/api/v1/admin/users",
                    &json!({"login": login, "kind": "bot"}),
                ),
                StatusCode::CREATED,
            )
            .await?;
        let scopes = ["read:repository", "write:issue", "read:issue"];
        let created = admin
            .send(
                admin.post(
                    &format!("/api/v1/admin/users/{login}/tokens"),
                    &json!({"name": "bench", "scopes": scopes}),
                ),
                StatusCode::CREATED,
            )
            .await?;
        let token = created["token"]
            .as_str()
            .context("token in the answer")?
            .to_owned();
        let path = format!("/api/v1/repos/{OWNER}/{repo}/collaborators/{login}");
        let put = admin
            .http
            .put(format!("{}{path}", admin.base))
            .bearer_auth(&admin.token)
            .json(&json!({"permission": "read"}));
        admin.send(put, StatusCode::NO_CONTENT).await?;
        grants.push(BotGrant {
            login,
            token,
            repo,
            grant_id: 0,
            digest: String::new(),
        });
    }

    let mut browser = Browser::new(http.clone(), server.base());
    browser.login().await?;
    for g in &mut grants {
        for _ in 0..extra_grants {
            browser.prepare(&g.repo, &g.login).await?;
        }
        g.grant_id = browser.prepare(&g.repo, &g.login).await?;
        let bot = Api {
            http: http.clone(),
            base: server.base().to_owned(),
            token: g.token.clone(),
        };
        let path = grant_path(g);
        let grant = bot.send(bot.get(&path), StatusCode::OK).await?;
        g.digest = grant["grant"]["proposal_digest"]
            .as_str()
            .context("proposal_digest")?
            .to_owned();
        let triple = json!({"proposal_schema": PROPOSAL_SCHEMA, "proposal_version": 1,
                            "proposal_digest": g.digest});
        bot.send(
            bot.post(&format!("{path}/confirm"), &triple),
            StatusCode::OK,
        )
        .await?;
        browser.approve(&g.repo, g.grant_id).await?;
        let grant = bot.send(bot.get(&path), StatusCode::OK).await?;
        anyhow::ensure!(
            grant["grant"]["state"] == "active" && grant["grant"]["proposal_digest"] == *g.digest,
            "grant {} is not active after approval: {}",
            g.grant_id,
            grant["grant"]["state"]
        );
    }
    eprintln!(
        "writ-bench: fixture ({bots} bots, {repos} repositories, {} grants) in {:.1} s",
        bots * (1 + extra_grants),
        began.elapsed().as_secs_f64()
    );
    Ok(World {
        bots: grants
            .into_iter()
            .map(BotClient::new)
            .collect::<anyhow::Result<_>>()?,
    })
}

fn repo_name(i: usize) -> String {
    format!("bench-{i}")
}

/// `/api/v1/repos/{owner}/{repo}/agent-work-grants/{id}`.
pub fn grant_path(g: &BotGrant) -> String {
    format!(
        "/api/v1/repos/{OWNER}/{}/agent-work-grants/{}",
        g.repo, g.grant_id
    )
}

/// A token-authenticated JSON client.
struct Api {
    http: Client,
    base: String,
    token: String,
}

impl Api {
    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .header(header::AUTHORIZATION, format!("token {}", self.token))
    }

    fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .header(header::AUTHORIZATION, format!("token {}", self.token))
            .json(body)
    }

    /// Sends and insists on `want`; the JSON answer (Null when empty).
    async fn send(&self, req: reqwest::RequestBuilder, want: StatusCode) -> anyhow::Result<Value> {
        let r = req.build()?;
        let what = format!("{} {}", r.method(), r.url().path());
        let resp = self.http.execute(r).await?;
        let status = resp.status();
        let text = resp.text().await?;
        anyhow::ensure!(status == want, "{what}: {status} (wanted {want}): {text}");
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// A human's browser: the `writ_session` cookie, forms with their nonces.
struct Browser {
    http: Client,
    base: String,
    cookie: Option<String>,
}

impl Browser {
    fn new(http: Client, base: &str) -> Browser {
        Browser {
            http,
            base: base.to_owned(),
            cookie: None,
        }
    }

    fn keep_cookie(&mut self, resp: &reqwest::Response) {
        for v in resp.headers().get_all(header::SET_COOKIE) {
            let first = v.to_str().unwrap_or("").split(';').next().unwrap_or("");
            if let Some(value) = first.trim().strip_prefix("writ_session=") {
                self.cookie = (!value.is_empty()).then(|| value.to_owned());
            }
        }
    }

    async fn get(&mut self, path: &str) -> anyhow::Result<String> {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            req = req.header(header::COOKIE, format!("writ_session={c}"));
        }
        let resp = req.send().await?;
        self.keep_cookie(&resp);
        let status = resp.status();
        let text = resp.text().await?;
        anyhow::ensure!(status == StatusCode::OK, "GET {path}: {status}");
        Ok(text)
    }

    /// Posts the hidden fields of the page's form for `action` plus `fields`;
    /// insists on 303 and returns its `Location`.
    async fn submit(
        &mut self,
        page: &str,
        action: &str,
        fields: &[(&str, &str)],
    ) -> anyhow::Result<String> {
        let hidden = form_fields(page, action)
            .with_context(|| format!("no form posting to {action} on the page"))?;
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(hidden.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .extend_pairs(fields.iter().copied())
            .finish();
        let mut req = self
            .http
            .post(format!("{}{action}", self.base))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ORIGIN, &self.base)
            .header("Sec-Fetch-Site", "same-origin")
            .body(body);
        if let Some(c) = &self.cookie {
            req = req.header(header::COOKIE, format!("writ_session={c}"));
        }
        let resp = req.send().await?;
        self.keep_cookie(&resp);
        let status = resp.status();
        let location = resp
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = resp.text().await?;
        anyhow::ensure!(
            status == StatusCode::SEE_OTHER,
            "POST {action}: {status}: {}",
            text.chars().take(300).collect::<String>()
        );
        Ok(location)
    }

    async fn login(&mut self) -> anyhow::Result<()> {
        let page = self.get("/user/login").await?;
        let fields = [("login", OWNER), ("password", OWNER_PASSWORD)];
        self.submit(&page, "/user/login", &fields).await?;
        Ok(())
    }

    /// Prepares a grant for `agent` on `repo` (max_submissions at the limit).
    async fn prepare(&mut self, repo: &str, agent: &str) -> anyhow::Result<i64> {
        let action = format!("/{OWNER}/{repo}/agent-work-grants");
        let page = self.get(&format!("{action}/new")).await?;
        let fields = [
            ("agent", agent),
            (
                "task",
                "Benchmark work: file issues as fast as the ledger takes them.",
            ),
            ("summary", "writ-bench"),
            ("max_submissions", "1000000"),
            ("expires_at", ""),
            ("mcp_requirements", ""),
        ];
        let location = self.submit(&page, &action, &fields).await?;
        location
            .strip_prefix(&format!("{action}/"))
            .and_then(|id| id.parse().ok())
            .with_context(|| format!("prepare redirected to {location:?}"))
    }

    async fn approve(&mut self, repo: &str, id: i64) -> anyhow::Result<()> {
        let path = format!("/{OWNER}/{repo}/agent-work-grants/{id}");
        let page = self.get(&path).await?;
        self.submit(&page, &format!("{path}/approve"), &[]).await?;
        Ok(())
    }
}

/// The hidden inputs of the form whose `action` is `action`.
fn form_fields(page: &str, action: &str) -> Option<Vec<(String, String)>> {
    let mut rest = page;
    while let Some(start) = rest.find("<form") {
        let form = &rest[start..];
        let end = form.find("</form>").unwrap_or(form.len());
        let tag_end = form.find('>').unwrap_or(end);
        if attr(&form[..tag_end], "action").as_deref() == Some(action) {
            let mut fields = Vec::new();
            let mut inputs = &form[..end];
            while let Some(i) = inputs.find("<input") {
                let input = &inputs[i..];
                let tag = &input[..input.find('>').unwrap_or(input.len())];
                if attr(tag, "type").as_deref() == Some("hidden")
                    && let Some(name) = attr(tag, "name")
                {
                    fields.push((name, attr(tag, "value").unwrap_or_default()));
                }
                inputs = &input[tag.len()..];
            }
            return Some(fields);
        }
        rest = &form[end..];
    }
    None
}

/// The unescaped value of `name="…"` in a tag.
fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(unescape(&tag[start..start + len]))
}

fn unescape(s: &str) -> String {
    s.replace("&#x2f;", "/")
        .replace("&#47;", "/")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_hidden_fields_of_the_named_form() {
        let page = r#"<form method="post" action="/user/logout"><input type="hidden" name="nonce" value="a"></form>
<form method="post" action="/root/r&#x2f;x/approve" class="card">
  <input type="hidden" name="nonce" value="b1">
  <input type="hidden" name="state_revision" value="2">
  <input type="text" name="reason" value="no">
</form>"#;
        let fields = form_fields(page, "/root/r/x/approve").unwrap();
        assert_eq!(
            fields,
            vec![
                ("nonce".to_owned(), "b1".to_owned()),
                ("state_revision".to_owned(), "2".to_owned())
            ]
        );
        assert!(form_fields(page, "/nowhere").is_none());
    }
}
