//! The standard fixture: a private repository `acme/widgets`, its human admin
//! alice (logged in), two bots with write access, and grant flows through the
//! browser forms and the agent API.
#![allow(dead_code)]

use serde_json::{Value, json};

use crate::browser::{Browser, location_path, nonce_in, state_revision_in};
use crate::helpers::{Auth, Resp, TestApp, confirm_body, grant_path};

pub const OWNER: &str = "acme";
pub const REPO: &str = "widgets";
pub const ALICE: &str = "alice";
pub const ALICE_PW: &str = "alice-password-1";
pub const BOT: &str = "builder-bot";
pub const RIVAL: &str = "rival-bot";
/// What the adapter's bot token carries.
pub const BOT_SCOPES: &[&str] = &["read:repository", "write:issue", "read:issue"];
pub const ALL_SCOPES: &[&str] = &[
    "read:repository",
    "write:repository",
    "read:issue",
    "write:issue",
    "read:user",
    "write:user",
    "read:admin",
    "write:admin",
];

/// The prepare (and edit) form fields.
#[derive(Clone, Debug)]
pub struct Prepare {
    pub agent: String,
    pub task: String,
    pub summary: String,
    pub max_submissions: String,
    pub expires_at: Option<String>,
    pub mcp_requirements: Option<String>,
}

impl Prepare {
    pub fn new(agent: &str, task: &str) -> Prepare {
        Prepare {
            agent: agent.to_owned(),
            task: task.to_owned(),
            summary: format!("Summary of: {task}"),
            max_submissions: "10".to_owned(),
            expires_at: None,
            mcp_requirements: None,
        }
    }

    pub fn fields(&self) -> Vec<(String, String)> {
        let mut fields = vec![
            ("agent".to_owned(), self.agent.clone()),
            ("task".to_owned(), self.task.clone()),
            ("summary".to_owned(), self.summary.clone()),
            ("max_submissions".to_owned(), self.max_submissions.clone()),
        ];
        if let Some(expires_at) = &self.expires_at {
            fields.push(("expires_at".to_owned(), expires_at.clone()));
        }
        if let Some(requirements) = &self.mcp_requirements {
            fields.push(("mcp_requirements".to_owned(), requirements.clone()));
        }
        fields
    }
}

/// `/{owner}/{repo}/agent-work-grants/{id}` and its form actions.
pub fn page_path(owner: &str, repo: &str, id: i64) -> String {
    format!("/{owner}/{repo}/agent-work-grants/{id}")
}

pub fn action_path(owner: &str, repo: &str, id: i64, action: &str) -> String {
    format!("/{owner}/{repo}/agent-work-grants/{id}/{action}")
}

impl Browser {
    /// Loads the prepare page and posts the form with its nonce.
    pub async fn prepare(&self, owner: &str, repo: &str, form: &Prepare) -> Resp {
        let page = self
            .get_page(&format!("/{owner}/{repo}/agent-work-grants/new"))
            .await;
        page.assert_status(200);
        let action = format!("/{owner}/{repo}/agent-work-grants");
        let nonce = nonce_in(&page.body, &action).expect("prepare form with a nonce");
        let mut fields = form.fields();
        fields.push(("nonce".to_owned(), nonce));
        self.post_form(&action, &fields, Some(&self.origin())).await
    }

    /// Prepares a grant and returns its id from the redirect.
    pub async fn prepare_ok(&self, owner: &str, repo: &str, form: &Prepare) -> i64 {
        let resp = self.prepare(owner, repo, form).await;
        prepared_id(&resp, &self.base, owner, repo)
    }

    /// The grant page's HTML (asserting 200).
    pub async fn grant_page(&self, owner: &str, repo: &str, id: i64) -> String {
        let resp = self.get_page(&page_path(owner, repo, id)).await;
        resp.assert_status(200);
        resp.body
    }

