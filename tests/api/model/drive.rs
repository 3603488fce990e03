//! The system under test: a fresh Writ on loopback with the model's
//! fixture, driven over real HTTP (the native routes, the browser forms and
//! `/mcp`), every answer compared with the model's prediction.

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::reference::{
    Access, Bot, Cred, DigestPick, EditSpec, Expect, Expiry, Form, FsAction, GrantFacts, Human,
    Model, Op, ReceiptFacts, Reqs, Tools, Via,
};
use crate::browser::{Browser, nonce_in, state_revision_in};
use crate::db::SqlConn;
use crate::helpers::{Auth, Backend, Body, OTHER_DIGEST, Resp, TestApp, confirm_body, grant_path};
use crate::world::{
    ALL_SCOPES, BOT_SCOPES, OWNER, Prepare, REPO, action_path, page_path, prepared_id,
    readback_path, submit_body, submit_path,
};

const OTHER_REPO: &str = "other";
const MISSING_GRANT: i64 = 999_999;

/// The request keys of the four key slots; the same slot is the same key on
/// every grant (a key belongs to its grant, not to the bot).
const KEYS: [&str; 4] = [
    "0f8fad5b-d9cb-469f-a165-70867728950e",
    "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "16fd2706-8baf-433b-82eb-8c7fada847da",
    "886313e1-3b8a-4372-9b90-0c9aee199e5d",
];

fn login(h: Human) -> &'static str {
    match h {
        Human::Alice => "alice",
        Human::Bob => "bob",
        Human::Carol => "carol",
    }
}

fn bot_login(b: Bot) -> &'static str {
    match b {
        Bot::Builder => "builder-bot",
        Bot::Rival => "rival-bot",
    }
}

fn requirements(reqs: Reqs) -> Option<String> {
    let one = |fields: &str| format!("[{{\"agent\":\"qa\",{fields}}}]");
    match reqs {
        Reqs::Nothing => None,
        Reqs::FsRequired => Some(one(
            r#""mcp_id":"filesystem","requirement":"required","capabilities":["filesystem.project.read"],"fallback":"block""#,
        )),
        Reqs::FsOptional => Some(one(
            r#""mcp_id":"filesystem","requirement":"optional","capabilities":["filesystem.project.read","filesystem.project.search"],"fallback":"continue_without_mcp""#,
        )),
        Reqs::Deferred => Some(one(
            r#""mcp_id":"github","requirement":"optional","capabilities":["github.pull_requests.create"],"fallback":"continue_without_mcp""#,
        )),
        Reqs::Typo => Some(one(
            r#""mcp_id":"filesystem","requirement":"required","capabilities":["filesystem.project.raed"],"fallback":"block""#,
        )),
    }
}

/// A loaded grant page: its nonces by form and the revision it displayed.
struct Tab {
    nonces: Vec<(Form, String)>,
    revision: String,
}

/// One fresh Writ and the fixture's credentials and browsers.
pub struct Sut {
    pub app: TestApp,
    clock: writ::domain::time::Clock,
    started: OffsetDateTime,
    humans: Vec<(Human, Browser)>,
    bot: String,
    rival: String,
    read_only: String,
    elsewhere: String,
    alice_token: String,
    /// Server ids of the model's grants, and each one's digests by version.
    ids: Vec<i64>,
    digests: Vec<Vec<String>>,
    tabs: Vec<((Human, usize), Tab)>,
    edits: u32,
    sql: SqlConn,
    widgets_id: i64,
}

