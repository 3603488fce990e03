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
