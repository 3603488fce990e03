//! The world the catalogue runs against: the standard fixture plus a grant
//! in every state a route acts on, receipts and issues, a spare token, a
//! second repository, MCP health and tool grants, so that every handler
//! runs past authorization to the input it is given.

use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::Method;
use serde_json::{Value, json};

use super::probe::Fresh;
use crate::browser::Browser;
use crate::helpers::{ADMIN_LOGIN, ADMIN_PASSWORD, Auth, Body, TestApp, confirm_body};
use crate::world::{BOT, OWNER, Prepare, REPO, World, new_key, submit_body};

/// A human who logs in through the login form (its target user).
pub const LOGIN_USER: &str = "cat-login";
pub const LOGIN_PASSWORD: &str = "cat-login-password-1";
/// The repository issues are transferred to.
pub const OTHER_REPO: &str = "gadgets";
/// The MCP whose health the admin sets.
pub const MCP_ID: &str = "filesystem";
pub const TOOLS: [&str; 5] = [
    "list_agent_work_grants",
    "get_agent_work_grant",
    "confirm_agent_work_grant",
    "submit_agent_work_proposal",
    "get_agent_work_submission",
];

pub struct Fixture<'a> {
    pub world: World<'a>,
    /// The site admin, logged in (for `/admin/mcp`).
    pub root: Browser,
    /// awaiting_agent: confirmed by the agent routes.
    pub confirm_grant: i64,
    pub confirm_digest: String,
    /// awaiting_agent: edited by the edit form.
    pub edit_grant: i64,
    /// awaiting_human: approved by the approve form.
    pub approve_grant: i64,
    /// awaiting_human: withdrawn by the withdraw form.
    pub withdraw_grant: i64,
    /// active, with two receipts: submitted to and read.
    pub active_grant: i64,
    pub active_digest: String,
    pub receipt_key: String,
    /// Issue of acme/widgets read and transferred.
    pub issue: i64,
    /// Issue of acme/widgets deleted.
    pub doomed_issue: i64,
    /// A token of builder-bot that the admin revokes.
    pub spare_token: i64,
    /// A disabled webhook subscription (its host under `.invalid`, never
    /// resolved) with one failed delivery, retried by its route; and one
    /// the admin deletes.
    pub webhook: i64,
    pub webhook_delivery: i64,
    pub doomed_webhook: i64,
    /// An audit record already sealed (its proof route answers 200).
    pub sealed_call: i64,
    serial: AtomicU64,
}

impl<'a> Fixture<'a> {
    pub async fn new(app: &'a TestApp) -> Fixture<'a> {
        let world = World::new(app).await;
        app.create_repo(OWNER, OTHER_REPO, true).await;
        app.create_user(LOGIN_USER, "human", Some(LOGIN_PASSWORD))
            .await;
        let admin = Auth::Token(&app.admin_token);
        let grants = format!("/api/v1/admin/agents/{BOT}/tool-grants");
        app.send(Method::PUT, &grants, admin, Body::Json(tool_grants()))
            .await
            .assert_status(200);
        let health = format!("/api/v1/admin/mcp/{MCP_ID}/health");
        let body = json!({"installed": true, "healthy": true, "detail": "catalogue"});
        app.send(Method::PUT, &health, admin, Body::Json(body))
            .await
            .assert_status(200);

        let mut form = Prepare::new(BOT, "Catalogue: submissions");
        form.max_submissions = "1000".into();
        let active_grant = world.active_with(&form).await;
        let active_digest = world.digest(active_grant).await;
        let receipt_key = new_key();
        let first = world
            .submitted(active_grant, &receipt_key, "First receipt", "text")
            .await;
        let second = world
            .submitted(active_grant, &new_key(), "Second receipt", "text")
            .await;
        let confirm_grant = world.prepare("Catalogue: confirm").await;
        let confirm_digest = world.digest(confirm_grant).await;
        let edit_grant = world.prepare("Catalogue: edit").await;
        let approve_grant = world.confirmed("Catalogue: approve").await;
        let withdraw_grant = world.confirmed("Catalogue: withdraw").await;
        let spare_token = app.create_token(BOT, &["read:repository"]).await.id;
        let (webhook, webhook_delivery) = failed_delivery(app).await;
        let doomed_webhook = disabled_webhook(app, "doomed").await;
        let sealed_call = sealed_call(app).await;
        let root = Browser::logged_in(&app.base, ADMIN_LOGIN, ADMIN_PASSWORD).await;
        let index = |s: &Value| s["issue"]["index"].as_i64().expect("issue index");
        Fixture {
            issue: index(&first),
            doomed_issue: index(&second),
            world,
            root,
            confirm_grant,
            confirm_digest,
            edit_grant,
            approve_grant,
            withdraw_grant,
            active_grant,
            active_digest,
            receipt_key,
            spare_token,
            webhook,
            webhook_delivery,
            doomed_webhook,
            sealed_call,
            serial: AtomicU64::new(1),
        }
    }

    pub fn app(&self) -> &'a TestApp {
        self.world.app
    }