impl Sut {
    pub async fn start(backend: Backend) -> Sut {
        let clock = writ::domain::time::Clock::default();
        let shared = clock.clone();
        let app = TestApp::spawn_with(backend, move |config| {
            config.nonce_seconds = super::reference::NONCE_SECONDS;
            config.clock = shared;
        })
        .await;
        app.create_user(OWNER, "human", None).await;
        for h in Human::ALL {
            let password = format!("{}-password-1", login(h));
            app.create_user(login(h), "human", Some(&password)).await;
        }
        app.create_user(bot_login(Bot::Builder), "bot", None).await;
        app.create_user(bot_login(Bot::Rival), "bot", None).await;
        let widgets = app.create_repo(OWNER, REPO, true).await;
        app.create_repo(OWNER, OTHER_REPO, true).await;
        app.set_collaborator(OWNER, REPO, "alice", "admin").await;
        app.set_collaborator(OWNER, REPO, "bob", "admin").await;
        app.set_collaborator(OWNER, REPO, "carol", "write").await;
        app.set_collaborator(OWNER, REPO, bot_login(Bot::Builder), "write")
            .await;
        app.set_collaborator(OWNER, REPO, bot_login(Bot::Rival), "write")
            .await;
        let bot = app
            .create_token(bot_login(Bot::Builder), BOT_SCOPES)
            .await
            .token;
        let rival = app
            .create_token(bot_login(Bot::Rival), BOT_SCOPES)
            .await
            .token;
        let read_only = app
            .create_token(bot_login(Bot::Builder), &["read:repository", "read:issue"])
            .await
            .token;
        let elsewhere = app
            .create_token_with(
                bot_login(Bot::Builder),
                json!({"name": "elsewhere", "scopes": BOT_SCOPES,
                       "repositories": [format!("{OWNER}/{OTHER_REPO}")]}),
            )
            .await
            .token;
        let alice_token = app.create_token("alice", ALL_SCOPES).await.token;
        let mut humans = Vec::new();
        for h in Human::ALL {
            let password = format!("{}-password-1", login(h));
            humans.push((h, Browser::logged_in(&app.base, login(h), &password).await));
        }
        let sql = SqlConn::connect(&app.database_url()).await;
        Sut {
            widgets_id: widgets["id"].as_i64().expect("repository id"),
            app,
            clock,
            started: OffsetDateTime::now_utc(),
            humans,
            bot,
            rival,
            read_only,
            elsewhere,
            alice_token,
            ids: Vec::new(),
            digests: Vec::new(),
            tabs: Vec::new(),
            edits: 0,
            sql,
        }
    }

    fn browser(&self, h: Human) -> &Browser {
        &self
            .humans
            .iter()
            .find(|(who, _)| *who == h)
            .expect("browser")
            .1
    }

    fn token(&self, cred: Cred) -> &str {
        match cred {
            Cred::Bot(Bot::Builder) => &self.bot,
            Cred::Bot(Bot::Rival) => &self.rival,
            Cred::BuilderReadOnly => &self.read_only,
            Cred::BuilderElsewhere => &self.elsewhere,
            Cred::HumanToken => &self.alice_token,
        }
    }

    fn id(&self, grant: usize) -> i64 {
        self.ids.get(grant).copied().unwrap_or(MISSING_GRANT)
    }

    /// The digest a pick means for a grant before the operation.
    fn digest(&self, grant: usize, pick: DigestPick) -> String {
        let versions = self.digests.get(grant).map(Vec::as_slice).unwrap_or(&[]);
        match pick {
            DigestPick::Current if !versions.is_empty() => versions[versions.len() - 1].clone(),
            DigestPick::Previous if versions.len() > 1 => versions[versions.len() - 2].clone(),
            _ => OTHER_DIGEST.to_owned(),
        }
    }

    fn expires_at(&self, expiry: Expiry, now_before: i64) -> Option<String> {
        let seconds = match expiry {
            Expiry::Never => return None,
            Expiry::In2500s => 2500,
            Expiry::In6500s => 6500,
        };
        // The server's clock is the real clock plus the model's advances.
        let real_elapsed = OffsetDateTime::now_utc() - self.started;
        let at = self.started + real_elapsed + time::Duration::seconds(now_before + seconds);
        let at = at.replace_nanosecond(0).expect("whole seconds");
        Some(at.format(&Rfc3339).expect("RFC 3339"))
    }

    async fn stored_digest(&mut self, id: i64) -> String {
        let rows = self
            .sql
            .text_rows(&format!(
                "SELECT proposal_digest FROM grants WHERE id = {id}"
            ))
            .await;
        rows[0][0].clone().expect("a digest")
    }

    fn grant_form(
        &mut self,
        agent: Bot,
        max: u8,
        expires_at: Option<String>,
        reqs: Reqs,
    ) -> Prepare {
        self.edits += 1;
        let mut form = Prepare::new(bot_login(agent), &format!("Model task {}", self.edits));
        form.max_submissions = max.to_string();
        form.expires_at = expires_at;
        form.mcp_requirements = requirements(reqs);
        form
    }