    /// Posts the form `action` (edit, approve, withdraw) found on an already
    /// loaded grant page, with its nonce and state_revision.
    pub async fn submit_from(
        &self,
        page: &str,
        owner: &str,
        repo: &str,
        id: i64,
        action: &str,
        extra: &[(String, String)],
    ) -> Resp {
        let path = action_path(owner, repo, id, action);
        let nonce = nonce_in(page, &path).unwrap_or_else(|| panic!("no {path} form"));
        let revision = state_revision_in(page, &path).expect("state_revision in the form");
        let mut fields = vec![
            ("nonce".to_owned(), nonce),
            ("state_revision".to_owned(), revision),
        ];
        fields.extend_from_slice(extra);
        self.post_form(&path, &fields, Some(&self.origin())).await
    }

    /// Loads the grant page and posts its `action` form.
    pub async fn grant_action(
        &self,
        owner: &str,
        repo: &str,
        id: i64,
        action: &str,
        extra: &[(String, String)],
    ) -> Resp {
        let page = self.grant_page(owner, repo, id).await;
        self.submit_from(&page, owner, repo, id, action, extra)
            .await
    }
}

/// The grant id of a successful prepare (303 to the grant page).
#[track_caller]
pub fn prepared_id(resp: &Resp, base: &str, owner: &str, repo: &str) -> i64 {
    resp.assert_status(303);
    let location = location_path(resp, base);
    let prefix = format!("/{owner}/{repo}/agent-work-grants/");
    let id = location
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("prepare redirected to {location}"));
    id.parse().expect("grant id in Location")
}

/// The standard fixture.
pub struct World<'a> {
    pub app: &'a TestApp,
    /// builder-bot's token with [`BOT_SCOPES`].
    pub bot: String,
    /// rival-bot's token with [`BOT_SCOPES`]; rival-bot can write acme/widgets.
    pub rival: String,
    /// alice's token with every scope.
    pub alice_token: String,
    /// alice, admin of acme/widgets, logged in.
    pub alice: Browser,
}