    /// A number no other request used: unique names for creating routes.
    pub fn serial(&self) -> u64 {
        self.serial.fetch_add(1, Ordering::Relaxed)
    }

    /// A new grant of acme/widgets for builder-bot in the given state.
    pub async fn fresh_grant(&self, fresh: Fresh) -> i64 {
        match fresh {
            Fresh::Prepared => self.world.prepare("Catalogue: fresh").await,
            Fresh::Confirmed => self.world.confirmed("Catalogue: fresh").await,
        }
    }

    /// The valid value of a path parameter of an API operation.
    pub fn path_base(&self, operation: &str, name: &str) -> Option<String> {
        Some(match (operation, name) {
            (_, "owner") => OWNER.into(),
            (_, "repo") => REPO.into(),
            ("confirm_grant", "grant_id") => self.confirm_grant.to_string(),
            (_, "grant_id") => self.active_grant.to_string(),
            (_, "request_key") => self.receipt_key.clone(),
            ("delete_issue", "index") => self.doomed_issue.to_string(),
            (_, "index") => self.issue.to_string(),
            ("put_collaborator" | "delete_collaborator", "login") => "rival-bot".into(),
            (_, "login") => BOT.into(),
            (_, "token_id") => self.spare_token.to_string(),
            (_, "mcp_id") => MCP_ID.into(),
            ("report", "name") => "receipts".into(),
            ("delete_webhook", "id") => self.doomed_webhook.to_string(),
            (_, "id") => self.webhook.to_string(),
            (_, "delivery_id") => self.webhook_delivery.to_string(),
            ("audit_call_proof", "call_id") => self.sealed_call.to_string(),
            _ => return None,
        })
    }

    /// The valid query of an API operation (parameters left out are
    /// optional and get their junk on their own).
    pub fn query_base(&self, operation: &str) -> Vec<(&'static str, String)> {
        let pairs: &[(&str, &str)] = match operation {
            "list_grants" => &[("page", "1"), ("limit", "30"), ("state", "all")],
            "list_issues" => &[("page", "1"), ("limit", "30")],
            "events_feed" => &[("limit", "10")],
            "list_webhook_deliveries" => &[("limit", "10")],
            "report" => &[
                ("format", "json"),
                ("repo", "acme/widgets"),
                ("agent", BOT),
                ("since", "2000-01-01T00:00:00Z"),
                ("until", "2100-01-01T00:00:00Z"),
            ],
            _ => &[],
        };
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    }

    /// A valid body of an API operation; names that must be unique carry a
    /// fresh serial.
    pub fn body_base(&self, operation: &str) -> Option<Value> {
        let n = self.serial();
        Some(match operation {
            "confirm_grant" => confirm_body(&self.confirm_digest),
            "submit_work" => submit_body(&self.active_digest, &new_key(), "Catalogue", "text"),
            "create_issue" => json!({"title": "Catalogue issue", "body": "text"}),
            "transfer_issue" => json!({"to": format!("{OWNER}/{OTHER_REPO}")}),
            "create_user" => json!({
                "login": format!("cat-user-{n}"), "kind": "human",
                "password": "cat-user-password-1", "is_admin": false,
            }),
            "create_token" => json!({
                "name": format!("cat-token-{n}"), "scopes": ["read:repository"],
                "public_only": false, "repositories": [format!("{OWNER}/{REPO}")],
            }),
            "create_repo" => json!({
                "owner": OWNER, "name": format!("cat-repo-{n}"), "private": true,
                "require_distinct_approver": false,
            }),
            "put_collaborator" => json!({"permission": "write"}),
            "put_tool_grants" => tool_grants(),
            "put_mcp_health" => json!({"installed": true, "healthy": true, "detail": "catalogue"}),
            "create_webhook" => json!({
                "url": format!("https://hooks.example.invalid/cat-{n}"), "types": ["grant.*"],
                "repos": ["acme/*"], "format": "standard", "description": "catalogue",
                "enabled": false,
            }),
            "update_webhook" => json!({"description": format!("catalogue {n}")}),
            _ => return None,
        })
    }