    /// Runs one operation against the server: its answer in the model's
    /// terms. `now` is the model's clock when it runs.
    pub async fn run(&mut self, now: i64, op: &Op) -> Observed {
        match op {
            Op::Prepare {
                by,
                agent,
                max,
                expiry,
                reqs,
            } => {
                let expires = self.expires_at(*expiry, now);
                let form = self.grant_form(*agent, *max, expires, *reqs);
                let resp = self.browser(*by).prepare(OWNER, REPO, &form).await;
                let mut seen = Observed::of_page(&resp);
                if resp.status.as_u16() == 303 {
                    let id = prepared_id(&resp, &self.app.base, OWNER, REPO);
                    let digest = self.stored_digest(id).await;
                    self.ids.push(id);
                    self.digests.push(vec![digest]);
                    seen.prepared = Some(self.ids.len() - 1);
                }
                seen
            }
            Op::Open { by, grant } => {
                let id = self.id(*grant);
                let resp = self
                    .browser(*by)
                    .get_page(&page_path(OWNER, REPO, id))
                    .await;
                let mut seen = Observed::of_page(&resp);
                if resp.status.as_u16() == 200 {
                    let mut nonces = Vec::new();
                    let mut revision = String::new();
                    for (form, action) in [
                        (Form::Edit, "edit"),
                        (Form::Approve, "approve"),
                        (Form::Withdraw, "withdraw"),
                    ] {
                        let path = action_path(OWNER, REPO, id, action);
                        if let Some(nonce) = nonce_in(&resp.body, &path) {
                            nonces.push((form, nonce));
                            revision = state_revision_in(&resp.body, &path).unwrap_or_default();
                        }
                    }
                    let forms: BTreeSet<Form> = nonces.iter().map(|(f, _)| *f).collect();
                    let shown = revision.parse().unwrap_or(0);
                    seen.page = Some((shown, forms));
                    self.tabs.retain(|(key, _)| *key != (*by, *grant));
                    self.tabs.push(((*by, *grant), Tab { nonces, revision }));
                }
                seen
            }
            Op::Post {
                by,
                grant,
                form,
                acknowledge,
                edit,
            } => {
                self.post(now, *by, *grant, *form, *acknowledge, *edit)
                    .await
            }
            Op::Read { cred, grant, via } => {
                let args = json!({"owner": OWNER, "repo": REPO, "grant_id": self.id(*grant)});
                let path = grant_path(OWNER, REPO, self.id(*grant));
                self.agent(
                    *cred,
                    *via,
                    "get_agent_work_grant",
                    Method::GET,
                    &path,
                    args,
                    None,
                )
                .await
            }
            Op::Confirm {
                cred,
                grant,
                digest,
                via,
            } => {
                let digest = self.digest(*grant, *digest);
                let body = confirm_body(&digest);
                let mut args = body.clone();
                args["owner"] = json!(OWNER);
                args["repo"] = json!(REPO);
                args["grant_id"] = json!(self.id(*grant));
                let path = format!("{}/confirm", grant_path(OWNER, REPO, self.id(*grant)));
                self.agent(
                    *cred,
                    *via,
                    "confirm_agent_work_grant",
                    Method::POST,
                    &path,
                    args,
                    Some(body),
                )
                .await
            }
            Op::Submit {
                cred,
                grant,
                key,
                title,
                digest,
                via,
            } => {
                let digest = self.digest(*grant, *digest);
                let title = format!("Model title {title}");
                let body = submit_body(&digest, KEYS[*key as usize], &title, "Model body\n");
                let mut args = body.clone();
                args["owner"] = json!(OWNER);
                args["repo"] = json!(REPO);
                args["grant_id"] = json!(self.id(*grant));
                let path = submit_path(OWNER, REPO, self.id(*grant));
                self.agent(
                    *cred,
                    *via,
                    "submit_agent_work_proposal",
                    Method::POST,
                    &path,
                    args,
                    Some(body),
                )
                .await
            }
            Op::Readback {
                cred,
                grant,
                key,
                via,
            } => {
                let key = KEYS[*key as usize];
                let args = json!({"owner": OWNER, "repo": REPO, "grant_id": self.id(*grant), "request_key": key});
                let path = readback_path(OWNER, REPO, self.id(*grant), key);
                self.agent(
                    *cred,
                    *via,
                    "get_agent_work_submission",
                    Method::GET,
                    &path,
                    args,
                    None,
                )
                .await
            }
            Op::DeleteIssue { nth } | Op::TransferIssue { nth } => {
                let present = self.present_issues().await;
                let index = if present.is_empty() {
                    9_999
                } else {
                    present[*nth as usize % present.len()]
                };
                let path = format!("/api/v1/repos/{OWNER}/{REPO}/issues/{index}");
                let admin = Auth::Token(&self.app.admin_token);
                let resp = match op {
                    Op::DeleteIssue { .. } => {
                        self.app
                            .send(Method::DELETE, &path, admin, Body::None)
                            .await
                    }
                    _ => {
                        let to = json!({"to": format!("{OWNER}/{OTHER_REPO}")});
                        self.app
                            .post_json(&format!("{path}/transfer"), admin, to)
                            .await
                    }
                };
                Observed::of_page(&resp)
            }
            Op::SetHealth { installed, healthy } => {
                let body = json!({"installed": installed, "healthy": healthy, "detail": "set by the model"});
                let resp = self
                    .app
                    .send(
                        Method::PUT,
                        "/api/v1/admin/mcp/filesystem/health",
                        Auth::Token(&self.app.admin_token),
                        Body::Json(body),
                    )
                    .await;
                Observed::of_page(&resp)
            }
            Op::FsContext { by, action } => {
                let settings = format!("/{OWNER}/{REPO}/settings/filesystem-context");
                let browser = self.browser(*by);
                let page = browser.get_page(&settings).await;
                page.assert_status(200);
                let nonce = nonce_in(&page.body, &settings).expect("settings form nonce");
                let mut fields = vec![("nonce".to_owned(), nonce)];
                let (name, bits) = match action {
                    FsAction::Approve(bits) => ("approve", *bits),
                    FsAction::Deny => ("deny", 0),
                    FsAction::Remove => ("remove", 0),
                };
                fields.push(("action".to_owned(), name.to_owned()));
                for (bit, cap) in [(1, "read"), (2, "list"), (4, "search")] {
                    if bits & bit != 0 {
                        fields.push(("capabilities".to_owned(), cap.to_owned()));
                    }
                }
                let resp = browser
                    .post_form(&settings, &fields, Some(&browser.origin()))
                    .await;
                Observed::of_page(&resp)
            }
            Op::SetAccess { bot, access } => {
                let path = format!(
                    "/api/v1/repos/{OWNER}/{REPO}/collaborators/{}",
                    bot_login(*bot)
                );
                let admin = Auth::Token(&self.app.admin_token);
                let resp = match access {
                    Access::Removed => {
                        self.app
                            .send(Method::DELETE, &path, admin, Body::None)
                            .await
                    }
                    Access::Read | Access::Write => {
                        let permission = if *access == Access::Read {
                            "read"
                        } else {
                            "write"
                        };
                        self.app
                            .send(
                                Method::PUT,
                                &path,
                                admin,
                                Body::Json(json!({"permission": permission})),
                            )
                            .await
                    }
                };
                Observed::of_page(&resp)
            }
            Op::SetTools { bot, tools } => {
                let grants = match tools {
                    Tools::All => json!([{"id": "all", "repos": [], "tools": [
                        "list_agent_work_grants", "get_agent_work_grant", "confirm_agent_work_grant",
                        "submit_agent_work_proposal", "get_agent_work_submission"]}]),
                    Tools::ReadOnly => json!([{"id": "read", "repos": [format!("{OWNER}/{REPO}")],
                        "tools": ["get_agent_work_grant", "get_agent_work_submission"]}]),
                    Tools::Nothing => json!([]),
                };
                let path = format!("/api/v1/admin/agents/{}/tool-grants", bot_login(*bot));
                let resp = self
                    .app
                    .send(
                        Method::PUT,
                        &path,
                        Auth::Token(&self.app.admin_token),
                        Body::Json(json!({"grants": grants})),
                    )
                    .await;
                Observed::of_page(&resp)
            }
            Op::Advance { seconds } => {
                self.clock.advance(*seconds);
                Observed::default()
            }
        }
    }