impl<'a> World<'a> {
    pub async fn new(app: &'a TestApp) -> World<'a> {
        app.create_user(OWNER, "human", None).await;
        app.create_user(ALICE, "human", Some(ALICE_PW)).await;
        app.create_user(BOT, "bot", None).await;
        app.create_user(RIVAL, "bot", None).await;
        app.create_repo(OWNER, REPO, true).await;
        app.set_collaborator(OWNER, REPO, ALICE, "admin").await;
        app.set_collaborator(OWNER, REPO, BOT, "write").await;
        app.set_collaborator(OWNER, REPO, RIVAL, "write").await;
        let bot = app.create_token(BOT, BOT_SCOPES).await.token;
        let rival = app.create_token(RIVAL, BOT_SCOPES).await.token;
        let alice_token = app.create_token(ALICE, ALL_SCOPES).await.token;
        let alice = Browser::logged_in(&app.base, ALICE, ALICE_PW).await;
        World {
            app,
            bot,
            rival,
            alice_token,
            alice,
        }
    }

    /// Creates a human with a password, optionally a collaborator of
    /// acme/widgets, and logs them in.
    pub async fn human(&self, login: &str, permission: Option<&str>) -> Browser {
        let password = format!("{login}-password-1");
        self.app.create_user(login, "human", Some(&password)).await;
        if let Some(permission) = permission {
            self.app
                .set_collaborator(OWNER, REPO, login, permission)
                .await;
        }
        Browser::logged_in(&self.app.base, login, &password).await
    }

    /// alice prepares a grant for builder-bot on acme/widgets.
    pub async fn prepare(&self, task: &str) -> i64 {
        self.alice
            .prepare_ok(OWNER, REPO, &Prepare::new(BOT, task))
            .await
    }

    /// builder-bot reads a grant of acme/widgets: the response.
    pub async fn read(&self, id: impl std::fmt::Display) -> Resp {
        self.app
            .get(&grant_path(OWNER, REPO, id), Auth::Token(&self.bot))
            .await
    }

    /// builder-bot reads a grant of acme/widgets: the `grant` object.
    pub async fn grant(&self, id: i64) -> Value {
        let resp = self.read(id).await;
        resp.assert_status(200);
        resp.json()["grant"].clone()
    }

    /// builder-bot confirms with this body.
    pub async fn confirm_with(&self, id: impl std::fmt::Display, body: Value) -> Resp {
        let path = format!("{}/confirm", grant_path(OWNER, REPO, id));
        self.app
            .post_json(&path, Auth::Token(&self.bot), body)
            .await
    }

    /// builder-bot confirms with the grant's current digest.
    pub async fn confirm(&self, id: i64) -> Resp {
        let grant = self.grant(id).await;
        let digest = grant["proposal_digest"]
            .as_str()
            .expect("digest")
            .to_owned();
        self.confirm_with(id, confirm_body(&digest)).await
    }

    /// Prepared and confirmed: awaiting_human.
    pub async fn confirmed(&self, task: &str) -> i64 {
        let id = self.prepare(task).await;
        self.confirm(id).await.assert_status(200);
        id
    }

    /// Prepared, confirmed and approved by alice: active.
    pub async fn active(&self, task: &str) -> i64 {
        let id = self.confirmed(task).await;
        self.approve(id).await.assert_status(303);
        id
    }

    pub async fn approve(&self, id: i64) -> Resp {
        self.alice
            .grant_action(OWNER, REPO, id, "approve", &[])
            .await
    }

    pub async fn withdraw(&self, id: i64) -> Resp {
        let reason = vec![("reason".to_owned(), "no longer needed".to_owned())];
        self.alice
            .grant_action(OWNER, REPO, id, "withdraw", &reason)
            .await
    }

    /// Reads the grant again and asserts it is exactly `before`.
    pub async fn assert_unchanged(&self, id: i64, before: &Value) {
        let after = self.grant(id).await;
        assert_eq!(before, &after, "grant {id} changed");
    }
}

/// The `grant` of an error body (every 409 on a grant route carries it).
#[track_caller]
pub fn grant_of(resp: &Resp) -> Value {
    let json = resp.json();
    assert!(json["grant"].is_object(), "no grant in: {}", resp.body);
    json["grant"].clone()
}

/// `{"state": .., "state_revision": ..}` of a grant, for compact asserts.
pub fn state_of(grant: &Value) -> Value {
    json!({"state": grant["state"], "state_revision": grant["state_revision"]})
}

// ---------------------------------------------------------------------------
// Submissions (handoff), readback and issues.
// ---------------------------------------------------------------------------

/// A fresh canonical lowercase UUIDv4 request key.
pub fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `.../agent-work-grants/{id}/issues`: the submit route.
pub fn submit_path(owner: &str, repo: &str, id: impl std::fmt::Display) -> String {
    format!("{}/issues", grant_path(owner, repo, id))
}

/// `.../agent-work-grants/{id}/submissions/{key}`: the readback route.
pub fn readback_path(owner: &str, repo: &str, id: impl std::fmt::Display, key: &str) -> String {
    format!("{}/submissions/{key}", grant_path(owner, repo, id))
}

/// `/api/v1/repos/{owner}/{repo}/issues`
pub fn issues_path(owner: &str, repo: &str) -> String {
    format!("/api/v1/repos/{owner}/{repo}/issues")
}

/// `/api/v1/repos/{owner}/{repo}/issues/{index}`
pub fn issue_path(owner: &str, repo: &str, index: impl std::fmt::Display) -> String {
    format!("/api/v1/repos/{owner}/{repo}/issues/{index}")
}

/// The body of a submit request.
pub fn submit_body(digest: &str, key: &str, title: &str, body: &str) -> Value {
    json!({
        "proposal_schema": "agent_work_grant.v1",
        "proposal_version": 1,
        "proposal_digest": digest,
        "request_key": key,
        "title": title,
        "body": body,
    })
}

impl World<'_> {
    /// The grant's current proposal digest.
    pub async fn digest(&self, id: i64) -> String {
        self.grant(id).await["proposal_digest"]
            .as_str()
            .expect("proposal_digest")
            .to_owned()
    }

    /// alice prepares the grant described by `form`; builder-bot confirms and
    /// alice approves it: active.
    pub async fn active_with(&self, form: &Prepare) -> i64 {
        let id = self.alice.prepare_ok(OWNER, REPO, form).await;
        self.confirm(id).await.assert_status(200);
        self.approve(id).await.assert_status(303);
        id
    }

    /// builder-bot submits this body to grant `id` of acme/widgets.
    pub async fn submit_with(&self, id: impl std::fmt::Display, body: Value) -> Resp {
        self.app
            .post_json(&submit_path(OWNER, REPO, id), Auth::Token(&self.bot), body)
            .await
    }