    /// Valid arguments of an MCP tool.
    pub fn tool_base(&self, tool: &str) -> Option<Value> {
        let target = |id: i64| json!({"owner": OWNER, "repo": REPO, "grant_id": id});
        let mut args = match tool {
            "list_agent_work_grants" => return Some(json!({"page": 1, "state": "all"})),
            "get_agent_work_grant" => target(self.active_grant),
            "confirm_agent_work_grant" => {
                let mut args = target(self.confirm_grant);
                extend(&mut args, confirm_body(&self.confirm_digest));
                args
            }
            "submit_agent_work_proposal" => {
                let mut args = target(self.active_grant);
                let body = submit_body(&self.active_digest, &new_key(), "Catalogue", "text");
                extend(&mut args, body);
                args
            }
            "get_agent_work_submission" => target(self.active_grant),
            _ => return None,
        };
        if tool == "get_agent_work_submission" {
            args["request_key"] = json!(self.receipt_key);
        }
        Some(args)
    }
}

/// A disabled subscription whose host is under `.invalid`: never resolved,
/// never called.
async fn disabled_webhook(app: &TestApp, name: &str) -> i64 {
    let body = json!({"url": format!("https://hooks.example.invalid/{name}"), "enabled": false});
    let resp = app
        .send(
            Method::POST,
            "/api/v1/admin/webhooks",
            Auth::Token(&app.admin_token),
            Body::Json(body),
        )
        .await;
    resp.assert_status(201);
    resp.json()["id"].as_i64().expect("subscription id")
}

/// The first record of the first seal, sealed now (on PostgreSQL a round
/// may have to wait for older transactions of other tests to end).
async fn sealed_call(app: &TestApp) -> i64 {
    let ctx = app.writ().ctx();
    for _ in 0..200 {
        writ::service::seal::seal_all(ctx, None)
            .await
            .expect("seal");
        let mut tx = ctx.store.read().await.expect("read");
        if let Some(seal) = writ::store::seal::latest(&mut tx)
            .await
            .expect("latest seal")
        {
            let ids: Vec<i64> = serde_json::from_str(&seal.call_ids).expect("call ids");
            return ids[0];
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no record sealed within 10 s");
}

/// A disabled subscription and a failed delivery of it (written with SQL:
/// a disabled subscription gets none, and an enabled one would be called).
async fn failed_delivery(app: &TestApp) -> (i64, i64) {
    let id = disabled_webhook(app, "catalogue").await;
    let mut conn = crate::db::SqlConn::connect(&app.database_url()).await;
    conn.execute(&format!(
        "INSERT INTO webhook_deliveries (subscription_id, event_id, status, attempts, \
         next_attempt_at, last_error, created_at) SELECT {id}, max(id), 'failed', 1, \
         '2026-01-01T00:00:00.000000Z', 'catalogue', '2026-01-01T00:00:00.000000Z' FROM events"
    ))
    .await
    .expect("insert a delivery");
    let rows = conn
        .text_rows("SELECT CAST(max(id) AS TEXT) FROM webhook_deliveries")
        .await;
    conn.close().await;
    let delivery = rows[0][0]
        .as_deref()
        .expect("a delivery")
        .parse()
        .expect("an id");
    (id, delivery)
}

/// builder-bot's tool grants: every tool on any repository.
fn tool_grants() -> Value {
    json!({"grants": [{"id": "catalogue", "tools": TOOLS, "repos": []}]})
}

fn extend(target: &mut Value, more: Value) {
    if let (Value::Object(t), Value::Object(m)) = (target, more) {
        t.extend(m);
    }
}