    async fn post(
        &mut self,
        now: i64,
        by: Human,
        grant: usize,
        form: Form,
        acknowledge: bool,
        edit: EditSpec,
    ) -> Observed {
        let id = self.id(grant);
        let (nonce, revision) = {
            let tab = &self
                .tabs
                .iter()
                .find(|(key, _)| *key == (by, grant))
                .expect("a tab")
                .1;
            let nonce = tab
                .nonces
                .iter()
                .find(|(f, _)| *f == form)
                .expect("the form")
                .1
                .clone();
            (nonce, tab.revision.clone())
        };
        let mut fields = vec![
            ("nonce".to_owned(), nonce),
            ("state_revision".to_owned(), revision),
        ];
        let action = match form {
            Form::Edit => {
                let expires = self.expires_at(edit.expiry, now);
                let prepare = self.grant_form(edit.agent, edit.max, expires, edit.reqs);
                fields.extend(prepare.fields());
                "edit"
            }
            Form::Approve => {
                if acknowledge {
                    fields.push(("acknowledge_warnings".to_owned(), "on".to_owned()));
                }
                "approve"
            }
            Form::Withdraw => {
                fields.push(("reason".to_owned(), "the model withdrew it".to_owned()));
                "withdraw"
            }
        };
        let browser = self.browser(by);
        let resp = browser
            .post_form(
                &action_path(OWNER, REPO, id, action),
                &fields,
                Some(&browser.origin()),
            )
            .await;
        if resp.status.as_u16() == 303 && form == Form::Edit {
            let digest = self.stored_digest(id).await;
            self.digests[grant].push(digest);
        }
        Observed::of_page(&resp)
    }