    /// builder-bot submits with the grant's current digest.
    pub async fn submit(&self, id: i64, key: &str, title: &str, body: &str) -> Resp {
        let digest = self.digest(id).await;
        self.submit_with(id, submit_body(&digest, key, title, body))
            .await
    }

    /// builder-bot submits with the current digest and expects 201: the
    /// `submission` object.
    pub async fn submitted(&self, id: i64, key: &str, title: &str, body: &str) -> Value {
        let resp = self.submit(id, key, title, body).await;
        resp.assert_status(201);
        resp.json()["submission"].clone()
    }

    /// builder-bot reads back a receipt of grant `id`.
    pub async fn readback(&self, id: impl std::fmt::Display, key: &str) -> Resp {
        self.app
            .get(&readback_path(OWNER, REPO, id, key), Auth::Token(&self.bot))
            .await
    }

    /// builder-bot reads back a receipt, expecting 200: the `submission`.
    pub async fn receipt(&self, id: i64, key: &str) -> Value {
        let resp = self.readback(id, key).await;
        resp.assert_status(200);
        resp.json()["submission"].clone()
    }

    /// alice (every scope) reads one issue of `owner/repo`.
    pub async fn issue_at(&self, owner: &str, repo: &str, index: i64) -> Resp {
        self.app
            .get(
                &issue_path(owner, repo, index),
                Auth::Token(&self.alice_token),
            )
            .await
    }

    /// Every issue of `owner/repo` as alice lists them (all pages), checking
    /// that `X-Total-Count` agrees.
    pub async fn all_issues_of(&self, owner: &str, repo: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut total = None;
        for page in 1.. {
            let path = format!("{}?limit=50&page={page}", issues_path(owner, repo));
            let resp = self.app.get(&path, Auth::Token(&self.alice_token)).await;
            resp.assert_status(200);
            let count: usize = resp
                .header("x-total-count")
                .expect("X-Total-Count")
                .parse()
                .expect("numeric X-Total-Count");
            total = Some(count);
            let items = resp.json().as_array().expect("a JSON array").clone();
            if items.is_empty() {
                break;
            }
            out.extend(items);
            if out.len() >= count {
                break;
            }
        }
        assert_eq!(
            Some(out.len()),
            total,
            "X-Total-Count disagrees with the pages"
        );
        out
    }

    /// Every issue of acme/widgets.
    pub async fn all_issues(&self) -> Vec<Value> {
        self.all_issues_of(OWNER, REPO).await
    }

    /// The admin deletes issue `index` of `owner/repo`: the response.
    pub async fn delete_issue(&self, owner: &str, repo: &str, index: i64) -> Resp {
        self.app
            .send(
                reqwest::Method::DELETE,
                &issue_path(owner, repo, index),
                Auth::Token(&self.app.admin_token),
                crate::helpers::Body::None,
            )
            .await
    }

    /// The admin transfers issue `index` of `owner/repo` to `to`: the response.
    pub async fn transfer_issue(&self, owner: &str, repo: &str, index: i64, to: &str) -> Resp {
        let path = format!("{}/transfer", issue_path(owner, repo, index));
        self.app
            .post_json(&path, Auth::Token(&self.app.admin_token), json!({"to": to}))
            .await
    }
}

/// The `submission` of a submit or readback answer, checking that the
/// envelope is exactly `{grant, submission}`.
#[track_caller]
pub fn submission_of(resp: &Resp) -> Value {
    let json = resp.json();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {}", resp.body))
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["grant", "submission"], "envelope: {}", resp.body);
    json["submission"].clone()
}

/// An RFC 3339 timestamp string.
pub fn is_timestamp(value: &Value) -> bool {
    use time::format_description::well_known::Rfc3339;
    value
        .as_str()
        .is_some_and(|s| time::OffsetDateTime::parse(s, &Rfc3339).is_ok())
}

/// 64 lowercase hex characters.
pub fn is_hex64(value: &Value) -> bool {
    value.as_str().is_some_and(|s| {
        s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The sorted keys of a JSON object.
#[track_caller]
pub fn keys_of(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect();
    keys.sort_unstable();
    keys
}