    /// An agent call over the native route or its `/mcp` tool.
    #[allow(clippy::too_many_arguments)]
    async fn agent(
        &self,
        cred: Cred,
        via: Via,
        tool: &str,
        method: Method,
        path: &str,
        args: Value,
        body: Option<Value>,
    ) -> Observed {
        let token = self.token(cred);
        match via {
            Via::Api => {
                let body = body.map_or(Body::None, Body::Json);
                let resp = self.app.send(method, path, Auth::Token(token), body).await;
                Observed::of_api(&resp)
            }
            Via::Mcp => {
                let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                     "params": {"name": tool, "arguments": args}});
                let response = self
                    .app
                    .client
                    .post(self.app.url("/mcp"))
                    .header("Authorization", format!("Bearer {token}"))
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream")
                    .body(request.to_string())
                    .send()
                    .await
                    .expect("POST /mcp");
                let resp = Resp::read(response).await;
                assert_eq!(resp.status.as_u16(), 200, "/mcp answered: {}", resp.body);
                Observed::of_tool(&resp.json()["result"])
            }
        }
    }

    /// Indexes of the issues still in acme/widgets, ascending.
    async fn present_issues(&mut self) -> Vec<i64> {
        let sql = format!(
            "SELECT CAST(issue_index AS TEXT) FROM issues WHERE repository_id = {} ORDER BY issue_index",
            self.widgets_id
        );
        self.sql
            .text_rows(&sql)
            .await
            .into_iter()
            .map(|row| row[0].as_deref().unwrap_or("0").parse().expect("an index"))
            .collect()
    }

    /// The stored state of every grant and of acme/widgets' issues, against
    /// the model.
    pub async fn check_stored(&mut self, model: &Model) -> Result<(), String> {
        for (i, g) in model.grants.iter().enumerate() {
            let id = self.ids[i];
            let rows = self
                .sql
                .text_rows(&format!(
                    "SELECT state, CAST(state_revision AS TEXT), CAST(submission_count AS TEXT), proposal_digest FROM grants WHERE id = {id}"
                ))
                .await;
            let row = &rows[0];
            let stored = (
                row[0].clone().unwrap_or_default(),
                row[1].clone().unwrap_or_default(),
                row[2].clone().unwrap_or_default(),
                row[3].clone().unwrap_or_default(),
            );
            let digest = self.digests[i]
                .get(g.version as usize - 1)
                .cloned()
                .unwrap_or_default();
            let wanted = (
                g.state.as_str().to_owned(),
                g.revision.to_string(),
                g.count.to_string(),
                digest,
            );
            if stored != wanted {
                return Err(format!(
                    "grant {i} (id {id}) is stored as {stored:?}, the model has {wanted:?}"
                ));
            }
        }
        let present = self.present_issues().await;
        if present != model.present_issues() {
            return Err(format!(
                "acme/widgets holds issues {present:?}, the model {:?}",
                model.present_issues()
            ));
        }
        Ok(())
    }

    /// Audit records written: one per agent call, allowed or refused.
    pub async fn audit_records(&mut self) -> u64 {
        let rows = self
            .sql
            .text_rows("SELECT CAST(count(*) AS TEXT) FROM tool_calls")
            .await;
        rows[0][0]
            .as_deref()
            .unwrap_or("0")
            .parse()
            .expect("a count")
    }
}

/// An answer in the model's terms.
#[derive(Debug, Default, PartialEq)]
pub struct Observed {
    pub status: u16,
    pub code: Option<String>,
    pub grant: Option<GrantFacts>,
    pub receipt: Option<(i64, String)>,
    pub replayed: bool,
    pub page: Option<(i64, BTreeSet<Form>)>,
    pub prepared: Option<usize>,
}

fn grant_facts(grant: &Value) -> Option<GrantFacts> {
    let state = match grant["state"].as_str()? {
        "awaiting_agent" => super::reference::State::AwaitingAgent,
        "awaiting_human" => super::reference::State::AwaitingHuman,
        "active" => super::reference::State::Active,
        "revoked" => super::reference::State::Revoked,
        _ => return None,
    };
    Some(GrantFacts {
        state,
        revision: grant["state_revision"].as_i64()?,
        count: grant["submission_count"].as_i64()?,
    })
}

fn receipt(submission: &Value) -> Option<(i64, String)> {
    Some((
        submission["issue"]["index"].as_i64()?,
        submission["status"].as_str()?.to_owned(),
    ))
}

impl Observed {
    fn of_page(resp: &Resp) -> Observed {
        Observed {
            status: resp.status.as_u16(),
            ..Observed::default()
        }
    }

    fn of_api(resp: &Resp) -> Observed {
        let json: Value = serde_json::from_str(&resp.body).unwrap_or(Value::Null);
        Observed {
            status: resp.status.as_u16(),
            code: json["code"].as_str().map(str::to_owned),
            grant: grant_facts(&json["grant"]),
            receipt: receipt(&json["submission"]),
            replayed: resp.header("idempotent-replayed").as_deref() == Some("true"),
            ..Observed::default()
        }
    }

    fn of_tool(result: &Value) -> Observed {
        let content = &result["structuredContent"];
        let status = content["native_status"].as_u64().unwrap_or(0) as u16;
        Observed {
            status,
            code: content["code"].as_str().map(str::to_owned),
            grant: grant_facts(&content["grant"]),
            receipt: receipt(&content["submission"]),
            replayed: status == 200 && content["submission"].is_object(),
            ..Observed::default()
        }
    }

    /// Where the answer differs from the prediction, in words.
    pub fn differences(&self, expect: &Expect, op: &Op) -> Option<String> {
        let mut out = Vec::new();
        if self.status != expect.status {
            out.push(format!("status {} (model: {})", self.status, expect.status));
        }
        if let Some(code) = expect.code
            && self.code.as_deref() != Some(code)
        {
            out.push(format!("code {:?} (model: {code})", self.code));
        }
        if let Some(grant) = expect.grant
            && self.grant != Some(grant)
        {
            out.push(format!("grant {:?} (model: {grant:?})", self.grant));
        }
        if let Some(ReceiptFacts { index, status }) = expect.receipt
            && self.receipt != Some((index, status.to_owned()))
        {
            out.push(format!(
                "receipt {:?} (model: {index} {status})",
                self.receipt
            ));
        }
        let is_submit = matches!(op, Op::Submit { .. });
        if is_submit && self.replayed != expect.replayed {
            out.push(format!(
                "replayed {} (model: {})",
                self.replayed, expect.replayed
            ));
        }
        if let (Some(page), Some((revision, forms))) = (&self.page, &expect.page)
            && (page.1 != *forms || (!forms.is_empty() && page.0 != *revision))
        {
            out.push(format!("page {page:?} (model: {revision} {forms:?})"));
        }
        if self.prepared != expect.prepared {
            out.push(format!(
                "prepared {:?} (model: {:?})",
                self.prepared, expect.prepared
            ));
        }
        (!out.is_empty()).then(|| out.join("; "))
    }
}
